"""Helpers of the DLPack tests (tests/test_dlpack*.py)."""
from __future__ import annotations

import numpy as np

import pluggable as pg
from pluggable._core import ffi, lib


def device_address(t: pg.Tensor) -> int:
    """The address of a device tensor's buffer (host memory for MY_DEVICE,
    CUDA memory for the GPU), as the core holds it."""
    mem = ffi.new("SP_DeviceMemoryBase*")
    lib.pg_tensor_mem(t._h, mem)
    return int(ffi.cast("uintptr_t", mem.opaque))


def random_array(shape, dtype=np.float32) -> np.ndarray:
    """Fresh random values of `dtype`: normal floats, 0/1 booleans, integers
    in [-1000, 1000) clipped to the type's range."""
    rng = np.random.default_rng()
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(max(info.min, -1000), min(info.max, 1000), shape).astype(dt)
    return rng.standard_normal(shape).astype(dt)
