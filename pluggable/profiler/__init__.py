"""Layer 6: the profiler (``pg.profiler``), in the shapes of
``tf.profiler.experimental``.

Profile a few steps and open the result in TensorBoard, Perfetto or
``chrome://tracing``::

    import pluggable as pg
    with pg.profiler.Profile("logs"):
        for _ in range(3):
            step()
    print(pg.profiler.summary())        # per-op table: count, host and device time

``pg.profiler.start(logdir)`` / ``pg.profiler.stop()`` do the same without a
``with`` block; ``pg.profiler.Trace("name", **details)`` marks a region of
your own code on the host timeline; ``python -m pluggable profile
script.py`` profiles a whole script and prints the summary.

While a session runs, the framework's host tracer records one span per op
call (op, device, input shapes and dtypes), per copy, per graph node run and
per allocation retry, and every plugin that exports ``TF_InitProfiler``
(pluggable_profiler.h) records its device work. ``stop`` writes
``<logdir>/plugins/profile/<run>/<host>.xplane.pb`` (one XSpace: the host
plane and every plugin's planes, named and timed the way TensorBoard's
profile plugin reads them, see ``xspace``) and ``<host>.trace.json.gz`` (Chrome trace-event JSON, one track
per host thread and per device stream, flow arrows from each op call to the
device work it enqueued).

With the profiler stopped nothing is installed: dispatch pays only the
check it always makes for installed hooks.
"""
from __future__ import annotations

import glob
import os
from typing import Any

from ..framework import errors
from . import summary as _summary, timeline as _timeline
from .host_tracer import clock as _clock
from .session import ProfileResult, ProfilerOptions, last_result, record_user_span, running
from .session import start, stop
from .summary import OpStats, ProfileSummary

__all__ = ["start", "stop", "Profile", "Trace", "ProfilerOptions", "ProfileResult",
           "summary", "ProfileSummary", "OpStats", "load_timeline"]


class Profile:
    """``with pg.profiler.Profile(logdir):`` profiles the block; afterwards
    ``.result`` holds what ``stop`` returned (paths, XSpace, summary)."""

    def __init__(self, logdir: str | os.PathLike, options: ProfilerOptions | None = None):
        self.logdir = logdir
        self.options = options
        self.result: ProfileResult | None = None

    def __enter__(self) -> "Profile":
        start(self.logdir, self.options)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.result = stop()


class Trace:
    """``with pg.profiler.Trace("train_step", step=3):`` records the block
    as a span on the host timeline (with the keyword arguments as details)
    while a profile is being taken; costs almost nothing otherwise."""

    def __init__(self, name: str, **kwargs: Any):
        self.name = name
        self.args = kwargs
        self._t0 = 0

    def __enter__(self) -> "Trace":
        self._t0 = _clock() if running() else 0
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._t0:
            record_user_span(self.name, self._t0, self.args)


def _xplane_file(path: str | os.PathLike) -> str:
    """The .xplane.pb at `path`: the file, a run directory, or a logdir (its
    newest run)."""
    path = os.fspath(path)
    if os.path.isfile(path):
        return path
    found = glob.glob(os.path.join(path, "*.xplane.pb"))
    if not found:
        runs = sorted(glob.glob(os.path.join(path, "plugins", "profile", "*")))
        found = glob.glob(os.path.join(runs[-1], "*.xplane.pb")) if runs else []
    if not found:
        raise errors.NotFoundError(f"no .xplane.pb file at {path} (give a file, a run "
                                   "directory or the logdir given to pg.profiler.start)")
    return sorted(found)[0]


def load_timeline(path: str | os.PathLike) -> _timeline.Timeline:
    """Reads a written profile (see ``summary``) as a ``Timeline``."""
    file = _xplane_file(path)
    with open(file, "rb") as f:
        data = f.read()
    from ..framework import proto  # on use: importing pluggable loads no wire formats
    space = proto.decode(proto.XSpace, data, source=file)
    return _timeline.from_xspace(space)


def summary(path: str | os.PathLike | None = None) -> ProfileSummary:
    """The per-op summary of the last profile taken in this process, or of
    the profile written at `path` (an .xplane.pb file, its run directory, or
    a logdir: its newest run). ``print()`` it for the table."""
    if path is not None:
        return _summary.summarize(load_timeline(path))
    result = last_result()
    if result is None:
        raise errors.FailedPreconditionError(
            "no profile has been taken in this process: use pg.profiler.Profile(logdir) "
            "(or start/stop) first, or pass the path of a written profile")
    return result.summary
