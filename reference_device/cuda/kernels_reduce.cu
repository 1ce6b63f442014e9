// Reductions (Sum, Mean, Max, Min, Prod over any set of axes, BiasAddGrad),
// ArgMax / ArgMin, and Softmax / LogSoftmax.
//
// A reduction first drops size-1 dims and merges neighbouring dims that are
// both reduced or both kept. The shapes [R] and [K, R] are row reductions
// (a warp per row for short rows, a block per row when there are many rows,
// otherwise each row is split over several blocks whose partial results a
// second pass combines); [R, K] and [K, R, K] are column reductions. Any other
// pattern is transposed into a temporary (kept axes first) and reduced as
// rows. 16-bit floats accumulate in float; Mean divides at the end.
#include <cmath>
#include <cstring>
#include <limits>
#include <new>

#include "kernel_util.h"

namespace pgcuda {
namespace {

// ---------------------------------------------------------------------------
// Reducers over the compute type C.

template <typename C> struct Limits {
  static constexpr C lowest = std::numeric_limits<C>::lowest();
  static constexpr C highest = std::numeric_limits<C>::max();
};

struct SumR {
  template <typename C> __device__ static C init() { return C(0); }
  template <typename C> __device__ static C combine(C a, C b) {
    if constexpr (std::is_integral<C>::value) {
      using U = typename std::make_unsigned<C>::type;
      return static_cast<C>(static_cast<U>(a) + static_cast<U>(b));
    } else {
      return a + b;
    }
  }
};
// Max and Min propagate NaN (like numpy).
struct MaxR {
  template <typename C> __device__ static C init() {
    if constexpr (std::is_integral<C>::value) return Limits<C>::lowest;
    else return -C(INFINITY);
  }
  template <typename C> __device__ static C combine(C a, C b) {
    return (a > b || a != a) ? a : b;
  }
};
struct MinR {
  template <typename C> __device__ static C init() {
    if constexpr (std::is_integral<C>::value) return Limits<C>::highest;
    else return C(INFINITY);
  }
  template <typename C> __device__ static C combine(C a, C b) {
    return (a < b || a != a) ? a : b;
  }
};

struct ProdR {
  template <typename C> __device__ static C init() { return C(1); }
  template <typename C> __device__ static C combine(C a, C b) {
    if constexpr (std::is_integral<C>::value) {
      using U = typename std::make_unsigned<C>::type;
      return static_cast<C>(static_cast<U>(a) * static_cast<U>(b));
    } else {
      return a * b;
    }
  }
};

// Final value of a reduction of `count` elements.
template <bool MEAN, typename C>
__device__ __forceinline__ C finalize(C acc, int64_t count) {
  if constexpr (!MEAN) {
    return acc;
  } else if constexpr (std::is_integral<C>::value) {
    return count == 0 ? C(0) : static_cast<C>(static_cast<int64_t>(acc) / count);
  } else {
    return acc / static_cast<C>(count);  // 0/0 = NaN for an empty reduction
  }
}

template <typename R, typename C>
__device__ __forceinline__ C warp_reduce(C v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    v = R::combine(v, __shfl_down_sync(0xffffffffu, v, off));
  }
  return v;
}

// Block-wide reduction (blockDim.x a multiple of 32); the result is valid in
// thread 0.
template <typename R, typename C>
__device__ __forceinline__ C block_reduce(C v) {
  __shared__ C partial[32];
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
  v = warp_reduce<R>(v);
  __syncthreads();  // an earlier use of `partial` is finished
  if (lane == 0) partial[wid] = v;
  __syncthreads();
  const int nwarps = blockDim.x >> 5;
  v = static_cast<int>(threadIdx.x) < nwarps ? partial[threadIdx.x] : R::template init<C>();
  if (wid == 0) v = warp_reduce<R>(v);
  return v;
}

// This thread's share of the reduction of p[0, n) among `nthreads` threads
// (this one is `tid`, nthreads >= 16): 16-byte vector loads from the first
// aligned element on, two in flight per thread, then the tail.
template <typename C, typename R, typename In>
__device__ __forceinline__ C thread_reduce_range(const In* __restrict__ p, int64_t n, int tid,
                                                 int nthreads) {
  constexpr int V = 16 / sizeof(In);
  C acc0 = R::template init<C>(), acc1 = R::template init<C>();
  int64_t head = static_cast<int64_t>(((16 - (reinterpret_cast<uintptr_t>(p) & 15)) & 15) /
                                      sizeof(In));
  if (head > n) head = n;
  if (tid < head) acc0 = R::combine(acc0, static_cast<C>(to_compute(p[tid])));
  const In* q = p + head;
  const int64_t m = n - head;
  const int64_t nvec = m / V;
  const uint4* qv = reinterpret_cast<const uint4*>(q);
  int64_t i = tid;
  for (; i + nthreads < nvec; i += 2 * static_cast<int64_t>(nthreads)) {
    const uint4 r0 = __ldg(qv + i), r1 = __ldg(qv + i + nthreads);
    In a[V], b[V];
    memcpy(&a[0], &r0, 16);
    memcpy(&b[0], &r1, 16);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      acc0 = R::combine(acc0, static_cast<C>(to_compute(a[j])));
      acc1 = R::combine(acc1, static_cast<C>(to_compute(b[j])));
    }
  }
  if (i < nvec) {
    const uint4 r0 = __ldg(qv + i);
    In a[V];
    memcpy(&a[0], &r0, 16);
#pragma unroll
    for (int j = 0; j < V; ++j) acc0 = R::combine(acc0, static_cast<C>(to_compute(a[j])));
  }
  for (int64_t k = nvec * V + tid; k < m; k += nthreads) {
    acc1 = R::combine(acc1, static_cast<C>(to_compute(q[k])));
  }
  return R::combine(acc0, acc1);
}

// ---------------------------------------------------------------------------
// Kernels. In: element type read; Out: element type written; both hold the
// compute type C of T (partials are stored as C).

// One warp per row of `cols` elements.
template <typename T, typename In, typename Out, typename R, bool MEAN>
__global__ void rows_warp_kernel(const In* __restrict__ in, Out* __restrict__ out,
                                 int64_t rows, int64_t cols, int64_t count) {
  using C = compute_t<T>;
  const int lane = threadIdx.x & 31;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int64_t nwarps = (static_cast<int64_t>(gridDim.x) * blockDim.x) >> 5;
  for (int64_t row = warp; row < rows; row += nwarps) {
    C acc = thread_reduce_range<C, R>(in + row * cols, cols, lane, 32);
    acc = warp_reduce<R>(acc);
    if (lane == 0) out[row] = from_compute<Out>(finalize<MEAN>(acc, count));
  }
}

// One thread per row, for short rows (neighbouring threads read neighbouring
// rows, so a warp still covers one contiguous stretch of memory).
template <typename T, typename R, bool MEAN>
__global__ void rows_thread_kernel(const T* __restrict__ in, T* __restrict__ out, int64_t rows,
                                   int64_t cols) {
  using C = compute_t<T>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; row < rows;
       row += stride) {
    const T* p = in + row * cols;
    C acc = R::template init<C>();
    for (int64_t j = 0; j < cols; ++j) acc = R::combine(acc, to_compute(p[j]));
    out[row] = from_compute<T>(finalize<MEAN>(acc, cols));
  }
}

// One block per row.
template <typename T, typename R, bool MEAN>
__global__ void rows_block_kernel(const T* __restrict__ in, T* __restrict__ out,
                                  int64_t rows, int64_t cols) {
  using C = compute_t<T>;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    C acc = thread_reduce_range<C, R>(in + row * cols, cols, threadIdx.x, blockDim.x);
    acc = block_reduce<R>(acc);
    if (threadIdx.x == 0) out[row] = from_compute<T>(finalize<MEAN>(acc, cols));
  }
}

// Row blockIdx.y split into gridDim.x chunks; writes one partial (type C)
// per chunk to partial[row * gridDim.x + chunk].
template <typename T, typename R>
__global__ void rows_split_kernel(const T* __restrict__ in, compute_t<T>* __restrict__ partial,
                                  int64_t cols) {
  using C = compute_t<T>;
  const int64_t row = blockIdx.y;
  const int64_t chunk = (cols + gridDim.x - 1) / gridDim.x;
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * chunk;
  int64_t end = begin + chunk;
  if (end > cols) end = cols;
  C acc = R::template init<C>();
  if (begin < end) {
    acc = thread_reduce_range<C, R>(in + row * cols + begin, end - begin, threadIdx.x,
                                    blockDim.x);
  }
  acc = block_reduce<R>(acc);
  if (threadIdx.x == 0) partial[row * gridDim.x + blockIdx.x] = acc;
}

// Column reductions use blocks of (X, Y) threads, X * Y = kThreads: X inner
// positions (the next power of two >= inner, at most 32, so that a warp reads
// contiguous memory even for narrow rows), Y threads splitting the reduced
// axis. Shared memory: Y * (X + 1) values of C.

// Combines the Y partials of each column in shared memory `sh`; the result
// is returned in the threads with threadIdx.y == 0.
template <typename R, typename C>
__device__ __forceinline__ C combine_columns(C acc, C* sh) {
  const int X = blockDim.x, Y = blockDim.y;
  const int tx = threadIdx.x, ty = threadIdx.y;
  sh[ty * (X + 1) + tx] = acc;
  __syncthreads();
  for (int half = Y / 2; half > 0; half /= 2) {
    if (ty < half) {
      sh[ty * (X + 1) + tx] = R::combine(sh[ty * (X + 1) + tx], sh[(ty + half) * (X + 1) + tx]);
    }
    __syncthreads();
  }
  acc = sh[tx];
  __syncthreads();  // `sh` is reused by the next tile
  return acc;
}

// [outer, rlen, inner] -> [outer, inner], one block per (outer index, tile of
// X inner positions), grid-stride. In/Out as for rows_warp_kernel; `count`
// is the number of elements each output stands for.
template <typename T, typename In, typename Out, typename R, bool MEAN>
__global__ void cols_kernel(const In* __restrict__ in, Out* __restrict__ out, int64_t outer,
                            int64_t rlen, int64_t inner, int64_t tiles_inner, int64_t count) {
  using C = compute_t<T>;
  extern __shared__ unsigned char smem[];
  C* sh = reinterpret_cast<C*>(smem);
  const int64_t total = outer * tiles_inner;
  for (int64_t t = blockIdx.x; t < total; t += gridDim.x) {
    const int64_t o = t / tiles_inner;
    const int64_t i = (t - o * tiles_inner) * blockDim.x + threadIdx.x;
    C acc = R::template init<C>();
    if (i < inner) {
      const In* p = in + o * rlen * inner + i;
      for (int64_t r = threadIdx.y; r < rlen; r += blockDim.y) {
        acc = R::combine(acc, static_cast<C>(to_compute(p[r * inner])));
      }
    }
    acc = combine_columns<R>(acc, sh);
    if (threadIdx.y == 0 && i < inner) {
      out[o * inner + i] = from_compute<Out>(finalize<MEAN>(acc, count));
    }
  }
}

// First pass of a column reduction with few outputs and a long reduced axis:
// blockIdx.y picks one of gridDim.y chunks of the reduced axis; writes
// partial[o][chunk][i] (type C), which cols_kernel then reduces over chunks.
template <typename T, typename R>
__global__ void cols_split_kernel(const T* __restrict__ in, compute_t<T>* __restrict__ partial,
                                  int64_t outer, int64_t rlen, int64_t inner,
                                  int64_t tiles_inner) {
  using C = compute_t<T>;
  extern __shared__ unsigned char smem[];
  C* sh = reinterpret_cast<C*>(smem);
  const int64_t chunk = (rlen + gridDim.y - 1) / gridDim.y;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * chunk;
  int64_t r1 = r0 + chunk;
  if (r1 > rlen) r1 = rlen;
  const int64_t total = outer * tiles_inner;
  for (int64_t t = blockIdx.x; t < total; t += gridDim.x) {
    const int64_t o = t / tiles_inner;
    const int64_t i = (t - o * tiles_inner) * blockDim.x + threadIdx.x;
    C acc = R::template init<C>();
    if (i < inner) {
      const T* p = in + o * rlen * inner + i;
      for (int64_t r = r0 + threadIdx.y; r < r1; r += blockDim.y) {
        acc = R::combine(acc, to_compute(p[r * inner]));
      }
    }
    acc = combine_columns<R>(acc, sh);
    if (threadIdx.y == 0 && i < inner) {
      partial[(o * gridDim.y + blockIdx.y) * inner + i] = acc;
    }
  }
}

// Output of a reduction over an empty axis: the reducer's identity.
template <typename T, typename R, bool MEAN>
__global__ void empty_reduce_kernel(T* __restrict__ out, int64_t n) {
  using C = compute_t<T>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    out[i] = from_compute<T>(finalize<MEAN>(R::template init<C>(), 0));
  }
}

template <typename C> constexpr TF_DataType tf_type_of();
template <> constexpr TF_DataType tf_type_of<float>() { return TF_FLOAT; }
template <> constexpr TF_DataType tf_type_of<double>() { return TF_DOUBLE; }
template <> constexpr TF_DataType tf_type_of<int32_t>() { return TF_INT32; }
template <> constexpr TF_DataType tf_type_of<int64_t>() { return TF_INT64; }

// Reduces [rows, cols] row-wise into `out` (rows elements).
template <typename T, typename R, bool MEAN>
void launch_rows(OpCall& c, const T* in, T* out, int64_t rows, int64_t cols,
                 const char* name) {
  using C = compute_t<T>;
  const int sm = c.sm_count();
  if (cols <= 16 && rows >= 4 * static_cast<int64_t>(sm) * kThreads / 32) {
    c.launch(name, rows_thread_kernel<T, R, MEAN>, dim3(grid_for(rows, sm)), dim3(kThreads), in,
             out, rows, cols);
    return;
  }
  if (cols <= 1024) {
    const int64_t blocks_needed = (rows + (kThreads / 32) - 1) / (kThreads / 32);
    const unsigned grid = static_cast<unsigned>(
        blocks_needed < static_cast<int64_t>(sm) * 16 ? blocks_needed : static_cast<int64_t>(sm) * 16);
    c.launch(name, rows_warp_kernel<T, T, T, R, MEAN>, dim3(grid), dim3(kThreads), in, out, rows,
             cols, cols);
    return;
  }
  if (rows >= 2 * static_cast<int64_t>(sm)) {
    const unsigned grid = static_cast<unsigned>(rows < static_cast<int64_t>(sm) * 16 ? rows : static_cast<int64_t>(sm) * 16);
    c.launch(name, rows_block_kernel<T, R, MEAN>, dim3(grid), dim3(kThreads), in, out, rows, cols);
    return;
  }
  // Few long rows: split each row over several blocks, then combine.
  int64_t splits = (static_cast<int64_t>(sm) * 8 + rows - 1) / rows;
  const int64_t by_size = (cols + 4095) / 4096;  // at least 4096 elements each
  if (splits > by_size) splits = by_size;
  if (splits > 1024) splits = 1024;
  if (splits <= 1) {  // short enough for one block per row
    c.launch(name, rows_block_kernel<T, R, MEAN>, dim3(static_cast<unsigned>(rows)),
             dim3(kThreads), in, out, rows, cols);
    return;
  }
  TensorPtr tmp = c.temp(tf_type_of<C>(), rows * splits);
  if (!tmp) return;
  C* partial = static_cast<C*>(TF_TensorData(tmp.get()));
  if (!c.launch(name, rows_split_kernel<T, R>,
                dim3(static_cast<unsigned>(splits), static_cast<unsigned>(rows)), dim3(kThreads),
                in, partial, cols)) {
    return;
  }
  const unsigned grid2 = static_cast<unsigned>((rows + (kThreads / 32) - 1) / (kThreads / 32));
  c.launch(name, rows_warp_kernel<T, C, T, R, MEAN>, dim3(grid2), dim3(kThreads), partial, out,
           rows, splits, cols);
}

template <typename T, typename R, bool MEAN>
void launch_cols(OpCall& c, const T* in, T* out, int64_t outer, int64_t rlen, int64_t inner,
                 const char* name) {
  using C = compute_t<T>;
  int X = 2;
  while (X < inner && X < 32) X *= 2;
  const dim3 block(X, kThreads / X);
  const size_t shmem = static_cast<size_t>(block.y) * (X + 1) * sizeof(C);
  const int64_t tiles_inner = (inner + X - 1) / X;
  const int64_t tiles = outer * tiles_inner;
  const int64_t cap = static_cast<int64_t>(c.sm_count()) * 8;
  // Few output tiles and a long reduced axis: split the axis over blocks.
  int64_t splits = 1;
  if (tiles < 2 * static_cast<int64_t>(c.sm_count()) && rlen >= 4096) {
    splits = (cap + tiles - 1) / tiles;
    const int64_t by_size = rlen / 1024;  // at least 1024 reduced rows per chunk
    if (splits > by_size) splits = by_size;
    if (splits > 65535) splits = 65535;
  }
  if (splits <= 1) {
    const int64_t blocks = tiles < cap ? tiles : cap;
    c.launch_smem(name, cols_kernel<T, T, T, R, MEAN>, dim3(static_cast<unsigned>(blocks)), block,
                  shmem, in, out, outer, rlen, inner, tiles_inner, rlen);
    return;
  }
  TensorPtr tmp = c.temp(tf_type_of<C>(), outer * splits * inner);
  if (!tmp) return;
  C* partial = static_cast<C*>(TF_TensorData(tmp.get()));
  if (!c.launch_smem(name, cols_split_kernel<T, R>,
                     dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(splits)), block,
                     shmem, in, partial, outer, rlen, inner, tiles_inner)) {
    return;
  }
  const int64_t blocks = tiles < cap ? tiles : cap;
  c.launch_smem(name, cols_kernel<T, C, T, R, MEAN>, dim3(static_cast<unsigned>(blocks)), block,
                shmem, partial, out, outer, splits, inner, tiles_inner, rlen);
}

struct ReduceState {
  const char* name;
  bool keep_dims;
};

template <typename T, typename R, bool MEAN>
void run_reduce(OpCall& c, const char* name, TF_DataType dt, const Shape& s,
                const bool* reduced, const void* in_ptr, void* out_ptr, int64_t out_n) {
  const T* in = static_cast<const T*>(in_ptr);
  T* out = static_cast<T*>(out_ptr);
  const int64_t n = s.num_elements();
  if (n == 0) {
    c.launch(name, empty_reduce_kernel<T, R, MEAN>, dim3(grid_for(out_n, c.sm_count())),
             dim3(kThreads), out, out_n);
    return;
  }
  // Collapse: drop size-1 dims, merge neighbours with the same flag.
  int64_t gd[TF_MAX_DIMS];
  bool gr[TF_MAX_DIMS];
  int ng = 0;
  for (int i = 0; i < s.rank; ++i) {
    if (s.dims[i] == 1) continue;
    if (ng > 0 && gr[ng - 1] == reduced[i]) {
      gd[ng - 1] *= s.dims[i];
    } else {
      gd[ng] = s.dims[i];
      gr[ng] = reduced[i];
      ++ng;
    }
  }
  bool any_reduced = false;
  for (int g = 0; g < ng; ++g) any_reduced = any_reduced || gr[g];
  if (!any_reduced) {
    // Only size-1 axes are reduced: the values are unchanged.
    c.check_cuda(cudaMemcpyAsync(out, in, static_cast<size_t>(n) * sizeof(T),
                                 cudaMemcpyDeviceToDevice, c.stream()),
                 "cudaMemcpyAsync(reduction copy)");
    return;
  }
  if (ng == 1) {
    launch_rows<T, R, MEAN>(c, in, out, 1, gd[0], name);
  } else if (ng == 2 && !gr[0]) {
    launch_rows<T, R, MEAN>(c, in, out, gd[0], gd[1], name);
  } else if (ng == 2) {
    launch_cols<T, R, MEAN>(c, in, out, 1, gd[0], gd[1], name);
  } else if (ng == 3 && !gr[0]) {
    launch_cols<T, R, MEAN>(c, in, out, gd[0], gd[1], gd[2], name);
  } else {
    // Move the kept axes to the front (into a temporary), then reduce rows.
    int perm[TF_MAX_DIMS];
    int np = 0;
    int64_t kept = 1, red = 1;
    for (int g = 0; g < ng; ++g) {
      if (!gr[g]) {
        perm[np++] = g;
        kept *= gd[g];
      }
    }
    for (int g = 0; g < ng; ++g) {
      if (gr[g]) {
        perm[np++] = g;
        red *= gd[g];
      }
    }
    TensorPtr tmp = c.temp(dt, n);
    if (!tmp) return;
    T* t = static_cast<T*>(TF_TensorData(tmp.get()));
    cudaError_t e = launch_transpose(in, t, sizeof(T), ng, gd, perm, c.stream(), c.sm_count());
    if (e == cudaErrorNotSupported) {
      (void)cudaGetLastError();
      c.fail(TF_UNIMPLEMENTED, "%s: too many alternating reduced and kept axes", name);
      return;
    }
    if (!c.check_cuda(e, "transpose for reduction")) return;
    launch_rows<T, R, MEAN>(c, t, out, kept, red, name);
  }
}

void* reduce_create(TF_OpKernelConstruction* ctx) {
  TF_StringView op = TF_OpKernelConstruction_GetName(ctx);
  const std::string name(op.data != nullptr ? op.data : "", op.len);
  const char* stable = "Reduce";
  for (const char* known : {"Sum", "Mean", "Max", "Min", "Prod"}) {
    if (name == known) stable = known;
  }
  AttrReader attrs(ctx, stable);
  const bool keep_dims = attrs.get_bool("keep_dims", false);
  if (!attrs.ok()) return nullptr;
  return new (std::nothrow) ReduceState{stable, keep_dims};
}

void reduce_delete(void* p) { delete static_cast<ReduceState*>(p); }

template <typename R, bool MEAN>
void reduce_compute(void* kernel, TF_OpKernelContext* ctx) {
  const ReduceState* st = static_cast<const ReduceState*>(kernel);
  const char* name = st != nullptr ? st->name : "Reduce";
  const bool keep_dims = st != nullptr && st->keep_dims;
  OpCall c(ctx, OpCall::kMayDefer);
  if (!c.ok()) return;
  TensorPtr x = c.input(0);
  if (!x) return;
  TensorPtr axes_t = c.input(1);
  if (!axes_t) return;
  const Shape s = Shape::of(x.get());
  // Axes: int32/int64 scalar or vector, negative counted from the end.
  const TF_DataType at = TF_TensorType(axes_t.get());
  const int64_t na = TF_TensorElementCount(axes_t.get());
  if (TF_NumDims(axes_t.get()) > 1) {
    c.fail(TF_INVALID_ARGUMENT, "reduction_indices must be a scalar or vector");
    return;
  }
  if (at != TF_INT32 && at != TF_INT64) {
    c.fail(TF_INVALID_ARGUMENT, "reduction_indices must be int32 or int64, got %s",
           dtype_name(at));
    return;
  }
  bool reduced[TF_MAX_DIMS] = {false};
  const void* ad = TF_TensorData(axes_t.get());
  for (int64_t i = 0; i < na; ++i) {
    const int64_t raw = at == TF_INT32 ? static_cast<const int32_t*>(ad)[i]
                                       : static_cast<const int64_t*>(ad)[i];
    if (raw < -s.rank || raw >= s.rank) {
      c.fail(TF_INVALID_ARGUMENT,
             "Invalid reduction dimension (%lld for input with %d dimension(s)",
             static_cast<long long>(raw), s.rank);
      return;
    }
    const int64_t ax = raw < 0 ? raw + s.rank : raw;
    if (reduced[ax]) {
      c.fail(TF_INVALID_ARGUMENT, "Invalid reduction arguments: Axes contains duplicate dimension: %lld",
             static_cast<long long>(ax));
      return;
    }
    reduced[ax] = true;
  }
  Shape so;
  so.rank = 0;
  for (int i = 0; i < s.rank; ++i) {
    if (!reduced[i]) {
      so.dims[so.rank++] = s.dims[i];
    } else if (keep_dims) {
      so.dims[so.rank++] = 1;
    }
  }
  const TF_DataType dt = TF_TensorType(x.get());
  TensorPtr out = c.output(0, dt, so);
  if (!out) return;
  const int64_t out_n = so.num_elements();
  if (out_n == 0) return;
  const void* in = TF_TensorData(x.get());
  void* o = TF_TensorData(out.get());
  const bool handled = dispatch_numeric(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    run_reduce<T, R, MEAN>(c, name, dt, s, reduced, in, o, out_n);
  });
  if (!handled) c.fail(TF_UNIMPLEMENTED, "%s: dtype %s", name, dtype_name(dt));
}

// ---------------------------------------------------------------------------
// BiasAddGrad: the sum over every axis but the channel axis.

void* bias_grad_create(TF_OpKernelConstruction* ctx) {
  AttrReader attrs(ctx, "BiasAddGrad");
  const std::string fmt = attrs.get_string("data_format", "NHWC");
  if (!attrs.ok()) return nullptr;
  if (fmt != "NHWC" && fmt != "NCHW") {
    attrs.fail(TF_INVALID_ARGUMENT, "data_format must be NHWC or NCHW, got %s", fmt.c_str());
    return nullptr;
  }
  static char kNhwc[] = "NHWC", kNchw[] = "NCHW";
  return fmt == "NCHW" ? kNchw : kNhwc;
}

void bias_grad_compute(void* kernel, TF_OpKernelContext* ctx) {
  const bool nchw = kernel != nullptr && static_cast<const char*>(kernel)[1] == 'C';
  OpCall c(ctx);
  if (!c.ok()) return;
  TensorPtr x = c.input(0);
  if (!x) return;
  const Shape s = Shape::of(x.get());
  if (s.rank < 2) {
    char b[256];
    c.fail(TF_INVALID_ARGUMENT, "BiasAddGrad: input tensor must be at least 2D: %s",
           shape_str(s, b, sizeof(b)));
    return;
  }
  const int channel = nchw && s.rank >= 3 ? 1 : s.rank - 1;
  bool reduced[TF_MAX_DIMS] = {false};
  for (int d = 0; d < s.rank; ++d) reduced[d] = d != channel;
  Shape so;
  so.rank = 1;
  so.dims[0] = s.dims[channel];
  const TF_DataType dt = TF_TensorType(x.get());
  TensorPtr out = c.output(0, dt, so);
  if (!out || so.dims[0] == 0) return;
  const bool handled = dispatch_numeric(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    run_reduce<T, SumR, false>(c, "BiasAddGrad", dt, s, reduced, TF_TensorData(x.get()),
                               TF_TensorData(out.get()), so.dims[0]);
  });
  if (!handled) c.fail(TF_UNIMPLEMENTED, "BiasAddGrad: dtype %s", dtype_name(dt));
}

// ---------------------------------------------------------------------------
// ArgMax / ArgMin over one axis of [outer, len, inner]: the first index of
// the extreme value; NaN counts as the extreme (the first NaN wins). The
// 8- and 16-bit integers are compared as int (warp shuffles need 32 bits).

template <typename T> struct ArgCompute { using type = compute_t<T>; };
template <> struct ArgCompute<int8_t> { using type = int; };
template <> struct ArgCompute<uint8_t> { using type = int; };
template <> struct ArgCompute<int16_t> { using type = int; };

template <bool MAX, typename C>
__device__ __forceinline__ bool arg_better(C v, int64_t i, C bv, int64_t bi) {
  if (v != v) return !(bv != bv) || i < bi;
  if (bv != bv) return false;
  if (MAX ? v > bv : v < bv) return true;
  return v == bv && i < bi;
}

template <bool MAX, typename C>
__device__ __forceinline__ void arg_combine(C& bv, int64_t& bi, C v, int64_t i) {
  if (arg_better<MAX>(v, i, bv, bi)) {
    bv = v;
    bi = i;
  }
}

template <bool MAX, typename C>
__device__ __forceinline__ void arg_warp_reduce(C& v, int64_t& i) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const C ov = __shfl_down_sync(0xffffffffu, v, off);
    const int64_t oi = __shfl_down_sync(0xffffffffu, i, off);
    arg_combine<MAX>(v, i, ov, oi);
  }
}

// inner == 1: one warp per row (WARP) or one block per row.
template <typename T, typename O, bool MAX, bool WARP>
__global__ void arg_rows_kernel(const T* __restrict__ in, O* __restrict__ out, int64_t rows,
                                int64_t len) {
  using C = typename ArgCompute<T>::type;
  const int lane = threadIdx.x & 31;
  const int64_t unit = WARP ? ((static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5)
                            : blockIdx.x;
  const int64_t units = WARP ? ((static_cast<int64_t>(gridDim.x) * blockDim.x) >> 5) : gridDim.x;
  const int tid = WARP ? lane : threadIdx.x;
  const int nth = WARP ? 32 : blockDim.x;
  __shared__ C sv[32];
  __shared__ int64_t si[32];
  for (int64_t row = unit; row < rows; row += units) {
    const T* p = in + row * len;
    C bv = to_compute(p[0]);
    int64_t bi = 0;
    for (int64_t j = tid; j < len; j += nth) {
      arg_combine<MAX>(bv, bi, static_cast<C>(to_compute(p[j])), j);
    }
    arg_warp_reduce<MAX>(bv, bi);
    if (!WARP) {
      const int wid = threadIdx.x >> 5;
      __syncthreads();
      if (lane == 0) {
        sv[wid] = bv;
        si[wid] = bi;
      }
      __syncthreads();
      if (wid == 0) {
        const int nw = blockDim.x >> 5;
        bv = lane < nw ? sv[lane] : sv[0];
        bi = lane < nw ? si[lane] : si[0];
        arg_warp_reduce<MAX>(bv, bi);
      }
    }
    if (tid == 0) out[row] = static_cast<O>(bi);
  }
}

// inner > 1: one thread per (outer, inner) position, walking the axis.
template <typename T, typename O, bool MAX>
__global__ void arg_cols_kernel(const T* __restrict__ in, O* __restrict__ out, int64_t n,
                                int64_t len, int64_t inner) {
  using C = typename ArgCompute<T>::type;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += stride) {
    const int64_t o = k / inner, i = k - o * inner;
    const T* p = in + o * len * inner + i;
    C bv = to_compute(p[0]);
    int64_t bi = 0;
    for (int64_t j = 1; j < len; ++j) {
      arg_combine<MAX>(bv, bi, static_cast<C>(to_compute(p[j * inner])), j);
    }
    out[k] = static_cast<O>(bi);
  }
}

template <const char* NAME>
void* arg_create(TF_OpKernelConstruction* ctx) {
  AttrReader attrs(ctx, NAME);
  const TF_DataType ot = attrs.get_type("output_type", TF_INT64);
  if (!attrs.ok()) return nullptr;
  return new (std::nothrow) TF_DataType(ot);
}
void arg_delete(void* p) { delete static_cast<TF_DataType*>(p); }

template <bool MAX>
void arg_compute(void*, TF_OpKernelContext* ctx) {
  const char* name = MAX ? "ArgMax" : "ArgMin";
  OpCall c(ctx);
  if (!c.ok()) return;
  TensorPtr x = c.input(0), dim_t = c.input(1);
  if (!x || !dim_t) return;
  const Shape s = Shape::of(x.get());
  int64_t axis = 0;
  if (!read_host_scalar(c, dim_t.get(), name, "dimension", &axis)) return;
  const int r = s.rank > 0 ? s.rank : 1;
  if (axis < -r || axis >= r) {
    c.fail(TF_INVALID_ARGUMENT, "%s: expected dimension in the range [%d, %d), but got %lld",
           name, -r, r, static_cast<long long>(axis));
    return;
  }
  if (axis < 0) axis += r;
  const int64_t len = s.rank > 0 ? s.dims[axis] : 1;
  if (len == 0) {
    char b[256];
    c.fail(TF_INVALID_ARGUMENT, "%s: reduction axis %lld is empty in shape %s", name,
           static_cast<long long>(axis), shape_str(s, b, sizeof(b)));
    return;
  }
  Shape so;
  so.rank = 0;
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < s.rank; ++d) {
    if (d == axis) continue;
    so.dims[so.rank++] = s.dims[d];
    if (d < axis) outer *= s.dims[d];
    else inner *= s.dims[d];
  }
  const TF_DataType ot = TF_ExpectedOutputDataType(ctx, 0);
  TensorPtr out = c.output(0, ot, so);
  if (!out) return;
  const int64_t n = so.num_elements();
  if (n == 0) return;
  const TF_DataType dt = TF_TensorType(x.get());
  const int sm = c.sm_count();
  bool out_ok = true;
  const bool handled = dispatch_all<uint8_t>(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = static_cast<const T*>(TF_TensorData(x.get()));
    auto go = [&](auto otag) {
      using O = typename decltype(otag)::type;
      O* o = static_cast<O*>(TF_TensorData(out.get()));
      if (inner > 1) {
        arg_cols_kernel<T, O, MAX><<<grid_for(n, sm), kThreads, 0, c.stream()>>>(in, o, n, len,
                                                                                inner);
      } else if (len <= 1024 || outer >= 4 * static_cast<int64_t>(sm)) {
        int64_t blocks = (outer + (kThreads / 32) - 1) / (kThreads / 32);
        if (blocks > static_cast<int64_t>(sm) * 16) blocks = static_cast<int64_t>(sm) * 16;
        arg_rows_kernel<T, O, MAX, true><<<static_cast<unsigned>(blocks), kThreads, 0,
                                           c.stream()>>>(in, o, outer, len);
      } else {
        arg_rows_kernel<T, O, MAX, false><<<static_cast<unsigned>(outer), kThreads, 0,
                                            c.stream()>>>(in, o, outer, len);
      }
      c.check_launch(name);
    };
    switch (ot) {
      case TF_INT16: go(Tag<int16_t>{}); break;
      case TF_UINT16: go(Tag<uint16_t>{}); break;
      case TF_INT32: go(Tag<int32_t>{}); break;
      case TF_INT64: go(Tag<int64_t>{}); break;
      default: out_ok = false; break;
    }
  });
  if (!handled || !out_ok) {
    c.fail(TF_UNIMPLEMENTED, "%s: input dtype %s, output_type %s", name, dtype_name(dt),
           dtype_name(ot));
  }
}

// ---------------------------------------------------------------------------
// Softmax and LogSoftmax over the last axis.

__device__ __forceinline__ float m_exp(float x) { return expf(x); }
__device__ __forceinline__ double m_exp(double x) { return exp(x); }
__device__ __forceinline__ float m_log(float x) { return logf(x); }
__device__ __forceinline__ double m_log(double x) { return log(x); }

struct MaxPlainR {
  template <typename C> __device__ static C init() { return -C(INFINITY); }
  template <typename C> __device__ static C combine(C a, C b) { return a > b ? a : b; }
};

template <typename R, typename C>
__device__ __forceinline__ C warp_allreduce(C v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = R::combine(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// VEC elements of T moved as one aligned access.
template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) SoftmaxPack {
  T v[VEC];
};

// One warp per row of at most 32 * ELEMS elements, held in registers: lane l
// keeps the VEC-element chunks l, l + 32, ... so the row is read once. VEC
// is 4 for float rows whose length is a multiple of 4 and whose data is
// 16-byte aligned (a quarter of the memory instructions; each lane then
// sums other elements than with VEC 1, so results may differ in the last
// bit), else 1. LOG: x - max - log(sum exp(x - max)), else exp(x - max) / sum.
template <typename T, int ELEMS, int VEC, bool LOG>
__global__ void softmax_warp_kernel(const T* __restrict__ in, T* __restrict__ out,
                                    int64_t rows, int cols) {
  using C = compute_t<T>;
  using Pack = SoftmaxPack<T, VEC>;
  constexpr int G = ELEMS / VEC;
  static_assert(G * VEC == ELEMS, "ELEMS must be a multiple of VEC");
  const int lane = threadIdx.x & 31;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int64_t nwarps = (static_cast<int64_t>(gridDim.x) * blockDim.x) >> 5;
  const int chunks = cols / VEC;
  for (int64_t row = warp; row < rows; row += nwarps) {
    const Pack* p = reinterpret_cast<const Pack*>(in + row * cols);
    Pack* q = reinterpret_cast<Pack*>(out + row * cols);
    C v[ELEMS];
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const int ch = lane + 32 * g;
      if (ch < chunks) {
        const Pack x = p[ch];
#pragma unroll
        for (int j = 0; j < VEC; ++j) v[VEC * g + j] = to_compute(x.v[j]);
      } else {
#pragma unroll
        for (int j = 0; j < VEC; ++j) v[VEC * g + j] = -C(INFINITY);
      }
    }
    C m = -C(INFINITY);
#pragma unroll
    for (int e = 0; e < ELEMS; ++e) m = MaxPlainR::combine(m, v[e]);
    m = warp_allreduce<MaxPlainR>(m);
    C sum = C(0);
#pragma unroll
    for (int e = 0; e < ELEMS; ++e) {
      if (lane + 32 * (e / VEC) < chunks) {
        v[e] -= m;
        const C ex = m_exp(v[e]);
        if (!LOG) v[e] = ex;
        sum += ex;
      }
    }
    sum = warp_allreduce<SumR>(sum);
    const C lse = LOG ? m_log(sum) : C(0);
    const C inv = C(1) / sum;  // one division per row, not per element
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const int ch = lane + 32 * g;
      if (ch < chunks) {
        Pack y;
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          const C e = v[VEC * g + j];
          y.v[j] = from_compute<T>(LOG ? e - lse : e * inv);
        }
        q[ch] = y;
      }
    }
  }
}

template <typename T, int ELEMS, bool LOG>
void launch_softmax_warp(OpCall& c, const T* in, T* out, int64_t rows, int64_t cols) {
  const int64_t cap = static_cast<int64_t>(c.sm_count()) * 16;
  int64_t blocks = (rows + (kThreads / 32) - 1) / (kThreads / 32);
  if (blocks > cap) blocks = cap;
  const dim3 grid(static_cast<unsigned>(blocks));
  if constexpr (std::is_same<T, float>::value && ELEMS % 4 == 0) {
    if (cols % 4 == 0 && (reinterpret_cast<uintptr_t>(in) & 15) == 0 &&
        (reinterpret_cast<uintptr_t>(out) & 15) == 0) {
      c.launch(LOG ? "LogSoftmax" : "Softmax", softmax_warp_kernel<T, ELEMS, 4, LOG>, grid,
               dim3(kThreads), in, out, rows, static_cast<int>(cols));
      return;
    }
  }
  c.launch(LOG ? "LogSoftmax" : "Softmax", softmax_warp_kernel<T, ELEMS, 1, LOG>, grid,
           dim3(kThreads), in, out, rows, static_cast<int>(cols));
}

// One block per row; every thread gets the block's result.
template <typename R, typename C>
__device__ __forceinline__ C block_allreduce(C v) {
  __shared__ C result;
  v = block_reduce<R>(v);
  if (threadIdx.x == 0) result = v;
  __syncthreads();
  v = result;
  __syncthreads();  // `result` may be written again by the next call
  return v;
}

// One block per row. CACHE: the row (as C) is kept in dynamic shared memory
// (cols values), so global memory is read once.
template <typename T, bool CACHE, bool LOG>
__global__ void softmax_block_kernel(const T* __restrict__ in, T* __restrict__ out,
                                     int64_t rows, int64_t cols) {
  using C = compute_t<T>;
  extern __shared__ unsigned char smem[];
  C* row_cache = reinterpret_cast<C*>(smem);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* p = in + row * cols;
    T* q = out + row * cols;
    C m = -C(INFINITY);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const C v = to_compute(p[j]);
      if (CACHE) row_cache[j] = v;
      m = MaxPlainR::combine(m, v);
    }
    m = block_allreduce<MaxPlainR>(m);
    C sum = C(0);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const C e = m_exp((CACHE ? row_cache[j] : to_compute(p[j])) - m);
      if (CACHE && !LOG) row_cache[j] = e;
      sum += e;
    }
    sum = block_allreduce<SumR>(sum);
    const C lse = LOG ? m_log(sum) : C(0);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      if (LOG) {
        const C x = CACHE ? row_cache[j] : to_compute(p[j]);
        q[j] = from_compute<T>(x - m - lse);
      } else {
        const C e = CACHE ? row_cache[j] : m_exp(to_compute(p[j]) - m);
        q[j] = from_compute<T>(e / sum);
      }
    }
    // Each thread touches only its own cache entries, so the next row can
    // reuse the cache without a barrier.
  }
}

template <bool LOG>
void softmax_compute(void*, TF_OpKernelContext* ctx) {
  const char* name = LOG ? "LogSoftmax" : "Softmax";
  OpCall c(ctx, OpCall::kMayDefer);
  if (!c.ok()) return;
  TensorPtr x = c.input(0);
  if (!x) return;
  const Shape s = Shape::of(x.get());
  if (s.rank < 1) {
    c.fail(TF_INVALID_ARGUMENT, "%s: logits must have >= 1 dimension, got rank 0", name);
    return;
  }
  const TF_DataType dt = TF_TensorType(x.get());
  TensorPtr out = c.output(0, dt, s);
  if (!out) return;
  const int64_t n = s.num_elements();
  if (n == 0) return;
  const int64_t cols = s.dims[s.rank - 1];
  const int64_t rows = n / cols;
  const void* in = TF_TensorData(x.get());
  void* o = TF_TensorData(out.get());
  const int64_t cap = static_cast<int64_t>(c.sm_count()) * 16;
  const bool handled = dispatch_float(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = static_cast<const T*>(in);
    T* dst = static_cast<T*>(o);
    if (cols <= 32) {
      launch_softmax_warp<T, 1, LOG>(c, src, dst, rows, cols);
    } else if (cols <= 64) {
      launch_softmax_warp<T, 2, LOG>(c, src, dst, rows, cols);
    } else if (cols <= 128) {
      launch_softmax_warp<T, 4, LOG>(c, src, dst, rows, cols);
    } else if (cols <= 256) {
      launch_softmax_warp<T, 8, LOG>(c, src, dst, rows, cols);
    } else if (cols <= 512) {
      launch_softmax_warp<T, 16, LOG>(c, src, dst, rows, cols);
    } else if (cols <= 1024) {
      launch_softmax_warp<T, 32, LOG>(c, src, dst, rows, cols);
    } else {
      using C = compute_t<T>;
      const int64_t blocks = rows < cap ? rows : cap;
      const size_t cache_bytes = static_cast<size_t>(cols) * sizeof(C);
      if (cache_bytes <= 32 * 1024) {
        c.launch_smem(name, softmax_block_kernel<T, true, LOG>,
                      dim3(static_cast<unsigned>(blocks)), dim3(kThreads), cache_bytes, src, dst,
                      rows, cols);
      } else {
        c.launch(name, softmax_block_kernel<T, false, LOG>, dim3(static_cast<unsigned>(blocks)),
                 dim3(kThreads), src, dst, rows, cols);
      }
    }
  });
  if (!handled) c.fail(TF_UNIMPLEMENTED, "%s: dtype %s", name, dtype_name(dt));
}

constexpr char kArgMax[] = "ArgMax";
constexpr char kArgMin[] = "ArgMin";

}  // namespace

bool sum_leading_rows(OpCall& c, const char* name, TF_DataType dt, const void* in, void* out,
                      int64_t rows, int64_t cols) {
  Shape s;
  s.rank = 2;
  s.dims[0] = rows;
  s.dims[1] = cols;
  const bool reduced[TF_MAX_DIMS] = {true, false};
  const bool handled = dispatch_float(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    run_reduce<T, SumR, false>(c, name, dt, s, reduced, in, out, cols);
  });
  if (!handled) return c.fail(TF_UNIMPLEMENTED, "%s: column sum of dtype %s", name, dtype_name(dt));
  return c.ok();
}

void register_reduce_kernels() {
  for (TF_DataType t : kNumericTypes) {
    register_kernel("Sum", reduce_create, reduce_compute<SumR, false>, reduce_delete,
                    {{"T", t}}, {"reduction_indices"});
    register_kernel("Mean", reduce_create, reduce_compute<SumR, true>, reduce_delete,
                    {{"T", t}}, {"reduction_indices"});
    register_kernel("Max", reduce_create, reduce_compute<MaxR, false>, reduce_delete,
                    {{"T", t}}, {"reduction_indices"});
    register_kernel("Min", reduce_create, reduce_compute<MinR, false>, reduce_delete,
                    {{"T", t}}, {"reduction_indices"});
    register_kernel("Prod", reduce_create, reduce_compute<ProdR, false>, reduce_delete,
                    {{"T", t}}, {"reduction_indices"});
    register_kernel("BiasAddGrad", bias_grad_create, bias_grad_compute, no_delete, {{"T", t}});
  }
  for (TF_DataType t : kAllTypes) {
    if (t == TF_BOOL) continue;  // ArgMax / ArgMin take real numbers
    // TensorFlow allows int16 indices for ArgMax only.
    for (TF_DataType o : {TF_INT16, TF_INT32, TF_INT64}) {
      register_kernel("ArgMax", arg_create<kArgMax>, arg_compute<true>, arg_delete,
                      {{"T", t}, {"output_type", o}}, {"dimension"});
      if (o == TF_INT16) continue;
      register_kernel("ArgMin", arg_create<kArgMin>, arg_compute<false>, arg_delete,
                      {{"T", t}, {"output_type", o}}, {"dimension"});
    }
  }
  for (TF_DataType t : kFloatTypes) {
    register_kernel("Softmax", nullptr, softmax_compute<false>, nullptr, {{"T", t}});
    register_kernel("LogSoftmax", nullptr, softmax_compute<true>, nullptr, {{"T", t}});
  }
}

}  // namespace pgcuda
