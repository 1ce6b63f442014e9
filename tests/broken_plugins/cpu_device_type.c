/* Broken: claims the reserved device type CPU.
 * Expected: quarantined, "CPU is reserved". */
#define MINI_DEVICE_TYPE "CPU"
#include "mini_device.h"
