/* The core runtime's interface to the Python layer.
 *
 * Everything here is private to pluggable: plugins see only the TF_* API of
 * c_api/include. The cffi build script feeds this file (without preprocessor
 * lines) to `ffibuilder.cdef`, so Python's view of these declarations is the
 * same text the C compiler reads. */
#ifndef PLUGGABLE_PG_CORE_H_
#define PLUGGABLE_PG_CORE_H_

#include <stdint.h>

#include "grappler.h"
#include "kernels.h"
#include "kernels_experimental.h"
#include "ops.h"
#include "stream_capture.h"
#include "pluggable_profiler.h"
#include "stream_executor.h"
#include "tf_buffer.h"
#include "tf_datatype.h"
#include "tf_status.h"
#include "tf_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/*** Plugins and devices ***/

/* One loaded platform (the SE_InitPlugin side of a plugin). */
typedef struct pg_platform {
  SE_PlatformRegistrationParams params;
  SP_Platform* platform;
  SP_PlatformFns* fns;
  SP_TimerFns* timer_fns;
  int has_timers;
  int device_count;
  int plugin_id;
  /* Stream capture (SE_InitStreamCapture), or NULL when not registered. */
  SP_StreamCaptureFns* capture_fns;
  SE_StreamCaptureRegistrationParams* capture_params;
  /* The host-copy extension's memcpy_htod_consumed (pluggable_host_copy.h),
   * or NULL when the plugin does not provide it. */
  void (*htod_consumed)(const SP_Device* device, SP_Stream stream,
                        SP_DeviceMemoryBase* device_dst, const void* host_src,
                        uint64_t size, TF_Status* status);
} pg_platform;

/* Per-device statistics of the core's caching allocator. */
typedef struct pg_alloc_stats {
  int64_t bytes_in_use;     /* bytes held by live tensors and buffers */
  int64_t peak_bytes_in_use;
  int64_t bytes_cached;     /* bytes held in free lists for reuse */
  int64_t bytes_reserved;   /* bytes obtained from the plugin, in use or cached */
  int64_t num_allocs;       /* allocations served */
  int64_t num_cache_hits;   /* of those, served from the free lists */
  int64_t num_plugin_allocs;  /* calls to SP_StreamExecutor.allocate */
  int64_t num_plugin_frees;   /* calls to SP_StreamExecutor.deallocate */
  int64_t num_ooms;           /* allocations that failed after retrying */
  int64_t bytes_in_graphs;    /* freed blocks kept for captured device graphs */
} pg_alloc_stats;

/* One device of a platform, with its stream executor and default stream. */
typedef struct pg_device {
  pg_platform* platform;
  int ordinal;
  SP_Device* device;
  SP_DeviceFns* device_fns;
  SP_StreamExecutor* se;
  SP_Stream stream;         /* the default stream: ops and copies run here */
  char name[96];            /* "/device:MY_DEVICE:0" */
  void* allocator;          /* private: the caching allocator (allocator.c) */
  void* events;             /* private: the pool of reusable events (events.c) */
  void* oplog;              /* private: ops whose outcome is not known yet (opstate.c) */
  pg_alloc_stats stats;     /* written under the allocator's lock: read it
                             * through pg_device_cache_stats */
  SP_Stream capture_stream; /* the stream captures record on, once created */
  int capturing;            /* 1 while a thread captures on this device */
  int64_t bytes_limit;      /* the configured memory limit of a logical
                             * device, in bytes (0: none) */
  int has_capture_stream;   /* capture_stream was created (any handle,
                             * NULL included, is legal) */
} pg_device;

/* Opens a shared library with RTLD_NOW | RTLD_LOCAL. Returns NULL and writes
 * the loader's message into err[errlen] on failure. */
void* pg_dlopen(const char* path, char* err, size_t errlen);
void* pg_dlsym(void* handle, const char* name);

/* Calls SE_InitPlugin and validates what it filled (versions, struct sizes,
 * required callbacks, names), then creates the timer fns and reads the device
 * count. Returns NULL with `status` set (the message names the field) on any
 * failure. */
pg_platform* pg_platform_init(void* se_init_plugin, int plugin_id,
                              TF_Status* status);

/* Asks the plugin's PG_GetHostCopyFns (`getter`, found with dlsym) for the
 * host-copy extension (pluggable_host_copy.h) and keeps what it supports.
 * Returns 1 when a copy function was taken, else 0 (not supported). */
int pg_platform_init_host_copy(pg_platform* p, void* getter);

/* Creates device `ordinal`: SP_Device, SP_DeviceFns, SP_StreamExecutor
 * (validated), the default stream and the caching allocator. */
pg_device* pg_device_create(pg_platform* p, int ordinal, TF_Status* status);

/* Creates a logical device on physical device `physical_ordinal`: the
 * plugin creates that device again (its own SP_Device, stream executor and
 * default stream) and the core gives it its own caching allocator. Its name
 * is "/device:TYPE:<logical_ordinal>". With `bytes_limit` > 0, the device
 * memory it obtains from the plugin never exceeds `bytes_limit` bytes: an
 * allocation past it fails with RESOURCE_EXHAUSTED on this device only. */
pg_device* pg_device_create_logical(pg_platform* p, int physical_ordinal,
                                    int logical_ordinal, int64_t bytes_limit,
                                    TF_Status* status);

/* Calls TF_InitKernel of a plugin; registrations made during the call are
 * attributed to `plugin_id`. */
void pg_call_init_kernel(void* tf_init_kernel, int plugin_id);

/*** Memory ***/

/* Allocates `nbytes` of device memory through the caching allocator.
 * `status` is RESOURCE_EXHAUSTED (naming the size and the bytes in use) when
 * even an emptied cache cannot serve it. */
TF_Tensor* pg_device_alloc_tensor(pg_device* dev, TF_DataType dtype,
                                  const int64_t* dims, int num_dims,
                                  TF_Status* status);
/* Returns every cached block that no queued work can still use to the
 * plugin. Safe from any thread at any time: blocks freed after the call
 * began stay cached. */
void pg_device_empty_cache(pg_device* dev, TF_Status* status);
/* A consistent copy of the allocator statistics (taken under its lock). */
void pg_device_cache_stats(pg_device* dev, pg_alloc_stats* out);
/* Records that a stream other than the device's default stream uses the
 * memory of `t`: when the memory is freed it is reused or returned to the
 * plugin only after the work enqueued on that stream until then has
 * completed. `stream` is the core's cell holding the stream's handle (a
 * Stream object's, or &dev->stream for the default stream): the cell's
 * address identifies the stream, since the plugin's handle may be NULL or
 * the same value for every stream. */
void pg_tensor_record_stream(const TF_Tensor* t, const SP_Stream* stream,
                             TF_Status* status);

/* Waits for the default stream. An asynchronous error it reports is given to
 * the op results it belongs to (see opstate.c); `status` carries only an
 * error that belongs to no op result. */
void pg_device_sync(pg_device* dev, TF_Status* status);
/* pg_device_sync, then reports the first asynchronous failure of an op that
 * the calling thread launched and that was not reported to it yet. */
void pg_device_synchronize(pg_device* dev, TF_Status* status);
/* Number of launched ops whose outcome the core has not settled yet. */
int64_t pg_device_unsettled_ops(pg_device* dev);

/* Tensor <-> host. */
TF_Tensor* pg_tensor_from_host(pg_device* dev, TF_DataType dtype,
                               const int64_t* dims, int num_dims,
                               const void* src, size_t nbytes,
                               TF_Status* status);
/* Copies the value of `t` into `dst` and waits; `status` is the error of the
 * op that produced `t` (or of one it was computed from) if that failed. */
void pg_tensor_to_host(const TF_Tensor* t, void* dst, size_t nbytes,
                       TF_Status* status);
/* Sets `status` to the asynchronous failure `t` carries, waiting for the
 * device when its outcome is not known yet; OK if it has none. */
void pg_tensor_check(const TF_Tensor* t, TF_Status* status);
/* The op whose asynchronous failure `t` carries, or NULL. */
const char* pg_tensor_failed_op(const TF_Tensor* t);
/* A handle sharing the buffer of `t` that fails every use with
 * FAILED_PRECONDITION and `msg` (its failed op is "(given up)"): what a
 * donated input's owner keeps after the call that took the input (see
 * pg_kernel_run1_donated). NULL without memory. */
TF_Tensor* pg_tensor_given_up(const TF_Tensor* t, const char* msg);
/* Copies `src` (on any device or the host) to a new tensor on `dev`; fails
 * with the failure `src` carries, if any. */
TF_Tensor* pg_tensor_copy_to_device(const TF_Tensor* src, pg_device* dev,
                                    TF_Status* status);
/* Wraps host memory owned by the caller (kept alive by the caller). */
TF_Tensor* pg_tensor_wrap_host(TF_DataType dtype, const int64_t* dims,
                               int num_dims, void* data, size_t nbytes);
pg_device* pg_tensor_device(const TF_Tensor* t);
/* The layout of the core's TF_Tensor, for reading dtype and shape from
 * Python without a call per field (tensor.c checks that it matches). */
typedef struct pg_tensor_view {
  TF_DataType dtype;
  int num_dims;
  int64_t dims[TF_MAX_DIMS];
} pg_tensor_view;

/* Describes the memory of a device tensor as the plugin allocated it. */
void pg_tensor_mem(const TF_Tensor* t, SP_DeviceMemoryBase* mem);
const int64_t* pg_tensor_dims(const TF_Tensor* t);
/* A new handle sharing the buffer of `t`. */
TF_Tensor* pg_tensor_ref(const TF_Tensor* t);
/* A view of `t` with shape `dims`: a new handle sharing its buffer and the
 * outcome of the op that produced it (Reshape of a device tensor, which
 * needs no kernel). Fails with INVALID_ARGUMENT when `dims` does not hold
 * as many bytes as `t` (or `t` has no fixed element size), and with the
 * failure `t` carries when the op that produced it is known to have failed
 * (as an op's launch does). */
TF_Tensor* pg_tensor_reshaped(const TF_Tensor* t, const int64_t* dims,
                              int num_dims, TF_Status* status);

/* Enqueues host work as an op of `dev` (custom operators on host-memory
 * devices): `fn(arg, status)` runs on a host thread when the default stream
 * reaches it, and its `status` is the op's asynchronous outcome, carried by
 * `outputs` (device tensors the caller allocated; they get the op's state,
 * see opstate.c) like a kernel's. `op` must live as long as the process.
 * Fails at once with the failure an input carries, or INTERNAL if the
 * plugin refused the callback (then `fn` never runs). */
TF_Code pg_host_op_launch(pg_device* dev, const char* op,
                          TF_Tensor* const* inputs, int num_inputs,
                          void (*fn)(void*, TF_Status*), void* arg,
                          TF_Tensor** outputs, int num_outputs,
                          TF_Status* status);

/* AOT custom operators on host-memory devices (aot.c). A prep holds, for
 * one (op, shapes, attributes), the AOT function `fn` (`name` describes it
 * in errors: "custom op function <name> returned <code>") and copies of its
 * argument arrays: `nparam` ranks, shapes and MindSpore dtype strings of the
 * inputs, then the outputs (dtypes `out_types`), then the workspace buffers
 * (uint8), and the three AotExtra words `extra` (table, kernel data,
 * release). The kernel data is released through `extra[2]` with the prep's
 * last reference (the caller's, dropped by pg_aot_prep_release, or a pending
 * call's). NULL when the counts do not fit or out of memory. */
typedef struct pg_aot_prep pg_aot_prep;
pg_aot_prep* pg_aot_prepare(const char* name, void* fn, int nparam,
                            int num_inputs, int num_outputs,
                            const int* ndims, int64_t* const* shapes,
                            const char* const* dtypes,
                            const TF_DataType* out_types,
                            void* const* extra);
void pg_aot_prep_release(pg_aot_prep* p);
/* Enqueues one call of `p`'s function on `dev`'s stream (pg_host_op_launch):
 * allocates the outputs (new handles in `outputs`, owned by the caller) and
 * the workspace, and passes the addresses of `inputs` (device tensors of
 * `dev`), outputs and workspace. A non-zero return of the function is the
 * op's asynchronous UNKNOWN error, carried by the outputs. On failure no
 * output is returned (all NULL). `op` must live as long as the process. */
TF_Code pg_aot_launch(pg_device* dev, const char* op, pg_aot_prep* p,
                      TF_Tensor* const* inputs, TF_Tensor** outputs,
                      TF_Status* status);

/*** Attributes ***/

typedef struct pg_attrs pg_attrs;
pg_attrs* pg_attrs_new(void);
void pg_attrs_free(pg_attrs* a);
void pg_attrs_set_int(pg_attrs* a, const char* name, int64_t v);
void pg_attrs_set_float(pg_attrs* a, const char* name, float v);
void pg_attrs_set_bool(pg_attrs* a, const char* name, int v);
void pg_attrs_set_type(pg_attrs* a, const char* name, TF_DataType v);
void pg_attrs_set_string(pg_attrs* a, const char* name, const char* v,
                         size_t len);
void pg_attrs_set_int_list(pg_attrs* a, const char* name, const int64_t* v,
                           int n);
void pg_attrs_set_float_list(pg_attrs* a, const char* name, const float* v,
                             int n);
void pg_attrs_set_bool_list(pg_attrs* a, const char* name, const int* v,
                            int n);
void pg_attrs_set_type_list(pg_attrs* a, const char* name,
                            const TF_DataType* v, int n);
void pg_attrs_set_string_list(pg_attrs* a, const char* name,
                              const char* const* v, const size_t* lens, int n);

/*** Kernels ***/

#define PG_MAX_CONSTRAINTS 8
#define PG_MAX_HOST_ARGS 8

/* Bits of pg_kernel_def.name_too_long: which name did not fit its field. */
#define PG_LONG_OP_NAME 1     /* op_name: 127 characters at most */
#define PG_LONG_DEVICE_TYPE 2 /* device_type: 63 */
#define PG_LONG_LABEL 4       /* label: 63 */
#define PG_LONG_ATTR_NAME 8   /* a type-constraint attribute: 63 */
#define PG_LONG_ARG_NAME 16   /* a host-memory argument: 63 */

/* A registered kernel (the registered TF_KernelBuilder). */
typedef struct pg_kernel_def {
  char op_name[128];
  char device_type[64];
  char label[64];
  void* (*create_func)(TF_OpKernelConstruction*);
  void (*compute_func)(void*, TF_OpKernelContext*);
  void (*delete_func)(void*);
  int num_constraints;
  char constraint_attr[PG_MAX_CONSTRAINTS][64];
  TF_DataType constraint_type[PG_MAX_CONSTRAINTS];
  int num_host_args;
  char host_args[PG_MAX_HOST_ARGS][64];
  int32_t priority;
  int plugin_id;
  int64_t calls;     /* times compute_func was called */
  int64_t forwarded; /* outputs written over a donated input (kernels.c) */
  int overflow;      /* too many constraints / host args were given */
  int name_too_long; /* a name did not fit its field (which: see kernels.c) */
  int outside_init;  /* registered outside the plugin's TF_InitKernel */
} pg_kernel_def;

/* Copies what the registration hook reads of `def` into two arrays, so that
 * Python reads two buffers instead of each field through cffi. `names`
 * (`cap` bytes) receives NUL-terminated op_name, device_type, label, then
 * each type constraint's attribute name, then each host-memory argument.
 * `numbers` (PG_KERNEL_DEF_NUMBERS ints) receives plugin_id, outside_init,
 * name_too_long, overflow, whether compute_func is NULL (1/0), priority,
 * num_constraints, num_host_args, then each constraint's TF_DataType.
 * Returns the bytes written to `names`, or -1 if `cap` is too small
 * (PG_KERNEL_DEF_TEXT_MAX always suffices). */
#define PG_KERNEL_DEF_TEXT_MAX 2048
#define PG_KERNEL_DEF_NUMBERS 16 /* 8 + PG_MAX_CONSTRAINTS */
int pg_kernel_def_describe(const pg_kernel_def* def, char* names, int cap,
                           int* numbers);

/* A kernel instance for one device and one set of attributes. */
typedef struct pg_kernel pg_kernel;

/* Runs create_func. Inputs and outputs are counted flattened: a list
 * argument ("values: N * T") is N consecutive entries (its name repeated in
 * `input_names`), as a kernel sees them through TF_NumInputs / TF_GetInput.
 * `in_host` / `out_host` flag host-memory arguments; `out_types` are the
 * expected output dtypes; `input_names` name each input. The arrays are
 * copied. Returns NULL with `status` set if create_func failed. */
pg_kernel* pg_kernel_create(pg_kernel_def* def, pg_device* dev,
                            pg_attrs* attrs, int num_inputs,
                            const char* const* input_names,
                            const unsigned char* in_host, int num_outputs,
                            const TF_DataType* out_types,
                            const unsigned char* out_host, TF_Status* status);
/* Frees `k` at once, whatever its references: only for an instance nobody
 * else ever saw (its creator's failure paths); everyone else calls
 * pg_kernel_release. */
void pg_kernel_free(pg_kernel* k);

/* Runs compute_func on `inputs`; on success fills `outputs` with new handles
 * (owned by the caller). On failure sets `status`. Returns the status code.
 * `expect` (NULL: no check) gives the output shapes the op's shape function
 * computed: for each output its rank (-1: unknown) followed by its dims; an
 * output of another shape fails the call naming the kernel. An input that
 * carries an asynchronous failure fails the call with that failure. */
TF_Code pg_kernel_run(pg_kernel* k, TF_Tensor* const* inputs,
                      TF_Tensor** outputs, const int64_t* expect,
                      TF_Status* status);
/* pg_kernel_run for a kernel of one output: returns the output's new handle,
 * or NULL after setting `status`. */
TF_Tensor* pg_kernel_run1(pg_kernel* k, TF_Tensor* const* inputs,
                          const int64_t* expect, TF_Status* status);
/* pg_kernel_run1 where the caller donates the inputs of the bits set in
 * `donated` (bit i: input i, i < 64): it gives up their handles and will
 * only delete them after the call. TF_ForwardInputOrAllocateOutput may then
 * hand a donated input's buffer to an output (the result is written over
 * the input), where no other handle shares that buffer, the buffer is the
 * core's own memory (not imported), and dtype, size and memory type agree,
 * as TensorFlow forwards an input whose buffer has one reference. */
TF_Tensor* pg_kernel_run1_donated(pg_kernel* k, TF_Tensor* const* inputs,
                                  const int64_t* expect, uint64_t donated,
                                  TF_Status* status);
/* Runs kernels[0..n) (one output each) at once, as the participants of one
 * collective whose compute functions may wait on the host for one another:
 * kernel 0 on the calling thread, the others on threads of the core
 * (participants.c). Returns when every one has returned, with the number
 * that failed: outputs[i] is kernel i's new output handle (owned by the
 * caller), or NULL with statuses[i] set. `inputs` holds every kernel's
 * inputs one kernel after the other (kernels[i]->num_inputs each);
 * `expects` (NULL: no checks) holds each kernel's expected output shape as
 * pg_kernel_run's `expect` does, one after the other. `donated` (NULL:
 * none) holds each kernel's mask of donated inputs, as
 * pg_kernel_run1_donated takes it. At most 1024 kernels. */
int pg_kernel_run1_group(int n, pg_kernel* const* kernels, TF_Tensor* const* inputs,
                         const int64_t* expects, const uint64_t* donated,
                         TF_Tensor** outputs, TF_Status* const* statuses);
/* Kernel instances are reference-counted (kernels.c, struct pg_kernel):
 * pg_kernel_create returns one reference, owned by the caller (dispatch's
 * instance cache); pg_kernel_retain adds one (every graph-plan step holds
 * one: pg_plan_add_kernel retains, pg_plan_free releases). Only the holder
 * of a reference may use the instance; a call that uses it must hold one
 * for the call's duration. */
void pg_kernel_retain(pg_kernel* k);
/* Drops one reference; the last one frees `k` once the work queued on its
 * device's stream so far has run (a host callback; without callbacks, after
 * synchronising the device). Never frees an instance another holder still
 * uses. */
void pg_kernel_release(pg_kernel* k);

/*** Resource variables (variables.c) ***/

/* The variable object behind a resource handle (opaque). */
typedef struct pg_variable pg_variable;

/* Creates a variable for values of `dtype` on `dev` (NULL: host memory, for
 * the CPU device) and returns its resource handle: a scalar TF_RESOURCE host
 * tensor holding a reference to the variable (released with
 * TF_DeleteTensor; the variable lives while any handle does). The variable
 * has no value until it is assigned. */
TF_Tensor* pg_variable_new(pg_device* dev, TF_DataType dtype,
                           TF_Status* status);
/* A new handle to the value (shared buffer; a copy in copy-on-read mode).
 * FAILED_PRECONDITION if the variable has no value. */
TF_Tensor* pg_variable_read(const TF_Tensor* handle, TF_Status* status);
/* Sets the value to `value` (which must be in the variable's memory; the
 * buffer is shared). Checks the dtype and, with `validate_shape`, the shape. */
void pg_variable_assign(const TF_Tensor* handle, const TF_Tensor* value,
                        int validate_shape, TF_Status* status);
/* Locks the variables of `handles` (each once, in the global order) and
 * returns the holder to release with TF_ReleaseVariableInputLockHolder. */
TF_VariableInputLockHolder* pg_variables_lock(TF_Tensor* const* handles, int n,
                                              int exclusive, TF_Status* status);
/* Copy on write, then a new handle to the value for an in-place update
 * (call with the variable locked). */
TF_Tensor* pg_variable_prepare_update(const TF_Tensor* handle,
                                      TF_Status* status);
/* How many times the variable was written so far: each assignment and each
 * buffer handed out for an in-place update counts (0 if `handle` is not a
 * resource handle). Equal counts mean the value is the one seen before. */
unsigned long long pg_variable_writes(const TF_Tensor* handle);
/* Whether the value's buffer is shared with another tensor handle. */
int pg_variable_shares_buffer(const TF_Tensor* handle);
/* The core's kernel for `op_name` that runs on every plugin device
 * (ReadVariableOp, AssignVariableOp, StopGradient), or NULL. Static: never
 * freed. */
pg_kernel_def* pg_core_kernel_def(const char* op_name);

/*** Graph plans (plan.c) ***/

/* A plan runs the steps of a placed graph in one call: kernel steps and
 * copies between devices, over a table of slots holding TF_Tensor handles.
 * The graph executor (pluggable/graph/executor.py) builds one per concrete
 * function and input placement. Kernel instances given to a plan stay owned
 * by the caller and must outlive it. */
typedef struct pg_plan pg_plan;

/* How a slot holds its handle. */
#define PG_SLOT_BORROWED 0   /* the caller keeps it alive; the plan never deletes it */
#define PG_SLOT_OWNED 1      /* deleted when the slot is released or reset */
#define PG_SLOT_PERSISTENT 2 /* owned and kept across runs (constants) */

/* What a plan has done, for tests and benchmarks. */
typedef struct pg_plan_stats {
  int64_t runs;            /* completed pg_plan_call calls */
  int64_t steps;           /* steps run by completed pg_plan_run ranges */
  int64_t planned_hits;    /* outputs written into their planned buffer */
  int64_t planned_misses;  /* outputs whose planned buffer was busy or small */
  int64_t planned_bytes;   /* bytes of all planned buffers */
  int64_t num_buffers;     /* planned buffers */
  int64_t spans;           /* kernel spans run (one completion event each) */
} pg_plan_stats;

/* A plan with `num_slots` empty slots; NULL with `status` set on failure. */
pg_plan* pg_plan_new(int num_slots, TF_Status* status);
/* Deletes the owned handles, the steps, their events and the planned
 * buffers (their memory returns to the device's allocator cache). */
void pg_plan_free(pg_plan* p);
/* Adds a planned buffer of `nbytes` on `dev`, allocated on the first run and
 * held until pg_plan_free. Returns its index, or -1 with `status` set. */
int pg_plan_add_buffer(pg_plan* p, pg_device* dev, size_t nbytes, TF_Status* status);
/* Adds a step running kernel instance `k` on the handles of slots
 * `inputs`, storing its outputs (owned) in slots `outputs`. `buffers` gives
 * each output's planned buffer (-1: none; NULL: none at all): the kernel's
 * TF_AllocateOutput uses it when the plan holds its only reference and it is
 * large enough. Slots `release` are released after the step. The step
 * holds a reference to `k` (pg_kernel_retain) until pg_plan_free: the
 * caller's own reference may go (the instance cache evicting it) while the
 * plan lives. Returns the step index, or -1 with `status` set. */
int pg_plan_add_kernel(pg_plan* p, pg_kernel* k, int num_inputs, const int* inputs,
                       int num_outputs, const int* outputs, const int* buffers,
                       int num_release, const int* release, TF_Status* status);
/* Adds a step copying slot `src` (on `src_dev`, NULL: host memory) to a new
 * tensor on `dst_dev` in slot `dst`. Within one plugin the streams are
 * ordered by events (no host wait); other copies go through the host. */
int pg_plan_add_copy(pg_plan* p, pg_device* src_dev, pg_device* dst_dev, int src, int dst,
                     int num_release, const int* release, TF_Status* status);
/* Names the slots pg_plan_call fills from its inputs and reads its outputs
 * from. Returns 0 with `status` set if a slot is out of range. */
int pg_plan_set_io(pg_plan* p, int num_in, const int* in_slots, int num_out,
                   const int* out_slots, TF_Status* status);
/* Puts handle `t` in `slot` with `mode` (PG_SLOT_*), releasing what was there. */
void pg_plan_set(pg_plan* p, int slot, TF_Tensor* t, int mode);
/* The handle in `slot` (still the plan's), or NULL. */
TF_Tensor* pg_plan_get(const pg_plan* p, int slot);
/* A new handle (owned by the caller) sharing the buffer of `slot`, or NULL. */
TF_Tensor* pg_plan_take(pg_plan* p, int slot);
/* Empties `slot` unless it is persistent. */
void pg_plan_release(pg_plan* p, int slot);
/* Empties every slot that is not persistent. */
void pg_plan_reset(pg_plan* p);
/* Runs steps [first, last). On failure returns the code, sets `status` and
 * `*failed_step`; the slots keep their values until pg_plan_reset. */
TF_Code pg_plan_run(pg_plan* p, int first, int last, int* failed_step, TF_Status* status);
/* One whole replay: puts `inputs` (borrowed) in the input slots, runs every
 * step, writes new handles of the output slots to `outputs` (owned by the
 * caller; NULL on failure) and resets the plan. */
TF_Code pg_plan_call(pg_plan* p, TF_Tensor* const* inputs, TF_Tensor** outputs,
                     int* failed_step, TF_Status* status);
int pg_plan_num_steps(const pg_plan* p);
void pg_plan_get_stats(const pg_plan* p, pg_plan_stats* stats);

/*** Op definitions ***/

/* What TF_NewOpDefinitionBuilder collected, handed to Python on
 * registration. */
typedef struct pg_op_builder {
  char* name;
  int num_attrs, num_inputs, num_outputs;
  char** attrs;
  char** inputs;
  char** outputs;
  int is_commutative, is_aggregate, is_stateful, allows_uninitialized_input;
  int deprecated_version;
  char* deprecation;
  void (*shape_fn)(TF_ShapeInferenceContext*, TF_Status*);
  int plugin_id;
  int outside_init;  /* registered outside the plugin's TF_InitKernel */
} pg_op_builder;

/* Runs a C shape function. Input shapes: ranks in_ranks[num_inputs] and the
 * dims of all inputs concatenated; outputs are written likewise (rank -1 =
 * unknown; out_dims has room for num_outputs * TF_MAX_DIMS). Inputs and
 * outputs are counted flattened (a list argument is N entries). */
void pg_run_shape_fn(void (*fn)(TF_ShapeInferenceContext*, TF_Status*),
                     int num_inputs, const int* in_ranks,
                     const int64_t* in_dims, pg_attrs* attrs, int num_outputs,
                     int* out_ranks, int64_t* out_dims, TF_Status* status);

/*** Registration hooks (the Python binding's; see pg_host_hooks) ***/

/* Called by TF_RegisterKernelBuilder / TF_RegisterOpDefinition. Python
 * validates, stores, and sets `status` on rejection; it takes ownership of
 * `def` / `b` only when the status stays OK. */
int pg_hook_register_kernel(pg_kernel_def* def, TF_Status* status);
int pg_hook_register_op(pg_op_builder* b, TF_Status* status);

/* Runs a Python callable given to a stream's host_callback (the argument is
 * a handle made by ffi.new_handle). */
void pg_hook_host_callback(void* arg, TF_Status* status);

void pg_op_builder_free(pg_op_builder* b);

/*** Graph optimizers (grappler.c, tf_buffer.c) ***/

/* One plugin's registered graph optimizer. */
typedef struct pg_optimizer pg_optimizer;

/* Calls TF_InitGraph (`init_fn`) and validates what it filled (struct sizes,
 * the major version, device_type, optimize_func). Returns NULL with `status`
 * set (naming the field) on any failure. */
pg_optimizer* pg_optimizer_init(void* init_fn, int plugin_id,
                                TF_Status* status);
/* The device type the optimizer registered for. */
const char* pg_optimizer_device_type(const pg_optimizer* o);
/* The TF_TriState of config field `index` (TP_OptimizerConfigs order after
 * `ext`), or -1 for an index out of range. */
int pg_optimizer_config(const pg_optimizer* o, int index);
/* Runs optimize_func (create_func first, once) on a serialised GraphDef.
 * Returns the output buffer (release with TF_DeleteBuffer), or NULL with
 * `status` set to the plugin's error. */
TF_Buffer* pg_optimizer_run(pg_optimizer* o, const void* graph,
                            size_t graph_len, const TF_GrapplerItem* item,
                            TF_Status* status);
/* Calls destroy_func if create_func ran. */
void pg_optimizer_destroy(pg_optimizer* o);

/* A grappler item over a serialised graph the caller keeps alive. */
TF_GrapplerItem* pg_grappler_item_new(const void* graph, size_t graph_len,
                                      const char* const* fetch, int num_fetch,
                                      const char* const* preserve,
                                      int num_preserve);
void pg_grappler_item_free(TF_GrapplerItem* item);

/* Used by the hooks below: append one serialised OpInfo.TensorProperties to
 * the input (kind 0) or output (kind 1) list of a node, or the signature
 * OpDef of one function. Return 0 when out of memory. */
int pg_graph_properties_add(TF_GraphProperties* p, const char* node, int kind,
                            const void* data, size_t len);
int pg_function_library_add(TF_FunctionLibraryDefinition* lib,
                            const char* name, const void* data, size_t len);
/* Stores a copy of data[0..len) in an empty buffer (with a deallocator). */
int pg_tf_buffer_fill(TF_Buffer* buffer, const void* data, size_t len);

/* The Python binding's graph hooks (see pg_host_hooks): infer the properties of every node of a graph,
 * collect the function signatures of a graph's library, and give the OpDef of
 * a registered op. Each sets `status` on failure. */
void pg_hook_infer_properties(TF_GraphProperties* p, const void* graph,
                              size_t len, TF_Status* status);
void pg_hook_function_library(TF_FunctionLibraryDefinition* lib,
                              const void* graph, size_t len,
                              TF_Status* status);
void pg_hook_op_def(const char* name, TF_Buffer* out, TF_Status* status);

/*** The host's hooks ***/

/* The core calls up into the program that hosts it (the Python binding, whose
 * pg_hook_* implementations are above, or the ONNX Runtime bridge) only
 * through this table, which the host installs with pg_set_host_hooks before
 * any plugin loads. An entry left NULL keeps the default, which refuses the
 * registration or fails the query with FAILED_PRECONDITION. */
typedef struct pg_host_hooks {
  int (*register_kernel)(pg_kernel_def* def, TF_Status* status);
  int (*register_op)(pg_op_builder* b, TF_Status* status);
  void (*infer_properties)(TF_GraphProperties* p, const void* graph, size_t len,
                           TF_Status* status);
  void (*function_library)(TF_FunctionLibraryDefinition* lib, const void* graph,
                           size_t len, TF_Status* status);
  void (*op_def)(const char* name, TF_Buffer* out, TF_Status* status);
} pg_host_hooks;

void pg_set_host_hooks(const pg_host_hooks* hooks);

/*** Device graphs: stream capture and replay (capture.c) ***/

/* Calls SE_InitStreamCapture and validates what it filled. Returns 0 with
 * `status` set on failure (the platform then has no capture). */
int pg_platform_init_capture(pg_platform* p, void* init_fn, TF_Status* status);

/* Work of one device captured once and replayed. */
typedef struct pg_device_graph pg_device_graph;

/* Starts capturing, in the calling thread, the kernel work of `dev`:
 * kernels run by this thread on `dev` enqueue on the capture stream and
 * allocate from the graph's private pool until pg_capture_end. */
pg_device_graph* pg_capture_begin(pg_device* dev, TF_Status* status);
/* Ends the capture and instantiates the graph. On failure the graph cannot
 * be launched (destroy it). */
void pg_capture_end(pg_device_graph* g, TF_Status* status);
/* Enqueues one replay on the device's default stream. */
void pg_device_graph_launch(pg_device_graph* g, TF_Status* status);
/* Waits for the device, releases the graph, its pinned buffers and pool. */
void pg_device_graph_destroy(pg_device_graph* g);
/* Bytes of device memory the graph owns (its pool), and the number of
 * buffers it keeps alive that were made before the capture. */
int64_t pg_device_graph_bytes(const pg_device_graph* g);
int pg_device_graph_pinned(const pg_device_graph* g);
/* Addresses and sizes of the graph's pool blocks (up to `max`); returns the
 * number of blocks. */
int pg_device_graph_blocks(const pg_device_graph* g, void** out,
                           int64_t* sizes, int max);
/* Enqueues on the default stream of `dst`'s device a copy of `src` (a host
 * tensor or a tensor of the same device) into `dst`, which must have the
 * same byte size. The host memory of a host `src` must stay unchanged until
 * the stream has passed the copy (the caller synchronises or keeps it). */
void pg_tensor_copy_into(TF_Tensor* dst, const TF_Tensor* src,
                         TF_Status* status);
/* Whether `t` is produced by work the calling thread is capturing (its value
 * exists only once the graph is replayed: reading it is refused). */
int pg_tensor_captured(const TF_Tensor* t);

/*** Device profilers (profiler.c) ***/

/* A plugin's profiler, accepted by pg_profiler_init. */
typedef struct pg_profiler {
  TF_ProfilerRegistrationParams* params;
  TP_Profiler* profiler;
  TP_ProfilerFns* fns;
  int plugin_id;
} pg_profiler;

/* The largest serialised XSpace the core takes from a plugin. */
#define PG_PROFILE_MAX_BYTES 1073741824

/* Calls TF_InitProfiler and validates what it filled (version, struct
 * sizes, required callbacks, TP_Profiler.type equal to `device_type` when
 * that is not NULL). Returns NULL with `status` set (naming the field) on
 * any failure. */
pg_profiler* pg_profiler_init(void* tf_init_profiler, const char* device_type,
                              int plugin_id, TF_Status* status);

/* TP_ProfilerFns.start / stop; `status` says how they went. */
void pg_profiler_start(pg_profiler* p, TF_Status* status);
void pg_profiler_stop(pg_profiler* p, TF_Status* status);

/* Runs the two calls of collect_data_xspace. On success returns 0 with
 * `*data` (malloc'ed, free with pg_profiler_free_data; NULL when the plugin
 * had nothing) and `*size`. Returns 1 with `status` set when the plugin
 * failed or its sizes are wrong (skip its data this time), 2 when it wrote
 * past the buffer it was given (quarantine the profiler). */
int pg_profiler_collect(pg_profiler* p, uint8_t** data, size_t* size,
                        TF_Status* status);
void pg_profiler_free_data(uint8_t* data);

/*** Trace points of the core (trace.c) ***/

/* Something the core did that a profile should show (an allocation that
 * had to empty the cache and retry, for example). Times are CLOCK_MONOTONIC
 * nanoseconds. */
typedef struct pg_trace_record {
  char name[64];       /* what happened, e.g. "AllocationRetry" */
  char device[96];     /* "/device:MY_DEVICE:0", or "" */
  int64_t start_ns, end_ns;
  int64_t tid;         /* OS thread id of the thread it happened on */
  int64_t value;       /* bytes asked for, or 0 */
  int ok;              /* whether it succeeded */
} pg_trace_record;

/* Turns recording on or off (off drops nothing already recorded). */
void pg_trace_enable(int on);
/* Whether recording is on: the one check a trace point costs otherwise. */
int pg_trace_enabled(void);
/* CLOCK_MONOTONIC now, in nanoseconds. */
int64_t pg_trace_now(void);
/* Records one span (dropped when 65536 are waiting to be drained). */
void pg_trace_add(const char* name, const char* device, int64_t start_ns,
                  int64_t end_ns, int64_t value, int ok);
/* Moves up to `max` records into `out`; returns how many. */
int pg_trace_drain(pg_trace_record* out, int max);
/* Records dropped since the last call (and resets the count). */
int64_t pg_trace_dropped(void);

/*** Host-side helpers ***/

/* Host callbacks that ignored a call because they had already run (or were
 * never enqueued): a plugin must run each host callback exactly once. */
int64_t pg_host_callbacks_ignored(void);
/* Reads the plugin's allocator statistics through a struct of the
 * documented size (with spare room behind it) and copies out only the
 * fields the plugin's struct_size covers; the others are left 0 and their
 * bit in `*missing` (bit i = i-th field after struct_size) is set. Returns 0
 * if the plugin has no get_allocator_stats or it returned false. */
int pg_device_allocator_stats(pg_device* dev, SP_AllocatorStats* out,
                              uint32_t* missing);
/* Aligned host memory for host tensors. */
void* pg_host_alloc(size_t nbytes);
void pg_host_free(void* p);

/*** DLPack (dlpack.c) ***/

/* Managed tensors are passed as `void*`: a DLManagedTensorVersioned when
 * `versioned` is 1, else a legacy DLManagedTensor (layouts in dlpack.h). */

/* The static capsule names: "dltensor", "dltensor_versioned", and with
 * `used` the names a consumer renames a capsule to ("used_dltensor", ...).
 * PyCapsules keep the pointer, so these strings live as long as the core. */
const char* pg_dlpack_capsule_name(int versioned, int used);

/* Exports memory without copying it, as a new managed tensor the consumer
 * frees through its deleter. Either `t` (a device tensor: its buffer is
 * referenced until the deleter runs) or `host_data` owned by the Python
 * object `py_owner` (referenced until then; the GIL is taken inside).
 * dtype, dims and num_dims describe the tensor (compact row-major strides
 * are filled in); `device_type`/`device_id` are the DLDevice; `read_only`
 * sets DLPACK_FLAG_BITMASK_READ_ONLY (versioned only). NULL with `status`
 * set for a dtype DLPack cannot express. */
void* pg_dlpack_export(const TF_Tensor* t, void* host_data, void* py_owner,
                       TF_DataType dtype, const int64_t* dims, int num_dims,
                       int versioned, int32_t device_type, int32_t device_id,
                       int read_only, TF_Status* status);
/* Calls a managed tensor's deleter (nothing for NULL or a NULL deleter). */
void pg_dlpack_delete(void* managed, int versioned);
/* The PyCapsule destructor of exported capsules (a PyCapsule_Destructor):
 * deletes the managed tensor unless a consumer took it (renamed the
 * capsule "used_..."). */
void pg_dlpack_capsule_destructor(void* capsule);

/* A producer's managed tensor, checked. */
typedef struct pg_dlpack_info {
  void* data;            /* the first element (DLTensor data + byte_offset) */
  int32_t device_type;   /* its DLDevice */
  int32_t device_id;
  TF_DataType dtype;     /* the pluggable dtype of its DLDataType */
  int num_dims;
  int64_t dims[TF_MAX_DIMS];
  int64_t strides[TF_MAX_DIMS]; /* in elements (compact ones where the
                                   producer gave NULL) */
  int compact;           /* 1 if the layout is compact row-major */
  int read_only;         /* the producer set DLPACK_FLAG_BITMASK_READ_ONLY */
  int64_t nbytes;        /* element count * element size */
} pg_dlpack_info;

/* Fills `info`; INVALID_ARGUMENT (naming the problem) for an unsupported
 * version, dtype (lanes != 1 included), rank or a negative dimension. The
 * managed tensor stays the caller's. */
void pg_dlpack_describe(void* managed, int versioned, pg_dlpack_info* info,
                        TF_Status* status);
/* A tensor of `dev` (NULL: host memory) over a compact managed tensor's
 * memory, without copying. On success the tensor owns the managed tensor:
 * its deleter runs exactly once, when the last handle sharing the buffer is
 * deleted (for a device, after the device's default stream has finished the
 * work queued until then). On failure (NULL, `status` set; a non-compact
 * layout is INVALID_ARGUMENT) the caller still owns it. */
TF_Tensor* pg_dlpack_wrap(void* managed, int versioned, pg_device* dev,
                          TF_Status* status);
/* The whole import of a capsule onto `dev` in one call: `capsule` is the
 * address of a PyCapsule the caller keeps alive for the call (the GIL is
 * taken inside). When the capsule is an unused "dltensor" or
 * "dltensor_versioned" whose managed tensor pg_dlpack_describe accepts, is
 * compact and lies on DLPack device `device_type`/`device_id`, returns a
 * tensor of `dev` over its memory (pg_dlpack_wrap), renames the capsule used
 * and fills `info`. Otherwise returns NULL and leaves the capsule as it was
 * (the caller takes the general path, which reports why); `status` is set
 * only for a failure of the wrap itself. */
TF_Tensor* pg_dlpack_import(void* capsule, pg_device* dev, int32_t device_type,
                            int32_t device_id, pg_dlpack_info* info,
                            TF_Status* status);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PLUGGABLE_PG_CORE_H_ */
