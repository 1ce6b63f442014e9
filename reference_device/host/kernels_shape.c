/* Host reference device: Transpose, Reshape, Fill, Identity (all dtypes).
 *
 * These only move bytes, so they work on element sizes (1, 2, 4, 8 bytes)
 * rather than dtypes. Reshape and Identity never copy: they hand the input
 * buffer to the output. */
#include <stdlib.h>
#include <string.h>

#include "kernel_list.h"
#include "kernel_util.h"

/* dst[i] = src[i * stride] for i in [0, n); stride in elements. */
static void md_strided_copy(char* dst, const char* src, int64_t n,
                            int64_t stride, size_t esize) {
  if (stride == 1) {
    memcpy(dst, src, (size_t)n * esize);
    return;
  }
#define MD_COPY(T)                                                            \
  for (int64_t i = 0; i < n; ++i) ((T*)dst)[i] = ((const T*)src)[i * stride]; \
  return;
  switch (esize) {
    case 1: MD_COPY(uint8_t)
    case 2: MD_COPY(uint16_t)
    case 4: MD_COPY(uint32_t)
    case 8: MD_COPY(uint64_t)
    default:
      for (int64_t i = 0; i < n; ++i) {
        memcpy(dst + i * (int64_t)esize, src + i * stride * (int64_t)esize, esize);
      }
  }
#undef MD_COPY
}

/*** Transpose ***/

typedef struct md_transpose_task {
  const char* x;
  char* y;
  size_t esize;
  int rank;                     /* after merging; >= 1 */
  int64_t dims[TF_MAX_DIMS];    /* output dims */
  int64_t strides[TF_MAX_DIMS]; /* input stride (elements) per output dim */
} md_transpose_task;

static void md_transpose_run(void* arg, SP_Stream stream) {
  (void)stream;
  md_transpose_task* t = arg;
  int inner = t->rank - 1;
  int64_t n = t->dims[inner];
  int64_t idx[TF_MAX_DIMS] = {0};
  int64_t offset = 0;
  char* y = t->y;
  for (;;) {
    md_strided_copy(y, t->x + offset * (int64_t)t->esize, n, t->strides[inner],
                    t->esize);
    y += n * (int64_t)t->esize;
    int d = inner - 1;
    for (; d >= 0; --d) {
      offset += t->strides[d];
      if (++idx[d] < t->dims[d]) break;
      offset -= t->strides[d] * t->dims[d];
      idx[d] = 0;
    }
    if (d < 0) break;
  }
}

void md_compute_transpose(void* kernel, TF_OpKernelContext* ctx) {
  (void)kernel;
  md_shape xs;
  TF_Tensor* x = md_get_input(ctx, 0, &xs);
  TF_Tensor* perm_t = x ? md_get_input(ctx, 1, NULL) : NULL;
  TF_Tensor* y = NULL;
  if (perm_t == NULL) goto done;

  int64_t perm[TF_MAX_DIMS];
  int n = md_read_host_ints(ctx, perm_t, "perm", perm, TF_MAX_DIMS);
  if (n < 0) goto done;
  if (n != xs.rank) {
    md_fail(ctx, TF_INVALID_ARGUMENT, "Transpose: perm has %d entries but the "
            "input has rank %d", n, xs.rank);
    goto done;
  }
  int seen[TF_MAX_DIMS] = {0};
  for (int i = 0; i < n; ++i) {
    if (perm[i] < 0 || perm[i] >= n || seen[perm[i]]) {
      md_fail(ctx, TF_INVALID_ARGUMENT, "Transpose: perm is not a permutation "
              "of [0, %d): entry %d is %lld", n, i, (long long)perm[i]);
      goto done;
    }
    seen[perm[i]] = 1;
  }

  /* Output shape and the input stride of each output dim. */
  md_shape ys = {xs.rank, {0}};
  int64_t in_strides[TF_MAX_DIMS];
  int64_t stride = 1;
  for (int i = xs.rank - 1; i >= 0; --i) {
    in_strides[i] = stride;
    stride *= xs.dims[i];
  }
  for (int i = 0; i < n; ++i) ys.dims[i] = xs.dims[perm[i]];

  TF_DataType dtype = TF_TensorType(x);
  y = md_allocate_output(ctx, 0, dtype, &ys);
  if (y == NULL || md_num_elements(&ys) == 0) goto done;

  md_transpose_task* task = malloc(sizeof(*task));
  if (task == NULL) {
    md_fail(ctx, TF_RESOURCE_EXHAUSTED, "Transpose: out of memory");
    goto done;
  }
  task->x = TF_TensorData(x);
  task->y = TF_TensorData(y);
  task->esize = TF_DataTypeSize(dtype);
  /* Drop size-1 dims and merge output neighbours that are also neighbours
   * in the input (an identity permutation becomes one memcpy). */
  task->rank = 0;
  for (int i = 0; i < n; ++i) {
    int64_t d = ys.dims[i], s = in_strides[perm[i]];
    if (d == 1) continue;
    int last = task->rank - 1;
    if (last >= 0 && task->strides[last] == s * d) {
      task->dims[last] *= d;
      task->strides[last] = s;
      continue;
    }
    task->dims[task->rank] = d;
    task->strides[task->rank] = s;
    task->rank++;
  }
  if (task->rank == 0) { /* one element */
    task->rank = 1;
    task->dims[0] = 1;
    task->strides[0] = 1;
  }
  md_enqueue(ctx, md_transpose_run, task);

done:
  md_delete_tensors(x, perm_t, y, NULL);
}

/*** Reshape ***/

void md_compute_reshape(void* kernel, TF_OpKernelContext* ctx) {
  (void)kernel;
  md_shape xs;
  TF_Tensor* x = md_get_input(ctx, 0, &xs);
  TF_Tensor* shape_t = x ? md_get_input(ctx, 1, NULL) : NULL;
  if (shape_t == NULL) goto done;

  md_shape ys;
  ys.rank = md_read_host_ints(ctx, shape_t, "shape", ys.dims, TF_MAX_DIMS);
  if (ys.rank < 0) goto done;

  /* Resolve the single -1 from the element count. */
  int64_t count = md_num_elements(&xs);
  int64_t known = 1;
  int unknown = -1;
  char sx[MD_SHAPE_STR_SIZE], sy[MD_SHAPE_STR_SIZE];
  for (int i = 0; i < ys.rank; ++i) {
    if (ys.dims[i] == -1 && unknown < 0) {
      unknown = i;
    } else if (ys.dims[i] < 0) {
      md_fail(ctx, TF_INVALID_ARGUMENT, "Reshape: invalid requested shape %s "
              "(only one -1 is allowed, other sizes must be >= 0)",
              md_shape_str(&ys, sy, sizeof(sy)));
      goto done;
    } else {
      known *= ys.dims[i];
    }
  }
  int ok = 1;
  if (unknown >= 0) {
    if (known == 0) {
      md_fail(ctx, TF_INVALID_ARGUMENT, "Reshape: cannot infer the -1 in %s "
              "for a tensor of shape %s when another dimension is 0",
              md_shape_str(&ys, sy, sizeof(sy)), md_shape_str(&xs, sx, sizeof(sx)));
      goto done;
    }
    ok = count % known == 0;
    if (ok) ys.dims[unknown] = count / known;
  } else {
    ok = known == count;
  }
  if (!ok) {
    md_fail(ctx, TF_INVALID_ARGUMENT, "Reshape: cannot reshape a tensor with "
            "%lld values (shape %s) to the requested shape %s", (long long)count,
            md_shape_str(&xs, sx, sizeof(sx)), md_shape_str(&ys, sy, sizeof(sy)));
    goto done;
  }

  /* Zero-copy: the output is the input buffer with the new shape. */
  TF_SetShape(x, ys.dims, ys.rank);
  TF_Status* status = TF_NewStatus();
  TF_SetOutput(ctx, 0, x, status);
  if (TF_GetCode(status) != TF_OK) TF_OpKernelContext_Failure(ctx, status);
  TF_DeleteStatus(status);

done:
  md_delete_tensors(x, shape_t, NULL, NULL);
}

/*** Identity ***/

void md_compute_identity(void* kernel, TF_OpKernelContext* ctx) {
  (void)kernel;
  TF_Tensor* x = md_get_input(ctx, 0, NULL);
  if (x == NULL) return;
  TF_Status* status = TF_NewStatus();
  TF_SetOutput(ctx, 0, x, status);
  if (TF_GetCode(status) != TF_OK) TF_OpKernelContext_Failure(ctx, status);
  TF_DeleteStatus(status);
  TF_DeleteTensor(x);
}

/*** Fill ***/

typedef struct md_fill_task {
  const char* value; /* device scalar, read when the task runs */
  char* y;
  int64_t n;
  size_t esize;
} md_fill_task;

static void md_fill_run(void* arg, SP_Stream stream) {
  (void)stream;
  md_fill_task* t = arg;
  /* Write the first element, then double the filled prefix with memcpy. */
  memcpy(t->y, t->value, t->esize);
  int64_t done = 1;
  while (done < t->n) {
    int64_t m = done < t->n - done ? done : t->n - done;
    memcpy(t->y + done * (int64_t)t->esize, t->y, (size_t)m * t->esize);
    done += m;
  }
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

  md_fill_task* task = malloc(sizeof(*task));
  if (task == NULL) {
    md_fail(ctx, TF_RESOURCE_EXHAUSTED, "Fill: out of memory");
    goto done;
  }
  task->value = TF_TensorData(value);
  task->y = TF_TensorData(y);
  task->n = n;
  task->esize = TF_DataTypeSize(dtype);
  md_enqueue(ctx, md_fill_run, task);

done:
  md_delete_tensors(dims_t, value, y, NULL);
}
