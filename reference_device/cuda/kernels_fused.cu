// _FusedMatMul and _FusedConv2D, the ops the graph optimizer
// (graph_optimizer.cc) fuses MatMul / Conv2D + BiasAdd (+ Relu) into.
//
// _FusedMatMul runs one cuBLASLt matmul whose epilogue adds the bias and
// applies the Relu (CUBLASLT_EPILOGUE_BIAS / RELU_BIAS). When cuBLASLt has no
// algorithm with that epilogue for a shape, it runs the plain cuBLASLt
// matmul followed by one bias(+Relu) pass. Products with at most 8 rows take
// the matrix-vector path (gemv.h), whose last pass adds the bias and applies
// the Relu. The cuBLASLt plan, with its algorithm chosen by timing, is made
// once per shape for the process (lt_matmul.h).
//
// _FusedConv2D runs through cuDNN where Conv2D would (conv.h: cuDNN loadable,
// float32 / float16, at least kDnnMinMacs multiply-adds, the same padding
// before and after), followed by one bias(+Relu) pass; otherwise an
// implicit-GEMM convolution (grouped convolutions: a direct one) whose store
// adds the bias and applies the Relu: one pass.
//
// Supported fused_ops: ["BiasAdd"] and ["BiasAdd", "Relu"] with num_args 1;
// construction fails with UNIMPLEMENTED for anything else.
#include <climits>
#include <cstring>
#include <new>

#include "conv.h"
#include "gemv.h"
#include "kernel_util.h"
#include "lt_matmul.h"

namespace pgcuda {
namespace {

// Reads fused_ops and num_args: 1 = BiasAdd, 2 = BiasAdd + Relu, 0 after
// failing construction.
int read_fused_ops(TF_OpKernelConstruction* ctx, const char* op) {
  TF_Status* st = TF_NewStatus();
  int32_t n = 0, total = 0;
  int result = 0;
  TF_OpKernelConstruction_GetAttrSize(ctx, "fused_ops", &n, &total, st);
  if (TF_GetCode(st) == TF_OK && n >= 1 && n <= 2 && total >= 0 && total <= 64) {
    char* values[2] = {nullptr, nullptr};
    size_t lengths[2] = {0, 0};
    char storage[64];
    TF_OpKernelConstruction_GetAttrStringList(ctx, "fused_ops", values, lengths, n, storage,
                                              sizeof(storage), st);
    const bool bias = TF_GetCode(st) == TF_OK && lengths[0] == 7 &&
                      memcmp(values[0], "BiasAdd", 7) == 0;
    const bool relu = n == 2 && lengths[1] == 4 && memcmp(values[1], "Relu", 4) == 0;
    if (bias && (n == 1 || relu)) result = n;
  }
  int32_t num_args = 0;
  TF_SetStatus(st, TF_OK, "");
  TF_OpKernelConstruction_GetAttrInt32(ctx, "num_args", &num_args, st);
  if (TF_GetCode(st) != TF_OK || num_args != 1) result = 0;
  if (result == 0) {
    char msg[200];
    snprintf(msg, sizeof(msg),
             "%s on GPU: only fused_ops ['BiasAdd'] and ['BiasAdd', 'Relu'] with num_args 1 "
             "are implemented", op);
    TF_SetStatus(st, TF_UNIMPLEMENTED, msg);
    TF_OpKernelConstruction_Failure(ctx, st);
  }
  TF_DeleteStatus(st);
  return result;
}

// y[r, c] = act(y[r, c] + bias[c]) in place, or act(bias[c]) when `assign`.
template <typename T>
__global__ void bias_act_kernel(T* __restrict__ y, const T* __restrict__ bias, int64_t total,
                                int64_t channels, bool relu, bool assign) {
  using C = compute_t<T>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    C v = to_compute(bias[i % channels]);
    if (!assign) v += to_compute(y[i]);
    if (relu && v < C(0)) v = C(0);
    y[i] = from_compute<T>(v);
  }
}

bool launch_bias_act(OpCall& c, TF_DataType dt, void* y, const void* bias, int64_t total,
                     int64_t channels, bool relu, bool assign) {
  const bool handled = dispatch_float(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    bias_act_kernel<T><<<grid_for(total, c.sm_count()), kThreads, 0, c.stream()>>>(
        static_cast<T*>(y), static_cast<const T*>(bias), total, channels, relu, assign);
  });
  if (!handled) return c.fail(TF_UNIMPLEMENTED, "bias epilogue: dtype %s", dtype_name(dt));
  return c.check_launch("bias epilogue");
}

// Checks that `bias` is a vector of `channels` elements of dtype `dt`.
bool check_bias(OpCall& c, const char* op, const TF_Tensor* bias, TF_DataType dt,
                int64_t channels) {
  const Shape sb = Shape::of(bias);
  if (TF_TensorType(bias) == dt && sb.rank == 1 && sb.dims[0] == channels) return true;
  char buf[128];
  return c.fail(TF_INVALID_ARGUMENT, "%s: the bias %s must be a vector of the output's %lld "
                "channels of the same dtype", op, shape_str(sb, buf, sizeof(buf)),
                static_cast<long long>(channels));
}

// --------------------------------------------------------------------------
// _FusedMatMul

struct FusedMatMulState {
  bool ta = false, tb = false, relu = false, tf32 = false;
};

void* fused_matmul_create(TF_OpKernelConstruction* ctx) {
  const int ops = read_fused_ops(ctx, "_FusedMatMul");
  if (ops == 0) return nullptr;
  FusedMatMulState* st = new (std::nothrow) FusedMatMulState();
  if (st == nullptr) return nullptr;
  st->ta = read_bool_attr(ctx, "transpose_a", false);
  st->tb = read_bool_attr(ctx, "transpose_b", false);
  st->tf32 = read_bool_attr(ctx, "_allow_tf32", false);
  st->relu = ops == 2;
  return st;
}

void fused_matmul_delete(void* p) { delete static_cast<FusedMatMulState*>(p); }

void fused_matmul_compute(void* kernel, TF_OpKernelContext* ctx) {
  FusedMatMulState* st = static_cast<FusedMatMulState*>(kernel);
  OpCall c(ctx);
  if (!c.ok()) return;
  if (st == nullptr || TF_NumInputs(ctx) != 3) {
    c.fail(TF_INVALID_ARGUMENT, "_FusedMatMul: expected 3 inputs (a, b and the bias)");
    return;
  }
  TensorPtr a = c.input(0), b = a ? c.input(1) : TensorPtr(), bias = b ? c.input(2) : TensorPtr();
  if (!bias) return;
  const Shape sa = Shape::of(a.get()), sb = Shape::of(b.get());
  const TF_DataType dt = TF_TensorType(a.get());
  if (sa.rank != 2 || sb.rank != 2 || TF_TensorType(b.get()) != dt) {
    c.fail(TF_INVALID_ARGUMENT, "_FusedMatMul: a and b must be matrices of one dtype");
    return;
  }
  const int64_t M = st->ta ? sa.dims[1] : sa.dims[0];
  const int64_t K = st->ta ? sa.dims[0] : sa.dims[1];
  const int64_t N = st->tb ? sb.dims[0] : sb.dims[1];
  if ((st->tb ? sb.dims[1] : sb.dims[0]) != K) {
    char b1[64], b2[64];
    c.fail(TF_INVALID_ARGUMENT, "_FusedMatMul: inner dimensions do not match: a %s, b %s",
           shape_str(sa, b1, sizeof(b1)), shape_str(sb, b2, sizeof(b2)));
    return;
  }
  if (!check_bias(c, "_FusedMatMul", bias.get(), dt, N)) return;
  Shape so;
  so.rank = 2;
  so.dims[0] = M;
  so.dims[1] = N;
  TensorPtr out = c.output(0, dt, so);
  if (!out || M == 0 || N == 0) return;
  void* pc = TF_TensorData(out.get());
  const void* pbias = TF_TensorData(bias.get());
  if (K == 0) {
    launch_bias_act(c, dt, pc, pbias, M * N, N, st->relu, /*assign=*/true);
    return;
  }
  if (gemv_applies(dt, st->ta, st->tb, M, N, K)) {
    run_gemv(c, "_FusedMatMul", dt, st->tb, TF_TensorData(a.get()), TF_TensorData(b.get()),
             pbias, st->relu, pc, M, N, K);
    return;
  }
  const LtProduct p{dt, st->ta, st->tb, st->tf32, M, N, K, /*bias=*/true, st->relu};
  bool fused = false;
  if (!lt_matmul(c, "_FusedMatMul", p, TF_TensorData(a.get()), TF_TensorData(b.get()), pbias, pc,
                 &fused)) {
    return;
  }
  if (!fused) launch_bias_act(c, dt, pc, pbias, M * N, N, st->relu, /*assign=*/false);
}

// --------------------------------------------------------------------------
// _FusedConv2D

enum class Padding { kSame, kValid, kExplicit };

struct FusedConvState {
  int64_t sh = 1, sw = 1, dh = 1, dw = 1;
  Padding padding = Padding::kValid;
  int64_t pads[8] = {0};
  bool relu = false;
  void* dnn = nullptr;  // cuDNN's algorithm choices (conv.h), null without
  ~FusedConvState() { dnn_conv_cache_delete(dnn); }
};

struct ConvGeometry {
  int64_t N, H, W, C;      // input
  int64_t KH, KW, FC, OC;  // filter
  int64_t OH, OW;
  int64_t sh, sw, dh, dw, pt, pl;
  int64_t oc_per_group;
};

bool read_ints(TF_OpKernelConstruction* ctx, const char* name, int64_t* out, int n,
               bool required) {
  TF_Status* st = TF_NewStatus();
  int32_t size = -1, total = -1;
  TF_OpKernelConstruction_GetAttrSize(ctx, name, &size, &total, st);
  bool ok = true;
  if (TF_GetCode(st) != TF_OK || size == 0) {
    ok = !required;
  } else if (size != n) {
    ok = false;
  } else {
    TF_OpKernelConstruction_GetAttrInt64List(ctx, name, out, n, st);
    ok = TF_GetCode(st) == TF_OK;
  }
  TF_DeleteStatus(st);
  return ok;
}

bool read_string(TF_OpKernelConstruction* ctx, const char* name, char* buf, size_t cap) {
  TF_Status* st = TF_NewStatus();
  int32_t size = -1, total = -1;
  buf[0] = '\0';
  TF_OpKernelConstruction_GetAttrSize(ctx, name, &size, &total, st);
  bool ok = TF_GetCode(st) == TF_OK && total >= 0 && static_cast<size_t>(total) < cap;
  if (ok) {
    TF_OpKernelConstruction_GetAttrString(ctx, name, buf, cap - 1, st);
    ok = TF_GetCode(st) == TF_OK;
    buf[ok ? total : 0] = '\0';
  }
  TF_DeleteStatus(st);
  return ok;
}

void construction_fail(TF_OpKernelConstruction* ctx, TF_Code code, const char* msg) {
  TF_Status* st = TF_NewStatus();
  TF_SetStatus(st, code, msg);
  TF_OpKernelConstruction_Failure(ctx, st);
  TF_DeleteStatus(st);
}

void* fused_conv_create(TF_OpKernelConstruction* ctx) {
  const int ops = read_fused_ops(ctx, "_FusedConv2D");
  if (ops == 0) return nullptr;
  int64_t strides[4] = {1, 1, 1, 1}, dil[4] = {1, 1, 1, 1};
  char padding[16], format[16], filter_format[16];
  FusedConvState* st = new (std::nothrow) FusedConvState();
  if (st == nullptr) return nullptr;
  const bool attrs_ok = read_ints(ctx, "strides", strides, 4, true) &&
                        read_ints(ctx, "dilations", dil, 4, false) &&
                        read_ints(ctx, "explicit_paddings", st->pads, 8, false) &&
                        read_string(ctx, "padding", padding, sizeof(padding));
  read_string(ctx, "data_format", format, sizeof(format));
  read_string(ctx, "filter_format", filter_format, sizeof(filter_format));
  const char* problem = nullptr;
  if (!attrs_ok) problem = "_FusedConv2D: strides, dilations, padding or explicit_paddings "
                           "are missing or malformed";
  else if (format[0] != '\0' && strcmp(format, "NHWC") != 0)
    problem = "_FusedConv2D on GPU: only data_format NHWC is implemented";
  else if (filter_format[0] != '\0' && strcmp(filter_format, "HWIO") != 0)
    problem = "_FusedConv2D on GPU: only filter_format HWIO is implemented";
  else if (strides[0] != 1 || strides[3] != 1 || strides[1] < 1 || strides[2] < 1 ||
           dil[0] != 1 || dil[3] != 1 || dil[1] < 1 || dil[2] < 1)
    problem = "_FusedConv2D: strides and dilations must be [1, h, w, 1] with h, w >= 1";
  if (strcmp(padding, "SAME") == 0) st->padding = Padding::kSame;
  else if (strcmp(padding, "VALID") == 0) st->padding = Padding::kValid;
  else if (strcmp(padding, "EXPLICIT") == 0) st->padding = Padding::kExplicit;
  else if (problem == nullptr) problem = "_FusedConv2D: unknown padding";
  if (problem != nullptr) {
    construction_fail(ctx, strstr(problem, " only ") ? TF_UNIMPLEMENTED : TF_INVALID_ARGUMENT,
                      problem);
    delete st;
    return nullptr;
  }
  st->sh = strides[1];
  st->sw = strides[2];
  st->dh = dil[1];
  st->dw = dil[2];
  st->relu = ops == 2;
  st->dnn = dnn_conv_cache_new(read_bool_attr(ctx, "_allow_tf32", false));
  return st;
}

void fused_conv_delete(void* p) { delete static_cast<FusedConvState*>(p); }

// Output size and padding before of one spatial dim, as TensorFlow computes
// them; false if the (dilated) filter is larger than the (padded) input.
bool out_size(Padding padding, int64_t in, int64_t k, int64_t stride, int64_t dil, int64_t lo,
              int64_t hi, int64_t* out, int64_t* before) {
  const int64_t eff = (k - 1) * dil + 1;
  if (padding == Padding::kSame) {
    *out = (in + stride - 1) / stride;
    const int64_t total = (*out - 1) * stride + eff - in;
    *before = total > 0 ? total / 2 : 0;
    return true;
  }
  const int64_t padded = padding == Padding::kExplicit ? in + lo + hi : in;
  *before = padding == Padding::kExplicit ? lo : 0;
  *out = padded >= eff ? (padded - eff) / stride + 1 : 0;
  return padded >= eff;
}

template <typename T>
__device__ __forceinline__ void store_fused(T* out, int64_t i, compute_t<T> v,
                                            const T* bias, int64_t oc, bool relu) {
  v += to_compute(bias[oc]);
  if (relu && v < compute_t<T>(0)) v = compute_t<T>(0);
  out[i] = from_compute<T>(v);
}

// The bias and Relu over a convolution cuDNN wrote into `out` (NHWC).
template <typename T>
__global__ void bias_relu_nhwc_kernel(T* __restrict__ out, const T* __restrict__ bias,
                                      int64_t total, int64_t oc, bool relu) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    store_fused(out, i, to_compute(out[i]), bias, i % oc, relu);
  }
}

// Grouped convolutions: one thread per output element.
template <typename T>
__global__ void fused_conv_direct_kernel(const T* __restrict__ in, const T* __restrict__ f,
                                         const T* __restrict__ bias, T* __restrict__ out,
                                         int64_t total, ConvGeometry g, bool relu) {
  using C = compute_t<T>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += stride) {
    const int64_t oc = idx % g.OC;
    int64_t t = idx / g.OC;
    const int64_t ow = t % g.OW;
    t /= g.OW;
    const int64_t oh = t % g.OH;
    const int64_t n = t / g.OH;
    const int64_t ic0 = (oc / g.oc_per_group) * g.FC;
    C acc = C(0);
    for (int64_t kh = 0; kh < g.KH; ++kh) {
      const int64_t ih = oh * g.sh - g.pt + kh * g.dh;
      if (ih < 0 || ih >= g.H) continue;
      for (int64_t kw = 0; kw < g.KW; ++kw) {
        const int64_t iw = ow * g.sw - g.pl + kw * g.dw;
        if (iw < 0 || iw >= g.W) continue;
        const T* ip = in + ((n * g.H + ih) * g.W + iw) * g.C + ic0;
        const T* fp = f + (kh * g.KW + kw) * g.FC * g.OC + oc;
        for (int64_t ic = 0; ic < g.FC; ++ic) acc += to_compute(ip[ic]) * to_compute(fp[ic * g.OC]);
      }
    }
    store_fused(out, idx, acc, bias, oc, relu);
  }
}

// Ungrouped convolutions as an implicit GEMM: out[m][oc] = sum_k A[m][k]
// B[k][oc], m = (image, oh, ow), k = (kh, kw, ic), A gathered from the input
// (zero outside the padded image), B the HWIO filter as a [K, OC] matrix.
// 64 x 64 output tiles, 16-deep K slices in shared memory, 256 threads each
// computing 4 x 4 outputs; the store adds the bias and applies the Relu.
constexpr int kTileM = 64, kTileN = 64, kTileK = 16;

template <typename T>
__global__ void __launch_bounds__(256)
fused_conv_gemm_kernel(const T* __restrict__ in, const T* __restrict__ f,
                       const T* __restrict__ bias, T* __restrict__ out, int64_t M, int64_t K,
                       ConvGeometry g, bool relu) {
  using C = compute_t<T>;
  __shared__ C As[kTileK][kTileM + 4];
  __shared__ C Bs[kTileK][kTileN + 4];
  const int t = threadIdx.x;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * kTileM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kTileN;
  const int a_k = t % kTileK, a_m = t / kTileK;  // A loads: 16 rows x 4 passes
  const int b_n = t % kTileN, b_k = t / kTileN;  // B loads: 4 rows x 4 passes
  const int tx = t % 16, ty = t / 16;
  int64_t base[4], ih0[4], iw0[4];
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int64_t m = m0 + a_m + 16 * r;
    base[r] = -1;
    ih0[r] = iw0[r] = 0;
    if (m < M) {
      const int64_t ow = m % g.OW, rest = m / g.OW;
      base[r] = (rest / g.OH) * g.H * g.W * g.C;
      ih0[r] = (rest % g.OH) * g.sh - g.pt;
      iw0[r] = ow * g.sw - g.pl;
    }
  }
  C acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = C(0);
  for (int64_t k0 = 0; k0 < K; k0 += kTileK) {
    const int64_t k = k0 + a_k;
    const bool k_ok = k < K;
    const int64_t ic = k_ok ? k % g.FC : 0;
    const int64_t kw = k_ok ? (k / g.FC) % g.KW : 0;
    const int64_t kh = k_ok ? (k / g.FC) / g.KW : 0;
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      C v = C(0);
      const int64_t ih = ih0[r] + kh * g.dh, iw = iw0[r] + kw * g.dw;
      if (k_ok && base[r] >= 0 && ih >= 0 && ih < g.H && iw >= 0 && iw < g.W) {
        v = to_compute(in[base[r] + (ih * g.W + iw) * g.C + ic]);
      }
      As[a_k][a_m + 16 * r] = v;
    }
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int64_t kk = k0 + b_k + 4 * r, n = n0 + b_n;
      Bs[b_k + 4 * r][b_n] = (kk < K && n < g.OC) ? to_compute(f[kk * g.OC + n]) : C(0);
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kTileK; ++kk) {
      C av[4], bv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) av[i] = As[kk][ty * 4 + i];
#pragma unroll
      for (int j = 0; j < 4; ++j) bv[j] = Bs[kk][tx * 4 + j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += av[i] * bv[j];
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t m = m0 + ty * 4 + i;
    if (m >= M) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t n = n0 + tx * 4 + j;
      if (n < g.OC) store_fused(out, m * g.OC + n, acc[i][j], bias, n, relu);
    }
  }
}

bool conv_geometry(OpCall& c, const FusedConvState* st, const Shape& si, const Shape& sf,
                   ConvGeometry* g) {
  if (si.rank != 4 || sf.rank != 4) {
    return c.fail(TF_INVALID_ARGUMENT, "_FusedConv2D: input and filter must be 4-d");
  }
  *g = ConvGeometry{si.dims[0], si.dims[1], si.dims[2], si.dims[3], sf.dims[0], sf.dims[1],
                    sf.dims[2], sf.dims[3], 0, 0, st->sh, st->sw, st->dh, st->dw, 0, 0, 0};
  if (g->FC <= 0 || g->C % g->FC != 0 || g->OC % (g->C / g->FC) != 0) {
    return c.fail(TF_INVALID_ARGUMENT, "_FusedConv2D: input depth %lld and filter depth %lld "
                  "do not make whole groups", static_cast<long long>(g->C),
                  static_cast<long long>(g->FC));
  }
  g->oc_per_group = g->OC / (g->C / g->FC);
  if (!out_size(st->padding, g->H, g->KH, g->sh, g->dh, st->pads[2], st->pads[3], &g->OH,
                &g->pt) ||
      !out_size(st->padding, g->W, g->KW, g->sw, g->dw, st->pads[4], st->pads[5], &g->OW,
                &g->pl)) {
    return c.fail(TF_INVALID_ARGUMENT,
                  "_FusedConv2D: the (dilated) filter is larger than the (padded) input");
  }
  return true;
}

void fused_conv_compute(void* kernel, TF_OpKernelContext* ctx) {
  const FusedConvState* st = static_cast<const FusedConvState*>(kernel);
  OpCall c(ctx);
  if (!c.ok()) return;
  if (st == nullptr || TF_NumInputs(ctx) != 3) {
    c.fail(TF_INVALID_ARGUMENT, "_FusedConv2D: expected 3 inputs (input, filter, bias)");
    return;
  }
  TensorPtr x = c.input(0), f = x ? c.input(1) : TensorPtr(), bias = f ? c.input(2) : TensorPtr();
  if (!bias) return;
  const TF_DataType dt = TF_TensorType(x.get());
  ConvGeometry g;
  if (!conv_geometry(c, st, Shape::of(x.get()), Shape::of(f.get()), &g) ||
      !check_bias(c, "_FusedConv2D", bias.get(), dt, g.OC)) {
    return;
  }
  Shape so;
  so.rank = 4;
  so.dims[0] = g.N;
  so.dims[1] = g.OH;
  so.dims[2] = g.OW;
  so.dims[3] = g.OC;
  TensorPtr out = c.output(0, dt, so);
  const int64_t total = so.num_elements();
  if (!out || total == 0) return;
  const void* pin = TF_TensorData(x.get());
  const void* pf = TF_TensorData(f.get());
  const void* pb = TF_TensorData(bias.get());
  void* po = TF_TensorData(out.get());
  if (dt != TF_DOUBLE) {  // (cuDNN has no NHWC float64 kernels)
    const int64_t pad_b = (g.OH - 1) * g.sh + (g.KH - 1) * g.dh + 1 - g.H - g.pt;
    const int64_t pad_r = (g.OW - 1) * g.sw + (g.KW - 1) * g.dw + 1 - g.W - g.pl;
    const NhwcConvShape cs{g.N,  g.H,  g.W,  g.C,  g.KH, g.KW, g.FC, g.OC, g.OH, g.OW,
                           g.sh, g.sw, g.dh, g.dw, g.pt, g.pl, pad_b < 0 ? 0 : pad_b,
                           pad_r < 0 ? 0 : pad_r};
    const int dnn = conv2d_cudnn(c, st->dnn, cs, dt, pin, pf, po);
    if (dnn < 0) return;
    if (dnn > 0) {
      dispatch_float(dt, [&](auto tag) {
        using T = typename decltype(tag)::type;
        bias_relu_nhwc_kernel<T><<<grid_for(total, c.sm_count()), kThreads, 0, c.stream()>>>(
            static_cast<T*>(po), static_cast<const T*>(pb), total, g.OC, st->relu);
      });
      c.check_launch("_FusedConv2D bias");
      return;
    }
  }
  const int64_t M = g.N * g.OH * g.OW, K = g.KH * g.KW * g.FC;
  const int64_t grid_m = (M + kTileM - 1) / kTileM, grid_n = (g.OC + kTileN - 1) / kTileN;
  const bool gemm = g.C == g.FC && grid_m <= INT32_MAX && grid_n <= 65535;
  const bool handled = dispatch_float(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = static_cast<const T*>(pin);
    const T* flt = static_cast<const T*>(pf);
    const T* b = static_cast<const T*>(pb);
    T* o = static_cast<T*>(po);
    if (gemm) {
      fused_conv_gemm_kernel<T><<<dim3(static_cast<unsigned>(grid_m),
                                       static_cast<unsigned>(grid_n)), 256, 0, c.stream()>>>(
          in, flt, b, o, M, K, g, st->relu);
    } else {
      fused_conv_direct_kernel<T><<<grid_for(total, c.sm_count(), kThreads, 16), kThreads, 0,
                                    c.stream()>>>(in, flt, b, o, total, g, st->relu);
    }
    c.check_launch("_FusedConv2D");
  });
  if (!handled) c.fail(TF_UNIMPLEMENTED, "_FusedConv2D on GPU: dtype %s", dtype_name(dt));
}

}  // namespace

void register_fused_kernels() {
  for (TF_DataType t : {TF_HALF, TF_BFLOAT16, TF_FLOAT}) {
    register_kernel("_FusedMatMul", fused_matmul_create, fused_matmul_compute,
                    fused_matmul_delete, {{"T", t}});
  }
  for (TF_DataType t : {TF_HALF, TF_FLOAT, TF_DOUBLE}) {
    register_kernel("_FusedConv2D", fused_conv_create, fused_conv_compute, fused_conv_delete,
                    {{"T", t}});
  }
}

}  // namespace pgcuda
