// Waiting for device work that may never finish. A collective of a process
// communicator whose peer is alive but never calls keeps its NCCL kernel
// running, sometimes even after ncclCommAbort; work queued behind it then
// never completes. On a device that ran such collectives
// (CudaDevice::poll_waits) waits poll, and give up with the collective's
// error once the plugin has abandoned it (device_abandon in cuda_common.h).
#ifndef PLUGGABLE_CUDA_WAIT_WORK_H_
#define PLUGGABLE_CUDA_WAIT_WORK_H_

#include <string>

#include "cuda_common.h"

namespace pgcuda {

// Waits for `ev` (recorded on a stream of `dev`), or with ev == nullptr for
// all work of `stream`. Without poll_waits this is cudaEventSynchronize /
// cudaStreamSynchronize. With it, it polls (spinning briefly, then sleeping
// 50 us between looks) and returns cudaErrorNotReady with `*code`/`*msg`
// set when the work is unfinished while abandoned work of the device has
// not finished either; abandoned work that finished after all is forgotten
// (its event destroyed) and the wait goes on.
cudaError_t wait_work(CudaDevice* dev, cudaStream_t stream, cudaEvent_t ev, TF_Code* code,
                      std::string* msg);

}  // namespace pgcuda

#endif  // PLUGGABLE_CUDA_WAIT_WORK_H_
