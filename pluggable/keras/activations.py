"""Activations by Keras name (``activations.get("relu")``)."""
from __future__ import annotations

from typing import Any, Callable

from ..ops import math_ops, nn_ops


def linear(x: Any) -> Any:
    """The identity."""
    return x


def _softmax(x: Any, axis: int = -1) -> Any:
    return nn_ops.softmax(x, axis=axis)


_BY_NAME: dict[str, Callable] = {
    "linear": linear, "relu": nn_ops.relu, "relu6": nn_ops.relu6, "elu": nn_ops.elu,
    "selu": nn_ops.selu, "sigmoid": math_ops.sigmoid, "tanh": math_ops.tanh,
    "softmax": _softmax, "softplus": nn_ops.softplus, "gelu": nn_ops.gelu,
    "silu": nn_ops.silu, "swish": nn_ops.silu, "leaky_relu": nn_ops.leaky_relu,
    "exponential": math_ops.exp,
}
globals().update({k: v for k, v in _BY_NAME.items() if k not in globals()})


def get(identifier: "str | Callable | None") -> Callable:
    """The activation for a name, a callable (returned as is) or None (linear)."""
    if identifier is None:
        return linear
    if callable(identifier):
        return identifier
    if isinstance(identifier, str) and identifier in _BY_NAME:
        return _BY_NAME[identifier]
    raise ValueError(f"Could not interpret activation function identifier: {identifier!r}; "
                     f"known names: {', '.join(sorted(_BY_NAME))}, or pass a callable")
