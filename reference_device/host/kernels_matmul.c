/* Host reference device: MatMul.
 *
 * product[M,N] = op(a) @ op(b) where op transposes when transpose_a /
 * transpose_b is set. Each input is addressed through two strides, so the
 * transposes cost nothing. The loop order (i, k, j) streams rows of b into a
 * row of accumulators (float for half/bfloat16, double for float32/64,
 * wrapping unsigned for integers). */
#include <stdlib.h>

#include "kernel_list.h"
#include "kernel_util.h"

/* Kernel state: the two attributes. */
typedef struct md_matmul_kernel {
  int transpose_a;
  int transpose_b;
} md_matmul_kernel;

void* md_create_matmul(TF_OpKernelConstruction* ctx) {
  md_matmul_kernel* k = malloc(sizeof(*k));
  if (k == NULL) {
    md_construction_fail(ctx, TF_RESOURCE_EXHAUSTED, "MatMul: out of memory");
    return NULL;
  }
  k->transpose_a = md_get_bool_attr(ctx, "transpose_a", 0);
  k->transpose_b = md_get_bool_attr(ctx, "transpose_b", 0);
  return k;
}

void md_delete_matmul(void* kernel) { free(kernel); }

typedef struct md_matmul_task md_matmul_task;
typedef void (*md_matmul_fn)(const md_matmul_task* t);

struct md_matmul_task {
  md_matmul_fn fn;
  const void* a;
  const void* b;
  void* c;
  int64_t m, n, k;
  int64_t a_si, a_sk; /* a(i, k) = a[i * a_si + k * a_sk] */
  int64_t b_sk, b_sj; /* b(k, j) = b[k * b_sk + j * b_sj] */
  /* Room for one row of accumulators (n entries) follows the struct. */
  _Alignas(16) unsigned char acc[];
};

#define MD_MATMUL(SFX, ST)                                                    \
  static void matmul_##SFX(const md_matmul_task* t) {                         \
    const ST* a = t->a;                                                       \
    const ST* b = t->b;                                                       \
    ST* c = t->c;                                                             \
    md_acc_##SFX* acc = (md_acc_##SFX*)(void*)t->acc;                         \
    for (int64_t i = 0; i < t->m; ++i) {                                      \
      for (int64_t j = 0; j < t->n; ++j) acc[j] = 0;                          \
      for (int64_t kk = 0; kk < t->k; ++kk) {                                 \
        md_acc_##SFX av = md_acc_load_##SFX(a[i * t->a_si + kk * t->a_sk]);   \
        const ST* brow = b + kk * t->b_sk;                                    \
        for (int64_t j = 0; j < t->n; ++j) {                                  \
          acc[j] += av * md_acc_load_##SFX(brow[j * t->b_sj]);                \
        }                                                                     \
      }                                                                       \
      for (int64_t j = 0; j < t->n; ++j) {                                    \
        c[i * t->n + j] = md_acc_store_##SFX(acc[j]);                         \
      }                                                                       \
    }                                                                         \
  }
#define MD_FLOAT_MATMUL(ENUM, SFX, ST, CT, AT) MD_MATMUL(SFX, ST)
#define MD_INT_MATMUL(ENUM, SFX, T, UT, LO, HI) MD_MATMUL(SFX, T)
MD_FLOAT_TYPES(MD_FLOAT_MATMUL)
MD_INT_TYPES(MD_INT_MATMUL)

static md_matmul_fn md_select_matmul(TF_DataType dtype) {
#define MD_FLOAT_CASE(ENUM, SFX, ST, CT, AT)                                  \
  case ENUM:                                                                  \
    return matmul_##SFX;
#define MD_INT_CASE(ENUM, SFX, T, UT, LO, HI)                                 \
  case ENUM:                                                                  \
    return matmul_##SFX;
  switch (dtype) {
    MD_FLOAT_TYPES(MD_FLOAT_CASE)
    MD_INT_TYPES(MD_INT_CASE)
    default:
      return NULL;
  }
#undef MD_FLOAT_CASE
#undef MD_INT_CASE
}

static void md_matmul_run(void* arg, SP_Stream stream) {
  (void)stream;
  md_matmul_task* t = arg;
  t->fn(t);
}

void md_compute_matmul(void* kernel, TF_OpKernelContext* ctx) {
  const md_matmul_kernel* k = kernel;
  md_shape as, bs;
  TF_Tensor* a = md_get_input(ctx, 0, &as);
  TF_Tensor* b = a ? md_get_input(ctx, 1, &bs) : NULL;
  TF_Tensor* c = NULL;
  if (b == NULL) goto done;

  TF_DataType dtype = TF_TensorType(a);
  md_matmul_fn fn = md_select_matmul(dtype);
  if (fn == NULL || TF_TensorType(b) != dtype) {
    md_fail(ctx, TF_INVALID_ARGUMENT, "MatMul: unsupported dtypes %d and %d",
            (int)dtype, (int)TF_TensorType(b));
    goto done;
  }
  char sa[MD_SHAPE_STR_SIZE], sb[MD_SHAPE_STR_SIZE];
  if (as.rank != 2 || bs.rank != 2) {
    md_fail(ctx, TF_INVALID_ARGUMENT, "MatMul: inputs must be matrices, got "
            "a: %s and b: %s", md_shape_str(&as, sa, sizeof(sa)),
            md_shape_str(&bs, sb, sizeof(sb)));
    goto done;
  }
  int ta = k != NULL && k->transpose_a, tb = k != NULL && k->transpose_b;
  int64_t m = ta ? as.dims[1] : as.dims[0];
  int64_t ka = ta ? as.dims[0] : as.dims[1];
  int64_t kb = tb ? bs.dims[1] : bs.dims[0];
  int64_t n = tb ? bs.dims[0] : bs.dims[1];
  if (ka != kb) {
    md_fail(ctx, TF_INVALID_ARGUMENT, "MatMul: inner dimensions do not match: "
            "a: %s (transpose_a=%d), b: %s (transpose_b=%d)",
            md_shape_str(&as, sa, sizeof(sa)), ta,
            md_shape_str(&bs, sb, sizeof(sb)), tb);
    goto done;
  }
  md_shape cs = {2, {m, n}};
  c = md_allocate_output(ctx, 0, dtype, &cs);
  if (c == NULL || m * n == 0) goto done;

  /* k == 0 still needs the zero fill, so the task runs for any k. */
  md_matmul_task* task = malloc(sizeof(*task) + (size_t)n * sizeof(double));
  if (task == NULL) {
    md_fail(ctx, TF_RESOURCE_EXHAUSTED, "MatMul: out of memory");
    goto done;
  }
  task->fn = fn;
  task->a = TF_TensorData(a);
  task->b = TF_TensorData(b);
  task->c = TF_TensorData(c);
  task->m = m;
  task->n = n;
  task->k = ka;
  task->a_si = ta ? 1 : as.dims[1];
  task->a_sk = ta ? as.dims[1] : 1;
  task->b_sk = tb ? 1 : bs.dims[1];
  task->b_sj = tb ? bs.dims[1] : 1;
  md_enqueue(ctx, md_matmul_run, task);

done:
  md_delete_tensors(a, b, c, NULL);
}
