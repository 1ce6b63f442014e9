"""The profile as an XSpace: the framework's host plane plus the planes every
plugin profiler handed over (TensorBoard's xplane.proto).

The host plane is named "/host:CPU" (TensorBoard's name for host threads):
one line per OS thread (``XLine.id`` is the thread id), one event per span,
with stats "category" ("op", "copy", "graph", "alloc", "user") and the
span's details ("device", "shapes", "dtypes", "bytes" ...); op calls and
graph node runs also have TensorBoard's "tf_op" ("name:type") and
"is_eager", by which its framework-op tables count them. Its plane stats
"plugin_planes" say which planes each plugin contributed
("MY_DEVICE:1,2": indices into ``XSpace.planes``), because correlation ids
(pluggable_profiler.h) are only unique within one plugin's data.

Two changes make the merged file read the way TensorBoard's profile plugin
(the ``xprof`` package) expects; nothing else in a plugin's planes changes:

- Line timestamps count nanoseconds from the earliest line's start (the
  profile's start, or a plugin line's if that is earlier), which the host
  plane's stat "profile_start_time" gives in Unix-epoch nanoseconds
  (TensorFlow's profiler also writes times from the profile's start).
  TensorBoard counts in picoseconds in 64 bits, which Unix-epoch
  nanoseconds overflow (its times would wrap and be meaningless).
- TensorBoard shows only the device planes "/device:GPU:<n>",
  "/device:TPU:<n>" and "/device:CUSTOM:<anything>"; a plugin's plane
  "/device:<TYPE>:<n>" of any other type is written as
  "/device:CUSTOM:<TYPE>:<n>". ``plane_name`` undoes this when reading.
"""
from __future__ import annotations

import re
import threading
from typing import Any, Iterable

from .host_tracer import Span

HOST_PLANE = "/host:CPU"
HOST_PLANE_ID = 49          # TensorBoard's id for the host threads plane
PLUGIN_PLANES_STAT = "plugin_planes"
TF_OP_STAT = "tf_op"                # TensorBoard's framework-op stats
IS_EAGER_STAT = "is_eager"
START_STAT = "profile_start_time"   # on the host plane: Unix-epoch ns of line time 0
DEVICE_PREFIX = "/device:"
CUSTOM_PREFIX = "/device:CUSTOM:"
# The device planes TensorBoard's profile plugin shows.
SHOWN_DEVICE_PREFIXES = ("/device:GPU:", "/device:TPU:", CUSTOM_PREFIX)
_TYPE_AND_ORDINAL = re.compile(r"[A-Za-z0-9_.\-]+:[0-9]+")


class PlaneBuilder:
    """Builds one XPlane, interning event and stat names as metadata."""

    def __init__(self, plane_id: int, name: str):
        from ..framework import proto  # on use: importing pluggable loads no wire formats
        self.plane = proto.XPlane(id=plane_id, name=name)
        self._events: dict[str, int] = {}
        self._stats: dict[str, int] = {}
        self._lines: dict[int, Any] = {}

    def event_id(self, name: str) -> int:
        mid = self._events.get(name)
        if mid is None:
            mid = self._events[name] = len(self._events) + 1
            self.plane.event_metadata[mid].id = mid
            self.plane.event_metadata[mid].name = name
        return mid

    def stat_id(self, name: str) -> int:
        mid = self._stats.get(name)
        if mid is None:
            mid = self._stats[name] = len(self._stats) + 1
            self.plane.stat_metadata[mid].id = mid
            self.plane.stat_metadata[mid].name = name
        return mid

    def set_stat(self, stat: Any, name: str, value: Any) -> None:
        stat.metadata_id = self.stat_id(name)
        if isinstance(value, bool):
            stat.int64_value = int(value)
        elif isinstance(value, int):
            stat.int64_value = value
        elif isinstance(value, float):
            stat.double_value = value
        else:
            stat.str_value = str(value)

    def line(self, line_id: int, name: str, timestamp_ns: int) -> Any:
        line = self._lines.get(line_id)
        if line is None:
            line = self._lines[line_id] = self.plane.lines.add(
                id=line_id, display_id=len(self._lines), name=name, timestamp_ns=timestamp_ns)
        return line

    def add_event(self, line: Any, name: str, start_ns: int, end_ns: int, stats: dict) -> None:
        ev = line.events.add(metadata_id=self.event_id(name),
                             offset_ps=(start_ns - line.timestamp_ns) * 1000,
                             duration_ps=max(0, end_ns - start_ns) * 1000)
        for key, value in stats.items():
            self.set_stat(ev.stats.add(), key, value)


def _thread_names() -> dict[int, str]:
    return {t.native_id: t.name for t in threading.enumerate() if t.native_id is not None}


def free_plane_id(plugin_spaces: list[tuple[str, Any]]) -> int:
    """An id for the host plane that no plugin plane uses."""
    used = {p.id for _, ps in plugin_spaces for p in ps.planes}
    plane_id = HOST_PLANE_ID
    while plane_id in used:
        plane_id += 1
    return plane_id


def plugin_plane_groups(plugin_spaces: list[tuple[str, Any]]) -> list[str]:
    """The "plugin_planes" stat values: each plugin's device type and the
    indices its planes will have in the merged XSpace (the host plane is 0)."""
    groups, first = [], 1
    for device_type, ps in plugin_spaces:
        n = len(ps.planes)
        groups.append(f"{device_type}:" + ",".join(str(i) for i in range(first, first + n)))
        first += n
    return groups


def _framework_op_stats(span: Span) -> dict:
    """The stats by which TensorBoard counts a span as a framework op (its
    "Framework op stats" and overview tables): "tf_op" ("name:type") and
    "is_eager". Op calls are eager ops, graph node runs graph ops."""
    if span.category == "op":
        return {TF_OP_STAT: f"{span.name}:{span.name}", IS_EAGER_STAT: True}
    if span.category == "graph":
        node = span.args.get("node", span.name)
        graph = span.args.get("graph")
        full = f"{graph}/{node}" if graph else node
        return {TF_OP_STAT: f"{full}:{span.name}", IS_EAGER_STAT: False}
    return {}


def host_plane(spans: Iterable[Span], to_epoch_ns: int, start_ns: int, end_ns: int,
               plane_id: int = HOST_PLANE_ID, groups: Iterable[str] = ()) -> Any:
    """The host plane of `spans` (monotonic times, shifted by `to_epoch_ns` to
    nanoseconds since the Unix epoch); lines start at `start_ns`. `groups`
    become its "plugin_planes" stats."""
    b = PlaneBuilder(plane_id, HOST_PLANE)
    for group in groups:
        b.set_stat(b.plane.stats.add(), PLUGIN_PLANES_STAT, group)
    names = _thread_names()
    origin = start_ns + to_epoch_ns
    last = origin
    for s in spans:
        if s.tid == 0:  # bookkeeping records (dropped counts) have no thread
            continue
        line = b.line(s.tid, names.get(s.tid, f"Thread {s.tid}"), origin)
        stats = {"category": s.category}
        stats.update(s.args)
        stats.update(_framework_op_stats(s))
        b.add_event(line, s.name, s.start_ns + to_epoch_ns, s.end_ns + to_epoch_ns, stats)
        last = max(last, s.end_ns + to_epoch_ns)
    stop = max(last, end_ns + to_epoch_ns)
    for line in b.plane.lines:
        line.duration_ps = (stop - origin) * 1000
    return b.plane


def shown_plane_name(name: str) -> str:
    """The name under which TensorBoard shows a plugin's plane:
    "/device:MY_DEVICE:0" becomes "/device:CUSTOM:MY_DEVICE:0"; GPU, TPU,
    CUSTOM and host planes keep theirs."""
    if name.startswith(DEVICE_PREFIX) and not name.startswith(SHOWN_DEVICE_PREFIXES):
        return CUSTOM_PREFIX + name[len(DEVICE_PREFIX):]
    return name


def plane_name(name: str) -> str:
    """The device's own plane name back from a name in the file:
    "/device:CUSTOM:MY_DEVICE:0" is "/device:MY_DEVICE:0"; a custom plane
    that is not TYPE:ordinal ("/device:CUSTOM:Megascale Trace") keeps its."""
    rest = name[len(CUSTOM_PREFIX):]
    if name.startswith(CUSTOM_PREFIX) and _TYPE_AND_ORDINAL.fullmatch(rest):
        return DEVICE_PREFIX + rest
    return name


def start_time_ns(space: Any) -> int:
    """The Unix-epoch nanoseconds that line timestamps count from (0 for a
    file without the host plane's "profile_start_time": times are absolute)."""
    for plane in space.planes:
        if plane.name != HOST_PLANE:
            continue
        names = {k: m.name for k, m in plane.stat_metadata.items()}
        for stat in plane.stats:
            if names.get(stat.metadata_id) == START_STAT:
                return stat.int64_value
    return 0


def _rebase(space: Any) -> None:
    """Makes every line timestamp relative to the earliest one and records
    that time on the host plane (``space.planes[0]``). A line at 0 (a plugin
    that set no time) stays at 0 rather than going negative."""
    lines = [line for plane in space.planes for line in plane.lines if line.timestamp_ns > 0]
    base = min((line.timestamp_ns for line in lines), default=0)
    for line in lines:
        line.timestamp_ns -= base
    host = space.planes[0]
    mid = max(host.stat_metadata.keys(), default=0) + 1
    host.stat_metadata[mid].id = mid
    host.stat_metadata[mid].name = START_STAT
    host.stats.add(metadata_id=mid, int64_value=base)


def merge(host: Any, plugin_spaces: list[tuple[str, Any]], hostname: str,
          errors: list[str], warnings: list[str]) -> Any:
    """One XSpace: `host` first, then every plane of each (device type,
    XSpace) in `plugin_spaces`, copied with only their names made ones
    TensorBoard shows (``shown_plane_name``) and their line timestamps made
    relative to the profile's start (see the module's docstring); the
    plugins' own errors and warnings are kept, prefixed with their device
    type."""
    from ..framework import proto  # on use: importing pluggable loads no wire formats
    space = proto.XSpace(hostnames=[hostname])
    space.planes.add().CopyFrom(host)
    for device_type, ps in plugin_spaces:
        for plane in ps.planes:
            copy = space.planes.add()
            copy.CopyFrom(plane)
            copy.name = shown_plane_name(plane.name)
        space.errors.extend(f"{device_type}: {e}" for e in ps.errors)
        space.warnings.extend(f"{device_type}: {w}" for w in ps.warnings)
    space.errors.extend(errors)
    space.warnings.extend(warnings)
    _rebase(space)
    return space
