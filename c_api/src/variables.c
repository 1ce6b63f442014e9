/* Resource variables.
 *
 * A variable (pg_variable) is a reference-counted object holding a value
 * tensor on one device (or in host memory, for the CPU device), a
 * reader/writer lock and its dtype. Ops reach it through a resource handle:
 * a scalar TF_Tensor of type TF_RESOURCE whose host buffer points at the
 * variable and holds one reference to it.
 *
 * This file implements the variable functions of kernels_experimental.h
 * (TensorFlow's names and semantics, copy on write included), the core's own
 * kernels that run on every plugin device (ReadVariableOp, AssignVariableOp,
 * StopGradient: none needs device code), and the functions the Python layer
 * uses for variables of the CPU device.
 *
 * Two locks: `mu` is the variable's lock in TensorFlow's sense (held across
 * an update by kernels that ask for it); `value_mu` only guards the `value`
 * pointer itself, so that a plugin that updates without locking can never
 * make the core free a buffer that is still in use. */
#include "internal.h"
#include "kernels_experimental.h"

typedef void (*pg_copy_fn)(TF_OpKernelContext* ctx, TF_Tensor* source,
                           TF_Tensor* dest);

struct pg_variable {
  atomic_int refs;
  pthread_rwlock_t mu;
  pthread_mutex_t value_mu;
  pg_device* device;     /* NULL: host memory (the CPU device) */
  TF_DataType dtype;
  TF_Tensor* value;      /* NULL until the first assignment */
  atomic_int copy_on_read;
  atomic_ullong writes;  /* assignments and in-place updates handed out */
};

/* The most variables one lock holder takes (a multi-tensor update locks
   three per parameter tensor of a model). */
#define PG_MAX_LOCKED (1 << 20)

struct TF_VariableInputLockHolder {
  int n;
  int exclusive;
  pg_variable* vars[]; /* each holds a reference */
};

/*** Variables and handles ***/

static void var_ref(pg_variable* v) { atomic_fetch_add(&v->refs, 1); }

static void var_unref(pg_variable* v) {
  if (v == NULL || atomic_fetch_sub(&v->refs, 1) != 1) return;
  TF_DeleteTensor(v->value);
  pthread_rwlock_destroy(&v->mu);
  pthread_mutex_destroy(&v->value_mu);
  free(v);
}

static void release_handle(pg_buffer* b) { var_unref(b->data); }

/* The variable behind a resource handle, or NULL if `t` is not one. */
static pg_variable* var_of(const TF_Tensor* t) {
  if (t == NULL || t->dtype != TF_RESOURCE || t->buf == NULL ||
      t->buf->release != release_handle)
    return NULL;
  return t->buf->data;
}

/* A new handle to the variable's value (NULL if it has none). */
static TF_Tensor* value_ref(pg_variable* v) {
  pthread_mutex_lock(&v->value_mu);
  TF_Tensor* t = pg_tensor_ref(v->value);
  pthread_mutex_unlock(&v->value_mu);
  return t;
}

/* Makes `t` the variable's value (takes the caller's handle). */
static void set_value(pg_variable* v, TF_Tensor* t) {
  pthread_mutex_lock(&v->value_mu);
  TF_Tensor* old = v->value;
  v->value = t;
  atomic_fetch_add(&v->writes, 1);
  pthread_mutex_unlock(&v->value_mu);
  TF_DeleteTensor(old);
}

/* Whether the variable's buffer is shared with any other tensor handle. */
static int value_shared(pg_variable* v) {
  pthread_mutex_lock(&v->value_mu);
  int shared = atomic_load(&v->value->buf->refs) != 1;
  pthread_mutex_unlock(&v->value_mu);
  return shared;
}

static const char* where(const pg_device* dev) {
  return dev != NULL ? dev->name : "host memory (CPU:0)";
}

TF_Tensor* pg_variable_new(pg_device* dev, TF_DataType dtype,
                           TF_Status* status) {
  TF_SetStatus(status, TF_OK, "");
  if (TF_DataTypeSize(dtype) == 0) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "a variable cannot hold values of data type %d", (int)dtype);
    return NULL;
  }
  pg_variable* v = calloc(1, sizeof(pg_variable));
  TF_Tensor* t = calloc(1, sizeof(TF_Tensor));
  pg_buffer* b = v != NULL ? pg_buffer_new(v, sizeof(pg_variable*),
                                           release_handle, NULL)
                           : NULL;
  if (t == NULL || b == NULL) {
    free(v);
    free(t);
    free(b);
    pg_set_status(status, TF_RESOURCE_EXHAUSTED, "out of host memory");
    return NULL;
  }
  atomic_init(&v->refs, 1); /* owned by the handle's buffer */
  atomic_init(&v->copy_on_read, 0);
  atomic_init(&v->writes, 0);
  pthread_rwlock_init(&v->mu, NULL);
  pthread_mutex_init(&v->value_mu, NULL);
  v->device = dev;
  v->dtype = dtype;
  t->dtype = TF_RESOURCE;
  t->num_dims = 0;
  t->buf = b; /* the handle takes the buffer's first reference */
  return t;
}

/* Writes "[d0,d1,...]" into buf. */
static const char* shape_str(const TF_Tensor* t, char* buf, size_t size) {
  size_t used = (size_t)snprintf(buf, size, "[");
  for (int i = 0; i < t->num_dims && used < size; ++i)
    used += (size_t)snprintf(buf + used, size - used, i ? ",%lld" : "%lld",
                             (long long)t->dims[i]);
  if (used < size) snprintf(buf + used, size - used, "]");
  return buf;
}

/*** Copies and allocation on the variable's device ***/

/* A new uninitialised tensor shaped like `like` on the variable's device. */
static TF_Tensor* alloc_like(pg_variable* v, const TF_Tensor* like,
                             TF_Status* status) {
  if (v->device != NULL)
    return pg_device_alloc_tensor(v->device, like->dtype, like->dims,
                                  like->num_dims, status);
  TF_Tensor* t = TF_AllocateTensor(like->dtype, like->dims, like->num_dims,
                                   TF_TensorByteSize(like));
  if (t == NULL)
    pg_set_status(status, TF_RESOURCE_EXHAUSTED, "out of host memory");
  return t;
}

/* The core's copy function: a copy on the device's stream (or a memcpy in
 * host memory). Like a plugin's copyFunc it releases both handles. */
static void core_copy(TF_OpKernelContext* ctx, TF_Tensor* source,
                      TF_Tensor* dest) {
  size_t n = TF_TensorByteSize(source);
  pg_device* dev = pg_tensor_device(dest);
  if (n != 0 && dev == NULL) {
    memcpy(TF_TensorData(dest), TF_TensorData(source), n);
  } else if (n != 0) {
    SP_DeviceMemoryBase src, dst;
    pg_tensor_mem(source, &src);
    pg_tensor_mem(dest, &dst);
    TF_Status* st = TF_NewStatus();
    dev->se->memcpy_dtod(dev->device, dev->stream, &dst, &src, n, st);
    if (TF_GetCode(st) != TF_OK && ctx != NULL)
      TF_OpKernelContext_Failure(ctx, st);
    TF_DeleteStatus(st);
  }
  TF_DeleteTensor(source);
  TF_DeleteTensor(dest);
}

/* Replaces the value by a copy of itself (made by `copy`). */
static int copy_value(TF_OpKernelContext* ctx, pg_variable* v, pg_copy_fn copy,
                      TF_Status* status) {
  TF_Tensor* old = value_ref(v);
  TF_Tensor* fresh = alloc_like(v, old, status);
  if (fresh == NULL) {
    TF_DeleteTensor(old);
    return 0;
  }
  copy(ctx, old, pg_tensor_ref(fresh)); /* the callback releases both */
  set_value(v, fresh);
  return 1;
}

static int check_has_value(pg_variable* v, const char* what, TF_Status* st) {
  if (v->value != NULL) return 1;
  pg_set_status(st, TF_FAILED_PRECONDITION,
                "%s: the variable on %s has no value yet (assign it first)",
                what, where(v->device));
  return 0;
}

/* Copy on write: makes the variable's buffer its own before an in-place
 * update (TensorFlow's PrepareToUpdateVariable). */
static int prepare_update(TF_OpKernelContext* ctx, pg_variable* v,
                          pg_copy_fn copy, const char* what,
                          TF_Status* status) {
  if (!check_has_value(v, what, status)) return 0;
  atomic_fetch_add(&v->writes, 1); /* the caller writes the buffer next */
  if (!atomic_load(&v->copy_on_read) && !value_shared(v)) return 1;
  return copy_value(ctx, v, copy, status);
}

/* Copy-on-read mode, entered by sparse access (TensorFlow's
 * EnsureSparseVariableAccess): reads copy, so the buffer is never shared. */
static int ensure_sparse(TF_OpKernelContext* ctx, pg_variable* v,
                         pg_copy_fn copy, TF_Status* status) {
  if (atomic_load(&v->copy_on_read)) return 1;
  if (!check_has_value(v, "sparse access", status)) return 0;
  pthread_rwlock_wrlock(&v->mu);
  int ok = !value_shared(v) || copy_value(ctx, v, copy, status);
  if (ok) atomic_store(&v->copy_on_read, 1);
  pthread_rwlock_unlock(&v->mu);
  return ok;
}

/* Sets `value` as the variable's value after the dtype and shape checks
 * (TensorFlow's AssignVariableOp). Call with the variable locked. */
static int assign(TF_OpKernelContext* ctx, pg_variable* v,
                  const TF_Tensor* value, int validate_shape, pg_copy_fn copy,
                  TF_Status* status) {
  if (value->dtype != v->dtype) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "Trying to assign variable with wrong dtype. Expected %d "
                  "got %d (TF_DataType values)", (int)v->dtype,
                  (int)value->dtype);
    return 0;
  }
  if (validate_shape && v->value != NULL) {
    TF_Tensor* cur = value_ref(v);
    char a[TF_MAX_DIMS * 21 + 3], b[TF_MAX_DIMS * 21 + 3];
    int same = cur->num_dims == value->num_dims &&
               memcmp(cur->dims, value->dims,
                      sizeof(int64_t) * (size_t)value->num_dims) == 0;
    if (!same)
      pg_set_status(status, TF_INVALID_ARGUMENT,
                    "Trying to assign to variable with tensor with wrong "
                    "shape. Expected %s got %s", shape_str(cur, a, sizeof a),
                    shape_str(value, b, sizeof b));
    TF_DeleteTensor(cur);
    if (!same) return 0;
  }
  if (!atomic_load(&v->copy_on_read)) {
    set_value(v, pg_tensor_ref(value)); /* alias: later updates copy on write */
    return 1;
  }
  TF_Tensor* fresh = alloc_like(v, value, status);
  if (fresh == NULL) return 0;
  copy(ctx, pg_tensor_ref(value), pg_tensor_ref(fresh));
  set_value(v, fresh);
  return 1;
}

/*** Kernel-side access ***/

/* The variable of resource input `i` (with a new reference), after checking
 * that it is one and lives on the kernel's device. */
static pg_variable* input_variable(TF_OpKernelContext* ctx, int i,
                                   const char* fn, TF_Status* status) {
  if (ctx == NULL) {
    pg_set_status(status, TF_INVALID_ARGUMENT, "%s: context is NULL", fn);
    return NULL;
  }
  TF_Tensor* h = NULL;
  TF_GetInput(ctx, i, &h, status);
  if (h == NULL) return NULL;
  pg_variable* v = var_of(h);
  TF_StringView op = TF_GetOpKernelName(ctx);
  if (v == NULL) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "%s: input %d of op '%.*s' is not a resource (dtype %d)", fn,
                  i, (int)op.len, op.data, (int)TF_TensorType(h));
  } else if (v->device != pg_context_device(ctx)) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "%s: the variable of input %d of op '%.*s' lives on %s but "
                  "the kernel runs on %s", fn, i, (int)op.len, op.data,
                  where(v->device), where(pg_context_device(ctx)));
    v = NULL;
  } else {
    var_ref(v);
  }
  TF_DeleteTensor(h);
  return v;
}

static int is_resource_input(TF_OpKernelContext* ctx, int i) {
  return TF_InputDatatype(ctx, i) == TF_RESOURCE;
}

static int by_address(const void* a, const void* b) {
  uintptr_t x = (uintptr_t) * (pg_variable* const*)a;
  uintptr_t y = (uintptr_t) * (pg_variable* const*)b;
  return x < y ? -1 : x > y;
}

/* Locks distinct variables in address order; the holder takes the
 * references in `vars`. */
static TF_VariableInputLockHolder* lock_in_order(pg_variable** vars, int n,
                                                 int exclusive,
                                                 TF_Status* status) {
  TF_VariableInputLockHolder* h =
      calloc(1, sizeof *h + sizeof(pg_variable*) * (size_t)(n > 0 ? n : 1));
  if (h == NULL) {
    for (int i = 0; i < n; ++i) var_unref(vars[i]);
    pg_set_status(status, TF_RESOURCE_EXHAUSTED, "out of host memory");
    return NULL;
  }
  qsort(vars, (size_t)n, sizeof(pg_variable*), by_address);
  h->exclusive = exclusive;
  for (int i = 0; i < n; ++i) {
    if (h->n > 0 && h->vars[h->n - 1] == vars[i]) {
      var_unref(vars[i]); /* the same variable twice: lock it once */
      continue;
    }
    h->vars[h->n++] = vars[i];
  }
  for (int i = 0; i < h->n; ++i) {
    if (exclusive)
      pthread_rwlock_wrlock(&h->vars[i]->mu);
    else
      pthread_rwlock_rdlock(&h->vars[i]->mu);
  }
  TF_SetStatus(status, TF_OK, "");
  return h;
}

void TF_ReleaseVariableInputLockHolder(TF_VariableInputLockHolder* h) {
  if (h == NULL) return;
  for (int i = h->n - 1; i >= 0; --i) {
    pthread_rwlock_unlock(&h->vars[i]->mu);
    var_unref(h->vars[i]);
  }
  free(h);
}

void TF_MaybeLockVariableInputMutexesInOrder(
    TF_OpKernelContext* ctx, bool do_lock, bool sparse, const int* const inputs,
    size_t len, pg_copy_fn copyFunc, TF_VariableInputLockHolder** lockHolder,
    TF_Status* status) {
  static const char fn[] = "TF_MaybeLockVariableInputMutexesInOrder";
  if (lockHolder == NULL || (inputs == NULL && len != 0) ||
      len > PG_MAX_LOCKED) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "%s: lockHolder and inputs must not be NULL and len must be "
                  "at most %d", fn, PG_MAX_LOCKED);
    return;
  }
  *lockHolder = NULL;
  pg_variable** vars = malloc(sizeof(pg_variable*) * (len > 0 ? len : 1));
  if (vars == NULL) {
    pg_set_status(status, TF_RESOURCE_EXHAUSTED, "%s: out of host memory", fn);
    return;
  }
  int n = 0;
  for (size_t k = 0; k < len; ++k) {
    if (!is_resource_input(ctx, inputs[k])) continue;
    pg_variable* v = input_variable(ctx, inputs[k], fn, status);
    if (v != NULL && sparse && !ensure_sparse(ctx, v, copyFunc, status)) {
      var_unref(v);
      v = NULL;
    }
    if (v == NULL) {
      while (n > 0) var_unref(vars[--n]);
      free(vars);
      return;
    }
    vars[n++] = v;
  }
  *lockHolder = lock_in_order(vars, n, do_lock, status);
  free(vars);
}

void TF_GetInputTensorFromVariable(TF_OpKernelContext* ctx, int input,
                                   bool lock_held, bool isVariantType,
                                   bool sparse, pg_copy_fn copyFunc,
                                   TF_Tensor** out, TF_Status* status) {
  static const char fn[] = "TF_GetInputTensorFromVariable";
  (void)lock_held;
  if (out == NULL || copyFunc == NULL || isVariantType) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "%s: out and copyFunc must not be NULL and isVariantType "
                  "must be false", fn);
    return;
  }
  *out = NULL;
  if (ctx != NULL && !is_resource_input(ctx, input)) {
    TF_GetInput(ctx, input, out, status);
    return;
  }
  pg_variable* v = input_variable(ctx, input, fn, status);
  if (v == NULL) return;
  int ok = sparse ? ensure_sparse(ctx, v, copyFunc, status)
                  : prepare_update(ctx, v, copyFunc, fn, status);
  if (ok && sparse) atomic_fetch_add(&v->writes, 1);
  if (ok) {
    *out = value_ref(v);
    TF_SetStatus(status, TF_OK, "");
  }
  var_unref(v);
}

void TF_AssignVariable(TF_OpKernelContext* ctx, int input_index,
                       int value_index, bool validate_shape,
                       pg_copy_fn copyFunc, TF_Status* status) {
  pg_variable* v = input_variable(ctx, input_index, "TF_AssignVariable", status);
  if (v == NULL) return;
  TF_Tensor* value = NULL;
  TF_GetInput(ctx, value_index, &value, status);
  if (value != NULL) {
    pthread_rwlock_wrlock(&v->mu);
    if (assign(ctx, v, value, validate_shape,
               copyFunc != NULL ? copyFunc : core_copy, status))
      TF_SetStatus(status, TF_OK, "");
    pthread_rwlock_unlock(&v->mu);
  }
  TF_DeleteTensor(value);
  var_unref(v);
}

/* Checks that an update's value matches the variable (dtype and shape). */
static int check_update(pg_variable* v, const TF_Tensor* value,
                        TF_Status* status) {
  TF_Tensor* cur = value_ref(v);
  char a[TF_MAX_DIMS * 21 + 3], b[TF_MAX_DIMS * 21 + 3];
  int ok = cur->num_dims == value->num_dims &&
           memcmp(cur->dims, value->dims,
                  sizeof(int64_t) * (size_t)value->num_dims) == 0;
  if (!ok) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "Cannot update variable with shape %s using a Tensor with "
                  "shape %s, shapes must be equal.",
                  shape_str(cur, a, sizeof a), shape_str(value, b, sizeof b));
  } else if (value->dtype != v->dtype) {
    ok = 0;
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "Cannot update a variable of dtype %d with a value of dtype "
                  "%d (TF_DataType values)", (int)v->dtype, (int)value->dtype);
  }
  TF_DeleteTensor(cur);
  return ok;
}

void TF_AssignUpdateVariable(TF_OpKernelContext* ctx, int input_index,
                             int value_index, int Op, int isVariantType,
                             pg_copy_fn copyFunc,
                             void (*updateFunc)(TF_OpKernelContext* ctx,
                                                TF_Tensor* tensor,
                                                TF_Tensor* value, int Op),
                             TF_Status* status) {
  static const char fn[] = "TF_AssignUpdateVariable";
  if (copyFunc == NULL || updateFunc == NULL || isVariantType) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "%s: copyFunc and updateFunc must not be NULL and "
                  "isVariantType must be 0", fn);
    return;
  }
  pg_variable* v = input_variable(ctx, input_index, fn, status);
  if (v == NULL) return;
  TF_Tensor* value = NULL;
  TF_GetInput(ctx, value_index, &value, status);
  if (value != NULL) {
    pthread_rwlock_wrlock(&v->mu);
    if (check_has_value(v, fn, status) && check_update(v, value, status) &&
        prepare_update(ctx, v, copyFunc, fn, status)) {
      TF_SetStatus(status, TF_OK, "");
      updateFunc(ctx, value_ref(v), pg_tensor_ref(value), Op);
    }
    pthread_rwlock_unlock(&v->mu);
  }
  TF_DeleteTensor(value);
  var_unref(v);
}

void TF_AssignRefVariable(TF_OpKernelContext* ctx, int input_ref_index,
                          int output_ref_index, int value_index,
                          bool use_locking, bool validate_shape,
                          pg_copy_fn copyFunc, TF_Status* status) {
  (void)ctx, (void)input_ref_index, (void)output_ref_index, (void)value_index;
  (void)use_locking, (void)validate_shape, (void)copyFunc;
  pg_set_status(status, TF_UNIMPLEMENTED,
                "TF_AssignRefVariable: reference variables do not exist in "
                "pluggable; use resource variables (TF_AssignVariable)");
}

void TF_OpKernelContext_ForwardRefInputToRefOutput(TF_OpKernelContext* ctx,
                                                   int32_t input_index,
                                                   int32_t output_index) {
  (void)ctx, (void)input_index, (void)output_index;
}

bool TF_IsRefInput(TF_OpKernelContext* ctx, int i, TF_Status* status) {
  (void)ctx, (void)i;
  TF_SetStatus(status, TF_OK, "");
  return false;
}

void TF_GetInputByName(TF_OpKernelContext* ctx, const char* inputName,
                       TF_Tensor** tensor, TF_Status* status) {
  if (tensor != NULL) *tensor = NULL;
  int n = TF_NumInputs(ctx);
  for (int i = 0; inputName != NULL && i < n; ++i) {
    TF_StringView name = TF_GetOpKernelRequestedInput(ctx, (size_t)i);
    if (name.len == strlen(inputName) &&
        memcmp(name.data, inputName, name.len) == 0) {
      TF_GetInput(ctx, i, tensor, status);
      return;
    }
  }
  TF_StringView op = TF_GetOpKernelName(ctx);
  pg_set_status(status, TF_INVALID_ARGUMENT,
                "TF_GetInputByName: op '%.*s' has no input named '%s'",
                (int)op.len, op.data, inputName != NULL ? inputName : "(null)");
}

void TF_AddNVariant(TF_OpKernelContext* ctx,
                    void (*binary_add_func)(TF_OpKernelContext*, TF_Tensor*,
                                            TF_Tensor*, TF_Tensor*),
                    TF_Status* status) {
  (void)ctx, (void)binary_add_func;
  pg_set_status(status, TF_UNIMPLEMENTED,
                "TF_AddNVariant: pluggable has no variant tensors");
}

void TF_ZerosLikeVariant(TF_OpKernelContext* ctx,
                         void (*zeros_like_func)(TF_OpKernelContext*,
                                                 TF_Tensor*, TF_Tensor*),
                         TF_Status* status) {
  (void)ctx, (void)zeros_like_func;
  pg_set_status(status, TF_UNIMPLEMENTED,
                "TF_ZerosLikeVariant: pluggable has no variant tensors");
}

/*** The core's kernels for every plugin device ***/

static void fail(TF_OpKernelContext* ctx, TF_Status* st) {
  TF_OpKernelContext_Failure(ctx, st);
  TF_DeleteStatus(st);
}

/* ReadVariableOp: the output shares the variable's buffer (a copy in
 * copy-on-read mode), under the variable's shared lock. */
static void read_compute(void* state, TF_OpKernelContext* ctx) {
  (void)state;
  TF_Status* st = TF_NewStatus();
  pg_variable* v = input_variable(ctx, 0, "ReadVariableOp", st);
  if (v == NULL) {
    fail(ctx, st);
    return;
  }
  pthread_rwlock_rdlock(&v->mu);
  TF_DataType want = TF_ExpectedOutputDataType(ctx, 0);
  if (!check_has_value(v, "ReadVariableOp", st)) {
  } else if (v->dtype != want) {
    pg_set_status(st, TF_INVALID_ARGUMENT,
                  "Trying to read variable with wrong dtype. Expected %d got "
                  "%d (TF_DataType values)", (int)want, (int)v->dtype);
  } else {
    TF_Tensor* value = value_ref(v);
    TF_Tensor* out = atomic_load(&v->copy_on_read) ? alloc_like(v, value, st)
                                                   : pg_tensor_ref(value);
    if (out != NULL && atomic_load(&v->copy_on_read))
      core_copy(ctx, pg_tensor_ref(value), pg_tensor_ref(out));
    if (out != NULL) TF_SetOutput(ctx, 0, out, st);
    TF_DeleteTensor(out);
    TF_DeleteTensor(value);
  }
  pthread_rwlock_unlock(&v->mu);
  var_unref(v);
  fail(ctx, st);
}

static void* assign_create(TF_OpKernelConstruction* ctx) {
  TF_Status* st = TF_NewStatus();
  TF_Bool validate = 0;
  TF_OpKernelConstruction_GetAttrBool(ctx, "validate_shape", &validate, st);
  TF_DeleteStatus(st);
  return validate ? (void*)1 : NULL;
}

static void assign_compute(void* state, TF_OpKernelContext* ctx) {
  TF_Status* st = TF_NewStatus();
  TF_AssignVariable(ctx, 0, 1, state != NULL, core_copy, st);
  fail(ctx, st);
}

/* StopGradient: the output is the input. */
static void identity_compute(void* state, TF_OpKernelContext* ctx) {
  (void)state;
  TF_Status* st = TF_NewStatus();
  TF_Tensor* x = NULL;
  TF_GetInput(ctx, 0, &x, st);
  if (x != NULL) TF_SetOutput(ctx, 0, x, st);
  TF_DeleteTensor(x);
  fail(ctx, st);
}

#define CORE_KERNEL(OP, CREATE, COMPUTE)                                      \
  {.op_name = OP, .device_type = "DEFAULT", .create_func = CREATE,            \
   .compute_func = COMPUTE, .plugin_id = -1}

static pg_kernel_def core_kernels[] = {
    CORE_KERNEL("ReadVariableOp", NULL, read_compute),
    CORE_KERNEL("AssignVariableOp", assign_create, assign_compute),
    CORE_KERNEL("StopGradient", NULL, identity_compute),
};

pg_kernel_def* pg_core_kernel_def(const char* op_name) {
  for (size_t i = 0; i < sizeof core_kernels / sizeof core_kernels[0]; ++i)
    if (op_name != NULL && strcmp(core_kernels[i].op_name, op_name) == 0)
      return &core_kernels[i];
  return NULL;
}

/*** For the Python layer (variables of the CPU device, inspection) ***/

TF_Tensor* pg_variable_read(const TF_Tensor* handle, TF_Status* status) {
  pg_variable* v = var_of(handle);
  if (v == NULL) {
    pg_set_status(status, TF_INVALID_ARGUMENT, "not a resource handle");
    return NULL;
  }
  pthread_rwlock_rdlock(&v->mu);
  TF_Tensor* out = NULL;
  if (check_has_value(v, "ReadVariableOp", status)) {
    TF_Tensor* value = value_ref(v);
    if (atomic_load(&v->copy_on_read)) {
      out = alloc_like(v, value, status);
      if (out != NULL) core_copy(NULL, pg_tensor_ref(value), pg_tensor_ref(out));
      TF_DeleteTensor(value);
    } else {
      out = value;
    }
  }
  pthread_rwlock_unlock(&v->mu);
  return out;
}

void pg_variable_assign(const TF_Tensor* handle, const TF_Tensor* value,
                        int validate_shape, TF_Status* status) {
  TF_SetStatus(status, TF_OK, "");
  pg_variable* v = var_of(handle);
  if (v == NULL || value == NULL || pg_tensor_device(value) != v->device) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "pg_variable_assign: needs a resource handle and a value in "
                  "the variable's memory");
    return;
  }
  pthread_rwlock_wrlock(&v->mu);
  assign(NULL, v, value, validate_shape, core_copy, status);
  pthread_rwlock_unlock(&v->mu);
}

TF_VariableInputLockHolder* pg_variables_lock(TF_Tensor* const* handles, int n,
                                              int exclusive, TF_Status* status) {
  if (n < 0 || n > PG_MAX_LOCKED) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "pg_variables_lock: at most %d variables", PG_MAX_LOCKED);
    return NULL;
  }
  pg_variable** vars = malloc(sizeof(pg_variable*) * (size_t)(n > 0 ? n : 1));
  if (vars == NULL) {
    pg_set_status(status, TF_RESOURCE_EXHAUSTED, "pg_variables_lock: out of host memory");
    return NULL;
  }
  for (int i = 0; i < n; ++i) {
    vars[i] = var_of(handles[i]);
    if (vars[i] == NULL) {
      while (i > 0) var_unref(vars[--i]);
      free(vars);
      pg_set_status(status, TF_INVALID_ARGUMENT, "not a resource handle");
      return NULL;
    }
    var_ref(vars[i]);
  }
  TF_VariableInputLockHolder* h = lock_in_order(vars, n, exclusive, status);
  free(vars);
  return h;
}

TF_Tensor* pg_variable_prepare_update(const TF_Tensor* handle,
                                      TF_Status* status) {
  pg_variable* v = var_of(handle);
  if (v == NULL) {
    pg_set_status(status, TF_INVALID_ARGUMENT, "not a resource handle");
    return NULL;
  }
  TF_SetStatus(status, TF_OK, "");
  if (!prepare_update(NULL, v, core_copy, "updating a variable", status))
    return NULL;
  return value_ref(v);
}

unsigned long long pg_variable_writes(const TF_Tensor* handle) {
  pg_variable* v = var_of(handle);
  return v != NULL ? atomic_load(&v->writes) : 0;
}

int pg_variable_shares_buffer(const TF_Tensor* handle) {
  pg_variable* v = var_of(handle);
  return v != NULL && v->value != NULL && value_shared(v);
}
