/* Host reference device: memory.
 *
 * Device memory is host heap memory, 64-byte aligned. Each device buffer is
 * preceded by a small header that remembers its size, so deallocate can keep
 * the statistics right without trusting anything but the pointer. An
 * optional byte limit (PLUGGABLE_MY_DEVICE_MEMORY_LIMIT, default: physical
 * memory) makes allocation fail like a real device that runs out of memory. */
#include <stdlib.h>
#include <string.h>

#include "plugin.h"

/* Bytes in front of every device buffer; a multiple of MD_ALIGNMENT so the
 * buffer itself stays aligned. */
#define MD_HEADER_BYTES MD_ALIGNMENT

typedef struct md_header {
  uint64_t size;
} md_header;

_Static_assert(sizeof(md_header) <= MD_HEADER_BYTES, "header too large");

/* Raises *target to at least `value`. */
static void md_atomic_max(_Atomic int64_t* target, int64_t value) {
  int64_t current = atomic_load(target);
  while (value > current &&
         !atomic_compare_exchange_weak(target, &current, value)) {
  }
}

/* Adds `size` to bytes_in_use unless that would pass the limit. */
static int md_reserve(md_device* dev, int64_t size) {
  int64_t in_use = atomic_load(&dev->bytes_in_use);
  do {
    if (size > dev->bytes_limit - in_use) return 0;
  } while (!atomic_compare_exchange_weak(&dev->bytes_in_use, &in_use,
                                         in_use + size));
  md_atomic_max(&dev->peak_bytes_in_use, in_use + size);
  return 1;
}

/* 64-byte aligned heap memory, or NULL. */
static void* md_aligned_malloc(uint64_t size) {
  void* p = NULL;
  if (size == 0) size = 1;
  if (posix_memalign(&p, MD_ALIGNMENT, (size_t)size) != 0) return NULL;
  return p;
}

void md_allocate(const SP_Device* device, uint64_t size, int64_t memory_space,
                 SP_DeviceMemoryBase* mem) {
  (void)memory_space;
  md_device* dev = md_device_of(device);
  mem->struct_size = SP_DEVICE_MEMORY_BASE_STRUCT_SIZE;
  mem->opaque = NULL;
  mem->size = 0;
  if (size == 0) return; /* deallocate accepts the NULL */
  if (size > (uint64_t)INT64_MAX - MD_HEADER_BYTES) return;
  if (!md_reserve(dev, (int64_t)size)) return;

  char* base = md_aligned_malloc(size + MD_HEADER_BYTES);
  if (base == NULL) {
    atomic_fetch_sub(&dev->bytes_in_use, (int64_t)size);
    return;
  }
  ((md_header*)base)->size = size;
  atomic_fetch_add(&dev->num_allocs, 1);
  md_atomic_max(&dev->largest_alloc_size, (int64_t)size);
  mem->opaque = base + MD_HEADER_BYTES;
  mem->size = size;
}

void md_deallocate(const SP_Device* device, SP_DeviceMemoryBase* memory) {
  if (memory == NULL || memory->opaque == NULL) return;
  char* base = (char*)memory->opaque - MD_HEADER_BYTES;
  atomic_fetch_sub(&md_device_of(device)->bytes_in_use,
                   (int64_t)((md_header*)base)->size);
  free(base);
  memory->opaque = NULL;
  memory->size = 0;
}

void* md_host_memory_allocate(const SP_Device* device, uint64_t size) {
  (void)device;
  return md_aligned_malloc(size);
}

void md_host_memory_deallocate(const SP_Device* device, void* mem) {
  (void)device;
  free(mem);
}

/* Unified memory is ordinary host heap: the "device" is the host. */
void* md_unified_memory_allocate(const SP_Device* device, uint64_t bytes) {
  (void)device;
  return md_aligned_malloc(bytes);
}

void md_unified_memory_deallocate(const SP_Device* device, void* location) {
  (void)device;
  free(location);
}

TF_Bool md_get_allocator_stats(const SP_Device* device,
                               SP_AllocatorStats* stats) {
  md_device* dev = md_device_of(device);
  /* Fill only the fields the core's struct has room for. */
  SP_AllocatorStats s;
  memset(&s, 0, sizeof(s));
  s.struct_size = SP_ALLOCATORSTATS_STRUCT_SIZE;
  s.num_allocs = atomic_load(&dev->num_allocs);
  s.bytes_in_use = atomic_load(&dev->bytes_in_use);
  s.peak_bytes_in_use = atomic_load(&dev->peak_bytes_in_use);
  s.largest_alloc_size = atomic_load(&dev->largest_alloc_size);
  s.has_bytes_limit = 1;
  s.bytes_limit = dev->bytes_limit;
  s.bytes_reserved = s.bytes_in_use;
  s.peak_bytes_reserved = s.peak_bytes_in_use;
  s.largest_free_block_bytes = dev->bytes_limit - s.bytes_in_use;
  size_t n = stats->struct_size;
  if (n == 0 || n > sizeof(s)) n = sizeof(s);
  memcpy(stats, &s, n);
  stats->struct_size = n;
  return 1;
}

TF_Bool md_device_memory_usage(const SP_Device* device, int64_t* free_bytes,
                               int64_t* total) {
  md_device* dev = md_device_of(device);
  int64_t in_use = atomic_load(&dev->bytes_in_use);
  *total = dev->bytes_limit;
  *free_bytes = in_use < dev->bytes_limit ? dev->bytes_limit - in_use : 0;
  return 1;
}
