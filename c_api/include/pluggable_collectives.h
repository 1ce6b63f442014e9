/* pluggable_collectives.h: an optional, versioned plugin extension through
 * which a device plugin lets a process group (one process per device, e.g.
 * launched by torchrun-style tools) set up the communicator that the
 * plugin's collective kernels (CollectiveReduceV2 and friends) then use on
 * one of its devices.
 *
 * Within one process the plugin forms communicators itself: the kernels of
 * one (group_key, instance_key) called on several of its devices meet and
 * communicate among themselves. Across processes each process runs one
 * participant; the processes agree on an opaque id made by one of them
 * (get_unique_id, sent to the others by the process group, e.g. over a TCP
 * store) and each calls init_communicator with its rank. From then on, a
 * collective kernel on `device_ordinal` with that `group_key` (and
 * group_size == nranks) is this process's participant of the group.
 *
 * A plugin opts in by exporting
 *
 *     void PG_GetCollectiveFns(PG_CollectiveFns* fns);
 *
 * The caller zero-fills `fns`, sets fns->struct_size to the size it knows
 * and calls it; the plugin fills the fields it supports (never writing past
 * struct_size) and sets `version` to PG_COLLECTIVES_VERSION. A NULL function
 * means "not supported". This is a pluggable addition, not part of
 * TensorFlow's PluggableDevice C API. The CUDA reference plugin implements
 * it with NCCL (ncclGetUniqueId / ncclCommInitRank / ncclCommAbort).
 *
 * Every function may be called from any thread; each reports failure
 * through `status` (FAILED_PRECONDITION when the communication library is
 * missing, INVALID_ARGUMENT for bad arguments, INTERNAL or UNAVAILABLE for
 * the library's own errors, with its message).
 *
 * Version history:
 *   1: get_unique_id, init_communicator, abort_communicator.
 */
#ifndef PLUGGABLE_COLLECTIVES_H_
#define PLUGGABLE_COLLECTIVES_H_

#include <stddef.h>
#include <stdint.h>

#include "tf_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PG_COLLECTIVES_VERSION 1
/* Size of the opaque id shared by the processes of one group. */
#define PG_COLLECTIVE_ID_BYTES 128

typedef struct PG_CollectiveFns {
  /* In: sizeof(PG_CollectiveFns) as the caller knows it. */
  size_t struct_size;
  /* Out: the version the plugin implements (PG_COLLECTIVES_VERSION). */
  int version;
  /* Out: writes a fresh id into `out` (PG_COLLECTIVE_ID_BYTES bytes, owned
   * by the caller). Called in ONE process of the group; the id is then sent
   * to the others as opaque bytes. */
  void (*get_unique_id)(char out[128], TF_Status* status);
  /* Out: joins this process to the group of `nranks` processes identified
   * by `id`, as `rank` (0 <= rank < nranks), on the plugin's device
   * `device_ordinal`, for collectives of `group_key`. Blocks until all
   * `nranks` processes have called it (the communication library's own
   * rendezvous). Replaces an earlier communicator of the same
   * (device_ordinal, group_key), which is aborted. `id` is read during the
   * call only. */
  void (*init_communicator)(int device_ordinal, int nranks, int rank,
                            const char id[128],
                            int64_t group_key, TF_Status* status);
  /* Out: aborts the communicator of (device_ordinal, group_key):
   * collectives in flight on it fail (UNAVAILABLE, reported by their
   * streams) instead of waiting for a peer that is gone, and later
   * collectives of that group_key on that device fail at once
   * (FAILED_PRECONDITION) until init_communicator makes a new one.
   * NOT_FOUND when there is none. Returns once the abort has ended: the
   * caller may be a thread the interpreter stops at shutdown, so the
   * library's teardown (threads of its own freeing device memory) must
   * neither outlive the call nor, for aborts the plugin starts itself,
   * the process (join them at exit). A plugin may abort a communicator by
   * itself the same way, e.g. when a collective outlives its
   * timeout_seconds (DEADLINE_EXCEEDED) or the library reports an
   * asynchronous error. The collectives in flight may keep running on the
   * device after an abort (NCCL does not always end a kernel whose peer is
   * alive): waits for work behind them (block_host_until_done,
   * block_host_for_event, a copy into pageable host memory) must then
   * return their error rather than wait for ever, as the CUDA reference
   * plugin's do. */
  void (*abort_communicator)(int device_ordinal, int64_t group_key,
                             TF_Status* status);
} PG_CollectiveFns;

/* The symbol a caller looks up (dlsym) in a plugin. */
#define PG_COLLECTIVES_SYMBOL "PG_GetCollectiveFns"
typedef void (*PG_GetCollectiveFnsFn)(PG_CollectiveFns* fns);

#ifdef __cplusplus
}
#endif

#endif /* PLUGGABLE_COLLECTIVES_H_ */
