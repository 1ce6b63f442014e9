/* Broken: reports a negative device count.
 * Expected: quarantined, "reported -1 devices". */
#define MINI_DEVICE_COUNT -1
#include "mini_device.h"
