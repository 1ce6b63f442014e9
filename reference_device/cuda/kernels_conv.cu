// Conv2D, NHWC input, HWIO filter. Supports strides, dilations, SAME / VALID
// / EXPLICIT padding and grouped convolution (input channels a multiple of
// the filter's input channels). 16-bit floats accumulate in float.
//
// Where cuDNN can be loaded (cudnn_loader.h) and the padding the output
// needs is the same before and after, the convolution runs through cuDNN
// (cudnnConvolutionForward, NHWC data, the filter transposed to KRSC into a
// temporary; float32 uses tensor cores (TF32) only when the op allows TF32).
// PLUGGABLE_CUDNN=0 turns that off; PLUGGABLE_CUDNN=1 makes a convolution
// cuDNN could take fail when cuDNN cannot be loaded or refuses it, instead of
// falling back. Otherwise ungrouped convolutions run as an implicit GEMM
// through shared-memory tiles; grouped ones use a direct kernel (one thread
// per output element, consecutive threads on consecutive output channels, so
// filter reads are coalesced).
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

#include "conv.h"
#include "cudnn_loader.h"
#include "kernel_util.h"

namespace pgcuda {
namespace {

enum class Padding { kSame, kValid, kExplicit };

// The algorithm cuDNN's heuristics chose for one input shape and dtype.
struct DnnChoice {
  int64_t n, h, w, c, kh, kw, fc, oc;
  TF_DataType dt;
  int algo;         // -1: cuDNN refused the shape (the own kernels run)
  size_t ws_bytes;  // its workspace
};

struct ConvState {
  int stride_h = 1, stride_w = 1;
  int dil_h = 1, dil_w = 1;
  Padding padding = Padding::kValid;
  int64_t explicit_pads[8] = {0};
  bool allow_tf32 = false;
  mutable std::mutex mu;                   // guards `choices`
  mutable std::vector<DnnChoice> choices;  // the last kMaxChoices shapes
};

// Reads a list(int) attribute of exactly `n` entries into `out`.
bool read_int_list(TF_OpKernelConstruction* ctx, const char* name, int n, int64_t* out,
                   bool required, TF_Status* st) {
  int32_t list_size = -1, total = -1;
  TF_OpKernelConstruction_GetAttrSize(ctx, name, &list_size, &total, st);
  if (TF_GetCode(st) != TF_OK) {
    if (!required) {
      TF_SetStatus(st, TF_OK, "");
      return true;
    }
    return false;
  }
  if (list_size != n) {
    if (!required && list_size == 0) return true;
    char msg[128];
    snprintf(msg, sizeof(msg), "Conv2D: %s must have %d entries, got %d", name, n, list_size);
    TF_SetStatus(st, TF_INVALID_ARGUMENT, msg);
    return false;
  }
  TF_OpKernelConstruction_GetAttrInt64List(ctx, name, out, n, st);
  return TF_GetCode(st) == TF_OK;
}

// Reads a string attribute into `buf` (NUL-terminated); "" if absent.
bool read_string_attr(TF_OpKernelConstruction* ctx, const char* name, char* buf, size_t cap,
                      TF_Status* st) {
  buf[0] = '\0';
  int32_t list_size = -1, total = -1;
  TF_OpKernelConstruction_GetAttrSize(ctx, name, &list_size, &total, st);
  if (TF_GetCode(st) != TF_OK) {
    TF_SetStatus(st, TF_OK, "");
    return true;
  }
  if (total < 0 || static_cast<size_t>(total) >= cap) {
    TF_SetStatus(st, TF_INVALID_ARGUMENT, "Conv2D: string attribute too long");
    return false;
  }
  TF_OpKernelConstruction_GetAttrString(ctx, name, buf, cap - 1, st);
  if (TF_GetCode(st) != TF_OK) return false;
  buf[total] = '\0';
  return true;
}

void* conv_create(TF_OpKernelConstruction* ctx) {
  TF_Status* st = TF_NewStatus();
  ConvState* cs = new (std::nothrow) ConvState();
  auto fail = [&](TF_Code code, const char* msg) -> void* {
    if (code != TF_OK) TF_SetStatus(st, code, msg);
    TF_OpKernelConstruction_Failure(ctx, st);
    TF_DeleteStatus(st);
    delete cs;
    return nullptr;
  };
  if (cs == nullptr) return fail(TF_RESOURCE_EXHAUSTED, "out of host memory");
  char fmt[32], pad[32];
  if (!read_string_attr(ctx, "data_format", fmt, sizeof(fmt), st)) return fail(TF_OK, "");
  if (fmt[0] != '\0' && strcmp(fmt, "NHWC") != 0) {
    char msg[96];
    snprintf(msg, sizeof(msg), "Conv2D on GPU supports data_format NHWC only, got %s", fmt);
    return fail(TF_UNIMPLEMENTED, msg);
  }
  if (!read_string_attr(ctx, "padding", pad, sizeof(pad), st)) return fail(TF_OK, "");
  if (strcmp(pad, "SAME") == 0) {
    cs->padding = Padding::kSame;
  } else if (strcmp(pad, "VALID") == 0) {
    cs->padding = Padding::kValid;
  } else if (strcmp(pad, "EXPLICIT") == 0) {
    cs->padding = Padding::kExplicit;
  } else {
    return fail(TF_INVALID_ARGUMENT, "Conv2D: padding must be SAME, VALID or EXPLICIT");
  }
  int64_t strides[4] = {1, 1, 1, 1}, dil[4] = {1, 1, 1, 1};
  if (!read_int_list(ctx, "strides", 4, strides, true, st)) return fail(TF_OK, "");
  if (!read_int_list(ctx, "dilations", 4, dil, false, st)) return fail(TF_OK, "");
  if (strides[0] != 1 || strides[3] != 1) {
    return fail(TF_INVALID_ARGUMENT,
                "Current implementation does not yet support strides in the batch and "
                "depth dimensions.");
  }
  if (dil[0] != 1 || dil[3] != 1) {
    return fail(TF_INVALID_ARGUMENT,
                "Current implementation does not yet support dilations in the batch and "
                "depth dimensions.");
  }
  if (strides[1] < 1 || strides[2] < 1 || dil[1] < 1 || dil[2] < 1 ||
      strides[1] > INT32_MAX || strides[2] > INT32_MAX || dil[1] > INT32_MAX ||
      dil[2] > INT32_MAX) {
    return fail(TF_INVALID_ARGUMENT, "Conv2D: strides and dilations must be positive");
  }
  cs->allow_tf32 = read_bool_attr(ctx, "_allow_tf32", false);
  cs->stride_h = static_cast<int>(strides[1]);
  cs->stride_w = static_cast<int>(strides[2]);
  cs->dil_h = static_cast<int>(dil[1]);
  cs->dil_w = static_cast<int>(dil[2]);
  if (cs->padding == Padding::kExplicit) {
    if (!read_int_list(ctx, "explicit_paddings", 8, cs->explicit_pads, true, st)) {
      return fail(TF_OK, "");
    }
    for (int i = 0; i < 8; ++i) {
      if (cs->explicit_pads[i] < 0) {
        return fail(TF_INVALID_ARGUMENT, "Conv2D: explicit paddings must be non-negative");
      }
    }
    if (cs->explicit_pads[0] || cs->explicit_pads[1] || cs->explicit_pads[6] ||
        cs->explicit_pads[7]) {
      return fail(TF_UNIMPLEMENTED,
                  "Conv2D: padding of the batch and depth dimensions is not supported");
    }
  }
  TF_DeleteStatus(st);
  return cs;
}

void conv_delete(void* p) { delete static_cast<ConvState*>(p); }

struct ConvParams {
  int64_t N, H, W, C;      // input
  int64_t KH, KW, FC, OC;  // filter [KH, KW, FC, OC]
  int64_t OH, OW;          // output spatial dims
  int64_t sh, sw, dh, dw;  // strides, dilations
  int64_t pt, pl;          // padding before (top, left)
  int64_t oc_per_group;
};

template <typename T>
__global__ void conv2d_nhwc_kernel(const T* __restrict__ in, const T* __restrict__ filter,
                                   T* __restrict__ out, int64_t total, ConvParams p) {
  using C = compute_t<T>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += stride) {
    const int64_t oc = idx % p.OC;
    int64_t t = idx / p.OC;
    const int64_t ow = t % p.OW;
    t /= p.OW;
    const int64_t oh = t % p.OH;
    const int64_t n = t / p.OH;
    const int64_t ic0 = (oc / p.oc_per_group) * p.FC;  // first input channel of the group
    C acc = C(0);
    for (int64_t kh = 0; kh < p.KH; ++kh) {
      const int64_t ih = oh * p.sh - p.pt + kh * p.dh;
      if (ih < 0 || ih >= p.H) continue;
      for (int64_t kw = 0; kw < p.KW; ++kw) {
        const int64_t iw = ow * p.sw - p.pl + kw * p.dw;
        if (iw < 0 || iw >= p.W) continue;
        const T* ip = in + ((n * p.H + ih) * p.W + iw) * p.C + ic0;
        const T* fp = filter + (kh * p.KW + kw) * p.FC * p.OC + oc;
        for (int64_t ic = 0; ic < p.FC; ++ic) {
          acc += to_compute(ip[ic]) * to_compute(fp[ic * p.OC]);
        }
      }
    }
    out[idx] = from_compute<T>(acc);
  }
}

// Implicit GEMM for ungrouped convolutions: out[m][oc] = sum_k A[m][k] B[k][oc]
// with m = (image, oh, ow), k = (kh, kw, ic) and B the HWIO filter read as a
// row-major [KH*KW*C, OC] matrix. A is gathered from the input on the fly
// (zero outside the padded image). Tiles of kConvBM x kConvBN outputs,
// kConvBK-deep slices of K through shared memory; 256 threads, each
// computing a 4 x 4 block.
constexpr int kConvBM = 64;
constexpr int kConvBN = 64;
constexpr int kConvBK = 16;

template <typename T>
__global__ void __launch_bounds__(256)
conv2d_gemm_kernel(const T* __restrict__ in, const T* __restrict__ filter, T* __restrict__ out,
                   int64_t M, int64_t K, ConvParams p) {
  using C = compute_t<T>;
  __shared__ C As[kConvBK][kConvBM + 4];
  __shared__ C Bs[kConvBK][kConvBN + 4];
  const int t = threadIdx.x;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * kConvBM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kConvBN;

  // A loads: this thread fills As[a_k][a_m + 16 * r], r = 0..3; consecutive
  // threads take consecutive input channels (contiguous in NHWC).
  const int a_k = t % kConvBK;
  const int a_m = t / kConvBK;  // 0..15
  int64_t a_base[4];            // offset of the image row start, or -1
  int64_t a_ih0[4], a_iw0[4];
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int64_t m = m0 + a_m + 16 * r;
    if (m < M) {
      const int64_t ow = m % p.OW;
      const int64_t rest = m / p.OW;
      const int64_t oh = rest % p.OH;
      const int64_t img = rest / p.OH;
      a_base[r] = img * p.H * p.W * p.C;
      a_ih0[r] = oh * p.sh - p.pt;
      a_iw0[r] = ow * p.sw - p.pl;
    } else {
      a_base[r] = -1;
      a_ih0[r] = 0;
      a_iw0[r] = 0;
    }
  }
  // B loads: Bs[b_k + 4 * r][b_n], coalesced along output channels.
  const int b_n = t % kConvBN;
  const int b_k = t / kConvBN;  // 0..3

  // Compute: rows ty*4.., columns tx*4.. of the tile.
  const int tx = t % 16, ty = t / 16;
  C acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = C(0);
  }

  for (int64_t k0 = 0; k0 < K; k0 += kConvBK) {
    // Gather the A slice.
    const int64_t k = k0 + a_k;
    int64_t ic = 0, kh = 0, kw = 0;
    const bool k_ok = k < K;
    if (k_ok) {
      ic = k % p.FC;
      const int64_t r2 = k / p.FC;
      kw = r2 % p.KW;
      kh = r2 / p.KW;
    }
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      C v = C(0);
      if (k_ok && a_base[r] >= 0) {
        const int64_t ih = a_ih0[r] + kh * p.dh;
        const int64_t iw = a_iw0[r] + kw * p.dw;
        if (ih >= 0 && ih < p.H && iw >= 0 && iw < p.W) {
          v = to_compute(in[a_base[r] + (ih * p.W + iw) * p.C + ic]);
        }
      }
      As[a_k][a_m + 16 * r] = v;
    }
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int64_t kk = k0 + b_k + 4 * r;
      const int64_t n = n0 + b_n;
      Bs[b_k + 4 * r][b_n] = (kk < K && n < p.OC) ? to_compute(filter[kk * p.OC + n]) : C(0);
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kConvBK; ++kk) {
      C a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = As[kk][ty * 4 + i];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = Bs[kk][tx * 4 + j];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
      }
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
      if (n < p.OC) out[m * p.OC + n] = from_compute<T>(acc[i][j]);
    }
  }
}

// Output size and padding before, as TensorFlow computes them.
bool conv_out_size(const ConvState& s, int64_t in, int64_t k, int64_t stride, int64_t dil,
                   int64_t pad_lo, int64_t pad_hi, int64_t* out, int64_t* before) {
  const int64_t eff = (k - 1) * dil + 1;
  switch (s.padding) {
    case Padding::kSame: {
      *out = (in + stride - 1) / stride;
      int64_t total = (*out - 1) * stride + eff - in;
      if (total < 0) total = 0;
      *before = total / 2;
      return true;
    }
    case Padding::kValid:
      *out = in >= eff ? (in - eff) / stride + 1 : 0;
      *before = 0;
      return in >= eff;
    case Padding::kExplicit: {
      const int64_t padded = in + pad_lo + pad_hi;
      *out = padded >= eff ? (padded - eff) / stride + 1 : 0;
      *before = pad_lo;
      return padded >= eff;
    }
  }
  return false;
}

// ---------------------------------------------------------------------------
// cuDNN

constexpr size_t kMaxChoices = 16;
constexpr size_t kMaxDnnWorkspace = size_t(512) << 20;

// Below this many multiply-adds a convolution runs the own kernels unless
// PLUGGABLE_CUDNN=1 asks for cuDNN: one cudnnConvolutionForward call costs
// 23-34 us of host time on an H100 host even with its descriptors made
// (100 us with ours made per call), longer than the own kernels take on
// the device for such sizes, and an eager call of a small convolution is
// bound by host time (the digits CNN's two convolutions: 0.3M and 2.4M).
constexpr double kDnnMinMacs = 16e6;

// PLUGGABLE_CUDNN, read once: 0 off, 1 required, 2 when it can (unset).
int dnn_mode() {
  static const int mode = [] {
    const char* v = getenv("PLUGGABLE_CUDNN");
    if (v != nullptr && strcmp(v, "0") == 0) return 0;
    if (v != nullptr && strcmp(v, "1") == 0) return 1;
    return 2;
  }();
  return mode;
}

// The stream's cuDNN handle, made on first use (call with s->mu held).
void* stream_dnn_handle(CudaStream* s, const DnnApi* api, DnnStatus* r) {
  if (s->dnn_handle != nullptr) return s->dnn_handle;
  void* h = nullptr;
  *r = api->create(&h);
  if (*r != kDnnSuccess || h == nullptr) return nullptr;
  *r = api->set_stream(h, s->stream);
  if (*r != kDnnSuccess) {
    (void)api->destroy(h);
    return nullptr;
  }
  s->dnn_handle = h;
  return h;
}

}  // namespace

void* conv_prepare_stream(CudaStream* s) {
  if (!dnn_loaded() || dnn_mode() == 0) return nullptr;
  TF_Status* st = TF_NewStatus();
  const DnnApi* api = load_dnn(st);
  TF_DeleteStatus(st);
  DnnStatus r = kDnnSuccess;
  return api != nullptr ? stream_dnn_handle(s, api, &r) : nullptr;
}

namespace {

// cuDNN's data type for `dt`, or -1 where the own kernels run (float64: cuDNN
// has no NHWC kernels for it).
int dnn_dtype(TF_DataType dt) {
  switch (dt) {
    case TF_FLOAT: return kDnnFloat;
    case TF_HALF: return kDnnHalf;
    case TF_BFLOAT16: return kDnnBFloat16;
    default: return -1;
  }
}

// out[k][r][s][c] = in[r][s][c][k]: a TF filter (HWIO) as cuDNN's NHWC filter
// layout (KRSC).
template <typename T>
__global__ void filter_to_krsc_kernel(const T* __restrict__ in, T* __restrict__ out,
                                      int64_t rs, int64_t c, int64_t k) {
  const int64_t total = rs * c * k;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t kk = i / (rs * c), rem = i % (rs * c);
    const int64_t pos = rem / c, cc = rem % c;
    out[i] = in[(pos * c + cc) * k + kk];
  }
}

// Descriptors of one call, destroyed with it.
struct DnnDescs {
  const DnnApi* api;
  void *x = nullptr, *w = nullptr, *y = nullptr, *conv = nullptr;
  explicit DnnDescs(const DnnApi* a) : api(a) {}
  ~DnnDescs() {
    if (x != nullptr) (void)api->destroy_tensor(x);
    if (y != nullptr) (void)api->destroy_tensor(y);
    if (w != nullptr) (void)api->destroy_filter(w);
    if (conv != nullptr) (void)api->destroy_conv(conv);
  }
};

enum class DnnOutcome { kDone, kDeclined, kFailed };

// Runs the convolution through cuDNN. kDeclined: cuDNN is off, missing or
// refused the shape, and nothing was enqueued (the own kernels run);
// kFailed: a failure is recorded in `c`.
DnnOutcome conv_cudnn(OpCall& c, const ConvState& st, const ConvParams& p, int64_t pb,
                      int64_t pr, TF_DataType dt, const void* in, const void* flt, void* out) {
  const int mode = dnn_mode();
  const int ddt = dnn_dtype(dt);
  const int64_t groups = p.C / p.FC;
  // cuDNN pads both sides alike; the output must not need more after.
  if (mode == 0 || ddt < 0 || p.pt != pb || p.pl != pr) return DnnOutcome::kDeclined;
  const double macs = double(p.N) * double(p.OH) * double(p.OW) * double(p.OC) *
                      double(p.KH) * double(p.KW) * double(p.FC);
  if (mode == 2 && macs < kDnnMinMacs) return DnnOutcome::kDeclined;
  const int64_t dims[] = {p.N, p.H, p.W, p.C, p.KH, p.KW, p.FC, p.OC, p.OH, p.OW};
  for (int64_t d : dims) {
    if (d > INT_MAX) return DnnOutcome::kDeclined;
  }
  const DnnApi* api = load_dnn(c.status());
  if (api == nullptr) {
    if (mode == 1) {
      c.check_status();
      return DnnOutcome::kFailed;
    }
    TF_SetStatus(c.status(), TF_OK, "");
    return DnnOutcome::kDeclined;
  }
  // (r < 0: cuDNN said nothing, it only had nothing that fits)
  auto refuse = [&](const char* what, DnnStatus r) {
    if (mode != 1) return DnnOutcome::kDeclined;
    c.fail(TF_UNIMPLEMENTED, "Conv2D: cuDNN %s failed: %s (PLUGGABLE_CUDNN=1 asks for cuDNN)",
           what, r < 0 ? "nothing fits this convolution" : dnn_status_text(api, r).c_str());
    return DnnOutcome::kFailed;
  };
  DnnDescs d(api);
  DnnStatus r = api->create_tensor(&d.x);
  if (r == kDnnSuccess) r = api->create_tensor(&d.y);
  if (r == kDnnSuccess) r = api->create_filter(&d.w);
  if (r == kDnnSuccess) r = api->create_conv(&d.conv);
  if (r != kDnnSuccess) return refuse("descriptor creation", r);
  const int compute = kDnnFloat;  // 16-bit types accumulate in float
  const int math = dt == TF_FLOAT ? (st.allow_tf32 ? kDnnDefaultMath : kDnnFmaMath)
                                  : kDnnTensorOpMath;
  r = api->set_tensor_4d(d.x, kDnnNHWC, ddt, int(p.N), int(p.C), int(p.H), int(p.W));
  if (r == kDnnSuccess)
    r = api->set_tensor_4d(d.y, kDnnNHWC, ddt, int(p.N), int(p.OC), int(p.OH), int(p.OW));
  if (r == kDnnSuccess)
    r = api->set_filter_4d(d.w, ddt, kDnnNHWC, int(p.OC), int(p.FC), int(p.KH), int(p.KW));
  if (r == kDnnSuccess)
    r = api->set_conv_2d(d.conv, int(p.pt), int(p.pl), int(p.sh), int(p.sw), int(p.dh),
                         int(p.dw), kDnnCrossCorrelation, compute);
  if (r == kDnnSuccess) r = api->set_conv_math(d.conv, math);
  if (r == kDnnSuccess && groups > 1) r = api->set_conv_groups(d.conv, int(groups));
  if (r != kDnnSuccess) return refuse("descriptor setup", r);

  CudaStream* s = c.cuda_stream();
  std::lock_guard<std::mutex> lock(s->mu);  // the handle, bound to s->stream
  void* h = stream_dnn_handle(s, api, &r);
  if (h == nullptr) return refuse("cudnnCreate", r);
  bool found = false;
  DnnChoice pick;
  {
    std::lock_guard<std::mutex> lk(st.mu);
    for (const DnnChoice& ch : st.choices) {
      if (ch.n == p.N && ch.h == p.H && ch.w == p.W && ch.c == p.C && ch.kh == p.KH &&
          ch.kw == p.KW && ch.fc == p.FC && ch.oc == p.OC && ch.dt == dt) {
        found = true;
        pick = ch;
        break;
      }
    }
  }
  if (!found) {
    pick = {p.N, p.H, p.W, p.C, p.KH, p.KW, p.FC, p.OC, dt, -1, 0};
    DnnFwdAlgoPerf perf[8];
    int returned = 0;
    r = api->fwd_algorithms(h, d.x, d.w, d.conv, d.y, 8, &returned, perf);
    for (int i = 0; r == kDnnSuccess && i < returned; ++i) {
      size_t bytes = 0;
      if (perf[i].status != kDnnSuccess ||
          api->fwd_workspace(h, d.x, d.w, d.conv, d.y, perf[i].algo, &bytes) != kDnnSuccess ||
          bytes > kMaxDnnWorkspace) {
        continue;
      }
      pick.algo = perf[i].algo;
      pick.ws_bytes = bytes;
      break;
    }
    std::lock_guard<std::mutex> lk(st.mu);
    if (st.choices.size() >= kMaxChoices) st.choices.erase(st.choices.begin());
    st.choices.push_back(pick);
  }
  if (pick.algo < 0) return refuse("algorithm choice", r != kDnnSuccess ? r : -1);

  const size_t esize = TF_DataTypeSize(dt);
  const int64_t fcount = p.KH * p.KW * p.FC * p.OC;
  const int64_t ws_elems = static_cast<int64_t>((pick.ws_bytes + esize - 1) / esize);
  TensorPtr krsc = c.temp(dt, fcount);
  if (!krsc) return DnnOutcome::kFailed;
  TensorPtr ws;
  if (ws_elems > 0) {
    ws = c.temp(dt, ws_elems);
    if (!ws) return DnnOutcome::kFailed;
  }
  void* kf = TF_TensorData(krsc.get());
  const unsigned grid = grid_for(fcount, c.sm_count());
  switch (esize) {  // (float32 and the 16-bit types)
    case 2:
      filter_to_krsc_kernel<uint16_t><<<grid, kThreads, 0, c.stream()>>>(
          static_cast<const uint16_t*>(flt), static_cast<uint16_t*>(kf), p.KH * p.KW, p.FC,
          p.OC);
      break;
    case 4:
      filter_to_krsc_kernel<uint32_t><<<grid, kThreads, 0, c.stream()>>>(
          static_cast<const uint32_t*>(flt), static_cast<uint32_t*>(kf), p.KH * p.KW, p.FC,
          p.OC);
      break;
    default:
      return refuse("filter layout", -1);
  }
  if (!c.check_launch("Conv2D filter transpose")) return DnnOutcome::kFailed;
  const float one = 1.0f, zero = 0.0f;  // (float scaling for every type cuDNN takes here)
  r = api->forward(h, &one, d.x, in, d.w, kf, d.conv, pick.algo,
                   ws ? TF_TensorData(ws.get()) : nullptr, pick.ws_bytes, &zero, d.y, out);
  if (r != kDnnSuccess) {
    // The transpose only wrote a temporary: the own kernels can still run.
    return refuse("cudnnConvolutionForward", r);
  }
  return DnnOutcome::kDone;
}

}  // namespace

void* dnn_conv_cache_new(bool allow_tf32) {
  ConvState* st = new (std::nothrow) ConvState();
  if (st != nullptr) st->allow_tf32 = allow_tf32;
  return st;
}

void dnn_conv_cache_delete(void* cache) { delete static_cast<ConvState*>(cache); }

int conv2d_cudnn(OpCall& c, void* cache, const NhwcConvShape& g, TF_DataType dt,
                 const void* in, const void* filter, void* out) {
  if (cache == nullptr || g.FC <= 0 || g.C % g.FC != 0) return 0;
  const ConvParams p{g.N, g.H, g.W, g.C, g.KH, g.KW, g.FC, g.OC, g.OH, g.OW,
                     g.sh, g.sw, g.dh, g.dw, g.pt, g.pl, g.OC / (g.C / g.FC)};
  switch (conv_cudnn(c, *static_cast<const ConvState*>(cache), p, g.pb, g.pr, dt, in, filter,
                     out)) {
    case DnnOutcome::kDone: return 1;
    case DnnOutcome::kFailed: return -1;
    case DnnOutcome::kDeclined: break;
  }
  return 0;
}

namespace {

void conv_compute(void* kernel, TF_OpKernelContext* ctx) {
  const ConvState* st = static_cast<const ConvState*>(kernel);
  OpCall c(ctx);
  if (!c.ok()) return;
  if (st == nullptr) {
    c.fail(TF_INTERNAL, "Conv2D kernel has no state");
    return;
  }
  TensorPtr x = c.input(0);
  if (!x) return;
  TensorPtr f = c.input(1);
  if (!f) return;
  const Shape si = Shape::of(x.get()), sf = Shape::of(f.get());
  if (si.rank != 4) {
    c.fail(TF_INVALID_ARGUMENT, "input must be 4-dimensional, got rank %d", si.rank);
    return;
  }
  if (sf.rank != 4) {
    c.fail(TF_INVALID_ARGUMENT, "filter must be 4-dimensional, got rank %d", sf.rank);
    return;
  }
  ConvParams p;
  p.N = si.dims[0];
  p.H = si.dims[1];
  p.W = si.dims[2];
  p.C = si.dims[3];
  p.KH = sf.dims[0];
  p.KW = sf.dims[1];
  p.FC = sf.dims[2];
  p.OC = sf.dims[3];
  if (p.FC <= 0 || p.C % p.FC != 0) {
    c.fail(TF_INVALID_ARGUMENT,
           "input depth must be evenly divisible by filter depth: %lld vs %lld",
           static_cast<long long>(p.C), static_cast<long long>(p.FC));
    return;
  }
  const int64_t groups = p.C / p.FC;
  if (p.OC % groups != 0) {
    c.fail(TF_INVALID_ARGUMENT,
           "number of output channels (%lld) is not divisible by the number of groups (%lld)",
           static_cast<long long>(p.OC), static_cast<long long>(groups));
    return;
  }
  p.oc_per_group = p.OC / groups;
  p.sh = st->stride_h;
  p.sw = st->stride_w;
  p.dh = st->dil_h;
  p.dw = st->dil_w;
  if (!conv_out_size(*st, p.H, p.KH, p.sh, p.dh, st->explicit_pads[2], st->explicit_pads[3],
                     &p.OH, &p.pt) ||
      !conv_out_size(*st, p.W, p.KW, p.sw, p.dw, st->explicit_pads[4], st->explicit_pads[5],
                     &p.OW, &p.pl)) {
    c.fail(TF_INVALID_ARGUMENT,
           "Conv2D: the (dilated) filter is larger than the (padded) input");
    return;
  }
  // Padding after (bottom, right) that the output reads.
  const int64_t pb = (p.OH - 1) * p.sh + (p.KH - 1) * p.dh + 1 - p.H - p.pt;
  const int64_t pr = (p.OW - 1) * p.sw + (p.KW - 1) * p.dw + 1 - p.W - p.pl;
  const TF_DataType dt = TF_TensorType(x.get());
  Shape so;
  so.rank = 4;
  so.dims[0] = p.N;
  so.dims[1] = p.OH;
  so.dims[2] = p.OW;
  so.dims[3] = p.OC;
  TensorPtr out = c.output(0, dt, so);
  if (!out) return;
  const int64_t total = so.num_elements();
  if (total == 0) return;
  const void* in = TF_TensorData(x.get());
  const void* flt = TF_TensorData(f.get());
  void* o = TF_TensorData(out.get());
  switch (conv_cudnn(c, *st, p, pb < 0 ? 0 : pb, pr < 0 ? 0 : pr, dt, in, flt, o)) {
    case DnnOutcome::kDone:
    case DnnOutcome::kFailed:
      return;
    case DnnOutcome::kDeclined:
      break;
  }
  const int64_t M = p.N * p.OH * p.OW;
  const int64_t K = p.KH * p.KW * p.FC;
  const int64_t grid_m = (M + kConvBM - 1) / kConvBM;
  const int64_t grid_n = (p.OC + kConvBN - 1) / kConvBN;
  // The tiled kernel handles ungrouped convolutions whose grid fits.
  const bool gemm = groups == 1 && grid_m <= INT32_MAX && grid_n <= 65535;
  const bool handled = dispatch_float(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (gemm) {
      conv2d_gemm_kernel<T><<<dim3(static_cast<unsigned>(grid_m), static_cast<unsigned>(grid_n)),
                              256, 0, c.stream()>>>(static_cast<const T*>(in),
                                                    static_cast<const T*>(flt),
                                                    static_cast<T*>(o), M, K, p);
    } else {
      conv2d_nhwc_kernel<T><<<grid_for(total, c.sm_count(), kThreads, 16), kThreads, 0,
                              c.stream()>>>(static_cast<const T*>(in),
                                            static_cast<const T*>(flt), static_cast<T*>(o),
                                            total, p);
    }
    c.check_launch("Conv2D");
  });
  if (!handled) c.fail(TF_UNIMPLEMENTED, "Conv2D: dtype %s", dtype_name(dt));
}

}  // namespace

void register_conv_kernels() {
  for (TF_DataType t : kFloatTypes) {
    register_kernel("Conv2D", conv_create, conv_compute, conv_delete, {{"T", t}});
  }
}

}  // namespace pgcuda
