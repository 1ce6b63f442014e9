"""Runtime tests of the CUDA reference plugin (device type "GPU").

These exercise the plugin's stream executor through the low-level runtime
API: copies of many sizes in every direction, streams, events, timers, host
callbacks, fills, allocator statistics, error reporting, several GPUs, and
the float32 precision of MatMul. They need an NVIDIA GPU; without one the
whole module is skipped.
"""
from __future__ import annotations

import re
import time

import numpy as np
import pytest

import pluggable as pg

if not pg.list_physical_devices("GPU"):
    pytest.skip("no GPU device present: these tests need the CUDA reference plugin and an "
                "NVIDIA GPU", allow_module_level=True)

MIB = 1 << 20
GIB = 1 << 30
COPY_SIZES = [0, 1, 3, 4096, MIB + 7, 256 * MIB, GIB]


def _rng() -> np.random.Generator:
    return np.random.default_rng()


def _random_bytes(n: int) -> np.ndarray:
    return _rng().integers(0, 256, size=n, dtype=np.uint8)


def _equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.array_equal(a, b))


@pytest.fixture(scope="module")
def dev():
    return pg.get_device("GPU:0")


def _gpu_count() -> int:
    return len(pg.list_physical_devices("GPU"))


# --- device description ------------------------------------------------------

def test_device_description(dev):
    assert dev.device_type == "GPU"
    assert dev.platform_name == "CUDA"
    assert dev.vendor == "NVIDIA"
    assert dev.ordinal == 0
    assert dev.hardware_name
    assert re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.0", dev.pci_bus_id), dev.pci_bus_id
    assert dev.memory_bandwidth is not None and dev.memory_bandwidth > 1e9
    assert dev.gflops is not None and dev.gflops > 100


# --- copies --------------------------------------------------------------------

@pytest.mark.parametrize("size", COPY_SIZES, ids=lambda n: f"{n}B")
def test_sync_copies_round_trip(dev, size):
    src = _random_bytes(size)
    a = dev.allocate(size)
    b = dev.allocate(size)
    a.copy_from_host(src)
    dev.copy(b, a, size)
    out = np.zeros(size, np.uint8)
    if size:
        out[:] = ~src[:]  # anything that differs from src
    b.copy_to_host(out)
    assert _equal(out, src), f"synchronous round trip of {size} bytes differs"


@pytest.mark.parametrize("size", COPY_SIZES, ids=lambda n: f"{n}B")
def test_async_copies_round_trip(dev, size):
    src = _random_bytes(size)
    s = dev.create_stream()
    a = dev.allocate(size)
    b = dev.allocate(size)
    out = np.zeros(size, np.uint8)
    if size:
        out[:] = ~src[:]
    a.copy_from_host(src, stream=s)
    dev.copy(b, a, size, stream=s)
    b.copy_to_host(out, stream=s)
    s.synchronize()
    assert _equal(out, src), f"asynchronous round trip of {size} bytes differs"


def test_async_copies_from_pinned_memory(dev):
    size = 64 * MIB + 5
    pinned_src = dev.allocate_host(size)
    pinned_dst = dev.allocate_host(size)
    assert pinned_src.dtype == np.uint8 and pinned_src.nbytes == size
    pinned_src[:] = _random_bytes(size)
    pinned_dst[:] = 0
    s = dev.create_stream()
    buf = dev.allocate(size)
    buf.copy_from_host(pinned_src, stream=s)
    buf.copy_to_host(pinned_dst, stream=s)
    s.synchronize()
    assert _equal(pinned_dst, pinned_src)


# --- streams and events ---------------------------------------------------------

def test_event_orders_work_across_streams(dev):
    size = 256 * MIB
    src = _random_bytes(size)
    a = dev.allocate(size)
    mid = dev.allocate(size)
    dst = dev.allocate(size)
    a.copy_from_host(src)
    mid.zero()
    dst.zero()
    s1, s2 = dev.create_stream(), dev.create_stream()
    e = dev.create_event()
    # A slow host callback first, so that s2 would read `mid` too early
    # without the event.
    s1.host_callback(lambda: time.sleep(0.05))
    dev.copy(mid, a, size, stream=s1)
    s1.record(e)
    s2.wait(e)
    dev.copy(dst, mid, size, stream=s2)
    out = np.empty(size, np.uint8)
    dst.copy_to_host(out, stream=s2)
    s2.synchronize()
    s1.synchronize()
    assert _equal(out, src)


def test_stream_dependency_orders_work(dev):
    size = 64 * MIB
    src = _random_bytes(size)
    a, mid, dst = dev.allocate(size), dev.allocate(size), dev.allocate(size)
    a.copy_from_host(src)
    s1, s2 = dev.create_stream(), dev.create_stream()
    s1.host_callback(lambda: time.sleep(0.05))
    dev.copy(mid, a, size, stream=s1)
    s2.wait_stream(s1)
    dev.copy(dst, mid, size, stream=s2)
    out = np.empty(size, np.uint8)
    dst.copy_to_host(out, stream=s2)
    s2.synchronize()
    s1.synchronize()
    assert _equal(out, src)


def test_event_status_transitions(dev):
    s = dev.create_stream()
    e = dev.create_event()
    assert e.status() == "unknown"
    s.host_callback(lambda: time.sleep(0.2))
    s.record(e)
    assert e.status() in ("pending", "complete")
    e.synchronize()
    assert e.status() == "complete"
    s.synchronize()
    assert e.status() == "complete"


def test_unrecorded_event_cannot_be_waited_for(dev):
    e = dev.create_event()
    with pytest.raises(pg.errors.FailedPreconditionError):
        e.synchronize()


def test_host_callback_runs_in_stream_order(dev):
    s = dev.create_stream()
    seen = []
    size = 16 * MIB
    buf = dev.allocate(size)
    buf.memset(7, stream=s)
    s.host_callback(lambda: seen.append(1))
    buf.memset(9, stream=s)
    s.host_callback(lambda: seen.append(2))
    s.synchronize()
    assert seen == [1, 2]
    out = np.empty(size, np.uint8)
    buf.copy_to_host(out)
    assert (out == 9).all()


def test_timer_measures_a_known_delay(dev):
    s = dev.create_stream()
    tm = dev.create_timer()
    tm.start(s)
    s.host_callback(lambda: time.sleep(0.05))
    tm.stop(s)
    s.synchronize()
    ns = tm.nanoseconds()
    assert 40e6 <= ns < 2e9, f"timer measured {ns} ns for a 50 ms delay"


# --- fills ---------------------------------------------------------------------

@pytest.mark.parametrize("use_stream", [False, True], ids=["sync", "stream"])
def test_memset_memset32_zero(dev, use_stream):
    size = 3 * MIB + 12
    s = dev.create_stream() if use_stream else None
    buf = dev.allocate(size)
    out = np.empty(size, np.uint8)

    def read():
        if s is not None:
            s.synchronize()
        buf.copy_to_host(out)
        return out

    buf.memset(0xAB, stream=s)
    assert (read() == 0xAB).all()
    buf.memset32(0xDEADBEEF, stream=s)
    assert (read().view(np.uint32) == 0xDEADBEEF).all()
    buf.zero(stream=s)
    assert (read() == 0).all()
    # Partial fills leave the rest alone.
    buf.memset32(0x01020304, nbytes=12, stream=s)
    words = read().view(np.uint32)
    assert (words[:3] == 0x01020304).all() and (words[3:] == 0).all()
    buf.memset(0x5A, nbytes=5, stream=s)
    r = read()
    assert (r[:5] == 0x5A).all() and (r[12:] == 0).all()
    # Zero-size fills are no-ops.
    buf.memset(1, nbytes=0, stream=s)
    buf.memset32(1, nbytes=0, stream=s)
    buf.zero(nbytes=0, stream=s)
    assert (read()[12:] == 0).all()


def test_memset32_on_odd_word_offsets(dev):
    # Sizes around the kernel's 16-byte vector width.
    for words in (1, 2, 3, 4, 5, 7, 8, 9, 1023, 1025):
        buf = dev.allocate(words * 4 + 64)
        buf.zero()
        buf.memset32(0xCAFEF00D, nbytes=words * 4)
        out = np.empty(words * 4 + 64, np.uint8)
        buf.copy_to_host(out)
        w = out.view(np.uint32)
        assert (w[:words] == 0xCAFEF00D).all() and (w[words:] == 0).all(), words


# --- memory accounting ----------------------------------------------------------

def test_allocator_stats_and_memory_usage(dev):
    free, total = dev.memory_usage()
    assert 0 < free <= total
    dev.synchronize()
    dev.empty_cache()
    before = dev.allocator_stats()
    assert before is not None
    n = 64 * MIB + 4096
    buf = dev.allocate(n)
    during = dev.allocator_stats()
    assert during["bytes_in_use"] >= before["bytes_in_use"] + n
    assert during["peak_bytes_in_use"] >= during["bytes_in_use"]
    assert during["largest_alloc_size"] >= n
    assert during["num_allocs"] > before["num_allocs"]
    if during["bytes_limit"] is not None:
        assert during["bytes_limit"] >= during["bytes_in_use"]
    del buf
    dev.synchronize()
    dev.empty_cache()
    after = dev.allocator_stats()
    assert after["bytes_in_use"] <= during["bytes_in_use"] - n
    free2, total2 = dev.memory_usage()
    assert total2 == total and 0 < free2 <= total2


# --- errors ----------------------------------------------------------------------

def test_huge_allocation_raises_resource_exhausted(dev):
    n = 1 << 50
    with pytest.raises(pg.errors.ResourceExhaustedError) as info:
        dev.allocate(n)
    assert str(n) in str(info.value)
    # The failure is not sticky: the device keeps working.
    src = _random_bytes(4099)
    buf = dev.allocate(src.nbytes)
    buf.copy_from_host(src)
    out = np.empty_like(src)
    buf.copy_to_host(out)
    assert _equal(out, src)


def test_check_numerics_nan_raises_at_sync():
    with pg.device("GPU:0"):
        x = pg.constant(np.array([1.0, np.nan, 3.0], np.float32))
        with pg.testing.expect_kernel("CheckNumerics", "GPU"):
            pg.raw_ops.CheckNumerics(tensor=x, message="my check")
        with pytest.raises(pg.errors.InvalidArgumentError,
                           match=r"CheckNumerics on GPU:0: my check : Tensor had NaN values"):
            pg.synchronize()
        # The error was reported once; the device works again.
        y = pg.raw_ops.AddV2(x=pg.constant(np.float32([1, 2])), y=pg.constant(np.float32([3, 4])))
        np.testing.assert_array_equal(y.numpy(), np.float32([4, 6]))


def test_check_numerics_inf_and_clean_input():
    with pg.device("GPU:0"):
        ok = pg.raw_ops.CheckNumerics(tensor=pg.constant(np.float32([1, 2, 3])), message="m")
        np.testing.assert_array_equal(ok.numpy(), np.float32([1, 2, 3]))
        pg.raw_ops.CheckNumerics(tensor=pg.constant(np.float32([1, np.inf])), message="m")
        with pytest.raises(pg.errors.InvalidArgumentError, match="Tensor had Inf values"):
            pg.synchronize()


# --- several GPUs ------------------------------------------------------------------

def test_second_gpu_ops_and_cross_device_copies():
    if _gpu_count() < 2:
        pytest.skip("needs 2 GPUs")
    d0, d1 = pg.get_device("GPU:0"), pg.get_device("GPU:1")
    assert d1.ordinal == 1
    a = np.arange(1000, dtype=np.float32)
    with pg.device("GPU:1"):
        with pg.testing.expect_kernel("AddV2", "GPU"):
            y = pg.raw_ops.AddV2(x=pg.constant(a), y=pg.constant(a))
        assert "GPU:1" in y.device
    np.testing.assert_array_equal(y.numpy(), a + a)
    size = 32 * MIB + 3
    src = _random_bytes(size)
    b0, b1, back = d0.allocate(size), d1.allocate(size), d0.allocate(size)
    b0.copy_from_host(src)
    d1.copy(b1, b0, size)          # GPU:0 -> GPU:1
    d0.copy(back, b1, size)        # GPU:1 -> GPU:0
    out = np.empty(size, np.uint8)
    back.copy_to_host(out)
    assert _equal(out, src)
    mid = np.empty(size, np.uint8)
    b1.copy_to_host(mid)
    assert _equal(mid, src)


# --- MatMul precision --------------------------------------------------------------

def _matmul_rel_error(n: int = 1024) -> float:
    rng = _rng()
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    with pg.device("GPU:0"):
        with pg.testing.expect_kernel("MatMul", "GPU"):
            got = pg.raw_ops.MatMul(a=pg.constant(a), b=pg.constant(b)).numpy()
    return float(np.abs(got.astype(np.float64) - ref).max() / np.abs(ref).max())


def test_matmul_float32_is_exact_by_default():
    pg.config.enable_tensor_float_32_execution(False)
    err = _matmul_rel_error()
    assert err < 1e-5, f"float32 MatMul relative error {err} (TF32 used?)"


def test_matmul_float32_with_tf32_enabled():
    pg.config.enable_tensor_float_32_execution(True)
    try:
        err = _matmul_rel_error()
    finally:
        pg.config.enable_tensor_float_32_execution(False)
    assert err < 5e-3, f"TF32 MatMul relative error {err}"


# --- kernel paths of the CUDA plugin -------------------------------------------
# Shapes chosen to reach each launch path of the CUDA kernels (warp / block /
# split row reductions, column reductions, the transpose fallback, the block
# softmax, general broadcasting, the tiled transposes, vector tails).

def _gpu(op: str, **kwargs):
    with pg.device("GPU:0"):
        args = {k: (pg.constant(v) if isinstance(v, np.ndarray) else v)
                for k, v in kwargs.items()}
        with pg.testing.expect_kernel(op, "GPU"):
            return getattr(pg.raw_ops, op)(**args).numpy()


REDUCE_CASES = [
    ((1000, 37), [1]),          # warp per row
    ((300_000, 5), [1]),        # thread per row
    ((600, 3000), [1]),         # block per row
    ((3, 400_001), [1]),        # rows split over blocks
    ((3, 2500), [1]),           # few rows of <= 4096 elements: one block each
    ((64, 64), [0, 1]),         # a small full reduction: one block
    ((4_000_003,), [0]),        # full reduction, split
    ((100_000, 3), [0]),        # column reduction
    ((5, 7001, 33), [1]),       # [outer, reduce, inner], reduced axis split
    ((3, 100, 4000), [1]),      # [outer, reduce, inner], many outputs
    ((2, 3000, 5), [1]),        # [outer, reduce, inner], short reduced axis
    ((6, 5, 40, 3), [0, 2]),    # non-adjacent axes: transpose first
    ((4, 1, 9, 1), [1, 3]),     # only size-1 axes
]


@pytest.mark.parametrize("shape,axes", REDUCE_CASES, ids=lambda v: str(v))
@pytest.mark.parametrize("op", ["Sum", "Mean", "Max", "Min"])
def test_reduction_paths(op, shape, axes):
    x = _rng().standard_normal(shape).astype(np.float32)
    ref = {"Sum": np.sum, "Mean": np.mean, "Max": np.max, "Min": np.min}[op](
        x.astype(np.float64), axis=tuple(axes), keepdims=True)
    got = _gpu(op, input=x, reduction_indices=np.int32(axes), keep_dims=True)
    assert got.shape == ref.shape
    scale = np.sqrt(np.prod([shape[a] for a in axes])) if op in ("Sum", "Mean") else 1.0
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * scale)


@pytest.mark.parametrize("shape,axes", REDUCE_CASES[:11], ids=lambda v: str(v))
def test_reduction_paths_int_and_half(shape, axes):
    xi = _rng().integers(-1000, 1000, shape).astype(np.int32)
    got = _gpu("Sum", input=xi, reduction_indices=np.int64(axes))
    np.testing.assert_array_equal(got, xi.sum(axis=tuple(axes), dtype=np.int64).astype(np.int32))
    got = _gpu("Mean", input=xi, reduction_indices=np.int32(axes))
    s = xi.astype(np.int64).sum(axis=tuple(axes))
    cnt = np.prod([shape[a] for a in axes])
    np.testing.assert_array_equal(got, (np.sign(s) * (np.abs(s) // cnt)).astype(np.int32))
    xh = _rng().standard_normal(shape).astype(np.float16)
    got = _gpu("Max", input=xh, reduction_indices=np.int32(axes))
    np.testing.assert_array_equal(got, xh.max(axis=tuple(axes)))


def test_reduction_over_empty_axis():
    x = np.zeros((3, 0), np.float32)
    ax = np.int32([1])
    np.testing.assert_array_equal(_gpu("Sum", input=x, reduction_indices=ax), np.zeros(3, np.float32))
    assert np.isnan(_gpu("Mean", input=x, reduction_indices=ax)).all()
    assert (_gpu("Max", input=x, reduction_indices=ax) == -np.inf).all()
    assert (_gpu("Min", input=x, reduction_indices=ax) == np.inf).all()
    xi = np.zeros((2, 0), np.int32)
    np.testing.assert_array_equal(_gpu("Mean", input=xi, reduction_indices=ax), np.zeros(2, np.int32))
    np.testing.assert_array_equal(_gpu("Max", input=xi, reduction_indices=ax),
                                  np.full(2, np.iinfo(np.int32).min, np.int32))


# float32 rows of a multiple of 4 up to 1024 take the float4 warp kernel
# (100, 132, 300, 600, 1024); the others the scalar warp or block kernels.
@pytest.mark.parametrize("cols", [1, 31, 33, 100, 129, 132, 300, 600, 1024, 1025, 5000, 9000])
@pytest.mark.parametrize("dt", [np.float32, np.float16], ids=lambda d: np.dtype(d).name)
def test_softmax_row_lengths(cols, dt):
    x = (_rng().standard_normal((67, cols)) * 4).astype(dt)
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(-1, keepdims=True))
    ref = e / e.sum(-1, keepdims=True)
    got = _gpu("Softmax", logits=x)
    tol = 1e-5 if dt == np.float32 else 2e-3
    np.testing.assert_allclose(got.astype(np.float64), ref, rtol=tol, atol=tol)
    log_ref = x64 - x64.max(-1, keepdims=True) - np.log(e.sum(-1, keepdims=True))
    got = _gpu("LogSoftmax", logits=x)
    np.testing.assert_allclose(got.astype(np.float64), log_ref, rtol=tol, atol=tol * 4)


@pytest.mark.parametrize("sa,sb", [((4, 1, 6), (1, 5, 1)), ((2, 3, 4, 5), (3, 1, 5)),
                                   ((7, 1), (7, 9)), ((1,), (1_000_003,)),
                                   ((300, 1000), (1000,)), ((3, 1, 5000), (1, 4, 1)),
                                   ((513, 1), (1, 2049)), ((2, 1, 3, 1, 130), (5, 1, 4, 130)),
                                   ((1_000_003,), ()), ((3, 1, 2, 1, 2, 1, 2, 1, 2),
                                                        (1, 2, 1, 2, 1, 2, 1, 2, 1))])
@pytest.mark.parametrize("dt", [np.float32, np.float16, np.int64], ids=lambda d: np.dtype(d).name)
def test_broadcast_paths(sa, sb, dt):
    a = (_rng().standard_normal(sa) * 10).astype(dt)
    b = (_rng().standard_normal(sb) * 10).astype(dt)
    np.testing.assert_array_equal(_gpu("Sub", x=a, y=b), a - b)
    np.testing.assert_array_equal(_gpu("Maximum", x=a, y=b), np.maximum(a, b))


def test_elementwise_vector_tails():
    for n in (1, 2, 7, 8, 9, 15, 16, 17, 4095, 4097):
        for dt in (np.float16, np.float32, np.float64, np.int32):
            a = (_rng().standard_normal(n) * 5).astype(dt)
            b = (_rng().standard_normal(n) * 5).astype(dt)
            np.testing.assert_array_equal(_gpu("Mul", x=a, y=b), a * b)
            np.testing.assert_array_equal(_gpu("Abs", x=a), np.abs(a))
            np.testing.assert_array_equal(_gpu("Cast", x=a, DstT=pg.float64), a.astype(np.float64))
            np.testing.assert_array_equal(_gpu("Cast", x=a, DstT=pg.int8),
                                          np.clip(np.trunc(a.astype(np.float64)), -128, 127)
                                          .astype(np.int8))


# Aligned unary ops take 16-byte vectors (V = 8, 4, 2 elements) in chunks of
# 256 per block of 128 threads where the data fit in L2, of 128 beyond it:
# sizes on both sides of a chunk's edge, a last block with only its first
# vector, elements after the last vector, and 2**24 + 3 elements (64-256 MiB
# moved, more than an H100's or H200's L2).
@pytest.mark.parametrize("dt", [np.float16, np.float32, np.float64],
                         ids=lambda d: np.dtype(d).name)
def test_unary_chunks_and_their_edges(dt):
    v = 16 // np.dtype(dt).itemsize
    for n in (128 * v - 1, 128 * v + 1, 256 * v - 1, 256 * v, 256 * v + 1, 384 * v,
              384 * v + v - 1, 100_003, 2**24 + 3):
        x = _rng().standard_normal(n).astype(dt)
        np.testing.assert_array_equal(_gpu("Neg", x=x), -x)
        rtol = {np.float16: 2e-3, np.float32: 2e-6, np.float64: 1e-14}[dt]
        np.testing.assert_allclose(_gpu("Exp", x=x), np.exp(x.astype(np.float64)).astype(dt),
                                   rtol=rtol)


def test_unary_op_past_32_bit_indices():
    """2**31 + 17 one-byte elements: the chunk kernel's 64-bit indices."""
    n = 2**31 + 17
    x = np.zeros(n, np.bool_)
    x[::3] = True
    x[-17:] = _rng().integers(0, 2, 17).astype(np.bool_)
    got = _gpu("LogicalNot", x=x)
    np.testing.assert_array_equal(got, ~x)


def test_int_division_edge_cases():
    for dt in (np.int32, np.int64):
        info = np.iinfo(dt)
        a = np.array([7, -7, 7, -7, 5, info.min, info.min, 3], dt)
        b = np.array([2, 2, -2, -2, 0, -1, 1, 0], dt)
        want = np.array([3, -3, -3, 3, 0, info.min, info.min, 0], dt)
        np.testing.assert_array_equal(_gpu("RealDiv", x=a, y=b), want)


def test_cast_clamps_and_maps_nan_to_zero():
    x = np.array([np.nan, np.inf, -np.inf, 3e9, -3e9, 2.7, -2.7, 0.0], np.float32)
    i32 = np.iinfo(np.int32)
    np.testing.assert_array_equal(
        _gpu("Cast", x=x, DstT=pg.int32),
        np.array([0, i32.max, i32.min, i32.max, i32.min, 2, -2, 0], np.int32))
    np.testing.assert_array_equal(
        _gpu("Cast", x=x, DstT=pg.int8), np.array([0, 127, -128, 127, -128, 2, -2, 0], np.int8))
    np.testing.assert_array_equal(
        _gpu("Cast", x=x, DstT=pg.uint8), np.array([0, 255, 0, 255, 0, 2, 0, 0], np.uint8))
    np.testing.assert_array_equal(
        _gpu("Cast", x=x, DstT=pg.bool), np.array([1, 1, 1, 1, 1, 1, 1, 0], bool))
    i64 = np.iinfo(np.int64)
    np.testing.assert_array_equal(
        _gpu("Cast", x=np.array([1e19, -1e19, 9.2e18], np.float64), DstT=pg.int64),
        np.array([i64.max, i64.min, 9200000000000000000], np.int64))


@pytest.mark.parametrize("shape,perm", [((1025, 513), (1, 0)), ((3, 100, 67), (0, 2, 1)),
                                        ((4, 5, 6, 7), (0, 2, 3, 1)), ((2, 3, 4, 5, 6), (4, 2, 0, 3, 1)),
                                        ((1, 70, 1, 90), (3, 1, 2, 0)), ((8, 9), (0, 1))])
@pytest.mark.parametrize("dt", [np.int8, np.float16, np.float32, np.int64],
                         ids=lambda d: np.dtype(d).name)
def test_transpose_paths(shape, perm, dt):
    x = (_rng().standard_normal(shape) * 50).astype(dt)
    got = _gpu("Transpose", x=x, perm=np.int32(perm))
    np.testing.assert_array_equal(got, np.transpose(x, perm))


@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
def test_int_matmul_odd_sizes(ta, tb):
    rng = _rng()
    m, k, n = 37, 53, 29
    a = rng.integers(-50, 50, (k, m) if ta else (m, k)).astype(np.int64)
    b = rng.integers(-50, 50, (n, k) if tb else (k, n)).astype(np.int64)
    want = (a.T if ta else a) @ (b.T if tb else b)
    got = _gpu("MatMul", a=a, b=b, transpose_a=ta, transpose_b=tb)
    np.testing.assert_array_equal(got, want)
    got32 = _gpu("MatMul", a=a.astype(np.int32), b=b.astype(np.int32), transpose_a=ta,
                 transpose_b=tb)
    np.testing.assert_array_equal(got32, want.astype(np.int32))


def test_conv2d_asymmetric_stride_and_dilation():
    rng = _rng()
    x = rng.standard_normal((2, 9, 11, 6)).astype(np.float32)
    f = rng.standard_normal((3, 3, 6, 9)).astype(np.float32)
    got = _gpu("Conv2D", input=x, filter=f, strides=[1, 2, 1, 1], padding="SAME",
               dilations=[1, 1, 2, 1])
    # Reference: SAME padding with stride (2, 1), dilation (1, 2).
    kh, kw, dh, dw, sh, sw = 3, 3, 1, 2, 2, 1
    oh, ow = -(-9 // sh), -(-11 // sw)
    ph = max((oh - 1) * sh + (kh - 1) * dh + 1 - 9, 0)
    pw = max((ow - 1) * sw + (kw - 1) * dw + 1 - 11, 0)
    xp = np.pad(x.astype(np.float64),
                ((0, 0), (ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2), (0, 0)))
    ref = np.zeros((2, oh, ow, 9))
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, i * dh: i * dh + (oh - 1) * sh + 1: sh,
                       j * dw: j * dw + (ow - 1) * sw + 1: sw, :]
            ref += patch @ f[i, j]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-4)


def _conv_ref(x, f, strides, padding, dil, pads=None):
    """Conv2D (NHWC, HWIO) in float64."""
    n, h, w, _ = x.shape
    kh, kw, _, oc = f.shape
    (sh, sw), (dh, dw) = strides, dil
    eh, ew = (kh - 1) * dh + 1, (kw - 1) * dw + 1
    if padding == "SAME":
        oh, ow = -(-h // sh), -(-w // sw)
        ph, pw = max((oh - 1) * sh + eh - h, 0), max((ow - 1) * sw + ew - w, 0)
        pads = (ph // 2, ph - ph // 2, pw // 2, pw - pw // 2)
    elif padding == "VALID":
        pads = (0, 0, 0, 0)
    xp = np.pad(x.astype(np.float64), ((0, 0), pads[:2], pads[2:], (0, 0)))
    oh = (xp.shape[1] - eh) // sh + 1
    ow = (xp.shape[2] - ew) // sw + 1
    ref = np.zeros((n, oh, ow, oc))
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, i * dh: i * dh + (oh - 1) * sh + 1: sh,
                       j * dw: j * dw + (ow - 1) * sw + 1: sw, :]
            ref += patch @ f[i, j]
    return ref


# (input, filter, strides, padding, dilations, explicit pads, dtype). cuDNN
# takes all but float64 and the last two, which need more padding after than
# before (the own kernels run those).
CONV_CASES = [
    ((2, 9, 11, 6), (3, 3, 6, 9), (1, 1), "SAME", (1, 1), None, "float32"),
    ((2, 9, 11, 6), (3, 3, 6, 9), (2, 2), "SAME", (1, 1), None, "float32"),
    ((2, 12, 10, 5), (3, 2, 5, 7), (1, 2), "VALID", (2, 1), None, "float32"),
    ((2, 10, 9, 8), (3, 3, 8, 6), (1, 1), "SAME", (2, 2), None, "float32"),
    ((1, 7, 7, 4), (3, 3, 4, 5), (1, 1), "EXPLICIT", (1, 1), (2, 2, 1, 1), "float32"),
    ((2, 9, 11, 6), (3, 3, 6, 9), (1, 1), "SAME", (1, 1), None, "float16"),
    ((4, 16, 16, 32), (1, 1, 32, 64), (1, 1), "VALID", (1, 1), None, "float64"),  # own
    ((2, 8, 8, 3), (3, 3, 3, 4), (2, 2), "SAME", (1, 1), None, "float32"),     # pads 0, 1
    ((1, 6, 6, 2), (2, 2, 2, 3), (1, 1), "SAME", (1, 1), None, "float32"),     # pads 0, 1
]

_CONV_CHILD = r"""
import sys, numpy as np, pluggable as pg
sys.path.insert(0, sys.argv[1])
from test_gpu_runtime import CONV_CASES
data = np.load(sys.argv[2])
out = {}
with pg.device("GPU:0"):
    for i, (xs, fs, st, pad, dil, pads, dt) in enumerate(CONV_CASES):
        kw = dict(strides=[1, *st, 1], padding=pad, dilations=[1, *dil, 1])
        if pads:
            kw["explicit_paddings"] = [0, 0, pads[0], pads[1], pads[2], pads[3], 0, 0]
        try:
            with pg.testing.expect_kernel("Conv2D", "GPU"):
                y = pg.raw_ops.Conv2D(input=pg.constant(data[f"x{i}"]),
                                      filter=pg.constant(data[f"f{i}"]), **kw)
            out[f"y{i}"] = y.numpy()
        except pg.errors.FailedPreconditionError as e:
            out[f"e{i}"] = np.array(str(e))
np.savez(sys.argv[3], **out)
"""
# Which of CONV_CASES cuDNN takes (the others run the own kernels).
_CUDNN_TAKES = [True] * 6 + [False] * 3


def _conv_child(tmp_path, env: dict) -> tuple[dict, dict]:
    import os
    import pathlib
    import subprocess
    import sys
    rng = _rng()
    data = {}
    for i, (xs, fs, *_rest, dt) in enumerate(CONV_CASES):
        data[f"x{i}"] = rng.standard_normal(xs).astype(dt)
        data[f"f{i}"] = (rng.standard_normal(fs) / np.sqrt(np.prod(fs[:3]))).astype(dt)
    np.savez(tmp_path / "in.npz", **data)
    proc = subprocess.run([sys.executable, "-c", _CONV_CHILD, str(pathlib.Path(__file__).parent),
                           str(tmp_path / "in.npz"), str(tmp_path / "out.npz")],
                          env=dict(os.environ, **env), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return data, dict(np.load(tmp_path / "out.npz"))


def _check_conv(data: dict, got: dict, i: int, what: str) -> None:
    xs, fs, st, pad, dil, pads, dt = CONV_CASES[i]
    ref = _conv_ref(data[f"x{i}"], data[f"f{i}"].astype(np.float64), st, pad, dil, pads)
    tol = {"float16": 2e-2, "float32": 1e-4, "float64": 1e-10}[dt]
    np.testing.assert_allclose(got[f"y{i}"].astype(np.float64), ref, rtol=tol, atol=tol,
                               err_msg=f"case {i} {CONV_CASES[i]} {what}")


@pytest.mark.parametrize("mode", ["1", "0"], ids=["cudnn-required", "own-kernels"])
def test_conv2d_through_cudnn_and_own_kernels(tmp_path, mode):
    """Every case against numpy, in a process where cuDNN must take the
    convolutions it can (PLUGGABLE_CUDNN=1) and in one where it is off."""
    import os
    from pluggable.plugins import cuda_env
    if mode == "1" and not (os.environ.get("PLUGGABLE_CUDNN_LIBRARY")
                            or cuda_env.locate("libcudnn")):
        pytest.skip("cuDNN (libcudnn.so.9) is not installed: pip install nvidia-cudnn-cu13")
    data, got = _conv_child(tmp_path, {"PLUGGABLE_CUDNN": mode})
    for i in range(len(CONV_CASES)):
        _check_conv(data, got, i, f"PLUGGABLE_CUDNN={mode}")


def test_conv2d_takes_cudnn_exactly_where_it_can(tmp_path):
    """With cuDNN required but not loadable, the convolutions cuDNN would
    take fail with a typed error naming cuDNN, and the others (float64, more
    padding after than before) still run on the own kernels: so the cases
    above ran where this says."""
    data, got = _conv_child(tmp_path, {"PLUGGABLE_CUDNN": "1",
                                       "PLUGGABLE_CUDNN_LIBRARY": str(tmp_path / "none.so.9")})
    for i, takes in enumerate(_CUDNN_TAKES):
        if takes:
            assert f"e{i}" in got, f"case {i} ran without cuDNN"
            msg = str(got[f"e{i}"])
            assert "cuDNN could not be loaded" in msg and "PLUGGABLE_CUDNN_LIBRARY" in msg, msg
        else:
            _check_conv(data, got, i, "own kernels")


def test_fill_odd_lengths_and_types():
    with pg.device("CPU:0"):
        dims = pg.constant(np.int64([1_000_003]))
    for dt, v in ((np.int8, -3), (np.float16, 1.5), (np.int64, 1 << 40), (np.bool_, True)):
        with pg.device("GPU:0"):
            with pg.testing.expect_kernel("Fill", "GPU"):
                out = pg.raw_ops.Fill(dims=dims, value=pg.constant(np.array(v, dt))).numpy()
        assert out.shape == (1_000_003,) and (out == np.array(v, dt)).all(), dt
