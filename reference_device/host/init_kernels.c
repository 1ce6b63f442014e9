/* Host reference device: kernel registration.
 *
 * TF_InitKernel registers one kernel per (op, dtype) from the table below
 * (and one per (SrcT, DstT) pair for Cast). A registration the core refuses
 * (for example a dtype its op definition does not allow, or an op the core
 * does not define) is skipped: the core already logs the reason, and the
 * other kernels stay usable.
 *
 * Each entry names the op's type attribute it constrains ("T" unless
 * `type_attr` says otherwise) and the inputs the kernel reads on the host
 * (TF_KernelBuilder_HostMemory): shape functions read them too, and the
 * compute functions read them directly. Other type attributes (index types,
 * output_type) are not constrained: one kernel handles every allowed value
 * at compute time. */
#include <stddef.h>

#include "kernel_list.h"
#include "kernel_util.h"
#include "plugin.h"

/* Dtype lists, terminated by 0 (not a valid TF_DataType). */
static const TF_DataType kFloats[] = {TF_HALF, TF_BFLOAT16, TF_FLOAT, TF_DOUBLE,
                                      0};
static const TF_DataType kNumeric[] = {TF_HALF,  TF_BFLOAT16, TF_FLOAT,
                                       TF_DOUBLE, TF_INT32,   TF_INT64, 0};
static const TF_DataType kAll[] = {TF_BOOL,  TF_INT8,     TF_UINT8, TF_INT16,
                                   TF_INT32, TF_INT64,    TF_HALF,  TF_BFLOAT16,
                                   TF_FLOAT, TF_DOUBLE,   0};
/* Cast's SrcT and DstT, and the data-movement kernels that carry every
 * element type (Identity, Reshape): kAll, the unsigned integers and the
 * narrow types (one element per byte). */
static const TF_DataType kCastable[] = {
    TF_BOOL,  TF_INT8,   TF_UINT8,  TF_INT16,  TF_INT32,  TF_INT64,
    TF_HALF,  TF_BFLOAT16, TF_FLOAT, TF_DOUBLE, TF_UINT16, TF_UINT32,
    TF_UINT64, TF_FLOAT8_E5M2, TF_FLOAT8_E4M3FN, TF_FLOAT8_E4M3FNUZ,
    TF_FLOAT8_E5M2FNUZ, TF_INT4, TF_UINT4, TF_INT2, TF_UINT2,
    TF_FLOAT4_E2M1FN, 0};
/* The data-movement kernels, which copy elements as bytes: kAll and the
 * complex types. */
static const TF_DataType kMove[] = {TF_BOOL,  TF_INT8,     TF_UINT8, TF_INT16,
                                    TF_INT32, TF_INT64,    TF_HALF,  TF_BFLOAT16,
                                    TF_FLOAT, TF_DOUBLE,   TF_COMPLEX64,
                                    TF_COMPLEX128, 0};
/* Identity and Reshape: kCastable and the complex types. */
static const TF_DataType kMoveAny[] = {
    TF_BOOL,  TF_INT8,   TF_UINT8,  TF_INT16,  TF_INT32,  TF_INT64,
    TF_HALF,  TF_BFLOAT16, TF_FLOAT, TF_DOUBLE, TF_UINT16, TF_UINT32,
    TF_UINT64, TF_FLOAT8_E5M2, TF_FLOAT8_E4M3FN, TF_FLOAT8_E4M3FNUZ,
    TF_FLOAT8_E5M2FNUZ, TF_INT4, TF_UINT4, TF_INT2, TF_UINT2,
    TF_FLOAT4_E2M1FN, TF_COMPLEX64, TF_COMPLEX128, 0};
/* complex64 and complex128 (kernels_complex.c); their parts for Complex. */
static const TF_DataType kComplex[] = {TF_COMPLEX64, TF_COMPLEX128, 0};
static const TF_DataType kComplexParts[] = {TF_FLOAT, TF_DOUBLE, 0};
/* FusedBatchNorm's x (its statistics are float). */
static const TF_DataType kBatchNorm[] = {TF_HALF, TF_BFLOAT16, TF_FLOAT, 0};
/* Range's Tidx. */
static const TF_DataType kRange[] = {TF_BFLOAT16, TF_HALF,  TF_FLOAT, TF_DOUBLE,
                                     TF_INT8,     TF_INT16, TF_INT32, TF_INT64,
                                     TF_UINT32,   TF_UINT64, 0};
/* The collective ops. */
static const TF_DataType kCollective[] = {TF_FLOAT, TF_DOUBLE, TF_INT32, TF_INT64,
                                          0};
/* Host-memory inputs a kernel may declare. */
#define MD_MAX_HOST_INPUTS 4

/* One op: its functions, the values of its type attribute, and the inputs
 * kept in host memory. `extra_attr` / `extra_type` add a second, fixed
 * constraint. */
typedef struct md_kernel_def {
  const char* op;
  void* (*create)(TF_OpKernelConstruction* ctx);
  void (*compute)(void* kernel, TF_OpKernelContext* ctx);
  void (*destroy)(void* kernel);
  const TF_DataType* types;
  const char* type_attr;                  /* NULL: "T" */
  const char* host[MD_MAX_HOST_INPUTS];   /* NULL-terminated */
  const char* extra_attr;                 /* NULL: none */
  TF_DataType extra_type;
  int no_type_attr;                       /* the op has no type attribute:
                                             one kernel, `types` unused */
} md_kernel_def;

#define MD_KERNEL(OP, NAME, TYPES, ...)                                       \
  {OP, NULL, md_compute_##NAME, NULL, TYPES, __VA_ARGS__}
#define MD_KERNEL_STATE(OP, NAME, STATE, TYPES, ...)                          \
  {OP, md_create_##STATE, md_compute_##NAME, md_delete_##STATE, TYPES,        \
   __VA_ARGS__}

static const md_kernel_def kKernels[] = {
    /* kernels_binary.c */
    MD_KERNEL("AddV2", add, kNumeric, NULL),
    MD_KERNEL("Sub", sub, kNumeric, NULL),
    MD_KERNEL("Mul", mul, kNumeric, NULL),
    MD_KERNEL("RealDiv", div, kNumeric, NULL),
    MD_KERNEL("Maximum", maximum, kNumeric, NULL),
    MD_KERNEL("Minimum", minimum, kNumeric, NULL),
    MD_KERNEL("Pow", pow, kNumeric, NULL),
    MD_KERNEL("FloorDiv", floordiv, kNumeric, NULL),
    MD_KERNEL("FloorMod", floormod, kNumeric, NULL),
    /* kernels_complex.c */
    MD_KERNEL("AddV2", complex_add, kComplex, NULL),
    MD_KERNEL("Sub", complex_sub, kComplex, NULL),
    MD_KERNEL("Mul", complex_mul, kComplex, NULL),
    MD_KERNEL("Neg", complex_neg, kComplex, NULL),
    MD_KERNEL("Conj", conj, kComplex, NULL),
    MD_KERNEL("Real", real, kComplex, NULL),
    MD_KERNEL("Imag", imag, kComplex, NULL),
    MD_KERNEL("Complex", complex, kComplexParts, NULL),
    /* kernels_unary.c */
    MD_KERNEL("Neg", neg, kNumeric, NULL),
    MD_KERNEL("Abs", abs, kNumeric, NULL),
    MD_KERNEL("Exp", exp, kFloats, NULL),
    MD_KERNEL("Log", log, kFloats, NULL),
    MD_KERNEL("Sqrt", sqrt, kFloats, NULL),
    MD_KERNEL("Tanh", tanh, kFloats, NULL),
    MD_KERNEL("Sigmoid", sigmoid, kFloats, NULL),
    MD_KERNEL("Relu", relu, kNumeric, NULL),
    MD_KERNEL("Square", square, kNumeric, NULL),
    MD_KERNEL("Sign", sign, kNumeric, NULL),
    MD_KERNEL("Rsqrt", rsqrt, kFloats, NULL),
    MD_KERNEL("Erf", erf, kFloats, NULL),
    MD_KERNEL("Floor", floor, kFloats, NULL),
    MD_KERNEL("Round", round, kFloats, NULL),
    MD_KERNEL("Sin", sin, kFloats, NULL),
    MD_KERNEL("Cos", cos, kFloats, NULL),
    MD_KERNEL("Tan", tan, kFloats, NULL),
    MD_KERNEL("Asin", asin, kFloats, NULL),
    MD_KERNEL("Acos", acos, kFloats, NULL),
    MD_KERNEL("Atan", atan, kFloats, NULL),
    MD_KERNEL("Sinh", sinh, kFloats, NULL),
    MD_KERNEL("Cosh", cosh, kFloats, NULL),
    MD_KERNEL("Asinh", asinh, kFloats, NULL),
    MD_KERNEL("Acosh", acosh, kFloats, NULL),
    MD_KERNEL("Atanh", atanh, kFloats, NULL),
    MD_KERNEL("Expm1", expm1, kFloats, NULL),
    MD_KERNEL("Log1p", log1p, kFloats, NULL),
    MD_KERNEL("Erfc", erfc, kFloats, NULL),
    MD_KERNEL("Ceil", ceil, kFloats, NULL),
    MD_KERNEL("Reciprocal", reciprocal, kFloats, NULL),
    MD_KERNEL_STATE("Gelu", gelu, gelu, kFloats, NULL),
    MD_KERNEL_STATE("CheckNumerics", check_numerics, check_numerics, kFloats,
                    NULL),
    /* kernels_grad.c */
    MD_KERNEL("ReluGrad", relu_grad, kNumeric, NULL),
    MD_KERNEL("SigmoidGrad", sigmoid_grad, kFloats, NULL),
    MD_KERNEL("TanhGrad", tanh_grad, kFloats, NULL),
    MD_KERNEL("RsqrtGrad", rsqrt_grad, kFloats, NULL),
    MD_KERNEL("SqrtGrad", sqrt_grad, kFloats, NULL),
    MD_KERNEL_STATE("GeluGrad", gelu_grad, gelu, kFloats, NULL),
    /* kernels_compare.c */
    MD_KERNEL("Less", less, kNumeric, NULL),
    MD_KERNEL("LessEqual", less_equal, kNumeric, NULL),
    MD_KERNEL("Greater", greater, kNumeric, NULL),
    MD_KERNEL("GreaterEqual", greater_equal, kNumeric, NULL),
    MD_KERNEL_STATE("Equal", equal, equality, kAll, NULL),
    MD_KERNEL_STATE("NotEqual", not_equal, equality, kAll, NULL),
    {"LogicalAnd", NULL, md_compute_logical_and, NULL, NULL, .no_type_attr = 1},
    {"LogicalOr", NULL, md_compute_logical_or, NULL, NULL, .no_type_attr = 1},
    {"LogicalNot", NULL, md_compute_logical_not, NULL, NULL, .no_type_attr = 1},
    /* kernels_select.c */
    MD_KERNEL("Select", select, kMove, NULL),
    MD_KERNEL("SelectV2", select_v2, kMove, NULL),
    /* kernels_softmax.c, kernels_xent.c */
    MD_KERNEL("Softmax", softmax, kFloats, NULL),
    MD_KERNEL("LogSoftmax", log_softmax, kFloats, NULL),
    MD_KERNEL("SoftmaxCrossEntropyWithLogits", softmax_xent, kFloats, NULL),
    MD_KERNEL("SparseSoftmaxCrossEntropyWithLogits", sparse_softmax_xent,
              kFloats, NULL),
    /* kernels_matmul.c */
    MD_KERNEL_STATE("MatMul", matmul, matmul, kNumeric, NULL),
    {"BatchMatMulV2", md_create_batch_matmul, md_compute_batch_matmul,
     md_delete_matmul, kNumeric, NULL},
    /* kernels_conv.c */
    MD_KERNEL_STATE("Conv2D", conv2d, conv2d, kFloats, NULL),
    MD_KERNEL_STATE("Conv2DBackpropInput", conv2d_backprop_input, conv2d,
                    kFloats, NULL, {"input_sizes"}),
    MD_KERNEL_STATE("Conv2DBackpropFilter", conv2d_backprop_filter, conv2d,
                    kFloats, NULL, {"filter_sizes"}),
    /* kernels_pool.c */
    MD_KERNEL_STATE("MaxPool", max_pool, pool, kFloats, NULL),
    MD_KERNEL_STATE("MaxPoolGrad", max_pool_grad, pool, kFloats, NULL),
    MD_KERNEL_STATE("AvgPool", avg_pool, pool, kFloats, NULL),
    MD_KERNEL_STATE("AvgPoolGrad", avg_pool_grad, pool, kFloats, NULL,
                    {"orig_input_shape"}),
    /* kernels_bias.c, kernels_batchnorm.c */
    MD_KERNEL_STATE("BiasAdd", bias_add, bias, kNumeric, NULL),
    MD_KERNEL_STATE("BiasAddGrad", bias_add_grad, bias, kNumeric, NULL),
    MD_KERNEL_STATE("FusedBatchNormV3", fused_batch_norm, batch_norm,
                    kBatchNorm, NULL, {NULL}, "U", TF_FLOAT),
    MD_KERNEL_STATE("FusedBatchNormGradV3", fused_batch_norm_grad, batch_norm,
                    kBatchNorm, NULL, {NULL}, "U", TF_FLOAT),
    /* kernels_reduce.c */
    MD_KERNEL_STATE("Sum", sum, reduction, kNumeric, NULL, {"reduction_indices"}),
    MD_KERNEL_STATE("Mean", mean, reduction, kNumeric, NULL, {"reduction_indices"}),
    MD_KERNEL_STATE("Max", max, reduction, kNumeric, NULL, {"reduction_indices"}),
    MD_KERNEL_STATE("Min", min, reduction, kNumeric, NULL, {"reduction_indices"}),
    MD_KERNEL_STATE("Prod", prod, reduction, kNumeric, NULL, {"reduction_indices"}),
    MD_KERNEL("ArgMax", argmax, kNumeric, NULL, {"dimension"}),
    MD_KERNEL("ArgMin", argmin, kNumeric, NULL, {"dimension"}),
    /* kernels_scan.c, kernels_topk.c, kernels_addn.c, kernels_segment.c */
    MD_KERNEL_STATE("Cumsum", cumsum, cumsum, kNumeric, NULL, {"axis"}),
    MD_KERNEL("TopKV2", topk, kNumeric, NULL, {"k"}),
    MD_KERNEL("AddN", addn, kNumeric, NULL),
    MD_KERNEL("UnsortedSegmentSum", unsorted_segment_sum, kNumeric, NULL,
              {"num_segments"}),
    /* kernels_shape.c */
    MD_KERNEL("Transpose", transpose, kMove, NULL, {"perm"}),
    MD_KERNEL("Reshape", reshape, kMoveAny, NULL, {"shape"}),
    MD_KERNEL("ExpandDims", expand_dims, kMove, NULL, {"dim"}),
    MD_KERNEL_STATE("Squeeze", squeeze, squeeze, kMove, NULL),
    MD_KERNEL("Identity", identity, kMoveAny, NULL),
    /* kernels_fill.c */
    MD_KERNEL("Fill", fill, kMove, NULL, {"dims"}),
    MD_KERNEL("ZerosLike", zeros_like, kMove, NULL),
    MD_KERNEL("OnesLike", ones_like, kMove, NULL),
    MD_KERNEL("Range", range, kRange, "Tidx", {"start", "limit", "delta"}),
    /* kernels_slice.c */
    MD_KERNEL_STATE("StridedSlice", strided_slice, strided_slice, kMove, NULL,
                    {"begin", "end", "strides"}),
    MD_KERNEL_STATE("StridedSliceGrad", strided_slice_grad, strided_slice, kMove,
                    NULL, {"shape", "begin", "end", "strides"}),
    MD_KERNEL("Slice", slice, kMove, NULL, {"begin", "size"}),
    /* kernels_concat.c */
    MD_KERNEL("ConcatV2", concat_v2, kMove, NULL, {"axis"}),
    MD_KERNEL_STATE("Pack", pack, axis_attr, kMove, NULL),
    MD_KERNEL_STATE("Unpack", unpack, axis_attr, kMove, NULL),
    MD_KERNEL("Split", split, kMove, NULL, {"split_dim"}),
    /* kernels_pad.c */
    MD_KERNEL("Pad", pad, kMove, NULL, {"paddings"}),
    MD_KERNEL("Tile", tile, kMove, NULL, {"multiples"}),
    MD_KERNEL("BroadcastTo", broadcast_to, kMove, NULL, {"shape"}),
    /* kernels_gather.c */
    MD_KERNEL_STATE("GatherV2", gather, gather, kMove, "Tparams", {"axis"}),
    MD_KERNEL("GatherNd", gather_nd, kMove, "Tparams"),
    MD_KERNEL_STATE("OneHot", one_hot, one_hot, kAll, NULL, {"depth"}),
    /* kernels_random.c */
    MD_KERNEL("StatelessRandomUniformV2", random_uniform, kFloats, "dtype",
              {"shape", "key", "counter", "alg"}),
    MD_KERNEL("StatelessRandomNormalV2", random_normal, kFloats, "dtype",
              {"shape", "key", "counter", "alg"}),
    MD_KERNEL("StatelessTruncatedNormalV2", truncated_normal, kFloats, "dtype",
              {"shape", "key", "counter", "alg"}),
    /* kernels_collective.c */
#define MD_COLL_KEYS "group_size", "group_key", "instance_key"
    {"CollectiveReduceV2", md_create_coll_reduce, md_compute_coll, md_delete_coll,
     kCollective, NULL, {MD_COLL_KEYS}},
    {"CollectiveReduceScatterV2", md_create_coll_reduce_scatter, md_compute_coll,
     md_delete_coll, kCollective, NULL, {MD_COLL_KEYS}},
    {"CollectiveGatherV2", md_create_coll_gather, md_compute_coll, md_delete_coll,
     kCollective, NULL, {MD_COLL_KEYS}},
    {"CollectiveBcastSendV2", md_create_coll_send, md_compute_coll, md_delete_coll,
     kCollective, NULL, {MD_COLL_KEYS}},
    {"CollectiveBcastRecvV2", md_create_coll_recv, md_compute_coll, md_delete_coll,
     kCollective, NULL, {MD_COLL_KEYS, "shape"}},
#undef MD_COLL_KEYS
};

/* Registers one kernel of `def` with type constraints attr1 = t1 (none if
 * attr1 is NULL) and, if attr2 is not NULL, attr2 = t2. Failures are
 * skipped (see top of file). */
static void md_register(const md_kernel_def* def, const char* attr1,
                        TF_DataType t1, const char* attr2, TF_DataType t2) {
  TF_Status* status = TF_NewStatus();
  TF_KernelBuilder* builder = TF_NewKernelBuilder(
      def->op, MD_DEVICE_TYPE, def->create, def->compute, def->destroy);
  if (builder == NULL) goto done;
  if (attr1 != NULL) TF_KernelBuilder_TypeConstraint(builder, attr1, t1, status);
  if (TF_GetCode(status) == TF_OK && attr2 != NULL) {
    TF_KernelBuilder_TypeConstraint(builder, attr2, t2, status);
  }
  if (TF_GetCode(status) != TF_OK) {
    TF_DeleteKernelBuilder(builder);
    goto done;
  }
  for (int i = 0; i < MD_MAX_HOST_INPUTS && def->host[i] != NULL; ++i) {
    TF_KernelBuilder_HostMemory(builder, def->host[i]);
  }
  TF_RegisterKernelBuilder(def->op, builder, status); /* takes the builder */
done:
  TF_DeleteStatus(status);
}

void TF_InitKernel(void) {
  for (size_t i = 0; i < sizeof(kKernels) / sizeof(kKernels[0]); ++i) {
    const md_kernel_def* def = &kKernels[i];
    if (def->no_type_attr) { /* one kernel, no constraint */
      md_register(def, NULL, 0, NULL, 0);
      continue;
    }
    const char* attr = def->type_attr != NULL ? def->type_attr : "T";
    for (const TF_DataType* t = def->types; *t != 0; ++t) {
      md_register(def, attr, *t, def->extra_attr, def->extra_type);
    }
  }
  /* Cast: every (source, destination) pair. */
  static const md_kernel_def kCast = {"Cast", NULL, md_compute_cast, NULL,
                                      kCastable, NULL, {NULL}, NULL, 0, 0};
  for (const TF_DataType* src = kCastable; *src != 0; ++src) {
    for (const TF_DataType* dst = kCastable; *dst != 0; ++dst) {
      md_register(&kCast, "SrcT", *src, "DstT", *dst);
    }
  }
  md_register_training_kernels();
  md_register_fused_kernels();
}
