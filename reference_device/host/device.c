/* Host reference device: plugin entry point, platform and device callbacks.
 *
 * SE_InitPlugin reads the configuration from the environment, names the
 * platform and fills the platform callbacks. create_stream_executor hands the
 * core the table of device-runtime callbacks implemented in memory.c,
 * copy.c, stream.c, event.c and timer.c. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "plugin.h"

int md_device_count = 1;
int64_t md_memory_limit = 0;
int64_t md_inline_work = MD_DEFAULT_INLINE_WORK;

void md_set_status(TF_Status* status, TF_Code code, const char* fmt, ...) {
  char message[512];
  va_list args;
  va_start(args, fmt);
  vsnprintf(message, sizeof(message), fmt, args);
  va_end(args);
  TF_SetStatus(status, code, message);
}

uint64_t md_now_ns(void) {
  struct timespec ts;
  if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) return 0;
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/*** Configuration ***/

/* Parses a whole decimal string into [min, max]; returns 0 on success. */
static int md_parse_int64(const char* text, int64_t min, int64_t max,
                          int64_t* out) {
  char* end = NULL;
  errno = 0;
  long long value = strtoll(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || value < min || value > max) {
    return -1;
  }
  *out = value;
  return 0;
}

/* Physical memory of the machine, or a large fallback if unknown. */
static int64_t md_physical_memory(void) {
  long pages = sysconf(_SC_PHYS_PAGES);
  long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return (int64_t)1 << 40;
  return (int64_t)pages * (int64_t)page_size;
}

/* Reads the environment variables; sets `status` on a bad value. */
static void md_read_config(TF_Status* status) {
  int64_t value;
  const char* count = getenv(MD_ENV_DEVICE_COUNT);
  md_device_count = 1;
  if (count != NULL) {
    if (md_parse_int64(count, 0, MD_MAX_DEVICES, &value) != 0) {
      md_set_status(status, TF_INVALID_ARGUMENT,
                    MD_ENV_DEVICE_COUNT " must be an integer from 0 to %d, got "
                    "'%s'", MD_MAX_DEVICES, count);
      return;
    }
    md_device_count = (int)value;
  }

  const char* limit = getenv(MD_ENV_MEMORY_LIMIT);
  md_memory_limit = md_physical_memory();
  if (limit != NULL) {
    if (md_parse_int64(limit, 0, INT64_MAX, &value) != 0) {
      md_set_status(status, TF_INVALID_ARGUMENT,
                    MD_ENV_MEMORY_LIMIT " must be a byte count (a non-negative "
                    "integer), got '%s'", limit);
      return;
    }
    md_memory_limit = value;
  }

  const char* work = getenv(MD_ENV_INLINE_WORK);
  md_inline_work = MD_DEFAULT_INLINE_WORK;
  if (work != NULL) {
    if (md_parse_int64(work, 0, INT64_MAX, &value) != 0) {
      md_set_status(status, TF_INVALID_ARGUMENT,
                    MD_ENV_INLINE_WORK " must be an element count (a non-negative "
                    "integer; 0 runs every task on the stream's worker), got '%s'",
                    work);
      return;
    }
    md_inline_work = value > 0 ? value : -1;
  }
}

/*** Devices ***/

static void md_get_device_count(const SP_Platform* platform, int* device_count,
                                TF_Status* status) {
  (void)platform;
  (void)status;
  *device_count = md_device_count;
}

static void md_create_device(const SP_Platform* platform,
                             SE_CreateDeviceParams* params, TF_Status* status) {
  (void)platform;
  md_device* dev = calloc(1, sizeof(*dev));
  if (dev == NULL) {
    md_set_status(status, TF_RESOURCE_EXHAUSTED, "out of memory creating "
                  MD_DEVICE_TYPE ":%d", params->ordinal);
    return;
  }
  if (pthread_mutex_init(&dev->streams_mu, NULL) != 0) {
    free(dev);
    md_set_status(status, TF_INTERNAL, "cannot create a mutex for "
                  MD_DEVICE_TYPE ":%d", params->ordinal);
    return;
  }
  if (pthread_cond_init(&dev->streams_cv, NULL) != 0) {
    pthread_mutex_destroy(&dev->streams_mu);
    free(dev);
    md_set_status(status, TF_INTERNAL, "cannot create a condition variable "
                  "for " MD_DEVICE_TYPE ":%d", params->ordinal);
    return;
  }
  dev->ordinal = params->ordinal;
  dev->bytes_limit = md_memory_limit;
  dev->inline_work = md_inline_work;

  SP_Device* device = params->device;
  device->struct_size = SP_DEVICE_STRUCT_SIZE;
  device->ordinal = params->ordinal;
  device->device_handle = dev;
  device->hardware_name = "Host reference device";
  device->device_vendor = "pluggable";
  device->pci_bus_id = NULL;
}

static void md_destroy_device(const SP_Platform* platform, SP_Device* device) {
  (void)platform;
  md_device* dev = md_device_of(device);
  if (dev == NULL) return;
  pthread_cond_destroy(&dev->streams_cv);
  pthread_mutex_destroy(&dev->streams_mu);
  free(dev);
  device->device_handle = NULL;
}

static int32_t md_get_numa_node(const SP_Device* device) {
  (void)device;
  return -1; /* host memory: no single NUMA node */
}

/* Rough estimates for a modern server core; the reference device runs each
 * stream on one thread. */
static int64_t md_get_memory_bandwidth(const SP_Device* device) {
  (void)device;
  return (int64_t)10 * 1000 * 1000 * 1000; /* ~10 GB/s */
}

static double md_get_gflops(const SP_Device* device) {
  (void)device;
  return 10.0;
}

static void md_create_device_fns(const SP_Platform* platform,
                                 SE_CreateDeviceFnsParams* params,
                                 TF_Status* status) {
  (void)platform;
  (void)status;
  SP_DeviceFns* fns = params->device_fns;
  fns->struct_size = SP_DEVICE_FNS_STRUCT_SIZE;
  fns->get_numa_node = md_get_numa_node;
  fns->get_memory_bandwidth = md_get_memory_bandwidth;
  fns->get_gflops = md_get_gflops;
}

static void md_destroy_device_fns(const SP_Platform* platform,
                                  SP_DeviceFns* device_fns) {
  (void)platform;
  (void)device_fns;
}

/*** Stream executor ***/

static void md_create_stream_executor(const SP_Platform* platform,
                                      SE_CreateStreamExecutorParams* params,
                                      TF_Status* status) {
  (void)platform;
  (void)status;
  SP_StreamExecutor* se = params->stream_executor;
  se->struct_size = SP_STREAMEXECUTOR_STRUCT_SIZE;

  se->allocate = md_allocate;
  se->deallocate = md_deallocate;
  se->host_memory_allocate = md_host_memory_allocate;
  se->host_memory_deallocate = md_host_memory_deallocate;
  se->unified_memory_allocate = md_unified_memory_allocate;
  se->unified_memory_deallocate = md_unified_memory_deallocate;
  se->get_allocator_stats = md_get_allocator_stats;
  se->device_memory_usage = md_device_memory_usage;

  se->create_stream = md_create_stream;
  se->destroy_stream = md_destroy_stream;
  se->create_stream_dependency = md_create_stream_dependency;
  se->get_stream_status = md_get_stream_status;

  se->create_event = md_create_event;
  se->destroy_event = md_destroy_event;
  se->get_event_status = md_get_event_status;
  se->record_event = md_record_event;
  se->wait_for_event = md_wait_for_event;

  se->create_timer = md_create_timer;
  se->destroy_timer = md_destroy_timer;
  se->start_timer = md_start_timer;
  se->stop_timer = md_stop_timer;

  se->memcpy_dtoh = md_memcpy_dtoh;
  se->memcpy_htod = md_memcpy_htod;
  se->memcpy_dtod = md_memcpy_dtod;
  se->sync_memcpy_dtoh = md_sync_memcpy_dtoh;
  se->sync_memcpy_htod = md_sync_memcpy_htod;
  se->sync_memcpy_dtod = md_sync_memcpy_dtod;

  se->block_host_for_event = md_block_host_for_event;
  se->block_host_until_done = md_block_host_until_done;
  se->synchronize_all_activity = md_synchronize_all_activity;

  se->mem_zero = md_mem_zero;
  se->memset = md_memset;
  se->memset32 = md_memset32;
  se->host_callback = md_host_callback;
}

static void md_destroy_stream_executor(const SP_Platform* platform,
                                       SP_StreamExecutor* stream_executor) {
  (void)platform;
  (void)stream_executor;
}

static void md_create_timer_fns(const SP_Platform* platform,
                                SP_TimerFns* timer_fns, TF_Status* status) {
  (void)platform;
  (void)status;
  timer_fns->struct_size = SP_TIMER_FNS_STRUCT_SIZE;
  timer_fns->nanoseconds = md_timer_nanoseconds;
}

static void md_destroy_timer_fns(const SP_Platform* platform,
                                 SP_TimerFns* timer_fns) {
  (void)platform;
  (void)timer_fns;
}

/*** Entry point ***/

/* Nothing is allocated for the platform or its function table, but both
 * callbacks are required (TensorFlow refuses a plugin without them). */
static void md_destroy_platform(SP_Platform* platform) { (void)platform; }

static void md_destroy_platform_fns(SP_PlatformFns* platform_fns) {
  (void)platform_fns;
}

void SE_InitPlugin(SE_PlatformRegistrationParams* params, TF_Status* status) {
  md_read_config(status);
  if (TF_GetCode(status) != TF_OK) return;

  params->major_version = SE_MAJOR;
  params->minor_version = SE_MINOR;
  params->patch_version = SE_PATCH;
  params->destroy_platform = md_destroy_platform;
  params->destroy_platform_fns = md_destroy_platform_fns;

  SP_Platform* platform = params->platform;
  platform->struct_size = SP_PLATFORM_STRUCT_SIZE;
  platform->name = MD_PLATFORM_NAME;
  platform->type = MD_DEVICE_TYPE;
  platform->supports_unified_memory = 1;
  platform->use_bfc_allocator = 0;
  platform->force_memory_growth = 0;

  SP_PlatformFns* fns = params->platform_fns;
  fns->struct_size = SP_PLATFORM_FNS_STRUCT_SIZE;
  fns->get_device_count = md_get_device_count;
  fns->create_device = md_create_device;
  fns->destroy_device = md_destroy_device;
  fns->create_device_fns = md_create_device_fns;
  fns->destroy_device_fns = md_destroy_device_fns;
  fns->create_stream_executor = md_create_stream_executor;
  fns->destroy_stream_executor = md_destroy_stream_executor;
  fns->create_timer_fns = md_create_timer_fns;
  fns->destroy_timer_fns = md_destroy_timer_fns;
}
