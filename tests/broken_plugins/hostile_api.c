/* A hostile plugin: calls the TF_* API with wrong arguments (NULL pointers,
 * indices out of range, negative dimensions, byte sizes that do not match
 * the shape, wrong attribute types, missing attributes) inside TF_InitKernel,
 * inside a kernel's create_func and inside its compute_func. Every call must
 * come back with an error status (or a documented NULL / -1 / 0 result);
 * none may crash the process.
 *
 * Each result is appended as a line "<phase> <check> <code>" to the file
 * named by PLUGGABLE_HOSTILE_OUT; for calls without a status, <code> is 1
 * when the documented failure value came back and 0 otherwise. After its
 * misuse, the kernel computes Neg correctly so the op completes. */
#include <stdio.h>

#include "kernels.h"
#include "ops.h"

#define MINI_DEVICE_TYPE "HOSTILE"
#define MINI_PLATFORM_NAME "HOSTILE_PLATFORM"
#define MINI_NO_INIT_KERNEL
#include "mini_device.h"

static void note(const char* phase, const char* check, int code) {
  const char* path = getenv("PLUGGABLE_HOSTILE_OUT");
  if (path == NULL) return;
  FILE* f = fopen(path, "a");
  if (f == NULL) return;
  fprintf(f, "%s %s %d\n", phase, check, code);
  fclose(f);
}

/* Notes the code of `s` and resets it to OK. */
static void note_status(const char* phase, const char* check, TF_Status* s) {
  note(phase, check, (int)TF_GetCode(s));
  TF_SetStatus(s, TF_OK, "");
}

static void noop_deallocator(void* data, size_t len, void* arg) {
  (void)data, (void)len, (void)arg;
}

static void misuse_outside_kernel(void) {
  TF_Status* s = TF_NewStatus();
  const char* p = "init";
  int64_t neg[1] = {-1};
  int64_t two[1] = {2};
  float data[2] = {1, 2};

  TF_KernelBuilder* b = TF_NewKernelBuilder(NULL, MINI_DEVICE_TYPE, NULL,
                                            mini_neg, NULL);
  TF_RegisterKernelBuilder("null_op_name", b, s);
  note_status(p, "register_null_op_name", s);
  TF_KernelBuilder_TypeConstraint(NULL, "T", TF_FLOAT, s);
  note_status(p, "type_constraint_null_builder", s);
  TF_RegisterKernelBuilder("x", NULL, s);
  note_status(p, "register_null_builder", s);
  TF_RegisterKernelBuilderWithKernelDef("", "x", NULL, s);
  note_status(p, "register_with_kernel_def", s);
  TF_RegisterOpDefinition(NULL, s);
  note_status(p, "register_null_op_def", s);

  TF_Tensor* t = (TF_Tensor*)1;
  TF_GetInput(NULL, 0, &t, s);
  note_status(p, "get_input_null_ctx", s);
  note(p, "get_input_null_ctx_clears_output", t == NULL);
  TF_GetInput(NULL, 0, NULL, s);
  note_status(p, "get_input_null_out", s);
  note(p, "allocate_output_null_ctx_ret",
       TF_AllocateOutput(NULL, 0, TF_FLOAT, two, 1, 8, s) == NULL);
  note_status(p, "allocate_output_null_ctx", s);
  TF_GetStream(NULL, s);
  note_status(p, "get_stream_null_ctx", s);
  TF_OpKernelConstruction_GetAttrInt32(NULL, "T", NULL, s);
  note_status(p, "get_attr_null_ctx", s);
  note(p, "num_inputs_null_ctx", TF_NumInputs(NULL) == 0);

  note(p, "new_tensor_negative_dim",
       TF_NewTensor(TF_FLOAT, neg, 1, data, 8, noop_deallocator, NULL) == NULL);
  note(p, "new_tensor_wrong_len",
       TF_NewTensor(TF_FLOAT, two, 1, data, 7, noop_deallocator, NULL) == NULL);
  note(p, "new_tensor_null_dims",
       TF_NewTensor(TF_FLOAT, NULL, 1, data, 8, noop_deallocator, NULL) == NULL);
  note(p, "new_tensor_bad_dtype",
       TF_NewTensor((TF_DataType)9999, two, 1, data, 8, noop_deallocator,
                    NULL) == NULL);
  note(p, "allocate_tensor_negative_rank",
       TF_AllocateTensor(TF_FLOAT, two, -1, 0) == NULL);
  note(p, "allocate_tensor_too_many_dims",
       TF_AllocateTensor(TF_FLOAT, two, TF_MAX_DIMS + 1, 8) == NULL);

  TF_Tensor* a = TF_AllocateTensor(TF_FLOAT, two, 1, 8);
  TF_Tensor* c = TF_AllocateTensor(TF_FLOAT, two, 1, 8);
  int64_t three[1] = {3};
  TF_TensorBitcastFrom(a, TF_FLOAT, c, three, 1, s);
  note_status(p, "bitcast_size_mismatch", s);
  TF_TensorBitcastFrom(NULL, TF_FLOAT, c, two, 1, s);
  note_status(p, "bitcast_null", s);
  TF_SetShape(a, neg, 1); /* ignored: the shape stays [2] */
  note(p, "set_shape_negative_ignored", TF_Dim(a, 0) == 2);
  note(p, "dim_out_of_range", TF_Dim(a, 5) == -1);
  note(p, "dim_null", TF_Dim(NULL, 0) == -1);
  note(p, "num_dims_null", TF_NumDims(NULL) == 0);
  note(p, "byte_size_null", TF_TensorByteSize(NULL) == 0);
  note(p, "data_null", TF_TensorData(NULL) == NULL);
  TF_DeleteTensor(a);
  TF_DeleteTensor(c);
  TF_DeleteTensor(NULL);

  TF_SetStatus(NULL, TF_INTERNAL, "ignored");
  note(p, "get_code_null", TF_GetCode(NULL));
  note(p, "message_null", TF_Message(NULL) != NULL);
  TF_DeleteStatus(NULL);
  TF_DeleteKernelBuilder(NULL);
  TF_DeleteOpDefinitionBuilder(NULL);
  TF_DeleteStatus(s);
}

static void* hostile_create(TF_OpKernelConstruction* ctx) {
  TF_Status* s = TF_NewStatus();
  const char* p = "create";
  int32_t i32 = 0;
  TF_Bool b = 0;
  TF_DataType t = 0;
  char buf[16];
  int32_t list_size = 0, total = 0;
  TF_DataType types[2];

  TF_OpKernelConstruction_GetAttrInt32(ctx, "T", &i32, s);
  note_status(p, "int32_of_type_attr", s);
  TF_OpKernelConstruction_GetAttrBool(ctx, "no_such_attr", &b, s);
  note_status(p, "missing_attr", s);
  TF_OpKernelConstruction_GetAttrType(ctx, "T", NULL, s);
  note_status(p, "null_output", s);
  TF_OpKernelConstruction_GetAttrTypeList(ctx, "T", types, 2, s);
  note_status(p, "list_of_scalar_attr", s);
  TF_OpKernelConstruction_GetAttrString(ctx, "T", buf, sizeof buf, s);
  note_status(p, "string_of_type_attr", s);
  TF_OpKernelConstruction_GetAttrSize(ctx, "no_such_attr", &list_size, &total, s);
  note_status(p, "size_of_missing_attr", s);
  TF_OpKernelConstruction_GetAttrSize(ctx, "T", NULL, NULL, s);
  note_status(p, "size_null_outputs", s);
  TF_OpKernelConstruction_HasAttr(ctx, NULL, s);
  note_status(p, "has_attr_null_name", s);
  TF_OpKernelConstruction_GetAttrTensor(ctx, "T", NULL, s);
  note_status(p, "tensor_attr", s);
  TF_OpKernelConstruction_GetAttrType(ctx, "T", &t, s);
  note_status(p, "good_type_attr", s);
  note(p, "good_type_value", t == TF_FLOAT);
  TF_DeleteStatus(s);
  return NULL;
}

static void hostile_compute(void* kernel, TF_OpKernelContext* ctx) {
  TF_Status* s = TF_NewStatus();
  const char* p = "compute";
  TF_Tensor* x = NULL;
  int64_t dims[2] = {2, 3};
  int64_t neg[1] = {-2};
  int64_t big[TF_MAX_DIMS + 1];
  int fwd = 7;
  for (int i = 0; i <= TF_MAX_DIMS; ++i) big[i] = 1;

  TF_GetInput(ctx, -1, &x, s);
  note_status(p, "input_negative_index", s);
  TF_GetInput(ctx, 1, &x, s);
  note_status(p, "input_index_past_end", s);
  TF_GetInput(ctx, 0, NULL, s);
  note_status(p, "input_null_out", s);
  note(p, "input_dtype_out_of_range", TF_InputDatatype(ctx, 9) == 0);
  note(p, "requested_input_out_of_range",
       TF_GetOpKernelRequestedInput(ctx, 99).len == 0);

  note(p, "allocate_bad_index_ret",
       TF_AllocateOutput(ctx, 5, TF_FLOAT, dims, 2, 24, s) == NULL);
  note_status(p, "allocate_bad_index", s);
  TF_AllocateOutput(ctx, -1, TF_FLOAT, dims, 2, 24, s);
  note_status(p, "allocate_negative_index", s);
  TF_AllocateOutput(ctx, 0, TF_FLOAT, neg, 1, 0, s);
  note_status(p, "allocate_negative_dim", s);
  TF_AllocateOutput(ctx, 0, TF_FLOAT, dims, 2, 7, s);
  note_status(p, "allocate_len_mismatch", s);
  TF_AllocateOutput(ctx, 0, TF_INT32, dims, 2, 24, s);
  note_status(p, "allocate_wrong_dtype", s);
  TF_AllocateOutput(ctx, 0, TF_FLOAT, NULL, 2, 24, s);
  note_status(p, "allocate_null_dims", s);
  TF_AllocateOutput(ctx, 0, TF_FLOAT, big, TF_MAX_DIMS + 1, 4, s);
  note_status(p, "allocate_too_many_dims", s);
  TF_AllocateOutput(ctx, 0, TF_FLOAT, dims, -1, 4, s);
  note_status(p, "allocate_negative_rank", s);
  TF_AllocateTemp(ctx, TF_FLOAT, neg, 1, NULL, s);
  note_status(p, "temp_negative_dim", s);
  TF_AllocateTemp(ctx, (TF_DataType)9999, dims, 2, NULL, s);
  note_status(p, "temp_bad_dtype", s);
  TF_AllocateTemp(NULL, TF_FLOAT, dims, 2, NULL, s);
  note_status(p, "temp_null_ctx", s);
  TF_ForwardInputOrAllocateOutput(ctx, NULL, 0, 4, dims, 2, &fwd, s);
  note_status(p, "forward_bad_index", s);

  TF_SetOutput(ctx, 0, NULL, s);
  note_status(p, "set_output_null", s);
  TF_Tensor* host = TF_AllocateTensor(TF_FLOAT, dims, 2, 24);
  TF_SetOutput(ctx, 3, host, s);
  note_status(p, "set_output_bad_index", s);
  TF_SetOutput(ctx, 0, host, s);
  note_status(p, "set_output_host_tensor", s);
  TF_DeleteTensor(host);
  TF_GetMutableOutput(ctx, -3, s);
  note_status(p, "mutable_output_bad_index", s);
  TF_IsHostMemoryInput(ctx, 7, s);
  note_status(p, "host_memory_input_bad_index", s);
  TF_IsHostMemoryOutput(ctx, -1, s);
  note_status(p, "host_memory_output_bad_index", s);
  TF_OpKernelContext_Failure(ctx, NULL); /* ignored */
  TF_OpKernelContext_Failure(NULL, s);   /* ignored */
  TF_DeleteStatus(s);

  /* Now do the work properly. */
  mini_neg(kernel, ctx);
}

void TF_InitKernel(void) {
  misuse_outside_kernel();
  TF_Status* s = TF_NewStatus();
  TF_KernelBuilder* b = TF_NewKernelBuilder("Neg", MINI_DEVICE_TYPE,
                                            hostile_create, hostile_compute,
                                            NULL);
  TF_KernelBuilder_TypeConstraint(b, "T", TF_FLOAT, s);
  TF_RegisterKernelBuilder("Neg", b, s);
  note_status("init", "register_good_kernel", s);
  TF_DeleteStatus(s);
}
