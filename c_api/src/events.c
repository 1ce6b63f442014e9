/* A pool of reusable events per device.
 *
 * The core records an event after every op or graph span (opstate.c) and on the streams
 * that used a freed block (allocator.c); creating and destroying an event
 * each time would cost more than the op. Released events go back to the pool
 * (at most POOL_MAX are kept; more are destroyed). A plugin that answers
 * create_event with OK but a NULL handle is refused: the core could not
 * tell that event from "no event". */
#include "internal.h"

#define POOL_MAX 4096

typedef struct pg_event_pool {
  pthread_mutex_t mu;
  SP_Event* free;
  int n, cap;
} pg_event_pool;

void pg_events_init(pg_device* dev) {
  pg_event_pool* p = calloc(1, sizeof *p);
  if (p == NULL) return;
  pthread_mutex_init(&p->mu, NULL);
  dev->events = p;
}

SP_Event pg_event_acquire(pg_device* dev, TF_Status* status) {
  pg_event_pool* p = dev->events;
  if (p == NULL) {
    pg_set_status(status, TF_RESOURCE_EXHAUSTED, "out of host memory");
    return NULL;
  }
  pthread_mutex_lock(&p->mu);
  SP_Event ev = p->n > 0 ? p->free[--p->n] : NULL;
  pthread_mutex_unlock(&p->mu);
  if (ev != NULL) return ev;
  TF_Status* st = TF_NewStatus();
  dev->se->create_event(dev->device, &ev, st);
  if (TF_GetCode(st) != TF_OK) {
    pg_set_status(status, TF_GetCode(st), "SP_StreamExecutor.create_event on %s "
                  "failed: %s", dev->name, TF_Message(st));
    ev = NULL;
  } else if (ev == NULL) {
    pg_set_status(status, TF_INTERNAL,
                  "SP_StreamExecutor.create_event on %s returned OK but a NULL "
                  "event: a plugin must return a handle for every event it "
                  "creates (or fail with a status)", dev->name);
  }
  TF_DeleteStatus(st);
  return ev;
}

SP_Event pg_event_record_end(pg_device* dev, SP_Event ev) {
  if (ev == NULL) return NULL;
  TF_Status st = {TF_OK, NULL, NULL}; /* on the stack: no malloc per op */
  dev->se->record_event(dev->device, dev->stream, ev, &st);
  if (st.code == TF_OK) return ev; /* (an OK status holds no message) */
  pg_event_release(dev, ev);
  TF_SetStatus(&st, TF_OK, ""); /* frees the message */
  return NULL;
}

void pg_event_release(pg_device* dev, SP_Event ev) {
  pg_event_pool* p = dev->events;
  if (ev == NULL) return;
  pthread_mutex_lock(&p->mu);
  if (p->n == p->cap && p->cap < POOL_MAX) {
    int cap = p->cap ? p->cap * 2 : 64;
    SP_Event* grown = realloc(p->free, (size_t)cap * sizeof(SP_Event));
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
  if (ev != NULL) dev->se->destroy_event(dev->device, ev);
}
