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
