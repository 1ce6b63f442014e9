"""Device names, scopes (nesting, threads), automatic, soft and strict
placement, and the placement log."""
import threading

import numpy as np
import pytest

import pluggable as pg
from pluggable.runtime import dispatch

FULL = "/job:localhost/replica:0/task:0/device:MY_DEVICE:0"


@pytest.fixture
def strict():
    pg.config.set_soft_device_placement(False)
    yield
    pg.config.set_soft_device_placement(True)


@pytest.fixture
def placement_log():
    pg.config.set_log_device_placement(True)
    pg.config.placement_log(clear=True)
    yield
    pg.config.set_log_device_placement(False)


def test_list_physical_devices_cpu_first_with_details():
    devs = pg.list_physical_devices()
    assert devs[0] == pg.PhysicalDevice("/physical_device:CPU:0", "CPU")
    assert pg.PhysicalDevice("/physical_device:MY_DEVICE:0", "MY_DEVICE") in devs
    assert pg.list_physical_devices("my_device") == [
        pg.PhysicalDevice("/physical_device:MY_DEVICE:0", "MY_DEVICE")]
    details = pg.config.get_device_details(devs[devs.index(
        pg.PhysicalDevice("/physical_device:MY_DEVICE:0", "MY_DEVICE"))])
    assert details["platform_name"] == "MY_PLATFORM"
    assert details["hardware_name"] and details["vendor"]
    assert details["plugin"].endswith("libpluggable_my_device.so")
    assert 0 < details["memory_free"] <= details["memory_total"]
    assert pg.config.get_device_details("CPU:0")["device_type"] == "CPU"
    d = pg.get_device("MY_DEVICE:0")
    assert d.platform_name == "MY_PLATFORM"
    assert d.hardware_name and d.vendor
    free, total = d.memory_usage()
    assert 0 <= free <= total


@pytest.mark.parametrize("name", ["MY_DEVICE:0", "my_device:0", "/MY_DEVICE:0",
                                  "/device:MY_DEVICE:0", FULL, "MY_DEVICE"])
def test_scope_accepts_every_spelling(name):
    x = np.random.default_rng().standard_normal(7).astype(np.float32)
    with pg.device(name):
        with pg.testing.expect_kernel("Relu", "MY_DEVICE"):
            y = pg.nn.relu(x)
    assert y.device == FULL
    np.testing.assert_array_equal(y.numpy(), np.maximum(x, 0))


@pytest.mark.parametrize("name", ["NOPE:0", "XPU:3"])
def test_unknown_device_lists_available(name):
    with pytest.raises(pg.errors.InvalidArgumentError) as info:
        pg.device(name)
    assert "CPU:0" in str(info.value) and "MY_DEVICE:0" in str(info.value)


@pytest.mark.parametrize("name,where", [("MY_DEVICE:7", "MY_DEVICE"), ("CPU:3", "CPU")])
def test_an_ordinal_beyond_the_devices_soft_places_on_device_0(name, where, rng):
    """TensorFlow with soft placement on runs "CPU:5" on CPU:0; with it off,
    the name is refused, listing the available devices."""
    x = rng.standard_normal(7).astype(np.float32)
    with pg.device(name), pg.testing.expect_kernel("Relu", where):
        y = pg.nn.relu(x)
    assert y.device.endswith(f"device:{where}:0")
    np.testing.assert_array_equal(y.numpy(), np.maximum(x, 0))
    pg.config.set_soft_device_placement(False)
    try:
        with pytest.raises(pg.errors.InvalidArgumentError, match="out of range") as info:
            pg.device(name)
        assert "CPU:0" in str(info.value) and "MY_DEVICE:0" in str(info.value)
    finally:
        pg.config.set_soft_device_placement(True)


def test_bad_device_name():
    with pytest.raises(pg.errors.InvalidArgumentError, match="cannot parse"):
        pg.device("MY_DEVICE:zero")
    with pytest.raises(TypeError):
        pg.device(3)


def test_scopes_nest_and_restore():
    x = np.ones(3, np.float32)
    with pg.device("MY_DEVICE:0"):
        with pg.device("CPU:0"):
            assert pg.nn.relu(x).device.endswith("CPU:0")
        assert pg.nn.relu(x).device == FULL
        with pg.device(None):
            assert pg.placement.current() is None
    assert pg.placement.current() is None


def test_scope_is_per_thread():
    seen = {}
    inside = threading.Event()
    done = threading.Event()

    def other():
        inside.wait()
        seen["other"] = pg.placement.current()
        seen["tensor"] = pg.constant([1.0]).device
        done.set()

    t = threading.Thread(target=other)
    t.start()
    with pg.device("MY_DEVICE:0"):
        inside.set()
        done.wait(10)
        mine = pg.placement.current()
    t.join()
    assert mine is pg.get_device("MY_DEVICE:0")
    assert seen["other"] is None
    assert seen["tensor"].endswith("CPU:0")


def test_threads_running_ops_concurrently():
    rng = np.random.default_rng()
    data = [rng.standard_normal((64, 64)).astype(np.float32) for _ in range(4)]
    results = [None] * 4

    def work(i):
        with pg.device("MY_DEVICE:0"):
            y = pg.constant(data[i])
            for _ in range(20):
                y = pg.nn.relu(y) + 1.0
            results[i] = y.numpy()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(4):
        ref = data[i]
        for _ in range(20):
            ref = np.maximum(ref, 0) + 1.0
        np.testing.assert_allclose(results[i], ref, rtol=1e-6)


def test_automatic_placement_prefers_plugin_device():
    # The first plugin device (in listing order) with a kernel takes the op.
    first = next(d for d in pg.placement.all_devices() if isinstance(d, pg.Device)
                 and pg.registry.find_kernel("Exp", d.device_type, {"T": pg.float32}))
    x = np.random.default_rng().standard_normal(5).astype(np.float32)
    with pg.testing.expect_kernel("Exp", first.device_type):
        y = pg.exp(x)
    assert y.device == first.name
    np.testing.assert_allclose(y.numpy(), np.exp(x), rtol=1e-6)
    # An input already on a plugin device keeps the op there.
    with pg.device("MY_DEVICE:0"):
        x_dev = pg.constant(x)
    with pg.testing.expect_kernel("Exp", "MY_DEVICE"):
        z = pg.exp(x_dev)
    assert z.device == FULL


def test_automatic_placement_falls_back_to_cpu_without_plugin_kernel():
    # int8 AddV2 has a CPU kernel only.
    a = np.arange(5, dtype=np.int8)
    with pg.testing.expect_kernel("AddV2", "CPU"):
        y = pg.add(a, a)
    assert y.device.endswith("CPU:0")
    np.testing.assert_array_equal(y.numpy(), a + a)


def test_soft_placement_falls_back_to_cpu_and_logs(placement_log):
    a = np.arange(5, dtype=np.int8)
    with pg.device("MY_DEVICE:0"):
        x = pg.constant(a)              # lives on MY_DEVICE
        with pg.testing.expect_kernel("AddV2", "CPU"):
            y = pg.add(x, x)
    assert y.device.endswith("CPU:0")
    np.testing.assert_array_equal(y.numpy(), a + a)
    log = pg.config.placement_log()
    assert ("AddV2", pg.placement.CPU.name, "soft placement: no MY_DEVICE:0 kernel for T=int8") in log
    assert any(op == "_Copy" and dev.endswith("CPU:0") for op, dev, _ in log)


def test_strict_placement_raises(strict):
    with pg.device("MY_DEVICE:0"):
        with pytest.raises(pg.errors.NotFoundError) as info:
            pg.add(np.arange(3, dtype=np.int8), np.arange(3, dtype=np.int8))
    msg = str(info.value)
    assert "AddV2" in msg and "MY_DEVICE:0" in msg and "T=int8" in msg
    assert "soft placement" in msg


def test_placement_log_shows_each_op(placement_log):
    x = np.ones((2, 2), np.float32)
    with pg.device("MY_DEVICE:0"):
        pg.matmul(pg.nn.relu(x), x)
    with pg.device("CPU:0"):
        pg.nn.relu(x)
    ops = [(op, dev) for op, dev, _ in pg.config.placement_log()]
    assert ("Relu", FULL) in ops and ("MatMul", FULL) in ops
    assert ("Relu", pg.placement.CPU.name) in ops


def test_inputs_follow_the_op_across_devices():
    rng = np.random.default_rng()
    a = rng.standard_normal((3, 4)).astype(np.float32)
    with pg.device("CPU:0"):
        x = pg.constant(a)
    with pg.device("MY_DEVICE:0"):
        y = pg.identity(x)              # copies to the device
        z = pg.multiply(y, x)           # mixes a device and a CPU input
    assert y.device == FULL and z.device == FULL
    np.testing.assert_array_equal(y.numpy(), a)
    np.testing.assert_allclose(z.numpy(), a * a, rtol=1e-6)
    back = z.to("CPU:0")
    assert back.device.endswith("CPU:0")
    np.testing.assert_allclose(back.numpy(), a * a, rtol=1e-6)


def test_status_does_not_leak_between_calls():
    s = pg.get_device("MY_DEVICE:0").create_stream()

    def bad():
        raise ValueError("boom")

    s.host_callback(bad)
    with pytest.raises(pg.errors.UnknownError, match="boom"):
        s.synchronize()
    s.synchronize()  # the error was reported once; the stream is usable again
    s.status()


def test_fast_path_keeps_logging_and_async_errors():
    rng = np.random.default_rng()
    a = rng.standard_normal(16).astype(np.float32)
    with pg.device("MY_DEVICE:0"):
        x = pg.constant(a)
        pg.raw_ops.AddV2(x=x, y=x)                     # builds the plan
        assert pg.registry.OPS["AddV2"].fast           # later calls take the fast path
        with pg.testing.expect_kernel("AddV2", "MY_DEVICE"):
            y = pg.raw_ops.AddV2(x=x, y=x)
        np.testing.assert_array_equal(y.numpy(), a + a)
        pg.config.set_log_device_placement(True)
        try:
            pg.config.placement_log(clear=True)
            pg.raw_ops.AddV2(x=x, y=x)
            assert ("AddV2", FULL, "") in pg.config.placement_log()
        finally:
            pg.config.set_log_device_placement(False)
        bad = pg.raw_ops.CheckNumerics(tensor=pg.constant([np.nan], dtype=pg.float32),
                                       message="fast path")
        z = pg.raw_ops.AddV2(x=bad, y=bad)             # enqueued after the failing op
        with pytest.raises(pg.errors.InvalidArgumentError, match="fast path"):
            pg.synchronize()
        # z was computed from the failed value: it carries the failure.
        with pytest.raises(pg.errors.InvalidArgumentError,
                           match="computed from the result of CheckNumerics.*fast path"):
            z.numpy()
        with pytest.raises(pg.errors.InvalidArgumentError, match="fast path"):
            pg.raw_ops.AddV2(x=z, y=z)                 # failed input: the call raises


@pytest.mark.parametrize("shape", [(5,), (2, 3)])
def test_fast_path_with_inputs_named_like_its_locals(shape):
    # Select's inputs are condition, t and e: the fast path's own locals must
    # not shadow them (the same plan runs twice: the second call is fast).
    rng = np.random.default_rng()
    c = rng.random(shape) < 0.5
    t = rng.standard_normal(shape).astype(np.float32)
    e = rng.standard_normal(shape).astype(np.float32)
    with pg.device("MY_DEVICE:0"):
        args = dict(condition=pg.constant(c), t=pg.constant(t), e=pg.constant(e))
        pg.raw_ops.Select(**args)
        assert pg.registry.OPS["Select"].fast
        with pg.testing.expect_kernel("Select", "MY_DEVICE"):
            out = pg.raw_ops.Select(**args)
        np.testing.assert_array_equal(out.numpy(), np.where(c, t, e))


def test_fast_path_for_ops_whose_shape_reads_host_values(monkeypatch):
    """Sum's axes and Reshape's shape are host-memory inputs that the shape
    function reads: once a CPU tensor holds its core handle (from its first
    call), later calls skip the general path, and each call's values give
    its shape."""
    rng = np.random.default_rng()
    a = rng.standard_normal((3, 4, 5)).astype(np.float32)
    with pg.device("CPU:0"):
        axes = [pg.constant(np.array([k], np.int32)) for k in (0, 1, 2, 1)]
        shapes = [pg.constant(np.array(s, np.int64)) for s in ((12, 5), (5, 12), (60,))]
    with pg.device("MY_DEVICE:0"):
        x = pg.constant(a)
        for ax in axes:   # the first call with each CPU tensor wraps its array
            pg.raw_ops.Sum(input=x, reduction_indices=ax)
        for s in shapes:
            pg.raw_ops.Reshape(tensor=x, shape=s)
        assert pg.registry.OPS["Sum"].fast and pg.registry.OPS["Reshape"].fast

        def no_general_path(*args, **kwargs):
            raise AssertionError("took the general path")
        monkeypatch.setitem(pg.raw_ops.Sum.__globals__, "execute", no_general_path)
        monkeypatch.setitem(pg.raw_ops.Reshape.__globals__, "execute", no_general_path)
        for ax in axes:
            with pg.testing.expect_kernel("Sum", "MY_DEVICE"):
                got = pg.raw_ops.Sum(input=x, reduction_indices=ax)
            k = int(ax.numpy()[0])
            np.testing.assert_allclose(got.numpy(), a.sum(axis=k), rtol=1e-5, atol=1e-5)
            assert got.shape == a.sum(axis=k).shape
        for s in shapes:
            got = pg.raw_ops.Reshape(tensor=x, shape=s)
            np.testing.assert_array_equal(got.numpy(), a.reshape(tuple(s.numpy())))
        # An axis out of range: the same typed error as the general path's
        bad = dispatch.host_input(np.array([3]), pg.int32)  # has its handle at once
        with pytest.raises(pg.errors.InvalidArgumentError, match="axis|range|dimension"):
            pg.raw_ops.Sum(input=x, reduction_indices=bad)
        monkeypatch.undo()
        with pytest.raises(pg.errors.InvalidArgumentError, match="axis|range|dimension"):
            pg.raw_ops.Sum(input=x, reduction_indices=pg.constant(np.array([3], np.int32)))


def test_single_output_kernel_call_refuses_other_kernels():
    """pg_kernel_run1 (the fast path's call) is for kernels of one output:
    another kernel gets a typed status naming the op, and no output."""
    from pluggable._core import code_and_message, ffi, lib
    rng = np.random.default_rng()
    a = rng.standard_normal(8).astype(np.float32)
    with pg.device("MY_DEVICE:0"):
        x = pg.constant(a)
        values, _ = pg.raw_ops.TopKV2(input=x, k=pg.constant(np.int32(3)))
    np.testing.assert_array_equal(values.numpy(), np.sort(a)[::-1][:3])
    plans = [dispatch._plans.get(k) for k in list(dispatch._plans)]
    p = next(p for p in plans if p is not None and p.op.name == "TopKV2" and p.kinst is not None)
    st = lib.TF_NewStatus()
    try:
        out = lib.pg_kernel_run1(p.kinst, [x._h, x._h], ffi.NULL, st)
        code, msg = code_and_message(st)
    finally:
        lib.TF_DeleteStatus(st)
    assert out == ffi.NULL
    assert code == 3 and "TopKV2" in msg and "2 outputs" in msg, (code, msg)


def test_fast_path_with_attributes_given(monkeypatch):
    """Attributes given as values of their plain kinds (Cast's DstT,
    MatMul's transpose flags, BiasAdd's data_format) take the fast path,
    keyed by their values: each value keeps its own plan, and a value of
    another type (1 for a bool) still meets the general path's typed error."""
    rng = np.random.default_rng()
    a = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal((3, 4)).astype(np.float32)
    bias = rng.standard_normal(4).astype(np.float32)
    dispatch.invalidate()  # fast-path entries of earlier tests (other settings) go
    with pg.device("MY_DEVICE:0"):
        x, y, z = pg.constant(a), pg.constant(b), pg.constant(bias)
        r = pg.raw_ops
        calls = {
            "Cast f16": (lambda: r.Cast(x=x, DstT=pg.float16), a.astype(np.float16)),
            "Cast i32": (lambda: r.Cast(x=x, DstT=pg.int32), a.astype(np.int32)),
            "MatMul tb": (lambda: r.MatMul(a=x, b=y, transpose_b=True), a @ b.T),
            "MatMul ta": (lambda: r.MatMul(a=x, b=y, transpose_a=True,
                                           transpose_b=False), a.T @ b),
            "BiasAdd": (lambda: r.BiasAdd(value=x, bias=z, data_format="NHWC"), a + bias),
        }
        for f, _ in calls.values():   # the general path makes each plan
            f()
        assert len(pg.registry.OPS["Cast"].fast) == 2
        assert len(pg.registry.OPS["MatMul"].fast) == 2

        def no_general_path(*args, **kwargs):
            raise AssertionError("took the general path")
        for op in ("Cast", "MatMul", "BiasAdd"):
            monkeypatch.setitem(getattr(r, op).__globals__, "execute", no_general_path)
        for name, (f, want) in calls.items():
            op = name.split()[0]
            with pg.testing.expect_kernel(op, "MY_DEVICE"):
                got = f()
            assert got.dtype.as_numpy_dtype == want.dtype, name
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5, err_msg=name)
        # 1 == True, but an int for a bool attribute is not this plan's value
        with pytest.raises(AssertionError, match="general path"):
            r.MatMul(a=x, b=y, transpose_b=1)
        monkeypatch.undo()
        with pytest.raises(TypeError, match="transpose_b.*must be a bool"):
            r.MatMul(a=x, b=y, transpose_b=1)


def test_fast_path_with_lists_of_ints(monkeypatch):
    """Lists of ints (Conv2D's strides, MaxPool's ksize) take the fast path
    too, as lists or tuples, each value with its own plan; a list holding
    something else than ints meets the general path."""
    rng = np.random.default_rng()
    a = rng.standard_normal((2, 6, 6, 3)).astype(np.float32)
    w = rng.standard_normal((3, 3, 3, 4)).astype(np.float32)
    with pg.device("MY_DEVICE:0"):
        x, f = pg.constant(a), pg.constant(w)
        r = pg.raw_ops
        calls = [
            lambda: r.Conv2D(input=x, filter=f, strides=[1, 1, 1, 1], padding="SAME"),
            lambda: r.Conv2D(input=x, filter=f, strides=(1, 2, 2, 1), padding="VALID"),
            lambda: r.MaxPool(input=x, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1],
                              padding="VALID"),
            lambda: r.MaxPool(input=x, ksize=[1, 3, 3, 1], strides=[1, 1, 1, 1],
                              padding="SAME"),
        ]
        want = [fn().numpy() for fn in calls]      # the general path makes each plan

        def no_general_path(*args, **kwargs):
            raise AssertionError("took the general path")
        for op in ("Conv2D", "MaxPool"):
            monkeypatch.setitem(getattr(r, op).__globals__, "execute", no_general_path)
        for _ in range(2):
            for fn, ref in zip(calls, want):
                got = fn()
                assert got.shape == ref.shape
                np.testing.assert_array_equal(got.numpy(), ref)
        # the list as a tuple: the same plan
        got = r.Conv2D(input=x, filter=f, strides=(1, 1, 1, 1), padding="SAME")
        np.testing.assert_array_equal(got.numpy(), want[0])
        with pytest.raises(AssertionError, match="general path"):
            r.Conv2D(input=x, filter=f, strides=[1, 1.0, 1, 1], padding="SAME")
    # the reference: numpy's 2x2 max pool of the first call's plan
    np.testing.assert_array_equal(want[2], a.reshape(2, 3, 2, 3, 2, 3).max(axis=(2, 4)))


def test_user_level_calls_take_the_fast_path(monkeypatch):
    """pg.reduce_sum/mean, pg.transpose, pg.reshape, pg.fill (index values
    as cached host tensors), pg.zeros/ones (a cached device constant under
    a plugin device's scope), pg.cast and x @ w (attributes given): after
    the first call of each, no call meets the general path, and every
    result matches numpy."""
    rng = np.random.default_rng()
    a = rng.standard_normal((3, 4, 5)).astype(np.float32)
    m = rng.standard_normal((5, 6)).astype(np.float32)
    bv = rng.standard_normal(5).astype(np.float32)
    with pg.device("MY_DEVICE:0"):
        x, w, bz = pg.constant(a), pg.constant(m), pg.constant(bv)
        x2 = pg.reshape(x, [12, 5])
        calls = [
            (lambda: pg.reduce_sum(x, 1), a.sum(axis=1)),
            (lambda: pg.reduce_sum(x, [0, 2]), a.sum(axis=(0, 2))),
            (lambda: pg.reduce_mean(x, -1, keepdims=True), a.mean(axis=-1, keepdims=True)),
            (lambda: pg.reduce_max(x), a.max()),
            (lambda: pg.transpose(x), a.transpose()),
            (lambda: pg.transpose(x, [1, 0, 2]), a.transpose(1, 0, 2)),
            (lambda: pg.reshape(x, [4, -1]), a.reshape(4, -1)),
            (lambda: pg.reshape(x, (60,)), a.reshape(60)),
            (lambda: pg.cast(x, pg.float16), a.astype(np.float16)),
            (lambda: x2 @ w, a.reshape(12, 5) @ m),
            (lambda: pg.fill([2, 3], pg.constant(np.float32(1.5))),
             np.full((2, 3), 1.5, np.float32)),
            # a scalar value under a plugin device's scope: its device constant
            (lambda: pg.zeros([2, 3]), np.zeros((2, 3), np.float32)),
            (lambda: pg.ones([4], pg.int32), np.ones(4, np.int32)),
            (lambda: pg.fill([3], 2.5), np.full(3, 2.5, np.float32)),
            (lambda: pg.nn.bias_add(x2, bz), a.reshape(12, 5) + bv),
        ]
        for f, _ in calls:
            f()

        def no_general_path(*args, **kwargs):
            raise AssertionError("took the general path")
        for op in ("Sum", "Mean", "Max", "Transpose", "Reshape", "Cast", "MatMul", "Fill",
                   "BiasAdd"):
            monkeypatch.setitem(getattr(pg.raw_ops, op).__globals__, "execute",
                                no_general_path)
        for i, (f, want) in enumerate(calls):
            got = f()
            assert got.shape == want.shape, i
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5,
                                       err_msg=str(i))
        # an axis out of range still gets the shape function's typed error
        with pytest.raises(pg.errors.InvalidArgumentError, match="out of range"):
            pg.reduce_sum(x, 3)


def test_fast_path_remembers_shapes_by_host_values(monkeypatch):
    """A repeated fast-path call whose shape function reads host values
    takes the shape the plan remembers for the same input shapes and values
    (the shape function does not run again, even for another tensor of the
    same values); other values or shapes run it, and every result is
    right."""
    rng = np.random.default_rng()
    a = rng.standard_normal((4, 6)).astype(np.float32)
    b = rng.standard_normal((5, 6)).astype(np.float32)
    op = pg.registry.OPS["Sum"]
    with pg.device("CPU:0"):
        ax0, ax1 = (pg.constant(np.array([k], np.int32)) for k in (0, 1))
        ax1_again = pg.constant(np.array([1], np.int32))   # same value, other tensor
    with pg.device("MY_DEVICE:0"):
        x, y = pg.constant(a), pg.constant(b)
        for ax in (ax0, ax1, ax1_again):   # the plan, and each CPU tensor's handle
            pg.raw_ops.Sum(input=x, reduction_indices=ax)
        for p in op.fast.values():
            p.shape_memo.clear()
        runs = []
        real = op.shape_fn

        def counting(*args):
            runs.append(args)
            return real(*args)
        monkeypatch.setattr(op, "shape_fn", counting)
        cases = [(x, ax1, a.sum(1)), (x, ax1, a.sum(1)), (x, ax1_again, a.sum(1)),
                 (x, ax0, a.sum(0)), (y, ax1, b.sum(1)), (y, ax1_again, b.sum(1)),
                 (x, ax0, a.sum(0))]
        for t, ax, want in cases:
            got = pg.raw_ops.Sum(input=t, reduction_indices=ax)
            assert got.shape == want.shape
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)
    # once for each (input shape, axis value): (4, 6)/1, (4, 6)/0, (5, 6)/1
    assert [(r[0][0], int(r[2]["reduction_indices"][0])) for r in runs] == [
        ((4, 6), 1), ((4, 6), 0), ((5, 6), 1)]


def test_fast_path_remembers_geometry_shapes(monkeypatch):
    """Ops whose shape function works out a geometry from strides, padding
    and layout (Conv2D, MaxPool) run it once per input shapes on the fast
    path; another shape runs it again, a bad shape still gets its typed
    error every time, and every result matches numpy."""
    rng = np.random.default_rng()
    op = pg.registry.OPS["MaxPool"]

    def pool(a):
        n, h, w, c = a.shape
        return a[:, :h // 2 * 2, :w // 2 * 2].reshape(n, h // 2, 2, w // 2, 2, c).max((2, 4))

    a = rng.standard_normal((2, 6, 6, 3)).astype(np.float32)
    b = rng.standard_normal((1, 5, 4, 3)).astype(np.float32)
    kw = dict(ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="VALID")
    with pg.device("MY_DEVICE:0"):
        x, y = pg.constant(a), pg.constant(b)
        pg.raw_ops.MaxPool(input=x, **kw)            # the plan
        for p in op.fast.values():
            p.shape_memo.clear()
        runs = []
        real = op.shape_fn

        def counting(*args):
            runs.append(args[0])
            return real(*args)
        monkeypatch.setattr(op, "shape_fn", counting)
        for t, want in ((x, pool(a)), (x, pool(a)), (y, pool(b)), (x, pool(a)), (y, pool(b))):
            got = pg.raw_ops.MaxPool(input=t, **kw)
            assert got.shape == want.shape
            np.testing.assert_array_equal(got.numpy(), want)
        assert runs == [[(2, 6, 6, 3)], [(1, 5, 4, 3)]]
        bad = pg.constant(rng.standard_normal((6, 6, 3)).astype(np.float32))
        for _ in range(2):
            with pytest.raises(pg.errors.InvalidArgumentError):
                pg.raw_ops.MaxPool(input=bad, **kw)


@pytest.mark.parametrize("setting,getter", [
    ("set_soft_device_placement", "get_soft_device_placement"),
    ("set_log_device_placement", None),
    ("enable_tensor_float_32_execution", "tensor_float_32_execution_enabled"),
])
def test_only_a_changed_setting_drops_the_cached_plans(setting, getter, rng):
    """Setting a config value to what it already is keeps the dispatch
    plans (a loop that sets TF32 before each step does not re-plan every
    op); changing it makes the next call plan again, and changing it back
    finds the plans made before (a loop that turns TF32 on for one step and
    off again plans each op once per setting)."""
    from pluggable.framework import config
    current = {"set_soft_device_placement": True, "set_log_device_placement": False,
               "enable_tensor_float_32_execution": False}[setting]
    if getter is not None:
        assert getattr(pg.config, getter)() is current
    x = rng.standard_normal((3, 4)).astype(np.float32)
    built = []
    real_build = dispatch._build_plan

    def counting(*args, **kwargs):
        built.append(args[0].name)
        return real_build(*args, **kwargs)

    with pg.device("MY_DEVICE:0"):
        a = pg.constant(x)
        pg.raw_ops.Relu(features=a)
        before = config.version[0]
        dispatch._build_plan = counting
        try:
            getattr(pg.config, setting)(current)
            assert config.version[0] == before and len(dispatch._plans) > 0
            np.testing.assert_array_equal(pg.raw_ops.Relu(features=a).numpy(), np.maximum(x, 0))
            assert built == []
            for _ in range(3):  # on and off three times: one new plan in all
                try:
                    getattr(pg.config, setting)(not current)
                    assert config.version[0] != before
                    np.testing.assert_array_equal(pg.raw_ops.Relu(features=a).numpy(),
                                                  np.maximum(x, 0))
                finally:
                    getattr(pg.config, setting)(current)
                assert config.version[0] == before
                np.testing.assert_array_equal(pg.raw_ops.Relu(features=a).numpy(),
                                              np.maximum(x, 0))
            assert built == ["Relu"], built
        finally:
            dispatch._build_plan = real_build


def test_a_registration_gives_versions_never_seen_before():
    """After a registration no settings' state gets an id it had before:
    plans cached under earlier ids are never found again."""
    from pluggable.framework import config
    seen = {config.version[0]}
    pg.config.enable_tensor_float_32_execution(True)
    seen.add(config.version[0])
    pg.config.enable_tensor_float_32_execution(False)
    config.bump_version()  # what a registration does
    try:
        assert config.version[0] not in seen
        pg.config.enable_tensor_float_32_execution(True)
        assert config.version[0] not in seen
    finally:
        pg.config.enable_tensor_float_32_execution(False)
