/* A test device ("NULL_DEVICE") whose every handle is NULL: SP_Stream,
 * SP_Event, SP_Timer and SP_Device.device_handle, for both of its devices.
 * Built with -DSHARED_HANDLES instead, every stream, event and timer is
 * the same non-NULL value and both devices share one device_handle.
 *
 * TensorFlow allows this, so the core must too: it keys no state of its
 * own on a handle's value. The plugin keeps the state the handles would
 * name itself, the way a device with one hardware queue would:
 *
 *   - one FIFO of work for the whole plugin, run by a worker thread (all
 *     streams of both devices feed it, so work is asynchronous and runs in
 *     the order it was enqueued);
 *   - an event cannot be told apart from another, so it is pending while
 *     any work enqueued before the question is unfinished, and complete
 *     once the queue has passed it (a wait is for everything enqueued so
 *     far);
 *   - one stream error for the queue (the first failure of a host
 *     callback), reported by get_stream_status and cleared by
 *     block_host_until_done;
 *   - one pair of timer marks, taken by the worker: nanoseconds() answers
 *     for the last interval measured.
 *
 * Kernels (float32, on /device:NULL_DEVICE:N): Relu, Neg and Square, each
 * enqueued on the queue (TF_GetStream gives the NULL stream); with
 * `nulldev_hold(1)` the queue does not start new work until
 * `nulldev_hold(0)`, so a test can see work pending. `nulldev_done()` counts
 * the tasks the worker has finished. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels.h"
#include "stream_executor.h"

#define NUM_DEVICES 2

#ifdef SHARED_HANDLES
/* One value for every handle of a kind, never dereferenced by the plugin. */
static char shared_handle;
#define HANDLE(type) ((type)(void*)&shared_handle)
#else
#define HANDLE(type) ((type)NULL)
#endif

/*** The plugin's one work queue ***/

typedef struct task {
  void (*run)(struct task*);
  struct task* next;
  /* arguments of the built-in tasks */
  void* dst;
  const void* src;
  uint64_t size;
  int kind;
  SE_StatusCallbackFn fn;
  void* arg;
} task;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work_cv = PTHREAD_COND_INITIALIZER;
static pthread_cond_t done_cv = PTHREAD_COND_INITIALIZER;
static pthread_once_t worker_once = PTHREAD_ONCE_INIT;
static task* head;
static task* tail;
static uint64_t enqueued, finished; /* tasks, under mu */
static int held;                    /* nulldev_hold(1): start nothing new */
static TF_Code error_code = TF_OK;  /* the queue's first error, under mu */
static char error_msg[256];
static uint64_t mark_start_ns, mark_stop_ns; /* the timer marks */

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void* worker(void* unused) {
  (void)unused;
  pthread_mutex_lock(&mu);
  for (;;) {
    while (head == NULL || held) pthread_cond_wait(&work_cv, &mu);
    task* t = head;
    head = t->next;
    if (head == NULL) tail = NULL;
    pthread_mutex_unlock(&mu);
    t->run(t);
    free(t);
    pthread_mutex_lock(&mu);
    finished++;
    pthread_cond_broadcast(&done_cv);
  }
  return NULL;
}

static void start_worker(void) {
  pthread_t th;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_create(&th, &attr, worker, NULL);
  pthread_attr_destroy(&attr);
}

/* Enqueues `t` (malloc'ed; freed by the worker). */
static int enqueue(task* t, TF_Status* status) {
  if (t == NULL) {
    if (status != NULL) TF_SetStatus(status, TF_RESOURCE_EXHAUSTED, "no host memory");
    return 0;
  }
  pthread_once(&worker_once, start_worker);
  t->next = NULL;
  pthread_mutex_lock(&mu);
  if (tail != NULL) tail->next = t;
  else head = t;
  tail = t;
  enqueued++;
  pthread_cond_signal(&work_cv);
  pthread_mutex_unlock(&mu);
  return 1;
}

static task* new_task(void (*run)(task*)) {
  task* t = calloc(1, sizeof *t);
  if (t != NULL) t->run = run;
  return t;
}

/* Waits until every task enqueued before the call has finished. */
static void drain(void) {
  pthread_mutex_lock(&mu);
  uint64_t target = enqueued;
  while (finished < target) pthread_cond_wait(&done_cv, &mu);
  pthread_mutex_unlock(&mu);
}

void nulldev_hold(int on) {
  pthread_mutex_lock(&mu);
  held = on;
  pthread_cond_broadcast(&work_cv);
  pthread_mutex_unlock(&mu);
}

uint64_t nulldev_done(void) {
  pthread_mutex_lock(&mu);
  uint64_t n = finished;
  pthread_mutex_unlock(&mu);
  return n;
}

/*** Tasks ***/

static void run_copy(task* t) { memcpy(t->dst, t->src, t->size); }

static void run_fill(task* t) {
  uint8_t* d = t->dst;
  if (t->kind == 4) {
    uint32_t pattern = (uint32_t)(uintptr_t)t->src;
    for (uint64_t i = 0; i + 4 <= t->size; i += 4) memcpy(d + i, &pattern, 4);
  } else {
    memset(d, (int)(uintptr_t)t->src, t->size);
  }
}

static void run_mark(task* t) {
  uint64_t ns = now_ns();
  pthread_mutex_lock(&mu);
  if (t->kind == 0) mark_start_ns = ns;
  else mark_stop_ns = ns;
  pthread_mutex_unlock(&mu);
}

static void run_callback(task* t) {
  TF_Status* s = TF_NewStatus();
  t->fn(t->arg, s);
  if (TF_GetCode(s) != TF_OK) {
    pthread_mutex_lock(&mu);
    if (error_code == TF_OK) {
      error_code = TF_GetCode(s);
      strncpy(error_msg, TF_Message(s), sizeof error_msg - 1);
      error_msg[sizeof error_msg - 1] = '\0';
    }
    pthread_mutex_unlock(&mu);
  }
  TF_DeleteStatus(s);
}

enum { K_RELU, K_NEG, K_SQUARE };

static void run_kernel(task* t) {
  float* y = t->dst;
  const float* a = t->src;
  for (uint64_t i = 0; i < t->size; ++i) {
    switch (t->kind) {
      case K_RELU: y[i] = a[i] > 0.0f ? a[i] : 0.0f; break;
      case K_NEG: y[i] = -a[i]; break;
      default: y[i] = a[i] * a[i]; break;
    }
  }
}

/*** Platform and devices ***/

static void get_device_count(const SP_Platform* p, int* n, TF_Status* s) {
  (void)p, (void)s;
  *n = NUM_DEVICES;
}

static void create_device(const SP_Platform* p, SE_CreateDeviceParams* params,
                          TF_Status* s) {
  (void)p, (void)s;
  params->device->struct_size = SP_DEVICE_STRUCT_SIZE;
  params->device->device_handle = HANDLE(void*);
  params->device->hardware_name = "null-handle test device";
}

static void destroy_device(const SP_Platform* p, SP_Device* d) {
  (void)p;
  d->device_handle = NULL;
}

static void create_device_fns(const SP_Platform* p, SE_CreateDeviceFnsParams* params,
                              TF_Status* s) {
  (void)p, (void)s;
  params->device_fns->struct_size = SP_DEVICE_FNS_STRUCT_SIZE;
}

static void destroy_device_fns(const SP_Platform* p, SP_DeviceFns* f) { (void)p, (void)f; }

/*** Memory ***/

static pthread_mutex_t stats_mu = PTHREAD_MUTEX_INITIALIZER;
static int64_t bytes_in_use[NUM_DEVICES], peak_bytes[NUM_DEVICES], num_allocs[NUM_DEVICES],
    largest_alloc[NUM_DEVICES];

static void allocate(const SP_Device* d, uint64_t size, int64_t space,
                     SP_DeviceMemoryBase* mem) {
  (void)space;
  mem->struct_size = SP_DEVICE_MEMORY_BASE_STRUCT_SIZE;
  mem->opaque = size != 0 ? aligned_alloc(64, (size + 63) & ~(uint64_t)63) : NULL;
  mem->size = mem->opaque != NULL ? size : 0;
  if (mem->opaque != NULL && d->ordinal >= 0 && d->ordinal < NUM_DEVICES) {
    pthread_mutex_lock(&stats_mu);
    bytes_in_use[d->ordinal] += (int64_t)size;
    if (bytes_in_use[d->ordinal] > peak_bytes[d->ordinal])
      peak_bytes[d->ordinal] = bytes_in_use[d->ordinal];
    num_allocs[d->ordinal] += 1;
    if ((int64_t)size > largest_alloc[d->ordinal]) largest_alloc[d->ordinal] = (int64_t)size;
    pthread_mutex_unlock(&stats_mu);
  }
}

static void deallocate(const SP_Device* d, SP_DeviceMemoryBase* mem) {
  if (mem->opaque != NULL && d->ordinal >= 0 && d->ordinal < NUM_DEVICES) {
    pthread_mutex_lock(&stats_mu);
    bytes_in_use[d->ordinal] -= (int64_t)mem->size;
    pthread_mutex_unlock(&stats_mu);
  }
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

static TF_Bool allocator_stats(const SP_Device* d, SP_AllocatorStats* st) {
  if (d->ordinal < 0 || d->ordinal >= NUM_DEVICES) return 0;
  st->struct_size = SP_ALLOCATORSTATS_STRUCT_SIZE;
  pthread_mutex_lock(&stats_mu);
  st->num_allocs = num_allocs[d->ordinal];
  st->bytes_in_use = bytes_in_use[d->ordinal];
  st->peak_bytes_in_use = peak_bytes[d->ordinal];
  st->largest_alloc_size = largest_alloc[d->ordinal];
  pthread_mutex_unlock(&stats_mu);
  return 1;
}

static TF_Bool memory_usage(const SP_Device* d, int64_t* free_bytes, int64_t* total) {
  (void)d;
  *total = (int64_t)1 << 32;
  *free_bytes = *total;
  return 1;
}

/*** Streams, events, timers ***/

static void create_stream(const SP_Device* d, SP_Stream* s, TF_Status* st) {
  (void)d, (void)st;
  *s = HANDLE(SP_Stream);
}

static void destroy_stream(const SP_Device* d, SP_Stream s) { (void)d, (void)s; }

/* One queue: work on any stream already follows work enqueued before it. */
static void stream_dependency(const SP_Device* d, SP_Stream a, SP_Stream b,
                              TF_Status* st) {
  (void)d, (void)a, (void)b, (void)st;
}

static void stream_status(const SP_Device* d, SP_Stream s, TF_Status* st) {
  (void)d, (void)s;
  pthread_mutex_lock(&mu);
  if (error_code != TF_OK) TF_SetStatus(st, error_code, error_msg);
  pthread_mutex_unlock(&mu);
}

static void create_event(const SP_Device* d, SP_Event* e, TF_Status* st) {
  (void)d, (void)st;
  *e = HANDLE(SP_Event);
}

static void destroy_event(const SP_Device* d, SP_Event e) { (void)d, (void)e; }

static SE_EventStatus event_status(const SP_Device* d, SP_Event e) {
  (void)d, (void)e;
  pthread_mutex_lock(&mu);
  int pending = finished < enqueued;
  pthread_mutex_unlock(&mu);
  return pending ? SE_EVENT_PENDING : SE_EVENT_COMPLETE;
}

static void record_event(const SP_Device* d, SP_Stream s, SP_Event e, TF_Status* st) {
  (void)d, (void)s, (void)e, (void)st;
}

static void wait_for_event(const SP_Device* const d, SP_Stream s, SP_Event e,
                           TF_Status* const st) {
  (void)d, (void)s, (void)e, (void)st;
}

static void block_for_event(const SP_Device* d, SP_Event e, TF_Status* st) {
  (void)d, (void)e, (void)st;
  drain();
}

static void block_until_done(const SP_Device* d, SP_Stream s, TF_Status* st) {
  (void)d, (void)s;
  drain();
  pthread_mutex_lock(&mu);
  if (error_code != TF_OK) TF_SetStatus(st, error_code, error_msg);
  error_code = TF_OK;
  error_msg[0] = '\0';
  pthread_mutex_unlock(&mu);
}

static void sync_all(const SP_Device* d, TF_Status* st) {
  (void)d, (void)st;
  drain();
}

static void create_timer(const SP_Device* d, SP_Timer* t, TF_Status* st) {
  (void)d, (void)st;
  *t = HANDLE(SP_Timer);
}

static void destroy_timer(const SP_Device* d, SP_Timer t) { (void)d, (void)t; }

static void mark(int which, TF_Status* st) {
  task* t = new_task(run_mark);
  if (t != NULL) t->kind = which;
  enqueue(t, st);
}

static void start_timer(const SP_Device* d, SP_Stream s, SP_Timer t, TF_Status* st) {
  (void)d, (void)s, (void)t;
  mark(0, st);
}

static void stop_timer(const SP_Device* d, SP_Stream s, SP_Timer t, TF_Status* st) {
  (void)d, (void)s, (void)t;
  mark(1, st);
}

static uint64_t timer_ns(SP_Timer t) {
  (void)t;
  pthread_mutex_lock(&mu);
  uint64_t ns = mark_stop_ns > mark_start_ns ? mark_stop_ns - mark_start_ns : 1;
  pthread_mutex_unlock(&mu);
  return ns;
}

static void create_timer_fns(const SP_Platform* p, SP_TimerFns* f, TF_Status* st) {
  (void)p, (void)st;
  f->struct_size = SP_TIMER_FNS_STRUCT_SIZE;
  f->nanoseconds = timer_ns;
}

static void destroy_timer_fns(const SP_Platform* p, SP_TimerFns* f) { (void)p, (void)f; }

/*** Copies and fills ***/

static void copy_task(void* dst, const void* src, uint64_t size, TF_Status* st) {
  if (size == 0) return;
  task* t = new_task(run_copy);
  if (t != NULL) {
    t->dst = dst;
    t->src = src;
    t->size = size;
  }
  enqueue(t, st);
}

static void dtoh(const SP_Device* d, SP_Stream s, void* dst,
                 const SP_DeviceMemoryBase* src, uint64_t size, TF_Status* st) {
  (void)d, (void)s;
  copy_task(dst, src->opaque, size, st);
}

static void htod(const SP_Device* d, SP_Stream s, SP_DeviceMemoryBase* dst,
                 const void* src, uint64_t size, TF_Status* st) {
  (void)d, (void)s;
  copy_task(dst->opaque, src, size, st);
}

static void dtod(const SP_Device* d, SP_Stream s, SP_DeviceMemoryBase* dst,
                 const SP_DeviceMemoryBase* src, uint64_t size, TF_Status* st) {
  (void)d, (void)s;
  copy_task(dst->opaque, src->opaque, size, st);
}

static void sync_dtoh(const SP_Device* d, void* dst, const SP_DeviceMemoryBase* src,
                      uint64_t size, TF_Status* st) {
  (void)d, (void)st;
  drain();
  if (size != 0) memcpy(dst, src->opaque, size);
}

static void sync_htod(const SP_Device* d, SP_DeviceMemoryBase* dst, const void* src,
                      uint64_t size, TF_Status* st) {
  (void)d, (void)st;
  drain();
  if (size != 0) memcpy(dst->opaque, src, size);
}

static void sync_dtod(const SP_Device* d, SP_DeviceMemoryBase* dst,
                      const SP_DeviceMemoryBase* src, uint64_t size, TF_Status* st) {
  (void)d, (void)st;
  drain();
  if (size != 0) memcpy(dst->opaque, src->opaque, size);
}

static void fill(SP_DeviceMemoryBase* loc, uint32_t value, int kind, uint64_t size,
                 TF_Status* st) {
  if (size == 0) return;
  task* t = new_task(run_fill);
  if (t != NULL) {
    t->dst = loc->opaque;
    t->src = (const void*)(uintptr_t)value;
    t->kind = kind;
    t->size = size;
  }
  enqueue(t, st);
}

static void mem_zero(const SP_Device* d, SP_Stream s, SP_DeviceMemoryBase* loc,
                     uint64_t size, TF_Status* st) {
  (void)d, (void)s;
  fill(loc, 0, 1, size, st);
}

static void mem_set(const SP_Device* d, SP_Stream s, SP_DeviceMemoryBase* loc,
                    uint8_t pattern, uint64_t size, TF_Status* st) {
  (void)d, (void)s;
  fill(loc, pattern, 1, size, st);
}

static void mem_set32(const SP_Device* d, SP_Stream s, SP_DeviceMemoryBase* loc,
                      uint32_t pattern, uint64_t size, TF_Status* st) {
  (void)d, (void)s;
  fill(loc, pattern, 4, size, st);
}

static TF_Bool host_callback(const SP_Device* d, SP_Stream s, SE_StatusCallbackFn fn,
                             void* arg) {
  (void)d, (void)s;
  task* t = new_task(run_callback);
  if (t == NULL) return 0;
  t->fn = fn;
  t->arg = arg;
  return (TF_Bool)enqueue(t, NULL);
}

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
  se->block_host_for_event = block_for_event;
  se->block_host_until_done = block_until_done;
  se->synchronize_all_activity = sync_all;
  se->mem_zero = mem_zero;
  se->memset = mem_set;
  se->memset32 = mem_set32;
  se->host_callback = host_callback;
}

static void destroy_se(const SP_Platform* p, SP_StreamExecutor* se) { (void)p, (void)se; }
static void destroy_platform(SP_Platform* p) { (void)p; }
static void destroy_platform_fns(SP_PlatformFns* f) { (void)f; }

void SE_InitPlugin(SE_PlatformRegistrationParams* params, TF_Status* status) {
  (void)status;
  params->platform->struct_size = SP_PLATFORM_STRUCT_SIZE;
  params->platform->name = "NULL_PLATFORM";
  params->platform->type = "NULL_DEVICE";
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

/*** Kernels ***/

/* Enqueues y = op(a) over the input's elements; the input's memory is read
 * by the queue, in order with the work that wrote it. */
static void compute(TF_OpKernelContext* ctx, int kind) {
  TF_Status* s = TF_NewStatus();
  TF_Tensor* a = NULL;
  TF_Tensor* y = NULL;
  TF_GetInput(ctx, 0, &a, s);
  if (TF_GetCode(s) == TF_OK) {
    int64_t dims[16];
    int nd = TF_NumDims(a);
    for (int i = 0; i < nd && i < 16; ++i) dims[i] = TF_Dim(a, i);
    y = TF_AllocateOutput(ctx, 0, TF_FLOAT, dims, nd, TF_TensorByteSize(a), s);
  }
  int64_t n = a != NULL ? TF_TensorElementCount(a) : 0;
  if (TF_GetCode(s) == TF_OK && n > 0) {
    task* t = new_task(run_kernel);
    if (t != NULL) {
      t->dst = TF_TensorData(y);
      t->src = TF_TensorData(a);
      t->size = (uint64_t)n;
      t->kind = kind;
    }
    enqueue(t, s);
  }
  if (TF_GetCode(s) != TF_OK) TF_OpKernelContext_Failure(ctx, s);
  TF_DeleteTensor(a);
  TF_DeleteTensor(y);
  TF_DeleteStatus(s);
}

static void relu_compute(void* k, TF_OpKernelContext* ctx) {
  (void)k;
  compute(ctx, K_RELU);
}

static void neg_compute(void* k, TF_OpKernelContext* ctx) {
  (void)k;
  compute(ctx, K_NEG);
}

static void square_compute(void* k, TF_OpKernelContext* ctx) {
  (void)k;
  compute(ctx, K_SQUARE);
}

static void register_kernel(const char* op, void (*fn)(void*, TF_OpKernelContext*)) {
  TF_Status* s = TF_NewStatus();
  TF_KernelBuilder* b = TF_NewKernelBuilder(op, "NULL_DEVICE", NULL, fn, NULL);
  TF_KernelBuilder_TypeConstraint(b, "T", TF_FLOAT, s);
  if (TF_GetCode(s) == TF_OK) TF_RegisterKernelBuilder(op, b, s);
  else TF_DeleteKernelBuilder(b);
  TF_DeleteStatus(s);
}

void TF_InitKernel(void) {
  register_kernel("Relu", relu_compute);
  register_kernel("Neg", neg_compute);
  register_kernel("Square", square_compute);
}
