/* Reference-counted buffers: the storage behind TF_Tensor handles.
 *
 * A buffer knows its memory (a host pointer or a device address) and how to
 * release it, which its creator decides: host buffers free their aligned
 * allocation, external buffers call the caller's deallocator, device buffers
 * hand their block back to the device's caching allocator. This file knows
 * nothing of allocators or tensors. */
#include "internal.h"

void* pg_host_alloc(size_t nbytes) {
  void* p = NULL;
  /* Round up so aligned_alloc's size rule holds; never ask for 0 bytes. */
  size_t n = (nbytes + 63) & ~(size_t)63;
  if (n == 0) n = 64;
  if (posix_memalign(&p, 64, n) != 0) return NULL;
  return p;
}

void pg_host_free(void* p) { free(p); }

pg_buffer* pg_buffer_new(void* data, size_t nbytes, pg_release_fn release,
                         void* owner) {
  pg_buffer* b = calloc(1, sizeof(pg_buffer));
  if (b == NULL) return NULL;
  atomic_init(&b->refs, 1);
  b->data = data;
  b->nbytes = nbytes;
  b->release = release;
  b->owner = owner;
  return b;
}

static void release_host(pg_buffer* b) { pg_host_free(b->data); }

pg_buffer* pg_buffer_new_host(size_t nbytes) {
  void* data = pg_host_alloc(nbytes);
  if (data == NULL) return NULL;
  pg_buffer* b = pg_buffer_new(data, nbytes, release_host, NULL);
  if (b == NULL) pg_host_free(data);
  else b->forwardable = 1;
  return b;
}

static void release_external(pg_buffer* b) {
  if (b->deallocator != NULL) b->deallocator(b->data, b->nbytes, b->owner);
}

pg_buffer* pg_buffer_new_external(void* data, size_t nbytes,
                                  void (*dealloc)(void*, size_t, void*),
                                  void* arg) {
  pg_buffer* b = pg_buffer_new(data, nbytes, release_external, arg);
  if (b == NULL) return NULL;
  b->deallocator = dealloc;
  return b;
}

void pg_buffer_ref(pg_buffer* b) {
  if (b != NULL) atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
}

void pg_buffer_unref(pg_buffer* b) {
  if (b == NULL) return;
  if (atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) != 1) return;
  if (b->release != NULL) b->release(b);
  free(b);
}

void pg_buffer_mem(const pg_buffer* buf, SP_DeviceMemoryBase* mem) {
  memset(mem, 0, sizeof *mem);
  mem->struct_size = SP_DEVICE_MEMORY_BASE_STRUCT_SIZE;
  if (buf->device != NULL && buf->mem.opaque != NULL) {
    *mem = buf->mem;
  } else {
    mem->opaque = buf->data;
    mem->size = buf->nbytes;
  }
}
