// TF_InitKernel of the CUDA reference plugin and the helpers shared by the
// kernel files: registration, attribute reading and host index inputs.
#include <cstdio>
#include <cstring>

#include "kernel_util.h"

namespace pgcuda {

const char* dtype_name(TF_DataType dt) {
  switch (dt) {
    case TF_BOOL: return "bool";
    case TF_INT8: return "int8";
    case TF_UINT8: return "uint8";
    case TF_INT16: return "int16";
    case TF_INT32: return "int32";
    case TF_INT64: return "int64";
    case TF_HALF: return "float16";
    case TF_BFLOAT16: return "bfloat16";
    case TF_FLOAT: return "float32";
    case TF_DOUBLE: return "float64";
    case TF_UINT16: return "uint16";
    case TF_UINT32: return "uint32";
    case TF_UINT64: return "uint64";
    default: return "unsupported dtype";
  }
}

void register_kernel(const char* op, void* (*create)(TF_OpKernelConstruction*),
                     void (*compute)(void*, TF_OpKernelContext*),
                     void (*destroy)(void*),
                     std::initializer_list<TypeConstraint> constraints,
                     std::initializer_list<const char*> host_memory, int priority) {
  TF_Status* st = TF_NewStatus();
  TF_KernelBuilder* b = TF_NewKernelBuilder(op, "GPU", create, compute, destroy);
  if (b == nullptr) {
    fprintf(stderr, "pluggable CUDA plugin: could not create a builder for %s\n", op);
    TF_DeleteStatus(st);
    return;
  }
  for (const TypeConstraint& c : constraints) {
    TF_KernelBuilder_TypeConstraint(b, c.attr, c.type, st);
    if (TF_GetCode(st) != TF_OK) {
      fprintf(stderr, "pluggable CUDA plugin: %s: type constraint %s=%s: %s\n",
              op, c.attr, dtype_name(c.type), TF_Message(st));
      TF_DeleteKernelBuilder(b);
      TF_DeleteStatus(st);
      return;
    }
  }
  for (const char* arg : host_memory) TF_KernelBuilder_HostMemory(b, arg);
  if (priority != 0) TF_KernelBuilder_Priority(b, priority);
  TF_RegisterKernelBuilder(op, b, st);
  if (TF_GetCode(st) != TF_OK) {
    fprintf(stderr, "pluggable CUDA plugin: registering %s failed: %s\n", op,
            TF_Message(st));
  }
  TF_DeleteStatus(st);
}

bool read_bool_attr(TF_OpKernelConstruction* ctx, const char* name, bool dflt) {
  TF_Status* st = TF_NewStatus();
  bool value = dflt;
  TF_Bool has = TF_OpKernelConstruction_HasAttr(ctx, name, st);
  if (TF_GetCode(st) == TF_OK && has) {
    TF_Bool v = 0;
    TF_OpKernelConstruction_GetAttrBool(ctx, name, &v, st);
    if (TF_GetCode(st) == TF_OK) value = v != 0;
  }
  TF_DeleteStatus(st);
  return value;
}

// ---------------------------------------------------------------------------
// Host-memory index inputs

namespace {

// Element i of a host integer tensor of dtype `dt`; false for other dtypes.
// Element i of a host-memory integer tensor, read with memcpy: TensorFlow
// hands kernels small host tensors that need not be aligned to their element
// size (int64 scalars at 4-byte offsets), and a misaligned load is undefined.
template <typename T>
int64_t load_unaligned(const void* data, int64_t i) {
  T v;
  memcpy(&v, static_cast<const char*>(data) + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
  return static_cast<int64_t>(v);
}

bool host_int_at(const void* data, TF_DataType dt, int64_t i, int64_t* v) {
  switch (dt) {
    case TF_INT16: *v = load_unaligned<int16_t>(data, i); return true;
    case TF_INT32: *v = load_unaligned<int32_t>(data, i); return true;
    case TF_INT64: *v = load_unaligned<int64_t>(data, i); return true;
    default: return false;
  }
}

}  // namespace

bool read_host_ints(OpCall& c, const TF_Tensor* t, const char* op, const char* what,
                    int64_t* out, int max_count, int* count) {
  const TF_DataType dt = TF_TensorType(t);
  const int64_t n = TF_TensorElementCount(t);
  if (TF_NumDims(t) > 1) {
    return c.fail(TF_INVALID_ARGUMENT, "%s: %s must be a scalar or vector, got rank %d", op,
                  what, TF_NumDims(t));
  }
  if (n > max_count) {
    return c.fail(TF_INVALID_ARGUMENT, "%s: %s has %lld entries; at most %d are supported",
                  op, what, static_cast<long long>(n), max_count);
  }
  const void* data = TF_TensorData(t);
  for (int64_t i = 0; i < n; ++i) {
    if (!host_int_at(data, dt, i, &out[i])) {
      return c.fail(TF_INVALID_ARGUMENT, "%s: %s must be int16, int32 or int64, got %s", op,
                    what, dtype_name(dt));
    }
  }
  *count = static_cast<int>(n);
  return true;
}

bool read_host_int_vector(OpCall& c, const TF_Tensor* t, const char* op, const char* what,
                          std::vector<int64_t>* out) {
  const TF_DataType dt = TF_TensorType(t);
  const int64_t n = TF_TensorElementCount(t);
  out->resize(static_cast<size_t>(n));
  const void* data = TF_TensorData(t);
  for (int64_t i = 0; i < n; ++i) {
    if (!host_int_at(data, dt, i, &(*out)[i])) {
      return c.fail(TF_INVALID_ARGUMENT, "%s: %s must be int16, int32 or int64, got %s", op,
                    what, dtype_name(dt));
    }
  }
  return true;
}

bool read_host_scalar(OpCall& c, const TF_Tensor* t, const char* op, const char* what,
                      int64_t* out) {
  if (TF_NumDims(t) > 1 || TF_TensorElementCount(t) != 1) {
    return c.fail(TF_INVALID_ARGUMENT, "%s: %s must be a scalar, got %d dimension(s) and %lld "
                  "element(s)", op, what, TF_NumDims(t),
                  static_cast<long long>(TF_TensorElementCount(t)));
  }
  if (!host_int_at(TF_TensorData(t), TF_TensorType(t), 0, out)) {
    return c.fail(TF_INVALID_ARGUMENT, "%s: %s must be int16, int32 or int64, got %s", op, what,
                  dtype_name(TF_TensorType(t)));
  }
  return true;
}

// ---------------------------------------------------------------------------
// Attributes

AttrReader::AttrReader(TF_OpKernelConstruction* ctx, const char* op)
    : ctx_(ctx), op_(op), st_(TF_NewStatus()) {}

AttrReader::~AttrReader() { TF_DeleteStatus(st_); }

bool AttrReader::fail(TF_Code code, const char* fmt, ...) {
  if (!ok_) return false;  // the first failure is the one reported
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  char full[640];
  snprintf(full, sizeof(full), "%s: %s", op_, msg);
  TF_SetStatus(st_, code, full);
  TF_OpKernelConstruction_Failure(ctx_, st_);
  ok_ = false;
  return false;
}

bool AttrReader::has(const char* name) {
  TF_SetStatus(st_, TF_OK, "");
  const TF_Bool h = TF_OpKernelConstruction_HasAttr(ctx_, name, st_);
  if (TF_GetCode(st_) != TF_OK) {
    TF_SetStatus(st_, TF_OK, "");
    return false;
  }
  return h != 0;
}

bool AttrReader::check(const char* name) {
  if (TF_GetCode(st_) == TF_OK) return true;
  std::string msg = TF_Message(st_);
  return fail(TF_INVALID_ARGUMENT, "attribute %s: %s", name, msg.c_str());
}

bool AttrReader::get_bool(const char* name, bool dflt) {
  if (!ok_ || !has(name)) return dflt;
  TF_Bool v = 0;
  TF_OpKernelConstruction_GetAttrBool(ctx_, name, &v, st_);
  return check(name) ? v != 0 : dflt;
}

int64_t AttrReader::get_int(const char* name, int64_t dflt) {
  if (!ok_ || !has(name)) return dflt;
  int64_t v = 0;
  TF_OpKernelConstruction_GetAttrInt64(ctx_, name, &v, st_);
  return check(name) ? v : dflt;
}

float AttrReader::get_float(const char* name, float dflt) {
  if (!ok_ || !has(name)) return dflt;
  float v = 0.0f;
  TF_OpKernelConstruction_GetAttrFloat(ctx_, name, &v, st_);
  return check(name) ? v : dflt;
}

TF_DataType AttrReader::get_type(const char* name, TF_DataType dflt) {
  if (!ok_ || !has(name)) return dflt;
  TF_DataType v = dflt;
  TF_OpKernelConstruction_GetAttrType(ctx_, name, &v, st_);
  return check(name) ? v : dflt;
}

std::string AttrReader::get_string(const char* name, const char* dflt) {
  if (!ok_ || !has(name)) return dflt;
  int32_t list_size = -1, total = -1;
  TF_OpKernelConstruction_GetAttrSize(ctx_, name, &list_size, &total, st_);
  if (!check(name)) return dflt;
  if (total <= 0) return std::string();
  std::string buf(static_cast<size_t>(total), '\0');
  TF_OpKernelConstruction_GetAttrString(ctx_, name, &buf[0], buf.size(), st_);
  return check(name) ? buf : std::string(dflt);
}

std::vector<int64_t> AttrReader::get_int_list(const char* name) {
  std::vector<int64_t> out;
  if (!ok_ || !has(name)) return out;
  int32_t list_size = -1, total = -1;
  TF_OpKernelConstruction_GetAttrSize(ctx_, name, &list_size, &total, st_);
  if (!check(name) || list_size <= 0) return out;
  out.resize(static_cast<size_t>(list_size));
  TF_OpKernelConstruction_GetAttrInt64List(ctx_, name, out.data(), list_size, st_);
  if (!check(name)) out.clear();
  return out;
}

}  // namespace pgcuda

extern "C" void TF_InitKernel(void) {
  pgcuda::register_elementwise_kernels();
  pgcuda::register_compare_kernels();
  pgcuda::register_reduce_kernels();
  pgcuda::register_scan_kernels();
  pgcuda::register_matmul_kernels();
  pgcuda::register_conv_kernels();
  pgcuda::register_conv_grad_kernels();
  pgcuda::register_pool_kernels();
  pgcuda::register_batchnorm_kernels();
  pgcuda::register_nn_kernels();
  pgcuda::register_shape_kernels();
  pgcuda::register_slice_kernels();
  pgcuda::register_concat_kernels();
  pgcuda::register_gather_kernels();
  pgcuda::register_random_kernels();
  pgcuda::register_misc_kernels();
  pgcuda::register_training_kernels();
  pgcuda::register_fused_kernels();
  pgcuda::register_collective_kernels();
  pgcuda::register_attention_kernels();
  pgcuda::register_layernorm_kernels();
  pgcuda::register_bias_gelu_kernels();
}
