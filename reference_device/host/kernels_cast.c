/* Host reference device: Cast between every pair of supported dtypes.
 *
 * Values travel through one of two intermediate types, chunk by chunk:
 * floating-point sources are widened to double, integer and bool sources to
 * int64. The destination then converts from that intermediate:
 *   - to bool: x != 0
 *   - float to int: truncate toward zero; NaN gives 0 and values outside the
 *     destination range clamp to it (no undefined behaviour)
 *   - int to int: keep the low bits (two's complement wrap)
 *   - to half: one correctly rounded conversion from double; to bfloat16:
 *     through float32 with round-to-nearest-even */
#include <math.h>
#include <stdlib.h>

#include "kernel_list.h"
#include "kernel_util.h"

/* Elements converted per chunk (intermediate buffers live on the stack). */
#define MD_CAST_CHUNK 512

/* Floating-point dtypes: X(enum, suffix, storage type). */
#define MD_CAST_FLOATS(X)                                                     \
  X(TF_HALF, half, _Float16)                                                  \
  X(TF_BFLOAT16, bf16, uint16_t)                                              \
  X(TF_FLOAT, f32, float)                                                     \
  X(TF_DOUBLE, f64, double)

/* Integer dtypes: X(enum, storage type, unsigned type, lowest, highest). */
#define MD_CAST_INTS(X)                                                       \
  X(TF_INT8, int8_t, uint8_t, INT8_MIN, INT8_MAX)                             \
  X(TF_UINT8, uint8_t, uint8_t, 0, UINT8_MAX)                                 \
  X(TF_INT16, int16_t, uint16_t, INT16_MIN, INT16_MAX)                        \
  X(TF_INT32, int32_t, uint32_t, INT32_MIN, INT32_MAX)                        \
  X(TF_INT64, int64_t, uint64_t, INT64_MIN, INT64_MAX)

/* Conversions from the intermediates to half / bfloat16 (the other float
 * types are plain C casts). */
static inline _Float16 md_half_from_double(double v) { return (_Float16)v; }
static inline _Float16 md_half_from_int64(int64_t v) { return (_Float16)(float)v; }
static inline uint16_t md_bf16_from_double(double v) {
  return md_float_to_bf16((float)v);
}
static inline uint16_t md_bf16_from_int64(int64_t v) {
  return md_float_to_bf16((float)v);
}
static inline float md_f32_from_double(double v) { return (float)v; }
static inline float md_f32_from_int64(int64_t v) { return (float)v; }
static inline double md_f64_from_double(double v) { return v; }
static inline double md_f64_from_int64(int64_t v) { return (double)v; }

/* src[0..n) -> double. */
static void md_load_doubles(TF_DataType t, const void* src, double* out,
                            int64_t n) {
  switch (t) {
#define MD_CASE(ENUM, SFX, ST)                                                \
  case ENUM:                                                                  \
    for (int64_t i = 0; i < n; ++i) out[i] = md_load_##SFX(((const ST*)src)[i]); \
    break;
    MD_CAST_FLOATS(MD_CASE)
#undef MD_CASE
    default:
      break;
  }
}

/* src[0..n) -> int64 (bool reads as 0 / 1). */
static void md_load_int64s(TF_DataType t, const void* src, int64_t* out,
                           int64_t n) {
  switch (t) {
    case TF_BOOL:
      for (int64_t i = 0; i < n; ++i) out[i] = ((const uint8_t*)src)[i] != 0;
      break;
#define MD_CASE(ENUM, T, UT, LO, HI)                                          \
  case ENUM:                                                                  \
    for (int64_t i = 0; i < n; ++i) out[i] = ((const T*)src)[i];              \
    break;
    MD_CAST_INTS(MD_CASE)
#undef MD_CASE
    default:
      break;
  }
}

/* double -> dst[0..n). */
static void md_store_doubles(TF_DataType t, const double* in, void* dst,
                             int64_t n) {
  switch (t) {
    case TF_BOOL:
      for (int64_t i = 0; i < n; ++i) ((uint8_t*)dst)[i] = in[i] != 0;
      break;
#define MD_FLOAT_CASE(ENUM, SFX, ST)                                          \
  case ENUM:                                                                  \
    for (int64_t i = 0; i < n; ++i) ((ST*)dst)[i] = md_##SFX##_from_double(in[i]); \
    break;
    MD_CAST_FLOATS(MD_FLOAT_CASE)
#undef MD_FLOAT_CASE
#define MD_INT_CASE(ENUM, T, UT, LO, HI)                                      \
  case ENUM:                                                                  \
    for (int64_t i = 0; i < n; ++i) {                                         \
      double v = in[i];                                                       \
      T r;                                                                    \
      if (isnan(v)) r = 0;                                                    \
      else if (v <= (double)(LO)) r = (LO);                                   \
      else if (v >= (double)(HI)) r = (HI);                                   \
      else r = (T)v;                                                          \
      ((T*)dst)[i] = r;                                                       \
    }                                                                         \
    break;
    MD_CAST_INTS(MD_INT_CASE)
#undef MD_INT_CASE
    default:
      break;
  }
}

/* int64 -> dst[0..n). */
static void md_store_int64s(TF_DataType t, const int64_t* in, void* dst,
                            int64_t n) {
  switch (t) {
    case TF_BOOL:
      for (int64_t i = 0; i < n; ++i) ((uint8_t*)dst)[i] = in[i] != 0;
      break;
#define MD_FLOAT_CASE(ENUM, SFX, ST)                                          \
  case ENUM:                                                                  \
    for (int64_t i = 0; i < n; ++i) ((ST*)dst)[i] = md_##SFX##_from_int64(in[i]); \
    break;
    MD_CAST_FLOATS(MD_FLOAT_CASE)
#undef MD_FLOAT_CASE
#define MD_INT_CASE(ENUM, T, UT, LO, HI)                                      \
  case ENUM:                                                                  \
    for (int64_t i = 0; i < n; ++i) ((T*)dst)[i] = (T)(UT)(uint64_t)in[i];    \
    break;
    MD_CAST_INTS(MD_INT_CASE)
#undef MD_INT_CASE
    default:
      break;
  }
}

typedef struct md_cast_task {
  TF_DataType src_type, dst_type;
  const char* x;
  char* y;
  int64_t n;
} md_cast_task;

static void md_cast_run(void* arg, SP_Stream stream) {
  (void)stream;
  md_cast_task* t = arg;
  size_t src_size = TF_DataTypeSize(t->src_type);
  size_t dst_size = TF_DataTypeSize(t->dst_type);
  for (int64_t start = 0; start < t->n; start += MD_CAST_CHUNK) {
    int64_t m = t->n - start < MD_CAST_CHUNK ? t->n - start : MD_CAST_CHUNK;
    const char* src = t->x + start * (int64_t)src_size;
    char* dst = t->y + start * (int64_t)dst_size;
    if (md_is_float(t->src_type)) {
      double buf[MD_CAST_CHUNK];
      md_load_doubles(t->src_type, src, buf, m);
      md_store_doubles(t->dst_type, buf, dst, m);
    } else {
      int64_t buf[MD_CAST_CHUNK];
      md_load_int64s(t->src_type, src, buf, m);
      md_store_int64s(t->dst_type, buf, dst, m);
    }
  }
}

void md_compute_cast(void* kernel, TF_OpKernelContext* ctx) {
  (void)kernel;
  md_shape shape;
  TF_Tensor* x = md_get_input(ctx, 0, &shape);
  TF_Tensor* y = NULL;
  if (x == NULL) return;

  TF_DataType src_type = TF_TensorType(x);
  TF_DataType dst_type = TF_ExpectedOutputDataType(ctx, 0);
  if (src_type == dst_type) { /* nothing to convert: share the buffer */
    TF_Status* status = TF_NewStatus();
    TF_SetOutput(ctx, 0, x, status);
    if (TF_GetCode(status) != TF_OK) TF_OpKernelContext_Failure(ctx, status);
    TF_DeleteStatus(status);
    goto done;
  }
  if (TF_DataTypeSize(src_type) == 0 || TF_DataTypeSize(dst_type) == 0) {
    md_fail(ctx, TF_INVALID_ARGUMENT, "Cast: unsupported cast from dtype %d to "
            "dtype %d", (int)src_type, (int)dst_type);
    goto done;
  }
  y = md_allocate_output(ctx, 0, dst_type, &shape);
  int64_t n = md_num_elements(&shape);
  if (y == NULL || n == 0) goto done;

  md_cast_task* task = malloc(sizeof(*task));
  if (task == NULL) {
    md_fail(ctx, TF_RESOURCE_EXHAUSTED, "Cast: out of memory");
    goto done;
  }
  task->src_type = src_type;
  task->dst_type = dst_type;
  task->x = TF_TensorData(x);
  task->y = TF_TensorData(y);
  task->n = n;
  md_enqueue_small(ctx, md_cast_run, task, n);

done:
  md_delete_tensors(x, y, NULL, NULL);
}
