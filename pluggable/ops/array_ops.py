"""Array functions over the shape and data-movement ops, in TensorFlow's
layout (``pg.zeros``, ``pg.concat``, ``pg.gather``, ...), and Python
indexing of tensors (``t[1:, ::-1, None, ...]``) mapped onto StridedSlice."""
from __future__ import annotations

import builtins
from typing import Any, Sequence

import numpy as np

from ..framework import config, dtypes, errors
from ..framework.tensor import Tensor
from ..framework.tensor_shape import TensorShape
from ..runtime import constants, placement
from ..runtime.tensors import constant, convert_to_tensor
from . import math_ops, raw_ops
from .index_values import index_array as _index_array
from .index_values import shape_input as _shape_input

newaxis = None


def _dtype_or_none(dtype: Any):
    return None if dtype is None else dtypes.as_dtype(dtype)


# ------------------------------------------------------------------- making

def zeros(shape: Sequence[int], dtype: Any = dtypes.float32, name: str | None = None) -> Tensor:
    """A tensor of `shape` filled with 0 (op Fill)."""
    return _filled(shape, dtype, 0)


def ones(shape: Sequence[int], dtype: Any = dtypes.float32, name: str | None = None) -> Tensor:
    """A tensor of `shape` filled with 1 (op Fill)."""
    return _filled(shape, dtype, 1)


_scalar_of: dict = {}  # (dtype given, 0 or 1) -> (DType, numpy value, Python scalar or None)
_fill_inputs = constants.fill_inputs


def _filled(shape: Sequence[int], dtype: Any, one: int) -> Tensor:
    """zeros / ones: the dtype's 0 or 1, found once per (dtype, value), as
    a Python scalar for ``math_ops.fill_scalar``; dtypes that have no such
    scalar (bfloat16) take ``fill`` with the numpy value. Fill's inputs
    for a shape of Python ints are remembered per (shape, dtype, value,
    device scope, settings), so a repeated call is one Fill."""
    key = None
    if type(shape) is list or type(shape) is tuple or type(shape) is TensorShape:
        key = (tuple(shape), dtype, one, placement.current(), config.version[0])
        try:
            ins = _fill_inputs.get(key)
        except TypeError:  # an unhashable dtype argument: as_dtype says why
            key = ins = None
        if ins is not None and all(type(d) is int for d in key[0]):
            return raw_ops.Fill(dims=ins[0], value=ins[1])
    try:
        hit = _scalar_of.get((dtype, one))
    except TypeError:  # an unhashable dtype argument: as_dtype says why
        hit = None
    if hit is None:
        dt = dtypes.as_dtype(dtype)
        v = np.ones((), dt.as_numpy_dtype) if one else np.zeros((), dt.as_numpy_dtype)
        v.flags.writeable = False  # shared by every call
        hit = (dt, v, v.item() if v.dtype.kind in "biuf" else None)
        if len(_scalar_of) < 64:
            _scalar_of[(dtype, one)] = hit
    dt, v, scalar = hit
    if scalar is None:
        return math_ops.fill(shape, v)
    ins = math_ops.fill_scalar_inputs(shape, scalar, dt)
    if ins is None:
        return math_ops.fill_general(shape, scalar, dt)
    out = raw_ops.Fill(dims=ins[0], value=ins[1])  # (bad dims raise here)
    if key is not None and ins[2] and all(type(d) is int for d in key[0]):
        if len(_fill_inputs) >= 64:
            _fill_inputs.clear()
        _fill_inputs[key] = ins
    return out


def zeros_like(input: Any, dtype: Any = None, name: str | None = None) -> Tensor:  # noqa: A002
    """Zeros of the shape (and dtype, unless given) of `input` (op ZerosLike)."""
    x = convert_to_tensor(input)
    if dtype is not None and dtypes.as_dtype(dtype) is not x.dtype:
        return zeros(x.shape, dtype)
    return raw_ops.ZerosLike(x=x)


def ones_like(input: Any, dtype: Any = None, name: str | None = None) -> Tensor:  # noqa: A002
    """Ones of the shape (and dtype, unless given) of `input` (op OnesLike)."""
    x = convert_to_tensor(input)
    if dtype is not None and dtypes.as_dtype(dtype) is not x.dtype:
        return ones(x.shape, dtype)
    return raw_ops.OnesLike(x=x)


def range(start: Any, limit: Any = None, delta: Any = 1, dtype: Any = None,  # noqa: A001
          name: str | None = "range") -> Tensor:
    """[start, start + delta, ...) up to `limit` (op Range); ``range(n)`` is
    0..n-1. The dtype is `dtype`, else the widest of the arguments'
    (int32 for Python ints, float32 for Python floats)."""
    if limit is None:
        start, limit = 0, start
    # an eager tensor gives its value; a symbolic one (a traced function) stays
    # a tensor: the length is then known when the graph runs
    args = tuple(a.numpy() if type(a) is Tensor else a for a in (start, limit, delta))
    if dtype is None:
        order = [dtypes.int32, dtypes.int64, dtypes.float16, dtypes.bfloat16, dtypes.float32,
                 dtypes.float64]
        found = [a.dtype if isinstance(a, Tensor) else convert_to_tensor(a).dtype for a in args]
        dtype = max(found, key=lambda d: order.index(d) if d in order else 0)
    dt = dtypes.as_dtype(dtype)
    vals = [(a if a.dtype == dt else raw_ops.Cast(x=a, DstT=dt)) if isinstance(a, Tensor)
            else np.asarray(a).astype(dt.as_numpy_dtype) for a in args]
    return raw_ops.Range(start=vals[0], limit=vals[1], delta=vals[2])


def eye(num_rows: int, num_columns: int | None = None, dtype: Any = dtypes.float32,
        name: str | None = None) -> Tensor:
    """The identity matrix [num_rows, num_columns] (op OneHot)."""
    cols = num_rows if num_columns is None else num_columns
    dt = dtypes.as_dtype(dtype)
    return raw_ops.OneHot(indices=np.arange(num_rows, dtype=np.int64), depth=np.int32(cols),
                          on_value=np.ones((), dt.as_numpy_dtype),
                          off_value=np.zeros((), dt.as_numpy_dtype))


def one_hot(indices: Any, depth: int, on_value: Any = None, off_value: Any = None,
            axis: int | None = None, dtype: Any = None, name: str | None = None) -> Tensor:
    """One-hot vectors of length `depth` along `axis` (default last) for
    each index; indices outside [0, depth) give all `off_value` (op OneHot)."""
    dt = _dtype_or_none(dtype)
    if dt is None:
        for v in (on_value, off_value):
            if v is not None:
                dt = convert_to_tensor(v).dtype
                break
    dt = dt or dtypes.float32
    on = np.asarray(1 if on_value is None else _value(on_value)).astype(dt.as_numpy_dtype)
    off = np.asarray(0 if off_value is None else _value(off_value)).astype(dt.as_numpy_dtype)
    return raw_ops.OneHot(indices=indices, depth=np.int32(depth), on_value=on, off_value=off,
                          axis=-1 if axis is None else axis)


def _value(v: Any) -> Any:
    return v._numpy() if isinstance(v, Tensor) else v


# ------------------------------------------------------------ joining, ...

def concat(values: Sequence[Any], axis: int, name: str | None = "concat") -> Tensor:
    """Joins tensors along an existing axis (op ConcatV2)."""
    values = list(values)
    if len(values) == 1:
        return raw_ops.Identity(input=values[0])
    return raw_ops.ConcatV2(values=values, axis=_index_array(axis))


def stack(values: Sequence[Any], axis: int = 0, name: str | None = "stack") -> Tensor:
    """Joins tensors of one shape along a new axis (op Pack)."""
    return raw_ops.Pack(values=list(values), axis=axis)


def unstack(value: Any, num: int | None = None, axis: int = 0,
            name: str | None = "unstack") -> list[Tensor]:
    """Splits `value` along `axis` into its slices (op Unpack)."""
    x = convert_to_tensor(value)
    if num is None:
        if not x.shape:
            raise errors.InvalidArgumentError("unstack: cannot unstack a scalar", op="Unpack")
        num = x.shape[axis]
    return raw_ops.Unpack(value=x, num=num, axis=axis)


def split(value: Any, num_or_size_splits: Any, axis: int = 0, num: int | None = None,
          name: str | None = "split") -> list[Tensor]:
    """Splits `value` along `axis` into `num_or_size_splits` equal parts
    (op Split) or into parts of the given sizes (one may be -1; Slice ops)."""
    x = convert_to_tensor(value)
    if np.ndim(num_or_size_splits) == 0 and not isinstance(num_or_size_splits, Tensor):
        return raw_ops.Split(split_dim=np.int32(axis), value=x,
                             num_split=int(num_or_size_splits))
    sizes = [int(s) for s in np.asarray(_value(num_or_size_splits)).reshape(-1)]
    ax = axis % max(x.ndim, 1)
    total = x.shape[ax]
    if sizes.count(-1) == 1:
        sizes[sizes.index(-1)] = total - sum(s for s in sizes if s != -1)
    if sum(sizes) != total or any(s < 0 for s in sizes):
        raise errors.InvalidArgumentError(
            f"split: sizes {sizes} do not add up to dimension {ax} of shape {list(x.shape)} "
            f"({total})", op="Split")
    out, at = [], 0
    for s in sizes:
        begin = [0] * x.ndim
        begin[ax] = at
        size = list(x.shape)
        size[ax] = s
        out.append(slice(x, begin, size))
        at += s
    return out


def slice(input_: Any, begin: Sequence[int], size: Sequence[int],  # noqa: A001
          name: str | None = None) -> Tensor:
    """The block of `size` starting at `begin` (-1 = to the end) (op Slice)."""
    b, s = _index_array(begin), _index_array(size)
    if b.dtype != s.dtype:
        b, s = b.astype(np.int64), s.astype(np.int64)
    return raw_ops.Slice(input=input_, begin=b, size=s)


def strided_slice(input_: Any, begin: Sequence[int], end: Sequence[int],
                  strides: Sequence[int] | None = None, begin_mask: int = 0, end_mask: int = 0,
                  ellipsis_mask: int = 0, new_axis_mask: int = 0, shrink_axis_mask: int = 0,
                  name: str | None = None) -> Tensor:
    """TensorFlow's strided slice (op StridedSlice); ``t[...]`` is easier."""
    if strides is None:
        strides = [1] * len(begin)
    b, e, s = _same_index_type(begin, end, strides)
    return raw_ops.StridedSlice(input=input_, begin=b, end=e, strides=s, begin_mask=begin_mask,
                                end_mask=end_mask, ellipsis_mask=ellipsis_mask,
                                new_axis_mask=new_axis_mask, shrink_axis_mask=shrink_axis_mask)


def _same_index_type(*lists) -> list[np.ndarray]:
    arrays = [_index_array(v).reshape(-1) for v in lists]
    if any(a.dtype == np.int64 for a in arrays):
        arrays = [a.astype(np.int64) for a in arrays]
    return arrays


# ------------------------------------------------------------ selection, ...

def gather(params: Any, indices: Any, validate_indices: Any = None, axis: int | None = None,
           batch_dims: int = 0, name: str | None = None) -> Tensor:
    """Slices of `params` along `axis` at `indices` (op GatherV2);
    out-of-range indices are an error."""
    ax = batch_dims if axis is None else axis
    if isinstance(indices, Tensor):
        ind = indices
    else:
        ind = _index_array(indices)
    axis_t = constants.host_constant(ax, dtypes.int32) if type(ax) is int else None
    return raw_ops.GatherV2(params=params, indices=ind,
                            axis=axis_t if axis_t is not None else _index_array(ax),
                            batch_dims=batch_dims)


def where(condition: Any, x: Any = None, y: Any = None, name: str | None = None) -> Tensor:
    """Elementwise `x` where `condition` else `y`, all three broadcast (op
    SelectV2). With only `condition`: the int64 coordinates of its true
    elements, computed on the host (the number of results is data-dependent)."""
    if x is None and y is None:
        return constant(np.argwhere(convert_to_tensor(condition).numpy()).astype(np.int64))
    if x is None or y is None:
        raise ValueError("where: give both x and y, or neither")
    x, y = math_ops._pair(x, y)
    return raw_ops.SelectV2(condition=condition, t=x, e=y)


def tile(input: Any, multiples: Sequence[int], name: str | None = None) -> Tensor:  # noqa: A002
    """`input` repeated `multiples[i]` times along each axis i (op Tile)."""
    return raw_ops.Tile(input=input, multiples=_shape_input(multiples))


def pad(tensor: Any, paddings: Any, mode: str = "CONSTANT", constant_values: Any = 0,
        name: str | None = None) -> Tensor:
    """`tensor` with paddings[i] = [before, after] elements added along axis
    i (op Pad, CONSTANT mode)."""
    if mode.upper() != "CONSTANT":
        raise errors.UnimplementedError(f"pad: mode {mode!r} is not supported; use 'CONSTANT'",
                                        op="Pad")
    x = convert_to_tensor(tensor)
    p = _index_array(paddings)
    out = raw_ops.Pad(input=x, paddings=p)
    if np.any(np.asarray(_value(constant_values)) != 0):
        inside = raw_ops.Pad(input=ones_like(x, dtypes.bool_), paddings=p)
        out = raw_ops.SelectV2(condition=inside, t=out,
                               e=convert_to_tensor(_value(constant_values), x.dtype))
    return out


def expand_dims(input: Any, axis: int, name: str | None = None) -> Tensor:  # noqa: A002
    """`input` with a dimension of size 1 inserted at `axis` (op ExpandDims)."""
    return raw_ops.ExpandDims(input=input, dim=_index_array(axis))


def squeeze(input: Any, axis: Any = None, name: str | None = None) -> Tensor:  # noqa: A002
    """`input` without dimensions of size 1 (only those in `axis` if given)
    (op Squeeze)."""
    dims = [] if axis is None else [int(a) for a in np.asarray(axis).reshape(-1)]
    return raw_ops.Squeeze(input=input, squeeze_dims=dims)


def broadcast_to(input: Any, shape: Sequence[int], name: str | None = None) -> Tensor:  # noqa: A002
    """`input` broadcast to `shape` (op BroadcastTo)."""
    return raw_ops.BroadcastTo(input=input, shape=_shape_input(shape))


def reverse(tensor: Any, axis: Sequence[int], name: str | None = None) -> Tensor:
    """`tensor` with the order of elements reversed along each of `axis` (op StridedSlice)."""
    x = convert_to_tensor(tensor)
    flip = {int(a) % max(x.ndim, 1) for a in np.asarray(axis).reshape(-1)}
    n = x.ndim
    strides = [-1 if i in flip else 1 for i in builtins.range(n)]
    full = (1 << n) - 1
    return strided_slice(x, [0] * n, [0] * n, strides, begin_mask=full, end_mask=full)


def clip_by_value(t: Any, clip_value_min: Any, clip_value_max: Any,
                  name: str | None = None) -> Tensor:
    """`t` with values below/above the bounds replaced by them (Maximum, Minimum)."""
    x = convert_to_tensor(t)
    lo = convert_to_tensor(_value(clip_value_min), x.dtype)
    hi = convert_to_tensor(_value(clip_value_max), x.dtype)
    return raw_ops.Minimum(x=raw_ops.Maximum(x=x, y=lo), y=hi)


def clip_by_norm(t: Any, clip_norm: Any, axes: Any = None, name: str | None = None) -> Tensor:
    """`t` scaled down so that its L2 norm over `axes` (all of them when
    None) is at most `clip_norm`, with TensorFlow's formula:
    ``t * clip_norm / maximum(norm, clip_norm)`` (a zero norm leaves `t`)."""
    x = convert_to_tensor(t)
    c = convert_to_tensor(_value(clip_norm), x.dtype)
    l2sum = math_ops.reduce_sum(raw_ops.Mul(x=x, y=x), axes, keepdims=True)
    positive = raw_ops.Greater(x=l2sum, y=convert_to_tensor(0, x.dtype))
    safe = raw_ops.SelectV2(condition=positive, t=l2sum, e=raw_ops.OnesLike(x=l2sum))
    l2norm = raw_ops.SelectV2(condition=positive, t=raw_ops.Sqrt(x=safe), e=l2sum)
    return raw_ops.RealDiv(x=raw_ops.Mul(x=x, y=c), y=raw_ops.Maximum(x=l2norm, y=c))


def shape(input: Any, out_type: Any = dtypes.int32, name: str | None = None) -> Tensor:  # noqa: A002
    """The shape of `input` as a 1-D CPU tensor (op Shape where a traced
    tensor's shape is not fully known)."""
    t = convert_to_tensor(input)
    if t._shape is None or any(d is None for d in t._shape):
        with placement.device("CPU:0"):
            return raw_ops.Shape(input=t, out_type=dtypes.as_dtype(out_type))
    return constant(np.asarray(t.shape,
                               dtypes.as_dtype(out_type).as_numpy_dtype).reshape(-1))


def rank(input: Any, name: str | None = None) -> Tensor:  # noqa: A002
    """The number of dimensions of `input` as a scalar int32 tensor."""
    return constant(np.int32(convert_to_tensor(input).ndim))


def size(input: Any, out_type: Any = dtypes.int32, name: str | None = None) -> Tensor:  # noqa: A002
    """The number of elements of `input` as a scalar tensor."""
    return constant(np.asarray(convert_to_tensor(input).size,
                               dtypes.as_dtype(out_type).as_numpy_dtype))


# ------------------------------------------------------------- indexing

_INDEX_HELP = ("only integers, slices (`:`), ellipsis (`...`), pg.newaxis (`None`) and "
               "scalar integer tensors are valid indices")


def _int_index(s: Any) -> int | None:
    """`s` as an int if it is an integer index (Python int, numpy integer,
    scalar integer array or tensor), else None."""
    if isinstance(s, (bool, np.bool_)):
        return None
    if isinstance(s, (int, np.integer)):
        return int(s)
    if isinstance(s, (Tensor, np.ndarray)) and s.ndim == 0:
        dt = s.dtype if isinstance(s, Tensor) else dtypes.as_dtype(s.dtype)
        if dt.is_integer:
            return int(_value(s))
    return None


def _traced_index(s: Any) -> bool:
    """Whether `s` is a scalar integer tensor without a value yet (a
    symbolic tensor of a traced function): ``x[i]`` slices at run time."""
    return isinstance(s, Tensor) and getattr(s, "node", None) is not None and \
        s.shape == () and s.dtype.is_integer


def slice_key(key: Any) -> tuple[list, list, list, dict]:
    """A Python subscript -> StridedSlice's (begin, end, strides, masks)."""
    if not isinstance(key, tuple):
        key = (key,)
    begin, end, strides = [], [], []
    masks = dict(begin_mask=0, end_mask=0, ellipsis_mask=0, new_axis_mask=0, shrink_axis_mask=0)
    for i, s in enumerate(key):
        bit = 1 << i
        if s is Ellipsis:
            masks["ellipsis_mask"] |= bit
            begin.append(0), end.append(0), strides.append(1)
        elif s is None:
            masks["new_axis_mask"] |= bit
            begin.append(0), end.append(0), strides.append(1)
        elif isinstance(s, builtins.slice):
            parts = []
            for what, v in (("start", s.start), ("stop", s.stop), ("step", s.step)):
                if v is not None and _int_index(v) is None:
                    raise TypeError(f"slice {what} {v!r} is not an integer: {_INDEX_HELP}")
                parts.append(None if v is None else _int_index(v))
            start, stop, step = parts
            if start is None:
                masks["begin_mask"] |= bit
            if stop is None:
                masks["end_mask"] |= bit
            begin.append(start or 0), end.append(stop or 0)
            strides.append(1 if step is None else step)
        elif _traced_index(s):   # an integer tensor of a function being traced
            masks["shrink_axis_mask"] |= bit
            begin.append(s), end.append(s + 1), strides.append(1)
        else:
            n = _int_index(s)
            if n is None:
                raise TypeError(f"cannot index a tensor with {type(s).__name__} {s!r}: "
                                f"{_INDEX_HELP}")
            masks["shrink_axis_mask"] |= bit
            begin.append(n), end.append(n + 1), strides.append(1)
    return begin, end, strides, masks


def getitem(tensor: Tensor, key: Any) -> Tensor:
    """``tensor[key]`` (op StridedSlice)."""
    begin, end, strides, masks = slice_key(key)
    if any(isinstance(v, Tensor) for v in begin):
        b, e = ([raw_ops.Cast(x=v, DstT=dtypes.int32) if isinstance(v, Tensor) else
                 np.int32(v) for v in vs] for vs in (begin, end))
        out = raw_ops.StridedSlice(input=tensor, begin=stack(b), end=stack(e),
                                   strides=np.asarray(strides, np.int32), **masks)
        n = len(begin)
        if out.shape is None and tensor.shape is not None and \
                masks["shrink_axis_mask"] == (1 << n) - 1:   # only indices: the rest stays
            shape = tuple(tensor.shape[n:])
            shapes = list(out.node.out_shapes)
            shapes[out.index] = shape
            out.node.out_shapes, out._shape = shapes, shape
        return out
    b, e, s = _same_index_type(begin, end, strides)
    return raw_ops.StridedSlice(input=tensor, begin=b, end=e, strides=s, **masks)
