"""The one ONNX -> op-registry mapping: (domain, op type, opset range) ->
the registry ops a node lowers to and the converter that emits them.

``RULES`` is the table: each ``Rule`` names the built-in ops (TensorFlow op
names) its converter may emit, so ``lowers_to(node, opset)`` and
``has_kernels(node, opset, device_type)`` answer "which ops does this node
become, and does device D have kernels for all of them?" without building
anything (what an ONNX Runtime bridge asks). A converter is
``fn(c, inputs, attrs) -> outputs``: `inputs` are tensors (None for an
omitted optional input), `attrs` the node's attributes as Python values, and
it calls registry ops through ``c.op(...)``. ONNX semantics are exact: NCHW
layouts go through transposes, integer Div truncates, opset-dependent
attributes-vs-inputs are separate rows. A ``raw`` row (If, Loop, Scan, the
sequence ops) gets its inputs as the importer holds them (a sequence is a
list) and lowers subgraphs through ``c.subgraph``; its ``ops`` are its own,
the subgraph's nodes bring theirs.

The ops the ONNX Runtime bridge lowers in C are listed in ``ort_ops.OPS``
(lowering kind, TensorFlow ops, element types, opsets); the direct rows of
those ops are made from that table here, and tests/test_ort_op_table.py
checks that every other row of them lowers to the table's ops.
"""
from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Callable

import numpy as np

from ..framework import dtypes, errors, registry
from ..framework.tensor import Tensor
from . import ort_ops

MAX_OPSET = 28   # the newest default-domain opset (onnx 1.23) the rows were checked against

# Inputs that carry values a converter needs at build time (axes, shapes,
# bounds, counts): (op type -> input positions). A graph input fed there is
# read when the graph is built, and its value becomes part of the cache key.
VALUE_INPUTS = {"Reshape": {1}, "Squeeze": {1}, "Unsqueeze": {1}, "Slice": {1, 2, 3, 4},
                "Split": {1}, "Expand": {1}, "Pad": {1, 2, 3}, "TopK": {1}, "OneHot": {1},
                "ConstantOfShape": {0}, "Range": {0, 1, 2}, "ReduceSum": {1},
                "ReduceMean": {1}, "ReduceMax": {1}, "ReduceMin": {1}, "ReduceProd": {1},
                "ReduceSumSquare": {1}, "ReduceL1": {1}, "ReduceL2": {1},
                "ReduceLogSum": {1}, "ReduceLogSumExp": {1}, "Tile": {1}, "CumSum": {1},
                "Trilu": {1}, "Attention": {6}, "If": {0}, "Loop": {0, 1},
                "SequenceAt": {1}, "SequenceInsert": {2}, "SequenceErase": {1},
                "SplitToSequence": {1}, "ReverseSequence": {1}, "Compress": {1},
                "CenterCropPad": {1}, "DFT": {1, 2}, "STFT": {1, 3}, "AffineGrid": {1},
                "MaxUnpool": {2}, "Col2Im": {1, 2}, "MelWeightMatrix": {0, 1, 2, 3, 4},
                "HannWindow": {0}, "HammingWindow": {0}, "BlackmanWindow": {0},
                "Resize": {1, 2, 3}, "Upsample": {1}, "Dropout": {1, 2}}
_BIG = 1 << 62

# ONNX TensorProto.DataType -> pluggable dtype
ONNX_DTYPES = {1: dtypes.float32, 2: dtypes.uint8, 3: dtypes.int8, 5: dtypes.int16,
               6: dtypes.int32, 7: dtypes.int64, 9: dtypes.bool_, 10: dtypes.float16,
               11: dtypes.float64, 12: dtypes.uint32, 13: dtypes.uint64, 16: dtypes.bfloat16,
               4: dtypes.uint16, 17: dtypes.float8_e4m3fn, 18: dtypes.float8_e4m3fnuz,
               19: dtypes.float8_e5m2, 20: dtypes.float8_e5m2fnuz, 21: dtypes.uint4,
               22: dtypes.int4, 23: dtypes.float4_e2m1fn, 25: dtypes.uint2, 26: dtypes.int2,
               8: dtypes.string}
# Cast's `saturate` (opset 19) clamps to the finite range of these before casting.
_FLOAT8 = frozenset({dtypes.float8_e4m3fn, dtypes.float8_e4m3fnuz, dtypes.float8_e5m2,
                     dtypes.float8_e5m2fnuz})


@dataclasses.dataclass(frozen=True)
class Rule:
    """One row: ONNX (domain, op_type) from opset `since` to `until`
    (inclusive) lowers to registry ops `ops` through `fn`."""
    domain: str
    op_type: str
    since: int
    until: int
    ops: tuple
    fn: Callable
    raw: bool = False   # inputs as the importer holds them (sequences as lists), never folded


RULES: list[Rule] = []


def rule(op_type: str, ops: str, since: int = 1, until: int = 10_000, domain: str = "",
         raw: bool = False):
    def deco(fn):
        RULES.append(Rule(domain, op_type, since, until, tuple(ops.split()), fn, raw))
        return fn
    return deco


def find(domain: str, op_type: str, opset: int) -> Rule | None:
    """The row for a node of (domain, op_type) in a model of `opset`."""
    domain = "" if domain == "ai.onnx" else domain
    for r in RULES:
        if r.domain == domain and r.op_type == op_type and r.since <= opset <= r.until:
            return r
    return None


def lowers_to(domain: str, op_type: str, opset: int) -> tuple | None:
    """The registry ops a node of (domain, op_type) at `opset` lowers to,
    or None when no row maps it (it then resolves to a catalogue op)."""
    r = find(domain, op_type, opset)
    return None if r is None else r.ops


def has_kernels(domain: str, op_type: str, opset: int, device_type: str) -> bool:
    """Whether every registry op the node lowers to is registered and has a
    kernel on `device_type` ("CPU", "MY_DEVICE", "GPU")."""
    ops = lowers_to(domain, op_type, opset)
    if ops is None:
        return False
    return all(name in registry.OPS and registry.kernels_for(name, device_type)
               for name in ops)


def missing_ops(domain: str, op_type: str, opset: int) -> list[str]:
    """The ops a row lowers to that are not registered (yet)."""
    return [n for n in lowers_to(domain, op_type, opset) or () if n not in registry.OPS]


# ================================================================ helpers

class Ctx:
    """What a converter may use: ``op(name, *inputs, **attrs)`` calls a
    registry op (recorded into the graph being built); ``value(t)`` is the
    constant value of `t` or None; ``opset`` and ``node`` (its name)."""

    def __init__(self, opset: int, node: str):
        self.opset = opset
        self.node = node
        self.n_outputs = 1       # how many outputs the node names
        self.subgraph = None     # set by the importer: subgraph(GraphProto, values) -> values

    def ops(self, name: str, *inputs: Any, **attrs: Any) -> list:
        od = registry.OPS.get(name)
        if od is None:
            raise errors.UnimplementedError(
                f"ONNX node {self.node!r} lowers to op {name!r}, which is not registered "
                "(no plugin or built-in defines it)", op=name)
        from ..runtime import dispatch
        return dispatch.execute(od, list(inputs), attrs)

    def op(self, name: str, *inputs: Any, **attrs: Any) -> Any:
        return self.ops(name, *inputs, **attrs)[0]

    @staticmethod
    def value(t: Any) -> np.ndarray | None:
        if t is None:
            return None
        if isinstance(t, np.ndarray):
            return t
        from ..graph import tracing
        if isinstance(t, tracing.SymbolicTensor):
            v = tracing.const_value(t)
            return None if v is None else np.asarray(v)
        if isinstance(t, Tensor):
            return np.asarray(t.numpy())
        return np.asarray(t)

    def need(self, t: Any, what: str) -> np.ndarray:
        v = self.value(t)
        if v is None:
            raise errors.UnimplementedError(
                f"ONNX node {self.node!r}: input {what!r} must be a constant (an initializer "
                "or computed from constants) for this op")
        return v

    def error(self, text: str) -> errors.InvalidArgumentError:
        return errors.InvalidArgumentError(f"ONNX node {self.node!r}: {text}")


def const(x: Any, like: Any) -> np.ndarray:
    """`x` as an array of the dtype of tensor `like`."""
    return np.asarray(x, dtype=like.dtype.as_numpy_dtype)


def rank(t: Any) -> int:
    if t.shape is None:
        raise errors.UnimplementedError("an input of unknown rank reached an ONNX converter")
    return len(t.shape)


def i64(v) -> np.ndarray:
    return np.asarray(v, dtype=np.int64).reshape(-1)


def _axes(axes, r: int) -> list[int]:
    return [int(a) + r if int(a) < 0 else int(a) for a in axes]


def shape_of(c: Ctx, t: Any) -> np.ndarray | Any:
    """The shape of `t`: a constant when static, else a Shape op (int64)."""
    if t.shape is not None and all(d is not None for d in t.shape):
        return np.asarray(t.shape, dtype=np.int64)
    return c.op("Shape", t, out_type=dtypes.int64)


def transpose(c: Ctx, x, perm) -> Any:
    return c.op("Transpose", x, np.asarray(perm, np.int32))


def reshape(c: Ctx, x, shape) -> Any:
    return c.op("Reshape", x, np.asarray(shape, np.int64) if not isinstance(shape, Tensor)
                else shape)


# ================================================================ elementwise

def _unary(op_type: str, tf: str, since: int = 1, until: int = 10_000):
    rule(op_type, tf, since, until)(lambda c, x, a: [c.op(tf, x[0])])


# The direct rows of the ops the ONNX Runtime bridge lowers too are made from
# its table (ort_ops.py), so that both sides read one op for them.
for _e in ort_ops.direct("unary"):
    _unary(_e.onnx, _e.tf[0], _e.since, _e.until)
for _o, _t in [("Floor", "Floor"), ("Sign", "Sign"),
               ("Not", "LogicalNot"), ("Sin", "Sin"), ("Cos", "Cos"), ("Tan", "Tan"),
               ("Asin", "Asin"), ("Acos", "Acos"), ("Atan", "Atan"), ("Sinh", "Sinh"),
               ("Cosh", "Cosh"), ("Asinh", "Asinh"), ("Acosh", "Acosh"),
               ("Atanh", "Atanh"), ("Round", "Round")]:
    _unary(_o, _t)


@rule("Identity", "Identity", raw=True)
def _identity(c, x, a):
    """(a sequence passes through as its list of tensors; a constant stays one)"""
    def one(t):
        return t if isinstance(t, np.ndarray) or t is None else c.op("Identity", t)
    v = x[0]
    return [[one(t) for t in v] if isinstance(v, list) else one(v)]


def _binary(op_type: str, tf: str, since: int = 1, until: int = 10_000):
    rule(op_type, tf, since, until)(lambda c, x, a: [c.op(tf, x[0], x[1])])


for _e in ort_ops.direct("binary"):
    _binary(_e.onnx, _e.tf[0], _e.since, _e.until)
for _o, _t in [("Equal", "Equal"),
               ("Less", "Less"), ("Greater", "Greater"), ("LessOrEqual", "LessEqual"),
               ("GreaterOrEqual", "GreaterEqual"), ("And", "LogicalAnd"),
               ("Or", "LogicalOr"), ("Xor", "NotEqual")]:
    _binary(_o, _t)


@rule("Pow", "Pow Cast Bitcast SelectV2 Less AddV2")
def _pow(c, x, a):
    b = x[1]
    if b.dtype in (dtypes.uint32, dtypes.uint64) and b.dtype is not x[0].dtype:
        b = _unsigned_to(c, b, x[0].dtype)
    b = b if b.dtype is x[0].dtype else c.op("Cast", b, DstT=x[0].dtype)
    return [c.op("Pow", x[0], b)]


def _unsigned_to(c, u, dt):
    """uint32/uint64 `u` as dtype `dt` (Cast reads no unsigned type wider
    than 8 bits): its bits as the signed type, wrapped back up by 2**bits."""
    signed = dtypes.int32 if u.dtype is dtypes.uint32 else dtypes.int64
    s = c.op("Bitcast", u, type=signed)
    wide = dtypes.float64 if dt.is_floating else dt
    v = c.op("Cast", s, DstT=wide)
    neg = c.op("Less", s, const(0, s))
    v = c.op("SelectV2", neg, c.op("AddV2", v, const(2.0 ** (32 if signed is dtypes.int32
                                                               else 64), v)), v)
    return v if wide is dt else c.op("Cast", v, DstT=dt)


def _trunc_div(c, a, b):
    """Integer division rounding toward zero (ONNX Div, C's `/`)."""
    q = c.op("FloorDiv", a, b)
    r = c.op("FloorMod", a, b)
    zero = const(0, a)
    fix = c.op("LogicalAnd", c.op("NotEqual", r, zero),
               c.op("NotEqual", c.op("Less", a, zero), c.op("Less", b, zero)))
    return c.op("AddV2", q, c.op("Cast", fix, DstT=a.dtype))


@rule("Div", "RealDiv FloorDiv FloorMod NotEqual Less LogicalAnd Cast AddV2")
def _div(c, x, a):
    if x[0].dtype.is_floating:
        return [c.op("RealDiv", x[0], x[1])]
    if not x[0].dtype.name.startswith("int"):
        return [c.op("FloorDiv", x[0], x[1])]
    return [_trunc_div(c, x[0], x[1])]


@rule("Mod", "FloorMod Sub Mul RealDiv Floor Neg Abs Sign FloorDiv NotEqual Less "
      "LogicalAnd Cast AddV2")
def _mod(c, x, a):
    p, q = x
    if not a.get("fmod", 0):
        return [c.op("FloorMod", p, q)]
    if p.dtype.is_floating:  # fmod: the remainder takes the sign of the dividend
        ap, aq = c.op("Abs", p), c.op("Abs", q)
        r = c.op("Sub", ap, c.op("Mul", c.op("Floor", c.op("RealDiv", ap, aq)), aq))
        return [c.op("Mul", c.op("Sign", p), r)]
    return [c.op("Sub", p, c.op("Mul", _trunc_div(c, p, q), q))]


def _variadic(tf: str):
    def fn(c, x, a):
        out = x[0]
        for y in x[1:]:
            out = c.op(tf, out, y)
        return [out if len(x) > 1 else c.op("Identity", out)]
    return fn


rule("Max", "Maximum Identity")(_variadic("Maximum"))
rule("Min", "Minimum Identity")(_variadic("Minimum"))
rule("Sum", "AddV2 Identity")(_variadic("AddV2"))


@rule("Mean", "AddV2 RealDiv Identity")
def _mean(c, x, a):
    s = _variadic("AddV2")(c, x, a)[0]
    return [c.op("RealDiv", s, const(len(x), s))]


@rule("Reciprocal", "RealDiv")
def _recip(c, x, a):
    return [c.op("RealDiv", const(1, x[0]), x[0])]


@rule("Ceil", "Floor Neg")
def _ceil(c, x, a):
    return [c.op("Neg", c.op("Floor", c.op("Neg", x[0])))]


def _softplus(c, x):
    # log(1 + exp(x)) computed stably: max(x, 0) + log(1 + exp(-|x|))
    one = const(1, x)
    return c.op("AddV2", c.op("Maximum", x, const(0, x)),
                c.op("Log", c.op("AddV2", one, c.op("Exp", c.op("Neg", c.op("Abs", x))))))


@rule("Softplus", "Maximum Log AddV2 Exp Neg Abs")
def _softplus_rule(c, x, a):
    return [_softplus(c, x[0])]


@rule("Softsign", "RealDiv AddV2 Abs")
def _softsign(c, x, a):
    return [c.op("RealDiv", x[0], c.op("AddV2", const(1, x[0]), c.op("Abs", x[0])))]


def _elu(c, x, alpha):
    neg = c.op("Mul", const(alpha, x), c.op("Sub", c.op("Exp", x), const(1, x)))
    return c.op("SelectV2", c.op("Less", x, const(0, x)), neg, x)


@rule("Elu", "Mul Sub Exp SelectV2 Less")
def _elu_rule(c, x, a):
    return [_elu(c, x[0], a.get("alpha", 1.0))]


@rule("Celu", "Mul Sub Exp SelectV2 Less RealDiv")
def _celu(c, x, a):
    al = a.get("alpha", 1.0)
    return [c.op("Mul", _elu(c, c.op("RealDiv", x[0], const(al, x[0])), 1.0), const(al, x[0]))]


@rule("Selu", "Mul Sub Exp SelectV2 Less")
def _selu(c, x, a):
    alpha = a.get("alpha", 1.67326319217681884765625)
    gamma = a.get("gamma", 1.05070102214813232421875)
    x = x[0]
    return [c.op("Mul", const(gamma, x), _elu(c, x, alpha))]


@rule("LeakyRelu", "Mul SelectV2 Less")
def _leaky(c, x, a):
    x = x[0]
    return [c.op("SelectV2", c.op("Less", x, const(0, x)),
                 c.op("Mul", x, const(a.get("alpha", 0.01), x)), x)]


@rule("PRelu", "Mul SelectV2 Less")
def _prelu(c, x, a):
    x, s = x
    if c.opset < 7 and rank(s) == 1 and rank(x) > 2 and s.shape[0] == x.shape[1]:
        s = reshape(c, s, [s.shape[0]] + [1] * (rank(x) - 2))   # one slope per channel
    return [c.op("SelectV2", c.op("Less", x, const(0, x)), c.op("Mul", x, s), x)]


@rule("ThresholdedRelu", "SelectV2 Greater ZerosLike")
def _trelu(c, x, a):
    x = x[0]
    return [c.op("SelectV2", c.op("Greater", x, const(a.get("alpha", 1.0), x)), x,
                 c.op("ZerosLike", x))]


def _hard_sigmoid(c, x, alpha, beta):
    y = c.op("AddV2", c.op("Mul", x, const(alpha, x)), const(beta, x))
    return c.op("Minimum", c.op("Maximum", y, const(0, x)), const(1, x))


@rule("HardSigmoid", "Mul AddV2 Maximum Minimum")
def _hsig(c, x, a):
    return [_hard_sigmoid(c, x[0], a.get("alpha", 0.2), a.get("beta", 0.5))]


@rule("HardSwish", "Mul AddV2 Maximum Minimum")
def _hswish(c, x, a):
    return [c.op("Mul", x[0], _hard_sigmoid(c, x[0], 1 / 6, 0.5))]


@rule("Mish", "Mul Tanh Maximum Log AddV2 Exp Neg Abs")
def _mish(c, x, a):
    return [c.op("Mul", x[0], c.op("Tanh", _softplus(c, x[0])))]


@rule("Gelu", "Gelu", since=20)
def _gelu(c, x, a):
    return [c.op("Gelu", x[0], approximate=a.get("approximate", "none") == "tanh")]


@rule("IsNaN", "NotEqual")
def _isnan(c, x, a):
    return [c.op("NotEqual", x[0], x[0])]


@rule("IsInf", "Equal LogicalOr")
def _isinf(c, x, a):
    x = x[0]
    pos = c.op("Equal", x, const(np.inf, x))
    neg = c.op("Equal", x, const(-np.inf, x))
    p, n = a.get("detect_positive", 1), a.get("detect_negative", 1)
    if p and n:
        return [c.op("LogicalOr", pos, neg)]
    if p:
        return [pos]
    if n:
        return [neg]
    return [c.op("LogicalAnd", pos, neg)]  # detects nothing: all False


@rule("Where", "SelectV2")
def _where(c, x, a):
    return [c.op("SelectV2", x[0], x[1], x[2])]


@rule("Clip", "Maximum Minimum Identity", until=10)
def _clip6(c, x, a):
    y = x[0]
    if "min" in a:
        y = c.op("Maximum", y, const(a["min"], y))
    if "max" in a:
        y = c.op("Minimum", y, const(a["max"], y))
    return [c.op("Identity", y)]


@rule("Clip", "Maximum Minimum Identity", since=11)
def _clip11(c, x, a):
    y = x[0]
    if len(x) > 1 and x[1] is not None:
        y = c.op("Maximum", y, x[1])
    if len(x) > 2 and x[2] is not None:
        y = c.op("Minimum", y, x[2])
    return [c.op("Identity", y)]


@rule("Constant", "")
def _constant(c, x, a):
    for k, conv in (("value", None), ("value_float", np.float32), ("value_floats", np.float32),
                    ("value_int", np.int64), ("value_ints", np.int64)):
        if k in a:
            return [np.asarray(a[k], dtype=conv) if conv else np.asarray(a[k])]
    raise errors.UnimplementedError(f"ONNX node {c.node!r}: Constant of attributes "
                                    f"{sorted(a)} is not mapped")


def _cast_to(c, x, to, saturate=True):
    """Cast `x` to `to` as ONNX's Cast does: to a float8 type with `saturate`,
    finite values beyond its range (and infinities) become its largest value
    of their sign; otherwise overflow gives infinity or NaN (ml_dtypes' rule)."""
    if to in _FLOAT8 and saturate and x.dtype is not to:
        import ml_dtypes
        hi = float(ml_dtypes.finfo(to.as_numpy_dtype).max)
        if x.dtype not in (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64):
            x = c.op("Cast", x, DstT=dtypes.float32)   # (Maximum takes none of the others)
        x = c.op("Minimum", c.op("Maximum", x, const(-hi, x)), const(hi, x))
    return c.op("Cast", x, DstT=to)


@rule("Cast", "Cast Maximum Minimum")
def _cast(c, x, a):
    to = ONNX_DTYPES.get(a["to"])
    if to is None:
        raise errors.UnimplementedError(f"ONNX node {c.node!r}: Cast to ONNX type {a['to']} "
                                        "has no pluggable dtype")
    return [_cast_to(c, x[0], to, a.get("saturate", 1))]


@rule("BitCast", "Bitcast Cast", since=26)
def _bitcast_rule(c, x, a):
    to = ONNX_DTYPES.get(a["to"])
    X = x[0]
    if to is None:
        raise errors.UnimplementedError(f"ONNX node {c.node!r}: BitCast to ONNX type "
                                        f"{a['to']} has no pluggable dtype")
    if np.dtype(to.as_numpy_dtype).itemsize != np.dtype(X.dtype.as_numpy_dtype).itemsize:
        raise c.error(f"BitCast needs types of one size, got {X.dtype.name} and {to.name}")
    if dtypes.bool_ in (X.dtype, to):   # a boolean is the byte 0 or 1
        return [c.op("Cast", X, DstT=to)]
    return [c.op("Bitcast", X, type=to)]


@rule("CastLike", "Cast Maximum Minimum")
def _castlike(c, x, a):
    return [_cast_to(c, x[0], x[1].dtype, a.get("saturate", 1))]


@rule("StringConcat", "Add", since=20)
def _string_concat(c, x, a):
    """Elementwise X + Y of string tensors, broadcast (TensorFlow's Add joins strings)."""
    return [c.op("Add", x[0], x[1])]


# ================================================================ shapes

@rule("Shape", "Shape StridedSlice")
def _shape(c, x, a):
    s = shape_of(c, x[0])
    r = rank(x[0])
    start, end = a.get("start", 0), a.get("end", r)
    start, end = [min(max(v + r if v < 0 else v, 0), r) for v in (start, end)]
    if isinstance(s, np.ndarray):
        return [s[start:end]]
    return [c.op("StridedSlice", s, i64([start]), i64([end]), i64([1]))]


@rule("Size", "Size")
def _size(c, x, a):
    s = shape_of(c, x[0])
    if isinstance(s, np.ndarray):   # a static shape: a constant
        return [np.asarray(int(np.prod(s)), np.int64)]
    return [c.op("Size", x[0], out_type=dtypes.int64)]


@rule("Reshape", "Reshape", since=5)
def _reshape(c, x, a):
    shape = c.value(x[1])
    if shape is None:
        if a.get("allowzero", 0):
            return [c.op("Reshape", x[0], x[1])]
        raise errors.UnimplementedError(
            f"ONNX node {c.node!r}: Reshape needs a constant shape unless allowzero=1")
    shape = [int(d) for d in shape.reshape(-1)]
    if not a.get("allowzero", 0):
        shape = [x[0].shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return [reshape(c, x[0], shape)]


@rule("Flatten", "Reshape")
def _flatten(c, x, a):
    s = x[0].shape
    ax = a.get("axis", 1)
    ax = ax + len(s) if ax < 0 else ax
    outer = int(np.prod(s[:ax], dtype=np.int64))
    return [reshape(c, x[0], [outer, -1 if outer else int(np.prod(s[ax:]))])]


def _squeeze(c, x, axes):
    s = list(x.shape)
    if axes is None:
        axes = [i for i, d in enumerate(s) if d == 1]
    axes = _axes(axes, len(s))
    return c.op("Reshape", x, np.asarray([d for i, d in enumerate(s) if i not in axes],
                                         np.int64))


@rule("Squeeze", "Reshape", until=12)
def _squeeze1(c, x, a):
    return [_squeeze(c, x[0], a.get("axes"))]


@rule("Squeeze", "Reshape", since=13)
def _squeeze13(c, x, a):
    axes = c.value(x[1]) if len(x) > 1 and x[1] is not None else None
    return [_squeeze(c, x[0], None if axes is None else axes.reshape(-1))]


def _unsqueeze(c, x, axes):
    s = list(x.shape)
    r = len(s) + len(axes)
    axes = sorted(_axes(axes, r))
    for ax in axes:
        s.insert(ax, 1)
    return c.op("Reshape", x, np.asarray(s, np.int64))


@rule("Unsqueeze", "Reshape", until=12)
def _unsq1(c, x, a):
    return [_unsqueeze(c, x[0], a["axes"])]


@rule("Unsqueeze", "Reshape", since=13)
def _unsq13(c, x, a):
    return [_unsqueeze(c, x[0], c.need(x[1], "axes").reshape(-1))]


@rule("Transpose", "Transpose")
def _transpose(c, x, a):
    perm = a.get("perm") or list(range(rank(x[0])))[::-1]
    return [transpose(c, x[0], perm)]


@rule("Concat", "ConcatV2")
def _concat(c, x, a):
    xs = [t for t in x if t is not None]
    if len(xs) == 1:   # ConcatV2 takes two or more; one input is its own result
        r = rank(xs[0])
        if not -r <= a["axis"] < r:
            raise c.error(f"Concat axis {a['axis']} is out of range for an input of rank {r}")
        return [c.op("Identity", xs[0])]
    return [c.op("ConcatV2", *xs, np.asarray(a["axis"], np.int32), N=len(xs))]


def _split(c, x, axis, sizes, n):
    d = x.shape[axis + len(x.shape) if axis < 0 else axis]
    if sizes is None:
        step = -(-d // n)
        sizes = [min(step, d - i * step) for i in range(n)]
    outs, start = [], 0
    for s in sizes:
        outs.append(_slice(c, x, [start], [start + int(s)], [axis], [1]))
        start += int(s)
    return outs


@rule("Split", "StridedSlice", until=12)
def _split1(c, x, a):
    sizes = a.get("split")
    if sizes is None and len(x) > 1 and x[1] is not None:
        sizes = c.need(x[1], "split").tolist()
    return _split(c, x[0], a.get("axis", 0), sizes, c.n_outputs)


@rule("Split", "StridedSlice", since=13)
def _split13(c, x, a):
    sizes = c.value(x[1]).tolist() if len(x) > 1 and x[1] is not None else None
    return _split(c, x[0], a.get("axis", 0), sizes, a.get("num_outputs", c.n_outputs))


def _slice(c, x, starts, ends, axes, steps):
    """ONNX Slice semantics (negative starts/ends count from the end, then
    clamp) as one StridedSlice with resolved, non-negative bounds."""
    r = rank(x)
    b, e, s = [0] * r, [0] * r, [1] * r
    bm = em = (1 << r) - 1
    for st, en, ax, sp in zip(starts, ends, axes, steps):
        ax = int(ax) + r if int(ax) < 0 else int(ax)
        st, en, sp = int(st), int(en), int(sp)
        if sp == 0:
            raise c.error("Slice steps must not be 0")
        dim = x.shape[ax]
        st = st + dim if st < 0 else st
        en = en + dim if en < 0 else en
        if sp > 0:
            st, en = min(max(st, 0), dim), min(max(en, 0), dim)
        else:
            st, en = min(max(st, 0), dim - 1), min(max(en, -1), dim - 1)
        b[ax], e[ax], s[ax] = st, en, sp
        bm &= ~(1 << ax)
        if en >= 0:
            em &= ~(1 << ax)
    return c.op("StridedSlice", x, i64(b), i64(e), i64(s), begin_mask=bm, end_mask=em)


@rule("Slice", "StridedSlice", until=9)
def _slice1(c, x, a):
    axes = a.get("axes", list(range(len(a["starts"]))))
    return [_slice(c, x[0], a["starts"], a["ends"], axes, [1] * len(axes))]


@rule("Slice", "StridedSlice", since=10)
def _slice10(c, x, a):
    starts = c.need(x[1], "starts").reshape(-1)
    ends = c.need(x[2], "ends").reshape(-1)
    axes = c.value(x[3]) if len(x) > 3 and x[3] is not None else None
    steps = c.value(x[4]) if len(x) > 4 and x[4] is not None else None
    axes = list(range(len(starts))) if axes is None else axes.reshape(-1)
    steps = [1] * len(starts) if steps is None else steps.reshape(-1)
    return [_slice(c, x[0], starts, ends, axes, steps)]


def _fix_indices(c, idx, dim):
    return c.op("SelectV2", c.op("Less", idx, const(0, idx)),
                c.op("AddV2", idx, const(dim, idx)), idx)


@rule("Gather", "GatherV2 SelectV2 Less AddV2")
def _gather(c, x, a):
    ax = a.get("axis", 0)
    ax = ax + rank(x[0]) if ax < 0 else ax
    idx = _fix_indices(c, x[1], x[0].shape[ax])
    return [c.op("GatherV2", x[0], idx, np.asarray(ax, np.int64))]


@rule("Expand", "BroadcastTo")
def _expand(c, x, a):
    shape = [int(d) for d in c.need(x[1], "shape").reshape(-1)]
    out = list(np.broadcast_shapes(tuple(x[0].shape), tuple(shape)))
    return [c.op("BroadcastTo", x[0], np.asarray(out, np.int64))]


@rule("Tile", "Tile")
def _tile(c, x, a):
    return [c.op("Tile", x[0], x[1])]


@rule("ConstantOfShape", "Fill")
def _cos(c, x, a):
    v = a.get("value")
    v = np.zeros((1,), np.float32) if v is None else np.asarray(v).reshape(-1)
    shape = c.value(x[0])
    if shape is not None:
        return [np.full(tuple(int(d) for d in shape.reshape(-1)), v[0], dtype=v.dtype)]
    return [c.op("Fill", x[0], v[0])]


@rule("Range", "Range Cast")
def _range(c, x, a):
    vals = [c.value(t) for t in x]
    if all(v is not None for v in vals):   # (one-element limits read as scalars, as ORT)
        vals = [v.reshape(()) if v.size == 1 else v for v in vals]
        return [np.arange(vals[0], vals[1], vals[2]).astype(vals[0].dtype)]
    return [c.op("Range", *x)]


@rule("Dropout", "Identity Fill StatelessRandomUniformV2 GreaterEqual Cast Mul")
def _dropout(c, x, a):
    X = x[0]
    ratio = c.value(x[1]) if len(x) > 1 and x[1] is not None else None
    train = c.value(x[2]) if len(x) > 2 and x[2] is not None else None
    ratio = 0.5 if ratio is None or c.opset < 12 else float(np.asarray(ratio).reshape(-1)[0])
    if len(x) > 2 and x[2] is not None and train is None:
        raise errors.UnimplementedError(f"ONNX node {c.node!r}: Dropout's training_mode must "
                                        "be known when the graph is built")
    if train is None or not bool(np.asarray(train).reshape(-1)[0]) or ratio == 0:
        return [c.op("Identity", X), np.ones(tuple(X.shape), dtype=bool)]
    keep = c.op("GreaterEqual", _uniform(c, X.shape, dtypes.float32, a.get("seed")),
                np.asarray(ratio, np.float32))
    scale = const(1.0 / (1.0 - ratio), X)
    return [c.op("Mul", c.op("Mul", X, c.op("Cast", keep, DstT=X.dtype)), scale), keep]


@rule("OneHot", "OneHot GatherV2 SelectV2 Less AddV2 Cast")
def _onehot(c, x, a):
    depth = int(c.need(x[1], "depth").reshape(-1)[0])
    vals = x[2]
    idx = x[0] if x[0].dtype in (dtypes.int32, dtypes.int64) else \
        c.op("Cast", x[0], DstT=dtypes.int64)
    idx = _fix_indices(c, idx, depth)
    off = c.op("GatherV2", vals, np.asarray(0, np.int64), np.asarray(0, np.int64))
    on = c.op("GatherV2", vals, np.asarray(1, np.int64), np.asarray(0, np.int64))
    ax = a.get("axis", -1)
    if ax < -1:   # counted from the end of the output, which has one axis more
        ax += rank(x[0]) + 1
    return [c.op("OneHot", idx, np.asarray(depth, np.int32), on, off, axis=ax)]


@rule("Pad", "Pad OnesLike Greater SelectV2 GatherV2 StridedSlice Identity", since=11)
def _pad11(c, x, a):
    return [_pad(c, x[0], c.need(x[1], "pads").reshape(-1),
                 c.value(x[2]) if len(x) > 2 and x[2] is not None else None,
                 c.value(x[3]) if len(x) > 3 and x[3] is not None else None,
                 a.get("mode", "constant"))]


@rule("Pad", "Pad OnesLike Greater SelectV2 GatherV2 StridedSlice Identity", since=2, until=10)
def _pad2(c, x, a):
    return [_pad(c, x[0], a["pads"], a.get("value", 0.0), None, a.get("mode", "constant"))]


def _pad_index(mode, n, lo, hi):
    """The source index of each output position along an axis of size `n`
    padded by `lo` before and `hi` after, for Pad's edge, reflect and wrap."""
    i = np.arange(-lo, n + hi)
    if mode == "edge":
        return np.clip(i, 0, n - 1)
    if mode == "wrap":
        return np.mod(i, n)
    if n == 1:
        return np.zeros_like(i)
    period = 2 * (n - 1)
    j = np.mod(np.abs(i), period)
    return np.where(j >= n, period - j, j)


def _pad(c, x, pads, value, axes, mode):
    if isinstance(mode, bytes):
        mode = mode.decode()
    if mode not in ("constant", "edge", "reflect", "wrap"):
        raise c.error(f"Pad mode {mode!r} is not one of constant, edge, reflect, wrap")
    r = rank(x)
    axes = list(range(r)) if axes is None else _axes(axes.reshape(-1), r)
    n = len(axes)
    p = np.zeros((r, 2), np.int64)
    for i, ax in enumerate(axes):
        p[ax] = (int(pads[i]), int(pads[i + n]))
    if mode != "constant":   # one gather of computed indices per padded axis
        for ax in range(r):
            if p[ax].any():
                idx = _pad_index(mode, x.shape[ax], int(p[ax, 0]), int(p[ax, 1]))
                x = c.op("GatherV2", x, idx.astype(np.int64), np.asarray(ax, np.int64))
        return c.op("Identity", x)
    if (p < 0).any():   # negative pads crop
        x = _slice(c, x, [max(-b, 0) for b in p[:, 0]],
                   [d - max(-e, 0) for d, e in zip(x.shape, p[:, 1])], list(range(r)), [1] * r)
        p = np.maximum(p, 0)
    v = 0 if value is None else np.asarray(value).reshape(-1)[0]
    if v == 0:
        return c.op("Pad", x, p)
    return _pad_value(c, x, p, v)


def _pad_value(c, x, p, v):
    """Pad `x` by `p` with value `v` (Pad pads with zeros: a padded mask of
    ones picks `v` in the border, exactly)."""
    inside = c.op("Greater", c.op("Pad", c.op("OnesLike", x), p), const(0, x))
    return c.op("SelectV2", inside, c.op("Pad", x, p), const(v, x))


# ================================================================ reductions

_REDUCE = {"ReduceSum": "Sum", "ReduceMean": "Mean", "ReduceMax": "Max", "ReduceMin": "Min",
           "ReduceProd": "Prod"}


def _reduce_axes(c, x, a, input_since):
    if c.opset >= input_since:
        axes = c.value(x[1]) if len(x) > 1 and x[1] is not None else None
        if len(x) > 1 and x[1] is not None and axes is None:
            raise errors.UnimplementedError(f"ONNX node {c.node!r}: axes must be constant")
    else:
        axes = a.get("axes")
    r = rank(x[0])
    if axes is None or len(np.asarray(axes).reshape(-1)) == 0:
        if a.get("noop_with_empty_axes", 0):
            return None
        return list(range(r))
    return _axes(np.asarray(axes).reshape(-1), r)


def _reduce(c, tf, x, axes, keep):
    if axes is None:
        return c.op("Identity", x)
    if x.dtype is dtypes.bool_ and tf in ("Max", "Min"):   # any / all, on uint8
        y = c.op(tf, c.op("Cast", x, DstT=dtypes.uint8), np.asarray(axes, np.int32),
                 keep_dims=bool(keep))
        return c.op("Cast", y, DstT=dtypes.bool_)
    return c.op(tf, x, np.asarray(axes, np.int32), keep_dims=bool(keep))


def _reduce_rule(op_type, body, input_since, ops):
    @rule(op_type, ops)
    def fn(c, x, a):
        axes = _reduce_axes(c, x, a, input_since)
        keep = a.get("keepdims", 1)
        return [body(c, x[0], axes, keep)]
    return fn


for _o, _t in _REDUCE.items():
    _reduce_rule(_o, lambda c, x, ax, k, _t=_t: _reduce(c, _t, x, ax, k),
                 13 if _o == "ReduceSum" else 18, f"{_t} Identity")
_reduce_rule("ReduceSumSquare", lambda c, x, ax, k: _reduce(c, "Sum", c.op("Mul", x, x), ax, k),
             18, "Sum Mul Identity")
_reduce_rule("ReduceL1", lambda c, x, ax, k: _reduce(c, "Sum", c.op("Abs", x), ax, k),
             18, "Sum Abs Identity")
_reduce_rule("ReduceL2",
             lambda c, x, ax, k: c.op("Sqrt", _reduce(c, "Sum", c.op("Mul", x, x), ax, k)),
             18, "Sum Mul Sqrt Identity")
_reduce_rule("ReduceLogSum", lambda c, x, ax, k: c.op("Log", _reduce(c, "Sum", x, ax, k)),
             18, "Sum Log Identity")
_reduce_rule("ReduceLogSumExp",
             lambda c, x, ax, k: c.op("Log", _reduce(c, "Sum", c.op("Exp", x), ax, k)),
             18, "Sum Exp Log Identity")


def _arg(tf):
    def fn(c, x, a):
        r = rank(x[0])
        ax = a.get("axis", 0)
        ax = ax + r if ax < 0 else ax
        v = x[0]
        if a.get("select_last_index", 0):
            v = _slice(c, v, [-1], [-_BIG], [ax], [-1])
        out = c.op(tf, v, np.asarray(ax, np.int32), output_type=dtypes.int64)
        if a.get("select_last_index", 0):
            out = c.op("Sub", np.asarray(x[0].shape[ax] - 1, np.int64), out)
        if a.get("keepdims", 1):
            out = _unsqueeze(c, out, [ax])
        return [out]
    return fn


rule("ArgMax", "ArgMax Reshape StridedSlice Sub")(_arg("ArgMax"))
rule("ArgMin", "ArgMin Reshape StridedSlice Sub")(_arg("ArgMin"))


@rule("CumSum", "Cumsum")
def _cumsum(c, x, a):
    return [c.op("Cumsum", x[0], x[1], exclusive=bool(a.get("exclusive", 0)),
                 reverse=bool(a.get("reverse", 0)))]


@rule("CumProd", "Cumprod", since=26)
def _cumprod(c, x, a):
    return [c.op("Cumprod", x[0], x[1], exclusive=bool(a.get("exclusive", 0)),
                 reverse=bool(a.get("reverse", 0)))]


for _o, _t in [("BitwiseAnd", "BitwiseAnd"), ("BitwiseOr", "BitwiseOr"),
               ("BitwiseXor", "BitwiseXor")]:
    rule(_o, _t, since=18)(lambda c, x, a, _t=_t: [c.op(_t, x[0], x[1])])
rule("BitwiseNot", "Invert", since=18)(lambda c, x, a: [c.op("Invert", x[0])])


@rule("BitShift", "LeftShift RightShift Less GreaterEqual LogicalOr SelectV2", since=11)
def _bitshift(c, x, a):
    """Shifts of the type's width or more give 0 (-1 shifting a negative
    value right), as do negative shifts; the registry ops clamp instead."""
    X, Y = x
    bits = 8 * np.dtype(X.dtype.as_numpy_dtype).itemsize
    left = a["direction"] == "LEFT"
    y = c.op(("LeftShift" if left else "RightShift"), X, Y)
    out = c.op("GreaterEqual", Y, const(bits, Y))
    if X.dtype.name.startswith("int"):
        out = c.op("LogicalOr", out, c.op("Less", Y, const(0, Y)))
        fill = const(0, X) if left else c.op("SelectV2", c.op("Less", X, const(0, X)),
                                             const(-1, X), const(0, X))
    else:
        fill = const(0, X)
    return [c.op("SelectV2", out, fill, y)]


@rule("TopK", "TopKV2 Neg Transpose", since=10)
def _topk(c, x, a):
    k = int(c.need(x[1], "K").reshape(-1)[0])
    r = rank(x[0])
    ax = a.get("axis", -1)
    ax = ax + r if ax < 0 else ax
    v = x[0]
    perm = list(range(r))
    perm[ax], perm[-1] = perm[-1], perm[ax]
    if ax != r - 1:
        v = transpose(c, v, perm)
    largest = a.get("largest", 1)
    if not largest:
        v = c.op("Neg", v)
    vals, idx = c.ops("TopKV2", v, np.asarray(k, np.int32), sorted=True,
                      index_type=dtypes.int64)
    if not largest:
        vals = c.op("Neg", vals)
    if ax != r - 1:
        vals, idx = transpose(c, vals, perm), transpose(c, idx, perm)
    return [vals, idx]


# ================================================================ nn

def _softmax(tf):
    def fn(c, x, a):
        v = x[0]
        r = rank(v)
        if c.opset < 13:  # the input is seen as 2-D [prod(:axis), prod(axis:)]
            ax = a.get("axis", 1)
            ax = ax + r if ax < 0 else ax
            s = v.shape
            flat = reshape(c, v, [int(np.prod(s[:ax], dtype=np.int64)), -1])
            return [reshape(c, c.op(tf, flat), list(s))]
        ax = a.get("axis", -1)
        ax = ax + r if ax < 0 else ax
        if ax == r - 1:
            return [c.op(tf, v)]
        perm = list(range(r))
        perm[ax], perm[-1] = perm[-1], perm[ax]
        return [transpose(c, c.op(tf, transpose(c, v, perm)), perm)]
    return fn


rule("Softmax", "Softmax Reshape Transpose")(_softmax("Softmax"))
rule("LogSoftmax", "LogSoftmax Reshape Transpose")(_softmax("LogSoftmax"))


def _matmul(c, a_, b_):
    ra, rb = rank(a_), rank(b_)
    if ra == 1:
        a_ = _unsqueeze(c, a_, [0])
    if rb == 1:
        b_ = _unsqueeze(c, b_, [1])
    if ra <= 2 and rb <= 2:
        out = c.op("MatMul", a_, b_)
    else:
        out = c.op("BatchMatMulV2", a_, b_)
    if ra == 1 or rb == 1:
        s = list(out.shape)
        if ra == 1:
            s.pop(-2)
        if rb == 1:
            s.pop(-1)
        out = reshape(c, out, s)
    return out


@rule("MatMul", "MatMul BatchMatMulV2 Reshape")
def _matmul_rule(c, x, a):
    return [_matmul(c, x[0], x[1])]


@rule("Gemm", "MatMul Mul AddV2")
def _gemm(c, x, a):
    A, B = x[0], x[1]
    y = c.op("MatMul", A, B, transpose_a=bool(a.get("transA", 0)),
             transpose_b=bool(a.get("transB", 0)))
    alpha, beta = a.get("alpha", 1.0), a.get("beta", 1.0)
    if alpha != 1.0:
        y = c.op("Mul", y, const(alpha, y))
    if len(x) > 2 and x[2] is not None:
        C = x[2]
        if beta != 1.0:
            C = c.op("Mul", C, const(beta, C))
        y = c.op("AddV2", y, C)
    return [y]


def _bn_shape(x, t):
    return [1, -1] + [1] * (rank(x) - 2)


@rule("BatchNormalization", "Sub Mul AddV2 Rsqrt Reshape Mean")
def _bn(c, x, a):
    X, scale, bias, mean, var = x[:5]
    eps = a.get("epsilon", 1e-5)
    s = _bn_shape(X, scale)
    if a.get("training_mode", 0) and c.opset >= 14:
        # batch statistics normalize; the running ones are updated by momentum
        axes = np.asarray([0] + list(range(2, rank(X))), np.int32)
        bm = c.op("Mean", X, axes)
        d = c.op("Sub", X, reshape(c, bm, s))
        bv = c.op("Mean", c.op("Mul", d, d), axes)
        mom = a.get("momentum", 0.9)
        run_m = c.op("AddV2", c.op("Mul", mean, const(mom, mean)),
                     c.op("Mul", bm, const(1 - mom, bm)))
        run_v = c.op("AddV2", c.op("Mul", var, const(mom, var)),
                     c.op("Mul", bv, const(1 - mom, bv)))
        k = c.op("Mul", scale, c.op("Rsqrt", c.op("AddV2", bv, const(eps, bv))))
        y = c.op("AddV2", c.op("Mul", d, reshape(c, k, s)), reshape(c, bias, s))
        return [y, run_m, run_v]
    inv = c.op("Rsqrt", c.op("AddV2", var, const(eps, var)))
    k = c.op("Mul", scale, inv)
    y = c.op("AddV2", c.op("Mul", c.op("Sub", X, reshape(c, mean, s)), reshape(c, k, s)),
             reshape(c, bias, s))
    return [y]


def _normalize(c, x, axes, eps):
    mean = c.op("Mean", x, np.asarray(axes, np.int32), keep_dims=True)
    d = c.op("Sub", x, mean)
    var = c.op("Mean", c.op("Mul", d, d), np.asarray(axes, np.int32), keep_dims=True)
    return c.op("Mul", d, c.op("Rsqrt", c.op("AddV2", var, const(eps, var))))


@rule("InstanceNormalization", "Mean Sub Mul Rsqrt AddV2 Reshape")
def _instnorm(c, x, a):
    X, scale, bias = x
    r = rank(X)
    y = _normalize(c, X, list(range(2, r)), a.get("epsilon", 1e-5))
    s = _bn_shape(X, scale)
    return [c.op("AddV2", c.op("Mul", y, reshape(c, scale, s)), reshape(c, bias, s))]


@rule("LayerNormalization", "Mean Sub Mul Rsqrt AddV2 Cast", since=17)
def _layernorm(c, x, a):
    X = x[0]
    r = rank(X)
    ax = a.get("axis", -1)
    ax = ax + r if ax < 0 else ax
    axes = list(range(ax, r))
    mean = c.op("Mean", X, np.asarray(axes, np.int32), keep_dims=True)
    d = c.op("Sub", X, mean)
    var = c.op("Mean", c.op("Mul", d, d), np.asarray(axes, np.int32), keep_dims=True)
    inv = c.op("Rsqrt", c.op("AddV2", var, const(a.get("epsilon", 1e-5), var)))
    y = c.op("Mul", d, x[1]) if len(x) > 1 and x[1] is not None else d
    y = c.op("Mul", y, inv)
    if len(x) > 2 and x[2] is not None:
        y = c.op("AddV2", y, x[2])
    return [y, mean, inv]


def _to_nhwc(c, x):
    return transpose(c, x, [0, 2, 3, 1])


def _to_nchw(c, x):
    return transpose(c, x, [0, 3, 1, 2])


def _spatial(a, name, n, default):
    """Attribute `name` as a list of ints (n of them when not given); strides
    and dilations must be n values of at least 1."""
    v = a.get(name)
    out = [default] * n if not v else [int(t) for t in v]
    if name in ("strides", "dilations") and (len(out) != n or any(t < 1 for t in out)):
        raise errors.InvalidArgumentError(
            f"attribute {name} = {out} must give {n} values of at least 1, one per spatial "
            "axis")
    return out


def _conv_pads(a, in_hw, k_hw, strides, dil):
    auto = a.get("auto_pad", "NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads_b, pads_e = [], []
        for i, (n, k, s, d) in enumerate(zip(in_hw, k_hw, strides, dil)):
            out = -(-n // s)
            total = max((out - 1) * s + (k - 1) * d + 1 - n, 0)
            small = total // 2
            pads_b.append(small if auto == "SAME_UPPER" else total - small)
            pads_e.append(total - pads_b[-1])
        return pads_b + pads_e
    if auto == "VALID":
        return [0] * (2 * len(in_hw))
    return list(a.get("pads", [0] * (2 * len(in_hw))))


def _explicit(pads):
    n = len(pads) // 2
    return [0, 0] + [v for i in range(n) for v in (pads[i], pads[i + n])] + [0, 0]


def _conv2d_nhwc(c, xh, wh, strides, dil, pads, g):
    """Conv2D of NHWC `xh` with HWIO `wh` ([kh, kw, cin/g, cout]), ONNX
    `pads` (begins, then ends) and `g` groups; NHWC out."""
    attrs = dict(strides=[1] + list(strides) + [1], dilations=[1] + list(dil) + [1],
                 padding="EXPLICIT", explicit_paddings=_explicit(pads))
    if g == 1:
        return c.op("Conv2D", xh, wh, **attrs)
    cin, cout = xh.shape[3] // g, wh.shape[3] // g
    parts = [c.op("Conv2D", _slice(c, xh, [i * cin], [(i + 1) * cin], [3], [1]),
                  _slice(c, wh, [i * cout], [(i + 1) * cout], [3], [1]), **attrs)
             for i in range(g)]
    return c.op("ConcatV2", *parts, np.asarray(3, np.int32), N=g)


def _conv_nd(c, X, W, B, a, pads=None, strides=None):
    """ONNX Conv of an [N, C, spatial...] input of 1, 2 or 3 spatial
    dimensions, on Conv2D: 1-D as 2-D of height 1, 3-D as the sum over the
    kernel's depth of 2-D convolutions of depth slices (each batched over
    the output depths)."""
    r = rank(X)
    n = r - 2
    if n not in (1, 2, 3):
        raise errors.UnimplementedError(
            f"ONNX node {c.node!r}: Conv of rank {r} is not mapped (1-D, 2-D and 3-D only)")
    k = list(W.shape[2:])
    strides = strides or _spatial(a, "strides", n, 1)
    dil = _spatial(a, "dilations", n, 1)
    if pads is None:
        pads = _conv_pads(a, X.shape[2:], k, strides, dil)
    g = a.get("group", 1)
    N, C, O = X.shape[0], X.shape[1], W.shape[0]
    if n == 1:
        xh = transpose(c, reshape(c, X, [N, C, 1, X.shape[2]]), [0, 2, 3, 1])
        wh = transpose(c, reshape(c, W, [O, W.shape[1], 1, k[0]]), [2, 3, 1, 0])
        y = _conv2d_nhwc(c, xh, wh, [1] + strides, [1] + dil, [0, pads[0], 0, pads[1]], g)
        y = reshape(c, y, [N, y.shape[2], O])
    elif n == 2:
        y = _conv2d_nhwc(c, _to_nhwc(c, X), transpose(c, W, [2, 3, 1, 0]), strides, dil,
                         pads, g)
    else:
        xt = transpose(c, X, [0, 2, 3, 4, 1])               # N D H W C
        if pads[0] or pads[3]:
            xt = c.op("Pad", xt, np.asarray([[0, 0], [pads[0], pads[3]], [0, 0], [0, 0],
                                             [0, 0]], np.int64))
        depth = xt.shape[1]
        od = (depth - (k[0] - 1) * dil[0] - 1) // strides[0] + 1
        wt = transpose(c, W, [2, 3, 4, 1, 0])               # kd kh kw I O
        H, Wd = X.shape[3], X.shape[4]
        y = None
        for i in range(k[0]):
            b = i * dil[0]
            xs = _slice(c, xt, [b], [b + (od - 1) * strides[0] + 1], [1], [strides[0]])
            wi = reshape(c, _slice(c, wt, [i], [i + 1], [0], [1]), list(W.shape[3:]) +
                         [W.shape[1], O])
            yi = _conv2d_nhwc(c, reshape(c, xs, [N * od, H, Wd, C]), wi, strides[1:],
                              dil[1:], [pads[1], pads[2], pads[4], pads[5]], g)
            y = yi if y is None else c.op("AddV2", y, yi)
        y = reshape(c, y, [N, od] + list(y.shape[1:]))
    if B is not None:
        y = c.op("AddV2", y, B)
    return transpose(c, y, [0, r - 1] + list(range(1, r - 1)))


@rule("Conv", "Conv2D Transpose AddV2 Reshape ConcatV2 StridedSlice Pad")
def _conv(c, x, a):
    return [_conv_nd(c, x[0], x[1], x[2] if len(x) > 2 else None, a)]


def _flip(c, w, axes):
    v = c.value(w)
    if v is not None:
        return np.flip(v, axis=tuple(axes)).copy()
    return _slice(c, w, [-1] * len(axes), [-_BIG] * len(axes), axes, [-1] * len(axes))


@rule("ConvTranspose", "Conv2D Transpose AddV2 Reshape ConcatV2 StridedSlice Pad")
def _conv_transpose(c, x, a):
    """ConvTranspose as the Conv of the input spread by the strides (zeros
    between its values) with the flipped kernel, its channel axes swapped."""
    X, W = x[0], x[1]
    B = x[2] if len(x) > 2 else None
    r = rank(X)
    n = r - 2
    k = list(W.shape[2:])
    strides, dil = _spatial(a, "strides", n, 1), _spatial(a, "dilations", n, 1)
    outpad = _spatial(a, "output_padding", n, 0)
    g = a.get("group", 1)
    ins = list(X.shape[2:])
    full = [s * (i - 1) + o + (kk - 1) * d + 1
            for s, i, o, kk, d in zip(strides, ins, outpad, k, dil)]
    auto = a.get("auto_pad", "NOTSET")
    shape = a.get("output_shape")
    if shape or auto in ("SAME_UPPER", "SAME_LOWER"):
        shape = list(shape)[-n:] if shape else [i * s for i, s in zip(ins, strides)]
        total = [f - o for f, o in zip(full, shape)]
        upper = auto == "SAME_UPPER"
        pb = [t // 2 if upper else t - t // 2 for t in total]
        pads = pb + [t - b for t, b in zip(total, pb)]
    elif auto == "VALID":
        pads = [0] * (2 * n)
    else:
        pads = _spatial(a, "pads", 2 * n, 0)
    # spread: zeros between the input's values along each strided axis
    N, C = X.shape[0], X.shape[1]
    y = X
    for i, s in enumerate(strides):
        if s == 1:
            continue
        ax = 2 + i
        sh = list(y.shape)
        y = reshape(c, y, sh[:ax + 1] + [1] + sh[ax + 1:])
        p = np.zeros((len(sh) + 1, 2), np.int64)
        p[ax + 1, 1] = s - 1
        y = reshape(c, c.op("Pad", y, p), sh[:ax] + [sh[ax] * s] + sh[ax + 1:])
        y = _slice(c, y, [0], [(sh[ax] - 1) * s + 1], [ax], [1])
    # the full padding (k - 1) * d less the node's pads, plus output_padding at the end
    lo = [(kk - 1) * d - pads[i] for i, (kk, d) in enumerate(zip(k, dil))]
    hi = [(kk - 1) * d - pads[n + i] + outpad[i] for i, (kk, d) in enumerate(zip(k, dil))]
    crop_b, crop_e = [max(-v, 0) for v in lo], [max(-v, 0) for v in hi]
    if any(crop_b) or any(crop_e):
        y = _slice(c, y, crop_b, [y.shape[2 + i] - e for i, e in enumerate(crop_e)],
                   list(range(2, r)), [1] * n)
    # W [C, O/g, k...] -> per group [O/g, C/g, k...], flipped
    cg, og = C // g, W.shape[1]
    wt = _flip(c, W, list(range(2, r)))
    if isinstance(wt, np.ndarray):
        wt = np.concatenate([np.swapaxes(wt[i * cg:(i + 1) * cg], 0, 1) for i in range(g)], 0)
    else:
        perm = [1, 0] + list(range(2, r))
        parts = [transpose(c, _slice(c, wt, [i * cg], [(i + 1) * cg], [0], [1]), perm)
                 for i in range(g)]
        wt = parts[0] if g == 1 else c.op("ConcatV2", *parts, np.asarray(0, np.int32), N=g)
    if not isinstance(wt, np.ndarray) and og * g != wt.shape[0]:
        raise c.error("ConvTranspose weight does not match the groups")
    conv_pads = [max(v, 0) for v in lo] + [max(v, 0) for v in hi]
    return [_conv_nd(c, y, wt, B, dict(group=g, dilations=dil), pads=conv_pads,
                     strides=[1] * n)]


def _pool_geometry(c, X, a, k):
    """(strides, dilations, begin pads, end pads, output sizes) of an ONNX
    pooling node; the end pads include what ceil_mode adds."""
    n = len(k)
    strides, dil = _spatial(a, "strides", n, 1), _spatial(a, "dilations", n, 1)
    pads = _conv_pads(a, X.shape[2:], k, strides, dil)
    ceil = a.get("ceil_mode", 0)
    pb, pe, out = list(pads[:n]), [], []
    for i in range(n):
        size, w, s = X.shape[2 + i], (k[i] - 1) * dil[i] + 1, strides[i]
        span = size + pads[i] + pads[n + i] - w
        if span < 0:
            raise c.error(f"the pooling window ({w}) is larger than the padded input "
                          f"({size + pads[i] + pads[n + i]})")
        o = (-(-span // s) if ceil else span // s) + 1
        if ceil and (o - 1) * s >= size + pads[i]:
            o -= 1   # the last window starts inside the input or its begin pad
        out.append(o)
        pe.append(max((o - 1) * s + w - size - pads[i], pads[n + i]))
    return strides, dil, pb, pe, out, pads


def _window_counts(size, pb, pe, k, s, d, out, include_pad):
    """How many positions of each of `out` windows along one axis lie in
    the input (or, with `include_pad`, in the input and its pads)."""
    lo, hi = (-pb, size + pe) if include_pad else (0, size)
    pos = (np.arange(out) * s - pb)[:, None] + np.arange(k)[None, :] * d
    return ((pos >= lo) & (pos < hi)).sum(1)


def _flat_index(shape, spatial_pos, column_major):
    """Flat indices into an [N, C, spatial...] tensor of `shape` of the
    spatial positions `spatial_pos` ([N, C, out...] each, one per axis):
    the spatial part row-major, or column-major (MaxPool storage_order=1)."""
    n, ch = shape[:2]
    dims = list(shape[2:])
    lead = (np.arange(n).reshape([n, 1] + [1] * len(dims)) * ch +
            np.arange(ch).reshape([1, ch] + [1] * len(dims))) * int(np.prod(dims))
    axes = list(range(len(dims))) if column_major else list(range(len(dims)))[::-1]
    flat, stride = np.zeros(np.shape(spatial_pos[0]), np.int64), 1
    for i in axes:   # the fastest-varying axis first
        flat = flat + spatial_pos[i] * stride
        stride *= dims[i]
    return lead + flat


def _pool(c, X, a, kind, indices=False):
    """Max, average ("avg") or p-norm ("lp") pooling of [N, C, spatial...]:
    2-D (and 1-D, as 2-D of height 1) without dilations on MaxPool/AvgPool,
    any other rank or dilation as the maximum or sum of strided slices."""
    r = rank(X)
    if r < 3:
        raise c.error(f"pooling needs an input of rank 3 or more, got rank {r}")
    k = [int(v) for v in a["kernel_shape"]]
    n = len(k)
    strides, dil, pb, pe, out, pads = _pool_geometry(c, X, a, k)
    x = X
    if kind == "lp":
        p = a.get("p", 2)
        x = c.op("Mul", X, X) if p == 2 else c.op("Pow", c.op("Abs", X), const(p, X))
    p_arr = np.zeros((r, 2), np.int64)
    p_arr[2:, 0], p_arr[2:, 1] = pb, pe
    if kind == "max":
        lo = -np.inf if X.dtype.is_floating else np.iinfo(X.dtype.as_numpy_dtype).min
        xp = _pad_value(c, x, p_arr, lo) if p_arr.any() else x
    else:
        xp = c.op("Pad", x, p_arr) if p_arr.any() else x
    if indices:   # max pooling and the flat index of each maximum (the first of ties)
        y, idx = None, None
        grids = np.meshgrid(*[np.arange(m) for m in out], indexing="ij")
        for offs in itertools.product(*[range(v) for v in k]):
            b = [o * d for o, d in zip(offs, dil)]
            e = [v + (m - 1) * s + 1 for v, m, s in zip(b, out, strides)]
            sl = _slice(c, xp, b, e, list(range(2, r)), strides)
            pos = [np.broadcast_to(gi * s - p0 + bi, list(X.shape[:2]) + out)
                   for gi, s, p0, bi in zip(grids, strides, pb, b)]
            here = _flat_index(list(X.shape), pos, a.get("storage_order", 0))
            if y is None:
                y, idx = sl, here
                continue
            better = c.op("Greater", sl, y)
            y = c.op("SelectV2", better, sl, y)
            idx = c.op("SelectV2", better, here, idx)
        return y, idx
    if n <= 2 and dil == [1] * n:
        x4 = xp if n == 2 else reshape(c, xp, list(xp.shape[:2]) + [1, xp.shape[2]])
        kk, ss = (k, strides) if n == 2 else ([1] + k, [1] + strides)
        y = c.op("MaxPool" if kind == "max" else "AvgPool", _to_nhwc(c, x4),
                 ksize=[1] + kk + [1], strides=[1] + ss + [1], padding="VALID")
        y = _to_nchw(c, y)
        if n == 1:
            y = reshape(c, y, list(X.shape[:2]) + out)
        scale = float(np.prod(k))   # AvgPool divided by the window size
    else:
        y = None
        for offs in itertools.product(*[range(v) for v in k]):
            b = [o * d for o, d in zip(offs, dil)]
            e = [v + (m - 1) * s + 1 for v, m, s in zip(b, out, strides)]
            sl = _slice(c, xp, b, e, list(range(2, r)), strides)
            y = sl if y is None else c.op("Maximum" if kind == "max" else "AddV2", y, sl)
        scale = 1.0
    if kind == "max":
        return y
    if kind == "avg":
        counts = np.ones((), np.float64)
        for i in range(n):
            w = _window_counts(X.shape[2 + i], pads[i], pads[n + i], k[i], strides[i],
                               dil[i], out[i], a.get("count_include_pad", 0))
            counts = np.multiply.outer(counts, w)
        factor = scale / counts
        if not np.allclose(factor, 1.0):
            y = c.op("Mul", y, const(factor, y))
        return y
    if scale != 1.0:
        y = c.op("Mul", y, const(scale, y))
    p = a.get("p", 2)
    return c.op("Sqrt", y) if p == 2 else c.op("Pow", y, const(1.0 / p, y))


_POOL_OPS = "MaxPool AvgPool Transpose Pad Reshape OnesLike Greater SelectV2 StridedSlice " \
    "Maximum AddV2 Mul"


@rule("MaxPool", _POOL_OPS)
def _maxpool(c, x, a):
    if c.n_outputs > 1:
        return list(_pool(c, x[0], a, "max", indices=True))
    return [_pool(c, x[0], a, "max")]


@rule("MaxUnpool", "Reshape TensorScatterUpdate Cast Pad", since=9)
def _maxunpool(c, x, a):
    """The values put back at MaxPool's flat indices (into the shape the
    pooling implies), zeros elsewhere; an output_shape pads at the end."""
    X, I = x[0], x[1]
    n = rank(X) - 2
    k = [int(v) for v in a["kernel_shape"]]
    strides, pads = _spatial(a, "strides", n, 1), _spatial(a, "pads", 2 * n, 0)
    inferred = list(X.shape[:2]) + [(i - 1) * s + kk - pads[j] - pads[n + j] for j, (i, s, kk)
                                    in enumerate(zip(X.shape[2:], strides, k))]
    flat = np.zeros(int(np.prod(inferred)), X.dtype.as_numpy_dtype)
    idx = reshape(c, c.op("Cast", I, DstT=dtypes.int64), [-1, 1])
    y = reshape(c, c.op("TensorScatterUpdate", flat, idx, reshape(c, X, [-1])), inferred)
    shape = c.value(x[2]) if len(x) > 2 and x[2] is not None else None
    if shape is not None:
        extra = [int(w) - h for w, h in zip(np.asarray(shape).reshape(-1), inferred)]
        if any(extra):
            y = c.op("Pad", y, np.asarray([[0, e] for e in extra], np.int64))
    return [y]


@rule("AveragePool", _POOL_OPS)
def _avgpool(c, x, a):
    return [_pool(c, x[0], a, "avg")]


@rule("LpPool", _POOL_OPS + " Abs Pow Sqrt", since=11)
def _lppool(c, x, a):
    return [_pool(c, x[0], a, "lp")]


@rule("LRN", "Mul Pad StridedSlice AddV2 Pow RealDiv")
def _lrn(c, x, a):
    """x / (bias + alpha / size * (sum of x**2 over `size` neighbouring channels))**beta"""
    X = x[0]
    size = int(a["size"])
    lo = (size - 1) // 2
    p = np.zeros((rank(X), 2), np.int64)
    p[1] = (lo, size - 1 - lo)
    sq = c.op("Pad", c.op("Mul", X, X), p)
    C = X.shape[1]
    total = None
    for i in range(size):
        sl = _slice(c, sq, [i], [i + C], [1], [1])
        total = sl if total is None else c.op("AddV2", total, sl)
    base = c.op("AddV2", c.op("Mul", total, const(a.get("alpha", 1e-4) / size, X)),
                const(a.get("bias", 1.0), X))
    return [c.op("RealDiv", X, c.op("Pow", base, const(a.get("beta", 0.75), X)))]


# ================================================================ resize

def _resize_coeffs(mode, nearest_mode, ratio, scale, antialias, a_cubic):
    """The taps of one output position at fractional offset `ratio` in (0, 1]."""
    if mode == "nearest":
        if float(ratio).is_integer():
            return np.array([0.0, 1.0])
        right = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5,
                 "floor": False, "ceil": True}[nearest_mode]
        return np.array([0.0, 1.0]) if right else np.array([1.0, 0.0])
    if mode == "linear":
        if not antialias:
            return np.array([1 - ratio, ratio])
        s = min(scale, 1.0)
        start = int(np.floor(-1 / s) + 1)
        w = np.clip(1 - np.abs((np.arange(start, 2 - start) - ratio) * s), 0, 1)
        return w / w.sum()
    A = a_cubic
    if not antialias:
        r = ratio
        return np.array([((A * (r + 1) - 5 * A) * (r + 1) + 8 * A) * (r + 1) - 4 * A,
                         ((A + 2) * r - (A + 3)) * r * r + 1,
                         ((A + 2) * (1 - r) - (A + 3)) * (1 - r) * (1 - r) + 1,
                         ((A * (2 - r) - 5 * A) * (2 - r) + 8 * A) * (2 - r) - 4 * A])
    s = min(scale, 1.0)
    start = int(np.floor(-2 / s) + 1)
    t = np.abs(s * (np.arange(start, 2 - start) - ratio))
    w = np.where(t <= 1, (A + 2) * t ** 3 - (A + 3) * t ** 2 + 1,
                 np.where(t < 2, A * t ** 3 - 5 * A * t ** 2 + 8 * A * t - 4 * A, 0.0))
    return w / w.sum()


def _resize_matrix(n_in, n_out, scale, roi, a):
    """The [n_out, n_in] interpolation matrix of Resize along one axis and
    the output positions that take the extrapolation value (onnx's
    reference semantics: per axis, the taps nearest the source coordinate,
    the input's edge repeated beyond it)."""
    ctm = a["coordinate_transformation_mode"]
    y = np.arange(n_out, dtype=np.float64)
    width = scale * n_in
    extra = np.zeros(n_out, bool)
    if ctm == "align_corners":
        x = np.zeros(n_out) if width == 1 else y * (n_in - 1) / (width - 1)
    elif ctm == "asymmetric":
        x = y / scale
    elif ctm == "tf_crop_and_resize":
        x = np.full(n_out, (roi[1] - roi[0]) * (n_in - 1) / 2) if width == 1 else \
            y * (roi[1] - roi[0]) * (n_in - 1) / (width - 1)
        x = x + roi[0] * (n_in - 1)
        extra = (x < 0) | (x > n_in - 1)
    elif ctm == "pytorch_half_pixel":
        x = np.full(n_out, -0.5) if width == 1 else (y + 0.5) / scale - 0.5
    elif ctm == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif ctm == "half_pixel_symmetric":
        x = n_in / 2 * (1 - n_out / width) + (y + 0.5) / scale - 0.5
    else:
        raise ValueError(f"coordinate_transformation_mode {ctm!r} is not one ONNX defines")
    base = np.floor(x)
    ratio = np.where(x == base, 1.0, x - base)
    coeffs = np.stack([_resize_coeffs(a["mode"], a["nearest_mode"], float(r), scale,
                                      a["antialias"], a["cubic_coeff_a"]) for r in ratio]) \
        if n_out else np.zeros((0, 2))
    n = coeffs.shape[1]
    pad = int(np.ceil(n / 2))
    xp = x + pad
    p = np.floor(xp).astype(np.int64)
    if n % 2 == 0:
        off = np.where(xp - p == 0, -(n // 2), -(n // 2) + 1)
    else:
        off = np.where(xp - p <= 0.5, -((n - 1) // 2), -((n - 1) // 2) + 1)
    idx = (p + off)[:, None] + np.arange(n)[None, :] - pad
    if a["exclude_outside"]:
        coeffs = np.where((idx < 0) | (idx >= n_in), 0.0, coeffs)
        total = coeffs.sum(-1, keepdims=True)
        coeffs = coeffs / np.where(total == 0, 1.0, total)
    m = np.zeros((n_out, n_in))
    np.add.at(m, (np.repeat(np.arange(n_out), n), np.clip(idx, 0, n_in - 1).reshape(-1)),
              coeffs.reshape(-1))
    return m, extra


def _resize(c, X, scales, sizes, roi, a):
    r = rank(X)
    shape = list(X.shape)
    axes = _axes(a.get("axes") or list(range(r)), r)
    if sizes is not None:
        sizes = [int(v) for v in sizes]
        fac = [sizes[i] / shape[ax] for i, ax in enumerate(axes)]
        policy = a.get("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            s = min(fac) if policy == "not_larger" else max(fac)
            fac = [s] * len(axes)
            sizes = [int(s * shape[ax] + 0.5) for ax in axes]
    else:
        fac = [float(v) for v in scales]
        sizes = [int(f * shape[ax]) for f, ax in zip(fac, axes)]
    if len(fac) != len(axes):
        raise c.error(f"Resize has {len(fac)} scales or sizes for {len(axes)} axes")
    if roi is not None and len(roi) == 2 * len(axes):
        roi = {ax: (float(roi[i]), float(roi[len(axes) + i])) for i, ax in enumerate(axes)}
    else:
        roi = {ax: (0.0, 1.0) for ax in axes}
    y, mask = X, None
    for ax, f, n_out in zip(axes, fac, sizes):
        n_in = shape[ax]
        if np.isclose(f, 1.0) and n_out == n_in and roi[ax] == (0.0, 1.0):
            continue
        m, extra = _resize_matrix(n_in, n_out, f, roi[ax], a)
        if a["mode"] == "nearest":   # one source per output: a gather, exact in any dtype
            y = c.op("GatherV2", y, m.argmax(1).astype(np.int64), np.asarray(ax, np.int64))
        else:
            s = list(y.shape)
            pre, post = int(np.prod(s[:ax], dtype=np.int64)), int(np.prod(s[ax + 1:],
                                                                          dtype=np.int64))
            yf = y if y.dtype.is_floating else c.op("Cast", y, DstT=dtypes.float32)
            w = const(m, yf)
            if pre == 1:
                out = c.op("MatMul", w, reshape(c, yf, [n_in, post]))
            else:
                out = c.op("BatchMatMulV2", w[None], reshape(c, yf, [pre, n_in, post]))
            out = reshape(c, out, s[:ax] + [n_out] + s[ax + 1:])
            if out.dtype is not y.dtype:
                info = np.iinfo(y.dtype.as_numpy_dtype)
                out = c.op("Cast", c.op("Minimum", c.op("Maximum", c.op("Round", out),
                                                         const(info.min, out)),
                                        const(info.max, out)), DstT=y.dtype)
            y = out
        if extra.any():
            e = extra.reshape([1] * ax + [n_out] + [1] * (r - ax - 1))
            mask = e if mask is None else (mask | e)
        shape[ax] = n_out
    if mask is not None:
        mask = np.broadcast_to(mask, shape).copy()
        y = c.op("SelectV2", mask, const(a.get("extrapolation_value", 0.0), y), y)
    return c.op("Identity", y)


def _resize_attrs(a, **defaults):
    out = dict(mode="nearest", coordinate_transformation_mode="half_pixel",
               nearest_mode="round_prefer_floor", cubic_coeff_a=-0.75, exclude_outside=0,
               antialias=0)
    out.update(defaults)
    out.update(a)
    return out


_RESIZE_OPS = "GatherV2 MatMul BatchMatMulV2 Reshape Cast Round Maximum Minimum SelectV2 Identity"


@rule("Resize", _RESIZE_OPS, since=11)
def _resize11(c, x, a):
    x = list(x) + [None] * (4 - len(x))
    X, roi, scales, sizes = x[:4]
    roi = c.value(roi)
    scales, sizes = c.value(scales), c.value(sizes)
    if sizes is not None and sizes.size:
        scales = None
    elif scales is None or not scales.size:
        raise c.error("Resize needs constant scales or sizes")
    return [_resize(c, X, None if scales is None else scales.reshape(-1),
                    None if sizes is None else sizes.reshape(-1),
                    None if roi is None else roi.reshape(-1), _resize_attrs(a))]


def _upsample_attrs(a, scales):
    """Resize-10 and Upsample: asymmetric coordinates; nearest takes the
    floor upsampling and the ceiling downsampling (onnxruntime's rule)."""
    mode = a.get("mode", "nearest")
    mode = "linear" if mode in ("linear", "bilinear") else mode
    down = any(s < 1 for s in scales)
    return _resize_attrs({"mode": mode}, coordinate_transformation_mode="asymmetric",
                         nearest_mode="ceil" if down else "floor")


@rule("Resize", _RESIZE_OPS, since=10, until=10)
def _resize10(c, x, a):
    scales = c.need(x[1], "scales").reshape(-1)
    return [_resize(c, x[0], scales, None, None, _upsample_attrs(a, scales))]


@rule("Upsample", _RESIZE_OPS, since=7, until=9)
def _upsample(c, x, a):
    scales = np.asarray(a["scales"]) if "scales" in a else c.need(x[1], "scales").reshape(-1)
    return [_resize(c, x[0], scales, None, None, _upsample_attrs(a, scales))]


# ================================================================ recurrent

def _rnn_activation(c, name, alpha, beta):
    n = name.lower()
    unary = {"relu": "Relu", "tanh": "Tanh", "sigmoid": "Sigmoid"}
    if n in unary:
        return lambda t: c.op(unary[n], t)
    if n == "affine":
        return lambda t: c.op("AddV2", c.op("Mul", t, const(alpha, t)), const(beta, t))
    if n == "leakyrelu":
        return lambda t: c.op("SelectV2", c.op("Less", t, const(0, t)),
                              c.op("Mul", t, const(alpha, t)), t)
    if n == "thresholdedrelu":
        return lambda t: c.op("SelectV2", c.op("Greater", t, const(alpha, t)), t,
                              c.op("ZerosLike", t))
    if n == "scaledtanh":
        return lambda t: c.op("Mul", c.op("Tanh", c.op("Mul", t, const(beta, t))),
                              const(alpha, t))
    if n == "hardsigmoid":
        return lambda t: _hard_sigmoid(c, t, alpha, beta)
    if n == "elu":
        return lambda t: _elu(c, t, alpha)
    if n == "softsign":
        return lambda t: c.op("RealDiv", t, c.op("AddV2", const(1, t), c.op("Abs", t)))
    if n == "softplus":
        return lambda t: _softplus(c, t)
    raise c.error(f"recurrent activation {name!r} is not one ONNX defines")


_RNN_ALPHA = {"affine": 1.0, "leakyrelu": 0.01, "thresholdedrelu": 1.0, "scaledtanh": 1.0,
              "hardsigmoid": 0.2, "elu": 1.0}
_RNN_BETA = {"affine": 0.0, "scaledtanh": 1.0, "hardsigmoid": 0.5}


def _rnn_activations(c, a, defaults, n_dirs):
    """The node's activation functions, per direction (alpha and beta taken
    in order by the functions that have them)."""
    names = list(a.get("activations") or defaults * n_dirs)
    alphas, betas = list(a.get("activation_alpha") or []), list(a.get("activation_beta") or [])
    fns = []
    for name in names:
        n = name.lower()
        al = alphas.pop(0) if n in _RNN_ALPHA and alphas else _RNN_ALPHA.get(n, 0.0)
        be = betas.pop(0) if n in _RNN_BETA and betas else _RNN_BETA.get(n, 0.0)
        fns.append(_rnn_activation(c, name, al, be))
    k = len(defaults)
    return [fns[i * k:(i + 1) * k] for i in range(n_dirs)]


def _recurrent(c, x, a, kind):
    """RNN, GRU and LSTM, unrolled over the (static) sequence: the input
    projection of every step in one MatMul, then per step the recurrent
    MatMul and the gates; steps past a batch entry's sequence_lens keep its
    state and output zeros."""
    gates, defaults = {"RNN": (1, ["Tanh"]), "GRU": (3, ["Sigmoid", "Tanh"]),
                       "LSTM": (4, ["Sigmoid", "Tanh", "Tanh"])}[kind]
    x = list(x) + [None] * (8 - len(x))
    X, W, R, B, lens, h0 = x[:6]
    c0, P = (x[6], x[7]) if kind == "LSTM" else (None, None)
    layout = a.get("layout", 0)
    if layout:
        X = transpose(c, X, [1, 0, 2])
    seq, batch, _ = X.shape
    hid = int(a.get("hidden_size") or R.shape[-1])
    direction = a.get("direction", "forward")
    dirs = ["forward", "reverse"] if direction == "bidirectional" else [direction]
    acts = _rnn_activations(c, a, defaults, len(dirs))
    clip = a.get("clip")
    lin_before = a.get("linear_before_reset", 0)
    zero_h = np.zeros((batch, hid), X.dtype.as_numpy_dtype)
    lv = c.value(lens)
    if lv is not None and (np.asarray(lv) == seq).all():
        lens = None

    def clipped(t):
        if clip is None:
            return t
        return c.op("Minimum", c.op("Maximum", t, const(-clip, t)), const(clip, t))

    def part(t, i, axis=1):
        return _slice(c, t, [i * hid], [(i + 1) * hid], [axis], [1])

    def pick(t, d):
        return reshape(c, _slice(c, t, [d], [d + 1], [0], [1]), list(t.shape[1:]))

    ys, hs, cs = [], [], []
    flat = reshape(c, X, [seq * batch, X.shape[2]])
    for d, name in enumerate(dirs):
        f = acts[d]
        w, r = pick(W, d), pick(R, d)                       # [G*hid, in], [G*hid, hid]
        xw = c.op("MatMul", flat, w, transpose_b=True)
        if B is not None:
            b = pick(B, d)
            wb, rb = _slice(c, b, [0], [gates * hid], [0], [1]), \
                _slice(c, b, [gates * hid], [2 * gates * hid], [0], [1])
            xw = c.op("AddV2", xw, wb if kind == "GRU" and lin_before else
                      c.op("AddV2", wb, rb))
        else:
            rb = None
        xw = reshape(c, xw, [seq, batch, gates * hid])
        h = pick(h0, d) if h0 is not None else zero_h
        cell = pick(c0, d) if c0 is not None else zero_h
        p = pick(P, d) if P is not None else None
        out = [None] * seq
        steps = range(seq - 1, -1, -1) if name == "reverse" else range(seq)
        for t in steps:
            g = reshape(c, _slice(c, xw, [t], [t + 1], [0], [1]), [batch, gates * hid])
            if kind == "GRU":
                rz = c.op("MatMul", h, _slice(c, r, [0], [2 * hid], [0], [1]), transpose_b=True)
                rh = _slice(c, r, [2 * hid], [3 * hid], [0], [1])
                gz = c.op("AddV2", part(g, 0), part(rz, 0))
                gr = c.op("AddV2", part(g, 1), part(rz, 1))
                if lin_before and rb is not None:
                    gz = c.op("AddV2", gz, part(rb, 0, 0))
                    gr = c.op("AddV2", gr, part(rb, 1, 0))
                z, rr = f[0](clipped(gz)), f[0](clipped(gr))
                if lin_before:
                    hr = c.op("MatMul", h, rh, transpose_b=True)
                    if rb is not None:
                        hr = c.op("AddV2", hr, part(rb, 2, 0))
                    gh = c.op("AddV2", part(g, 2), c.op("Mul", rr, hr))
                else:
                    gh = c.op("AddV2", part(g, 2),
                              c.op("MatMul", c.op("Mul", rr, h), rh, transpose_b=True))
                hh = f[1](clipped(gh))
                new_h = c.op("AddV2", c.op("Mul", c.op("Sub", const(1, z), z), hh),
                             c.op("Mul", z, h))
                new_c = cell
            else:
                g = c.op("AddV2", g, c.op("MatMul", h, r, transpose_b=True))
                if kind == "RNN":
                    new_h, new_c = f[0](clipped(g)), cell
                else:
                    gi, go, gf, gc = (part(g, i) for i in range(4))
                    if p is not None:
                        gi = c.op("AddV2", gi, c.op("Mul", part(p, 0, 0), cell))
                        gf = c.op("AddV2", gf, c.op("Mul", part(p, 2, 0), cell))
                    i_ = f[0](clipped(gi))
                    f_ = c.op("Sub", const(1, i_), i_) if a.get("input_forget", 0) else \
                        f[0](clipped(gf))
                    new_c = c.op("AddV2", c.op("Mul", f_, cell), c.op("Mul", i_, f[1](clipped(gc))))
                    if p is not None:
                        go = c.op("AddV2", go, c.op("Mul", part(p, 1, 0), new_c))
                    new_h = c.op("Mul", f[0](clipped(go)), f[2](new_c))
            if lens is not None:    # past its length an entry keeps its state, outputs 0
                live = reshape(c, c.op("Less", np.asarray(t, lens.dtype.as_numpy_dtype), lens),
                               [batch, 1])
                out[t] = c.op("SelectV2", live, new_h, zero_h)
                new_h = c.op("SelectV2", live, new_h, h)
                new_c = c.op("SelectV2", live, new_c, cell)
            else:
                out[t] = new_h
            h, cell = new_h, new_c
        ys.append(c.op("Pack", *out, axis=0, N=seq))                 # [seq, batch, hid]
        hs.append(h)
        cs.append(cell)
    Y = c.op("Pack", *ys, axis=1, N=len(dirs))                       # [seq, dirs, batch, hid]
    Yh = c.op("Pack", *[_tensorish(c, v) for v in hs], axis=0, N=len(dirs))
    Yc = c.op("Pack", *[_tensorish(c, v) for v in cs], axis=0, N=len(dirs))
    if layout:
        Y, Yh, Yc = transpose(c, Y, [2, 0, 1, 3]), transpose(c, Yh, [1, 0, 2]), \
            transpose(c, Yc, [1, 0, 2])
    return [Y, Yh, Yc][:max(c.n_outputs, 1)]


_RNN_OPS = "MatMul AddV2 Sub Mul Reshape StridedSlice Transpose Pack Less SelectV2 Minimum " \
    "Maximum Relu Tanh Sigmoid Identity Greater ZerosLike RealDiv Abs Exp Log Neg"

rule("RNN", _RNN_OPS, since=7)(lambda c, x, a: _recurrent(c, x, a, "RNN"))
rule("GRU", _RNN_OPS, since=7)(lambda c, x, a: _recurrent(c, x, a, "GRU"))
rule("LSTM", _RNN_OPS, since=7)(lambda c, x, a: _recurrent(c, x, a, "LSTM"))


# ================================================================ control flow and sequences
# Subgraphs are lowered inline (Ctx.subgraph): If takes the branch its
# condition (a constant, or a graph input read when the graph is built)
# selects, or both branches and a SelectV2; Loop and Scan are unrolled.

_MAX_UNROLL = 100_000


def _selected(c, cond, a, b):
    if isinstance(a, list) or isinstance(b, list):
        raise errors.UnimplementedError(f"ONNX node {c.node!r}: an If of sequences needs a "
                                        "constant condition")
    a, b = _tensorish(c, a), _tensorish(c, b)
    if tuple(a.shape) != tuple(b.shape):
        raise errors.UnimplementedError(
            f"ONNX node {c.node!r}: an If whose branches give shapes {tuple(a.shape)} and "
            f"{tuple(b.shape)} needs a constant condition")
    return c.op("SelectV2", cond, a, b)


def _tensorish(c, v):
    return c.op("Identity", v) if isinstance(v, np.ndarray) else v


@rule("If", "SelectV2 Identity Reshape", raw=True)
def _if(c, x, a):
    cond = c.value(x[0])
    if cond is not None:
        return c.subgraph(a["then_branch"] if bool(np.asarray(cond).reshape(-1)[0])
                          else a["else_branch"], [])
    t = c.subgraph(a["then_branch"], [])
    e = c.subgraph(a["else_branch"], [])
    flag = reshape(c, x[0], [])
    return [_selected(c, flag, u, v) for u, v in zip(t, e)]


def _stack(c, items, axis):
    items = [_tensorish(c, v) for v in items]
    return c.op("Pack", *items, axis=axis, N=len(items))


@rule("Loop", "Pack Identity", raw=True)
def _loop(c, x, a):
    x = list(x) + [None] * (2 - len(x))
    m, cond, carried = c.value(x[0]), c.value(x[1]), list(x[2:])
    if x[0] is not None and m is None:
        raise errors.UnimplementedError(f"ONNX node {c.node!r}: Loop's trip count must be a "
                                        "constant (or a graph input)")
    if x[1] is not None and cond is None:
        raise errors.UnimplementedError(f"ONNX node {c.node!r}: Loop's condition must be a "
                                        "constant (or a graph input)")
    trips = _MAX_UNROLL if m is None else int(np.asarray(m).reshape(-1)[0])
    if m is None and cond is None:
        raise c.error("a Loop without trip count or condition never ends")
    go = True if cond is None else bool(np.asarray(cond).reshape(-1)[0])
    body = a["body"]
    n_scan = len(body.output) - 1 - len(carried)
    scans = [[] for _ in range(n_scan)]
    i = 0
    while go and i < trips:
        outs = c.subgraph(body, [np.asarray(i, np.int64), np.asarray(go)] + carried)
        more = c.value(outs[0])
        if more is None:
            raise errors.UnimplementedError(
                f"ONNX node {c.node!r}: the Loop's condition depends on tensor values; "
                "only loops whose condition is known when the graph is built are unrolled")
        go = bool(np.asarray(more).reshape(-1)[0])
        carried = list(outs[1:1 + len(carried)])
        for s, v in zip(scans, outs[1 + len(carried):]):
            s.append(v)
        i += 1
    if i >= _MAX_UNROLL:
        raise errors.ResourceExhaustedError(f"ONNX node {c.node!r}: the Loop runs more than "
                                            f"{_MAX_UNROLL} iterations")
    results = [_tensorish(c, v) if not isinstance(v, list) else v for v in carried]
    for s in scans:
        if not s:
            raise errors.UnimplementedError(f"ONNX node {c.node!r}: a Loop that runs no "
                                            "iteration has scan outputs of unknown shape")
        results.append(_stack(c, s, 0))
    return results


@rule("Scan", "Pack StridedSlice Reshape Identity", since=9, raw=True)
def _scan(c, x, a):
    body = a["body"]
    n_in = int(a["num_scan_inputs"])
    states, seqs = list(x[:len(x) - n_in]), list(x[len(x) - n_in:])
    in_axes = list(a.get("scan_input_axes") or [0] * n_in)
    in_dirs = list(a.get("scan_input_directions") or [0] * n_in)
    n_out = len(body.output) - len(states)
    out_axes = list(a.get("scan_output_axes") or [0] * n_out)
    out_dirs = list(a.get("scan_output_directions") or [0] * n_out)
    seqs = [_tensorish(c, s) for s in seqs]
    in_axes = [ax + rank(s) if ax < 0 else ax for ax, s in zip(in_axes, seqs)]
    n = seqs[0].shape[in_axes[0]]
    outs = [[] for _ in range(n_out)]
    for t in range(n):
        items = []
        for s, ax, rev in zip(seqs, in_axes, in_dirs):
            j = n - 1 - t if rev else t
            sl = _slice(c, s, [j], [j + 1], [ax], [1])
            items.append(reshape(c, sl, [d for i, d in enumerate(s.shape) if i != ax]))
        res = c.subgraph(body, states + items)
        states = list(res[:len(states)])
        for o, v in zip(outs, res[len(states):]):
            o.append(v)
    results = [_tensorish(c, v) for v in states]
    for o, ax, rev in zip(outs, out_axes, out_dirs):
        o = o[::-1] if rev else o
        r = rank(_tensorish(c, o[0])) + 1
        results.append(_stack(c, o, ax + r if ax < 0 else ax))
    return results


def _pos(c, t, n, what, insert=False):
    p = int(c.need(t, what).reshape(-1)[0])
    p = p + n if p < 0 else p
    if not 0 <= p <= (n if insert else n - 1):
        raise c.error(f"{what} {p} is out of range for a sequence of {n}")
    return p


def _seq(c, s):
    if not isinstance(s, list):
        raise c.error("the input must be a sequence")
    return s


rule("SequenceEmpty", "", since=11, raw=True)(lambda c, x, a: [[]])
rule("SequenceConstruct", "", since=11, raw=True)(lambda c, x, a: [list(x)])


@rule("SequenceInsert", "", since=11, raw=True)
def _seq_insert(c, x, a):
    s = list(_seq(c, x[0]))
    p = len(s) if len(x) < 3 or x[2] is None else _pos(c, x[2], len(s), "position", True)
    s.insert(p, x[1])
    return [s]


@rule("SequenceErase", "", since=11, raw=True)
def _seq_erase(c, x, a):
    s = list(_seq(c, x[0]))
    p = len(s) - 1 if len(x) < 2 or x[1] is None else _pos(c, x[1], len(s), "position")
    del s[p]
    return [s]


@rule("SequenceAt", "Identity", since=11, raw=True)
def _seq_at(c, x, a):
    s = _seq(c, x[0])
    return [_tensorish(c, s[_pos(c, x[1], len(s), "position")])]


@rule("SequenceLength", "", since=11, raw=True)
def _seq_len(c, x, a):
    return [np.asarray(len(_seq(c, x[0])), np.int64)]


@rule("ConcatFromSequence", "ConcatV2 Pack", since=11, raw=True)
def _concat_seq(c, x, a):
    s = [_tensorish(c, v) for v in _seq(c, x[0])]
    ax = a["axis"]
    if a.get("new_axis", 0):
        return [_stack(c, s, ax + rank(s[0]) + 1 if ax < 0 else ax)]
    if len(s) == 1:
        return [c.op("Identity", s[0])]
    return [c.op("ConcatV2", *s, np.asarray(ax, np.int32), N=len(s))]


@rule("SplitToSequence", "StridedSlice Reshape", since=11, raw=True)
def _split_seq(c, x, a):
    X = _tensorish(c, x[0])
    r = rank(X)
    ax = a.get("axis", 0)
    ax = ax + r if ax < 0 else ax
    split = c.value(x[1]) if len(x) > 1 and x[1] is not None else None
    d = X.shape[ax]
    if split is None:
        parts = _split(c, X, ax, [1] * d, d)
        if not a.get("keepdims", 1):
            parts = [reshape(c, p, [v for i, v in enumerate(X.shape) if i != ax])
                     for p in parts]
        return [parts]
    split = np.asarray(split).reshape(-1)
    if np.ndim(c.value(x[1])) == 0:   # a scalar: pieces of that size, the last one shorter
        k = int(split[0])
        split = [k] * (d // k) + ([d % k] if d % k else [])
    return [_split(c, X, ax, [int(v) for v in split], len(split))]


@rule("ReverseSequence", "GatherNd", since=10)
def _reverse_sequence(c, x, a):
    """Each batch entry's first sequence_lens[b] steps reversed: one GatherNd
    of the (time, batch) coordinates, computed when the graph is built."""
    X = x[0]
    lens = c.need(x[1], "sequence_lens").reshape(-1).astype(np.int64)
    ta, ba = a.get("time_axis", 0), a.get("batch_axis", 1)
    T, Bn = X.shape[ta], X.shape[ba]
    t = np.arange(T)[:, None]
    src = np.where(t < lens[None, :], lens[None, :] - 1 - t, t)          # [T, B]
    b = np.broadcast_to(np.arange(Bn)[None, :], (T, Bn))
    coords = np.stack([src, b], -1) if ta == 0 else np.stack([b, src], -1).transpose(1, 0, 2)
    return [c.op("GatherNd", X, coords.astype(np.int64))]


# ================================================================ quantization

def _qparam(c, p, X, axis, block):
    """Scale or zero point `p` shaped to broadcast against `X`: per tensor,
    per `axis` (1-D), or per block of `block` elements along `axis`."""
    r = rank(X)
    ax = axis + r if axis < 0 else axis
    if rank(p) == 0 or (rank(p) == 1 and p.shape[0] == 1 and not block
                        and (ax >= r or X.shape[ax] != 1)):   # (one value for every element)
        return p
    if block:
        idx = (np.arange(X.shape[ax]) // int(block)).astype(np.int64)
        return c.op("GatherV2", p, idx, np.asarray(ax, np.int64))
    return reshape(c, p, [1] * ax + [p.shape[0]] + [1] * (r - ax - 1))


def _f32(c, t):
    return t if t.dtype is dtypes.float32 else c.op("Cast", t, DstT=dtypes.float32)


def _saturate(c, v, dt):
    """float32 `v` rounded half to even, clipped to the range of integer
    type `dt`, cast to it."""
    import ml_dtypes   # (its iinfo knows int4, uint4, int2 and uint2 too)
    info = ml_dtypes.iinfo(dt.as_numpy_dtype)
    v = c.op("Minimum", c.op("Maximum", c.op("Round", v), const(info.min, v)), const(info.max, v))
    return c.op("Cast", v, DstT=dt)


def _dequantize(c, x, scale, zp, axis=1, block=0):
    s = _qparam(c, scale, x, axis, block)
    v = _f32(c, x)
    if zp is not None:
        v = c.op("Sub", v, _qparam(c, _f32(c, zp), x, axis, block))
    y = c.op("Mul", v, _f32(c, s))
    return y if y.dtype is scale.dtype else c.op("Cast", y, DstT=scale.dtype)


def _quantize(c, x, scale, zp, dt, axis=1, block=0, saturate=True):
    """round(x / scale) + zp clipped to integer type `dt`; to a float type,
    x / scale + zp cast to it (saturating to a float8 type with `saturate`)."""
    v = c.op("RealDiv", _f32(c, x), _f32(c, _qparam(c, scale, x, axis, block)))
    if dt.is_floating:
        if zp is not None:
            v = c.op("AddV2", v, _qparam(c, _f32(c, zp), x, axis, block))
        return _cast_to(c, v, dt, saturate)
    v = c.op("Round", v)
    if zp is not None:
        v = c.op("AddV2", v, _qparam(c, _f32(c, zp), x, axis, block))
    return _saturate(c, v, dt)


_Q_OPS = "Cast Sub Mul RealDiv Round AddV2 Maximum Minimum Reshape GatherV2"


@rule("DequantizeLinear", _Q_OPS, since=10)
def _dequantize_rule(c, x, a):
    zp = x[2] if len(x) > 2 else None
    return [_dequantize(c, x[0], x[1], zp, a.get("axis", 1), a.get("block_size", 0))]


@rule("QuantizeLinear", _Q_OPS, since=10)
def _quantize_rule(c, x, a):
    zp = x[2] if len(x) > 2 else None
    dt = zp.dtype if zp is not None else ONNX_DTYPES.get(a.get("output_dtype", 2) or 2)
    if dt is None:
        raise errors.UnimplementedError(f"ONNX node {c.node!r}: QuantizeLinear to ONNX type "
                                        f"{a.get('output_dtype')} has no pluggable dtype")
    return [_quantize(c, x[0], x[1], zp, dt, a.get("axis", 1), a.get("block_size", 0),
                      a.get("saturate", 1))]


@rule("DynamicQuantizeLinear", _Q_OPS + " Max Min", since=11)
def _dynamic_quantize(c, x, a):
    X = _f32(c, x[0])
    every = np.asarray(list(range(rank(X))), np.int32)
    hi = c.op("Maximum", c.op("Max", X, every), const(0, X))
    lo = c.op("Minimum", c.op("Min", X, every), const(0, X))
    scale = c.op("RealDiv", c.op("Sub", hi, lo), const(255, X))
    zp = _saturate(c, c.op("RealDiv", c.op("Neg", lo), scale), dtypes.uint8)
    return [_quantize(c, X, scale, zp, dtypes.uint8), scale, zp]


@rule("QLinearMatMul", _Q_OPS + " MatMul BatchMatMulV2", since=10)
def _qlinear_matmul(c, x, a):
    A, sa, za, B, sb, zb, sy, zy = x
    fa = _dequantize(c, A, _f32(c, sa), za, -2 if rank(sa) else 1)
    fb = _dequantize(c, B, _f32(c, sb), zb, -1 if rank(sb) else 1)
    y = _matmul(c, fa, fb)
    return [_quantize(c, y, _f32(c, sy), zy, zy.dtype, -1 if rank(sy) else 1)]


@rule("RotaryEmbedding", "Transpose Reshape StridedSlice GatherV2 Mul Sub AddV2 ConcatV2 Pack",
      since=23)
def _rotary(c, x, a):
    """Rotates the first rotary_embedding_dim features of each head by the
    angles of the cos/sin caches (rows picked by position_ids), halves or
    interleaved pairs."""
    x = list(x) + [None] * (4 - len(x))
    X, cos, sin, pos = x[:4]
    four = rank(X) == 4
    h = transpose(c, X, [0, 2, 1, 3]) if four else X
    b, s = h.shape[0], h.shape[1]
    if not four:
        n = int(a["num_heads"])
        h = reshape(c, h, [b, s, n, h.shape[2] // n])
    shape = list(h.shape)
    d = shape[3]
    rd = int(a.get("rotary_embedding_dim", 0)) or d
    if pos is not None:
        cos = c.op("GatherV2", cos, pos, np.asarray(0, np.int64))
        sin = c.op("GatherV2", sin, pos, np.asarray(0, np.int64))
    cos = reshape(c, cos, [cos.shape[0], cos.shape[1], 1, rd // 2])
    sin = reshape(c, sin, [sin.shape[0], sin.shape[1], 1, rd // 2])
    rot = _slice(c, h, [0], [rd], [3], [1])
    if a.get("interleaved", 0):
        x1, x2 = _slice(c, rot, [0], [rd], [3], [2]), _slice(c, rot, [1], [rd], [3], [2])
    else:
        x1, x2 = _slice(c, rot, [0], [rd // 2], [3], [1]), _slice(c, rot, [rd // 2], [rd], [3],
                                                                   [1])
    real = c.op("Sub", c.op("Mul", cos, x1), c.op("Mul", sin, x2))
    imag = c.op("AddV2", c.op("Mul", sin, x1), c.op("Mul", cos, x2))
    if a.get("interleaved", 0):
        rot = reshape(c, c.op("Pack", real, imag, axis=4, N=2), list(rot.shape))
    else:
        rot = c.op("ConcatV2", real, imag, np.asarray(3, np.int32), N=2)
    if rd < d:
        rot = c.op("ConcatV2", rot, _slice(c, h, [rd], [d], [3], [1]), np.asarray(3, np.int32),
                   N=2)
    return [transpose(c, rot, [0, 2, 1, 3]) if four else reshape(c, rot, list(X.shape))]


@rule("SwiGLU", "Mul Sigmoid", since=27)
def _swiglu(c, x, a):
    """swish_alpha(A) * B, A and B of one shape."""
    A, B = x
    if tuple(A.shape) != tuple(B.shape):
        raise c.error(f"SwiGLU needs A and B of one shape, got {tuple(A.shape)} and "
                      f"{tuple(B.shape)}")
    al = a.get("alpha", 1.0)
    return [c.op("Mul", c.op("Mul", A, c.op("Sigmoid", c.op("Mul", A, const(al, A)))), B)]


@rule("Compress", "GatherV2 Reshape", since=9)
def _compress(c, x, a):
    cond = c.need(x[1], "condition").reshape(-1).astype(bool)
    X = x[0]
    if "axis" not in a:
        X = reshape(c, X, [-1])
        ax = 0
    else:
        ax = a["axis"] + rank(X) if a["axis"] < 0 else a["axis"]
    idx = np.nonzero(cond[:X.shape[ax]])[0].astype(np.int64)
    return [c.op("GatherV2", X, idx, np.asarray(ax, np.int64))]


@rule("CenterCropPad", "StridedSlice Pad Identity", since=18)
def _center_crop_pad(c, x, a):
    X = x[0]
    r = rank(X)
    shape = [int(v) for v in c.need(x[1], "shape").reshape(-1)]
    axes = _axes(a.get("axes") or list(range(r)), r)
    y = X
    for ax, want in zip(axes, shape):
        have = y.shape[ax]
        if want < have:       # crop: the extra element goes at the start's side
            start = (have - want) // 2
            y = _slice(c, y, [start], [start + want], [ax], [1])
        elif want > have:     # pad: the extra element goes at the end
            p = np.zeros((r, 2), np.int64)
            p[ax] = ((want - have) // 2, want - have - (want - have) // 2)
            y = c.op("Pad", y, p)
    return [c.op("Identity", y)]


# ================================================================ signal

def _window(kind):
    def fn(c, x, a):
        size = int(c.need(x[0], "size").reshape(-1)[0])
        dt = ONNX_DTYPES.get(a.get("output_datatype", 1), dtypes.float32)
        n = np.arange(size, dtype=np.float64)
        N = size if a.get("periodic", 1) else size - 1
        if kind == "hann":
            w = np.sin(n * np.pi / N) ** 2
        elif kind == "hamming":
            w = 25.0 / 46.0 - np.cos(n * np.pi * 2 / N) * (21.0 / 46.0)
        else:
            w = 0.42 - 0.5 * np.cos(n * np.pi * 2 / N) + 0.08 * np.cos(n * np.pi * 4 / N)
        return [w.astype(dt.as_numpy_dtype)]
    return fn


rule("HannWindow", "", since=17)(_window("hann"))
rule("HammingWindow", "", since=17)(_window("hamming"))
rule("BlackmanWindow", "", since=17)(_window("blackman"))


@rule("MelWeightMatrix", "", since=17)
def _mel_weight_matrix(c, x, a):
    """Triangular filters [dft_length // 2 + 1, num_mel_bins] on the mel
    scale (onnx's definition), computed when the graph is built."""
    n_mel, dft, rate = (int(c.need(t, w).reshape(-1)[0]) for t, w in
                        zip(x[:3], ("num_mel_bins", "dft_length", "sample_rate")))
    lo, hi = (float(c.need(t, w).reshape(-1)[0]) for t, w in
              zip(x[3:5], ("lower_edge_hertz", "upper_edge_hertz")))
    mel = lambda f: 2595 * np.log1p(f / 700) / np.log(10)
    step = (mel(hi) - mel(lo)) / (n_mel + 2)
    bins = np.arange(n_mel + 2) * step + mel(lo)
    bins = (((dft + 1) * (700 * np.expm1(bins / 2595 * np.log(10)))) // rate).astype(int)
    out = np.zeros((dft // 2 + 1, n_mel))
    for i in range(n_mel):
        left, centre, right = bins[i], bins[i + 1], bins[i + 2]
        if centre == left:
            out[centre, i] = 1
        else:
            j = np.arange(left, centre + 1)
            out[j, i] = (j - left) / (centre - left)
        if right > centre:
            j = np.arange(centre, right)
            out[j, i] = (right - j) / (right - centre)
    dt = ONNX_DTYPES.get(a.get("output_datatype", 1), dtypes.float32)
    return [out.astype(dt.as_numpy_dtype)]


def _dft_matrices(n, length, inverse, onesided):
    """Real matrices [n, out] of the DFT along one axis, as numpy's FFTs
    define it (zero-padded or cut to `length`), for the real and for the
    imaginary part of the input: (re->re, re->im, im->re, im->im)."""
    eye = np.eye(n)

    def f(z):
        if inverse and onesided:
            return np.fft.irfft(z, n=length, axis=1).astype(complex)
        r = np.fft.ifft(z, n=length, axis=1) if inverse else np.fft.fft(z, n=length, axis=1)
        return r[:, :length // 2 + 1] if onesided and not inverse else r
    a, b = f(eye.astype(complex)), f(1j * eye)
    return a.real, a.imag, b.real, b.imag


def _dft(c, X, ax, length, inverse, onesided):
    """DFT of `X` [..., 1 or 2] (real, or real and imaginary parts) along
    `ax`: out [..., 2] (or [..., 1] for a one-sided inverse)."""
    r = rank(X)
    ax = ax % r
    if ax == r - 1:
        raise c.error("the DFT axis cannot be the last (real/imaginary) axis")
    n = X.shape[ax]
    if length is None:
        length = 2 * (n - 1) if inverse and onesided else n
    rr, ri, ir, ii = _dft_matrices(n, length, inverse, onesided)
    parts = [reshape(c, _slice(c, X, [i], [i + 1], [r - 1], [1]), list(X.shape[:-1]))
             for i in range(X.shape[-1])]
    perm = [d for d in range(r - 1) if d != ax] + [ax]
    back = list(np.argsort(perm))
    flat = [reshape(c, transpose(c, p, perm), [-1, n]) for p in parts]
    out_shape = [X.shape[d] for d in perm[:-1]]

    def apply(m_re, m_im):
        y = c.op("MatMul", flat[0], const(m_re, X))
        if len(flat) > 1:
            y = c.op("AddV2", y, c.op("MatMul", flat[1], const(m_im, X)))
        return transpose(c, reshape(c, y, out_shape + [-1]), back)
    re = apply(rr, ir)
    if inverse and onesided:
        return reshape(c, re, list(re.shape) + [1])
    return c.op("Pack", re, apply(ri, ii), axis=r - 1, N=2)


_DFT_OPS = "StridedSlice Reshape Transpose MatMul AddV2 Pack GatherV2 Mul"


@rule("DFT", _DFT_OPS, since=17)
def _dft_rule(c, x, a):
    x = list(x) + [None] * (3 - len(x))
    length = c.value(x[1])
    if length is not None:
        length = int(np.asarray(length).reshape(-1)[0]) if np.size(length) else None
    if c.opset >= 20:
        ax = c.value(x[2])
        ax = -2 if ax is None else int(np.asarray(ax).reshape(-1)[0])
    else:
        ax = a.get("axis", 1)
    return [_dft(c, x[0], ax, length, bool(a.get("inverse", 0)), bool(a.get("onesided", 0)))]


@rule("STFT", _DFT_OPS, since=17)
def _stft(c, x, a):
    x = list(x) + [None] * (4 - len(x))
    sig, window = x[0], x[2]
    step = int(c.need(x[1], "frame_step").reshape(-1)[0])
    fl = c.value(x[3])
    fl = int(np.asarray(fl).reshape(-1)[0]) if fl is not None else window.shape[0]
    frames = 1 + (sig.shape[1] - fl) // step
    idx = (np.arange(frames)[:, None] * step + np.arange(fl)[None, :]).astype(np.int64)
    y = c.op("GatherV2", sig, idx, np.asarray(1, np.int64))      # [B, frames, fl, 1|2]
    if window is not None:
        y = c.op("Mul", y, reshape(c, window, [1, 1, fl, 1]))
    return [_dft(c, y, 2, fl, False, bool(a.get("onesided", 1)))]


def _reflect(c, v, lo, hi):
    """`v` reflected at `lo` and `hi` until inside [lo, hi] (onnx's rule)."""
    rng = hi - lo
    below, above = c.op("Less", v, const(lo, v)), c.op("Greater", v, const(hi, v))
    dx = c.op("SelectV2", below, c.op("Sub", const(lo, v), v), c.op("Sub", v, const(hi, v)))
    n = c.op("Floor", c.op("RealDiv", dx, const(rng, v)))
    r = c.op("Sub", dx, c.op("Mul", n, const(rng, v)))
    even = c.op("Equal", c.op("FloorMod", n, const(2, n)), const(0, n))
    lo_r, hi_r = c.op("AddV2", const(lo, v), r), c.op("Sub", const(hi, v), r)
    out = c.op("SelectV2", below, c.op("SelectV2", even, lo_r, hi_r),
               c.op("SelectV2", even, hi_r, lo_r))
    return c.op("SelectV2", c.op("LogicalOr", below, above), out, v)


def _cubic_taps(c, t, A=-0.75):
    one = const(1, t)
    t1, u, u1 = c.op("AddV2", t, one), c.op("Sub", one, t), c.op("Sub", const(2, t), t)

    def far(z):   # ((A z - 5A) z + 8A) z - 4A
        return c.op("Sub", c.op("Mul", c.op("AddV2", c.op("Mul", c.op(
            "Sub", c.op("Mul", z, const(A, z)), const(5 * A, z)), z), const(8 * A, z)), z),
            const(4 * A, z))

    def near(z):  # ((A + 2) z - (A + 3)) z z + 1
        return c.op("AddV2", c.op("Mul", c.op("Mul", c.op("Sub", c.op("Mul", z, const(A + 2, z)),
                                                          const(A + 3, z)), z), z), one)
    return [far(t1), near(t), near(u), far(u1)]


@rule("GridSample", "Transpose Reshape StridedSlice Mul AddV2 Sub RealDiv Floor Round Less "
      "Greater LessEqual GreaterEqual LogicalOr LogicalAnd SelectV2 Equal FloorMod Maximum "
      "Minimum Cast Pack GatherNd", since=16)
def _grid_sample(c, x, a):
    """Samples X [N, C, spatial...] at the grid's normalized coordinates
    (last axis x, y[, z]): nearest, linear or cubic taps gathered with
    GatherNd, padding zeros, border or reflection."""
    X, grid = x
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(a.get("mode", "linear"),
                                                          a.get("mode", "linear"))
    pad = a.get("padding_mode", "zeros")
    align = a.get("align_corners", 0)
    r = rank(X)
    k = r - 2
    dims = list(X.shape[2:])
    N, C = X.shape[:2]
    out = list(grid.shape[1:-1])
    g = grid if grid.dtype is X.dtype else c.op("Cast", grid, DstT=X.dtype)
    coords = []
    for i, d in enumerate(dims):
        n = reshape(c, _slice(c, g, [k - 1 - i], [k - i], [r - 1], [1]), [N] + out)
        if align:
            v = c.op("Mul", c.op("AddV2", n, const(1, n)), const((d - 1) / 2.0, n))
            lo, hi = 0.0, d - 1.0
        else:
            v = c.op("RealDiv", c.op("Sub", c.op("Mul", c.op("AddV2", n, const(1, n)),
                                                 const(d, n)), const(1, n)), const(2, n))
            lo, hi = -0.5, d - 0.5
        if mode == "nearest":
            v = c.op("Round", v)
        if pad == "border":
            v = c.op("Minimum", c.op("Maximum", v, const(0, v)), const(d - 1, v))
        elif pad == "reflection":
            v = _reflect(c, v, lo, hi)
        coords.append((v, d, lo, hi))
    taps = []   # per dim: [(index (float, integral), weight or None)]
    for v, d, lo, hi in coords:
        if mode == "nearest":
            taps.append([(v, None)])
            continue
        f = c.op("Floor", v)
        t = c.op("Sub", v, f)
        if mode == "linear":
            taps.append([(f, c.op("Sub", const(1, t), t)), (c.op("AddV2", f, const(1, f)), t)])
        else:
            w = _cubic_taps(c, t)
            taps.append([(c.op("AddV2", f, const(o, f)), w[o + 1]) for o in (-1, 0, 1, 2)])
    xt = transpose(c, X, [0] + list(range(2, r)) + [1])          # N spatial... C
    batch = np.broadcast_to(np.arange(N).reshape([N] + [1] * len(out)), [N] + out)
    y = None
    for combo in itertools.product(*taps):
        idx, weight, valid = [batch.astype(np.int64)], None, None
        for (i, w), (_, d, lo, hi) in zip(combo, coords):
            if pad == "zeros":
                ok = c.op("LogicalAnd", c.op("GreaterEqual", i, const(0, i)),
                          c.op("LessEqual", i, const(d - 1, i)))
                valid = ok if valid is None else c.op("LogicalAnd", valid, ok)
            elif pad == "reflection" and mode != "nearest":
                i = _reflect(c, i, lo, hi)
            i = c.op("Minimum", c.op("Maximum", i, const(0, i)), const(d - 1, i))
            idx.append(c.op("Cast", i, DstT=dtypes.int64))
            if w is not None:
                weight = w if weight is None else c.op("Mul", weight, w)
        px = c.op("GatherNd", xt, c.op("Pack", *idx, axis=len(out) + 1, N=len(idx)))
        if valid is not None:
            weight = c.op("Cast", valid, DstT=X.dtype) if weight is None else \
                c.op("SelectV2", valid, weight, const(0, weight))
        if weight is not None:
            px = c.op("Mul", px, reshape(c, weight, [N] + out + [1]))
        y = px if y is None else c.op("AddV2", y, px)
    return [transpose(c, y, [0, len(out) + 1] + list(range(1, len(out) + 1)))]


@rule("AffineGrid", "BatchMatMulV2 Reshape", since=20)
def _affine_grid(c, x, a):
    """grid[n, ..., :] = theta[n] @ (x, y[, z], 1) over the normalized
    coordinates of the output size (a constant, or a graph input)."""
    theta = x[0]
    size = [int(v) for v in c.need(x[1], "size").reshape(-1)]
    N, spatial = size[0], size[2:]
    k = len(spatial)

    def axis_coords(d):
        if a.get("align_corners", 0):
            return np.linspace(-1, 1, d) if d > 1 else np.zeros(1)
        return (2 * np.arange(d) + 1) / d - 1
    mesh = np.meshgrid(*[axis_coords(d) for d in spatial], indexing="ij")
    base = np.stack([m for m in mesh[::-1]] + [np.ones(spatial)], -1).reshape(-1, k + 1)
    base = const(base, theta)                                       # [P, k + 1]
    g = c.op("BatchMatMulV2", np.broadcast_to(base, (N,) + base.shape).copy(), theta,
             adj_y=True)                                            # [N, P, k]
    return [reshape(c, g, [N] + spatial + [k])]


@rule("CausalConvWithState", "ConcatV2 StridedSlice Mul AddV2 Reshape Sigmoid Identity Cast",
      since=27)
def _causal_conv(c, x, a):
    """Depthwise causal 1-D convolution over [past_state, input]: the sum
    of k shifted slices times the per-channel taps; present_state is the
    last k - 1 steps."""
    x = list(x) + [None] * (4 - len(x))
    X, W, B, past = x[:4]
    b, ch, L = X.shape
    k = W.shape[2]
    if past is None:
        past = np.zeros((b, ch, k - 1), X.dtype.as_numpy_dtype)
    padded = c.op("ConcatV2", past, X, np.asarray(2, np.int32), N=2) if k > 1 else X
    wide = X.dtype in (dtypes.float16, dtypes.bfloat16)   # summed in float32, then rounded
    src, w = (_f32(c, padded), _f32(c, W)) if wide else (padded, W)
    y = None
    for j in range(k):
        tap = reshape(c, _slice(c, w, [j], [j + 1], [2], [1]), [1, ch, 1])
        term = c.op("Mul", _slice(c, src, [j], [j + L], [2], [1]), tap)
        y = term if y is None else c.op("AddV2", y, term)
    if B is not None:
        y = c.op("AddV2", y, reshape(c, _f32(c, B) if wide else B, [1, ch, 1]))
    if wide:
        y = c.op("Cast", y, DstT=X.dtype)
    if a.get("activation", "none") in ("silu", "swish"):
        yf = _f32(c, y)
        y = c.op("Mul", yf, c.op("Sigmoid", yf))
        if y.dtype is not X.dtype:
            y = c.op("Cast", y, DstT=X.dtype)
    total = L + k - 1
    return [y, c.op("Identity", _slice(c, padded, [total - (k - 1)], [total], [2], [1]))]


@rule("LinearAttention", "Reshape Transpose Cast StridedSlice Mul Exp Sub AddV2 "
      "BatchMatMulV2 Tile ConcatV2", since=27)
def _linear_attention(c, x, a):
    """The recurrent linear-attention family (linear, gated, delta,
    gated_delta), unrolled over the sequence in float32 as onnx defines it."""
    x = list(x) + [None] * (6 - len(x))
    Q, K, V, past, decay, beta = x[:6]
    rule_ = a.get("update_rule", "gated_delta")
    gating, delta = rule_ in ("gated", "gated_delta"), rule_ in ("delta", "gated_delta")
    hq, hk = int(a["q_num_heads"]), int(a["kv_num_heads"])
    b, t, _ = Q.shape
    dk, dv = Q.shape[-1] // hq, V.shape[-1] // hk
    q4, k4, v4 = (_f32(c, _heads(c, T_, n)) for T_, n in ((Q, hq), (K, hk), (V, hk)))
    if gating:
        g4 = _f32(c, transpose(c, reshape(c, decay, [b, t, hk, -1]), [0, 2, 1, 3]))
    if delta:
        b4 = _f32(c, transpose(c, reshape(c, beta, [b, t, beta.shape[-1], 1]), [0, 2, 1, 3]))
    state = _f32(c, past) if past is not None else np.zeros((b, hk, dk, dv), np.float32)
    scale = a.get("scale", 0.0) or 1.0 / np.sqrt(dk)
    rep = hq // hk
    outs = []
    for i in range(t):
        step = lambda T_: _slice(c, T_, [i], [i + 1], [2], [1])   # [B, H, 1, d]
        q_t, k_t, v_t = step(q4), step(k4), step(v4)
        if gating:
            state = c.op("Mul", state, reshape(c, c.op("Exp", step(g4)), [b, hk, -1, 1]))
        if delta:
            got = c.op("BatchMatMulV2", k_t, state)                  # [B, H, 1, dv]
            v_t = c.op("Mul", step(b4), c.op("Sub", v_t, got))
        state = c.op("AddV2", state, c.op("BatchMatMulV2", k_t, v_t, adj_x=True))
        read = state if rep == 1 else reshape(
            c, c.op("Tile", reshape(c, state, [b, hk, 1, dk, dv]),
                    np.asarray([1, 1, rep, 1, 1], np.int64)), [b, hq, dk, dv])
        outs.append(c.op("Mul", c.op("BatchMatMulV2", q_t, read), const(scale, q_t)))
    y = c.op("ConcatV2", *outs, np.asarray(2, np.int32), N=t) if t > 1 else outs[0]
    y = reshape(c, transpose(c, y, [0, 2, 1, 3]), [b, t, hq * dv])
    if y.dtype is not Q.dtype:
        y = c.op("Cast", y, DstT=Q.dtype)
    sdt = past.dtype if past is not None else Q.dtype
    state = _tensorish(c, state)
    return [y, state if state.dtype is sdt else c.op("Cast", state, DstT=sdt)]


# Optional values: an absent one is None while the graph is built.
rule("Optional", "", since=15, raw=True)(
    lambda c, x, a: [x[0] if x and x[0] is not None else None])


@rule("OptionalHasElement", "", since=15, raw=True)
def _optional_has(c, x, a):
    return [np.asarray(bool(x) and x[0] is not None)]


@rule("OptionalGetElement", "Identity", since=15, raw=True)
def _optional_get(c, x, a):
    if not x or x[0] is None:
        raise c.error("OptionalGetElement of an empty optional")
    return [x[0] if isinstance(x[0], list) else _tensorish(c, x[0])]


def _minus_zero_point(c, t, zp, axis=None):
    v = c.op("Cast", t, DstT=dtypes.int32)
    if zp is None:
        return v
    z = c.op("Cast", zp, DstT=dtypes.int32)
    if axis is not None and rank(zp) == 1 and zp.shape[0] > 1:
        z = reshape(c, z, [1] * axis + [-1] + [1] * (rank(t) - axis - 1))
    return c.op("Sub", v, z)


@rule("MatMulInteger", "Cast Sub MatMul BatchMatMulV2 Reshape", since=10)
def _matmul_integer(c, x, a):
    x = list(x) + [None] * (4 - len(x))
    A, B, za, zb = x[:4]
    return [_matmul(c, _minus_zero_point(c, A, za, rank(A) - 2),
                    _minus_zero_point(c, B, zb, rank(B) - 1))]


@rule("ConvInteger", "Cast Sub Conv2D Transpose Reshape ConcatV2 StridedSlice Pad AddV2",
      since=10)
def _conv_integer(c, x, a):
    x = list(x) + [None] * (4 - len(x))
    X, W, zx, zw = x[:4]
    # int32 is exact; the convolution runs in float64 (integers below 2**53 exactly)
    xi = c.op("Cast", _minus_zero_point(c, X, zx), DstT=dtypes.float64)
    wi = c.op("Cast", _minus_zero_point(c, W, zw, 0), DstT=dtypes.float64)
    return [c.op("Cast", _conv_nd(c, xi, wi, None, a), DstT=dtypes.int32)]


@rule("QLinearConv", _Q_OPS + " Conv2D Transpose ConcatV2 StridedSlice Pad", since=10)
def _qlinear_conv(c, x, a):
    x = list(x) + [None] * (9 - len(x))
    X, sx, zx, W, sw, zw, sy, zy, B = x[:9]
    fx = _dequantize(c, X, _f32(c, sx), zx)
    fw = _dequantize(c, W, _f32(c, sw), zw, 0)
    bias = None
    if B is not None:   # int32, scaled by x_scale * w_scale
        bias = c.op("Mul", _f32(c, B), c.op("Mul", _f32(c, sx), _f32(c, sw)))
    y = _conv_nd(c, fx, fw, bias, a)
    return [_quantize(c, y, _f32(c, sy), zy, zy.dtype)]


# ================================================================ training (preview domain)

_TRAINING = "ai.onnx.preview.training"
_OPT_OPS = "Cast Mul AddV2 Sub RealDiv Sqrt Pow Greater SelectV2"


def _optimizer_groups(x, per):
    """(R, T, [(X, G, state...) per tensor]) of an optimizer node's inputs."""
    r, t, rest = x[0], x[1], list(x[2:])
    n = len(rest) // per
    return r, t, [tuple(rest[i + j * n] for j in range(per)) for i in range(n)]


def _scalar_like(c, v, like):
    return c.op("Cast", v, DstT=like.dtype) if v.dtype is not like.dtype else v


@rule("Adagrad", _OPT_OPS, domain=_TRAINING)
def _adagrad(c, x, a):
    r, t, groups = _optimizer_groups(x, 3)
    xs, hs = [], []
    for X, G, H in groups:
        rr, tt = _scalar_like(c, r, X), _scalar_like(c, t, X)
        r_ = c.op("RealDiv", rr, c.op("AddV2", const(1, X), c.op("Mul", tt, const(
            a.get("decay_factor", 0.0), X))))
        g = c.op("AddV2", c.op("Mul", X, const(a.get("norm_coefficient", 0.0), X)), G)
        h = c.op("AddV2", H, c.op("Mul", g, g))
        xs.append(c.op("Sub", X, c.op("RealDiv", c.op("Mul", r_, g), c.op(
            "AddV2", c.op("Sqrt", h), const(a.get("epsilon", 1e-6), X)))))
        hs.append(h)
    return xs + hs


@rule("Momentum", _OPT_OPS, domain=_TRAINING)
def _momentum(c, x, a):
    r, t, groups = _optimizer_groups(x, 3)
    xs, vs = [], []
    for X, G, V in groups:
        rr = _scalar_like(c, r, X)
        g = c.op("AddV2", c.op("Mul", X, const(a.get("norm_coefficient", 0.0), X)), G)
        beta = c.op("SelectV2", c.op("Greater", t, const(0, t)), const(a["beta"], X),
                    const(1, X))
        v = c.op("AddV2", c.op("Mul", V, const(a["alpha"], X)), c.op("Mul", beta, g))
        step = v if a.get("mode", "standard") == "standard" else \
            c.op("AddV2", g, c.op("Mul", v, const(a["alpha"], X)))
        xs.append(c.op("Sub", X, c.op("Mul", rr, step)))
        vs.append(v)
    return xs + vs


@rule("Adam", _OPT_OPS, domain=_TRAINING)
def _adam(c, x, a):
    r, t, groups = _optimizer_groups(x, 4)
    al, be = a.get("alpha", 0.9), a.get("beta", 0.999)
    xs, vs, hs = [], [], []
    for X, G, V, H in groups:
        rr, tt = _scalar_like(c, r, X), _scalar_like(c, t, X)
        g = c.op("AddV2", c.op("Mul", X, const(a.get("norm_coefficient", 0.0), X)), G)
        v = c.op("AddV2", c.op("Mul", V, const(al, X)), c.op("Mul", g, const(1 - al, X)))
        h = c.op("AddV2", c.op("Mul", H, const(be, X)),
                 c.op("Mul", c.op("Mul", g, g), const(1 - be, X)))
        corr = c.op("RealDiv",
                    c.op("Sqrt", c.op("Sub", const(1, X), c.op("Pow", const(be, X), tt))),
                    c.op("Sub", const(1, X), c.op("Pow", const(al, X), tt)))
        r_ = c.op("SelectV2", c.op("Greater", t, const(0, t)), c.op("Mul", rr, corr), rr)
        xn = c.op("Sub", X, c.op("Mul", r_, c.op("RealDiv", v, c.op(
            "AddV2", c.op("Sqrt", h), const(a.get("epsilon", 1e-6), X)))))
        xs.append(c.op("Mul", xn, const(1 - a.get("norm_coefficient_post", 0.0), X)))
        vs.append(v)
        hs.append(h)
    return xs + vs + hs


@rule("Col2Im", "Reshape Transpose UnsortedSegmentSum", since=18)
def _col2im(c, x, a):
    """Columns [N, C * prod(block), L] summed back into images [N, C,
    image...]: one UnsortedSegmentSum over output positions computed when
    the graph is built (positions in the padding are dropped)."""
    X = x[0]
    image = [int(v) for v in c.need(x[1], "image_shape").reshape(-1)]
    block = [int(v) for v in c.need(x[2], "block_shape").reshape(-1)]
    n = len(image)
    dil, strides = _spatial(a, "dilations", n, 1), _spatial(a, "strides", n, 1)
    pads = _spatial(a, "pads", 2 * n, 0)
    N, CK, L = X.shape
    K = int(np.prod(block))
    C = CK // K
    blocks = [(image[i] + pads[i] + pads[n + i] - dil[i] * (block[i] - 1) - 1) // strides[i] + 1
              for i in range(n)]
    if int(np.prod(blocks)) != L:
        raise c.error(f"Col2Im: {L} columns, but the image, block and strides make "
                      f"{int(np.prod(blocks))}")
    kpos = np.indices(block).reshape(n, -1)              # [n, K]
    bpos = np.indices(blocks).reshape(n, -1)             # [n, L]
    pos = [kpos[i][:, None] * dil[i] + bpos[i][None, :] * strides[i] - pads[i] for i in range(n)]
    inside = np.all([(p >= 0) & (p < image[i]) for i, p in enumerate(pos)], axis=0)
    flat = np.ravel_multi_index([np.clip(p, 0, image[i] - 1) for i, p in enumerate(pos)], image)
    seg = np.where(inside, flat, -1)                    # [K, L]
    seg = np.broadcast_to(seg, (C, K, L)).reshape(-1).astype(np.int64)
    cols = transpose(c, reshape(c, X, [N, C * K * L]), [1, 0])      # [C*K*L, N]
    chan = np.repeat(np.arange(C), K * L) * int(np.prod(image))
    ids = np.where(seg >= 0, seg + chan, -1).astype(np.int64)
    out = c.op("UnsortedSegmentSum", cols, ids, np.asarray(C * int(np.prod(image)), np.int64))
    return [reshape(c, transpose(c, out, [1, 0]), [N, C] + image)]


@rule("RoiAlign", "Cast StridedSlice Reshape Mul Sub AddV2 RealDiv Maximum Floor Less Greater "
      "GreaterEqual LogicalOr LogicalNot LogicalAnd SelectV2 Transpose GatherNd Pack Sum Max",
      since=10)
def _roi_align(c, x, a):
    """Each region's bins sampled on a sampling_ratio x sampling_ratio grid
    (bilinear, onnx's edge rules), averaged or maxed, gathered with GatherNd."""
    X, rois, bidx = x
    sr = int(a.get("sampling_ratio", 0))
    if sr <= 0:
        raise errors.UnimplementedError(
            f"ONNX node {c.node!r}: RoiAlign with an adaptive sampling grid (sampling_ratio=0) "
            "is not mapped")
    oh, ow = int(a.get("output_height", 1)), int(a.get("output_width", 1))
    scale = a.get("spatial_scale", 1.0)
    half = a.get("coordinate_transformation_mode", "half_pixel") == "half_pixel"
    N, C, H, W = X.shape
    R = rois.shape[0]
    rf = rois if rois.dtype is X.dtype else c.op("Cast", rois, DstT=X.dtype)
    col = lambda i: reshape(c, _slice(c, rf, [i], [i + 1], [1], [1]), [R, 1, 1])
    off = 0.5 if half else 0.0

    def axis(lo_col, hi_col, n_out, size):
        start = c.op("Sub", c.op("Mul", col(lo_col), const(scale, rf)), const(off, rf))
        end = c.op("Sub", c.op("Mul", col(hi_col), const(scale, rf)), const(off, rf))
        length = c.op("Sub", end, start)
        if not half:
            length = c.op("Maximum", length, const(1, length))
        bin_ = c.op("RealDiv", length, const(n_out, length))
        grid = (np.arange(n_out)[:, None] + (np.arange(sr)[None, :] + 0.5) / sr)[None]
        v = c.op("AddV2", start, c.op("Mul", bin_, const(grid, rf)))     # [R, n_out, sr]
        ok = c.op("LogicalNot", c.op("LogicalOr", c.op("Less", v, const(-1, v)),
                                     c.op("Greater", v, const(size, v))))
        v = c.op("Maximum", v, const(0, v))
        low = c.op("Floor", v)
        top = c.op("GreaterEqual", low, const(size - 1, low))
        low = c.op("SelectV2", top, const(size - 1, low), low)
        v = c.op("SelectV2", top, low, v)
        high = c.op("SelectV2", top, low, c.op("AddV2", low, const(1, low)))
        frac = c.op("Sub", v, low)
        return low, high, c.op("Sub", const(1, frac), frac), frac, ok

    ylo, yhi, hy, ly, yok = axis(1, 3, oh, H)
    xlo, xhi, hx, lx, xok = axis(0, 2, ow, W)
    ys = lambda t: reshape(c, t, [R, oh, 1, sr, 1])
    xs = lambda t: reshape(c, t, [R, 1, ow, 1, sr])
    ok = c.op("LogicalAnd", ys(yok), xs(xok))                          # [R, oh, ow, sr, sr]
    shape = [R, oh, ow, sr, sr]
    b = c.op("Mul", reshape(c, c.op("Cast", bidx, DstT=dtypes.int64), [R, 1, 1, 1, 1]),
             np.ones(shape, np.int64))
    xt = transpose(c, X, [0, 2, 3, 1])                                  # N H W C
    vals = []
    for yi, wy in ((ylo, hy), (yhi, ly)):
        for xi, wx in ((xlo, hx), (xhi, lx)):
            iy = c.op("Mul", c.op("Cast", ys(yi), DstT=dtypes.int64), np.ones(shape, np.int64))
            ix = c.op("Mul", c.op("Cast", xs(xi), DstT=dtypes.int64), np.ones(shape, np.int64))
            px = c.op("GatherNd", xt, c.op("Pack", b, iy, ix, axis=5, N=3))   # [..., C]
            w = c.op("SelectV2", ok, c.op("Mul", ys(wy), xs(wx)), const(0, X))
            vals.append(c.op("Mul", px, reshape(c, w, shape + [1])))
    if a.get("mode", "avg") == "max":
        m = vals[0]
        for v in vals[1:]:
            m = c.op("Maximum", m, v)
        y = c.op("Max", m, np.asarray([3, 4], np.int32))
    else:
        total = vals[0]
        for v in vals[1:]:
            total = c.op("AddV2", total, v)
        y = c.op("Mul", c.op("Sum", total, np.asarray([3, 4], np.int32)),
                 const(1.0 / (sr * sr), X))
    return [transpose(c, y, [0, 3, 1, 2])]


@rule("TfIdfVectorizer", "StridedSlice Equal LogicalAnd Cast Sum AddV2 Pack Greater Mul",
      since=9)
def _tfidf(c, x, a):
    """n-gram counts of the pool's integer n-grams in each row (onnx's rule:
    every skip distance up to max_skip_count + 1, unigrams once), weighted
    by mode TF, IDF or TFIDF."""
    X = x[0]
    if "pool_int64s" not in a:
        raise errors.UnimplementedError(f"ONNX node {c.node!r}: TfIdfVectorizer of strings "
                                        "is not mapped (no string dtype)")
    pool = list(a["pool_int64s"])
    starts = list(a["ngram_counts"]) + [len(pool)]
    index = list(a["ngram_indexes"])
    lo, hi = int(a["min_gram_length"]), int(a["max_gram_length"])
    skips = int(a["max_skip_count"]) + 1
    flat = X if rank(X) == 2 else reshape(c, X, [1, -1])
    B, C = flat.shape
    counts: dict[int, Any] = {}
    k = 0
    for n in range(1, len(starts)):
        grams = pool[starts[n - 1]:starts[n]]
        for g in range(len(grams) // n):
            gram, out = grams[g * n:(g + 1) * n], index[k]
            k += 1
            if not lo <= n <= hi:
                continue
            for d in range(1, (1 if n == 1 else skips) + 1):
                L = C - (n - 1) * d
                if L <= 0:
                    continue
                hit = None
                for j, v in enumerate(gram):
                    e = c.op("Equal", _slice(c, flat, [j * d], [j * d + L], [1], [1]),
                             const(v, flat))
                    hit = e if hit is None else c.op("LogicalAnd", hit, e)
                cnt = c.op("Sum", c.op("Cast", hit, DstT=dtypes.float32),
                           np.asarray([1], np.int32))
                counts[out] = cnt if out not in counts else c.op("AddV2", counts[out], cnt)
    size = max(index) + 1 if index else 0
    zero = np.zeros((B,), np.float32)
    y = c.op("Pack", *[counts.get(i, zero) for i in range(size)], axis=1, N=size)
    mode = a.get("mode", "TF")
    w = np.asarray(a.get("weights") or [1.0] * size, np.float32)
    if mode == "IDF":
        y = c.op("Mul", c.op("Cast", c.op("Greater", y, const(0, y)), DstT=dtypes.float32), w)
    elif mode == "TFIDF":
        y = c.op("Mul", y, w)
    return [y if rank(X) == 2 else reshape(c, y, [size])]


@rule("GlobalAveragePool", "Mean")
def _gap(c, x, a):
    return [c.op("Mean", x[0], np.asarray(list(range(2, rank(x[0]))), np.int32),
                 keep_dims=True)]


@rule("GlobalMaxPool", "Max")
def _gmp(c, x, a):
    return [c.op("Max", x[0], np.asarray(list(range(2, rank(x[0]))), np.int32),
                 keep_dims=True)]


@rule("Einsum", "Einsum")
def _einsum(c, x, a):
    eq = a["equation"]
    eq = (eq.decode() if isinstance(eq, bytes) else eq).replace(" ", "")
    if "->" not in eq:   # implicit output: the labels used once, in alphabetical order
        labels = eq.replace(",", "").replace("...", "")
        eq += "->" + ("..." if "..." in eq else "") + "".join(
            sorted(ch for ch in set(labels) if labels.count(ch) == 1))
    return [c.op("Einsum", *x, equation=eq, N=len(x))]


@rule("GatherND", "GatherNd Cast ConcatV2", since=11)
def _gathernd(c, x, a):
    X, idx = x
    b = a.get("batch_dims", 0)
    if b:   # the batch coordinates lead every index tuple
        idx = c.op("Cast", idx, DstT=dtypes.int64)
        grid = np.indices(tuple(idx.shape[:-1]), dtype=np.int64)[:b]
        grid = np.moveaxis(grid, 0, -1)
        idx = c.op("ConcatV2", grid, idx, np.asarray(-1, np.int32), N=2)
        out = c.op("GatherNd", X, idx)
        return [out]
    return [c.op("GatherNd", X, idx)]


_SCATTER = {"none": "TensorScatterUpdate", "add": "TensorScatterAdd",
            "max": "TensorScatterMax", "min": "TensorScatterMin"}


def _scatter_op(c, a):
    red = a.get("reduction", "none")
    if red not in _SCATTER:
        raise errors.UnimplementedError(f"ONNX node {c.node!r}: scatter reduction {red!r} "
                                        "is not mapped (none, add, max and min are)")
    return _SCATTER[red]


@rule("ScatterND", "TensorScatterUpdate TensorScatterAdd TensorScatterMax TensorScatterMin "
      "GatherNd Mul Reshape StridedSlice")
def _scatternd(c, x, a):
    if a.get("reduction") == "mul":
        return [_scatter_mul(c, x[0], x[1], x[2])]
    return [c.op(_scatter_op(c, a), x[0], x[1], x[2])]


def _scatter_mul(c, X, idx, upd):
    """ScatterND with reduction 'mul' (TensorFlow has no TensorScatterMul):
    each element read, multiplied and written back; one index row at a
    time unless the indices are constants without repeats, so repeated
    indices multiply in order."""
    if idx.shape is None or any(d is None for d in idx.shape):
        raise errors.UnimplementedError(f"ONNX node {c.node!r}: a scatter reduction 'mul' "
                                        "needs indices of static shape")
    k = int(idx.shape[-1])
    n = int(np.prod(idx.shape[:-1], dtype=np.int64))
    rows = reshape(c, idx, [n, k])
    inner = [int(d) for d in upd.shape[len(idx.shape) - 1:]]
    vals = reshape(c, upd, [n] + inner)
    known = c.value(idx)
    if known is not None and len(np.unique(known.reshape(n, k), axis=0)) == n:
        return c.op("TensorScatterUpdate", X, rows,
                    c.op("Mul", c.op("GatherNd", X, rows), vals))
    for i in range(n):
        r = _slice(c, rows, [i], [i + 1], [0], [1])
        v = _slice(c, vals, [i], [i + 1], [0], [1])
        X = c.op("TensorScatterUpdate", X, r, c.op("Mul", c.op("GatherNd", X, r), v))
    return X


def _element_coords(c, idx, X, ax):
    """[..., rank] coordinates of GatherElements/ScatterElements indices
    `idx` along axis `ax` of `X` (negative indices count from the end)."""
    r = rank(X)
    idx = c.op("Cast", _fix_indices(c, idx, X.shape[ax]), DstT=dtypes.int64)
    grids = np.indices(tuple(idx.shape), dtype=np.int64)
    parts = [c.op("ExpandDims", idx if d == ax else grids[d], np.asarray(-1, np.int32))
             for d in range(r)]
    return c.op("ConcatV2", *parts, np.asarray(-1, np.int32), N=r)


@rule("ScatterElements", "TensorScatterUpdate TensorScatterAdd TensorScatterMax "
      "TensorScatterMin GatherNd Mul StridedSlice SelectV2 Less AddV2 Cast ExpandDims ConcatV2", since=11)
def _scatter_elements(c, x, a):
    X, idx, upd = x
    ax = a.get("axis", 0)
    ax = ax + rank(X) if ax < 0 else ax
    coords = _element_coords(c, idx, X, ax)
    if a.get("reduction") == "mul":
        return [_scatter_mul(c, X, coords, upd)]
    return [c.op(_scatter_op(c, a), X, coords, upd)]


rule("Scatter", "TensorScatterUpdate SelectV2 Less AddV2 Cast ExpandDims ConcatV2",
     since=9, until=10)(_scatter_elements)


def _block_perm(c, X, b, mode, to_depth):
    n, ch, h, w = X.shape
    if to_depth:
        y = reshape(c, X, [n, ch, h // b, b, w // b, b])
        y = transpose(c, y, [0, 1, 3, 5, 2, 4] if mode == "CRD" else [0, 3, 5, 1, 2, 4])
        return reshape(c, y, [n, ch * b * b, h // b, w // b])
    if mode == "CRD":
        y = transpose(c, reshape(c, X, [n, ch // (b * b), b, b, h, w]), [0, 1, 4, 2, 5, 3])
    else:
        y = transpose(c, reshape(c, X, [n, b, b, ch // (b * b), h, w]), [0, 3, 4, 1, 5, 2])
    return reshape(c, y, [n, ch // (b * b), h * b, w * b])


@rule("SpaceToDepth", "Reshape Transpose")
def _space_to_depth(c, x, a):
    return [_block_perm(c, x[0], int(a["blocksize"]), a.get("mode", "DCR"), True)]


@rule("DepthToSpace", "Reshape Transpose")
def _depth_to_space(c, x, a):
    return [_block_perm(c, x[0], int(a["blocksize"]), a.get("mode", "DCR"), False)]


@rule("Swish", "Mul Sigmoid", since=24)
def _swish(c, x, a):
    X = x[0]
    return [c.op("Mul", X, c.op("Sigmoid", c.op("Mul", X, const(a.get("alpha", 1.0), X))))]


@rule("MeanVarianceNormalization", "Mean Sub Mul Rsqrt AddV2", since=9)
def _mvn(c, x, a):
    axes = a.get("axes", [0, 2, 3])
    return [_normalize(c, x[0], _axes(axes, rank(x[0])), 1e-9)]


@rule("GroupNormalization", "Mean Sub Mul Rsqrt AddV2 Reshape Cast", since=18)
def _groupnorm(c, x, a):
    X, scale, bias = x
    g = int(a["num_groups"])
    s = list(X.shape)
    xs = X if X.dtype is dtypes.float32 or not a.get("stash_type", 1) == 1 else \
        c.op("Cast", X, DstT=dtypes.float32)
    y = reshape(c, xs, [s[0], g, -1])
    y = reshape(c, _normalize(c, y, [2], a.get("epsilon", 1e-5)), s)
    if y.dtype is not X.dtype:
        y = c.op("Cast", y, DstT=X.dtype)
    if c.opset < 21 and scale.shape[0] == g:   # GroupNormalization-18: one scale per group
        rep = s[1] // g
        scale = reshape(c, c.op("Tile", reshape(c, scale, [g, 1]), np.asarray([1, rep],
                                                                             np.int64)), [-1])
        bias = reshape(c, c.op("Tile", reshape(c, bias, [g, 1]), np.asarray([1, rep],
                                                                           np.int64)), [-1])
    shp = [1, -1] + [1] * (len(s) - 2)
    return [c.op("AddV2", c.op("Mul", y, reshape(c, scale, shp)), reshape(c, bias, shp))]


@rule("Det", "MatrixDeterminant")
def _det(c, x, a):
    return [c.op("MatrixDeterminant", x[0])]


@rule("RMSNormalization", "Mean Mul AddV2 Rsqrt Cast", since=23)
def _rmsnorm(c, x, a):
    X = x[0]
    r = rank(X)
    ax = a.get("axis", -1)
    ax = ax + r if ax < 0 else ax
    axes = np.asarray(list(range(ax, r)), np.int32)
    stash = ONNX_DTYPES.get(a.get("stash_type", 1), dtypes.float32)
    xs = X if X.dtype is stash else c.op("Cast", X, DstT=stash)
    ms = c.op("Mean", c.op("Mul", xs, xs), axes, keep_dims=True)
    y = c.op("Mul", xs, c.op("Rsqrt", c.op("AddV2", ms, const(a.get("epsilon", 1e-5), ms))))
    if y.dtype is not X.dtype:
        y = c.op("Cast", y, DstT=X.dtype)
    return [c.op("Mul", y, x[1])]


@rule("Trilu", "SelectV2 ZerosLike", since=14)
def _trilu(c, x, a):
    X = x[0]
    k = int(c.value(x[1]).reshape(-1)[0]) if len(x) > 1 and x[1] is not None else 0
    n, m = X.shape[-2], X.shape[-1]
    ones = np.ones((n, m), bool)
    mask = np.triu(ones, k) if a.get("upper", 1) else np.tril(ones, k)
    return [c.op("SelectV2", mask, X, c.op("ZerosLike", X))]


@rule("Hardmax", "ArgMax OneHot Reshape Transpose", since=13)
def _hardmax(c, x, a):
    X = x[0]
    r = rank(X)
    ax = a.get("axis", -1)
    ax = ax + r if ax < 0 else ax
    idx = c.op("ArgMax", X, np.asarray(ax, np.int32), output_type=dtypes.int64)
    return [c.op("OneHot", idx, np.asarray(X.shape[ax], np.int32), const(1, X), const(0, X),
                 axis=ax)]


@rule("LpNormalization", "Sum Abs Mul Sqrt RealDiv Equal SelectV2")
def _lpnorm(c, x, a):
    X = x[0]
    ax = np.asarray([a.get("axis", -1)], np.int32)
    if a.get("p", 2) == 1:
        n = c.op("Sum", c.op("Abs", X), ax, keep_dims=True)
    else:
        n = c.op("Sqrt", c.op("Sum", c.op("Mul", X, X), ax, keep_dims=True))
    zero = c.op("Equal", n, const(0, n))   # a zero vector stays zero
    return [c.op("SelectV2", zero, const(0, X),
                 c.op("RealDiv", X, c.op("SelectV2", zero, const(1, n), n)))]


@rule("Shrink", "SelectV2 Less Greater AddV2 Sub ZerosLike Cast")
def _shrink(c, x, a):
    X = x[0]
    lam, bias = a.get("lambd", 0.5), a.get("bias", 0.0)
    xf = X if X.dtype.is_floating else c.op("Cast", X, DstT=dtypes.float64)
    lo = c.op("AddV2", xf, const(bias, xf))
    hi = c.op("Sub", xf, const(bias, xf))
    y = c.op("SelectV2", c.op("Less", xf, const(-lam, xf)), lo,
             c.op("SelectV2", c.op("Greater", xf, const(lam, xf)), hi, c.op("ZerosLike", xf)))
    return [y if y.dtype is X.dtype else c.op("Cast", y, DstT=X.dtype)]


@rule("EyeLike", "")
def _eyelike(c, x, a):
    dt = ONNX_DTYPES.get(a["dtype"]) if "dtype" in a else x[0].dtype
    n, m = x[0].shape
    return [np.eye(n, m, k=a.get("k", 0), dtype=dt.as_numpy_dtype)]


@rule("GatherElements", "GatherNd SelectV2 Less AddV2 Cast ExpandDims ConcatV2", since=11)
def _gather_elements(c, x, a):
    X, idx = x
    ax = a.get("axis", 0)
    ax = ax + rank(X) if ax < 0 else ax
    return [c.op("GatherNd", X, _element_coords(c, idx, X, ax))]


def _nll(c, logp, target, weight, a):
    """NegativeLogLikelihoodLoss over log-probabilities `logp` [N, C, d...]."""
    C = logp.shape[1]
    ign = a.get("ignore_index")
    t = target
    keep = None
    if ign is not None:
        keep = c.op("NotEqual", t, const(ign, t))
        t = c.op("SelectV2", keep, t, c.op("ZerosLike", t))
    hot = c.op("OneHot", t, np.asarray(C, np.int32), const(1, logp), const(0, logp), axis=1)
    picked = c.op("Sum", c.op("Mul", logp, hot), np.asarray([1], np.int32), keep_dims=False)
    w = c.op("GatherV2", weight, t, np.asarray(0, np.int64)) if weight is not None else \
        c.op("OnesLike", picked)
    if keep is not None:
        w = c.op("Mul", w, c.op("Cast", keep, DstT=w.dtype))
    loss = c.op("Neg", c.op("Mul", picked, w))
    red = a.get("reduction", "mean")
    everything = np.asarray(list(range(rank(loss))), np.int32)
    if red == "none":
        return loss
    total = c.op("Sum", loss, everything, keep_dims=False)
    if red == "sum":
        return total
    return c.op("RealDiv", total, c.op("Sum", w, everything, keep_dims=False))


@rule("NegativeLogLikelihoodLoss", "OneHot Sum Mul GatherV2 OnesLike Neg RealDiv NotEqual "
      "SelectV2 ZerosLike Cast", since=12)
def _nll_rule(c, x, a):
    return [_nll(c, x[0], x[1], x[2] if len(x) > 2 else None, a)]


@rule("SoftmaxCrossEntropyLoss", "LogSoftmax Transpose OneHot Sum Mul GatherV2 OnesLike Neg "
      "RealDiv NotEqual SelectV2 ZerosLike Cast", since=12)
def _sce(c, x, a):
    logp = _softmax("LogSoftmax")(type("C", (), {"opset": 13, "op": c.op, "ops": c.ops})(),
                                  [x[0]], {"axis": 1})[0]
    loss = _nll(c, logp, x[1], x[2] if len(x) > 2 else None, a)
    return [loss, logp]


def _heads(c, t, n):
    """[B, S, n*H] -> [B, n, S, H] (a 4-D input is already split)."""
    if rank(t) == 4:
        return t
    b, s, hid = t.shape
    return transpose(c, reshape(c, t, [b, s, n, hid // n]), [0, 2, 1, 3])


def _attention_bias(L, S, batch, dt, causal, left, right, offset, nonpad):
    """The additive bias (0 or -inf) of the causal, sliding-window and
    key-padding constraints, [L, S] or [batch, 1, L, S]: a query at block
    index i sits at absolute position i + offset (offset: the past keys, or
    per batch the non-padded keys less L)."""
    i = np.arange(L).reshape(L, 1)
    j = np.arange(S).reshape(1, S)
    off = np.asarray(offset).reshape(-1, 1, 1) if np.ndim(offset) else int(offset)
    diff = i + off - j
    ok = np.ones(np.shape(diff), bool)
    if causal:
        ok &= diff >= 0
    if left >= 0:
        ok &= diff <= left
    if right >= 0:
        ok &= -diff <= right
    if ok.ndim == 3:
        ok = ok.reshape(batch, 1, L, S)
    if nonpad is not None:
        ok = ok & (np.arange(S) < np.asarray(nonpad).reshape(-1, 1)).reshape(batch, 1, 1, S)
    return np.where(ok, 0, -np.inf).astype(dt)


@rule("Attention", "BatchMatMulV2 Softmax Mul AddV2 ConcatV2 Reshape Transpose Tile SelectV2 "
      "Tanh RealDiv Cast Max Equal Pad OnesLike Greater Identity", since=23)
def _attention(c, x, a):
    """onnx's Attention (reference semantics): optional past keys and
    values, a boolean or additive mask (shorter than the keys: padded with
    -inf), causal masking aligned at the past keys, sliding windows,
    key padding (nonpad_kv_seqlen, read when the graph is built), softcap,
    grouped-query heads, fully-masked rows as zeros, and the qk_matmul
    output of modes 0-3."""
    mode = a.get("qk_matmul_output_mode", 0)
    x = list(x) + [None] * (7 - len(x))
    Q, K, V, mask, past_k, past_v = x[:6]
    nonpad = c.value(x[6])
    if x[6] is not None and nonpad is None:
        raise errors.UnimplementedError(f"ONNX node {c.node!r}: nonpad_kv_seqlen must be a "
                                        "constant or a graph input")
    three_d = rank(Q) == 3
    q = _heads(c, Q, a.get("q_num_heads", 1))
    k = _heads(c, K, a.get("kv_num_heads", 1))
    v = _heads(c, V, a.get("kv_num_heads", 1))
    past = 0
    if past_k is not None:
        past = past_k.shape[2]
        k = c.op("ConcatV2", past_k, k, np.asarray(2, np.int32), N=2)
        v = c.op("ConcatV2", past_v, v, np.asarray(2, np.int32), N=2)
    present_k, present_v = k, v
    hq, hk = q.shape[1], k.shape[1]
    if hq != hk:  # grouped-query attention: each kv head serves hq/hk query heads
        rep = hq // hk
        b, _, s, d = k.shape
        k = reshape(c, c.op("Tile", reshape(c, k, [b, hk, 1, s, d]),
                            np.asarray([1, 1, rep, 1, 1], np.int64)), [b, hq, s, d])
        bv, _, sv, dv = v.shape
        v = reshape(c, c.op("Tile", reshape(c, v, [bv, hk, 1, sv, dv]),
                            np.asarray([1, 1, rep, 1, 1], np.int64)), [bv, hq, sv, dv])
    scale = a.get("scale", 1.0 / np.sqrt(q.shape[-1]))
    w = c.op("Mul", c.op("BatchMatMulV2", q, k, adj_y=True), const(scale, q))
    L, S = w.shape[-2], w.shape[-1]
    if a.get("softcap", 0.0):
        cap = const(a["softcap"], w)
        w = c.op("Mul", c.op("Tanh", c.op("RealDiv", w, cap)), cap)
    qk = w
    dt = q.dtype.as_numpy_dtype
    offset = np.asarray(nonpad).reshape(-1) - L if nonpad is not None and past_k is None \
        else past
    static = _attention_bias(L, S, q.shape[0], dt, a.get("is_causal", 0),
                             a.get("left_window_size", -1), a.get("right_window_size", -1),
                             offset, nonpad)
    bias = static if static.any() else None
    if mask is not None:
        m = mask
        if m.dtype is dtypes.bool_:
            m = c.op("SelectV2", m, const(0, q), const(-np.inf, q))
        if m.shape[-1] < S:  # a mask for the first keys only: the others are masked
            p = np.zeros((rank(m), 2), np.int64)
            p[-1, 1] = S - m.shape[-1]
            m = _pad_value(c, m, p, -np.inf)
        bias = m if bias is None else c.op("AddV2", m, bias)
    if bias is not None:
        w = c.op("AddV2", w, bias)
    if mode == 2:
        qk = w
    sm_dt = ONNX_DTYPES.get(a.get("softmax_precision", 0))
    ws = w if sm_dt is None or sm_dt is w.dtype else c.op("Cast", w, DstT=sm_dt)
    p_ = c.op("Softmax", ws)
    if bias is not None:   # a row whose every key is masked attends to nothing: zeros
        if isinstance(bias, np.ndarray):
            dead = np.isneginf(bias.max(-1, keepdims=True))
            if dead.any():
                p_ = c.op("SelectV2", dead, const(0, p_), p_)
        else:
            dead = c.op("Equal", c.op("Max", bias, np.asarray([-1], np.int32), keep_dims=True),
                        const(-np.inf, bias))
            p_ = c.op("SelectV2", dead, const(0, p_), p_)
    if p_.dtype is not q.dtype:
        p_ = c.op("Cast", p_, DstT=q.dtype)
    if mode == 3:
        qk = p_
    y = c.op("BatchMatMulV2", p_, v)
    if three_d:
        b, h, s, d = y.shape
        y = reshape(c, transpose(c, y, [0, 2, 1, 3]), [b, s, h * d])
    return [y, present_k, present_v, qk][:max(c.n_outputs, 1)]


# ================================================================ data-dependent shapes
# (Where, Unique* and NonMaxSuppressionV3 have CPU kernels only: under another
# device's scope they run on the host by soft placement.)

@rule("NonZero", "Where Transpose", since=9)
def _nonzero(c, x, a):
    return [transpose(c, c.op("Where", x[0]), [1, 0])]


def _stable_argsort(c, v, n: int):
    """The permutation that sorts 1-D `v` (n elements) ascending, equal
    values in their order: TopKV2 (descending, the lower index first among
    equals) of `v` reversed, read backwards."""
    rev = np.arange(n - 1, -1, -1, dtype=np.int64)
    if v.dtype is dtypes.bool_:   # (TopKV2 sorts numbers)
        v = c.op("Cast", v, DstT=dtypes.int8)
    _, idx = c.ops("TopKV2", c.op("GatherV2", v, rev, np.asarray(0, np.int32)),
                   np.asarray(n, np.int32), sorted=True, index_type=dtypes.int64)
    return c.op("Sub", const(n - 1, idx), c.op("GatherV2", idx, rev, np.asarray(0, np.int32)))


def _lexsort_rows(c, rows, n: int, d: int):
    """The permutation that sorts the n rows of `rows` ([n, d])
    lexicographically: stable sorts from the last column to the first."""
    perm = None
    zero = np.asarray(0, np.int32)
    for j in range(d - 1, -1, -1):
        col = c.op("GatherV2", rows, np.asarray(j, np.int64), np.asarray(1, np.int32))
        if perm is not None:
            col = c.op("GatherV2", col, perm, zero)
        p = _stable_argsort(c, col, n)
        perm = p if perm is None else c.op("GatherV2", perm, p, zero)
    return perm


@rule("Unique", "UniqueWithCountsV2 TopKV2 GatherV2 Sub Cumsum ScatterNd Reshape Transpose "
      "ExpandDims", since=11)
def _unique(c, x, a):
    X = x[0]
    if X.shape is None or any(d is None for d in X.shape):
        raise errors.UnimplementedError(f"ONNX node {c.node!r}: Unique needs an input of "
                                        "static shape")
    shape = tuple(X.shape)
    axis = a.get("axis")
    if axis is None:
        shape = (int(np.prod(shape, dtype=np.int64)),)
        X = reshape(c, X, shape)
        axis = 0
    axis = _axes([axis], len(shape))[0]
    perm = [axis] + [i for i in range(len(shape)) if i != axis]
    n, rest = shape[axis], [shape[i] for i in perm[1:]]
    d = int(np.prod(rest, dtype=np.int64))
    rows = reshape(c, transpose(c, X, perm) if axis else X, [n, d])
    zero = np.asarray(0, np.int32)
    order = _lexsort_rows(c, rows, n, d) if a.get("sorted", 1) and n > 0 else None
    if order is not None:
        rows = c.op("GatherV2", rows, order, zero)
    y, inv, counts = c.ops("UniqueWithCountsV2", rows, np.asarray([0], np.int64),
                           out_idx=dtypes.int64)
    starts = c.op("Cumsum", counts, zero, exclusive=True)
    if order is not None:   # rows sorted: each value's run starts at `starts`
        first = c.op("GatherV2", order, starts, zero)
        inv = c.op("ScatterNd", c.op("ExpandDims", order, np.asarray(-1, np.int32)), inv,
                   np.asarray([n], np.int64))
    else:
        first = c.op("GatherV2", _stable_argsort(c, inv, n), starts, zero) if n else inv
    y = reshape(c, y, [-1] + rest)
    if axis:
        y = transpose(c, y, list(np.argsort(perm)))
    return [y, first, inv, counts]


def _nms_boxes(c, boxes, center: bool):
    """ONNX boxes [N, 4] as TensorFlow's corners [y1, x1, y2, x2]
    (center_point_box 1: [x_center, y_center, width, height])."""
    if not center:
        return boxes
    cx, cy, w, h = (c.op("GatherV2", boxes, np.asarray(i, np.int64), np.asarray(1, np.int32))
                    for i in range(4))
    hw, hh = c.op("Mul", w, const(0.5, w)), c.op("Mul", h, const(0.5, h))
    corners = [c.op("Sub", cy, hh), c.op("Sub", cx, hw), c.op("AddV2", cy, hh),
               c.op("AddV2", cx, hw)]
    return c.op("Pack", *corners, axis=1, N=4)


@rule("NonMaxSuppression", "NonMaxSuppressionV3 GatherV2 Reshape Cast Mul Sub AddV2 Pack "
      "ConcatV2 Minimum", since=10)
def _nms(c, x, a):
    boxes, scores = x[0], x[1]
    if boxes.shape is None or scores.shape is None or None in tuple(scores.shape)[:2] \
            or len(boxes.shape) != 3 or len(scores.shape) != 3:
        raise errors.UnimplementedError(
            f"ONNX node {c.node!r}: NonMaxSuppression needs boxes [batch, boxes, 4] and "
            "scores [batch, classes, boxes] of known batch and class counts")
    nb, nc = int(scores.shape[0]), int(scores.shape[1])
    arg = lambda i: x[i] if len(x) > i and x[i] is not None else None   # noqa: E731
    k = arg(2)
    k = np.asarray(0, np.int32) if k is None else c.op(
        "Cast", reshape(c, c.op("Minimum", k, const(2**31 - 1, k)), []), DstT=dtypes.int32)
    iou = np.asarray(0, np.float32) if arg(3) is None else reshape(c, arg(3), [])
    score = np.asarray(-np.inf, np.float32) if arg(4) is None else reshape(c, arg(4), [])
    zero = np.asarray(0, np.int32)
    parts = []
    for b in range(nb):
        bx = _nms_boxes(c, c.op("GatherV2", boxes, np.asarray(b, np.int64), zero),
                        a.get("center_point_box", 0))
        for k_ in range(nc):
            sc = c.op("GatherV2", c.op("GatherV2", scores, np.asarray(b, np.int64), zero),
                      np.asarray(k_, np.int64), zero)
            sel = c.op("Cast", c.op("NonMaxSuppressionV3", bx, sc, k, iou, score),
                       DstT=dtypes.int64)
            z = c.op("Mul", sel, const(0, sel))
            parts.append(c.op("Pack", c.op("AddV2", z, const(b, z)),
                              c.op("AddV2", z, const(k_, z)), sel, axis=1, N=3))
    if not parts:
        return [np.zeros((0, 3), np.int64)]
    if len(parts) == 1:
        return parts
    return [c.op("ConcatV2", *parts, np.asarray(0, np.int32), N=len(parts))]


# ================================================================ ai.onnx.ml

@rule("Binarizer", "Greater Cast", domain="ai.onnx.ml")
def _binarizer(c, x, a):
    X = x[0]
    return [c.op("Cast", c.op("Greater", X, const(a.get("threshold", 0.0), X)), DstT=X.dtype)]


@rule("ArrayFeatureExtractor", "GatherV2 Reshape", domain="ai.onnx.ml")
def _array_feature_extractor(c, x, a):
    X, idx = x
    out = c.op("GatherV2", X, reshape(c, idx, [-1]), np.asarray(-1, np.int32))
    return [reshape(c, out, [1, -1]) if rank(X) == 1 else out]


@rule("Scan", "GatherV2 Pack StridedSlice Reshape Identity", since=8, until=8, raw=True)
def _scan8(c, x, a):
    """Scan-8: every input has a batch axis first, scanned along axis 1."""
    if x[0] is not None:
        raise errors.UnimplementedError(f"ONNX node {c.node!r}: Scan-8 with sequence_lens is "
                                        "not mapped (leave the input empty)")
    items = [_tensorish(c, v) for v in x[1:]]
    batch = items[0].shape[0] if items and items[0].shape else None
    if batch is None:
        raise errors.UnimplementedError(f"ONNX node {c.node!r}: Scan-8 needs a known batch size")
    zero = np.asarray(0, np.int32)
    attrs = {"body": a["body"], "num_scan_inputs": a["num_scan_inputs"],
             "scan_input_directions": a.get("directions")}
    per = [_scan(c, [c.op("GatherV2", v, np.asarray(b, np.int64), zero) for v in items], attrs)
           for b in range(batch)]
    return [_stack(c, list(outs), 0) for outs in zip(*per)]


# ================================================================ random
# Counter-based (Philox) draws keyed by the node's seed; without one, by a key
# chosen when the graph is built, so a built graph repeats its numbers.

def _uniform(c, shape, dt, seed):
    """Uniform [0, 1) samples of `shape` (static) and float dtype `dt`."""
    if shape is None or any(d is None for d in shape):
        raise errors.UnimplementedError(f"ONNX node {c.node!r}: random values need a shape "
                                        "known when the graph is built")
    if seed is None:
        key = np.random.default_rng().integers(0, 2**63, 1, dtype=np.uint64)
    else:
        key = np.asarray([int(seed) & (2**64 - 1)], np.uint64)
    return c.op("StatelessRandomUniformV2", np.asarray(list(shape), np.int64), key,
                np.zeros(2, np.uint64), np.asarray(1, np.int32), dtype=dt)


def _random_dtype(c, a, like=None):
    code = a.get("dtype")
    dt = ONNX_DTYPES.get(int(code)) if code is not None else (like.dtype if like is not None
                                                               else dtypes.float32)
    if dt is None:
        raise errors.UnimplementedError(f"ONNX node {c.node!r}: random values of ONNX type "
                                        f"{code} have no pluggable dtype")
    return dt


def _scaled_uniform(c, shape, dt, a):
    draw = dt if dt.is_floating else dtypes.float32
    u = _uniform(c, shape, draw, a.get("seed"))
    lo, hi = a.get("low", 0.0), a.get("high", 1.0)
    u = c.op("AddV2", c.op("Mul", u, const(hi - lo, u)), const(lo, u))
    return u if draw is dt else c.op("Cast", u, DstT=dt)


@rule("RandomUniform", "StatelessRandomUniformV2 Mul AddV2 Cast")
def _random_uniform(c, x, a):
    return [_scaled_uniform(c, tuple(a["shape"]), _random_dtype(c, a), a)]


@rule("RandomUniformLike", "StatelessRandomUniformV2 Mul AddV2 Cast")
def _random_uniform_like(c, x, a):
    return [_scaled_uniform(c, x[0].shape, _random_dtype(c, a, x[0]), a)]


@rule("Bernoulli", "StatelessRandomUniformV2 Less Cast", since=15)
def _bernoulli(c, x, a):
    p = x[0]
    u = _uniform(c, p.shape, p.dtype if p.dtype.is_floating else dtypes.float32,
                 a.get("seed"))
    return [c.op("Cast", c.op("Less", u, p), DstT=_random_dtype(c, a, p))]


@rule("TensorScatter", "TensorScatterUpdate Cast Reshape AddV2 FloorMod ExpandDims ConcatV2",
      since=24)
def _tensor_scatter(c, x, a):
    """A cache update: `update`'s sequence written into `past_cache` along
    `axis` from each batch's write index (wrapping round when circular)."""
    past, upd = x[0], x[1]
    wi = x[2] if len(x) > 2 else None
    shape, ushape = tuple(past.shape), tuple(upd.shape)
    r = len(shape)
    ax = _axes([a.get("axis", -2)], r)[0]
    if ax == 0:
        raise c.error("TensorScatter's axis cannot be the batch axis 0")
    mode = a.get("mode", "linear")
    if mode not in ("linear", "circular"):
        raise c.error(f"TensorScatter mode must be 'linear' or 'circular', got {mode!r}")
    if len(ushape) != r or any(ushape[i] != shape[i] for i in range(r) if i != ax) \
            or ushape[ax] > shape[ax]:
        raise c.error(f"update of shape {list(ushape)} does not fit past_cache of shape "
                      f"{list(shape)} along axis {ax}")
    grid = shape[:ax] + (ushape[ax],)
    if wi is None:
        wi = np.zeros(shape[0], np.int64)
    wi = reshape(c, c.op("Cast", wi, DstT=dtypes.int64), [shape[0]] + [1] * ax)
    steps = np.arange(ushape[ax], dtype=np.int64).reshape((1,) * ax + (ushape[ax],))
    pos = c.op("AddV2", c.op("AddV2", wi, steps), np.zeros(grid, np.int64))
    if mode == "circular":
        pos = c.op("FloorMod", pos, np.asarray(shape[ax], np.int64))
    prefix = np.indices(grid, dtype=np.int64)[:ax]
    parts = [np.expand_dims(p, -1) for p in prefix] + [
        c.op("ExpandDims", pos, np.asarray(-1, np.int32))]
    coords = c.op("ConcatV2", *parts, np.asarray(-1, np.int32), N=len(parts))
    return [c.op("TensorScatterUpdate", past, coords, upd)]


# ================================================================ preview domain

_SOFTMAX_PRECISION = {1: dtypes.float32, 10: dtypes.float16, 16: dtypes.bfloat16,
                      11: dtypes.float64}


@rule("FlexAttention", "BatchMatMulV2 Mul Cast Softmax GatherV2", domain="ai.onnx.preview",
      raw=True)
def _flex_attention(c, x, a):
    """softmax(score_mod(Q K^T scale)) -> prob_mod -> @ V, the score and
    probability graphs inlined; the softmax in float32 for 16-bit inputs
    (or in softmax_precision)."""
    q, k, v = (_tensorish(c, t) for t in x[:3])
    if any(t.shape is None or len(t.shape) != 4 for t in (q, k, v)):
        raise c.error("FlexAttention needs Q, K and V of rank 4 ([batch, heads, seq, size])")
    hq, e = q.shape[1], q.shape[3]
    hkv = k.shape[1]
    if hq != hkv:
        if not hkv or hq % hkv:
            raise c.error(f"FlexAttention: {hq} query heads are not a multiple of {hkv} "
                          "key/value heads")
        rep = np.repeat(np.arange(hkv, dtype=np.int64), hq // hkv)
        k = c.op("GatherV2", k, rep, np.asarray(1, np.int32))
        v = c.op("GatherV2", v, rep, np.asarray(1, np.int32))
    scale = a.get("scale")
    scale = 1.0 / np.sqrt(e) if scale is None else scale
    s = const(np.sqrt(np.float32(scale)), q)
    scores = c.op("BatchMatMulV2", c.op("Mul", q, s), c.op("Mul", k, s), adj_y=True)
    prec = a.get("softmax_precision")
    if prec is not None:
        dt = _SOFTMAX_PRECISION.get(int(prec))
        if dt is None:
            raise c.error(f"FlexAttention: softmax_precision {prec} is not a float type")
    else:
        dt = dtypes.float32 if q.dtype in (dtypes.float16, dtypes.bfloat16) else q.dtype
    cast = lambda t: t if t.dtype is dt else c.op("Cast", t, DstT=dt)   # noqa: E731
    scores = cast(scores)
    if a.get("score_mod") is not None:
        scores = cast(_tensorish(c, c.subgraph(a["score_mod"], [scores])[0]))
    probs = c.op("Softmax", scores)
    if a.get("prob_mod") is not None:
        probs = cast(_tensorish(c, c.subgraph(a["prob_mod"], [probs])[0]))
    out = c.op("BatchMatMulV2", probs, cast(v))
    return [out if out.dtype is v.dtype else c.op("Cast", out, DstT=v.dtype)]


@rule("DeformConv", "Reshape Transpose StridedSlice AddV2 Sub Mul Floor Cast GreaterEqual "
      "LessEqual LogicalAnd SelectV2 GatherV2 Pad BatchMatMulV2 ConcatV2", since=19)
def _deform_conv(c, x, a):
    """DeformConv of 2 spatial dimensions: every kernel tap samples the
    input bilinearly (zero outside it) at its offset position, scaled by the
    mask; the samples of a window meet the weights in a matrix product."""
    X, Wt, off = x[0], x[1], x[2]
    B = x[3] if len(x) > 3 else None
    mask = x[4] if len(x) > 4 else None
    if len(X.shape) != 4 or any(d is None for d in tuple(X.shape) + tuple(off.shape)):
        raise errors.UnimplementedError(f"ONNX node {c.node!r}: DeformConv is mapped for 2 "
                                        "spatial dimensions of static shape")
    n, ch, hh, ww = (int(d) for d in X.shape)
    oc = int(Wt.shape[0])
    kh, kw = (int(d) for d in (a.get("kernel_shape") or Wt.shape[2:]))
    sh, sw = a.get("strides") or [1, 1]
    dh, dw = a.get("dilations") or [1, 1]
    pt, pl = (a.get("pads") or [0, 0, 0, 0])[:2]
    grp, og = int(a.get("group", 1)), int(a.get("offset_group", 1))
    oh, ow = int(off.shape[2]), int(off.shape[3])
    k = kh * kw
    if ch % og or ch % grp or oc % grp or off.shape[1] != og * k * 2:
        raise c.error(f"DeformConv: channels {ch}, group {grp}, offset_group {og} and offset "
                      f"shape {list(off.shape)} do not fit a {kh}x{kw} kernel")
    cg = ch // og
    base_y = (-pt + sh * np.arange(oh)[None, None, :, None]
              + dh * np.arange(kh)[:, None, None, None]) * np.ones((kh, kw, oh, ow))
    base_x = (-pl + sw * np.arange(ow)[None, None, None, :]
              + dw * np.arange(kw)[None, :, None, None]) * np.ones((kh, kw, oh, ow))
    off = reshape(c, off, [n, og, kh, kw, 2, oh, ow])
    pos = [c.op("AddV2", reshape(c, _slice(c, off, [i], [i + 1], [4], [1]),
                                 [n, og, kh, kw, oh, ow]), const(b, X))
           for i, b in ((0, base_y), (1, base_x))]
    y0, x0 = c.op("Floor", pos[0]), c.op("Floor", pos[1])
    fy, fx = c.op("Sub", pos[0], y0), c.op("Sub", pos[1], x0)
    one = const(1, X)
    # the input as rows [(n, offset group, pixel), channel], a zero row last per image group
    table = transpose(c, reshape(c, X, [n, og, cg, hh * ww]), [0, 1, 3, 2])
    table = c.op("Pad", table, np.asarray([[0, 0], [0, 0], [0, 1], [0, 0]], np.int32))
    table = reshape(c, table, [n * og * (hh * ww + 1), cg])
    first = (np.arange(n * og, dtype=np.int64) * (hh * ww + 1)).reshape(n, og, 1, 1, 1, 1)
    samples = None
    for yc, xc, wy, wx in ((y0, x0, c.op("Sub", one, fy), c.op("Sub", one, fx)),
                           (y0, c.op("AddV2", x0, one), c.op("Sub", one, fy), fx),
                           (c.op("AddV2", y0, one), x0, fy, c.op("Sub", one, fx)),
                           (c.op("AddV2", y0, one), c.op("AddV2", x0, one), fy, fx)):
        inside = c.op("LogicalAnd",
                      c.op("LogicalAnd", c.op("GreaterEqual", yc, const(0, X)),
                           c.op("LessEqual", yc, const(hh - 1, X))),
                      c.op("LogicalAnd", c.op("GreaterEqual", xc, const(0, X)),
                           c.op("LessEqual", xc, const(ww - 1, X))))
        flat = c.op("AddV2", c.op("Mul", yc, const(ww, X)), xc)
        flat = c.op("SelectV2", inside, flat, const(hh * ww, X))
        rows = c.op("AddV2", c.op("Cast", flat, DstT=dtypes.int64), first)
        got = c.op("GatherV2", table, reshape(c, rows, [-1]), np.asarray(0, np.int32))
        w = reshape(c, c.op("Mul", wy, wx), [-1, 1])
        term = c.op("Mul", got, w)
        samples = term if samples is None else c.op("AddV2", samples, term)
    if mask is not None:
        samples = c.op("Mul", samples, reshape(c, mask, [-1, 1]))
    # [n, og, k, oh*ow, cg] -> [n, oh*ow, channel, k]
    s = transpose(c, reshape(c, samples, [n, og, k, oh * ow, cg]), [0, 3, 1, 4, 2])
    s = reshape(c, s, [n, oh * ow, ch, k])
    cpg, ocg = ch // grp, oc // grp
    outs = []
    for g in range(grp):
        sg = reshape(c, _slice(c, s, [g * cpg], [(g + 1) * cpg], [2], [1]), [n, oh * ow, cpg * k])
        wg = reshape(c, _slice(c, Wt, [g * ocg], [(g + 1) * ocg], [0], [1]), [ocg, cpg * k])
        outs.append(c.op("BatchMatMulV2", sg, wg, adj_y=True))
    y = outs[0] if grp == 1 else c.op("ConcatV2", *outs, np.asarray(2, np.int32), N=grp)
    if B is not None:
        y = c.op("AddV2", y, B)
    return [reshape(c, transpose(c, y, [0, 2, 1]), [n, oc, oh, ow])]


@rule("SequenceMap", "", since=17, raw=True)
def _sequence_map(c, x, a):
    """The body applied to each position of the input sequence (sequence
    inputs give their item there, tensors themselves); one output
    sequence per body output."""
    seqs = [v for v in x if isinstance(v, list)]
    if not x or not isinstance(x[0], list):
        raise c.error("SequenceMap's first input must be a sequence")
    n = len(x[0])
    if any(len(s) != n for s in seqs):
        raise c.error(f"SequenceMap's sequences differ in length ({[len(s) for s in seqs]})")
    body = a["body"]
    outs = [[] for _ in body.output]
    for i in range(n):
        res = c.subgraph(body, [v[i] if isinstance(v, list) else v for v in x])
        for o, r in zip(outs, res):
            o.append(r)
    return outs


def _tree_paths(a):
    """Every root-to-leaf path of the ensemble: (leaf index, [(node, branch
    taken)]), the trees in order."""
    tl, fl = a["nodes_trueleafs"], a["nodes_falseleafs"]
    tn, fn = a["nodes_truenodeids"], a["nodes_falsenodeids"]
    paths = []

    def walk(node, is_leaf, path):
        if len(path) > len(tl):
            raise errors.InvalidArgumentError("TreeEnsemble: a tree loops back on itself")
        if is_leaf:
            paths.append((int(node), path))
            return
        walk(tn[node], tl[node], path + [(int(node), True)])
        walk(fn[node], fl[node], path + [(int(node), False)])
    for root in a["tree_roots"]:
        leaf_root = tl[root] and fl[root] and tn[root] == fn[root]
        walk(tn[root] if leaf_root else root, bool(leaf_root), [])
    return paths


_TREE_CMP = {0: "LessEqual", 1: "Less", 2: "GreaterEqual", 3: "Greater", 4: "Equal",
             5: "NotEqual"}


@rule("TreeEnsemble", "GatherV2 LessEqual Less GreaterEqual Greater Equal NotEqual SelectV2 "
      "LogicalOr LogicalAnd Cast MatMul AddV2 Mul Max Min Sum", since=5, domain="ai.onnx.ml")
def _tree_ensemble(c, x, a):
    """Each node's test on every row at once; a leaf is reached when every
    test on its path goes its way (counted by a matrix product); the leaves
    reached add up (or average, or take the min or max) per target."""
    X = x[0]
    if len(X.shape) != 2 or not X.dtype.is_floating:
        raise c.error("TreeEnsemble takes a float matrix [rows, features]")
    if int(a.get("post_transform", 0)):
        raise errors.UnimplementedError(f"ONNX node {c.node!r}: TreeEnsemble post_transform "
                                        f"{a['post_transform']} is not mapped (only NONE is)")
    npt = X.dtype.as_numpy_dtype
    modes = np.asarray(a["nodes_modes"]).astype(np.int64).reshape(-1)
    splits = np.asarray(a["nodes_splits"]).astype(npt).reshape(-1)
    feats = c.op("GatherV2", X, np.asarray(a["nodes_featureids"], np.int64),
                 np.asarray(1, np.int32))                                  # [rows, nodes]
    cond = None
    for m in sorted(set(modes.tolist())):
        if m == 6:   # set membership: the members of each node, NaN-separated, in order
            members, it = [], iter(np.asarray(a["membership_values"]).reshape(-1).tolist())
            for mode in modes:
                group = []
                if mode == 6:
                    for v in it:
                        if np.isnan(v):
                            break
                        group.append(v)
                members.append(group)
            width = max(len(g) for g in members)
            table = np.full((len(modes), max(width, 1)), np.nan, npt)
            for i, g in enumerate(members):
                table[i, :len(g)] = g
            hit = c.op("Equal", c.op("ExpandDims", feats, np.asarray(-1, np.int32)), table)
            got = c.op("Greater", c.op("Sum", c.op("Cast", hit, DstT=dtypes.int32),
                                       np.asarray(-1, np.int32)), np.asarray(0, np.int32))
        elif m in _TREE_CMP:
            got = c.op(_TREE_CMP[m], feats, splits)
        else:
            raise c.error(f"TreeEnsemble: unknown node mode {m}")
        cond = got if cond is None else c.op("SelectV2", modes == m, got, cond)
    track = a.get("nodes_missing_value_tracks_true")
    if track is not None and any(track):
        nan = c.op("NotEqual", feats, feats)
        cond = c.op("LogicalOr", cond, c.op("LogicalAnd", nan, np.asarray(track, bool)))
    paths = _tree_paths(a)
    turn = np.zeros((len(modes), len(paths)), npt)     # +1: must hold, -1: must fail
    fails = np.zeros(len(paths), npt)
    for j, (_, path) in enumerate(paths):
        for node, branch in path:
            turn[node, j] += 1 if branch else -1
            fails[j] += 0 if branch else 1
    length = np.asarray([len(p) for _, p in paths], npt)
    held = c.op("AddV2", c.op("MatMul", c.op("Cast", cond, DstT=X.dtype), turn), fails)
    reached = c.op("Equal", held, length)                                  # [rows, paths]
    n_t = int(a["n_targets"])
    leaf_w = np.asarray(a["leaf_weights"]).astype(npt).reshape(-1)
    leaf_t = np.asarray(a["leaf_targetids"], np.int64).reshape(-1)
    agg = int(a.get("aggregate_function", 1))
    onto = np.zeros((len(paths), n_t), npt)
    for j, (leaf, _) in enumerate(paths):
        onto[j, leaf_t[leaf]] = 1
    w = np.asarray([leaf_w[leaf] for leaf, _ in paths], npt)
    if agg in (0, 1):   # AVERAGE, SUM
        if agg == 0:
            w = w / len(a["tree_roots"])
        return [c.op("MatMul", c.op("Cast", reached, DstT=X.dtype), onto * w[:, None])]
    if agg not in (2, 3):
        raise c.error(f"TreeEnsemble: unknown aggregate_function {agg}")
    big = np.finfo(npt).max if agg == 2 else np.finfo(npt).min
    take = c.op("LogicalAnd", c.op("ExpandDims", reached, np.asarray(-1, np.int32)),
                onto.astype(bool))                                          # [rows, paths, t]
    vals = c.op("SelectV2", take, np.broadcast_to(w[:, None], onto.shape).copy(),
                np.asarray(big, npt))
    return [c.op("Min" if agg == 2 else "Max", vals, np.asarray(1, np.int32))]
