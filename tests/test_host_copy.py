"""The host-copy extension (pluggable_host_copy.h): a plugin whose copy from
the host has read the source when it returns gets the caller's memory
directly (no staging copy, no wait); a table of version 0 or a NULL function
counts as absent; a failing copy is a typed error."""
from __future__ import annotations

import ctypes
import pathlib

import numpy as np
import pytest

import pluggable as pg
from plugin_build import build_plugin

HERE = pathlib.Path(__file__).parent
SRC = HERE / "plugins" / "host_copy_device.c"


def _load(mode: int):
    name = "HCOPY_" + "ABCD"[mode]
    path = build_plugin(SRC, f"host_copy_device{mode}", extra_flags=(
        f"-I{HERE / 'broken_plugins'}", f"-DHCOPY_MODE={mode}",
        f'-DMINI_DEVICE_TYPE="{name}"', f'-DMINI_PLATFORM_NAME="{name}_PLATFORM"'))
    rec = pg.load_plugin(path)
    assert rec.status == "loaded", rec.reason
    lib = ctypes.CDLL(str(path))
    lib.hcopy_calls.restype = ctypes.c_int64
    lib.hcopy_last_source.restype = ctypes.c_void_p
    return rec, lib, f"{name}:0"


@pytest.mark.parametrize("n", [1, 1000, (1 << 20) // 4 + 3, 3 << 20])
def test_the_plugin_reads_the_callers_memory_directly(n):
    """Sizes on both sides of the core's staging limit (1 MiB): every copy
    goes to memcpy_htod_consumed with the array's own address, and the
    source may change at once without changing the tensor."""
    rec, lib, dev = _load(0)
    assert rec.host_copy and rec.to_dict()["host_copy"] is True
    a = np.random.default_rng().standard_normal(n).astype(np.float32)
    want = a.copy()
    before = lib.hcopy_calls()
    with pg.device(dev):
        t = pg.constant(a)
    assert lib.hcopy_calls() == before + 1
    assert lib.hcopy_last_source() == a.ctypes.data
    a[:] = -1.0   # the caller reuses its memory at once
    assert t.device.endswith(dev)
    np.testing.assert_array_equal(t.numpy(), want)


@pytest.mark.parametrize("mode", [1, 2], ids=["version 0", "NULL function"])
def test_an_unsupported_table_counts_as_absent(mode):
    rec, lib, dev = _load(mode)
    assert not rec.host_copy
    a = np.random.default_rng().standard_normal(4096).astype(np.float32)
    want = a.copy()
    with pg.device(dev):
        t = pg.constant(a)
    a[:] = 0
    assert lib.hcopy_calls() == 0
    np.testing.assert_array_equal(t.numpy(), want)


def test_a_failing_copy_is_a_typed_error_naming_the_device():
    rec, lib, dev = _load(3)
    assert rec.host_copy
    with pg.device(dev), pytest.raises(pg.errors.InternalError,
                                       match=f"copy to device on .*{dev}.*planted failure"):
        pg.constant(np.ones(16, np.float32))
    # the device still works: a later copy fails the same way, nothing leaks
    with pg.device(dev), pytest.raises(pg.errors.InternalError):
        pg.constant(np.ones(16, np.float32))


def test_the_reference_host_device_provides_it():
    """MY_DEVICE stages the source into its copy task: the source may
    change as soon as pg.constant returns, whatever the size."""
    rec = next(r for r in pg.plugins() if r.device_type == "MY_DEVICE")
    assert rec.host_copy
    rng = np.random.default_rng()
    for n in (7, (1 << 20) // 4 + 1, 2 << 20):
        a = rng.standard_normal(n).astype(np.float32)
        want = a.copy()
        with pg.device("MY_DEVICE:0"):
            t = pg.constant(a)
            u = t * 2.0
        a[:] = np.nan
        np.testing.assert_array_equal(t.numpy(), want)
        np.testing.assert_array_equal(u.numpy(), want * 2)
