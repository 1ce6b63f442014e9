// BiasGelu and BiasGeluGrad (pluggable/ops/transformer_ops.py): y =
// gelu(x + bias), the bias a vector of x's last dimension. Forward: one
// elementwise pass computing in float. Backward: one elementwise pass writes
// dx = dy * gelu'(x + bias); dbias is the column sum of dx over the leading
// axes, taken by the reductions' column kernels (sum_leading_rows,
// kernels_reduce.cu), which accumulate 16-bit floats in float.
#include <cmath>
#include <new>

#include "kernel_util.h"

namespace pgcuda {
namespace {

constexpr float kSqrt2OverPi = 0.79788456080286535588f;  // sqrt(2 / pi)
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;   // 1 / sqrt(2 pi)
constexpr float kSqrtHalf = 0.70710678118654752440f;     // 1 / sqrt(2)
constexpr float kGeluCubic = 0.044715f;

template <bool kTanh>
__device__ __forceinline__ float gelu(float z) {
  if (kTanh) {
    const float u = kSqrt2OverPi * (z + kGeluCubic * z * z * z);
    return 0.5f * z * (1.f + tanhf(u));
  }
  return 0.5f * z * erfcf(-z * kSqrtHalf);
}

template <bool kTanh>
__device__ __forceinline__ float gelu_grad(float z) {
  if (kTanh) {
    const float z2 = z * z;
    const float t = tanhf(kSqrt2OverPi * (z + kGeluCubic * z2 * z));
    const float du = kSqrt2OverPi * (1.f + 3.f * kGeluCubic * z2);
    return 0.5f * (1.f + t) + 0.5f * z * (1.f - t * t) * du;
  }
  return 0.5f * erfcf(-z * kSqrtHalf) + z * kInvSqrt2Pi * expf(-0.5f * z * z);
}

template <typename T, bool kTanh>
__global__ void bias_gelu_kernel(const T* __restrict__ x, const T* __restrict__ bias,
                                 T* __restrict__ y, int64_t n, int64_t cols) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const float z = static_cast<float>(to_compute(x[i])) +
                    static_cast<float>(to_compute(bias[i % cols]));
    y[i] = from_compute<T>(static_cast<compute_t<T>>(gelu<kTanh>(z)));
  }
}

template <typename T, bool kTanh>
__global__ void bias_gelu_grad_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                      const T* __restrict__ bias, T* __restrict__ dx,
                                      int64_t n, int64_t cols) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const float z = static_cast<float>(to_compute(x[i])) +
                    static_cast<float>(to_compute(bias[i % cols]));
    const float g = static_cast<float>(to_compute(dy[i])) * gelu_grad<kTanh>(z);
    dx[i] = from_compute<T>(static_cast<compute_t<T>>(g));
  }
}

template <typename F>
bool dispatch_bias_gelu_type(TF_DataType dt, F&& f) {
  switch (dt) {
    case TF_HALF: f(Tag<__half>{}); return true;
    case TF_BFLOAT16: f(Tag<__nv_bfloat16>{}); return true;
    case TF_FLOAT: f(Tag<float>{}); return true;
    default: return false;
  }
}

// The kernel state: whether `approximate` (the tanh form) is set.
void* bias_gelu_create(TF_OpKernelConstruction* ctx) {
  TF_StringView op = TF_OpKernelConstruction_GetName(ctx);
  AttrReader attrs(ctx, op.len > 8 ? "BiasGeluGrad" : "BiasGelu");
  const bool approximate = attrs.get_bool("approximate", false);
  if (!attrs.ok()) return nullptr;
  return new (std::nothrow) bool(approximate);
}

void bias_gelu_delete(void* p) { delete static_cast<bool*>(p); }

// Checks that `bias` is a vector of x's last dimension; sets the element
// count and the number of columns.
bool bias_gelu_sizes(OpCall& c, const char* op, const TF_Tensor* x, const TF_Tensor* bias,
                     int64_t* n, int64_t* cols) {
  const Shape sx = Shape::of(x), sb = Shape::of(bias);
  char b1[128], b2[128];
  if (sx.rank < 1 || sb.rank != 1 || sb.dims[0] != sx.dims[sx.rank - 1]) {
    return c.fail(TF_INVALID_ARGUMENT,
                  "%s: bias %s must be a vector of x %s's last dimension", op,
                  shape_str(sb, b1, sizeof(b1)), shape_str(sx, b2, sizeof(b2)));
  }
  *n = sx.num_elements();
  *cols = sx.dims[sx.rank - 1];
  return true;
}

void bias_gelu_compute(void* kernel, TF_OpKernelContext* ctx) {
  const char* op = "BiasGelu";
  const bool approximate = *static_cast<const bool*>(kernel);
  OpCall c(ctx, OpCall::kMayDefer);
  if (!c.ok()) return;
  TensorPtr x = c.input(0), bias = c.input(1);
  if (!x || !bias) return;
  int64_t n, cols;
  if (!bias_gelu_sizes(c, op, x.get(), bias.get(), &n, &cols)) return;
  const TF_DataType dt = TF_TensorType(x.get());
  TensorPtr y = c.output(0, dt, Shape::of(x.get()));
  if (!y || n == 0) return;
  const dim3 grid(grid_for(n, c.sm_count())), block(kThreads);
  const bool handled = dispatch_bias_gelu_type(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = static_cast<const T*>(TF_TensorData(x.get()));
    const T* bp = static_cast<const T*>(TF_TensorData(bias.get()));
    T* yp = static_cast<T*>(TF_TensorData(y.get()));
    if (approximate) {
      c.launch(op, bias_gelu_kernel<T, true>, grid, block, xp, bp, yp, n, cols);
    } else {
      c.launch(op, bias_gelu_kernel<T, false>, grid, block, xp, bp, yp, n, cols);
    }
  });
  if (!handled) c.fail(TF_UNIMPLEMENTED, "%s: dtype %s on GPU", op, dtype_name(dt));
}

void bias_gelu_grad_compute(void* kernel, TF_OpKernelContext* ctx) {
  const char* op = "BiasGeluGrad";
  const bool approximate = *static_cast<const bool*>(kernel);
  OpCall c(ctx);  // the column sum reads dx in stream order
  if (!c.ok()) return;
  TensorPtr dy = c.input(0), x = c.input(1), bias = c.input(2);
  if (!dy || !x || !bias) return;
  int64_t n, cols;
  if (!bias_gelu_sizes(c, op, x.get(), bias.get(), &n, &cols)) return;
  const TF_DataType dt = TF_TensorType(x.get());
  if (Shape::of(dy.get()).num_elements() != n || TF_TensorType(dy.get()) != dt) {
    char b1[128], b2[128];
    c.fail(TF_INVALID_ARGUMENT, "%s: dy %s must have x %s's shape and dtype", op,
           shape_str(Shape::of(dy.get()), b1, sizeof(b1)),
           shape_str(Shape::of(x.get()), b2, sizeof(b2)));
    return;
  }
  TensorPtr dx = c.output(0, dt, Shape::of(x.get()));
  if (!dx) return;
  TensorPtr db = c.output(1, dt, Shape::of(bias.get()));
  if (!db || cols == 0) return;
  const int64_t rows = n / cols;
  if (rows > 0) {
    const dim3 grid(grid_for(n, c.sm_count())), block(kThreads);
    const bool handled = dispatch_bias_gelu_type(dt, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* dyp = static_cast<const T*>(TF_TensorData(dy.get()));
      const T* xp = static_cast<const T*>(TF_TensorData(x.get()));
      const T* bp = static_cast<const T*>(TF_TensorData(bias.get()));
      T* dxp = static_cast<T*>(TF_TensorData(dx.get()));
      if (approximate) {
        c.launch(op, bias_gelu_grad_kernel<T, true>, grid, block, dyp, xp, bp, dxp, n, cols);
      } else {
        c.launch(op, bias_gelu_grad_kernel<T, false>, grid, block, dyp, xp, bp, dxp, n, cols);
      }
    });
    if (!handled) {
      c.fail(TF_UNIMPLEMENTED, "%s: dtype %s on GPU", op, dtype_name(dt));
      return;
    }
    if (!c.ok()) return;
  }
  sum_leading_rows(c, op, dt, TF_TensorData(dx.get()), TF_TensorData(db.get()), rows, cols);
}

}  // namespace

void register_bias_gelu_kernels() {
  const TF_DataType types[] = {TF_HALF, TF_BFLOAT16, TF_FLOAT};
  for (TF_DataType t : types) {
    register_kernel("BiasGelu", bias_gelu_create, bias_gelu_compute, bias_gelu_delete,
                    {{"T", t}});
    register_kernel("BiasGeluGrad", bias_gelu_create, bias_gelu_grad_compute,
                    bias_gelu_delete, {{"T", t}});
  }
}

}  // namespace pgcuda
