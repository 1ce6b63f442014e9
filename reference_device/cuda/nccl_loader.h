// Run-time loading of NCCL. The plugin does not link against NCCL: the first
// collective (or the collectives extension) opens libnccl with dlopen and
// resolves only the functions below (declarations in nccl_api.h).
//
// Where it looks: PLUGGABLE_NCCL_LIBRARY when set (then only there: a wrong
// path is an error, not a fallback), else `libnccl.so.2` through the loader's
// search path, then the CUDA toolkit's folders. pluggable.plugins.cuda_env
// sets PLUGGABLE_NCCL_LIBRARY to the newest libnccl of NVIDIA's pip wheels
// (`nvidia-nccl-cu13`, `nvidia-nccl-cu12`, installed with PyTorch) when it is
// unset, as it does for cuBLAS.
#ifndef PLUGGABLE_NCCL_LOADER_H_
#define PLUGGABLE_NCCL_LOADER_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "nccl_api.h"
#include "tf_status.h"

namespace pgcuda {

// Function table of the loaded library (every entry is set once loaded).
struct NcclApi {
  int version;  // ncclGetVersion's code, e.g. 22807 for 2.28.7
  NcclResult (*get_version)(int* version);                         // ncclGetVersion
  NcclResult (*get_unique_id)(NcclUniqueId* id);                   // ncclGetUniqueId
  NcclResult (*comm_init_rank)(NcclComm* comm, int nranks, NcclUniqueId id,
                               int rank);                          // ncclCommInitRank
  NcclResult (*comm_init_all)(NcclComm* comms, int ndev,
                              const int* devlist);                 // ncclCommInitAll
  NcclResult (*comm_destroy)(NcclComm comm);                       // ncclCommDestroy
  NcclResult (*comm_abort)(NcclComm comm);                         // ncclCommAbort
  NcclResult (*comm_get_async_error)(NcclComm comm,
                                     NcclResult* error);           // ncclCommGetAsyncError
  NcclResult (*all_reduce)(const void* send, void* recv, size_t count, NcclDataType dt,
                           NcclRedOp op, NcclComm comm, cudaStream_t s);  // ncclAllReduce
  NcclResult (*all_gather)(const void* send, void* recv, size_t send_count,
                           NcclDataType dt, NcclComm comm, cudaStream_t s);  // ncclAllGather
  NcclResult (*reduce_scatter)(const void* send, void* recv, size_t recv_count,
                               NcclDataType dt, NcclRedOp op, NcclComm comm,
                               cudaStream_t s);                    // ncclReduceScatter
  NcclResult (*broadcast)(const void* send, void* recv, size_t count, NcclDataType dt,
                          int root, NcclComm comm, cudaStream_t s);  // ncclBroadcast
  NcclResult (*send)(const void* send, size_t count, NcclDataType dt, int peer,
                     NcclComm comm, cudaStream_t s);               // ncclSend
  NcclResult (*recv)(void* recv, size_t count, NcclDataType dt, int peer,
                     NcclComm comm, cudaStream_t s);               // ncclRecv
  NcclResult (*group_start)();                                     // ncclGroupStart
  NcclResult (*group_end)();                                       // ncclGroupEnd
  const char* (*get_error_string)(NcclResult r);                   // ncclGetErrorString
};

// Loads NCCL once (thread-safe). Returns the table, or NULL with `status`
// set to FAILED_PRECONDITION naming the libraries tried and saying what to
// install.
const NcclApi* load_nccl(TF_Status* status);

// "<NCCL's text> (ncclResult_t N)" for a result.
std::string nccl_error_text(const NcclApi* api, NcclResult r);

}  // namespace pgcuda

#endif  // PLUGGABLE_NCCL_LOADER_H_
