/* A test device ("WRONG_SHAPE") whose Relu kernel allocates an output one
 * element longer than the op's shape function says. Build with
 * -I tests/broken_plugins. */
#include <stdint.h>

#include "kernels.h"

static void bad_relu(void* kernel, TF_OpKernelContext* ctx) {
  (void)kernel;
  TF_Status* s = TF_NewStatus();
  TF_Tensor* x = NULL;
  TF_GetInput(ctx, 0, &x, s);
  int64_t n = TF_TensorElementCount(x) + 1;
  TF_Tensor* y = TF_AllocateOutput(ctx, 0, TF_FLOAT, &n, 1, (size_t)n * 4, s);
  if (TF_GetCode(s) != TF_OK) TF_OpKernelContext_Failure(ctx, s);
  TF_DeleteTensor(y);
  TF_DeleteTensor(x);
  TF_DeleteStatus(s);
}

static void register_bad_relu(void) {
  TF_Status* s = TF_NewStatus();
  TF_KernelBuilder* b = TF_NewKernelBuilder("Relu", "WRONG_SHAPE", NULL, bad_relu, NULL);
  TF_KernelBuilder_TypeConstraint(b, "T", TF_FLOAT, s);
  TF_RegisterKernelBuilder("Relu", b, s);
  TF_DeleteStatus(s);
}

#define MINI_DEVICE_TYPE "WRONG_SHAPE"
#define MINI_PLATFORM_NAME "WRONG_SHAPE_PLATFORM"
#define MINI_KERNELS_HOOK() register_bad_relu();
#include "mini_device.h"
