// Shape kernels: Transpose (also used by the reductions through
// launch_transpose), Reshape, ExpandDims, Squeeze and Identity (zero copy),
// Fill and Range.
//
// Transpose simplifies the permutation first: size-1 dims are dropped and
// runs of input axes that stay adjacent and in order are merged. What is left
// is a plain copy (rank <= 1), a batched 2-d transpose through a 32x32
// shared-memory tile ([B, R, C] -> [B, C, R]), or a generic gather over at
// most kMaxTransposeDims dims. Kernels move raw bytes (1, 2, 4 or 8 wide).
#include <cmath>
#include <cstring>

#include "kernel_util.h"

namespace pgcuda {
namespace {

constexpr int kTile = 32;
constexpr int kTileRows = 8;  // blockDim.y of the tiled kernel
constexpr int kMaxTransposeDims = TF_MAX_DIMS;  // every shape the core can make fits

// [B, R, C] -> [B, C, R]. One block per 32x32 tile (grid-stride over all
// tiles); the tile row is padded by one element against bank conflicts.
template <typename T>
__global__ void transpose_tiled_kernel(const T* __restrict__ in, T* __restrict__ out,
                                       int64_t R, int64_t C, int64_t tiles_r,
                                       int64_t tiles_c, int64_t total_tiles) {
  __shared__ T tile[kTile][kTile + 1];
  for (int64_t t = blockIdx.x; t < total_tiles; t += gridDim.x) {
    const int64_t tc = t % tiles_c;
    const int64_t rest = t / tiles_c;
    const int64_t tr = rest % tiles_r;
    const int64_t b = rest / tiles_r;
    const int64_t r0 = tr * kTile, c0 = tc * kTile;
    const T* ib = in + b * R * C;
    T* ob = out + b * R * C;
    // Read rows r0.. of the input, coalesced along C.
    for (int j = threadIdx.y; j < kTile; j += kTileRows) {
      const int64_t r = r0 + j, c = c0 + threadIdx.x;
      if (r < R && c < C) tile[j][threadIdx.x] = ib[r * C + c];
    }
    __syncthreads();
    // Write rows c0.. of the output, coalesced along R.
    for (int j = threadIdx.y; j < kTile; j += kTileRows) {
      const int64_t oc = c0 + j, orow = r0 + threadIdx.x;
      if (oc < C && orow < R) ob[oc * R + orow] = tile[threadIdx.x][j];
    }
    __syncthreads();
  }
}

// Output dims (right-aligned) and, for each, the input stride of that axis.
struct TransposeParams {
  int rank;
  int64_t out_dims[kMaxTransposeDims];
  int64_t in_strides[kMaxTransposeDims];
};

template <typename T, typename I>
__global__ void transpose_generic_kernel(const T* __restrict__ in, T* __restrict__ out,
                                         I n, TransposeParams p) {
  const I stride = static_cast<I>(gridDim.x) * blockDim.x;
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    I rem = i, off = 0;
#pragma unroll
    for (int d = kMaxTransposeDims - 1; d >= 0; --d) {
      if (d < kMaxTransposeDims - p.rank) break;
      const I dim = static_cast<I>(p.out_dims[d]);
      const I q = rem / dim;
      off += (rem - q * dim) * static_cast<I>(p.in_strides[d]);
      rem = q;
    }
    out[i] = in[off];
  }
}

template <typename T>
cudaError_t run_transpose(const void* in, void* out, int rank, const int64_t* dims,
                          const int* perm, int64_t n, cudaStream_t stream,
                          int sm_count) {
  const T* src = static_cast<const T*>(in);
  T* dst = static_cast<T*>(out);
  const bool swap2 = rank == 2 && perm[0] == 1 && perm[1] == 0;
  const bool swap3 = rank == 3 && perm[0] == 0 && perm[1] == 2 && perm[2] == 1;
  if (swap2 || swap3) {
    const int64_t B = swap3 ? dims[0] : 1;
    const int64_t R = swap3 ? dims[1] : dims[0];
    const int64_t C = swap3 ? dims[2] : dims[1];
    const int64_t tiles_r = (R + kTile - 1) / kTile, tiles_c = (C + kTile - 1) / kTile;
    const int64_t total = B * tiles_r * tiles_c;
    int64_t blocks = total;
    const int64_t cap = static_cast<int64_t>(sm_count) * 16;
    if (blocks > cap) blocks = cap;
    transpose_tiled_kernel<T><<<static_cast<unsigned>(blocks), dim3(kTile, kTileRows), 0,
                                stream>>>(src, dst, R, C, tiles_r, tiles_c, total);
    return cudaGetLastError();
  }
  if (rank > kMaxTransposeDims) return cudaErrorNotSupported;
  int64_t in_strides[TF_MAX_DIMS];
  int64_t s = 1;
  for (int d = rank - 1; d >= 0; --d) {
    in_strides[d] = s;
    s *= dims[d];
  }
  TransposeParams p;
  p.rank = rank;
  for (int k = 0; k < kMaxTransposeDims; ++k) {
    p.out_dims[k] = 1;
    p.in_strides[k] = 0;
  }
  for (int k = 0; k < rank; ++k) {
    const int slot = kMaxTransposeDims - rank + k;
    p.out_dims[slot] = dims[perm[k]];
    p.in_strides[slot] = in_strides[perm[k]];
  }
  const unsigned grid = grid_for(n, sm_count);
  if (n <= INT32_MAX) {
    transpose_generic_kernel<T, int32_t><<<grid, kThreads, 0, stream>>>(
        src, dst, static_cast<int32_t>(n), p);
  } else {
    transpose_generic_kernel<T, int64_t><<<grid, kThreads, 0, stream>>>(src, dst, n, p);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_transpose(const void* in, void* out, size_t elem_size, int rank,
                             const int64_t* dims, const int* perm, cudaStream_t stream,
                             int sm_count) {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= dims[i];
  if (n == 0) return cudaSuccess;
  // Drop size-1 axes: keep[i] = new index of input axis i, or -1.
  int keep[TF_MAX_DIMS];
  int64_t kdims[TF_MAX_DIMS];
  int kr = 0;
  for (int i = 0; i < rank; ++i) {
    if (dims[i] == 1) {
      keep[i] = -1;
    } else {
      keep[i] = kr;
      kdims[kr++] = dims[i];
    }
  }
  int kperm[TF_MAX_DIMS];
  int kp = 0;
  for (int i = 0; i < rank; ++i) {
    if (keep[perm[i]] >= 0) kperm[kp++] = keep[perm[i]];
  }
  // Merge output positions whose input axes are consecutive: group g covers
  // input axes [gstart[g], gstart[g] + glen[g]).
  int gstart[TF_MAX_DIMS], glen[TF_MAX_DIMS];
  int ng = 0;
  for (int i = 0; i < kr; ++i) {
    if (ng > 0 && kperm[i] == gstart[ng - 1] + glen[ng - 1]) {
      ++glen[ng - 1];
    } else {
      gstart[ng] = kperm[i];
      glen[ng] = 1;
      ++ng;
    }
  }
  if (ng <= 1) {
    return cudaMemcpyAsync(out, in, static_cast<size_t>(n) * elem_size,
                           cudaMemcpyDeviceToDevice, stream);
  }
  // Collapsed input dims, in input order: group g becomes input axis
  // rank_of[g] (its position when groups are sorted by gstart).
  int rank_of[TF_MAX_DIMS];
  for (int g = 0; g < ng; ++g) {
    int r = 0;
    for (int h = 0; h < ng; ++h) r += gstart[h] < gstart[g] ? 1 : 0;
    rank_of[g] = r;
  }
  int64_t cdims[TF_MAX_DIMS];
  int cperm[TF_MAX_DIMS];
  for (int g = 0; g < ng; ++g) {
    int64_t d = 1;
    for (int k = 0; k < glen[g]; ++k) d *= kdims[gstart[g] + k];
    cdims[rank_of[g]] = d;
    cperm[g] = rank_of[g];
  }
  cudaError_t e = cudaErrorInvalidValue;
  dispatch_size(elem_size, [&](auto tag) {
    using T = typename decltype(tag)::type;
    e = run_transpose<T>(in, out, ng, cdims, cperm, n, stream, sm_count);
  });
  return e;
}

namespace {

void transpose_compute(void*, TF_OpKernelContext* ctx) {
  OpCall c(ctx);
  if (!c.ok()) return;
  TensorPtr x = c.input(0);
  if (!x) return;
  TensorPtr p = c.input(1);
  if (!p) return;
  const Shape s = Shape::of(x.get());
  int64_t perm64[TF_MAX_DIMS];
  int np = 0;
  if (!read_host_ints(c, p.get(), "Transpose", "perm", perm64, TF_MAX_DIMS, &np)) return;
  if (np != s.rank) {
    c.fail(TF_INVALID_ARGUMENT,
           "transpose expects a vector of size %d. But input(1) is a vector of size %d",
           s.rank, np);
    return;
  }
  int perm[TF_MAX_DIMS];
  bool seen[TF_MAX_DIMS] = {false};
  Shape so;
  so.rank = s.rank;
  for (int i = 0; i < np; ++i) {
    const int64_t d = perm64[i];
    if (d < 0 || d >= s.rank) {
      c.fail(TF_INVALID_ARGUMENT, "%lld is out of range [0 .. %d)",
             static_cast<long long>(d), s.rank);
      return;
    }
    if (seen[d]) {
      c.fail(TF_INVALID_ARGUMENT, "%lld is duplicated in perm", static_cast<long long>(d));
      return;
    }
    seen[d] = true;
    perm[i] = static_cast<int>(d);
    so.dims[i] = s.dims[d];
  }
  const TF_DataType dt = TF_TensorType(x.get());
  TensorPtr out = c.output(0, dt, so);
  if (!out) return;
  if (so.num_elements() == 0) return;
  cudaError_t e = launch_transpose(TF_TensorData(x.get()), TF_TensorData(out.get()),
                                   TF_DataTypeSize(dt), s.rank, s.dims, perm, c.stream(),
                                   c.sm_count());
  if (e == cudaErrorNotSupported) {
    (void)cudaGetLastError();
    c.fail(TF_UNIMPLEMENTED, "Transpose: more than %d dimensions after merging",
           kMaxTransposeDims);
    return;
  }
  c.check_cuda(e, "Transpose kernel launch");
}

void reshape_compute(void*, TF_OpKernelContext* ctx) {
  OpCall c(ctx);
  if (!c.ok()) return;
  TensorPtr x = c.input(0);
  if (!x) return;
  TensorPtr shape_t = c.input(1);
  if (!shape_t) return;
  int64_t dims[TF_MAX_DIMS];
  int n = 0;
  if (!read_host_ints(c, shape_t.get(), "Reshape", "shape", dims, TF_MAX_DIMS, &n)) return;
  const int64_t count = TF_TensorElementCount(x.get());
  int unknown = -1;
  int64_t known = 1;
  for (int i = 0; i < n; ++i) {
    if (dims[i] == -1) {
      if (unknown >= 0) {
        c.fail(TF_INVALID_ARGUMENT, "Only one input size may be -1, not both %d and %d",
               unknown, i);
        return;
      }
      unknown = i;
    } else if (dims[i] < 0) {
      c.fail(TF_INVALID_ARGUMENT, "Size %d must be non-negative, not %lld", i,
             static_cast<long long>(dims[i]));
      return;
    } else {
      known *= dims[i];
    }
  }
  if (unknown >= 0) {
    if (known == 0) {
      c.fail(TF_INVALID_ARGUMENT,
             "Reshape cannot infer the missing input size for an empty tensor unless "
             "all specified input sizes are non-zero");
      return;
    }
    if (count % known != 0) {
      c.fail(TF_INVALID_ARGUMENT,
             "Input to reshape is a tensor with %lld values, but the requested shape "
             "requires a multiple of %lld",
             static_cast<long long>(count), static_cast<long long>(known));
      return;
    }
    dims[unknown] = count / known;
    known = count;
  }
  if (known != count) {
    c.fail(TF_INVALID_ARGUMENT,
           "Input to reshape is a tensor with %lld values, but the requested shape has "
           "%lld",
           static_cast<long long>(count), static_cast<long long>(known));
    return;
  }
  TF_SetShape(x.get(), dims, n);
  c.set_output(0, x.get());
}

void identity_compute(void*, TF_OpKernelContext* ctx) {
  OpCall c(ctx);
  if (!c.ok()) return;
  TensorPtr x = c.input(0);
  if (!x) return;
  c.set_output(0, x.get());
}

// Fills `out` with `v`, passed by value: the kernel reads no memory.
template <typename T, bool VEC>
__global__ void fill_kernel(const T v, T* __restrict__ out, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t start = tid;
  if (VEC) {
    constexpr int V = 16 / sizeof(T);
    T arr[V];
#pragma unroll
    for (int j = 0; j < V; ++j) arr[j] = v;
    uint4 raw;
    memcpy(&raw, &arr[0], 16);
    const int64_t nvec = n / V;
    uint4* o = reinterpret_cast<uint4*>(out);
    for (int64_t i = tid; i < nvec; i += stride) o[i] = raw;
    start = nvec * V + tid;
  }
  for (int64_t i = start; i < n; i += stride) out[i] = v;
}

void fill_compute(void*, TF_OpKernelContext* ctx) {
  OpCall c(ctx, OpCall::kMayDefer);
  if (!c.ok()) return;
  TensorPtr dims_t = c.input(0);
  if (!dims_t) return;
  TensorPtr value = c.input(1);
  if (!value) return;
  if (TF_NumDims(value.get()) != 0) {
    c.fail(TF_INVALID_ARGUMENT, "value must be a scalar, got rank %d",
           TF_NumDims(value.get()));
    return;
  }
  Shape so;
  if (!read_host_ints(c, dims_t.get(), "Fill", "dims", so.dims, TF_MAX_DIMS, &so.rank)) return;
  for (int i = 0; i < so.rank; ++i) {
    if (so.dims[i] < 0) {
      c.fail(TF_INVALID_ARGUMENT, "Fill dims must be non-negative, got %lld at %d",
             static_cast<long long>(so.dims[i]), i);
      return;
    }
  }
  const TF_DataType dt = TF_TensorType(value.get());
  TensorPtr out = c.output(0, dt, so);
  if (!out) return;
  const int64_t n = so.num_elements();
  if (n == 0) return;
  // `value` is in host memory (registered so): its bits go to the kernel as
  // an argument, with no copy to the device and no wait.
  const void* v = TF_TensorData(value.get());
  void* o = TF_TensorData(out.get());
  dispatch_size(TF_DataTypeSize(dt), [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int V = 16 / sizeof(T);
    T bits;
    memcpy(&bits, v, sizeof(T));
    if ((reinterpret_cast<uintptr_t>(o) & 15) == 0) {
      c.launch("Fill", fill_kernel<T, true>, dim3(grid_for((n + V - 1) / V, c.sm_count())),
               dim3(kThreads), bits, static_cast<T*>(o), n);
    } else {
      c.launch("Fill", fill_kernel<T, false>, dim3(grid_for(n, c.sm_count())), dim3(kThreads),
               bits, static_cast<T*>(o), n);
    }
  });
}

// Makes the output the input with shape `so` (no copy).
void forward_with_shape(OpCall& c, TF_Tensor* x, const Shape& so) {
  TF_SetShape(x, so.dims, so.rank);
  c.set_output(0, x);
}

void expand_dims_compute(void*, TF_OpKernelContext* ctx) {
  OpCall c(ctx);
  if (!c.ok()) return;
  TensorPtr x = c.input(0), dim_t = c.input(1);
  if (!x || !dim_t) return;
  const Shape s = Shape::of(x.get());
  int64_t dim = 0;
  if (!read_host_scalar(c, dim_t.get(), "ExpandDims", "dim", &dim)) return;
  if (dim < -1 - s.rank || dim > s.rank) {
    c.fail(TF_INVALID_ARGUMENT,
           "ExpandDims: tried to expand dim index %lld for tensor with %d dimensions",
           static_cast<long long>(dim), s.rank);
    return;
  }
  if (s.rank == TF_MAX_DIMS) {
    c.fail(TF_INVALID_ARGUMENT, "ExpandDims: the result would have more than %d dimensions",
           TF_MAX_DIMS);
    return;
  }
  if (dim < 0) dim += s.rank + 1;
  Shape so;
  so.rank = s.rank + 1;
  for (int d = 0, k = 0; d < so.rank; ++d) so.dims[d] = d == dim ? 1 : s.dims[k++];
  forward_with_shape(c, x.get(), so);
}

void* squeeze_create(TF_OpKernelConstruction* ctx) {
  AttrReader attrs(ctx, "Squeeze");
  std::vector<int64_t> dims = attrs.get_int_list("squeeze_dims");
  if (!attrs.ok()) return nullptr;
  return new (std::nothrow) std::vector<int64_t>(std::move(dims));
}
void squeeze_delete(void* p) { delete static_cast<std::vector<int64_t>*>(p); }

void squeeze_compute(void* kernel, TF_OpKernelContext* ctx) {
  const std::vector<int64_t>& axes = *static_cast<const std::vector<int64_t>*>(kernel);
  OpCall c(ctx);
  if (!c.ok()) return;
  TensorPtr x = c.input(0);
  if (!x) return;
  const Shape s = Shape::of(x.get());
  bool squeeze[TF_MAX_DIMS] = {false};
  for (int64_t a : axes) {
    if (a < -s.rank || a >= s.rank) {
      c.fail(TF_INVALID_ARGUMENT,
             "Squeeze: tried to squeeze dim index %lld for tensor with %d dimensions",
             static_cast<long long>(a), s.rank);
      return;
    }
    const int64_t d = a < 0 ? a + s.rank : a;
    if (s.dims[d] != 1) {
      c.fail(TF_INVALID_ARGUMENT,
             "Squeeze: can not squeeze dim[%lld], expected a dimension of 1, got %lld",
             static_cast<long long>(d), static_cast<long long>(s.dims[d]));
      return;
    }
    squeeze[d] = true;
  }
  Shape so;
  so.rank = 0;
  for (int d = 0; d < s.rank; ++d) {
    const bool drop = axes.empty() ? s.dims[d] == 1 : squeeze[d];
    if (!drop) so.dims[so.rank++] = s.dims[d];
  }
  forward_with_shape(c, x.get(), so);
}

// ---------------------------------------------------------------------------
// Range: out[i] = start + T(i) * delta in the arithmetic of T (16-bit floats
// round after each step, as TensorFlow's do).

template <typename T>
__device__ __forceinline__ compute_t<T> round_to(compute_t<T> v) {
  return to_compute(from_compute<T>(v));
}

template <typename T>
__global__ void range_kernel(T* __restrict__ out, compute_t<T> start, compute_t<T> delta,
                             int64_t n) {
  using C = compute_t<T>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    if constexpr (std::is_integral<T>::value) {
      out[i] = static_cast<T>(start + static_cast<C>(i) * delta);
    } else {
      const C fi = round_to<T>(static_cast<C>(i));
      out[i] = from_compute<T>(start + round_to<T>(fi * delta));
    }
  }
}

// A host scalar of the Range dtype as double (exact for every type but
// int64 beyond 2^53, which is read separately).
double host_value(const TF_Tensor* t) {
  const void* p = TF_TensorData(t);
  switch (TF_TensorType(t)) {
    case TF_INT8: return static_cast<const int8_t*>(p)[0];
    case TF_INT16: return static_cast<const int16_t*>(p)[0];
    case TF_UINT16: return static_cast<const uint16_t*>(p)[0];
    case TF_INT32: return static_cast<const int32_t*>(p)[0];
    case TF_UINT32: return static_cast<const uint32_t*>(p)[0];
    case TF_INT64: return static_cast<double>(static_cast<const int64_t*>(p)[0]);
    case TF_FLOAT: return static_cast<const float*>(p)[0];
    case TF_DOUBLE: return static_cast<const double*>(p)[0];
    case TF_HALF: {
      __half h;
      memcpy(&h, p, 2);
      return __half2float(h);
    }
    case TF_BFLOAT16: {
      __nv_bfloat16 h;
      memcpy(&h, p, 2);
      return __bfloat162float(h);
    }
    default: return 0.0;
  }
}

// Rounds `v` to the precision of float type T on the host.
template <typename T> double host_round(double v) {
  if constexpr (std::is_same<T, __half>::value) {
    return __half2float(__float2half_rn(static_cast<float>(v)));
  } else if constexpr (std::is_same<T, __nv_bfloat16>::value) {
    return __bfloat162float(__float2bfloat16_rn(static_cast<float>(v)));
  } else if constexpr (std::is_same<T, float>::value) {
    return static_cast<float>(v);
  } else {
    return v;
  }
}

template <typename T>
void run_range(OpCall& c, const TF_Tensor* ts, const TF_Tensor* tl, const TF_Tensor* td,
               TF_DataType dt) {
  using C = compute_t<T>;
  int64_t size = 0;
  C start, delta;
  if constexpr (std::is_integral<T>::value) {
    // Integers are read exactly (int64 included).
    auto read = [](const TF_Tensor* t) -> int64_t {
      const void* p = TF_TensorData(t);
      switch (TF_TensorType(t)) {
        case TF_INT64: return static_cast<const int64_t*>(p)[0];
        default: return static_cast<int64_t>(host_value(t));
      }
    };
    const int64_t s = read(ts), l = read(tl), d = read(td);
    if (d == 0) {
      c.fail(TF_INVALID_ARGUMENT, "Range: requires delta != 0: 0");
      return;
    }
    if (d > 0 && s > l) {
      c.fail(TF_INVALID_ARGUMENT, "Range: requires start <= limit when delta > 0: %lld/%lld",
             static_cast<long long>(s), static_cast<long long>(l));
      return;
    }
    if (d < 0 && s < l) {
      c.fail(TF_INVALID_ARGUMENT, "Range: requires start >= limit when delta < 0: %lld/%lld",
             static_cast<long long>(s), static_cast<long long>(l));
      return;
    }
    const uint64_t span = static_cast<uint64_t>(l > s ? l - s : s - l);
    const uint64_t step = static_cast<uint64_t>(d > 0 ? d : -d);
    size = static_cast<int64_t>((span + step - 1) / step);
    start = static_cast<C>(s);
    delta = static_cast<C>(d);
  } else {
    const double s = host_value(ts), l = host_value(tl), d = host_value(td);
    if (d == 0) {
      c.fail(TF_INVALID_ARGUMENT, "Range: requires delta != 0: 0");
      return;
    }
    if (d > 0 && s > l) {
      c.fail(TF_INVALID_ARGUMENT, "Range: requires start <= limit when delta > 0: %g/%g", s, l);
      return;
    }
    if (d < 0 && s < l) {
      c.fail(TF_INVALID_ARGUMENT, "Range: requires start >= limit when delta < 0: %g/%g", s, l);
      return;
    }
    // ceil(|(limit - start) / delta|) in the arithmetic of T.
    const double n = std::ceil(std::fabs(host_round<T>(host_round<T>(l - s) / d)));
    if (!(n < 9.2e18)) {
      c.fail(TF_INVALID_ARGUMENT, "Range: requires the size to fit in int64, got %g", n);
      return;
    }
    size = static_cast<int64_t>(n);
    start = static_cast<C>(s);
    delta = static_cast<C>(d);
  }
  Shape so;
  so.rank = 1;
  so.dims[0] = size;
  TensorPtr out = c.output(0, dt, so);
  if (!out || size == 0) return;
  range_kernel<T><<<grid_for(size, c.sm_count()), kThreads, 0, c.stream()>>>(
      static_cast<T*>(TF_TensorData(out.get())), start, delta, size);
  c.check_launch("Range");
}

void range_compute(void*, TF_OpKernelContext* ctx) {
  OpCall c(ctx);
  if (!c.ok()) return;
  TensorPtr ts = c.input(0), tl = c.input(1), td = c.input(2);
  if (!ts || !tl || !td) return;
  for (const TF_Tensor* t : {ts.get(), tl.get(), td.get()}) {
    if (TF_TensorElementCount(t) != 1 || TF_NumDims(t) > 1) {
      c.fail(TF_INVALID_ARGUMENT, "Range: start, limit and delta must be scalars");
      return;
    }
  }
  const TF_DataType dt = TF_TensorType(ts.get());
  auto run = [&](auto tag) {
    using T = typename decltype(tag)::type;
    run_range<T>(c, ts.get(), tl.get(), td.get(), dt);
  };
  bool handled = dispatch_numeric(dt, run);
  if (!handled) {
    switch (dt) {
      case TF_INT8: run(Tag<int8_t>{}); handled = true; break;
      case TF_INT16: run(Tag<int16_t>{}); handled = true; break;
      case TF_UINT16: run(Tag<uint16_t>{}); handled = true; break;
      case TF_UINT32: run(Tag<uint32_t>{}); handled = true; break;
      default: break;
    }
  }
  if (!handled) c.fail(TF_UNIMPLEMENTED, "Range: dtype %s", dtype_name(dt));
}

}  // namespace

void register_shape_kernels() {
  for (TF_DataType t : kAllTypes) {
    register_kernel("Transpose", nullptr, transpose_compute, nullptr, {{"T", t}}, {"perm"});
    // TensorFlow has a Reshape kernel of its own for "GPU" (every T and
    // Tshape, shape in host memory): priority 1 makes TensorFlow pick this one.
    register_kernel("Reshape", nullptr, reshape_compute, nullptr, {{"T", t}}, {"shape"}, 1);
    register_kernel("Identity", nullptr, identity_compute, nullptr, {{"T", t}});
    // The fill value in host memory too: it is passed to the kernel by value
    // (a value computed on the GPU is read back first).
    register_kernel("Fill", nullptr, fill_compute, nullptr, {{"T", t}}, {"dims", "value"});
    register_kernel("ExpandDims", nullptr, expand_dims_compute, nullptr, {{"T", t}}, {"dim"});
    register_kernel("Squeeze", squeeze_create, squeeze_compute, squeeze_delete, {{"T", t}});
  }
  for (TF_DataType t : {TF_BFLOAT16, TF_HALF, TF_FLOAT, TF_DOUBLE, TF_INT8, TF_INT16, TF_INT32,
                        TF_INT64}) {
    register_kernel("Range", nullptr, range_compute, nullptr, {{"Tidx", t}},
                    {"start", "limit", "delta"});
  }
}

}  // namespace pgcuda
