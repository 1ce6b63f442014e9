/* Definitions shared by the core runtime's C files (not part of any API). */
#ifndef PLUGGABLE_INTERNAL_H_
#define PLUGGABLE_INTERNAL_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg_core.h"

/* Sets `status` (if non-NULL) to `code` with a printf-style message. */
void pg_set_status(TF_Status* status, TF_Code code, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The plugin whose TF_InitKernel is running (-1 outside), for attribution. */
int pg_current_plugin(void);

/* Copies `src` into the fixed buffer `dst[cap]`, always NUL-terminated.
 * Returns 1 if `src` did not fit (it was cut), else 0. */
int pg_copy_str(char* dst, size_t cap, const char* src);

/* A small number identifying the calling thread (never 0). */
uint64_t pg_thread_key(void);

/* One field of an ABI struct, for validation (plugin.c). */
typedef struct field_rule {
  const char* name;
  size_t offset, end;
  int required; /* the core cannot work without it */
  int tf;       /* optional here, but TensorFlow refuses a plugin without it
                   (enforced unless PLUGGABLE_LENIENT_PLUGINS=1) */
} field_rule;

#define FIELD(S, F, REQ) \
  {#S "." #F, offsetof(S, F), TF_OFFSET_OF_END(S, F), REQ, 0}
#define FIELD_TF(S, F) \
  {#S "." #F, offsetof(S, F), TF_OFFSET_OF_END(S, F), 0, 1}

/* Checks a struct the plugin filled against its rules: fields past its
 * struct_size are zeroed (absent); a struct_size of 0, a missing required
 * field or (unless lenient) a missing field TensorFlow requires sets `status`
 * (naming the field) and returns 0. */
int pg_check_struct(void* s, const char* struct_name, const char* size_macro,
                    const field_rule* rules, size_t n, TF_Status* status);

/* Whether `s` is a valid plugin device type (upper case, not "CPU"). */
int pg_valid_device_type(const char* s);

struct TF_Status {
  TF_Code code;
  char* msg;
  struct pg_payload* payloads;
};

/* Reference-counted storage shared by every TF_Tensor handle that views it
 * (buffer.c). Whoever creates a buffer says how its memory is released:
 * `release` runs once, when the last reference is dropped, and the buffer
 * struct itself is freed after it. */
typedef struct pg_buffer pg_buffer;
typedef void (*pg_release_fn)(pg_buffer* buf);

struct pg_buffer {
  atomic_int refs;
  void* data;              /* host pointer, or SP_DeviceMemoryBase.opaque */
  size_t nbytes;
  pg_device* device;       /* NULL for host memory */
  SP_DeviceMemoryBase mem; /* device buffers: the memory as the plugin gave it */
  pg_release_fn release;   /* NULL: nothing to release (caller-owned memory) */
  void* owner;             /* what `release` needs (allocator block, argument) */
  void (*deallocator)(void*, size_t, void*); /* external memory only */
  /* The core's own memory (host allocation or the device's allocator), which
   * a kernel may write an output over when the input holding it is donated
   * (TF_ForwardInputOrAllocateOutput); 0 for imported or caller-owned
   * memory, whose owner may still read it. */
  unsigned char forwardable;
};

typedef struct pg_opstate pg_opstate;

struct TF_Tensor {
  TF_DataType dtype;
  int num_dims;
  int64_t dims[TF_MAX_DIMS];
  pg_buffer* buf;
  /* The outcome of the op that produced this handle's value (opstate.c):
   * NULL for values no asynchronous op produced. One reference. */
  pg_opstate* state;
};

/* Buffers (buffer.c). */
pg_buffer* pg_buffer_new(void* data, size_t nbytes, pg_release_fn release,
                         void* owner);
pg_buffer* pg_buffer_new_host(size_t nbytes);
pg_buffer* pg_buffer_new_external(void* data, size_t nbytes,
                                  void (*dealloc)(void*, size_t, void*),
                                  void* arg);
void pg_buffer_ref(pg_buffer* b);
void pg_buffer_unref(pg_buffer* b);
/* Fills an SP_DeviceMemoryBase describing `buf`. */
void pg_buffer_mem(const pg_buffer* buf, SP_DeviceMemoryBase* mem);
/* Whether a stream other than its device's default stream was recorded
 * as using the device buffer `buf` (allocator.c); 0 for other memory. */
int pg_buffer_used_elsewhere(pg_buffer* buf);

/* Tensors over buffers (tensor.c). Builds a tensor handle over `buf` (takes
 * one reference). Returns NULL and sets `status` if the shape is invalid or
 * does not match the buffer. */
TF_Tensor* pg_tensor_new(TF_DataType dtype, const int64_t* dims, int num_dims,
                         pg_buffer* buf, TF_Status* status);
/* Checks dims and computes the byte size; -1 with `status` set if invalid. */
int64_t pg_shape_nbytes(TF_DataType dtype, const int64_t* dims, int num_dims,
                        TF_Status* status);

/* pg_kernel_run with planned output buffers (`preset[i]`, NULL: none), used
 * by graph plans (plan.c); `expect` as for pg_kernel_run. */
TF_Code pg_kernel_run_planned(pg_kernel* k, TF_Tensor* const* inputs,
                              TF_Tensor** outputs, const int64_t* expect,
                              pg_buffer* const* preset, TF_Status* status);

/* The device a kernel instance launches on. */
pg_device* pg_kernel_device(const pg_kernel* k);
/* A kernel instance's number of inputs, and its op's name. */
int pg_kernel_num_inputs(const pg_kernel* k);
const char* pg_kernel_op_name(const pg_kernel* k);

/* A step of a graph plan's run of consecutive kernels on one device (a
 * *span*, plan.c): pg_kernel_run_planned without `expect`, called with the
 * device's launch lock held (pg_op_launch_lock) for the whole span, so that
 * no other op's work comes between its steps. With `shares_event` the op
 * records no completion event of its own: its verdict is that of the next
 * event in the device's log, the one the span's last step records (or
 * pg_op_close_span, when a step fails before the last). `*logged` gets the
 * log's length after the op (for pg_op_maintain_span; -1 on failure). */
TF_Code pg_kernel_run_in_span(pg_kernel* k, TF_Tensor* const* inputs,
                              TF_Tensor** outputs, pg_buffer* const* preset,
                              int shares_event, int64_t* logged, TF_Status* status);

/* Device memory through the caching allocator (allocator.c). */
pg_buffer* pg_device_alloc(pg_device* dev, size_t nbytes, TF_Status* status);
void pg_allocator_init(pg_device* dev);
/* See pg_tensor_record_stream. */
void pg_buffer_record_stream(pg_buffer* buf, const SP_Stream* stream,
                             TF_Status* status);

/* Reusable events of a device (events.c). A pg_event is the core's own
 * object holding the plugin's handle, which may be any value (NULL, or the
 * same for every event): "has an event" is a non-NULL pg_event*, and
 * nothing is keyed on the handle. pg_event_acquire returns NULL and sets
 * `status` if the plugin cannot create one. Only events whose last
 * recording has completed may be released. */
typedef struct pg_event {
  SP_Event handle; /* as the plugin's create_event gave it */
} pg_event;
void pg_events_init(pg_device* dev);
pg_event* pg_event_acquire(pg_device* dev, TF_Status* status);
void pg_event_release(pg_device* dev, pg_event* ev);
/* Records `ev` (from pg_event_acquire; may be NULL) at the end of the
 * device's default stream, the mark of an op's (or a span's) end. Returns
 * `ev`, or NULL after releasing it where the plugin could not record it: a
 * synchronisation then settles the work before it. */
pg_event* pg_event_record_end(pg_device* dev, pg_event* ev);
/* Waits for the work queued so far on the device's default stream without
 * reporting or clearing the stream's error, which stays for the next
 * synchronisation (opstate.c): an event recorded at the stream's end, or
 * the device-wide wait where none can be had. */
void pg_device_drain_quietly(pg_device* dev);

/* Host callbacks that run at most once (callbacks.c): enqueues `fn(arg)` on
 * `stream`; returns 0 (and `fn` will never run) if the plugin refused it. */
int pg_host_callback_once(pg_device* dev, SP_Stream stream,
                          void (*fn)(void*), void* arg);

/* The outcome of asynchronous ops (opstate.c). */
void pg_oplog_init(pg_device* dev);
/* Returns 1 if no input carries a failure; else sets `status` to it. */
int pg_op_inputs_ok(TF_Tensor* const* inputs, int n, TF_Status* status);
/* Serialises a kernel launch with the event that marks its end. */
void pg_op_launch_lock(pg_device* dev);
void pg_op_launch_unlock(pg_device* dev);
/* Records a launched op: its outputs get a new state whose parents are the
 * unsettled states of its inputs; `event` (may be NULL) was recorded on the
 * default stream right after the op's work. Call with the launch lock held,
 * so that an op's work is never drained by a synchronisation before the op
 * is in the log. Returns the log's length (for pg_op_maintain). */
int64_t pg_op_launched(pg_device* dev, const char* op, TF_Tensor* const* inputs,
                       int num_inputs, pg_event* event, TF_Tensor** outputs,
                       int num_outputs);
/* pg_op_launched for an op of a span (see pg_kernel_run_in_span) that
 * records no event: its verdict is that of the next event in the log. */
int64_t pg_op_launched_in_span(pg_device* dev, const char* op, TF_Tensor* const* inputs,
                               int num_inputs, TF_Tensor** outputs, int num_outputs);
/* Ends a span whose last step failed: records an event that gives the
 * span's logged ops their verdict. Call with the launch lock held. */
void pg_op_close_span(pg_device* dev);
/* Settles what it can, or synchronises a log grown too long (`len`, from
 * pg_op_launched). Call without the launch lock. */
void pg_op_maintain(pg_device* dev, int64_t len);
/* pg_op_maintain after a span that took the log from length `first` to
 * `last` (as pg_op_launched returned them). */
void pg_op_maintain_span(pg_device* dev, int64_t first, int64_t last);
void pg_opstate_ref(pg_opstate* s);
void pg_opstate_unref(pg_opstate* s);
/* A state of no op, failed with `code` and `msg` from the start (`op`, which
 * must live as long as the process, is its origin); NULL without memory. */
pg_opstate* pg_opstate_new_failed(TF_Code code, const char* msg, const char* op);
/* The failed op of pg_tensor_given_up's handles, "(given up)" (opstate.c;
 * tensor.py's GIVEN_UP_OP). */
extern const char PG_GIVEN_UP_OP[];

/* The host's hooks (hooks.c): every call up into the host goes through it. */
extern pg_host_hooks pg_hooks;
/* Sets `status` to the failure `s` carries (OK if none); settles `s` first,
 * waiting for the device if needed. */
void pg_opstate_check(pg_device* dev, pg_opstate* s, TF_Status* status);
const char* pg_opstate_failed_op(const pg_opstate* s);

/* The device a kernel call runs on (kernels.c). */
pg_device* pg_context_device(TF_OpKernelContext* ctx);

/* Private pools of device blocks for captured graphs (allocator.c). While a
 * pool is active in a thread, that thread's allocations on the pool's device
 * belong to the pool; freed pool blocks are reused only by the pool. */
typedef struct pg_pool pg_pool;
pg_pool* pg_pool_new(pg_device* dev);
void pg_pool_set_active(pg_pool* pool); /* this thread; NULL: none */
int pg_pool_owns(const pg_pool* pool, const pg_buffer* buf);
/* Whether `buf` belongs to the pool active in this thread (its value is
 * produced by work being captured, which has not run). */
int pg_pool_owns_active(const pg_buffer* buf);
int64_t pg_pool_bytes(const pg_pool* pool);
int pg_pool_addresses(pg_pool* pool, void** out, int64_t* sizes, int max);
/* Free blocks go back to the shared cache, live ones when they are freed. */
void pg_pool_release(pg_pool* pool);

/* Stream capture (capture.c): the stream kernels of `dev` must enqueue on
 * when the calling thread is capturing on `dev`, else NULL. */
const SP_Stream* pg_capture_stream(const pg_device* dev);
/* Keeps the device buffers of a captured kernel's inputs alive for the
 * graph (nothing when the thread is not capturing on `dev`). */
void pg_capture_note_inputs(pg_device* dev, TF_Tensor* const* inputs, int n);
/* Takes ownership of host memory a captured kernel released (freed with the
 * graph); returns 0 when the thread is not capturing on `dev`. */
int pg_capture_keep_host(pg_device* dev, void* data);

/* Attribute lookup for kernels and shape functions. */
typedef enum pg_attr_kind {
  PG_ATTR_INT, PG_ATTR_FLOAT, PG_ATTR_BOOL, PG_ATTR_TYPE, PG_ATTR_STRING,
  PG_ATTR_INT_LIST, PG_ATTR_FLOAT_LIST, PG_ATTR_BOOL_LIST, PG_ATTR_TYPE_LIST,
  PG_ATTR_STRING_LIST,
} pg_attr_kind;

typedef struct pg_attr {
  char name[64];
  pg_attr_kind kind;
  int64_t i;           /* INT, BOOL, TYPE */
  float f;             /* FLOAT */
  int n;               /* list length */
  void* list;          /* int64_t / float / int / TF_DataType array */
  char* str;           /* STRING */
  size_t str_len;
  char** strs;         /* STRING_LIST */
  size_t* str_lens;
} pg_attr;

struct pg_attrs {
  int n, cap;
  pg_attr* items;
};

const pg_attr* pg_attrs_find(const pg_attrs* a, const char* name);

/* Shape handles used by shape inference. */
struct TF_ShapeHandle {
  int rank; /* -1 unknown */
  int64_t dims[TF_MAX_DIMS];
};
struct TF_DimensionHandle {
  int64_t value; /* -1 unknown */
};

#endif /* PLUGGABLE_INTERNAL_H_ */
