/* The native-stream extension (pluggable_native_stream.h) of the host
 * reference device: it has no native stream handle, and it declares
 * (kind PG_NATIVE_STREAM_NONE) that its device memory is host memory, so
 * the runtime may hand its tensors to host consumers (DLPack kDLCPU)
 * without copying. */
#include "pluggable_native_stream.h"

void PG_GetNativeStreamFns(PG_NativeStreamFns* fns) {
  if (fns == NULL || fns->struct_size < PG_NATIVE_STREAM_FNS_STRUCT_SIZE_V1) return;
  fns->version = 1;
  fns->kind = PG_NATIVE_STREAM_NONE;
  fns->native_stream = NULL;
  fns->compute_capability = NULL;
  if (fns->struct_size < PG_NATIVE_STREAM_FNS_STRUCT_SIZE) return;
  fns->version = 2;
  fns->order_native = NULL; /* no native streams to order with */
}
