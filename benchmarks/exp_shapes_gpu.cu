// Launch shapes of Exp over float32 vectors (float4), loaded by
// benchmarks/exp_shapes_gpu.py from a cubin and timed by CUPTI beside the
// CUDA plugin's kernel and PyTorch's. `stride_*`: the plugin's grid-stride
// loop (a grid capped at so many blocks per multiprocessor). `chunk_V_*`:
// one pass, each block a contiguous chunk of blockDim.x * V vectors, each
// thread V of them blockDim.x apart, all loaded before any is stored (the
// shape of PyTorch's vectorized_elementwise_kernel, whose block is 128
// threads of 8 float32 each, i.e. V = 2). `_ldg`: read-only cache loads
// (__ldg); `_plain`: plain loads.
#include <cstdint>

namespace {

template <bool LDG>
__device__ __forceinline__ float4 load(const float4* p) {
  if (LDG) return __ldg(p);
  return *p;
}

__device__ __forceinline__ float4 exp4(float4 v) {
  return make_float4(expf(v.x), expf(v.y), expf(v.z), expf(v.w));
}

template <bool LDG>
__device__ __forceinline__ void stride_loop(const float4* __restrict__ in,
                                            float4* __restrict__ out, int64_t nvec) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < nvec;
       i += stride) {
    out[i] = exp4(load<LDG>(in + i));
  }
}

template <int V, bool LDG>
__device__ __forceinline__ void chunk(const float4* in, float4* out, int32_t nvec) {
  const int32_t base = static_cast<int32_t>(blockIdx.x) * blockDim.x * V + threadIdx.x;
  float4 v[V];
  if (base + (V - 1) * static_cast<int32_t>(blockDim.x) < nvec) {
#pragma unroll
    for (int u = 0; u < V; ++u) v[u] = load<LDG>(in + base + u * blockDim.x);
#pragma unroll
    for (int u = 0; u < V; ++u) out[base + u * blockDim.x] = exp4(v[u]);
  } else {
    for (int u = 0; u < V; ++u) {
      const int32_t i = base + u * blockDim.x;
      if (i < nvec) out[i] = exp4(load<LDG>(in + i));
    }
  }
}

}  // namespace

extern "C" {
__global__ void stride_ldg(const float4* __restrict__ in, float4* __restrict__ out,
                           int64_t nvec) {
  stride_loop<true>(in, out, nvec);
}
__global__ void stride_plain(const float4* __restrict__ in, float4* __restrict__ out,
                             int64_t nvec) {
  stride_loop<false>(in, out, nvec);
}
#define PG_CHUNK(V, KIND, LDG)                                                        \
  __global__ void chunk_##V##_##KIND(const float4* in, float4* out, int32_t nvec) {   \
    chunk<V, LDG>(in, out, nvec);                                                     \
  }                                                                                   \
  __global__ void chunk_##V##_##KIND##_restrict(const float4* __restrict__ in,        \
                                                float4* __restrict__ out, int32_t nvec) { \
    chunk<V, LDG>(in, out, nvec);                                                     \
  }
PG_CHUNK(1, plain, false)
PG_CHUNK(2, plain, false)
PG_CHUNK(4, plain, false)
PG_CHUNK(1, ldg, true)
PG_CHUNK(2, ldg, true)
PG_CHUNK(4, ldg, true)
#undef PG_CHUNK
}
