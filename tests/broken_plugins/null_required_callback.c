/* Broken: a required SP_StreamExecutor callback (memcpy_htod) is NULL.
 * Expected: quarantined, "SP_StreamExecutor.memcpy_htod is NULL". */
#define MINI_SE_HOOK(se) se->memcpy_htod = NULL;
#include "mini_device.h"
