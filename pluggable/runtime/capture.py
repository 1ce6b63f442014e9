"""Device graphs: a function's device work captured once and replayed
(the plugin's SE_InitStreamCapture, stream_capture.h).

``DeviceGraph.capture(device, fn, inputs)`` runs ``fn`` (a function of
tensors that calls ops on ``device``) a few times as usual, then once more
while the device records the kernels it enqueues instead of running them.
``replay(inputs)`` copies the new input values into the graph's own input
buffers (in place, in stream order), launches the recorded work with one
call, and returns copies of the outputs, so the caller never holds memory
the next replay overwrites.

What a capture may contain: ops placed on ``device`` (their kernels are
recorded) and host work whose result cannot change between replays (shapes,
constants): host work runs once, at capture time. Reading a value the
captured work produces during the capture is refused
(FailedPreconditionError): that work has not run. The memory the recorded
work uses is the graph's until ``close()``: the core never hands it to
anything else meanwhile (allocations made while capturing come from a pool
private to the graph).

Captures are per thread: other threads keep running ops on the device
normally while one thread captures.
"""
from __future__ import annotations

import threading
from typing import Callable, Sequence

from .._core import code_and_message, ffi, lib
from .._core.ownership import OwnsCoreResource
from ..framework import errors
from ..framework.tensor import Tensor
from .device import Device


def supported(device) -> bool:
    """Whether `device` (a plugin Device) can capture device graphs."""
    return isinstance(device, Device) and device._c.platform.capture_fns != ffi.NULL


def _status():
    return ffi.gc(lib.TF_NewStatus(), lib.TF_DeleteStatus)


def _raise(st, what: str, device: Device) -> None:
    code, msg = code_and_message(st)
    if code:
        raise errors.make_error(code, f"{what} on {device.short_name}: {msg}", device=device.name)


def _new_like(device: Device, t: Tensor):
    """An uninitialised device buffer of `t`'s dtype and shape (a handle)."""
    st = _status()
    dims = ffi.new("int64_t[]", list(t.shape) or [0])
    h = lib.pg_device_alloc_tensor(device._c, t.dtype.enum, dims, len(t.shape), st)
    _raise(st, "allocating a device graph buffer", device)
    return h


def _copy_into(device: Device, dst, src: Tensor) -> None:
    """Enqueues `dst` <- `src` (any device or the host) on the default stream."""
    if src._dev is not device:
        src = device.copy_in(src)  # staged: the caller's memory may change at once
    st = _status()
    lib.pg_tensor_copy_into(dst, src._h, st)
    _raise(st, "copying into a device graph buffer", device)


class DeviceGraph(OwnsCoreResource):
    """The device work of one function call, captured once, replayed many
    times. Make one with ``DeviceGraph.capture``."""

    def __init__(self, device: Device, handle, slots: list[Tensor], outputs: list[Tensor]):
        self.device = device
        self._g = handle
        self._slots = slots          # the graph's input buffers
        self._outputs = outputs      # the graph's output buffers
        self._signature = [(t.dtype, t.shape) for t in slots]
        self._lock = threading.Lock()
        self.launches = 0

    @classmethod
    def capture(cls, device: Device, fn: Callable[..., Sequence[Tensor]],
                inputs: Sequence[Tensor], warmup: int = 2) -> "DeviceGraph":
        """Runs ``fn(*inputs)`` `warmup` times, then captures one call with
        inputs in buffers the graph owns. ``fn`` returns a list of tensors
        placed on `device`. Raises UnimplementedError for a device that
        cannot capture, and the capture's error if the work could not be
        recorded (nothing is left behind: the device keeps working)."""
        if not supported(device):
            raise errors.UnimplementedError(
                f"{device!r} cannot capture device graphs: its plugin does not export "
                "SE_InitStreamCapture", device=getattr(device, "name", None))
        inputs = list(inputs)
        for _ in range(warmup):
            fn(*inputs)
        slots = []
        for t in inputs:
            h = _new_like(device, t)
            _copy_into(device, h, t)
            slots.append(Tensor._from_handle(h, device, t.dtype, t.shape))
        st = _status()
        g = lib.pg_capture_begin(device._c, st)
        if g == ffi.NULL:
            _raise(st, "starting a device graph capture", device)
        try:
            outputs = list(fn(*slots))
        except BaseException:
            lib.pg_capture_end(g, _status())
            lib.pg_device_graph_destroy(g)
            raise
        lib.pg_capture_end(g, st)
        code, msg = code_and_message(st)
        wrong = [t for t in outputs if not (isinstance(t, Tensor) and t._dev is device)]
        if code or wrong:
            lib.pg_device_graph_destroy(g)
            if code:
                _raise(st, "capturing a device graph", device)
            raise errors.InvalidArgumentError(
                f"a device graph on {device.short_name} must return tensors of that device; "
                f"got {[getattr(t, 'device', type(t).__name__) for t in wrong]}",
                device=device.name)
        return cls(device, g, slots, outputs)

    # ------------------------------------------------------------------ use
    @property
    def input_signature(self) -> list[tuple]:
        """(dtype, shape) of each input the graph was captured with."""
        return list(self._signature)

    def replay(self, inputs: Sequence[Tensor]) -> list[Tensor]:
        """Runs the captured work on new input values (same dtypes and
        shapes as at capture) and returns new tensors holding the outputs."""
        inputs = list(inputs)
        if self._g is None:
            raise errors.FailedPreconditionError("the device graph was closed",
                                                 device=self.device.name)
        if [(t.dtype, t.shape) for t in inputs] != self._signature:
            raise errors.InvalidArgumentError(
                f"a device graph captured for inputs {self._show(self.input_signature)} "
                f"was given {self._show([(t.dtype, t.shape) for t in inputs])}: capture "
                "another graph for these shapes", device=self.device.name)
        dev = self.device
        with self._lock:
            if self._g is None:
                raise errors.FailedPreconditionError("the device graph was closed",
                                                     device=dev.name)
            for slot, t in zip(self._slots, inputs):
                _copy_into(dev, slot._h, t)
            st = _status()
            lib.pg_device_graph_launch(self._g, st)
            _raise(st, "launching a device graph", dev)
            self.launches += 1
            results = []
            for out in self._outputs:
                h = _new_like(dev, out)
                _copy_into(dev, h, out)
                results.append(Tensor._from_handle(h, dev, out.dtype, out.shape))
        return results

    @staticmethod
    def _show(sig) -> str:
        return "[" + ", ".join(f"{d.name}{list(s)}" for d, s in sig) + "]"

    # --------------------------------------------------------------- memory
    @property
    def memory_bytes(self) -> int:
        """Device memory the graph's private pool holds."""
        return int(lib.pg_device_graph_bytes(self._g)) if self._g is not None else 0

    def memory_blocks(self) -> list[tuple[int, int]]:
        """(address, size) of each block of the graph's private pool."""
        if self._g is None:
            return []
        n = lib.pg_device_graph_blocks(self._g, ffi.NULL, ffi.NULL, 0)
        addrs, sizes = ffi.new("void*[]", max(n, 1)), ffi.new("int64_t[]", max(n, 1))
        n = lib.pg_device_graph_blocks(self._g, addrs, sizes, n)
        return [(int(ffi.cast("uintptr_t", addrs[i])), int(sizes[i])) for i in range(n)]

    def close(self) -> None:
        """Waits for the device, then releases the graph and its memory."""
        with self._lock:
            g, self._g = self._g, None
        if g is not None:
            lib.pg_device_graph_destroy(g)
            self._outputs = []
            self._slots = []

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass

    def __repr__(self) -> str:
        return (f"<DeviceGraph on {self.device.short_name}: inputs "
                f"{self._show(self._signature)}{'' if self._g is not None else ' (closed)'}, "
                f"{self.launches} launches>")
