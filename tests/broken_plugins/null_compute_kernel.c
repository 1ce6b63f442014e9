/* Broken kernel: registers a kernel without a compute function. The plugin
 * loads; the kernel is rejected ("compute_func is NULL"). */
#define MINI_KERNELS_HOOK()                                              \
  {                                                                      \
    TF_Status* st = TF_NewStatus();                                      \
    TF_KernelBuilder* b =                                                \
        TF_NewKernelBuilder("Relu", MINI_DEVICE_TYPE, NULL, NULL, NULL); \
    TF_KernelBuilder_TypeConstraint(b, "T", TF_FLOAT, st);               \
    TF_RegisterKernelBuilder("Relu", b, st);                             \
    TF_DeleteStatus(st);                                                 \
  }
#include "mini_device.h"
