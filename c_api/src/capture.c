/* Device graphs: SE_InitStreamCapture, capturing a thread's kernel work on
 * one device, and replaying it (stream_capture.h).
 *
 * A capture is thread-local: while a thread captures on a device, the kernels
 * it runs there get the device's capture stream from TF_GetStream and
 * allocate from the graph's private pool (allocator.c); every other thread
 * keeps running on the default stream and the shared cache. Device buffers a
 * captured kernel reads that were made before the capture are kept alive
 * (a reference each) until the graph is destroyed, so no address baked into
 * the graph is ever given to anything else. */
#include "internal.h"

#define SPARE_BYTES 4096

struct pg_device_graph {
  pg_device* dev;
  SP_GraphExec exec;
  int has_exec;
  pg_pool* pool;
  pg_buffer** pinned; /* buffers from before the capture the graph reads */
  int num_pinned, cap_pinned;
  void** host; /* host scratch memory released during the capture */
  int num_host, cap_host;
};

/* The capture running in this thread, if any. */
static __thread pg_device_graph* tl_graph;

typedef struct capture_rule {
  const char* name;
  size_t end;
} capture_rule;

#define RULE(F) \
  {"SP_StreamCaptureFns." #F, TF_OFFSET_OF_END(SP_StreamCaptureFns, F)}

static const capture_rule rules[] = {
    RULE(begin_capture), RULE(end_capture), RULE(instantiate),
    RULE(launch),        RULE(destroy_graph), RULE(destroy_graph_exec),
};

static int check_fns(const SP_StreamCaptureFns* f, TF_Status* status) {
  if (f->struct_size == 0) {
    pg_set_status(status, TF_FAILED_PRECONDITION,
                  "SP_StreamCaptureFns.struct_size is 0: the plugin must set "
                  "it to SP_STREAM_CAPTURE_FNS_STRUCT_SIZE");
    return 0;
  }
  for (size_t i = 0; i < sizeof rules / sizeof rules[0]; ++i) {
    size_t offset = rules[i].end - sizeof(void*);
    if (rules[i].end > f->struct_size ||
        *(void* const*)((const char*)f + offset) == NULL) {
      pg_set_status(status, TF_FAILED_PRECONDITION,
                    "%s is NULL or past the plugin's struct_size (%zu): a "
                    "plugin that registers stream capture must provide it",
                    rules[i].name, f->struct_size);
      return 0;
    }
  }
  return 1;
}

int pg_platform_init_capture(pg_platform* p, void* init_fn, TF_Status* status) {
  TF_SetStatus(status, TF_OK, "");
  SE_StreamCaptureRegistrationParams* params =
      calloc(1, sizeof(SE_StreamCaptureRegistrationParams) + SPARE_BYTES);
  SP_StreamCaptureFns* fns = calloc(1, sizeof(SP_StreamCaptureFns) + SPARE_BYTES);
  if (params == NULL || fns == NULL) {
    free(params);
    free(fns);
    pg_set_status(status, TF_RESOURCE_EXHAUSTED, "out of host memory");
    return 0;
  }
  params->struct_size = SE_STREAM_CAPTURE_REGISTRATION_PARAMS_STRUCT_SIZE;
  params->major_version = SP_STREAM_CAPTURE_MAJOR;
  params->minor_version = SP_STREAM_CAPTURE_MINOR;
  params->patch_version = SP_STREAM_CAPTURE_PATCH;
  params->platform = p->platform;
  fns->struct_size = SP_STREAM_CAPTURE_FNS_STRUCT_SIZE;
  params->capture_fns = fns;
  ((void (*)(SE_StreamCaptureRegistrationParams*, TF_Status*))init_fn)(params,
                                                                       status);
  if (TF_GetCode(status) != TF_OK) {
    char msg[1024];
    snprintf(msg, sizeof msg, "SE_InitStreamCapture failed: %s",
             TF_Message(status));
    TF_SetStatus(status, TF_GetCode(status), msg);
    return 0; /* the plugin's state is unknown: keep what it may point at */
  }
  if (params->major_version != SP_STREAM_CAPTURE_MAJOR) {
    pg_set_status(status, TF_FAILED_PRECONDITION,
                  "the plugin was built for stream capture API %d.%d.%d, this "
                  "core implements %d.%d.%d; major versions must match: "
                  "rebuild the plugin against pluggable's stream_capture.h",
                  params->major_version, params->minor_version,
                  params->patch_version, SP_STREAM_CAPTURE_MAJOR,
                  SP_STREAM_CAPTURE_MINOR, SP_STREAM_CAPTURE_PATCH);
    free(params);
    free(fns);
    return 0;
  }
  if (params->capture_fns != fns || !check_fns(fns, status)) {
    if (TF_GetCode(status) == TF_OK)
      pg_set_status(status, TF_FAILED_PRECONDITION,
                    "SE_InitStreamCapture replaced "
                    "SE_StreamCaptureRegistrationParams.capture_fns: fill the "
                    "struct the core provides instead");
    free(params);
    free(fns);
    return 0;
  }
  p->capture_params = params;
  p->capture_fns = fns;
  return 1;
}

/*** Hooks used by kernels.c ***/

const SP_Stream* pg_capture_stream(const pg_device* dev) {
  pg_device_graph* g = tl_graph;
  return g != NULL && g->dev == dev ? &dev->capture_stream : NULL;
}

/* Appends `item` to a growing array of pointers. */
static int push_ptr(void*** items, int* n, int* cap, void* item) {
  if (*n == *cap) {
    int c = *cap ? *cap * 2 : 16;
    void** grown = realloc(*items, (size_t)c * sizeof(void*));
    if (grown == NULL) return 0;
    *items = grown;
    *cap = c;
  }
  (*items)[(*n)++] = item;
  return 1;
}

void pg_capture_note_inputs(pg_device* dev, TF_Tensor* const* inputs, int n) {
  pg_device_graph* g = tl_graph;
  if (g == NULL || g->dev != dev) return;
  for (int i = 0; i < n; ++i) {
    pg_buffer* b = inputs[i] != NULL ? inputs[i]->buf : NULL;
    if (b == NULL || b->device != dev || pg_pool_owns(g->pool, b)) continue;
    int known = 0;
    for (int j = 0; j < g->num_pinned && !known; ++j) known = g->pinned[j] == b;
    if (known) continue;
    if (push_ptr((void***)&g->pinned, &g->num_pinned, &g->cap_pinned, b))
      pg_buffer_ref(b);
  }
}

int pg_capture_keep_host(pg_device* dev, void* data) {
  pg_device_graph* g = tl_graph;
  if (g == NULL || g->dev != dev) return 0;
  return push_ptr(&g->host, &g->num_host, &g->cap_host, data);
}

/*** Capture ***/

/* Releases what a graph holds; the device must be idle. */
static void release_graph(pg_device_graph* g) {
  for (int i = 0; i < g->num_pinned; ++i) pg_buffer_unref(g->pinned[i]);
  for (int i = 0; i < g->num_host; ++i) pg_host_free(g->host[i]);
  free(g->pinned);
  free(g->host);
  pg_pool_release(g->pool);
  free(g);
}

pg_device_graph* pg_capture_begin(pg_device* dev, TF_Status* status) {
  TF_SetStatus(status, TF_OK, "");
  const SP_StreamCaptureFns* fns = dev->platform->capture_fns;
  if (fns == NULL) {
    pg_set_status(status, TF_UNIMPLEMENTED,
                  "%s cannot capture device graphs: its plugin does not "
                  "export SE_InitStreamCapture", dev->name);
    return NULL;
  }
  if (tl_graph != NULL) {
    pg_set_status(status, TF_FAILED_PRECONDITION,
                  "this thread is already capturing a device graph on %s",
                  tl_graph->dev->name);
    return NULL;
  }
  int expected = 0;
  if (!__atomic_compare_exchange_n(&dev->capturing, &expected, 1, 0,
                                   __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    pg_set_status(status, TF_UNAVAILABLE,
                  "another thread is capturing a device graph on %s",
                  dev->name);
    return NULL;
  }
  pg_device_graph* g = calloc(1, sizeof(pg_device_graph));
  if (g != NULL) g->pool = pg_pool_new(dev);
  if (g == NULL || g->pool == NULL) {
    free(g);
    __atomic_store_n(&dev->capturing, 0, __ATOMIC_RELEASE);
    pg_set_status(status, TF_RESOURCE_EXHAUSTED, "out of host memory");
    return NULL;
  }
  g->dev = dev;
  if (!dev->has_capture_stream) { /* its handle may be NULL: a flag says */
    dev->se->create_stream(dev->device, &dev->capture_stream, status);
    dev->has_capture_stream = TF_GetCode(status) == TF_OK;
  }
  if (TF_GetCode(status) == TF_OK)
    fns->begin_capture(dev->device, dev->capture_stream, status);
  if (TF_GetCode(status) != TF_OK) {
    char msg[1024];
    snprintf(msg, sizeof msg, "starting a capture on %s failed: %s",
             dev->name, TF_Message(status));
    TF_SetStatus(status, TF_GetCode(status), msg);
    release_graph(g);
    __atomic_store_n(&dev->capturing, 0, __ATOMIC_RELEASE);
    return NULL;
  }
  tl_graph = g;
  pg_pool_set_active(g->pool);
  return g;
}

void pg_capture_end(pg_device_graph* g, TF_Status* status) {
  TF_SetStatus(status, TF_OK, "");
  if (g == NULL || tl_graph != g) {
    pg_set_status(status, TF_FAILED_PRECONDITION,
                  "pg_capture_end: the graph is not being captured by this "
                  "thread");
    return;
  }
  pg_device* dev = g->dev;
  const SP_StreamCaptureFns* fns = dev->platform->capture_fns;
  tl_graph = NULL;
  pg_pool_set_active(NULL);
  SP_Graph graph = NULL;
  fns->end_capture(dev->device, dev->capture_stream, &graph, status);
  __atomic_store_n(&dev->capturing, 0, __ATOMIC_RELEASE);
  if (TF_GetCode(status) == TF_OK) {
    fns->instantiate(dev->device, graph, &g->exec, status);
    g->has_exec = TF_GetCode(status) == TF_OK;
  }
  /* Whatever end_capture left (any value; destroy_graph ignores NULL). */
  fns->destroy_graph(dev->device, graph);
  if (TF_GetCode(status) != TF_OK) {
    char msg[1024];
    snprintf(msg, sizeof msg, "capturing a device graph on %s failed: %s",
             dev->name, TF_Message(status));
    TF_SetStatus(status, TF_GetCode(status), msg);
  }
}

void pg_device_graph_launch(pg_device_graph* g, TF_Status* status) {
  TF_SetStatus(status, TF_OK, "");
  if (g == NULL || !g->has_exec) {
    pg_set_status(status, TF_FAILED_PRECONDITION,
                  "the device graph was not captured successfully");
    return;
  }
  pg_device* dev = g->dev;
  dev->platform->capture_fns->launch(dev->device, dev->stream, g->exec, status);
}

void pg_device_graph_destroy(pg_device_graph* g) {
  if (g == NULL) return;
  pg_device* dev = g->dev;
  if (tl_graph == g) { /* destroyed while capturing: end the capture first */
    TF_Status* st = TF_NewStatus();
    pg_capture_end(g, st);
    TF_DeleteStatus(st);
  }
  /* Replays may still run: wait for them (errors stay on the streams). */
  TF_Status* st = TF_NewStatus();
  dev->se->synchronize_all_activity(dev->device, st);
  TF_DeleteStatus(st);
  if (g->has_exec)
    dev->platform->capture_fns->destroy_graph_exec(dev->device, g->exec);
  release_graph(g);
}

int64_t pg_device_graph_bytes(const pg_device_graph* g) {
  return g != NULL ? pg_pool_bytes(g->pool) : 0;
}

int pg_device_graph_pinned(const pg_device_graph* g) {
  return g != NULL ? g->num_pinned : 0;
}

int pg_device_graph_blocks(const pg_device_graph* g, void** out,
                           int64_t* sizes, int max) {
  return g != NULL ? pg_pool_addresses(g->pool, out, sizes, max) : 0;
}
