"""``pg.keras``: Layer, Dense, BatchNormalization, Model and Sequential
against TensorFlow's Keras (in the oracle child) on the same weights and
inputs, on CPU and MY_DEVICE."""
from __future__ import annotations

import numpy as np
import pytest

import pluggable as pg

DEVICES = ["CPU:0", "MY_DEVICE:0"]

DENSE = """
layer = tf.keras.layers.Dense(k.shape[1], activation=activation)
layer.build((None, k.shape[0]))
layer.kernel.assign(k)
layer.bias.assign(b)
xt = tf.constant(x)
with tf.GradientTape() as tape:
    tape.watch(xt)
    y = layer(xt)
    loss = tf.reduce_sum(y * y)
gk, gb, gx = tape.gradient(loss, [layer.kernel, layer.bias, xt])
result = [y, gk, gb, gx]
"""


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("activation", [None, "relu", "tanh"])
@pytest.mark.parametrize("lead", [(5,), (2, 3)])
def test_dense_and_its_gradients_match_keras(device, activation, lead, tf_oracle, rng):
    k = rng.standard_normal((4, 3)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    x = rng.standard_normal(lead + (4,)).astype(np.float32)
    want = tf_oracle.run(DENSE, k=k, b=b, x=x, activation=activation)
    with pg.device(device), pg.testing.expect_kernel("MatMul", device.split(":")[0]):
        layer = pg.keras.layers.Dense(3, activation=activation)
        xt = pg.constant(x)
        with pg.GradientTape() as tape:
            tape.watch(xt)
            y = layer(xt)   # builds: kernel (4, 3), bias (3,)
            layer.kernel.assign(k)
            layer.bias.assign(b)
            y = layer(xt)
            loss = pg.reduce_sum(y * y)
        got = [y, *tape.gradient(loss, [layer.kernel, layer.bias, xt])]
    assert layer.kernel.device.endswith(device)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-5, atol=1e-5, err_msg=rng.seed_text)


BATCH_NORM = """
bn = tf.keras.layers.BatchNormalization(axis=axis, momentum=0.9, epsilon=1e-3)
bn.build(x.shape)
bn.gamma.assign(g)
bn.beta.assign(b)
train = bn(tf.constant(x), training=True)
moving = [bn.moving_mean.numpy(), bn.moving_variance.numpy()]
infer = bn(tf.constant(x2), training=False)
result = [train, infer] + moving
"""


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("axis", [-1, 1])
def test_batch_normalization_trains_and_infers_as_keras(device, axis, tf_oracle, rng):
    x = (rng.standard_normal((6, 4, 5)) * 2 + 1).astype(np.float32)
    x2 = rng.standard_normal((3, 4, 5)).astype(np.float32)
    n = x.shape[axis]
    g = rng.uniform(0.5, 1.5, n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    want = tf_oracle.run(BATCH_NORM, x=x, x2=x2, g=g, b=b, axis=axis)
    with pg.device(device):
        bn = pg.keras.layers.BatchNormalization(axis=axis, momentum=0.9, epsilon=1e-3)
        bn.build(pg.TensorShape(x.shape))
        bn.built = True
        bn.gamma.assign(g)
        bn.beta.assign(b)
        train = bn(pg.constant(x), training=True)
        moving = [bn.moving_mean.numpy(), bn.moving_variance.numpy()]
        infer = bn(pg.constant(x2), training=False)
    for got, ref in zip([train.numpy(), infer.numpy()] + moving, want):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5, err_msg=rng.seed_text)
    assert [len(bn.trainable_variables), len(bn.non_trainable_variables)] == [2, 2]


NAMES = """
outer = tf.keras.Sequential([tf.keras.layers.Dense(2), tf.keras.layers.Dense(1)])
outer(tf.zeros([1, 3]))
result = [[v.name for v in outer.variables], [v.path.split("/", 1)[1] for v in outer.variables],
          repr(outer.variables[0]).split(",")[1:3]]
"""


def test_weights_are_named_and_shown_as_keras_names_them(tf_oracle):
    want = tf_oracle.run(NAMES)
    outer = pg.keras.Sequential([pg.keras.layers.Dense(2), pg.keras.layers.Dense(1)])
    outer(pg.zeros([1, 3]))
    assert [v.name for v in outer.variables] == list(want[0])
    # the layers' own numbers depend on how many layers the process made before
    paths = [v.path.split("/", 1)[1] for v in outer.variables]
    strip = [p.split("_")[0].split("/")[0] + "/" + p.rsplit("/", 1)[1] for p in paths]
    assert strip == [p.split("_")[0].split("/")[0] + "/" + p.rsplit("/", 1)[1] for p in want[1]]
    assert repr(outer.variables[0]).split(",")[1:3] == list(want[2])
    a, b = pg.keras.layers.Dense(1), pg.keras.layers.Dense(1)
    n = lambda layer: int(layer.name.rsplit("_", 1)[1]) if "_" in layer.name else 0  # noqa: E731
    assert a.name.startswith("dense") and n(b) == n(a) + 1


class Scale(pg.keras.layers.Layer):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.calls = 0

    def build(self, input_shape):
        self.w = self.add_weight("w", (input_shape[-1],), initializer="ones")

    def call(self, x, training=None):
        self.calls += 1
        return x * self.w if training else x * (2 * self.w)


class Net(pg.keras.Model):
    def __init__(self):
        super().__init__()
        self.hidden = pg.keras.layers.Dense(8, activation="relu")
        self.scale = Scale()
        self.out = pg.keras.layers.Dense(1)

    def call(self, x, training=None):
        return self.out(self.scale(self.hidden(x), training=training))


@pytest.mark.parametrize("device", DEVICES)
def test_a_subclassed_model_builds_on_first_call_and_trains(device, rng):
    x = rng.standard_normal((16, 3)).astype(np.float32)
    target = (x @ np.array([[1.0], [-2.0], [0.5]], np.float32)).astype(np.float32)
    with pg.device(device):
        net = Net()
        assert net.trainable_variables == []   # nothing built yet
        net(x, training=True)
        assert [v.shape for v in net.trainable_variables] == [(3, 8), (8,), (8,), (8, 1), (1,)]
        opt = pg.optimizers.SGD(0.05)

        def loss_fn():
            return pg.reduce_mean((net(x, training=True) - target) ** 2)

        first = float(loss_fn())
        for _ in range(40):
            with pg.GradientTape() as tape:
                loss = loss_fn()
            grads = tape.gradient(loss, net.trainable_variables)
            assert all(g is not None for g in grads)
            opt.apply_gradients(zip(grads, net.trainable_variables))
        assert float(loss_fn()) < 0.5 * first
        # training= reaches the layer that takes it: inference doubles the scale
        h = net.hidden(x)
        np.testing.assert_allclose(net.scale(h, training=False).numpy(), 2 * (h * net.scale.w).numpy(),
                                   rtol=1e-6)


PLAIN_VARIABLE = """
class Plain(tf.keras.layers.Layer):
    def build(self, input_shape):
        self.w = tf.Variable(tf.ones([input_shape[-1], 2]), name="w")
        self.k = self.add_weight(name="k", shape=(2,), initializer="zeros")

    def call(self, x):
        return tf.matmul(x, self.w) + self.k

layer = Plain()
y = layer(tf.ones([1, 3]))
result = [[v.name for v in layer.variables], type(layer.variables).__name__, y]
"""


def test_only_weights_made_by_add_weight_are_a_layers_variables(tf_oracle):
    want = tf_oracle.run(PLAIN_VARIABLE)
    scope = {"tf": pg}
    exec(PLAIN_VARIABLE, scope)
    got = scope["result"]
    assert got[:2] == [list(want[0]), want[1]] == [["k"], "list"]
    np.testing.assert_array_equal(got[2].numpy(), want[2])


def test_a_frozen_layer_has_no_trainable_weights():
    layer = pg.keras.layers.Dense(2)
    layer(pg.ones([1, 4]))
    layer.trainable = False
    assert layer.trainable_variables == [] and len(layer.non_trainable_variables) == 2
    assert len(layer.weights) == 2


def test_a_layer_called_inside_a_function_builds_once(rng):
    layer = pg.keras.layers.Dense(3)

    @pg.function
    def f(x):
        return layer(x)

    x = rng.standard_normal((2, 5)).astype(np.float32)
    np.testing.assert_allclose(f(x).numpy(), x @ layer.kernel.numpy() + layer.bias.numpy(),
                               rtol=1e-5, atol=1e-6)
    f(x)
    assert len(layer.variables) == 2


def test_bad_arguments_and_missing_parts_say_what_to_do():
    with pytest.raises(ValueError, match="units"):
        pg.keras.layers.Dense(0)
    with pytest.raises(TypeError, match="unrecognized keyword arguments"):
        pg.keras.layers.Dense(3, kernel_regularizer="l2")
    with pytest.raises(ValueError, match="last dimension"):
        pg.keras.layers.Dense(3)(pg.constant(1.0))
    with pytest.raises(NotImplementedError, match="functional form"):
        pg.keras.Model(inputs=1, outputs=2)
    with pytest.raises(AttributeError, match="GradientTape"):
        pg.keras.optimizers  # noqa: B018
    with pytest.raises(ValueError, match="Could not interpret activation"):
        pg.keras.layers.Dense(3, activation="no_such_activation")
