"""Plugin discovery, loading and the records ``pg.plugins()`` reports.

Search order (each file is loaded once, by its resolved real path):
  1. directories listed in the environment variable PLUGGABLE_PLUGIN_PATH
     (separated by os.pathsep);
  2. the package's own ``pluggable/plugins`` directory (reference plugins);
  3. the per-user directory ``$XDG_DATA_HOME/pluggable/plugins`` (default
     ``~/.local/share/pluggable/plugins``).
The current working directory is never searched implicitly. Set
PLUGGABLE_DISABLE_PLUGINS=1 to load none, or PLUGGABLE_SKIP_PLUGINS to a
comma-separated list of file names to skip.

Loading a plugin calls SE_InitPlugin (if exported), validates what it filled,
creates its devices, then calls TF_InitKernel (if exported). A plugin that
fails any step is quarantined with its reason; the others keep working.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import pathlib
import threading
from typing import Any

from . import dtypes, registry
from ._ffi import code_and_message, cstr, ffi, lib, set_status, status
from .device import Device

log = logging.getLogger("pluggable.plugins")

PACKAGE_PLUGIN_DIR = pathlib.Path(__file__).resolve().parent / "plugins"


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
    devices: list[Device] = dataclasses.field(default_factory=list)
    id: int = -1

    def __repr__(self) -> str:
        extra = f", reason={self.reason!r}" if self.reason else ""
        return (f"PluginRecord(path={self.path!r}, status={self.status!r}, "
                f"device_type={self.device_type!r}, devices={self.device_count}, "
                f"kernels={self.kernels}, ops={self.ops}{extra})")


class PluginQuarantined(Exception):
    """Internal: a loading step failed; the message is the reason."""


_lock = threading.RLock()
_records: list[PluginRecord] = []
_by_realpath: dict[str, PluginRecord] = {}
_devices: list[Device] = []
_loading: PluginRecord | None = None


def user_plugin_dir() -> pathlib.Path:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return pathlib.Path(base) / "pluggable" / "plugins"


def search_dirs() -> list[pathlib.Path]:
    """The plugin directories, in search order."""
    dirs = [pathlib.Path(p) for p in os.environ.get("PLUGGABLE_PLUGIN_PATH", "").split(os.pathsep) if p]
    dirs.append(PACKAGE_PLUGIN_DIR)
    dirs.append(user_plugin_dir())
    return dirs


def discover() -> list[pathlib.Path]:
    found = []
    for d in search_dirs():
        if d.is_dir():
            found.extend(sorted(p for p in d.iterdir() if p.suffix == ".so"))
    return found


# --- registration hooks (called from TF_RegisterKernelBuilder / TF_RegisterOpDefinition)

def _record_for(plugin_id: int) -> PluginRecord | None:
    if 0 <= plugin_id < len(_records):
        return _records[plugin_id]
    return None


def on_register_kernel(cdef, st) -> int:
    rec = _record_for(cdef.plugin_id)
    op = cstr(cdef.op_name)
    dev = cstr(cdef.device_type)
    where = rec.path if rec else "an unknown plugin"
    if cdef.overflow:
        reason = (f"kernel for op {op!r} on {dev}: too many type constraints or host-memory "
                  f"arguments (at most {lib.PG_MAX_CONSTRAINTS} and {lib.PG_MAX_HOST_ARGS})")
        code = 3
    else:
        constraints = {}
        bad_type = None
        for i in range(cdef.num_constraints):
            attr = ffi.string(cdef.constraint_attr[i]).decode()
            enum = int(cdef.constraint_type[i])
            try:
                constraints[attr] = dtypes.from_enum(enum)
            except KeyError:
                constraints[attr] = None
                bad_type = enum
        host = frozenset(ffi.string(cdef.host_args[i]).decode() for i in range(cdef.num_host_args))
        k = registry.KernelDef(op, dev, constraints, host, priority=int(cdef.priority),
                               label=cstr(cdef.label) or "", plugin=rec, cdef=cdef)
        reason = registry.check_kernel(k)
        if reason and bad_type is not None:
            reason += f" (TF_DataType {bad_type})"
        code = 5 if reason and "unknown op" in reason else 6 if reason and reason.startswith("duplicate") else 3
    if reason:
        set_status(st, code, reason)
        log.warning("plugin %s: kernel rejected: %s", where, reason)
        if rec is not None:
            rec.rejected.append(reason)
        return 0
    registry.register_kernel(k)
    if rec is not None:
        rec.kernels += 1
    return 1


def on_register_op(b, st) -> int:
    rec = _record_for(b.plugin_id)
    name = cstr(b.name) or ""
    specs = lambda arr, n: [cstr(arr[i]) or "" for i in range(n)]
    try:
        shape_fn = _c_shape_fn(b.shape_fn) if b.shape_fn != ffi.NULL else None
        op = registry.make_op_def(
            name, specs(b.inputs, b.num_inputs), specs(b.outputs, b.num_outputs),
            specs(b.attrs, b.num_attrs), shape_fn=shape_fn,
            source=rec.path if rec else "a plugin", is_commutative=bool(b.is_commutative),
            is_stateful=bool(b.is_stateful),
            deprecation=cstr(b.deprecation) if b.deprecation != ffi.NULL else None)
        registry.register_op(op)
    except registry.OpSpecError as exc:
        reason, code = f"op {name!r}: {exc}", 3
    except Exception as exc:  # AlreadyExistsError
        reason, code = str(exc), getattr(exc, "code", 3)
    else:
        if rec is not None:
            rec.ops += 1
        from . import raw_ops
        raw_ops.refresh()
        return 1
    set_status(st, code, reason)
    log.warning("plugin %s: op rejected: %s", rec.path if rec else "?", reason)
    if rec is not None:
        rec.rejected.append(reason)
    return 0


def _c_shape_fn(fnptr):
    """Wraps a plugin's C shape function as a Python shape function."""
    from .dispatch import make_c_attrs

    def shape_fn(shapes, attrs, values):
        n_in = len(shapes)
        ranks = ffi.new("int[]", [len(s) for s in shapes] or [0])
        flat = [d for s in shapes for d in s]
        dims = ffi.new("int64_t[]", flat or [0])
        n_out = shape_fn.num_outputs
        out_ranks = ffi.new("int[]", max(n_out, 1))
        out_dims = ffi.new("int64_t[]", max(n_out, 1) * lib.TF_MAX_DIMS)
        st = status()
        lib.pg_run_shape_fn(fnptr, n_in, ranks, dims, make_c_attrs(attrs), n_out,
                            out_ranks, out_dims, st)
        code, msg = code_and_message(st)
        if code:
            from .errors import make_error
            raise make_error(code, f"shape function: {msg}")
        out = []
        for i in range(n_out):
            r = out_ranks[i]
            out.append(None if r < 0 else tuple(out_dims[i * lib.TF_MAX_DIMS + j] for j in range(r)))
        return out
    shape_fn.num_outputs = 0  # set once the OpDef is known (dispatch fills it)
    return shape_fn


# --- loading ---------------------------------------------------------------

def _quarantine(rec: PluginRecord, reason: str) -> None:
    rec.status = "quarantined"
    rec.reason = reason
    log.warning("plugin %s quarantined: %s", rec.path, reason)


def _load_platform(rec: PluginRecord, se_init) -> list[Device]:
    st = status()
    plat = lib.pg_platform_init(se_init, rec.id, st)
    code, msg = code_and_message(st)
    if plat == ffi.NULL:
        raise PluginQuarantined(msg or "SE_InitPlugin failed")
    p = plat.params
    rec.abi_version = f"{p.major_version}.{p.minor_version}.{p.patch_version}"
    rec.platform_name = cstr(plat.platform.name)
    rec.device_type = cstr(plat.platform.type)
    for other in _records:
        if other is not rec and other.status == "loaded" and other.device_type == rec.device_type:
            raise PluginQuarantined(
                f"device type {rec.device_type!r} is already provided by {other.path}; "
                "remove one of the two plugins (or skip it with PLUGGABLE_SKIP_PLUGINS)")
        if other is not rec and other.status == "loaded" and other.platform_name == rec.platform_name:
            raise PluginQuarantined(
                f"platform name {rec.platform_name!r} is already used by {other.path}")
    devices = []
    for ordinal in range(int(plat.device_count)):
        cdev = lib.pg_device_create(plat, ordinal, st)
        code, msg = code_and_message(st)
        if cdev == ffi.NULL:
            raise PluginQuarantined(msg)
        devices.append(Device(rec, cdev))
    rec.device_count = len(devices)
    return devices


def load_plugin(path: str | os.PathLike) -> PluginRecord:
    """Loads one plugin file now (if not loaded yet) and returns its record.
    A failure quarantines the plugin and is reported in the record; it never
    raises for a bad plugin."""
    global _loading
    real = os.path.realpath(os.fspath(path))
    with _lock:
        if real in _by_realpath:
            return _by_realpath[real]
        rec = PluginRecord(path=real, id=len(_records))
        _records.append(rec)
        _by_realpath[real] = rec
        skip = {s.strip() for s in os.environ.get("PLUGGABLE_SKIP_PLUGINS", "").split(",") if s.strip()}
        if os.path.basename(real) in skip:
            rec.status, rec.reason = "skipped", "listed in PLUGGABLE_SKIP_PLUGINS"
            return rec
        err = ffi.new("char[1024]")
        handle = lib.pg_dlopen(real.encode(), err, 1024)
        if handle == ffi.NULL:
            _quarantine(rec, f"dlopen failed: {ffi.string(err).decode('utf-8', 'replace')}")
            return rec
        se_init = lib.pg_dlsym(handle, b"SE_InitPlugin")
        init_kernel = lib.pg_dlsym(handle, b"TF_InitKernel")
        if se_init == ffi.NULL and init_kernel == ffi.NULL:
            _quarantine(rec, "the library exports neither SE_InitPlugin nor TF_InitKernel; "
                        "it is not a pluggable device plugin")
            return rec
        try:
            devices = _load_platform(rec, se_init) if se_init != ffi.NULL else []
        except PluginQuarantined as exc:
            _quarantine(rec, str(exc))
            return rec
        rec.status = "loaded"
        rec.devices = devices
        _devices.extend(devices)
        if init_kernel != ffi.NULL:
            _loading = rec
            try:
                lib.pg_call_init_kernel(init_kernel, rec.id)
            finally:
                _loading = None
        from . import dispatch
        dispatch.invalidate()
        log.info("plugin %s loaded: %s", real, rec)
        return rec


_discovered = False


def ensure_loaded() -> None:
    """Discovers and loads the plugins once per process."""
    global _discovered
    if _discovered:
        return
    with _lock:
        if _discovered:
            return
        _discovered = True
        if os.environ.get("PLUGGABLE_DISABLE_PLUGINS") == "1":
            return
        for path in discover():
            load_plugin(path)


def records() -> list[PluginRecord]:
    ensure_loaded()
    return list(_records)


def devices() -> list[Device]:
    ensure_loaded()
    return list(_devices)
