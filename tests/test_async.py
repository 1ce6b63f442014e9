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
