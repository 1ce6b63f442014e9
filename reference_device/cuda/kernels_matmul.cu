// MatMul and BatchMatMulV2: floating types through cuBLAS (cublasGemmEx and
// cublasGemmStridedBatchedEx, loaded at run time; a single product large
// enough to time, through the cuBLASLt algorithm that timed faster than
// cublasGemmEx for its shape where one did, lt_matmul.h), int32/int64 and floating
// products of at most kSmallGemmMacs multiply-adds through a shared-memory
// tiled kernel. A single product with at most 8 rows in
// float32/float16/bfloat16 and no transpose_a takes the matrix-vector path
// (gemv.h) instead.
//
// cuBLAS is column-major. A row-major [r, c] matrix is the column-major
// [c, r] matrix, its transpose, so the row-major product C = op(A) op(B) is
// computed as the column-major C^T = op(B)^T op(A)^T: cuBLAS gets B first,
// m = N, n = M, and each operand keeps its own transpose flag.
#include <climits>
#include <cstdlib>
#include <cstring>
#include <new>

#include "cublas_loader.h"
#include "gemv.h"
#include "kernel_util.h"
#include "lt_matmul.h"

namespace pgcuda {

// The stream's cuBLAS handle, created on first use (kernel_util.h).
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

// C[M, N] = op(A) op(B), for each batch z (A, B, C advanced by their
// strides; a stride 0 broadcasts), accumulated in Acc: wrapping arithmetic
// for integers (Acc unsigned), float for float32/float16/bfloat16, double
// for float64. A is [M, K] ([K, M] if ta), B is [K, N] ([N, K] if tb).
// Block (16, 16): x over columns of C, y over rows; grid-stride over the
// row tiles in y and batches in z. The tiles are held as Acc.
template <typename T, typename Acc>
__global__ void matmul_tiled_kernel(const T* __restrict__ A, const T* __restrict__ B,
                                    T* __restrict__ C, int64_t M, int64_t N, int64_t K,
                                    bool ta, bool tb, int64_t batch, int64_t sa, int64_t sb,
                                    int64_t sc) {
  __shared__ Acc as[kMmTile][kMmTile + 1];
  __shared__ Acc bs[kMmTile][kMmTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kMmTile + tx;
  for (int64_t z = blockIdx.z; z < batch; z += gridDim.z) {
    const T* a = A + z * sa;
    const T* b = B + z * sb;
    T* cz = C + z * sc;
    for (int64_t row0 = static_cast<int64_t>(blockIdx.y) * kMmTile; row0 < M;
         row0 += static_cast<int64_t>(gridDim.y) * kMmTile) {
      const int64_t row = row0 + ty;
      Acc acc = 0;
      for (int64_t k0 = 0; k0 < K; k0 += kMmTile) {
        // as[ty][tx] = A(row, k0 + tx); bs[ty][tx] = B(k0 + ty, col).
        const int64_t ka = k0 + tx, kb = k0 + ty;
        Acc av = 0, bv = 0;
        if (row < M && ka < K) av = static_cast<Acc>(ta ? a[ka * M + row] : a[row * K + ka]);
        if (kb < K && col < N) bv = static_cast<Acc>(tb ? b[col * K + kb] : b[kb * N + col]);
        as[ty][tx] = av;
        bs[ty][tx] = bv;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < kMmTile; ++k) acc += as[ty][k] * bs[k][tx];
        __syncthreads();
      }
      if (row < M && col < N) cz[row * N + col] = static_cast<T>(acc);
    }
  }
}


// One batched product: C_z = op(A_z) op(B_z) for z in [0, batch), operands
// advanced by their strides (elements; 0 broadcasts). Records a failure
// and returns false on error.
struct Gemm {
  TF_DataType dt;
  bool ta, tb, tf32;
  int64_t M, N, K;
  const void* a;
  const void* b;
  void* c;
  int64_t batch, sa, sb, sc;
};

// Floating products of at most this many multiply-adds (all batches) run
// the tiled kernel: a few microseconds on the device, and a launch on the
// host where cuBLAS's own call costs 10-30 us (the layers of a small model,
// and their gradients).
constexpr int64_t kSmallGemmMacs = int64_t(1) << 19;

// Whether a floating product takes the tiled kernel instead of cuBLAS:
// small enough, unless PLUGGABLE_CUDA_SMALL_GEMM is "0" (read once). The
// kernel computes float32 in full precision, also where TF32 is allowed.
bool small_gemm_applies(const Gemm& g) {
  static const bool on = not_turned_off("PLUGGABLE_CUDA_SMALL_GEMM");
  if (!on || g.M > kSmallGemmMacs || g.N > kSmallGemmMacs || g.K > kSmallGemmMacs) return false;
  const int64_t mn = g.M * g.N;
  if (mn > kSmallGemmMacs || mn * g.K > kSmallGemmMacs) return false;
  return g.batch <= kSmallGemmMacs / (mn * g.K);
}

template <typename T, typename Acc>
void launch_tiled(OpCall& c, const Gemm& g, dim3 grid, dim3 block) {
  matmul_tiled_kernel<T, Acc><<<grid, block, 0, c.stream()>>>(
      static_cast<const T*>(g.a), static_cast<const T*>(g.b), static_cast<T*>(g.c), g.M, g.N,
      g.K, g.ta, g.tb, g.batch, g.sa, g.sb, g.sc);
}

// The tiled kernel for integer products (any size) and small floating ones.
bool run_tiled_gemm(OpCall& c, const Gemm& g, const char* op) {
  const int64_t tiles_n = (g.N + kMmTile - 1) / kMmTile;
  int64_t tiles_m = (g.M + kMmTile - 1) / kMmTile;
  if (tiles_n > INT_MAX) {
    return c.fail(TF_UNIMPLEMENTED, "%s: N=%lld is too large", op, static_cast<long long>(g.N));
  }
  if (tiles_m > 65535) tiles_m = 65535;  // the kernel strides over the rest
  const int64_t zs = g.batch < 65535 ? g.batch : 65535;
  const dim3 grid(static_cast<unsigned>(tiles_n), static_cast<unsigned>(tiles_m),
                  static_cast<unsigned>(zs));
  const dim3 block(kMmTile, kMmTile);
  switch (g.dt) {
    case TF_INT32: launch_tiled<int32_t, uint32_t>(c, g, grid, block); break;
    case TF_INT64: launch_tiled<int64_t, uint64_t>(c, g, grid, block); break;
    case TF_FLOAT: launch_tiled<float, float>(c, g, grid, block); break;
    case TF_HALF: launch_tiled<__half, float>(c, g, grid, block); break;
    case TF_BFLOAT16: launch_tiled<__nv_bfloat16, float>(c, g, grid, block); break;
    case TF_DOUBLE: launch_tiled<double, double>(c, g, grid, block); break;
    default: return c.fail(TF_UNIMPLEMENTED, "%s: dtype %s", op, dtype_name(g.dt));
  }
  return c.check_launch(op);
}

// The product through cublasGemmEx (one matrix) or
// cublasGemmStridedBatchedEx.
bool run_cublas(OpCall& c, const Gemm& g, const char* op) {
  const size_t elem = TF_DataTypeSize(g.dt);
  cudaDataType dtype;
  int compute;
  const float alpha_f = 1.0f, beta_f = 0.0f;
  const double alpha_d = 1.0, beta_d = 0.0;
  const void* alpha = &alpha_f;
  const void* beta = &beta_f;
  switch (g.dt) {
    case TF_FLOAT:
      dtype = CUDA_R_32F;
      compute = g.tf32 ? kBlasCompute32FFastTF32 : kBlasCompute32F;
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
      return c.fail(TF_UNIMPLEMENTED, "%s: dtype %s", op, dtype_name(g.dt));
  }
  if (g.M > INT_MAX || g.N > INT_MAX || g.K > INT_MAX) {
    return c.fail(TF_UNIMPLEMENTED, "%s: dimensions above %d are not supported", op, INT_MAX);
  }
  const BlasApi* api = load_blas(c.status());
  if (api == nullptr) return c.check_status();
  const int m = static_cast<int>(g.N), n = static_cast<int>(g.M), k = static_cast<int>(g.K);
  // B (row-major [K, N], or [N, K] if tb) is column-major [N, K] (or [K, N]).
  const int op_b = g.tb ? kBlasOpT : kBlasOpN;
  const int ld_b = g.tb ? k : m;
  // A (row-major [M, K], or [K, M] if ta) is column-major [K, M] (or [M, K]).
  const int op_a = g.ta ? kBlasOpT : kBlasOpN;
  const int ld_a = g.ta ? n : k;
  CudaStream* s = c.cuda_stream();
  std::lock_guard<std::mutex> lock(s->mu);
  void* h = stream_blas_handle(c, api);
  if (h == nullptr) return false;
  BlasStatus r = kBlasSuccess;
  if (g.batch > 1 && api->gemm_strided_batched_ex != nullptr) {
    for (int64_t z0 = 0; z0 < g.batch && r == kBlasSuccess; z0 += INT_MAX) {
      const int count = static_cast<int>(g.batch - z0 < INT_MAX ? g.batch - z0 : INT_MAX);
      r = api->gemm_strided_batched_ex(
          h, op_b, op_a, m, n, k, alpha, static_cast<const char*>(g.b) + z0 * g.sb * elem,
          dtype, ld_b, g.sb, static_cast<const char*>(g.a) + z0 * g.sa * elem, dtype, ld_a,
          g.sa, beta, static_cast<char*>(g.c) + z0 * g.sc * elem, dtype, m, g.sc, count,
          compute, kBlasGemmDefault);
    }
  } else {
    for (int64_t z = 0; z < g.batch && r == kBlasSuccess; ++z) {
      r = api->gemm_ex(h, op_b, op_a, m, n, k, alpha,
                       static_cast<const char*>(g.b) + z * g.sb * elem, dtype, ld_b,
                       static_cast<const char*>(g.a) + z * g.sa * elem, dtype, ld_a, beta,
                       static_cast<char*>(g.c) + z * g.sc * elem, dtype, m, compute,
                       kBlasGemmDefault);
    }
  }
  if (r != kBlasSuccess) {
    return c.fail(TF_INTERNAL, "%s: cuBLAS GEMM (m=%d, n=%d, k=%d, batch=%lld) failed: %s", op,
                  m, n, k, static_cast<long long>(g.batch), blas_status_text(api, r).c_str());
  }
  return true;
}

struct CublasCall {
  OpCall* c;
  const Gemm* g;
  const char* op;
  static bool run(void* self) {
    const CublasCall* k = static_cast<const CublasCall*>(self);
    return run_cublas(*k->c, *k->g, k->op);
  }
};

bool run_gemm(OpCall& c, const Gemm& g, const char* op) {
  if (g.M == 0 || g.N == 0 || g.batch == 0) return true;
  if (g.K == 0) {
    const size_t elem = TF_DataTypeSize(g.dt);
    return c.check_cuda(cudaMemsetAsync(g.c, 0, static_cast<size_t>(g.M * g.N * g.batch) * elem,
                                        c.stream()),
                        "cudaMemsetAsync(product with K=0)");
  }
  if (g.dt == TF_INT32 || g.dt == TF_INT64) return run_tiled_gemm(c, g, op);
  if (g.batch == 1 && gemv_applies(g.dt, g.ta, g.tb, g.M, g.N, g.K)) {
    return run_gemv(c, op, g.dt, g.tb, g.a, g.b, nullptr, false, g.c, g.M, g.N, g.K);
  }
  if (small_gemm_applies(g)) return run_tiled_gemm(c, g, op);
  if (g.batch == 1 && (g.dt == TF_FLOAT || g.dt == TF_HALF || g.dt == TF_BFLOAT16)) {
    // Large single products: cublasGemmEx, or the cuBLASLt algorithm that
    // timed faster than it for this shape (lt_matmul.h).
    const LtProduct p{g.dt, g.ta, g.tb, g.tf32, g.M, g.N, g.K, /*bias=*/false, /*relu=*/false};
    if (lt_worth_timing(p)) {
      CublasCall call{&c, &g, op};
      const LtAlternative alt{&CublasCall::run, &call};
      bool epilogue_done = false;
      return lt_matmul(c, op, p, g.a, g.b, nullptr, g.c, &epilogue_done, &alt);
    }
  }
  return run_cublas(c, g, op);
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
  const Gemm g{dt, ta, tb, tf32, M, N, K, TF_TensorData(a.get()), TF_TensorData(b.get()),
               TF_TensorData(out.get()), 1, 0, 0, 0};
  run_gemm(c, g, "MatMul");
}

// BatchMatMulV2: batch dimensions broadcast. When each operand's batch is
// either all of the output's or a single matrix, one strided-batched call
// does the work; otherwise one call per output matrix.
void* batch_matmul_create(TF_OpKernelConstruction* ctx) {
  MatMulState* st = new (std::nothrow) MatMulState();
  if (st == nullptr) return nullptr;
  st->transpose_a = read_bool_attr(ctx, "adj_x", false);
  st->transpose_b = read_bool_attr(ctx, "adj_y", false);
  st->allow_tf32 = read_bool_attr(ctx, "_allow_tf32", false);
  return st;
}

void batch_matmul_compute(void* kernel, TF_OpKernelContext* ctx) {
  const MatMulState* st = static_cast<const MatMulState*>(kernel);
  const char* op = "BatchMatMulV2";
  OpCall c(ctx);
  if (!c.ok()) return;
  TensorPtr a = c.input(0), b = c.input(1);
  if (!a || !b) return;
  const Shape sa = Shape::of(a.get()), sb = Shape::of(b.get());
  char b1[128], b2[128];
  if (sa.rank < 2 || sb.rank < 2) {
    c.fail(TF_INVALID_ARGUMENT, "%s: x and y must have rank >= 2, got %s and %s", op,
           shape_str(sa, b1, sizeof(b1)), shape_str(sb, b2, sizeof(b2)));
    return;
  }
  const bool ta = st->transpose_a, tb = st->transpose_b;
  const int64_t M = sa.dims[sa.rank - (ta ? 1 : 2)], K = sa.dims[sa.rank - (ta ? 2 : 1)];
  const int64_t Kb = sb.dims[sb.rank - (tb ? 1 : 2)], N = sb.dims[sb.rank - (tb ? 2 : 1)];
  if (K != Kb) {
    c.fail(TF_INVALID_ARGUMENT, "%s: Matrix size-incompatible: In[0]: %s, In[1]: %s "
           "(adj_x=%d, adj_y=%d)", op, shape_str(sa, b1, sizeof(b1)),
           shape_str(sb, b2, sizeof(b2)), ta, tb);
    return;
  }
  // Broadcast batch shape, right-aligned.
  const int ra = sa.rank - 2, rb = sb.rank - 2;
  const int rank = ra > rb ? ra : rb;
  Shape so;
  so.rank = rank + 2;
  int64_t da[TF_MAX_DIMS], db[TF_MAX_DIMS];
  int64_t batch = 1, count_a = 1, count_b = 1;
  for (int i = 0; i < rank; ++i) {
    da[i] = i - (rank - ra) >= 0 ? sa.dims[i - (rank - ra)] : 1;
    db[i] = i - (rank - rb) >= 0 ? sb.dims[i - (rank - rb)] : 1;
    if (da[i] != db[i] && da[i] != 1 && db[i] != 1) {
      c.fail(TF_INVALID_ARGUMENT, "%s: In[0] and In[1] must have compatible batch dimensions: "
             "%s vs. %s", op, shape_str(sa, b1, sizeof(b1)), shape_str(sb, b2, sizeof(b2)));
      return;
    }
    so.dims[i] = da[i] == 1 ? db[i] : da[i];
    batch *= so.dims[i];
    count_a *= da[i];
    count_b *= db[i];
  }
  so.dims[rank] = M;
  so.dims[rank + 1] = N;
  const TF_DataType dt = TF_TensorType(a.get());
  TensorPtr out = c.output(0, dt, so);
  if (!out || so.num_elements() == 0) return;
  const int64_t ma = M * K, mb = K * N, mc = M * N;
  Gemm g{dt, ta, tb, st->allow_tf32, M, N, K, TF_TensorData(a.get()), TF_TensorData(b.get()),
         TF_TensorData(out.get()), batch, ma, mb, mc};
  const bool affine = (count_a == batch || count_a == 1) && (count_b == batch || count_b == 1);
  if (affine) {
    if (count_a == 1 && batch > 1) g.sa = 0;
    if (count_b == 1 && batch > 1) g.sb = 0;
    run_gemm(c, g, op);
    return;
  }
  const size_t elem = TF_DataTypeSize(dt);
  for (int64_t z = 0; z < batch; ++z) {
    // Output batch index z -> the operands' batch indices.
    int64_t rem = z, ia = 0, ib = 0, pa = 1, pb = 1;
    for (int i = rank - 1; i >= 0; --i) {
      const int64_t idx = rem % so.dims[i];
      rem /= so.dims[i];
      ia += (da[i] == 1 ? 0 : idx) * pa;
      ib += (db[i] == 1 ? 0 : idx) * pb;
      pa *= da[i];
      pb *= db[i];
    }
    Gemm one = g;
    one.batch = 1;
    one.a = static_cast<const char*>(g.a) + ia * ma * elem;
    one.b = static_cast<const char*>(g.b) + ib * mb * elem;
    one.c = static_cast<char*>(g.c) + z * mc * elem;
    if (!run_gemm(c, one, op)) return;
  }
}

}  // namespace

void register_matmul_kernels() {
  for (TF_DataType t : kNumericTypes) {
    register_kernel("MatMul", matmul_create, matmul_compute, matmul_delete, {{"T", t}});
    register_kernel("BatchMatMulV2", batch_matmul_create, batch_matmul_compute, matmul_delete,
                    {{"T", t}});
  }
}

}  // namespace pgcuda
