// TensorFlow's collective ops on GPUs, through NCCL (loaded at run time,
// nccl_loader.h): CollectiveReduceV2, CollectiveReduceScatterV2,
// CollectiveGatherV2, CollectiveBcastSendV2 / CollectiveBcastRecvV2 and
// CollectiveAllToAllV2, with the inputs and attributes of TensorFlow's ops
// (and of the host plugin's kernels_collective.c).
//
// One process, several GPUs. The participants of one (group_key,
// instance_key) are called concurrently, one thread per device
// (pg.distribute does; TensorFlow's executor does the same with its
// asynchronous collective kernels). Each participant's compute call waits
// on the host (looking for 100 us, then asleep on a condition variable,
// bounded by timeout_seconds) until the last one arrives; the last one makes the devices' communicators if they
// are new, issues every participant's NCCL call in one
// ncclGroupStart/End, each on its participant's own stream, followed by
// final_op Div there, and wakes the others, which return. So when a
// participant's compute call returns, its collective is on its stream in
// order, and nothing on the GPU ever waits for work that is not yet
// enqueued (a kernel spinning on a flag would, and CUDA's lazy kernel
// loading synchronises a device, which would then wait for that kernel).
// A participant that is not called in time fails every waiting one with
// DEADLINE_EXCEEDED at its call; one that disagrees (op, dtype, size,
// group_size) fails them all at once with INVALID_ARGUMENT.
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
// A watchdog thread (running while such communicators exist) follows every
// collective still in flight on them through an event recorded after it:
// one past its timeout_seconds (DEADLINE_EXCEEDED), or a communicator with
// an asynchronous NCCL error (UNAVAILABLE), takes the communicator out of
// service: the error goes to the streams of the collectives in flight, and
// ncclCommAbort runs on a thread of its own, outside the plugin's lock (it
// ends NCCL's kernels still waiting for a peer, but may itself take long;
// the process joins these threads when it exits).
// abort_communicator does the same (UNAVAILABLE), e.g. when the process
// group finds a peer process dead, and returns when the abort has ended.
// Every ncclCommAbort runs on such a thread: NCCL's teardown still running
// when the process exits (its proxy thread freeing device memory after the
// CUDA runtime inside NCCL is gone) crashes the process, and the caller of
// abort_communicator may be a thread the interpreter stops at shutdown.
// A later collective on an aborted communicator fails at once with
// FAILED_PRECONDITION saying why it was aborted. Waits for work on a device
// that ran such collectives poll (runtime.cu's wait_work): if the aborted
// collective's kernel still runs, a wait for work behind it returns the
// collective's error instead of waiting for ever.
//
// Reductions: merge_op Add/Mul/Min/Max is NCCL's sum/prod/min/max in the
// dtype; final_op Div divides the result by group_size afterwards (in float
// for float16/bfloat16, truncating toward zero for integers). Errors name
// the op, group and instance keys and NCCL's message.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "exit_joined.h"
#include "kernel_util.h"
#include "nccl_loader.h"
#include "pluggable_collectives.h"

namespace pgcuda {
namespace {

// The wait when timeout_seconds is 0 (TensorFlow's "no timeout").
constexpr double kDefaultTimeout = 600.0;
// How long a participant that arrived looks for the others before it
// sleeps until they come.
constexpr std::chrono::microseconds kLookBeforeSleep(100);

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

// ---------------------------------------------------------------------------
// State

std::mutex g_mu;  // guards everything below
std::condition_variable g_cv;  // a meeting was issued or failed

// A participant that has arrived.
struct Participant {
  int ordinal = 0;
  CudaStream* cs = nullptr;
  TensorPtr in, out;  // held until the call is issued
  const void* in_ptr = nullptr;
  void* out_ptr = nullptr;
  int64_t in_bytes = 0, out_bytes = 0;
  bool sender = false;
};

// One collective waiting for its participants. `done` (with `code` and
// `message`) is set by the last arrival, or by the first waiter whose
// timeout passes; the waiters share it.
struct Meeting {
  Kind kind;
  TF_DataType dtype;
  NcclRedOp merge;
  bool final_div;
  int64_t group_size;
  std::vector<Participant> parts;
  bool done = false;
  TF_Code code = TF_OK;
  std::string message;
};
using MeetingKey = std::pair<int64_t, int64_t>;  // (group_key, instance_key)
// Never destroyed: waiters may still hold meetings while the process exits.
std::map<MeetingKey, std::shared_ptr<Meeting>>& g_meetings =
    *new std::map<MeetingKey, std::shared_ptr<Meeting>>();

// The communicators of one group of in-process devices (rank k on ordinals[k]).
struct Clique {
  std::vector<int> ordinals;
  std::vector<NcclComm> comms;
};
std::map<std::pair<int64_t, std::vector<int>>, std::unique_ptr<Clique>> g_cliques;

// A collective of a rank communicator that may still run on the GPU:
// `done` is recorded on its stream after it.
struct InFlight {
  CudaStream* cs = nullptr;
  cudaEvent_t done = nullptr;
  std::chrono::steady_clock::time_point deadline;
  double timeout = 0.0;
  const char* op = "";  // for messages: where_text of (op, group_key, instance_key)
  int64_t instance_key = 0;
};

// Communicators set up by PG_GetCollectiveFns (one per process and device).
struct RankComm {
  NcclComm comm = nullptr;
  int nranks = 0;
  int rank = 0;
  std::vector<InFlight> in_flight;
  // Events of finished collectives, for the next ones (no create/destroy
  // per call).
  std::vector<cudaEvent_t> spare_events;
};
using CommKey = std::pair<int, int64_t>;  // (device ordinal, group_key)
// Never destroyed (the watchdog may still look at them while the process exits).
std::map<CommKey, RankComm>& g_rank_comms = *new std::map<CommKey, RankComm>();
// Why each aborted communicator was aborted (later collectives fail with it).
std::map<CommKey, std::string>& g_aborted = *new std::map<CommKey, std::string>();
bool g_watchdog_running = false;

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
// own all-to-all chunk or the zeroed receive buffer of a broadcast between
// processes; after it, final_op Div.
cudaError_t before_call(const Meeting& m, const Participant& p, int rank, int n, bool zero_recv,
                        cudaStream_t s) {
  if (m.kind == Kind::kAllToAll && p.in_bytes > 0) {
    const size_t chunk = p.in_bytes / n;
    return cudaMemcpyAsync(static_cast<char*>(p.out_ptr) + rank * chunk,
                           static_cast<const char*>(p.in_ptr) + rank * chunk, chunk,
                           cudaMemcpyDeviceToDevice, s);
  }
  const bool bcast = m.kind == Kind::kBcastSend || m.kind == Kind::kBcastRecv;
  if (zero_recv && bcast && !p.sender && p.out_bytes > 0) {
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
  DeviceRestore keep;  // NCCL may leave another of the clique's devices current
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

// Issues every participant of `m` (sorted by ordinal, which is the rank),
// each on its own stream, in one NCCL group. g_mu held; sets `st` on
// failure.
void issue(const NcclApi* api, Meeting& m, int sm_count, const Where& w, TF_Status* st) {
  DeviceRestore keep;  // NCCL may leave another participant's device current
  const int n = static_cast<int>(m.parts.size());
  std::vector<int> ordinals;
  for (const Participant& p : m.parts) ordinals.push_back(p.ordinal);
  int root = 0;
  if (m.kind == Kind::kBcastSend) root = broadcast_root(m, w, st);
  Clique* clique = TF_GetCode(st) == TF_OK ? clique_of(api, w.group_key, ordinals, w, st)
                                           : nullptr;
  for (int i = 0; i < n && TF_GetCode(st) == TF_OK; ++i) {
    Participant& p = m.parts[i];
    flush_device(p.cs->dev);  // another participant's call issues this one's work
    DeviceGuard guard(p.ordinal);
    cudaError_t e = before_call(m, p, i, n, false, p.cs->stream);
    if (e != cudaSuccess) {
      set_cuda_status(st, e, "%s: ordering on GPU:%d", where_text(w).c_str(), p.ordinal);
    }
  }
  if (TF_GetCode(st) == TF_OK) {
    const char* call = "ncclGroupStart";
    NcclResult r = api->group_start();
    for (int i = 0; i < n && r == kNcclSuccess; ++i) {
      const Participant& p = m.parts[i];
      if (p.in_bytes == 0 && p.out_bytes == 0) continue;
      r = enqueue_call(api, m, p, clique->comms[i], i, n, root, p.cs->stream, &call);
    }
    NcclResult end = api->group_end();
    if (r == kNcclSuccess && end != kNcclSuccess) {
      r = end;
      call = "ncclGroupEnd";
    }
    if (r != kNcclSuccess) set_nccl_status(st, api, r, w, call);
  }
  for (int i = 0; i < n && TF_GetCode(st) == TF_OK; ++i) {
    Participant& p = m.parts[i];
    DeviceGuard guard(p.ordinal);
    cudaError_t e = after_call(m, p, sm_count, p.cs->stream);
    if (e != cudaSuccess) set_cuda_status(st, e, "%s: final_op Div", where_text(w).c_str());
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
void run_rank_comm(OpCall& c, const NcclApi* api, const CollKernel& k, RankComm& rc,
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
  if (!c.check_cuda(after_call(m, p, c.sm_count(), c.stream()), "final_op Div")) return;
  // Followed by the watchdog until it has run; waits on this device poll
  // from now on (an abort may leave NCCL's kernel running: see wait_work).
  c.cuda_stream()->dev->poll_waits.store(true, std::memory_order_relaxed);
  InFlight f;
  f.cs = c.cuda_stream();
  f.timeout = k.timeout > 0 ? k.timeout : kDefaultTimeout;
  f.deadline = std::chrono::steady_clock::now() +
               std::chrono::microseconds(static_cast<int64_t>(f.timeout * 1e6));
  f.op = w.op;
  f.instance_key = w.instance_key;
  if (!rc.spare_events.empty()) {
    f.done = rc.spare_events.back();
    rc.spare_events.pop_back();
  } else if (!c.check_cuda(cudaEventCreateWithFlags(&f.done, cudaEventDisableTiming),
                           "cudaEventCreate")) {
    return;
  }
  if (!c.check_cuda(cudaEventRecord(f.done, c.stream()), "cudaEventRecord")) {
    (void)cudaEventDestroy(f.done);
    return;
  }
  rc.in_flight.push_back(f);
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
  }
  if (k.kind == Kind::kReduce) {
    // The result may go over a donated input (NCCL then reduces in place),
    // which this kernel must not hold a handle of meanwhile.
    p.in.reset();
    p.out = c.forward_or_output(0, 0, ys);
    if (!p.out || !(p.in = c.input(0))) return;
  } else {
    p.out = c.output(0, dtype, ys);
    if (!p.out) return;
  }
  if (!recv) {
    p.in_ptr = TF_TensorData(p.in.get());
    p.in_bytes = static_cast<int64_t>(TF_TensorByteSize(p.in.get()));
  }
  p.out_ptr = TF_TensorData(p.out.get());
  p.out_bytes = static_cast<int64_t>(TF_TensorByteSize(p.out.get()));

  std::unique_lock<std::mutex> lock(g_mu);
  auto gone = g_aborted.find(std::make_pair(p.ordinal, keys[1]));
  if (gone != g_aborted.end()) {
    c.fail(TF_FAILED_PRECONDITION, "%s on GPU:%d: the communicator of this group_key was "
           "aborted (%s); make a new one (init_communicator) or start the process group "
           "again", where_text(w).c_str(), p.ordinal, gone->second.c_str());
    return;
  }
  auto rc = g_rank_comms.find(std::make_pair(p.ordinal, keys[1]));
  if (rc != g_rank_comms.end()) {
    Meeting m{k.kind, dtype, k.merge, k.final_div, keys[0], {}};
    m.parts.push_back(std::move(p));
    run_rank_comm(c, api, k, rc->second, m, w);
    return;
  }
  const MeetingKey key(keys[1], keys[2]);
  auto it = g_meetings.find(key);
  if (it == g_meetings.end()) {
    auto fresh = std::make_shared<Meeting>();
    *fresh = Meeting{meeting_kind(k.kind), dtype, k.merge, k.final_div, keys[0], {}};
    it = g_meetings.emplace(key, fresh).first;
  }
  std::shared_ptr<Meeting> m = it->second;
  // Ends the meeting for everyone (g_mu held): the waiters return with
  // `code`/`msg`, the held tensors are released.
  auto finish = [&](TF_Code code, const std::string& msg) {
    m->done = true;
    m->code = code;
    m->message = msg;
    m->parts.clear();
    auto cur = g_meetings.find(key);
    if (cur != g_meetings.end() && cur->second == m) g_meetings.erase(cur);
    g_cv.notify_all();
  };
  bool agrees = m->group_size == keys[0] && m->kind == meeting_kind(k.kind) &&
                m->dtype == dtype && m->merge == k.merge && m->final_div == k.final_div;
  for (const Participant& q : m->parts) {
    if (q.ordinal == p.ordinal) {
      c.fail(TF_INVALID_ARGUMENT, "%s: GPU:%d joined twice; each participant must be on "
             "another device", where_text(w).c_str(), p.ordinal);
      finish(TF_INVALID_ARGUMENT, TF_Message(st));
      return;
    }
    if (m->kind != Kind::kBcastSend && q.in_bytes != p.in_bytes) agrees = false;
  }
  if (!agrees) {
    c.fail(TF_INVALID_ARGUMENT, "%s: the participant on GPU:%d disagrees with the group on "
           "the op, dtype (%s), group_size (%lld), reduction or input size (%lld bytes)",
           where_text(w).c_str(), p.ordinal, dtype_name(dtype),
           static_cast<long long>(keys[0]), static_cast<long long>(p.in_bytes));
    finish(TF_INVALID_ARGUMENT, TF_Message(st));
    return;
  }
  m->parts.push_back(std::move(p));
  if (static_cast<int64_t>(m->parts.size()) < m->group_size) {
    // Wait on the host for the others (the lock is released meanwhile):
    // first a short look (pg.distribute calls them all at once, and a
    // sleeping thread takes longer to wake than they take to arrive), then
    // asleep until the deadline.
    const double timeout = k.timeout > 0 ? k.timeout : kDefaultTimeout;
    const auto now = std::chrono::steady_clock::now();
    const auto deadline = now + std::chrono::microseconds(static_cast<int64_t>(timeout * 1e6));
    const auto look_until = std::min(deadline, now + kLookBeforeSleep);
    while (!m->done && std::chrono::steady_clock::now() < look_until) {
      lock.unlock();
      std::this_thread::yield();
      lock.lock();
    }
    if (!g_cv.wait_until(lock, deadline, [&] { return m->done; })) {
      char buf[400];
      snprintf(buf, sizeof(buf), "%s: timed out after %g s waiting for the other "
               "participants (%zu of %lld arrived; call every device's op with the same keys, "
               "concurrently: one thread per device)", where_text(w).c_str(), timeout,
               m->parts.size(), static_cast<long long>(m->group_size));
      finish(TF_DEADLINE_EXCEEDED, buf);
    }
    if (m->code != TF_OK) c.fail(m->code, "%s", m->message.c_str());
    return;
  }
  // The last arrival: rank order is ordinal order.
  std::sort(m->parts.begin(), m->parts.end(),
            [](const Participant& a, const Participant& b) { return a.ordinal < b.ordinal; });
  issue(api, *m, c.sm_count(), w, st);
  finish(TF_GetCode(st), TF_GetCode(st) == TF_OK ? "" : TF_Message(st));
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

// Forgets the collectives of `rc` that have finished (g_mu held, the
// device current); their events go back to the spares.
void prune_finished(RankComm& rc) {
  auto& v = rc.in_flight;
  v.erase(std::remove_if(v.begin(), v.end(), [&rc](InFlight& f) {
            const cudaError_t e = cudaEventQuery(f.done);
            if (e == cudaErrorNotReady) return false;
            (void)cudaGetLastError();
            if (e == cudaSuccess && rc.spare_events.size() < 64) {
              rc.spare_events.push_back(f.done);
            } else {
              (void)cudaEventDestroy(f.done);
            }
            return true;
          }), v.end());
}

// Takes the communicator of `key` out of service (g_mu held) and returns it
// for the caller to abort with NCCL after releasing g_mu (nullptr if there
// is none): ncclCommAbort may take long, or not return while a peer hangs,
// and nothing else may wait for it. The collectives still in flight on it
// get `code` and "<their call>: <why>" on their streams, and their device
// stops waiting for them (device_abandon) unless they finish after all;
// later collectives of the key fail with `why`. `why` empty: a plain
// replacement by init_communicator, nothing remembered.
NcclComm retire_locked(const CommKey& key, TF_Code code, const std::string& why) {
  auto it = g_rank_comms.find(key);
  if (it == g_rank_comms.end()) return nullptr;
  RankComm& rc = it->second;
  DeviceGuard guard(key.first);
  prune_finished(rc);
  for (InFlight& f : rc.in_flight) {
    const std::string msg = where_text(Where{f.op, key.second, f.instance_key}) + " on GPU:" +
                            std::to_string(key.first) + ": " + why;
    stream_set_error(f.cs, code, msg.c_str());
    device_abandon(f.cs->dev, f.done, code, msg);
  }
  for (cudaEvent_t e : rc.spare_events) (void)cudaEventDestroy(e);
  NcclComm comm = rc.comm;
  g_rank_comms.erase(it);
  if (!why.empty()) g_aborted[key] = why;
  return comm;
}

// Aborts `comm` on a thread the process joins when it exits
// (exit_joined.h): ncclCommAbort can take a while (it stops NCCL's own
// threads, and its proxy thread frees the connections' memory), and an
// abort still running while the process tears down its libraries crashes
// it. The future is ready when the abort has ended (not valid when it ran
// on this thread).
std::shared_future<void> abort_in_background(const NcclApi* api, NcclComm comm, int device) {
  return run_joined_at_exit([api, comm, device] {
    DeviceGuard guard(device);
    (void)api->comm_abort(comm);
  });
}

// Aborts `comm` and returns when the abort has ended, the work still done
// on a thread the process joins at exit (this one may be stopped by the
// interpreter's shutdown while it waits).
void abort_and_wait(const NcclApi* api, NcclComm comm, int device) {
  std::shared_future<void> done = abort_in_background(api, comm, device);
  if (done.valid()) done.wait();
}

// The watchdog (see the file comment): every 20 ms while rank communicators
// exist.
void watchdog_loop(const NcclApi* api) {
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_rank_comms.empty()) {
      g_watchdog_running = false;
      return;
    }
    const auto now = std::chrono::steady_clock::now();
    std::vector<std::pair<CommKey, std::pair<TF_Code, std::string>>> doomed;
    for (auto& kv : g_rank_comms) {
      RankComm& rc = kv.second;
      DeviceGuard guard(kv.first.first);
      prune_finished(rc);
      NcclResult async = kNcclSuccess;
      if (api->comm_get_async_error(rc.comm, &async) == kNcclSuccess &&
          async != kNcclSuccess && async != kNcclInProgress) {
        doomed.push_back({kv.first, {TF_UNAVAILABLE,
                                     "NCCL reported an error on the communicator: " +
                                         nccl_error_text(api, async)}});
        continue;
      }
      for (const InFlight& f : rc.in_flight) {
        if (now < f.deadline) continue;
        char buf[320];
        snprintf(buf, sizeof(buf), "timed out after %g s waiting for the other processes "
                 "(every rank must call the same collectives in the same order; a rank that "
                 "is slower than the timeout, or hung, aborts the group)", f.timeout);
        doomed.push_back({kv.first, {TF_DEADLINE_EXCEEDED, buf}});
        break;
      }
    }
    for (auto& d : doomed) {
      NcclComm comm = retire_locked(d.first, d.second.first, d.second.second);
      if (comm == nullptr) continue;
      // Aborted on a thread of its own, without g_mu: the collectives in
      // flight have their errors already, and their waits poll.
      (void)abort_in_background(api, comm, d.first.first);
    }
  }
}

// Starts the watchdog if it is not running (g_mu held).
void ensure_watchdog(const NcclApi* api) {
  if (g_watchdog_running) return;
  try {
    std::thread(watchdog_loop, api).detach();
    g_watchdog_running = true;
  } catch (const std::exception&) {
    // No thread: timeouts are not enforced, but collectives still run.
  }
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
  const CommKey key(device_ordinal, group_key);
  NcclComm old = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    old = retire_locked(key, TF_UNAVAILABLE,
                        "the communicator was replaced by init_communicator while this "
                        "collective was in flight");
    g_aborted.erase(key);
    g_rank_comms[key] = rc;
    ensure_watchdog(api);
  }
  if (old != nullptr) abort_and_wait(api, old, device_ordinal);
}

void abort_communicator(int device_ordinal, int64_t group_key, TF_Status* status) {
  TF_SetStatus(status, TF_OK, "");
  const NcclApi* api = load_nccl(status);
  if (api == nullptr) return;
  const CommKey key(device_ordinal, group_key);
  NcclComm comm = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_rank_comms.count(key) == 0) {
      char msg[160];
      snprintf(msg, sizeof(msg), "abort_communicator: no communicator for GPU:%d and "
               "group_key %lld", device_ordinal, static_cast<long long>(group_key));
      TF_SetStatus(status, TF_NOT_FOUND, msg);
      return;
    }
    comm = retire_locked(key, TF_UNAVAILABLE,
                         "the communicator was aborted (abort_communicator: the process group "
                         "found a peer process dead, or is shutting down) while this "
                         "collective was in flight");
  }
  abort_and_wait(api, comm, device_ordinal);
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
