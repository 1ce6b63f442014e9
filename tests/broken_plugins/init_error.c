/* Broken: SE_InitPlugin reports an error.
 * Expected: quarantined, "SE_InitPlugin failed: simulated init failure". */
#define MINI_INIT_HOOK(params, status) \
  TF_SetStatus(status, TF_INTERNAL, "simulated init failure");
#include "mini_device.h"
