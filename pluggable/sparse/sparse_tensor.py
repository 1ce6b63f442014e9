"""``pg.SparseTensor``: TensorFlow's sparse tensor, three tensors that
describe a dense one: ``indices`` (int64 [N, rank], the positions that hold
a value, in row-major order), ``values`` ([N], any dtype) and
``dense_shape`` (int64 [rank]); every other element is zero (or the
``default_value`` that ``to_dense`` is given)."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..framework import dtypes, errors
from ..framework.tensor import Tensor
from ..framework.tensor_shape import TensorShape
from ..runtime.tensors import constant, convert_to_tensor


def _host(t: Any) -> np.ndarray:
    return np.asarray(t.numpy() if isinstance(t, Tensor) else t)


class SparseTensor:
    """A sparse tensor (``tf.sparse.SparseTensor``)::

        st = pg.SparseTensor(indices=[[0, 0], [1, 2]], values=[1, 2], dense_shape=[3, 4])
        pg.sparse.to_dense(st)      # [[1 0 0 0] [0 0 2 0] [0 0 0 0]]
    """

    def __init__(self, indices: Any, values: Any, dense_shape: Any):
        idx = _host(indices)
        shape = _host(dense_shape)
        if idx.size == 0:
            idx = idx.reshape(0, shape.size if shape.ndim == 1 else 0)
        if idx.ndim != 2 or not (idx.dtype.kind in "iu" or idx.size == 0):
            raise errors.InvalidArgumentError(
                f"SparseTensor: indices must be an integer matrix [N, rank], got shape "
                f"{list(idx.shape)}")
        if shape.ndim != 1 or shape.dtype.kind not in "iu" and shape.size:
            raise errors.InvalidArgumentError(
                f"SparseTensor: dense_shape must be an integer vector, got {shape.tolist()}")
        vals = values if isinstance(values, Tensor) else convert_to_tensor(values)
        if vals.shape.rank != 1 or vals.shape[0] != idx.shape[0]:
            raise errors.InvalidArgumentError(
                f"SparseTensor: values must be a vector with one value per row of indices "
                f"({idx.shape[0]}), got shape {list(vals.shape)}")
        if idx.shape[1] != shape.size:
            raise errors.InvalidArgumentError(
                f"SparseTensor: indices have {idx.shape[1]} columns but dense_shape has rank "
                f"{shape.size}")
        self._indices = constant(idx.astype(np.int64))
        self._values = vals
        self._dense_shape = constant(shape.astype(np.int64))

    @classmethod
    def from_value(cls, value: Any) -> "SparseTensor":
        if isinstance(value, SparseTensor):
            return value
        return cls(value.indices, value.values, value.dense_shape)

    @property
    def indices(self) -> Tensor:
        return self._indices

    @property
    def values(self) -> Tensor:
        return self._values

    @property
    def dense_shape(self) -> Tensor:
        return self._dense_shape

    @property
    def dtype(self) -> dtypes.DType:
        return self._values.dtype

    @property
    def shape(self) -> TensorShape:
        return TensorShape([int(d) for d in self._dense_shape.numpy()])

    def get_shape(self) -> TensorShape:
        return self.shape

    def with_values(self, new_values: Any) -> "SparseTensor":
        """These positions holding `new_values`."""
        return SparseTensor(self._indices, new_values, self._dense_shape)

    def __pg_flatten__(self) -> tuple[list, tuple]:
        return [self._indices, self._values, self._dense_shape], ()

    @classmethod
    def __pg_unflatten__(cls, static: tuple, components: list) -> "SparseTensor":
        return cls(*components)

    def __repr__(self) -> str:
        return (f"SparseTensor(indices={self._indices!s}, values={self._values!s}, "
                f"dense_shape={self._dense_shape!s})")

    __str__ = __repr__
