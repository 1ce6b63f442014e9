/* Host reference device: helpers shared by the kernels.
 *
 *   - md_shape: a small by-value shape type, plus formatting for messages
 *   - md_fail: report an error from compute_func / create_func
 *   - md_get_input / md_allocate_output: tensor handles with shapes
 *   - md_enqueue: hand a task to the kernel's stream
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

/* Reads a host-memory int32 or int64 tensor of rank <= 1 into `values`
 * (at most `max` entries). Returns the count, or -1 after failing the call
 * (`what` names the argument in the message). */
int md_read_host_ints(TF_OpKernelContext* ctx, const TF_Tensor* t,
                      const char* what, int64_t* values, int max);

/* Deletes up to four handles (NULL ignored). */
void md_delete_tensors(TF_Tensor* a, TF_Tensor* b, TF_Tensor* c, TF_Tensor* d);

/*** Enqueueing work ***/

/* Enqueues `fn(arg)` on the kernel's stream. Takes ownership of `arg`
 * (malloc'd). Returns 1 on success, 0 after failing the call. */
int md_enqueue(TF_OpKernelContext* ctx, md_task_fn fn, void* arg);

/*** Attributes ***/

/* Reads a bool attribute; returns `fallback` when absent. */
int md_get_bool_attr(TF_OpKernelConstruction* ctx, const char* name,
                     int fallback);

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

/* exp() for float or double arguments. */
#define MD_EXP(x) _Generic((x), float: expf, default: exp)(x)

#pragma GCC visibility pop

#endif /* MY_DEVICE_KERNEL_UTIL_H_ */
