// dlopen-based loader of cuBLASLt (see cublaslt_loader.h).
#include <cstdlib>
#include <mutex>
#include <string>

#include "dl_library.h"
#include "cublaslt_loader.h"

namespace pgcuda {
namespace {

std::once_flag g_once;
LtApi g_api;
bool g_loaded = false;
std::string g_error;

std::mutex g_handle_mu;
LtHandle g_handle = nullptr;

bool resolve_all(void* lib, LtApi* api, std::string* missing) {
  bool ok = dl_resolve(lib, "cublasLtCreate", &api->create, missing);
  ok = dl_resolve(lib, "cublasLtDestroy", &api->destroy, missing) && ok;
  ok = dl_resolve(lib, "cublasLtMatmulDescCreate", &api->desc_create, missing) && ok;
  ok = dl_resolve(lib, "cublasLtMatmulDescDestroy", &api->desc_destroy, missing) && ok;
  ok = dl_resolve(lib, "cublasLtMatmulDescSetAttribute", &api->desc_set, missing) && ok;
  ok = dl_resolve(lib, "cublasLtMatrixLayoutCreate", &api->layout_create, missing) && ok;
  ok = dl_resolve(lib, "cublasLtMatrixLayoutDestroy", &api->layout_destroy, missing) && ok;
  ok = dl_resolve(lib, "cublasLtMatmulPreferenceCreate", &api->pref_create, missing) && ok;
  ok = dl_resolve(lib, "cublasLtMatmulPreferenceDestroy", &api->pref_destroy, missing) && ok;
  ok = dl_resolve(lib, "cublasLtMatmulPreferenceSetAttribute", &api->pref_set, missing) && ok;
  ok = dl_resolve(lib, "cublasLtMatmulAlgoGetHeuristic", &api->heuristic, missing) && ok;
  ok = dl_resolve(lib, "cublasLtMatmul", &api->matmul, missing) && ok;
  std::string optional;
  dl_resolve(lib, "cublasLtGetStatusString", &api->status_string, &optional);
  return ok;
}

void load_once() {
  std::string tried, last_error;
  void* lib = dl_open_first(
      {getenv("PLUGGABLE_CUBLASLT_LIBRARY"), "libcublasLt.so.13", "libcublasLt.so.12",
       "libcublasLt.so", "/usr/local/cuda/lib64/libcublasLt.so.13",
       "/usr/local/cuda/lib64/libcublasLt.so.12"},
      [](void* lib, std::string* missing) {
        LtApi api = {};
        if (!resolve_all(lib, &api, missing)) return false;
        g_api = api;
        return true;
      },
      &tried, &last_error);
  if (lib != nullptr) {
    g_loaded = true;
    return;
  }
  g_error = dl_load_error("cuBLASLt", tried, last_error,
                          "set PLUGGABLE_CUBLASLT_LIBRARY to the path of libcublasLt.so");
}

}  // namespace

const LtApi* load_blaslt(TF_Status* status) {
  std::call_once(g_once, load_once);
  if (g_loaded) return &g_api;
  TF_SetStatus(status, TF_FAILED_PRECONDITION, g_error.c_str());
  return nullptr;
}

LtHandle shared_blaslt_handle(const LtApi* api, TF_Status* status) {
  std::lock_guard<std::mutex> lock(g_handle_mu);
  if (g_handle != nullptr) return g_handle;
  LtHandle h = nullptr;
  BlasStatus r = api->create(&h);
  if (r != kBlasSuccess || h == nullptr) {
    std::string msg = "cublasLtCreate failed: status " + std::to_string(r);
    TF_SetStatus(status, TF_INTERNAL, msg.c_str());
    return nullptr;
  }
  g_handle = h;  // kept for the life of the process
  return h;
}

}  // namespace pgcuda
