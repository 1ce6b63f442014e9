// ScaledDotProductAttention and ScaledDotProductAttentionGrad, in two
// implementations chosen per call.
//
// Layout (pluggable/ops/transformer_ops.py): query [B, H, Sq, D], key and
// value [B, H, Sk, D], an optional bool mask [Sq, Sk] or [B|1, H|1, Sq, Sk],
// causal = query i sees keys j <= i. The forward op also returns the row
// logsumexp `lse` [B, H, Sq] (float32; +inf for a row with no allowed key,
// whose output is zeros); the gradient op recomputes the probabilities from
// it.
//
// Materialised scores (the GEMM path): the B*H heads are one batch of
// cublasGemmStridedBatchedEx products on tensor cores, accumulated in
// float32 (float32 inputs use TF32 where the framework's TF32 setting allows
// it, as MatMul does; 16-bit inputs use CUBLAS_COMPUTE_32F). Forward:
// S = scale * Q K^T into a float32 scratch [B*H, Sq, ld] (ld = Sk rounded up
// to 8, so that every row starts 16-byte aligned), one warp per row applies
// causal and mask, writes lse and P = softmax(S) in the input dtype into a
// second scratch, and O = P V. Backward: S again, P = exp(S - lse) (masked),
// dV = P^T dO, dP = dO V^T (into the float32 scratch, S being spent),
// dS = P * (dP - rowsum(dO * O)) in place over P, dQ = scale * dS K and
// dK = scale * dS^T Q. The scores are float32 because the softmax
// exponentiates them: a 16-bit score would put its rounding error (2^-9
// relative in bfloat16, times |s|) into every probability, where the
// memory-efficient kernel computes them in float; P and dS are in the input
// dtype because the GEMMs that read them take both operands in one type.
// Scratch is one temporary of the call (TF_AllocateTemp, stream-ordered):
// B*H*Sq*ld*(4 + sizeof(T)) bytes, for either op.
//
// Memory-efficient kernels (the fallback): never store the [Sq, Sk] score
// matrix. Forward: each group of TPR threads owns one query row (its D
// values split across the group, element d = e * TPR + part), key/value
// tiles are staged in shared memory as float, and an online softmax keeps
// the running max, sum and output in registers. Backward: one kernel per
// query row computes rowsum(dO * O) and dQ, a second per key row accumulates
// dK and dV over query tiles. Arithmetic is float for every element type
// (fp16, bf16, fp32); no tensor cores.
//
// The choice, per call: the GEMM path where cuBLAS has
// cublasGemmStridedBatchedEx (optional in cublas_loader.h), Sq, Sk and D are
// non-zero, the scratch is at most kAttnScratchMiB (256 MiB;
// PLUGGABLE_CUDA_ATTENTION_SCRATCH_MB overrides it, 0 turns the path off;
// read on every call) and the allocation succeeds; the memory-efficient
// kernels otherwise. 16 x 8 heads of 256 positions in bfloat16 need 48 MiB
// and take the GEMM path; at 4096 positions they would need 12 GiB and take
// the kernels. Both give the same results within the dtype's rounding.
#include <climits>
#include <cstdlib>
#include <mutex>

#include "cublas_loader.h"
#include "kernel_util.h"

namespace pgcuda {
namespace {

constexpr int kAttnThreads = 128;
constexpr int kPerThread = 16;     // head-dim elements a thread holds
constexpr int kTileFloats = 4096;  // floats per shared tile (16 KiB)

template <int DMAX>
struct AttnGeom {
  static constexpr int TPR = DMAX / kPerThread;          // threads per row
  static constexpr int ROWS = kAttnThreads / TPR;        // rows per block
  static constexpr int TILE = kTileFloats / DMAX;        // staged rows per tile
};

struct AttnArgs {
  const void* q;
  const void* k;
  const void* v;
  const uint8_t* mask;  // null: none
  int64_t mask_b, mask_h;  // strides of the mask's batch and head (0: broadcast)
  int B, H, Sq, Sk, D;
  float scale;
  bool causal;
};

// Sum over the TPR threads of one row (they are adjacent lanes of a warp).
template <int TPR>
__device__ __forceinline__ float group_sum(float x) {
#pragma unroll
  for (int o = TPR / 2; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

__device__ __forceinline__ bool attn_allowed(const AttnArgs& a, int b, int h, int i, int j) {
  if (a.causal && j > i) return false;
  if (a.mask != nullptr) {
    return a.mask[b * a.mask_b + h * a.mask_h + static_cast<int64_t>(i) * a.Sk + j] != 0;
  }
  return true;
}

// Stages rows [r0, r0 + TILE) of two [S, D] matrices into shared tiles
// (zeros past S or D).
template <typename T, int DMAX>
__device__ void stage(float* s1, float* s2, const T* g1, const T* g2, int r0, int S, int D) {
  constexpr int TILE = AttnGeom<DMAX>::TILE;
  for (int idx = threadIdx.x; idx < TILE * DMAX; idx += kAttnThreads) {
    const int r = idx / DMAX, d = idx % DMAX;
    const bool in = r0 + r < S && d < D;
    const int64_t off = static_cast<int64_t>(r0 + r) * D + d;
    s1[idx] = in ? to_compute(g1[off]) : 0.f;
    s2[idx] = in ? to_compute(g2[off]) : 0.f;
  }
}

template <typename T, int DMAX>
__global__ void __launch_bounds__(kAttnThreads)
    attn_forward_kernel(AttnArgs a, T* out, float* lse) {
  using G = AttnGeom<DMAX>;
  __shared__ float ks[G::TILE * DMAX], vs[G::TILE * DMAX];
  const int tiles = (a.Sq + G::ROWS - 1) / G::ROWS;
  const int bh = blockIdx.x / tiles, tile = blockIdx.x % tiles;
  const int b = bh / a.H, h = bh % a.H;
  const int row = threadIdx.x / G::TPR, part = threadIdx.x % G::TPR;
  const int i = tile * G::ROWS + row;
  const bool live = i < a.Sq;
  const int64_t base_q = static_cast<int64_t>(bh) * a.Sq * a.D;
  const int64_t base_k = static_cast<int64_t>(bh) * a.Sk * a.D;
  const T* q = static_cast<const T*>(a.q) + base_q;
  const T* k = static_cast<const T*>(a.k) + base_k;
  const T* v = static_cast<const T*>(a.v) + base_k;
  float qr[kPerThread], acc[kPerThread];
#pragma unroll
  for (int e = 0; e < kPerThread; ++e) {
    const int d = e * G::TPR + part;
    qr[e] = live && d < a.D ? to_compute(q[static_cast<int64_t>(i) * a.D + d]) * a.scale : 0.f;
    acc[e] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  int kend = a.Sk;
  if (a.causal) kend = min(a.Sk, tile * G::ROWS + G::ROWS);
  for (int j0 = 0; j0 < kend; j0 += G::TILE) {
    __syncthreads();
    stage<T, DMAX>(ks, vs, k, v, j0, a.Sk, a.D);
    __syncthreads();
    const int jn = min(G::TILE, kend - j0);
    for (int jj = 0; jj < jn; ++jj) {
      const float* kr = ks + jj * DMAX;
      float s = 0.f;
#pragma unroll
      for (int e = 0; e < kPerThread; ++e) s += qr[e] * kr[e * G::TPR + part];
      s = group_sum<G::TPR>(s);
      if (live && attn_allowed(a, b, h, i, j0 + jj)) {
        if (s > m) {
          const float corr = __expf(m - s);
          l *= corr;
#pragma unroll
          for (int e = 0; e < kPerThread; ++e) acc[e] *= corr;
          m = s;
        }
        const float p = __expf(s - m);
        l += p;
        const float* vr = vs + jj * DMAX;
#pragma unroll
        for (int e = 0; e < kPerThread; ++e) acc[e] += p * vr[e * G::TPR + part];
      }
    }
  }
  if (!live) return;
  const float inv = l > 0.f ? 1.f / l : 0.f;
  T* o = out + base_q + static_cast<int64_t>(i) * a.D;
#pragma unroll
  for (int e = 0; e < kPerThread; ++e) {
    const int d = e * G::TPR + part;
    if (d < a.D) o[d] = from_compute<T>(acc[e] * inv);
  }
  if (part == 0) lse[static_cast<int64_t>(bh) * a.Sq + i] = l > 0.f ? m + logf(l) : INFINITY;
}

// dQ = scale * sum_j P_ij (dO_i . V_j - D_i) K_j, with D_i = dO_i . O_i
// (written to `delta` for the dK/dV kernel).
template <typename T, int DMAX>
__global__ void __launch_bounds__(kAttnThreads)
    attn_grad_q_kernel(AttnArgs a, const T* out, const float* lse, const T* dout, T* dq,
                       float* delta) {
  using G = AttnGeom<DMAX>;
  __shared__ float ks[G::TILE * DMAX], vs[G::TILE * DMAX];
  const int tiles = (a.Sq + G::ROWS - 1) / G::ROWS;
  const int bh = blockIdx.x / tiles, tile = blockIdx.x % tiles;
  const int b = bh / a.H, h = bh % a.H;
  const int row = threadIdx.x / G::TPR, part = threadIdx.x % G::TPR;
  const int i = tile * G::ROWS + row;
  const bool live = i < a.Sq;
  const int64_t base_q = static_cast<int64_t>(bh) * a.Sq * a.D;
  const int64_t base_k = static_cast<int64_t>(bh) * a.Sk * a.D;
  const T* q = static_cast<const T*>(a.q) + base_q;
  const T* k = static_cast<const T*>(a.k) + base_k;
  const T* v = static_cast<const T*>(a.v) + base_k;
  float qr[kPerThread], dor[kPerThread], acc[kPerThread];
  float di = 0.f;
#pragma unroll
  for (int e = 0; e < kPerThread; ++e) {
    const int d = e * G::TPR + part;
    const bool in = live && d < a.D;
    const int64_t off = base_q + static_cast<int64_t>(i) * a.D + d;
    qr[e] = in ? to_compute(q[static_cast<int64_t>(i) * a.D + d]) * a.scale : 0.f;
    dor[e] = in ? to_compute(dout[off]) : 0.f;
    di += in ? dor[e] * to_compute(out[off]) : 0.f;
    acc[e] = 0.f;
  }
  di = group_sum<G::TPR>(di);
  const float li = live ? lse[static_cast<int64_t>(bh) * a.Sq + i] : INFINITY;
  int kend = a.Sk;
  if (a.causal) kend = min(a.Sk, tile * G::ROWS + G::ROWS);
  for (int j0 = 0; j0 < kend; j0 += G::TILE) {
    __syncthreads();
    stage<T, DMAX>(ks, vs, k, v, j0, a.Sk, a.D);
    __syncthreads();
    const int jn = min(G::TILE, kend - j0);
    for (int jj = 0; jj < jn; ++jj) {
      const float* kr = ks + jj * DMAX;
      const float* vr = vs + jj * DMAX;
      float s = 0.f, dp = 0.f;
#pragma unroll
      for (int e = 0; e < kPerThread; ++e) {
        s += qr[e] * kr[e * G::TPR + part];
        dp += dor[e] * vr[e * G::TPR + part];
      }
      s = group_sum<G::TPR>(s);
      dp = group_sum<G::TPR>(dp);
      if (live && attn_allowed(a, b, h, i, j0 + jj)) {
        const float ds = __expf(s - li) * (dp - di);
#pragma unroll
        for (int e = 0; e < kPerThread; ++e) acc[e] += ds * kr[e * G::TPR + part];
      }
    }
  }
  if (!live) return;
  T* o = dq + base_q + static_cast<int64_t>(i) * a.D;
#pragma unroll
  for (int e = 0; e < kPerThread; ++e) {
    const int d = e * G::TPR + part;
    if (d < a.D) o[d] = from_compute<T>(acc[e] * a.scale);
  }
  if (part == 0) delta[static_cast<int64_t>(bh) * a.Sq + i] = di;
}

// dV_j = sum_i P_ij dO_i, dK_j = scale * sum_i P_ij (dO_i . V_j - D_i) Q_i.
template <typename T, int DMAX>
__global__ void __launch_bounds__(kAttnThreads)
    attn_grad_kv_kernel(AttnArgs a, const float* lse, const T* dout, const float* delta, T* dk,
                        T* dv) {
  using G = AttnGeom<DMAX>;
  __shared__ float qs[G::TILE * DMAX], ds_[G::TILE * DMAX];
  __shared__ float ls[G::TILE], dl[G::TILE];
  const int tiles = (a.Sk + G::ROWS - 1) / G::ROWS;
  const int bh = blockIdx.x / tiles, tile = blockIdx.x % tiles;
  const int b = bh / a.H, h = bh % a.H;
  const int row = threadIdx.x / G::TPR, part = threadIdx.x % G::TPR;
  const int j = tile * G::ROWS + row;
  const bool live = j < a.Sk;
  const int64_t base_q = static_cast<int64_t>(bh) * a.Sq * a.D;
  const int64_t base_k = static_cast<int64_t>(bh) * a.Sk * a.D;
  const T* q = static_cast<const T*>(a.q) + base_q;
  const T* k = static_cast<const T*>(a.k) + base_k;
  const T* v = static_cast<const T*>(a.v) + base_k;
  const T* go = dout + base_q;
  float kr[kPerThread], vr[kPerThread], dka[kPerThread], dva[kPerThread];
#pragma unroll
  for (int e = 0; e < kPerThread; ++e) {
    const int d = e * G::TPR + part;
    const bool in = live && d < a.D;
    const int64_t off = static_cast<int64_t>(j) * a.D + d;
    kr[e] = in ? to_compute(k[off]) * a.scale : 0.f;
    vr[e] = in ? to_compute(v[off]) : 0.f;
    dka[e] = dva[e] = 0.f;
  }
  const int istart = a.causal ? tile * G::ROWS : 0;
  for (int i0 = istart; i0 < a.Sq; i0 += G::TILE) {
    __syncthreads();
    stage<T, DMAX>(qs, ds_, q, go, i0, a.Sq, a.D);
    for (int r = threadIdx.x; r < G::TILE; r += kAttnThreads) {
      const bool in = i0 + r < a.Sq;
      ls[r] = in ? lse[static_cast<int64_t>(bh) * a.Sq + i0 + r] : INFINITY;
      dl[r] = in ? delta[static_cast<int64_t>(bh) * a.Sq + i0 + r] : 0.f;
    }
    __syncthreads();
    const int in_ = min(G::TILE, a.Sq - i0);
    for (int ii = 0; ii < in_; ++ii) {
      const float* qrow = qs + ii * DMAX;
      const float* drow = ds_ + ii * DMAX;
      float s = 0.f, dp = 0.f;
#pragma unroll
      for (int e = 0; e < kPerThread; ++e) {
        s += kr[e] * qrow[e * G::TPR + part];
        dp += vr[e] * drow[e * G::TPR + part];
      }
      s = group_sum<G::TPR>(s);
      dp = group_sum<G::TPR>(dp);
      if (live && attn_allowed(a, b, h, i0 + ii, j)) {
        const float p = __expf(s - ls[ii]);
        const float dsv = p * (dp - dl[ii]);
#pragma unroll
        for (int e = 0; e < kPerThread; ++e) {
          dva[e] += p * drow[e * G::TPR + part];
          dka[e] += dsv * qrow[e * G::TPR + part];
        }
      }
    }
  }
  if (!live) return;
  const int64_t off = base_k + static_cast<int64_t>(j) * a.D;
#pragma unroll
  for (int e = 0; e < kPerThread; ++e) {
    const int d = e * G::TPR + part;
    if (d < a.D) {
      dk[off + d] = from_compute<T>(dka[e] * a.scale);
      dv[off + d] = from_compute<T>(dva[e]);
    }
  }
}

// ---------------------------------------------------------------------------
// The GEMM path: row kernels between cuBLAS products. A score row r of the
// batch (r = bh * Sq + i) lies at r * ld in the scratch; one warp owns a
// row, its lanes take the columns j = lane, lane + 32, ...

constexpr int kRowThreads = 128;
constexpr int kRowsPerBlock = kRowThreads / 32;

// The scratch bound (MiB) of the GEMM path, unless
// PLUGGABLE_CUDA_ATTENTION_SCRATCH_MB says otherwise.
constexpr int64_t kAttnScratchMiB = 256;

// The warp's first row and the stride of the grid over rows.
__device__ __forceinline__ int64_t first_row() {
  return static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
}
__device__ __forceinline__ int64_t row_step() {
  return static_cast<int64_t>(gridDim.x) * kRowsPerBlock;
}

// Row r's head (b, h), query i and causal end (keys j < jend may be seen).
struct AttnRow {
  int b, h, i, jend;
};
__device__ __forceinline__ AttnRow attn_row(const AttnArgs& a, int64_t r) {
  const int64_t bh = r / a.Sq;
  const int i = static_cast<int>(r - bh * a.Sq);
  return AttnRow{static_cast<int>(bh / a.H), static_cast<int>(bh % a.H), i,
                 a.causal ? min(a.Sk, i + 1) : a.Sk};
}

// Whether the mask allows key j for the row, causal aside (the row kernels
// stop at the causal end instead).
__device__ __forceinline__ bool attn_mask_allows(const AttnArgs& a, const AttnRow& w, int j) {
  return a.mask == nullptr ||
         a.mask[w.b * a.mask_b + w.h * a.mask_h + static_cast<int64_t>(w.i) * a.Sk + j] != 0;
}

// Forward: lse and P = softmax(S) per row (the allowed keys; zeros
// elsewhere, and the whole row for a row with no allowed key, whose lse is
// +inf), as attn_forward_kernel computes them: m the row's max,
// l = sum exp(s - m), lse = m + log l.
template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    attn_softmax_kernel(AttnArgs a, const float* __restrict__ s, T* __restrict__ p,
                        float* __restrict__ lse, int64_t ld, int64_t rows) {
  const int lane = threadIdx.x & 31;
  for (int64_t r = first_row(); r < rows; r += row_step()) {
    const AttnRow w = attn_row(a, r);
    const float* sr = s + r * ld;
    T* pr = p + r * ld;
    float m = -INFINITY, l = 0.f;
    for (int j = lane; j < w.jend; j += 32) {
      if (!attn_mask_allows(a, w, j)) continue;
      const float x = sr[j];
      if (x > m) {
        l = l * __expf(m - x) + 1.f;
        m = x;
      } else {
        l += __expf(x - m);
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
      const float l2 = __shfl_xor_sync(0xffffffffu, l, o);
      const float mn = fmaxf(m, m2);
      // A lane that saw no allowed key (l == 0, m == -inf) adds nothing.
      l = (l > 0.f ? l * __expf(m - mn) : 0.f) + (l2 > 0.f ? l2 * __expf(m2 - mn) : 0.f);
      m = mn;
    }
    const bool any = l > 0.f;
    const float inv = any ? 1.f / l : 0.f;
    for (int j = lane; j < a.Sk; j += 32) {
      float pv = 0.f;
      if (any && j < w.jend && attn_mask_allows(a, w, j)) pv = __expf(sr[j] - m) * inv;
      pr[j] = from_compute<T>(pv);
    }
    if (lane == 0) lse[r] = any ? m + logf(l) : INFINITY;
  }
}

// Backward: P = exp(S - lse) on the allowed keys, zeros elsewhere.
template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    attn_grad_probs_kernel(AttnArgs a, const float* __restrict__ s,
                           const float* __restrict__ lse, T* __restrict__ p, int64_t ld,
                           int64_t rows) {
  const int lane = threadIdx.x & 31;
  for (int64_t r = first_row(); r < rows; r += row_step()) {
    const AttnRow w = attn_row(a, r);
    const float li = lse[r];
    const float* sr = s + r * ld;
    T* pr = p + r * ld;
    for (int j = lane; j < a.Sk; j += 32) {
      float pv = 0.f;
      if (j < w.jend && attn_mask_allows(a, w, j)) pv = __expf(sr[j] - li);
      pr[j] = from_compute<T>(pv);
    }
  }
}

// Backward: dS = P * (dP - D_r) in place over P, with D_r = dO_r . O_r (in
// float, as attn_grad_q_kernel computes it). P is zero where a key is not
// allowed, so is dS.
template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    attn_grad_ds_kernel(AttnArgs a, const T* __restrict__ out, const T* __restrict__ dout,
                        const float* __restrict__ dp, T* __restrict__ pds, int64_t ld,
                        int64_t rows) {
  const int lane = threadIdx.x & 31;
  for (int64_t r = first_row(); r < rows; r += row_step()) {
    const T* o = out + r * a.D;
    const T* g = dout + r * a.D;
    float di = 0.f;
    for (int d = lane; d < a.D; d += 32) di += to_compute(g[d]) * to_compute(o[d]);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) di += __shfl_xor_sync(0xffffffffu, di, off);
    const float* dpr = dp + r * ld;
    T* row = pds + r * ld;
    for (int j = lane; j < a.Sk; j += 32) {
      row[j] = from_compute<T>(to_compute(row[j]) * (dpr[j] - di));
    }
  }
}

// The GEMM path's bound on its scratch in bytes: kAttnScratchMiB, or
// PLUGGABLE_CUDA_ATTENTION_SCRATCH_MB (a whole number of MiB; 0: the path
// is off) where that is set to one. Read on every call (a getenv), so that a
// process can switch paths between calls.
int64_t attn_scratch_limit() {
  const char* v = getenv("PLUGGABLE_CUDA_ATTENTION_SCRATCH_MB");
  int64_t mib = kAttnScratchMiB;
  if (v != nullptr && *v != '\0') {
    char* end = nullptr;
    const long long n = strtoll(v, &end, 10);
    const int64_t most = int64_t(1) << 40;  // keeps mib << 20 in range
    if (end != nullptr && *end == '\0' && n >= 0) mib = n < most ? n : most;
  }
  return mib << 20;
}

// cuBLAS with cublasGemmStridedBatchedEx, or null (loaded once; a missing
// library only means the memory-efficient kernels run).
const BlasApi* attn_blas() {
  static const BlasApi* api = [] {
    TF_Status* st = TF_NewStatus();
    const BlasApi* b = load_blas(st);
    TF_DeleteStatus(st);
    return b != nullptr && b->gemm_strided_batched_ex != nullptr ? b : nullptr;
  }();
  return api;
}

// The scratch of the GEMM path: float32 scores [rows, ld] at `s`, the
// input-dtype probabilities [rows, ld] at `p`.
struct AttnScratch {
  TensorPtr t;
  float* s = nullptr;
  void* p = nullptr;
  int64_t ld = 0, rows = 0;
};

// Allocates the scratch where the GEMM path applies (see the file comment);
// false (recording nothing) where the memory-efficient kernels should run.
bool attn_gemm_scratch(OpCall& c, const AttnArgs& a, size_t elem, AttnScratch* out) {
  if (a.B <= 0 || a.H <= 0 || a.Sq <= 0 || a.Sk <= 0 || a.D <= 0) return false;
  const int64_t limit = attn_scratch_limit();
  if (limit == 0 || attn_blas() == nullptr) return false;
  const int64_t bh = static_cast<int64_t>(a.B) * a.H;
  if (bh > INT_MAX) return false;
  const int64_t ld = (static_cast<int64_t>(a.Sk) + 7) / 8 * 8;
  const int64_t rows = bh * a.Sq;  // <= 2^31 * 8 (attn_setup's grid bound)
  const int64_t per_row = ld * static_cast<int64_t>(4 + elem);
  if (rows > (limit - 256) / per_row) return false;  // no overflow: rows * per_row <= limit
  const int64_t s_bytes = (rows * ld * 4 + 255) / 256 * 256;
  const int64_t bytes = s_bytes + rows * ld * static_cast<int64_t>(elem);
  int64_t dims[1] = {bytes};
  TF_Status* st = TF_NewStatus();
  TF_Tensor* t = TF_AllocateTemp(c.ctx(), TF_INT8, dims, 1, nullptr, st);
  const bool ok = TF_GetCode(st) == TF_OK && t != nullptr;
  TF_DeleteStatus(st);
  if (!ok) {  // out of device memory: the kernels that need (almost) none
    if (t != nullptr) TF_DeleteTensor(t);
    return false;
  }
  out->t.reset(t);
  char* base = static_cast<char*>(TF_TensorData(t));
  out->s = reinterpret_cast<float*>(base);
  out->p = base + s_bytes;
  out->ld = ld;
  out->rows = rows;
  return true;
}

// One strided-batched product over the B*H heads, in cuBLAS's column-major
// terms: C_z (m x n, leading dimension ldc) = alpha * op(A_z) op(B_z), with
// z advancing A, B and C by sa, sb and sc elements.
struct AttnGemm {
  const char* what;  // names the product in errors
  int transa, transb, m, n, k;
  float alpha;
  const void* A;
  int lda;
  long long sa;
  const void* B;
  int ldb;
  long long sb;
  void* C;
  cudaDataType ctype;
  int ldc;
  long long sc;
};

// The products and row kernels of one call share this: the input type, the
// compute type and the batch.
struct AttnBlas {
  const BlasApi* api;
  cudaDataType type;  // of Q, K, V, dO and P / dS
  int compute;        // CUBLAS_COMPUTE_32F, or _FAST_TF32 for float32 with TF32 allowed
  int batch;          // B * H
};

bool attn_gemm(OpCall& c, const char* op, const AttnBlas& blas, const AttnGemm& g) {
  const float beta = 0.f;
  BlasStatus r;
  {
    CudaStream* s = c.cuda_stream();
    std::lock_guard<std::mutex> lock(s->mu);
    void* h = stream_blas_handle(c, blas.api);
    if (h == nullptr) return false;
    r = blas.api->gemm_strided_batched_ex(h, g.transa, g.transb, g.m, g.n, g.k, &g.alpha, g.A,
                                          blas.type, g.lda, g.sa, g.B, blas.type, g.ldb, g.sb,
                                          &beta, g.C, g.ctype, g.ldc, g.sc, blas.batch,
                                          blas.compute, kBlasGemmDefault);
  }
  if (r != kBlasSuccess) {
    return c.fail(TF_INTERNAL, "%s: cuBLAS product %s (m=%d, n=%d, k=%d, batch=%d) failed: %s",
                  op, g.what, g.m, g.n, g.k, blas.batch, blas_status_text(blas.api, r).c_str());
  }
  return true;
}

// The row kernels' grid: a warp per row, grid-striding past 32 blocks per
// multiprocessor.
unsigned attn_row_grid(OpCall& c, int64_t rows) {
  int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  const int64_t cap = static_cast<int64_t>(c.sm_count()) * 32;
  if (blocks > cap) blocks = cap;
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks);
}

// The products, row-major in the op's terms (each head's matrices are
// contiguous: Q, O, dO, dQ [Sq, D]; K, V, dK, dV [Sk, D]; S, P, dP, dS
// [Sq, Sk] at row stride ld) and column-major in cuBLAS's. A row-major
// [r, c] matrix with row stride L is the column-major [c, r] matrix with
// leading dimension L, its transpose; so the row-major X = Y Z is computed
// as the column-major X^T = Z^T Y^T, and each operand is passed as it lies
// in memory, transposed (OP_T) where the product needs the other way round.
// Per head, strides in elements (int64: Sq * ld reaches 2^40):
//
//   S  = scale Q K^T  [Sq, Sk] (gemm_scores): S^T (Sk x Sq, ldc ld) = (K^T)^T Q^T
//        A = K  (D x Sk in memory, lda D, OP_T -> Sk x D), sa = Sk * D
//        B = Q  (D x Sq in memory, ldb D, OP_N),           sb = Sq * D
//        m = Sk, n = Sq, k = D,                            sc = Sq * ld
//   dP = dO V^T  [Sq, Sk]: as S with A = V, B = dO, alpha 1.
//   O  = P V  [Sq, D] (gemm_probs): O^T (D x Sq, ldc D) = V^T P^T
//        A = V  (D x Sk in memory, lda D, OP_N),           sa = Sk * D
//        B = P  (Sk x Sq in memory, ldb ld, OP_N),         sb = Sq * ld
//        m = D, n = Sq, k = Sk,                            sc = Sq * D
//   dQ = scale dS K  [Sq, D]: as O with A = K, B = dS.
//   dV = P^T dO  [Sk, D] (gemm_probs, pt): dV^T (D x Sk, ldc D) = dO^T P
//        A = dO (D x Sq in memory, lda D, OP_N),           sa = Sq * D
//        B = P  (Sk x Sq in memory, ldb ld, OP_T -> Sq x Sk), sb = Sq * ld
//        m = D, n = Sk, k = Sq,                            sc = Sk * D
//   dK = scale dS^T Q  [Sk, D]: as dV with A = Q, B = dS.
//
// Every m, n, k and leading dimension is at most 2^20 + 8 (attn_setup's
// limits), so fits cuBLAS's int.
AttnGemm gemm_scores(const char* what, const AttnArgs& a, const void* kv, const void* qd,
                     float alpha, float* s, int64_t ld) {
  return AttnGemm{what, kBlasOpT, kBlasOpN, a.Sk, a.Sq, a.D, alpha,
                  kv, a.D, static_cast<long long>(a.Sk) * a.D,
                  qd, a.D, static_cast<long long>(a.Sq) * a.D,
                  s, CUDA_R_32F, static_cast<int>(ld), static_cast<long long>(a.Sq) * ld};
}

// X = alpha P Y (Y [Sk, D], X [Sq, D]: O, dQ) or, with `pt`, X = alpha P^T Y
// (Y [Sq, D], X [Sk, D]: dV, dK), P [Sq, Sk] at row stride ld.
AttnGemm gemm_probs(const char* what, const AttnArgs& a, bool pt, const void* y, const void* p,
                    int64_t ld, float alpha, void* x, cudaDataType type) {
  const int rows_x = pt ? a.Sk : a.Sq, rows_y = pt ? a.Sq : a.Sk;
  return AttnGemm{what, kBlasOpN, pt ? kBlasOpT : kBlasOpN, a.D, rows_x, rows_y, alpha,
                  y, a.D, static_cast<long long>(rows_y) * a.D,
                  p, static_cast<int>(ld), static_cast<long long>(a.Sq) * ld,
                  x, type, a.D, static_cast<long long>(rows_x) * a.D};
}

template <typename T> struct BlasType;
template <> struct BlasType<float> { static constexpr cudaDataType value = CUDA_R_32F; };
template <> struct BlasType<__half> { static constexpr cudaDataType value = CUDA_R_16F; };
template <> struct BlasType<__nv_bfloat16> {
  static constexpr cudaDataType value = CUDA_R_16BF;
};

template <typename T>
AttnBlas attn_blas_for(const AttnArgs& a, bool tf32) {
  const bool f32 = std::is_same<T, float>::value;
  return AttnBlas{attn_blas(), BlasType<T>::value,
                  f32 && tf32 ? kBlasCompute32FFastTF32 : kBlasCompute32F, a.B * a.H};
}

// Forward on the GEMM path: S, softmax (lse, P), O = P V.
template <typename T>
bool attn_forward_gemm(OpCall& c, const char* op, const AttnArgs& a, bool tf32,
                       AttnScratch& sc, T* out, float* lse) {
  const AttnBlas blas = attn_blas_for<T>(a, tf32);
  T* p = static_cast<T*>(sc.p);
  return attn_gemm(c, op, blas, gemm_scores("S = scale Q K^T", a, a.k, a.q, a.scale, sc.s,
                                            sc.ld)) &&
         c.launch(op, attn_softmax_kernel<T>, dim3(attn_row_grid(c, sc.rows)),
                  dim3(kRowThreads), a, static_cast<const float*>(sc.s), p, lse, sc.ld,
                  sc.rows) &&
         attn_gemm(c, op, blas,
                   gemm_probs("O = P V", a, false, a.v, p, sc.ld, 1.f, out, blas.type));
}

// Backward on the GEMM path (the file comment gives the order).
template <typename T>
bool attn_grad_gemm(OpCall& c, const char* op, const AttnArgs& a, bool tf32, AttnScratch& sc,
                    const T* out, const float* lse, const T* dout, T* dq, T* dk, T* dv) {
  const AttnBlas blas = attn_blas_for<T>(a, tf32);
  T* p = static_cast<T*>(sc.p);
  const unsigned grid = attn_row_grid(c, sc.rows);
  return attn_gemm(c, op, blas, gemm_scores("S = scale Q K^T", a, a.k, a.q, a.scale, sc.s,
                                            sc.ld)) &&
         c.launch(op, attn_grad_probs_kernel<T>, dim3(grid), dim3(kRowThreads), a,
                  static_cast<const float*>(sc.s), lse, p, sc.ld, sc.rows) &&
         attn_gemm(c, op, blas, gemm_probs("dV = P^T dO", a, true, dout, p, sc.ld, 1.f, dv,
                                           blas.type)) &&
         attn_gemm(c, op, blas, gemm_scores("dP = dO V^T", a, a.v, dout, 1.f, sc.s, sc.ld)) &&
         c.launch(op, attn_grad_ds_kernel<T>, dim3(grid), dim3(kRowThreads), a, out, dout,
                  static_cast<const float*>(sc.s), p, sc.ld, sc.rows) &&
         attn_gemm(c, op, blas, gemm_probs("dQ = scale dS K", a, false, a.k, p, sc.ld, a.scale,
                                           dq, blas.type)) &&
         attn_gemm(c, op, blas, gemm_probs("dK = scale dS^T Q", a, true, a.q, p, sc.ld, a.scale,
                                           dk, blas.type));
}

struct AttnState {
  bool causal;
  float scale;
  int64_t num_masks;
  bool tf32;  // _allow_tf32: float32 products of the GEMM path may use TF32
};

void* attn_create(TF_OpKernelConstruction* ctx) {
  AttrReader attrs(ctx, "ScaledDotProductAttention");
  AttnState st{attrs.get_bool("causal", false), attrs.get_float("scale", 1.f),
               attrs.get_int("num_masks", 0), read_bool_attr(ctx, "_allow_tf32", false)};
  if (!attrs.ok()) return nullptr;
  return new AttnState(st);
}

void attn_delete(void* p) { delete static_cast<AttnState*>(p); }

// Reads and checks the inputs shared by both ops; fills `a`. `mask_at` is the
// input index of the mask when there is one.
bool attn_setup(OpCall& c, const char* op, const AttnState& st, TensorPtr* q, TensorPtr* k,
                TensorPtr* v, TensorPtr* mask, AttnArgs* a, int* dmax) {
  *q = c.input(0);
  *k = c.input(1);
  *v = c.input(2);
  if (!*q || !*k || !*v) return false;
  if (st.num_masks > 0) {
    *mask = c.input(3);
    if (!*mask) return false;
  }
  const Shape sq = Shape::of(q->get()), sk = Shape::of(k->get()), sv = Shape::of(v->get());
  char b1[128], b2[128], b3[128];
  if (sq.rank != 4 || sk.rank != 4 || sv.rank != 4 || sq.dims[0] != sk.dims[0] ||
      sq.dims[1] != sk.dims[1] || sk.dims[0] != sv.dims[0] || sk.dims[1] != sv.dims[1] ||
      sq.dims[3] != sk.dims[3] || sk.dims[3] != sv.dims[3] || sk.dims[2] != sv.dims[2]) {
    return c.fail(TF_INVALID_ARGUMENT, "%s: query %s, key %s and value %s must be [batch, "
                  "heads, seq, head_dim] with matching batch, heads and head_dim", op,
                  shape_str(sq, b1, sizeof(b1)), shape_str(sk, b2, sizeof(b2)),
                  shape_str(sv, b3, sizeof(b3)));
  }
  const int64_t D = sq.dims[3];
  if (D > 256 || sq.dims[2] > (1 << 20) || sk.dims[2] > (1 << 20) ||
      sq.dims[0] * sq.dims[1] * ((sq.dims[2] + 7) / 8 + (sk.dims[2] + 7) / 8) > INT32_MAX) {
    return c.fail(TF_INVALID_ARGUMENT, "%s: query %s and key %s exceed this kernel's limits "
                  "(head_dim <= 256, sequences <= 1048576, grid below 2^31 blocks)", op,
                  shape_str(sq, b1, sizeof(b1)), shape_str(sk, b2, sizeof(b2)));
  }
  *dmax = D <= 32 ? 32 : D <= 64 ? 64 : D <= 128 ? 128 : 256;
  a->q = TF_TensorData(q->get());
  a->k = TF_TensorData(k->get());
  a->v = TF_TensorData(v->get());
  a->mask = nullptr;
  a->mask_b = a->mask_h = 0;
  a->B = static_cast<int>(sq.dims[0]);
  a->H = static_cast<int>(sq.dims[1]);
  a->Sq = static_cast<int>(sq.dims[2]);
  a->Sk = static_cast<int>(sk.dims[2]);
  a->D = static_cast<int>(D);
  a->scale = st.scale;
  a->causal = st.causal;
  if (*mask) {
    const Shape sm = Shape::of(mask->get());
    const bool two = sm.rank == 2 && sm.dims[0] == a->Sq && sm.dims[1] == a->Sk;
    const bool four = sm.rank == 4 && sm.dims[2] == a->Sq && sm.dims[3] == a->Sk &&
                      (sm.dims[0] == 1 || sm.dims[0] == a->B) &&
                      (sm.dims[1] == 1 || sm.dims[1] == a->H);
    if (TF_TensorType(mask->get()) != TF_BOOL || !(two || four)) {
      return c.fail(TF_INVALID_ARGUMENT, "%s: mask must be bool of shape [%d,%d] or "
                    "[%d|1,%d|1,%d,%d], got %s of shape %s", op, a->Sq, a->Sk, a->B, a->H,
                    a->Sq, a->Sk, dtype_name(TF_TensorType(mask->get())),
                    shape_str(sm, b1, sizeof(b1)));
    }
    const int64_t plane = static_cast<int64_t>(a->Sq) * a->Sk;
    if (four) {
      a->mask_h = sm.dims[1] == 1 ? 0 : plane;
      a->mask_b = sm.dims[0] == 1 ? 0 : plane * sm.dims[1];
    }
    a->mask = static_cast<const uint8_t*>(TF_TensorData(mask->get()));
  }
  return true;
}

template <typename F>
bool dispatch_dmax(int dmax, F&& f) {
  switch (dmax) {
    case 32: f(std::integral_constant<int, 32>{}); return true;
    case 64: f(std::integral_constant<int, 64>{}); return true;
    case 128: f(std::integral_constant<int, 128>{}); return true;
    case 256: f(std::integral_constant<int, 256>{}); return true;
    default: return false;
  }
}

template <typename F>
bool dispatch_half_float(TF_DataType dt, F&& f) {
  switch (dt) {
    case TF_HALF: f(Tag<__half>{}); return true;
    case TF_BFLOAT16: f(Tag<__nv_bfloat16>{}); return true;
    case TF_FLOAT: f(Tag<float>{}); return true;
    default: return false;
  }
}

void attn_compute(void* kernel, TF_OpKernelContext* ctx) {
  const char* op = "ScaledDotProductAttention";
  const AttnState& st = *static_cast<const AttnState*>(kernel);
  OpCall c(ctx, OpCall::kMayDefer);
  if (!c.ok()) return;
  TensorPtr q, k, v, mask;
  AttnArgs a;
  int dmax = 0;
  if (!attn_setup(c, op, st, &q, &k, &v, &mask, &a, &dmax)) return;
  const Shape sq = Shape::of(q.get());
  Shape sl;
  sl.rank = 3;
  for (int i = 0; i < 3; ++i) sl.dims[i] = sq.dims[i];
  const TF_DataType dt = TF_TensorType(q.get());
  TensorPtr out = c.output(0, dt, sq);
  if (!out) return;
  TensorPtr lse = c.output(1, TF_FLOAT, sl);
  if (!lse || sq.num_elements() == 0) return;
  AttnScratch sc;
  const bool gemm = attn_gemm_scratch(c, a, TF_DataTypeSize(dt), &sc);
  const bool handled = dispatch_half_float(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (gemm) {
      attn_forward_gemm<T>(c, op, a, st.tf32, sc, static_cast<T*>(TF_TensorData(out.get())),
                           static_cast<float*>(TF_TensorData(lse.get())));
      return;
    }
    dispatch_dmax(dmax, [&](auto dm) {
      constexpr int DM = decltype(dm)::value;
      const unsigned grid = static_cast<unsigned>(
          static_cast<int64_t>(a.B) * a.H * ((a.Sq + AttnGeom<DM>::ROWS - 1) / AttnGeom<DM>::ROWS));
      c.launch(op, attn_forward_kernel<T, DM>, dim3(grid), dim3(kAttnThreads), a,
               static_cast<T*>(TF_TensorData(out.get())),
               static_cast<float*>(TF_TensorData(lse.get())));
    });
  });
  if (!handled) c.fail(TF_UNIMPLEMENTED, "%s: dtype %s on GPU", op, dtype_name(dt));
}

void attn_grad_compute(void* kernel, TF_OpKernelContext* ctx) {
  const char* op = "ScaledDotProductAttentionGrad";
  const AttnState& st = *static_cast<const AttnState*>(kernel);
  // The scratch (`delta`, or the GEMM path's) is used by work launched here,
  // in order: no deferral.
  OpCall c(ctx);
  if (!c.ok()) return;
  TensorPtr q, k, v, mask;
  AttnArgs a;
  int dmax = 0;
  if (!attn_setup(c, op, st, &q, &k, &v, &mask, &a, &dmax)) return;
  const int n = static_cast<int>(st.num_masks);
  TensorPtr out = c.input(3 + n), lse = c.input(4 + n), dout = c.input(5 + n);
  if (!out || !lse || !dout) return;
  const Shape sq = Shape::of(q.get()), sk = Shape::of(k.get());
  char b1[128];
  if (TF_TensorType(lse.get()) != TF_FLOAT || Shape::of(lse.get()).rank != 3 ||
      Shape::of(out.get()).num_elements() != sq.num_elements() ||
      Shape::of(dout.get()).num_elements() != sq.num_elements()) {
    c.fail(TF_INVALID_ARGUMENT, "%s: output and grad must match query %s and logsumexp be "
           "float [batch, heads, q_len]", op, shape_str(sq, b1, sizeof(b1)));
    return;
  }
  const TF_DataType dt = TF_TensorType(q.get());
  TensorPtr dq = c.output(0, dt, sq);
  if (!dq) return;
  TensorPtr dk = c.output(1, dt, sk);
  if (!dk) return;
  TensorPtr dv = c.output(2, dt, sk);
  if (!dv || sk.num_elements() == 0 && sq.num_elements() == 0) return;
  AttnScratch sc;
  if (attn_gemm_scratch(c, a, TF_DataTypeSize(dt), &sc)) {
    const bool handled = dispatch_half_float(dt, [&](auto tag) {
      using T = typename decltype(tag)::type;
      attn_grad_gemm<T>(c, op, a, st.tf32, sc, static_cast<const T*>(TF_TensorData(out.get())),
                        static_cast<const float*>(TF_TensorData(lse.get())),
                        static_cast<const T*>(TF_TensorData(dout.get())),
                        static_cast<T*>(TF_TensorData(dq.get())),
                        static_cast<T*>(TF_TensorData(dk.get())),
                        static_cast<T*>(TF_TensorData(dv.get())));
    });
    if (!handled) c.fail(TF_UNIMPLEMENTED, "%s: dtype %s on GPU", op, dtype_name(dt));
    return;
  }
  TensorPtr delta = c.temp(TF_FLOAT, sq.dims[0] * sq.dims[1] * sq.dims[2] + 1);
  if (!delta) return;
  const bool handled = dispatch_half_float(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_dmax(dmax, [&](auto dm) {
      constexpr int DM = decltype(dm)::value;
      constexpr int R = AttnGeom<DM>::ROWS;
      const int64_t bh = static_cast<int64_t>(a.B) * a.H;
      const T* o = static_cast<const T*>(TF_TensorData(out.get()));
      const T* g = static_cast<const T*>(TF_TensorData(dout.get()));
      const float* l = static_cast<const float*>(TF_TensorData(lse.get()));
      float* dl = static_cast<float*>(TF_TensorData(delta.get()));
      if (a.Sq > 0 && !c.launch(op, attn_grad_q_kernel<T, DM>,
                                dim3(static_cast<unsigned>(bh * ((a.Sq + R - 1) / R))),
                                dim3(kAttnThreads), a, o, l, g,
                                static_cast<T*>(TF_TensorData(dq.get())), dl)) {
        return;
      }
      if (a.Sk > 0) {
        c.launch(op, attn_grad_kv_kernel<T, DM>,
                 dim3(static_cast<unsigned>(bh * ((a.Sk + R - 1) / R))), dim3(kAttnThreads), a,
                 static_cast<const float*>(l), g, static_cast<const float*>(dl),
                 static_cast<T*>(TF_TensorData(dk.get())),
                 static_cast<T*>(TF_TensorData(dv.get())));
      }
    });
  });
  if (!handled) c.fail(TF_UNIMPLEMENTED, "%s: dtype %s on GPU", op, dtype_name(dt));
}

}  // namespace

void register_attention_kernels() {
  const TF_DataType types[] = {TF_HALF, TF_BFLOAT16, TF_FLOAT};
  for (TF_DataType t : types) {
    register_kernel("ScaledDotProductAttention", attn_create, attn_compute, attn_delete,
                    {{"T", t}, {"Tlse", TF_FLOAT}});
    register_kernel("ScaledDotProductAttentionGrad", attn_create, attn_grad_compute,
                    attn_delete, {{"T", t}, {"Tlse", TF_FLOAT}});
  }
}

}  // namespace pgcuda
