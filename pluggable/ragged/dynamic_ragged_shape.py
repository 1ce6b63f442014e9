"""The shape of a ragged tensor (``pg.shape(rt)``): TensorFlow's
``tf.experimental.DynamicRaggedShape`` over ``tf.experimental.RowPartition``s,
printed and indexed as TensorFlow does."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..framework import dtypes, errors
from ..framework.tensor import Tensor
from ..runtime import placement
from ..runtime.tensors import constant
from .ragged_tensor import RaggedTensor, _index_vector, _np, splits_of


def _host_tensor(a: Any, dt: dtypes.DType) -> Tensor:
    with placement.device("CPU:0"):
        return constant(np.asarray(a, dt.as_numpy_dtype))


class RowPartition:
    """How a level of a ragged tensor splits its values into rows
    (``tf.experimental.RowPartition``)."""

    __slots__ = ("_splits", "_uniform")

    def __init__(self, splits: np.ndarray, uniform: int | None = None):
        self._splits = splits
        self._uniform = uniform

    @classmethod
    def from_row_splits(cls, row_splits: Any, validate: bool = True,
                        dtype: Any = None) -> "RowPartition":
        s = _index_vector(row_splits, "row_splits", None if dtype is None else
                          dtypes.as_dtype(dtype))
        if validate and (s.size == 0 or s[0] != 0 or np.any(np.diff(s) < 0)):
            raise errors.InvalidArgumentError(
                "row_splits must start at 0 and be monotonically increasing")
        return cls(s)

    @classmethod
    def from_row_lengths(cls, row_lengths: Any, validate: bool = True,
                         dtype: Any = None) -> "RowPartition":
        lengths = _index_vector(row_lengths, "row_lengths", None if dtype is None else
                                dtypes.as_dtype(dtype))
        if validate and np.any(lengths < 0):
            raise errors.InvalidArgumentError("row_lengths must be non-negative")
        return cls(splits_of(lengths, lengths.dtype))

    @classmethod
    def from_value_rowids(cls, value_rowids: Any, nrows: Any = None, validate: bool = True,
                          dtype: Any = None) -> "RowPartition":
        ids = _index_vector(value_rowids, "value_rowids", None if dtype is None else
                            dtypes.as_dtype(dtype))
        n = (int(ids[-1]) + 1 if ids.size else 0) if nrows is None else int(_np(nrows))
        counts = np.bincount(ids, minlength=n)[:n] if ids.size else np.zeros(n, np.int64)
        return cls(splits_of(counts, ids.dtype))

    @classmethod
    def from_uniform_row_length(cls, uniform_row_length: Any, nvals: Any, nrows: Any = None,
                                validate: bool = True, dtype: Any = None) -> "RowPartition":
        length, nv = int(_np(uniform_row_length)), int(_np(nvals))
        n = (nv // length if length else 0) if nrows is None else int(_np(nrows))
        dt = dtypes.int64 if dtype is None else dtypes.as_dtype(dtype)
        return cls((np.arange(n + 1) * length).astype(dt.as_numpy_dtype), length)

    def row_splits(self) -> Tensor:
        return _host_tensor(self._splits, dtypes.as_dtype(self._splits.dtype))

    def row_lengths(self) -> Tensor:
        return _host_tensor(np.diff(self._splits), dtypes.as_dtype(self._splits.dtype))

    def nrows(self) -> Tensor:
        return _host_tensor(self._splits.size - 1, dtypes.as_dtype(self._splits.dtype))

    def nvals(self) -> Tensor:
        return _host_tensor(self._splits[-1], dtypes.as_dtype(self._splits.dtype))

    def uniform_row_length(self) -> Tensor | None:
        if self._uniform is None:
            return None
        return _host_tensor(self._uniform, dtypes.as_dtype(self._splits.dtype))

    @property
    def dtype(self) -> dtypes.DType:
        return dtypes.as_dtype(self._splits.dtype)

    def __repr__(self) -> str:
        return f"tf.RowPartition(row_splits={self._splits})"


class DynamicRaggedShape:
    """The shape of a (possibly ragged) tensor: its row partitions, then
    the dense ``inner_shape`` of the flat values
    (``tf.experimental.DynamicRaggedShape``). ``shape[i]`` of a uniform
    dimension is its size, of a ragged one a ValueError; ``shape[:k]``
    is the shape of the first k dimensions."""

    def __init__(self, row_partitions: Sequence[RowPartition], inner_shape: Any,
                 dtype: Any = None, validate: bool = True, static_inner_shape: Any = None):
        self._partitions = tuple(row_partitions)
        inner = np.asarray(_np(inner_shape)).reshape(-1)
        if dtype is None:
            dtype = self._partitions[0].dtype if self._partitions else (
                inner_shape.dtype if isinstance(inner_shape, Tensor) else dtypes.int64)
        self._dtype = dtypes.as_dtype(dtype)
        self._inner = inner.astype(np.int64)
        if validate and self._partitions:
            nvals = int(self._partitions[-1]._splits[-1])
            if self._inner.size == 0 or int(self._inner[0]) != nvals:
                raise errors.InvalidArgumentError(
                    f"the first dimension of inner_shape ({self._inner[:1].tolist()}) must be "
                    f"the number of values of the last row partition ({nvals})")
            for outer, inner_p in zip(self._partitions, self._partitions[1:]):
                if int(outer._splits[-1]) != inner_p._splits.size - 1:
                    raise errors.InvalidArgumentError(
                        "each row partition's number of values must be the next one's "
                        "number of rows")

    @classmethod
    def from_tensor(cls, t: Any, dtype: Any = dtypes.int64) -> "DynamicRaggedShape":
        dt = dtypes.as_dtype(dtype)
        if isinstance(t, RaggedTensor):
            parts, level = [], t
            while isinstance(level, RaggedTensor):
                parts.append(RowPartition(level._splits.astype(dt.as_numpy_dtype),
                                          level._uniform))
                level = level._values
            return cls(parts, list(level.shape), dt)
        return cls([], list(t.shape), dt)

    @classmethod
    def from_lengths(cls, lengths: Sequence[Any], num_row_partitions: int | None = None,
                     dtype: Any = dtypes.int64) -> "DynamicRaggedShape":
        """The shape with these dimension sizes (a tuple for a ragged one)."""
        dt = dtypes.as_dtype(dtype)
        lengths = list(lengths)
        if not lengths:
            return cls([], [], dt)
        if isinstance(lengths[0], (tuple, list)):
            raise ValueError("The first dimension of a shape must be uniform (an int)")
        ragged = [i for i, d in enumerate(lengths) if isinstance(d, (tuple, list))]
        k = (ragged[-1] if ragged else 0) if num_row_partitions is None else num_row_partitions
        parts, nrows = [], int(lengths[0])
        for d in lengths[1:k + 1]:
            if isinstance(d, (tuple, list)):
                if len(d) != nrows:
                    raise ValueError(f"a ragged dimension of {len(d)} lengths follows "
                                     f"{nrows} rows")
                p = RowPartition.from_row_lengths(np.asarray(d, np.int64), dtype=dt)
            else:
                p = RowPartition.from_uniform_row_length(int(d), nrows * int(d), nrows,
                                                         dtype=dt)
            parts.append(p)
            nrows = int(p._splits[-1])
        return cls(parts, [nrows] + [int(d) for d in lengths[k + 1:]], dt)

    # ---------------------------------------------------------- accessors
    @property
    def row_partitions(self) -> tuple[RowPartition, ...]:
        return self._partitions

    @property
    def num_row_partitions(self) -> int:
        return len(self._partitions)

    @property
    def rank(self) -> int:
        return self._inner.size + len(self._partitions)

    @property
    def dtype(self) -> dtypes.DType:
        return self._dtype

    @property
    def inner_shape(self) -> Tensor:
        return _host_tensor(self._inner, self._dtype)

    def static_lengths(self, ragged_lengths: bool = True) -> list:
        if not self._partitions:
            return [int(d) for d in self._inner]
        out: list = [self._partitions[0]._splits.size - 1]
        for p in self._partitions:
            if p._uniform is not None:
                out.append(p._uniform)
            else:
                out.append(tuple(int(x) for x in np.diff(p._splits)) if ragged_lengths
                           else None)
        out.extend(int(d) for d in self._inner[1:])
        return out

    def _dimension(self, i: int) -> int:
        lengths = self.static_lengths()
        if not -len(lengths) <= i < len(lengths):
            raise IndexError(f"Index {i} out of range for a shape of rank {len(lengths)}")
        d = lengths[i]
        if isinstance(d, tuple):
            raise ValueError(f"Index {i} is not uniform")
        return d

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            return self._prefix(key)
        i = int(key)
        return _host_tensor(self._dimension(i), self._dtype)

    def _prefix(self, key: slice) -> "DynamicRaggedShape":
        start, stop, step = key.indices(self.rank)
        if start != 0 or step != 1:
            lengths = self.static_lengths()[key]
            if any(isinstance(d, tuple) for d in lengths):
                raise ValueError("slicing a ragged shape: only prefixes (shape[:k]) keep "
                                 "ragged dimensions")
            return DynamicRaggedShape([], [int(d) for d in lengths], self._dtype)
        if stop <= 0:
            return DynamicRaggedShape([], [], self._dtype)
        k = min(stop - 1, len(self._partitions))
        parts = self._partitions[:k]
        nvals = int(parts[-1]._splits[-1]) if parts else self.static_lengths()[0]
        rest = [int(d) for d in self._inner[1:stop - k]] if k == len(self._partitions) else []
        return DynamicRaggedShape(parts, [nvals] + rest, self._dtype)

    def __repr__(self) -> str:
        lengths = ", ".join(str(d) for d in self.static_lengths())
        return (f"<DynamicRaggedShape lengths=[{lengths}] "
                f"num_row_partitions={self.num_row_partitions}>")

    __str__ = __repr__

    def _filled(self, make: Any) -> Any:
        """A value of this shape: ``make(inner_shape)`` partitioned."""
        result: Any = make([int(d) for d in self._inner])
        for p in reversed(self._partitions):
            result = RaggedTensor._make(result, p._splits.astype(np.int64), p._uniform)
        return result
