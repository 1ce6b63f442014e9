"""Inputs of one type attribute that are not tensors take the dtype of the
first one converted, as TensorFlow's (``tf.maximum(0., [1, -1])`` is
float32, ``tf.multiply(float64_array, 42)`` float64), eagerly and in a
traced function; checked against real TensorFlow on fresh values."""
from __future__ import annotations

import numpy as np
import pytest

import pluggable as pg
from pluggable.framework import registry

CASES = """
def cases(lib, f64, ints, scalar):
    def both(fn, *args):
        traced = lib.function(lambda: fn(*args))
        return [fn(*args), traced()]
    out = []
    out += both(lib.math.multiply, f64, 42)
    out += both(lib.maximum, 0., ints)
    out += both(lib.maximum, scalar, ints)
    out += both(lib.math.subtract, f64, ints)
    return [(t.numpy(), t.dtype.name) for t in out]
"""


def _inputs(rng) -> dict:
    return {"f64": rng.standard_normal((3, 3)),
            "ints": [int(v) for v in rng.integers(-5, 5, 4)],
            "scalar": float(rng.standard_normal())}


def _kernel_device(op: str, kind: str) -> str:
    return kind if kind == "CPU" or registry.KERNELS.get((op, kind)) else registry.DEFAULT_DEVICE


@pytest.mark.parametrize("device", ["CPU:0", "MY_DEVICE:0"])
def test_first_value_sets_the_dtype(tf_oracle, rng, device):
    inputs = _inputs(rng)
    # (f64 - ints broadcast: ints has 4 values, f64 3 columns; use a slice)
    inputs["f64"] = inputs["f64"][:, :1] * np.ones((3, 4))
    theirs = tf_oracle.run(CASES + "result = cases(tf, f64, ints, scalar)", **inputs)
    scope: dict = {}
    exec(CASES, scope)
    kind = device.split(":")[0]
    with pg.device(device):
        with pg.testing.expect_kernel("Maximum", _kernel_device("Maximum", kind), min_calls=2):
            ours = scope["cases"](pg, **inputs)
    assert len(ours) == len(theirs)
    for (a, da), (b, db) in zip(ours, theirs):
        assert da == db, rng.seed_text
        np.testing.assert_allclose(a, b, rtol=1e-6, err_msg=rng.seed_text)
