// Host<->device copies of the CUDA reference plugin (staging.cu).
//
// A copy from or to pageable host memory is staged through pinned chunks of
// kStageChunk bytes that belong to the device: the host-side memcpy of chunk
// i+1 (split over a few host threads when large) runs while the DMA of chunk
// i is in flight, and each chunk is guarded by an event recorded after its
// DMA. The least recently used chunk is reused once its DMA is done; while
// every chunk is busy (the stream has work queued ahead of the copy) another
// is added, up to CudaDevice::kStagingMaxSlots (64 MiB), so that a copy
// enqueued behind long work returns without waiting for it. Small copies,
// copies whose host side is pinned (cudaHostAlloc, cudaHostRegister), managed
// or device memory, and copies on a stream that is being captured go
// straight to cudaMemcpyAsync.
//
// What a call promises (see SP_StreamExecutor.memcpy_htod/memcpy_dtoh):
//   * host to device: when host_device_copy returns, the caller's pageable
//     buffer has been read completely (the last chunks are still in flight,
//     in stream order); a pinned buffer is read by the DMA later, when the
//     stream reaches the copy;
//   * device to host into pageable memory: returns once the data is in place
//     (the call waits for the stream to reach the copy, as cudaMemcpyAsync to
//     pageable memory does); into pinned memory it only enqueues the copy.
// A staged host-to-device copy waits on the host only when all 16 chunks are
// busy, i.e. after its first 64 MiB when the stream is busy.
#ifndef PLUGGABLE_CUDA_STAGING_H_
#define PLUGGABLE_CUDA_STAGING_H_

#include <cstdint>

#include "cuda_common.h"

namespace pgcuda {

// The sizes below; tests/cuda_sim builds this file with small ones.
#ifndef PGCUDA_STAGE_THRESHOLD
#define PGCUDA_STAGE_THRESHOLD (256ull << 10)
#endif
#ifndef PGCUDA_STAGE_CHUNK
#define PGCUDA_STAGE_CHUNK (4ull << 20)
#endif

// Copies of at most this many bytes are never staged.
constexpr uint64_t kStageThreshold = PGCUDA_STAGE_THRESHOLD;
// Size of one pinned chunk.
constexpr uint64_t kStageChunk = PGCUDA_STAGE_CHUNK;

// Enqueues a copy of `size` bytes on `stream` (of device `dev`, which the
// caller has made current): host to device when `to_device`, else device to
// host. `host` and `device_ptr` are the two sides. Returns the first CUDA
// error (already cleared from the runtime's last-error state).
cudaError_t host_device_copy(CudaDevice* dev, cudaStream_t stream, bool to_device,
                             void* device_ptr, void* host, uint64_t size);

// A host-to-device copy on `stream` that has read `host` completely when it
// returns (pluggable_host_copy.h): a pinned source (which a DMA would read
// only when the stream reaches it) or a large pageable one through the
// device's staging chunks; a small pageable one with cudaMemcpyAsync, whose
// driver copies it into its own staging memory before returning.
// cudaErrorStreamCaptureUnsupported on a stream being captured (the
// captured copy would read the source at each replay).
cudaError_t host_to_device_consumed(CudaDevice* dev, cudaStream_t stream, void* device_ptr,
                                    const void* host, uint64_t size);

// memcpy of `n` bytes split over the plugin's host copy threads when large
// (PLUGGABLE_CUDA_COPY_THREADS sets how many threads take part, the calling
// one included; default min(4, cores / 2), 1 turns the split off).
void parallel_memcpy(void* dst, const void* src, uint64_t n);

// Whether `p` is ordinary (pageable) host memory rather than pinned or
// device memory: a copy from the device into it returns only once done.
bool host_is_pageable(const void* p);

// Frees the device's staging chunks (on device destruction; no copy may be
// running).
void release_staging(CudaDevice* dev);

}  // namespace pgcuda

#endif  // PLUGGABLE_CUDA_STAGING_H_
