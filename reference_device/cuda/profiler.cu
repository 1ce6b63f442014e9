// TF_InitProfiler of the CUDA reference plugin (see profiler.h).
//
// The XSpace handed over holds, like the host reference plugin's:
//   - a plane "/device:GPU:<ordinal>" per device with a line per stream
//     ("Stream #<n>", numbered in order of first use) and an event per
//     kernel call (named after its op) or copy ("MemcpyH2D", "MemcpyD2H",
//     "MemcpyD2D", with stat "bytes_transferred"), each with a stat
//     "correlation_id";
//   - a plane "/host:GPU" with a line per enqueuing host thread (line id =
//     OS thread id) and an instant event per piece of work at its enqueue
//     time, with the same "correlation_id".
//
// Device work is timed by CUPTI's activity API when libcupti can be loaded
// and started (cupti_tracer.h), else by CUDA events (profiler.h); setting
// PLUGGABLE_CUDA_PROFILER=events chooses events. The choice is logged once
// per change on stderr and written as the stat "profiler_source" ("cupti" or
// "cuda_events", with "profiler_note" saying why events were used) of every
// plane. With CUPTI, each device plane has a line per CUPTI stream ("Stream
// #<CUPTI stream id>") and an event per kernel (named after the demangled
// kernel, with stats "op", "grid", "block", "registers_per_thread",
// "shared_memory"), copy ("MemcpyH2D" ..., with "bytes_transferred" and
// "copy_kind") and memset; work launched inside an op call or copy carries
// that call's "correlation_id" (CUPTI external correlation), other work
// (launched by no recorded call) has none.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "cuda_common.h"
#include "cupti_tracer.h"
#include "pluggable_profiler.h"
#include "launch_queue.h"
#include "profiler.h"
#include "xplane_writer.h"

namespace pgcuda {

std::atomic<bool> g_profiling{false};

namespace {

constexpr int64_t kHostPlaneId = 2000;
constexpr size_t kMaxRecords = 1 << 20;
// Set in a handle from prof_begin when it pushed a CUPTI external id.
constexpr int64_t kPushedBit = int64_t{1} << 62;
constexpr uint32_t kGenerationMask = 0x3fffffff;

// Whether the running (or last) session uses CUPTI; read by prof_begin/end.
std::atomic<bool> g_cupti{false};

struct Record {
  std::string name;
  int ordinal = 0;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, end = nullptr;
  int64_t bytes = 0;
  int64_t tid = 0;
  int64_t enqueue_ns = 0;  // CLOCK_REALTIME
  bool ended = false;
};

struct Base {
  cudaEvent_t event = nullptr;
  int64_t unix_ns = 0;  // host time at which `event` had completed
};

struct State {
  std::mutex mu;  // guards everything below
  std::vector<Record> records;
  std::map<int, Base> bases;  // by device ordinal
  int64_t dropped = 0;
  int64_t start_ns = 0;
  uint32_t generation = 0;  // of the session; part of every handle
  bool cupti = false;       // the session's device work comes from CUPTI
  std::string source_note;  // why CUDA events are used, "" with CUPTI
  CuptiHarvest harvest;     // CUPTI's records, taken at stop
  xw_buf serialized = {};
  bool have_serialized = false;
};

State& state() {
  static State* s = new State();  // never destroyed: may be used at exit
  return *s;
}

int64_t realtime_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

int64_t thread_id() { return static_cast<int64_t>(syscall(SYS_gettid)); }

// A completed base event on device `ordinal` and the host time of its
// completion; false if the device cannot be used.
bool make_base(int ordinal, Base* out) {
  int prev = 0;
  if (cudaGetDevice(&prev) != cudaSuccess) return false;
  bool ok = cudaSetDevice(ordinal) == cudaSuccess &&
            cudaEventCreate(&out->event) == cudaSuccess &&
            cudaEventRecord(out->event, nullptr) == cudaSuccess &&
            cudaEventSynchronize(out->event) == cudaSuccess;
  out->unix_ns = realtime_ns();
  if (!ok && out->event != nullptr) {
    cudaEventDestroy(out->event);
    out->event = nullptr;
  }
  (void)cudaGetLastError();
  cudaSetDevice(prev);
  return ok;
}

void release_records(State& st) {
  for (Record& r : st.records) {
    if (r.start != nullptr) cudaEventDestroy(r.start);
    if (r.end != nullptr) cudaEventDestroy(r.end);
  }
  st.records.clear();
  for (auto& kv : st.bases)
    if (kv.second.event != nullptr) cudaEventDestroy(kv.second.event);
  st.bases.clear();
  st.dropped = 0;
}

// Chooses how this session times device work (see the top of the file);
// `st.cupti` and `st.source_note` say which, and why.
void choose_source(State& st) {
  const char* want = getenv("PLUGGABLE_CUDA_PROFILER");
  std::string why;
  if (want != nullptr && strcmp(want, "events") == 0)
    why = "PLUGGABLE_CUDA_PROFILER=events";
  else
    st.cupti = cupti_start(&why);
  st.source_note = st.cupti ? "" : why;
  std::string message = st.cupti ? "CUPTI activity (" + cupti_library() + ")"
                                 : "CUDA events (" + why + ")";
  static std::string logged;
  if (message != logged) {
    logged = message;
    fprintf(stderr, "pluggable CUDA plugin: profiler times kernels and copies with %s\n",
            message.c_str());
  }
}

void prof_start(const TP_Profiler*, TF_Status*) {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  release_records(st);
  xw_buf_free(&st.serialized);
  st.have_serialized = false;
  st.harvest = CuptiHarvest();
  st.cupti = false;
  ++st.generation;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    (void)cudaGetLastError();
    return;  // no device (the plugin reported none either): nothing to record
  }
  choose_source(st);
  if (!st.cupti) {
    for (int i = 0; i < n; ++i) {
      Base b;
      if (make_base(i, &b)) st.bases[i] = b;
    }
  }
  g_cupti.store(st.cupti, std::memory_order_relaxed);
  st.start_ns = realtime_ns();
  g_profiling.store(true, std::memory_order_release);
}

// Waits for every device, so that CUPTI has seen all the work to flush.
void synchronize_devices() {
  int prev = 0, n = 0;
  if (cudaGetDevice(&prev) != cudaSuccess || cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
  for (int i = 0; i < n; ++i) {
    flush_ordinal(i);
    if (cudaSetDevice(i) == cudaSuccess) (void)cudaDeviceSynchronize();
  }
  (void)cudaGetLastError();
  if (n > 0) cudaSetDevice(prev);
}

void prof_stop(const TP_Profiler*, TF_Status*) {
  g_profiling.store(false, std::memory_order_release);
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  if (!st.cupti) return;
  synchronize_devices();
  cupti_stop();
  st.harvest = cupti_take();
}

// Nanoseconds since the Unix epoch at which `ev` completed, from the base of
// its device; false if CUDA cannot say.
bool event_time(const Base& base, cudaEvent_t ev, int64_t* out) {
  if (cudaEventSynchronize(ev) != cudaSuccess) return false;
  float ms = 0;
  if (cudaEventElapsedTime(&ms, base.event, ev) != cudaSuccess) return false;
  *out = base.unix_ns + static_cast<int64_t>(static_cast<double>(ms) * 1e6);
  return true;
}

struct Planes {
  std::map<int, xw_plane*> devices;
  std::map<std::pair<int, cudaStream_t>, int> stream_ids;
  xw_plane* host = nullptr;
};

// The stats every plane carries: how its device times were taken.
void add_source_stats(xw_plane* plane, const State& st) {
  xw_stat source = xw_str_stat(xw_stat_id(plane, "profiler_source"),
                               st.cupti ? "cupti" : "cuda_events");
  xw_plane_stat(plane, &source);
  if (st.cupti) {
    xw_stat lib = xw_str_stat(xw_stat_id(plane, "cupti_library"), cupti_library().c_str());
    xw_plane_stat(plane, &lib);
  } else if (!st.source_note.empty()) {
    xw_stat note = xw_str_stat(xw_stat_id(plane, "profiler_note"), st.source_note.c_str());
    xw_plane_stat(plane, &note);
  }
}

xw_plane* device_plane(Planes& p, const State& st, int ordinal) {
  xw_plane*& dev = p.devices[ordinal];
  if (dev == nullptr) {
    char name[64];
    snprintf(name, sizeof name, "/device:GPU:%d", ordinal);
    dev = xw_plane_new(ordinal + 1, name);
    if (dev != nullptr) add_source_stats(dev, st);
  }
  return dev;
}

// The host-side instant of record `r` (its enqueue), on its thread's line.
void add_launch(Planes& p, const State& st, const Record& r, int64_t corr) {
  char thread_name[32];
  snprintf(thread_name, sizeof thread_name, "Thread %" PRId64, r.tid);
  xw_line* hl = xw_plane_line(p.host, r.tid, thread_name, st.start_ns);
  xw_stat hc = xw_int_stat(xw_stat_id(p.host, "correlation_id"), corr);
  if (hl != nullptr)
    xw_line_event(hl, xw_event_id(p.host, r.name.c_str()), (r.enqueue_ns - st.start_ns) * 1000,
                  0, &hc, 1);
}

// Record `r` timed with CUDA events: a device event and its launch.
void add_record(Planes& p, const State& st, const Record& r, int64_t* unmeasured) {
  auto base = st.bases.find(r.ordinal);
  int64_t t0 = 0, t1 = 0;
  if (!r.ended || base == st.bases.end() || !event_time(base->second, r.start, &t0) ||
      !event_time(base->second, r.end, &t1)) {
    (void)cudaGetLastError();
    ++*unmeasured;
    return;
  }
  xw_plane* dev = device_plane(p, st, r.ordinal);
  if (dev == nullptr) return;
  auto key = std::make_pair(r.ordinal, r.stream);
  auto found = p.stream_ids.find(key);
  int sid = found != p.stream_ids.end() ? found->second
                                        : (p.stream_ids[key] = static_cast<int>(p.stream_ids.size()) + 1);
  char line_name[32];
  snprintf(line_name, sizeof line_name, "Stream #%d", sid);
  int64_t corr = &r - st.records.data() + 1;
  xw_line* line = xw_plane_line(dev, sid, line_name, st.start_ns);
  xw_stat stats[2] = {xw_int_stat(xw_stat_id(dev, "correlation_id"), corr)};
  int n = 1;
  if (r.bytes > 0) stats[n++] = xw_int_stat(xw_stat_id(dev, "bytes_transferred"), r.bytes);
  if (line != nullptr) {
    if (t1 < t0) t1 = t0;
    xw_line_event(line, xw_event_id(dev, r.name.c_str()), (t0 - st.start_ns) * 1000,
                  (t1 - t0) * 1000, stats, n);
  }
  add_launch(p, st, r, corr);
}

std::string dims_text(const int32_t d[3]) {
  return std::to_string(d[0]) + "," + std::to_string(d[1]) + "," + std::to_string(d[2]);
}

// One piece of work CUPTI reported; `corr` is the correlation id of the
// recorded call that launched it, 0 if none.
void add_activity(Planes& p, const State& st, const DeviceActivity& a, int64_t corr) {
  xw_plane* dev = device_plane(p, st, static_cast<int>(a.device));
  if (dev == nullptr) return;
  char line_name[32];
  snprintf(line_name, sizeof line_name, "Stream #%u", a.stream);
  xw_line* line = xw_plane_line(dev, a.stream, line_name, st.start_ns);
  if (line == nullptr) return;
  std::string grid = dims_text(a.grid), block = dims_text(a.block);
  xw_stat stats[6];
  int n = 0;
  if (corr > 0) {
    stats[n++] = xw_int_stat(xw_stat_id(dev, "correlation_id"), corr);
    stats[n++] = xw_str_stat(xw_stat_id(dev, "op"), st.records[corr - 1].name.c_str());
  }
  if (a.type == DeviceActivity::kKernel) {
    stats[n++] = xw_str_stat(xw_stat_id(dev, "grid"), grid.c_str());
    stats[n++] = xw_str_stat(xw_stat_id(dev, "block"), block.c_str());
    stats[n++] = xw_int_stat(xw_stat_id(dev, "registers_per_thread"), a.registers_per_thread);
    stats[n++] = xw_int_stat(xw_stat_id(dev, "shared_memory"), a.shared_memory);
  } else {
    stats[n++] = xw_int_stat(xw_stat_id(dev, "bytes_transferred"), a.bytes);
    if (a.type == DeviceActivity::kMemcpy)
      stats[n++] = xw_str_stat(xw_stat_id(dev, "copy_kind"), a.copy_kind);
  }
  int64_t end = a.end_ns < a.start_ns ? a.start_ns : a.end_ns;
  xw_line_event(line, xw_event_id(dev, a.name.c_str()), (a.start_ns - st.start_ns) * 1000,
                (end - a.start_ns) * 1000, stats, n);
}

// The recorded call (1-based index) whose external id CUPTI tied to
// `correlation`, 0 if none of this session.
int64_t launching_record(const State& st, uint32_t correlation) {
  auto found = st.harvest.external.find(correlation);
  if (found == st.harvest.external.end()) return 0;
  uint64_t id = found->second;
  if ((id >> 32) != (st.generation & kGenerationMask)) return 0;
  int64_t index = static_cast<int64_t>(id & 0xffffffff);
  return index >= 1 && index <= static_cast<int64_t>(st.records.size()) ? index : 0;
}

void add_cupti(Planes& p, const State& st) {
  for (size_t i = 0; i < st.records.size(); ++i)
    add_launch(p, st, st.records[i], static_cast<int64_t>(i) + 1);
  for (const DeviceActivity& a : st.harvest.activity)
    add_activity(p, st, a, launching_record(st, a.correlation));
}

void add_events(Planes& p, const State& st, int64_t* unmeasured) {
  int prev = 0;
  cudaGetDevice(&prev);
  for (const Record& r : st.records) {
    cudaSetDevice(r.ordinal);
    add_record(p, st, r, unmeasured);
  }
  cudaSetDevice(prev);
}

void serialize(State& st, TF_Status* status) {
  st.have_serialized = true;
  if (st.records.empty() && st.dropped == 0 && st.harvest.activity.empty()) return;
  Planes p;
  p.host = xw_plane_new(kHostPlaneId, "/host:GPU");
  int64_t unmeasured = 0;
  if (p.host != nullptr) {
    add_source_stats(p.host, st);
    if (st.cupti)
      add_cupti(p, st);
    else
      add_events(p, st, &unmeasured);
  }
  std::vector<xw_plane*> all;
  for (auto& kv : p.devices)
    if (kv.second != nullptr) all.push_back(kv.second);
  if (p.host != nullptr) all.push_back(p.host);
  std::vector<std::string> texts;
  if (st.dropped > 0)
    texts.push_back(std::to_string(st.dropped) + " GPU tasks were not recorded: the profiler "
                    "keeps at most " + std::to_string(kMaxRecords));
  if (st.harvest.dropped > 0)
    texts.push_back(std::to_string(st.harvest.dropped) + " CUPTI activity records were not "
                    "kept (too many in one profile)");
  if (unmeasured > 0)
    texts.push_back(std::to_string(unmeasured) + " GPU tasks could not be timed (CUDA "
                    "events failed)");
  std::vector<const char*> warnings;
  for (const std::string& t : texts) warnings.push_back(t.c_str());
  int rc = xw_space(&st.serialized, all.data(), static_cast<int>(all.size()), warnings.data(),
                    static_cast<int>(warnings.size()));
  for (xw_plane* plane : all) xw_plane_free(plane);
  release_records(st);
  st.harvest = CuptiHarvest();
  if (rc != 0 || p.host == nullptr) {
    xw_buf_free(&st.serialized);
    TF_SetStatus(status, TF_RESOURCE_EXHAUSTED, "out of memory serialising the GPU profile");
  }
}

void prof_collect(const TP_Profiler*, uint8_t* buffer, size_t* size, TF_Status* status) {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  if (!st.have_serialized) serialize(st, status);
  if (TF_GetCode(status) != TF_OK) {
    st.have_serialized = false;
    *size = 0;
    return;
  }
  size_t len = st.serialized.len;
  if (buffer == nullptr) {
    *size = len;
    if (len == 0) st.have_serialized = false;
    return;
  }
  if (*size < len) {
    TF_SetStatus(status, TF_INVALID_ARGUMENT, "collect_data_xspace: the buffer is too small");
    return;
  }
  memcpy(buffer, st.serialized.data, len);
  *size = len;
  xw_buf_free(&st.serialized);
  st.have_serialized = false;
}

void destroy_profiler(TP_Profiler*) {}
void destroy_profiler_fns(TP_ProfilerFns*) {}

}  // namespace

int64_t prof_begin(const char* name, size_t len, CudaStream* s, int64_t bytes) {
  if (!profiling() || s == nullptr) return -1;
  const bool cupti = g_cupti.load(std::memory_order_relaxed);
  Record r;
  r.name.assign(name, len);
  r.ordinal = s->ordinal;
  r.stream = s->stream;
  r.bytes = bytes;
  r.tid = thread_id();
  r.enqueue_ns = realtime_ns();
  if (!cupti && (cudaEventCreate(&r.start) != cudaSuccess ||
                 cudaEventRecord(r.start, s->stream) != cudaSuccess)) {
    (void)cudaGetLastError();
    if (r.start != nullptr) cudaEventDestroy(r.start);
    return -1;
  }
  State& st = state();
  int64_t handle = 0;
  {
    std::lock_guard<std::mutex> lock(st.mu);
    if (!profiling() || st.cupti != cupti || st.records.size() >= kMaxRecords) {
      if (profiling()) ++st.dropped;
      if (r.start != nullptr) cudaEventDestroy(r.start);
      return -1;
    }
    st.records.push_back(std::move(r));
    handle = (static_cast<int64_t>(st.generation & kGenerationMask) << 32) |
             static_cast<int64_t>(st.records.size() - 1);
  }
  if (cupti) {
    // The id CUPTI ties to what this thread launches until prof_end.
    cupti_push_id(static_cast<uint64_t>((handle & ~int64_t{0xffffffff}) | ((handle & 0xffffffff) + 1)));
    handle |= kPushedBit;
  }
  return handle;
}

void prof_end(int64_t handle, CudaStream* s) {
  if (handle < 0 || s == nullptr) return;
  if (handle & kPushedBit) {
    cupti_pop_id();  // CUPTI timed the work; nothing else to record
    return;
  }
  cudaEvent_t end = nullptr;
  if (cudaEventCreate(&end) != cudaSuccess || cudaEventRecord(end, s->stream) != cudaSuccess) {
    (void)cudaGetLastError();
    if (end != nullptr) cudaEventDestroy(end);
    return;
  }
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  size_t index = static_cast<size_t>(handle & 0xffffffff);
  if ((handle >> 32) != static_cast<int64_t>(st.generation & kGenerationMask) ||
      index >= st.records.size()) {
    cudaEventDestroy(end);  // the session it belonged to is gone
    return;
  }
  st.records[index].end = end;
  st.records[index].ended = true;
}

}  // namespace pgcuda

extern "C" void TF_InitProfiler(TF_ProfilerRegistrationParams* params, TF_Status*) {
  params->struct_size = TF_PROFILER_REGISTRATION_PARAMS_STRUCT_SIZE;
  params->profiler->struct_size = TP_PROFILER_STRUCT_SIZE;
  params->profiler->type = "GPU";
  TP_ProfilerFns* fns = params->profiler_fns;
  fns->struct_size = TP_PROFILER_FNS_STRUCT_SIZE;
  fns->start = pgcuda::prof_start;
  fns->stop = pgcuda::prof_stop;
  fns->collect_data_xspace = pgcuda::prof_collect;
  params->destroy_profiler = pgcuda::destroy_profiler;
  params->destroy_profiler_fns = pgcuda::destroy_profiler_fns;
}
