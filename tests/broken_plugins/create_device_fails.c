/* Broken: create_device fails.
 * Expected: quarantined,
 * "SP_PlatformFns.create_device failed for device 0: no such hardware". */
#define MINI_DEVICE_HOOK(params, status) \
  TF_SetStatus(status, TF_UNAVAILABLE, "no such hardware");
#include "mini_device.h"
