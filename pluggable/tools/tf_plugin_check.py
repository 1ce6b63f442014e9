"""Runs a plugin inside TensorFlow and compares every op it registers with
TensorFlow's own CPU kernels.

This file is run as a script in a process of its own (``python
.../tf_plugin_check.py PLUGIN``): TensorFlow cannot share a process with
``pluggable`` (the core exports the TF_* C API that TensorFlow's own kernels
would bind to), so this module imports TensorFlow and numpy only, never
``pluggable``. ``pluggable.tools.tf_certify`` starts it and reads its JSON
report; the tests do the same.

For each kernel the plugin registers (read back from TensorFlow's kernel
registry, so new kernels are covered without changing this file) and each
dtype it accepts, the op runs ``--iterations`` times eagerly on
``/device:<TYPE>:0`` and as many times through a ``tf.function``; every
result is kept and read only at the end, then compared with the op on
``/CPU:0``. Soft placement is off, so an op that would fall back to the CPU
fails instead of passing unnoticed. Reading results late is what catches a
plugin that frees memory while queued work still uses it.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

import numpy as np

# Ops whose inputs must lie in their domain for a meaningful comparison.
POSITIVE_INPUT_OPS = {"Log", "Sqrt", "Rsqrt", "Reciprocal", "Inv", "Pow", "Lgamma",
                      "Digamma", "Log1p", "Xlogy", "Xdivy"}
# Elementwise ops that broadcast their inputs (others get equal shapes).
BROADCASTING_OPS = {"AddV2", "Add", "Sub", "Mul", "RealDiv", "Div", "Maximum", "Minimum", "Pow",
                    "SquaredDifference", "FloorDiv", "FloorMod", "TruncateDiv", "Less",
                    "LessEqual", "Greater", "GreaterEqual", "Equal", "NotEqual", "LogicalAnd",
                    "LogicalOr", "BiasAdd", "DivNoNan", "Xdivy", "Xlogy", "Atan2"}
# Outputs compared, for ops whose other outputs are implementation-defined
# scratch space.
COMPARED_OUTPUTS = {"FusedBatchNormV3": 3, "FusedBatchNormGradV3": 3}
# Ops TensorFlow's kernels give the same result for in any order of ties
# only with distinct inputs.
DISTINCT_INPUT_OPS = {"TopKV2", "ArgMax", "ArgMin", "MaxPool", "MaxPoolGrad"}
# Ops whose second input must not be zero for integer types.
NONZERO_DIVISOR_OPS = {"RealDiv", "Div", "FloorDiv", "FloorMod", "TruncateDiv",
                       "TruncateMod", "Mod", "DivNoNan"}
# Ops where TensorFlow's CPU kernel and a device may round differently
# (accumulation order): compared with a looser tolerance.
ACCUMULATING_OPS = {"MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "Conv2D",
                    "Conv2DBackpropFilter", "Conv2DBackpropInput", "AvgPool", "AvgPoolGrad",
                    "BiasAddGrad", "SoftmaxCrossEntropyWithLogits",
                    "SparseSoftmaxCrossEntropyWithLogits", "FusedBatchNormV3",
                    "FusedBatchNormGradV3", "Cumsum", "UnsortedSegmentSum", "AddN",
                    "StatelessRandomNormalV2", "StatelessTruncatedNormalV2",
                    "Sum", "Mean", "Softmax", "LogSoftmax", "Prod"}
# Calls of the op traced into one tf.function graph; the graph runs as many
# times as it takes to make `iterations` calls (tracing is slow per op).
CALLS_PER_GRAPH = 10


class NoRecipe(Exception):
    """This script does not know how to build inputs for the op."""


class NoTensorFlowOp(Exception):
    """TensorFlow has no op of that name: nothing to compare with."""


def _tolerance(dtype, op: str) -> tuple[float, float]:
    """(rtol, atol) for comparing a device result with TensorFlow's CPU."""
    import tensorflow as tf
    dtype = tf.as_dtype(dtype)
    if dtype in (tf.bfloat16,):
        return (1e-1, 1.0) if op in ACCUMULATING_OPS else (4e-2, 4e-2)
    if dtype == tf.float16:
        return (5e-2, 0.5) if op in ACCUMULATING_OPS else (1e-2, 1e-2)
    if dtype in (tf.float32, tf.complex64):
        return (1e-4, 1e-4) if op in ACCUMULATING_OPS else (2e-6, 1e-6)
    if dtype in (tf.float64, tf.complex128):
        return 1e-10, 1e-12
    return 0.0, 0.0


def _random(rng: np.random.Generator, shape, dtype, op: str, role: str = "x"):
    """A fresh random CPU tensor of `dtype` suited to `op`."""
    import tensorflow as tf
    dtype = tf.as_dtype(dtype)
    if dtype == tf.bool:
        return tf.constant(rng.random(shape) < 0.5)
    if dtype.is_integer:
        low = 1 if (op in POSITIVE_INPUT_OPS or (role == "y" and op in NONZERO_DIVISOR_OPS)) else (
            0 if dtype.is_unsigned else -9)
        values = rng.integers(low, 10, size=shape)
        if role == "y" and op in NONZERO_DIVISOR_OPS and not dtype.is_unsigned:
            values = values * rng.choice([-1, 1], size=shape)
        return tf.constant(values.astype(dtype.as_numpy_dtype))
    if dtype.is_complex:   # both parts random
        values = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
        return tf.constant((values * 2.0).astype(dtype.as_numpy_dtype))
    if op in POSITIVE_INPUT_OPS:
        values = rng.uniform(0.25, 4.0, size=shape)
    else:
        values = rng.standard_normal(shape) * 2.0
    if role == "y" and op in NONZERO_DIVISOR_OPS:
        values = np.where(np.abs(values) < 0.25, 0.5, values)
    return tf.cast(tf.constant(values.astype(np.float32)), dtype)


def _type_attrs(op: str) -> tuple:
    """TensorFlow's OpDef of `op` and {name: AttrDef} of its type attrs."""
    from tensorflow.python.framework import op_def_registry
    op_def = op_def_registry.get(op)
    if op_def is None:
        raise NoTensorFlowOp(f"TensorFlow has no op named {op!r}")
    return op_def, {a.name: a for a in op_def.attr if a.type == "type"}


def _generic_inputs(op: str, types: dict, rng, large: bool) -> dict:
    """Inputs for an op whose inputs are all tensors of its type attrs
    (elementwise ops): shapes broadcast ([rows, cols] with [cols]) where there
    are two inputs. Raises NoRecipe for anything else."""
    op_def, _ = _type_attrs(op)
    kwargs = {}
    for attr in op_def.attr:
        if attr.type != "type" and not attr.HasField("default_value"):
            raise NoRecipe(f"{op} has a required attribute {attr.name!r}")
    tensor_inputs = list(op_def.input_arg)
    rows, cols = (64, 512) if large else (3, 4)
    import tensorflow as tf
    defaults = {a.name: tf.as_dtype(a.default_value.type) for a in op_def.attr
                if a.type == "type" and a.HasField("default_value")}
    for i, arg in enumerate(tensor_inputs):
        if arg.number_attr or arg.type_list_attr:
            raise NoRecipe(f"{op}: input {arg.name!r} is not a single tensor")
        if arg.type_attr:
            dtype = types.get(arg.type_attr, defaults.get(arg.type_attr))
            if dtype is None or arg.type_attr not in types:
                raise NoRecipe(f"{op}: input {arg.name!r} needs values the checker cannot "
                               "guess")
        else:
            dtype = tf.as_dtype(arg.type)  # a fixed type, e.g. bool for LogicalAnd
        shape = [cols] if (i > 0 and op in BROADCASTING_OPS) else [rows, cols]
        kwargs[arg.name] = _random(rng, shape, dtype, op, role="x" if i == 0 else "y")
    for name, dtype in types.items():
        if name not in {a.type_attr for a in tensor_inputs}:
            kwargs[name] = dtype  # an output-only type attr
    return kwargs


def _inputs(op: str, types: dict, rng, large: bool = False) -> dict:
    """Keyword arguments of tf.raw_ops.<op> for the given type attrs; `large`
    gives inputs of a few hundred KiB (the stress loop: big blocks are what a
    use-after-free corrupts visibly)."""
    import tensorflow as tf
    t = types.get("T")

    def rand(small, big, dtype=t):
        return _random(rng, big if large else small, dtype, op)

    if op == "MatMul":
        return {"a": rand([3, 5], [256, 16]), "b": rand([5, 4], [16, 256])}
    if op in ("BatchMatMul", "BatchMatMulV2"):
        return {"x": rand([2, 3, 5], [4, 64, 64]), "y": rand([2, 5, 4], [4, 64, 64])}
    if op == "Conv2D":
        return {"input": rand([2, 6, 6, 3], [1, 64, 64, 4]),
                "filter": rand([3, 3, 3, 4], [3, 3, 4, 4]),
                "strides": [1, 1, 1, 1], "padding": "SAME"}
    if op in ("Sum", "Mean", "Max", "Min", "Prod", "All", "Any"):
        return {"input": rand([3, 4, 5], [32, 64, 32]),
                "axis": tf.constant([1], types.get("Tidx", tf.int32)), "keep_dims": False}
    if op == "Transpose":
        return {"x": rand([2, 3, 4], [16, 64, 64]),
                "perm": tf.constant([2, 0, 1], types.get("Tperm", tf.int32))}
    if op == "Reshape":
        return {"tensor": rand([3, 4], [64, 512]),
                "shape": tf.constant([2, 6] if not large else [512, 64],
                                     types.get("Tshape", tf.int32))}
    if op == "Fill":
        return {"dims": tf.constant([2, 3] if not large else [128, 256],
                                    types.get("index_type", tf.int32)),
                "value": rand([], [])}
    if op == "Cast":
        x = rand([3, 4], [64, 512], types["SrcT"])
        if types["DstT"].is_unsigned and types["SrcT"].is_floating:
            x = tf.abs(x)  # negative floats to unsigned are undefined in C and C++
        return {"x": x, "DstT": types["DstT"]}
    if op in ("Real", "Imag", "Angle", "ComplexAbs"):  # Tout: the type of the parts
        return {"x" if op == "ComplexAbs" else "input": rand([3, 4], [64, 512]),
                "Tout": t.real_dtype}
    if op == "Complex":
        return {"real": rand([3, 4], [64, 512]), "imag": rand([4], [512]),
                "Tout": tf.complex64 if t == tf.float32 else tf.complex128}
    if op == "CheckNumerics":
        return {"tensor": rand([3, 4], [64, 512]), "message": "checked"}
    if op in ("Softmax", "LogSoftmax"):
        return {"logits": rand([3, 5], [64, 512])}
    recipe = _more_inputs(op, types, rng, large, rand)
    return recipe if recipe is not None else _generic_inputs(op, types, rng, large)


def _batch_norm_grad(y_backprop, x, scale, offset):
    """FusedBatchNormGradV3 after a training-mode FusedBatchNormV3 on the same
    device: the reserve spaces that pass between them are device-specific."""
    import tensorflow as tf
    empty = tf.zeros([0], scale.dtype)
    fwd = tf.raw_ops.FusedBatchNormV3(x=x, scale=scale, offset=offset, mean=empty,
                                      variance=empty, is_training=True)
    return tf.raw_ops.FusedBatchNormGradV3(
        y_backprop=y_backprop, x=x, scale=scale, reserve_space_1=fwd.reserve_space_1,
        reserve_space_2=fwd.reserve_space_2, reserve_space_3=fwd.reserve_space_3,
        is_training=True)


# Ops checked together with the op that produces their device-specific inputs.
COMPOSITES = {"FusedBatchNormGradV3": _batch_norm_grad}

# Collective ops need one call on each device of a group at once (and
# TensorFlow's CPU implements some of them only across several devices):
# one op at a time there is nothing to compare.
COLLECTIVE_DETAIL = ("a collective op: it runs only as one call on each device of a group, "
                     "which this one-op comparison does not form")


def _distinct(rng, shape, dtype):
    """Values without ties along the last axis (a permutation of 0..n-1 per
    row, shifted), so ops that pick elements agree on which one."""
    import tensorflow as tf
    n = shape[-1]
    rows = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
    values = np.stack([rng.permutation(n) for _ in range(rows)]).reshape(shape)
    if tf.as_dtype(dtype).is_floating:
        values = values - n // 2
    return tf.cast(tf.constant(values.astype(np.float64)), dtype)


def _more_inputs(op: str, types: dict, rng, large: bool, rand):
    """Recipes for ops with index, shape or list inputs (None: not one)."""
    import tensorflow as tf
    t = types.get("T")
    i32 = tf.int32

    def idx(values, attr):
        return tf.constant(values, types.get(attr, i32))

    rows, cols = (64, 512) if large else (3, 4)
    if op == "AddN":
        return {"inputs": [rand([3, 4], [64, 512]) for _ in range(3)]}
    if op in ("ArgMax", "ArgMin"):
        return {"input": _distinct(rng, [rows, 100], t), "dimension": idx(1, "Tidx")}
    if op in ("AvgPool", "MaxPool"):
        value = rand([2, 8, 8, 3], [4, 32, 32, 8])
        if op == "MaxPool":
            value = _distinct(rng, value.shape.as_list(), t)
        return {"value" if op == "AvgPool" else "input": value, "ksize": [1, 2, 2, 1],
                "strides": [1, 2, 2, 1], "padding": "VALID"}
    if op == "AvgPoolGrad":
        shape = [2, 8, 8, 3] if not large else [4, 32, 32, 8]
        grad = rand([2, 4, 4, 3], [4, 16, 16, 8])
        return {"orig_input_shape": tf.constant(shape, i32), "grad": grad,
                "ksize": [1, 2, 2, 1], "strides": [1, 2, 2, 1], "padding": "VALID"}
    if op == "MaxPoolGrad":
        shape = [2, 8, 8, 3] if not large else [4, 32, 32, 8]
        orig = _distinct(rng, shape, t)
        with tf.device("/CPU:0"):
            out = tf.raw_ops.MaxPool(input=orig, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1],
                                     padding="VALID")
        return {"orig_input": orig, "orig_output": out,
                "grad": _random(rng, out.shape.as_list(), t, op),
                "ksize": [1, 2, 2, 1], "strides": [1, 2, 2, 1], "padding": "VALID"}
    if op == "BroadcastTo":
        return {"input": rand([4], [512]), "shape": idx([rows, cols], "Tidx")}
    if op == "ConcatV2":
        return {"values": [rand([3, 4], [64, 512]), rand([3, 2], [64, 128])],
                "axis": idx(1, "Tidx")}
    if op in ("Conv2DBackpropFilter", "Conv2DBackpropInput"):
        x_shape, f_shape = ([2, 6, 6, 3], [3, 3, 3, 4]) if not large else (
            [1, 32, 32, 4], [3, 3, 4, 4])
        grad = _random(rng, x_shape[:3] + [f_shape[3]], t, op)
        common = {"out_backprop": grad, "strides": [1, 1, 1, 1], "padding": "SAME"}
        if op == "Conv2DBackpropFilter":
            return {"input": _random(rng, x_shape, t, op),
                    "filter_sizes": tf.constant(f_shape, i32), **common}
        return {"input_sizes": tf.constant(x_shape, i32),
                "filter": _random(rng, f_shape, t, op), **common}
    if op == "Cumsum":
        return {"x": rand([3, 4], [64, 512]), "axis": idx(1, "Tidx")}
    if op == "ExpandDims":
        return {"input": rand([3, 4], [64, 512]), "axis": idx(1, "Tdim")}
    if op in ("FusedBatchNormV3", "FusedBatchNormGradV3"):
        u = types.get("U", tf.float32)
        shape = [2, 4, 4, 3] if not large else [4, 16, 16, 8]
        c = shape[-1]
        x = _random(rng, shape, t, op)
        scale, offset = _random(rng, [c], u, op), _random(rng, [c], u, op)
        if op == "FusedBatchNormV3":
            variance = tf.abs(_random(rng, [c], u, op)) + 0.5
            return {"x": x, "scale": scale, "offset": offset,
                    "mean": _random(rng, [c], u, op), "variance": variance,
                    "is_training": False}
        # the reserve spaces are each device's own: see COMPOSITES
        return {"y_backprop": _random(rng, shape, t, op), "x": x, "scale": scale,
                "offset": offset}
    if op == "GatherV2":
        n = 5 if not large else 200
        return {"params": rand([3, 4], [64, 512], types.get("Tparams")),
                "indices": tf.constant(rng.integers(0, rows, n), types.get("Tindices", i32)),
                "axis": idx(0, "Taxis")}
    if op == "GatherNd":
        params = rand([3, 4, 2], [64, 32, 16], types.get("Tparams"))
        n = 5 if not large else 200
        index = np.stack([rng.integers(0, d, n) for d in params.shape[:2]], axis=1)
        return {"params": params, "indices": tf.constant(index, types.get("Tindices", i32))}
    if op == "OneHot":
        return {"indices": tf.constant(rng.integers(-1, 8, rows), types.get("TI", tf.int64)),
                "depth": tf.constant(8, i32), "on_value": tf.cast(tf.constant(1), t),
                "off_value": tf.cast(tf.constant(0), t)}
    if op == "Pack":
        return {"values": [rand([3, 4], [64, 512]) for _ in range(3)], "axis": 1}
    if op == "Unpack":
        return {"value": rand([3, 3, 4], [3, 64, 512]), "num": 3, "axis": 0}
    if op == "Pad":
        return {"input": rand([3, 4], [64, 512]),
                "paddings": tf.constant([[1, 2], [0, 3]], types.get("Tpaddings", i32))}
    if op in ("Select", "SelectV2"):
        cond_shape = [rows] if op == "Select" else [cols]
        a, b = ("x", "y") if op == "Select" else ("t", "e")
        return {"condition": tf.constant(rng.random(cond_shape) < 0.5),
                a: rand([3, 4], [64, 512]), b: rand([3, 4], [64, 512])}
    if op == "Slice":
        return {"input": rand([3, 4], [64, 512]), "begin": idx([1, 0], "Index"),
                "size": idx([rows - 2, cols // 2], "Index")}
    if op == "SparseSoftmaxCrossEntropyWithLogits":
        return {"features": rand([3, 4], [64, 512]),
                "labels": tf.constant(rng.integers(0, cols, rows), types.get("Tlabels", tf.int64))}
    if op == "Split":
        return {"axis": tf.constant(1, i32), "value": rand([3, 4], [64, 512]), "num_split": 2}
    if op.startswith("Stateless") and op.endswith("V2"):
        return {"shape": idx([rows, cols], "Tshape"),
                "key": tf.constant(rng.integers(0, 2**63, 1, dtype=np.uint64), tf.uint64),
                "counter": tf.constant(rng.integers(0, 2**63, 2, dtype=np.uint64), tf.uint64),
                "alg": tf.constant(1, i32), "dtype": types["dtype"]}
    if op in ("StridedSlice", "StridedSliceGrad"):
        begin, end, strides = [1, 0], [rows - 1, cols], [1, 2]
        common = {"begin": idx(begin, "Index"), "end": idx(end, "Index"),
                  "strides": idx(strides, "Index")}
        if op == "StridedSlice":
            return {"input": rand([3, 4], [64, 512]), **common}
        return {"shape": idx([rows, cols], "Index"),
                "dy": _random(rng, [rows - 2, cols // 2], t, op), **common}
    if op == "Tile":
        return {"input": rand([3, 4], [64, 256]), "multiples": idx([2, 1], "Tmultiples")}
    if op == "TopKV2":
        return {"input": _distinct(rng, [rows, 100], t), "k": idx(3, "Tk")}
    if op == "UnsortedSegmentSum":
        return {"data": rand([3, 4], [64, 512]),
                "segment_ids": tf.constant(rng.integers(0, 4, rows), types.get("Tindices", i32)),
                "num_segments": tf.constant(4, types.get("Tnumsegments", i32))}
    if op == "Range":
        d = types.get("Tidx", i32)
        return {"start": tf.constant(0, d), "limit": tf.constant(20 if not large else 5000, d),
                "delta": tf.constant(3, d)}
    return None


def _all_kernel_defs() -> list:
    """Every KernelDef in TensorFlow's kernel registry."""
    from tensorflow.python.framework import kernels
    return list(kernels.get_all_registered_kernels().kernel)


def _plugin_kernels(before: set) -> list:
    """The KernelDefs registered since `before` (serialised KernelDefs taken
    before loading the plugin): the plugin's own. TensorFlow registers
    kernels of its own for "GPU" even in tensorflow-cpu (data, control flow,
    Reshape...), which a plugin of that type must not be credited with."""
    return [k for k in _all_kernel_defs() if k.SerializeToString() not in before]


def _registered_kernels(device_type: str, plugin_kernels: list) -> dict:
    """Op name -> list of {type attr: allowed dtypes} of each of the
    plugin's kernels for the device type."""
    import tensorflow as tf
    out: dict = {}
    for kernel in plugin_kernels:
        if kernel.device_type != device_type:
            continue
        constraints = {c.name: [tf.as_dtype(x) for x in c.allowed_values.list.type]
                       for c in kernel.constraint}
        out.setdefault(kernel.op, []).append(constraints)
    return out


def _overlap(a, b) -> bool:
    """Whether KernelDefs `a` and `b` can both match one node at the same
    priority (TensorFlow then refuses the node: "Multiple OpKernel
    registrations match NodeDef at the same priority")."""
    if (a.op, a.device_type, a.label, a.priority) != (b.op, b.device_type, b.label, b.priority):
        return False
    ta = {c.name: set(c.allowed_values.list.type) for c in a.constraint}
    tb = {c.name: set(c.allowed_values.list.type) for c in b.constraint}
    return all(ta[n] & tb[n] for n in set(ta) & set(tb))


def kernel_clashes(plugin_kernels: list, builtin: list) -> list[dict]:
    """The plugin's kernels that overlap one of TensorFlow's own."""
    import tensorflow as tf
    out = []
    for k in plugin_kernels:
        for b in builtin:
            if _overlap(k, b):
                types = ",".join(
                    c.name + "=" + "|".join(tf.as_dtype(t).name for t in c.allowed_values.list.type)
                    for c in k.constraint)
                out.append({"op": k.op, "device_type": k.device_type, "types": types,
                            "priority": k.priority,
                            "tensorflow_kernel": b.SerializeToString().hex()})
                break
    return out


def _combinations(constraints: dict) -> list[dict]:
    """Each choice of one dtype per type attr (every dtype of the first
    attr; for two attrs, every pair)."""
    combos = [{}]
    for name, allowed in sorted(constraints.items()):
        combos = [dict(c, **{name: d}) for c in combos for d in allowed]
    return combos


def _to_numpy(value):
    """A result (tensor or list of tensors) as a list of float64/int numpy
    arrays, bfloat16 and half widened so numpy can compare them."""
    values = value if isinstance(value, (list, tuple)) else [value]
    out = []
    for v in values:
        array = np.asarray(v)
        if array.dtype.kind == "V" or str(array.dtype) in ("bfloat16", "float16"):
            array = array.astype(np.float32)
        out.append(array)
    return out


def _compare(op: str, dtype, expected: list, actual: list) -> str | None:
    """None when `actual` matches `expected`, else what differs."""
    if len(expected) != len(actual):
        return f"{len(actual)} outputs, TensorFlow CPU gives {len(expected)}"
    keep = COMPARED_OUTPUTS.get(op, len(expected))
    expected, actual = expected[:keep], actual[:keep]
    rtol, atol = _tolerance(dtype, op)
    for i, (e, a) in enumerate(zip(expected, actual)):
        if e.shape != a.shape:
            return f"output {i}: shape {list(a.shape)}, TensorFlow CPU gives {list(e.shape)}"
        if e.dtype.kind in "fc":
            ok = np.allclose(a, e, rtol=rtol, atol=atol, equal_nan=True)
        else:
            ok = np.array_equal(a, e)
        if not ok:
            diff = np.abs(a.astype(np.float64) - e.astype(np.float64))
            where = np.unravel_index(np.nanargmax(diff), diff.shape) if diff.size else ()
            return (f"output {i}: largest difference {np.nanmax(diff):.3g} at index "
                    f"{list(map(int, where))} (device {a[where]!r}, TensorFlow CPU {e[where]!r})")
    return None


def _check_combo(op: str, types: dict, device: str, iterations: int, rng,
                 large: bool, modes: tuple = ("eager", "tf.function")) -> dict:
    """Runs one (op, dtypes) combination `iterations` times in each of
    `modes`; returns its result entry."""
    import tensorflow as tf
    name = ",".join(f"{k}={v.name}" for k, v in sorted(types.items()))
    entry = {"op": op, "types": name}
    fn = COMPOSITES.get(op) or getattr(tf.raw_ops, op, None)
    if fn is None:
        return dict(entry, status="no_reference", detail=f"TensorFlow has no op named {op!r}")
    if op.startswith("Collective"):
        return dict(entry, status="no_reference", detail=COLLECTIVE_DETAIL)
    try:
        kwargs = _inputs(op, types, rng, large)
    except NoTensorFlowOp as exc:
        return dict(entry, status="no_reference", detail=str(exc))
    except NoRecipe as exc:
        return dict(entry, status="no_recipe", detail=str(exc))
    except Exception as exc:  # a recipe that does not fit this kernel
        return dict(entry, status="no_recipe",
                    detail=f"building inputs failed: {type(exc).__name__}: {exc}")
    first_dtype = next(iter(types.values())) if types else tf.float32
    try:
        with tf.device("/CPU:0"):
            expected = _to_numpy(fn(**kwargs))
    except Exception as exc:  # TensorFlow's CPU has no such kernel
        return dict(entry, status="no_reference",
                    detail=f"TensorFlow CPU: {type(exc).__name__}: {str(exc).splitlines()[0]}")

    tensor_args = {k: v for k, v in kwargs.items() if isinstance(v, tf.Tensor)}
    other_args = {k: v for k, v in kwargs.items() if k not in tensor_args}

    per_graph = min(iterations, CALLS_PER_GRAPH)

    @tf.function(autograph=False)
    def graph_calls(**tensors):
        # Several calls in one graph: TensorFlow's executor runs them
        # concurrently and frees each buffer as soon as its last user is queued.
        # (an unused call here would be pruned by TensorFlow's optimizer)
        return [fn(**tensors, **other_args) for _ in range(per_graph)]

    problems = []
    for mode in modes:
        try:
            with tf.device(device):
                if mode == "eager":
                    results = []
                    for _ in range(iterations):
                        results.append(fn(**kwargs))
                        fn(**kwargs)  # dropped at once: freed while still queued
                else:
                    results = []
                    while len(results) < iterations:
                        results.extend(graph_calls(**tensor_args))
                    results = results[:iterations]
            last = results[-1] if not isinstance(results[-1], (list, tuple)) else results[-1][0]
            if mode == "eager" and not last.device.endswith(device.split("/device:")[-1]):
                problems.append(f"{mode}: ran on {last.device}, not {device}")
                continue
            first = None
            for k, result in enumerate(results):  # read at the end, all of them
                values = _to_numpy(result)
                if first is not None and all(np.array_equal(v, f, equal_nan=True)
                                             for v, f in zip(values, first)):
                    continue  # same bits as the first call, already compared
                why = _compare(op, first_dtype, expected, values)
                if why:
                    problems.append(f"{mode}: call {k + 1} of {iterations}: {why}")
                    break
                first = first if first is not None else values
        except Exception as exc:
            problems.append(f"{mode}: {type(exc).__name__}: {str(exc).splitlines()[0]}")
    if problems:
        return dict(entry, status="mismatch", detail="; ".join(problems))
    return dict(entry, status="ok")


def _primary(combos: list[dict]) -> dict:
    """The combination stressed with the full iteration count: float32
    where the kernel takes it, else the first."""
    import tensorflow as tf
    for types in combos:
        if all(v == tf.float32 for v in types.values()):
            return types
    return combos[0]


def run(plugin: str, iterations: int, sweep_iterations: int, only: list[str] | None,
        seed: int, registrations_only: bool = False) -> dict:
    """Loads `plugin` into TensorFlow and checks every registered kernel:
    each op's float32 kernel (else its first) `iterations` times eagerly and
    as many through tf.function, every other dtype `sweep_iterations` times
    eagerly."""
    import tensorflow as tf
    from tensorflow.python.framework import load_library

    before = {d.device_type for d in tf.config.list_physical_devices()}
    builtin = _all_kernel_defs()
    load_library.load_pluggable_device_library(plugin)
    plugin_kernels = _plugin_kernels({k.SerializeToString() for k in builtin})
    added = sorted({d.device_type for d in tf.config.list_physical_devices()} - before)
    tf.config.set_soft_device_placement(False)
    tf.get_logger().setLevel("ERROR")  # one tf.function per op and dtype is intended
    report = {"tensorflow": tf.__version__, "plugin": plugin, "device_types": added,
              "iterations": iterations, "sweep_iterations": sweep_iterations,
              "plugin_kernels": len(plugin_kernels),
              "clashes": kernel_clashes(plugin_kernels, builtin), "results": []}
    if registrations_only:
        return report
    rng = np.random.default_rng(seed)
    for device_type in added:
        device = f"/device:{device_type}:0"
        for op, kernel_constraints in sorted(_registered_kernels(device_type,
                                                                 plugin_kernels).items()):
            if only and op not in only:
                continue
            combos, seen = [], set()
            for constraints in kernel_constraints:
                for types in _combinations(constraints):
                    key = tuple(sorted((k, v.name) for k, v in types.items()))
                    if key not in seen:
                        seen.add(key)
                        combos.append(types)
            primary = _primary(combos)
            for types in combos:
                count = iterations if types is primary else sweep_iterations
                started = time.monotonic()
                # every dtype eagerly; the stressed one also through tf.function
                modes = ("eager", "tf.function") if types is primary else ("eager",)
                entry = _check_combo(op, types, device, count, rng, large=types is primary,
                                     modes=modes)
                entry["modes"] = list(modes)
                entry["seconds"] = round(time.monotonic() - started, 3)
                report["results"].append(dict(entry, device_type=device_type,
                                              iterations=count))
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plugin", help="path of the plugin's shared object")
    parser.add_argument("--iterations", type=int, default=200,
                        help="calls per op and mode for its float32 kernel (default 200)")
    parser.add_argument("--sweep-iterations", type=int, default=4,
                        help="calls per op and mode for every other dtype (default 4)")
    parser.add_argument("--op", action="append", help="check only this op (repeatable)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--registrations-only", action="store_true",
                        help="load the plugin and report its kernels' clashes with "
                             "TensorFlow's own, run nothing (needs no device)")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    report_stream = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # anything TensorFlow prints goes to stderr
    started = time.monotonic()
    try:
        report = run(os.path.abspath(args.plugin), args.iterations, args.sweep_iterations,
                     args.op, seed, args.registrations_only)
    except ImportError as exc:
        report = {"error": "tensorflow_missing", "detail": f"{type(exc).__name__}: {exc}"}
    except Exception as exc:
        report = {"error": "load_failed", "detail": f"{type(exc).__name__}: {exc}",
                  "traceback": traceback.format_exc()}
    report["seed"] = seed
    report["seconds"] = round(time.monotonic() - started, 2)
    report_stream.write(json.dumps(report) + "\n")
    report_stream.flush()
    return 0 if "error" not in report else 1


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.exit(main())
