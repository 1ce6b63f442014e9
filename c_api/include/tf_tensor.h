/* pluggable C API: tensors.
 *
 * A TF_Tensor is a handle to a dense, row-major array: an element type, a
 * shape and a buffer. Several handles may share one buffer; the buffer is
 * released when the last handle that refers to it is deleted.
 *
 * Where the data lives depends on where the handle came from: tensors given
 * to a kernel by TF_GetInput / TF_AllocateOutput / TF_AllocateTemp hold device
 * memory of the kernel's device (TF_TensorData returns the device pointer, the
 * `opaque` value the plugin's `allocate` produced), except arguments marked
 * with TF_KernelBuilder_HostMemory, which hold host memory. Tensors made with
 * TF_NewTensor or TF_AllocateTensor hold host memory.
 *
 * Ownership: every TF_Tensor* returned by a function of this API is owned by
 * the caller, who releases it with TF_DeleteTensor. Deleting a handle never
 * frees memory another handle (or the framework) still uses. */
#ifndef PLUGGABLE_TF_TENSOR_H_
#define PLUGGABLE_TF_TENSOR_H_

#include <stdint.h>

#include "c_api_macros.h"
#include "tf_datatype.h"
#include "tf_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct TF_Tensor TF_Tensor;

/* Where a temporary allocation should live (see TF_AllocateTemp). */
typedef struct TF_AllocatorAttributes {
  size_t struct_size;    /* set to TF_ALLOCATOR_ATTRIBUTES_STRUCT_SIZE */
  TF_Bool on_host;       /* nonzero: host memory instead of device memory */
} TF_AllocatorAttributes;

#define TF_ALLOCATOR_ATTRIBUTES_STRUCT_SIZE \
  TF_OFFSET_OF_END(TF_AllocatorAttributes, on_host)

/* Largest number of dimensions a tensor may have. */
#define TF_MAX_DIMS 16

/* Wraps caller-provided host memory in a new tensor without copying.
 * `dims[num_dims]` is the shape (every entry >= 0, num_dims <= TF_MAX_DIMS);
 * `len` must equal the element count times TF_DataTypeSize(dtype).
 * When the last handle to the buffer is deleted the core calls
 * `deallocator(data, len, deallocator_arg)` (unless `deallocator` is NULL, in
 * which case the caller keeps ownership of `data` and must keep it alive
 * until then). Returns NULL, after calling the deallocator, if the arguments
 * are invalid. */
TF_CAPI_EXPORT extern TF_Tensor* TF_NewTensor(
    TF_DataType dtype, const int64_t* dims, int num_dims, void* data,
    size_t len, void (*deallocator)(void* data, size_t len, void* arg),
    void* deallocator_arg);

/* Allocates a new host tensor of `len` bytes (64-byte aligned, contents
 * uninitialised). `len` must match the shape and dtype as for TF_NewTensor.
 * Returns NULL on invalid arguments or when memory is exhausted. */
TF_CAPI_EXPORT extern TF_Tensor* TF_AllocateTensor(TF_DataType dtype,
                                                   const int64_t* dims,
                                                   int num_dims, size_t len);

/* Returns `t` itself if no other handle shares its buffer (so the caller may
 * write to it in place), else NULL. Ownership of `t` does not change. */
TF_CAPI_EXPORT extern TF_Tensor* TF_TensorMaybeMove(TF_Tensor* t);

/* Releases a handle. The buffer is freed when its last handle goes. NULL is
 * accepted and ignored. */
TF_CAPI_EXPORT extern void TF_DeleteTensor(TF_Tensor* t);

/* Element type of `t`. */
TF_CAPI_EXPORT extern TF_DataType TF_TensorType(const TF_Tensor* t);

/* Changes the shape of `t` without touching the buffer. The new shape must
 * describe no more bytes than the buffer holds; otherwise nothing changes. */
TF_CAPI_EXPORT extern void TF_SetShape(TF_Tensor* tensor, const int64_t* dims,
                                       int num_dims);

/* Number of dimensions of `t` (0 for a scalar). */
TF_CAPI_EXPORT extern int TF_NumDims(const TF_Tensor* t);

/* Size of dimension `dim_index` (0 <= dim_index < TF_NumDims(t)); returns -1
 * for an index out of range. */
TF_CAPI_EXPORT extern int64_t TF_Dim(const TF_Tensor* t, int dim_index);

/* Size of the data in bytes (element count times element size). */
TF_CAPI_EXPORT extern size_t TF_TensorByteSize(const TF_Tensor* t);

/* Pointer to the data: a host pointer for host tensors, the device memory
 * value (`SP_DeviceMemoryBase.opaque`) for device tensors. May be NULL for a
 * tensor with zero elements. Valid while the handle lives. */
TF_CAPI_EXPORT extern void* TF_TensorData(const TF_Tensor* t);

/* Number of elements (the product of the dimensions; 1 for a scalar). */
TF_CAPI_EXPORT extern int64_t TF_TensorElementCount(const TF_Tensor* t);

/* Makes `to` share the buffer of `from`, viewed with element type `type` and
 * shape `new_dims[num_new_dims]`. The byte sizes must agree; otherwise
 * `status` is TF_INVALID_ARGUMENT and `to` is unchanged. */
TF_CAPI_EXPORT extern void TF_TensorBitcastFrom(const TF_Tensor* from,
                                                TF_DataType type,
                                                TF_Tensor* to,
                                                const int64_t* new_dims,
                                                int num_new_dims,
                                                TF_Status* status);

/* Nonzero if the data pointer is aligned to 64 bytes (always true for memory
 * the core allocates; the plugin's allocator decides for device memory). */
TF_CAPI_EXPORT extern TF_Bool TF_TensorIsAligned(const TF_Tensor* t);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PLUGGABLE_TF_TENSOR_H_ */
