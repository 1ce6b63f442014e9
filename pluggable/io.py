"""``pg.io``: TensorFlow's ``tf.io`` functions that pluggable has."""
from __future__ import annotations

from typing import Any

from .framework import dtypes
from .framework.tensor import Tensor
from .ops import raw_ops

__all__ = ["decode_raw", "serialize_tensor", "parse_tensor"]


def decode_raw(input_bytes: Any, out_type: Any, little_endian: bool = True,
               fixed_length: Any = None, name: str | None = None) -> Tensor:
    """The bytes of each string read as numbers of `out_type` (one more,
    last, axis); every string must have the same length (op DecodeRaw)."""
    if fixed_length is not None:
        raise NotImplementedError("pg.io.decode_raw: fixed_length is not supported; pad or "
                                  "cut the strings to one length first (pg.strings.substr)")
    return raw_ops.DecodeRaw(bytes=input_bytes, out_type=dtypes.as_dtype(out_type),
                             little_endian=little_endian)


def serialize_tensor(tensor: Any, name: str | None = None) -> Tensor:
    """`tensor` as a scalar string holding its TensorProto, the bytes
    TensorFlow's ``tf.io.serialize_tensor`` writes (op SerializeTensor)."""
    return raw_ops.SerializeTensor(tensor=tensor)


def parse_tensor(serialized: Any, out_type: Any, name: str | None = None) -> Tensor:
    """The tensor a serialized TensorProto holds; its dtype must be
    `out_type` (op ParseTensor)."""
    return raw_ops.ParseTensor(serialized=serialized, out_type=dtypes.as_dtype(out_type))
