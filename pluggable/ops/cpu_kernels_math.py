"""CPU kernels (numpy) of the elementwise, comparison, reduction, scan and
selection ops. float16 and bfloat16 are computed in float32 and rounded
once at the end, unless TensorFlow's result depends on rounding each step
(FloorDiv), where the op is computed in the dtype itself."""
from __future__ import annotations

import math

import numpy as np

from .cpu_kernels import _int_div, _wide
from .definitions import normalize_axes
from .math_op_defs import select_shape
from .op_util import axis, err, scalar

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_erf = np.frompyfunc(math.erf, 1, 1)
_erfc = np.frompyfunc(math.erfc, 1, 1)


def erf(x: np.ndarray) -> np.ndarray:
    """erf in float64 (math.erf elementwise)."""
    x = np.asarray(x, np.float64)
    return np.asarray(_erf(x), np.float64).reshape(x.shape)


def _compute(x: np.ndarray) -> np.ndarray:
    """The type to compute in: float64 for doubles, float32 for the other
    floats, the type itself otherwise."""
    return _wide(x)


# ------------------------------------------------------------- elementwise

def _compare(fn):
    def kernel(ins, attrs):
        x, y = ins
        return [fn(_compute(x), _compute(y))]
    return kernel


def _equality(fn, mismatch: bool):
    def kernel(ins, attrs):
        x, y = ins
        try:
            shape = np.broadcast_shapes(x.shape, y.shape)
        except ValueError:
            if attrs["incompatible_shape_error"]:
                raise err("Equal" if fn is np.equal else "NotEqual",
                          f"incompatible shapes: {list(x.shape)} vs. {list(y.shape)}") from None
            return [np.array(mismatch)]
        del shape
        return [fn(_compute(x), _compute(y))]
    return kernel


def _logical(fn):
    def kernel(ins, attrs):
        return [fn(*ins)]
    return kernel


def _select(ins, attrs):
    c, t, e = ins
    select_shape("Select", c.shape, t.shape, e.shape)
    if c.ndim == 1 and t.ndim > 1:
        c = c.reshape(c.shape + (1,) * (t.ndim - 1))
    return [np.where(c, t, e)]


def _select_v2(ins, attrs):
    c, t, e = ins
    return [np.where(c, t, e)]


def _pow(ins, attrs):
    x, y = ins
    if x.dtype.kind in "iu":
        if y.dtype.kind == "i" and (y < 0).any():
            raise err("Pow", "integers to negative integer powers are not allowed")
        with np.errstate(all="ignore"):
            return [np.power(x, y)]
    with np.errstate(all="ignore"):
        return [np.power(_compute(x), _compute(y))]


def _int_divisor(op: str, y: np.ndarray) -> None:
    if (y == 0).any():
        raise err(op, "integer division by zero")


def _div(ins, attrs):
    """Div: x / y; integers truncate toward zero, and dividing one by zero is
    an error, as in TensorFlow."""
    x, y = ins
    if x.dtype.kind in "iu":
        _int_divisor("Div", y)
        return [_int_div(x, y)]
    with np.errstate(all="ignore"):
        return [np.divide(_compute(x), _compute(y))]


def _floor_div(ins, attrs):
    x, y = ins
    if x.dtype.kind in "iu":
        _int_divisor("FloorDiv", y)
        with np.errstate(all="ignore"):
            return [np.floor_divide(x, y)]
    with np.errstate(all="ignore"):  # floor(x / y) with the quotient rounded to T
        q = (_compute(x) / _compute(y)).astype(x.dtype)
        return [np.floor(_compute(q))]


def _floor_mod(ins, attrs):
    x, y = ins
    if x.dtype.kind in "iu":
        _int_divisor("FloorMod", y)
        with np.errstate(all="ignore"):
            return [np.mod(x, y)]
    xw, yw = _compute(x), _compute(y)
    with np.errstate(all="ignore"):
        r = np.fmod(xw, yw)
        fix = (r != 0) & ((yw < 0) != (r < 0))
        return [np.where(fix, r + yw, r)]


def _unary(fn):
    def kernel(ins, attrs):
        with np.errstate(all="ignore"):
            return [fn(_compute(ins[0]))]
    return kernel


def _square(ins, attrs):
    (x,) = ins
    with np.errstate(all="ignore"):
        return [np.multiply(x, x) if x.dtype.kind in "iu" else np.square(_compute(x))]


def _sign(ins, attrs):
    (x,) = ins
    if x.dtype.kind == "c":   # x / |x|, and 0 at 0, as TensorFlow's
        mag = np.abs(x)
        with np.errstate(all="ignore"):
            return [np.where(mag == 0, 0, x / np.where(mag == 0, 1, mag)).astype(x.dtype)]
    return [np.sign(_compute(x))]


def _rsqrt(x):
    return 1.0 / np.sqrt(x)


def _erf_kernel(ins, attrs):
    (x,) = ins
    return [erf(x.astype(np.float64))]


def _erfc_kernel(ins, attrs):
    x = np.asarray(ins[0], np.float64)
    return [np.asarray(_erfc(x), np.float64).reshape(x.shape)]


def _round(ins, attrs):
    (x,) = ins  # half to even, as TensorFlow's Round; integers are unchanged
    return [x.copy() if x.dtype.kind in "iu" else np.round(_compute(x))]


# The unary float ops that are one numpy function each (computed in float32
# for the 16-bit floats, float64 for doubles).
_UNARY_FLOAT = {
    "Sin": np.sin, "Cos": np.cos, "Tan": np.tan, "Asin": np.arcsin, "Acos": np.arccos,
    "Atan": np.arctan, "Sinh": np.sinh, "Cosh": np.cosh, "Asinh": np.arcsinh,
    "Acosh": np.arccosh, "Atanh": np.arctanh, "Expm1": np.expm1, "Log1p": np.log1p,
    "Ceil": np.ceil, "Reciprocal": np.reciprocal,
}


def gelu(x: np.ndarray, approximate: bool) -> np.ndarray:
    """GELU in float64: x * Phi(x), or its tanh approximation."""
    x = np.asarray(x, np.float64)
    if approximate:
        return 0.5 * x * (1.0 + np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def gelu_grad(x: np.ndarray, approximate: bool) -> np.ndarray:
    """d gelu(x) / dx in float64."""
    x = np.asarray(x, np.float64)
    if approximate:
        t = np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x ** 3))
        return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * _SQRT_2_OVER_PI * \
            (1.0 + 3.0 * 0.044715 * x * x)
    return 0.5 * (1.0 + erf(x / math.sqrt(2.0))) + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


def _gelu(ins, attrs):
    return [gelu(ins[0], attrs["approximate"])]


def _zeros_like(ins, attrs):
    return [np.zeros_like(ins[0])]


def _ones_like(ins, attrs):
    return [np.ones_like(ins[0])]


def _activation_grad(fn):
    """A gradient kernel fn(y, dy) computed in float64 (complex128 for
    complex inputs; as in TensorFlow, the gradient functions of Tanh and
    Sigmoid pass conj(y))."""
    def kernel(ins, attrs):
        y, dy = ins
        wide = np.complex128 if y.dtype.kind == "c" else np.float64
        y, dy = y.astype(wide), dy.astype(wide)
        with np.errstate(all="ignore"):
            return [fn(y, dy)]
    return kernel


# ------------------------------------------------------------ complex parts

def _complex_part(fn):
    def kernel(ins, attrs):
        return [np.array(fn(ins[0]), dtype=attrs["Tout"].as_numpy_dtype)]
    return kernel


def _conj(ins, attrs):
    return [np.conj(ins[0])]


def _complex(ins, attrs):
    re, im = ins
    out = attrs["Tout"].as_numpy_dtype
    shape = np.broadcast_shapes(re.shape, im.shape)
    z = np.empty(shape, out)
    z.real, z.imag = re, im
    return [z]


# ------------------------------------------------------------ reductions, ...

def _prod(ins, attrs):
    x, idx = ins
    axes = normalize_axes("Prod", idx, x.ndim)
    w = _compute(x)
    with np.errstate(all="ignore"):
        return [np.prod(w, axis=axes, keepdims=attrs["keep_dims"], dtype=w.dtype)]


def _arg_reduce(op, fn):
    def kernel(ins, attrs):
        x, dim = ins
        if x.ndim == 0:
            raise err(op, "input must have rank >= 1, got a scalar")
        ax = axis(op, scalar(op, "dimension", dim), x.ndim, "dimension")
        if x.shape[ax] == 0:
            raise err(op, f"reduction dimension {ax} is empty in shape {list(x.shape)}")
        w = _compute(x)
        if w.dtype.kind == "f":  # NaN never wins, as in TensorFlow (numpy picks it)
            w = np.where(np.isnan(w), -np.inf if fn is np.argmax else np.inf, w)
        return [fn(w, axis=ax)]
    return kernel


def _cumulative(op: str, fn, identity):
    """Cumsum / Cumprod: `fn` (np.cumsum, np.cumprod) along the axis, with
    TensorFlow's exclusive (starting at `identity`) and reverse forms."""
    def kernel(ins, attrs):
        x, ax = ins
        if x.ndim == 0:
            raise err(op, "x must have rank >= 1, got a scalar")
        a = axis(op, scalar(op, "axis", ax), x.ndim)
        w = _compute(x)
        if attrs["reverse"]:
            w = np.flip(w, a)
        with np.errstate(all="ignore"):
            c = fn(w, axis=a, dtype=w.dtype)
        if attrs["exclusive"] and c.shape[a]:
            first = np.full_like(np.take(c, [0], axis=a), identity)
            c = np.concatenate([first, np.take(c, np.arange(c.shape[a] - 1), axis=a)], axis=a)
        if attrs["reverse"]:
            c = np.flip(c, a)
        return [c]
    return kernel


_cumsum = _cumulative("Cumsum", np.cumsum, 0)
_cumprod = _cumulative("Cumprod", np.cumprod, 1)


def _shift(fn):
    """LeftShift / RightShift: shifts outside [0, width) clamp into it, as
    TensorFlow's kernels do."""
    def kernel(ins, attrs):
        x, y = ins
        bits = 8 * x.dtype.itemsize
        with np.errstate(all="ignore"):
            return [fn(x, np.clip(y, 0, bits - 1).astype(x.dtype))]
    return kernel


def _bitcast(ins, attrs):
    """The bytes of the input read as `type` (a wider element takes the
    input's last dimension, a narrower one adds it)."""
    (x,) = ins
    to = np.dtype(attrs["type"].as_numpy_dtype)
    a, b = x.dtype.itemsize, to.itemsize
    y = np.ascontiguousarray(x).view(to)
    if a == b:
        return [y.reshape(x.shape)]
    if a > b:
        return [y.reshape(x.shape + (a // b,))]
    return [y.reshape(x.shape[:-1])]


def _bitwise(fn):
    return lambda ins, attrs: [fn(*ins)]


def top_k_indices(x: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest entries along the last axis, largest first,
    equal values in index order (TensorFlow's order)."""
    n = x.shape[-1]
    if n == 0 or k == 0:
        return np.zeros(x.shape[:-1] + (k,), np.int64)
    w = _compute(x)
    if w.dtype.kind == "f":
        w = np.where(np.isnan(w), np.inf, w)  # NaN sorts as the largest value
    rev = np.argsort(w[..., ::-1], axis=-1, kind="stable")[..., ::-1]
    return (n - 1 - rev)[..., :k]


def _top_k(ins, attrs):
    x, k = ins
    k = scalar("TopKV2", "k", k)
    idx = top_k_indices(x, k)
    return [np.take_along_axis(x, idx, axis=-1), idx]


def _lin_space(ins, attrs):
    """start + i * (stop - start) / (num - 1), the last value exactly stop
    (TensorFlow's order of operations, in the dtype's compute type)."""
    start, stop, num = ins
    n = scalar("LinSpace", "num", num)
    if n <= 0:
        raise err("LinSpace", f"Requires num > 0: {n}")
    a, b = _compute(start), _compute(stop)
    if n == 1:
        return [np.asarray([a])]
    step = (b - a) / a.dtype.type(n - 1)
    out = a + np.arange(n, dtype=a.dtype) * step
    out[-1] = b
    return [out]


def _add_n(ins, attrs):
    acc = _compute(ins[0]).copy()
    with np.errstate(all="ignore"):
        for x in ins[1:]:
            acc += _compute(x)
    return [acc]


def _segment_sum(ins, attrs):
    data, ids, num = ins
    op = "UnsortedSegmentSum"
    n = scalar(op, "num_segments", num)
    flat_ids = ids.reshape(-1).astype(np.int64)
    bad = np.flatnonzero(flat_ids >= n)
    if bad.size:
        i = [int(k) for k in np.unravel_index(int(bad[0]), ids.shape)]
        raise err(op, f"segment_ids{i} = {int(flat_ids[bad[0]])} is out of range [0, {n})")
    inner = data.shape[ids.ndim:]
    w = _compute(data).reshape((flat_ids.size,) + inner)
    out = np.zeros((n,) + inner, w.dtype)
    keep = flat_ids >= 0  # negative ids are dropped, as in TensorFlow
    with np.errstate(all="ignore"):
        np.add.at(out, flat_ids[keep], w[keep])
    return [out]


def _batch_matmul(ins, attrs):
    x, y = ins
    if attrs["adj_x"]:   # the adjoint: transposed and, for complex, conjugated
        x = np.conj(np.swapaxes(x, -1, -2))
    if attrs["adj_y"]:
        y = np.conj(np.swapaxes(y, -1, -2))
    with np.errstate(all="ignore"):
        return [np.matmul(_compute(x), _compute(y))]


KERNELS = {
    "Less": _compare(np.less), "LessEqual": _compare(np.less_equal),
    "Greater": _compare(np.greater), "GreaterEqual": _compare(np.greater_equal),
    "Equal": _equality(np.equal, False), "NotEqual": _equality(np.not_equal, True),
    "LogicalAnd": _logical(np.logical_and), "LogicalOr": _logical(np.logical_or),
    "LogicalNot": _logical(np.logical_not), "Select": _select, "SelectV2": _select_v2,
    "Pow": _pow, "Div": _div, "FloorDiv": _floor_div, "FloorMod": _floor_mod, "Square": _square,
    "Sign": _sign, "Rsqrt": _unary(_rsqrt), "Erf": _erf_kernel, "Floor": _unary(np.floor),
    "Gelu": _gelu, "ZerosLike": _zeros_like, "OnesLike": _ones_like, "Prod": _prod,
    "ArgMax": _arg_reduce("ArgMax", np.argmax), "ArgMin": _arg_reduce("ArgMin", np.argmin),
    "Cumsum": _cumsum, "Cumprod": _cumprod, "BitwiseAnd": _bitwise(np.bitwise_and),
    "BitwiseOr": _bitwise(np.bitwise_or), "BitwiseXor": _bitwise(np.bitwise_xor),
    "Invert": _bitwise(np.invert), "Bitcast": _bitcast, "LeftShift": _shift(np.left_shift),
    "RightShift": _shift(np.right_shift), "TopKV2": _top_k, "AddN": _add_n,
    "UnsortedSegmentSum": _segment_sum,
    "BatchMatMulV2": _batch_matmul, "Erfc": _erfc_kernel, "Round": _round,
    "LinSpace": _lin_space,
    **{name: _unary(fn) for name, fn in _UNARY_FLOAT.items()},
    "SigmoidGrad": _activation_grad(lambda y, dy: dy * y * (1.0 - y)),
    "TanhGrad": _activation_grad(lambda y, dy: dy * (1.0 - y * y)),
    # (these two conjugate a complex y themselves, as TensorFlow's kernels do)
    "RsqrtGrad": _activation_grad(lambda y, dy: -0.5 * dy * np.conj(y * y * y)),
    "SqrtGrad": _activation_grad(lambda y, dy: 0.5 * dy / np.conj(y)),
    "Real": _complex_part(np.real), "Imag": _complex_part(np.imag),
    "Angle": _complex_part(np.angle), "ComplexAbs": _complex_part(np.abs),
    "Conj": _conj, "Complex": _complex,
}
