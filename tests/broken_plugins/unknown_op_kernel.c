/* Broken kernel: registers a kernel for an op nobody defined. The plugin
 * loads; the kernel is rejected and listed in record.rejected
 * ("kernel for unknown op 'NoSuchOp'"). */
#include "kernels.h"
static void noop_compute(void* k, TF_OpKernelContext* ctx) { (void)k, (void)ctx; }
#define MINI_KERNELS_HOOK()                                                  \
  {                                                                          \
    TF_Status* st = TF_NewStatus();                                          \
    TF_RegisterKernelBuilder(                                                \
        "NoSuchOp", TF_NewKernelBuilder("NoSuchOp", MINI_DEVICE_TYPE, NULL,  \
                                        noop_compute, NULL), st);            \
    TF_DeleteStatus(st);                                                     \
  }
#include "mini_device.h"
