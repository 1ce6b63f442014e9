"""Asynchronous execution on the host reference device (MY_DEVICE).

Kernels only enqueue work on the device stream; these tests check that
results stay exact when intermediates are dropped while work is in flight,
that errors found by device work surface at the next synchronisation point,
and that the device keeps working afterwards.
"""
from __future__ import annotations

import numpy as np
import pytest

import pluggable as pg

DEVICE = "MY_DEVICE:0"


def _c(values, dtype=np.float64):
    return pg.constant(np.asarray(values, dtype=dtype))


def test_long_dependent_chain(rng):
    """200 dependent ops, each result replacing the previous one (so every
    intermediate is released while later work is still queued)."""
    start = rng.integers(-1000, 1000, size=(64, 64)).astype(np.float64)
    expected = start.copy()
    with pg.device(DEVICE):
        x = _c(start)
        kernels_before = {op: pg.testing.kernel_calls(op, "MY_DEVICE")
                          for op in ("AddV2", "Mul", "Sub", "RealDiv")}
        for i in range(200):
            k = float(rng.integers(1, 8))
            c = _c(np.full((64,), k))           # broadcast over rows
            if i % 4 == 0:
                x = pg.raw_ops.AddV2(x=x, y=c)
                expected = expected + k
            elif i % 4 == 1:
                x = pg.raw_ops.Mul(x=x, y=_c(2.0))
                expected = expected * 2.0
            elif i % 4 == 2:
                x = pg.raw_ops.Sub(x=x, y=c)
                expected = expected - k
            else:
                x = pg.raw_ops.RealDiv(x=x, y=_c(2.0))  # exact: undoes the Mul
                expected = expected / 2.0
        result = x.numpy()
    np.testing.assert_array_equal(result, expected, err_msg=rng.seed_text)
    for op, before in kernels_before.items():   # every step ran on MY_DEVICE
        assert pg.testing.kernel_calls(op, "MY_DEVICE") - before == 50, op


def test_long_dependent_chain_int():
    """x -> -(x + 1), 200 times, in int64 (exact)."""
    expected = np.arange(1000, dtype=np.int64)
    with pg.device(DEVICE):
        x = _c(expected, np.int64)
        one = _c(1, np.int64)
        for _ in range(100):
            x = pg.raw_ops.Neg(x=pg.raw_ops.AddV2(x=x, y=one))
            expected = -(expected + 1)
        result = x.numpy()
    np.testing.assert_array_equal(result, expected)


@pytest.mark.parametrize("bad,what", [(np.nan, "NaN"), (np.inf, "Inf")])
@pytest.mark.parametrize("sync", ["numpy", "synchronize"])
def test_check_numerics_error_is_asynchronous(bad, what, sync):
    data = np.array([1.0, 2.0, bad, 4.0], np.float32)
    with pg.device(DEVICE):
        x = pg.constant(data)
        # The op itself only enqueues the check: no error here.
        with pg.testing.expect_kernel("CheckNumerics", "MY_DEVICE"):
            y = pg.raw_ops.CheckNumerics(tensor=x, message="async check")
        with pytest.raises(pg.errors.InvalidArgumentError) as info:
            if sync == "numpy":
                y.numpy()
            else:
                pg.synchronize()
        message = str(info.value)
        assert "CheckNumerics" in message, message
        assert "MY_DEVICE" in message, message
        assert f"{what} values" in message, message

        # The error was reported once; the device works normally again.
        pg.synchronize()
        a = pg.constant(np.arange(6, dtype=np.float32).reshape(2, 3))
        b = pg.constant(np.full((3,), 10, np.float32))
        np.testing.assert_array_equal(pg.raw_ops.AddV2(x=a, y=b).numpy(),
                                      np.arange(6).reshape(2, 3) + 10)
        z = pg.raw_ops.CheckNumerics(tensor=a, message="fine now")
        np.testing.assert_array_equal(z.numpy(), np.arange(6).reshape(2, 3))


def test_check_numerics_error_followed_by_queued_work():
    """Work queued after the failing check still produces its results once
    the error has been reported."""
    with pg.device(DEVICE):
        x = pg.constant(np.array([np.nan, 1.0], np.float64))
        with pg.testing.expect_kernel("CheckNumerics", "MY_DEVICE"):
            y = pg.raw_ops.CheckNumerics(tensor=x, message="first")
        with pytest.raises(pg.errors.InvalidArgumentError, match="CheckNumerics"):
            y.numpy()
        ok = pg.raw_ops.Mul(x=_c([1.0, 2.0, 3.0]), y=_c(3.0))
        np.testing.assert_array_equal(ok.numpy(), [3.0, 6.0, 9.0])


def test_allocations_of_many_sizes_while_work_is_in_flight(rng):
    """Tensors of random sizes are created and dropped in a loop while the
    stream still has work queued that reads them; a running sum (kept on the
    device) must come out exact."""
    total_expected = 0.0
    with pg.device(DEVICE):
        axis0 = pg.constant(np.array([0], np.int32))
        total = _c(0.0)
        for i in range(300):
            n = int(rng.integers(1, 1 << int(rng.integers(1, 18))))
            k = float(rng.integers(-4, 5))
            t = pg.raw_ops.Fill(dims=pg.constant(np.array([n], np.int64)), value=_c(k))
            u = pg.raw_ops.Mul(x=t, y=_c(2.0))      # consumes t
            del t                                   # dropped while queued
            s = pg.raw_ops.Sum(input=u, reduction_indices=axis0)
            del u
            with pg.testing.expect_kernel("AddV2", "MY_DEVICE"):
                total = pg.raw_ops.AddV2(x=total, y=s)
            total_expected += 2.0 * k * n
            if i % 50 == 49:                       # occasional mid-way check
                assert total.numpy() == total_expected, rng.seed_text
        assert total.numpy() == total_expected, rng.seed_text


def test_host_inputs_released_early(rng):
    """Constants built from temporary numpy arrays stay correct even though
    the numpy arrays are gone before the device reads them."""
    results, expected = [], []
    with pg.device(DEVICE):
        for _ in range(50):
            n = int(rng.integers(1, 5000))
            a = rng.integers(-100, 100, size=n).astype(np.int64)
            b = rng.integers(-100, 100, size=n).astype(np.int64)
            results.append(pg.raw_ops.Sub(x=pg.constant(a), y=pg.constant(b)))
            expected.append(a - b)
            del a, b
        for r, e in zip(results, expected):
            np.testing.assert_array_equal(r.numpy(), e, err_msg=rng.seed_text)


# A fresh process, so that no asynchronous error was reported on the device
# before (the case where the core reads only the stream's state and a few
# events to settle finished ops).
_SETTLE_CHILD = r"""
import numpy as np, pluggable as pg
from pluggable._core import lib
dev = pg.get_device("MY_DEVICE:0")
seed = int(__import__("sys").argv[1])
rng = np.random.default_rng(seed)
with pg.device("MY_DEVICE:0"):
    base = rng.standard_normal(8)
    x = pg.constant(base)
    for i in range(300):
        y = pg.raw_ops.AddV2(x=x, y=x)
        if i % 50 == 49:  # the work done (not synchronised), whatever the machine's load
            dev.wait_for_work()
    dev.wait_for_work()
    before = lib.pg_device_unsettled_ops(dev._c)
    for _ in range(64):
        y = pg.raw_ops.AddV2(x=x, y=x)
    after = lib.pg_device_unsettled_ops(dev._c)
    good = pg.raw_ops.Mul(x=x, y=x)
    bad = pg.raw_ops.CheckNumerics(tensor=pg.constant(np.array([np.nan])), message="planted")
    for _ in range(200):  # reaps while the stream holds the error
        z = pg.raw_ops.AddV2(x=good, y=x)
    dev.wait_for_work()
    for _ in range(64):
        z = pg.raw_ops.AddV2(x=good, y=x)
    try:
        bad.numpy()
        outcome = "no error"
    except pg.errors.InvalidArgumentError as e:
        outcome = "planted" in str(e) and "CheckNumerics" in str(e)
    ok = (np.array_equal(y.numpy(), base + base) and np.array_equal(good.numpy(), base * base)
          and np.array_equal(z.numpy(), base * base + base))
print(before, after, outcome, ok)
"""


def test_finished_ops_settle_without_a_synchronisation_before_any_error(rng):
    """In a process whose device never reported an error, ops whose work is
    done are settled as later ops launch, so the log of unsettled ops stays
    short without a synchronisation; an op failing among them still fails
    alone and the others keep their values."""
    import subprocess
    import sys
    seed = int(rng.integers(1 << 30))
    proc = subprocess.run([sys.executable, "-c", _SETTLE_CHILD, str(seed)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    before, after, outcome, ok = proc.stdout.split()
    # 364 ops launched, no synchronisation: without settling in passing
    # the log would hold them all
    assert int(before) < 300 and int(after) < 100, proc.stdout
    assert outcome == "True", proc.stdout         # the planted failure, attributed
    assert ok == "True", proc.stdout


_SYNC_READS_CHILD = r"""
import numpy as np, pluggable as pg
from pluggable._core import ffi, lib
dev = pg.get_device("MY_DEVICE:0")
rng = np.random.default_rng(int(__import__("sys").argv[1]))
reads = [0]
real = dev._se.get_event_status

def _count(d, ev):
    reads[0] += 1
    return real(d, ev)

counting = ffi.callback(ffi.typeof(real), _count)

def sync_reads(x, n=40):  # fewer than the log length at which ops settle in passing
    y = x
    for _ in range(n):
        y = pg.raw_ops.AddV2(x=y, y=x)
    reads[0] = 0
    dev._se.get_event_status = counting
    try:
        pg.synchronize()
    finally:
        dev._se.get_event_status = real
    return reads[0], lib.pg_device_unsettled_ops(dev._c), y

with pg.device("MY_DEVICE:0"):
    base = rng.standard_normal(8)
    x = pg.constant(base)
    r1, left1, y1 = sync_reads(x)
    bad = pg.raw_ops.CheckNumerics(tensor=pg.constant(np.array([np.nan])), message="planted")
    try:
        pg.synchronize()
        raised = False
    except pg.errors.InvalidArgumentError:
        raised = True
    r2, left2, y2 = sync_reads(x)
    ok = np.allclose(y1.numpy(), base * 41) and np.allclose(y2.numpy(), base * 41)
print(r1, left1, raised, r2, left2, ok)
"""


def test_a_synchronisation_reads_verdicts_only_after_an_error(rng):
    """Before the device ever reported an error, a synchronisation that
    drains the stream without one settles every op launched before it
    without reading their events; after an error it reads each verdict.
    Either way the log is empty afterwards and the values are right."""
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, "-c", _SYNC_READS_CHILD,
                           str(int(rng.integers(1 << 30)))],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    r1, left1, raised, r2, left2, ok = proc.stdout.split()
    assert (int(r1), int(left1)) == (0, 0), proc.stdout
    assert raised == "True", proc.stdout
    assert int(r2) >= 40 and int(left2) == 0, proc.stdout
    assert ok == "True", proc.stdout


def test_finished_ops_settle_without_a_synchronisation_after_an_error():
    """After the device reported an error, every verdict is read when ops
    settle in passing; the log stays short all the same."""
    from pluggable._core import lib
    dev = pg.get_device(DEVICE)
    with pg.device(DEVICE):
        bad = pg.raw_ops.CheckNumerics(tensor=_c([np.nan]), message="reported")
        with pytest.raises(pg.errors.InvalidArgumentError, match="reported"):
            bad.numpy()
        x = _c(np.arange(4.0))
        for _ in range(300):
            y = pg.raw_ops.AddV2(x=x, y=x)
        dev.wait_for_work()
        for _ in range(64):
            y = pg.raw_ops.AddV2(x=x, y=x)
        assert lib.pg_device_unsettled_ops(dev._c) < 100  # of 364 launched
        np.testing.assert_array_equal(y.numpy(), np.arange(4.0) * 2)


@pytest.mark.parametrize("kind", ["check", "divide"])
def test_two_failures_before_a_synchronisation_each_fail_their_own_op(rng, kind):
    """Two failing ops with a good one between them and no synchronisation
    in between: each failing op's event says ERROR (the stream keeps the
    first message only), so each fails on its own and the good op keeps
    its value. (CheckNumerics, and integer division by zero, whose kernel
    reports through another path of the host device.)"""
    a = rng.standard_normal(16)

    def failing(tag):
        if kind == "check":
            return pg.raw_ops.CheckNumerics(tensor=_c([1.0, np.nan]), message=tag)
        return pg.raw_ops.FloorDiv(x=_c([7, 8], np.int32), y=_c([1, 0], np.int32))
    with pg.device(DEVICE):
        first = failing("first failure")
        good = pg.raw_ops.AddV2(x=_c(a), y=_c(a))
        second = failing("second failure")
        with pytest.raises(pg.errors.InvalidArgumentError):
            pg.synchronize()
        np.testing.assert_array_equal(good.numpy(), a + a)
        op = "CheckNumerics" if kind == "check" else "FloorDiv"
        with pytest.raises(pg.errors.InvalidArgumentError, match=op):
            first.numpy()
        with pytest.raises(pg.errors.InvalidArgumentError, match=op):
            second.numpy()
