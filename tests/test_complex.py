"""complex64 and complex128 against TensorFlow: dtypes, conversion, printing,
the ops that take complex numbers on CPU and MY_DEVICE (values and dtypes),
gradients of real losses, typed errors, variables, device copies, graphs,
checkpoints and DLPack.

TensorFlow runs in its own process (tests/tf_oracle.py); inputs are fresh
random complex numbers from the ``rng`` fixture."""
from __future__ import annotations

import numpy as np
import pytest

import pluggable as pg
from pluggable import errors

DEVICES = ["CPU:0", "MY_DEVICE:0"]
COMPLEX = [np.complex64, np.complex128]
# Ops with a MY_DEVICE kernel for complex numbers (the others run on the CPU
# under a MY_DEVICE scope: soft placement; docs/user-guide.md lists them).
ON_MY_DEVICE = {"AddV2", "Sub", "Mul", "Neg", "Conj", "Real", "Imag", "Complex", "Identity",
                "Reshape", "Transpose", "ConcatV2", "Pack", "Unpack", "GatherV2", "Slice",
                "StridedSlice", "ExpandDims", "Squeeze", "Tile", "Fill", "ZerosLike",
                "OnesLike", "Select", "SelectV2"}


def cplx(rng, shape, dt, low=-2.0, high=2.0):
    re = rng.uniform(low, high, shape)
    im = rng.uniform(low, high, shape)
    return (re + 1j * im).astype(dt)


def parts_of(dt) -> type:
    return np.float32 if dt == np.complex64 else np.float64


def tolerance(dt) -> dict:
    # complex64: rtol 1e-6, and an absolute floor of 1e-6 of the largest
    # magnitude (a part near zero of a larger number carries that error)
    return dict(rtol=1e-6, atol=1e-6) if dt == np.complex64 else dict(rtol=1e-12, atol=1e-12)


def assert_close(got: np.ndarray, want: np.ndarray, dt, what: str):
    assert got.dtype == want.dtype, (what, got.dtype, want.dtype)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    if got.dtype.kind in "fc" and want.size:
        tol = tolerance(dt)
        scale = max(1.0, float(np.max(np.abs(want))))
        np.testing.assert_allclose(got, want, rtol=tol["rtol"], atol=tol["atol"] * scale,
                                   err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


# ------------------------------------------------------------------ dtypes

def test_dtype_properties_match_tensorflow(tf_oracle):
    names = ["complex64", "complex128", "float32", "float64", "int32", "bool", "float16"]
    want = tf_oracle.run(
        "result = [[d.is_complex, d.is_floating, d.is_integer, d.real_dtype.name, d.size, "
        "d.as_numpy_dtype.__name__, d.as_datatype_enum, repr(d), str(d)] "
        "for d in (tf.as_dtype(n) for n in names)]", names=names)
    for name, w in zip(names, want):
        d = pg.as_dtype(name)
        got = [d.is_complex, d.is_floating, d.is_integer, d.real_dtype.name, d.size,
               d.as_numpy_dtype.type.__name__, d.enum, repr(d), str(d)]
        assert got == list(w), name
    assert pg.complex64 is pg.dtypes.complex64 is pg.as_dtype(np.complex64) is pg.as_dtype(8)
    assert pg.complex128 is pg.as_dtype(np.dtype("complex128")) is pg.as_dtype(18)
    assert pg.complex64.real_dtype is pg.float32 and pg.complex128.real_dtype is pg.float64


def test_python_and_numpy_complex_values_convert_as_tensorflow(tf_oracle, rng):
    a64 = cplx(rng, (3,), np.complex64)
    values = {"py_list": [complex(v) for v in a64.astype(np.complex128)],
              "py_scalar": complex(a64[0]), "np64": a64, "np128": a64.astype(np.complex128)}
    want = tf_oracle.run("result = [tf.constant(v) for v in vals] + "
                         "[tf.constant([1, 2], tf.complex64), tf.constant(2.5, tf.complex128)]",
                         vals=list(values.values()))
    got = [pg.constant(v) for v in values.values()]
    got += [pg.constant([1, 2], pg.complex64), pg.constant(2.5, pg.complex128)]
    for g, w in zip(got, want):
        assert g.numpy().dtype == w.dtype and np.array_equal(g.numpy(), w)


def test_complex_to_a_real_dtype_is_a_type_error_as_in_tensorflow(tf_oracle):
    want = tf_oracle.run(
        "try:\n    tf.constant(1 + 2j, tf.float32)\n    result = None\n"
        "except Exception as e:\n    result = type(e).__name__")
    assert want == "TypeError"
    with pytest.raises(TypeError, match="complex values"):
        pg.constant(1 + 2j, pg.float32)
    with pytest.raises(TypeError, match="complex values"):
        pg.constant(np.array([1 + 2j]), pg.int32)


# ------------------------------------------------------------------ printing

PRINT_CODE = """
result = []
for v in vals:
    t = tf.constant(v)
    result += [str(t), repr(t)]
    var = tf.Variable(v)
    result += [repr(var)]
"""


@pytest.mark.parametrize("device", DEVICES)
def test_tensors_and_variables_print_as_tensorflow(device, tf_oracle, rng):
    vals = [np.array([5 + 4j, 6 + 1j]), np.array(5 + 4j),
            np.array([[1.5 + 2j, -3j], [0, 1e10 + 1j]], np.complex64),
            cplx(rng, (2, 3), np.complex64), cplx(rng, (4,), np.complex128),
            np.zeros((0, 2), np.complex64)]
    want = tf_oracle.run(PRINT_CODE, vals=vals)
    got = []
    with pg.device(device):
        for v in vals:
            t = pg.constant(v)
            got += [str(t), repr(t), repr(pg.Variable(v))]
    assert got == list(want)
    assert str(pg.constant([5 + 4j, 6 + 1j])) == \
        "tf.Tensor([5.+4.j 6.+1.j], shape=(2,), dtype=complex128)"


# ------------------------------------------------------------------ ops

def op_cases(rng, dt) -> list[tuple[str, dict, dict]]:
    """(op, inputs in op-definition order, attributes) for every op above."""
    pt = parts_of(dt)
    tname = np.dtype(dt).name
    x, y = cplx(rng, (3, 4), dt), cplx(rng, (4,), dt)
    m, n = cplx(rng, (3, 5), dt), cplx(rng, (5, 2), dt)
    b1, b2 = cplx(rng, (2, 3, 4), dt), cplx(rng, (2, 3, 5), dt)
    cond = rng.random((3, 4)) < 0.5
    i32 = lambda v: np.asarray(v, np.int32)
    eq = x.copy()
    eq[::2] = cplx(rng, (2, 4), dt)
    cases = [(op, {"x": x, "y": y}, {}) for op in ("AddV2", "Sub", "Mul", "RealDiv", "Div")]
    cases += [("AddV2", {"x": x, "y": np.asarray(y[0])}, {})]
    cases += [(op, {"x": x}, {}) for op in ("Neg", "Square", "Exp", "Log", "Sqrt", "Rsqrt",
                                            "Reciprocal", "Tanh", "Sigmoid", "Sin", "Cos")]
    cases += [("MatMul", {"a": m, "b": n}, {}),
              ("MatMul", {"a": m, "b": n.T.copy()}, {"transpose_b": True}),
              ("BatchMatMulV2", {"x": b1, "y": b2}, {"adj_x": True}),
              ("BatchMatMulV2", {"x": b1, "y": b1}, {"adj_y": True})]
    for op in ("Sum", "Mean", "Prod"):
        cases += [(op, {"input": x, "reduction_indices": i32([1])}, {}),
                  (op, {"input": b1, "reduction_indices": i32([0, 2])}, {"keep_dims": True})]
    cases += [("Cast", {"x": x}, {"DstT": pt.__name__}), ("Cast", {"x": x}, {"DstT": "int32"}),
              ("Cast", {"x": x}, {"DstT": "bool"}),
              ("Cast", {"x": x}, {"DstT": "complex128" if dt == np.complex64 else "complex64"}),
              ("Cast", {"x": x.real.copy()}, {"DstT": tname}),
              ("Cast", {"x": i32([[1, -2], [3, 0]])}, {"DstT": tname})]
    cases += [("Equal", {"x": x, "y": eq}, {}), ("NotEqual", {"x": x, "y": eq}, {})]
    cases += [("Identity", {"input": x}, {}),
              ("Reshape", {"tensor": x, "shape": i32([2, -1])}, {}),
              ("Transpose", {"x": b1, "perm": i32([2, 0, 1])}, {}),
              ("ConcatV2", {"values": [x, eq], "axis": i32(1)}, {}),
              ("Pack", {"values": [x, eq]}, {"axis": 1}),
              ("Unpack", {"value": x}, {"num": 3}),
              ("GatherV2", {"params": x, "indices": i32([2, 0, 2]), "axis": i32(0)}, {}),
              ("Slice", {"input": x, "begin": i32([1, 1]), "size": i32([2, -1])}, {}),
              ("StridedSlice", {"input": x, "begin": i32([0, 3]), "end": i32([3, 0]),
                                "strides": i32([2, -1])}, {}),
              ("ExpandDims", {"input": x, "dim": i32(1)}, {}),
              ("Squeeze", {"input": x.reshape(3, 1, 4)}, {"squeeze_dims": [1]}),
              ("Tile", {"input": x, "multiples": i32([2, 1])}, {}),
              ("Fill", {"dims": i32([2, 3]), "value": np.asarray(y[1])}, {}),
              ("ZerosLike", {"x": x}, {}), ("OnesLike", {"x": x}, {}),
              ("Select", {"condition": cond, "t": x, "e": eq}, {}),
              ("SelectV2", {"condition": cond[0], "t": x, "e": y}, {})]
    cases += [("BiasAdd", {"value": b1, "bias": y}, {}),
              ("BiasAddGrad", {"out_backprop": b1}, {})]
    cases += [(op, {"input": x}, {"Tout": pt.__name__}) for op in ("Real", "Imag", "Angle")]
    cases += [("ComplexAbs", {"x": x}, {"Tout": pt.__name__}), ("Conj", {"input": x}, {}),
              ("Complex", {"real": x.real.copy(), "imag": y.imag.copy()}, {"Tout": tname})]
    return cases


def _flat(inputs: dict) -> list:
    out = []
    for v in inputs.values():
        out += list(v) if isinstance(v, list) else [v]
    return out


@pytest.mark.parametrize("dt", COMPLEX, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("device", DEVICES)
def test_ops_match_tensorflow(device, dt, tf_oracle, rng):
    cases = op_cases(rng, dt)
    want = tf_oracle.batch([(op, _flat(ins), attrs) for op, ins, attrs in cases])
    dev_type = device.split(":")[0]
    for (op, ins, attrs), w in zip(cases, want):
        assert w[0] == "ok", (op, w)
        kw = {k: (pg.dtypes.as_dtype(v) if k in ("DstT", "Tout") else v)
              for k, v in attrs.items()}
        with pg.device(device):
            args = {k: ([pg.constant(a) for a in v] if isinstance(v, list) else pg.constant(v))
                    for k, v in ins.items()}
            if dev_type == "CPU" or op in ON_MY_DEVICE:
                with pg.testing.expect_kernel(op, dev_type):
                    out = getattr(pg.raw_ops, op)(**args, **kw)
            else:
                out = getattr(pg.raw_ops, op)(**args, **kw)
        outs = out if isinstance(out, (list, tuple)) else [out]
        assert len(outs) == len(w[1]), op
        for g, ref in zip(outs, w[1]):
            assert_close(g.numpy(), np.asarray(ref), dt, f"{op} {attrs} {rng.seed_text}")


@pytest.mark.parametrize("device", DEVICES)
def test_user_functions_match_tensorflow(device, tf_oracle, rng):
    z64, w128 = cplx(rng, (2, 3), np.complex64), cplx(rng, (3,), np.complex128)
    re, im = rng.standard_normal((2, 3)).astype(np.float32), rng.standard_normal(3)
    code = """
z, w = tf.constant(z64), tf.constant(w128)
result = [tf.math.real(z), tf.math.imag(w), tf.math.conj(z), tf.math.angle(w), tf.abs(z),
          tf.math.abs(w), tf.complex(re, tf.constant(re[::-1].copy())), tf.complex(im, im),
          tf.math.real(re), tf.math.imag(re), tf.math.conj(re), tf.math.angle(re),
          tf.matmul(z, z, adjoint_a=False, adjoint_b=True),
          tf.matmul(z, z, adjoint_a=True), tf.reduce_sum(z * 2), z / z[0], 1j * w, w ** 2,
          tf.cast(z, tf.float64), tf.reduce_mean(w)]
"""
    want = tf_oracle.run(code, z64=z64, w128=w128, re=re, im=im)
    with pg.device(device):
        z, w = pg.constant(z64), pg.constant(w128)
        got = [pg.math.real(z), pg.math.imag(w), pg.math.conj(z), pg.math.angle(w), pg.abs(z),
               pg.math.abs(w), pg.complex(re, pg.constant(re[::-1].copy())), pg.complex(im, im),
               pg.math.real(re), pg.math.imag(re), pg.math.conj(re), pg.math.angle(re),
               pg.matmul(z, z, adjoint_a=False, adjoint_b=True),
               pg.matmul(z, z, adjoint_a=True), pg.reduce_sum(z * 2), z / z[0], 1j * w, w ** 2,
               pg.cast(z, pg.float64), pg.reduce_mean(w)]
    for i, (g, ref) in enumerate(zip(got, want)):
        dt = np.complex64 if np.asarray(ref).dtype in (np.float32, np.complex64) else np.complex128
        assert_close(g.numpy(), np.asarray(ref), dt, f"result {i} {rng.seed_text}")


def test_my_device_keeps_complex_arithmetic_on_the_device(rng):
    x, y = cplx(rng, (5, 3), np.complex128), cplx(rng, (3,), np.complex128)
    with pg.device("MY_DEVICE:0"):
        a, b = pg.constant(x), pg.constant(y)
        with pg.testing.expect_kernel("AddV2", "MY_DEVICE"), \
                pg.testing.expect_kernel("Mul", "MY_DEVICE"), \
                pg.testing.expect_kernel("Real", "MY_DEVICE"):
            out = pg.math.real(a * b + a)
    assert out.device.endswith("MY_DEVICE:0") and out.dtype == pg.float64
    np.testing.assert_allclose(out.numpy(), (x * y + x).real, rtol=1e-12)


# ------------------------------------------------------------------ gradients

GRAD_CODE = """
z, w, a, b = (tf.constant(v) for v in (z0, w0, a0, b0))
re, im = tf.constant(re0), tf.constant(im0)
result = []
for loss in losses:
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([z, w, a, b, re, im])
        value = eval(loss)
    result.append([value] + tape.gradient(value, [z, w, a, b, re, im],
                                          unconnected_gradients="zero"))
"""
LOSSES = [
    "tf.reduce_sum(tf.abs(z * w))",
    "tf.reduce_sum(tf.math.real(z - w) * tf.math.imag(tf.math.conj(z) + w))",
    "tf.reduce_sum(tf.abs(tf.matmul(a, b)))",
    "tf.reduce_sum(tf.abs(tf.complex(re, im) * z))",
    "tf.reduce_sum(tf.math.angle(z * w))",
    "tf.reduce_mean(tf.abs(tf.exp(z) / w + tf.square(z)))",
    "tf.reduce_sum(tf.abs(tf.raw_ops.Div(x=z, y=w) - a[:, :4]))",
    "tf.reduce_sum(tf.abs(tf.unstack(z)[1] * tf.concat([w[0], w[1]], 0)[2:6]))",
    "tf.reduce_sum(tf.math.real(tf.reduce_prod(z, axis=0) * tf.sin(w[0])))",
    "tf.reduce_sum(tf.abs(tf.tanh(z) + tf.sqrt(w) * tf.sigmoid(z) + tf.math.rsqrt(w)))",
    "tf.reduce_sum(tf.abs(tf.math.log(w) * tf.cos(z) + tf.math.reciprocal(w)))",
]


@pytest.mark.parametrize("dt", COMPLEX, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("device", DEVICES)
def test_gradients_of_real_losses_match_tensorflow(device, dt, tf_oracle, rng):
    pt = parts_of(dt)
    arrays = dict(z0=cplx(rng, (3, 4), dt), w0=cplx(rng, (3, 4), dt, 0.5, 2.0),
                  a0=cplx(rng, (3, 5), dt), b0=cplx(rng, (5, 4), dt),
                  re0=rng.standard_normal((3, 4)).astype(pt),
                  im0=rng.standard_normal((3, 4)).astype(pt))
    want = tf_oracle.run(GRAD_CODE, losses=LOSSES, **arrays)
    with pg.device(device):
        z, w, a, b, re, im = (pg.constant(v) for v in arrays.values())
        got = []
        for loss in LOSSES:
            with pg.GradientTape(persistent=True) as tape:
                tape.watch([z, w, a, b, re, im])
                value = eval(loss.replace("tf.", "pg."))
            grads = tape.gradient(value, [z, w, a, b, re, im], unconnected_gradients="zero")
            got.append([value] + list(grads))
    for loss, g_all, w_all in zip(LOSSES, got, want):
        for i, (g, ref) in enumerate(zip(g_all, w_all)):
            assert_close(np.asarray(g.numpy()), np.asarray(ref), dt,
                         f"{loss} output {i} {rng.seed_text}")


# ------------------------------------------------------------------ errors

ERROR_CODE = """
result = []
for call in calls:
    try:
        eval(call)
        result.append(None)
    except Exception as e:
        result.append(type(e).__name__)
"""
ERROR_CALLS = ["tf.nn.relu(z)", "tf.math.floor(z)", "tf.reduce_max(z)", "tf.maximum(z, z)",
               "tf.raw_ops.Real(input=tf.constant([1.0]))",
               "tf.complex(tf.constant([1.0]), tf.constant([1.0], tf.float64))",
               "tf.math.less(z, z)"]


def test_complex_values_to_ops_that_do_not_take_them_raise_tensorflows_errors(tf_oracle, rng):
    z0 = cplx(rng, (3,), np.complex64)
    want = tf_oracle.run("z = tf.constant(z0)\n" + ERROR_CODE, calls=ERROR_CALLS, z0=z0)
    z = pg.constant(z0)
    classes = {"InvalidArgumentError": errors.InvalidArgumentError, "TypeError": TypeError,
               "NotFoundError": errors.NotFoundError}
    for call, tf_class in zip(ERROR_CALLS, want):
        assert tf_class in classes, (call, tf_class)
        with pytest.raises(classes[tf_class]) as info:
            eval(call.replace("tf.", "pg."))
        message = str(info.value)
        assert "complex64" in message or "float" in message, (call, message)
    with pytest.raises(errors.InvalidArgumentError, match=r"'T' = complex64 is not allowed"):
        pg.nn.relu(z)


# ------------------------------------------------- variables, copies, graphs

@pytest.mark.parametrize("dt", COMPLEX, ids=lambda d: np.dtype(d).name)
def test_variables_and_copies_between_devices_keep_every_bit(dt, rng):
    x = cplx(rng, (4, 3), dt)
    x.reshape(-1)[:3] = [complex(np.nan, 1), complex(-np.inf, np.nan), complex(-0.0, -0.0)]
    cpu = pg.constant(x)
    with pg.device("MY_DEVICE:0"):
        dev = pg.identity(cpu)
        v = pg.Variable(dev)
        v.assign_add(pg.ones_like(dev))
    assert dev.device.endswith("MY_DEVICE:0") and v.device.endswith("MY_DEVICE:0")
    assert dev.numpy().tobytes() == x.tobytes()
    with pg.device("CPU:0"):
        back = pg.identity(dev)
    assert back.device.endswith("CPU:0") and back.numpy().tobytes() == x.tobytes()
    np.testing.assert_array_equal(v.numpy(), x + 1)
    v.assign(x[::-1].copy())
    assert v.read_value().numpy().tobytes() == x[::-1].tobytes()


def test_graph_constants_checkpoints_and_dlpack_carry_complex_values(rng, tmp_path):
    c = cplx(rng, (3,), np.complex64)

    @pg.function
    def f(x):
        return x * pg.constant(c) + pg.constant(1j, pg.complex64)

    x = cplx(rng, (3,), np.complex64)
    np.testing.assert_allclose(f(pg.constant(x)).numpy(), x * c + 1j, rtol=1e-6)
    graph = f.get_concrete_function(pg.TensorSpec([3], pg.complex64)).graph.as_graph_def()
    consts = [n for n in graph.node if n.op == "Const" and n.attr["dtype"].type == 8]
    assert consts, "no complex64 Const in the GraphDef"

    v = pg.Variable(cplx(rng, (2, 2), np.complex128))
    ckpt = pg.train.Checkpoint(v=v)
    path = ckpt.save(str(tmp_path / "ckpt"))
    saved = v.numpy().copy()
    v.assign(np.zeros((2, 2), np.complex128))
    ckpt.restore(path)
    assert v.numpy().tobytes() == saved.tobytes()

    t = pg.constant(x)
    shared = np.from_dlpack(t)
    assert shared.dtype == np.complex64 and shared.tobytes() == x.tobytes()
    back = pg.from_dlpack(np.ascontiguousarray(saved))
    assert back.dtype == pg.complex128 and back.numpy().tobytes() == saved.tobytes()


def test_gradients_in_a_traced_function_equal_eager_ones(rng):
    z0, w0 = cplx(rng, (3, 4), np.complex64), cplx(rng, (4,), np.complex64, 0.5, 2.0)

    def grads(z, w):
        with pg.GradientTape() as tape:
            tape.watch([z, w])
            loss = pg.reduce_sum(pg.abs(pg.math.conj(z) * w + pg.exp(z) / w))
        return tape.gradient(loss, [z, w])

    eager = grads(pg.constant(z0), pg.constant(w0))
    traced = pg.function(grads)(pg.constant(z0), pg.constant(w0))
    for e, t in zip(eager, traced):
        assert e.dtype == t.dtype == pg.complex64
        np.testing.assert_allclose(t.numpy(), e.numpy(), rtol=1e-5, atol=1e-6)
