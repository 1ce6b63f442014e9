"""Definitions of the elementwise, comparison, reduction, scan and
selection ops (TensorFlow's names, inputs, attributes, defaults and allowed
types), with shape functions and sample calls (``examples``)."""
from __future__ import annotations

import numpy as np

from ..framework import dtypes
from .definitions import broadcast_shapes, normalize_axes
from .op_util import (axis, define, err, index_array, sample, same_shape, same_shape_pair,
                      scalar)

# TensorFlow's type sets, restricted to the dtypes pluggable has.
REAL = "{float, double, int32, uint8, int16, int8, int64, bfloat16, half, uint16, uint32, uint64}"
NUMBER = REAL
FLOAT = "{bfloat16, half, float, double}"
BITS = "{int8, int16, int32, int64, uint8, uint16, uint32, uint64}"
BITCAST = ("{bfloat16, half, float, double, int8, int16, int32, int64, uint8, uint16, uint32, "
           "uint64}")
_IDX = "{int32, int64}"
# TensorFlow's complex types; with_complex("{float, double}") adds them to a set.
COMPLEX = "complex64, complex128"


def with_complex(types: str) -> str:
    """The type set `types` ("{...}") and complex64, complex128."""
    return f"{types[:-1]}, {COMPLEX}}}"

# The unary float ops that also take complex numbers in TensorFlow.
_COMPLEX_UNARY = {"Sin", "Cos", "Tan", "Sinh", "Cosh", "Expm1", "Log1p", "Asin", "Acos", "Atan",
                  "Asinh", "Acosh", "Atanh"}


# ------------------------------------------------------------------ shape fns

def _binary(op):
    def fn(shapes, attrs, values):
        return [broadcast_shapes(op, tuple(shapes[0]), tuple(shapes[1]))]
    return fn


def _equality(op):
    def fn(shapes, attrs, values):
        try:
            return [broadcast_shapes(op, tuple(shapes[0]), tuple(shapes[1]))]
        except ValueError:
            if attrs["incompatible_shape_error"]:
                raise
            return [()]  # a scalar: the shapes differ, so the values are not equal
    return fn


def select_shape(op: str, c: tuple, t: tuple, e: tuple) -> tuple:
    if t != e:
        raise err(op, f"t and e must have the same shape, got {list(t)} and {list(e)}")
    if c == t or c == () or (len(c) == 1 and len(t) >= 1 and c[0] == t[0]):
        return t
    raise err(op, f"condition must be a scalar, have the shape of t ({list(t)}) or be a "
              f"vector of its first dimension, got shape {list(c)}")


def _select(shapes, attrs, values):
    return [select_shape("Select", *(tuple(s) for s in shapes))]


def _select_v2(shapes, attrs, values):
    op = "SelectV2"
    s = broadcast_shapes(op, tuple(shapes[1]), tuple(shapes[2]))
    return [broadcast_shapes(op, tuple(shapes[0]), s)]


def _reduce(op):
    def fn(shapes, attrs, values):
        s = tuple(shapes[0])
        axes = normalize_axes(op, values["reduction_indices"], len(s))
        if attrs["keep_dims"]:
            return [tuple(1 if i in axes else d for i, d in enumerate(s))]
        return [tuple(d for i, d in enumerate(s) if i not in axes)]
    return fn


def _arg_reduce(op):
    def fn(shapes, attrs, values):
        s = tuple(shapes[0])
        if np.ndim(values["dimension"]) != 0:
            raise err(op, f"dimension must be a scalar, got shape "
                      f"{list(np.shape(values['dimension']))}")
        ax = axis(op, scalar(op, "dimension", values["dimension"]), len(s), "dimension")
        if s[ax] == 0:
            raise err(op, f"reduction dimension {ax} is empty in shape {list(s)}")
        return [s[:ax] + s[ax + 1:]]
    return fn


def _cumsum(shapes, attrs, values):
    op = "Cumsum"
    if np.ndim(values["axis"]) != 0:
        raise err(op, f"axis must be a scalar, got shape {list(np.shape(values['axis']))}")
    axis(op, scalar(op, "axis", values["axis"]), len(shapes[0]))
    return [tuple(shapes[0])]


def _top_k(shapes, attrs, values):
    op = "TopKV2"
    s = tuple(shapes[0])
    if np.ndim(values["k"]) != 0:
        raise err(op, f"k must be a scalar, got shape {list(np.shape(values['k']))}")
    k = scalar(op, "k", values["k"])
    if len(s) < 1:
        raise err(op, "input must have rank >= 1, got a scalar")
    if k < 0:
        raise err(op, f"k must be non-negative, got {k}")
    if s[-1] < k:
        raise err(op, f"input must have at least k={k} columns, got shape {list(s)}")
    out = s[:-1] + (k,)
    return [out, out]


def _lin_space(shapes, attrs, values):
    op = "LinSpace"
    for n in ("start", "stop"):
        if len(shapes[("start", "stop").index(n)]) != 0:
            raise err(op, f"{n} must be a scalar, got shape "
                      f"{list(shapes[('start', 'stop').index(n)])}")
    num = values["num"]
    if np.ndim(num) != 0:
        raise err(op, f"num must be a scalar, got shape {list(np.shape(num))}")
    num = scalar(op, "num", num)
    if num <= 0:
        raise err(op, f"Requires num > 0: {num}")
    return [(num,)]


def _add_n(shapes, attrs, values):
    for i, s in enumerate(shapes):
        if tuple(s) != tuple(shapes[0]):
            raise err("AddN", f"inputs[{i}] has shape {list(s)} but inputs[0] has shape "
                      f"{list(shapes[0])}; all inputs must have the same shape")
    return [tuple(shapes[0])]


def _segment_sum(shapes, attrs, values):
    op = "UnsortedSegmentSum"
    d, ids = tuple(shapes[0]), tuple(shapes[1])
    if d[:len(ids)] != ids:
        raise err(op, f"segment_ids shape {list(ids)} must be a prefix of data shape {list(d)}")
    n = values["num_segments"]
    if np.ndim(n) != 0:
        raise err(op, f"num_segments must be a scalar, got shape {list(np.shape(n))}")
    n = scalar(op, "num_segments", n)
    if n < 0:
        raise err(op, f"num_segments must be non-negative, got {n}")
    return [(n,) + d[len(ids):]]


def batch_matmul_shape(op: str, a: tuple, b: tuple, adj_x: bool, adj_y: bool) -> tuple:
    if len(a) < 2 or len(b) < 2:
        raise err(op, f"x and y must have rank >= 2, got shapes {list(a)} and {list(b)}")
    m, ka = (a[-1], a[-2]) if adj_x else (a[-2], a[-1])
    kb, n = (b[-1], b[-2]) if adj_y else (b[-2], b[-1])
    if ka != kb:
        raise err(op, f"inner dimensions do not match: x is {list(a)} (adj_x={adj_x}), y is "
                  f"{list(b)} (adj_y={adj_y}): {ka} != {kb}")
    batch = broadcast_shapes(op, a[:-2], b[:-2])
    return batch + (m, n)


def _batch_matmul(shapes, attrs, values):
    return [batch_matmul_shape("BatchMatMulV2", tuple(shapes[0]), tuple(shapes[1]),
                               attrs["adj_x"], attrs["adj_y"])]


# ------------------------------------------------------------------- examples

_PAIRS = (((3, 4), (4,)), ((2, 1, 3), (5, 1)), ((), (3,)), ((0, 2), (2,)))


def _ex_binary(positive=False, nonzero_y=False, int_exp=False):
    def ex(rng, types):
        T = next(t for n, t in types.items() if n == "T") if "T" in types else dtypes.bool_
        out = []
        for s1, s2 in _PAIRS:
            x = sample(rng, T, s1, positive=positive)
            if int_exp and T.is_integer:
                y = sample(rng, T, s2, low=0, high=1).clip(0, 3).astype(T.as_numpy_dtype)
            else:
                y = sample(rng, T, s2, positive=positive, nonzero=nonzero_y)
            out.append(({"x": x, "y": y}, {}))
        return out
    return ex


def _ex_equality(rng, types):
    T = types["T"]
    x = sample(rng, T, (3, 4))
    y = x.copy()
    y[::2] = sample(rng, T, (2, 4))
    return [({"x": x, "y": y}, {}), ({"x": x, "y": x[0]}, {}),
            ({"x": x, "y": sample(rng, T, (3,))}, {"incompatible_shape_error": False}),
            ({"x": sample(rng, T, (0, 3)), "y": sample(rng, T, (3,))}, {})]


def _ex_unary(arg="x", positive=False, low=-3.0, high=3.0):
    def ex(rng, types):
        T = types["T"]
        return [({arg: sample(rng, T, s, positive=positive, low=low, high=high)}, {})
                for s in ((2, 3, 4), (), (0, 3))]
    return ex


def _ex_round(rng, types):
    """Random values and exact halves (-3.5 .. 3.5: round half to even)."""
    T = types["T"]
    halves = (np.arange(-7, 8) / 2.0)
    if T.is_integer:
        halves = np.arange(-7, 8)
    return _ex_unary()(rng, types) + [({"x": halves.astype(T.as_numpy_dtype)}, {})]


# The float unary ops TensorFlow defines for bfloat16, half, float and
# double (and complex types, which pluggable does not have), each with the
# input range its sample calls draw from (the op's domain, where it has one).
UNARY_FLOAT_OPS = {
    "Sin": (-3.0, 3.0), "Cos": (-3.0, 3.0), "Tan": (-1.4, 1.4), "Asin": (-1.0, 1.0),
    "Acos": (-1.0, 1.0), "Atan": (-3.0, 3.0), "Sinh": (-3.0, 3.0), "Cosh": (-3.0, 3.0),
    "Asinh": (-3.0, 3.0), "Acosh": (1.0, 4.0), "Atanh": (-0.99, 0.99),
    "Expm1": (-3.0, 3.0), "Log1p": (-0.99, 3.0), "Erfc": (-3.0, 3.0), "Ceil": (-3.0, 3.0),
}


def _ex_logical_binary(rng, types):
    return [({"x": sample(rng, dtypes.bool_, a), "y": sample(rng, dtypes.bool_, b)}, {})
            for a, b in _PAIRS]


def _ex_logical_not(rng, types):
    return [({"x": sample(rng, dtypes.bool_, s)}, {}) for s in ((3, 4), (), (0,))]


def _ex_select(rng, types):
    T = types["T"]
    b = lambda *s: sample(rng, dtypes.bool_, s)
    v = lambda *s: sample(rng, T, s)
    return [({"condition": b(3, 4), "t": v(3, 4), "e": v(3, 4)}, {}),
            ({"condition": b(3), "t": v(3, 2), "e": v(3, 2)}, {}),
            ({"condition": b(), "t": v(2), "e": v(2)}, {})]


def _ex_select_v2(rng, types):
    T = types["T"]
    b = lambda *s: sample(rng, dtypes.bool_, s)
    v = lambda *s: sample(rng, T, s)
    return [({"condition": b(3, 1), "t": v(1, 4), "e": v(3, 4)}, {}),
            ({"condition": b(), "t": v(2), "e": v()}, {}),
            ({"condition": b(0, 2), "t": v(2), "e": v(2)}, {})]


def _ex_reduce(rng, types):
    T, I = types["T"], types["Tidx"]
    small = lambda s: sample(rng, T, s, low=-1.5, high=1.5)
    return [({"input": small((3, 4, 5)), "reduction_indices": index_array([1, -1], I)},
             {"keep_dims": False}),
            ({"input": small((3, 4)), "reduction_indices": index_array(0, I)},
             {"keep_dims": True}),
            ({"input": small((0, 3)), "reduction_indices": index_array([0], I)}, {})]


def _ex_arg(rng, types):
    T, I = types["T"], types["Tidx"]
    return [({"input": sample(rng, T, (4, 5)), "dimension": index_array(1, I)}, {}),
            ({"input": sample(rng, T, (3, 2, 2)), "dimension": index_array(-3, I)}, {}),
            ({"input": sample(rng, T, (0, 3)), "dimension": index_array(1, I)}, {})]


def _ex_cumsum(rng, types):
    T, I = types["T"], types["Tidx"]
    x = sample(rng, T, (3, 5), low=-2, high=2)
    return [({"x": x, "axis": index_array(1, I)}, {}),
            ({"x": x, "axis": index_array(-2, I)}, {"exclusive": True, "reverse": True}),
            ({"x": sample(rng, T, (0, 2)), "axis": index_array(0, I)}, {"reverse": True})]


def _ex_shift(rng, types):
    """Shifts inside the type's width (TensorFlow leaves wider ones undefined)."""
    T = types["T"]
    bits = 8 * np.dtype(T.as_numpy_dtype).itemsize
    out = []
    for s1, s2 in _PAIRS:
        y = rng.integers(0, bits, size=s2).astype(T.as_numpy_dtype)
        out.append(({"x": sample(rng, T, s1), "y": y}, {}))
    return out


def _itemsize(t) -> int:
    return np.dtype(t.as_numpy_dtype).itemsize


def _bitcast(shapes, attrs, values):
    op = "Bitcast"
    s = tuple(shapes[0])
    a, b = _itemsize(attrs["T"]), _itemsize(attrs["type"])
    if a == b:
        return [s]
    if a > b:
        return [s + (a // b,)]
    if not s or s[-1] != b // a:
        raise err(op, f"casting {attrs['T'].name} to {attrs['type'].name} needs a last "
                  f"dimension of {b // a}, got shape {list(s)}")
    return [s[:-1]]


def _ex_bitcast(rng, types):
    T, U = types["T"], types["type"]
    a, b = _itemsize(T), _itemsize(U)
    to = {"type": U}
    if a >= b:
        return [({"input": sample(rng, T, (3, 4))}, to), ({"input": sample(rng, T, ())}, to)]
    return [({"input": sample(rng, T, (3, b // a))}, to)]


def _ex_top_k(rng, types):
    T, K = types["T"], types["Tk"]
    return [({"input": sample(rng, T, (3, 7)), "k": index_array(3, K)}, {}),
            ({"input": sample(rng, T, (6,)), "k": index_array(6, K)}, {}),
            ({"input": sample(rng, T, (2, 4)), "k": index_array(0, K)}, {})]


def _ex_lin_space(rng, types):
    T, I = types["T"], types["Tidx"]
    v = lambda: sample(rng, T, ())
    return [({"start": v(), "stop": v(), "num": index_array(n, I)}, {}) for n in (7, 2, 50)]


def _ex_add_n(rng, types):
    T = types["T"]
    return [({"inputs": [sample(rng, T, (3, 4)) for _ in range(3)]}, {}),
            ({"inputs": [sample(rng, T, ())]}, {}),
            ({"inputs": [sample(rng, T, (0, 2)), sample(rng, T, (0, 2))]}, {})]


def _ex_segment_sum(rng, types):
    T, I, N = types["T"], types["Tindices"], types["Tnumsegments"]
    ids = rng.integers(-1, 4, (6,))
    return [({"data": sample(rng, T, (6, 3)), "segment_ids": index_array(ids, I),
              "num_segments": index_array(4, N)}, {}),
            ({"data": sample(rng, T, (2, 3)), "segment_ids": index_array([[0, 2, 2], [1, 0, 2]], I),
              "num_segments": index_array(3, N)}, {})]


def _ex_batch_matmul(rng, types):
    T = types["T"]
    v = lambda *s: sample(rng, T, s, low=-2, high=2)
    return [({"x": v(2, 3, 4), "y": v(2, 4, 5)}, {}),
            ({"x": v(1, 4, 3), "y": v(3, 5, 4)}, {"adj_x": True, "adj_y": True}),
            ({"x": v(3, 4), "y": v(2, 1, 4, 2)}, {}),
            ({"x": v(0, 2, 3), "y": v(3, 2)}, {})]


def _ex_grad(positive=False):
    def ex(rng, types):
        T = types["T"]
        return [({"y": sample(rng, T, s, positive=positive), "dy": sample(rng, T, s)}, {})
                for s in ((3, 4), (0,))]
    return ex


# --------------------------------------------------------------- definitions

def define_math_ops() -> None:
    """Registers the elementwise, comparison, reduction and selection ops."""
    # Add: AddV2's older twin, which also joins strings (what "+" of string tensors runs)
    define("Add", ["x: T", "y: T"], ["z: T"],
           ["T: {bfloat16, half, float, double, uint8, int8, int16, int32, int64, complex64, "
            "complex128, string}"],
           _binary("Add"), examples=_ex_binary())
    for name in ("Less", "LessEqual", "Greater", "GreaterEqual"):
        define(name, ["x: T", "y: T"], ["z: bool"], [f"T: {REAL}"], _binary(name),
               examples=_ex_binary())
    for name in ("Equal", "NotEqual"):
        define(name, ["x: T", "y: T"], ["z: bool"],
               ["T: type", "incompatible_shape_error: bool = true"], _equality(name),
               examples=_ex_equality, is_commutative=True)
    for name in ("LogicalAnd", "LogicalOr"):
        define(name, ["x: bool", "y: bool"], ["z: bool"], [], _binary(name),
               examples=_ex_logical_binary, is_commutative=True)
    define("LogicalNot", ["x: bool"], ["y: bool"], [], same_shape, examples=_ex_logical_not)
    define("Select", ["condition: bool", "t: T", "e: T"], ["output: T"], ["T: type"], _select,
           examples=_ex_select)
    define("SelectV2", ["condition: bool", "t: T", "e: T"], ["output: T"], ["T: type"],
           _select_v2, examples=_ex_select_v2)
    define("Pow", ["x: T", "y: T"], ["z: T"],
           ["T: " + with_complex("{bfloat16, float, half, double, int8, int16, int32, int64}")],
           _binary("Pow"),
           examples=_ex_binary(int_exp=True))
    # Div: RealDiv for floats and complex numbers, truncating for integers
    define("Div", ["x: T", "y: T"], ["z: T"],
           ["T: " + with_complex("{bfloat16, half, float, double, uint8, int8, uint16, int16, "
                                 "int32, uint32, uint64, int64}")],
           _binary("Div"), examples=_ex_binary(nonzero_y=True))
    define("FloorDiv", ["x: T", "y: T"], ["z: T"],
           ["T: {bfloat16, half, float, double, uint8, int8, uint16, int16, int32, uint32, "
            "uint64, int64}"], _binary("FloorDiv"), examples=_ex_binary(nonzero_y=True))
    define("FloorMod", ["x: T", "y: T"], ["z: T"],
           ["T: {int8, int16, int32, int64, uint8, uint16, uint32, uint64, bfloat16, half, "
            "float, double}"], _binary("FloorMod"), examples=_ex_binary(nonzero_y=True))
    define("Square", ["x: T"], ["y: T"],
           ["T: " + with_complex("{bfloat16, half, float, double, int8, int16, int32, int64, "
                                 "uint8, uint32, uint64}")], same_shape, examples=_ex_unary())
    define("Sign", ["x: T"], ["y: T"],
           ["T: " + with_complex("{bfloat16, half, float, double, int8, int16, int32, int64}")],
           same_shape,
           examples=_ex_unary())
    define("Rsqrt", ["x: T"], ["y: T"], [f"T: {with_complex(FLOAT)}"], same_shape,
           examples=_ex_unary(positive=True))
    for name in ("Erf", "Floor"):
        define(name, ["x: T"], ["y: T"], [f"T: {FLOAT}"], same_shape, examples=_ex_unary())
    for name, (low, high) in UNARY_FLOAT_OPS.items():
        types = with_complex(FLOAT) if name in _COMPLEX_UNARY else FLOAT
        define(name, ["x: T"], ["y: T"], [f"T: {types}"], same_shape,
               examples=_ex_unary(low=low, high=high))
    define("Reciprocal", ["x: T"], ["y: T"],
           ["T: " + with_complex("{bfloat16, half, float, double, int8, int16, int32, int64}")],
           same_shape,
           examples=_ex_unary(positive=True, low=0.2))
    define("Round", ["x: T"], ["y: T"],
           ["T: {bfloat16, half, float, double, int8, int16, int32, int64}"], same_shape,
           examples=_ex_round)
    define("ZerosLike", ["x: T"], ["y: T"], ["T: type"], same_shape, examples=_ex_unary())
    define("OnesLike", ["x: T"], ["y: T"],
           ["T: " + with_complex("{bfloat16, half, float, double, int8, uint8, int16, int32, "
                                 "uint32, int64, uint64, bool}")], same_shape,
           examples=_ex_unary())
    define("Prod", ["input: T", "reduction_indices: Tidx"], ["output: T"],
           ["keep_dims: bool = false", f"T: {with_complex(NUMBER)}",
            f"Tidx: {_IDX} = DT_INT32"], _reduce("Prod"), host=["reduction_indices"], examples=_ex_reduce)
    define("ArgMax", ["input: T", "dimension: Tidx"], ["output: output_type"],
           [f"T: {REAL[:-1]}, bool}}", "Tidx: {int16, int32, int64} = DT_INT32",
            "output_type: {int16, int32, int64} = DT_INT64"], _arg_reduce("ArgMax"),
           host=["dimension"], examples=_ex_arg)
    define("ArgMin", ["input: T", "dimension: Tidx"], ["output: output_type"],
           [f"T: {REAL[:-1]}, bool}}", f"Tidx: {_IDX} = DT_INT32",
            f"output_type: {_IDX} = DT_INT64"], _arg_reduce("ArgMin"),
           host=["dimension"], examples=_ex_arg)
    define("Cumsum", ["x: T", "axis: Tidx"], ["out: T"],
           ["exclusive: bool = false", "reverse: bool = false", f"T: {with_complex(NUMBER)}",
            f"Tidx: {_IDX} = DT_INT32"], _cumsum, host=["axis"], examples=_ex_cumsum)
    define("Cumprod", ["x: T", "axis: Tidx"], ["out: T"],
           ["exclusive: bool = false", "reverse: bool = false", f"T: {with_complex(NUMBER)}",
            f"Tidx: {_IDX} = DT_INT32"], _cumsum, host=["axis"], examples=_ex_cumsum)
    for name in ("BitwiseAnd", "BitwiseOr", "BitwiseXor"):
        define(name, ["x: T", "y: T"], ["z: T"], [f"T: {BITS}"], _binary(name),
               examples=_ex_binary(), is_commutative=True)
    define("Invert", ["x: T"], ["y: T"], [f"T: {BITS}"], same_shape, examples=_ex_unary())
    define("Bitcast", ["input: T"], ["output: type"],
           [f"T: {BITCAST}", f"type: {BITCAST}"], _bitcast, examples=_ex_bitcast)
    for name in ("LeftShift", "RightShift"):
        define(name, ["x: T", "y: T"], ["z: T"], [f"T: {BITS}"], _binary(name),
               examples=_ex_shift)
    define("TopKV2", ["input: T", "k: Tk"], ["values: T", "indices: index_type"],
           ["sorted: bool = true", f"T: {REAL}", "Tk: {int16, int32, int64} = DT_INT32",
            "index_type: {int16, int32, int64} = DT_INT32"], _top_k, host=["k"],
           examples=_ex_top_k)
    define("LinSpace", ["start: T", "stop: T", "num: Tidx"], ["output: T"],
           [f"T: {FLOAT}", f"Tidx: {_IDX} = DT_INT32"], _lin_space, host=["num"],
           examples=_ex_lin_space)
    define("AddN", ["inputs: N * T"], ["sum: T"], ["N: int >= 1", f"T: {with_complex(NUMBER)}"],
           _add_n,
           examples=_ex_add_n, is_commutative=True)
    define("UnsortedSegmentSum", ["data: T", "segment_ids: Tindices",
                                  "num_segments: Tnumsegments"], ["output: T"],
           [f"T: {with_complex(NUMBER)}", "Tindices: {int16, int32, int64}",
            f"Tnumsegments: {_IDX} = DT_INT32"], _segment_sum, host=["num_segments"],
           examples=_ex_segment_sum)
    define("BatchMatMulV2", ["x: T", "y: T"], ["output: T"],
           ["T: " + with_complex("{bfloat16, half, float, double, int16, int32, int64, uint8, uint32, "
                         "uint64}"),
            "adj_x: bool = false", "adj_y: bool = false", "grad_x: bool = false",
            "grad_y: bool = false"], _batch_matmul, examples=_ex_batch_matmul)
    define_complex_ops()
    for name in ("SigmoidGrad", "TanhGrad"):
        define(name, ["y: T", "dy: T"], ["z: T"], [f"T: {with_complex(FLOAT)}"],
               same_shape_pair(name, ("y", "dy")), examples=_ex_grad())
    for name in ("RsqrtGrad", "SqrtGrad"):
        define(name, ["y: T", "dy: T"], ["z: T"], [f"T: {with_complex(FLOAT)}"],
               same_shape_pair(name, ("y", "dy")), examples=_ex_grad(positive=True))


def _complex_parts(op):
    """Shape function of Real, Imag, Angle and ComplexAbs: the input's shape;
    Tout must be the real type of T (TensorFlow has kernels for no other)."""
    def fn(shapes, attrs, values):
        if attrs["T"].real_dtype != attrs["Tout"]:
            raise err(op, f"Tout must be {attrs['T'].real_dtype.name} for T={attrs['T'].name}, "
                      f"got {attrs['Tout'].name}; pg.math.real/imag/angle/abs pick it")
        return [tuple(shapes[0])]
    return fn


def _complex(shapes, attrs, values):
    op = "Complex"
    if attrs["Tout"].real_dtype != attrs["T"]:
        raise err(op, f"Tout must be {'complex64' if attrs['T'] == dtypes.float32 else 'complex128'}"
                  f" for T={attrs['T'].name}, got {attrs['Tout'].name}; pg.complex picks it")
    return [broadcast_shapes(op, tuple(shapes[0]), tuple(shapes[1]))]


def _ex_complex_parts(rng, types):
    return [({"input": sample(rng, types["T"], s)}, {"Tout": types["T"].real_dtype})
            for s in ((2, 3, 4), (), (0, 3))]


def _ex_complex(rng, types):
    T = types["T"]
    out = dtypes.complex64 if T == dtypes.float32 else dtypes.complex128
    return [({"real": sample(rng, T, a), "imag": sample(rng, T, b)}, {"Tout": out})
            for a, b in _PAIRS]


def define_complex_ops() -> None:
    """TensorFlow's ops over the parts of complex numbers."""
    for name in ("Real", "Imag", "Angle", "ComplexAbs"):
        define(name, ["input: T" if name != "ComplexAbs" else "x: T"],
               ["output: Tout" if name != "ComplexAbs" else "y: Tout"],
               ["T: {complex64, complex128} = DT_COMPLEX64", "Tout: {float, double} = DT_FLOAT"],
               _complex_parts(name),
               examples=_ex_complex_parts if name != "ComplexAbs" else _ex_complex_abs)
    define("Conj", ["input: T"], ["output: T"], ["T: {complex64, complex128} = DT_COMPLEX64"],
           same_shape, examples=lambda rng, types: [
               ({"input": sample(rng, types["T"], s)}, {}) for s in ((2, 3, 4), (), (0, 3))])
    define("Complex", ["real: T", "imag: T"], ["out: Tout"],
           ["T: {float, double} = DT_FLOAT", "Tout: {complex64, complex128} = DT_COMPLEX64"],
           _complex, examples=_ex_complex)


def _ex_complex_abs(rng, types):
    return [({"x": v["input"]}, a) for v, a in _ex_complex_parts(rng, types)]
