// Tests exit_joined.cc (reference_device/cuda) alone: work runs on a thread
// of its own and its future is ready once it has returned; threads whose
// work ended are joined when the next one starts; join_exit_joined joins
// the rest; and work still running when main returns is finished before the
// process exits (it prints "exit_joined_sim: late work ended" after the OK).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

#include "exit_joined.h"
#include "sim_check.h"

using pgcuda::exit_joined_pending;
using pgcuda::join_exit_joined;
using pgcuda::run_joined_at_exit;
using sim_check::check;

int main() {
  sim_check::program() = "exit_joined_sim";
  const std::thread::id me = std::this_thread::get_id();

  // Work held until released: the future waits for it.
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::atomic<bool> ran_elsewhere{false};
  auto held = run_joined_at_exit([&] {
    ran_elsewhere = std::this_thread::get_id() != me;
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return release; });
  });
  check(held.valid(), "a thread could be started");
  check(held.wait_for(std::chrono::milliseconds(50)) == std::future_status::timeout,
        "the future is ready before the work returned");
  check(exit_joined_pending() == 1, "one thread pending while the work runs");
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  held.wait();
  check(ran_elsewhere, "the work ran on the calling thread");

  // The next start joins the ended thread: only the new one is pending.
  std::atomic<int> quick_runs{0};
  auto quick = run_joined_at_exit([&] { ++quick_runs; });
  check(exit_joined_pending() == 1, "the ended thread was not joined by the next start");
  quick.wait();
  check(quick_runs == 1, "the work ran once");
  join_exit_joined();
  check(exit_joined_pending() == 0, "join_exit_joined left threads pending");

  // Work still running when main returns: the exit handler waits for it.
  (void)run_joined_at_exit([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    printf("exit_joined_sim: late work ended\n");
    fflush(stdout);
  });
  const int rc = sim_check::result();
  fflush(stdout);
  return rc;
}
