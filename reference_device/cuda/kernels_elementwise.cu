// Elementwise arithmetic: the broadcasting binary ops (AddV2, Sub, Mul,
// RealDiv, Maximum, Minimum, Pow, FloorDiv, FloorMod), the unary ops (Neg,
// Abs, Exp, Log, Sqrt, Tanh, Sigmoid, Relu, Square, Rsqrt, Erf, Floor, Sign,
// Round, Gelu and the one-function float ops of PG_LIBM_UNARY: Sin, Cos,
// ..., Ceil, Reciprocal), the activation gradients (ReluGrad, SigmoidGrad, TanhGrad,
// RsqrtGrad, SqrtGrad, GeluGrad), ZerosLike, OnesLike and Cast. The
// broadcasting machinery is in elementwise.h.
//
// Integer Pow with a negative exponent and integer FloorDiv / FloorMod by
// zero are errors, found by a check kernel over the exponent / divisor and
// reported asynchronously (AsyncCheck); the main kernel then writes 0 there.
#include <cmath>
#include <cstring>
#include <limits>

#include "elementwise.h"

namespace pgcuda {
namespace {

// ---------------------------------------------------------------------------
// Operations. `C` is the compute type (float for the 16-bit floats).

template <typename C>
__device__ __forceinline__ C wrap_add(C a, C b) {
  if constexpr (std::is_integral<C>::value) {
    using U = typename std::make_unsigned<C>::type;
    return static_cast<C>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}

struct AddOp {
  template <typename C> __device__ static C f(C a, C b) { return wrap_add(a, b); }
};
struct SubOp {
  template <typename C> __device__ static C f(C a, C b) {
    if constexpr (std::is_integral<C>::value) {
      using U = typename std::make_unsigned<C>::type;
      return static_cast<C>(static_cast<U>(a) - static_cast<U>(b));
    } else {
      return a - b;
    }
  }
};
struct MulOp {
  template <typename C> __device__ static C f(C a, C b) {
    if constexpr (std::is_integral<C>::value) {
      using U = typename std::make_unsigned<C>::type;
      return static_cast<C>(static_cast<U>(a) * static_cast<U>(b));
    } else {
      return a * b;
    }
  }
};
struct DivOp {
  template <typename C> __device__ static C f(C a, C b) {
    if constexpr (std::is_integral<C>::value) {
      // C semantics (truncation); x/0 gives 0 and MIN/-1 wraps, never traps.
      using U = typename std::make_unsigned<C>::type;
      if (b == 0) return 0;
      if (b == -1) return static_cast<C>(U(0) - static_cast<U>(a));
      return a / b;
    } else {
      return a / b;
    }
  }
};
// Maximum / Minimum propagate NaN like numpy.
struct MaxOp {
  template <typename C> __device__ static C f(C a, C b) {
    return (a > b || a != a) ? a : b;
  }
};
struct MinOp {
  template <typename C> __device__ static C f(C a, C b) {
    return (a < b || a != a) ? a : b;
  }
};

__device__ __forceinline__ float m_exp(float x) { return expf(x); }
__device__ __forceinline__ double m_exp(double x) { return exp(x); }
__device__ __forceinline__ float m_log(float x) { return logf(x); }
__device__ __forceinline__ double m_log(double x) { return log(x); }
__device__ __forceinline__ float m_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double m_sqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float m_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ double m_tanh(double x) { return tanh(x); }

struct NegOp {
  template <typename C> __device__ static C f(C x) {
    if constexpr (std::is_integral<C>::value) {
      using U = typename std::make_unsigned<C>::type;
      return static_cast<C>(U(0) - static_cast<U>(x));
    } else {
      return -x;
    }
  }
};
struct AbsOp {
  template <typename C> __device__ static C f(C x) {
    if constexpr (std::is_integral<C>::value) {
      return x < 0 ? NegOp::f(x) : x;
    } else {
      return x < C(0) ? -x : (x == C(0) ? C(0) : x);  // abs(-0) = +0
    }
  }
};
struct ExpOp { template <typename C> __device__ static C f(C x) { return m_exp(x); } };
struct LogOp { template <typename C> __device__ static C f(C x) { return m_log(x); } };
struct SqrtOp { template <typename C> __device__ static C f(C x) { return m_sqrt(x); } };
struct TanhOp { template <typename C> __device__ static C f(C x) { return m_tanh(x); } };
struct SigmoidOp {
  template <typename C> __device__ static C f(C x) {
    return C(1) / (C(1) + m_exp(-x));
  }
};
// Relu keeps NaN (like numpy's maximum(x, 0)).
struct ReluOp {
  template <typename C> __device__ static C f(C x) {
    return x > C(0) ? x : (x != x ? x : C(0));
  }
};


__device__ __forceinline__ float m_erf(float x) { return erff(x); }
__device__ __forceinline__ double m_erf(double x) { return erf(x); }
__device__ __forceinline__ float m_erfc(float x) { return erfcf(x); }
__device__ __forceinline__ double m_erfc(double x) { return erfc(x); }
__device__ __forceinline__ float m_floor(float x) { return floorf(x); }
__device__ __forceinline__ double m_floor(double x) { return floor(x); }
__device__ __forceinline__ float m_pow(float x, float y) { return powf(x, y); }
__device__ __forceinline__ double m_pow(double x, double y) { return pow(x, y); }
__device__ __forceinline__ float m_fmod(float x, float y) { return fmodf(x, y); }
__device__ __forceinline__ double m_fmod(double x, double y) { return fmod(x, y); }

struct SquareOp {
  template <typename C> __device__ static C f(C x) { return MulOp::f(x, x); }
};
struct RsqrtOp {
  template <typename C> __device__ static C f(C x) { return C(1) / m_sqrt(x); }
};
struct ErfOp { template <typename C> __device__ static C f(C x) { return m_erf(x); } };
struct FloorOp { template <typename C> __device__ static C f(C x) { return m_floor(x); } };
// Round: half to even (rint in the default rounding mode), as TensorFlow;
// registered for the float types only (TensorFlow's raw Round of integers
// gives zeros; pg.round returns an integer tensor unchanged without a kernel).
struct RoundOp {
  template <typename C> __device__ static C f(C x) {
    if constexpr (std::is_integral<C>::value) {
      return x;
    } else {
      return rint(x);
    }
  }
};

// The float ops that are one CUDA math function each: X(op name, function).
// Each row makes a functor <name>Op over the float and double overloads
// (the 16-bit floats compute in float) and one registration. Reciprocal
// is 1 / x.
__device__ __forceinline__ float pg_reciprocal(float x) { return 1.0f / x; }
__device__ __forceinline__ double pg_reciprocal(double x) { return 1.0 / x; }
#define PG_LIBM_UNARY(X)                                                       \
  X(Sin, sin) X(Cos, cos) X(Tan, tan) X(Asin, asin) X(Acos, acos)              \
  X(Atan, atan) X(Sinh, sinh) X(Cosh, cosh) X(Asinh, asinh) X(Acosh, acosh)    \
  X(Atanh, atanh) X(Expm1, expm1) X(Log1p, log1p) X(Erfc, erfc) X(Ceil, ceil)  \
  X(Reciprocal, pg_reciprocal)
#define PG_LIBM_OP(NAME, FN)                                                   \
  struct NAME##Op {                                                            \
    template <typename C> __device__ static C f(C x) { return FN(x); }         \
  };                                                                           \
  constexpr char k##NAME[] = #NAME;
PG_LIBM_UNARY(PG_LIBM_OP)
#undef PG_LIBM_OP

// Sign keeps NaN.
struct SignOp {
  template <typename C> __device__ static C f(C x) {
    if constexpr (std::is_integral<C>::value) {
      return static_cast<C>((x > 0) - (x < 0));
    } else {
      return x > C(0) ? C(1) : (x < C(0) ? C(-1) : x);
    }
  }
};

// Gelu: x * Phi(x) (exact) or its tanh approximation.
constexpr double kSqrt2OverPi = 0.79788456080286535588;   // sqrt(2 / pi)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;    // 1 / sqrt(2 pi)
constexpr double kSqrtHalf = 0.70710678118654752440;      // 1 / sqrt(2)
constexpr double kGeluCubic = 0.044715;

struct GeluExactOp {
  template <typename C> __device__ static C f(C x) {
    return C(0.5) * x * m_erfc(-x * C(kSqrtHalf));
  }
};
struct GeluTanhOp {
  template <typename C> __device__ static C f(C x) {
    const C u = C(kSqrt2OverPi) * (x + C(kGeluCubic) * x * x * x);
    return C(0.5) * x * (C(1) + m_tanh(u));
  }
};

// Gradients: f(first input, second input) in TensorFlow's argument order.
struct ReluGradOp {  // (gradients, features)
  template <typename C> __device__ static C f(C g, C x) { return x > C(0) ? g : C(0); }
};
struct SigmoidGradOp {  // (y, dy)
  template <typename C> __device__ static C f(C y, C dy) { return dy * y * (C(1) - y); }
};
struct TanhGradOp {  // (y, dy)
  template <typename C> __device__ static C f(C y, C dy) { return dy * (C(1) - y * y); }
};
struct RsqrtGradOp {  // (y, dy): d/dx x^-1/2 = -y^3 / 2
  template <typename C> __device__ static C f(C y, C dy) { return C(-0.5) * dy * y * y * y; }
};
struct SqrtGradOp {  // (y, dy): d/dx x^1/2 = 1 / (2 y)
  template <typename C> __device__ static C f(C y, C dy) { return C(0.5) * dy / y; }
};
struct GeluExactGradOp {  // (gradients, features)
  template <typename C> __device__ static C f(C g, C x) {
    const C cdf = C(0.5) * m_erfc(-x * C(kSqrtHalf));
    const C pdf = C(kInvSqrt2Pi) * m_exp(C(-0.5) * x * x);
    return g * (cdf + x * pdf);
  }
};
struct GeluTanhGradOp {  // (gradients, features)
  template <typename C> __device__ static C f(C g, C x) {
    const C x2 = x * x;
    const C t = m_tanh(C(kSqrt2OverPi) * (x + C(kGeluCubic) * x2 * x));
    const C du = C(kSqrt2OverPi) * (C(1) + C(3 * kGeluCubic) * x2);
    return g * (C(0.5) * (C(1) + t) + C(0.5) * x * (C(1) - t * t) * du);
  }
};

// Pow. Integers: exponentiation by squaring with wrapping arithmetic; a
// negative exponent (an error, see the check) gives 0.
struct PowOp {
  template <typename C> __device__ static C f(C x, C y) {
    if constexpr (std::is_integral<C>::value) {
      using U = typename std::make_unsigned<C>::type;
      if (y < 0) return 0;
      U base = static_cast<U>(x), result = 1;
      for (C e = y; e > 0; e >>= 1) {
        if (e & 1) result *= base;
        base *= base;
      }
      return static_cast<C>(result);
    } else {
      return m_pow(x, y);
    }
  }
};

// FloorDiv / FloorMod as TensorFlow defines them. T is the element type: for
// the 16-bit floats the quotient is rounded to T before the floor, as
// TensorFlow's 16-bit arithmetic does. Integer division by zero (an error,
// see the check) gives 0; MIN / -1 wraps.
template <typename T>
struct FloorDivOp {
  template <typename C> __device__ static C f(C x, C y) {
    if constexpr (std::is_integral<C>::value) {
      using U = typename std::make_unsigned<C>::type;
      if (y == 0) return 0;
      if (y == -1) return static_cast<C>(U(0) - static_cast<U>(x));
      const C q = x / y;
      return (q * y != x && ((x < 0) != (y < 0))) ? q - 1 : q;
    } else {
      return m_floor(to_compute(from_compute<T>(x / y)));
    }
  }
};
template <typename T>
struct FloorModOp {
  template <typename C> __device__ static C f(C x, C y) {
    if constexpr (std::is_integral<C>::value) {
      if (y == 0 || y == -1) return 0;
      const C r = x % y;
      return (r != 0 && ((y < 0) != (r < 0))) ? r + y : r;
    } else {
      const C r = m_fmod(x, y);
      return (r != C(0) && ((y < C(0)) != (r < C(0)))) ? r + y : r;
    }
  }
};

// ---------------------------------------------------------------------------
// Binary and unary compute functions.

// A bad value of an integer operand: a zero divisor or a negative exponent.
struct ZeroPred {
  template <typename T> __device__ static bool bad(T v) { return v == 0; }
};
struct NegativePred {
  template <typename T> __device__ static bool bad(T v) { return v < 0; }
};

template <typename T, typename Pred>
__global__ void find_bad_kernel(const T* __restrict__ v, int64_t n, DeviceCheck* rec) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    if (Pred::bad(v[i])) record_bad(rec, i, static_cast<long long>(v[i]));
  }
}

// Checks the second operand of an integer op for values Pred calls bad and
// enqueues the asynchronous report `what`. No-op for other types.
template <typename T, typename Pred>
bool check_int_operand(OpCall& c, const void* y, int64_t n, const char* name, const char* what) {
  if constexpr (!std::is_integral<T>::value) {
    return true;
  } else {
    if (n == 0) return true;
    AsyncCheck check(c);
    if (!check.begin()) return false;
    find_bad_kernel<T, Pred><<<grid_for(n, c.sm_count()), kThreads, 0, c.stream()>>>(
        static_cast<const T*>(y), n, check.record());
    if (!c.check_launch(name)) return false;
    std::string text = what;
    return check.finish(TF_INVALID_ARGUMENT, [text](const DeviceCheck& rec) {
      return text + " (the second input holds " + std::to_string(rec.value) + " at index " +
             std::to_string(rec.pos) + ")";
    });
  }
}

// What a binary op checks in integer operands.
enum class IntCheck { kNone, kZeroDivisor, kNegativeExponent };

// Op<T>::type is the functor for element type T.
template <typename Op> struct Fixed {
  template <typename T> using type = Op;
};
template <template <typename> class OpT> struct PerType {
  template <typename T> using type = OpT<T>;
};

// SMALL_INTS: int8, uint8 and int16 too (bool is never registered).
template <typename OpSel, IntCheck CHECK, bool FLOAT_ONLY = false, bool SMALL_INTS = false>
void binary_compute(void* kernel, TF_OpKernelContext* ctx) {
  const char* name = static_cast<const char*>(kernel);
  OpCall c(ctx, OpCall::kMayDefer);
  if (!c.ok()) return;
  BinaryIO io;
  if (!binary_setup(c, name, TF_DataType(0), &io)) return;
  if (io.so.num_elements() == 0) return;
  const void* pa = TF_TensorData(io.a.get());
  const void* pb = TF_TensorData(io.b.get());
  void* po = TF_TensorData(io.out.get());
  auto run = [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Op = typename OpSel::template type<T>;
    if (CHECK == IntCheck::kZeroDivisor) {
      if (!check_int_operand<T, ZeroPred>(c, pb, io.sb.num_elements(), name,
                                          "Integer division by zero")) {
        return;
      }
    } else if (CHECK == IntCheck::kNegativeExponent) {
      if (!check_int_operand<T, NegativePred>(c, pb, io.sb.num_elements(), name,
                                              "Integers to negative integer powers are not "
                                              "allowed")) {
        return;
      }
    }
    launch_binary<T, T, Op>(c, io.sa, io.sb, io.so, pa, pb, po, name);
  };
  bool handled;
  if constexpr (FLOAT_ONLY) {
    handled = dispatch_float(io.dt, run);
  } else if constexpr (SMALL_INTS) {
    handled = dispatch_all<uint8_t>(io.dt, run);
  } else {
    handled = dispatch_numeric(io.dt, run);
  }
  if (!handled) c.fail(TF_UNIMPLEMENTED, "%s: dtype %s", name, dtype_name(io.dt));
}

// Gradient ops: two inputs of the same shape, no broadcasting.
template <typename Op, bool FLOAT_ONLY>
void grad_compute(void* kernel, TF_OpKernelContext* ctx) {
  const char* name = static_cast<const char*>(kernel);
  OpCall c(ctx, OpCall::kMayDefer);
  if (!c.ok()) return;
  TensorPtr a = c.input(0);
  if (!a) return;
  TensorPtr b = c.input(1);
  if (!b) return;
  const Shape sa = Shape::of(a.get()), sb = Shape::of(b.get());
  bool same = sa.rank == sb.rank;
  for (int i = 0; same && i < sa.rank; ++i) same = sa.dims[i] == sb.dims[i];
  if (!same) {
    char b1[256], b2[256];
    c.fail(TF_INVALID_ARGUMENT, "%s: the two inputs must have the same shape, got %s and %s",
           name, shape_str(sa, b1, sizeof(b1)), shape_str(sb, b2, sizeof(b2)));
    return;
  }
  const TF_DataType dt = TF_TensorType(a.get());
  TensorPtr out = c.output(0, dt, sa);
  if (!out) return;
  if (sa.num_elements() == 0) return;
  auto run = [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_binary<T, T, Op>(c, sa, sb, sa, TF_TensorData(a.get()), TF_TensorData(b.get()),
                            TF_TensorData(out.get()), name);
  };
  bool handled;
  if constexpr (FLOAT_ONLY) {
    handled = dispatch_float(dt, run);
  } else {
    handled = dispatch_numeric(dt, run);
  }
  if (!handled) c.fail(TF_UNIMPLEMENTED, "%s: dtype %s", name, dtype_name(dt));
}

template <typename Op, bool FLOAT_ONLY>
void unary_compute(void* kernel, TF_OpKernelContext* ctx) {
  const char* name = static_cast<const char*>(kernel);
  OpCall c(ctx, OpCall::kMayDefer);
  if (!c.ok()) return;
  TensorPtr x = c.input(0);
  if (!x) return;
  const Shape s = Shape::of(x.get());
  const TF_DataType dt = TF_TensorType(x.get());
  TensorPtr out = c.output(0, dt, s);
  if (!out) return;
  const int64_t n = s.num_elements();
  if (n == 0) return;
  const void* in = TF_TensorData(x.get());
  void* o = TF_TensorData(out.get());
  auto run = [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_unary<T, T, Op>(c, in, o, n, name);
  };
  bool handled;
  if constexpr (FLOAT_ONLY) {
    handled = dispatch_float(dt, run);
  } else {
    handled = dispatch_numeric(dt, run);
  }
  if (!handled) c.fail(TF_UNIMPLEMENTED, "%s: dtype %s", name, dtype_name(dt));
}

// Gelu and GeluGrad: the kernel state is the `approximate` attribute.
void* gelu_create(TF_OpKernelConstruction* ctx) {
  TF_StringView op = TF_OpKernelConstruction_GetName(ctx);
  const bool grad = op.len == 8;  // "GeluGrad"
  AttrReader attrs(ctx, grad ? "GeluGrad" : "Gelu");
  const bool approximate = attrs.get_bool("approximate", false);
  if (!attrs.ok()) return nullptr;
  static char kExact[] = "exact", kApprox[] = "approximate";
  return approximate ? kApprox : kExact;
}
bool gelu_is_approximate(const void* state) {
  return state != nullptr && static_cast<const char*>(state)[0] == 'a';
}
void gelu_compute(void* kernel, TF_OpKernelContext* ctx) {
  static char kName[] = "Gelu";
  if (gelu_is_approximate(kernel)) {
    unary_compute<GeluTanhOp, true>(kName, ctx);
  } else {
    unary_compute<GeluExactOp, true>(kName, ctx);
  }
}
void gelu_grad_compute(void* kernel, TF_OpKernelContext* ctx) {
  static char kName[] = "GeluGrad";
  if (gelu_is_approximate(kernel)) {
    grad_compute<GeluTanhGradOp, true>(kName, ctx);
  } else {
    grad_compute<GeluExactGradOp, true>(kName, ctx);
  }
}

// ---------------------------------------------------------------------------
// ZerosLike, OnesLike

template <typename U>
__global__ void fill_value_kernel(U* __restrict__ out, U v, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    out[i] = v;
  }
}

// The bit pattern of 1 in dtype `dt` (0 if unknown).
uint64_t one_bits(TF_DataType dt) {
  switch (dt) {
    case TF_HALF: return 0x3C00u;
    case TF_BFLOAT16: return 0x3F80u;
    case TF_FLOAT: return 0x3F800000u;
    case TF_DOUBLE: return 0x3FF0000000000000ull;
    default: return 1u;  // bool and the integers
  }
}

template <bool ONES>
void fill_like_compute(void*, TF_OpKernelContext* ctx) {
  OpCall c(ctx, OpCall::kMayDefer);
  if (!c.ok()) return;
  TensorPtr x = c.input(0);
  if (!x) return;
  const Shape s = Shape::of(x.get());
  const TF_DataType dt = TF_TensorType(x.get());
  TensorPtr out = c.output(0, dt, s);
  if (!out) return;
  const int64_t n = s.num_elements();
  if (n == 0) return;
  void* o = TF_TensorData(out.get());
  const size_t elem = TF_DataTypeSize(dt);
  const uint64_t bits = ONES ? one_bits(dt) : 0;
  dispatch_size(elem, [&](auto tag) {
    using U = typename decltype(tag)::type;
    c.launch(ONES ? "OnesLike" : "ZerosLike", fill_value_kernel<U>,
             dim3(grid_for_stream(n, c.sm_count(), n * static_cast<int64_t>(sizeof(U)),
                                  c.l2_bytes())),
             dim3(kThreads), static_cast<U*>(o), static_cast<U>(bits), n);
  });
}

// ---------------------------------------------------------------------------
// Cast

template <typename T>
__host__ __device__ constexpr bool is_bool_type() {
  return std::is_same<T, pg_bool>::value;
}
template <typename T>
__host__ __device__ constexpr bool is_int_type() {
  return std::is_integral<T>::value;
}
template <typename T>
__host__ __device__ constexpr bool is_half_type() {
  return std::is_same<T, __half>::value || std::is_same<T, __nv_bfloat16>::value;
}

// Clamps a floating value into the range of integer D (NaN -> 0), then
// truncates toward zero.
template <typename D> struct IntRange {
  static constexpr D lo = std::numeric_limits<D>::lowest();
  static constexpr D hi = std::numeric_limits<D>::max();
};

template <typename D>
__device__ __forceinline__ D float_to_int(double v) {
  if (v != v) return D(0);
  const double lo = static_cast<double>(IntRange<D>::lo);
  // max() of a 64-bit type is not a double; max + 1 (a power of two) is the
  // first value out of range for every integer type.
  const double hi_excl = static_cast<double>(IntRange<D>::hi) + 1.0;
  if (v <= lo) return IntRange<D>::lo;
  if (v >= hi_excl) return IntRange<D>::hi;
  return static_cast<D>(v);
}

template <typename D, typename S>
__device__ __forceinline__ D cast_value(S x) {
  if constexpr (is_bool_type<S>()) {
    const int64_t v = x.v != 0 ? 1 : 0;
    if constexpr (is_bool_type<D>()) return pg_bool{static_cast<uint8_t>(v)};
    else if constexpr (std::is_same<D, __half>::value) return __float2half_rn(static_cast<float>(v));
    else if constexpr (std::is_same<D, __nv_bfloat16>::value) return __float2bfloat16_rn(static_cast<float>(v));
    else return static_cast<D>(v);
  } else if constexpr (is_int_type<S>()) {
    if constexpr (is_bool_type<D>()) return pg_bool{static_cast<uint8_t>(x != 0)};
    else if constexpr (std::is_same<D, __half>::value) return __float2half_rn(static_cast<float>(x));
    else if constexpr (std::is_same<D, __nv_bfloat16>::value) return __float2bfloat16_rn(static_cast<float>(x));
    else return static_cast<D>(x);  // integer to integer wraps like numpy
  } else {
    // Floating source: 16-bit floats widen exactly to float.
    using W = typename std::conditional<std::is_same<S, double>::value, double, float>::type;
    W v;
    if constexpr (is_half_type<S>()) v = to_compute(x);
    else v = x;
    if constexpr (is_bool_type<D>()) {
      return pg_bool{static_cast<uint8_t>(v != W(0))};
    } else if constexpr (is_int_type<D>()) {
      return float_to_int<D>(static_cast<double>(v));
    } else if constexpr (std::is_same<D, __half>::value) {
      if constexpr (std::is_same<W, double>::value) return __double2half(v);
      else return __float2half_rn(v);
    } else if constexpr (std::is_same<D, __nv_bfloat16>::value) {
      if constexpr (std::is_same<W, double>::value) return __double2bfloat16(v);
      else return __float2bfloat16_rn(v);
    } else {
      return static_cast<D>(v);
    }
  }
}

// Four elements moved as one aligned access.
template <typename T>
struct alignas(4 * sizeof(T)) Pack4 {
  T v[4];
};

// VEC: both pointers aligned to their Pack4; four elements per step.
template <typename D, typename S, bool VEC>
__global__ void cast_kernel(const S* __restrict__ in, D* __restrict__ out, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t start = tid;
  if (VEC) {
    const int64_t nvec = n / 4;
    const Pack4<S>* vin = reinterpret_cast<const Pack4<S>*>(in);
    Pack4<D>* vout = reinterpret_cast<Pack4<D>*>(out);
    for (int64_t i = tid; i < nvec; i += stride) {
      const Pack4<S> x = vin[i];
      Pack4<D> y;
#pragma unroll
      for (int j = 0; j < 4; ++j) y.v[j] = cast_value<D, S>(x.v[j]);
      vout[i] = y;
    }
    start = nvec * 4 + tid;
  }
  for (int64_t i = start; i < n; i += stride) out[i] = cast_value<D, S>(in[i]);
}

void cast_compute(void*, TF_OpKernelContext* ctx) {
  OpCall c(ctx, OpCall::kMayDefer);
  if (!c.ok()) return;
  TensorPtr x = c.input(0);
  if (!x) return;
  const TF_DataType src = TF_TensorType(x.get());
  const TF_DataType dst = TF_ExpectedOutputDataType(ctx, 0);
  if (src == dst) {
    c.set_output(0, x.get());
    return;
  }
  const Shape s = Shape::of(x.get());
  TensorPtr out = c.output(0, dst, s);
  if (!out) return;
  const int64_t n = s.num_elements();
  if (n == 0) return;
  const void* in = TF_TensorData(x.get());
  void* o = TF_TensorData(out.get());
  bool inner_ok = true;
  const bool outer_ok = dispatch_all<pg_bool>(src, [&](auto stag) {
    using S = typename decltype(stag)::type;
    inner_ok = dispatch_all<pg_bool>(dst, [&](auto dtag) {
      using D = typename decltype(dtag)::type;
      const bool vec = reinterpret_cast<uintptr_t>(in) % sizeof(Pack4<S>) == 0 &&
                       reinterpret_cast<uintptr_t>(o) % sizeof(Pack4<D>) == 0;
      const int64_t bytes = n * static_cast<int64_t>(sizeof(S) + sizeof(D));
      const dim3 threads(kThreads);
      if (vec) {
        c.launch("Cast", cast_kernel<D, S, true>,
                 dim3(grid_for_stream((n + 3) / 4, c.sm_count(), bytes, c.l2_bytes())), threads,
                 static_cast<const S*>(in), static_cast<D*>(o), n);
      } else {
        c.launch("Cast", cast_kernel<D, S, false>,
                 dim3(grid_for_stream(n, c.sm_count(), bytes, c.l2_bytes())), threads,
                 static_cast<const S*>(in), static_cast<D*>(o), n);
      }
    });
  });
  if (!outer_ok || !inner_ok) {
    c.fail(TF_UNIMPLEMENTED, "Cast from %s to %s", dtype_name(src), dtype_name(dst));
  }
}


constexpr char kAddV2[] = "AddV2";
constexpr char kSub[] = "Sub";
constexpr char kMul[] = "Mul";
constexpr char kRealDiv[] = "RealDiv";
constexpr char kMaximum[] = "Maximum";
constexpr char kMinimum[] = "Minimum";
constexpr char kPow[] = "Pow";
constexpr char kFloorDiv[] = "FloorDiv";
constexpr char kFloorMod[] = "FloorMod";
constexpr char kNeg[] = "Neg";
constexpr char kAbs[] = "Abs";
constexpr char kExp[] = "Exp";
constexpr char kLog[] = "Log";
constexpr char kSqrt[] = "Sqrt";
constexpr char kTanh[] = "Tanh";
constexpr char kSigmoid[] = "Sigmoid";
constexpr char kRelu[] = "Relu";
constexpr char kSquare[] = "Square";
constexpr char kSign[] = "Sign";
constexpr char kRsqrt[] = "Rsqrt";
constexpr char kErf[] = "Erf";
constexpr char kFloor[] = "Floor";
constexpr char kRound[] = "Round";
constexpr char kReluGrad[] = "ReluGrad";
constexpr char kSigmoidGrad[] = "SigmoidGrad";
constexpr char kTanhGrad[] = "TanhGrad";
constexpr char kRsqrtGrad[] = "RsqrtGrad";
constexpr char kSqrtGrad[] = "SqrtGrad";

template <const char* NAME, typename OpSel, IntCheck CHECK = IntCheck::kNone>
void register_binary() {
  for (TF_DataType t : kNumericTypes) {
    register_kernel(NAME, name_create<NAME>, binary_compute<OpSel, CHECK>, no_delete,
                    {{"T", t}});
  }
}

// register_binary, plus the `extra` small integer types the op allows.
template <const char* NAME, typename OpSel, IntCheck CHECK = IntCheck::kNone>
void register_binary_with(std::initializer_list<TF_DataType> extra) {
  register_binary<NAME, OpSel, CHECK>();
  for (TF_DataType t : extra) {
    register_kernel(NAME, name_create<NAME>, binary_compute<OpSel, CHECK, false, true>,
                    no_delete, {{"T", t}});
  }
}

template <const char* NAME, typename Op, bool FLOAT_ONLY>
void register_unary() {
  if constexpr (FLOAT_ONLY) {
    for (TF_DataType t : kFloatTypes) {
      register_kernel(NAME, name_create<NAME>, unary_compute<Op, true>, no_delete,
                      {{"T", t}});
    }
  } else {
    for (TF_DataType t : kNumericTypes) {
      register_kernel(NAME, name_create<NAME>, unary_compute<Op, false>, no_delete,
                      {{"T", t}});
    }
  }
}

template <const char* NAME, typename Op, bool FLOAT_ONLY>
void register_grad() {
  if constexpr (FLOAT_ONLY) {
    for (TF_DataType t : kFloatTypes) {
      register_kernel(NAME, name_create<NAME>, grad_compute<Op, true>, no_delete, {{"T", t}});
    }
  } else {
    for (TF_DataType t : kNumericTypes) {
      register_kernel(NAME, name_create<NAME>, grad_compute<Op, false>, no_delete, {{"T", t}});
    }
  }
}

}  // namespace

void register_elementwise_kernels() {
  register_binary<kAddV2, Fixed<AddOp>>();
  register_binary<kSub, Fixed<SubOp>>();
  register_binary<kMul, Fixed<MulOp>>();
  register_binary<kRealDiv, Fixed<DivOp>>();
  register_binary<kMaximum, Fixed<MaxOp>>();
  register_binary<kMinimum, Fixed<MinOp>>();
  register_binary_with<kPow, Fixed<PowOp>, IntCheck::kNegativeExponent>({TF_INT8, TF_INT16});
  register_binary<kFloorDiv, PerType<FloorDivOp>, IntCheck::kZeroDivisor>();
  register_binary<kFloorMod, PerType<FloorModOp>, IntCheck::kZeroDivisor>();
  register_unary<kNeg, NegOp, false>();
  register_unary<kAbs, AbsOp, false>();
  register_unary<kRelu, ReluOp, false>();
  register_unary<kSquare, SquareOp, false>();
  register_unary<kSign, SignOp, false>();
  register_unary<kExp, ExpOp, true>();
  register_unary<kLog, LogOp, true>();
  register_unary<kSqrt, SqrtOp, true>();
  register_unary<kTanh, TanhOp, true>();
  register_unary<kSigmoid, SigmoidOp, true>();
  register_unary<kRsqrt, RsqrtOp, true>();
  register_unary<kErf, ErfOp, true>();
  register_unary<kFloor, FloorOp, true>();
  register_unary<kRound, RoundOp, false>();  // integers are returned unchanged
#define PG_LIBM_REGISTER(NAME, FN) register_unary<k##NAME, NAME##Op, true>();
  PG_LIBM_UNARY(PG_LIBM_REGISTER)
#undef PG_LIBM_REGISTER
  register_grad<kReluGrad, ReluGradOp, false>();
  register_grad<kSigmoidGrad, SigmoidGradOp, true>();
  register_grad<kTanhGrad, TanhGradOp, true>();
  register_grad<kRsqrtGrad, RsqrtGradOp, true>();
  register_grad<kSqrtGrad, SqrtGradOp, true>();
  for (TF_DataType t : kFloatTypes) {
    register_kernel("Gelu", gelu_create, gelu_compute, no_delete, {{"T", t}});
    register_kernel("GeluGrad", gelu_create, gelu_grad_compute, no_delete, {{"T", t}});
  }
  for (TF_DataType t : kAllTypes) {
    register_kernel("ZerosLike", nullptr, fill_like_compute<false>, nullptr, {{"T", t}});
    register_kernel("OnesLike", nullptr, fill_like_compute<true>, nullptr, {{"T", t}});
  }
  for (TF_DataType s : kAllTypes) {
    for (TF_DataType d : kAllTypes) {
      register_kernel("Cast", nullptr, cast_compute, nullptr, {{"SrcT", s}, {"DstT", d}});
    }
  }
}

}  // namespace pgcuda
