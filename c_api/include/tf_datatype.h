/* pluggable C API: element types.
 *
 * TF_DataType values are part of the ABI and equal TensorFlow's, so kernels
 * ported from TensorFlow register the same constraints. The core runtime
 * supports these for tensors: TF_BOOL, TF_INT8, TF_INT16, TF_INT32, TF_INT64,
 * TF_UINT8, TF_HALF, TF_BFLOAT16, TF_FLOAT, TF_DOUBLE. Other values may
 * appear in type constraints but no tensor of them can be created. */
#ifndef PLUGGABLE_TF_DATATYPE_H_
#define PLUGGABLE_TF_DATATYPE_H_

#include "c_api_macros.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum TF_DataType {
  TF_FLOAT = 1,       /* 32-bit IEEE float */
  TF_DOUBLE = 2,      /* 64-bit IEEE float */
  TF_INT32 = 3,       /* signed 32-bit integer */
  TF_UINT8 = 4,       /* unsigned 8-bit integer */
  TF_INT16 = 5,       /* signed 16-bit integer */
  TF_INT8 = 6,        /* signed 8-bit integer */
  TF_STRING = 7,      /* variable-length string (not supported by the core) */
  TF_COMPLEX64 = 8,   /* two 32-bit floats */
  TF_COMPLEX = 8,     /* alias of TF_COMPLEX64 */
  TF_INT64 = 9,       /* signed 64-bit integer */
  TF_BOOL = 10,       /* one byte, 0 or 1 */
  TF_QINT8 = 11,      /* quantized int8 */
  TF_QUINT8 = 12,     /* quantized uint8 */
  TF_QINT32 = 13,     /* quantized int32 */
  TF_BFLOAT16 = 14,   /* upper 16 bits of a 32-bit IEEE float */
  TF_QINT16 = 15,     /* quantized int16 */
  TF_QUINT16 = 16,    /* quantized uint16 */
  TF_UINT16 = 17,     /* unsigned 16-bit integer */
  TF_COMPLEX128 = 18, /* two 64-bit floats */
  TF_HALF = 19,       /* 16-bit IEEE float */
  TF_RESOURCE = 20,   /* handle to a resource (not supported by the core) */
  TF_VARIANT = 21,    /* arbitrary C++ value (not supported by the core) */
  TF_UINT32 = 22,     /* unsigned 32-bit integer */
  TF_UINT64 = 23,     /* unsigned 64-bit integer */
} TF_DataType;

/* Returns the size in bytes of one element of `dt`, or 0 for a type without a
 * fixed size (TF_STRING, TF_RESOURCE, TF_VARIANT) or an unknown value. */
TF_CAPI_EXPORT extern size_t TF_DataTypeSize(TF_DataType dt);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PLUGGABLE_TF_DATATYPE_H_ */
