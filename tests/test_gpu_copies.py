"""Host<->device copies: the CUDA plugin's staged pageable copies, pinned
copies, the Fill kernel, and the copy stream of ``pg.copy_to_device_async``.

The GPU tests need an NVIDIA GPU and skip without one. The CUDA plugin
stages copies above 256 KiB from or to pageable memory through 4 MiB pinned
chunks (at most 16, reference_device/cuda/staging.h), so the sizes sit
around those boundaries, and one copy behind a busy stream needs more chunks
than there may be. The MY_DEVICE tests run
everywhere: they check that the paths every plugin shares keep their
behaviour (pg.constant never aliases the caller's array, copies are exact,
the copy stream orders its copies with events).
"""
from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

import numpy as np
import pytest

import pluggable as pg
from pluggable.runtime import trace

HAS_GPU = bool(pg.list_physical_devices("GPU"))
HAS_MY_DEVICE = bool(pg.list_physical_devices("MY_DEVICE"))
needs_gpu = pytest.mark.skipif(not HAS_GPU, reason="no GPU device present: these tests need "
                               "the CUDA reference plugin and an NVIDIA GPU")
needs_my_device = pytest.mark.skipif(not HAS_MY_DEVICE,
                                     reason="the MY_DEVICE reference plugin is not loaded")

KIB, MIB = 1 << 10, 1 << 20
THRESHOLD = 256 * KIB   # staging.h: kStageThreshold
CHUNK = 4 * MIB         # staging.h: kStageChunk
MAX_CHUNKS = 16         # cuda_common.h: kStagingMaxSlots
BYTE_SIZES = [0, 1, THRESHOLD - 1, THRESHOLD, THRESHOLD + 1, CHUNK - 1, CHUNK, CHUNK + 1,
              3 * CHUNK + 12345, 9 * CHUNK + 77]
DTYPES = [pg.bool, pg.int8, pg.uint8, pg.int16, pg.int32, pg.int64, pg.uint32, pg.uint64,
          pg.float16, pg.bfloat16, pg.float32, pg.float64]
# The CUDA plugin's Fill types (kernel_util.h: kAllTypes).
FILL_DTYPES = [pg.bool, pg.int8, pg.uint8, pg.int16, pg.int32, pg.int64, pg.float16,
               pg.bfloat16, pg.float32, pg.float64]


def _random_bytes(n: int) -> np.ndarray:
    return np.random.default_rng().integers(0, 256, size=n, dtype=np.uint8)


def _random(dtype: pg.DType, nbytes: int) -> np.ndarray:
    """Random values of `dtype` filling about `nbytes` (any bit pattern,
    NaNs included, except bool: 0 or 1)."""
    n = nbytes // dtype.size
    if dtype == pg.bool:
        return np.random.default_rng().integers(0, 2, size=n).astype(np.bool_)
    return _random_bytes(n * dtype.size).view(dtype.as_numpy_dtype)


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and bool(
        np.array_equal(a.view(np.uint8), b.view(np.uint8)))


# --------------------------------------------------------------------- GPU


@pytest.fixture(scope="module")
def gpu():
    return pg.get_device("GPU:0")


@pytest.fixture
def no_tf32():
    was = pg.config.tensor_float_32_execution_enabled()
    pg.config.enable_tensor_float_32_execution(False)
    yield
    pg.config.enable_tensor_float_32_execution(was)


@needs_gpu
@pytest.mark.parametrize("pinned", [False, True], ids=["pageable", "pinned"])
@pytest.mark.parametrize("nbytes", BYTE_SIZES)
def test_buffer_round_trip(gpu, nbytes, pinned):
    """H2D then D2H through a device buffer, synchronous and on a stream,
    bit for bit."""
    data = _random_bytes(nbytes)
    src = gpu.allocate_host(nbytes) if pinned else np.empty(nbytes, np.uint8)
    src[:] = data
    buf = gpu.allocate(nbytes)
    buf.copy_from_host(src)
    out = gpu.allocate_host(nbytes) if pinned else np.empty(nbytes, np.uint8)
    buf.copy_to_host(out)
    assert _same_bits(out, data)
    s = gpu.create_stream()
    src[:] = data[::-1]
    buf.copy_from_host(src, stream=s)
    out2 = gpu.allocate_host(nbytes) if pinned else np.full(nbytes, 7, np.uint8)
    buf.copy_to_host(out2, stream=s)
    s.synchronize()
    assert _same_bits(out2, data[::-1])


@needs_gpu
@pytest.mark.parametrize("nbytes", [THRESHOLD + 1, CHUNK + 1, 9 * CHUNK + 77])
def test_staged_copies_keep_their_promises(gpu, nbytes):
    """Above the threshold, an asynchronous H2D from pageable memory has read
    the source when it returns, and a D2H into pageable memory has written the
    destination when it returns (staging.h)."""
    data = _random_bytes(nbytes)
    src = data.copy()
    buf = gpu.allocate(nbytes)
    s = gpu.create_stream()
    buf.copy_from_host(src, stream=s)
    src[:] = 0  # before the stream is synchronised
    out = np.zeros(nbytes, np.uint8)
    buf.copy_to_host(out, stream=s)
    assert _same_bits(out, data)  # no synchronisation in between
    s.synchronize()


@needs_gpu
@pytest.mark.parametrize("pinned", [False, True], ids=["pageable", "pinned"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_tensor_round_trip_every_dtype(gpu, dtype, pinned):
    """pg.constant to the GPU and .numpy() back, bit for bit, around the
    staging boundaries, from pageable or page-locked arrays."""
    for nbytes in (0, dtype.size, THRESHOLD + dtype.size, CHUNK - dtype.size,
                   CHUNK + dtype.size, 3 * CHUNK + 5 * dtype.size):
        a = _random(dtype, nbytes)
        if pinned:
            h = gpu.allocate_host(a.nbytes).view(a.dtype)
            h[:] = a
            a = h
        with pg.device("GPU:0"):
            t = pg.constant(a)
        assert _same_bits(t.numpy(), a), (dtype.name, nbytes)


@needs_gpu
@pytest.mark.parametrize("pinned", [False, True], ids=["pageable", "pinned"])
def test_constant_may_reuse_its_source_at_once_behind_busy_work(gpu, pinned):
    """The CUDA plugin's host-copy extension (pluggable_host_copy.h): the
    core hands it the caller's array, and the array has been read when
    pg.constant returns, even with the copy queued behind long work and
    from page-locked memory (which a DMA would read later)."""
    rec = next(r for r in pg.plugins() if r.device_type == "GPU")
    assert rec.host_copy
    rng = np.random.default_rng()
    with pg.device("GPU:0"):
        big = pg.constant(rng.standard_normal((2048, 2048)).astype(np.float32))
        for nbytes in (4, THRESHOLD - 4, THRESHOLD + 4, MIB + 4, CHUNK + 4, 3 * CHUNK + 12):
            busy = big
            for _ in range(8):        # the stream is busy for a while
                busy = pg.matmul(busy, big)
            a = _random(pg.float32, nbytes)
            if pinned:
                h = gpu.allocate_host(a.nbytes).view(a.dtype)
                h[:] = a
                a = h
            want = a.copy()
            t = pg.constant(a)
            a[:] = np.float32(7.0)    # the caller reuses its memory at once
            assert _same_bits(t.numpy(), want), (nbytes, pinned)
            del busy


@needs_gpu
def test_interleaved_async_copies_on_two_streams(gpu):
    """Staged copies of two streams share the device's chunks: interleaved,
    each stream still gets its own data."""
    sizes = [CHUNK + 1, 3 * CHUNK + 12345, THRESHOLD + 3, 5 * CHUNK]
    s1, s2 = gpu.create_stream(), gpu.create_stream()
    work = []
    for n in sizes:
        for s in (s1, s2):
            data = _random_bytes(n)
            buf = gpu.allocate(n)
            buf.copy_from_host(data, stream=s)
            work.append((s, buf, data))
    outs = []
    for s, buf, data in work:
        out = np.empty(data.size, np.uint8)
        buf.copy_to_host(out, stream=s)
        outs.append(out)
    s1.synchronize()
    s2.synchronize()
    for (s, buf, data), out in zip(work, outs):
        assert _same_bits(out, data)


@needs_gpu
def test_copy_into_memory_a_kernel_still_reads_keeps_stream_order(no_tf32):
    """The caching allocator hands a freed block out again at once (stream
    order on the default stream): a staged copy into it must wait for the
    matmuls still reading its previous contents."""
    rng = np.random.default_rng()
    a = rng.standard_normal((2048, 2048)).astype(np.float32)   # 16 MiB: 4 chunks
    b = (rng.standard_normal((2048, 2048)) * 1000).astype(np.float32)
    with pg.device("GPU:0"):
        x = pg.constant(a)
        ys = [pg.matmul(x, x) for _ in range(4)]
        del x
        z = pg.constant(b)  # likely the block of x
    ref = a.astype(np.float64) @ a.astype(np.float64)
    for y in ys:
        np.testing.assert_allclose(y.numpy(), ref, rtol=1e-3, atol=1e-2)
    assert _same_bits(z.numpy(), b)


@needs_gpu
def test_read_back_right_after_upload_on_an_idle_gpu():
    """On an idle GPU each chunk's DMA is done before the next chunk is
    picked, so an upload leaves few chunks: a read-back of several chunks
    must still not reuse one it has not read out (it did: the first weight
    of a 1024-4096 layer came back wrong)."""
    for chunks in (2, 3, 4, 5, 9):
        data = _random_bytes(chunks * CHUNK + int(np.random.default_rng().integers(1, 4096)))
        with pg.device("GPU:0"):
            pg.synchronize()
            back = pg.constant(data).numpy()
        assert _same_bits(back, data), chunks


@needs_gpu
def test_copy_behind_a_busy_stream_needs_every_chunk(no_tf32):
    """A staged copy queued behind long work takes a new chunk for each busy
    one, up to the limit, then waits for the oldest: more data than all
    chunks hold still arrives whole, after the work ahead of it."""
    rng = np.random.default_rng()
    a = rng.standard_normal((4096, 4096)).astype(np.float32)
    big = _random_bytes((MAX_CHUNKS + 3) * CHUNK + 4321)
    with pg.device("GPU:0"):
        x = pg.constant(a)
        ys = [pg.matmul(x, x) for _ in range(6)]   # about 15 ms of queued work
        t = pg.constant(big)
        back = t.numpy()
    assert _same_bits(back, big)
    want = a[:4].astype(np.float64) @ a.astype(np.float64)
    for y in ys:
        np.testing.assert_allclose(y.numpy()[:4], want, rtol=1e-3, atol=1e-2)


@needs_gpu
@pytest.mark.parametrize("dtype", FILL_DTYPES, ids=lambda d: d.name)
def test_fill_matches_numpy(dtype):
    """Fill runs on the GPU for every type, with a host value passed by
    value and with a value computed on the GPU (read back first)."""
    rng = np.random.default_rng()
    value = _random(dtype, dtype.size).reshape(())
    if dtype.is_floating:
        value = np.asarray(rng.standard_normal() * 100, dtype.as_numpy_dtype)
    for n in (0, 1, 5, (1 << 20) + 3):
        with pg.device("GPU:0"), pg.testing.expect_kernel("Fill", "GPU"):
            host_value = pg.fill([n], value)
            device_value = pg.raw_ops.Fill(dims=np.array([n], np.int32),
                                           value=pg.constant(value))
        want = np.full(n, value, dtype.as_numpy_dtype)
        assert _same_bits(host_value.numpy(), want), (dtype.name, n)
        assert _same_bits(device_value.numpy(), want), (dtype.name, n)


@needs_gpu
def test_fill_with_a_host_value_copies_nothing():
    """pg.fill, pg.zeros and pg.ones with host values make no host-to-device
    copy: the value reaches the kernel as an argument."""
    spans = []
    with pg.device("GPU:0"):
        pg.fill([1 << 20], np.float32(3.5))  # first call: plan and kernel made
        trace.set_sink(lambda *span: spans.append(span))
        try:
            with pg.testing.expect_kernel("Fill", "GPU", min_calls=3):
                t = pg.fill([1 << 20], np.float32(-2.25))
                z = pg.zeros([1000], pg.bfloat16)
                o = pg.ones([3, 7], pg.int64)
        finally:
            trace.set_sink(None)
    copies = [s for s in spans if s[0] == "copy" and s[1] == "MemcpyH2D"]
    assert copies == []
    assert (t.numpy() == np.float32(-2.25)).all()
    assert (z.numpy().astype(np.float32) == 0).all() and (o.numpy() == 1).all()


@needs_gpu
@pytest.mark.parametrize("pinned", [False, True], ids=["pageable", "pinned"])
def test_copy_stream_prefetch_matches_numpy(gpu, pinned, no_tf32):
    """Batches copied on the copy stream while matmuls run on the default
    stream give numpy's results."""
    rng = np.random.default_rng()
    w = rng.standard_normal((512, 512)).astype(np.float32)
    batches = []
    for _ in range(6):
        b = rng.standard_normal((2048, 512)).astype(np.float32)   # 4 MiB
        if pinned:
            h = gpu.allocate_host(b.nbytes).view(np.float32).reshape(b.shape)
            h[:] = b
            b = h
        batches.append(b)
    expected = [b.astype(np.float64) @ w.astype(np.float64) for b in batches]
    with pg.device("GPU:0"):
        wt = pg.constant(w)
        nxt = pg.copy_to_device_async(batches[0])
        outs = []
        for i in range(len(batches)):
            x = nxt.result()
            if i + 1 < len(batches):
                nxt = pg.copy_to_device_async(batches[i + 1])
            outs.append(pg.matmul(x, wt))
    for got, want in zip(outs, expected):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-3)


# ------------------------------------------------------- no GPU needed

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_staging_logic_on_a_simulated_runtime(tmp_path):
    """The CUDA plugin's staged copies (staging.cu), built against a host-only
    stand-in of the CUDA runtime (tests/cuda_sim) with 16 KiB chunks: two
    host threads copy random sizes over four streams that run their work
    late; sources are read on return, destinations written on return, later
    work sees the data, pinned memory is not staged, and a consumed copy
    (the host-copy extension) has read its pageable or pinned source on
    return (staging_sim.cc)."""
    cxx = shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler (CXX, c++ or g++) to build the staging simulation")
    exe = tmp_path / "staging_sim"
    cmd = [cxx, "-std=c++17", "-O0", "-pthread", "-DPGCUDA_STAGE_THRESHOLD=1024",
           "-DPGCUDA_STAGE_CHUNK=16384", "-DPGCUDA_MIN_COPY_PART=2048",
           f"-I{ROOT / 'tests' / 'cuda_sim'}", f"-I{ROOT / 'c_api' / 'include'}",
           f"-I{ROOT / 'reference_device' / 'cuda'}",
           "-x", "c++", str(ROOT / "reference_device" / "cuda" / "staging.cu"),
           "-x", "c++", str(ROOT / "tests" / "cuda_sim" / "staging_sim.cc"), "-o", str(exe)]
    built = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-3000:]
    seed = int(np.random.default_rng().integers(1, 1 << 30))
    ran = subprocess.run([str(exe), "40", str(seed)], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PLUGGABLE_CUDA_COPY_THREADS": "3"})
    assert ran.returncode == 0 and "staging_sim: OK" in ran.stdout, (
        f"seed {seed}: {ran.stdout}{ran.stderr}")


# --------------------------------------------------------------- MY_DEVICE


@needs_my_device
@pytest.mark.parametrize("nbytes", [0, 1, THRESHOLD + 1, MIB, MIB + 1, CHUNK + 3])
def test_constant_never_aliases_the_callers_array(nbytes):
    """pg.constant on a device copies without an intermediate host copy, yet
    changing the array afterwards never changes the tensor (small copies
    are staged by the core, large ones finish before pg.constant returns)."""
    a = _random_bytes(nbytes)
    want = a.copy()
    with pg.device("MY_DEVICE:0"):
        t = pg.constant(a)
    with pg.device("CPU:0"):
        c = pg.constant(a)
    a[:] = ~a
    assert _same_bits(t.numpy(), want)
    assert _same_bits(c.numpy(), want)


@needs_my_device
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_my_device_round_trip_every_dtype(dtype):
    for nbytes in (dtype.size, THRESHOLD + dtype.size, CHUNK + dtype.size):
        a = _random(dtype, nbytes)
        with pg.device("MY_DEVICE:0"):
            t = pg.constant(a)
        assert _same_bits(t.numpy(), a), (dtype.name, nbytes)


@needs_my_device
def test_copy_stream_on_my_device_orders_copies_and_compute():
    rng = np.random.default_rng()
    w = rng.standard_normal((64, 64)).astype(np.float32)
    batches = [rng.standard_normal((128, 64)).astype(np.float32) for _ in range(5)]
    with pg.device("MY_DEVICE:0"):
        wt = pg.constant(w)
        nxt = pg.copy_to_device_async(batches[0])
        outs = []
        for i in range(len(batches)):
            x = nxt.result()
            assert x.device.endswith("MY_DEVICE:0") and x.shape == (128, 64)
            if i + 1 < len(batches):
                # a temporary: kept alive by the copy until it is done
                nxt = pg.copy_to_device_async(batches[i + 1].copy())
            outs.append(pg.matmul(x, wt))
    for got, b in zip(outs, batches):
        np.testing.assert_allclose(got.numpy(), b.astype(np.float64) @ w, rtol=1e-4, atol=1e-4)


@needs_my_device
def test_copy_stream_errors_and_edge_cases():
    p = pg.copy_to_device_async(np.zeros((0, 3), np.int8), "MY_DEVICE:0")
    t = p.result()
    assert t.numpy().shape == (0, 3) and t.dtype == pg.int8
    with pytest.raises(pg.errors.FailedPreconditionError, match="already called"):
        p.result()
    with pytest.raises(pg.errors.InvalidArgumentError, match="not a plugin device"):
        pg.copy_to_device_async(np.zeros(3), "CPU:0")
    with pytest.raises(pg.errors.InvalidArgumentError, match="no device given"):
        pg.copy_to_device_async(np.zeros(3))
    dropped = pg.copy_to_device_async(np.arange(10.0)[::2], "MY_DEVICE:0")  # strided
    del dropped  # freed unused: its memory waits for the copy
    q = pg.copy_to_device_async(np.arange(10.0)[::2], "MY_DEVICE:0")
    assert (q.result().numpy() == np.arange(10.0)[::2]).all()
