"""Host-to-device copies on a separate copy stream, overlapped with compute
(``pg.copy_to_device_async``).

Ops and ordinary copies run on a device's default stream, one after the
other. Like TensorFlow's StreamExecutor, which keeps a host-to-device stream
per device, each plugin device gets one copy stream here (made on first use
through ``create_stream``), and a copy made with ``copy_to_device_async``
runs there:

1. the tensor's memory comes from the caching allocator, where every block
   belongs to the default stream; so the copy stream first waits for the
   default stream's work enqueued so far (``create_stream_dependency``; the
   host never waits), since that work may still use the block's previous
   contents;
2. the copy is enqueued on the copy stream (``memcpy_htod``), an event is
   recorded after it, and the memory notes the copy stream as a user
   (``record_stream``), so that it is reused only once the copy is done even
   if the tensor is dropped unused;
3. ``PendingCopy.result()`` makes the default stream wait for that event
   (``wait_for_event``; again no host wait) and returns the tensor: ops
   enqueued after it read the copied data.

The overlap comes from issuing the copy of the next batch *before* the
compute of the current one (a prefetch)::

    nxt = pg.copy_to_device_async(batches[0], "GPU:0")
    for i in range(n):
        x = nxt.result()
        if i + 1 < n:
            nxt = pg.copy_to_device_async(batches[i + 1], "GPU:0")
        y = pg.matmul(x, w)    # runs while batch i + 1 is copied

The source array is kept alive until the copy's event has completed, so a
temporary may be passed. Its contents must not change until ``result()``:
a plugin may read it when the stream reaches the copy (the CUDA plugin does
for page-locked memory from ``Device.allocate_host``, the fastest source; a
pageable array is read before the call returns)."""
from __future__ import annotations

import threading
from typing import Any

import numpy as np

from .._core import ffi, lib, status
from .._core.ownership import OwnsCoreResource
from ..framework import dtypes, errors
from ..framework.tensor import Tensor
from . import placement
from .device import Device
from .status import raise_status
from .streams import Event, Stream


class _CopyStream(OwnsCoreResource):
    """A device's copy stream, and what queued work still uses."""

    def __init__(self, device: Device):
        self.stream = Stream(device)
        self.mu = threading.Lock()
        # (event, objects): the objects (host arrays, events a stream still
        # has to wait for) are kept until the event is no longer pending.
        self.in_flight: list = []

    def keep(self, until: Event, *objects: Any) -> None:
        with self.mu:
            self.in_flight = [e for e in self.in_flight if e[0].status() == "pending"]
            self.in_flight.append((until, objects))


_streams: dict = {}
_streams_mu = threading.Lock()


def copy_stream(device: Device) -> Stream:
    """The copy stream of plugin device `device` (made on first use)."""
    return _copy_stream(device).stream


def _copy_stream(device: Device) -> _CopyStream:
    cs = _streams.get(device)
    if cs is None:
        with _streams_mu:
            cs = _streams.get(device)
            if cs is None:
                cs = _streams[device] = _CopyStream(device)
    return cs


class PendingCopy(OwnsCoreResource):
    """A host-to-device copy enqueued on a device's copy stream; ``result()``
    gives the tensor, ordered after the copy for everything run later."""

    def __init__(self, device: Device, handle: Any, dtype: dtypes.DType, shape: tuple,
                 done: Event, cs: _CopyStream):
        self.device = device
        self._h = handle
        self._dtype = dtype
        self._shape = shape
        self._done = done
        self._cs = cs

    def done(self) -> bool:
        """Whether the copy has finished (without waiting)."""
        return self._done.status() == "complete"

    def result(self) -> Tensor:
        """The tensor on the device. Work enqueued on the device after this
        call waits for the copy; the host does not. May be called once."""
        if self._h is None:
            raise errors.FailedPreconditionError(
                "PendingCopy.result() was already called: it hands its tensor over once",
                device=self.device.name)
        d = self.device
        st = status()
        d._se.get_stream_status(d._sp, self._cs.stream._s, st)
        raise_status(st, f"host-to-device copy on the copy stream of {d.short_name}", d.name)
        d._se.wait_for_event(d._sp, d._c.stream, self._done._e, st)
        raise_status(st, f"waiting for a copy on {d.short_name}", d.name)
        # The event may be destroyed only once the default stream has passed
        # the wait: keep it until an event recorded after the wait completes.
        passed = Event(d)
        d._se.record_event(d._sp, d._c.stream, passed._e, st)
        raise_status(st, f"record_event on {d.short_name}", d.name)
        self._cs.keep(passed, self._done)
        h, self._h = self._h, None
        return Tensor._from_handle(h, d, self._dtype, self._shape)

    def __del__(self):
        h = getattr(self, "_h", None)
        if h is not None:
            self._h = None
            lib.TF_DeleteTensor(h)  # the memory waits for the copy (record_stream)


def copy_to_device_async(value: Any, device: Any = None) -> PendingCopy:
    """Copies a numpy array (or anything ``np.asarray`` takes) to `device`
    (a name or device object; default: the current ``pg.device`` scope) on
    the device's copy stream, and returns at once with a ``PendingCopy``
    (see the module's documentation for the ordering rules)."""
    dev = placement.get_device(device) if device is not None else placement.current()
    if dev is None:
        raise errors.InvalidArgumentError(
            "copy_to_device_async: no device given and no pg.device scope; pass a device "
            "such as 'GPU:0'")
    if not isinstance(dev, Device):
        name = getattr(dev, "name", dev)
        raise errors.InvalidArgumentError(
            f"copy_to_device_async: {name} is not a plugin device; give a device such as "
            "'GPU:0' (CPU tensors need no copy)")
    if dev._c.capturing:
        raise errors.FailedPreconditionError(
            f"copy_to_device_async: {dev.short_name} is capturing a device graph; a copy "
            "on its copy stream cannot be part of the graph (use pg.constant)",
            device=dev.name)
    a = np.asarray(value)
    if not a.flags.c_contiguous:
        a = np.ascontiguousarray(a)
    dtype = dtypes.as_dtype(a.dtype)
    cs = _copy_stream(dev)
    se, sp, copy = dev._se, dev._sp, cs.stream._s
    st = status()
    dims = ffi.new("int64_t[]", list(a.shape) or [0])
    h = lib.pg_device_alloc_tensor(dev._c, dtype.enum, dims, a.ndim, st)
    raise_status(st, f"allocating {a.nbytes} bytes on {dev.short_name}", dev.name)
    pending = PendingCopy(dev, h, dtype, a.shape, Event(dev), cs)
    # The block may still be read by work queued on the default stream.
    se.create_stream_dependency(sp, copy, dev._c.stream, st)
    raise_status(st, f"ordering the copy stream of {dev.short_name}", dev.name)
    if a.nbytes:
        mem = ffi.new("SP_DeviceMemoryBase*")
        lib.pg_tensor_mem(h, mem)
        se.memcpy_htod(sp, copy, mem, ffi.from_buffer(a), a.nbytes, st)
        raise_status(st, f"host-to-device copy of {a.nbytes} bytes on {dev.short_name}",
                     dev.name)
    lib.pg_tensor_record_stream(h, cs.stream._cell, st)
    raise_status(st, f"record_stream on {dev.short_name}", dev.name)
    cs.stream.record(pending._done)
    cs.keep(pending._done, a)
    return pending
