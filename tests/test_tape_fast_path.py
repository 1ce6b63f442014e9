"""Eager training on the fast paths: under a GradientTape, op calls, reads
of variables given as inputs and optimizer updates skip dispatch's general
path (the tape records them through ``hooks.observe``), and the gradients
and updates are the ones numpy computes."""
import numpy as np
import pytest

import pluggable as pg
from pluggable.runtime import dispatch


@pytest.fixture(params=["MY_DEVICE:0", "GPU:0"])
def device(request):
    if request.param.startswith("GPU") and not pg.list_physical_devices("GPU"):
        pytest.skip("no GPU device present: the GPU runs are made on a machine with one")
    return request.param


@pytest.fixture
def general_calls(monkeypatch):
    """The op names of calls that reach dispatch's general path."""
    seen = []
    inner = dispatch._execute

    def counting(op, inputs, given):
        seen.append(op.name)
        return inner(op, inputs, given)
    monkeypatch.setattr(dispatch, "_execute", counting)
    return seen


def _layer(x, w, b):
    return pg.nn.relu(pg.nn.bias_add(pg.matmul(x, w), b))


def test_tape_records_fast_path_calls_with_the_right_gradients(general_calls, rng, device):
    a = rng.standard_normal((6, 5)).astype(np.float32)
    w0 = rng.standard_normal((5, 4)).astype(np.float32)
    b0 = rng.standard_normal(4).astype(np.float32)
    with pg.device(device):
        x = pg.constant(a)
        w, b = pg.Variable(w0), pg.Variable(b0)
        for _ in range(2):  # plans for the forward and backward calls
            with pg.GradientTape() as tape:
                loss = pg.reduce_sum(pg.square(_layer(x, w, b)))
            tape.gradient(loss, [w, b])
        general_calls.clear()
        with pg.GradientTape() as tape:
            y = _layer(x, w, b)
            loss = pg.reduce_sum(pg.square(y))
        forward = list(general_calls)
        gw, gb = tape.gradient(loss, [w, b])
    assert forward == [], f"forward calls on the general path: {forward}"
    assert tape.watched_variables() == (w, b)
    z = a @ w0 + b0
    dz = 2 * np.maximum(z, 0) * (z > 0)
    np.testing.assert_allclose(y.numpy(), np.maximum(z, 0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(loss.numpy(), np.sum(np.maximum(z, 0) ** 2), rtol=1e-4)
    np.testing.assert_allclose(gw.numpy(), a.T @ dz, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(gb.numpy(), dz.sum(0), rtol=1e-4, atol=1e-4)
    assert gw.device.endswith(device) and gb.device.endswith(device)


def test_a_variable_input_is_read_then_takes_the_fast_path(general_calls, rng, device):
    a = rng.standard_normal((3, 4)).astype(np.float32)
    v0 = rng.standard_normal((3, 4)).astype(np.float32)
    with pg.device(device):
        x, v = pg.constant(a), pg.Variable(v0)
        pg.raw_ops.AddV2(x=v, y=x)
        general_calls.clear()
        with pg.GradientTape() as tape:
            with pg.testing.expect_kernel("AddV2", device.split(":")[0]):
                s = pg.raw_ops.AddV2(x=v, y=x)
        assert general_calls == []
        (g,) = tape.gradient(s, [v])
        v.assign(v0 * 2)  # a read after an assignment sees the new value
        general_calls.clear()
        s2 = pg.raw_ops.AddV2(x=x, y=v)
    assert general_calls == []
    np.testing.assert_allclose(s.numpy(), v0 + a, rtol=1e-6)
    np.testing.assert_array_equal(g.numpy(), np.ones_like(v0))
    np.testing.assert_allclose(s2.numpy(), 2 * v0 + a, rtol=1e-6)


def test_watch_accessed_variables_off_records_nothing_on_the_fast_path(rng):
    v0 = rng.standard_normal(5).astype(np.float32)
    with pg.device("MY_DEVICE:0"):
        v = pg.Variable(v0)
        pg.exp(v)
        with pg.GradientTape(watch_accessed_variables=False) as tape:
            y = pg.exp(v)
        assert tape.gradient(y, v) is None
        with pg.GradientTape() as tape:
            y = pg.exp(v)
        np.testing.assert_allclose(tape.gradient(y, v).numpy(), np.exp(v0), rtol=1e-5)


def _numpy_adam(w, grads, lr, b1=0.9, b2=0.999, eps=1e-7):
    m, v = np.zeros_like(w), np.zeros_like(w)
    for t, g in enumerate(grads, 1):
        m = m + (g - m) * (1 - b1)
        v = v + (g * g - v) * (1 - b2)
        w = w - lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t) * m / (np.sqrt(v) + eps)
    return w


def test_optimizer_updates_are_prepared_and_exact(general_calls, rng, device):
    w0 = rng.standard_normal((4, 3)).astype(np.float32)
    grads = [rng.standard_normal((4, 3)).astype(np.float32) for _ in range(4)]
    with pg.device(device):
        w = pg.Variable(w0)
        opt = pg.optimizers.Adam(0.01)
        for i, g in enumerate(grads):
            if i == 1:
                general_calls.clear()
            opt.apply_gradients([(pg.constant(g), w)])
    assert not {"ResourceApplyAdam", "MultiTensorApplyAdam"} & set(general_calls)
    np.testing.assert_allclose(w.numpy(), _numpy_adam(w0.astype(np.float64), grads, 0.01),
                               rtol=2e-5, atol=2e-6)
    assert int(opt.iterations.numpy()) == 4


def _numpy_adam_at(w, steps, lr, b1=0.9, b2=0.999, eps=1e-7):
    """Adam over (t, gradient) pairs: t is the step number the update uses."""
    m, v = np.zeros_like(w), np.zeros_like(w)
    for t, g in steps:
        m = m + (g - m) * (1 - b1)
        v = v + (g * g - v) * (1 - b2)
        w = w - lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t) * m / (np.sqrt(v) + eps)
    return w


def test_the_step_counter_costs_no_op_and_follows_every_write(general_calls, rng, hook_sees):
    """Eagerly, ``iterations`` is read only after something else wrote it
    and counted up in place: a step makes no call on the general path. An
    assignment from outside, a traced step (which counts in its graph) and
    a step under a hook that must see every op (which runs
    AssignAddVariableOp) all leave the counter and the Adam powers right."""
    w0 = rng.standard_normal(6).astype(np.float32)
    grads = [rng.standard_normal(6).astype(np.float32) for _ in range(7)]
    steps = []
    with pg.device("MY_DEVICE:0"):
        w = pg.Variable(w0)
        opt = pg.optimizers.Adam(0.01)
        opt.apply_gradients([(pg.constant(grads[0]), w)])
        steps.append((1, grads[0]))
        general_calls.clear()
        for g in grads[1:3]:
            opt.apply_gradients([(pg.constant(g), w)])
            steps.append((len(steps) + 1, g))
        assert general_calls == []
        assert int(opt.iterations.numpy()) == 3
        opt.iterations.assign(np.int64(10))          # from outside: the next step is 11
        opt.apply_gradients([(pg.constant(grads[3]), w)])
        steps.append((11, grads[3]))
        assert int(opt.iterations.numpy()) == 11

        @pg.function
        def traced_step(g):
            opt.apply_gradients([(g, w)])
        traced_step(pg.constant(grads[4]))           # the graph counts: 12
        steps.append((12, grads[4]))
        opt.apply_gradients([(pg.constant(grads[5]), w)])
        steps.append((13, grads[5]))
        with hook_sees() as seen:
            opt.apply_gradients([(pg.constant(grads[6]), w)])
        steps.append((14, grads[6]))
        assert "AssignAddVariableOp" in seen and \
            {"ResourceApplyAdam", "MultiTensorApplyAdam"} & set(seen)
        assert int(opt.iterations.numpy()) == 14
    want = _numpy_adam_at(w0.astype(np.float64), steps, 0.01)
    np.testing.assert_allclose(w.numpy(), want, rtol=2e-5, atol=2e-6)


def test_a_changed_learning_rate_applies_at_the_next_step(rng):
    """Scalars kept across steps are reused only while their value is the
    same: a new learning rate (or -0.0 after 0.0) gives a new one."""
    w0 = rng.standard_normal(8).astype(np.float32)
    g = rng.standard_normal(8).astype(np.float32)
    with pg.device("MY_DEVICE:0"):
        w = pg.Variable(w0)
        opt = pg.optimizers.SGD(0.5)
        want = w0.copy()
        for lr in (0.5, 0.5, 0.25, 0.0, -0.0, 2.0):
            opt.learning_rate = lr
            opt.apply_gradients([(pg.constant(g), w)])
            want = want - np.float32(lr) * g
            np.testing.assert_allclose(w.numpy(), want, rtol=1e-6, atol=1e-6)


def test_profiling_a_step_still_sees_every_call(rng):
    """The profiler's hook has no observer: while it records, calls take
    the general path so that it times each, and the tape still records
    them."""
    from pluggable.profiler.host_tracer import HostTracer
    a = rng.standard_normal((2, 3)).astype(np.float32)
    with pg.device("MY_DEVICE:0"):
        x, v = pg.constant(a), pg.Variable(np.ones(3, np.float32))
        for _ in range(2):
            with pg.GradientTape() as tape:
                y = pg.reduce_sum(pg.nn.bias_add(x, v))
        tracer = HostTracer()
        tracer.start()
        try:
            with pg.GradientTape() as tape:
                y = pg.reduce_sum(pg.nn.bias_add(x, v))
        finally:
            spans = tracer.stop()
        (g,) = tape.gradient(y, [v])
    np.testing.assert_allclose(g.numpy(), np.full(3, 2.0, np.float32))
    np.testing.assert_allclose(y.numpy(), np.sum(a + 1), rtol=1e-5, atol=1e-5)
    names = [s.name for s in spans if s.category == "op"]
    # (the variable is read inside BiasAdd's span, as the profiler sees it)
    assert sorted(names) == ["BiasAdd", "ReadVariableOp", "Sum"]


def test_an_op_of_two_outputs_takes_the_fast_path(monkeypatch, rng, device):
    """SparseSoftmaxCrossEntropyWithLogits (loss and backprop): once its
    plan is made, calls skip the general path, with or without a tape, and
    give numpy's values; the tape records it, so the gradient flows."""
    logits = rng.standard_normal((6, 5)).astype(np.float32)
    labels = rng.integers(0, 5, 6).astype(np.int64)
    e = np.exp(logits - logits.max(1, keepdims=True))
    p = e / e.sum(1, keepdims=True)
    want_loss = -np.log(p[np.arange(6), labels])
    want_back = p.copy()
    want_back[np.arange(6), labels] -= 1
    op = pg.raw_ops.SparseSoftmaxCrossEntropyWithLogits
    with pg.device(device):
        x, y = pg.constant(logits), pg.constant(labels)
        op(features=x, labels=y)
        assert pg.registry.OPS["SparseSoftmaxCrossEntropyWithLogits"].fast

        def no_general_path(*args, **kwargs):
            raise AssertionError("took the general path")
        monkeypatch.setitem(op.__globals__, "execute", no_general_path)
        loss, back = op(features=x, labels=y)
        with pg.GradientTape() as tape:
            tape.watch(x)
            loss2, _ = op(features=x, labels=y)
        monkeypatch.undo()
        (g,) = tape.gradient(loss2, [x])
    for t in (loss, back, g):
        assert t.device.endswith(device)
    np.testing.assert_allclose(loss.numpy(), want_loss, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(back.numpy(), want_back, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(loss2.numpy(), want_loss, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(g.numpy(), want_back, rtol=1e-5, atol=1e-6)
    assert loss.shape == (6,) and back.shape == (6, 5)


def test_a_failure_of_a_two_output_op_on_the_fast_path_is_typed(monkeypatch):
    """A label out of range, on the fast path: reading either output raises
    the kernel's typed error, naming the label."""
    op = pg.raw_ops.SparseSoftmaxCrossEntropyWithLogits
    with pg.device("MY_DEVICE:0"):
        x = pg.constant(np.zeros((2, 3), np.float32))
        op(features=x, labels=pg.constant(np.array([0, 1], np.int64)))
        monkeypatch.setitem(op.__globals__, "execute",
                            lambda *a, **k: pytest.fail("took the general path"))
        loss, back = op(features=x, labels=pg.constant(np.array([0, 7], np.int64)))
        for t in (loss, back):
            with pytest.raises(pg.errors.InvalidArgumentError, match="label value of 7"):
                t.numpy()
