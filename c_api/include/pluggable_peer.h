/* pluggable_peer.h: an optional, versioned plugin extension for direct
 * copies between two devices of one plugin (peer access: NVLink or PCIe
 * peer-to-peer on GPUs). TensorFlow's SP_StreamExecutor has no peer copy:
 * its memcpy_dtod copies within one device.
 *
 * A plugin opts in by exporting
 *
 *     void PG_GetPeerFns(PG_PeerFns* fns);
 *
 * The caller zero-fills `fns`, sets fns->struct_size to the size it knows
 * and calls it; the plugin fills the fields it supports (never writing past
 * struct_size) and sets `version` to PG_PEER_VERSION. A NULL function means
 * "not supported"; without the extension, copies between devices of one
 * plugin go through memcpy_dtod, or through host memory.
 *
 * Ordinals are the plugin's device ordinals (SP_Device.ordinal).
 *
 * Version history:
 *   1: can_access_peer, memcpy_peer.
 */
#ifndef PLUGGABLE_PEER_H_
#define PLUGGABLE_PEER_H_

#include <stddef.h>
#include <stdint.h>

#include "stream_executor.h"
#include "tf_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PG_PEER_VERSION 1

typedef struct PG_PeerFns {
  /* In: sizeof(PG_PeerFns) as the caller knows it. */
  size_t struct_size;
  /* Out: the version the plugin implements (PG_PEER_VERSION). */
  int version;
  /* Out: 1 when device `dst_ordinal` can read and write the memory of
   * `src_ordinal` directly (a peer copy between them does not go through
   * the host), else 0 (also for bad ordinals). Cheap; may be cached. */
  int (*can_access_peer)(int src_ordinal, int dst_ordinal);
  /* Out: copies `size` bytes from `src` (device memory of `src_ordinal`) to
   * `dst` (device memory of `dst_ordinal`). With a `stream` (an SP_Stream
   * of the destination device) the copy is enqueued on it and may still be
   * running on return: the caller orders it after the source's producer and
   * keeps both buffers alive until the stream has run it. With a NULL
   * stream the copy is complete on return. Enables peer access between the
   * two devices on first use where it is possible; where it is not, the
   * copy still happens (staged by the driver). Sets `status` on failure. */
  void (*memcpy_peer)(int dst_ordinal, void* dst, int src_ordinal,
                      const void* src, uint64_t size, SP_Stream stream,
                      TF_Status* status);
} PG_PeerFns;

/* The symbol a caller looks up (dlsym) in a plugin. */
#define PG_PEER_SYMBOL "PG_GetPeerFns"
typedef void (*PG_GetPeerFnsFn)(PG_PeerFns* fns);

#ifdef __cplusplus
}
#endif

#endif /* PLUGGABLE_PEER_H_ */
