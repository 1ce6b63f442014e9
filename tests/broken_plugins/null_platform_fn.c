/* Broken: the required SP_PlatformFns.create_device is NULL.
 * Expected: quarantined, "SP_PlatformFns.create_device is NULL". */
#define MINI_INIT_HOOK(params, status) params->platform_fns->create_device = NULL;
#include "mini_device.h"
