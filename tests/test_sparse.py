"""``pg.SparseTensor`` and ``pg.sparse`` against TensorFlow's ``tf.sparse``
on fresh random sparse tensors: values, dtypes, indices order and printing;
the dense work runs on the device in scope (CPU and MY_DEVICE)."""
from __future__ import annotations

import numpy as np
import pytest

import pluggable as pg

DESCRIBE = r'''
def describe(x):
    if isinstance(x, tf.SparseTensor):
        return ("sparse", x.indices.numpy().tolist(), x.values.numpy().tolist(),
                x.dense_shape.numpy().tolist(), x.dtype.name)
    if isinstance(x, tf.RaggedTensor):
        return ("ragged", x.to_list(), x.dtype.name)
    x = tf.convert_to_tensor(x)
    return ("dense", x.numpy().tolist(), x.dtype.name)
'''
_ns: dict = {"tf": pg, "np": np}
exec(DESCRIBE, _ns)
describe = _ns["describe"]

DEVICES = ["CPU", "MY_DEVICE"]


def assert_same(got, want, what):
    """Kinds, indices, shapes and dtypes equal; values equal to float32
    rounding (a sum's order of terms may differ from TensorFlow's)."""
    assert got[0] == want[0] and got[-1] == want[-1], (what, got, want)
    if got[0] == "ragged":
        assert got == want, (what, got, want)
        return
    if got[0] == "sparse":
        assert got[1] == want[1] and got[3] == want[3], (what, got, want)
    np.testing.assert_allclose(np.asarray(got[-2], dtype=np.float64),
                               np.asarray(want[-2], dtype=np.float64),
                               rtol=1e-5, atol=1e-6, err_msg=what)


def device_or_skip(device):
    if device not in {d.device_type for d in pg.list_physical_devices()}:
        pytest.skip(f"no {device} device: the host plugin is not built "
                    "(python3 setup.py build_ext --inplace builds it)")


def random_sparse(rng, shape, dtype=np.float32):
    dense = rng.standard_normal(shape).astype(dtype) * (rng.random(shape) < 0.4)
    if dense.dtype.kind == "i":
        dense = (dense * 5).astype(dtype)
    return dense


EXPRESSIONS = [
    ("UnsortedSegmentSum", "tf.sparse.to_dense(tf.sparse.from_dense(a))"),
    ("UnsortedSegmentSum", "tf.sparse.to_dense(tf.sparse.from_dense(a), default_value=-1.0)"),
    ("GatherNd", "tf.sparse.from_dense(a)"),
    ("UnsortedSegmentSum", "tf.sparse.add(tf.sparse.from_dense(a), tf.sparse.from_dense(b))"),
    ("AddV2", "tf.sparse.add(tf.sparse.from_dense(a), b)"),
    ("Sum", "tf.sparse.reduce_sum(tf.sparse.from_dense(a), axis=1)"),
    ("Sum", "tf.sparse.reduce_sum(tf.sparse.from_dense(a), axis=0, keepdims=True)"),
    ("Sum", "tf.sparse.reduce_sum(tf.sparse.from_dense(a))"),
    ("MatMul", "tf.sparse.sparse_dense_matmul(tf.sparse.from_dense(a), m)"),
    ("MatMul", "tf.sparse.sparse_dense_matmul(tf.sparse.from_dense(a), n, "
               "adjoint_a=True, adjoint_b=True)"),
    ("ConcatV2", "tf.sparse.concat(axis=1, sp_inputs=[tf.sparse.from_dense(a), "
                 "tf.sparse.from_dense(b)])"),
    ("ConcatV2", "tf.sparse.concat(0, [tf.sparse.from_dense(a), tf.sparse.from_dense(b)])"),
    ("GatherV2", "tf.sparse.reorder(tf.SparseTensor(tf.sparse.from_dense(a).indices[::-1], "
                 "tf.sparse.from_dense(a).values[::-1], a.shape))"),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op,expr", EXPRESSIONS)
def test_matches_tensorflow(device, op, expr, tf_oracle, rng):
    device_or_skip(device)
    a, b = random_sparse(rng, (4, 5)), random_sparse(rng, (4, 5))
    m = rng.standard_normal((5, 3)).astype(np.float32)
    n = rng.standard_normal((3, 4)).astype(np.float32)
    inputs = dict(a=a, b=b, m=m, n=n)
    want = tf_oracle.run(DESCRIBE + f"result = describe({expr})", **inputs)
    with pg.device(f"{device}:0"), pg.testing.expect_kernel(op, device):
        got = describe(eval(expr, {"tf": pg, "np": np}, dict(inputs)))
    assert_same(got, want, expr)


def test_printing_and_properties_match_tensorflow(tf_oracle, rng):
    idx = np.unique(rng.integers(0, 4, (3, 2)), axis=0).astype(np.int64)
    vals = rng.integers(-9, 10, len(idx)).astype(np.int32)
    code = "st = tf.SparseTensor(indices=i, values=v, dense_shape=[4, 4])\n" \
           "result = [str(st), repr(st), str(st.shape), st.dtype.name]"
    want = tf_oracle.run(code, i=idx, v=vals)
    st = pg.SparseTensor(indices=idx, values=vals, dense_shape=[4, 4])
    assert [str(st), repr(st), str(st.shape), st.dtype.name] == want


def test_ragged_to_sparse_and_back(tf_oracle, rng):
    rows = [[str(x) for x in rng.integers(0, 99, rng.integers(0, 4))] for _ in range(4)]
    rows[1].append("last")   # at least one value
    code = "rt = tf.ragged.constant(rows)\nresult = [describe(rt.to_sparse()), " \
           "describe(tf.RaggedTensor.from_sparse(rt.to_sparse()))]"
    want = tf_oracle.run(DESCRIBE + code, rows=rows)
    rt = pg.ragged.constant(rows)
    assert [describe(rt.to_sparse()), describe(pg.RaggedTensor.from_sparse(rt.to_sparse()))] \
        == want
    nested = pg.ragged.constant([[[1, 2], [3]], [], [[4]]])
    want = tf_oracle.run(DESCRIBE + "result = describe(tf.ragged.constant("
                         "[[[1, 2], [3]], [], [[4]]]).to_sparse())")
    assert describe(nested.to_sparse()) == want


@pytest.mark.parametrize("expr", [
    "tf.sparse.to_dense(tf.SparseTensor([[0, 0], [0, 0]], [1, 2], [2, 2]))",
    "tf.sparse.to_dense(tf.SparseTensor([[0, 5]], [1], [2, 2]))",
    "tf.sparse.to_dense(tf.SparseTensor([[1, 0], [0, 0]], [1, 2], [2, 2]))",
    "tf.sparse.add(tf.SparseTensor([[0, 0]], [1], [2, 2]), tf.SparseTensor([[0, 0]], [1], [3, 2]))",
])
def test_bad_indices_are_tensorflows_errors(expr, tf_oracle):
    from tf_oracle import OracleError
    with pytest.raises(OracleError) as tf_error:
        tf_oracle.run(f"result = {expr}")
    with pytest.raises(pg.errors.OpError) as ours:
        eval(expr, {"tf": pg})
    assert type(ours.value).__name__ == tf_error.value.tf_type, (ours.value, tf_error.value)


def test_not_a_sparse_tensor_is_a_type_error():
    with pytest.raises(TypeError, match="SparseTensor"):
        pg.sparse.to_dense(pg.constant([1, 2]))
