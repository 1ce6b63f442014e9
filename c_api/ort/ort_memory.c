/* Device memory, copies and streams of the pluggable EP, from the plugin's
 * SP_StreamExecutor.
 *
 * Memory: each OrtEpDevice declares two OrtMemoryInfos (EpDevice_AddAllocatorInfo):
 * the device's own memory (DEFAULT) and host memory the device copies to and
 * from quickly (HOST_ACCESSIBLE). A GPU plugin's memory is ONNX Runtime's GPU
 * memory of the hardware's vendor; any other plugin's is NPU memory of
 * vendor PG_ORT_VENDOR_ID, so that ONNX Runtime never takes it for its CPU
 * memory (a host-memory plugin's device memory is still the plugin's to
 * manage). OrtEpFactory.CreateAllocator serves them with SP_StreamExecutor
 * allocate/deallocate and host_memory_allocate/deallocate (ordinary aligned
 * host memory when the plugin has none). With them ONNX Runtime keeps a
 * partition's outputs in device memory: the next partition reads them in
 * place, and only values a CPU node or the caller reads visit the host.
 *
 * Copies: the OrtDataTransferImpl copies between the CPU, the host-accessible
 * memory and the device with the plugin's memcpy_htod/dtoh/dtod. Each copy
 * has finished when CopyTensors returns (on the given stream when there is
 * one, which is then waited for), so ONNX Runtime may free or read either
 * side at once.
 *
 * Streams: one OrtSyncStreamImpl per ONNX Runtime stream, over an SP_Stream
 * of its own (create_stream); its handle is the plugin's native one where
 * the plugin exports PG_GetNativeStreamFns, else NULL. Notifications are
 * SP_Events: Activate records, WaitOnDevice makes the consumer's SP_Stream
 * wait (a consumer that is not one of the bridge's streams waits on the
 * host), WaitOnHost blocks. A partition's Compute runs on the device's
 * default stream and has finished when it returns, so the memory ONNX
 * Runtime frees afterwards is never still in use. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "ort_bridge.h"


/* Tensors copied between host memory and a device so far: by the data
 * transfer ONNX Runtime asks (below), by a partition whose input or output
 * ONNX Runtime kept in host memory, and each constant initializer copied in
 * at compile time (ort_partition.c). A value passed from one partition to
 * the next in device memory is not copied. */
static int64_t host_copies;
PG_EXPORT int64_t pg_ort_host_copies(void) {
  return __atomic_load_n(&host_copies, __ATOMIC_SEQ_CST);
}
void pg_ort_count_host_copies(int64_t n) { __atomic_add_fetch(&host_copies, n, __ATOMIC_SEQ_CST); }

/* The PCI-style vendor id of the memory of plugins that are not GPUs. */
#define PG_ORT_VENDOR_ID 0x5047

/*** Counters (for tests and diagnostics) ***/

/* host to device, device to host, device to device; of those, on a stream */
static int64_t transfers[4];
static int64_t device_bytes, live_device_blocks, live_streams, live_transfers;

#define COUNT(var, n) __atomic_add_fetch(&(var), (n), __ATOMIC_SEQ_CST)
#define READ(var) __atomic_load_n(&(var), __ATOMIC_SEQ_CST)

/* Copies ONNX Runtime asked the data transfer for: `kind` 0 host to device,
 * 1 device to host, 2 device to device (of one device); 3: how many of them
 * ran on one of the bridge's sync streams. */
PG_EXPORT int64_t pg_ort_transfers(int kind) {
  return kind >= 0 && kind < 4 ? READ(transfers[kind]) : -1;
}
/* Device memory ONNX Runtime holds through the bridge's allocators: bytes
 * and blocks (0 once every tensor and session is gone). */
PG_EXPORT int64_t pg_ort_device_bytes(void) { return READ(device_bytes); }
PG_EXPORT int64_t pg_ort_device_blocks(void) { return READ(live_device_blocks); }
/* Sync streams and data transfers not yet released. */
PG_EXPORT int64_t pg_ort_live_streams(void) { return READ(live_streams); }
PG_EXPORT int64_t pg_ort_live_transfers(void) { return READ(live_transfers); }

static void set_ok(TF_Status* st) { TF_SetStatus(st, TF_OK, ""); }

/*** Which memory is whose ***/

/* The memory devices of every declared memory info, to tell ONNX Runtime's
 * tensors apart. */
typedef struct mem_entry {
  bridge_platform* bp;
  pg_device* dev;
  const OrtMemoryDevice* md;
  int host; /* 1: HOST_ACCESSIBLE memory */
  const OrtMemoryInfo* info;
} mem_entry;

#define MAX_MEM (2 * 8 * PG_ORT_MAX_DEVICES)
static mem_entry mems[MAX_MEM];
static int num_mems;
static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;

#define EPFN(name, type) API_FN(pg_ort_ep, PG_ORTEP_##name, type)

static const OrtMemoryDevice* info_device(const OrtMemoryInfo* mi) {
  return EPFN(MemoryInfo_GetMemoryDevice, const OrtMemoryDevice* (*)(const OrtMemoryInfo*))(mi);
}
static int same_device(const OrtMemoryDevice* a, const OrtMemoryDevice* b) {
  return a != NULL && b != NULL &&
         EPFN(MemoryDevice_AreEqual,
              bool (*)(const OrtMemoryDevice*, const OrtMemoryDevice*))(a, b);
}
static int is_cpu(const OrtMemoryDevice* md) {
  return md != NULL &&
         EPFN(MemoryDevice_GetDeviceType, int (*)(const OrtMemoryDevice*))(md) ==
             PG_ORT_MEM_DEVICE_CPU;
}

/* The entry of memory device `md`, or NULL (CPU memory or another EP's). */
static const mem_entry* find_mem(const OrtMemoryDevice* md) {
  if (md == NULL) return NULL;
  int n = __atomic_load_n(&num_mems, __ATOMIC_ACQUIRE);
  for (int i = 0; i < n; i++)
    if (same_device(mems[i].md, md)) return &mems[i];
  return NULL;
}

static OrtStatus* make_info(bridge_platform* bp, int ordinal, const OrtHardwareDevice* hw,
                            int host, OrtMemoryInfo** out) {
  int gpu = strcmp(bp->device_type, "GPU") == 0;
  uint32_t vendor = PG_ORT_VENDOR_ID;
  if (gpu) vendor = API_FN(pg_ort, PG_ORT_HardwareDevice_VendorId,
                           uint32_t (*)(const OrtHardwareDevice*))(hw);
  char name[128];
  snprintf(name, sizeof name, "%s%s", bp->ep_name, host ? "_host_accessible" : "");
  typedef OrtStatus* (*fn)(const char*, int, uint32_t, int32_t, int, size_t, int,
                           OrtMemoryInfo**);
  return CALL(CreateMemoryInfo_V2, fn)(name, gpu ? PG_ORT_MEM_DEVICE_GPU : PG_ORT_MEM_DEVICE_NPU,
                                       vendor, ordinal,
                                       host ? PG_ORT_MEM_HOST_ACCESSIBLE : PG_ORT_MEM_DEFAULT, 0,
                                       PG_ORT_DEVICE_ALLOCATOR, out);
}

OrtStatus* pg_ort_add_memory(bridge_platform* bp, int ordinal, const OrtHardwareDevice* hw,
                             OrtEpDevice* ep_device) {
  OrtStatus* s = NULL;
  pthread_mutex_lock(&mem_lock);
  for (int host = 0; host < 2 && s == NULL; host++) {
    OrtMemoryInfo** slot = host ? &bp->host_info[ordinal] : &bp->device_info[ordinal];
    if (*slot != NULL) continue;
    if (num_mems >= MAX_MEM) {
      s = pg_ort_status(PG_ORT_FAIL, "pluggable: too many devices for the bridge's memory table");
      break;
    }
    if ((s = make_info(bp, ordinal, hw, host, slot)) != NULL) break;
    mem_entry* m = &mems[num_mems];
    m->bp = bp;
    m->dev = bp->devices[ordinal];
    m->md = info_device(*slot);
    m->host = host;
    m->info = *slot;
    __atomic_store_n(&num_mems, num_mems + 1, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&mem_lock);
  typedef OrtStatus* (*add_fn)(OrtEpDevice*, const OrtMemoryInfo*);
  if (s == NULL)
    s = EPFN(EpDevice_AddAllocatorInfo, add_fn)(ep_device, bp->device_info[ordinal]);
  if (s == NULL) s = EPFN(EpDevice_AddAllocatorInfo, add_fn)(ep_device, bp->host_info[ordinal]);
  return s;
}

static const OrtMemoryDevice* value_device(const OrtValue* v) {
  return EPFN(Value_GetMemoryDevice, const OrtMemoryDevice* (*)(const OrtValue*))(v);
}

int pg_ort_placement(const OrtValue* v, const pg_device* dev) {
  const OrtMemoryDevice* md = value_device(v);
  if (md == NULL || is_cpu(md)) return PG_ORT_IN_HOST;
  const mem_entry* m = find_mem(md);
  if (m == NULL) return PG_ORT_IN_OTHER;
  if (m->host) return PG_ORT_IN_HOST;
  return m->dev == dev ? PG_ORT_IN_DEVICE : PG_ORT_IN_OTHER;
}

/*** Device blocks: what allocate returned, by address ***/

typedef struct block {
  void* addr;
  SP_DeviceMemoryBase mem;
  pg_device* dev;
  struct block* next;
} block;

#define BUCKETS 1024
static block* blocks[BUCKETS];
static pthread_mutex_t block_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t bucket(const void* p) { return ((uintptr_t)p >> 6) % BUCKETS; }

/* The SP_DeviceMemoryBase that allocate returned for `addr` (what a
 * plugin's deallocate and kernels expect: `ext` and `payload` included), or
 * one describing `addr` alone. */
static SP_DeviceMemoryBase block_mem(void* addr, size_t nbytes) {
  SP_DeviceMemoryBase mem = {SP_DEVICE_MEMORY_BASE_STRUCT_SIZE, NULL, addr, nbytes, 0};
  pthread_mutex_lock(&block_lock);
  for (block* b = blocks[bucket(addr)]; b; b = b->next)
    if (b->addr == addr) {
      mem = b->mem;
      break;
    }
  pthread_mutex_unlock(&block_lock);
  mem.size = nbytes;
  return mem;
}

TF_Tensor* pg_ort_wrap_device(pg_device* dev, TF_DataType t, const int64_t* dims, int nd,
                              void* data, size_t nbytes, TF_Status* status) {
  pg_buffer* b = pg_buffer_new(data, nbytes, NULL, NULL);
  if (b == NULL) {
    TF_SetStatus(status, TF_RESOURCE_EXHAUSTED, "out of host memory");
    return NULL;
  }
  b->device = dev;
  b->mem = block_mem(data, nbytes);
  TF_Tensor* out = pg_tensor_new(t, dims, nd, b, status);
  pg_buffer_unref(b);
  if (out != NULL) set_ok(status);
  return out;
}

/*** Allocators ***/

typedef struct bridge_allocator {
  OrtAllocator a; /* first */
  const mem_entry* mem;
} bridge_allocator;

static void* device_alloc(OrtAllocator* self, size_t size) {
  bridge_allocator* ba = (bridge_allocator*)self;
  pg_device* dev = ba->mem->dev;
  if (ba->mem->host) {
    if (dev->se->host_memory_allocate != NULL)
      return dev->se->host_memory_allocate(dev->device, size ? size : 1);
    return pg_host_alloc(size ? size : 1);
  }
  block* b = calloc(1, sizeof *b);
  if (b == NULL) return NULL;
  b->mem.struct_size = SP_DEVICE_MEMORY_BASE_STRUCT_SIZE;
  /* A zero-byte tensor still needs an address of its own. */
  dev->se->allocate(dev->device, size ? size : 1, 0, &b->mem);
  if (b->mem.opaque == NULL || b->mem.size < (size ? size : 1)) {
    if (b->mem.opaque != NULL) dev->se->deallocate(dev->device, &b->mem);
    free(b);
    return NULL;
  }
  b->addr = b->mem.opaque;
  b->dev = dev;
  pthread_mutex_lock(&block_lock);
  size_t k = bucket(b->addr);
  b->next = blocks[k];
  blocks[k] = b;
  pthread_mutex_unlock(&block_lock);
  COUNT(device_bytes, (int64_t)b->mem.size);
  COUNT(live_device_blocks, 1);
  return b->addr;
}

static void device_free(OrtAllocator* self, void* p) {
  bridge_allocator* ba = (bridge_allocator*)self;
  pg_device* dev = ba->mem->dev;
  if (p == NULL) return;
  if (ba->mem->host) {
    if (dev->se->host_memory_deallocate != NULL) dev->se->host_memory_deallocate(dev->device, p);
    else pg_host_free(p);
    return;
  }
  block* found = NULL;
  pthread_mutex_lock(&block_lock);
  for (block** at = &blocks[bucket(p)]; *at; at = &(*at)->next)
    if ((*at)->addr == p) {
      found = *at;
      *at = found->next;
      break;
    }
  pthread_mutex_unlock(&block_lock);
  if (found == NULL) return; /* not ours: nothing to give back */
  /* Every copy and partition that used the block has finished (see the
   * top of this file): the plugin may have it back now. */
  int64_t size = (int64_t)found->mem.size; /* deallocate may clear it */
  dev->se->deallocate(dev->device, &found->mem);
  COUNT(device_bytes, -size);
  COUNT(live_device_blocks, -1);
  free(found);
}

static const OrtMemoryInfo* alloc_info(const OrtAllocator* self) {
  return ((const bridge_allocator*)self)->mem->info;
}

OrtStatus* pg_ort_create_allocator(OrtEpFactory* self, const OrtMemoryInfo* mi,
                                   const OrtKeyValuePairs* opts, OrtAllocator** out) {
  (void)opts;
  *out = NULL;
  const mem_entry* m = mi ? find_mem(info_device(mi)) : NULL;
  if (m == NULL || &m->bp->factory != self)
    return pg_ort_status(PG_ORT_INVALID_ARGUMENT, "pluggable: %s has no allocator for that "
                         "memory (use the memory infos of its OrtEpDevices)",
                         ((bridge_platform*)self)->ep_name);
  bridge_allocator* ba = calloc(1, sizeof *ba);
  if (ba == NULL) return pg_ort_status(PG_ORT_FAIL, "pluggable: out of memory");
  ba->a.version = PG_ORT_API_VERSION;
  ba->a.Alloc = device_alloc;
  ba->a.Free = device_free;
  ba->a.Info = alloc_info;
  ba->a.Reserve = device_alloc;
  ba->mem = m;
  *out = &ba->a;
  return NULL;
}

void pg_ort_release_allocator(OrtEpFactory* self, OrtAllocator* a) {
  (void)self;
  free(a);
}

/*** Streams ***/

typedef struct bridge_stream {
  OrtSyncStreamImpl impl; /* first */
  bridge_platform* bp;
  pg_device* dev;
  SP_Stream stream;
} bridge_stream;

typedef struct bridge_note {
  OrtSyncNotificationImpl impl; /* first */
  bridge_stream* producer;
  SP_Event event;
  int recorded;
} bridge_note;

static OrtStatus* from_tf(TF_Status* st, const char* what, const pg_device* dev) {
  OrtStatus* s = NULL;
  if (TF_GetCode(st) != TF_OK)
    s = pg_ort_status(PG_ORT_RUNTIME_EXCEPTION, "pluggable: %s on %s failed: %s", what,
                      dev->name, TF_Message(st));
  TF_DeleteStatus(st);
  return s;
}

static void stream_release(OrtSyncStreamImpl* self) {
  bridge_stream* s = (bridge_stream*)self;
  /* destroy_stream waits for the stream itself. */
  s->dev->se->destroy_stream(s->dev->device, s->stream);
  COUNT(live_streams, -1);
  free(s);
}

static void* stream_handle(OrtSyncStreamImpl* self) {
  bridge_stream* s = (bridge_stream*)self;
  const PG_NativeStreamFns* n = &s->bp->native;
  if (n->native_stream == NULL || n->kind == PG_NATIVE_STREAM_NONE) return NULL;
  TF_Status* st = TF_NewStatus();
  void* h = n->native_stream(s->dev->device, s->stream, st);
  if (TF_GetCode(st) != TF_OK) h = NULL;
  TF_DeleteStatus(st);
  return h;
}

/* Waits for everything enqueued on `s` so far. */
static OrtStatus* stream_wait(bridge_stream* s, const char* what) {
  TF_Status* st = TF_NewStatus();
  pg_device* d = s->dev;
  if (d->se->block_host_until_done != NULL) {
    d->se->block_host_until_done(d->device, s->stream, st);
  } else {
    SP_Event ev = NULL;
    d->se->create_event(d->device, &ev, st);
    if (TF_GetCode(st) == TF_OK) d->se->record_event(d->device, s->stream, ev, st);
    if (TF_GetCode(st) == TF_OK) d->se->block_host_for_event(d->device, ev, st);
    d->se->destroy_event(d->device, ev);
    if (TF_GetCode(st) == TF_OK) d->se->get_stream_status(d->device, s->stream, st);
  }
  return from_tf(st, what, d);
}

static OrtStatus* stream_flush(OrtSyncStreamImpl* self) {
  (void)self; /* work is submitted as it is enqueued */
  return NULL;
}

static OrtStatus* stream_run_end(OrtSyncStreamImpl* self) {
  return stream_wait((bridge_stream*)self, "finishing a session run's stream");
}

static void note_release(OrtSyncNotificationImpl* self) {
  bridge_note* n = (bridge_note*)self;
  pg_device* d = n->producer->dev;
  if (n->recorded) {
    TF_Status* st = TF_NewStatus();
    d->se->block_host_for_event(d->device, n->event, st); /* never destroy a pending event */
    TF_DeleteStatus(st);
  }
  d->se->destroy_event(d->device, n->event);
  free(n);
}

static OrtStatus* note_activate(OrtSyncNotificationImpl* self) {
  bridge_note* n = (bridge_note*)self;
  pg_device* d = n->producer->dev;
  TF_Status* st = TF_NewStatus();
  d->se->record_event(d->device, n->producer->stream, n->event, st);
  if (TF_GetCode(st) == TF_OK) n->recorded = 1;
  return from_tf(st, "recording a stream notification", d);
}

static OrtStatus* note_wait_host(OrtSyncNotificationImpl* self) {
  bridge_note* n = (bridge_note*)self;
  if (!n->recorded) return NULL;
  pg_device* d = n->producer->dev;
  TF_Status* st = TF_NewStatus();
  d->se->block_host_for_event(d->device, n->event, st);
  return from_tf(st, "waiting for a stream notification", d);
}

static bridge_stream* own_stream(const OrtSyncStream* s);

static OrtStatus* note_wait_device(OrtSyncNotificationImpl* self, OrtSyncStream* consumer) {
  bridge_note* n = (bridge_note*)self;
  bridge_stream* c = own_stream(consumer);
  if (!n->recorded) return NULL;
  if (c == NULL || c->dev != n->producer->dev) return note_wait_host(self);
  pg_device* d = c->dev;
  TF_Status* st = TF_NewStatus();
  d->se->wait_for_event(d->device, c->stream, n->event, st);
  return from_tf(st, "ordering two streams", d);
}

static OrtStatus* stream_notification(OrtSyncStreamImpl* self, OrtSyncNotificationImpl** out) {
  bridge_stream* s = (bridge_stream*)self;
  *out = NULL;
  bridge_note* n = calloc(1, sizeof *n);
  if (n == NULL) return pg_ort_status(PG_ORT_FAIL, "pluggable: out of memory");
  TF_Status* st = TF_NewStatus();
  s->dev->se->create_event(s->dev->device, &n->event, st);
  OrtStatus* err = from_tf(st, "creating an event", s->dev);
  if (err != NULL) {
    free(n);
    return err;
  }
  n->impl.ort_version_supported = PG_ORT_API_VERSION;
  n->impl.Release = note_release;
  n->impl.Activate = note_activate;
  n->impl.WaitOnDevice = note_wait_device;
  n->impl.WaitOnHost = note_wait_host;
  n->producer = s;
  *out = &n->impl;
  return NULL;
}

/* The bridge's stream behind `s`, or NULL (another EP's, or none). */
static bridge_stream* own_stream(const OrtSyncStream* s) {
  if (s == NULL) return NULL;
  const OrtSyncStreamImpl* impl =
      EPFN(SyncStream_GetImpl, const OrtSyncStreamImpl* (*)(const OrtSyncStream*))(s);
  if (impl == NULL || impl->Release != stream_release) return NULL;
  return (bridge_stream*)impl;
}

bool pg_ort_is_stream_aware(const OrtEpFactory* self) {
  (void)self;
  return true;
}

OrtStatus* pg_ort_create_sync_stream(OrtEpFactory* self, const OrtMemoryDevice* md,
                                     const OrtKeyValuePairs* opts, OrtSyncStreamImpl** out) {
  (void)opts;
  *out = NULL;
  const mem_entry* m = find_mem(md);
  if (m == NULL || &m->bp->factory != self) return NULL; /* not our memory: no stream */
  bridge_stream* s = calloc(1, sizeof *s);
  if (s == NULL) return pg_ort_status(PG_ORT_FAIL, "pluggable: out of memory");
  s->bp = m->bp;
  s->dev = m->dev;
  TF_Status* st = TF_NewStatus();
  s->dev->se->create_stream(s->dev->device, &s->stream, st);
  OrtStatus* err = from_tf(st, "creating a stream", s->dev);
  if (err != NULL) {
    free(s);
    return err;
  }
  s->impl.ort_version_supported = PG_ORT_API_VERSION;
  s->impl.Release = stream_release;
  s->impl.GetHandle = stream_handle;
  s->impl.CreateNotification = stream_notification;
  s->impl.Flush = stream_flush;
  s->impl.OnSessionRunEnd = stream_run_end;
  COUNT(live_streams, 1);
  *out = &s->impl;
  return NULL;
}

/*** Data transfer ***/

typedef struct bridge_transfer {
  OrtDataTransferImpl impl; /* first */
  bridge_platform* bp;
} bridge_transfer;

/* Where a copy's side is: the host (CPU or host-accessible memory), or a
 * device of this platform (*dev set). 0: neither. */
static int side(const bridge_transfer* t, const OrtMemoryDevice* md, pg_device** dev) {
  *dev = NULL;
  if (md == NULL) return 0;
  if (is_cpu(md)) return 1;
  const mem_entry* m = find_mem(md);
  if (m == NULL || m->bp != t->bp) return 0;
  if (m->host) return 1;
  *dev = m->dev;
  return 2;
}

static bool transfer_can_copy(const OrtDataTransferImpl* self, const OrtMemoryDevice* src,
                              const OrtMemoryDevice* dst) {
  const bridge_transfer* t = (const bridge_transfer*)self;
  pg_device *a, *b;
  int s = side(t, src, &a), d = side(t, dst, &b);
  if (s == 0 || d == 0) return false;
  if (s == 1 && d == 1) return !is_cpu(src) || !is_cpu(dst); /* CPU to CPU is ORT's */
  return s == 1 || d == 1 || a == b;
}

static OrtStatus* copy_one(bridge_transfer* t, const OrtValue* src, OrtValue* dst,
                           OrtSyncStream* stream) {
  pg_device *from, *to;
  int s = side(t, value_device(src), &from), d = side(t, value_device(dst), &to);
  size_t n = 0, m = 0;
  void *sp = NULL, *dp = NULL;
  OrtStatus* err = CALL(GetTensorSizeInBytes, OrtStatus* (*)(const OrtValue*, size_t*))(src, &n);
  if (err == NULL)
    err = CALL(GetTensorSizeInBytes, OrtStatus* (*)(const OrtValue*, size_t*))(dst, &m);
  if (err == NULL)
    err = CALL(GetTensorMutableData, OrtStatus* (*)(OrtValue*, void**))((OrtValue*)src, &sp);
  if (err == NULL) err = CALL(GetTensorMutableData, OrtStatus* (*)(OrtValue*, void**))(dst, &dp);
  if (err != NULL) return err;
  if (s == 0 || d == 0 || (s == 2 && d == 2 && from != to))
    return pg_ort_status(PG_ORT_INVALID_ARGUMENT, "pluggable: %s cannot copy between these "
                         "memories (its own devices' and the CPU's only)", t->bp->ep_name);
  if (n != m)
    return pg_ort_status(PG_ORT_INVALID_ARGUMENT, "pluggable: copying a tensor of %zu bytes "
                         "into one of %zu bytes", n, m);
  if (n == 0) return NULL;
  if (s == 1 && d == 1) {
    memcpy(dp, sp, n);
    return NULL;
  }
  pg_device* dev = s == 2 ? from : to;
  bridge_stream* bs = own_stream(stream);
  if (bs != NULL && bs->dev != dev) bs = NULL;
  TF_Status* st = TF_NewStatus();
  SP_DeviceMemoryBase src_mem = block_mem(sp, n), dst_mem = block_mem(dp, n);
  const SP_StreamExecutor* se = dev->se;
  int kind = s == 1 ? 0 : d == 1 ? 1 : 2;
  if (bs != NULL) {
    if (kind == 0) se->memcpy_htod(dev->device, bs->stream, &dst_mem, sp, n, st);
    else if (kind == 1) se->memcpy_dtoh(dev->device, bs->stream, dp, &src_mem, n, st);
    else se->memcpy_dtod(dev->device, bs->stream, &dst_mem, &src_mem, n, st);
    if (TF_GetCode(st) == TF_OK) {
      TF_DeleteStatus(st);
      if ((err = stream_wait(bs, "a copy on the session's stream")) != NULL) return err;
      st = NULL;
      COUNT(transfers[3], 1);
    }
  } else {
    /* Work of the device's default stream (a partition's) has finished
     * when its Compute returned: the synchronous copies need no wait. */
    if (kind == 0) se->sync_memcpy_htod(dev->device, &dst_mem, sp, n, st);
    else if (kind == 1) se->sync_memcpy_dtoh(dev->device, dp, &src_mem, n, st);
    else se->sync_memcpy_dtod(dev->device, &dst_mem, &src_mem, n, st);
  }
  if (st != NULL && (err = from_tf(st, kind == 0 ? "a copy to the device"
                                       : kind == 1 ? "a copy from the device"
                                                   : "a copy within the device", dev)))
    return err;
  COUNT(transfers[kind], 1);
  if (kind != 2) pg_ort_count_host_copies(1);
  return NULL;
}

static OrtStatus* transfer_copy(OrtDataTransferImpl* self, const OrtValue** src, OrtValue** dst,
                                OrtSyncStream** streams, size_t n) {
  bridge_transfer* t = (bridge_transfer*)self;
  for (size_t i = 0; i < n; i++) {
    OrtStatus* err = copy_one(t, src[i], dst[i], streams ? streams[i] : NULL);
    if (err != NULL) return err;
  }
  return NULL;
}

static void transfer_release(OrtDataTransferImpl* self) {
  COUNT(live_transfers, -1);
  free(self);
}

OrtStatus* pg_ort_create_data_transfer(OrtEpFactory* self, OrtDataTransferImpl** out) {
  bridge_transfer* t = calloc(1, sizeof *t);
  *out = NULL;
  if (t == NULL) return pg_ort_status(PG_ORT_FAIL, "pluggable: out of memory");
  t->impl.ort_version_supported = PG_ORT_API_VERSION;
  t->impl.Release = transfer_release;
  t->impl.CanCopy = transfer_can_copy;
  t->impl.CopyTensors = transfer_copy;
  t->bp = (bridge_platform*)self;
  COUNT(live_transfers, 1);
  *out = &t->impl;
  return NULL;
}
