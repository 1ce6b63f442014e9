/* pluggable C API: element types.
 *
 * TF_DataType values are part of the ABI and equal TensorFlow's, so kernels
 * ported from TensorFlow register the same constraints. The core runtime
 * supports these for tensors: TF_BOOL, TF_INT8, TF_INT16, TF_INT32, TF_INT64,
 * TF_UINT8, TF_UINT16, TF_UINT32, TF_UINT64, TF_HALF, TF_BFLOAT16, TF_FLOAT,
 * TF_DOUBLE, and the narrow types TF_FLOAT8_* (but TF_FLOAT8_E4M3B11FNUZ),
 * TF_INT4, TF_UINT4, TF_INT2, TF_UINT2 and TF_FLOAT4_E2M1FN. Other values may
 * appear in type constraints but no tensor of them can be created.
 *
 * The narrow types are stored one element per byte, as TensorFlow and
 * ml_dtypes store them: a 4-bit or 2-bit value sits in the low bits of its
 * byte, the high bits zero (a reader of TF_INT4 / TF_INT2 sign-extends from
 * bit 3 / bit 1), and TF_DataTypeSize gives 1. Nothing in a tensor is packed two or four to a
 * byte. The 8-bit float encodings (sign, exponent, mantissa bits; bias):
 *   E5M2     1,5,2; 15   IEEE-like: infinities and NaNs
 *   E4M3FN   1,4,3; 7    finite: no infinity; NaN is S.1111.111
 *   E4M3FNUZ 1,4,3; 8    finite, unsigned zero: NaN is 0x80 only
 *   E5M2FNUZ 1,5,2; 16   finite, unsigned zero: NaN is 0x80 only
 *   E2M1FN   1,2,1; 1    finite, no NaN (in the low 4 bits) */
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
  TF_FLOAT8_E5M2 = 24,        /* 8-bit float: 5 exponent, 2 mantissa bits */
  TF_FLOAT8_E4M3FN = 25,      /* 8-bit float: 4 exponent, 3 mantissa bits, finite */
  TF_FLOAT8_E4M3FNUZ = 26,    /* as E4M3FN, bias 8, one NaN (0x80), no -0 */
  TF_FLOAT8_E4M3B11FNUZ = 27, /* bias-11 E4M3FNUZ (not supported by the core) */
  TF_FLOAT8_E5M2FNUZ = 28,    /* as E5M2, bias 16, finite, one NaN (0x80), no -0 */
  TF_INT4 = 29,               /* signed 4-bit integer, one per byte */
  TF_UINT4 = 30,              /* unsigned 4-bit integer, one per byte */
  TF_INT2 = 31,               /* signed 2-bit integer, one per byte */
  TF_UINT2 = 32,              /* unsigned 2-bit integer, one per byte */
  TF_FLOAT4_E2M1FN = 33,      /* 4-bit float: 2 exponent, 1 mantissa bit, one per byte */
} TF_DataType;

/* Returns the size in bytes of one element of `dt`, or 0 for a type without a
 * fixed size (TF_STRING, TF_RESOURCE, TF_VARIANT) or an unknown value. */
TF_CAPI_EXPORT extern size_t TF_DataTypeSize(TF_DataType dt);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PLUGGABLE_TF_DATATYPE_H_ */
