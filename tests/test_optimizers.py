"""Optimizers and the training ops: ResourceApplyGradientDescent,
ResourceApplyKerasMomentum and ResourceApplyAdam against TensorFlow's raw
ops, pg.optimizers against Keras's optimizers (both in a TensorFlow child
process), on every device with the device's own kernels, and bad input."""
from __future__ import annotations

import numpy as np
import pytest

import pluggable as pg

R = pg.raw_ops
DEVICES = ["CPU:0", "MY_DEVICE:0", "GPU:0"]


@pytest.fixture(params=DEVICES)
def device(request):
    name = request.param
    if name.startswith("GPU") and not pg.list_physical_devices("GPU"):
        pytest.skip("no GPU device present")
    return name


def dev_type(device: str) -> str:
    return device.split(":")[0]


def adam_op(device: str) -> str:
    """The op of an Adam step (fused=None) of float32 variables on `device`:
    the multi-tensor op where the device has its kernel."""
    from pluggable.framework import registry
    multi = registry.find_kernel("MultiTensorApplyAdam", dev_type(device),
                                 {"T": pg.float32, "Tgrad": pg.float32})
    return "MultiTensorApplyAdam" if multi else "ResourceApplyAdam"


def _tol(dt):
    return dict(rtol=1e-12, atol=1e-14) if dt == np.float64 else dict(rtol=2e-6, atol=1e-6)


_TF_APPLY = r'''
vs = [tf.Variable(x) for x in variables]
getattr(tf.raw_ops, op)(**{k: vs[i].handle for k, i in handles.items()},
                         **{k: tf.constant(x) for k, x in values.items()}, **attrs)
result = [v.numpy() for v in vs]
'''


def _scalars(dt, **kw):
    return {k: np.asarray(v, dt) for k, v in kw.items()}


def _training_calls(rng, dt):
    shape = (3, 4)
    var, a, b = (rng.standard_normal(shape).astype(dt) for _ in range(3))
    grad = rng.standard_normal(shape).astype(dt)
    v_pos = np.abs(b)
    return [
        ("ResourceApplyGradientDescent", [var], {"var": 0},
         {**_scalars(dt, alpha=0.1), "delta": grad}, {}),
        ("ResourceApplyKerasMomentum", [var, a], {"var": 0, "accum": 1},
         {**_scalars(dt, lr=0.05, momentum=0.9), "grad": grad}, {"use_nesterov": False}),
        ("ResourceApplyKerasMomentum", [var, a], {"var": 0, "accum": 1},
         {**_scalars(dt, lr=0.05, momentum=0.9), "grad": grad}, {"use_nesterov": True}),
        ("ResourceApplyAdam", [var, a, v_pos], {"var": 0, "m": 1, "v": 2},
         {**_scalars(dt, beta1_power=0.9 ** 3, beta2_power=0.999 ** 3, lr=0.01, beta1=0.9,
                     beta2=0.999, epsilon=1e-7), "grad": grad}, {"use_nesterov": False}),
        ("ResourceApplyAdam", [var, a, v_pos], {"var": 0, "m": 1, "v": 2},
         {**_scalars(dt, beta1_power=0.9 ** 3, beta2_power=0.999 ** 3, lr=0.01, beta1=0.9,
                     beta2=0.999, epsilon=1e-7), "grad": grad}, {"use_nesterov": True}),
    ]


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_training_ops_match_tensorflow(device, rng, dt, tf_oracle):
    for op, variables, handles, values, attrs in _training_calls(rng, dt):
        expect = tf_oracle.run(_TF_APPLY, op=op, variables=variables, handles=handles,
                               values=values, attrs=attrs)
        with pg.device(device):
            vs = [pg.Variable(x) for x in variables]
            with pg.testing.expect_kernel(op, dev_type(device)):
                getattr(R, op)(**{k: vs[i].handle for k, i in handles.items()}, **values,
                               use_locking=True, **attrs)
        for v, e in zip(vs, expect):
            np.testing.assert_allclose(v.numpy(), e, **_tol(dt),
                                       err_msg=f"{op} {attrs} on {device}")


def test_training_op_half_precision(device, rng):
    var = rng.standard_normal(8).astype(np.float16)
    grad = rng.standard_normal(8).astype(np.float16)
    with pg.device(device):
        v = pg.Variable(var)
        R.ResourceApplyGradientDescent(var=v.handle, alpha=np.float16(0.5), delta=grad)
    expect = (var.astype(np.float32) - 0.5 * grad.astype(np.float32)).astype(np.float16)
    np.testing.assert_allclose(v.numpy().astype(np.float32), expect.astype(np.float32),
                               rtol=2e-3)


def test_training_op_checks_shapes_before_changing_anything(device, rng):
    with pg.device(device):
        v, m, s = (pg.Variable(np.zeros((2, 3))) for _ in range(3))
        with pytest.raises(pg.errors.InvalidArgumentError, match="shape"):
            f = np.float64
            R.ResourceApplyAdam(var=v.handle, m=m.handle, v=s.handle, beta1_power=f(0.9),
                                beta2_power=f(0.999), lr=f(0.1), beta1=f(0.9), beta2=f(0.999),
                                epsilon=f(1e-7), grad=np.ones((3, 2)))
            pg.synchronize()
        with pytest.raises(pg.errors.InvalidArgumentError, match="scalar"):
            R.ResourceApplyGradientDescent(var=v.handle, alpha=np.ones(2), delta=np.ones((2, 3)))
            pg.synchronize()
    for x in (v, m, s):
        np.testing.assert_array_equal(x.numpy(), np.zeros((2, 3)))


# ------------------------------------------------------------ optimizers vs Keras

_KERAS = r'''
cls = getattr(tf.keras.optimizers, name)
opt = cls(**kwargs)
vs = [tf.Variable(w) for w in init]
for step in grads:
    opt.apply_gradients([(tf.constant(g), v) for g, v in zip(step, vs)])
result = [v.numpy() for v in vs]
'''

CONFIGS = [
    ("SGD", {"learning_rate": 0.1}),
    ("SGD", {"learning_rate": 0.05, "momentum": 0.9}),
    ("SGD", {"learning_rate": 0.05, "momentum": 0.8, "nesterov": True}),
    ("Adam", {"learning_rate": 0.01}),
    ("Adam", {"learning_rate": 0.02, "beta_1": 0.8, "beta_2": 0.99, "epsilon": 1e-5}),
    ("AdamW", {"learning_rate": 0.01, "weight_decay": 0.1}),
    ("SGD", {"learning_rate": 0.1, "weight_decay": 0.05}),
]


@pytest.mark.parametrize("name,kwargs", CONFIGS, ids=[f"{n}-{i}" for i, (n, _) in
                                                      enumerate(CONFIGS)])
def test_optimizer_matches_keras(device, rng, name, kwargs, tf_oracle):
    init = [rng.standard_normal((3, 2)).astype(np.float32), rng.standard_normal(2).astype(np.float32)]
    grads = [[rng.standard_normal(w.shape).astype(np.float32) for w in init] for _ in range(5)]
    expect = tf_oracle.run(_KERAS, name=name, kwargs=kwargs, init=init, grads=grads)
    opt = getattr(pg.optimizers, name)(**kwargs)
    with pg.device(device):
        vs = [pg.Variable(w) for w in init]
        for step in grads:
            opt.apply_gradients(zip([pg.constant(g) for g in step], vs))
    assert int(opt.iterations.numpy()) == 5
    for v, e in zip(vs, expect):
        np.testing.assert_allclose(v.numpy(), e, rtol=2e-5, atol=2e-6, err_msg=f"{name} {kwargs}")


def test_slots_live_on_the_variable_device_and_steps_stay_there(device, rng):
    with pg.device(device):
        w = pg.Variable(rng.standard_normal((4, 3)).astype(np.float32))
        g = pg.constant(rng.standard_normal((4, 3)).astype(np.float32))
    opt = pg.optimizers.Adam(0.1)
    with pg.testing.expect_kernel(adam_op(device), dev_type(device), min_calls=3):
        for _ in range(3):
            opt.apply_gradients([(g, w)])
    for name in ("m", "v"):
        slot = opt.get_slot(w, name)
        assert slot.device == w.device and slot.shape == w.shape and not slot.trainable
    assert len(opt.variables) == 3 and opt.iterations.device.endswith("CPU:0")
    with pytest.raises(KeyError, match="momentum"):
        opt.get_slot(w, "momentum")


def test_minimize_and_learning_rate_schedule(device, rng):
    target = rng.standard_normal(3)
    with pg.device(device):
        w = pg.Variable(np.zeros(3))
        t = pg.constant(target)
    opt = pg.optimizers.SGD(learning_rate=lambda step: 0.5 / (1 + step))

    def loss():
        d = w - t
        return pg.reduce_sum(d * d)
    first = float(loss().numpy())
    for _ in range(20):
        opt.minimize(loss, [w])
    assert float(loss().numpy()) < 1e-3 * first


def test_adamw_excludes_variables_from_weight_decay(rng):
    a = rng.standard_normal(3).astype(np.float32)
    decayed, kept = pg.Variable(a, name="kernel"), pg.Variable(a, name="bias")
    opt = pg.optimizers.AdamW(learning_rate=0.1, weight_decay=0.5)
    opt.exclude_from_weight_decay(var_names=["bias"])
    zero = np.zeros(3, np.float32)
    opt.apply_gradients([(zero, decayed), (zero, kept)])
    np.testing.assert_allclose(decayed.numpy(), a * (1 - 0.1 * 0.5), rtol=1e-6)
    np.testing.assert_array_equal(kept.numpy(), a)


# ------------------------------------------------------------ bad input

def _state(vs):
    return [v.numpy().copy() for v in vs]


@pytest.mark.parametrize("opt_name", ["SGD", "Adam"])
def test_a_bad_pair_is_refused_before_any_variable_changes(device, rng, opt_name):
    with pg.device(device):
        good = pg.Variable(rng.standard_normal((2, 3)).astype(np.float32), name="good")
        bad = pg.Variable(rng.standard_normal((4,)).astype(np.float32), name="bad")
        g_good = pg.constant(np.ones((2, 3), np.float32))
    opt = getattr(pg.optimizers, opt_name)(0.1)
    before = _state([good, bad])
    op = "ResourceApplyAdam" if opt_name == "Adam" else "ResourceApplyGradientDescent"
    with pytest.raises(pg.errors.InvalidArgumentError, match=r"'bad:0'.*\[4\].*\[5\]") as e:
        opt.apply_gradients([(g_good, good), (np.ones(5, np.float32), bad)])
    assert e.value.op == op
    with pytest.raises(pg.errors.InvalidArgumentError, match="float64"):
        opt.apply_gradients([(g_good, good), (pg.constant(np.ones(4)), bad)])
    with pytest.raises(pg.errors.InvalidArgumentError, match="twice"):
        opt.apply_gradients([(g_good, good), (g_good, good)])
    with pytest.raises(TypeError, match="pg.Variable"):
        opt.apply_gradients([(g_good, good), (g_good, pg.constant(np.zeros((2, 3))))])
    for after, earlier in zip(_state([good, bad]), before):
        np.testing.assert_array_equal(after, earlier)
    assert int(opt.iterations.numpy()) == 0


def test_a_gradient_on_another_device_is_refused(rng):
    with pg.device("MY_DEVICE:0"):
        w = pg.Variable(rng.standard_normal(3).astype(np.float32), name="w")
        first = pg.Variable(rng.standard_normal((2, 2)).astype(np.float32), name="first")
        g_first = pg.constant(np.ones((2, 2), np.float32))
    with pg.device("CPU:0"):
        g = pg.constant(np.ones(3, np.float32))
    opt = pg.optimizers.Adam(0.1)
    before, first_before = w.numpy().copy(), first.numpy().copy()
    with pytest.raises(pg.errors.InvalidArgumentError, match=r"'w:0' of shape \[3\].*CPU:0.*"
                       r"MY_DEVICE:0") as e:
        opt.apply_gradients([(g_first, first), (g, w)])
    assert e.value.op == "ResourceApplyAdam"
    np.testing.assert_array_equal(w.numpy(), before)
    np.testing.assert_array_equal(first.numpy(), first_before)     # not half-updated
    assert int(opt.iterations.numpy()) == 0 and len(opt.variables) == 1     # no slots made
    opt.apply_gradients([(g.to("MY_DEVICE:0"), w)])        # what the message suggests
    assert not np.array_equal(w.numpy(), before)


def test_integer_variables_are_refused():
    v = pg.Variable(np.zeros(3, np.int32))
    with pytest.raises(pg.errors.InvalidArgumentError, match="int32"):
        pg.optimizers.SGD(0.1).apply_gradients([(np.ones(3, np.int32), v)])


def test_training_reduces_the_loss_on_every_device(device, rng):
    x = rng.standard_normal((32, 4)).astype(np.float32)
    true_w = rng.standard_normal((4, 1)).astype(np.float32)
    y = x @ true_w
    with pg.device(device):
        w = pg.Variable(np.zeros((4, 1), np.float32))
        b = pg.Variable(np.zeros(1, np.float32))
        xs, ys = pg.constant(x), pg.constant(y)
    opt = pg.optimizers.Adam(0.1)
    losses = []
    for _ in range(60):
        with pg.device(device), pg.GradientTape() as tape:
            d = pg.matmul(xs, w) + b - ys
            loss = pg.reduce_mean(d * d)
        opt.apply_gradients(zip(tape.gradient(loss, [w, b]), [w, b]))
        losses.append(float(loss.numpy()))
    assert losses[-1] < 0.01 * losses[0]


def test_variables_without_gradients_are_named_in_a_warning(device, rng):
    """As in TensorFlow: a None gradient leaves its variable unchanged, with
    a UserWarning naming it; the others are updated."""
    a0, b0 = rng.standard_normal(3), rng.standard_normal(3)
    with pg.device(device):
        a, b = pg.Variable(a0, name="used"), pg.Variable(b0, name="unused")
    opt = pg.optimizers.SGD(learning_rate=0.5)
    with pg.GradientTape() as tape:
        loss = pg.reduce_sum(a * 2.0)
    grads = tape.gradient(loss, [a, b])
    assert grads[1] is None
    with pytest.warns(UserWarning, match=r"Gradients do not exist for variables \['unused:0'\]"):
        opt.apply_gradients(zip(grads, [a, b]))
    np.testing.assert_allclose(a.numpy(), a0 - 1.0)
    np.testing.assert_array_equal(b.numpy(), b0)


@pytest.mark.parametrize("schedule", [
    lambda: pg.optimizers.schedules.Tabulated([0.5, 0.3, 0.2, 0.05]),
    lambda: pg.optimizers.schedules.ExponentialDecay(0.4, 3, 0.5),
    lambda: pg.optimizers.schedules.ExponentialDecay(0.4, 3, 0.5, staircase=True)])
def test_eager_steps_take_the_schedule_rate_without_host_ops(device, rng, schedule):
    """An eager step gets the schedule's rate as a number (``at_step``),
    the same as its ops give, and after the first step (which reads
    ``iterations`` once) runs no CPU op for it."""
    sched = schedule()
    for step in range(7):
        with pg.device("CPU:0"):
            ops = float(sched(pg.constant(np.float64(step))).numpy())
        assert sched.at_step(step) == pytest.approx(ops, rel=1e-12)
    x0 = rng.standard_normal(4)
    with pg.device(device):
        v = pg.Variable(x0)
    opt = pg.optimizers.SGD(sched)
    expected = x0.copy()
    for step in range(5):
        with pg.GradientTape() as tape:
            loss = pg.reduce_sum(v * 1.0)
        g = tape.gradient(loss, v)
        before = pg.testing.kernel_call_counts()
        opt.apply_gradients([(g, v)])
        after = pg.testing.kernel_call_counts()
        expected -= sched.at_step(step)
        cpu = {k: after[k] - before.get(k, 0) for k in after
               if k[1] == "CPU" and after[k] != before.get(k, 0)}
        if step > 0 and not device.startswith("CPU"):
            assert cpu == {}, cpu
    np.testing.assert_allclose(v.numpy(), expected, rtol=1e-12)
