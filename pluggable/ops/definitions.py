"""The built-in op set: TensorFlow's names, attributes and shape inference.

Each op is defined once here in TensorFlow's op-spec syntax. Shape functions
take the input shapes, the attribute values and the values of host-memory
inputs (axes, permutations, target shapes), and return the output shapes or
raise InvalidArgumentError naming the op.
"""
from __future__ import annotations

import math

import numpy as np

from ..framework.errors import InvalidArgumentError
from ..framework.registry import make_op_def, register_op

_REAL = "{bfloat16, half, float, double, int8, int16, int32, int64, uint8}"
_FLOAT = "{bfloat16, half, float, double}"
_ALL = ("{bool, int8, uint8, int16, int32, int64, half, bfloat16, float, double, complex64, "
        "complex128}")
# TensorFlow's complex types, which its arithmetic and transcendental ops take.
_COMPLEX = "complex64, complex128"
_ALL_AND_STRING = f"{_ALL[:-1]}, string}}"
_INDEX = "{int32, int64} = DT_INT32"
# The narrow element types (dtypes.LIMITED but uint16): Cast converts them
# and the data-movement ops below carry them.
_NARROW = ("float8_e5m2, float8_e4m3fn, float8_e4m3fnuz, float8_e5m2fnuz, int4, uint4, int2, "
           "uint2, float4_e2m1fn")
_CASTABLE = f"{_ALL[:-1]}, uint16, uint32, uint64, {_NARROW}}}"


def _err(op: str, msg: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"{op}: {msg}", op=op)


def broadcast_shapes(op: str, a: tuple, b: tuple) -> tuple:
    """numpy/TensorFlow broadcasting of two shapes."""
    if a == b:
        return a
    if not b:        # a scalar operand (a Python number, say): the other shape
        return a
    if not a:
        return b
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x != y and x != 1 and y != 1:
            raise _err(op, f"incompatible shapes for broadcasting: {list(a)} and {list(b)}")
        out.append(y if x == 1 else x)
    return tuple(reversed(out))


def _binary(op):
    def fn(shapes, attrs, values):
        return [broadcast_shapes(op, shapes[0], shapes[1])]
    return fn


def _same(shapes, attrs, values):
    return [shapes[0]]


def _matmul(shapes, attrs, values):
    a, b = shapes
    if len(a) != 2 or len(b) != 2:
        raise _err("MatMul", f"both inputs must be matrices (rank 2), got shapes "
                   f"{list(a)} and {list(b)}")
    m, ka = (a[1], a[0]) if attrs["transpose_a"] else a
    kb, n = (b[1], b[0]) if attrs["transpose_b"] else b
    if ka != kb:
        raise _err("MatMul", f"inner dimensions do not match: a is {list(a)} "
                   f"(transpose_a={attrs['transpose_a']}), b is {list(b)} "
                   f"(transpose_b={attrs['transpose_b']}): {ka} != {kb}")
    return [(m, n)]


def host_ints(v) -> list:
    """The values of a host-memory integer input (axes, a permutation, a
    target shape) as a flat list of Python ints."""
    if type(v) is not np.ndarray:
        v = np.asarray(v)
    if v.dtype.kind not in "iub":
        v = v.astype(np.int64)
    return v.tolist() if v.ndim == 1 else v.reshape(-1).tolist()


def normalize_axes(op: str, axes: np.ndarray, rank: int) -> tuple:
    flat = host_ints(axes)
    if len(flat) == 1 and -rank <= flat[0] < rank:  # the common case, one axis
        return (flat[0] % rank,)
    out = []
    for ax in flat:
        if not -rank <= ax < rank:  # a scalar has no axis to reduce, as in TensorFlow
            raise _err(op, f"Invalid reduction dimension {ax} for an input of rank {rank} "
                       f"(axis {ax} is out of range: it must lie in [-{rank}, {rank}))" if rank else
                       f"Invalid reduction dimension {ax} for an input of rank 0 (a scalar "
                       "has no axis to reduce; pass axis=[] or None)")
        ax %= rank
        if ax in out:
            raise _err(op, f"axis {ax} is listed twice in reduction_indices {flat}")
        out.append(ax)
    return tuple(sorted(out))


def _reduce(op):
    def fn(shapes, attrs, values):
        s = shapes[0]
        axes = normalize_axes(op, values["reduction_indices"], len(s))
        if attrs["keep_dims"]:
            return [tuple(1 if i in axes else d for i, d in enumerate(s))]
        if len(axes) == 1 and s:
            a = axes[0]
            return [s[:a] + s[a + 1:]]
        return [tuple(d for i, d in enumerate(s) if i not in axes)]
    return fn


def _softmax(shapes, attrs, values):
    if len(shapes[0]) < 1:
        raise _err("Softmax", "logits must have rank >= 1, got a scalar")
    return [shapes[0]]


def _transpose(shapes, attrs, values):
    s = shapes[0]
    perm = host_ints(values["perm"])
    if sorted(perm) != list(range(len(s))):
        raise _err("Transpose", f"perm {perm} is not a permutation of 0..{len(s) - 1} "
                   f"for a tensor of shape {list(s)}")
    return [tuple(s[p] for p in perm)]


def reshape_target(shape: tuple, target: np.ndarray) -> tuple:
    dims = host_ints(target)
    n = math.prod(shape)
    if dims.count(-1) > 1:
        raise _err("Reshape", f"only one dimension may be -1, got {dims}")
    if any(d < -1 for d in dims):
        raise _err("Reshape", f"dimensions must be >= -1, got {dims}")
    known = math.prod(d for d in dims if d != -1)
    if -1 in dims:
        if known == 0 or n % known:
            raise _err("Reshape", f"cannot reshape a tensor of shape {list(shape)} "
                       f"({n} elements) into {dims}")
        dims[dims.index(-1)] = n // known
    elif known != n:
        raise _err("Reshape", f"cannot reshape a tensor of shape {list(shape)} "
                   f"({n} elements) into {dims} ({known} elements)")
    return tuple(dims)


def _reshape(shapes, attrs, values):
    return [reshape_target(shapes[0], values["shape"])]


def _fill(shapes, attrs, values):
    d = np.asarray(values["dims"])
    if d.ndim != 1:
        raise _err("Fill", f"dims must be a vector, got shape {list(d.shape)}")
    dims = tuple(d.tolist())  # Python ints (one call: Fill runs per zeros/ones/fill)
    if any(x < 0 for x in dims):
        raise _err("Fill", f"dims must be non-negative, got {list(dims)}")
    if shapes[1] != ():
        raise _err("Fill", f"value must be a scalar, got shape {list(shapes[1])}")
    return [dims]


def conv2d_geometry(shape, fshape, attrs, op: str = "Conv2D"):
    """Output shape and padding (top, left) of Conv2D in NHWC (errors name `op`)."""
    if attrs["data_format"] != "NHWC":
        raise _err(op, f"data_format {attrs['data_format']!r} is not supported; use 'NHWC'")
    if len(shape) != 4 or len(fshape) != 4:
        raise _err(op, f"input must be rank 4 (NHWC) and filter rank 4 (HWIO), got "
                   f"{list(shape)} and {list(fshape)}")
    strides, dil = list(attrs["strides"]), list(attrs["dilations"])
    if len(strides) != 4 or strides[0] != 1 or strides[3] != 1 or min(strides) < 1:
        raise _err(op, f"strides must be [1, sh, sw, 1] with sh, sw >= 1, got {strides}")
    if len(dil) != 4 or dil[0] != 1 or dil[3] != 1 or min(dil) < 1:
        raise _err(op, f"dilations must be [1, dh, dw, 1] with dh, dw >= 1, got {dil}")
    n, h, w, c = shape
    kh, kw, ci, co = fshape
    if ci != c:
        raise _err(op, f"input has {c} channels but the filter expects {ci}")
    out, pads = [], []
    for size, k, s, d, axis in ((h, kh, strides[1], dil[1], 1), (w, kw, strides[2], dil[2], 2)):
        eff = (k - 1) * d + 1
        if attrs["padding"] == "VALID":
            o = (size - eff) // s + 1 if size >= eff else 0
            pad = 0
        elif attrs["padding"] == "SAME":
            o = -(-size // s)
            pad = max((o - 1) * s + eff - size, 0) // 2
        else:
            ep = list(attrs["explicit_paddings"])
            if len(ep) != 8:
                raise _err(op, f"EXPLICIT padding needs 8 explicit_paddings, got {ep}")
            if any(int(p) < 0 for p in ep):
                raise _err(op, f"explicit_paddings must be nonnegative, got {ep}")
            before, after = ep[2 * axis], ep[2 * axis + 1]
            total = size + before + after
            o = (total - eff) // s + 1 if total >= eff else 0
            pad = before
        out.append(max(o, 0))
        pads.append(pad)
    return (n, out[0], out[1], co), tuple(pads)


def _conv2d(shapes, attrs, values):
    return [conv2d_geometry(shapes[0], shapes[1], attrs)[0]]


def _define(name, inputs, outputs, attrs, shape_fn, host_value_inputs=(), **kw):
    register_op(make_op_def(name, inputs, outputs, attrs, shape_fn=shape_fn,
                            host_value_inputs=tuple(host_value_inputs), **kw))


def define_builtin_ops() -> None:
    for name in ("AddV2", "Sub", "Mul", "RealDiv", "Maximum", "Minimum"):
        types = _REAL if name == "RealDiv" else f"{_REAL[:-1]}, uint16, uint32, uint64}}"
        if name in ("AddV2", "Sub", "Mul", "RealDiv"):
            types = f"{types[:-1]}, {_COMPLEX}}}"
        _define(name, ["x: T", "y: T"], ["z: T"], [f"T: {types}"], _binary(name),
                is_commutative=name in ("AddV2", "Mul", "Maximum", "Minimum"))
    _define("Neg", ["x: T"], ["y: T"], [f"T: {_REAL[:-1]}, {_COMPLEX}}}"], _same)
    _define("Abs", ["x: T"], ["y: T"], [f"T: {_REAL}"], _same)  # ComplexAbs for complex
    for name in ("Exp", "Log", "Sqrt", "Tanh", "Sigmoid"):
        _define(name, ["x: T"], ["y: T"], [f"T: {_FLOAT[:-1]}, {_COMPLEX}}}"], _same)
    _define("Relu", ["features: T"], ["activations: T"], [f"T: {_REAL}"], _same)
    _define("Softmax", ["logits: T"], ["softmax: T"], [f"T: {_FLOAT}"], _softmax)
    _define("MatMul", ["a: T", "b: T"], ["product: T"],
            ["transpose_a: bool = false", "transpose_b: bool = false",
             f"T: {{bfloat16, half, float, double, int32, int64, {_COMPLEX}}}",
             "grad_a: bool = false", "grad_b: bool = false"], _matmul)
    for name in ("Sum", "Mean", "Max", "Min"):
        types = f"{_REAL[:-1]}, {_COMPLEX}}}" if name in ("Sum", "Mean") else _REAL
        _define(name, ["input: T", "reduction_indices: Tidx"], ["output: T"],
                ["keep_dims: bool = false", f"T: {types}", f"Tidx: {_INDEX}"],
                _reduce(name), host_value_inputs=["reduction_indices"])
    _define("Cast", ["x: SrcT"], ["y: DstT"],
            [f"SrcT: {_CASTABLE}", f"DstT: {_CASTABLE}", "Truncate: bool = false"], _same)
    _define("Transpose", ["x: T", "perm: Tperm"], ["y: T"],
            [f"T: {_ALL}", f"Tperm: {_INDEX}"], _transpose, host_value_inputs=["perm"])
    _define("Reshape", ["tensor: T", "shape: Tshape"], ["output: T"],
            [f"T: {_CASTABLE[:-1]}, string}}", f"Tshape: {_INDEX}"], _reshape,
            host_value_inputs=["shape"])
    _define("Fill", ["dims: index_type", "value: T"], ["output: T"],
            [f"T: {_ALL_AND_STRING}", f"index_type: {_INDEX}"], _fill, host_value_inputs=["dims"])
    _define("Identity", ["input: T"], ["output: T"], [f"T: {_CASTABLE[:-1]}, string}}"], _same)
    _define("Conv2D", ["input: T", "filter: T"], ["output: T"],
            [f"T: {{half, bfloat16, float, double, int32}}", "strides: list(int)",
             "use_cudnn_on_gpu: bool = true",
             "padding: {'SAME', 'VALID', 'EXPLICIT'}",
             "explicit_paddings: list(int) = []",
             "data_format: {'NHWC', 'NCHW'} = 'NHWC'",
             "dilations: list(int) = [1, 1, 1, 1]"], _conv2d)
    _define("CheckNumerics", ["tensor: T"], ["output: T"],
            [f"T: {_FLOAT}", "message: string"], _same)
