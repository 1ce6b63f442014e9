// wait_work (wait_work.h). Kept apart from runtime.cu so that
// tests/cuda_sim can build it against its stand-in of the CUDA runtime.
#include "wait_work.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>

namespace pgcuda {

cudaError_t wait_work(CudaDevice* dev, cudaStream_t stream, cudaEvent_t ev, TF_Code* code,
                      std::string* msg) {
  if (dev == nullptr || !dev->poll_waits.load(std::memory_order_relaxed)) {
    return ev != nullptr ? cudaEventSynchronize(ev) : cudaStreamSynchronize(stream);
  }
  for (int round = 0;; ++round) {
    const cudaError_t e = ev != nullptr ? cudaEventQuery(ev) : cudaStreamQuery(stream);
    if (e != cudaErrorNotReady) return e;
    {
      std::lock_guard<std::mutex> lock(dev->abandon_mu);
      auto& v = dev->abandoned_until;
      v.erase(std::remove_if(v.begin(), v.end(), [](cudaEvent_t u) {
                if (cudaEventQuery(u) == cudaErrorNotReady) return false;
                (void)cudaEventDestroy(u);  // the stuck work ended after all
                return true;
              }), v.end());
      if (!v.empty()) {
        *code = dev->abandon_code;
        *msg = dev->abandon_message;
        return cudaErrorNotReady;
      }
    }
    // Spin briefly (a short collective ends within microseconds), then sleep.
    if (round < 2000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

}  // namespace pgcuda
