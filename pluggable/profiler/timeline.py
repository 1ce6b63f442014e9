"""A profile's XSpace read back as tracks of timed events, with the flows
from host op spans to the device work they enqueued.

Both the Chrome trace (``trace_events``) and the per-op summary
(``summary``) are made from a ``Timeline``, so they agree with each other
and with the written ``.xplane.pb``, and can be remade from that file alone.

Flows follow pluggable_profiler.h: a device event with a "correlation_id"
stat is tied to the event with the same id on one of the same plugin's
"/host:..." planes (a line per OS thread); the framework's op span on that
thread that contains the host event is the op that enqueued the work.
"""
from __future__ import annotations

import bisect
import dataclasses
from typing import Any

from .xspace import HOST_PLANE, PLUGIN_PLANES_STAT, plane_name, start_time_ns

# Host spans that may enqueue device work (op calls, copies, graph nodes),
# the rows of the summary.
SPAN_CATEGORIES = ("op", "copy", "graph", "alloc")
# Also flow sources, as the outermost span: graph runs and replays (a replayed
# device graph launches its work with no node span around it).
FLOW_CATEGORIES = SPAN_CATEGORIES + ("graph_run",)

# How far a plugin's host-side event may lie outside an op span and still
# belong to it (clock conversions of the two sides may differ this much).
SLACK_NS = 2000


@dataclasses.dataclass(eq=False)
class Track:
    """One line of one plane: a host thread or a device stream."""
    plane_index: int
    plane_name: str
    line_id: int
    name: str
    events: list = dataclasses.field(default_factory=list)

    @property
    def is_host(self) -> bool:
        return self.plane_name.startswith("/host:")

    @property
    def device(self) -> str:
        """"MY_DEVICE:0" for a plane "/device:MY_DEVICE:0", else the plane name."""
        prefix = "/device:"
        return self.plane_name[len(prefix):] if self.plane_name.startswith(prefix) \
            else self.plane_name


@dataclasses.dataclass(eq=False)
class Event:
    name: str
    start_ns: int       # nanoseconds since the Unix epoch
    dur_ns: int
    stats: dict
    track: Track

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.dur_ns


@dataclasses.dataclass(eq=False)
class Flow:
    """A host span (an op call, a copy ...), the plugin's host-side record of
    the enqueue, and the device event it caused."""
    op: Event
    launch: Event
    device: Event


@dataclasses.dataclass
class Timeline:
    tracks: list[Track]
    flows: list[Flow]
    start_ns: int
    end_ns: int

    def op_spans(self) -> list[Event]:
        """The framework's op spans (host plane, category "op")."""
        return [e for t in self.tracks if t.plane_name == HOST_PLANE for e in t.events
                if e.stats.get("category") == "op"]

    def device_events(self) -> list[Event]:
        return [e for t in self.tracks if t.plane_name.startswith("/device:") for e in t.events]


def _stat_value(stat: Any, names: dict) -> Any:
    kind = stat.WhichOneof("value")
    if kind == "ref_value":
        return names.get(stat.ref_value, "")
    if kind == "bytes_value":
        return stat.bytes_value.hex()
    return getattr(stat, kind) if kind else None


def _stats(stats: Any, names: dict) -> dict:
    out = {}
    for s in stats:
        out[names.get(s.metadata_id, str(s.metadata_id))] = _stat_value(s, names)
    return out


def _read_plane(index: int, plane: Any, base_ns: int) -> list[Track]:
    """The tracks of one plane; `base_ns` is added to line timestamps."""
    stat_names = {k: m.name for k, m in plane.stat_metadata.items()}
    tracks = []
    for line in plane.lines:
        track = Track(index, plane_name(plane.name), line.id, line.display_name or line.name
                      or f"Stream {line.id}")
        for ev in line.events:
            meta = plane.event_metadata.get(ev.metadata_id)
            stats = _stats(meta.stats, stat_names) if meta is not None else {}
            stats.update(_stats(ev.stats, stat_names))
            name = (meta.display_name or meta.name) if meta is not None else str(ev.metadata_id)
            start = base_ns + line.timestamp_ns + ev.offset_ps // 1000
            track.events.append(Event(name, start, ev.duration_ps // 1000, stats, track))
        track.events.sort(key=lambda e: e.start_ns)
        tracks.append(track)
    return tracks


def _groups(space: Any) -> list[list[int]]:
    """Plane indices of each plugin (one group of every other plane when the
    host plane does not say)."""
    for plane in space.planes:
        if plane.name != HOST_PLANE:
            continue
        names = {k: m.name for k, m in plane.stat_metadata.items()}
        found = [s.str_value for s in plane.stats if names.get(s.metadata_id) == PLUGIN_PLANES_STAT]
        return [[int(i) for i in g.partition(":")[2].split(",") if i] for g in found]
    return [[i for i, p in enumerate(space.planes) if p.name != HOST_PLANE]]


class _OpIndex:
    """The op spans of each host thread, for finding the one around a time."""

    def __init__(self, ops: list[Event]):
        self._by_tid: dict[int, tuple[list[int], list[Event]]] = {}
        for ev in sorted(ops, key=lambda e: e.start_ns):
            starts, events = self._by_tid.setdefault(ev.track.line_id, ([], []))
            starts.append(ev.start_ns)
            events.append(ev)

    def around(self, tid: int, t: int) -> Event | None:
        """The innermost op span of thread `tid` containing `t` (with slack)."""
        starts, events = self._by_tid.get(tid, ((), ()))
        i = bisect.bisect_right(starts, t + SLACK_NS)
        best = None
        for ev in reversed(events[max(0, i - 64):i]):
            if ev.start_ns - SLACK_NS <= t <= ev.end_ns + SLACK_NS:
                if best is None or ev.start_ns > best.start_ns:
                    best = ev
                if ev.start_ns <= t <= ev.end_ns:
                    return ev
        return best


def _flows(tracks: list[Track], groups: list[list[int]], ops: _OpIndex) -> list[Flow]:
    flows = []
    for group in groups:
        members = set(group)
        launches, device = {}, []
        for t in tracks:
            if t.plane_index not in members:
                continue
            for ev in t.events:
                corr = ev.stats.get("correlation_id")
                if corr is None:
                    continue
                if t.is_host:
                    launches[corr] = ev
                else:
                    device.append(ev)
        for ev in device:
            launch = launches.get(ev.stats["correlation_id"])
            op = ops.around(launch.track.line_id, launch.start_ns) if launch else None
            if op is not None:
                flows.append(Flow(op, launch, ev))
    return flows


def from_xspace(space: Any) -> Timeline:
    """Reads a merged XSpace (ours, or any with TensorBoard's conventions);
    times are Unix-epoch nanoseconds again, plane names the devices' own."""
    base = start_time_ns(space)
    tracks = [t for i, p in enumerate(space.planes) for t in _read_plane(i, p, base)]
    host_ops = [e for t in tracks if t.plane_name == HOST_PLANE for e in t.events
                if e.stats.get("category") in FLOW_CATEGORIES]
    flows = _flows(tracks, _groups(space), _OpIndex(host_ops))
    starts = [e.start_ns for t in tracks for e in t.events]
    ends = [e.end_ns for t in tracks for e in t.events]
    return Timeline(tracks, flows, min(starts, default=0), max(ends, default=0))
