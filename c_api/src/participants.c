/* The participants of one collective, run at once (pg_kernel_run1_group in
 * pg_core.h).
 *
 * A plugin's collective kernel may wait on the host in compute_func until
 * every participant of its group has been called (the CUDA plugin's do), so
 * the participants must run concurrently: the calling thread runs the first
 * and the threads of this file run the others. Threads are made on demand,
 * one per participant that finds none idle, and kept. After a job a thread
 * keeps looking for the next one for kSpinNs before it sleeps, and a caller
 * waiting for the others looks for kSpinNs before it sleeps, so that
 * back-to-back collectives do not pay a thread wake-up each; both yield
 * the processor while they look. Nothing here holds the interpreter's lock
 * (cffi releases it around the call). A child process made by fork() starts
 * with no threads here, as none are inherited. */
#include <sched.h>

#include "internal.h"

/* How long an idle thread or a waiting caller looks before it sleeps. */
static const int64_t kSpinNs = 100 * 1000;

typedef struct part_group {
  atomic_int remaining; /* jobs of the group not finished */
} part_group;

typedef struct part_job {
  pg_kernel* kernel;
  TF_Tensor* const* inputs;
  const int64_t* expect;
  uint64_t donated;
  TF_Tensor** output;
  TF_Status* status;
  part_group* group;
  struct part_job* next;
} part_job;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_work = PTHREAD_COND_INITIALIZER; /* a job was queued */
static pthread_cond_t g_done = PTHREAD_COND_INITIALIZER; /* a group finished */
static part_job* g_head = NULL; /* queued jobs, oldest first (under g_mu) */
static part_job* g_tail = NULL;
static atomic_int g_queued;     /* jobs in the queue, for lookers without g_mu */
static atomic_int g_idle;       /* threads not running a job */
static int g_sleeping = 0;      /* threads waiting on g_work (under g_mu) */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* Takes the oldest queued job (g_mu held); NULL if there is none. */
static part_job* pop_job(void) {
  part_job* j = g_head;
  if (j == NULL) return NULL;
  g_head = j->next;
  if (g_head == NULL) g_tail = NULL;
  atomic_fetch_sub(&g_queued, 1);
  atomic_fetch_sub(&g_idle, 1);
  return j;
}

static part_job* next_job(void) {
  const int64_t until = pg_trace_now() + kSpinNs;
  do {
    if (atomic_load(&g_queued) > 0) {
      pthread_mutex_lock(&g_mu);
      part_job* j = pop_job();
      pthread_mutex_unlock(&g_mu);
      if (j != NULL) return j;
    }
    sched_yield();
  } while (pg_trace_now() < until);
  pthread_mutex_lock(&g_mu);
  part_job* j;
  while ((j = pop_job()) == NULL) {
    ++g_sleeping;
    pthread_cond_wait(&g_work, &g_mu);
    --g_sleeping;
  }
  pthread_mutex_unlock(&g_mu);
  return j;
}

static void* participant_thread(void* arg) {
  (void)arg;
  for (;;) {
    part_job* j = next_job();
    part_group* g = j->group;
    *j->output = pg_kernel_run1_donated(j->kernel, j->inputs, j->expect, j->donated,
                                        j->status);
    atomic_fetch_add(&g_idle, 1);
    /* The caller may return as soon as `remaining` is 0: `j` and `g` are
     * not touched after the decrement. */
    if (atomic_fetch_sub(&g->remaining, 1) == 1) {
      pthread_mutex_lock(&g_mu);
      pthread_cond_broadcast(&g_done);
      pthread_mutex_unlock(&g_mu);
    }
  }
  return NULL;
}

/* fork(): the child has none of the parent's threads; the lock is taken
 * around the fork so that the child's copy is consistent. */
static void before_fork(void) { pthread_mutex_lock(&g_mu); }
static void after_fork_parent(void) { pthread_mutex_unlock(&g_mu); }
static void after_fork_child(void) {
  pthread_mutex_init(&g_mu, NULL);
  pthread_cond_init(&g_work, NULL);
  pthread_cond_init(&g_done, NULL);
  g_head = g_tail = NULL;
  atomic_store(&g_queued, 0);
  atomic_store(&g_idle, 0);
  g_sleeping = 0;
}
static void init_once(void) {
  pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

/* Makes threads until `want` are idle (g_mu held). Returns 0 if the system
 * refused one. */
static int ensure_idle(int want) {
  while (atomic_load(&g_idle) < want) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    int rc = pthread_create(&t, &attr, participant_thread, NULL);
    pthread_attr_destroy(&attr);
    if (rc != 0) return 0;
    atomic_fetch_add(&g_idle, 1);
  }
  return 1;
}

int pg_kernel_run1_group(int n, pg_kernel* const* kernels, TF_Tensor* const* inputs,
                         const int64_t* expects, const uint64_t* donated,
                         TF_Tensor** outputs, TF_Status* const* statuses) {
  if (n <= 0) return 0;
  for (int i = 0; i < n; ++i) outputs[i] = NULL;
  if (n > 1024) {
    for (int i = 0; i < n; ++i) {
      pg_set_status(statuses[i], TF_INVALID_ARGUMENT,
                    "pg_kernel_run1_group: %d participants; at most 1024", n);
    }
    return n;
  }
  /* Each kernel's inputs and expected shape in the flat arrays. */
  TF_Tensor* const* in[n];
  const int64_t* ex[n];
  for (int i = 0; i < n; ++i) {
    in[i] = inputs;
    inputs += pg_kernel_num_inputs(kernels[i]);
    ex[i] = expects;
    if (expects != NULL) expects += 1 + (expects[0] > 0 ? expects[0] : 0);
  }
  if (n == 1) {
    outputs[0] = pg_kernel_run1_donated(kernels[0], in[0], ex[0], donated ? donated[0] : 0,
                                        statuses[0]);
    return outputs[0] == NULL;
  }
  pthread_once(&g_once, init_once);
  part_group group;
  atomic_init(&group.remaining, n - 1);
  part_job* jobs = calloc((size_t)n - 1, sizeof(part_job));
  pthread_mutex_lock(&g_mu);
  if (jobs == NULL || !ensure_idle(atomic_load(&g_queued) + n - 1)) {
    pthread_mutex_unlock(&g_mu);
    free(jobs);
    for (int i = 0; i < n; ++i) {
      pg_set_status(statuses[i], TF_RESOURCE_EXHAUSTED,
                    "%s: the %d participants of the collective could not be run at once "
                    "(no thread or memory for them); nothing ran",
                    pg_kernel_op_name(kernels[i]), n);
    }
    return n;
  }
  for (int i = 1; i < n; ++i) {
    part_job* j = &jobs[i - 1];
    j->kernel = kernels[i];
    j->inputs = in[i];
    j->expect = ex[i];
    j->donated = donated != NULL ? donated[i] : 0;
    j->output = &outputs[i];
    j->status = statuses[i];
    j->group = &group;
    j->next = NULL;
    if (g_tail != NULL) g_tail->next = j; else g_head = j;
    g_tail = j;
  }
  atomic_fetch_add(&g_queued, n - 1);
  if (g_sleeping > 0) pthread_cond_broadcast(&g_work);
  pthread_mutex_unlock(&g_mu);

  outputs[0] = pg_kernel_run1_donated(kernels[0], in[0], ex[0], donated ? donated[0] : 0,
                                      statuses[0]);

  const int64_t until = pg_trace_now() + kSpinNs;
  while (atomic_load(&group.remaining) > 0 && pg_trace_now() < until) sched_yield();
  if (atomic_load(&group.remaining) > 0) {
    pthread_mutex_lock(&g_mu);
    while (atomic_load(&group.remaining) > 0) pthread_cond_wait(&g_done, &g_mu);
    pthread_mutex_unlock(&g_mu);
  }
  free(jobs);
  int failed = 0;
  for (int i = 0; i < n; ++i) failed += outputs[i] == NULL;
  return failed;
}
