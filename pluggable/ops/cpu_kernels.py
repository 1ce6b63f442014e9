"""The built-in CPU device: every built-in op on numpy.

These kernels are the fallback for ops a plugin device cannot run and the
numerical reference the tests compare plugin results with. float16 and
bfloat16 are computed in float32 and rounded once at the end.
"""
from __future__ import annotations

import numpy as np

from ..framework.errors import InvalidArgumentError
from ..framework.registry import KernelDef, OPS, register_kernel
from . import definitions as builtin_ops


def _wide(x: np.ndarray) -> np.ndarray:
    """float16/bfloat16 -> float32 for computing; other types unchanged."""
    if x.dtype.kind == "V" or x.dtype.itemsize == 2 and x.dtype.kind == "f" \
            or str(x.dtype) == "bfloat16":
        return x.astype(np.float32)
    return x


def _out(x, dtype) -> np.ndarray:
    return np.asarray(x).astype(dtype, copy=False)


def _int_div(x, y):
    """C-style integer division (toward zero); division by zero gives 0."""
    safe = np.where(y == 0, 1, y)
    q = np.abs(x) // np.abs(safe) * np.sign(x) * np.sign(safe)
    return np.where(y == 0, 0, q).astype(x.dtype)


def _binary(fn):
    def kernel(ins, attrs):
        x, y = ins
        if fn is np.divide and x.dtype.kind in "iu":
            return [_int_div(x, y)]
        with np.errstate(all="ignore"):
            return [_out(fn(_wide(x), _wide(y)), x.dtype)]
    return kernel


def _unary(fn):
    def kernel(ins, attrs):
        (x,) = ins
        with np.errstate(all="ignore"):
            return [_out(fn(_wide(x)), x.dtype)]
    return kernel


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _relu(x):
    return np.maximum(x, np.zeros((), x.dtype))


def _softmax(ins, attrs):
    (x,) = ins
    w = _wide(x).astype(np.float64) if x.dtype == np.float64 else _wide(x)
    if w.size == 0:
        return [x.copy()]
    e = np.exp(w - w.max(axis=-1, keepdims=True))
    return [_out(e / e.sum(axis=-1, keepdims=True), x.dtype)]


def _matmul(ins, attrs):
    a, b = ins
    a = a.T if attrs["transpose_a"] else a
    b = b.T if attrs["transpose_b"] else b
    if a.dtype.kind in "iu":
        return [np.matmul(a, b).astype(a.dtype)]
    return [_out(np.matmul(_wide(a), _wide(b)), a.dtype)]


def _empty_fill(x: np.ndarray, op: str):
    if op == "Max":
        return -np.inf if x.dtype.kind == "f" or str(x.dtype) == "bfloat16" else np.iinfo(x.dtype).min
    return np.inf if x.dtype.kind == "f" or str(x.dtype) == "bfloat16" else np.iinfo(x.dtype).max


def _reduce(op):
    def kernel(ins, attrs):
        x, idx = ins
        axes = builtin_ops.normalize_axes(op, idx, x.ndim)
        keep = attrs["keep_dims"]
        w = _wide(x)
        if op == "Sum":
            r = np.sum(w, axis=axes, keepdims=keep)
        elif op == "Mean":
            if x.dtype.kind in "iu":
                n = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
                s = np.sum(x, axis=axes, keepdims=keep, dtype=np.int64)
                r = s // n if n else np.zeros_like(s)
                r = np.where(s < 0, -((-s) // max(n, 1)), r) if n else r
            elif x.dtype.kind == "c" and any(x.shape[a] == 0 for a in axes):
                # TensorFlow's complex mean of nothing is 0 (a float one is NaN)
                r = np.sum(w, axis=axes, keepdims=keep)
            else:
                with np.errstate(all="ignore"):
                    r = np.mean(w, axis=axes, keepdims=keep)
        else:
            fn = np.max if op == "Max" else np.min
            if any(x.shape[a] == 0 for a in axes):
                shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape)) if keep \
                    else tuple(d for i, d in enumerate(x.shape) if i not in axes)
                return [np.full(shape, _empty_fill(x, op), dtype=x.dtype)]
            r = fn(w, axis=axes, keepdims=keep)
        return [_out(r, x.dtype)]
    return kernel


_ML_FLOATS = frozenset({"bfloat16", "float8_e5m2", "float8_e4m3fn", "float8_e4m3fnuz",
                        "float8_e5m2fnuz", "float4_e2m1fn"})


def cast_array(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Cast with TensorFlow-like float->int rules: truncate toward zero, clamp
    to the integer range, NaN -> 0; anything -> bool is `!= 0`. To and from
    the narrow types (float8, int4, ...) ml_dtypes converts: rounding to
    nearest even, overflow to infinity or NaN (the largest value for
    float4_e2m1fn); float to int4/uint4/int2/uint2 truncates, and NaN or a
    value outside the range gives 0. Complex to a real type takes the real
    part; a real type to complex gives a zero imaginary part."""
    if x.dtype.kind == "c" and dtype.kind != "c":   # complex to a real type: the real part
        x = np.array(x.real)
    elif dtype.kind == "c" and x.dtype.kind == "V":  # ml_dtypes to complex, through float32
        x = x.astype(np.float32)
    if dtype == np.bool_:
        return x != 0
    if dtype.kind in "iu" and (x.dtype.kind == "f" or str(x.dtype) in _ML_FLOATS):
        info = np.iinfo(dtype)
        w = np.trunc(x.astype(np.float64))
        w = np.nan_to_num(w, nan=0.0, posinf=info.max, neginf=info.min)
        return np.clip(w, info.min, info.max).astype(dtype)
    if dtype.kind == "V" or x.dtype.kind == "V":   # ml_dtypes: NaN to an integer gives 0
        with np.errstate(invalid="ignore"):
            return x.astype(dtype)
    return x.astype(dtype)


def _cast(ins, attrs):
    return [cast_array(ins[0], attrs["DstT"].as_numpy_dtype)]


def _transpose(ins, attrs):
    x, perm = ins
    return [np.asarray(np.transpose(x, [int(p) for p in perm.reshape(-1)]), order="C")]


def _reshape(ins, attrs):
    x, shape = ins
    return [x.reshape(builtin_ops.reshape_target(x.shape, shape))]


def _fill(ins, attrs):
    dims, value = ins
    return [np.full([int(d) for d in dims.reshape(-1)], value, dtype=value.dtype)]


def _identity(ins, attrs):
    return [ins[0]]


def conv2d_reference(x: np.ndarray, f: np.ndarray, attrs: dict) -> np.ndarray:
    """Direct NHWC x HWIO convolution, computed in float64."""
    (n, oh, ow, co), (pt, pl) = builtin_ops.conv2d_geometry(x.shape, f.shape, attrs)
    sh, sw = attrs["strides"][1], attrs["strides"][2]
    dh, dw = attrs["dilations"][1], attrs["dilations"][2]
    kh, kw = f.shape[0], f.shape[1]
    xw = x.astype(np.float64)
    fw = f.astype(np.float64)
    out = np.zeros((n, oh, ow, co), np.float64)
    for i in range(kh):
        for j in range(kw):
            rows = np.arange(oh) * sh + i * dh - pt
            cols = np.arange(ow) * sw + j * dw - pl
            rv = (rows >= 0) & (rows < x.shape[1])
            cv = (cols >= 0) & (cols < x.shape[2])
            if not rv.any() or not cv.any():
                continue
            patch = xw[:, rows[rv]][:, :, cols[cv]]
            contrib = np.tensordot(patch, fw[i, j], axes=([3], [0]))
            out[:, np.flatnonzero(rv)[:, None], np.flatnonzero(cv)[None, :]] += contrib
    return out


def _conv2d(ins, attrs):
    x, f = ins
    return [_out(conv2d_reference(x, f, attrs), x.dtype)]


def _check_numerics(ins, attrs):
    (x,) = ins
    w = _wide(x)
    if np.isnan(w).any():
        raise InvalidArgumentError(f"CheckNumerics on CPU:0: {attrs['message']} : Tensor had NaN values",
                                   op="CheckNumerics")
    if np.isinf(w).any():
        raise InvalidArgumentError(f"CheckNumerics on CPU:0: {attrs['message']} : Tensor had Inf values",
                                   op="CheckNumerics")
    return [x]


_KERNELS = {
    "AddV2": _binary(np.add), "Add": _binary(np.add), "Sub": _binary(np.subtract), "Mul": _binary(np.multiply),
    "RealDiv": _binary(np.divide), "Maximum": _binary(np.maximum),
    "Minimum": _binary(np.minimum), "Neg": _unary(np.negative), "Abs": _unary(np.abs),
    "Exp": _unary(np.exp), "Log": _unary(np.log), "Sqrt": _unary(np.sqrt),
    "Tanh": _unary(np.tanh), "Sigmoid": _unary(_sigmoid), "Relu": _unary(_relu),
    "Softmax": _softmax, "MatMul": _matmul, "Sum": _reduce("Sum"),
    "Mean": _reduce("Mean"), "Max": _reduce("Max"), "Min": _reduce("Min"),
    "Cast": _cast, "Transpose": _transpose, "Reshape": _reshape, "Fill": _fill,
    "Identity": _identity, "Conv2D": _conv2d, "CheckNumerics": _check_numerics,
}


def register_cpu_kernels(*more: dict) -> None:
    """Registers the CPU kernels above and those of the `more` tables
    ({op name: kernel function})."""
    for name, fn in [kv for table in (_KERNELS, *more) for kv in table.items()]:
        op = OPS[name]
        host = frozenset(a.name for a in op.inputs)  # CPU kernels read host memory
        register_kernel(KernelDef(name, "CPU", {}, host, fn=fn))
