// Conv2D of the CUDA reference plugin (kernels_conv.cu): what the rest of the
// plugin needs to know of it.
#ifndef PLUGGABLE_CUDA_CONV_H_
#define PLUGGABLE_CUDA_CONV_H_

#include "cuda_common.h"
#include "tf_datatype.h"

namespace pgcuda {

// The cuDNN handle of stream `s`, made now if cuDNN is loaded already (a
// convolution ran before); null otherwise. Call with s->mu held, outside a
// capture (begin_capture does, so that a captured convolution finds it).
void* conv_prepare_stream(CudaStream* s);

class OpCall;

// A convolution of NHWC input and HWIO filter; pb, pr: the padding after
// (bottom, right) that the output reads.
struct NhwcConvShape {
  int64_t N, H, W, C, KH, KW, FC, OC, OH, OW;
  int64_t sh, sw, dh, dw, pt, pl, pb, pr;
};

// cuDNN for the plugin's other convolution kernels (_FusedConv2D), under
// Conv2D's rules (cuDNN loadable, PLUGGABLE_CUDNN, large enough, the same
// padding before and after). The cache keeps the algorithm cuDNN chose per
// shape: one per kernel instance, made with the instance's TF32 setting.
void* dnn_conv_cache_new(bool allow_tf32);
void dnn_conv_cache_delete(void* cache);
// 1: the convolution is enqueued on c's stream; 0: declined, nothing was
// enqueued (the caller's own kernels run); -1: failed, recorded in c.
int conv2d_cudnn(OpCall& c, void* cache, const NhwcConvShape& g, TF_DataType dt,
                 const void* in, const void* filter, void* out);

}  // namespace pgcuda

#endif  // PLUGGABLE_CUDA_CONV_H_
