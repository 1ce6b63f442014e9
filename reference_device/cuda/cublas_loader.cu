// dlopen-based loader of cuBLAS (see cublas_loader.h).
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "dl_library.h"
#include "cublas_loader.h"

namespace pgcuda {
namespace {

std::once_flag g_once;
BlasApi g_api;
bool g_loaded = false;
std::string g_error;

void load_once() {
  std::string tried, last_error;
  void* lib = dl_open_first(
      {getenv("PLUGGABLE_CUBLAS_LIBRARY"), "libcublas.so.13", "libcublas.so.12", "libcublas.so",
       "/usr/local/cuda/lib64/libcublas.so.13", "/usr/local/cuda/lib64/libcublas.so.12"},
      [](void* lib, std::string* missing) {
        BlasApi api = {};
        bool ok = dl_resolve(lib, "cublasCreate_v2", &api.create, missing);
        ok = dl_resolve(lib, "cublasDestroy_v2", &api.destroy, missing) && ok;
        ok = dl_resolve(lib, "cublasSetStream_v2", &api.set_stream, missing) && ok;
        ok = dl_resolve(lib, "cublasSetMathMode", &api.set_math_mode, missing) && ok;
        ok = dl_resolve(lib, "cublasGemmEx", &api.gemm_ex, missing) && ok;
        // Optional: used when present.
        std::string optional_missing;
        dl_resolve(lib, "cublasSetWorkspace_v2", &api.set_workspace, &optional_missing);
        dl_resolve(lib, "cublasGetStatusString", &api.status_string, &optional_missing);
        dl_resolve(lib, "cublasGemmStridedBatchedEx", &api.gemm_strided_batched_ex,
                   &optional_missing);
        if (ok) g_api = api;
        return ok;
      },
      &tried, &last_error);
  if (lib != nullptr) {
    g_loaded = true;
    return;
  }
  g_error = dl_load_error("cuBLAS", tried, last_error,
                          "set PLUGGABLE_CUBLAS_LIBRARY to the path of libcublas.so");
}

}  // namespace

const BlasApi* load_blas(TF_Status* status) {
  std::call_once(g_once, load_once);
  if (g_loaded) return &g_api;
  TF_SetStatus(status, TF_FAILED_PRECONDITION, g_error.c_str());
  return nullptr;
}

std::string blas_status_text(const BlasApi* api, BlasStatus s) {
  return dl_status_text(api != nullptr ? api->status_string : nullptr, s, "cuBLAS");
}

void destroy_blas_handle(void* handle) {
  if (handle == nullptr || !g_loaded) return;
  (void)g_api.destroy(handle);
}

}  // namespace pgcuda
