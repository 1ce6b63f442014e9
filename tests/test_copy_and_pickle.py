"""copy.copy, copy.deepcopy and pickle of tensors, variables, devices and the
objects that own a core resource. Tensors and variables behave as
TensorFlow's; an object that releases a core handle is never duplicated
(two owners of one handle would free it twice: libraries such as
matplotlib copy the arrays they are given)."""
from __future__ import annotations

import copy
import gc
import pickle
import subprocess
import sys

import numpy as np
import pytest

import pluggable as pg

DEVICES = ["CPU:0", "MY_DEVICE:0"]


@pytest.mark.parametrize("device", DEVICES)
def test_a_copied_tensor_is_the_tensor_and_outlives_its_copies(device, rng):
    x = rng.standard_normal((5, 3)).astype(np.float32)
    with pg.device(device):
        t = pg.constant(x) * 2.0
    copies = [copy.copy(t), copy.deepcopy(t), copy.deepcopy([t, {"k": t}])]
    assert copies[0] is t and copies[1] is t
    assert copies[2][0] is t and copies[2][1]["k"] is t
    del copies
    gc.collect()
    with pg.device(device), pg.testing.expect_kernel("Mul", device.split(":")[0]):
        y = t * 1.0
    np.testing.assert_array_equal(y.numpy(), x * 2)


def test_copies_of_device_tensors_never_free_a_handle_twice():
    """The use after free a shallow copy used to cause, in a child process
    so that a crash shows as a failed test with its output."""
    code = """if True:
        import copy, gc
        import numpy as np
        import pluggable as pg
        with pg.device("MY_DEVICE:0"):
            x = pg.constant(np.arange(201, dtype=np.float32))
            for i in range(300):
                y = x[:, None][:, 0]
                c = copy.copy(y); d = copy.deepcopy(y)
                del c, d
                gc.collect()
                v = y[i % 201]                # a fresh host index vector meets y
                assert float(v) == i % 201, (float(v), i)
        print("ok")
    """
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


def test_matplotlib_plots_device_tensors(rng):
    matplotlib = pytest.importorskip("matplotlib", reason="matplotlib draws the examples")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    y = rng.standard_normal(64).astype(np.float32)
    with pg.device("MY_DEVICE:0"):
        x = pg.linspace(-10.0, 10.0, 64)
        t = pg.constant(y) * 1.0
        fig, ax = plt.subplots()
        line, = ax.plot(x, t)
    plt.close(fig)
    np.testing.assert_allclose(line.get_xdata(), np.linspace(-10, 10, 64), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(line.get_ydata(), y)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.uint8,
                                   np.bool_, "bfloat16", np.float16])
@pytest.mark.parametrize("device", DEVICES)
def test_a_pickled_tensor_unpickles_as_its_value(device, dtype, rng):
    x = rng.standard_normal((3, 4)) * 10
    x = x.astype(pg.bfloat16.as_numpy_dtype if dtype == "bfloat16" else dtype)
    with pg.device(device):
        t = pg.identity(pg.constant(x))
    u = pickle.loads(pickle.dumps(t))
    assert isinstance(u, pg.Tensor) and u.dtype == t.dtype and u.shape == t.shape
    np.testing.assert_array_equal(u.numpy(), x)


def test_tensor_copy_and_pickle_match_tensorflow(tf_oracle, rng):
    x = rng.standard_normal((2, 3)).astype(np.float32)
    want = tf_oracle.run(
        "import copy, pickle\n"
        "t = tf.constant(x)\n"
        "result = [np.array(copy.copy(t) is t), np.array(copy.deepcopy(t) is t), "
        "pickle.loads(pickle.dumps(t)).numpy()]", x=x)
    t = pg.constant(x)
    got = [np.array(copy.copy(t) is t), np.array(copy.deepcopy(t) is t),
           pickle.loads(pickle.dumps(t)).numpy()]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("device", DEVICES)
def test_variable_copies_match_tensorflow(device, tf_oracle, rng):
    x = rng.standard_normal(4).astype(np.float32)
    new = rng.standard_normal(4).astype(np.float32)
    code = ("import copy\n"
            "v = tf.Variable(x, name='w', trainable=False)\n"
            "c = copy.copy(v); d = copy.deepcopy(v)\n"
            "d.assign(new)\n"
            "result = [np.array(c is v), np.array(d is v), v.numpy(), d.numpy(), "
            "np.array(d.name), np.array(d.trainable)]")
    want = tf_oracle.run(code, x=x, new=new)
    with pg.device(device):
        v = pg.Variable(x, name="w", trainable=False)
    c, d = copy.copy(v), copy.deepcopy(v)
    d.assign(new)
    got = [np.array(c is v), np.array(d is v), v.numpy(), d.numpy(), np.array(d.name),
           np.array(d.trainable)]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert d.device == v.device
    u = pickle.loads(pickle.dumps(v))
    assert isinstance(u, pg.Variable) and u.name == "w:0" and not u.trainable
    np.testing.assert_array_equal(u.numpy(), x)
    u.assign_add(np.ones(4, np.float32))
    np.testing.assert_array_equal(v.numpy(), x)   # a new variable, not v


def test_a_device_is_one_object():
    from pluggable.runtime import placement
    dev = placement.get_device("MY_DEVICE:0")
    assert copy.copy(dev) is dev and copy.deepcopy(dev) is dev
    assert copy.deepcopy({"d": placement.CPU})["d"] is placement.CPU


def test_core_resource_owners_refuse_copies_and_pickles():
    from pluggable.runtime import placement
    dev = placement.get_device("MY_DEVICE:0")
    owners = [dev.create_stream(), dev.create_event(), dev.create_timer(), dev.allocate(64)]
    for obj in owners:
        name = type(obj).__name__
        for what, fn in [("copy.copy", copy.copy), ("copy.deepcopy", copy.deepcopy),
                         ("pickling", pickle.dumps)]:
            with pytest.raises(TypeError, match=f"{what} of a {name}: it owns a resource"):
                fn(obj)
    dev.synchronize()


def test_symbolic_tensors_and_handles_refuse_pickling():
    seen = []

    @pg.function
    def f(x):
        with pytest.raises(TypeError, match="SymbolicTensor cannot be pickled"):
            pickle.dumps(x)
        seen.append(copy.copy(x) is x)
        return x * 2.0
    np.testing.assert_array_equal(f(pg.constant([1.0, 2.0])).numpy(), [2.0, 4.0])
    assert seen == [True]
    v = pg.Variable([1.0])
    with pytest.raises(TypeError, match="resource tensor"):
        pickle.dumps(v.handle)
