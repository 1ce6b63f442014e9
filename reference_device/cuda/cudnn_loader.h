// Run-time loading of cuDNN (9.x), for Conv2D. The plugin does not link
// against cuDNN: it opens libcudnn.so.9 (which loads its sub-libraries from
// its own folder) on first use and resolves only the functions below, with
// the values of cuDNN's public API (cudnn_graph.h, cudnn_ops.h,
// cudnn_cnn.h) written out here.
#ifndef PLUGGABLE_CUDNN_LOADER_H_
#define PLUGGABLE_CUDNN_LOADER_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "tf_status.h"

namespace pgcuda {

typedef int DnnStatus;  // cudnnStatus_t: 0 is CUDNN_STATUS_SUCCESS
constexpr DnnStatus kDnnSuccess = 0;
// cudnnTensorFormat_t
constexpr int kDnnNHWC = 1;  // CUDNN_TENSOR_NHWC (filters: KRSC)
// cudnnDataType_t
constexpr int kDnnFloat = 0, kDnnHalf = 2, kDnnBFloat16 = 9;
// cudnnConvolutionMode_t
constexpr int kDnnCrossCorrelation = 1;
// cudnnMathType_t
constexpr int kDnnDefaultMath = 0, kDnnTensorOpMath = 1, kDnnFmaMath = 3;

// cudnnConvolutionFwdAlgoPerf_t
struct DnnFwdAlgoPerf {
  int algo;
  DnnStatus status;
  float time;
  size_t memory;
  int determinism;
  int math_type;
  int reserved[3];
};

// Function table of the loaded library (handles and descriptors are opaque
// pointers).
struct DnnApi {
  DnnStatus (*create)(void** handle);                     // cudnnCreate
  DnnStatus (*destroy)(void* handle);                     // cudnnDestroy
  DnnStatus (*set_stream)(void* handle, cudaStream_t s);  // cudnnSetStream
  const char* (*error_string)(DnnStatus s);               // cudnnGetErrorString
  DnnStatus (*create_tensor)(void** desc);                // cudnnCreateTensorDescriptor
  DnnStatus (*set_tensor_4d)(void* desc, int format, int dtype, int n, int c, int h,
                             int w);                      // cudnnSetTensor4dDescriptor
  DnnStatus (*destroy_tensor)(void* desc);                // cudnnDestroyTensorDescriptor
  DnnStatus (*create_filter)(void** desc);                // cudnnCreateFilterDescriptor
  DnnStatus (*set_filter_4d)(void* desc, int dtype, int format, int k, int c, int h,
                             int w);                      // cudnnSetFilter4dDescriptor
  DnnStatus (*destroy_filter)(void* desc);                // cudnnDestroyFilterDescriptor
  DnnStatus (*create_conv)(void** desc);                  // cudnnCreateConvolutionDescriptor
  DnnStatus (*set_conv_2d)(void* desc, int pad_h, int pad_w, int stride_h, int stride_w,
                           int dil_h, int dil_w, int mode,
                           int compute_type);             // cudnnSetConvolution2dDescriptor
  DnnStatus (*set_conv_math)(void* desc, int math_type);  // cudnnSetConvolutionMathType
  DnnStatus (*set_conv_groups)(void* desc, int groups);   // cudnnSetConvolutionGroupCount
  DnnStatus (*destroy_conv)(void* desc);                  // cudnnDestroyConvolutionDescriptor
  DnnStatus (*fwd_algorithms)(void* handle, void* x, void* w, void* conv, void* y,
                              int requested, int* returned,
                              DnnFwdAlgoPerf* results);   // ..ForwardAlgorithm_v7
  DnnStatus (*fwd_workspace)(void* handle, void* x, void* w, void* conv, void* y,
                             int algo, size_t* bytes);    // ..ForwardWorkspaceSize
  DnnStatus (*forward)(void* handle, const void* alpha, void* xd, const void* x, void* wd,
                       const void* w, void* conv, int algo, void* ws, size_t ws_bytes,
                       const void* beta, void* yd, void* y);  // cudnnConvolutionForward
};

// Loads cuDNN once (thread-safe). Returns the table, or NULL with `status`
// set to FAILED_PRECONDITION naming the libraries tried.
const DnnApi* load_dnn(TF_Status* status);
// Whether cuDNN is loaded already (never loads it).
bool dnn_loaded();
// "CUDNN_STATUS_..." text for a status value.
std::string dnn_status_text(const DnnApi* api, DnnStatus s);
// Destroys a handle made through the loaded library (no-op if none).
void destroy_dnn_handle(void* handle);

}  // namespace pgcuda

#endif  // PLUGGABLE_CUDNN_LOADER_H_
