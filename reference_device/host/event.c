/* Host reference device: events.
 *
 * An event counts how often it was recorded (`recorded`, bumped on the host
 * by record_event) and which recording the streams have reached
 * (`reached`, set by the record marker). Each recording is one generation, so
 * recording an event again simply targets a newer generation: waiters that
 * captured an older generation are released as soon as that one completes.
 *
 * A recording that completes reports an error when a task of its stream
 * failed since the previous recording on that stream (not merely because the
 * stream still holds an older error): the core uses this to give an
 * asynchronous error to the op that caused it.
 *
 * An event is reference-counted: its owner (create/destroy) and each record
 * marker and wait task not yet run hold a reference, so destroying an event
 * whose recordings or waits are still queued (as CUDA allows) frees it only
 * once the last of them has run. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "plugin.h"
#include "stream.h"

struct SP_Event_st {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  /* Generation of the latest record_event (0: never); atomic, so that
   * recording (once per op) does not take the mutex. */
  _Atomic uint64_t recorded;
  /* The latest generation a stream has reached, shifted left by one, with
   * the low bit set if the stream had an error when it reached it: one word,
   * so that reading an event's status takes no lock. */
  _Atomic uint64_t reached;
  /* Threads blocked in md_event_wait: completing an event takes the mutex
   * (to wake them) only when there are some. */
  atomic_int waiters;
  /* The owner's reference and one per queued record marker or wait task. */
  atomic_int refs;
};

static void md_event_unref(SP_Event event) {
  if (atomic_fetch_sub(&event->refs, 1) != 1) return;
  pthread_cond_destroy(&event->cv);
  pthread_mutex_destroy(&event->mu);
  free(event);
}

/* Argument of the record and wait tasks. */
typedef struct md_event_arg {
  SP_Event event;
  uint64_t generation;
} md_event_arg;

void md_create_event(const SP_Device* device, SP_Event* out,
                     TF_Status* status) {
  (void)device;
  *out = NULL;
  SP_Event event = calloc(1, sizeof(*event));
  if (event == NULL) {
    md_set_status(status, TF_RESOURCE_EXHAUSTED, "out of memory creating an event");
    return;
  }
  if (pthread_mutex_init(&event->mu, NULL) != 0) {
    free(event);
    md_set_status(status, TF_INTERNAL, "cannot create an event mutex");
    return;
  }
  if (pthread_cond_init(&event->cv, NULL) != 0) {
    pthread_mutex_destroy(&event->mu);
    free(event);
    md_set_status(status, TF_INTERNAL, "cannot create an event condition");
    return;
  }
  atomic_init(&event->refs, 1);
  *out = event;
}

void md_destroy_event(const SP_Device* device, SP_Event event) {
  (void)device;
  if (event == NULL) return;
  md_event_unref(event); /* queued records and waits keep it until they ran */
}

SE_EventStatus md_get_event_status(const SP_Device* device, SP_Event event) {
  (void)device;
  uint64_t recorded = atomic_load(&event->recorded);
  uint64_t reached = atomic_load(&event->reached);
  if (recorded == 0) return SE_EVENT_UNKNOWN;
  if ((reached >> 1) < recorded) return SE_EVENT_PENDING;
  return (reached & 1) ? SE_EVENT_ERROR : SE_EVENT_COMPLETE;
}

/* Marks generation `generation` (and every older one) complete. The store
 * of `reached` comes before the read of `waiters`, and a waiter counts
 * itself before it reads `reached` (both sequentially consistent): either
 * the waiter sees the new generation or this wakes it. */
static void md_event_complete(SP_Event event, uint64_t generation, int error) {
  uint64_t old = atomic_load(&event->reached);
  uint64_t now = generation << 1 | (error ? 1u : 0u);
  while ((old >> 1) < generation &&
         !atomic_compare_exchange_weak(&event->reached, &old, now)) {
  }
  if (atomic_load(&event->waiters) > 0) {
    pthread_mutex_lock(&event->mu);
    pthread_cond_broadcast(&event->cv);
    pthread_mutex_unlock(&event->mu);
  }
}

_Static_assert(sizeof(md_event_arg) <= MD_MARKER_ARG_SIZE,
               "a record marker carries its md_event_arg");

static void md_record_marker(void* arg, int failed) {
  md_event_arg* a = arg;
  md_event_complete(a->event, a->generation, failed);
  md_event_unref(a->event);
}

void md_record_event(const SP_Device* device, SP_Stream stream, SP_Event event,
                     TF_Status* status) {
  (void)device;
  md_event_arg arg = {event, atomic_fetch_add(&event->recorded, 1) + 1};
  atomic_fetch_add(&event->refs, 1); /* the marker's */
  if (md_stream_add_marker(stream, md_record_marker, &arg, sizeof arg) != 0) {
    /* Never leave waiters hanging on a generation no task will complete. */
    md_event_complete(event, arg.generation, /*error=*/1);
    md_event_unref(event);
    md_set_status(status, TF_RESOURCE_EXHAUSTED, "cannot enqueue an event record");
  }
}

/* Blocks the calling thread until `generation` of `event` completed. */
static void md_event_wait(SP_Event event, uint64_t generation) {
  if ((atomic_load(&event->reached) >> 1) >= generation) return;
  pthread_mutex_lock(&event->mu);
  atomic_fetch_add(&event->waiters, 1);
  while ((atomic_load(&event->reached) >> 1) < generation)
    pthread_cond_wait(&event->cv, &event->mu);
  atomic_fetch_sub(&event->waiters, 1);
  pthread_mutex_unlock(&event->mu);
}

static void md_wait_task(void* arg, SP_Stream stream) {
  (void)stream;
  md_event_arg* a = arg;
  md_event_wait(a->event, a->generation);
  md_event_unref(a->event);
}

void md_wait_for_event(const SP_Device* const device, SP_Stream stream,
                       SP_Event event, TF_Status* const status) {
  (void)device;
  uint64_t generation = atomic_load(&event->recorded);
  if (generation == 0) return; /* never recorded: nothing to wait for */

  md_event_arg* arg = malloc(sizeof(*arg));
  if (arg == NULL) {
    md_set_status(status, TF_RESOURCE_EXHAUSTED, "out of memory waiting for an event");
    return;
  }
  arg->event = event;
  arg->generation = generation;
  atomic_fetch_add(&event->refs, 1); /* the wait task's */
  if (md_stream_enqueue(stream, MD_TASK_CONTROL, md_wait_task, arg) != 0) {
    md_event_unref(event); /* (the queue freed `arg` without running it) */
    md_set_status(status, TF_RESOURCE_EXHAUSTED, "cannot enqueue an event wait");
  }
}

void md_block_host_for_event(const SP_Device* device, SP_Event event,
                             TF_Status* status) {
  (void)device;
  uint64_t generation = atomic_load(&event->recorded);
  if (generation == 0) {
    md_set_status(status, TF_FAILED_PRECONDITION,
                  "the event was never recorded on a stream");
    return;
  }
  md_event_wait(event, generation);
}
