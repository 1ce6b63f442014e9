"""Python indexing of ragged tensors (``rt[1]``, ``rt[1:3]``, ``rt[:, :2]``,
``rt[3, 0]``), with TensorFlow's rules: an integer index into a ragged
dimension other than the first is an error (the rows have no common
length), a slice of one cuts every row."""
from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from ..framework import errors
from ..framework.tensor import Tensor
from ..ops import array_ops
from .ragged_tensor import RaggedTensor, gather_rows, ragged_positions, splits_of

_HELP = "integers and slices are valid indices of a RaggedTensor"


def _int(key: Any) -> int | None:
    return array_ops._int_index(key)


def _expand_ellipsis(rt: RaggedTensor, keys: list) -> list:
    if Ellipsis not in keys:
        return keys
    if keys.count(Ellipsis) > 1:
        raise ValueError("an index can only have a single ellipsis ('...')")
    at = keys.index(Ellipsis)
    fill = rt.shape.rank - (len(keys) - 1)
    return keys[:at] + [builtins.slice(None)] * max(fill, 0) + keys[at + 1:]


def _check(keys: list) -> None:
    for k in keys:
        if k is None:
            raise errors.UnimplementedError(
                "indexing a RaggedTensor with pg.newaxis is not supported; use "
                "pg.expand_dims on the values or to_tensor() first")
        if not isinstance(k, builtins.slice) and _int(k) is None:
            raise TypeError(f"cannot index a RaggedTensor with {type(k).__name__} {k!r}: "
                            f"{_HELP}")


def getitem(rt: RaggedTensor, key: Any) -> Any:
    keys = list(key) if isinstance(key, tuple) else [key]
    keys = _expand_ellipsis(rt, keys)
    _check(keys)
    if len(keys) > rt.shape.rank:
        raise errors.InvalidArgumentError(
            f"Index out of range: {len(keys)} indices for a RaggedTensor of rank "
            f"{rt.shape.rank}")
    return _outer(rt, keys)


def _dense(t: Tensor, keys: list) -> Tensor:
    return array_ops.getitem(t, tuple(keys)) if keys else t


def _outer(rt: Any, keys: list) -> Any:
    """`keys` applied from the first dimension of `rt`."""
    if not keys:
        return rt
    if isinstance(rt, Tensor):
        return _dense(rt, keys)
    head, rest = keys[0], keys[1:]
    n = rt.nrows_int()
    if isinstance(head, builtins.slice):
        if head != builtins.slice(None):
            rt = gather_rows(rt, np.arange(n)[head])
        return _inner(rt, rest)
    i = _int(head)
    if not -n <= i < n:
        raise IndexError(f"Row key {i} out of bounds")
    i %= n
    a, b = int(rt._splits[i]), int(rt._splits[i + 1])
    row = gather_rows(rt._values, np.arange(a, b))
    return _outer(row, rest)


def _inner(rt: Any, keys: list) -> Any:
    """`keys` applied from the second dimension of `rt` (every row)."""
    if not keys:
        return rt
    if isinstance(rt, Tensor):
        return _dense(rt, [builtins.slice(None)] + keys)
    head, rest = keys[0], keys[1:]
    if isinstance(head, builtins.slice):
        if head != builtins.slice(None):
            rt = _slice_rows(rt, head)
        return rt.with_values(_inner(rt._values, rest)) if rest else rt
    j = _int(head)
    if rt._uniform is None:
        raise ValueError("Cannot index into an inner ragged dimension.")
    length = rt._uniform
    if not -length <= j < length:
        raise errors.InvalidArgumentError(
            f"slice index {j} of dimension 1 out of bounds (uniform row length {length})")
    picked = gather_rows(rt._values, rt._splits[:-1] + (j % length))
    return _inner(picked, rest)


def _slice_rows(rt: RaggedTensor, key: builtins.slice) -> RaggedTensor:
    """Every row of `rt` cut by the Python slice `key`."""
    starts, lengths = rt._splits[:-1].astype(np.int64), np.diff(rt._splits).astype(np.int64)
    if key.step is None or _int(key.step) == 1:
        a = 0 if key.start is None else _int(key.start)
        b = None if key.stop is None else _int(key.stop)
        lo = np.clip(np.where(a < 0, lengths + a, a), 0, lengths)
        hi = lengths if b is None else np.clip(np.where(b < 0, lengths + b, b), 0, lengths)
        new_lengths = np.maximum(hi - lo, 0)
        index = ragged_positions(starts + lo, new_lengths)
    else:
        parts = [np.arange(s, s + n)[key] for s, n in zip(starts, lengths)]
        new_lengths = np.asarray([p.size for p in parts], np.int64)
        index = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    splits = splits_of(new_lengths, rt._splits.dtype)
    return RaggedTensor._make(gather_rows(rt._values, index), splits)
