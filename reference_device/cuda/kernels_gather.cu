// Index-driven data movement: GatherV2, GatherNd, OneHot and UnsortedSegmentSum.
//
// An out-of-range index is an error found on the device: the kernel writes
// zeros for that row and records the first bad index it meets in an
// AsyncCheck record, which becomes the stream's error at the next
// synchronisation ("GatherV2 on GPU:0: indices[1,2] = 7 is not in [0, 5)").
// UnsortedSegmentSum drops negative segment ids, as TensorFlow does.
#include <cstring>
#include <string>
#include <vector>

#include "kernel_util.h"

namespace pgcuda {
namespace {

// Calls f(Tag<I>{}) for an integer index dtype.
template <typename F>
bool dispatch_index(TF_DataType dt, F&& f) {
  switch (dt) {
    case TF_INT8: f(Tag<int8_t>{}); return true;
    case TF_UINT8: f(Tag<uint8_t>{}); return true;
    case TF_INT16: f(Tag<int16_t>{}); return true;
    case TF_INT32: f(Tag<int32_t>{}); return true;
    case TF_INT64: f(Tag<int64_t>{}); return true;
    default: return false;
  }
}

// "[1,2]": the coordinates of flat position `pos` in `s` (the position
// itself for a scalar).
std::string coords_of(const Shape& s, long long pos) {
  if (s.rank == 0) return "[]";
  std::vector<long long> cs(static_cast<size_t>(s.rank));
  for (int d = s.rank - 1; d >= 0; --d) {
    const long long dim = s.dims[d] > 0 ? s.dims[d] : 1;
    cs[d] = pos % dim;
    pos /= dim;
  }
  std::string out = "[";
  for (int d = 0; d < s.rank; ++d) {
    if (d) out += ",";
    out += std::to_string(cs[d]);
  }
  return out + "]";
}

int64_t prod(const Shape& s, int from, int to) {
  int64_t n = 1;
  for (int d = from; d < to; ++d) n *= s.dims[d];
  return n;
}

// The widest unit (16, 8, 4, 2 or 1 bytes) that divides a row of
// `row_bytes` and to which both pointers are aligned: gathers move rows in it.
int64_t copy_unit(int64_t row_bytes, const void* a, const void* b) {
  const uint64_t g = static_cast<uint64_t>(row_bytes) | reinterpret_cast<uintptr_t>(a) |
                     reinterpret_cast<uintptr_t>(b);
  return (g & 15) == 0 ? 16 : (g & 7) == 0 ? 8 : (g & 3) == 0 ? 4 : (g & 1) == 0 ? 2 : 1;
}

// Calls go(Tag<U>{}) for the type U of `unit` bytes.
template <typename F>
void by_unit(int64_t unit, F&& go) {
  switch (unit) {
    case 16: go(Tag<uint4>{}); break;
    case 8: go(Tag<uint64_t>{}); break;
    case 4: go(Tag<uint32_t>{}); break;
    case 2: go(Tag<uint16_t>{}); break;
    default: go(Tag<uint8_t>{}); break;
  }
}

// ---------------------------------------------------------------------------
// GatherV2

// Output [batch, outer, nidx, inner] (inner in units U) from params [batch,
// outer, gdim, inner] and indices [batch, nidx].
template <typename U, typename Idx>
__global__ void gather_kernel(const U* __restrict__ params, const Idx* __restrict__ indices,
                              U* __restrict__ out, int64_t n, int64_t inner, int64_t nidx,
                              int64_t outer, int64_t gdim, DeviceCheck* rec) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += stride) {
    const int64_t row = k / inner;
    const int64_t j = k - row * inner;
    const int64_t i = row % nidx;
    const int64_t bo = row / nidx;  // batch * outer + o
    const int64_t ipos = (bo / outer) * nidx + i;
    const int64_t idx = static_cast<int64_t>(indices[ipos]);
    if (idx < 0 || idx >= gdim) {
      out[k] = U();
      if (j == 0) record_bad(rec, ipos, idx);
    } else {
      out[k] = params[(bo * gdim + idx) * inner + j];
    }
  }
}

void* gather_create(TF_OpKernelConstruction* ctx) {
  AttrReader attrs(ctx, "GatherV2");
  const int64_t batch_dims = attrs.get_int("batch_dims", 0);
  if (!attrs.ok()) return nullptr;
  return new (std::nothrow) int64_t(batch_dims);
}
void gather_delete(void* p) { delete static_cast<int64_t*>(p); }

void gather_compute(void* kernel, TF_OpKernelContext* ctx) {
  const char* op = "GatherV2";
  OpCall c(ctx);
  if (!c.ok()) return;
  TensorPtr params = c.input(0), indices = c.input(1), axis_t = c.input(2);
  if (!params || !indices || !axis_t) return;
  const Shape sp = Shape::of(params.get()), si = Shape::of(indices.get());
  int64_t axis = 0;
  if (!read_host_scalar(c, axis_t.get(), op, "axis", &axis)) return;
  int64_t bd = *static_cast<const int64_t*>(kernel);
  if (bd < 0) bd += si.rank;
  if (axis < -sp.rank || axis >= sp.rank) {
    c.fail(TF_INVALID_ARGUMENT, "%s: expected axis in the range [%d, %d), but got %lld", op,
           -sp.rank, sp.rank, static_cast<long long>(axis));
    return;
  }
  if (axis < 0) axis += sp.rank;
  if (bd < 0 || bd > si.rank || bd > axis) {
    c.fail(TF_INVALID_ARGUMENT, "%s: batch_dims (%lld) must be in [0, %d] (the rank of "
           "indices) and <= axis (%lld)", op,
           static_cast<long long>(*static_cast<const int64_t*>(kernel)), si.rank,
           static_cast<long long>(axis));
    return;
  }
  for (int d = 0; d < bd; ++d) {
    if (sp.dims[d] != si.dims[d]) {
      char b1[256], b2[256];
      c.fail(TF_INVALID_ARGUMENT, "%s: params.shape[%d] and indices.shape[%d] must be equal "
             "for batch_dims %lld: params %s, indices %s", op, d, d, static_cast<long long>(bd),
             shape_str(sp, b1, sizeof(b1)), shape_str(si, b2, sizeof(b2)));
      return;
    }
  }
  const int ax = static_cast<int>(axis), b = static_cast<int>(bd);
  Shape so;
  so.rank = 0;
  for (int d = 0; d < ax; ++d) so.dims[so.rank++] = sp.dims[d];
  for (int d = b; d < si.rank; ++d) so.dims[so.rank++] = si.dims[d];
  for (int d = ax + 1; d < sp.rank; ++d) so.dims[so.rank++] = sp.dims[d];
  const TF_DataType dt = TF_TensorType(params.get());
  TensorPtr out = c.output(0, dt, so);
  if (!out || so.num_elements() == 0) return;
  const int64_t outer = prod(sp, b, ax), gdim = sp.dims[ax];
  const int64_t nidx = prod(si, b, si.rank);
  const int64_t row_bytes = prod(sp, ax + 1, sp.rank) * TF_DataTypeSize(dt);
  const void* pp = TF_TensorData(params.get());
  void* po = TF_TensorData(out.get());
  const int64_t unit = copy_unit(row_bytes, pp, po);
  const int64_t inner = row_bytes / unit;
  const int64_t n = so.num_elements() * TF_DataTypeSize(dt) / unit;
  AsyncCheck check(c);
  if (!check.begin()) return;
  const TF_DataType it = TF_TensorType(indices.get());
  const bool handled = dispatch_index(it, [&](auto itag) {
    using Idx = typename decltype(itag)::type;
    const Idx* pi = static_cast<const Idx*>(TF_TensorData(indices.get()));
    auto go = [&](auto utag) {
      using U = typename decltype(utag)::type;
      gather_kernel<U, Idx><<<grid_for(n, c.sm_count()), kThreads, 0, c.stream()>>>(
          static_cast<const U*>(pp), pi, static_cast<U*>(po), n, inner, nidx, outer, gdim,
          check.record());
    };
    by_unit(unit, go);
  });
  if (!handled) {
    c.fail(TF_UNIMPLEMENTED, "%s: indices of dtype %s", op, dtype_name(it));
    return;
  }
  if (!c.check_launch(op)) return;
  check.finish(TF_INVALID_ARGUMENT, [si, gdim](const DeviceCheck& rec) {
    return "indices" + coords_of(si, rec.pos) + " = " + std::to_string(rec.value) +
           " is not in [0, " + std::to_string(gdim) + ")";
  });
}

// ---------------------------------------------------------------------------
// GatherNd

// The first K dimensions of params that a row of indices addresses, and the
// element stride of each.
struct NdGeometry {
  int k;
  int64_t dims[TF_MAX_DIMS];
  int64_t strides[TF_MAX_DIMS];
};

// out [rows, inner] (inner in units U): row r is the slice of params at the
// K coordinates indices[r, :]; a coordinate out of range gives zeros and is
// recorded (position: the row).
template <typename U, typename Idx>
__global__ void gather_nd_kernel(const U* __restrict__ params, const Idx* __restrict__ indices,
                                 U* __restrict__ out, int64_t n, int64_t inner, NdGeometry g,
                                 DeviceCheck* rec) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += stride) {
    const int64_t row = e / inner;
    const int64_t j = e - row * inner;
    int64_t base = 0;
    bool bad = false;
    for (int d = 0; d < g.k; ++d) {
      const int64_t c = static_cast<int64_t>(indices[row * g.k + d]);
      if (c < 0 || c >= g.dims[d]) {
        bad = true;
        if (j == 0) record_bad(rec, row, c);
        break;
      }
      base += c * g.strides[d];
    }
    out[e] = bad ? U() : params[base * inner + j];
  }
}

void gather_nd_compute(void*, TF_OpKernelContext* ctx) {
  const char* op = "GatherNd";
  OpCall c(ctx);
  if (!c.ok()) return;
  TensorPtr params = c.input(0), indices = c.input(1);
  if (!params || !indices) return;
  const Shape sp = Shape::of(params.get()), si = Shape::of(indices.get());
  const int k = si.rank > 0 ? static_cast<int>(si.dims[si.rank - 1]) : -1;
  if (si.rank < 1 || k > sp.rank || k < 0) {
    char b1[256], b2[256];
    c.fail(TF_INVALID_ARGUMENT, "%s: indices must be at least a vector whose last dimension "
           "is at most the rank of params: params %s, indices %s", op,
           shape_str(sp, b1, sizeof(b1)), shape_str(si, b2, sizeof(b2)));
    return;
  }
  Shape so;
  so.rank = 0;
  for (int d = 0; d < si.rank - 1; ++d) so.dims[so.rank++] = si.dims[d];
  for (int d = k; d < sp.rank; ++d) so.dims[so.rank++] = sp.dims[d];
  const TF_DataType dt = TF_TensorType(params.get());
  TensorPtr out = c.output(0, dt, so);
  if (!out || so.num_elements() == 0) return;
  if (sp.num_elements() == 0) {
    c.fail(TF_INVALID_ARGUMENT, "%s: requested more than 0 entries, but params is empty", op);
    return;
  }
  NdGeometry g;
  g.k = k;
  int64_t st = 1;
  for (int d = k - 1; d >= 0; --d) {
    g.dims[d] = sp.dims[d];
    g.strides[d] = st;
    st *= sp.dims[d];
  }
  const int64_t row_bytes = prod(sp, k, sp.rank) * TF_DataTypeSize(dt);
  const void* pp = TF_TensorData(params.get());
  void* po = TF_TensorData(out.get());
  const int64_t unit = copy_unit(row_bytes, pp, po);
  const int64_t inner = row_bytes / unit;
  const int64_t n = so.num_elements() * TF_DataTypeSize(dt) / unit;
  AsyncCheck check(c);
  if (!check.begin()) return;
  const TF_DataType it = TF_TensorType(indices.get());
  const bool handled = dispatch_index(it, [&](auto itag) {
    using Idx = typename decltype(itag)::type;
    const Idx* pi = static_cast<const Idx*>(TF_TensorData(indices.get()));
    auto go = [&](auto utag) {
      using U = typename decltype(utag)::type;
      gather_nd_kernel<U, Idx><<<grid_for(n, c.sm_count()), kThreads, 0, c.stream()>>>(
          static_cast<const U*>(pp), pi, static_cast<U*>(po), n, inner, g, check.record());
    };
    by_unit(unit, go);
  });
  if (!handled) {
    c.fail(TF_UNIMPLEMENTED, "%s: indices of dtype %s", op, dtype_name(it));
    return;
  }
  if (!c.check_launch(op)) return;
  const Shape ps = sp;
  check.finish(TF_INVALID_ARGUMENT, [si, ps, k](const DeviceCheck& rec) {
    std::string dims;
    for (int d = 0; d < k; ++d) dims += (d ? ", " : "") + std::to_string(ps.dims[d]);
    return "indices" + coords_of(si, rec.pos * (si.dims[si.rank - 1] > 0 ? si.dims[si.rank - 1]
                                                                            : 1)) +
           " has a coordinate " + std::to_string(rec.value) + " that does not index into "
           "shape [" + dims + "]";
  });
}

// ---------------------------------------------------------------------------
// OneHot

// out[o, d, i] = indices[o, i] == d ? on : off, for [outer, depth, inner].
template <typename U, typename Idx>
__global__ void one_hot_kernel(const Idx* __restrict__ indices, const U* __restrict__ on,
                               const U* __restrict__ off, U* __restrict__ out, int64_t n,
                               int64_t depth, int64_t inner) {
  const U von = *on, voff = *off;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += stride) {
    const int64_t i = k % inner;
    const int64_t od = k / inner;
    const int64_t d = od % depth;
    const int64_t o = od / depth;
    out[k] = static_cast<int64_t>(indices[o * inner + i]) == d ? von : voff;
  }
}

void* one_hot_create(TF_OpKernelConstruction* ctx) {
  AttrReader attrs(ctx, "OneHot");
  const int64_t axis = attrs.get_int("axis", -1);
  if (!attrs.ok()) return nullptr;
  return new (std::nothrow) int64_t(axis);
}

void one_hot_compute(void* kernel, TF_OpKernelContext* ctx) {
  const char* op = "OneHot";
  OpCall c(ctx);
  if (!c.ok()) return;
  TensorPtr indices = c.input(0), depth_t = c.input(1), on = c.input(2), off = c.input(3);
  if (!indices || !depth_t || !on || !off) return;
  const Shape si = Shape::of(indices.get());
  int64_t depth = 0;
  if (!read_host_scalar(c, depth_t.get(), op, "depth", &depth)) return;
  if (depth < 0) {
    c.fail(TF_INVALID_ARGUMENT, "%s: depth must be non-negative, got: %lld", op,
           static_cast<long long>(depth));
    return;
  }
  if (TF_NumDims(on.get()) != 0 || TF_NumDims(off.get()) != 0) {
    c.fail(TF_INVALID_ARGUMENT, "%s: on_value and off_value must be scalars, got ranks %d and %d",
           op, TF_NumDims(on.get()), TF_NumDims(off.get()));
    return;
  }
  int64_t axis = *static_cast<const int64_t*>(kernel);
  if (axis < -1 || axis > si.rank) {
    c.fail(TF_INVALID_ARGUMENT, "%s: expected axis to be -1 or between [0, %d), but got %lld", op,
           si.rank + 1, static_cast<long long>(axis));
    return;
  }
  if (si.rank == TF_MAX_DIMS) {
    c.fail(TF_INVALID_ARGUMENT, "%s: the result would have more than %d dimensions", op,
           TF_MAX_DIMS);
    return;
  }
  if (axis == -1) axis = si.rank;
  Shape so;
  so.rank = si.rank + 1;
  for (int d = 0, k = 0; d < so.rank; ++d) so.dims[d] = d == axis ? depth : si.dims[k++];
  const TF_DataType dt = TF_TensorType(on.get());
  TensorPtr out = c.output(0, dt, so);
  if (!out) return;
  const int64_t n = so.num_elements();
  if (n == 0) return;
  const int64_t inner = prod(si, static_cast<int>(axis), si.rank);
  const TF_DataType it = TF_TensorType(indices.get());
  bool size_ok = true;
  const bool handled = dispatch_index(it, [&](auto itag) {
    using Idx = typename decltype(itag)::type;
    size_ok = dispatch_size(TF_DataTypeSize(dt), [&](auto utag) {
      using U = typename decltype(utag)::type;
      one_hot_kernel<U, Idx><<<grid_for(n, c.sm_count()), kThreads, 0, c.stream()>>>(
          static_cast<const Idx*>(TF_TensorData(indices.get())),
          static_cast<const U*>(TF_TensorData(on.get())),
          static_cast<const U*>(TF_TensorData(off.get())), static_cast<U*>(TF_TensorData(out.get())),
          n, depth, inner);
    });
  });
  if (!handled || !size_ok) {
    c.fail(TF_UNIMPLEMENTED, "%s: indices of dtype %s, values of dtype %s", op, dtype_name(it),
           dtype_name(dt));
    return;
  }
  c.check_launch(op);
}

// ---------------------------------------------------------------------------
// UnsortedSegmentSum

// Accumulates into `acc` (type A, zeroed): acc[ids[r] * inner + j] += data[r, j].
template <typename A>
__device__ __forceinline__ void atomic_add(A* p, A v) {
  if constexpr (std::is_same<A, int64_t>::value) {
    atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
  } else {
    atomicAdd(p, v);
  }
}

template <typename T, typename A, typename Idx>
__global__ void segment_sum_kernel(const T* __restrict__ data, const Idx* __restrict__ ids,
                                   A* __restrict__ acc, int64_t n, int64_t inner,
                                   int64_t num_segments, DeviceCheck* rec) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += stride) {
    const int64_t r = k / inner;
    const int64_t j = k - r * inner;
    const int64_t seg = static_cast<int64_t>(ids[r]);
    if (seg < 0) continue;  // dropped
    if (seg >= num_segments) {
      if (j == 0) record_bad(rec, r, seg);
      continue;
    }
    atomic_add<A>(acc + seg * inner + j, static_cast<A>(to_compute(data[k])));
  }
}

template <typename T>
__global__ void from_float_kernel(const float* __restrict__ in, T* __restrict__ out, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    out[i] = from_compute<T>(in[i]);
  }
}

void segment_sum_compute(void*, TF_OpKernelContext* ctx) {
  const char* op = "UnsortedSegmentSum";
  OpCall c(ctx);
  if (!c.ok()) return;
  TensorPtr data = c.input(0), ids = c.input(1), num_t = c.input(2);
  if (!data || !ids || !num_t) return;
  const Shape sd = Shape::of(data.get()), si = Shape::of(ids.get());
  int64_t num = 0;
  if (!read_host_scalar(c, num_t.get(), op, "num_segments", &num)) return;
  if (num < 0) {
    c.fail(TF_INVALID_ARGUMENT, "%s: num_segments must be non-negative, got %lld", op,
           static_cast<long long>(num));
    return;
  }
  bool prefix = si.rank <= sd.rank;
  for (int d = 0; prefix && d < si.rank; ++d) prefix = si.dims[d] == sd.dims[d];
  if (!prefix) {
    char b1[256], b2[256];
    c.fail(TF_INVALID_ARGUMENT, "%s: data.shape = %s does not start with segment_ids.shape = %s",
           op, shape_str(sd, b1, sizeof(b1)), shape_str(si, b2, sizeof(b2)));
    return;
  }
  Shape so;
  so.rank = 1 + sd.rank - si.rank;
  so.dims[0] = num;
  for (int d = si.rank; d < sd.rank; ++d) so.dims[1 + d - si.rank] = sd.dims[d];
  const TF_DataType dt = TF_TensorType(data.get());
  TensorPtr out = c.output(0, dt, so);
  if (!out) return;
  const int64_t out_n = so.num_elements();
  if (out_n == 0) return;
  const int64_t inner = prod(sd, si.rank, sd.rank);
  const int64_t n = sd.num_elements();
  void* po = TF_TensorData(out.get());
  const bool narrow = dt == TF_HALF || dt == TF_BFLOAT16;
  TensorPtr acc_t;
  void* acc = po;
  if (narrow) {
    acc_t = c.temp(TF_FLOAT, out_n);
    if (!acc_t) return;
    acc = TF_TensorData(acc_t.get());
  }
  const size_t acc_elem = narrow ? sizeof(float) : TF_DataTypeSize(dt);
  if (!c.check_cuda(cudaMemsetAsync(acc, 0, static_cast<size_t>(out_n) * acc_elem, c.stream()),
                    "cudaMemsetAsync(UnsortedSegmentSum)")) {
    return;
  }
  if (n > 0) {
    AsyncCheck check(c);
    if (!check.begin()) return;
    const TF_DataType it = TF_TensorType(ids.get());
    bool handled = false;
    dispatch_index(it, [&](auto itag) {
      using Idx = typename decltype(itag)::type;
      const Idx* pi = static_cast<const Idx*>(TF_TensorData(ids.get()));
      handled = dispatch_numeric(dt, [&](auto tag) {
        using T = typename decltype(tag)::type;
        using A = compute_t<T>;
        segment_sum_kernel<T, A, Idx><<<grid_for(n, c.sm_count()), kThreads, 0, c.stream()>>>(
            static_cast<const T*>(TF_TensorData(data.get())), pi, static_cast<A*>(acc), n,
            inner, num, check.record());
      });
    });
    if (!handled) {
      c.fail(TF_UNIMPLEMENTED, "%s: data of dtype %s, segment_ids of dtype %s", op,
             dtype_name(dt), dtype_name(it));
      return;
    }
    if (!c.check_launch(op)) return;
    const Shape ids_shape = si;
    if (!check.finish(TF_INVALID_ARGUMENT, [ids_shape, num](const DeviceCheck& rec) {
          return "segment_ids" + coords_of(ids_shape, rec.pos) + " = " +
                 std::to_string(rec.value) + " is out of range [0, " + std::to_string(num) + ")";
        })) {
      return;
    }
  }
  if (narrow) {
    const float* src = static_cast<const float*>(acc);
    if (dt == TF_HALF) {
      from_float_kernel<__half><<<grid_for(out_n, c.sm_count()), kThreads, 0, c.stream()>>>(
          src, static_cast<__half*>(po), out_n);
    } else {
      from_float_kernel<__nv_bfloat16><<<grid_for(out_n, c.sm_count()), kThreads, 0,
                                         c.stream()>>>(src, static_cast<__nv_bfloat16*>(po),
                                                       out_n);
    }
    c.check_launch(op);
  }
}

}  // namespace

void register_gather_kernels() {
  for (TF_DataType t : kAllTypes) {
    register_kernel("GatherV2", gather_create, gather_compute, gather_delete, {{"Tparams", t}},
                    {"axis"});
    register_kernel("OneHot", one_hot_create, one_hot_compute, gather_delete, {{"T", t}},
                    {"depth"});
    for (TF_DataType it : {TF_INT16, TF_INT32, TF_INT64}) {
      register_kernel("GatherNd", nullptr, gather_nd_compute, nullptr,
                      {{"Tparams", t}, {"Tindices", it}}, {});
    }
  }
  for (TF_DataType t : kNumericTypes) {
    register_kernel("UnsortedSegmentSum", nullptr, segment_sum_compute, nullptr, {{"T", t}},
                    {"num_segments"});
  }
}

}  // namespace pgcuda
