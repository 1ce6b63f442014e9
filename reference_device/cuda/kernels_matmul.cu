// MatMul: floating types through cuBLAS (cublasGemmEx, loaded at run time),
// int32/int64 through a shared-memory tiled kernel.
//
// cuBLAS is column-major. A row-major [r, c] matrix is the column-major
// [c, r] matrix, its transpose, so the row-major product C = op(A) op(B) is
// computed as the column-major C^T = op(B)^T op(A)^T: cuBLAS gets B first,
// m = N, n = M, and each operand keeps its own transpose flag.
#include <climits>
#include <new>

#include "cublas_loader.h"
#include "kernel_util.h"

namespace pgcuda {
namespace {

struct MatMulState {
  bool transpose_a;
  bool transpose_b;
  bool allow_tf32;
};

void* matmul_create(TF_OpKernelConstruction* ctx) {
  MatMulState* st = new (std::nothrow) MatMulState();
  if (st == nullptr) return nullptr;
  st->transpose_a = read_bool_attr(ctx, "transpose_a", false);
  st->transpose_b = read_bool_attr(ctx, "transpose_b", false);
  st->allow_tf32 = read_bool_attr(ctx, "_allow_tf32", false);
  return st;
}

void matmul_delete(void* p) { delete static_cast<MatMulState*>(p); }

constexpr int kMmTile = 16;

// C[M, N] = op(A) op(B) for integers (wrapping arithmetic). A is [M, K]
// ([K, M] if ta), B is [K, N] ([N, K] if tb). Block (16, 16): x over columns
// of C, y over rows; grid-stride over the row tiles in y.
template <typename T>
__global__ void matmul_int_kernel(const T* __restrict__ A, const T* __restrict__ B,
                                  T* __restrict__ C, int64_t M, int64_t N, int64_t K,
                                  bool ta, bool tb) {
  using U = typename std::make_unsigned<T>::type;
  __shared__ T as[kMmTile][kMmTile + 1];
  __shared__ T bs[kMmTile][kMmTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kMmTile + tx;
  for (int64_t row0 = static_cast<int64_t>(blockIdx.y) * kMmTile; row0 < M;
       row0 += static_cast<int64_t>(gridDim.y) * kMmTile) {
    const int64_t row = row0 + ty;
    U acc = 0;
    for (int64_t k0 = 0; k0 < K; k0 += kMmTile) {
      // as[ty][tx] = A(row, k0 + tx); bs[ty][tx] = B(k0 + ty, col).
      const int64_t ka = k0 + tx, kb = k0 + ty;
      T av = 0, bv = 0;
      if (row < M && ka < K) av = ta ? A[ka * M + row] : A[row * K + ka];
      if (kb < K && col < N) bv = tb ? B[col * K + kb] : B[kb * N + col];
      as[ty][tx] = av;
      bs[ty][tx] = bv;
      __syncthreads();
#pragma unroll
      for (int k = 0; k < kMmTile; ++k) {
        acc += static_cast<U>(as[ty][k]) * static_cast<U>(bs[k][tx]);
      }
      __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = static_cast<T>(acc);
  }
}

// The stream's cuBLAS handle, created on first use (call with s->mu held).
void* stream_blas_handle(OpCall& c, const BlasApi* api) {
  CudaStream* s = c.cuda_stream();
  if (s->blas_handle != nullptr) return s->blas_handle;
  void* h = nullptr;
  BlasStatus r = api->create(&h);
  if (r != kBlasSuccess || h == nullptr) {
    c.fail(TF_INTERNAL, "cublasCreate_v2 failed: %s", blas_status_text(api, r).c_str());
    return nullptr;
  }
  r = api->set_stream(h, s->stream);
  if (r == kBlasSuccess) r = api->set_math_mode(h, kBlasDefaultMath);
  if (r != kBlasSuccess) {
    c.fail(TF_INTERNAL, "configuring the cuBLAS handle failed: %s",
           blas_status_text(api, r).c_str());
    (void)api->destroy(h);
    return nullptr;
  }
  // A workspace of its own for the handle (cuBLAS falls back to its default
  // when this cannot be had).
  if (api->set_workspace != nullptr) {
    const size_t ws_bytes = size_t(32) << 20;
    void* ws = nullptr;
    if (cudaMalloc(&ws, ws_bytes) == cudaSuccess) {
      if (api->set_workspace(h, ws, ws_bytes) == kBlasSuccess) {
        s->blas_workspace = ws;
      } else {
        (void)cudaFree(ws);
      }
    } else {
      (void)cudaGetLastError();
    }
  }
  s->blas_handle = h;
  return h;
}

void matmul_compute(void* kernel, TF_OpKernelContext* ctx) {
  const MatMulState* st = static_cast<const MatMulState*>(kernel);
  const bool ta = st != nullptr && st->transpose_a;
  const bool tb = st != nullptr && st->transpose_b;
  const bool tf32 = st != nullptr && st->allow_tf32;
  OpCall c(ctx);
  if (!c.ok()) return;
  TensorPtr a = c.input(0);
  if (!a) return;
  TensorPtr b = c.input(1);
  if (!b) return;
  const Shape sa = Shape::of(a.get()), sb = Shape::of(b.get());
  if (sa.rank != 2 || sb.rank != 2) {
    c.fail(TF_INVALID_ARGUMENT, "MatMul: In[%d] is not a matrix. Instead it has shape of rank %d",
           sa.rank != 2 ? 0 : 1, sa.rank != 2 ? sa.rank : sb.rank);
    return;
  }
  const int64_t M = ta ? sa.dims[1] : sa.dims[0];
  const int64_t K = ta ? sa.dims[0] : sa.dims[1];
  const int64_t Kb = tb ? sb.dims[1] : sb.dims[0];
  const int64_t N = tb ? sb.dims[0] : sb.dims[1];
  if (K != Kb) {
    char b1[128], b2[128];
    c.fail(TF_INVALID_ARGUMENT,
           "Matrix size-incompatible: In[0]: %s, In[1]: %s (transpose_a=%d, transpose_b=%d)",
           shape_str(sa, b1, sizeof(b1)), shape_str(sb, b2, sizeof(b2)), ta, tb);
    return;
  }
  const TF_DataType dt = TF_TensorType(a.get());
  Shape so;
  so.rank = 2;
  so.dims[0] = M;
  so.dims[1] = N;
  TensorPtr out = c.output(0, dt, so);
  if (!out) return;
  if (M == 0 || N == 0) return;
  void* pc = TF_TensorData(out.get());
  const size_t elem = TF_DataTypeSize(dt);
  if (K == 0) {
    c.check_cuda(cudaMemsetAsync(pc, 0, static_cast<size_t>(M * N) * elem, c.stream()),
                 "cudaMemsetAsync(MatMul with K=0)");
    return;
  }
  const void* pa = TF_TensorData(a.get());
  const void* pb = TF_TensorData(b.get());

  if (dt == TF_INT32 || dt == TF_INT64) {
    const int64_t tiles_n = (N + kMmTile - 1) / kMmTile;
    int64_t tiles_m = (M + kMmTile - 1) / kMmTile;
    if (tiles_n > INT_MAX) {
      c.fail(TF_UNIMPLEMENTED, "MatMul: N=%lld is too large", static_cast<long long>(N));
      return;
    }
    if (tiles_m > 65535) tiles_m = 65535;  // the kernel strides over the rest
    const dim3 grid(static_cast<unsigned>(tiles_n), static_cast<unsigned>(tiles_m));
    const dim3 block(kMmTile, kMmTile);
    if (dt == TF_INT32) {
      matmul_int_kernel<int32_t><<<grid, block, 0, c.stream()>>>(
          static_cast<const int32_t*>(pa), static_cast<const int32_t*>(pb),
          static_cast<int32_t*>(pc), M, N, K, ta, tb);
    } else {
      matmul_int_kernel<int64_t><<<grid, block, 0, c.stream()>>>(
          static_cast<const int64_t*>(pa), static_cast<const int64_t*>(pb),
          static_cast<int64_t*>(pc), M, N, K, ta, tb);
    }
    c.check_launch("MatMul");
    return;
  }

  cudaDataType dtype;
  int compute;
  const float alpha_f = 1.0f, beta_f = 0.0f;
  const double alpha_d = 1.0, beta_d = 0.0;
  const void* alpha = &alpha_f;
  const void* beta = &beta_f;
  switch (dt) {
    case TF_FLOAT:
      dtype = CUDA_R_32F;
      compute = tf32 ? kBlasCompute32FFastTF32 : kBlasCompute32F;
      break;
    case TF_HALF:
      dtype = CUDA_R_16F;
      compute = kBlasCompute32F;
      break;
    case TF_BFLOAT16:
      dtype = CUDA_R_16BF;
      compute = kBlasCompute32F;
      break;
    case TF_DOUBLE:
      dtype = CUDA_R_64F;
      compute = kBlasCompute64F;
      alpha = &alpha_d;
      beta = &beta_d;
      break;
    default:
      c.fail(TF_UNIMPLEMENTED, "MatMul: dtype %s", dtype_name(dt));
      return;
  }
  if (M > INT_MAX || N > INT_MAX || K > INT_MAX) {
    c.fail(TF_UNIMPLEMENTED, "MatMul: dimensions above %d are not supported", INT_MAX);
    return;
  }
  const BlasApi* api = load_blas(c.status());
  if (api == nullptr) {
    c.check_status();
    return;
  }
  const int m = static_cast<int>(N), n = static_cast<int>(M), k = static_cast<int>(K);
  // B (row-major [K, N], or [N, K] if tb) is column-major [N, K] (or [K, N]).
  const int op_b = tb ? kBlasOpT : kBlasOpN;
  const int ld_b = tb ? k : m;
  // A (row-major [M, K], or [K, M] if ta) is column-major [K, M] (or [M, K]).
  const int op_a = ta ? kBlasOpT : kBlasOpN;
  const int ld_a = ta ? n : k;
  CudaStream* s = c.cuda_stream();
  std::lock_guard<std::mutex> lock(s->mu);
  void* h = stream_blas_handle(c, api);
  if (h == nullptr) return;
  const BlasStatus r = api->gemm_ex(h, op_b, op_a, m, n, k, alpha, pb, dtype, ld_b, pa, dtype,
                                    ld_a, beta, pc, dtype, m, compute, kBlasGemmDefault);
  if (r != kBlasSuccess) {
    c.fail(TF_INTERNAL, "cublasGemmEx(m=%d, n=%d, k=%d) failed: %s", m, n, k,
           blas_status_text(api, r).c_str());
  }
}

}  // namespace

void register_matmul_kernels() {
  for (TF_DataType t : kNumericTypes) {
    register_kernel("MatMul", matmul_create, matmul_compute, matmul_delete, {{"T", t}});
  }
}

}  // namespace pgcuda
