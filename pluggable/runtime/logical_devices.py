"""Logical devices: the devices ops run on, made from the physical devices at
the first use of the runtime.

The configuration (which physical devices are visible, how each is split
into logical devices with memory limits, memory growth) is kept here until
the device table is initialised (``placement``); ``build`` then turns the
visible physical devices into logical ones. The public functions are in
``device_config`` (``pg.config``)."""
from __future__ import annotations

from typing import NamedTuple

from .._core import code_and_message, ffi, lib, status
from ..framework import errors
from .device import Device, PhysicalDevice

MIB = 1 << 20


class LogicalDevice(NamedTuple):
    """A device as ``list_logical_devices`` reports it, e.g.
    ``LogicalDevice(name='/device:MY_DEVICE:1', device_type='MY_DEVICE')``."""
    name: str
    device_type: str


class LogicalDeviceConfiguration(NamedTuple):
    """One logical device of a physical device
    (``set_logical_device_configuration``). `memory_limit`: the device memory
    it may hold, in MiB (None: no limit). The two experimental fields exist
    for TensorFlow compatibility and must stay None."""
    memory_limit: int | None = None
    experimental_priority: int | None = None
    experimental_device_ordinal: int | None = None


class LogicalPluginDevice(Device):
    """A plugin device made for one entry of a logical device configuration
    (or renumbered by ``set_visible_devices``): the plugin creates the
    physical device again, so it has its own default stream and allocator."""

    def __init__(self, physical: Device, cdev, memory_limit: int | None):
        super().__init__(physical.plugin, cdev)
        self.physical_device = physical
        self.memory_limit = memory_limit  # bytes, or None

    def physical(self) -> PhysicalDevice:
        return self.physical_device.physical()


# The configuration, read by ``build`` when the device table is initialised.
visible: list[PhysicalDevice] | None = None   # None: every device
configurations: dict[PhysicalDevice, list[LogicalDeviceConfiguration]] = {}
memory_growth: dict[PhysicalDevice, bool] = {}


def forced_memory_growth(dev: Device) -> bool:
    """Whether the plugin asks for on-demand growth (SP_Platform.force_memory_growth)."""
    return bool(dev._c.platform.platform.force_memory_growth)


def cpu_count() -> int:
    """How many logical CPU devices the configuration names (1 by default).
    They share the one host CPU device: ``CPU:1`` runs its ops on the CPU's
    kernels, and its tensors report ``CPU:0``."""
    return max((len(c) for p, c in configurations.items() if p.device_type == "CPU"),
               default=1)


def is_visible(p: PhysicalDevice) -> bool:
    return visible is None or p in visible or p.device_type == "CPU"


def _create(phys: Device, logical_ordinal: int, limit_bytes: int | None) -> Device:
    st = status()
    c = lib.pg_device_create_logical(phys._c.platform, phys.ordinal, logical_ordinal,
                                     limit_bytes or 0, st)
    code, msg = code_and_message(st)
    if c == ffi.NULL or code:
        raise errors.make_error(
            code or 13, f"creating logical device {phys.device_type}:{logical_ordinal} on "
            f"physical device {phys.short_name}: {msg}", device=phys.name)
    return LogicalPluginDevice(phys, c, limit_bytes)


def build(physical_devices: list[Device]) -> list[Device]:
    """The logical devices of the visible `physical_devices`, numbered from 0
    per device type in order. A physical device without a configuration whose
    number does not change is its own logical device."""
    out: list[Device] = []
    next_ordinal: dict[str, int] = {}
    for phys in physical_devices:
        p = phys.physical()
        if not is_visible(p):
            continue
        configs = configurations.get(p)
        for cfg in configs or [None]:
            n = next_ordinal.get(phys.device_type, 0)
            next_ordinal[phys.device_type] = n + 1
            if cfg is None and n == phys.ordinal:
                out.append(phys)
                continue
            limit = None if cfg is None or cfg.memory_limit is None else int(cfg.memory_limit * MIB)
            out.append(_create(phys, n, limit))
    return out
