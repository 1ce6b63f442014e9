/* What the bridge's two halves share: ort_ep.c (plugins, factories, EP
 * instances) and ort_partition.c (which nodes the EP takes, and the compiled
 * partitions that run them on the device). Not part of any ABI. */
#ifndef PG_ORT_BRIDGE_H_
#define PG_ORT_BRIDGE_H_

#include "pg_core.h"
#include "pg_ort_abi.h"

#define PG_ORT_HIDDEN __attribute__((visibility("hidden")))
#define PG_EXPORT __attribute__((visibility("default")))

/* The negotiated OrtApi and its OrtEpApi (set before any factory exists). */
PG_ORT_HIDDEN extern const OrtApi* pg_ort;
PG_ORT_HIDDEN extern const OrtEpApi* pg_ort_ep;

#define API_FN(table, index, type) ((type)(((void* const*)(table))[index]))
#define CALL(name, type) API_FN(pg_ort, PG_ORT_##name, type)

/* An OrtStatus of `code` with a printf-style message. */
PG_ORT_HIDDEN OrtStatus* pg_ort_status(int code, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Releases a status the bridge does not pass on. */
PG_ORT_HIDDEN void pg_ort_drop(OrtStatus* s);

/* The EP of one session. */
typedef struct bridge_ep {
  OrtEp ep; /* first */
  void* bp; /* its bridge_platform (ort_ep.c) */
  const char* device_type;
  pg_device* dev; /* the device ONNX Runtime chose (its OrtEpDevice's ordinal) */
} bridge_ep;

/* The kernel the plugins registered for `op` on `device_type` whose type
 * attribute "T" is `t` (or unconstrained), with no label; NULL if none. */
PG_ORT_HIDDEN pg_kernel_def* pg_ort_find_kernel(const char* op, const char* device_type,
                                                TF_DataType t);

/* OrtEp.GetCapability, Compile and ReleaseNodeComputeInfos (ort_partition.c). */
PG_ORT_HIDDEN OrtStatus* pg_ort_get_capability(OrtEp* self, const OrtGraph* graph,
                                               OrtEpGraphSupportInfo* info);
PG_ORT_HIDDEN OrtStatus* pg_ort_compile(OrtEp* self, const OrtGraph** graphs,
                                        const OrtNode** fused, size_t count,
                                        OrtNodeComputeInfo** infos, OrtNode** ctx_nodes);
PG_ORT_HIDDEN void pg_ort_release_infos(OrtEp* self, OrtNodeComputeInfo** infos, size_t count);

#endif /* PG_ORT_BRIDGE_H_ */
