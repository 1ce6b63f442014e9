/* Host reference device: helpers shared by the kernels (see kernel_util.h). */
#include "kernel_util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "stream.h"
#include "trace.h"

md_shape md_shape_of(const TF_Tensor* t) {
  md_shape shape;
  shape.rank = TF_NumDims(t);
  if (shape.rank < 0) shape.rank = 0;
  if (shape.rank > TF_MAX_DIMS) shape.rank = TF_MAX_DIMS;
  for (int i = 0; i < shape.rank; ++i) shape.dims[i] = TF_Dim(t, i);
  return shape;
}

int64_t md_num_elements(const md_shape* shape) {
  int64_t n = 1;
  for (int i = 0; i < shape->rank; ++i) n *= shape->dims[i];
  return n;
}

void md_row_major_strides(const md_shape* shape, int64_t* strides) {
  int64_t stride = 1;
  for (int i = shape->rank - 1; i >= 0; --i) {
    strides[i] = stride;
    stride *= shape->dims[i];
  }
}

int md_normalize_axis(int64_t axis, int rank, int* out) {
  if (axis < -rank || axis >= rank) return 0;
  *out = (int)(axis < 0 ? axis + rank : axis);
  return 1;
}

const char* md_shape_str(const md_shape* shape, char* buf, size_t size) {
  size_t used = 0;
  used += (size_t)snprintf(buf, size, "[");
  for (int i = 0; i < shape->rank && used < size; ++i) {
    used += (size_t)snprintf(buf + used, size - used, i ? ",%lld" : "%lld",
                             (long long)shape->dims[i]);
  }
  if (used < size) snprintf(buf + used, size - used, "]");
  return buf;
}

/* Builds a status with a formatted message. */
static TF_Status* md_vstatus(TF_Code code, const char* fmt, va_list args) {
  char message[1024];
  vsnprintf(message, sizeof(message), fmt, args);
  TF_Status* status = TF_NewStatus();
  TF_SetStatus(status, code, message);
  return status;
}

void md_fail(TF_OpKernelContext* ctx, TF_Code code, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  TF_Status* status = md_vstatus(code, fmt, args);
  va_end(args);
  TF_OpKernelContext_Failure(ctx, status);
  TF_DeleteStatus(status);
}

void md_construction_fail(TF_OpKernelConstruction* ctx, TF_Code code,
                          const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  TF_Status* status = md_vstatus(code, fmt, args);
  va_end(args);
  TF_OpKernelConstruction_Failure(ctx, status);
  TF_DeleteStatus(status);
}

TF_Tensor* md_get_input(TF_OpKernelContext* ctx, int i, md_shape* shape) {
  TF_Tensor* t = NULL;
  TF_Status* status = TF_NewStatus();
  TF_GetInput(ctx, i, &t, status);
  if (TF_GetCode(status) != TF_OK || t == NULL) {
    if (TF_GetCode(status) == TF_OK) {
      TF_SetStatus(status, TF_INTERNAL, "missing input tensor");
    }
    TF_OpKernelContext_Failure(ctx, status);
    TF_DeleteStatus(status);
    TF_DeleteTensor(t);
    return NULL;
  }
  TF_DeleteStatus(status);
  if (shape != NULL) *shape = md_shape_of(t);
  return t;
}

/* `t` from an allocation that set `status`: returned, or NULL after failing
 * the call. Deletes `status`. */
static TF_Tensor* md_allocated(TF_OpKernelContext* ctx, TF_Tensor* t, TF_Status* status) {
  if (TF_GetCode(status) != TF_OK || t == NULL) {
    if (TF_GetCode(status) == TF_OK) {
      TF_SetStatus(status, TF_INTERNAL, "output allocation returned NULL");
    }
    TF_OpKernelContext_Failure(ctx, status);
    TF_DeleteTensor(t);
    t = NULL;
  }
  TF_DeleteStatus(status);
  return t;
}

TF_Tensor* md_allocate_output(TF_OpKernelContext* ctx, int i, TF_DataType dtype,
                              const md_shape* shape) {
  size_t len = (size_t)md_num_elements(shape) * TF_DataTypeSize(dtype);
  TF_Status* status = TF_NewStatus();
  return md_allocated(ctx, TF_AllocateOutput(ctx, i, dtype, shape->dims, shape->rank, len,
                                             status), status);
}

TF_Tensor* md_forward_or_allocate_output(TF_OpKernelContext* ctx, int input, int i,
                                         const md_shape* shape) {
  TF_Status* status = TF_NewStatus();
  return md_allocated(ctx, TF_ForwardInputOrAllocateOutput(ctx, &input, 1, i, shape->dims,
                                                           shape->rank, NULL, status),
                      status);
}

int md_read_host_ints(TF_OpKernelContext* ctx, const TF_Tensor* t,
                      const char* what, int64_t* values, int max) {
  TF_DataType dtype = TF_TensorType(t);
  if (TF_NumDims(t) > 1) {
    md_fail(ctx, TF_INVALID_ARGUMENT, "%.*s: %s must be a scalar or a vector, "
            "got rank %d", MD_OP(ctx), what, TF_NumDims(t));
    return -1;
  }
  int64_t n = TF_TensorElementCount(t);
  if (n > max) {
    md_fail(ctx, TF_INVALID_ARGUMENT, "%.*s: %s has %lld entries, at most %d "
            "are supported", MD_OP(ctx), what, (long long)n, max);
    return -1;
  }
  if (dtype != TF_INT32 && dtype != TF_INT64 && dtype != TF_INT16) {
    md_fail(ctx, TF_INVALID_ARGUMENT, "%.*s: %s must be int16, int32 or "
            "int64", MD_OP(ctx), what);
    return -1;
  }
  const void* data = TF_TensorData(t);  /* host memory: maybe misaligned */
  for (int64_t i = 0; i < n; ++i) values[i] = md_index_at(data, dtype, i);
  return (int)n;
}

int md_read_host_scalar(TF_OpKernelContext* ctx, const TF_Tensor* t,
                        const char* what, int64_t* value) {
  if (TF_TensorElementCount(t) != 1) {
    md_fail(ctx, TF_INVALID_ARGUMENT, "%.*s: %s must be a scalar, got %lld "
            "values", MD_OP(ctx), what, (long long)TF_TensorElementCount(t));
    return 0;
  }
  return md_read_host_ints(ctx, t, what, value, 1) == 1;
}

int md_forward_input(TF_OpKernelContext* ctx, int i, const TF_Tensor* t) {
  TF_Status* status = TF_NewStatus();
  TF_SetOutput(ctx, i, t, status);
  int ok = TF_GetCode(status) == TF_OK;
  if (!ok) TF_OpKernelContext_Failure(ctx, status);
  TF_DeleteStatus(status);
  return ok;
}

TF_Tensor* md_allocate_temp(TF_OpKernelContext* ctx, size_t bytes) {
  int64_t dims[1] = {(int64_t)(bytes > 0 ? bytes : 1)};
  TF_Status* status = TF_NewStatus();
  TF_Tensor* t = TF_AllocateTemp(ctx, TF_UINT8, dims, 1, NULL, status);
  if (TF_GetCode(status) != TF_OK || t == NULL) {
    if (TF_GetCode(status) == TF_OK) {
      TF_SetStatus(status, TF_RESOURCE_EXHAUSTED, "scratch allocation failed");
    }
    TF_OpKernelContext_Failure(ctx, status);
    TF_DeleteTensor(t);
    t = NULL;
  }
  TF_DeleteStatus(status);
  return t;
}

void md_delete_tensors(TF_Tensor* a, TF_Tensor* b, TF_Tensor* c, TF_Tensor* d) {
  TF_DeleteTensor(a);
  TF_DeleteTensor(b);
  TF_DeleteTensor(c);
  TF_DeleteTensor(d);
}

/* md_enqueue / md_enqueue_small; work < 0: never inline. */
static int md_enqueue_work(TF_OpKernelContext* ctx, md_task_fn fn, void* arg,
                           int64_t work) {
  TF_Status* status = TF_NewStatus();
  SP_Stream stream = TF_GetStream(ctx, status);
  if (TF_GetCode(status) != TF_OK || stream == NULL) {
    if (TF_GetCode(status) == TF_OK) {
      TF_SetStatus(status, TF_INTERNAL, "kernel has no stream");
    }
    TF_OpKernelContext_Failure(ctx, status);
    TF_DeleteStatus(status);
    free(arg);
    return 0;
  }
  TF_DeleteStatus(status);
  TF_StringView op = TF_GetOpKernelName(ctx);
  const int rc = work < 0
      ? md_stream_enqueue_traced(stream, MD_TASK_KERNEL, fn, arg, op.data, (int)op.len, 0)
      : md_stream_enqueue_small(stream, fn, arg, op.data, (int)op.len, work);
  if (rc != 0) {
    md_fail(ctx, TF_RESOURCE_EXHAUSTED, "%.*s: cannot enqueue the kernel",
            MD_OP(ctx));
    return 0;
  }
  return 1;
}

int md_enqueue(TF_OpKernelContext* ctx, md_task_fn fn, void* arg) {
  return md_enqueue_work(ctx, fn, arg, -1);
}

int md_enqueue_small(TF_OpKernelContext* ctx, md_task_fn fn, void* arg, int64_t work) {
  return md_enqueue_work(ctx, fn, arg, work < 0 ? 0 : work);
}

void* md_task_alloc(TF_OpKernelContext* ctx, size_t bytes) {
  void* p = calloc(1, bytes);
  if (p == NULL) {
    md_fail(ctx, TF_RESOURCE_EXHAUSTED, "%.*s: out of memory", MD_OP(ctx));
  }
  return p;
}

/*** Errors found by the device work ***/

void md_where_of(TF_OpKernelContext* ctx, md_where* where) {
  TF_StringView device = TF_GetDeviceName(ctx);
  snprintf(where->text, sizeof(where->text), "%.*s on %.*s", MD_OP(ctx),
           (int)device.len, device.data);
}

void md_task_error(SP_Stream stream, const md_where* where, TF_Code code,
                   const char* fmt, ...) {
  /* Every failure counts (the next event says ERROR); the stream keeps the
   * message of the first one only (md_stream_set_error). */
  char detail[512], message[768];
  va_list args;
  va_start(args, fmt);
  vsnprintf(detail, sizeof(detail), fmt, args);
  va_end(args);
  snprintf(message, sizeof(message), "%s: %s", where->text, detail);
  md_stream_set_error(stream, code, message);
}

/*** Attributes ***/

/* 1 if attribute `name` exists (status checked). */
static int md_has_attr(TF_OpKernelConstruction* ctx, const char* name) {
  TF_Status* status = TF_NewStatus();
  int has = TF_OpKernelConstruction_HasAttr(ctx, name, status) &&
            TF_GetCode(status) == TF_OK;
  TF_DeleteStatus(status);
  return has;
}

/* Fails construction with `status` if it is an error; returns 1 if OK. */
static int md_attr_ok(TF_OpKernelConstruction* ctx, TF_Status* status) {
  int ok = TF_GetCode(status) == TF_OK;
  if (!ok) TF_OpKernelConstruction_Failure(ctx, status);
  TF_DeleteStatus(status);
  return ok;
}

int md_get_int_attr(TF_OpKernelConstruction* ctx, const char* name,
                    int64_t* out) {
  if (!md_has_attr(ctx, name)) return 1;
  TF_Status* status = TF_NewStatus();
  int64_t value = 0;
  TF_OpKernelConstruction_GetAttrInt64(ctx, name, &value, status);
  if (TF_GetCode(status) == TF_OK) *out = value;
  return md_attr_ok(ctx, status);
}

int md_get_float_attr(TF_OpKernelConstruction* ctx, const char* name,
                      float* out) {
  if (!md_has_attr(ctx, name)) return 1;
  TF_Status* status = TF_NewStatus();
  float value = 0;
  TF_OpKernelConstruction_GetAttrFloat(ctx, name, &value, status);
  if (TF_GetCode(status) == TF_OK) *out = value;
  return md_attr_ok(ctx, status);
}

int md_get_string_attr(TF_OpKernelConstruction* ctx, const char* name,
                       char* buf, size_t size) {
  if (!md_has_attr(ctx, name)) return 1;
  TF_Status* status = TF_NewStatus();
  int32_t list_size = 0, total = 0;
  TF_OpKernelConstruction_GetAttrSize(ctx, name, &list_size, &total, status);
  if (TF_GetCode(status) == TF_OK && (total < 0 || (size_t)total >= size)) {
    char msg[160];
    snprintf(msg, sizeof(msg), "%.*s: attribute '%s' is %d bytes long; this "
             "kernel takes at most %d", MD_CONSTRUCTION_OP(ctx), name,
             (int)total, (int)size - 1);
    TF_SetStatus(status, TF_INVALID_ARGUMENT, msg);
  }
  if (TF_GetCode(status) == TF_OK) {
    TF_OpKernelConstruction_GetAttrString(ctx, name, buf, size - 1, status);
    if (TF_GetCode(status) == TF_OK) buf[total] = '\0';
  }
  return md_attr_ok(ctx, status);
}

int md_get_int_list_attr(TF_OpKernelConstruction* ctx, const char* name,
                         int64_t* out, int max, int* count) {
  if (!md_has_attr(ctx, name)) return 1;
  TF_Status* status = TF_NewStatus();
  int32_t size = 0, total = 0;
  TF_OpKernelConstruction_GetAttrSize(ctx, name, &size, &total, status);
  if (TF_GetCode(status) == TF_OK && (size < 0 || size > max)) {
    char msg[160];
    snprintf(msg, sizeof(msg), "%.*s: attribute '%s' has %d entries; this "
             "kernel takes at most %d", MD_CONSTRUCTION_OP(ctx), name,
             (int)size, max);
    TF_SetStatus(status, TF_INVALID_ARGUMENT, msg);
  }
  if (TF_GetCode(status) == TF_OK) {
    TF_OpKernelConstruction_GetAttrInt64List(ctx, name, out, size, status);
    if (TF_GetCode(status) == TF_OK) *count = size;
  }
  return md_attr_ok(ctx, status);
}

int md_get_bool_attr(TF_OpKernelConstruction* ctx, const char* name,
                     int fallback) {
  TF_Status* status = TF_NewStatus();
  TF_Bool value = (TF_Bool)fallback;
  if (TF_OpKernelConstruction_HasAttr(ctx, name, status)) {
    TF_OpKernelConstruction_GetAttrBool(ctx, name, &value, status);
    if (TF_GetCode(status) != TF_OK) value = (TF_Bool)fallback;
  }
  TF_DeleteStatus(status);
  return value != 0;
}

/*** Windows ***/

int md_parse_padding(const char* text, md_padding* out) {
  if (strcmp(text, "VALID") == 0) {
    *out = MD_PAD_VALID;
  } else if (strcmp(text, "SAME") == 0) {
    *out = MD_PAD_SAME;
  } else if (strcmp(text, "EXPLICIT") == 0) {
    *out = MD_PAD_EXPLICIT;
  } else {
    return 0;
  }
  return 1;
}

int md_get_hw_attr(TF_OpKernelConstruction* ctx, const char* name, int nchw,
                   int64_t* h, int64_t* w) {
  int64_t v[4];
  int count = -1;
  if (!md_get_int_list_attr(ctx, name, v, 4, &count)) return 0;
  if (count < 0) return 1; /* absent */
  int hd = nchw ? 2 : 1, cd = nchw ? 1 : 3;
  const char* format = nchw ? "NCHW" : "NHWC";
  if (count != 4 || v[0] < 1 || v[1] < 1 || v[2] < 1 || v[3] < 1) {
    md_construction_fail(ctx, TF_INVALID_ARGUMENT, "%.*s: %s must have 4 "
                         "entries >= 1 (data_format %s)",
                         MD_CONSTRUCTION_OP(ctx), name, format);
    return 0;
  }
  if (v[0] != 1 || v[cd] != 1) {
    /* As TensorFlow: a valid request this implementation does not do. */
    md_construction_fail(ctx, TF_UNIMPLEMENTED, "%.*s: %s other than 1 in the "
                         "batch and channel dims are not supported; got "
                         "[%lld, %lld, %lld, %lld] (data_format %s)",
                         MD_CONSTRUCTION_OP(ctx), name, (long long)v[0],
                         (long long)v[1], (long long)v[2], (long long)v[3],
                         format);
    return 0;
  }
  *h = v[hd];
  *w = v[hd + 1];
  return 1;
}

int md_get_window_attrs(TF_OpKernelConstruction* ctx, md_window_attrs* w) {
  char padding[16] = "", format[16] = "NHWC";
  int64_t pads[8] = {0};
  int num_pads = 0;
  if (!md_get_string_attr(ctx, "data_format", format, sizeof(format)) ||
      !md_get_string_attr(ctx, "padding", padding, sizeof(padding)) ||
      !md_get_int_list_attr(ctx, "explicit_paddings", pads, 8, &num_pads)) {
    return 0;
  }
  w->nchw = strcmp(format, "NCHW") == 0;
  if (!w->nchw && strcmp(format, "NHWC") != 0) {
    md_construction_fail(ctx, TF_UNIMPLEMENTED, "%.*s: data_format %s is not "
                         "supported on this device; use NHWC or NCHW",
                         MD_CONSTRUCTION_OP(ctx), format);
    return 0;
  }
  w->stride_h = w->stride_w = 1;
  if (!md_get_hw_attr(ctx, "strides", w->nchw, &w->stride_h, &w->stride_w)) return 0;
  if (!md_parse_padding(padding, &w->padding)) {
    md_construction_fail(ctx, TF_INVALID_ARGUMENT, "%.*s: unknown padding '%s'",
                         MD_CONSTRUCTION_OP(ctx), padding);
    return 0;
  }
  int hd = w->nchw ? 2 : 1;
  for (int i = 0; i < 8 && w->padding == MD_PAD_EXPLICIT; ++i) {
    int spatial = i / 2 == hd || i / 2 == hd + 1;
    if (num_pads != 8 || pads[i] < 0 || (!spatial && pads[i] != 0)) {
      md_construction_fail(ctx, TF_INVALID_ARGUMENT, "%.*s: explicit_paddings "
                           "must be non-negative: 8 entries, zero for N and C",
                           MD_CONSTRUCTION_OP(ctx));
      return 0;
    }
  }
  for (int i = 0; i < 4; ++i) w->explicit_pad[i] = pads[2 * hd + i];
  return 1;
}

int md_window_dim(md_padding padding, int64_t in, int64_t ksize,
                  int64_t stride, int64_t dilation, int64_t pad_before,
                  int64_t pad_after, int64_t* out, int64_t* pad) {
  int64_t eff = (ksize - 1) * dilation + 1;
  switch (padding) {
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

/*** Broadcasting ***/

int md_broadcast_shapes(const md_shape* shapes, int n, md_shape* out) {
  out->rank = 0;
  for (int k = 0; k < n; ++k) {
    if (shapes[k].rank > out->rank) out->rank = shapes[k].rank;
  }
  for (int i = 0; i < out->rank; ++i) {
    int64_t d = 1;
    for (int k = 0; k < n; ++k) {
      /* Align from the right; missing leading dims act as 1. */
      int ki = i - (out->rank - shapes[k].rank);
      int64_t dk = ki >= 0 ? shapes[k].dims[ki] : 1;
      if (dk == d || dk == 1) continue;
      if (d != 1) return 0;
      d = dk;
    }
    out->dims[i] = d;
  }
  return 1;
}

void md_fail_broadcast(TF_OpKernelContext* ctx, const md_shape* a, const md_shape* b) {
  char sa[MD_SHAPE_STR_SIZE], sb[MD_SHAPE_STR_SIZE];
  md_fail(ctx, TF_INVALID_ARGUMENT, "%.*s: incompatible shapes for broadcasting: %s and %s",
          MD_OP(ctx), md_shape_str(a, sa, sizeof(sa)), md_shape_str(b, sb, sizeof(sb)));
}

void md_bcast_plan(const md_shape* shapes, int n, const md_shape* out,
                   md_bcast* b) {
  int64_t strides[MD_BCAST_MAX_INPUTS][TF_MAX_DIMS];
  for (int k = 0; k < n; ++k) {
    int64_t stride = 1;
    for (int i = out->rank - 1; i >= 0; --i) {
      int ki = i - (out->rank - shapes[k].rank);
      int64_t d = ki >= 0 ? shapes[k].dims[ki] : 1;
      strides[k][i] = d == 1 ? 0 : stride;
      stride *= d;
    }
  }
  b->num_inputs = n;
  b->rank = 0;
  for (int i = 0; i < out->rank; ++i) {
    int64_t d = out->dims[i];
    if (d == 1) continue;
    int last = b->rank - 1;
    /* Merge into the previous dim when every input is contiguous across the
     * two (this also merges runs of broadcast dims, stride 0). */
    int merge = last >= 0;
    for (int k = 0; k < n && merge; ++k) {
      merge = b->strides[k][last] == strides[k][i] * d;
    }
    if (merge) {
      b->dims[last] *= d;
      for (int k = 0; k < n; ++k) b->strides[k][last] = strides[k][i];
      continue;
    }
    b->dims[b->rank] = d;
    for (int k = 0; k < n; ++k) b->strides[k][b->rank] = strides[k][i];
    b->rank++;
  }
}

void md_bcast_walk(const md_bcast* b, md_bcast_row_fn fn, void* arg) {
  int64_t offsets[MD_BCAST_MAX_INPUTS] = {0};
  int64_t inner[MD_BCAST_MAX_INPUTS] = {0};
  if (b->rank == 0) { /* a single element */
    fn(arg, offsets, inner, 0, 1);
    return;
  }
  int last = b->rank - 1;
  int64_t n = b->dims[last];
  for (int k = 0; k < b->num_inputs; ++k) inner[k] = b->strides[k][last];
  int64_t idx[TF_MAX_DIMS] = {0};
  int64_t out = 0;
  for (;;) {
    fn(arg, offsets, inner, out, n);
    out += n;
    /* Advance the counter over the outer dims. */
    int d = last - 1;
    for (; d >= 0; --d) {
      for (int k = 0; k < b->num_inputs; ++k) offsets[k] += b->strides[k][d];
      if (++idx[d] < b->dims[d]) break;
      for (int k = 0; k < b->num_inputs; ++k) {
        offsets[k] -= b->strides[k][d] * b->dims[d];
      }
      idx[d] = 0;
    }
    if (d < 0) break;
  }
}

/*** Strided views ***/

void md_view_simplify(md_view* v) {
  int rank = 0;
  for (int i = 0; i < v->rank; ++i) {
    if (v->dims[i] == 0) { /* empty: keep one 0 dim */
      v->rank = 1;
      v->dims[0] = 0;
      return;
    }
  }
  for (int i = 0; i < v->rank; ++i) {
    int64_t d = v->dims[i];
    if (d == 1) continue;
    int last = rank - 1;
    if (last >= 0 && v->src_strides[last] == v->src_strides[i] * d &&
        v->dst_strides[last] == v->dst_strides[i] * d) {
      v->dims[last] *= d;
      v->src_strides[last] = v->src_strides[i];
      v->dst_strides[last] = v->dst_strides[i];
      continue;
    }
    v->dims[rank] = d;
    v->src_strides[rank] = v->src_strides[i];
    v->dst_strides[rank] = v->dst_strides[i];
    rank++;
  }
  if (rank == 0) { /* one element */
    rank = 1;
    v->dims[0] = 1;
    v->src_strides[0] = 1;
    v->dst_strides[0] = 1;
  }
  v->rank = rank;
}

/* dst[i * ds] = src[i * ss] for i in [0, n); strides in elements. */
static void md_row_copy(char* dst, int64_t ds, const char* src, int64_t ss,
                        int64_t n, size_t esize) {
  if (ds == 1 && ss == 1) {
    memcpy(dst, src, (size_t)n * esize);
    return;
  }
#define MD_COPY(T)                                                            \
  for (int64_t i = 0; i < n; ++i) ((T*)dst)[i * ds] = ((const T*)src)[i * ss]; \
  return;
  switch (esize) {
    case 1: MD_COPY(uint8_t)
    case 2: MD_COPY(uint16_t)
    case 4: MD_COPY(uint32_t)
    case 8: MD_COPY(uint64_t)
    default:
      for (int64_t i = 0; i < n; ++i) {
        memcpy(dst + i * ds * (int64_t)esize, src + i * ss * (int64_t)esize,
               esize);
      }
  }
#undef MD_COPY
}

void md_view_copy(const md_view* v, char* dst, const char* src, size_t esize) {
  if (v->rank <= 0) return;
  for (int i = 0; i < v->rank; ++i) {
    if (v->dims[i] == 0) return;
  }
  int last = v->rank - 1;
  int64_t n = v->dims[last];
  int64_t idx[MD_MAX_VIEW_DIMS] = {0};
  int64_t so = 0, dof = 0; /* element offsets of the current row */
  int64_t es = (int64_t)esize;
  for (;;) {
    md_row_copy(dst + dof * es, v->dst_strides[last], src + so * es,
                v->src_strides[last], n, esize);
    int d = last - 1;
    for (; d >= 0; --d) {
      so += v->src_strides[d];
      dof += v->dst_strides[d];
      if (++idx[d] < v->dims[d]) break;
      so -= v->src_strides[d] * v->dims[d];
      dof -= v->dst_strides[d] * v->dims[d];
      idx[d] = 0;
    }
    if (d < 0) break;
  }
}

typedef struct md_view_task {
  const char* src;
  char* dst;
  size_t esize;
  char* zero;
  int64_t zero_bytes;
  md_view view;
} md_view_task;

static void md_view_run(void* arg, SP_Stream stream) {
  (void)stream;
  md_view_task* t = arg;
  if (t->zero != NULL) memset(t->zero, 0, (size_t)t->zero_bytes);
  md_view_copy(&t->view, t->dst, t->src, t->esize);
}

int md_enqueue_view_copy(TF_OpKernelContext* ctx, md_view* v, char* dst,
                         const char* src, size_t esize, char* zero,
                         int64_t zero_bytes) {
  md_view_task* task = md_task_alloc(ctx, sizeof(*task));
  if (task == NULL) return 0;
  task->src = src;
  task->dst = dst;
  task->esize = esize;
  task->zero = zero;
  task->zero_bytes = zero_bytes;
  task->view = *v;
  md_view_simplify(&task->view);
  return md_enqueue(ctx, md_view_run, task);
}

void md_fill_bytes(char* dst, const void* value, int64_t n, size_t esize) {
  if (n <= 0) return;
  /* Write the first element, then double the filled prefix with memcpy. */
  memcpy(dst, value, esize);
  int64_t done = 1;
  while (done < n) {
    int64_t m = done < n - done ? done : n - done;
    memcpy(dst + done * (int64_t)esize, dst, (size_t)m * esize);
    done += m;
  }
}
