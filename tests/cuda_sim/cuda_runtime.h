// A host-only stand-in for the CUDA runtime calls that the CUDA plugin's
// staged copies (reference_device/cuda/staging.cu) and its waits for work
// that may never finish (wait_work.cu) make, so that their logic is tested
// on machines without a GPU (tests/test_gpu_copies.py,
// tests/test_distribute_mp.py). A stream is
// a worker thread that runs its tasks in order, some after a random delay;
// "device memory" is host memory; an event completes when its stream reaches
// it. Only what staging.cu, wait_work.cu, launch_queue.cu and cuda_common.h
// use is declared.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>
#include <random>
#include <set>
#include <thread>

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue,
  cudaErrorMemoryAllocation,
  cudaErrorNotReady,
  cudaErrorNoDevice,
  cudaErrorInsufficientDriver,
  cudaErrorDevicesUnavailable,
  cudaErrorNotSupported,
  cudaErrorStreamCaptureUnsupported
};
enum cudaMemcpyKind { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDefault };
enum cudaMemoryType {
  cudaMemoryTypeUnregistered = 0,
  cudaMemoryTypeHost,
  cudaMemoryTypeDevice,
  cudaMemoryTypeManaged
};
enum cudaStreamCaptureStatus { cudaStreamCaptureStatusNone = 0 };
struct cudaPointerAttributes {
  cudaMemoryType type;
};
#define cudaHostAllocPortable 1
#define cudaEventDisableTiming 2
typedef void* cudaMemPool_t;

// When set, streams run each task as it is enqueued (work and copies finish
// at once, as on an idle GPU).
inline std::atomic<bool>& sim_inline() {
  static std::atomic<bool> on{false};
  return on;
}

// A stream: tasks run in order on one thread.
struct SimStream {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> tasks;
  bool stop = false;
  unsigned seed;
  std::thread worker;

  explicit SimStream(unsigned s) : seed(s), worker([this] { run(); }) {}
  ~SimStream() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    cv.notify_all();
    worker.join();
  }
  void run() {
    std::mt19937 rng(seed);
    for (;;) {
      std::function<void()> f;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return stop || !tasks.empty(); });
        if (tasks.empty()) return;
        f = tasks.front();
      }
      if (rng() % 4 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 200));
      f();
      {
        std::lock_guard<std::mutex> lock(mu);
        tasks.pop_front();
      }
      cv.notify_all();
    }
  }
  void push(std::function<void()> f) {
    if (sim_inline().load()) {  // an idle GPU: the work is done before the call returns
      drain();
      f();
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      tasks.push_back(std::move(f));
    }
    cv.notify_all();
  }
  void drain() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return tasks.empty(); });
  }
};

struct SimEvent {
  std::atomic<uint64_t> recorded{0};
  std::atomic<uint64_t> reached{0};
};

typedef SimStream* cudaStream_t;
typedef SimEvent* cudaEvent_t;

// Page-locked allocations (cudaHostAlloc), for cudaPointerGetAttributes.
inline std::set<const void*>& sim_pinned() {
  static std::set<const void*> s;
  return s;
}
inline std::mutex& sim_pinned_mu() {
  static std::mutex m;
  return m;
}
// Copies enqueued by cudaMemcpyAsync, for the checks of the simulation.
inline std::atomic<uint64_t>& sim_memcpy_calls() {
  static std::atomic<uint64_t> n{0};
  return n;
}

// The calling thread's last error, as the runtime keeps it; a simulated
// launch sets it to fail (launch_sim.cc).
inline cudaError_t& sim_last_error() {
  thread_local cudaError_t e = cudaSuccess;
  return e;
}
inline cudaError_t cudaGetLastError() {
  const cudaError_t e = sim_last_error();
  sim_last_error() = cudaSuccess;
  return e;
}
inline const char* cudaGetErrorName(cudaError_t) { return "simulated"; }
inline const char* cudaGetErrorString(cudaError_t) { return "simulated"; }
inline cudaError_t cudaGetDevice(int* d) {
  *d = 0;
  return cudaSuccess;
}
inline cudaError_t cudaSetDevice(int) { return cudaSuccess; }
inline cudaError_t cudaHostAlloc(void** p, size_t n, unsigned) {
  *p = malloc(n);
  if (*p == nullptr) return cudaErrorMemoryAllocation;
  std::lock_guard<std::mutex> lock(sim_pinned_mu());
  sim_pinned().insert(*p);
  return cudaSuccess;
}
inline cudaError_t cudaFreeHost(void* p) {
  {
    std::lock_guard<std::mutex> lock(sim_pinned_mu());
    sim_pinned().erase(p);
  }
  free(p);
  return cudaSuccess;
}
inline cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* p) {
  std::lock_guard<std::mutex> lock(sim_pinned_mu());
  a->type = sim_pinned().count(p) ? cudaMemoryTypeHost : cudaMemoryTypeUnregistered;
  return cudaSuccess;
}
inline cudaError_t cudaStreamIsCapturing(cudaStream_t, cudaStreamCaptureStatus* s) {
  *s = cudaStreamCaptureStatusNone;
  return cudaSuccess;
}
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) {
  *e = new SimEvent();
  return cudaSuccess;
}
inline cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  const uint64_t generation = ++e->recorded;
  s->push([e, generation] { e->reached.store(generation); });
  return cudaSuccess;
}
inline cudaError_t cudaEventQuery(cudaEvent_t e) {
  return e->reached.load() >= e->recorded.load() ? cudaSuccess : cudaErrorNotReady;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  const uint64_t generation = e->recorded.load();
  while (e->reached.load() < generation) std::this_thread::sleep_for(std::chrono::microseconds(20));
  return cudaSuccess;
}
inline cudaError_t cudaStreamQuery(cudaStream_t s) {
  std::lock_guard<std::mutex> lock(s->mu);
  return s->tasks.empty() ? cudaSuccess : cudaErrorNotReady;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  s->drain();
  return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind,
                                   cudaStream_t s) {
  ++sim_memcpy_calls();
  bool pinned;
  {
    std::lock_guard<std::mutex> lock(sim_pinned_mu());
    pinned = sim_pinned().count(src) > 0;
  }
  if (kind == cudaMemcpyHostToDevice && !pinned) {
    // The driver copies a pageable source into its own staging memory before
    // returning (CUDA's API synchronization behaviour); the DMA comes later.
    auto staged = std::make_shared<std::vector<unsigned char>>(
        static_cast<const unsigned char*>(src), static_cast<const unsigned char*>(src) + n);
    s->push([dst, staged, n] { memcpy(dst, staged->data(), n); });
    return cudaSuccess;
  }
  s->push([dst, src, n] { memcpy(dst, src, n); });
  return cudaSuccess;
}
