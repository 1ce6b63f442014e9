/* A minimal, correct device plugin that the test plugins of this directory
 * customise to break one rule each.
 *
 * The device keeps its "device memory" in host memory and runs every stream
 * operation at once, on the calling thread: streams only remember their
 * first error, events complete when recorded, host callbacks run inline. It
 * registers one kernel: Neg for float32. It fills every callback TensorFlow
 * requires, so it loads under the core's TensorFlow rules.
 *
 * A test plugin defines some of these macros before including this file:
 *   MINI_DEVICE_TYPE, MINI_PLATFORM_NAME   names (default "MINI",
 *                                          "MINI_PLATFORM")
 *   MINI_DEVICE_COUNT                      devices reported (default 1)
 *   MINI_INIT_HOOK(params, status)         runs at the end of SE_InitPlugin
 *   MINI_DEVICE_HOOK(params, status)       runs at the end of create_device
 *   MINI_SE_HOOK(se)                       runs at the end of
 *                                          create_stream_executor
 *   MINI_ALLOCATE_HOOK(size, mem)          runs first in allocate; a hook
 *                                          that returns replaces it
 *   MINI_KERNELS_HOOK()                    runs at the end of TF_InitKernel
 *   MINI_NO_INIT_KERNEL                    export no TF_InitKernel
 *   MINI_NO_SE_INIT                        export no SE_InitPlugin
 *   MINI_CORE_MINIMUM                      leave NULL what only TensorFlow
 *                                          requires (destroy_platform(_fns),
 *                                          device fns, host memory, memory
 *                                          usage, the fills), so the core's
 *                                          defaults are exercised; such a
 *                                          plugin loads only with
 *                                          PLUGGABLE_LENIENT_PLUGINS=1 */
#ifndef MINI_DEVICE_H_
#define MINI_DEVICE_H_

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels.h"
#include "stream_executor.h"
#include "tf_status.h"

#ifndef MINI_DEVICE_TYPE
#define MINI_DEVICE_TYPE "MINI"
#endif
#ifndef MINI_PLATFORM_NAME
#define MINI_PLATFORM_NAME "MINI_PLATFORM"
#endif
#ifndef MINI_DEVICE_COUNT
#define MINI_DEVICE_COUNT 1
#endif
#ifndef MINI_INIT_HOOK
#define MINI_INIT_HOOK(params, status)
#endif
#ifndef MINI_DEVICE_HOOK
#define MINI_DEVICE_HOOK(params, status)
#endif
#ifndef MINI_SE_HOOK
#define MINI_SE_HOOK(se)
#endif
#ifndef MINI_ALLOCATE_HOOK
#define MINI_ALLOCATE_HOOK(size, mem)
#endif
#ifndef MINI_KERNELS_HOOK
#define MINI_KERNELS_HOOK()
#endif

#define MINI_MAX_DEVICES 8

/* Some functions go unused when a test plugin omits an entry point. */
#pragma GCC diagnostic ignored "-Wunused-function"

struct SP_Stream_st {
  TF_Code code; /* first error, TF_OK if none */
  char msg[256];
};
struct SP_Event_st {
  SE_EventStatus state;
};
struct SP_Timer_st {
  uint64_t start_ns, stop_ns;
};

/* Allocator statistics of each device. */
typedef struct mini_stats {
  int64_t num_allocs, bytes_in_use, peak_bytes_in_use, largest_alloc_size;
} mini_stats;
static mini_stats mini_device_stats[MINI_MAX_DEVICES];

static uint64_t mini_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static mini_stats* mini_stats_of(const SP_Device* device) {
  int i = device->ordinal;
  return &mini_device_stats[i >= 0 && i < MINI_MAX_DEVICES ? i : 0];
}

/*** Memory ***/

static void mini_allocate(const SP_Device* device, uint64_t size,
                          int64_t memory_space, SP_DeviceMemoryBase* mem) {
  (void)memory_space;
  MINI_ALLOCATE_HOOK(size, mem)
  mem->opaque = malloc(size != 0 ? size : 1);
  mem->size = size;
  mem->payload = size;
  if (mem->opaque == NULL) return;
  mini_stats* s = mini_stats_of(device);
  s->num_allocs += 1;
  s->bytes_in_use += (int64_t)size;
  if (s->bytes_in_use > s->peak_bytes_in_use)
    s->peak_bytes_in_use = s->bytes_in_use;
  if ((int64_t)size > s->largest_alloc_size)
    s->largest_alloc_size = (int64_t)size;
}

static void mini_deallocate(const SP_Device* device, SP_DeviceMemoryBase* mem) {
  if (mem->opaque == NULL) return;
  mini_stats_of(device)->bytes_in_use -= (int64_t)mem->payload;
  free(mem->opaque);
  mem->opaque = NULL;
}

static TF_Bool mini_get_allocator_stats(const SP_Device* device,
                                        SP_AllocatorStats* stats) {
  mini_stats* s = mini_stats_of(device);
  stats->num_allocs = s->num_allocs;
  stats->bytes_in_use = s->bytes_in_use;
  stats->peak_bytes_in_use = s->peak_bytes_in_use;
  stats->largest_alloc_size = s->largest_alloc_size;
  stats->has_bytes_limit = 0;
  return 1;
}

/*** Streams and events ***/

static void mini_create_stream(const SP_Device* device, SP_Stream* stream,
                               TF_Status* status) {
  (void)device;
  *stream = calloc(1, sizeof(struct SP_Stream_st));
  if (*stream == NULL) TF_SetStatus(status, TF_RESOURCE_EXHAUSTED, "no memory");
}

static void mini_destroy_stream(const SP_Device* device, SP_Stream stream) {
  (void)device;
  free(stream);
}

static void mini_stream_dependency(const SP_Device* device, SP_Stream dependent,
                                   SP_Stream other, TF_Status* status) {
  (void)device, (void)dependent, (void)other, (void)status;
}

static void mini_get_stream_status(const SP_Device* device, SP_Stream stream,
                                   TF_Status* status) {
  (void)device;
  if (stream != NULL && stream->code != TF_OK)
    TF_SetStatus(status, stream->code, stream->msg);
}

static void mini_create_event(const SP_Device* device, SP_Event* event,
                              TF_Status* status) {
  (void)device;
  *event = calloc(1, sizeof(struct SP_Event_st));
  if (*event == NULL) TF_SetStatus(status, TF_RESOURCE_EXHAUSTED, "no memory");
}

static void mini_destroy_event(const SP_Device* device, SP_Event event) {
  (void)device;
  free(event);
}

static SE_EventStatus mini_event_status(const SP_Device* device, SP_Event event) {
  (void)device;
  return event->state;
}

static void mini_record_event(const SP_Device* device, SP_Stream stream,
                              SP_Event event, TF_Status* status) {
  (void)device, (void)status;
  /* A NULL stream handle is legal (a plugin that keeps no stream state). */
  event->state = stream == NULL || stream->code == TF_OK ? SE_EVENT_COMPLETE
                                                          : SE_EVENT_ERROR;
}

static void mini_wait_for_event(const SP_Device* const device, SP_Stream stream,
                                SP_Event event, TF_Status* const status) {
  (void)device, (void)stream, (void)event, (void)status;
}

static void mini_block_for_event(const SP_Device* device, SP_Event event,
                                 TF_Status* status) {
  (void)device;
  if (event->state == SE_EVENT_UNKNOWN)
    TF_SetStatus(status, TF_FAILED_PRECONDITION, "event was never recorded");
}

static void mini_block_until_done(const SP_Device* device, SP_Stream stream,
                                  TF_Status* status) {
  mini_get_stream_status(device, stream, status);
  if (stream == NULL) return;
  stream->code = TF_OK;
  stream->msg[0] = '\0';
}

static void mini_sync_all(const SP_Device* device, TF_Status* status) {
  (void)device, (void)status;
}

static TF_Bool mini_host_callback(const SP_Device* device, SP_Stream stream,
                                  SE_StatusCallbackFn fn, void* arg) {
  (void)device;
  TF_Status* s = TF_NewStatus();
  fn(arg, s);
  if (TF_GetCode(s) != TF_OK && stream != NULL && stream->code == TF_OK) {
    stream->code = TF_GetCode(s);
    strncpy(stream->msg, TF_Message(s), sizeof stream->msg - 1);
  }
  TF_DeleteStatus(s);
  return 1;
}

/*** Timers ***/

static void mini_create_timer(const SP_Device* device, SP_Timer* timer,
                              TF_Status* status) {
  (void)device;
  *timer = calloc(1, sizeof(struct SP_Timer_st));
  if (*timer == NULL) TF_SetStatus(status, TF_RESOURCE_EXHAUSTED, "no memory");
}

static void mini_destroy_timer(const SP_Device* device, SP_Timer timer) {
  (void)device;
  free(timer);
}

static void mini_start_timer(const SP_Device* device, SP_Stream stream,
                             SP_Timer timer, TF_Status* status) {
  (void)device, (void)stream, (void)status;
  if (timer != NULL) timer->start_ns = mini_now_ns(); /* NULL is legal */
}

static void mini_stop_timer(const SP_Device* device, SP_Stream stream,
                            SP_Timer timer, TF_Status* status) {
  (void)device, (void)stream, (void)status;
  if (timer != NULL) timer->stop_ns = mini_now_ns();
}

static uint64_t mini_nanoseconds(SP_Timer timer) {
  if (timer == NULL) return 1; /* a timer without state measures nothing */
  uint64_t d = timer->stop_ns - timer->start_ns;
  return d != 0 ? d : 1;
}

/*** Copies ***/

static void mini_dtoh(const SP_Device* device, SP_Stream stream, void* dst,
                      const SP_DeviceMemoryBase* src, uint64_t size,
                      TF_Status* status) {
  (void)device, (void)stream, (void)status;
  if (size != 0) memcpy(dst, src->opaque, size);
}

static void mini_htod(const SP_Device* device, SP_Stream stream,
                      SP_DeviceMemoryBase* dst, const void* src, uint64_t size,
                      TF_Status* status) {
  (void)device, (void)stream, (void)status;
  if (size != 0) memcpy(dst->opaque, src, size);
}

static void mini_dtod(const SP_Device* device, SP_Stream stream,
                      SP_DeviceMemoryBase* dst, const SP_DeviceMemoryBase* src,
                      uint64_t size, TF_Status* status) {
  (void)device, (void)stream, (void)status;
  if (size != 0) memmove(dst->opaque, src->opaque, size);
}

static void mini_sync_dtoh(const SP_Device* device, void* dst,
                           const SP_DeviceMemoryBase* src, uint64_t size,
                           TF_Status* status) {
  mini_dtoh(device, NULL, dst, src, size, status);
}

static void mini_sync_htod(const SP_Device* device, SP_DeviceMemoryBase* dst,
                           const void* src, uint64_t size, TF_Status* status) {
  mini_htod(device, NULL, dst, src, size, status);
}

static void mini_sync_dtod(const SP_Device* device, SP_DeviceMemoryBase* dst,
                           const SP_DeviceMemoryBase* src, uint64_t size,
                           TF_Status* status) {
  mini_dtod(device, NULL, dst, src, size, status);
}

/*** Platform ***/

static void mini_device_count(const SP_Platform* platform, int* count,
                              TF_Status* status) {
  (void)platform, (void)status;
  *count = MINI_DEVICE_COUNT;
}

static void mini_create_device(const SP_Platform* platform,
                               SE_CreateDeviceParams* params,
                               TF_Status* status) {
  (void)platform;
  params->device->struct_size = SP_DEVICE_STRUCT_SIZE;
  params->device->ordinal = params->ordinal;
  params->device->device_handle = NULL;
  params->device->hardware_name = "mini test device";
  params->device->device_vendor = "pluggable tests";
  params->device->pci_bus_id = "0000:00:00.0";
  (void)status;
  MINI_DEVICE_HOOK(params, status)
}

static void mini_destroy_device(const SP_Platform* platform, SP_Device* device) {
  (void)platform, (void)device;
}

#ifndef MINI_CORE_MINIMUM
/*** What TensorFlow requires besides the core's minimum ***/

static void* mini_host_allocate(const SP_Device* device, uint64_t size) {
  (void)device;
  return malloc(size != 0 ? size : 1);
}

static void mini_host_deallocate(const SP_Device* device, void* mem) {
  (void)device;
  free(mem);
}

static TF_Bool mini_memory_usage(const SP_Device* device, int64_t* free_bytes,
                                 int64_t* total) {
  (void)device, (void)free_bytes, (void)total;
  return 0; /* unknown */
}

static void mini_mem_zero(const SP_Device* device, SP_Stream stream,
                          SP_DeviceMemoryBase* location, uint64_t size,
                          TF_Status* status) {
  (void)device, (void)stream, (void)status;
  memset(location->opaque, 0, size);
}

static void mini_memset(const SP_Device* device, SP_Stream stream,
                        SP_DeviceMemoryBase* location, uint8_t pattern,
                        uint64_t size, TF_Status* status) {
  (void)device, (void)stream, (void)status;
  memset(location->opaque, pattern, size);
}

static void mini_memset32(const SP_Device* device, SP_Stream stream,
                          SP_DeviceMemoryBase* location, uint32_t pattern,
                          uint64_t size, TF_Status* status) {
  (void)device, (void)stream, (void)status;
  uint32_t* words = location->opaque;
  for (uint64_t i = 0; i < size / 4; ++i) words[i] = pattern;
}

static void mini_create_device_fns(const SP_Platform* platform,
                                   SE_CreateDeviceFnsParams* params,
                                   TF_Status* status) {
  (void)platform, (void)status;
  params->device_fns->struct_size = SP_DEVICE_FNS_STRUCT_SIZE;
}

static void mini_destroy_device_fns(const SP_Platform* platform,
                                    SP_DeviceFns* device_fns) {
  (void)platform, (void)device_fns;
}

static void mini_destroy_platform(SP_Platform* platform) { (void)platform; }

static void mini_destroy_platform_fns(SP_PlatformFns* fns) { (void)fns; }
#endif

static void mini_create_se(const SP_Platform* platform,
                           SE_CreateStreamExecutorParams* params,
                           TF_Status* status) {
  (void)platform, (void)status;
  SP_StreamExecutor* se = params->stream_executor;
  se->struct_size = SP_STREAMEXECUTOR_STRUCT_SIZE;
  se->allocate = mini_allocate;
  se->deallocate = mini_deallocate;
  se->get_allocator_stats = mini_get_allocator_stats;
  se->create_stream = mini_create_stream;
  se->destroy_stream = mini_destroy_stream;
  se->create_stream_dependency = mini_stream_dependency;
  se->get_stream_status = mini_get_stream_status;
  se->create_event = mini_create_event;
  se->destroy_event = mini_destroy_event;
  se->get_event_status = mini_event_status;
  se->record_event = mini_record_event;
  se->wait_for_event = mini_wait_for_event;
  se->create_timer = mini_create_timer;
  se->destroy_timer = mini_destroy_timer;
  se->start_timer = mini_start_timer;
  se->stop_timer = mini_stop_timer;
  se->memcpy_dtoh = mini_dtoh;
  se->memcpy_htod = mini_htod;
  se->memcpy_dtod = mini_dtod;
  se->sync_memcpy_dtoh = mini_sync_dtoh;
  se->sync_memcpy_htod = mini_sync_htod;
  se->sync_memcpy_dtod = mini_sync_dtod;
  se->block_host_for_event = mini_block_for_event;
  se->block_host_until_done = mini_block_until_done;
  se->synchronize_all_activity = mini_sync_all;
  se->host_callback = mini_host_callback;
#ifndef MINI_CORE_MINIMUM
  se->host_memory_allocate = mini_host_allocate;
  se->host_memory_deallocate = mini_host_deallocate;
  se->device_memory_usage = mini_memory_usage;
  se->mem_zero = mini_mem_zero;
  se->memset = mini_memset;
  se->memset32 = mini_memset32;
#endif
  MINI_SE_HOOK(se)
}

static void mini_destroy_se(const SP_Platform* platform, SP_StreamExecutor* se) {
  (void)platform, (void)se;
}

static void mini_create_timer_fns(const SP_Platform* platform,
                                  SP_TimerFns* timer_fns, TF_Status* status) {
  (void)platform, (void)status;
  timer_fns->struct_size = SP_TIMER_FNS_STRUCT_SIZE;
  timer_fns->nanoseconds = mini_nanoseconds;
}

static void mini_destroy_timer_fns(const SP_Platform* platform,
                                   SP_TimerFns* timer_fns) {
  (void)platform, (void)timer_fns;
}

#ifndef MINI_NO_SE_INIT
void SE_InitPlugin(SE_PlatformRegistrationParams* params, TF_Status* status) {
  params->major_version = SE_MAJOR;
  params->minor_version = SE_MINOR;
  params->patch_version = SE_PATCH;
  params->platform->struct_size = SP_PLATFORM_STRUCT_SIZE;
  params->platform->name = MINI_PLATFORM_NAME;
  params->platform->type = MINI_DEVICE_TYPE;
  SP_PlatformFns* fns = params->platform_fns;
  fns->struct_size = SP_PLATFORM_FNS_STRUCT_SIZE;
  fns->get_device_count = mini_device_count;
  fns->create_device = mini_create_device;
  fns->destroy_device = mini_destroy_device;
  fns->create_stream_executor = mini_create_se;
  fns->destroy_stream_executor = mini_destroy_se;
  fns->create_timer_fns = mini_create_timer_fns;
  fns->destroy_timer_fns = mini_destroy_timer_fns;
#ifndef MINI_CORE_MINIMUM
  fns->create_device_fns = mini_create_device_fns;
  fns->destroy_device_fns = mini_destroy_device_fns;
  params->destroy_platform = mini_destroy_platform;
  params->destroy_platform_fns = mini_destroy_platform_fns;
#endif
  (void)status;
  MINI_INIT_HOOK(params, status)
}
#endif

/*** Kernel: Neg for float32 ***/

static void mini_neg(void* kernel, TF_OpKernelContext* ctx) {
  (void)kernel;
  TF_Status* s = TF_NewStatus();
  TF_Tensor* x = NULL;
  TF_GetInput(ctx, 0, &x, s);
  if (TF_GetCode(s) == TF_OK) {
    int n = TF_NumDims(x);
    int64_t dims[TF_MAX_DIMS];
    for (int i = 0; i < n; ++i) dims[i] = TF_Dim(x, i);
    TF_Tensor* y = TF_AllocateOutput(ctx, 0, TF_FLOAT, dims, n,
                                     TF_TensorByteSize(x), s);
    if (y != NULL) {
      const float* in = TF_TensorData(x);
      float* out = TF_TensorData(y);
      for (int64_t i = 0; i < TF_TensorElementCount(x); ++i) out[i] = -in[i];
    }
    TF_DeleteTensor(y);
  }
  if (TF_GetCode(s) != TF_OK) TF_OpKernelContext_Failure(ctx, s);
  TF_DeleteTensor(x);
  TF_DeleteStatus(s);
}

#ifndef MINI_NO_INIT_KERNEL
void TF_InitKernel(void) {
  TF_Status* s = TF_NewStatus();
  TF_KernelBuilder* b = TF_NewKernelBuilder("Neg", MINI_DEVICE_TYPE, NULL,
                                            mini_neg, NULL);
  TF_KernelBuilder_TypeConstraint(b, "T", TF_FLOAT, s);
  TF_RegisterKernelBuilder("Neg", b, s);
  TF_DeleteStatus(s);
  MINI_KERNELS_HOOK()
}
#endif

#endif /* MINI_DEVICE_H_ */
