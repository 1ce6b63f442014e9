/* Host reference device: helpers shared by the kernels.
 *
 *   - md_shape: a small by-value shape type, plus formatting for messages
 *   - md_fail: report an error from compute_func / create_func
 *   - md_get_input / md_allocate_output: tensor handles with shapes
 *   - md_enqueue: hand a task to the kernel's stream
 *   - md_where / md_task_error: errors found by the device work itself
 *   - attribute getters for create functions
 *   - md_bcast: broadcasting of up to three inputs against one output
 *   - md_view: copies between strided views (transpose, slices, padding)
 *   - dtype lists (X-macros) and per-dtype load/store between the storage
 *     type and the type arithmetic is done in
 *
 * The pattern every compute_func follows:
 *   1. get the inputs, validate shapes and attributes (md_fail on error)
 *   2. allocate the outputs
 *   3. malloc a task argument holding raw data pointers and sizes
 *   4. md_enqueue it (the stream runs it later and frees the argument)
 *   5. TF_DeleteTensor every handle
 * The core keeps the buffers alive until the stream has run the task. */
#ifndef MY_DEVICE_KERNEL_UTIL_H_
#define MY_DEVICE_KERNEL_UTIL_H_

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels.h"
#include "stream.h"
#include "tf_tensor.h"

#pragma GCC visibility push(hidden)

/*** Shapes ***/

typedef struct md_shape {
  int rank;
  int64_t dims[TF_MAX_DIMS];
} md_shape;

/* Shape of a tensor. */
md_shape md_shape_of(const TF_Tensor* t);

/* Number of elements (1 for a scalar). */
int64_t md_num_elements(const md_shape* shape);

/* Writes "[d0,d1,...]" into buf (truncated to `size`); returns buf. */
const char* md_shape_str(const md_shape* shape, char* buf, size_t size);

/* Enough room for any shape printed by md_shape_str. */
#define MD_SHAPE_STR_SIZE (TF_MAX_DIMS * 21 + 3)

/* Row-major strides (in elements) of `shape`. */
void md_row_major_strides(const md_shape* shape, int64_t* strides);

/* Normalises axis `axis` of a tensor of rank `rank` (negative counts from the
 * end) into *out. Returns 0 if it is outside [-rank, rank). */
int md_normalize_axis(int64_t axis, int rank, int* out);

/*** Errors ***/

/* Fails the kernel call with `code` and a printf-style message. */
void md_fail(TF_OpKernelContext* ctx, TF_Code code, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Fails kernel construction with `code` and a printf-style message. */
void md_construction_fail(TF_OpKernelConstruction* ctx, TF_Code code,
                          const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Op name of the running kernel, for messages: printf("%.*s", MD_OP(ctx)). */
#define MD_OP(ctx) (int)TF_GetOpKernelName(ctx).len, TF_GetOpKernelName(ctx).data

/*** Tensors ***/

/* Input `i` and its shape, or NULL after failing the call. */
TF_Tensor* md_get_input(TF_OpKernelContext* ctx, int i, md_shape* shape);

/* Allocates output `i`, or returns NULL after failing the call. */
TF_Tensor* md_allocate_output(TF_OpKernelContext* ctx, int i, TF_DataType dtype,
                              const md_shape* shape);
/* Output `i` of `shape` over input `input`'s buffer where the caller
 * donated that input and nothing else holds it (TF_ForwardInputOrAllocateOutput:
 * the kernel must not hold a handle of that input at the call), else a new
 * allocation; NULL after failing the call. */
TF_Tensor* md_forward_or_allocate_output(TF_OpKernelContext* ctx, int input, int i,
                                         const md_shape* shape);

/* Reads a host-memory int16, int32 or int64 tensor of rank <= 1 into
 * `values` (at most `max` entries). Returns the count, or -1 after failing
 * the call (`what` names the argument in the message). */
int md_read_host_ints(TF_OpKernelContext* ctx, const TF_Tensor* t,
                      const char* what, int64_t* values, int max);

/* Reads a host-memory integer scalar (int16, int32 or int64; a one-element
 * vector is accepted too). Returns 1, or 0 after failing the call. */
int md_read_host_scalar(TF_OpKernelContext* ctx, const TF_Tensor* t,
                        const char* what, int64_t* value);

/* Makes output `i` share the buffer of `t` (no copy). Returns 1, or 0 after
 * failing the call. */
int md_forward_input(TF_OpKernelContext* ctx, int i, const TF_Tensor* t);

/* Scratch memory on the device for the stream's work: `bytes` bytes that
 * stay valid for the tasks this call enqueues, even after the handle is
 * deleted. Returns the handle (the caller deletes it once it has the data
 * pointer), or NULL after failing the call. */
TF_Tensor* md_allocate_temp(TF_OpKernelContext* ctx, size_t bytes);

/* Deletes up to four handles (NULL ignored). */
void md_delete_tensors(TF_Tensor* a, TF_Tensor* b, TF_Tensor* c, TF_Tensor* d);

/*** Enqueueing work ***/

/* Enqueues `fn(arg)` on the kernel's stream. Takes ownership of `arg`
 * (malloc'd). Returns 1 on success, 0 after failing the call. */
int md_enqueue(TF_OpKernelContext* ctx, md_task_fn fn, void* arg);

/* md_enqueue for a task of `work` elements, which runs at once on the
 * calling thread when it is small and the stream idle
 * (md_stream_enqueue_small). */
int md_enqueue_small(TF_OpKernelContext* ctx, md_task_fn fn, void* arg, int64_t work);

/* malloc for a task argument; fails the call ("out of memory") on NULL. */
void* md_task_alloc(TF_OpKernelContext* ctx, size_t bytes);

/*** Errors found by the device work ***/

/* "<op> on <device>", captured in compute_func and copied into the task, so
 * that an error the task finds names the op and the device. */
typedef struct md_where {
  char text[192];
} md_where;

void md_where_of(TF_OpKernelContext* ctx, md_where* where);

/* Reports an error found while the task runs (a bad index or label): the
 * stream keeps it, and it surfaces at the next synchronisation as
 * "<op> on <device>: <message>". Only the first error of a stream is kept. */
void md_task_error(SP_Stream stream, const md_where* where, TF_Code code,
                   const char* fmt, ...) __attribute__((format(printf, 4, 5)));

/*** Attributes (create functions) ***/

/* Reads a bool attribute; returns `fallback` when absent. */
int md_get_bool_attr(TF_OpKernelConstruction* ctx, const char* name,
                     int fallback);

/* The getters below leave `*out` unchanged when the attribute is absent (so
 * initialise it with the default) and return 1; on an attribute of another
 * kind, or one that does not fit, they fail the construction and return 0. */
int md_get_int_attr(TF_OpKernelConstruction* ctx, const char* name,
                    int64_t* out);
int md_get_float_attr(TF_OpKernelConstruction* ctx, const char* name,
                      float* out);
/* NUL-terminated into buf[size]; longer strings fail. */
int md_get_string_attr(TF_OpKernelConstruction* ctx, const char* name,
                       char* buf, size_t size);
/* At most `max` entries into out; *count is set to the number read (left
 * unchanged when absent). Longer lists fail. */
int md_get_int_list_attr(TF_OpKernelConstruction* ctx, const char* name,
                         int64_t* out, int max, int* count);

/*** Windows (convolutions and pooling) ***/

typedef enum md_padding {
  MD_PAD_VALID, MD_PAD_SAME, MD_PAD_EXPLICIT
} md_padding;

/* "VALID", "SAME" or "EXPLICIT" into *out; returns 0 for anything else. */
int md_parse_padding(const char* text, md_padding* out);

/* The attributes convolutions and pooling share, validated. */
typedef struct md_window_attrs {
  int nchw;                /* data_format NCHW (else NHWC) */
  int64_t stride_h, stride_w;
  md_padding padding;
  int64_t explicit_pad[4]; /* top, bottom, left, right (EXPLICIT) */
} md_window_attrs;

/* Reads data_format (NHWC or NCHW), strides, padding and explicit_paddings
 * (default []). Returns 0 after failing the construction. */
int md_get_window_attrs(TF_OpKernelConstruction* ctx, md_window_attrs* w);

/* Reads list attribute `name` of 4 entries in the data format's order into
 * its H and W values. As TensorFlow: fewer or more entries, or one < 1, is
 * INVALID_ARGUMENT; an N or C entry other than 1 is UNIMPLEMENTED. Leaves
 * *h, *w unchanged when the attribute is absent. Returns 0 after failing. */
int md_get_hw_attr(TF_OpKernelConstruction* ctx, const char* name, int nchw,
                   int64_t* h, int64_t* w);

/* The op name of a kernel under construction, for messages. */
#define MD_CONSTRUCTION_OP(ctx)                                               \
  (int)TF_OpKernelConstruction_GetName(ctx).len,                              \
      TF_OpKernelConstruction_GetName(ctx).data

/* TensorFlow's output size and leading padding of one spatial dim: VALID
 * (no padding), SAME (output = ceil(in / stride), the total padding split
 * with the smaller half first) or EXPLICIT (pad_before / pad_after). The
 * window spans (ksize - 1) * dilation + 1 inputs. Returns 0 if the output
 * size would be negative (an empty output is fine). */
int md_window_dim(md_padding padding, int64_t in, int64_t ksize,
                  int64_t stride, int64_t dilation, int64_t pad_before,
                  int64_t pad_after, int64_t* out, int64_t* pad);

/*** Broadcasting ***/

/* Inputs a broadcast walk supports (SelectV2 has three). */
#define MD_BCAST_MAX_INPUTS 3

/* numpy broadcasting of `n` shapes into *out; returns 0 if they conflict. */
int md_broadcast_shapes(const md_shape* shapes, int n, md_shape* out);
/* Fails the kernel: the two shapes do not broadcast ("Op: incompatible
 * shapes for broadcasting: [2, 3] and [4]"). */
void md_fail_broadcast(TF_OpKernelContext* ctx, const md_shape* a, const md_shape* b);

/* The iteration space of a broadcast: the output dims and each input's
 * stride per output dim (elements; 0 where it is broadcast), after dropping
 * size-1 dims and merging dims that are contiguous for every input, so equal
 * shapes and scalar-with-tensor become one flat row. */
typedef struct md_bcast {
  int num_inputs;
  int rank; /* 0: a single element */
  int64_t dims[TF_MAX_DIMS];
  int64_t strides[MD_BCAST_MAX_INPUTS][TF_MAX_DIMS];
} md_bcast;

/* Plans the walk of output shape `out` over inputs `shapes[0..n)`, each of
 * which must broadcast to `out`. */
void md_bcast_plan(const md_shape* shapes, int n, const md_shape* out,
                   md_bcast* b);

/* One innermost row: element j of the row reads input k at
 * offsets[k] + j * strides[k] and writes output element out_offset + j. */
typedef void (*md_bcast_row_fn)(void* arg, const int64_t* offsets,
                                const int64_t* strides, int64_t out_offset,
                                int64_t n);

/* Calls `fn` for every row of the output, in output order. */
void md_bcast_walk(const md_bcast* b, md_bcast_row_fn fn, void* arg);

/*** Strided views ***/

/* Dims of a view: a tiled tensor has two per input dim. */
#define MD_MAX_VIEW_DIMS (2 * TF_MAX_DIMS)

/* A copy between two strided views of the same dims: element (i_0, ...) of
 * the view is src[sum i_k * src_strides[k]] and dst[sum i_k * dst_strides[k]]
 * (elements, relative to the base pointers; source strides may be 0 or
 * negative). */
typedef struct md_view {
  int rank;
  int64_t dims[MD_MAX_VIEW_DIMS];
  int64_t src_strides[MD_MAX_VIEW_DIMS];
  int64_t dst_strides[MD_MAX_VIEW_DIMS];
} md_view;

/* Drops size-1 dims and merges neighbours contiguous in both views (a plain
 * copy becomes one memcpy). Call once, in compute_func. */
void md_view_simplify(md_view* v);

/* Copies the view; elements are `esize` bytes (1, 2, 4 or 8 go through
 * typed loops). An empty view (a 0 dim) copies nothing. */
void md_view_copy(const md_view* v, char* dst, const char* src, size_t esize);

/* Enqueues a task that copies view `v` (simplified here) from src to dst;
 * with zero != NULL it first zero-fills zero_bytes bytes at `zero` (the
 * parts of the output the view does not cover). Returns 1, or 0 after
 * failing the call. */
int md_enqueue_view_copy(TF_OpKernelContext* ctx, md_view* v, char* dst,
                         const char* src, size_t esize, char* zero,
                         int64_t zero_bytes);

/* Writes `n` copies of the `esize`-byte value at `value` to dst. */
void md_fill_bytes(char* dst, const void* value, int64_t n, size_t esize);

/*** Element types ***/

/* bfloat16 is stored as the upper 16 bits of a float32. */
static inline float md_bf16_to_float(uint16_t v) {
  uint32_t bits = (uint32_t)v << 16;
  float f;
  memcpy(&f, &bits, sizeof(f));
  return f;
}

/* float32 -> bfloat16 with round-to-nearest-even; NaN stays NaN. */
static inline uint16_t md_float_to_bf16(float f) {
  uint32_t bits;
  memcpy(&bits, &f, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return (uint16_t)(bits >> 16);
}

/* Per-dtype load (storage -> compute type) and store (compute -> storage).
 * Half and bfloat16 compute in float; everything else in its own type. */
#define MD_DEFINE_PLAIN_LOAD_STORE(SFX, ST)                                   \
  static inline ST md_load_##SFX(ST v) { return v; }                          \
  static inline ST md_store_##SFX(ST v) { return v; }
MD_DEFINE_PLAIN_LOAD_STORE(f32, float)
MD_DEFINE_PLAIN_LOAD_STORE(f64, double)
MD_DEFINE_PLAIN_LOAD_STORE(i8, int8_t)
MD_DEFINE_PLAIN_LOAD_STORE(u8, uint8_t)
MD_DEFINE_PLAIN_LOAD_STORE(i16, int16_t)
MD_DEFINE_PLAIN_LOAD_STORE(i32, int32_t)
MD_DEFINE_PLAIN_LOAD_STORE(i64, int64_t)
MD_DEFINE_PLAIN_LOAD_STORE(bool, uint8_t)
#undef MD_DEFINE_PLAIN_LOAD_STORE
static inline float md_load_half(_Float16 v) { return (float)v; }
static inline _Float16 md_store_half(float v) { return (_Float16)v; }
static inline float md_load_bf16(uint16_t v) { return md_bf16_to_float(v); }
static inline uint16_t md_store_bf16(float v) { return md_float_to_bf16(v); }

/* Dtype lists. Each entry is X(TF enum, suffix, storage type, compute type,
 * accumulation type). The accumulation type is used by reductions, MatMul,
 * Conv2D and Softmax (wider than the compute type for half/bfloat16/float). */
#define MD_FLOAT_TYPES(X)                                                     \
  X(TF_HALF, half, _Float16, float, float)                                    \
  X(TF_BFLOAT16, bf16, uint16_t, float, float)                                \
  X(TF_FLOAT, f32, float, float, double)                                      \
  X(TF_DOUBLE, f64, double, double, double)

/* Integer types of the arithmetic ops: X(enum, suffix, type, unsigned type,
 * lowest value, highest value). Integer sums and products are done in the
 * unsigned type so overflow wraps instead of being undefined behaviour. */
#define MD_INT_TYPES(X)                                                       \
  X(TF_INT32, i32, int32_t, uint32_t, INT32_MIN, INT32_MAX)                   \
  X(TF_INT64, i64, int64_t, uint64_t, INT64_MIN, INT64_MAX)

/* Every dtype the plugin handles, with one signature:
 * X(enum, suffix, storage type, compute type). Bool is stored as one byte
 * (0 or 1). */
#define MD_ALL_TYPES(X)                                                       \
  X(TF_BOOL, bool, uint8_t, uint8_t)                                          \
  X(TF_INT8, i8, int8_t, int8_t)                                              \
  X(TF_UINT8, u8, uint8_t, uint8_t)                                           \
  X(TF_INT16, i16, int16_t, int16_t)                                          \
  MD_REAL_TYPES(X)

/* FLOAT + INT with the same signature as MD_ALL_TYPES. */
#define MD_REAL_TYPES(X)                                                      \
  X(TF_INT32, i32, int32_t, int32_t)                                          \
  X(TF_INT64, i64, int64_t, int64_t)                                          \
  X(TF_HALF, half, _Float16, float)                                           \
  X(TF_BFLOAT16, bf16, uint16_t, float)                                       \
  X(TF_FLOAT, f32, float, float)                                              \
  X(TF_DOUBLE, f64, double, double)

/* Accumulators for sums and dot products: md_acc_SFX is the type,
 * md_acc_load_SFX converts a stored element to it, md_acc_store_SFX converts
 * the result back. Floats accumulate in their accumulation type, integers in
 * their unsigned type (wrapping). */
#define MD_DEFINE_FLOAT_ACC(ENUM, SFX, ST, CT, AT)                            \
  typedef AT md_acc_##SFX;                                                    \
  static inline AT md_acc_load_##SFX(ST v) { return (AT)md_load_##SFX(v); }   \
  static inline ST md_acc_store_##SFX(AT v) { return md_store_##SFX((CT)v); }
#define MD_DEFINE_INT_ACC(ENUM, SFX, T, UT, LO, HI)                           \
  typedef UT md_acc_##SFX;                                                    \
  static inline UT md_acc_load_##SFX(T v) { return (UT)v; }                   \
  static inline T md_acc_store_##SFX(UT v) { return (T)v; }
MD_FLOAT_TYPES(MD_DEFINE_FLOAT_ACC)
MD_INT_TYPES(MD_DEFINE_INT_ACC)
#undef MD_DEFINE_FLOAT_ACC
#undef MD_DEFINE_INT_ACC

/* Element i of an index tensor (int8, uint8, int16, int32 or int64).
 * Read with memcpy: a host-memory input need not be aligned to its element
 * size (TensorFlow hands kernels small host tensors at 4-byte offsets),
 * and a misaligned load is undefined behaviour. */
static inline int64_t md_index_at(const void* data, TF_DataType dtype,
                                  int64_t i) {
  const char* p = (const char*)data;
  switch (dtype) {
    case TF_INT8: return ((const int8_t*)data)[i];
    case TF_UINT8: return ((const uint8_t*)data)[i];
    case TF_INT16: {
      int16_t v;
      memcpy(&v, p + i * (int64_t)sizeof v, sizeof v);
      return v;
    }
    case TF_INT32: {
      int32_t v;
      memcpy(&v, p + i * (int64_t)sizeof v, sizeof v);
      return v;
    }
    default: {
      int64_t v;
      memcpy(&v, p + i * (int64_t)sizeof v, sizeof v);
      return v;
    }
  }
}

/* 1 for the floating-point dtypes the plugin computes with. */
static inline int md_is_float(TF_DataType t) {
  return t == TF_HALF || t == TF_BFLOAT16 || t == TF_FLOAT || t == TF_DOUBLE;
}

/* 1 for the dtypes md_index_at reads. */
static inline int md_is_index_type(TF_DataType dtype) {
  return dtype == TF_INT8 || dtype == TF_UINT8 || dtype == TF_INT16 ||
         dtype == TF_INT32 || dtype == TF_INT64;
}

/* libm functions for float or double arguments. */
#define MD_EXP(x) _Generic((x), float: expf, default: exp)(x)
#define MD_LOG(x) _Generic((x), float: logf, default: log)(x)
#define MD_SQRT(x) _Generic((x), float: sqrtf, default: sqrt)(x)
#define MD_TANH(x) _Generic((x), float: tanhf, default: tanh)(x)
#define MD_ERF(x) _Generic((x), float: erff, default: erf)(x)
#define MD_FLOOR(x) _Generic((x), float: floorf, default: floor)(x)
#define MD_CEIL(x) _Generic((x), float: ceilf, default: ceil)(x)
#define MD_RINT(x) _Generic((x), float: rintf, default: rint)(x)
#define MD_ERFC(x) _Generic((x), float: erfcf, default: erfc)(x)
#define MD_SIN(x) _Generic((x), float: sinf, default: sin)(x)
#define MD_COS(x) _Generic((x), float: cosf, default: cos)(x)
#define MD_TAN(x) _Generic((x), float: tanf, default: tan)(x)
#define MD_ASIN(x) _Generic((x), float: asinf, default: asin)(x)
#define MD_ACOS(x) _Generic((x), float: acosf, default: acos)(x)
#define MD_ATAN(x) _Generic((x), float: atanf, default: atan)(x)
#define MD_SINH(x) _Generic((x), float: sinhf, default: sinh)(x)
#define MD_COSH(x) _Generic((x), float: coshf, default: cosh)(x)
#define MD_ASINH(x) _Generic((x), float: asinhf, default: asinh)(x)
#define MD_ACOSH(x) _Generic((x), float: acoshf, default: acosh)(x)
#define MD_ATANH(x) _Generic((x), float: atanhf, default: atanh)(x)
#define MD_EXPM1(x) _Generic((x), float: expm1f, default: expm1)(x)
#define MD_LOG1P(x) _Generic((x), float: log1pf, default: log1p)(x)
#define MD_POW(x, y) _Generic((x), float: powf, default: pow)(x, y)
#define MD_FMOD(x, y) _Generic((x), float: fmodf, default: fmod)(x, y)

#pragma GCC visibility pop

#endif /* MY_DEVICE_KERNEL_UTIL_H_ */
