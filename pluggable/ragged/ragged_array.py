"""Array functions of ragged tensors with TensorFlow's semantics:
``pg.concat`` / ``pg.stack`` (axis 0, 1 and deeper), ``pg.gather`` of rows,
``pg.reverse``, ``pg.tile``, ``pg.ragged.boolean_mask``. The row
bookkeeping is numpy on the host; the values move by GatherV2 and ConcatV2
on their device."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..framework import errors
from ..framework.tensor import Tensor
from ..ops import array_ops
from ..runtime.tensors import convert_to_tensor
from .ragged_math import check_same_splits
from .ragged_tensor import (RaggedTensor, _values_tensor, gather_rows, ragged_positions,
                            splits_of)


def _to_ragged(value: Any, ragged_rank: int, like: RaggedTensor) -> RaggedTensor:
    """`value` as a ragged tensor of `ragged_rank` (dense dimensions become
    uniform ragged ones, as TensorFlow converts them)."""
    if isinstance(value, RaggedTensor):
        if value.ragged_rank == ragged_rank:
            return value
        if value.ragged_rank > ragged_rank:
            raise ValueError("cannot lower the ragged_rank of an input")
        return value.with_flat_values(RaggedTensor.from_tensor(
            value.flat_values, ragged_rank=ragged_rank - value.ragged_rank,
            row_splits_dtype=like.row_splits_dtype))
    t = value if isinstance(value, Tensor) else _values_tensor(
        convert_to_tensor(value, like.dtype))
    return RaggedTensor.from_tensor(t, ragged_rank=ragged_rank,
                                    row_splits_dtype=like.row_splits_dtype)


def _prepare(values: Sequence[Any], axis: int, what: str) -> tuple[list[RaggedTensor], int]:
    values = list(values)
    if len(values) == 1 and isinstance(values[0], RaggedTensor):
        return values, axis
    ragged = [v for v in values if isinstance(v, RaggedTensor)]
    first = ragged[0]
    R = max(v.ragged_rank for v in ragged)
    rts = [_to_ragged(v, R, first) for v in values]
    ranks = {rt.shape.rank for rt in rts}
    if len(ranks) > 1:
        raise ValueError(f"{what}: all inputs must have the same rank, got ranks "
                         f"{sorted(ranks)}")
    rank = ranks.pop() + (1 if what == "stack" else 0)
    if not -rank <= axis < rank:
        raise ValueError(f"{what}: axis={axis} out of bounds: expected {-rank}<=axis<{rank}")
    dts = {rt.dtype for rt in rts}
    if len(dts) > 1:
        raise errors.InvalidArgumentError(
            f"{what}: inputs have different dtypes {sorted(d.name for d in dts)}; cast them "
            "to one dtype first")
    return rts, axis % rank


def _concat0(rts: list[Any], stack: bool) -> Any:
    if isinstance(rts[0], Tensor):
        return (array_ops.stack if stack else array_ops.concat)(rts, 0)
    values = _concat0([rt._values for rt in rts], False)
    parts, offset = [rts[0]._splits[:1].astype(np.int64)], 0
    for rt in rts:
        parts.append(rt._splits[1:].astype(np.int64) + offset)
        offset += int(rt._splits[-1])
    dt = rts[0]._splits.dtype
    result = RaggedTensor._make(values, np.concatenate(parts).astype(dt))
    if stack:
        nrows = [rt.nrows_int() for rt in rts]
        return RaggedTensor._make(result, splits_of(nrows, dt))
    return result


def _concat1(rts: list[RaggedTensor], stack: bool) -> RaggedTensor:
    n = rts[0].nrows_int()
    for i, rt in enumerate(rts[1:], 1):
        if rt.nrows_int() != n:
            raise errors.InvalidArgumentError(
                f"Input tensors at index 0 (={n} rows) and {i} (={rt.nrows_int()} rows) have "
                "incompatible shapes: concatenating along axis 1 needs the same number of rows")
    k = len(rts)
    joined = _concat0(rts, False)
    permuted = gather_rows(joined, np.arange(n * k).reshape(k, n).T.reshape(-1))
    dt = rts[0]._splits.dtype
    if stack:
        return RaggedTensor._make(permuted, (np.arange(n + 1) * k).astype(dt))
    return RaggedTensor._make(permuted._values, permuted._splits[::k])


def _join(rts: list[Any], axis: int, stack: bool) -> Any:
    if isinstance(rts[0], Tensor):
        return (array_ops.stack if stack else array_ops.concat)(rts, axis)
    if axis == 0:
        return _concat0(rts, stack)
    if axis == 1:
        return _concat1(rts, stack)
    for rt in rts[1:]:
        check_same_splits(rts[0]._splits, rt._splits)
    inner = _join([rt._values for rt in rts], axis - 1, stack)
    return RaggedTensor._make(inner, rts[0]._splits, rts[0]._uniform)


def concat(values: Sequence[Any], axis: int, name: str | None = None) -> Any:
    """pg.concat with a ragged input: the result is ragged."""
    rts, axis = _prepare(values, axis, "concat")
    return rts[0] if len(rts) == 1 else _join(rts, axis, False)   # TensorFlow's order


def stack(values: Sequence[Any], axis: int = 0, name: str | None = None) -> Any:
    """pg.stack with a ragged input: the result is ragged."""
    rts, axis = _prepare(values, axis, "stack")
    return _join(rts, axis, True)


# --------------------------------------------------------------- gather

def _host_indices(indices: Any, n: int) -> np.ndarray:
    ind = np.asarray(indices.numpy() if isinstance(indices, Tensor) else indices)
    if ind.dtype.kind not in "iu":
        raise TypeError(f"gather: indices must be integers, got {ind.dtype}")
    bad = (ind < 0) | (ind >= n)
    if np.any(bad):
        raise errors.InvalidArgumentError(
            f"indices[{int(np.flatnonzero(bad.reshape(-1))[0])}] = "
            f"{int(ind.reshape(-1)[np.flatnonzero(bad.reshape(-1))[0]])} is not in [0, {n})",
            op="GatherV2")
    return ind.astype(np.int64)


def gather(params: Any, indices: Any, validate_indices: Any = None, axis: Any = None,
           batch_dims: int = 0, name: str | None = None) -> Any:
    """pg.gather with a ragged `params` (rows along axis 0) or ragged
    `indices` (the result takes the indices' row partitions)."""
    if batch_dims != 0 or axis not in (None, 0):
        raise errors.UnimplementedError(
            "gather of a RaggedTensor supports axis=0 and batch_dims=0 only")
    if isinstance(indices, RaggedTensor):
        return indices.with_flat_values(gather(params, indices.flat_values))
    if not isinstance(params, RaggedTensor):
        return array_ops.gather(params, indices)
    ind = _host_indices(indices, params.nrows_int())
    rows = gather_rows(params, ind.reshape(-1))
    if ind.ndim == 0:
        return params[int(ind)]
    for k in range(ind.ndim - 1, 0, -1):   # a ragged dimension, as TensorFlow's shape says
        d, n = ind.shape[k], int(np.prod(ind.shape[:k]))
        rows = RaggedTensor._make(rows, (np.arange(n + 1) * d).astype(params._splits.dtype))
    return rows


# ----------------------------------------------------------- boolean_mask

def boolean_mask(data: Any, mask: Any, name: str | None = None) -> Any:
    """The elements of `data` where `mask` is True (``tf.ragged.boolean_mask``):
    `mask`'s shape is a prefix of `data`'s; every masked dimension but the
    first becomes ragged."""
    if not isinstance(mask, RaggedTensor):
        mask = convert_to_tensor(mask.numpy() if isinstance(mask, Tensor) else mask)
    if not mask.dtype.is_bool:
        raise TypeError(f"boolean_mask: mask must be bool, got {mask.dtype.name}")
    m = mask.shape.rank
    if m is None or m == 0:
        raise ValueError("boolean_mask: mask must have rank >= 1")
    if not isinstance(data, RaggedTensor):
        data = _values_tensor(data)
    if data.shape.rank < m:
        raise ValueError(f"boolean_mask: mask of rank {m} is deeper than data of rank "
                         f"{data.shape.rank}")
    # both as ragged tensors with m - 1 ragged dimensions over the masked ones
    if m > 1:
        if isinstance(mask, Tensor):
            mask = RaggedTensor.from_tensor(mask, ragged_rank=m - 1)
        if isinstance(data, Tensor):
            data = RaggedTensor.from_tensor(data, ragged_rank=m - 1)
        elif data.ragged_rank < m - 1:
            data = _to_ragged(data, m - 1, data)
        if mask.ragged_rank != m - 1:
            mask = _to_ragged(mask, m - 1, mask)
        for a, b in zip(data._nested_np()[:m - 1], mask._nested_np()):
            check_same_splits(a, b)
    keep_flags = np.asarray(mask.flat_values.numpy() if isinstance(mask, RaggedTensor)
                            else mask.numpy(), bool).reshape(-1)
    # the rows masked: the values of data's level m - 1
    levels: list[RaggedTensor] = []
    cur: Any = data
    for _ in range(m - 1):
        levels.append(cur)
        cur = cur._values
    nrows = cur.nrows_int() if isinstance(cur, RaggedTensor) else cur.shape[0]
    if keep_flags.size != nrows:
        raise ValueError(f"Shapes ({nrows},) and ({keep_flags.size},) are incompatible")
    kept = gather_rows(cur, np.flatnonzero(keep_flags))
    if not levels:
        return kept
    # the deepest mask partition shrinks to the kept counts; the others stay
    deepest = levels[-1]._splits.astype(np.int64)
    cum = np.concatenate([[0], np.cumsum(keep_flags)])
    new = cum[deepest].astype(levels[-1]._splits.dtype)
    result: Any = RaggedTensor._make(kept, new)
    for level in reversed(levels[:-1]):
        result = RaggedTensor._make(result, level._splits)
    return result


# --------------------------------------------------------- reverse, tile

def reverse(tensor: Any, axis: Sequence[int], name: str | None = None) -> Any:
    """pg.reverse of a ragged tensor: rows (axis 0), each row's values (a
    ragged axis) or the dense values."""
    rt = tensor
    axes = [int(a) for a in np.asarray(axis.numpy() if isinstance(axis, Tensor) else axis)
            .reshape(-1)]
    rank = rt.shape.rank
    for a in axes:
        a = a % rank
        rt = _reverse_axis(rt, a)
    return rt


def _reverse_axis(rt: Any, axis: int) -> Any:
    if isinstance(rt, Tensor):
        return array_ops.reverse(rt, [axis])
    if axis == 0:
        return gather_rows(rt, np.arange(rt.nrows_int())[::-1])
    if axis == 1:
        s = rt._splits.astype(np.int64)
        lengths = np.diff(s)
        index = ragged_positions(s[:-1], lengths)
        rowids = np.repeat(np.arange(lengths.size), lengths)
        flipped = s[rowids] + s[rowids + 1] - 1 - index if index.size else index
        return RaggedTensor._make(gather_rows(rt._values, flipped), rt._splits, rt._uniform)
    return rt.with_values(_reverse_axis(rt._values, axis - 1))


def tile(input: Any, multiples: Sequence[int], name: str | None = None) -> Any:  # noqa: A002
    """pg.tile of a ragged tensor of ragged_rank 1: rows repeated, each
    row's values repeated, the dense values tiled."""
    rt = input
    mult = [int(m) for m in np.asarray(multiples.numpy() if isinstance(multiples, Tensor)
                                       else multiples).reshape(-1)]
    if len(mult) != rt.shape.rank:
        raise errors.InvalidArgumentError(
            f"tile: multiples has {len(mult)} elements, the input has rank {rt.shape.rank}")
    if rt.ragged_rank != 1:
        raise errors.UnimplementedError("tile of a RaggedTensor supports ragged_rank 1 only")
    values = rt._values
    if any(m != 1 for m in mult[2:]):
        values = array_ops.tile(values, [1] + mult[2:])
    s = rt._splits.astype(np.int64)
    lengths = np.diff(s)
    m0, m1 = mult[0], mult[1]
    starts = np.repeat(s[:-1], m1)
    lens = np.repeat(lengths, m1)
    index = np.tile(ragged_positions(starts, lens), m0)
    row_lengths = np.tile(lengths * m1, m0)
    splits = splits_of(row_lengths, rt._splits.dtype)
    return RaggedTensor._make(gather_rows(values, index), splits)
