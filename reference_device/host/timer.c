/* Host reference device: timers.
 *
 * start_timer and stop_timer enqueue tasks that read CLOCK_MONOTONIC when the
 * stream reaches them; nanoseconds() is the difference. */
#include <stdlib.h>

#include "plugin.h"
#include "stream.h"

struct SP_Timer_st {
  _Atomic uint64_t start_ns;
  _Atomic uint64_t stop_ns;
};

/* Argument of the start / stop tasks: where to store the time. */
typedef struct md_timer_arg {
  _Atomic uint64_t* slot;
} md_timer_arg;

void md_create_timer(const SP_Device* device, SP_Timer* out, TF_Status* status) {
  (void)device;
  *out = calloc(1, sizeof(**out));
  if (*out == NULL) {
    md_set_status(status, TF_RESOURCE_EXHAUSTED, "out of memory creating a timer");
  }
}

void md_destroy_timer(const SP_Device* device, SP_Timer timer) {
  (void)device;
  free(timer);
}

static void md_timer_mark_task(void* arg, SP_Stream stream) {
  (void)stream;
  atomic_store(((md_timer_arg*)arg)->slot, md_now_ns());
}

static void md_enqueue_mark(SP_Stream stream, _Atomic uint64_t* slot,
                            TF_Status* status) {
  md_timer_arg* arg = malloc(sizeof(*arg));
  if (arg == NULL) {
    md_set_status(status, TF_RESOURCE_EXHAUSTED, "out of memory for a timer mark");
    return;
  }
  arg->slot = slot;
  if (md_stream_enqueue(stream, MD_TASK_CONTROL, md_timer_mark_task, arg) != 0) {
    md_set_status(status, TF_RESOURCE_EXHAUSTED, "cannot enqueue a timer mark");
  }
}

void md_start_timer(const SP_Device* device, SP_Stream stream, SP_Timer timer,
                    TF_Status* status) {
  (void)device;
  md_enqueue_mark(stream, &timer->start_ns, status);
}

void md_stop_timer(const SP_Device* device, SP_Stream stream, SP_Timer timer,
                   TF_Status* status) {
  (void)device;
  md_enqueue_mark(stream, &timer->stop_ns, status);
}

uint64_t md_timer_nanoseconds(SP_Timer timer) {
  uint64_t start = atomic_load(&timer->start_ns);
  uint64_t stop = atomic_load(&timer->stop_ns);
  return stop > start ? stop - start : 0;
}
