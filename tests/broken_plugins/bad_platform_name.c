/* Broken: the platform name has lower-case letters and a space.
 * Expected: quarantined, "is not a valid platform name". */
#define MINI_PLATFORM_NAME "my platform"
#include "mini_device.h"
