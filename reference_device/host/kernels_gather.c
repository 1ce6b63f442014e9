/* Host reference device: GatherV2, GatherNd and OneHot (every dtype).
 *
 * GatherV2 with batch_dims b and axis a sees params as
 * [batch, outer, N, inner] (batch = params dims [0, b), outer = dims [b, a),
 * N = dim a) and indices as [batch, count]:
 *     output[i, o, j, :] = params[i, o, indices[i, j], :]
 * Whether an index lies in [0, N) is known only to the device work, which
 * reads the indices: a bad one zero-fills its slice and reports
 * INVALID_ARGUMENT on the stream ("indices[1,0] = 7 is not in [0, 5)"), so
 * the error surfaces at the next synchronisation, as on TensorFlow's GPU
 * devices it surfaces asynchronously too.
 *
 * OneHot: output[o, d, i] = indices[o, i] == d ? on_value : off_value, with
 * the depth dim inserted at `axis` (-1: last). Out-of-range indices give a
 * row of off_value, as in TensorFlow. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernel_list.h"
#include "kernel_util.h"

/*** GatherV2 ***/

typedef struct md_gather_kernel {
  int64_t batch_dims;
} md_gather_kernel;

void* md_create_gather(TF_OpKernelConstruction* ctx) {
  md_gather_kernel* k = calloc(1, sizeof(*k));
  if (k == NULL) {
    md_construction_fail(ctx, TF_RESOURCE_EXHAUSTED, "GatherV2: out of memory");
    return NULL;
  }
  if (!md_get_int_attr(ctx, "batch_dims", &k->batch_dims)) {
    free(k);
    return NULL;
  }
  return k;
}

void md_delete_gather(void* kernel) { free(kernel); }

typedef struct md_gather_task {
  TF_DataType index_type;
  const char* params;
  const void* indices;
  char* out;
  int64_t batch, outer, n, inner_bytes, count;
  md_shape index_shape; /* for the message */
  md_where where;
} md_gather_task;

/* Formats the position of flat element `flat` of `shape` as "1,0". */
static void md_format_index(const md_shape* shape, int64_t flat, char* buf,
                            size_t size) {
  int64_t coord[TF_MAX_DIMS];
  for (int i = shape->rank - 1; i >= 0; --i) {
    int64_t d = shape->dims[i] > 0 ? shape->dims[i] : 1;
    coord[i] = flat % d;
    flat /= d;
  }
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < shape->rank && used < size; ++i) {
    used += (size_t)snprintf(buf + used, size - used, i ? ",%lld" : "%lld",
                             (long long)coord[i]);
  }
}

static void md_gather_run(void* arg, SP_Stream stream) {
  md_gather_task* t = arg;
  int64_t ib = t->inner_bytes;
  char* out = t->out;
  for (int64_t b = 0; b < t->batch; ++b) {
    for (int64_t o = 0; o < t->outer; ++o) {
      const char* src = t->params + (b * t->outer + o) * t->n * ib;
      for (int64_t j = 0; j < t->count; ++j, out += ib) {
        int64_t flat = b * t->count + j;
        int64_t idx = md_index_at(t->indices, t->index_type, flat);
        if (idx >= 0 && idx < t->n) {
          memcpy(out, src + idx * ib, (size_t)ib);
          continue;
        }
        memset(out, 0, (size_t)ib);
        if (!md_stream_has_error(stream)) {
          char pos[MD_SHAPE_STR_SIZE];
          md_format_index(&t->index_shape, flat, pos, sizeof(pos));
          md_task_error(stream, &t->where, TF_INVALID_ARGUMENT,
                        "indices[%s] = %lld is not in [0, %lld)", pos,
                        (long long)idx, (long long)t->n);
        }
      }
    }
  }
}

void md_compute_gather(void* kernel, TF_OpKernelContext* ctx) {
  const md_gather_kernel* k = kernel;
  md_shape ps, is;
  TF_Tensor* params = md_get_input(ctx, 0, &ps);
  TF_Tensor* indices = params ? md_get_input(ctx, 1, &is) : NULL;
  TF_Tensor* axis_t = indices ? md_get_input(ctx, 2, NULL) : NULL;
  TF_Tensor* y = NULL;
  char sp[MD_SHAPE_STR_SIZE], si[MD_SHAPE_STR_SIZE];
  if (axis_t == NULL) goto done;

  if (!md_is_index_type(TF_TensorType(indices))) {
    md_fail(ctx, TF_INVALID_ARGUMENT, "GatherV2: unsupported indices dtype %d",
            (int)TF_TensorType(indices));
    goto done;
  }
  md_shape_str(&ps, sp, sizeof(sp));
  md_shape_str(&is, si, sizeof(si));
  int64_t axis64, batch_dims = k != NULL ? k->batch_dims : 0;
  int axis;
  if (!md_read_host_scalar(ctx, axis_t, "axis", &axis64)) goto done;
  if (ps.rank < 1) {
    md_fail(ctx, TF_INVALID_ARGUMENT, "GatherV2: params must be at least 1 "
            "dimensional, got shape %s", sp);
    goto done;
  }
  if (!md_normalize_axis(axis64, ps.rank, &axis)) {
    md_fail(ctx, TF_INVALID_ARGUMENT, "GatherV2: expected axis in the range "
            "[%d, %d), but got %lld", -ps.rank, ps.rank, (long long)axis64);
    goto done;
  }
  if (batch_dims < 0) batch_dims += is.rank;
  if (batch_dims < 0 || batch_dims > is.rank || batch_dims > axis) {
    md_fail(ctx, TF_INVALID_ARGUMENT, "GatherV2: batch_dims %lld must be in "
            "[-%d, %d] and at most axis %d (params %s, indices %s)",
            (long long)(k != NULL ? k->batch_dims : 0), is.rank, is.rank, axis,
            sp, si);
    goto done;
  }
  for (int i = 0; i < batch_dims; ++i) {
    if (ps.dims[i] != is.dims[i]) {
      md_fail(ctx, TF_INVALID_ARGUMENT, "GatherV2: params %s and indices %s "
              "must agree on the first batch_dims = %lld dims", sp, si,
              (long long)batch_dims);
      goto done;
    }
  }
  /* Output: params[:axis] + indices[batch_dims:] + params[axis + 1:]. */
  md_shape ys = {0, {0}};
  for (int i = 0; i < axis; ++i) ys.dims[ys.rank++] = ps.dims[i];
  for (int i = (int)batch_dims; i < is.rank; ++i) {
    if (ys.rank == TF_MAX_DIMS) {
      md_fail(ctx, TF_INVALID_ARGUMENT, "GatherV2: result has more than %d dims",
              TF_MAX_DIMS);
      goto done;
    }
    ys.dims[ys.rank++] = is.dims[i];
  }
  for (int i = axis + 1; i < ps.rank; ++i) {
    if (ys.rank == TF_MAX_DIMS) {
      md_fail(ctx, TF_INVALID_ARGUMENT, "GatherV2: result has more than %d dims",
              TF_MAX_DIMS);
      goto done;
    }
    ys.dims[ys.rank++] = ps.dims[i];
  }
  TF_DataType dtype = TF_TensorType(params);
  y = md_allocate_output(ctx, 0, dtype, &ys);
  if (y == NULL || md_num_elements(&ys) == 0) goto done;

  md_gather_task* task = md_task_alloc(ctx, sizeof(*task));
  if (task == NULL) goto done;
  task->index_type = TF_TensorType(indices);
  task->params = TF_TensorData(params);
  task->indices = TF_TensorData(indices);
  task->out = TF_TensorData(y);
  task->batch = task->outer = task->count = 1;
  task->inner_bytes = (int64_t)TF_DataTypeSize(dtype);
  for (int i = 0; i < ps.rank; ++i) {
    if (i < batch_dims) task->batch *= ps.dims[i];
    else if (i < axis) task->outer *= ps.dims[i];
    else if (i > axis) task->inner_bytes *= ps.dims[i];
  }
  task->n = ps.dims[axis];
  for (int i = (int)batch_dims; i < is.rank; ++i) task->count *= is.dims[i];
  task->index_shape = is;
  md_where_of(ctx, &task->where);
  md_enqueue(ctx, md_gather_run, task);

done:
  md_delete_tensors(params, indices, axis_t, y);
}

/*** OneHot ***/

typedef struct md_one_hot_kernel {
  int64_t axis;
} md_one_hot_kernel;

void* md_create_one_hot(TF_OpKernelConstruction* ctx) {
  md_one_hot_kernel* k = calloc(1, sizeof(*k));
  if (k == NULL) {
    md_construction_fail(ctx, TF_RESOURCE_EXHAUSTED, "OneHot: out of memory");
    return NULL;
  }
  k->axis = -1;
  if (!md_get_int_attr(ctx, "axis", &k->axis)) {
    free(k);
    return NULL;
  }
  return k;
}

void md_delete_one_hot(void* kernel) { free(kernel); }

typedef struct md_one_hot_task {
  TF_DataType index_type;
  const void* indices;
  const char* on;  /* device scalars, read when the task runs */
  const char* off;
  char* out;
  int64_t outer, depth, inner;
  size_t esize;
} md_one_hot_task;

static void md_one_hot_run(void* arg, SP_Stream stream) {
  (void)stream;
  md_one_hot_task* t = arg;
  size_t es = t->esize;
  char* out = t->out;
  for (int64_t o = 0; o < t->outer; ++o) {
    for (int64_t d = 0; d < t->depth; ++d) {
      for (int64_t i = 0; i < t->inner; ++i, out += es) {
        int64_t idx = md_index_at(t->indices, t->index_type, o * t->inner + i);
        memcpy(out, idx == d ? t->on : t->off, es);
      }
    }
  }
}

void md_compute_one_hot(void* kernel, TF_OpKernelContext* ctx) {
  const md_one_hot_kernel* k = kernel;
  md_shape is, ons, offs;
  TF_Tensor* indices = md_get_input(ctx, 0, &is);
  TF_Tensor* depth_t = indices ? md_get_input(ctx, 1, NULL) : NULL;
  TF_Tensor* on = depth_t ? md_get_input(ctx, 2, &ons) : NULL;
  TF_Tensor* off = on ? md_get_input(ctx, 3, &offs) : NULL;
  TF_Tensor* y = NULL;
  if (off == NULL) goto done;

  int64_t axis = k != NULL ? k->axis : -1, depth;
  if (!md_is_index_type(TF_TensorType(indices)) ||
      TF_TensorType(on) != TF_TensorType(off)) {
    md_fail(ctx, TF_INVALID_ARGUMENT, "OneHot: unsupported dtypes: indices %d, "
            "on_value %d, off_value %d", (int)TF_TensorType(indices),
            (int)TF_TensorType(on), (int)TF_TensorType(off));
    goto done;
  }
  if (!md_read_host_scalar(ctx, depth_t, "depth", &depth)) goto done;
  if (depth < 0) {
    md_fail(ctx, TF_INVALID_ARGUMENT, "OneHot: depth must be non-negative, got "
            "%lld", (long long)depth);
    goto done;
  }
  if (ons.rank != 0 || offs.rank != 0) {
    md_fail(ctx, TF_INVALID_ARGUMENT, "OneHot: on_value and off_value must be "
            "scalars");
    goto done;
  }
  if (axis < -1 || axis > is.rank || is.rank + 1 > TF_MAX_DIMS) {
    md_fail(ctx, TF_INVALID_ARGUMENT, "OneHot: expected axis to be -1 or "
            "between [0, %d], but got %lld", is.rank, (long long)axis);
    goto done;
  }
  int at = axis == -1 ? is.rank : (int)axis;
  md_shape ys = {is.rank + 1, {0}};
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < is.rank; ++i) {
    ys.dims[i < at ? i : i + 1] = is.dims[i];
    if (i < at) outer *= is.dims[i];
    else inner *= is.dims[i];
  }
  ys.dims[at] = depth;
  TF_DataType dtype = TF_TensorType(on);
  y = md_allocate_output(ctx, 0, dtype, &ys);
  if (y == NULL || md_num_elements(&ys) == 0) goto done;

  md_one_hot_task* task = md_task_alloc(ctx, sizeof(*task));
  if (task == NULL) goto done;
  task->index_type = TF_TensorType(indices);
  task->indices = TF_TensorData(indices);
  task->on = TF_TensorData(on);
  task->off = TF_TensorData(off);
  task->out = TF_TensorData(y);
  task->outer = outer;
  task->depth = depth;
  task->inner = inner;
  task->esize = TF_DataTypeSize(dtype);
  md_enqueue(ctx, md_one_hot_run, task);

done:
  md_delete_tensors(indices, depth_t, on, off);
  TF_DeleteTensor(y);
}

/*** GatherNd ***/

/* GatherNd sees indices as [rows, K] and params as [d0 .. dK-1, slice]:
 *     output[r, :] = params[indices[r, 0], .., indices[r, K-1], :]
 * An index row outside the first K dims of params zero-fills its slice and
 * reports INVALID_ARGUMENT on the stream with TensorFlow's CPU message
 * ("indices[1] = [4, 0] does not index into param shape [4,3]"). */
typedef struct md_gather_nd_task {
  TF_DataType index_type;
  const char* params;
  const void* indices;
  char* out;
  int64_t rows, k, slice_bytes;
  int64_t dims[TF_MAX_DIMS]; /* the first k dims of params */
  md_shape row_shape;        /* indices' shape without its last dim */
  char param_shape[MD_SHAPE_STR_SIZE];
  md_where where;
} md_gather_nd_task;

static void md_gather_nd_run(void* arg, SP_Stream stream) {
  md_gather_nd_task* t = arg;
  for (int64_t r = 0; r < t->rows; ++r) {
    int64_t offset = 0, bad = -1;
    for (int64_t j = 0; j < t->k; ++j) {
      int64_t idx = md_index_at(t->indices, t->index_type, r * t->k + j);
      if (idx < 0 || idx >= t->dims[j]) bad = j;
      offset = offset * t->dims[j] + idx;
    }
    char* out = t->out + r * t->slice_bytes;
    if (bad < 0) {
      memcpy(out, t->params + offset * t->slice_bytes, (size_t)t->slice_bytes);
      continue;
    }
    memset(out, 0, (size_t)t->slice_bytes);
    if (!md_stream_has_error(stream)) {
      char pos[MD_SHAPE_STR_SIZE], row[MD_SHAPE_STR_SIZE];
      size_t used = 0;
      md_format_index(&t->row_shape, r, pos, sizeof(pos));
      row[0] = '\0';
      for (int64_t j = 0; j < t->k && used < sizeof(row); ++j) {
        used += (size_t)snprintf(row + used, sizeof(row) - used, j ? ", %lld" : "%lld",
                                 (long long)md_index_at(t->indices, t->index_type,
                                                        r * t->k + j));
      }
      md_task_error(stream, &t->where, TF_INVALID_ARGUMENT,
                    "indices[%s] = [%s] does not index into param shape %s", pos, row,
                    t->param_shape);
    }
  }
}

void md_compute_gather_nd(void* kernel, TF_OpKernelContext* ctx) {
  (void)kernel;
  md_shape ps, is;
  TF_Tensor* params = md_get_input(ctx, 0, &ps);
  TF_Tensor* indices = params ? md_get_input(ctx, 1, &is) : NULL;
  TF_Tensor* y = NULL;
  char sp[MD_SHAPE_STR_SIZE], si[MD_SHAPE_STR_SIZE];
  if (indices == NULL) goto done;
  if (!md_is_index_type(TF_TensorType(indices))) {
    md_fail(ctx, TF_INVALID_ARGUMENT, "GatherNd: unsupported indices dtype %d",
            (int)TF_TensorType(indices));
    goto done;
  }
  md_shape_str(&ps, sp, sizeof(sp));
  md_shape_str(&is, si, sizeof(si));
  if (is.rank < 1) {
    md_fail(ctx, TF_INVALID_ARGUMENT, "GatherNd: indices must have rank >= 1, got %s", si);
    goto done;
  }
  int64_t k = is.dims[is.rank - 1];
  if (k > ps.rank) {
    md_fail(ctx, TF_INVALID_ARGUMENT, "GatherNd: the last dimension of indices (%lld) "
            "must be <= the rank of params %s", (long long)k, sp);
    goto done;
  }
  /* Output: indices[:-1] + params[k:]. */
  md_shape ys = {0, {0}}, rows = {0, {0}};
  for (int i = 0; i < is.rank - 1; ++i) rows.dims[rows.rank++] = is.dims[i];
  ys = rows;
  for (int i = (int)k; i < ps.rank; ++i) {
    if (ys.rank == TF_MAX_DIMS) {
      md_fail(ctx, TF_INVALID_ARGUMENT, "GatherNd: result has more than %d dims",
              TF_MAX_DIMS);
      goto done;
    }
    ys.dims[ys.rank++] = ps.dims[i];
  }
  TF_DataType dtype = TF_TensorType(params);
  y = md_allocate_output(ctx, 0, dtype, &ys);
  if (y == NULL || md_num_elements(&ys) == 0) goto done;

  md_gather_nd_task* task = md_task_alloc(ctx, sizeof(*task));
  if (task == NULL) goto done;
  task->index_type = TF_TensorType(indices);
  task->params = TF_TensorData(params);
  task->indices = TF_TensorData(indices);
  task->out = TF_TensorData(y);
  task->rows = md_num_elements(&rows);
  task->k = k;
  task->slice_bytes = (int64_t)TF_DataTypeSize(dtype);
  for (int i = 0; i < ps.rank; ++i) {
    if (i < k) task->dims[i] = ps.dims[i];
    else task->slice_bytes *= ps.dims[i];
  }
  task->row_shape = rows;
  /* TensorFlow's message prints the shape without spaces: [4,3]. */
  size_t n = 0;
  for (const char* c = sp; *c && n + 1 < sizeof(task->param_shape); ++c) {
    if (*c != ' ') task->param_shape[n++] = *c;
  }
  task->param_shape[n] = '\0';
  md_where_of(ctx, &task->where);
  md_enqueue(ctx, md_gather_nd_run, task);

done:
  md_delete_tensors(params, indices, y, NULL);
}
