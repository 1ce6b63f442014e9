"""Plugin tools behind ``python -m pluggable plugins`` and ``python -m pluggable check``.

``plugins_main(argv)`` prints the plugin records (``pg.plugins()``) as a
table, or as JSON with ``--json``.

``main(argv)`` runs the conformance suite against one plugin file::

    python -m pluggable check path/to/libmy_plugin.so [--json] [--timeout S]

The suite runs in a subprocess that loads nothing but that plugin
(PLUGGABLE_DISABLE_PLUGINS=1, then ``pg.load_plugin(PATH)``), so a crash or a
hang is reported as a failed check instead of taking the caller down. It
checks, on device 0 of the plugin: loading and validation, device
enumeration, allocation of many sizes (through the core and directly through
the plugin's ``allocate``), synchronous and asynchronous copies, fills,
ordering across two streams with events, event states, timers, host
callbacks and error reporting, allocator statistics, and every registered
kernel on random inputs against the built-in CPU kernels. The exit status is
0 when every check passed (or was skipped as not applicable) and 1 otherwise.

Internal modes of ``python -m pluggable.check`` (used by the loader and by
``main``): ``--probe PATH`` loads PATH and prints its record;
``--suite-child PATH`` runs the suite in the current process.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Iterator

import numpy as np

DEFAULT_TIMEOUT = 600.0


# --------------------------------------------------------------- plugins table

def _plugin_rows(records: list) -> list[tuple[str, ...]]:
    rows = []
    for r in records:
        rows.append((r.status, r.device_type or "-", r.platform_name or "-", r.abi_version or "-",
                     str(r.device_count), str(r.kernels), str(r.ops), r.path))
    return rows


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(str(x[i])) for x in [header, *rows]) for i in range(len(header))]
    fmt = lambda row: "  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip()
    lines = [fmt(header), "-" * len(fmt(header))]
    lines += [fmt(r) for r in rows]
    return "\n".join(lines)


def plugins_main(argv: list[str] | None = None) -> int:
    """``python -m pluggable plugins [--json]``: the plugins found, their
    status, reason, ABI version, platform, device type, device count and
    number of kernels and ops. Returns the exit status (0)."""
    parser = argparse.ArgumentParser(prog="python -m pluggable plugins",
                                     description="List the plugins found and their status.")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    import pluggable as pg
    records = pg.plugins()
    if args.json:
        print(json.dumps([r.to_dict() for r in records], indent=2))
        return 0
    if not records:
        print("no plugins found (see 'python -c \"import pluggable.plugin_loader as l; "
              "help(l)\"' for the search order)")
        return 0
    header = ("STATUS", "DEVICE TYPE", "PLATFORM", "ABI", "DEVICES", "KERNELS", "OPS", "PATH")
    print(_table(header, _plugin_rows(records)))
    notes = []
    for r in records:
        if r.reason:
            notes.append(f"  {r.path}: {r.status}: {r.reason}")
        for why in r.rejected:
            notes.append(f"  {r.path}: rejected registration: {why}")
    if notes:
        print()
        print("\n".join(notes))
    return 0


# -------------------------------------------------------------- check results

@dataclasses.dataclass
class CheckResult:
    """One row of the conformance report. `outcome` is "pass", "fail" or "skip"."""
    name: str
    outcome: str
    detail: str = ""
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


class CheckFailed(Exception):
    """A conformance check failed; the message is the reason."""


class CheckSkipped(Exception):
    """A check does not apply to this plugin; the message says why."""


def _expect(cond: bool, reason: str) -> None:
    if not cond:
        raise CheckFailed(reason)


# ---------------------------------------------------------- subprocess driver

def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def _child_env() -> dict:
    env = dict(os.environ)
    env["PLUGGABLE_DISABLE_PLUGINS"] = "1"
    env.pop("PLUGGABLE_PROBE_PLUGINS", None)
    return env


def _no_core_dumps() -> None:
    try:
        import resource
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except Exception:
        pass


def run_suite(path: str, timeout: float = DEFAULT_TIMEOUT,
              with_plugins: tuple[str, ...] = ()) -> list[CheckResult]:
    """Runs the conformance suite against `path` in a subprocess and returns
    its results; a crash or a timeout becomes a failed check. `with_plugins`
    are loaded first (e.g. the device plugin a kernel-only plugin targets)."""
    cmd = [sys.executable, "-m", "pluggable.check", "--suite-child", os.path.abspath(path)]
    for w in with_plugins:
        cmd += ["--with", os.path.abspath(w)]
    crashed = ""
    try:
        proc = subprocess.run(cmd, env=_child_env(), capture_output=True, text=True,
                              timeout=timeout, preexec_fn=_no_core_dumps)
        out, err, rc = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode("utf-8", "replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err, rc = "", None
        crashed = f"did not finish within {timeout:g} s (hang?); use --timeout to allow more"
    results: list[CheckResult] = []
    started: str | None = None
    stage = ""
    for line in out.splitlines():
        if line.startswith("CHECK_START "):
            started = line[len("CHECK_START "):]
        elif line.startswith("CHECK_RESULT "):
            try:
                results.append(CheckResult(**json.loads(line[len("CHECK_RESULT "):])))
            except (ValueError, TypeError):
                pass
            started = None
        elif line.startswith("PROBE_STAGE "):
            stage = line[len("PROBE_STAGE "):]
    if rc is not None and rc < 0:
        crashed = f"crashed with {_signal_name(-rc)}"
    elif rc not in (None, 0, 1) and not crashed:
        tail = " | ".join(err.strip().splitlines()[-3:])
        crashed = f"the check process exited with status {rc}" + (f": {tail}" if tail else "")
    if crashed:
        where = f" (in {stage})" if started == "load" and stage else ""
        results.append(CheckResult(started or "suite", "fail", crashed + where))
    elif not results:
        tail = " | ".join(err.strip().splitlines()[-3:])
        results.append(CheckResult("suite", "fail", f"the check process reported nothing: {tail}"))
    return results


def format_report(path: str, results: list[CheckResult]) -> str:
    rows = [(r.name, r.outcome.upper(), f"{r.seconds:.2f}", r.detail) for r in results]
    failed = sum(r.outcome == "fail" for r in results)
    verdict = "FAILED" if failed else "PASSED"
    return (f"conformance of {path}\n\n" + _table(("CHECK", "RESULT", "SECONDS", "DETAIL"), rows)
            + f"\n\n{verdict}: {sum(r.outcome == 'pass' for r in results)} passed, {failed} "
            f"failed, {sum(r.outcome == 'skip' for r in results)} skipped")


def main(argv: list[str] | None = None) -> int:
    """``python -m pluggable check PATH.so [--json] [--timeout S]``."""
    parser = argparse.ArgumentParser(
        prog="python -m pluggable check",
        description="Run the conformance suite against one plugin (in a subprocess).")
    parser.add_argument("path", help="the plugin's shared library")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                        help=f"seconds the whole suite may take (default {DEFAULT_TIMEOUT:g})")
    parser.add_argument("--with", dest="with_plugins", action="append", default=[],
                        metavar="OTHER.so",
                        help="load this plugin first (repeatable), e.g. the device plugin "
                             "whose device type a kernel-only plugin targets")
    parser.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--suite-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.probe:
        return _probe_child(args.path)
    if args.suite_child:
        return _suite_child(args.path, args.with_plugins)
    for p in [args.path, *args.with_plugins]:
        if not os.path.exists(p):
            print(f"error: no such file: {p}", file=sys.stderr)
            return 2
    results = run_suite(args.path, args.timeout, tuple(args.with_plugins))
    failed = any(r.outcome == "fail" for r in results)
    if args.json:
        print(json.dumps({"plugin": os.path.realpath(args.path), "passed": not failed,
                          "checks": [r.to_dict() for r in results]}, indent=2))
    else:
        print(format_report(os.path.realpath(args.path), results))
    return 1 if failed else 0


# ------------------------------------------------------------- child processes

def _emit(line: str) -> None:
    """Writes a protocol line at once (it must survive a crash right after)."""
    os.write(1, (line + "\n").encode("utf-8", "replace"))


def _stage_printer(what: str) -> None:
    _emit(f"PROBE_STAGE {what}")


def _probe_child(path: str) -> int:
    """Loads `path` in this (fresh) process and prints its record."""
    from . import plugin_loader
    plugin_loader.stage_hook = _stage_printer
    rec = plugin_loader.load_plugin(path, probe=False, source="probe")
    plugin_loader.stage_hook = None
    _emit("PROBE_RESULT " + json.dumps(rec.to_dict()))
    return 0


def _suite_child(path: str, with_plugins: list[str]) -> int:
    from . import plugin_loader
    for w in with_plugins:
        rec = plugin_loader.load_plugin(w, probe=False, source="--with")
        if rec.status != "loaded":
            _emit("CHECK_RESULT " + json.dumps(CheckResult(
                "load --with", "fail", f"{w}: {rec.status}: {rec.reason}").to_dict()))
            return 1
    plugin_loader.stage_hook = _stage_printer
    suite = Suite(path)
    failed = False
    for name, fn in suite.checks():
        _emit(f"CHECK_START {name}")
        t0 = time.perf_counter()
        try:
            detail = fn() or ""
            outcome = "pass"
        except CheckSkipped as exc:
            outcome, detail = "skip", str(exc)
        except CheckFailed as exc:
            outcome, detail = "fail", str(exc)
        except Exception as exc:
            outcome, detail = "fail", f"{type(exc).__name__}: {exc}"
        plugin_loader.stage_hook = None
        failed |= outcome == "fail"
        res = CheckResult(name, outcome, " ".join(str(detail).split()),
                          round(time.perf_counter() - t0, 3))
        _emit("CHECK_RESULT " + json.dumps(res.to_dict()))
    return 1 if failed else 0


# ------------------------------------------------------------------ the suite

_ALLOC_SIZES = (0, 1, 3, 8, 255, 256, 4095, 4096, 65543, 1 << 20, (16 << 20) + 1)
_LARGE_ALLOC = 256 << 20


class Suite:
    """The conformance checks for one plugin, run in the current process."""

    def __init__(self, path: str):
        self.path = path
        self.rec: Any = None
        self.dev: Any = None
        self.rng = np.random.default_rng(1234)

    def checks(self) -> Iterator[tuple[str, Callable[[], str | None]]]:
        yield "load", self.check_load
        if self.rec is None or self.rec.status != "loaded":
            return
        yield "registrations", self.check_registrations
        yield "devices", self.check_devices
        if self.dev is not None:
            yield "allocation (core)", self.check_alloc_core
            yield "allocation (plugin)", self.check_alloc_plugin
            yield "sync copies", self.check_sync_copies
            yield "async copies", self.check_async_copies
            yield "fills", self.check_fills
            yield "stream ordering", self.check_stream_ordering
            yield "event states", self.check_events
            yield "timers", self.check_timers
            yield "host callback", self.check_host_callback
            yield "stream errors", self.check_stream_errors
            yield "allocator stats", self.check_allocator_stats
        yield from self.kernel_checks()

    # --- loading ---------------------------------------------------------
    def check_load(self) -> str:
        import pluggable as pg
        self.rec = pg.load_plugin(self.path)
        r = self.rec
        _expect(r.status == "loaded", f"{r.status}: {r.reason}")
        return (f"ABI {r.abi_version or '-'}, platform {r.platform_name or '-'}, device type "
                f"{r.device_type or '- (kernel-only plugin)'}, {r.device_count} device(s), "
                f"{r.kernels} kernel(s), {r.ops} op(s)")

    def check_registrations(self) -> str:
        r = self.rec
        _expect(not r.rejected, f"{len(r.rejected)} registration(s) rejected: "
                + "; ".join(r.rejected))
        return f"{r.kernels} kernel(s) and {r.ops} op(s) accepted"

    def check_devices(self) -> str:
        import pluggable as pg
        r = self.rec
        if r.device_type is None:
            from . import registry
            targets = sorted({k.device_type for ks in registry.KERNELS.values() for k in ks
                              if k.plugin is r})
            present = [t for t in targets if _devices_of_type(t)]
            _expect(not targets or present,
                    f"kernel-only plugin (no SE_InitPlugin): its kernels target "
                    f"{', '.join(targets)}, but no such device is loaded; name the device "
                    "plugin with --with PATH")
            raise CheckSkipped("kernel-only plugin (no SE_InitPlugin): no devices of its own; "
                               f"kernels run on {', '.join(present) or 'nothing'}")
        _expect(r.device_count > 0,
                "the plugin reports 0 devices, so no device check can run; run the suite "
                "where the plugin finds its hardware")
        devs = r.devices
        _expect(len(devs) == r.device_count, f"{len(devs)} device objects for a count of "
                f"{r.device_count}")
        listed = {d.name for d in pg.list_physical_devices(r.device_type)}
        for i, d in enumerate(devs):
            _expect(d.ordinal == i, f"device {i} has ordinal {d.ordinal}")
            _expect(d.device_type == r.device_type, f"device {i} has type {d.device_type}")
            _expect(pg.get_device(f"{r.device_type}:{i}") is d,
                    f"pg.get_device('{r.device_type}:{i}') does not return device {i}")
            _expect(f"/physical_device:{r.device_type}:{i}" in listed,
                    f"{r.device_type}:{i} is missing from pg.list_physical_devices()")
            mem = d.memory_usage()
            if mem is not None:
                free, total = mem
                _expect(0 <= free <= total, f"{d.short_name}: device_memory_usage reports "
                        f"free={free} total={total} (need 0 <= free <= total)")
        self.dev = devs[0]
        d = self.dev
        return (f"{len(devs)} device(s); {d.short_name}: {d.hardware_name or '?'} "
                f"({d.vendor or '?'})")

    # --- memory ----------------------------------------------------------
    def _large_ok(self) -> bool:
        mem = self.dev.memory_usage()
        return mem is None or mem[0] >= 4 * _LARGE_ALLOC

    def check_alloc_core(self) -> str:
        from . import errors
        sizes = list(_ALLOC_SIZES) + ([_LARGE_ALLOC] if self._large_ok() else [])
        for n in sizes:
            try:
                buf = self.dev.allocate(n)
            except errors.ResourceExhaustedError as exc:
                raise CheckFailed(f"allocating {n} bytes raised ResourceExhaustedError: "
                                  f"{exc}") from None
            _expect(buf.nbytes == n, f"a {n}-byte buffer reports {buf.nbytes} bytes")
            if 0 < n <= (16 << 20) + 1:
                data = self.rng.integers(0, 256, n, dtype=np.uint8)
                buf.copy_from_host(data)
                back = np.empty(n, np.uint8)
                buf.copy_to_host(back)
                _expect(np.array_equal(back, data),
                        f"{n}-byte buffer: the data read back differs from the data written")
            del buf
        return f"sizes {', '.join(map(str, sizes))} allocated, written and read back"

    def check_alloc_plugin(self) -> str:
        from ._ffi import ffi
        d = self.dev
        sizes = list(_ALLOC_SIZES) + ([_LARGE_ALLOC] if self._large_ok() else [])
        for n in sizes:
            mem = ffi.new("SP_DeviceMemoryBase*")
            mem.struct_size = ffi.sizeof("SP_DeviceMemoryBase")
            d._se.allocate(d._sp, n, 0, mem)
            if n != 0:
                _expect(mem.opaque != ffi.NULL,
                        f"SP_StreamExecutor.allocate({n}) failed (opaque is NULL): out of "
                        "memory, or allocate does not work")
            d._se.deallocate(d._sp, mem)
        return f"allocate/deallocate of {', '.join(map(str, sizes))} bytes"

    # --- copies ------------------------------------------------------------
    def check_sync_copies(self) -> str:
        d = self.dev
        for n in (1, 1000, (1 << 20) + 3):
            data = self.rng.integers(0, 256, n, dtype=np.uint8)
            a, b = d.allocate(n), d.allocate(n)
            a.copy_from_host(data)
            d.copy(b, a)
            back = np.zeros(n, np.uint8)
            b.copy_to_host(back)
            _expect(np.array_equal(back, data), f"{n} bytes: host->device->device->host "
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
            _expect(np.array_equal(back, data), f"{n} bytes: asynchronous round trip "
                    "(memcpy_htod, memcpy_dtod, memcpy_dtoh on one stream) changed the data")
        return "memcpy_htod / dtod / dtoh on one stream, 1 B to 4 MiB"

    def check_fills(self) -> str:
        from ._ffi import ffi
        d = self.dev
        n = 4100
        buf = d.allocate(n)
        back = np.zeros(n, np.uint8)
        buf.memset(0xAB)
        buf.copy_to_host(back)
        _expect(bool((back == 0xAB).all()), "memset(0xAB) did not fill the buffer")
        buf.memset32(0x01020304)
        buf.copy_to_host(back)
        _expect(bool((back.view(np.uint32) == 0x01020304).all()),
                "memset32(0x01020304) did not fill the buffer")
        buf.zero()
        buf.copy_to_host(back)
        _expect(not back.any(), "mem_zero did not zero the buffer")
        used = [f for f in ("mem_zero", "memset", "memset32") if getattr(d._se, f) != ffi.NULL]
        return f"memset, memset32, zero (plugin provides: {', '.join(used) or 'none, core defaults'})"

    # --- streams and events -------------------------------------------------
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
            _expect(np.array_equal(back, data), f"round {rnd}: work on stream 2 after "
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
        _expect(np.array_equal(back, data), "work on stream 2 after create_stream_dependency "
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
        d = self.dev
        s = d.create_stream()
        e = d.create_event()
        st = e.status()
        _expect(st == "unknown", f"a new event reports {st!r}, expected 'unknown'")
        gate, info = self._gate_callback(s)
        s.record(e)
        pending = e.status()
        inline = bool(info and info[0])
        gate.set()
        e.synchronize()
        done = e.status()
        s.synchronize()
        if not inline:
            _expect(pending == "pending", f"an event recorded behind blocked work reports "
                    f"{pending!r}, expected 'pending'")
        _expect(done == "complete", f"after block_host_for_event the event reports {done!r}, "
                "expected 'complete'")
        e2 = d.create_event()
        try:
            e2.synchronize()
        except Exception as exc:
            note = f"waiting on an unrecorded event raised {type(exc).__name__}"
        else:
            raise CheckFailed("block_host_for_event on a never-recorded event returned OK; it "
                              "must report TF_FAILED_PRECONDITION")
        seq = "unknown -> complete (work runs inline)" if inline else "unknown -> pending -> complete"
        return f"{seq}; {note}"

    def check_timers(self) -> str:
        from . import errors
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
        _expect(0 < ns <= wall + 5_000_000, f"the timer measured {ns} ns for work that took "
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
        _expect(len(seen) == 1, f"the host callback ran {len(seen)} times, expected once")
        _expect(np.array_equal(seen[0], data), "the host callback ran before the copies "
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
        _expect(np.array_equal(back, data), "the stream did not work after its error was "
                "reported and cleared")
        return f"a host callback error is reported ({first}) once, then the stream works again"

    def check_allocator_stats(self) -> str:
        from ._ffi import ffi
        d = self.dev
        cache = d.cache_stats()
        _expect(cache["bytes_reserved"] == cache["bytes_in_use"] + cache["bytes_cached"],
                f"core cache statistics are inconsistent: {cache}")
        before = d.allocator_stats()
        if before is None:
            raise CheckSkipped("the plugin provides no get_allocator_stats (optional); core "
                               "cache statistics are consistent")
        for k in ("num_allocs", "bytes_in_use", "peak_bytes_in_use", "largest_alloc_size"):
            _expect(before[k] >= 0, f"{k} is negative: {before}")
        _expect(before["peak_bytes_in_use"] >= before["bytes_in_use"],
                f"peak_bytes_in_use < bytes_in_use: {before}")
        n = (3 << 20) + 17
        mem = ffi.new("SP_DeviceMemoryBase*")
        mem.struct_size = ffi.sizeof("SP_DeviceMemoryBase")
        d._se.allocate(d._sp, n, 0, mem)
        _expect(mem.opaque != ffi.NULL, f"allocate({n}) failed")
        during = d.allocator_stats()
        d._se.deallocate(d._sp, mem)
        after = d.allocator_stats()
        _expect(during["num_allocs"] >= before["num_allocs"] + 1,
                f"num_allocs did not grow after an allocation: {before} -> {during}")
        _expect(during["bytes_in_use"] >= before["bytes_in_use"] + n,
                f"bytes_in_use did not grow by {n} after allocating {n} bytes: "
                f"{before['bytes_in_use']} -> {during['bytes_in_use']}")
        _expect(during["peak_bytes_in_use"] >= during["bytes_in_use"],
                f"peak_bytes_in_use < bytes_in_use: {during}")
        _expect(during["largest_alloc_size"] >= n,
                f"largest_alloc_size {during['largest_alloc_size']} < {n} after allocating {n}")
        _expect(after["bytes_in_use"] == before["bytes_in_use"],
                f"bytes_in_use is {after['bytes_in_use']} after freeing, was "
                f"{before['bytes_in_use']} before the allocation")
        if during["bytes_limit"] is not None:
            _expect(during["bytes_limit"] >= during["bytes_in_use"],
                    f"bytes_limit < bytes_in_use: {during}")
        return "num_allocs, bytes_in_use, peak and largest allocation track an allocation"

    # --- kernels -------------------------------------------------------------
    def kernel_checks(self) -> Iterator[tuple[str, Callable[[], str | None]]]:
        from . import registry
        by_op: dict[str, list] = {}
        for (op, _dev), ks in sorted(registry.KERNELS.items()):
            for k in ks:
                if k.plugin is self.rec:
                    by_op.setdefault(op, []).append(k)
        if not by_op:
            yield "kernels", lambda: (_ for _ in ()).throw(
                CheckSkipped("the plugin registers no kernels"))
            return
        for op, ks in sorted(by_op.items()):
            yield f"kernel {op}", (lambda op=op, ks=ks: self.check_kernel(op, ks))

    def check_kernel(self, op_name: str, kernels: list) -> str:
        from . import registry
        op = registry.OPS[op_name]
        done, notes, failures = 0, [], []
        for k in kernels:
            devices = _devices_of_type(k.device_type)
            if not devices:
                notes.append(f"{k.device_type}: no device of this type is present")
                continue
            dev = devices[0]
            sig = ", ".join(f"{a}={t.name}" for a, t in sorted(k.constraints.items()) if t)
            try:
                cases = op_cases(op, k.constraints, self.rng)
            except CheckSkipped as exc:
                notes.append(f"[{sig}] {exc}")
                continue
            has_cpu = bool(registry.KERNELS.get((op_name, "CPU")))
            for inputs, attrs in cases:
                what = f"[{sig}] shapes {[list(np.shape(v)) for v in inputs.values()]}"
                try:
                    err = run_and_compare(op_name, inputs, attrs, dev, self.rec, has_cpu)
                except Exception as exc:
                    err = f"raised {type(exc).__name__}: {exc}"
                if err:
                    failures.append(f"{what}: {err}")
                else:
                    done += 1
        if failures:
            more = f" (and {len(failures) - 3} more)" if len(failures) > 3 else ""
            raise CheckFailed("; ".join(failures[:3]) + more)
        if done == 0:
            raise CheckSkipped("; ".join(notes) or "no case could be generated")
        ref = "match the CPU reference" if registry.KERNELS.get((op_name, "CPU")) else \
            "completed (no CPU reference for this op)"
        return f"{done} case(s) over {len(kernels)} kernel(s) {ref}" + \
            (f"; {'; '.join(notes)}" if notes else "")


def _devices_of_type(device_type: str) -> list:
    from . import plugin_loader
    return [d for d in plugin_loader.devices() if d.device_type == device_type]


# ------------------------------------------------------------------ op inputs

_TOL = {"float16": (2e-2, 2e-2), "bfloat16": (6e-2, 6e-2), "float32": (1e-4, 1e-5),
        "float64": (1e-9, 1e-12)}
_BINARY = {"AddV2", "Sub", "Mul", "RealDiv", "Maximum", "Minimum"}
_UNARY = {"Neg", "Abs", "Relu", "Identity", "Exp", "Tanh", "Sigmoid", "Log", "Sqrt"}
_POSITIVE = {"Log", "Sqrt"}
_REDUCE = {"Sum", "Mean", "Max", "Min"}


def _values(dt, shape: tuple, rng: np.random.Generator, positive: bool = False,
            nonzero: bool = False) -> np.ndarray:
    """Random values of dtype `dt` (a pluggable DType) and `shape`."""
    npdt = np.dtype(dt.as_numpy_dtype)
    if npdt == np.bool_:
        return rng.integers(0, 2, shape).astype(np.bool_)
    if npdt.kind in "iu":
        lo = 1 if (positive or npdt.kind == "u") else -6
        a = rng.integers(lo, 7, shape)
        if nonzero:
            a = np.where(a == 0, 1, a)
        return a.astype(npdt)
    a = rng.uniform(0.1, 3.0, shape) if positive else rng.uniform(-2.0, 2.0, shape)
    if nonzero:
        a = np.where(np.abs(a) < 0.1, 0.5, a)
    return a.astype(npdt)


def _pick_type(attr, constraints: dict):
    from . import dtypes
    if attr.name in constraints and constraints[attr.name] is not None:
        return constraints[attr.name]
    if attr.allowed:
        return dtypes.float32 if dtypes.float32 in attr.allowed else attr.allowed[0]
    return dtypes.float32


def op_cases(op, constraints: dict, rng: np.random.Generator) -> list[tuple[dict, dict]]:
    """Inputs and attributes to run `op` with, for the kernel whose type
    constraints are `constraints`. Raises CheckSkipped when it cannot."""
    types = {n: _pick_type(a, constraints) for n, a in op.attrs.items() if a.kind == "type"}
    bound = {a.type_attr for a in op.inputs if a.type_attr}
    extra = {n: t for n, t in types.items() if n not in bound}
    name = op.name
    T = types.get("T")
    ix = lambda attr, vals: np.array(vals, dtype=types[attr].as_numpy_dtype)
    if name in _BINARY:
        nz = name == "RealDiv"
        return [({"x": _values(T, s1, rng), "y": _values(T, s2, rng, nonzero=nz)}, {})
                for s1, s2 in (((3, 4), (4,)), ((2, 3), (2, 3)), ((), (3,)), ((0, 4), (4,)))]
    if name in _UNARY:
        arg = op.inputs[0].name
        pos = name in _POSITIVE
        return [({arg: _values(T, s, rng, positive=pos)}, {}) for s in ((2, 3, 4), (), (0, 3))]
    if name == "Softmax":
        return [({"logits": _values(T, s, rng)}, {}) for s in ((4, 7), (5,))]
    if name == "MatMul":
        return [({"a": _values(T, (5, 3), rng), "b": _values(T, (3, 4), rng)}, {}),
                ({"a": _values(T, (3, 5), rng), "b": _values(T, (4, 3), rng)},
                 {"transpose_a": True, "transpose_b": True})]
    if name in _REDUCE:
        return [({"input": _values(T, (3, 4, 5), rng), "reduction_indices": ix("Tidx", [1, -1])},
                 {"keep_dims": False}),
                ({"input": _values(T, (3, 4), rng), "reduction_indices": ix("Tidx", 0)},
                 {"keep_dims": True}),
                ({"input": _values(T, (0, 3), rng), "reduction_indices": ix("Tidx", [0])},
                 {"keep_dims": False})]
    if name == "Cast":
        src = types["SrcT"]
        dst = {"DstT": types["DstT"]}
        return [({"x": _values(src, (3, 4), rng)}, dst), ({"x": _values(src, (), rng)}, dst)]
    if name == "Transpose":
        return [({"x": _values(T, (2, 3, 4), rng), "perm": ix("Tperm", [2, 0, 1])}, {})]
    if name == "Reshape":
        return [({"tensor": _values(T, (2, 6), rng), "shape": ix("Tshape", [3, -1])}, {})]
    if name == "Fill":
        return [({"dims": ix("index_type", [2, 3]), "value": _values(T, (), rng)}, {})]
    if name == "Conv2D":
        base = {"strides": [1, 1, 1, 1], "padding": "SAME"}
        return [({"input": _values(T, (1, 5, 5, 2), rng), "filter": _values(T, (3, 3, 2, 3), rng)}, base),
                ({"input": _values(T, (2, 6, 6, 1), rng), "filter": _values(T, (2, 2, 1, 2), rng)},
                 {"strides": [1, 2, 2, 1], "padding": "VALID"})]
    if name == "CheckNumerics":
        return [({"tensor": _values(T, (3, 4), rng)}, {"message": "conformance"})]
    # Any other op (e.g. defined by the plugin): inputs from the definition.
    for a in op.attrs.values():
        if a.kind != "type" and not a.has_default:
            raise CheckSkipped(f"cannot make up a value for attribute {a.name!r} ({a.kind})")
    inputs = {}
    for a in op.inputs:
        dt = types[a.type_attr] if a.type_attr else a.dtype
        inputs[a.name] = _values(dt, (2, 3), rng)
    return [(inputs, dict(extra))]


def _as_list(out) -> list:
    return list(out) if isinstance(out, tuple) else [out]


def run_and_compare(op_name: str, inputs: dict, attrs: dict, dev, rec, has_cpu: bool) -> str:
    """Runs the op on `dev` and (if it has one) on the CPU; returns "" when
    they agree, else what differs."""
    import pluggable as pg
    from . import registry

    def calls() -> int:
        return sum(k.calls for k in registry.KERNELS.get((op_name, dev.device_type), ())
                   if k.plugin is rec)

    def run(where: str) -> list[np.ndarray]:
        with pg.device(where):
            ins = {n: pg.constant(v) for n, v in inputs.items()}
            outs = _as_list(getattr(pg.raw_ops, op_name)(**ins, **attrs))
        return [o.numpy() for o in outs]

    before = calls()
    got = run(dev.short_name)
    dev.synchronize()
    if calls() == before:
        return (f"the plugin's kernel did not run on {dev.short_name} (dispatch chose another "
                "kernel or device)")
    if not has_cpu:
        return ""
    want = run("CPU:0")
    for i, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape:
            return f"output {i} has shape {list(g.shape)}, the CPU reference {list(w.shape)}"
        if g.dtype != w.dtype:
            return f"output {i} has dtype {g.dtype}, the CPU reference {w.dtype}"
        key = str(w.dtype)
        if key in _TOL:
            rtol, atol = _TOL[key]
            gf, wf = g.astype(np.float64), w.astype(np.float64)
            if not np.allclose(gf, wf, rtol=rtol, atol=atol, equal_nan=True):
                bad = np.abs(gf - wf)
                bad = np.where(np.isnan(bad), np.inf, bad)
                j = np.unravel_index(int(np.argmax(bad)), bad.shape) if bad.size else ()
                return (f"output {i} differs from the CPU reference: at {list(j)} got "
                        f"{gf[j]!r}, expected {wf[j]!r} (rtol {rtol}, atol {atol})")
        elif not np.array_equal(g, w):
            j = np.argwhere(g != w)[0] if g.size else ()
            return (f"output {i} differs from the CPU reference at {list(j)}: got "
                    f"{g[tuple(j)]!r}, expected {w[tuple(j)]!r}")
    return ""


if __name__ == "__main__":
    sys.exit(main())
