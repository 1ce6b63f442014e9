"""Math on ragged tensors with TensorFlow's semantics: elementwise ops on
the flat values (``map_flat_values``; two ragged operands need the same
row partitions, a dense operand broadcasts into the ragged shape) and the
reductions over ragged axes (``pg.reduce_sum(rt, axis=1)``), which gather
each row's values into a padded block on the values' device and reduce it
there."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..framework import dtypes, errors
from ..framework.tensor import Tensor
from ..ops import array_ops, math_ops
from ..runtime.tensors import constant, convert_to_tensor
from .ragged_tensor import RaggedTensor, ragged_positions, splits_of, values_device


# ------------------------------------------------------- partitions

def splits_mismatch(x: np.ndarray, y: np.ndarray) -> errors.InvalidArgumentError:
    """TensorFlow's message for row partitions that differ (x vs y)."""
    if x.size != y.size:
        return errors.InvalidArgumentError(
            f"Condition x == y did not hold element-wise: x (shape={x.shape}) and y "
            f"(shape={y.shape}) have different sizes: the ragged dimensions do not match")
    bad = np.flatnonzero(x != y)
    k = min(3, bad.size)
    first = min(3, x.size)
    return errors.InvalidArgumentError(
        "Condition x == y did not hold.\n"
        f"Indices of first {k} different values:\n{bad[:k].reshape(-1, 1)}\n"
        f"Corresponding x values:\n{x[bad[:k]]}\n"
        f"Corresponding y values:\n{y[bad[:k]]}\n"
        f"First {first} elements of x:\n{x[:first]}\n"
        f"First {first} elements of y:\n{y[:first]}")


def check_same_splits(x: np.ndarray, y: np.ndarray) -> None:
    if x.size != y.size or np.any(x != y):
        raise splits_mismatch(np.asarray(x, np.int64), np.asarray(y, np.int64))


def check_same_partitions(x: RaggedTensor, y: RaggedTensor) -> None:
    if x.ragged_rank != y.ragged_rank:
        raise errors.InvalidArgumentError(
            f"ragged tensors of ragged_rank {x.ragged_rank} and {y.ragged_rank} cannot be "
            "combined elementwise; convert one with RaggedTensor.from_tensor or merge_dims")
    for a, b in zip(x._nested_np(), y._nested_np()):
        check_same_splits(a, b)


def _levels(rt: RaggedTensor) -> list[RaggedTensor]:
    out, level = [], rt
    while isinstance(level, RaggedTensor):
        out.append(level)
        level = level._values
    return out


def _broadcast_dense(rt: RaggedTensor, y: Tensor) -> Tensor:
    """`y` as an operand of rt.flat_values: itself when it only spans the
    uniform inner dimensions, else its elements gathered for every flat
    value (a dimension of 1 broadcasts, a ragged one must be uniform)."""
    flat = rt.flat_values
    inner_rank = flat.ndim - 1
    if y.ndim <= inner_rank:
        return y
    R = rt.ragged_rank
    full = 1 + R + inner_rank
    if y.ndim > full:
        raise errors.InvalidArgumentError(
            f"Incompatible shapes: a tensor of shape {list(y.shape)} does not broadcast with "
            f"a RaggedTensor of shape {rt.shape}")
    ys = [1] * (full - y.ndim) + list(y.shape)
    outer, inner = ys[:R + 1], ys[R + 1:]
    levels = _levels(rt)
    if outer[0] not in (1, rt.nrows_int()):
        raise errors.InvalidArgumentError(
            f"Incompatible shapes: dimension 0 of the tensor ({outer[0]}) does not match the "
            f"RaggedTensor's number of rows ({rt.nrows_int()})")
    for k in range(1, R + 1):
        d = outer[k]
        splits = levels[k - 1]._splits.astype(np.int64)
        if d != 1 and np.any(np.diff(splits) != d):
            raise splits_mismatch(np.arange(splits.size, dtype=np.int64) * d, splits)
    if all(d == 1 for d in outer):
        return math_ops.reshape(y, inner)
    # the multi-index (i0, i1, ..., iR) of every flat value
    cur = np.arange(flat.shape[0], dtype=np.int64)
    pos = [None] * (R + 1)
    for k in range(R, 0, -1):
        level = levels[k - 1]
        splits = level._splits.astype(np.int64)
        rowids = np.repeat(np.arange(splits.size - 1), np.diff(splits))
        row = rowids[cur]
        pos[k] = cur - splits[row]
        cur = row
    pos[0] = cur
    coords = [pos[k] if outer[k] != 1 else np.zeros_like(cur) for k in range(R + 1)]
    lin = np.ravel_multi_index(coords, outer) if cur.size else np.zeros(0, np.int64)
    rows = math_ops.reshape(y, [int(np.prod(outer))] + inner)
    return array_ops.gather(rows, lin.astype(np.int64))


def _dense_operand(value: Any, like: RaggedTensor) -> Tensor:
    if isinstance(value, Tensor):
        return value
    try:
        return convert_to_tensor(value, like.dtype)
    except (TypeError, ValueError):
        return convert_to_tensor(value)


def binary(fn: Callable) -> Callable:
    """The ragged form of a binary elementwise function ``fn(x, y)``."""
    def ragged_binary(x: Any, y: Any, *args: Any, **kwargs: Any) -> Any:
        xr, yr = isinstance(x, RaggedTensor), isinstance(y, RaggedTensor)
        if xr and yr:
            check_same_partitions(x, y)
            return x.with_flat_values(fn(x.flat_values, y.flat_values, *args, **kwargs))
        if xr:
            yt = _dense_operand(y, x)
            return x.with_flat_values(fn(x.flat_values, _broadcast_dense(x, yt), *args, **kwargs))
        xt = _dense_operand(x, y)
        return y.with_flat_values(fn(_broadcast_dense(y, xt), y.flat_values, *args, **kwargs))
    ragged_binary.__name__ = f"ragged_{getattr(fn, '__name__', 'binary')}"
    return ragged_binary


def unary(fn: Callable) -> Callable:
    """The ragged form of a unary elementwise function ``fn(x, ...)``."""
    def ragged_unary(x: Any, *args: Any, **kwargs: Any) -> Any:
        return x.with_flat_values(fn(x.flat_values, *args, **kwargs))
    ragged_unary.__name__ = f"ragged_{getattr(fn, '__name__', 'unary')}"
    return ragged_unary


def _flat_args(value: Any, found: list) -> Any:
    if isinstance(value, RaggedTensor):
        found.append(value)
        return value.flat_values
    if isinstance(value, list):
        return [_flat_args(v, found) for v in value]
    if isinstance(value, tuple):
        return tuple(_flat_args(v, found) for v in value)
    if isinstance(value, dict):
        return {k: _flat_args(v, found) for k, v in value.items()}
    return value


def map_flat_values(op: Callable, *args: Any, **kwargs: Any) -> Any:
    """``op`` applied to the flat values of the ragged arguments, with the
    row partitions of the first one (``tf.ragged.map_flat_values``); the
    flat values must all have the same number of rows, and so must op's
    result."""
    found: list = []
    inner_args = _flat_args(list(args), found)
    inner_kwargs = _flat_args(dict(kwargs), found)
    if not found:
        return op(*args, **kwargs)
    sizes = sorted({rt.flat_values.shape[0] for rt in found})
    if len(sizes) > 1:
        raise ValueError("Input RaggedTensors' flat_values must all have the same outer-"
                         f"dimension size.  Got sizes: {set(sizes)}")
    out = op(*inner_args, **inner_kwargs)
    out = out if isinstance(out, Tensor) else convert_to_tensor(out)
    if not out.shape or out.shape[0] != sizes[0]:
        raise ValueError(f"tf.ragged.map_flat_values requires that the output of `op` have "
                         f"the same outer-dimension size as flat_values of any ragged inputs. "
                         f"(output shape: {tuple(out.shape)}; expected outer dimension size: "
                         f"{sizes[0]})")
    base = max(found, key=lambda rt: rt.ragged_rank)
    return base.with_flat_values(out)


# ---------------------------------------------------------- reductions

_DENSE = {"sum": "reduce_sum", "prod": "reduce_prod", "max": "reduce_max",
          "min": "reduce_min", "any": "reduce_any", "all": "reduce_all"}


def _identity(kind: str, dt: dtypes.DType) -> Any:
    npdt = dt.as_numpy_dtype
    if kind == "sum":
        return np.zeros((), npdt)
    if kind == "prod":
        return np.ones((), npdt)
    if kind == "any":
        return np.asarray(False)
    if kind == "all":
        return np.asarray(True)
    info = np.iinfo(npdt) if dt.is_integer else np.finfo(npdt)
    return np.asarray(info.min if kind == "max" else info.max, npdt)


def _dense_reduce(kind: str, x: Tensor, axis: Any) -> Tensor:
    return getattr(math_ops, _DENSE[kind])(x, axis=axis)


def segment_reduce(kind: str, data: Tensor, segment_ids: np.ndarray, nseg: int) -> Tensor:
    """``unsorted_segment_<kind>``: the rows of `data` of each segment
    gathered into a block padded with the reduction's identity (op
    GatherV2) and reduced along it (Sum, Max, ...), on the data's device."""
    seg = np.asarray(segment_ids, np.int64)
    counts = np.bincount(seg, minlength=nseg)[:nseg] if seg.size else np.zeros(nseg, np.int64)
    width = max(1, int(counts.max()) if counts.size else 1)
    n = data.shape[0]
    order = np.argsort(seg, kind="stable")
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]) if nseg else np.zeros(0, np.int64)
    sorted_seg = seg[order]
    index = np.full((nseg, width), n, np.int64)
    if seg.size:
        index[sorted_seg, np.arange(seg.size) - starts[sorted_seg]] = order
    inner = list(data.shape[1:])
    with values_device(data):
        pad = constant(np.full([1] + inner, _identity(kind, data.dtype),
                               data.dtype.as_numpy_dtype))
        table = array_ops.concat([data, pad], 0)
        block = array_ops.gather(table, index)
        return _dense_reduce(kind, block, 1)


def _segment_aggregate(kind: str, data: Any, seg: np.ndarray, nseg: int) -> Any:
    if not isinstance(data, RaggedTensor):
        return segment_reduce(kind, data, seg, nseg)
    lengths = np.diff(data._splits).astype(np.int64)
    out_lengths = np.zeros(nseg, np.int64)
    if seg.size:
        np.maximum.at(out_lengths, seg, lengths)
    out_splits = splits_of(out_lengths, np.int64)
    starts = out_splits[seg] if seg.size else np.zeros(0, np.int64)
    value_index = ragged_positions(starts, lengths)
    values = _segment_aggregate(kind, data._values, value_index, int(out_splits[-1]))
    return RaggedTensor._make(values, out_splits.astype(data._splits.dtype))


def _reduce_axis(kind: str, rt: Any, axis: int) -> Any:
    if isinstance(rt, Tensor):
        return _dense_reduce(kind, rt, axis)
    if axis == 0:
        lengths = np.diff(rt._splits).astype(np.int64)
        nseg = int(lengths.max()) if lengths.size else 0
        seg = ragged_positions(np.zeros_like(lengths), lengths)
        return _segment_aggregate(kind, rt._values, seg, nseg)
    if axis == 1:
        return _segment_aggregate(kind, rt._values, rt._rowids_np().astype(np.int64),
                                  rt.nrows_int())
    return rt.with_values(_reduce_axis(kind, rt._values, axis - 1))


def _axes(rt: RaggedTensor, axis: Any) -> list[int] | None:
    if axis is None:
        return None
    if isinstance(axis, Tensor):
        axis = axis.numpy().tolist()
    axes = [int(a) for a in np.asarray(axis).reshape(-1)]
    rank = rt.shape.rank
    out = []
    for a in axes:
        if not -rank <= a < rank:
            raise ValueError(f"axis={a} out of bounds: expected {-rank}<=axis<{rank}")
        out.append(a % rank)
    if len(set(out)) != len(out):
        raise errors.InvalidArgumentError(f"axis {axes} repeats an axis")
    return sorted(out, reverse=True)


def reduce(kind: str, rt: RaggedTensor, axis: Any, keepdims: bool) -> Any:
    axes = _axes(rt, axis)
    if axes is None:
        out = _dense_reduce(kind, rt.flat_values, None)
        if keepdims:
            out = math_ops.reshape(out, [1] * rt.shape.rank)
        return out
    result: Any = rt
    for a in axes:
        result = _reduce_axis(kind, result, a)
    if keepdims:
        if isinstance(result, RaggedTensor):
            raise errors.UnimplementedError(
                "keepdims=True over the axes of a RaggedTensor whose result is ragged is not "
                "supported; reduce with keepdims=False and expand the result")
        for a in sorted(axes):
            result = array_ops.expand_dims(result, a)
    return result


def reduce_mean(rt: RaggedTensor, axis: Any, keepdims: bool) -> Any:
    """sum / count, as TensorFlow computes it (integers divide to float64)."""
    total = reduce("sum", rt, axis, keepdims)
    ones = rt.with_flat_values(array_ops.ones_like(rt.flat_values))
    count = reduce("sum", ones, axis, keepdims)
    if isinstance(total, RaggedTensor):
        return total.with_flat_values(total.flat_values / count.flat_values)
    return total / count


def reduction(kind: str) -> Callable:
    """The handler of pg.reduce_<kind> for a ragged input."""
    def ragged_reduce(input_tensor: Any, axis: Any = None, keepdims: bool = False,
                      name: str | None = None, **kwargs: Any) -> Any:
        keepdims = bool(kwargs.pop("keep_dims", keepdims))
        if kind == "mean":
            return reduce_mean(input_tensor, axis, keepdims)
        return reduce(kind, input_tensor, axis, keepdims)
    ragged_reduce.__name__ = f"ragged_reduce_{kind}"
    return ragged_reduce
