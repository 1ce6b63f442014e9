"""DLPack with JAX: ``jax.dlpack.from_dlpack(t)`` of a pluggable tensor and
``pg.from_dlpack(x)`` of a JAX array share memory (same address, values
read on the other side, writes through a third library seen by JAX), with
stream order and lifetimes across the exchange. Host cases (MY_DEVICE, CPU)
run wherever JAX is installed (the ``interop`` extra); GPU cases need the
CUDA reference plugin, an NVIDIA GPU and a CUDA build of jaxlib.

JAX keeps 64-bit integers and floats only with ``jax_enable_x64`` (it
converts them, a copy, otherwise), so the dtypes here are 8 to 32 bits
wide. JAX copies host memory that is not 64-byte aligned (XLA's CPU
buffers must be); pluggable's host plugin allocates at that alignment."""
from __future__ import annotations

import gc
import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # before jax's import

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="JAX is not installed (pip install -e '.[interop]')")
import jax.numpy as jnp  # noqa: E402

import pluggable as pg  # noqa: E402
from pluggable._core import cuda_python  # noqa: E402
from dlpack_helpers import device_address as _address  # noqa: E402
from dlpack_helpers import random_array as _random  # noqa: E402

MY = "MY_DEVICE:0"
GPU = "GPU:0"
_GPUS = len(pg.list_physical_devices("GPU"))

DTYPES = [np.float32, np.float16, pg.bfloat16.as_numpy_dtype, np.int32, np.int8, np.uint8,
          np.bool_]


def _host(x) -> "jax.Array":
    """`x` as a JAX array in host memory (JAX's default device may be a GPU)."""
    return jax.device_put(x, jax.devices("cpu")[0])


def _current_cuda_device() -> int | None:
    rt = cuda_python.cudart() if _GPUS else None
    return None if rt is None else int(rt.cudaGetDevice()[1])


def _set_cuda_device(ordinal: int | None) -> None:
    if ordinal is not None and _current_cuda_device() != ordinal:
        cuda_python.cudart().cudaSetDevice(ordinal)


def _jax_gpu():
    # JAX's GPU client, made here at collection time, leaves another GPU
    # current on this thread (as its GPU work does later: see the fixture
    # below); the other test modules of this process expect device 0.
    before = _current_cuda_device()
    try:
        return jax.devices("gpu")[0]
    except RuntimeError:
        return None
    finally:
        _set_cuda_device(before)


@pytest.fixture(autouse=True)
def _keep_the_current_cuda_device():
    before = _current_cuda_device()
    yield
    _set_cuda_device(before)


needs_gpu = pytest.mark.skipif(
    not pg.list_physical_devices("GPU") or _jax_gpu() is None,
    reason="no GPU device present, or jaxlib has no CUDA backend: the GPU cases need the "
           "CUDA reference plugin, an NVIDIA GPU and jax with its CUDA plugin")


# ------------------------------------------------------ host (and GPU)

@pytest.mark.parametrize("device, dl_device", [(MY, (1, 0)),
                                               pytest.param(GPU, (2, 0), marks=needs_gpu)])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_jax_reads_pg_tensors_in_place(device, dl_device, dtype):
    x = _random((13, 7), dtype)
    with pg.device(device):
        t = pg.constant(x)
    assert t.__dlpack_device__() == dl_device
    j = jax.dlpack.from_dlpack(t)
    assert j.device.platform == ("gpu" if device == GPU else "cpu")
    assert j.dtype == np.dtype(dtype) and j.shape == x.shape
    assert j.unsafe_buffer_pointer() == _address(t)
    np.testing.assert_array_equal(np.asarray(j), x)


def test_jax_sees_the_result_of_pending_my_device_work():
    """MY_DEVICE runs ops asynchronously: the export waits for the
    producer, so JAX reads the finished value."""
    x = _random((256, 256))
    with pg.device(MY):
        t = pg.constant(x)
        with pg.testing.expect_kernel("MatMul", "MY_DEVICE", min_calls=4):
            for _ in range(4):
                t = pg.matmul(t, t) * np.float32(1.0 / 256)
    j = jax.dlpack.from_dlpack(t)
    np.testing.assert_array_equal(np.asarray(jnp.asarray(j) + 0), t.numpy())


def test_pg_imports_jax_host_arrays_in_place_and_runs_on_my_device():
    x = _random((40, 3))
    a = _host(x)
    t = pg.from_dlpack(a)
    assert t.device.endswith("CPU:0")
    assert t.numpy().ctypes.data == a.unsafe_buffer_pointer()
    with pg.device(MY):
        with pg.testing.expect_kernel("Mul", "MY_DEVICE"):
            r = t * 3.0
    np.testing.assert_allclose(r.numpy(), x * np.float32(3.0), rtol=1e-6)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_jax_to_pg_dtypes(dtype):
    x = _random((9,), dtype)
    t = pg.from_dlpack(_host(x))
    assert t.dtype.as_numpy_dtype == np.dtype(dtype)
    np.testing.assert_array_equal(t.numpy(), x)


def test_aligned_host_memory_passes_numpy_pg_jax_without_a_copy():
    buf = np.empty(4096 + 64, np.uint8)
    off = (-buf.ctypes.data) % 64
    x = buf[off:off + 4096].view(np.float32)
    x[:] = _random(1024)
    t = pg.from_dlpack(x)
    j = jax.dlpack.from_dlpack(t)
    assert j.unsafe_buffer_pointer() == x.ctypes.data
    np.testing.assert_array_equal(np.asarray(j), x)


def test_host_lifetimes_across_the_exchange():
    x = _random((1 << 14,))
    with pg.device(MY):
        t = pg.constant(x)
    j = jax.dlpack.from_dlpack(t)
    del t
    gc.collect()
    with pg.device(MY):  # blocks freed too early would be handed out here
        junk = [pg.constant(np.zeros(1 << 14, np.float32)) for _ in range(8)]
    pg.synchronize()
    np.testing.assert_array_equal(np.asarray(j), x)
    del junk

    y = _random((1 << 14,))
    a = _host(y)
    u = pg.from_dlpack(a)
    del a
    gc.collect()
    more = [_host(np.full(1 << 14, i, np.float32)) + 0 for i in range(8)]
    jax.block_until_ready(more)
    np.testing.assert_array_equal(u.numpy(), y)


def test_jax_round_trip_keeps_the_my_device_buffer():
    x = _random((21,))
    with pg.device(MY):
        t = pg.constant(x)
    back = pg.from_dlpack(jax.dlpack.from_dlpack(t))
    assert back.numpy().ctypes.data == _address(t)
    np.testing.assert_array_equal(back.numpy(), x)


# ------------------------------------------------------------------- GPU

def _cupy():
    try:
        import cupy as cp
        cp.cuda.runtime.getDeviceCount()
        return cp
    except Exception:
        return None


def _slow_product(x: np.ndarray, n: int = 6) -> pg.Tensor:
    """A GPU tensor whose value is the end of a long chain of GPU work."""
    with pg.device(GPU):
        t = pg.constant(x)
        for _ in range(n):
            t = pg.matmul(t, t) * np.float32(1.0 / x.shape[0])
    return t


@needs_gpu
def test_pg_imports_jax_gpu_arrays_in_place():
    x = _random((64, 5))
    a = jax.device_put(x, _jax_gpu())
    t = pg.from_dlpack(a)
    assert t.device.endswith(GPU) and _address(t) == a.unsafe_buffer_pointer()
    with pg.testing.expect_kernel("Mul", "GPU"):
        with pg.device(GPU):
            r = t * 2.0
    np.testing.assert_array_equal(r.numpy(), x * np.float32(2.0))


@needs_gpu
def test_jax_waits_for_pg_work_on_its_stream():
    """JAX passes its own stream to ``__dlpack__``; a long chain of pg work
    queued just before is ordered ahead of JAX's computation on it."""
    x = _random((2048, 2048))
    t = _slow_product(x)
    j = jax.dlpack.from_dlpack(t)
    got = np.asarray(j * 1)
    np.testing.assert_array_equal(got, t.numpy())


@needs_gpu
def test_pg_waits_for_jax_work():
    """JAX computes asynchronously; pg.from_dlpack asks it for the legacy
    default stream and orders the device's stream after it."""
    a = jax.device_put(_random((2048, 2048)), _jax_gpu())
    for _ in range(6):
        a = (a @ a) / 2048.0
    t = pg.from_dlpack(a)
    with pg.device(GPU):
        r = pg.identity(t)
    np.testing.assert_array_equal(r.numpy(), np.asarray(a))


@needs_gpu
def test_writes_to_the_shared_gpu_buffer_reach_jax():
    cp = _cupy()
    if cp is None:
        pytest.skip("CuPy is not installed: the write goes through a third library")
    x = _random((1000,))
    with pg.device(GPU):
        t = pg.constant(x)
    j = jax.dlpack.from_dlpack(t)
    c = cp.from_dlpack(t)
    assert c.data.ptr == j.unsafe_buffer_pointer() == _address(t)
    c.fill(4.0)
    cp.cuda.runtime.deviceSynchronize()
    np.testing.assert_array_equal(np.asarray(j + 0), np.full(1000, 4.0, np.float32))
    np.testing.assert_array_equal(t.numpy(), np.full(1000, 4.0, np.float32))


@needs_gpu
def test_gpu_lifetimes_across_the_exchange():
    x = _random((1 << 16,))
    with pg.device(GPU):
        t = pg.constant(x)
    j = jax.dlpack.from_dlpack(t)
    del t
    gc.collect()
    with pg.device(GPU):
        junk = [pg.constant(np.zeros(1 << 16, np.float32)) for _ in range(8)]
    pg.synchronize()
    np.testing.assert_array_equal(np.asarray(j + 0), x)
    del junk

    y = _random((1 << 16,))
    a = jax.device_put(y, _jax_gpu())
    u = pg.from_dlpack(a)
    del a
    gc.collect()
    more = [jnp.full((1 << 16,), float(i), jnp.float32, device=_jax_gpu()) for i in range(8)]
    jax.block_until_ready(more)
    np.testing.assert_array_equal(u.numpy(), y)


@needs_gpu
def test_jax_round_trip_keeps_the_gpu_address():
    x = _random((33,))
    with pg.device(GPU):
        t = pg.constant(x)
    back = pg.from_dlpack(jax.dlpack.from_dlpack(t))
    assert _address(back) == _address(t)
    np.testing.assert_array_equal(back.numpy(), x)

