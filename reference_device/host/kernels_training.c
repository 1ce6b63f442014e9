/* Host reference device: kernels that update resource variables in place.
 *
 * AssignAddVariableOp and AssignSubVariableOp (through TF_AssignUpdateVariable)
 * and the optimizers' update steps ResourceApplyGradientDescent,
 * ResourceApplyKerasMomentum and ResourceApplyAdam (through
 * TF_MaybeLockVariableInputMutexesInOrder + TF_GetInputTensorFromVariable),
 * written the way a TensorFlow PluggableDevice writes them
 * (kernels_experimental.h). Nothing leaves the device: the update runs as a
 * task on the stream, reading the scalar hyperparameters (device tensors)
 * when it runs. Reading and assigning variables is done by the framework.
 *
 * Every input is checked before anything is enqueued, so a bad call leaves
 * the variables as they were. */
#include <math.h>
#include <stdlib.h>

#include "kernel_list.h"
#include "kernel_util.h"
#include "kernels_experimental.h"
#include "plugin.h"

/* The variable functions of kernels_experimental.h are not exported by every
 * runtime (TensorFlow's pip packages keep them internal): weak references let
 * the plugin load anyway, and these kernels are then not registered (the
 * runtime runs its own). */
#pragma weak TF_AssignUpdateVariable
#pragma weak TF_MaybeLockVariableInputMutexesInOrder
#pragma weak TF_GetInputTensorFromVariable
#pragma weak TF_ReleaseVariableInputLockHolder

static int md_variable_api_present(void) {
  return TF_AssignUpdateVariable != NULL &&
         TF_MaybeLockVariableInputMutexesInOrder != NULL &&
         TF_GetInputTensorFromVariable != NULL &&
         TF_ReleaseVariableInputLockHolder != NULL;
}

#define MD_SQRT(x) _Generic((x), float: sqrtf, default: sqrt)(x)

/*** The copy callback the variable functions use for copy on write ***/

typedef struct md_copy_task {
  const void* src;
  void* dst;
  size_t n;
} md_copy_task;

static void md_copy_run(void* arg, SP_Stream stream) {
  (void)stream;
  md_copy_task* t = arg;
  memcpy(t->dst, t->src, t->n);
}

/* Enqueues dest = source and releases both handles (the callback owns
 * them, as in TensorFlow). */
static void md_copy_variable(TF_OpKernelContext* ctx, TF_Tensor* source,
                             TF_Tensor* dest) {
  md_copy_task* t = malloc(sizeof *t);
  if (t == NULL) {
    md_fail(ctx, TF_RESOURCE_EXHAUSTED, "out of host memory");
  } else {
    t->src = TF_TensorData(source);
    t->dst = TF_TensorData(dest);
    t->n = TF_TensorByteSize(source);
    md_enqueue(ctx, md_copy_run, t);
  }
  TF_DeleteTensor(source);
  TF_DeleteTensor(dest);
}

/*** Update tasks ***/

typedef enum md_update {
  MD_ASSIGN_ADD, MD_ASSIGN_SUB, MD_GRADIENT_DESCENT, MD_KERAS_MOMENTUM,
  MD_ADAM, MD_NUM_UPDATES
} md_update;

/* One update: up to three variable buffers, the gradient (or value) and up
 * to six scalars, all read when the task runs. */
typedef struct md_update_task {
  void (*loop)(const struct md_update_task* t);
  int64_t n;
  void* vars[3];
  const void* grad;
  const void* scalars[6];
  int nesterov;
} md_update_task;

/* Element loops per dtype: X(enum, suffix, storage, compute, accumulation). */
#define MD_SCALAR(SFX, ST, i) md_load_##SFX(*(const ST*)t->scalars[i])

#define MD_ADD_SUB_LOOPS(SFX, ST)                                             \
  static void assign_add_##SFX(const md_update_task* t) {                     \
    ST* var = t->vars[0];                                                     \
    const ST* x = t->grad;                                                    \
    for (int64_t i = 0; i < t->n; ++i)                                        \
      var[i] = md_store_##SFX(md_load_##SFX(var[i]) + md_load_##SFX(x[i]));   \
  }                                                                           \
  static void assign_sub_##SFX(const md_update_task* t) {                     \
    ST* var = t->vars[0];                                                     \
    const ST* x = t->grad;                                                    \
    for (int64_t i = 0; i < t->n; ++i)                                        \
      var[i] = md_store_##SFX(md_load_##SFX(var[i]) - md_load_##SFX(x[i]));   \
  }

#define MD_TRAINING_LOOPS(ENUM, SFX, ST, CT, AT)                              \
  MD_ADD_SUB_LOOPS(SFX, ST)                                                   \
  /* var -= alpha * delta */                                                  \
  static void gradient_descent_##SFX(const md_update_task* t) {               \
    ST* var = t->vars[0];                                                     \
    const ST* d = t->grad;                                                    \
    const CT alpha = MD_SCALAR(SFX, ST, 0);                                   \
    for (int64_t i = 0; i < t->n; ++i)                                        \
      var[i] = md_store_##SFX(md_load_##SFX(var[i]) - alpha * md_load_##SFX(d[i])); \
  }                                                                           \
  /* accum = accum * momentum - lr * grad; var += accum (nesterov: var +=    \
   * accum * momentum - lr * grad) */                                         \
  static void keras_momentum_##SFX(const md_update_task* t) {                 \
    ST* var = t->vars[0];                                                     \
    ST* accum = t->vars[1];                                                   \
    const ST* g = t->grad;                                                    \
    const CT lr = MD_SCALAR(SFX, ST, 0), mom = MD_SCALAR(SFX, ST, 1);         \
    for (int64_t i = 0; i < t->n; ++i) {                                      \
      const CT gi = md_load_##SFX(g[i]);                                      \
      const CT a = md_load_##SFX(accum[i]) * mom - lr * gi;                   \
      accum[i] = md_store_##SFX(a);                                           \
      const CT step = t->nesterov ? a * mom - lr * gi : a;                    \
      var[i] = md_store_##SFX(md_load_##SFX(var[i]) + step);                  \
    }                                                                         \
  }                                                                           \
  /* Adam with alpha = lr * sqrt(1 - beta2^t) / (1 - beta1^t). */             \
  static void adam_##SFX(const md_update_task* t) {                           \
    ST* var = t->vars[0];                                                     \
    ST* m = t->vars[1];                                                       \
    ST* v = t->vars[2];                                                       \
    const ST* g = t->grad;                                                    \
    const CT b1p = MD_SCALAR(SFX, ST, 0), b2p = MD_SCALAR(SFX, ST, 1);        \
    const CT lr = MD_SCALAR(SFX, ST, 2), b1 = MD_SCALAR(SFX, ST, 3);          \
    const CT b2 = MD_SCALAR(SFX, ST, 4), eps = MD_SCALAR(SFX, ST, 5);         \
    const CT one = 1;                                                         \
    const CT alpha = lr * MD_SQRT(one - b2p) / (one - b1p);                   \
    for (int64_t i = 0; i < t->n; ++i) {                                      \
      const CT gi = md_load_##SFX(g[i]);                                      \
      CT mi = md_load_##SFX(m[i]);                                            \
      CT vi = md_load_##SFX(v[i]);                                            \
      mi += (gi - mi) * (one - b1);                                           \
      vi += (gi * gi - vi) * (one - b2);                                      \
      m[i] = md_store_##SFX(mi);                                              \
      v[i] = md_store_##SFX(vi);                                              \
      const CT num = t->nesterov ? gi * (one - b1) + b1 * mi : mi;            \
      var[i] = md_store_##SFX(md_load_##SFX(var[i]) -                         \
                              num * alpha / (MD_SQRT(vi) + eps));             \
    }                                                                         \
  }
MD_FLOAT_TYPES(MD_TRAINING_LOOPS)
/* Integers wrap on overflow (done in the unsigned type). */
#define MD_INT_ADD_SUB(ENUM, SFX, T, UT, LO, HI)                              \
  static void assign_add_##SFX(const md_update_task* t) {                     \
    T* var = t->vars[0];                                                      \
    const T* x = t->grad;                                                     \
    for (int64_t i = 0; i < t->n; ++i) var[i] = (T)((UT)var[i] + (UT)x[i]);   \
  }                                                                           \
  static void assign_sub_##SFX(const md_update_task* t) {                     \
    T* var = t->vars[0];                                                      \
    const T* x = t->grad;                                                     \
    for (int64_t i = 0; i < t->n; ++i) var[i] = (T)((UT)var[i] - (UT)x[i]);   \
  }
MD_INT_TYPES(MD_INT_ADD_SUB)

typedef void (*md_update_loop)(const md_update_task* t);

static md_update_loop md_select_update(md_update op, TF_DataType dtype) {
#define MD_FLOAT_CASE(ENUM, SFX, ST, CT, AT)                                  \
  case ENUM: {                                                                \
    static const md_update_loop loops[MD_NUM_UPDATES] = {                     \
        assign_add_##SFX, assign_sub_##SFX, gradient_descent_##SFX,           \
        keras_momentum_##SFX, adam_##SFX};                                    \
    return loops[op];                                                         \
  }
#define MD_INT_CASE(ENUM, SFX, T, UT, LO, HI)                                 \
  case ENUM: {                                                                \
    static const md_update_loop loops[MD_NUM_UPDATES] = {                     \
        [MD_ASSIGN_ADD] = assign_add_##SFX, [MD_ASSIGN_SUB] = assign_sub_##SFX}; \
    return loops[op];                                                         \
  }
  switch (dtype) {
    MD_FLOAT_TYPES(MD_FLOAT_CASE)
    MD_INT_TYPES(MD_INT_CASE)
    default:
      return NULL;
  }
#undef MD_FLOAT_CASE
#undef MD_INT_CASE
}

static void md_update_run(void* arg, SP_Stream stream) {
  (void)stream;
  const md_update_task* t = arg;
  t->loop(t);
}

/* Enqueues `t` (a malloc'd copy of it). */
static void md_enqueue_update(TF_OpKernelContext* ctx, const md_update_task* t) {
  md_update_task* copy = malloc(sizeof *copy);
  if (copy == NULL) {
    md_fail(ctx, TF_RESOURCE_EXHAUSTED, "out of host memory");
    return;
  }
  *copy = *t;
  md_enqueue(ctx, md_update_run, copy);
}

/*** AssignAddVariableOp / AssignSubVariableOp ***/

/* updateFunc of TF_AssignUpdateVariable: enqueues tensor (+|-)= value. */
static void md_update_variable(TF_OpKernelContext* ctx, TF_Tensor* tensor,
                               TF_Tensor* value, int op) {
  md_update_task t = {0};
  TF_DataType dtype = TF_TensorType(tensor);
  /* Complex numbers add and subtract part by part: the loop of the part type
   * over twice as many elements. */
  int parts = dtype == TF_COMPLEX64 || dtype == TF_COMPLEX128 ? 2 : 1;
  if (dtype == TF_COMPLEX64) dtype = TF_FLOAT;
  if (dtype == TF_COMPLEX128) dtype = TF_DOUBLE;
  t.loop = md_select_update(op == 0 ? MD_ASSIGN_ADD : MD_ASSIGN_SUB, dtype);
  t.n = TF_TensorElementCount(tensor) * parts;
  t.vars[0] = TF_TensorData(tensor);
  t.grad = TF_TensorData(value);
  if (t.loop == NULL) {
    md_fail(ctx, TF_UNIMPLEMENTED, "%.*s: dtype %d is not supported", MD_OP(ctx),
            (int)TF_TensorType(tensor));
  } else if (t.n > 0) {
    md_enqueue_update(ctx, &t);
  }
  TF_DeleteTensor(tensor);
  TF_DeleteTensor(value);
}

static void md_assign_update(TF_OpKernelContext* ctx, int op) {
  TF_Status* status = TF_NewStatus();
  TF_AssignUpdateVariable(ctx, 0, 1, op, 0, md_copy_variable,
                          md_update_variable, status);
  if (TF_GetCode(status) != TF_OK) TF_OpKernelContext_Failure(ctx, status);
  TF_DeleteStatus(status);
}

static void md_compute_assign_add_variable(void* kernel, TF_OpKernelContext* ctx) {
  (void)kernel;
  md_assign_update(ctx, 0);
}

static void md_compute_assign_sub_variable(void* kernel, TF_OpKernelContext* ctx) {
  (void)kernel;
  md_assign_update(ctx, 1);
}

/*** ResourceApply* ***/

/* What differs between the three training ops. */
typedef struct md_apply_op {
  md_update update;
  int num_vars;                 /* resource inputs 0 .. num_vars-1 */
  int num_scalars;              /* then these scalar inputs */
  const char* scalar_names[6];
  int grad_index;               /* the gradient input */
} md_apply_op;

static const md_apply_op kGradientDescent = {
    MD_GRADIENT_DESCENT, 1, 1, {"alpha"}, 2};
static const md_apply_op kKerasMomentum = {
    MD_KERAS_MOMENTUM, 2, 2, {"lr", "momentum"}, 3};
static const md_apply_op kAdam = {
    MD_ADAM, 3, 6, {"beta1_power", "beta2_power", "lr", "beta1", "beta2", "epsilon"},
    9};

/* Input index of scalar `i` of `op`. */
static int md_scalar_index(const md_apply_op* op, int i) {
  if (op->update == MD_KERAS_MOMENTUM) return i == 0 ? 2 : 4; /* lr, momentum */
  return op->num_vars + i;
}

typedef struct md_apply_state {
  int use_locking;
  int nesterov;
} md_apply_state;

static void* md_create_apply(TF_OpKernelConstruction* ctx) {
  md_apply_state* s = malloc(sizeof *s);
  if (s == NULL) return NULL;
  s->use_locking = md_get_bool_attr(ctx, "use_locking", 0);
  s->nesterov = md_get_bool_attr(ctx, "use_nesterov", 0);
  return s;
}

static void md_delete_apply(void* kernel) { free(kernel); }

/* Checks the variables and inputs of one call; fills `t`. Returns 0 after
 * failing the call. */
static int md_check_apply(TF_OpKernelContext* ctx, const md_apply_op* op,
                          TF_Tensor** vars, TF_Tensor** ins, md_update_task* t) {
  char a[MD_SHAPE_STR_SIZE], b[MD_SHAPE_STR_SIZE];
  TF_Tensor* grad = ins[op->grad_index];
  TF_DataType dtype = TF_TensorType(grad);
  md_shape shape = md_shape_of(grad);
  for (int i = 0; i < op->num_vars; ++i) {
    md_shape vs = md_shape_of(vars[i]);
    if (TF_TensorType(vars[i]) != dtype) {
      md_fail(ctx, TF_INVALID_ARGUMENT, "%.*s: variable input %d holds dtype %d but "
              "the gradient is dtype %d", MD_OP(ctx), i, (int)TF_TensorType(vars[i]),
              (int)dtype);
      return 0;
    }
    if (vs.rank != shape.rank ||
        memcmp(vs.dims, shape.dims, sizeof(int64_t) * (size_t)vs.rank) != 0) {
      md_fail(ctx, TF_INVALID_ARGUMENT, "%.*s: variable input %d has shape %s but "
              "the gradient has shape %s", MD_OP(ctx), i,
              md_shape_str(&vs, a, sizeof a), md_shape_str(&shape, b, sizeof b));
      return 0;
    }
    t->vars[i] = TF_TensorData(vars[i]);
  }
  for (int i = 0; i < op->num_scalars; ++i) {
    TF_Tensor* s = ins[md_scalar_index(op, i)];
    if (TF_NumDims(s) != 0) {
      md_shape ss = md_shape_of(s);
      md_fail(ctx, TF_INVALID_ARGUMENT, "%.*s: %s is not a scalar: %s", MD_OP(ctx),
              op->scalar_names[i], md_shape_str(&ss, a, sizeof a));
      return 0;
    }
    t->scalars[i] = TF_TensorData(s);
  }
  t->loop = md_select_update(op->update, dtype);
  if (t->loop == NULL) {
    md_fail(ctx, TF_UNIMPLEMENTED, "%.*s: dtype %d is not supported", MD_OP(ctx),
            (int)dtype);
    return 0;
  }
  t->n = md_num_elements(&shape);
  t->grad = TF_TensorData(grad);
  return 1;
}

static void md_apply(const md_apply_state* state, TF_OpKernelContext* ctx,
                     const md_apply_op* op) {
  TF_Status* status = TF_NewStatus();
  TF_Tensor* vars[3] = {NULL, NULL, NULL};
  TF_Tensor* ins[10] = {NULL};
  const int var_inputs[3] = {0, 1, 2};
  TF_VariableInputLockHolder* lock = NULL;
  TF_MaybeLockVariableInputMutexesInOrder(ctx, state->use_locking, false,
                                          var_inputs, (size_t)op->num_vars,
                                          md_copy_variable, &lock, status);
  for (int i = 0; i < op->num_vars && TF_GetCode(status) == TF_OK; ++i)
    TF_GetInputTensorFromVariable(ctx, i, state->use_locking, false, false,
                                  md_copy_variable, &vars[i], status);
  if (TF_GetCode(status) != TF_OK) {
    TF_OpKernelContext_Failure(ctx, status);
  } else {
    int n_in = TF_NumInputs(ctx), ok = n_in <= 10;
    for (int i = op->num_vars; ok && i < n_in; ++i)
      ok = (ins[i] = md_get_input(ctx, i, NULL)) != NULL;
    md_update_task t = {0};
    t.nesterov = state->nesterov;
    if (ok && md_check_apply(ctx, op, vars, ins, &t) && t.n > 0)
      md_enqueue_update(ctx, &t);
  }
  for (int i = 0; i < 10; ++i) TF_DeleteTensor(ins[i]);
  for (int i = 0; i < 3; ++i) TF_DeleteTensor(vars[i]);
  TF_ReleaseVariableInputLockHolder(lock);
  TF_DeleteStatus(status);
}

static void md_compute_apply_gradient_descent(void* kernel, TF_OpKernelContext* ctx) {
  md_apply(kernel, ctx, &kGradientDescent);
}

static void md_compute_apply_keras_momentum(void* kernel, TF_OpKernelContext* ctx) {
  md_apply(kernel, ctx, &kKerasMomentum);
}

static void md_compute_apply_adam(void* kernel, TF_OpKernelContext* ctx) {
  md_apply(kernel, ctx, &kAdam);
}

/*** Registration ***/

static void md_register_one(const char* op, const char* type_attr, TF_DataType t,
                            void* (*create)(TF_OpKernelConstruction*),
                            void (*compute)(void*, TF_OpKernelContext*),
                            void (*destroy)(void*)) {
  TF_Status* status = TF_NewStatus();
  TF_KernelBuilder* b = TF_NewKernelBuilder(op, MD_DEVICE_TYPE, create, compute,
                                            destroy);
  TF_KernelBuilder_TypeConstraint(b, type_attr, t, status);
  if (TF_GetCode(status) == TF_OK)
    TF_RegisterKernelBuilder(op, b, status); /* takes the builder */
  else
    TF_DeleteKernelBuilder(b);
  TF_DeleteStatus(status);
}

void md_register_training_kernels(void) {
  if (!md_variable_api_present()) return;
  static const TF_DataType numeric[] = {TF_HALF, TF_BFLOAT16, TF_FLOAT,
                                        TF_DOUBLE, TF_INT32, TF_INT64,
                                        TF_COMPLEX64, TF_COMPLEX128};
  static const TF_DataType floats[] = {TF_HALF, TF_BFLOAT16, TF_FLOAT, TF_DOUBLE};
  for (size_t i = 0; i < sizeof numeric / sizeof numeric[0]; ++i) {
    md_register_one("AssignAddVariableOp", "dtype", numeric[i], NULL,
                    md_compute_assign_add_variable, NULL);
    md_register_one("AssignSubVariableOp", "dtype", numeric[i], NULL,
                    md_compute_assign_sub_variable, NULL);
  }
  for (size_t i = 0; i < sizeof floats / sizeof floats[0]; ++i) {
    md_register_one("ResourceApplyGradientDescent", "T", floats[i], md_create_apply,
                    md_compute_apply_gradient_descent, md_delete_apply);
    md_register_one("ResourceApplyKerasMomentum", "T", floats[i], md_create_apply,
                    md_compute_apply_keras_momentum, md_delete_apply);
    md_register_one("ResourceApplyAdam", "T", floats[i], md_create_apply,
                    md_compute_apply_adam, md_delete_apply);
  }
}
