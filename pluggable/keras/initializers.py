"""Weight initializers by Keras name; random ones draw from the global
generator (``pg.random.set_seed`` makes them repeatable)."""
from __future__ import annotations

import math
from typing import Any, Callable

from ..framework import dtypes
from ..ops import array_ops
from ..ops.random_ops import get_global_generator


def _fans(shape: tuple) -> tuple[int, int]:
    if len(shape) == 0:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    receptive = math.prod(shape[:-2])
    return shape[-2] * receptive, shape[-1] * receptive


def zeros(shape: tuple, dtype: Any = dtypes.float32) -> Any:
    return array_ops.zeros(shape, dtype=dtype)


def ones(shape: tuple, dtype: Any = dtypes.float32) -> Any:
    return array_ops.ones(shape, dtype=dtype)


def glorot_uniform(shape: tuple, dtype: Any = dtypes.float32) -> Any:
    """Uniform in [-l, l], l = sqrt(6 / (fan_in + fan_out))."""
    fan_in, fan_out = _fans(shape)
    limit = math.sqrt(6.0 / (fan_in + fan_out))
    return get_global_generator().uniform(shape, -limit, limit, dtype=dtype)


def glorot_normal(shape: tuple, dtype: Any = dtypes.float32) -> Any:
    """Truncated normal of stddev sqrt(2 / (fan_in + fan_out))."""
    fan_in, fan_out = _fans(shape)
    std = math.sqrt(2.0 / (fan_in + fan_out)) / 0.87962566103423978
    return get_global_generator().truncated_normal(shape, 0.0, std, dtype=dtype)


def he_normal(shape: tuple, dtype: Any = dtypes.float32) -> Any:
    """Truncated normal of stddev sqrt(2 / fan_in)."""
    fan_in, _ = _fans(shape)
    std = math.sqrt(2.0 / fan_in) / 0.87962566103423978
    return get_global_generator().truncated_normal(shape, 0.0, std, dtype=dtype)


def random_normal(shape: tuple, dtype: Any = dtypes.float32) -> Any:
    """Normal of stddev 0.05, as Keras's RandomNormal()."""
    return get_global_generator().normal(shape, 0.0, 0.05, dtype=dtype)


_BY_NAME: dict[str, Callable] = {
    "zeros": zeros, "ones": ones, "glorot_uniform": glorot_uniform,
    "glorot_normal": glorot_normal, "he_normal": he_normal, "random_normal": random_normal,
}


def get(identifier: "str | Callable") -> Callable:
    """The initializer for a name or a callable ``(shape, dtype) -> value``."""
    if callable(identifier):
        return identifier
    if isinstance(identifier, str) and identifier in _BY_NAME:
        return _BY_NAME[identifier]
    raise ValueError(f"Could not interpret initializer identifier: {identifier!r}; known "
                     f"names: {', '.join(sorted(_BY_NAME))}, or pass a callable "
                     "(shape, dtype) -> value")
