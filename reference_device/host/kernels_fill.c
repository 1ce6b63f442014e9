/* Host reference device: Fill, ZerosLike, OnesLike (every dtype) and Range.
 *
 * The fills write one value n times (md_fill_bytes doubles the filled
 * prefix with memcpy). Range computes its length on the host from the
 * host-memory start, limit and delta, with TensorFlow's rules and rounding:
 * element i is start + T(i) * delta, each step rounded to T (so half and
 * bfloat16 results match TensorFlow's bit for bit). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernel_list.h"
#include "kernel_util.h"

/*** Fill ***/

/* Writes n copies of one value: `value` points at a device scalar (Fill,
 * read when the task runs) or is NULL for the task's own `bytes`. */
typedef struct md_fill_task {
  const char* value;
  unsigned char bytes[16]; /* one element (complex128 is the widest) */
  char* y;
  int64_t n;
  size_t esize;
} md_fill_task;

static void md_fill_run(void* arg, SP_Stream stream) {
  (void)stream;
  md_fill_task* t = arg;
  md_fill_bytes(t->y, t->value != NULL ? t->value : (const char*)t->bytes,
                t->n, t->esize);
}

void md_compute_fill(void* kernel, TF_OpKernelContext* ctx) {
  (void)kernel;
  md_shape vs;
  TF_Tensor* dims_t = md_get_input(ctx, 0, NULL);
  TF_Tensor* value = dims_t ? md_get_input(ctx, 1, &vs) : NULL;
  TF_Tensor* y = NULL;
  if (value == NULL) goto done;

  char sy[MD_SHAPE_STR_SIZE], sv[MD_SHAPE_STR_SIZE];
  md_shape ys;
  if (TF_NumDims(dims_t) != 1) {
    md_fail(ctx, TF_INVALID_ARGUMENT, "Fill: dims must be a vector, got rank %d",
            TF_NumDims(dims_t));
    goto done;
  }
  ys.rank = md_read_host_ints(ctx, dims_t, "dims", ys.dims, TF_MAX_DIMS);
  if (ys.rank < 0) goto done;
  for (int i = 0; i < ys.rank; ++i) {
    if (ys.dims[i] < 0) {
      md_fail(ctx, TF_INVALID_ARGUMENT, "Fill: dims %s must be non-negative",
              md_shape_str(&ys, sy, sizeof(sy)));
      goto done;
    }
  }
  if (vs.rank != 0) {
    md_fail(ctx, TF_INVALID_ARGUMENT, "Fill: value must be a scalar, got shape %s",
            md_shape_str(&vs, sv, sizeof(sv)));
    goto done;
  }
  TF_DataType dtype = TF_TensorType(value);
  y = md_allocate_output(ctx, 0, dtype, &ys);
  int64_t n = md_num_elements(&ys);
  if (y == NULL || n == 0) goto done;

  md_fill_task* task = md_task_alloc(ctx, sizeof(*task));
  if (task == NULL) goto done;
  task->value = TF_TensorData(value);
  task->y = TF_TensorData(y);
  task->n = n;
  task->esize = TF_DataTypeSize(dtype);
  md_enqueue_small(ctx, md_fill_run, task, n);

done:
  md_delete_tensors(dims_t, value, y, NULL);
}

/*** ZerosLike / OnesLike ***/

/* Stores the value 1 of `dtype` in bytes[]; returns 0 if not supported. */
static int md_one_of(TF_DataType dtype, unsigned char* bytes) {
  switch (dtype) {
#define MD_ONE(ENUM, SFX, ST, CT)                                             \
  case ENUM: {                                                                \
    ST one = md_store_##SFX((CT)1);                                           \
    memcpy(bytes, &one, sizeof(one));                                         \
    return 1;                                                                 \
  }
    MD_ALL_TYPES(MD_ONE)
#undef MD_ONE
    case TF_COMPLEX64: { /* 1 + 0i: the real part first */
      const float one[2] = {1.0f, 0.0f};
      memcpy(bytes, one, sizeof(one));
      return 1;
    }
    case TF_COMPLEX128: {
      const double one[2] = {1.0, 0.0};
      memcpy(bytes, one, sizeof(one));
      return 1;
    }
    default:
      return 0;
  }
}

static void md_fill_like(TF_OpKernelContext* ctx, int one) {
  md_shape shape;
  TF_Tensor* x = md_get_input(ctx, 0, &shape);
  TF_Tensor* y = NULL;
  if (x == NULL) return;
  TF_DataType dtype = TF_TensorType(x);
  unsigned char bytes[16] = {0}; /* the widest element: complex128 */
  if (!md_one_of(dtype, bytes)) {
    md_fail(ctx, TF_INVALID_ARGUMENT, "%.*s: unsupported dtype %d", MD_OP(ctx),
            (int)dtype);
    goto done;
  }
  if (!one) memset(bytes, 0, sizeof(bytes)); /* zero bits are 0 in every dtype */
  y = md_allocate_output(ctx, 0, dtype, &shape);
  int64_t n = md_num_elements(&shape);
  if (y == NULL || n == 0) goto done;
  md_fill_task* task = md_task_alloc(ctx, sizeof(*task));
  if (task == NULL) goto done;
  memcpy(task->bytes, bytes, sizeof(bytes));
  task->y = TF_TensorData(y);
  task->n = n;
  task->esize = TF_DataTypeSize(dtype);
  md_enqueue_small(ctx, md_fill_run, task, n);

done:
  md_delete_tensors(x, y, NULL, NULL);
}

void md_compute_zeros_like(void* kernel, TF_OpKernelContext* ctx) {
  (void)kernel;
  md_fill_like(ctx, 0);
}

void md_compute_ones_like(void* kernel, TF_OpKernelContext* ctx) {
  (void)kernel;
  md_fill_like(ctx, 1);
}

/*** Range ***/

/* start, delta as raw values of the output dtype. */
typedef struct md_range_task {
  TF_DataType dtype;
  unsigned char start[8], delta[8];
  void* y;
  int64_t n;
} md_range_task;

/* Floats: r() rounds to the storage type after every operation. */
#define MD_RANGE_FLOAT(SFX, ST, CT)                                           \
  static inline CT round_##SFX(CT v) { return md_load_##SFX(md_store_##SFX(v)); } \
  static void range_##SFX(const md_range_task* t) {                           \
    ST s, d;                                                                  \
    memcpy(&s, t->start, sizeof(s));                                          \
    memcpy(&d, t->delta, sizeof(d));                                          \
    CT start = md_load_##SFX(s), delta = md_load_##SFX(d);                    \
    ST* y = t->y;                                                             \
    for (int64_t i = 0; i < t->n; ++i) {                                      \
      CT step = round_##SFX(round_##SFX((CT)i) * delta);                      \
      y[i] = md_store_##SFX(start + step);                                    \
    }                                                                         \
  }                                                                           \
  /* Length: ceil(|(limit - start) / delta|), rounded like the values. */     \
  static double range_length_##SFX(const void* start, const void* limit,      \
                                   const void* delta) {                       \
    CT s = md_load_##SFX(*(const ST*)start);                                  \
    CT l = md_load_##SFX(*(const ST*)limit);                                  \
    CT d = md_load_##SFX(*(const ST*)delta);                                  \
    return ceil(fabs((double)round_##SFX(round_##SFX(l - s) / d)));           \
  }
MD_RANGE_FLOAT(half, _Float16, float)
MD_RANGE_FLOAT(bf16, uint16_t, float)
MD_RANGE_FLOAT(f32, float, float)
MD_RANGE_FLOAT(f64, double, double)

/* Integers: exact in int64 (the values stay inside [start, limit]). */
#define MD_RANGE_INTS(X)                                                      \
  X(TF_INT8, int8_t) X(TF_UINT8, uint8_t) X(TF_INT16, int16_t)               \
  X(TF_UINT16, uint16_t) X(TF_INT32, int32_t) X(TF_UINT32, uint32_t)          \
  X(TF_INT64, int64_t) X(TF_UINT64, uint64_t)

static void md_range_run(void* arg, SP_Stream stream) {
  (void)stream;
  md_range_task* t = arg;
  switch (t->dtype) {
    case TF_HALF: range_half(t); return;
    case TF_BFLOAT16: range_bf16(t); return;
    case TF_FLOAT: range_f32(t); return;
    case TF_DOUBLE: range_f64(t); return;
    default: break;
  }
  int64_t start = md_index_at(t->start, TF_INT64, 0);
  int64_t delta = md_index_at(t->delta, TF_INT64, 0);
  switch (t->dtype) {
#define MD_CASE(ENUM, T)                                                      \
  case ENUM:                                                                  \
    for (int64_t i = 0; i < t->n; ++i) {                                      \
      /* modulo 2^64: exact for every dtype, uint64 above 2^63 included */    \
      ((T*)t->y)[i] = (T)((uint64_t)start + (uint64_t)i * (uint64_t)delta);   \
    }                                                                         \
    break;
    MD_RANGE_INTS(MD_CASE)
#undef MD_CASE
    default:
      break;
  }
}

/* Reads a host scalar of the Range dtype: integers as int64 (into *i;
 * uint64 keeps its bits), floats as double (into *f, with the raw bytes
 * kept in raw). */
static int md_range_scalar(TF_OpKernelContext* ctx, TF_Tensor* t,
                           const char* what, TF_DataType dtype, int64_t* i,
                           double* f, unsigned char* raw) {
  if (TF_TensorType(t) != dtype || TF_TensorElementCount(t) != 1) {
    md_fail(ctx, TF_INVALID_ARGUMENT, "Range: %s must be a scalar of the "
            "output dtype", what);
    return 0;
  }
  const void* p = TF_TensorData(t);
  memset(raw, 0, 8);
  memcpy(raw, p, TF_DataTypeSize(dtype));
  switch (dtype) {
    case TF_HALF: *f = md_load_half(*(const _Float16*)p); return 1;
    case TF_BFLOAT16: *f = md_load_bf16(*(const uint16_t*)p); return 1;
    case TF_FLOAT: *f = *(const float*)p; return 1;
    case TF_DOUBLE: *f = *(const double*)p; return 1;
#define MD_CASE(ENUM, T)                                                      \
  case ENUM: *i = (int64_t)*(const T*)p; *f = (double)*(const T*)p; return 1;
    MD_RANGE_INTS(MD_CASE)
#undef MD_CASE
    default:
      md_fail(ctx, TF_INVALID_ARGUMENT, "Range: unsupported dtype %d", (int)dtype);
      return 0;
  }
}

void md_compute_range(void* kernel, TF_OpKernelContext* ctx) {
  (void)kernel;
  TF_Tensor* in[3] = {NULL, NULL, NULL};
  TF_Tensor* y = NULL;
  static const char* names[3] = {"start", "limit", "delta"};
  int64_t iv[3] = {0, 0, 0};
  double fv[3];
  unsigned char raw[3][8];
  TF_DataType dtype = TF_ExpectedOutputDataType(ctx, 0);
  for (int k = 0; k < 3; ++k) {
    in[k] = md_get_input(ctx, k, NULL);
    if (in[k] == NULL ||
        !md_range_scalar(ctx, in[k], names[k], dtype, &iv[k], &fv[k], raw[k])) {
      goto done;
    }
  }
  double start = fv[0], limit = fv[1], delta = fv[2];
  /* Integers compare exactly (uint64 as unsigned). */
  int is_float = md_is_float(dtype);
  int ascending = dtype == TF_UINT64 ? (uint64_t)iv[1] >= (uint64_t)iv[0]
                                     : iv[1] >= iv[0];
  int descending = dtype == TF_UINT64 ? (uint64_t)iv[1] <= (uint64_t)iv[0]
                                      : iv[1] <= iv[0];
  if (is_float) {
    ascending = start <= limit;
    descending = start >= limit;
  }
  if (delta == 0) {
    md_fail(ctx, TF_INVALID_ARGUMENT, "Range: requires delta != 0: %g", delta);
    goto done;
  }
  if (delta > 0 ? !ascending : !descending) {
    md_fail(ctx, TF_INVALID_ARGUMENT, "Range: requires start %s limit when "
            "delta %s 0: %g/%g", delta > 0 ? "<=" : ">=", delta > 0 ? ">" : "<",
            start, limit);
    goto done;
  }
  double length;
  switch (dtype) {
    case TF_HALF: length = range_length_half(raw[0], raw[1], raw[2]); break;
    case TF_BFLOAT16: length = range_length_bf16(raw[0], raw[1], raw[2]); break;
    case TF_FLOAT: length = range_length_f32(raw[0], raw[1], raw[2]); break;
    case TF_DOUBLE: length = range_length_f64(raw[0], raw[1], raw[2]); break;
    default: {
      uint64_t span = ascending ? (uint64_t)iv[1] - (uint64_t)iv[0]
                                : (uint64_t)iv[0] - (uint64_t)iv[1];
      uint64_t step = iv[2] < 0 ? 0 - (uint64_t)iv[2] : (uint64_t)iv[2];
      length = (double)((span + step - 1) / step);
      break;
    }
  }
  if (!(length < 9.2e18)) {
    md_fail(ctx, TF_INVALID_ARGUMENT, "Range: the result would have %g "
            "elements", length);
    goto done;
  }
  md_shape ys = {1, {(int64_t)length}};
  y = md_allocate_output(ctx, 0, dtype, &ys);
  if (y == NULL || ys.dims[0] == 0) goto done;

  md_range_task* task = md_task_alloc(ctx, sizeof(*task));
  if (task == NULL) goto done;
  task->dtype = dtype;
  if (is_float) {
    memcpy(task->start, raw[0], 8);
    memcpy(task->delta, raw[2], 8);
  } else { /* integers travel as int64 */
    memcpy(task->start, &iv[0], 8);
    memcpy(task->delta, &iv[2], 8);
  }
  task->y = TF_TensorData(y);
  task->n = ys.dims[0];
  md_enqueue(ctx, md_range_run, task);

done:
  md_delete_tensors(in[0], in[1], in[2], y);
}
