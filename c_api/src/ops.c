/* Op definitions (TF_OpDefinitionBuilder) and shape inference. */
#include "internal.h"

struct TF_OpDefinitionBuilder {
  pg_op_builder b;
};

/* Inputs and outputs are counted flattened (a list argument "N * T" takes N
 * consecutive slots), as in TensorFlow's shape inference context. */
struct TF_ShapeInferenceContext {
  int num_inputs, num_outputs;
  TF_ShapeHandle* inputs;   /* num_inputs shapes */
  TF_ShapeHandle* outputs;  /* num_outputs shapes */
  int* output_set;          /* num_outputs flags */
  const pg_attrs* attrs;
};

static void free_shape_ctx(TF_ShapeInferenceContext* ctx) {
  if (ctx == NULL) return;
  free(ctx->inputs);
  free(ctx->outputs);
  free(ctx->output_set);
  free(ctx);
}

static char* dup(const char* s) {
  if (s == NULL) return NULL;
  char* d = malloc(strlen(s) + 1);
  if (d != NULL) strcpy(d, s);
  return d;
}

static void push(char*** list, int* n, const char* s) {
  char** grown = realloc(*list, (size_t)(*n + 1) * sizeof(char*));
  if (grown == NULL) return;
  *list = grown;
  grown[*n] = dup(s != NULL ? s : "");
  *n += 1;
}

TF_OpDefinitionBuilder* TF_NewOpDefinitionBuilder(const char* op_name) {
  TF_OpDefinitionBuilder* d = calloc(1, sizeof(TF_OpDefinitionBuilder));
  if (d == NULL) return NULL;
  d->b.name = dup(op_name != NULL ? op_name : "");
  d->b.plugin_id = pg_current_plugin();
  return d;
}

void pg_op_builder_free(pg_op_builder* b) {
  if (b == NULL) return;
  for (int i = 0; i < b->num_attrs; ++i) free(b->attrs[i]);
  for (int i = 0; i < b->num_inputs; ++i) free(b->inputs[i]);
  for (int i = 0; i < b->num_outputs; ++i) free(b->outputs[i]);
  free(b->attrs);
  free(b->inputs);
  free(b->outputs);
  free(b->name);
  free(b->deprecation);
  free(b); /* `b` is the first member of TF_OpDefinitionBuilder */
}

void TF_DeleteOpDefinitionBuilder(TF_OpDefinitionBuilder* builder) {
  if (builder != NULL) pg_op_builder_free(&builder->b);
}

void TF_RegisterOpDefinition(TF_OpDefinitionBuilder* builder,
                             TF_Status* status) {
  TF_SetStatus(status, TF_OK, "");
  if (builder == NULL) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "TF_RegisterOpDefinition: builder is NULL");
    return;
  }
  TF_Status* local = status != NULL ? status : TF_NewStatus();
  /* Python parses the specs, validates and keeps the definition; outside
   * TF_InitKernel it refuses and logs. */
  builder->b.outside_init = pg_current_plugin() < 0;
  if (!pg_hooks.register_op(&builder->b, local)) pg_op_builder_free(&builder->b);
  if (local != status) TF_DeleteStatus(local);
}

void TF_OpDefinitionBuilderAddAttr(TF_OpDefinitionBuilder* b, const char* s) {
  if (b != NULL) push(&b->b.attrs, &b->b.num_attrs, s);
}

void TF_OpDefinitionBuilderAddInput(TF_OpDefinitionBuilder* b, const char* s) {
  if (b != NULL) push(&b->b.inputs, &b->b.num_inputs, s);
}

void TF_OpDefinitionBuilderAddOutput(TF_OpDefinitionBuilder* b,
                                     const char* s) {
  if (b != NULL) push(&b->b.outputs, &b->b.num_outputs, s);
}

void TF_OpDefinitionBuilderSetIsCommutative(TF_OpDefinitionBuilder* b, bool v) {
  if (b != NULL) b->b.is_commutative = v;
}

void TF_OpDefinitionBuilderSetIsAggregate(TF_OpDefinitionBuilder* b, bool v) {
  if (b != NULL) b->b.is_aggregate = v;
}

void TF_OpDefinitionBuilderSetIsStateful(TF_OpDefinitionBuilder* b, bool v) {
  if (b != NULL) b->b.is_stateful = v;
}

void TF_OpDefinitionBuilderSetAllowsUninitializedInput(
    TF_OpDefinitionBuilder* b, bool v) {
  if (b != NULL) b->b.allows_uninitialized_input = v;
}

void TF_OpDefinitionBuilderDeprecated(TF_OpDefinitionBuilder* b, int version,
                                      const char* explanation) {
  if (b == NULL) return;
  b->b.deprecated_version = version;
  free(b->b.deprecation);
  b->b.deprecation = dup(explanation != NULL ? explanation : "");
}

void TF_OpDefinitionBuilderSetShapeInferenceFunction(
    TF_OpDefinitionBuilder* b,
    void (*fn)(TF_ShapeInferenceContext* ctx, TF_Status* status)) {
  if (b != NULL) b->b.shape_fn = fn;
}

/*** Shape inference ***/

void pg_run_shape_fn(void (*fn)(TF_ShapeInferenceContext*, TF_Status*),
                     int num_inputs, const int* in_ranks,
                     const int64_t* in_dims, pg_attrs* attrs, int num_outputs,
                     int* out_ranks, int64_t* out_dims, TF_Status* status) {
  TF_SetStatus(status, TF_OK, "");
  if (num_inputs < 0 || num_outputs < 0) {
    pg_set_status(status, TF_INVALID_ARGUMENT, "negative number of op arguments");
    return;
  }
  TF_ShapeInferenceContext* ctx = calloc(1, sizeof *ctx);
  if (ctx != NULL) {
    ctx->inputs = calloc((size_t)num_inputs + 1, sizeof(TF_ShapeHandle));
    ctx->outputs = calloc((size_t)num_outputs + 1, sizeof(TF_ShapeHandle));
    ctx->output_set = calloc((size_t)num_outputs + 1, sizeof(int));
  }
  if (ctx == NULL || ctx->inputs == NULL || ctx->outputs == NULL ||
      ctx->output_set == NULL) {
    free_shape_ctx(ctx);
    pg_set_status(status, TF_RESOURCE_EXHAUSTED, "out of host memory");
    return;
  }
  ctx->num_inputs = num_inputs;
  ctx->num_outputs = num_outputs;
  ctx->attrs = attrs;
  const int64_t* d = in_dims;
  for (int i = 0; i < num_inputs; ++i) {
    ctx->inputs[i].rank = in_ranks[i];
    for (int j = 0; j < in_ranks[i]; ++j) ctx->inputs[i].dims[j] = *d++;
  }
  fn(ctx, status);
  for (int i = 0; i < num_outputs && TF_GetCode(status) == TF_OK; ++i) {
    if (!ctx->output_set[i]) {
      pg_set_status(status, TF_INTERNAL,
                    "the shape function did not set output %d", i);
      break;
    }
    out_ranks[i] = ctx->outputs[i].rank;
    for (int j = 0; j < ctx->outputs[i].rank; ++j)
      out_dims[i * TF_MAX_DIMS + j] = ctx->outputs[i].dims[j];
  }
  free_shape_ctx(ctx);
}

int64_t TF_ShapeInferenceContextNumInputs(TF_ShapeInferenceContext* ctx) {
  return ctx == NULL ? 0 : ctx->num_inputs;
}

TF_ShapeHandle* TF_NewShapeHandle(void) {
  TF_ShapeHandle* h = calloc(1, sizeof(TF_ShapeHandle));
  if (h != NULL) h->rank = -1;
  return h;
}

TF_DimensionHandle* TF_NewDimensionHandle(void) {
  TF_DimensionHandle* h = calloc(1, sizeof(TF_DimensionHandle));
  if (h != NULL) h->value = -1;
  return h;
}

void TF_ShapeInferenceContextGetInput(TF_ShapeInferenceContext* ctx, int i,
                                      TF_ShapeHandle* handle,
                                      TF_Status* status) {
  if (ctx == NULL || handle == NULL) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "TF_ShapeInferenceContextGetInput: NULL argument");
    return;
  }
  if (i < 0 || i >= ctx->num_inputs) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "input index %d out of range (the op has %d inputs)", i,
                  ctx->num_inputs);
    return;
  }
  *handle = ctx->inputs[i];
  TF_SetStatus(status, TF_OK, "");
}

void TF_ShapeInferenceContextSetOutput(TF_ShapeInferenceContext* ctx, int i,
                                       TF_ShapeHandle* handle,
                                       TF_Status* status) {
  if (ctx == NULL || handle == NULL) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "TF_ShapeInferenceContextSetOutput: NULL argument");
    return;
  }
  if (i < 0 || i >= ctx->num_outputs) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "output index %d out of range (the op has %d outputs)", i,
                  ctx->num_outputs);
    return;
  }
  ctx->outputs[i] = *handle;
  ctx->output_set[i] = 1;
  TF_SetStatus(status, TF_OK, "");
}

void TF_ShapeInferenceContextSetUnknownShape(TF_ShapeInferenceContext* ctx,
                                             TF_Status* status) {
  if (ctx == NULL) {
    pg_set_status(status, TF_INVALID_ARGUMENT, "NULL context");
    return;
  }
  for (int i = 0; i < ctx->num_outputs; ++i) {
    ctx->outputs[i].rank = -1;
    ctx->output_set[i] = 1;
  }
  TF_SetStatus(status, TF_OK, "");
}

TF_ShapeHandle* TF_ShapeInferenceContextScalar(TF_ShapeInferenceContext* ctx) {
  (void)ctx;
  TF_ShapeHandle* h = TF_NewShapeHandle();
  if (h != NULL) h->rank = 0;
  return h;
}

TF_ShapeHandle* TF_ShapeInferenceContextVectorFromSize(
    TF_ShapeInferenceContext* ctx, size_t size) {
  (void)ctx;
  TF_ShapeHandle* h = TF_NewShapeHandle();
  if (h != NULL) {
    h->rank = 1;
    h->dims[0] = (int64_t)size;
  }
  return h;
}

void TF_ShapeInferenceContext_GetAttrType(TF_ShapeInferenceContext* ctx,
                                          const char* attr_name,
                                          TF_DataType* val, TF_Status* status) {
  if (ctx == NULL || attr_name == NULL || val == NULL) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "TF_ShapeInferenceContext_GetAttrType: NULL argument");
    return;
  }
  const pg_attr* a = pg_attrs_find(ctx->attrs, attr_name);
  if (a == NULL || a->kind != PG_ATTR_TYPE) {
    pg_set_status(status, a == NULL ? TF_NOT_FOUND : TF_INVALID_ARGUMENT,
                  "no type attribute '%s'", attr_name);
    return;
  }
  *val = (TF_DataType)a->i;
  TF_SetStatus(status, TF_OK, "");
}

int64_t TF_ShapeInferenceContextRank(TF_ShapeInferenceContext* ctx,
                                     TF_ShapeHandle* handle) {
  (void)ctx;
  return handle == NULL ? -1 : handle->rank;
}

int TF_ShapeInferenceContextRankKnown(TF_ShapeInferenceContext* ctx,
                                      TF_ShapeHandle* handle) {
  (void)ctx;
  return handle != NULL && handle->rank >= 0;
}

/* Shared body of the WithRank* checks: `cmp` is 0 (==), 1 (>=) or -1 (<=). */
static void with_rank(TF_ShapeHandle* handle, int64_t rank, int cmp,
                      TF_ShapeHandle* new_shape, TF_Status* status) {
  if (handle == NULL || new_shape == NULL) {
    pg_set_status(status, TF_INVALID_ARGUMENT, "NULL shape handle");
    return;
  }
  static const char* words[] = {"at most", "exactly", "at least"};
  int r = handle->rank;
  int ok = r < 0 || (cmp == 0 ? r == rank : cmp > 0 ? r >= rank : r <= rank);
  if (!ok) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "shape must be of rank %s %lld, but has rank %d",
                  words[cmp + 1], (long long)rank, r);
    return;
  }
  *new_shape = *handle;
  TF_SetStatus(status, TF_OK, "");
}

void TF_ShapeInferenceContextWithRank(TF_ShapeInferenceContext* ctx,
                                      TF_ShapeHandle* handle, int64_t rank,
                                      TF_ShapeHandle* new_shape,
                                      TF_Status* status) {
  (void)ctx;
  with_rank(handle, rank, 0, new_shape, status);
}

void TF_ShapeInferenceContextWithRankAtLeast(TF_ShapeInferenceContext* ctx,
                                             TF_ShapeHandle* handle,
                                             int64_t rank,
                                             TF_ShapeHandle* new_shape,
                                             TF_Status* status) {
  (void)ctx;
  with_rank(handle, rank, 1, new_shape, status);
}

void TF_ShapeInferenceContextWithRankAtMost(TF_ShapeInferenceContext* ctx,
                                            TF_ShapeHandle* handle,
                                            int64_t rank,
                                            TF_ShapeHandle* new_shape,
                                            TF_Status* status) {
  (void)ctx;
  with_rank(handle, rank, -1, new_shape, status);
}

void TF_ShapeInferenceContextDim(TF_ShapeInferenceContext* ctx,
                                 TF_ShapeHandle* shape_handle, int64_t i,
                                 TF_DimensionHandle* result) {
  (void)ctx;
  if (result == NULL) return;
  result->value = -1;
  if (shape_handle == NULL || shape_handle->rank < 0) return;
  if (i < 0) i += shape_handle->rank;
  if (i < 0 || i >= shape_handle->rank) return;
  result->value = shape_handle->dims[i];
}

void TF_ShapeInferenceContextSubshape(TF_ShapeInferenceContext* ctx,
                                      TF_ShapeHandle* shape_handle,
                                      int64_t start, int64_t end,
                                      TF_ShapeHandle* result,
                                      TF_Status* status) {
  (void)ctx;
  if (shape_handle == NULL || result == NULL) {
    pg_set_status(status, TF_INVALID_ARGUMENT, "NULL shape handle");
    return;
  }
  int r = shape_handle->rank;
  if (r < 0) {
    result->rank = -1;
    TF_SetStatus(status, TF_OK, "");
    return;
  }
  if (start < 0) start += r;
  if (end < 0) end += r;
  if (end > r) end = r;
  if (start < 0 || start > end) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "subshape [%lld, %lld) is out of range for rank %d",
                  (long long)start, (long long)end, r);
    return;
  }
  TF_ShapeHandle out;
  out.rank = (int)(end - start);
  for (int64_t j = start; j < end; ++j) out.dims[j - start] = shape_handle->dims[j];
  *result = out;
  TF_SetStatus(status, TF_OK, "");
}

void TF_ShapeInferenceContextConcatenateShapes(TF_ShapeInferenceContext* ctx,
                                               TF_ShapeHandle* first,
                                               TF_ShapeHandle* second,
                                               TF_ShapeHandle* result,
                                               TF_Status* status) {
  (void)ctx;
  if (first == NULL || second == NULL || result == NULL) {
    pg_set_status(status, TF_INVALID_ARGUMENT, "NULL shape handle");
    return;
  }
  if (first->rank < 0 || second->rank < 0) {
    result->rank = -1;
    TF_SetStatus(status, TF_OK, "");
    return;
  }
  if (first->rank + second->rank > TF_MAX_DIMS) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "concatenated shape has more than %d dimensions", TF_MAX_DIMS);
    return;
  }
  TF_ShapeHandle out;
  out.rank = first->rank + second->rank;
  for (int j = 0; j < first->rank; ++j) out.dims[j] = first->dims[j];
  for (int j = 0; j < second->rank; ++j) out.dims[first->rank + j] = second->dims[j];
  *result = out;
  TF_SetStatus(status, TF_OK, "");
}

int TF_DimensionHandleValueKnown(TF_DimensionHandle* dim_handle) {
  return dim_handle != NULL && dim_handle->value >= 0;
}

int64_t TF_DimensionHandleValue(TF_DimensionHandle* dim_handle) {
  return dim_handle == NULL ? -1 : dim_handle->value;
}

void TF_DeleteShapeHandle(TF_ShapeHandle* handle) { free(handle); }

void TF_DeleteDimensionHandle(TF_DimensionHandle* handle) { free(handle); }
