/* Host reference device: complex64 and complex128 kernels.
 *
 * A complex element is a pair of float (complex64) or double (complex128),
 * real part first: TensorFlow's layout and numpy's. The arithmetic is
 * written out on the parts, in the part type, as TensorFlow's CPU kernels
 * compute it for finite values:
 *
 *   AddV2, Sub, Mul   broadcasting, (a + bi) op (c + di)
 *   Neg, Conj         element-wise, complex -> complex
 *   Real, Imag        element-wise, complex -> its part type (Tout)
 *   Complex           broadcasting, two part tensors -> complex (Tout)
 *
 * The data-movement kernels (Identity, Reshape, Transpose, ConcatV2, ...)
 * carry complex elements as bytes and live with the other types in their
 * own files. */
#include "kernel_list.h"
#include "kernel_util.h"

typedef struct md_c64 {
  float re, im;
} md_c64;
typedef struct md_c128 {
  double re, im;
} md_c128;

static int md_is_complex(TF_DataType t) {
  return t == TF_COMPLEX64 || t == TF_COMPLEX128;
}

/*** Broadcasting binary ops: AddV2, Sub, Mul, Complex ***/

typedef enum md_complex_op {
  MD_CADD, MD_CSUB, MD_CMUL, MD_CMAKE
} md_complex_op;

/* z[i] = op(x[i * xs], y[i * ys]) for i in [0, n); strides in elements. */
typedef void (*md_complex_loop)(const void* x, int64_t xs, const void* y,
                                int64_t ys, void* z, int64_t n);

#define MD_COMPLEX_LOOPS(SFX, CT, PT)                                         \
  static void add_##SFX(const void* xv, int64_t xs, const void* yv,          \
                        int64_t ys, void* zv, int64_t n) {                   \
    const CT* x = xv;                                                         \
    const CT* y = yv;                                                         \
    CT* z = zv;                                                               \
    for (int64_t i = 0; i < n; ++i) {                                         \
      CT a = x[i * xs], b = y[i * ys];                                        \
      z[i].re = a.re + b.re;                                                  \
      z[i].im = a.im + b.im;                                                  \
    }                                                                         \
  }                                                                           \
  static void sub_##SFX(const void* xv, int64_t xs, const void* yv,          \
                        int64_t ys, void* zv, int64_t n) {                   \
    const CT* x = xv;                                                         \
    const CT* y = yv;                                                         \
    CT* z = zv;                                                               \
    for (int64_t i = 0; i < n; ++i) {                                         \
      CT a = x[i * xs], b = y[i * ys];                                        \
      z[i].re = a.re - b.re;                                                  \
      z[i].im = a.im - b.im;                                                  \
    }                                                                         \
  }                                                                           \
  static void mul_##SFX(const void* xv, int64_t xs, const void* yv,          \
                        int64_t ys, void* zv, int64_t n) {                   \
    const CT* x = xv;                                                         \
    const CT* y = yv;                                                         \
    CT* z = zv;                                                               \
    for (int64_t i = 0; i < n; ++i) {                                         \
      CT a = x[i * xs], b = y[i * ys];                                        \
      PT re = a.re * b.re - a.im * b.im;                                      \
      PT im = a.re * b.im + a.im * b.re;                                      \
      z[i].re = re;                                                           \
      z[i].im = im;                                                           \
    }                                                                         \
  }                                                                           \
  static void make_##SFX(const void* xv, int64_t xs, const void* yv,         \
                         int64_t ys, void* zv, int64_t n) {                  \
    const PT* x = xv;                                                         \
    const PT* y = yv;                                                         \
    CT* z = zv;                                                               \
    for (int64_t i = 0; i < n; ++i) {                                         \
      z[i].re = x[i * xs];                                                    \
      z[i].im = y[i * ys];                                                    \
    }                                                                         \
  }
MD_COMPLEX_LOOPS(c64, md_c64, float)
MD_COMPLEX_LOOPS(c128, md_c128, double)
#undef MD_COMPLEX_LOOPS

typedef struct md_complex_task {
  md_complex_loop loop;
  const char* x;
  const char* y;
  char* z;
  int64_t in_size;  /* bytes per input element */
  int64_t out_size; /* bytes per output element */
  md_bcast b;
} md_complex_task;

static void md_complex_row(void* arg, const int64_t* offsets,
                           const int64_t* strides, int64_t out, int64_t n) {
  md_complex_task* t = arg;
  t->loop(t->x + offsets[0] * t->in_size, strides[0],
          t->y + offsets[1] * t->in_size, strides[1], t->z + out * t->out_size,
          n);
}

static void md_complex_run(void* arg, SP_Stream stream) {
  (void)stream;
  md_complex_task* t = arg;
  md_bcast_walk(&t->b, md_complex_row, t);
}

static void md_complex_binary(TF_OpKernelContext* ctx, md_complex_op op) {
  md_shape shapes[2], zs;
  TF_Tensor* x = md_get_input(ctx, 0, &shapes[0]);
  TF_Tensor* y = x ? md_get_input(ctx, 1, &shapes[1]) : NULL;
  TF_Tensor* z = NULL;
  if (y == NULL) goto done;

  TF_DataType in = TF_TensorType(x);
  TF_DataType out = in;
  if (op == MD_CMAKE) { /* Complex: float -> complex64, double -> complex128 */
    out = in == TF_FLOAT ? TF_COMPLEX64 : in == TF_DOUBLE ? TF_COMPLEX128 : 0;
  }
  if (TF_TensorType(y) != in || !md_is_complex(out) ||
      (op != MD_CMAKE && !md_is_complex(in))) {
    md_fail(ctx, TF_INVALID_ARGUMENT, "%.*s: unsupported dtypes %d and %d",
            MD_OP(ctx), (int)in, (int)TF_TensorType(y));
    goto done;
  }
  if (!md_broadcast_shapes(shapes, 2, &zs)) {
    md_fail_broadcast(ctx, &shapes[0], &shapes[1]);
    goto done;
  }
  z = md_allocate_output(ctx, 0, out, &zs);
  if (z == NULL || md_num_elements(&zs) == 0) goto done;

  md_complex_task* task = md_task_alloc(ctx, sizeof(*task));
  if (task == NULL) goto done;
  int wide = out == TF_COMPLEX128;
  static const md_complex_loop kLoops[2][4] = {
      {add_c64, sub_c64, mul_c64, make_c64},
      {add_c128, sub_c128, mul_c128, make_c128}};
  task->loop = kLoops[wide][op];
  task->x = TF_TensorData(x);
  task->y = TF_TensorData(y);
  task->z = TF_TensorData(z);
  task->in_size = (int64_t)TF_DataTypeSize(in);
  task->out_size = (int64_t)TF_DataTypeSize(out);
  md_bcast_plan(shapes, 2, &zs, &task->b);
  md_enqueue_small(ctx, md_complex_run, task, md_num_elements(&zs));

done:
  md_delete_tensors(x, y, z, NULL);
}

void md_compute_complex_add(void* kernel, TF_OpKernelContext* ctx) {
  (void)kernel;
  md_complex_binary(ctx, MD_CADD);
}

void md_compute_complex_sub(void* kernel, TF_OpKernelContext* ctx) {
  (void)kernel;
  md_complex_binary(ctx, MD_CSUB);
}

void md_compute_complex_mul(void* kernel, TF_OpKernelContext* ctx) {
  (void)kernel;
  md_complex_binary(ctx, MD_CMUL);
}

void md_compute_complex(void* kernel, TF_OpKernelContext* ctx) {
  (void)kernel;
  md_complex_binary(ctx, MD_CMAKE);
}

/*** Element-wise: Neg, Conj, Real, Imag ***/

typedef enum md_complex_unary_op {
  MD_CNEG, MD_CCONJ, MD_CREAL, MD_CIMAG
} md_complex_unary_op;

typedef struct md_complex_unary_task {
  md_complex_unary_op op;
  int wide; /* complex128 */
  const void* x;
  void* y;
  int64_t n;
} md_complex_unary_task;

#define MD_COMPLEX_UNARY(SFX, CT, PT)                                         \
  static void md_unary_##SFX(md_complex_unary_op op, const void* xv, void* yv, \
                             int64_t n) {                                     \
    const CT* x = xv;                                                         \
    if (op == MD_CREAL || op == MD_CIMAG) {                                   \
      PT* y = yv;                                                             \
      for (int64_t i = 0; i < n; ++i) {                                       \
        y[i] = op == MD_CREAL ? x[i].re : x[i].im;                            \
      }                                                                       \
      return;                                                                 \
    }                                                                         \
    CT* y = yv;                                                               \
    for (int64_t i = 0; i < n; ++i) {                                         \
      y[i].re = op == MD_CNEG ? -x[i].re : x[i].re;                           \
      y[i].im = -x[i].im;                                                     \
    }                                                                         \
  }
MD_COMPLEX_UNARY(c64, md_c64, float)
MD_COMPLEX_UNARY(c128, md_c128, double)
#undef MD_COMPLEX_UNARY

static void md_complex_unary_run(void* arg, SP_Stream stream) {
  (void)stream;
  md_complex_unary_task* t = arg;
  if (t->wide) {
    md_unary_c128(t->op, t->x, t->y, t->n);
  } else {
    md_unary_c64(t->op, t->x, t->y, t->n);
  }
}

static void md_complex_unary(TF_OpKernelContext* ctx, md_complex_unary_op op) {
  md_shape shape;
  TF_Tensor* x = md_get_input(ctx, 0, &shape);
  TF_Tensor* y = NULL;
  if (x == NULL) return;

  TF_DataType dtype = TF_TensorType(x);
  if (!md_is_complex(dtype)) {
    md_fail(ctx, TF_INVALID_ARGUMENT, "%.*s: unsupported dtype %d", MD_OP(ctx),
            (int)dtype);
    goto done;
  }
  int wide = dtype == TF_COMPLEX128;
  TF_DataType out = dtype;
  if (op == MD_CREAL || op == MD_CIMAG) out = wide ? TF_DOUBLE : TF_FLOAT;
  y = md_allocate_output(ctx, 0, out, &shape);
  int64_t n = md_num_elements(&shape);
  if (y == NULL || n == 0) goto done;

  md_complex_unary_task* task = md_task_alloc(ctx, sizeof(*task));
  if (task == NULL) goto done;
  task->op = op;
  task->wide = wide;
  task->x = TF_TensorData(x);
  task->y = TF_TensorData(y);
  task->n = n;
  md_enqueue_small(ctx, md_complex_unary_run, task, n);

done:
  md_delete_tensors(x, y, NULL, NULL);
}

void md_compute_complex_neg(void* kernel, TF_OpKernelContext* ctx) {
  (void)kernel;
  md_complex_unary(ctx, MD_CNEG);
}

void md_compute_conj(void* kernel, TF_OpKernelContext* ctx) {
  (void)kernel;
  md_complex_unary(ctx, MD_CCONJ);
}

void md_compute_real(void* kernel, TF_OpKernelContext* ctx) {
  (void)kernel;
  md_complex_unary(ctx, MD_CREAL);
}

void md_compute_imag(void* kernel, TF_OpKernelContext* ctx) {
  (void)kernel;
  md_complex_unary(ctx, MD_CIMAG);
}
