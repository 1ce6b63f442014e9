/* Host reference device: copies and fills.
 *
 * Device memory is host memory, so every copy is a memcpy. The asynchronous
 * variants run it as a task on the stream; the sync_* variants do it
 * directly (the core orders them against the streams). */
#include <stdlib.h>
#include <string.h>

#include "plugin.h"
#include "pluggable_host_copy.h"
#include "stream.h"
#include "trace.h"

/* Argument of every copy / fill task. */
typedef struct md_copy_arg {
  void* dst;
  const void* src; /* memcpy source; unused by fills */
  uint64_t size;
  uint32_t pattern; /* fill value */
} md_copy_arg;

static void md_memcpy_task(void* arg, SP_Stream stream) {
  (void)stream;
  md_copy_arg* a = arg;
  if (a->size > 0) memmove(a->dst, a->src, a->size);
}

static void md_memset_task(void* arg, SP_Stream stream) {
  (void)stream;
  md_copy_arg* a = arg;
  if (a->size > 0) memset(a->dst, (int)(a->pattern & 0xff), a->size);
}

static void md_memset32_task(void* arg, SP_Stream stream) {
  (void)stream;
  md_copy_arg* a = arg;
  uint32_t* dst = a->dst;
  for (uint64_t i = 0; i < a->size / 4; ++i) dst[i] = a->pattern;
}

/* Enqueues one copy / fill task; reports failure in `status`. With
 * `staged`, the `size` bytes at `src` are copied into the task's own block
 * first (the stream frees it after the task), so the caller may reuse `src`
 * as soon as this returns. */
static void md_enqueue_copy_as(SP_Stream stream, const char* name, md_task_fn fn,
                               void* dst, const void* src, uint64_t size,
                               uint32_t pattern, int staged, TF_Status* status) {
  if (size == 0) return;
  md_copy_arg* arg = malloc(sizeof(*arg) + (staged ? size : 0));
  if (arg == NULL) {
    md_set_status(status, TF_RESOURCE_EXHAUSTED,
                  "out of host memory enqueueing a copy of %llu bytes",
                  (unsigned long long)size);
    return;
  }
  if (staged) {
    memcpy(arg + 1, src, size);
    src = arg + 1;
  }
  arg->dst = dst;
  arg->src = src;
  arg->size = size;
  arg->pattern = pattern;
  if (md_stream_enqueue_traced(stream, MD_TASK_COPY, fn, arg, name, (int)strlen(name),
                               (int64_t)size) != 0) {
    md_set_status(status, TF_RESOURCE_EXHAUSTED, "cannot enqueue a copy");
  }
}

static void md_enqueue_copy(SP_Stream stream, const char* name, md_task_fn fn,
                            void* dst, const void* src, uint64_t size,
                            uint32_t pattern, TF_Status* status) {
  md_enqueue_copy_as(stream, name, fn, dst, src, size, pattern, 0, status);
}

void md_memcpy_dtoh(const SP_Device* device, SP_Stream stream, void* host_dst,
                    const SP_DeviceMemoryBase* device_src, uint64_t size,
                    TF_Status* status) {
  (void)device;
  md_enqueue_copy(stream, "MemcpyD2H", md_memcpy_task, host_dst, device_src->opaque, size, 0,
                  status);
}

void md_memcpy_htod(const SP_Device* device, SP_Stream stream,
                    SP_DeviceMemoryBase* device_dst, const void* host_src,
                    uint64_t size, TF_Status* status) {
  (void)device;
  md_enqueue_copy(stream, "MemcpyH2D", md_memcpy_task, device_dst->opaque, host_src, size, 0,
                  status);
}

/* The host-copy extension (pluggable_host_copy.h): the source is copied
 * into the task's own block before this returns, so the caller may reuse
 * it at once; the copy into device memory still runs in stream order. */
static void md_memcpy_htod_consumed(const SP_Device* device, SP_Stream stream,
                                    SP_DeviceMemoryBase* device_dst,
                                    const void* host_src, uint64_t size,
                                    TF_Status* status) {
  (void)device;
  md_enqueue_copy_as(stream, "MemcpyH2D", md_memcpy_task, device_dst->opaque, host_src, size,
                     0, 1, status);
}

void PG_GetHostCopyFns(PG_HostCopyFns* fns) {
  if (fns == NULL || fns->struct_size < sizeof(PG_HostCopyFns)) return;
  fns->version = PG_HOST_COPY_VERSION;
  fns->memcpy_htod_consumed = md_memcpy_htod_consumed;
}

void md_memcpy_dtod(const SP_Device* device, SP_Stream stream,
                    SP_DeviceMemoryBase* device_dst,
                    const SP_DeviceMemoryBase* device_src, uint64_t size,
                    TF_Status* status) {
  (void)device;
  md_enqueue_copy(stream, "MemcpyD2D", md_memcpy_task, device_dst->opaque,
                  device_src->opaque, size, 0, status);
}

void md_sync_memcpy_dtoh(const SP_Device* device, void* host_dst,
                         const SP_DeviceMemoryBase* device_src, uint64_t size,
                         TF_Status* status) {
  (void)device;
  (void)status;
  if (size > 0) memcpy(host_dst, device_src->opaque, size);
}

void md_sync_memcpy_htod(const SP_Device* device,
                         SP_DeviceMemoryBase* device_dst, const void* host_src,
                         uint64_t size, TF_Status* status) {
  (void)device;
  (void)status;
  if (size > 0) memcpy(device_dst->opaque, host_src, size);
}

void md_sync_memcpy_dtod(const SP_Device* device,
                         SP_DeviceMemoryBase* device_dst,
                         const SP_DeviceMemoryBase* device_src, uint64_t size,
                         TF_Status* status) {
  (void)device;
  (void)status;
  if (size > 0) memmove(device_dst->opaque, device_src->opaque, size);
}

void md_mem_zero(const SP_Device* device, SP_Stream stream,
                 SP_DeviceMemoryBase* location, uint64_t size,
                 TF_Status* status) {
  (void)device;
  md_enqueue_copy(stream, "Memset", md_memset_task, location->opaque, NULL, size, 0,
                  status);
}

void md_memset(const SP_Device* device, SP_Stream stream,
               SP_DeviceMemoryBase* location, uint8_t pattern, uint64_t size,
               TF_Status* status) {
  (void)device;
  md_enqueue_copy(stream, "Memset", md_memset_task, location->opaque, NULL, size, pattern,
                  status);
}

void md_memset32(const SP_Device* device, SP_Stream stream,
                 SP_DeviceMemoryBase* location, uint32_t pattern,
                 uint64_t size, TF_Status* status) {
  (void)device;
  if (size % 4 != 0) {
    md_set_status(status, TF_INVALID_ARGUMENT,
                  "memset32: size %llu is not a multiple of 4",
                  (unsigned long long)size);
    return;
  }
  md_enqueue_copy(stream, "Memset", md_memset32_task, location->opaque, NULL, size,
                  pattern, status);
}
