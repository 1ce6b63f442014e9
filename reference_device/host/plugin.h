/* Host reference device: declarations shared by the device runtime files.
 *
 * The plugin is split by responsibility:
 *   device.c   SE_InitPlugin, platform and device callbacks, the table of
 *              SP_StreamExecutor callbacks
 *   memory.c   allocation and allocator statistics
 *   copy.c     memcpy and memset callbacks
 *   stream.c   streams (a worker thread per stream), errors, synchronisation
 *   event.c    events
 *   timer.c    timers
 *   native_stream.c  PG_GetNativeStreamFns: declares host memory
 *
 * Every SP_StreamExecutor callback that the plugin implements is declared
 * here so device.c can fill the table. All symbols declared below are hidden:
 * the only symbols the shared object exports are SE_InitPlugin,
 * TF_InitKernel and PG_GetNativeStreamFns, so two plugins loaded into one
 * process never clash. */
#ifndef MY_DEVICE_PLUGIN_H_
#define MY_DEVICE_PLUGIN_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "stream_executor.h"
#include "tf_status.h"

#pragma GCC visibility push(hidden)

/* Names the core sees. */
#define MD_PLATFORM_NAME "MY_PLATFORM"
#define MD_DEVICE_TYPE "MY_DEVICE"

/* Environment variables read by SE_InitPlugin. */
#define MD_ENV_DEVICE_COUNT "PLUGGABLE_MY_DEVICE_COUNT"
#define MD_ENV_MEMORY_LIMIT "PLUGGABLE_MY_DEVICE_MEMORY_LIMIT"
#define MD_ENV_INLINE_WORK "PLUGGABLE_MY_DEVICE_INLINE"
/* Elements of work up to which a small kernel task runs on the launching
 * thread when its stream is idle (stream.c), unless MD_ENV_INLINE_WORK says
 * otherwise (0: never). */
#define MD_DEFAULT_INLINE_WORK 4096
#define MD_MAX_DEVICES 64

/* Alignment of every buffer the plugin hands out (matches the core's host
 * tensors, so kernels may use aligned vector loads). */
#define MD_ALIGNMENT 64

struct SP_Stream_st;

/* One device: stored in SP_Device.device_handle. */
typedef struct md_device {
  int ordinal;

  /* Streams of this device (intrusive list through SP_Stream_st.next),
   * used by synchronize_all_activity. `streams_cv` is signalled when a
   * synchronize_all_activity call stops using a stream (see stream.c). */
  pthread_mutex_t streams_mu;
  pthread_cond_t streams_cv;
  struct SP_Stream_st* streams;

  /* Allocator statistics (updated without locks). */
  _Atomic int64_t num_allocs;
  _Atomic int64_t bytes_in_use;
  _Atomic int64_t peak_bytes_in_use;
  _Atomic int64_t largest_alloc_size;
  int64_t bytes_limit; /* allocations beyond this fail */
  int64_t inline_work; /* see MD_ENV_INLINE_WORK; -1: never */
} md_device;

/* The md_device behind an SP_Device. */
static inline md_device* md_device_of(const SP_Device* device) {
  return (md_device*)device->device_handle;
}

/* Settings parsed once by SE_InitPlugin (device.c). */
extern int md_device_count;
extern int64_t md_memory_limit; /* bytes */
extern int64_t md_inline_work;  /* elements; -1: never (MD_ENV_INLINE_WORK) */

/* Sets `status` to `code` with a printf-style message. */
void md_set_status(TF_Status* status, TF_Code code, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Current CLOCK_MONOTONIC time in nanoseconds. */
uint64_t md_now_ns(void);

/*** memory.c ***/
void md_allocate(const SP_Device* device, uint64_t size, int64_t memory_space,
                 SP_DeviceMemoryBase* mem);
void md_deallocate(const SP_Device* device, SP_DeviceMemoryBase* memory);
void* md_host_memory_allocate(const SP_Device* device, uint64_t size);
void md_host_memory_deallocate(const SP_Device* device, void* mem);
void* md_unified_memory_allocate(const SP_Device* device, uint64_t bytes);
void md_unified_memory_deallocate(const SP_Device* device, void* location);
TF_Bool md_get_allocator_stats(const SP_Device* device,
                               SP_AllocatorStats* stats);
TF_Bool md_device_memory_usage(const SP_Device* device, int64_t* free,
                               int64_t* total);

/*** copy.c ***/
void md_memcpy_dtoh(const SP_Device* device, SP_Stream stream, void* host_dst,
                    const SP_DeviceMemoryBase* device_src, uint64_t size,
                    TF_Status* status);
void md_memcpy_htod(const SP_Device* device, SP_Stream stream,
                    SP_DeviceMemoryBase* device_dst, const void* host_src,
                    uint64_t size, TF_Status* status);
void md_memcpy_dtod(const SP_Device* device, SP_Stream stream,
                    SP_DeviceMemoryBase* device_dst,
                    const SP_DeviceMemoryBase* device_src, uint64_t size,
                    TF_Status* status);
void md_sync_memcpy_dtoh(const SP_Device* device, void* host_dst,
                         const SP_DeviceMemoryBase* device_src, uint64_t size,
                         TF_Status* status);
void md_sync_memcpy_htod(const SP_Device* device,
                         SP_DeviceMemoryBase* device_dst, const void* host_src,
                         uint64_t size, TF_Status* status);
void md_sync_memcpy_dtod(const SP_Device* device,
                         SP_DeviceMemoryBase* device_dst,
                         const SP_DeviceMemoryBase* device_src, uint64_t size,
                         TF_Status* status);
void md_mem_zero(const SP_Device* device, SP_Stream stream,
                 SP_DeviceMemoryBase* location, uint64_t size,
                 TF_Status* status);
void md_memset(const SP_Device* device, SP_Stream stream,
               SP_DeviceMemoryBase* location, uint8_t pattern, uint64_t size,
               TF_Status* status);
void md_memset32(const SP_Device* device, SP_Stream stream,
                 SP_DeviceMemoryBase* location, uint32_t pattern,
                 uint64_t size, TF_Status* status);

/*** stream.c ***/
void md_create_stream(const SP_Device* device, SP_Stream* stream,
                      TF_Status* status);
void md_destroy_stream(const SP_Device* device, SP_Stream stream);
void md_create_stream_dependency(const SP_Device* device, SP_Stream dependent,
                                 SP_Stream other, TF_Status* status);
void md_get_stream_status(const SP_Device* device, SP_Stream stream,
                          TF_Status* status);
void md_block_host_until_done(const SP_Device* device, SP_Stream stream,
                              TF_Status* status);
void md_synchronize_all_activity(const SP_Device* device, TF_Status* status);
TF_Bool md_host_callback(const SP_Device* device, SP_Stream stream,
                         SE_StatusCallbackFn callback_fn, void* callback_arg);

/*** event.c ***/
void md_create_event(const SP_Device* device, SP_Event* event,
                     TF_Status* status);
void md_destroy_event(const SP_Device* device, SP_Event event);
SE_EventStatus md_get_event_status(const SP_Device* device, SP_Event event);
void md_record_event(const SP_Device* device, SP_Stream stream, SP_Event event,
                     TF_Status* status);
void md_wait_for_event(const SP_Device* const device, SP_Stream stream,
                       SP_Event event, TF_Status* const status);
void md_block_host_for_event(const SP_Device* device, SP_Event event,
                             TF_Status* status);

/*** timer.c ***/
void md_create_timer(const SP_Device* device, SP_Timer* timer,
                     TF_Status* status);
void md_destroy_timer(const SP_Device* device, SP_Timer timer);
void md_start_timer(const SP_Device* device, SP_Stream stream, SP_Timer timer,
                    TF_Status* status);
void md_stop_timer(const SP_Device* device, SP_Stream stream, SP_Timer timer,
                   TF_Status* status);
uint64_t md_timer_nanoseconds(SP_Timer timer);

#pragma GCC visibility pop

#endif /* MY_DEVICE_PLUGIN_H_ */
