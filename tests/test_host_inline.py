"""The host reference device runs a small elementwise task at once on the
launching thread when its stream is idle (reference_device/host/stream.c,
PLUGGABLE_MY_DEVICE_INLINE elements at most, 4096 by default): results,
stream order behind queued work, asynchronous errors and several launching
threads are as with every task on the worker, and the setting is checked."""
from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import pluggable as pg

DEV = "MY_DEVICE:0"

_CHAIN = r"""
import sys
import numpy as np
import pluggable as pg
x0 = np.load(sys.argv[1])
with pg.device("MY_DEVICE:0"):
    x = pg.constant(x0)
    k, c = pg.constant(np.float32(1.0001)), pg.constant(np.float32(0.5))

    b = pg.constant(np.linspace(-1, 1, x0.shape[-1]).astype(np.float32))

    def chain(x):
        for _ in range(50):
            x = pg.add(pg.multiply(x, k), c)
        y = pg.nn.bias_add(pg.exp(-x), b)                       # unary, BiasAdd
        y = pg.cast(pg.cast(y, pg.float16), pg.float32)         # Cast
        return y + pg.ones(x0.shape)                            # Fill
    f = pg.function(chain)
    np.save(sys.argv[2], np.stack([chain(x).numpy(), f(x).numpy(), f(x).numpy()]))
"""


def _run_chain(tmp_path, x0, inline):
    np.save(tmp_path / "x.npy", x0)
    env = dict(os.environ, PLUGGABLE_MY_DEVICE_INLINE=inline)
    out = tmp_path / f"out_{inline}.npy"
    proc = subprocess.run([sys.executable, "-c", _CHAIN, str(tmp_path / "x.npy"), str(out)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return np.load(out)


def test_small_tasks_give_the_same_bits_inline_or_on_the_worker(tmp_path, rng):
    """A chain of one-element and 16-element ops (binary, unary, BiasAdd,
    Cast, Fill), eagerly and as a graph, with the default setting, with
    every task on the worker (0), and with a limit every task passes: the
    same bits, and numpy's values."""
    for shape in ((1, 1), (4, 4)):
        x0 = rng.standard_normal(shape).astype(np.float32)
        runs = [_run_chain(tmp_path, x0, v) for v in ("4096", "0", "1000000")]
        for r in runs[1:]:
            np.testing.assert_array_equal(r, runs[0])
        want = x0.astype(np.float32)
        for _ in range(50):
            want = want * np.float32(1.0001) + np.float32(0.5)
        bias = np.linspace(-1, 1, shape[-1]).astype(np.float32)
        expect = (np.exp(-want) + bias).astype(np.float16).astype(np.float32) + 1
        np.testing.assert_allclose(runs[0][0], expect, rtol=1e-3)


def test_a_small_task_waits_for_work_queued_before_it(rng):
    """A one-element op whose input a long product and a reduction still
    being computed make is queued behind them, never run ahead."""
    a = rng.standard_normal((384, 384)).astype(np.float32)
    with pg.device(DEV):
        ad = pg.constant(a)
        for _ in range(3):
            p = ad
            for _ in range(4):
                p = pg.matmul(p, ad) * (1.0 / 384)
            s = pg.reduce_sum(p)
            got = (s * 2.0 + 1.0).numpy()
    p64 = a.astype(np.float64)
    for _ in range(4):
        p64 = p64 @ a / 384
    np.testing.assert_allclose(got, p64.sum() * 2 + 1, rtol=1e-3, atol=1e-3)


def test_an_inline_task_reports_its_error_asynchronously():
    """Integer division by zero in a small FloorDiv fails the op as it does
    on the worker: a typed error when the value is read, naming the op."""
    with pg.device(DEV):
        x = pg.constant(np.array([4, 5], np.int32))
        y = pg.constant(np.array([2, 0], np.int32))
        z = pg.raw_ops.FloorDiv(x=x, y=y)
        with pytest.raises(pg.errors.InvalidArgumentError, match="FloorDiv"):
            z.numpy()
        ok = pg.raw_ops.FloorDiv(x=x, y=x).numpy()  # the stream goes on
    np.testing.assert_array_equal(ok, [1, 1])


def test_threads_launching_small_ops_on_one_device(rng):
    """Four threads run one-element chains on the same device at once (a
    thread's inline task and another's queued ones share the stream)."""
    starts = rng.standard_normal(4).astype(np.float32)
    out: dict = {}

    def work(i):
        with pg.device(DEV):
            x = pg.constant(starts[i])
            for _ in range(300):
                x = x * 0.5 + 1.0
            out[i] = float(x.numpy())
    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, s in enumerate(starts):
        want = np.float32(s)
        for _ in range(300):
            want = want * np.float32(0.5) + np.float32(1.0)
        assert out[i] == pytest.approx(float(want), rel=1e-6)


def test_a_bad_setting_quarantines_the_plugin_with_the_reason():
    code = ("import pluggable as pg\n"
            "assert pg.list_physical_devices('MY_DEVICE') == []\n"
            "rec = [p for p in pg.plugins() if 'my_device' in p.path][0]\n"
            "print(rec.status, rec.reason)\n")
    for bad in ("abc", "-1", "1e3"):
        env = dict(os.environ, PLUGGABLE_MY_DEVICE_INLINE=bad)
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert "quarantined" in proc.stdout and "PLUGGABLE_MY_DEVICE_INLINE" in proc.stdout
        assert repr(bad)[1:-1] in proc.stdout
