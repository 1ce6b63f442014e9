/* Broken kernels: type constraints on an attribute AddV2 does not have ("Q")
 * and on an attribute that is not a type (MatMul's transpose_a), and a type
 * AddV2 does not allow (bool). The plugin loads; the three kernels are
 * rejected ("unknown attribute 'Q'", "not a type", "is not allowed"). */
#include "kernels.h"
#define MINI_DEVICE_TYPE "MINI"
static void noop_compute(void* k, TF_OpKernelContext* ctx) { (void)k, (void)ctx; }
static void register_constrained(const char* op, const char* attr,
                                 TF_DataType t) {
  TF_Status* st = TF_NewStatus();
  TF_KernelBuilder* b =
      TF_NewKernelBuilder(op, MINI_DEVICE_TYPE, NULL, noop_compute, NULL);
  TF_KernelBuilder_TypeConstraint(b, attr, t, st);
  TF_RegisterKernelBuilder(op, b, st);
  TF_DeleteStatus(st);
}
#define MINI_KERNELS_HOOK()                              \
  register_constrained("AddV2", "Q", TF_FLOAT);          \
  register_constrained("MatMul", "transpose_a", TF_FLOAT); \
  register_constrained("AddV2", "T", TF_BOOL);
#include "mini_device.h"
