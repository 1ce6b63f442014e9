// Conv2D of the CUDA reference plugin (kernels_conv.cu): what the rest of the
// plugin needs to know of it.
#ifndef PLUGGABLE_CUDA_CONV_H_
#define PLUGGABLE_CUDA_CONV_H_

#include "cuda_common.h"

namespace pgcuda {

// The cuDNN handle of stream `s`, made now if cuDNN is loaded already (a
// convolution ran before); null otherwise. Call with s->mu held, outside a
// capture (begin_capture does, so that a captured convolution finds it).
void* conv_prepare_stream(CudaStream* s);

}  // namespace pgcuda

#endif  // PLUGGABLE_CUDA_CONV_H_
