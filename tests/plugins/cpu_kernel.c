/* A kernel-only test plugin that tries to register a CPU kernel for Relu,
 * which pluggable refuses (the CPU device is built in). */
#include "kernels.h"

static void relu(void* kernel, TF_OpKernelContext* ctx) {
  (void)kernel;
  (void)ctx;
}

void TF_InitKernel(void) {
  TF_Status* s = TF_NewStatus();
  TF_KernelBuilder* b = TF_NewKernelBuilder("Relu", "CPU", NULL, relu, NULL);
  TF_KernelBuilder_TypeConstraint(b, "T", TF_FLOAT, s);
  TF_RegisterKernelBuilder("Relu", b, s);
  TF_DeleteStatus(s);
}
