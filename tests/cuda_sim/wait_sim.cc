// Runs the CUDA plugin's wait_work (reference_device/cuda/wait_work.cu)
// against the stand-in runtime of cuda_runtime.h. A task that never ends
// until released plays an NCCL kernel whose peer is alive but never calls
// (ncclCommAbort does not always end it). Checks that
//   - without poll_waits a wait is a plain synchronisation,
//   - with it, a wait for slow work returns once the work is done,
//   - a wait for a stream, or for an event, stuck behind abandoned work
//     returns the abandonment's code and message soon after the
//     abandonment, not never,
//   - abandoned work that ends after all is forgotten and waits complete.
// Prints "wait_sim: OK" and exits 0, or prints what failed and exits 1.
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "wait_work.h"
#include "sim_check.h"

using namespace pgcuda;
using std::chrono::milliseconds;

namespace {

using sim_check::check;

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main() {
  sim_check::program() = "wait_sim";
  CudaDevice dev;
  SimStream s(7);
  TF_Code code = TF_OK;
  std::string msg;
  std::atomic<bool> ran{false};

  s.push([&] { std::this_thread::sleep_for(milliseconds(20)); ran = true; });
  check(wait_work(&dev, &s, nullptr, &code, &msg) == cudaSuccess && ran && code == TF_OK,
        "a plain wait did not wait for the stream's work");

  dev.poll_waits = true;
  ran = false;
  s.push([&] { std::this_thread::sleep_for(milliseconds(30)); ran = true; });
  check(wait_work(&dev, &s, nullptr, &code, &msg) == cudaSuccess && ran && code == TF_OK,
        "a polling wait returned before slow work was done");

  // The collective that never ends, the event after it, work behind it.
  std::atomic<bool> release{false};
  s.push([&] {
    while (!release) std::this_thread::sleep_for(milliseconds(1));
  });
  cudaEvent_t until = nullptr, later = nullptr;
  cudaEventCreateWithFlags(&until, cudaEventDisableTiming);
  cudaEventCreateWithFlags(&later, cudaEventDisableTiming);
  cudaEventRecord(until, &s);
  s.push([&] { ran = true; });
  cudaEventRecord(later, &s);
  ran = false;
  auto t0 = std::chrono::steady_clock::now();
  std::thread watchdog([&] {
    std::this_thread::sleep_for(milliseconds(50));
    device_abandon(&dev, until, TF_DEADLINE_EXCEEDED, "CollectiveReduceV2: timed out");
  });
  cudaError_t e = wait_work(&dev, &s, nullptr, &code, &msg);
  const double waited = since(t0);
  watchdog.join();
  check(e == cudaErrorNotReady && code == TF_DEADLINE_EXCEEDED &&
            msg == "CollectiveReduceV2: timed out",
        "a stream wait behind abandoned work did not return its error");
  check(waited >= 0.04 && waited < 5.0, "the stream wait did not end soon after the abandonment");
  check(!ran, "work behind the stuck collective ran");

  code = TF_OK;
  msg.clear();
  t0 = std::chrono::steady_clock::now();
  e = wait_work(&dev, nullptr, later, &code, &msg);
  check(e == cudaErrorNotReady && code == TF_DEADLINE_EXCEEDED && since(t0) < 5.0,
        "an event wait behind abandoned work did not return its error");

  // The stuck work ends after all (the abort did end the kernel); a later
  // wait for slow work polls, forgets the finished abandonment and completes.
  release = true;
  while (cudaEventQuery(later) == cudaErrorNotReady) std::this_thread::sleep_for(milliseconds(1));
  check(ran, "work behind the collective did not run once it ended");
  s.push([] { std::this_thread::sleep_for(milliseconds(20)); });
  code = TF_OK;
  e = wait_work(&dev, &s, nullptr, &code, &msg);
  check(e == cudaSuccess && code == TF_OK,
        "the wait did not complete once the abandoned work ended");
  {
    std::lock_guard<std::mutex> lock(dev.abandon_mu);
    check(dev.abandoned_until.empty(), "abandoned work that ended was not forgotten");
  }
  check(wait_work(&dev, nullptr, later, &code, &msg) == cudaSuccess && code == TF_OK,
        "an event wait after the abandoned work ended did not complete");
  cudaEventDestroy(later);

  return sim_check::result();
}
