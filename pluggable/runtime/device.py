"""Devices: the built-in CPU and plugin devices with their device runtime.

A plugin ``Device`` wraps the core's ``pg_device`` (the plugin's SP_Device,
SP_StreamExecutor and default stream, plus the core's caching allocator).
Its methods expose the device runtime directly: streams, events, timers,
raw device buffers and copies. Ordinary users only need tensors and
``pg.device(...)``; these objects serve tests, benchmarks and plugin checks.
"""
from __future__ import annotations

import logging
from typing import Any, NamedTuple

import numpy as np

from .._core import code_and_message, cstr, ffi, lib, status
from .._core.ownership import OnePerProcess
from ..framework import errors
from ..framework.tensor import Tensor
from . import peer, trace
from .memory import DeviceBuffer, check_len
from .status import raise_status
from .streams import Event, Stream, Timer

JOB_PREFIX = "/job:localhost/replica:0/task:0/device:"

log = logging.getLogger("pluggable.runtime")

# The fields of SP_AllocatorStats, in order (bit i of the core's `missing`
# mask is field i), with the name ``allocator_stats`` reports them under.
_PLUGIN_STATS = ("num_allocs", "bytes_in_use", "peak_bytes_in_use", "largest_alloc_size",
                 "has_bytes_limit", "bytes_limit", "bytes_reserved", "peak_bytes_reserved",
                 "has_bytes_reservable_limit", "bytes_reservable_limit",
                 "largest_free_block_bytes")


class PhysicalDevice(NamedTuple):
    """A device as ``list_physical_devices`` reports it."""
    name: str
    device_type: str


class CpuDevice(OnePerProcess):
    """The built-in CPU device: numpy kernels, host memory."""

    device_type = "CPU"
    ordinal = 0
    short_name = "CPU:0"
    name = JOB_PREFIX + "CPU:0"
    platform_name = "Host"
    hardware_name = "Host CPU"
    vendor = "pluggable"
    plugin = None

    def physical(self) -> PhysicalDevice:
        return PhysicalDevice("/physical_device:CPU:0", "CPU")

    def synchronize(self) -> None:
        """CPU work runs synchronously: nothing to wait for."""

    def copy_in(self, t: Tensor) -> Tensor:
        """A CPU copy of tensor `t` (from any device)."""
        return Tensor._from_array(t._numpy(), self)

    def __repr__(self) -> str:
        return "<pg.Device CPU:0>"


class Device(OnePerProcess):
    """A device of a plugin."""

    def __init__(self, plugin: Any, cdev: Any):
        self.plugin = plugin
        self._c = cdev
        self._sp = cdev.device
        self._se = cdev.se
        self.device_type = cstr(cdev.platform.platform.type)
        self.ordinal = int(cdev.ordinal)
        self.short_name = f"{self.device_type}:{self.ordinal}"
        self.name = JOB_PREFIX + self.short_name
        self.platform_name = cstr(cdev.platform.platform.name)
        self.hardware_name = cstr(self._sp.hardware_name)
        self.vendor = cstr(self._sp.device_vendor)
        self.pci_bus_id = cstr(self._sp.pci_bus_id)

    def __repr__(self) -> str:
        return f"<pg.Device {self.short_name} ({self.platform_name}: {self.hardware_name})>"

    def physical(self) -> PhysicalDevice:
        return PhysicalDevice(f"/physical_device:{self.short_name}", self.device_type)

    # --- queries -------------------------------------------------------
    def _device_fn(self, name: str) -> Any:
        fns = self._c.device_fns
        if fns.struct_size == 0:
            return None
        fn = getattr(fns, name)
        return None if fn == ffi.NULL else fn(self._sp)

    @property
    def numa_node(self) -> int | None:
        v = self._device_fn("get_numa_node")
        return None if v is None or v < 0 else int(v)

    @property
    def memory_bandwidth(self) -> int | None:
        """Device memory bandwidth in bytes/s, if the plugin reports it."""
        v = self._device_fn("get_memory_bandwidth")
        return None if v is None or v < 0 else int(v)

    @property
    def gflops(self) -> float | None:
        v = self._device_fn("get_gflops")
        return None if v is None or v < 0 else float(v)

    def memory_usage(self) -> tuple[int, int] | None:
        """(free, total) device memory in bytes, or None if unknown (or if
        the plugin's answer makes no sense: a negative value or free >
        total, which is logged)."""
        if self._se.device_memory_usage == ffi.NULL:
            return None
        free, total = ffi.new("int64_t*", -1), ffi.new("int64_t*", -1)
        if not self._se.device_memory_usage(self._sp, free, total):
            return None
        f, t = int(free[0]), int(total[0])
        if f < 0 or t < 0 or f > t:
            log.warning("%s (plugin %s): device_memory_usage answered free=%d, total=%d; "
                        "ignored (free and total must be >= 0 and free <= total)",
                        self.short_name, self.plugin.path, f, t)
            return None
        return f, t

    def allocator_stats(self) -> dict | None:
        """The plugin allocator's SP_AllocatorStats, or None if unavailable.
        Fields the plugin did not fill (past its struct_size) and negative
        counts are None."""
        s = ffi.new("SP_AllocatorStats*")
        missing = ffi.new("uint32_t*")
        if not lib.pg_device_allocator_stats(self._c, s, missing):
            return None
        got = {}
        for i, name in enumerate(_PLUGIN_STATS):
            v = None if missing[0] & (1 << i) else int(getattr(s, name))
            got[name] = None if v is not None and v < 0 else v
        if any(v is None for v in got.values()):
            log.warning("%s (plugin %s): get_allocator_stats left out or gave negative "
                        "values for %s", self.short_name, self.plugin.path,
                        ", ".join(k for k, v in got.items() if v is None))
        return {
            "num_allocs": got["num_allocs"], "bytes_in_use": got["bytes_in_use"],
            "peak_bytes_in_use": got["peak_bytes_in_use"],
            "largest_alloc_size": got["largest_alloc_size"],
            "bytes_limit": got["bytes_limit"] if got["has_bytes_limit"] else None,
            "bytes_reserved": got["bytes_reserved"],
            "peak_bytes_reserved": got["peak_bytes_reserved"],
            "largest_free_block_bytes": got["largest_free_block_bytes"],
        }

    def cache_stats(self) -> dict:
        """Statistics of the core's caching allocator for this device, all
        taken at one moment: bytes_reserved == bytes_in_use + bytes_cached +
        bytes_in_graphs (freed blocks kept for captured device graphs)."""
        s = ffi.new("pg_alloc_stats*")
        lib.pg_device_cache_stats(self._c, s)
        return {k: int(getattr(s, k)) for k in (
            "bytes_in_use", "peak_bytes_in_use", "bytes_cached", "bytes_in_graphs",
            "bytes_reserved",
            "num_allocs", "num_cache_hits", "num_plugin_allocs", "num_plugin_frees",
            "num_ooms")}

    def empty_cache(self) -> None:
        """Returns to the plugin every cached block that no queued work can
        still use. Safe from any thread at any time."""
        st = status()
        lib.pg_device_empty_cache(self._c, st)
        raise_status(st, f"emptying the allocator cache of {self.short_name}", self.name)

    def synchronize(self) -> None:
        """Waits for the device's work; raises the first asynchronous failure
        of an op this thread launched that was not reported to it yet (by a
        read or an earlier synchronize). Failures of other threads' ops are
        theirs: they surface when their values are read."""
        st = status()
        lib.pg_device_synchronize(self._c, st)
        raise_status(st, f"synchronising {self.short_name}", self.name)

    def wait_for_work(self) -> bool:
        """Waits for all work on the device without reporting (or clearing)
        asynchronous errors, which stay for the next synchronisation.
        Returns False if the plugin said it could not."""
        st = status()
        self._se.synchronize_all_activity(self._sp, st)
        return lib.TF_GetCode(st) == 0

    # --- tensors -------------------------------------------------------------
    def read(self, t: Tensor) -> np.ndarray:
        """The value of tensor `t` of this device as a new numpy array, after
        waiting for the work that produces it. Raises the asynchronous error
        of the op that produced it, or of an op it was computed from."""
        if lib.pg_tensor_captured(t._h):
            raise errors.FailedPreconditionError(
                f"reading a tensor on {self.short_name}: it is produced by device work that "
                "is being captured into a device graph, so it exists only once the graph is "
                "replayed", device=self.name)
        if trace.enabled[0]:
            return trace.traced_copy("MemcpyD2H", self, t, self._read, t)
        return self._read(t)

    def _read(self, t: Tensor) -> np.ndarray:
        out = np.empty(t._shape, t._dtype.as_numpy_dtype)
        st = status()
        lib.pg_tensor_to_host(t._h, ffi.from_buffer(out, require_writable=True), out.nbytes, st)
        self._raise_for(t, st, "reading a tensor")
        return out

    def _raise_for(self, t: Tensor, st, what: str) -> None:
        """Raises the error in `st`: the failure `t` carries (naming the op
        where it started), or an error of `what`."""
        if not lib.TF_GetCode(st):
            return  # OK: the message is not read
        code, msg = code_and_message(st)
        op = lib.pg_tensor_failed_op(t._h) if t._h is not None else ffi.NULL
        if op != ffi.NULL:
            raise errors.make_error(code, msg, op=cstr(op), device=self.name)
        raise errors.make_error(code, f"{what} on {self.short_name}: {msg}", device=self.name)

    def copy_in(self, t: Tensor) -> Tensor:
        """A copy of tensor `t` (CPU or any device) on this device, enqueued in
        stream order. Raises the failure `t` carries, if any."""
        if trace.enabled[0]:
            name = "MemcpyH2D" if t._a is not None else "MemcpyD2D"
            return trace.traced_copy(name, self, t, self._copy_in, t)
        return self._copy_in(t)

    def _copy_in(self, t: Tensor) -> Tensor:
        st = status()
        src = t._dev
        if t._a is not None:
            a = t._a
            dims = ffi.new("int64_t[]", list(t._shape) or [0])
            h = lib.pg_tensor_from_host(self._c, t._dtype.enum, dims, len(t._shape),
                                        ffi.from_buffer(a), a.nbytes, st)
        elif isinstance(src, Device) and peer.supports_peer_copy(t, self):
            return Tensor._from_handle(peer.copy_tensor_handle(t, self), self, t._dtype, t._shape)
        else:
            h = lib.pg_tensor_copy_to_device(t._h, self._c, st)
        if h == ffi.NULL:
            (src if isinstance(src, Device) else self)._raise_for(
                t, st, f"copying a tensor to {self.short_name}")
            raise errors.InternalError(f"copy to {self.short_name} failed without a status")
        return Tensor._from_handle(h, self, t._dtype, t._shape)

    # --- runtime objects -------------------------------------------------
    def create_stream(self) -> "Stream":
        return Stream(self)

    def create_event(self) -> "Event":
        return Event(self)

    def create_timer(self) -> "Timer":
        return Timer(self)

    def allocate(self, nbytes: int) -> "DeviceBuffer":
        """Device memory from the core's caching allocator (stream-ordered on
        the default stream)."""
        return DeviceBuffer(self, nbytes)

    def allocate_host(self, nbytes: int) -> np.ndarray:
        """Host memory suited to fast copies (pinned on GPUs), as a uint8
        numpy array. Freed when the array is garbage collected."""
        if self._se.host_memory_allocate == ffi.NULL:
            return np.empty(nbytes, np.uint8)
        p = self._se.host_memory_allocate(self._sp, nbytes)
        if p == ffi.NULL:
            raise errors.ResourceExhaustedError(
                f"{self.short_name}: host_memory_allocate({nbytes}) failed", device=self.name)
        release = self._se.host_memory_deallocate
        sp = self._sp
        owner = ffi.gc(ffi.cast("void*", p), lambda q: release(sp, q), size=nbytes)
        arr = np.frombuffer(ffi.buffer(owner, nbytes), np.uint8)
        return arr

    def copy(self, dst: "DeviceBuffer", src: "DeviceBuffer", nbytes: int | None = None,
             stream: "Stream | None" = None) -> None:
        """Device-to-device copy; synchronous when `stream` is None."""
        n = check_len(nbytes, dst, src)
        st = status()
        if stream is None:
            self.synchronize()
            self._se.sync_memcpy_dtod(self._sp, dst._mem, src._mem, n, st)
        else:
            dst.record_stream(stream)
            src.record_stream(stream)
            self._se.memcpy_dtod(self._sp, stream._s, dst._mem, src._mem, n, st)
        raise_status(st, f"device-to-device copy on {self.short_name}", self.name)


