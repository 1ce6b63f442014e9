/* Host reference device: Conv2D (NHWC input, HWIO filter).
 *
 * Padding follows TensorFlow: VALID (none), SAME (output = ceil(in / stride),
 * the total padding split with the smaller half first) or EXPLICIT
 * (explicit_paddings). The loops are a direct convolution: for each output
 * pixel, accumulate every filter tap into a row of output-channel
 * accumulators (float for half/bfloat16, double for float32/64). */
#include <stdlib.h>
#include <string.h>

#include "kernel_list.h"
#include "kernel_util.h"

typedef enum md_padding { MD_PAD_VALID, MD_PAD_SAME, MD_PAD_EXPLICIT } md_padding;

/* Kernel state: the attributes, validated once. */
typedef struct md_conv_kernel {
  int64_t stride_h, stride_w;
  int64_t dilation_h, dilation_w;
  md_padding padding;
  int64_t explicit_pad[4]; /* top, bottom, left, right */
} md_conv_kernel;

/* Reads list(int) attribute `name` of exactly `want` entries into `out`;
 * keeps `out` when the attribute is absent. Returns 0 after failing. */
static int md_read_int_list(TF_OpKernelConstruction* ctx, const char* name,
                            int64_t* out, int want) {
  TF_Status* status = TF_NewStatus();
  int ok = 1;
  if (TF_OpKernelConstruction_HasAttr(ctx, name, status)) {
    int32_t size = 0, total = 0;
    TF_OpKernelConstruction_GetAttrSize(ctx, name, &size, &total, status);
    if (TF_GetCode(status) == TF_OK && size == 0 && want == 8) {
      /* explicit_paddings may be empty unless padding is EXPLICIT. */
    } else if (TF_GetCode(status) == TF_OK && size != want) {
      md_construction_fail(ctx, TF_INVALID_ARGUMENT, "Conv2D: %s must have %d "
                           "entries, got %d", name, want, (int)size);
      ok = 0;
    } else if (TF_GetCode(status) == TF_OK) {
      TF_OpKernelConstruction_GetAttrInt64List(ctx, name, out, want, status);
    }
  }
  if (ok && TF_GetCode(status) != TF_OK) {
    TF_OpKernelConstruction_Failure(ctx, status);
    ok = 0;
  }
  TF_DeleteStatus(status);
  return ok;
}

/* Reads a string attribute into buf (NUL-terminated); "" when absent. */
static void md_read_string(TF_OpKernelConstruction* ctx, const char* name,
                           char* buf, size_t size) {
  TF_Status* status = TF_NewStatus();
  buf[0] = '\0';
  if (TF_OpKernelConstruction_HasAttr(ctx, name, status)) {
    int32_t list_size = 0, total = 0;
    TF_OpKernelConstruction_GetAttrSize(ctx, name, &list_size, &total, status);
    if (TF_GetCode(status) == TF_OK && total >= 0 && (size_t)total < size) {
      TF_OpKernelConstruction_GetAttrString(ctx, name, buf, size - 1, status);
      if (TF_GetCode(status) == TF_OK) buf[total] = '\0';
      else buf[0] = '\0';
    }
  }
  TF_DeleteStatus(status);
}

void* md_create_conv2d(TF_OpKernelConstruction* ctx) {
  int64_t strides[4] = {1, 1, 1, 1}, dilations[4] = {1, 1, 1, 1};
  int64_t explicit_pads[8] = {0};
  char padding[16], format[16];
  if (!md_read_int_list(ctx, "strides", strides, 4) ||
      !md_read_int_list(ctx, "dilations", dilations, 4) ||
      !md_read_int_list(ctx, "explicit_paddings", explicit_pads, 8)) {
    return NULL;
  }
  md_read_string(ctx, "padding", padding, sizeof(padding));
  md_read_string(ctx, "data_format", format, sizeof(format));

  if (format[0] != '\0' && strcmp(format, "NHWC") != 0) {
    md_construction_fail(ctx, TF_UNIMPLEMENTED, "Conv2D: only data_format "
                         "NHWC is implemented, got %s", format);
    return NULL;
  }
  if (strides[0] != 1 || strides[3] != 1 || strides[1] < 1 || strides[2] < 1) {
    md_construction_fail(ctx, TF_INVALID_ARGUMENT, "Conv2D: strides must be "
                         "[1, sh, sw, 1] with sh, sw >= 1");
    return NULL;
  }
  if (dilations[0] != 1 || dilations[3] != 1 || dilations[1] < 1 ||
      dilations[2] < 1) {
    md_construction_fail(ctx, TF_INVALID_ARGUMENT, "Conv2D: dilations must be "
                         "[1, dh, dw, 1] with dh, dw >= 1");
    return NULL;
  }
  md_padding pad;
  if (strcmp(padding, "VALID") == 0) {
    pad = MD_PAD_VALID;
  } else if (strcmp(padding, "SAME") == 0) {
    pad = MD_PAD_SAME;
  } else if (strcmp(padding, "EXPLICIT") == 0) {
    pad = MD_PAD_EXPLICIT;
    for (int i = 0; i < 8; ++i) {
      if (explicit_pads[i] < 0 || ((i < 2 || i > 5) && explicit_pads[i] != 0)) {
        md_construction_fail(ctx, TF_INVALID_ARGUMENT, "Conv2D: explicit_paddings "
                             "must be non-negative and zero for N and C");
        return NULL;
      }
    }
  } else {
    md_construction_fail(ctx, TF_INVALID_ARGUMENT, "Conv2D: unknown padding '%s'",
                         padding);
    return NULL;
  }

  md_conv_kernel* k = malloc(sizeof(*k));
  if (k == NULL) {
    md_construction_fail(ctx, TF_RESOURCE_EXHAUSTED, "Conv2D: out of memory");
    return NULL;
  }
  k->stride_h = strides[1];
  k->stride_w = strides[2];
  k->dilation_h = dilations[1];
  k->dilation_w = dilations[2];
  k->padding = pad;
  k->explicit_pad[0] = explicit_pads[2];
  k->explicit_pad[1] = explicit_pads[3];
  k->explicit_pad[2] = explicit_pads[4];
  k->explicit_pad[3] = explicit_pads[5];
  return k;
}

void md_delete_conv2d(void* kernel) { free(kernel); }

/* Output size and leading padding of one spatial dim; returns 0 if the
 * output would be negative. */
static int md_conv_dim(const md_conv_kernel* k, int64_t in, int64_t ksize,
                       int64_t stride, int64_t dilation, int64_t pad_before,
                       int64_t pad_after, int64_t* out, int64_t* pad) {
  int64_t eff = (ksize - 1) * dilation + 1;
  switch (k->padding) {
    case MD_PAD_SAME: {
      *out = (in + stride - 1) / stride;
      int64_t total = (*out - 1) * stride + eff - in;
      if (total < 0) total = 0;
      *pad = total / 2;
      return 1;
    }
    case MD_PAD_EXPLICIT:
      in += pad_before + pad_after;
      *pad = pad_before;
      break;
    case MD_PAD_VALID:
      *pad = 0;
      break;
  }
  if (in < eff) {
    *out = 0;
    /* As TensorFlow: an empty output is fine, a negative one an error. */
    return (in - eff + stride) / stride >= 0;
  }
  *out = (in - eff) / stride + 1;
  return 1;
}

typedef struct md_conv_task md_conv_task;
typedef void (*md_conv_fn)(const md_conv_task* t);

struct md_conv_task {
  md_conv_fn fn;
  const void* x;
  const void* f;
  void* y;
  int64_t n, h, w, c;    /* input */
  int64_t kh, kw, co;    /* filter (kh, kw, c, co) */
  int64_t oh, ow;        /* output */
  int64_t sh, sw, dh, dw, pad_top, pad_left;
  _Alignas(16) unsigned char acc[]; /* co accumulators */
};

#define MD_CONV(ENUM, SFX, ST, CT, AT)                                        \
  static void conv_##SFX(const md_conv_task* t) {                             \
    const ST* x = t->x;                                                       \
    const ST* f = t->f;                                                       \
    ST* y = t->y;                                                             \
    AT* acc = (AT*)(void*)t->acc;                                             \
    for (int64_t b = 0; b < t->n; ++b)                                        \
      for (int64_t oy = 0; oy < t->oh; ++oy)                                  \
        for (int64_t ox = 0; ox < t->ow; ++ox) {                              \
          for (int64_t o = 0; o < t->co; ++o) acc[o] = 0;                     \
          for (int64_t ky = 0; ky < t->kh; ++ky) {                            \
            int64_t iy = oy * t->sh - t->pad_top + ky * t->dh;                \
            if (iy < 0 || iy >= t->h) continue;                               \
            for (int64_t kx = 0; kx < t->kw; ++kx) {                          \
              int64_t ix = ox * t->sw - t->pad_left + kx * t->dw;             \
              if (ix < 0 || ix >= t->w) continue;                             \
              const ST* xp = x + ((b * t->h + iy) * t->w + ix) * t->c;        \
              const ST* fp = f + (ky * t->kw + kx) * t->c * t->co;            \
              for (int64_t ci = 0; ci < t->c; ++ci) {                         \
                AT xv = (AT)md_load_##SFX(xp[ci]);                            \
                const ST* frow = fp + ci * t->co;                             \
                for (int64_t o = 0; o < t->co; ++o) {                         \
                  acc[o] += xv * (AT)md_load_##SFX(frow[o]);                  \
                }                                                             \
              }                                                               \
            }                                                                 \
          }                                                                   \
          ST* yp = y + ((b * t->oh + oy) * t->ow + ox) * t->co;               \
          for (int64_t o = 0; o < t->co; ++o) yp[o] = md_store_##SFX((CT)acc[o]); \
        }                                                                     \
  }
MD_FLOAT_TYPES(MD_CONV)

static md_conv_fn md_select_conv(TF_DataType dtype) {
#define MD_CASE(ENUM, SFX, ST, CT, AT)                                        \
  case ENUM:                                                                  \
    return conv_##SFX;
  switch (dtype) {
    MD_FLOAT_TYPES(MD_CASE)
    default:
      return NULL;
  }
#undef MD_CASE
}

static void md_conv_run(void* arg, SP_Stream stream) {
  (void)stream;
  md_conv_task* t = arg;
  t->fn(t);
}

void md_compute_conv2d(void* kernel, TF_OpKernelContext* ctx) {
  const md_conv_kernel* k = kernel;
  md_shape xs, fs;
  TF_Tensor* x = md_get_input(ctx, 0, &xs);
  TF_Tensor* f = x ? md_get_input(ctx, 1, &fs) : NULL;
  TF_Tensor* y = NULL;
  if (f == NULL) goto done;
  if (k == NULL) {
    md_fail(ctx, TF_INTERNAL, "Conv2D: kernel state missing");
    goto done;
  }

  TF_DataType dtype = TF_TensorType(x);
  md_conv_fn fn = md_select_conv(dtype);
  char sx[MD_SHAPE_STR_SIZE], sf[MD_SHAPE_STR_SIZE];
  if (fn == NULL || TF_TensorType(f) != dtype) {
    md_fail(ctx, TF_INVALID_ARGUMENT, "Conv2D: unsupported dtypes %d and %d",
            (int)dtype, (int)TF_TensorType(f));
    goto done;
  }
  if (xs.rank != 4 || fs.rank != 4 || xs.dims[3] != fs.dims[2]) {
    md_fail(ctx, TF_INVALID_ARGUMENT, "Conv2D: input %s (NHWC) and filter %s "
            "(HWIO) must be 4-d with matching input channels",
            md_shape_str(&xs, sx, sizeof(sx)), md_shape_str(&fs, sf, sizeof(sf)));
    goto done;
  }
  int64_t oh, ow, pad_top, pad_left;
  if (!md_conv_dim(k, xs.dims[1], fs.dims[0], k->stride_h, k->dilation_h,
                   k->explicit_pad[0], k->explicit_pad[1], &oh, &pad_top) ||
      !md_conv_dim(k, xs.dims[2], fs.dims[1], k->stride_w, k->dilation_w,
                   k->explicit_pad[2], k->explicit_pad[3], &ow, &pad_left)) {
    md_fail(ctx, TF_INVALID_ARGUMENT, "Conv2D: the filter %s is larger than the "
            "padded input %s", md_shape_str(&fs, sf, sizeof(sf)),
            md_shape_str(&xs, sx, sizeof(sx)));
    goto done;
  }
  md_shape ys = {4, {xs.dims[0], oh, ow, fs.dims[3]}};
  y = md_allocate_output(ctx, 0, dtype, &ys);
  if (y == NULL || md_num_elements(&ys) == 0) goto done;

  md_conv_task* task = malloc(sizeof(*task) + (size_t)fs.dims[3] * sizeof(double));
  if (task == NULL) {
    md_fail(ctx, TF_RESOURCE_EXHAUSTED, "Conv2D: out of memory");
    goto done;
  }
  task->fn = fn;
  task->x = TF_TensorData(x);
  task->f = TF_TensorData(f);
  task->y = TF_TensorData(y);
  task->n = xs.dims[0];
  task->h = xs.dims[1];
  task->w = xs.dims[2];
  task->c = xs.dims[3];
  task->kh = fs.dims[0];
  task->kw = fs.dims[1];
  task->co = fs.dims[3];
  task->oh = oh;
  task->ow = ow;
  task->sh = k->stride_h;
  task->sw = k->stride_w;
  task->dh = k->dilation_h;
  task->dw = k->dilation_w;
  task->pad_top = pad_top;
  task->pad_left = pad_left;
  md_enqueue(ctx, md_conv_run, task);

done:
  md_delete_tensors(x, f, y, NULL);
}
