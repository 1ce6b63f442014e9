/* Broken: built for another major version of the StreamExecutor C API.
 * Expected: quarantined, "major versions must match". */
#define MINI_INIT_HOOK(params, status) params->major_version = SE_MAJOR + 1;
#include "mini_device.h"
