"""dispatch.Prepared and dispatch.host_input: one op with fixed attributes,
run many times with inputs of one signature (what a process group's
collectives do on every call). The result must be exactly what the general
path gives, and every condition that the general path handles (hooks,
placement logging, a configuration change, another signature) must take it."""
from __future__ import annotations

import numpy as np
import pytest

import pluggable as pg
from pluggable.framework import config
from pluggable.runtime import dispatch
from pluggable.tools.testing import kernel_calls

DEV = "MY_DEVICE:0"


@pytest.fixture
def general_calls(monkeypatch):
    """Counts the calls that take the general path (dispatch.execute)."""
    n = [0]
    real = dispatch.execute

    def counting(op, inputs, given):
        n[0] += 1
        return real(op, inputs, given)
    monkeypatch.setattr(dispatch, "execute", counting)
    return n


def _sum(prep, x, axis):
    return prep([x, axis])[0]


def test_later_calls_skip_the_general_path_and_match_numpy(general_calls, rng):
    dev = pg.get_device(DEV)
    prep = dispatch.Prepared("Sum", dev, {"keep_dims": True})
    axis = dispatch.host_input([1], pg.int32)
    handle = axis._h
    for i in range(6):
        a = rng.standard_normal((3, 5)).astype(np.float32)
        with pg.device(DEV):
            x = pg.constant(a)
        with pg.testing.expect_kernel("Sum", "MY_DEVICE"):
            y = _sum(prep, x, axis)
        assert y.device.endswith(DEV) and y.shape == (3, 1)
        np.testing.assert_allclose(y.numpy(), a.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-5)
    assert general_calls[0] == 1          # the first call only
    assert axis._h == handle and axis.numpy().tolist() == [1]   # wrapped once, unchanged


def test_another_signature_takes_the_general_path(general_calls, rng):
    dev = pg.get_device(DEV)
    prep = dispatch.Prepared("Sum", dev, {"keep_dims": False})
    axis = dispatch.host_input([0], pg.int32)
    a32 = rng.standard_normal((4, 2)).astype(np.float32)
    a64 = rng.standard_normal((4, 2))
    with pg.device(DEV):
        x32, x64 = pg.constant(a32), pg.constant(a64)
    np.testing.assert_allclose(_sum(prep, x32, axis).numpy(), a32.sum(0), rtol=1e-5, atol=1e-5)
    y = _sum(prep, x64, axis)        # float64: not the prepared plan
    assert y.dtype is pg.float64
    np.testing.assert_allclose(y.numpy(), a64.sum(0), rtol=1e-12, atol=1e-12)
    assert general_calls[0] == 2
    # a CPU tensor where the device tensor was: the general path places it
    # on the prepared device (copying it), as execute does under that scope
    y = _sum(prep, pg.constant(a32), axis)
    assert y.device.endswith(DEV)
    np.testing.assert_allclose(y.numpy(), a32.sum(0), rtol=1e-5, atol=1e-5)
    assert general_calls[0] == 3


def test_hooks_and_configuration_changes_take_the_general_path(general_calls, rng, hook_sees):
    dev = pg.get_device(DEV)
    prep = dispatch.Prepared("Sum", dev, {"keep_dims": False})
    axis = dispatch.host_input([0], pg.int32)
    a = rng.standard_normal((4, 3)).astype(np.float32)
    with pg.device(DEV):
        x = pg.constant(a)
    _sum(prep, x, axis)
    _sum(prep, x, axis)
    assert general_calls[0] == 1
    with hook_sees() as seen:
        y = _sum(prep, x, axis)
    assert seen == ["Sum"] and general_calls[0] == 2
    np.testing.assert_allclose(y.numpy(), a.sum(0), rtol=1e-5, atol=1e-5)
    config.bump_version()               # a registration: cached plans are stale
    y = _sum(prep, x, axis)
    assert general_calls[0] == 3
    _sum(prep, x, axis)                 # ... and the new plan is kept
    assert general_calls[0] == 3
    np.testing.assert_allclose(y.numpy(), a.sum(0), rtol=1e-5, atol=1e-5)


def test_errors_are_those_of_the_general_path(rng):
    dev = pg.get_device(DEV)
    prep = dispatch.Prepared("Sum", dev, {"keep_dims": False})
    with pg.device(DEV):
        x = pg.constant(rng.standard_normal((2, 2)).astype(np.float32))
    good = dispatch.host_input([1], pg.int32)
    _sum(prep, x, good)
    _sum(prep, x, good)
    bad = dispatch.host_input([5], pg.int32)      # same signature, out-of-range value
    with pytest.raises(pg.errors.InvalidArgumentError, match="out of range|Invalid reduction"):
        _sum(prep, x, bad)


def test_run_group_runs_prepared_ops_at_once_on_their_fast_path(rng):
    """``dispatch.run_group`` (a collective's participants in one call into
    the core) runs ops whose plans their first calls made, and nothing at
    all where one of them would take the general path."""
    a, b = (rng.standard_normal((3, 4)).astype(np.float32) for _ in range(2))
    with pg.device(DEV):
        x, y = pg.constant(a), pg.constant(b)
    add = dispatch.Prepared("AddV2", x.device_object, {})
    mul = dispatch.Prepared("Mul", x.device_object, {})
    calls = [(add, [x, y]), (mul, [x, y]), (add, [y, y])]
    assert dispatch.run_group(calls) is None      # no plan yet: nothing ran
    add([x, y])
    mul([x, y])                                   # the general path keeps the plans
    with pg.testing.expect_kernel("AddV2", "MY_DEVICE", 2), \
            pg.testing.expect_kernel("Mul", "MY_DEVICE", 1):
        outs = dispatch.run_group(calls)
    assert [o.device for o in outs] == [x.device] * 3
    np.testing.assert_array_equal(outs[0].numpy(), a + b)
    np.testing.assert_array_equal(outs[1].numpy(), a * b)
    np.testing.assert_array_equal(outs[2].numpy(), b + b)
    with pg.device(DEV):
        other = pg.constant(rng.standard_normal((3, 4)))    # float64: another signature
    assert dispatch.run_group([(add, [x, y]), (add, [other, other])]) is None


def test_run_group_reports_the_first_failed_participant_after_all_returned():
    """A participant whose kernel refuses its inputs fails the call with its
    typed error; every participant has returned by then."""
    from pluggable.distribute import collectives
    with pg.device(DEV):
        x = pg.constant(np.ones(4, np.float32))
    good = collectives._call("CollectiveReduceV2", x.device_object,
                             collectives.REDUCE_ATTRS["sum"], 5.0, 1, 987654, 1, [x])
    np.testing.assert_array_equal(good[0](good[1])[0].numpy(), np.ones(4))   # keeps the plan
    bad_size = dispatch.host_input(0, pg.int32)       # group_size 0: refused at once
    bad = (good[0], [x, bad_size] + good[1][2:])
    with pytest.raises(pg.errors.InvalidArgumentError, match="group_size must be at least 1"):
        dispatch.run_group([bad, bad])
    outs = dispatch.run_group([good])                 # usable afterwards
    np.testing.assert_array_equal(outs[0].numpy(), np.ones(4))


def test_run_group_from_several_threads_at_once(rng):
    """Groups from several threads share the core's participant threads:
    every result is right and every call returns."""
    import threading
    a, b = (rng.standard_normal((5,)).astype(np.float32) for _ in range(2))
    with pg.device(DEV):
        x, y = pg.constant(a), pg.constant(b)
    add = dispatch.Prepared("AddV2", x.device_object, {})
    mul = dispatch.Prepared("Mul", x.device_object, {})
    add([x, y])
    mul([x, y])
    calls = [(add, [x, y]), (mul, [x, y]), (add, [x, x]), (mul, [y, y])]
    want = [a + b, a * b, a + a, b * b]
    errors = []

    def worker():
        try:
            for _ in range(200):
                outs = dispatch.run_group(calls)
                for o, w in zip(outs, want):
                    np.testing.assert_array_equal(o.numpy(), w)
        except Exception as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)
    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a run_group call did not return"
    assert not errors, errors[0]


def test_run_group_refuses_more_than_1024_participants_before_running_any():
    with pg.device(DEV):
        x = pg.constant(np.ones(2, np.float32))
    add = dispatch.Prepared("AddV2", x.device_object, {})
    add([x, x])
    before = kernel_calls("AddV2", "MY_DEVICE")
    with pytest.raises(pg.errors.InvalidArgumentError, match="1025 participants; at most 1024"):
        dispatch.run_group([(add, [x, x])] * 1025)
    assert kernel_calls("AddV2", "MY_DEVICE") == before
