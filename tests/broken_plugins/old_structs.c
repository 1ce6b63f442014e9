/* Legal: built against an older header whose SP_Platform ended at
 * supports_unified_memory and whose SP_Device ended at device_vendor. The
 * fields past struct_size are treated as absent even though this plugin
 * writes them: it loads, use_bfc_allocator / force_memory_growth read 0 and
 * the device has no PCI bus id. */
#define MINI_INIT_HOOK(params, status)                                  \
  params->platform->struct_size =                                       \
      TF_OFFSET_OF_END(SP_Platform, supports_unified_memory);           \
  params->platform->use_bfc_allocator = 1;                              \
  params->platform->force_memory_growth = 1;
#define MINI_DEVICE_HOOK(params, status) \
  params->device->struct_size = TF_OFFSET_OF_END(SP_Device, device_vendor);
#include "mini_device.h"
