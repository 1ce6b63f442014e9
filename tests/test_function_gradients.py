"""Automatic differentiation and training steps inside ``pg.function``:
gradients traced into the graph equal eager ``GradientTape`` gradients for a
dense, a convolutional and a deeper MLP model; N traced optimizer steps
(SGD with momentum and Nesterov, Adam, AdamW) leave the variables N eager
steps leave, without retracing; a learning-rate schedule keeps changing
across calls of one graph; variable reads see earlier assignments; the
device kernels do the work; a gradient through a non-differentiable op
raises the eager error."""
from __future__ import annotations

import numpy as np
import pytest

import pluggable as pg

DEVICES = ["CPU:0", "MY_DEVICE:0", "GPU:0"]
TOL = {np.float32: dict(rtol=2e-5, atol=2e-6), np.float64: dict(rtol=1e-12, atol=1e-13)}


@pytest.fixture(params=DEVICES)
def device(request):
    name = request.param
    if name.startswith("GPU") and not pg.list_physical_devices("GPU"):
        pytest.skip("no GPU device present: the GPU runs are made on a machine with one")
    return name


def dev_type(device: str) -> str:
    return device.split(":")[0]


def update_op(device: str, optimizer: str, n_vars: int) -> tuple[str, int]:
    """(op, calls per step) of an optimizer's step of n_vars float32
    variables on `device`: Adam's multi-tensor op (one call) where the
    device has its kernel."""
    from pluggable.framework import registry
    op = OPTIMIZERS[optimizer][1]
    if op == "ResourceApplyAdam" and registry.find_kernel(
            "MultiTensorApplyAdam", dev_type(device), {"T": pg.float32, "Tgrad": pg.float32}):
        return "MultiTensorApplyAdam", 1
    return op, n_vars


def xent(logits, labels):
    return pg.reduce_mean(pg.nn.sparse_softmax_cross_entropy_with_logits(labels=labels,
                                                                         logits=logits))


# ------------------------------------------------------------------ models

class Dense:
    """dense - relu - dense - softmax cross-entropy."""

    def __init__(self, rng, dt):
        self.w1 = pg.Variable(rng.standard_normal((6, 5)).astype(dt) * 0.5, name="w1")
        self.b1 = pg.Variable(rng.standard_normal(5).astype(dt) * 0.1, name="b1")
        self.w2 = pg.Variable(rng.standard_normal((5, 4)).astype(dt) * 0.5, name="w2")
        self.b2 = pg.Variable(np.zeros(4, dt), name="b2")
        self.variables = [self.w1, self.b1, self.w2, self.b2]

    def inputs(self, rng, dt):
        return (pg.constant(rng.standard_normal((8, 6)).astype(dt)),
                pg.constant(rng.integers(0, 4, 8).astype(np.int32)))

    def loss(self, x, y):
        h = pg.nn.relu(pg.matmul(x, self.w1) + self.b1)
        return xent(pg.nn.bias_add(pg.matmul(h, self.w2), self.b2), y)


class Conv:
    """conv2d - bias - relu - max pool - dense - softmax cross-entropy."""

    def __init__(self, rng, dt):
        self.k = pg.Variable(rng.standard_normal((3, 3, 2, 4)).astype(dt) * 0.3, name="k")
        self.kb = pg.Variable(rng.standard_normal(4).astype(dt) * 0.1, name="kb")
        self.w = pg.Variable(rng.standard_normal((3 * 3 * 4, 5)).astype(dt) * 0.2, name="w")
        self.variables = [self.k, self.kb, self.w]

    def inputs(self, rng, dt):
        return (pg.constant(rng.standard_normal((3, 6, 6, 2)).astype(dt)),
                pg.constant(rng.integers(0, 5, 3).astype(np.int32)))

    def loss(self, x, y):
        h = pg.nn.relu(pg.nn.bias_add(pg.nn.conv2d(x, self.k, strides=1, padding="SAME"),
                                      self.kb))
        h = pg.nn.max_pool2d(h, ksize=2, strides=2, padding="VALID")
        return xent(pg.matmul(pg.reshape(h, [-1, 36]), self.w), y)


class MLP:
    """Three tanh/sigmoid layers and a squared error (no control flow)."""

    def __init__(self, rng, dt):
        sizes = [(4, 8), (8, 8), (8, 2)]
        self.ws = [pg.Variable(rng.standard_normal(s).astype(dt) * 0.5, name=f"w{i}")
                   for i, s in enumerate(sizes)]
        self.variables = list(self.ws)

    def inputs(self, rng, dt):
        return (pg.constant(rng.standard_normal((5, 4)).astype(dt)),
                pg.constant(rng.standard_normal((5, 2)).astype(dt)))

    def loss(self, x, y):
        h = pg.math.tanh(pg.matmul(x, self.ws[0]))
        h = pg.math.sigmoid(pg.matmul(h, self.ws[1]))
        d = pg.matmul(h, self.ws[2]) - y
        return pg.reduce_mean(d * d)


MODELS = [Dense, Conv, MLP]


def eager_gradients(model, x, y):
    with pg.GradientTape() as tape:
        loss = model.loss(x, y)
    return loss, tape.gradient(loss, model.variables)


@pytest.mark.parametrize("model_cls", MODELS, ids=lambda c: c.__name__)
def test_gradients_in_function_equal_eager(device, model_cls, rng):
    dt = np.float32
    with pg.device(device):
        model = model_cls(rng, dt)
        traced = pg.function(lambda x, y: eager_gradients(model, x, y))
        for _ in range(2):  # fresh inputs, one graph
            x, y = model.inputs(rng, dt)
            loss, grads = eager_gradients(model, x, y)
            with pg.testing.expect_kernel("MatMul", dev_type(device)):
                t_loss, t_grads = traced(x, y)
            np.testing.assert_allclose(t_loss.numpy(), loss.numpy(), **TOL[dt])
            for g, tg, v in zip(grads, t_grads, model.variables):
                assert tg.device == v.device
                np.testing.assert_allclose(tg.numpy(), g.numpy(), **TOL[dt], err_msg=v.name)
        assert traced.tracing_count == 1


def test_float64_gradients_in_function_on_cpu(rng):
    with pg.device("CPU:0"):
        model = Dense(rng, np.float64)
        x, y = model.inputs(rng, np.float64)
        _, grads = eager_gradients(model, x, y)
        _, t_grads = pg.function(lambda x, y: eager_gradients(model, x, y))(x, y)
        for g, tg in zip(grads, t_grads):
            np.testing.assert_allclose(tg.numpy(), g.numpy(), **TOL[np.float64])


# -------------------------------------------------------------- training steps

OPTIMIZERS = {
    "sgd": (lambda: pg.optimizers.SGD(0.1), "ResourceApplyGradientDescent"),
    "momentum": (lambda: pg.optimizers.SGD(0.05, momentum=0.9), "ResourceApplyKerasMomentum"),
    "nesterov": (lambda: pg.optimizers.SGD(0.05, momentum=0.9, nesterov=True),
                 "ResourceApplyKerasMomentum"),
    "adam": (lambda: pg.optimizers.Adam(0.01), "ResourceApplyAdam"),
    "adamw": (lambda: pg.optimizers.AdamW(0.01, weight_decay=0.05), "ResourceApplyAdam"),
}


def train_step(model, optimizer, x, y):
    with pg.GradientTape() as tape:
        loss = model.loss(x, y)
    grads = tape.gradient(loss, model.variables)
    optimizer.apply_gradients(zip(grads, model.variables))
    return loss


def make(model_cls, seed, device, optimizer):
    with pg.device(device):
        return model_cls(np.random.default_rng(seed), np.float32), OPTIMIZERS[optimizer][0]()


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_traced_steps_equal_eager_steps(device, optimizer, rng):
    seed, steps = int(rng.integers(1 << 30)), 4
    eager_model, eager_opt = make(Dense, seed, device, optimizer)
    model, opt = make(Dense, seed, device, optimizer)
    step = pg.function(lambda x, y: train_step(model, opt, x, y))
    op, calls = update_op(device, optimizer, len(model.variables))
    with pg.device(device):
        for i in range(steps):
            x, y = model.inputs(rng, np.float32)
            loss = train_step(eager_model, eager_opt, x, y)
            with pg.testing.expect_kernel(op, dev_type(device), min_calls=calls):
                t_loss = step(x, y)
            np.testing.assert_allclose(t_loss.numpy(), loss.numpy(), **TOL[np.float32])
    # As in TensorFlow, a first trace that makes the optimizer's slot variables is
    # traced once more without making any: two traces, then none.
    assert step.tracing_count == (2 if opt.variables[1:] else 1)
    assert int(opt.iterations.numpy()) == steps
    for v, ev in zip(model.variables, eager_model.variables):
        np.testing.assert_allclose(v.numpy(), ev.numpy(), **TOL[np.float32], err_msg=v.name)
    for v, ev in zip(model.variables, eager_model.variables):  # the slots too
        for name in opt._slot_names:
            np.testing.assert_allclose(opt.get_slot(v, name).numpy(),
                                       eager_opt.get_slot(ev, name).numpy(), **TOL[np.float32])


def test_conv_training_in_function_learns_and_matches_eager(device, rng):
    seed = int(rng.integers(1 << 30))
    eager_model, eager_opt = make(Conv, seed, device, "adam")
    model, opt = make(Conv, seed, device, "adam")
    step = pg.function(lambda x, y: train_step(model, opt, x, y))
    with pg.device(device):
        x, y = model.inputs(rng, np.float32)
        losses = []
        for _ in range(6):
            train_step(eager_model, eager_opt, x, y)
            with pg.testing.expect_kernel("Conv2DBackpropFilter", dev_type(device)):
                losses.append(float(step(x, y).numpy()))
    assert losses[-1] < losses[0]
    assert step.tracing_count == 2   # the first trace makes Adam's slots (TensorFlow's rule)
    for v, ev in zip(model.variables, eager_model.variables):
        np.testing.assert_allclose(v.numpy(), ev.numpy(), rtol=1e-4, atol=1e-5)


def test_schedule_changes_the_rate_across_calls_of_one_graph(device, rng):
    """SGD without momentum moves a variable by exactly lr * gradient: with
    a gradient of one, each call's change is the schedule's rate."""
    rates = [0.5, 0.25, 0.125, 0.0625]
    with pg.device(device):
        v = pg.Variable(np.float32(rng.standard_normal()), name="v")
        tab = pg.optimizers.SGD(pg.optimizers.schedules.Tabulated(rates))
        w = pg.Variable(np.float32(rng.standard_normal()), name="w")
        exp = pg.optimizers.SGD(pg.optimizers.schedules.ExponentialDecay(0.5, 2, 0.25))

        @pg.function
        def step():
            for var, opt in ((v, tab), (w, exp)):
                with pg.GradientTape() as tape:
                    loss = var * 1.0
                opt.apply_gradients([(tape.gradient(loss, var), var)])

        for i in range(6):
            before_v, before_w = float(v.numpy()), float(w.numpy())
            step()
            np.testing.assert_allclose(before_v - float(v.numpy()), rates[min(i, 3)], rtol=1e-5)
            np.testing.assert_allclose(before_w - float(w.numpy()), 0.5 * 0.25 ** (i / 2),
                                       rtol=1e-5)
    assert step.tracing_count == 1


def test_plain_callable_rate_must_be_written_with_ops(rng):
    with pg.device("CPU:0"):
        v = pg.Variable(np.ones(3, np.float32))
        opt = pg.optimizers.SGD(lambda step: 0.1 if step < 10 else 0.01)  # reads a value
        step = pg.function(lambda: opt.apply_gradients([(pg.ones([3]), v)]))
        with pytest.raises(pg.errors.InvalidArgumentError, match="schedule"):
            step()
        opt = pg.optimizers.SGD(lambda step: 0.1 * 0.5 ** step)  # written with ops
        step = pg.function(lambda: opt.apply_gradients([(pg.ones([3]), v)]))
        step()
        step()
        np.testing.assert_allclose(v.numpy(), 1 - 0.1 - 0.05, rtol=1e-6)


# ----------------------------------------------------------- variables, order

def test_reads_see_assignments_of_earlier_calls_and_eager_code(device, rng):
    a = rng.standard_normal((2, 3)).astype(np.float32)
    with pg.device(device):
        v = pg.Variable(a)

        @pg.function
        def bump(d):
            before = v.read_value()
            v.assign_add(d)
            after = v.read_value()
            v.assign_sub(d * 0.5)
            return before, after, v.read_value()

        d = rng.standard_normal((2, 3)).astype(np.float32)
        b0, a0, c0 = bump(pg.constant(d))
        np.testing.assert_allclose(b0.numpy(), a, rtol=1e-6)
        np.testing.assert_allclose(a0.numpy(), a + d, rtol=1e-6)
        np.testing.assert_allclose(c0.numpy(), a + 0.5 * d, rtol=1e-5, atol=1e-6)
        new = rng.standard_normal((2, 3)).astype(np.float32)
        v.assign(new)                                   # eagerly, between calls
        b1, _, c1 = bump(pg.constant(d))
        np.testing.assert_allclose(b1.numpy(), new, rtol=1e-6)
        np.testing.assert_allclose(c1.numpy(), new + 0.5 * d, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(v.numpy(), new + 0.5 * d, rtol=1e-5, atol=1e-6)
    assert bump.tracing_count == 1
    graph = bump.get_concrete_function(pg.constant(d)).graph
    assert not any(n.op == "Const" and n.out_dtypes[0] is pg.float32 and
                   np.shape(n.attrs["value"]) == (2, 3) for n in graph)  # no value captured


def test_assignments_without_outputs_are_not_pruned(rng):
    with pg.device("MY_DEVICE:0"):
        v = pg.Variable(np.zeros(4, np.float32))
        step = pg.function(lambda d: v.assign_add(d, read_value=False))
        d = rng.standard_normal(4).astype(np.float32)
        for _ in range(3):
            assert step(pg.constant(d)) is None
        np.testing.assert_allclose(v.numpy(), 3 * d, rtol=1e-5)


# ------------------------------------------------------------------ bad input

def test_gradient_through_op_without_gradient_raises_the_eager_error(device, rng):
    x = rng.standard_normal((1, 4, 4, 2)).astype(np.float32)
    pool = dict(ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="VALID")

    def grad_through_max_pool_grad(x):
        with pg.GradientTape() as tape:
            tape.watch(x)
            y = pg.raw_ops.MaxPool(input=x, **pool)
            z = pg.reduce_sum(pg.raw_ops.MaxPoolGrad(orig_input=x, orig_output=y, grad=y,
                                                     **pool))
        return tape.gradient(z, x)

    with pg.device(device):
        t = pg.constant(x)
        with pytest.raises(pg.errors.NotFoundError, match="MaxPoolGrad") as eager:
            grad_through_max_pool_grad(t)
        f = pg.function(grad_through_max_pool_grad)
        with pytest.raises(pg.errors.NotFoundError, match="MaxPoolGrad") as traced:
            f(t)
    assert "RegisterGradient" in str(traced.value) and "RegisterGradient" in str(eager.value)


def test_device_capture_leaves_graphs_with_variables_to_the_executor(rng):
    """A captured replay would keep the buffer a variable had when it was
    captured (copy on write moves it): such graphs are not captured, and
    every call still sees and makes the variable's changes."""
    d = rng.standard_normal(4).astype(np.float32)
    before = pg.config.get_graph_capture()
    pg.config.set_graph_capture("device")
    try:
        with pg.device("MY_DEVICE:0"):
            v = pg.Variable(np.zeros(4, np.float32))

            @pg.function
            def bump(d):
                old = v.read_value()
                v.assign_add(d)
                return old * 1.0

            for i in range(5):
                old = bump(pg.constant(d))
                np.testing.assert_allclose(old.numpy(), i * d, rtol=1e-5, atol=1e-6)
            stats = bump.get_concrete_function(pg.constant(d)).capture_stats()
    finally:
        pg.config.set_graph_capture(before)
    np.testing.assert_allclose(v.numpy(), 5 * d, rtol=1e-5, atol=1e-6)
    assert not stats["graphs"] and "variable" in stats["reason"]


def test_graph_reading_a_variable_is_not_written_as_graph_def(rng):
    with pg.device("CPU:0"):
        v = pg.Variable(rng.standard_normal((2, 2)).astype(np.float32), name="w")
        f = pg.function(lambda x: pg.matmul(x, v))
        x = pg.constant(rng.standard_normal((3, 2)).astype(np.float32))
        np.testing.assert_allclose(f(x).numpy(), x.numpy() @ v.numpy(), rtol=1e-5,
                                   atol=1e-5)
        with pytest.raises(pg.errors.UnimplementedError, match="live variable"):
            f.get_concrete_function(x).graph.as_graph_def()


def test_tape_features_inside_function(device, rng):
    """watch of an argument, persistent tapes, nested tapes (second
    derivatives) and minimize, traced, against their closed forms."""
    a = rng.standard_normal((3, 4)).astype(np.float32)
    with pg.device(device):
        @pg.function
        def grads(x):
            with pg.GradientTape(persistent=True) as outer:
                outer.watch(x)
                with pg.GradientTape() as inner:
                    inner.watch(x)
                    y = pg.reduce_sum(x * x * x)
                g = inner.gradient(y, x)                  # 3 x^2
                z = pg.reduce_sum(x * 2.0)
            return g, outer.gradient(g, x), outer.gradient(z, x)

        g, gg, gz = grads(pg.constant(a))
        np.testing.assert_allclose(g.numpy(), 3 * a * a, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(gg.numpy(), 6 * a, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(gz.numpy(), np.full_like(a, 2.0))
        w = pg.Variable(a, name="w")
        opt = pg.optimizers.SGD(0.25)
        step = pg.function(lambda: opt.minimize(lambda: pg.reduce_sum(w * w), [w]))
        assert int(step().numpy()) == 1 and int(step().numpy()) == 2
    np.testing.assert_allclose(w.numpy(), a * 0.5 * 0.5, rtol=1e-5, atol=1e-6)
    assert step.tracing_count == 1


def test_unsupported_tape_uses_inside_function_raise_typed_errors(rng):
    with pg.device("MY_DEVICE:0"):
        w = pg.Variable(rng.standard_normal((4, 2)).astype(np.float32))

        @pg.function(input_signature=[pg.TensorSpec([None, 4], pg.float32)])
        def any_batch(x):
            with pg.GradientTape() as tape:
                y = pg.reduce_mean(pg.matmul(x, w))
            return tape.gradient(y, w)

        x = pg.constant(rng.standard_normal((3, 4)).astype(np.float32))
        with pytest.raises(pg.errors.UnimplementedError, match="static shapes.*None"):
            any_batch(x)

        @pg.function
        def jacobian(x):
            with pg.GradientTape() as tape:
                tape.watch(x)
                y = x * 2.0
            return tape.jacobian(y, x)

        with pytest.raises(pg.errors.UnimplementedError, match="jacobian"):
            jacobian(x)
