// Products through cuBLASLt with the algorithm chosen by timing, once per
// shape (lt_matmul.cu): the path of _FusedMatMul (kernels_fused.cu) and of
// MatMul's larger products (kernels_matmul.cu) where the matrix-vector path
// does not take them.
//
// cuBLASLt's heuristic ranks its algorithms with a model of the device, and
// its first choice is not always the fastest: for an 8192^3 float16 product
// on an H200 it ran at 644 TFLOP/s where the best of its first eight ran at
// 734. As TensorFlow does for its GEMMs, the first product of a given shape,
// dtype, transposes and epilogue on a device times the heuristic's first
// kLtCandidates algorithms on the op's stream and keeps the fastest for the
// rest of the process.
//
// The candidates take turns: after one untimed run each, kLtRounds rounds
// time one run of every candidate (CUDA events), and each candidate's figure
// is its fastest round, so a drift of the device during the timing falls on
// all of them alike. Every timed run starts with a cold L2 cache, as a
// layer's weights are in a model's step.
//
// MatMul passes its own cublasGemmEx call as one more candidate
// (LtAlternative). cuBLASLt's choice then replaces it only where it was at
// least kLtMargin faster: at 8192^3 the timed cuBLASLt algorithm ran 1-2%
// ahead of cublasGemmEx on an H200, while at 4096^3 in float16 and
// bfloat16 an algorithm timed by itself (not in turns, not against
// cublasGemmEx) ran 3-5% behind it.
//
// Timing waits for the stream, so it happens only where that is cheap next
// to the product and legal: products of at least kLtTuneMacs multiply-adds,
// no capture running on the device, and PLUGGABLE_CUDA_AUTOTUNE not "0"
// (read once per process). Anything else takes the alternative where there
// is one and the heuristic's first choice otherwise, and a shape first met
// where timing is not possible keeps that choice for the process: every call
// of one shape uses one algorithm, so results repeat bit for bit within a
// process (across processes the timed choice may differ;
// PLUGGABLE_CUDA_AUTOTUNE=0 makes it the untimed one).
#ifndef PLUGGABLE_REFERENCE_DEVICE_CUDA_LT_MATMUL_H_
#define PLUGGABLE_REFERENCE_DEVICE_CUDA_LT_MATMUL_H_

#include <cstdint>

#include "kernel_util.h"

namespace pgcuda {

// cuBLASLt candidates timed per shape, and the rounds that time them.
constexpr int kLtCandidates = 8;
constexpr int kLtRounds = 3;

// How much faster (a fraction of its time) cuBLASLt's choice must be than
// the alternative to replace it.
constexpr double kLtMargin = 0.01;

// Products of fewer multiply-adds take the heuristic's first choice.
constexpr int64_t kLtTuneMacs = int64_t(1) << 26;

// Whether timing is on (PLUGGABLE_CUDA_AUTOTUNE is not "0").
bool lt_autotune_enabled();

// One row-major product D[M, N] = act(op(A) op(B) + bias): A is [M, K] ([K, M]
// with ta), B is [K, N] ([N, K] with tb); float32 (TF32 where tf32),
// float16 or bfloat16, accumulated in float. With `bias`, the bias vector of
// N elements is added, and Relu applied where `relu`; without, neither.
struct LtProduct {
  TF_DataType dt;
  bool ta, tb, tf32;
  int64_t M, N, K;  // each in [1, INT_MAX]
  bool bias, relu;
};

// Whether the first call of `p`'s shape would time candidates (timing on,
// product large enough): where not, MatMul calls cublasGemmEx directly.
bool lt_worth_timing(const LtProduct& p);

// Another way to run a product without epilogue (MatMul's cublasGemmEx):
// run(ctx) enqueues it on the call's stream and returns false after
// recording a failure.
struct LtAlternative {
  bool (*run)(void* ctx);
  void* ctx;
};

// Runs the product on the call's stream, through cuBLASLt or, where `alt` is
// given (the product then has no bias) and was chosen, through `alt`.
// `bias_ptr` is the bias vector. On return `*epilogue_done` says whether the
// bias and the Relu were applied (cuBLASLt may have no algorithm with that
// epilogue for a shape; the caller then applies them). `op` names the op in
// errors. Records a failure and returns false on error.
bool lt_matmul(OpCall& c, const char* op, const LtProduct& p, const void* a, const void* b,
               const void* bias_ptr, void* d, bool* epilogue_done,
               const LtAlternative* alt = nullptr);

}  // namespace pgcuda

#endif  // PLUGGABLE_REFERENCE_DEVICE_CUDA_LT_MATMUL_H_
