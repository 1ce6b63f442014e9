/* Broken: SP_Platform.struct_size is set to 0.
 * Expected: quarantined, "SP_Platform.struct_size is 0". */
#define MINI_INIT_HOOK(params, status) params->platform->struct_size = 0;
#include "mini_device.h"
