"""Automatic differentiation: every gradient function against central finite
differences on every device, second derivatives through nested tapes, and
the GradientTape rules (persistent or not, watching, output_gradients,
unconnected gradients, errors).

Finite differences run in float64 (float32 for ops without float64
kernels), on the same device as the gradient; a case is skipped, with the
reason, only where the device has no kernel for one of its ops."""
from __future__ import annotations

import contextlib
import threading

import numpy as np
import pytest

import pluggable as pg
from pluggable.framework import registry

from gradient_cases import CASES, CHECKED_ELSEWHERE, NO_GRADIENT, Case

R = pg.raw_ops
DEVICES = ["CPU:0", "MY_DEVICE:0", "GPU:0"]


@pytest.fixture(params=DEVICES)
def device(request):
    name = request.param
    if name.startswith("GPU") and not pg.list_physical_devices("GPU"):
        pytest.skip("no GPU device present")
    return name


def _flat(ys):
    return list(ys) if isinstance(ys, (list, tuple)) else [ys]


def _float_outputs(ys):
    return [y for y in _flat(ys) if y.dtype.is_floating]


def _objective(case: Case, arrays: list, weights: list, device: str) -> float:
    with pg.device(device):
        ys = _float_outputs(case.fn(*[pg.constant(a) for a in arrays]))
    return float(sum(np.sum(y.numpy().astype(np.float64) * w) for y, w in zip(ys, weights)))


def _numeric(case: Case, arrays: list, weights: list, device: str, h: float) -> list:
    grads = []
    for i in case.wrt:
        g = np.zeros(arrays[i].shape)
        for j in np.ndindex(arrays[i].shape):
            plus = [a.copy() for a in arrays]
            minus = [a.copy() for a in arrays]
            plus[i][j] += h
            minus[i][j] -= h
            g[j] = (_objective(case, plus, weights, device)
                    - _objective(case, minus, weights, device)) / (2 * h)
        grads.append(g)
    return grads


@contextlib.contextmanager
def _skip_without_kernels():
    """Skips (with the reason) when an op has no kernel in this build."""
    try:
        yield
    except pg.errors.NotFoundError as exc:
        if "no kernel for op" not in str(exc):
            raise
        pytest.skip(f"{exc.op} has no kernel here in this build")


def _inputs(case: Case, rng) -> list:
    dt = np.float32 if case.float32 else np.float64
    return [a.astype(dt) if np.asarray(a).dtype.kind == "f" else np.asarray(a)
            for a in case.inputs(rng)]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_gradient_matches_finite_differences(case, device, rng):
    arrays = _inputs(case, rng)
    with _skip_without_kernels(), pg.device(device):
        xs = [pg.constant(a) for a in arrays]
        with pg.GradientTape() as tape:
            for i in case.wrt:
                tape.watch(xs[i])
            ys = case.fn(*xs)
        outs = _float_outputs(ys)
        weights = [rng.standard_normal(y.shape) for y in outs]
        grads = tape.gradient(outs, [xs[i] for i in case.wrt],
                              output_gradients=[pg.constant(w.astype(y.dtype.as_numpy_dtype))
                                                for w, y in zip(weights, outs)])
    h, tol = (1e-2, 2e-2) if case.float32 else (1e-6, 1e-5)
    numeric = _numeric(case, arrays, weights, device, h)
    for i, g, n in zip(case.wrt, grads, numeric):
        got = np.zeros_like(n) if g is None else g.numpy().astype(np.float64)
        np.testing.assert_allclose(got, n, rtol=tol, atol=tol,
                                   err_msg=f"{case.id} input {i} on {device} ({rng.seed_text})")


def test_every_differentiable_op_has_a_gradient_and_a_check():
    checked = {c.op for c in CASES} | set(CHECKED_ELSEWHERE)
    missing, unchecked = [], []
    for name, op in registry.OPS.items():
        if op.gradient is registry.NOT_DIFFERENTIABLE or op.source != "built-in":
            continue                  # ops of plugins loaded by other tests register their own
        if op.gradient is None:
            floats = any(a.type_attr or (a.dtype and a.dtype.is_floating) for a in op.outputs)
            if floats and name not in NO_GRADIENT and op.outputs:
                missing.append(name)
        elif name not in checked:
            unchecked.append(name)
    assert not missing, f"ops with float outputs and no gradient function: {missing}"
    assert not unchecked, f"gradient functions without a finite-difference case: {unchecked}"


@pytest.mark.parametrize("op", sorted(NO_GRADIENT))
def test_gradient_through_an_op_without_one_is_a_lookup_error(op):
    assert registry.get_gradient(op) is None, NO_GRADIENT[op]


# ------------------------------------------------------------ second derivatives

SECOND = {
    "tanh": lambda x: R.Tanh(x=x),
    "sigmoid": lambda x: R.Sigmoid(x=x),
    "exp_mul": lambda x: R.Mul(x=R.Exp(x=x), y=x),
    "log_sqrt": lambda x: R.Log(x=R.Sqrt(x=R.Mul(x=x, y=x))),
    "rsqrt_square": lambda x: R.Rsqrt(x=R.AddV2(x=R.Square(x=x), y=np.float64(1.0))),
    "gelu": lambda x: R.Gelu(features=x),
    "gelu_tanh": lambda x: R.Gelu(features=x, approximate=True),
    "softmax": lambda x: R.Softmax(logits=R.Reshape(tensor=x, shape=np.array([2, 3], np.int32))),
    "log_softmax": lambda x: R.LogSoftmax(logits=R.Reshape(tensor=x,
                                                           shape=np.array([3, 2], np.int32))),
    "matmul_square": lambda x: R.MatMul(a=R.Reshape(tensor=R.Square(x=x),
                                                    shape=np.array([2, 3], np.int32)),
                                        b=R.Reshape(tensor=x, shape=np.array([3, 2], np.int32))),
    "relu_square": lambda x: R.Relu(features=R.Mul(x=x, y=x)),
    "xent": lambda x: R.SparseSoftmaxCrossEntropyWithLogits(
        features=R.Reshape(tensor=x, shape=np.array([2, 3], np.int32)),
        labels=np.array([1, 2], np.int32))[0],
    "bias_add": lambda x: R.Square(x=R.BiasAdd(value=R.Reshape(tensor=x,
                                                                shape=np.array([3, 2], np.int32)),
                                                 bias=R.Slice(input=x, begin=np.array([0], np.int32),
                                                              size=np.array([2], np.int32)))),
}


def _first_gradient(fn, a: np.ndarray, device: str) -> np.ndarray:
    with pg.device(device):
        x = pg.constant(a)
        with pg.GradientTape() as t:
            t.watch(x)
            y = fn(x)
        return t.gradient(y, x).numpy()


@pytest.mark.parametrize("name", sorted(SECOND))
def test_second_derivative_with_nested_tapes(name, device, rng):
    fn = SECOND[name]
    a = rng.uniform(0.3, 1.2, 6) * rng.choice([-1.0, 1.0], 6)
    v = rng.standard_normal(6)
    with _skip_without_kernels(), pg.device(device):
        x = pg.constant(a)
        with pg.GradientTape() as outer:
            outer.watch(x)
            with pg.GradientTape() as inner:
                inner.watch(x)
                y = fn(x)
            g = inner.gradient(y, x)
        hvp = outer.gradient(g, x, output_gradients=pg.constant(v)).numpy()
    h = 1e-5
    numeric = (_first_gradient(fn, a + h * v, device)
               - _first_gradient(fn, a - h * v, device)) / (2 * h)
    np.testing.assert_allclose(hvp, numeric, rtol=1e-5, atol=1e-6, err_msg=rng.seed_text)


def test_third_derivative_of_a_polynomial(device):
    with pg.device(device):
        x = pg.constant(np.float64(1.5))
        with pg.GradientTape() as t3:
            t3.watch(x)
            with pg.GradientTape() as t2:
                t2.watch(x)
                with pg.GradientTape() as t1:
                    t1.watch(x)
                    y = x * x * x * x          # x^4
                d1 = t1.gradient(y, x)         # 4x^3
            d2 = t2.gradient(d1, x)            # 12x^2
        d3 = t3.gradient(d2, x)                # 24x
    assert d1.numpy() == pytest.approx(4 * 1.5 ** 3)
    assert d2.numpy() == pytest.approx(12 * 1.5 ** 2)
    assert d3.numpy() == pytest.approx(24 * 1.5)


def test_persistent_tape_records_its_own_gradient_for_higher_order(rng):
    x = pg.constant(rng.uniform(0.5, 1.0, 3))
    with pg.GradientTape(persistent=True) as t:
        t.watch(x)
        y = pg.exp(x)
        g = t.gradient(y, x)              # recorded on t itself
    gg = t.gradient(g, x)
    np.testing.assert_allclose(gg.numpy(), np.exp(x.numpy()), rtol=1e-12)


# ------------------------------------------------------------ tape rules

def test_non_persistent_tape_computes_gradients_once():
    x = pg.constant(np.float64(2.0))
    with pg.GradientTape() as t:
        t.watch(x)
        y = x * x
    assert t.gradient(y, x).numpy() == 4.0
    with pytest.raises(RuntimeError, match="non-persistent"):
        t.gradient(y, x)


def test_persistent_tape_computes_gradients_many_times():
    x = pg.constant(np.float64(3.0))
    with pg.GradientTape(persistent=True) as t:
        t.watch(x)
        y = x * x
        z = y * x
    assert t.gradient(y, x).numpy() == 6.0
    assert t.gradient(z, x).numpy() == 27.0
    assert t.gradient([y, z], x).numpy() == 33.0


def test_re_entering_an_active_tape_is_an_error():
    t = pg.GradientTape()
    with t:
        with pytest.raises(ValueError, match="still recording"):
            t.__enter__()


def test_unwatched_tensor_and_unconnected_source():
    x = pg.constant(np.float64(2.0))
    z = pg.constant(np.ones(3))
    with pg.GradientTape(persistent=True) as t:
        y = x * x                          # x not watched: nothing recorded
        t.watch(z)
        w = z * 2.0
    assert t.gradient(y, x) is None
    assert t.gradient(w, x) is None
    zero = t.gradient(w, [x, z], unconnected_gradients="zero")
    assert zero[0].numpy() == 0.0 and zero[0].shape == ()
    np.testing.assert_array_equal(zero[1].numpy(), [2.0, 2.0, 2.0])
    assert t.gradient(w, x, unconnected_gradients=pg.UnconnectedGradients.ZERO).numpy() == 0.0


def test_output_gradients_weight_each_target(rng):
    a = rng.standard_normal((2, 3))
    v = rng.standard_normal((2, 3))
    x = pg.constant(a)
    with pg.GradientTape(persistent=True) as t:
        t.watch(x)
        y = pg.exp(x)
        z = x * 3.0
    g = t.gradient([y, z], x, output_gradients=[pg.constant(v), None])
    np.testing.assert_allclose(g.numpy(), v * np.exp(a) + 3.0, rtol=1e-12)
    with pytest.raises(pg.errors.InvalidArgumentError, match="shape"):
        t.gradient(y, x, output_gradients=pg.constant(np.ones(3)))


def test_nested_structures_of_sources_keep_their_shape():
    a, b = pg.constant(np.float64(1.0)), pg.constant(np.float64(2.0))
    with pg.GradientTape() as t:
        t.watch([a, b])
        y = a * b
    g = t.gradient(y, {"a": a, "rest": [b]})
    assert set(g) == {"a", "rest"} and g["a"].numpy() == 2.0 and g["rest"][0].numpy() == 1.0


def test_stop_gradient_and_stop_recording():
    x = pg.constant(np.array([1.0, 2.0]))
    with pg.GradientTape(persistent=True) as t:
        t.watch(x)
        y = pg.stop_gradient(x) * x
        with t.stop_recording():
            z = x * x
    np.testing.assert_array_equal(t.gradient(y, x).numpy(), [1.0, 2.0])
    assert t.gradient(z, x) is None


def test_non_differentiable_ops_stop_the_gradient():
    x = pg.constant(np.array([1.0, -2.0]))
    with _skip_without_kernels(), pg.GradientTape() as t:
        t.watch(x)
        y = R.Cast(x=R.Greater(x=x, y=np.float64(0)), DstT=pg.float64)
    assert t.gradient(y, x) is None


def test_gradient_through_an_op_without_gradient_names_the_op():
    op_name = "PgTestNoGradient"
    if op_name not in registry.OPS:
        registry.register_op(registry.make_op_def(op_name, ["x: T"], ["y: T"], ["T: type"],
                                                  shape_fn=lambda s, a, v: [s[0]],
                                                  source="tests"))
        registry.register_kernel(registry.KernelDef(op_name, "CPU", {}, frozenset({"x"}),
                                                    fn=lambda ins, attrs: [ins[0] * 2]))
    x = pg.constant(np.float64(1.0))
    with pg.GradientTape() as t:
        t.watch(x)
        y = getattr(R, op_name)(x=x)
    with pytest.raises(LookupError, match=op_name + r".*float64\[\]") as info:
        t.gradient(y, x)
    assert isinstance(info.value, pg.errors.NotFoundError) and info.value.op == op_name


def test_register_gradient_before_the_op_exists_and_override():
    op_name = "PgTestCube"

    @pg.RegisterGradient(op_name)  # the op is defined below, later
    def _cube_grad(op, grad):
        return grad * op.inputs[0] * op.inputs[0] * 3.0

    if op_name not in registry.OPS:
        registry.register_op(registry.make_op_def(op_name, ["x: T"], ["y: T"], ["T: type"],
                                                  shape_fn=lambda s, a, v: [s[0]],
                                                  source="tests"))
        registry.register_kernel(registry.KernelDef(op_name, "CPU", {}, frozenset({"x"}),
                                                    fn=lambda ins, attrs: [ins[0] ** 3]))
    x = pg.constant(np.array([1.0, 2.0]))
    with pg.GradientTape() as t:
        t.watch(x)
        y = getattr(R, op_name)(x=x)
    np.testing.assert_array_equal(t.gradient(y, x).numpy(), [3.0, 12.0])


def test_tapes_are_per_thread():
    x = pg.constant(np.float64(2.0))
    seen = []

    def other():
        seen.append(x * x)                 # not recorded by the main thread's tape

    with pg.GradientTape() as t:
        t.watch(x)
        th = threading.Thread(target=other)
        th.start()
        th.join()
        y = x * 3.0
    assert len(t._records) == 1
    assert t.gradient(seen[0], x) is None


def test_jacobian(rng):
    a = rng.standard_normal(3)
    w = rng.standard_normal((3, 2))
    x = pg.constant(a)
    with pg.GradientTape() as t:
        t.watch(x)
        y = pg.matmul(pg.reshape(pg.exp(x), [1, 3]), pg.constant(w))   # shape (1, 2)
    j = t.jacobian(y, x)
    assert j.shape == (1, 2, 3)
    np.testing.assert_allclose(j.numpy()[0], (w * np.exp(a)[:, None]).T, rtol=1e-12)


def test_batch_jacobian_matches_tensorflow(tf_oracle, rng):
    x = rng.standard_normal((4, 3)).astype(np.float32)
    w = rng.standard_normal((3, 2)).astype(np.float32)
    code = ("x = tf.constant(x)\nwith tf.GradientTape() as tape:\n    tape.watch(x)\n"
            "    y = tf.tanh(tf.matmul(x, w)) * x[:, :1]\n"
            "result = tape.batch_jacobian(y, x).numpy()")
    want = tf_oracle.run(code, x=x, w=w)
    ns = {"tf": pg, "x": x, "w": w}
    exec(code.replace(".numpy()", ""), ns)
    got = ns["result"]
    assert tuple(got.shape) == want.shape == (4, 2, 3)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="batch"):
        with pg.GradientTape() as tape:
            xt = pg.constant(x)
            tape.watch(xt)
            y = pg.reduce_sum(xt)
        tape.batch_jacobian(y, xt)


# ------------------------------------------------------------ variables

def test_variable_gradients_and_automatic_watching(device, rng):
    w0 = rng.standard_normal((3, 2))
    xv = rng.standard_normal((4, 3))
    with pg.device(device):
        w = pg.Variable(w0, name="w")
        frozen = pg.Variable(np.ones(2), trainable=False)
        x = pg.constant(xv)
        with pg.GradientTape() as t:
            y = pg.matmul(x, w) * frozen     # both read; only w is watched
        gw, gf = t.gradient(y, [w, frozen])
    assert t.watched_variables() == (w,)
    assert gf is None
    np.testing.assert_allclose(gw.numpy(), xv.T @ np.ones((4, 2)), rtol=1e-12,
                               atol=1e-12)
    assert gw.device.endswith(device)
    with pg.GradientTape(watch_accessed_variables=False) as t:
        y = pg.matmul(x, w)
    assert t.gradient(y, w) is None and t.watched_variables() == ()
    with pg.GradientTape() as t:
        t.watch(frozen)
        y = frozen * 2.0
    np.testing.assert_array_equal(t.gradient(y, frozen).numpy(), [2.0, 2.0])


@pytest.mark.parametrize("case", [c for c in CASES if c.op in (
    "Relu", "Tanh", "Sigmoid", "Sqrt", "Maximum", "Sum", "Mean", "Conv2D", "MatMul", "Softmax")],
    ids=lambda c: c.id)
def test_backward_ops_are_placed_on_the_forward_device(case, rng):
    """Every op of the backward pass is placed on the forward op's device: it
    runs there, or falls back to CPU only where that device has no kernel
    for it (soft placement, logged with the device it was meant for)."""
    device = "MY_DEVICE:0"
    with pg.device(device):
        xs = [pg.constant(a) for a in _inputs(case, rng)]
        with pg.GradientTape() as tape:
            tape.watch([xs[i] for i in case.wrt])
            y = case.fn(*xs)
    pg.config.placement_log(clear=True)
    pg.config.set_log_device_placement(True)
    try:
        with pg.device("CPU:0"):              # the caller's scope does not matter
            tape.gradient(y, [xs[i] for i in case.wrt])
    finally:
        pg.config.set_log_device_placement(False)
    records = [r for r in pg.config.placement_log(clear=True) if r[0] != "_Copy"]
    assert records
    for op, where, note in records:
        assert where.endswith(device) or f"no {device} kernel" in note, (op, where, note)


def test_gradients_run_on_the_device_of_the_forward_op(rng):
    a = rng.standard_normal((4, 3)).astype(np.float32)
    b = rng.standard_normal((3, 2)).astype(np.float32)
    with pg.device("MY_DEVICE:0"):
        x, y = pg.constant(a), pg.constant(b)
        with pg.GradientTape() as t:
            t.watch([x, y])
            z = pg.matmul(x, y)
    with pg.device("CPU:0"), pg.testing.expect_kernel("MatMul", "MY_DEVICE", min_calls=2):
        gx, gy = t.gradient(z, [x, y])      # the scope does not move the backward ops
    assert gx.device.endswith("MY_DEVICE:0") and gy.device.endswith("MY_DEVICE:0")
    np.testing.assert_allclose(gx.numpy(), np.ones((4, 2)) @ b.T, rtol=1e-5, atol=1e-5)


def test_variable_gradient_is_made_on_the_variable_device(rng):
    """A variable read on MY_DEVICE and used on CPU gets its gradient on
    MY_DEVICE, where the optimizer step runs."""
    w0 = rng.standard_normal(3)
    with pg.device("MY_DEVICE:0"):
        w = pg.Variable(w0)
    with pg.GradientTape() as t:
        with pg.device("CPU:0"):
            z = w.read_value() * 3.0                 # Mul on CPU copies the value in
            y = R.Sum(input=z, reduction_indices=[0])
    assert z.device.endswith("CPU:0")
    g = t.gradient(y, w)
    assert g.device.endswith("MY_DEVICE:0")
    np.testing.assert_array_equal(g.numpy(), np.full(3, 3.0))
    pg.optimizers.SGD(1.0).apply_gradients([(g, w)])
    np.testing.assert_allclose(w.numpy(), w0 - 3.0)


def test_on_gradient_reports_each_final_gradient_during_the_pass():
    rng = np.random.default_rng()
    w1 = pg.Variable(rng.standard_normal((5, 4)).astype(np.float32))
    w2 = pg.Variable(rng.standard_normal((4, 3)).astype(np.float32))
    b2 = pg.Variable(rng.standard_normal(3).astype(np.float32))
    unused = pg.Variable(np.ones(2, np.float32))
    x = rng.standard_normal((6, 5)).astype(np.float32)
    with pg.GradientTape(persistent=True) as tape:
        h = pg.tanh(pg.matmul(pg.constant(x), w1))
        loss = pg.reduce_sum(pg.matmul(h, w2) + b2) + pg.reduce_sum(w1 * w1)
    seen = []
    got = tape.gradient(loss, [w1, [w2, b2], unused, w2],
                        on_gradient=lambda i, g: seen.append((i, g)))
    plain = tape.gradient(loss, [w1, [w2, b2], unused, w2])
    flat = [got[0], got[1][0], got[1][1], got[2], got[3]]
    assert sorted(i for i, _ in seen) == [0, 1, 2, 3, 4]         # each source once
    for i, g in seen:
        assert g is flat[i]                                       # the returned tensor
    assert flat[3] is None and seen[0] == (3, None)                # unused: at the start
    order = [i for i, _ in seen]
    assert order.index(0) > max(order.index(1), order.index(2))    # w1 is final last
    h_np = np.tanh(x @ w1.numpy())
    np.testing.assert_allclose(flat[1].numpy(), h_np.T @ np.ones((6, 3), np.float32),
                               rtol=1e-5, atol=1e-5)
    for a, b in zip(flat, [plain[0], plain[1][0], plain[1][1], plain[2], plain[3]]):
        assert (a is None and b is None) or np.array_equal(a.numpy(), b.numpy())
