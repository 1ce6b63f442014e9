// Matrix-vector path for MatMul and _FusedMatMul with few rows (gemv.h).
//
// C[M, N] = act(A[M, K] B[K, N] + bias) for M <= 8, split over K:
//
//  1. gemv_partial_kernel, grid (column tiles of 128, K slices). A block is
//     32 x 8 threads: each thread owns 4 consecutive columns (one 16-byte load
//     of B per row for float32 when N % 4 == 0 and B is aligned, scalar loads
//     otherwise) and every 8th row of the block's K slice (a multiple of 64
//     rows for one or two rows of A: 16 rows in flight, the next 8 loading
//     while the last 8 are multiplied; of 32 rows from three rows of A on: 4
//     and 4, the accumulators taking the registers);
//     it accumulates the M rows in registers, reading A's values from shared
//     memory (one address per warp: a broadcast). The 8 row groups are summed
//     in shared memory in a fixed order and the block writes its slice's
//     partial sums [slice, M, N] (float) to a temporary.
//  2. The last block of a column tile to finish (it takes a ticket: an
//     atomic count per tile, kept per stream and left at zero) sums the
//     tile's slices in slice order, adds the bias, applies the Relu and
//     stores C, so the whole product is one launch. Where the stream has no
//     tickets (more tiles than kGemvTickets, or a first use under capture)
//     gemv_reduce_kernel does this in a second launch, with the same sums.
//     With a single K slice, pass 1 stores C itself.
//
// With transpose_b (B stored [N, K]) each column is a dot product of
// contiguous rows: gemv_t_kernel, one warp per column, in one pass.
//
// On devices of compute capability 9.0 and later (when the kernel was built
// for one), pass 1 is launched as a programmatic dependent launch: its blocks
// may start while the kernel before it on the stream is finishing. Before it
// touches memory a block only asks the L2 cache for its first rows of B (a
// prefetch: it reads nothing into registers, so it cannot see data the kernel
// before is still writing), then waits for that kernel to finish
// (griddepcontrol.wait) and lets the next one start. A chain of layers then
// overlaps each launch and each kernel's tail with the next kernel's start.
// PLUGGABLE_CUDA_PDL=0 turns this off (read once per process).
//
// The number of slices makes the grid at most one full wave of resident
// blocks (the occupancy of the pass 1 kernel times the multiprocessors), so
// that enough loads are in flight to run at the memory bandwidth and no
// block waits for a second wave; it depends on the shape and the device
// only, so results repeat bit for bit on one device.
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <type_traits>

#include "gemv.h"

namespace pgcuda {
namespace {

constexpr int kLanes = 32;                // threads along N in a block
constexpr int kRowGroups = 8;             // threads along K in a block
constexpr int kCols = kLanes * 4;         // columns of a block
// Rows of B in flight per thread for MR rows of A (8, then the next 8, for
// one or two rows; 4 and 4 from three rows on, where the accumulators need
// the registers), and the rows a block reads at once (a slice has at least
// two such groups).
template <int MR>
struct Unroll {
  static constexpr int rows = MR <= 2 ? 8 : 4;
  static constexpr int group_rows = rows * kRowGroups;
};
// Rows of A staged in shared memory at once (a whole slice of the MLP's
// layers for one or two rows; 256 keeps 8 rows within 48 KiB with the sums),
// and the rows staged: zeros past the chunk.
template <int MR>
struct XRows {
  static constexpr int chunk = MR <= 2 ? 1024 : 256;
  static constexpr int stage = chunk + Unroll<MR>::group_rows;
};

// Loads B[row, col .. col + 3] as floats: one wide load when VEC (then the
// 4 columns are in range and aligned), else element by element, 0 past N.
template <bool VEC>
__device__ __forceinline__ void load4(const float* p, int64_t col, int64_t N, float w[4]) {
  if constexpr (VEC) {
    const float4 v = __ldg(reinterpret_cast<const float4*>(p));
    w[0] = v.x;
    w[1] = v.y;
    w[2] = v.z;
    w[3] = v.w;
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) w[j] = col + j < N ? __ldg(p + j) : 0.0f;
  }
}

// A 16-bit float from its bits (little-endian lanes of a wide load).
template <typename T> __device__ __forceinline__ T from_bits(unsigned short b);
template <> __device__ __forceinline__ __half from_bits<__half>(unsigned short b) {
  return __ushort_as_half(b);
}
template <> __device__ __forceinline__ __nv_bfloat16 from_bits<__nv_bfloat16>(unsigned short b) {
  return __ushort_as_bfloat16(b);
}

template <bool VEC, typename T>
__device__ __forceinline__ void load4(const T* p, int64_t col, int64_t N, float w[4]) {
  if constexpr (VEC) {  // 4 16-bit values in one 8-byte load
    const uint2 u = __ldg(reinterpret_cast<const uint2*>(p));
    w[0] = to_compute(from_bits<T>(static_cast<unsigned short>(u.x & 0xffffu)));
    w[1] = to_compute(from_bits<T>(static_cast<unsigned short>(u.x >> 16)));
    w[2] = to_compute(from_bits<T>(static_cast<unsigned short>(u.y & 0xffffu)));
    w[3] = to_compute(from_bits<T>(static_cast<unsigned short>(u.y >> 16)));
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) w[j] = col + j < N ? to_compute(p[j]) : 0.0f;
  }
}

// Loads rows kk, kk + kRowGroups, ... (R of them) of B at columns col .. col + 3;
// rows at or past `len` read as 0.
template <typename T, int R, bool VEC>
__device__ __forceinline__ void load_rows(const T* base, int kk, int len, int64_t col,
                                          int64_t N, float w[R][4]) {
#pragma unroll
  for (int u = 0; u < R; ++u) {
    if (kk + u * kRowGroups < len) {
      load4<VEC>(base + static_cast<int64_t>(kk + u * kRowGroups) * N, col, N, w[u]);
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) w[u][j] = 0.0f;
    }
  }
}

// The start of a programmatic dependent launch (see the top): asks the L2
// cache for rows [k_begin, k_end) of B at the block's columns [tile, tile +
// kCols), each warp one row in kRowGroups, then waits for the kernel before
// on the stream and lets the next one start. Without sm_90 it does nothing
// (the host launches such a binary without the attribute).
template <typename T>
__device__ __forceinline__ void pdl_begin(const T* b, int64_t k_begin, int64_t k_end,
                                          int64_t tile, int64_t N) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const int64_t cols = N - tile < kCols ? N - tile : kCols;
  const int lines = static_cast<int>((cols * static_cast<int64_t>(sizeof(T)) + 127) / 128);
  if (static_cast<int>(threadIdx.x) < lines) {
    for (int64_t k = k_begin + threadIdx.y; k < k_end; k += kRowGroups) {
      const char* p = reinterpret_cast<const char*>(b + k * N + tile) + threadIdx.x * 128;
      asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
    }
  }
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// acc[r][j] += A[r, row] * w[j] for the MR rows of A staged in xs.
template <int MR>
__device__ __forceinline__ void fma_row(const float (*xs)[XRows<MR>::stage], int row,
                                        const float w[4], float acc[MR][4]) {
#pragma unroll
  for (int r = 0; r < MR; ++r) {
    const float xv = xs[r][row];  // one address for the warp: a broadcast
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[r][j] = fmaf(xv, w[j], acc[r][j]);
  }
}

// act(s + bias[col]) stored as T.
template <typename T>
__device__ __forceinline__ T epilogue(float s, const T* __restrict__ bias, int64_t col,
                                      bool relu) {
  if (bias != nullptr) s += to_compute(bias[col]);
  if (relu && s < 0.0f) s = 0.0f;
  return from_compute<T>(s);
}

// Pass 1 for MR = M rows. Block (kLanes, kRowGroups); grid (column tiles,
// K slices of `slice_rows`). Writes partial[slice, r, n] when `partial` is
// not null, else out[r, n] = act(sum + bias[n]) (a single slice); with
// `tickets` too, the tile's last block also stores out (see the top). With
// `pdl` the launch is a programmatic dependent one (see the top).
template <typename T, int MR, bool VEC>
__global__ void __launch_bounds__(kLanes* kRowGroups)
    gemv_partial_kernel(const T* __restrict__ a, const T* __restrict__ b,
                        float* __restrict__ partial, unsigned int* __restrict__ tickets,
                        const T* __restrict__ bias, T* __restrict__ out, bool relu, int64_t N,
                        int64_t K, int64_t slice_rows, bool pdl) {
  constexpr int kXChunk = XRows<MR>::chunk, kXStage = XRows<MR>::stage;
  constexpr int kUnroll = Unroll<MR>::rows, kGroupRows = Unroll<MR>::group_rows;
  __shared__ float xs[MR][kXStage];
  __shared__ float4 red[kRowGroups][MR][kLanes];
  const int lane = threadIdx.x, group = threadIdx.y;
  const int tid = group * kLanes + lane;
  const int64_t tile = static_cast<int64_t>(blockIdx.x) * kCols;
  const int64_t col = tile + lane * 4;
  const int64_t k_begin = static_cast<int64_t>(blockIdx.y) * slice_rows;
  const int64_t k_end = k_begin + slice_rows < K ? k_begin + slice_rows : K;
  const bool active = col < N;
  if (pdl) {
    pdl_begin(b, k_begin, k_begin + kGroupRows < k_end ? k_begin + kGroupRows : k_end, tile, N);
  }
  float acc[MR][4];
#pragma unroll
  for (int r = 0; r < MR; ++r) {
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[r][j] = 0.0f;
  }
  for (int64_t kc = k_begin; kc < k_end; kc += kXChunk) {
    const int len = static_cast<int>(k_end - kc < kXChunk ? k_end - kc : kXChunk);
    const T* base = b + kc * N + col;  // dereferenced by active threads only
    int kk = group;
    // The first rows of B are loaded before A is staged, so that their latency
    // overlaps the staging and the barrier.
    float w[kUnroll][4];
    bool more = active && kk < len;
    if (more) load_rows<T, kUnroll, VEC>(base, kk, len, col, N, w);
    __syncthreads();  // the previous chunk's readers are done
    for (int i = tid; i < MR * kXStage; i += kLanes * kRowGroups) {
      const int r = i / kXStage, x = i % kXStage;
      xs[r][x] = x < len ? to_compute(a[r * K + kc + x]) : 0.0f;
    }
    __syncthreads();
    // Software pipelined: the next kUnroll rows are in flight while these are
    // multiplied (rows past the chunk are 0 in both B's registers and xs).
    while (more) {
      const int next = kk + kGroupRows;
      const bool next_more = next < len;
      float nw[kUnroll][4];
      if (next_more) load_rows<T, kUnroll, VEC>(base, next, len, col, N, nw);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) fma_row<MR>(xs, kk + u * kRowGroups, w[u], acc);
      if (next_more) {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
          for (int j = 0; j < 4; ++j) w[u][j] = nw[u][j];
        }
      }
      kk = next;
      more = next_more;
    }
  }
#pragma unroll
  for (int r = 0; r < MR; ++r) {
    red[group][r][lane] = make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
  }
  __syncthreads();
  for (int i = tid; i < MR * kCols; i += kLanes * kRowGroups) {
    const int r = i / kCols, c = i % kCols;
    const int64_t n = tile + c;
    if (n >= N) continue;
    float s = 0.0f;
#pragma unroll
    for (int g = 0; g < kRowGroups; ++g) s += reinterpret_cast<const float*>(red[g][r])[c];
    if (partial != nullptr) {
      partial[(static_cast<int64_t>(blockIdx.y) * MR + r) * N + n] = s;
    } else {
      out[r * N + n] = epilogue(s, bias, n, relu);
    }
  }
  if (tickets == nullptr) return;
  // This block's partial sums are visible to the device before it takes a
  // ticket; the block that takes the last one reads every slice's.
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (tid == 0) last = atomicAdd(&tickets[blockIdx.x], 1u) == gridDim.y - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int i = tid; i < MR * kCols; i += kLanes * kRowGroups) {
    const int r = i / kCols, c = i % kCols;
    const int64_t n = tile + c;
    if (n >= N) continue;
    float s = 0.0f;  // the slices in order, as gemv_reduce_kernel sums them
    for (unsigned z = 0; z < gridDim.y; ++z) s += __ldcg(partial + (z * MR + r) * N + n);
    out[r * N + n] = epilogue(s, bias, n, relu);
  }
  if (tid == 0) tickets[blockIdx.x] = 0;  // ready for the stream's next launch
}

// Pass 2: out[i] = act(sum over slices of partial[slice, i] + bias[i % N]),
// the slices summed in order. Grid-stride over the M * N outputs.
template <typename T>
__global__ void gemv_reduce_kernel(const float* __restrict__ partial, const T* __restrict__ bias,
                                   T* __restrict__ out, bool relu, int64_t total, int64_t N,
                                   int64_t slices) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    float s = 0.0f;
    for (int64_t z = 0; z < slices; ++z) s += partial[z * total + i];
    out[i] = epilogue(s, bias, i % N, relu);
  }
}

// C = act(A B^T + bias) with B row-major [N, K] (transpose_b): one warp per
// output column n (grid-stride), each lane summing its share of K (4
// consecutive elements per load when VEC: K % 4 == 0 and A, B aligned), then
// a butterfly over the warp in a fixed order; lane r stores row r.
template <typename T, int MR, bool VEC>
__global__ void __launch_bounds__(kThreads)
    gemv_t_kernel(const T* __restrict__ a, const T* __restrict__ b, const T* __restrict__ bias,
                  T* __restrict__ out, bool relu, int64_t N, int64_t K) {
  const int lane = threadIdx.x % 32;
  const int64_t per_block = blockDim.x / 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * per_block;
  for (int64_t n = static_cast<int64_t>(blockIdx.x) * per_block + threadIdx.x / 32; n < N;
       n += warps) {
    const T* row = b + n * K;
    float acc[MR];
#pragma unroll
    for (int r = 0; r < MR; ++r) acc[r] = 0.0f;
    if constexpr (VEC) {
      for (int64_t k0 = 0; k0 < K; k0 += 4 * 128) {
        float w[4][4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const int64_t k = k0 + u * 128 + lane * 4;
          if (k < K) load4<true>(row + k, k, K, w[u]);
        }
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const int64_t k = k0 + u * 128 + lane * 4;
          if (k >= K) continue;
#pragma unroll
          for (int r = 0; r < MR; ++r) {
            float x[4];
            load4<true>(a + r * K + k, k, K, x);
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[r] = fmaf(x[j], w[u][j], acc[r]);
          }
        }
      }
    } else {
#pragma unroll 4
      for (int64_t k = lane; k < K; k += 32) {
        const float w = to_compute(row[k]);
#pragma unroll
        for (int r = 0; r < MR; ++r) acc[r] = fmaf(to_compute(a[r * K + k]), w, acc[r]);
      }
    }
#pragma unroll
    for (int r = 0; r < MR; ++r) {
#pragma unroll
      for (int off = 16; off > 0; off /= 2) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], off);
      if (lane == r) out[r * N + n] = epilogue(acc[r], bias, n, relu);
    }
  }
}

// Whether the pass 1 kernel `kernel` may be launched as a programmatic
// dependent launch: PLUGGABLE_CUDA_PDL is not "0" and the code the device
// runs was built for compute capability 9.0 or later (so it waits).
template <typename K>
bool pdl_launch_ok(K* kernel, int ordinal) {
  static const bool allowed = not_turned_off("PLUGGABLE_CUDA_PDL");
  if (!allowed) return false;
  constexpr int kMaxDevices = 64;
  static std::atomic<int> known[kMaxDevices];  // 0 unknown, 1 no, 2 yes
  const bool cached = ordinal >= 0 && ordinal < kMaxDevices;
  if (cached) {
    const int v = known[ordinal].load(std::memory_order_relaxed);
    if (v != 0) return v == 2;
  }
  cudaFuncAttributes fa;
  bool ok = cudaFuncGetAttributes(&fa, kernel) == cudaSuccess && fa.binaryVersion >= 90;
  if (!ok) (void)cudaGetLastError();
  if (cached) known[ordinal].store(ok ? 2 : 1, std::memory_order_relaxed);
  return ok;
}

bool gemv_enabled() {
  // On unless turned off (docs/benchmarks.md, "The CUDA matrix-vector path").
  static const bool on = not_turned_off("PLUGGABLE_CUDA_GEMV");
  return on;
}

// The launch geometry: column tiles, slices and rows per slice.
struct GemvGrid {
  int64_t tiles, slices, slice_rows;
};

// Resident blocks per multiprocessor of gemv_partial_kernel<T, MR, VEC> on
// device `ordinal` (asked once per device; 2 if the runtime cannot say).
template <typename T, int MR, bool VEC>
int blocks_per_sm(int ordinal) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> known[kMaxDevices];
  const bool cached = ordinal >= 0 && ordinal < kMaxDevices;
  if (cached) {
    const int v = known[ordinal].load(std::memory_order_relaxed);
    if (v > 0) return v;
  }
  int n = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, gemv_partial_kernel<T, MR, VEC>,
                                                    kLanes * kRowGroups, 0) != cudaSuccess ||
      n < 1) {
    (void)cudaGetLastError();
    n = 2;
  }
  if (cached) known[ordinal].store(n, std::memory_order_relaxed);
  return n;
}

// `group_rows`: Unroll<MR>::group_rows of the kernel launched.
GemvGrid gemv_grid(int64_t N, int64_t K, int sm_count, int per_sm, int64_t group_rows) {
  GemvGrid g;
  g.tiles = (N + kCols - 1) / kCols;
  const int64_t target = static_cast<int64_t>(sm_count > 0 ? sm_count : 1) * per_sm;
  int64_t slices = (target + g.tiles - 1) / g.tiles;
  // A grid a little past one full wave leaves a few blocks that run after
  // all the others (1x4096x4096 on an H100: 416 blocks for 396 places): one
  // slice fewer, where that still fills at least half the places.
  if (slices > 1 && g.tiles * slices > target && g.tiles * (slices - 1) * 2 >= target) --slices;
  const int64_t by_k = (K + 2 * group_rows - 1) / (2 * group_rows);
  if (slices > by_k) slices = by_k;
  if (slices > 65535) slices = 65535;
  if (slices < 1) slices = 1;
  // Whole groups of rows per slice (no partly filled loads but at K's end),
  // then no empty slice.
  g.slice_rows = ((K + slices - 1) / slices + group_rows - 1) / group_rows * group_rows;
  g.slices = (K + g.slice_rows - 1) / g.slice_rows;
  return g;
}

// Both passes for MR = M rows of dtype T; VEC: N % 4 == 0 and b aligned for
// wide loads.
template <typename T, int MR, bool VEC>
bool run_rows(OpCall& c, const void* a, const void* b, const void* bias, bool relu, void* out,
              int64_t N, int64_t K) {
  const GemvGrid g = gemv_grid(N, K, c.sm_count(), blocks_per_sm<T, MR, VEC>(c.ordinal()),
                               Unroll<MR>::group_rows);
  TensorPtr temp;
  float* partial = nullptr;
  if (g.slices > 1) {
    temp = c.temp(TF_FLOAT, g.slices * MR * N);
    if (!temp) return false;
    partial = static_cast<float*>(TF_TensorData(temp.get()));
  }
  unsigned int* tickets = nullptr;
  if (partial != nullptr && g.tiles <= kGemvTickets) {
    CudaStream* s = c.cuda_stream();
    std::lock_guard<std::mutex> lock(s->mu);
    tickets = gemv_prepare_stream(s);
  }
  auto* kernel = gemv_partial_kernel<T, MR, VEC>;
  const bool pdl = pdl_launch_ok(kernel, c.ordinal());
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(g.tiles), static_cast<unsigned>(g.slices));
  cfg.blockDim = dim3(kLanes, kRowGroups);
  cfg.stream = c.stream();
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = pdl ? &attr : nullptr;
  cfg.numAttrs = pdl ? 1 : 0;
  const cudaError_t launched =
      cudaLaunchKernelEx(&cfg, kernel, static_cast<const T*>(a), static_cast<const T*>(b),
                         partial, tickets, static_cast<const T*>(bias), static_cast<T*>(out),
                         relu, N, K, g.slice_rows, pdl);
  if (!c.check_cuda(launched, "launch of gemv_partial_kernel")) return false;
  if (partial == nullptr || tickets != nullptr) return true;
  const int64_t total = MR * N;
  gemv_reduce_kernel<T><<<grid_for(total, c.sm_count()), kThreads, 0, c.stream()>>>(
      partial, static_cast<const T*>(bias), static_cast<T*>(out), relu, total, N, g.slices);
  return c.check_launch("gemv_reduce_kernel");
}

template <typename T, int MR>
bool run_rows(OpCall& c, const void* a, const void* b, const void* bias, bool relu, void* out,
              int64_t N, int64_t K) {
  const bool vec = N % 4 == 0 && reinterpret_cast<uintptr_t>(b) % (4 * sizeof(T)) == 0;
  return vec ? run_rows<T, MR, true>(c, a, b, bias, relu, out, N, K)
             : run_rows<T, MR, false>(c, a, b, bias, relu, out, N, K);
}

// The transpose_b product for MR rows: one pass, a warp per column.
template <typename T, int MR>
bool run_rows_t(OpCall& c, const void* a, const void* b, const void* bias, bool relu, void* out,
                int64_t N, int64_t K) {
  const bool vec = K % 4 == 0 && reinterpret_cast<uintptr_t>(a) % (4 * sizeof(T)) == 0 &&
                   reinterpret_cast<uintptr_t>(b) % (4 * sizeof(T)) == 0;
  const unsigned grid = grid_for(N * 32, c.sm_count(), kThreads, 16);
  const T* pa = static_cast<const T*>(a);
  const T* pb = static_cast<const T*>(b);
  const T* pbias = static_cast<const T*>(bias);
  T* po = static_cast<T*>(out);
  if (vec) {
    gemv_t_kernel<T, MR, true><<<grid, kThreads, 0, c.stream()>>>(pa, pb, pbias, po, relu, N, K);
  } else {
    gemv_t_kernel<T, MR, false><<<grid, kThreads, 0, c.stream()>>>(pa, pb, pbias, po, relu, N, K);
  }
  return c.check_launch("gemv_t_kernel");
}

// f(std::integral_constant<int, M>) for M in [1, kGemvMaxRows]: the row
// count as a template argument.
template <typename F>
bool with_rows(int64_t M, F&& f) {
  switch (M) {
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, 2>{});
    case 3: return f(std::integral_constant<int, 3>{});
    case 4: return f(std::integral_constant<int, 4>{});
    case 5: return f(std::integral_constant<int, 5>{});
    case 6: return f(std::integral_constant<int, 6>{});
    case 7: return f(std::integral_constant<int, 7>{});
    case 8: return f(std::integral_constant<int, 8>{});
    default: return false;
  }
}
static_assert(kGemvMaxRows == 8, "with_rows covers 1..kGemvMaxRows");

template <typename T>
bool run_typed(OpCall& c, const char* op, bool transpose_b, const void* a, const void* b,
               const void* bias, bool relu, void* out, int64_t M, int64_t N, int64_t K) {
  if (M < 1 || M > kGemvMaxRows) {
    return c.fail(TF_INTERNAL, "%s: the matrix-vector path got %lld rows", op,
                  static_cast<long long>(M));
  }
  return with_rows(M, [&](auto rows) {
    constexpr int MR = decltype(rows)::value;
    return transpose_b ? run_rows_t<T, MR>(c, a, b, bias, relu, out, N, K)
                       : run_rows<T, MR>(c, a, b, bias, relu, out, N, K);
  });
}

}  // namespace

unsigned int* gemv_prepare_stream(CudaStream* s) {
  if (s->gemv_tickets != nullptr) return s->gemv_tickets;
  if (stream_capturing(s->stream)) return nullptr;  // no allocation inside a capture: two launches
  void* p = nullptr;
  const size_t bytes = kGemvTickets * sizeof(unsigned int);
  if (cudaMalloc(&p, bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  // Zeroed in stream order, before the first launch that uses them.
  if (cudaMemsetAsync(p, 0, bytes, s->stream) != cudaSuccess) {
    (void)cudaGetLastError();
    (void)cudaFree(p);
    return nullptr;
  }
  s->gemv_tickets = static_cast<unsigned int*>(p);
  return s->gemv_tickets;
}

bool gemv_applies(TF_DataType dt, bool transpose_a, bool /*transpose_b*/, int64_t M, int64_t N,
                  int64_t K) {
  if (dt != TF_FLOAT && dt != TF_HALF && dt != TF_BFLOAT16) return false;
  if (transpose_a) return false;  // B [K, N] or, with transpose_b, [N, K]: both taken
  if (M < 1 || M > kGemvMaxRows || N < 1 || K < 1) return false;
  if (N > INT_MAX || K > INT_MAX) return false;
  return gemv_enabled();
}

bool run_gemv(OpCall& c, const char* op, TF_DataType dt, bool transpose_b, const void* a,
              const void* b, const void* bias, bool relu, void* out, int64_t M, int64_t N,
              int64_t K) {
  switch (dt) {
    case TF_FLOAT:
      return run_typed<float>(c, op, transpose_b, a, b, bias, relu, out, M, N, K);
    case TF_HALF:
      return run_typed<__half>(c, op, transpose_b, a, b, bias, relu, out, M, N, K);
    case TF_BFLOAT16:
      return run_typed<__nv_bfloat16>(c, op, transpose_b, a, b, bias, relu, out, M, N, K);
    default:
      return c.fail(TF_UNIMPLEMENTED, "%s: the matrix-vector path has no dtype %s", op,
                    dtype_name(dt));
  }
}

}  // namespace pgcuda
