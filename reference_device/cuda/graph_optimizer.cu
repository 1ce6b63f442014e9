// The graph optimizer of the CUDA reference plugin (grappler.h): the fusion
// of MatMul / Conv2D + BiasAdd (+ Relu) into _FusedMatMul / _FusedConv2D of
// reference_device/graph, registered for device type GPU and limited to the
// dtypes kernels_fused.cu implements. MatMul chains are fused only when
// cuBLASLt can be loaded (the fused kernel needs it; the unfused MatMul only
// needs cuBLAS). The framework's "remapping" pass stays on for GPU graphs: it
// rewrites attention, layer norm and bias + GELU into the fused kernels this
// plugin has, patterns this optimizer leaves alone.
#include "cublaslt_loader.h"
#include "fusion.h"
#include "grappler.h"

namespace {

const TF_DataType kMatMulTypes[] = {TF_HALF, TF_BFLOAT16, TF_FLOAT, static_cast<TF_DataType>(0)};
const TF_DataType kConvTypes[] = {TF_HALF, TF_FLOAT, TF_DOUBLE, static_cast<TF_DataType>(0)};

void optimize(void* state, const TF_Buffer* graph, const TF_GrapplerItem* item,
              TF_Buffer* optimized, TF_Status* status) {
  (void)state;
  TF_Status* probe = TF_NewStatus();
  const bool lt = pgcuda::load_blaslt(probe) != nullptr;
  TF_DeleteStatus(probe);
  rg_fusion_config config = {"GPU", lt ? kMatMulTypes : nullptr, kConvTypes, 1};
  rg_fuse_graph(&config, graph, item, optimized, nullptr, status);
}

}  // namespace

extern "C" void TF_InitGraph(TP_OptimizerRegistrationParams* params, TF_Status* status) {
  (void)status;
  params->struct_size = TP_OPTIMIZER_REGISTRATION_PARAMS_STRUCT_SIZE;
  params->major_version = GO_MAJOR;
  params->minor_version = GO_MINOR;
  params->patch_version = GO_PATCH;
  params->device_type = "GPU";
  params->optimizer_configs->struct_size = TP_OPTIMIZER_CONFIGS_STRUCT_SIZE;
  params->optimizer_configs->remapping = TF_TriState_Default;
  params->optimizer->struct_size = TP_OPTIMIZER_STRUCT_SIZE;
  params->optimizer->optimize_func = optimize;
}
