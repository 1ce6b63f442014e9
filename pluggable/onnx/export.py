"""``pg.onnx.export``: a traced function written as an ONNX model.

The function (a Python function, a ``pg.function`` or a ``ConcreteFunction``)
is traced for the given ``TensorSpec``s in the caller's device scope; each
node of the traced graph is written as ONNX nodes through ``EMITTERS``, the
one op-registry -> ONNX table (the inverse of ``mapping.RULES``): one short
function per op, given the node and the ONNX names of its inputs. Graph
inputs keep their names (``None`` sizes become symbolic dimensions), the
results are ``output_0``, ``output_1``, ... in the order of
``nest.flatten``, and constants and the variables the function reads become
initializers (a variable's current value). TensorFlow layouts (NHWC
convolutions and pooling, HWIO filters) are transposed at the edges of each
ONNX node. The model passes ``onnx.checker.check_model(full_check=True)``.
"""
from __future__ import annotations

import math
import os
from typing import Any, Callable, Sequence

import numpy as np

from ..framework import dtypes, errors
from ..framework.tensor import Tensor
from ..graph.function import ConcreteFunction, Function, TensorSpec, function as pg_function
from ..ops import variables
from . import mapping
from .importer import _onnx

DEFAULT_OPSET = 17   # the first with LayerNormalization
MIN_OPSET = 13       # axes of Squeeze/Unsqueeze/ReduceSum and Split's sizes are inputs

_ONNX_TYPE = {dt: code for code, dt in mapping.ONNX_DTYPES.items()}
_BIG = np.iinfo(np.int64).max


class _Unmapped(Exception):
    """Raised by an emitter for a form of its op it cannot write (the
    message says which); it becomes an UnimplementedError naming the node."""


# ================================================================ the table

EMITTERS: dict[str, Callable] = {}
"""Registry op name -> ``fn(e, node, inputs) -> output names`` (None for an
output the ONNX graph does not compute; reading one is an error)."""


def emits(*ops: str):
    def deco(fn):
        for op in ops:
            EMITTERS[op] = fn
        return fn
    return deco


def _simple(onnx_op: str, *tf_ops: str) -> None:
    @emits(*tf_ops)
    def emit(e, n, x):
        return [e.add(onnx_op, x)]


for _onnx_op, _tf in [("Add", "Add AddV2"), ("Sub", "Sub"), ("Mul", "Mul"),
                      ("Div", "RealDiv"), ("Max", "Maximum"), ("Min", "Minimum"),
                      ("Pow", "Pow"), ("Relu", "Relu"), ("Sigmoid", "Sigmoid"),
                      ("Tanh", "Tanh"), ("Exp", "Exp"), ("Log", "Log"), ("Sqrt", "Sqrt"),
                      ("Abs", "Abs"), ("Neg", "Neg"), ("Floor", "Floor"), ("Ceil", "Ceil"),
                      ("Round", "Round"), ("Sign", "Sign"), ("Reciprocal", "Reciprocal"),
                      ("Erf", "Erf"), ("Sin", "Sin"), ("Cos", "Cos"), ("Tan", "Tan"),
                      ("Asin", "Asin"), ("Acos", "Acos"), ("Atan", "Atan"), ("Sinh", "Sinh"),
                      ("Cosh", "Cosh"), ("Asinh", "Asinh"), ("Acosh", "Acosh"),
                      ("Atanh", "Atanh"), ("Equal", "Equal"), ("Greater", "Greater"),
                      ("Less", "Less"), ("GreaterOrEqual", "GreaterEqual"),
                      ("LessOrEqual", "LessEqual"), ("And", "LogicalAnd"), ("Or", "LogicalOr"),
                      ("Not", "LogicalNot"), ("Identity", "Identity StopGradient"),
                      ("Sum", "AddN"), ("Det", "MatrixDeterminant")]:
    _simple(_onnx_op, *_tf.split())


@emits("NotEqual")
def _not_equal(e, n, x):
    return [e.add("Not", [e.add("Equal", x)])]


@emits("Square")
def _square(e, n, x):
    return [e.add("Mul", [x[0], x[0]])]


@emits("Rsqrt")
def _rsqrt(e, n, x):
    return [e.add("Reciprocal", [e.add("Sqrt", x)])]


@emits("Erfc")
def _erfc(e, n, x):
    return [e.add("Sub", [e.scalar(1, n.out_dtypes[0]), e.add("Erf", x)])]


@emits("Log1p")
def _log1p(e, n, x):
    return [e.add("Log", [e.add("Add", [x[0], e.scalar(1, n.out_dtypes[0])])])]


@emits("Expm1")
def _expm1(e, n, x):
    return [e.add("Sub", [e.add("Exp", x), e.scalar(1, n.out_dtypes[0])])]


@emits("FloorDiv")
def _floor_div(e, n, x):
    if n.out_dtypes[0].is_floating:
        return [e.add("Floor", [e.add("Div", x)])]
    if n.out_dtypes[0].name.startswith("uint"):
        return [e.add("Div", x)]
    # (a - a mod b) / b is exact, and Mod with fmod=0 takes the divisor's sign
    return [e.add("Div", [e.add("Sub", [x[0], e.add("Mod", x, fmod=0)]), x[1]])]


@emits("FloorMod")
def _floor_mod(e, n, x):
    if not n.out_dtypes[0].is_floating:
        return [e.add("Mod", x, fmod=0)]
    q = e.add("Floor", [e.add("Div", x)])
    return [e.add("Sub", [x[0], e.add("Mul", [x[1], q])])]


@emits("Gelu")
def _gelu(e, n, x):
    approx = bool(n.attrs.get("approximate", False))
    if e.opset >= 20:
        return [e.add("Gelu", x, approximate="tanh" if approx else "none")]
    t = n.out_dtypes[0]
    half = e.add("Mul", [x[0], e.scalar(0.5, t)])
    if approx:   # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        cube = e.add("Mul", [e.add("Mul", [x[0], x[0]]), x[0]])
        inner = e.add("Add", [x[0], e.add("Mul", [cube, e.scalar(0.044715, t)])])
        th = e.add("Tanh", [e.add("Mul", [inner, e.scalar(math.sqrt(2 / math.pi), t)])])
        return [e.add("Mul", [half, e.add("Add", [th, e.scalar(1, t)])])]
    erf = e.add("Erf", [e.add("Mul", [x[0], e.scalar(1 / math.sqrt(2), t)])])
    return [e.add("Mul", [half, e.add("Add", [erf, e.scalar(1, t)])])]


@emits("Softmax", "LogSoftmax")
def _softmax(e, n, x):
    return [e.add(n.op, x, axis=-1)]


@emits("Cast")
def _cast(e, n, x):
    src, dst = e.dtype(n, 0), n.attrs["DstT"]
    if src is dst:
        return [e.add("Identity", x)]
    return [e.add("Cast", x, to=e.onnx_type(dst, n))]


@emits("Select", "SelectV2")
def _select(e, n, x):
    cond = x[0]
    cr, tr = e.shape(n, 0), e.shape(n, 1)
    if n.op == "Select" and cr is not None and len(cr) == 1 and (tr is None or len(tr) != 1):
        if tr is None:
            raise _Unmapped("Select of a vector condition needs the rank of its values")
        cond = e.add("Unsqueeze", [cond, e.const(np.arange(1, len(tr), dtype=np.int64))])
    return [e.add("Where", [cond, x[1], x[2]])]


# ---------------------------------------------------------------- matrices

@emits("MatMul")
def _matmul(e, n, x):
    a, b = x
    if n.attrs.get("transpose_a"):
        a = e.add("Transpose", [a], perm=[1, 0])
    if n.attrs.get("transpose_b"):
        b = e.add("Transpose", [b], perm=[1, 0])
    return [e.add("MatMul", [a, b])]


def _swap_last(e, n, i, name):
    r = e.rank(n, i, "an adjoint operand")
    perm = list(range(r))
    perm[-2:] = [r - 1, r - 2]
    return e.add("Transpose", [name], perm=perm)


@emits("BatchMatMulV2")
def _batch_matmul(e, n, x):
    a = _swap_last(e, n, 0, x[0]) if n.attrs.get("adj_x") else x[0]
    b = _swap_last(e, n, 1, x[1]) if n.attrs.get("adj_y") else x[1]
    return [e.add("MatMul", [a, b])]


@emits("Einsum")
def _einsum(e, n, x):
    return [e.add("Einsum", x, equation=n.attrs["equation"])]


@emits("BiasAdd")
def _bias_add(e, n, x):
    if n.attrs.get("data_format", "NHWC") in ("NHWC", "NDHWC", b"NHWC"):
        return [e.add("Add", x)]
    s = e.shape(n, 0)
    if s is not None:
        axes = e.const(np.arange(1, len(s) - 1, dtype=np.int64))
    else:   # the bias' trailing axes from the value's rank when the graph runs
        r = e.add("Size", [e.add("Shape", [x[0]])])
        one = e.const(np.array(1, np.int64))
        axes = e.add("Range", [one, e.add("Sub", [r, one]), one])
    return [e.add("Add", [x[0], e.add("Unsqueeze", [x[1], axes])])]


# ---------------------------------------------------------------- shapes

@emits("Reshape")
def _reshape(e, n, x):
    shape = e.value(n, 1)
    if shape is not None:
        attrs = {"allowzero": 1} if (shape == 0).any() else {}
        if attrs and e.opset < 14:
            raise _Unmapped("a Reshape to a size-0 dimension needs opset 14 or later")
        return [e.add("Reshape", [x[0], e.const(shape.astype(np.int64))], **attrs)]
    return [e.add("Reshape", [x[0], e.int64(n, 1, x[1])])]


@emits("Transpose")
def _transpose(e, n, x):
    perm = e.static(n, 1, "the permutation")
    return [e.add("Transpose", [x[0]], perm=[int(p) for p in perm.reshape(-1)])]


@emits("ExpandDims")
def _expand_dims(e, n, x):
    return [e.add("Unsqueeze", [x[0], e.int64(n, 1, x[1], shape=[1])])]


@emits("Squeeze")
def _squeeze(e, n, x):
    dims = list(n.attrs.get("squeeze_dims") or [])
    if not dims:
        return [e.add("Squeeze", x)]
    return [e.add("Squeeze", [x[0], e.const(np.array(dims, np.int64))])]


@emits("Shape", "Size")
def _shape(e, n, x):
    out = e.add(n.op, x)
    if n.attrs.get("out_type", dtypes.int32) is dtypes.int64:
        return [out]
    return [e.add("Cast", [out], to=e.onnx_type(n.attrs["out_type"], n))]


@emits("Rank")
def _rank(e, n, x):
    r = e.add("Size", [e.add("Shape", x)])
    return [e.add("Cast", [r], to=e.onnx_type(dtypes.int32, n))]


@emits("Fill")
def _fill(e, n, x):
    return [e.add("Expand", [x[1], e.int64(n, 0, x[0])])]


@emits("ZerosLike", "OnesLike")
def _zeros_like(e, n, x):
    v = e.scalar(0 if n.op == "ZerosLike" else 1, n.out_dtypes[0])
    return [e.add("Expand", [v, e.add("Shape", x)])]


@emits("BroadcastTo")
def _broadcast_to(e, n, x):
    return [e.add("Expand", [x[0], e.int64(n, 1, x[1])])]


@emits("Tile")
def _tile(e, n, x):
    return [e.add("Tile", [x[0], e.int64(n, 1, x[1])])]


@emits("ConcatV2")
def _concat(e, n, x):
    axis = e.static_int(n, len(x) - 1, "the axis")
    return [e.add("Concat", x[:-1], axis=axis)]


@emits("Pack")
def _pack(e, n, x):
    axis = int(n.attrs.get("axis", 0))
    ax = e.const(np.array([axis], np.int64))
    return [e.add("Concat", [e.add("Unsqueeze", [v, ax]) for v in x], axis=axis)]


def _split_equal(e, x, axis: int, count: int) -> list:
    extra = {"num_outputs": count} if e.opset >= 18 else {}
    return e.add("Split", [x], n_out=count, axis=axis, **extra)


@emits("Unpack")
def _unpack(e, n, x):
    axis, num = int(n.attrs.get("axis", 0)), int(n.attrs["num"])
    ax = e.const(np.array([axis], np.int64))
    parts = _split_equal(e, x[0], axis, num)
    return [e.add("Squeeze", [p, ax]) for p in parts]


@emits("Split")
def _split(e, n, x):
    axis = e.static_int(n, 0, "the split dimension")
    return _split_equal(e, x[1], axis, int(n.attrs["num_split"]))


@emits("Slice")
def _slice(e, n, x):
    begin, size = e.value(n, 1), e.value(n, 2)
    if begin is not None and size is not None:
        begin, size = begin.astype(np.int64), size.astype(np.int64)
        ends = np.where(size == -1, _BIG, begin + size)
        axes = np.arange(len(begin), dtype=np.int64)
        return [e.add("Slice", [x[0], e.const(begin), e.const(ends), e.const(axes)])]
    bs = e.shape(n, 1)
    if bs is None or bs[0] is None:
        raise _Unmapped("a Slice needs the length of its begin vector")
    b, s = e.int64(n, 1, x[1]), e.int64(n, 2, x[2])
    ends = e.add("Where", [e.add("Equal", [s, e.const(np.array(-1, np.int64))]),
                           e.const(np.array(_BIG, np.int64)), e.add("Add", [b, s])])
    return [e.add("Slice", [x[0], b, ends, e.const(np.arange(bs[0], dtype=np.int64))])]


@emits("StridedSlice")
def _strided_slice(e, n, x):
    begin = e.static(n, 1, "the begin indices").astype(np.int64).reshape(-1)
    end = e.static(n, 2, "the end indices").astype(np.int64).reshape(-1)
    strides = e.static(n, 3, "the strides").astype(np.int64).reshape(-1)
    a = n.attrs
    bm, em, elm, nm, sm = (int(a.get(k, 0)) for k in (
        "begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask"))
    rank = e.rank(n, 0, "a strided slice")
    specs = len(begin)
    dims_named = sum(1 for i in range(specs) if not (elm >> i) & 1 and not (nm >> i) & 1)
    starts, ends, steps, axes, shrink, new_axes = [], [], [], [], [], []
    dim = out = 0
    for i in range(specs):
        if (elm >> i) & 1:
            k = rank - dims_named
            dim, out = dim + k, out + k
            continue
        if (nm >> i) & 1:
            new_axes.append(out)
            out += 1
            continue
        st = int(strides[i])
        if st == 0:
            raise _Unmapped("a strided slice with stride 0")
        if (sm >> i) & 1:
            b = int(begin[i])
            starts.append(b)
            ends.append(_BIG if b == -1 else b + 1)
            steps.append(1)
            shrink.append(dim)
        else:
            starts.append((0 if st > 0 else _BIG) if (bm >> i) & 1 else int(begin[i]))
            ends.append((_BIG if st > 0 else -_BIG) if (em >> i) & 1 else int(end[i]))
            steps.append(st)
            out += 1
        axes.append(dim)
        dim += 1
    if not elm:   # dimensions past the spec are taken whole
        dim = rank
    if dim != rank:
        raise _Unmapped(f"a strided slice of {specs} entries over a rank-{rank} input")
    y = x[0]
    if axes:
        y = e.add("Slice", [y] + [e.const(np.array(v, np.int64))
                                  for v in (starts, ends, axes, steps)])
    if shrink:
        y = e.add("Squeeze", [y, e.const(np.array(shrink, np.int64))])
    if new_axes:
        y = e.add("Unsqueeze", [y, e.const(np.array(new_axes, np.int64))])
    return [y if y is not x[0] else e.add("Identity", [y])]


@emits("Pad")
def _pad(e, n, x):
    p = e.value(n, 1)
    if p is not None:
        pads = e.const(np.concatenate([p[:, 0], p[:, 1]]).astype(np.int64))
    else:
        pads = e.add("Reshape", [e.add("Transpose", [e.int64(n, 1, x[1])], perm=[1, 0]),
                                 e.const(np.array([-1], np.int64))])
    return [e.add("Pad", [x[0], pads], mode="constant")]


@emits("GatherV2")
def _gather(e, n, x):
    if int(n.attrs.get("batch_dims", 0)) != 0:
        raise _Unmapped("GatherV2 with batch_dims other than 0")
    axis = e.static_int(n, 2, "the axis")
    return [e.add("Gather", [x[0], x[1]], axis=axis)]


@emits("GatherNd")
def _gather_nd(e, n, x):
    return [e.add("GatherND", [x[0], e.int64(n, 1, x[1])])]


@emits("Range")
def _range(e, n, x):
    scalar = e.const(np.zeros(0, np.int64))
    return [e.add("Range", [e.add("Reshape", [v, scalar]) for v in x])]


@emits("Cumsum")
def _cumsum(e, n, x):
    return [e.add("CumSum", x, exclusive=int(bool(n.attrs.get("exclusive"))),
                  reverse=int(bool(n.attrs.get("reverse"))))]


@emits("OneHot")
def _one_hot(e, n, x):
    idx, depth, on, off = x
    it = e.dtype(n, 0)
    d = e.add("Cast", [depth], to=e.onnx_type(it, n))
    # TensorFlow gives an all-off row for a negative index; ONNX counts it from the end
    idx = e.add("Where", [e.add("Less", [idx, e.scalar(0, it)]), d, idx])
    one = e.const(np.array([1], np.int64))
    values = e.add("Concat", [e.add("Reshape", [off, one]), e.add("Reshape", [on, one])],
                   axis=0)
    return [e.add("OneHot", [idx, d, values], axis=int(n.attrs.get("axis", -1)))]


@emits("ArgMax", "ArgMin")
def _arg(e, n, x):
    axis = e.static_int(n, 1, "the dimension")
    out = e.add(n.op, [x[0]], axis=axis, keepdims=0)
    if n.attrs.get("output_type", dtypes.int64) is dtypes.int64:
        return [out]
    return [e.add("Cast", [out], to=e.onnx_type(n.attrs["output_type"], n))]


@emits("TopKV2")
def _top_k(e, n, x):
    k = e.int64(n, 1, x[1], shape=[1])
    vals, idx = e.add("TopK", [x[0], k], n_out=2, axis=-1, largest=1, sorted=1)
    if n.attrs.get("index_type", dtypes.int32) is not dtypes.int64:
        idx = e.add("Cast", [idx], to=e.onnx_type(n.attrs.get("index_type", dtypes.int32), n))
    return [vals, idx]


@emits("Cumprod")
def _cumprod(e, n, x):
    # ONNX has no cumulative product: one ReduceProd per position of a static axis
    axis = e.static_int(n, 1, "the axis")
    s = e.shape(n, 0)
    r = e.rank(n, 0, "a cumulative product")
    axis = axis + r if axis < 0 else axis
    size = s[axis]
    if size is None or size > _CUMPROD_MAX:
        raise _Unmapped(f"a cumulative product over an axis of size {size}: ONNX has no "
                        f"CumProd, and it is written out for static sizes up to "
                        f"{_CUMPROD_MAX}")
    excl, rev = bool(n.attrs.get("exclusive")), bool(n.attrs.get("reverse"))
    ax = e.const(np.array([axis], np.int64))
    parts = []
    for k in range(size):
        lo, hi = (k + excl, size) if rev else (0, k + 1 - excl)
        if lo >= hi:   # the empty product of an exclusive end
            sl = e.add("Slice", [x[0], e.const(np.array([k], np.int64)),
                                 e.const(np.array([k + 1], np.int64)), ax])
            parts.append(e.add("Expand", [e.scalar(1, n.out_dtypes[0]), e.add("Shape", [sl])]))
            continue
        sl = e.add("Slice", [x[0], e.const(np.array([lo], np.int64)),
                             e.const(np.array([hi], np.int64)), ax])
        parts.append(e.add("ReduceProd", [sl], axes=[axis], keepdims=1) if e.opset < 18
                     else e.add("ReduceProd", [sl, ax], keepdims=1))
    return [e.add("Concat", parts, axis=axis) if len(parts) > 1 else e.add("Identity", parts)]


_CUMPROD_MAX = 256


@emits("LinSpace")
def _linspace(e, n, x):
    t = n.out_dtypes[0]
    start, stop = (e.add("Reshape", [v, e.const(np.zeros(0, np.int64))]) for v in x[:2])
    num = e.add("Reshape", [e.int64(n, 2, x[2]), e.const(np.zeros(0, np.int64))])
    idx = e.add("Cast", [e.add("Range", [e.const(np.array(0, np.int64)), num,
                                         e.const(np.array(1, np.int64))])],
                to=e.onnx_type(t, n))
    steps = e.add("Cast", [e.add("Max", [e.add("Sub", [num, e.const(np.array(1, np.int64))]),
                                         e.const(np.array(1, np.int64))])],
                  to=e.onnx_type(t, n))
    step = e.add("Div", [e.add("Sub", [stop, start]), steps])
    return [e.add("Add", [start, e.add("Mul", [idx, step])])]


def _needs(e, opset: int, what: str) -> None:
    if e.opset < opset:
        raise _Unmapped(f"{what} needs opset {opset} or later (exporting opset {e.opset})")


_BITWISE = {"BitwiseAnd": "BitwiseAnd", "BitwiseOr": "BitwiseOr", "BitwiseXor": "BitwiseXor",
            "Invert": "BitwiseNot"}


@emits(*_BITWISE)
def _bitwise(e, n, x):
    _needs(e, 18, _BITWISE[n.op])
    return [e.add(_BITWISE[n.op], x)]


@emits("LeftShift", "RightShift")
def _shift(e, n, x):
    if not n.out_dtypes[0].name.startswith("uint"):
        raise _Unmapped(f"ONNX BitShift takes unsigned integers, not {n.out_dtypes[0].name}")
    return [e.add("BitShift", x, direction="LEFT" if n.op == "LeftShift" else "RIGHT")]


_SCATTER = {"TensorScatterUpdate": ("none", 13), "TensorScatterAdd": ("add", 16),
            "TensorScatterSub": ("add", 16), "TensorScatterMax": ("max", 18),
            "TensorScatterMin": ("min", 18)}


@emits(*_SCATTER)
def _tensor_scatter(e, n, x):
    how, since = _SCATTER[n.op]
    _needs(e, since, n.op)
    upd = e.add("Neg", [x[2]]) if n.op == "TensorScatterSub" else x[2]
    extra = {} if how == "none" else {"reduction": how}
    return [e.add("ScatterND", [x[0], e.int64(n, 1, x[1]), upd], **extra)]


@emits("ScatterNd")
def _scatter_nd(e, n, x):
    _needs(e, 16, "ScatterNd (summing repeated indices)")
    zeros = e.add("Expand", [e.scalar(0, n.out_dtypes[0]), e.int64(n, 2, x[2])])
    return [e.add("ScatterND", [zeros, e.int64(n, 0, x[0]), x[1]], reduction="add")]


@emits("UnsortedSegmentSum")
def _segment_sum(e, n, x):
    # one-hot rows (all off for an id out of range, which TensorFlow drops) times the data
    if e.shape(n, 1) is None or len(e.shape(n, 1)) != 1:
        raise _Unmapped("UnsortedSegmentSum is written for a vector of segment ids")
    t = n.out_dtypes[0]
    ids, it = x[1], e.dtype(n, 1)
    count = e.add("Cast", [x[2]], to=e.onnx_type(it, n))
    ids = e.add("Where", [e.add("Less", [ids, e.scalar(0, it)]), count, ids])
    hot = e.add("OneHot", [ids, count, e.const(np.array([0, 1], t.as_numpy_dtype))], axis=0)
    shape = e.add("Shape", [x[0]])
    flat = e.add("Reshape", [x[0], e.const(np.array([0, -1], np.int64))])
    out = e.add("MatMul", [hot, flat])
    rest = e.add("Slice", [shape, e.const(np.array([1], np.int64)),
                           e.const(np.array([_BIG], np.int64))])
    return [e.add("Reshape", [out, e.add("Concat", [
        e.int64(n, 2, x[2], shape=[1]), rest], axis=0)])]


# ---------------------------------------------------------------- reductions

_REDUCE = {"Sum": "ReduceSum", "Mean": "ReduceMean", "Max": "ReduceMax",
           "Min": "ReduceMin", "Prod": "ReduceProd"}


def reduce(e, onnx_op: str, x: str, axes: Any, keepdims: bool) -> str:
    """`onnx_op` of `x` over `axes` (a list, or the ONNX name of an int64
    vector), as an input from opset 18 (ReduceSum: 13) or an attribute."""
    as_input = onnx_op == "ReduceSum" or e.opset >= 18
    if isinstance(axes, str):
        if not as_input:
            raise _Unmapped(f"{onnx_op} over axes computed in the graph needs opset 18 "
                            "or later")
        return e.add(onnx_op, [x, axes], keepdims=int(keepdims))
    if as_input:
        return e.add(onnx_op, [x, e.const(np.array(axes, np.int64))], keepdims=int(keepdims))
    return e.add(onnx_op, [x], axes=[int(a) for a in axes], keepdims=int(keepdims))


@emits(*_REDUCE)
def _reduce(e, n, x):
    keep = bool(n.attrs.get("keep_dims", False))
    axes = e.value(n, 1)
    if axes is not None:
        axes = [int(a) for a in axes.reshape(-1)]
        if not axes:   # TensorFlow reduces over no axis: the input itself
            return [e.add("Identity", [x[0]])]
        return [reduce(e, _REDUCE[n.op], x[0], axes, keep)]
    return [reduce(e, _REDUCE[n.op], x[0], e.int64(n, 1, x[1], shape=[-1]), keep)]


# ---------------------------------------------------------------- images

def _nchw(fmt: str) -> bool:
    return str(fmt) in ("NCHW", "NCDHW")


def _spatial(values, fmt: str) -> list[int]:
    v = [int(s) for s in values]
    return v[2:] if _nchw(fmt) else v[1:-1]


def _padding(e, n) -> dict:
    pad = n.attrs["padding"]
    pad = pad.decode() if isinstance(pad, bytes) else str(pad)
    if pad == "SAME":
        return {"auto_pad": "SAME_UPPER"}
    if pad == "VALID":
        return {"pads": [0, 0, 0, 0]}
    if pad == "EXPLICIT":
        p = [int(v) for v in n.attrs.get("explicit_paddings") or []]
        pairs = [p[i:i + 2] for i in range(0, len(p), 2)]
        pairs = pairs[2:] if _nchw(n.attrs.get("data_format", "NHWC")) else pairs[1:-1]
        return {"pads": [a for a, _ in pairs] + [b for _, b in pairs]}
    raise _Unmapped(f"padding {pad!r}")


def _to_nchw(e, fmt, x):
    return x if _nchw(fmt) else e.add("Transpose", [x], perm=[0, 3, 1, 2])


def _from_nchw(e, fmt, y):
    return y if _nchw(fmt) else e.add("Transpose", [y], perm=[0, 2, 3, 1])


@emits("Conv2D")
def _conv2d(e, n, x):
    fmt = n.attrs.get("data_format", "NHWC")
    w = e.add("Transpose", [x[1]], perm=[3, 2, 0, 1])   # HWIO -> OIHW
    attrs = dict(_padding(e, n), strides=_spatial(n.attrs["strides"], fmt),
                 dilations=_spatial(n.attrs.get("dilations") or [1, 1, 1, 1], fmt))
    return [_from_nchw(e, fmt, e.add("Conv", [_to_nchw(e, fmt, x[0]), w], **attrs))]


@emits("MaxPool", "AvgPool")
def _pool(e, n, x):
    fmt = n.attrs.get("data_format", "NHWC")
    attrs = dict(_padding(e, n), kernel_shape=_spatial(n.attrs["ksize"], fmt),
                 strides=_spatial(n.attrs["strides"], fmt))
    op = "MaxPool" if n.op == "MaxPool" else "AveragePool"
    return [_from_nchw(e, fmt, e.add(op, [_to_nchw(e, fmt, x[0])], **attrs))]


@emits("FusedBatchNormV3")
def _batch_norm(e, n, x):
    if n.attrs.get("is_training", True):
        raise _Unmapped("FusedBatchNormV3 with is_training=True (batch statistics); "
                        "export the inference form (training=False)")
    fmt = n.attrs.get("data_format", "NHWC")
    eps = float(n.attrs.get("epsilon", 1e-4))
    xs, scale, offset, mean, var = x
    t, u = e.dtype(n, 0), e.dtype(n, 1)
    if t is not u:
        xs = e.add("Cast", [xs], to=e.onnx_type(u, n))
    if _nchw(fmt):
        y = e.add("BatchNormalization", [xs, scale, offset, mean, var], epsilon=eps)
    else:   # channels last: (x - mean) * scale / sqrt(var + eps) + offset, broadcast
        inv = e.add("Div", [scale, e.add("Sqrt", [e.add("Add", [var, e.scalar(eps, u)])])])
        y = e.add("Add", [e.add("Mul", [e.add("Sub", [xs, mean]), inv]), offset])
    if t is not u:
        y = e.add("Cast", [y], to=e.onnx_type(t, n))
    return [y, mean, var, mean, var, None]


# ---------------------------------------------------------------- fused ops

@emits("LayerNorm")
def _layer_norm(e, n, x):
    eps = float(n.attrs.get("epsilon", 1e-5))
    t, u = e.dtype(n, 0), n.attrs.get("U", dtypes.float32)
    want_stats = e.used(n, 1) or e.used(n, 2)
    last = e.const(np.array([-1], np.int64))
    if e.opset >= 17:
        outs = e.add("LayerNormalization", x, n_out=3 if want_stats else 1, axis=-1,
                     epsilon=eps, stash_type=1)
        if not want_stats:
            return [outs, None, None]
        y, mean, rstd = outs
    else:
        xs = e.add("Cast", [x[0]], to=e.onnx_type(u, n)) if t is not u else x[0]
        mean = reduce(e, "ReduceMean", xs, [-1], True)
        d = e.add("Sub", [xs, mean])
        var = reduce(e, "ReduceMean", e.add("Mul", [d, d]), [-1], True)
        rstd = e.add("Reciprocal", [e.add("Sqrt", [e.add("Add", [var, e.scalar(eps, u)])])])
        y = e.add("Mul", [d, rstd])
        if t is not u:
            y = e.add("Cast", [y], to=e.onnx_type(t, n))
        y = e.add("Add", [e.add("Mul", [y, x[1]]), x[2]])
    return [y, e.add("Squeeze", [mean, last]), e.add("Squeeze", [rstd, last])]


@emits("ScaledDotProductAttention")
def _attention(e, n, x):
    from ..ops.transformer_ops import LOWEST_SCORE
    t = e.dtype(n, 0)
    q, k, v = x[:3]
    mask = x[3] if len(x) > 3 else None
    kt = e.add("Transpose", [k], perm=[0, 1, 3, 2])
    s = e.add("Mul", [e.add("MatMul", [q, kt]), e.scalar(float(n.attrs["scale"]), t)])
    allowed = mask
    if n.attrs.get("causal"):   # key j is visible from query i where j <= i
        shape = e.add("Shape", [s])
        zero, one = e.const(np.array(0, np.int64)), e.const(np.array(1, np.int64))

        def length(axis):
            return e.add("Squeeze", [e.add("Slice", [
                shape, e.const(np.array([axis], np.int64)),
                e.const(np.array([axis + 1], np.int64))]), e.const(np.array([0], np.int64))])
        rows = e.add("Unsqueeze", [e.add("Range", [zero, length(2), one]),
                                   e.const(np.array([1], np.int64))])
        cols = e.add("Range", [zero, length(3), one])
        tri = e.add("LessOrEqual", [cols, rows])
        allowed = tri if mask is None else e.add("And", [mask, tri])
    if allowed is not None:
        s = e.add("Where", [allowed, s, e.scalar(LOWEST_SCORE[t.name], t)])
    p = e.add("Softmax", [s], axis=-1)
    if mask is not None:   # a query that may attend to no key gives zeros
        p = e.add("Mul", [p, e.add("Cast", [allowed], to=e.onnx_type(t, n))])
    return [e.add("MatMul", [p, v]), None]


# ================================================================ the writer

class _Writer:
    """Writes one traced graph as ONNX nodes and initializers."""

    def __init__(self, cf: ConcreteFunction, opset: int, onnx, specs: list[TensorSpec]):
        self.cf, self.opset, self.onnx, self.h = cf, opset, onnx, onnx.helper
        self.specs = specs
        self.nodes: list = []
        self.inits: list = []
        self.taken: set[str] = set()
        self.names: dict = {}      # (graph node, output index) -> ONNX value name
        self.consts: dict = {}     # ONNX name -> numpy value (of constants)
        self.variables: dict = {}  # id(variable) -> initializer name
        self.current = None
        self.uses = {(src, i) for nd in cf.graph.nodes for src, i in nd.inputs}
        self.uses.update(cf.graph.outputs)

    # ------------------------------------------------------------ helpers
    def fresh(self, base: str) -> str:
        base = base or "v"
        name, k = base, 0
        while name in self.taken:
            k += 1
            name = f"{base}_{k}"
        self.taken.add(name)
        return name

    def add(self, op_type: str, inputs: Sequence[str], n_out: int = 1, **attrs) -> Any:
        base = self.current.name if self.current is not None else op_type
        outs = [self.fresh(f"{base}/{op_type}" if n_out == 1 else f"{base}/{op_type}_{i}")
                for i in range(n_out)]
        self.nodes.append(self.h.make_node(op_type, list(inputs), outs,
                                           name=self.fresh(f"{base}/{op_type}"), **attrs))
        return outs[0] if n_out == 1 else outs

    def const(self, a: np.ndarray, base: str = "") -> str:
        a = np.array(a, order="C")   # (ascontiguousarray would make a 0-d value 1-d)
        name = self.fresh(base or (f"{self.current.name}/const" if self.current else "const"))
        self.inits.append(self.onnx.numpy_helper.from_array(a, name))
        self.consts[name] = a
        return name

    def scalar(self, v: Any, dt: dtypes.DType) -> str:
        return self.const(np.array(v, dt.as_numpy_dtype))

    def onnx_type(self, dt: dtypes.DType, node=None) -> int:
        code = _ONNX_TYPE.get(dt)
        if code is None:
            where = f"node {node.name!r} ({node.op}) " if node is not None else ""
            raise errors.UnimplementedError(
                f"pg.onnx.export: {where}uses dtype {dt.name}, which ONNX models written by "
                f"pluggable cannot hold; cast it to one of "
                f"{', '.join(sorted(d.name for d in _ONNX_TYPE))}")
        return code

    def dtype(self, n, i: int) -> dtypes.DType:
        src, j = n.inputs[i]
        return src.out_dtypes[j]

    def shape(self, n, i: int):
        src, j = n.inputs[i]
        return src.out_shapes[j]

    def rank(self, n, i: int, what: str) -> int:
        s = self.shape(n, i)
        if s is None:
            raise _Unmapped(f"{what} needs the rank of input {i}, which is not known when "
                            "the function is traced")
        return len(s)

    def value(self, n, i: int) -> np.ndarray | None:
        return self.consts.get(self.names.get(n.inputs[i]))

    def static(self, n, i: int, what: str) -> np.ndarray:
        v = self.value(n, i)
        if v is None:
            raise _Unmapped(f"{what} (input {i}) must be a constant of the graph to become an "
                            "ONNX attribute, but it is computed; compute it in Python")
        return v

    def static_int(self, n, i: int, what: str) -> int:
        v = self.static(n, i, what)
        if v.size != 1:
            raise _Unmapped(f"{what} (input {i}) must be one integer, got shape {list(v.shape)}")
        return int(v.reshape(-1)[0])

    def int64(self, n, i: int, name: str, shape: list | None = None) -> str:
        """Input `i` (ONNX `name`) as int64, reshaped to `shape` if given."""
        v = self.value(n, i)
        if v is not None:
            v = v.astype(np.int64)
            return self.const(v.reshape(shape) if shape is not None else v)
        if self.dtype(n, i) is not dtypes.int64:
            name = self.add("Cast", [name], to=self.onnx_type(dtypes.int64))
        if shape is not None:
            name = self.add("Reshape", [name, self.const(np.array(shape, np.int64))])
        return name

    def used(self, n, i: int) -> bool:
        return (n, i) in self.uses

    # ------------------------------------------------------------ nodes
    def write(self):
        g = self.cf.graph
        inputs = []
        for node, spec in zip(g.inputs, self.specs):
            name = self.fresh(spec.name or node.name)
            self.names[(node, 0)] = name
            dims = None if spec.shape is None else [
                f"{name}_dim{i}" if d is None else d for i, d in enumerate(spec.shape)]
            inputs.append(self.h.make_tensor_value_info(name, self.onnx_type(spec.dtype),
                                                        dims))
        for node in g.topological():
            if node.op == "Placeholder":
                if (node, 0) not in self.names:
                    raise errors.UnimplementedError(
                        f"pg.onnx.export: graph input {node.name!r} is not an argument of "
                        "the function")
                continue
            self.current = node
            self._node(node)
        self.current = None
        if not g.outputs:
            raise errors.InvalidArgumentError(
                f"pg.onnx.export: {self.cf.name!r} returns no tensor; an ONNX model needs at "
                "least one output")
        outputs = []
        for k, ref in enumerate(g.outputs):
            node, i = ref
            out = self.fresh(f"output_{k}")
            self.nodes.append(self.h.make_node("Identity", [self._read(node, i, None)], [out],
                                               name=self.fresh(f"output_{k}/Identity")))
            shape = node.out_shapes[i]
            outputs.append(self.h.make_tensor_value_info(
                out, self.onnx_type(node.out_dtypes[i], node),
                None if shape is None else [d for d in shape]))
        read = {i for nd in self.nodes for i in nd.input}
        inits = [t for t in self.inits if t.name in read]   # constants only folded in
        return self.h.make_graph(self.nodes, self.cf.name, inputs, outputs, inits)

    def _read(self, node, i: int, reader) -> str:
        name = self.names.get((node, i))
        if name is None:
            by = f" (read by node {reader.name!r}, {reader.op})" if reader is not None else ""
            raise errors.UnimplementedError(
                f"pg.onnx.export: output {i} of node {node.name!r} ({node.op}){by} has no "
                "ONNX equivalent; use only its first output")
        return name

    def _node(self, node) -> None:
        if node.op == "Const":
            self._const(node)
            return
        if node.op == "ReadVariableOp":
            self.names[(node, 0)] = self._variable(node)
            return
        fn = EMITTERS.get(node.op)
        if fn is None:
            raise errors.UnimplementedError(
                f"pg.onnx.export: node {node.name!r} (op {node.op}) has no ONNX mapping; "
                "ONNX export writes the ops in pluggable.onnx.export.EMITTERS "
                "(see docs/user-guide.md, Export): express the function with those")
        ins = [self._read(src, i, node) for src, i in node.inputs]
        try:
            outs = fn(self, node, ins)
        except _Unmapped as exc:
            raise errors.UnimplementedError(
                f"pg.onnx.export: node {node.name!r} (op {node.op}): {exc}") from None
        except errors.PluggableError:
            raise
        except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
            # (attributes or inputs of a form the emitter does not expect)
            raise errors.UnimplementedError(
                f"pg.onnx.export: node {node.name!r} (op {node.op}) cannot be written "
                f"({type(exc).__name__}: {exc}); its attributes or inputs take a form the "
                "ONNX export does not handle") from None
        for i, name in enumerate(outs):
            if name is not None:
                self.names[(node, i)] = name

    def _const(self, node) -> None:
        v = node.attrs["value"]
        if node.out_dtypes[0] is dtypes.resource:
            return   # a variable's handle: its reads become the initializer
        a = v.numpy() if isinstance(v, Tensor) else np.asarray(v)
        self.onnx_type(node.out_dtypes[0], node)
        self.names[(node, 0)] = self.const(np.asarray(a, node.out_dtypes[0].as_numpy_dtype),
                                           node.name)

    def _variable(self, node) -> str:
        src = node.inputs[0][0]
        var = variables.owner_of(src.attrs.get("value")) if src.op == "Const" else None
        if var is None:
            raise errors.UnimplementedError(
                f"pg.onnx.export: node {node.name!r} (ReadVariableOp) reads a resource that "
                "is not a live pg.Variable; keep the variable alive while exporting")
        name = self.variables.get(id(var))
        if name is None:
            self.onnx_type(var.dtype, node)
            base = var.name[:-2] if var.name.endswith(":0") else var.name
            name = self.variables[id(var)] = self.const(np.asarray(var.numpy()), base)
        return name


# ================================================================ checks

def _check_opset(opset: Any, onnx) -> int:
    if opset is None:
        return DEFAULT_OPSET
    newest = min(mapping.MAX_OPSET, onnx.defs.onnx_opset_version())
    if isinstance(opset, bool) or not isinstance(opset, (int, np.integer)) or \
            not MIN_OPSET <= int(opset) <= newest:
        raise errors.InvalidArgumentError(
            f"pg.onnx.export: opset must be an int from {MIN_OPSET} to {newest}, got "
            f"{opset!r}; leave it None for {DEFAULT_OPSET}")
    return int(opset)


def _check_signature(signature: Any) -> list[TensorSpec]:
    if isinstance(signature, TensorSpec) or not isinstance(signature, (list, tuple)):
        raise errors.InvalidArgumentError(
            f"pg.onnx.export: input_signature must be a list of pg.TensorSpec (one per "
            f"argument), got {type(signature).__name__}; e.g. "
            "[pg.TensorSpec([None, 4], pg.float32)]")
    for i, s in enumerate(signature):
        if not isinstance(s, TensorSpec):
            raise errors.InvalidArgumentError(
                f"pg.onnx.export: input_signature[{i}] is a {type(s).__name__}, not a "
                "pg.TensorSpec; give each argument's shape and dtype as "
                "pg.TensorSpec(shape, dtype)")
        if s.dtype not in _ONNX_TYPE:
            raise errors.InvalidArgumentError(
                f"pg.onnx.export: input_signature[{i}] has dtype {s.dtype.name}, which an "
                f"ONNX input cannot have here; use one of "
                f"{', '.join(sorted(d.name for d in _ONNX_TYPE))}")
    names = [s.name for s in signature if s.name]
    if len(set(names)) != len(names):
        raise errors.InvalidArgumentError(
            f"pg.onnx.export: input_signature names {names} repeat; give each input its "
            "own name")
    return list(signature)


def _check_path(path: Any) -> str:
    if not isinstance(path, (str, os.PathLike)):
        raise errors.InvalidArgumentError(
            f"pg.onnx.export: path must be a file path, got {type(path).__name__}")
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise errors.NotFoundError(
            f"pg.onnx.export: cannot write {path!r}: directory {folder!r} does not exist; "
            "create it first")
    if os.path.isdir(path):
        raise errors.InvalidArgumentError(
            f"pg.onnx.export: {path!r} is a directory; give the path of the .onnx file")
    return path


def _trace(fn: Any, signature: Any) -> tuple[ConcreteFunction, list[TensorSpec]]:
    if isinstance(fn, ConcreteFunction):
        if signature is not None and _check_signature(signature) != fn.input_specs:
            raise errors.InvalidArgumentError(
                f"pg.onnx.export: the concrete function {fn.name!r} was traced for "
                f"{fn.input_specs}, not {list(signature)}; pass input_signature=None")
        return fn, list(fn.input_specs)
    if isinstance(fn, Function) and fn.input_signature is not None:
        own = list(fn.input_signature)
        if signature is not None and _check_signature(signature) != own:
            raise errors.InvalidArgumentError(
                f"pg.onnx.export: {fn.__name__} has its own input_signature {own}; pass "
                "input_signature=None or the same specs")
        specs = _check_signature(own)
        return fn.get_concrete_function(), specs
    if not callable(fn):
        raise errors.InvalidArgumentError(
            f"pg.onnx.export: fn must be a function or a pg.function, got "
            f"{type(fn).__name__}")
    if signature is None:
        raise errors.InvalidArgumentError(
            "pg.onnx.export: give input_signature, a list of pg.TensorSpec (one per "
            "argument)")
    specs = _check_signature(signature)
    f = fn if isinstance(fn, Function) else pg_function(fn)
    return f.get_concrete_function(*specs), specs


def _output_shapes(model, onnx) -> None:
    """Output shapes from ONNX shape inference where it knows more than the
    trace did (an unknown rank; sizes named after the input dimensions)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:   # the checker below reports what is wrong
        return
    types = {v.name: v.type for v in inferred.graph.output}
    for out in model.graph.output:
        t = types.get(out.name)
        if t is None or not t.tensor_type.HasField("shape"):
            continue
        have = out.type.tensor_type
        dims = t.tensor_type.shape.dim
        if not have.HasField("shape") or len(have.shape.dim) == len(dims):
            out.type.CopyFrom(t)


# ================================================================ entry point

def export(fn: Any, input_signature: Sequence[TensorSpec] | None, path: Any,
           opset: int | None = None):
    """Traces `fn` (a Python function, a ``pg.function`` or a
    ``ConcreteFunction``) for `input_signature` (a list of ``pg.TensorSpec``;
    ``None`` sizes become symbolic ONNX dimensions) in the caller's device
    scope and writes it to `path` as an ONNX model of `opset` (13 to 28;
    default 17). Variables the function reads become initializers holding
    their current values. Returns the ``onnx.ModelProto``.

    Needs the optional ``onnx`` package (``pip install "pluggable[onnx]"``).
    An op with no ONNX mapping raises UnimplementedError naming the op and
    node; a bad signature InvalidArgumentError; a path in a missing
    directory NotFoundError (checked before tracing)."""
    onnx = _onnx()
    opset = _check_opset(opset, onnx)
    if input_signature is not None:
        _check_signature(input_signature)
    path = _check_path(path)
    cf, specs = _trace(fn, input_signature)
    graph = _Writer(cf, opset, onnx, specs).write()
    ops = [onnx.helper.make_opsetid("", opset)]
    model = onnx.helper.make_model(graph, opset_imports=ops, producer_name="pluggable",
                                   ir_version=onnx.helper.find_min_ir_version_for(ops))
    _output_shapes(model, onnx)
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as exc:   # ValidationError, InferenceError
        raise errors.InternalError(
            f"pg.onnx.export: the model written for {cf.name!r} fails the ONNX checker "
            f"({exc}); please report it with the function") from None
    try:
        onnx.save(model, path)
    except OSError as exc:
        raise errors.PermissionDeniedError(
            f"pg.onnx.export: cannot write {path!r}: {exc.strerror or exc}") from None
    return model
