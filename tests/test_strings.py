"""``pg.strings`` against TensorFlow's ``tf.strings`` on fresh random text:
the same values, dtypes and ragged partitions, the same error classes, and
the string kernels (CPU: strings live on the host) are the ones that ran,
also under a MY_DEVICE scope (soft placement keeps string ops on the CPU)."""
from __future__ import annotations

import numpy as np
import pytest

import pluggable as pg

DESCRIBE = r'''
def describe(x):
    if isinstance(x, (list, tuple)):
        return [describe(v) for v in x]
    if isinstance(x, tf.RaggedTensor):
        return ("ragged", x.to_list(), x.dtype.name)
    x = tf.convert_to_tensor(x)
    v = x.numpy()
    return ("dense", v.tolist() if hasattr(v, "tolist") else v, x.dtype.name)
'''
_ns: dict = {"pg": pg}
exec(DESCRIBE.replace("tf.", "pg."), _ns)
describe = _ns["describe"]

ALPHABET = [*"abcdefghij", " ", " ", "-", "é", "ア", "🦆", "1", "0"]


def words(rng, n, max_len=8):
    """`n` random UTF-8 strings of letters, spaces, digits, accents and emoji."""
    return [b"".join(ALPHABET[i].encode() for i in rng.integers(0, len(ALPHABET),
                                                                 rng.integers(0, max_len)))
            for _ in range(n)]


def compare(tf_oracle, expr, **inputs):
    want = tf_oracle.run(DESCRIBE + f"result = describe({expr})", **inputs)
    with pg.device("CPU:0"):
        got = describe(eval(expr, {"tf": pg, "np": np}, dict(inputs)))
    assert got == want, (expr, got, want)


EXPRESSIONS = [
    ("StringLength", "tf.strings.length(x)"),
    ("StringLength", "tf.strings.length(x, unit='UTF8_CHAR')"),
    ("StringSplitV2", "tf.strings.split(x)"),
    ("StringSplitV2", "tf.strings.split(x, sep=' ')"),
    ("StringSplitV2", "tf.strings.split(x, sep='a', maxsplit=1)"),
    ("StringSplitV2", "tf.strings.split(x[0])"),
    ("StringSplitV2", "tf.strings.split(tf.reshape(x, [2, -1]))"),
    ("StringJoin", "tf.strings.join([x, x[::-1], 'z'], separator='+')"),
    ("Substr", "tf.strings.substr(x, 0, 3)"),
    ("Substr", "tf.strings.substr(x, 0, 2, unit='UTF8_CHAR')"),
    ("StringUpper", "tf.strings.upper(x)"),
    ("StringLower", "tf.strings.lower(tf.strings.upper(x))"),
    ("StringUpper", "tf.strings.upper(x, encoding='utf-8')"),
    ("StaticRegexReplace", "tf.strings.regex_replace(x, '[a-e]+', '<\\\\0>')"),
    ("RegexReplace", "tf.strings.regex_replace(x, tf.constant('a'), tf.constant('_'), "
                     "replace_global=False)"),
    ("ReduceJoin", "tf.strings.reduce_join(x)"),
    ("ReduceJoin", "tf.strings.reduce_join(tf.reshape(x, [2, -1]), axis=1, separator=',')"),
    ("ReduceJoin", "tf.strings.reduce_join(tf.reshape(x, [2, -1]), axis=0, keepdims=True)"),
    ("ReduceJoin", "tf.strings.reduce_join(tf.reshape(x, [2, 3]), axis=[0, 1])"),
    ("ReduceJoin", "tf.strings.reduce_join(tf.reshape(x, [2, 3]), separator=',')"),
    ("ReduceJoin", "tf.strings.reduce_join(tf.reshape(x, [2, 3]), axis=[1, 0], separator='.')"),
    ("UnicodeDecode", "tf.strings.unicode_decode(x, 'UTF-8')"),
    ("UnicodeDecode", "tf.strings.unicode_decode(x[0], 'UTF-8')"),
    ("UnicodeDecodeWithOffsets", "tf.strings.unicode_decode_with_offsets(x, 'UTF-8')"),
    ("UnicodeDecodeWithOffsets", "tf.strings.unicode_split(x, 'UTF-8')"),
    ("UnicodeEncode", "tf.strings.unicode_encode(tf.strings.unicode_decode(x, 'UTF-8'), "
                      "'UTF-8')"),
    ("UnicodeEncode", "tf.strings.unicode_encode(tf.strings.unicode_decode(x, 'UTF-8'), "
                      "'UTF-16-BE')"),
    ("UnicodeTranscode", "tf.strings.unicode_transcode(x, 'UTF-8', 'UTF-32-BE')"),
    ("Substr", "tf.strings.bytes_split(x)"),
    ("StringToHashBucketFast", "tf.strings.to_hash_bucket_fast(x, 1000)"),
    ("StringToHashBucketFast", "tf.strings.to_hash_bucket_fast(tf.strings.split(x), 77)"),
    ("Substr", "tf.strings.substr(tf.strings.split(x), 0, 2)"),
    ("Fill", "tf.fill([2, 3], x[0])"),
]


@pytest.mark.parametrize("op,expr", EXPRESSIONS)
def test_matches_tensorflow(op, expr, tf_oracle, rng):
    x = np.array(words(rng, 6), object)
    want = tf_oracle.run(DESCRIBE + f"x = tf.constant(x)\nresult = describe({expr})", x=x)
    with pg.device("CPU:0"), pg.testing.expect_kernel(op, "CPU"):
        got = describe(eval(expr, {"tf": pg, "np": np}, {"x": pg.constant(x)}))
    assert got == want, (expr, got, want)


def test_numbers_to_and_from_text(tf_oracle, rng):
    f = rng.uniform(-1e3, 1e3, 5).astype(np.float32)
    i = rng.integers(-10**6, 10**6, 5).astype(np.int64)
    for expr in ("tf.strings.as_string(f)", "tf.strings.as_string(f, precision=2)",
                 "tf.strings.as_string(f, scientific=True)", "tf.strings.as_string(i)",
                 "tf.strings.as_string(i, width=9, fill='0')", "tf.strings.as_string(f > 0)",
                 "tf.strings.to_number(tf.strings.as_string(i), tf.int64)",
                 "tf.strings.to_number(tf.strings.as_string(f, precision=3))",
                 "tf.strings.format('f={} i={}', [f, i])",
                 "tf.strings.format('{}', tf.reshape(i, [5, 1]), summarize=1)"):
        compare(tf_oracle, expr, f=f, i=i)


def test_fingerprint_matches_tensorflow_for_every_length(tf_oracle, rng):
    # FarmHash takes a different path below 16, 32, 64 bytes and per 64-byte block
    text = np.array([bytes(rng.integers(0, 256, n).astype(np.uint8)) for n in range(0, 200)],
                    object)
    want = tf_oracle.run("result = tf.strings.to_hash_bucket_fast(x, 2**62 - 57).numpy()", x=text)
    got = pg.strings.to_hash_bucket_fast(text, 2**62 - 57).numpy()
    np.testing.assert_array_equal(got, want)


def test_ragged_inputs_keep_their_rows(rng):
    rt = pg.ragged.constant([[w.decode() for w in words(rng, 3)], [],
                             [w.decode() for w in words(rng, 2)]])
    out = pg.strings.upper(rt)
    assert isinstance(out, pg.RaggedTensor)
    np.testing.assert_array_equal(out.row_splits.numpy(), rt.row_splits.numpy())
    assert out.flat_values.numpy().tolist() == [w.upper() for w in rt.flat_values.numpy()]
    joined = pg.strings.join([rt, rt], separator="|")
    assert joined.to_list() == [[w + b"|" + w for w in row] for row in rt.to_list()]


@pytest.mark.parametrize("expr", [
    "tf.strings.length(tf.constant([1, 2]))",
    "tf.strings.upper(tf.constant([1.5]))",
    "tf.strings.to_number(tf.constant(['12', 'abc']))",
    "tf.strings.to_number(tf.constant(['99999999999']), tf.int32)",
    "tf.strings.substr(tf.constant('abc'), 5, 1)",
    "tf.strings.unicode_decode(tf.constant(b'ok\\xff'), 'UTF-8', errors='strict')",
    "tf.strings.reduce_join(tf.constant([['a']]), axis=2)",
])
def test_errors_have_tensorflows_class(expr, tf_oracle):
    from tf_oracle import OracleError
    with pytest.raises(OracleError) as tf_error:
        tf_oracle.run(f"result = {expr}")
    with pytest.raises(pg.errors.OpError) as ours:
        eval(expr, {"tf": pg})
    assert type(ours.value).__name__ == tf_error.value.tf_type, (ours.value, tf_error.value)


def test_string_ops_stay_on_the_cpu_under_a_device_scope(rng):
    if "MY_DEVICE" not in {d.device_type for d in pg.list_physical_devices()}:
        pytest.skip("the MY_DEVICE host plugin is not built (python3 setup.py build_ext "
                    "--inplace builds it)")
    x = words(rng, 5)
    with pg.device("MY_DEVICE:0"), pg.testing.expect_kernel("StringLength", "CPU"):
        n = pg.strings.length(x)
        total = pg.reduce_sum(n)          # a number again: MY_DEVICE may take it
    assert n.numpy().tolist() == [len(w) for w in x]
    assert int(total.numpy()) == sum(len(w) for w in x)


@pytest.mark.parametrize("dtype,little", [("uint8", True), ("int16", False), ("float32", True),
                                          ("int64", True), ("float64", False)])
def test_decode_raw_matches_tensorflow(dtype, little, tf_oracle, rng):
    raw = np.array([bytes(rng.integers(0, 256, 16).astype(np.uint8)) for _ in range(3)], object)
    want = tf_oracle.run(f"result = tf.io.decode_raw(x, tf.{dtype}, little_endian={little})"
                         ".numpy()", x=raw)
    with pg.testing.expect_kernel("DecodeRaw", "CPU"):
        got = pg.io.decode_raw(raw, getattr(pg, dtype), little_endian=little).numpy()
    np.testing.assert_array_equal(got, want)
    assert got.dtype == want.dtype
