"""Hooks around op execution (pluggable.runtime.hooks): what graph tracing,
gradient tapes and the profiler build on."""
import numpy as np
import pytest

import pluggable as pg
from pluggable.runtime import dispatch, hooks


@pytest.fixture
def recorder():
    seen = []

    def wrapper(op, inputs, attrs, run):
        seen.append(("before", op.name))
        out = run(op, inputs, attrs)
        seen.append(("after", op.name, [o.shape for o in out]))
        return out
    hooks.install(wrapper)
    yield seen
    hooks.uninstall(wrapper)


@pytest.mark.parametrize("device", ["CPU:0", "MY_DEVICE:0"])
def test_every_call_is_seen_including_the_fast_path(recorder, device, rng):
    a = rng.standard_normal(5).astype(np.float32)
    with pg.device(device):
        x = pg.constant(a)
        for _ in range(3):  # later calls would take the raw_ops fast path
            y = pg.raw_ops.AddV2(x=x, y=x)
    np.testing.assert_array_equal(y.numpy(), a + a)
    assert recorder.count(("before", "AddV2")) == 3
    assert recorder.count(("after", "AddV2", [(5,)])) == 3


def test_uninstall_restores_the_plain_path(rng):
    seen = []

    def wrapper(op, inputs, attrs, run):
        seen.append(op.name)
        return run(op, inputs, attrs)
    hooks.install(wrapper)
    hooks.install(wrapper)  # idempotent
    pg.add(1.0, 2.0)
    hooks.uninstall(wrapper)
    assert not hooks.active[0]
    pg.add(1.0, 2.0)
    assert seen == ["AddV2"]


def test_wrappers_nest_in_install_order_and_may_short_circuit():
    order = []

    def outer(op, inputs, attrs, run):
        order.append("outer")
        return run(op, inputs, attrs)

    def inner(op, inputs, attrs, run):
        order.append("inner")
        return [pg.constant(np.float32(42.0))]  # does not run the op
    hooks.install(outer)
    hooks.install(inner)
    try:
        out = pg.raw_ops.Neg(x=pg.constant(np.float32(1.0)))
    finally:
        hooks.uninstall(outer)
        hooks.uninstall(inner)
    assert order == ["outer", "inner"]
    assert out.numpy() == 42.0


def test_wrapper_sees_raw_python_inputs_before_conversion():
    seen = []

    def wrapper(op, inputs, attrs, run):
        seen.append([type(x).__name__ for x in inputs])
        return run(op, inputs, attrs)
    hooks.install(wrapper)
    try:
        out = pg.raw_ops.Mul(x=pg.constant(np.float32(3.0)), y=2.0)
    finally:
        hooks.uninstall(wrapper)
    assert seen == [["Tensor", "float"]]
    assert out.numpy() == 6.0


def test_an_observer_keeps_the_fast_path_and_sees_each_call(monkeypatch, rng):
    """A wrapper installed with an observer: calls that the raw_ops fast path
    can take stay on it (the general path would raise) and are reported to
    the observer with their tensors and every attribute; the general path
    still calls the wrapper."""
    a = rng.standard_normal((4, 3)).astype(np.float32)
    b = rng.standard_normal((5, 3)).astype(np.float32)
    wrapped, observed = [], []

    def wrapper(op, inputs, attrs, run):
        wrapped.append(op.name)
        return run(op, inputs, attrs)

    def observer(op, inputs, attrs, outputs, resolved):
        observed.append((op.name, inputs, dict(attrs), outputs, dict(resolved)))

    dispatch.invalidate()  # no plans from earlier tests
    with pg.device("MY_DEVICE:0"):
        x, y = pg.constant(a), pg.constant(b)
        pg.raw_ops.MatMul(a=x, b=y, transpose_b=True)  # makes the plan
        hooks.install(wrapper, observer=observer)
        try:
            assert hooks.active[0] and hooks.fast[0]
            pg.raw_ops.Neg(x=x)  # no plan yet: the general path, through the wrapper
            assert wrapped == ["Neg"] and observed == []

            def no_general_path(*args, **kwargs):
                raise AssertionError("took the general path")
            monkeypatch.setitem(pg.raw_ops.MatMul.__globals__, "execute", no_general_path)
            out = pg.raw_ops.MatMul(a=x, b=y, transpose_b=True)
        finally:
            hooks.uninstall(wrapper)
    assert not hooks.active[0] and hooks.fast[0]
    np.testing.assert_allclose(out.numpy(), a @ b.T, rtol=1e-5, atol=1e-5)
    assert wrapped == ["Neg"]
    ((name, inputs, attrs, outputs, resolved),) = observed
    assert name == "MatMul" and inputs[0] is x and inputs[1] is y and outputs == [out]
    assert attrs == {"transpose_b": True}
    assert resolved["transpose_a"] is False and resolved["transpose_b"] is True
    assert resolved["T"] is pg.float32


def test_a_wrapper_without_observer_closes_the_fast_path(rng):
    """Beside an observing wrapper, one that does not observe (as a profiler
    or tracer) sees every call: the fast path is closed until it goes."""
    a = rng.standard_normal(6).astype(np.float32)
    seen, observed = [], []

    def watcher(op, inputs, attrs, run):
        return run(op, inputs, attrs)

    def timer(op, inputs, attrs, run):
        seen.append(op.name)
        return run(op, inputs, attrs)
    with pg.device("MY_DEVICE:0"):
        x = pg.constant(a)
        pg.raw_ops.Exp(x=x)
        hooks.install(watcher, observer=lambda *args: observed.append(args[0].name))
        hooks.install(timer)
        try:
            assert not hooks.fast[0]
            for _ in range(3):
                out = pg.raw_ops.Exp(x=x)
            hooks.uninstall(timer)
            assert hooks.fast[0]
            pg.raw_ops.Exp(x=x)
        finally:
            hooks.uninstall(timer)
            hooks.uninstall(watcher)
    np.testing.assert_allclose(out.numpy(), np.exp(a), rtol=1e-6)
    assert seen == ["Exp"] * 3 and observed == ["Exp"]
