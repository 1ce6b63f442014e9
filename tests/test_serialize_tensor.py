"""``pg.io.serialize_tensor`` / ``parse_tensor`` against TensorFlow's: the
same bytes for the same tensor, each side reads what the other wrote, and
the same errors."""
from __future__ import annotations

import numpy as np
import pytest

import pluggable as pg

SERIALIZE = """
result = [tf.io.serialize_tensor(tf.constant(v)).numpy() for v in values]
"""


def _values(rng):
    return [rng.standard_normal((2, 3)).astype(np.float32),
            rng.integers(-5, 5, (4,)).astype(np.int64),
            rng.integers(0, 255, (2, 2, 2)).astype(np.uint8),
            rng.standard_normal(()).astype(np.float64),
            (rng.random(5) > 0.5),
            rng.standard_normal((3, 0)).astype(np.float16),
            np.array([b"pluggable", b"", b"\x00\xff"], object)]


@pytest.mark.parametrize("device", ["CPU:0", "MY_DEVICE:0"])
def test_serialized_bytes_are_tensorflows_and_read_back(device, tf_oracle, rng):
    values = _values(rng)
    want = tf_oracle.run(SERIALIZE, values=values)
    with pg.device(device):
        got = [pg.io.serialize_tensor(pg.constant(v)) for v in values]
        back = [pg.io.parse_tensor(s, pg.as_dtype(v.dtype) if v.dtype != object else pg.string)
                for s, v in zip(got, values)]
    for g, w, b, v in zip(got, want, back, values):
        assert g.dtype == pg.string and g.shape == ()
        assert g.numpy() == w
        assert b.shape == v.shape
        np.testing.assert_array_equal(b.numpy(), v)


PARSE = """
result = [tf.io.parse_tensor(s, tf.float32) for s in serialized]
"""


def test_tensorflow_reads_what_pluggable_writes(tf_oracle, rng):
    values = [rng.standard_normal(s).astype(np.float32) for s in [(3,), (2, 2), ()]]
    serialized = [pg.io.serialize_tensor(v).numpy() for v in values]
    for got, v in zip(tf_oracle.run(PARSE, serialized=serialized), values):
        np.testing.assert_array_equal(got, v)


ERRORS = """
result = []
for s, t in cases:
    try:
        tf.io.parse_tensor(s, t)
        result.append("ok")
    except Exception as e:
        result.append(type(e).__name__)
"""


def test_a_wrong_dtype_or_damaged_bytes_are_tensorflows_errors(tf_oracle):
    good = pg.io.serialize_tensor(np.ones(3, np.float32)).numpy()
    cases = [(good, "int32"), (b"\xff\xff\xff", "float32"), (good[:-3], "float32")]
    want = tf_oracle.run(ERRORS.replace("tf.io.parse_tensor(s, t)",
                                        "tf.io.parse_tensor(s, getattr(tf, t))"), cases=cases)
    got = []
    for s, t in cases:
        try:
            pg.io.parse_tensor(s, getattr(pg, t))
            got.append("ok")
        except pg.errors.PluggableError as e:
            got.append(type(e).__name__)
    assert got == want
    with pytest.raises(pg.errors.InvalidArgumentError, match=r"Type mismatch .*float32.*int32"):
        pg.io.parse_tensor(good, pg.int32)


def test_serialize_and_parse_inside_a_function(rng):
    x = rng.standard_normal((2, 5)).astype(np.float32)

    @pg.function
    def round_trip(t):
        return pg.io.parse_tensor(pg.io.serialize_tensor(t * 2.0), pg.float32)

    np.testing.assert_array_equal(round_trip(x).numpy(), x * 2.0)
