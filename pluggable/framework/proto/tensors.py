"""Conversions between pluggable's values and their protobuf forms.

* ``DataType`` enum values <-> ``pluggable.DType`` (the numbers are the
  same as ``TF_DataType``);
* ``TensorShapeProto`` <-> a tuple of sizes with ``None`` for unknown
  dimensions, or ``None`` for an unknown rank;
* ``TensorProto`` <-> numpy arrays, written and read as TensorFlow does
  (``tf.make_tensor_proto`` / ``tf.make_ndarray``).
"""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from .. import dtypes, errors
from ..tensor import to_array
from .library import messages

if TYPE_CHECKING:  # pragma: no cover
    from google.protobuf.message import Message

# The typed TensorProto field that holds each pluggable dtype's elements.
_VALUE_FIELD = {
    "float32": "float_val", "float64": "double_val", "int64": "int64_val",
    "int32": "int_val", "int16": "int_val", "int8": "int_val", "uint8": "int_val",
    "bool": "bool_val", "float16": "half_val", "bfloat16": "half_val",
    "uint32": "uint32_val", "uint64": "uint64_val", "string": "string_val",
    "uint16": "int_val", "int4": "int_val", "uint4": "int_val", "int2": "int_val",
    "uint2": "int_val", "float8_e5m2": "float8_val", "float8_e4m3fn": "float8_val",
    "float8_e4m3fnuz": "float8_val", "float8_e5m2fnuz": "float8_val",
    "float4_e2m1fn": "float8_val",   # (float8_val: one byte per element)
    # complex numbers as (real, imaginary) pairs of float / double
    "complex64": "scomplex_val", "complex128": "dcomplex_val",
}
_MAX_PROTO_BYTES = 1 << 31  # a serialised message must stay below 2 GiB


# ------------------------------------------------------------------ dtypes

def to_datatype(dtype: Any) -> int:
    """The ``DataType`` enum value of a pluggable dtype (a ``DType``, a name
    such as "float32", or a numpy dtype).  Raises TypeError for dtypes
    pluggable does not support."""
    return dtypes.as_dtype(dtype).enum


def from_datatype(value: int) -> dtypes.DType:
    """The pluggable ``DType`` of a ``DataType`` enum value.

    Raises ``UnimplementedError`` for TensorFlow types pluggable lacks
    (DT_VARIANT, DT_QINT8, the ``*_REF`` types ...) and
    ``InvalidArgumentError`` for numbers that are no DataType at all."""
    try:
        return dtypes.from_enum(value)
    except KeyError:
        pass
    data_type = messages().DataType
    supported = ", ".join(data_type.Name(d.enum) for d in dtypes.ALL)
    try:
        name = data_type.Name(value)
    except ValueError:
        raise errors.InvalidArgumentError(
            f"{value!r} is not a DataType value; the data is corrupt or from an "
            f"unknown writer (pluggable supports {supported})") from None
    raise errors.UnimplementedError(
        f"{name} ({value}) has no pluggable dtype; pluggable supports {supported}")


# ------------------------------------------------------------------ shapes

def to_shape_proto(shape: Sequence[int | None] | None) -> Message:
    """A ``TensorShapeProto`` for ``shape``: ``None`` for an unknown rank,
    ``None`` (or -1) in place of each unknown size."""
    m = messages()
    if shape is None:
        return m.TensorShapeProto(unknown_rank=True)
    sizes = []
    for size in shape:
        size = -1 if size is None else int(size)
        if size < -1:
            raise errors.InvalidArgumentError(
                f"shape {tuple(shape)} has the size {size}; sizes are >= 0, or None "
                "(or -1) when unknown")
        sizes.append(size)
    return m.TensorShapeProto(dim=[m.TensorShapeProto.Dim(size=s) for s in sizes])


def from_shape_proto(proto: Message) -> tuple[int | None, ...] | None:
    """The shape a ``TensorShapeProto`` describes: a tuple with ``None`` for
    unknown sizes, or ``None`` when the rank is unknown."""
    if proto.unknown_rank:
        if len(proto.dim):
            raise errors.InvalidArgumentError(
                f"a TensorShapeProto with unknown_rank has {len(proto.dim)} dimensions; "
                "an unknown rank allows none")
        return None
    out = []
    for dim in proto.dim:
        if dim.size < -1:
            raise errors.InvalidArgumentError(
                f"a TensorShapeProto has the size {dim.size}; sizes are >= 0, or -1 "
                "when unknown")
        out.append(None if dim.size == -1 else dim.size)
    return tuple(out)


# ------------------------------------------------------------------ tensors

def to_tensor_proto(value: Any, dtype: Any = None,
                    shape: Sequence[int] | None = None) -> Message:
    """A ``TensorProto`` holding ``value`` (a numpy array, a pluggable
    Tensor, a scalar or nested lists), written as ``tf.make_tensor_proto``
    writes it.

    ``dtype`` converts the value first; without it, Python floats become
    float32 and ints int32, as in ``pg.constant``.  ``shape`` reshapes a
    value with as many elements, or describes a tensor filled with a single
    value, which is then stored once.  Tensors of more than one element are
    stored as raw bytes (``tensor_content``) except bool and complex
    tensors; single values, bool and complex tensors go to the typed field
    of their dtype (complex numbers as (real, imaginary) pairs).
    """
    array = to_array(value, dtype)
    dt = dtypes.as_dtype(array.dtype)
    shape = array.shape if shape is None else _full_shape(shape, array)
    count = int(np.prod(shape, dtype=np.int64))
    if count == array.size:
        array = array.reshape(shape)
    if array.nbytes >= _MAX_PROTO_BYTES:
        raise errors.InvalidArgumentError(
            f"a TensorProto cannot hold {array.nbytes} bytes (2 GiB or more); keep "
            "tensors that large out of graphs (feed them as inputs)")
    m = messages()
    proto = m.TensorProto(dtype=dt.enum, tensor_shape=to_shape_proto(shape))
    if count == 0:
        return proto
    if count > 1 and array.size == count and not (dt.is_bool or dt.is_complex
                                                  or dt is dtypes.string):
        proto.tensor_content = _little_endian(array).tobytes()
    else:
        _write_values(proto, dt, array.reshape(-1))
    return proto


def _full_shape(shape: Sequence[int], array: np.ndarray) -> tuple[int, ...]:
    shape = tuple(int(s) for s in shape)
    count = int(np.prod(shape, dtype=np.int64))
    if any(s < 0 for s in shape):
        raise errors.InvalidArgumentError(
            f"a TensorProto needs a fully known shape, got {list(shape)}")
    if array.size != count and array.size != 1:
        raise errors.InvalidArgumentError(
            f"{array.size} values cannot fill a tensor of shape {list(shape)}: give "
            f"{count} values, or one value to fill it with")
    return shape


def _little_endian(array: np.ndarray) -> np.ndarray:
    array = np.asarray(array, order="C")
    return array.byteswap() if sys.byteorder == "big" else array


def _write_values(proto, dt: dtypes.DType, flat: np.ndarray) -> None:
    field = _VALUE_FIELD[dt.name]
    if field == "half_val":  # the element's 16 bits, zero-extended
        flat = flat.view(np.uint16).astype(np.int32)
    elif field == "float8_val":
        proto.float8_val = np.ascontiguousarray(flat).view(np.uint8).tobytes()
        return
    elif dt.is_complex:   # real, imaginary, real, imaginary, ...
        flat = np.ascontiguousarray(flat).view(dt.real_dtype.as_numpy_dtype)
    elif flat.dtype.kind == "V":   # int4, uint4, int2, uint2
        flat = flat.astype(np.int32)
    getattr(proto, field).extend(flat.tolist())


def from_tensor_proto(proto: Message) -> np.ndarray:
    """The numpy array a ``TensorProto`` holds (a new, writable array), read
    as ``tf.make_ndarray`` reads it: raw ``tensor_content`` when present,
    else the typed field, whose last value repeats to fill the shape (no
    value at all means zeros).

    Raises ``UnimplementedError`` for dtypes pluggable lacks and
    ``InvalidArgumentError`` for a proto that describes no valid tensor (an
    unknown shape, content of the wrong size, too many values)."""
    if proto.dtype == 0 and not proto.ByteSize():
        raise errors.InvalidArgumentError(
            "this TensorProto is empty (dtype DT_INVALID, no shape, no values): no tensor "
            "was stored here. A GraphDef keeps constant values in the 'value' attribute "
            "of its Const nodes; a Placeholder or another op has none (an absent key of "
            "a protobuf map reads as an empty message)")
    dt = from_datatype(proto.dtype)
    shape = from_shape_proto(proto.tensor_shape)
    if shape is None or None in shape:
        raise errors.InvalidArgumentError(
            f"a TensorProto of {dt.name} has the shape {_show(shape)}; a tensor's "
            "shape must be fully known")
    count = int(np.prod(shape, dtype=np.int64))
    if proto.tensor_content:
        return _read_content(proto.tensor_content, dt, shape, count)
    np_dtype = dt.as_numpy_dtype
    values = _read_values(proto, dt)
    if values.size > count:
        raise errors.InvalidArgumentError(
            f"a TensorProto of {dt.name} and shape {list(shape)} holds {values.size} "
            f"values in {_VALUE_FIELD[dt.name]}; at most {count} fit")
    if values.size == 0:
        return np.full(shape, b"", object) if dt is dtypes.string else np.zeros(shape, np_dtype)
    if values.size < count:
        filled = np.empty(count, np_dtype)
        filled[:values.size] = values
        filled[values.size:] = values[-1]
        values = filled
    return values.reshape(shape)


def _read_content(content: bytes, dt: dtypes.DType, shape: tuple, count: int) -> np.ndarray:
    expected = count * dt.size
    if len(content) != expected:
        raise errors.InvalidArgumentError(
            f"a TensorProto of {dt.name} and shape {list(shape)} has {len(content)} bytes "
            f"of tensor_content; it needs {expected} ({count} elements of {dt.size} bytes)")
    if dt is dtypes.bool_:  # any non-zero byte is true
        return (np.frombuffer(content, np.uint8) != 0).reshape(shape)
    array = np.frombuffer(content, dt.as_numpy_dtype).copy()
    return (array.byteswap() if sys.byteorder == "big" else array).reshape(shape)


def _read_values(proto, dt: dtypes.DType) -> np.ndarray:
    field = _VALUE_FIELD[dt.name]
    values = getattr(proto, field)
    if field == "string_val":  # bytes, as an object array
        out = np.empty(len(values), object)
        out[:] = list(values)
        return out
    if field == "half_val":
        bits = np.fromiter(values, np.int64, count=len(values)).astype(np.uint16)
        return bits.view(dt.as_numpy_dtype)
    if field == "float8_val":
        return np.frombuffer(values, np.uint8).view(dt.as_numpy_dtype)
    if dt.is_complex:
        if len(values) % 2:
            raise errors.InvalidArgumentError(
                f"a TensorProto of {dt.name} holds {len(values)} numbers in {field}; "
                "complex values are stored as (real, imaginary) pairs, so the count must "
                "be even")
        parts = np.fromiter(values, dt.real_dtype.as_numpy_dtype, count=len(values))
        return parts.view(dt.as_numpy_dtype)
    if field == "int_val":  # narrower types wrap as a C cast would
        wide = np.fromiter(values, np.int64, count=len(values))
        return wide.astype(dt.as_numpy_dtype)
    return np.fromiter(values, dt.as_numpy_dtype, count=len(values))


def _show(shape) -> str:
    if shape is None:
        return "<unknown rank>"
    return "[" + ", ".join("?" if s is None else str(s) for s in shape) + "]"
