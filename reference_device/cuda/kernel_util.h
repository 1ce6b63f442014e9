// Helpers shared by the kernel files: the per-call context (stream, current
// device, status, failure reporting), tensor handles, shapes, launch sizes,
// element-type conversions, type dispatch and registration.
#ifndef PLUGGABLE_CUDA_KERNEL_UTIL_H_
#define PLUGGABLE_CUDA_KERNEL_UTIL_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "cuda_common.h"
#include "kernels.h"
#include "launch_queue.h"
#include "profiler.h"
#include "tf_tensor.h"

namespace pgcuda {

// ---------------------------------------------------------------------------
// Tensors and shapes

struct TensorDeleter {
  void operator()(TF_Tensor* t) const { TF_DeleteTensor(t); }
};
// Owns one TF_Tensor handle; deletes it when the compute call returns.
using TensorPtr = std::unique_ptr<TF_Tensor, TensorDeleter>;

// A tensor shape (row-major).
struct Shape {
  int rank = 0;
  int64_t dims[TF_MAX_DIMS] = {0};

  int64_t num_elements() const {
    int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= dims[i];
    return n;
  }
  static Shape of(const TF_Tensor* t) {
    Shape s;
    s.rank = TF_NumDims(t);
    if (s.rank < 0) s.rank = 0;
    if (s.rank > TF_MAX_DIMS) s.rank = TF_MAX_DIMS;
    for (int i = 0; i < s.rank; ++i) s.dims[i] = TF_Dim(t, i);
    return s;
  }
};

// Formats a shape as "[2,3]" into `buf`.
inline const char* shape_str(const Shape& s, char* buf, size_t n) {
  size_t pos = 0;
  pos += snprintf(buf + pos, n - pos, "[");
  for (int i = 0; i < s.rank && pos < n; ++i) {
    pos += snprintf(buf + pos, n - pos, i ? ",%lld" : "%lld",
                    static_cast<long long>(s.dims[i]));
  }
  if (pos < n) snprintf(buf + pos, n - pos, "]");
  return buf;
}

// A status reused by every compute call of one thread.
struct ThreadStatus {
  TF_Status* s = TF_NewStatus();
  ~ThreadStatus() { TF_DeleteStatus(s); }
};
inline TF_Status* scratch_status() {
  thread_local ThreadStatus holder;
  TF_SetStatus(holder.s, TF_OK, "");
  return holder.s;
}

inline CudaStream* fetch_stream(TF_OpKernelContext* ctx, TF_Status* st) {
  SP_Stream s = TF_GetStream(ctx, st);
  if (TF_GetCode(st) != TF_OK) return nullptr;
  return stream_of(s);
}

// ---------------------------------------------------------------------------
// A kernel launch kept in a LaunchQueue item: the kernel, its launch shape
// and its arguments, launched by the thread that issues the item.
template <typename... P>
struct QueuedKernel {
  void (*kernel)(P...);
  dim3 grid, block;
  size_t smem;
  std::tuple<P...> args;

  static void run(const LaunchQueue::Item& it) {
    const QueuedKernel* k = reinterpret_cast<const QueuedKernel*>(it.payload);
    std::apply(
        [&](const P&... a) {
          void* argv[sizeof...(P) + 1] = {const_cast<void*>(static_cast<const void*>(&a))...};
          (void)cudaLaunchKernel(reinterpret_cast<const void*>(k->kernel), k->grid, k->block,
                                 argv, k->smem, it.stream);
        },
        k->args);
  }
};

// ---------------------------------------------------------------------------
// The context of one compute call: gets the stream, makes its device current
// (restored on return) and reports failures to the framework.
//
// A call made with kMayDefer may hand its kernels to the device's launch
// queue (launch()); any other call, and the first use of stream() or
// cuda_stream() in a deferring one, first issues what the queue holds, so
// work launched directly always comes after it (launch_queue.h).
class OpCall {
 public:
  enum Defer { kMayDefer };
  explicit OpCall(TF_OpKernelContext* ctx) : OpCall(ctx, false) {}
  OpCall(TF_OpKernelContext* ctx, Defer) : OpCall(ctx, true) {}
  ~OpCall() {
    if (prof_ >= 0) prof_end(prof_, cs_);
  }
  OpCall(const OpCall&) = delete;
  OpCall& operator=(const OpCall&) = delete;

  bool ok() const { return ok_; }
  TF_OpKernelContext* ctx() const { return ctx_; }
  TF_Status* status() const { return st_; }
  CudaStream* cuda_stream() const {
    direct();
    return cs_;
  }
  cudaStream_t stream() const {
    direct();
    return cs_->stream;
  }
  int sm_count() const { return cs_->dev != nullptr ? cs_->dev->sm_count : 1; }
  int64_t l2_bytes() const { return cs_->dev != nullptr ? cs_->dev->l2_bytes : 0; }
  int ordinal() const { return cs_->ordinal; }

  // Records a failure with a formatted message; returns false.
  bool fail(TF_Code code, const char* fmt, ...) __attribute__((format(printf, 3, 4))) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    TF_SetStatus(st_, code, msg);
    TF_OpKernelContext_Failure(ctx_, st_);
    ok_ = false;
    return false;
  }
  // Records the failure in status() if it is not OK; returns whether OK.
  bool check_status() {
    if (TF_GetCode(st_) == TF_OK) return true;
    TF_OpKernelContext_Failure(ctx_, st_);
    ok_ = false;
    return false;
  }
  // Records a failure for a CUDA error; returns whether `e` is cudaSuccess.
  bool check_cuda(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return true;
    (void)cudaGetLastError();
    set_cuda_status(st_, e, "%s", what);
    TF_OpKernelContext_Failure(ctx_, st_);
    ok_ = false;
    return false;
  }
  // Checks the launch that was just made.
  bool check_launch(const char* kernel_name) {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) return true;
    char what[160];
    snprintf(what, sizeof(what), "launch of %s", kernel_name);
    set_cuda_status(st_, e, "%s", what);
    TF_OpKernelContext_Failure(ctx_, st_);
    ok_ = false;
    return false;
  }

  // Input `i` (null after recording a failure).
  TensorPtr input(int i) {
    TF_Tensor* t = nullptr;
    TF_GetInput(ctx_, i, &t, st_);
    if (TF_GetCode(st_) != TF_OK) {
      if (t != nullptr) TF_DeleteTensor(t);
      check_status();
      return TensorPtr();
    }
    return TensorPtr(t);
  }
  // Allocates output `i` of `shape` (null after recording a failure).
  TensorPtr output(int i, TF_DataType dtype, const Shape& shape) {
    const size_t len = static_cast<size_t>(shape.num_elements()) * TF_DataTypeSize(dtype);
    return allocated(TF_AllocateOutput(ctx_, i, dtype, shape.dims, shape.rank, len, st_),
                     "could not allocate the output");
  }
  // Output `i` over input `input`'s buffer where the caller donated that
  // input and nothing else holds it (TF_ForwardInputOrAllocateOutput; the
  // kernel must hold no handle of that input at the call), else a new
  // allocation (null after recording a failure).
  TensorPtr forward_or_output(int input, int i, const Shape& shape) {
    return allocated(TF_ForwardInputOrAllocateOutput(ctx_, &input, 1, i, shape.dims,
                                                     shape.rank, nullptr, st_),
                     "could not allocate the output");
  }
  // Allocates a device temp of `n` elements (null after recording a failure).
  TensorPtr temp(TF_DataType dtype, int64_t n) {
    int64_t dims[1] = {n};
    return allocated(TF_AllocateTemp(ctx_, dtype, dims, 1, nullptr, st_),
                     "could not allocate a temporary");
  }
  // Makes output `i` share the buffer of `t`.
  bool set_output(int i, const TF_Tensor* t) {
    TF_SetOutput(ctx_, i, t, st_);
    return check_status();
  }

  // Launches `kernel` on the call's stream, through the device's launch
  // queue when the call may defer (a failed launch is then the stream's
  // deferred error), else at once and checked. Returns false after
  // recording a failure.
  template <typename... P, typename... A>
  bool launch(const char* name, void (*kernel)(P...), dim3 grid, dim3 block, A... args) {
    return launch_smem(name, kernel, grid, block, 0, args...);
  }
  // The same with `smem` bytes of dynamic shared memory.
  template <typename... P, typename... A>
  bool launch_smem(const char* name, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
                   A... args) {
    if (queue_ != nullptr) {
      using Call = QueuedKernel<P...>;
      static_assert(sizeof(Call) <= LaunchQueue::kPayloadBytes, "kernel arguments too large");
      static_assert(std::is_trivially_destructible<Call>::value, "queued arguments are copied");
      LaunchQueue::Item* it = queue_->reserve();
      new (it->payload) Call{kernel, grid, block, smem,
                             std::tuple<P...>(static_cast<P>(args)...)};
      it->run = &Call::run;
      it->stream = cs_->stream;
      it->cs = cs_;
      it->name = name;
      queue_->publish();
      return true;
    }
    kernel<<<grid, block, smem, cs_->stream>>>(static_cast<P>(args)...);
    return check_launch(name);
  }

 private:
  // `t` from an allocation that set st_: owned, or null after recording the
  // failure (`what` where the call failed without saying why).
  TensorPtr allocated(TF_Tensor* t, const char* what) {
    if (TF_GetCode(st_) != TF_OK || t == nullptr) {
      if (t != nullptr) TF_DeleteTensor(t);
      if (TF_GetCode(st_) == TF_OK) TF_SetStatus(st_, TF_RESOURCE_EXHAUSTED, what);
      check_status();
      return TensorPtr();
    }
    return TensorPtr(t);
  }

  OpCall(TF_OpKernelContext* ctx, bool may_defer)
      : ctx_(ctx),
        st_(scratch_status()),
        cs_(fetch_stream(ctx, st_)),
        guard_(cs_ != nullptr ? cs_->ordinal : TF_GetDeviceId(ctx)) {
    if (cs_ == nullptr) {
      if (TF_GetCode(st_) == TF_OK) {
        TF_SetStatus(st_, TF_INTERNAL, "kernel has no CUDA stream");
      }
      TF_OpKernelContext_Failure(ctx_, st_);
      ok_ = false;
      return;
    }
    if (guard_.error() != cudaSuccess) {
      set_cuda_status(st_, guard_.error(), "cudaSetDevice(%d)", cs_->ordinal);
      TF_OpKernelContext_Failure(ctx_, st_);
      ok_ = false;
      return;
    }
    const bool prof = profiling();
    LaunchQueue* q = queue_of(cs_->dev);
    if (q != nullptr) {
      if (may_defer && !prof && cs_->dev->capturing.load(std::memory_order_relaxed) == 0) {
        queue_ = q;
      } else {
        q->flush();
      }
    }
    if (prof) {  // times the work this call enqueues (profiler.h)
      TF_StringView name = TF_GetOpKernelName(ctx_);
      prof_ = prof_begin(name.data, name.len, cs_, 0);
    }
  }
  // Before work goes on the stream directly: issues what the queue holds
  // and stops deferring.
  void direct() const {
    if (queue_ != nullptr) {
      queue_->flush();
      queue_ = nullptr;
    }
  }

  TF_OpKernelContext* ctx_;
  TF_Status* st_;
  CudaStream* cs_;
  DeviceGuard guard_;
  bool ok_ = true;
  int64_t prof_ = -1;  // profiler handle of this call (-1: not recorded)
  mutable LaunchQueue* queue_ = nullptr;  // set while launches may be queued
};

// ---------------------------------------------------------------------------
// Launch sizes

constexpr int kThreads = 256;

// Blocks for a grid-stride loop over `work` items: enough to fill the GPU
// (`per_sm` blocks of kThreads per multiprocessor), no more than needed.
inline unsigned grid_for(int64_t work, int sm_count, int threads = kThreads,
                         int per_sm = 8) {
  int64_t blocks = (work + threads - 1) / threads;
  const int64_t cap = static_cast<int64_t>(sm_count) * per_sm;
  if (blocks > cap) blocks = cap;
  if (blocks < 1) blocks = 1;
  return static_cast<unsigned>(blocks);
}

// Blocks for a memory-bound elementwise kernel (a grid-stride loop) that
// moves `bytes` in all. Where they exceed the L2 cache (`l2_bytes`): one
// item per thread, up to 1024 blocks per multiprocessor, since many short
// blocks keep more DRAM accesses in flight than a grid capped at full
// occupancy whose threads wait for one access after another (AddV2 of
// 64 Mi float32 on an H100: 2850-3030 GB/s against 2780-2855). Data that fits
// in L2 is served faster by the capped grid's loop (Exp of 4096x1024
// float32 on an H100: 7.9-8.1 us per call against 9.6 with one item per
// thread; unary ops of aligned tensors now take unary_chunk_kernel in
// elementwise.h instead).
inline unsigned grid_for_stream(int64_t work, int sm_count, int64_t bytes, int64_t l2_bytes) {
  return grid_for(work, sm_count, kThreads, bytes > l2_bytes ? 1024 : 8);
}

// ---------------------------------------------------------------------------
// Element types

// One-byte boolean (0 or 1 in memory); only Cast needs to tell it from uint8.
struct pg_bool {
  uint8_t v;
};

// Arithmetic type for an element type: float for the 16-bit floats.
template <typename T> struct ComputeType { using type = T; };
template <> struct ComputeType<__half> { using type = float; };
template <> struct ComputeType<__nv_bfloat16> { using type = float; };
template <typename T> using compute_t = typename ComputeType<T>::type;

template <typename T>
__device__ __forceinline__ compute_t<T> to_compute(T x) { return x; }
__device__ __forceinline__ float to_compute(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_compute(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

template <typename T> struct FromCompute {
  __device__ __forceinline__ static T conv(compute_t<T> x) { return x; }
};
template <> struct FromCompute<__half> {
  __device__ __forceinline__ static __half conv(float x) { return __float2half_rn(x); }
};
template <> struct FromCompute<__nv_bfloat16> {
  __device__ __forceinline__ static __nv_bfloat16 conv(float x) {
    return __float2bfloat16_rn(x);
  }
};
template <typename T>
__device__ __forceinline__ T from_compute(compute_t<T> x) {
  return FromCompute<T>::conv(x);
}

template <typename T> struct IsFloatType {
  static constexpr bool value = std::is_floating_point<T>::value ||
                                std::is_same<T, __half>::value ||
                                std::is_same<T, __nv_bfloat16>::value;
};

template <typename T> struct Tag { using type = T; };

// Calls f(Tag<T>{}) for the element type of `dt`; false if not handled.
template <typename F>
bool dispatch_float(TF_DataType dt, F&& f) {
  switch (dt) {
    case TF_HALF: f(Tag<__half>{}); return true;
    case TF_BFLOAT16: f(Tag<__nv_bfloat16>{}); return true;
    case TF_FLOAT: f(Tag<float>{}); return true;
    case TF_DOUBLE: f(Tag<double>{}); return true;
    default: return false;
  }
}
template <typename F>
bool dispatch_numeric(TF_DataType dt, F&& f) {
  switch (dt) {
    case TF_INT32: f(Tag<int32_t>{}); return true;
    case TF_INT64: f(Tag<int64_t>{}); return true;
    default: return dispatch_float(dt, std::forward<F>(f));
  }
}
// Every core dtype; TF_BOOL is given as `Bool` (uint8_t or pg_bool).
template <typename Bool = uint8_t, typename F>
bool dispatch_all(TF_DataType dt, F&& f) {
  switch (dt) {
    case TF_BOOL: f(Tag<Bool>{}); return true;
    case TF_INT8: f(Tag<int8_t>{}); return true;
    case TF_UINT8: f(Tag<uint8_t>{}); return true;
    case TF_INT16: f(Tag<int16_t>{}); return true;
    default: return dispatch_numeric(dt, std::forward<F>(f));
  }
}
// An unsigned type of `bytes` bytes (1, 2, 4, 8), for byte-moving kernels.
template <typename F>
bool dispatch_size(size_t bytes, F&& f) {
  switch (bytes) {
    case 1: f(Tag<uint8_t>{}); return true;
    case 2: f(Tag<uint16_t>{}); return true;
    case 4: f(Tag<uint32_t>{}); return true;
    case 8: f(Tag<uint64_t>{}); return true;
    default: return false;
  }
}

const char* dtype_name(TF_DataType dt);

// ---------------------------------------------------------------------------
// Host-memory index inputs (init_kernels.cu)

// Reads a host int16/int32/int64 scalar or vector tensor `t` into `out`
// (at most `max_count` entries; `*count` is set to the number read). Records a
// failure naming `op` and `what` (e.g. "begin") and returns false on a bad
// rank, count or dtype.
bool read_host_ints(OpCall& c, const TF_Tensor* t, const char* op, const char* what,
                    int64_t* out, int max_count, int* count);
// Reads a host int16/int32/int64 tensor of any shape into `out`.
bool read_host_int_vector(OpCall& c, const TF_Tensor* t, const char* op, const char* what,
                          std::vector<int64_t>* out);
// Reads a host integer scalar (or one-element vector); false after recording
// a failure.
bool read_host_scalar(OpCall& c, const TF_Tensor* t, const char* op, const char* what,
                      int64_t* out);

// ---------------------------------------------------------------------------
// Attributes, read in a kernel's create function (init_kernels.cu)

// Reads the attributes of one kernel instance. Getters return the default
// when the attribute is absent; a wrong kind or value is recorded once with
// TF_OpKernelConstruction_Failure (naming the op), after which ok() is false
// and create should return NULL.
class AttrReader {
 public:
  AttrReader(TF_OpKernelConstruction* ctx, const char* op);
  ~AttrReader();
  AttrReader(const AttrReader&) = delete;
  AttrReader& operator=(const AttrReader&) = delete;

  bool ok() const { return ok_; }
  const char* op() const { return op_; }
  bool get_bool(const char* name, bool dflt);
  int64_t get_int(const char* name, int64_t dflt);
  float get_float(const char* name, float dflt);
  TF_DataType get_type(const char* name, TF_DataType dflt);
  std::string get_string(const char* name, const char* dflt);
  std::vector<int64_t> get_int_list(const char* name);
  // Records a failure "<op>: <message>"; returns false.
  bool fail(TF_Code code, const char* fmt, ...) __attribute__((format(printf, 3, 4)));

 private:
  bool has(const char* name);
  bool check(const char* name);

  TF_OpKernelConstruction* ctx_;
  const char* op_;
  TF_Status* st_;
  bool ok_ = true;
};

// ---------------------------------------------------------------------------
// Asynchronous checks (kernels_misc.cu)
//
// Errors that only the device work can find (an index out of range, a NaN)
// follow one path: the kernel records the first bad element it meets in a
// DeviceCheck record in device memory, the record is copied into a pinned
// host slot of the stream, and a host function enqueued after the copy turns
// a set record into the stream's deferred error, reported at the next
// synchronisation (block_host_until_done). Records of one stream are reused
// in a ring: stream order puts the host function of one use before the copy
// of the next use of the same slot.

// One record: `pos` is -1 until a bad element is met, then its position
// (flat, in the operand named by the message) and `value` its value.
struct DeviceCheck {
  long long pos;
  long long value;
};

constexpr unsigned int kPinnedCheckSlots = 1024;

// Records (pos, value) unless an earlier thread already recorded one (the
// first writer wins; `pos` and `value` always belong together).
__device__ __forceinline__ void record_bad(DeviceCheck* rec, long long pos, long long value) {
  unsigned long long* p = reinterpret_cast<unsigned long long*>(&rec->pos);
  if (atomicCAS(p, ~0ull, static_cast<unsigned long long>(pos)) == ~0ull) rec->value = value;
}

// Builds the message of a failed check from its record (runs on CUDA's
// callback thread: no CUDA calls).
using CheckMessageFn = std::function<std::string(const DeviceCheck&)>;

// A check around one kernel call: begin() allocates and clears the record,
// the kernel gets record() and calls record_bad, finish() (after the caller
// checked the launch) enqueues the copy and the host function. On failure
// both record it in the call and return false. begin() refuses a call made
// while its stream is capturing a device graph (UNIMPLEMENTED): the host
// function reports once, a replay would run it again.
class AsyncCheck {
 public:
  explicit AsyncCheck(OpCall& c) : c_(c) {}
  bool begin();
  DeviceCheck* record() const { return rec_; }
  // `code` is the status code of the error; `message` formats its text
  // (the caller's "<op> on GPU:<n>: " prefix is added).
  bool finish(TF_Code code, CheckMessageFn message);

 private:
  OpCall& c_;
  TensorPtr temp_;
  DeviceCheck* rec_ = nullptr;
};

// ---------------------------------------------------------------------------
// Registration (init_kernels.cu)

constexpr TF_DataType kFloatTypes[] = {TF_HALF, TF_BFLOAT16, TF_FLOAT, TF_DOUBLE};
constexpr TF_DataType kNumericTypes[] = {TF_HALF, TF_BFLOAT16, TF_FLOAT,
                                         TF_DOUBLE, TF_INT32, TF_INT64};
constexpr TF_DataType kAllTypes[] = {TF_BOOL,  TF_INT8,  TF_UINT8,   TF_INT16,
                                     TF_INT32, TF_INT64, TF_HALF,    TF_BFLOAT16,
                                     TF_FLOAT, TF_DOUBLE};
constexpr TF_DataType kIntTypes[] = {TF_INT32, TF_INT64};

struct TypeConstraint {
  const char* attr;
  TF_DataType type;
};

// Registers one kernel of `op` on "GPU"; prints a warning on failure.
// `priority` (TF_KernelBuilder_Priority, default 0): inside TensorFlow the
// plugin's kernels share the "GPU" device type with TensorFlow's own GPU
// kernels (tensorflow-cpu registers hundreds: data, control flow, Reshape);
// where both match a node at the same priority TensorFlow refuses to run it
// ("Multiple OpKernel registrations match NodeDef at the same priority"), so
// a kernel that overlaps one of TensorFlow's is registered at priority 1.
void register_kernel(const char* op, void* (*create)(TF_OpKernelConstruction*),
                     void (*compute)(void*, TF_OpKernelContext*),
                     void (*destroy)(void*),
                     std::initializer_list<TypeConstraint> constraints,
                     std::initializer_list<const char*> host_memory = {},
                     int priority = 0);

// Reads an optional bool attribute (false when absent).
bool read_bool_attr(TF_OpKernelConstruction* ctx, const char* name, bool dflt);

// Transposes a row-major array of `rank` dims (`dims` are the input's) by
// `perm` (output dim i = input dim perm[i]) on `stream`. Shared by Transpose
// and the reductions. Returns cudaErrorNotSupported when the collapsed rank
// exceeds the kernel's limit.
cudaError_t launch_transpose(const void* in, void* out, size_t elem_size,
                             int rank, const int64_t* dims, const int* perm,
                             cudaStream_t stream, int sm_count);

// Sums the [rows, cols] float array `in` (of dtype `dt`) over its rows into
// `out` (cols elements) on the call's stream, with the reductions' column
// kernels (16-bit floats accumulate in float; no rows give zeros). Shared by
// the kernels whose gradient has a bias term. Returns false after recording a
// failure (naming `name`).
bool sum_leading_rows(OpCall& c, const char* name, TF_DataType dt, const void* in, void* out,
                      int64_t rows, int64_t cols);

struct BlasApi;  // cublas_loader.h

// The cuBLAS handle bound to the call's stream, created on first use with
// its own workspace (kernels_matmul.cu; shared by MatMul and the attention
// kernels). Call with the stream's `mu` held; null after recording a failure.
void* stream_blas_handle(OpCall& c, const BlasApi* api);

// The op name as the kernel state (used in messages): `create` of a kernel
// whose only state is its name.
template <const char* NAME>
void* name_create(TF_OpKernelConstruction*) {
  return const_cast<char*>(NAME);
}
inline void no_delete(void*) {}

// Per-file registration entry points.
void register_elementwise_kernels();
void register_compare_kernels();
void register_reduce_kernels();
void register_scan_kernels();
void register_matmul_kernels();
void register_conv_kernels();
void register_conv_grad_kernels();
void register_pool_kernels();
void register_batchnorm_kernels();
void register_nn_kernels();
void register_shape_kernels();
void register_slice_kernels();
void register_concat_kernels();
void register_gather_kernels();
void register_random_kernels();
void register_misc_kernels();
void register_training_kernels();  // kernels_training.cu
void register_collective_kernels();  // kernels_collective.cu
void register_attention_kernels();   // kernels_attention.cu
void register_layernorm_kernels();   // kernels_layernorm.cu
void register_bias_gelu_kernels();   // kernels_bias_gelu.cu
void register_fused_kernels();  // kernels_fused.cu

}  // namespace pgcuda

#endif  // PLUGGABLE_CUDA_KERNEL_UTIL_H_
