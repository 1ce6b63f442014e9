"""User functions over the N-dimensional index ops and the sort built on
TopKV2: ``gather_nd``, ``scatter_nd``, ``tensor_scatter_nd_update`` /
``_add`` / ``_sub`` / ``_min`` / ``_max``, ``sort``, ``argsort`` (TensorFlow's names and arguments)."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..framework import dtypes, errors
from ..framework.tensor import Tensor
from ..runtime.tensors import convert_to_tensor
from . import math_ops, raw_ops


def _indices(indices: Any) -> Tensor:
    t = convert_to_tensor(indices)
    if not t.dtype.is_integer:
        raise errors.InvalidArgumentError(f"indices must be int32 or int64, got {t.dtype.name}",
                                          op="GatherNd")
    return t


def gather_nd(params: Any, indices: Any, batch_dims: int = 0, name: str | None = None) -> Tensor:
    """Slices of `params` at the index rows of `indices`: the last dimension
    of `indices` indexes the first dimensions of `params` (op GatherNd)."""
    if batch_dims:
        raise errors.UnimplementedError("gather_nd: batch_dims other than 0 is not supported; "
                                        "fold the batch into the indices", op="GatherNd")
    return raw_ops.GatherNd(params=params, indices=_indices(indices))


def scatter_nd(indices: Any, updates: Any, shape: Any, name: str | None = None) -> Tensor:
    """A zero tensor of `shape` with `updates` added at the index rows of
    `indices` (repeated indices add up) (op ScatterNd)."""
    idx = _indices(indices)
    return raw_ops.ScatterNd(indices=idx, updates=updates,
                             shape=np.asarray(shape, idx.dtype.as_numpy_dtype).reshape(-1))


def tensor_scatter_nd_update(tensor: Any, indices: Any, updates: Any,
                             name: str | None = None) -> Tensor:
    """`tensor` with the slices at `indices` replaced by `updates` (op
    TensorScatterUpdate)."""
    t = convert_to_tensor(tensor)
    return raw_ops.TensorScatterUpdate(tensor=t, indices=_indices(indices),
                                       updates=convert_to_tensor(updates, t.dtype))


def tensor_scatter_nd_add(tensor: Any, indices: Any, updates: Any,
                          name: str | None = None) -> Tensor:
    """`tensor` with `updates` added at `indices` (op TensorScatterAdd)."""
    t = convert_to_tensor(tensor)
    return raw_ops.TensorScatterAdd(tensor=t, indices=_indices(indices),
                                    updates=convert_to_tensor(updates, t.dtype))


def tensor_scatter_nd_sub(tensor: Any, indices: Any, updates: Any,
                          name: str | None = None) -> Tensor:
    """`tensor` with `updates` subtracted at `indices` (op TensorScatterSub)."""
    t = convert_to_tensor(tensor)
    return raw_ops.TensorScatterSub(tensor=t, indices=_indices(indices),
                                    updates=convert_to_tensor(updates, t.dtype))


def tensor_scatter_nd_min(tensor: Any, indices: Any, updates: Any,
                          name: str | None = None) -> Tensor:
    """`tensor` with each slice at `indices` the element-wise minimum of it
    and its updates (op TensorScatterMin)."""
    t = convert_to_tensor(tensor)
    return raw_ops.TensorScatterMin(tensor=t, indices=_indices(indices),
                                    updates=convert_to_tensor(updates, t.dtype))


def tensor_scatter_nd_max(tensor: Any, indices: Any, updates: Any,
                          name: str | None = None) -> Tensor:
    """`tensor` with each slice at `indices` the element-wise maximum of it
    and its updates (op TensorScatterMax)."""
    t = convert_to_tensor(tensor)
    return raw_ops.TensorScatterMax(tensor=t, indices=_indices(indices),
                                    updates=convert_to_tensor(updates, t.dtype))


def _order_reversed(x: Tensor) -> Tensor:
    """An order-reversing map that keeps ties: -x for floats, -1 - x (~x)
    for signed and MAX - x for unsigned integers (no overflow); it is its
    own inverse."""
    if x.dtype.is_floating:
        return math_ops.negative(x)
    np_dt = np.dtype(x.dtype.as_numpy_dtype)
    top = np.iinfo(np_dt).max if np_dt.kind == "u" else -1
    return raw_ops.Sub(x=np.asarray(top, np_dt), y=x)


def _sort(values: Any, axis: int, direction: str) -> tuple[Tensor, Tensor]:
    x = convert_to_tensor(values)
    if direction not in ("ASCENDING", "DESCENDING"):
        raise errors.InvalidArgumentError(f"sort: direction must be 'ASCENDING' or "
                                          f"'DESCENDING', got {direction!r}", op="TopKV2")
    if x.ndim == 0:
        raise errors.InvalidArgumentError("sort: values must have rank >= 1, got a scalar",
                                          op="TopKV2")
    if not -x.ndim <= axis < x.ndim:
        raise errors.InvalidArgumentError(f"sort: axis {axis} is out of range for rank "
                                          f"{x.ndim}", op="TopKV2")
    axis %= x.ndim
    perm = list(range(x.ndim))
    perm[axis], perm[-1] = perm[-1], perm[axis]
    moved = axis != x.ndim - 1
    y = math_ops.transpose(x, perm) if moved else x
    asc = direction == "ASCENDING"
    if asc:
        y = _order_reversed(y)
    v, i = raw_ops.TopKV2(input=y, k=np.int32(y.shape[-1]), sorted=True)
    if asc:
        v = _order_reversed(v)
    if moved:
        v, i = math_ops.transpose(v, perm), math_ops.transpose(i, perm)
    return v, i


def sort(values: Any, axis: int = -1, direction: str = "ASCENDING",
         name: str | None = None) -> Tensor:
    """`values` sorted along `axis` (TopKV2 over all of it, as tf.sort)."""
    return _sort(values, axis, direction)[0]


def argsort(values: Any, axis: int = -1, direction: str = "ASCENDING", stable: bool = False,
            name: str | None = None) -> Tensor:
    """The int32 indices that sort `values` along `axis`; equal values keep
    their order (the sort is always stable)."""
    return _sort(values, axis, direction)[1]


def linspace(start: Any, stop: Any, num: int, name: str | None = None, axis: int = 0) -> Tensor:
    """`num` evenly spaced values from `start` to `stop`, both included (op
    LinSpace; scalar start and stop). Python numbers become float32."""
    s = convert_to_tensor(start, dtypes.float32) if isinstance(start, (int, float)) \
        else convert_to_tensor(start)
    e = convert_to_tensor(stop, s.dtype)
    if s.ndim or e.ndim:
        raise errors.UnimplementedError("linspace: only scalar start and stop are supported",
                                        op="LinSpace")
    return raw_ops.LinSpace(start=s, stop=e, num=np.int32(num))
