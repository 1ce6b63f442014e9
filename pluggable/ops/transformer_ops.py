"""Fused transformer ops, pluggable's own (TensorFlow has no raw op of these
names): ``ScaledDotProductAttention`` with ``ScaledDotProductAttentionGrad``,
``LayerNorm`` with ``LayerNormGrad`` and ``BiasGelu`` with ``BiasGeluGrad``;
their definitions, CPU kernels (numpy, computing in float64) and the user
functions behind ``pg.nn.scaled_dot_product_attention``, ``pg.nn.layer_norm``
and ``pg.nn.bias_gelu``.

A user function calls the fused op where the device the call would run on
has a kernel for it (CPU always has one); elsewhere (a plugin without the
kernel, such as MY_DEVICE) it composes the same result from ops that device
runs (matmul, select, softmax, moments), so the work stays on the device.

Attention layout: query ``[batch, heads, q_len, head_dim]``, key and value
``[batch, heads, k_len, head_dim]``. ``causal`` lets query ``i`` see keys
``j <= i`` (aligned at the top-left, as PyTorch's ``is_causal``). ``mask``
is a bool tensor of shape ``[q_len, k_len]`` or ``[batch or 1, heads or 1,
q_len, k_len]``, True where a query may attend to a key. A query row that
may attend to no key gives zeros (and zero gradients). The second output,
``logsumexp`` (float32, or float64 for double inputs, ``[batch, heads,
q_len]``), is ``log(sum(exp(scores)))`` over the allowed keys, +inf for a row
with none; the gradient op recomputes the probabilities from it.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..framework import dtypes, errors
from ..framework.registry import OPS, KernelDef, find_kernel, register_kernel
from ..framework.tensor import Tensor
from ..runtime import hooks, placement
from ..runtime.device import Device
from ..runtime.tensors import convert_to_tensor
from . import math_ops, nn_ops, raw_ops
from .cpu_kernels_math import gelu as _gelu64, gelu_grad as _gelu_grad64
from .op_util import define, err, sample

MAX_SEQUENCE = 1 << 20
"""The longest query or key sequence ScaledDotProductAttention accepts."""
MAX_HEAD_DIM = 256
"""The largest head dimension ScaledDotProductAttention accepts."""

_ATTN = "ScaledDotProductAttention"
_ATTN_GRAD = "ScaledDotProductAttentionGrad"
_LN = "LayerNorm"
_LN_GRAD = "LayerNormGrad"
_BG = "BiasGelu"
_BG_GRAD = "BiasGeluGrad"
_FLOATS = "{half, bfloat16, float, double}"


# ------------------------------------------------------------ attention

def check_attention_shapes(op: str, q: tuple, k: tuple, v: tuple, mask: tuple | None) -> None:
    """Raises InvalidArgumentError naming the shapes unless query, key,
    value (and mask) fit together (see the module docstring)."""
    q, k, v = tuple(q), tuple(k), tuple(v)
    if len(q) != 4 or len(k) != 4 or len(v) != 4:
        raise err(op, f"query, key and value must be rank 4 [batch, heads, seq, head_dim], got "
                  f"shapes {list(q)}, {list(k)} and {list(v)}")
    if q[:2] != k[:2] or k[:2] != v[:2]:
        raise err(op, f"query, key and value must have the same batch and heads, got shapes "
                  f"{list(q)}, {list(k)} and {list(v)}")
    if q[3] != k[3] or k[3] != v[3]:
        raise err(op, f"query, key and value must have the same head dimension, got "
                  f"{q[3]}, {k[3]} and {v[3]} (shapes {list(q)}, {list(k)}, {list(v)})")
    if k[2] != v[2]:
        raise err(op, f"key and value must have the same sequence length, got shapes "
                  f"{list(k)} and {list(v)}")
    if q[3] > MAX_HEAD_DIM:
        raise err(op, f"head dimension {q[3]} (query shape {list(q)}) exceeds the "
                  f"{MAX_HEAD_DIM} this op supports; split the heads further")
    if q[2] > MAX_SEQUENCE or k[2] > MAX_SEQUENCE:
        raise err(op, f"sequence too long: query shape {list(q)}, key shape {list(k)}; this "
                  f"op takes at most {MAX_SEQUENCE} positions; split the sequence into chunks")
    if mask is None:
        return
    m = tuple(mask)
    want = f"[{q[2]}, {k[2]}] or [{q[0]} or 1, {q[1]} or 1, {q[2]}, {k[2]}]"
    ok = (len(m) == 2 and m == (q[2], k[2])) or \
        (len(m) == 4 and m[2:] == (q[2], k[2]) and m[0] in (1, q[0]) and m[1] in (1, q[1]))
    if not ok:
        raise err(op, f"mask has shape {list(m)}, expected {want} for query shape {list(q)} "
                  f"and key shape {list(k)}")


def _lse_type(t: dtypes.DType) -> dtypes.DType:
    return dtypes.float64 if t == dtypes.float64 else dtypes.float32


def _attention_shape(shapes, attrs, values):
    if attrs["num_masks"] > 1:
        raise err(_ATTN, f"takes at most one mask, got {attrs['num_masks']}")
    check_attention_shapes(_ATTN, shapes[0], shapes[1], shapes[2],
                           shapes[3] if len(shapes) > 3 else None)
    return [tuple(shapes[0]), tuple(shapes[0][:3])]


def _attention_grad_shape(shapes, attrs, values):
    n = attrs["num_masks"]
    if n > 1:
        raise err(_ATTN_GRAD, f"takes at most one mask, got {n}")
    q, k, v = shapes[0], shapes[1], shapes[2]
    check_attention_shapes(_ATTN_GRAD, q, k, v, shapes[3] if n else None)
    out, lse, dout = shapes[3 + n], shapes[4 + n], shapes[5 + n]
    if tuple(out) != tuple(q) or tuple(dout) != tuple(q) or tuple(lse) != tuple(q[:3]):
        raise err(_ATTN_GRAD, f"output and grad must have the query's shape {list(q)} and "
                  f"logsumexp {list(q[:3])}, got {list(out)}, {list(dout)} and {list(lse)}")
    return [tuple(q), tuple(k), tuple(v)]


def _allowed(q_len: int, k_len: int, mask: np.ndarray | None, causal: bool) -> np.ndarray:
    """[.., q_len, k_len] bool: which keys each query may attend to."""
    ok = np.ones((q_len, k_len), bool)
    if causal:
        ok = np.tril(ok)
    if mask is not None:
        ok = ok & mask.astype(bool)
    return ok if ok.ndim == 4 else ok[None, None]


def _scores(q, k, mask, attrs):
    s = np.einsum("bhqd,bhkd->bhqk", q, k) * attrs["scale"]
    ok = _allowed(q.shape[2], k.shape[2], mask, attrs["causal"])
    return np.where(ok, s, -np.inf), ok


def _attention_cpu(ins, attrs):
    q, k, v = (np.asarray(x, np.float64) for x in ins[:3])
    mask = ins[3] if attrs["num_masks"] else None
    s, ok = _scores(q, k, mask, attrs)
    m = s.max(axis=-1, keepdims=True) if s.shape[-1] else np.full(s.shape[:-1] + (1,), -np.inf)
    seen = np.isfinite(m)
    e = np.where(ok, np.exp(s - np.where(seen, m, 0.0)), 0.0)
    l_ = e.sum(axis=-1, keepdims=True)
    p = e / np.where(l_ > 0, l_, 1.0)
    out = np.einsum("bhqk,bhkd->bhqd", p, v)
    with np.errstate(divide="ignore"):
        lse = np.where(seen, m + np.log(np.where(l_ > 0, l_, 1.0)), np.inf)[..., 0]
    return [out.astype(ins[0].dtype), lse.astype(attrs["Tlse"].as_numpy_dtype)]


def _attention_grad_cpu(ins, attrs):
    n = attrs["num_masks"]
    q, k, v = (np.asarray(x, np.float64) for x in ins[:3])
    mask = ins[3] if n else None
    out, lse, dout = (np.asarray(x, np.float64) for x in ins[3 + n:6 + n])
    s, ok = _scores(q, k, mask, attrs)
    p = np.where(ok, np.exp(s - lse[..., None]), 0.0)
    dv = np.einsum("bhqk,bhqd->bhkd", p, dout)
    dp = np.einsum("bhqd,bhkd->bhqk", dout, v)
    ds = p * (dp - (dout * out).sum(axis=-1, keepdims=True))
    dq = np.einsum("bhqk,bhkd->bhqd", ds, k) * attrs["scale"]
    dk = np.einsum("bhqk,bhqd->bhkd", ds, q) * attrs["scale"]
    t = ins[0].dtype
    return [dq.astype(t), dk.astype(t), dv.astype(t)]


def _ex_attention(rng, types):
    T = types["T"]
    q, k, v = (sample(rng, T, s, -1, 1) for s in ((1, 2, 3, 4), (1, 2, 5, 4), (1, 2, 5, 4)))
    mask = sample(rng, dtypes.bool_, (3, 5))
    return [({"query": q, "key": k, "value": v, "mask": []}, {"scale": 0.5}),
            ({"query": q, "key": k, "value": v, "mask": [mask]},
             {"scale": 0.5, "num_masks": 1, "causal": True})]


def _ex_attention_grad(rng, types):
    T = types["T"]
    q, k, v = (sample(rng, T, s, -1, 1) for s in ((1, 2, 3, 4), (1, 2, 5, 4), (1, 2, 5, 4)))
    attrs = {"scale": 0.5, "causal": False, "num_masks": 0, "Tlse": dtypes.float32}
    out, lse = _attention_cpu([q, k, v], attrs)
    dout = sample(rng, T, (1, 2, 3, 4), -1, 1)
    return [({"query": q, "key": k, "value": v, "mask": [], "output": out, "logsumexp": lse,
              "grad": dout}, {"scale": 0.5})]


# ------------------------------------------------------------ layer norm

def _ln_shape(shapes, attrs, values):
    x, g, b = (tuple(s) for s in shapes[:3])
    if len(x) < 1:
        raise err(_LN, f"x must have rank >= 1 (normalized over its last axis), got {list(x)}")
    if g != (x[-1],) or b != (x[-1],):
        raise err(_LN, f"gamma and beta must be vectors of x's last dimension {x[-1]}, got "
                  f"shapes {list(g)} and {list(b)} for x of shape {list(x)}")
    return [x, x[:-1], x[:-1]]


def _ln_grad_shape(shapes, attrs, values):
    dy, x, g, mean, rstd = (tuple(s) for s in shapes[:5])
    if dy != x or len(x) < 1 or g != (x[-1],) or mean != x[:-1] or rstd != x[:-1]:
        raise err(_LN_GRAD, f"expected dy and x of one shape, gamma [{x[-1] if x else '?'}] and "
                  f"mean, rstd of x's leading shape; got dy {list(dy)}, x {list(x)}, gamma "
                  f"{list(g)}, mean {list(mean)}, rstd {list(rstd)}")
    return [x, g, g]


def _ln_cpu(ins, attrs):
    x = np.asarray(ins[0], np.float64)
    g, b = (np.asarray(a, np.float64) for a in ins[1:3])
    mean = x.mean(axis=-1, keepdims=True) if x.shape[-1] else np.zeros(x.shape[:-1] + (1,))
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True) if x.shape[-1] else mean
    rstd = 1.0 / np.sqrt(var + attrs["epsilon"])
    y = (x - mean) * rstd * g + b
    u = np.float64 if attrs["U"] == dtypes.float64 else np.float32
    return [y.astype(ins[0].dtype), mean[..., 0].astype(u), rstd[..., 0].astype(u)]


def _ln_grad_cpu(ins, attrs):
    dy, x, g, mean, rstd = (np.asarray(a, np.float64) for a in ins[:5])
    xhat = (x - mean[..., None]) * rstd[..., None]
    gy = dy * g
    c = max(x.shape[-1], 1)
    dx = rstd[..., None] * (gy - gy.sum(-1, keepdims=True) / c
                            - xhat * (gy * xhat).sum(-1, keepdims=True) / c)
    lead = tuple(range(x.ndim - 1))
    t = ins[0].dtype
    return [dx.astype(t), (dy * xhat).sum(axis=lead).astype(t), dy.sum(axis=lead).astype(t)]


def _ex_ln(rng, types):
    T = types["T"]
    x, g, b = (sample(rng, T, s) for s in ((3, 6), (6,), (6,)))
    return [({"x": x, "gamma": g, "beta": b}, {"U": dtypes.float32})]


def _ex_ln_grad(rng, types):
    T = types["T"]
    x, g, b, dy = (sample(rng, T, s) for s in ((3, 6), (6,), (6,), (3, 6)))
    _, mean, rstd = _ln_cpu([x, g, b], {"epsilon": 1e-5, "U": dtypes.float32})
    return [({"dy": dy, "x": x, "gamma": g, "mean": mean, "rstd": rstd}, {})]


# ------------------------------------------------------------ bias + gelu

def _bg_shape(shapes, attrs, values):
    x, b = tuple(shapes[0]), tuple(shapes[1])
    if len(x) < 1 or b != (x[-1],):
        raise err(_BG, f"bias must be a vector of x's last dimension, got bias shape "
                  f"{list(b)} for x of shape {list(x)}")
    return [x]


def _bg_grad_shape(shapes, attrs, values):
    dy, x, b = (tuple(s) for s in shapes[:3])
    if dy != x or len(x) < 1 or b != (x[-1],):
        raise err(_BG_GRAD, f"expected dy and x of one shape and bias a vector of their last "
                  f"dimension; got dy {list(dy)}, x {list(x)}, bias {list(b)}")
    return [x, b]


def _bg_cpu(ins, attrs):
    z = np.asarray(ins[0], np.float64) + np.asarray(ins[1], np.float64)
    return [_gelu64(z, attrs["approximate"]).astype(ins[0].dtype)]


def _bg_grad_cpu(ins, attrs):
    dy, x, b = (np.asarray(a, np.float64) for a in ins[:3])
    dx = dy * _gelu_grad64(x + b, attrs["approximate"])
    t = ins[1].dtype
    return [dx.astype(t), dx.sum(axis=tuple(range(x.ndim - 1))).astype(t)]


def _ex_bg(rng, types):
    T = types["T"]
    x, b = sample(rng, T, (3, 5), -3, 3), sample(rng, T, (5,), -1, 1)
    return [({"x": x, "bias": b}, {}), ({"x": x, "bias": b}, {"approximate": True})]


def _ex_bg_grad(rng, types):
    T = types["T"]
    x, b, dy = sample(rng, T, (3, 5), -3, 3), sample(rng, T, (5,), -1, 1), sample(rng, T, (3, 5))
    return [({"dy": dy, "x": x, "bias": b}, {}),
            ({"dy": dy, "x": x, "bias": b}, {"approximate": True})]


def _cpu_kernel(name: str, fn) -> None:
    host = frozenset(a.name for a in OPS[name].inputs)  # CPU kernels read host memory
    register_kernel(KernelDef(name, "CPU", {}, host, fn=fn))


def define_transformer_ops() -> None:
    """Registers the six ops with their CPU kernels."""
    attn_attrs = [f"T: {_FLOATS}", "Tlse: {float, double} = DT_FLOAT",
                  "num_masks: int >= 0 = 0", "causal: bool = false", "scale: float"]
    define(_ATTN, ["query: T", "key: T", "value: T", "mask: num_masks * bool"],
           ["output: T", "logsumexp: Tlse"], attn_attrs, _attention_shape,
           examples=_ex_attention)
    define(_ATTN_GRAD, ["query: T", "key: T", "value: T", "mask: num_masks * bool",
                        "output: T", "logsumexp: Tlse", "grad: T"],
           ["grad_query: T", "grad_key: T", "grad_value: T"], attn_attrs,
           _attention_grad_shape, examples=_ex_attention_grad)
    define(_LN, ["x: T", "gamma: T", "beta: T"], ["y: T", "mean: U", "rstd: U"],
           [f"T: {_FLOATS}", "U: {float, double} = DT_FLOAT", "epsilon: float = 1e-05"],
           _ln_shape, examples=_ex_ln)
    define(_LN_GRAD, ["dy: T", "x: T", "gamma: T", "mean: U", "rstd: U"],
           ["dx: T", "dgamma: T", "dbeta: T"], [f"T: {_FLOATS}", "U: {float, double} = DT_FLOAT"],
           _ln_grad_shape, examples=_ex_ln_grad)
    define(_BG, ["x: T", "bias: T"], ["y: T"], [f"T: {_FLOATS}", "approximate: bool = false"],
           _bg_shape, examples=_ex_bg)
    define(_BG_GRAD, ["dy: T", "x: T", "bias: T"], ["dx: T", "dbias: T"],
           [f"T: {_FLOATS}", "approximate: bool = false"], _bg_grad_shape, examples=_ex_bg_grad)
    _cpu_kernel(_ATTN, _attention_cpu)
    _cpu_kernel(_ATTN_GRAD, _attention_grad_cpu)
    _cpu_kernel(_LN, _ln_cpu)
    _cpu_kernel(_LN_GRAD, _ln_grad_cpu)
    _cpu_kernel(_BG, _bg_cpu)
    _cpu_kernel(_BG_GRAD, _bg_grad_cpu)


# ------------------------------------------------------------ user functions

def fused_kernel_available(op: str, type_attrs: dict, *tensors: Any) -> bool:
    """Whether a call of `op` with `type_attrs` (every type attribute of
    the call) would run on a device that has a kernel for it (the device
    scope, else the first input's device; CPU always has one)."""
    dev = placement.current()
    if dev is None:
        dev = next((getattr(t, "_dev", None) for t in tensors
                    if isinstance(getattr(t, "_dev", None), Device)), None)
    if dev is None or not isinstance(dev, Device):
        return True
    return find_kernel(op, dev.device_type, type_attrs) is not None


LOWEST_SCORE = {"float16": -65504.0, "bfloat16": -3.38e38, "float32": -3.4e38, "float64": -1.7e308}
"""Per float dtype name, the score the composite form gives a masked key
(about the lowest finite value: its softmax weight is 0)."""


# Causal masks on the device of the queries, by (q_len, k_len, device): the
# composite form's mask is made and copied to the device once, not per call.
_CAUSAL: dict = {}
_CAUSAL_SIZE = 16


def _causal_mask(q_len: int, k_len: int, like: Tensor) -> Tensor:
    """The bool [q_len, k_len] lower-triangular mask on `like`'s device
    (made anew while tracing: a graph holds its own constant)."""
    dev = like._dev
    if not hooks.fast[0] or not isinstance(dev, Device):
        return convert_to_tensor(np.tril(np.ones((q_len, k_len), bool)))
    key = (q_len, k_len, dev)
    m = _CAUSAL.get(key)
    if m is None:
        if len(_CAUSAL) >= _CAUSAL_SIZE:
            _CAUSAL.pop(next(iter(_CAUSAL)))
        m = _CAUSAL[key] = dev.copy_in(Tensor._from_array(
            np.tril(np.ones((q_len, k_len), bool)), placement.CPU))
    return m


def _attention_composite(q, k, v, mask, causal: bool, scale: float, dropout: float,
                         seed: int | None) -> Tensor:
    """softmax(q k^T * scale, masked) v from matmul, select and softmax."""
    # Python scalars: on a plugin device, cached device constants (no copy
    # per call, and the calls take the raw_ops fast path)
    s = math_ops.multiply(math_ops.matmul(q, k, transpose_b=True), float(scale))
    lowest = LOWEST_SCORE[q.dtype.name]
    allowed = mask
    if causal:
        tri = _causal_mask(q.shape[2], k.shape[2], q)
        allowed = tri if mask is None else raw_ops.LogicalAnd(x=mask, y=tri)
    if allowed is not None:
        s = raw_ops.SelectV2(condition=allowed, t=s, e=lowest)
    p = raw_ops.Softmax(logits=s)
    if mask is not None:  # a row with no allowed key gives zeros
        p = math_ops.multiply(p, raw_ops.Cast(x=allowed, DstT=q.dtype))
    if dropout > 0:
        p = nn_ops.dropout(p, dropout, seed=seed)
    return math_ops.matmul(p, v)


def scaled_dot_product_attention(query: Any, key: Any, value: Any, mask: Any = None,
                                 causal: bool = False, scale: float | None = None,
                                 dropout: float = 0.0, seed: int | None = None) -> Tensor:
    """softmax(query key^T * scale) value over [batch, heads, seq, head_dim]
    tensors (op ScaledDotProductAttention where the device has its kernel,
    else the same composed of matmul, select and softmax).

    `mask` is a bool tensor, True where a query may attend to a key, of
    shape [q_len, k_len] or [batch or 1, heads or 1, q_len, k_len];
    `causal` lets query i attend to keys j <= i; `scale` defaults to
    1 / sqrt(head_dim); `dropout` drops attention probabilities with that
    rate (composed form only). A query that may attend to no key gives 0."""
    q, k, v = (convert_to_tensor(x) for x in (query, key, value))
    m = None if mask is None else convert_to_tensor(mask)
    for name, t in (("key", k), ("value", v)):
        if t.dtype != q.dtype:
            raise errors.InvalidArgumentError(
                f"{_ATTN}: {name} has dtype {t.dtype.name} but query has {q.dtype.name}",
                op=_ATTN)
    if q.dtype.name not in LOWEST_SCORE:
        raise errors.InvalidArgumentError(
            f"{_ATTN}: query has dtype {q.dtype.name}; expected float16, bfloat16, float32 or "
            "float64", op=_ATTN)
    if m is not None and m.dtype != dtypes.bool_:
        raise errors.InvalidArgumentError(
            f"{_ATTN}: mask must be bool (True where a query may attend to a key), got dtype "
            f"{m.dtype.name} of shape {list(m.shape)}; compare it first (e.g. mask > 0)", op=_ATTN)
    check_attention_shapes(_ATTN, q.shape, k.shape, v.shape, None if m is None else m.shape)
    if not 0 <= dropout < 1:
        raise errors.InvalidArgumentError(f"{_ATTN}: dropout must be in [0, 1), got {dropout}",
                                          op=_ATTN)
    scale = 1.0 / math.sqrt(q.shape[3]) if scale is None else float(scale)
    types = {"T": q.dtype, "Tlse": _lse_type(q.dtype)}
    if dropout == 0 and fused_kernel_available(_ATTN, types, q, k, v):
        return raw_ops.ScaledDotProductAttention(
            query=q, key=k, value=v, mask=[] if m is None else [m], causal=bool(causal),
            scale=scale, Tlse=_lse_type(q.dtype))[0]
    return _attention_composite(q, k, v, m, bool(causal), scale, dropout, seed)


def layer_norm(x: Any, gamma: Any, beta: Any, axis: int = -1, epsilon: float = 1e-5) -> Tensor:
    """(x - mean) / sqrt(variance + epsilon) * gamma + beta, the statistics
    taken over `axis` (the last; op LayerNorm where the device has its
    kernel, else composed of moments and arithmetic). gamma and beta are
    vectors of that axis' size, of x's dtype."""
    x = convert_to_tensor(x)
    g, b = convert_to_tensor(gamma, x.dtype), convert_to_tensor(beta, x.dtype)
    if x.ndim < 1 or axis not in (-1, x.ndim - 1):
        raise errors.InvalidArgumentError(
            f"{_LN}: only the last axis can be normalized, got axis={axis} for x of shape "
            f"{list(x.shape)}; transpose that axis last first", op=_LN)
    _ln_shape([x.shape, g.shape, b.shape], {}, {})
    u = dtypes.float64 if x.dtype == dtypes.float64 else dtypes.float32
    if fused_kernel_available(_LN, {"T": x.dtype, "U": u}, x, g, b):
        return raw_ops.LayerNorm(x=x, gamma=g, beta=b, epsilon=float(epsilon), U=u)[0]
    mean, var = nn_ops.moments(x, [x.ndim - 1], keepdims=True)
    inv = math_ops.rsqrt(math_ops.add(var, float(epsilon)))
    return math_ops.add(math_ops.multiply(math_ops.multiply(math_ops.subtract(x, mean), inv), g), b)


def bias_gelu(x: Any, bias: Any, approximate: bool = False) -> Tensor:
    """gelu(x + bias), `bias` a vector of x's last dimension added along
    that axis (op BiasGelu where the device has its kernel: one pass; else
    composed of BiasAdd and Gelu). `approximate` picks GELU's tanh form
    over the exact x * Phi(x)."""
    x = convert_to_tensor(x)
    if x.dtype.name not in LOWEST_SCORE:
        raise errors.InvalidArgumentError(
            f"{_BG}: x has dtype {x.dtype.name}; expected float16, bfloat16, float32 or "
            "float64", op=_BG)
    try:
        b = convert_to_tensor(bias, x.dtype)
    except errors.InvalidArgumentError:
        raise errors.InvalidArgumentError(
            f"{_BG}: bias has dtype {convert_to_tensor(bias).dtype.name} but x has "
            f"{x.dtype.name}; cast one of them", op=_BG) from None
    _bg_shape([x.shape, b.shape], {}, {})
    if fused_kernel_available(_BG, {"T": x.dtype}, x, b):
        return raw_ops.BiasGelu(x=x, bias=b, approximate=bool(approximate))
    z = raw_ops.BiasAdd(value=x, bias=b) if x.ndim >= 2 else math_ops.add(x, b)
    return raw_ops.Gelu(features=z, approximate=bool(approximate))
