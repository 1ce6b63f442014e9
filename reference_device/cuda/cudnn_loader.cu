// dlopen-based loader of cuDNN (see cudnn_loader.h).
#include <atomic>
#include <cstdlib>
#include <mutex>

#include "cudnn_loader.h"
#include "dl_library.h"

namespace pgcuda {
namespace {

std::once_flag g_once;
DnnApi g_api;
std::atomic<bool> g_loaded{false};
std::string g_error;

bool take(void* lib, std::string* missing) {
  DnnApi a = {};
  bool ok = dl_resolve(lib, "cudnnCreate", &a.create, missing);
  ok = dl_resolve(lib, "cudnnDestroy", &a.destroy, missing) && ok;
  ok = dl_resolve(lib, "cudnnSetStream", &a.set_stream, missing) && ok;
  ok = dl_resolve(lib, "cudnnGetErrorString", &a.error_string, missing) && ok;
  ok = dl_resolve(lib, "cudnnCreateTensorDescriptor", &a.create_tensor, missing) && ok;
  ok = dl_resolve(lib, "cudnnSetTensor4dDescriptor", &a.set_tensor_4d, missing) && ok;
  ok = dl_resolve(lib, "cudnnDestroyTensorDescriptor", &a.destroy_tensor, missing) && ok;
  ok = dl_resolve(lib, "cudnnCreateFilterDescriptor", &a.create_filter, missing) && ok;
  ok = dl_resolve(lib, "cudnnSetFilter4dDescriptor", &a.set_filter_4d, missing) && ok;
  ok = dl_resolve(lib, "cudnnDestroyFilterDescriptor", &a.destroy_filter, missing) && ok;
  ok = dl_resolve(lib, "cudnnCreateConvolutionDescriptor", &a.create_conv, missing) && ok;
  ok = dl_resolve(lib, "cudnnSetConvolution2dDescriptor", &a.set_conv_2d, missing) && ok;
  ok = dl_resolve(lib, "cudnnSetConvolutionMathType", &a.set_conv_math, missing) && ok;
  ok = dl_resolve(lib, "cudnnSetConvolutionGroupCount", &a.set_conv_groups, missing) && ok;
  ok = dl_resolve(lib, "cudnnDestroyConvolutionDescriptor", &a.destroy_conv, missing) && ok;
  ok = dl_resolve(lib, "cudnnGetConvolutionForwardAlgorithm_v7", &a.fwd_algorithms,
                  missing) && ok;
  ok = dl_resolve(lib, "cudnnGetConvolutionForwardWorkspaceSize", &a.fwd_workspace,
                  missing) && ok;
  ok = dl_resolve(lib, "cudnnConvolutionForward", &a.forward, missing) && ok;
  if (ok) g_api = a;
  return ok;
}

void load_once() {
  std::string tried, last_error;
  // A library named by PLUGGABLE_CUDNN_LIBRARY is the only one tried.
  const char* named = getenv("PLUGGABLE_CUDNN_LIBRARY");
  void* lib = named != nullptr && named[0] != '\0'
                  ? dl_open_first({named}, take, &tried, &last_error)
                  : dl_open_first({"libcudnn.so.9"}, take, &tried, &last_error);
  if (lib != nullptr) {
    g_loaded.store(true);
    return;
  }
  g_error = dl_load_error("cuDNN", tried, last_error,
                          "set PLUGGABLE_CUDNN_LIBRARY to the path of libcudnn.so.9 "
                          "(`pip install nvidia-cudnn-cu13` installs one)");
}

}  // namespace

const DnnApi* load_dnn(TF_Status* status) {
  std::call_once(g_once, load_once);
  if (g_loaded.load()) return &g_api;
  TF_SetStatus(status, TF_FAILED_PRECONDITION, g_error.c_str());
  return nullptr;
}

bool dnn_loaded() { return g_loaded.load(); }

std::string dnn_status_text(const DnnApi* api, DnnStatus s) {
  return dl_status_text(api != nullptr ? api->error_string : nullptr, s, "cuDNN");
}

void destroy_dnn_handle(void* handle) {
  if (handle == nullptr || !g_loaded.load()) return;
  (void)g_api.destroy(handle);
}

}  // namespace pgcuda
