"""Hooks around op execution (pluggable.runtime.hooks): what graph tracing,
gradient tapes and the profiler build on."""
import numpy as np
import pytest

import pluggable as pg
from pluggable.runtime import hooks


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
