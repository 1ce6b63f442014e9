/* pluggable C API: op definitions and shape inference.
 *
 * A plugin defines a new op inside TF_InitKernel:
 *
 *     TF_OpDefinitionBuilder* b = TF_NewOpDefinitionBuilder("MyScale");
 *     TF_OpDefinitionBuilderAddInput(b, "x: T");
 *     TF_OpDefinitionBuilderAddOutput(b, "y: T");
 *     TF_OpDefinitionBuilderAddAttr(b, "T: {float, double}");
 *     TF_OpDefinitionBuilderAddAttr(b, "factor: float = 2.0");
 *     TF_OpDefinitionBuilderSetShapeInferenceFunction(b, &same_shape);
 *     TF_RegisterOpDefinition(b, status);
 *
 * and registers kernels for it with kernels.h. Once registered the op is
 * callable from Python as `pluggable.raw_ops.MyScale(x=..., factor=3.0)`.
 *
 * Spec strings follow TensorFlow's op registration syntax:
 *   input/output  "name: T"  (T a type attribute), "name: float" (fixed type)
 *   attribute     "name: type", "name: {float, int32}" (allowed types),
 *                 "name: int", "name: int >= 1", "name: float", "name: bool",
 *                 "name: string", "name: {'SAME', 'VALID'}", "name: shape",
 *                 "name: list(int)", "name: list(float)", "name: list(type)",
 *                 "name: list(string)", "name: list(bool)", each optionally
 *                 followed by "= default".
 *
 * Shape inference functions receive a TF_ShapeInferenceContext describing the
 * input shapes of one call and set the output shapes. Every handle is made by
 * TF_NewShapeHandle / TF_NewDimensionHandle (or returned by a
 * ...Scalar/...VectorFromSize function), is owned by the caller, and is
 * released with TF_DeleteShapeHandle / TF_DeleteDimensionHandle. */
#ifndef PLUGGABLE_OPS_H_
#define PLUGGABLE_OPS_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "c_api_macros.h"
#include "tf_datatype.h"
#include "tf_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct TF_DimensionHandle TF_DimensionHandle;
typedef struct TF_OpDefinitionBuilder TF_OpDefinitionBuilder;
typedef struct TF_ShapeHandle TF_ShapeHandle;
typedef struct TF_ShapeInferenceContext TF_ShapeInferenceContext;

/*** Op definitions ***/

/* Starts the definition of op `op_name` (upper camel case, e.g. "MyScale";
 * copied). The caller owns the builder until TF_RegisterOpDefinition takes
 * it or TF_DeleteOpDefinitionBuilder frees it. */
TF_CAPI_EXPORT extern TF_OpDefinitionBuilder* TF_NewOpDefinitionBuilder(
    const char* op_name);

/* Registers the op and takes ownership of `builder` (also on failure). Sets
 * `status` to TF_ALREADY_EXISTS if an op of that name exists, and to
 * TF_INVALID_ARGUMENT, naming the spec, if a spec string does not parse or an
 * input refers to an undeclared type attribute. */
TF_CAPI_EXPORT extern void TF_RegisterOpDefinition(
    TF_OpDefinitionBuilder* builder, TF_Status* status);

/* Frees a builder that was not registered. NULL is ignored. */
TF_CAPI_EXPORT extern void TF_DeleteOpDefinitionBuilder(
    TF_OpDefinitionBuilder* builder);

/* Adds an attribute, input or output from a spec string (copied; syntax
 * above). Errors are reported by TF_RegisterOpDefinition. */
TF_CAPI_EXPORT extern void TF_OpDefinitionBuilderAddAttr(
    TF_OpDefinitionBuilder* builder, const char* attr_spec);
TF_CAPI_EXPORT extern void TF_OpDefinitionBuilderAddInput(
    TF_OpDefinitionBuilder* builder, const char* input_spec);
TF_CAPI_EXPORT extern void TF_OpDefinitionBuilderAddOutput(
    TF_OpDefinitionBuilder* builder, const char* output_spec);

/* Flags kept with the definition (shown by op listings). */
TF_CAPI_EXPORT extern void TF_OpDefinitionBuilderSetIsCommutative(
    TF_OpDefinitionBuilder* builder, bool is_commutative);
TF_CAPI_EXPORT extern void TF_OpDefinitionBuilderSetIsAggregate(
    TF_OpDefinitionBuilder* builder, bool is_aggregate);
TF_CAPI_EXPORT extern void TF_OpDefinitionBuilderSetIsStateful(
    TF_OpDefinitionBuilder* builder, bool is_stateful);
TF_CAPI_EXPORT extern void TF_OpDefinitionBuilderSetAllowsUninitializedInput(
    TF_OpDefinitionBuilder* builder, bool allows_uninitialized_input);

/* Marks the op deprecated since graph version `version`; calls log
 * `explanation` once. */
TF_CAPI_EXPORT extern void TF_OpDefinitionBuilderDeprecated(
    TF_OpDefinitionBuilder* builder, int version, const char* explanation);

/* Sets the shape function. It runs before every call of the op and must set
 * every output (an error it sets is raised as the op's error). Without one,
 * output shapes are whatever the kernel allocates. */
TF_CAPI_EXPORT extern void TF_OpDefinitionBuilderSetShapeInferenceFunction(
    TF_OpDefinitionBuilder* builder,
    void (*shape_inference_func)(TF_ShapeInferenceContext* ctx,
                                 TF_Status* status));

/*** Shape inference ***/

/* Number of inputs of the call. */
TF_CAPI_EXPORT extern int64_t TF_ShapeInferenceContextNumInputs(
    TF_ShapeInferenceContext* ctx);

/* New, empty (unknown-rank) handles, owned by the caller. */
TF_CAPI_EXPORT extern TF_ShapeHandle* TF_NewShapeHandle(void);
TF_CAPI_EXPORT extern TF_DimensionHandle* TF_NewDimensionHandle(void);

/* Copies the shape of input `i` into `handle`; TF_INVALID_ARGUMENT for a bad
 * index. */
TF_CAPI_EXPORT extern void TF_ShapeInferenceContextGetInput(
    TF_ShapeInferenceContext* ctx, int i, TF_ShapeHandle* handle,
    TF_Status* status);

/* Sets output `i` to a copy of `handle`. */
TF_CAPI_EXPORT extern void TF_ShapeInferenceContextSetOutput(
    TF_ShapeInferenceContext* ctx, int i, TF_ShapeHandle* handle,
    TF_Status* status);

/* Marks every output as of unknown shape (the kernel decides). */
TF_CAPI_EXPORT extern void TF_ShapeInferenceContextSetUnknownShape(
    TF_ShapeInferenceContext* ctx, TF_Status* status);

/* New handles (owned by the caller) for a scalar and a vector of `size`. */
TF_CAPI_EXPORT extern TF_ShapeHandle* TF_ShapeInferenceContextScalar(
    TF_ShapeInferenceContext* ctx);
TF_CAPI_EXPORT extern TF_ShapeHandle* TF_ShapeInferenceContextVectorFromSize(
    TF_ShapeInferenceContext* ctx, size_t size);

/* Reads the type attribute `attr_name` of the call. */
TF_CAPI_EXPORT extern void TF_ShapeInferenceContext_GetAttrType(
    TF_ShapeInferenceContext* ctx, const char* attr_name, TF_DataType* val,
    TF_Status* status);

/* Rank of `handle` (-1 if unknown) and whether it is known (0/1). */
TF_CAPI_EXPORT extern int64_t TF_ShapeInferenceContextRank(
    TF_ShapeInferenceContext* ctx, TF_ShapeHandle* handle);
TF_CAPI_EXPORT extern int TF_ShapeInferenceContextRankKnown(
    TF_ShapeInferenceContext* ctx, TF_ShapeHandle* handle);

/* Checks the rank of `handle` (exactly / at least / at most `rank`) and
 * copies it into `new_shape`; TF_INVALID_ARGUMENT, naming both ranks, if it
 * does not hold. */
TF_CAPI_EXPORT extern void TF_ShapeInferenceContextWithRank(
    TF_ShapeInferenceContext* ctx, TF_ShapeHandle* handle, int64_t rank,
    TF_ShapeHandle* new_shape, TF_Status* status);
TF_CAPI_EXPORT extern void TF_ShapeInferenceContextWithRankAtLeast(
    TF_ShapeInferenceContext* ctx, TF_ShapeHandle* handle, int64_t rank,
    TF_ShapeHandle* new_shape, TF_Status* status);
TF_CAPI_EXPORT extern void TF_ShapeInferenceContextWithRankAtMost(
    TF_ShapeInferenceContext* ctx, TF_ShapeHandle* handle, int64_t rank,
    TF_ShapeHandle* new_shape, TF_Status* status);

/* Stores dimension `i` of `shape_handle` in `result` (negative `i` counts
 * from the end); an index out of range gives an unknown dimension. */
TF_CAPI_EXPORT extern void TF_ShapeInferenceContextDim(
    TF_ShapeInferenceContext* ctx, TF_ShapeHandle* shape_handle, int64_t i,
    TF_DimensionHandle* result);

/* Stores dimensions [start, end) of `shape_handle` in `result` (Python-style
 * negative indices allowed); TF_INVALID_ARGUMENT if out of range. */
TF_CAPI_EXPORT extern void TF_ShapeInferenceContextSubshape(
    TF_ShapeInferenceContext* ctx, TF_ShapeHandle* shape_handle, int64_t start,
    int64_t end, TF_ShapeHandle* result, TF_Status* status);

/* Stores `first` followed by `second` in `result`. */
TF_CAPI_EXPORT extern void TF_ShapeInferenceContextConcatenateShapes(
    TF_ShapeInferenceContext* ctx, TF_ShapeHandle* first,
    TF_ShapeHandle* second, TF_ShapeHandle* result, TF_Status* status);

/* Whether the dimension is known (0/1) and its value (-1 if unknown). */
TF_CAPI_EXPORT extern int TF_DimensionHandleValueKnown(
    TF_DimensionHandle* dim_handle);
TF_CAPI_EXPORT extern int64_t TF_DimensionHandleValue(
    TF_DimensionHandle* dim_handle);

/* Release handles. NULL is ignored. */
TF_CAPI_EXPORT extern void TF_DeleteShapeHandle(TF_ShapeHandle* handle);
TF_CAPI_EXPORT extern void TF_DeleteDimensionHandle(TF_DimensionHandle* handle);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PLUGGABLE_OPS_H_ */
