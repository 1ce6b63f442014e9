/* pluggable_native_stream.h: an optional, versioned plugin extension through
 * which a device plugin hands the core the native handle behind an SP_Stream
 * (e.g. a cudaStream_t), so that code compiled outside the plugin (custom
 * ops, pg.custom_op with a .cu source) can enqueue work on the very stream
 * the plugin's kernels use, keeping stream order without synchronising.
 *
 * A plugin opts in by exporting
 *
 *     void PG_GetNativeStreamFns(PG_NativeStreamFns* fns);
 *
 * The core zero-fills `fns`, sets fns->struct_size to the size it knows and
 * calls it once per plugin after SE_InitPlugin. The plugin fills the fields
 * it supports and sets `version` to PG_NATIVE_STREAM_VERSION; a NULL
 * function means "not supported". The extension is a pluggable addition: it
 * is not part of TensorFlow's PluggableDevice C API, and a plugin without it
 * keeps working (custom ops then run on its devices only through the
 * host-callback path, or are refused with an explanation for GPU code).
 *
 * Version history:
 *   1: native_stream, compute_capability.
 *   2: order_native (stream order between an SP_Stream and a native stream
 *      of another library, for DLPack and __cuda_array_interface__
 *      exchanges).
 *
 * Growing the table: a plugin fills the fields of version 1 when
 * struct_size >= PG_NATIVE_STREAM_FNS_STRUCT_SIZE_V1 and those of version 2
 * only when struct_size >= PG_NATIVE_STREAM_FNS_STRUCT_SIZE, and sets
 * `version` to the highest version whose fields it filled, so that a core
 * built against either header and a plugin built against the other work
 * together.
 */
#ifndef PLUGGABLE_NATIVE_STREAM_H_
#define PLUGGABLE_NATIVE_STREAM_H_

#include <stddef.h>

#include "c_api_macros.h"
#include "stream_executor.h"
#include "tf_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PG_NATIVE_STREAM_VERSION 2

/* What a native handle is. */
typedef enum PG_NativeStreamKind {
  PG_NATIVE_STREAM_NONE = 0, /* no native handle: a host-memory device (its
                                device addresses are host pointers, so the
                                runtime hands its tensors to host consumers,
                                e.g. through DLPack as kDLCPU, in place) */
  PG_NATIVE_STREAM_CUDA = 1  /* a cudaStream_t (CUDA runtime API, which is
                                interchangeable with a CUstream); device
                                memory is CUDA memory (DLPack kDLCUDA) */
} PG_NativeStreamKind;

/* Which side of an order_native call waits for the other. */
typedef enum PG_NativeOrder {
  /* Work enqueued on the SP_Stream after the call runs after the work
   * enqueued on the native stream before it (importing another library's
   * data). */
  PG_ORDER_STREAM_AFTER_NATIVE = 0,
  /* Work enqueued on the native stream after the call runs after the work
   * enqueued on the SP_Stream before it (exporting to another library). */
  PG_ORDER_NATIVE_AFTER_STREAM = 1
} PG_NativeOrder;

typedef struct PG_NativeStreamFns {
  /* In: sizeof(PG_NativeStreamFns) as the core knows it. A plugin must not
   * write past it. */
  size_t struct_size;
  /* Out: the version the plugin implements (PG_NATIVE_STREAM_VERSION). */
  int version;
  /* Out: the kind of every handle native_stream returns. */
  PG_NativeStreamKind kind;
  /* Out: the native handle behind `stream` of `device`. It is owned by the
   * plugin and stays valid until the stream is destroyed; the caller only
   * enqueues work on it (never destroys or synchronises it itself: use
   * SP_StreamExecutor for that). Work the plugin accepted for the device
   * before the call is on the native stream when it returns (a plugin that
   * issues work from a thread of its own issues what it holds first), so a
   * caller asks again right before each time it enqueues on the handle. The current device of the calling thread is
   * not changed: a caller that needs it sets it from compute_capability's
   * `ordinal`. Sets `status` and returns NULL on failure. */
  void* (*native_stream)(const SP_Device* device, SP_Stream stream,
                         TF_Status* status);
  /* Out: the compute capability (CUDA: major.minor, e.g. 9.0) and the
   * native device ordinal of `device`; returns 0 and leaves them unset where
   * the notion does not apply. */
  int (*compute_capability)(const SP_Device* device, int* major, int* minor,
                            int* native_ordinal);

  /* Version 2. Orders `stream` of `device` and `native`, a native stream of
   * the same device made by any library, as `order` says, without a host
   * wait (CUDA: an event recorded on one stream and waited for on the
   * other). For PG_NATIVE_STREAM_CUDA, `native` may also be one of the
   * special handles as DLPack numbers them: 1 (cudaStreamLegacy, the legacy
   * default stream) and 2 (cudaStreamPerThread, the calling thread's
   * default stream), both of the device's CUDA device; 0 is not accepted.
   * Safe to call from several threads at once. Sets `status` on failure
   * (the streams are then not ordered). NULL: not supported. */
  void (*order_native)(const SP_Device* device, SP_Stream stream, void* native,
                       PG_NativeOrder order, TF_Status* status);
} PG_NativeStreamFns;

#define PG_NATIVE_STREAM_FNS_STRUCT_SIZE_V1 \
  TF_OFFSET_OF_END(PG_NativeStreamFns, compute_capability)
#define PG_NATIVE_STREAM_FNS_STRUCT_SIZE \
  TF_OFFSET_OF_END(PG_NativeStreamFns, order_native)

/* The symbol the core looks up (dlsym) in a plugin. */
#define PG_NATIVE_STREAM_SYMBOL "PG_GetNativeStreamFns"
typedef void (*PG_GetNativeStreamFnsFn)(PG_NativeStreamFns* fns);

#ifdef __cplusplus
}
#endif

#endif /* PLUGGABLE_NATIVE_STREAM_H_ */
