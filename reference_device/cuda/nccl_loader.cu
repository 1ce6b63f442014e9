// dlopen-based loader of NCCL (see nccl_loader.h).
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "nccl_loader.h"

namespace pgcuda {
namespace {

std::once_flag g_once;
NcclApi g_api;
bool g_loaded = false;
std::string g_error;

template <typename F>
bool resolve(void* lib, const char* name, F* out, std::string* missing) {
  void* sym = dlsym(lib, name);
  if (sym == nullptr) {
    if (!missing->empty()) *missing += ", ";
    *missing += name;
    return false;
  }
  *out = reinterpret_cast<F>(sym);
  return true;
}

// Resolves every function into `api`; false (with `missing` listing them)
// when some are absent.
bool resolve_all(void* lib, NcclApi* api, std::string* missing) {
  bool ok = resolve(lib, "ncclGetVersion", &api->get_version, missing);
  ok = resolve(lib, "ncclGetUniqueId", &api->get_unique_id, missing) && ok;
  ok = resolve(lib, "ncclCommInitRank", &api->comm_init_rank, missing) && ok;
  ok = resolve(lib, "ncclCommInitAll", &api->comm_init_all, missing) && ok;
  ok = resolve(lib, "ncclCommDestroy", &api->comm_destroy, missing) && ok;
  ok = resolve(lib, "ncclCommAbort", &api->comm_abort, missing) && ok;
  ok = resolve(lib, "ncclCommGetAsyncError", &api->comm_get_async_error, missing) && ok;
  ok = resolve(lib, "ncclAllReduce", &api->all_reduce, missing) && ok;
  ok = resolve(lib, "ncclAllGather", &api->all_gather, missing) && ok;
  ok = resolve(lib, "ncclReduceScatter", &api->reduce_scatter, missing) && ok;
  ok = resolve(lib, "ncclBroadcast", &api->broadcast, missing) && ok;
  ok = resolve(lib, "ncclSend", &api->send, missing) && ok;
  ok = resolve(lib, "ncclRecv", &api->recv, missing) && ok;
  ok = resolve(lib, "ncclGroupStart", &api->group_start, missing) && ok;
  ok = resolve(lib, "ncclGroupEnd", &api->group_end, missing) && ok;
  ok = resolve(lib, "ncclGetErrorString", &api->get_error_string, missing) && ok;
  return ok;
}

void load_once() {
  const char* chosen = getenv("PLUGGABLE_NCCL_LIBRARY");
  const bool forced = chosen != nullptr && chosen[0] != '\0';
  const char* defaults[] = {
      "libnccl.so.2",
      "/usr/local/cuda/lib64/libnccl.so.2",
      "/usr/lib/x86_64-linux-gnu/libnccl.so.2",
  };
  const char* only[] = {chosen};
  const char* const* candidates = forced ? only : defaults;
  const size_t count = forced ? 1 : sizeof(defaults) / sizeof(defaults[0]);
  std::string tried;
  std::string last_error;
  for (size_t i = 0; i < count; ++i) {
    const char* name = candidates[i];
    if (!tried.empty()) tried += ", ";
    tried += name;
    void* lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* err = dlerror();
      if (err != nullptr) last_error = err;
      continue;
    }
    NcclApi api = {};
    std::string missing;
    if (!resolve_all(lib, &api, &missing)) {
      last_error = std::string(name) + " lacks " + missing;
      dlclose(lib);
      continue;
    }
    if (api.get_version(&api.version) != kNcclSuccess) api.version = 0;
    g_api = api;  // the library stays loaded for the life of the process
    g_loaded = true;
    return;
  }
  g_error = "NCCL could not be loaded (tried " + tried + ")";
  if (!last_error.empty()) g_error += " [" + last_error + "]";
  g_error += forced ? ": PLUGGABLE_NCCL_LIBRARY names a library that cannot be loaded; "
                      "point it at libnccl.so.2 (`pip install nvidia-nccl-cu13` installs "
                      "one) or unset it"
                    : ": install it with `pip install nvidia-nccl-cu13` (CUDA 13; "
                      "nvidia-nccl-cu12 for CUDA 12) or set PLUGGABLE_NCCL_LIBRARY to "
                      "the path of libnccl.so.2";
}

}  // namespace

const NcclApi* load_nccl(TF_Status* status) {
  std::call_once(g_once, load_once);
  if (g_loaded) return &g_api;
  TF_SetStatus(status, TF_FAILED_PRECONDITION, g_error.c_str());
  return nullptr;
}

std::string nccl_error_text(const NcclApi* api, NcclResult r) {
  std::string text;
  if (api != nullptr && api->get_error_string != nullptr) {
    const char* s = api->get_error_string(r);
    if (s != nullptr) text = s;
  }
  if (text.empty()) text = "NCCL error";
  return text + " (ncclResult_t " + std::to_string(r) + ")";
}

}  // namespace pgcuda
