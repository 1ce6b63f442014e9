"""Tensors: immutable n-d arrays on a device.

A CPU tensor holds a numpy array (zero-copy in both directions: ``numpy()``
returns a read-only view). A plugin-device tensor holds a TF_Tensor handle of
the core; reading its value (``numpy()``, ``item()``, printing) waits for the
device and raises any asynchronous error of the work that produced it.

This module knows no device: everything that touches one is asked of the
tensor's device object (``_dev``), which the runtime layer provides:
``read(t)`` returns the value of a device tensor as a new numpy array and
``copy_in(t)`` returns a copy of any tensor on that device. Operators,
``Tensor.to`` and the DLPack methods are attached by the layers above
(``pluggable.ops``, ``pluggable.runtime.tensors``, ``pluggable.runtime.dlpack``).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from . import dtypes, errors
from .._core import ffi, lib
from .tensor_shape import TensorShape, as_shape as _as_shape

_shapes: dict = {}  # the shape tuples seen -> their TensorShape (emptied when large)

GIVEN_UP_OP = b"(given up)"  # the core's PG_GIVEN_UP_OP (c_api/src/internal.h)


class Tensor:
    """An immutable n-d array placed on a device."""

    __slots__ = ("_h", "_a", "_dev", "_dtype", "_shape", "__weakref__")

    # ----------------------------------------------------------- construction
    @staticmethod
    def _from_array(a: np.ndarray, dev: Any, dtype: dtypes.DType | None = None) -> "Tensor":
        t = Tensor.__new__(Tensor)
        t._a = a if type(a) is np.ndarray and a.flags.c_contiguous else np.asarray(a, order="C")
        t._h = None
        t._dev = dev
        t._dtype = dtype if dtype is not None else dtypes.as_dtype(t._a.dtype)
        t._shape = t._a.shape
        return t

    @staticmethod
    def _from_handle(h: Any, dev: Any, dtype: dtypes.DType, shape: tuple) -> "Tensor":
        """Takes ownership of the TF_Tensor handle `h` (released in __del__).
        The handle carries the outcome of the op that produced it: reading
        the value raises that op's asynchronous error, if any."""
        t = Tensor.__new__(Tensor)
        t._h = h
        t._a = None
        t._dev = dev
        t._dtype = dtype
        t._shape = shape
        return t

    def _give_up(self, by: str) -> None:
        """Called after a call (`by`) took this device tensor as a donated
        input (``pg_kernel_run1_donated``), which may have written its result
        over the tensor's memory: from now on every use of the tensor fails
        with FailedPreconditionError. A CPU tensor (numpy's memory, which
        no kernel writes over) stays as it is."""
        h = self._h
        if h is None:
            return
        msg = (f"this tensor was donated to {by}, which may have written its result over "
               "the tensor's memory; use the tensor that call returned")
        given_up = lib.pg_tensor_given_up(h, msg.encode())
        if given_up != ffi.NULL:
            self._h = given_up
            lib.TF_DeleteTensor(h)

    @property
    def is_donated(self) -> bool:
        """Whether this tensor was given to a call that may reuse its memory
        (``pg.distribute.all_reduce(t, donate=True)``); every use of it then
        fails."""
        if self._h is None:
            return False
        op = lib.pg_tensor_failed_op(self._h)
        return op != ffi.NULL and ffi.string(op) == GIVEN_UP_OP

    def __del__(self, _delete=lib.TF_DeleteTensor) -> None:
        h = self._h
        if h is not None:
            self._h = None
            _delete(h)

    # Tensors are immutable: a copy is the tensor itself (as TensorFlow's
    # eager tensors), so no two objects ever own one core handle. Pickles:
    # runtime.tensors registers the reducer (a pickle holds the value).
    def __copy__(self) -> "Tensor":
        return self

    def __deepcopy__(self, memo) -> "Tensor":
        return self

    def __reduce_ex__(self, protocol):  # (the reducer registered for Tensor comes first)
        raise TypeError(f"a {type(self).__name__} cannot be pickled: a symbolic tensor of a "
                        "traced function has no value; pickle the function's result instead")

    # ------------------------------------------------------------- properties
    @property
    def dtype(self) -> dtypes.DType:
        return self._dtype

    @property
    def shape(self) -> TensorShape:
        """The shape as a ``TensorShape`` (a tuple of sizes, as TensorFlow's);
        None for a traced tensor whose rank is not known."""
        s = self._shape
        if s is None:
            return None
        t = _shapes.get(s)
        if t is None:
            t = _as_shape(s)
            if len(_shapes) > 4096:
                _shapes.clear()
            _shapes[s] = t
        return t

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def size(self) -> int:
        n = 1
        for d in self._shape:
            n *= d
        return n

    @property
    def device(self) -> str:
        """Full device name, e.g. "/job:localhost/replica:0/task:0/device:MY_DEVICE:0"."""
        return self._dev.name

    @property
    def device_object(self):
        return self._dev

    # ----------------------------------------------------------------- values
    def numpy(self) -> Any:
        """The value as numpy's: an array (a read-only view for CPU tensors, a
        new array after waiting for the device for device tensors), or for a
        0-d tensor a numpy scalar (``np.float32(3.0)``), as TensorFlow's."""
        a = self._numpy()
        return a[()] if not a.ndim else a

    def _numpy(self) -> np.ndarray:
        """The value as a numpy array, 0-d ones included."""
        if self._a is not None:
            v = self._a.view()
            v.flags.writeable = False
            return v
        return self._dev.read(self)

    def item(self) -> Any:
        if self.size != 1:
            raise errors.InvalidArgumentError(
                f"item() needs a tensor with one element, this one has shape {list(self._shape)}")
        return self._numpy().reshape(()).item()

    def __array__(self, dtype=None, copy=None):
        """numpy's view of the value (``np.asarray(t)``); a writable copy
        when numpy asks for one (``np.array(t)``, copy=True)."""
        a = self._numpy()
        if dtype is not None and np.dtype(dtype) != a.dtype:
            if copy is False:
                raise ValueError(f"converting a {self._dtype.name} tensor to {np.dtype(dtype)} "
                                 "needs a copy, but copy=False was given")
            return a.astype(dtype)
        return a.copy() if copy else a

    # -------------------------------------------------------------- movement
    def _copy_to(self, dev) -> "Tensor":
        """This tensor on device object `dev` (itself if it is already there)."""
        return self if dev is self._dev else dev.copy_in(self)

    # ------------------------------------------------------------------ misc
    def __repr__(self) -> str:
        """TensorFlow's text: ``<tf.Tensor: shape=(2,), dtype=int32,
        numpy=array([1, 2], dtype=int32)>``."""
        return (f"<tf.Tensor: shape={self.shape}, dtype={self._dtype.name}, "
                f"numpy={self._value_text(True)}>")

    def __str__(self) -> str:
        """TensorFlow's text: ``tf.Tensor([1 2], shape=(2,), dtype=int32)``."""
        return f"tf.Tensor({self._value_text(False)}, shape={self.shape}, dtype={self._dtype.name})"

    def __format__(self, spec: str) -> str:
        """The value's format (``f"{t:.2f}"`` of a scalar, numpy's text of an
        array), as TensorFlow's."""
        return format(self.numpy(), spec)

    def _value_text(self, is_repr: bool) -> str:
        try:
            return value_text(self._numpy(), is_repr)
        except errors.PluggableError as exc:
            return f"<error: {exc}>"

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d tensor")
        return self._shape[0]

    def __bool__(self) -> bool:
        return bool(self.item())

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        if not self._dtype.is_integer:
            raise TypeError(f"only integer tensors can be used as an index, not {self._dtype.name}")
        return int(self.item())

    # operators are attached by pluggable.math_ops
    __hash__ = object.__hash__


def value_text(a: np.ndarray, is_repr: bool) -> str:
    """The value part of a tensor's (or variable's) text, as TensorFlow
    writes it: numpy's ``repr`` (a scalar's as its Python value, ``3.0``) or
    ``str``, after a newline when it spans lines."""
    if not a.ndim:
        a = a[()]
    if is_repr:
        text = repr(a.item()) if np.isscalar(a) and not isinstance(a, bytes) else repr(a)
    else:
        text = str(a)
    return "\n" + text if "\n" in text else text


def _string_array(value: Any) -> np.ndarray | None:
    """`value` as an object array of bytes (str encoded as UTF-8) when it is
    a string, bytes, or (nested lists of) them; else None."""
    if isinstance(value, (str, bytes)):
        return np.array(value.encode() if isinstance(value, str) else value, object)
    if isinstance(value, np.ndarray) and value.dtype.kind not in "OUS":
        return None
    if not isinstance(value, (list, tuple, np.ndarray)):
        return None
    a = _numpy_call(np.asarray, value) if not isinstance(value, np.ndarray) else value
    if a.dtype.kind == "U":
        return np.char.encode(a, "utf-8").astype(object)
    if a.dtype.kind == "S":
        return a.astype(object)
    if a.dtype.kind == "O" and all(isinstance(x, (bytes, str)) for x in a.flat):
        out = np.empty(a.shape, object)
        out.flat[:] = [x.encode() if isinstance(x, str) else x for x in a.flat]
        return out
    return None


def _default_array(value: Any) -> np.ndarray:
    """Python values follow TensorFlow's defaults: floats -> float32, ints ->
    int32 (int64 if they do not fit), complex numbers -> complex128; numpy
    arrays keep their dtype."""
    if isinstance(value, (np.ndarray, np.generic)):
        return np.asarray(value)
    a = np.asarray(value)
    if a.dtype == np.float64:
        return a.astype(np.float32)
    if a.dtype.kind == "i" and a.dtype != np.int32:
        if a.size == 0 or (a.min() >= np.iinfo(np.int32).min and a.max() <= np.iinfo(np.int32).max):
            return a.astype(np.int32)
        return a.astype(np.int64)
    return a


def _numpy_call(fn: Any, value: Any) -> np.ndarray:
    """fn(value), with numpy's ValueError (ragged lists, ...) as a typed error."""
    try:
        return fn(value)
    except errors.PluggableError:
        raise
    except (ValueError, OverflowError) as exc:
        if "inhomogeneous" in str(exc):  # nested lists of unequal lengths: TensorFlow's error
            raise ValueError("Can't convert non-rectangular Python sequence to Tensor.") \
                from None
        raise errors.InvalidArgumentError(f"cannot make a tensor from this value: {exc}") \
            from None


def _native(a: np.ndarray) -> np.ndarray:
    """`a` in the machine's byte order (big-endian input is converted)."""
    if a.dtype.byteorder not in ("=", "|") and a.dtype.byteorder != \
            ("<" if np.little_endian else ">"):
        return a.astype(a.dtype.newbyteorder("="))
    return a


def _is_ml_dtype(dt: np.dtype) -> bool:
    """An ml_dtypes type pluggable has (bfloat16, float8_e4m3fn, int4, ...)."""
    try:
        return dtypes.as_dtype(dt).as_numpy_dtype == dt
    except TypeError:
        return False


def _check_range(src: np.ndarray, dtype: dtypes.DType) -> None:
    """Refuses integer conversions that would wrap (300 as int8)."""
    if not dtype.is_integer or src.size == 0 or src.dtype.kind not in "iufb":
        return
    info = _iinfo(dtype)
    lo, hi = src.min().item(), src.max().item()     # Python numbers: exact comparisons
    if lo < info.min or hi > info.max:
        raise _out_of_range(lo if lo < info.min else hi, dtype, info.min, info.max)


def _iinfo(dtype: dtypes.DType) -> Any:
    """Integer limits, int4/uint4/int2/uint2 (ml_dtypes' types) included."""
    np_dtype = dtype.as_numpy_dtype
    if np_dtype.kind == "V":
        import ml_dtypes
        return ml_dtypes.iinfo(np_dtype)
    return np.iinfo(np_dtype)


def _out_of_range(bad: Any, dtype: dtypes.DType, lo: int, hi: int) -> errors.InvalidArgumentError:
    return errors.InvalidArgumentError(
        f"value {bad} is out of range for {dtype.name} ([{lo}, {hi}]); "
        "convert it explicitly if wrapping is what you want")


# Integer bounds by dtype, for the Python-scalar path of to_array.
_INT_BOUNDS: dict = {}


def _scalar_array(value: Any, dtype: dtypes.DType) -> np.ndarray | None:
    """A Python int/float/bool as a 0-d array of `dtype`, checked like the
    general path of ``to_array`` with plain comparisons (every eager call
    with a scalar operand comes here): an int outside an integer dtype's
    range raises its InvalidArgumentError; None where the general path must
    decide (a float to an integer dtype, an int beyond 64 bits to a float
    dtype, a bool to a number, ...)."""
    kind = type(value)
    if kind is int:
        if dtype.is_integer:
            bounds = _INT_BOUNDS.get(dtype)
            if bounds is None:
                info = _iinfo(dtype)
                bounds = _INT_BOUNDS[dtype] = (int(info.min), int(info.max))
            if not bounds[0] <= value <= bounds[1]:
                raise _out_of_range(value, dtype, *bounds)
        elif not (dtype.is_floating and -(1 << 63) <= value < (1 << 63)):
            return None
    elif kind is float:
        if not dtype.is_floating:
            return None
    elif kind is not bool or not dtype.is_bool:
        return None
    return np.array(value, dtype.as_numpy_dtype)


def to_array(value: Any, dtype: dtypes.DType | None = None) -> np.ndarray:
    """Converts a Python value or array to a numpy array of a supported dtype."""
    if dtype is not None and type(value) in (int, float, bool):
        dtype = dtypes.as_dtype(dtype)
        a = _scalar_array(value, dtype)
        if a is not None:
            return a
    if isinstance(value, Tensor):
        value = value._numpy()
    strings = _string_array(value)
    if strings is not None:
        if dtype is not None and dtypes.as_dtype(dtype) is not dtypes.string:
            raise TypeError(f"cannot convert strings to {dtypes.as_dtype(dtype).name}")
        return strings
    if dtype is not None:
        dtype = dtypes.as_dtype(dtype)
        if dtype is dtypes.string:
            raise TypeError(f"cannot convert {type(value).__name__} values to string "
                            "(give str or bytes values)")
        src = _native(_numpy_call(np.asarray, value))
        if src.dtype == object and dtype.is_integer:   # ints beyond 64 bits
            raise errors.InvalidArgumentError(
                f"cannot convert {value!r} to {dtype.name}: a value is out of range of every "
                "64-bit integer type")
        if src.dtype.kind == "c" and not dtype.is_complex:
            raise TypeError(f"Cannot convert {value!r} to a tensor of dtype {dtype.name}: "
                            "it has complex values; take pg.math.real/imag/abs of it first")
        if src.dtype.kind in "fc" and dtype.is_integer and not np.all(np.isfinite(src)):
            raise errors.InvalidArgumentError(f"cannot convert non-finite values to {dtype.name}")
        if src.dtype.kind == "f" and dtype.is_integer and np.any(src != np.trunc(src)):
            raise TypeError(f"cannot convert {value!r} to {dtype.name} without losing the fraction")
        _check_range(src, dtype)
        return np.asarray(src.astype(dtype.as_numpy_dtype), order="C")
    a = _native(_numpy_call(_default_array, value))
    if a.dtype.kind in "OUSV" and not (a.dtype.kind == "V" and _is_ml_dtype(a.dtype)):
        raise TypeError(f"cannot make a tensor from {type(value).__name__} values of dtype "
                        f"{a.dtype}; supported dtypes: {', '.join(d.name for d in dtypes.ALL)}")
    dtypes.as_dtype(a.dtype)  # raises TypeError for unsupported dtypes
    return np.asarray(a, order="C")

