/* Host reference device: TensorFlow's collective ops (CollectiveReduceV2,
 * CollectiveReduceScatterV2, CollectiveGatherV2, CollectiveBcastSendV2 and
 * CollectiveBcastRecvV2) across the plugin's devices, in shared memory.
 *
 * One call per participating device. compute_func validates, allocates the
 * output and enqueues a task on the device's stream; the caller's thread
 * never waits. The task (on the stream's worker thread) joins the
 * rendezvous of its (group_key, instance_key): it deposits its input and
 * output pointers and waits. The last of the group_size participants to
 * arrive computes every participant's result (participants ranked by device
 * ordinal), marks the rendezvous finished and wakes the others.
 *
 * Buffers stay valid while a participant's task runs (the core keeps them
 * alive until the stream has run it), and every participant's task runs
 * until the rendezvous is finished, so the last arrival may read and write
 * the others' buffers.
 *
 * Failures: a participant that disagrees with the group (op, dtype, group
 * size, reduction, element count, a device joining twice) fails the whole
 * rendezvous with INVALID_ARGUMENT; a participant that waits longer than
 * timeout_seconds (kDefaultTimeout when the attribute is 0, TensorFlow's
 * "no timeout") fails it with DEADLINE_EXCEEDED. Either way every waiting
 * participant reports the error on its stream, so it surfaces as a typed
 * error at the next synchronisation, and nothing waits forever.
 *
 * Dtypes: float, double, int32, int64. Reductions run in the dtype, adding
 * the participants' inputs in ordinal order ((x0 + x1) + x2 ...); integer
 * Add and Mul wrap around; the Div final op divides by group_size
 * (truncating toward zero for integers). */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernel_list.h"
#include "kernel_util.h"

/* The wait when timeout_seconds is 0 (no timeout asked for). */
static const double kDefaultTimeout = 600.0;

typedef enum md_coll_kind {
  MD_COLL_REDUCE,
  MD_COLL_REDUCE_SCATTER,
  MD_COLL_GATHER,
  MD_COLL_BCAST_SEND,
  MD_COLL_BCAST_RECV,
} md_coll_kind;

typedef enum md_merge { MD_MERGE_ADD, MD_MERGE_MUL, MD_MERGE_MIN, MD_MERGE_MAX } md_merge;

/* Kernel state: the op's attributes. */
typedef struct md_coll_kernel {
  md_coll_kind kind;
  md_merge merge;  /* reductions */
  int final_div;   /* reductions: final_op "Div" */
  float timeout;   /* timeout_seconds; 0: kDefaultTimeout */
} md_coll_kernel;

/* What one participant deposits. */
typedef struct md_coll_part {
  int ordinal;      /* device ordinal: the participant's rank in the group */
  int is_source;    /* broadcast: the sender */
  const char* in;   /* NULL for a broadcast receiver */
  char* out;
  int64_t in_bytes, out_bytes;
} md_coll_part;

/* The stream task of one participant. */
typedef struct md_coll_task {
  md_where where;
  md_coll_kernel attrs;
  TF_DataType dtype;
  int64_t group_size, group_key, instance_key;
  md_coll_part part;
} md_coll_task;

/* The meeting point of one collective: created by the first arrival, freed
 * by the last participant to leave. */
typedef struct md_rendezvous {
  struct md_rendezvous* next;
  int64_t group_key, instance_key, group_size;
  md_coll_kind kind;  /* the send and receive of a broadcast share one */
  md_merge merge;
  int final_div;
  TF_DataType dtype;
  int arrived;        /* parts[0..arrived) are filled */
  int attached;       /* participants still inside md_coll_run */
  int finished;       /* the result (or the error) is final */
  TF_Code code;       /* TF_OK, or the error every participant reports */
  char message[400];
  md_coll_part parts[]; /* group_size entries */
} md_rendezvous;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static md_rendezvous* g_open; /* every live rendezvous (g_mu) */

/*** Arithmetic ***/

/* Sums and products are computed in UT: the type itself for floats, the
 * unsigned type for integers (wrap-around, no undefined behaviour). */
#define MD_COLL_OPS(CT, UT, SFX)                                              \
  static void md_merge_##SFX(md_merge m, CT* acc, const CT* x, int64_t n) {   \
    switch (m) {                                                              \
      case MD_MERGE_ADD:                                                      \
        for (int64_t i = 0; i < n; ++i) acc[i] = (CT)((UT)acc[i] + (UT)x[i]); \
        break;                                                                \
      case MD_MERGE_MUL:                                                      \
        for (int64_t i = 0; i < n; ++i) acc[i] = (CT)((UT)acc[i] * (UT)x[i]); \
        break;                                                                \
      case MD_MERGE_MIN:                                                      \
        for (int64_t i = 0; i < n; ++i) acc[i] = x[i] < acc[i] ? x[i] : acc[i]; \
        break;                                                                \
      case MD_MERGE_MAX:                                                      \
        for (int64_t i = 0; i < n; ++i) acc[i] = x[i] > acc[i] ? x[i] : acc[i]; \
        break;                                                                \
    }                                                                         \
  }                                                                           \
  static void md_div_##SFX(CT* acc, int64_t n, int64_t k) {                   \
    for (int64_t i = 0; i < n; ++i) acc[i] = (CT)(acc[i] / (CT)k);            \
  }
MD_COLL_OPS(float, float, f32)
MD_COLL_OPS(double, double, f64)
MD_COLL_OPS(int32_t, uint32_t, i32)
MD_COLL_OPS(int64_t, uint64_t, i64)

/* acc = merge(acc, x) over n elements of dtype (one of the four). */
static void md_merge_into(TF_DataType dtype, md_merge m, char* acc,
                          const char* x, int64_t n) {
  switch (dtype) {
    case TF_FLOAT: md_merge_f32(m, (float*)acc, (const float*)x, n); break;
    case TF_DOUBLE: md_merge_f64(m, (double*)acc, (const double*)x, n); break;
    case TF_INT32: md_merge_i32(m, (int32_t*)acc, (const int32_t*)x, n); break;
    default: md_merge_i64(m, (int64_t*)acc, (const int64_t*)x, n); break;
  }
}

static void md_div_by(TF_DataType dtype, char* acc, int64_t n, int64_t k) {
  switch (dtype) {
    case TF_FLOAT: md_div_f32((float*)acc, n, k); break;
    case TF_DOUBLE: md_div_f64((double*)acc, n, k); break;
    case TF_INT32: md_div_i32((int32_t*)acc, n, k); break;
    default: md_div_i64((int64_t*)acc, n, k); break;
  }
}

/*** The collectives, run by the last arrival (g_mu held) ***/

static int md_by_ordinal(const void* a, const void* b) {
  return ((const md_coll_part*)a)->ordinal - ((const md_coll_part*)b)->ordinal;
}

static void md_fail_rendezvous(md_rendezvous* r, TF_Code code, const char* fmt,
                               ...) __attribute__((format(printf, 3, 4)));
static void md_fail_rendezvous(md_rendezvous* r, TF_Code code, const char* fmt,
                               ...) {
  if (r->finished) return;
  va_list args;
  va_start(args, fmt);
  vsnprintf(r->message, sizeof(r->message), fmt, args);
  va_end(args);
  r->code = code;
  r->finished = 1;
  pthread_cond_broadcast(&g_cv);
}

/* Reduces every input into `acc` (in_bytes of parts[0]). */
static void md_reduce_all(md_rendezvous* r, char* acc) {
  int64_t bytes = r->parts[0].in_bytes;
  int64_t n = bytes / TF_DataTypeSize(r->dtype);
  if (n == 0) return;
  memmove(acc, r->parts[0].in, bytes); /* acc is that input where it was donated */
  for (int p = 1; p < r->group_size; ++p) {
    md_merge_into(r->dtype, r->merge, acc, r->parts[p].in, n);
  }
  if (r->final_div) md_div_by(r->dtype, acc, n, r->group_size);
}

/* Copies the sender's input to every participant's output; returns 0 after
 * failing r (no sender, two senders, a receiver of another size). */
static int md_run_broadcast(md_rendezvous* r) {
  int n = (int)r->group_size;
  const md_coll_part* src = NULL;
  for (int p = 0; p < n; ++p) {
    if (!r->parts[p].is_source) continue;
    if (src != NULL) {
      md_fail_rendezvous(r, TF_INVALID_ARGUMENT, "two senders (devices %d and %d) in "
                         "one broadcast", src->ordinal, r->parts[p].ordinal);
      return 0;
    }
    src = &r->parts[p];
  }
  if (src == NULL) {
    md_fail_rendezvous(r, TF_INVALID_ARGUMENT, "a broadcast of %d receivers and no "
                       "sender (CollectiveBcastSendV2)", n);
    return 0;
  }
  for (int p = 0; p < n; ++p) {
    if (r->parts[p].out_bytes != src->in_bytes) {
      md_fail_rendezvous(r, TF_INVALID_ARGUMENT, "the receiver on device %d expects "
                         "%lld bytes, the sender on device %d sends %lld",
                         r->parts[p].ordinal, (long long)r->parts[p].out_bytes,
                         src->ordinal, (long long)src->in_bytes);
      return 0;
    }
  }
  for (int p = 0; p < n; ++p) {
    if (src->in_bytes > 0) memcpy(r->parts[p].out, src->in, src->in_bytes);
  }
  return 1;
}

static void md_run_collective(md_rendezvous* r) {
  int n = (int)r->group_size;
  qsort(r->parts, n, sizeof(md_coll_part), md_by_ordinal);
  switch (r->kind) {
    case MD_COLL_REDUCE:
      md_reduce_all(r, r->parts[0].out);
      for (int p = 1; p < n && r->parts[0].out_bytes > 0; ++p) {
        memcpy(r->parts[p].out, r->parts[0].out, r->parts[0].out_bytes);
      }
      break;
    case MD_COLL_REDUCE_SCATTER: {
      char* acc = malloc(r->parts[0].in_bytes > 0 ? r->parts[0].in_bytes : 1);
      if (acc == NULL) {
        md_fail_rendezvous(r, TF_RESOURCE_EXHAUSTED, "out of host memory");
        return;
      }
      md_reduce_all(r, acc);
      int64_t chunk = r->parts[0].out_bytes;
      for (int p = 0; p < n && chunk > 0; ++p) {
        memcpy(r->parts[p].out, acc + p * chunk, chunk);
      }
      free(acc);
      break;
    }
    case MD_COLL_GATHER:
      for (int p = 0; p < n; ++p) {
        int64_t chunk = r->parts[p].in_bytes;
        for (int q = 0; q < n; ++q) {
          if (chunk > 0) memcpy(r->parts[q].out + p * chunk, r->parts[p].in, chunk);
        }
      }
      break;
    default:
      if (!md_run_broadcast(r)) return;
      break;
  }
  r->finished = 1;
  pthread_cond_broadcast(&g_cv);
}

/*** The rendezvous ***/

static md_coll_kind md_meeting_kind(md_coll_kind kind) {
  return kind == MD_COLL_BCAST_RECV ? MD_COLL_BCAST_SEND : kind;
}

/* The open (unfinished) rendezvous of t's keys, created if there is none. */
static md_rendezvous* md_find_rendezvous(const md_coll_task* t) {
  for (md_rendezvous* r = g_open; r != NULL; r = r->next) {
    if (!r->finished && r->group_key == t->group_key &&
        r->instance_key == t->instance_key) {
      return r;
    }
  }
  md_rendezvous* r = calloc(1, sizeof(*r) + t->group_size * sizeof(md_coll_part));
  if (r == NULL) return NULL;
  r->group_key = t->group_key;
  r->instance_key = t->instance_key;
  r->group_size = t->group_size;
  r->kind = md_meeting_kind(t->attrs.kind);
  r->merge = t->attrs.merge;
  r->final_div = t->attrs.final_div;
  r->dtype = t->dtype;
  r->next = g_open;
  g_open = r;
  return r;
}

/* Adds t's part to r, or fails r if t disagrees with the group. */
static void md_join(md_rendezvous* r, const md_coll_task* t) {
  const md_coll_part* me = &t->part;
  if (r->group_size != t->group_size || r->kind != md_meeting_kind(t->attrs.kind) ||
      r->dtype != t->dtype || r->merge != t->attrs.merge ||
      r->final_div != t->attrs.final_div) {
    md_fail_rendezvous(r, TF_INVALID_ARGUMENT, "the participant on device %d "
                       "disagrees with the group on the op, dtype, group_size (%lld "
                       "here, %lld before) or reduction", me->ordinal,
                       (long long)t->group_size, (long long)r->group_size);
    return;
  }
  for (int p = 0; p < r->arrived; ++p) {
    const md_coll_part* other = &r->parts[p];
    if (other->ordinal == me->ordinal) {
      md_fail_rendezvous(r, TF_INVALID_ARGUMENT, "device %d joined twice; each "
                         "participant must be on another device", me->ordinal);
      return;
    }
    if (r->kind != MD_COLL_BCAST_SEND && other->in_bytes != me->in_bytes) {
      md_fail_rendezvous(r, TF_INVALID_ARGUMENT, "the input on device %d has %lld "
                         "bytes, the one on device %d has %lld: every participant "
                         "must pass the same shape", me->ordinal,
                         (long long)me->in_bytes, other->ordinal,
                         (long long)other->in_bytes);
      return;
    }
  }
  r->parts[r->arrived++] = *me;
  if (r->arrived == r->group_size) md_run_collective(r);
}

static void md_leave(md_rendezvous* r) {
  if (--r->attached > 0) return;
  for (md_rendezvous** p = &g_open; *p != NULL; p = &(*p)->next) {
    if (*p == r) {
      *p = r->next;
      break;
    }
  }
  free(r);
}

static void md_coll_run(void* arg, SP_Stream stream) {
  md_coll_task* t = arg;
  double timeout = t->attrs.timeout > 0 ? t->attrs.timeout : kDefaultTimeout;
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += (time_t)timeout;
  deadline.tv_nsec += (long)((timeout - (double)(time_t)timeout) * 1e9);
  if (deadline.tv_nsec >= 1000000000L) {
    deadline.tv_sec += 1;
    deadline.tv_nsec -= 1000000000L;
  }

  pthread_mutex_lock(&g_mu);
  md_rendezvous* r = md_find_rendezvous(t);
  if (r == NULL) {
    pthread_mutex_unlock(&g_mu);
    md_task_error(stream, &t->where, TF_RESOURCE_EXHAUSTED,
                  "out of host memory for the rendezvous");
    return;
  }
  r->attached++;
  md_join(r, t);
  while (!r->finished) {
    if (pthread_cond_timedwait(&g_cv, &g_mu, &deadline) == ETIMEDOUT && !r->finished) {
      md_fail_rendezvous(r, TF_DEADLINE_EXCEEDED, "timed out after %g s waiting for "
                         "the group (group_key %lld, instance_key %lld): %d of %lld "
                         "participants arrived", timeout, (long long)t->group_key,
                         (long long)t->instance_key, r->arrived,
                         (long long)r->group_size);
    }
  }
  TF_Code code = r->code;
  char message[sizeof(r->message)];
  memcpy(message, r->message, sizeof(message));
  md_leave(r);
  pthread_mutex_unlock(&g_mu);
  if (code != TF_OK) md_task_error(stream, &t->where, code, "%s", message);
}

/*** Kernels ***/

static void* md_coll_create(TF_OpKernelConstruction* ctx, md_coll_kind kind) {
  md_coll_kernel* k = calloc(1, sizeof(*k));
  if (k == NULL) {
    md_construction_fail(ctx, TF_RESOURCE_EXHAUSTED, "out of memory");
    return NULL;
  }
  k->kind = kind;
  char merge[8] = "Add", final[8] = "Id";
  int reduce = kind == MD_COLL_REDUCE || kind == MD_COLL_REDUCE_SCATTER;
  if (!md_get_float_attr(ctx, "timeout_seconds", &k->timeout) ||
      (reduce && (!md_get_string_attr(ctx, "merge_op", merge, sizeof(merge)) ||
                  !md_get_string_attr(ctx, "final_op", final, sizeof(final))))) {
    free(k);
    return NULL;
  }
  static const char* const kMerges[] = {"Add", "Mul", "Min", "Max"};
  int found = 0;
  for (int i = 0; i < 4; ++i) {
    if (strcmp(merge, kMerges[i]) == 0) {
      k->merge = (md_merge)i;
      found = 1;
    }
  }
  if (!found || (strcmp(final, "Id") != 0 && strcmp(final, "Div") != 0)) {
    md_construction_fail(ctx, TF_INVALID_ARGUMENT, "%.*s: merge_op must be Add, "
                         "Mul, Min or Max and final_op Id or Div, got %s and %s",
                         MD_CONSTRUCTION_OP(ctx), merge, final);
    free(k);
    return NULL;
  }
  k->final_div = strcmp(final, "Div") == 0;
  return k;
}

void* md_create_coll_reduce(TF_OpKernelConstruction* ctx) {
  return md_coll_create(ctx, MD_COLL_REDUCE);
}
void* md_create_coll_reduce_scatter(TF_OpKernelConstruction* ctx) {
  return md_coll_create(ctx, MD_COLL_REDUCE_SCATTER);
}
void* md_create_coll_gather(TF_OpKernelConstruction* ctx) {
  return md_coll_create(ctx, MD_COLL_GATHER);
}
void* md_create_coll_send(TF_OpKernelConstruction* ctx) {
  return md_coll_create(ctx, MD_COLL_BCAST_SEND);
}
void* md_create_coll_recv(TF_OpKernelConstruction* ctx) {
  return md_coll_create(ctx, MD_COLL_BCAST_RECV);
}
void md_delete_coll(void* kernel) { free(kernel); }

/* The device ordinal: the number after the last ':' of the device name. */
static int md_device_ordinal(TF_OpKernelContext* ctx) {
  TF_StringView name = TF_GetDeviceName(ctx);
  size_t i = name.len;
  while (i > 0 && name.data[i - 1] != ':') --i;
  int ordinal = 0;
  for (; i < name.len && name.data[i] >= '0' && name.data[i] <= '9'; ++i) {
    ordinal = ordinal * 10 + (name.data[i] - '0');
  }
  return ordinal;
}

/* The output shape of `kind` for input shape `in` (not the receiver's). */
static int md_coll_out_shape(TF_OpKernelContext* ctx, md_coll_kind kind,
                             const md_shape* in, int64_t group_size, md_shape* out) {
  char s[MD_SHAPE_STR_SIZE];
  *out = *in;
  if (kind != MD_COLL_GATHER && kind != MD_COLL_REDUCE_SCATTER) return 1;
  if (in->rank == 0) {
    md_fail(ctx, TF_INVALID_ARGUMENT, "%.*s: the input must have at least one "
            "dimension, got a scalar", MD_OP(ctx));
    return 0;
  }
  if (kind == MD_COLL_GATHER) {
    out->dims[0] = in->dims[0] * group_size;
  } else if (in->dims[0] % group_size != 0) {
    md_fail(ctx, TF_INVALID_ARGUMENT, "%.*s: the first dimension of the input %s "
            "must be divisible by group_size %lld", MD_OP(ctx),
            md_shape_str(in, s, sizeof(s)), (long long)group_size);
    return 0;
  } else {
    out->dims[0] = in->dims[0] / group_size;
  }
  return 1;
}

void md_compute_coll(void* kernel, TF_OpKernelContext* ctx) {
  const md_coll_kernel* k = kernel;
  int recv = k->kind == MD_COLL_BCAST_RECV;
  int base = recv ? 0 : 1; /* index of group_size */
  TF_Tensor* keys[3] = {NULL, NULL, NULL};
  TF_Tensor *x = NULL, *y = NULL, *shape_t = NULL;
  int64_t values[3];
  const char* names[3] = {"group_size", "group_key", "instance_key"};
  for (int i = 0; i < 3; ++i) {
    keys[i] = md_get_input(ctx, base + i, NULL);
    if (keys[i] == NULL || !md_read_host_scalar(ctx, keys[i], names[i], &values[i])) {
      goto done;
    }
  }
  if (values[0] < 1) {
    md_fail(ctx, TF_INVALID_ARGUMENT, "%.*s: group_size must be at least 1, got %lld",
            MD_OP(ctx), (long long)values[0]);
    goto done;
  }
  md_shape xs = {0}, ys;
  TF_DataType dtype;
  if (recv) {
    shape_t = md_get_input(ctx, 3, NULL);
    if (shape_t == NULL) goto done;
    ys.rank = md_read_host_ints(ctx, shape_t, "shape", ys.dims, TF_MAX_DIMS);
    if (ys.rank < 0) goto done;
    dtype = TF_ExpectedOutputDataType(ctx, 0);
  } else {
    x = md_get_input(ctx, 0, &xs);
    if (x == NULL || !md_coll_out_shape(ctx, k->kind, &xs, values[0], &ys)) goto done;
    dtype = TF_TensorType(x);
  }
  if (k->kind == MD_COLL_REDUCE) {
    /* The result may go over a donated input, which this kernel must not
     * hold a handle of meanwhile. */
    TF_DeleteTensor(x);
    x = NULL;
    y = md_forward_or_allocate_output(ctx, 0, 0, &ys);
    if (y == NULL || (x = md_get_input(ctx, 0, NULL)) == NULL) goto done;
  } else {
    y = md_allocate_output(ctx, 0, dtype, &ys);
    if (y == NULL) goto done;
  }
  md_coll_task* t = md_task_alloc(ctx, sizeof(*t));
  if (t == NULL) goto done;
  md_where_of(ctx, &t->where);
  t->attrs = *k;
  t->dtype = dtype;
  t->group_size = values[0];
  t->group_key = values[1];
  t->instance_key = values[2];
  t->part.ordinal = md_device_ordinal(ctx);
  t->part.is_source = k->kind == MD_COLL_BCAST_SEND;
  t->part.in = x != NULL ? TF_TensorData(x) : NULL;
  t->part.in_bytes = x != NULL ? (int64_t)TF_TensorByteSize(x) : 0;
  t->part.out = TF_TensorData(y);
  t->part.out_bytes = (int64_t)TF_TensorByteSize(y);
  md_enqueue(ctx, md_coll_run, t);

done:
  md_delete_tensors(keys[0], keys[1], keys[2], x);
  md_delete_tensors(y, shape_t, NULL, NULL);
}
