/* Host reference device: BiasAdd and BiasAddGrad.
 *
 * With data_format NHWC the channel is the last dim; with NCHW it is dim 1.
 * Either way the value is seen as [outer, C, inner] (inner = 1 for NHWC):
 *   BiasAdd:     output[o, c, i] = value[o, c, i] + bias[c]
 *   BiasAddGrad: output[c] = sum over o, i of out_backprop[o, c, i]
 * The gradient sums in the accumulation type (float for half/bfloat16,
 * double for float32/64, wrapping unsigned for integers). */
#include <stdlib.h>
#include <string.h>

#include "kernel_list.h"
#include "kernel_util.h"

typedef struct md_bias_kernel {
  int nchw;
} md_bias_kernel;

void* md_create_bias(TF_OpKernelConstruction* ctx) {
  char format[16] = "NHWC";
  if (!md_get_string_attr(ctx, "data_format", format, sizeof(format))) {
    return NULL;
  }
  if (strcmp(format, "NHWC") != 0 && strcmp(format, "NCHW") != 0) {
    md_construction_fail(ctx, TF_INVALID_ARGUMENT, "BiasAdd: data_format must "
                         "be NHWC or NCHW, got %s", format);
    return NULL;
  }
  md_bias_kernel* k = malloc(sizeof(*k));
  if (k == NULL) {
    md_construction_fail(ctx, TF_RESOURCE_EXHAUSTED, "BiasAdd: out of memory");
    return NULL;
  }
  k->nchw = strcmp(format, "NCHW") == 0;
  return k;
}

void md_delete_bias(void* kernel) { free(kernel); }

/* Splits `shape` into [outer, C, inner] around the channel dim; returns the
 * channel dim, or -1 after failing the call (rank < 2). */
static int md_bias_layout(TF_OpKernelContext* ctx, const md_bias_kernel* k,
                          const md_shape* s, int64_t* outer, int64_t* inner) {
  if (s->rank < 2) {
    char buf[MD_SHAPE_STR_SIZE];
    md_fail(ctx, TF_INVALID_ARGUMENT, "%.*s: input tensor must be at least 2D, "
            "got %s", MD_OP(ctx), md_shape_str(s, buf, sizeof(buf)));
    return -1;
  }
  int c = (k != NULL && k->nchw) ? 1 : s->rank - 1;
  *outer = 1;
  *inner = 1;
  for (int i = 0; i < s->rank; ++i) {
    if (i < c) *outer *= s->dims[i];
    if (i > c) *inner *= s->dims[i];
  }
  return c;
}

typedef struct md_bias_task md_bias_task;
typedef void (*md_bias_fn)(const md_bias_task* t);

struct md_bias_task {
  md_bias_fn fn;
  const void* x;
  const void* bias;
  void* y;
  int64_t outer, channels, inner;
  _Alignas(16) unsigned char acc[]; /* BiasAddGrad: C accumulators */
};

#define MD_BIAS(SFX, ST, CT)                                                  \
  static void bias_add_##SFX(const md_bias_task* t) {                         \
    const ST* x = t->x;                                                       \
    const ST* b = t->bias;                                                    \
    ST* y = t->y;                                                             \
    for (int64_t o = 0; o < t->outer; ++o) {                                  \
      for (int64_t c = 0; c < t->channels; ++c) {                             \
        CT bc = md_load_##SFX(b[c]);                                          \
        for (int64_t i = 0; i < t->inner; ++i, ++x, ++y) {                    \
          *y = md_store_##SFX((CT)(md_load_##SFX(*x) + bc));                  \
        }                                                                     \
      }                                                                       \
    }                                                                         \
  }                                                                           \
  static void bias_grad_##SFX(const md_bias_task* t) {                        \
    const ST* g = t->x;                                                       \
    ST* y = t->y;                                                             \
    md_acc_##SFX* acc = (md_acc_##SFX*)(void*)t->acc;                         \
    for (int64_t c = 0; c < t->channels; ++c) acc[c] = 0;                     \
    for (int64_t o = 0; o < t->outer; ++o) {                                  \
      for (int64_t c = 0; c < t->channels; ++c) {                             \
        for (int64_t i = 0; i < t->inner; ++i, ++g) {                         \
          acc[c] += md_acc_load_##SFX(*g);                                    \
        }                                                                     \
      }                                                                       \
    }                                                                         \
    for (int64_t c = 0; c < t->channels; ++c) y[c] = md_acc_store_##SFX(acc[c]); \
  }
#define MD_FLOAT_BIAS(ENUM, SFX, ST, CT, AT) MD_BIAS(SFX, ST, CT)
#define MD_INT_BIAS(ENUM, SFX, T, UT, LO, HI) MD_BIAS(SFX, T, UT)
MD_FLOAT_TYPES(MD_FLOAT_BIAS)
MD_INT_TYPES(MD_INT_BIAS)

/* The function for dtype (grad: BiasAddGrad), or NULL. */
static md_bias_fn md_select_bias(TF_DataType dtype, int grad) {
#define MD_FLOAT_CASE(ENUM, SFX, ST, CT, AT)                                  \
  case ENUM: return grad ? bias_grad_##SFX : bias_add_##SFX;
#define MD_INT_CASE(ENUM, SFX, T, UT, LO, HI)                                 \
  case ENUM: return grad ? bias_grad_##SFX : bias_add_##SFX;
  switch (dtype) {
    MD_FLOAT_TYPES(MD_FLOAT_CASE)
    MD_INT_TYPES(MD_INT_CASE)
    default:
      return NULL;
  }
#undef MD_FLOAT_CASE
#undef MD_INT_CASE
}

static void md_bias_run(void* arg, SP_Stream stream) {
  (void)stream;
  md_bias_task* t = arg;
  t->fn(t);
}

void md_compute_bias_add(void* kernel, TF_OpKernelContext* ctx) {
  md_shape xs, bs;
  TF_Tensor* x = md_get_input(ctx, 0, &xs);
  TF_Tensor* b = x ? md_get_input(ctx, 1, &bs) : NULL;
  TF_Tensor* y = NULL;
  if (b == NULL) goto done;

  TF_DataType dtype = TF_TensorType(x);
  md_bias_fn fn = md_select_bias(dtype, 0);
  if (fn == NULL || TF_TensorType(b) != dtype) {
    md_fail(ctx, TF_INVALID_ARGUMENT, "BiasAdd: unsupported dtypes %d and %d",
            (int)dtype, (int)TF_TensorType(b));
    goto done;
  }
  int64_t outer, inner;
  int c = md_bias_layout(ctx, kernel, &xs, &outer, &inner);
  if (c < 0) goto done;
  if (bs.rank != 1 || bs.dims[0] != xs.dims[c]) {
    char sx[MD_SHAPE_STR_SIZE], sb[MD_SHAPE_STR_SIZE];
    md_fail(ctx, TF_INVALID_ARGUMENT, "BiasAdd: must provide as many biases as "
            "the channel dimension of the input: bias %s vs. value %s",
            md_shape_str(&bs, sb, sizeof(sb)), md_shape_str(&xs, sx, sizeof(sx)));
    goto done;
  }
  y = md_allocate_output(ctx, 0, dtype, &xs);
  if (y == NULL || md_num_elements(&xs) == 0) goto done;

  md_bias_task* task = md_task_alloc(ctx, sizeof(*task));
  if (task == NULL) goto done;
  task->fn = fn;
  task->x = TF_TensorData(x);
  task->bias = TF_TensorData(b);
  task->y = TF_TensorData(y);
  task->outer = outer;
  task->channels = xs.dims[c];
  task->inner = inner;
  md_enqueue_small(ctx, md_bias_run, task, md_num_elements(&xs));

done:
  md_delete_tensors(x, b, y, NULL);
}

void md_compute_bias_add_grad(void* kernel, TF_OpKernelContext* ctx) {
  md_shape gs;
  TF_Tensor* g = md_get_input(ctx, 0, &gs);
  TF_Tensor* y = NULL;
  if (g == NULL) return;

  TF_DataType dtype = TF_TensorType(g);
  md_bias_fn fn = md_select_bias(dtype, 1);
  if (fn == NULL) {
    md_fail(ctx, TF_INVALID_ARGUMENT, "BiasAddGrad: unsupported dtype %d",
            (int)dtype);
    goto done;
  }
  int64_t outer, inner;
  int c = md_bias_layout(ctx, kernel, &gs, &outer, &inner);
  if (c < 0) goto done;
  md_shape ys = {1, {gs.dims[c]}};
  y = md_allocate_output(ctx, 0, dtype, &ys);
  if (y == NULL || ys.dims[0] == 0) goto done;

  md_bias_task* task =
      md_task_alloc(ctx, sizeof(*task) + (size_t)ys.dims[0] * sizeof(double));
  if (task == NULL) goto done;
  task->fn = fn;
  task->x = TF_TensorData(g);
  task->y = TF_TensorData(y);
  task->outer = outer;
  task->channels = ys.dims[0];
  task->inner = inner;
  md_enqueue(ctx, md_bias_run, task);

done:
  md_delete_tensors(g, y, NULL, NULL);
}
