/* A pool of reusable events per device.
 *
 * The core records an event after every op or graph span (opstate.c) and on
 * the streams that used a freed block (allocator.c); creating and destroying
 * an event each time would cost more than the op. Released events go back to
 * the pool (at most POOL_MAX are kept; more are destroyed).
 *
 * The handle belongs to the plugin and any value is legal, NULL or one
 * shared by every event included (TensorFlow's sample plugin leaves its
 * events NULL): the core holds each event in a pg_event of its own, pooled
 * with its handle, and "has an event" is a non-NULL pg_event*, never a test
 * of the handle. */
#include "internal.h"

#define POOL_MAX 4096

typedef struct pg_event_pool {
  pthread_mutex_t mu;
  pg_event** free;
  int n, cap;
} pg_event_pool;

void pg_events_init(pg_device* dev) {
  pg_event_pool* p = calloc(1, sizeof *p);
  if (p == NULL) return;
  pthread_mutex_init(&p->mu, NULL);
  dev->events = p;
}

pg_event* pg_event_acquire(pg_device* dev, TF_Status* status) {
  pg_event_pool* p = dev->events;
  if (p == NULL) {
    pg_set_status(status, TF_RESOURCE_EXHAUSTED, "out of host memory");
    return NULL;
  }
  pthread_mutex_lock(&p->mu);
  pg_event* ev = p->n > 0 ? p->free[--p->n] : NULL;
  pthread_mutex_unlock(&p->mu);
  if (ev != NULL) return ev;
  ev = malloc(sizeof *ev);
  if (ev == NULL) {
    pg_set_status(status, TF_RESOURCE_EXHAUSTED, "out of host memory");
    return NULL;
  }
  ev->handle = NULL;
  TF_Status* st = TF_NewStatus();
  dev->se->create_event(dev->device, &ev->handle, st);
  if (TF_GetCode(st) != TF_OK) {
    pg_set_status(status, TF_GetCode(st), "SP_StreamExecutor.create_event on %s "
                  "failed: %s", dev->name, TF_Message(st));
    free(ev);
    ev = NULL;
  }
  TF_DeleteStatus(st);
  return ev;
}

pg_event* pg_event_record_end(pg_device* dev, pg_event* ev) {
  if (ev == NULL) return NULL;
  TF_Status st = {TF_OK, NULL, NULL}; /* on the stack: no malloc per op */
  dev->se->record_event(dev->device, dev->stream, ev->handle, &st);
  if (st.code == TF_OK) return ev; /* (an OK status holds no message) */
  pg_event_release(dev, ev);
  TF_SetStatus(&st, TF_OK, ""); /* frees the message */
  return NULL;
}

void pg_event_release(pg_device* dev, pg_event* ev) {
  pg_event_pool* p = dev->events;
  if (ev == NULL) return;
  pthread_mutex_lock(&p->mu);
  if (p->n == p->cap && p->cap < POOL_MAX) {
    int cap = p->cap ? p->cap * 2 : 64;
    pg_event** grown = realloc(p->free, (size_t)cap * sizeof(pg_event*));
    if (grown != NULL) {
      p->free = grown;
      p->cap = cap;
    }
  }
  if (p->n < p->cap) {
    p->free[p->n++] = ev;
    ev = NULL;
  }
  pthread_mutex_unlock(&p->mu);
  if (ev != NULL) {
    dev->se->destroy_event(dev->device, ev->handle);
    free(ev);
  }
}
