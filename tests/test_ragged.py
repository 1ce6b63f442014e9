"""pg.RaggedTensor and pg.ragged against real TensorFlow (tf_oracle): fresh
random ragged inputs, the same expression under both, on CPU and on
MY_DEVICE (with the device's kernels checked to have done the work)."""
from __future__ import annotations

import os
import re

import numpy as np
import pytest

import pluggable as pg

DEVICES = ["CPU", "MY_DEVICE"]

# TensorFlow describes a value the way the pluggable side does below.
DESCRIBE = '''
def describe(x):
    if isinstance(x, tf.RaggedTensor):
        return ("ragged", repr(x), x.dtype.name, [s.numpy() for s in x.nested_row_splits],
                x.flat_values.numpy(), str(x.shape))
    x = tf.convert_to_tensor(x)
    return ("dense", x.numpy(), x.dtype.name)
'''


def describe(x):
    if isinstance(x, pg.RaggedTensor):
        return ("ragged", repr(x), x.dtype.name, [s.numpy() for s in x.nested_row_splits],
                x.flat_values.numpy(), str(x.shape))
    return ("dense", np.asarray(x.numpy()), x.dtype.name)


def assert_same(got, want, context):
    assert got[0] == want[0], (context, got, want)
    if got[0] == "ragged":
        if got[2].startswith("float"):   # the last digit may differ between kernels
            shape_of = lambda text: re.sub(  # noqa: E731
                r"\s+", "", re.sub(r"-?\d+\.?\d*(e[-+]?\d+)?", "#", text))
            assert shape_of(got[1]) == shape_of(want[1]), (context, got[1], want[1])
        else:
            assert got[1] == want[1], (context, got[1], want[1])   # repr, exactly
        assert got[2] == want[2], (context, got[2], want[2])       # dtype
        assert len(got[3]) == len(want[3]), context
        for a, b in zip(got[3], want[3]):
            assert a.dtype == b.dtype and np.array_equal(a, b), (context, a, b)
        np.testing.assert_allclose(got[4], want[4], rtol=1e-5, atol=1e-6, err_msg=context)
        assert got[5] == want[5], (context, got[5], want[5])       # static shape
    else:
        assert got[2] == want[2], (context, got[2], want[2])
        np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6, err_msg=context)


@pytest.fixture
def rng():
    seed = int.from_bytes(os.urandom(4), "little")
    print("seed", seed)
    return np.random.default_rng(seed)


def random_ragged(rng, depth=2, rows=None, dtype="int32", inner=()):
    """A nested list of random values with ragged rows (some empty)."""
    def level(d):
        n = int(rng.integers(0, 5))
        if d == 1:
            shape = (n,) + tuple(inner)
            v = rng.integers(-9, 10, size=shape) if dtype.startswith("int") else \
                rng.standard_normal(shape)
            return v.astype(dtype).tolist()
        return [level(d - 1) for _ in range(n)]
    def has_value(x):
        return any(has_value(v) for v in x) if isinstance(x, list) and x and \
            isinstance(x[0], list) else bool(x) if isinstance(x, list) else True

    n = int(rng.integers(2, 6)) if rows is None else rows
    while True:   # at least one value, so that the nesting depth is the one asked for
        pylist = [level(depth - 1) for _ in range(n)]
        if has_value(pylist):
            return pylist


def same_rows_like(rng, pylist, dtype="int32"):
    """Random values with exactly the row structure of `pylist`."""
    if isinstance(pylist, list):
        return [same_rows_like(rng, v, dtype) for v in pylist]
    return int(rng.integers(-9, 10)) if dtype.startswith("int") else float(rng.standard_normal())


def oracle(tf_oracle, expr, **inputs):
    return tf_oracle.run(DESCRIBE + f"result = describe({expr})", **inputs)


def run_pg(device, expr, **inputs):
    with pg.device(f"{device}:0"):
        return describe(eval(expr, {"tf": pg, "np": np}, inputs))


def compare_pair(tf_oracle, rng, device, expr, a):
    """`expr` of ragged list `a` and a list `b` with its rows, under both."""
    b = same_rows_like(rng, a)
    want = oracle(tf_oracle, expr, a=a, b=b)
    got = run_pg(device, expr, a=a, b=b)
    assert_same(got, want, f"{expr} with a={a} b={b}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("expr", [
    "tf.ragged.constant(a)",
    "tf.ragged.constant(a) + 3",
    "tf.ragged.constant(a) * tf.ragged.constant(b) - tf.ragged.constant(a)",
    "tf.add(tf.ragged.constant(a), tf.ragged.constant(b))",
    "tf.math.square(tf.ragged.constant(a))",
    "tf.math.maximum(tf.ragged.constant(a), 2)",
    "tf.ragged.map_flat_values(lambda x: x * 2 + 1, tf.ragged.constant(a))",
    "tf.cast(tf.ragged.constant(a), tf.float32) / 2",
    "tf.ragged.constant(a) > 0",
    "tf.constant(2) * tf.ragged.constant(a) - tf.constant(1)",
    "tf.constant(0) < tf.ragged.constant(a)",
    "tf.reduce_sum(tf.ragged.constant(a), axis=1)",
    "tf.reduce_sum(tf.ragged.constant(a), axis=0)",
    "tf.reduce_sum(tf.ragged.constant(a))",
    "tf.reduce_mean(tf.ragged.constant(a), axis=1)",
    "tf.reduce_mean(tf.ragged.constant(a), axis=0)",
    "tf.reduce_max(tf.ragged.constant(a), axis=1)",
    "tf.reduce_min(tf.ragged.constant(a), axis=0)",
    "tf.reduce_max(tf.ragged.constant(a), axis=-1)",
    "tf.concat([tf.ragged.constant(a), tf.ragged.constant(b)], axis=0)",
    "tf.concat([tf.ragged.constant(a), tf.ragged.constant(b)], axis=1)",
    "tf.stack([tf.ragged.constant(a), tf.ragged.constant(b)], axis=0)",
    "tf.stack([tf.ragged.constant(a), tf.ragged.constant(b)], axis=1)",
    "tf.concat([tf.ragged.constant(a), [[5, 3]]], axis=0)",
    "tf.gather(tf.ragged.constant(a), [1, 0, 1])",
    "tf.gather(tf.ragged.constant(a), [[1, 0], [0, 1]])",
    "tf.gather(tf.range(20, 40), tf.ragged.constant(a) + 9)",
    "tf.nn.embedding_lookup(tf.reshape(tf.range(60.0), [20, 3]), tf.ragged.constant(a) + 9)",
    "tf.ragged.map_flat_values(tf.multiply, tf.ragged.constant(a), tf.ragged.constant(b))",
    "tf.ragged.boolean_mask(tf.ragged.constant(a).to_tensor(), "
    "tf.ragged.constant(a).to_tensor() > 0)",
    "tf.ragged.boolean_mask(tf.ragged.constant(a), [i % 2 == 0 for i in range(len(a))])",
    "tf.math.reduce_prod(tf.ragged.constant(a), axis=1)",
    "tf.reduce_any(tf.ragged.constant(a) > 3, axis=1)",
    "tf.reduce_all(tf.ragged.constant(a) > -3, axis=0)",
    "tf.ragged.stack([tf.ragged.constant(a), tf.ragged.constant(b)])",
    "tf.zeros_like(tf.ragged.constant(a))",
    "tf.size(tf.ragged.constant(a))",
    "tf.ragged.boolean_mask(tf.ragged.constant(a), tf.ragged.constant(a) > 0)",
    "tf.reverse(tf.ragged.constant(a), [1])",
    "tf.tile(tf.ragged.constant(a), [2, 3])",
    "tf.ragged.constant(a).to_tensor()",
    "tf.ragged.constant(a).to_tensor(default_value=-1, shape=[None, 2])",
    "tf.ragged.constant(a).bounding_shape()",
    "tf.ragged.constant(a).row_lengths()",
    "tf.ragged.constant(a).value_rowids()",
    "tf.ragged.constant(a)[1]",
    "tf.ragged.constant(a)[1:]",
    "tf.ragged.constant(a)[::-1]",
    "tf.ragged.constant(a)[:, :2]",
    "tf.ragged.constant(a)[:, -2:]",
    "tf.ragged.constant(a)[:, 1::2]",
    "tf.RaggedTensor.from_tensor(tf.ragged.constant(a).to_tensor(default_value=-99), "
    "padding=-99)",
])
def test_two_dimensional(tf_oracle, rng, device, expr):
    compare_pair(tf_oracle, rng, device, expr, random_ragged(rng, rows=int(rng.integers(2, 6))))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("expr", [
    "tf.ragged.constant(a)",
    "tf.ragged.constant(a) + tf.ragged.constant(b)",
    "tf.reduce_sum(tf.ragged.constant(a), axis=2)",
    "tf.reduce_sum(tf.ragged.constant(a), axis=1)",
    "tf.reduce_max(tf.ragged.constant(a), axis=0)",
    "tf.reduce_mean(tf.ragged.constant(a), axis=[1, 2])",
    "tf.concat([tf.ragged.constant(a), tf.ragged.constant(b)], axis=1)",
    "tf.concat([tf.ragged.constant(a), tf.ragged.constant(b)], axis=2)",
    "tf.ragged.constant(a).to_tensor()",
    "tf.ragged.constant(a).merge_dims(1, 2)",
    "tf.ragged.constant(a).merge_dims(0, 1)",
    "tf.ragged.constant(a)[:, 1:3]",
    "tf.ragged.constant(a)[1]",
    "tf.ragged.constant(a).row_lengths(axis=2)",
    "tf.ragged.constant(a).to_tensor(default_value=7, shape=[None, 2, 3])",
    "tf.reverse(tf.ragged.constant(a), [0, 2])",
    "tf.stack([tf.ragged.constant(a), tf.ragged.constant(b)], axis=2)",
    "tf.RaggedTensor.from_tensor(tf.ragged.constant(a).to_tensor(), ragged_rank=2)",
    "tf.RaggedTensor.from_tensor(tf.ragged.constant(a).to_tensor(), "
    "lengths=tf.ragged.constant(a).nested_row_lengths())",
])
def test_three_dimensional(tf_oracle, rng, device, expr):
    compare_pair(tf_oracle, rng, device, expr,
                 random_ragged(rng, depth=3, rows=int(rng.integers(2, 5))))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("expr", [
    "tf.ragged.constant(a, ragged_rank=1)",
    "tf.ragged.constant(a, ragged_rank=1) + y",
    "tf.ragged.constant(a, ragged_rank=1) * tf.constant([[2.0]])",
    "tf.reduce_sum(tf.ragged.constant(a, ragged_rank=1), axis=1)",
    "tf.reduce_sum(tf.ragged.constant(a, ragged_rank=1), axis=2)",
    "tf.ragged.constant(a, ragged_rank=1).to_tensor()",
    "tf.ragged.constant(a, ragged_rank=1).merge_dims(1, 2)",
    "tf.ragged.constant(a, ragged_rank=1)[:, :, 0]",
])
def test_uniform_inner_dimension(tf_oracle, rng, device, expr):
    a = random_ragged(rng, rows=4, dtype="float32", inner=(3,))
    y = rng.standard_normal(3).astype(np.float32)
    want = oracle(tf_oracle, expr, a=a, y=y)
    got = run_pg(device, expr, a=a, y=pg.constant(y))
    assert_same(got, want, f"{expr} with a={a}")


@pytest.mark.parametrize("device", DEVICES)
def test_dense_operand_broadcasts_per_row(tf_oracle, rng, device):
    a = random_ragged(rng, rows=3)
    y = rng.integers(-100, 100, size=(3, 1)).astype(np.int32)
    expr = "tf.ragged.constant(a) + y"
    want = oracle(tf_oracle, expr, a=a, y=y)
    got = run_pg(device, expr, a=a, y=pg.constant(y))
    assert_same(got, want, f"{expr} with a={a} y={y.tolist()}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("expr", [
    "tf.RaggedTensor.from_row_splits(v, splits)",
    "tf.RaggedTensor.from_row_lengths(v, lengths)",
    "tf.RaggedTensor.from_value_rowids(v, rowids, nrows=len(lengths))",
    "tf.RaggedTensor.from_row_starts(v, splits[:-1])",
    "tf.RaggedTensor.from_row_limits(v, splits[1:])",
    "tf.RaggedTensor.from_nested_row_splits(v, [[0, 1, len(lengths)], splits])",
    "tf.RaggedTensor.from_uniform_row_length(v[:6], 2)",
    "tf.RaggedTensor.from_tensor(np.reshape(v[:6], (2, 3)), lengths=[1, 3])",
    "tf.RaggedTensor.from_tensor(np.reshape(v[:6], (2, 3)))",
    "tf.ragged.range(lengths)",
    "tf.ragged.range(np.array(lengths) - 2, 5, 2)",
    "tf.ragged.row_splits_to_segment_ids(splits)",
    "tf.ragged.segment_ids_to_row_splits(rowids, num_segments=len(lengths))",
])
def test_factories(tf_oracle, rng, device, expr):
    lengths = [int(n) for n in rng.integers(0, 4, size=int(rng.integers(2, 6)))]
    lengths[0] = max(lengths[0], 1)
    splits = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    v = rng.integers(-50, 50, size=max(int(splits[-1]), 6)).astype(np.int32)
    splits[-1] = v.size
    lengths[-1] += v.size - int(np.sum(lengths))
    rowids = np.repeat(np.arange(len(lengths)), lengths).astype(np.int64)
    inputs = dict(v=v, splits=splits, lengths=lengths, rowids=rowids)
    want = oracle(tf_oracle, expr, **inputs)
    got = run_pg(device, expr, **inputs)
    assert_same(got, want, f"{expr} with {inputs}")


@pytest.mark.parametrize("expr, error", [
    ("tf.RaggedTensor.from_row_splits([1, 2, 3], [0, 2, 1, 3])", "InvalidArgumentError"),
    ("tf.RaggedTensor.from_row_splits([1, 2, 3], [1, 3])", "InvalidArgumentError"),
    ("tf.RaggedTensor.from_row_splits([1, 2, 3], [0, 2])", "InvalidArgumentError"),
    ("tf.RaggedTensor.from_row_lengths([1, 2, 3], [1, 1])", "InvalidArgumentError"),
    ("tf.RaggedTensor.from_value_rowids([1, 2, 3], [0, 2, 1])", "InvalidArgumentError"),
    ("tf.RaggedTensor.from_tensor([[1, 2]], lengths=[1], padding=0)", "ValueError"),
    ("tf.ragged.constant([['one', 'two'], [3, 4]])", "ValueError"),
    ("tf.ragged.constant([1, [2, 3]])", "ValueError"),
    ("tf.ragged.constant([[1, 2], [3]]) + tf.ragged.constant([[1], [2, 3]])",
     "InvalidArgumentError"),
    ("tf.ragged.constant([[1, 2], [3]])[:, 0]", "ValueError"),
    ("tf.ragged.range(1, 5, 0)", "InvalidArgumentError"),
    ("tf.RaggedTensor.from_row_lengths([1, 2, 3], [2, -1, 2])", "InvalidArgumentError"),
    ("tf.RaggedTensor.from_value_rowids([1, 2], [0, 1], nrows=1)", "ValueError"),
    ("tf.RaggedTensor.from_uniform_row_length([1, 2, 3], 2)", "ValueError"),
    ("tf.RaggedTensor.from_row_splits([1, 2, 3], [[0, 3]])", "ValueError"),
    ("tf.RaggedTensor.from_row_splits([1, 2, 3], [0.0, 3.0])", "ValueError"),
    ("tf.ragged.constant([[1], [2]], ragged_rank=3)", "ValueError"),
    ("tf.ragged.constant([[1, 2], [3]]).to_tensor(shape=[2])", "InvalidArgumentError"),
    ("tf.concat([tf.ragged.constant([[1, 2], [3]]), tf.ragged.constant([[1]])], axis=1)",
     "InvalidArgumentError"),
    ("tf.reduce_sum(tf.ragged.constant([[1, 2], [3]]), axis=5)", "ValueError"),
    ("tf.ragged.constant([[1, 2], [3]])[5]", "IndexError"),
    ("tf.ragged.constant([[1, 2], [3]])[0, 0, 0]", "InvalidArgumentError"),
    ("tf.gather(tf.ragged.constant([[1, 2], [3]]), [2])", "InvalidArgumentError"),
    ("tf.ragged.map_flat_values(tf.add, tf.ragged.constant([[1, 2], [3]]), "
     "tf.ragged.constant([[1], [3]]))", "ValueError"),
    ("tf.ragged.constant([[1, 2], [3]]) + tf.constant([[1, 2, 3]])", "InvalidArgumentError"),
    ("tf.RaggedTensor.from_tensor([[1, 2]], ragged_rank=0)", "ValueError"),
    ("tf.RaggedTensor.from_tensor([1, 2])", "ValueError"),
    ("tf.ragged.boolean_mask(tf.ragged.constant([[1, 2], [3]]), [True])", "ValueError"),
])
def test_bad_input_raises_tensorflows_error_type(tf_oracle, expr, error):
    from tf_oracle import OracleError
    with pytest.raises(OracleError) as tf_err:
        tf_oracle.run(f"result = {expr}")
    assert tf_err.value.tf_type == error
    expected = {"InvalidArgumentError": pg.errors.InvalidArgumentError,
                "ValueError": ValueError, "IndexError": IndexError}[error]
    with pytest.raises(expected) as err:
        eval(expr, {"tf": pg, "np": np})
    if error == "ValueError":   # TensorFlow's plain ValueError, not its InvalidArgumentError
        assert not isinstance(err.value, pg.errors.InvalidArgumentError), err.value


def test_mismatched_rows_message_has_tensorflows_numbers(tf_oracle):
    expr = ("tf.ragged.constant([[1, 2, 3], [4], [5, 6]]) + "
            "tf.ragged.constant([[10, 20], [30, 40], [50]])")
    msg = tf_oracle.run(f"\ntry:\n    {expr}\nexcept Exception as e:\n    result = str(e)\n")
    with pytest.raises(pg.errors.InvalidArgumentError) as err:
        eval(expr, {"tf": pg})
    assert str(err.value).split("\n", 1)[1] == msg.split("\n", 1)[1]


def test_text_forms(tf_oracle, rng):
    a = random_ragged(rng, depth=3)
    code = ("rt = tf.ragged.constant(a)\nresult = (repr(rt), str(rt), rt.to_list(), "
            "repr(rt.shape), rt.ragged_rank, repr(rt.numpy()), repr(tf.ragged.constant(f)))")
    f = [[float(x) for x in row] for row in random_ragged(rng)]
    want = tf_oracle.run(code, a=a, f=f)
    rt = pg.ragged.constant(a)
    got = (repr(rt), str(rt), rt.to_list(), repr(rt.shape), rt.ragged_rank, repr(rt.numpy()),
           repr(pg.ragged.constant(f)))
    assert got == tuple(want)


def test_spec_repr(tf_oracle):
    code = "result = repr(tf.RaggedTensorSpec(shape=[None, None], dtype=tf.int32))"
    assert repr(pg.RaggedTensorSpec(shape=[None, None], dtype=pg.int32)) == tf_oracle.run(code)


def test_values_stay_on_the_callers_device(rng):
    a = random_ragged(rng, rows=4)
    with pg.device("MY_DEVICE:0"):
        rt = pg.ragged.constant(a)
        assert "MY_DEVICE" in rt.flat_values.device
        with pg.testing.expect_kernel("AddV2", "MY_DEVICE"):
            s = rt + 1
        with pg.testing.expect_kernel("GatherV2", "MY_DEVICE"), \
                pg.testing.expect_kernel("Max", "MY_DEVICE"):
            m = pg.reduce_max(rt, axis=1)
        with pg.testing.expect_kernel("GatherV2", "MY_DEVICE"):
            d = rt.to_tensor()
        with pg.testing.expect_kernel("GatherV2", "MY_DEVICE"):
            c = pg.concat([rt, rt], axis=1)
    assert "MY_DEVICE" in s.flat_values.device and "MY_DEVICE" in m.device
    assert "MY_DEVICE" in d.device and "MY_DEVICE" in c.flat_values.device
    assert s.to_list() == [[x + 1 for x in row] for row in a]
    assert c.to_list() == [row + row for row in a]


def test_dispatch_leaves_dense_calls_alone(rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose(pg.reduce_sum(pg.constant(x), axis=1).numpy(), x.sum(1),
                               rtol=1e-5)
    np.testing.assert_allclose(pg.concat([pg.constant(x), pg.constant(x)], 0).numpy(),
                               np.concatenate([x, x]))


def test_dynamic_ragged_shape(tf_oracle, rng):
    a = random_ragged(rng, depth=3)
    lengths = [int(n) for n in rng.integers(0, 4, size=3)]
    code = '''
rt = tf.ragged.constant(a)
s = tf.shape(rt)
def err(f):
    try:
        return repr(f())
    except ValueError as e:
        return "ValueError: " + str(e)
result = (repr(s), int(s[0]), err(lambda: s[1]), repr(s[:1]), repr(s[:2]), s.rank,
          s.num_row_partitions, s.static_lengths(),
          repr(tf.experimental.DynamicRaggedShape.from_lengths([3, tuple(lengths), 2])),
          repr(tf.experimental.RowPartition.from_row_lengths(lengths)),
          tf.zeros(s).to_list(), tf.ones(s, tf.int32).to_list(), tf.fill(s, 7).to_list(),
          tf.reshape(tf.range(tf.size(rt)), s).to_list())
'''
    want = tf_oracle.run(code, a=a, lengths=lengths)
    rt = pg.ragged.constant(a)
    s = pg.shape(rt)

    def err(f):
        try:
            return repr(f())
        except ValueError as e:
            return "ValueError: " + str(e)
    got = (repr(s), int(s[0].numpy()), err(lambda: s[1]), repr(s[:1]), repr(s[:2]), s.rank,
           s.num_row_partitions, s.static_lengths(),
           repr(pg.experimental.DynamicRaggedShape.from_lengths([3, tuple(lengths), 2])),
           repr(pg.experimental.RowPartition.from_row_lengths(lengths)),
           pg.zeros(s).to_list(), pg.ones(s, pg.int32).to_list(), pg.fill(s, 7).to_list(),
           pg.reshape(pg.range(pg.size(rt)), s).to_list())
    assert got == tuple(want)


@pytest.mark.parametrize("device", DEVICES)
def test_function_takes_and_returns_ragged_tensors(tf_oracle, rng, device):
    a = random_ragged(rng, rows=4)
    b = random_ragged(rng, rows=3)
    code = '''
@tf.function
def palindrome(x, axis):
    return tf.concat([x, tf.reverse(x, [axis])], axis)

@tf.function(input_signature=[tf.RaggedTensorSpec(shape=[None, None], dtype=tf.int32)])
def max_and_min(rt):
    return (tf.math.reduce_max(rt, axis=-1), tf.math.reduce_min(rt, axis=-1))

result = (describe(palindrome(tf.ragged.constant(a), axis=1)),
          describe(palindrome(tf.ragged.constant(b), axis=0)),
          [describe(t) for t in max_and_min(tf.ragged.constant(a))])
'''
    want = tf_oracle.run(DESCRIBE + code, a=a, b=b)

    @pg.function
    def palindrome(x, axis):
        return pg.concat([x, pg.reverse(x, [axis])], axis)

    @pg.function(input_signature=[pg.RaggedTensorSpec(shape=[None, None], dtype=pg.int32)])
    def max_and_min(rt):
        return (pg.math.reduce_max(rt, axis=-1), pg.math.reduce_min(rt, axis=-1))

    with pg.device(f"{device}:0"):
        with pg.testing.expect_kernel("ConcatV2", device):
            got = (describe(palindrome(pg.ragged.constant(a), axis=1)),
                   describe(palindrome(pg.ragged.constant(b), axis=0)),
                   [describe(t) for t in max_and_min(pg.ragged.constant(a))])
    assert_same(got[0], want[0], f"palindrome axis 1 of {a}")
    assert_same(got[1], want[1], f"palindrome axis 0 of {b}")
    for g, w in zip(got[2], want[2]):
        assert_same(g, w, f"max_and_min of {a}")
    with pytest.raises(TypeError):
        max_and_min(pg.ragged.constant([[1.5], []]))   # float32 against an int32 spec


def test_concrete_function_of_a_ragged_tensor_reuses_its_trace(rng):
    a = random_ragged(rng, rows=4)

    @pg.function
    def increment(x):
        return x + 1

    rt = pg.ragged.constant(a)
    cf = increment.get_concrete_function(rt)
    assert cf(rt).to_list() == [[v + 1 for v in row] for row in a]
    assert increment(rt).to_list() == cf(rt).to_list()
    assert increment.tracing_count == 1


def test_traced_ragged_tensor_prints_its_parts(tf_oracle, rng):
    a = random_ragged(rng, depth=3)
    code = '''
seen = []
@tf.function
def f(x):
    seen.append(str(x))
    return x
f(tf.ragged.constant(a))
result = seen[0]
'''
    want = tf_oracle.run(code, a=a)
    seen = []

    @pg.function
    def f(x):
        seen.append(str(x))
        return x
    assert f(pg.ragged.constant(a)).to_list() == pg.ragged.constant(a).to_list()
    for part in ("tf.RaggedTensor(values=", "row_splits="):
        assert seen[0].count(part) == want.count(part) > 0, (seen[0], want)


def test_get_concrete_function_of_a_ragged_spec_says_to_pass_a_value():
    @pg.function
    def grow(x):
        return x * 2.0

    spec = pg.RaggedTensorSpec(shape=[None, None], dtype=pg.float32)
    with pytest.raises(TypeError, match="argument 'x' is RaggedTensorSpec.*pass a value"):
        grow.get_concrete_function(spec)
    got = grow(pg.ragged.constant([[1.0, 4.0, 3.0], [2.0]]))
    assert got.to_list() == [[2.0, 8.0, 6.0], [4.0]]
