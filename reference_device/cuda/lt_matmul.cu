// Products through cuBLASLt with the algorithm chosen by timing (lt_matmul.h).
//
// A plan (descriptors, layouts, the algorithm and its workspace) is made once
// per (device, dtype, TF32, transposes, M, N, K, epilogue) and kept for the
// process, at most kMaxPlans of them; past that, a product gets a plan of its
// own with the heuristic's first choice, released after the call (cuBLASLt
// reads the descriptors while the call is enqueued, not after).
//
// Row-major C[M, N] = op(A) op(B) is column-major C^T[N, M] = op(B)^T op(A)^T:
// cuBLASLt's first operand is our B, its second our A, and its bias runs along
// the N rows of C^T.
#include <climits>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "cublaslt_loader.h"
#include "lt_matmul.h"

namespace pgcuda {
namespace {

constexpr size_t kMaxLtWorkspace = size_t(32) << 20;
constexpr size_t kMaxPlans = 4096;

struct Key {
  int ordinal;
  int dt;
  bool ta, tb, tf32, bias, relu, alt;
  int64_t M, N, K;
  bool operator<(const Key& o) const {
    return std::tie(ordinal, dt, ta, tb, tf32, bias, relu, alt, M, N, K) <
           std::tie(o.ordinal, o.dt, o.ta, o.tb, o.tf32, o.bias, o.relu, o.alt, o.M, o.N, o.K);
  }
};

struct Plan {
  std::mutex mu;  // held while the descriptor's bias pointer is set and used
  LtMatmulDesc desc = nullptr;
  LtLayout a = nullptr, b = nullptr, d = nullptr;
  LtAlgo algo;
  size_t workspace = 0;
  bool fused = false;    // the epilogue applies the bias (and the Relu)
  bool use_alt = false;  // the caller's alternative runs the product
  bool decided = false;  // the choice is final for the process

  void release(const LtApi* api) {
    if (desc) api->desc_destroy(desc);
    if (a) api->layout_destroy(a);
    if (b) api->layout_destroy(b);
    if (d) api->layout_destroy(d);
    desc = nullptr;
    a = b = d = nullptr;
  }
};

// Kept for the life of the process (never destroyed: no cuBLASLt call runs
// during static destruction).
std::mutex g_plans_mu;
std::map<Key, std::unique_ptr<Plan>>* g_plans = new std::map<Key, std::unique_ptr<Plan>>();

bool lt_types(TF_DataType dt, bool tf32, cudaDataType* data, int* compute) {
  switch (dt) {
    case TF_FLOAT:
      *data = CUDA_R_32F;
      *compute = tf32 ? kBlasCompute32FFastTF32 : kBlasCompute32F;
      return true;
    case TF_HALF:
      *data = CUDA_R_16F;
      *compute = kBlasCompute32F;
      return true;
    case TF_BFLOAT16:
      *data = CUDA_R_16BF;
      *compute = kBlasCompute32F;
      return true;
    default:
      return false;
  }
}

// Up to `want` algorithms for the plan's descriptor with `epilogue`, best
// ranked first; 0 if cuBLASLt has none.
int heuristics(const LtApi* api, LtHandle h, Plan* pl, uint32_t epilogue, int want,
               LtHeuristicResult* out) {
  if (api->desc_set(pl->desc, kLtDescEpilogue, &epilogue, sizeof(epilogue)) != kBlasSuccess) {
    return 0;
  }
  LtPreference pref = nullptr;
  if (api->pref_create(&pref) != kBlasSuccess) return 0;
  const uint64_t max_ws = kMaxLtWorkspace;
  api->pref_set(pref, kLtPrefMaxWorkspaceBytes, &max_ws, sizeof(max_ws));
  memset(out, 0, sizeof(LtHeuristicResult) * static_cast<size_t>(want));
  int returned = 0;
  const BlasStatus r =
      api->heuristic(h, pl->desc, pl->a, pl->b, pl->d, pl->d, pref, want, out, &returned);
  api->pref_destroy(pref);
  if (r != kBlasSuccess) return 0;
  int n = 0;  // the usable ones, in rank order
  for (int i = 0; i < returned; ++i) {
    if (out[i].state == kBlasSuccess) out[n++] = out[i];
  }
  return n;
}

uint32_t epilogue_of(const LtProduct& p, bool fused) {
  if (!fused || !p.bias) return kLtEpilogueDefault;
  return p.relu ? kLtEpilogueReluBias : kLtEpilogueBias;
}

// Descriptors and the heuristic's first choice; false on failure (recorded
// on the call where `report`; the plan is then released).
bool make_plan(OpCall& c, const char* op, const LtApi* api, LtHandle h, const LtProduct& p,
               Plan* pl, bool report) {
  cudaDataType data;
  int compute;
  if (!lt_types(p.dt, p.tf32, &data, &compute)) {
    return report && c.fail(TF_UNIMPLEMENTED, "%s on GPU: dtype %s", op, dtype_name(p.dt));
  }
  const int op_b = p.tb ? kBlasOpT : kBlasOpN;
  const int op_a = p.ta ? kBlasOpT : kBlasOpN;
  const bool ok =
      api->desc_create(&pl->desc, compute, CUDA_R_32F) == kBlasSuccess &&
      api->desc_set(pl->desc, kLtDescTransA, &op_b, sizeof(op_b)) == kBlasSuccess &&
      api->desc_set(pl->desc, kLtDescTransB, &op_a, sizeof(op_a)) == kBlasSuccess &&
      api->layout_create(&pl->a, data, p.tb ? p.K : p.N, p.tb ? p.N : p.K,
                         p.tb ? p.K : p.N) == kBlasSuccess &&
      api->layout_create(&pl->b, data, p.ta ? p.M : p.K, p.ta ? p.K : p.M,
                         p.ta ? p.M : p.K) == kBlasSuccess &&
      api->layout_create(&pl->d, data, p.N, p.M, p.N) == kBlasSuccess;
  if (!ok) {
    pl->release(api);
    return report && c.fail(TF_INTERNAL, "%s: creating the cuBLASLt descriptors failed", op);
  }
  LtHeuristicResult first;
  pl->fused = p.bias && heuristics(api, h, pl, epilogue_of(p, true), 1, &first) == 1;
  if (!pl->fused && heuristics(api, h, pl, kLtEpilogueDefault, 1, &first) != 1) {
    pl->release(api);
    return report && c.fail(TF_INTERNAL, "%s: cuBLASLt has no algorithm for [%lld, %lld] x [%lld, %lld] (%s)",
                  op, static_cast<long long>(p.M), static_cast<long long>(p.K),
                  static_cast<long long>(p.K), static_cast<long long>(p.N), dtype_name(p.dt));
  }
  pl->algo = first.algo;
  pl->workspace = first.workspace_size;
  return true;
}

BlasStatus run(const LtApi* api, LtHandle h, const Plan* pl, const LtAlgo& algo, const void* a,
               const void* b, void* d, void* workspace, size_t ws_bytes, cudaStream_t stream) {
  const float alpha = 1.0f, beta = 0.0f;
  return api->matmul(h, pl->desc, &alpha, b, pl->a, a, pl->b, &beta, d, pl->d, d, pl->d, &algo,
                     workspace, ws_bytes, stream);
}

// Whether the call may wait for its stream to time candidates.
bool may_time(OpCall& c, const LtProduct& p) {
  if (!lt_worth_timing(p)) return false;
  CudaStream* s = c.cuda_stream();
  if (s->dev != nullptr && s->dev->capturing.load(std::memory_order_relaxed) != 0) return false;
  return !stream_capturing(s->stream);
}

// Events of the timing, destroyed with it.
struct EventSet {
  std::vector<cudaEvent_t> ev;
  ~EventSet() {
    for (cudaEvent_t e : ev) (void)cudaEventDestroy(e);
  }
  bool make(size_t n) {
    ev.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      cudaEvent_t e = nullptr;
      if (cudaEventCreate(&e) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
      }
      ev.push_back(e);
    }
    return true;
  }
};

// Times the heuristic's candidates, and `alt` where given, on the call's
// stream in turns (lt_matmul.h) and keeps the choice in the plan. Any
// failure while timing leaves the untimed choice (a failure of the stream
// itself is reported by the stream, not here; one of `alt` is recorded on
// the call and returns false).
bool tune(OpCall& c, const LtApi* api, LtHandle h, const LtProduct& p, Plan* pl, const void* a,
          const void* b, const void* bias_ptr, void* d, const LtAlternative* alt) {
  LtHeuristicResult cand[kLtCandidates];
  const int n = heuristics(api, h, pl, epilogue_of(p, pl->fused), kLtCandidates, cand);
  const int alt_i = alt != nullptr ? n : -1;  // the alternative's index
  const int total = n + (alt != nullptr ? 1 : 0);
  if (total < 2) return true;
  size_t ws_bytes = 0;
  for (int i = 0; i < n; ++i) {
    if (cand[i].workspace_size > ws_bytes) ws_bytes = cand[i].workspace_size;
  }
  TensorPtr ws;
  void* workspace = nullptr;
  if (ws_bytes > 0) {
    ws = c.temp(TF_INT8, static_cast<int64_t>(ws_bytes));
    if (!ws) return false;  // recorded on the call
    workspace = TF_TensorData(ws.get());
  }
  if (pl->fused &&
      api->desc_set(pl->desc, kLtDescBiasPointer, &bias_ptr, sizeof(bias_ptr)) != kBlasSuccess) {
    return true;
  }
  cudaStream_t stream = c.stream();
  // Candidate i, or the alternative; false where it cannot run the product.
  bool alt_ok = true;
  auto run_one = [&](int i) {
    if (i == alt_i) {
      alt_ok = alt->run(alt->ctx);
      return alt_ok;
    }
    return run(api, h, pl, cand[i].algo, a, b, d, workspace, ws_bytes, stream) == kBlasSuccess;
  };
  bool usable[kLtCandidates + 1];
  for (int i = 0; i < total; ++i) {
    usable[i] = run_one(i);  // untimed
    if (!alt_ok) return false;
  }
  // Each timed run starts with a cold L2 cache (a buffer twice its size is
  // written before it, outside the timed span): a model reads a layer's
  // weights once per step, and a product timed over and over with its
  // operands held in L2 ranks the algorithms by a speed the model never sees.
  TensorPtr flush;
  const int64_t flush_bytes = 2 * c.l2_bytes();
  if (flush_bytes > 0) {
    TF_Status* st = TF_NewStatus();
    int64_t dims[1] = {flush_bytes};
    TF_Tensor* t = TF_AllocateTemp(c.ctx(), TF_INT8, dims, 1, nullptr, st);
    if (TF_GetCode(st) == TF_OK && t != nullptr) {
      flush.reset(t);
    } else if (t != nullptr) {
      TF_DeleteTensor(t);  // no room: time with a warm cache
    }
    TF_DeleteStatus(st);
  }
  EventSet events;
  if (!events.make(static_cast<size_t>(2 * total * kLtRounds))) return true;
  auto start = [&](int i, int r) { return events.ev[static_cast<size_t>(2 * (r * total + i))]; };
  auto end = [&](int i, int r) { return events.ev[static_cast<size_t>(2 * (r * total + i) + 1)]; };
  for (int r = 0; r < kLtRounds; ++r) {
    for (int i = 0; i < total; ++i) {
      if (!usable[i]) continue;
      bool ok = flush == nullptr ||
                cudaMemsetAsync(TF_TensorData(flush.get()), (r * total + i) & 0xff,
                                static_cast<size_t>(flush_bytes), stream) == cudaSuccess;
      ok = ok && cudaEventRecord(start(i, r), stream) == cudaSuccess && run_one(i) &&
           cudaEventRecord(end(i, r), stream) == cudaSuccess;
      if (!alt_ok) return false;
      if (!ok) {
        (void)cudaGetLastError();
        return true;  // the stream failed: its status check reports it
      }
    }
  }
  float best_ms[kLtCandidates + 1];
  for (int i = 0; i < total; ++i) {
    best_ms[i] = -1.0f;
    for (int r = 0; usable[i] && r < kLtRounds; ++r) {
      float ms = 0.0f;
      if (cudaEventSynchronize(end(i, r)) != cudaSuccess ||
          cudaEventElapsedTime(&ms, start(i, r), end(i, r)) != cudaSuccess) {
        (void)cudaGetLastError();
        return true;
      }
      if (best_ms[i] < 0.0f || ms < best_ms[i]) best_ms[i] = ms;
    }
  }
  int best = -1;  // the fastest cuBLASLt candidate
  for (int i = 0; i < n; ++i) {
    if (usable[i] && (best < 0 || best_ms[i] < best_ms[best])) best = i;
  }
  if (alt != nullptr && usable[alt_i] &&
      (best < 0 || best_ms[best] >= best_ms[alt_i] * (1.0 - kLtMargin))) {
    pl->use_alt = true;
  } else if (best >= 0) {
    pl->use_alt = false;
    pl->algo = cand[best].algo;
    pl->workspace = cand[best].workspace_size;
  }
  return true;
}

}  // namespace

bool lt_autotune_enabled() {
  static const bool on = not_turned_off("PLUGGABLE_CUDA_AUTOTUNE");
  return on;
}

bool lt_worth_timing(const LtProduct& p) {
  return lt_autotune_enabled() &&
         static_cast<double>(p.M) * static_cast<double>(p.N) * static_cast<double>(p.K) >=
             static_cast<double>(kLtTuneMacs);
}

bool lt_matmul(OpCall& c, const char* op, const LtProduct& p, const void* a, const void* b,
               const void* bias_ptr, void* d, bool* epilogue_done, const LtAlternative* alt) {
  *epilogue_done = false;
  if (alt != nullptr && p.bias) {
    return c.fail(TF_INTERNAL, "%s: a product with a bias epilogue has no alternative", op);
  }
  if (p.M < 1 || p.N < 1 || p.K < 1 || p.M > INT_MAX || p.N > INT_MAX || p.K > INT_MAX) {
    if (alt != nullptr) return alt->run(alt->ctx);
    return c.fail(TF_UNIMPLEMENTED, "%s: cuBLASLt takes dimensions in [1, %d]", op, INT_MAX);
  }
  const LtApi* api = load_blaslt(c.status());
  LtHandle h = api != nullptr ? shared_blaslt_handle(api, c.status()) : nullptr;
  if (h == nullptr) {
    if (alt == nullptr) return c.check_status();
    TF_SetStatus(c.status(), TF_OK, "");  // no cuBLASLt here: the alternative runs it
    return alt->run(alt->ctx);
  }
  const Key key{c.ordinal(), static_cast<int>(p.dt), p.ta, p.tb, p.tf32 && p.dt == TF_FLOAT,
                p.bias, p.bias && p.relu, alt != nullptr, p.M, p.N, p.K};
  Plan* pl = nullptr;
  std::unique_ptr<Plan> own;  // a plan past the cache's size, for this call
  {
    std::lock_guard<std::mutex> lock(g_plans_mu);
    auto it = g_plans->find(key);
    if (it != g_plans->end()) {
      pl = it->second.get();
    } else {
      std::unique_ptr<Plan> fresh(new (std::nothrow) Plan());
      if (fresh == nullptr) return c.fail(TF_RESOURCE_EXHAUSTED, "%s: out of host memory", op);
      // Where cuBLASLt cannot run it, the alternative does, for the process.
      if (!make_plan(c, op, api, h, p, fresh.get(), alt == nullptr) && alt == nullptr) {
        return false;
      }
      fresh->use_alt = alt != nullptr;  // until timing says otherwise
      if (g_plans->size() < kMaxPlans) {
        pl = fresh.get();
        (*g_plans)[key] = std::move(fresh);
      } else {
        fresh->decided = true;
        own = std::move(fresh);
        pl = own.get();
      }
    }
  }
  bool ok = true;
  {
    std::lock_guard<std::mutex> lock(pl->mu);
    if (!pl->decided) {
      if (pl->desc != nullptr && may_time(c, p)) ok = tune(c, api, h, p, pl, a, b, bias_ptr, d, alt);
      pl->decided = true;
    }
    if (ok && pl->use_alt) {
      ok = alt->run(alt->ctx);
    } else if (ok) {
      TensorPtr ws;
      void* workspace = nullptr;
      if (pl->workspace > 0) {
        ws = c.temp(TF_INT8, static_cast<int64_t>(pl->workspace));
        ok = static_cast<bool>(ws);
        if (ok) workspace = TF_TensorData(ws.get());
      }
      if (ok && pl->fused &&
          api->desc_set(pl->desc, kLtDescBiasPointer, &bias_ptr, sizeof(bias_ptr)) !=
              kBlasSuccess) {
        ok = c.fail(TF_INTERNAL, "%s: setting the cuBLASLt bias pointer failed", op);
      }
      if (ok) {
        const BlasStatus r =
            run(api, h, pl, pl->algo, a, b, d, workspace, pl->workspace, c.stream());
        if (r != kBlasSuccess) {
          const char* text = api->status_string != nullptr ? api->status_string(r) : nullptr;
          ok = c.fail(TF_INTERNAL, "%s: cublasLtMatmul(M=%lld, N=%lld, K=%lld) failed: %s", op,
                      static_cast<long long>(p.M), static_cast<long long>(p.N),
                      static_cast<long long>(p.K),
                      text != nullptr ? text : "unknown cuBLAS status");
        }
      }
      *epilogue_done = ok && pl->fused;
    }
  }
  if (own != nullptr) own->release(api);
  return ok;
}

}  // namespace pgcuda
