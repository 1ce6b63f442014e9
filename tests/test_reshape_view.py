"""``pg.reshape`` of a device tensor is a view: a new tensor sharing the
buffer, made by the core without a kernel (TensorFlow's Reshape forwards its
input on every device type). Watched calls (gradient tapes, tracing, the
profiler), another device's scope and the placement log keep the op.

Runs on MY_DEVICE everywhere and on GPU:0 where a GPU is present."""
from __future__ import annotations

import gc
import math

import numpy as np
import pytest

import pluggable as pg
from pluggable.framework import config

HAS_GPU = bool(pg.list_physical_devices("GPU"))
DEVICES = [
    pytest.param("MY_DEVICE:0", id="MY_DEVICE"),
    pytest.param("GPU:0", id="GPU", marks=pytest.mark.skipif(
        not HAS_GPU, reason="no GPU device present: needs the CUDA reference plugin "
                            "and an NVIDIA GPU")),
]


def _dtype_name(device: str) -> str:
    return device.split(":")[0]


def _random_shape(rng, n_dims: int) -> tuple:
    return tuple(int(d) for d in rng.integers(1, 6, size=n_dims))


def _address(t) -> int:
    """The address of the tensor's first element, through the protocol its
    device exports (host memory: DLPack; CUDA: the array interface)."""
    if "GPU" in t.device:
        return t.__cuda_array_interface__["data"][0]
    return np.from_dlpack(t).ctypes.data


@pytest.mark.parametrize("device", DEVICES)
def test_view_matches_numpy_and_runs_no_kernel(device, rng):
    for _ in range(20):
        shape = _random_shape(rng, int(rng.integers(1, 5)))
        x = rng.standard_normal(shape).astype(np.float32)
        n = math.prod(shape)
        divisors = [d for d in range(1, n + 1) if n % d == 0]
        lead = int(rng.choice(divisors))
        targets = [[lead, n // lead], (lead, -1), [-1], [n, 1, 1], (1, lead, -1)]
        with pg.device(device):
            t = pg.constant(x)
        before = pg.testing.kernel_calls("Reshape", _dtype_name(device))
        for target in targets:
            v = pg.reshape(t, target)
            want = x.reshape(target)
            assert v.shape == want.shape, (target, rng.seed_text)
            assert v.dtype == pg.float32 and v.device == t.device
            np.testing.assert_array_equal(v.numpy(), want, err_msg=rng.seed_text)
            assert _address(v) == _address(t)  # the same buffer, no copy
        assert pg.testing.kernel_calls("Reshape", _dtype_name(device)) == before


@pytest.mark.parametrize("device", DEVICES)
def test_view_of_a_view_and_of_an_op_result(device, rng):
    x = rng.integers(-100, 100, size=(6, 10)).astype(np.int64)
    with pg.device(device):
        t = pg.constant(x)
        y = t * 3  # an op result still in flight
    v = pg.reshape(pg.reshape(y, [60]), (3, 4, 5))
    np.testing.assert_array_equal(v.numpy(), (x * 3).reshape(3, 4, 5))
    with pg.device(device):
        one = pg.constant(np.array([7], np.int64))
    s = pg.reshape(one, [])  # to a scalar and back
    assert s.shape == () and s.numpy() == 7
    assert pg.reshape(s, [1, 1]).numpy().tolist() == [[7]]


@pytest.mark.parametrize("device", DEVICES)
def test_view_keeps_the_buffer_alive(device, rng):
    """The source is dropped and the allocator asked for memory of the same
    size many times: the view's buffer must not be handed out again."""
    x = rng.standard_normal((256, 64)).astype(np.float32)
    with pg.device(device):
        t = pg.constant(x)
        v = pg.reshape(t, [64, 256])
        del t
        gc.collect()
        junk = [pg.constant(np.full((256, 64), float(i), np.float32)) for i in range(8)]
        pg.synchronize()
    np.testing.assert_array_equal(v.numpy(), x.reshape(64, 256))
    del junk


@pytest.mark.parametrize("device", DEVICES)
def test_impossible_shapes_give_the_ops_errors(device):
    with pg.device(device):
        t = pg.constant(np.zeros((4, 6), np.float32))
    with pytest.raises(pg.errors.InvalidArgumentError,
                       match=r"cannot reshape a tensor of shape \[4, 6\] \(24 elements\) "
                             r"into \[5, -1\]"):
        pg.reshape(t, [5, -1])
    with pytest.raises(pg.errors.InvalidArgumentError, match="only one dimension may be -1"):
        pg.reshape(t, (-1, -1))
    with pytest.raises(pg.errors.InvalidArgumentError, match="must be >= -1"):
        pg.reshape(t, [-2, -12])
    with pytest.raises(pg.errors.InvalidArgumentError, match=r"into \[5, 5\] \(25 elements\)"):
        pg.reshape(t, [5, 5])


def test_view_carries_an_asynchronous_failure():
    """A view of a tensor whose op fails later fails to read with that op's
    error; once the failure is known, the reshape itself raises it, as an
    op given that tensor does."""
    with pg.device("MY_DEVICE:0"):
        bad = pg.raw_ops.CheckNumerics(tensor=pg.constant(np.array([1.0, np.nan, 2.0, 3.0])),
                                       message="seen through the view")
    v = pg.reshape(bad, [2, 2])
    with pytest.raises(pg.errors.InvalidArgumentError, match="seen through the view"):
        v.numpy()
    with pytest.raises(pg.errors.InvalidArgumentError,
                       match="Reshape on MY_DEVICE:0: input 0 carries an asynchronous "
                             "failure: .*seen through the view"):
        pg.reshape(bad, [4, 1])
    with pg.device("MY_DEVICE:0"):  # the device goes on working
        ok = pg.constant(np.arange(4.0))
    np.testing.assert_array_equal(pg.reshape(ok, [2, 2]).numpy(), np.arange(4.0).reshape(2, 2))


def test_watched_and_placed_calls_keep_the_op(rng):
    x = rng.standard_normal((3, 8)).astype(np.float32)
    with pg.device("MY_DEVICE:0"):
        t = pg.constant(x)
    calls = lambda: pg.testing.kernel_calls("Reshape", "MY_DEVICE")  # noqa: E731

    before = calls()  # a gradient tape records the op
    w = pg.constant(rng.standard_normal((6, 4)).astype(np.float32))
    with pg.GradientTape() as tape:
        tape.watch(t)
        loss = pg.reduce_sum(pg.reshape(t, [6, 4]) * w)
        assert calls() == before + 1
    g = tape.gradient(loss, t)
    np.testing.assert_allclose(g.numpy(), w.numpy().reshape(3, 8), rtol=1e-6)

    with pg.device("CPU:0"):  # another device's scope: the op, placed there
        c = pg.reshape(t, [24])
    assert "CPU" in c.device
    np.testing.assert_array_equal(c.numpy(), x.reshape(24))

    config.set_log_device_placement(True)
    try:
        config.placement_log(clear=True)
        before = calls()
        p = pg.reshape(t, [2, 12])
        assert calls() == before + 1
        assert [r for r in config.placement_log() if r[0] == "Reshape"]
    finally:
        config.set_log_device_placement(False)
        config.placement_log(clear=True)
    np.testing.assert_array_equal(p.numpy(), x.reshape(2, 12))

    before = calls()  # dimensions that are not Python ints: the op decides
    q = pg.reshape(t, [np.int64(4), np.int32(6)])
    assert calls() == before + 1
    np.testing.assert_array_equal(q.numpy(), x.reshape(4, 6))


def test_traced_reshape_is_a_graph_node(rng):
    x = rng.standard_normal((4, 5)).astype(np.float32)

    @pg.function
    def f(a):
        return pg.reshape(a, [5, 4]) + 1.0

    with pg.device("MY_DEVICE:0"):
        t = pg.constant(x)
        out = f(t)
    np.testing.assert_allclose(out.numpy(), x.reshape(5, 4) + 1.0, rtol=1e-6)
    graph = f.get_concrete_function(t).graph.as_graph_def()
    assert "Reshape" in [n.op for n in graph.node]
