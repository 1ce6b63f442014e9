// Kernels that update resource variables in place on the GPU:
// AssignAddVariableOp / AssignSubVariableOp (through TF_AssignUpdateVariable)
// and the optimizers' steps ResourceApplyGradientDescent,
// ResourceApplyKerasMomentum and ResourceApplyAdam (through
// TF_MaybeLockVariableInputMutexesInOrder + TF_GetInputTensorFromVariable),
// the way a TensorFlow PluggableDevice writes them, and MultiTensorApplyAdam,
// one Adam/AdamW step of N float variables in one kernel launch. The scalar
// hyperparameters are device tensors read by the kernel itself, so a step
// never waits for the host. Every input is checked before anything is
// launched, so a bad call leaves the variables as they were.
#include <cmath>
#include <new>
#include <vector>

#include "kernel_util.h"
#include "kernels_experimental.h"
#include "staging.h"

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

// ---------------------------------------------------------------------------
// MultiTensorApplyAdam: inputs var[N], m[N], v[N] (resources), grad[N] (Tgrad),
// then beta1_power, beta2_power, lr, beta1, beta2, epsilon, decay (float
// scalars on the device). Each variable is cut into chunks of kMultiChunk
// elements; a block takes chunks in a grid-stride loop and finds the chunk's
// tensor by a binary search over the table of tensors (MultiEntry), so the
// whole step is one launch. The table travels in the kernel parameters when
// it has at most kParamEntries tensors (3.9 KB of parameters), else in device
// memory with one host-to-device copy per step. A stream being captured into
// a device graph cannot take that copy (its source would be read at each
// replay): a large table is then launched kParamEntries tensors at a time.
// The arithmetic is adam_kernel's (and gradient_descent_kernel's for the
// decay, var -= decay * var, applied where decay is not 0), in the same
// order, so a step gives the per-variable ops' values bit for bit.

constexpr int64_t kMultiChunk = 4096;
constexpr int kParamEntries = 80;

struct MultiEntry {
  float* var;
  float* m;
  float* v;
  const void* grad;
  int64_t n;            // elements
  int64_t first_chunk;  // index of its first chunk in the launch
};

struct MultiScalars {
  const float* p[7];  // beta1_power, beta2_power, lr, beta1, beta2, epsilon, decay
};

struct ParamTable {
  MultiEntry e[kParamEntries];
};

template <typename G>
__device__ void multi_adam_chunks(const MultiEntry* table, int count, int64_t chunks,
                                  const MultiScalars& s) {
  using C = float;
  const C b1p = *s.p[0], b2p = *s.p[1], lr = *s.p[2];
  const C b1 = *s.p[3], b2 = *s.p[4], eps = *s.p[5], decay = *s.p[6];
  const C one = 1;
  const C alpha = lr * sqrt(one - b2p) / (one - b1p);
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    int lo = 0, hi = count - 1;  // the last tensor whose first chunk is <= c
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (table[mid].first_chunk <= c) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    float* __restrict__ var = table[lo].var;
    float* __restrict__ m = table[lo].m;
    float* __restrict__ v = table[lo].v;
    const G* __restrict__ grad = static_cast<const G*>(table[lo].grad);
    const int64_t begin = (c - table[lo].first_chunk) * kMultiChunk;
    const int64_t end = begin + kMultiChunk < table[lo].n ? begin + kMultiChunk : table[lo].n;
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      C w = var[i];
      if (decay != C(0)) {
        w = w - decay * w;
      }
      const C g = to_compute(grad[i]);
      C mi = m[i];
      C vi = v[i];
      mi += (g - mi) * (one - b1);
      vi += (g * g - vi) * (one - b2);
      m[i] = mi;
      v[i] = vi;
      var[i] = w - mi * alpha / (sqrt(vi) + eps);
    }
  }
}

template <typename G>
__global__ void multi_adam_param_kernel(ParamTable table, int count, int64_t chunks,
                                        MultiScalars s) {
  multi_adam_chunks<G>(table.e, count, chunks, s);
}

template <typename G>
__global__ void multi_adam_table_kernel(const MultiEntry* table, int count, int64_t chunks,
                                        MultiScalars s) {
  multi_adam_chunks<G>(table, count, chunks, s);
}

struct MultiState {
  bool use_locking = true;
  int n = 0;
};

void* multi_adam_create(TF_OpKernelConstruction* ctx) {
  AttrReader attrs(ctx, "MultiTensorApplyAdam");
  const int64_t n = attrs.get_int("N", 0);
  const bool locking = attrs.get_bool("use_locking", true);
  if (!attrs.ok()) return nullptr;
  if (n < 1 || n > (1 << 20)) {
    attrs.fail(TF_INVALID_ARGUMENT, "N must be in [1, 2^20], got %lld",
               static_cast<long long>(n));
    return nullptr;
  }
  MultiState* s = new (std::nothrow) MultiState();
  if (s == nullptr) return nullptr;
  s->use_locking = locking;
  s->n = static_cast<int>(n);
  return s;
}

void multi_adam_delete(void* p) { delete static_cast<MultiState*>(p); }

const char* const kMultiScalarNames[7] = {"beta1_power", "beta2_power", "lr", "beta1",
                                          "beta2", "epsilon", "decay"};

// Launches the chunks of `table[0:count]` (first_chunk counted from the
// first of them) with the table in the kernel parameters.
template <typename G>
bool launch_param_table(OpCall& c, const MultiEntry* table, int count,
                        const MultiScalars& s) {
  ParamTable p;
  const int64_t base = table[0].first_chunk;
  for (int i = 0; i < count; ++i) {
    p.e[i] = table[i];
    p.e[i].first_chunk -= base;
  }
  const MultiEntry& last = table[count - 1];
  const int64_t chunks =
      last.first_chunk - base + (last.n + kMultiChunk - 1) / kMultiChunk;
  const unsigned grid = grid_for(chunks, c.sm_count(), 1, 8);
  multi_adam_param_kernel<G><<<grid, kThreads, 0, c.stream()>>>(p, count, chunks, s);
  return c.check_launch("multi_adam_param_kernel");
}

template <typename G>
void launch_multi_adam(OpCall& c, std::vector<MultiEntry>& table, int64_t chunks,
                       const MultiScalars& s) {
  const int count = static_cast<int>(table.size());
  if (count <= kParamEntries) {
    launch_param_table<G>(c, table.data(), count, s);
    return;
  }
  const size_t bytes = table.size() * sizeof(MultiEntry);
  TensorPtr dev_table = c.temp(TF_UINT8, static_cast<int64_t>(bytes));
  if (!dev_table) return;
  void* dst = TF_TensorData(dev_table.get());
  CudaStream* cs = c.cuda_stream();
  const cudaError_t e = host_to_device_consumed(cs->dev, cs->stream, dst, table.data(), bytes);
  if (e == cudaErrorStreamCaptureUnsupported) {
    for (int i = 0; i < count && c.ok(); i += kParamEntries) {
      launch_param_table<G>(c, table.data() + i, count - i < kParamEntries ? count - i
                                                                            : kParamEntries, s);
    }
    return;
  }
  if (!c.check_cuda(e, "cudaMemcpyAsync (multi-tensor table)")) return;
  const unsigned grid = grid_for(chunks, c.sm_count(), 1, 8);
  multi_adam_table_kernel<G><<<grid, kThreads, 0, c.stream()>>>(
      static_cast<const MultiEntry*>(dst), count, chunks, s);
  c.check_launch("multi_adam_table_kernel");
}

void multi_adam_compute(void* k, TF_OpKernelContext* ctx) {
  const MultiState* state = static_cast<const MultiState*>(k);
  OpCall c(ctx);
  if (!c.ok()) return;
  const int n = state->n;
  if (TF_NumInputs(ctx) != 4 * n + 7) {
    c.fail(TF_INVALID_ARGUMENT, "expected %d inputs for N=%d, got %d", 4 * n + 7, n,
           TF_NumInputs(ctx));
    return;
  }
  std::vector<int> var_inputs(3 * static_cast<size_t>(n));
  for (int i = 0; i < 3 * n; ++i) var_inputs[i] = i;
  LockRelease lock;
  TF_MaybeLockVariableInputMutexesInOrder(ctx, state->use_locking, false, var_inputs.data(),
                                          var_inputs.size(), copy_variable, &lock.holder,
                                          c.status());
  if (!c.check_status()) return;
  std::vector<TensorPtr> vars(3 * static_cast<size_t>(n));
  for (int i = 0; i < 3 * n; ++i) {
    TF_Tensor* t = nullptr;
    TF_GetInputTensorFromVariable(ctx, i, state->use_locking, false, false, copy_variable,
                                  &t, c.status());
    vars[i].reset(t);
    if (!c.check_status()) return;
  }
  std::vector<TensorPtr> grads(n);
  TF_DataType gdt = TF_FLOAT;
  char a[160], b[160];
  for (int i = 0; i < n; ++i) {
    grads[i] = c.input(3 * n + i);
    if (!grads[i]) return;
    const TF_DataType t = TF_TensorType(grads[i].get());
    if (i == 0) gdt = t;
    if (t != gdt) {
      c.fail(TF_INVALID_ARGUMENT, "gradient %d is %s but gradient 0 is %s", i, dtype_name(t),
             dtype_name(gdt));
      return;
    }
    const Shape gs = Shape::of(grads[i].get());
    for (int j = 0; j < 3; ++j) {
      TF_Tensor* x = vars[j * n + i].get();
      if (TF_TensorType(x) != TF_FLOAT) {
        c.fail(TF_INVALID_ARGUMENT, "%s %d holds %s values; this kernel updates float "
               "variables", j == 0 ? "variable" : (j == 1 ? "m" : "v"), i,
               dtype_name(TF_TensorType(x)));
        return;
      }
      if (!same_shape(Shape::of(x), gs)) {
        c.fail(TF_INVALID_ARGUMENT, "%s %d has shape %s but gradient %d has shape %s",
               j == 0 ? "variable" : (j == 1 ? "m" : "v"), i,
               shape_str(Shape::of(x), a, sizeof(a)), i, shape_str(gs, b, sizeof(b)));
        return;
      }
    }
  }
  TensorPtr scalars[7];
  MultiScalars s = {};
  for (int i = 0; i < 7; ++i) {
    scalars[i] = c.input(4 * n + i);
    if (!scalars[i]) return;
    if (TF_NumDims(scalars[i].get()) != 0 || TF_TensorType(scalars[i].get()) != TF_FLOAT) {
      c.fail(TF_INVALID_ARGUMENT, "%s must be a float scalar, got %s of shape %s",
             kMultiScalarNames[i], dtype_name(TF_TensorType(scalars[i].get())),
             shape_str(Shape::of(scalars[i].get()), a, sizeof(a)));
      return;
    }
    s.p[i] = static_cast<const float*>(TF_TensorData(scalars[i].get()));
  }
  std::vector<MultiEntry> table;
  table.reserve(n);
  int64_t chunks = 0;
  for (int i = 0; i < n; ++i) {
    const int64_t size = TF_TensorElementCount(grads[i].get());
    if (size == 0) continue;
    table.push_back({static_cast<float*>(TF_TensorData(vars[i].get())),
                     static_cast<float*>(TF_TensorData(vars[n + i].get())),
                     static_cast<float*>(TF_TensorData(vars[2 * n + i].get())),
                     TF_TensorData(grads[i].get()), size, chunks});
    chunks += (size + kMultiChunk - 1) / kMultiChunk;
  }
  if (table.empty()) return;
  switch (gdt) {
    case TF_FLOAT: launch_multi_adam<float>(c, table, chunks, s); break;
    case TF_HALF: launch_multi_adam<__half>(c, table, chunks, s); break;
    case TF_BFLOAT16: launch_multi_adam<__nv_bfloat16>(c, table, chunks, s); break;
    default:
      c.fail(TF_UNIMPLEMENTED, "gradients of dtype %s are not supported (float, half, "
             "bfloat16)", dtype_name(gdt));
  }
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
  for (TF_DataType g : {TF_FLOAT, TF_HALF, TF_BFLOAT16}) {
    register_kernel("MultiTensorApplyAdam", multi_adam_create, multi_adam_compute,
                    multi_adam_delete, {{"T", TF_FLOAT}, {"Tgrad", g}}, {"var", "m", "v"});
  }
}

}  // namespace pgcuda
