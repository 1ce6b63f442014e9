"""Versioned extension tables a plugin may export beside the SE_/TF_ entry
points (``pluggable_native_stream.h``, ``pluggable_peer.h``,
``pluggable_collectives.h``).

Each follows one pattern: the plugin exports ``PG_Get<Name>(PG_<Name>*)``,
the caller sets ``struct_size`` and the plugin fills the table and its
``version``. A table of version 0 is treated as absent."""
from __future__ import annotations

from typing import Any

from .._core import ffi, lib

_tables: dict[tuple[int, str], Any] = {}


def extension(dev: Any, name: str) -> Any:
    """The ``PG_<name>`` table of `dev`'s plugin (``name`` such as
    ``"PeerFns"``), filled once per plugin, or None when the plugin does not
    export ``PG_Get<name>`` or reports a version below 1."""
    rec = dev.plugin
    key = (id(rec), name)
    if key not in _tables:
        table = None
        handle = getattr(rec, "handle", None)
        getter = f"PG_Get{name}".encode()
        sym = lib.pg_dlsym(handle, getter) if handle is not None else ffi.NULL
        if sym != ffi.NULL:
            table = ffi.new(f"PG_{name}*")
            table.struct_size = ffi.sizeof(f"PG_{name}")
            ffi.cast(f"PG_Get{name}Fn", sym)(table)
            if table.version < 1:
                table = None
        _tables[key] = table
    return _tables[key]
