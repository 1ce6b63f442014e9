"""Devices: the built-in CPU and plugin devices with their device runtime.

A plugin ``Device`` wraps the core's ``pg_device`` (the plugin's SP_Device,
SP_StreamExecutor and default stream, plus the core's caching allocator).
Its methods expose the device runtime directly: streams, events, timers,
raw device buffers and copies. Ordinary users only need tensors and
``pg.device(...)``; these objects serve tests, benchmarks and plugin checks.
"""
from __future__ import annotations

import threading
from typing import Any, NamedTuple

import numpy as np

from . import errors
from ._ffi import code_and_message, cstr, ffi, lib, make_host_callback, drop_host_callback, status

JOB_PREFIX = "/job:localhost/replica:0/task:0/device:"


class PhysicalDevice(NamedTuple):
    """A device as ``list_physical_devices`` reports it."""
    name: str
    device_type: str


def raise_status(st, what: str, device: str | None = None, op: str | None = None) -> None:
    """Raises the typed error held by `st` (if any), prefixed by `what`."""
    code, msg = code_and_message(st)
    if code:
        raise errors.make_error(code, f"{what}: {msg}" if what else msg, op=op, device=device)


class CpuDevice:
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

    def __repr__(self) -> str:
        return "<pg.Device CPU:0>"


class Device:
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
        self._lock = threading.Lock()
        self._seq = 0        # numbers the results of asynchronous ops
        self._synced = 0     # results up to here are known to be good
        self._poisoned: list[tuple[int, int, errors.OpError]] = []

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
        """(free, total) device memory in bytes, or None if unknown."""
        if self._se.device_memory_usage == ffi.NULL:
            return None
        free, total = ffi.new("int64_t*"), ffi.new("int64_t*")
        if not self._se.device_memory_usage(self._sp, free, total):
            return None
        return int(free[0]), int(total[0])

    def allocator_stats(self) -> dict | None:
        """The plugin allocator's SP_AllocatorStats, or None if unavailable."""
        if self._se.get_allocator_stats == ffi.NULL:
            return None
        s = ffi.new("SP_AllocatorStats*")
        s.struct_size = ffi.sizeof("SP_AllocatorStats")
        if not self._se.get_allocator_stats(self._sp, s):
            return None
        return {
            "num_allocs": s.num_allocs, "bytes_in_use": s.bytes_in_use,
            "peak_bytes_in_use": s.peak_bytes_in_use,
            "largest_alloc_size": s.largest_alloc_size,
            "bytes_limit": s.bytes_limit if s.has_bytes_limit else None,
            "bytes_reserved": s.bytes_reserved,
            "peak_bytes_reserved": s.peak_bytes_reserved,
            "largest_free_block_bytes": s.largest_free_block_bytes,
        }

    def cache_stats(self) -> dict:
        """Statistics of the core's caching allocator for this device."""
        s = self._c.stats
        return {k: int(getattr(s, k)) for k in (
            "bytes_in_use", "peak_bytes_in_use", "bytes_cached", "bytes_reserved",
            "num_allocs", "num_cache_hits", "num_plugin_allocs", "num_plugin_frees",
            "num_ooms")}

    def empty_cache(self) -> None:
        """Returns every cached block to the plugin."""
        st = status()
        lib.pg_device_empty_cache(self._c, st)
        raise_status(st, f"emptying the allocator cache of {self.short_name}", self.name)

    # --- asynchronous errors -------------------------------------------
    def next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def check_sync(self, st, what: str, synced: bool = True) -> None:
        """Raises the error in `st`, if any. Errors of asynchronous work are
        reported once by the plugin, so every result produced since the last
        good synchronisation is then marked failed (reading one raises).
        `synced` says whether the call waited for all queued work."""
        code, msg = code_and_message(st)
        with self._lock:
            if code:
                err = errors.make_error(code, f"{what} on {self.short_name}: {msg}",
                                        device=self.name)
                if self._seq > self._synced:
                    self._poisoned.append((self._synced, self._seq, err))
                self._synced = self._seq
                raise err
            if synced:
                self._synced = self._seq

    def check_result(self, seq: int) -> None:
        """Raises if the result numbered `seq` came from failed asynchronous work."""
        for lo, hi, err in self._poisoned:
            if lo < seq <= hi:
                raise errors.make_error(
                    err.code, "this value was produced after an asynchronous error on "
                    f"{self.short_name} and is not valid: {err.message}", device=self.name)

    def synchronize(self) -> None:
        """Waits for the device's work; raises the first asynchronous error."""
        st = status()
        lib.pg_device_sync(self._c, st)
        self.check_sync(st, "asynchronous error")

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
        n = _check_len(nbytes, dst, src)
        st = status()
        if stream is None:
            self.synchronize()
            self._se.sync_memcpy_dtod(self._sp, dst._mem, src._mem, n, st)
        else:
            self._se.memcpy_dtod(self._sp, stream._s, dst._mem, src._mem, n, st)
        raise_status(st, f"device-to-device copy on {self.short_name}", self.name)


def _check_len(nbytes, *bufs) -> int:
    n = min(b.nbytes for b in bufs) if nbytes is None else int(nbytes)
    if n < 0 or any(n > b.nbytes for b in bufs):
        raise errors.InvalidArgumentError(
            f"copy of {n} bytes does not fit buffers of {[b.nbytes for b in bufs]} bytes")
    return n


class Stream:
    """An extra stream of a device (ops use the device's default stream)."""

    def __init__(self, device: Device):
        self.device = device
        out = ffi.new("SP_Stream*")
        st = status()
        device._se.create_stream(device._sp, out, st)
        raise_status(st, f"create_stream on {device.short_name}", device.name)
        self._s = out[0]
        self._keep: list = []   # host arrays in use by enqueued copies

    def __del__(self):
        try:
            st = status()
            self._sync(st)
            self.device._se.destroy_stream(self.device._sp, self._s)
        except Exception:
            pass

    def _sync(self, st) -> None:
        d = self.device
        if d._se.block_host_until_done != ffi.NULL:
            d._se.block_host_until_done(d._sp, self._s, st)
        else:
            ev = Event(d)
            self.record(ev)
            ev.synchronize()
            d._se.get_stream_status(d._sp, self._s, st)

    def synchronize(self) -> None:
        st = status()
        self._sync(st)
        self._keep.clear()
        raise_status(st, f"stream on {self.device.short_name}", self.device.name)

    def record(self, event: "Event") -> None:
        st = status()
        self.device._se.record_event(self.device._sp, self._s, event._e, st)
        raise_status(st, "record_event", self.device.name)

    def wait(self, event: "Event") -> None:
        st = status()
        self.device._se.wait_for_event(self.device._sp, self._s, event._e, st)
        raise_status(st, "wait_for_event", self.device.name)

    def wait_stream(self, other: "Stream") -> None:
        st = status()
        self.device._se.create_stream_dependency(self.device._sp, self._s, other._s, st)
        raise_status(st, "create_stream_dependency", self.device.name)

    def status(self) -> None:
        """Raises the stream's error, if any, without waiting."""
        st = status()
        self.device._se.get_stream_status(self.device._sp, self._s, st)
        raise_status(st, "stream status", self.device.name)

    def host_callback(self, fn) -> None:
        """Runs `fn()` on a host thread when the stream reaches this point."""
        cfn, arg = make_host_callback(fn)
        if not self.device._se.host_callback(self.device._sp, self._s, cfn, arg):
            drop_host_callback(arg)
            raise errors.InternalError(f"{self.device.short_name}: host_callback was refused")


_EVENT_STATES = {0: "unknown", 1: "error", 2: "pending", 3: "complete"}


class Event:
    def __init__(self, device: Device):
        self.device = device
        out = ffi.new("SP_Event*")
        st = status()
        device._se.create_event(device._sp, out, st)
        raise_status(st, f"create_event on {device.short_name}", device.name)
        self._e = out[0]

    def __del__(self):
        try:
            self.device._se.destroy_event(self.device._sp, self._e)
        except Exception:
            pass

    def status(self) -> str:
        """"unknown", "error", "pending" or "complete"."""
        return _EVENT_STATES.get(int(self.device._se.get_event_status(self.device._sp, self._e)),
                                 "unknown")

    def synchronize(self) -> None:
        st = status()
        self.device._se.block_host_for_event(self.device._sp, self._e, st)
        raise_status(st, "block_host_for_event", self.device.name)


class Timer:
    def __init__(self, device: Device):
        self.device = device
        se = device._se
        plat = device._c.platform
        if se.create_timer == ffi.NULL or not plat.has_timers:
            raise errors.UnimplementedError(
                f"{device.short_name}: the plugin does not implement timers "
                "(SP_StreamExecutor.create_timer / SP_PlatformFns.create_timer_fns)")
        out = ffi.new("SP_Timer*")
        st = status()
        se.create_timer(device._sp, out, st)
        raise_status(st, "create_timer", device.name)
        self._t = out[0]

    def __del__(self):
        try:
            self.device._se.destroy_timer(self.device._sp, self._t)
        except Exception:
            pass

    def start(self, stream: Stream) -> None:
        st = status()
        self.device._se.start_timer(self.device._sp, stream._s, self._t, st)
        raise_status(st, "start_timer", self.device.name)

    def stop(self, stream: Stream) -> None:
        st = status()
        self.device._se.stop_timer(self.device._sp, stream._s, self._t, st)
        raise_status(st, "stop_timer", self.device.name)

    def nanoseconds(self) -> int:
        """Time between the start and stop marks (synchronise the stream first)."""
        return int(self.device._c.platform.timer_fns.nanoseconds(self._t))


class DeviceBuffer:
    """Raw device memory from the caching allocator."""

    def __init__(self, device: Device, nbytes: int):
        if nbytes < 0:
            raise errors.InvalidArgumentError(f"cannot allocate {nbytes} bytes")
        self.device = device
        self.nbytes = int(nbytes)
        st = status()
        dims = ffi.new("int64_t[1]", [self.nbytes])
        t = lib.pg_device_alloc_tensor(device._c, 4, dims, 1, st)  # TF_UINT8
        raise_status(st, f"allocating {nbytes} bytes on {device.short_name}", device.name)
        self._t = ffi.gc(t, lib.TF_DeleteTensor)
        self._mem = ffi.new("SP_DeviceMemoryBase*")
        lib.pg_tensor_mem(t, self._mem)

    @property
    def address(self) -> int:
        return int(ffi.cast("uintptr_t", self._mem.opaque))

    def _host(self, arr: np.ndarray, nbytes, writable: bool):
        if not isinstance(arr, np.ndarray) or not arr.flags.c_contiguous:
            raise errors.InvalidArgumentError("host side must be a C-contiguous numpy array")
        if writable and not arr.flags.writeable:
            raise errors.InvalidArgumentError("destination array is read-only")
        n = _check_len(nbytes, self) if nbytes is not None else min(self.nbytes, arr.nbytes)
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
