"""Device configuration with TensorFlow's ``tf.config`` shapes (public as
``pg.config`` and ``pg.config.experimental``): visible devices, logical
devices with memory limits, memory growth and memory statistics.

Everything that changes devices must be set before the runtime is
initialised, that is before the first op, tensor or ``pg.device`` scope on a
device (or ``list_logical_devices``); afterwards a change raises
RuntimeError, as TensorFlow does, while setting the value already in force
is accepted."""
from __future__ import annotations

from typing import Iterable

from ..framework import errors
from . import logical_devices as ld, placement
from .device import Device, PhysicalDevice
from .logical_devices import LogicalDevice, LogicalDeviceConfiguration

__all__ = [
    "LogicalDevice", "LogicalDeviceConfiguration", "get_logical_device_configuration",
    "get_memory_growth", "get_memory_info", "get_visible_devices", "list_logical_devices",
    "reset_memory_stats", "set_logical_device_configuration", "set_memory_growth",
    "set_visible_devices",
]


def _physical(device: PhysicalDevice) -> PhysicalDevice:
    """Checks that `device` is one of ``list_physical_devices()``."""
    if device not in placement.list_physical_devices():
        raise ValueError(f"Unrecognized device: {device!r}")
    return device


def _plugin_device(device: PhysicalDevice) -> Device | None:
    for d in placement.physical_plugin_devices():
        if d.physical() == device:
            return d
    return None


def list_logical_devices(device_type: str | None = None) -> list[LogicalDevice]:
    """The logical devices ops can run on, CPU first, e.g.
    ``[LogicalDevice(name='/device:CPU:0', device_type='CPU'), ...]``; filtered
    by `device_type` (exact, like TensorFlow: "MY_DEVICE"). Initialises the
    runtime: device configuration cannot change afterwards."""
    names = [(d.short_name, d.device_type) for d in placement.all_devices()]
    names[1:1] = [(f"CPU:{i}", "CPU") for i in range(1, ld.cpu_count())]
    return [LogicalDevice(f"/device:{name}", kind) for name, kind in names
            if device_type is None or kind == device_type]


def get_visible_devices(device_type: str | None = None) -> list[PhysicalDevice]:
    """The physical devices the runtime uses (all by default, CPU first),
    filtered by `device_type` (exact)."""
    return [p for p in placement.list_physical_devices()
            if ld.is_visible(p) and (device_type is None or p.device_type == device_type)]


def set_visible_devices(devices: PhysicalDevice | Iterable[PhysicalDevice],
                        device_type: str | None = None) -> None:
    """Makes only `devices` (physical devices) visible; with `device_type`,
    only devices of that type are affected. Hidden devices get no logical
    device: placement never chooses them and naming them raises. Logical
    devices are numbered from 0 among the visible ones. Raises ValueError for
    a device that is not a physical device (or not of `device_type`) or when
    the CPU would be hidden, RuntimeError once the runtime is initialised."""
    devices = [devices] if isinstance(devices, PhysicalDevice) else list(devices)
    for d in devices:
        _physical(d)
        if device_type is not None and d.device_type != device_type:
            raise ValueError(f"Unrecognized device: {d!r}")
    current = get_visible_devices()
    keep = [] if device_type is None else [p for p in current if p.device_type != device_type]
    new = keep + [d for d in devices if d not in keep]
    if sorted(new) == sorted(current):
        return
    if placement.initialized():
        raise RuntimeError("Visible devices cannot be modified after being initialized")
    if not any(p.device_type == "CPU" for p in new):
        raise ValueError("the CPU device cannot be hidden: ops without a kernel elsewhere "
                         "and host data run on it; keep it in the visible devices")
    ld.visible = new


def get_memory_growth(device: PhysicalDevice) -> bool:
    """Whether memory growth is enabled for a physical device (True by
    default where the plugin sets SP_Platform.force_memory_growth)."""
    _physical(device)
    dev = _plugin_device(device)
    forced = dev is not None and ld.forced_memory_growth(dev)
    return ld.memory_growth.get(device, forced)


def set_memory_growth(device: PhysicalDevice, enable: bool) -> None:
    """Enables or disables memory growth for a plugin's physical device.
    pluggable's caching allocator always obtains device memory on demand (it
    never reserves it up front), so this records the setting with
    TensorFlow's rules: ValueError for an unknown device, the CPU, or a
    device split into logical devices; RuntimeError once initialised."""
    _physical(device)
    if device in ld.configurations:
        raise ValueError("Cannot set memory growth on device when virtual devices configured")
    if _plugin_device(device) is None:
        raise ValueError("Cannot set memory growth on non-GPU and non-Pluggable devices")
    if get_memory_growth(device) == bool(enable):
        return
    if placement.initialized():
        raise RuntimeError("Physical devices cannot be modified after being initialized")
    ld.memory_growth[device] = bool(enable)


def get_logical_device_configuration(
        device: PhysicalDevice) -> list[LogicalDeviceConfiguration] | None:
    """The logical device configuration of a physical device, or None."""
    _physical(device)
    return ld.configurations.get(device)


def set_logical_device_configuration(
        device: PhysicalDevice, logical_devices: list[LogicalDeviceConfiguration]) -> None:
    """Splits a physical plugin device into ``len(logical_devices)`` logical
    devices, numbered consecutively (``MY_DEVICE:0``, ``MY_DEVICE:1``, ...),
    each with its own stream and caching allocator and, with `memory_limit`
    (MiB), a limit on the device memory it holds: an allocation past it
    raises ResourceExhaustedError on that logical device only. The CPU takes
    configurations without a memory limit: ``CPU:1``, ``CPU:2``, ... then
    name the host CPU too (for ``pg.distribute.MirroredStrategy`` replicas;
    their tensors report ``CPU:0``). Raises ValueError for bad arguments,
    RuntimeError once the runtime is initialised."""
    _physical(device)
    configs = list(logical_devices)
    if not configs or not all(isinstance(c, LogicalDeviceConfiguration) for c in configs):
        raise ValueError("logical_devices must be a non-empty list of "
                         "pg.config.LogicalDeviceConfiguration")
    for c in configs:
        _check_configuration(device, c)
    if ld.configurations.get(device) == configs:
        return
    if placement.initialized():
        raise RuntimeError("Virtual devices cannot be modified after being initialized")
    ld.configurations[device] = configs


def _check_configuration(device: PhysicalDevice, c: LogicalDeviceConfiguration) -> None:
    kind = device.device_type
    if c.experimental_priority is not None:
        raise ValueError(f"Setting experimental_priority on {kind} virtual devices is "
                         "currently not supported")
    if c.experimental_device_ordinal is not None:
        raise ValueError(f"Setting experimental_device_ordinal on {kind} virtual devices is "
                         "currently not supported")
    if device.device_type == "CPU":
        if c.memory_limit is not None:
            raise ValueError("Setting memory limit on CPU virtual devices is currently "
                             "not supported")
    elif c.memory_limit is not None and (not isinstance(c.memory_limit, (int, float))
                                         or c.memory_limit <= 0):
        raise ValueError(f"memory_limit must be a positive number of MiB, got "
                         f"{c.memory_limit!r}")


def _memory_device(device: str) -> Device:
    if not isinstance(device, str):
        raise TypeError(f"device must be a device name such as 'MY_DEVICE:0', got "
                        f"{type(device).__name__}")
    try:
        dev = placement.get_device(device)
    except errors.InvalidArgumentError:
        raise ValueError(f"No matching devices found for '{device}'") from None
    return dev


def get_memory_info(device: str) -> dict[str, int]:
    """Memory held by live tensors and buffers of a logical device, in bytes
    (blocks of the caching allocator): ``{"current": ..., "peak": ...}``.
    `device` is a name ("MY_DEVICE:0", "GPU:1"). Raises ValueError for the
    CPU (no allocator statistics) or an unknown device. Initialises the
    runtime."""
    dev = _memory_device(device)
    if not isinstance(dev, Device):
        raise ValueError(f"Allocator stats not available for device '{device}'")
    stats = dev.cache_stats()
    return {"current": stats["bytes_in_use"], "peak": stats["peak_bytes_in_use"]}


def reset_memory_stats(device: str) -> None:
    """Sets the peak of ``get_memory_info(device)`` to its current value.
    Raises ValueError for the CPU or an unknown device."""
    dev = _memory_device(device)
    if not isinstance(dev, Device):
        raise ValueError(f"Cannot reset memory stats for device '{device}'")
    stats = dev._c.stats  # the core's counters of this device's caching allocator
    stats.peak_bytes_in_use = stats.bytes_in_use
