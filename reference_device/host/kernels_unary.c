/* Host reference device: element-wise unary ops and CheckNumerics.
 *
 * Neg, Abs, Relu, Square, Sign, Round (floats; TensorFlow's raw Round of an
 * integer tensor gives zeros, so integers have no kernel here), Exp, Log, Sqrt,
 * Rsqrt, Tanh, Sigmoid, Erf, Floor, Gelu and the libm functions of
 * MD_LIBM_UNARY (Sin, Cos, ..., Ceil, Reciprocal) (floats). Round rounds
 * half to even (rint in the default rounding mode), as TensorFlow. Half and bfloat16 are computed
 * in float. Gelu's `approximate` attribute picks the exact form
 * x * Phi(x) or the tanh approximation once, when the kernel is created. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernel_list.h"
#include "kernel_util.h"

/* The float ops that are one libm function each: X(ENUM suffix, name, A,
 * B), where md_compute_<name> is the kernel and MD_<ENUM suffix>(x) the
 * function (kernel_util.h); A and B are passed through to X. Reciprocal is
 * 1 / x. A new op is a new row here, in kernel_list.h and in
 * init_kernels.c. */
#define MD_RECIPROCAL(x) (1 / (x))
#define MD_LIBM_UNARY(X, A, B)                                                \
  X(SIN, sin, A, B) X(COS, cos, A, B) X(TAN, tan, A, B)                       \
  X(ASIN, asin, A, B) X(ACOS, acos, A, B) X(ATAN, atan, A, B)                 \
  X(SINH, sinh, A, B) X(COSH, cosh, A, B) X(ASINH, asinh, A, B)               \
  X(ACOSH, acosh, A, B) X(ATANH, atanh, A, B) X(EXPM1, expm1, A, B)           \
  X(LOG1P, log1p, A, B) X(ERFC, erfc, A, B) X(CEIL, ceil, A, B)               \
  X(RECIPROCAL, reciprocal, A, B)

typedef enum md_unary_op {
  MD_NEG, MD_ABS, MD_EXP, MD_LOG, MD_SQRT, MD_TANH, MD_SIGMOID, MD_RELU,
  MD_SQUARE, MD_SIGN, MD_RSQRT, MD_ERF, MD_FLOOR, MD_GELU, MD_GELU_TANH,
  MD_ROUND,
#define MD_LIBM_ENUM(UPPER, lower, A, B) MD_##UPPER,
  MD_LIBM_UNARY(MD_LIBM_ENUM, _, _)
#undef MD_LIBM_ENUM
  MD_NUM_UNARY_OPS
} md_unary_op;

/*** Element functions ***/

/* Sign passes NaN through and maps both zeros to +0, as TensorFlow. Gelu:
 * x * Phi(x) = x/2 * (1 + erf(x / sqrt(2))), or its tanh approximation
 * x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))). */
#define MD_FLOAT_UNARY(ENUM, SFX, ST, CT, AT)                                 \
  static inline CT neg_##SFX(CT a) { return -a; }                             \
  static inline CT abs_##SFX(CT a) { return a < 0 ? -a : a; }                 \
  static inline CT exp_##SFX(CT a) { return MD_EXP(a); }                      \
  static inline CT log_##SFX(CT a) { return MD_LOG(a); }                      \
  static inline CT sqrt_##SFX(CT a) { return MD_SQRT(a); }                    \
  static inline CT tanh_##SFX(CT a) { return MD_TANH(a); }                    \
  static inline CT sigmoid_##SFX(CT a) { return 1 / (1 + MD_EXP(-a)); }       \
  static inline CT relu_##SFX(CT a) { return a < 0 ? 0 : a; }                 \
  static inline CT square_##SFX(CT a) { return a * a; }                       \
  static inline CT sign_##SFX(CT a) {                                         \
    return a > 0 ? (CT)1 : a < 0 ? (CT)-1 : a == 0 ? (CT)0 : a;              \
  }                                                                           \
  static inline CT rsqrt_##SFX(CT a) { return 1 / MD_SQRT(a); }               \
  static inline CT erf_##SFX(CT a) { return MD_ERF(a); }                      \
  static inline CT floor_##SFX(CT a) { return MD_FLOOR(a); }                  \
  static inline CT gelu_##SFX(CT a) {                                         \
    return (CT)0.5 * a * (1 + MD_ERF(a * (CT)M_SQRT1_2));                     \
  }                                                                           \
  static inline CT gelu_tanh_##SFX(CT a) {                                    \
    const CT k = (CT)(M_2_SQRTPI * M_SQRT1_2); /* sqrt(2 / pi) */             \
    return (CT)0.5 * a * (1 + MD_TANH(k * (a + (CT)0.044715 * a * a * a)));   \
  }                                                                           \
  static inline CT round_##SFX(CT a) { return MD_RINT(a); }
MD_FLOAT_TYPES(MD_FLOAT_UNARY)

/* One element function per MD_LIBM_UNARY row and float type. */
#define MD_LIBM_FN(UPPER, lower, SFX, CT)                                     \
  static inline CT lower##_##SFX(CT a) { return MD_##UPPER(a); }
#define MD_LIBM_FNS(ENUM, SFX, ST, CT, AT) MD_LIBM_UNARY(MD_LIBM_FN, SFX, CT)
MD_FLOAT_TYPES(MD_LIBM_FNS)

/* Integers: negation and squaring wrap (-MIN == MIN) instead of
 * overflowing. */
#define MD_INT_UNARY(ENUM, SFX, T, UT, LO, HI)                                \
  static inline T neg_##SFX(T a) { return (T)(0 - (UT)a); }                   \
  static inline T abs_##SFX(T a) { return a < 0 ? (T)(0 - (UT)a) : a; }       \
  static inline T relu_##SFX(T a) { return a < 0 ? 0 : a; }                   \
  static inline T square_##SFX(T a) { return (T)((UT)a * (UT)a); }            \
  static inline T sign_##SFX(T a) { return (T)((a > 0) - (a < 0)); }        \
  static inline T round_##SFX(T a) { return a; }
MD_INT_TYPES(MD_INT_UNARY)

/*** Loops ***/

typedef void (*md_unary_loop)(const void* x, void* y, int64_t n);

#define MD_UNARY_LOOP(OP, SFX, ST)                                            \
  static void OP##_loop_##SFX(const void* xv, void* yv, int64_t n) {          \
    const ST* x = xv;                                                         \
    ST* y = yv;                                                               \
    for (int64_t i = 0; i < n; ++i) {                                         \
      y[i] = md_store_##SFX(OP##_##SFX(md_load_##SFX(x[i])));                 \
    }                                                                         \
  }
#define MD_FLOAT_LOOPS(ENUM, SFX, ST, CT, AT)                                 \
  MD_UNARY_LOOP(neg, SFX, ST) MD_UNARY_LOOP(abs, SFX, ST)                     \
  MD_UNARY_LOOP(exp, SFX, ST) MD_UNARY_LOOP(log, SFX, ST)                     \
  MD_UNARY_LOOP(sqrt, SFX, ST) MD_UNARY_LOOP(tanh, SFX, ST)                   \
  MD_UNARY_LOOP(sigmoid, SFX, ST) MD_UNARY_LOOP(relu, SFX, ST)               \
  MD_UNARY_LOOP(square, SFX, ST) MD_UNARY_LOOP(sign, SFX, ST)                 \
  MD_UNARY_LOOP(rsqrt, SFX, ST) MD_UNARY_LOOP(erf, SFX, ST)                   \
  MD_UNARY_LOOP(floor, SFX, ST) MD_UNARY_LOOP(gelu, SFX, ST)                  \
  MD_UNARY_LOOP(gelu_tanh, SFX, ST) MD_UNARY_LOOP(round, SFX, ST)             \
  MD_LIBM_UNARY(MD_LIBM_LOOP, SFX, ST)
#define MD_LIBM_LOOP(UPPER, lower, SFX, ST) MD_UNARY_LOOP(lower, SFX, ST)
#define MD_INT_LOOPS(ENUM, SFX, T, UT, LO, HI)                                \
  MD_UNARY_LOOP(neg, SFX, T) MD_UNARY_LOOP(abs, SFX, T)                       \
  MD_UNARY_LOOP(relu, SFX, T) MD_UNARY_LOOP(square, SFX, T)                   \
  MD_UNARY_LOOP(sign, SFX, T) MD_UNARY_LOOP(round, SFX, T)
MD_FLOAT_TYPES(MD_FLOAT_LOOPS)
MD_INT_TYPES(MD_INT_LOOPS)

/* The loop for (op, dtype), or NULL if not supported. */
#define MD_LIBM_SLOT(UPPER, lower, SFX, B) [MD_##UPPER] = lower##_loop_##SFX,
static md_unary_loop md_select_loop(md_unary_op op, TF_DataType dtype) {
#define MD_FLOAT_CASE(ENUM, SFX, ST, CT, AT)                                  \
  case ENUM: {                                                                \
    static const md_unary_loop loops[MD_NUM_UNARY_OPS] = {                    \
        neg_loop_##SFX,  abs_loop_##SFX,  exp_loop_##SFX,  log_loop_##SFX,    \
        sqrt_loop_##SFX, tanh_loop_##SFX, sigmoid_loop_##SFX,                 \
        relu_loop_##SFX, square_loop_##SFX, sign_loop_##SFX,                  \
        rsqrt_loop_##SFX, erf_loop_##SFX, floor_loop_##SFX,                   \
        gelu_loop_##SFX, gelu_tanh_loop_##SFX, round_loop_##SFX,              \
        MD_LIBM_UNARY(MD_LIBM_SLOT, SFX, _)};                                 \
    return loops[op];                                                         \
  }
#define MD_INT_CASE(ENUM, SFX, T, UT, LO, HI)                                 \
  case ENUM: {                                                                \
    static const md_unary_loop loops[MD_NUM_UNARY_OPS] = {                    \
        [MD_NEG] = neg_loop_##SFX, [MD_ABS] = abs_loop_##SFX,                 \
        [MD_RELU] = relu_loop_##SFX, [MD_SQUARE] = square_loop_##SFX,         \
        [MD_SIGN] = sign_loop_##SFX, [MD_ROUND] = round_loop_##SFX};          \
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

/*** Unary task ***/

typedef struct md_unary_task {
  md_unary_loop loop;
  const void* x;
  void* y;
  int64_t n;
} md_unary_task;

static void md_unary_run(void* arg, SP_Stream stream) {
  (void)stream;
  md_unary_task* t = arg;
  t->loop(t->x, t->y, t->n);
}

static void md_unary_compute(TF_OpKernelContext* ctx, md_unary_op op) {
  md_shape shape;
  TF_Tensor* x = md_get_input(ctx, 0, &shape);
  TF_Tensor* y = NULL;
  if (x == NULL) return;

  TF_DataType dtype = TF_TensorType(x);
  md_unary_loop loop = md_select_loop(op, dtype);
  if (loop == NULL) {
    md_fail(ctx, TF_INVALID_ARGUMENT, "%.*s: unsupported dtype %d", MD_OP(ctx),
            (int)dtype);
    goto done;
  }
  y = md_allocate_output(ctx, 0, dtype, &shape);
  int64_t n = md_num_elements(&shape);
  if (y == NULL || n == 0) goto done;

  md_unary_task* task = malloc(sizeof(*task));
  if (task == NULL) {
    md_fail(ctx, TF_RESOURCE_EXHAUSTED, "%.*s: out of memory", MD_OP(ctx));
    goto done;
  }
  task->loop = loop;
  task->x = TF_TensorData(x);
  task->y = TF_TensorData(y);
  task->n = n;
  md_enqueue_small(ctx, md_unary_run, task, n);

done:
  md_delete_tensors(x, y, NULL, NULL);
}

#define MD_UNARY_COMPUTE(NAME, OP)                                            \
  void md_compute_##NAME(void* kernel, TF_OpKernelContext* ctx) {             \
    (void)kernel;                                                             \
    md_unary_compute(ctx, OP);                                                \
  }
MD_UNARY_COMPUTE(neg, MD_NEG)
MD_UNARY_COMPUTE(abs, MD_ABS)
MD_UNARY_COMPUTE(exp, MD_EXP)
MD_UNARY_COMPUTE(log, MD_LOG)
MD_UNARY_COMPUTE(sqrt, MD_SQRT)
MD_UNARY_COMPUTE(tanh, MD_TANH)
MD_UNARY_COMPUTE(sigmoid, MD_SIGMOID)
MD_UNARY_COMPUTE(relu, MD_RELU)
MD_UNARY_COMPUTE(square, MD_SQUARE)
MD_UNARY_COMPUTE(sign, MD_SIGN)
MD_UNARY_COMPUTE(rsqrt, MD_RSQRT)
MD_UNARY_COMPUTE(erf, MD_ERF)
MD_UNARY_COMPUTE(floor, MD_FLOOR)
MD_UNARY_COMPUTE(round, MD_ROUND)
#define MD_LIBM_COMPUTE(UPPER, lower, A, B) MD_UNARY_COMPUTE(lower, MD_##UPPER)
MD_LIBM_UNARY(MD_LIBM_COMPUTE, _, _)

/*** Gelu: the kernel state is the `approximate` attribute ***/

void* md_create_gelu(TF_OpKernelConstruction* ctx) {
  md_gelu_kernel* k = malloc(sizeof(*k));
  if (k == NULL) {
    md_construction_fail(ctx, TF_RESOURCE_EXHAUSTED, "Gelu: out of memory");
    return NULL;
  }
  k->approximate = md_get_bool_attr(ctx, "approximate", 0);
  return k;
}

void md_delete_gelu(void* kernel) { free(kernel); }

void md_compute_gelu(void* kernel, TF_OpKernelContext* ctx) {
  const md_gelu_kernel* k = kernel;
  md_unary_compute(ctx, k != NULL && k->approximate ? MD_GELU_TANH : MD_GELU);
}

/*** CheckNumerics ***/

/* Kernel state: the prefix of the error message,
 * "CheckNumerics on <device>: <message>" minus the device (known only in
 * compute_func), i.e. just the user's message. */
typedef struct md_check_kernel {
  char message[256];
} md_check_kernel;

void* md_create_check_numerics(TF_OpKernelConstruction* ctx) {
  md_check_kernel* k = calloc(1, sizeof(*k));
  if (k == NULL) {
    md_construction_fail(ctx, TF_RESOURCE_EXHAUSTED, "CheckNumerics: out of memory");
    return NULL;
  }
  TF_Status* status = TF_NewStatus();
  int32_t list_size = 0, total_size = 0;
  TF_OpKernelConstruction_GetAttrSize(ctx, "message", &list_size, &total_size,
                                      status);
  if (TF_GetCode(status) == TF_OK && total_size > 0) {
    size_t len = (size_t)total_size < sizeof(k->message) - 1
                     ? (size_t)total_size
                     : sizeof(k->message) - 1;
    /* Read the whole string into a temporary, keep what fits. */
    char* full = malloc((size_t)total_size);
    if (full != NULL) {
      TF_OpKernelConstruction_GetAttrString(ctx, "message", full,
                                            (size_t)total_size, status);
      if (TF_GetCode(status) == TF_OK) memcpy(k->message, full, len);
      free(full);
    }
  }
  TF_DeleteStatus(status);
  return k;
}

void md_delete_check_numerics(void* kernel) { free(kernel); }

/* The task owns the formatted message prefix. */
typedef struct md_check_task {
  TF_DataType dtype;
  const void* x;
  int64_t n;
  char prefix[512]; /* "CheckNumerics on <device>: <message>" */
} md_check_task;

/* Scans the data; returns bit 1 for NaN found and bit 2 for Inf found. */
#define MD_SCAN(ENUM, SFX, ST, CT, AT)                                        \
  case ENUM: {                                                                \
    const ST* x = t->x;                                                       \
    for (int64_t i = 0; i < t->n; ++i) {                                      \
      CT v = md_load_##SFX(x[i]);                                             \
      if (isnan(v)) found |= 1;                                               \
      else if (isinf(v)) found |= 2;                                          \
    }                                                                         \
    break;                                                                    \
  }

static void md_check_run(void* arg, SP_Stream stream) {
  md_check_task* t = arg;
  int found = 0;
  switch (t->dtype) {
    MD_FLOAT_TYPES(MD_SCAN)
    default:
      break;
  }
  if (found == 0) return;
  const char* what = found == 3 ? "Inf and NaN" : found == 1 ? "NaN" : "Inf";
  char message[640];
  snprintf(message, sizeof(message), "%s : Tensor had %s values", t->prefix, what);
  md_stream_set_error(stream, TF_INVALID_ARGUMENT, message);
}

void md_compute_check_numerics(void* kernel, TF_OpKernelContext* ctx) {
  md_check_kernel* k = kernel;
  md_shape shape;
  TF_Tensor* x = md_get_input(ctx, 0, &shape);
  if (x == NULL) return;

  /* The output is the input itself: no copy. */
  TF_Status* status = TF_NewStatus();
  TF_SetOutput(ctx, 0, x, status);
  if (TF_GetCode(status) != TF_OK) TF_OpKernelContext_Failure(ctx, status);
  int ok = TF_GetCode(status) == TF_OK;
  TF_DeleteStatus(status);

  int64_t n = md_num_elements(&shape);
  if (ok && n > 0) {
    md_check_task* task = malloc(sizeof(*task));
    if (task == NULL) {
      md_fail(ctx, TF_RESOURCE_EXHAUSTED, "CheckNumerics: out of memory");
    } else {
      TF_StringView device = TF_GetDeviceName(ctx);
      task->dtype = TF_TensorType(x);
      task->x = TF_TensorData(x);
      task->n = n;
      snprintf(task->prefix, sizeof(task->prefix), "CheckNumerics on %.*s: %s",
               (int)device.len, device.data, k != NULL ? k->message : "");
      md_enqueue(ctx, md_check_run, task);
    }
  }
  TF_DeleteTensor(x);
}
