/* create_stream, create_event and create_timer report OK but return NULL
 * handles: streams after the device's default one, events and timers
 * always. With NULL_DEFAULT_STREAM the default stream
 * comes back NULL too. Every NULL handle is legal (TensorFlow's sample
 * plugin leaves its streams, events and timers NULL): the plugin loads, runs
 * ops and makes streams, events and timers. The plugin is synchronous, so a
 * NULL event (one it keeps no state for) is complete once recorded. Nothing
 * crashes. */
#include <stddef.h>
#include "stream_executor.h"
static void null_create_stream(const SP_Device* d, SP_Stream* s, TF_Status* st);
static void null_create_event(const SP_Device* d, SP_Event* e, TF_Status* st);
static void null_destroy_event(const SP_Device* d, SP_Event e);
static SE_EventStatus null_event_status(const SP_Device* d, SP_Event e);
static void null_record_event(const SP_Device* d, SP_Stream s, SP_Event e,
                              TF_Status* st);
static void null_block_for_event(const SP_Device* d, SP_Event e, TF_Status* st);
static void null_create_timer(const SP_Device* d, SP_Timer* t, TF_Status* st) {
  (void)d, (void)st;
  *t = NULL;
}
#define MINI_SE_HOOK(se)                  \
  se->create_stream = null_create_stream; \
  se->create_event = null_create_event;   \
  se->destroy_event = null_destroy_event; \
  se->get_event_status = null_event_status; \
  se->record_event = null_record_event;   \
  se->block_host_for_event = null_block_for_event; \
  se->create_timer = null_create_timer;
#define MINI_DEVICE_TYPE "NULLH"
#define MINI_PLATFORM_NAME "NULLH_PLATFORM"
#include "mini_device.h"

static int streams_made = 0;
int null_streams_made(void) { return streams_made; }

static void null_create_stream(const SP_Device* d, SP_Stream* s, TF_Status* st) {
#ifndef NULL_DEFAULT_STREAM
  if (streams_made++ == 0) { /* the default stream: a real one */
    mini_create_stream(d, s, st);
    return;
  }
#else
  streams_made++;
#endif
  (void)d, (void)st;
  *s = NULL;
}

static void null_create_event(const SP_Device* d, SP_Event* e, TF_Status* st) {
  (void)d, (void)st;
  *e = NULL;
}

/* Events are NULL: work is done when it is enqueued, so a NULL event is
 * complete. */
static void null_destroy_event(const SP_Device* d, SP_Event e) {
  if (e != NULL) mini_destroy_event(d, e);
}

static SE_EventStatus null_event_status(const SP_Device* d, SP_Event e) {
  return e != NULL ? mini_event_status(d, e) : SE_EVENT_COMPLETE;
}

static void null_record_event(const SP_Device* d, SP_Stream s, SP_Event e,
                              TF_Status* st) {
  if (e != NULL) mini_record_event(d, s, e, st);
}

static void null_block_for_event(const SP_Device* d, SP_Event e, TF_Status* st) {
  if (e != NULL) mini_block_for_event(d, e, st);
}
