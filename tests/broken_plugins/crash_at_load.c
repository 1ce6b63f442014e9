/* Broken: SE_InitPlugin crashes (SIGSEGV). Never load it in-process: probe
 * mode loads it in a subprocess and quarantines it with "crashed with
 * SIGSEGV while loading (in SE_InitPlugin)". */
#include <signal.h>
#define MINI_INIT_HOOK(params, status) raise(SIGSEGV);
#include "mini_device.h"
