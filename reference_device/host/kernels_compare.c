/* Host reference device: comparisons and logical ops (bool outputs).
 *
 * Less, LessEqual, Greater, GreaterEqual (numbers), Equal, NotEqual (every
 * dtype), LogicalAnd, LogicalOr (bool) with numpy broadcasting, and
 * LogicalNot. Half and bfloat16 compare in float (exactly); NaN compares
 * unequal to everything.
 *
 * Equal / NotEqual with incompatible_shape_error = false return a scalar
 * (false for Equal, true for NotEqual) when the shapes do not broadcast, as
 * TensorFlow does. */
#include <stdlib.h>

#include "kernel_list.h"
#include "kernel_util.h"

typedef enum md_compare_op {
  MD_LESS, MD_LESS_EQUAL, MD_GREATER, MD_GREATER_EQUAL, MD_EQUAL,
  MD_NOT_EQUAL, MD_LOGICAL_AND, MD_LOGICAL_OR, MD_NUM_COMPARE_OPS
} md_compare_op;

/* z[i] = x[i * xs] OP y[i * ys] for i in [0, n); strides in elements. */
typedef void (*md_compare_loop)(const void* x, int64_t xs, const void* y,
                                int64_t ys, uint8_t* z, int64_t n);

#define MD_COMPARE_LOOP(NAME, EXPR, SFX, ST, CT)                              \
  static void NAME##_loop_##SFX(const void* xv, int64_t xs, const void* yv,   \
                                int64_t ys, uint8_t* z, int64_t n) {          \
    const ST* x = xv;                                                         \
    const ST* y = yv;                                                         \
    for (int64_t i = 0; i < n; ++i) {                                         \
      CT a = md_load_##SFX(x[i * xs]);                                        \
      CT b = md_load_##SFX(y[i * ys]);                                        \
      z[i] = (uint8_t)(EXPR);                                                 \
    }                                                                         \
  }
#define MD_ORDER_LOOPS(ENUM, SFX, ST, CT)                                     \
  MD_COMPARE_LOOP(less, a < b, SFX, ST, CT)                                   \
  MD_COMPARE_LOOP(less_equal, a <= b, SFX, ST, CT)                            \
  MD_COMPARE_LOOP(greater, a > b, SFX, ST, CT)                                \
  MD_COMPARE_LOOP(greater_equal, a >= b, SFX, ST, CT)
#define MD_EQUALITY_LOOPS(ENUM, SFX, ST, CT)                                  \
  MD_COMPARE_LOOP(equal, a == b, SFX, ST, CT)                                 \
  MD_COMPARE_LOOP(not_equal, a != b, SFX, ST, CT)
MD_REAL_TYPES(MD_ORDER_LOOPS)
MD_ALL_TYPES(MD_EQUALITY_LOOPS)
MD_COMPARE_LOOP(logical_and, (a != 0) && (b != 0), bool, uint8_t, uint8_t)
MD_COMPARE_LOOP(logical_or, (a != 0) || (b != 0), bool, uint8_t, uint8_t)

/* The loop for (op, dtype), or NULL if not supported. */
static md_compare_loop md_select_loop(md_compare_op op, TF_DataType dtype) {
#define MD_REAL_CASE(ENUM, SFX, ST, CT)                                       \
  case ENUM: {                                                                \
    static const md_compare_loop loops[MD_NUM_COMPARE_OPS] = {                \
        [MD_LESS] = less_loop_##SFX,                                          \
        [MD_LESS_EQUAL] = less_equal_loop_##SFX,                              \
        [MD_GREATER] = greater_loop_##SFX,                                    \
        [MD_GREATER_EQUAL] = greater_equal_loop_##SFX,                        \
        [MD_EQUAL] = equal_loop_##SFX,                                        \
        [MD_NOT_EQUAL] = not_equal_loop_##SFX};                               \
    return loops[op];                                                         \
  }
#define MD_OTHER_CASE(ENUM, SFX, ST, CT)                                      \
  case ENUM: {                                                                \
    static const md_compare_loop loops[MD_NUM_COMPARE_OPS] = {                \
        [MD_EQUAL] = equal_loop_##SFX,                                        \
        [MD_NOT_EQUAL] = not_equal_loop_##SFX};                               \
    return loops[op];                                                         \
  }
  switch (dtype) {
    MD_REAL_TYPES(MD_REAL_CASE)
    MD_OTHER_CASE(TF_INT8, i8, int8_t, int8_t)
    MD_OTHER_CASE(TF_UINT8, u8, uint8_t, uint8_t)
    MD_OTHER_CASE(TF_INT16, i16, int16_t, int16_t)
    case TF_BOOL: {
      static const md_compare_loop loops[MD_NUM_COMPARE_OPS] = {
          [MD_EQUAL] = equal_loop_bool,
          [MD_NOT_EQUAL] = not_equal_loop_bool,
          [MD_LOGICAL_AND] = logical_and_loop_bool,
          [MD_LOGICAL_OR] = logical_or_loop_bool};
      return loops[op];
    }
    default:
      return NULL;
  }
#undef MD_REAL_CASE
#undef MD_OTHER_CASE
}

/*** Kernel state: Equal / NotEqual's incompatible_shape_error ***/

typedef struct md_equality_kernel {
  int incompatible_shape_error;
} md_equality_kernel;

void* md_create_equality(TF_OpKernelConstruction* ctx) {
  md_equality_kernel* k = malloc(sizeof(*k));
  if (k == NULL) {
    md_construction_fail(ctx, TF_RESOURCE_EXHAUSTED, "Equal: out of memory");
    return NULL;
  }
  k->incompatible_shape_error =
      md_get_bool_attr(ctx, "incompatible_shape_error", 1);
  return k;
}

void md_delete_equality(void* kernel) { free(kernel); }

/*** Tasks ***/

typedef struct md_compare_task {
  md_compare_loop loop;
  const char* x;
  const char* y;
  uint8_t* z;
  int64_t esize;
  md_bcast b;
} md_compare_task;

static void md_compare_row(void* arg, const int64_t* offsets,
                           const int64_t* strides, int64_t out, int64_t n) {
  md_compare_task* t = arg;
  t->loop(t->x + offsets[0] * t->esize, strides[0],
          t->y + offsets[1] * t->esize, strides[1], t->z + out, n);
}

static void md_compare_run(void* arg, SP_Stream stream) {
  (void)stream;
  md_compare_task* t = arg;
  md_bcast_walk(&t->b, md_compare_row, t);
}

/* Writes one constant bool (the incompatible-shapes answer). */
typedef struct md_bool_task {
  uint8_t* z;
  uint8_t value;
} md_bool_task;

static void md_bool_run(void* arg, SP_Stream stream) {
  (void)stream;
  md_bool_task* t = arg;
  *t->z = t->value;
}

/* `lenient`: incompatible shapes give a scalar `lenient_value` instead of an
 * error (Equal / NotEqual with incompatible_shape_error = false). */
static void md_compare_compute(TF_OpKernelContext* ctx, md_compare_op op,
                               int lenient, int lenient_value) {
  md_shape shapes[2], zs;
  TF_Tensor* x = md_get_input(ctx, 0, &shapes[0]);
  TF_Tensor* y = x ? md_get_input(ctx, 1, &shapes[1]) : NULL;
  TF_Tensor* z = NULL;
  if (y == NULL) goto done;

  TF_DataType dtype = TF_TensorType(x);
  md_compare_loop loop = md_select_loop(op, dtype);
  if (loop == NULL || TF_TensorType(y) != dtype) {
    md_fail(ctx, TF_INVALID_ARGUMENT, "%.*s: unsupported dtypes %d and %d",
            MD_OP(ctx), (int)dtype, (int)TF_TensorType(y));
    goto done;
  }
  if (!md_broadcast_shapes(shapes, 2, &zs)) {
    if (lenient) {
      md_shape scalar = {0, {0}};
      z = md_allocate_output(ctx, 0, TF_BOOL, &scalar);
      md_bool_task* task = z ? md_task_alloc(ctx, sizeof(*task)) : NULL;
      if (task == NULL) goto done;
      task->z = TF_TensorData(z);
      task->value = (uint8_t)lenient_value;
      md_enqueue(ctx, md_bool_run, task);
      goto done;
    }
    md_fail_broadcast(ctx, &shapes[0], &shapes[1]);
    goto done;
  }
  z = md_allocate_output(ctx, 0, TF_BOOL, &zs);
  if (z == NULL || md_num_elements(&zs) == 0) goto done;

  md_compare_task* task = md_task_alloc(ctx, sizeof(*task));
  if (task == NULL) goto done;
  task->loop = loop;
  task->x = TF_TensorData(x);
  task->y = TF_TensorData(y);
  task->z = TF_TensorData(z);
  task->esize = (int64_t)TF_DataTypeSize(dtype);
  md_bcast_plan(shapes, 2, &zs, &task->b);
  md_enqueue(ctx, md_compare_run, task);

done:
  md_delete_tensors(x, y, z, NULL);
}

#define MD_COMPARE_COMPUTE(NAME, OP)                                          \
  void md_compute_##NAME(void* kernel, TF_OpKernelContext* ctx) {             \
    (void)kernel;                                                             \
    md_compare_compute(ctx, OP, 0, 0);                                        \
  }
MD_COMPARE_COMPUTE(less, MD_LESS)
MD_COMPARE_COMPUTE(less_equal, MD_LESS_EQUAL)
MD_COMPARE_COMPUTE(greater, MD_GREATER)
MD_COMPARE_COMPUTE(greater_equal, MD_GREATER_EQUAL)
MD_COMPARE_COMPUTE(logical_and, MD_LOGICAL_AND)
MD_COMPARE_COMPUTE(logical_or, MD_LOGICAL_OR)

void md_compute_equal(void* kernel, TF_OpKernelContext* ctx) {
  const md_equality_kernel* k = kernel;
  md_compare_compute(ctx, MD_EQUAL, k != NULL && !k->incompatible_shape_error,
                     0);
}

void md_compute_not_equal(void* kernel, TF_OpKernelContext* ctx) {
  const md_equality_kernel* k = kernel;
  md_compare_compute(ctx, MD_NOT_EQUAL,
                     k != NULL && !k->incompatible_shape_error, 1);
}

/*** LogicalNot ***/

typedef struct md_not_task {
  const uint8_t* x;
  uint8_t* y;
  int64_t n;
} md_not_task;

static void md_not_run(void* arg, SP_Stream stream) {
  (void)stream;
  md_not_task* t = arg;
  for (int64_t i = 0; i < t->n; ++i) t->y[i] = t->x[i] == 0;
}

void md_compute_logical_not(void* kernel, TF_OpKernelContext* ctx) {
  (void)kernel;
  md_shape shape;
  TF_Tensor* x = md_get_input(ctx, 0, &shape);
  TF_Tensor* y = NULL;
  if (x == NULL) return;
  if (TF_TensorType(x) != TF_BOOL) {
    md_fail(ctx, TF_INVALID_ARGUMENT, "LogicalNot: input must be bool, got "
            "dtype %d", (int)TF_TensorType(x));
    goto done;
  }
  y = md_allocate_output(ctx, 0, TF_BOOL, &shape);
  int64_t n = md_num_elements(&shape);
  if (y == NULL || n == 0) goto done;
  md_not_task* task = md_task_alloc(ctx, sizeof(*task));
  if (task == NULL) goto done;
  task->x = TF_TensorData(x);
  task->y = TF_TensorData(y);
  task->n = n;
  md_enqueue(ctx, md_not_run, task);

done:
  md_delete_tensors(x, y, NULL, NULL);
}
