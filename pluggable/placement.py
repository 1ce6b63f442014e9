"""Device names, ``pg.device(...)`` scopes and ``list_physical_devices``."""
from __future__ import annotations

import contextvars
import re
from typing import Union

from . import errors, plugin_loader as plugins
from .device import CpuDevice, Device, PhysicalDevice

CPU = CpuDevice()
AnyDevice = Union[CpuDevice, Device]

_scope: contextvars.ContextVar = contextvars.ContextVar("pluggable_device_scope", default=None)

_NAME_RE = re.compile(
    r"^(?:/job:[^/]+)?(?:/replica:\d+)?(?:/task:\d+)?"
    r"(?:/(?:device:|physical_device:)?|)"
    r"(?P<type>[A-Za-z][A-Za-z_]*)(?::(?P<ord>\d+))?$")


def all_devices() -> list[AnyDevice]:
    return [CPU, *plugins.devices()]


def list_physical_devices(device_type: str | None = None) -> list[PhysicalDevice]:
    """The devices of this process, CPU first, e.g.
    ``[PhysicalDevice(name='/physical_device:CPU:0', device_type='CPU'),
    PhysicalDevice(name='/physical_device:MY_DEVICE:0', device_type='MY_DEVICE')]``.
    `device_type` ("GPU", "my_device", ...) filters. Details of a plugin device
    (platform, vendor, hardware, memory) are on ``pg.get_device(name)``."""
    want = device_type.upper() if device_type else None
    return [d.physical() for d in all_devices() if want is None or d.device_type == want]


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


class device:
    """Context manager placing the ops of its block on a device::

        with pg.device("MY_DEVICE:0"):
            y = pg.nn.relu(x)

    Scopes nest (the innermost wins) and are per thread. ``pg.device(None)``
    clears the scope (automatic placement). An unknown or out-of-range
    device raises InvalidArgumentError listing the available devices."""

    def __init__(self, name: "str | AnyDevice | None"):
        self.device = None if name is None else get_device(name)
        self._tokens: list = []

    def __enter__(self) -> "AnyDevice | None":
        self._tokens.append(_scope.set(self.device))
        return self.device

    def __exit__(self, *exc) -> None:
        _scope.reset(self._tokens.pop())


def current() -> "AnyDevice | None":
    """The device of the innermost active scope on this thread, or None."""
    return _scope.get()
