/* Broken: only some timer callbacks are set.
 * Expected: quarantined, "timer callbacks (create_timer, destroy_timer,
 * start_timer, stop_timer) must be set all together". */
#define MINI_SE_HOOK(se) se->stop_timer = NULL;
#include "mini_device.h"
