// LayerNorm and LayerNormGrad over the last axis (pluggable/ops/
// transformer_ops.py). Forward: one warp per row takes the mean and variance
// in one pass (Welford per lane, lanes merged with Chan's formula), saves
// mean and 1/sqrt(var + epsilon) (float) and writes y. Backward: one warp per
// row writes dx; the column sums dgamma = sum(dy * xhat) and dbeta = sum(dy)
// are accumulated by blocks of 32 columns x 8 rows into a float scratch
// (atomicAdd) and converted to the element type at the end.
#include "kernel_util.h"

namespace pgcuda {
namespace {

constexpr int kLnThreads = 256;
constexpr int kLnWarps = kLnThreads / 32;

template <typename T>
__global__ void __launch_bounds__(kLnThreads)
    ln_forward_kernel(const T* x, const T* gamma, const T* beta, T* y, float* mean_out,
                      float* rstd_out, int64_t rows, int cols, float epsilon) {
  const int lane = threadIdx.x % 32;
  for (int64_t r = blockIdx.x * static_cast<int64_t>(kLnWarps) + threadIdx.x / 32; r < rows;
       r += static_cast<int64_t>(gridDim.x) * kLnWarps) {
    const T* xr = x + r * cols;
    float n = 0.f, mean = 0.f, m2 = 0.f;
    for (int c = lane; c < cols; c += 32) {
      const float v = to_compute(xr[c]);
      n += 1.f;
      const float d = v - mean;
      mean += d / n;
      m2 += d * (v - mean);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float nb = __shfl_xor_sync(0xffffffffu, n, o);
      const float mb = __shfl_xor_sync(0xffffffffu, mean, o);
      const float m2b = __shfl_xor_sync(0xffffffffu, m2, o);
      const float nt = n + nb;
      if (nt > 0.f) {
        const float d = mb - mean;
        mean += d * (nb / nt);
        m2 += m2b + d * d * (n * nb / nt);
      }
      n = nt;
    }
    const float var = cols > 0 ? m2 / static_cast<float>(cols) : 0.f;
    const float rstd = rsqrtf(var + epsilon);
    T* yr = y + r * cols;
    for (int c = lane; c < cols; c += 32) {
      const float v = (to_compute(xr[c]) - mean) * rstd;
      yr[c] = from_compute<T>(v * to_compute(gamma[c]) + to_compute(beta[c]));
    }
    if (lane == 0) {
      mean_out[r] = mean;
      rstd_out[r] = rstd;
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kLnThreads)
    ln_grad_x_kernel(const T* dy, const T* x, const T* gamma, const float* mean,
                     const float* rstd, T* dx, int64_t rows, int cols) {
  const int lane = threadIdx.x % 32;
  for (int64_t r = blockIdx.x * static_cast<int64_t>(kLnWarps) + threadIdx.x / 32; r < rows;
       r += static_cast<int64_t>(gridDim.x) * kLnWarps) {
    const T* xr = x + r * cols;
    const T* gr = dy + r * cols;
    const float mu = mean[r], rs = rstd[r];
    float sg = 0.f, sgx = 0.f;
    for (int c = lane; c < cols; c += 32) {
      const float g = to_compute(gr[c]) * to_compute(gamma[c]);
      sg += g;
      sgx += g * (to_compute(xr[c]) - mu) * rs;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      sg += __shfl_xor_sync(0xffffffffu, sg, o);
      sgx += __shfl_xor_sync(0xffffffffu, sgx, o);
    }
    const float inv_n = cols > 0 ? 1.f / static_cast<float>(cols) : 0.f;
    sg *= inv_n;
    sgx *= inv_n;
    T* out = dx + r * cols;
    for (int c = lane; c < cols; c += 32) {
      const float g = to_compute(gr[c]) * to_compute(gamma[c]);
      const float xh = (to_compute(xr[c]) - mu) * rs;
      out[c] = from_compute<T>(rs * (g - sg - xh * sgx));
    }
  }
}

// Block (32, 8): column blockIdx.x * 32 + threadIdx.x, rows strided over
// threadIdx.y and gridDim.y; sums into acc[0:cols] (dgamma) and
// acc[cols:2*cols] (dbeta).
template <typename T>
__global__ void ln_grad_params_kernel(const T* dy, const T* x, const float* mean,
                                      const float* rstd, float* acc, int64_t rows, int cols) {
  __shared__ float sg[8][33], sb[8][33];
  const int c = blockIdx.x * 32 + threadIdx.x;
  float g = 0.f, b = 0.f;
  if (c < cols) {
    for (int64_t r = blockIdx.y * 8 + threadIdx.y; r < rows;
         r += static_cast<int64_t>(gridDim.y) * 8) {
      const float d = to_compute(dy[r * cols + c]);
      g += d * (to_compute(x[r * cols + c]) - mean[r]) * rstd[r];
      b += d;
    }
  }
  sg[threadIdx.y][threadIdx.x] = g;
  sb[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    for (int i = 1; i < 8; ++i) {
      g += sg[i][threadIdx.x];
      b += sb[i][threadIdx.x];
    }
    atomicAdd(acc + c, g);
    atomicAdd(acc + cols + c, b);
  }
}

template <typename T>
__global__ void ln_params_out_kernel(const float* acc, T* dgamma, T* dbeta, int cols) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c < cols) {
    dgamma[c] = from_compute<T>(acc[c]);
    dbeta[c] = from_compute<T>(acc[cols + c]);
  }
}

template <typename F>
bool dispatch_ln_type(TF_DataType dt, F&& f) {
  switch (dt) {
    case TF_HALF: f(Tag<__half>{}); return true;
    case TF_BFLOAT16: f(Tag<__nv_bfloat16>{}); return true;
    case TF_FLOAT: f(Tag<float>{}); return true;
    default: return false;
  }
}

void* ln_create(TF_OpKernelConstruction* ctx) {
  AttrReader attrs(ctx, "LayerNorm");
  const float eps = attrs.get_float("epsilon", 1e-5f);
  if (!attrs.ok()) return nullptr;
  return new float(eps);
}

void ln_delete(void* p) { delete static_cast<float*>(p); }

bool ln_rows(OpCall& c, const char* op, const TF_Tensor* x, const TF_Tensor* gamma,
             int64_t* rows, int* cols) {
  const Shape sx = Shape::of(x), sg = Shape::of(gamma);
  char b1[128], b2[128];
  if (sx.rank < 1 || sg.rank != 1 || sg.dims[0] != sx.dims[sx.rank - 1] ||
      sx.dims[sx.rank - 1] > INT32_MAX) {
    return c.fail(TF_INVALID_ARGUMENT, "%s: gamma %s must be a vector of x %s's last dimension",
                  op, shape_str(sg, b1, sizeof(b1)), shape_str(sx, b2, sizeof(b2)));
  }
  *cols = static_cast<int>(sx.dims[sx.rank - 1]);
  *rows = 1;
  for (int i = 0; i + 1 < sx.rank; ++i) *rows *= sx.dims[i];
  return true;
}

unsigned ln_grid(int64_t rows, int sm) {
  int64_t blocks = (rows + kLnWarps - 1) / kLnWarps;
  const int64_t cap = static_cast<int64_t>(sm) * 16;
  if (blocks > cap) blocks = cap;
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks);
}

void ln_compute(void* kernel, TF_OpKernelContext* ctx) {
  const char* op = "LayerNorm";
  const float eps = *static_cast<const float*>(kernel);
  OpCall c(ctx, OpCall::kMayDefer);
  if (!c.ok()) return;
  TensorPtr x = c.input(0), gamma = c.input(1), beta = c.input(2);
  if (!x || !gamma || !beta) return;
  int64_t rows;
  int cols;
  if (!ln_rows(c, op, x.get(), gamma.get(), &rows, &cols)) return;
  const Shape sx = Shape::of(x.get());
  Shape ss = sx;
  ss.rank = sx.rank - 1;
  const TF_DataType dt = TF_TensorType(x.get());
  TensorPtr y = c.output(0, dt, sx);
  if (!y) return;
  TensorPtr mean = c.output(1, TF_FLOAT, ss);
  if (!mean) return;
  TensorPtr rstd = c.output(2, TF_FLOAT, ss);
  if (!rstd || rows == 0) return;
  const bool handled = dispatch_ln_type(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    c.launch(op, ln_forward_kernel<T>, dim3(ln_grid(rows, c.sm_count())), dim3(kLnThreads),
             static_cast<const T*>(TF_TensorData(x.get())),
             static_cast<const T*>(TF_TensorData(gamma.get())),
             static_cast<const T*>(TF_TensorData(beta.get())),
             static_cast<T*>(TF_TensorData(y.get())),
             static_cast<float*>(TF_TensorData(mean.get())),
             static_cast<float*>(TF_TensorData(rstd.get())), rows, cols, eps);
  });
  if (!handled) c.fail(TF_UNIMPLEMENTED, "%s: dtype %s on GPU", op, dtype_name(dt));
}

void ln_grad_compute(void*, TF_OpKernelContext* ctx) {
  const char* op = "LayerNormGrad";
  OpCall c(ctx);  // the scratch is used by work launched here, in order
  if (!c.ok()) return;
  TensorPtr dy = c.input(0), x = c.input(1), gamma = c.input(2), mean = c.input(3),
            rstd = c.input(4);
  if (!dy || !x || !gamma || !mean || !rstd) return;
  int64_t rows;
  int cols;
  if (!ln_rows(c, op, x.get(), gamma.get(), &rows, &cols)) return;
  if (Shape::of(dy.get()).num_elements() != Shape::of(x.get()).num_elements() ||
      Shape::of(mean.get()).num_elements() != rows ||
      Shape::of(rstd.get()).num_elements() != rows || TF_TensorType(mean.get()) != TF_FLOAT ||
      TF_TensorType(rstd.get()) != TF_FLOAT) {
    c.fail(TF_INVALID_ARGUMENT, "%s: dy must match x and mean, rstd be float of %lld rows", op,
           static_cast<long long>(rows));
    return;
  }
  const TF_DataType dt = TF_TensorType(x.get());
  TensorPtr dx = c.output(0, dt, Shape::of(x.get()));
  if (!dx) return;
  TensorPtr dg = c.output(1, dt, Shape::of(gamma.get()));
  if (!dg) return;
  TensorPtr db = c.output(2, dt, Shape::of(gamma.get()));
  if (!db || cols == 0) return;
  TensorPtr acc = c.temp(TF_FLOAT, 2 * static_cast<int64_t>(cols));
  if (!acc) return;
  float* accp = static_cast<float*>(TF_TensorData(acc.get()));
  if (!c.check_cuda(cudaMemsetAsync(accp, 0, 2 * sizeof(float) * cols, c.stream()),
                    "cudaMemsetAsync")) {
    return;
  }
  const bool handled = dispatch_ln_type(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* dyp = static_cast<const T*>(TF_TensorData(dy.get()));
    const T* xp = static_cast<const T*>(TF_TensorData(x.get()));
    const float* mp = static_cast<const float*>(TF_TensorData(mean.get()));
    const float* rp = static_cast<const float*>(TF_TensorData(rstd.get()));
    if (rows == 0) {
      c.launch(op, ln_params_out_kernel<T>, dim3((cols + 255) / 256), dim3(256),
               static_cast<const float*>(accp), static_cast<T*>(TF_TensorData(dg.get())),
               static_cast<T*>(TF_TensorData(db.get())), cols);
      return;
    }
    if (!c.launch(op, ln_grad_x_kernel<T>, dim3(ln_grid(rows, c.sm_count())),
                  dim3(kLnThreads), dyp, xp,
                  static_cast<const T*>(TF_TensorData(gamma.get())), mp, rp,
                  static_cast<T*>(TF_TensorData(dx.get())), rows, cols)) {
      return;
    }
    const unsigned gx = static_cast<unsigned>((cols + 31) / 32);
    int64_t gy = (rows + 7) / 8;
    const int64_t want = (static_cast<int64_t>(c.sm_count()) * 8 + gx - 1) / gx;
    if (gy > want) gy = want < 1 ? 1 : want;
    if (!c.launch(op, ln_grad_params_kernel<T>, dim3(gx, static_cast<unsigned>(gy)),
                  dim3(32, 8), dyp, xp, mp, rp, accp, rows, cols)) {
      return;
    }
    c.launch(op, ln_params_out_kernel<T>, dim3((cols + 255) / 256), dim3(256),
             static_cast<const float*>(accp), static_cast<T*>(TF_TensorData(dg.get())),
             static_cast<T*>(TF_TensorData(db.get())), cols);
  });
  if (!handled) c.fail(TF_UNIMPLEMENTED, "%s: dtype %s on GPU", op, dtype_name(dt));
}

}  // namespace

void register_layernorm_kernels() {
  const TF_DataType types[] = {TF_HALF, TF_BFLOAT16, TF_FLOAT};
  for (TF_DataType t : types) {
    register_kernel("LayerNorm", ln_create, ln_compute, ln_delete, {{"T", t}, {"U", TF_FLOAT}});
    register_kernel("LayerNormGrad", nullptr, ln_grad_compute, nullptr,
                    {{"T", t}, {"U", TF_FLOAT}});
  }
}

}  // namespace pgcuda
