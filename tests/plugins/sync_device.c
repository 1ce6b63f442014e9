/* A test device ("SYNC_DEVICE", the minimal synchronous device of
 * tests/broken_plugins/mini_device.h) that also defines a new op through
 * ops.h, with a C shape function, and a kernel for it.
 *
 * New op: ScaleAndShift(x: T) -> y: T, y = x * scale + shift, with attrs
 * T: {float, double}, scale: float = 2.0, shift: float = 0.0. Build with
 * -I tests/broken_plugins. */
#include <stdint.h>
#include <stdlib.h>

#include "kernels.h"
#include "ops.h"

/*** The new op and its kernel ***/

typedef struct {
  float scale, shift;
} ScaleAndShift;

static void* sas_create(TF_OpKernelConstruction* ctx) {
  ScaleAndShift* k = calloc(1, sizeof *k);
  TF_Status* s = TF_NewStatus();
  TF_OpKernelConstruction_GetAttrFloat(ctx, "scale", &k->scale, s);
  if (TF_GetCode(s) == TF_OK)
    TF_OpKernelConstruction_GetAttrFloat(ctx, "shift", &k->shift, s);
  if (TF_GetCode(s) != TF_OK) {
    TF_OpKernelConstruction_Failure(ctx, s);
    free(k);
    k = NULL;
  }
  TF_DeleteStatus(s);
  return k;
}

static void sas_delete(void* k) { free(k); }

static void sas_compute(void* kernel, TF_OpKernelContext* ctx) {
  ScaleAndShift* k = kernel;
  TF_Status* s = TF_NewStatus();
  TF_Tensor* x = NULL;
  TF_GetInput(ctx, 0, &x, s);
  if (TF_GetCode(s) != TF_OK) goto done;
  int64_t dims[TF_MAX_DIMS];
  int nd = TF_NumDims(x);
  for (int i = 0; i < nd; ++i) dims[i] = TF_Dim(x, i);
  TF_Tensor* y = TF_AllocateOutput(ctx, 0, TF_TensorType(x), dims, nd,
                                   TF_TensorByteSize(x), s);
  if (TF_GetCode(s) == TF_OK) {
    int64_t n = TF_TensorElementCount(x);
    if (TF_TensorType(x) == TF_FLOAT) {
      const float* in = TF_TensorData(x);
      float* out = TF_TensorData(y);
      for (int64_t i = 0; i < n; ++i) out[i] = in[i] * k->scale + k->shift;
    } else {
      const double* in = TF_TensorData(x);
      double* out = TF_TensorData(y);
      for (int64_t i = 0; i < n; ++i)
        out[i] = in[i] * (double)k->scale + (double)k->shift;
    }
  }
  TF_DeleteTensor(y);
done:
  if (TF_GetCode(s) != TF_OK) TF_OpKernelContext_Failure(ctx, s);
  TF_DeleteTensor(x);
  TF_DeleteStatus(s);
}

/* Output shape = input shape; inputs of rank > 4 are rejected. */
static void sas_shape(TF_ShapeInferenceContext* ctx, TF_Status* status) {
  TF_ShapeHandle* in = TF_NewShapeHandle();
  TF_ShapeHandle* checked = TF_NewShapeHandle();
  TF_ShapeInferenceContextGetInput(ctx, 0, in, status);
  if (TF_GetCode(status) == TF_OK)
    TF_ShapeInferenceContextWithRankAtMost(ctx, in, 4, checked, status);
  if (TF_GetCode(status) == TF_OK)
    TF_ShapeInferenceContextSetOutput(ctx, 0, checked, status);
  TF_DeleteShapeHandle(in);
  TF_DeleteShapeHandle(checked);
}

static void register_scale_and_shift(void) {
  TF_Status* s = TF_NewStatus();
  TF_OpDefinitionBuilder* b = TF_NewOpDefinitionBuilder("ScaleAndShift");
  TF_OpDefinitionBuilderAddInput(b, "x: T");
  TF_OpDefinitionBuilderAddOutput(b, "y: T");
  TF_OpDefinitionBuilderAddAttr(b, "T: {float, double}");
  TF_OpDefinitionBuilderAddAttr(b, "scale: float = 2.0");
  TF_OpDefinitionBuilderAddAttr(b, "shift: float = 0.0");
  TF_OpDefinitionBuilderSetShapeInferenceFunction(b, sas_shape);
  TF_RegisterOpDefinition(b, s);
  TF_DataType types[] = {TF_FLOAT, TF_DOUBLE};
  for (int i = 0; i < 2 && TF_GetCode(s) == TF_OK; ++i) {
    TF_KernelBuilder* kb = TF_NewKernelBuilder("ScaleAndShift", "SYNC_DEVICE",
                                               sas_create, sas_compute,
                                               sas_delete);
    TF_KernelBuilder_TypeConstraint(kb, "T", types[i], s);
    if (TF_GetCode(s) == TF_OK) TF_RegisterKernelBuilder("ScaleAndShift", kb, s);
  }
  TF_DeleteStatus(s);
}

#define MINI_DEVICE_TYPE "SYNC_DEVICE"
#define MINI_PLATFORM_NAME "SYNC_PLATFORM"
#define MINI_KERNELS_HOOK() register_scale_and_shift();
#include "mini_device.h"
