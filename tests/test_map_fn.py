"""``pg.map_fn`` against ``tf.map_fn`` (dense, nested, ragged, output
signatures, unknown sizes in a traced function, gradients), and the
tracing protocol of ``pg.types.experimental.TraceType``."""
from __future__ import annotations

import numpy as np
import pytest

import pluggable as pg

DEVICES = ["CPU:0", "MY_DEVICE:0"]

CASES = """
r = {}
r["square"] = tf.map_fn(tf.math.square, x)
r["rowsum"] = tf.map_fn(tf.reduce_sum, x)
r["pair"] = tf.map_fn(lambda t: t[0] * t[1], (x, y), fn_output_signature=tf.float32)
r["dict"] = tf.map_fn(lambda d: d["a"] - d["b"], {"a": x, "b": y},
                      fn_output_signature=tf.TensorSpec([3], tf.float32))
r["to_int"] = tf.map_fn(lambda v: tf.cast(tf.argmax(v), tf.int32), x,
                        fn_output_signature=tf.int32)
r["tuple_out"] = tf.map_fn(lambda v: (tf.reduce_max(v), v * 2.0), x,
                           fn_output_signature=(tf.float32, tf.float32))
digits = tf.ragged.constant(d)
r["ragged"] = tf.map_fn(tf.math.square, digits).to_list()
r["ragged_sum"] = tf.map_fn(tf.reduce_sum, digits, fn_output_signature=tf.int32)
f = tf.function(lambda v: tf.map_fn(lambda row: row * row + 1.0, v),
                input_signature=[tf.TensorSpec([None, None], tf.float32)])
r["traced"] = f(x)
xt = tf.constant(x)
with tf.GradientTape() as tape:
    tape.watch(xt)
    loss = tf.reduce_sum(tf.map_fn(lambda v: tf.sin(v) * v, xt))
r["grad"] = tape.gradient(loss, xt)
result = r
"""


@pytest.mark.parametrize("device", DEVICES)
def test_map_fn_matches_tensorflow(device, tf_oracle, rng):
    x = rng.standard_normal((4, 3)).astype(np.float32)
    y = rng.standard_normal((4, 3)).astype(np.float32)
    d = [list(rng.integers(-9, 9, int(n))) for n in rng.integers(0, 4, 5)]
    d = [[int(v) for v in row] for row in d]
    want = tf_oracle.run(CASES, x=x, y=y, d=d)
    scope = {"tf": pg, "x": x, "y": y, "d": d}
    with pg.device(device):
        exec(CASES, scope)
    got = scope["result"]
    assert sorted(got) == sorted(want)
    for name, ref in want.items():
        g = got[name]
        if name == "ragged":
            assert g == ref
            continue
        for gv, rv in zip(g if isinstance(g, tuple) else (g,),
                          ref if isinstance(ref, (tuple, list)) else (ref,)):
            assert gv.dtype.as_numpy_dtype == np.asarray(rv).dtype, name
            np.testing.assert_allclose(gv.numpy(), rv, rtol=1e-5, atol=1e-6,
                                       err_msg=f"{name} {rng.seed_text}")


def test_an_output_of_another_structure_needs_a_signature_as_in_tensorflow(tf_oracle):
    code = ("try:\n    tf.map_fn(lambda t: t[0], (tf.zeros([2]), tf.zeros([2])))\n"
            "    result = 'ran'\nexcept Exception as e:\n    result = type(e).__name__\n")
    want = tf_oracle.run(code)
    scope = {"tf": pg}
    exec(code, scope)
    assert scope["result"] == want == "ValueError"


def test_map_fn_refuses_elements_of_different_lengths():
    with pytest.raises(pg.errors.InvalidArgumentError, match="same first dimension"):
        pg.map_fn(lambda t: t[0], (pg.zeros([3]), pg.zeros([4])))
    with pytest.raises(TypeError, match="callable"):
        pg.map_fn(3, pg.zeros([3]))


TRACE_TYPES = """
class FruitType(tf.types.experimental.TraceType):
    def __init__(self, fruit):
        self.kind = type(fruit)
        self.fruit = fruit

    def is_subtype_of(self, other):
        return type(other) is FruitType and self.kind is other.kind

    def most_specific_common_supertype(self, others):
        return self if all(self == o for o in others) else None

    def placeholder_value(self, placeholder_context=None):
        return self.fruit

    def __eq__(self, other):
        return type(other) is FruitType and self.kind == other.kind

    def __hash__(self):
        return hash(self.kind)


class Fruit:
    def __tf_tracing_type__(self, context):
        return FruitType(self)


class Apple(Fruit):
    flavor = tf.constant([1, 2])


class Mango(Fruit):
    flavor = tf.constant([3, 4])


@tf.function
def mixed(a, b):
    return a.flavor + b.flavor

values = [mixed(Apple(), Mango()), mixed(Apple(), Mango())]
counts = [mixed.experimental_get_tracing_count()]
values.append(mixed(Mango(), Mango()))
counts.append(mixed.experimental_get_tracing_count())
result = [values, counts]
"""


def test_a_trace_type_decides_when_a_function_retraces(tf_oracle):
    """New instances of the same trace type share a trace; another type
    traces again (TensorFlow's tracing protocol)."""
    want = tf_oracle.run(TRACE_TYPES)
    scope = {"tf": pg}
    exec(TRACE_TYPES, scope)
    values, counts = scope["result"]
    assert list(counts) == list(want[1]) == [1, 2]
    for g, w in zip(values, want[0]):
        np.testing.assert_array_equal(g.numpy(), w)


def test_a_tracing_type_that_is_not_a_trace_type_is_refused():
    class Bad:
        def __tf_tracing_type__(self, context):
            return 3

    with pytest.raises(TypeError, match="must return a pg.types.experimental.TraceType"):
        pg.function(lambda b: pg.constant(1))(Bad())
