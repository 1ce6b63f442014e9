/* Host reference device: broadcasting binary ops.
 *
 * AddV2, Sub, Mul, RealDiv, Maximum, Minimum with numpy broadcasting.
 *
 * The output shape is computed from the two input shapes; each input gets a
 * stride per output dimension (0 where it is broadcast). Dimensions of size 1
 * are dropped and contiguous neighbours merged, so equal shapes and
 * scalar-with-tensor become a single flat loop; other cases walk the outer
 * dimensions with an index counter and run the innermost one as a loop. */
#include <stdlib.h>

#include "kernel_list.h"
#include "kernel_util.h"

typedef enum md_binary_op {
  MD_ADD, MD_SUB, MD_MUL, MD_DIV, MD_MAX, MD_MIN, MD_NUM_BINARY_OPS
} md_binary_op;

/*** Element functions ***/

/* Floats: IEEE arithmetic in the compute type; Maximum/Minimum propagate NaN
 * like numpy. */
#define MD_FLOAT_BINARY(ENUM, SFX, ST, CT, AT)                                \
  static inline CT add_##SFX(CT a, CT b) { return a + b; }                    \
  static inline CT sub_##SFX(CT a, CT b) { return a - b; }                    \
  static inline CT mul_##SFX(CT a, CT b) { return a * b; }                    \
  static inline CT div_##SFX(CT a, CT b) { return a / b; }                    \
  static inline CT max_##SFX(CT a, CT b) { return (a > b || a != a) ? a : b; } \
  static inline CT min_##SFX(CT a, CT b) { return (a < b || a != a) ? a : b; }
MD_FLOAT_TYPES(MD_FLOAT_BINARY)

/* Integers: wrap on overflow; division truncates toward zero, x / 0 is 0 and
 * MIN / -1 wraps (both would trap or be undefined in C). */
#define MD_INT_BINARY(ENUM, SFX, T, UT, LO, HI)                               \
  static inline T add_##SFX(T a, T b) { return (T)((UT)a + (UT)b); }          \
  static inline T sub_##SFX(T a, T b) { return (T)((UT)a - (UT)b); }          \
  static inline T mul_##SFX(T a, T b) { return (T)((UT)a * (UT)b); }          \
  static inline T div_##SFX(T a, T b) {                                       \
    if (b == 0) return 0;                                                     \
    if (b == -1) return (T)(0 - (UT)a);                                       \
    return a / b;                                                             \
  }                                                                           \
  static inline T max_##SFX(T a, T b) { return a > b ? a : b; }               \
  static inline T min_##SFX(T a, T b) { return a < b ? a : b; }
MD_INT_TYPES(MD_INT_BINARY)

/*** Loops ***/

/* z[i] = op(x[i * xs], y[i * ys]) for i in [0, n); strides in elements. */
typedef void (*md_binary_loop)(const void* x, int64_t xs, const void* y,
                               int64_t ys, void* z, int64_t n);

#define MD_BINARY_LOOP(OP, SFX, ST)                                           \
  static void OP##_loop_##SFX(const void* xv, int64_t xs, const void* yv,     \
                              int64_t ys, void* zv, int64_t n) {              \
    const ST* x = xv;                                                         \
    const ST* y = yv;                                                         \
    ST* z = zv;                                                               \
    for (int64_t i = 0; i < n; ++i) {                                         \
      z[i] = md_store_##SFX(                                                  \
          OP##_##SFX(md_load_##SFX(x[i * xs]), md_load_##SFX(y[i * ys])));    \
    }                                                                         \
  }
#define MD_BINARY_LOOPS(SFX, ST)                                              \
  MD_BINARY_LOOP(add, SFX, ST) MD_BINARY_LOOP(sub, SFX, ST)                   \
  MD_BINARY_LOOP(mul, SFX, ST) MD_BINARY_LOOP(div, SFX, ST)                   \
  MD_BINARY_LOOP(max, SFX, ST) MD_BINARY_LOOP(min, SFX, ST)
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
        div_loop_##SFX, max_loop_##SFX, min_loop_##SFX};                      \
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

/*** Broadcasting ***/

/* The iteration space of one call: output dims and per-input strides (in
 * elements), after dropping size-1 dims and merging contiguous ones. */
typedef struct md_bcast {
  int rank;
  int64_t dims[TF_MAX_DIMS];
  int64_t xs[TF_MAX_DIMS];
  int64_t ys[TF_MAX_DIMS];
} md_bcast;

/* Computes the broadcast output shape; returns 0 if the shapes conflict. */
static int md_broadcast_shape(const md_shape* x, const md_shape* y,
                              md_shape* out) {
  out->rank = x->rank > y->rank ? x->rank : y->rank;
  for (int i = 0; i < out->rank; ++i) {
    /* Align from the right; missing leading dims act as 1. */
    int xi = i - (out->rank - x->rank);
    int yi = i - (out->rank - y->rank);
    int64_t dx = xi >= 0 ? x->dims[xi] : 1;
    int64_t dy = yi >= 0 ? y->dims[yi] : 1;
    if (dx == dy || dy == 1) {
      out->dims[i] = dx;
    } else if (dx == 1) {
      out->dims[i] = dy;
    } else {
      return 0;
    }
  }
  return 1;
}

/* Row-major strides of `in` seen through the output shape (0 on broadcast
 * dims). */
static void md_input_strides(const md_shape* in, const md_shape* out,
                             int64_t* strides) {
  int64_t stride = 1;
  for (int i = out->rank - 1; i >= 0; --i) {
    int ii = i - (out->rank - in->rank);
    int64_t d = ii >= 0 ? in->dims[ii] : 1;
    strides[i] = d == 1 ? 0 : stride;
    stride *= d;
  }
}

static void md_make_bcast(const md_shape* x, const md_shape* y,
                          const md_shape* out, md_bcast* b) {
  int64_t xs[TF_MAX_DIMS], ys[TF_MAX_DIMS];
  md_input_strides(x, out, xs);
  md_input_strides(y, out, ys);
  b->rank = 0;
  for (int i = 0; i < out->rank; ++i) {
    int64_t d = out->dims[i];
    if (d == 1) continue;
    int last = b->rank - 1;
    /* Merge into the previous dim when both inputs are contiguous across
     * the two (this also merges runs of broadcast dims, stride 0). */
    if (last >= 0 && b->xs[last] == xs[i] * d && b->ys[last] == ys[i] * d) {
      b->dims[last] *= d;
      b->xs[last] = xs[i];
      b->ys[last] = ys[i];
      continue;
    }
    b->dims[b->rank] = d;
    b->xs[b->rank] = xs[i];
    b->ys[b->rank] = ys[i];
    b->rank++;
  }
}

/*** The task ***/

typedef struct md_binary_task {
  md_binary_loop loop;
  const char* x;
  const char* y;
  char* z;
  int64_t esize; /* bytes per element */
  md_bcast b;
} md_binary_task;

static void md_binary_run(void* arg, SP_Stream stream) {
  (void)stream;
  md_binary_task* t = arg;
  const md_bcast* b = &t->b;
  if (b->rank == 0) { /* a single element */
    t->loop(t->x, 0, t->y, 0, t->z, 1);
    return;
  }
  int inner = b->rank - 1;
  int64_t n = b->dims[inner];
  int64_t idx[TF_MAX_DIMS] = {0};
  int64_t xoff = 0, yoff = 0; /* element offsets of the current row */
  char* z = t->z;
  for (;;) {
    t->loop(t->x + xoff * t->esize, b->xs[inner], t->y + yoff * t->esize,
            b->ys[inner], z, n);
    z += n * t->esize;
    /* Advance the counter over the outer dims. */
    int d = inner - 1;
    for (; d >= 0; --d) {
      xoff += b->xs[d];
      yoff += b->ys[d];
      if (++idx[d] < b->dims[d]) break;
      xoff -= b->xs[d] * b->dims[d];
      yoff -= b->ys[d] * b->dims[d];
      idx[d] = 0;
    }
    if (d < 0) break;
  }
}

static void md_binary_compute(TF_OpKernelContext* ctx, md_binary_op op) {
  md_shape xs, ys, zs;
  TF_Tensor* x = md_get_input(ctx, 0, &xs);
  TF_Tensor* y = x ? md_get_input(ctx, 1, &ys) : NULL;
  TF_Tensor* z = NULL;
  md_binary_task* task = NULL;
  if (y == NULL) goto done;

  TF_DataType dtype = TF_TensorType(x);
  md_binary_loop loop = md_select_loop(op, dtype);
  if (loop == NULL || TF_TensorType(y) != dtype) {
    md_fail(ctx, TF_INVALID_ARGUMENT, "%.*s: unsupported dtypes %d and %d",
            MD_OP(ctx), (int)dtype, (int)TF_TensorType(y));
    goto done;
  }
  if (!md_broadcast_shape(&xs, &ys, &zs)) {
    char a[MD_SHAPE_STR_SIZE], b[MD_SHAPE_STR_SIZE];
    md_fail(ctx, TF_INVALID_ARGUMENT,
            "%.*s: incompatible shapes for broadcasting: %s and %s", MD_OP(ctx),
            md_shape_str(&xs, a, sizeof(a)), md_shape_str(&ys, b, sizeof(b)));
    goto done;
  }
  z = md_allocate_output(ctx, 0, dtype, &zs);
  if (z == NULL || md_num_elements(&zs) == 0) goto done;

  task = malloc(sizeof(*task));
  if (task == NULL) {
    md_fail(ctx, TF_RESOURCE_EXHAUSTED, "%.*s: out of memory", MD_OP(ctx));
    goto done;
  }
  task->loop = loop;
  task->x = TF_TensorData(x);
  task->y = TF_TensorData(y);
  task->z = TF_TensorData(z);
  task->esize = (int64_t)TF_DataTypeSize(dtype);
  md_make_bcast(&xs, &ys, &zs, &task->b);
  md_enqueue(ctx, md_binary_run, task);

done:
  md_delete_tensors(x, y, z, NULL);
}

void md_compute_add(void* kernel, TF_OpKernelContext* ctx) {
  (void)kernel;
  md_binary_compute(ctx, MD_ADD);
}
void md_compute_sub(void* kernel, TF_OpKernelContext* ctx) {
  (void)kernel;
  md_binary_compute(ctx, MD_SUB);
}
void md_compute_mul(void* kernel, TF_OpKernelContext* ctx) {
  (void)kernel;
  md_binary_compute(ctx, MD_MUL);
}
void md_compute_div(void* kernel, TF_OpKernelContext* ctx) {
  (void)kernel;
  md_binary_compute(ctx, MD_DIV);
}
void md_compute_maximum(void* kernel, TF_OpKernelContext* ctx) {
  (void)kernel;
  md_binary_compute(ctx, MD_MAX);
}
void md_compute_minimum(void* kernel, TF_OpKernelContext* ctx) {
  (void)kernel;
  md_binary_compute(ctx, MD_MIN);
}
