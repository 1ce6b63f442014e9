"""The framework's host tracer: what the host threads did while profiling.

It records spans (name, thread, start and end in ``time.monotonic_ns()``
nanoseconds, category, details) from three sources:

- every op call, through a wrapper installed in ``runtime.hooks`` (category
  "op": op name, device, input shapes and dtypes);
- the runtime's and the core's trace points (``runtime.trace``: copies,
  graph node runs and graph runs/replays (``graph.node_trace``), allocation
  retries);
- the user's own annotations (``pg.profiler.Trace``, category "user").

Recording is an ``append`` to a list (atomic under the GIL), so any thread
may record; everything is formatted only when the profile is written.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ..runtime import hooks, trace

clock = trace.clock
thread_id = trace.thread_id


@dataclasses.dataclass
class Span:
    """One recorded span of a host thread."""
    category: str          # "op", "copy", "graph", "graph_run", "alloc", "user"
    name: str
    start_ns: int          # time.monotonic_ns()
    end_ns: int
    tid: int               # OS thread id
    args: dict

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


class HostTracer:
    """Records host spans between ``start`` and ``stop``."""

    def __init__(self, level: int = 2):
        self.level = level
        self._ops: list[tuple] = []      # raw op records, formatted at stop
        self._spans: list[Span] = []
        # One bound method object: hooks.uninstall compares by identity.
        self._wrapper = self._op_wrapper

    # --- recording ------------------------------------------------------
    def _op_wrapper(self, op: Any, inputs: list, attrs: dict, run: Any) -> list:
        t0 = clock()
        outs = None
        try:
            outs = run(op, inputs, attrs)
            return outs
        finally:
            t1 = clock()
            self._ops.append((op.name, t0, t1, thread_id(),
                              [getattr(x, "_shape", None) for x in inputs],
                              [getattr(x, "_dtype", None) for x in inputs],
                              outs[0]._dev if outs else _input_device(inputs), outs is None))

    def _sink(self, category: str, name: str, start_ns: int, end_ns: int, tid: int,
              args: dict) -> None:
        self._spans.append(Span(category, name, start_ns, end_ns, tid, args))

    def add(self, span: Span) -> None:
        """Records a span made elsewhere (user annotations)."""
        self._spans.append(span)

    def start(self) -> None:
        if self.level > 0:
            hooks.install(self._wrapper)
            trace.set_sink(self._sink)

    def stop(self) -> list[Span]:
        """Stops recording and returns every span, sorted by start."""
        hooks.uninstall(self._wrapper)
        trace.set_sink(None)
        spans = [self._op_span(r) for r in self._ops]
        spans += self._spans
        spans += [Span(*r) for r in trace.drain_core()]
        spans.sort(key=lambda s: (s.start_ns, -s.end_ns))
        return spans

    @staticmethod
    def _op_span(record: tuple) -> Span:
        name, t0, t1, tid, shapes, dtypes, dev, failed = record
        args = {"device": getattr(dev, "short_name", "?"),
                "shapes": ",".join(_shape_text(s) for s in shapes),
                "dtypes": ",".join(getattr(d, "name", "?") for d in dtypes)}
        if failed:
            args["failed"] = True
        return Span("op", name, t0, t1, tid, args)


def _input_device(inputs: list) -> Any:
    """The device of an op without outputs (a variable update): that of its
    first input on a device (the variable's handle)."""
    for x in inputs:
        dev = getattr(x, "_dev", None) or getattr(getattr(x, "_handle", None), "_dev", None)
        if dev is not None:
            return dev
    return None


def _shape_text(shape: Any) -> str:
    if shape is None:
        return "?"
    return "[" + ",".join(str(d) for d in shape) + "]"
