// Stream capture of the CUDA reference plugin (stream_capture.h) with CUDA
// graphs: begin_capture starts a relaxed-mode capture on the stream the core
// captures on, end_capture ends it (cudaStreamEndCapture), instantiate and
// launch are cudaGraphInstantiate and cudaGraphLaunch.
//
// Relaxed mode lets the thread that captures keep allocating: the core's
// allocator serves captured kernels from blocks it obtained with the
// plugin's allocate (the stream-ordered pool, on an internal stream that is
// never captured) and keeps every block a graph uses for that graph until
// the exec is destroyed, so the addresses baked into a CUDA graph stay valid
// and are never handed to other work meanwhile.
//
// Resources kernels create on first use of a stream (the cuBLAS handle and
// its workspace, the cuBLASLt handle, and the cuDNN handle once a
// convolution has loaded cuDNN) are created by begin_capture, before
// recording starts: creating them inside a capture is not allowed.
#include <new>

#include "cublas_loader.h"
#include "cublaslt_loader.h"
#include "conv.h"
#include "cuda_common.h"
#include "launch_queue.h"
#include "gemv.h"
#include "stream_capture.h"

struct SP_Graph_st {
  cudaGraph_t graph;
  int ordinal;
};

struct SP_GraphExec_st {
  cudaGraphExec_t exec;
  int ordinal;
};

namespace pgcuda {
namespace {

constexpr size_t kBlasWorkspaceBytes = size_t(32) << 20;

// The stream's cuBLAS handle, as kernels_matmul.cu would make it on first
// use (call with s->mu held).
void prepare_blas(CudaStream* s) {
  TF_Status* st = TF_NewStatus();
  const BlasApi* api = load_blas(st);
  TF_DeleteStatus(st);
  if (api == nullptr || s->blas_handle != nullptr) return;
  void* h = nullptr;
  if (api->create(&h) != kBlasSuccess || h == nullptr) return;
  if (api->set_stream(h, s->stream) != kBlasSuccess ||
      api->set_math_mode(h, kBlasDefaultMath) != kBlasSuccess) {
    (void)api->destroy(h);
    return;
  }
  void* ws = nullptr;
  if (api->set_workspace != nullptr && cudaMalloc(&ws, kBlasWorkspaceBytes) == cudaSuccess) {
    if (api->set_workspace(h, ws, kBlasWorkspaceBytes) == kBlasSuccess) {
      s->blas_workspace = ws;
    } else {
      (void)cudaFree(ws);
    }
  }
  (void)cudaGetLastError();
  s->blas_handle = h;
}

void prepare_blaslt() {
  TF_Status* st = TF_NewStatus();
  const LtApi* api = load_blaslt(st);
  if (api != nullptr) (void)shared_blaslt_handle(api, st);
  TF_DeleteStatus(st);
}

void begin_capture(const SP_Device*, SP_Stream stream, TF_Status* status) {
  CudaStream* s = stream_of(stream);
  if (s == nullptr) {
    TF_SetStatus(status, TF_INVALID_ARGUMENT, "begin_capture: NULL stream");
    return;
  }
  DeviceGuard guard(s->ordinal);
  if (!guard.ok(status, s->ordinal)) return;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    prepare_blas(s);
    (void)gemv_prepare_stream(s);
    (void)conv_prepare_stream(s);
  }
  prepare_blaslt();
  // Nothing is queued while the device captures: the captured kernels are
  // launched by the capturing thread, into the graph.
  s->dev->capturing.fetch_add(1);
  flush_device(s->dev);
  cudaError_t e = cudaStreamBeginCapture(s->stream, cudaStreamCaptureModeRelaxed);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    s->dev->capturing.fetch_sub(1);
    set_cuda_status(status, e, "cudaStreamBeginCapture");
  }
}

void end_capture(const SP_Device*, SP_Stream stream, SP_Graph* graph, TF_Status* status) {
  *graph = nullptr;
  CudaStream* s = stream_of(stream);
  if (s == nullptr) {
    TF_SetStatus(status, TF_INVALID_ARGUMENT, "end_capture: NULL stream");
    return;
  }
  DeviceGuard guard(s->ordinal);
  cudaGraph_t g = nullptr;
  cudaError_t e = cudaStreamEndCapture(s->stream, &g);
  s->dev->capturing.fetch_sub(1);
  if (e != cudaSuccess || g == nullptr) {
    (void)cudaGetLastError();
    if (g != nullptr) (void)cudaGraphDestroy(g);
    set_cuda_status(status, e != cudaSuccess ? e : cudaErrorStreamCaptureInvalidated,
                    "cudaStreamEndCapture (a captured kernel made a call that cannot be "
                    "captured)");
    return;
  }
  SP_Graph out = new (std::nothrow) SP_Graph_st{g, s->ordinal};
  if (out == nullptr) {
    (void)cudaGraphDestroy(g);
    TF_SetStatus(status, TF_RESOURCE_EXHAUSTED, "out of host memory");
    return;
  }
  *graph = out;
}

void instantiate(const SP_Device*, SP_Graph graph, SP_GraphExec* exec, TF_Status* status) {
  *exec = nullptr;
  DeviceGuard guard(graph->ordinal);
  if (!guard.ok(status, graph->ordinal)) return;
  cudaGraphExec_t e_exec = nullptr;
  cudaError_t e = cudaGraphInstantiate(&e_exec, graph->graph, 0);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    set_cuda_status(status, e, "cudaGraphInstantiate");
    return;
  }
  *exec = new (std::nothrow) SP_GraphExec_st{e_exec, graph->ordinal};
  if (*exec == nullptr) {
    (void)cudaGraphExecDestroy(e_exec);
    TF_SetStatus(status, TF_RESOURCE_EXHAUSTED, "out of host memory");
  }
}

void launch(const SP_Device*, SP_Stream stream, SP_GraphExec exec, TF_Status* status) {
  CudaStream* s = stream_of(stream);
  flush_device(s->dev);
  DeviceGuard guard(exec->ordinal);
  if (!guard.ok(status, exec->ordinal)) return;
  cudaError_t e = cudaGraphLaunch(exec->exec, s->stream);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    set_cuda_status(status, e, "cudaGraphLaunch");
  }
}

void destroy_graph(const SP_Device*, SP_Graph graph) {
  if (graph == nullptr) return;
  DeviceGuard guard(graph->ordinal);
  (void)cudaGraphDestroy(graph->graph);
  (void)cudaGetLastError();
  delete graph;
}

void destroy_graph_exec(const SP_Device*, SP_GraphExec exec) {
  if (exec == nullptr) return;
  DeviceGuard guard(exec->ordinal);
  (void)cudaGraphExecDestroy(exec->exec);
  (void)cudaGetLastError();
  delete exec;
}

}  // namespace
}  // namespace pgcuda

extern "C" void SE_InitStreamCapture(SE_StreamCaptureRegistrationParams* params,
                                     TF_Status* status) {
  (void)status;
  params->struct_size = SE_STREAM_CAPTURE_REGISTRATION_PARAMS_STRUCT_SIZE;
  params->major_version = SP_STREAM_CAPTURE_MAJOR;
  params->minor_version = SP_STREAM_CAPTURE_MINOR;
  params->patch_version = SP_STREAM_CAPTURE_PATCH;
  SP_StreamCaptureFns* fns = params->capture_fns;
  fns->struct_size = SP_STREAM_CAPTURE_FNS_STRUCT_SIZE;
  fns->begin_capture = pgcuda::begin_capture;
  fns->end_capture = pgcuda::end_capture;
  fns->instantiate = pgcuda::instantiate;
  fns->launch = pgcuda::launch;
  fns->destroy_graph = pgcuda::destroy_graph;
  fns->destroy_graph_exec = pgcuda::destroy_graph_exec;
}
