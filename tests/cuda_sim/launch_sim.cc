// Runs the CUDA plugin's launch queue (reference_device/cuda/launch_queue.cu)
// against the stand-in runtime of cuda_runtime.h. A queued "launch" appends
// its queue position to a log. Checks that
//   - items from several threads are issued exactly once, in the order they
//     were queued, whoever issues them (the launcher or flushing threads),
//   - a flush returns only once everything queued before it was issued,
//   - the launcher issues work on its own, falls asleep when idle and is
//     woken by the next push, which issues its own item at once; the woken
//     launcher stays up and takes the pushes that follow,
//   - a queued event record is pending until issued, then recorded on its
//     stream,
//   - a failed launch becomes the stream's error and marks the next event
//     recorded on that stream, and only that one,
//   - a full queue makes room by issuing, without a deadlock,
//   - destroying the queue issues what is left.
// Prints "launch_sim: OK" and exits 0, or prints what failed and exits 1.
#include <chrono>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "launch_queue.h"
#include "sim_check.h"

using namespace pgcuda;
using std::chrono::milliseconds;

namespace {

using sim_check::check;

// A queue whose launcher does not fall asleep during a test (a push onto a
// sleeping launcher issues its item on the pushing thread, which would run
// a held item there). The sleep test uses the real idle spin.
constexpr int64_t kAwake = int64_t(600) * 1000000000;

std::mutex log_mu;
std::vector<uint64_t> issue_log;  // queue positions, in issue order

struct Payload {
  uint64_t pos;
  bool fail;
  std::atomic<bool>* hold;  // the item waits until it is false
};

void run_item(const LaunchQueue::Item& it) {
  const Payload* p = reinterpret_cast<const Payload*>(it.payload);
  if (p->hold != nullptr) {
    while (p->hold->load()) std::this_thread::sleep_for(milliseconds(1));
  }
  if (p->fail) sim_last_error() = cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(log_mu);
  issue_log.push_back(p->pos);
}

// Queues one item that logs `label` when issued; returns its position.
uint64_t push(LaunchQueue& q, CudaStream* cs, uint64_t label = 0, bool fail = false,
              std::atomic<bool>* hold = nullptr) {
  static_assert(sizeof(Payload) <= LaunchQueue::kPayloadBytes, "payload");
  LaunchQueue::Item* it = q.reserve();
  *reinterpret_cast<Payload*>(it->payload) = Payload{label, fail, hold};
  it->run = run_item;
  it->stream = cs->stream;
  it->cs = cs;
  it->name = "sim_kernel";
  return q.publish();
}

size_t log_size() {
  std::lock_guard<std::mutex> lock(log_mu);
  return issue_log.size();
}

bool wait_until(const std::function<bool()>& done, int ms) {
  const auto end = std::chrono::steady_clock::now() + milliseconds(ms);
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(milliseconds(1));
  }
  return true;
}

}  // namespace

int main() {
  sim_check::program() = "launch_sim";
  SimStream sim(3);
  CudaDevice dev;
  CudaStream cs;
  cs.stream = &sim;
  cs.dev = &dev;

  // Four threads push, with flushes among the pushes: every item is issued
  // once, and a flush covers the flushing thread's items.
  {
    LaunchQueue q(0, kAwake);
    constexpr int kThreads = 4, kPerThread = 20000;
    std::atomic<int> bad_flush{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < kPerThread; ++i) {
          const uint64_t pos = push(q, &cs);
          if ((i + t) % 997 == 0) {
            q.flush();
            if (!q.issued(pos)) bad_flush++;
          }
        }
      });
    }
    for (std::thread& th : threads) th.join();
    // One more item, left to the launcher alone (on a loaded machine the
    // pushers may have issued everything themselves).
    const uint64_t last = push(q, &cs);
    check(wait_until([&] { return q.issued(last); }, 5000),
          "the launcher did not issue an item left to it");
    q.flush();
    check(bad_flush.load() == 0, "a flush returned before the caller's items were issued");
    check(log_size() == size_t(kThreads) * kPerThread + 1,
          "not every queued item was issued exactly once");
    const LaunchQueue::Stats st = q.stats();
    check(st.queued == uint64_t(kThreads) * kPerThread + 1, "stats: queued count");
    check(st.by_launcher + st.by_flush == st.queued, "stats: issued counts");
    check(st.by_launcher > 0, "the launcher issued nothing");
  }
  issue_log.clear();

  // FIFO: positions are logged by the items themselves.
  {
    LaunchQueue q(0, kAwake);
    std::atomic<bool> hold{true};
    std::vector<uint64_t> expect;
    // The first item holds the launcher, so the rest pile up behind it.
    expect.push_back(push(q, &cs, 1, false, &hold));
    for (int i = 0; i < 1000; ++i) expect.push_back(push(q, &cs, uint64_t(i) + 2));
    check(!q.issued(expect.back()), "items behind a held one were issued");
    // The queue is full after kSlots items: a pusher then issues the oldest
    // itself, which waits for the held item; release it from another thread.
    std::thread release([&] {
      std::this_thread::sleep_for(milliseconds(50));
      hold = false;
    });
    for (int i = 0; i < int(LaunchQueue::kSlots) + 10; ++i) {
      expect.push_back(push(q, &cs, uint64_t(1002 + i)));
    }
    release.join();
    q.flush();
    bool ordered = issue_log.size() == expect.size();
    for (size_t i = 0; ordered && i < issue_log.size(); ++i) ordered = issue_log[i] == i + 1;
    check(ordered, "items were not issued in queue order");
    for (size_t i = 0; i < expect.size(); ++i) {
      if (expect[i] != i + 1) {
        check(false, "publish() did not return consecutive positions");
        break;
      }
    }
  }
  issue_log.clear();

  // The launcher works alone, sleeps when idle, and is woken by a push.
  {
    LaunchQueue q(0);
    uint64_t last = 0;
    for (int i = 0; i < 1000; ++i) last = push(q, &cs);
    check(wait_until([&] { return q.issued(last); }, 5000),
          "the launcher did not issue queued items on its own");
    std::this_thread::sleep_for(milliseconds(20));  // > kIdleSpinNs: it sleeps
    const uint64_t wakes = q.stats().wakes, woken = q.stats().woken;
    last = push(q, &cs);
    // The push that finds the launcher asleep returns with its item issued
    // (by itself, or by the launcher if that woke first).
    check(q.issued(last), "a push onto a sleeping launcher left its item queued");
    check(q.stats().wakes == wakes + 1, "the push after idling did not count a wake-up");
    // Its item is issued already, yet the launcher wakes up for what comes
    // next instead of going back to sleep on the empty queue.
    check(wait_until([&] { return q.stats().woken > woken; }, 5000),
          "the launcher went back to sleep after a push woke it");
    // The launcher is awake again and takes what comes next (pushed without
    // a pause: a woken launcher spins only kWokenSpinNs for a first item).
    const uint64_t by_launcher = q.stats().by_launcher;
    {
      const auto end = std::chrono::steady_clock::now() + milliseconds(5000);
      bool took = false;
      while (!(took = q.stats().by_launcher > by_launcher) &&
             std::chrono::steady_clock::now() < end) {
        last = push(q, &cs);
      }
      check(took, "the woken launcher did not issue later pushes");
    }
    check(wait_until([&] { return q.issued(last); }, 5000), "later pushes were not issued");
  }
  issue_log.clear();

  // Event records: pending until issued, then on the stream; a failed
  // launch marks the next record of its stream only.
  {
    LaunchQueue q(0, kAwake);
    CudaEvent ev1, ev2, ev3;
    cudaEventCreateWithFlags(&ev1.event, 0);
    cudaEventCreateWithFlags(&ev2.event, 0);
    cudaEventCreateWithFlags(&ev3.event, 0);
    std::atomic<bool> hold{true};
    push(q, &cs, 0, false, &hold);
    q.push_record(&cs, &ev1);
    check(ev1.recorded.load() && ev1.queued.load() != 0, "a queued record was not marked");
    std::this_thread::sleep_for(milliseconds(5));
    check(!q.issued(ev1.queued.load()), "a record behind a held launch was issued");
    hold = false;
    q.flush_to(ev1.queued.load());
    check(q.issued(ev1.queued.load()), "flush_to did not issue the record");
    sim.drain();
    check(cudaEventQuery(ev1.event) == cudaSuccess, "the record did not reach its stream");
    check(!ev1.failed.load(), "a record after good launches reads failed");

    push(q, &cs, 0, true);  // this launch fails
    q.push_record(&cs, &ev2);
    q.push_record(&cs, &ev3);
    q.flush();
    check(ev2.failed.load(), "the record after a failed launch does not read failed");
    check(!ev3.failed.load(), "a later record still reads failed");
    check(!cs.launch_failed.load(), "the stream still carries the launch failure");
    check(q.stats().failed_launches == 1, "stats: failed launches");
    {
      std::lock_guard<std::mutex> lock(cs.error_mu);
      check(cs.has_error && cs.error_code == TF_INVALID_ARGUMENT &&
                cs.error_message.find("launch of sim_kernel failed") != std::string::npos,
            "the failed launch is not the stream's error");
    }
    sim.drain();
    cudaEventDestroy(ev1.event);
    cudaEventDestroy(ev2.event);
    cudaEventDestroy(ev3.event);
  }
  issue_log.clear();

  // Destroying a queue issues what it holds.
  {
    std::atomic<bool> hold{true};
    std::thread release([&] {
      std::this_thread::sleep_for(milliseconds(20));
      hold = false;
    });
    {
      LaunchQueue q(0, kAwake);
      push(q, &cs, 0, false, &hold);
      for (int i = 0; i < 100; ++i) push(q, &cs);
    }
    release.join();
    check(log_size() == 101, "destroying the queue lost items");
  }

  return sim_check::result();
}
