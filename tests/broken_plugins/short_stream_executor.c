/* Broken: SP_StreamExecutor.struct_size ends after synchronize_all_activity,
 * before mem_zero, memset, memset32 and host_callback. host_callback is
 * required, so the plugin is rejected.
 * Expected: quarantined, "SP_StreamExecutor.host_callback is required, but
 * the plugin's SP_StreamExecutor.struct_size". */
#define MINI_SE_HOOK(se) \
  se->struct_size = TF_OFFSET_OF_END(SP_StreamExecutor, synchronize_all_activity);
#include "mini_device.h"
