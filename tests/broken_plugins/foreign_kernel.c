/* Kernel-only plugin (no SE_InitPlugin) that registers a second AddV2
 * float32 kernel for MY_DEVICE, which the host plugin already provides.
 * Expected: loads (a kernel-only plugin is legal); the kernel is rejected as
 * a duplicate naming the host plugin, and MY_DEVICE keeps its own kernel. */
#include "kernels.h"
#define MINI_NO_SE_INIT
static void wrong_add(void* k, TF_OpKernelContext* ctx) { (void)k, (void)ctx; }
#define MINI_KERNELS_HOOK()                                                  \
  {                                                                          \
    TF_Status* st = TF_NewStatus();                                          \
    TF_KernelBuilder* b =                                                    \
        TF_NewKernelBuilder("AddV2", "MY_DEVICE", NULL, wrong_add, NULL);    \
    TF_KernelBuilder_TypeConstraint(b, "T", TF_FLOAT, st);                   \
    TF_RegisterKernelBuilder("AddV2", b, st);                                \
    TF_DeleteStatus(st);                                                     \
  }
#include "mini_device.h"
