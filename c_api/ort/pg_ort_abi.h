/* The part of ONNX Runtime's plugin execution-provider C ABI that the
 * pluggable bridge (libpluggable_ort_ep.so) uses, declared here in our own
 * words from ONNX Runtime's documented ABI (onnxruntime_c_api.h and
 * onnxruntime_ep_c_api.h are not shipped in the onnxruntime wheel).
 *
 * ONNX Runtime hands an EP library an OrtApiBase; OrtApiBase.GetApi(v)
 * returns the function table of API version v (v = the minor release number:
 * 1.23 -> 23), or NULL when the running ONNX Runtime is older than v. The
 * tables only ever grow at their end, so an entry's index is fixed forever:
 * the bridge reads entries by index (PG_ORT_* below) and never reads an entry
 * newer than the version it negotiated. Structs the bridge fills for ONNX
 * Runtime (OrtEpFactory, OrtEp ...) start with `ort_version_supported`: ONNX
 * Runtime reads no member added after that version. */
#ifndef PG_ORT_ABI_H_
#define PG_ORT_ABI_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The lowest ONNX Runtime API version the bridge runs on: 23 (1.23) is the
 * first with compiled partitions (OrtEp.GetCapability / Compile), data
 * transfer and sync streams for plugin EPs. */
#define PG_ORT_MIN_API_VERSION 23
/* The version the bridge's structs are written against: ONNX Runtime reads
 * no member those structs do not declare. */
#define PG_ORT_API_VERSION 23
/* The version whose OrtEpFactory allocators, data transfer and sync streams
 * (and the OrtEpApi memory entries) the bridge uses; below it those factory
 * members stay NULL and partitions copy through ONNX Runtime's CPU memory. */
#define PG_ORT_MEMORY_API_VERSION 23

/* Opaque ONNX Runtime objects: the bridge only passes pointers to them. */
typedef struct OrtStatus OrtStatus;
typedef struct OrtApi OrtApi; /* read as an array of function pointers */
typedef struct OrtEpApi OrtEpApi;
typedef struct OrtLogger OrtLogger;
typedef struct OrtHardwareDevice OrtHardwareDevice;
typedef struct OrtEpDevice OrtEpDevice;
typedef struct OrtKeyValuePairs OrtKeyValuePairs;
typedef struct OrtSessionOptions OrtSessionOptions;
typedef struct OrtGraph OrtGraph;
typedef struct OrtNode OrtNode;
typedef struct OrtEpGraphSupportInfo OrtEpGraphSupportInfo;
typedef struct OrtNodeComputeInfo OrtNodeComputeInfo;
typedef struct OrtMemoryInfo OrtMemoryInfo;
typedef struct OrtAllocator OrtAllocator;
typedef struct OrtRunOptions OrtRunOptions;
typedef struct OrtMemoryDevice OrtMemoryDevice; /* ORT's OrtDevice: type, memory type,
                                                 * vendor, device id */
typedef struct OrtSyncStream OrtSyncStream;
typedef struct OrtValue OrtValue;

/* OrtErrorCode values the bridge reports with (ORT's enum, same numbers). */
typedef enum PgOrtErrorCode {
  PG_ORT_OK = 0,
  PG_ORT_FAIL = 1,
  PG_ORT_INVALID_ARGUMENT = 2,
  PG_ORT_NO_SUCHFILE = 3,
  PG_ORT_NO_MODEL = 4,
  PG_ORT_ENGINE_ERROR = 5,
  PG_ORT_RUNTIME_EXCEPTION = 6,
  PG_ORT_INVALID_PROTOBUF = 7,
  PG_ORT_MODEL_LOADED = 8,
  PG_ORT_NOT_IMPLEMENTED = 9,
} PgOrtErrorCode;

/* OrtHardwareDeviceType: what kind of hardware an OrtHardwareDevice is. */
typedef enum PgOrtHardwareDeviceType {
  PG_ORT_HW_CPU = 0,
  PG_ORT_HW_GPU = 1,
  PG_ORT_HW_NPU = 2,
} PgOrtHardwareDeviceType;

/* What every EP library receives: never versioned, two entries for ever. */
typedef struct OrtApiBase {
  /* The function table of API `version`, or NULL (the running ONNX Runtime
   * is older than `version`). */
  const OrtApi* (*GetApi)(uint32_t version);
  /* The running ONNX Runtime's release, e.g. "1.32.0". */
  const char* (*GetVersionString)(void);
} OrtApiBase;

/* Indices into the OrtApi table (entry i is the i-th function pointer).
 * Since: the API version that added the entry; the bridge reads only
 * entries at or below the negotiated version. */
enum {
  PG_ORT_CreateStatus = 0,             /* v1: (code, msg) -> OrtStatus* (copies msg) */
  PG_ORT_GetErrorCode = 1,             /* v1: (const OrtStatus*) -> code */
  PG_ORT_GetErrorMessage = 2,          /* v1: (const OrtStatus*) -> const char* */
  PG_ORT_GetTensorMutableData = 51,    /* v1: (OrtValue*, void** data) -> status */
  PG_ORT_CastTypeInfoToTensorInfo = 55,/* v1: (const OrtTypeInfo*, const info** out) */
  PG_ORT_GetTensorElementType = 60,    /* v1: (const info*, int* elem_type) */
  PG_ORT_GetDimensionsCount = 61,      /* v1: (const info*, size_t* n) */
  PG_ORT_GetDimensions = 62,           /* v1: (const info*, int64_t* dims, size_t n) */
  PG_ORT_GetTensorTypeAndShape = 65,   /* v1: (const OrtValue*, info** out), released below */
  PG_ORT_KernelContext_GetInput = 90,  /* v1: (ctx, index, const OrtValue** out) */
  PG_ORT_KernelContext_GetOutput = 91, /* v1: (ctx, index, dims, n, OrtValue** out) */
  PG_ORT_ReleaseStatus = 93,           /* v1: (OrtStatus*) */
  PG_ORT_ReleaseTensorTypeAndShapeInfo = 99, /* v1: (info*) */
  /* v17: (const OrtOpAttr*, OrtOpAttrType, void* data, size_t len, size_t* out):
   * one INT is an int64_t, one FLOAT a float; *out is the bytes written (the
   * bytes needed, with an error, when `len` is too small) */
  PG_ORT_ReadOpAttr = 272,
  PG_ORT_GetValueInfoName = 289,       /* v22: (const OrtValueInfo*, const char** out) */
  PG_ORT_GetValueInfoTypeInfo = 290,   /* v22: (const OrtValueInfo*, const OrtTypeInfo** out) */
  PG_ORT_CreateKeyValuePairs = 295,    /* v22: (OrtKeyValuePairs** out) */
  PG_ORT_AddKeyValuePair = 296,        /* v22: (kvp, key, value), both copied */
  PG_ORT_GetKeyValue = 297,            /* v22: (kvp, key) -> value or NULL */
  PG_ORT_ReleaseKeyValuePairs = 300,   /* v22: (kvp) */
  PG_ORT_HardwareDevice_Type = 307,    /* v22: (const OrtHardwareDevice*) -> type */
  PG_ORT_HardwareDevice_VendorId = 308,/* v22: -> uint32_t */
  PG_ORT_GetEpApi = 317,               /* v22: () -> const OrtEpApi* */
  PG_ORT_GetTensorSizeInBytes = 318,   /* v23: (const OrtValue*, size_t* out) */
  /* v23: (name, OrtMemoryInfoDeviceType, vendor_id, device_id, OrtDeviceMemoryType,
   * alignment (0: default), OrtAllocatorType, OrtMemoryInfo** out); name copied */
  PG_ORT_CreateMemoryInfo_V2 = 320,
  /* v23: (const OrtValueInfo*, const OrtValue** out): a constant initializer's value */
  PG_ORT_ValueInfo_GetInitializerValue = 326,
  PG_ORT_ValueInfo_IsConstantInitializer = 331, /* v23: (const OrtValueInfo*, bool* out) */
  PG_ORT_Graph_GetNumNodes = 344,      /* v23: (graph, size_t* n) */
  PG_ORT_Graph_GetNodes = 345,         /* v23: (graph, const OrtNode** out, size_t n) */
  /* v23: (graph, const OrtNode** out): the node whose subgraph it is; NULL at the top */
  PG_ORT_Graph_GetParentNode = 346,
  PG_ORT_Node_GetName = 349,           /* v23: (node, const char** out) */
  PG_ORT_Node_GetOperatorType = 350,   /* v23: (node, const char** out) */
  PG_ORT_Node_GetDomain = 351,         /* v23: (node, const char** out); "" = ONNX */
  PG_ORT_Node_GetSinceVersion = 352,   /* v23: (node, int* out): its schema's opset */
  PG_ORT_Node_GetNumInputs = 353,      /* v23: (node, size_t* n) */
  PG_ORT_Node_GetInputs = 354,         /* v23: (node, const OrtValueInfo** out, size_t n) */
  PG_ORT_Node_GetNumOutputs = 355,     /* v23: (node, size_t* n) */
  PG_ORT_Node_GetOutputs = 356,        /* v23: (node, const OrtValueInfo** out, size_t n) */
  PG_ORT_Node_GetNumImplicitInputs = 357, /* v23: (node, size_t* n): outer values its
                                           * subgraphs read */
  PG_ORT_Node_GetImplicitInputs = 358, /* v23: (node, const OrtValueInfo** out, size_t n) */
  /* v23: (node, name, const OrtOpAttr** out): NULL (or an error) when absent */
  PG_ORT_Node_GetAttributeByName = 361,
};

/* OrtOpAttrType values ReadOpAttr takes. */
#define PG_ORT_OP_ATTR_INT 1
#define PG_ORT_OP_ATTR_INTS 2   /* int64_t values */
#define PG_ORT_OP_ATTR_FLOAT 3
#define PG_ORT_OP_ATTR_STRING 5 /* characters, no terminating NUL */

/* Indices into the OrtEpApi table. */
enum {
  PG_ORTEP_CreateEpDevice = 0,  /* v22: (factory, hw, ep_metadata, ep_options, OrtEpDevice** out) */
  PG_ORTEP_ReleaseEpDevice = 1, /* v22: (OrtEpDevice*) */
  /* v23: (info, const OrtNode* const* nodes, n, const OrtNodeFusionOptions*):
   * the nodes become one partition that Compile receives. */
  PG_ORTEP_EpGraphSupportInfo_AddNodesToFuse = 2,
  /* v23: (OrtEpDevice*, const OrtMemoryInfo*): the memory the device's
   * allocators serve (one DEFAULT and one HOST_ACCESSIBLE entry); ONNX
   * Runtime keeps the pointer, which must outlive the OrtEpDevice. */
  PG_ORTEP_EpDevice_AddAllocatorInfo = 5,
  /* v23: (const OrtMemoryInfo*) -> const OrtMemoryDevice* */
  PG_ORTEP_MemoryInfo_GetMemoryDevice = 6,
  /* v23: (const OrtValue*) -> const OrtMemoryDevice* (NULL: not a tensor) */
  PG_ORTEP_Value_GetMemoryDevice = 7,
  PG_ORTEP_MemoryDevice_AreEqual = 8,       /* v23: (a, b) -> bool */
  PG_ORTEP_MemoryDevice_GetDeviceType = 9,  /* v23: -> OrtMemoryInfoDeviceType */
  PG_ORTEP_MemoryDevice_GetMemoryType = 10, /* v23: -> OrtDeviceMemoryType */
  /* v23: (const OrtSyncStream*) -> const OrtSyncStreamImpl*: the EP's own
   * stream behind an ONNX Runtime stream */
  PG_ORTEP_SyncStream_GetImpl = 13,
};

/* OrtMemoryInfoDeviceType, OrtDeviceMemoryType and OrtAllocatorType values. */
#define PG_ORT_MEM_DEVICE_CPU 0
#define PG_ORT_MEM_DEVICE_GPU 1
#define PG_ORT_MEM_DEVICE_NPU 3
#define PG_ORT_MEM_DEFAULT 0
#define PG_ORT_MEM_HOST_ACCESSIBLE 5
#define PG_ORT_DEVICE_ALLOCATOR 0

/* An allocator ONNX Runtime calls (its `version` says which members it
 * may read; members up to v23). Alloc returns NULL on failure; Free accepts
 * NULL. */
struct OrtAllocator {
  uint32_t version; /* PG_ORT_API_VERSION */
  void* (*Alloc)(OrtAllocator* self, size_t size);
  void (*Free)(OrtAllocator* self, void* p);
  const OrtMemoryInfo* (*Info)(const OrtAllocator* self);
  /* v18, optional: an allocation for the session's lifetime (initializers) */
  void* (*Reserve)(OrtAllocator* self, size_t size);
  /* v23, optional (NULL): statistics as key-value pairs */
  OrtStatus* (*GetStats)(const OrtAllocator* self, OrtKeyValuePairs** out);
  /* v23, optional (NULL): an allocation ordered on `stream` */
  void* (*AllocOnStream)(OrtAllocator* self, size_t size, OrtSyncStream* stream);
};

/* The copier between the EP's memory and the CPU's (v23). */
typedef struct OrtDataTransferImpl OrtDataTransferImpl;
struct OrtDataTransferImpl {
  uint32_t ort_version_supported; /* PG_ORT_API_VERSION */
  void (*Release)(OrtDataTransferImpl* self);
  /* Whether CopyTensors copies from `src` memory to `dst` memory. */
  bool (*CanCopy)(const OrtDataTransferImpl* self, const OrtMemoryDevice* src,
                  const OrtMemoryDevice* dst);
  /* Copies src[i] into dst[i] (same shape and type, allocated). streams is
   * NULL (the EP is not stream aware) or holds one stream per copy (each may
   * be NULL): a copy on a stream may be left in flight on it. */
  OrtStatus* (*CopyTensors)(OrtDataTransferImpl* self, const OrtValue** src, OrtValue** dst,
                            OrtSyncStream** streams, size_t n);
};

/* A point on a stream that other streams or the host wait for (v23). */
typedef struct OrtSyncNotificationImpl OrtSyncNotificationImpl;
struct OrtSyncNotificationImpl {
  uint32_t ort_version_supported; /* PG_ORT_API_VERSION */
  void (*Release)(OrtSyncNotificationImpl* self);
  /* Marks the producer stream's current position. */
  OrtStatus* (*Activate)(OrtSyncNotificationImpl* self);
  /* Makes later work of `consumer` wait for that position (without
   * blocking the host where the consumer is the EP's). */
  OrtStatus* (*WaitOnDevice)(OrtSyncNotificationImpl* self, OrtSyncStream* consumer);
  /* Blocks the host until that position is passed. */
  OrtStatus* (*WaitOnHost)(OrtSyncNotificationImpl* self);
};

/* The EP's stream behind one ONNX Runtime stream (v23). */
typedef struct OrtSyncStreamImpl OrtSyncStreamImpl;
struct OrtSyncStreamImpl {
  uint32_t ort_version_supported; /* PG_ORT_API_VERSION */
  void (*Release)(OrtSyncStreamImpl* self);
  /* The native stream handle (cudaStream_t for CUDA), or NULL. */
  void* (*GetHandle)(OrtSyncStreamImpl* self);
  OrtStatus* (*CreateNotification)(OrtSyncStreamImpl* self, OrtSyncNotificationImpl** out);
  /* Submits what is queued (the work need not have finished). */
  OrtStatus* (*Flush)(OrtSyncStreamImpl* self);
  /* A session run that used the stream has ended. */
  OrtStatus* (*OnSessionRunEnd)(OrtSyncStreamImpl* self);
};

typedef struct OrtKernelContext OrtKernelContext;
typedef struct OrtNodeComputeContext OrtNodeComputeContext;

/* ONNX tensor element types the bridge runs (ONNXTensorElementDataType). */
#define PG_ONNX_FLOAT 1
#define PG_ONNX_INT32 6
#define PG_ONNX_INT64 7
#define PG_ONNX_BOOL 9
#define PG_ONNX_DOUBLE 11

/* How the nodes given to AddNodesToFuse become one partition (v23). */
typedef struct OrtNodeFusionOptions {
  uint32_t ort_version_supported; /* PG_ORT_API_VERSION */
  /* true: ONNX Runtime does not pass the partition's constant initializers
   * to Compute (the EP copied them in Compile). */
  bool drop_constant_initializers;
} OrtNodeFusionOptions;

/* What the EP gives ONNX Runtime for each partition it compiled. */
struct OrtNodeComputeInfo {
  uint32_t ort_version_supported; /* PG_ORT_API_VERSION */
  /* Make the per-session state Compute receives. */
  OrtStatus* (*CreateState)(OrtNodeComputeInfo* self, OrtNodeComputeContext* ctx,
                            void** state);
  /* Run the partition: inputs and outputs through the OrtKernelContext. */
  OrtStatus* (*Compute)(OrtNodeComputeInfo* self, void* state, OrtKernelContext* ctx);
  void (*ReleaseState)(OrtNodeComputeInfo* self, void* state);
};

typedef struct OrtEpFactory OrtEpFactory;
typedef struct OrtEp OrtEp;

/* The execution provider instance of one session (members up to v23). */
struct OrtEp {
  uint32_t ort_version_supported; /* PG_ORT_API_VERSION */
  const char* (*GetName)(const OrtEp* self);
  /* v23: tell ONNX Runtime which nodes of `graph` the EP takes. */
  OrtStatus* (*GetCapability)(OrtEp* self, const OrtGraph* graph,
                              OrtEpGraphSupportInfo* info);
  /* v23: build the compute functions of the partitions taken. */
  OrtStatus* (*Compile)(OrtEp* self, const OrtGraph** graphs,
                        const OrtNode** fused_nodes, size_t count,
                        OrtNodeComputeInfo** compute_infos,
                        OrtNode** ep_context_nodes);
  void (*ReleaseNodeComputeInfos)(OrtEp* self, OrtNodeComputeInfo** infos,
                                  size_t count);
  /* v23, optional (NULL): */
  void* GetPreferredDataLayout;
  void* ShouldConvertDataLayoutForOp;
  void* SetDynamicOptions;
  void* OnRunStart;
  void* OnRunEnd;
  void* CreateAllocator;
  void* CreateSyncStreamForDevice;
  void* GetCompiledModelCompatibilityInfo;
};

/* The factory ONNX Runtime asks for devices and EP instances (members up
 * to v23). */
struct OrtEpFactory {
  uint32_t ort_version_supported; /* PG_ORT_API_VERSION */
  const char* (*GetName)(const OrtEpFactory* self);   /* the EP's name */
  const char* (*GetVendor)(const OrtEpFactory* self); /* who makes it */
  /* Fill `ep_devices` (at most `max`) with one OrtEpDevice per device the
   * EP runs on, created with OrtEpApi.CreateEpDevice over one of the
   * `devices` ONNX Runtime found; ONNX Runtime owns what is returned. */
  OrtStatus* (*GetSupportedDevices)(OrtEpFactory* self,
                                    const OrtHardwareDevice* const* devices,
                                    size_t num_devices, OrtEpDevice** ep_devices,
                                    size_t max, size_t* num_ep_devices);
  /* Create the EP of one session for the chosen devices. */
  OrtStatus* (*CreateEp)(OrtEpFactory* self, const OrtHardwareDevice* const* devices,
                         const OrtKeyValuePairs* const* ep_metadata,
                         size_t num_devices, const OrtSessionOptions* options,
                         const OrtLogger* logger, OrtEp** ep);
  void (*ReleaseEp)(OrtEpFactory* self, OrtEp* ep);
  /* v23: */
  uint32_t (*GetVendorId)(const OrtEpFactory* self);
  const char* (*GetVersion)(const OrtEpFactory* self); /* semver */
  /* Whether a precompiled model suits these devices (the bridge writes no
   * precompiled models: it answers "not applicable", value 0). */
  OrtStatus* (*ValidateCompiledModelCompatibilityInfo)(OrtEpFactory* self,
                                                       const OrtHardwareDevice* const* devices,
                                                       size_t num_devices, const char* info,
                                                       int* compatibility);
  /* An allocator for one of the memory infos the OrtEpDevices declared;
   * *allocator = NULL means ONNX Runtime's CPU allocator. */
  OrtStatus* (*CreateAllocator)(OrtEpFactory* self, const OrtMemoryInfo* memory_info,
                                const OrtKeyValuePairs* options, OrtAllocator** allocator);
  void (*ReleaseAllocator)(OrtEpFactory* self, OrtAllocator* allocator);
  /* The copier between the EP's memory and the CPU's; *out = NULL: none.
   * ONNX Runtime releases it through its Release. */
  OrtStatus* (*CreateDataTransfer)(OrtEpFactory* self, OrtDataTransferImpl** data_transfer);
  bool (*IsStreamAware)(const OrtEpFactory* self);
  /* A sync stream for one memory device; *out = NULL when not stream aware.
   * ONNX Runtime releases it through its Release. */
  OrtStatus* (*CreateSyncStreamForDevice)(OrtEpFactory* self,
                                          const OrtMemoryDevice* memory_device,
                                          const OrtKeyValuePairs* options,
                                          OrtSyncStreamImpl** stream);
};

/* The two symbols an EP library exports. CreateEpFactories writes at most
 * `max_factories` factories into `factories`; ReleaseEpFactory releases one
 * of them. */
OrtStatus* CreateEpFactories(const char* registered_name, const OrtApiBase* ort_api_base,
                             const OrtLogger* default_logger, OrtEpFactory** factories,
                             size_t max_factories, size_t* num_factories);
OrtStatus* ReleaseEpFactory(OrtEpFactory* factory);

#ifdef __cplusplus
}
#endif
#endif /* PG_ORT_ABI_H_ */
