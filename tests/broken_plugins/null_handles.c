/* create_stream, create_event and create_timer report OK but return NULL
 * handles: streams after the device's default one, events once the test
 * calls set_null_events(1) (the core creates events while loading and for
 * every op), timers always. With NULL_DEFAULT_STREAM the default stream
 * comes back NULL too. NULL streams and timers are legal (TensorFlow's
 * sample plugin leaves its streams NULL): the plugin loads, runs ops and
 * makes streams and timers; a NULL event is still refused with a typed
 * error naming create_event. Nothing crashes. */
#include <stddef.h>
#include "stream_executor.h"
static void null_create_stream(const SP_Device* d, SP_Stream* s, TF_Status* st);
static void null_create_event(const SP_Device* d, SP_Event* e, TF_Status* st);
static void null_create_timer(const SP_Device* d, SP_Timer* t, TF_Status* st) {
  (void)d, (void)st;
  *t = NULL;
}
#define MINI_SE_HOOK(se)                  \
  se->create_stream = null_create_stream; \
  se->create_event = null_create_event;   \
  se->create_timer = null_create_timer;
#define MINI_DEVICE_TYPE "NULLH"
#define MINI_PLATFORM_NAME "NULLH_PLATFORM"
#include "mini_device.h"

static int streams_made = 0;
static int null_events = 0;
void set_null_events(int on) { null_events = on; }

static void null_create_stream(const SP_Device* d, SP_Stream* s, TF_Status* st) {
#ifndef NULL_DEFAULT_STREAM
  if (streams_made++ == 0) { /* the default stream: a real one */
    mini_create_stream(d, s, st);
    return;
  }
#endif
  (void)d, (void)st, (void)streams_made;
  *s = NULL;
}

static void null_create_event(const SP_Device* d, SP_Event* e, TF_Status* st) {
  if (!null_events) {
    mini_create_event(d, e, st);
    return;
  }
  *e = NULL;
}
