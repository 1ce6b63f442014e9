"""Conformance checks of copies, streams, events, timers, host callbacks and
stream errors."""
from __future__ import annotations

import threading
import time

import numpy as np

from ..._core import ffi, lib
from ...framework import errors
from ...runtime import native_stream
from .results import CheckFailed, CheckSkipped, expect



class StreamChecks:
    """Stream and copy checks on ``self.dev`` (mixed into ``Suite``)."""

    def check_sync_copies(self) -> str:
        d = self.dev
        for n in (1, 1000, (1 << 20) + 3):
            data = self.rng.integers(0, 256, n, dtype=np.uint8)
            a, b = d.allocate(n), d.allocate(n)
            a.copy_from_host(data)
            d.copy(b, a)
            back = np.zeros(n, np.uint8)
            b.copy_to_host(back)
            expect(np.array_equal(back, data), f"{n} bytes: host->device->device->host "
                    "round trip (sync_memcpy_*) changed the data")
        return "sync_memcpy_htod / dtod / dtoh round trips of 1 B to 1 MiB"

    def check_async_copies(self) -> str:
        d = self.dev
        s = d.create_stream()
        for n in (1, 4096, (4 << 20) + 5):
            data = self.rng.integers(0, 256, n, dtype=np.uint8)
            back = np.zeros(n, np.uint8)
            a, b = d.allocate(n), d.allocate(n)
            a.copy_from_host(data, stream=s)
            d.copy(b, a, stream=s)
            b.copy_to_host(back, stream=s)
            s.synchronize()
            expect(np.array_equal(back, data), f"{n} bytes: asynchronous round trip "
                    "(memcpy_htod, memcpy_dtod, memcpy_dtoh on one stream) changed the data")
        return "memcpy_htod / dtod / dtoh on one stream, 1 B to 4 MiB"

    def check_stream_ordering(self) -> str:
        d = self.dev
        n = 8 << 20
        s1, s2 = d.create_stream(), d.create_stream()
        for rnd in range(3):
            data = self.rng.integers(0, 256, n, dtype=np.uint8)
            back = np.zeros(n, np.uint8)
            a, b = d.allocate(n), d.allocate(n)
            ev = d.create_event()
            a.copy_from_host(data, stream=s1)
            s1.record(ev)
            s2.wait(ev)
            d.copy(b, a, stream=s2)
            b.copy_to_host(back, stream=s2)
            s2.synchronize()
            s1.synchronize()
            expect(np.array_equal(back, data), f"round {rnd}: work on stream 2 after "
                    "wait_for_event did not see the copy recorded on stream 1")
        data = self.rng.integers(0, 256, n, dtype=np.uint8)
        back = np.zeros(n, np.uint8)
        a, b = d.allocate(n), d.allocate(n)
        a.copy_from_host(data, stream=s1)
        s2.wait_stream(s1)
        d.copy(b, a, stream=s2)
        b.copy_to_host(back, stream=s2)
        s2.synchronize()
        s1.synchronize()
        expect(np.array_equal(back, data), "work on stream 2 after create_stream_dependency "
                "did not see the copy enqueued on stream 1")
        return "record_event / wait_for_event and create_stream_dependency order two streams"

    def _gate_callback(self, s) -> tuple[threading.Event, list]:
        """Enqueues a host callback that blocks `s` until the returned gate is
        set (unless the plugin runs callbacks inline on the calling thread)."""
        gate = threading.Event()
        info: list = []
        caller = threading.get_ident()

        def blocker():
            inline = threading.get_ident() == caller
            info.append(inline)
            if not inline:
                gate.wait(10.0)
        s.host_callback(blocker)
        return gate, info

    def check_events(self) -> str:
        """An event is pending behind unfinished work and complete after
        block_host_for_event. A plugin whose event handles are distinct also
        reports a new event 'unknown' and refuses to wait for one never
        recorded; one whose handles are NULL or shared (legal, as in
        TensorFlow) cannot tell its events apart, so for it those two
        answers are about the queue instead and are not checked."""
        d = self.dev
        s = d.create_stream()
        e = d.create_event()
        e2 = d.create_event()
        distinct = e._e != ffi.NULL and e._e != e2._e
        st = e.status()
        expect(st == "unknown" or (not distinct and st == "complete"),
               f"a new event reports {st!r}, expected 'unknown'")
        gate, info = self._gate_callback(s)
        s.record(e)
        pending = e.status()
        inline = bool(info and info[0])
        gate.set()
        e.synchronize()
        done = e.status()
        s.synchronize()
        if not inline:
            expect(pending == "pending", f"an event recorded behind blocked work reports "
                    f"{pending!r}, expected 'pending'")
        expect(done == "complete", f"after block_host_for_event the event reports {done!r}, "
                "expected 'complete'")
        seq = "unknown -> complete (work runs inline)" if inline else "unknown -> pending -> complete"
        if not distinct:
            e2.synchronize()  # waits for the work enqueued so far; must not fail or hang
            kind = "NULL" if e._e == ffi.NULL else "shared"
            return (f"{seq.replace('unknown', st)}; {kind} event handles (legal): "
                    "per-event answers not checked")
        try:
            e2.synchronize()
        except Exception as exc:
            note = f"waiting on an unrecorded event raised {type(exc).__name__}"
        else:
            raise CheckFailed("block_host_for_event on a never-recorded event returned OK; it "
                              "must report TF_FAILED_PRECONDITION")
        return f"{seq}; {note}"

    def check_timers(self) -> str:
        d = self.dev
        try:
            tm = d.create_timer()
        except errors.UnimplementedError:
            raise CheckSkipped("the plugin has no timers (optional)") from None
        s = d.create_stream()
        n = 8 << 20
        buf = d.allocate(n)
        data = np.ones(n, np.uint8)
        t0 = time.perf_counter_ns()
        tm.start(s)
        buf.copy_from_host(data, stream=s)
        tm.stop(s)
        s.synchronize()
        wall = time.perf_counter_ns() - t0
        ns = tm.nanoseconds()
        expect(0 < ns <= wall + 5_000_000, f"the timer measured {ns} ns for work that took "
                f"{wall} ns of wall time (must be > 0 and not more than the wall time)")
        return f"8 MiB copy timed at {ns / 1e3:.1f} us (wall {wall / 1e3:.1f} us)"

    def check_host_callback(self) -> str:
        d = self.dev
        s = d.create_stream()
        n = 1 << 20
        data = self.rng.integers(0, 256, n, dtype=np.uint8)
        back = np.zeros(n, np.uint8)
        buf = d.allocate(n)
        seen: list = []
        buf.copy_from_host(data, stream=s)
        buf.copy_to_host(back, stream=s)
        s.host_callback(lambda: seen.append(back.copy()))
        s.synchronize()
        expect(len(seen) == 1, f"the host callback ran {len(seen)} times, expected once")
        expect(np.array_equal(seen[0], data), "the host callback ran before the copies "
                "enqueued ahead of it had finished")
        return "runs once, after the work enqueued before it"

    def check_stream_errors(self) -> str:
        d = self.dev
        s = d.create_stream()

        def fail():
            raise RuntimeError("conformance: deliberate host callback error")
        s.host_callback(fail)
        try:
            s.synchronize()
        except Exception as exc:
            first = type(exc).__name__
        else:
            raise CheckFailed("an error set by a host callback was not reported by "
                              "block_host_until_done / get_stream_status")
        n = 4096
        data = self.rng.integers(0, 256, n, dtype=np.uint8)
        back = np.zeros(n, np.uint8)
        buf = d.allocate(n)
        buf.copy_from_host(data, stream=s)
        buf.copy_to_host(back, stream=s)
        try:
            s.synchronize()
        except Exception as exc:
            raise CheckFailed(f"the stream error was reported again after it had been reported "
                              f"once (block_host_until_done must clear it): {exc}") from None
        expect(np.array_equal(back, data), "the stream did not work after its error was "
                "reported and cleared")
        return f"a host callback error is reported ({first}) once, then the stream works again"

    def check_native_stream(self) -> str:
        """The native-stream extension (``pluggable_native_stream.h``), where
        the plugin exports it: a caller that knows only version 1 gets
        version 1 and nothing written past the size it gave; the kind is
        known; a host-memory device has no native functions; a CUDA device
        hands out its stream, and version 2's ``order_native`` refuses the
        ambiguous stream 0 and an unknown order and accepts the default
        streams both ways."""
        d = self.dev
        handle = getattr(d.plugin, "handle", None)
        sym = lib.pg_dlsym(handle, b"PG_GetNativeStreamFns") if handle is not None else ffi.NULL
        if sym == ffi.NULL:
            raise CheckSkipped("the plugin does not export PG_GetNativeStreamFns (optional)")
        getter = ffi.cast("PG_GetNativeStreamFnsFn", sym)
        v1 = ffi.offsetof("PG_NativeStreamFns", "compute_capability") + ffi.sizeof("void*")
        full = ffi.sizeof("PG_NativeStreamFns")
        guard = b"\xab" * (full + 16)
        raw = ffi.new("char[]", len(guard))
        ffi.memmove(raw, guard, len(guard))
        table = ffi.cast("PG_NativeStreamFns*", raw)
        table.struct_size = v1
        getter(table)
        expect(ffi.buffer(raw + v1, len(guard) - v1)[:] == guard[v1:],
               f"PG_GetNativeStreamFns wrote past struct_size ({v1} bytes, a version-1 "
               "caller): fill the fields of a version only when struct_size covers them")
        expect(table.version in (0, 1), f"a version-1 caller got version {table.version}")
        fns = native_stream.plugin_fns(d)
        if fns is None:
            raise CheckSkipped("the table's version is 0: treated as absent")
        kind = int(fns.kind)
        expect(kind in (native_stream.KIND_NONE, native_stream.KIND_CUDA),
               f"unknown kind {kind}")
        order = native_stream.order_fn(d)
        if kind == native_stream.KIND_NONE:
            expect(fns.native_stream == ffi.NULL and order is None,
                   "kind PG_NATIVE_STREAM_NONE (host memory) with a native_stream or "
                   "order_native function: a host-memory device has no native streams")
            return f"version {fns.version}, host memory (no native streams)"
        ns = native_stream.native_stream(d)
        expect(ns is not None and ns.handle != 0,
               "kind PG_NATIVE_STREAM_CUDA without a native handle for the default stream")
        if order is None:
            return f"version {fns.version}, CUDA streams, no order_native"
        for bad, what in ((0, "stream 0"), (1, "order 7")):
            how = 7 if what == "order 7" else native_stream.NATIVE_AFTER_STREAM
            expect(native_stream.order(d, bad, how) is not None,
                   f"order_native accepted {what}: it must set an error status")
        for native in (1, 2):
            for how in (native_stream.STREAM_AFTER_NATIVE, native_stream.NATIVE_AFTER_STREAM):
                why = native_stream.order(d, native, how)
                expect(why is None, f"order_native(native={native}, order={how}) failed: {why}")
        d.synchronize()
        return f"version {fns.version}, CUDA streams, order_native both ways"
