"""pg.nn.bias_gelu (ops BiasGelu, BiasGeluGrad), the fusion pass's
BiasAdd/AddV2 + Gelu rewrite, and the multi-tensor Adam/AdamW step (op
MultiTensorApplyAdam, pg.optimizers.Adam/AdamW(fused=...)), on fresh random
inputs: the CPU kernels against numpy composites, the composed form on
MY_DEVICE (which has neither kernel), and the CUDA kernels on GPU:0 against
numpy and against the composites on the same GPU (skipped without a GPU).
Every test checks which kernel ran."""
from __future__ import annotations

import collections
import math

import numpy as np
import pytest

import pluggable as pg
from graph_helpers import graph_ops, traced
from pluggable import errors
from pluggable.runtime import dispatch
from pluggable.testing import expect_kernel, kernel_calls

HAS_GPU = bool(pg.list_physical_devices("GPU"))
needs_gpu = pytest.mark.skipif(not HAS_GPU, reason="needs a GPU")
HAS_MY_DEVICE = bool(pg.list_physical_devices("MY_DEVICE"))
needs_my_device = pytest.mark.skipif(not HAS_MY_DEVICE,
                                     reason="the MY_DEVICE reference plugin is not loaded")
erf = np.vectorize(math.erf, otypes=[np.float64])
TOL = {"float16": 4e-3, "bfloat16": 3e-2, "float32": 2e-6, "float64": 1e-12}
GPU_TOL = {"float16": 4e-3, "bfloat16": 3e-2, "float32": 5e-6}
SHAPES = [(1,), (7,), (4097,), (3, 5, 7), (33, 129)]


def _np(dt: str):
    return pg.as_dtype(dt).as_numpy_dtype


def ref_gelu(z, approximate):
    z = np.asarray(z, np.float64)
    if approximate:
        return 0.5 * z * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z ** 3)))
    return 0.5 * z * (1 + erf(z / np.sqrt(2)))


def ref_gelu_grad(z, approximate):
    z = np.asarray(z, np.float64)
    if approximate:
        c = np.sqrt(2 / np.pi)
        t = np.tanh(c * (z + 0.044715 * z ** 3))
        return 0.5 * (1 + t) + 0.5 * z * (1 - t * t) * c * (1 + 3 * 0.044715 * z * z)
    return 0.5 * (1 + erf(z / np.sqrt(2))) + z * np.exp(-0.5 * z * z) / np.sqrt(2 * np.pi)


def _xb(rng, shape, dt):
    t = _np(dt)
    return (rng.uniform(-4, 4, shape).astype(t), rng.uniform(-1, 1, shape[-1:]).astype(t))


def _close(got, want, tol, what):
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    scale = max(1.0, float(np.abs(want).max()) if want.size else 1.0)
    assert np.allclose(got, want, atol=tol * scale, rtol=tol), \
        f"{what}: max error {np.abs(got - want).max()}"


def _bias_gelu_grads(x, b, dy, approximate):
    """(dx, dbias) of sum(dy * bias_gelu(x, b)) through a tape."""
    xt, bt, dyt = (pg.constant(a) for a in (x, b, dy))
    with pg.GradientTape() as tape:
        tape.watch([xt, bt])
        y = pg.nn.bias_gelu(xt, bt, approximate=approximate)
        loss = pg.reduce_sum(y * dyt)
    return tape.gradient(loss, [xt, bt])


# ------------------------------------------------------------ bias_gelu on CPU / MY_DEVICE

@pytest.mark.parametrize("device", ["CPU:0", "MY_DEVICE:0"])
@pytest.mark.parametrize("dt", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("approximate", [False, True], ids=["erf", "tanh"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_bias_gelu_matches_numpy(rng, device, dt, approximate, shape):
    if device.startswith("MY_DEVICE") and not HAS_MY_DEVICE:
        pytest.skip("the MY_DEVICE reference plugin is not loaded")
    x, b = _xb(rng, shape, dt)
    # CPU runs the fused kernel; MY_DEVICE (no BiasGelu kernel) composes
    # Gelu(BiasAdd) on itself
    op = "BiasGelu" if device.startswith("CPU") else "Gelu"
    with pg.device(device), expect_kernel(op, device.split(":")[0]):
        y = pg.nn.bias_gelu(x, b, approximate=approximate)
    assert y.device.endswith(device) and y.dtype == pg.as_dtype(dt) and y.shape == shape
    z = x.astype(np.float64) + b.astype(np.float64)
    _close(y.numpy(), ref_gelu(z, approximate), TOL[dt], f"bias_gelu {dt} {shape}")


@pytest.mark.parametrize("device", ["CPU:0", "MY_DEVICE:0"])
@pytest.mark.parametrize("dt", ["float32", "float64", "bfloat16"])
@pytest.mark.parametrize("approximate", [False, True], ids=["erf", "tanh"])
def test_bias_gelu_gradient_matches_numpy(rng, device, dt, approximate):
    if device.startswith("MY_DEVICE") and not HAS_MY_DEVICE:
        pytest.skip("the MY_DEVICE reference plugin is not loaded")
    x, b = _xb(rng, (4, 3, 9), dt)
    dy = rng.standard_normal(x.shape).astype(_np(dt))
    op = "BiasGeluGrad" if device.startswith("CPU") else "GeluGrad"
    with pg.device(device), expect_kernel(op, device.split(":")[0]):
        dx, db = _bias_gelu_grads(x, b, dy, approximate)
    want_dx = dy.astype(np.float64) * ref_gelu_grad(x.astype(np.float64) + b, approximate)
    _close(dx.numpy(), want_dx, TOL[dt] * 4, "dx")
    _close(db.numpy(), want_dx.sum(axis=(0, 1)), TOL[dt] * 40, "dbias")


def test_bias_gelu_gradient_matches_finite_differences(rng):
    x = rng.uniform(-3, 3, (3, 4))
    b = rng.uniform(-1, 1, 4)
    for approximate in (False, True):
        dx, db = _bias_gelu_grads(x, b, np.ones_like(x), approximate)
        h = 1e-6
        fd = (ref_gelu(x + b + h, approximate) - ref_gelu(x + b - h, approximate)) / (2 * h)
        np.testing.assert_allclose(dx.numpy(), fd, rtol=1e-7, atol=1e-8)
        np.testing.assert_allclose(db.numpy(), fd.sum(0), rtol=1e-7, atol=1e-8)


def test_bias_gelu_raw_op_matches_the_composite_on_cpu(rng):
    x, b = _xb(rng, (5, 6), "float32")
    for approximate in (False, True):
        fused = pg.raw_ops.BiasGelu(x=x, bias=b, approximate=approximate).numpy()
        composite = pg.nn.gelu(pg.nn.bias_add(x, b), approximate=approximate).numpy()
        np.testing.assert_allclose(fused, composite, rtol=2e-6, atol=2e-7)


@pytest.mark.parametrize("x_shape,b_shape", [((3, 4), (3,)), ((3, 4), (4, 1)), ((), (1,)),
                                             ((3, 4), ())])
def test_bias_gelu_refuses_a_bias_that_is_not_a_vector_of_the_last_axis(x_shape, b_shape):
    with pytest.raises(errors.InvalidArgumentError, match="bias"):
        pg.nn.bias_gelu(np.zeros(x_shape, np.float32), np.zeros(b_shape, np.float32))
    with pytest.raises(errors.InvalidArgumentError, match="bias"):
        pg.raw_ops.BiasGelu(x=np.zeros(x_shape, np.float32), bias=np.zeros(b_shape, np.float32))


def test_bias_gelu_refuses_other_dtypes():
    with pytest.raises(errors.InvalidArgumentError, match="float16, bfloat16, float32"):
        pg.nn.bias_gelu(np.zeros((2, 3), np.int32), np.zeros(3, np.int32))
    with pytest.raises(errors.InvalidArgumentError, match="bias has dtype float64"):
        pg.nn.bias_gelu(pg.constant(np.zeros((2, 3), np.float32)),
                        pg.constant(np.zeros(3, np.float64)))


# ------------------------------------------------------------ fusion

_traced, _ops = traced, graph_ops


FORMS = {
    "bias_add": lambda x, b, a: pg.nn.gelu(pg.nn.bias_add(x, b), approximate=a),
    "add": lambda x, b, a: pg.nn.gelu(x + b, approximate=a),
    "add_bias_first": lambda x, b, a: pg.nn.gelu(b + x, approximate=a),
}


@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("approximate", [False, True], ids=["erf", "tanh"])
@pytest.mark.parametrize("dt", ["float32", "float16"])
def test_bias_add_and_gelu_are_fused_on_cpu(rng, form, approximate, dt):
    x, b = _xb(rng, (2, 5, 6), dt)
    g, out, eager = _traced(lambda x, b: FORMS[form](x, b, approximate), x, b)
    fused = [n for n in g.nodes if n.op == "BiasGelu"]
    assert len(fused) == 1 and "Gelu" not in _ops(g) and g.pass_counts["fused"] == 1
    assert fused[0].attrs["approximate"] is approximate
    assert fused[0].assigned.device_type == "CPU"
    assert [r[0].op for r in fused[0].inputs] == ["Placeholder", "Placeholder"]
    z = x.astype(np.float64) + b.astype(np.float64)
    _close(out.numpy(), ref_gelu(z, approximate), TOL[dt], "fused")
    _close(out.numpy(), eager.numpy(), TOL[dt], "fused vs eager")


def test_the_fused_graph_runs_the_fused_kernel(rng):
    x, b = _xb(rng, (4, 8), "float32")
    f = pg.function(lambda x, b: pg.nn.gelu(pg.nn.bias_add(x, b)))
    with pg.device("CPU:0"):
        args = [pg.constant(a) for a in (x, b)]
        f(*args)
        before = kernel_calls("Gelu", "CPU")
        with expect_kernel("BiasGelu", "CPU"):
            out = f(*args)
    assert kernel_calls("Gelu", "CPU") == before
    _close(out.numpy(), ref_gelu(x.astype(np.float64) + b, False), TOL["float32"], "out")


NOT_FUSED = {
    # a matrix added to x is not a bias along the last axis
    "matrix": (lambda x, b, m: pg.nn.gelu(x + m), True),
    # a bias vector of the first axis, broadcast by a reshape to [n, 1]
    "column": (lambda x, b, m: pg.nn.gelu(x + pg.reshape(m[:, 0], [-1, 1])), True),
    # the sum is read outside the match: it must stay
    "read_twice": (lambda x, b, m: pg.nn.gelu(x + b) + (x + b), False),
    # another activation
    "relu": (lambda x, b, m: pg.nn.relu(pg.nn.bias_add(x, b)), False),
}


@pytest.mark.parametrize("case", sorted(NOT_FUSED))
def test_what_is_not_fused(rng, case):
    x, b = _xb(rng, (6, 6), "float32")
    m = rng.standard_normal((6, 6)).astype(np.float32)
    fn, _ = NOT_FUSED[case]
    g, out, eager = _traced(fn, x, b, m)
    assert "BiasGelu" not in _ops(g)
    np.testing.assert_allclose(out.numpy(), eager.numpy(), rtol=1e-6, atol=1e-6)


def test_an_nchw_bias_add_is_not_fused(rng):
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    g, out, eager = _traced(lambda x, b: pg.nn.gelu(pg.nn.bias_add(x, b, data_format="NCHW")),
                            x, b)
    assert "BiasGelu" not in _ops(g) and "BiasAdd" in _ops(g)
    np.testing.assert_allclose(out.numpy(), ref_gelu(x + b[:, None, None], False), rtol=2e-6,
                               atol=1e-6)


@needs_my_device
def test_bias_gelu_is_not_fused_where_the_device_has_no_kernel(rng):
    x, b = _xb(rng, (4, 6), "float32")
    g, out, eager = _traced(lambda x, b: FORMS["bias_add"](x, b, False), x, b,
                            device="MY_DEVICE:0")
    assert "BiasGelu" not in _ops(g) and "Gelu" in _ops(g)
    _close(out.numpy(), ref_gelu(x.astype(np.float64) + b, False), TOL["float32"], "out")


def test_the_switch_turns_bias_gelu_fusion_off(rng):
    x, b = _xb(rng, (4, 6), "float32")
    fn = lambda x, b: FORMS["add"](x, b, True)  # noqa: E731
    pg.config.set_graph_fusion_enabled(False)
    try:
        g, off, _ = _traced(fn, x, b)
    finally:
        pg.config.set_graph_fusion_enabled(True)
    assert "BiasGelu" not in _ops(g) and "Gelu" in _ops(g)
    g, on, _ = _traced(fn, x, b)
    assert "BiasGelu" in _ops(g)
    np.testing.assert_allclose(on.numpy(), off.numpy(), rtol=2e-6, atol=1e-6)


def test_a_traced_training_step_with_bias_gelu_matches_eager(rng):
    x, b0 = _xb(rng, (8, 5), "float32")
    w0 = rng.standard_normal((5, 5)).astype(np.float32)

    def run(traced):
        w, b = pg.Variable(w0), pg.Variable(b0)
        opt = pg.optimizers.SGD(0.1)

        def step(x):
            with pg.GradientTape() as tape:
                loss = pg.reduce_mean(pg.nn.bias_gelu(pg.matmul(x, w), b) ** 2)
            opt.apply_gradients(zip(tape.gradient(loss, [w, b]), [w, b]))
            return loss
        f = pg.function(step) if traced else step
        losses = [float(f(pg.constant(x)).numpy()) for _ in range(3)]
        return losses, w.numpy(), b.numpy()
    with pg.device("CPU:0"), expect_kernel("BiasGeluGrad", "CPU", min_calls=3):
        traced = run(True)
        eager = run(False)
    np.testing.assert_allclose(traced[0], eager[0], rtol=1e-5)
    np.testing.assert_allclose(traced[1], eager[1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(traced[2], eager[2], rtol=1e-5, atol=1e-6)
    assert traced[0][-1] < traced[0][0]


# ------------------------------------------------------------ MultiTensorApplyAdam

def numpy_adam(ws, grads, lr, b1=0.9, b2=0.999, eps=1e-7, wd=0.0, decays=None):
    """Keras's Adam (AdamW: var -= lr * wd * var first) in float64 over
    steps of per-variable gradients."""
    ws = [w.astype(np.float64) for w in ws]
    ms = [np.zeros_like(w) for w in ws]
    vs = [np.zeros_like(w) for w in ws]
    decays = decays or [True] * len(ws)
    for t, step in enumerate(grads, 1):
        for i, g in enumerate(step):
            if wd and decays[i]:
                ws[i] = ws[i] - lr * wd * ws[i]
            ms[i] = ms[i] + (g - ms[i]) * (1 - b1)
            vs[i] = vs[i] + (g * g - vs[i]) * (1 - b2)
            ws[i] = ws[i] - lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t) * ms[i] / \
                (np.sqrt(vs[i]) + eps)
    return ws


MIXED = [(1,), (7,), (4097,), (3, 5), (2, 3, 4), (129,), (0,)]


def _mixed_shapes(n: int) -> list:
    return [MIXED[i % len(MIXED)] for i in range(n)]


def _train(device, shapes, inits, grads, fused, cls="Adam", traced=False, **kw):
    """The variables after the steps of `grads` with an optimizer of class
    `cls` (`fused` as its argument)."""
    opt = getattr(pg.optimizers, cls)(learning_rate=0.01, fused=fused, **kw)
    with pg.device(device):
        vs = [pg.Variable(w, name=f"v{i}x") for i, w in enumerate(inits)]
        if kw.get("weight_decay"):
            opt.exclude_from_weight_decay(var_names=["v3x"])  # variable 3 does not decay

        def step(*gs):
            opt.apply_gradients(zip(gs, vs))
        f = pg.function(step) if traced else step
        for s in grads:
            f(*[pg.constant(g) for g in s])
    assert int(opt.iterations.numpy()) == len(grads)
    return [v.numpy() for v in vs], opt


def _data(rng, shapes, steps=10):
    inits = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    grads = [[rng.standard_normal(s).astype(np.float32) for s in shapes] for _ in range(steps)]
    return inits, grads


@pytest.mark.parametrize("cls,kw", [("Adam", {}), ("AdamW", {"weight_decay": 0.1}),
                                    ("Adam", {"weight_decay": 0.05, "beta_1": 0.8,
                                              "epsilon": 1e-4})],
                         ids=["adam", "adamw", "adam-decay"])
def test_fused_adam_equals_the_per_variable_ops_on_cpu(rng, cls, kw):
    shapes = _mixed_shapes(50)
    inits, grads = _data(rng, shapes)
    with expect_kernel("MultiTensorApplyAdam", "CPU", min_calls=10):
        fused, opt = _train("CPU:0", shapes, inits, grads, None, cls, **kw)
    with expect_kernel("ResourceApplyAdam", "CPU", min_calls=10 * 50):
        plain, _ = _train("CPU:0", shapes, inits, grads, False, cls, **kw)
    for a, b in zip(fused, plain):
        np.testing.assert_array_equal(a, b)
    wd = kw.get("weight_decay", 0.0)
    want = numpy_adam(inits, grads, 0.01, b1=kw.get("beta_1", 0.9),
                      eps=kw.get("epsilon", 1e-7), wd=wd,
                      decays=[i != 3 for i in range(len(shapes))])
    for a, w in zip(fused, want):
        np.testing.assert_allclose(a, w, rtol=2e-5, atol=2e-6)


def test_fused_adam_in_a_traced_step_equals_eager_per_variable_steps(rng):
    shapes = _mixed_shapes(12)
    inits, grads = _data(rng, shapes, steps=5)
    with expect_kernel("MultiTensorApplyAdam", "CPU", min_calls=5):
        traced, opt = _train("CPU:0", shapes, inits, grads, True, "AdamW", traced=True,
                             weight_decay=0.02)
    plain, _ = _train("CPU:0", shapes, inits, grads, False, "AdamW", weight_decay=0.02)
    for a, b in zip(traced, plain):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


@needs_gpu
def test_gpu_eager_fused_adam_steps_take_the_fast_path(rng, monkeypatch):
    # (CPU kernels always take the general path; a plugin kernel is prepared)
    shapes = _mixed_shapes(90)
    inits, grads = _data(rng, shapes, steps=4)
    opt = pg.optimizers.Adam(0.01)
    with pg.device("GPU:0"):
        vs = [pg.Variable(w) for w in inits]
        gs = [[pg.constant(g) for g in s] for s in grads]
        opt.apply_gradients(zip(gs[0], vs))
        general: collections.Counter = collections.Counter()
        run = dispatch._execute

        def counting(op, inputs, given):
            general[op.name] += 1
            return run(op, inputs, given)
        monkeypatch.setattr(dispatch, "_execute", counting)
        with expect_kernel("MultiTensorApplyAdam", "GPU", min_calls=3):
            for s in gs[1:]:
                opt.apply_gradients(zip(s, vs))
        monkeypatch.setattr(dispatch, "_execute", run)
    assert not general, dict(general)
    for v, w in zip(vs, numpy_adam(inits, grads, 0.01)):
        np.testing.assert_allclose(v.numpy(), w, rtol=2e-5, atol=2e-6)


@needs_my_device
def test_my_device_falls_back_to_the_per_variable_ops(rng):
    shapes = _mixed_shapes(5)
    inits, grads = _data(rng, shapes, steps=3)
    with expect_kernel("ResourceApplyAdam", "MY_DEVICE", min_calls=3 * 5):
        got, _ = _train("MY_DEVICE:0", shapes, inits, grads, None)
    for a, w in zip(got, numpy_adam(inits, grads, 0.01)):
        np.testing.assert_allclose(a, w, rtol=2e-5, atol=2e-6)
    with pytest.raises(errors.UnimplementedError, match="MY_DEVICE:0 has no MultiTensorApplyAdam"):
        _train("MY_DEVICE:0", shapes, inits, grads, True)


@needs_my_device
def test_a_step_over_two_devices_falls_back_when_one_has_no_kernel(rng):
    opt = pg.optimizers.Adam(0.01)
    with pg.device("CPU:0"):
        a = pg.Variable(rng.standard_normal(3).astype(np.float32))
        ga = pg.constant(rng.standard_normal(3).astype(np.float32))
    with pg.device("MY_DEVICE:0"):
        b = pg.Variable(rng.standard_normal(4).astype(np.float32))
        gb = pg.constant(rng.standard_normal(4).astype(np.float32))
    before = kernel_calls("MultiTensorApplyAdam", "CPU")
    with expect_kernel("ResourceApplyAdam", "CPU"), expect_kernel("ResourceApplyAdam",
                                                                  "MY_DEVICE"):
        opt.apply_gradients([(ga, a), (gb, b)])
    assert kernel_calls("MultiTensorApplyAdam", "CPU") == before


def test_fused_must_be_a_bool_or_none():
    with pytest.raises(TypeError, match="fused must be None, True or False"):
        pg.optimizers.Adam(fused="yes")


def test_the_op_refuses_mismatched_shapes_before_changing_anything(rng):
    with pg.device("CPU:0"):
        vs = [pg.Variable(np.ones(s, np.float32)) for s in ((2, 3), (4,))]
        ms = [pg.Variable(np.zeros(s, np.float32)) for s in ((2, 3), (4,))]
        ss = [pg.Variable(np.zeros(s, np.float32)) for s in ((2, 3), (4,))]
    scalars = dict(beta1_power=0.9, beta2_power=0.999, lr=0.1, beta1=0.9, beta2=0.999,
                   epsilon=1e-7, decay=0.0)
    scalars = {k: np.float32(x) for k, x in scalars.items()}
    with pytest.raises(errors.InvalidArgumentError, match="grad 1 must have variable 1's shape"):
        pg.raw_ops.MultiTensorApplyAdam(
            var=[v.handle for v in vs], m=[m.handle for m in ms], v=[s.handle for s in ss],
            grad=[np.ones((2, 3), np.float32), np.ones(5, np.float32)], **scalars)
    for x in vs:
        np.testing.assert_array_equal(x.numpy(), 1)
    for x in ms + ss:
        np.testing.assert_array_equal(x.numpy(), 0)


def test_the_op_takes_16_bit_gradients_of_float32_variables(rng):
    shapes = [(5,), (2, 3)]
    inits, grads = _data(rng, shapes, steps=1)
    g16 = [g.astype(_np("bfloat16")) for g in grads[0]]
    scalars = {k: np.float32(x) for k, x in dict(
        beta1_power=0.9, beta2_power=0.999, lr=0.1, beta1=0.9, beta2=0.999, epsilon=1e-7,
        decay=0.0).items()}
    with pg.device("CPU:0"):
        vs, ms, ss = ([pg.Variable(np.array(w) if k == 0 else np.zeros_like(w)) for w in inits]
                      for k in range(3))
        with expect_kernel("MultiTensorApplyAdam", "CPU"):
            pg.raw_ops.MultiTensorApplyAdam(var=[v.handle for v in vs], m=[m.handle for m in ms],
                                            v=[s.handle for s in ss], grad=g16, **scalars)
    want = numpy_adam(inits, [[g.astype(np.float64) for g in g16]], 0.1)
    for v, w in zip(vs, want):
        np.testing.assert_allclose(v.numpy(), w, rtol=2e-6, atol=2e-6)


# ------------------------------------------------------------ GPU

@needs_gpu
@pytest.mark.parametrize("dt", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("approximate", [False, True], ids=["erf", "tanh"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_gpu_bias_gelu_matches_numpy_and_the_composite(rng, dt, approximate, shape):
    x, b = _xb(rng, shape, dt)
    dy = rng.standard_normal(shape).astype(_np(dt))
    with pg.device("GPU:0"):
        with expect_kernel("BiasGelu", "GPU"), expect_kernel("BiasGeluGrad", "GPU"):
            y = pg.nn.bias_gelu(x, b, approximate=approximate)
            dx, db = pg.raw_ops.BiasGeluGrad(dy=dy, x=x, bias=b, approximate=approximate)
        with expect_kernel("Gelu", "GPU"), expect_kernel("GeluGrad", "GPU"):
            z = pg.nn.bias_add(x, b) if len(shape) > 1 else pg.constant(x) + b
            yc = pg.nn.gelu(z, approximate=approximate)
            dxc = pg.raw_ops.GeluGrad(gradients=dy, features=z, approximate=approximate)
            dbc = pg.reduce_sum(dxc, axis=list(range(len(shape) - 1))) if len(shape) > 1 \
                else dxc
    assert y.device.endswith("GPU:0") and dx.device.endswith("GPU:0")
    z64 = x.astype(np.float64) + b.astype(np.float64)
    want_dx = dy.astype(np.float64) * ref_gelu_grad(z64, approximate)
    tol = GPU_TOL[dt]
    _close(y.numpy(), ref_gelu(z64, approximate), tol, "y vs numpy")
    _close(dx.numpy(), want_dx, tol * 4, "dx vs numpy")
    rows_tol = tol * 8 * np.sqrt(x.size // shape[-1] + 1)  # dbias sums the rows of dx
    _close(db.numpy(), want_dx.reshape(-1, shape[-1]).sum(0), rows_tol, "db vs numpy")
    # against the composite on the same GPU: the 16-bit composite rounds x + b
    # to the element type first, the fused kernel keeps it in float
    _close(y.numpy(), yc.numpy(), tol * 2, "y vs composite")
    _close(dx.numpy(), dxc.numpy(), tol * 8, "dx vs composite")
    _close(db.numpy(), dbc.numpy(), rows_tol, "db vs composite")


@needs_gpu
@pytest.mark.parametrize("form", sorted(FORMS))
def test_gpu_bias_add_and_gelu_are_fused(rng, form):
    x, b = _xb(rng, (4, 7, 33), "float32")
    g, out, eager = _traced(lambda x, b: FORMS[form](x, b, False), x, b, device="GPU:0")
    fused = [n for n in g.nodes if n.op == "BiasGelu"]
    assert len(fused) == 1 and fused[0].assigned.device_type == "GPU"
    _close(out.numpy(), eager.numpy(), GPU_TOL["float32"], "fused vs eager")
    _close(out.numpy(), ref_gelu(x.astype(np.float64) + b, False), GPU_TOL["float32"], "numpy")


@needs_gpu
@pytest.mark.parametrize("n_vars", [1, 50, 130], ids=lambda n: f"{n}vars")
@pytest.mark.parametrize("cls,kw", [("Adam", {}), ("AdamW", {"weight_decay": 0.1})],
                         ids=["adam", "adamw"])
def test_gpu_fused_adam_equals_the_per_variable_ops_exactly(rng, n_vars, cls, kw):
    # 130 variables: more than one kernel-parameter table (80), the table
    # goes to the device
    shapes = _mixed_shapes(n_vars)
    inits, grads = _data(rng, shapes)
    with expect_kernel("MultiTensorApplyAdam", "GPU", min_calls=10):
        before = kernel_calls("ResourceApplyAdam", "GPU")
        fused, _ = _train("GPU:0", shapes, inits, grads, None, cls, **kw)
        assert kernel_calls("ResourceApplyAdam", "GPU") == before
    with expect_kernel("ResourceApplyAdam", "GPU", min_calls=10 * n_vars):
        plain, _ = _train("GPU:0", shapes, inits, grads, False, cls, **kw)
    for i, (a, b) in enumerate(zip(fused, plain)):
        np.testing.assert_array_equal(a, b, err_msg=f"variable {i} of shape {shapes[i]}")
    want = numpy_adam(inits, grads, 0.01, wd=kw.get("weight_decay", 0.0),
                      decays=[i != 3 for i in range(n_vars)])
    for a, w in zip(fused, want):
        np.testing.assert_allclose(a, w, rtol=2e-5, atol=2e-6)


@needs_gpu
@pytest.mark.parametrize("gdt", ["bfloat16", "float16"])
@pytest.mark.parametrize("n_vars", [7, 100])
def test_gpu_fused_adam_takes_16_bit_gradients(rng, gdt, n_vars):
    shapes = _mixed_shapes(n_vars)
    inits, grads = _data(rng, shapes, steps=3)
    g16 = [[g.astype(_np(gdt)) for g in s] for s in grads]
    with pg.device("GPU:0"):
        sets = [[pg.Variable(np.array(w) if k == 0 else np.zeros_like(w)) for w in inits]
                for k in range(3)]
        ref = [pg.Variable(np.array(w)) for w in inits]
        opt = pg.optimizers.Adam(0.01, fused=False)
        for t, s in enumerate(g16, 1):
            scalars = {k: pg.constant(np.float32(x)) for k, x in dict(
                beta1_power=0.9 ** t, beta2_power=0.999 ** t, lr=0.01, beta1=0.9, beta2=0.999,
                epsilon=1e-7, decay=0.0).items()}
            with expect_kernel("MultiTensorApplyAdam", "GPU"):
                pg.raw_ops.MultiTensorApplyAdam(
                    var=[v.handle for v in sets[0]], m=[v.handle for v in sets[1]],
                    v=[v.handle for v in sets[2]], grad=[pg.constant(g) for g in s], **scalars)
            # the per-variable ops on the same gradients cast to float32 (exact)
            opt.apply_gradients(zip([pg.cast(pg.constant(g), pg.float32) for g in s], ref))
    for i, (a, b) in enumerate(zip(sets[0], ref)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-7,
                                   err_msg=f"variable {i} of shape {shapes[i]}")


@needs_gpu
def test_gpu_fused_adam_in_a_traced_step_equals_the_eager_step(rng):
    shapes = _mixed_shapes(100)
    inits, grads = _data(rng, shapes, steps=4)
    with expect_kernel("MultiTensorApplyAdam", "GPU", min_calls=4):
        traced, _ = _train("GPU:0", shapes, inits, grads, True, traced=True)
    eager, _ = _train("GPU:0", shapes, inits, grads, False)
    for a, b in zip(traced, eager):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


@needs_gpu
def test_gpu_fused_adam_refuses_a_bad_shape_before_changing_anything():
    with pg.device("GPU:0"):
        vs, ms, ss = ([pg.Variable(np.full(s, float(k == 0), np.float32)) for s in ((3,), (4,))]
                      for k in range(3))
        scalars = {k: pg.constant(np.float32(0.5)) for k in (
            "beta1_power", "beta2_power", "lr", "beta1", "beta2", "epsilon", "decay")}
        with pytest.raises(errors.InvalidArgumentError, match="shape"):
            pg.raw_ops.MultiTensorApplyAdam(
                var=[v.handle for v in vs], m=[v.handle for v in ms], v=[v.handle for v in ss],
                grad=[pg.constant(np.ones(3, np.float32)), pg.constant(np.ones(5, np.float32))],
                **scalars)
            pg.synchronize()
    for v in vs:
        np.testing.assert_array_equal(v.numpy(), 1)
