"""Plugin discovery, loading and the records ``pg.plugins()`` reports.

Search order (each file is loaded once, by its resolved real path, so a
symlink or a directory listed twice never loads a library twice):
  1. the directories listed in the environment variable PLUGGABLE_PLUGIN_PATH
     (separated by os.pathsep; empty and relative entries are ignored, so the
     current directory is never searched by accident);
  2. the package's own ``pluggable/plugins`` directory (reference plugins);
  3. the per-user directory ``$XDG_DATA_HOME/pluggable/plugins`` (default
     ``~/.local/share/pluggable/plugins``);
  4. installed Python distributions that advertise plugins through the entry
     point group ``pluggable.plugins``. The entry point's object is either a
     path (str or os.PathLike) or an iterable of paths, or a callable taking no
     arguments that returns one of those. Each path names a plugin file or a
     directory whose ``*.so`` files are plugins. Example (pyproject.toml)::

         [project.entry-points."pluggable.plugins"]
         my_device = "my_device_pkg:plugin_dir"   # a function returning a path

Within a directory, files are taken in name order. ``pg.load_plugin(path)``
loads one more file at run time. The current working directory is never
searched implicitly.

Environment variables:
  PLUGGABLE_DISABLE_PLUGINS=1        load no plugin at import
  PLUGGABLE_SKIP_PLUGINS=a.so,b.so   file names to skip
  PLUGGABLE_PLUGIN_ALLOWLIST=d1:d2   only open files whose real path lies inside
                                     one of these directories
  PLUGGABLE_ALLOW_INSECURE_PLUGINS=1 open files that are writable by group or
                                     others, or that sit in a world-writable
                                     directory (refused otherwise)
  PLUGGABLE_PROBE_PLUGINS=1          load each plugin in a subprocess first and
                                     quarantine it if that crashes or hangs
  PLUGGABLE_PROBE_TIMEOUT=60         seconds a probe may take

Loading a plugin calls SE_InitPlugin (if exported), validates what it filled,
creates its devices, then calls TF_InitKernel (if exported). A record's status
is "loaded", "quarantined" (a loading step failed; ``reason`` says which) or
"skipped" (not opened: skip list or security policy; ``reason`` says why).
A bad plugin never makes ``import pluggable`` fail; the others keep working.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import pathlib
import signal
import stat
import subprocess
import sys
import threading
from typing import Any, Callable, Iterable

from . import dtypes, registry
from ._ffi import code_and_message, cstr, ffi, lib, set_status, status
from .device import Device

log = logging.getLogger("pluggable.plugins")

PACKAGE_PLUGIN_DIR = pathlib.Path(__file__).resolve().parent / "plugins"
ENTRY_POINT_GROUP = "pluggable.plugins"
PLUGIN_SUFFIXES = (".so",)
DEFAULT_PROBE_TIMEOUT = 60.0


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
                "source": self.source}


class PluginQuarantined(Exception):
    """Internal: a loading step failed; the message is the reason."""


_lock = threading.RLock()
_records: list[PluginRecord] = []
_by_realpath: dict[str, PluginRecord] = {}
_devices: list[Device] = []
_loading: PluginRecord | None = None

# Called with a short description before each loading step that runs plugin
# code; the probe subprocess uses it to say where a crash happened.
stage_hook: Callable[[str], None] | None = None


def _stage(what: str) -> None:
    if stage_hook is not None:
        stage_hook(what)


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


# --- discovery ---------------------------------------------------------------

def user_plugin_dir() -> pathlib.Path:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return pathlib.Path(base) / "pluggable" / "plugins"


def _env_path_dirs() -> list[pathlib.Path]:
    dirs = []
    for entry in os.environ.get("PLUGGABLE_PLUGIN_PATH", "").split(os.pathsep):
        if not entry:
            continue  # an empty entry would mean the current directory
        if not os.path.isabs(entry):
            log.warning("PLUGGABLE_PLUGIN_PATH entry %r is ignored: plugin directories must "
                        "be absolute paths (the current directory is never searched)", entry)
            continue
        dirs.append(pathlib.Path(entry))
    return dirs


def search_dirs() -> list[pathlib.Path]:
    """The plugin directories, in search order (entry points come after)."""
    return [*_env_path_dirs(), PACKAGE_PLUGIN_DIR, user_plugin_dir()]


def _plugin_files(d: pathlib.Path) -> list[pathlib.Path]:
    try:
        return sorted(p for p in d.iterdir() if p.suffix in PLUGIN_SUFFIXES and p.is_file())
    except OSError as exc:
        log.warning("cannot list plugin directory %s: %s", d, exc)
        return []


def _as_paths(value: Any) -> list[str]:
    """Turns an entry point's object into a list of paths."""
    if callable(value):
        value = value()
    if isinstance(value, (str, os.PathLike)):
        return [os.fspath(value)]
    if isinstance(value, Iterable):
        out = []
        for v in value:
            if not isinstance(v, (str, os.PathLike)):
                raise TypeError(f"expected a path, got {type(v).__name__}")
            out.append(os.fspath(v))
        return out
    raise TypeError(f"expected a path, an iterable of paths or a callable returning them, "
                    f"got {type(value).__name__}")


def _entry_point_items() -> list[tuple[pathlib.Path | None, str, str]]:
    """(path, source, error) triples from the ``pluggable.plugins`` entry
    points; `path` is None (and `error` set) when an entry point is broken."""
    try:
        from importlib.metadata import entry_points
        eps = entry_points(group=ENTRY_POINT_GROUP)
    except Exception as exc:  # a broken distribution must not stop the import
        log.warning("cannot read the %s entry points: %r", ENTRY_POINT_GROUP, exc)
        return []
    items = []
    for ep in sorted(eps, key=lambda e: e.name):
        source = f"entry point {ep.name} = {ep.value}"
        try:
            paths = _as_paths(ep.load())
        except Exception as exc:
            items.append((None, source, f"the entry point failed: {exc!r}"))
            continue
        for p in paths:
            if not os.path.isabs(p):
                items.append((None, source, f"the entry point gave the relative path {p!r}; "
                              "plugin paths must be absolute (e.g. built from __file__)"))
                continue
            path = pathlib.Path(p)
            if path.is_dir():
                items.extend((f, source, "") for f in _plugin_files(path))
            else:
                items.append((path, source, ""))
    return items


def discover() -> list[tuple[pathlib.Path, str]]:
    """(plugin file, source) pairs in search order, before de-duplication."""
    found: list[tuple[pathlib.Path, str]] = []
    env_dirs = _env_path_dirs()
    for d in env_dirs:
        if d.is_dir():
            found.extend((f, f"PLUGGABLE_PLUGIN_PATH ({d})") for f in _plugin_files(d))
    for d, what in ((PACKAGE_PLUGIN_DIR, "package"), (user_plugin_dir(), "user")):
        if d.is_dir():
            found.extend((f, f"{what} directory") for f in _plugin_files(d))
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
    k = None
    if cdef.compute_func == ffi.NULL:
        reason = (f"kernel for op {op!r} on {dev}: compute_func is NULL "
                  "(TF_NewKernelBuilder needs a compute function)")
        code = 3
    elif cdef.overflow:
        reason = (f"kernel for op {op!r} on {dev}: too many type constraints or host-memory "
                  f"arguments (at most {lib.PG_MAX_CONSTRAINTS} and {lib.PG_MAX_HOST_ARGS})")
        code = 3
    else:
        constraints = {}
        bad_type = None
        for i in range(cdef.num_constraints):
            attr = ffi.string(cdef.constraint_attr[i]).decode("utf-8", "replace")
            enum = int(cdef.constraint_type[i])
            try:
                constraints[attr] = dtypes.from_enum(enum)
            except KeyError:
                constraints[attr] = None
                bad_type = enum
        host = frozenset(ffi.string(cdef.host_args[i]).decode("utf-8", "replace")
                         for i in range(cdef.num_host_args))
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
        op = registry.make_op_def(
            name, specs(b.inputs, b.num_inputs), specs(b.outputs, b.num_outputs),
            specs(b.attrs, b.num_attrs), exact_shapes=False,
            source=rec.path if rec else "a plugin", is_commutative=bool(b.is_commutative),
            is_stateful=bool(b.is_stateful),
            deprecation=cstr(b.deprecation) if b.deprecation != ffi.NULL else None)
        if b.shape_fn != ffi.NULL:
            op.shape_fn = _c_shape_fn(b.shape_fn, op)
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


def _c_shape_fn(fnptr, op: registry.OpDef):
    """Wraps a plugin's C shape function for `op` as a Python shape function.
    Outputs it leaves of unknown rank come back as None (the kernel's
    allocation then decides)."""
    from .dispatch import make_c_attrs
    n_out = len(op.outputs)

    def shape_fn(shapes, attrs, values):
        ranks = ffi.new("int[]", [len(s) for s in shapes] or [0])
        dims = ffi.new("int64_t[]", [d for s in shapes for d in s] or [0])
        out_ranks = ffi.new("int[]", max(n_out, 1))
        out_dims = ffi.new("int64_t[]", max(n_out, 1) * lib.TF_MAX_DIMS)
        st = status()
        lib.pg_run_shape_fn(fnptr, len(shapes), ranks, dims, make_c_attrs(attrs, op), n_out,
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
    return shape_fn


# --- security policy -------------------------------------------------------

def allowlist() -> list[str] | None:
    """The resolved directories of PLUGGABLE_PLUGIN_ALLOWLIST, or None when
    the variable is not set (every location allowed)."""
    raw = os.environ.get("PLUGGABLE_PLUGIN_ALLOWLIST")
    if raw is None:
        return None
    return [os.path.realpath(d) for d in raw.split(os.pathsep) if d and os.path.isabs(d)]


def _inside(path: str, directory: str) -> bool:
    try:
        return os.path.commonpath([path, directory]) == directory
    except ValueError:
        return False


def policy_refusal(given: str, real: str) -> str | None:
    """Why the security policy forbids opening `real` (the resolved path of
    `given`), or None if it may be opened. Nothing is opened here."""
    allowed = allowlist()
    if allowed is not None and not any(_inside(real, d) for d in allowed):
        via = f" (through the symlink {given})" if os.path.abspath(given) != real else ""
        return (f"{real}{via} is outside the directories of PLUGGABLE_PLUGIN_ALLOWLIST "
                f"({os.pathsep.join(allowed) or 'empty'}): move the plugin into one of "
                "them or add its directory to the list")
    if _env_flag("PLUGGABLE_ALLOW_INSECURE_PLUGINS"):
        return None
    try:
        st = os.stat(real)
        parent = os.stat(os.path.dirname(real))
    except OSError as exc:
        return f"cannot inspect {real}: {exc.strerror}"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return (f"{real} is writable by group or others (mode {stat.filemode(st.st_mode)}), so "
                f"another user could replace its code: run 'chmod go-w {real}' (or set "
                "PLUGGABLE_ALLOW_INSECURE_PLUGINS=1 to accept the risk)")
    if parent.st_mode & stat.S_IWOTH:
        d = os.path.dirname(real)
        return (f"{real} is in the world-writable directory {d}, where another user could "
                "replace it: install it in a directory only its owner can write to (or set "
                "PLUGGABLE_ALLOW_INSECURE_PLUGINS=1 to accept the risk)")
    return None


# --- probing -----------------------------------------------------------------

def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def _no_core_dumps() -> None:  # runs in the probe child before exec
    try:
        import resource
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except Exception:
        pass


def probe(path: str, timeout: float | None = None) -> tuple[bool, str, dict | None]:
    """Loads `path` in a fresh subprocess (``python -m pluggable.check --probe``).
    Returns (survived, reason, child record). `survived` is False when the
    child crashed, hung or failed to report; `reason` then says how."""
    if timeout is None:
        try:
            timeout = float(os.environ.get("PLUGGABLE_PROBE_TIMEOUT", DEFAULT_PROBE_TIMEOUT))
        except ValueError:
            timeout = DEFAULT_PROBE_TIMEOUT
    env = dict(os.environ)
    env["PLUGGABLE_DISABLE_PLUGINS"] = "1"
    env.pop("PLUGGABLE_PROBE_PLUGINS", None)
    cmd = [sys.executable, "-m", "pluggable.check", "--probe", path]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout,
                              preexec_fn=_no_core_dumps if os.name == "posix" else None)
    except subprocess.TimeoutExpired as exc:
        where = _last_stage(exc.stdout)
        return False, (f"the probe did not finish within {timeout:g} s{where} "
                       "(hang while loading); raise PLUGGABLE_PROBE_TIMEOUT if it is "
                       "only slow"), None
    except OSError as exc:
        return False, f"could not start the probe subprocess: {exc}", None
    where = _last_stage(proc.stdout)
    if proc.returncode < 0:
        return False, f"crashed with {_signal_name(-proc.returncode)} while loading{where}", None
    result = None
    for line in proc.stdout.splitlines():
        if line.startswith("PROBE_RESULT "):
            try:
                result = json.loads(line[len("PROBE_RESULT "):])
            except ValueError:
                result = None
    if result is None:
        tail = (proc.stderr or "").strip().splitlines()[-3:]
        return False, (f"exited with status {proc.returncode} while loading{where} without "
                       f"reporting a result{': ' + ' | '.join(tail) if tail else ''}"), None
    return True, "", result


def _last_stage(out: Any) -> str:
    if isinstance(out, bytes):
        out = out.decode("utf-8", "replace")
    stages = [l[len("PROBE_STAGE "):] for l in (out or "").splitlines()
              if l.startswith("PROBE_STAGE ")]
    return f" (in {stages[-1]})" if stages else ""


# --- loading -------------------------------------------------------------------

def _quarantine(rec: PluginRecord, reason: str) -> None:
    rec.status = "quarantined"
    rec.reason = reason
    log.warning("plugin %s quarantined: %s", rec.path, reason)


def _skip(rec: PluginRecord, reason: str) -> None:
    rec.status = "skipped"
    rec.reason = reason
    log.warning("plugin %s skipped: %s", rec.path, reason)


def _load_platform(rec: PluginRecord, se_init) -> list[Device]:
    st = status()
    _stage("SE_InitPlugin")
    plat = lib.pg_platform_init(se_init, rec.id, st)
    code, msg = code_and_message(st)
    if plat == ffi.NULL:
        raise PluginQuarantined(msg or "SE_InitPlugin failed")
    p = plat.params
    rec.abi_version = f"{p.major_version}.{p.minor_version}.{p.patch_version}"
    rec.platform_name = cstr(plat.platform.name)
    rec.device_type = cstr(plat.platform.type)
    for other in _records:
        if other is rec or other.status != "loaded":
            continue
        if other.device_type == rec.device_type:
            raise PluginQuarantined(
                f"device type {rec.device_type!r} of {rec.path} is already provided by "
                f"{other.path}: remove one of the two plugins (or skip one with "
                "PLUGGABLE_SKIP_PLUGINS)")
        if other.platform_name == rec.platform_name:
            raise PluginQuarantined(
                f"platform name {rec.platform_name!r} of {rec.path} is already used by "
                f"{other.path}: platform names must be unique")
    devices = []
    for ordinal in range(int(plat.device_count)):
        _stage(f"create_device {ordinal}")
        cdev = lib.pg_device_create(plat, ordinal, st)
        code, msg = code_and_message(st)
        if cdev == ffi.NULL:
            raise PluginQuarantined(msg or f"creating device {ordinal} failed")
        devices.append(Device(rec, cdev))
    rec.device_count = len(devices)
    return devices


def load_plugin(path: str | os.PathLike, probe: bool | None = None,
                source: str = "load_plugin") -> PluginRecord:
    """Loads one plugin file now (if not loaded yet) and returns its record.
    A failure quarantines the plugin and is reported in the record; it never
    raises for a bad plugin. With `probe` (default: PLUGGABLE_PROBE_PLUGINS),
    the file is first loaded in a subprocess and quarantined if that crashes."""
    given = os.fspath(path)
    real = os.path.realpath(given)
    with _lock:
        if real in _by_realpath:
            return _by_realpath[real]
        rec = PluginRecord(path=real, id=len(_records), source=source)
        _records.append(rec)
        _by_realpath[real] = rec
        try:
            _load(rec, given, real, _env_flag("PLUGGABLE_PROBE_PLUGINS") if probe is None else probe)
        except Exception as exc:  # never let a plugin break the caller
            if rec.status in ("pending", "loaded"):
                for d in rec.devices:
                    if d in _devices:
                        _devices.remove(d)
                rec.devices = []
                _quarantine(rec, f"internal error while loading: {exc!r}")
        return rec


def _load(rec: PluginRecord, given: str, real: str, use_probe: bool) -> None:
    global _loading
    if not os.path.exists(real):
        _quarantine(rec, f"no such file: {given}")
        return
    if not os.path.isfile(real):
        _quarantine(rec, f"{real} is not a regular file")
        return
    skip = {s.strip() for s in os.environ.get("PLUGGABLE_SKIP_PLUGINS", "").split(",") if s.strip()}
    if os.path.basename(real) in skip or os.path.basename(given) in skip:
        _skip(rec, "listed in PLUGGABLE_SKIP_PLUGINS")
        return
    refusal = policy_refusal(given, real)
    if refusal:
        _skip(rec, f"refused by the security policy: {refusal}")
        return
    if use_probe:
        ok, why, child = probe(real)
        if not ok:
            _quarantine(rec, f"probe: {why}")
            return
        if child is not None and child.get("status") != "loaded":
            for key in ("abi_version", "platform_name", "device_type"):
                setattr(rec, key, child.get(key))
            rec.rejected = list(child.get("rejected") or [])
            _quarantine(rec, child.get("reason") or "the probe did not load it")
            return
    _stage("dlopen")
    err = ffi.new("char[1024]")
    handle = lib.pg_dlopen(real.encode(), err, 1024)
    if handle == ffi.NULL:
        msg = ffi.string(err).decode("utf-8", "replace")
        if "undefined symbol" in msg:
            msg += (" (the core exports only the TF_* functions of pluggable's headers; link "
                    "the plugin's other dependencies into it or against their libraries)")
        elif "invalid ELF header" in msg or "file too short" in msg:
            msg += " (the file is not a shared library)"
        _quarantine(rec, f"dlopen failed: {msg}")
        return
    se_init = lib.pg_dlsym(handle, b"SE_InitPlugin")
    init_kernel = lib.pg_dlsym(handle, b"TF_InitKernel")
    if se_init == ffi.NULL and init_kernel == ffi.NULL:
        _quarantine(rec, "the library exports neither SE_InitPlugin nor TF_InitKernel; "
                    "it is not a pluggable device plugin")
        return
    try:
        devices = _load_platform(rec, se_init) if se_init != ffi.NULL else []
    except PluginQuarantined as exc:
        _quarantine(rec, str(exc))
        return
    rec.status = "loaded"
    rec.devices = devices
    _devices.extend(devices)
    if init_kernel != ffi.NULL:
        _stage("TF_InitKernel")
        _loading = rec
        try:
            lib.pg_call_init_kernel(init_kernel, rec.id)
        finally:
            _loading = None
    from . import dispatch
    dispatch.invalidate()
    log.info("plugin %s loaded: %s", real, rec)


def _record_broken_entry_point(source: str, error: str) -> None:
    with _lock:
        rec = PluginRecord(path=f"<{source}>", id=len(_records), source=source)
        _records.append(rec)
        _quarantine(rec, error)


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
        if _env_flag("PLUGGABLE_DISABLE_PLUGINS"):
            return
        try:
            for path, source in discover():
                load_plugin(path, source=source)
            for path, source, error in _entry_point_items():
                if path is None:
                    _record_broken_entry_point(source, error)
                else:
                    load_plugin(path, source=source)
        except Exception as exc:  # discovery must never break the import
            log.warning("plugin discovery failed: %r", exc)


def records() -> list[PluginRecord]:
    ensure_loaded()
    return list(_records)


def devices() -> list[Device]:
    ensure_loaded()
    return list(_devices)
