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
#ifndef PGCUDA_MIN_COPY_PART
#define PGCUDA_MIN_COPY_PART (512ull << 10)
#endif
constexpr uint64_t kMinPart = PGCUDA_MIN_COPY_PART;

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
// The staging chunks

constexpr int kMaxSlots = CudaDevice::kStagingMaxSlots;
// Chunks a device-to-host copy keeps in flight ahead of the host memcpy.
constexpr uint64_t kReadAhead = 4;
static_assert(kMaxSlots <= 32 && kReadAhead < kMaxSlots,
              "pick_slot's mask of held chunks is 32 bits; a read-ahead needs a free chunk");

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

// Adds one chunk (staging_mu held); false if it cannot be had.
bool add_slot(CudaDevice* dev) {
  const int i = dev->staging_slots;
  if (i >= kMaxSlots) return false;
  void* p = nullptr;
  cudaEvent_t ev = nullptr;
  if (cudaHostAlloc(&p, kStageChunk, cudaHostAllocPortable) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  if (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess) {
    (void)cudaGetLastError();
    (void)cudaFreeHost(p);
    return false;
  }
  dev->staging[i] = p;
  dev->staging_done[i] = ev;
  dev->staging_stamp[i] = 0;
  dev->staging_slots = i + 1;
  return true;
}

// A chunk free for new data (staging_mu held), stamped as the newest: the
// least recently used one if its last DMA is done, else a new one while
// fewer than kMaxSlots exist, else the least recently used one once its DMA
// is done. -1 with *err set when none can be had.
//
// Chunks in `held` (bit i: chunk i) are never picked: a device-to-host copy
// holds the chunks whose data it has not read out yet. Their DMA may well be
// done (an idle GPU finishes it before the next chunk is picked), so being
// "done" does not make them free.
int pick_slot(CudaDevice* dev, cudaError_t* err, uint32_t held = 0) {
  int best = -1;
  for (int i = 0; i < dev->staging_slots; ++i) {
    if (held & (1u << i)) continue;
    if (best < 0 || dev->staging_stamp[i] < dev->staging_stamp[best]) best = i;
  }
  bool ready = false;
  if (best >= 0) {
    cudaError_t q = cudaEventQuery(dev->staging_done[best]);
    if (q == cudaErrorNotReady) {
      (void)cudaGetLastError();
    } else if (q != cudaSuccess) {
      *err = q;
      return -1;
    } else {
      ready = true;
    }
  }
  if (!ready && add_slot(dev)) {
    best = dev->staging_slots - 1;
    ready = true;
  }
  if (best < 0) {
    *err = cudaErrorMemoryAllocation;
    return -1;
  }
  if (!ready) {
    cudaError_t e = cudaEventSynchronize(dev->staging_done[best]);
    if (e != cudaSuccess) {
      *err = e;
      return -1;
    }
  }
  dev->staging_stamp[best] = ++dev->staging_clock;
  return best;
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
  for (uint64_t off = 0; off < size; off += kStageChunk) {
    const uint64_t len = std::min(kStageChunk, size - off);
    cudaError_t e = cudaSuccess;
    const int slot = pick_slot(dev, &e);
    if (slot < 0) return e;
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
  int slot_of[kReadAhead];
  uint32_t held = 0;  // chunks holding data not yet read out
  auto enqueue = [&](uint64_t k) {
    cudaError_t e = cudaSuccess;
    const int slot = pick_slot(dev, &e, held);
    if (slot < 0) return e;
    held |= 1u << slot;
    slot_of[k % kReadAhead] = slot;
    const uint64_t off = k * kStageChunk;
    return dma(dev, slot, stream, dev->staging[slot], src + off,
               std::min(kStageChunk, size - off), cudaMemcpyDeviceToHost);
  };
  for (uint64_t k = 0; k < chunks && k < kReadAhead; ++k) {
    cudaError_t e = enqueue(k);
    if (e != cudaSuccess) return e;
  }
  for (uint64_t k = 0; k < chunks; ++k) {
    const int slot = slot_of[k % kReadAhead];
    const uint64_t off = k * kStageChunk;
    cudaError_t e = cudaEventSynchronize(dev->staging_done[slot]);
    if (e != cudaSuccess) return e;
    parallel_memcpy(dst + off, dev->staging[slot], std::min(kStageChunk, size - off));
    held &= ~(1u << slot);
    if (k + kReadAhead < chunks) {
      e = enqueue(k + kReadAhead);
      if (e != cudaSuccess) return e;
    }
  }
  return cudaSuccess;
}

}  // namespace

bool host_is_pageable(const void* p) { return is_pageable(p); }

void parallel_memcpy(void* dst, const void* src, uint64_t n) {
  if (n < 2 * kMinPart) {
    memcpy(dst, src, n);
    return;
  }
  CopyThreads::instance().copy(static_cast<char*>(dst), static_cast<const char*>(src), n);
}

namespace {

// Runs the copy through the device's staging chunks (true, its outcome in
// *e), or returns false when the device has none and can get none (staging
// then stays off for it).
bool try_staged(CudaDevice* dev, cudaStream_t stream, bool to_device, void* device_ptr,
                void* host, uint64_t size, cudaError_t* e) {
  std::lock_guard<std::mutex> lock(dev->staging_mu);
  if (dev->staging_failed || (dev->staging_slots == 0 && !add_slot(dev))) {
    dev->staging_failed = true;
    return false;
  }
  *e = to_device ? staged_to_device(dev, stream, static_cast<char*>(device_ptr),
                                    static_cast<const char*>(host), size)
                 : staged_to_host(dev, stream, static_cast<char*>(host),
                                  static_cast<const char*>(device_ptr), size);
  return true;
}

}  // namespace

cudaError_t host_device_copy(CudaDevice* dev, cudaStream_t stream, bool to_device,
                             void* device_ptr, void* host, uint64_t size) {
  cudaError_t e = cudaSuccess;
  const bool staged = size > kStageThreshold && is_pageable(host) && !stream_capturing(stream) &&
                      try_staged(dev, stream, to_device, device_ptr, host, size, &e);
  if (!staged) {
    // cudaMemcpyDefault: direction (and device, for peer copies) from UVA.
    e = to_device ? cudaMemcpyAsync(device_ptr, host, size, cudaMemcpyDefault, stream)
                  : cudaMemcpyAsync(host, device_ptr, size, cudaMemcpyDefault, stream);
  }
  if (e != cudaSuccess) (void)cudaGetLastError();
  return e;
}

cudaError_t host_to_device_consumed(CudaDevice* dev, cudaStream_t stream, void* device_ptr,
                                    const void* host, uint64_t size) {
  if (stream_capturing(stream)) return cudaErrorStreamCaptureUnsupported;
  const bool pageable = is_pageable(host);
  cudaError_t e = cudaSuccess;
  const bool staged = (!pageable || size > kStageThreshold) &&
                      try_staged(dev, stream, true, device_ptr, const_cast<void*>(host), size,
                                 &e);
  if (!staged) {
    // A pageable source the driver copies into its own staging memory before
    // cudaMemcpyAsync returns (CUDA's API synchronization behaviour); a
    // pinned one without a staging chunk to be had: wait for the copy itself.
    e = cudaMemcpyAsync(device_ptr, host, size, cudaMemcpyHostToDevice, stream);
    if (e == cudaSuccess && !pageable) e = cudaStreamSynchronize(stream);
  }
  if (e != cudaSuccess) (void)cudaGetLastError();
  return e;
}

void release_staging(CudaDevice* dev) {
  if (dev == nullptr) return;
  std::lock_guard<std::mutex> lock(dev->staging_mu);
  for (int i = 0; i < dev->staging_slots; ++i) {
    (void)cudaEventSynchronize(dev->staging_done[i]);
    (void)cudaEventDestroy(dev->staging_done[i]);
    (void)cudaFreeHost(dev->staging[i]);
    dev->staging_done[i] = nullptr;
    dev->staging[i] = nullptr;
  }
  dev->staging_slots = 0;
  (void)cudaGetLastError();
}

}  // namespace pgcuda
