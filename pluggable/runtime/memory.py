"""Raw device memory from the core's caching allocator (``Device.allocate``)."""
from __future__ import annotations

from typing import Any

import numpy as np

from .._core import ffi, lib, raw_status, status
from .._core.ownership import OwnsCoreResource
from ..framework import errors
from .status import raise_status
from .streams import Stream


def check_len(nbytes, *bufs) -> int:
    n = min(b.nbytes for b in bufs) if nbytes is None else int(nbytes)
    if n < 0 or any(n > b.nbytes for b in bufs):
        raise errors.InvalidArgumentError(
            f"copy of {n} bytes does not fit buffers of {[b.nbytes for b in bufs]} bytes")
    return n


_alloc = lib.pg_device_alloc_tensor


class DeviceBuffer(OwnsCoreResource):
    """Raw device memory from the caching allocator. It belongs to the
    device's default stream; a copy or fill given another `stream` records
    that stream's use (``record_stream``), so that the memory is reused or
    returned to the plugin only after that stream's work is done."""

    __slots__ = ("device", "nbytes", "_t", "_m", "_streams", "__weakref__")

    def __init__(self, device: Any, nbytes: int):
        n = int(nbytes)
        if n < 0:
            raise errors.InvalidArgumentError(f"cannot allocate {nbytes} bytes")
        self.device = device
        self.nbytes = n
        self._m = None
        # Streams recorded as users: kept alive until the memory is freed,
        # since the allocator records events on them then.
        self._streams = None
        st = raw_status()  # (the core resets it)
        t = _alloc(device._c, 4, [n], 1, st)  # TF_UINT8
        if not t:
            raise_status(st, f"allocating {nbytes} bytes on {device.short_name}", device.name)
            raise errors.InternalError(f"allocating {nbytes} bytes on {device.short_name} "
                                       "returned no memory", device=device.name)
        self._t = t

    def __del__(self, _delete=lib.TF_DeleteTensor) -> None:
        t = getattr(self, "_t", None)
        if t is not None:
            self._t = None
            _delete(t)  # (self._streams is still alive here)

    @property
    def _mem(self):
        """The memory as an ``SP_DeviceMemoryBase*`` for the device table."""
        m = self._m
        if m is None:
            m = self._m = ffi.new("SP_DeviceMemoryBase*")
            lib.pg_tensor_mem(self._t, m)
        return m

    @property
    def address(self) -> int:
        return int(ffi.cast("uintptr_t", self._mem.opaque))

    def record_stream(self, stream: Stream) -> None:
        """Notes that `stream` uses this memory (PyTorch's record_stream):
        when the buffer is freed, its memory waits for the work enqueued on
        `stream` until then before it is reused or given back."""
        st = status()
        if stream.device is not self.device:
            raise errors.InvalidArgumentError(
                f"record_stream: the stream is on {stream.device.short_name}, the memory on "
                f"{self.device.short_name}", device=self.device.name)
        lib.pg_tensor_record_stream(self._t, stream._cell, st)
        if self._streams is None:
            self._streams = []
        if not any(s is stream for s in self._streams):
            self._streams.append(stream)
        raise_status(st, f"record_stream on {self.device.short_name}", self.device.name)

    def _host(self, arr: np.ndarray, nbytes, writable: bool):
        if not isinstance(arr, np.ndarray) or not arr.flags.c_contiguous:
            raise errors.InvalidArgumentError("host side must be a C-contiguous numpy array")
        if writable and not arr.flags.writeable:
            raise errors.InvalidArgumentError("destination array is read-only")
        n = check_len(nbytes, self) if nbytes is not None else min(self.nbytes, arr.nbytes)
        if n > arr.nbytes:
            raise errors.InvalidArgumentError(f"copy of {n} bytes exceeds the array ({arr.nbytes})")
        return ffi.from_buffer(arr, require_writable=writable), n

    def copy_from_host(self, arr: np.ndarray, nbytes: int | None = None,
                       stream: Stream | None = None) -> None:
        """Host to device; synchronous when `stream` is None (the array must
        then stay unchanged until the stream is synchronised)."""
        src, n = self._host(arr, nbytes, False)
        d, st = self.device, status()
        if stream is None:
            d.synchronize()
            d._se.sync_memcpy_htod(d._sp, self._mem, src, n, st)
        else:
            self.record_stream(stream)
            stream._keep.append(arr)
            d._se.memcpy_htod(d._sp, stream._s, self._mem, src, n, st)
        raise_status(st, f"host-to-device copy on {d.short_name}", d.name)

    def copy_to_host(self, arr: np.ndarray, nbytes: int | None = None,
                     stream: Stream | None = None) -> None:
        """Device to host; synchronous when `stream` is None."""
        dst, n = self._host(arr, nbytes, True)
        d, st = self.device, status()
        if stream is None:
            d.synchronize()
            d._se.sync_memcpy_dtoh(d._sp, dst, self._mem, n, st)
        else:
            self.record_stream(stream)
            stream._keep.append(arr)
            d._se.memcpy_dtoh(d._sp, stream._s, dst, self._mem, n, st)
        raise_status(st, f"device-to-host copy on {d.short_name}", d.name)

    def _fill(self, name: str, fallback, nbytes, stream, *pattern) -> None:
        d = self.device
        n = self.nbytes if nbytes is None else int(nbytes)
        if n > self.nbytes or n < 0:
            raise errors.InvalidArgumentError(f"{name} of {n} bytes on a {self.nbytes}-byte buffer")
        fn = getattr(d._se, name)
        if fn == ffi.NULL:
            fallback(n, stream)
            return
        if stream is not None:
            self.record_stream(stream)
        s = stream._s if stream is not None else d._c.stream
        st = status()
        fn(d._sp, s, self._mem, *pattern, n, st)
        raise_status(st, f"{name} on {d.short_name}", d.name)
        if stream is None:
            d.synchronize()

    def memset(self, byte: int, nbytes: int | None = None, stream: Stream | None = None) -> None:
        def host(n, s):
            self.copy_from_host(np.full(n, byte, np.uint8), n, s)
        self._fill("memset", host, nbytes, stream, byte & 0xFF)

    def memset32(self, pattern: int, nbytes: int | None = None,
                 stream: Stream | None = None) -> None:
        n = self.nbytes if nbytes is None else int(nbytes)
        if n % 4:
            raise errors.InvalidArgumentError(f"memset32 needs a multiple of 4 bytes, got {n}")

        def host(n, s):
            self.copy_from_host(np.full(n // 4, pattern, np.uint32).view(np.uint8), n, s)
        self._fill("memset32", host, n, stream, pattern & 0xFFFFFFFF)

    def zero(self, nbytes: int | None = None, stream: Stream | None = None) -> None:
        def host(n, s):
            self.memset(0, n, s)
        self._fill("mem_zero", host, nbytes, stream)
