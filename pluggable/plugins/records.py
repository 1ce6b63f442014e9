"""What ``pg.plugins()`` reports about each plugin file, and the table of
records (indexed by the id the core attributes registrations to)."""
from __future__ import annotations

import dataclasses
import threading
from typing import Any

from ..runtime.device import Device


@dataclasses.dataclass
class PluginRecord:
    """What is known about one plugin file."""
    path: str
    status: str = "pending"          # loaded | quarantined | skipped
    reason: str = ""
    abi_version: str | None = None
    platform_name: str | None = None
    device_type: str | None = None
    device_count: int = 0
    kernels: int = 0
    ops: int = 0
    rejected: list[str] = dataclasses.field(default_factory=list)
    devices: list[Device] = dataclasses.field(default_factory=list, repr=False)
    source: str = ""                 # where it was found (search step or load_plugin)
    id: int = -1
    # Its graph optimizer (graph_optimizers.GraphOptimizer), if it registered one.
    optimizer: Any = dataclasses.field(default=None, repr=False)
    stream_capture: bool = False     # whether its devices can capture device graphs
    # whether its copies from the host read the source before returning
    # (the host-copy extension, pluggable_host_copy.h)
    host_copy: bool = False
    # Its device profiler (profilers.PluginProfiler), if it exports TF_InitProfiler.
    profiler: object = dataclasses.field(default=None, repr=False)
    # The dlopen handle of a loaded plugin (NULL-able cdata), for dlsym.
    handle: object = dataclasses.field(default=None, repr=False)

    def __repr__(self) -> str:
        extra = f", reason={self.reason!r}" if self.reason else ""
        return (f"PluginRecord(path={self.path!r}, status={self.status!r}, "
                f"device_type={self.device_type!r}, devices={self.device_count}, "
                f"kernels={self.kernels}, ops={self.ops}{extra})")

    def to_dict(self) -> dict:
        """The record as plain data (what ``python -m pluggable plugins --json``
        prints)."""
        return {"path": self.path, "status": self.status, "reason": self.reason,
                "abi_version": self.abi_version, "platform_name": self.platform_name,
                "device_type": self.device_type, "device_count": self.device_count,
                "kernels": self.kernels, "ops": self.ops, "rejected": list(self.rejected),
                "source": self.source,
                "optimizer": self.optimizer.to_dict() if self.optimizer is not None else None,
                "stream_capture": self.stream_capture, "host_copy": self.host_copy,
                "profiler": self.profiler.to_dict() if self.profiler is not None else None}

class PluginQuarantined(Exception):
    """Internal: a loading step failed; the message is the reason."""

_lock = threading.RLock()  # guards the table and every loading step
_records: list[PluginRecord] = []
_by_realpath: dict[str, PluginRecord] = {}
_by_identity: dict[tuple[int, int], PluginRecord] = {}  # (st_dev, st_ino) of loaded files

def new_record(path: str, source: str) -> PluginRecord:
    """Adds a record for `path` to the table (call with ``_lock`` held)."""
    rec = PluginRecord(path=path, id=len(_records), source=source)
    _records.append(rec)
    return rec

def record_for(plugin_id: int) -> PluginRecord | None:
    """The record of the plugin with this id, or None."""
    if 0 <= plugin_id < len(_records):
        return _records[plugin_id]
    return None

def all_records() -> list[PluginRecord]:
    return list(_records)
