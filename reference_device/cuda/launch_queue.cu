// The launcher thread of a device and its queue (launch_queue.h).
#include "launch_queue.h"

#include <chrono>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define PG_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define PG_CPU_RELAX() __asm__ __volatile__("yield")
#else
#define PG_CPU_RELAX() ((void)0)
#endif

namespace pgcuda {

constexpr int kMaxOrdinals = 64;
std::atomic<CudaDevice*> g_devices[kMaxOrdinals];

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

bool launch_thread_enabled() {
  static const bool on = not_turned_off("PLUGGABLE_CUDA_LAUNCH_THREAD");
  return on;
}

namespace {

// At exit, before the CUDA runtime's own teardown (registered earlier, so
// run later): the launchers stop and what they hold is issued by this
// thread, so that no launch races the runtime's end.
void stop_launchers() {
  for (int i = 0; i < kMaxOrdinals; ++i) {
    CudaDevice* dev = g_devices[i].load();
    if (dev != nullptr && dev->queue != nullptr) dev->queue->stop();
  }
}

}  // namespace

void register_queue(int ordinal, CudaDevice* dev) {
  if (ordinal < 0 || ordinal >= kMaxOrdinals) return;
  g_devices[ordinal].store(dev);
  static std::once_flag once;
  if (dev != nullptr) std::call_once(once, [] { std::atexit(stop_launchers); });
}

void flush_ordinal(int ordinal) {
  if (ordinal < 0 || ordinal >= kMaxOrdinals) return;
  flush_device(g_devices[ordinal].load());
}

LaunchQueue::LaunchQueue(int ordinal, int64_t idle_spin_ns)
    : ordinal_(ordinal), idle_spin_ns_(idle_spin_ns), slots_(new Item[kSlots]) {}

LaunchQueue::~LaunchQueue() { stop(); }

void LaunchQueue::stop() {
  {
    std::lock_guard<std::mutex> lock(sleep_mu_);
    stop_.store(true);
  }
  wake_.notify_one();
  {
    std::lock_guard<std::mutex> lock(push_mu_);  // no start() after this
    if (thread_.joinable()) thread_.join();
  }
  flush();
}

void LaunchQueue::start() {
  thread_ = std::thread([this] { loop(); });
  started_.store(true, std::memory_order_release);
}

LaunchQueue::Item* LaunchQueue::reserve() {
  push_mu_.lock();
  if (!started_.load(std::memory_order_relaxed) && !stop_.load()) start();
  const uint64_t t = tail_.load(std::memory_order_relaxed);
  if (t - head_.load(std::memory_order_acquire) >= kSlots) {
    flush_to(t - kSlots + 1);  // full: make room by issuing the oldest items
  }
  Item* it = &slots_[t & (kSlots - 1)];
  it->run = nullptr;
  it->event = nullptr;
  it->name = nullptr;
  return it;
}

uint64_t LaunchQueue::publish() {
  const uint64_t pos = tail_.load(std::memory_order_relaxed) + 1;
  // Sequentially consistent with the launcher's `sleeping_` store and its
  // look at the tail before it waits, so a push never misses a sleeper.
  tail_.store(pos, std::memory_order_seq_cst);
  push_mu_.unlock();
  n_queued_.fetch_add(1, std::memory_order_relaxed);
  if (sleeping_.load(std::memory_order_seq_cst)) {
    { std::lock_guard<std::mutex> lock(sleep_mu_); }
    wake_.notify_one();
    n_wakes_.fetch_add(1, std::memory_order_relaxed);
    // A sleeping thread takes tens of microseconds to run again, and the
    // device may be idle meanwhile: issue this item now (and anything before
    // it); the launcher takes the pushes that come once it is awake.
    flush_to(pos);
  }
  return pos;
}

void LaunchQueue::push_record(CudaStream* cs, CudaEvent* ev) {
  Item* it = reserve();
  it->stream = cs->stream;
  it->cs = cs;
  it->event = ev;
  ev->failed.store(false, std::memory_order_relaxed);
  ev->queued.store(tail_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  ev->recorded.store(true);
  publish();
}

void LaunchQueue::flush_to(uint64_t pos) {
  while (head_.load(std::memory_order_acquire) < pos) {
    if (issue_mu_.try_lock()) {
      if (head_.load(std::memory_order_relaxed) < pos) {
        DeviceGuard guard(ordinal_);
        issue_upto(pos, false);
      }
      issue_mu_.unlock();
      return;
    }
    PG_CPU_RELAX();
  }
}

void LaunchQueue::issue_upto(uint64_t end, bool launcher) {
  uint64_t h = head_.load(std::memory_order_relaxed);
  const uint64_t from = h;
  for (; h < end; ++h) {
    issue(slots_[h & (kSlots - 1)]);
    head_.store(h + 1, std::memory_order_release);
  }
  (launcher ? n_launcher_ : n_flush_).fetch_add(h - from, std::memory_order_relaxed);
}

void LaunchQueue::issue(const Item& it) {
  if (it.run != nullptr) {
    it.run(it);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
      char msg[320];
      snprintf(msg, sizeof(msg), "launch of %s failed: %s (%s)",
               it.name != nullptr ? it.name : "a kernel", cudaGetErrorName(e),
               cudaGetErrorString(e));
      stream_set_error(it.cs, code_for_cuda_error(e), msg);
      it.cs->launch_failed.store(true);
      n_failed_.fetch_add(1, std::memory_order_relaxed);
    }
    return;
  }
  bool failed = it.cs->launch_failed.exchange(false);
  const cudaError_t e = cudaEventRecord(it.event->event, it.stream);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    char msg[320];
    snprintf(msg, sizeof(msg), "cudaEventRecord failed: %s (%s)", cudaGetErrorName(e),
             cudaGetErrorString(e));
    stream_set_error(it.cs, code_for_cuda_error(e), msg);
    failed = true;
  }
  // Published to get_event_status by the head's release store after this.
  it.event->failed.store(failed, std::memory_order_relaxed);
}

void LaunchQueue::loop() {
  if (cudaSetDevice(ordinal_) != cudaSuccess) (void)cudaGetLastError();
  int64_t idle_since = now_ns();
  int64_t spell = idle_spin_ns_;  // how long to spin without work before sleeping
  unsigned spins = 0;
  for (;;) {
    if (busy()) {
      if (issue_mu_.try_lock()) {
        issue_upto(tail_.load(std::memory_order_acquire), true);
        issue_mu_.unlock();
      } else {
        PG_CPU_RELAX();
      }
      spins = 0;
      idle_since = -1;
      spell = idle_spin_ns_;
      continue;
    }
    if (stop_.load()) return;
    PG_CPU_RELAX();
    if ((++spins & 255) != 0) continue;
    const int64_t t = now_ns();
    if (idle_since < 0) {
      idle_since = t;
      continue;
    }
    if (t - idle_since < spell) continue;
    std::unique_lock<std::mutex> lock(sleep_mu_);
    sleeping_.store(true, std::memory_order_seq_cst);
    // Asleep until the next push, whether or not its item is still queued:
    // a push onto a sleeping launcher issues its own item before the
    // launcher runs again, and waiting for a non-empty queue would put it
    // back to sleep then, so that every push of a burst after an idle
    // spell would wake it and issue its own item, and none be left to it.
    const uint64_t seen = tail_.load(std::memory_order_seq_cst);
    if (seen == head_.load(std::memory_order_acquire)) {
      while (!stop_.load() && tail_.load(std::memory_order_seq_cst) == seen) {
        wake_.wait(lock);
      }
      n_woken_.fetch_add(1, std::memory_order_relaxed);
      spell = idle_spin_ns_ < kWokenSpinNs ? idle_spin_ns_ : kWokenSpinNs;
    }
    sleeping_.store(false, std::memory_order_seq_cst);
    idle_since = -1;
  }
}

LaunchQueue::Stats LaunchQueue::stats() const {
  Stats s;
  s.queued = n_queued_.load();
  s.by_launcher = n_launcher_.load();
  s.by_flush = n_flush_.load();
  s.wakes = n_wakes_.load();
  s.woken = n_woken_.load();
  s.failed_launches = n_failed_.load();
  return s;
}

}  // namespace pgcuda

// The counters of GPU `ordinal`'s launch queue, for tests and benchmarks
// (read with ctypes): queued, issued by the launcher, issued by flushes,
// wake-ups, failed launches. Returns 0 when that device has no queue.
extern "C" __attribute__((visibility("default"))) int PG_CudaLaunchQueueStats(
    int ordinal, uint64_t* out) {
  if (ordinal < 0 || ordinal >= pgcuda::kMaxOrdinals || out == nullptr) return 0;
  const pgcuda::CudaDevice* dev = pgcuda::g_devices[ordinal].load();
  if (dev == nullptr || dev->queue == nullptr) return 0;
  const pgcuda::LaunchQueue::Stats s = dev->queue->stats();
  out[0] = s.queued;
  out[1] = s.by_launcher;
  out[2] = s.by_flush;
  out[3] = s.wakes;
  out[4] = s.failed_launches;
  return 1;
}

// Whether GPU `ordinal`'s launcher thread runs and is awake (1), asleep or
// not started (0); -1 when that device has no queue. For tests.
extern "C" __attribute__((visibility("default"))) int PG_CudaLaunchQueueAwake(int ordinal) {
  if (ordinal < 0 || ordinal >= pgcuda::kMaxOrdinals) return -1;
  const pgcuda::CudaDevice* dev = pgcuda::g_devices[ordinal].load();
  if (dev == nullptr || dev->queue == nullptr) return -1;
  return dev->queue->awake() ? 1 : 0;
}
