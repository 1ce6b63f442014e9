/* pluggable C API: device runtime (StreamExecutor C API).
 *
 * A device plugin exports
 *
 *     void SE_InitPlugin(SE_PlatformRegistrationParams* params,
 *                        TF_Status* status);
 *
 * and fills `params->platform` and `params->platform_fns`. The core then asks
 * for the device count, creates each device, its SP_DeviceFns and its
 * SP_StreamExecutor, and the platform's SP_TimerFns. Everything the device
 * runtime does (memory, copies, streams, events, timers) goes through the
 * callback tables below.
 *
 * Conventions
 *   - SE_ structs are allocated and filled by the core; SP_ structs are
 *     allocated by the core and filled by the plugin. The core zero-fills
 *     every struct and sets its `struct_size` before handing it over.
 *   - Every struct starts with `struct_size`. The plugin sets it to the
 *     matching *_STRUCT_SIZE macro of the header it was compiled against. The
 *     core uses it to tell which fields the plugin knows about: a field past
 *     `struct_size` is treated as absent (NULL / 0), so a plugin built against
 *     an older, smaller struct keeps loading. Fields are only ever appended.
 *   - `ext` fields are free for the owner's use (plugin in SP_ structs) or
 *     reserved (SE_ structs); the other side never reads them.
 *   - SP_Stream, SP_Event, SP_Timer and `device_handle` are opaque values
 *     chosen by the plugin. The core never dereferences, compares or hashes
 *     them: it keeps its own object for each stream, event and timer, holding
 *     the handle the create_* callback gave (status OK means created). Any
 *     value is legal, as in TensorFlow: NULL, or one value for every stream,
 *     event, timer or device (TensorFlow's sample plugin leaves them all
 *     NULL). A plugin that hands out such handles keeps the state they would
 *     name itself (device state by `SP_Device.ordinal`, one queue per device
 *     for all its streams), and its answers stay true for each object: an
 *     event recorded behind pending work reports SE_EVENT_PENDING until that
 *     work is done.
 *   - The core checks every answer before it uses it: allocation sizes,
 *     handles, statistics and memory figures; a bad answer becomes a typed
 *     error naming the plugin, never a crash.
 *   - [Required] callbacks must be non-NULL or the plugin is rejected with a
 *     message naming the field. [Optional] callbacks may be NULL; the comment
 *     says what the core does instead.
 *   - Strings the plugin hands over (`name`, `type`, `hardware_name`, ...)
 *     must stay valid until the matching destroy callback has run.
 *   - Callbacks that take a TF_Status report failure by setting it; the core
 *     passes a status set to TF_OK. A callback must never abort the process.
 *
 * Versioning: the core accepts a plugin whose SE_MAJOR equals its own and any
 * SE_MINOR / SE_PATCH. See docs/plugin-author-guide.md. */
#ifndef PLUGGABLE_STREAM_EXECUTOR_H_
#define PLUGGABLE_STREAM_EXECUTOR_H_

#include <stddef.h>
#include <stdint.h>

#include "c_api_macros.h"
#include "tf_status.h"

#define SE_MAJOR 0
#define SE_MINOR 0
#define SE_PATCH 1

#ifdef __cplusplus
extern "C" {
#endif

/* Plugin-defined handles (see Conventions). */
typedef struct SP_Stream_st* SP_Stream;
typedef struct SP_Event_st* SP_Event;
typedef struct SP_Timer_st* SP_Timer;

/* A function the plugin runs on the host from a stream (see host_callback).
 * First argument: the `callback_arg` given to host_callback. Second: a status
 * owned by the plugin, set to TF_OK, that the function may set to an error;
 * the plugin then treats it as an error of the stream. */
typedef void (*SE_StatusCallbackFn)(void* const, TF_Status* const);

/* Timer queries, filled by `SP_PlatformFns.create_timer_fns`. */
typedef struct SP_TimerFns {
  size_t struct_size; /* SP_TIMER_FNS_STRUCT_SIZE */
  void* ext;          /* free for the plugin */

  /* [Required when timers are supported] Returns the time between the
   * `start_timer` and `stop_timer` marks of `timer`, in nanoseconds. Called
   * only after the stream has passed the stop mark (the core synchronises
   * first). Must not block. */
  uint64_t (*nanoseconds)(SP_Timer timer);
} SP_TimerFns;

#define SP_TIMER_FNS_STRUCT_SIZE TF_OFFSET_OF_END(SP_TimerFns, nanoseconds)

/* Allocator statistics, filled by `get_allocator_stats`. Byte counts refer to
 * the plugin's own allocator (the core keeps separate statistics for its
 * caching layer above it). The `has_*` flags say whether the limit after them
 * is meaningful. */
typedef struct SP_AllocatorStats {
  size_t struct_size;         /* SP_ALLOCATORSTATS_STRUCT_SIZE */
  int64_t num_allocs;         /* allocations made since the device was created */
  int64_t bytes_in_use;       /* bytes currently allocated */
  int64_t peak_bytes_in_use;  /* largest value bytes_in_use has had */
  int64_t largest_alloc_size; /* largest single allocation so far */

  int8_t has_bytes_limit;     /* nonzero if bytes_limit is set */
  int64_t bytes_limit;        /* most bytes the allocator will hand out */

  int64_t bytes_reserved;       /* bytes reserved from the system */
  int64_t peak_bytes_reserved;  /* largest value of bytes_reserved */

  int8_t has_bytes_reservable_limit; /* nonzero if the next field is set */
  int64_t bytes_reservable_limit;    /* most bytes that can be reserved */

  int64_t largest_free_block_bytes;  /* largest block available now */
} SP_AllocatorStats;

#define SP_ALLOCATORSTATS_STRUCT_SIZE \
  TF_OFFSET_OF_END(SP_AllocatorStats, largest_free_block_bytes)

/* State of an event (see get_event_status). */
typedef enum SE_EventStatus {
  SE_EVENT_UNKNOWN,  /* the event was never recorded, or its state is lost */
  SE_EVENT_ERROR,    /* work enqueued on the stream before the event (and
                      * after the previous event recorded on that stream)
                      * failed: see record_event */
  SE_EVENT_PENDING,  /* recorded, the stream has not reached it yet */
  SE_EVENT_COMPLETE, /* the stream has passed the event */
} SE_EventStatus;

/* A region of device memory. `opaque` is the plugin's value for it (a device
 * address for most devices; TF_TensorData returns it); `size` is its length in
 * bytes; `payload` is free for the plugin. The core never dereferences
 * `opaque`. */
typedef struct SP_DeviceMemoryBase {
  size_t struct_size; /* SP_DEVICE_MEMORY_BASE_STRUCT_SIZE */
  void* ext;          /* free for the plugin */
  void* opaque;       /* the plugin's handle or address of the memory */
  uint64_t size;      /* length in bytes */
  uint64_t payload;   /* free for the plugin */
} SP_DeviceMemoryBase;

#define SP_DEVICE_MEMORY_BASE_STRUCT_SIZE \
  TF_OFFSET_OF_END(SP_DeviceMemoryBase, payload)

/* One device, filled by `SP_PlatformFns.create_device`. */
typedef struct SP_Device {
  size_t struct_size; /* SP_DEVICE_STRUCT_SIZE */
  void* ext;          /* free for the plugin */
  int32_t ordinal;    /* device index, 0 <= ordinal < device count */

  /* The plugin's own representation of the device, passed back to every
   * callback through `device`. Opaque to the core: NULL, or the same value
   * for every device, is legal (the core tells devices apart by its own
   * SP_Device structs; `ordinal` is there for a plugin to do the same). */
  void* device_handle;

  /* [Optional] Hardware name for display, e.g. "NVIDIA H100 80GB HBM3". */
  const char* hardware_name;

  /* [Optional] Vendor name for display, e.g. "NVIDIA". */
  const char* device_vendor;

  /* [Optional] PCI bus id "domain:bus:device.function", e.g. "0000:1b:00.0". */
  const char* pci_bus_id;
} SP_Device;

#define SP_DEVICE_STRUCT_SIZE TF_OFFSET_OF_END(SP_Device, pci_bus_id)

/* Arguments of `create_device`. */
typedef struct SE_CreateDeviceParams {
  size_t struct_size; /* SE_CREATE_DEVICE_PARAMS_STRUCT_SIZE */
  void* ext;          /* reserved */
  int32_t ordinal;    /* index of the device to create */

  /* Output: zero-filled with struct_size set by the core; the plugin fills
   * every field it knows, including struct_size. */
  SP_Device* device;
} SE_CreateDeviceParams;

#define SE_CREATE_DEVICE_PARAMS_STRUCT_SIZE \
  TF_OFFSET_OF_END(SE_CreateDeviceParams, device)

/* Per-device queries, filled by `create_device_fns`. All optional: a NULL
 * callback or a negative result means "unknown". */
typedef struct SP_DeviceFns {
  size_t struct_size; /* SP_DEVICE_FNS_STRUCT_SIZE */
  void* ext;          /* free for the plugin */

  /* [Optional] NUMA node nearest the device, or -1 when unknown. */
  int32_t (*get_numa_node)(const SP_Device* device);

  /* [Optional] Bandwidth of the device's own memory in bytes per second
   * (not host-device transfers). */
  int64_t (*get_memory_bandwidth)(const SP_Device* device);

  /* [Optional] Peak floating-point rate in GFLOP/s (10^9 operations/s). */
  double (*get_gflops)(const SP_Device* device);
} SP_DeviceFns;

#define SP_DEVICE_FNS_STRUCT_SIZE TF_OFFSET_OF_END(SP_DeviceFns, get_gflops)

/* Arguments of `create_device_fns`. */
typedef struct SE_CreateDeviceFnsParams {
  size_t struct_size; /* SE_CREATE_DEVICE_FNS_PARAMS_STRUCT_SIZE */
  void* ext;          /* reserved */
  SP_DeviceFns* device_fns; /* output, filled by the plugin */
} SE_CreateDeviceFnsParams;

#define SE_CREATE_DEVICE_FNS_PARAMS_STRUCT_SIZE \
  TF_OFFSET_OF_END(SE_CreateDeviceFnsParams, device_fns)

/* The device runtime of one device, filled by `create_stream_executor`.
 *
 * Threading: the core may call any callback from any thread, and several at
 * once for different streams. Asynchronous callbacks (those taking an
 * SP_Stream and not named sync_* or block_*) enqueue work and return without
 * waiting for it; work on one stream runs in the order it was enqueued.
 *
 * Errors in asynchronous work: a stream that fails keeps the first error;
 * later work on that stream may be skipped. `block_host_until_done` reports
 * that error and clears it, after which the stream accepts work again. */
typedef struct SP_StreamExecutor {
  size_t struct_size; /* SP_STREAMEXECUTOR_STRUCT_SIZE */
  void* ext;          /* free for the plugin */

  /*** Memory ***/

  /* [Required] Allocates `size` bytes of device memory, synchronously, and
   * describes it in `mem` (opaque = address/handle, size = the usable length,
   * at least `size`). On failure leave `mem->opaque` NULL; the core then
   * returns its cached memory, retries once, and raises
   * ResourceExhaustedError. A buffer whose `mem->size` is smaller than `size`
   * is handed back to `deallocate` and the allocation fails with an internal
   * error naming the device. `size` may be 0: return any value (NULL
   * included) that `deallocate` accepts. `memory_space` is 0. */
  void (*allocate)(const SP_Device* device, uint64_t size, int64_t memory_space,
                   SP_DeviceMemoryBase* mem);

  /* [Required] Frees memory returned by `allocate`. The core calls it only
   * after every stream has finished using the memory. Must accept a NULL
   * `opaque`. */
  void (*deallocate)(const SP_Device* device, SP_DeviceMemoryBase* memory);

  /* [Optional] Allocates `size` bytes of host memory suitable as the host side
   * of fast asynchronous copies (page-locked on GPUs). Returns NULL on
   * failure. Default: the core uses ordinary aligned host memory. */
  void* (*host_memory_allocate)(const SP_Device* device, uint64_t size);

  /* [Optional; required if host_memory_allocate is set] Frees memory from
   * host_memory_allocate. */
  void (*host_memory_deallocate)(const SP_Device* device, void* mem);

  /* [Optional; required if SP_Platform.supports_unified_memory] Allocates
   * `bytes` of memory addressable from host and device. Returns NULL on
   * failure. */
  void* (*unified_memory_allocate)(const SP_Device* device, uint64_t bytes);

  /* [Optional; required if SP_Platform.supports_unified_memory] Frees memory
   * from unified_memory_allocate. */
  void (*unified_memory_deallocate)(const SP_Device* device, void* location);

  /* [Optional] Fills `stats` and returns nonzero, or returns 0 if
   * statistics are unavailable. The core sets `stats->struct_size` to
   * SP_ALLOCATORSTATS_STRUCT_SIZE of its own header; the plugin writes no
   * field past that size (or past its own header's struct, if smaller) and
   * sets struct_size to what it filled. The core reads only the fields
   * below both sizes; negative counts are treated as unknown. */
  TF_Bool (*get_allocator_stats)(const SP_Device* device,
                                 SP_AllocatorStats* stats);

  /* [Optional] Stores free and total device memory in bytes and returns
   * nonzero, or returns 0 if unknown (outputs untouched). Answers with a
   * negative value or free > total are treated as unknown (and logged). */
  TF_Bool (*device_memory_usage)(const SP_Device* device, int64_t* free,
                                 int64_t* total);

  /*** Streams ***/

  /* [Required] Creates a stream: an in-order queue of device work. `*stream`
   * comes in NULL; any value the plugin leaves there is legal, NULL or one
   * shared by all streams included (see Conventions). */
  void (*create_stream)(const SP_Device* device, SP_Stream* stream,
                        TF_Status* status);

  /* [Required] Destroys a stream. The core first waits for it to finish. */
  void (*destroy_stream)(const SP_Device* device, SP_Stream stream);

  /* [Required] Makes work enqueued on `dependent` after this call wait until
   * everything enqueued on `other` before this call has finished. Must not
   * block the host. */
  void (*create_stream_dependency)(const SP_Device* device, SP_Stream dependent,
                                   SP_Stream other, TF_Status* status);

  /* [Required] Without blocking, sets `status` to the stream's error (see
   * above) or leaves it OK. Does not clear the error. */
  void (*get_stream_status)(const SP_Device* device, SP_Stream stream,
                            TF_Status* status);

  /*** Events ***/

  /* [Required] Creates an event (initially not recorded). `*event` comes in
   * NULL; any value is legal, NULL or one shared by all events included (see
   * Conventions). The core keeps a pool of events and records them again and
   * again. */
  void (*create_event)(const SP_Device* device, SP_Event* event,
                       TF_Status* status);

  /* [Required] Destroys an event. The core never destroys an event that a
   * stream still has to reach or wait for without synchronising first. */
  void (*destroy_event)(const SP_Device* device, SP_Event event);

  /* [Required] Returns the event's state without blocking. */
  SE_EventStatus (*get_event_status)(const SP_Device* device, SP_Event event);

  /* [Required] Enqueues the event on `stream`: it completes when the stream
   * reaches it. Recording again moves it to the new position.
   *
   * The core records an event on the default stream right after the work
   * of every op, and attributes asynchronous errors with them: when the
   * event's position is reached, its status should become SE_EVENT_ERROR if
   * work enqueued on that stream since the previous record_event on the
   * same stream failed (whether or not the stream already held an error),
   * and SE_EVENT_COMPLETE otherwise. An error is then reported for exactly
   * the values of the op that failed and those computed from them. A plugin
   * that cannot tell (its events never report SE_EVENT_ERROR) still works:
   * the core then gives the error to every value produced since the
   * previous synchronisation. */
  void (*record_event)(const SP_Device* device, SP_Stream stream,
                       SP_Event event, TF_Status* status);

  /* [Required] Makes work enqueued on `stream` after this call wait for the
   * event's last recorded position. Must not block the host. */
  void (*wait_for_event)(const SP_Device* const device, SP_Stream stream,
                         SP_Event event, TF_Status* const status);

  /*** Timers ***/

  /* [Optional, with the three below] Creates a timer. A plugin without
   * timers leaves all four NULL; the core then raises UnimplementedError when
   * a timer is asked for. Any handle is legal, NULL included (see
   * Conventions); `nanoseconds` is then given that handle, and a plugin
   * whose timers are NULL answers for the last interval it measured. */
  void (*create_timer)(const SP_Device* device, SP_Timer* timer,
                       TF_Status* status);

  /* [Optional] Destroys a timer. */
  void (*destroy_timer)(const SP_Device* device, SP_Timer timer);

  /* [Optional] Enqueues the start mark of `timer` on `stream`. */
  void (*start_timer)(const SP_Device* device, SP_Stream stream, SP_Timer timer,
                      TF_Status* status);

  /* [Optional] Enqueues the stop mark of `timer` on `stream`. */
  void (*stop_timer)(const SP_Device* device, SP_Stream stream, SP_Timer timer,
                     TF_Status* status);

  /*** Copies ***/

  /* [Required] Enqueues a copy of `size` bytes from device to host. The core
   * keeps `host_dst` valid until the stream has passed the copy. The plugin
   * may write `host_dst` at any time until then, and may return only once
   * the data is there (the CUDA reference plugin does for pageable memory,
   * which it stages through pinned chunks; into page-locked memory from
   * host_memory_allocate it only enqueues the copy). */
  void (*memcpy_dtoh)(const SP_Device* device, SP_Stream stream, void* host_dst,
                      const SP_DeviceMemoryBase* device_src, uint64_t size,
                      TF_Status* status);

  /* [Required] Enqueues a copy of `size` bytes from host to device. The core
   * keeps `host_src` valid and unchanged until the stream has passed it, so
   * the plugin may read it at any time until then (the CUDA reference plugin
   * reads pageable memory into pinned staging chunks before returning, and
   * lets the DMA read page-locked memory when the stream reaches it). */
  void (*memcpy_htod)(const SP_Device* device, SP_Stream stream,
                      SP_DeviceMemoryBase* device_dst, const void* host_src,
                      uint64_t size, TF_Status* status);

  /* [Required] Enqueues a copy of `size` bytes between two regions of device
   * memory of this platform. The source may belong to another device of the
   * same platform (the core synchronises that device first). */
  void (*memcpy_dtod)(const SP_Device* device, SP_Stream stream,
                      SP_DeviceMemoryBase* device_dst,
                      const SP_DeviceMemoryBase* device_src, uint64_t size,
                      TF_Status* status);

  /* [Required] Copies device to host and returns when the data is there.
   * Ordered after nothing: the core synchronises streams first if needed. */
  void (*sync_memcpy_dtoh)(const SP_Device* device, void* host_dst,
                           const SP_DeviceMemoryBase* device_src, uint64_t size,
                           TF_Status* status);

  /* [Required] Copies host to device and returns when the data is there. */
  void (*sync_memcpy_htod)(const SP_Device* device,
                           SP_DeviceMemoryBase* device_dst,
                           const void* host_src, uint64_t size,
                           TF_Status* status);

  /* [Required] Copies device to device and returns when done. */
  void (*sync_memcpy_dtod)(const SP_Device* device,
                           SP_DeviceMemoryBase* device_dst,
                           const SP_DeviceMemoryBase* device_src, uint64_t size,
                           TF_Status* status);

  /*** Synchronisation ***/

  /* [Required] Blocks the host until the event completes. Reports
   * TF_FAILED_PRECONDITION if the event was never recorded, where the plugin
   * can tell (a plugin with NULL or shared event handles cannot, and waits
   * for the work enqueued so far instead). */
  void (*block_host_for_event)(const SP_Device* device, SP_Event event,
                               TF_Status* status);

  /* [Optional] Blocks the host until all work enqueued on `stream` so far has
   * finished, then reports and clears the stream's error. Default: the core
   * records an event on the stream, waits with block_host_for_event, and
   * then asks get_stream_status. */
  void (*block_host_until_done)(const SP_Device* device, SP_Stream stream,
                                TF_Status* status);

  /* [Required] Blocks until all work on every stream of the device has
   * finished. Reports only a failure of the wait itself: errors of the
   * streams' work stay with the streams (see block_host_until_done). A
   * plugin whose runtime has a "current device" restores the caller's
   * current device before returning. */
  void (*synchronize_all_activity)(const SP_Device* device, TF_Status* status);

  /*** Fills ***/

  /* [Optional] Enqueues zeroing of `size` bytes at `location`. Default: the
   * core uses `memset` with pattern 0, then a host buffer copy. */
  void (*mem_zero)(const SP_Device* device, SP_Stream stream,
                   SP_DeviceMemoryBase* location, uint64_t size,
                   TF_Status* status);

  /* [Optional] Enqueues setting `size` bytes at `location` to `pattern`.
   * Default: the core copies a filled host buffer with memcpy_htod. */
  void (*memset)(const SP_Device* device, SP_Stream stream,
                 SP_DeviceMemoryBase* location, uint8_t pattern, uint64_t size,
                 TF_Status* status);

  /* [Optional] Enqueues setting `size` bytes (a multiple of 4) at `location`
   * to repetitions of the 32-bit `pattern`. Default: as for memset. */
  void (*memset32)(const SP_Device* device, SP_Stream stream,
                   SP_DeviceMemoryBase* location, uint32_t pattern,
                   uint64_t size, TF_Status* status);

  /* [Required] Enqueues `callback_fn(callback_arg, status)` to run on a host
   * thread once the stream reaches it; work after it waits until it returns.
   * The callback must not call back into the stream it runs on. An error set
   * by the callback becomes the stream's error. Returns nonzero if enqueued,
   * 0 if not (the callback then never runs). An enqueued callback must run
   * exactly once; the core's own callbacks ignore (and count) a second call
   * rather than free memory twice. */
  TF_Bool (*host_callback)(const SP_Device* device, SP_Stream stream,
                           SE_StatusCallbackFn callback_fn, void* callback_arg);
} SP_StreamExecutor;

#define SP_STREAMEXECUTOR_STRUCT_SIZE \
  TF_OFFSET_OF_END(SP_StreamExecutor, host_callback)

/* Arguments of `create_stream_executor`. */
typedef struct SE_CreateStreamExecutorParams {
  size_t struct_size; /* SE_CREATE_STREAM_EXECUTOR_PARAMS_STRUCT_SIZE */
  void* ext;          /* reserved */
  SP_StreamExecutor* stream_executor; /* output, filled by the plugin */
} SE_CreateStreamExecutorParams;

#define SE_CREATE_STREAM_EXECUTOR_PARAMS_STRUCT_SIZE \
  TF_OFFSET_OF_END(SE_CreateStreamExecutorParams, stream_executor)

/* The platform: one per plugin. */
typedef struct SP_Platform {
  size_t struct_size; /* SP_PLATFORM_STRUCT_SIZE */
  void* ext;          /* free for the plugin */

  /* [Required] Platform name, e.g. "MY_PLATFORM" or "CUDA": an upper-case
   * letter followed by upper-case letters, digits or underscores, unique
   * among loaded plugins. */
  const char* name;

  /* [Required] Device type users place work on, e.g. "MY_DEVICE" or "GPU":
   * an upper-case letter followed by upper-case letters and underscores.
   * "CPU" is reserved for the built-in device. */
  const char* type;

  /* Nonzero if unified_memory_allocate/deallocate are provided. */
  TF_Bool supports_unified_memory;

  /* Hint: nonzero asks the core to sub-allocate from large blocks (the core
   * always caches; this field is accepted for source compatibility). */
  TF_Bool use_bfc_allocator;

  /* Hint: nonzero asks the core to grow device memory on demand rather than
   * reserve it up front (the core always grows on demand). */
  TF_Bool force_memory_growth;
} SP_Platform;

#define SP_PLATFORM_STRUCT_SIZE \
  TF_OFFSET_OF_END(SP_Platform, force_memory_growth)

/* Platform callbacks, filled by SE_InitPlugin. */
typedef struct SP_PlatformFns {
  size_t struct_size; /* SP_PLATFORM_FNS_STRUCT_SIZE */
  void* ext;          /* free for the plugin */

  /* [Required] Stores the number of devices (>= 0). Zero is legal (for
   * example, no hardware present): the plugin then loads with no devices. */
  void (*get_device_count)(const SP_Platform* platform, int* device_count,
                           TF_Status* status);

  /* [Required] Fills `params->device` for `params->ordinal`. */
  void (*create_device)(const SP_Platform* platform,
                        SE_CreateDeviceParams* params, TF_Status* status);

  /* [Required] Frees what create_device allocated inside `device` (not the
   * struct itself, which the core owns). */
  void (*destroy_device)(const SP_Platform* platform, SP_Device* device);

  /* [Optional] Fills `params->device_fns`. Default: all queries unknown. */
  void (*create_device_fns)(const SP_Platform* platform,
                            SE_CreateDeviceFnsParams* params,
                            TF_Status* status);

  /* [Optional] Frees what create_device_fns allocated (not the struct). */
  void (*destroy_device_fns)(const SP_Platform* platform,
                             SP_DeviceFns* device_fns);

  /* [Required] Fills `params->stream_executor`. */
  void (*create_stream_executor)(const SP_Platform* platform,
                                 SE_CreateStreamExecutorParams* params,
                                 TF_Status* status);

  /* [Required] Frees what create_stream_executor allocated (not the struct). */
  void (*destroy_stream_executor)(const SP_Platform* platform,
                                  SP_StreamExecutor* stream_executor);

  /* [Optional] Fills `timer_fns`. Default: timers unsupported. */
  void (*create_timer_fns)(const SP_Platform* platform, SP_TimerFns* timer_fns,
                           TF_Status* status);

  /* [Optional] Frees what create_timer_fns allocated (not the struct). */
  void (*destroy_timer_fns)(const SP_Platform* platform,
                            SP_TimerFns* timer_fns);
} SP_PlatformFns;

#define SP_PLATFORM_FNS_STRUCT_SIZE \
  TF_OFFSET_OF_END(SP_PlatformFns, destroy_timer_fns)

/* Arguments of SE_InitPlugin. */
typedef struct SE_PlatformRegistrationParams {
  size_t struct_size; /* SE_PLATFORM_REGISTRATION_PARAMS_STRUCT_SIZE */
  void* ext;          /* reserved */

  /* In: the core's API version. Out: the plugin sets the version it was
   * built against (SE_MAJOR, SE_MINOR, SE_PATCH). */
  int32_t major_version;
  int32_t minor_version;
  int32_t patch_version;

  SP_Platform* platform;        /* output, filled by the plugin */
  SP_PlatformFns* platform_fns; /* output, filled by the plugin */

  /* [Optional] Frees what the plugin allocated inside `platform`. */
  void (*destroy_platform)(SP_Platform* platform);

  /* [Optional] Frees what the plugin allocated inside `platform_fns`. */
  void (*destroy_platform_fns)(SP_PlatformFns* platform_fns);
} SE_PlatformRegistrationParams;

#define SE_PLATFORM_REGISTRATION_PARAMS_STRUCT_SIZE \
  TF_OFFSET_OF_END(SE_PlatformRegistrationParams, destroy_platform_fns)

/* The entry point a device plugin exports. Fill `params` (see above) and
 * leave `status` OK, or set an error to have the plugin quarantined. Called
 * once, before any other callback. */
void SE_InitPlugin(SE_PlatformRegistrationParams* params, TF_Status* status);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PLUGGABLE_STREAM_EXECUTOR_H_ */
