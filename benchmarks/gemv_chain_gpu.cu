// The traced MLP at batch 1 (1024-4096-4096-1024, float32, Relu after the
// first two layers) as matrix-vector products on one GPU, outside the
// framework: one launch per layer against one persistent launch for the
// whole chain. Answers whether fusing the chain into one kernel can beat
// the CUDA plugin's chain of launches (kernels_gemv.cu), which reads the
// 100.7 MB of weights at well below the GPU's streaming rate.
//
// Every variant splits a layer y = act(x W + b) (W [K, N] row-major) into
// items of 128 columns by S rows of K (S = 128 or 256): a block of 256
// threads (32 lanes of 4 columns by 8 row groups) reads its item's weights
// with 16-byte loads, 16 rows in flight per thread, multiplies them by the
// item's slice of x (staged in shared memory), sums the row groups in
// shared memory and writes the item's partial sums; the last item of a
// column tile to finish (an atomic ticket per tile) sums the tile's slices
// in slice order, adds the bias, applies the Relu and stores y, then marks
// the tile ready (a flag per tile holding the run's number).
//
//   launches    one launch per layer, a block per item;
//   persistent  one cooperative launch for the whole chain, as many blocks
//               as fit on the GPU at once, each taking items in turn
//               (round robin over the chain's items in layer order). A
//               block asks for its item's first 16 rows of weights (they do
//               not depend on the layer before), then waits until the tiles of
//               the layer before that hold its slice of x are ready. Every
//               block finishes its items of a layer before it takes one of
//               the next, and no item of the first layer waits, so every
//               wait ends.
//
// Also timed: a streaming read of the same 100.7 MB (the bandwidth
// ceiling), and each variant's result is checked against a plain kernel (one
// thread per column). Prints us per chain (CUDA events around 200
// back-to-back chains; best and median of 7 loops) and the effective
// bandwidth. Results: docs/benchmarks.md.
//
//   nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 \
//       benchmarks/gemv_chain_gpu.cu -o /tmp/gemv_chain && /tmp/gemv_chain
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <type_traits>
#include <vector>

#include <cuda_runtime.h>

#define CHECK(x)                                                                   \
  do {                                                                             \
    cudaError_t e_ = (x);                                                          \
    if (e_ != cudaSuccess) {                                                       \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,                   \
              cudaGetErrorString(e_));                                             \
      exit(1);                                                                     \
    }                                                                              \
  } while (0)

constexpr int kLanes = 32, kGroups = 8, kThreads = kLanes * kGroups;
constexpr int kCols = kLanes * 4;  // columns of an item
constexpr int kU = 8;              // rows per thread in one batch of loads
constexpr int kMaxLayers = 4, kMaxTiles = 64;

struct Layer {
  const float* w;    // [K, N]
  const float* b;    // [N]
  const float* in;   // [K]
  float* out;        // [N]
  float* partial;    // [slices, N]
  int K, N, relu, tiles, slices, item_begin;
};

struct Chain {
  Layer l[kMaxLayers];
  int layers, items;
  unsigned* tickets;  // [layer][tile], left at 0
  unsigned* ready;    // [layer][tile] = the run whose tile is stored
};

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_release(unsigned* p, unsigned v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void fma4(float x, const float4& w, float4& a) {
  a.x = fmaf(x, w.x, a.x);
  a.y = fmaf(x, w.y, a.y);
  a.z = fmaf(x, w.z, a.z);
  a.w = fmaf(x, w.w, a.w);
}
__device__ __forceinline__ void add4(float4& a, const float4& b) {
  a.x += b.x;
  a.y += b.y;
  a.z += b.z;
  a.w += b.w;
}

template <int S>
struct Smem {
  float xs[S];
  float4 red[kGroups][kLanes];
  int last;
};

// One item: rows [s * S, s * S + S) of layer `li`'s W at columns of tile t.
template <int S>
__device__ void run_item(const Chain& c, int item, unsigned run, Smem<S>& sm) {
  constexpr int kRows = S / kGroups;   // rows per thread
  constexpr int kBatches = kRows / kU;
  static_assert(kRows % kU == 0 && kBatches >= 2, "S must be a multiple of 128");
  int li = 0;
  while (li + 1 < c.layers && item >= c.l[li + 1].item_begin) ++li;
  const Layer& L = c.l[li];
  const int idx = item - L.item_begin;
  const int s = idx / L.tiles, t = idx % L.tiles;
  const int lane = threadIdx.x % kLanes, g = threadIdx.x / kLanes;
  const int col = t * kCols + lane * 4;
  const int k0 = s * S;
  const float* wp = L.w + static_cast<size_t>(k0 + g) * L.N + col;
  const size_t step = static_cast<size_t>(kGroups) * L.N;  // between a thread's rows

  // Two batches of kU rows in flight per thread, both asked for before
  // the wait: the weights do not depend on the layer before.
  float4 w[2][kU];
#pragma unroll
  for (int b = 0; b < 2; ++b) {
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      w[b][u] = __ldg(reinterpret_cast<const float4*>(wp + (b * kU + u) * step));
    }
  }

  if (li > 0) {  // wait for the tiles of the layer before that hold x[k0, k0 + S)
    if (threadIdx.x == 0) {
      const unsigned* flags = c.ready + (li - 1) * kMaxTiles;
      for (int tt = k0 / kCols; tt <= (k0 + S - 1) / kCols; ++tt) {
        while (ld_acquire(flags + tt) != run) __nanosleep(20);
      }
    }
    __syncthreads();
  }
  for (int i = threadIdx.x; i < S; i += kThreads) sm.xs[i] = __ldcg(L.in + k0 + i);
  __syncthreads();

  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
  for (int j = 0; j < kBatches; ++j) {
    const int cur = j & 1;
#pragma unroll
    for (int u = 0; u < kU; ++u) fma4(sm.xs[g + (j * kU + u) * kGroups], w[cur][u], acc);
    if (j + 2 < kBatches) {  // refill the batch just used with the one after next
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        w[cur][u] = __ldg(reinterpret_cast<const float4*>(wp + ((j + 2) * kU + u) * step));
      }
    }
  }

  sm.red[g][lane] = acc;
  __syncthreads();
  if (g == 0) {
    float4 sum = sm.red[0][lane];
#pragma unroll
    for (int gg = 1; gg < kGroups; ++gg) add4(sum, sm.red[gg][lane]);
    *reinterpret_cast<float4*>(L.partial + static_cast<size_t>(s) * L.N + col) = sum;
    __threadfence();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned prev = atomicAdd(c.tickets + li * kMaxTiles + t, 1u);
    sm.last = prev == static_cast<unsigned>(L.slices - 1);
  }
  __syncthreads();
  if (sm.last) {  // the tile's last item: sum its slices in order, store y
    if (g == 0) {
      __threadfence();
      float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
      for (int ss = 0; ss < L.slices; ++ss) {
        add4(v, __ldcg(reinterpret_cast<const float4*>(L.partial + static_cast<size_t>(ss) * L.N +
                                                        col)));
      }
      add4(v, *reinterpret_cast<const float4*>(L.b + col));
      if (L.relu) {
        v.x = fmaxf(v.x, 0.f);
        v.y = fmaxf(v.y, 0.f);
        v.z = fmaxf(v.z, 0.f);
        v.w = fmaxf(v.w, 0.f);
      }
      *reinterpret_cast<float4*>(L.out + col) = v;
      __threadfence();
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      c.tickets[li * kMaxTiles + t] = 0;
      st_release(c.ready + li * kMaxTiles + t, run);
    }
  }
  __syncthreads();  // shared memory is reused by the next item
}

template <int S>
__global__ void __launch_bounds__(kThreads)
    chain_kernel(const __grid_constant__ Chain c, int item_begin, int item_end, unsigned run) {
  __shared__ Smem<S> sm;
  for (int item = item_begin + blockIdx.x; item < item_end; item += gridDim.x) {
    run_item<S>(c, item, run, sm);
  }
}

// Plain reference: one thread per column.
__global__ void ref_layer(const float* w, const float* b, const float* in, float* out, int K,
                          int N, int relu) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  double s = 0.0;
  for (int k = 0; k < K; ++k) s += static_cast<double>(in[k]) * w[static_cast<size_t>(k) * N + n];
  float v = static_cast<float>(s) + b[n];
  out[n] = relu ? fmaxf(v, 0.f) : v;
}

// The streaming ceiling: reads n float4 once (sum kept so that it is not dropped).
__global__ void stream_read(const float4* p, int64_t n, float* sink) {
  float acc = 0.f;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float4 v = __ldg(p + i);
    acc += v.x + v.y + v.z + v.w;
  }
  if (acc == 12345.678f) *sink = acc;
}

static float lcg(uint64_t& s) {
  s = s * 6364136223846793005ull + 1442695040888963407ull;
  return static_cast<float>(static_cast<int64_t>(s >> 33) % 2001 - 1000) / 1000.0f;
}

template <int S>
static Chain make_chain(const std::vector<int>& dims, float** w, float** b, float** act,
                        float* partial, unsigned* tickets, unsigned* ready) {
  Chain c{};
  c.layers = static_cast<int>(dims.size()) - 1;
  int items = 0;
  size_t poff = 0;
  for (int i = 0; i < c.layers; ++i) {
    Layer& L = c.l[i];
    L.K = dims[i];
    L.N = dims[i + 1];
    L.w = w[i];
    L.b = b[i];
    L.in = act[i];
    L.out = act[i + 1];
    L.relu = i + 1 < c.layers;
    L.tiles = L.N / kCols;
    L.slices = L.K / S;
    L.partial = partial + poff;
    poff += static_cast<size_t>(L.slices) * L.N;
    L.item_begin = items;
    items += L.tiles * L.slices;
  }
  c.items = items;
  c.tickets = tickets;
  c.ready = ready;
  return c;
}

struct Timing {
  float best, median;
};

template <typename F>
static Timing time_it(F&& chain_once, cudaStream_t st, int calls = 200, int loops = 7) {
  cudaEvent_t a, z;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&z));
  for (int i = 0; i < 20; ++i) chain_once();
  CHECK(cudaStreamSynchronize(st));
  std::vector<float> per;
  for (int l = 0; l < loops; ++l) {
    CHECK(cudaEventRecord(a, st));
    for (int i = 0; i < calls; ++i) chain_once();
    CHECK(cudaEventRecord(z, st));
    CHECK(cudaEventSynchronize(z));
    float ms = 0.f;
    CHECK(cudaEventElapsedTime(&ms, a, z));
    per.push_back(ms * 1000.f / calls);
  }
  std::sort(per.begin(), per.end());
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(z));
  return {per.front(), per[per.size() / 2]};
}

int main() {
  const std::vector<int> dims = {1024, 4096, 4096, 1024};
  const int layers = static_cast<int>(dims.size()) - 1;
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  printf("%s, %d SMs, L2 %d MiB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);

  float* w[kMaxLayers];
  float* b[kMaxLayers];
  float* act[kMaxLayers + 1];
  float* ref[kMaxLayers + 1];
  size_t weight_bytes = 0;
  uint64_t seed = 42;
  for (int i = 0; i < layers; ++i) {
    const size_t kn = static_cast<size_t>(dims[i]) * dims[i + 1];
    std::vector<float> h(kn);
    const float scale = 1.0f / std::sqrt(static_cast<float>(dims[i]));
    for (auto& v : h) v = lcg(seed) * scale;
    CHECK(cudaMalloc(&w[i], kn * 4));
    CHECK(cudaMemcpy(w[i], h.data(), kn * 4, cudaMemcpyHostToDevice));
    weight_bytes += kn * 4;
    std::vector<float> hb(dims[i + 1]);
    for (auto& v : hb) v = lcg(seed) * 0.1f;
    CHECK(cudaMalloc(&b[i], hb.size() * 4));
    CHECK(cudaMemcpy(b[i], hb.data(), hb.size() * 4, cudaMemcpyHostToDevice));
  }
  for (int i = 0; i <= layers; ++i) {
    CHECK(cudaMalloc(&act[i], dims[i] * 4));
    CHECK(cudaMalloc(&ref[i], dims[i] * 4));
  }
  {
    std::vector<float> hx(dims[0]);
    for (auto& v : hx) v = lcg(seed);
    CHECK(cudaMemcpy(act[0], hx.data(), hx.size() * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(ref[0], hx.data(), hx.size() * 4, cudaMemcpyHostToDevice));
  }
  for (int i = 0; i < layers; ++i) {
    ref_layer<<<(dims[i + 1] + 255) / 256, 256>>>(w[i], b[i], ref[i], ref[i + 1], dims[i],
                                                  dims[i + 1], i + 1 < layers);
  }
  std::vector<float> want(dims[layers]);
  CHECK(cudaMemcpy(want.data(), ref[layers], want.size() * 4, cudaMemcpyDeviceToHost));

  size_t partial_floats = 0;
  for (int i = 0; i < layers; ++i) partial_floats += static_cast<size_t>(dims[i]) * dims[i + 1] / 128;
  float* partial;
  unsigned *tickets, *ready;
  CHECK(cudaMalloc(&partial, partial_floats * 4));
  CHECK(cudaMalloc(&tickets, kMaxLayers * kMaxTiles * 4));
  CHECK(cudaMalloc(&ready, kMaxLayers * kMaxTiles * 4));
  CHECK(cudaMemset(tickets, 0, kMaxLayers * kMaxTiles * 4));
  CHECK(cudaMemset(ready, 0, kMaxLayers * kMaxTiles * 4));
  cudaStream_t st;
  CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  unsigned run = 0;
  const double mb = weight_bytes / 1e6;

  auto check = [&](const char* what) {
    CHECK(cudaStreamSynchronize(st));
    std::vector<float> got(dims[layers]);
    CHECK(cudaMemcpy(got.data(), act[layers], got.size() * 4, cudaMemcpyDeviceToHost));
    double worst = 0.0;
    for (size_t i = 0; i < got.size(); ++i) {
      worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]) /
                                  (1.0 + std::fabs(static_cast<double>(want[i]))));
    }
    if (!(worst < 1e-4)) {
      printf("%s: WRONG result, worst relative difference %.3g\n", what, worst);
      exit(2);
    }
  };
  auto report = [&](const char* what, Timing t) {
    printf("| %s | %.2f | %.2f | %.0f |\n", what, t.best, t.median, mb / t.median * 1e3);
  };
  printf("\nweights %.1f MB\n\n| variant | best us | median us | GB/s (median) |\n|---|---:|---:|---:|\n",
         mb);

  {  // streaming ceiling over all weights, one launch per layer's matrix
    float* sink;
    CHECK(cudaMalloc(&sink, 4));
    const int grid = prop.multiProcessorCount * 8;
    report("streaming read, one launch per matrix", time_it([&] {
             for (int i = 0; i < layers; ++i) {
               stream_read<<<grid, 256, 0, st>>>(reinterpret_cast<const float4*>(w[i]),
                                                 static_cast<int64_t>(dims[i]) * dims[i + 1] / 4,
                                                 sink);
             }
           }, st));
  }

  auto variants = [&](auto s_tag) {
    constexpr int S = decltype(s_tag)::value;
    Chain c = make_chain<S>(dims, w, b, act, partial, tickets, ready);
    char name[96];
    auto launches = [&] {
      ++run;
      for (int i = 0; i < c.layers; ++i) {
        const int n = c.l[i].tiles * c.l[i].slices;
        chain_kernel<S><<<n, kThreads, 0, st>>>(c, c.l[i].item_begin, c.l[i].item_begin + n, run);
      }
    };
    launches();
    snprintf(name, sizeof name, "launches, S=%d", S);
    check(name);
    report(name, time_it(launches, st));

    int per_sm = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, chain_kernel<S>, kThreads, 0));
    for (int blocks_per_sm = 1; blocks_per_sm <= per_sm; ++blocks_per_sm) {
      const int grid = std::min(prop.multiProcessorCount * blocks_per_sm, c.items);
      auto persistent = [&] {
        ++run;
        int begin = 0, end = c.items;
        void* args[] = {&c, &begin, &end, &run};
        CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(chain_kernel<S>), grid, kThreads,
                                          args, 0, st));
      };
      persistent();
      snprintf(name, sizeof name, "persistent, S=%d, %d block(s) per SM", S, blocks_per_sm);
      check(name);
      report(name, time_it(persistent, st));
    }
  };
  variants(std::integral_constant<int, 128>{});
  variants(std::integral_constant<int, 256>{});
  CHECK(cudaGetLastError());
  printf("\nall results match the plain kernel\n");
  return 0;
}
