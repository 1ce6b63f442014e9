"""Mixed precision (``pg.mixed_precision``): TensorFlow's policies, autocast
variables (float32 storage, reads in the compute dtype through a Cast on
the variable's device, float32 optimizer updates) and dynamic loss scaling,
checked against real TensorFlow / Keras where it defines the behaviour and
against float32 training and numpy otherwise."""
from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

import pluggable as pg
from pluggable.framework import errors

DEVICES = ["CPU:0", "MY_DEVICE:0"]
mp = pg.mixed_precision

POLICY_NAMES = ["float32", "float16", "bfloat16", "float64", "mixed_float16", "mixed_bfloat16",
                "int32", "bool", "uint8", "foo", "mixed_int8", "mixed_float32", "Float32",
                "float", "half", "mixed_bfloat16 ", 1, 2.5]


@pytest.fixture(autouse=True)
def _float32_policy():
    """Every test starts and ends with the default global policy."""
    mp.set_global_policy("float32")
    yield
    mp.set_global_policy("float32")


def _describe(make, name):
    try:
        p = make(name)
    except Exception as exc:  # noqa: BLE001  (the class and message are compared)
        return ("error", type(exc).__name__, str(exc))
    return ("ok", repr(p), p.name, p.compute_dtype, p.variable_dtype)


def test_policies_match_tensorflow(tf_oracle):
    want = tf_oracle.run(
        "from keras import mixed_precision as kmp\n"
        "def describe(name):\n"
        "    try:\n"
        "        p = kmp.Policy(name)\n"
        "    except Exception as exc:\n"
        "        return ('error', type(exc).__name__, str(exc))\n"
        "    return ('ok', repr(p), p.name, p.compute_dtype, p.variable_dtype)\n"
        "def set_global(policy):\n"
        "    try:\n"
        "        kmp.set_global_policy(policy)\n"
        "        return ('ok', repr(kmp.global_policy()))\n"
        "    except Exception as exc:\n"
        "        return ('error', type(exc).__name__, str(exc))\n"
        "default = repr(kmp.global_policy())\n"
        "sets = [set_global(p) for p in ['mixed_bfloat16', kmp.Policy('mixed_float16'), 'foo',"
        " 1, None]]\n"
        "result = [default, [describe(n) for n in names], sets, describe(None)]",
        names=POLICY_NAMES)
    default, described, sets, from_global = want
    assert repr(mp.global_policy()) == default == '<DTypePolicy "float32">'
    for name, theirs in zip(POLICY_NAMES, described):
        ours = _describe(mp.Policy, name)
        if theirs[0] == "ok":
            assert ours == tuple(theirs), name
        else:  # the same class (InvalidArgumentError is a ValueError) and message
            assert ours[0] == "error", (name, ours)
            assert ours[1] in (theirs[1], "InvalidArgumentError"), (name, ours, theirs)
            exc_type = {"ValueError": ValueError, "TypeError": TypeError}[theirs[1]]
            with pytest.raises(exc_type) as info:
                mp.Policy(name)
            assert str(info.value).startswith(theirs[2]), (name, str(info.value), theirs[2])
    for policy, theirs in zip(["mixed_bfloat16", mp.Policy("mixed_float16"), "foo", 1, None],
                              sets):
        if theirs[0] == "ok":
            mp.set_global_policy(policy)
            assert repr(mp.global_policy()) == theirs[1]
        else:
            with pytest.raises(ValueError) as info:
                mp.set_global_policy(policy)
            assert isinstance(info.value, errors.InvalidArgumentError)
            assert str(info.value).startswith(theirs[2])
    # Policy(None) is the global policy's (mixed_float16 after the last
    # successful set, in both)
    assert _describe(mp.Policy, None) == tuple(from_global)
    assert mp.Policy is mp.DTypePolicy
    assert mp.Policy("mixed_bfloat16") == mp.Policy("mixed_bfloat16") != mp.Policy("bfloat16")


def test_policy_scope_restores_the_global_policy():
    mp.set_global_policy("mixed_float16")
    with mp.policy_scope("mixed_bfloat16"):
        assert mp.global_policy().name == "mixed_bfloat16"
        with pytest.raises(errors.InvalidArgumentError):
            with mp.policy_scope("float8"):
                pass
        assert mp.global_policy().name == "mixed_bfloat16"
    assert mp.global_policy().name == "mixed_float16"


@pytest.mark.parametrize("device", DEVICES)
def test_autocast_variable_stores_float32_and_reads_bfloat16(device, rng):
    w0 = rng.standard_normal((5, 3)).astype(np.float32)
    x = rng.standard_normal((4, 5)).astype(np.float32)
    bf16 = pg.bfloat16.as_numpy_dtype
    with pg.device(device), mp.policy_scope("mixed_bfloat16"):
        w = pg.Variable(w0, name="w")
        from_bf16 = pg.Variable(pg.constant(w0, dtype=pg.bfloat16))  # stored as float32
        f64 = pg.Variable(w0.astype(np.float64), dtype="float64")  # explicit: kept
        count = pg.Variable(np.int32(3))  # not floating: a plain variable
    assert w.dtype is w.true_dtype is pg.float32  # as TensorFlow's AutoCastVariable.dtype
    assert from_bf16.dtype is pg.float32 and f64.dtype is pg.float64
    np.testing.assert_array_equal(w.numpy(), w0)  # the stored value, exactly
    np.testing.assert_array_equal(from_bf16.numpy(), w0.astype(bf16).astype(np.float32))
    assert "dtype=float32 dtype_to_cast_to=bfloat16" in repr(w)
    dev_type = device.split(":")[0]
    with pg.testing.expect_kernel("Cast", dev_type, min_calls=3):
        r, r64 = w.value(), f64.read_value()
        y = pg.matmul(pg.constant(x, dtype=pg.bfloat16), w)  # no hand-written cast
    assert r.dtype is r64.dtype is y.dtype is pg.bfloat16
    assert r.device == r64.device == w.device
    np.testing.assert_array_equal(np.asarray(r.numpy(), np.float32),
                                  w0.astype(bf16).astype(np.float32))
    np.testing.assert_allclose(np.asarray(y.numpy(), np.float32),
                               x.astype(bf16).astype(np.float32) @
                               w0.astype(bf16).astype(np.float32), rtol=2e-2, atol=2e-2)
    assert count.dtype is pg.int32 and count.value().dtype is pg.int32
    assert "dtype_to_cast_to" not in repr(count)
    # after the policy changes, the variable keeps the policy it was made under
    assert mp.global_policy().name == "float32" and w.value().dtype is pg.bfloat16
    with mp.autocast(None):
        assert w.value().dtype is pg.float32
        np.testing.assert_array_equal(w.value().numpy(), w0)
        with mp.autocast("float16"):
            assert w.value().dtype is pg.float16
        with mp.autocast():
            assert w.value().dtype is pg.bfloat16
    # copies keep the autocast; assignments take the stored dtype
    for c in (copy.deepcopy(w), pickle.loads(pickle.dumps(w))):
        assert c.dtype is pg.float32 and c.value().dtype is pg.bfloat16
        np.testing.assert_array_equal(c.numpy(), w0)
    new = rng.standard_normal((5, 3)).astype(np.float32)
    w.assign(new)
    np.testing.assert_array_equal(w.numpy(), new)
    with pytest.raises(errors.InvalidArgumentError, match="cannot assign a bfloat16"):
        w.assign(pg.constant(new, dtype=pg.bfloat16))


def test_bad_autocast_inputs_raise_typed_errors(rng):
    with mp.policy_scope("mixed_bfloat16"):
        w = pg.Variable(rng.standard_normal((3, 2)).astype(np.float32))
    with pytest.raises(errors.InvalidArgumentError, match="floating dtype, got int32"):
        with mp.autocast("int32"):
            pass
    x = pg.constant(rng.standard_normal((4, 3)).astype(np.float32))
    with pytest.raises(ValueError, match="Incompatible type conversion requested to type "
                       "'float32' for autocast variable"):
        pg.matmul(x, w)


@pytest.mark.parametrize("device", DEVICES)
def test_gradient_reaches_the_float32_variable_through_cast(device, rng):
    x = rng.standard_normal((6, 4)).astype(np.float32)
    w0 = rng.standard_normal((4, 3)).astype(np.float32)
    bf16 = pg.bfloat16.as_numpy_dtype
    with pg.device(device), mp.policy_scope("mixed_bfloat16"):
        w = pg.Variable(w0)
        with pg.GradientTape() as tape:
            loss = pg.reduce_sum(pg.square(pg.matmul(pg.constant(x, dtype=pg.bfloat16), w)))
        g = tape.gradient(loss, w)
    assert g.dtype is pg.float32 and g.device == w.device
    xb, wb = x.astype(bf16).astype(np.float64), w0.astype(bf16).astype(np.float64)
    np.testing.assert_allclose(g.numpy(), xb.T @ (2 * (xb @ wb)), rtol=3e-2, atol=3e-2)


def _mlp(device, policy, params, batches, lr, traced=False, epsilon=1e-7):
    """Losses of Adam steps of a two-layer MLP made under `policy`, and its
    variables and optimizer (a policy that is not mixed leaves variables
    alone: they are made in its dtype here)."""
    p = mp.Policy(policy)
    compute = pg.as_dtype(p.compute_dtype)
    with pg.device(device), mp.policy_scope(policy):
        ws = [pg.Variable(w if p.is_mixed else pg.constant(w, dtype=compute)) for w in params]
    opt = pg.optimizers.Adam(learning_rate=lr, epsilon=epsilon)

    def step(x, y):
        with pg.GradientTape() as tape:
            h = pg.nn.relu(pg.matmul(x, ws[0]) + ws[1])
            logits = pg.cast(pg.matmul(h, ws[2]) + ws[3], pg.float32)
            loss = pg.reduce_mean(pg.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
        opt.apply_gradients(zip(tape.gradient(loss, ws), ws))
        return loss
    run = pg.function(step) if traced else step
    losses = []
    with pg.device(device):
        for x, y in batches:
            losses.append(float(run(pg.constant(x, dtype=compute), pg.constant(y)).numpy()))
    return losses, ws, opt


def _mlp_data(rng, steps=5):
    params = [rng.standard_normal((8, 16)).astype(np.float32) * 0.3,
              rng.standard_normal(16).astype(np.float32) * 0.1,
              rng.standard_normal((16, 4)).astype(np.float32) * 0.3,
              rng.standard_normal(4).astype(np.float32) * 0.1]
    batch = (rng.standard_normal((32, 8)).astype(np.float32),
             rng.integers(0, 4, 32).astype(np.int32))
    return params, [batch] * steps  # (one batch: the loss goes down)


@pytest.mark.parametrize("device", DEVICES)
def test_mlp_trains_under_mixed_bfloat16_as_in_float32(device, rng):
    params, batches = _mlp_data(rng)
    ref, ref_ws, _ = _mlp(device, "float32", params, batches, lr=1e-2)
    with pg.testing.expect_kernel("Cast", device.split(":")[0], min_calls=4 * len(batches)):
        got, ws, opt = _mlp(device, "mixed_bfloat16", params, batches, lr=1e-2)
    assert ref[-1] < ref[0]  # (it trains)
    np.testing.assert_allclose(got, ref, rtol=2e-2)
    for w, r, p in zip(ws, ref_ws, params):
        assert w.dtype is pg.float32 and w.value().dtype is pg.bfloat16
        for slot in ("m", "v"):
            s = opt.get_slot(w, slot)
            assert s.dtype is pg.float32 and s.value().dtype is pg.float32  # not autocast
        # the training moved the weights the same way: nearly every weight
        # in the same direction (a tiny gradient's sign may differ in
        # bfloat16, and Adam moves it by about lr either way: over 25 seeds
        # at least 97% agreed, the distance was at most 0.3 of the move; a
        # bias of 8 values may have 1 of 8 the other way)
        ours, theirs = w.numpy() - p, r.numpy() - p
        differ = int(np.sum(np.sign(ours) != np.sign(theirs)))
        assert differ <= max(1, int(0.1 * ours.size)), (differ, ours.size)
        assert np.linalg.norm(ours - theirs) <= 0.5 * np.linalg.norm(theirs)


@pytest.mark.parametrize("device", DEVICES)
def test_float32_master_weights_keep_updates_below_bfloat16_resolution(device, rng):
    """Adam's first step (epsilon ~0) moves every weight by lr: 1e-4 is
    below half the bfloat16 spacing of a weight above 0.1 in magnitude, so
    the bfloat16 reads of most of those weights do not change (all but the
    ones close to a rounding boundary) while their float32 values move by lr
    (the next steps build on it)."""
    params, batches = _mlp_data(rng, steps=1)
    lr = 1e-4
    _, mixed, _ = _mlp(device, "mixed_bfloat16", params, batches, lr, epsilon=1e-12)
    bf16 = pg.bfloat16.as_numpy_dtype
    same = []  # over the weights above 0.1: whether the bfloat16 read kept its value
    for p, m in zip(params, mixed):
        assert m.dtype is pg.float32
        moved = np.abs(m.numpy() - p)
        np.testing.assert_allclose(moved[moved > 0], lr, rtol=2e-2)  # (float32 rounding)
        assert (moved > 0).mean() > 0.5
        read = np.asarray(m.value().numpy(), np.float32)
        np.testing.assert_array_equal(read, m.numpy().astype(bf16).astype(np.float32))
        big = (np.abs(p) > 0.1) & (moved > 0)
        same.extend(read[big] == p.astype(bf16).astype(np.float32)[big])
    assert len(same) > 40 and np.mean(same) > 0.5, (len(same), np.mean(same))


def test_traced_mixed_step_matches_the_eager_one(rng):
    params, batches = _mlp_data(rng, steps=3)
    eager, ews, _ = _mlp("MY_DEVICE:0", "mixed_bfloat16", params, batches, lr=1e-2)
    with pg.testing.expect_kernel("Cast", "MY_DEVICE", min_calls=4 * len(batches)):
        traced, tws, _ = _mlp("MY_DEVICE:0", "mixed_bfloat16", params, batches, lr=1e-2,
                              traced=True)
    np.testing.assert_allclose(traced, eager, rtol=1e-5)
    for a, b in zip(tws, ews):
        assert a.dtype is pg.float32
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_a_bfloat16_gradient_is_cast_to_float32_before_the_update(device, rng):
    w0 = rng.standard_normal(6).astype(np.float32)
    g = rng.standard_normal(6).astype(np.float32)
    with pg.device(device):
        with mp.policy_scope("mixed_bfloat16"):
            w = pg.Variable(w0)
        plain = pg.Variable(w0)
        gb = pg.constant(g, dtype=pg.bfloat16)
        pg.optimizers.Adam(1e-2).apply_gradients([(gb, w)])
        pg.optimizers.Adam(1e-2).apply_gradients([(pg.cast(gb, pg.float32), plain)])
    assert w.dtype is pg.float32
    np.testing.assert_array_equal(w.numpy(), plain.numpy())
    assert not np.array_equal(w.numpy(), w0)


# ------------------------------------------------------------ loss scaling

SCALED_STEPS = ["ok", "ok", "ok", "inf", "nan", "ok", "ok", "ok", "ok", "-inf", "ok"]


def _scaled_grads(rng, kinds):
    out = []
    for k in kinds:
        g = (rng.standard_normal(5) * 64).astype(np.float32)
        if k != "ok":
            g[rng.integers(0, 5)] = float(k)
        out.append(g)
    return out


@pytest.mark.parametrize("device", DEVICES)
def test_dynamic_loss_scale_matches_tensorflow(device, tf_oracle, rng):
    w0 = rng.standard_normal(5).astype(np.float32)
    grads = _scaled_grads(rng, SCALED_STEPS)
    want = tf_oracle.run(
        "import keras\n"
        "v = keras.Variable(w0)\n"
        "opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(learning_rate=0.5),"
        " initial_scale=16.0, dynamic_growth_steps=3)\n"
        "scales, values, its = [], [], []\n"
        "for g in grads:\n"
        "    opt.apply([tf.constant(g)], [v])\n"
        "    scales.append(float(opt.dynamic_scale.numpy()))\n"
        "    values.append(v.numpy())\n"
        "    its.append(int(opt.inner_optimizer.iterations.numpy()))\n"
        "result = [np.array(scales), np.stack(values), np.array(its)]",
        w0=w0, grads=grads)
    with pg.device(device):
        v = pg.Variable(w0)
        opt = mp.LossScaleOptimizer(pg.optimizers.SGD(learning_rate=0.5), initial_scale=16.0,
                                    dynamic_growth_steps=3)
        scales, values, its = [], [], []
        for g in grads:
            unscaled = opt.get_unscaled_gradients([pg.constant(g)])
            opt.apply_gradients(zip(unscaled, [v]))
            scales.append(float(opt.loss_scale.numpy()))
            values.append(v.numpy())
            its.append(int(opt.iterations.numpy()))
    np.testing.assert_array_equal(scales, want[0])
    np.testing.assert_allclose(np.stack(values), want[1], rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(its, want[2])
    assert scales[:5] == [16.0, 16.0, 32.0, 16.0, 8.0]  # (the sequence the rules give)


def test_loss_scale_is_halved_but_not_below_one():
    """TensorFlow's DynamicLossScale: ``max(scale / 2, 1)`` on a non-finite
    step (Keras 3 drops the floor; pluggable keeps TensorFlow's)."""
    with pg.device("CPU:0"):
        v = pg.Variable(np.zeros(2, np.float32))
    opt = mp.LossScaleOptimizer(pg.optimizers.SGD(0.1), initial_scale=4.0)
    seen = []
    for _ in range(4):
        opt.apply_gradients([(pg.constant(np.array([np.inf, 1.0], np.float32)), v)])
        seen.append(float(opt.loss_scale.numpy()))
    assert seen == [2.0, 1.0, 1.0, 1.0]
    assert int(opt.iterations.numpy()) == 0 and int(opt.dynamic_counter.numpy()) == 0
    np.testing.assert_array_equal(v.numpy(), [0.0, 0.0])


def test_loss_scale_doubles_after_2000_finite_steps():
    with pg.device("CPU:0"):
        v = pg.Variable(np.zeros(1, np.float32))
    opt = mp.LossScaleOptimizer(pg.optimizers.SGD(0.0))
    assert opt.initial_scale == 2.0 ** 15 and opt.dynamic_growth_steps == 2000
    g = pg.constant(np.ones(1, np.float32))
    for _ in range(1999):
        opt.apply_gradients([(g, v)])
    assert float(opt.loss_scale.numpy()) == 2.0 ** 15
    assert int(opt.dynamic_counter.numpy()) == 1999
    opt.apply_gradients([(g, v)])
    assert float(opt.loss_scale.numpy()) == 2.0 ** 16
    assert int(opt.dynamic_counter.numpy()) == 0 and int(opt.iterations.numpy()) == 2000


@pytest.mark.parametrize("device", DEVICES)
def test_loss_scaling_recovers_float16_gradients_that_underflow(device, rng):
    """d loss / d y is 2**-24 * 2**-12, below float16's smallest value:
    without a loss scale the float16 backward pass gives zeros; scaled by
    2**15 and unscaled in float32 it gives numpy's gradient."""
    x = rng.uniform(0.5, 1.0, (8, 4)).astype(np.float32)
    w0 = rng.uniform(0.5, 1.0, (4, 3)).astype(np.float32)
    c1, c2 = np.float16(2.0 ** -12), np.float16(2.0 ** -24)
    with pg.device(device), mp.policy_scope("mixed_float16"):
        w = pg.Variable(w0)
    opt = mp.LossScaleOptimizer(pg.optimizers.SGD(2.0 ** 30))  # (a visible float32 step)

    def grads(scaled):
        with pg.device(device), pg.GradientTape() as tape:
            y = pg.matmul(pg.constant(x, dtype=pg.float16), w) * c1
            loss = pg.reduce_sum(y * c2)
            target = opt.get_scaled_loss(loss) if scaled else loss
        g = tape.gradient(target, w)
        return opt.get_unscaled_gradients([g])[0] if scaled else g
    plain, scaled = grads(False), grads(True)
    assert plain.dtype is scaled.dtype is pg.float32
    want = x.astype(np.float16).astype(np.float64).sum(0)[:, None] * np.ones((1, 3)) * 2.0 ** -36
    np.testing.assert_array_equal(plain.numpy(), np.zeros((4, 3), np.float32))
    # (float16 subnormals near 2**-21 hold 3 bits: a few % of rounding)
    np.testing.assert_allclose(scaled.numpy(), want, rtol=5e-2)
    opt.apply_gradients([(scaled, w)])
    np.testing.assert_allclose(w0 - w.numpy(), scaled.numpy() * 2.0 ** 30, rtol=1e-4)
    assert int(opt.iterations.numpy()) == 1


def test_minimize_scales_and_unscales(rng):
    x = rng.standard_normal((5, 3)).astype(np.float32)
    w0 = rng.standard_normal(3).astype(np.float32)
    w, ref = pg.Variable(w0), pg.Variable(w0)
    opt = mp.LossScaleOptimizer(pg.optimizers.SGD(0.1), initial_scale=1024.0)
    loss = lambda v: pg.reduce_sum(pg.square(pg.matmul(pg.constant(x), v[:, None])))  # noqa: E731
    opt.minimize(lambda: loss(w), [w])
    with pg.GradientTape() as tape:
        t = loss(w)
    opt.minimize(t, [w], tape=tape)
    sgd = pg.optimizers.SGD(0.1)
    for _ in range(2):
        sgd.minimize(lambda: loss(ref), [ref])
    np.testing.assert_allclose(w.numpy(), ref.numpy(), rtol=1e-5, atol=1e-6)
    assert int(opt.iterations.numpy()) == 2 and len(opt.variables) == 3


def test_loss_scale_optimizer_bad_arguments_raise_as_tensorflow():
    sgd = pg.optimizers.SGD(0.1)
    with pytest.raises(TypeError, match="must be an instance of pg.optimizers.Optimizer"):
        mp.LossScaleOptimizer(object())
    with pytest.raises(TypeError, match="cannot wrap another LossScaleOptimizer"):
        mp.LossScaleOptimizer(mp.LossScaleOptimizer(sgd))
    with pytest.raises(ValueError, match='"initial_scale" must be specified'):
        mp.LossScaleOptimizer(sgd, dynamic=False)
    with pytest.raises(ValueError, match='"dynamic_growth_steps" must be None'):
        mp.LossScaleOptimizer(sgd, dynamic=False, initial_scale=8.0, dynamic_growth_steps=3)
    for bad in (0.0, -2.0, float("inf"), "8"):
        with pytest.raises(errors.InvalidArgumentError, match="initial_scale must be"):
            mp.LossScaleOptimizer(sgd, initial_scale=bad)
    with pytest.raises(errors.InvalidArgumentError, match="dynamic_growth_steps must be"):
        mp.LossScaleOptimizer(sgd, dynamic_growth_steps=0)
    fixed = mp.LossScaleOptimizer(sgd, dynamic=False, initial_scale=8.0)
    with pg.device("CPU:0"):
        v = pg.Variable(np.zeros(1, np.float32))
    fixed.apply_gradients([(pg.constant(np.array([np.inf], np.float32)), v)])
    assert float(fixed.loss_scale.numpy()) == 8.0 and fixed.dynamic_counter is None


def test_loss_scaling_inside_pg_function_says_it_runs_eagerly():
    opt = mp.LossScaleOptimizer(pg.optimizers.SGD(0.1))

    @pg.function
    def scaled(x):
        return opt.get_scaled_loss(x)
    with pytest.raises(errors.UnimplementedError, match="runs eagerly only"):
        scaled(pg.constant(1.0))


def test_checkpoints_hold_the_stored_values_and_the_loss_scale(rng, tmp_path):
    """As TensorFlow's: an autocast variable saves its float32 value, so a
    checkpoint of a mixed model restores into plain float32 variables; a
    LossScaleOptimizer's scale and count are saved with it."""
    w0 = rng.standard_normal(4).astype(np.float32)
    with mp.policy_scope("mixed_bfloat16"), pg.device("MY_DEVICE:0"):
        w = pg.Variable(w0)
    opt = mp.LossScaleOptimizer(pg.optimizers.Adam(1e-2), initial_scale=64.0)
    with pg.device("MY_DEVICE:0"):
        g = pg.constant(rng.standard_normal(4).astype(np.float32))
        opt.apply_gradients([(g, w)])
        opt.apply_gradients([(g * np.float32("nan"), w)])
    path = pg.train.Checkpoint(w=w, opt=opt).save(str(tmp_path / "ck"))
    with pg.device("MY_DEVICE:0"):
        plain = pg.Variable(np.zeros(4, np.float32))
    again = mp.LossScaleOptimizer(pg.optimizers.Adam(1e-2))
    again.inner_optimizer.build([plain])
    pg.train.Checkpoint(w=plain, opt=again).restore(path)
    np.testing.assert_array_equal(plain.numpy(), w.numpy())
    assert plain.value().dtype is pg.float32
    for slot in ("m", "v"):
        np.testing.assert_array_equal(again.inner_optimizer.get_slot(plain, slot).numpy(),
                                      opt.inner_optimizer.get_slot(w, slot).numpy())
    assert float(again.loss_scale.numpy()) == 32.0 and int(again.iterations.numpy()) == 1
