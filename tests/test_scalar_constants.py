"""Python scalar operands on a plugin device become cached device constants
(runtime.constants): no host-to-device copy after the first call, and never a
different result from the uncached path."""
from __future__ import annotations

import math

import numpy as np
import pytest

import pluggable as pg
from pluggable.runtime import constants
from pluggable.runtime.device import Device

DEV = "MY_DEVICE:0"


@pytest.fixture(autouse=True)
def _fresh_cache():
    constants.clear()
    yield
    constants.clear()


@pytest.fixture
def copies(monkeypatch):
    """Counts host-to-device copies made through Device.copy_in."""
    n = [0]
    real = Device.copy_in

    def counting(self, t):
        n[0] += 1
        return real(self, t)
    monkeypatch.setattr(Device, "copy_in", counting)
    return n


def _rand(rng, dtype, n=7):
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(n).astype(dtype)
    return rng.integers(-50, 50, n).astype(dtype)


@pytest.mark.parametrize("scalar", [2.5, -3.0, 7, True, False, 0.0, -0.0, 1e30])
def test_float_tensor_with_scalar_matches_numpy(scalar):
    rng = np.random.default_rng()
    x = _rand(rng, np.float32)
    with pg.device(DEV):
        a = pg.constant(x)
        for _ in range(3):  # the first call fills the cache, later ones hit it
            with pg.testing.expect_kernel("Mul", "MY_DEVICE"):
                r1 = a * scalar
            r2 = scalar * a
            r3 = a + scalar
    want = x * np.float32(scalar)
    np.testing.assert_array_equal(r1.numpy(), want)
    np.testing.assert_array_equal(np.signbit(r1.numpy()), np.signbit(want))
    np.testing.assert_array_equal(r2.numpy(), np.float32(scalar) * x)
    np.testing.assert_array_equal(r3.numpy(), x + np.float32(scalar))
    assert r1.dtype is pg.float32 and r1.device.endswith(DEV)


def test_no_copy_after_first_call(copies):
    x = np.random.default_rng().standard_normal(5).astype(np.float32)
    with pg.device(DEV):
        a = pg.constant(x)
        b = pg.constant(x)
        a * b
        copies[0] = 0
        first = a * 2.0
        after_first = copies[0]
        for _ in range(20):
            r = a * 2.0
            r = pg.maximum(r, 0.5)
        second = copies[0] - after_first
    assert after_first == 1
    assert second == 1  # only the constant 0.5, once
    np.testing.assert_array_equal(first.numpy(), x * 2)
    np.testing.assert_array_equal(r.numpy(), np.maximum(x * 2, np.float32(0.5)))


def test_signed_zero_keyed_apart():
    x = np.abs(np.random.default_rng().standard_normal(4).astype(np.float32)) + 1
    with pg.device(DEV):
        a = pg.constant(x)
        pos = a * 0.0
        neg = a * -0.0
        pos2 = a * 0.0
    assert not np.signbit(pos.numpy()).any()
    assert np.signbit(neg.numpy()).all()
    assert not np.signbit(pos2.numpy()).any()


def test_nan_and_infinities():
    x = np.random.default_rng().standard_normal(4).astype(np.float32)
    with pg.device(DEV):
        a = pg.constant(x)
        for _ in range(2):
            n1 = a + float("nan")
            n2 = a + math.nan
            inf = a + math.inf
            ninf = a - math.inf
    assert np.isnan(n1.numpy()).all() and np.isnan(n2.numpy()).all()
    np.testing.assert_array_equal(inf.numpy(), np.full(4, np.inf, np.float32))
    np.testing.assert_array_equal(ninf.numpy(), np.full(4, -np.inf, np.float32))


def test_bool_int_float_are_distinct_entries():
    x = np.random.default_rng().standard_normal(3).astype(np.float32)
    with pg.device(DEV):
        a = pg.constant(x)
        r = [a * v for v in (True, 1, 1.0)]
    assert constants.cached() == 3
    for t in r:
        np.testing.assert_array_equal(t.numpy(), x)
    with pg.device(DEV):
        flags = pg.constant(np.array([True, False, True]))
        eq = pg.equal(flags, True)
        i = pg.constant(np.array([1, 0, 2], np.int32))
        ieq = pg.equal(i, 1)
    np.testing.assert_array_equal(eq.numpy(), [True, False, True])
    np.testing.assert_array_equal(ieq.numpy(), [True, False, False])


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float64, np.float16])
def test_dtype_follows_the_tensor(dtype):
    rng = np.random.default_rng()
    x = _rand(rng, dtype)
    with pg.device(DEV):
        a = pg.constant(x)
        r = a * 3
        s = 3 - a
    assert r.dtype is pg.as_dtype(dtype) and s.dtype is pg.as_dtype(dtype)
    np.testing.assert_array_equal(r.numpy(), x * dtype(3))
    np.testing.assert_array_equal(s.numpy(), dtype(3) - x)


def test_refused_conversions_still_raise_and_are_not_cached():
    with pg.device(DEV):
        i = pg.constant(np.arange(4, dtype=np.int32))
        with pytest.raises(TypeError, match="fraction"):
            i * 2.5
        small = pg.constant(np.arange(4, dtype=np.int8))
        with pytest.raises(pg.errors.InvalidArgumentError, match="out of range"):
            small + 300
    assert constants.cached() == 0


def test_bounded_least_recently_used(monkeypatch):
    monkeypatch.setattr(constants, "CONSTANT_CACHE_SIZE", 4)
    with pg.device(DEV):
        a = pg.constant(np.ones(2, np.float32))
        a * 100.0
        for v in range(10):
            a * float(v)
            a * 100.0  # kept recent
            assert constants.cached() <= 4
        r = a * 100.0
    keys = [k[1] for k in constants._table]
    assert 100.0 in keys and len(keys) == 4
    np.testing.assert_array_equal(r.numpy(), [100.0, 100.0])


def test_scope_elsewhere_moves_the_constant():
    x = np.random.default_rng().standard_normal(3).astype(np.float32)
    with pg.device(DEV):
        a = pg.constant(x)
    with pg.device("CPU:0"):
        r = a * 2.0
    assert r.device.endswith("CPU:0")
    np.testing.assert_array_equal(r.numpy(), x * 2)


def test_cpu_ops_cache_nothing():
    x = np.random.default_rng().standard_normal(3).astype(np.float32)
    with pg.device("CPU:0"):
        a = pg.constant(x)
        r = a * 2.0
    np.testing.assert_array_equal(r.numpy(), x * 2)
    assert r.device.endswith("CPU:0")
    assert constants.cached() == 0


def test_gradient_through_scalar_op():
    x = np.random.default_rng().standard_normal(3).astype(np.float32)
    with pg.device(DEV):
        v = pg.constant(x)
        with pg.GradientTape() as tape:
            tape.watch(v)
            y = pg.reduce_sum(v * 3.0)
        g = tape.gradient(y, v)
    np.testing.assert_allclose(g.numpy(), np.full(3, 3.0, np.float32))


# Python scalars converted for an input of known dtype (every eager call with
# a scalar operand) take plain comparisons in to_array; the result must be
# what the general numpy path gives, refusals included.
@pytest.mark.parametrize("dtype", [pg.int8, pg.uint8, pg.int16, pg.int32, pg.int64, pg.uint64,
                                   pg.float16, pg.bfloat16, pg.float32, pg.float64, pg.bool])
def test_scalar_conversion_matches_the_array_path(dtype, rng):
    from pluggable.framework import tensor as tensor_mod
    info = (np.iinfo(dtype.as_numpy_dtype) if dtype.is_integer else None)
    values = [True, False, 0, 1, -1, 2**31, -2**31 - 1, 2**63, 2**70, -2**64, 0.0, -0.0, 2.5,
              float("inf"), float("nan"), 1e300]
    values += [int(v) for v in rng.integers(-2**62, 2**62, 8)]
    values += [float(v) for v in rng.standard_normal(8) * 1e4]
    if info is not None:
        values += [int(info.min), int(info.max), int(info.min) - 1, int(info.max) + 1]

    def outcome(fn, v):
        try:
            with np.errstate(all="ignore"):
                a = fn(v)
            return ("ok", a.dtype, a.shape, a.tobytes())
        except (TypeError, pg.errors.InvalidArgumentError) as exc:
            msg = str(exc)
            return (type(exc).__name__, "out of range" in msg, "fraction" in msg,
                    "non-finite" in msg)

    def general(v):   # the array path: a 0-d array goes through numpy's checks
        return tensor_mod.to_array(np.asarray(v), dtype)
    for v in values:
        if np.asarray(v).dtype == object:    # ints beyond 64 bits: typed, not OverflowError
            if dtype.is_integer:
                with pytest.raises(pg.errors.InvalidArgumentError, match="out of range"):
                    tensor_mod.to_array(v, dtype)
                with pytest.raises(pg.errors.InvalidArgumentError, match="out of range"):
                    tensor_mod.to_array([1, v], dtype)
            continue
        assert outcome(lambda x: tensor_mod.to_array(x, dtype), v) == outcome(general, v), v
    # every refusal still raises through to_array
    if info is not None:
        with pytest.raises(pg.errors.InvalidArgumentError, match="out of range"):
            tensor_mod.to_array(int(info.max) + 1, dtype)
        with pytest.raises(TypeError, match="fraction"):
            tensor_mod.to_array(2.5, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.int64, np.bool_])
def test_zeros_ones_and_fill_copy_their_value_once(copies, dtype):
    """pg.zeros, pg.ones and pg.fill with a scalar on a plugin device use the
    cached device constant of their value: one copy for each value, none
    after, whatever the shape."""
    rng = np.random.default_rng()
    shapes = [tuple(int(d) for d in rng.integers(1, 6, k)) for k in (1, 2, 3, 2)]
    value = np.asarray(rng.integers(2, 9), dtype)[()]
    with pg.device(DEV):
        pg.zeros([1], dtype)     # the op's plan and kernel (and their copies)
        copies[0] = 0
        for s in shapes:
            z, o, f = pg.zeros(s, dtype), pg.ones(list(s), dtype), pg.fill(s, value)
            assert z.device.endswith(DEV) and f.device.endswith(DEV)
            np.testing.assert_array_equal(z.numpy(), np.zeros(s, dtype))
            np.testing.assert_array_equal(o.numpy(), np.ones(s, dtype))
            np.testing.assert_array_equal(f.numpy(), np.full(s, value, dtype))
            assert z.dtype.as_numpy_dtype == np.dtype(dtype) == f.dtype.as_numpy_dtype
    # zeros, ones and the value, once each (0 and 1 may be the same as `value`
    # only for bool, where the values 0/1 are False/True)
    assert copies[0] <= 3


@pytest.mark.parametrize("spelling", ["float32", np.float32, np.dtype("float32"), pg.float32])
def test_zeros_and_ones_take_the_fast_path_for_every_dtype_spelling(monkeypatch, spelling):
    """However the dtype is written, after the first call pg.zeros and
    pg.ones reach the Fill kernel without the general path; dtypes without
    a Python scalar (bfloat16) and bad dtypes keep their usual outcome."""
    with pg.device(DEV):
        pg.zeros([2], spelling), pg.ones([2], spelling)
        monkeypatch.setitem(pg.raw_ops.Fill.__globals__, "execute",
                            lambda *a, **k: pytest.fail("took the general path"))
        with pg.testing.expect_kernel("Fill", "MY_DEVICE"):
            z, o = pg.zeros([3, 2], spelling), pg.ones((1, 4), spelling)
        monkeypatch.undo()
        np.testing.assert_array_equal(z.numpy(), np.zeros((3, 2), np.float32))
        np.testing.assert_array_equal(o.numpy(), np.ones((1, 4), np.float32))
        assert z.dtype is pg.float32 and o.dtype is pg.float32
        b = pg.ones([2], pg.bfloat16)
        assert b.dtype is pg.bfloat16 and b.numpy().astype(np.float32).tolist() == [1.0, 1.0]
        for bad in ("nope", [1]):
            with pytest.raises(TypeError, match="not a supported dtype"):
                pg.zeros([2], bad)


def test_zeros_and_ones_remember_their_fill_inputs(monkeypatch):
    """A repeated pg.zeros / pg.ones of a shape of Python ints is one Fill
    with the inputs found the first time: per device scope, dtype and
    value, so each result is on the scope's device with the right values;
    a shape of floats still raises, and constants.clear forgets them."""
    from pluggable.ops import math_ops
    found = []
    real = math_ops.fill_scalar_inputs

    def counting(*args):
        found.append(args)
        return real(*args)
    monkeypatch.setattr(math_ops, "fill_scalar_inputs", counting)
    for _ in range(3):
        for dev in (DEV, "CPU:0"):
            with pg.device(dev):
                z, o = pg.zeros([2, 3]), pg.ones((2, 3), "int32")
                z16 = pg.zeros([4], pg.float16)
            for t, want in ((z, np.zeros((2, 3), np.float32)), (o, np.ones((2, 3), np.int32)),
                            (z16, np.zeros(4, np.float16))):
                assert t.device.endswith(dev)
                assert t.dtype.as_numpy_dtype == want.dtype
                np.testing.assert_array_equal(t.numpy(), want)
    # MY_DEVICE: once per (shape, dtype, value); the CPU looks every time (and
    # takes the general path)
    assert len(found) == 3 + 3 * 3
    with pg.device(DEV):
        with pytest.raises(TypeError, match="integers"):
            pg.zeros([2.0, 3])
    constants.clear()
    found.clear()
    with pg.device(DEV):
        np.testing.assert_array_equal(pg.zeros([2, 3]).numpy(), np.zeros((2, 3), np.float32))
    assert len(found) == 1


def test_broadcast_to_and_tile_take_the_fast_path(monkeypatch, rng):
    """pg.broadcast_to and pg.tile with a list or tuple of ints pass the
    cached host vector, so a repeated call reaches the kernel without the
    general path; the results match numpy, and bad shapes still raise."""
    a = rng.standard_normal((1, 3)).astype(np.float32)
    with pg.device(DEV):
        x = pg.constant(a)
        pg.broadcast_to(x, [4, 3]), pg.tile(x, (2, 2))
        monkeypatch.setitem(pg.raw_ops.BroadcastTo.__globals__, "execute",
                            lambda *a, **k: pytest.fail("took the general path"))
        with pg.testing.expect_kernel("BroadcastTo", "MY_DEVICE"):
            b = pg.broadcast_to(x, [4, 3])
        with pg.testing.expect_kernel("Tile", "MY_DEVICE"):
            t = pg.tile(x, (2, 2))
        monkeypatch.undo()
        np.testing.assert_array_equal(b.numpy(), np.broadcast_to(a, (4, 3)))
        np.testing.assert_array_equal(t.numpy(), np.tile(a, (2, 2)))
        np.testing.assert_array_equal(pg.broadcast_to(x, np.array([2, 3])).numpy(),
                                      np.broadcast_to(a, (2, 3)))
        with pytest.raises(pg.errors.InvalidArgumentError):
            pg.broadcast_to(x, [4, 2])
        with pytest.raises((TypeError, pg.errors.InvalidArgumentError)):
            pg.broadcast_to(x, [4.5, 3])


def test_index_vectors_are_cached_read_only_and_range_checked():
    a = constants.host_vector((1, 0, 2), pg.int32)
    assert constants.host_vector((1, 0, 2), pg.int32) is a
    assert a.dtype is pg.int32 and a._h is not None
    np.testing.assert_array_equal(a.numpy(), [1, 0, 2])
    with pytest.raises(ValueError):
        a._a[0] = 5                      # read-only: a shared input stays what it was
    big = 1 << 40
    assert constants.host_vector((big, 2), pg.int32) is None   # does not fit int32
    auto = constants.host_vector((big, 2))
    assert auto.dtype is pg.int64 and auto.numpy().tolist() == [big, 2]
    assert constants.host_vector((3, 2)).dtype is pg.int32
    assert constants.host_vector((1 << 63, 0)) is None          # fits no index type
    # a reshape to a dimension beyond int32 still gets its usual error
    with pg.device(DEV):
        x = pg.constant(np.ones(4, np.float32))
        with pytest.raises(pg.errors.InvalidArgumentError, match="cannot reshape"):
            pg.reshape(x, [big, -1])


def test_fill_value_goes_where_the_kernel_takes_it(monkeypatch, copies):
    """Under a plugin device's scope pg.zeros/ones/fill take the raw_ops fast
    path with the value where that device's Fill kernel takes it: on the
    device for MY_DEVICE (a cached device constant), in host memory for the
    CUDA plugin (a cached host tensor, no copy at all)."""
    devices = ["MY_DEVICE:0"] + (["GPU:0"] if pg.list_physical_devices("GPU") else [])
    rng = np.random.default_rng()
    for dev in devices:
        with pg.device(dev):
            pg.zeros([1]), pg.ones([1], pg.int32), pg.fill([1], 0.5)   # plans
        on_host = "value" in pg.registry.find_kernel(
            "Fill", dev.split(":")[0], {"T": pg.float32}).host_args
        assert on_host == dev.startswith("GPU")
        copies[0] = 0

        def no_general_path(*args, **kwargs):
            raise AssertionError("took the general path")
        with monkeypatch.context() as m, pg.device(dev):
            m.setitem(pg.raw_ops.Fill.__globals__, "execute", no_general_path)
            for _ in range(3):
                s = tuple(int(d) for d in rng.integers(1, 5, 2))
                v = float(rng.integers(-9, 9)) / 2
                z, o, f = pg.zeros(s), pg.ones(s, pg.int32), pg.fill(s, v)
                assert z.device.endswith(dev) and f.device.endswith(dev)
                np.testing.assert_array_equal(z.numpy(), np.zeros(s, np.float32))
                np.testing.assert_array_equal(o.numpy(), np.ones(s, np.int32))
                np.testing.assert_array_equal(f.numpy(), np.full(s, v, np.float32))
        assert copies[0] <= (0 if on_host else 3)   # only new fill values, once each


def test_fill_without_a_scope_lands_where_placement_puts_it(monkeypatch):
    """Without a device scope pg.zeros/fill run where the general path would
    place a Fill of host inputs, and after the first call take the fast
    path there."""
    want_dev = pg.raw_ops.Fill(dims=np.array([2], np.int32), value=np.float32(3)).device
    pg.zeros([1]), pg.fill([1], 0.25)
    with monkeypatch.context() as m:
        m.setitem(pg.raw_ops.Fill.__globals__, "execute",
                  lambda *a, **k: pytest.fail("took the general path"))
        z, f = pg.zeros([2, 3]), pg.fill([4], 0.25)
    assert z.device == want_dev and f.device == want_dev
    np.testing.assert_array_equal(z.numpy(), np.zeros((2, 3), np.float32))
    np.testing.assert_array_equal(f.numpy(), np.full(4, 0.25, np.float32))
