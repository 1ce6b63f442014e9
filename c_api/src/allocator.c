/* The caching device allocator (device buffers are pg_buffers whose release
 * returns their block here).
 *
 * Device memory is obtained from the plugin's `allocate` and kept in free
 * lists after its tensors die, so the next allocation of a similar size is
 * served without calling the plugin. The rules that keep queued work safe
 * (docs/architecture.md, "Memory and ordering"):
 *
 *  - Every block belongs to the device's default stream, where ops and
 *    copies run. A block freed while work that uses it is still queued there
 *    can be handed out again at once: its next user is enqueued after that
 *    work (stream-ordered reuse).
 *  - A block that other streams used (pg_buffer_record_stream) is, when
 *    freed, parked with an event recorded on each of those streams, and
 *    becomes reusable only once every event has completed.
 *  - A block is returned to the plugin (empty_cache, or the retry after a
 *    failed allocation) only if it was freed before a synchronisation of the
 *    whole device that has completed: each free is stamped with the
 *    allocator's epoch, and releasing bumps the epoch, waits for the device,
 *    and returns only blocks stamped before the bump. Blocks freed meanwhile
 *    by other threads stay cached. So releasing is safe from any thread at
 *    any time.
 *
 * Private pools (graph capture): while a thread captures device work
 * (capture.c), its allocations on the capturing device are made for the
 * graph's pool: they take a free block of the pool or a new block from the
 * plugin (never one of the shared cache, and without the release-and-retry,
 * which would synchronise during the capture). A freed block of a pool goes
 * back to that pool (parked first like any block used by other streams),
 * where later allocations of the same capture may reuse it in stream order,
 * as the replay runs them; it never goes to the shared cache while the graph
 * lives, so memory a graph baked in is never handed to anything else. When
 * the graph is destroyed, the pool's free blocks join the shared cache,
 * stamped with the epoch of that moment (replays may have used them until
 * then), and its live blocks join it when they are freed.
 *
 * All statistics are updated under the allocator's one lock, together with
 * the lists they describe: bytes_reserved == bytes_in_use + bytes_cached +
 * bytes_in_graphs at every moment the lock is free (parked blocks count as
 * cached, or as in graphs for a pool's blocks). */
#include "internal.h"

#define SMALL_LIMIT ((size_t)1 << 20) /* up to here: power-of-two classes */
#define LARGE_ROUND ((size_t)2 << 20) /* above: multiples of 2 MiB */
#define NUM_BINS 21                   /* 2^0 .. 2^20 */

/* A stream that used a block: `key` is the core's cell holding the stream's
 * handle (its identity; the handle value may be NULL or shared by several
 * streams), `handle` the value to record on. */
typedef struct pg_stream_use {
  const SP_Stream* key;
  SP_Stream handle;
} pg_stream_use;

typedef struct pg_block {
  SP_DeviceMemoryBase mem; /* as the plugin gave it */
  size_t size;             /* the rounded size asked of the plugin */
  uint64_t freed_epoch;    /* allocator epoch when last freed */
  pg_stream_use* uses;     /* other streams that used it since allocation */
  int num_uses, cap_uses;
  pg_event** events;       /* parked: one event per stream of `uses` */
  int num_events;
  struct pg_block* next;
  struct pg_pool* pool;       /* the private pool owning it, or NULL */
  struct pg_block* pool_next; /* every block of the pool */
} pg_block;

struct pg_pool {
  pg_device* dev;
  pg_block* blocks; /* all blocks of the pool (through pool_next) */
  pg_block* free;   /* freed blocks the pool may hand out again */
  int64_t bytes;    /* sum of the sizes of `blocks` */
};

/* The pool this thread's allocations on pool->dev are made for. */
static __thread pg_pool* tl_pool;

typedef struct pg_allocator {
  pthread_mutex_t mu;
  pg_block* bins[NUM_BINS]; /* small blocks by power-of-two class */
  pg_block* large;          /* larger blocks, any order */
  pg_block* parked;         /* freed, waiting for events on other streams */
  uint64_t epoch;
} pg_allocator;

static size_t round_size(size_t n, int* bin) {
  if (n <= SMALL_LIMIT) {
    size_t s = 256;
    int b = 8;
    while (s < n) { s <<= 1; ++b; }
    *bin = b;
    return s;
  }
  *bin = -1;
  if (n > SIZE_MAX - LARGE_ROUND) return 0; /* cannot be rounded: refused */
  return (n + LARGE_ROUND - 1) / LARGE_ROUND * LARGE_ROUND;
}

void pg_allocator_init(pg_device* dev) {
  pg_allocator* a = calloc(1, sizeof(pg_allocator));
  if (a == NULL) return;
  pthread_mutex_init(&a->mu, NULL);
  dev->allocator = a;
}

/*** Free lists (called locked) ***/

/* Makes a freed block (no longer parked) available again: to its pool's
 * free blocks if a pool owns it, else to the shared cache. The statistics
 * already count it as cached (or in graphs). */
static void cache_block(pg_allocator* a, pg_block* b) {
  if (b->pool != NULL) {
    b->next = b->pool->free;
    b->pool->free = b;
    return;
  }
  int bin;
  round_size(b->size, &bin);
  if (bin >= 0) {
    b->next = a->bins[bin];
    a->bins[bin] = b;
  } else {
    b->next = a->large;
    a->large = b;
  }
}

/* Pops from `list` a block able to hold `size` bytes, best-fit, wasting at
 * most an eighth; NULL if there is none. */
static pg_block* take_fit(pg_block** list, size_t size) {
  pg_block** best = NULL;
  for (pg_block** p = list; *p != NULL; p = &(*p)->next) {
    size_t s = (*p)->size;
    if (s >= size && s <= size + size / 8 && (best == NULL || s < (*best)->size))
      best = p;
  }
  if (best == NULL) return NULL;
  pg_block* b = *best;
  *best = b->next;
  return b;
}

/* Pops a block able to hold `size` bytes: from the free blocks of `pool`
 * when allocating for a pool (all sizes best-fit), else from the shared
 * cache (a small class exactly, large blocks best-fit). Updates the
 * statistics; NULL if there is none. */
static pg_block* take_block(pg_device* dev, pg_allocator* a, pg_pool* pool,
                            size_t size, int bin) {
  pg_block* b;
  if (pool != NULL) {
    b = take_fit(&pool->free, size);
    if (b != NULL) dev->stats.bytes_in_graphs -= (int64_t)b->size;
  } else if (bin >= 0) {
    b = a->bins[bin];
    if (b != NULL) a->bins[bin] = b->next;
  } else {
    b = take_fit(&a->large, size);
  }
  if (b != NULL) {
    if (pool == NULL) dev->stats.bytes_cached -= (int64_t)b->size;
    dev->stats.num_cache_hits += 1;
  }
  return b;
}

/* Whether every event of a parked block has completed. */
static int events_done(pg_device* dev, const pg_block* b) {
  for (int i = 0; i < b->num_events; ++i) {
    if (dev->se->get_event_status(dev->device, b->events[i]->handle) == SE_EVENT_PENDING)
      return 0;
  }
  return 1;
}

/* Moves parked blocks whose events have all completed to the free lists. */
static void unpark_done(pg_device* dev, pg_allocator* a) {
  pg_block** p = &a->parked;
  while (*p != NULL) {
    pg_block* b = *p;
    if (!events_done(dev, b)) {
      p = &b->next;
      continue;
    }
    *p = b->next;
    for (int i = 0; i < b->num_events; ++i) pg_event_release(dev, b->events[i]);
    free(b->events);
    b->events = NULL;
    b->num_events = 0;
    b->num_uses = 0;
    cache_block(a, b);
  }
}

/* Detaches the cached blocks freed before `epoch`. */
static pg_block* detach_before(pg_allocator* a, uint64_t epoch) {
  pg_block* out = NULL;
  pg_block** lists[NUM_BINS + 1];
  for (int i = 0; i < NUM_BINS; ++i) lists[i] = &a->bins[i];
  lists[NUM_BINS] = &a->large;
  for (int i = 0; i <= NUM_BINS; ++i) {
    pg_block** p = lists[i];
    while (*p != NULL) {
      pg_block* b = *p;
      if (b->freed_epoch >= epoch) {
        p = &b->next;
        continue;
      }
      *p = b->next;
      b->next = out;
      out = b;
    }
  }
  return out;
}

/*** Releasing memory to the plugin ***/

static void free_block_struct(pg_block* b) {
  free(b->uses);
  free(b->events);
  free(b);
}

/* Returns to the plugin every cached block no queued work can still use:
 * those freed before this call began (see the rules at the top). */
static void release_cached(pg_device* dev, TF_Status* status) {
  pg_allocator* a = dev->allocator;
  pthread_mutex_lock(&a->mu);
  uint64_t epoch = ++a->epoch;
  pthread_mutex_unlock(&a->mu);

  TF_Status* st = TF_NewStatus();
  dev->se->synchronize_all_activity(dev->device, st);
  if (TF_GetCode(st) != TF_OK) {
    /* The device state is unknown: keep every block. */
    pg_set_status(status, TF_GetCode(st), "synchronising %s before returning "
                  "cached memory failed: %s", dev->name, TF_Message(st));
    TF_DeleteStatus(st);
    return;
  }
  TF_DeleteStatus(st);

  pthread_mutex_lock(&a->mu);
  unpark_done(dev, a);
  pg_block* out = detach_before(a, epoch);
  for (pg_block* b = out; b != NULL; b = b->next) {
    dev->stats.bytes_cached -= (int64_t)b->size;
    dev->stats.bytes_reserved -= (int64_t)b->size;
    dev->stats.num_plugin_frees += 1;
  }
  pthread_mutex_unlock(&a->mu);
  while (out != NULL) {
    pg_block* next = out->next;
    dev->se->deallocate(dev->device, &out->mem);
    free_block_struct(out);
    out = next;
  }
}

void pg_device_empty_cache(pg_device* dev, TF_Status* status) {
  TF_SetStatus(status, TF_OK, "");
  if (dev->allocator != NULL) release_cached(dev, status);
}

void pg_device_cache_stats(pg_device* dev, pg_alloc_stats* out) {
  pg_allocator* a = dev->allocator;
  if (a == NULL) {
    memset(out, 0, sizeof *out);
    return;
  }
  pthread_mutex_lock(&a->mu);
  *out = dev->stats;
  pthread_mutex_unlock(&a->mu);
}

/*** Allocation ***/

/* Asks the plugin for `size` bytes. Returns NULL when it has none; sets
 * `status` (and returns NULL) when its answer is unusable. */
static pg_block* plugin_allocate(pg_device* dev, size_t size,
                                 TF_Status* status) {
  pg_block* b = calloc(1, sizeof(pg_block));
  if (b == NULL) return NULL;
  b->mem.struct_size = SP_DEVICE_MEMORY_BASE_STRUCT_SIZE;
  dev->se->allocate(dev->device, size, 0, &b->mem);
  if (b->mem.opaque == NULL) {
    free(b);
    return NULL;
  }
  if (b->mem.size < size) {
    pg_set_status(status, TF_INTERNAL,
                  "SP_StreamExecutor.allocate on %s returned a buffer of %llu "
                  "bytes for a request of %zu bytes: the plugin is broken (it "
                  "must set SP_DeviceMemoryBase.size to at least the size "
                  "asked, or return NULL when it has no memory)", dev->name,
                  (unsigned long long)b->mem.size, size);
    dev->se->deallocate(dev->device, &b->mem);
    free(b);
    return NULL;
  }
  b->size = size;
  return b;
}

static void release_device_buffer(pg_buffer* buf);

/* Asks the plugin for a block of `size` bytes; if it has none, returns the
 * cache to the plugin and asks once more, except for a pool (a capture must
 * not synchronise the device). */
static pg_block* new_block(pg_device* dev, size_t size, pg_pool* pool,
                           TF_Status* status) {
  pg_allocator* a = dev->allocator;
  pg_block* b = NULL;
  int64_t retry_t0 = 0;
  for (int attempt = 0; attempt < (pool != NULL ? 1 : 2) && b == NULL; ++attempt) {
    if (attempt == 1) {
      retry_t0 = pg_trace_enabled() ? pg_trace_now() : 0;
      TF_Status* st = TF_NewStatus();
      release_cached(dev, st);
      TF_DeleteStatus(st);
    }
    b = plugin_allocate(dev, size, status);
    if (TF_GetCode(status) != TF_OK) return NULL;
  }
  if (retry_t0 != 0)
    pg_trace_add("AllocationRetry", dev->name, retry_t0, pg_trace_now(),
                 (int64_t)size, b != NULL);
  if (b != NULL) {
    pthread_mutex_lock(&a->mu);
    dev->stats.bytes_reserved += (int64_t)size;
    dev->stats.num_plugin_allocs += 1;
    pthread_mutex_unlock(&a->mu);
  }
  return b;
}

/* Counts `b` as allocated (called with a->mu held). */
static void count_alloc(pg_device* dev, pg_pool* pool, pg_block* b) {
  dev->stats.num_allocs += 1;
  dev->stats.bytes_in_use += (int64_t)b->size;
  if (dev->stats.bytes_in_use > dev->stats.peak_bytes_in_use)
    dev->stats.peak_bytes_in_use = dev->stats.bytes_in_use;
  if (pool != NULL && b->pool == NULL) { /* a new block of the pool */
    b->pool = pool;
    b->pool_next = pool->blocks;
    pool->blocks = b;
    pool->bytes += (int64_t)b->size;
  }
}

/* Takes a block for `size` bytes for `pool` (NULL: the shared cache) from
 * the free blocks or the plugin (see new_block), counted as allocated (under
 * the same lock as the take: this runs for every op's output). */
static pg_block* get_block(pg_device* dev, pg_pool* pool, size_t size, int bin,
                           TF_Status* status) {
  pg_allocator* a = dev->allocator;
  pthread_mutex_lock(&a->mu);
  if (a->parked != NULL) unpark_done(dev, a);
  pg_block* b = take_block(dev, a, pool, size, bin);
  if (b != NULL) count_alloc(dev, pool, b);
  pthread_mutex_unlock(&a->mu);
  if (b != NULL) return b;
  b = new_block(dev, size, pool, status);
  if (b != NULL) {
    pthread_mutex_lock(&a->mu);
    count_alloc(dev, pool, b);
    pthread_mutex_unlock(&a->mu);
  }
  return b;
}

pg_buffer* pg_device_alloc(pg_device* dev, size_t nbytes, TF_Status* status) {
  pg_allocator* a = dev->allocator;
  pg_buffer* buf = a != NULL ? pg_buffer_new(NULL, nbytes, release_device_buffer, NULL)
                             : NULL;
  if (buf == NULL) {
    pg_set_status(status, TF_RESOURCE_EXHAUSTED, "out of host memory");
    return NULL;
  }
  buf->device = dev;
  buf->forwardable = 1;
  if (nbytes == 0) return buf; /* no memory behind an empty tensor */

  int bin;
  size_t size = round_size(nbytes, &bin);
  pg_pool* pool = tl_pool != NULL && tl_pool->dev == dev ? tl_pool : NULL;
  pg_block* b = NULL;
  TF_SetStatus(status, TF_OK, "");
  if (size != 0) b = get_block(dev, pool, size, bin, status);
  if (b == NULL) {
    free(buf);
    if (TF_GetCode(status) != TF_OK) return NULL;
    pg_alloc_stats s;
    pthread_mutex_lock(&a->mu);
    dev->stats.num_ooms += 1;
    s = dev->stats;
    pthread_mutex_unlock(&a->mu);
    char limit[200] = "";
    if (dev->bytes_limit > 0)
      snprintf(limit, sizeof limit,
               " The memory limit configured for this logical device is "
               "%lld bytes (%.1f MiB): raise memory_limit in "
               "pg.config.set_logical_device_configuration, or leave it out.",
               (long long)dev->bytes_limit, dev->bytes_limit / 1048576.0);
    pg_set_status(status, TF_RESOURCE_EXHAUSTED,
                  "out of memory on %s: could not allocate %zu bytes "
                  "(%lld bytes are in use by live tensors%s). Free tensors "
                  "you no longer need or use smaller shapes.%s",
                  dev->name, nbytes, (long long)s.bytes_in_use,
                  pool != NULL ? ", while capturing a device graph"
                               : "; the cache was emptied and the "
                                 "allocation retried", limit);
    return NULL;
  }

  buf->owner = b;
  buf->mem = b->mem;
  buf->data = b->mem.opaque;
  return buf;
}

/*** Streams using a block ***/

void pg_buffer_record_stream(pg_buffer* buf, const SP_Stream* stream,
                             TF_Status* status) {
  TF_SetStatus(status, TF_OK, "");
  pg_device* dev = buf != NULL ? buf->device : NULL;
  pg_block* b = buf != NULL ? buf->owner : NULL;
  if (dev == NULL || buf->release != release_device_buffer || b == NULL ||
      stream == &dev->stream)
    return; /* host memory, empty tensors and the default stream: nothing */
  pg_allocator* a = dev->allocator;
  pthread_mutex_lock(&a->mu);
  int known = 0;
  for (int i = 0; i < b->num_uses; ++i) known |= b->uses[i].key == stream;
  if (!known && b->num_uses == b->cap_uses) {
    int cap = b->cap_uses ? b->cap_uses * 2 : 2;
    pg_stream_use* grown = realloc(b->uses, (size_t)cap * sizeof(pg_stream_use));
    if (grown == NULL) {
      pthread_mutex_unlock(&a->mu);
      pg_set_status(status, TF_RESOURCE_EXHAUSTED, "out of host memory");
      return;
    }
    b->uses = grown;
    b->cap_uses = cap;
  }
  if (!known) {
    b->uses[b->num_uses].key = stream;
    b->uses[b->num_uses++].handle = *stream;
  }
  pthread_mutex_unlock(&a->mu);
}

int pg_buffer_used_elsewhere(pg_buffer* buf) {
  pg_device* dev = buf != NULL ? buf->device : NULL;
  pg_block* b = buf != NULL ? buf->owner : NULL;
  if (dev == NULL || buf->release != release_device_buffer || b == NULL) return 0;
  pg_allocator* a = dev->allocator;
  pthread_mutex_lock(&a->mu);
  int used = b->num_uses > 0;
  pthread_mutex_unlock(&a->mu);
  return used;
}

void pg_tensor_record_stream(const TF_Tensor* t, const SP_Stream* stream,
                             TF_Status* status) {
  if (t == NULL || stream == NULL) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "record_stream: the tensor and the stream must not be NULL");
    return;
  }
  pg_buffer_record_stream(t->buf, stream, status);
}

/* Records an event on every other stream that used `b`. Returns 0 if one
 * could not be recorded (the caller then waits for the device instead). */
static int record_uses(pg_device* dev, pg_block* b) {
  b->events = calloc((size_t)b->num_uses, sizeof(pg_event*));
  if (b->events == NULL) return 0;
  TF_Status* st = TF_NewStatus();
  for (int i = 0; i < b->num_uses; ++i) {
    pg_event* ev = pg_event_acquire(dev, st);
    if (ev != NULL)
      dev->se->record_event(dev->device, b->uses[i].handle, ev->handle, st);
    if (TF_GetCode(st) != TF_OK) {
      pg_event_release(dev, ev); /* never recorded: reusable as is */
      break;
    }
    b->events[b->num_events++] = ev;
  }
  int ok = TF_GetCode(st) == TF_OK;
  TF_DeleteStatus(st);
  return ok;
}

/* Releases a device buffer: its block goes back to the cache, or to its pool
 * (parked first when other streams used it). */
static void release_device_buffer(pg_buffer* buf) {
  pg_device* dev = buf->device;
  pg_block* b = buf->owner;
  if (b == NULL) return;
  pg_allocator* a = dev->allocator;
  int park = 0;
  if (b->num_uses > 0) {
    park = record_uses(dev, b);
    if (!park) {
      /* No events: wait for everything instead, then reuse at once. */
      TF_Status* st = TF_NewStatus();
      dev->se->synchronize_all_activity(dev->device, st);
      TF_DeleteStatus(st);
      for (int i = 0; i < b->num_events; ++i)
        pg_event_release(dev, b->events[i]);
      free(b->events);
      b->events = NULL;
      b->num_events = 0;
      b->num_uses = 0;
    }
  }
  pthread_mutex_lock(&a->mu);
  dev->stats.bytes_in_use -= (int64_t)b->size;
  if (b->pool != NULL) /* a graph's block: only its own pool may hand it out */
    dev->stats.bytes_in_graphs += (int64_t)b->size;
  else
    dev->stats.bytes_cached += (int64_t)b->size;
  b->freed_epoch = a->epoch;
  if (park) {
    b->next = a->parked;
    a->parked = b;
  } else {
    cache_block(a, b);
  }
  pthread_mutex_unlock(&a->mu);
}

/*** Private pools ***/

pg_pool* pg_pool_new(pg_device* dev) {
  pg_pool* pool = calloc(1, sizeof(pg_pool));
  if (pool != NULL) pool->dev = dev;
  return pool;
}

void pg_pool_set_active(pg_pool* pool) { tl_pool = pool; }

int pg_pool_owns(const pg_pool* pool, const pg_buffer* buf) {
  return pool != NULL && buf != NULL && buf->release == release_device_buffer &&
         buf->owner != NULL && ((const pg_block*)buf->owner)->pool == pool;
}

int pg_pool_owns_active(const pg_buffer* buf) {
  return tl_pool != NULL && pg_pool_owns(tl_pool, buf);
}

int64_t pg_pool_bytes(const pg_pool* pool) {
  return pool != NULL ? pool->bytes : 0;
}

int pg_pool_addresses(pg_pool* pool, void** out, int64_t* sizes, int max) {
  if (pool == NULL) return 0;
  pg_allocator* a = pool->dev->allocator;
  int n = 0;
  pthread_mutex_lock(&a->mu);
  for (pg_block* b = pool->blocks; b != NULL; b = b->pool_next) {
    if (n < max) {
      out[n] = b->mem.opaque;
      sizes[n] = (int64_t)b->size;
    }
    ++n;
  }
  pthread_mutex_unlock(&a->mu);
  return n;
}

void pg_pool_release(pg_pool* pool) {
  if (pool == NULL) return;
  if (tl_pool == pool) tl_pool = NULL;
  pg_device* dev = pool->dev;
  pg_allocator* a = dev->allocator;
  pthread_mutex_lock(&a->mu);
  /* Parked blocks of the pool count as cached from now on; they join the
   * shared cache when their events complete. */
  for (pg_block* b = a->parked; b != NULL; b = b->next) {
    if (b->pool != pool) continue;
    dev->stats.bytes_in_graphs -= (int64_t)b->size;
    dev->stats.bytes_cached += (int64_t)b->size;
    b->freed_epoch = a->epoch;
  }
  for (pg_block* b = pool->blocks; b != NULL; b = b->pool_next) b->pool = NULL;
  /* Free blocks join the shared cache. Replays may have used them until
   * now: they are stamped with the current epoch, so only a later
   * synchronisation lets them go back to the plugin. */
  while (pool->free != NULL) {
    pg_block* b = pool->free;
    pool->free = b->next;
    dev->stats.bytes_in_graphs -= (int64_t)b->size;
    dev->stats.bytes_cached += (int64_t)b->size;
    b->freed_epoch = a->epoch;
    cache_block(a, b);
  }
  pthread_mutex_unlock(&a->mu);
  free(pool);
}
