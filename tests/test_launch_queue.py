"""The CUDA plugin's launch queue (reference_device/cuda/launch_queue.h).

The queue's logic runs everywhere against the host-only stand-in of the CUDA
runtime (tests/cuda_sim/launch_sim.cc). On a GPU: elementwise kernels are
queued and issued by the plugin's launcher thread (and so are the event records
after direct launches while it is awake), and everything that looks
at their results afterwards (reads, kernels that launch themselves,
synchronisation, DLPack and ``__cuda_array_interface__`` consumers, several
threads) sees them done, against numpy; with PLUGGABLE_CUDA_LAUNCH_THREAD=0
nothing is queued and the numbers are the same.
"""
from __future__ import annotations

import ctypes
import functools
import gc
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import pluggable as pg

ROOT = pathlib.Path(__file__).resolve().parents[1]

needs_gpu = pytest.mark.skipif(
    not pg.list_physical_devices("GPU"),
    reason="no GPU device present: needs the CUDA reference plugin and an NVIDIA GPU")


def test_queue_logic_on_a_simulated_runtime(tmp_path):
    """Order across pushing threads, flushes, the launcher's sleep and
    wake-up, queued event records, failed launches, a full queue and the
    queue's destruction (launch_sim.cc), under the thread sanitizer where the
    compiler has it."""
    cxx = shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler (CXX, c++ or g++) to build the simulation")
    base = [cxx, "-std=c++17", "-O1", "-g", "-pthread", f"-I{ROOT}/tests/cuda_sim",
            f"-I{ROOT}/c_api/include", f"-I{ROOT}/reference_device/cuda",
            "-x", "c++", f"{ROOT}/reference_device/cuda/launch_queue.cu",
            "-x", "c++", f"{ROOT}/tests/cuda_sim/launch_sim.cc"]
    runs = 0
    for extra in ([], ["-fsanitize=thread"]):
        exe = tmp_path / ("launch_sim" + "".join(extra).replace("-fsanitize=", "_"))
        built = subprocess.run(base + extra + ["-o", str(exe)], capture_output=True, text=True,
                               timeout=300)
        if built.returncode != 0 and extra:
            continue  # no thread sanitizer runtime with this compiler
        assert built.returncode == 0, built.stderr[-3000:]
        # Without LD_PRELOAD: under the sanitizer CI job it holds AddressSanitizer's
        # runtime, which cannot share a process with the thread sanitizer's.
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
        ran = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120,
                             env={**env, "TSAN_OPTIONS": "halt_on_error=1"})
        assert ran.returncode == 0 and "launch_sim: OK" in ran.stdout, ran.stdout + ran.stderr
        assert "WARNING: ThreadSanitizer" not in ran.stderr, ran.stderr[-3000:]
        runs += 1
    assert runs >= 1


# ------------------------------------------------------------------ on a GPU

@functools.lru_cache(maxsize=None)
def _plugin_lib() -> ctypes.CDLL:
    rec = next(r for r in pg.plugins() if r.path.endswith("libpluggable_cuda.so"))
    lib = ctypes.CDLL(rec.path)  # the loaded library: the same handle
    lib.PG_CudaLaunchQueueStats.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_uint64)]
    lib.PG_CudaLaunchQueueStats.restype = ctypes.c_int
    lib.PG_CudaLaunchQueueAwake.argtypes = [ctypes.c_int]
    lib.PG_CudaLaunchQueueAwake.restype = ctypes.c_int
    return lib


def _wait_awake(ordinal: int = 0, timeout: float = 1.0) -> bool:
    """Waits until the launcher runs (after a push woke it); False if it
    did not within `timeout` seconds."""
    lib = _plugin_lib()
    end = time.monotonic() + timeout
    while lib.PG_CudaLaunchQueueAwake(ordinal) != 1:
        if time.monotonic() > end:
            return False
        time.sleep(0.00002)
    return True


def _stats(ordinal: int = 0) -> dict | None:
    out = (ctypes.c_uint64 * 5)()
    if not _plugin_lib().PG_CudaLaunchQueueStats(ordinal, out):
        return None
    return dict(zip(("queued", "by_launcher", "by_flush", "wakes", "failed"), out))


def _delta(before: dict, after: dict) -> dict:
    return {k: after[k] - before[k] for k in before}


def _chain(x, b, steps: int):
    """x -> relu(x * 0.5 + b) - 0.25, `steps` times (queued kernels only)."""
    for _ in range(steps):
        x = pg.raw_ops.Sub(x=pg.raw_ops.Relu(features=pg.raw_ops.AddV2(
            x=pg.raw_ops.Mul(x=x, y=pg.constant(np.float32(0.5))), y=b)),
            y=pg.constant(np.float32(0.25)))
    return x


def _chain_np(x, b, steps: int):
    for _ in range(steps):
        x = np.maximum(x * np.float32(0.5) + b, np.float32(0)) - np.float32(0.25)
    return x


@needs_gpu
def test_elementwise_kernels_are_queued_and_issued_by_the_launcher():
    rng = np.random.default_rng()
    n = int(rng.integers(1, 5000))
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    before = _stats()
    assert before is not None, "the GPU has no launch queue (PLUGGABLE_CUDA_LAUNCH_THREAD?)"
    with pg.device("GPU:0"):
        x, y = pg.constant(a), pg.constant(b)
        with pg.testing.expect_kernel("Relu", "GPU", 500):
            out = _chain(x, y, 500)
        got = out.numpy()
    d = _delta(before, _stats())
    np.testing.assert_allclose(got, _chain_np(a, b, 500), rtol=1e-5, atol=1e-6)
    assert d["queued"] >= 4 * 500, d  # 4 kernels a step and their event records
    assert d["by_launcher"] > 0, d   # most are issued off the calling thread
    assert d["queued"] == d["by_launcher"] + d["by_flush"], d
    assert d["failed"] == 0, d


@needs_gpu
def test_reductions_softmax_cast_fill_and_bias_add_are_queued():
    """Each of these ops hands at least one launch to the queue, and its
    value matches numpy (including the broadcasting BiasAdd, whose kernel
    carries the collapsed broadcast geometry)."""
    rng = np.random.default_rng()
    r, c = int(rng.integers(2, 70)), int(rng.integers(2, 3000))
    x = rng.standard_normal((r, c)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    cases = {
        "Sum": (lambda t, bb: pg.reduce_sum(t, axis=1), x.sum(axis=1)),
        "Mean": (lambda t, bb: pg.reduce_mean(t), x.mean()),
        "Max": (lambda t, bb: pg.reduce_max(t, axis=0), x.max(axis=0)),
        "Softmax": (lambda t, bb: pg.nn.softmax(t), e / e.sum(axis=1, keepdims=True)),
        "LogSoftmax": (lambda t, bb: pg.nn.log_softmax(t),
                       np.log(e / e.sum(axis=1, keepdims=True))),
        "Cast": (lambda t, bb: pg.cast(t, pg.float16), x.astype(np.float16)),
        "Fill": (lambda t, bb: pg.fill([r, c], 3.5), np.full((r, c), 3.5, np.float32)),
        "BiasAdd": (lambda t, bb: pg.nn.bias_add(t, bb), x + b),
        "OnesLike": (lambda t, bb: pg.raw_ops.OnesLike(x=t), np.ones_like(x)),
        "ZerosLike": (lambda t, bb: pg.raw_ops.ZerosLike(x=t), np.zeros_like(x)),
    }
    with pg.device("GPU:0"):
        t, bb = pg.constant(x), pg.constant(b)
        for name, (fn, ref) in cases.items():
            fn(t, bb)  # first call: plans and constants made
            before = _stats()
            with pg.testing.expect_kernel(name, "GPU", 1):
                out = fn(t, bb)
            d = _delta(before, _stats())
            assert d["queued"] >= 1, (name, d)
            got = out.numpy()
            tol = 2e-3 if name in ("Cast", "Sum", "Mean") else 1e-5
            np.testing.assert_allclose(got.astype(np.float32), np.asarray(ref, np.float32),
                                       rtol=tol, atol=tol, err_msg=name)


@needs_gpu
def test_work_launched_directly_and_reads_come_after_queued_kernels():
    """MatMul (cuBLAS or the tiled kernel), a reduction, a copy and reads,
    each right after a run of queued kernels that produce their input."""
    rng = np.random.default_rng()
    for _ in range(5):
        m = int(rng.integers(2, 300))
        a = rng.standard_normal((m, m)).astype(np.float32)
        b = rng.standard_normal((m, m)).astype(np.float32)
        with pg.device("GPU:0"):
            x = _chain(pg.constant(a), pg.constant(b), 40)
            ref = _chain_np(a, b, 40)
            p = pg.raw_ops.MatMul(a=x, b=x)
            s = pg.reduce_sum(_chain(x, pg.constant(b), 20), axis=1)
            c = pg.identity(_chain(x, pg.constant(b), 20))
            mid = x.numpy()
        np.testing.assert_allclose(mid, ref, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(p.numpy(), ref @ ref, rtol=1e-3, atol=1e-3)
        r2 = _chain_np(ref, b, 20)
        np.testing.assert_allclose(s.numpy(), r2.sum(axis=1), rtol=1e-4, atol=1e-3)
        np.testing.assert_allclose(c.numpy(), r2, rtol=1e-5, atol=1e-5)


@needs_gpu
def test_a_burst_after_an_idle_spell_wakes_the_launcher_and_loses_nothing():
    """After the launcher has slept (more than kIdleSpinNs without work), the
    first push of a burst finds it asleep and wakes it; every item of the
    burst is then issued exactly once, by the launcher or by the pushing
    thread, in order (the results are the chain's).

    How much of the burst the woken launcher takes depends on how soon the
    scheduler runs it, which no test can fix: benchmarks/launch_thread_gpu.py
    measures that share ("bursts after an idle spell")."""
    rng = np.random.default_rng()
    n = int(rng.integers(1, 4000))
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    ref = _chain_np(a, b, 150)
    with pg.device("GPU:0"):
        x, y = pg.constant(a), pg.constant(b)
        _chain(x, y, 2).numpy()
        for _ in range(3):
            time.sleep(0.02)  # the launcher falls asleep (kIdleSpinNs is 2 ms)
            before = _stats()
            with pg.testing.expect_kernel("Relu", "GPU", 150):
                out = _chain(x, y, 150)
            np.testing.assert_allclose(out.numpy(), ref, rtol=1e-5, atol=1e-6)
            d = _delta(before, _stats())
            assert d["failed"] == 0 and d["wakes"] >= 1, d  # it had fallen asleep
            assert d["queued"] >= 150 and d["queued"] == d["by_launcher"] + d["by_flush"], d


@needs_gpu
def test_the_event_of_a_direct_launch_goes_to_an_awake_launcher():
    """A product launched by the calling thread (cuBLAS) after queued
    kernels: the queue is issued first, and the op's completion event record
    is then queued for the launcher, which is awake (it spins between
    pushes), instead of being issued on the calling thread.

    Whether the launcher is awake when the record is made is up to the
    scheduler: it may have fallen asleep since the last try (checking a
    product takes longer than its idle spin); the chain's first push then
    wakes it, and it runs again when the scheduler lets it. The product
    waits up to a second for that; a record made while the launcher sleeps
    is issued directly, which is also correct. So the product is tried a
    few times, and a record that never goes to the launcher fails the
    test."""
    rng = np.random.default_rng()
    n = int(rng.integers(300, 600))
    a = rng.standard_normal((n, n)).astype(np.float32)
    ref = _chain_np(a, a, 10)
    deltas = []
    with pg.device("GPU:0"):
        x = pg.constant(a)
        pg.raw_ops.MatMul(a=x, b=x).numpy()  # planned (and tuned) once
        for _ in range(8):
            start = _stats()
            gc.disable()  # no collection between the chain and the product
            try:
                y = _chain(x, x, 10)          # queued kernels: the launcher runs
                before = _stats()
                awake = _wait_awake()
                with pg.testing.expect_kernel("MatMul", "GPU", 1):
                    p = pg.raw_ops.MatMul(a=y, b=y)
                d = _delta(before, _stats())
            finally:
                gc.enable()
            d["awake"] = awake
            np.testing.assert_allclose(p.numpy(), ref @ ref, rtol=1e-3, atol=1e-3)
            assert d["failed"] == 0, d
            chain = _delta(start, before)
            assert chain["queued"] >= 40, (
                f"the chain's 40 elementwise kernels were not queued ({chain}): the queue "
                "is bypassed, as while the profiler records or a stream captures")
            deltas.append(d)
            if d["queued"] >= 1:  # the record (the product itself is not queued)
                break
    assert deltas[-1]["queued"] >= 1, (
        "the record never went to the launcher; per try, (items queued by the product, "
        f"launcher awake before it): {[(d['queued'], d['awake']) for d in deltas]}")


@needs_gpu
def test_synchronize_waits_for_queued_kernels():
    rng = np.random.default_rng()
    a = rng.standard_normal(1 << 16).astype(np.float32)
    dev = pg.get_device("GPU:0")
    with pg.device("GPU:0"):
        x = pg.constant(a)
        y = _chain(x, x, 300)
        dev.synchronize()
        before = _stats()
        got = y.numpy()  # nothing left to issue
    assert _delta(before, _stats())["queued"] == 0
    np.testing.assert_allclose(got, _chain_np(a, a, 300), rtol=1e-5, atol=1e-5)


@needs_gpu
def test_dlpack_and_cuda_array_interface_consumers_see_queued_work():
    rng = np.random.default_rng()
    a = rng.standard_normal(4096).astype(np.float32)
    b = rng.standard_normal(4096).astype(np.float32)
    ref = _chain_np(a, b, 300)
    torch = cupy = None
    try:
        import torch
    except ImportError:
        pass
    try:
        import cupy
    except ImportError:
        pass
    if torch is None and cupy is None:
        pytest.skip("neither PyTorch nor CuPy is installed to consume the tensors")
    with pg.device("GPU:0"):
        if torch is not None:
            t = torch.from_dlpack(_chain(pg.constant(a), pg.constant(b), 300))
            np.testing.assert_allclose(t.cpu().numpy(), ref, rtol=1e-5, atol=1e-5)
        if cupy is not None:
            c = cupy.asarray(_chain(pg.constant(a), pg.constant(b), 300))  # the interface
            np.testing.assert_allclose(cupy.asnumpy(c), ref, rtol=1e-5, atol=1e-5)
            c2 = cupy.from_dlpack(_chain(pg.constant(a), pg.constant(b), 300))
            np.testing.assert_allclose(cupy.asnumpy(c2), ref, rtol=1e-5, atol=1e-5)


@needs_gpu
def test_threads_launching_on_one_gpu():
    rng = np.random.default_rng()
    inputs = [rng.standard_normal(int(rng.integers(1, 2000))).astype(np.float32)
              for _ in range(4)]
    results: list = [None] * 4
    errors: list = []

    def work(i):
        try:
            with pg.device("GPU:0"):
                x = pg.constant(inputs[i])
                for _ in range(5):
                    x = _chain(x, pg.constant(inputs[i]), 50)
                results[i] = x.numpy()
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i in range(4):
        np.testing.assert_allclose(results[i], _chain_np(inputs[i], inputs[i], 250),
                                   rtol=1e-5, atol=1e-5)


@needs_gpu
def test_turned_off_nothing_is_queued_and_the_numbers_are_the_same():
    rng = np.random.default_rng()
    a = rng.standard_normal(777).astype(np.float32)
    code = textwrap.dedent(f"""
        import ctypes, numpy as np, pluggable as pg
        rec = next(r for r in pg.plugins() if r.path.endswith("libpluggable_cuda.so"))
        lib = ctypes.CDLL(rec.path)
        out = (ctypes.c_uint64 * 5)()
        a = np.frombuffer(bytes.fromhex("{a.tobytes().hex()}"), np.float32)
        with pg.device("GPU:0"):
            x = pg.constant(a)
            for _ in range(100):
                x = pg.raw_ops.Relu(features=pg.raw_ops.AddV2(x=pg.raw_ops.Mul(
                    x=x, y=pg.constant(np.float32(0.5))), y=pg.constant(a)))
            got = x.numpy()
        print("QUEUE", lib.PG_CudaLaunchQueueStats(0, out))
        np.save("{{}}", got)
    """)
    path = pathlib.Path(os.environ.get("TMPDIR", "/tmp")) / f"lq_off_{os.getpid()}.npy"
    env = {**os.environ, "PLUGGABLE_CUDA_LAUNCH_THREAD": "0"}
    run = subprocess.run([sys.executable, "-c", code.replace("{}", str(path))],
                         capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "QUEUE 0" in run.stdout, run.stdout  # no queue on the device
    got = np.load(path)
    path.unlink()
    ref = a
    for _ in range(100):
        ref = np.maximum(ref * np.float32(0.5) + a, np.float32(0))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


@needs_gpu
def test_nothing_is_queued_while_the_profiler_records(tmp_path):
    rng = np.random.default_rng()
    a = rng.standard_normal(64).astype(np.float32)
    with pg.device("GPU:0"):
        x = pg.constant(a)
        pg.get_device("GPU:0").synchronize()
        with pg.profiler.Profile(tmp_path):
            before = _stats()
            y = _chain(x, x, 20)
            queued = _delta(before, _stats())["queued"]
            got = y.numpy()
    assert queued == 0
    np.testing.assert_allclose(got, _chain_np(a, a, 20), rtol=1e-5, atol=1e-6)
