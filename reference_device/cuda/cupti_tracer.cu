// CUPTI activity tracing for the CUDA reference plugin (see cupti_tracer.h).
#include <cuda_runtime.h>
#include <cxxabi.h>
#include <time.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "cupti_api.h"
#include "cupti_tracer.h"
#include "dl_library.h"

namespace pgcuda {
namespace {

constexpr size_t kBufferBytes = 8 << 20;
constexpr size_t kMaxActivities = 1 << 20;
// RUNTIME and DRIVER are enabled only because CUPTI writes an
// EXTERNAL_CORRELATION record (which ties a launch to the op that pushed its
// id) just before an API record; the API records themselves are skipped.
constexpr int32_t kKinds[] = {cupti::kConcurrentKernel, cupti::kMemcpy, cupti::kMemset,
                              cupti::kRuntime, cupti::kDriver,
                              cupti::kExternalCorrelation};
constexpr const char* kKindNames[] = {"CONCURRENT_KERNEL", "MEMCPY", "MEMSET", "RUNTIME",
                                      "DRIVER", "EXTERNAL_CORRELATION"};

struct Tracer {
  std::once_flag load_once;
  cupti::Api api = {};
  bool loaded = false;
  std::string library;     // what was loaded
  std::string load_error;  // why nothing was
  bool callbacks_registered = false;
  bool running = false;
  int64_t offset_ns = 0;   // Unix-epoch ns minus CUPTI timestamp
  std::mutex mu;           // guards `harvest` (CUPTI calls back on its own thread)
  CuptiHarvest harvest;
};

Tracer& tracer() {
  static Tracer* t = new Tracer();  // never destroyed: CUPTI may call back at exit
  return *t;
}

int64_t realtime_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

std::string result_text(cupti::Result r) {
  const char* text = nullptr;
  Tracer& t = tracer();
  if (t.api.result_string != nullptr && t.api.result_string(r, &text) == cupti::kSuccess &&
      text != nullptr)
    return text;
  return "CUPTI error " + std::to_string(r);
}

bool resolve_all(void* lib, cupti::Api* api, std::string* missing) {
  bool ok = dl_resolve(lib, "cuptiActivityEnable", &api->activity_enable, missing);
  ok = dl_resolve(lib, "cuptiActivityDisable", &api->activity_disable, missing) && ok;
  ok = dl_resolve(lib, "cuptiActivityRegisterCallbacks", &api->register_callbacks, missing) && ok;
  ok = dl_resolve(lib, "cuptiActivityGetNextRecord", &api->get_next_record, missing) && ok;
  ok = dl_resolve(lib, "cuptiActivityFlushAll", &api->flush_all, missing) && ok;
  ok = dl_resolve(lib, "cuptiGetTimestamp", &api->get_timestamp, missing) && ok;
  ok = dl_resolve(lib, "cuptiActivityPushExternalCorrelationId", &api->push_external,
                  missing) && ok;
  ok = dl_resolve(lib, "cuptiActivityPopExternalCorrelationId", &api->pop_external, missing) && ok;
  ok = dl_resolve(lib, "cuptiGetResultString", &api->result_string, missing) && ok;
  return ok;
}

void load() {
  Tracer& t = tracer();
  // The major version of the runtime the plugin was built with goes first.
  const bool v13 = CUDART_VERSION >= 13000;
  std::string tried, last_error;
  void* lib = dl_open_first(
      {getenv("PLUGGABLE_CUPTI_LIBRARY"), v13 ? "libcupti.so.13" : "libcupti.so.12",
       v13 ? "libcupti.so.12" : "libcupti.so.13", "libcupti.so",
       "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so", "/usr/local/cuda/lib64/libcupti.so"},
      [&](void* lib, std::string* missing) {
        cupti::Api api = {};
        if (!resolve_all(lib, &api, missing)) return false;
        t.api = api;
        return true;
      },
      &tried, &last_error, &t.library);
  if (lib != nullptr) {
    t.loaded = true;
    return;
  }
  t.load_error = "CUPTI not found (tried " + tried + ")";
  if (!last_error.empty()) t.load_error += " [" + last_error + "]";
}

void buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(aligned_alloc(8, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

std::string demangle(const char* name) {
  if (name == nullptr) return "kernel";
  int status = 0;
  char* text = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string out = status == 0 && text != nullptr ? text : name;
  free(text);
  return out;
}

const char* copy_kind_text(uint8_t kind) {
  switch (kind) {
    case cupti::kHtoD: return "HtoD";
    case cupti::kDtoH: return "DtoH";
    case cupti::kDtoD: return "DtoD";
    case cupti::kHtoH: return "HtoH";
    case cupti::kPtoP: return "PtoP";
    default: return "other";
  }
}

const char* copy_event_name(uint8_t kind) {
  switch (kind) {
    case cupti::kHtoD: return "MemcpyH2D";
    case cupti::kDtoH: return "MemcpyD2H";
    case cupti::kDtoD: return "MemcpyD2D";
    case cupti::kHtoH: return "MemcpyH2H";
    case cupti::kPtoP: return "MemcpyP2P";
    default: return "Memcpy";
  }
}

// One record to our own form; false for kinds not kept.
bool convert(const cupti::Activity* rec, int64_t offset, DeviceActivity* out) {
  switch (rec->kind) {
    case cupti::kConcurrentKernel: {
      const auto* k = reinterpret_cast<const cupti::KernelPrefix*>(rec);
      out->type = DeviceActivity::kKernel;
      out->name = demangle(k->name);
      out->device = k->device_id;
      out->stream = k->stream_id;
      out->correlation = k->correlation_id;
      out->start_ns = static_cast<int64_t>(k->start) + offset;
      out->end_ns = static_cast<int64_t>(k->end) + offset;
      out->grid[0] = k->grid_x, out->grid[1] = k->grid_y, out->grid[2] = k->grid_z;
      out->block[0] = k->block_x, out->block[1] = k->block_y, out->block[2] = k->block_z;
      out->registers_per_thread = k->registers_per_thread;
      out->shared_memory = k->static_shared_memory + k->dynamic_shared_memory;
      return true;
    }
    case cupti::kMemcpy: {
      const auto* m = reinterpret_cast<const cupti::MemcpyPrefix*>(rec);
      out->type = DeviceActivity::kMemcpy;
      out->name = copy_event_name(m->copy_kind);
      out->copy_kind = copy_kind_text(m->copy_kind);
      out->device = m->device_id;
      out->stream = m->stream_id;
      out->correlation = m->correlation_id;
      out->start_ns = static_cast<int64_t>(m->start) + offset;
      out->end_ns = static_cast<int64_t>(m->end) + offset;
      out->bytes = static_cast<int64_t>(m->bytes);
      return true;
    }
    case cupti::kMemset: {
      const auto* m = reinterpret_cast<const cupti::MemsetPrefix*>(rec);
      out->type = DeviceActivity::kMemset;
      out->name = "Memset";
      out->device = m->device_id;
      out->stream = m->stream_id;
      out->correlation = m->correlation_id;
      out->start_ns = static_cast<int64_t>(m->start) + offset;
      out->end_ns = static_cast<int64_t>(m->end) + offset;
      out->bytes = static_cast<int64_t>(m->bytes);
      return true;
    }
    default:
      return false;
  }
}

void buffer_completed(void*, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  Tracer& t = tracer();
  if (buffer == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(t.mu);
    cupti::Activity* rec = nullptr;
    while (valid > 0 && t.api.get_next_record(buffer, valid, &rec) == cupti::kSuccess) {
      if (rec->kind == cupti::kExternalCorrelation) {
        const auto* e = reinterpret_cast<const cupti::ExternalCorrelation*>(rec);
        if (e->external_kind == cupti::kExternalKindCustom0)
          t.harvest.external[e->correlation_id] = e->external_id;
        continue;
      }
      if (t.harvest.activity.size() >= kMaxActivities) {
        ++t.harvest.dropped;
        continue;
      }
      DeviceActivity a;
      if (convert(rec, t.offset_ns, &a)) t.harvest.activity.push_back(std::move(a));
    }
  }
  free(buffer);
}

// Unix-epoch ns minus CUPTI's timestamp, from the tightest of a few reads.
int64_t measure_offset(const cupti::Api& api) {
  int64_t best_window = -1, offset = 0;
  for (int i = 0; i < 5; ++i) {
    uint64_t ts = 0;
    int64_t a = realtime_ns();
    if (api.get_timestamp(&ts) != cupti::kSuccess) continue;
    int64_t b = realtime_ns();
    if (best_window < 0 || b - a < best_window) {
      best_window = b - a;
      offset = a + (b - a) / 2 - static_cast<int64_t>(ts);
    }
  }
  return offset;
}

void disable_all(const cupti::Api& api) {
  for (int32_t kind : kKinds) (void)api.activity_disable(kind);
}

}  // namespace

bool cupti_start(std::string* why) {
  Tracer& t = tracer();
  std::call_once(t.load_once, load);
  if (!t.loaded) {
    *why = t.load_error;
    return false;
  }
  {
    std::lock_guard<std::mutex> lock(t.mu);
    t.harvest = CuptiHarvest();
  }
  if (!t.callbacks_registered) {
    cupti::Result r = t.api.register_callbacks(buffer_requested,
                                               buffer_completed);
    if (r != cupti::kSuccess) {
      *why = "cuptiActivityRegisterCallbacks failed: " + result_text(r);
      return false;
    }
    t.callbacks_registered = true;
  }
  for (size_t i = 0; i < sizeof kKinds / sizeof kKinds[0]; ++i) {
    cupti::Result r = t.api.activity_enable(kKinds[i]);
    if (r != cupti::kSuccess) {
      disable_all(t.api);
      *why = t.library + ": cuptiActivityEnable(CUPTI_ACTIVITY_KIND_" + kKindNames[i] +
             ") failed: " + result_text(r);
      return false;
    }
  }
  t.offset_ns = measure_offset(t.api);
  t.running = true;
  return true;
}

void cupti_stop() {
  Tracer& t = tracer();
  if (!t.running) return;
  t.running = false;
  (void)t.api.flush_all(cupti::kFlushForced);
  disable_all(t.api);
  (void)t.api.flush_all(cupti::kFlushForced);
}

CuptiHarvest cupti_take() {
  Tracer& t = tracer();
  std::lock_guard<std::mutex> lock(t.mu);
  CuptiHarvest out = std::move(t.harvest);
  t.harvest = CuptiHarvest();
  return out;
}

void cupti_push_id(uint64_t id) {
  (void)tracer().api.push_external(cupti::kExternalKindCustom0, id);
}

void cupti_pop_id() {
  uint64_t last = 0;
  (void)tracer().api.pop_external(cupti::kExternalKindCustom0, &last);
}

const std::string& cupti_library() { return tracer().library; }

}  // namespace pgcuda
