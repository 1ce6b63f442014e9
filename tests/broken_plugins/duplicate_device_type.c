/* Broken: claims MY_DEVICE, the device type of the host reference plugin
 * (and registers its Neg kernel for it).
 * Expected: quarantined, naming both files: "device type 'MY_DEVICE' of
 * <this file> is already provided by <the host plugin>". */
#define MINI_DEVICE_TYPE "MY_DEVICE"
#define MINI_PLATFORM_NAME "DUPLICATE_PLATFORM"
#include "mini_device.h"
