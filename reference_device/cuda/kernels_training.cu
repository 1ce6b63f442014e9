// Kernels that update resource variables in place on the GPU:
// AssignAddVariableOp / AssignSubVariableOp (through TF_AssignUpdateVariable)
// and the optimizers' steps ResourceApplyGradientDescent,
// ResourceApplyKerasMomentum and ResourceApplyAdam (through
// TF_MaybeLockVariableInputMutexesInOrder + TF_GetInputTensorFromVariable),
// the way a TensorFlow PluggableDevice writes them. The scalar
// hyperparameters are device tensors read by the kernel itself, so a step
// never waits for the host. Every input is checked before anything is
// launched, so a bad call leaves the variables as they were.
#include <cmath>

#include "kernel_util.h"
#include "kernels_experimental.h"

// The variable functions of kernels_experimental.h are not exported by every
// runtime (TensorFlow's pip packages keep them internal): weak references let
// the plugin load anyway, and these kernels are then not registered.
#pragma weak TF_AssignUpdateVariable
#pragma weak TF_MaybeLockVariableInputMutexesInOrder
#pragma weak TF_GetInputTensorFromVariable
#pragma weak TF_ReleaseVariableInputLockHolder

namespace pgcuda {
namespace {

// ---------------------------------------------------------------------------
// Callbacks of the variable functions (they own the handles they receive).

// copyFunc: dest = source on the kernel's stream (copy on write).
void copy_variable(TF_OpKernelContext* ctx, TF_Tensor* source, TF_Tensor* dest) {
  TensorPtr src(source), dst(dest);
  TF_Status* st = scratch_status();
  CudaStream* cs = fetch_stream(ctx, st);
  if (cs == nullptr) {
    TF_OpKernelContext_Failure(ctx, st);
    return;
  }
  const size_t n = TF_TensorByteSize(source);
  if (n == 0) return;
  flush_device(cs->dev);
  DeviceGuard guard(cs->ordinal);
  cudaError_t e = cudaMemcpyAsync(TF_TensorData(dest), TF_TensorData(source), n,
                                  cudaMemcpyDeviceToDevice, cs->stream);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    set_cuda_status(st, e, "cudaMemcpyAsync (variable copy on write, %zu bytes)", n);
    TF_OpKernelContext_Failure(ctx, st);
  }
}

template <typename T, bool kSub>
__global__ void add_sub_kernel(T* __restrict__ var, const T* __restrict__ x, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const auto a = to_compute(var[i]);
    const auto b = to_compute(x[i]);
    var[i] = from_compute<T>(kSub ? a - b : a + b);
  }
}

// updateFunc: tensor (+|-)= value in place.
void update_variable(TF_OpKernelContext* ctx, TF_Tensor* tensor, TF_Tensor* value, int op) {
  TensorPtr var(tensor), x(value);
  OpCall c(ctx);
  if (!c.ok()) return;
  const int64_t n = TF_TensorElementCount(tensor);
  if (n == 0) return;
  const bool handled = dispatch_numeric(TF_TensorType(tensor), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* v = static_cast<T*>(TF_TensorData(tensor));
    const T* d = static_cast<const T*>(TF_TensorData(value));
    const unsigned grid = grid_for(n, c.sm_count());
    if (op == 0) {
      add_sub_kernel<T, false><<<grid, kThreads, 0, c.stream()>>>(v, d, n);
    } else {
      add_sub_kernel<T, true><<<grid, kThreads, 0, c.stream()>>>(v, d, n);
    }
  });
  if (!handled) {
    c.fail(TF_UNIMPLEMENTED, "assign-update: dtype %s is not supported",
           dtype_name(TF_TensorType(tensor)));
    return;
  }
  c.check_launch("add_sub_kernel");
}

void assign_update(TF_OpKernelContext* ctx, int op) {
  TF_Status* st = scratch_status();
  TF_AssignUpdateVariable(ctx, 0, 1, op, 0, copy_variable, update_variable, st);
  if (TF_GetCode(st) != TF_OK) TF_OpKernelContext_Failure(ctx, st);
}

void assign_add_compute(void*, TF_OpKernelContext* ctx) { assign_update(ctx, 0); }
void assign_sub_compute(void*, TF_OpKernelContext* ctx) { assign_update(ctx, 1); }

// ---------------------------------------------------------------------------
// ResourceApply*: one kernel per op, reading its scalars from device memory.

enum class Apply { kGradientDescent, kKerasMomentum, kAdam };

struct Scalars {
  const void* p[6];
};

template <typename T>
__device__ __forceinline__ compute_t<T> scalar(const Scalars& s, int i) {
  return to_compute(*static_cast<const T*>(s.p[i]));
}

template <typename T>
__global__ void gradient_descent_kernel(T* __restrict__ var, const T* __restrict__ delta,
                                        Scalars s, int64_t n) {
  const auto alpha = scalar<T>(s, 0);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    var[i] = from_compute<T>(to_compute(var[i]) - alpha * to_compute(delta[i]));
  }
}

// accum = accum * momentum - lr * grad; var += accum (nesterov: var +=
// accum * momentum - lr * grad).
template <typename T>
__global__ void keras_momentum_kernel(T* __restrict__ var, T* __restrict__ accum,
                                      const T* __restrict__ grad, Scalars s, bool nesterov,
                                      int64_t n) {
  const auto lr = scalar<T>(s, 0);
  const auto mom = scalar<T>(s, 1);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const auto g = to_compute(grad[i]);
    const auto a = to_compute(accum[i]) * mom - lr * g;
    accum[i] = from_compute<T>(a);
    var[i] = from_compute<T>(to_compute(var[i]) + (nesterov ? a * mom - lr * g : a));
  }
}

// Adam with alpha = lr * sqrt(1 - beta2^t) / (1 - beta1^t).
template <typename T>
__global__ void adam_kernel(T* __restrict__ var, T* __restrict__ m, T* __restrict__ v,
                            const T* __restrict__ grad, Scalars s, bool nesterov, int64_t n) {
  using C = compute_t<T>;
  const C b1p = scalar<T>(s, 0), b2p = scalar<T>(s, 1), lr = scalar<T>(s, 2);
  const C b1 = scalar<T>(s, 3), b2 = scalar<T>(s, 4), eps = scalar<T>(s, 5);
  const C one = 1;
  const C alpha = lr * sqrt(one - b2p) / (one - b1p);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const C g = to_compute(grad[i]);
    C mi = to_compute(m[i]);
    C vi = to_compute(v[i]);
    mi += (g - mi) * (one - b1);
    vi += (g * g - vi) * (one - b2);
    m[i] = from_compute<T>(mi);
    v[i] = from_compute<T>(vi);
    const C num = nesterov ? g * (one - b1) + b1 * mi : mi;
    var[i] = from_compute<T>(to_compute(var[i]) - num * alpha / (sqrt(vi) + eps));
  }
}

struct ApplyOp {
  Apply kind;
  int num_vars;
  int num_scalars;
  int scalar_index[6];
  const char* scalar_name[6];
  int grad_index;
};

const ApplyOp kGradientDescentOp = {Apply::kGradientDescent, 1, 1, {1}, {"alpha"}, 2};
const ApplyOp kKerasMomentumOp = {Apply::kKerasMomentum, 2, 2, {2, 4}, {"lr", "momentum"}, 3};
const ApplyOp kAdamOp = {Apply::kAdam, 3, 6, {3, 4, 5, 6, 7, 8},
                         {"beta1_power", "beta2_power", "lr", "beta1", "beta2", "epsilon"}, 9};

struct ApplyState {
  bool use_locking = false;
  bool nesterov = false;
};

void* apply_create(TF_OpKernelConstruction* ctx) {
  ApplyState* s = new (std::nothrow) ApplyState();
  if (s == nullptr) return nullptr;
  s->use_locking = read_bool_attr(ctx, "use_locking", false);
  s->nesterov = read_bool_attr(ctx, "use_nesterov", false);
  return s;
}

void apply_delete(void* p) { delete static_cast<ApplyState*>(p); }

// Releases the lock holder when the compute call returns.
struct LockRelease {
  TF_VariableInputLockHolder* holder = nullptr;
  ~LockRelease() { TF_ReleaseVariableInputLockHolder(holder); }
};

bool same_shape(const Shape& a, const Shape& b) {
  if (a.rank != b.rank) return false;
  for (int i = 0; i < a.rank; ++i) {
    if (a.dims[i] != b.dims[i]) return false;
  }
  return true;
}

void apply(const ApplyState* state, TF_OpKernelContext* ctx, const ApplyOp& op) {
  OpCall c(ctx);
  if (!c.ok()) return;
  static const int kVarInputs[3] = {0, 1, 2};
  LockRelease lock;
  TF_MaybeLockVariableInputMutexesInOrder(ctx, state->use_locking, false, kVarInputs,
                                          static_cast<size_t>(op.num_vars), copy_variable,
                                          &lock.holder, c.status());
  if (!c.check_status()) return;
  TensorPtr vars[3];
  for (int i = 0; i < op.num_vars; ++i) {
    TF_Tensor* t = nullptr;
    TF_GetInputTensorFromVariable(ctx, i, state->use_locking, false, false, copy_variable,
                                  &t, c.status());
    vars[i].reset(t);
    if (!c.check_status()) return;
  }
  TensorPtr grad = c.input(op.grad_index);
  if (!grad) return;
  const TF_DataType dt = TF_TensorType(grad.get());
  const Shape shape = Shape::of(grad.get());
  char a[160], b[160];
  for (int i = 0; i < op.num_vars; ++i) {
    if (TF_TensorType(vars[i].get()) != dt) {
      c.fail(TF_INVALID_ARGUMENT, "variable input %d holds %s values but the gradient is %s",
             i, dtype_name(TF_TensorType(vars[i].get())), dtype_name(dt));
      return;
    }
    const Shape vs = Shape::of(vars[i].get());
    if (!same_shape(vs, shape)) {
      c.fail(TF_INVALID_ARGUMENT, "variable input %d has shape %s but the gradient has "
             "shape %s", i, shape_str(vs, a, sizeof(a)), shape_str(shape, b, sizeof(b)));
      return;
    }
  }
  TensorPtr scalars[6];
  Scalars s = {};
  for (int i = 0; i < op.num_scalars; ++i) {
    scalars[i] = c.input(op.scalar_index[i]);
    if (!scalars[i]) return;
    if (TF_NumDims(scalars[i].get()) != 0) {
      c.fail(TF_INVALID_ARGUMENT, "%s is not a scalar: %s", op.scalar_name[i],
             shape_str(Shape::of(scalars[i].get()), a, sizeof(a)));
      return;
    }
    s.p[i] = TF_TensorData(scalars[i].get());
  }
  const int64_t n = shape.num_elements();
  if (n == 0) return;
  const unsigned grid = grid_for(n, c.sm_count());
  void* w0 = TF_TensorData(vars[0].get());
  void* w1 = op.num_vars > 1 ? TF_TensorData(vars[1].get()) : nullptr;
  void* w2 = op.num_vars > 2 ? TF_TensorData(vars[2].get()) : nullptr;
  const void* g = TF_TensorData(grad.get());
  const bool handled = dispatch_float(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* var = static_cast<T*>(w0);
    const T* gr = static_cast<const T*>(g);
    switch (op.kind) {
      case Apply::kGradientDescent:
        gradient_descent_kernel<T><<<grid, kThreads, 0, c.stream()>>>(var, gr, s, n);
        break;
      case Apply::kKerasMomentum:
        keras_momentum_kernel<T><<<grid, kThreads, 0, c.stream()>>>(
            var, static_cast<T*>(w1), gr, s, state->nesterov, n);
        break;
      case Apply::kAdam:
        adam_kernel<T><<<grid, kThreads, 0, c.stream()>>>(
            var, static_cast<T*>(w1), static_cast<T*>(w2), gr, s, state->nesterov, n);
        break;
    }
  });
  if (!handled) {
    c.fail(TF_UNIMPLEMENTED, "dtype %s is not supported", dtype_name(dt));
    return;
  }
  c.check_launch("training update");
}

void gradient_descent_compute(void* k, TF_OpKernelContext* ctx) {
  apply(static_cast<const ApplyState*>(k), ctx, kGradientDescentOp);
}
void keras_momentum_compute(void* k, TF_OpKernelContext* ctx) {
  apply(static_cast<const ApplyState*>(k), ctx, kKerasMomentumOp);
}
void adam_compute(void* k, TF_OpKernelContext* ctx) {
  apply(static_cast<const ApplyState*>(k), ctx, kAdamOp);
}

}  // namespace

void register_training_kernels() {
  if (TF_AssignUpdateVariable == nullptr || TF_MaybeLockVariableInputMutexesInOrder == nullptr ||
      TF_GetInputTensorFromVariable == nullptr || TF_ReleaseVariableInputLockHolder == nullptr)
    return;
  for (TF_DataType t : kNumericTypes) {
    register_kernel("AssignAddVariableOp", nullptr, assign_add_compute, nullptr,
                    {{"dtype", t}}, {"resource"});
    register_kernel("AssignSubVariableOp", nullptr, assign_sub_compute, nullptr,
                    {{"dtype", t}}, {"resource"});
  }
  for (TF_DataType t : kFloatTypes) {
    register_kernel("ResourceApplyGradientDescent", apply_create, gradient_descent_compute,
                    apply_delete, {{"T", t}}, {"var"});
    register_kernel("ResourceApplyKerasMomentum", apply_create, keras_momentum_compute,
                    apply_delete, {{"T", t}}, {"var", "accum"});
    register_kernel("ResourceApplyAdam", apply_create, adam_compute, apply_delete,
                    {{"T", t}}, {"var", "m", "v"});
  }
}

}  // namespace pgcuda
