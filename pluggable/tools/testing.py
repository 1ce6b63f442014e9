"""Helpers for tests that must prove where work ran."""
from __future__ import annotations

import contextlib
from typing import Iterator

from ..framework import registry
from ..plugins import loader as plugins


def kernel_calls(op: str, device_type: str) -> int:
    """How many times the kernels of `op` on `device_type` have run."""
    plugins.ensure_loaded()
    return sum(k.calls for k in registry.KERNELS.get((op, device_type.upper()), ()))


def kernel_call_counts() -> dict[tuple[str, str], int]:
    """How many times the kernels of every (op, device type) have run so
    far (device type "DEFAULT" for device-agnostic kernels); the difference
    of two snapshots says where the work between them ran."""
    plugins.ensure_loaded()
    return {key: sum(k.calls for k in ks) for key, ks in registry.KERNELS.items()}


def has_kernel(op: str, device_type: str) -> bool:
    """Whether any kernel of `op` is registered for `device_type`."""
    plugins.ensure_loaded()
    return bool(registry.KERNELS.get((op, device_type.upper())))


def kernel_forwards(op: str, device_type: str) -> int:
    """How many outputs the kernels of `op` on `device_type` have written
    over a donated input's buffer (``TF_ForwardInputOrAllocateOutput``)."""
    plugins.ensure_loaded()
    return sum(k.forwarded for k in registry.KERNELS.get((op, device_type.upper()), ()))


@contextlib.contextmanager
def expect_kernel(op: str, device_type: str, min_calls: int = 1) -> Iterator[None]:
    """Fails (AssertionError) unless a kernel of `op` registered for
    `device_type` ran at least `min_calls` times inside the block: a fallback
    to another device cannot pass."""
    plugins.ensure_loaded()
    if not registry.KERNELS.get((op, device_type.upper())):
        raise AssertionError(f"no kernel for op {op} is registered on {device_type}; "
                             f"registered: {registry.describe_kernels(op)}")
    before = kernel_calls(op, device_type)
    yield
    ran = kernel_calls(op, device_type) - before
    if ran < min_calls:
        raise AssertionError(f"the {device_type} kernel for {op} ran {ran} time(s), expected at "
                             f"least {min_calls} (the op ran elsewhere: check placement)")
