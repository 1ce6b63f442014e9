"""One profiling session: start the host tracer and every plugin profiler,
stop them, collect and merge their data, write the files.

The files of a session go to ``<logdir>/plugins/profile/<run>/`` (run: the
local time, ``YYYY_MM_DD_HH_MM_SS``), where TensorBoard's profile plugin
looks for them:

- ``<host>.xplane.pb``: the merged XSpace (``xspace``);
- ``<host>.trace.json.gz``: the Chrome trace-event JSON (``trace_events``).

A plugin profiler that fails at any step is left out of that profile and
reported (``PluginProfiler.failures``, the log, ``XSpace.errors``); it never
stops the session or the other profilers.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import socket
import threading
import time
from typing import Any, NamedTuple

from ..framework import errors
from ..plugins import profilers as plugin_profilers
from ..runtime import placement
from . import summary as summary_mod, timeline as timeline_mod, trace_events, xspace
from .host_tracer import HostTracer, Span, clock, thread_id

log = logging.getLogger("pluggable.profiler")


class ProfilerOptions(NamedTuple):
    """What to record (``tf.profiler.experimental.ProfilerOptions``).

    host_tracer_level: 0 records no host spans; 1 or more records op calls,
        copies, graph node runs, allocation retries and ``Trace`` spans.
    python_tracer_level: accepted for compatibility; pluggable has no
        Python function tracer, so it must be 0.
    device_tracer_level: 0 starts no plugin profiler; 1 starts all of them.
    delay_ms: accepted for compatibility; must be None or 0.
    """
    host_tracer_level: int = 2
    python_tracer_level: int = 0
    device_tracer_level: int = 1
    delay_ms: int | None = None


@dataclasses.dataclass
class ProfileResult:
    """What a finished session produced."""
    run_dir: str | None            # None when the session was stopped with save=False
    xplane_path: str | None
    trace_path: str | None
    space: Any                     # the merged XSpace message
    timeline: timeline_mod.Timeline
    summary: summary_mod.ProfileSummary
    errors: list[str]              # plugin profilers left out, and why


def _clock_offset() -> int:
    """time.time_ns() - time.monotonic_ns(), from the closest of a few reads."""
    best = None
    for _ in range(5):
        a = time.time_ns()
        m = clock()
        b = time.time_ns()
        if best is None or b - a < best[0]:
            best = (b - a, (a + b) // 2 - m)
    return best[1]


def _run_dir(logdir: str) -> str:
    base = os.path.join(os.fspath(logdir), "plugins", "profile",
                        time.strftime("%Y_%m_%d_%H_%M_%S"))
    path, n = base, 1
    while os.path.exists(path):
        path, n = f"{base}_{n}", n + 1
    os.makedirs(path)
    return path


class Session:
    """A profiling session (``pg.profiler.start`` ... ``stop``)."""

    def __init__(self, logdir: str, options: ProfilerOptions):
        if options.python_tracer_level:
            raise errors.UnimplementedError(
                "ProfilerOptions(python_tracer_level > 0): pluggable has no Python function "
                "tracer; use pg.profiler.Trace to mark regions of your code")
        if options.delay_ms:
            raise errors.UnimplementedError("ProfilerOptions(delay_ms) is not supported: start "
                                            "the profiler when you want it to record")
        self.logdir = os.fspath(logdir)
        self.options = options
        self.tracer = HostTracer(options.host_tracer_level)
        self.errors: list[str] = []
        self.started: list[plugin_profilers.PluginProfiler] = []

    def _fail(self, prof: plugin_profilers.PluginProfiler, reason: str) -> None:
        prof.record_failure(reason)
        self.errors.append(f"{prof.device_type} profiler of {prof.plugin.path}: {reason}")

    def start(self) -> None:
        self.to_epoch_ns = _clock_offset()
        try:
            if self.options.device_tracer_level > 0:
                for prof in plugin_profilers.ready_profilers():
                    try:
                        prof.start()
                        self.started.append(prof)
                    except plugin_profilers.ProfilerError as exc:
                        self._fail(prof, str(exc))
            self.start_ns = clock()
            self.tracer.start()
        except BaseException:
            self._abandon()
            raise

    def _abandon(self) -> None:
        """Undoes a start that failed part way (an interrupt, a host tracer
        that could not install): the plugin profilers started so far stop,
        so that none keeps recording without a session to collect it."""
        self.tracer.stop()
        for prof in self.started:
            try:
                prof.stop()
            except plugin_profilers.ProfilerError as exc:
                self._fail(prof, str(exc))
        self.started.clear()

    def _wait_for_devices(self) -> None:
        for dev in placement.plugin_devices():
            if not dev.wait_for_work():
                log.warning("profiler: waiting for %s failed; its last work may be missing",
                            dev.short_name)

    def _collect(self, prof: plugin_profilers.PluginProfiler) -> Any | None:
        """The plugin's XSpace, or None after recording why there is none."""
        try:
            prof.stop()
            data = prof.collect()
        except plugin_profilers.ProfilerError as exc:
            self._fail(prof, str(exc))
            return None
        from ..framework import proto  # on use: importing pluggable loads no wire formats
        try:
            return proto.decode(proto.XSpace, data, strict=True,
                                source=f"the {prof.device_type} profiler")
        except errors.DataLossError as exc:
            self._fail(prof, f"collect_data_xspace returned {len(data)} bytes that are not an "
                             f"XSpace ({exc.message})")
            return None

    def stop(self, save: bool = True) -> ProfileResult:
        self._wait_for_devices()
        spans = self.tracer.stop()
        end_ns = clock()
        plugin_spaces = []
        for prof in self.started:
            space = self._collect(prof)
            if space is not None:
                plugin_spaces.append((prof.device_type, space))
        host = xspace.host_plane(spans, self.to_epoch_ns, self.start_ns, end_ns,
                                 xspace.free_plane_id(plugin_spaces),
                                 xspace.plugin_plane_groups(plugin_spaces))
        space = xspace.merge(host, plugin_spaces, socket.gethostname(), self.errors, [])
        tl = timeline_mod.from_xspace(space)
        result = ProfileResult(None, None, None, space, tl, summary_mod.summarize(tl),
                               list(self.errors))
        if save:
            self._write(result)
        return result

    def _write(self, result: ProfileResult) -> None:
        result.run_dir = _run_dir(self.logdir)
        host = socket.gethostname()
        result.xplane_path = os.path.join(result.run_dir, f"{host}.xplane.pb")
        result.trace_path = os.path.join(result.run_dir, f"{host}.trace.json.gz")
        from ..framework import proto  # on use: importing pluggable loads no wire formats
        with open(result.xplane_path, "wb") as f:
            f.write(proto.encode(result.space))
        trace_events.write(result.trace_path, trace_events.to_chrome_trace(
            result.timeline, list(result.space.errors), list(result.space.warnings)))
        log.info("profile written to %s", result.run_dir)


# ------------------------------------------------------------ the one session

_lock = threading.Lock()
_active: list[Session | None] = [None]
_last: list[ProfileResult | None] = [None]


def start(logdir: str | os.PathLike, options: ProfilerOptions | None = None) -> None:
    """Starts profiling: every plugin profiler and the host tracer record
    until ``stop``. Raises AlreadyExistsError if a session is running."""
    with _lock:
        if _active[0] is not None:
            raise errors.AlreadyExistsError(
                "a profiling session is already running: call pg.profiler.stop() first")
        session = Session(logdir, options or ProfilerOptions())
        session.start()
        _active[0] = session


def stop(save: bool = True) -> ProfileResult:
    """Stops profiling and, with `save`, writes the profile to the logdir
    given to ``start``. Returns what was made (paths, XSpace, summary).
    Raises UnavailableError if no session is running."""
    with _lock:
        session = _active[0]
        if session is None:
            raise errors.UnavailableError(
                "no profiling session is running: call pg.profiler.start(logdir) first")
        _active[0] = None
        result = session.stop(save)
        _last[0] = result
    return result


def last_result() -> ProfileResult | None:
    return _last[0]


def record_user_span(name: str, start_ns: int, args: dict) -> None:
    """Adds a ``Trace`` span to the running session, if any."""
    session = _active[0]
    if session is not None:
        session.tracer.add(Span("user", name, start_ns, clock(), thread_id(), args))


def running() -> bool:
    return _active[0] is not None
