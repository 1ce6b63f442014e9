// Neural-network layers that are not convolutions, pooling or batch norm:
// BiasAdd (a broadcasting add, elementwise.h) and the softmax cross-entropy
// losses SoftmaxCrossEntropyWithLogits and
// SparseSoftmaxCrossEntropyWithLogits. The losses run one warp per row of
// [batch, classes] logits: max, sum of exponentials, then loss and backprop.
// A sparse label outside [0, classes) gives NaN for its row and is reported
// asynchronously (AsyncCheck).
#include <cmath>
#include <string>

#include "elementwise.h"

namespace pgcuda {
namespace {

__device__ __forceinline__ float m_exp(float x) { return expf(x); }
__device__ __forceinline__ double m_exp(double x) { return exp(x); }
__device__ __forceinline__ float m_log(float x) { return logf(x); }
__device__ __forceinline__ double m_log(double x) { return log(x); }

// ---------------------------------------------------------------------------
// BiasAdd

struct BiasAddOp {
  template <typename C> __device__ static C f(C a, C b) {
    if constexpr (std::is_integral<C>::value) {
      using U = typename std::make_unsigned<C>::type;
      return static_cast<C>(static_cast<U>(a) + static_cast<U>(b));
    } else {
      return a + b;
    }
  }
};

void* data_format_create(TF_OpKernelConstruction* ctx) {
  AttrReader attrs(ctx, "BiasAdd");
  const std::string fmt = attrs.get_string("data_format", "NHWC");
  if (!attrs.ok()) return nullptr;
  if (fmt != "NHWC" && fmt != "NCHW") {
    attrs.fail(TF_INVALID_ARGUMENT, "data_format must be NHWC or NCHW, got %s", fmt.c_str());
    return nullptr;
  }
  static char kNhwc[] = "NHWC", kNchw[] = "NCHW";
  return fmt == "NCHW" ? kNchw : kNhwc;
}

void bias_add_compute(void* kernel, TF_OpKernelContext* ctx) {
  const bool nchw = kernel != nullptr && static_cast<const char*>(kernel)[1] == 'C';
  OpCall c(ctx, OpCall::kMayDefer);
  if (!c.ok()) return;
  TensorPtr x = c.input(0), bias = c.input(1);
  if (!x || !bias) return;
  const Shape sx = Shape::of(x.get()), sb = Shape::of(bias.get());
  char b1[256], b2[256];
  if (sx.rank < 2) {
    c.fail(TF_INVALID_ARGUMENT, "BiasAdd: input tensor must be at least 2D: %s",
           shape_str(sx, b1, sizeof(b1)));
    return;
  }
  if (sb.rank != 1) {
    c.fail(TF_INVALID_ARGUMENT, "BiasAdd: biases must be 1D: %s", shape_str(sb, b1, sizeof(b1)));
    return;
  }
  const int channel = nchw && sx.rank >= 3 ? 1 : sx.rank - 1;
  if (sb.dims[0] != sx.dims[channel]) {
    c.fail(TF_INVALID_ARGUMENT,
           "BiasAdd: must provide as many biases as the channel dimension of the input "
           "tensor: %s vs. %s", shape_str(sb, b1, sizeof(b1)), shape_str(sx, b2, sizeof(b2)));
    return;
  }
  // The bias as a shape that broadcasts onto the channel axis.
  Shape sbb;
  sbb.rank = sx.rank - channel;
  sbb.dims[0] = sb.dims[0];
  for (int d = 1; d < sbb.rank; ++d) sbb.dims[d] = 1;
  const TF_DataType dt = TF_TensorType(x.get());
  TensorPtr out = c.output(0, dt, sx);
  if (!out || sx.num_elements() == 0) return;
  const bool handled = dispatch_numeric(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_binary<T, T, BiasAddOp>(c, sx, sbb, sx, TF_TensorData(x.get()),
                                   TF_TensorData(bias.get()), TF_TensorData(out.get()),
                                   "BiasAdd");
  });
  if (!handled) c.fail(TF_UNIMPLEMENTED, "BiasAdd: dtype %s", dtype_name(dt));
}

// ---------------------------------------------------------------------------
// Softmax cross-entropy

template <typename C>
__device__ __forceinline__ C warp_max(C v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const C o = __shfl_xor_sync(0xffffffffu, v, off);
    v = o > v ? o : v;
  }
  return v;
}
template <typename C>
__device__ __forceinline__ C warp_sum(C v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// Dense labels. features[b, j] at fb * b + fj * j, labels likewise (strides
// 0 where an operand is broadcast); loss [rows], backprop [rows, cols].
template <typename T>
__global__ void xent_kernel(const T* __restrict__ f, const T* __restrict__ lab,
                            T* __restrict__ loss, T* __restrict__ back, int64_t rows,
                            int64_t cols, int64_t fb, int64_t fj, int64_t lb, int64_t lj) {
  using C = compute_t<T>;
  const int lane = threadIdx.x & 31;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int64_t nwarps = (static_cast<int64_t>(gridDim.x) * blockDim.x) >> 5;
  for (int64_t b = warp; b < rows; b += nwarps) {
    const T* pf = f + b * fb;
    const T* pl = lab + b * lb;
    C m = -C(INFINITY);
    for (int64_t j = lane; j < cols; j += 32) {
      const C v = to_compute(pf[j * fj]);
      m = v > m ? v : m;
    }
    m = warp_max(m);
    C s = C(0);
    for (int64_t j = lane; j < cols; j += 32) s += m_exp(to_compute(pf[j * fj]) - m);
    s = warp_sum(s);
    const C log_s = m_log(s);
    C l = C(0);
    for (int64_t j = lane; j < cols; j += 32) {
      const C z = to_compute(pf[j * fj]) - m;
      const C y = to_compute(pl[j * lj]);
      l += y * (log_s - z);
      back[b * cols + j] = from_compute<T>(m_exp(z) / s - y);
    }
    l = warp_sum(l);
    if (lane == 0) loss[b] = from_compute<T>(l);
  }
}

// Sparse labels: loss[b] = logsumexp(f[b]) - f[b, y_b].
template <typename T, typename L>
__global__ void sparse_xent_kernel(const T* __restrict__ f, const L* __restrict__ labels,
                                   T* __restrict__ loss, T* __restrict__ back, int64_t rows,
                                   int64_t cols, DeviceCheck* rec) {
  using C = compute_t<T>;
  const int lane = threadIdx.x & 31;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int64_t nwarps = (static_cast<int64_t>(gridDim.x) * blockDim.x) >> 5;
  for (int64_t b = warp; b < rows; b += nwarps) {
    const T* pf = f + b * cols;
    T* pb = back + b * cols;
    const int64_t y = static_cast<int64_t>(labels[b]);
    if (y < 0 || y >= cols) {
      const C nan = C(NAN);
      for (int64_t j = lane; j < cols; j += 32) pb[j] = from_compute<T>(nan);
      if (lane == 0) {
        loss[b] = from_compute<T>(nan);
        record_bad(rec, b, y);
      }
      continue;
    }
    C m = -C(INFINITY);
    for (int64_t j = lane; j < cols; j += 32) {
      const C v = to_compute(pf[j]);
      m = v > m ? v : m;
    }
    m = warp_max(m);
    C s = C(0);
    for (int64_t j = lane; j < cols; j += 32) s += m_exp(to_compute(pf[j]) - m);
    s = warp_sum(s);
    const C log_s = m_log(s);
    for (int64_t j = lane; j < cols; j += 32) {
      const C z = to_compute(pf[j]) - m;
      pb[j] = from_compute<T>(m_exp(z) / s - (j == y ? C(1) : C(0)));
    }
    if (lane == 0) loss[b] = from_compute<T>(log_s - (to_compute(pf[y]) - m));
  }
}

unsigned warp_grid(int64_t rows, int sm) {
  int64_t blocks = (rows + (kThreads / 32) - 1) / (kThreads / 32);
  const int64_t cap = static_cast<int64_t>(sm) * 16;
  if (blocks > cap) blocks = cap;
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks);
}

void xent_compute(void*, TF_OpKernelContext* ctx) {
  const char* op = "SoftmaxCrossEntropyWithLogits";
  OpCall c(ctx);
  if (!c.ok()) return;
  TensorPtr f = c.input(0), lab = c.input(1);
  if (!f || !lab) return;
  const Shape sf = Shape::of(f.get()), sl = Shape::of(lab.get());
  Shape so;
  char b1[256], b2[256];
  if (!broadcast_shape(sf, sl, &so)) {
    c.fail(TF_INVALID_ARGUMENT, "%s: logits and labels must be broadcastable: logits_size=%s "
           "labels_size=%s", op, shape_str(sf, b1, sizeof(b1)), shape_str(sl, b2, sizeof(b2)));
    return;
  }
  if (so.rank != 2) {
    c.fail(TF_INVALID_ARGUMENT, "%s: logits and labels must be either 2-dimensional, or "
           "broadcasted to be 2-dimensional, got %s and %s", op,
           shape_str(sf, b1, sizeof(b1)), shape_str(sl, b2, sizeof(b2)));
    return;
  }
  const int64_t rows = so.dims[0], cols = so.dims[1];
  // Strides of an operand right-aligned to [rows, cols] (0 where broadcast).
  auto strides = [&](const Shape& s, int64_t* sb, int64_t* sj) {
    const int64_t d0 = s.rank == 2 ? s.dims[0] : 1;
    const int64_t d1 = s.rank >= 1 ? s.dims[s.rank - 1] : 1;
    *sj = d1 == 1 ? 0 : 1;
    *sb = d0 == 1 ? 0 : d1;
  };
  int64_t fb, fj, lb, lj;
  strides(sf, &fb, &fj);
  strides(sl, &lb, &lj);
  const TF_DataType dt = TF_TensorType(f.get());
  Shape sloss;
  sloss.rank = 1;
  sloss.dims[0] = rows;
  TensorPtr loss = c.output(0, dt, sloss);
  if (!loss) return;
  TensorPtr back = c.output(1, dt, so);
  if (!back || rows == 0) return;
  const bool handled = dispatch_float(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    xent_kernel<T><<<warp_grid(rows, c.sm_count()), kThreads, 0, c.stream()>>>(
        static_cast<const T*>(TF_TensorData(f.get())),
        static_cast<const T*>(TF_TensorData(lab.get())),
        static_cast<T*>(TF_TensorData(loss.get())), static_cast<T*>(TF_TensorData(back.get())),
        rows, cols, fb, fj, lb, lj);
    c.check_launch(op);
  });
  if (!handled) c.fail(TF_UNIMPLEMENTED, "%s: dtype %s", op, dtype_name(dt));
}

void sparse_xent_compute(void*, TF_OpKernelContext* ctx) {
  const char* op = "SparseSoftmaxCrossEntropyWithLogits";
  OpCall c(ctx);
  if (!c.ok()) return;
  TensorPtr f = c.input(0), lab = c.input(1);
  if (!f || !lab) return;
  const Shape sf = Shape::of(f.get()), sl = Shape::of(lab.get());
  char b1[256], b2[256];
  if (sf.rank != 2 || sl.rank != 1 || sf.dims[0] != sl.dims[0]) {
    c.fail(TF_INVALID_ARGUMENT, "%s: logits must be 2-D and labels 1-D with the same first "
           "dimension, got logits shape %s and labels shape %s", op,
           shape_str(sf, b1, sizeof(b1)), shape_str(sl, b2, sizeof(b2)));
    return;
  }
  const int64_t rows = sf.dims[0], cols = sf.dims[1];
  if (cols == 0 && rows > 0) {
    c.fail(TF_INVALID_ARGUMENT, "%s: must have at least one class, but got logits shape %s", op,
           shape_str(sf, b1, sizeof(b1)));
    return;
  }
  const TF_DataType dt = TF_TensorType(f.get());
  TensorPtr loss = c.output(0, dt, sl);
  if (!loss) return;
  TensorPtr back = c.output(1, dt, sf);
  if (!back || rows == 0) return;
  AsyncCheck check(c);
  if (!check.begin()) return;
  const TF_DataType lt = TF_TensorType(lab.get());
  bool label_ok = true;
  const bool handled = dispatch_float(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto go = [&](auto ltag) {
      using L = typename decltype(ltag)::type;
      sparse_xent_kernel<T, L><<<warp_grid(rows, c.sm_count()), kThreads, 0, c.stream()>>>(
          static_cast<const T*>(TF_TensorData(f.get())),
          static_cast<const L*>(TF_TensorData(lab.get())),
          static_cast<T*>(TF_TensorData(loss.get())),
          static_cast<T*>(TF_TensorData(back.get())), rows, cols, check.record());
    };
    if (lt == TF_INT32) go(Tag<int32_t>{});
    else if (lt == TF_INT64) go(Tag<int64_t>{});
    else label_ok = false;
  });
  if (!handled || !label_ok) {
    c.fail(TF_UNIMPLEMENTED, "%s: logits of dtype %s, labels of dtype %s", op, dtype_name(dt),
           dtype_name(lt));
    return;
  }
  if (!c.check_launch(op)) return;
  check.finish(TF_INVALID_ARGUMENT, [cols](const DeviceCheck& rec) {
    return "Received a label value of " + std::to_string(rec.value) +
           " which is outside the valid range of [0, " + std::to_string(cols) +
           ") at labels[" + std::to_string(rec.pos) + "]";
  });
}

}  // namespace

void register_nn_kernels() {
  for (TF_DataType t : kNumericTypes) {
    register_kernel("BiasAdd", data_format_create, bias_add_compute, no_delete, {{"T", t}});
  }
  for (TF_DataType t : kFloatTypes) {
    register_kernel("SoftmaxCrossEntropyWithLogits", nullptr, xent_compute, nullptr, {{"T", t}});
    for (TF_DataType l : kIntTypes) {
      register_kernel("SparseSoftmaxCrossEntropyWithLogits", nullptr, sparse_xent_compute,
                      nullptr, {{"T", t}, {"Tlabels", l}});
    }
  }
}

}  // namespace pgcuda
