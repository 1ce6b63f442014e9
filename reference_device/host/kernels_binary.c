/* Host reference device: broadcasting binary ops.
 *
 * AddV2, Sub, Mul, RealDiv, Maximum, Minimum, Pow, FloorDiv, FloorMod with
 * numpy broadcasting (md_bcast in kernel_util.h: equal shapes and
 * scalar-with-tensor become one flat loop).
 *
 * Integer Pow with a negative exponent and integer FloorDiv / FloorMod by
 * zero are errors in TensorFlow. The device finds them while computing, so
 * the task writes 0 there and reports the error on the stream; it surfaces
 * at the next synchronisation. */
#include <stdlib.h>

#include "kernel_list.h"
#include "kernel_util.h"

typedef enum md_binary_op {
  MD_ADD, MD_SUB, MD_MUL, MD_DIV, MD_MAX, MD_MIN, MD_POW, MD_FLOORDIV,
  MD_FLOORMOD, MD_NUM_BINARY_OPS
} md_binary_op;

/*** Element functions ***/

/* Each returns the result and sets *bad for an invalid element. Floats use
 * IEEE arithmetic in the compute type; Maximum/Minimum propagate NaN like
 * numpy. FloorDiv rounds the quotient to the storage type before the floor,
 * as TensorFlow does for half and bfloat16 (a no-op for float and double);
 * FloorMod takes the sign of the divisor. */
#define MD_FLOAT_BINARY(ENUM, SFX, ST, CT, AT)                                \
  static inline CT add_##SFX(CT a, CT b, int* bad) { (void)bad; return a + b; } \
  static inline CT sub_##SFX(CT a, CT b, int* bad) { (void)bad; return a - b; } \
  static inline CT mul_##SFX(CT a, CT b, int* bad) { (void)bad; return a * b; } \
  static inline CT div_##SFX(CT a, CT b, int* bad) { (void)bad; return a / b; } \
  static inline CT max_##SFX(CT a, CT b, int* bad) {                          \
    (void)bad;                                                                \
    return (a > b || a != a) ? a : b;                                         \
  }                                                                           \
  static inline CT min_##SFX(CT a, CT b, int* bad) {                          \
    (void)bad;                                                                \
    return (a < b || a != a) ? a : b;                                         \
  }                                                                           \
  static inline CT pow_##SFX(CT a, CT b, int* bad) {                          \
    (void)bad;                                                                \
    return MD_POW(a, b);                                                      \
  }                                                                           \
  static inline CT floordiv_##SFX(CT a, CT b, int* bad) {                     \
    (void)bad;                                                                \
    return MD_FLOOR(md_load_##SFX(md_store_##SFX(a / b)));                    \
  }                                                                           \
  static inline CT floormod_##SFX(CT a, CT b, int* bad) {                     \
    (void)bad;                                                                \
    CT r = MD_FMOD(a, b);                                                     \
    return (r != 0 && ((b < 0) != (r < 0))) ? r + b : r;                      \
  }
MD_FLOAT_TYPES(MD_FLOAT_BINARY)

/* Integers: wrap on overflow (the unsigned type does the arithmetic).
 * RealDiv truncates toward zero with x / 0 = 0; MIN / -1 wraps (both would
 * trap or be undefined in C). Pow squares and multiplies. */
#define MD_INT_BINARY(ENUM, SFX, T, UT, LO, HI)                               \
  static inline T add_##SFX(T a, T b, int* bad) {                             \
    (void)bad;                                                                \
    return (T)((UT)a + (UT)b);                                                \
  }                                                                           \
  static inline T sub_##SFX(T a, T b, int* bad) {                             \
    (void)bad;                                                                \
    return (T)((UT)a - (UT)b);                                                \
  }                                                                           \
  static inline T mul_##SFX(T a, T b, int* bad) {                             \
    (void)bad;                                                                \
    return (T)((UT)a * (UT)b);                                                \
  }                                                                           \
  static inline T div_##SFX(T a, T b, int* bad) {                             \
    (void)bad;                                                                \
    if (b == 0) return 0;                                                     \
    if (b == -1) return (T)(0 - (UT)a);                                       \
    return a / b;                                                             \
  }                                                                           \
  static inline T max_##SFX(T a, T b, int* bad) {                             \
    (void)bad;                                                                \
    return a > b ? a : b;                                                     \
  }                                                                           \
  static inline T min_##SFX(T a, T b, int* bad) {                             \
    (void)bad;                                                                \
    return a < b ? a : b;                                                     \
  }                                                                           \
  static inline T pow_##SFX(T a, T b, int* bad) {                             \
    if (b < 0) {                                                              \
      *bad = 1;                                                               \
      return 0;                                                               \
    }                                                                         \
    UT result = 1, base = (UT)a;                                              \
    for (T e = b; e != 0; e >>= 1) {                                          \
      if (e & 1) result *= base;                                              \
      base *= base;                                                           \
    }                                                                         \
    return (T)result;                                                         \
  }                                                                           \
  static inline T floordiv_##SFX(T a, T b, int* bad) {                        \
    if (b == 0) {                                                             \
      *bad = 1;                                                               \
      return 0;                                                               \
    }                                                                         \
    if (b == -1) return (T)(0 - (UT)a);                                       \
    T q = a / b;                                                              \
    return (a % b != 0 && ((a < 0) != (b < 0))) ? (T)(q - 1) : q;             \
  }                                                                           \
  static inline T floormod_##SFX(T a, T b, int* bad) {                        \
    if (b == 0) {                                                             \
      *bad = 1;                                                               \
      return 0;                                                               \
    }                                                                         \
    if (b == -1) return 0;                                                    \
    T r = a % b;                                                              \
    return (r != 0 && ((r < 0) != (b < 0))) ? (T)(r + b) : r;                 \
  }
MD_INT_TYPES(MD_INT_BINARY)

/*** Loops ***/

/* z[i] = op(x[i * xs], y[i * ys]) for i in [0, n); strides in elements.
 * Returns nonzero if an element was invalid. */
typedef int (*md_binary_loop)(const void* x, int64_t xs, const void* y,
                              int64_t ys, void* z, int64_t n);

#define MD_BINARY_LOOP(OP, SFX, ST)                                           \
  static int OP##_loop_##SFX(const void* xv, int64_t xs, const void* yv,      \
                             int64_t ys, void* zv, int64_t n) {               \
    const ST* x = xv;                                                         \
    const ST* y = yv;                                                         \
    ST* z = zv;                                                               \
    int bad = 0;                                                              \
    for (int64_t i = 0; i < n; ++i) {                                         \
      z[i] = md_store_##SFX(OP##_##SFX(md_load_##SFX(x[i * xs]),              \
                                       md_load_##SFX(y[i * ys]), &bad));      \
    }                                                                         \
    return bad;                                                               \
  }
#define MD_BINARY_LOOPS(SFX, ST)                                              \
  MD_BINARY_LOOP(add, SFX, ST) MD_BINARY_LOOP(sub, SFX, ST)                   \
  MD_BINARY_LOOP(mul, SFX, ST) MD_BINARY_LOOP(div, SFX, ST)                   \
  MD_BINARY_LOOP(max, SFX, ST) MD_BINARY_LOOP(min, SFX, ST)                   \
  MD_BINARY_LOOP(pow, SFX, ST) MD_BINARY_LOOP(floordiv, SFX, ST)              \
  MD_BINARY_LOOP(floormod, SFX, ST)
#define MD_FLOAT_LOOPS(ENUM, SFX, ST, CT, AT) MD_BINARY_LOOPS(SFX, ST)
#define MD_INT_LOOPS(ENUM, SFX, T, UT, LO, HI) MD_BINARY_LOOPS(SFX, T)
MD_FLOAT_TYPES(MD_FLOAT_LOOPS)
MD_INT_TYPES(MD_INT_LOOPS)

/* The loop for (op, dtype), or NULL if the dtype is not supported. */
static md_binary_loop md_select_loop(md_binary_op op, TF_DataType dtype) {
#define MD_CASE(ENUM, SFX)                                                    \
  case ENUM: {                                                                \
    static const md_binary_loop loops[MD_NUM_BINARY_OPS] = {                  \
        add_loop_##SFX, sub_loop_##SFX, mul_loop_##SFX,                       \
        div_loop_##SFX, max_loop_##SFX, min_loop_##SFX,                       \
        pow_loop_##SFX, floordiv_loop_##SFX, floormod_loop_##SFX};            \
    return loops[op];                                                         \
  }
#define MD_FLOAT_CASE(ENUM, SFX, ST, CT, AT) MD_CASE(ENUM, SFX)
#define MD_INT_CASE(ENUM, SFX, T, UT, LO, HI) MD_CASE(ENUM, SFX)
  switch (dtype) {
    MD_FLOAT_TYPES(MD_FLOAT_CASE)
    MD_INT_TYPES(MD_INT_CASE)
    default:
      return NULL;
  }
#undef MD_CASE
#undef MD_FLOAT_CASE
#undef MD_INT_CASE
}

/*** The task ***/

typedef struct md_binary_task {
  md_binary_loop loop;
  md_binary_op op;
  const char* x;
  const char* y;
  char* z;
  int64_t esize; /* bytes per element */
  int bad;       /* set by the rows: an invalid element was seen */
  md_bcast b;
  md_where where;
} md_binary_task;

static void md_binary_row(void* arg, const int64_t* offsets,
                          const int64_t* strides, int64_t out, int64_t n) {
  md_binary_task* t = arg;
  t->bad |= t->loop(t->x + offsets[0] * t->esize, strides[0],
                    t->y + offsets[1] * t->esize, strides[1],
                    t->z + out * t->esize, n);
}

static void md_binary_run(void* arg, SP_Stream stream) {
  md_binary_task* t = arg;
  md_bcast_walk(&t->b, md_binary_row, t);
  if (!t->bad) return;
  if (t->op == MD_POW) {
    md_task_error(stream, &t->where, TF_INVALID_ARGUMENT,
                  "Integers to negative integer powers are not allowed");
  } else {
    md_task_error(stream, &t->where, TF_INVALID_ARGUMENT,
                  "Integer division by zero");
  }
}

static void md_binary_compute(TF_OpKernelContext* ctx, md_binary_op op) {
  md_shape shapes[2], zs;
  TF_Tensor* x = md_get_input(ctx, 0, &shapes[0]);
  TF_Tensor* y = x ? md_get_input(ctx, 1, &shapes[1]) : NULL;
  TF_Tensor* z = NULL;
  if (y == NULL) goto done;

  TF_DataType dtype = TF_TensorType(x);
  md_binary_loop loop = md_select_loop(op, dtype);
  if (loop == NULL || TF_TensorType(y) != dtype) {
    md_fail(ctx, TF_INVALID_ARGUMENT, "%.*s: unsupported dtypes %d and %d",
            MD_OP(ctx), (int)dtype, (int)TF_TensorType(y));
    goto done;
  }
  if (!md_broadcast_shapes(shapes, 2, &zs)) {
    md_fail_broadcast(ctx, &shapes[0], &shapes[1]);
    goto done;
  }
  z = md_allocate_output(ctx, 0, dtype, &zs);
  if (z == NULL || md_num_elements(&zs) == 0) goto done;

  md_binary_task* task = md_task_alloc(ctx, sizeof(*task));
  if (task == NULL) goto done;
  task->loop = loop;
  task->op = op;
  task->x = TF_TensorData(x);
  task->y = TF_TensorData(y);
  task->z = TF_TensorData(z);
  task->esize = (int64_t)TF_DataTypeSize(dtype);
  md_bcast_plan(shapes, 2, &zs, &task->b);
  /* The prefix of an error found by the work: only the integer loops can
   * find one (division or modulo by zero, negative powers), so only they
   * pay for formatting it (the float loops never set `bad`). */
  if (!md_is_float(dtype)) md_where_of(ctx, &task->where);
  md_enqueue_small(ctx, md_binary_run, task, md_num_elements(&zs));

done:
  md_delete_tensors(x, y, z, NULL);
}

#define MD_BINARY_COMPUTE(NAME, OP)                                           \
  void md_compute_##NAME(void* kernel, TF_OpKernelContext* ctx) {             \
    (void)kernel;                                                             \
    md_binary_compute(ctx, OP);                                               \
  }
MD_BINARY_COMPUTE(add, MD_ADD)
MD_BINARY_COMPUTE(sub, MD_SUB)
MD_BINARY_COMPUTE(mul, MD_MUL)
MD_BINARY_COMPUTE(div, MD_DIV)
MD_BINARY_COMPUTE(maximum, MD_MAX)
MD_BINARY_COMPUTE(minimum, MD_MIN)
MD_BINARY_COMPUTE(pow, MD_POW)
MD_BINARY_COMPUTE(floordiv, MD_FLOORDIV)
MD_BINARY_COMPUTE(floormod, MD_FLOORMOD)
