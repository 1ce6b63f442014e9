/* Legal: reports 0 devices (no hardware present). Must load with 0 devices;
 * the conformance suite fails because there is no device to check. */
#define MINI_DEVICE_COUNT 0
#include "mini_device.h"
