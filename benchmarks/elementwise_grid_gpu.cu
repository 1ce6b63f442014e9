// Launch shapes of a memory-bound elementwise kernel on one GPU: AddV2 of
// 64 Mi float32 (768 MiB moved, far beyond the L2 cache) as the CUDA
// plugin's grid-stride loop with a grid capped at 8, 16 or 32 blocks of 256
// threads per multiprocessor, against one 16-byte vector per thread with as
// many blocks as needed (128 or 256 threads), four vectors per thread, and
// the capped loop with streaming stores. Prints us per call (best of 5 runs
// of 20 calls, CUDA events) and GB/s counting 3 x 4 bytes per element.
// Results: docs/benchmarks.md.
//
//   nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 \
//       benchmarks/elementwise_grid_gpu.cu -o /tmp/elementwise_grid && /tmp/elementwise_grid
#include <cstdint>
#include <cstdio>

#include <cuda_runtime.h>

__device__ __forceinline__ float4 ld(const float4* p) { return __ldg(p); }

// A: the grid-stride loop (as the plugin's binary_flat_kernel), grid capped per SM
__global__ void kA(const float4* a, const float4* b, float4* o, int64_t n) {
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    float4 x = ld(a + i), y = ld(b + i);
    o[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
  }
}
// C: one vector per thread, as many blocks as needed
__global__ void kC(const float4* a, const float4* b, float4* o, int64_t n) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float4 x = ld(a + i), y = ld(b + i);
    o[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
  }
}
// D: 4 vectors per thread, block-contiguous (blockDim * 4 vectors per block)
__global__ void kD(const float4* a, const float4* b, float4* o, int64_t n) {
  int64_t base = (int64_t)blockIdx.x * blockDim.x * 4 + threadIdx.x;
  float4 x[4], y[4];
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    int64_t i = base + u * blockDim.x;
    if (i < n) { x[u] = ld(a + i); y[u] = ld(b + i); }
  }
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    int64_t i = base + u * blockDim.x;
    if (i < n) o[i] = make_float4(x[u].x + y[u].x, x[u].y + y[u].y, x[u].z + y[u].z, x[u].w + y[u].w);
  }
}
// E: the grid-stride loop with streaming stores (__stcs)
__global__ void kE(const float4* a, const float4* b, float4* o, int64_t n) {
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    float4 x = ld(a + i), y = ld(b + i);
    __stcs(o + i, make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w));
  }
}
int main() {
  const int64_t N = 64ll << 20, n = N / 4;
  float4 *a, *b, *o;
  cudaMalloc(&a, N * 4); cudaMalloc(&b, N * 4); cudaMalloc(&o, N * 4);
  cudaMemset(a, 0, N * 4); cudaMemset(b, 0, N * 4);
  int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  auto run = [&](const char* name, auto launch) {
    for (int w = 0; w < 3; ++w) launch();
    float best = 1e9;
    for (int r = 0; r < 5; ++r) {
      cudaEventRecord(e0);
      for (int k = 0; k < 20; ++k) launch();
      cudaEventRecord(e1); cudaEventSynchronize(e1);
      float ms; cudaEventElapsedTime(&ms, e0, e1);
      if (ms < best) best = ms;
    }
    double us = best * 1000.0 / 20;
    printf("%-40s %8.1f us  %7.1f GB/s\n", name, us, 3.0 * 4 * N / (us * 1e3));
  };
  for (int per_sm : {8, 16, 32}) {
    int grid = sms * per_sm;
    char nm[64]; snprintf(nm, 64, "A grid-stride 256 x %d/SM", per_sm);
    run(nm, [&] { kA<<<grid, 256>>>(a, b, o, n); });
  }
  run("C one vec/thread 256", [&] { kC<<<(n + 255) / 256, 256>>>(a, b, o, n); });
  run("C one vec/thread 128", [&] { kC<<<(n + 127) / 128, 128>>>(a, b, o, n); });
  run("D 4 vec/thread 128", [&] { kD<<<(n + 511) / 512, 128>>>(a, b, o, n); });
  run("D 4 vec/thread 256", [&] { kD<<<(n + 1023) / 1024, 256>>>(a, b, o, n); });
  run("E grid-stride streaming store 8/SM", [&] { kE<<<sms * 8, 256>>>(a, b, o, n); });
  printf("err %s\n", cudaGetErrorString(cudaGetLastError()));
}
