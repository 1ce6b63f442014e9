"""Loading one plugin file (``load_plugin``) and all discovered ones
(``ensure_loaded``): security policy (the file is opened once and checked,
see ``security``), optional probe, dlopen of the opened file, SE_InitPlugin
and its validation (with SE_InitStreamCapture), device creation,
TF_InitKernel, TF_InitGraph, TF_InitProfiler. A failure quarantines the
plugin with its reason; it never raises to the caller."""
from __future__ import annotations

import logging
import os
from typing import Callable

from .._core import code_and_message, cstr, ffi, lib, status
from ..runtime import placement
from ..runtime.device import Device
from . import cuda_env, discovery, graph_plugins, probe as probing, profilers
from . import registration  # noqa: F401  (installs the core's registration hooks)
from .discovery import PACKAGE_PLUGIN_DIR  # noqa: F401  (re-exported)
from .records import (PluginQuarantined, PluginRecord, _by_identity, _by_realpath, _lock,
                      _records, new_record)
from .security import OpenedPlugin, Refused, check_fd, env_flag, open_plugin

log = logging.getLogger("pluggable.plugins")

# Called with a short description before each loading step that runs plugin
# code; the probe child uses it to say where a crash happened.
stage_hook: Callable[[str], None] | None = None

def _stage(what: str) -> None:
    if stage_hook is not None:
        stage_hook(what)

def _quarantine(rec: PluginRecord, reason: str) -> None:
    rec.status = "quarantined"
    rec.reason = reason
    log.warning("plugin %s quarantined: %s", rec.path, reason)

def _skip(rec: PluginRecord, reason: str) -> None:
    rec.status = "skipped"
    rec.reason = reason
    log.warning("plugin %s skipped: %s", rec.path, reason)

def _load_platform(rec: PluginRecord, se_init, init_capture) -> list[Device]:
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
    if init_capture != ffi.NULL:
        _stage("SE_InitStreamCapture")
        graph_plugins.load_capture(rec, plat, init_capture)
    host_copy = lib.pg_dlsym(rec.handle, b"PG_GetHostCopyFns")
    if host_copy != ffi.NULL:
        _stage("PG_GetHostCopyFns")
        rec.host_copy = bool(lib.pg_platform_init_host_copy(plat, host_copy))
    devices = []
    for ordinal in range(int(plat.device_count)):
        _stage(f"create_device {ordinal}")
        cdev = lib.pg_device_create(plat, ordinal, st)
        code, msg = code_and_message(st)
        if cdev == ffi.NULL:
            raise PluginQuarantined(msg or f"creating device {ordinal} failed")
        devices.append(Device(rec, cdev))
    rec.device_count = len(devices)
    if not devices:
        rec.reason = no_devices_reason(rec.device_type)
    return devices

def no_devices_reason(device_type: str | None) -> str:
    """Why a plugin that loaded may have no devices, for its record: the
    plugin's get_device_count said 0; for GPU plugins, what this process can
    see of NVIDIA's driver and CUDA_VISIBLE_DEVICES."""
    why = "loaded with 0 devices: the plugin's SP_PlatformFns.get_device_count reported none"
    if device_type != "GPU":
        return why + " (check that its hardware is present and visible to this process)"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return why + f"; CUDA_VISIBLE_DEVICES={visible!r} hides every GPU from this process"
    if not os.path.exists("/proc/driver/nvidia/version"):
        return why + ("; no NVIDIA driver is loaded on this machine (/proc/driver/nvidia is "
                      "missing): on a machine without a GPU this is expected")
    return why + ("; an NVIDIA driver is loaded but the CUDA runtime found no usable GPU: "
                  "check `nvidia-smi`, CUDA_VISIBLE_DEVICES"
                  + (f" (={visible!r})" if visible is not None else "")
                  + " and that the driver supports the plugin's CUDA version")

def load_plugin(path: str | os.PathLike, probe: bool | None = None,
                source: str = "load_plugin") -> PluginRecord:
    """Loads one plugin file now (if not loaded yet) and returns its record.
    A failure quarantines the plugin and is reported in the record; it never
    raises for a bad plugin (only TypeError for a `path` that is no path).
    With `probe` (default: PLUGGABLE_PROBE_PLUGINS), the file is first loaded
    in a subprocess and quarantined if that crashes."""
    given = os.fspath(path)
    real = os.path.realpath(given)
    use_probe = env_flag("PLUGGABLE_PROBE_PLUGINS") if probe is None else probe
    with _lock:
        if real in _by_realpath:
            return _by_realpath[real]
        skip = {s.strip() for s in os.environ.get("PLUGGABLE_SKIP_PLUGINS", "").split(",")
                if s.strip()}
        if os.path.basename(real) in skip or os.path.basename(given) in skip:
            rec = _by_realpath[real] = new_record(real, source)
            _skip(rec, "listed in PLUGGABLE_SKIP_PLUGINS")
            return rec
        try:
            opened = open_plugin(given)
        except Refused as refused:
            rec = _by_realpath[real] = new_record(real, source)
            _refuse(rec, refused)
            return rec
        except OSError as exc:  # e.g. the file replaced by another process meanwhile
            rec = _by_realpath[real] = new_record(real, source)
            _quarantine(rec, _os_error_reason(given, exc))
            return rec
        try:
            return _load_opened(opened, real, source, use_probe)
        finally:
            opened.close()


def load_from_fd(fd: int, given: str, source: str) -> PluginRecord:
    """Loads the plugin file already open as `fd` (the probe child's way:
    its parent opened and checked the file and passed the descriptor)."""
    with _lock:
        try:
            opened = check_fd(fd, given)
        except Refused as refused:
            rec = new_record(given, source)
            _refuse(rec, refused)
            return rec
        except OSError as exc:
            rec = new_record(given, source)
            _quarantine(rec, _os_error_reason(given, exc))
            return rec
        return _load_opened(opened, given, source, use_probe=False)


def _os_error_reason(given: str, exc: OSError) -> str:
    what = exc.strerror or str(exc)
    return (f"cannot open and check {given}: {what} (errno {exc.errno}); if another "
            "process was replacing the file, load it again once it is in place")


def _refuse(rec: PluginRecord, refused: Refused) -> None:
    if refused.status == "skipped":
        _skip(rec, f"refused by the security policy: {refused.reason}")
    else:
        _quarantine(rec, refused.reason)


def _load_opened(opened: OpenedPlugin, real: str, source: str,
                 use_probe: bool) -> PluginRecord:
    """Makes the record of an opened, checked file and loads it (call with
    ``_lock`` held); the same file reached by another path is not loaded
    again."""
    rec = _by_identity.get(opened.identity)
    if rec is None:
        rec = new_record(opened.path, source)
        _by_identity[opened.identity] = rec
        try:
            _load(rec, opened, use_probe)
        except Exception as exc:  # never let a plugin break the caller
            if rec.status in ("pending", "loaded"):
                placement.remove_devices(rec.devices)
                rec.devices = []
                _quarantine(rec, _os_error_reason(opened.path, exc) if isinstance(exc, OSError)
                            else f"internal error while loading: {exc!r}")
    _by_realpath[real] = _by_realpath[opened.path] = rec
    return rec


def _load(rec: PluginRecord, opened: OpenedPlugin, use_probe: bool) -> None:
    global _loading
    if use_probe:
        ok, why, child = probing.probe(opened)
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
    handle = lib.pg_dlopen(opened.load_path.encode(), err, 1024)
    if handle == ffi.NULL:
        msg = ffi.string(err).decode("utf-8", "replace").replace(opened.load_path, opened.path)
        if "undefined symbol" in msg:
            msg += (" (the core exports only the TF_* functions of pluggable's headers; link "
                    "the plugin's other dependencies into it or against their libraries)")
        elif "invalid ELF header" in msg or "file too short" in msg:
            msg += " (the file is not a shared library)"
        _quarantine(rec, f"dlopen failed: {msg}")
        return
    opened.keep()  # its /proc/self/fd name must stay unique to this library
    rec.handle = handle  # for optional extensions looked up later (dlsym)
    se_init = lib.pg_dlsym(handle, b"SE_InitPlugin")
    init_kernel = lib.pg_dlsym(handle, b"TF_InitKernel")
    if se_init == ffi.NULL and init_kernel == ffi.NULL:
        _quarantine(rec, "the library exports neither SE_InitPlugin nor TF_InitKernel; "
                    "it is not a pluggable device plugin")
        return
    try:
        init_capture = lib.pg_dlsym(handle, graph_plugins.INIT_CAPTURE_SYMBOL)
        devices = _load_platform(rec, se_init, init_capture) if se_init != ffi.NULL else []
    except PluginQuarantined as exc:
        _quarantine(rec, str(exc))
        return
    rec.status = "loaded"
    rec.devices = devices
    placement.add_devices(devices)
    if init_kernel != ffi.NULL:
        _stage("TF_InitKernel")
        _loading = rec
        try:
            lib.pg_call_init_kernel(init_kernel, rec.id)
        finally:
            _loading = None
    graph_symbol, init_graph = graph_plugins.find_init_graph(handle)
    if init_graph != ffi.NULL:
        _stage(graph_symbol.decode())
        graph_plugins.load_optimizer(rec, init_graph, graph_symbol)
    init_profiler = lib.pg_dlsym(handle, profilers.INIT_SYMBOL)
    if init_profiler != ffi.NULL:
        _stage("TF_InitProfiler")
        profilers.load(rec, init_profiler)
    log.info("plugin %s loaded: %s", opened.path, rec)

def _record_broken_entry_point(source: str, error: str) -> None:
    with _lock:
        rec = new_record(f"<{source}>", source)
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
        if env_flag("PLUGGABLE_DISABLE_PLUGINS"):
            return
        try:
            for path, source in discovery.discover():
                load_plugin(path, source=source)
            for path, source, error in discovery.entry_point_items():
                if path is None:
                    _record_broken_entry_point(source, error)
                else:
                    load_plugin(path, source=source)
        except Exception as exc:  # discovery must never break the import
            log.warning("plugin discovery failed: %r", exc)

_hint_given = False


def plugins() -> list[PluginRecord]:
    """Every plugin file found, with its status ("loaded", "quarantined",
    "skipped"), reason, ABI version, platform, device type, device count and
    the number of kernels and ops it registered. Where an NVIDIA driver is
    present but the CUDA reference plugin is not installed, it logs (once)
    how to install it (cuda_env.INSTALL_HINT)."""
    global _hint_given
    recs = records()
    if not _hint_given:
        _hint_given = True
        hint = cuda_env.missing_plugin_hint([r.path for r in recs])
        if hint:
            log.warning("%s", hint)
    return recs

def records() -> list[PluginRecord]:
    ensure_loaded()
    return list(_records)

def devices() -> list[Device]:
    ensure_loaded()
    return placement.plugin_devices()
