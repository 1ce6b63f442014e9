/* Trace points of the core: spans the profiler shows on the host plane
 * (allocation retries today). A trace point costs one atomic load while
 * nobody profiles; records wait in a bounded queue until the Python
 * profiler drains them at stop. */
#define _GNU_SOURCE
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#define MAX_WAITING 65536

static atomic_int tracing;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pg_trace_record* records; /* grows up to MAX_WAITING */
static int count, cap;
static int64_t dropped;

void pg_trace_enable(int on) { atomic_store(&tracing, on != 0); }

int pg_trace_enabled(void) {
  return atomic_load_explicit(&tracing, memory_order_relaxed);
}

int64_t pg_trace_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Room for one more record (called locked); NULL when full. */
static pg_trace_record* next_slot(void) {
  if (count == cap) {
    int grown = cap == 0 ? 64 : cap * 2;
    if (grown > MAX_WAITING) grown = MAX_WAITING;
    if (grown == cap) return NULL;
    pg_trace_record* more = realloc(records, (size_t)grown * sizeof *records);
    if (more == NULL) return NULL;
    records = more;
    cap = grown;
  }
  return &records[count++];
}

void pg_trace_add(const char* name, const char* device, int64_t start_ns,
                  int64_t end_ns, int64_t value, int ok) {
  pthread_mutex_lock(&mu);
  pg_trace_record* r = next_slot();
  if (r == NULL) {
    dropped++;
  } else {
    pg_copy_str(r->name, sizeof r->name, name);
    pg_copy_str(r->device, sizeof r->device, device != NULL ? device : "");
    r->start_ns = start_ns;
    r->end_ns = end_ns;
    r->tid = (int64_t)syscall(SYS_gettid);
    r->value = value;
    r->ok = ok;
  }
  pthread_mutex_unlock(&mu);
}

int pg_trace_drain(pg_trace_record* out, int max) {
  pthread_mutex_lock(&mu);
  int n = count < max ? count : max;
  /* (records is NULL until the first record: memcpy wants valid pointers
   * even for 0 bytes) */
  if (n > 0) {
    memcpy(out, records, (size_t)n * sizeof *records);
    memmove(records, records + n, (size_t)(count - n) * sizeof *records);
  }
  count -= n;
  pthread_mutex_unlock(&mu);
  return n;
}

int64_t pg_trace_dropped(void) {
  pthread_mutex_lock(&mu);
  int64_t n = dropped;
  dropped = 0;
  pthread_mutex_unlock(&mu);
  return n;
}
