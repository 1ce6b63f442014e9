"""The CUDA plugin's collective kernels over NCCL
(reference_device/cuda/kernels_collective.cu), its collectives and peer-copy
extensions (pluggable_collectives.h, pluggable_peer.h) and their Python side
(pluggable.distribute.nccl, pluggable.runtime.peer).

On one GPU: every collective op and dtype with world-size-1 communicators
against numpy (the GPU kernel checked with expect_kernel), the unique-id +
init path as rank 0 of 1, and the error when NCCL is missing
(PLUGGABLE_NCCL_LIBRARY=/nonexistent, in a child process). With two GPUs or
more: pg.distribute across GPU:0/GPU:1 against numpy, all-to-all, raw ops
from a thread per device, a participant that never arrives
(DeadlineExceededError at the call, the device usable afterwards) and a
peer-copy round trip. Without a GPU only the parts that
need none run (the wheel lookup of libnccl, the refusal of the extension on
a plugin that lacks it); the rest skips with the reason."""
from __future__ import annotations

import itertools
import json
import os
import pathlib
import subprocess
import sys
import textwrap
import time

import ml_dtypes
import numpy as np
import pytest

import pluggable as pg
from pluggable import errors
from pluggable.distribute import nccl
from pluggable.ops import raw_ops

ROOT = pathlib.Path(__file__).resolve().parent.parent
GPUS = len(pg.list_physical_devices("GPU"))
needs_gpu = pytest.mark.skipif(GPUS < 1, reason="no GPU device present: needs the CUDA "
                               "reference plugin and an NVIDIA GPU")
needs_2_gpus = pytest.mark.skipif(GPUS < 2, reason=f"needs 2 GPUs or more, {GPUS} present")
DTYPES = [np.float16, "bfloat16", np.float32, np.float64, np.int32, np.int64]
MERGES = ["Add", "Mul", "Min", "Max"]
_keys = itertools.count(1000)


def _np_dtype(dt):
    return np.dtype(ml_dtypes.bfloat16) if dt == "bfloat16" else np.dtype(dt)


def _sample(rng, dt, shape):
    d = _np_dtype(dt)
    if np.issubdtype(d, np.integer):
        return rng.integers(-50, 51, shape).astype(d)
    return rng.standard_normal(shape).astype(np.float32).astype(d)


def _on(dev, a):
    with pg.device(dev):
        return pg.constant(a)


def _as64(t):
    a = np.asarray(t)
    return a.astype(np.float64) if a.dtype.kind == "V" or a.dtype.itemsize == 2 else a


@pytest.fixture(scope="module")
def nccl_ready():
    """Skips when NCCL cannot be loaded on this machine."""
    if GPUS < 1:
        pytest.skip("no GPU device present")
    try:
        with pg.device("GPU:0"):
            raw_ops.CollectiveReduceV2(input=pg.constant(np.ones(4, np.float32)), group_size=1,
                                       group_key=next(_keys), instance_key=1,
                                       ordering_token=[], merge_op="Add",
                                       final_op="Id").numpy()
    except errors.FailedPreconditionError as exc:
        pytest.skip(f"NCCL is not installed here: {exc}")


# ---------------------------------------------------------------------------
# No GPU needed

def test_wheel_lookup_finds_libnccl(tmp_path, monkeypatch):
    from pluggable.plugins import cuda_env
    lib = tmp_path / "nvidia" / "nccl" / "lib"
    lib.mkdir(parents=True)
    (lib / "libnccl.so.2").write_bytes(b"")
    monkeypatch.setattr(cuda_env, "_site_dirs", lambda: [str(tmp_path)])
    assert cuda_env.locate("libnccl") == str(lib / "libnccl.so.2")
    monkeypatch.delenv("PLUGGABLE_NCCL_LIBRARY", raising=False)
    plugin_dir = tmp_path / "plugins"
    plugin_dir.mkdir()
    (plugin_dir / "libpluggable_cuda.so").write_bytes(b"")
    cuda_env.configure(str(plugin_dir))
    assert os.environ["PLUGGABLE_NCCL_LIBRARY"] == str(lib / "libnccl.so.2")


def test_extension_refused_on_a_plugin_without_it():
    with pytest.raises(errors.UnimplementedError, match="PG_GetCollectiveFns"):
        nccl.unique_id("MY_DEVICE:0")
    from pluggable.runtime import peer
    with pg.device("MY_DEVICE:0"):
        x = pg.constant(np.arange(3.0))
    assert not peer.supports_peer_copy(x, pg.get_device("MY_DEVICE:0"))


def test_init_checks_its_arguments_before_the_plugin():
    with pytest.raises(errors.InvalidArgumentError, match="128 bytes"):
        nccl.init("GPU:0", 1, 0, b"short", 1)
    with pytest.raises(errors.InvalidArgumentError, match="rank 2 and nranks 2"):
        nccl.init("GPU:0", 2, 2, bytes(128), 1)


# ---------------------------------------------------------------------------
# One GPU: world-size-1 communicators

# One group key for the world-size-1 calls: one communicator, made once.
SINGLE_KEY = 999


def _single(op, x, **kw):
    return getattr(raw_ops, op)(input=x, group_size=1, group_key=SINGLE_KEY,
                                instance_key=next(_keys), **kw)


@needs_gpu
@pytest.mark.parametrize("dt", DTYPES, ids=str)
@pytest.mark.parametrize("merge", MERGES)
def test_reduce_world_size_1(nccl_ready, dt, merge):
    rng = np.random.default_rng()
    a = _sample(rng, dt, (7, 5))
    x = _on("GPU:0", a)
    with pg.device("GPU:0"), pg.testing.expect_kernel("CollectiveReduceV2", "GPU"):
        y = _single("CollectiveReduceV2", x, ordering_token=[], merge_op=merge, final_op="Id")
        d = _single("CollectiveReduceV2", x, ordering_token=[], merge_op=merge, final_op="Div")
    assert y.device.endswith("GPU:0") and y.dtype == x.dtype
    np.testing.assert_array_equal(_as64(y), _as64(a))
    np.testing.assert_array_equal(_as64(d), _as64(a))   # divided by group_size 1


@needs_gpu
@pytest.mark.parametrize("dt", DTYPES, ids=str)
def test_other_ops_world_size_1(nccl_ready, dt):
    rng = np.random.default_rng()
    a = _sample(rng, dt, (6, 3))
    x = _on("GPU:0", a)
    ops = [("CollectiveReduceScatterV2", dict(ordering_token=[], merge_op="Add", final_op="Id")),
           ("CollectiveAllToAllV2", dict(ordering_token=[]))]
    if dt != "bfloat16":   # TensorFlow's Gather and Bcast do not take bfloat16
        ops += [("CollectiveGatherV2", dict(ordering_token=[])), ("CollectiveBcastSendV2", {})]
    for op, kw in ops:
        with pg.device("GPU:0"), pg.testing.expect_kernel(op, "GPU"):
            y = _single(op, x, **kw)
        assert list(y.shape) == [6, 3], op
        np.testing.assert_array_equal(_as64(y), _as64(a), err_msg=op)


@needs_gpu
def test_empty_and_bad_inputs_world_size_1(nccl_ready):
    with pg.device("GPU:0"):
        y = _single("CollectiveReduceV2", pg.constant(np.zeros((0, 4), np.float32)),
                    ordering_token=[], merge_op="Add", final_op="Id")
        assert y.numpy().shape == (0, 4)
        with pytest.raises(errors.InvalidArgumentError, match="divisible"):
            raw_ops.CollectiveReduceScatterV2(input=pg.constant(np.ones((3, 2), np.float32)),
                                              group_size=2, group_key=next(_keys),
                                              instance_key=1, ordering_token=[],
                                              merge_op="Add", final_op="Id").numpy()


@needs_gpu
def test_unique_id_and_init_rank_0_of_1(nccl_ready):
    uid = nccl.unique_id("GPU:0")
    assert isinstance(uid, bytes) and len(uid) == 128 and uid != nccl.unique_id("GPU:0")
    gk = next(_keys)
    nccl.init("GPU:0", 1, 0, uid, gk)
    rng = np.random.default_rng()
    a = rng.standard_normal((5, 4)).astype(np.float32)
    x = _on("GPU:0", a)
    with pg.device("GPU:0"):
        with pg.testing.expect_kernel("CollectiveReduceV2", "GPU"):
            y = raw_ops.CollectiveReduceV2(input=x, group_size=1, group_key=gk, instance_key=1,
                                           ordering_token=[], merge_op="Max", final_op="Div")
        b = raw_ops.CollectiveBcastSendV2(input=x, group_size=1, group_key=gk, instance_key=2)
        g = raw_ops.CollectiveGatherV2(input=x, group_size=1, group_key=gk, instance_key=3,
                                       ordering_token=[])
        np.testing.assert_array_equal(y.numpy(), a)
        np.testing.assert_array_equal(b.numpy(), a)
        np.testing.assert_array_equal(g.numpy(), a)
        with pytest.raises(errors.InvalidArgumentError, match="has 1 ranks"):
            raw_ops.CollectiveReduceV2(input=x, group_size=2, group_key=gk, instance_key=4,
                                       ordering_token=[], merge_op="Add",
                                       final_op="Id").numpy()
    nccl.abort("GPU:0", gk)
    with pytest.raises(errors.NotFoundError, match="no communicator"):
        nccl.abort("GPU:0", gk)


@needs_gpu
def test_missing_nccl_is_a_clear_failed_precondition():
    code = textwrap.dedent("""
        import numpy as np, pluggable as pg
        from pluggable import errors
        from pluggable.distribute import nccl
        from pluggable.ops import raw_ops
        with pg.device("GPU:0"):
            x = pg.constant(np.ones(3, np.float32))
            try:
                raw_ops.CollectiveReduceV2(input=x, group_size=1, group_key=1, instance_key=1,
                                           ordering_token=[], merge_op="Add",
                                           final_op="Id").numpy()
            except errors.FailedPreconditionError as exc:
                print("OP:", exc)
        try:
            nccl.unique_id("GPU:0")
        except errors.FailedPreconditionError as exc:
            print("UID:", exc)
    """)
    env = dict(os.environ, PLUGGABLE_NCCL_LIBRARY="/nonexistent/libnccl.so.2")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = dict(line.split(": ", 1) for line in out.stdout.splitlines() if ": " in line)
    assert "CollectiveReduceV2" in lines["OP"] and "GPU:0" in lines["OP"]
    for msg in lines.values():
        assert "/nonexistent/libnccl.so.2" in msg and "pip install nvidia-nccl-cu13" in msg


# ---------------------------------------------------------------------------
# Two GPUs

def _reference(xs, op):
    acc = xs[0].copy()
    for x in xs[1:]:
        acc = {"sum": acc + x, "mean": acc + x, "prod": acc * x, "min": np.minimum(acc, x),
               "max": np.maximum(acc, x)}[op]
    if op == "mean":   # integers: truncated toward zero
        acc = (np.trunc(acc / len(xs)) if acc.dtype.kind == "i" else acc / len(xs))
    return acc.astype(xs[0].dtype)


@needs_2_gpus
@pytest.mark.parametrize("dt", [np.float32, np.float64, np.int32, np.int64], ids=str)
@pytest.mark.parametrize("op", ["sum", "mean", "prod", "min", "max"])
def test_all_reduce_two_gpus(nccl_ready, dt, op):
    rng = np.random.default_rng()
    arrays = [_sample(rng, dt, (8, 3)) for _ in range(2)]
    xs = [_on(f"GPU:{i}", a) for i, a in enumerate(arrays)]
    with pg.testing.expect_kernel("CollectiveReduceV2", "GPU", min_calls=2):
        ys = pg.distribute.all_reduce(xs, op=op)
    want = _reference(arrays, op)
    for i, y in enumerate(ys):
        assert y.device.endswith(f"GPU:{i}")
        if np.issubdtype(dt, np.integer):
            np.testing.assert_array_equal(y.numpy(), want)
        else:
            np.testing.assert_allclose(y.numpy(), want, rtol=1e-6)


@needs_2_gpus
def test_all_reduce_two_gpus_donated(nccl_ready):
    """Donated in one process: after the first call (which makes the plans)
    each GPU's result goes over its own input, NCCL reducing in place in
    one group."""
    def forwarded():
        return pg.testing.kernel_forwards("CollectiveReduceV2", "GPU")
    rng = np.random.default_rng()
    for step in range(3):
        arrays = [rng.standard_normal((300, 7)).astype(np.float32) for _ in range(2)]
        xs = [_on(f"GPU:{i}", a) for i, a in enumerate(arrays)]
        before = forwarded()
        ys = pg.distribute.all_reduce(xs, op="sum", donate=True)
        assert all(x.is_donated for x in xs)
        for i, y in enumerate(ys):
            assert y.device.endswith(f"GPU:{i}")
            np.testing.assert_array_equal(y.numpy(), arrays[0] + arrays[1])
        if step > 0:
            assert forwarded() == before + 2


@needs_2_gpus
def test_scatter_gather_broadcast_two_gpus(nccl_ready):
    rng = np.random.default_rng()
    arrays = [rng.standard_normal((4, 6)).astype(np.float32) for _ in range(2)]
    xs = [_on(f"GPU:{i}", a) for i, a in enumerate(arrays)]
    with pg.testing.expect_kernel("CollectiveReduceScatterV2", "GPU", min_calls=2):
        parts = pg.distribute.reduce_scatter(xs)
    total = arrays[0] + arrays[1]
    np.testing.assert_allclose(parts[0].numpy(), total[:2], rtol=1e-6)
    np.testing.assert_allclose(parts[1].numpy(), total[2:], rtol=1e-6)
    for axis in (0, 1):   # axis 1 runs a Transpose after the gather on each device
        with pg.testing.expect_kernel("CollectiveGatherV2", "GPU", min_calls=2):
            full = pg.distribute.all_gather(xs, axis=axis)
        for f in full:
            np.testing.assert_array_equal(f.numpy(), np.concatenate(arrays, axis=axis))
    with pg.testing.expect_kernel("CollectiveBcastRecvV2", "GPU"):
        copies = pg.distribute.broadcast(xs[1], ["GPU:0", "GPU:1"])
    for c in copies:
        np.testing.assert_array_equal(c.numpy(), arrays[1])


@needs_2_gpus
def test_all_to_all_two_gpus(nccl_ready):
    import threading
    rng = np.random.default_rng()
    arrays = [rng.integers(-100, 100, (4, 3)).astype(np.int64) for _ in range(2)]
    gk, ik = next(_keys), 1
    ys = [None, None]

    def run(i):      # one thread per device: each call waits for the other
        with pg.device(f"GPU:{i}"):
            ys[i] = raw_ops.CollectiveAllToAllV2(input=pg.constant(arrays[i]), group_size=2,
                                                 group_key=gk, instance_key=ik,
                                                 ordering_token=[], timeout_seconds=60.0)
    with pg.testing.expect_kernel("CollectiveAllToAllV2", "GPU", min_calls=2):
        threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    # rank r receives chunk r of every rank, in rank order
    np.testing.assert_array_equal(ys[0].numpy(), np.concatenate([arrays[0][:2], arrays[1][:2]]))
    np.testing.assert_array_equal(ys[1].numpy(), np.concatenate([arrays[0][2:], arrays[1][2:]]))


@needs_2_gpus
def test_missing_participant_times_out_and_the_gpu_recovers(nccl_ready):
    # GPU:1's participant is never called: GPU:0's call waits for it on the
    # host, then fails; nothing was enqueued, so the GPU goes on.
    with pg.device("GPU:0"):
        x = pg.constant(np.ones(16, np.float32))
        start = time.monotonic()
        with pytest.raises(errors.DeadlineExceededError,
                           match=r"timed out after 1 s .*1 of 2 arrived"):
            raw_ops.CollectiveReduceV2(input=x, group_size=2, group_key=next(_keys),
                                       instance_key=1, ordering_token=[], merge_op="Add",
                                       final_op="Id", timeout_seconds=1.0).numpy()
        assert time.monotonic() - start < 30
        np.testing.assert_array_equal((x + x).numpy(), np.full(16, 2, np.float32))


@needs_2_gpus
def test_participants_from_threads_of_their_own(nccl_ready):
    # TensorFlow's pattern: each device's op from its own thread, raw ops.
    import threading
    rng = np.random.default_rng()
    arrays = [rng.standard_normal((6, 5)).astype(np.float32) for _ in range(2)]
    gk, out = next(_keys), [None, None]

    def run(i):
        with pg.device(f"GPU:{i}"):
            out[i] = raw_ops.CollectiveReduceV2(input=pg.constant(arrays[i]), group_size=2,
                                                group_key=gk, instance_key=7,
                                                ordering_token=[], merge_op="Add",
                                                final_op="Div", timeout_seconds=60.0)
    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for y in out:
        np.testing.assert_array_equal(y.numpy(), (arrays[0] + arrays[1]) / np.float32(2))


@needs_2_gpus
def test_peer_copy_round_trip():
    from pluggable.runtime import peer
    rng = np.random.default_rng()
    a = rng.standard_normal((257, 33)).astype(np.float32)
    x = _on("GPU:0", a)
    g0, g1 = pg.get_device("GPU:0"), pg.get_device("GPU:1")
    assert peer.supports_peer_copy(x, g1)
    assert isinstance(peer.can_access_peer(g0, g1), bool)
    y = x.to("GPU:1")
    z = y.to("GPU:0")
    assert y.device.endswith("GPU:1") and z.device.endswith("GPU:0")
    np.testing.assert_array_equal(y.numpy(), a)
    np.testing.assert_array_equal(z.numpy(), a)
    with pg.device("GPU:1"):
        np.testing.assert_array_equal((y * 2).numpy(), a * 2)


@needs_2_gpus
def test_work_on_either_gpu_leaves_the_callers_current_device_alone():
    """PyTorch and CuPy take the thread's current CUDA device as their
    default device, so nothing pluggable does on GPU:0 or GPU:1 may change
    it: every step below, from each of the two devices made current first,
    in a fresh process (the first collective makes NCCL's communicators)."""
    code = textwrap.dedent("""
        import json
        import numpy as np
        import pluggable as pg
        from pluggable._core import cuda_python
        rt = cuda_python.cudart()
        a = np.arange(12, dtype=np.float32).reshape(3, 4)
        box = {}

        def on(dev, v):
            with pg.device(dev):
                return pg.constant(v)

        steps = {
            "constant on GPU:1": lambda: box.update(x1=on("GPU:1", a)),
            "constant on GPU:0": lambda: box.update(x0=on("GPU:0", a)),
            "op on GPU:1": lambda: box.update(y1=box["x1"] * 2),
            "read back from GPU:1": lambda: box["y1"].numpy(),
            "copy GPU:0 -> GPU:1": lambda: box["x0"].to("GPU:1").numpy(),
            "copy GPU:1 -> GPU:0": lambda: box["x1"].to("GPU:0").numpy(),
            "all_reduce": lambda: [y.numpy() for y in pg.distribute.all_reduce(
                [box["x0"], box["x1"]])],
            "all_gather": lambda: [y.numpy() for y in pg.distribute.all_gather(
                [box["x0"], box["x1"]])],
            "broadcast": lambda: [y.numpy() for y in pg.distribute.broadcast(
                box["x1"], ["GPU:0", "GPU:1"])],
            "synchronize GPU:1": lambda: pg.get_device("GPU:1").synchronize(),
        }
        changed = []
        for start in (0, 1, 0):
            for name, step in steps.items():
                rt.cudaSetDevice(start)
                step()
                now = int(rt.cudaGetDevice()[1])
                if now != start:
                    changed.append(f"{name} (current device {start} -> {now})")
        print(json.dumps(changed))
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
