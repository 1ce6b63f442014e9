// The elementwise machinery shared by the kernel files: 16-byte vector loads
// and stores, numpy broadcasting of two operands (shape, collapsing, kernels)
// and the flat unary kernel. Op functors have a static __device__ `f` over
// the compute type (compute_t<T>) returning a value convertible to the
// output's compute type.
//
// Binary ops have three paths: equal shapes (or one operand a single
// element), run as a flat grid-stride loop with 16-byte loads when every
// pointer is 16-byte aligned; and general numpy broadcasting, where the
// shapes are first collapsed (size-1 output dims dropped, neighbouring dims
// with the same broadcast pattern merged).
//
// Everything here has internal linkage: each kernel file instantiates its
// own copies.
#ifndef PLUGGABLE_CUDA_ELEMENTWISE_H_
#define PLUGGABLE_CUDA_ELEMENTWISE_H_

#include <cstring>

#include "kernel_util.h"

namespace pgcuda {
namespace {

// ---------------------------------------------------------------------------
// Vector loads and stores.

template <typename T, int V>
__device__ __forceinline__ void load16(const T* p, int64_t i, T (&v)[V]) {
  static_assert(sizeof(T) * V == 16, "16-byte vectors");
  const uint4 raw = __ldg(reinterpret_cast<const uint4*>(p) + i);
  memcpy(&v[0], &raw, 16);
}

// V elements of T stored as one aligned access.
template <typename T, int V>
struct alignas(sizeof(T) * V) VecN {
  T v[V];
};

template <typename T, int V>
__device__ __forceinline__ void store_vec(T* p, int64_t i, const T (&v)[V]) {
  VecN<T, V> raw;
#pragma unroll
  for (int j = 0; j < V; ++j) raw.v[j] = v[j];
  reinterpret_cast<VecN<T, V>*>(p)[i] = raw;
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// The value an op returns, converted to the output element type.
template <typename Out, typename R>
__device__ __forceinline__ Out convert_out(R r) {
  return from_compute<Out>(static_cast<compute_t<Out>>(r));
}

// ---------------------------------------------------------------------------
// Binary ops.

// Binary op over flat arrays. MODE 0: a[i] op b[i]; 1: a[0] op b[i];
// 2: a[i] op b[0]. VEC: all pointers 16-byte aligned.
template <typename T, typename Out, typename Op, int MODE, bool VEC>
__global__ void binary_flat_kernel(const T* __restrict__ a, const T* __restrict__ b,
                                   Out* __restrict__ out, int64_t n) {
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
      T va[V], vb[V];
      Out vo[V];
      if (MODE != 1) load16(a, i, va);
      if (MODE != 2) load16(b, i, vb);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const C x = MODE == 1 ? sa : to_compute(va[j]);
        const C y = MODE == 2 ? sb : to_compute(vb[j]);
        vo[j] = convert_out<Out>(Op::f(x, y));
      }
      store_vec(out, i, vo);
    }
    start = nvec * V + tid;
  }
  for (int64_t i = start; i < n; i += stride) {
    const C x = MODE == 1 ? sa : to_compute(a[i]);
    const C y = MODE == 2 ? sb : to_compute(b[i]);
    out[i] = convert_out<Out>(Op::f(x, y));
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

template <typename T, typename Out, typename Op, typename I>
__global__ void binary_bcast_kernel(const T* __restrict__ a, const T* __restrict__ b,
                                    Out* __restrict__ out, I n, BcastParams p) {
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
    out[i] = convert_out<Out>(Op::f(to_compute(a[ia]), to_compute(b[ib])));
  }
}

// Broadcast by rows: the output is [rows, inner] with `inner` the last
// collapsed dim. Each block row decomposes its row index once and then walks
// the row with unit (or zero) strides, so accesses are coalesced. blockIdx.y
// splits long rows into chunks of `chunk` elements.
template <typename T, typename Out, typename Op, typename I>
__global__ void binary_bcast_rows_kernel(const T* __restrict__ a, const T* __restrict__ b,
                                         Out* __restrict__ out, I rows, I inner, I chunk,
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
    Out* po = out + row * inner;
    for (I j = j0 + threadIdx.x; j < j1; j += blockDim.x) {
      po[j] = convert_out<Out>(Op::f(to_compute(pa[j * sa_in]), to_compute(pb[j * sb_in])));
    }
  }
}

// numpy broadcast of two shapes; false if incompatible.
inline bool broadcast_shape(const Shape& a, const Shape& b, Shape* out) {
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
inline bool collapse_broadcast(const Shape& a, const Shape& b, const Shape& out,
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

// out (shape so, element type Out) = Op(a, b) with numpy broadcasting.
template <typename T, typename Out, typename Op>
void launch_binary(OpCall& c, const Shape& sa, const Shape& sb, const Shape& so,
                   const void* a, const void* b, void* out, const char* name) {
  const int64_t n = so.num_elements();
  const int64_t na = sa.num_elements(), nb = sb.num_elements();
  const T* pa = static_cast<const T*>(a);
  const T* pb = static_cast<const T*>(b);
  Out* po = static_cast<Out*>(out);
  const bool vec = aligned16(a) && aligned16(b) && aligned16(out);
  const int64_t work = vec ? (n + (16 / sizeof(T)) - 1) / (16 / sizeof(T)) : n;
  const unsigned grid = grid_for_stream(
      work, c.sm_count(), n * static_cast<int64_t>(2 * sizeof(T) + sizeof(Out)), c.l2_bytes());
  const dim3 blocks(grid), threads(kThreads);
  auto flat = [&](auto kernel) { c.launch(name, kernel, blocks, threads, pa, pb, po, n); };
  if (na == n && nb == n) {
    if (vec) flat(binary_flat_kernel<T, Out, Op, 0, true>);
    else flat(binary_flat_kernel<T, Out, Op, 0, false>);
  } else if (na == 1 && nb == n) {
    if (vec) flat(binary_flat_kernel<T, Out, Op, 1, true>);
    else flat(binary_flat_kernel<T, Out, Op, 1, false>);
  } else if (nb == 1 && na == n) {
    if (vec) flat(binary_flat_kernel<T, Out, Op, 2, true>);
    else flat(binary_flat_kernel<T, Out, Op, 2, false>);
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
      // Chunks of at least one element per thread: a few long rows (a bias
      // added to a batch of 64) are spread over as many blocks as fill the GPU.
      const int64_t max_gy = (inner + kThreads - 1) / kThreads;
      if (gy > max_gy) gy = max_gy;
      if (gy > 65535) gy = 65535;
      if (gy < 1) gy = 1;
      const int64_t chunk = (inner + gy - 1) / gy;
      const dim3 grid2(static_cast<unsigned>(gx), static_cast<unsigned>(gy));
      if (n <= INT32_MAX) {
        c.launch(name, binary_bcast_rows_kernel<T, Out, Op, int32_t>, grid2, threads, pa, pb, po,
                 static_cast<int32_t>(rows), static_cast<int32_t>(inner),
                 static_cast<int32_t>(chunk), p);
      } else {
        c.launch(name, binary_bcast_rows_kernel<T, Out, Op, int64_t>, grid2, threads, pa, pb, po,
                 rows, inner, chunk, p);
      }
    } else {
      const dim3 g(grid_for(n, c.sm_count()));
      if (n <= INT32_MAX) {
        c.launch(name, binary_bcast_kernel<T, Out, Op, int32_t>, g, threads, pa, pb, po,
                 static_cast<int32_t>(n), p);
      } else {
        c.launch(name, binary_bcast_kernel<T, Out, Op, int64_t>, g, threads, pa, pb, po, n, p);
      }
    }
  }
}

// Reads the two inputs of a broadcasting binary op and allocates its output
// (of `out_dtype`, or the inputs' dtype when TF_DataType(0)). Returns false
// after recording a failure; `*so` is the output shape.
struct BinaryIO {
  TensorPtr a, b, out;
  Shape sa, sb, so;
  TF_DataType dt;
};
inline bool binary_setup(OpCall& c, const char* name, TF_DataType out_dtype, BinaryIO* io) {
  io->a = c.input(0);
  if (!io->a) return false;
  io->b = c.input(1);
  if (!io->b) return false;
  io->sa = Shape::of(io->a.get());
  io->sb = Shape::of(io->b.get());
  if (!broadcast_shape(io->sa, io->sb, &io->so)) {
    char b1[256], b2[256];
    return c.fail(TF_INVALID_ARGUMENT, "%s: Incompatible shapes: %s vs. %s", name,
                  shape_str(io->sa, b1, sizeof(b1)), shape_str(io->sb, b2, sizeof(b2)));
  }
  io->dt = TF_TensorType(io->a.get());
  io->out = c.output(0, out_dtype == TF_DataType(0) ? io->dt : out_dtype, io->so);
  return static_cast<bool>(io->out);
}

// ---------------------------------------------------------------------------
// Unary ops.

// Elements that are not 16-byte aligned: a grid-stride loop, one element at
// a time.
template <typename T, typename Out, typename Op>
__global__ void unary_kernel(const T* __restrict__ in, Out* __restrict__ out, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    out[i] = convert_out<Out>(Op::f(to_compute(in[i])));
  }
}

// Aligned elements in 16-byte vectors, in one pass: each block of
// kChunkThreads threads takes a contiguous chunk of kChunkThreads * VPT
// vectors, each thread VPT of them kChunkThreads apart, all loaded before any
// is stored; block 0 also takes the n % V elements after the last vector.
// Data held in L2 take two vectors per thread, data beyond it one (Exp of
// float32 on an H200, benchmarks/exp_shapes_gpu.py: 4096x1024, 32 MiB moved,
// 5.34-5.47 us, PyTorch's kernel 5.31-5.41, against 5.50-5.63 with one
// vector per thread and 5.50-5.57 as the grid-stride loop capped at 8 blocks
// per multiprocessor used before; 16384x4096, 512 MiB moved, 125.7-126.1 us
// with one vector per thread against 127.0-127.2 with two).
constexpr int kChunkThreads = 128;

template <typename T, typename Out, typename Op, int VPT, typename I>
__global__ void __launch_bounds__(kChunkThreads)
    unary_chunk_kernel(const T* __restrict__ in, Out* __restrict__ out, I n) {
  constexpr int V = 16 / sizeof(T);
  const I nvec = n / V;
  const I base = static_cast<I>(blockIdx.x) * (kChunkThreads * VPT) + threadIdx.x;
  T v[VPT][V];
  Out o[V];
  if (base + (VPT - 1) * kChunkThreads < nvec) {
#pragma unroll
    for (int u = 0; u < VPT; ++u) load16(in, base + u * kChunkThreads, v[u]);
#pragma unroll
    for (int u = 0; u < VPT; ++u) {
#pragma unroll
      for (int j = 0; j < V; ++j) o[j] = convert_out<Out>(Op::f(to_compute(v[u][j])));
      store_vec(out, base + u * kChunkThreads, o);
    }
  } else {
#pragma unroll
    for (int u = 0; u < VPT; ++u) {
      const I i = base + u * kChunkThreads;
      if (i < nvec) {
        load16(in, i, v[u]);
#pragma unroll
        for (int j = 0; j < V; ++j) o[j] = convert_out<Out>(Op::f(to_compute(v[u][j])));
        store_vec(out, i, o);
      }
    }
  }
  if (blockIdx.x == 0 && static_cast<I>(threadIdx.x) < n - nvec * V) {
    const I i = nvec * V + threadIdx.x;
    out[i] = convert_out<Out>(Op::f(to_compute(in[i])));
  }
}

template <typename T, typename Out, typename Op, int VPT>
void launch_unary_chunks(OpCall& c, const T* in, Out* out, int64_t n, const char* name) {
  constexpr int64_t kChunk = int64_t{kChunkThreads} * VPT;
  constexpr int64_t V = 16 / sizeof(T);
  const int64_t nvec = n / V;
  const dim3 grid(static_cast<unsigned>(nvec > 0 ? (nvec + kChunk - 1) / kChunk : 1));
  if (n + kChunk * V <= INT32_MAX) {
    c.launch(name, unary_chunk_kernel<T, Out, Op, VPT, int32_t>, grid, dim3(kChunkThreads), in,
             out, static_cast<int32_t>(n));
  } else {
    c.launch(name, unary_chunk_kernel<T, Out, Op, VPT, int64_t>, grid, dim3(kChunkThreads), in,
             out, n);
  }
}

// out[i] = Op(in[i]) for n elements.
template <typename T, typename Out, typename Op>
void launch_unary(OpCall& c, const void* in, void* o, int64_t n, const char* name) {
  const T* pin = static_cast<const T*>(in);
  Out* pout = static_cast<Out*>(o);
  if (!aligned16(in) || !aligned16(o)) {
    const unsigned grid = grid_for_stream(
        n, c.sm_count(), n * static_cast<int64_t>(sizeof(T) + sizeof(Out)), c.l2_bytes());
    c.launch(name, unary_kernel<T, Out, Op>, dim3(grid), dim3(kThreads), pin, pout, n);
    return;
  }
  const int64_t bytes = n * static_cast<int64_t>(sizeof(T) + sizeof(Out));
  if (bytes > c.l2_bytes()) {
    launch_unary_chunks<T, Out, Op, 1>(c, pin, pout, n, name);
  } else {
    launch_unary_chunks<T, Out, Op, 2>(c, pin, pout, n, name);
  }
}

}  // namespace
}  // namespace pgcuda

#endif  // PLUGGABLE_CUDA_ELEMENTWISE_H_
