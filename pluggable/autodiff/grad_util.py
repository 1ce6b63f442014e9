"""Small helpers the gradient functions share (all of them run ops, so they
work on any device and are recorded by outer tapes)."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..framework import dtypes
from ..framework.tensor import Tensor
from ..ops import raw_ops as R
from ..runtime import constants


def ints(values: Sequence[int]) -> Any:
    """A host int32 vector (for shape, axis and perm inputs): the cached
    read-only host tensor of ``runtime.constants.host_vector``, with which
    the op's call takes the raw_ops fast path (an array where a value does
    not fit int32, for the op's usual error)."""
    t = constants.host_vector(tuple([int(v) for v in values]), dtypes.int32)
    return t if t is not None else np.asarray(list(values), np.int64)


def host_value(t: Tensor) -> np.ndarray:
    """The value of a host-memory input (axes, shapes, paddings ...); while
    a function is traced, the value of its constant."""
    static = getattr(t, "static_value", None)
    return np.asarray(static() if static is not None else t.numpy())


def host_ints(t: Tensor) -> list[int]:
    """The values of a host-memory integer input (axes, shapes, ...)."""
    return [int(v) for v in host_value(t).reshape(-1)]


def scalar(value: float, like: Tensor) -> Any:
    """`value` as an operand beside tensors of `like`'s dtype: for a float
    dtype the Python number, which the op converts to that dtype (on a
    plugin device, its cached constant: no copy per call, and the raw_ops
    fast path); otherwise a host scalar of that dtype."""
    if like.dtype.is_floating:
        return float(value)
    return np.asarray(value, like.dtype.as_numpy_dtype)


def reduce_to(g: Tensor, shape: tuple) -> Tensor:
    """Sums `g` over the axes along which a value of `shape` was broadcast
    to `g`'s shape (the gradient of broadcasting)."""
    shape = tuple(shape)
    if tuple(g.shape) == shape:
        return g
    lead = len(g.shape) - len(shape)
    axes = list(range(lead)) + [lead + i for i, d in enumerate(shape)
                                if d == 1 and g.shape[lead + i] != 1]
    if axes:
        g = R.Sum(input=g, reduction_indices=ints(axes), keep_dims=False)
    return R.Reshape(tensor=g, shape=ints(shape))


def broadcast_to(x: Tensor, shape: tuple) -> Tensor:
    if tuple(x.shape) == tuple(shape):
        return x
    return R.BroadcastTo(input=x, shape=ints(shape))


def normalize_axes(axes: list[int], rank: int) -> list[int]:
    return sorted({a % rank for a in axes}) if rank else []


def kept_shape(shape: tuple, axes: list[int]) -> tuple:
    """`shape` with the reduced `axes` kept as 1."""
    return tuple(1 if i in axes else d for i, d in enumerate(shape))


def reduction_grad_base(op: Any, grad: Tensor) -> tuple[Tensor, list[int]]:
    """The output gradient of a reduction reshaped to keep_dims form, and the
    reduced axes."""
    x = op.inputs[0]
    axes = normalize_axes(host_ints(op.inputs[1]), x.ndim)
    return R.Reshape(tensor=grad, shape=ints(kept_shape(x.shape, axes))), axes


def mul(a: Any, b: Any) -> Tensor:
    return R.Mul(x=a, y=b)


def neg(a: Tensor) -> Tensor:
    return R.Neg(x=a)
