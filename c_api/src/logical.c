/* Logical devices: several devices of the runtime on one physical device of
 * a plugin, each with its own name, default stream, caching allocator and,
 * optionally, a limit on the device memory it may hold.
 *
 * A logical device is a device created again by the plugin for the same
 * physical ordinal (SP_PlatformFns.create_device), so everything the core
 * keeps per device is its own. Its memory limit is enforced where the
 * caching allocator asks the plugin for memory: the stream executor's
 * `allocate` is wrapped by one that refuses a block that would take the bytes
 * obtained from the plugin past the limit (the allocator then empties its
 * cache, retries once and reports RESOURCE_EXHAUSTED naming the device). */
#include "internal.h"

#define MAX_LIMITED 256

typedef struct limited_device {
  const SP_Device* device; /* the key: the SP_Device the wrappers are given */
  void (*allocate)(const SP_Device*, uint64_t, int64_t, SP_DeviceMemoryBase*);
  void (*deallocate)(const SP_Device*, SP_DeviceMemoryBase*);
  int64_t limit;    /* bytes */
  int64_t reserved; /* bytes obtained from the plugin and not returned */
} limited_device;

static pthread_mutex_t limited_mu = PTHREAD_MUTEX_INITIALIZER;
static limited_device limited[MAX_LIMITED];
static int num_limited;

/* Called locked. */
static limited_device* find_limited(const SP_Device* device) {
  for (int i = 0; i < num_limited; ++i)
    if (limited[i].device == device) return &limited[i];
  return NULL;
}

static void limited_allocate(const SP_Device* device, uint64_t size,
                             int64_t memory_space, SP_DeviceMemoryBase* mem) {
  pthread_mutex_lock(&limited_mu);
  limited_device* l = find_limited(device);
  int refuse = l->reserved + (int64_t)size > l->limit;
  if (!refuse) l->reserved += (int64_t)size; /* claimed before the call */
  pthread_mutex_unlock(&limited_mu);
  mem->opaque = NULL;
  mem->size = 0;
  if (refuse) return;
  l->allocate(device, size, memory_space, mem);
  if (mem->opaque == NULL) {
    pthread_mutex_lock(&limited_mu);
    l->reserved -= (int64_t)size;
    pthread_mutex_unlock(&limited_mu);
  }
}

static void limited_deallocate(const SP_Device* device,
                               SP_DeviceMemoryBase* mem) {
  pthread_mutex_lock(&limited_mu);
  limited_device* l = find_limited(device);
  if (mem->opaque != NULL) l->reserved -= (int64_t)mem->size;
  pthread_mutex_unlock(&limited_mu);
  l->deallocate(device, mem);
}

pg_device* pg_device_create_logical(pg_platform* p, int physical_ordinal,
                                    int logical_ordinal, int64_t bytes_limit,
                                    TF_Status* status) {
  pg_device* d = pg_device_create(p, physical_ordinal, status);
  if (d == NULL) return NULL;
  d->ordinal = logical_ordinal;
  snprintf(d->name, sizeof d->name, "/device:%s:%d", p->platform->type,
           logical_ordinal);
  if (bytes_limit <= 0) return d;
  d->bytes_limit = bytes_limit;
  pthread_mutex_lock(&limited_mu);
  if (num_limited == MAX_LIMITED) {
    pthread_mutex_unlock(&limited_mu);
    pg_set_status(status, TF_RESOURCE_EXHAUSTED,
                  "at most %d logical devices with a memory limit can be "
                  "created in one process", MAX_LIMITED);
    return NULL; /* the device stays allocated: creation is rare */
  }
  limited_device* l = &limited[num_limited++];
  l->device = d->device;
  l->allocate = d->se->allocate;
  l->deallocate = d->se->deallocate;
  l->limit = bytes_limit;
  l->reserved = 0;
  d->se->allocate = limited_allocate;
  d->se->deallocate = limited_deallocate;
  pthread_mutex_unlock(&limited_mu);
  return d;
}
