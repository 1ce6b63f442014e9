/* A minimal, synchronous test device ("SYNC_DEVICE") that also defines a new
 * op through ops.h and a kernel for it.
 *
 * Work runs inline: a stream is just a counter, copies are memcpy, events are
 * complete as soon as they are recorded. That is legal (a stream may finish
 * its work before the enqueueing call returns) and keeps the file short.
 *
 * New op: ScaleAndShift(x: T) -> y: T, y = x * scale + shift, with attrs
 * T: {float, double}, scale: float = 2.0, shift: float = 0.0. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels.h"
#include "ops.h"
#include "stream_executor.h"

/*** Device runtime ***/

static void get_device_count(const SP_Platform* p, int* n, TF_Status* s) {
  (void)p;
  *n = 1;
  TF_SetStatus(s, TF_OK, "");
}

static void create_device(const SP_Platform* p, SE_CreateDeviceParams* params,
                          TF_Status* s) {
  (void)p;
  params->device->struct_size = SP_DEVICE_STRUCT_SIZE;
  params->device->ordinal = params->ordinal;
  params->device->hardware_name = "synchronous test device";
  params->device->device_vendor = "pluggable tests";
  TF_SetStatus(s, TF_OK, "");
}

static void destroy_device(const SP_Platform* p, SP_Device* d) {
  (void)p;
  (void)d;
}

static void allocate(const SP_Device* d, uint64_t size, int64_t space,
                     SP_DeviceMemoryBase* mem) {
  (void)d;
  (void)space;
  mem->struct_size = SP_DEVICE_MEMORY_BASE_STRUCT_SIZE;
  mem->opaque = size ? malloc(size) : NULL;
  mem->size = size;
}

static void deallocate(const SP_Device* d, SP_DeviceMemoryBase* mem) {
  (void)d;
  free(mem->opaque);
}

static void create_stream(const SP_Device* d, SP_Stream* s, TF_Status* st) {
  (void)d;
  *s = (SP_Stream)calloc(1, 8);
  TF_SetStatus(st, TF_OK, "");
}

static void destroy_stream(const SP_Device* d, SP_Stream s) {
  (void)d;
  free(s);
}

static void ok_stream2(const SP_Device* d, SP_Stream a, SP_Stream b,
                       TF_Status* st) {
  (void)d; (void)a; (void)b;
  TF_SetStatus(st, TF_OK, "");
}

static void ok_stream(const SP_Device* d, SP_Stream s, TF_Status* st) {
  (void)d; (void)s;
  TF_SetStatus(st, TF_OK, "");
}

/* An event is an int: 0 never recorded, 1 complete. */
static void create_event(const SP_Device* d, SP_Event* e, TF_Status* st) {
  (void)d;
  *e = (SP_Event)calloc(1, sizeof(int));
  TF_SetStatus(st, TF_OK, "");
}

static void destroy_event(const SP_Device* d, SP_Event e) {
  (void)d;
  free(e);
}

static SE_EventStatus event_status(const SP_Device* d, SP_Event e) {
  (void)d;
  return *(int*)e ? SE_EVENT_COMPLETE : SE_EVENT_UNKNOWN;
}

static void record_event(const SP_Device* d, SP_Stream s, SP_Event e,
                         TF_Status* st) {
  (void)d; (void)s;
  *(int*)e = 1;
  TF_SetStatus(st, TF_OK, "");
}

static void wait_event(const SP_Device* const d, SP_Stream s, SP_Event e,
                       TF_Status* const st) {
  (void)d; (void)s; (void)e;
  TF_SetStatus(st, TF_OK, "");
}

static void block_event(const SP_Device* d, SP_Event e, TF_Status* st) {
  (void)d;
  if (*(int*)e)
    TF_SetStatus(st, TF_OK, "");
  else
    TF_SetStatus(st, TF_FAILED_PRECONDITION, "event was never recorded");
}

static void sync_all(const SP_Device* d, TF_Status* st) {
  (void)d;
  TF_SetStatus(st, TF_OK, "");
}

static void dtoh(const SP_Device* d, SP_Stream s, void* dst,
                 const SP_DeviceMemoryBase* src, uint64_t n, TF_Status* st) {
  (void)d; (void)s;
  memcpy(dst, src->opaque, n);
  TF_SetStatus(st, TF_OK, "");
}

static void htod(const SP_Device* d, SP_Stream s, SP_DeviceMemoryBase* dst,
                 const void* src, uint64_t n, TF_Status* st) {
  (void)d; (void)s;
  memcpy(dst->opaque, src, n);
  TF_SetStatus(st, TF_OK, "");
}

static void dtod(const SP_Device* d, SP_Stream s, SP_DeviceMemoryBase* dst,
                 const SP_DeviceMemoryBase* src, uint64_t n, TF_Status* st) {
  (void)d; (void)s;
  memcpy(dst->opaque, src->opaque, n);
  TF_SetStatus(st, TF_OK, "");
}

static void sync_dtoh(const SP_Device* d, void* dst,
                      const SP_DeviceMemoryBase* src, uint64_t n,
                      TF_Status* st) {
  dtoh(d, NULL, dst, src, n, st);
}

static void sync_htod(const SP_Device* d, SP_DeviceMemoryBase* dst,
                      const void* src, uint64_t n, TF_Status* st) {
  htod(d, NULL, dst, src, n, st);
}

static void sync_dtod(const SP_Device* d, SP_DeviceMemoryBase* dst,
                      const SP_DeviceMemoryBase* src, uint64_t n,
                      TF_Status* st) {
  dtod(d, NULL, dst, src, n, st);
}

static TF_Bool host_callback(const SP_Device* d, SP_Stream s,
                             SE_StatusCallbackFn fn, void* arg) {
  (void)d; (void)s;
  TF_Status* st = TF_NewStatus();
  fn(arg, st);
  TF_DeleteStatus(st);
  return 1;
}

static void create_se(const SP_Platform* p, SE_CreateStreamExecutorParams* params,
                      TF_Status* st) {
  (void)p;
  SP_StreamExecutor* se = params->stream_executor;
  se->struct_size = SP_STREAMEXECUTOR_STRUCT_SIZE;
  se->allocate = allocate;
  se->deallocate = deallocate;
  se->create_stream = create_stream;
  se->destroy_stream = destroy_stream;
  se->create_stream_dependency = ok_stream2;
  se->get_stream_status = ok_stream;
  se->create_event = create_event;
  se->destroy_event = destroy_event;
  se->get_event_status = event_status;
  se->record_event = record_event;
  se->wait_for_event = wait_event;
  se->memcpy_dtoh = dtoh;
  se->memcpy_htod = htod;
  se->memcpy_dtod = dtod;
  se->sync_memcpy_dtoh = sync_dtoh;
  se->sync_memcpy_htod = sync_htod;
  se->sync_memcpy_dtod = sync_dtod;
  se->block_host_for_event = block_event;
  se->block_host_until_done = ok_stream;
  se->synchronize_all_activity = sync_all;
  se->host_callback = host_callback;
  TF_SetStatus(st, TF_OK, "");
}

static void destroy_se(const SP_Platform* p, SP_StreamExecutor* se) {
  (void)p;
  (void)se;
}

void SE_InitPlugin(SE_PlatformRegistrationParams* params, TF_Status* status) {
  params->major_version = SE_MAJOR;
  params->minor_version = SE_MINOR;
  params->patch_version = SE_PATCH;
  params->platform->struct_size = SP_PLATFORM_STRUCT_SIZE;
  params->platform->name = "SYNC_PLATFORM";
  params->platform->type = "SYNC_DEVICE";
  SP_PlatformFns* fns = params->platform_fns;
  fns->struct_size = SP_PLATFORM_FNS_STRUCT_SIZE;
  fns->get_device_count = get_device_count;
  fns->create_device = create_device;
  fns->destroy_device = destroy_device;
  fns->create_stream_executor = create_se;
  fns->destroy_stream_executor = destroy_se;
  TF_SetStatus(status, TF_OK, "");
}

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

void TF_InitKernel(void) {
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
