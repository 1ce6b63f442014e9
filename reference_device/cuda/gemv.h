// Matrix-vector path for MatMul and _FusedMatMul with few rows (kernels_gemv.cu).
//
// At a small M every product is bound by reading B once; cuBLAS reaches about
// half the memory bandwidth there. This path reads B with wide loads split over
// K so that the grid covers the GPU, then sums the K slices in a fixed order
// (no atomics: results are bit-for-bit repeatable) and applies the epilogue.
#ifndef PLUGGABLE_REFERENCE_DEVICE_CUDA_GEMV_H_
#define PLUGGABLE_REFERENCE_DEVICE_CUDA_GEMV_H_

#include "kernel_util.h"

namespace pgcuda {

// The most rows of the output the path takes.
constexpr int64_t kGemvMaxRows = 8;

// Column tiles a one-pass launch may have: one ticket each per stream.
constexpr int64_t kGemvTickets = 8192;

// Gives stream `s` its zeroed tickets (CudaStream::gemv_tickets) if it has
// none and is not capturing; returns them or null. Call with s->mu held
// (the capture code calls it before a capture begins).
unsigned int* gemv_prepare_stream(CudaStream* s);

// Whether the path takes C[M, N] = A[M, K] op(B) (row-major; B is [K, N], or
// [N, K] with transpose_b; not transpose_a) for dtype `dt`: float32, float16 and bfloat16 (accumulated in float), M in
// [1, kGemvMaxRows], K and N at least 1, unless PLUGGABLE_CUDA_GEMV is "0"
// (read once per process). Everything else keeps the cuBLAS path.
bool gemv_applies(TF_DataType dt, bool transpose_a, bool transpose_b, int64_t M, int64_t N,
                  int64_t K);

// out[M, N] = act(a[M, K] op(b) + bias[N]) on the call's stream (op(b) = b
// [K, N], or b^T for b [N, K] when `transpose_b`), where
// `bias` may be null (no bias) and act is Relu when `relu`, else identity.
// The partial sums live in a temporary from the kernel context
// (TF_AllocateTemp), so the call is legal under CUDA graph capture. `op`
// names the op in errors. Records a failure and returns false on error.
// Call only when gemv_applies() holds.
bool run_gemv(OpCall& c, const char* op, TF_DataType dt, bool transpose_b, const void* a,
              const void* b, const void* bias, bool relu, void* out, int64_t M, int64_t N,
              int64_t K);

}  // namespace pgcuda

#endif  // PLUGGABLE_REFERENCE_DEVICE_CUDA_GEMV_H_
