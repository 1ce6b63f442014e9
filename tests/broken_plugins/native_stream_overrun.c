/* Broken: PG_GetNativeStreamFns fills the whole version-2 table whatever
 * struct_size the caller gives, writing past the end of a version-1
 * caller's table.
 * Expected: the "native stream" check fails, "wrote past struct_size". */
#include "mini_device.h"
#include "pluggable_native_stream.h"

void PG_GetNativeStreamFns(PG_NativeStreamFns* fns) {
  fns->version = PG_NATIVE_STREAM_VERSION;
  fns->kind = PG_NATIVE_STREAM_NONE;
  fns->native_stream = NULL;
  fns->compute_capability = NULL;
  fns->order_native = NULL;
}
