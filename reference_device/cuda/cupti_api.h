// The few parts of NVIDIA's CUPTI activity API that the CUDA reference
// plugin's profiler uses, declared here so that the plugin builds without
// CUPTI's headers and loads libcupti at run time (dlopen), like cuBLAS.
//
// Only what is used is declared: the result and activity-kind values, the
// function signatures (resolved with dlsym into CuptiApi), and the leading
// fields of the activity records read back. Field names, order and widths
// follow cupti_activity.h (CUDA 12 and 13); the offsets are checked below.
//
// Activity records are versioned: a library hands back the newest version
// of the struct it knows for a kind (CONCURRENT_KERNEL is CUpti_ActivityKernel9
// in CUPTI 12.x and CUpti_ActivityKernel10 in 13.x; MEMCPY is Memcpy5 / Memcpy6;
// MEMSET is Memset4). The versions differ only after the fields declared
// here, which have kept their offsets since CUpti_ActivityKernel4, Memcpy2
// and Memset2, so these prefixes read every version CUPTI 12 and 13 produce.
// Records are packed with 8-byte alignment; nothing here is written by us.
#ifndef PLUGGABLE_CUDA_CUPTI_API_H_
#define PLUGGABLE_CUDA_CUPTI_API_H_

#include <cstddef>
#include <cstdint>

namespace pgcuda {
namespace cupti {

using Result = int;  // CUptiResult
constexpr Result kSuccess = 0;
constexpr Result kMaxLimitReached = 12;  // cuptiActivityGetNextRecord: no more records

// CUpti_ActivityKind values used.
enum Kind : int32_t {
  kMemcpy = 1,
  kMemset = 2,
  kDriver = 4,   // API records: CUPTI writes external-correlation records only
  kRuntime = 5,  // for calls that get one of these (which are skipped)
  kConcurrentKernel = 10,
  kExternalCorrelation = 39,
};

constexpr int32_t kExternalKindCustom0 = 3;  // CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0
constexpr uint32_t kFlushForced = 1;         // CUPTI_ACTIVITY_FLAG_FLUSH_FORCED

// CUpti_ActivityMemcpyKind values (copyKind).
enum CopyKind : uint8_t { kHtoD = 1, kDtoH = 2, kDtoD = 8, kHtoH = 9, kPtoP = 10 };

// The header every record starts with (CUpti_Activity).
struct Activity {
  int32_t kind;
};

// Leading fields of CUpti_ActivityKernel4 .. CUpti_ActivityKernel10.
struct KernelPrefix {
  int32_t kind;
  uint8_t cache_config;
  uint8_t shared_memory_config;
  uint16_t registers_per_thread;
  int32_t partitioned_global_cache_requested;
  int32_t partitioned_global_cache_executed;
  uint64_t start;      // ns, CUPTI timestamp clock
  uint64_t end;
  uint64_t completed;
  uint32_t device_id;
  uint32_t context_id;
  uint32_t stream_id;
  int32_t grid_x, grid_y, grid_z;
  int32_t block_x, block_y, block_z;
  int32_t static_shared_memory;
  int32_t dynamic_shared_memory;
  uint32_t local_memory_per_thread;
  uint32_t local_memory_total;
  uint32_t correlation_id;  // of the runtime/driver API call that launched it
  int64_t grid_id;
  const char* name;         // mangled; owned by CUPTI, valid while the buffer is
};

// Leading fields of CUpti_ActivityMemcpy2 .. CUpti_ActivityMemcpy6.
struct MemcpyPrefix {
  int32_t kind;
  uint8_t copy_kind;  // CopyKind
  uint8_t src_kind;
  uint8_t dst_kind;
  uint8_t flags;
  uint64_t bytes;
  uint64_t start;
  uint64_t end;
  uint32_t device_id;
  uint32_t context_id;
  uint32_t stream_id;
  uint32_t correlation_id;
};

// Leading fields of CUpti_ActivityMemset2 .. CUpti_ActivityMemset4.
struct MemsetPrefix {
  int32_t kind;
  uint32_t value;
  uint64_t bytes;
  uint64_t start;
  uint64_t end;
  uint32_t device_id;
  uint32_t context_id;
  uint32_t stream_id;
  uint32_t correlation_id;
};

// CUpti_ActivityExternalCorrelation: ties `correlation_id` (CUPTI's) to the
// id pushed with cuptiActivityPushExternalCorrelationId.
struct ExternalCorrelation {
  int32_t kind;
  int32_t external_kind;
  uint64_t external_id;
  uint32_t correlation_id;
  uint32_t reserved;
};

static_assert(offsetof(KernelPrefix, start) == 16, "CUpti_ActivityKernel layout");
static_assert(offsetof(KernelPrefix, device_id) == 40, "CUpti_ActivityKernel layout");
static_assert(offsetof(KernelPrefix, grid_x) == 52, "CUpti_ActivityKernel layout");
static_assert(offsetof(KernelPrefix, correlation_id) == 92, "CUpti_ActivityKernel layout");
static_assert(offsetof(KernelPrefix, name) == 104, "CUpti_ActivityKernel layout");
static_assert(offsetof(MemcpyPrefix, bytes) == 8 && offsetof(MemcpyPrefix, device_id) == 32 &&
                  offsetof(MemcpyPrefix, correlation_id) == 44,
              "CUpti_ActivityMemcpy layout");
static_assert(offsetof(MemsetPrefix, start) == 16 && offsetof(MemsetPrefix, correlation_id) == 44,
              "CUpti_ActivityMemset layout");
static_assert(offsetof(ExternalCorrelation, external_id) == 8 &&
                  offsetof(ExternalCorrelation, correlation_id) == 16,
              "CUpti_ActivityExternalCorrelation layout");

// CUpti_BuffersCallbackRequestFunc / CUpti_BuffersCallbackCompleteFunc.
using BufferRequested = void (*)(uint8_t** buffer, size_t* size, size_t* max_records);
using BufferCompleted = void (*)(void* context, uint32_t stream_id, uint8_t* buffer,
                                 size_t size, size_t valid_size);

// The functions resolved from libcupti (all required).
struct Api {
  Result (*activity_enable)(int32_t kind);
  Result (*activity_disable)(int32_t kind);
  Result (*register_callbacks)(BufferRequested, BufferCompleted);
  Result (*get_next_record)(uint8_t* buffer, size_t valid_size, Activity** record);
  Result (*flush_all)(uint32_t flag);
  Result (*get_timestamp)(uint64_t* timestamp);
  Result (*push_external)(int32_t kind, uint64_t id);
  Result (*pop_external)(int32_t kind, uint64_t* last_id);
  Result (*result_string)(Result result, const char** text);
};

}  // namespace cupti
}  // namespace pgcuda

#endif  // PLUGGABLE_CUDA_CUPTI_API_H_
