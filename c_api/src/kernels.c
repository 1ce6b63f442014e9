/* The kernel API: builders and registration, kernel construction (attribute
 * getters), and the kernel context used inside compute functions. */
#include <limits.h>

#include "internal.h"
#include "kernels_experimental.h"

struct TF_KernelBuilder {
  pg_kernel_def def;
};

struct TF_OpKernelConstruction {
  pg_kernel_def* def;
  pg_device* dev;
  const pg_attrs* attrs;
  TF_Status* status;
};

/* A kernel instance. Inputs and outputs are counted flattened: a list
 * argument ("values: N * T") takes N consecutive slots, as in TensorFlow's
 * kernel C API, so the arrays are sized when the instance is created.
 *
 * Ownership: an instance is reference-counted. pg_kernel_create returns it
 * with one reference (dispatch's instance cache holds that one, through the
 * Python object that releases it when collected); every graph-plan step that
 * runs it holds one more (pg_plan_add_kernel retains, pg_plan_free
 * releases). A launch needs no reference of its own: its caller holds one
 * for the call, and the last release frees the instance only once the work
 * queued on its device's stream so far has run (a host callback), so work an
 * earlier launch enqueued never outlives it. Evicting an instance from the
 * cache, or the cache replacing a duplicate another thread built, only drops
 * the cache's reference. */
struct pg_kernel {
  atomic_int refs;
  pg_kernel_def* def;
  pg_device* dev;
  void* state;
  int num_inputs, num_outputs;
  char** input_names;          /* num_inputs names (a list repeats its name) */
  unsigned char* in_host;      /* num_inputs flags */
  unsigned char* out_host;     /* num_outputs flags */
  TF_DataType* out_types;      /* num_outputs dtypes */
};

struct TF_OpKernelContext {
  pg_kernel* k;
  TF_Tensor* const* inputs;
  TF_Tensor** outputs;
  TF_Status* status;
  int64_t step;
  pg_buffer* const* preset; /* planned output buffers (graph plans) or NULL */
  uint64_t donated;         /* inputs the caller gave up (bit i: input i) */
};

/* The plugin whose TF_InitKernel runs on this thread (-1: none). Plugins
 * may register kernels and ops only from there: registration is closed
 * when TF_InitKernel returns, and other threads never had it open. */
static _Thread_local int current_plugin_id = -1;
static atomic_llong step_counter;

int pg_current_plugin(void) { return current_plugin_id; }

static TF_StringView view(const char* s) {
  TF_StringView v = {s, s ? strlen(s) : 0};
  return v;
}

/*** Registration ***/

TF_KernelBuilder* TF_NewKernelBuilder(
    const char* op_name, const char* device_name,
    void* (*create_func)(TF_OpKernelConstruction*),
    void (*compute_func)(void*, TF_OpKernelContext*),
    void (*delete_func)(void*)) {
  TF_KernelBuilder* b = calloc(1, sizeof(TF_KernelBuilder));
  if (b == NULL) return NULL;
  /* A name that does not fit is kept cut, flagged, and refused at
   * registration with a message saying which one. */
  if (pg_copy_str(b->def.op_name, sizeof b->def.op_name, op_name))
    b->def.name_too_long |= PG_LONG_OP_NAME;
  if (pg_copy_str(b->def.device_type, sizeof b->def.device_type, device_name))
    b->def.name_too_long |= PG_LONG_DEVICE_TYPE;
  /* A NULL name is kept as "": registration then rejects it as an unknown op
   * or an invalid device type, with a message naming the kernel. */
  b->def.create_func = create_func;
  b->def.compute_func = compute_func;
  b->def.delete_func = delete_func;
  b->def.plugin_id = current_plugin_id;
  return b;
}

void TF_KernelBuilder_TypeConstraint(TF_KernelBuilder* b, const char* attr_name,
                                     const TF_DataType type,
                                     TF_Status* status) {
  if (b == NULL || attr_name == NULL) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "TF_KernelBuilder_TypeConstraint: builder and attr_name must "
                  "not be NULL");
    return;
  }
  pg_kernel_def* d = &b->def;
  if (d->num_constraints == PG_MAX_CONSTRAINTS) {
    d->overflow = 1;
    pg_set_status(status, TF_RESOURCE_EXHAUSTED,
                  "kernel %s: more than %d type constraints", d->op_name,
                  PG_MAX_CONSTRAINTS);
    return;
  }
  if (pg_copy_str(d->constraint_attr[d->num_constraints], 64, attr_name)) {
    d->name_too_long |= PG_LONG_ATTR_NAME;
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "kernel %s: type constraint attribute name is longer than "
                  "63 characters", d->op_name);
    return;
  }
  d->constraint_type[d->num_constraints] = type;
  d->num_constraints++;
  TF_SetStatus(status, TF_OK, "");
}

void TF_KernelBuilder_HostMemory(TF_KernelBuilder* b, const char* arg_name) {
  if (b == NULL || arg_name == NULL) return;
  if (b->def.num_host_args == PG_MAX_HOST_ARGS) {
    b->def.overflow = 1;
    return;
  }
  if (pg_copy_str(b->def.host_args[b->def.num_host_args++], 64, arg_name))
    b->def.name_too_long |= PG_LONG_ARG_NAME;
}

void TF_KernelBuilder_Priority(TF_KernelBuilder* b, int32_t priority_number) {
  if (b != NULL) b->def.priority = priority_number;
}

void TF_KernelBuilder_Label(TF_KernelBuilder* b, const char* label) {
  if (b != NULL && pg_copy_str(b->def.label, sizeof b->def.label, label))
    b->def.name_too_long |= PG_LONG_LABEL;
}

static int put_field(char* out, int cap, int at, const char* s, size_t max) {
  const char* end = memchr(s, '\0', max);
  size_t n = end != NULL ? (size_t)(end - s) : max;
  if (at < 0 || (size_t)at + n + 1 > (size_t)cap) return -1;
  memcpy(out + at, s, n);
  out[at + n] = '\0';
  return at + (int)n + 1;
}

_Static_assert(PG_KERNEL_DEF_NUMBERS == 8 + PG_MAX_CONSTRAINTS,
               "PG_KERNEL_DEF_NUMBERS: 8 fields and one type per constraint");

int pg_kernel_def_describe(const pg_kernel_def* d, char* names, int cap,
                           int* numbers) {
  if (d == NULL || names == NULL || numbers == NULL) return -1;
  int nc = d->num_constraints, nh = d->num_host_args;
  if (nc < 0 || nc > PG_MAX_CONSTRAINTS) nc = PG_MAX_CONSTRAINTS;
  if (nh < 0 || nh > PG_MAX_HOST_ARGS) nh = PG_MAX_HOST_ARGS;
  int at = put_field(names, cap, 0, d->op_name, sizeof d->op_name);
  at = put_field(names, cap, at, d->device_type, sizeof d->device_type);
  at = put_field(names, cap, at, d->label, sizeof d->label);
  for (int i = 0; i < nc; ++i)
    at = put_field(names, cap, at, d->constraint_attr[i],
                   sizeof d->constraint_attr[i]);
  for (int i = 0; i < nh; ++i)
    at = put_field(names, cap, at, d->host_args[i], sizeof d->host_args[i]);
  int head[8] = {d->plugin_id, d->outside_init, d->name_too_long, d->overflow,
                 d->compute_func == NULL, d->priority, nc, nh};
  memcpy(numbers, head, sizeof head);
  for (int i = 0; i < PG_MAX_CONSTRAINTS; ++i)
    numbers[8 + i] = i < nc ? (int)d->constraint_type[i] : 0;
  return at;
}

void TF_RegisterKernelBuilder(const char* kernel_name, TF_KernelBuilder* b,
                              TF_Status* status) {
  (void)kernel_name;
  TF_SetStatus(status, TF_OK, "");
  if (b == NULL) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "TF_RegisterKernelBuilder: builder is NULL");
    return;
  }
  TF_Status* local = status != NULL ? status : TF_NewStatus();
  if (local == NULL) {
    free(b);
    return;
  }
  /* Python validates against the op registry (including a NULL compute
   * function), reports a rejection through `status` and the plugin's record,
   * and keeps the definition when it accepts it. Outside TF_InitKernel it
   * refuses and logs. */
  b->def.outside_init = current_plugin_id < 0;
  int kept = pg_hooks.register_kernel(&b->def, local);
  if (kept && b->def.compute_func == NULL) {
    kept = 0; /* never keep a kernel that cannot run */
    pg_set_status(local, TF_INVALID_ARGUMENT,
                  "kernel for op '%s' on %s has no compute function",
                  b->def.op_name, b->def.device_type);
  }
  if (!kept) free(b);
  if (local != status) TF_DeleteStatus(local);
}

void TF_RegisterKernelBuilderWithKernelDef(const char* serialized_kernel_def,
                                           const char* name,
                                           TF_KernelBuilder* builder,
                                           TF_Status* status) {
  (void)serialized_kernel_def;
  (void)name;
  free(builder);
  pg_set_status(status, TF_UNIMPLEMENTED,
                "TF_RegisterKernelBuilderWithKernelDef is not supported: use "
                "TF_RegisterKernelBuilder with type constraints");
}

void TF_DeleteKernelBuilder(TF_KernelBuilder* builder) { free(builder); }

void pg_call_init_kernel(void* tf_init_kernel, int plugin_id) {
  int saved = current_plugin_id;
  current_plugin_id = plugin_id;
  ((void (*)(void))tf_init_kernel)();
  current_plugin_id = saved;
}

/*** Construction ***/

void TF_OpKernelConstruction_Failure(TF_OpKernelConstruction* ctx,
                                     TF_Status* status) {
  if (ctx == NULL || status == NULL || TF_GetCode(status) == TF_OK) return;
  TF_SetStatus(ctx->status, TF_GetCode(status), TF_Message(status));
}

TF_StringView TF_OpKernelConstruction_GetName(TF_OpKernelConstruction* ctx) {
  return view(ctx != NULL ? ctx->def->op_name : "");
}

TF_Bool TF_OpKernelConstruction_HasAttr(TF_OpKernelConstruction* ctx,
                                        const char* attr_name,
                                        TF_Status* status) {
  TF_SetStatus(status, TF_OK, "");
  if (ctx == NULL || attr_name == NULL) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "TF_OpKernelConstruction_HasAttr: NULL argument");
    return 0;
  }
  return pg_attrs_find(ctx->attrs, attr_name) != NULL;
}

static const char* kind_name(pg_attr_kind k) {
  static const char* names[] = {"int", "float", "bool", "type", "string",
                                "list(int)", "list(float)", "list(bool)",
                                "list(type)", "list(string)"};
  return names[k];
}

/* Finds attribute `name` of kind `kind`; sets `status` and returns NULL if it
 * is missing or of another kind. */
static const pg_attr* get_attr(TF_OpKernelConstruction* ctx, const char* name,
                               pg_attr_kind kind, TF_Status* status) {
  if (ctx == NULL || name == NULL) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "attribute getter called with a NULL context or name");
    return NULL;
  }
  const pg_attr* a = pg_attrs_find(ctx->attrs, name);
  if (a == NULL) {
    pg_set_status(status, TF_NOT_FOUND, "op '%s' has no attribute '%s'",
                  ctx->def->op_name, name);
    return NULL;
  }
  if (a->kind != kind) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "attribute '%s' of op '%s' is a %s, not a %s", name,
                  ctx->def->op_name, kind_name(a->kind), kind_name(kind));
    return NULL;
  }
  TF_SetStatus(status, TF_OK, "");
  return a;
}

/* get_attr for scalar getters: also rejects a NULL output pointer. */
static const pg_attr* get_scalar(TF_OpKernelConstruction* ctx,
                                 const char* name, pg_attr_kind kind,
                                 const void* val, TF_Status* status) {
  const pg_attr* a = get_attr(ctx, name, kind, status);
  if (a != NULL && val == NULL) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "attribute '%s': the output pointer is NULL", name);
    return NULL;
  }
  return a;
}

/* get_attr for list getters: also checks max_vals and the output array. */
static const pg_attr* get_list(TF_OpKernelConstruction* ctx, const char* name,
                               pg_attr_kind kind, const void* vals,
                               int max_vals, TF_Status* status) {
  const pg_attr* a = get_attr(ctx, name, kind, status);
  if (a == NULL) return NULL;
  if (max_vals < 0) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "attribute '%s': max_vals is negative (%d)", name, max_vals);
    return NULL;
  }
  if (vals == NULL && max_vals > 0) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "attribute '%s': the output array is NULL", name);
    return NULL;
  }
  return a;
}

void TF_OpKernelConstruction_GetAttrSize(TF_OpKernelConstruction* ctx,
                                         const char* attr_name,
                                         int32_t* list_size,
                                         int32_t* total_size,
                                         TF_Status* status) {
  if (ctx == NULL || attr_name == NULL || list_size == NULL ||
      total_size == NULL) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "TF_OpKernelConstruction_GetAttrSize: NULL argument");
    return;
  }
  const pg_attr* a = pg_attrs_find(ctx->attrs, attr_name);
  if (a == NULL) {
    pg_set_status(status, TF_NOT_FOUND, "op '%s' has no attribute '%s'",
                  ctx->def->op_name, attr_name);
    return;
  }
  TF_SetStatus(status, TF_OK, "");
  *list_size = -1;
  *total_size = -1;
  switch (a->kind) {
    case PG_ATTR_STRING:
      *total_size = (int32_t)a->str_len;
      break;
    case PG_ATTR_STRING_LIST: {
      size_t total = 0;
      for (int i = 0; i < a->n; ++i) total += a->str_lens[i];
      *list_size = a->n;
      *total_size = (int32_t)total;
      break;
    }
    case PG_ATTR_INT_LIST: case PG_ATTR_FLOAT_LIST: case PG_ATTR_BOOL_LIST:
    case PG_ATTR_TYPE_LIST:
      *list_size = a->n;
      break;
    default:
      break;
  }
}

void TF_OpKernelConstruction_GetAttrType(TF_OpKernelConstruction* ctx,
                                         const char* attr_name,
                                         TF_DataType* val, TF_Status* status) {
  const pg_attr* a = get_scalar(ctx, attr_name, PG_ATTR_TYPE, val, status);
  if (a != NULL) *val = (TF_DataType)a->i;
}

void TF_OpKernelConstruction_GetAttrInt32(TF_OpKernelConstruction* ctx,
                                          const char* attr_name, int32_t* val,
                                          TF_Status* status) {
  const pg_attr* a = get_scalar(ctx, attr_name, PG_ATTR_INT, val, status);
  if (a == NULL) return;
  if (a->i < INT32_MIN || a->i > INT32_MAX) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "attribute '%s' = %lld does not fit in int32", attr_name,
                  (long long)a->i);
    return;
  }
  *val = (int32_t)a->i;
}

void TF_OpKernelConstruction_GetAttrInt64(TF_OpKernelConstruction* ctx,
                                          const char* attr_name, int64_t* val,
                                          TF_Status* status) {
  const pg_attr* a = get_scalar(ctx, attr_name, PG_ATTR_INT, val, status);
  if (a != NULL) *val = a->i;
}

void TF_OpKernelConstruction_GetAttrFloat(TF_OpKernelConstruction* ctx,
                                          const char* attr_name, float* val,
                                          TF_Status* status) {
  const pg_attr* a = get_scalar(ctx, attr_name, PG_ATTR_FLOAT, val, status);
  if (a != NULL) *val = a->f;
}

void TF_OpKernelConstruction_GetAttrBool(TF_OpKernelConstruction* ctx,
                                         const char* attr_name, TF_Bool* val,
                                         TF_Status* status) {
  const pg_attr* a = get_scalar(ctx, attr_name, PG_ATTR_BOOL, val, status);
  if (a != NULL) *val = (TF_Bool)a->i;
}

void TF_OpKernelConstruction_GetAttrString(TF_OpKernelConstruction* ctx,
                                           const char* attr_name, char* val,
                                           size_t max_length,
                                           TF_Status* status) {
  const pg_attr* a = get_attr(ctx, attr_name, PG_ATTR_STRING, status);
  if (a == NULL) return;
  if (val == NULL || max_length < a->str_len) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "attribute '%s' needs %zu bytes, max_length is %zu",
                  attr_name, a->str_len, max_length);
    return;
  }
  memcpy(val, a->str, a->str_len);
}

void TF_OpKernelConstruction_GetAttrTensor(TF_OpKernelConstruction* ctx,
                                           const char* attr_name,
                                           TF_Tensor** val, TF_Status* status) {
  (void)val;
  if (ctx == NULL || attr_name == NULL) {
    pg_set_status(status, TF_INVALID_ARGUMENT, "NULL argument");
    return;
  }
  pg_set_status(status, TF_NOT_FOUND,
                "op '%s' has no tensor attribute '%s' (tensor attributes are "
                "not used by pluggable ops)", ctx->def->op_name, attr_name);
}

/* Copies a numeric list attribute into `vals`, converting each element. */
#define LIST_GETTER(SUFFIX, CTYPE, KIND, SRC_TYPE)                           \
  void TF_OpKernelConstruction_GetAttr##SUFFIX##List(                        \
      TF_OpKernelConstruction* ctx, const char* attr_name, CTYPE* vals,      \
      int max_vals, TF_Status* status) {                                     \
    const pg_attr* a =                                                       \
        get_list(ctx, attr_name, KIND, vals, max_vals, status);              \
    if (a == NULL) return;                                                   \
    const SRC_TYPE* src = (const SRC_TYPE*)a->list;                          \
    int n = a->n < max_vals ? a->n : max_vals;                               \
    for (int i = 0; i < n; ++i) vals[i] = (CTYPE)src[i];                     \
  }

LIST_GETTER(Type, TF_DataType, PG_ATTR_TYPE_LIST, TF_DataType)
LIST_GETTER(Int64, int64_t, PG_ATTR_INT_LIST, int64_t)
LIST_GETTER(Float, float, PG_ATTR_FLOAT_LIST, float)
LIST_GETTER(Bool, TF_Bool, PG_ATTR_BOOL_LIST, int)

void TF_OpKernelConstruction_GetAttrTensorShape(TF_OpKernelConstruction* ctx,
                                                const char* attr_name,
                                                int64_t* dims, size_t num_dims,
                                                TF_Status* status) {
  int max = num_dims > INT_MAX ? INT_MAX : (int)num_dims;
  TF_OpKernelConstruction_GetAttrInt64List(ctx, attr_name, dims, max, status);
}

void TF_OpKernelConstruction_GetAttrInt32List(TF_OpKernelConstruction* ctx,
                                              const char* attr_name,
                                              int32_t* vals, int max_vals,
                                              TF_Status* status) {
  const pg_attr* a =
      get_list(ctx, attr_name, PG_ATTR_INT_LIST, vals, max_vals, status);
  if (a == NULL) return;
  const int64_t* src = a->list;
  int n = a->n < max_vals ? a->n : max_vals;
  for (int i = 0; i < n; ++i) {
    if (src[i] < INT32_MIN || src[i] > INT32_MAX) {
      pg_set_status(status, TF_INVALID_ARGUMENT,
                    "attribute '%s'[%d] = %lld does not fit in int32",
                    attr_name, i, (long long)src[i]);
      return;
    }
    vals[i] = (int32_t)src[i];
  }
}

void TF_OpKernelConstruction_GetAttrStringList(
    TF_OpKernelConstruction* ctx, const char* attr_name, char** vals,
    size_t* lengths, int max_values, void* storage, size_t storage_size,
    TF_Status* status) {
  const pg_attr* a = get_list(ctx, attr_name, PG_ATTR_STRING_LIST, vals,
                              max_values, status);
  if (a == NULL) return;
  int n = a->n < max_values ? a->n : max_values;
  if (n > 0 && (vals == NULL || lengths == NULL || storage == NULL)) {
    pg_set_status(status, TF_INVALID_ARGUMENT, "NULL output array");
    return;
  }
  char* out = storage;
  size_t used = 0;
  for (int i = 0; i < n; ++i) {
    if (used + a->str_lens[i] > storage_size) {
      pg_set_status(status, TF_INVALID_ARGUMENT,
                    "attribute '%s': storage_size %zu is too small", attr_name,
                    storage_size);
      return;
    }
    memcpy(out + used, a->strs[i], a->str_lens[i]);
    vals[i] = out + used;
    lengths[i] = a->str_lens[i];
    used += a->str_lens[i];
  }
}

void TF_OpKernelConstruction_GetAttrTensorList(TF_OpKernelConstruction* ctx,
                                               const char* attr_name,
                                               TF_Tensor** vals, int max_values,
                                               TF_Status* status) {
  (void)vals;
  (void)max_values;
  TF_OpKernelConstruction_GetAttrTensor(ctx, attr_name, NULL, status);
}

/*** Kernel instances ***/

pg_kernel* pg_kernel_create(pg_kernel_def* def, pg_device* dev,
                            pg_attrs* attrs, int num_inputs,
                            const char* const* input_names,
                            const unsigned char* in_host, int num_outputs,
                            const TF_DataType* out_types,
                            const unsigned char* out_host, TF_Status* status) {
  TF_SetStatus(status, TF_OK, "");
  if (num_inputs < 0 || num_outputs < 0) {
    pg_set_status(status, TF_INVALID_ARGUMENT, "negative number of op arguments");
    return NULL;
  }
  pg_kernel* k = calloc(1, sizeof(pg_kernel));
  if (k != NULL) {
    /* one byte more than needed, so that no calloc asks for 0 bytes */
    k->input_names = calloc((size_t)num_inputs + 1, sizeof(char*));
    k->in_host = calloc((size_t)num_inputs + 1, 1);
    k->out_host = calloc((size_t)num_outputs + 1, 1);
    k->out_types = calloc((size_t)num_outputs + 1, sizeof(TF_DataType));
  }
  if (k == NULL || k->input_names == NULL || k->in_host == NULL ||
      k->out_host == NULL || k->out_types == NULL) {
    pg_kernel_free(k);
    pg_set_status(status, TF_RESOURCE_EXHAUSTED, "out of host memory");
    return NULL;
  }
  atomic_init(&k->refs, 1);
  k->def = def;
  k->dev = dev;
  k->num_inputs = num_inputs;
  k->num_outputs = num_outputs;
  for (int i = 0; i < num_inputs; ++i) {
    const char* n = input_names != NULL ? input_names[i] : "";
    k->input_names[i] = malloc(strlen(n) + 1);
    if (k->input_names[i] != NULL) strcpy(k->input_names[i], n);
    k->in_host[i] = in_host != NULL ? in_host[i] : 0;
  }
  for (int i = 0; i < num_outputs; ++i) {
    k->out_types[i] = out_types[i];
    k->out_host[i] = out_host != NULL ? out_host[i] : 0;
  }
  if (def->create_func != NULL) {
    TF_OpKernelConstruction c = {def, dev, attrs, status};
    k->state = def->create_func(&c);
    if (TF_GetCode(status) != TF_OK) {
      if (k->state != NULL && def->delete_func != NULL)
        def->delete_func(k->state);
      k->state = NULL;
      pg_kernel_free(k);
      return NULL;
    }
  }
  return k;
}

void pg_kernel_free(pg_kernel* k) {
  if (k == NULL) return;
  if (k->state != NULL && k->def->delete_func != NULL)
    k->def->delete_func(k->state);
  if (k->input_names != NULL)
    for (int i = 0; i < k->num_inputs; ++i) free(k->input_names[i]);
  free(k->input_names);
  free(k->in_host);
  free(k->out_host);
  free(k->out_types);
  free(k);
}

/* Checks the outputs against the shapes of `expect` (see pg_core.h). */
static int check_shapes(pg_kernel* k, TF_Tensor** outputs,
                        const int64_t* expect, TF_Status* status) {
  for (int i = 0; i < k->num_outputs; ++i) {
    int64_t rank = *expect++;
    if (rank < 0) continue;
    const TF_Tensor* t = outputs[i];
    int same = t->num_dims == rank;
    for (int j = 0; same && j < rank; ++j) same = t->dims[j] == expect[j];
    if (!same) {
      char got[256] = "[", want[256] = "[";
      for (int j = 0; j < t->num_dims; ++j)
        snprintf(got + strlen(got), sizeof got - strlen(got), j ? ", %lld" : "%lld",
                 (long long)t->dims[j]);
      for (int j = 0; j < rank; ++j)
        snprintf(want + strlen(want), sizeof want - strlen(want), j ? ", %lld" : "%lld",
                 (long long)expect[j]);
      strncat(got, "]", sizeof got - strlen(got) - 1);
      strncat(want, "]", sizeof want - strlen(want) - 1);
      pg_set_status(status, TF_INTERNAL,
                    "the kernel for %s on %s produced output %d of shape %s, "
                    "but the op's shape function gives %s: the plugin's "
                    "kernel is wrong (check it with `python -m pluggable "
                    "check`)", k->def->op_name, k->dev->name, i, got, want);
      return 0;
    }
    expect += rank;
  }
  return 1;
}

TF_Code pg_kernel_run(pg_kernel* k, TF_Tensor* const* inputs,
                      TF_Tensor** outputs, const int64_t* expect,
                      TF_Status* status) {
  return pg_kernel_run_planned(k, inputs, outputs, expect, NULL, status);
}

TF_Tensor* pg_kernel_run1(pg_kernel* k, TF_Tensor* const* inputs,
                          const int64_t* expect, TF_Status* status) {
  return pg_kernel_run1_donated(k, inputs, expect, 0, status);
}

/* One op: the kernel's work, then (unless `shares_event`) an event that
 * marks its end, and its state in the device's log. Outside a span
 * (`in_span` 0) under the launch lock taken here, with maintenance after;
 * in a span the caller holds the lock and maintains (see
 * pg_kernel_run_in_span). */
static TF_Code run_op(pg_kernel* k, TF_Tensor* const* inputs, TF_Tensor** outputs,
                      const int64_t* expect, pg_buffer* const* preset, uint64_t donated,
                      int in_span, int shares_event, int64_t* logged_out,
                      TF_Status* status) {
  TF_SetStatus(status, TF_OK, "");
  if (logged_out != NULL) *logged_out = -1;
  for (int i = 0; i < k->num_outputs; ++i) outputs[i] = NULL;
  if (!pg_op_inputs_ok(inputs, k->num_inputs, status)) return TF_GetCode(status);
  pg_device* dev = k->dev;
  /* The event that will mark the end of the op's work (none if the plugin
   * cannot make one: a synchronisation then settles the op; none either
   * when the op shares the next one). */
  pg_event* ev = shares_event ? NULL : pg_event_acquire(dev, NULL);
  TF_OpKernelContext ctx = {k, inputs, outputs, status,
                            atomic_fetch_add(&step_counter, 1) + 1, preset, donated};
  __atomic_fetch_add(&k->def->calls, 1, __ATOMIC_RELAXED);
  pg_capture_note_inputs(dev, inputs, k->num_inputs);
  if (!in_span) pg_op_launch_lock(dev);
  k->def->compute_func(k->state, &ctx);
  ev = pg_event_record_end(dev, ev); /* even after a failure: work may have been enqueued */
  if (TF_GetCode(status) == TF_OK) {
    for (int i = 0; i < k->num_outputs; ++i) {
      if (outputs[i] == NULL) {
        pg_set_status(status, TF_INTERNAL,
                      "the kernel returned without setting output %d; a "
                      "kernel must call TF_AllocateOutput or TF_SetOutput for "
                      "every output", i);
        break;
      }
    }
  }
  if (TF_GetCode(status) == TF_OK && expect != NULL)
    check_shapes(k, outputs, expect, status);
  /* Logged before the launch lock is released: a synchronisation that
   * drains this op's work then finds the op (see opstate.c). */
  int64_t logged = -1;
  if (TF_GetCode(status) == TF_OK) {
    logged = shares_event ? pg_op_launched_in_span(dev, k->def->op_name, inputs,
                                                   k->num_inputs, outputs, k->num_outputs)
                          : pg_op_launched(dev, k->def->op_name, inputs, k->num_inputs,
                                           ev, outputs, k->num_outputs);
  }
  if (!in_span) pg_op_launch_unlock(dev);
  if (TF_GetCode(status) != TF_OK) {
    /* Work the failed launch enqueued ends at the event: wait for it before
     * the event goes back to the pool. */
    if (ev != NULL) {
      TF_Status* st = TF_NewStatus();
      dev->se->block_host_for_event(dev->device, ev->handle, st);
      TF_DeleteStatus(st);
      pg_event_release(dev, ev);
    }
    for (int i = 0; i < k->num_outputs; ++i) {
      TF_DeleteTensor(outputs[i]);
      outputs[i] = NULL;
    }
    return TF_GetCode(status);
  }
  if (logged_out != NULL) *logged_out = logged;
  if (!in_span) pg_op_maintain(dev, logged);
  return TF_OK;
}

TF_Code pg_kernel_run_planned(pg_kernel* k, TF_Tensor* const* inputs,
                              TF_Tensor** outputs, const int64_t* expect,
                              pg_buffer* const* preset, TF_Status* status) {
  return run_op(k, inputs, outputs, expect, preset, 0, 0, 0, NULL, status);
}

TF_Tensor* pg_kernel_run1_donated(pg_kernel* k, TF_Tensor* const* inputs,
                                  const int64_t* expect, uint64_t donated,
                                  TF_Status* status) {
  if (k->num_outputs != 1) {
    pg_set_status(status, TF_INVALID_ARGUMENT, "pg_kernel_run1: the kernel of %s has "
                  "%d outputs, not 1", k->def->op_name, k->num_outputs);
    return NULL;
  }
  TF_Tensor* out = NULL;
  if (run_op(k, inputs, &out, expect, NULL, donated, 0, 0, NULL, status) != TF_OK) return NULL;
  return out;
}

pg_device* pg_kernel_device(const pg_kernel* k) { return k->dev; }
int pg_kernel_num_inputs(const pg_kernel* k) { return k->num_inputs; }
const char* pg_kernel_op_name(const pg_kernel* k) { return k->def->op_name; }

TF_Code pg_kernel_run_in_span(pg_kernel* k, TF_Tensor* const* inputs,
                              TF_Tensor** outputs, pg_buffer* const* preset,
                              int shares_event, int64_t* logged, TF_Status* status) {
  return run_op(k, inputs, outputs, NULL, preset, 0, 1, shares_event, logged, status);
}

static void free_kernel(void* k) { pg_kernel_free(k); }

void pg_kernel_retain(pg_kernel* k) {
  if (k != NULL) atomic_fetch_add_explicit(&k->refs, 1, memory_order_relaxed);
}

void pg_kernel_release(pg_kernel* k) {
  if (k == NULL) return;
  /* The last reference frees; the others only count down (acq_rel: what
   * the other owners wrote to the instance is seen by the one that frees). */
  if (atomic_fetch_sub_explicit(&k->refs, 1, memory_order_acq_rel) != 1) return;
  /* Queued work may still use the kernel's state. */
  if (!pg_host_callback_once(k->dev, k->dev->stream, free_kernel, k)) {
    TF_Status* st = TF_NewStatus();
    k->dev->se->synchronize_all_activity(k->dev->device, st);
    TF_DeleteStatus(st);
    pg_kernel_free(k);
  }
}

/*** Context ***/

/* Validates ctx and an index; sets `status` and returns 0 when invalid. */
static int check_index(TF_OpKernelContext* ctx, int i, int n, const char* fn,
                       TF_Status* status) {
  if (ctx == NULL) {
    pg_set_status(status, TF_INVALID_ARGUMENT, "%s: context is NULL", fn);
    return 0;
  }
  if (i < 0 || i >= n) {
    pg_set_status(status, TF_OUT_OF_RANGE,
                  "%s: index %d is out of range for op '%s' (valid: 0..%d)", fn,
                  i, ctx->k->def->op_name, n - 1);
    return 0;
  }
  return 1;
}

SP_Stream TF_GetStream(TF_OpKernelContext* ctx, TF_Status* status) {
  if (ctx == NULL) {
    pg_set_status(status, TF_INVALID_ARGUMENT, "TF_GetStream: NULL context");
    return NULL;
  }
  TF_SetStatus(status, TF_OK, "");
  const SP_Stream* capturing = pg_capture_stream(ctx->k->dev);
  return capturing != NULL ? *capturing : ctx->k->dev->stream;
}

int TF_NumInputs(TF_OpKernelContext* ctx) {
  return ctx == NULL ? 0 : ctx->k->num_inputs;
}

int TF_NumOutputs(TF_OpKernelContext* ctx) {
  return ctx == NULL ? 0 : ctx->k->num_outputs;
}

void TF_GetInput(TF_OpKernelContext* ctx, int i, TF_Tensor** tensor,
                 TF_Status* status) {
  if (tensor == NULL) {
    pg_set_status(status, TF_INVALID_ARGUMENT, "TF_GetInput: tensor is NULL");
    return;
  }
  *tensor = NULL;
  if (!check_index(ctx, i, TF_NumInputs(ctx), "TF_GetInput", status)) return;
  *tensor = pg_tensor_ref(ctx->inputs[i]);
  TF_SetStatus(status, TF_OK, "");
}

TF_DataType TF_InputDatatype(TF_OpKernelContext* ctx, int index) {
  if (ctx == NULL || index < 0 || index >= ctx->k->num_inputs) return 0;
  return ctx->inputs[index]->dtype;
}

/* Checks that `t` may become output `i`: right dtype, right memory. */
static int check_output(TF_OpKernelContext* ctx, int i, const TF_Tensor* t,
                        TF_Status* status) {
  pg_kernel* k = ctx->k;
  if (k->out_types[i] != 0 && t->dtype != k->out_types[i]) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "output %d of op '%s' must have dtype %d, got %d", i,
                  k->def->op_name, (int)k->out_types[i], (int)t->dtype);
    return 0;
  }
  pg_device* where = pg_tensor_device(t);
  if (k->out_host[i] ? where != NULL : where != k->dev) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "output %d of op '%s' must be in %s memory", i,
                  k->def->op_name, k->out_host[i] ? "host" : k->dev->name);
    return 0;
  }
  return 1;
}

void TF_SetOutput(TF_OpKernelContext* ctx, int i, const TF_Tensor* tensor,
                  TF_Status* status) {
  if (!check_index(ctx, i, TF_NumOutputs(ctx), "TF_SetOutput", status)) return;
  if (tensor == NULL) {
    pg_set_status(status, TF_INVALID_ARGUMENT, "TF_SetOutput: tensor is NULL");
    return;
  }
  if (!check_output(ctx, i, tensor, status)) return;
  TF_DeleteTensor(ctx->outputs[i]);
  ctx->outputs[i] = pg_tensor_ref(tensor);
  TF_SetStatus(status, TF_OK, "");
}

TF_Tensor* TF_GetMutableOutput(TF_OpKernelContext* ctx, int i,
                               TF_Status* status) {
  if (!check_index(ctx, i, TF_NumOutputs(ctx), "TF_GetMutableOutput", status))
    return NULL;
  TF_SetStatus(status, TF_OK, "");
  return pg_tensor_ref(ctx->outputs[i]);
}

TF_DataType TF_ExpectedOutputDataType(TF_OpKernelContext* ctx, int i) {
  if (ctx == NULL || i < 0 || i >= ctx->k->num_outputs) return 0;
  return ctx->k->out_types[i];
}

TF_Bool TF_IsHostMemoryInput(TF_OpKernelContext* ctx, int i,
                             TF_Status* status) {
  if (!check_index(ctx, i, TF_NumInputs(ctx), "TF_IsHostMemoryInput", status))
    return 0;
  TF_SetStatus(status, TF_OK, "");
  return ctx->k->in_host[i];
}

TF_Bool TF_IsHostMemoryOutput(TF_OpKernelContext* ctx, int i,
                              TF_Status* status) {
  if (!check_index(ctx, i, TF_NumOutputs(ctx), "TF_IsHostMemoryOutput", status))
    return 0;
  TF_SetStatus(status, TF_OK, "");
  return ctx->k->out_host[i];
}

void TF_OpKernelContext_Failure(TF_OpKernelContext* ctx, TF_Status* status) {
  if (ctx == NULL || status == NULL || TF_GetCode(status) == TF_OK) return;
  if (TF_GetCode(ctx->status) != TF_OK) return; /* keep the first failure */
  TF_SetStatus(ctx->status, TF_GetCode(status), TF_Message(status));
}

int64_t TF_StepId(TF_OpKernelContext* ctx) {
  return ctx == NULL ? 0 : ctx->step;
}

TF_StringView TF_GetOpKernelName(TF_OpKernelContext* ctx) {
  return view(ctx != NULL ? ctx->k->def->op_name : "");
}

TF_StringView TF_GetOpKernelRequestedInput(TF_OpKernelContext* ctx,
                                           size_t index) {
  if (ctx == NULL || index >= (size_t)ctx->k->num_inputs) return view("");
  return view(ctx->k->input_names[index]);
}

pg_device* pg_context_device(TF_OpKernelContext* ctx) {
  return ctx == NULL ? NULL : ctx->k->dev;
}

int TF_GetDeviceId(TF_OpKernelContext* ctx) {
  return ctx == NULL ? -1 : ctx->k->dev->ordinal;
}

TF_StringView TF_GetDeviceName(TF_OpKernelContext* ctx) {
  return view(ctx != NULL ? ctx->k->dev->name : "");
}

/* Frees a host scratch buffer once the stream has passed the work that was
 * enqueued before the buffer was released. */
static void deferred_host_free(void* data, size_t len, void* arg) {
  (void)len;
  pg_device* dev = arg;
  /* Memory a captured kernel used lives as long as the graph. */
  if (pg_capture_keep_host(dev, data)) return;
  if (!pg_host_callback_once(dev, dev->stream, pg_host_free, data)) {
    TF_Status* st = TF_NewStatus();
    dev->se->synchronize_all_activity(dev->device, st);
    TF_DeleteStatus(st);
    pg_host_free(data);
  }
}

/* Allocates a buffer on the kernel's device, or on the host. Host scratch
 * memory (`temp`) is released in stream order like device memory. */
static TF_Tensor* alloc(TF_OpKernelContext* ctx, int on_host, int temp,
                        TF_DataType dtype, const int64_t* dims, int num_dims,
                        TF_Status* status) {
  if (on_host) {
    int64_t nbytes = pg_shape_nbytes(dtype, dims, num_dims, status);
    if (nbytes < 0) return NULL;
    pg_buffer* b = NULL;
    if (temp) {
      void* data = pg_host_alloc((size_t)nbytes);
      if (data != NULL)
        b = pg_buffer_new_external(data, (size_t)nbytes, deferred_host_free,
                                   ctx->k->dev);
      if (b == NULL) pg_host_free(data);
    } else {
      b = pg_buffer_new_host((size_t)nbytes);
    }
    if (b == NULL) {
      pg_set_status(status, TF_RESOURCE_EXHAUSTED, "out of host memory");
      return NULL;
    }
    TF_Tensor* t = pg_tensor_new(dtype, dims, num_dims, b, status);
    pg_buffer_unref(b);
    return t;
  }
  return pg_device_alloc_tensor(ctx->k->dev, dtype, dims, num_dims, status);
}

/* Output `index` in the buffer a graph plan planned for it, or NULL when
 * there is none, it is too small, or anything besides the plan still holds it
 * (a live alias or a tensor of an earlier run). */
static TF_Tensor* planned_output(TF_OpKernelContext* ctx, int index,
                                 TF_DataType dtype, const int64_t* dims,
                                 int num_dims, size_t nbytes) {
  if (ctx->preset == NULL || ctx->k->out_host[index]) return NULL;
  pg_buffer* b = ctx->preset[index];
  if (b == NULL || b->nbytes < nbytes || atomic_load(&b->refs) != 1) return NULL;
  return pg_tensor_new(dtype, dims, num_dims, b, NULL);
}

TF_Tensor* TF_AllocateOutput(TF_OpKernelContext* ctx, int index,
                             TF_DataType dtype, const int64_t* dims,
                             int num_dims, size_t len, TF_Status* status) {
  if (!check_index(ctx, index, TF_NumOutputs(ctx), "TF_AllocateOutput", status))
    return NULL;
  pg_kernel* k = ctx->k;
  if (k->out_types[index] != 0 && dtype != k->out_types[index]) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "TF_AllocateOutput: output %d of op '%s' has dtype %d, "
                  "asked for %d", index, k->def->op_name,
                  (int)k->out_types[index], (int)dtype);
    return NULL;
  }
  int64_t nbytes = pg_shape_nbytes(dtype, dims, num_dims, status);
  if (nbytes < 0) return NULL;
  if ((size_t)nbytes != len) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "TF_AllocateOutput: len is %zu but the shape and dtype of "
                  "output %d of op '%s' need %lld bytes", len, index,
                  k->def->op_name, (long long)nbytes);
    return NULL;
  }
  TF_Tensor* t = planned_output(ctx, index, dtype, dims, num_dims, (size_t)nbytes);
  if (t == NULL) t = alloc(ctx, k->out_host[index], 0, dtype, dims, num_dims, status);
  if (t == NULL) return NULL;
  TF_DeleteTensor(ctx->outputs[index]);
  ctx->outputs[index] = t;
  TF_SetStatus(status, TF_OK, "");
  return pg_tensor_ref(t);
}

TF_Tensor* TF_ForwardInputOrAllocateOutput(
    TF_OpKernelContext* ctx, const int* candidate_input_indices,
    int num_candidate_input_indices, int output_index,
    const int64_t* output_dims, int output_num_dims, int* forwarded_input,
    TF_Status* status) {
  if (forwarded_input != NULL) *forwarded_input = -1;
  if (!check_index(ctx, output_index, TF_NumOutputs(ctx),
                   "TF_ForwardInputOrAllocateOutput", status))
    return NULL;
  TF_DataType dt = TF_ExpectedOutputDataType(ctx, output_index);
  int64_t nbytes = pg_shape_nbytes(dt, output_dims, output_num_dims, status);
  if (nbytes < 0) return NULL;
  /* An input is forwarded only where its caller donated it (an input a
   * Python tensor still holds stays observable): its buffer then has the one
   * reference of the donated handle unless something else shares it. */
  for (int c = 0; c < num_candidate_input_indices && ctx->donated != 0; ++c) {
    int i = candidate_input_indices[c];
    if (i < 0 || i >= ctx->k->num_inputs || i >= 64 || !((ctx->donated >> i) & 1)) continue;
    TF_Tensor* in = ctx->inputs[i];
    pg_buffer* b = in->buf;
    if (in->dtype != dt || b == NULL || !b->forwardable || atomic_load(&b->refs) != 1 ||
        (size_t)nbytes != (size_t)TF_TensorByteSize(in) ||
        ctx->k->in_host[i] != ctx->k->out_host[output_index] ||
        (!ctx->k->in_host[i] && b->device != ctx->k->dev) || pg_buffer_used_elsewhere(b))
      continue;
    TF_Tensor* t = pg_tensor_new(dt, output_dims, output_num_dims, b, status);
    if (t == NULL) return NULL;
    TF_DeleteTensor(ctx->outputs[output_index]);
    ctx->outputs[output_index] = t;
    if (forwarded_input != NULL) *forwarded_input = i;
    __atomic_fetch_add(&ctx->k->def->forwarded, 1, __ATOMIC_RELAXED);
    TF_SetStatus(status, TF_OK, "");
    return pg_tensor_ref(t);
  }
  return TF_AllocateOutput(ctx, output_index, dt, output_dims, output_num_dims,
                           (size_t)nbytes, status);
}

TF_Tensor* TF_AllocateTemp(TF_OpKernelContext* ctx, TF_DataType dtype,
                           const int64_t* dims, int num_dims,
                           TF_AllocatorAttributes* alloc_attrs,
                           TF_Status* status) {
  if (ctx == NULL) {
    pg_set_status(status, TF_INVALID_ARGUMENT, "TF_AllocateTemp: NULL context");
    return NULL;
  }
  int on_host = alloc_attrs != NULL &&
                alloc_attrs->struct_size >= TF_ALLOCATOR_ATTRIBUTES_STRUCT_SIZE &&
                alloc_attrs->on_host;
  TF_Tensor* t = alloc(ctx, on_host, 1, dtype, dims, num_dims, status);
  if (t != NULL) TF_SetStatus(status, TF_OK, "");
  return t;
}

TF_Code pg_host_op_launch(pg_device* dev, const char* op,
                          TF_Tensor* const* inputs, int num_inputs,
                          void (*fn)(void*, TF_Status*), void* arg,
                          TF_Tensor** outputs, int num_outputs,
                          TF_Status* status) {
  TF_SetStatus(status, TF_OK, "");
  if (!pg_op_inputs_ok(inputs, num_inputs, status)) return TF_GetCode(status);
  pg_event* ev = pg_event_acquire(dev, NULL);
  pg_op_launch_lock(dev);
  if (!dev->se->host_callback(dev->device, dev->stream, fn, arg)) {
    pg_op_launch_unlock(dev);
    if (ev != NULL) pg_event_release(dev, ev);
    pg_set_status(status, TF_INTERNAL, "%s: host_callback was refused by %s",
                  op, dev->name);
    return TF_INTERNAL;
  }
  ev = pg_event_record_end(dev, ev);
  int64_t logged = pg_op_launched(dev, op, inputs, num_inputs, ev, outputs,
                                  num_outputs);
  pg_op_launch_unlock(dev);
  pg_op_maintain(dev, logged);
  return TF_OK;
}
