// Runs the CUDA plugin's staged copies (reference_device/cuda/staging.cu)
// against the stand-in runtime of cuda_runtime.h, built with small chunks:
// random sizes around the chunk boundaries, two host threads with two
// streams each, streams busy ahead of the copies. Checks that
//   - a host-to-device copy has read its pageable source when it returns,
//   - a device-to-host copy into pageable memory has written it when it
//     returns,
//   - work enqueued after a copy sees the copied data (stream order),
//   - a copy from page-locked memory is one plain cudaMemcpyAsync,
//   - a consumed copy (host_to_device_consumed, pluggable_host_copy.h) has
//     read its source, pageable or page-locked, when it returns, even
//     behind work on the stream,
//   - chunks never exceed the limit.
// Prints "staging_sim: OK ..." and exits 0, or prints what failed and exits 1.
//
//   staging_sim ITERATIONS SEED
#include <cstdio>
#include <string>
#include <vector>

#include "staging.h"

using namespace pgcuda;

namespace {

std::atomic<int> failures{0};

void fail(const std::string& what) {
  ++failures;
  fprintf(stderr, "staging_sim: %s\n", what.c_str());
}

void one_copy(CudaDevice* dev, SimStream* stream, std::mt19937_64& rng) {
  const uint64_t c = kStageChunk;
  const uint64_t sizes[] = {kStageThreshold + 1, c - 1, c, c + 1, 3 * c + 17,
                            CudaDevice::kStagingMaxSlots * c + 5,
                            (CudaDevice::kStagingMaxSlots + 3) * c + 77};
  const uint64_t n = sizes[rng() % (sizeof(sizes) / sizeof(sizes[0]))];
  std::vector<unsigned char> src(n), device(n), back(n), seen(n);
  for (auto& b : src) b = static_cast<unsigned char>(rng());
  const std::vector<unsigned char> want = src;
  if (rng() % 2) {  // work queued ahead of the copy
    stream->push([] { std::this_thread::sleep_for(std::chrono::milliseconds(2)); });
  }
  if (host_device_copy(dev, stream, true, device.data(), src.data(), n) != cudaSuccess) {
    fail("host-to-device copy failed");
  }
  memset(src.data(), 0, n);  // read already: must not matter
  stream->push([&seen, &device, n] { memcpy(seen.data(), device.data(), n); });
  if (host_device_copy(dev, stream, false, device.data(), back.data(), n) != cudaSuccess) {
    fail("device-to-host copy failed");
  }
  if (back != want) fail("device-to-host data wrong on return, " + std::to_string(n) + " bytes");
  stream->drain();
  if (seen != want) fail("work after the copy saw other data, " + std::to_string(n) + " bytes");
}

void pinned_copy(CudaDevice* dev, SimStream* stream) {
  const uint64_t n = 3 * kStageChunk + 1;
  void* host = nullptr;
  cudaHostAlloc(&host, n, cudaHostAllocPortable);
  memset(host, 0x5A, n);
  std::vector<unsigned char> device(n);
  const uint64_t before = sim_memcpy_calls().load();
  host_device_copy(dev, stream, true, device.data(), host, n);
  if (sim_memcpy_calls().load() - before != 1) fail("a pinned copy was staged");
  stream->drain();
  if (device != std::vector<unsigned char>(n, 0x5A)) fail("pinned copy data wrong");
  cudaFreeHost(host);
}

void consumed_copies(CudaDevice* dev, SimStream* stream) {
  for (int pinned = 0; pinned < 2; ++pinned) {
    for (uint64_t n : {uint64_t{5}, kStageThreshold + 3, 3 * kStageChunk + 11}) {
      void* host = nullptr;
      std::vector<unsigned char> pageable;
      if (pinned) {
        cudaHostAlloc(&host, n, cudaHostAllocPortable);
      } else {
        pageable.resize(n);
        host = pageable.data();
      }
      unsigned char* h = static_cast<unsigned char*>(host);
      for (uint64_t i = 0; i < n; ++i) h[i] = static_cast<unsigned char>(i * 13 + pinned);
      const std::vector<unsigned char> want(h, h + n);
      std::vector<unsigned char> device(n);
      // work queued ahead: the DMA happens well after the call returns
      stream->push([] { std::this_thread::sleep_for(std::chrono::milliseconds(3)); });
      if (host_to_device_consumed(dev, stream, device.data(), host, n) != cudaSuccess) {
        fail("consumed copy failed");
      }
      memset(host, 0xEE, n);  // the caller reuses its memory at once
      stream->drain();
      if (device != want) {
        fail(std::string("consumed copy from ") + (pinned ? "pinned" : "pageable") +
             " memory read the source late, " + std::to_string(n) + " bytes");
      }
      if (pinned) cudaFreeHost(host);
    }
  }
}

// On an idle GPU every DMA is done before the next chunk is picked, so the
// chunks an upload used are all free and it leaves one; a read-back of
// several chunks must still not reuse a chunk it has not read out yet.
void readback_on_an_idle_gpu(SimStream* stream) {
  CudaDevice dev;
  sim_inline().store(true);
  const uint64_t n = 3 * kStageChunk + 17;
  std::vector<unsigned char> src(n), device(n), back(n);
  for (uint64_t i = 0; i < n; ++i) src[i] = static_cast<unsigned char>(i * 7 + i / 4096);
  if (host_device_copy(&dev, stream, true, device.data(), src.data(), n) != cudaSuccess ||
      host_device_copy(&dev, stream, false, device.data(), back.data(), n) != cudaSuccess) {
    fail("idle-GPU copy failed");
  }
  if (device != src) fail("idle-GPU upload data wrong");
  if (back != src) fail("idle-GPU read-back data wrong (a chunk was reused before it was read out)");
  sim_inline().store(false);
  release_staging(&dev);
}

}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? atoi(argv[1]) : 20;
  const unsigned seed = argc > 2 ? static_cast<unsigned>(atoi(argv[2])) : 1;
  CudaDevice dev;
  {
    SimStream a1(seed), a2(seed + 1), b1(seed + 2), b2(seed + 3);
    auto body = [&](unsigned s, SimStream* x, SimStream* y) {
      std::mt19937_64 rng(s);
      for (int i = 0; i < iterations; ++i) one_copy(&dev, (rng() & 1) ? x : y, rng);
    };
    std::thread t1(body, seed, &a1, &a2), t2(body, seed + 7, &b1, &b2);
    t1.join();
    t2.join();
    pinned_copy(&dev, &a1);
    consumed_copies(&dev, &a1);
    readback_on_an_idle_gpu(&a1);
    if (dev.staging_slots < 1 || dev.staging_slots > CudaDevice::kStagingMaxSlots) {
      fail("chunk count out of range: " + std::to_string(dev.staging_slots));
    }
    printf("staging_sim: %s, %d chunks used\n", failures.load() ? "FAILED" : "OK",
           dev.staging_slots);
    release_staging(&dev);
  }
  return failures.load() ? 1 : 0;
}
