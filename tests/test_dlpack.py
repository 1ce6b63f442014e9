"""DLPack on the host: numpy <-> pluggable without copies (CPU tensors and
MY_DEVICE, whose memory is host memory), capsule rules, lifetimes and bad
input. The GPU exchange with torch and CuPy is in test_dlpack_gpu.py."""
from __future__ import annotations

import ctypes
import gc
import sys

import numpy as np
import pytest

import pluggable as pg
from dlpack_helpers import device_address as _device_address
from dlpack_helpers import random_array
from pluggable._core import ffi, lib
from pluggable.runtime import dlpack, native_stream, placement

NUMPY_DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8,
                np.uint32, np.uint64, np.float16, np.float32, np.float64]


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]




@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(), (0,), (5,), (3, 4), (2, 3, 4)])
def test_numpy_reads_cpu_tensors_in_place(dtype, shape):
    x = random_array(shape, dtype)
    t = pg.constant(x)
    a = np.from_dlpack(t)
    assert a.dtype == x.dtype and a.shape == x.shape
    np.testing.assert_array_equal(a, x)
    if x.size:
        assert _address(a) == _address(t._a)
    assert not a.flags.writeable  # tensors are immutable


@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=lambda d: np.dtype(d).name)
def test_numpy_reads_my_device_tensors_in_place(dtype):
    x = random_array((4, 5), dtype)
    with pg.device("MY_DEVICE:0"):
        t = pg.constant(x)  # an asynchronous copy to the device
    assert t._h is not None and t.__dlpack_device__() == (1, 0)
    a = np.from_dlpack(t)
    assert _address(a) == _device_address(t)
    np.testing.assert_array_equal(a, x)
    assert not a.flags.writeable


def test_export_waits_for_queued_work():
    rng = np.random.default_rng()
    x = rng.standard_normal((256, 256)).astype(np.float32)
    with pg.device("MY_DEVICE:0"):
        t = pg.constant(x)
        for _ in range(4):
            t = pg.matmul(t, t) * np.float32(1e-2)
    want = t.numpy()  # a copy, read the usual way
    with pg.device("MY_DEVICE:0"):
        u = pg.constant(x)
        for _ in range(4):
            u = pg.matmul(u, u) * np.float32(1e-2)
        a = np.from_dlpack(u)  # right after enqueueing
    np.testing.assert_array_equal(a, want)


def test_pg_imports_numpy_in_place():
    for dtype in NUMPY_DTYPES:
        x = random_array((3, 4), dtype)
        t = pg.from_dlpack(x)
        assert t.dtype is pg.as_dtype(dtype) and t.device.endswith("CPU:0")
        assert _address(t.numpy()) == _address(x)
        np.testing.assert_array_equal(t.numpy(), x)


def test_bfloat16_round_trip_in_place():
    x = np.random.default_rng().standard_normal((3, 5)).astype(pg.bfloat16.as_numpy_dtype)
    t = pg.constant(x)
    back = pg.from_dlpack(t)
    assert back.dtype is pg.bfloat16
    assert _address(back.numpy()) == _address(t._a)
    with pg.device("MY_DEVICE:0"):
        d = pg.identity(t)
    h = pg.from_dlpack(d)
    assert _address(h.numpy()) == _device_address(d)
    np.testing.assert_array_equal(h.numpy().astype(np.float32), x.astype(np.float32))


def test_strided_input_copied_only_when_allowed():
    x = random_array((4, 6), np.float32)
    s = x[:, ::2]
    t = pg.from_dlpack(s)
    np.testing.assert_array_equal(t.numpy(), s)
    with pytest.raises(pg.errors.InvalidArgumentError, match="copy=False"):
        pg.from_dlpack(s, copy=False)
    r = x[::-1, 1::2]  # negative strides
    np.testing.assert_array_equal(pg.from_dlpack(r).numpy(), r)


def test_copy_true_copies_both_ways():
    x = random_array((5,), np.int32)
    t = pg.from_dlpack(x, copy=True)
    assert _address(t.numpy()) != _address(x)
    np.testing.assert_array_equal(t.numpy(), x)
    a = np.from_dlpack(t, copy=True)
    assert _address(a) != _address(t._a)
    np.testing.assert_array_equal(a, x)


def test_capsule_is_consumed_once():
    x = random_array((3,), np.float32)
    with pg.device("MY_DEVICE:0"):
        t = pg.identity(pg.constant(x))
    for versioned in (True, False):
        cap = t.__dlpack__(max_version=(1, 0)) if versioned else t.__dlpack__()
        first = pg.from_dlpack(cap)
        np.testing.assert_array_equal(first.numpy(), x)
        with pytest.raises(pg.errors.InvalidArgumentError, match="consumed already"):
            pg.from_dlpack(cap)
    with pytest.raises(pg.errors.InvalidArgumentError, match="not a DLPack capsule"):
        pg.from_dlpack(object())


def test_legacy_consumers_get_a_legacy_capsule():
    x = random_array((2, 3), np.float64)
    with pg.device("MY_DEVICE:0"):
        t = pg.identity(pg.constant(x))

    class Legacy:  # a producer of the pre-1.0 protocol (no max_version)
        def __dlpack__(self, stream=None):
            return t.__dlpack__(stream=stream)

        def __dlpack_device__(self):
            return t.__dlpack_device__()
    a = np.from_dlpack(Legacy())
    np.testing.assert_array_equal(a, x)
    assert _address(a) == _device_address(t)


def test_lifetime_outlives_the_producer():
    x = random_array((64,), np.float32)
    with pg.device("MY_DEVICE:0"):
        t = pg.identity(pg.constant(x))
    a = np.from_dlpack(t)
    del t
    gc.collect()
    with pg.device("MY_DEVICE:0"):  # new tensors must not reuse the exported block
        junk = [pg.constant(np.full(64, 7.0, np.float32)) * 2.0 for _ in range(8)]
    pg.synchronize()
    np.testing.assert_array_equal(a, x)
    assert all((j.numpy() == 14.0).all() for j in junk)

    y = random_array((10,), np.int64)
    want = y.copy()
    u = pg.from_dlpack(y)
    del y
    gc.collect()
    np.testing.assert_array_equal(u.numpy(), want)


def test_cpu_export_releases_the_array_once():
    x = random_array((8,), np.float32)
    t = pg.constant(x)
    base = sys.getrefcount(t._a)
    cap = t.__dlpack__(max_version=(1, 0))
    n = sys.getrefcount(t._a)
    assert n == base + 1  # the capsule holds the array
    del cap  # never consumed: its destructor calls the deleter
    gc.collect()
    n = sys.getrefcount(t._a)
    assert n == base
    a = np.from_dlpack(t)
    n = sys.getrefcount(t._a)
    assert n == base + 1
    del a
    gc.collect()
    n = sys.getrefcount(t._a)
    assert n == base


def test_wrapped_device_memory_calls_the_deleter_once():
    """pg_dlpack_wrap on MY_DEVICE (host memory): kernels read the producer's
    memory in place and the producer's deleter runs once, after the work."""
    x = random_array((4, 4), np.float32)
    src = pg.constant(x)
    base = sys.getrefcount(src._a)
    cap = src.__dlpack__(max_version=(1, 0))
    managed, versioned = dlpack._take(cap)
    dev = placement.get_device("MY_DEVICE:0")
    st = ffi.gc(lib.TF_NewStatus(), lib.TF_DeleteStatus)
    h = lib.pg_dlpack_wrap(ffi.cast("void*", managed), versioned, dev._c, st)
    assert h != ffi.NULL and lib.TF_GetCode(st) == 0
    dlpack._consume(cap, versioned)
    t = pg.Tensor._from_handle(h, dev, pg.float32, (4, 4))
    with pg.testing.expect_kernel("Mul", "MY_DEVICE"):
        r = t * t
    np.testing.assert_array_equal(r.numpy(), x * x)
    del cap
    gc.collect()
    n = sys.getrefcount(src._a)
    assert n == base + 1  # the wrapped tensor holds it
    del t, r
    gc.collect()
    n = sys.getrefcount(src._a)
    assert n == base  # released exactly once


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32),
                ("device_id", ctypes.c_int32), ("ndim", ctypes.c_int32),
                ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _Managed(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32),
                ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p),
                ("flags", ctypes.c_uint64), ("dl_tensor", _DLTensor)]


def _handmade_capsule(device_type=1, code=2, bits=32, lanes=1, major=1):
    buf = np.zeros(6, np.float32)
    shape = (ctypes.c_int64 * 1)(6)
    m = _Managed(major, 0, None, None, 0,
                 _DLTensor(buf.ctypes.data, device_type, 0, 1, code, bits, lanes, shape, None, 0))
    new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p,
                            ctypes.c_void_p)(("PyCapsule_New", ctypes.pythonapi))
    cap = new(ctypes.addressof(m), b"dltensor_versioned", None)
    return cap, (buf, shape, m)  # keep the memory alive with the capsule


@pytest.mark.parametrize("kwargs, error, match", [
    ({"device_type": 4}, pg.errors.UnimplementedError, "device type 4"),
    ({"device_type": 2}, pg.errors.NotFoundError, "CUDA device 0"),
    ({"code": 5, "bits": 32}, pg.errors.InvalidArgumentError, "no pluggable dtype"),
    ({"lanes": 4}, pg.errors.InvalidArgumentError, "4 lanes"),
    ({"bits": 24}, pg.errors.InvalidArgumentError, "24 bits"),
    ({"major": 2}, pg.errors.InvalidArgumentError, "version 2"),
])
def test_bad_capsules_raise_typed_errors(kwargs, error, match):
    if kwargs.get("device_type") == 2 and pg.list_physical_devices("GPU"):
        pytest.skip("a GPU is present, so CUDA device 0 exists")
    cap, keep = _handmade_capsule(**kwargs)
    with pytest.raises(error, match=match):
        pg.from_dlpack(cap)


def test_handmade_capsule_imports():
    cap, keep = _handmade_capsule()
    t = pg.from_dlpack(cap)
    keep[0][:] = 3.0
    np.testing.assert_array_equal(t.numpy(), np.full(6, 3.0, np.float32))
    # The tensor reads the managed tensor (its deleter) when it is released:
    # release it while `keep` still holds the struct and the memory.
    del t


def test_device_without_memory_declaration_cannot_export(monkeypatch):
    dev = pg.get_device("MY_DEVICE:0")
    with pg.device("MY_DEVICE:0"):
        t = pg.identity(pg.constant(np.ones(3, np.float32)))
    monkeypatch.setattr(native_stream, "memory_kind", lambda dev: None)
    # The device keeps what it was asked once: forget it for the test, and
    # forget the answer given under the patch afterwards (the tests after
    # this one, in this process, need the real answer).
    saved = dev.__dict__.pop("_dlpack_device", None)
    try:
        with pytest.raises(pg.errors.UnimplementedError, match="t.to"):
            np.from_dlpack(t)
    finally:
        dev.__dict__.pop("_dlpack_device", None)
        if saved is not None:
            dev.__dict__["_dlpack_device"] = saved


def test_dl_device_and_copy_arguments():
    x = random_array((3,), np.float32)
    with pg.device("MY_DEVICE:0"):
        t = pg.identity(pg.constant(x))
    with pytest.raises(pg.errors.UnimplementedError):
        t.__dlpack__(max_version=(1, 0), dl_device=(2, 0))
    a = np.from_dlpack(t, device="cpu")
    np.testing.assert_array_equal(a, x)
    moved = pg.from_dlpack(x, device="MY_DEVICE:0")
    assert moved.device.endswith("MY_DEVICE:0")
    np.testing.assert_array_equal(moved.numpy(), x)
    with pytest.raises(pg.errors.InvalidArgumentError, match="copy=False"):
        pg.from_dlpack(x, device="MY_DEVICE:0", copy=False)


@pytest.mark.parametrize("dtype", [np.uint16])
def test_unsupported_numpy_dtype(dtype):
    with pytest.raises(pg.errors.InvalidArgumentError, match="no pluggable dtype"):
        pg.from_dlpack(np.zeros(3, dtype))


def test_host_tensors_have_no_cuda_array_interface():
    t = pg.constant(np.ones(2, np.float32))
    with pg.device("MY_DEVICE:0"):
        m = pg.constant(np.ones(2, np.float32))
    assert not hasattr(t, "__cuda_array_interface__")
    assert not hasattr(m, "__cuda_array_interface__")


def test_host_device_has_no_native_streams_to_order():
    """MY_DEVICE's native-stream table is version 2 without order_native:
    asking it to order streams says why not, so the caller orders another
    way."""
    dev = pg.get_device("MY_DEVICE:0")
    fns = native_stream.plugin_fns(dev)
    assert fns.version == 2 and fns.kind == native_stream.KIND_NONE
    assert native_stream.order_fn(dev) is None
    assert "no order_native" in native_stream.order(dev, 1, native_stream.STREAM_AFTER_NATIVE)


def test_native_stream_table_of_a_version_1_caller():
    """A core that knows only version 1 of the table gets version 1 and
    nothing written past the size it gave."""
    dev = pg.get_device("MY_DEVICE:0")
    sym = lib.pg_dlsym(dev.plugin.handle, b"PG_GetNativeStreamFns")
    assert sym != ffi.NULL
    v1 = ffi.offsetof("PG_NativeStreamFns", "compute_capability") + ffi.sizeof("void*")
    full = ffi.sizeof("PG_NativeStreamFns")
    assert full > v1
    raw = ffi.new("char[]", full + 16)
    ffi.memmove(raw, b"\xab" * (full + 16), full + 16)
    table = ffi.cast("PG_NativeStreamFns*", raw)
    table.struct_size = v1
    ffi.cast("PG_GetNativeStreamFnsFn", sym)(table)
    assert table.version == 1 and table.kind == native_stream.KIND_NONE
    assert ffi.buffer(raw + v1, full + 16 - v1)[:] == b"\xab" * (full + 16 - v1)
    table.struct_size = v1 - 1  # smaller than version 1: untouched
    table.version = 0
    ffi.cast("PG_GetNativeStreamFnsFn", sym)(table)
    assert table.version == 0


def test_import_in_one_call_takes_the_capsule_once():
    """pg_dlpack_import (the common import as one call into the core) over a
    host-memory device: the tensor shares the producer's memory, the capsule
    is marked used, and the producer's deleter runs once, when the tensor
    goes."""
    dev = pg.get_device("MY_DEVICE:0")
    a = random_array((5, 7), np.float32)
    held = sys.getrefcount(a)
    cap = a.__dlpack__(max_version=(1, 0))
    assert sys.getrefcount(a) == held + 1  # the export holds the array
    t = dlpack._import_in_one_call(cap, dev)
    assert t is not None and t.device.endswith("MY_DEVICE:0")
    assert t.shape == (5, 7) and t.dtype == pg.float32
    with pytest.raises(pg.errors.InvalidArgumentError, match="consumed"):
        pg.from_dlpack(cap)
    np.testing.assert_array_equal(t.numpy(), a)
    del cap
    gc.collect()
    assert sys.getrefcount(a) == held + 1  # the tensor owns it now
    del t
    gc.collect()
    assert sys.getrefcount(a) == held  # the deleter ran, once


def test_import_in_one_call_leaves_other_capsules_to_the_general_path():
    """A strided array, a capsule of another DLPack device, or something that
    is not a capsule: no tensor, and the capsule stays usable."""
    dev = pg.get_device("MY_DEVICE:0")
    strided = random_array((6, 8), np.float32)[:, ::2]
    cap = strided.__dlpack__(max_version=(1, 0))
    assert dlpack._import_in_one_call(cap, dev) is None
    np.testing.assert_array_equal(pg.from_dlpack(cap).numpy(), strided)  # still unused
    a = random_array((4,), np.float32)
    cap = a.__dlpack__()
    info = ffi.new("pg_dlpack_info*")
    st = lib.TF_NewStatus()
    try:
        h = lib.pg_dlpack_import(ffi.cast("void*", id(cap)), dev._c, 2, 0, info, st)
        assert h == ffi.NULL and lib.TF_GetCode(st) == 0
        not_a_capsule = object()
        h = lib.pg_dlpack_import(ffi.cast("void*", id(not_a_capsule)), dev._c, 1, 0, info, st)
        assert h == ffi.NULL and lib.TF_GetCode(st) == 0
    finally:
        lib.TF_DeleteStatus(st)
    np.testing.assert_array_equal(pg.from_dlpack(cap).numpy(), a)


def test_releasing_an_import_keeps_an_asynchronous_error_for_the_synchronisation():
    """Dropping an imported tensor waits for the device's queued work before
    the producer's deleter runs, but the asynchronous failure of an op
    queued before it stays for the next synchronisation and for the read
    of the failed value."""
    dev = pg.get_device("MY_DEVICE:0")
    a = random_array((4,), np.float32)
    with pg.device("MY_DEVICE:0"):
        bad = pg.raw_ops.CheckNumerics(tensor=pg.constant(np.array([1.0, np.nan])),
                                       message="left for the synchronisation")
        t = dlpack._import_in_one_call(a.__dlpack__(), dev)
        held = sys.getrefcount(a)
        del t
        gc.collect()
        assert sys.getrefcount(a) == held - 1  # the deleter ran
        with pytest.raises(pg.errors.InvalidArgumentError, match="left for the"):
            pg.synchronize()
        with pytest.raises(pg.errors.InvalidArgumentError, match="left for the"):
            bad.numpy()
