// The few NCCL declarations the CUDA plugin uses, written out so that the
// plugin builds without NCCL's headers (NCCL is loaded at run time, see
// nccl_loader.h). Values and layouts are those of NCCL 2.x's public nccl.h;
// they have been stable since NCCL 2.10 (ncclBfloat16) and 2.12
// (ncclInProgress).
#ifndef PLUGGABLE_NCCL_API_H_
#define PLUGGABLE_NCCL_API_H_

#include <cuda_runtime.h>

namespace pgcuda {

// ncclResult_t
typedef int NcclResult;
constexpr NcclResult kNcclSuccess = 0;             // ncclSuccess
constexpr NcclResult kNcclUnhandledCudaError = 1;  // ncclUnhandledCudaError
constexpr NcclResult kNcclSystemError = 2;         // ncclSystemError
constexpr NcclResult kNcclInternalError = 3;       // ncclInternalError
constexpr NcclResult kNcclInvalidArgument = 4;     // ncclInvalidArgument
constexpr NcclResult kNcclInvalidUsage = 5;        // ncclInvalidUsage
constexpr NcclResult kNcclRemoteError = 6;         // ncclRemoteError
constexpr NcclResult kNcclInProgress = 7;          // ncclInProgress

// ncclDataType_t
typedef int NcclDataType;
constexpr NcclDataType kNcclInt8 = 0;      // ncclInt8 (ncclChar)
constexpr NcclDataType kNcclUint8 = 1;     // ncclUint8
constexpr NcclDataType kNcclInt32 = 2;     // ncclInt32
constexpr NcclDataType kNcclUint32 = 3;    // ncclUint32
constexpr NcclDataType kNcclInt64 = 4;     // ncclInt64
constexpr NcclDataType kNcclUint64 = 5;    // ncclUint64
constexpr NcclDataType kNcclFloat16 = 6;   // ncclFloat16
constexpr NcclDataType kNcclFloat32 = 7;   // ncclFloat32
constexpr NcclDataType kNcclFloat64 = 8;   // ncclFloat64
constexpr NcclDataType kNcclBfloat16 = 9;  // ncclBfloat16

// ncclRedOp_t
typedef int NcclRedOp;
constexpr NcclRedOp kNcclSum = 0;   // ncclSum
constexpr NcclRedOp kNcclProd = 1;  // ncclProd
constexpr NcclRedOp kNcclMax = 2;   // ncclMax
constexpr NcclRedOp kNcclMin = 3;   // ncclMin

// ncclComm_t: an opaque pointer.
typedef void* NcclComm;

// ncclUniqueId: NCCL_UNIQUE_ID_BYTES (128) opaque bytes, passed by value.
constexpr int kNcclUniqueIdBytes = 128;
struct NcclUniqueId {
  char internal[kNcclUniqueIdBytes];
};

}  // namespace pgcuda

#endif  // PLUGGABLE_NCCL_API_H_
