// dlopen-based loader of NCCL (see nccl_loader.h).
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "dl_library.h"
#include "nccl_loader.h"

namespace pgcuda {
namespace {

std::once_flag g_once;
NcclApi g_api;
bool g_loaded = false;
std::string g_error;

// Resolves every function into `api`; false (with `missing` listing them)
// when some are absent.
bool resolve_all(void* lib, NcclApi* api, std::string* missing) {
  bool ok = dl_resolve(lib, "ncclGetVersion", &api->get_version, missing);
  ok = dl_resolve(lib, "ncclGetUniqueId", &api->get_unique_id, missing) && ok;
  ok = dl_resolve(lib, "ncclCommInitRank", &api->comm_init_rank, missing) && ok;
  ok = dl_resolve(lib, "ncclCommInitAll", &api->comm_init_all, missing) && ok;
  ok = dl_resolve(lib, "ncclCommDestroy", &api->comm_destroy, missing) && ok;
  ok = dl_resolve(lib, "ncclCommAbort", &api->comm_abort, missing) && ok;
  ok = dl_resolve(lib, "ncclCommGetAsyncError", &api->comm_get_async_error, missing) && ok;
  ok = dl_resolve(lib, "ncclAllReduce", &api->all_reduce, missing) && ok;
  ok = dl_resolve(lib, "ncclAllGather", &api->all_gather, missing) && ok;
  ok = dl_resolve(lib, "ncclReduceScatter", &api->reduce_scatter, missing) && ok;
  ok = dl_resolve(lib, "ncclBroadcast", &api->broadcast, missing) && ok;
  ok = dl_resolve(lib, "ncclSend", &api->send, missing) && ok;
  ok = dl_resolve(lib, "ncclRecv", &api->recv, missing) && ok;
  ok = dl_resolve(lib, "ncclGroupStart", &api->group_start, missing) && ok;
  ok = dl_resolve(lib, "ncclGroupEnd", &api->group_end, missing) && ok;
  ok = dl_resolve(lib, "ncclGetErrorString", &api->get_error_string, missing) && ok;
  return ok;
}

void load_once() {
  const char* chosen = getenv("PLUGGABLE_NCCL_LIBRARY");
  // A library named by the variable is the only one tried: falling back to
  // another would hide a wrong path.
  const bool forced = chosen != nullptr && chosen[0] != '\0';
  auto take = [](void* lib, std::string* missing) {
    NcclApi api = {};
    if (!resolve_all(lib, &api, missing)) return false;
    if (api.get_version(&api.version) != kNcclSuccess) api.version = 0;
    g_api = api;
    return true;
  };
  std::string tried, last_error;
  void* lib = forced ? dl_open_first({chosen}, take, &tried, &last_error)
                     : dl_open_first({"libnccl.so.2", "/usr/local/cuda/lib64/libnccl.so.2",
                                      "/usr/lib/x86_64-linux-gnu/libnccl.so.2"},
                                     take, &tried, &last_error);
  if (lib != nullptr) {
    g_loaded = true;
    return;
  }
  g_error = dl_load_error(
      "NCCL", tried, last_error,
      forced ? "PLUGGABLE_NCCL_LIBRARY names a library that cannot be loaded; point it at "
               "libnccl.so.2 (`pip install nvidia-nccl-cu13` installs one) or unset it"
             : "install it with `pip install nvidia-nccl-cu13` (CUDA 13; nvidia-nccl-cu12 "
               "for CUDA 12) or set PLUGGABLE_NCCL_LIBRARY to the path of libnccl.so.2");
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
