"""``pg.types.experimental.TraceType``: how an argument of a ``pg.function``
that is not a tensor keys the function's traces (TensorFlow's tracing
protocol). An object whose class defines ``__tf_tracing_type__(context)``
is keyed by the TraceType that method returns: calls whose arguments have
equal trace types share one trace, and the trace runs with the type's
``placeholder_value()``."""
from __future__ import annotations

import abc
from typing import Any, Sequence


class TraceType(abc.ABC):
    """The type of a traced argument: hashable and comparable, so that equal
    types share a trace."""

    @abc.abstractmethod
    def is_subtype_of(self, other: "TraceType") -> bool:
        """Whether a trace made for `other` can take a value of this type."""

    @abc.abstractmethod
    def most_specific_common_supertype(self, others: Sequence["TraceType"]) -> Any:
        """The most specific type that this one and `others` all are, or None."""

    @abc.abstractmethod
    def placeholder_value(self, placeholder_context: Any = None) -> Any:
        """The value the function is traced with for arguments of this type."""

    @abc.abstractmethod
    def __eq__(self, other: Any) -> bool: ...

    @abc.abstractmethod
    def __hash__(self) -> int: ...


def tracing_type(x: Any) -> TraceType | None:
    """`x`'s TraceType when its class defines ``__tf_tracing_type__``."""
    method = getattr(type(x), "__tf_tracing_type__", None)
    if method is None:
        return None
    t = method(x, None)
    if not isinstance(t, TraceType):
        raise TypeError(f"{type(x).__name__}.__tf_tracing_type__ must return a "
                        f"pg.types.experimental.TraceType, got {type(t).__name__}")
    return t
