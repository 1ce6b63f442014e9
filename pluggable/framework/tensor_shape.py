"""``TensorShape``: the type of ``Tensor.shape``, as TensorFlow's.

A tuple of dimension sizes (ints, or None for a size not known while a
function is traced), so it compares, hashes, indexes and unpacks like the
tuple it was, plus TensorFlow's methods: ``as_list()``, ``rank`` /
``ndims``, ``dims``, ``is_fully_defined()``, ``num_elements()``,
``is_compatible_with``, ``merge_with``, ``concatenate``. An unknown rank
is ``TensorShape(None)`` (rank None; ``as_list`` raises ValueError);
``Tensor.shape`` of a traced tensor of unknown rank is None, which the
graph code relies on. It equals a list or tuple of the same sizes."""
from __future__ import annotations

from typing import Any, Iterable


class TensorShape(tuple):
    """The shape of a tensor (see the module docstring)."""

    __slots__ = ()
    _UNKNOWN: "TensorShape"

    def __new__(cls, dims: Iterable[Any] | None = ()) -> "TensorShape":
        if dims is None:
            return cls._UNKNOWN if hasattr(cls, "_UNKNOWN") else super().__new__(cls, ())
        if isinstance(dims, TensorShape):
            return dims
        if isinstance(dims, int):
            dims = (dims,)
        return super().__new__(cls, (None if d is None else int(getattr(d, "value", d))
                                     for d in dims))

    # ------------------------------------------------------------- TensorFlow API
    @property
    def rank(self) -> int | None:
        """The number of dimensions, or None if it is not known."""
        return None if self is TensorShape._UNKNOWN else len(self)

    ndims = rank

    @property
    def dims(self) -> list | None:
        return None if self.rank is None else list(self)

    def as_list(self) -> list:
        """The sizes as a list (None for unknown ones)."""
        if self.rank is None:
            raise ValueError("as_list() is not defined on an unknown TensorShape.")
        return list(self)

    def is_fully_defined(self) -> bool:
        return self.rank is not None and all(d is not None for d in self)

    def num_elements(self) -> int | None:
        """The number of elements, or None if a size is unknown."""
        if not self.is_fully_defined():
            return None
        n = 1
        for d in self:
            n *= d
        return n

    def is_compatible_with(self, other: Any) -> bool:
        """Whether the two shapes agree wherever both are known."""
        other = as_shape(other)
        if self.rank is None or other.rank is None:
            return True
        return len(self) == len(other) and all(
            a is None or b is None or a == b for a, b in zip(self, other))

    def assert_is_compatible_with(self, other: Any) -> None:
        if not self.is_compatible_with(other):
            raise ValueError(f"Shapes {self} and {as_shape(other)} are incompatible")

    def merge_with(self, other: Any) -> "TensorShape":
        """The shape with what either knows; ValueError if they disagree."""
        other = as_shape(other)
        self.assert_is_compatible_with(other)
        if self.rank is None:
            return other
        if other.rank is None:
            return self
        return TensorShape(a if a is not None else b for a, b in zip(self, other))

    def concatenate(self, other: Any) -> "TensorShape":
        other = as_shape(other)
        if self.rank is None or other.rank is None:
            return TensorShape(None)
        return TensorShape(tuple(self) + tuple(other))

    def with_rank(self, rank: int) -> "TensorShape":
        if self.rank is None:
            return TensorShape([None] * rank)
        if len(self) != rank:
            raise ValueError(f"Shape {self} must have rank {rank}")
        return self

    # ------------------------------------------------------------- tuple behaviour
    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            if self.rank is None:
                return self
            return TensorShape(tuple.__getitem__(self, key))
        return tuple.__getitem__(self, key)

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, TensorShape) and (self.rank is None or other.rank is None):
            return self is other
        if isinstance(other, list):
            other = tuple(other)
        return tuple.__eq__(self, other)

    def __ne__(self, other: Any) -> bool:
        return not self == other

    __hash__ = tuple.__hash__

    def __repr__(self) -> str:
        return "TensorShape(None)" if self.rank is None else f"TensorShape({list(self)})"

    def __str__(self) -> str:
        if self.rank is None:
            return "<unknown>"
        inner = ", ".join("None" if d is None else str(d) for d in self)
        return f"({inner},)" if len(self) == 1 else f"({inner})"

    def __reduce__(self):
        return (TensorShape, (None if self.rank is None else tuple(self),))


TensorShape._UNKNOWN = tuple.__new__(TensorShape, ())


def as_shape(shape: Any) -> TensorShape:
    """`shape` (a TensorShape, list, tuple or None) as a TensorShape."""
    return shape if isinstance(shape, TensorShape) else TensorShape(shape)
