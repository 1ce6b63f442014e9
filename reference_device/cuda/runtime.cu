// The stream executor of the CUDA reference plugin: memory, streams, events,
// timers, copies, fills and host callbacks. Every callback makes its device
// current with a DeviceGuard and restores the caller's device on return.
#include <cstring>
#include <new>
#include <string>

#include "cublas_loader.h"
#include "cudnn_loader.h"
#include "cuda_common.h"
#include "launch_queue.h"
#include "profiler.h"
#include "staging.h"
#include "wait_work.h"

namespace pgcuda {

// ---------------------------------------------------------------------------
// 32-bit fill kernel (memset32 has no runtime-API call).

namespace {

__global__ void fill32_kernel(uint32_t* dst, uint32_t pattern, uint64_t count) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  // Aligned bulk in 16-byte stores, then the words left over.
  const uint64_t head =
      ((16 - (reinterpret_cast<uintptr_t>(dst) & 15)) & 15) / 4;
  const uint64_t lead = head < count ? head : count;
  if (i < lead) dst[i] = pattern;
  const uint64_t nvec = (count - lead) / 4;
  uint4* vdst = reinterpret_cast<uint4*>(dst + lead);
  const uint4 v = make_uint4(pattern, pattern, pattern, pattern);
  for (uint64_t j = i; j < nvec; j += stride) vdst[j] = v;
  for (uint64_t j = lead + nvec * 4 + i; j < count; j += stride) {
    dst[j] = pattern;
  }
}

}  // namespace

cudaError_t launch_fill32(void* dst, uint32_t pattern, uint64_t count,
                          cudaStream_t stream, int sm_count) {
  if (count == 0) return cudaSuccess;
  // A word pointer must be 4-byte aligned.
  if ((reinterpret_cast<uintptr_t>(dst) & 3) != 0) return cudaErrorInvalidValue;
  const int threads = 256;
  uint64_t blocks = (count / 4 + threads - 1) / threads;
  const uint64_t max_blocks = static_cast<uint64_t>(sm_count) * 8;
  if (blocks > max_blocks) blocks = max_blocks;
  if (blocks < 1) blocks = 1;
  fill32_kernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(
      static_cast<uint32_t*>(dst), pattern, count);
  return cudaGetLastError();
}

namespace {

// ---------------------------------------------------------------------------
// Memory

void allocate(const SP_Device* device, uint64_t size, int64_t,
              SP_DeviceMemoryBase* mem) {
  mem->struct_size = SP_DEVICE_MEMORY_BASE_STRUCT_SIZE;
  mem->opaque = nullptr;
  mem->size = 0;
  mem->payload = 0;
  CudaDevice* dev = device_of(device);
  if (dev == nullptr || size == 0) return;
  DeviceGuard guard(dev->ordinal);
  if (guard.error() != cudaSuccess) return;
  void* p = nullptr;
  cudaError_t e;
  if (dev->use_pool) {
    e = cudaMallocFromPoolAsync(&p, size, dev->pool, dev->alloc_stream);
    if (e == cudaErrorMemoryAllocation) {
      // Give memory cached by the pool back and try once more.
      (void)cudaGetLastError();
      (void)cudaStreamSynchronize(dev->alloc_stream);
      (void)cudaMemPoolTrimTo(dev->pool, 0);
      p = nullptr;
      e = cudaMallocFromPoolAsync(&p, size, dev->pool, dev->alloc_stream);
    }
    // The block must be usable from any stream once allocate returns.
    if (e == cudaSuccess) e = cudaStreamSynchronize(dev->alloc_stream);
  } else {
    e = cudaMalloc(&p, size);
  }
  if (e != cudaSuccess || p == nullptr) {
    // Clear the error so that it does not surface from a later call.
    (void)cudaGetLastError();
    if (p != nullptr && dev->use_pool) {
      (void)cudaFreeAsync(p, dev->alloc_stream);
      (void)cudaGetLastError();
    }
    return;
  }
  mem->opaque = p;
  mem->size = size;
  mem->payload = size;
  const int64_t s = static_cast<int64_t>(size);
  dev->num_allocs.fetch_add(1, std::memory_order_relaxed);
  const int64_t now = dev->bytes_in_use.fetch_add(s) + s;
  int64_t peak = dev->peak_bytes_in_use.load();
  while (now > peak && !dev->peak_bytes_in_use.compare_exchange_weak(peak, now)) {
  }
  int64_t largest = dev->largest_alloc_size.load();
  while (s > largest && !dev->largest_alloc_size.compare_exchange_weak(largest, s)) {
  }
}

void deallocate(const SP_Device* device, SP_DeviceMemoryBase* memory) {
  CudaDevice* dev = device_of(device);
  if (dev == nullptr || memory == nullptr || memory->opaque == nullptr) return;
  DeviceGuard guard(dev->ordinal);
  // The core frees memory only after every stream is done with it, so the
  // stream-ordered free needs no wait for user streams.
  cudaError_t e = dev->use_pool ? cudaFreeAsync(memory->opaque, dev->alloc_stream)
                                : cudaFree(memory->opaque);
  if (e != cudaSuccess) (void)cudaGetLastError();
  const uint64_t size = memory->payload != 0 ? memory->payload : memory->size;
  dev->bytes_in_use.fetch_sub(static_cast<int64_t>(size));
  memory->opaque = nullptr;
}

void* host_memory_allocate(const SP_Device* device, uint64_t size) {
  CudaDevice* dev = device_of(device);
  if (dev == nullptr) return nullptr;
  DeviceGuard guard(dev->ordinal);
  void* p = nullptr;
  // Portable: the memory is pinned for every device, not only this one.
  cudaError_t e = cudaHostAlloc(&p, size == 0 ? 1 : size, cudaHostAllocPortable);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return p;
}

void host_memory_deallocate(const SP_Device* device, void* mem) {
  if (mem == nullptr) return;
  CudaDevice* dev = device_of(device);
  DeviceGuard guard(dev == nullptr ? 0 : dev->ordinal);
  if (cudaFreeHost(mem) != cudaSuccess) (void)cudaGetLastError();
}

void* unified_memory_allocate(const SP_Device* device, uint64_t bytes) {
  CudaDevice* dev = device_of(device);
  if (dev == nullptr) return nullptr;
  DeviceGuard guard(dev->ordinal);
  void* p = nullptr;
  cudaError_t e = cudaMallocManaged(&p, bytes == 0 ? 1 : bytes, cudaMemAttachGlobal);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return p;
}

void unified_memory_deallocate(const SP_Device* device, void* location) {
  if (location == nullptr) return;
  CudaDevice* dev = device_of(device);
  DeviceGuard guard(dev == nullptr ? 0 : dev->ordinal);
  if (cudaFree(location) != cudaSuccess) (void)cudaGetLastError();
}

TF_Bool get_allocator_stats(const SP_Device* device, SP_AllocatorStats* stats) {
  CudaDevice* dev = device_of(device);
  if (dev == nullptr || stats == nullptr) return 0;
  stats->struct_size = SP_ALLOCATORSTATS_STRUCT_SIZE;
  stats->num_allocs = dev->num_allocs.load();
  stats->bytes_in_use = dev->bytes_in_use.load();
  stats->peak_bytes_in_use = dev->peak_bytes_in_use.load();
  stats->largest_alloc_size = dev->largest_alloc_size.load();
  stats->has_bytes_limit = 1;
  stats->bytes_limit = dev->total_memory;
  stats->bytes_reserved = 0;
  stats->peak_bytes_reserved = 0;
  stats->has_bytes_reservable_limit = 0;
  stats->bytes_reservable_limit = 0;
  stats->largest_free_block_bytes = 0;
  return 1;
}

TF_Bool device_memory_usage(const SP_Device* device, int64_t* free_bytes,
                            int64_t* total_bytes) {
  CudaDevice* dev = device_of(device);
  if (dev == nullptr) return 0;
  DeviceGuard guard(dev->ordinal);
  if (guard.error() != cudaSuccess) return 0;
  size_t f = 0, t = 0;
  if (cudaMemGetInfo(&f, &t) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  *free_bytes = static_cast<int64_t>(f);
  *total_bytes = static_cast<int64_t>(t);
  return 1;
}

// ---------------------------------------------------------------------------
// Streams

void free_stream(CudaStream* s) {
  if (s == nullptr) return;
  if (s->blas_handle != nullptr) destroy_blas_handle(s->blas_handle);
  if (s->blas_workspace != nullptr) (void)cudaFree(s->blas_workspace);
  if (s->dnn_handle != nullptr) destroy_dnn_handle(s->dnn_handle);
  if (s->pinned_checks != nullptr) (void)cudaFreeHost(s->pinned_checks);
  if (s->gemv_tickets != nullptr) (void)cudaFree(s->gemv_tickets);
  if (s->dep_event != nullptr) (void)cudaEventDestroy(s->dep_event);
  if (s->order_event != nullptr) (void)cudaEventDestroy(s->order_event);
  if (s->stream != nullptr) (void)cudaStreamDestroy(s->stream);
  (void)cudaGetLastError();
  delete s;
}

void create_stream(const SP_Device* device, SP_Stream* stream, TF_Status* status) {
  *stream = nullptr;
  CudaDevice* dev = device_of(device);
  DeviceGuard guard(dev->ordinal);
  if (!guard.ok(status, dev->ordinal)) return;
  CudaStream* s = new (std::nothrow) CudaStream();
  if (s == nullptr) {
    TF_SetStatus(status, TF_RESOURCE_EXHAUSTED, "out of host memory");
    return;
  }
  s->dev = dev;
  s->ordinal = dev->ordinal;
  cudaError_t e = cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    s->stream = nullptr;
    set_cuda_status(status, e, "cudaStreamCreateWithFlags");
    free_stream(s);
    return;
  }
  e = cudaEventCreateWithFlags(&s->dep_event, cudaEventDisableTiming);
  if (e != cudaSuccess) {
    s->dep_event = nullptr;
    set_cuda_status(status, e, "cudaEventCreateWithFlags");
    free_stream(s);
    return;
  }
  *stream = reinterpret_cast<SP_Stream>(s);
}

void destroy_stream(const SP_Device* device, SP_Stream stream) {
  CudaStream* s = stream_of(stream);
  if (s == nullptr) return;
  DeviceGuard guard(s->ordinal);
  (void)device;
  (void)cudaStreamSynchronize(s->stream);
  free_stream(s);
}

void create_stream_dependency(const SP_Device*, SP_Stream dependent,
                              SP_Stream other, TF_Status* status) {
  CudaStream* d = stream_of(dependent);
  CudaStream* o = stream_of(other);
  if (d == nullptr || o == nullptr || d == o) return;
  DeviceGuard guard(o->ordinal);
  if (!guard.ok(status, o->ordinal)) return;
  // cudaStreamWaitEvent waits for the record made just before it, even if
  // another thread records the same event again later.
  std::lock_guard<std::mutex> lock(o->mu);
  cudaError_t e = cudaEventRecord(o->dep_event, o->stream);
  if (e != cudaSuccess) {
    set_cuda_status(status, e, "cudaEventRecord");
    return;
  }
  e = cudaStreamWaitEvent(d->stream, o->dep_event, 0);
  if (e != cudaSuccess) set_cuda_status(status, e, "cudaStreamWaitEvent");
}

void get_stream_status(const SP_Device*, SP_Stream stream, TF_Status* status) {
  CudaStream* s = stream_of(stream);
  if (s == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(s->error_mu);
    if (s->has_error) {
      TF_SetStatus(status, s->error_code, s->error_message.c_str());
      return;
    }
  }
  DeviceGuard guard(s->ordinal);
  cudaError_t e = cudaStreamQuery(s->stream);
  if (e == cudaSuccess || e == cudaErrorNotReady) {
    if (e == cudaErrorNotReady) (void)cudaGetLastError();
    return;
  }
  set_cuda_status(status, e, "cudaStreamQuery");
}

// ---------------------------------------------------------------------------
// Events

// Issues the launch queue of `ev`'s device up to `ev`'s record, if it was
// queued and is not issued yet.
void issue_record(CudaEvent* ev) {
  const uint64_t pos = ev->queued.load(std::memory_order_acquire);
  if (pos != 0) queue_of(ev->dev)->flush_to(pos);
}

void create_event(const SP_Device* device, SP_Event* event, TF_Status* status) {
  *event = nullptr;
  CudaDevice* dev = device_of(device);
  DeviceGuard guard(dev->ordinal);
  if (!guard.ok(status, dev->ordinal)) return;
  CudaEvent* ev = new (std::nothrow) CudaEvent();
  if (ev == nullptr) {
    TF_SetStatus(status, TF_RESOURCE_EXHAUSTED, "out of host memory");
    return;
  }
  ev->ordinal = dev->ordinal;
  ev->dev = dev;
  cudaError_t e = cudaEventCreateWithFlags(&ev->event, cudaEventDisableTiming);
  if (e != cudaSuccess) {
    set_cuda_status(status, e, "cudaEventCreateWithFlags");
    delete ev;
    return;
  }
  *event = reinterpret_cast<SP_Event>(ev);
}

void destroy_event(const SP_Device*, SP_Event event) {
  CudaEvent* ev = reinterpret_cast<CudaEvent*>(event);
  if (ev == nullptr) return;
  issue_record(ev);
  DeviceGuard guard(ev->ordinal);
  if (cudaEventDestroy(ev->event) != cudaSuccess) (void)cudaGetLastError();
  delete ev;
}

// A record still in the launch queue reads PENDING (without waiting for
// it); a queued launch before it that failed makes it ERROR once reached.
SE_EventStatus get_event_status(const SP_Device*, SP_Event event) {
  CudaEvent* ev = reinterpret_cast<CudaEvent*>(event);
  if (ev == nullptr || !ev->recorded.load()) return SE_EVENT_UNKNOWN;
  const uint64_t pos = ev->queued.load(std::memory_order_acquire);
  if (pos != 0 && !queue_of(ev->dev)->issued(pos)) return SE_EVENT_PENDING;
  DeviceGuard guard(ev->ordinal);
  cudaError_t e = cudaEventQuery(ev->event);
  if (e == cudaSuccess) {
    return ev->failed.load(std::memory_order_relaxed) ? SE_EVENT_ERROR : SE_EVENT_COMPLETE;
  }
  (void)cudaGetLastError();
  return e == cudaErrorNotReady ? SE_EVENT_PENDING : SE_EVENT_ERROR;
}

void record_event(const SP_Device*, SP_Stream stream, SP_Event event,
                  TF_Status* status) {
  CudaStream* s = stream_of(stream);
  CudaEvent* ev = reinterpret_cast<CudaEvent*>(event);
  if (s == nullptr || ev == nullptr) {
    TF_SetStatus(status, TF_INVALID_ARGUMENT, "record_event: NULL stream or event");
    return;
  }
  // Queued after queued work (so queued too), and while the launcher is
  // awake, which then issues the record off this thread; not while the
  // profiler records or a stream captures, as for launches (kernel_util.h).
  LaunchQueue* q = queue_of(s->dev);
  if (q != nullptr &&
      (q->busy() || (q->awake() && !profiling() &&
                     s->dev->capturing.load(std::memory_order_relaxed) == 0))) {
    q->push_record(s, ev);
    return;
  }
  DeviceGuard guard(s->ordinal);
  if (!guard.ok(status, s->ordinal)) return;
  ev->queued.store(0, std::memory_order_relaxed);
  ev->failed.store(s->launch_failed.exchange(false), std::memory_order_relaxed);
  cudaError_t e = cudaEventRecord(ev->event, s->stream);
  if (e != cudaSuccess) {
    set_cuda_status(status, e, "cudaEventRecord");
    return;
  }
  ev->recorded.store(true);
}

void wait_for_event(const SP_Device* const, SP_Stream stream, SP_Event event,
                    TF_Status* const status) {
  CudaStream* s = stream_of(stream);
  CudaEvent* ev = reinterpret_cast<CudaEvent*>(event);
  if (s == nullptr || ev == nullptr) {
    TF_SetStatus(status, TF_INVALID_ARGUMENT, "wait_for_event: NULL stream or event");
    return;
  }
  issue_record(ev);
  DeviceGuard guard(s->ordinal);
  if (!guard.ok(status, s->ordinal)) return;
  cudaError_t e = cudaStreamWaitEvent(s->stream, ev->event, 0);
  if (e != cudaSuccess) set_cuda_status(status, e, "cudaStreamWaitEvent");
}

// ---------------------------------------------------------------------------
// Timers

void create_timer(const SP_Device* device, SP_Timer* timer, TF_Status* status) {
  *timer = nullptr;
  CudaDevice* dev = device_of(device);
  DeviceGuard guard(dev->ordinal);
  if (!guard.ok(status, dev->ordinal)) return;
  CudaTimer* t = new (std::nothrow) CudaTimer();
  if (t == nullptr) {
    TF_SetStatus(status, TF_RESOURCE_EXHAUSTED, "out of host memory");
    return;
  }
  t->ordinal = dev->ordinal;
  cudaError_t e = cudaEventCreate(&t->start);
  if (e == cudaSuccess) {
    e = cudaEventCreate(&t->stop);
    if (e != cudaSuccess) (void)cudaEventDestroy(t->start);
  }
  if (e != cudaSuccess) {
    set_cuda_status(status, e, "cudaEventCreate(timer)");
    delete t;
    return;
  }
  *timer = reinterpret_cast<SP_Timer>(t);
}

void destroy_timer(const SP_Device*, SP_Timer timer) {
  CudaTimer* t = reinterpret_cast<CudaTimer*>(timer);
  if (t == nullptr) return;
  DeviceGuard guard(t->ordinal);
  (void)cudaEventDestroy(t->start);
  (void)cudaEventDestroy(t->stop);
  (void)cudaGetLastError();
  delete t;
}

void mark_timer(SP_Stream stream, cudaEvent_t ev, const char* what,
                TF_Status* status) {
  CudaStream* s = stream_of(stream);
  if (s == nullptr) {
    TF_SetStatus(status, TF_INVALID_ARGUMENT, "timer: NULL stream");
    return;
  }
  DeviceGuard guard(s->ordinal);
  if (!guard.ok(status, s->ordinal)) return;
  cudaError_t e = cudaEventRecord(ev, s->stream);
  if (e != cudaSuccess) set_cuda_status(status, e, "cudaEventRecord(%s)", what);
}

void start_timer(const SP_Device*, SP_Stream stream, SP_Timer timer,
                 TF_Status* status) {
  CudaTimer* t = reinterpret_cast<CudaTimer*>(timer);
  if (t == nullptr) {
    TF_SetStatus(status, TF_INVALID_ARGUMENT, "start_timer: NULL timer");
    return;
  }
  mark_timer(stream, t->start, "timer start", status);
}

void stop_timer(const SP_Device*, SP_Stream stream, SP_Timer timer,
                TF_Status* status) {
  CudaTimer* t = reinterpret_cast<CudaTimer*>(timer);
  if (t == nullptr) {
    TF_SetStatus(status, TF_INVALID_ARGUMENT, "stop_timer: NULL timer");
    return;
  }
  mark_timer(stream, t->stop, "timer stop", status);
}

uint64_t timer_nanoseconds(SP_Timer timer) {
  CudaTimer* t = reinterpret_cast<CudaTimer*>(timer);
  if (t == nullptr) return 0;
  DeviceGuard guard(t->ordinal);
  float ms = 0.0f;
  if (cudaEventElapsedTime(&ms, t->start, t->stop) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  if (ms <= 0.0f) return 0;
  return static_cast<uint64_t>(static_cast<double>(ms) * 1.0e6);
}

// ---------------------------------------------------------------------------
// Copies

// A copy on `stream`: `enqueue(s)` puts it on the plugin stream's CUDA
// stream, with the device current and timed by the profiler; `what` names it
// in the error.
template <typename Enqueue>
void stream_copy(SP_Stream stream, uint64_t size, const char* what, TF_Status* status,
                 Enqueue enqueue) {
  if (size == 0) return;
  CudaStream* s = stream_of(stream);
  if (s == nullptr) {
    TF_SetStatus(status, TF_INVALID_ARGUMENT, "copy: NULL stream");
    return;
  }
  DeviceGuard guard(s->ordinal);
  if (!guard.ok(status, s->ordinal)) return;
  int64_t prof = profiling() ? prof_begin(what, strlen(what), s, static_cast<int64_t>(size)) : -1;
  cudaError_t e = enqueue(s);
  prof_end(prof, s);
  if (e != cudaSuccess) {
    set_cuda_status(status, e, "cudaMemcpyAsync(%s, %llu bytes)", what,
                    static_cast<unsigned long long>(size));
  }
}

// Host<->device copy on a caller's stream, staged through the device's
// pinned chunks when the host side is large and pageable (staging.h).
void host_copy(SP_Stream stream, bool to_device, void* device_ptr, void* host,
               uint64_t size, const char* what, TF_Status* status) {
  stream_copy(stream, size, what, status, [&](CudaStream* s) {
    return host_device_copy(s->dev, s->stream, to_device, device_ptr, host, size);
  });
}

// True (with `status` set) when a copy from the device into `host` on
// `stream` must not be enqueued: on a device that ran a process collective
// (poll_waits), a copy into pageable memory returns only once the stream
// reaches it, and a collective ahead of it whose peer never comes would
// hold the caller for ever, even after its communicator was aborted (NCCL's
// abort does not always end the kernel). So there the stream is waited for
// first, by polling (wait_work), which gives the collective's error once
// the watchdog or the process group abandoned it. Pinned destinations are
// not waited for (the copy stays asynchronous).
bool stuck_behind_abandoned(SP_Stream stream, const void* host, TF_Status* status) {
  CudaStream* s = stream_of(stream);
  if (s == nullptr || !s->dev->poll_waits.load(std::memory_order_relaxed) ||
      !host_is_pageable(host)) {
    return false;
  }
  DeviceGuard guard(s->ordinal);
  TF_Code code = TF_OK;
  std::string msg;
  const cudaError_t e = wait_work(s->dev, s->stream, nullptr, &code, &msg);
  if (e == cudaErrorNotReady && code != TF_OK) {
    TF_SetStatus(status, code, msg.c_str());
    return true;
  }
  return false;  // a device error shows in the copy itself
}

// A pageable destination holds the data when this returns; a pinned one
// once the stream has passed the copy.
void memcpy_dtoh(const SP_Device*, SP_Stream stream, void* host_dst,
                 const SP_DeviceMemoryBase* device_src, uint64_t size,
                 TF_Status* status) {
  if (stuck_behind_abandoned(stream, host_dst, status)) return;
  host_copy(stream, false, device_src->opaque, host_dst, size, "MemcpyD2H", status);
}

// A pageable source has been read completely when this returns; a pinned
// one is read when the stream reaches the copy.
void memcpy_htod(const SP_Device*, SP_Stream stream,
                 SP_DeviceMemoryBase* device_dst, const void* host_src,
                 uint64_t size, TF_Status* status) {
  host_copy(stream, true, device_dst->opaque, const_cast<void*>(host_src), size,
            "MemcpyH2D", status);
}

void memcpy_dtod(const SP_Device*, SP_Stream stream,
                 SP_DeviceMemoryBase* device_dst,
                 const SP_DeviceMemoryBase* device_src, uint64_t size,
                 TF_Status* status) {
  stream_copy(stream, size, "MemcpyD2D", status, [&](CudaStream* s) {
    // cudaMemcpyDefault: direction (and device, for peer copies) from UVA.
    return cudaMemcpyAsync(device_dst->opaque, device_src->opaque, size, cudaMemcpyDefault,
                           s->stream);
  });
}

// A synchronous copy through the device's internal stream: `enqueue(dev)`
// puts it on dev->sync_stream, and this returns once it has arrived.
template <typename Enqueue>
void sync_copy(const SP_Device* device, uint64_t size, const char* what, TF_Status* status,
               Enqueue enqueue) {
  if (size == 0) return;
  CudaDevice* dev = device_of(device);
  DeviceGuard guard(dev->ordinal);
  if (!guard.ok(status, dev->ordinal)) return;
  cudaError_t e = enqueue(dev);
  if (e == cudaSuccess) e = cudaStreamSynchronize(dev->sync_stream);
  if (e != cudaSuccess) {
    set_cuda_status(status, e, "cudaMemcpy(%s, %llu bytes)", what,
                    static_cast<unsigned long long>(size));
  }
}

void sync_host_copy(const SP_Device* device, bool to_device, void* device_ptr,
                    void* host, uint64_t size, const char* what, TF_Status* status) {
  sync_copy(device, size, what, status, [&](CudaDevice* dev) {
    return host_device_copy(dev, dev->sync_stream, to_device, device_ptr, host, size);
  });
}

void sync_memcpy_dtoh(const SP_Device* device, void* host_dst,
                      const SP_DeviceMemoryBase* device_src, uint64_t size,
                      TF_Status* status) {
  sync_host_copy(device, false, device_src->opaque, host_dst, size, "MemcpyD2H", status);
}

void sync_memcpy_htod(const SP_Device* device, SP_DeviceMemoryBase* device_dst,
                      const void* host_src, uint64_t size, TF_Status* status) {
  sync_host_copy(device, true, device_dst->opaque, const_cast<void*>(host_src), size,
                 "MemcpyH2D", status);
}

void sync_memcpy_dtod(const SP_Device* device, SP_DeviceMemoryBase* device_dst,
                      const SP_DeviceMemoryBase* device_src, uint64_t size,
                      TF_Status* status) {
  sync_copy(device, size, "device to device", status, [&](CudaDevice* dev) {
    return cudaMemcpyAsync(device_dst->opaque, device_src->opaque, size, cudaMemcpyDefault,
                           dev->sync_stream);
  });
}

// ---------------------------------------------------------------------------
// Synchronisation

void block_host_for_event(const SP_Device*, SP_Event event, TF_Status* status) {
  CudaEvent* ev = reinterpret_cast<CudaEvent*>(event);
  if (ev == nullptr || !ev->recorded.load()) {
    TF_SetStatus(status, TF_FAILED_PRECONDITION,
                 "block_host_for_event: the event was never recorded");
    return;
  }
  issue_record(ev);
  DeviceGuard guard(ev->ordinal);
  if (!guard.ok(status, ev->ordinal)) return;
  TF_Code code = TF_OK;
  std::string msg;
  cudaError_t e = wait_work(ev->dev, nullptr, ev->event, &code, &msg);
  if (e == cudaErrorNotReady && code != TF_OK) {
    TF_SetStatus(status, code, msg.c_str());
  } else if (e != cudaSuccess) {
    set_cuda_status(status, e, "cudaEventSynchronize");
  }
}

void block_host_until_done(const SP_Device*, SP_Stream stream, TF_Status* status) {
  CudaStream* s = stream_of(stream);
  if (s == nullptr) return;
  DeviceGuard guard(s->ordinal);
  if (!guard.ok(status, s->ordinal)) return;
  TF_Code abandoned = TF_OK;
  std::string abandon_msg;
  cudaError_t e = wait_work(s->dev, s->stream, nullptr, &abandoned, &abandon_msg);
  if (e == cudaErrorNotReady && abandoned != TF_OK) {
    e = cudaSuccess;  // reported below: the deferred error, else the abandonment
  }
  // Report and clear the deferred error (a device error takes precedence).
  bool had = false;
  TF_Code code = TF_OK;
  std::string msg;
  {
    std::lock_guard<std::mutex> lock(s->error_mu);
    if (s->has_error) {
      had = true;
      code = s->error_code;
      msg.swap(s->error_message);
      s->has_error = false;
      s->error_code = TF_OK;
    }
  }
  if (e != cudaSuccess) {
    set_cuda_status(status, e, "cudaStreamSynchronize");
  } else if (had) {
    TF_SetStatus(status, code, msg.c_str());
  } else if (abandoned != TF_OK) {
    TF_SetStatus(status, abandoned, abandon_msg.c_str());
  }
}

void synchronize_all_activity(const SP_Device* device, TF_Status* status) {
  CudaDevice* dev = device_of(device);
  DeviceGuard guard(dev->ordinal);
  if (!guard.ok(status, dev->ordinal)) return;
  cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) set_cuda_status(status, e, "cudaDeviceSynchronize");
}

// ---------------------------------------------------------------------------
// Fills

void memset_bytes(SP_Stream stream, SP_DeviceMemoryBase* location, int value,
                  uint64_t size, TF_Status* status) {
  if (size == 0) return;
  CudaStream* s = stream_of(stream);
  if (s == nullptr) {
    TF_SetStatus(status, TF_INVALID_ARGUMENT, "memset: NULL stream");
    return;
  }
  DeviceGuard guard(s->ordinal);
  if (!guard.ok(status, s->ordinal)) return;
  cudaError_t e = cudaMemsetAsync(location->opaque, value, size, s->stream);
  if (e != cudaSuccess) {
    set_cuda_status(status, e, "cudaMemsetAsync(%llu bytes)",
                    static_cast<unsigned long long>(size));
  }
}

void mem_zero(const SP_Device*, SP_Stream stream, SP_DeviceMemoryBase* location,
              uint64_t size, TF_Status* status) {
  memset_bytes(stream, location, 0, size, status);
}

void memset8(const SP_Device*, SP_Stream stream, SP_DeviceMemoryBase* location,
             uint8_t pattern, uint64_t size, TF_Status* status) {
  memset_bytes(stream, location, pattern, size, status);
}

void memset32(const SP_Device*, SP_Stream stream, SP_DeviceMemoryBase* location,
              uint32_t pattern, uint64_t size, TF_Status* status) {
  if (size == 0) return;
  if (size % 4 != 0) {
    TF_SetStatus(status, TF_INVALID_ARGUMENT, "memset32: size is not a multiple of 4");
    return;
  }
  CudaStream* s = stream_of(stream);
  if (s == nullptr) {
    TF_SetStatus(status, TF_INVALID_ARGUMENT, "memset32: NULL stream");
    return;
  }
  DeviceGuard guard(s->ordinal);
  if (!guard.ok(status, s->ordinal)) return;
  cudaError_t e = launch_fill32(location->opaque, pattern, size / 4, s->stream,
                                s->dev->sm_count);
  if (e != cudaSuccess) {
    set_cuda_status(status, e, "fill32 kernel launch (%llu bytes)",
                    static_cast<unsigned long long>(size));
  }
}

// ---------------------------------------------------------------------------
// Host callbacks

struct HostCallback {
  CudaStream* stream;
  SE_StatusCallbackFn fn;
  void* arg;
};

void CUDART_CB host_callback_trampoline(void* p) {
  HostCallback* cb = static_cast<HostCallback*>(p);
  TF_Status* st = TF_NewStatus();
  cb->fn(cb->arg, st);
  if (TF_GetCode(st) != TF_OK) {
    stream_set_error(cb->stream, TF_GetCode(st), TF_Message(st));
  }
  TF_DeleteStatus(st);
  delete cb;
}

TF_Bool host_callback(const SP_Device*, SP_Stream stream,
                      SE_StatusCallbackFn callback_fn, void* callback_arg) {
  CudaStream* s = stream_of(stream);
  if (s == nullptr || callback_fn == nullptr) return 0;
  HostCallback* cb = new (std::nothrow) HostCallback{s, callback_fn, callback_arg};
  if (cb == nullptr) return 0;
  DeviceGuard guard(s->ordinal);
  if (guard.error() != cudaSuccess) {
    delete cb;
    return 0;
  }
  cudaError_t e = cudaLaunchHostFunc(s->stream, host_callback_trampoline, cb);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    delete cb;
    return 0;
  }
  return 1;
}

}  // namespace

// The host-copy extension (pluggable_host_copy.h): `host_src` has been read
// completely when this returns, pageable or pinned.
void memcpy_htod_consumed(const SP_Device* device, SP_Stream stream,
                          SP_DeviceMemoryBase* device_dst, const void* host_src, uint64_t size,
                          TF_Status* status) {
  flush_device(device_of(device));
  stream_copy(stream, size, "MemcpyH2D", status, [&](CudaStream* s) {
    return host_to_device_consumed(s->dev, s->stream, device_dst->opaque, host_src, size);
  });
}

namespace {

// `F`, called once the launches queued for its device are issued: the
// stream executor's functions that put work on a stream or wait for it
// (launch_queue.h).
template <auto F> struct Flushed;
template <typename R, typename... A, R (*F)(const SP_Device*, A...)>
struct Flushed<F> {
  static R call(const SP_Device* device, A... args) {
    flush_device(device_of(device));
    return F(device, args...);
  }
};

}  // namespace

void fill_stream_executor(SP_StreamExecutor* se) {
  se->struct_size = SP_STREAMEXECUTOR_STRUCT_SIZE;
  se->allocate = allocate;
  se->deallocate = deallocate;
  se->host_memory_allocate = host_memory_allocate;
  se->host_memory_deallocate = host_memory_deallocate;
  se->unified_memory_allocate = unified_memory_allocate;
  se->unified_memory_deallocate = unified_memory_deallocate;
  se->get_allocator_stats = get_allocator_stats;
  se->device_memory_usage = device_memory_usage;
  se->create_stream = create_stream;
  se->destroy_stream = Flushed<destroy_stream>::call;
  se->create_stream_dependency = Flushed<create_stream_dependency>::call;
  se->get_stream_status = Flushed<get_stream_status>::call;
  se->create_event = create_event;
  se->destroy_event = destroy_event;
  se->get_event_status = get_event_status;
  se->record_event = record_event;
  se->wait_for_event = Flushed<wait_for_event>::call;
  se->create_timer = create_timer;
  se->destroy_timer = destroy_timer;
  se->start_timer = Flushed<start_timer>::call;
  se->stop_timer = Flushed<stop_timer>::call;
  se->memcpy_dtoh = Flushed<memcpy_dtoh>::call;
  se->memcpy_htod = Flushed<memcpy_htod>::call;
  se->memcpy_dtod = Flushed<memcpy_dtod>::call;
  se->sync_memcpy_dtoh = Flushed<sync_memcpy_dtoh>::call;
  se->sync_memcpy_htod = Flushed<sync_memcpy_htod>::call;
  se->sync_memcpy_dtod = Flushed<sync_memcpy_dtod>::call;
  se->block_host_for_event = block_host_for_event;
  se->block_host_until_done = Flushed<block_host_until_done>::call;
  se->synchronize_all_activity = Flushed<synchronize_all_activity>::call;
  se->mem_zero = Flushed<mem_zero>::call;
  se->memset = Flushed<memset8>::call;
  se->memset32 = Flushed<memset32>::call;
  se->host_callback = Flushed<host_callback>::call;
}

void fill_timer_fns(SP_TimerFns* fns) {
  fns->struct_size = SP_TIMER_FNS_STRUCT_SIZE;
  fns->nanoseconds = timer_nanoseconds;
}

}  // namespace pgcuda
