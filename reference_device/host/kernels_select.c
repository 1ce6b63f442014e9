/* Host reference device: Select and SelectV2 (every dtype).
 *
 * output = condition ? t : e, element by element. SelectV2 broadcasts all
 * three inputs (numpy rules). Select (the first version) takes t and e of
 * one shape and a condition that is a scalar, the same shape as t, or a
 * vector matching t's first dimension (which selects whole rows); the
 * vector is walked as shape [n, 1, ...] through the same broadcast walk.
 * Only bytes move, so the loops work on element sizes. */
#include <stdlib.h>

#include "kernel_list.h"
#include "kernel_util.h"

/* A 16-byte element (complex128), copied whole. */
typedef struct md_bytes16 {
  uint64_t lo, hi;
} md_bytes16;

typedef struct md_select_task {
  const uint8_t* cond;
  const char* t;
  const char* e;
  char* out;
  size_t esize;
  md_bcast b;
} md_select_task;

static void md_select_row(void* arg, const int64_t* offsets,
                          const int64_t* strides, int64_t out, int64_t n) {
  md_select_task* task = arg;
  const uint8_t* c = task->cond + offsets[0];
  int64_t cs = strides[0], ts = strides[1], es = strides[2];
#define MD_SELECT(T)                                                          \
  {                                                                           \
    const T* t = (const T*)task->t + offsets[1];                              \
    const T* e = (const T*)task->e + offsets[2];                              \
    T* o = (T*)task->out + out;                                               \
    for (int64_t i = 0; i < n; ++i) o[i] = c[i * cs] ? t[i * ts] : e[i * es]; \
    return;                                                                   \
  }
  switch (task->esize) {
    case 1: MD_SELECT(uint8_t)
    case 2: MD_SELECT(uint16_t)
    case 4: MD_SELECT(uint32_t)
    case 8: MD_SELECT(uint64_t)
    default: MD_SELECT(md_bytes16) /* complex128 */
  }
#undef MD_SELECT
}

static void md_select_run(void* arg, SP_Stream stream) {
  (void)stream;
  md_bcast_walk(&((md_select_task*)arg)->b, md_select_row, arg);
}

/* v2: broadcast all three; otherwise Select's rules. */
static void md_select_compute(TF_OpKernelContext* ctx, int v2) {
  md_shape shapes[3], os;
  TF_Tensor* c = md_get_input(ctx, 0, &shapes[0]);
  TF_Tensor* t = c ? md_get_input(ctx, 1, &shapes[1]) : NULL;
  TF_Tensor* e = t ? md_get_input(ctx, 2, &shapes[2]) : NULL;
  TF_Tensor* out = NULL;
  if (e == NULL) goto done;

  char sc[MD_SHAPE_STR_SIZE], st[MD_SHAPE_STR_SIZE], se[MD_SHAPE_STR_SIZE];
  TF_DataType dtype = TF_TensorType(t);
  size_t esize = TF_DataTypeSize(dtype);
  if (TF_TensorType(c) != TF_BOOL || TF_TensorType(e) != dtype ||
      (esize != 1 && esize != 2 && esize != 4 && esize != 8 && esize != 16)) {
    md_fail(ctx, TF_INVALID_ARGUMENT, "%.*s: condition must be bool and t, e "
            "of one supported dtype, got %d, %d and %d", MD_OP(ctx),
            (int)TF_TensorType(c), (int)dtype, (int)TF_TensorType(e));
    goto done;
  }
  md_shape_str(&shapes[0], sc, sizeof(sc));
  md_shape_str(&shapes[1], st, sizeof(st));
  md_shape_str(&shapes[2], se, sizeof(se));
  if (v2) {
    if (!md_broadcast_shapes(shapes, 3, &os)) {
      md_fail(ctx, TF_INVALID_ARGUMENT, "SelectV2: condition %s, t %s and e %s "
              "are not broadcastable", sc, st, se);
      goto done;
    }
  } else {
    md_shape ts = shapes[1];
    int same = ts.rank == shapes[2].rank;
    for (int i = 0; same && i < ts.rank; ++i) {
      same = ts.dims[i] == shapes[2].dims[i];
    }
    if (!same) {
      md_fail(ctx, TF_INVALID_ARGUMENT, "Select: t and e must have the same "
              "shape, got %s and %s", st, se);
      goto done;
    }
    int cond_same = shapes[0].rank == ts.rank;
    for (int i = 0; cond_same && i < ts.rank; ++i) {
      cond_same = shapes[0].dims[i] == ts.dims[i];
    }
    if (shapes[0].rank == 1 && ts.rank > 1 && shapes[0].dims[0] == ts.dims[0]) {
      /* A row selector: walk it as [n, 1, ..., 1]. */
      shapes[0].rank = ts.rank;
      for (int i = 1; i < ts.rank; ++i) shapes[0].dims[i] = 1;
    } else if (!cond_same && shapes[0].rank != 0) {
      md_fail(ctx, TF_INVALID_ARGUMENT, "Select: condition %s must be a "
              "scalar, a vector matching the first dimension of t %s, or the "
              "same shape as t", sc, st);
      goto done;
    }
    os = ts;
  }
  out = md_allocate_output(ctx, 0, dtype, &os);
  if (out == NULL || md_num_elements(&os) == 0) goto done;

  md_select_task* task = md_task_alloc(ctx, sizeof(*task));
  if (task == NULL) goto done;
  task->cond = TF_TensorData(c);
  task->t = TF_TensorData(t);
  task->e = TF_TensorData(e);
  task->out = TF_TensorData(out);
  task->esize = esize;
  md_bcast_plan(shapes, 3, &os, &task->b);
  md_enqueue(ctx, md_select_run, task);

done:
  md_delete_tensors(c, t, e, out);
}

void md_compute_select(void* kernel, TF_OpKernelContext* ctx) {
  (void)kernel;
  md_select_compute(ctx, 0);
}

void md_compute_select_v2(void* kernel, TF_OpKernelContext* ctx) {
  (void)kernel;
  md_select_compute(ctx, 1);
}
