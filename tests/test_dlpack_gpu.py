"""DLPack on the GPU: pluggable tensors of the CUDA plugin device and PyTorch
/ CuPy CUDA arrays share memory in both directions (same address, writes
through one side read through the other), with stream ordering and
lifetimes across the exchange. Needs an NVIDIA GPU and torch or CuPy."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import pluggable as pg
from dlpack_helpers import device_address as _address
from dlpack_helpers import random_array as _random
from pluggable._core import cuda_python
from pluggable.runtime import native_stream

if not pg.list_physical_devices("GPU"):
    pytest.skip("no GPU device present: DLPack GPU tests need the CUDA reference plugin and "
                "an NVIDIA GPU", allow_module_level=True)

try:
    import torch
    HAVE_TORCH = torch.cuda.is_available()
except ImportError:
    torch = None
    HAVE_TORCH = False
try:
    import cupy as cp
    cp.cuda.runtime.getDeviceCount()
    HAVE_CUPY = True
except Exception:
    cp = None
    HAVE_CUPY = False

needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="PyTorch with CUDA is not installed")
needs_cupy = pytest.mark.skipif(not HAVE_CUPY, reason="CuPy is not installed")

GPU = "GPU:0"


@pytest.fixture(params=["plugin", "cuda-python"])
def ordering(request, monkeypatch):
    """Stream order between the device and the peer's stream through the
    plugin's ``order_native`` (the default), or through cuda-python, as for
    a plugin without it. Yields a function of the `order` arguments
    expected of one exchange, the list the plugin's function must have been
    called with (none through cuda-python)."""
    calls = []
    if request.param == "cuda-python":
        if cuda_python.cudart() is None:
            pytest.skip("cuda-python is not installed: the fallback path needs it")
        monkeypatch.setattr(native_stream, "order_fn", lambda dev: None)
    else:
        real = native_stream.order_fn

        def counting(dev):
            fn = real(dev)
            assert fn is not None, "the CUDA plugin implements order_native"

            def call(sp, stream, native, how, st):
                calls.append(how)
                return fn(sp, stream, native, how, st)
            return call
        monkeypatch.setattr(native_stream, "order_fn", counting)
    yield lambda *expected: calls == (list(expected) if request.param == "plugin" else [])




def _slow_product(x: np.ndarray, n: int = 6) -> pg.Tensor:
    """A tensor whose value is the end of a long chain of GPU work."""
    with pg.device(GPU):
        t = pg.constant(x)
        for _ in range(n):
            t = pg.matmul(t, t) * np.float32(1.0 / x.shape[0])
    return t


def test_gpu_tensor_reports_its_cuda_device():
    with pg.device(GPU):
        t = pg.constant(np.ones(3, np.float32))
    kind, ordinal = t.__dlpack_device__()
    assert kind == 2 and ordinal >= 0


@needs_torch
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.int64, np.bool_,
                                   np.uint8, np.float64])
def test_torch_reads_pg_gpu_tensors_in_place(dtype):
    x = _random((17, 9), dtype)
    with pg.device(GPU):
        t = pg.constant(x)
    tt = torch.from_dlpack(t)
    assert tt.is_cuda and tt.data_ptr() == _address(t)
    np.testing.assert_array_equal(tt.cpu().numpy(), x)


@needs_torch
@pytest.mark.parametrize("offset", [1, 2, 3])
def test_unary_op_of_an_imported_view_off_16_byte_alignment(offset):
    """A view of a torch tensor that starts 4-12 bytes into it: the unary op
    takes its element-wise loop instead of 16-byte vectors."""
    x = _random((4096 * 64 + 7,))
    a = torch.from_numpy(x).cuda()[offset:]
    t = pg.from_dlpack(a)
    assert _address(t) % 16 == offset * 4
    with pg.device(GPU), pg.testing.expect_kernel("Neg", "GPU"):
        got = pg.raw_ops.Neg(x=t)
    np.testing.assert_array_equal(got.numpy(), -x[offset:])


@needs_torch
def test_torch_waits_for_pg_work_on_its_stream(ordering):
    x = _random((2048, 2048))
    t = _slow_product(x)
    tt = torch.from_dlpack(t)  # passes torch's current stream: ours is ordered before it
    got = (tt * 1).cpu().numpy()
    np.testing.assert_array_equal(got, t.numpy())
    assert ordering(native_stream.NATIVE_AFTER_STREAM)


@needs_torch
def test_torch_side_stream_waits_for_pg_work(ordering):
    """A consumer stream that is a real handle (not the default stream's 1)."""
    x = _random((2048, 2048))
    t = _slow_product(x)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        tt = torch.from_dlpack(t)
        got = tt * 1
    s.synchronize()
    np.testing.assert_array_equal(got.cpu().numpy(), t.numpy())


@needs_torch
def test_pg_waits_for_torch_work_on_a_side_stream(ordering):
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        a = torch.randn(2048, 2048, device="cuda")
        for _ in range(6):
            a = (a @ a) / 2048
        t = pg.from_dlpack(a)  # torch orders its stream before ours
        with pg.device(GPU):
            r = pg.identity(t)
        want = a.cpu().numpy()
    np.testing.assert_array_equal(r.numpy(), want)


class _Recording:
    """A DLPack producer in front of `a` that records the consumer stream
    it is asked for."""

    def __init__(self, a):
        self.a, self.streams = a, []

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()

    def __dlpack__(self, stream=None, **kw):
        self.streams.append(stream)
        return self.a.__dlpack__(stream=stream, **kw)


@needs_torch
def test_pg_asks_for_the_legacy_stream_and_waits_for_default_stream_work(ordering):
    """The consumer stream pg.from_dlpack gives a CUDA producer is the legacy
    default stream (1), which PyTorch's default-stream work is already on;
    the device's stream is then ordered after it: slow products queued
    there just before are seen finished."""
    a = torch.randn(2048, 2048, device="cuda")
    for _ in range(6):
        a = (a @ a) / 2048
    p = _Recording(a)
    t = pg.from_dlpack(p)
    with pg.device(GPU):
        r = pg.identity(t)
    assert p.streams == [1]
    np.testing.assert_array_equal(r.numpy(), a.cpu().numpy())
    assert ordering(native_stream.STREAM_AFTER_NATIVE)


def test_order_native_is_offered_and_checks_its_stream():
    """The CUDA plugin's native-stream table is version 2 with order_native,
    which refuses the ambiguous stream 0 with a message (the caller then
    orders another way) and accepts a real handle."""
    dev = pg.get_device(GPU)
    fns = native_stream.plugin_fns(dev)
    assert fns.version >= 2 and native_stream.order_fn(dev) is not None
    why = native_stream.order(dev, 0, native_stream.NATIVE_AFTER_STREAM)
    assert why is not None and "ambiguous" in why
    assert native_stream.order(dev, 2, native_stream.STREAM_AFTER_NATIVE) is None
    assert native_stream.order(dev, 1, 7) is not None  # no such order


@needs_torch
def test_pg_imports_torch_in_place_and_writes_show_through():
    a = torch.arange(24, dtype=torch.float32, device="cuda").reshape(4, 6)
    t = pg.from_dlpack(a)
    assert t.device.endswith(GPU) and _address(t) == a.data_ptr()
    with pg.testing.expect_kernel("Mul", "GPU"):
        r = t * 2.0
    np.testing.assert_array_equal(r.numpy(), np.arange(24, dtype=np.float32).reshape(4, 6) * 2)
    a.fill_(5.0)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(t.numpy(), np.full((4, 6), 5.0, np.float32))


@needs_torch
def test_torch_writes_into_exported_pg_memory():
    x = _random((8,))
    with pg.device(GPU):
        t = pg.constant(x)
    tt = torch.from_dlpack(t)
    tt.add_(1.0)
    torch.cuda.synchronize()
    np.testing.assert_allclose(t.numpy(), x + 1.0)


@needs_torch
def test_lifetimes_across_the_exchange():
    x = _random((1 << 16,))
    with pg.device(GPU):
        t = pg.constant(x)
    tt = torch.from_dlpack(t)
    del t
    gc.collect()
    with pg.device(GPU):  # reuse of freed blocks must not touch torch's view
        junk = [pg.constant(np.zeros(1 << 16, np.float32)) for _ in range(8)]
    pg.synchronize()
    np.testing.assert_array_equal(tt.cpu().numpy(), x)
    del junk

    a = torch.arange(1 << 16, dtype=torch.int32, device="cuda")
    u = pg.from_dlpack(a)
    del a
    gc.collect()
    torch.cuda.empty_cache()
    b = [torch.full((1 << 16,), 7, dtype=torch.int32, device="cuda") for _ in range(8)]
    torch.cuda.synchronize()
    np.testing.assert_array_equal(u.numpy(), np.arange(1 << 16, dtype=np.int32))
    del b


@needs_torch
def test_import_calls_the_producer_deleter_once():
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    a = torch.ones(1 << 20, device="cuda")  # 4 MiB
    u = pg.from_dlpack(a)
    with pg.device(GPU):
        r = u + 1.0
    del a
    gc.collect()
    assert torch.cuda.memory_allocated() == before + (4 << 20)  # kept by the import
    np.testing.assert_array_equal(r.numpy(), np.full(1 << 20, 2.0, np.float32))
    del u
    gc.collect()
    assert torch.cuda.memory_allocated() == before  # the deleter ran


@needs_torch
def test_strided_torch_tensor_is_refused_with_a_typed_error():
    a = torch.arange(20, dtype=torch.float32, device="cuda").reshape(4, 5)[:, ::2]
    with pytest.raises(pg.errors.InvalidArgumentError, match="compact"):
        pg.from_dlpack(a)


@needs_torch
def test_round_trip_keeps_the_address():
    x = _random((33,))
    with pg.device(GPU):
        t = pg.constant(x)
    back = pg.from_dlpack(torch.from_dlpack(t))
    assert _address(back) == _address(t)
    np.testing.assert_array_equal(back.numpy(), x)


@needs_cupy
def test_cupy_both_ways_in_place():
    x = _random((12, 5))
    with pg.device(GPU):
        t = pg.constant(x)
    c = cp.from_dlpack(t)
    assert c.data.ptr == _address(t)
    np.testing.assert_array_equal(cp.asnumpy(c), x)

    d = cp.arange(30, dtype=cp.float32)
    u = pg.from_dlpack(d)
    assert _address(u) == d.data.ptr
    with pg.device(GPU):
        r = u * 3.0
    np.testing.assert_array_equal(r.numpy(), np.arange(30, dtype=np.float32) * 3)
    d.fill(2.0)
    cp.cuda.runtime.deviceSynchronize()
    np.testing.assert_array_equal(u.numpy(), np.full(30, 2.0, np.float32))


@needs_cupy
def test_cupy_waits_for_pg_work(ordering):
    x = _random((2048, 2048))
    t = _slow_product(x)
    c = cp.from_dlpack(t)
    np.testing.assert_array_equal(cp.asnumpy(c * 1), t.numpy())


def test_stream_zero_is_refused():
    with pg.device(GPU):
        t = pg.constant(np.ones(2, np.float32))
    with pytest.raises(pg.errors.InvalidArgumentError, match="ambiguous"):
        t.__dlpack__(stream=0)


def test_host_copy_of_a_gpu_tensor_on_request():
    x = _random((6,))
    with pg.device(GPU):
        t = pg.constant(x)
    np.testing.assert_array_equal(np.from_dlpack(t, device="cpu"), x)
    with pytest.raises(pg.errors.InvalidArgumentError, match="copy=False"):
        t.__dlpack__(max_version=(1, 0), dl_device=(1, 0), copy=False)


@needs_torch
def test_cuda_array_interface_shares_memory():
    x = _random((5, 7))
    with pg.device(GPU):
        t = pg.constant(x)
    iface = t.__cuda_array_interface__
    assert iface["version"] == 3 and iface["data"][0] == _address(t)
    assert iface["stream"] not in (None, 0)
    tt = torch.as_tensor(t, device="cuda")
    assert tt.data_ptr() == _address(t)
    np.testing.assert_array_equal(tt.cpu().numpy(), x)
    with pg.device(GPU):
        b = pg.constant(x.astype(pg.bfloat16.as_numpy_dtype))
    assert not hasattr(b, "__cuda_array_interface__")


@needs_torch
@pytest.mark.skipif(len(pg.list_physical_devices("GPU")) < 2, reason="needs 2 GPUs")
def test_exchanges_do_not_depend_on_the_callers_current_device(ordering):
    """The default-stream handles of DLPack (1, 2) name the stream of the
    tensor's device, and PyTorch exports with a stream only while the
    tensor's device is current: every exchange must work, in stream order,
    with either GPU current, and leave the caller's device current."""
    rt = cuda_python.cudart()
    if rt is None:
        pytest.skip("cuda-python is not installed")
    x = _random((2048, 2048))
    want = _slow_product(x).numpy()
    try:
        for current in (1, 0, 1):
            rt.cudaSetDevice(current)
            t = _slow_product(x)                       # on GPU:0
            tt = torch.from_dlpack(t)
            got = (tt * 1).cpu().numpy()               # torch's work on cuda:0
            np.testing.assert_array_equal(got, want)
            for ordinal in (0, 1):
                a = torch.arange(24, dtype=torch.float32, device=f"cuda:{ordinal}")
                b = pg.from_dlpack(a)
                assert b.device.endswith(f"GPU:{ordinal}") and _address(b) == a.data_ptr()
                np.testing.assert_array_equal(b.numpy(), np.arange(24, dtype=np.float32))
            assert int(rt.cudaGetDevice()[1]) == current
    finally:
        rt.cudaSetDevice(0)
