/* A test device (tests/broken_plugins/mini_device.h) that exports the
 * host-copy extension (pluggable_host_copy.h) in one of several forms,
 * picked at build time with -DHCOPY_MODE:
 *
 *   0  the extension as it should be: memcpy_htod_consumed copies at once
 *      (device memory is host memory here), counts its calls and remembers
 *      the source address it was given (hcopy_calls, hcopy_last_source);
 *   1  version 0 (absent);
 *   2  version 1 with memcpy_htod_consumed NULL (not supported);
 *   3  memcpy_htod_consumed fails with TF_INTERNAL and copies nothing.
 *
 * Build with -I tests/broken_plugins and distinct MINI_DEVICE_TYPE and
 * MINI_PLATFORM_NAME per mode. */
#include <stdint.h>
#include <string.h>

#include "pluggable_host_copy.h"

#include "mini_device.h"

#ifndef HCOPY_MODE
#define HCOPY_MODE 0
#endif

static int64_t calls;
static const void* last_source;

int64_t hcopy_calls(void) { return calls; }
const void* hcopy_last_source(void) { return last_source; }

static void consumed(const SP_Device* device, SP_Stream stream,
                     SP_DeviceMemoryBase* device_dst, const void* host_src,
                     uint64_t size, TF_Status* status) {
  (void)device;
  (void)stream;
  calls++;
  last_source = host_src;
  if (HCOPY_MODE == 3) {
    TF_SetStatus(status, TF_INTERNAL, "planted failure of memcpy_htod_consumed");
    return;
  }
  memcpy(device_dst->opaque, host_src, size);
}

void PG_GetHostCopyFns(PG_HostCopyFns* fns) {
  if (fns == NULL || fns->struct_size < sizeof(PG_HostCopyFns)) return;
  fns->version = HCOPY_MODE == 1 ? 0 : PG_HOST_COPY_VERSION;
  fns->memcpy_htod_consumed = HCOPY_MODE == 2 ? NULL : consumed;
}
