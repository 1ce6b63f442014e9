// Shared host-side definitions of the CUDA reference plugin: the per-device
// and per-stream state behind the opaque SP_ handles, error-to-status
// conversion, and the guard that makes a device current for one callback.
#ifndef PLUGGABLE_CUDA_COMMON_H_
#define PLUGGABLE_CUDA_COMMON_H_

#include <cuda_runtime.h>

#include <atomic>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "stream_executor.h"
#include "tf_status.h"

namespace pgcuda {

class LaunchQueue;  // launch_queue.h

// Everything the plugin knows about one GPU; SP_Device.device_handle points
// at one of these.
struct CudaDevice {
  int ordinal = 0;
  char name[256] = {0};
  char pci_bus_id[32] = {0};
  int sm_count = 1;
  int clock_khz = 0;
  int mem_clock_khz = 0;
  int mem_bus_width_bits = 0;
  int cc_major = 0;
  int cc_minor = 0;
  int numa_node = -1;
  int64_t total_memory = 0;
  int64_t l2_bytes = 0;  // L2 cache size
  int64_t bandwidth_bytes_per_s = -1;
  double gflops = -1.0;

  // Device memory comes from `pool` (stream-ordered, on `alloc_stream`) when
  // `use_pool`, else from cudaMalloc/cudaFree.
  bool use_pool = false;
  cudaMemPool_t pool = nullptr;
  cudaStream_t alloc_stream = nullptr;
  // Internal stream for the synchronous copies.
  cudaStream_t sync_stream = nullptr;

  // Pinned chunks that pageable copies are staged through (staging.cu): up
  // to kStagingMaxSlots chunks of kStageChunk bytes, each with the event
  // recorded after its last DMA and the stamp of its last use. Chunks are
  // added one at a time, only while every chunk is still in use;
  // `staging_failed` once the first could not be allocated (copies then go
  // straight to cudaMemcpyAsync). `staging_mu` is held for a whole staged
  // copy, across CUDA calls.
  static constexpr int kStagingMaxSlots = 16;
  std::mutex staging_mu;
  bool staging_failed = false;
  int staging_slots = 0;
  uint64_t staging_clock = 0;
  void* staging[kStagingMaxSlots] = {};
  cudaEvent_t staging_done[kStagingMaxSlots] = {};
  uint64_t staging_stamp[kStagingMaxSlots] = {};

  // Set once a collective of a process communicator (kernels_collective.cu)
  // was enqueued on this device: waits for its work then poll (wait_work.h),
  // so that work stuck behind the collective of an aborted communicator
  // cannot hold a waiting thread for ever.
  std::atomic<bool> poll_waits{false};
  // Guards the fields below (held only across cudaEventQuery/Destroy).
  std::mutex abandon_mu;
  // Events recorded after the last collective of an aborted communicator on
  // a stream: while one has not completed, a wait that finds its own work
  // unfinished returns abandon_code/abandon_message instead of waiting.
  std::vector<cudaEvent_t> abandoned_until;
  TF_Code abandon_code = TF_OK;
  std::string abandon_message;

  // Launches issued by the plugin's launcher thread (launch_queue.h); null
  // when they are not queued. `capturing` counts the device's streams that
  // capture a graph: nothing is queued while it is not 0.
  LaunchQueue* queue = nullptr;
  std::atomic<int> capturing{0};

  // Allocator statistics of allocate/deallocate.
  std::atomic<int64_t> num_allocs{0};
  std::atomic<int64_t> bytes_in_use{0};
  std::atomic<int64_t> peak_bytes_in_use{0};
  std::atomic<int64_t> largest_alloc_size{0};
};

// The object behind an SP_Stream.
struct CudaStream {
  cudaStream_t stream = nullptr;
  CudaDevice* dev = nullptr;
  int ordinal = 0;
  // Recorded on this stream when another stream must wait for it.
  cudaEvent_t dep_event = nullptr;
  // Recorded on another library's stream, or on this one, by order_native
  // (pluggable_native_stream.h); made on first use. `order_mu` is held from
  // the record to the wait (and over the creation).
  std::mutex order_mu;
  cudaEvent_t order_event = nullptr;

  // Guards the error fields below. Taken by host functions running on
  // CUDA's callback thread, so it is never held across a CUDA call.
  std::mutex error_mu;
  // First error found by asynchronous host work (host callbacks,
  // CheckNumerics); reported and cleared by block_host_until_done.
  bool has_error = false;
  TF_Code error_code = TF_OK;
  std::string error_message;
  // Set by the launcher when a queued launch on this stream failed; the next
  // event recorded on the stream takes it (CudaEvent::failed).
  std::atomic<bool> launch_failed{false};

  std::mutex mu;  // guards everything below (may be held across CUDA calls)
  // cuBLAS handle bound to `stream` (created on first use) and its workspace.
  void* blas_handle = nullptr;
  void* blas_workspace = nullptr;
  // cuDNN handle bound to `stream` (created on the first convolution).
  void* dnn_handle = nullptr;
  // Pinned host ring that the records of asynchronous checks (CheckNumerics,
  // index checks) are copied into; kPinnedCheckSlots records of 16 bytes,
  // allocated on first use (see AsyncCheck in kernel_util.h).
  void* pinned_checks = nullptr;
  std::atomic<unsigned int> next_check{0};
  // Zeroed tickets of the matrix-vector path's one-pass split-K reduction
  // (kernels_gemv.cu), kGemvTickets of them, allocated on first use outside
  // a capture; every launch leaves them zero again.
  unsigned int* gemv_tickets = nullptr;
};

// The object behind an SP_Event.
struct CudaEvent {
  cudaEvent_t event = nullptr;
  int ordinal = 0;
  std::atomic<bool> recorded{false};
  CudaDevice* dev = nullptr;
  // Queue position of the record when it was queued (launch_queue.h), 0
  // when it was made at once; the event reads PENDING until it is issued.
  std::atomic<uint64_t> queued{0};
  // Work on the stream between the previous record and this one failed.
  std::atomic<bool> failed{false};
};

// The object behind an SP_Timer.
struct CudaTimer {
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  int ordinal = 0;
};

// Whether environment variable `name` is unset or anything but "0" (the
// plugin's switches are on unless set to 0).
inline bool not_turned_off(const char* name) {
  const char* v = getenv(name);
  return v == nullptr || strcmp(v, "0") != 0;
}

// Whether `stream` is capturing a graph; true where CUDA cannot say (the
// caller then takes the path that is legal under capture).
inline bool stream_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
    (void)cudaGetLastError();
    return true;
  }
  return status != cudaStreamCaptureStatusNone;
}

inline CudaDevice* device_of(const SP_Device* d) {
  return d == nullptr ? nullptr : static_cast<CudaDevice*>(d->device_handle);
}
inline CudaStream* stream_of(SP_Stream s) {
  return reinterpret_cast<CudaStream*>(s);
}

// Status code for a CUDA error.
inline TF_Code code_for_cuda_error(cudaError_t e) {
  switch (e) {
    case cudaErrorMemoryAllocation:
      return TF_RESOURCE_EXHAUSTED;
    case cudaErrorInvalidValue:
      return TF_INVALID_ARGUMENT;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorDevicesUnavailable:
      return TF_UNAVAILABLE;
    case cudaErrorNotSupported:
      return TF_UNIMPLEMENTED;
    default:
      return TF_INTERNAL;
  }
}

// Sets `s` to "<call> failed: <error name> (<error text>)", where <call> is
// formatted from `fmt`, e.g. "cudaMalloc(1024 bytes)".
inline void set_cuda_status(TF_Status* s, cudaError_t e, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
inline void set_cuda_status(TF_Status* s, cudaError_t e, const char* fmt, ...) {
  if (s == nullptr) return;
  char call[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(call, sizeof(call), fmt, ap);
  va_end(ap);
  char msg[512];
  snprintf(msg, sizeof(msg), "%s failed: %s (%s)", call, cudaGetErrorName(e),
           cudaGetErrorString(e));
  TF_SetStatus(s, code_for_cuda_error(e), msg);
}

// Restores the calling thread's current device at the end of its scope,
// whatever the code in the scope made current. For calls into libraries
// that switch devices themselves (NCCL's group and communicator calls make
// each communicator's device current in turn and leave the last one
// current): the caller's current device is the caller's (PyTorch and CuPy
// read it as their default device).
class DeviceRestore {
 public:
  DeviceRestore() {
    if (cudaGetDevice(&previous_) != cudaSuccess) {
      previous_ = -1;
      (void)cudaGetLastError();
    }
  }
  ~DeviceRestore() {
    int now = -1;
    if (previous_ < 0) return;
    if (cudaGetDevice(&now) != cudaSuccess) {
      (void)cudaGetLastError();
      return;
    }
    if (now != previous_ && cudaSetDevice(previous_) != cudaSuccess) (void)cudaGetLastError();
  }
  DeviceRestore(const DeviceRestore&) = delete;
  DeviceRestore& operator=(const DeviceRestore&) = delete;

 private:
  int previous_ = -1;
};

// Makes `ordinal` the current device for the guard's scope and restores the
// caller's device afterwards. Only calls cudaSetDevice when the device
// actually changes.
class DeviceGuard {
 public:
  explicit DeviceGuard(int ordinal) {
    cudaError_t e = cudaGetDevice(&previous_);
    if (e != cudaSuccess) {
      previous_ = -1;
      (void)cudaGetLastError();
    }
    if (previous_ != ordinal) {
      error_ = cudaSetDevice(ordinal);
      if (error_ == cudaSuccess) {
        changed_ = true;
      } else {
        (void)cudaGetLastError();
      }
    }
  }
  ~DeviceGuard() {
    if (changed_ && previous_ >= 0) {
      if (cudaSetDevice(previous_) != cudaSuccess) (void)cudaGetLastError();
    }
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

  // cudaSuccess, or the error of cudaSetDevice.
  cudaError_t error() const { return error_; }
  // Sets `s` and returns false if the device could not be made current.
  bool ok(TF_Status* s, int ordinal) const {
    if (error_ == cudaSuccess) return true;
    set_cuda_status(s, error_, "cudaSetDevice(%d)", ordinal);
    return false;
  }

 private:
  int previous_ = -1;
  bool changed_ = false;
  cudaError_t error_ = cudaSuccess;
};

// Records `code`/`msg` as the stream's error unless it already has one.
inline void stream_set_error(CudaStream* s, TF_Code code, const char* msg) {
  if (s == nullptr || code == TF_OK) return;
  std::lock_guard<std::mutex> lock(s->error_mu);
  if (s->has_error) return;
  s->has_error = true;
  s->error_code = code;
  s->error_message = msg == nullptr ? "" : msg;
}

// Marks the work on `dev` up to `until` (an event recorded after it; the
// device takes it over) as possibly never finishing: a wait that finds its
// work unfinished while `until` has not completed fails with `code`/`msg`.
inline void device_abandon(CudaDevice* dev, cudaEvent_t until, TF_Code code,
                           const std::string& msg) {
  std::lock_guard<std::mutex> lock(dev->abandon_mu);
  dev->abandoned_until.push_back(until);
  dev->abandon_code = code;
  dev->abandon_message = msg;
}

// Launches the 32-bit fill kernel (defined in runtime.cu): `count` words at
// `dst` set to `pattern`, on `stream`.
cudaError_t launch_fill32(void* dst, uint32_t pattern, uint64_t count,
                          cudaStream_t stream, int sm_count);

}  // namespace pgcuda

#endif  // PLUGGABLE_CUDA_COMMON_H_
