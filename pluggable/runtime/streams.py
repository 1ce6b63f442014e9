"""Streams, events and timers of a plugin device (over its SP_StreamExecutor).

Ops run on the device's default stream; these objects give tests,
benchmarks and the plugin checker direct access to the rest of the device
runtime."""
from __future__ import annotations

from typing import Any

from .. import _core
from .._core import ffi, status
from .._core.ownership import OwnsCoreResource
from ..framework import errors
from .status import raise_status


class Stream(OwnsCoreResource):
    """An extra stream of a device (ops use the device's default stream)."""

    def __init__(self, device: Any):
        self.device = device
        out = ffi.new("SP_Stream*")
        st = status()
        device._se.create_stream(device._sp, out, st)
        raise_status(st, f"create_stream on {device.short_name}", device.name)
        # Any handle is legal, NULL or one shared by every stream: the core
        # identifies the stream by `_cell`, this object's copy of it.
        self._cell = out
        self._s = out[0]
        self._keep: list = []   # host arrays in use by enqueued copies

    def __del__(self):
        if getattr(self, "_s", None) is None:
            return  # creation failed
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
        cfn, arg = _core.make_host_callback(fn)
        if not self.device._se.host_callback(self.device._sp, self._s, cfn, arg):
            _core.drop_host_callback(arg)
            raise errors.InternalError(f"{self.device.short_name}: host_callback was refused")


_EVENT_STATES = {0: "unknown", 1: "error", 2: "pending", 3: "complete"}


class Event(OwnsCoreResource):
    def __init__(self, device: Any):
        self.device = device
        out = ffi.new("SP_Event*")
        st = status()
        device._se.create_event(device._sp, out, st)
        raise_status(st, f"create_event on {device.short_name}", device.name)
        # Any handle is legal, NULL or one shared by every event: this
        # object, not the value, is the event.
        self._e = out[0]

    def __del__(self):
        if getattr(self, "_e", None) is None:
            return
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


class Timer(OwnsCoreResource):
    def __init__(self, device: Any):
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
        self._t = out[0]  # any value is legal, NULL included

    def __del__(self):
        if getattr(self, "_t", None) is None:
            return
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
