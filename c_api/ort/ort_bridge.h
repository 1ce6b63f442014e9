/* What the bridge's files share: ort_api.c (the negotiated ONNX Runtime
 * tables and statuses), ort_memory.c (allocators, data transfer, sync
 * streams), ort_kernels.c (the kernels the plugins register),
 * ort_partition.c (which nodes the EP takes, and the compiled
 * partitions that run them on the device) and ort_ep.c (plugins, factories,
 * EP instances), each using only those before it. Not part of any ABI. */
#ifndef PG_ORT_BRIDGE_H_
#define PG_ORT_BRIDGE_H_

#include <stdarg.h>

#include "pg_core.h"
#include "pg_ort_abi.h"
#include "pluggable_native_stream.h"

#define PG_ORT_HIDDEN __attribute__((visibility("hidden")))
#define PG_EXPORT __attribute__((visibility("default")))

/* The negotiated OrtApi and its OrtEpApi (set before any factory exists). */
PG_ORT_HIDDEN extern const OrtApi* pg_ort;
PG_ORT_HIDDEN extern const OrtEpApi* pg_ort_ep;
/* The API version negotiated (the version of pg_ort). */
PG_ORT_HIDDEN extern uint32_t pg_ort_version;

#define API_FN(table, index, type) ((type)(((void* const*)(table))[index]))
#define CALL(name, type) API_FN(pg_ort, PG_ORT_##name, type)

/* An OrtStatus of `code` with a printf-style message. */
PG_ORT_HIDDEN OrtStatus* pg_ort_vstatus(const OrtApi* api, int code, const char* fmt, va_list ap);
PG_ORT_HIDDEN OrtStatus* pg_ort_status(int code, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Releases a status the bridge does not pass on. */
PG_ORT_HIDDEN void pg_ort_drop(OrtStatus* s);

#define PG_ORT_MAX_DEVICES 8

/* One loaded plugin platform and its ONNX Runtime factory (ort_ep.c). */
typedef struct bridge_platform {
  OrtEpFactory factory; /* first: an OrtEpFactory* is a bridge_platform* */
  char path[1024];
  char ep_name[96];
  char device_type[64];
  char platform_name[64];
  pg_platform* platform;
  pg_device* devices[PG_ORT_MAX_DEVICES];
  int num_devices;
  int released;
  /* The plugin's native-stream extension (zeroed when it has none). */
  PG_NativeStreamFns native;
  /* Per device: the memory its OrtEpDevice declares (made once, kept for the
   * process: ONNX Runtime keeps the pointers), DEFAULT and HOST_ACCESSIBLE. */
  OrtMemoryInfo* device_info[PG_ORT_MAX_DEVICES];
  OrtMemoryInfo* host_info[PG_ORT_MAX_DEVICES];
} bridge_platform;

/*** Memory, copies and streams (ort_memory.c) ***/

/* Makes (once) and declares the two memory infos of device `ordinal` of
 * `bp` on `ep_device`. */
PG_ORT_HIDDEN OrtStatus* pg_ort_add_memory(bridge_platform* bp, int ordinal,
                                           const OrtHardwareDevice* hw, OrtEpDevice* ep_device);
/* The factory's allocator, data transfer and stream callbacks. */
PG_ORT_HIDDEN OrtStatus* pg_ort_create_allocator(OrtEpFactory* self, const OrtMemoryInfo* mi,
                                                 const OrtKeyValuePairs* opts,
                                                 OrtAllocator** out);
PG_ORT_HIDDEN void pg_ort_release_allocator(OrtEpFactory* self, OrtAllocator* a);
PG_ORT_HIDDEN OrtStatus* pg_ort_create_data_transfer(OrtEpFactory* self,
                                                     OrtDataTransferImpl** out);
PG_ORT_HIDDEN bool pg_ort_is_stream_aware(const OrtEpFactory* self);
PG_ORT_HIDDEN OrtStatus* pg_ort_create_sync_stream(OrtEpFactory* self,
                                                   const OrtMemoryDevice* md,
                                                   const OrtKeyValuePairs* opts,
                                                   OrtSyncStreamImpl** out);

/* Where an ONNX Runtime tensor lives, as a partition of `dev` sees it. */
enum { PG_ORT_IN_HOST = 0, PG_ORT_IN_DEVICE = 1, PG_ORT_IN_OTHER = 2 };
PG_ORT_HIDDEN int pg_ort_placement(const OrtValue* v, const pg_device* dev);
/* A tensor of `dev` over device memory ONNX Runtime owns (no copy; nothing
 * is freed when it goes). NULL with `status` set on failure. */
PG_ORT_HIDDEN TF_Tensor* pg_ort_wrap_device(pg_device* dev, TF_DataType t, const int64_t* dims,
                                            int nd, void* data, size_t nbytes,
                                            TF_Status* status);
/* Adds `n` to the count of tensors copied between host and device. */
PG_ORT_HIDDEN void pg_ort_count_host_copies(int64_t n);

/* The EP of one session. */
typedef struct bridge_ep {
  OrtEp ep; /* first */
  void* bp; /* its bridge_platform (ort_ep.c) */
  const char* device_type;
  pg_device* dev; /* the device ONNX Runtime chose (its OrtEpDevice's ordinal) */
} bridge_ep;

/* Records a kernel a plugin registers (the pg_host_hooks entry; ort_kernels.c). */
PG_ORT_HIDDEN int pg_ort_register_kernel(pg_kernel_def* def, TF_Status* status);
/* The kernel the plugins registered for `op` on `device_type` whose type
 * attribute "T" is `t` (or unconstrained), with no label; NULL if none. */
PG_ORT_HIDDEN pg_kernel_def* pg_ort_find_kernel(const char* op, const char* device_type,
                                                TF_DataType t);
/* The same for several type attributes: each attrs[i] the kernel constrains
 * is types[i] (Cast's SrcT and DstT, GatherV2's Tparams and Tindices). */
PG_ORT_HIDDEN pg_kernel_def* pg_ort_find_kernel_typed(const char* op, const char* device_type,
                                                      int n, const char* const* attrs,
                                                      const TF_DataType* types);

/* OrtEp.GetCapability, Compile and ReleaseNodeComputeInfos (ort_partition.c). */
PG_ORT_HIDDEN OrtStatus* pg_ort_get_capability(OrtEp* self, const OrtGraph* graph,
                                               OrtEpGraphSupportInfo* info);
PG_ORT_HIDDEN OrtStatus* pg_ort_compile(OrtEp* self, const OrtGraph** graphs,
                                        const OrtNode** fused, size_t count,
                                        OrtNodeComputeInfo** infos, OrtNode** ctx_nodes);
PG_ORT_HIDDEN void pg_ort_release_infos(OrtEp* self, OrtNodeComputeInfo** infos, size_t count);

#endif /* PG_ORT_BRIDGE_H_ */
