/* Host reference device: Cast between every pair of supported dtypes.
 *
 * Values travel through one of two intermediate types, chunk by chunk:
 * floating-point sources are widened to double, integer and bool sources to
 * int64. The destination then converts from that intermediate:
 *   - to bool: x != 0
 *   - float to int: truncate toward zero; NaN gives 0 and values outside the
 *     destination range clamp to it (no undefined behaviour)
 *   - int to int: keep the low bits (two's complement wrap)
 *   - to half: one correctly rounded conversion from double; to bfloat16:
 *     through float32 with round-to-nearest-even
 *   - to the 8- and 4-bit floats: round-to-nearest-even from double; a value
 *     too large becomes infinity (E5M2), NaN (E4M3FN, the FNUZ types) or the
 *     largest value (E2M1), as ml_dtypes converts (ONNX's saturating Cast
 *     clamps before it casts)
 *   - float to a 4- or 2-bit integer: truncate toward zero; NaN and values
 *     outside the range give 0 (ml_dtypes' rule); int to them: low bits
 * uint64 sources read as double when the destination is a float type, so
 * values above INT64_MAX keep their magnitude. */
#include <math.h>
#include <stdlib.h>

#include "kernel_list.h"
#include "kernel_util.h"

/* Elements converted per chunk (intermediate buffers live on the stack). */
#define MD_CAST_CHUNK 512

/* Floating-point dtypes: X(enum, suffix, storage type). */
#define MD_CAST_FLOATS(X)                                                     \
  X(TF_HALF, half, _Float16)                                                  \
  X(TF_BFLOAT16, bf16, uint16_t)                                              \
  X(TF_FLOAT, f32, float)                                                     \
  X(TF_DOUBLE, f64, double)

/* Integer dtypes: X(enum, storage type, unsigned type, lowest, highest). */
#define MD_CAST_INTS(X)                                                       \
  X(TF_INT8, int8_t, uint8_t, INT8_MIN, INT8_MAX)                             \
  X(TF_UINT8, uint8_t, uint8_t, 0, UINT8_MAX)                                 \
  X(TF_INT16, int16_t, uint16_t, INT16_MIN, INT16_MAX)                        \
  X(TF_INT32, int32_t, uint32_t, INT32_MIN, INT32_MAX)                        \
  X(TF_INT64, int64_t, uint64_t, INT64_MIN, INT64_MAX)                        \
  X(TF_UINT16, uint16_t, uint16_t, 0, UINT16_MAX)                             \
  X(TF_UINT32, uint32_t, uint32_t, 0, UINT32_MAX)                             \
  X(TF_UINT64, uint64_t, uint64_t, 0, UINT64_MAX)

/* The small floats: sign, `ebits` exponent bits, `mbits` mantissa bits. */
typedef enum md_minifloat_kind {
  MD_MF_IEEE,   /* infinities and NaNs in the top exponent (E5M2) */
  MD_MF_FN,     /* finite; NaN is the all-ones pattern (E4M3FN) */
  MD_MF_FNUZ,   /* finite, no -0; NaN is the sign bit alone (0x80) */
  MD_MF_NONAN,  /* finite, no NaN (E2M1) */
} md_minifloat_kind;

typedef struct md_minifloat {
  int ebits, mbits, bias;
  md_minifloat_kind kind;
} md_minifloat;

/* The format of a small float dtype, or NULL for other dtypes. */
static const md_minifloat* md_minifloat_of(TF_DataType t) {
  static const md_minifloat e5m2 = {5, 2, 15, MD_MF_IEEE};
  static const md_minifloat e4m3fn = {4, 3, 7, MD_MF_FN};
  static const md_minifloat e4m3fnuz = {4, 3, 8, MD_MF_FNUZ};
  static const md_minifloat e5m2fnuz = {5, 2, 16, MD_MF_FNUZ};
  static const md_minifloat e2m1 = {2, 1, 1, MD_MF_NONAN};
  switch (t) {
    case TF_FLOAT8_E5M2: return &e5m2;
    case TF_FLOAT8_E4M3FN: return &e4m3fn;
    case TF_FLOAT8_E4M3FNUZ: return &e4m3fnuz;
    case TF_FLOAT8_E5M2FNUZ: return &e5m2fnuz;
    case TF_FLOAT4_E2M1FN: return &e2m1;
    default: return NULL;
  }
}

static double md_minifloat_load(const md_minifloat* f, uint8_t b) {
  int sign_bit = f->ebits + f->mbits;
  int emax = (1 << f->ebits) - 1, mmax = (1 << f->mbits) - 1;
  int sign = (b >> sign_bit) & 1;
  int e = (b >> f->mbits) & emax, m = b & mmax;
  /* (a NaN keeps its sign bit, as ml_dtypes reads it: the FNUZ NaN is negative) */
  if (f->kind == MD_MF_FNUZ && b == (1u << sign_bit)) return -NAN;
  if (f->kind == MD_MF_IEEE && e == emax) {
    return m ? (sign ? -NAN : NAN) : (sign ? -INFINITY : INFINITY);
  }
  if (f->kind == MD_MF_FN && e == emax && m == mmax) return sign ? -NAN : NAN;
  double v = e == 0 ? ldexp((double)m, 1 - f->bias - f->mbits)
                    : ldexp((double)(m + (1 << f->mbits)), e - f->bias - f->mbits);
  return sign ? -v : v;
}

static uint8_t md_minifloat_store(const md_minifloat* f, double v) {
  int sign_bit = f->ebits + f->mbits;
  uint8_t sign = signbit(v) ? (uint8_t)(1u << sign_bit) : 0;
  unsigned top;   /* the largest finite magnitude's bits */
  switch (f->kind) {
    case MD_MF_IEEE: top = (((1u << f->ebits) - 1) << f->mbits) - 1; break;
    case MD_MF_FN: top = (1u << sign_bit) - 2; break;
    default: top = (1u << sign_bit) - 1; break;
  }
  uint8_t nan = f->kind == MD_MF_FNUZ ? (uint8_t)(1u << sign_bit)
                : f->kind == MD_MF_FN ? (uint8_t)(sign | (top + 1))
                : f->kind == MD_MF_IEEE ? (uint8_t)(sign | (top + 1) | (1u << (f->mbits - 1)))
                : (uint8_t)(sign ^ (1u << sign_bit));   /* E2M1: ml_dtypes' zero */
  uint8_t over = f->kind == MD_MF_IEEE ? (uint8_t)(sign | (top + 1))
                 : f->kind == MD_MF_NONAN ? (uint8_t)(sign | top) : nan;
  if (isnan(v)) return nan;
  double a = fabs(v);
  if (isinf(a)) return over;
  if (a == 0) return f->kind == MD_MF_FNUZ ? 0 : sign;
  int k;
  frexp(a, &k);   /* a = [0.5, 1) * 2^k: the leading bit is 2^(k - 1) */
  int lead = k - 1 < 1 - f->bias ? 1 - f->bias : k - 1;
  if (lead - f->bias > (1 << f->ebits)) return over;
  double n = rint(ldexp(a, f->mbits - lead));   /* ties to even */
  unsigned bits = k - 1 < 1 - f->bias
                      ? (unsigned)n   /* subnormal (or rounded up to the smallest normal) */
                      : (unsigned)((lead + f->bias - 1) << f->mbits) + (unsigned)n;
  if (bits > top) return over;
  if (bits == 0 && f->kind == MD_MF_FNUZ) return 0;
  return (uint8_t)(sign | bits);
}

/* The 4- and 2-bit integers (low bits of a byte): X(enum, bits, signed). */
#define MD_CAST_NARROW_INTS(X)                                                \
  X(TF_INT4, 4, 1)                                                            \
  X(TF_UINT4, 4, 0)                                                           \
  X(TF_INT2, 2, 1)                                                            \
  X(TF_UINT2, 2, 0)

static inline int64_t md_narrow_int_load(uint8_t b, int bits, int is_signed) {
  int64_t v = b & ((1u << bits) - 1);
  return is_signed && (v >> (bits - 1)) ? v - (1 << bits) : v;
}

static inline uint8_t md_narrow_int_from_double(double v, int bits, int is_signed) {
  double t = trunc(v);
  double lo = is_signed ? -(double)(1 << (bits - 1)) : 0;
  double hi = is_signed ? (double)((1 << (bits - 1)) - 1) : (double)((1 << bits) - 1);
  if (!(t >= lo && t <= hi)) return 0;   /* NaN too */
  return (uint8_t)((int)t & ((1 << bits) - 1));
}

/* 1 when a cast from `src` to `dst` goes through double. */
static int md_cast_via_double(TF_DataType src, TF_DataType dst) {
  if (md_is_float(src) || md_minifloat_of(src) != NULL) return 1;
  return src == TF_UINT64 && (md_is_float(dst) || md_minifloat_of(dst) != NULL);
}

/* Conversions from the intermediates to half / bfloat16 (the other float
 * types are plain C casts). */
static inline _Float16 md_half_from_double(double v) { return (_Float16)v; }
static inline _Float16 md_half_from_int64(int64_t v) { return (_Float16)(float)v; }
static inline uint16_t md_bf16_from_double(double v) {
  return md_float_to_bf16((float)v);
}
static inline uint16_t md_bf16_from_int64(int64_t v) {
  return md_float_to_bf16((float)v);
}
static inline float md_f32_from_double(double v) { return (float)v; }
static inline float md_f32_from_int64(int64_t v) { return (float)v; }
static inline double md_f64_from_double(double v) { return v; }
static inline double md_f64_from_int64(int64_t v) { return (double)v; }

/* src[0..n) -> double. */
static void md_load_doubles(TF_DataType t, const void* src, double* out,
                            int64_t n) {
  switch (t) {
#define MD_CASE(ENUM, SFX, ST)                                                \
  case ENUM:                                                                  \
    for (int64_t i = 0; i < n; ++i) out[i] = md_load_##SFX(((const ST*)src)[i]); \
    break;
    MD_CAST_FLOATS(MD_CASE)
#undef MD_CASE
    case TF_UINT64:
      for (int64_t i = 0; i < n; ++i) out[i] = (double)((const uint64_t*)src)[i];
      break;
    default: {
      const md_minifloat* f = md_minifloat_of(t);
      if (f == NULL) break;
      for (int64_t i = 0; i < n; ++i) out[i] = md_minifloat_load(f, ((const uint8_t*)src)[i]);
      break;
    }
  }
}

/* src[0..n) -> int64 (bool reads as 0 / 1). */
static void md_load_int64s(TF_DataType t, const void* src, int64_t* out,
                           int64_t n) {
  switch (t) {
    case TF_BOOL:
      for (int64_t i = 0; i < n; ++i) out[i] = ((const uint8_t*)src)[i] != 0;
      break;
#define MD_CASE(ENUM, T, UT, LO, HI)                                          \
  case ENUM:                                                                  \
    for (int64_t i = 0; i < n; ++i) out[i] = ((const T*)src)[i];              \
    break;
    MD_CAST_INTS(MD_CASE)
#undef MD_CASE
#define MD_CASE(ENUM, BITS, SIGNED)                                           \
  case ENUM:                                                                  \
    for (int64_t i = 0; i < n; ++i)                                           \
      out[i] = md_narrow_int_load(((const uint8_t*)src)[i], BITS, SIGNED);    \
    break;
    MD_CAST_NARROW_INTS(MD_CASE)
#undef MD_CASE
    default:
      break;
  }
}

/* double -> dst[0..n). */
static void md_store_doubles(TF_DataType t, const double* in, void* dst,
                             int64_t n) {
  switch (t) {
    case TF_BOOL:
      for (int64_t i = 0; i < n; ++i) ((uint8_t*)dst)[i] = in[i] != 0;
      break;
#define MD_FLOAT_CASE(ENUM, SFX, ST)                                          \
  case ENUM:                                                                  \
    for (int64_t i = 0; i < n; ++i) ((ST*)dst)[i] = md_##SFX##_from_double(in[i]); \
    break;
    MD_CAST_FLOATS(MD_FLOAT_CASE)
#undef MD_FLOAT_CASE
#define MD_INT_CASE(ENUM, T, UT, LO, HI)                                      \
  case ENUM:                                                                  \
    for (int64_t i = 0; i < n; ++i) {                                         \
      double v = in[i];                                                       \
      T r;                                                                    \
      if (isnan(v)) r = 0;                                                    \
      else if (v <= (double)(LO)) r = (LO);                                   \
      else if (v >= (double)(HI)) r = (HI);                                   \
      else r = (T)v;                                                          \
      ((T*)dst)[i] = r;                                                       \
    }                                                                         \
    break;
    MD_CAST_INTS(MD_INT_CASE)
#undef MD_INT_CASE
#define MD_CASE(ENUM, BITS, SIGNED)                                           \
  case ENUM:                                                                  \
    for (int64_t i = 0; i < n; ++i)                                           \
      ((uint8_t*)dst)[i] = md_narrow_int_from_double(in[i], BITS, SIGNED);    \
    break;
    MD_CAST_NARROW_INTS(MD_CASE)
#undef MD_CASE
    default: {
      const md_minifloat* f = md_minifloat_of(t);
      if (f == NULL) break;
      for (int64_t i = 0; i < n; ++i) ((uint8_t*)dst)[i] = md_minifloat_store(f, in[i]);
      break;
    }
  }
}

/* int64 -> dst[0..n). */
static void md_store_int64s(TF_DataType t, const int64_t* in, void* dst,
                            int64_t n) {
  switch (t) {
    case TF_BOOL:
      for (int64_t i = 0; i < n; ++i) ((uint8_t*)dst)[i] = in[i] != 0;
      break;
#define MD_FLOAT_CASE(ENUM, SFX, ST)                                          \
  case ENUM:                                                                  \
    for (int64_t i = 0; i < n; ++i) ((ST*)dst)[i] = md_##SFX##_from_int64(in[i]); \
    break;
    MD_CAST_FLOATS(MD_FLOAT_CASE)
#undef MD_FLOAT_CASE
#define MD_INT_CASE(ENUM, T, UT, LO, HI)                                      \
  case ENUM:                                                                  \
    for (int64_t i = 0; i < n; ++i) ((T*)dst)[i] = (T)(UT)(uint64_t)in[i];    \
    break;
    MD_CAST_INTS(MD_INT_CASE)
#undef MD_INT_CASE
#define MD_CASE(ENUM, BITS, SIGNED)                                           \
  case ENUM:                                                                  \
    for (int64_t i = 0; i < n; ++i)                                           \
      ((uint8_t*)dst)[i] = (uint8_t)((uint64_t)in[i] & ((1u << BITS) - 1));   \
    break;
    MD_CAST_NARROW_INTS(MD_CASE)
#undef MD_CASE
    default: {
      const md_minifloat* f = md_minifloat_of(t);
      if (f == NULL) break;
      for (int64_t i = 0; i < n; ++i)
        ((uint8_t*)dst)[i] = md_minifloat_store(f, (double)in[i]);
      break;
    }
  }
}

typedef struct md_cast_task {
  TF_DataType src_type, dst_type;
  const char* x;
  char* y;
  int64_t n;
} md_cast_task;

static void md_cast_run(void* arg, SP_Stream stream) {
  (void)stream;
  md_cast_task* t = arg;
  size_t src_size = TF_DataTypeSize(t->src_type);
  size_t dst_size = TF_DataTypeSize(t->dst_type);
  for (int64_t start = 0; start < t->n; start += MD_CAST_CHUNK) {
    int64_t m = t->n - start < MD_CAST_CHUNK ? t->n - start : MD_CAST_CHUNK;
    const char* src = t->x + start * (int64_t)src_size;
    char* dst = t->y + start * (int64_t)dst_size;
    if (md_cast_via_double(t->src_type, t->dst_type)) {
      double buf[MD_CAST_CHUNK];
      md_load_doubles(t->src_type, src, buf, m);
      md_store_doubles(t->dst_type, buf, dst, m);
    } else {
      int64_t buf[MD_CAST_CHUNK];
      md_load_int64s(t->src_type, src, buf, m);
      md_store_int64s(t->dst_type, buf, dst, m);
    }
  }
}

void md_compute_cast(void* kernel, TF_OpKernelContext* ctx) {
  (void)kernel;
  md_shape shape;
  TF_Tensor* x = md_get_input(ctx, 0, &shape);
  TF_Tensor* y = NULL;
  if (x == NULL) return;

  TF_DataType src_type = TF_TensorType(x);
  TF_DataType dst_type = TF_ExpectedOutputDataType(ctx, 0);
  if (src_type == dst_type) { /* nothing to convert: share the buffer */
    TF_Status* status = TF_NewStatus();
    TF_SetOutput(ctx, 0, x, status);
    if (TF_GetCode(status) != TF_OK) TF_OpKernelContext_Failure(ctx, status);
    TF_DeleteStatus(status);
    goto done;
  }
  if (TF_DataTypeSize(src_type) == 0 || TF_DataTypeSize(dst_type) == 0) {
    md_fail(ctx, TF_INVALID_ARGUMENT, "Cast: unsupported cast from dtype %d to "
            "dtype %d", (int)src_type, (int)dst_type);
    goto done;
  }
  y = md_allocate_output(ctx, 0, dst_type, &shape);
  int64_t n = md_num_elements(&shape);
  if (y == NULL || n == 0) goto done;

  md_cast_task* task = malloc(sizeof(*task));
  if (task == NULL) {
    md_fail(ctx, TF_RESOURCE_EXHAUSTED, "Cast: out of memory");
    goto done;
  }
  task->src_type = src_type;
  task->dst_type = dst_type;
  task->x = TF_TensorData(x);
  task->y = TF_TensorData(y);
  task->n = n;
  md_enqueue_small(ctx, md_cast_run, task, n);

done:
  md_delete_tensors(x, y, NULL, NULL);
}
