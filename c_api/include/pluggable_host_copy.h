/* pluggable_host_copy.h: an optional, versioned plugin extension for copies
 * from host memory that the caller may reuse as soon as the call returns.
 *
 * TensorFlow's SP_StreamExecutor.memcpy_htod reads its host source when the
 * stream reaches the copy, so the runtime must keep the source unchanged
 * until then: it copies a small source into a buffer of its own first, and
 * waits for the device after a large one (pg.constant, Tensor.to). A plugin
 * whose copy has read the source completely when it returns (staging it
 * through pinned buffers of its own, as the CUDA reference plugin does) says
 * so here; the runtime then hands it the caller's memory directly, with no
 * copy of its own and no wait.
 *
 * A plugin opts in by exporting
 *
 *     void PG_GetHostCopyFns(PG_HostCopyFns* fns);
 *
 * The core zero-fills `fns`, sets fns->struct_size to the size it knows and
 * calls it once per plugin after SE_InitPlugin. The plugin fills the fields
 * it supports (never writing past struct_size) and sets `version` to
 * PG_HOST_COPY_VERSION; a NULL function means "not supported", and so does a
 * version below 1. Without the extension, copies keep TensorFlow's contract.
 *
 * Version history:
 *   1: memcpy_htod_consumed.
 */
#ifndef PLUGGABLE_HOST_COPY_H_
#define PLUGGABLE_HOST_COPY_H_

#include <stddef.h>
#include <stdint.h>

#include "stream_executor.h"
#include "tf_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PG_HOST_COPY_VERSION 1

typedef struct PG_HostCopyFns {
  /* In: sizeof(PG_HostCopyFns) as the core knows it. */
  size_t struct_size;
  /* Out: the version the plugin implements (PG_HOST_COPY_VERSION). */
  int version;
  /* Out: enqueues on `stream` a copy of `size` bytes from host memory
   * `host_src` (pageable or pinned) to `device_dst`, in stream order exactly
   * as memcpy_htod, and returns only once `host_src` has been read
   * completely: the caller may overwrite or free it at once, while the copy
   * into device memory may still be in flight. Failures go to `status`
   * (nothing was enqueued then). */
  void (*memcpy_htod_consumed)(const SP_Device* device, SP_Stream stream,
                               SP_DeviceMemoryBase* device_dst,
                               const void* host_src, uint64_t size,
                               TF_Status* status);
} PG_HostCopyFns;

/* The symbol the core looks up (dlsym) in a plugin. */
#define PG_HOST_COPY_SYMBOL "PG_GetHostCopyFns"
typedef void (*PG_GetHostCopyFnsFn)(PG_HostCopyFns* fns);

#ifdef __cplusplus
}
#endif

#endif /* PLUGGABLE_HOST_COPY_H_ */
