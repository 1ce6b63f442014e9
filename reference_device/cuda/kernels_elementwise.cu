// Elementwise kernels: the broadcasting binary ops (AddV2, Sub, Mul, RealDiv,
// Maximum, Minimum), the unary ops (Neg, Abs, Exp, Log, Sqrt, Tanh, Sigmoid,
// Relu) and Cast.
//
// Binary ops have three paths: equal shapes (or one operand a single
// element), run as a flat grid-stride loop with 16-byte loads and stores when
// every pointer is 16-byte aligned; and general numpy broadcasting, where the
// shapes are first collapsed (size-1 output dims dropped, neighbouring dims
// with the same broadcast pattern merged) to at most kMaxBcastDims dims.
#include <cstring>
#include <limits>

#include "kernel_util.h"

namespace pgcuda {
namespace {

// ---------------------------------------------------------------------------
// Operations. `C` is the compute type (float for the 16-bit floats).

template <typename C>
__device__ __forceinline__ C wrap_add(C a, C b) {
  if constexpr (std::is_integral<C>::value) {
    using U = typename std::make_unsigned<C>::type;
    return static_cast<C>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}

struct AddOp {
  template <typename C> __device__ static C f(C a, C b) { return wrap_add(a, b); }
};
struct SubOp {
  template <typename C> __device__ static C f(C a, C b) {
    if constexpr (std::is_integral<C>::value) {
      using U = typename std::make_unsigned<C>::type;
      return static_cast<C>(static_cast<U>(a) - static_cast<U>(b));
    } else {
      return a - b;
    }
  }
};
struct MulOp {
  template <typename C> __device__ static C f(C a, C b) {
    if constexpr (std::is_integral<C>::value) {
      using U = typename std::make_unsigned<C>::type;
      return static_cast<C>(static_cast<U>(a) * static_cast<U>(b));
    } else {
      return a * b;
    }
  }
};
struct DivOp {
  template <typename C> __device__ static C f(C a, C b) {
    if constexpr (std::is_integral<C>::value) {
      // C semantics (truncation); x/0 gives 0 and MIN/-1 wraps, never traps.
      using U = typename std::make_unsigned<C>::type;
      if (b == 0) return 0;
      if (b == -1) return static_cast<C>(U(0) - static_cast<U>(a));
      return a / b;
    } else {
      return a / b;
    }
  }
};
// Maximum / Minimum propagate NaN like numpy.
struct MaxOp {
  template <typename C> __device__ static C f(C a, C b) {
    return (a > b || a != a) ? a : b;
  }
};
struct MinOp {
  template <typename C> __device__ static C f(C a, C b) {
    return (a < b || a != a) ? a : b;
  }
};

__device__ __forceinline__ float m_exp(float x) { return expf(x); }
__device__ __forceinline__ double m_exp(double x) { return exp(x); }
__device__ __forceinline__ float m_log(float x) { return logf(x); }
__device__ __forceinline__ double m_log(double x) { return log(x); }
__device__ __forceinline__ float m_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double m_sqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float m_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ double m_tanh(double x) { return tanh(x); }

struct NegOp {
  template <typename C> __device__ static C f(C x) {
    if constexpr (std::is_integral<C>::value) {
      using U = typename std::make_unsigned<C>::type;
      return static_cast<C>(U(0) - static_cast<U>(x));
    } else {
      return -x;
    }
  }
};
struct AbsOp {
  template <typename C> __device__ static C f(C x) {
    if constexpr (std::is_integral<C>::value) {
      return x < 0 ? NegOp::f(x) : x;
    } else {
      return x < C(0) ? -x : (x == C(0) ? C(0) : x);  // abs(-0) = +0
    }
  }
};
struct ExpOp { template <typename C> __device__ static C f(C x) { return m_exp(x); } };
struct LogOp { template <typename C> __device__ static C f(C x) { return m_log(x); } };
struct SqrtOp { template <typename C> __device__ static C f(C x) { return m_sqrt(x); } };
struct TanhOp { template <typename C> __device__ static C f(C x) { return m_tanh(x); } };
struct SigmoidOp {
  template <typename C> __device__ static C f(C x) {
    return C(1) / (C(1) + m_exp(-x));
  }
};
// Relu keeps NaN (like numpy's maximum(x, 0)).
struct ReluOp {
  template <typename C> __device__ static C f(C x) {
    return x > C(0) ? x : (x != x ? x : C(0));
  }
};

// ---------------------------------------------------------------------------
// Vector loads and stores of 16 bytes (V elements of T).

template <typename T, int V>
__device__ __forceinline__ void load16(const T* p, int64_t i, T (&v)[V]) {
  static_assert(sizeof(T) * V == 16, "16-byte vectors");
  const uint4 raw = __ldg(reinterpret_cast<const uint4*>(p) + i);
  memcpy(&v[0], &raw, 16);
}
template <typename T, int V>
__device__ __forceinline__ void store16(T* p, int64_t i, const T (&v)[V]) {
  uint4 raw;
  memcpy(&raw, &v[0], 16);
  reinterpret_cast<uint4*>(p)[i] = raw;
}

// Binary op over flat arrays. MODE 0: a[i] op b[i]; 1: a[0] op b[i];
// 2: a[i] op b[0]. VEC: all pointers 16-byte aligned.
template <typename T, typename Op, int MODE, bool VEC>
__global__ void binary_flat_kernel(const T* __restrict__ a, const T* __restrict__ b,
                                   T* __restrict__ out, int64_t n) {
  using C = compute_t<T>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  C sa = C(0), sb = C(0);
  if (MODE == 1) sa = to_compute(a[0]);
  if (MODE == 2) sb = to_compute(b[0]);
  int64_t start = tid;
  if (VEC) {
    constexpr int V = 16 / sizeof(T);
    const int64_t nvec = n / V;
    for (int64_t i = tid; i < nvec; i += stride) {
      T va[V], vb[V], vo[V];
      if (MODE != 1) load16(a, i, va);
      if (MODE != 2) load16(b, i, vb);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const C x = MODE == 1 ? sa : to_compute(va[j]);
        const C y = MODE == 2 ? sb : to_compute(vb[j]);
        vo[j] = from_compute<T>(Op::f(x, y));
      }
      store16(out, i, vo);
    }
    start = nvec * V + tid;
  }
  for (int64_t i = start; i < n; i += stride) {
    const C x = MODE == 1 ? sa : to_compute(a[i]);
    const C y = MODE == 2 ? sb : to_compute(b[i]);
    out[i] = from_compute<T>(Op::f(x, y));
  }
}

constexpr int kMaxBcastDims = TF_MAX_DIMS;  // every shape the core can make fits

// Collapsed broadcast geometry, right-aligned in arrays of kMaxBcastDims:
// dims[kMaxBcastDims - rank ..] are the output dims, sa/sb the element
// strides of a and b for each (0 where broadcast).
struct BcastParams {
  int rank;
  int64_t dims[kMaxBcastDims];
  int64_t sa[kMaxBcastDims];
  int64_t sb[kMaxBcastDims];
};

template <typename T, typename Op, typename I>
__global__ void binary_bcast_kernel(const T* __restrict__ a, const T* __restrict__ b,
                                    T* __restrict__ out, I n, BcastParams p) {
  const I stride = static_cast<I>(gridDim.x) * blockDim.x;
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    I rem = i, ia = 0, ib = 0;
#pragma unroll
    for (int d = kMaxBcastDims - 1; d >= 0; --d) {
      if (d < kMaxBcastDims - p.rank) break;
      const I dim = static_cast<I>(p.dims[d]);
      const I q = rem / dim;
      const I c = rem - q * dim;
      rem = q;
      ia += c * static_cast<I>(p.sa[d]);
      ib += c * static_cast<I>(p.sb[d]);
    }
    out[i] = from_compute<T>(Op::f(to_compute(a[ia]), to_compute(b[ib])));
  }
}

// Broadcast by rows: the output is [rows, inner] with `inner` the last
// collapsed dim. Each block row decomposes its row index once and then walks
// the row with unit (or zero) strides, so accesses are coalesced. blockIdx.y
// splits long rows into chunks of `chunk` elements.
template <typename T, typename Op, typename I>
__global__ void binary_bcast_rows_kernel(const T* __restrict__ a, const T* __restrict__ b,
                                         T* __restrict__ out, I rows, I inner, I chunk,
                                         BcastParams p) {
  const I sa_in = static_cast<I>(p.sa[kMaxBcastDims - 1]);
  const I sb_in = static_cast<I>(p.sb[kMaxBcastDims - 1]);
  const I j0 = static_cast<I>(blockIdx.y) * chunk;
  I j1 = j0 + chunk;
  if (j1 > inner) j1 = inner;
  for (I row = blockIdx.x; row < rows; row += gridDim.x) {
    I rem = row, ia = 0, ib = 0;
#pragma unroll
    for (int d = kMaxBcastDims - 2; d >= 0; --d) {
      if (d < kMaxBcastDims - p.rank) break;
      const I dim = static_cast<I>(p.dims[d]);
      const I q = rem / dim;
      const I c = rem - q * dim;
      rem = q;
      ia += c * static_cast<I>(p.sa[d]);
      ib += c * static_cast<I>(p.sb[d]);
    }
    const T* pa = a + ia;
    const T* pb = b + ib;
    T* po = out + row * inner;
    for (I j = j0 + threadIdx.x; j < j1; j += blockDim.x) {
      po[j] = from_compute<T>(Op::f(to_compute(pa[j * sa_in]), to_compute(pb[j * sb_in])));
    }
  }
}

// numpy broadcast of two shapes; false if incompatible.
bool broadcast_shape(const Shape& a, const Shape& b, Shape* out) {
  const int r = a.rank > b.rank ? a.rank : b.rank;
  out->rank = r;
  for (int i = 0; i < r; ++i) {
    const int ai = i - (r - a.rank), bi = i - (r - b.rank);
    const int64_t da = ai >= 0 ? a.dims[ai] : 1;
    const int64_t db = bi >= 0 ? b.dims[bi] : 1;
    if (da == db || db == 1) {
      out->dims[i] = da;
    } else if (da == 1) {
      out->dims[i] = db;
    } else {
      return false;
    }
  }
  return true;
}

// Collapses the broadcast of a and b into `p`; false if it needs more than
// kMaxBcastDims dims.
bool collapse_broadcast(const Shape& a, const Shape& b, const Shape& out,
                        BcastParams* p) {
  int64_t dims[TF_MAX_DIMS];
  bool abc[TF_MAX_DIMS], bbc[TF_MAX_DIMS];
  int n = 0;
  for (int i = 0; i < out.rank; ++i) {
    const int64_t od = out.dims[i];
    if (od == 1) continue;
    const int ai = i - (out.rank - a.rank), bi = i - (out.rank - b.rank);
    const bool ab = (ai >= 0 ? a.dims[ai] : 1) == 1;
    const bool bb = (bi >= 0 ? b.dims[bi] : 1) == 1;
    if (n > 0 && abc[n - 1] == ab && bbc[n - 1] == bb) {
      dims[n - 1] *= od;
    } else {
      dims[n] = od;
      abc[n] = ab;
      bbc[n] = bb;
      ++n;
    }
  }
  if (n > kMaxBcastDims) return false;
  p->rank = n;
  for (int k = 0; k < kMaxBcastDims; ++k) {
    p->dims[k] = 1;
    p->sa[k] = 0;
    p->sb[k] = 0;
  }
  int64_t pa = 1, pb = 1;
  for (int k = n - 1; k >= 0; --k) {
    const int slot = kMaxBcastDims - n + k;
    p->dims[slot] = dims[k];
    p->sa[slot] = abc[k] ? 0 : pa;
    p->sb[slot] = bbc[k] ? 0 : pb;
    if (!abc[k]) pa *= dims[k];
    if (!bbc[k]) pb *= dims[k];
  }
  return true;
}

inline bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15) == 0;
}

template <typename T, typename Op>
void launch_binary(OpCall& c, const Shape& sa, const Shape& sb, const Shape& so,
                   const void* a, const void* b, void* out, const char* name) {
  const int64_t n = so.num_elements();
  const int64_t na = sa.num_elements(), nb = sb.num_elements();
  const T* pa = static_cast<const T*>(a);
  const T* pb = static_cast<const T*>(b);
  T* po = static_cast<T*>(out);
  const bool vec = aligned16(a) && aligned16(b) && aligned16(out);
  const int64_t work = vec ? (n + (16 / sizeof(T)) - 1) / (16 / sizeof(T)) : n;
  const unsigned grid = grid_for(work, c.sm_count());
  cudaStream_t s = c.stream();
  if (na == n && nb == n) {
    if (vec) binary_flat_kernel<T, Op, 0, true><<<grid, kThreads, 0, s>>>(pa, pb, po, n);
    else binary_flat_kernel<T, Op, 0, false><<<grid, kThreads, 0, s>>>(pa, pb, po, n);
  } else if (na == 1 && nb == n) {
    if (vec) binary_flat_kernel<T, Op, 1, true><<<grid, kThreads, 0, s>>>(pa, pb, po, n);
    else binary_flat_kernel<T, Op, 1, false><<<grid, kThreads, 0, s>>>(pa, pb, po, n);
  } else if (nb == 1 && na == n) {
    if (vec) binary_flat_kernel<T, Op, 2, true><<<grid, kThreads, 0, s>>>(pa, pb, po, n);
    else binary_flat_kernel<T, Op, 2, false><<<grid, kThreads, 0, s>>>(pa, pb, po, n);
  } else {
    BcastParams p;
    if (!collapse_broadcast(sa, sb, so, &p)) {
      c.fail(TF_UNIMPLEMENTED, "%s: broadcast needs more than %d collapsed dimensions",
             name, kMaxBcastDims);
      return;
    }
    const int64_t inner = p.dims[kMaxBcastDims - 1];
    if (inner >= 128) {
      const int64_t rows = n / inner;
      const int64_t want = static_cast<int64_t>(c.sm_count()) * 16;  // blocks to fill the GPU
      int64_t gx = rows < want ? rows : want;
      int64_t gy = (want + gx - 1) / gx;
      const int64_t max_gy = (inner + 4 * kThreads - 1) / (4 * kThreads);  // >= 1024 each
      if (gy > max_gy) gy = max_gy;
      if (gy > 65535) gy = 65535;
      if (gy < 1) gy = 1;
      const int64_t chunk = (inner + gy - 1) / gy;
      const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(gy));
      if (n <= INT32_MAX) {
        binary_bcast_rows_kernel<T, Op, int32_t><<<grid, kThreads, 0, s>>>(
            pa, pb, po, static_cast<int32_t>(rows), static_cast<int32_t>(inner),
            static_cast<int32_t>(chunk), p);
      } else {
        binary_bcast_rows_kernel<T, Op, int64_t><<<grid, kThreads, 0, s>>>(pa, pb, po, rows,
                                                                          inner, chunk, p);
      }
    } else {
      const unsigned g = grid_for(n, c.sm_count());
      if (n <= INT32_MAX) {
        binary_bcast_kernel<T, Op, int32_t><<<g, kThreads, 0, s>>>(
            pa, pb, po, static_cast<int32_t>(n), p);
      } else {
        binary_bcast_kernel<T, Op, int64_t><<<g, kThreads, 0, s>>>(pa, pb, po, n, p);
      }
    }
  }
  c.check_launch(name);
}

template <typename Op>
void binary_compute(void* kernel, TF_OpKernelContext* ctx) {
  const char* name = static_cast<const char*>(kernel);
  OpCall c(ctx);
  if (!c.ok()) return;
  TensorPtr a = c.input(0);
  if (!a) return;
  TensorPtr b = c.input(1);
  if (!b) return;
  const Shape sa = Shape::of(a.get()), sb = Shape::of(b.get());
  Shape so;
  if (!broadcast_shape(sa, sb, &so)) {
    char b1[256], b2[256];
    c.fail(TF_INVALID_ARGUMENT, "Incompatible shapes: %s vs. %s",
           shape_str(sa, b1, sizeof(b1)), shape_str(sb, b2, sizeof(b2)));
    return;
  }
  const TF_DataType dt = TF_TensorType(a.get());
  TensorPtr out = c.output(0, dt, so);
  if (!out) return;
  if (so.num_elements() == 0) return;
  const void* pa = TF_TensorData(a.get());
  const void* pb = TF_TensorData(b.get());
  void* po = TF_TensorData(out.get());
  const bool handled = dispatch_numeric(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_binary<T, Op>(c, sa, sb, so, pa, pb, po, name);
  });
  if (!handled) c.fail(TF_UNIMPLEMENTED, "%s: dtype %s", name, dtype_name(dt));
}

// ---------------------------------------------------------------------------
// Unary ops

template <typename T, typename Op, bool VEC>
__global__ void unary_kernel(const T* __restrict__ in, T* __restrict__ out, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t start = tid;
  if (VEC) {
    constexpr int V = 16 / sizeof(T);
    const int64_t nvec = n / V;
    for (int64_t i = tid; i < nvec; i += stride) {
      T v[V], o[V];
      load16(in, i, v);
#pragma unroll
      for (int j = 0; j < V; ++j) o[j] = from_compute<T>(Op::f(to_compute(v[j])));
      store16(out, i, o);
    }
    start = nvec * V + tid;
  }
  for (int64_t i = start; i < n; i += stride) {
    out[i] = from_compute<T>(Op::f(to_compute(in[i])));
  }
}

template <typename Op, bool FLOAT_ONLY>
void unary_compute(void* kernel, TF_OpKernelContext* ctx) {
  const char* name = static_cast<const char*>(kernel);
  OpCall c(ctx);
  if (!c.ok()) return;
  TensorPtr x = c.input(0);
  if (!x) return;
  const Shape s = Shape::of(x.get());
  const TF_DataType dt = TF_TensorType(x.get());
  TensorPtr out = c.output(0, dt, s);
  if (!out) return;
  const int64_t n = s.num_elements();
  if (n == 0) return;
  const void* in = TF_TensorData(x.get());
  void* o = TF_TensorData(out.get());
  auto run = [&](auto tag) {
    using T = typename decltype(tag)::type;
    const bool vec = aligned16(in) && aligned16(o);
    constexpr int V = 16 / sizeof(T);
    const unsigned grid = grid_for(vec ? (n + V - 1) / V : n, c.sm_count());
    if (vec) {
      unary_kernel<T, Op, true><<<grid, kThreads, 0, c.stream()>>>(
          static_cast<const T*>(in), static_cast<T*>(o), n);
    } else {
      unary_kernel<T, Op, false><<<grid, kThreads, 0, c.stream()>>>(
          static_cast<const T*>(in), static_cast<T*>(o), n);
    }
    c.check_launch(name);
  };
  bool handled;
  if constexpr (FLOAT_ONLY) {
    handled = dispatch_float(dt, run);
  } else {
    handled = dispatch_numeric(dt, run);
  }
  if (!handled) c.fail(TF_UNIMPLEMENTED, "%s: dtype %s", name, dtype_name(dt));
}

// ---------------------------------------------------------------------------
// Cast

template <typename T>
__host__ __device__ constexpr bool is_bool_type() {
  return std::is_same<T, pg_bool>::value;
}
template <typename T>
__host__ __device__ constexpr bool is_int_type() {
  return std::is_integral<T>::value;
}
template <typename T>
__host__ __device__ constexpr bool is_half_type() {
  return std::is_same<T, __half>::value || std::is_same<T, __nv_bfloat16>::value;
}

// Clamps a floating value into the range of integer D (NaN -> 0), then
// truncates toward zero.
template <typename D> struct IntRange {
  static constexpr D lo = std::numeric_limits<D>::lowest();
  static constexpr D hi = std::numeric_limits<D>::max();
};

template <typename D>
__device__ __forceinline__ D float_to_int(double v) {
  if (v != v) return D(0);
  const double lo = static_cast<double>(IntRange<D>::lo);
  // max() of a 64-bit type is not a double; max + 1 (a power of two) is the
  // first value out of range for every integer type.
  const double hi_excl = static_cast<double>(IntRange<D>::hi) + 1.0;
  if (v <= lo) return IntRange<D>::lo;
  if (v >= hi_excl) return IntRange<D>::hi;
  return static_cast<D>(v);
}

template <typename D, typename S>
__device__ __forceinline__ D cast_value(S x) {
  if constexpr (is_bool_type<S>()) {
    const int64_t v = x.v != 0 ? 1 : 0;
    if constexpr (is_bool_type<D>()) return pg_bool{static_cast<uint8_t>(v)};
    else if constexpr (std::is_same<D, __half>::value) return __float2half_rn(static_cast<float>(v));
    else if constexpr (std::is_same<D, __nv_bfloat16>::value) return __float2bfloat16_rn(static_cast<float>(v));
    else return static_cast<D>(v);
  } else if constexpr (is_int_type<S>()) {
    if constexpr (is_bool_type<D>()) return pg_bool{static_cast<uint8_t>(x != 0)};
    else if constexpr (std::is_same<D, __half>::value) return __float2half_rn(static_cast<float>(x));
    else if constexpr (std::is_same<D, __nv_bfloat16>::value) return __float2bfloat16_rn(static_cast<float>(x));
    else return static_cast<D>(x);  // integer to integer wraps like numpy
  } else {
    // Floating source: 16-bit floats widen exactly to float.
    using W = typename std::conditional<std::is_same<S, double>::value, double, float>::type;
    W v;
    if constexpr (is_half_type<S>()) v = to_compute(x);
    else v = x;
    if constexpr (is_bool_type<D>()) {
      return pg_bool{static_cast<uint8_t>(v != W(0))};
    } else if constexpr (is_int_type<D>()) {
      return float_to_int<D>(static_cast<double>(v));
    } else if constexpr (std::is_same<D, __half>::value) {
      if constexpr (std::is_same<W, double>::value) return __double2half(v);
      else return __float2half_rn(v);
    } else if constexpr (std::is_same<D, __nv_bfloat16>::value) {
      if constexpr (std::is_same<W, double>::value) return __double2bfloat16(v);
      else return __float2bfloat16_rn(v);
    } else {
      return static_cast<D>(v);
    }
  }
}

// Four elements moved as one aligned access.
template <typename T>
struct alignas(4 * sizeof(T)) Pack4 {
  T v[4];
};

// VEC: both pointers aligned to their Pack4; four elements per step.
template <typename D, typename S, bool VEC>
__global__ void cast_kernel(const S* __restrict__ in, D* __restrict__ out, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t start = tid;
  if (VEC) {
    const int64_t nvec = n / 4;
    const Pack4<S>* vin = reinterpret_cast<const Pack4<S>*>(in);
    Pack4<D>* vout = reinterpret_cast<Pack4<D>*>(out);
    for (int64_t i = tid; i < nvec; i += stride) {
      const Pack4<S> x = vin[i];
      Pack4<D> y;
#pragma unroll
      for (int j = 0; j < 4; ++j) y.v[j] = cast_value<D, S>(x.v[j]);
      vout[i] = y;
    }
    start = nvec * 4 + tid;
  }
  for (int64_t i = start; i < n; i += stride) out[i] = cast_value<D, S>(in[i]);
}

void cast_compute(void*, TF_OpKernelContext* ctx) {
  OpCall c(ctx);
  if (!c.ok()) return;
  TensorPtr x = c.input(0);
  if (!x) return;
  const TF_DataType src = TF_TensorType(x.get());
  const TF_DataType dst = TF_ExpectedOutputDataType(ctx, 0);
  if (src == dst) {
    c.set_output(0, x.get());
    return;
  }
  const Shape s = Shape::of(x.get());
  TensorPtr out = c.output(0, dst, s);
  if (!out) return;
  const int64_t n = s.num_elements();
  if (n == 0) return;
  const void* in = TF_TensorData(x.get());
  void* o = TF_TensorData(out.get());
  bool inner_ok = true;
  const bool outer_ok = dispatch_all<pg_bool>(src, [&](auto stag) {
    using S = typename decltype(stag)::type;
    inner_ok = dispatch_all<pg_bool>(dst, [&](auto dtag) {
      using D = typename decltype(dtag)::type;
      const bool vec = reinterpret_cast<uintptr_t>(in) % sizeof(Pack4<S>) == 0 &&
                       reinterpret_cast<uintptr_t>(o) % sizeof(Pack4<D>) == 0;
      if (vec) {
        cast_kernel<D, S, true><<<grid_for((n + 3) / 4, c.sm_count()), kThreads, 0,
                                  c.stream()>>>(static_cast<const S*>(in), static_cast<D*>(o), n);
      } else {
        cast_kernel<D, S, false><<<grid_for(n, c.sm_count()), kThreads, 0, c.stream()>>>(
            static_cast<const S*>(in), static_cast<D*>(o), n);
      }
      c.check_launch("Cast");
    });
  });
  if (!outer_ok || !inner_ok) {
    c.fail(TF_UNIMPLEMENTED, "Cast from %s to %s", dtype_name(src), dtype_name(dst));
  }
}

// The op name is the kernel state (used in messages).
template <const char* NAME>
void* name_create(TF_OpKernelConstruction*) {
  return const_cast<char*>(NAME);
}
void no_delete(void*) {}

constexpr char kAddV2[] = "AddV2";
constexpr char kSub[] = "Sub";
constexpr char kMul[] = "Mul";
constexpr char kRealDiv[] = "RealDiv";
constexpr char kMaximum[] = "Maximum";
constexpr char kMinimum[] = "Minimum";
constexpr char kNeg[] = "Neg";
constexpr char kAbs[] = "Abs";
constexpr char kExp[] = "Exp";
constexpr char kLog[] = "Log";
constexpr char kSqrt[] = "Sqrt";
constexpr char kTanh[] = "Tanh";
constexpr char kSigmoid[] = "Sigmoid";
constexpr char kRelu[] = "Relu";

template <const char* NAME, typename Op>
void register_binary() {
  for (TF_DataType t : kNumericTypes) {
    register_kernel(NAME, name_create<NAME>, binary_compute<Op>, no_delete, {{"T", t}});
  }
}

template <const char* NAME, typename Op, bool FLOAT_ONLY>
void register_unary() {
  if constexpr (FLOAT_ONLY) {
    for (TF_DataType t : kFloatTypes) {
      register_kernel(NAME, name_create<NAME>, unary_compute<Op, true>, no_delete,
                      {{"T", t}});
    }
  } else {
    for (TF_DataType t : kNumericTypes) {
      register_kernel(NAME, name_create<NAME>, unary_compute<Op, false>, no_delete,
                      {{"T", t}});
    }
  }
}

}  // namespace

void register_elementwise_kernels() {
  register_binary<kAddV2, AddOp>();
  register_binary<kSub, SubOp>();
  register_binary<kMul, MulOp>();
  register_binary<kRealDiv, DivOp>();
  register_binary<kMaximum, MaxOp>();
  register_binary<kMinimum, MinOp>();
  register_unary<kNeg, NegOp, false>();
  register_unary<kAbs, AbsOp, false>();
  register_unary<kRelu, ReluOp, false>();
  register_unary<kExp, ExpOp, true>();
  register_unary<kLog, LogOp, true>();
  register_unary<kSqrt, SqrtOp, true>();
  register_unary<kTanh, TanhOp, true>();
  register_unary<kSigmoid, SigmoidOp, true>();
  for (TF_DataType s : kAllTypes) {
    for (TF_DataType d : kAllTypes) {
      register_kernel("Cast", nullptr, cast_compute, nullptr, {{"SrcT", s}, {"DstT", d}});
    }
  }
}

}  // namespace pgcuda
