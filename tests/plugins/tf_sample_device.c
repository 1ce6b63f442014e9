/* The ABI behaviour of TensorFlow's sample PluggableDevice plugin (the
 * PluggableDevice tutorial's sample, tensorflow/community
 * rfcs/20200624-pluggable-device-for-tensorflow/sample), written anew for
 * the tests: the same callbacks present and absent, the same handles, the
 * same answers. Only the names differ: device type FAKE_CPU_DEVICE (the
 * sample says MY_DEVICE, which is our host reference plugin's) and platform
 * FAKE_CPU_PLATFORM.
 *
 * What the sample does, and so this plugin:
 *   - one device; create_device sets struct_size, a NULL device_handle and
 *     ordinal 0; create_device_fns sets only struct_size;
 *   - memory is the host heap (64-byte aligned); host memory too;
 *     get_allocator_stats reports bytes_in_use 123; device_memory_usage the
 *     machine's free and total RAM;
 *   - create_stream, create_event and create_timer leave their handle
 *     untouched (NULL), and every stream, event and timer callback does
 *     nothing: get_event_status says SE_EVENT_COMPLETE, all work is done by
 *     the time a call returns (the memcpy_* callbacks copy at once);
 *   - block_host_until_done is set and does nothing; synchronize_all_activity
 *     sets OK;
 *   - host_callback returns 0 (the sample returns TF_OK, which is 0: "not
 *     enqueued") and never runs the callback;
 *   - no mem_zero, memset or memset32 (TensorFlow 2.21 refuses the plugin
 *     for it); build with -DWITH_FILLS to add them (synchronous fills);
 *   - timer nanoseconds reads through the timer handle (the sample would
 *     crash on its NULL timer; here a NULL timer measures 0);
 *   - kernels: Relu for float32, registered as "ReluOp" (the sample also has
 *     Conv2D, left out here);
 *   - a graph optimizer under the older entry point TF_InitGraphPlugin that
 *     turns off remapping and the layout optimizer and returns the graph
 *     unchanged;
 *   - a profiler (TF_InitProfiler) whose collection is one plane named
 *     "/device:GPU:0" with a line "PluginDevice stream" and one event
 *     "DummyKernel" with the stat "SIMD width" = 8.
 *
 * For the tests only: tfsample_calls(what) counts the calls of "relu",
 * "optimize", "start", "stop" and "collect". */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>
#include <time.h>

#include "tensorflow/c/experimental/grappler/grappler.h"
#include "tensorflow/c/experimental/pluggable_profiler/pluggable_profiler.h"
#include "tensorflow/c/experimental/stream_executor/stream_executor.h"
#include "tensorflow/c/kernels.h"

#define DEVICE_TYPE "FAKE_CPU_DEVICE"
#define PLATFORM_NAME "FAKE_CPU_PLATFORM"

struct SP_Timer_st {
  int timer_handle;
};

enum { C_RELU, C_OPTIMIZE, C_START, C_STOP, C_COLLECT, C_COUNT };
static int calls[C_COUNT];

int tfsample_calls(const char* what) {
  static const char* names[C_COUNT] = {"relu", "optimize", "start", "stop", "collect"};
  for (int i = 0; i < C_COUNT; ++i)
    if (strcmp(what, names[i]) == 0) return __atomic_load_n(&calls[i], __ATOMIC_RELAXED);
  return -1;
}

static void count(int which) { __atomic_fetch_add(&calls[which], 1, __ATOMIC_RELAXED); }

/*** Platform and device ***/

static void get_device_count(const SP_Platform* p, int* n, TF_Status* s) {
  (void)p, (void)s;
  *n = 1;
}

static void create_device(const SP_Platform* p, SE_CreateDeviceParams* params,
                          TF_Status* s) {
  (void)p, (void)s;
  params->device->struct_size = SP_DEVICE_STRUCT_SIZE;
  params->device->device_handle = NULL;
  params->device->ordinal = 0;
}

static void destroy_device(const SP_Platform* p, SP_Device* d) {
  (void)p;
  d->device_handle = NULL;
  d->ordinal = -1;
}

static void create_device_fns(const SP_Platform* p, SE_CreateDeviceFnsParams* params,
                              TF_Status* s) {
  (void)p;
  TF_SetStatus(s, TF_OK, "");
  params->device_fns->struct_size = SP_DEVICE_FNS_STRUCT_SIZE;
}

static void destroy_device_fns(const SP_Platform* p, SP_DeviceFns* f) { (void)p, (void)f; }

/*** Memory ***/

static void allocate(const SP_Device* d, uint64_t size, int64_t space,
                     SP_DeviceMemoryBase* mem) {
  (void)d, (void)space;
  mem->struct_size = SP_DEVICE_MEMORY_BASE_STRUCT_SIZE;
  mem->opaque = aligned_alloc(64, (size + 63) & ~(uint64_t)63);
  mem->size = size;
}

static void deallocate(const SP_Device* d, SP_DeviceMemoryBase* mem) {
  (void)d;
  free(mem->opaque);
  mem->opaque = NULL;
  mem->size = 0;
}

static void* host_allocate(const SP_Device* d, uint64_t size) {
  (void)d;
  return aligned_alloc(64, (size + 63) & ~(uint64_t)63);
}

static void host_deallocate(const SP_Device* d, void* mem) {
  (void)d;
  free(mem);
}

static TF_Bool allocator_stats(const SP_Device* d, SP_AllocatorStats* stats) {
  (void)d;
  stats->struct_size = SP_ALLOCATORSTATS_STRUCT_SIZE;
  stats->bytes_in_use = 123;
  return 1;
}

static TF_Bool memory_usage(const SP_Device* d, int64_t* free_bytes, int64_t* total) {
  (void)d;
  struct sysinfo info;
  int err = sysinfo(&info);
  *free_bytes = (int64_t)info.freeram * info.mem_unit;
  *total = (int64_t)info.totalram * info.mem_unit;
  return err == 0;
}

/*** Streams, events, timers: nothing to do, handles left NULL ***/

static void create_stream(const SP_Device* d, SP_Stream* s, TF_Status* st) {
  (void)d, (void)s, (void)st;
}
static void destroy_stream(const SP_Device* d, SP_Stream s) { (void)d, (void)s; }
static void stream_dependency(const SP_Device* d, SP_Stream a, SP_Stream b, TF_Status* st) {
  (void)d, (void)a, (void)b, (void)st;
}
static void stream_status(const SP_Device* d, SP_Stream s, TF_Status* st) {
  (void)d, (void)s, (void)st;
}
static void create_event(const SP_Device* d, SP_Event* e, TF_Status* st) {
  (void)d, (void)e, (void)st;
}
static void destroy_event(const SP_Device* d, SP_Event e) { (void)d, (void)e; }
static SE_EventStatus event_status(const SP_Device* d, SP_Event e) {
  (void)d, (void)e;
  return SE_EVENT_COMPLETE;
}
static void record_event(const SP_Device* d, SP_Stream s, SP_Event e, TF_Status* st) {
  (void)d, (void)s, (void)e, (void)st;
}
static void wait_for_event(const SP_Device* const d, SP_Stream s, SP_Event e,
                           TF_Status* const st) {
  (void)d, (void)s, (void)e, (void)st;
}
static void create_timer(const SP_Device* d, SP_Timer* t, TF_Status* st) {
  (void)d, (void)t, (void)st;
}
static void destroy_timer(const SP_Device* d, SP_Timer t) { (void)d, (void)t; }
static void start_timer(const SP_Device* d, SP_Stream s, SP_Timer t, TF_Status* st) {
  (void)d, (void)s, (void)t, (void)st;
}
static void stop_timer(const SP_Device* d, SP_Stream s, SP_Timer t, TF_Status* st) {
  (void)d, (void)s, (void)t, (void)st;
}

/*** Copies: done at once ***/

static void dtoh(const SP_Device* d, SP_Stream s, void* dst, const SP_DeviceMemoryBase* src,
                 uint64_t size, TF_Status* st) {
  (void)d, (void)s, (void)st;
  memcpy(dst, src->opaque, size);
}
static void htod(const SP_Device* d, SP_Stream s, SP_DeviceMemoryBase* dst, const void* src,
                 uint64_t size, TF_Status* st) {
  (void)d, (void)s, (void)st;
  memcpy(dst->opaque, src, size);
}
static void dtod(const SP_Device* d, SP_Stream s, SP_DeviceMemoryBase* dst,
                 const SP_DeviceMemoryBase* src, uint64_t size, TF_Status* st) {
  (void)d, (void)s, (void)st;
  memcpy(dst->opaque, src->opaque, size);
}
static void sync_dtoh(const SP_Device* d, void* dst, const SP_DeviceMemoryBase* src,
                      uint64_t size, TF_Status* st) {
  (void)d, (void)st;
  memcpy(dst, src->opaque, size);
}
static void sync_htod(const SP_Device* d, SP_DeviceMemoryBase* dst, const void* src,
                      uint64_t size, TF_Status* st) {
  (void)d, (void)st;
  memcpy(dst->opaque, src, size);
}
static void sync_dtod(const SP_Device* d, SP_DeviceMemoryBase* dst,
                      const SP_DeviceMemoryBase* src, uint64_t size, TF_Status* st) {
  (void)d, (void)st;
  memcpy(dst->opaque, src->opaque, size);
}

static void block_for_event(const SP_Device* d, SP_Event e, TF_Status* st) {
  (void)d, (void)e, (void)st;
}
static void block_until_done(const SP_Device* d, SP_Stream s, TF_Status* st) {
  (void)d, (void)s, (void)st;
}
static void sync_all(const SP_Device* d, TF_Status* st) {
  (void)d;
  TF_SetStatus(st, TF_OK, "");
}

/* The sample answers TF_OK (0): the callback is not enqueued. */
static TF_Bool host_callback(const SP_Device* d, SP_Stream s, SE_StatusCallbackFn fn,
                             void* arg) {
  (void)d, (void)s, (void)fn, (void)arg;
  return 0;
}

#ifdef WITH_FILLS
static void mem_zero(const SP_Device* d, SP_Stream s, SP_DeviceMemoryBase* loc,
                     uint64_t size, TF_Status* st) {
  (void)d, (void)s, (void)st;
  memset(loc->opaque, 0, size);
}
static void mem_set(const SP_Device* d, SP_Stream s, SP_DeviceMemoryBase* loc,
                    uint8_t pattern, uint64_t size, TF_Status* st) {
  (void)d, (void)s, (void)st;
  memset(loc->opaque, pattern, size);
}
static void mem_set32(const SP_Device* d, SP_Stream s, SP_DeviceMemoryBase* loc,
                      uint32_t pattern, uint64_t size, TF_Status* st) {
  (void)d, (void)s, (void)st;
  for (uint64_t i = 0; i + 4 <= size; i += 4) memcpy((char*)loc->opaque + i, &pattern, 4);
}
#endif

static uint64_t nanoseconds(SP_Timer t) { return t != NULL ? (uint64_t)t->timer_handle : 0; }

static void create_timer_fns(const SP_Platform* p, SP_TimerFns* f, TF_Status* st) {
  (void)p, (void)st;
  f->nanoseconds = nanoseconds;
}
static void destroy_timer_fns(const SP_Platform* p, SP_TimerFns* f) { (void)p, (void)f; }

static void create_se(const SP_Platform* p, SE_CreateStreamExecutorParams* params,
                      TF_Status* st) {
  (void)p, (void)st;
  SP_StreamExecutor* se = params->stream_executor;
  se->struct_size = SP_STREAMEXECUTOR_STRUCT_SIZE;
  se->allocate = allocate;
  se->deallocate = deallocate;
  se->host_memory_allocate = host_allocate;
  se->host_memory_deallocate = host_deallocate;
  se->get_allocator_stats = allocator_stats;
  se->device_memory_usage = memory_usage;
  se->create_stream = create_stream;
  se->destroy_stream = destroy_stream;
  se->create_stream_dependency = stream_dependency;
  se->get_stream_status = stream_status;
  se->create_event = create_event;
  se->destroy_event = destroy_event;
  se->get_event_status = event_status;
  se->record_event = record_event;
  se->wait_for_event = wait_for_event;
  se->create_timer = create_timer;
  se->destroy_timer = destroy_timer;
  se->start_timer = start_timer;
  se->stop_timer = stop_timer;
  se->memcpy_dtoh = dtoh;
  se->memcpy_htod = htod;
  se->memcpy_dtod = dtod;
  se->sync_memcpy_dtoh = sync_dtoh;
  se->sync_memcpy_htod = sync_htod;
  se->sync_memcpy_dtod = sync_dtod;
  se->block_host_until_done = block_until_done;
  se->block_host_for_event = block_for_event;
  se->synchronize_all_activity = sync_all;
  se->host_callback = host_callback;
#ifdef WITH_FILLS
  se->mem_zero = mem_zero;
  se->memset = mem_set;
  se->memset32 = mem_set32;
#endif
}

static void destroy_se(const SP_Platform* p, SP_StreamExecutor* se) { (void)p, (void)se; }
static void destroy_platform(SP_Platform* p) { (void)p; }
static void destroy_platform_fns(SP_PlatformFns* f) { (void)f; }

void SE_InitPlugin(SE_PlatformRegistrationParams* params, TF_Status* status) {
  (void)status;
  params->platform->struct_size = SP_PLATFORM_STRUCT_SIZE;
  params->platform->name = PLATFORM_NAME;
  params->platform->type = DEVICE_TYPE;
  SP_PlatformFns* f = params->platform_fns;
  f->get_device_count = get_device_count;
  f->create_device = create_device;
  f->destroy_device = destroy_device;
  f->create_device_fns = create_device_fns;
  f->destroy_device_fns = destroy_device_fns;
  f->create_stream_executor = create_se;
  f->destroy_stream_executor = destroy_se;
  f->create_timer_fns = create_timer_fns;
  f->destroy_timer_fns = destroy_timer_fns;
  params->destroy_platform = destroy_platform;
  params->destroy_platform_fns = destroy_platform_fns;
}

/*** Relu ***/

static void relu_compute(void* kernel, TF_OpKernelContext* ctx) {
  (void)kernel;
  count(C_RELU);
  TF_Status* s = TF_NewStatus();
  TF_Tensor* x = NULL;
  TF_Tensor* y = NULL;
  TF_GetInput(ctx, 0, &x, s);
  if (TF_GetCode(s) != TF_OK) {
    TF_OpKernelContext_Failure(ctx, s);
    goto done;
  }
  int64_t n = TF_TensorElementCount(x);
  if (n == 0) goto done; /* as the sample: no output for an empty input */
  int64_t dims[16];
  int nd = TF_NumDims(x);
  for (int i = 0; i < nd && i < 16; ++i) dims[i] = TF_Dim(x, i);
  y = TF_AllocateOutput(ctx, 0, TF_ExpectedOutputDataType(ctx, 0), dims, nd,
                        (size_t)n * sizeof(float), s);
  if (TF_GetCode(s) != TF_OK) {
    TF_OpKernelContext_Failure(ctx, s);
    goto done;
  }
  const float* in = TF_TensorData(x);
  float* out = TF_TensorData(y);
  for (int64_t i = 0; i < n; ++i) out[i] = in[i] > 0 ? in[i] : 0;
done:
  TF_DeleteTensor(x);
  TF_DeleteTensor(y);
  TF_DeleteStatus(s);
}

void TF_InitKernel(void) {
  TF_Status* s = TF_NewStatus();
  TF_KernelBuilder* b = TF_NewKernelBuilder("Relu", DEVICE_TYPE, NULL, relu_compute, NULL);
  TF_KernelBuilder_TypeConstraint(b, "T", TF_FLOAT, s);
  if (TF_GetCode(s) == TF_OK) TF_RegisterKernelBuilder("ReluOp", b, s);
  TF_DeleteStatus(s);
}

/*** Graph optimizer: the graph, unchanged ***/

static int optimizer_state;

static void* optimizer_create(void) { return &optimizer_state; }
static void optimizer_destroy(void* optimizer) { (void)optimizer; }

static void free_bytes(void* data, size_t length) {
  (void)length;
  free(data);
}

static void optimizer_optimize(void* optimizer, const TF_Buffer* graph,
                               const TF_GrapplerItem* item, TF_Buffer* optimized,
                               TF_Status* status) {
  (void)optimizer, (void)item;
  count(C_OPTIMIZE);
  void* copy = malloc(graph->length > 0 ? graph->length : 1);
  if (copy == NULL) {
    TF_SetStatus(status, TF_RESOURCE_EXHAUSTED, "no host memory for the graph");
    return;
  }
  memcpy(copy, graph->data, graph->length);
  optimized->data = copy;
  optimized->length = graph->length;
  optimized->data_deallocator = free_bytes;
}

void TF_InitGraphPlugin(TP_OptimizerRegistrationParams* params, TF_Status* status) {
  (void)status;
  params->struct_size = TP_OPTIMIZER_REGISTRATION_PARAMS_STRUCT_SIZE;
  params->optimizer_configs->struct_size = TP_OPTIMIZER_CONFIGS_STRUCT_SIZE;
  params->optimizer->struct_size = TP_OPTIMIZER_STRUCT_SIZE;
  params->optimizer_configs->remapping = TF_TriState_Off;
  params->optimizer_configs->layout_optimizer = TF_TriState_Off;
  params->device_type = DEVICE_TYPE;
  params->optimizer->create_func = optimizer_create;
  params->optimizer->optimize_func = optimizer_optimize;
  params->optimizer->destroy_func = optimizer_destroy;
}

/*** Profiler: one dummy plane ***/

static uint64_t start_walltime_ns;

/* A protobuf writer over a fixed buffer (the collection is small). */
typedef struct pb {
  uint8_t data[512];
  size_t n;
} pb;

static void pb_varint(pb* b, uint64_t v) {
  do {
    uint8_t byte = v & 0x7f;
    v >>= 7;
    if (b->n < sizeof b->data) b->data[b->n++] = byte | (v ? 0x80 : 0);
  } while (v);
}

static void pb_int(pb* b, int field, uint64_t v) {
  pb_varint(b, (uint64_t)field << 3);
  pb_varint(b, v);
}

static void pb_bytes(pb* b, int field, const void* data, size_t len) {
  pb_varint(b, ((uint64_t)field << 3) | 2);
  pb_varint(b, len);
  for (size_t i = 0; i < len && b->n < sizeof b->data; ++i) b->data[b->n++] = ((const uint8_t*)data)[i];
}

static void pb_msg(pb* b, int field, const pb* m) { pb_bytes(b, field, m->data, m->n); }
static void pb_str(pb* b, int field, const char* s) { pb_bytes(b, field, s, strlen(s)); }

/* XSpace{planes: [XPlane{name "/device:GPU:0", lines: [XLine{name
 * "PluginDevice stream", timestamp_ns: start, events: [XEvent{metadata 1,
 * from start + 10 us to start + 1 ms, stats: [{metadata 1, int64 8}]}]}],
 * event_metadata {1: "DummyKernel"}, stat_metadata {1: "SIMD width"}}]} */
static void build_space(pb* space) {
  pb stat = {0}, event = {0}, line = {0}, plane = {0};
  pb emeta = {0}, eentry = {0}, smeta = {0}, sentry = {0};
  pb_int(&stat, 1, 1);
  pb_int(&stat, 4, 8);
  pb_int(&event, 1, 1);
  pb_int(&event, 2, 10000ull * 1000);
  pb_int(&event, 3, (1000000ull - 10000) * 1000);
  pb_msg(&event, 4, &stat);
  pb_str(&line, 2, "PluginDevice stream");
  pb_int(&line, 3, start_walltime_ns);
  pb_msg(&line, 4, &event);
  pb_int(&emeta, 1, 1);
  pb_str(&emeta, 2, "DummyKernel");
  pb_int(&eentry, 1, 1);
  pb_msg(&eentry, 2, &emeta);
  pb_int(&smeta, 1, 1);
  pb_str(&smeta, 2, "SIMD width");
  pb_int(&sentry, 1, 1);
  pb_msg(&sentry, 2, &smeta);
  pb_str(&plane, 2, "/device:GPU:0");
  pb_msg(&plane, 3, &line);
  pb_msg(&plane, 4, &eentry);
  pb_msg(&plane, 5, &sentry);
  pb_msg(space, 1, &plane);
}

static void profiler_start(const TP_Profiler* profiler, TF_Status* status) {
  (void)profiler, (void)status;
  count(C_START);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  start_walltime_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void profiler_stop(const TP_Profiler* profiler, TF_Status* status) {
  (void)profiler, (void)status;
  count(C_STOP);
}

static void profiler_collect(const TP_Profiler* profiler, uint8_t* buffer, size_t* size,
                             TF_Status* status) {
  (void)profiler, (void)status;
  count(C_COLLECT);
  pb space = {0};
  build_space(&space);
  *size = space.n;
  if (buffer == NULL) return;
  memcpy(buffer, space.data, space.n);
}

static void destroy_profiler(TP_Profiler* profiler) { (void)profiler; }
static void destroy_profiler_fns(TP_ProfilerFns* fns) { (void)fns; }

void TF_InitProfiler(TF_ProfilerRegistrationParams* params, TF_Status* status) {
  (void)status;
  params->struct_size = TF_PROFILER_REGISTRATION_PARAMS_STRUCT_SIZE;
  params->profiler_fns->struct_size = TP_PROFILER_FNS_STRUCT_SIZE;
  params->profiler->type = DEVICE_TYPE;
  params->profiler_fns->start = profiler_start;
  params->profiler_fns->stop = profiler_stop;
  params->profiler_fns->collect_data_xspace = profiler_collect;
  params->destroy_profiler = destroy_profiler;
  params->destroy_profiler_fns = destroy_profiler_fns;
}
