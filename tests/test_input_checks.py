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
