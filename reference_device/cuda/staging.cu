// Host<->device copies staged through pinned chunks, and the host threads
// that split large memcpys (see staging.h for what a copy promises).
#include "staging.h"

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

namespace pgcuda {

namespace {

// ---------------------------------------------------------------------------
// Host copy threads

// Parts smaller than this are not worth a thread.
constexpr uint64_t kMinPart = 512ull << 10;

// A fixed set of worker threads that take parts of one memcpy at a time
// (the calling thread takes parts too). Created on first use and never
// destroyed: the threads sleep on a condition variable between copies and
// end with the process.
class CopyThreads {
 public:
  static CopyThreads& instance() {
    static CopyThreads* pool = new CopyThreads();
    return *pool;
  }

  void copy(char* dst, const char* src, uint64_t n) {
    const uint64_t max_parts = n / kMinPart;
    const int parts = static_cast<int>(std::min<uint64_t>(workers_ + 1, max_parts));
    // Another thread's split copy is running: copy alone rather than wait.
    if (parts < 2 || !run_mu_.try_lock()) {
      memcpy(dst, src, n);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      dst_ = dst;
      src_ = src;
      n_ = n;
      // Parts of whole cache lines.
      part_ = ((n + parts - 1) / parts + 63) & ~static_cast<uint64_t>(63);
      parts_ = parts;
      next_ = 0;
      pending_ = parts;
    }
    work_cv_.notify_all();
    while (take_one()) {
    }
    {
      std::unique_lock<std::mutex> lock(mu_);
      done_cv_.wait(lock, [this] { return pending_ == 0; });
      parts_ = 0;
      next_ = 0;
    }
    run_mu_.unlock();
  }

 private:
  CopyThreads() {
    int threads = 0;
    const char* env = getenv("PLUGGABLE_CUDA_COPY_THREADS");
    if (env != nullptr && *env != '\0') {
      threads = atoi(env);
    } else {
      const int cores = static_cast<int>(std::thread::hardware_concurrency());
      threads = std::min(4, cores / 2);
    }
    threads = std::max(1, std::min(threads, 16));
    for (int i = 0; i + 1 < threads; ++i) {
      try {
        std::thread(&CopyThreads::worker, this).detach();
        ++workers_;
      } catch (...) {
        break;  // fewer helpers: still correct
      }
    }
  }

  // Copies the next part, if any; false when none was left.
  bool take_one() {
    int i;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (next_ >= parts_) return false;
      i = next_++;
    }
    do_part(i);
    return true;
  }

  void do_part(int i) {
    const uint64_t off = static_cast<uint64_t>(i) * part_;
    if (off < n_) memcpy(dst_ + off, src_ + off, std::min(part_, n_ - off));
    std::lock_guard<std::mutex> lock(mu_);
    if (--pending_ == 0) done_cv_.notify_all();
  }

  void worker() {
    for (;;) {
      int i;
      {
        std::unique_lock<std::mutex> lock(mu_);
        work_cv_.wait(lock, [this] { return next_ < parts_; });
        i = next_++;
      }
      do_part(i);
    }
  }

  int workers_ = 0;
  std::mutex run_mu_;  // one split copy at a time
  std::mutex mu_;      // guards the fields below
  std::condition_variable work_cv_, done_cv_;
  char* dst_ = nullptr;
  const char* src_ = nullptr;
  uint64_t n_ = 0;
  uint64_t part_ = 0;
  int parts_ = 0;
  int next_ = 0;
  int pending_ = 0;
};

// ---------------------------------------------------------------------------
// The staging ring

constexpr int kSlots = CudaDevice::kStagingSlots;

// True when `p` is ordinary (pageable) host memory.
bool is_pageable(const void* p) {
  cudaPointerAttributes a;
  cudaError_t e = cudaPointerGetAttributes(&a, p);
  if (e != cudaSuccess) {
    // Runtimes before CUDA 11 report unregistered memory as an error.
    (void)cudaGetLastError();
    return true;
  }
  return a.type == cudaMemoryTypeUnregistered;
}

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
    (void)cudaGetLastError();
    return true;  // unknown: take the plain path
  }
  return status != cudaStreamCaptureStatusNone;
}

void free_ring(CudaDevice* dev) {
  for (int i = 0; i < kSlots; ++i) {
    if (dev->staging_done[i] != nullptr) {
      (void)cudaEventSynchronize(dev->staging_done[i]);
      (void)cudaEventDestroy(dev->staging_done[i]);
      dev->staging_done[i] = nullptr;
    }
    if (dev->staging[i] != nullptr) {
      (void)cudaFreeHost(dev->staging[i]);
      dev->staging[i] = nullptr;
    }
  }
  (void)cudaGetLastError();
  dev->staging_ready = false;
}

// Makes the ring on first use (staging_mu held); false if it cannot be had.
bool ensure_ring(CudaDevice* dev) {
  if (dev->staging_ready) return true;
  if (dev->staging_failed) return false;
  for (int i = 0; i < kSlots; ++i) {
    if (cudaHostAlloc(&dev->staging[i], kStageChunk, cudaHostAllocPortable) != cudaSuccess ||
        cudaEventCreateWithFlags(&dev->staging_done[i], cudaEventDisableTiming) !=
            cudaSuccess) {
      free_ring(dev);
      dev->staging_failed = true;
      return false;
    }
  }
  dev->staging_ready = true;
  return true;
}

// Waits until chunk `slot` is free (its last DMA done).
cudaError_t wait_slot(CudaDevice* dev, int slot) {
  return cudaEventSynchronize(dev->staging_done[slot]);
}

// Enqueues the DMA of one chunk and marks the chunk busy until it is done.
cudaError_t dma(CudaDevice* dev, int slot, cudaStream_t stream, void* dst, const void* src,
                uint64_t len, cudaMemcpyKind kind) {
  cudaError_t e = cudaMemcpyAsync(dst, src, len, kind, stream);
  if (e == cudaSuccess) e = cudaEventRecord(dev->staging_done[slot], stream);
  return e;
}

cudaError_t staged_to_device(CudaDevice* dev, cudaStream_t stream, char* dst,
                             const char* src, uint64_t size) {
  uint64_t k = 0;
  for (uint64_t off = 0; off < size; off += kStageChunk, ++k) {
    const int slot = static_cast<int>(k % kSlots);
    const uint64_t len = std::min(kStageChunk, size - off);
    cudaError_t e = wait_slot(dev, slot);
    if (e != cudaSuccess) return e;
    char* chunk = static_cast<char*>(dev->staging[slot]);
    parallel_memcpy(chunk, src + off, len);
    e = dma(dev, slot, stream, dst + off, chunk, len, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

cudaError_t staged_to_host(CudaDevice* dev, cudaStream_t stream, char* dst,
                           const char* src, uint64_t size) {
  const uint64_t chunks = (size + kStageChunk - 1) / kStageChunk;
  auto enqueue = [&](uint64_t k) {
    const int slot = static_cast<int>(k % kSlots);
    const uint64_t off = k * kStageChunk;
    cudaError_t e = wait_slot(dev, slot);
    if (e != cudaSuccess) return e;
    return dma(dev, slot, stream, dev->staging[slot], src + off,
               std::min(kStageChunk, size - off), cudaMemcpyDeviceToHost);
  };
  for (uint64_t k = 0; k < chunks && k < static_cast<uint64_t>(kSlots); ++k) {
    cudaError_t e = enqueue(k);
    if (e != cudaSuccess) return e;
  }
  for (uint64_t k = 0; k < chunks; ++k) {
    const int slot = static_cast<int>(k % kSlots);
    const uint64_t off = k * kStageChunk;
    cudaError_t e = wait_slot(dev, slot);
    if (e != cudaSuccess) return e;
    parallel_memcpy(dst + off, dev->staging[slot], std::min(kStageChunk, size - off));
    if (k + kSlots < chunks) {
      e = enqueue(k + kSlots);
      if (e != cudaSuccess) return e;
    }
  }
  return cudaSuccess;
}

}  // namespace

void parallel_memcpy(void* dst, const void* src, uint64_t n) {
  if (n < 2 * kMinPart) {
    memcpy(dst, src, n);
    return;
  }
  CopyThreads::instance().copy(static_cast<char*>(dst), static_cast<const char*>(src), n);
}

cudaError_t host_device_copy(CudaDevice* dev, cudaStream_t stream, bool to_device,
                             void* device_ptr, void* host, uint64_t size) {
  void* dst = to_device ? device_ptr : host;
  const void* src = to_device ? host : device_ptr;
  cudaError_t e = cudaSuccess;
  bool done = false;
  if (size > kStageThreshold && is_pageable(host) && !capturing(stream)) {
    std::lock_guard<std::mutex> lock(dev->staging_mu);
    if (ensure_ring(dev)) {
      e = to_device ? staged_to_device(dev, stream, static_cast<char*>(dst),
                                       static_cast<const char*>(src), size)
                    : staged_to_host(dev, stream, static_cast<char*>(dst),
                                     static_cast<const char*>(src), size);
      done = true;
    }
  }
  // cudaMemcpyDefault: direction (and device, for peer copies) from UVA.
  if (!done) e = cudaMemcpyAsync(dst, src, size, cudaMemcpyDefault, stream);
  if (e != cudaSuccess) (void)cudaGetLastError();
  return e;
}

void release_staging(CudaDevice* dev) {
  if (dev == nullptr) return;
  std::lock_guard<std::mutex> lock(dev->staging_mu);
  free_ring(dev);
}

}  // namespace pgcuda
