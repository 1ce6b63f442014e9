"""Making tensors from Python values and moving them between devices:
``pg.constant``, ``pg.convert_to_tensor`` and ``Tensor.to`` (``pg.from_dlpack``
and ``Tensor.__dlpack__`` are in ``runtime.dlpack``)."""
from __future__ import annotations

import copyreg
from typing import Any

import numpy as np

from ..framework import dtypes, errors
from ..framework.tensor import Tensor, to_array
from . import placement
from .device import Device
from .dlpack import from_dlpack  # noqa: F401 (pg.from_dlpack; attaches Tensor.__dlpack__)


def constant(value: Any, dtype: Any = None, shape: Any = None, name: str | None = None) -> Tensor:
    """Creates a tensor from a numpy array, a scalar or nested lists, on the
    device of the current ``pg.device`` scope (CPU when there is none).
    `shape` broadcasts a scalar or reshapes a matching number of elements.
    `name` is accepted for TensorFlow code and not used (eager tensors
    have no names, as in TensorFlow)."""
    a = to_array(value, dtype)
    dev = placement.current()
    # A copy to a device has read the array when it returns (the core stages
    # small copies and waits for large ones): only a CPU tensor, or a copy
    # recorded into a device graph, would alias the caller's array.
    if isinstance(value, np.ndarray) and np.may_share_memory(a, value) and (
            not isinstance(dev, Device) or dev._c.capturing):
        a = a.copy()   # never alias the caller's array (pg.from_dlpack does)
    if shape is not None:
        shape = tuple(int(s) for s in shape)
        if a.size == 1:
            a = np.full(shape, a.reshape(()), a.dtype)
        elif a.size == int(np.prod(shape, dtype=np.int64)):
            a = a.reshape(shape)
        else:
            raise errors.InvalidArgumentError(
                f"constant: {a.size} values cannot fill shape {list(shape)}")
    t = Tensor._from_array(a, placement.CPU)
    if dev is None or dev is placement.CPU or a.dtype == object:  # strings stay on the host
        return t
    return t._copy_to(dev)


def convert_to_tensor(value: Any, dtype: Any = None) -> Tensor:
    """Returns `value` if it is a Tensor (checking `dtype`), the tensor an
    object stands for if it has ``__pg_tensor__(dtype)`` (a Variable's
    value), else a CPU tensor."""
    as_tensor = getattr(value, "__pg_tensor__", None)
    if as_tensor is not None:
        value = as_tensor(None if dtype is None else dtypes.as_dtype(dtype))
    if isinstance(value, Tensor):
        if dtype is not None and value.dtype is not dtypes.as_dtype(dtype):
            raise errors.InvalidArgumentError(
                f"tensor has dtype {value.dtype.name}, expected {dtypes.as_dtype(dtype).name}")
        return value
    return Tensor._from_array(to_array(value, dtype), placement.CPU)


def _to(self: Tensor, device: Any) -> Tensor:
    """A copy of this tensor on `device` (a name such as "MY_DEVICE:0" or a
    device object); the tensor itself if it is already there."""
    return self._copy_to(placement.get_device(device))


Tensor.to = _to


# ----------------------------------------------------------------- pickling

def _reduce_tensor(t: Tensor):
    """A tensor pickles as its value and unpickles as a CPU tensor (as
    TensorFlow's eager tensors do); a resource handle has no value to
    pickle (a symbolic tensor refuses in Tensor.__reduce_ex__)."""
    if t._dtype is dtypes.resource:
        raise TypeError("a resource tensor is a handle to state inside this process and "
                        "cannot be pickled")
    return _unpickle_tensor, (np.array(t.numpy()), t._dtype)


def _unpickle_tensor(a: np.ndarray, dtype: dtypes.DType) -> Tensor:
    return Tensor._from_array(np.ascontiguousarray(a), placement.CPU, dtype)


copyreg.pickle(Tensor, _reduce_tensor)
