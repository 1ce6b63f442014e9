// TensorFlow's collective ops on GPUs, through NCCL (loaded at run time,
// nccl_loader.h): CollectiveReduceV2, CollectiveReduceScatterV2,
// CollectiveGatherV2, CollectiveBcastSendV2 / CollectiveBcastRecvV2 and
// CollectiveAllToAllV2, with the inputs and attributes of TensorFlow's ops
// (and of the host plugin's kernels_collective.c).
//
// One process, several GPUs. The framework calls each participant's kernel
// separately, one after the other from ONE thread (pg.distribute does), and
// compute functions must never wait for each other. NCCL, driving several
// GPUs from one thread, needs the calls of all ranks inside one
// ncclGroupStart/End (a lone rank's call may block in connection setup until
// its peers call). So the kernels collect the participants of one
// (group_key, instance_key), as the host plugin's rendezvous does, and the
// LAST to arrive issues every participant's NCCL call in one group:
//   - an earlier participant i, at its compute call, records an event on its
//     stream (its input is ready there) and enqueues a gate: a one-thread
//     kernel that spins on a flag word of device i until the flag is set
//     (or timeout_seconds pass: then the stream gets DEADLINE_EXCEEDED
//     through the asynchronous-check path, never a hang). Work enqueued on
//     stream i later runs after the gate, hence after the collective, even
//     when it is enqueued before the last participant arrives.
//   - the last arrival makes each earlier participant's side stream (one per
//     device) wait for that participant's event, issues the group (earlier
//     participants' calls on their side streams, its own on its own stream),
//     then on each side stream applies final_op Div and sets the flag.
// Input and output tensors of earlier participants are held (TF_Tensor
// handles) until their calls are issued, so their buffers outlive the work.
// Communicators: one clique per (group_key, ordered set of devices), made on
// first use with ncclCommInitAll, ranked by device ordinal, cached for the
// life of the process. A group of one device (world size 1) issues at once
// on its own stream.
//
// Several processes: when PG_GetCollectiveFns' init_communicator registered a
// communicator for (device, group_key), the kernel is this process's only
// participant and calls NCCL at once on its stream (see
// pluggable_collectives.h). BcastRecv does not know the sender's rank there,
// so a multi-process broadcast is an all-reduce (Max over bytes) in which the
// receivers contribute zeros: the sender's bytes, exactly.
//
// Reductions: merge_op Add/Mul/Min/Max is NCCL's sum/prod/min/max in the
// dtype; final_op Div divides the result by group_size afterwards (in float
// for float16/bfloat16, truncating toward zero for integers). Errors name
// the op, group and instance keys and NCCL's message.
#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "kernel_util.h"
#include "nccl_loader.h"
#include "pluggable_collectives.h"

namespace pgcuda {
namespace {

// The wait when timeout_seconds is 0 (TensorFlow's "no timeout").
constexpr double kDefaultTimeout = 600.0;
// Gate flags per device (a ring; see the file comment).
constexpr unsigned kFlagSlots = 4096;

enum class Kind { kReduce, kReduceScatter, kGather, kBcastSend, kBcastRecv, kAllToAll };

// Kernel state: the op's attributes.
struct CollKernel {
  const char* op;
  Kind kind;
  NcclRedOp merge = kNcclSum;
  bool final_div = false;
  float timeout = 0.0f;
};

Kind meeting_kind(Kind k) { return k == Kind::kBcastRecv ? Kind::kBcastSend : k; }

bool nccl_type(TF_DataType dt, NcclDataType* out) {
  switch (dt) {
    case TF_HALF: *out = kNcclFloat16; return true;
    case TF_BFLOAT16: *out = kNcclBfloat16; return true;
    case TF_FLOAT: *out = kNcclFloat32; return true;
    case TF_DOUBLE: *out = kNcclFloat64; return true;
    case TF_INT32: *out = kNcclInt32; return true;
    case TF_INT64: *out = kNcclInt64; return true;
    default: return false;
  }
}

// ---------------------------------------------------------------------------
// Device code

template <typename T>
__global__ void div_kernel(T* x, int64_t n, int64_t k) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] = from_compute<T>(to_compute(x[i]) / static_cast<compute_t<T>>(k));
  }
}

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Waits until *flag is set, then clears it; records a timeout in `rec`.
// The flag is read with atomics (served by L2, where the other stream's
// memset lands), never from a stale L1 line.
__global__ void gate_kernel(unsigned* flag, unsigned long long timeout_ns, DeviceCheck* rec) {
  const unsigned long long start = global_ns();
  while (atomicOr(flag, 0u) == 0) {
    const unsigned long long waited = global_ns() - start;
    if (waited > timeout_ns) {
      record_bad(rec, 0, static_cast<long long>(waited / 1000000ull));
      return;
    }
    __nanosleep(2000);
  }
  atomicExch(flag, 0u);
  __threadfence_system();
}

// ---------------------------------------------------------------------------
// Per-device state shared by every group: the side stream on which earlier
// participants' calls run and the ring of gate flags. Made on first use,
// kept for the life of the process.
struct DeviceSide {
  cudaStream_t stream = nullptr;
  unsigned* flags = nullptr;  // kFlagSlots words of device memory, zeroed
  unsigned next = 0;
};

std::mutex g_mu;  // guards everything below
std::map<int, DeviceSide> g_sides;

// A participant that has arrived; `ready` is recorded on its stream.
struct Participant {
  int ordinal = 0;
  CudaStream* cs = nullptr;
  TensorPtr in, out;  // held until the call is issued
  const void* in_ptr = nullptr;
  void* out_ptr = nullptr;
  int64_t in_bytes = 0, out_bytes = 0;
  bool sender = false;
  cudaEvent_t ready = nullptr;
  unsigned* flag = nullptr;  // set when its call is done
};

// One collective waiting for its participants.
struct Meeting {
  Kind kind;
  TF_DataType dtype;
  NcclRedOp merge;
  bool final_div;
  int64_t group_size;
  std::vector<Participant> parts;
};
// Never destroyed: a meeting that never completed holds tensors, which must
// not be released into the core while the process exits.
std::map<std::pair<int64_t, int64_t>, Meeting>& g_meetings =
    *new std::map<std::pair<int64_t, int64_t>, Meeting>();

// The communicators of one group of in-process devices (rank k on ordinals[k]).
struct Clique {
  std::vector<int> ordinals;
  std::vector<NcclComm> comms;
};
std::map<std::pair<int64_t, std::vector<int>>, std::unique_ptr<Clique>> g_cliques;

// Communicators set up by PG_GetCollectiveFns (one per process and device).
struct RankComm {
  NcclComm comm = nullptr;
  int nranks = 0;
  int rank = 0;
};
std::map<std::pair<int, int64_t>, RankComm> g_rank_comms;

// Context of one call for messages: "<op> (group_key G, instance_key I)".
struct Where {
  const char* op;
  int64_t group_key, instance_key;
};

std::string where_text(const Where& w) {
  char buf[160];
  snprintf(buf, sizeof(buf), "%s (group_key %lld, instance_key %lld)", w.op,
           static_cast<long long>(w.group_key), static_cast<long long>(w.instance_key));
  return buf;
}

// NCCL's result as a status (INTERNAL, INVALID_ARGUMENT, UNAVAILABLE).
void set_nccl_status(TF_Status* st, const NcclApi* api, NcclResult r, const Where& w,
                     const char* call) {
  TF_Code code = TF_INTERNAL;
  if (r == kNcclInvalidArgument || r == kNcclInvalidUsage) code = TF_INVALID_ARGUMENT;
  if (r == kNcclRemoteError || r == kNcclSystemError) code = TF_UNAVAILABLE;
  std::string msg = where_text(w) + ": " + call + " failed: " + nccl_error_text(api, r);
  TF_SetStatus(st, code, msg.c_str());
}

// g_sides[ordinal], made on first use (g_mu held; the device is current).
DeviceSide* side_of(int ordinal, TF_Status* st) {
  DeviceSide& d = g_sides[ordinal];
  if (d.stream != nullptr) return &d;
  cudaError_t e = cudaStreamCreateWithFlags(&d.stream, cudaStreamNonBlocking);
  if (e == cudaSuccess) e = cudaMalloc(&d.flags, kFlagSlots * sizeof(unsigned));
  if (e == cudaSuccess) e = cudaMemset(d.flags, 0, kFlagSlots * sizeof(unsigned));
  if (e != cudaSuccess) {
    set_cuda_status(st, e, "collective side stream of GPU:%d", ordinal);
    if (d.stream != nullptr) (void)cudaStreamDestroy(d.stream);
    if (d.flags != nullptr) (void)cudaFree(d.flags);
    d = DeviceSide();
    return nullptr;
  }
  return &d;
}

// ---------------------------------------------------------------------------
// Issuing the NCCL calls

// Enqueues participant p's NCCL call(s) on `s` (inside a group). `rank` and
// `n` place it in `comm`; `root` is the sender's rank (-1: unknown, several
// processes).
NcclResult enqueue_call(const NcclApi* api, const Meeting& m, const Participant& p,
                        NcclComm comm, int rank, int n, int root, cudaStream_t s,
                        const char** call) {
  NcclDataType dt = kNcclInt8;
  const size_t esize = TF_DataTypeSize(m.dtype);
  switch (m.kind) {
    case Kind::kReduce:
      *call = "ncclAllReduce";
      nccl_type(m.dtype, &dt);
      return api->all_reduce(p.in_ptr, p.out_ptr, p.out_bytes / esize, dt, m.merge, comm, s);
    case Kind::kReduceScatter:
      *call = "ncclReduceScatter";
      nccl_type(m.dtype, &dt);
      return api->reduce_scatter(p.in_ptr, p.out_ptr, p.out_bytes / esize, dt, m.merge, comm,
                                 s);
    case Kind::kGather:
      *call = "ncclAllGather";
      return api->all_gather(p.in_ptr, p.out_ptr, p.in_bytes, kNcclInt8, comm, s);
    case Kind::kAllToAll: {
      *call = "ncclSend/ncclRecv";
      const size_t chunk = p.in_bytes / n;
      const char* in = static_cast<const char*>(p.in_ptr);
      char* out = static_cast<char*>(p.out_ptr);
      for (int peer = 0; peer < n; ++peer) {
        if (peer == rank) continue;  // the own chunk is copied outside NCCL
        NcclResult r = api->send(in + peer * chunk, chunk, kNcclInt8, peer, comm, s);
        if (r == kNcclSuccess) r = api->recv(out + peer * chunk, chunk, kNcclInt8, peer, comm, s);
        if (r != kNcclSuccess) return r;
      }
      return kNcclSuccess;
    }
    default:  // broadcast
      if (root >= 0) {
        *call = "ncclBroadcast";
        return api->broadcast(p.sender ? p.in_ptr : p.out_ptr, p.out_ptr, p.out_bytes,
                              kNcclInt8, root, comm, s);
      }
      // The receivers' outputs were zeroed: max over bytes is the sender's.
      *call = "ncclAllReduce (broadcast)";
      return api->all_reduce(p.sender ? p.in_ptr : p.out_ptr, p.out_ptr, p.out_bytes,
                             kNcclUint8, kNcclMax, comm, s);
  }
}

// Work around the NCCL call on `s`, on p's device (current): before it, the
// own all-to-all chunk or the zeroed receive buffer; after it, final_op Div.
cudaError_t before_call(const Meeting& m, const Participant& p, int rank, int n, bool zero_recv,
                        cudaStream_t s) {
  if (m.kind == Kind::kAllToAll && p.in_bytes > 0) {
    const size_t chunk = p.in_bytes / n;
    return cudaMemcpyAsync(static_cast<char*>(p.out_ptr) + rank * chunk,
                           static_cast<const char*>(p.in_ptr) + rank * chunk, chunk,
                           cudaMemcpyDeviceToDevice, s);
  }
  if (zero_recv && !p.sender && p.out_bytes > 0) {
    return cudaMemsetAsync(p.out_ptr, 0, p.out_bytes, s);
  }
  return cudaSuccess;
}

cudaError_t after_call(const Meeting& m, const Participant& p, int sm_count, cudaStream_t s) {
  if (!m.final_div || (m.kind != Kind::kReduce && m.kind != Kind::kReduceScatter)) {
    return cudaSuccess;
  }
  const int64_t n = p.out_bytes / static_cast<int64_t>(TF_DataTypeSize(m.dtype));
  if (n == 0) return cudaSuccess;
  dispatch_numeric(m.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    div_kernel<T><<<grid_for(n, sm_count), kThreads, 0, s>>>(static_cast<T*>(p.out_ptr), n,
                                                            m.group_size);
  });
  return cudaGetLastError();
}

// Checks that the arrived participants agree on a broadcast; returns the
// sender's index or -1 after setting `st`.
int broadcast_root(const Meeting& m, const Where& w, TF_Status* st) {
  int root = -1;
  for (size_t i = 0; i < m.parts.size(); ++i) {
    if (!m.parts[i].sender) continue;
    if (root >= 0) {
      TF_SetStatus(st, TF_INVALID_ARGUMENT,
                   (where_text(w) + ": two senders (GPU:" + std::to_string(m.parts[root].ordinal) +
                    " and GPU:" + std::to_string(m.parts[i].ordinal) + ") in one broadcast")
                       .c_str());
      return -1;
    }
    root = static_cast<int>(i);
  }
  if (root < 0) {
    TF_SetStatus(st, TF_INVALID_ARGUMENT,
                 (where_text(w) + ": a broadcast with receivers only; one participant must "
                  "call CollectiveBcastSendV2").c_str());
    return -1;
  }
  for (const Participant& p : m.parts) {
    if (p.out_bytes != m.parts[root].in_bytes) {
      TF_SetStatus(st, TF_INVALID_ARGUMENT,
                   (where_text(w) + ": the receiver on GPU:" + std::to_string(p.ordinal) +
                    " expects " + std::to_string(p.out_bytes) + " bytes, the sender sends " +
                    std::to_string(m.parts[root].in_bytes)).c_str());
      return -1;
    }
  }
  return root;
}

// The clique of (group_key, ordinals), made with ncclCommInitAll on first use.
Clique* clique_of(const NcclApi* api, int64_t group_key, const std::vector<int>& ordinals,
                  const Where& w, TF_Status* st) {
  auto key = std::make_pair(group_key, ordinals);
  auto it = g_cliques.find(key);
  if (it != g_cliques.end()) return it->second.get();
  std::unique_ptr<Clique> c(new Clique());
  c->ordinals = ordinals;
  c->comms.assign(ordinals.size(), nullptr);
  NcclResult r = api->comm_init_all(c->comms.data(), static_cast<int>(ordinals.size()),
                                    ordinals.data());
  if (r != kNcclSuccess) {
    set_nccl_status(st, api, r, w, "ncclCommInitAll");
    return nullptr;
  }
  Clique* out = c.get();
  g_cliques[key] = std::move(c);
  return out;
}

// Fails the earlier participants of `m` (already gated on their streams)
// with `code`/`msg` and releases their gates. g_mu held.
void fail_meeting(Meeting& m, TF_Code code, const char* msg) {
  for (Participant& p : m.parts) {
    DeviceGuard guard(p.ordinal);
    stream_set_error(p.cs, code, msg);
    (void)cudaMemsetAsync(p.flag, 0xff, sizeof(unsigned), g_sides[p.ordinal].stream);
    (void)cudaEventDestroy(p.ready);
  }
  m.parts.clear();
}

// Issues every participant of `m` (sorted by ordinal, which is the rank;
// parts[caller] is the one whose compute call this is, issued on its own
// stream, the others on their side streams). g_mu held. Sets `st` on
// failure; earlier participants then get the error on their streams, and
// their gates are released either way.
void issue(const NcclApi* api, Meeting& m, int caller, int sm_count, const Where& w,
           TF_Status* st) {
  const int n = static_cast<int>(m.parts.size());
  std::vector<int> ordinals;
  for (const Participant& p : m.parts) ordinals.push_back(p.ordinal);
  int root = 0;
  if (m.kind == Kind::kBcastSend) root = broadcast_root(m, w, st);
  Clique* clique = TF_GetCode(st) == TF_OK ? clique_of(api, w.group_key, ordinals, w, st)
                                           : nullptr;
  // Streams: the caller's own, the side stream (after the event) for others.
  std::vector<cudaStream_t> streams(n);
  for (int i = 0; i < n && TF_GetCode(st) == TF_OK; ++i) {
    Participant& p = m.parts[i];
    if (i == caller) {
      streams[i] = p.cs->stream;
      continue;
    }
    DeviceGuard guard(p.ordinal);
    streams[i] = g_sides[p.ordinal].stream;
    cudaError_t e = cudaStreamWaitEvent(streams[i], p.ready, 0);
    if (e == cudaSuccess) e = before_call(m, p, i, n, false, streams[i]);
    if (e != cudaSuccess) {
      set_cuda_status(st, e, "%s: ordering on GPU:%d", where_text(w).c_str(), p.ordinal);
    }
  }
  if (TF_GetCode(st) == TF_OK) {
    DeviceGuard guard(m.parts[caller].ordinal);
    cudaError_t e = before_call(m, m.parts[caller], caller, n, false, streams[caller]);
    if (e != cudaSuccess) set_cuda_status(st, e, "%s", where_text(w).c_str());
  }
  if (TF_GetCode(st) == TF_OK) {
    const char* call = "ncclGroupStart";
    NcclResult r = api->group_start();
    for (int i = 0; i < n && r == kNcclSuccess; ++i) {
      if (m.parts[i].in_bytes == 0 && m.parts[i].out_bytes == 0) continue;
      r = enqueue_call(api, m, m.parts[i], clique->comms[i], i, n, root, streams[i], &call);
    }
    NcclResult end = api->group_end();
    if (r == kNcclSuccess && end != kNcclSuccess) {
      r = end;
      call = "ncclGroupEnd";
    }
    if (r != kNcclSuccess) set_nccl_status(st, api, r, w, call);
  }
  // Final op, then release the gates (also after a failure: the error is on
  // the streams, and nothing may wait for the timeout).
  for (int i = 0; i < n; ++i) {
    Participant& p = m.parts[i];
    DeviceGuard guard(p.ordinal);
    if (TF_GetCode(st) == TF_OK) {
      cudaError_t e = after_call(m, p, sm_count, streams[i]);
      if (e != cudaSuccess) set_cuda_status(st, e, "%s: final_op Div", where_text(w).c_str());
    }
    if (i == caller) continue;
    if (TF_GetCode(st) != TF_OK) stream_set_error(p.cs, TF_GetCode(st), TF_Message(st));
    (void)cudaMemsetAsync(p.flag, 0xff, sizeof(unsigned), g_sides[p.ordinal].stream);
    (void)cudaEventDestroy(p.ready);
    p.ready = nullptr;
  }
}

// ---------------------------------------------------------------------------
// Kernels

template <Kind K>
void* coll_create(TF_OpKernelConstruction* ctx) {
  static const char* const kNames[] = {"CollectiveReduceV2", "CollectiveReduceScatterV2",
                                       "CollectiveGatherV2", "CollectiveBcastSendV2",
                                       "CollectiveBcastRecvV2", "CollectiveAllToAllV2"};
  CollKernel* k = new (std::nothrow) CollKernel();
  if (k == nullptr) return nullptr;
  k->op = kNames[static_cast<int>(K)];
  k->kind = K;
  AttrReader a(ctx, k->op);
  k->timeout = a.get_float("timeout_seconds", 0.0f);
  if (K == Kind::kReduce || K == Kind::kReduceScatter) {
    const std::string merge = a.get_string("merge_op", "Add");
    const std::string final_op = a.get_string("final_op", "Id");
    if (merge == "Add") k->merge = kNcclSum;
    else if (merge == "Mul") k->merge = kNcclProd;
    else if (merge == "Min") k->merge = kNcclMin;
    else if (merge == "Max") k->merge = kNcclMax;
    else a.fail(TF_INVALID_ARGUMENT, "merge_op must be Add, Mul, Min or Max, got %s", merge.c_str());
    if (final_op != "Id" && final_op != "Div") {
      a.fail(TF_INVALID_ARGUMENT, "final_op must be Id or Div, got %s", final_op.c_str());
    }
    k->final_div = final_op == "Div";
  }
  if (!a.ok()) {
    delete k;
    return nullptr;
  }
  return k;
}

void coll_delete(void* k) { delete static_cast<CollKernel*>(k); }

// The output shape for input shape `in` (not the receiver's); false after
// recording a failure.
bool out_shape(OpCall& c, const CollKernel& k, const Shape& in, int64_t n, Shape* out) {
  char s[128];
  *out = in;
  if (k.kind != Kind::kGather && k.kind != Kind::kReduceScatter && k.kind != Kind::kAllToAll) {
    return true;
  }
  if (in.rank == 0) {
    return c.fail(TF_INVALID_ARGUMENT, "%s on GPU:%d: the input must have at least one "
                  "dimension, got a scalar", k.op, c.ordinal());
  }
  if (k.kind == Kind::kGather) {
    out->dims[0] = in.dims[0] * n;
  } else if (in.dims[0] % n != 0) {
    return c.fail(TF_INVALID_ARGUMENT, "%s on GPU:%d: the first dimension of the input %s must "
                  "be divisible by group_size %lld", k.op, c.ordinal(),
                  shape_str(in, s, sizeof(s)), static_cast<long long>(n));
  } else if (k.kind == Kind::kReduceScatter) {
    out->dims[0] = in.dims[0] / n;
  }
  return true;
}

// This process's participant of a multi-process group: NCCL at once.
void run_rank_comm(OpCall& c, const NcclApi* api, const CollKernel& k, const RankComm& rc,
                   Meeting& m, const Where& w) {
  if (m.group_size != rc.nranks) {
    c.fail(TF_INVALID_ARGUMENT, "%s: group_size %lld, but the communicator of GPU:%d for this "
           "group_key has %d ranks", where_text(w).c_str(),
           static_cast<long long>(m.group_size), c.ordinal(), rc.nranks);
    return;
  }
  Participant& p = m.parts[0];
  TF_Status* st = c.status();
  NcclResult async = kNcclSuccess;
  if (api->comm_get_async_error(rc.comm, &async) == kNcclSuccess && async != kNcclSuccess) {
    set_nccl_status(st, api, async, w, "the communicator (an earlier collective)");
    c.check_status();
    return;
  }
  if (!c.check_cuda(before_call(m, p, rc.rank, rc.nranks, true, c.stream()), k.op)) return;
  const char* call = "";
  NcclResult r = kNcclSuccess;
  if (p.in_bytes != 0 || p.out_bytes != 0) {
    r = api->group_start();
    if (r == kNcclSuccess) {
      r = enqueue_call(api, m, p, rc.comm, rc.rank, rc.nranks, -1, c.stream(), &call);
      NcclResult end = api->group_end();
      if (r == kNcclSuccess) r = end;
    }
  }
  if (r != kNcclSuccess) {
    set_nccl_status(st, api, r, w, call);
    c.check_status();
    return;
  }
  c.check_cuda(after_call(m, p, c.sm_count(), c.stream()), "final_op Div");
}

// An earlier participant: the event and the gate on its own stream.
bool wait_for_group(OpCall& c, Participant& p, const CollKernel& k, const Where& w,
                    TF_Status* st) {
  DeviceSide* side = side_of(p.ordinal, st);
  if (side == nullptr) return c.check_status();
  p.flag = side->flags + (side->next++ % kFlagSlots);
  // Cleared first: a slot whose gate timed out may have been set late.
  if (!c.check_cuda(cudaMemsetAsync(p.flag, 0, sizeof(unsigned), c.stream()),
                    "cudaMemsetAsync(gate flag)") ||
      !c.check_cuda(cudaEventCreateWithFlags(&p.ready, cudaEventDisableTiming),
                    "cudaEventCreate") ||
      !c.check_cuda(cudaEventRecord(p.ready, c.stream()), "cudaEventRecord")) {
    return false;
  }
  AsyncCheck check(c);
  if (!check.begin()) return false;
  const double timeout = k.timeout > 0 ? k.timeout : kDefaultTimeout;
  gate_kernel<<<1, 1, 0, c.stream()>>>(p.flag, static_cast<unsigned long long>(timeout * 1e9),
                                       check.record());
  if (!c.check_launch("gate_kernel")) return false;
  const std::string what = where_text(w);
  return check.finish(TF_DEADLINE_EXCEEDED, [what, timeout](const DeviceCheck&) {
    char buf[400];
    snprintf(buf, sizeof(buf), "%s: timed out after %g s waiting for the other participants "
             "(each device of the group must call the op with the same keys, in the same "
             "order on every device)", what.c_str(), timeout);
    return std::string(buf);
  });
}

void coll_compute(void* kernel, TF_OpKernelContext* ctx) {
  const CollKernel& k = *static_cast<CollKernel*>(kernel);
  OpCall c(ctx);
  if (!c.ok()) return;
  const bool recv = k.kind == Kind::kBcastRecv;
  const int base = recv ? 0 : 1;  // index of group_size
  int64_t keys[3];
  const char* names[3] = {"group_size", "group_key", "instance_key"};
  for (int i = 0; i < 3; ++i) {
    TensorPtr t = c.input(base + i);
    if (!t || !read_host_scalar(c, t.get(), k.op, names[i], &keys[i])) return;
  }
  if (keys[0] < 1) {
    c.fail(TF_INVALID_ARGUMENT, "%s: group_size must be at least 1, got %lld", k.op,
           static_cast<long long>(keys[0]));
    return;
  }
  const Where w = {k.op, keys[1], keys[2]};
  TF_Status* st = c.status();
  const NcclApi* api = load_nccl(st);
  if (api == nullptr) {
    std::string msg = std::string(k.op) + " on GPU:" + std::to_string(c.ordinal()) + ": " +
                      TF_Message(st);
    c.fail(TF_FAILED_PRECONDITION, "%s", msg.c_str());
    return;
  }
  Participant p;
  p.ordinal = c.ordinal();
  p.cs = c.cuda_stream();
  p.sender = k.kind == Kind::kBcastSend;
  Shape ys;
  TF_DataType dtype;
  if (recv) {
    TensorPtr shape_t = c.input(3);
    if (!shape_t) return;
    int count = 0;
    if (!read_host_ints(c, shape_t.get(), k.op, "shape", ys.dims, TF_MAX_DIMS, &count)) return;
    ys.rank = count;
    dtype = TF_ExpectedOutputDataType(ctx, 0);
  } else {
    p.in = c.input(0);
    if (!p.in) return;
    if (!out_shape(c, k, Shape::of(p.in.get()), keys[0], &ys)) return;
    dtype = TF_TensorType(p.in.get());
    p.in_ptr = TF_TensorData(p.in.get());
    p.in_bytes = static_cast<int64_t>(TF_TensorByteSize(p.in.get()));
  }
  p.out = c.output(0, dtype, ys);
  if (!p.out) return;
  p.out_ptr = TF_TensorData(p.out.get());
  p.out_bytes = static_cast<int64_t>(TF_TensorByteSize(p.out.get()));

  std::lock_guard<std::mutex> lock(g_mu);
  auto rc = g_rank_comms.find(std::make_pair(p.ordinal, keys[1]));
  if (rc != g_rank_comms.end()) {
    Meeting m{k.kind, dtype, k.merge, k.final_div, keys[0], {}};
    m.parts.push_back(std::move(p));
    run_rank_comm(c, api, k, rc->second, m, w);
    return;
  }
  const auto key = std::make_pair(keys[1], keys[2]);
  auto it = g_meetings.find(key);
  if (it == g_meetings.end()) {
    it = g_meetings.emplace(key, Meeting{meeting_kind(k.kind), dtype, k.merge, k.final_div,
                                         keys[0], {}}).first;
  }
  Meeting& m = it->second;
  // A participant that disagrees fails the whole group at once.
  auto refuse = [&](const char* fmt, auto... args) {
    c.fail(TF_INVALID_ARGUMENT, fmt, args...);
    fail_meeting(m, TF_INVALID_ARGUMENT, TF_Message(st));
    g_meetings.erase(it);
  };
  bool agrees = m.group_size == keys[0] && m.kind == meeting_kind(k.kind) && m.dtype == dtype &&
                m.merge == k.merge && m.final_div == k.final_div;
  for (const Participant& q : m.parts) {
    if (q.ordinal == p.ordinal) {
      refuse("%s: GPU:%d joined twice; each participant must be on another device",
             where_text(w).c_str(), p.ordinal);
      return;
    }
    if (m.kind != Kind::kBcastSend && q.in_bytes != p.in_bytes) agrees = false;
  }
  if (!agrees) {
    refuse("%s: the participant on GPU:%d disagrees with the group on the "
           "op, dtype (%s), group_size (%lld), reduction or input size (%lld bytes)",
           where_text(w).c_str(), p.ordinal, dtype_name(dtype),
           static_cast<long long>(keys[0]), static_cast<long long>(p.in_bytes));
    return;
  }
  if (static_cast<int64_t>(m.parts.size()) + 1 < m.group_size) {
    if (!wait_for_group(c, p, k, w, st)) return;
    m.parts.push_back(std::move(p));
    return;
  }
  m.parts.push_back(std::move(p));
  Meeting done = std::move(m);
  g_meetings.erase(it);
  // Rank order is ordinal order; the caller is found again after sorting.
  const int me = c.ordinal();
  std::sort(done.parts.begin(), done.parts.end(),
            [](const Participant& a, const Participant& b) { return a.ordinal < b.ordinal; });
  int caller = 0;
  for (size_t i = 0; i < done.parts.size(); ++i) {
    if (done.parts[i].ordinal == me) caller = static_cast<int>(i);
  }
  issue(api, done, caller, c.sm_count(), w, st);
  c.check_status();
}

}  // namespace

// ---------------------------------------------------------------------------
// PG_GetCollectiveFns (pluggable_collectives.h)

namespace {

void get_unique_id(char out[128], TF_Status* status) {
  TF_SetStatus(status, TF_OK, "");
  const NcclApi* api = load_nccl(status);
  if (api == nullptr) return;
  NcclUniqueId id;
  NcclResult r = api->get_unique_id(&id);
  if (r != kNcclSuccess) {
    set_nccl_status(status, api, r, Where{"get_unique_id", 0, 0}, "ncclGetUniqueId");
    return;
  }
  memcpy(out, id.internal, PG_COLLECTIVE_ID_BYTES);
}

void abort_locked(const NcclApi* api, int ordinal, int64_t group_key) {
  auto it = g_rank_comms.find(std::make_pair(ordinal, group_key));
  if (it == g_rank_comms.end()) return;
  (void)api->comm_abort(it->second.comm);
  g_rank_comms.erase(it);
}

void init_communicator(int device_ordinal, int nranks, int rank,
                       const char id[128], int64_t group_key,
                       TF_Status* status) {
  TF_SetStatus(status, TF_OK, "");
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) (void)cudaGetLastError();
  if (nranks < 1 || rank < 0 || rank >= nranks || device_ordinal < 0 ||
      device_ordinal >= count) {
    char msg[256];
    snprintf(msg, sizeof(msg), "init_communicator: need 0 <= rank < nranks and a device of "
             "this process (0..%d), got rank %d, nranks %d, device %d", count - 1, rank,
             nranks, device_ordinal);
    TF_SetStatus(status, TF_INVALID_ARGUMENT, msg);
    return;
  }
  const NcclApi* api = load_nccl(status);
  if (api == nullptr) return;
  NcclUniqueId uid;
  memcpy(uid.internal, id, PG_COLLECTIVE_ID_BYTES);
  DeviceGuard guard(device_ordinal);
  if (!guard.ok(status, device_ordinal)) return;
  RankComm rc;
  rc.nranks = nranks;
  rc.rank = rank;
  // Not under g_mu: this waits for the other processes.
  NcclResult r = api->comm_init_rank(&rc.comm, nranks, uid, rank);
  if (r != kNcclSuccess) {
    set_nccl_status(status, api, r, Where{"init_communicator", group_key, 0},
                    "ncclCommInitRank");
    return;
  }
  std::lock_guard<std::mutex> lock(g_mu);
  abort_locked(api, device_ordinal, group_key);
  g_rank_comms[std::make_pair(device_ordinal, group_key)] = rc;
}

void abort_communicator(int device_ordinal, int64_t group_key, TF_Status* status) {
  TF_SetStatus(status, TF_OK, "");
  const NcclApi* api = load_nccl(status);
  if (api == nullptr) return;
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_rank_comms.count(std::make_pair(device_ordinal, group_key)) == 0) {
    char msg[160];
    snprintf(msg, sizeof(msg), "abort_communicator: no communicator for GPU:%d and group_key "
             "%lld", device_ordinal, static_cast<long long>(group_key));
    TF_SetStatus(status, TF_NOT_FOUND, msg);
    return;
  }
  abort_locked(api, device_ordinal, group_key);
}

}  // namespace

void register_collective_kernels() {
  const TF_DataType kGather[] = {TF_HALF, TF_FLOAT, TF_DOUBLE, TF_INT32, TF_INT64};
  const TF_DataType kBcast[] = {TF_BOOL, TF_HALF, TF_FLOAT, TF_DOUBLE, TF_INT32, TF_INT64};
  const std::initializer_list<const char*> keys = {"group_size", "group_key", "instance_key"};
  for (TF_DataType t : kNumericTypes) {
    register_kernel("CollectiveReduceV2", coll_create<Kind::kReduce>, coll_compute, coll_delete,
                    {{"T", t}}, keys);
    register_kernel("CollectiveReduceScatterV2", coll_create<Kind::kReduceScatter>, coll_compute,
                    coll_delete, {{"T", t}}, keys);
    register_kernel("CollectiveAllToAllV2", coll_create<Kind::kAllToAll>, coll_compute,
                    coll_delete, {{"T", t}}, keys);
  }
  for (TF_DataType t : kGather) {
    register_kernel("CollectiveGatherV2", coll_create<Kind::kGather>, coll_compute, coll_delete,
                    {{"T", t}}, keys);
  }
  for (TF_DataType t : kBcast) {
    register_kernel("CollectiveBcastSendV2", coll_create<Kind::kBcastSend>, coll_compute,
                    coll_delete, {{"T", t}}, keys);
    register_kernel("CollectiveBcastRecvV2", coll_create<Kind::kBcastRecv>, coll_compute,
                    coll_delete, {{"T", t}}, {"group_size", "group_key", "instance_key", "shape"});
  }
}

}  // namespace pgcuda

extern "C" void PG_GetCollectiveFns(PG_CollectiveFns* fns) {
  if (fns == nullptr || fns->struct_size < sizeof(PG_CollectiveFns)) return;
  fns->version = PG_COLLECTIVES_VERSION;
  fns->get_unique_id = pgcuda::get_unique_id;
  fns->init_communicator = pgcuda::init_communicator;
  fns->abort_communicator = pgcuda::abort_communicator;
}
