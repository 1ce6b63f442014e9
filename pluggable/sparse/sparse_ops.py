"""The ``pg.sparse`` functions over ``SparseTensor``. Index bookkeeping
(checks, ordering, merging positions) happens on the host; the values move
through the ops on the current device (``UnsortedSegmentSum``,
``GatherNd``, ``MatMul``, ``Sum``, ``ConcatV2``)."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..framework import dtypes, errors
from ..framework.tensor import Tensor
from ..ops import array_ops, math_ops, nd_index_ops
from ..runtime.tensors import constant, convert_to_tensor
from .sparse_tensor import SparseTensor


def _check(st: Any, fn: str) -> SparseTensor:
    if not isinstance(st, SparseTensor):
        raise TypeError(f"tf.sparse.{fn}: expected a SparseTensor, got {type(st).__name__}; "
                        "make one with pg.sparse.from_dense or pg.SparseTensor(...)")
    return st


def _validate(idx: np.ndarray, shape: np.ndarray, op: str) -> None:
    """TensorFlow's checks of SparseToDense: in bounds, in order, no repeats."""
    for i, row in enumerate(idx):
        if np.any(row < 0) or np.any(row >= shape):
            raise errors.InvalidArgumentError(
                f"{op}: indices[{i}] = [{','.join(map(str, row))}] is out of bounds: need "
                f"0 <= index < [{','.join(map(str, shape))}]", op=op)
        if i and tuple(row) <= tuple(idx[i - 1]):
            what = "is repeated" if tuple(row) == tuple(idx[i - 1]) else "is out of order"
            raise errors.InvalidArgumentError(
                f"{op}: indices[{i}] = [{','.join(map(str, row))}] {what}; "
                "use pg.sparse.reorder first", op=op)


def to_dense(sp_input: Any, default_value: Any = None, validate_indices: bool = True,
             name: str | None = None) -> Tensor:
    """The dense tensor: the values at their indices, `default_value` (0,
    or b"" for strings) elsewhere."""
    st = _check(sp_input, "to_dense")
    idx, shape = st.indices.numpy(), st.dense_shape.numpy()
    if validate_indices:
        _validate(idx, shape, "SparseToDense")
    dt = st.dtype
    if default_value is None:
        default_value = b"" if dt is dtypes.string else 0
    if dt is dtypes.string:  # string tensors live on the host
        out = np.full(tuple(shape), default_value if isinstance(default_value, bytes)
                      else str(default_value).encode(), object)
        out[tuple(idx.T)] = st.values.numpy()
        return constant(out)
    # one segment per dense element: the values land at their (validated,
    # unique) positions; the default is added outside the sum and taken off
    # the values, so every element that holds no value is the default
    dims = [int(d) for d in shape]
    flat = np.ravel_multi_index(tuple(idx.T), dims).astype(np.int64) if len(idx) \
        else np.zeros(0, np.int64)
    default = math_ops.cast(default_value, dt)
    values = math_ops.subtract(st.values, default) if default_value else st.values
    out = math_ops.unsorted_segment_sum(values, flat, int(np.prod(dims)))
    out = math_ops.add(out, default) if default_value else out
    return math_ops.reshape(out, dims)


def from_dense(tensor: Any, name: str | None = None) -> SparseTensor:
    """The non-zero (non-empty for strings) elements of `tensor`."""
    t = convert_to_tensor(tensor)
    a = t.numpy()
    zero = b"" if t.dtype is dtypes.string else 0
    idx = np.argwhere(np.asarray(a != zero)).astype(np.int64)
    values = nd_index_ops.gather_nd(t, idx.reshape(-1, a.ndim)) if idx.size or a.ndim \
        else math_ops.reshape(t, [-1])
    return SparseTensor(idx.reshape(-1, a.ndim), values, np.array(a.shape, np.int64))


def reorder(sp_input: Any, name: str | None = None) -> SparseTensor:
    """The same sparse tensor with its indices in row-major order."""
    st = _check(sp_input, "reorder")
    idx = st.indices.numpy()
    order = np.lexsort(idx.T[::-1]) if idx.size else np.arange(len(idx))
    return SparseTensor(idx[order], array_ops.gather(st.values, order.astype(np.int64)),
                        st.dense_shape)


def add(a: Any, b: Any, threshold: Any = 0, name: str | None = None) -> Any:
    """a + b: a SparseTensor when both are sparse (values at the same index
    summed; sums whose magnitude is below `threshold` dropped), a dense
    tensor when one is dense."""
    if not isinstance(a, SparseTensor):
        a, b = b, a
    a = _check(a, "add")
    if not isinstance(b, SparseTensor):
        return math_ops.add(to_dense(a, validate_indices=False), convert_to_tensor(b, a.dtype))
    sa, sb = a.dense_shape.numpy(), b.dense_shape.numpy()
    if sa.tolist() != sb.tolist():
        raise errors.InvalidArgumentError(
            f"SparseAdd: operands' shapes do not match: got {sa.tolist()} and {sb.tolist()}",
            op="SparseAdd")
    if a.dtype != b.dtype:
        raise errors.InvalidArgumentError(
            f"SparseAdd: operands' dtypes differ: {a.dtype.name} and {b.dtype.name}",
            op="SparseAdd")
    idx = np.concatenate([a.indices.numpy(), b.indices.numpy()]).reshape(-1, len(sa))
    keys, seg = np.unique(idx, axis=0, return_inverse=True) if len(idx) else (idx, idx[:, 0])
    values = math_ops.unsorted_segment_sum(array_ops.concat([a.values, b.values], 0),
                                           seg.reshape(-1).astype(np.int64), len(keys))
    if threshold:
        keep = np.abs(values.numpy()) >= threshold
        keys, values = keys[keep], array_ops.gather(values, np.flatnonzero(keep))
    return SparseTensor(keys, values, sa)


def reduce_sum(sp_input: Any, axis: Any = None, keepdims: Any = None,
               output_is_sparse: bool = False, name: str | None = None) -> Any:
    """The sum of the elements along `axis` (all axes when None); a dense
    tensor, or a SparseTensor of its non-zeros when `output_is_sparse`."""
    st = _check(sp_input, "reduce_sum")
    out = math_ops.reduce_sum(to_dense(st, validate_indices=False), axis=axis,
                              keepdims=bool(keepdims))
    return from_dense(out) if output_is_sparse else out


def sparse_dense_matmul(sp_a: Any, b: Any, adjoint_a: bool = False, adjoint_b: bool = False,
                        name: str | None = None) -> Tensor:
    """sp_a @ b for a sparse matrix `sp_a` and a dense `b` (either may be the
    sparse one, as in TensorFlow)."""
    if isinstance(b, SparseTensor) and not isinstance(sp_a, SparseTensor):
        return math_ops.matmul(sp_a, to_dense(b, validate_indices=False),
                               transpose_a=adjoint_a, transpose_b=adjoint_b)
    st = _check(sp_a, "sparse_dense_matmul")
    if st.shape.rank != 2:
        raise errors.InvalidArgumentError(
            f"SparseTensorDenseMatMul: sp_a must be a matrix, got shape {st.shape}",
            op="SparseTensorDenseMatMul")
    return math_ops.matmul(to_dense(st, validate_indices=False), b,
                           transpose_a=adjoint_a, transpose_b=adjoint_b)


def concat(axis: int, sp_inputs: Sequence[Any], expand_nonconcat_dims: bool = False,
           name: str | None = None, **kwargs: Any) -> SparseTensor:
    """The sparse tensors joined along `axis` (in row-major order); with
    `expand_nonconcat_dims` the other dimensions grow to the largest."""
    sts = [_check(s, "concat") for s in sp_inputs]
    if len(sts) < 2:
        raise errors.InvalidArgumentError("SparseConcat: needs at least 2 inputs",
                                          op="SparseConcat")
    shapes = [s.dense_shape.numpy() for s in sts]
    rank = len(shapes[0])
    if any(len(s) != rank for s in shapes):
        raise errors.InvalidArgumentError("SparseConcat: the inputs' ranks differ: "
                                          f"{[s.tolist() for s in shapes]}", op="SparseConcat")
    ax = axis + rank if axis < 0 else axis
    if not 0 <= ax < rank:
        raise errors.InvalidArgumentError(
            f"SparseConcat: axis {axis} is out of range for rank {rank}", op="SparseConcat")
    out_shape = np.max(shapes, axis=0) if expand_nonconcat_dims else shapes[0].copy()
    for s in shapes[1:]:
        other = [d for d in range(rank) if d != ax]
        if not expand_nonconcat_dims and s[other].tolist() != out_shape[other].tolist():
            raise errors.InvalidArgumentError(
                f"SparseConcat: dimensions other than {ax} must match, got "
                f"{[x.tolist() for x in shapes]}", op="SparseConcat")
    offsets = np.concatenate([[0], np.cumsum([s[ax] for s in shapes])])
    out_shape[ax] = offsets[-1]
    parts = []
    for s, off in zip(sts, offsets):
        i = s.indices.numpy().copy()
        i[:, ax] += off
        parts.append(i)
    idx = np.concatenate(parts)
    values = array_ops.concat([s.values for s in sts], 0)
    return reorder(SparseTensor(idx, values, out_shape))


def expand_dims(sp_input: Any, axis: int = -1, name: str | None = None) -> SparseTensor:
    """A dimension of size 1 inserted at `axis`."""
    st = _check(sp_input, "expand_dims")
    rank = st.shape.rank
    ax = axis + rank + 1 if axis < 0 else axis
    idx = np.insert(st.indices.numpy(), ax, 0, axis=1)
    return SparseTensor(idx, st.values, np.insert(st.dense_shape.numpy(), ax, 1))
