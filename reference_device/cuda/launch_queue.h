// Kernel launches issued by a thread of the plugin instead of the caller's.
//
// A launch costs the calling thread 3-5 us, most of a one-element op's time.
// With the queue on (the default; PLUGGABLE_CUDA_LAUNCH_THREAD=0 turns it
// off), the elementwise kernels (OpCall::launch from a call made with
// OpCall::kMayDefer) and the event records after them are pushed to a FIFO
// of the device and issued in order by one thread of the plugin (the
// launcher) while the caller goes on with the next op.
//
// Order: whatever else puts work on a stream of the device, or looks at its
// work, first issues everything queued (flush): the stream executor's
// functions, the extensions (native stream, capture, peer copies), kernels
// that launch themselves. Queued items therefore come before anything later
// on any stream of the device, as if they had been launched at once.
//
// Events: record_event while the queue holds items is queued too, and so is
// one made while the launcher is awake (unless the profiler records or a
// stream of the device captures): the launcher then issues the record off
// the calling thread. Until the launcher issues it the event reads
// SE_EVENT_PENDING; waiting for it (block_host_for_event, wait_for_event)
// flushes first.
//
// Errors: a launch that fails on the launcher sets its stream's deferred
// error (reported by the next block_host_until_done), and the next event
// recorded on that stream reads SE_EVENT_ERROR, as stream_executor.h asks of
// asynchronous failures.
//
// The launcher spins while work comes and sleeps after kIdleSpinNs without
// any; the next push wakes it and issues itself what is queued up to and
// including its item, so the first launch after an idle spell does not wait
// for the launcher to be scheduled again. The launcher wakes up for any push
// made since it fell asleep, even one already issued, and spins for the
// pushes that follow: kWokenSpinNs for a first one, then kIdleSpinNs after
// each item it issues. A flush never waits for a sleeping launcher: the
// flushing thread issues what is left itself (one thread issues at a time,
// in queue order). Launches are never queued while the profiler records or
// while a stream of the device captures a graph.
#ifndef PLUGGABLE_CUDA_LAUNCH_QUEUE_H_
#define PLUGGABLE_CUDA_LAUNCH_QUEUE_H_

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>

#include "cuda_common.h"

namespace pgcuda {

class LaunchQueue {
 public:
  static constexpr size_t kPayloadBytes = 512;  // a broadcast's 16-dim geometry fits
  static constexpr uint64_t kSlots = 1024;  // a power of two
  static constexpr int64_t kIdleSpinNs = 2000000;
  // How long a woken launcher spins for a first item before it sleeps again
  // (at most the idle spin): a push that woke it may leave it nothing, and
  // a program that launches one op now and then should not cost a core.
  static constexpr int64_t kWokenSpinNs = 500000;

  // One queued item: a kernel launch (`run` launches it from `payload` on
  // `stream`) or, with `run` null, a record of `event` on `stream`.
  struct Item {
    void (*run)(const Item&);
    cudaStream_t stream;
    CudaStream* cs;
    CudaEvent* event;
    const char* name;
    alignas(16) unsigned char payload[kPayloadBytes];
  };

  // What the queue did, for tests and benchmarks.
  struct Stats {
    uint64_t queued;           // items pushed
    uint64_t by_launcher;      // items the launcher issued
    uint64_t by_flush;         // items issued by flushing threads
    uint64_t wakes;            // pushes that woke a sleeping launcher
    uint64_t woken;            // times the launcher woke up (a push since it slept)
    uint64_t failed_launches;  // launches that failed on issue
  };

  // `idle_spin_ns`: how long the launcher spins without work before it
  // sleeps (tests lengthen it where a sleeping launcher would change who
  // issues an item).
  explicit LaunchQueue(int ordinal, int64_t idle_spin_ns = kIdleSpinNs);
  ~LaunchQueue();  // stop()
  // Stops the launcher (for good) and issues what is left; later items are
  // issued by flushes only.
  void stop();
  LaunchQueue(const LaunchQueue&) = delete;
  LaunchQueue& operator=(const LaunchQueue&) = delete;

  // Whether items are queued that were not issued yet.
  bool busy() const {
    return head_.load(std::memory_order_acquire) != tail_.load(std::memory_order_acquire);
  }
  // Issues every item pushed before the call (by any thread).
  void flush() {
    if (busy()) flush_to(tail_.load(std::memory_order_acquire));
  }
  // Issues the items up to queue position `pos` (the value push returned).
  void flush_to(uint64_t pos);
  // Whether the item at position `pos` has been issued.
  bool issued(uint64_t pos) const { return head_.load(std::memory_order_acquire) >= pos; }
  // Whether the launcher thread runs and is not asleep: an item pushed now
  // is issued by it, without a wake-up.
  bool awake() const {
    return started_.load(std::memory_order_acquire) && !stop_.load() &&
           !sleeping_.load(std::memory_order_acquire);
  }

  // Reserves the next slot; the caller fills it and calls publish(). Holds
  // the push lock in between. Returns the slot.
  Item* reserve();
  // Makes the reserved item visible to the launcher; returns its position
  // (1-based: issued(pos) is true once it has been issued).
  uint64_t publish();

  // Queues a record of `ev` on `cs` (the event reads PENDING until issued).
  void push_record(CudaStream* cs, CudaEvent* ev);

  Stats stats() const;

 private:
  void issue_upto(uint64_t end, bool launcher);  // issue_mu_ held
  void issue(const Item& it);
  void loop();
  void start();

  const int ordinal_;
  const int64_t idle_spin_ns_;
  std::unique_ptr<Item[]> slots_;
  alignas(64) std::atomic<uint64_t> head_{0};  // next item to issue
  alignas(64) std::atomic<uint64_t> tail_{0};  // next free slot
  alignas(64) std::atomic<bool> sleeping_{false};
  std::atomic<bool> stop_{false};
  std::mutex push_mu_;   // one pusher at a time
  std::mutex issue_mu_;  // one issuer at a time
  std::mutex sleep_mu_;
  std::condition_variable wake_;
  std::thread thread_;
  std::atomic<bool> started_{false};  // set under push_mu_; read by awake() too
  std::atomic<uint64_t> n_queued_{0}, n_launcher_{0}, n_flush_{0}, n_wakes_{0}, n_woken_{0},
      n_failed_{0};
};

// Whether launches may be queued at all (PLUGGABLE_CUDA_LAUNCH_THREAD is not
// "0"); read once.
bool launch_thread_enabled();

// The queue of `dev`, or null where launches are not queued.
inline LaunchQueue* queue_of(const CudaDevice* dev) {
  return dev == nullptr ? nullptr : dev->queue;
}
// Issues everything queued for `dev` (a no-op without a queue).
inline void flush_device(const CudaDevice* dev) {
  LaunchQueue* q = queue_of(dev);
  if (q != nullptr) q->flush();
}
// The same by CUDA ordinal (devices the plugin made).
void flush_ordinal(int ordinal);
// Records `dev` under its ordinal for flush_ordinal (null: forgets it).
void register_queue(int ordinal, CudaDevice* dev);

}  // namespace pgcuda

#endif  // PLUGGABLE_CUDA_LAUNCH_QUEUE_H_
