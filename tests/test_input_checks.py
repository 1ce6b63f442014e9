"""Bad input is refused with typed errors instead of being wrapped, cut or
aliased: out-of-range integer constants, shapes that overflow 32 bits,
ragged lists, negative explicit paddings; big-endian input is converted and
pg.constant copies the caller's array."""
from __future__ import annotations

import numpy as np
import pytest

import pluggable as pg
from pluggable.framework import errors

DEVICES = ["CPU:0", "MY_DEVICE:0"]


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "int32"])
def test_out_of_range_integer_constants_are_refused(rng, dtype):
    info = np.iinfo(dtype)
    ok = rng.integers(info.min, int(info.max) + 1, size=5)
    np.testing.assert_array_equal(pg.constant(ok.tolist(), dtype).numpy(), ok.astype(dtype))
    for bad in (int(info.max) + 1 + int(rng.integers(0, 100)),
                int(info.min) - 1 - int(rng.integers(0, 100))):
        with pytest.raises(errors.InvalidArgumentError, match=f"out of range for {dtype}"):
            pg.constant([0, bad], dtype)


def test_constant_does_not_alias_the_callers_array(rng):
    a = rng.standard_normal(16)
    want = a.copy()
    t = pg.constant(a)
    a[:] = 0
    np.testing.assert_array_equal(t.numpy(), want)


@pytest.mark.parametrize("device", DEVICES)
def test_big_endian_input_is_converted(rng, device):
    a = rng.standard_normal(12).astype(">f4").reshape(3, 4)
    with pg.device(device):
        t = pg.constant(a)
        got = pg.add(t, t).numpy()
    np.testing.assert_array_equal(got, (a + a).astype(np.float32))
    assert got.dtype == np.float32 and got.dtype.isnative


def test_ragged_list_is_tensorflows_value_error(tf_oracle):
    code = """
try:
    lib.constant(value)
    result = None
except Exception as e:
    result = f"{type(e).__name__}: {e}"
"""
    for value in ([[1.0], [1.0, 2.0]], [[1, 2], [3]], [[[1]], [[1, 2]]]):
        theirs = tf_oracle.run("lib = tf\n" + code, value=value)
        scope = {"lib": pg, "value": value}
        exec(code, scope)
        assert scope["result"] == theirs == \
            "ValueError: Can't convert non-rectangular Python sequence to Tensor."


@pytest.mark.parametrize("shape", [[2**32 + 6], [2**31], [-2**32 + 6]])
def test_reshape_never_wraps_dimensions(shape):
    x = pg.constant(np.arange(6.0))
    with pytest.raises(errors.InvalidArgumentError, match="Reshape"):
        pg.reshape(x, shape)


@pytest.mark.parametrize("device", DEVICES)
def test_negative_explicit_paddings_are_refused_everywhere(rng, device):
    x = rng.standard_normal((1, 5, 5, 1)).astype(np.float32)
    f = rng.standard_normal((2, 2, 1, 1)).astype(np.float32)
    with pg.device(device):
        with pytest.raises(errors.InvalidArgumentError, match=r"explicit_paddings must (be non|have 8 non-negative)"):
            pg.raw_ops.Conv2D(input=pg.constant(x), filter=pg.constant(f), strides=[1, 1, 1, 1],
                              padding="EXPLICIT",
                              explicit_paddings=[0, 0, -1, 0, 0, 0, 0, 0]).numpy()


# ---------------------------------------- found by fuzzing op calls (fuzz_ops.py)

def _tf_error(tf_oracle, op: str, **kwargs) -> str:
    from tf_oracle import OracleError
    try:
        tf_oracle.raw(op, **kwargs)
    except OracleError as exc:
        return exc.tf_type
    return "no error"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", ["Max", "Min", "Sum", "Mean", "Prod"])
def test_a_scalar_has_no_axis_to_reduce(device, op, tf_oracle, rng):
    x = np.float32(rng.standard_normal())
    for axis in (0, -1):
        assert _tf_error(tf_oracle, op, input=x, axis=np.int32(axis)) == "InvalidArgumentError"
        with pg.device(device), pytest.raises(errors.InvalidArgumentError,
                                              match="a scalar has no axis to reduce"):
            getattr(pg.raw_ops, op)(input=pg.constant(x), axis=np.int32(axis)).numpy()
    with pg.device(device):   # no axis: the scalar itself, as in TensorFlow
        got = getattr(pg.raw_ops, op)(input=pg.constant(x), axis=np.zeros(0, np.int32))
    np.testing.assert_array_equal(got.numpy(), tf_oracle.raw(op, input=x,
                                                             axis=np.zeros(0, np.int32)))


@pytest.mark.parametrize("device", DEVICES)
def test_a_range_past_int64_is_refused_as_in_tensorflow(device, tf_oracle, rng):
    delta = float(rng.uniform(1e-30, 1e-25))
    assert _tf_error(tf_oracle, "Range", start=np.float32(0), limit=np.float32(1),
                     delta=np.float32(delta)) == "InvalidArgumentError"
    with pg.device(device), pytest.raises(errors.InvalidArgumentError,
                                          match=r"requires \(\(limit - start\) / delta\) <="):
        pg.range(0.0, 1.0, delta)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("num,message", [(2**40, "gives the length of the list argument"),
                                         (-3, "must be >= 1"), (0, "must be >= 1")])
def test_a_list_length_attribute_out_of_range_is_refused(device, num, message, rng, tf_oracle):
    """A huge length used to build a list of 2**40 outputs (MemoryError).
    TensorFlow refuses these calls too."""
    x = rng.standard_normal((2, 3)).astype(np.float32)
    assert _tf_error(tf_oracle, "Split", axis=np.int32(0), value=x,
                     num_split=num) != "no error"
    if num >= 0:
        assert _tf_error(tf_oracle, "Unpack", value=x, num=num or 2**40, axis=0) != "no error"
    if num >= 0:
        with pg.device(device), pytest.raises(errors.InvalidArgumentError,
                                              match="gives the length of the list argument"):
            pg.raw_ops.Unpack(value=pg.constant(x), num=num or 2**40, axis=0)
    with pg.device(device), pytest.raises(errors.InvalidArgumentError, match=message):
        pg.raw_ops.Split(axis=np.int32(0), value=pg.constant(x), num_split=num)


def test_raw_ops_take_tensorflows_python_argument_names(tf_oracle, rng):
    """tf.raw_ops names some arguments otherwise than their op definitions
    (Sum's reduction_indices is `axis`): code written for it runs as is, and
    the op-definition names still work."""
    from pluggable.ops.raw_ops import PYTHON_NAMES
    x = rng.standard_normal((2, 3, 1)).astype(np.float32)
    calls = [("Sum", dict(input=x, axis=np.int32(1))), ("Max", dict(input=x, axis=np.int32(0))),
             ("Mean", dict(input=x, axis=np.array([0, 1], np.int32), keep_dims=True)),
             ("Prod", dict(input=x, axis=np.int32(-1))),
             ("Split", dict(axis=np.int32(1), value=x, num_split=3)),
             ("ExpandDims", dict(input=x, axis=np.int32(0))), ("Squeeze", dict(input=x, axis=[2])),
             ("Select", dict(condition=x > 0, x=x, y=-x))]
    for op, kw in calls:
        want = tf_oracle.raw(op, **kw)
        got = getattr(pg.raw_ops, op)(**kw)
        for g, w in zip(got if isinstance(got, list) else [got],
                        want if isinstance(want, (list, tuple)) else [want]):
            np.testing.assert_allclose(g.numpy(), w, rtol=1e-6, atol=1e-7)  # summation order
        inverse = {py: n for n, py in PYTHON_NAMES[op].items()}
        opdef = {inverse.get(k, k): v for k, v in kw.items()}
        again = getattr(pg.raw_ops, op)(**opdef)
        for g, w in zip(again if isinstance(again, list) else [again],
                        got if isinstance(got, list) else [got]):
            np.testing.assert_array_equal(g.numpy(), w.numpy())
    with pytest.raises(TypeError, match="two names of one argument"):
        pg.raw_ops.Sum(input=x, axis=0, reduction_indices=0)
    with pytest.raises(TypeError, match="missing required keyword argument: 'axis'"):
        pg.raw_ops.Sum(input=x)
