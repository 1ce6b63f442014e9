"""Making ragged tensors and turning them dense: ``pg.ragged.constant``,
``RaggedTensor.from_tensor``, ``to_tensor``, ``merge_dims`` and
``pg.ragged.range``, with TensorFlow's rules and error types."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..framework import dtypes, errors
from ..framework.tensor import Tensor
from ..framework.tensor_shape import TensorShape
from ..ops import array_ops, math_ops
from ..runtime import placement
from ..runtime.tensors import constant as _pg_constant, convert_to_tensor
from .ragged_tensor import (RaggedTensor, _np, _splits_dtype, _values_tensor, gather_rows,
                            splits_of, values_device)


# ------------------------------------------------------------ constant

def _is_list(x: Any) -> bool:
    return isinstance(x, (list, tuple)) or (not isinstance(x, (str, bytes)) and np.ndim(x) != 0)


def _depths(pylist: Any) -> tuple[int | None, int]:
    """(depth of the scalars or None when there are none, deepest list depth)."""
    if not _is_list(pylist):
        return 0, 0
    scalar_depth, max_depth = None, 1
    for child in pylist:
        d, m = _depths(child)
        if d is not None:
            if scalar_depth is not None and scalar_depth != d + 1:
                raise ValueError("all scalar values must have the same nesting depth")
            scalar_depth = d + 1
        max_depth = max(max_depth, m + 1)
    return scalar_depth, max_depth


def _default_inner_shape(pylist: Any, ragged_rank: int) -> tuple:
    def first_shape(item: Any) -> tuple:
        if not _is_list(item):
            return ()
        return (len(item),) + first_shape(item[0]) if len(item) else (0,)

    def check(item: Any, shape: tuple) -> None:
        nested = _is_list(item)
        if nested != bool(shape) or (nested and shape[0] != len(item)):
            raise ValueError("inner values have inconsistent shape")
        if nested:
            for child in item:
                check(child, shape[1:])

    flat = pylist
    for dim in range(ragged_rank):
        if not all(_is_list(v) for v in flat):
            raise ValueError(f"pylist has scalar values depth {dim + 1}, but ragged_rank="
                             f"{ragged_rank} requires scalar value depth greater than "
                             f"{ragged_rank}")
        flat = [x for v in flat for x in v]
    inner = first_shape(flat)[1:]
    for item in flat:
        check(item, inner)
    return tuple(inner)


def _flat_scalars(values: Any, out: list) -> list:
    if _is_list(values):
        for v in values:
            _flat_scalars(v, out)
    else:
        out.append(values)
    return out


def _dense_constant(values: Any, dtype: Any, shape: tuple | None) -> Tensor:
    scalars = _flat_scalars(values, [])
    texts = sum(isinstance(v, (str, bytes)) for v in scalars)
    if 0 < texts < len(scalars):
        raise ValueError("Can't convert Python sequence with mixed types to Tensor.")
    t = _pg_constant(values, dtype=dtype)
    if shape is not None and tuple(t.shape) != tuple(shape):
        if t.size != int(np.prod(shape, dtype=np.int64)):
            raise ValueError(f"inner values have inconsistent shape: {list(t.shape)} cannot be "
                             f"shaped {list(shape)}")
        t = math_ops.reshape(t, list(shape))
    return t


def constant(pylist: Any, dtype: Any = None, ragged_rank: int | None = None,
             inner_shape: tuple | None = None, name: str | None = None,
             row_splits_dtype: Any = dtypes.int64) -> "RaggedTensor | Tensor":
    """A ragged tensor from nested Python lists (``tf.ragged.constant``).

    `ragged_rank` (default: the nesting depth of the scalars minus one)
    sets how many dimensions are ragged; `inner_shape` the shape of the
    dense values under them. Values follow ``pg.constant``'s dtype rules."""
    sdt = _splits_dtype(row_splits_dtype)
    if isinstance(pylist, RaggedTensor):
        raise TypeError("pylist may not be a RaggedTensor")
    if not _is_list(pylist):
        if ragged_rank:
            raise ValueError(f"Invalid pylist={pylist!r}: incompatible with "
                             f"ragged_rank={ragged_rank}")
        if inner_shape:
            raise ValueError(f"Invalid pylist={pylist!r}: incompatible with "
                             f"dim(inner_shape)={len(inner_shape)}")
        return _dense_constant(pylist, dtype, None)
    if ragged_rank is not None and ragged_rank < 0:
        raise ValueError(f"Invalid ragged_rank={ragged_rank!r}: must be nonnegative")
    scalar_depth, max_depth = _depths(pylist)
    if scalar_depth is not None:
        if max_depth > scalar_depth:
            raise ValueError(f"Invalid pylist={pylist!r}: empty list nesting is greater than "
                             "scalar value nesting")
        if ragged_rank is not None and max_depth < ragged_rank:
            raise ValueError(f"Invalid pylist={pylist}, max depth smaller than "
                             f"ragged_rank={ragged_rank}")
    if inner_shape is not None and ragged_rank is not None:
        expected = ragged_rank + len(inner_shape) + 1
        if (scalar_depth is not None and expected != scalar_depth) or \
                (scalar_depth is None and expected < max_depth):
            raise ValueError(f"Invalid pylist={pylist!r}: incompatible with ragged_rank="
                             f"{ragged_rank} and dim(inner_shape)={len(inner_shape)}")
    if ragged_rank == 0 or (ragged_rank is None and (
            max_depth < 2 or (inner_shape is not None and max_depth - len(inner_shape) < 2))):
        return _dense_constant(pylist, dtype, None if inner_shape is None else
                               (len(pylist),) + tuple(inner_shape))
    if inner_shape is None:
        inner_shape = () if ragged_rank is None else _default_inner_shape(pylist, ragged_rank)
    inner_shape = tuple(int(d) for d in inner_shape)
    if ragged_rank is None:
        depth = max_depth if scalar_depth is None else scalar_depth
        ragged_rank = max(1, depth - 1 - (len(inner_shape) if scalar_depth is not None else 0))
    nested, values = [], list(pylist)
    for _ in range(ragged_rank):
        splits = [0]
        flat: list = []
        for row in values:
            if not _is_list(row):
                raise ValueError("all scalar values must have the same nesting depth")
            splits.append(splits[-1] + len(row))
            flat.extend(row)
        nested.append(np.asarray(splits, sdt.as_numpy_dtype))
        values = flat
    result: Any = _dense_constant(values, dtype, (len(values),) + inner_shape)
    for splits in reversed(nested):
        result = RaggedTensor._make(result, splits)
    return result


# ---------------------------------------------------------- from_tensor

def from_tensor_method(cls, tensor: Any, lengths: Any = None, padding: Any = None,
                       ragged_rank: int = 1, name: str | None = None,
                       row_splits_dtype: Any = dtypes.int64) -> RaggedTensor:
    """The ragged tensor of a dense one: rows cut at `lengths`, or
    trailing `padding` values stripped (not both); `ragged_rank`
    leading dimensions become ragged (uniform ones when neither is given)."""
    return from_tensor(cls, tensor, lengths, padding, ragged_rank,
                       _splits_dtype(row_splits_dtype))


def from_tensor(cls, tensor: Any, lengths: Any, padding: Any, ragged_rank: int,
                sdt: dtypes.DType) -> RaggedTensor:
    if lengths is not None and padding is not None:
        raise ValueError("Specify argument `lengths` or `padding`, but not both.")
    if not isinstance(ragged_rank, int):
        raise TypeError(f"ragged_rank expected int, got {ragged_rank!r}")
    if ragged_rank <= 0:
        raise ValueError(f"Argument `ragged_rank` must be greater than 0. Received "
                         f"{ragged_rank}.")
    t = _values_tensor(tensor)
    if isinstance(t, RaggedTensor):
        raise TypeError("from_tensor: the input is already a RaggedTensor")
    if t.ndim < 2:
        raise ValueError("The rank of a RaggedTensor must be greater than 1, i.e., a list of "
                         "scalars won't have ragged dimensions. Received argument `tensor` "
                         f"with rank {t.ndim}.")
    if t.ndim < ragged_rank + 1:
        raise ValueError(f"Shape {list(t.shape)} must have rank at least {ragged_rank + 1}")
    shape = list(t.shape)
    if lengths is not None and isinstance(lengths, (list, tuple)) and len(lengths) and \
            not isinstance(lengths[0], (int, float, np.integer)):
        return _from_nested_lengths(t, [np.asarray(_np(x), np.int64) for x in lengths],
                                    ragged_rank, sdt)
    if ragged_rank > 1:
        sizes = np.cumprod(shape)
        flat = math_ops.reshape(t, [int(sizes[ragged_rank - 1])] + shape[ragged_rank:])
        result = from_tensor(cls, flat, lengths, padding, 1, sdt)
        for axis in range(ragged_rank - 1, 0, -1):
            result = RaggedTensor.from_uniform_row_length(result, shape[axis],
                                                          nrows=int(sizes[axis - 1]),
                                                          validate=False)
        return result
    nrows, ncols = shape[0], shape[1]
    values = math_ops.reshape(t, [nrows * ncols] + shape[2:])
    if padding is not None:
        pad = convert_to_tensor(_np(padding) if not isinstance(padding, Tensor) else padding,
                                t.dtype)
        same = math_ops.equal(t, pad)
        if t.ndim > 2:
            same = math_ops.reduce_all(same, axis=list(range(2, t.ndim)))
        keep = ~np.asarray(same.numpy(), bool)
        positions = np.arange(1, ncols + 1)[None, :] * keep
        lengths = positions.max(axis=1) if ncols else np.zeros(nrows, np.int64)
    if lengths is None:
        splits = (np.arange(nrows + 1) * ncols).astype(sdt.as_numpy_dtype)
        return RaggedTensor._make(values, splits, ncols)
    lens = np.asarray(_np(lengths)).astype(np.int64)
    if lens.ndim != 1:
        raise ValueError(f"lengths must be a vector, got shape {list(lens.shape)}")
    if lens.size != nrows:
        raise errors.InvalidArgumentError(
            f"from_tensor: {lens.size} lengths given for a tensor of {nrows} rows")
    lens = np.clip(lens, 0, ncols)
    index = np.concatenate([np.arange(n) + i * ncols for i, n in enumerate(lens)] or
                           [np.zeros(0, np.int64)])
    splits = splits_of(lens, sdt.as_numpy_dtype)
    return RaggedTensor._make(gather_rows(values, index), splits)


def _from_nested_lengths(t: Tensor, lengths: list, ragged_rank: int,
                         sdt: dtypes.DType) -> RaggedTensor:
    if ragged_rank not in (1, len(lengths)):
        raise ValueError("If lengths is a tuple of row_lengths, then ragged_rank must be "
                         "len(lengths).")
    k = len(lengths)
    if t.ndim < k + 1:
        raise ValueError(f"Shape {list(t.shape)} must have rank at least {k + 1}")
    ones = np.ones(int(lengths[-1].sum()), bool)
    mask: Any = ones
    for lens in reversed(lengths):
        mask = RaggedTensor._make(mask, splits_of(lens, np.int64))
    dense = _dense_mask(mask, list(t.shape[:k + 1]))
    index = np.flatnonzero(dense)
    rows = math_ops.reshape(t, [int(np.prod(t.shape[:k + 1]))] + list(t.shape[k + 1:]))
    result: Any = gather_rows(rows, index)
    for lens in reversed(lengths):
        result = RaggedTensor._make(
            result, splits_of(lens, sdt.as_numpy_dtype))
    return result


def _dense_mask(mask: RaggedTensor, dims: list) -> np.ndarray:
    """A host ragged tensor of bools (numpy values) padded with False."""
    index = dense_index(mask, dims)
    flat = np.asarray(mask.flat_values)
    return np.where(index >= 0, flat[np.maximum(index, 0)] if flat.size else False, False)


# ------------------------------------------------------------ to_tensor

def dense_index(rt: RaggedTensor, dims: list) -> np.ndarray:
    """For each position of the dense shape `dims[:ragged_rank + 1]`, the
    row of flat_values there, or -1 for padding (host bookkeeping)."""
    idx = np.arange(dims[0], dtype=np.int64)
    idx[idx >= rt.nrows_int()] = -1
    level: Any = rt
    for k in range(rt.ragged_rank):
        s = level._splits.astype(np.int64)
        width = dims[k + 1]
        safe = np.maximum(idx, 0)
        starts = s[safe]
        lens = np.where(idx >= 0, s[safe + 1] - starts, 0)
        j = np.arange(width, dtype=np.int64)[None, :]
        idx = np.where(j < lens[:, None], starts[:, None] + j, -1).reshape(-1)
        level = level._values
    return idx.reshape(dims)


def _target_dims(rt: RaggedTensor, shape: Any) -> list:
    dims = rt._bounding_dims()
    if shape is None:
        return dims
    if isinstance(shape, Tensor):
        shape = shape.numpy().tolist()
    elif isinstance(shape, TensorShape):
        shape = shape.as_list() if shape.rank is not None else None
    if shape is None:
        return dims
    shape = list(shape)
    if len(shape) != len(dims):
        raise errors.InvalidArgumentError(
            f"rt_input.shape and shape={shape} are incompatible: rt_input.rank = {len(dims)} "
            f"but shape.rank = {len(shape)}")
    out = []
    for i, (want, have) in enumerate(zip(shape, dims)):
        if want is None or int(want) == -1:
            out.append(have)
        elif i > rt.ragged_rank and int(want) != have:
            raise errors.InvalidArgumentError(
                f"to_tensor: dimension {i} of shape {shape} ({want}) does not match the "
                f"uniform dimension of the values ({have})")
        else:
            out.append(int(want))
    return out


def to_tensor(rt: RaggedTensor, default_value: Any = None, name: str | None = None,
              shape: Any = None) -> Tensor:
    """The dense tensor, rows padded with `default_value` (0, False) to
    the bounding shape or to `shape` (None keeps a dimension; smaller
    truncates): one gather of the flat values and a default row, on the
    values' device."""
    dims = _target_dims(rt, shape)
    R = rt.ragged_rank
    index = dense_index(rt, dims[:R + 1])
    flat = rt.flat_values
    inner = list(flat.shape[1:])
    n = flat.shape[0]
    if default_value is None:
        default = np.zeros((), flat.dtype.as_numpy_dtype)
    else:
        default = default_value
    pad = convert_to_tensor(default.numpy() if isinstance(default, Tensor) else default,
                            flat.dtype)
    if pad.ndim > len(inner):
        raise ValueError(f"default_value of shape {list(pad.shape)} must broadcast to the "
                         f"inner shape {inner}")
    with values_device(flat):
        pad_row = array_ops.broadcast_to(math_ops.reshape(pad, [1] * (len(inner) + 1 -
                                                                       pad.ndim) +
                                                           list(pad.shape)),
                                         [1] + inner)
        table = array_ops.concat([flat, pad_row], 0)
    picked = array_ops.gather(table, np.where(index < 0, n, index).reshape(-1))
    return math_ops.reshape(picked, dims[:R + 1] + inner)


# ----------------------------------------------------------- merge_dims

def merge_dims(rt: RaggedTensor, outer_axis: int, inner_axis: int) -> Any:
    """Dimensions `outer_axis`..`inner_axis` of `rt` merged into one."""
    rank = rt.shape.rank
    outer = outer_axis + rank if outer_axis < 0 else outer_axis
    inner = inner_axis + rank if inner_axis < 0 else inner_axis
    if not 0 <= outer < rank or not 0 <= inner < rank:
        raise ValueError(f"merge_dims: axes {outer_axis}, {inner_axis} out of range for rank "
                         f"{rank}")
    if outer > inner:
        raise ValueError("Expected outer_axis (%d) to be less than or equal to inner_axis (%d)"
                         % (outer_axis, inner_axis))
    result: Any = rt
    for _ in range(inner - outer):
        result = _merge_pair(result, outer)
    return result


def _merge_pair(x: Any, axis: int) -> Any:
    """Dimensions `axis` and `axis + 1` of `x` merged."""
    if isinstance(x, Tensor):
        shape = list(x.shape)
        return math_ops.reshape(x, shape[:axis] + [shape[axis] * shape[axis + 1]] +
                                shape[axis + 2:])
    if axis == 0:
        return x._values
    if axis == 1:
        v = x._values
        if isinstance(v, RaggedTensor):
            return RaggedTensor._make(v._values, v._splits[x._splits])
        width = v.shape[1]
        merged = _merge_pair(v, 0)
        return RaggedTensor._make(merged, x._splits * width)
    return x.with_values(_merge_pair(x._values, axis - 1))


# ---------------------------------------------------------------- range

def ragged_range(starts: Any, limits: Any = None, deltas: Any = 1, dtype: Any = None,
                 name: str | None = None, row_splits_dtype: Any = dtypes.int64) -> RaggedTensor:
    """Row i is ``range(starts[i], limits[i], deltas[i])`` (``tf.ragged.range``);
    scalars broadcast. The values are computed on the scope's device."""
    sdt = _splits_dtype(row_splits_dtype)
    if limits is None:
        starts, limits = 0, starts
    ts = [t if isinstance(t, Tensor) else convert_to_tensor(t, dtype)
          for t in (starts, limits, deltas)]
    if dtype is None:
        kinds = {t.dtype for t in ts}
        dt = ts[0].dtype if len(kinds) == 1 else None
        if dt is None:
            order = [dtypes.int32, dtypes.int64, dtypes.float32, dtypes.float64]
            dt = max(kinds, key=lambda d: order.index(d) if d in order else -1)
        ts = [t if t.dtype is dt else math_ops.cast(t, dt) for t in ts]
    else:
        dt = dtypes.as_dtype(dtype)
        ts = [t if t.dtype is dt else math_ops.cast(t, dt) for t in ts]
    if not (dt.is_integer or dt.is_floating):
        raise TypeError(f"ragged.range: dtype must be an integer or float type, got {dt.name}")
    arrays = [np.asarray(t.numpy()) for t in ts]
    if any(a.ndim > 1 for a in arrays):
        raise ValueError("ragged.range: starts, limits and deltas must be scalars or vectors")
    n = max([a.size for a in arrays if a.ndim == 1] or [1])
    s, lim, d = (np.broadcast_to(a, (n,)) for a in arrays)
    if any(a.ndim == 1 and a.size != n for a in arrays):
        raise errors.InvalidArgumentError("ragged.range: starts, limits and deltas must have "
                                          "the same number of elements")
    if np.any(d == 0):
        raise errors.InvalidArgumentError("Requires delta != 0")
    if dt.is_integer:
        s64, l64, d64 = (a.astype(np.int64) for a in (s, lim, d))
        diff = np.where(d64 > 0, l64 - s64, s64 - l64)
        step = np.abs(d64)
        lengths = np.where(diff > 0, (diff + step - 1) // step, 0)
    else:
        lengths = np.maximum(np.ceil((lim.astype(np.float64) - s) / d), 0).astype(np.int64)
    rowids = np.repeat(np.arange(n), lengths)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    pos = np.arange(int(offsets[-1])) - offsets[:-1][rowids] if rowids.size else \
        np.zeros(0, np.int64)
    with placement.device(placement.current()):
        start_t, delta_t, steps = (_pg_constant(a.astype(dt.as_numpy_dtype)) for a in (s, d, pos))
        values = math_ops.add(array_ops.gather(start_t, rowids),
                              math_ops.multiply(array_ops.gather(delta_t, rowids), steps))
    return RaggedTensor._make(values, offsets.astype(sdt.as_numpy_dtype))
