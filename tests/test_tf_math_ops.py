"""The TensorFlow math functions over the unary float ops (pg.math.sin,
...), against numpy on fresh random inputs, on every device, checking that
the device's own kernel ran; and rounding half to even as TensorFlow."""
from __future__ import annotations

import numpy as np
import pytest

import pluggable as pg

DEVICES = ["CPU:0", "MY_DEVICE:0", "GPU:0"]

# pg.math function, op, numpy reference, input range (the domain).
UNARY = [
    ("sin", "Sin", np.sin, (-3, 3)), ("cos", "Cos", np.cos, (-3, 3)),
    ("tan", "Tan", np.tan, (-1.4, 1.4)), ("asin", "Asin", np.arcsin, (-1, 1)),
    ("acos", "Acos", np.arccos, (-1, 1)), ("atan", "Atan", np.arctan, (-3, 3)),
    ("sinh", "Sinh", np.sinh, (-3, 3)), ("cosh", "Cosh", np.cosh, (-3, 3)),
    ("asinh", "Asinh", np.arcsinh, (-3, 3)), ("acosh", "Acosh", np.arccosh, (1, 4)),
    ("atanh", "Atanh", np.arctanh, (-0.99, 0.99)), ("expm1", "Expm1", np.expm1, (-3, 3)),
    ("log1p", "Log1p", np.log1p, (-0.99, 3)), ("ceil", "Ceil", np.ceil, (-3, 3)),
    ("reciprocal", "Reciprocal", np.reciprocal, (0.2, 3)),
]


def _device(name: str) -> str:
    kind = name.split(":")[0]
    if not any(d.device_type == kind for d in pg.config.list_logical_devices()):
        pytest.skip(f"no {name} device is present (the GPU plugin needs a CUDA GPU)")
    return name


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fn,op,ref,domain", UNARY, ids=[u[0] for u in UNARY])
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_unary_math_function(device, fn, op, ref, domain, dt, rng):
    _device(device)
    x = rng.uniform(*domain, (4, 5)).astype(dt)
    with pg.device(device), pg.testing.expect_kernel(op, device.split(":")[0]):
        got = getattr(pg.math, fn)(pg.constant(x)).numpy()
    assert got.dtype == dt
    np.testing.assert_allclose(got, ref(x.astype(np.float64)), rtol=1e-5 if dt == np.float32
                               else 1e-12, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_erfc(device, rng):
    import math
    _device(device)
    x = rng.uniform(-3, 3, (50,))
    with pg.device(device), pg.testing.expect_kernel("Erfc", device.split(":")[0]):
        got = pg.math.erfc(pg.constant(x)).numpy()
    np.testing.assert_allclose(got, [math.erfc(v) for v in x], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dt", [np.float16, np.float32, np.float64])
def test_round_is_half_to_even(device, dt, rng):
    _device(device)
    halves = np.arange(-9, 10) / 2.0                      # -4.5 .. 4.5
    x = np.concatenate([halves, rng.uniform(-50, 50, 30)]).astype(dt)
    with pg.device(device), pg.testing.expect_kernel("Round", device.split(":")[0]):
        got = pg.round(pg.constant(x)).numpy()
    np.testing.assert_array_equal(got, np.round(x.astype(np.float64)).astype(dt))
    assert list(got[:5]) == [-4.0, -4.0, -4.0, -3.0, -2.0]  # -4.5 -4 -3.5 -3 -2.5


def test_round_of_integers_returns_them(rng):
    x = rng.integers(-100, 100, (7,)).astype(np.int32)
    np.testing.assert_array_equal(pg.round(pg.constant(x)).numpy(), x)


def test_top_level_names_are_the_math_functions():
    for name in ("sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh",
                 "acosh", "atanh", "round"):
        assert getattr(pg, name) is getattr(pg.math, name)


# ------------------------------------------------ sort, N-d indexing, linalg

@pytest.mark.parametrize("device", ["CPU:0", "MY_DEVICE:0"])
@pytest.mark.parametrize("dt", [np.float32, np.int32, np.uint8, np.int64])
def test_sort_and_argsort_match_tensorflow(device, dt, tf_oracle, rng):
    x = rng.integers(0, 6, (3, 7, 4)).astype(dt)   # many ties: the order of equals shows
    if dt == np.float32:
        x = x + rng.choice([0, 0.5], x.shape).astype(dt)
    code = ("result = [tf.sort(x, axis=a, direction=d) for a in (-1, 1, 0) "
            "for d in ('ASCENDING', 'DESCENDING')] + [tf.argsort(x, axis=a, direction=d, "
            "stable=True) for a in (-1, 1, 0) for d in ('ASCENDING', 'DESCENDING')]")
    want = tf_oracle.run(code, x=x)
    with pg.device(device):
        got = [pg.sort(x, axis=a, direction=d) for a in (-1, 1, 0)
               for d in ("ASCENDING", "DESCENDING")]
        got += [pg.argsort(x, axis=a, direction=d) for a in (-1, 1, 0)
                for d in ("ASCENDING", "DESCENDING")]
    for g, w in zip(got, want):
        assert g.dtype.as_numpy_dtype == w.dtype
        np.testing.assert_array_equal(g.numpy(), w)


def test_sort_extremes_of_integers_do_not_overflow():
    x = np.array([np.iinfo(np.int32).min, 5, np.iinfo(np.int32).max, -1], np.int32)
    np.testing.assert_array_equal(pg.sort(x).numpy(), np.sort(x))
    np.testing.assert_array_equal(pg.sort(x, direction="DESCENDING").numpy(), np.sort(x)[::-1])


def test_sort_rejects_a_bad_direction():
    with pytest.raises(pg.errors.InvalidArgumentError, match="direction"):
        pg.sort([1.0, 2.0], direction="UP")


@pytest.mark.parametrize("device", ["CPU:0", "MY_DEVICE:0"])
def test_gather_and_scatter_nd(device, rng):
    p = rng.standard_normal((4, 3, 2)).astype(np.float32)
    idx = np.stack([rng.integers(0, 4, 6), rng.integers(0, 3, 6)], -1).astype(np.int32)
    with pg.device(device):
        np.testing.assert_array_equal(pg.gather_nd(p, idx).numpy(), p[idx[:, 0], idx[:, 1]])
        upd = rng.standard_normal((6, 2)).astype(np.float32)
        want = np.zeros((4, 3, 2), np.float32)
        np.add.at(want, (idx[:, 0], idx[:, 1]), upd)
        np.testing.assert_allclose(pg.scatter_nd(idx, upd, [4, 3, 2]).numpy(), want, 1e-6)
        rows = np.array([[3], [0]], np.int32)
        new = rng.standard_normal((2, 3, 2)).astype(np.float32)
        want = p.copy()
        want[[3, 0]] = new
        np.testing.assert_array_equal(pg.tensor_scatter_nd_update(p, rows, new).numpy(), want)
        want = p.copy()
        want[[3, 0]] += new
        np.testing.assert_allclose(pg.tensor_scatter_nd_add(p, rows, new).numpy(), want, 1e-6)


@pytest.mark.parametrize("device", ["CPU:0", "MY_DEVICE:0"])
def test_gather_nd_out_of_range_is_tensorflows_error(device, tf_oracle):
    p = np.zeros((4, 3), np.float32)
    idx = np.array([[1, 0], [4, 0]], np.int32)
    with pytest.raises(pg.errors.InvalidArgumentError,
                       match=r"indices\[1\] = \[4, 0\] does not index into param shape \[4,3\]"):
        with pg.device(device), pg.testing.expect_kernel("GatherNd", device.split(":")[0]):
            pg.gather_nd(p, idx).numpy()
    reply = tf_oracle.batch([("GatherNd", [p, idx], {})])[0]
    assert reply[:2] == ("error", "InvalidArgumentError")
    assert "indices[1] = [4, 0] does not index into param shape [4,3]" in reply[2]


@pytest.mark.parametrize("device", ["CPU:0", "MY_DEVICE:0"])
def test_linalg_against_numpy(device, rng):
    a = rng.standard_normal((2, 4, 4)) + 4 * np.eye(4)
    b = rng.standard_normal((2, 4, 3))
    spd = a @ a.transpose(0, 2, 1)
    with pg.device(device):
        np.testing.assert_allclose(pg.linalg.inv(a).numpy(), np.linalg.inv(a), 1e-10)
        np.testing.assert_allclose(pg.linalg.solve(a, b).numpy(), np.linalg.solve(a, b), 1e-10)
        np.testing.assert_allclose(pg.linalg.det(a).numpy(), np.linalg.det(a), 1e-10)
        np.testing.assert_allclose(pg.linalg.cholesky(spd).numpy(), np.linalg.cholesky(spd),
                                   1e-10)


def test_cholesky_of_a_matrix_that_is_not_positive_definite_matches_tensorflow(tf_oracle):
    a = np.array([[1.0, 2.0], [2.0, 1.0]])
    got = pg.linalg.cholesky(a).numpy()
    want = tf_oracle.batch([("Cholesky", [a], {})])[0]
    assert want[0] == "ok"                      # TensorFlow's CPU logs, fills NaN
    lower = np.tri(2, dtype=bool)
    assert np.isnan(got[lower]).all() and np.isnan(want[1][0][lower]).all()


def test_singular_inverse_is_an_invalid_argument_error():
    with pytest.raises(pg.errors.InvalidArgumentError, match="not invertible"):
        pg.linalg.inv(np.array([[1.0, 2.0], [2.0, 4.0]]))


@pytest.mark.parametrize("eq,shapes", [
    ("ij,jk", [(2, 3), (3, 4)]), ("ij,jk->ik", [(2, 3), (3, 4)]), ("ii", [(3, 3)]),
    ("ii->i", [(3, 3)]), ("...ij,...jk->...ik", [(2, 1, 2, 3), (5, 3, 4)]),
    ("b...i,bi->b...", [(2, 3, 4), (2, 4)]), ("i,i->", [(5,), (5,)]), ("ij->", [(2, 3)])])
def test_einsum_matches_numpy(eq, shapes, rng):
    xs = [rng.standard_normal(s) for s in shapes]
    np.testing.assert_allclose(pg.einsum(eq, *xs).numpy(), np.einsum(eq, *xs), 1e-10, 1e-12)


def test_linspace_matches_tensorflow(tf_oracle):
    got = pg.linspace(0.1, 1.7, 7).numpy()
    want = tf_oracle.run("result = tf.linspace(0.1, 1.7, 7)")
    np.testing.assert_array_equal(got, want.astype(np.float32))


# ------------------------------------------------ print, tape, placement, ...

PRINT_CASES = [
    ("[1.5, 2.0, 1 / 3]", "float32"), ("[[1, 2], [3, 4]]", "int32"), ("list(range(10))", "int64"),
    ("[1 / 3, 1e-300]", "float64"), ("[True, False]", "bool"), ("[1e-8, 1e10, -0.0]", "float32"),
    ("np.arange(24).reshape(2, 3, 4)", "int32"), ("np.arange(40.0).reshape(8, 5) / 7", "float32"),
]


def test_print_writes_what_tf_print_writes(tf_oracle, tmp_path):
    import io
    arrays = [np.asarray(eval(v), dt) for v, dt in PRINT_CASES]
    path = tmp_path / "tf_print.txt"   # TensorFlow's process answers on its stdout
    tf_oracle.run(
        "s = 'file://' + path\n"
        "for i in range(n):\n"
        "    tf.print(tf.constant(inputs[i]), output_stream=s)\n"
        "tf.print(tf.constant(inputs[7]), summarize=1, output_stream=s)\n"
        "tf.print('x', 3, [tf.constant(1), 2], {'a': tf.constant(2.5)}, sep='|', "
        "output_stream=s)\n"
        "result = np.zeros(())", inputs=arrays, n=len(arrays), path=str(path))
    want = path.read_text()
    buf = io.StringIO()
    for a in arrays:
        pg.print(pg.constant(a), output_stream=buf)
    pg.print(pg.constant(arrays[7]), summarize=1, output_stream=buf)
    pg.print("x", 3, [pg.constant(1), 2], {"a": pg.constant(2.5)}, sep="|", output_stream=buf)
    assert buf.getvalue() == str(want)


def test_tape_gives_none_for_integer_sources():
    with pg.GradientTape() as tape:
        a = pg.constant(3)
        tape.watch(a)
        y = a * a
    assert tape.gradient(y, a) is None
    x = pg.constant(2.0)
    with pg.GradientTape() as tape:
        tape.watch(x)
        i = pg.cast(x, pg.int32)            # gradients stop at integers, as in TensorFlow
        y = pg.cast(i * i, pg.float32) + x
    assert float(tape.gradient(y, x)) == 1.0


@pytest.mark.parametrize("device", ["CPU:0", "MY_DEVICE:0"])
def test_gradient_through_a_function_call(device, rng):
    w0 = rng.standard_normal((3, 2))
    x0 = rng.standard_normal((4, 3))

    @pg.function
    def loss(w, x):
        return pg.reduce_sum(pg.sin(pg.matmul(x, w)))

    with pg.device(device):
        w, x = pg.constant(w0), pg.constant(x0)
        with pg.GradientTape() as tape:
            tape.watch(w)
            y = loss(w, x)
        g = tape.gradient(y, w)
        v = pg.Variable(w0)
        with pg.GradientTape() as tape:
            y2 = loss(v, x)
        gv = tape.gradient(y2, v)
    want = x0.T @ np.cos(x0 @ w0)
    np.testing.assert_allclose(g.numpy(), want, 1e-12)
    np.testing.assert_allclose(gv.numpy(), want, 1e-12)
    np.testing.assert_allclose(loss(pg.constant(w0), pg.constant(x0)).numpy(),
                               np.sin(x0 @ w0).sum(), 1e-12)


@pytest.mark.skipif(bool(pg.list_physical_devices("GPU")),
                    reason="a GPU is present: GPU:0 is a real device here")
def test_gpu_scope_without_a_gpu_soft_places_on_the_cpu(rng):
    x = rng.standard_normal(5)
    with pg.device("GPU:0"):
        y = pg.sin(pg.constant(x))
    assert y.device.endswith("CPU:0")
    np.testing.assert_allclose(y.numpy(), np.sin(x))
    pg.config.set_soft_device_placement(False)
    try:
        with pytest.raises(pg.errors.InvalidArgumentError, match="no device of type GPU"):
            pg.device("GPU:0")
    finally:
        pg.config.set_soft_device_placement(True)


def test_constant_takes_a_name_and_generator_takes_tf_algorithm_names():
    assert float(pg.constant(2.0, name="two")) == 2.0
    a = pg.random.Generator.from_seed(7, alg="philox").normal((3,)).numpy()
    b = pg.random.Generator.from_seed(7, alg=1).normal((3,)).numpy()
    np.testing.assert_array_equal(a, b)
    with pytest.raises(pg.errors.InvalidArgumentError, match="unknown algorithm"):
        pg.random.Generator.from_seed(7, alg="mersenne")


@pytest.mark.parametrize("device", ["CPU:0", "MY_DEVICE:0"])
@pytest.mark.parametrize("fn", ["tensor_scatter_nd_sub", "tensor_scatter_nd_min",
                                "tensor_scatter_nd_max"])
def test_tensor_scatter_sub_min_max_match_tensorflow(device, fn, rng, tf_oracle):
    """Repeated index rows combine (subtract, min, max), as in TensorFlow;
    MY_DEVICE has no kernel for them and runs them on the CPU."""
    t = rng.integers(-20, 20, (5, 3)).astype(np.int32)
    idx = rng.integers(0, 5, (6, 1)).astype(np.int32)      # repeats likely
    upd = rng.integers(-20, 20, (6, 3)).astype(np.int32)
    want = tf_oracle.run(f"result = tf.{fn}(t, idx, upd).numpy()", t=t, idx=idx, upd=upd)
    op = {"sub": "TensorScatterSub", "min": "TensorScatterMin", "max": "TensorScatterMax"}
    with pg.device(device), pg.testing.expect_kernel(op[fn.rsplit("_", 1)[1]], "CPU"):
        got = getattr(pg, fn)(t, idx.tolist(), upd.tolist())
    assert got.dtype == pg.int32
    np.testing.assert_array_equal(got.numpy(), want)


SOFTPLUS = """
x = tf.constant(x)
with tf.GradientTape() as tape:
    tape.watch(x)
    y = tf.nn.softplus(x)
result = [y.numpy(), tape.gradient(y, x).numpy(), tf.math.softplus(x).numpy()]
"""


@pytest.mark.parametrize("device", ["CPU:0", "MY_DEVICE:0"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softplus_and_its_gradient_match_tensorflow(device, dtype, rng, tf_oracle):
    x = np.concatenate([rng.standard_normal(20) * 5, rng.standard_normal(4) * 60,
                        [0.0, 13.9, 14.0, 40.0, -40.0, -100.0]]).astype(dtype)
    want = tf_oracle.run(SOFTPLUS, x=x)
    scope = {"tf": pg, "x": x}
    kind = device.split(":")[0]
    with pg.device(device), pg.testing.expect_kernel("Log1p", kind, min_calls=2):
        exec(SOFTPLUS, scope)
    for got, ref in zip(scope["result"], want):
        assert got.dtype == ref.dtype
        # (atol: TensorFlow's CPU flushes subnormal results, exp(-100), to zero)
        np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-37, err_msg=rng.seed_text)
    with pytest.raises(pg.errors.InvalidArgumentError, match="floating-point"):
        pg.nn.softplus(pg.constant([1, 2]))


CLIP_BY_NORM = """
result = [tf.clip_by_norm(t, c).numpy(), tf.clip_by_norm(t, c, axes=[1]).numpy(),
          tf.clip_by_norm(t * 0.0, c).numpy(), tf.clip_by_norm(t, 1e6).numpy()]
"""


@pytest.mark.parametrize("device", ["CPU:0", "MY_DEVICE:0"])
def test_clip_by_norm_matches_tensorflow(device, rng, tf_oracle):
    t = rng.standard_normal((4, 5)).astype(np.float32)
    c = float(rng.uniform(0.5, 2.0))
    want = tf_oracle.run(CLIP_BY_NORM, t=t, c=c)
    scope = {"tf": pg, "t": t, "c": c}
    kind = device.split(":")[0]
    with pg.device(device), pg.testing.expect_kernel("Sqrt", kind, min_calls=4):
        exec(CLIP_BY_NORM, scope)
    for got, ref in zip(scope["result"], want):
        np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-7, err_msg=rng.seed_text)


@pytest.mark.parametrize("device", ["CPU:0", "MY_DEVICE:0", "GPU:0"])
@pytest.mark.parametrize("fn", ["elu", "selu"])
def test_elu_and_selu_and_their_gradients_match_tensorflow(device, fn, tf_oracle, rng):
    _device(device)
    x = rng.standard_normal((4, 6)).astype(np.float32) * 3
    code = (f"xt = tf.constant(x)\nwith tf.GradientTape() as t:\n    t.watch(xt)\n"
            f"    y = tf.nn.{fn}(xt)\nresult = [y, t.gradient(y, xt)]")
    want = tf_oracle.run(code, x=x)
    with pg.device(device), pg.testing.expect_kernel("Expm1", device.split(":")[0]):
        xt = pg.constant(x)
        with pg.GradientTape() as t:
            t.watch(xt)
            y = getattr(pg.nn, fn)(xt)
        got = [y, t.gradient(y, xt)]
    for g, w in zip(got, want):
        assert g.dtype.as_numpy_dtype == w.dtype
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-5, atol=1e-6)
