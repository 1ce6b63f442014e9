/* Broken: SE_InitPlugin never returns. Never load it in-process: probe mode
 * quarantines it once PLUGGABLE_PROBE_TIMEOUT passes ("did not finish"). */
#include <unistd.h>
#define MINI_INIT_HOOK(params, status) for (;;) sleep(1);
#include "mini_device.h"
