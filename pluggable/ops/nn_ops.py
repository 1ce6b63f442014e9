"""Neural-network ops (the implementation behind ``pg.nn``)."""
from __future__ import annotations

from typing import Any, Sequence

from ..framework import errors
from ..framework.tensor import Tensor
from ..runtime.tensors import convert_to_tensor
from . import raw_ops


def relu(features: Any) -> Tensor:
    """max(features, 0) (op Relu)."""
    return raw_ops.Relu(features=features)


def softmax(logits: Any, axis: int = -1) -> Tensor:
    """Softmax over the last axis (op Softmax)."""
    logits = convert_to_tensor(logits)
    if axis not in (-1, logits.ndim - 1):
        raise errors.UnimplementedError(f"softmax over axis {axis}: only the last axis is supported")
    return raw_ops.Softmax(logits=logits)


def _quad(v: Any, name: str) -> list[int]:
    if isinstance(v, int):
        return [1, v, v, 1]
    v = list(v)
    if len(v) == 2:
        return [1, v[0], v[1], 1]
    if len(v) == 4:
        return v
    raise errors.InvalidArgumentError(f"conv2d: {name} must be an int, 2 or 4 values, got {v}")


def conv2d(input: Any, filters: Any, strides: Any = 1, padding: str = "VALID",  # noqa: A002
           data_format: str = "NHWC", dilations: Any = 1,
           explicit_paddings: Sequence[int] = ()) -> Tensor:
    """2-D convolution of NHWC `input` with HWIO `filters` (op Conv2D)."""
    return raw_ops.Conv2D(input=input, filter=filters, strides=_quad(strides, "strides"),
                          padding=padding, data_format=data_format,
                          dilations=_quad(dilations, "dilations"),
                          explicit_paddings=list(explicit_paddings))
