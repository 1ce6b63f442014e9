// PG_GetPeerFns (pluggable_peer.h): direct copies between two GPUs of the
// plugin with cudaMemcpyPeerAsync, after cudaDeviceEnablePeerAccess (made
// once per ordered pair of devices, where cudaDeviceCanAccessPeer allows it;
// without it the driver stages the copy itself).
#include <cstdio>
#include <mutex>
#include <set>
#include <utility>

#include "cuda_common.h"
#include "launch_queue.h"
#include "pluggable_peer.h"

namespace pgcuda {
namespace {

std::mutex g_peer_mu;
std::set<std::pair<int, int>> g_enabled;  // (accessing device, owner) pairs tried

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

int can_access_peer(int src_ordinal, int dst_ordinal) {
  const int n = device_count();
  if (src_ordinal < 0 || dst_ordinal < 0 || src_ordinal >= n || dst_ordinal >= n) return 0;
  if (src_ordinal == dst_ordinal) return 1;
  int can = 0;
  if (cudaDeviceCanAccessPeer(&can, dst_ordinal, src_ordinal) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return can;
}

// Lets `device` access `peer`'s memory (once; errors other than "already
// enabled" leave the copy to the driver's staging).
void enable_once(int device, int peer) {
  std::lock_guard<std::mutex> lock(g_peer_mu);
  if (!g_enabled.insert(std::make_pair(device, peer)).second) return;
  if (!can_access_peer(peer, device)) return;
  DeviceGuard guard(device);
  if (guard.error() != cudaSuccess) return;
  cudaError_t e = cudaDeviceEnablePeerAccess(peer, 0);
  if (e != cudaSuccess) (void)cudaGetLastError();  // e.g. already enabled
}

void memcpy_peer(int dst_ordinal, void* dst, int src_ordinal, const void* src, uint64_t size,
                 SP_Stream stream, TF_Status* status) {
  TF_SetStatus(status, TF_OK, "");
  const int n = device_count();
  if (src_ordinal < 0 || dst_ordinal < 0 || src_ordinal >= n || dst_ordinal >= n) {
    char msg[160];
    snprintf(msg, sizeof(msg), "memcpy_peer: no GPU:%d or GPU:%d (%d GPUs)", src_ordinal,
             dst_ordinal, n);
    TF_SetStatus(status, TF_INVALID_ARGUMENT, msg);
    return;
  }
  if (size == 0) return;
  flush_ordinal(src_ordinal);  // the copy comes after queued launches of both
  flush_ordinal(dst_ordinal);
  if (src_ordinal != dst_ordinal) {
    enable_once(dst_ordinal, src_ordinal);
    enable_once(src_ordinal, dst_ordinal);
  }
  DeviceGuard guard(dst_ordinal);
  if (!guard.ok(status, dst_ordinal)) return;
  CudaStream* s = stream_of(stream);
  cudaStream_t cs = nullptr;
  cudaError_t e = cudaSuccess;
  if (s == nullptr) {
    e = cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking);
  } else {
    cs = s->stream;
  }
  if (e == cudaSuccess) {
    e = cudaMemcpyPeerAsync(dst, dst_ordinal, src, src_ordinal, size, cs);
  }
  if (s == nullptr && cs != nullptr) {
    cudaError_t sync = cudaStreamSynchronize(cs);
    if (e == cudaSuccess) e = sync;
    (void)cudaStreamDestroy(cs);
  }
  if (e != cudaSuccess) {
    set_cuda_status(status, e, "cudaMemcpyPeerAsync(GPU:%d -> GPU:%d, %llu bytes)", src_ordinal,
                    dst_ordinal, static_cast<unsigned long long>(size));
  }
}

}  // namespace
}  // namespace pgcuda

extern "C" void PG_GetPeerFns(PG_PeerFns* fns) {
  if (fns == nullptr || fns->struct_size < sizeof(PG_PeerFns)) return;
  fns->version = PG_PEER_VERSION;
  fns->can_access_peer = pgcuda::can_access_peer;
  fns->memcpy_peer = pgcuda::memcpy_peer;
}
