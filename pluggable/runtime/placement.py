"""The device table, device names, ``pg.device(...)`` scopes and
``list_physical_devices``.

The table holds the built-in CPU and every device of a loaded plugin; the
plugin layer adds devices as it loads plugins (``add_devices``). Those are
the physical devices; ops run on the logical devices, made from the visible
physical ones at the first use of the runtime (``logical_devices``), so the
device configuration of ``pg.config`` can be set before."""
from __future__ import annotations

import contextvars
import logging
import re
import threading
from typing import Union

from ..framework import config, errors
from . import logical_devices
from .device import CpuDevice, Device, PhysicalDevice

CPU = CpuDevice()
AnyDevice = Union[CpuDevice, Device]

_table_lock = threading.Lock()
_plugin_devices: list[Device] = []     # physical devices, in load order
_logical: list[Device] | None = None   # None until the runtime is initialised

_scope: contextvars.ContextVar = contextvars.ContextVar("pluggable_device_scope", default=None)

_NAME_RE = re.compile(
    r"^(?:/job:[^/]+)?(?:/replica:\d+)?(?:/task:\d+)?"
    r"(?:/(?:device:|physical_device:)?|)"
    r"(?P<type>[A-Za-z][A-Za-z_]*)(?::(?P<ord>\d+))?$")


def add_devices(devices: list[Device]) -> None:
    """Adds the (physical) devices of a loaded plugin. After the runtime is
    initialised, the visible ones become logical devices at once (unsplit)."""
    with _table_lock:
        new = [d for d in devices if d not in _plugin_devices]
        _plugin_devices.extend(new)
        if _logical is not None:
            _logical.extend(logical_devices.build(new))


def remove_devices(devices: list[Device]) -> None:
    """Withdraws devices (of a plugin quarantined while loading)."""
    with _table_lock:
        for d in devices:
            if d in _plugin_devices:
                _plugin_devices.remove(d)
        if _logical is not None:
            _logical[:] = [d for d in _logical if d not in devices and
                           getattr(d, "physical_device", None) not in devices]


def physical_plugin_devices() -> list[Device]:
    """The physical devices of loaded plugins, in load order (visible or not)."""
    with _table_lock:
        return list(_plugin_devices)


def initialized() -> bool:
    """Whether the logical devices exist (the runtime was used)."""
    return _logical is not None


def plugin_devices() -> list[Device]:
    """The logical devices of loaded plugins; the first call initialises the
    runtime (creates them from the device configuration)."""
    global _logical
    with _table_lock:
        if _logical is None:
            _logical = logical_devices.build(_plugin_devices)
        return list(_logical)


def all_devices() -> list[AnyDevice]:
    return [CPU, *plugin_devices()]


def list_physical_devices(device_type: str | None = None) -> list[PhysicalDevice]:
    """The devices of this process, CPU first, e.g.
    ``[PhysicalDevice(name='/physical_device:CPU:0', device_type='CPU'),
    PhysicalDevice(name='/physical_device:MY_DEVICE:0', device_type='MY_DEVICE')]``.
    `device_type` ("GPU", "my_device", ...) filters. Details of a plugin device
    (platform, vendor, hardware, memory) are on ``pg.get_device(name)``.
    Listing does not initialise the runtime and includes hidden devices."""
    want = device_type.upper() if device_type else None
    return [d.physical() for d in [CPU, *physical_plugin_devices()]
            if want is None or d.device_type == want]


def _available() -> str:
    return ", ".join(d.short_name for d in all_devices())


def parse(name: str) -> tuple[str, int]:
    """Splits a device name into (TYPE, ordinal); accepts "MY_DEVICE:0",
    "my_device:0", "/MY_DEVICE:0", "/device:MY_DEVICE:0",
    "/job:localhost/replica:0/task:0/device:MY_DEVICE:0" and "MY_DEVICE"."""
    if not isinstance(name, str):
        raise TypeError(f"a device name must be a string, got {type(name).__name__}")
    m = _NAME_RE.match(name.strip())
    if not m:
        raise errors.InvalidArgumentError(
            f"cannot parse device name {name!r}; use e.g. 'MY_DEVICE:0' or "
            f"'/device:MY_DEVICE:0'. Available devices: {_available()}")
    return m.group("type").upper(), int(m.group("ord") or 0)


def get_device(name: "str | AnyDevice") -> AnyDevice:
    """The device object for a name (see ``parse``); raises
    InvalidArgumentError listing the available devices if there is none."""
    if isinstance(name, (CpuDevice, Device)):
        return name
    dtype, ordinal = parse(name)
    if dtype == "CPU" and ordinal < logical_devices.cpu_count():
        return CPU  # the logical CPU devices share the host CPU
    matches = [d for d in all_devices() if d.device_type == dtype]
    if not matches:
        raise errors.InvalidArgumentError(
            f"unknown device {name!r}: no device of type {dtype} is present. "
            f"Available devices: {_available()} (see pg.plugins() for plugins that "
            "failed to load)")
    for d in matches:
        if d.ordinal == ordinal:
            return d
    raise errors.InvalidArgumentError(
        f"device {name!r} is out of range: {len(matches)} {dtype} device(s) present. "
        f"Available devices: {_available()}")


def _get_physical(name: "str | AnyDevice") -> AnyDevice:
    """The physical device for a name; does not initialise the runtime."""
    if isinstance(name, (CpuDevice, Device)):
        return name
    dtype, ordinal = parse(name)
    for d in [CPU, *physical_plugin_devices()]:
        if d.device_type == dtype and d.ordinal == ordinal:
            return d
    raise errors.InvalidArgumentError(
        f"no physical device {name!r}; physical devices: "
        f"{', '.join(p.name for p in list_physical_devices())}")


_log = logging.getLogger("pluggable.runtime")

# Device types TensorFlow code names that may be absent here: a scope on one
# of them soft-places on the CPU, as TensorFlow does, when no device of the
# type is present and soft placement is on.
SOFT_PLACED_TYPES = ("GPU",)


def _scope_device(name: "str | AnyDevice") -> AnyDevice:
    """The device of ``pg.device(name)``: ``get_device``'s; with soft
    placement on (logged), as TensorFlow places: the CPU for a GPU name where
    no GPU is present, and ordinal 0 of a present type for an ordinal beyond
    its devices ("CPU:1" with one CPU device)."""
    if isinstance(name, str) and config._soft_placement:
        kind, ordinal = parse(name)
        present = [d for d in all_devices() if d.device_type == kind]
        if kind in SOFT_PLACED_TYPES and not present:
            _log.info("device %r: no %s device is present; soft placement puts the ops of "
                      "its scope on CPU:0 (pg.config.set_soft_device_placement(False) makes "
                      "this an error)", name, kind)
            return CPU
        cpus = logical_devices.cpu_count() if kind == "CPU" else 0
        if present and ordinal >= max(cpus, len(present)):
            _log.info("device %r: %d %s device(s) present; soft placement puts the ops of "
                      "its scope on %s:0 (pg.config.set_soft_device_placement(False) makes "
                      "this an error)", name, max(cpus, len(present)), kind, kind)
            return get_device(f"{kind}:0")
    return get_device(name)


class device:
    """Context manager placing the ops of its block on a device::

        with pg.device("MY_DEVICE:0"):
            y = pg.nn.relu(x)

    Scopes nest (the innermost wins) and are per thread. ``pg.device(None)``
    clears the scope (automatic placement). An unknown device type raises
    InvalidArgumentError listing the available devices. With soft placement
    on (the default), as in TensorFlow, a GPU name where no GPU is present
    puts its ops on the CPU, and an ordinal beyond a type's devices on that
    type's device 0; with it off, both raise InvalidArgumentError."""

    def __init__(self, name: "str | AnyDevice | None"):
        self.device = None if name is None else _scope_device(name)
        self._tokens: list = []

    def __enter__(self) -> "AnyDevice | None":
        self._tokens.append(_scope.set(self.device))
        return self.device

    def __exit__(self, *exc) -> None:
        _scope.reset(self._tokens.pop())


def current() -> "AnyDevice | None":
    """The device of the innermost active scope on this thread, or None."""
    return _scope.get()


def get_device_details(device) -> dict:
    """Details of a physical device (a ``PhysicalDevice`` record or a name):
    device type, platform, vendor, hardware name, PCI bus id, NUMA node,
    memory bandwidth, GFLOP/s, memory (total and free, in bytes) and the
    plugin file. Values a plugin does not report are None."""
    name = getattr(device, "name", device)
    if isinstance(name, str):
        name = name.replace("/physical_device:", "")
    dev = _get_physical(name)
    details = {"device_type": dev.device_type, "platform_name": dev.platform_name,
               "vendor": dev.vendor, "hardware_name": dev.hardware_name,
               "pci_bus_id": None, "numa_node": None, "memory_bandwidth": None,
               "gflops": None, "memory_total": None, "memory_free": None, "plugin": None}
    if isinstance(dev, Device):
        mem = dev.memory_usage()
        details.update(pci_bus_id=dev.pci_bus_id, numa_node=dev.numa_node,
                       memory_bandwidth=dev.memory_bandwidth, gflops=dev.gflops,
                       memory_total=mem[1] if mem else None,
                       memory_free=mem[0] if mem else None, plugin=dev.plugin.path)
    return details


def synchronize(device_name: "str | None" = None) -> None:
    """Waits for all work (or one device's) and raises the first
    asynchronous error as a typed exception naming the device."""
    devs = [get_device(device_name)] if device_name else plugin_devices()
    for d in devs:
        d.synchronize()
