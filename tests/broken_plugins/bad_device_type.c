/* Broken: the device type is not upper case letters and underscores.
 * Expected: quarantined, "is not a valid device type". */
#define MINI_DEVICE_TYPE "my-device"
#include "mini_device.h"
