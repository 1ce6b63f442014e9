/* pluggable C API: kernels.
 *
 * A plugin exports
 *
 *     void TF_InitKernel(void);
 *
 * and registers its kernels there with TF_NewKernelBuilder +
 * TF_RegisterKernelBuilder. A kernel implements one op (see ops.h and the
 * built-in op set) on one device type for the type constraints it declares.
 *
 * Life of a kernel:
 *   create_func(construction)  once per (device, op attributes); reads attrs;
 *                              returns the kernel's private state (may be NULL)
 *   compute_func(state, ctx)   once per op call; reads inputs, allocates
 *                              outputs, enqueues the work on TF_GetStream(ctx)
 *   delete_func(state)         when the core drops the kernel instance
 *
 * compute_func must not wait for the device: it enqueues the work on the
 * stream and returns. The framework keeps every input and output buffer alive
 * (and unused by others) until the stream has passed the work.
 *
 * Errors: a kernel reports failure with TF_OpKernelContext_Failure (or
 * TF_OpKernelConstruction_Failure in create_func). Errors found later by the
 * device work are reported through the stream (see stream_executor.h).
 *
 * Tensor handles from TF_GetInput, TF_AllocateOutput,
 * TF_ForwardInputOrAllocateOutput and TF_AllocateTemp are owned by the kernel
 * and released with TF_DeleteTensor before compute_func returns (releasing a
 * handle never frees memory the framework still uses; the framework keeps
 * outputs alive on its own). */
#ifndef PLUGGABLE_KERNELS_H_
#define PLUGGABLE_KERNELS_H_

#include <stddef.h>
#include <stdint.h>

#include "c_api_macros.h"
#include "stream_executor.h"
#include "tf_datatype.h"
#include "tf_status.h"
#include "tf_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A borrowed, not necessarily NUL-terminated string. */
#ifndef PLUGGABLE_TF_STRINGVIEW_DEFINED
#define PLUGGABLE_TF_STRINGVIEW_DEFINED
typedef struct TF_StringView {
  const char* data;
  size_t len;
} TF_StringView;
#endif

typedef struct TF_KernelBuilder TF_KernelBuilder;
typedef struct TF_OpKernelConstruction TF_OpKernelConstruction;
typedef struct TF_OpKernelContext TF_OpKernelContext;

/*** Registration ***/

/* Starts a kernel registration for op `op_name` on device type `device_name`
 * (e.g. "MY_DEVICE"). `compute_func` is required; `create_func` and
 * `delete_func` are optional (NULL), but a create_func that allocates needs a
 * delete_func that frees. The strings are copied. Returns a builder owned by
 * the caller until it is passed to TF_RegisterKernelBuilder (which takes
 * ownership) or TF_DeleteKernelBuilder. */
TF_CAPI_EXPORT extern TF_KernelBuilder* TF_NewKernelBuilder(
    const char* op_name, const char* device_name,
    void* (*create_func)(TF_OpKernelConstruction*),
    void (*compute_func)(void*, TF_OpKernelContext*),
    void (*delete_func)(void*));

/* Restricts the kernel to calls where type attribute `attr_name` (e.g. "T")
 * equals `type`. Call once per attribute; a kernel for several types is
 * registered once per type. Errors (unknown attribute, an attribute that is
 * not a type, a type the op does not allow) are reported by
 * TF_RegisterKernelBuilder; `status` reports a NULL builder or name. */
TF_CAPI_EXPORT extern void TF_KernelBuilder_TypeConstraint(
    TF_KernelBuilder* kernel_builder, const char* attr_name,
    const TF_DataType type, TF_Status* status);

/* Marks input or output `arg_name` (its name in the op definition, e.g.
 * "reduction_indices") as host memory: the kernel receives / produces it as
 * a host tensor, readable in compute_func. */
TF_CAPI_EXPORT extern void TF_KernelBuilder_HostMemory(
    TF_KernelBuilder* kernel_builder, const char* arg_name);

/* Sets the priority used when several kernels match a call: the highest
 * wins; the default is 0. */
TF_CAPI_EXPORT extern void TF_KernelBuilder_Priority(
    TF_KernelBuilder* kernel_builder, int32_t priority_number);

/* Sets a label (free text shown in kernel listings). */
TF_CAPI_EXPORT extern void TF_KernelBuilder_Label(
    TF_KernelBuilder* kernel_builder, const char* label);

/* Registers the kernel and takes ownership of `builder` (also on failure).
 * `kernel_name` is a name for diagnostics (usually the op name). Sets
 * `status` to an error, and the kernel is not registered, if: the op is not
 * defined, a type constraint names an unknown or non-type attribute or a type
 * the op does not allow, a host-memory argument does not exist, or a kernel
 * with the same op, device type, constraints and priority exists. */
TF_CAPI_EXPORT extern void TF_RegisterKernelBuilder(const char* kernel_name,
                                                    TF_KernelBuilder* builder,
                                                    TF_Status* status);

/* Not supported (serialized KernelDefs need protocol buffers): sets
 * TF_UNIMPLEMENTED and deletes `builder`. Use TF_RegisterKernelBuilder. */
TF_CAPI_EXPORT extern void TF_RegisterKernelBuilderWithKernelDef(
    const char* serialized_kernel_def, const char* name,
    TF_KernelBuilder* builder, TF_Status* status);

/* Releases a builder that was not registered. NULL is ignored. */
TF_CAPI_EXPORT extern void TF_DeleteKernelBuilder(TF_KernelBuilder* builder);

/*** Kernel context (inside compute_func) ***/

/* The stream the kernel must enqueue its work on (the plugin's own
 * SP_Stream value for this device). */
TF_CAPI_EXPORT extern SP_Stream TF_GetStream(TF_OpKernelContext* ctx,
                                             TF_Status* status);

/* Number of inputs / outputs of this call. */
TF_CAPI_EXPORT extern int TF_NumInputs(TF_OpKernelContext* ctx);
TF_CAPI_EXPORT extern int TF_NumOutputs(TF_OpKernelContext* ctx);

/* Stores a new handle to input `i` in `*tensor` (the caller deletes it).
 * `status` is TF_OUT_OF_RANGE for a bad index. */
TF_CAPI_EXPORT extern void TF_GetInput(TF_OpKernelContext* ctx, int i,
                                       TF_Tensor** tensor, TF_Status* status);

/* Element type of input `index` (0 if out of range). */
TF_CAPI_EXPORT extern TF_DataType TF_InputDatatype(TF_OpKernelContext* ctx,
                                                   int index);

/* Makes output `i` share the buffer of `tensor` (which stays owned by the
 * caller). The tensor must live on the kernel's device (or on the host for a
 * host-memory output) and have the expected dtype. */
TF_CAPI_EXPORT extern void TF_SetOutput(TF_OpKernelContext* ctx, int i,
                                        const TF_Tensor* tensor,
                                        TF_Status* status);

/* Returns a new handle to output `i` if it was set, else NULL. */
TF_CAPI_EXPORT extern TF_Tensor* TF_GetMutableOutput(TF_OpKernelContext* ctx,
                                                     int i, TF_Status* status);

/* Dtype the framework expects for output `i` (from the op definition and
 * attributes), or 0 if out of range. */
TF_CAPI_EXPORT extern TF_DataType TF_ExpectedOutputDataType(
    TF_OpKernelContext* ctx, int i);

/* Whether input / output `i` is in host memory. */
TF_CAPI_EXPORT extern TF_Bool TF_IsHostMemoryInput(TF_OpKernelContext* ctx,
                                                   int i, TF_Status* status);
TF_CAPI_EXPORT extern TF_Bool TF_IsHostMemoryOutput(TF_OpKernelContext* ctx,
                                                    int i, TF_Status* status);

/* Records a failure of this call. The framework raises it (as the exception
 * class of the code, naming op and device) once compute_func returns;
 * outputs of a failed call are discarded. */
TF_CAPI_EXPORT extern void TF_OpKernelContext_Failure(TF_OpKernelContext* ctx,
                                                      TF_Status* status);

/* A number identifying this call (increases with every call). */
TF_CAPI_EXPORT extern int64_t TF_StepId(TF_OpKernelContext* ctx);

/* Name of the op being run, e.g. "AddV2". Valid during compute_func. */
TF_CAPI_EXPORT extern TF_StringView TF_GetOpKernelName(TF_OpKernelContext* ctx);

/* Name of the op input `index` ("x", "y", ...), or an empty view. */
TF_CAPI_EXPORT extern TF_StringView TF_GetOpKernelRequestedInput(
    TF_OpKernelContext* ctx, size_t index);

/* Ordinal of the device the kernel runs on. */
TF_CAPI_EXPORT extern int TF_GetDeviceId(TF_OpKernelContext* ctx);

/* Full name of the device, e.g. "/device:MY_DEVICE:0". */
TF_CAPI_EXPORT extern TF_StringView TF_GetDeviceName(TF_OpKernelContext* ctx);

/* Allocates output `index` with the given dtype and shape on the kernel's
 * device (host memory for a host-memory output). `len` must equal the element
 * count times TF_DataTypeSize(dtype) and dtype must equal
 * TF_ExpectedOutputDataType. Returns a new handle (the caller deletes it) or
 * NULL with `status` set. Memory is uninitialised. */
TF_CAPI_EXPORT extern TF_Tensor* TF_AllocateOutput(TF_OpKernelContext* context,
                                                   int index,
                                                   TF_DataType dtype,
                                                   const int64_t* dims,
                                                   int num_dims, size_t len,
                                                   TF_Status* status);

/* Like TF_AllocateOutput, but reuses the buffer of one of the candidate
 * inputs when nothing else can observe it; `*forwarded_input` (may be NULL)
 * is then its index, else -1. In pluggable an input is forwarded only when
 * the caller donated it (a Python tensor still holding it could read it
 * otherwise), its buffer has no other reference (so the kernel must not
 * hold a TF_GetInput handle of it at this call), is the core's own memory
 * on this device with no other stream using it, and dtype, byte size and
 * memory type agree with the output. */
TF_CAPI_EXPORT extern TF_Tensor* TF_ForwardInputOrAllocateOutput(
    TF_OpKernelContext* context, const int* candidate_input_indices,
    int num_candidate_input_indices, int output_index,
    const int64_t* output_dims, int output_num_dims, int* forwarded_input,
    TF_Status* status);

/* Allocates a scratch tensor, on the device or (alloc_attrs->on_host) on the
 * host. It stays valid for the stream's work after compute_func returns even
 * once the handle is deleted. `alloc_attrs` may be NULL. */
TF_CAPI_EXPORT extern TF_Tensor* TF_AllocateTemp(
    TF_OpKernelContext* context, TF_DataType dtype, const int64_t* dims,
    int num_dims, TF_AllocatorAttributes* alloc_attrs, TF_Status* status);

/*** Kernel construction (inside create_func) ***/

/* Records a failure of create_func; the call that needed the kernel raises
 * it. create_func should then return NULL (or state its delete_func frees). */
TF_CAPI_EXPORT extern void TF_OpKernelConstruction_Failure(
    TF_OpKernelConstruction* ctx, TF_Status* status);

/* Name of the op, e.g. "Conv2D". */
TF_CAPI_EXPORT extern TF_StringView TF_OpKernelConstruction_GetName(
    TF_OpKernelConstruction* ctx);

/* Nonzero if attribute `attr_name` is set. */
TF_CAPI_EXPORT extern TF_Bool TF_OpKernelConstruction_HasAttr(
    TF_OpKernelConstruction* ctx, const char* attr_name, TF_Status* status);

/* For a list attribute: `*list_size` = number of elements and `*total_size` =
 * total bytes of string elements (-1 for other lists). For a scalar:
 * `*list_size` = -1 and `*total_size` = byte length of a string, else -1.
 * TF_NOT_FOUND if the attribute does not exist. */
TF_CAPI_EXPORT extern void TF_OpKernelConstruction_GetAttrSize(
    TF_OpKernelConstruction* ctx, const char* attr_name, int32_t* list_size,
    int32_t* total_size, TF_Status* status);

/* Scalar getters. Each sets TF_NOT_FOUND if the attribute does not exist and
 * TF_INVALID_ARGUMENT if it has another type (or an int does not fit). */
TF_CAPI_EXPORT extern void TF_OpKernelConstruction_GetAttrType(
    TF_OpKernelConstruction* ctx, const char* attr_name, TF_DataType* val,
    TF_Status* status);
TF_CAPI_EXPORT extern void TF_OpKernelConstruction_GetAttrInt32(
    TF_OpKernelConstruction* ctx, const char* attr_name, int32_t* val,
    TF_Status* status);
TF_CAPI_EXPORT extern void TF_OpKernelConstruction_GetAttrInt64(
    TF_OpKernelConstruction* ctx, const char* attr_name, int64_t* val,
    TF_Status* status);
TF_CAPI_EXPORT extern void TF_OpKernelConstruction_GetAttrFloat(
    TF_OpKernelConstruction* ctx, const char* attr_name, float* val,
    TF_Status* status);
TF_CAPI_EXPORT extern void TF_OpKernelConstruction_GetAttrBool(
    TF_OpKernelConstruction* ctx, const char* attr_name, TF_Bool* val,
    TF_Status* status);

/* Copies a string attribute into `val` (at most `max_length` bytes, no NUL
 * added). TF_INVALID_ARGUMENT if `max_length` is too small. */
TF_CAPI_EXPORT extern void TF_OpKernelConstruction_GetAttrString(
    TF_OpKernelConstruction* ctx, const char* attr_name, char* val,
    size_t max_length, TF_Status* status);

/* Stores a new host tensor handle for a tensor attribute (caller deletes). */
TF_CAPI_EXPORT extern void TF_OpKernelConstruction_GetAttrTensor(
    TF_OpKernelConstruction* ctx, const char* attr_name, TF_Tensor** val,
    TF_Status* status);

/* List getters: copy at most `max_vals` elements into `vals` (size the array
 * with TF_OpKernelConstruction_GetAttrSize). */
TF_CAPI_EXPORT extern void TF_OpKernelConstruction_GetAttrTypeList(
    TF_OpKernelConstruction* ctx, const char* attr_name, TF_DataType* vals,
    int max_vals, TF_Status* status);
TF_CAPI_EXPORT extern void TF_OpKernelConstruction_GetAttrInt32List(
    TF_OpKernelConstruction* ctx, const char* attr_name, int32_t* vals,
    int max_vals, TF_Status* status);
TF_CAPI_EXPORT extern void TF_OpKernelConstruction_GetAttrInt64List(
    TF_OpKernelConstruction* ctx, const char* attr_name, int64_t* vals,
    int max_vals, TF_Status* status);
TF_CAPI_EXPORT extern void TF_OpKernelConstruction_GetAttrFloatList(
    TF_OpKernelConstruction* ctx, const char* attr_name, float* vals,
    int max_vals, TF_Status* status);
TF_CAPI_EXPORT extern void TF_OpKernelConstruction_GetAttrBoolList(
    TF_OpKernelConstruction* ctx, const char* attr_name, TF_Bool* vals,
    int max_vals, TF_Status* status);

/* String list getter: element i is stored in `storage` (capacity
 * `storage_size` bytes), `vals[i]` points at it and `lengths[i]` is its
 * length (no NUL added). */
TF_CAPI_EXPORT extern void TF_OpKernelConstruction_GetAttrStringList(
    TF_OpKernelConstruction* ctx, const char* attr_name, char** vals,
    size_t* lengths, int max_values, void* storage, size_t storage_size,
    TF_Status* status);

/* Stores up to `max_values` new host tensor handles (caller deletes each). */
TF_CAPI_EXPORT extern void TF_OpKernelConstruction_GetAttrTensorList(
    TF_OpKernelConstruction* ctx, const char* attr_name, TF_Tensor** vals,
    int max_values, TF_Status* status);

/* The entry point a kernel plugin exports (see top of file). */
void TF_InitKernel(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PLUGGABLE_KERNELS_H_ */
