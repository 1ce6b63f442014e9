/* A legal plugin whose collective kernel waits on the host, in
 * compute_func, for the other participants of its group, as the CUDA
 * reference plugin's do: device type MEET with four devices, and
 * CollectiveReduceV2 (merge_op Add, final_op Id) for float32. The last
 * participant to arrive writes every participant's output (the inputs
 * added in device ordinal order) and wakes the others. A participant whose
 * group does not gather within 10 s fails with DEADLINE_EXCEEDED: that is
 * what a framework that called the participants one after the other would
 * get. */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

static void meet_register(void);
#define MINI_DEVICE_TYPE "MEET"
#define MINI_PLATFORM_NAME "MEET_PLATFORM"
#define MINI_DEVICE_COUNT 4
#define MINI_KERNELS_HOOK() meet_register();
#include "mini_device.h"

#define MEET_MAX 8     /* participants of one group */
#define MEET_SLOTS 16  /* groups in flight */

typedef struct meeting {
  int used;
  int64_t group_key, instance_key, group_size, count;
  int arrived, left, done, failed;
  const float* in[MEET_MAX];
  float* out[MEET_MAX];
} meeting;

static pthread_mutex_t meet_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t meet_cv = PTHREAD_COND_INITIALIZER;
static meeting meetings[MEET_SLOTS];

static int meet_ordinal(TF_OpKernelContext* ctx) {
  TF_StringView name = TF_GetDeviceName(ctx);
  size_t i = name.len;
  while (i > 0 && name.data[i - 1] != ':') --i;
  int ordinal = 0;
  for (; i < name.len && name.data[i] >= '0' && name.data[i] <= '9'; ++i) {
    ordinal = ordinal * 10 + (name.data[i] - '0');
  }
  return ordinal;
}

static int meet_scalar(TF_OpKernelContext* ctx, int index, int64_t* value, TF_Status* s) {
  TF_Tensor* t = NULL;
  TF_GetInput(ctx, index, &t, s);
  if (TF_GetCode(s) != TF_OK) return 0;
  *value = *(const int32_t*)TF_TensorData(t);
  TF_DeleteTensor(t);
  return 1;
}

static void meet_compute(void* kernel, TF_OpKernelContext* ctx) {
  (void)kernel;
  TF_Status* s = TF_NewStatus();
  TF_Tensor *x = NULL, *y = NULL;
  int64_t size = 0, gkey = 0, ikey = 0;
  if (!meet_scalar(ctx, 1, &size, s) || !meet_scalar(ctx, 2, &gkey, s) ||
      !meet_scalar(ctx, 3, &ikey, s)) {
    goto done;
  }
  const int ordinal = meet_ordinal(ctx);
  if (size < 1 || size > MEET_MAX || ordinal >= size) {
    TF_SetStatus(s, TF_INVALID_ARGUMENT, "MEET: group_size or device out of range");
    goto done;
  }
  TF_GetInput(ctx, 0, &x, s);
  if (TF_GetCode(s) != TF_OK) goto done;
  int64_t dims[TF_MAX_DIMS];
  const int rank = TF_NumDims(x);
  for (int i = 0; i < rank; ++i) dims[i] = TF_Dim(x, i);
  y = TF_AllocateOutput(ctx, 0, TF_FLOAT, dims, rank, TF_TensorByteSize(x), s);
  if (y == NULL) goto done;

  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += 10;
  pthread_mutex_lock(&meet_mu);
  meeting* m = NULL;
  for (int i = 0; i < MEET_SLOTS && m == NULL; ++i) {
    if (meetings[i].used && meetings[i].group_key == gkey && meetings[i].instance_key == ikey &&
        !meetings[i].done) {
      m = &meetings[i];
    }
  }
  for (int i = 0; i < MEET_SLOTS && m == NULL; ++i) {
    if (!meetings[i].used) {
      m = &meetings[i];
      memset(m, 0, sizeof(*m));
      m->used = 1;
      m->group_key = gkey;
      m->instance_key = ikey;
      m->group_size = size;
      m->count = TF_TensorElementCount(x);
    }
  }
  if (m == NULL) {
    pthread_mutex_unlock(&meet_mu);
    TF_SetStatus(s, TF_RESOURCE_EXHAUSTED, "MEET: too many groups in flight");
    goto done;
  }
  m->in[ordinal] = TF_TensorData(x);
  m->out[ordinal] = TF_TensorData(y);
  if (++m->arrived == m->group_size) {
    for (int64_t e = 0; e < m->count; ++e) {
      float sum = 0.0f;
      for (int r = 0; r < m->group_size; ++r) sum += m->in[r][e];
      for (int r = 0; r < m->group_size; ++r) m->out[r][e] = sum;
    }
    m->done = 1;
    pthread_cond_broadcast(&meet_cv);
  }
  while (!m->done) {
    if (pthread_cond_timedwait(&meet_cv, &meet_mu, &deadline) == ETIMEDOUT && !m->done) {
      m->done = m->failed = 1;  /* the group never gathers: every waiter fails */
      pthread_cond_broadcast(&meet_cv);
    }
  }
  if (m->failed) {
    TF_SetStatus(s, TF_DEADLINE_EXCEEDED,
                 "MEET: the other participants did not arrive within 10 s (they must be "
                 "called concurrently)");
  }
  /* A group that gathered frees its slot when the last one leaves; a failed
   * one keeps it (done, so that no later call joins it). */
  if (++m->left == m->group_size) m->used = 0;
  pthread_mutex_unlock(&meet_mu);
done:
  if (TF_GetCode(s) != TF_OK) TF_OpKernelContext_Failure(ctx, s);
  TF_DeleteTensor(x);
  TF_DeleteTensor(y);
  TF_DeleteStatus(s);
}

static void meet_register(void) {
  TF_Status* s = TF_NewStatus();
  TF_KernelBuilder* b = TF_NewKernelBuilder("CollectiveReduceV2", MINI_DEVICE_TYPE, NULL,
                                            meet_compute, NULL);
  TF_KernelBuilder_TypeConstraint(b, "T", TF_FLOAT, s);
  TF_KernelBuilder_HostMemory(b, "group_size");
  TF_KernelBuilder_HostMemory(b, "group_key");
  TF_KernelBuilder_HostMemory(b, "instance_key");
  TF_RegisterKernelBuilder("CollectiveReduceV2", b, s);
  TF_DeleteStatus(s);
}
