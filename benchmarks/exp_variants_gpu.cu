// Variants of the CUDA plugin's unary kernel on one GPU: Exp of 4096x1024
// float32 (32 MiB moved, held in an H200's 60 MB L2 cache when repeated),
// the bench_gpu.py `ops` row. The grid-stride loop the plugin used until
// 2026-11-30 (16-byte __ldg loads, plain stores, 8 blocks of 256 threads per
// multiprocessor; one-pass shapes: benchmarks/exp_shapes_gpu.py)
// against plain, L1::no_allocate and last-use loads, streaming stores
// (__stcs), 2 or 4 vectors in flight per thread, and other block shapes.
// Prints us per kernel over 200 back-to-back launches: issued one by one on
// a stream, and replayed from a CUDA graph (median of 7, CUDA events; the
// second of two passes). PyTorch's kernel on the same tensor:
// benchmarks/kernel_times_gpu.py. Results: docs/benchmarks.md.
//
//   nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 \
//       benchmarks/exp_variants_gpu.cu -o /tmp/exp_variants && /tmp/exp_variants
#include <algorithm>
#include <cstdio>
#include <vector>

#include <cuda_runtime.h>

#define CK(x)                                                      \
  do {                                                             \
    cudaError_t e = (x);                                           \
    if (e != cudaSuccess) {                                        \
      printf("%s: %s\n", #x, cudaGetErrorString(e));               \
      return 1;                                                    \
    }                                                              \
  } while (0)

enum Load { kLdg, kPlain, kNoAlloc, kLastUse };
enum Store { kPlainStore, kStreaming };

template <Load L>
__device__ __forceinline__ float4 ld(const float4* p) {
  if (L == kLdg) return __ldg(p);
  if (L == kPlain) return *p;
  if (L == kLastUse) return __ldlu(p);
  float4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.f32 {%0,%1,%2,%3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "l"(p));
  return v;
}

template <Store S>
__device__ __forceinline__ void st(float4* p, float4 v) {
  if (S == kPlainStore) {
    *p = v;
  } else {
    __stcs(p, v);
  }
}

__device__ __forceinline__ float4 exp4(float4 v) {
  return make_float4(expf(v.x), expf(v.y), expf(v.z), expf(v.w));
}

// Grid-stride loop with U vectors loaded before any is stored.
template <Load L, Store S, int U>
__global__ void kernel(const float4* __restrict__ in, float4* __restrict__ out, long nvec) {
  const long stride = (long)gridDim.x * blockDim.x;
  long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + (U - 1) * stride < nvec; i += U * stride) {
    float4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = ld<L>(in + i + u * stride);
#pragma unroll
    for (int u = 0; u < U; ++u) st<S>(out + i + u * stride, exp4(v[u]));
  }
  for (; i < nvec; i += stride) st<S>(out + i, exp4(ld<L>(in + i)));
}

int main() {
  const long n = 4096L * 1024, nvec = n / 4;
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  float *in, *out;
  CK(cudaMalloc(&in, n * 4));
  CK(cudaMalloc(&out, n * 4));
  std::vector<float> h(n);
  for (long i = 0; i < n; ++i) h[i] = (float)((i * 2654435761u) % 1000) / 250.f - 2.f;
  CK(cudaMemcpy(in, h.data(), n * 4, cudaMemcpyHostToDevice));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  typedef void (*Kernel)(const float4*, float4*, long);
  struct Variant {
    const char* name;
    Kernel f;
    int threads;
    int per_sm;
  };
  const std::vector<Variant> variants = {
      {"ldg, store, x256, 8/SM (plugin until 11-30)", kernel<kLdg, kPlainStore, 1>, 256, 8},
      {"plain load", kernel<kPlain, kPlainStore, 1>, 256, 8},
      {"L1::no_allocate load", kernel<kNoAlloc, kPlainStore, 1>, 256, 8},
      {"last-use load", kernel<kLastUse, kPlainStore, 1>, 256, 8},
      {"streaming store", kernel<kLdg, kStreaming, 1>, 256, 8},
      {"no_allocate + streaming", kernel<kNoAlloc, kStreaming, 1>, 256, 8},
      {"x128, 16/SM", kernel<kLdg, kPlainStore, 1>, 128, 16},
      {"2 vectors, 8/SM", kernel<kLdg, kPlainStore, 2>, 256, 8},
      {"4 vectors, 4/SM", kernel<kLdg, kPlainStore, 4>, 256, 4},
      {"no_allocate, 4 vectors, 4/SM", kernel<kNoAlloc, kPlainStore, 4>, 256, 4},
      {"no_allocate, 2 vectors, 8/SM", kernel<kNoAlloc, kPlainStore, 2>, 256, 8},
      {"x512, 4/SM", kernel<kLdg, kPlainStore, 1>, 512, 4},
      {"x1024, 2/SM", kernel<kLdg, kPlainStore, 1>, 1024, 2},
  };
  const int calls = 200;
  for (int pass = 0; pass < 2; ++pass) {
    for (const Variant& v : variants) {
      const unsigned blocks = sms * v.per_sm;
      auto launch = [&] { v.f<<<blocks, v.threads, 0, s>>>((const float4*)in, (float4*)out, nvec); };
      cudaGraph_t g;
      cudaGraphExec_t ge;
      CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      for (int i = 0; i < calls; ++i) launch();
      CK(cudaStreamEndCapture(s, &g));
      CK(cudaGraphInstantiate(&ge, g, 0));
      std::vector<float> on_stream, from_graph;
      for (int r = 0; r < 7; ++r) {
        for (int i = 0; i < 20; ++i) launch();
        float ms = 0;
        CK(cudaEventRecord(a, s));
        for (int i = 0; i < calls; ++i) launch();
        CK(cudaEventRecord(b, s));
        CK(cudaEventSynchronize(b));
        CK(cudaEventElapsedTime(&ms, a, b));
        on_stream.push_back(ms * 1000 / calls);
        CK(cudaGraphLaunch(ge, s));
        CK(cudaEventRecord(a, s));
        CK(cudaGraphLaunch(ge, s));
        CK(cudaEventRecord(b, s));
        CK(cudaEventSynchronize(b));
        CK(cudaEventElapsedTime(&ms, a, b));
        from_graph.push_back(ms * 1000 / calls);
      }
      CK(cudaGetLastError());
      std::sort(on_stream.begin(), on_stream.end());
      std::sort(from_graph.begin(), from_graph.end());
      if (pass == 1) {
        printf("%-32s stream %.3f us  graph %.3f us (min %.3f)\n", v.name, on_stream[3],
               from_graph[3], from_graph[0]);
      }
      CK(cudaGraphExecDestroy(ge));
      CK(cudaGraphDestroy(g));
    }
  }
  return 0;
}
