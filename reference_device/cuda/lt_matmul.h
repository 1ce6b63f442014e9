// Products through cuBLASLt with the algorithm chosen by timing, once per
// shape (lt_matmul.cu): the path of _FusedMatMul (kernels_fused.cu) where
// the matrix-vector path does not take it.
//
// cuBLASLt's heuristic ranks its algorithms with a model of the device, and
// its first choice is not always the fastest: for an 8192^3 float16 product
// on an H200 it ran at 644 TFLOP/s where the best of its first eight ran at
// 734. As TensorFlow does for its GEMMs, the first product of a given shape,
// dtype, transposes and epilogue on a device times the heuristic's first
// kLtCandidates algorithms on the op's stream (CUDA events; each one's first
// run is not timed) and keeps the fastest for the rest of the process.
//
// Timing waits for the stream, so it happens only where that is cheap next
// to the product and legal: products of at least kLtTuneMacs multiply-adds,
// no capture running on the device, and PLUGGABLE_CUDA_AUTOTUNE not "0"
// (read once per process). Anything else takes the heuristic's first choice,
// and a shape first met where timing is not possible keeps that choice for
// the process: every call of one shape uses one algorithm, so results repeat
// bit for bit within a process (across processes the timed choice may
// differ; PLUGGABLE_CUDA_AUTOTUNE=0 makes it the heuristic's).
//
// MatMul keeps cublasGemmEx (kernels_matmul.cu): on the H200, 4096^3
// float16 and bfloat16 products with the timed cuBLASLt algorithm ran 3-5%
// behind PyTorch's, where cublasGemmEx runs level with it.
#ifndef PLUGGABLE_REFERENCE_DEVICE_CUDA_LT_MATMUL_H_
#define PLUGGABLE_REFERENCE_DEVICE_CUDA_LT_MATMUL_H_

#include <cstdint>

#include "kernel_util.h"

namespace pgcuda {

// Candidates timed per shape.
constexpr int kLtCandidates = 8;

// Products of fewer multiply-adds take the heuristic's first choice.
constexpr int64_t kLtTuneMacs = int64_t(1) << 26;

// Whether timing is on (PLUGGABLE_CUDA_AUTOTUNE is not "0").
bool lt_autotune_enabled();

// One row-major product D[M, N] = act(op(A) op(B) + bias): A is [M, K] ([K, M]
// with ta), B is [K, N] ([N, K] with tb); float32 (TF32 where tf32),
// float16 or bfloat16, accumulated in float; act is Relu where `relu`.
struct LtProduct {
  TF_DataType dt;
  bool ta, tb, tf32;
  int64_t M, N, K;  // each in [1, INT_MAX]
  bool relu;
};

// Runs the product on the call's stream. `bias_ptr` is the bias vector of N
// elements. On return `*epilogue_done` says whether the
// bias and the Relu were applied (cuBLASLt may have no algorithm with that
// epilogue for a shape; the caller then applies them). `op` names the op in
// errors. Records a failure and returns false on error.
bool lt_matmul(OpCall& c, const char* op, const LtProduct& p, const void* a, const void* b,
               const void* bias_ptr, void* d, bool* epilogue_done);

}  // namespace pgcuda

#endif  // PLUGGABLE_REFERENCE_DEVICE_CUDA_LT_MATMUL_H_
