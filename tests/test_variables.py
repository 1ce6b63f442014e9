"""pg.Variable: resource variables on every device, their ops (read, assign,
assign_add/sub, run by the framework or by the plugin through
kernels_experimental.h), copy on write, placement and bad input."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import pluggable as pg
from pluggable.framework import registry

R = pg.raw_ops
DEVICES = ["CPU:0", "MY_DEVICE:0", "GPU:0"]


@pytest.fixture(params=DEVICES)
def device(request):
    name = request.param
    if name.startswith("GPU") and not pg.list_physical_devices("GPU"):
        pytest.skip("no GPU device present")
    return name


def dev_type(device: str) -> str:
    return device.split(":")[0]


def kernel_device(op: str, device: str) -> str:
    """The device type whose kernel of `op` should run on `device`."""
    t = dev_type(device)
    return t if t == "CPU" or registry.KERNELS.get((op, t)) else registry.DEFAULT_DEVICE


@pytest.mark.parametrize("dt", [np.float32, np.float64, np.int32, np.float16])
def test_create_read_and_properties(device, rng, dt):
    a = (rng.standard_normal((3, 4)) * 10).astype(dt)
    with pg.device(device):
        with pg.testing.expect_kernel("AssignVariableOp", kernel_device("AssignVariableOp", device)):
            v = pg.Variable(a, name="weights")
    assert v.shape == (3, 4) and v.dtype is pg.as_dtype(dt) and v.name == "weights:0"
    assert v.trainable and v.device.endswith(device) and v.ndim == 2
    assert v.handle.dtype is pg.dtypes.resource and v.handle.shape == ()
    with pg.testing.expect_kernel("ReadVariableOp", kernel_device("ReadVariableOp", device)):
        value = v.read_value()
    assert value.device.endswith(device)
    np.testing.assert_array_equal(value.numpy(), a)
    np.testing.assert_array_equal(np.asarray(v), a)
    assert "weights:0" in repr(v)


def test_initial_value_forms_and_placement(rng):
    a = rng.standard_normal(3).astype(np.float32)
    assert pg.Variable(lambda: a).dtype is pg.float32
    assert pg.Variable([1.0, 2.0]).dtype is pg.float32          # TensorFlow's default
    assert pg.Variable([1.0, 2.0], dtype=pg.float64).dtype is pg.float64
    with pg.device("MY_DEVICE:0"):
        t = pg.constant(a)
    v = pg.Variable(t)                                           # follows a device tensor
    assert v.device.endswith("MY_DEVICE:0")
    with pg.device("CPU:0"):
        w = pg.Variable(t)                                       # the scope wins
    assert w.device.endswith("CPU:0")
    np.testing.assert_array_equal(pg.Variable(w).numpy(), a)


def test_assign_assign_add_assign_sub(device, rng):
    a, b, c = (rng.standard_normal((2, 3)) for _ in range(3))
    with pg.device(device):
        v = pg.Variable(a)
    u = v.assign(b)  # TensorFlow's _UnreadVariable: the same state, another name
    assert u is not v and u.name == "UnreadVariable" and u.shape == v.shape
    np.testing.assert_array_equal(v.numpy(), b)
    np.testing.assert_array_equal(u.numpy(), b)
    u.assign(a)
    np.testing.assert_array_equal(v.numpy(), a)
    v.assign(b)
    with pg.testing.expect_kernel("AssignAddVariableOp", dev_type(device)):
        v.assign_add(c)
    np.testing.assert_allclose(v.numpy(), b + c, rtol=1e-15)
    with pg.testing.expect_kernel("AssignSubVariableOp", dev_type(device)):
        assert v.assign_sub(pg.constant(a), read_value=False) is None
    np.testing.assert_allclose(v.numpy(), b + c - a, rtol=1e-14)


@pytest.mark.parametrize("dt", [np.float16, pg.bfloat16.as_numpy_dtype, np.int32, np.int64])
def test_assign_add_other_dtypes(device, rng, dt):
    a = (rng.standard_normal(5) * 8).astype(dt)
    b = (rng.standard_normal(5) * 8).astype(dt)
    with pg.device(device):
        v = pg.Variable(a)
        v.assign_add(b)
    expect = (a.astype(np.float32) + b.astype(np.float32)).astype(dt)
    np.testing.assert_array_equal(v.numpy(), expect)


def test_copy_on_write_keeps_earlier_reads_and_assigned_values(device, rng):
    a, b = rng.standard_normal(4), rng.standard_normal(4)
    with pg.device(device):
        v = pg.Variable(a)
        before = v.value()                   # shares the variable's buffer
        v.assign_add(b)                      # must not change `before`
        np.testing.assert_array_equal(before.numpy(), a)
        source = pg.constant(b)
        v.assign(source)                     # the variable now shares `source`
        v.assign_sub(pg.constant(a))
        np.testing.assert_array_equal(source.numpy(), b)
        np.testing.assert_allclose(v.numpy(), b - a, rtol=1e-14)


def test_variable_stands_for_its_value_in_ops(device, rng):
    a = rng.standard_normal((3, 2)).astype(np.float32)
    x = rng.standard_normal((4, 3)).astype(np.float32)
    with pg.device(device):
        v = pg.Variable(a)
        # float32 products of 3 terms: within a few ulps of the terms' sum of
        # magnitudes (an output near 0 has no relative precision to speak of)
        bound = np.abs(x) @ np.abs(a)
        np.testing.assert_allclose(pg.matmul(x, v).numpy(), x @ a, rtol=1e-5,
                                   atol=5 * float(np.finfo(np.float32).eps) * bound.max(),
                                   err_msg=rng.seed_text)
        np.testing.assert_allclose((v + 1.0).numpy(), a + 1, rtol=1e-6)
        np.testing.assert_allclose((2.0 * v).numpy(), 2 * a, rtol=1e-6)
        np.testing.assert_allclose((-v).numpy(), -a)
        np.testing.assert_allclose(pg.convert_to_tensor(v).numpy(), a)
    with pytest.raises(pg.errors.InvalidArgumentError):
        pg.convert_to_tensor(v, pg.float64)


def test_ops_on_a_variable_run_on_its_device(rng):
    with pg.device("MY_DEVICE:0"):
        v = pg.Variable(rng.standard_normal(3))
    with pg.device("CPU:0"):                 # the scope does not move a resource op
        with pg.testing.expect_kernel("AssignAddVariableOp", "MY_DEVICE"):
            R.AssignAddVariableOp(resource=v.handle, value=np.ones(3))
        value = R.ReadVariableOp(resource=v.handle, dtype=pg.float64)
    assert value.device.endswith("MY_DEVICE:0")


def test_wrong_shape_or_dtype_is_a_typed_error_and_changes_nothing(device, rng):
    a = rng.standard_normal((2, 3)).astype(np.float32)
    with pg.device(device):
        v = pg.Variable(a, name="w")
        # assign checks the shape in Python and raises ValueError, as TensorFlow does
        with pytest.raises(ValueError, match=r"variable ' w:0': Shape mismatch.*\(2, 3\).*"
                                             r"\(3, 2\) are incompatible"):
            v.assign(np.ones((3, 2), np.float32))
        for fn, op in ((v.assign, "AssignVariableOp"), (v.assign_add, "AssignAddVariableOp"),
                       (v.assign_sub, "AssignSubVariableOp")):
            if fn != v.assign:
                with pytest.raises(pg.errors.InvalidArgumentError,
                                   match=r"\[3, 2\].*\[2, 3\]") as e:
                    fn(np.ones((3, 2), np.float32))
                assert e.value.op == op
            with pytest.raises(pg.errors.InvalidArgumentError, match="float64") as e:
                fn(pg.constant(np.ones((2, 3))))
            assert e.value.op == op
    np.testing.assert_array_equal(v.numpy(), a)


def test_raw_update_with_wrong_shape_is_refused_by_the_kernel(device, rng):
    """The checks of TF_AssignUpdateVariable (plugin) and of the CPU kernel."""
    a = rng.standard_normal(3)
    with pg.device(device):
        v = pg.Variable(a)
        with pytest.raises(pg.errors.InvalidArgumentError, match="shape"):
            R.AssignAddVariableOp(resource=v.handle, value=np.ones(4))
            pg.synchronize()
    np.testing.assert_array_equal(v.numpy(), a)


def test_read_with_the_wrong_dtype_is_refused(device):
    with pg.device(device):
        v = pg.Variable(np.ones(2, np.float32))
        with pytest.raises(pg.errors.InvalidArgumentError):
            R.ReadVariableOp(resource=v.handle, dtype=pg.float64).numpy()


def test_concurrent_updates_are_not_lost(device):
    with pg.device(device):
        v = pg.Variable(np.zeros(64))
    ones = np.ones(64)

    def work():
        with pg.device(device):
            for _ in range(50):
                v.assign_add(ones)
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    np.testing.assert_array_equal(v.numpy(), np.full(64, 200.0))


def test_variable_against_tensorflow(rng, tf_oracle):
    a, b, c = (rng.standard_normal((2, 2)).astype(np.float32) for _ in range(3))
    ref = tf_oracle.run(
        "v = tf.Variable(a, name='v'); v.assign_add(b); v.assign_sub(c)\n"
        "result = (v.numpy(), v.name, tuple(v.shape), v.trainable)", a=a, b=b, c=c)
    with pg.device("MY_DEVICE:0"):
        v = pg.Variable(a, name="v")
        v.assign_add(b)
        v.assign_sub(c)
    np.testing.assert_array_equal(v.numpy(), ref[0])
    assert (v.name, v.shape, v.trainable) == ref[1:]


def test_the_core_counts_every_write(device, rng):
    """pg_variable_writes: an assignment and each in-place update (by the
    framework, or by the plugin's training kernel through
    TF_GetInputTensorFromVariable) count one; reads count none; a tensor
    that is not a resource handle gives 0."""
    from pluggable._core import ffi, lib
    v0 = rng.standard_normal(4).astype(np.float32)
    with pg.device(device):
        v = pg.Variable(v0)
        h = v.handle._h
        n = lib.pg_variable_writes(h)
        assert n >= 1                                  # the initial value
        v.numpy()
        R.ReadVariableOp(resource=v.handle, dtype=pg.float32)
        assert lib.pg_variable_writes(h) == n
        v.assign(v0 * 2)
        assert lib.pg_variable_writes(h) == n + 1
        v.assign_add(v0)
        assert lib.pg_variable_writes(h) == n + 2
        R.ResourceApplyGradientDescent(var=v.handle, alpha=pg.constant(np.float32(0.5)),
                                       delta=pg.constant(v0))
        assert lib.pg_variable_writes(h) == n + 3
        x = pg.constant(v0)
    np.testing.assert_allclose(v.numpy(), 2.5 * v0, rtol=1e-6)
    assert lib.pg_variable_writes(x._h if x._h is not None else ffi.NULL) == 0
    assert lib.pg_variable_writes(ffi.NULL) == 0
