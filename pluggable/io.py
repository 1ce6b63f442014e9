"""``pg.io``: TensorFlow's ``tf.io`` functions that pluggable has."""
from __future__ import annotations

from typing import Any

from .framework import dtypes
from .framework.tensor import Tensor
from .ops import raw_ops

__all__ = ["decode_raw"]


def decode_raw(input_bytes: Any, out_type: Any, little_endian: bool = True,
               fixed_length: Any = None, name: str | None = None) -> Tensor:
    """The bytes of each string read as numbers of `out_type` (one more,
    last, axis); every string must have the same length (op DecodeRaw)."""
    if fixed_length is not None:
        raise NotImplementedError("pg.io.decode_raw: fixed_length is not supported; pad or "
                                  "cut the strings to one length first (pg.strings.substr)")
    return raw_ops.DecodeRaw(bytes=input_bytes, out_type=dtypes.as_dtype(out_type),
                             little_endian=little_endian)
