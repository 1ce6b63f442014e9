// ScaledDotProductAttention and ScaledDotProductAttentionGrad: memory-
// efficient attention that never stores the [q_len, k_len] score matrix.
//
// Layout (pluggable/ops/transformer_ops.py): query [B, H, Sq, D], key and
// value [B, H, Sk, D], an optional bool mask [Sq, Sk] or [B|1, H|1, Sq, Sk],
// causal = query i sees keys j <= i. Forward: each group of TPR threads owns
// one query row (its D values split across the group, element d = e * TPR +
// part), key/value tiles are staged in shared memory as float, and an online
// softmax keeps the running max, sum and output in registers; the row's
// logsumexp is saved (+inf for a row with no allowed key). Backward
// recomputes the probabilities from it: one kernel per query row computes
// rowsum(dO * O) and dQ, a second per key row accumulates dK and dV over
// query tiles. Arithmetic is float for every element type (fp16, bf16, fp32);
// no tensor cores yet.
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

struct AttnState {
  bool causal;
  float scale;
  int64_t num_masks;
};

void* attn_create(TF_OpKernelConstruction* ctx) {
  AttrReader attrs(ctx, "ScaledDotProductAttention");
  AttnState st{attrs.get_bool("causal", false), attrs.get_float("scale", 1.f),
               attrs.get_int("num_masks", 0)};
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
  const bool handled = dispatch_half_float(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
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
  OpCall c(ctx);  // the scratch `delta` is used by work launched here, in order
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
