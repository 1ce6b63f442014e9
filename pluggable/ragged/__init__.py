"""``pg.ragged``: ragged tensors (``pg.RaggedTensor``), TensorFlow's
``tf.ragged`` with the same semantics.

    rt = pg.ragged.constant([[3, 1, 4, 1], [], [5, 9, 2]])
    pg.reduce_mean(rt, axis=1)            # a dense tensor of 3 means
    rt + 1, rt * rt, pg.math.square(rt)   # ragged results
    pg.concat([rt, rt], axis=1)           # rows joined

Importing this package registers the ragged forms of the ``pg`` functions
that TensorFlow extends to ragged tensors (``framework.api_dispatch``):
elementwise math, reductions, ``concat``, ``stack``, ``gather``,
``reverse``, ``tile``, ``zeros_like`` / ``ones_like``, ``size``, ``rank``,
``pg.nn.relu`` and ``pg.nn.embedding_lookup``; ``pg.shape`` of a ragged
tensor is a ``DynamicRaggedShape``, which ``pg.zeros``, ``pg.ones``,
``pg.fill`` and ``pg.reshape`` accept."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..framework import api_dispatch, dtypes
from ..framework.tensor import Tensor
from ..framework.tensor_shape import TensorShape
from ..ops import array_ops, math_ops, nn_ops
from ..runtime.tensors import constant as _pg_constant
from . import ragged_array, ragged_factory, ragged_getitem, ragged_math
from .ragged_array import boolean_mask
from .ragged_factory import constant, ragged_range as range  # noqa: A004
from .dynamic_ragged_shape import DynamicRaggedShape, RowPartition
from .ragged_math import map_flat_values
from .ragged_tensor import RaggedTensor

__all__ = ["DynamicRaggedShape", "RowPartition", "RaggedTensor", "RaggedTensorSpec",
           "boolean_mask", "constant", "map_flat_values", "range", "stack", "is_ragged",
           "row_splits_to_segment_ids", "segment_ids_to_row_splits"]


def row_splits_to_segment_ids(splits: Any, name: str | None = None,
                              out_type: Any = None) -> Tensor:
    """The row of each value of a partition given by `splits`."""
    return RaggedTensor.from_row_splits(np.zeros(int(np.asarray(
        splits.numpy() if isinstance(splits, Tensor) else splits)[-1])), splits).value_rowids()


def segment_ids_to_row_splits(segment_ids: Any, num_segments: Any = None,
                              out_type: Any = None, name: str | None = None) -> Tensor:
    """The row splits of sorted `segment_ids` (`num_segments` rows)."""
    ids = np.asarray(segment_ids.numpy() if isinstance(segment_ids, Tensor) else segment_ids)
    return RaggedTensor.from_value_rowids(np.zeros(ids.size), ids, num_segments).row_splits


def is_ragged(value: Any) -> bool:
    """Whether `value` is a RaggedTensor."""
    return isinstance(value, RaggedTensor)


def stack(values: Any, axis: int = 0, name: str | None = None) -> Any:
    """``tf.ragged.stack``: pg.stack that accepts ragged and dense inputs."""
    if any(isinstance(v, RaggedTensor) for v in values):
        return ragged_array.stack(values, axis)
    return array_ops.stack(values, axis)


class RaggedTensorSpec:
    """The type of a ragged tensor (``tf.RaggedTensorSpec``): shape, dtype,
    ragged_rank and the row_splits dtype. In a ``pg.function``'s
    ``input_signature`` it checks each call's value, which is traced for
    its row partitions."""

    __pg_composite_spec__ = True

    def __init__(self, shape: Any = None, dtype: Any = dtypes.float32,
                 ragged_rank: int | None = None, row_splits_dtype: Any = dtypes.int64,
                 flat_values_spec: Any = None):
        self.shape = TensorShape(shape) if not isinstance(shape, TensorShape) else shape
        self.dtype = dtypes.as_dtype(dtype)
        rank = self.shape.rank
        if ragged_rank is None:
            if rank is None:
                raise ValueError("Must specify ragged_rank or a shape with a known rank.")
            ragged_rank = rank - 1
        if rank is not None and not 0 <= ragged_rank < max(rank, 1):
            raise ValueError(f"ragged_rank must be non-negative and less than the rank "
                             f"({rank}); got {ragged_rank}")
        self.ragged_rank = ragged_rank
        self.row_splits_dtype = dtypes.as_dtype(row_splits_dtype)

    @classmethod
    def from_value(cls, value: RaggedTensor) -> "RaggedTensorSpec":
        return cls(value.shape, value.dtype, value.ragged_rank, value.row_splits_dtype)

    def is_compatible_with(self, value: Any) -> bool:
        if isinstance(value, RaggedTensor):
            other = RaggedTensorSpec.from_value(value)
        elif isinstance(value, RaggedTensorSpec):
            other = value
        else:
            return False
        return (other.dtype == self.dtype and other.ragged_rank == self.ragged_rank and
                other.row_splits_dtype == self.row_splits_dtype and
                self.shape.is_compatible_with(other.shape))

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, RaggedTensorSpec) and repr(self) == repr(other)

    def __hash__(self) -> int:
        return hash(repr(self))

    def __repr__(self) -> str:
        return (f"RaggedTensorSpec({self.shape!r}, tf.{self.dtype.name}, {self.ragged_rank}, "
                f"tf.{self.row_splits_dtype.name})")


# ------------------------------------------------- dispatch of pg.* functions

_BINARY = ("add", "subtract", "multiply", "divide", "realdiv", "truediv", "floordiv",
           "floormod", "maximum", "minimum", "pow", "squared_difference", "less",
           "less_equal", "greater", "greater_equal", "equal", "not_equal", "logical_and",
           "logical_or", "logical_xor")
_UNARY = ("logical_not", "negative", "abs", "exp", "log", "sqrt", "tanh", "sigmoid", "square",
          "rsqrt", "erf", "floor", "ceil", "round", "sign", "reciprocal", "sin", "cos", "tan",
          "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "expm1", "log1p",
          "erfc", "cast")
_REDUCTIONS = {"reduce_sum": "sum", "reduce_mean": "mean", "reduce_max": "max",
               "reduce_min": "min", "reduce_prod": "prod", "reduce_any": "any",
               "reduce_all": "all"}
_TYPES = (RaggedTensor,)


def _size(input: Any, out_type: Any = dtypes.int32,  # noqa: A002
          name: str | None = None) -> Tensor:
    return _pg_constant(np.asarray(input.flat_values.size,
                                   dtypes.as_dtype(out_type).as_numpy_dtype))


def _rank(input: Any, name: str | None = None) -> Tensor:  # noqa: A002
    return _pg_constant(np.int32(input.shape.rank))


def _shape(input: Any, out_type: Any = dtypes.int32,  # noqa: A002
           name: str | None = None) -> DynamicRaggedShape:
    return DynamicRaggedShape.from_tensor(input, out_type)


def _like(fn):
    def ragged_like(input: Any, dtype: Any = None, name: str | None = None) -> Any:  # noqa: A002
        return input.with_flat_values(fn(input.flat_values, dtype))
    return ragged_like


def _embedding_lookup(params: Any, ids: Any, name: str | None = None, **kwargs: Any) -> Any:
    return ids.with_flat_values(nn_ops.embedding_lookup(params, ids.flat_values, **kwargs))


def _register() -> None:
    for name in _BINARY:
        fn = getattr(math_ops, name)
        api_dispatch.register(fn, _TYPES, ragged_math.binary(fn))
    for name in _UNARY:
        fn = getattr(math_ops, name)
        api_dispatch.register(fn, _TYPES, ragged_math.unary(fn))
    for name, kind in _REDUCTIONS.items():
        api_dispatch.register(getattr(math_ops, name), _TYPES, ragged_math.reduction(kind))
    register = api_dispatch.register
    register(nn_ops.relu, _TYPES, ragged_math.unary(nn_ops.relu))
    register(nn_ops.embedding_lookup, _TYPES, _embedding_lookup)
    register(array_ops.concat, _TYPES, ragged_array.concat)
    register(array_ops.stack, _TYPES, ragged_array.stack)
    register(array_ops.gather, _TYPES, ragged_array.gather)
    register(array_ops.reverse, _TYPES, ragged_array.reverse)
    register(array_ops.tile, _TYPES, ragged_array.tile)
    register(array_ops.size, _TYPES, _size)
    register(array_ops.rank, _TYPES, _rank)
    register(array_ops.zeros_like, _TYPES, _like(array_ops.zeros_like))
    register(array_ops.ones_like, _TYPES, _like(array_ops.ones_like))
    register(array_ops.shape, _TYPES, _shape)
    shapes = (DynamicRaggedShape,)
    register(array_ops.zeros, shapes, lambda shape, dtype=dtypes.float32, name=None:
             shape._filled(lambda s: array_ops.zeros(s, dtype)))
    register(array_ops.ones, shapes, lambda shape, dtype=dtypes.float32, name=None:
             shape._filled(lambda s: array_ops.ones(s, dtype)))
    register(math_ops.fill, shapes, lambda dims, value, name=None:
             dims._filled(lambda s: math_ops.fill(s, value)))
    register(math_ops.reshape, shapes, lambda tensor, shape, name=None:
             shape._filled(lambda s: math_ops.reshape(tensor, s)))


def _install_operators() -> None:
    m = math_ops
    pairs = {"add": m.add, "sub": m.subtract, "mul": m.multiply, "truediv": m.truediv,
             "floordiv": m.floordiv, "mod": m.floormod, "pow": m.pow}
    for name, fn in pairs.items():
        op = ragged_math.binary(fn)
        setattr(RaggedTensor, f"__{name}__", lambda a, b, op=op: op(a, b))
        setattr(RaggedTensor, f"__r{name}__", lambda a, b, op=op: op(b, a))
    for name, fn in {"lt": m.less, "le": m.less_equal, "gt": m.greater,
                     "ge": m.greater_equal}.items():
        op = ragged_math.binary(fn)
        setattr(RaggedTensor, f"__{name}__", lambda a, b, op=op: op(a, b))
    for name, fn in {"and": m.logical_and, "or": m.logical_or, "xor": m.logical_xor}.items():
        op = ragged_math.binary(fn)
        setattr(RaggedTensor, f"__{name}__", lambda a, b, op=op: op(a, b))
        setattr(RaggedTensor, f"__r{name}__", lambda a, b, op=op: op(b, a))
    # A tensor on the left of a ragged one: Tensor's operator raises before
    # Python would try the ragged tensor's reflected one, so Tensor's
    # operators learn the ragged right operand (once this package is loaded).
    forward = {"add": m.add, "sub": m.subtract, "mul": m.multiply, "truediv": m.truediv,
               "floordiv": m.floordiv, "mod": m.floormod, "pow": m.pow, "lt": m.less,
               "le": m.less_equal, "gt": m.greater, "ge": m.greater_equal,
               "and": m.logical_and, "or": m.logical_or, "xor": m.logical_xor}
    for name, fn in forward.items():
        dense = getattr(Tensor, f"__{name}__")
        if getattr(dense, "_ragged_aware", False):
            continue
        op = ragged_math.binary(fn)

        def method(a: Any, b: Any, dense=dense, op=op) -> Any:
            if type(b) is RaggedTensor:
                return op(a, b)
            return dense(a, b)
        method._ragged_aware = True
        setattr(Tensor, f"__{name}__", method)
    RaggedTensor.__neg__ = lambda a: a.with_flat_values(m.negative(a.flat_values))
    RaggedTensor.__abs__ = lambda a: a.with_flat_values(m.abs(a.flat_values))
    RaggedTensor.__invert__ = lambda a: a.with_flat_values(m.logical_not(a.flat_values))
    RaggedTensor.__pos__ = lambda a: a


def _install_methods() -> None:
    RaggedTensor.from_tensor = classmethod(ragged_factory.from_tensor_method)
    RaggedTensor.to_tensor = ragged_factory.to_tensor
    RaggedTensor.merge_dims = ragged_factory.merge_dims
    RaggedTensor.__getitem__ = ragged_getitem.getitem


_register()
_install_operators()
_install_methods()
