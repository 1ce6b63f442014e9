/* Host reference device: streams.
 *
 * An SP_Stream is a worker thread plus a FIFO queue guarded by a mutex. The
 * host thread appends tasks and signals `work_cv`; the worker pops them one at
 * a time and runs them with the mutex released. Two counters, `enqueued` and
 * `completed`, make "wait until everything enqueued so far has run" a simple
 * condition on `done_cv`.
 *
 * Markers (event records) are not tasks: a marker hangs on the last queued
 * or running task and runs, under the mutex, right after it; on an idle
 * stream it runs at once. So recording an event costs neither a task nor a
 * wake-up of the worker.
 *
 * A small kernel task (md_stream_enqueue_small: at most `inline_work`
 * elements) given to an idle stream (nothing queued, nothing running) runs
 * at once on the launching thread, as the stream's running task: waking the
 * worker and handing the task over would cost more than the work. Stream
 * order is kept (the worker does not start a task while one runs), markers
 * recorded meanwhile hang on it, and its errors reach the stream as any
 * task's do. Everything else, and any task behind queued or running work,
 * goes to the worker. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plugin.h"
#include "stream.h"
#include "trace.h"

/* A marker waiting for the task it hangs on. */
typedef struct md_marker {
  md_marker_fn fn;
  struct md_marker* next;
  _Alignas(max_align_t) unsigned char arg[MD_MARKER_ARG_SIZE]; /* fn's argument */
} md_marker;

/* One queued task. */
typedef struct md_task {
  md_task_fn fn;
  void* arg;
  md_task_kind kind;
  /* The first marker to run after it, kept in the task (markers are
   * recorded after every op: most tasks get exactly one), then the others
   * in order. `mark_fn` NULL: none. */
  md_marker_fn mark_fn;
  _Alignas(max_align_t) unsigned char mark_arg[MD_MARKER_ARG_SIZE];
  md_marker* markers;
  md_trace_task* trace; /* profiler details (trace.h), or NULL */
  struct md_task* next;
  /* A spare record's last argument, freed by the launching thread that
   * takes the record (the thread that allocated it), not by the worker. */
  void* stale_arg;
} md_task;

/* A recorded task sequence (see stream.h). */
struct md_task_list {
  atomic_int refs;
  int count, cap;
  md_task* tasks; /* fn, arg, kind of each; `next` unused */
};

struct SP_Stream_st {
  md_device* device;
  struct SP_Stream_st* next; /* next stream of the same device */
  int sync_users; /* synchronize_all_activity calls using it (device lock) */

  pthread_mutex_t mu;
  pthread_cond_t work_cv; /* signalled when a task arrives or on shutdown */
  pthread_cond_t done_cv; /* signalled when a task completes */
  md_task* head;
  md_task* tail;
  md_task* running;   /* the task the worker runs now, if any */
  md_task* spare;     /* finished task records kept for reuse (MD_SPARE_TASKS) */
  int num_spare;
  uint64_t enqueued;  /* tasks appended so far */
  uint64_t completed; /* tasks finished so far */
  int shutting_down;

  /* First error of the stream (code TF_OK when none). */
  TF_Code error_code;
  char error_message[512];
  /* Failures reported so far (every one, not only the first), and the
   * count the last marker saw: a marker reports whether work failed since
   * the previous marker. */
  uint64_t failures;
  uint64_t failures_at_event;

  /* Capture mode (guarded by mu): tasks go to `capture`, not the queue. */
  md_task_list* capture;
  int capture_refused; /* a task could not be recorded */

  pthread_t worker;
};

/* Policy for work enqueued after the stream failed. The core clears the error
 * in block_host_until_done and keeps using the stream, so the reference
 * device runs every task: data produced after a failure stays well defined.
 * A device that prefers to skip kernel work after an error returns 0 here for
 * MD_TASK_KERNEL (control tasks must always run: the core frees staging
 * buffers from host callbacks and waits on events). */
static int md_task_runs_after_error(md_task_kind kind) {
  (void)kind;
  return 1;
}

/* Runs one marker. Called with the stream's mutex held. */
static void md_run_marker(SP_Stream stream, md_marker_fn fn, void* arg) {
  int failed = stream->failures != stream->failures_at_event;
  stream->failures_at_event = stream->failures;
  fn(arg, failed);
}

/* Runs the markers of `task` and frees the list. Called with the stream's
 * mutex held. */
static void md_run_markers(SP_Stream stream, md_task* task) {
  if (task->mark_fn != NULL) md_run_marker(stream, task->mark_fn, task->mark_arg);
  md_marker* m = task->markers;
  while (m != NULL) {
    md_marker* next = m->next;
    md_run_marker(stream, m->fn, m->arg);
    free(m);
    m = next;
  }
}

/* Finished task records a stream keeps for the next ones. A record and its
 * argument are allocated on the launching thread; freed on the worker, they
 * would move between two threads' malloc caches at every op, and the
 * launching thread's small allocations (tensors, op states) would miss its
 * cache. So the worker keeps the record, and the launching thread frees the
 * argument when it takes the record again. */
#define MD_SPARE_TASKS 64

/* After `task` ran (or was skipped), with stream->mu held: its markers, the
 * completion count, and the record kept as a spare (its argument freed
 * later, by the launching thread that takes it) or returned. Returns the
 * task to free (argument and record) once the mutex is released, or NULL. */
static md_task* md_finish_task(SP_Stream stream, md_task* task) {
  stream->running = NULL;
  md_run_markers(stream, task);
  stream->completed++;
  pthread_cond_broadcast(&stream->done_cv);
  if (stream->num_spare >= MD_SPARE_TASKS) return task;
  task->stale_arg = task->arg;
  task->next = stream->spare;
  stream->spare = task;
  stream->num_spare++;
  return NULL;
}

static void md_free_task(md_task* task) {
  free(task->arg);
  free(task);
}

/* The worker thread: pops and runs tasks until shutdown with an empty queue. */
static void* md_stream_worker(void* opaque) {
  SP_Stream stream = opaque;
  pthread_mutex_lock(&stream->mu);
  for (;;) {
    /* (a task running on a launching thread, see md_run_inline, goes first) */
    while ((stream->head == NULL || stream->running != NULL) && !stream->shutting_down) {
      pthread_cond_wait(&stream->work_cv, &stream->mu);
    }
    if (stream->running != NULL) { /* shutting down: let the inline task end */
      pthread_cond_wait(&stream->work_cv, &stream->mu);
      continue;
    }
    if (stream->head == NULL) break; /* shutting down and drained */
    md_task* task = stream->head;
    stream->head = task->next;
    if (stream->head == NULL) stream->tail = NULL;
    stream->running = task;
    int run = stream->error_code == TF_OK || md_task_runs_after_error(task->kind);
    pthread_mutex_unlock(&stream->mu);

    uint64_t t0 = task->trace != NULL ? md_now_ns() : 0;
    if (run) task->fn(task->arg, stream);
    if (task->trace != NULL) md_trace_done(task->trace, stream->device->ordinal, stream, t0, run);

    pthread_mutex_lock(&stream->mu);
    md_task* done = md_finish_task(stream, task);
    if (done != NULL) { /* freed here, without the mutex */
      pthread_mutex_unlock(&stream->mu);
      md_free_task(done);
      pthread_mutex_lock(&stream->mu);
    }
  }
  pthread_mutex_unlock(&stream->mu);
  return NULL;
}

/* Records a task of a capturing stream (called with stream->mu held). */
static int md_record_task(SP_Stream stream, md_task_kind kind, md_task_fn fn,
                          void* arg) {
  md_task_list* list = stream->capture;
  if (kind == MD_TASK_CONTROL) {
    stream->capture_refused = 1;
    free(arg);
    return -1;
  }
  if (list->count == list->cap) {
    int cap = list->cap ? list->cap * 2 : 16;
    md_task* grown = realloc(list->tasks, (size_t)cap * sizeof(md_task));
    if (grown == NULL) {
      stream->capture_refused = 1;
      free(arg);
      return -1;
    }
    list->tasks = grown;
    list->cap = cap;
  }
  md_task* t = &list->tasks[list->count++];
  t->fn = fn;
  t->arg = arg;
  t->kind = kind;
  t->mark_fn = NULL;
  t->markers = NULL;
  t->trace = NULL;
  t->next = NULL;
  return 0;
}

/* Runs `task` on the calling thread as the stream's running task (called
 * with stream->mu held, the stream idle; returns with it released). */
static void md_run_inline(SP_Stream stream, md_task* task) {
  stream->running = task;
  stream->enqueued++;
  int run = stream->error_code == TF_OK || md_task_runs_after_error(task->kind);
  pthread_mutex_unlock(&stream->mu);
  if (run) task->fn(task->arg, stream);
  pthread_mutex_lock(&stream->mu);
  md_task* done = md_finish_task(stream, task);
  /* tasks other threads queued meanwhile, or a shutdown waiting for it */
  if (stream->head != NULL || stream->shutting_down) pthread_cond_signal(&stream->work_cv);
  pthread_mutex_unlock(&stream->mu);
  if (done != NULL) md_free_task(done);
}

/* Queues a task carrying the profile record `trace` (or NULL); a task that
 * `may_inline` runs at once on an idle stream instead (md_run_inline). The
 * task is allocated before the stream's mutex is taken, so that queueing
 * (or recording, when the stream captures) takes the mutex once. */
static int md_enqueue_task(SP_Stream stream, md_task_kind kind, md_task_fn fn,
                           void* arg, md_trace_task* trace, int may_inline) {
  md_task* task = NULL;
  pthread_mutex_lock(&stream->mu);
  if (stream->spare != NULL) {
    task = stream->spare;
    stream->spare = task->next;
    stream->num_spare--;
  }
  pthread_mutex_unlock(&stream->mu);
  if (task != NULL) {
    free(task->stale_arg);
  } else {
    task = malloc(sizeof(*task));
  }
  if (task == NULL) {
    free(arg);
    md_trace_discard(trace);
    return -1;
  }
  task->fn = fn;
  task->arg = arg;
  task->kind = kind;
  task->mark_fn = NULL;
  task->markers = NULL;
  task->trace = trace;
  task->next = NULL;
  task->stale_arg = NULL;

  pthread_mutex_lock(&stream->mu);
  if (stream->capture != NULL) {
    int rc = md_record_task(stream, kind, fn, arg);
    pthread_mutex_unlock(&stream->mu);
    free(task);
    md_trace_discard(trace);
    return rc;
  }
  if (stream->shutting_down) {
    pthread_mutex_unlock(&stream->mu);
    free(task);
    free(arg);
    md_trace_discard(trace);
    return -1;
  }
  if (may_inline && trace == NULL && stream->head == NULL && stream->running == NULL) {
    md_run_inline(stream, task);
    return 0;
  }
  if (stream->tail != NULL) {
    stream->tail->next = task;
  } else {
    stream->head = task;
  }
  stream->tail = task;
  stream->enqueued++;
  pthread_cond_signal(&stream->work_cv);
  pthread_mutex_unlock(&stream->mu);
  return 0;
}

int md_stream_enqueue(SP_Stream stream, md_task_kind kind, md_task_fn fn,
                      void* arg) {
  return md_enqueue_task(stream, kind, fn, arg, NULL, 0);
}

int md_stream_enqueue_traced(SP_Stream stream, md_task_kind kind,
                             md_task_fn fn, void* arg, const char* name,
                             int name_len, int64_t bytes) {
  return md_enqueue_task(stream, kind, fn, arg,
                         md_trace_begin(name, name_len, bytes), 0);
}

int md_stream_enqueue_small(SP_Stream stream, md_task_fn fn, void* arg,
                            const char* name, int name_len, int64_t work) {
  const int64_t limit = stream->device->inline_work;  /* -1: never */
  return md_enqueue_task(stream, MD_TASK_KERNEL, fn, arg,
                         md_trace_begin(name, name_len, 0), limit >= 0 && work <= limit);
}

SP_Stream md_stream_next(SP_Stream stream) { return stream->next; }

void md_stream_set_error(SP_Stream stream, TF_Code code, const char* message) {
  if (code == TF_OK) return;
  pthread_mutex_lock(&stream->mu);
  stream->failures++;
  if (stream->error_code == TF_OK) {
    stream->error_code = code;
    snprintf(stream->error_message, sizeof(stream->error_message), "%s",
             message != NULL ? message : "");
  }
  pthread_mutex_unlock(&stream->mu);
}

int md_stream_has_error(SP_Stream stream) {
  pthread_mutex_lock(&stream->mu);
  int failed = stream->error_code != TF_OK;
  pthread_mutex_unlock(&stream->mu);
  return failed;
}

int md_stream_add_marker(SP_Stream stream, md_marker_fn fn, const void* arg,
                         size_t size) {
  if (size > MD_MARKER_ARG_SIZE) return -1;
  pthread_mutex_lock(&stream->mu);
  if (stream->shutting_down || stream->capture != NULL) {
    /* A capture records no markers: an event runs once by nature. */
    if (stream->capture != NULL) stream->capture_refused = 1;
    pthread_mutex_unlock(&stream->mu);
    return -1;
  }
  md_task* last = stream->tail != NULL ? stream->tail : stream->running;
  int rc = 0;
  if (last == NULL) {
    /* idle: everything before it has run */
    _Alignas(max_align_t) unsigned char copy[MD_MARKER_ARG_SIZE];
    if (size > 0) memcpy(copy, arg, size);
    md_run_marker(stream, fn, copy);
  } else if (last->mark_fn == NULL && last->markers == NULL) {
    last->mark_fn = fn;
    if (size > 0) memcpy(last->mark_arg, arg, size);
  } else {
    md_marker* m = malloc(sizeof(*m));
    if (m == NULL) {
      rc = -1;
    } else {
      m->fn = fn;
      if (size > 0) memcpy(m->arg, arg, size);
      m->next = NULL;
      md_marker** link = &last->markers;
      while (*link != NULL) link = &(*link)->next;
      *link = m;
    }
  }
  pthread_mutex_unlock(&stream->mu);
  return rc;
}

/* Blocks until every task enqueued before the call has completed. */
static void md_stream_drain(SP_Stream stream) {
  pthread_mutex_lock(&stream->mu);
  uint64_t target = stream->enqueued;
  while (stream->completed < target) {
    pthread_cond_wait(&stream->done_cv, &stream->mu);
  }
  pthread_mutex_unlock(&stream->mu);
}

/* Copies the stream's error into `status` (OK if none); clears it if asked. */
static void md_stream_report_error(SP_Stream stream, TF_Status* status,
                                   int clear) {
  pthread_mutex_lock(&stream->mu);
  if (stream->error_code != TF_OK) {
    TF_SetStatus(status, stream->error_code, stream->error_message);
    if (clear) {
      stream->error_code = TF_OK;
      stream->error_message[0] = '\0';
    }
  }
  pthread_mutex_unlock(&stream->mu);
}

void md_create_stream(const SP_Device* device, SP_Stream* out,
                      TF_Status* status) {
  *out = NULL;
  SP_Stream stream = calloc(1, sizeof(*stream));
  if (stream == NULL) {
    md_set_status(status, TF_RESOURCE_EXHAUSTED, "out of memory creating a "
                  MD_DEVICE_TYPE " stream");
    return;
  }
  stream->device = md_device_of(device);
  stream->error_code = TF_OK;
  /* Initialise step by step; on failure undo the finished steps. */
  int rc = pthread_mutex_init(&stream->mu, NULL);
  if (rc != 0) goto fail;
  rc = pthread_cond_init(&stream->work_cv, NULL);
  if (rc != 0) goto fail_mutex;
  rc = pthread_cond_init(&stream->done_cv, NULL);
  if (rc != 0) goto fail_work_cv;
  rc = pthread_create(&stream->worker, NULL, md_stream_worker, stream);
  if (rc != 0) goto fail_done_cv;

  md_device* dev = stream->device;
  pthread_mutex_lock(&dev->streams_mu);
  stream->next = dev->streams;
  dev->streams = stream;
  pthread_mutex_unlock(&dev->streams_mu);
  *out = stream;
  return;

fail_done_cv:
  pthread_cond_destroy(&stream->done_cv);
fail_work_cv:
  pthread_cond_destroy(&stream->work_cv);
fail_mutex:
  pthread_mutex_destroy(&stream->mu);
fail:
  free(stream);
  md_set_status(status, rc == EAGAIN ? TF_RESOURCE_EXHAUSTED : TF_INTERNAL,
                "cannot create a " MD_DEVICE_TYPE " stream: %s", strerror(rc));
}

void md_destroy_stream(const SP_Device* device, SP_Stream stream) {
  if (stream == NULL) return;
  md_device* dev = md_device_of(device);

  /* Unlink first so synchronize_all_activity no longer finds the stream,
   * then wait for calls that are still draining it. */
  pthread_mutex_lock(&dev->streams_mu);
  for (SP_Stream* link = &dev->streams; *link != NULL; link = &(*link)->next) {
    if (*link == stream) {
      *link = stream->next;
      break;
    }
  }
  while (stream->sync_users > 0) {
    pthread_cond_wait(&dev->streams_cv, &dev->streams_mu);
  }
  pthread_mutex_unlock(&dev->streams_mu);

  /* The worker drains the queue before it sees the shutdown flag. */
  pthread_mutex_lock(&stream->mu);
  stream->shutting_down = 1;
  pthread_cond_signal(&stream->work_cv);
  pthread_mutex_unlock(&stream->mu);
  pthread_join(stream->worker, NULL);

  while (stream->spare != NULL) {
    md_task* next = stream->spare->next;
    free(stream->spare->stale_arg);
    free(stream->spare);
    stream->spare = next;
  }
  pthread_cond_destroy(&stream->done_cv);
  pthread_cond_destroy(&stream->work_cv);
  pthread_mutex_destroy(&stream->mu);
  free(stream);
}

/*** Stream dependencies ***/

/* A one-shot signal shared by a task on `other` (which fires it) and a task
 * on `dependent` (which waits for it). The last of the two frees it. */
typedef struct md_fence {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int fired;
  atomic_int refs;
} md_fence;

static void md_fence_unref(md_fence* fence) {
  if (atomic_fetch_sub(&fence->refs, 1) == 1) {
    pthread_cond_destroy(&fence->cv);
    pthread_mutex_destroy(&fence->mu);
    free(fence);
  }
}

/* Task argument: the fence (the task arg itself is a small malloc'd box so
 * the queue's free() never touches the shared fence). */
typedef struct md_fence_arg {
  md_fence* fence;
} md_fence_arg;

static void md_fence_fire_task(void* arg, SP_Stream stream) {
  (void)stream;
  md_fence* fence = ((md_fence_arg*)arg)->fence;
  pthread_mutex_lock(&fence->mu);
  fence->fired = 1;
  pthread_cond_broadcast(&fence->cv);
  pthread_mutex_unlock(&fence->mu);
  md_fence_unref(fence);
}

static void md_fence_wait_task(void* arg, SP_Stream stream) {
  (void)stream;
  md_fence* fence = ((md_fence_arg*)arg)->fence;
  pthread_mutex_lock(&fence->mu);
  while (!fence->fired) pthread_cond_wait(&fence->cv, &fence->mu);
  pthread_mutex_unlock(&fence->mu);
  md_fence_unref(fence);
}

void md_create_stream_dependency(const SP_Device* device, SP_Stream dependent,
                                 SP_Stream other, TF_Status* status) {
  (void)device;
  if (dependent == other) return; /* a stream is already ordered with itself */

  md_fence* fence = calloc(1, sizeof(*fence));
  md_fence_arg* fire = malloc(sizeof(*fire));
  md_fence_arg* wait = malloc(sizeof(*wait));
  if (fence == NULL || fire == NULL || wait == NULL ||
      pthread_mutex_init(&fence->mu, NULL) != 0) {
    free(fence);
    free(fire);
    free(wait);
    md_set_status(status, TF_RESOURCE_EXHAUSTED,
                  "out of memory creating a stream dependency");
    return;
  }
  if (pthread_cond_init(&fence->cv, NULL) != 0) {
    pthread_mutex_destroy(&fence->mu);
    free(fence);
    free(fire);
    free(wait);
    md_set_status(status, TF_INTERNAL, "cannot create a condition variable");
    return;
  }
  atomic_init(&fence->refs, 2);
  fire->fence = fence;
  wait->fence = fence;

  if (md_stream_enqueue(other, MD_TASK_CONTROL, md_fence_fire_task, fire) != 0) {
    /* `fire` is freed; nobody will wait either. */
    free(wait);
    md_fence_unref(fence);
    md_fence_unref(fence);
    md_set_status(status, TF_RESOURCE_EXHAUSTED,
                  "cannot enqueue a stream dependency");
    return;
  }
  if (md_stream_enqueue(dependent, MD_TASK_CONTROL, md_fence_wait_task, wait) !=
      0) {
    md_fence_unref(fence); /* the fire task drops the other reference */
    md_set_status(status, TF_RESOURCE_EXHAUSTED,
                  "cannot enqueue a stream dependency");
  }
}

/*** Status and synchronisation ***/

void md_get_stream_status(const SP_Device* device, SP_Stream stream,
                          TF_Status* status) {
  (void)device;
  md_stream_report_error(stream, status, /*clear=*/0);
}

void md_block_host_until_done(const SP_Device* device, SP_Stream stream,
                              TF_Status* status) {
  (void)device;
  md_stream_drain(stream);
  md_stream_report_error(stream, status, /*clear=*/1);
}

void md_synchronize_all_activity(const SP_Device* device, TF_Status* status) {
  md_device* dev = md_device_of(device);
  /* Take a snapshot of the streams (pinned with sync_users so none is freed
   * meanwhile), then drain each without holding the device lock: a host
   * callback may create or destroy streams while we wait. Errors stay on
   * their streams for block_host_until_done to report. */
  pthread_mutex_lock(&dev->streams_mu);
  size_t count = 0;
  for (SP_Stream s = dev->streams; s != NULL; s = s->next) count++;
  SP_Stream* streams = malloc((count > 0 ? count : 1) * sizeof(*streams));
  if (streams == NULL) {
    pthread_mutex_unlock(&dev->streams_mu);
    md_set_status(status, TF_RESOURCE_EXHAUSTED,
                  "out of memory in synchronize_all_activity");
    return;
  }
  count = 0;
  for (SP_Stream s = dev->streams; s != NULL; s = s->next) {
    s->sync_users++;
    streams[count++] = s;
  }
  pthread_mutex_unlock(&dev->streams_mu);

  for (size_t i = 0; i < count; ++i) md_stream_drain(streams[i]);

  pthread_mutex_lock(&dev->streams_mu);
  for (size_t i = 0; i < count; ++i) streams[i]->sync_users--;
  pthread_cond_broadcast(&dev->streams_cv);
  pthread_mutex_unlock(&dev->streams_mu);
  free(streams);
}

/*** Host callbacks ***/

typedef struct md_callback_arg {
  SE_StatusCallbackFn fn;
  void* fn_arg;
} md_callback_arg;

static void md_callback_task(void* arg, SP_Stream stream) {
  md_callback_arg* cb = arg;
  TF_Status* status = TF_NewStatus();
  cb->fn(cb->fn_arg, status);
  if (TF_GetCode(status) != TF_OK) {
    md_stream_set_error(stream, TF_GetCode(status), TF_Message(status));
  }
  TF_DeleteStatus(status);
}

TF_Bool md_host_callback(const SP_Device* device, SP_Stream stream,
                         SE_StatusCallbackFn callback_fn, void* callback_arg) {
  (void)device;
  md_callback_arg* cb = malloc(sizeof(*cb));
  if (cb == NULL) return 0;
  cb->fn = callback_fn;
  cb->fn_arg = callback_arg;
  return md_stream_enqueue(stream, MD_TASK_CONTROL, md_callback_task, cb) == 0;
}

/*** Capture ***/

int md_stream_begin_capture(SP_Stream stream) {
  md_task_list* list = calloc(1, sizeof(*list));
  if (list == NULL) return -1;
  atomic_init(&list->refs, 1);
  pthread_mutex_lock(&stream->mu);
  int busy = stream->capture != NULL;
  if (!busy) {
    stream->capture = list;
    stream->capture_refused = 0;
  }
  pthread_mutex_unlock(&stream->mu);
  if (busy) free(list);
  return busy ? -1 : 0;
}

md_task_list* md_stream_end_capture(SP_Stream stream, TF_Status* status) {
  pthread_mutex_lock(&stream->mu);
  md_task_list* list = stream->capture;
  int refused = stream->capture_refused;
  stream->capture = NULL;
  pthread_mutex_unlock(&stream->mu);
  if (list == NULL) {
    md_set_status(status, TF_FAILED_PRECONDITION,
                  "end_capture: the stream is not capturing");
    return NULL;
  }
  if (refused) {
    md_task_list_unref(list);
    md_set_status(status, TF_UNIMPLEMENTED,
                  "the captured work enqueued an event, timer, host callback "
                  "or stream dependency (or memory ran out): " MD_DEVICE_TYPE
                  " records only kernel and copy work");
    return NULL;
  }
  return list;
}

void md_task_list_ref(md_task_list* list) { atomic_fetch_add(&list->refs, 1); }

void md_task_list_unref(md_task_list* list) {
  if (list == NULL || atomic_fetch_sub(&list->refs, 1) != 1) return;
  for (int i = 0; i < list->count; ++i) free(list->tasks[i].arg);
  free(list->tasks);
  free(list);
}

/* The argument of a replay task: a box, so the queue's free() never touches
 * the shared list. */
typedef struct md_replay_arg {
  md_task_list* list;
} md_replay_arg;

static void md_replay_task(void* arg, SP_Stream stream) {
  md_task_list* list = ((md_replay_arg*)arg)->list;
  for (int i = 0; i < list->count; ++i) list->tasks[i].fn(list->tasks[i].arg, stream);
  md_task_list_unref(list);
}

int md_stream_enqueue_replay(SP_Stream stream, md_task_list* list) {
  md_replay_arg* arg = malloc(sizeof(*arg));
  if (arg == NULL) return -1;
  md_task_list_ref(list);
  arg->list = list;
  if (md_stream_enqueue(stream, MD_TASK_KERNEL, md_replay_task, arg) != 0) {
    md_task_list_unref(list); /* `arg` was freed by the queue */
    return -1;
  }
  return 0;
}
