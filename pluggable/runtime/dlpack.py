"""DLPack, zero-copy in both directions (the Python array API standard's
``__dlpack__`` / ``__dlpack_device__`` / ``from_dlpack``).

Which DLPack device a tensor is on:

* CPU tensors: ``kDLCPU``.
* Tensors of a plugin device whose plugin declares host memory through the
  native-stream extension (``PG_NATIVE_STREAM_NONE``, as the host reference
  device MY_DEVICE does): ``kDLCPU``. Their device addresses are host
  pointers, so host consumers (numpy) read them in place; the export first
  waits for the device's queued work, so the consumer sees the value.
* Tensors of a CUDA plugin device (``PG_NATIVE_STREAM_CUDA``): ``kDLCUDA``
  with the device's CUDA ordinal. The ``stream`` argument of ``__dlpack__``
  orders the device's queued work before the consumer's stream (an event
  recorded on the device's stream, waited for on the consumer's; when
  neither the plugin nor cuda-python can, the export waits for the
  device).
* Any other plugin device cannot export (UnimplementedError: copy the
  tensor to the CPU with ``t.to("CPU:0")``).

Exports hold a reference to the tensor's memory (the core's buffer, or the
CPU tensor's array) until the consumer calls the capsule's deleter. Host
exports are marked read-only in versioned capsules (tensors are immutable);
CUDA exports are writable (GPU libraries do not all accept read-only
capsules): writing through them is writing into an immutable tensor.

``from_dlpack`` places ``kDLCPU`` data (and ``kDLCUDAHost`` /
``kDLCUDAManaged``, which are host-addressable) on the CPU device, sharing
the producer's memory when it is compact (a strided producer array is copied
unless ``copy=False``), and ``kDLCUDA`` device N on the plugin device of CUDA
ordinal N, wrapping the producer's memory without a copy (compact only): the
new tensor keeps the producer's capsule alive and calls its deleter exactly
once, after the device's queued work is done. The consumer stream given to
the producer is CUDA's legacy default stream, after which the device's
stream is ordered with an event (``_ask``).

Tensors of a CUDA device also have ``__cuda_array_interface__`` (version 3,
with the device's stream).
"""
from __future__ import annotations

import contextlib
import ctypes
from typing import Any, Iterator

import numpy as np

from .._core import cuda_python, ffi, lib, status
from ..framework import dtypes, errors
from ..framework.tensor import Tensor
from . import native_stream, placement
from .device import Device
from .status import raise_status

KDL_CPU = 1
KDL_CUDA = 2
KDL_CUDA_HOST = 3
KDL_CUDA_MANAGED = 13
_HOST_TYPES = (KDL_CPU, KDL_CUDA_HOST, KDL_CUDA_MANAGED)

FLAG_READ_ONLY = 1
_CUDA_EVENT_DISABLE_TIMING = 0x02  # cudaEventDisableTiming
MAX_VERSION = (1, 0)



def _capi(name: str, restype: Any, *argtypes: Any) -> Any:
    """A private prototype of a CPython function (ctypes.pythonapi's shared
    function objects could be re-typed by other code)."""
    return ctypes.PYFUNCTYPE(restype, *argtypes)((name, ctypes.pythonapi))


_capsule_new = _capi("PyCapsule_New", ctypes.py_object, ctypes.c_void_p, ctypes.c_void_p,
                     ctypes.c_void_p)
_capsule_is_valid = _capi("PyCapsule_IsValid", ctypes.c_int, ctypes.py_object, ctypes.c_void_p)
_capsule_pointer = _capi("PyCapsule_GetPointer", ctypes.c_void_p, ctypes.py_object,
                         ctypes.c_void_p)
_capsule_set_name = _capi("PyCapsule_SetName", ctypes.c_int, ctypes.py_object, ctypes.c_void_p)


def _name(versioned: int, used: int) -> int:
    return int(ffi.cast("uintptr_t", lib.pg_dlpack_capsule_name(versioned, used)))


_NAMES = {(v, u): _name(v, u) for v in (0, 1) for u in (0, 1)}
_DESTRUCTOR = int(ffi.cast("uintptr_t", ffi.addressof(lib, "pg_dlpack_capsule_destructor")))


# ------------------------------------------------------------------- devices

def _device_kind(dev: Any) -> int | None:
    return native_stream.memory_kind(dev) if isinstance(dev, Device) else None


def dlpack_device(t: Tensor) -> tuple[int, int]:
    """``(device_type, device_id)`` of `t` as DLPack names it."""
    dev = t._dev
    if not isinstance(dev, Device):
        return (KDL_CPU, 0)
    here = native_stream.per_device(dev, "_dlpack_device", _ask_dlpack_device)
    if here is None:
        raise errors.UnimplementedError(
            f"a tensor on {dev.short_name} cannot be exchanged through DLPack: its plugin "
            "does not say what its memory is (pluggable_native_stream.h); copy it first with "
            "t.to('CPU:0')", device=dev.name)
    return here


def _ask_dlpack_device(dev: Device) -> tuple[int, int] | None:
    kind = _device_kind(dev)
    if kind == native_stream.KIND_CUDA:
        return (KDL_CUDA, native_stream.native_ordinal(dev))
    if kind == native_stream.KIND_NONE:
        return (KDL_CPU, 0)
    return None


# The plugin devices the CUDA ordinals were read from, and the first CUDA
# plugin device of each ordinal (read again when plugins come or go).
_by_ordinal: list = [None, {}]


def _device_for(device_type: int, device_id: int) -> Any:
    """The pluggable device of a DLPack device."""
    if device_type in _HOST_TYPES:
        return placement.CPU
    if device_type == KDL_CUDA:
        table = placement._logical
        devices = tuple(table) if table is not None else None
        if devices is None or _by_ordinal[0] != devices:  # first use, or devices changed
            found: dict = {}
            for d in placement.all_devices():
                if _device_kind(d) == native_stream.KIND_CUDA:
                    found.setdefault(native_stream.native_ordinal(d), d)
            _by_ordinal[:] = [tuple(placement._logical), found]
        d = _by_ordinal[1].get(device_id)
        if d is not None:
            return d
        raise errors.NotFoundError(
            f"DLPack data on CUDA device {device_id}, but no pluggable GPU device has that "
            "CUDA ordinal (is the CUDA plugin loaded and the device visible?)")
    raise errors.UnimplementedError(
        f"DLPack device type {device_type} (device {device_id}) is not supported; pluggable "
        "imports kDLCPU (1), kDLCUDAHost (3), kDLCUDAManaged (13) and kDLCUDA (2)")


# -------------------------------------------------------------------- export

_LEGACY_STREAM = 1  # CUDA's legacy default stream, as DLPack numbers it
# DLPack's default-stream handles (legacy, per-thread): the current device's
_DEFAULT_STREAMS = (_LEGACY_STREAM, 2)


@contextlib.contextmanager
def _current_device(cudart: Any, ordinal: int) -> Iterator[None]:
    """Makes CUDA device `ordinal` the calling thread's current device for
    the block (cuda-python), then the one before again. CUDA's default
    stream handles (1: legacy, 2: per-thread) name the current device's
    stream, and PyTorch exports a tensor with a stream only while its
    device is current, so an exchange runs with the tensor's device
    current whatever the caller's is."""
    before = int(cudart.cudaGetDevice()[1])
    if before != ordinal:
        cudart.cudaSetDevice(ordinal)
    try:
        yield
    finally:
        if before != ordinal:
            cudart.cudaSetDevice(before)


def _cuda_stream_wait(dev: Device, consumer: int) -> None:
    """Orders the work queued on `dev`'s stream before CUDA stream
    `consumer` (an event, no host wait): through the plugin's
    ``order_native``, else through cuda-python; waits for the device when
    neither can."""
    ns = native_stream.native_stream(dev)
    if ns is not None and ns.handle == consumer:
        return
    if native_stream.order(dev, consumer, native_stream.NATIVE_AFTER_STREAM) is None:
        return
    cudart = cuda_python.cudart()
    ev = native_stream.per_device(dev, "_dlpack_order_event", _order_event) \
        if ns is not None and cudart is not None else None
    # One event per device, recorded again for each export: a wait takes the
    # latest recording, which follows the exporter's work on the same stream
    # even when another thread recorded it.
    if ev is None or int(cudart.cudaEventRecord(ev, native_stream.handoff(dev))[0]) != 0:
        dev.wait_for_work()
        return
    # a default-stream handle is that of the current device: the tensor's
    scope = _current_device(cudart, native_stream.native_ordinal(dev)) \
        if consumer in _DEFAULT_STREAMS else contextlib.nullcontext()
    with scope:
        if int(cudart.cudaStreamWaitEvent(consumer, ev, 0)[0]) != 0:
            dev.wait_for_work()


def _order_event(dev: Device) -> Any:
    """A CUDA event for `_cuda_stream_wait` to record on `dev`'s stream,
    made on that device, or None if none could be made (the exports of
    `dev` then wait for the device)."""
    cudart = cuda_python.cudart()
    with _current_device(cudart, native_stream.native_ordinal(dev)):
        err, ev = cudart.cudaEventCreateWithFlags(_CUDA_EVENT_DISABLE_TIMING)
    return ev if int(err) == 0 else None


def _check_copy(copy: Any, what: str) -> None:
    if copy is False:
        raise errors.InvalidArgumentError(f"DLPack: {what} needs a copy, but copy=False was given")


def _capsule(managed: Any, versioned: int) -> Any:
    return _capsule_new(int(ffi.cast("uintptr_t", managed)), _NAMES[(versioned, 0)],
                        _DESTRUCTOR)


def _export_host_array(a: np.ndarray, dtype: dtypes.DType, versioned: int,
                       read_only: bool) -> Any:
    st = status()
    dims = ffi.new("int64_t[]", list(a.shape) or [0])
    m = lib.pg_dlpack_export(ffi.NULL, ffi.cast("void*", a.ctypes.data), ffi.cast("void*", id(a)),
                             dtype.enum, dims, a.ndim, versioned, KDL_CPU, 0, int(read_only), st)
    raise_status(st, "DLPack export")
    return _capsule(m, versioned)


def _export(self: Tensor, *, stream: Any = None, max_version: Any = None,
            dl_device: Any = None, copy: bool | None = None) -> Any:
    """A DLPack capsule of this tensor's memory, without a copy (see the
    module documentation); ``copy=True`` exports a copy, ``dl_device=(1, 0)``
    a host copy of a device tensor (unless ``copy=False``)."""
    versioned = int(max_version is not None and tuple(max_version)[0] >= 1)
    if self._dtype not in dtypes.ALL:
        raise errors.InvalidArgumentError(
            f"DLPack cannot carry a {self._dtype.name} tensor (data dtypes only)")
    here = dlpack_device(self)
    if dl_device is not None and tuple(dl_device) != here:
        if tuple(dl_device) != (KDL_CPU, 0):
            raise errors.UnimplementedError(
                f"DLPack: cannot export a tensor on {self._dev.short_name} to device "
                f"{tuple(dl_device)}; only the tensor's own device or the host (1, 0)")
        _check_copy(copy, f"exporting a tensor of {self._dev.short_name} to the host")
        return _export_host_array(self._numpy().copy(), self._dtype, versioned, False)
    if self._a is not None:  # a CPU tensor: its numpy array
        a = self._a.copy() if copy else self._a
        return _export_host_array(a, self._dtype, versioned, not copy)
    dev = self._dev
    if lib.pg_tensor_captured(self._h):
        raise errors.FailedPreconditionError(
            f"DLPack: the tensor on {dev.short_name} is produced by work being captured into "
            "a device graph; it exists only once the graph is replayed", device=dev.name)
    t = dev.copy_in(self) if copy else self
    if here[0] == KDL_CPU:  # host memory: the value must be there
        st = status()
        lib.pg_tensor_check(t._h, st)
        dev._raise_for(t, st, "DLPack export")
        dev.wait_for_work()
    elif stream != -1:
        if stream == 0:
            raise errors.InvalidArgumentError(
                "DLPack: stream=0 is ambiguous for CUDA; pass 1 (legacy default stream), 2 "
                "(per-thread default stream), a stream handle, or -1 (no ordering)")
        _cuda_stream_wait(dev, 1 if stream is None else int(stream))
    st = status()
    dims = ffi.new("int64_t[]", list(t._shape) or [0])
    m = lib.pg_dlpack_export(t._h, ffi.NULL, ffi.NULL, t._dtype.enum, dims, len(t._shape),
                             versioned, here[0], here[1], int(here[0] == KDL_CPU), st)
    raise_status(st, "DLPack export", dev.name)
    return _capsule(m, versioned)


def _export_device(self: Tensor) -> tuple[int, int]:
    """``(device_type, device_id)`` of this tensor in DLPack's terms."""
    return dlpack_device(self)


def _cuda_array_interface(self: Tensor) -> dict:
    """``__cuda_array_interface__`` (version 3) of a tensor of a CUDA plugin
    device: its device address (shared, not copied) and the stream its
    producing work is queued on, which the consumer orders its work after.
    Other tensors do not have the attribute (AttributeError)."""
    dev = self._dev
    if self._h is None or _device_kind(dev) != native_stream.KIND_CUDA:
        raise AttributeError("__cuda_array_interface__: only tensors of a CUDA device have it")
    typestr = np.dtype(self._dtype.as_numpy_dtype).str
    if self._dtype is dtypes.bfloat16:
        raise AttributeError("__cuda_array_interface__ has no bfloat16 type; use __dlpack__")
    mem = ffi.new("SP_DeviceMemoryBase*")
    lib.pg_tensor_mem(self._h, mem)
    ns = native_stream.native_stream(dev)
    iface = {"shape": tuple(self._shape), "typestr": typestr, "strides": None,
             "data": (int(ffi.cast("uintptr_t", mem.opaque)), False), "version": 3}
    if ns is not None:  # the NULL stream is the legacy default (1)
        iface["stream"] = native_stream.handoff(dev) or 1
    return iface


Tensor.__dlpack__ = _export
Tensor.__dlpack_device__ = _export_device
Tensor.__cuda_array_interface__ = property(_cuda_array_interface)


# -------------------------------------------------------------------- import

class _HostOwner:
    """Keeps a producer's managed tensor until numpy drops the memory; its
    deleter runs once, when this object goes."""

    def __init__(self, managed: int, versioned: int, lo: int, nbytes: int):
        self._keep = ffi.gc(ffi.cast("void*", managed),
                            lambda p, v=versioned: lib.pg_dlpack_delete(p, v))
        self.__array_interface__ = {"data": (lo, True), "shape": (nbytes,), "typestr": "|u1",
                                    "version": 3}


def _take(capsule: Any) -> tuple[int, int]:
    """The managed tensor of an unused capsule and whether it is versioned."""
    for versioned in (1, 0):
        if _capsule_is_valid(capsule, _NAMES[(versioned, 0)]):
            return _capsule_pointer(capsule, _NAMES[(versioned, 0)]), versioned
    for versioned in (1, 0):
        if _capsule_is_valid(capsule, _NAMES[(versioned, 1)]):
            raise errors.InvalidArgumentError(
                "this DLPack capsule was consumed already (a capsule can be imported once)")
    raise errors.InvalidArgumentError("not a DLPack capsule (named 'dltensor' or "
                                      "'dltensor_versioned')")


def _host_array(managed: int, versioned: int, info: Any, dtype: dtypes.DType) -> np.ndarray:
    """A numpy view of the producer's host memory (owning the managed tensor)."""
    esize = np.dtype(dtype.as_numpy_dtype).itemsize
    n = info.num_dims
    shape = tuple(info.dims[0:n])
    strides = tuple(s * esize for s in info.strides[0:n])
    first = int(ffi.cast("uintptr_t", info.data))
    lo = hi = 0
    if all(shape):
        for d, s in zip(shape, strides):
            (lo, hi) = (lo + (d - 1) * s, hi) if s < 0 else (lo, hi + (d - 1) * s)
        hi += esize
    owner = _HostOwner(managed, versioned, first + lo, hi - lo)
    base = np.asarray(owner)
    return np.ndarray(shape, dtype.as_numpy_dtype, buffer=base, offset=-lo, strides=strides)


def from_dlpack(x: Any, /, *, device: Any = None, copy: bool | None = None) -> Tensor:
    """A tensor over the memory of `x` (any object with ``__dlpack__``, or a
    DLPack capsule, used once), without copying: host data becomes a CPU
    tensor, CUDA device N data a tensor of the GPU plugin device of that
    ordinal. ``copy=True`` always copies; ``copy=False`` refuses to copy (a
    strided host array needs one); `device` moves the result (a copy)."""
    if hasattr(x, "__dlpack__"):
        target = _device_for(*x.__dlpack_device__()) if hasattr(x, "__dlpack_device__") \
            else None
        capsule, follow = _ask(x, target, copy)
        if follow:
            _follow_legacy_stream(target)
        if copy is None and device is None and type(target) is Device:
            t = _import_in_one_call(capsule, target)
            if t is not None:
                return t
    else:
        capsule = x
    managed, versioned = _take(capsule)
    info = ffi.new("pg_dlpack_info*")
    st = status()
    lib.pg_dlpack_describe(ffi.cast("void*", managed), versioned, info, st)
    raise_status(st, "DLPack import")
    dev = _device_for(info.device_type, info.device_id)
    dtype = dtypes.as_dtype(int(info.dtype))
    if dev is placement.CPU:
        t = _import_host(capsule, managed, versioned, info, dtype, copy)
    else:
        t = _import_device(capsule, managed, versioned, dev, dtype, copy)
    if device is not None:
        target = placement.get_device(device)
        if target is not t._dev:
            _check_copy(copy, f"placing DLPack data of {t._dev.short_name} on "
                              f"{target.short_name}")
            t = t._copy_to(target)
    return t


def _ask(x: Any, target: Any, copy: bool | None) -> tuple[Any, bool]:
    """``x.__dlpack__`` with a consumer stream (CUDA targets) and our
    version, and whether the device's stream must then be ordered after the
    legacy default stream (``_follow_legacy_stream``).

    For a CUDA target the consumer stream is the legacy default stream
    where the device's stream can be ordered after it (the plugin's
    ``order_native``, else cuda-python): a producer whose work is on that
    stream, as PyTorch's and CuPy's is by default, then has nothing to order
    (handed another stream, PyTorch records and waits on an event through
    Python on every call), and one on a side stream orders it before the
    legacy stream. Otherwise the device's own stream is passed."""
    stream, follow, cudart = None, False, None
    if isinstance(target, Device):
        ns = native_stream.native_stream(target)
        if ns is not None:
            cudart = cuda_python.cudart()
            follow = native_stream.order_fn(target) is not None or cudart is not None
            stream = _LEGACY_STREAM if follow else ns.handle
    # the producer reads the stream handle on its tensor's device (the target's)
    scope = _current_device(cudart, native_stream.native_ordinal(target)) \
        if cudart is not None else contextlib.nullcontext()
    with scope:
        try:
            kw = {"max_version": MAX_VERSION}
            if copy is not None:
                kw["copy"] = copy
            return x.__dlpack__(stream=stream, **kw), follow
        except TypeError:  # a producer older than DLPack 1.0's keywords
            return (x.__dlpack__(stream=stream) if stream is not None
                    else x.__dlpack__()), follow


def _follow_legacy_stream(dev: Device) -> None:
    """Makes `dev`'s stream wait for the work queued so far on the legacy
    default stream of `dev`'s CUDA device, without a host wait: through the
    plugin's ``order_native``, else with an event of cuda-python's (a host
    wait for that stream if the event cannot be used)."""
    why = native_stream.order(dev, _LEGACY_STREAM, native_stream.STREAM_AFTER_NATIVE)
    if why is None:
        return
    cudart = cuda_python.cudart()
    if cudart is None:
        raise errors.InternalError(
            f"DLPack import on {dev.short_name}: the device's stream could not be ordered "
            f"after CUDA's legacy default stream ({why}) and cuda-python is not installed",
            device=dev.name)
    ev = native_stream.per_device(dev, "_dlpack_import_event", _order_event)
    handle = native_stream.handoff(dev)
    # the legacy stream is the current device's
    with _current_device(cudart, native_stream.native_ordinal(dev)):
        if ev is None or int(cudart.cudaEventRecord(ev, _LEGACY_STREAM)[0]) != 0 or \
                int(cudart.cudaStreamWaitEvent(handle, ev, 0)[0]) != 0:
            cudart.cudaStreamSynchronize(_LEGACY_STREAM)


def _import_in_one_call(capsule: Any, dev: Device) -> Tensor | None:
    """The common import, a compact array of `dev`'s own DLPack device, as
    one call into the core (``pg_dlpack_import``: the capsule's checks, the
    wrap and the renaming at once), or None for anything else, which the
    general path then imports or refuses with its typed error."""
    here = native_stream.per_device(dev, "_dlpack_device", _ask_dlpack_device)
    if here is None:
        return None
    info = ffi.new("pg_dlpack_info*")
    st = status()
    h = lib.pg_dlpack_import(ffi.cast("void*", id(capsule)), dev._c, here[0], here[1], info, st)
    if h == ffi.NULL:
        raise_status(st, f"DLPack import on {dev.short_name}", dev.name)
        return None
    return Tensor._from_handle(h, dev, dtypes.as_dtype(int(info.dtype)),
                               tuple(info.dims[0:info.num_dims]))


def _consume(capsule: Any, versioned: int) -> None:
    if _capsule_set_name(capsule, _NAMES[(versioned, 1)]) != 0:
        raise errors.InternalError("DLPack: could not mark the capsule as used")


def _import_host(capsule: Any, managed: int, versioned: int, info: Any, dtype: dtypes.DType,
                 copy: bool | None) -> Tensor:
    if not info.compact:
        _check_copy(copy, "importing a strided (non-contiguous) host array")
    _consume(capsule, versioned)
    a = _host_array(managed, versioned, info, dtype)
    if copy or not info.compact:
        a = np.ascontiguousarray(a).copy() if copy else np.ascontiguousarray(a)
    return Tensor._from_array(a, placement.CPU, dtype)


def _import_device(capsule: Any, managed: int, versioned: int, dev: Device,
                   dtype: dtypes.DType, copy: bool | None) -> Tensor:
    st = status()
    h = lib.pg_dlpack_wrap(ffi.cast("void*", managed), versioned, dev._c, st)
    raise_status(st, f"DLPack import on {dev.short_name}", dev.name)
    _consume(capsule, versioned)
    v = ffi.cast("pg_tensor_view*", h)
    t = Tensor._from_handle(h, dev, dtype, tuple(v.dims[0:v.num_dims]))
    return dev.copy_in(t) if copy else t
