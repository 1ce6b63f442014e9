"""Element types: one DType per supported TF_DataType, with numpy mapping."""
from __future__ import annotations

import sys
from typing import Any, Callable

import numpy as np


class DType:
    """An element type. Compare with ``==``; ``as_numpy_dtype`` gives numpy's."""

    __slots__ = ("name", "enum", "as_numpy_dtype", "size", "is_floating",
                 "is_integer", "is_bool", "is_complex")

    def __init__(self, name: str, enum: int, np_type: Any, kind: str):
        self.name = name
        self.enum = enum
        self.as_numpy_dtype = np.dtype(np_type)
        self.size = self.as_numpy_dtype.itemsize
        self.is_floating = kind == "float"
        self.is_integer = kind == "int"
        self.is_bool = kind == "bool"
        self.is_complex = kind == "complex"

    @property
    def real_dtype(self) -> "DType":
        """The type of the real and imaginary parts: float32 for complex64,
        float64 for complex128, the type itself for every other type."""
        return _REAL_PARTS.get(self.name, self)

    def __repr__(self) -> str:
        return f"tf.{self.name}"

    def _limits(self) -> Any:
        if not (self.is_integer or self.is_floating):
            raise TypeError(f"Cannot find the minimum or maximum value of {self}: it is "
                            "not an integer or floating type")
        nt = self.as_numpy_dtype
        if self.is_integer:
            info = np.iinfo(nt) if nt.kind in "iu" else None
        else:
            try:
                info = np.finfo(nt)
            except ValueError:
                import ml_dtypes
                info = ml_dtypes.finfo(nt)
        if info is None:  # int4 and the other narrow integers of ml_dtypes
            import ml_dtypes
            info = ml_dtypes.iinfo(nt)
        return (info.min, info.max)

    @property
    def min(self) -> Any:
        """The lowest value of the type (``-inf`` is not counted), as TensorFlow's."""
        return self._limits()[0]

    @property
    def max(self) -> Any:
        """The highest finite value of the type."""
        return self._limits()[1]

    def __str__(self) -> str:
        return f"<dtype: {self.name!r}>"

    def __reduce__(self):
        return (as_dtype, (self.name,))


class _LazyNumpyType(DType):
    """A DType whose numpy type comes from a module imported when the numpy
    type is first asked for: bfloat16's (ml_dtypes, about 8 ms of every
    ``import pluggable`` otherwise, for a type most programs never meet)."""

    __slots__ = ("_load", "_np_dtype")

    def __init__(self, name: str, enum: int, load: Callable[[], Any], size: int, kind: str):
        self.name = name
        self.enum = enum
        self._load = load
        self._np_dtype = None
        self.size = size
        self.is_floating = kind == "float"
        self.is_integer = kind == "int"
        self.is_bool = kind == "bool"
        self.is_complex = False

    @property
    def as_numpy_dtype(self) -> np.dtype:  # type: ignore[override]
        dt = self._np_dtype
        if dt is None:
            dt = np.dtype(self._load())
            _BY_NUMPY.setdefault(dt, self)
            self._np_dtype = dt
        return dt


def _ml_dtypes(name: str) -> Callable[[], Any]:
    def load() -> Any:
        import ml_dtypes
        return getattr(ml_dtypes, name)
    return load


_ml_dtypes_bfloat16 = _ml_dtypes("bfloat16")


bool_ = DType("bool", 10, np.bool_, "bool")
int8 = DType("int8", 6, np.int8, "int")
uint8 = DType("uint8", 4, np.uint8, "int")
int16 = DType("int16", 5, np.int16, "int")
int32 = DType("int32", 3, np.int32, "int")
int64 = DType("int64", 9, np.int64, "int")
uint32 = DType("uint32", 22, np.uint32, "int")
uint64 = DType("uint64", 23, np.uint64, "int")
float16 = DType("float16", 19, np.float16, "float")
bfloat16 = _LazyNumpyType("bfloat16", 14, _ml_dtypes_bfloat16, 2, "float")
float32 = DType("float32", 1, np.float32, "float")
float64 = DType("float64", 2, np.float64, "float")
# Complex numbers: a pair of float32 / float64 (real part first), numpy's
# complex64 / complex128 layout and TensorFlow's. is_floating is False for
# them, as in TensorFlow.
complex64 = DType("complex64", 8, np.complex64, "complex")
complex128 = DType("complex128", 18, np.complex128, "complex")
_REAL_PARTS = {"complex64": float32, "complex128": float64}

ALL = (bool_, int8, uint8, int16, int32, int64, uint32, uint64, float16, bfloat16, float32,
       float64, complex64, complex128)

# Element types that only some ops take (Cast, the data-movement ops and,
# for uint16, the elementwise integer ops): uint16, TensorFlow's 8-bit floats,
# and the 4- and 2-bit floats and integers, stored one element per byte (the
# numpy types of ml_dtypes). Not in ALL, so no op takes them unless it lists
# them. The numbers are TensorFlow's TF_DataType values.
uint16 = DType("uint16", 17, np.uint16, "int")
float8_e5m2 = _LazyNumpyType("float8_e5m2", 24, _ml_dtypes("float8_e5m2"), 1, "float")
float8_e4m3fn = _LazyNumpyType("float8_e4m3fn", 25, _ml_dtypes("float8_e4m3fn"), 1, "float")
float8_e4m3fnuz = _LazyNumpyType("float8_e4m3fnuz", 26, _ml_dtypes("float8_e4m3fnuz"), 1,
                                 "float")
float8_e5m2fnuz = _LazyNumpyType("float8_e5m2fnuz", 28, _ml_dtypes("float8_e5m2fnuz"), 1,
                                 "float")
int4 = _LazyNumpyType("int4", 29, _ml_dtypes("int4"), 1, "int")
uint4 = _LazyNumpyType("uint4", 30, _ml_dtypes("uint4"), 1, "int")
int2 = _LazyNumpyType("int2", 31, _ml_dtypes("int2"), 1, "int")
uint2 = _LazyNumpyType("uint2", 32, _ml_dtypes("uint2"), 1, "int")
float4_e2m1fn = _LazyNumpyType("float4_e2m1fn", 33, _ml_dtypes("float4_e2m1fn"), 1, "float")

LIMITED = (uint16, float8_e5m2, float8_e4m3fn, float8_e4m3fnuz, float8_e5m2fnuz, int4, uint4,
           int2, uint2, float4_e2m1fn)
_LAZY = tuple(d for d in ALL + LIMITED if isinstance(d, _LazyNumpyType))

# A handle to a resource (a variable): a scalar that always lives in host
# memory. Not an element type of data tensors, so not in ALL and never
# inferred from a numpy array.
resource = DType("resource", 20, object, "resource")

# Byte strings (TensorFlow's tf.string): numpy object arrays of bytes, on
# the CPU only (a plugin device never holds one). Not in ALL: only the ops
# that list it take it.
string = DType("string", 7, object, "string")

_BY_NAME = {d.name: d for d in ALL + LIMITED}
_BY_NAME.update({"float": float32, "double": float64, "half": float16, "bool_": bool_,
                 "resource": resource, "string": string})
_BY_ENUM = {d.enum: d for d in ALL + LIMITED}
_BY_ENUM[resource.enum] = resource
_BY_ENUM[string.enum] = string
# (the ml_dtypes types enter when their numpy type is first asked for; see as_dtype)
_BY_NUMPY = {d.as_numpy_dtype: d for d in ALL + LIMITED if not isinstance(d, _LazyNumpyType)}
_BY_NUMPY[np.dtype(object)] = string


def as_dtype(value: Any) -> DType:
    """Converts a DType, a name ("float32", "float", "half"), a TF_DataType
    number, or a numpy dtype/type into a DType; raises TypeError otherwise."""
    if isinstance(value, DType):
        return value
    if isinstance(value, str) and value in _BY_NAME:
        return _BY_NAME[value]
    if isinstance(value, int) and not isinstance(value, bool) and value in _BY_ENUM:
        return _BY_ENUM[value]
    try:
        found = _BY_NUMPY.get(np.dtype(value))
        if found is None and "ml_dtypes" in sys.modules:
            for d in _LAZY:   # an ml_dtypes type exists: map them
                d.as_numpy_dtype  # noqa: B018
            found = _BY_NUMPY.get(np.dtype(value))
    except TypeError:
        found = None
    if found is None:
        names = ", ".join(d.name for d in ALL)
        raise TypeError(f"{value!r} is not a supported dtype; use one of: {names}")
    return found


def from_enum(enum: int) -> DType:
    return _BY_ENUM[enum]
