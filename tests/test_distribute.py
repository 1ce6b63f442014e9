"""pg.distribute and the collective ops on four devices of the host
reference plugin (PLUGGABLE_MY_DEVICE_COUNT=4, set before import, so each
case runs in a child process and the device list of the test process is
unchanged): every reduction and dtype exact against numpy, reduce_scatter,
all_gather, broadcast, typed errors for bad input, a participant that never
arrives (DeadlineExceededError, the devices usable afterwards), and a
data-parallel training step equal to one step on the whole batch. The op
definitions are compared with TensorFlow's in tests/test_ops_defs.py."""
import os
import subprocess
import sys
import textwrap

import pytest

COMMON = textwrap.dedent("""
    import numpy as np, pluggable as pg
    from pluggable import errors
    rng = np.random.default_rng()
    DEVS = [f"MY_DEVICE:{i}" for i in range(4)]
    assert len(pg.list_physical_devices("MY_DEVICE")) == 4

    def place(arrays, devs=DEVS):
        out = []
        for a, d in zip(arrays, devs):
            with pg.device(d):
                out.append(pg.constant(a))
        return out

    def sample(dt, shape, prod=False):
        if np.issubdtype(dt, np.integer):
            lim = 4 if prod else 1000
            return rng.integers(-lim, lim + 1, shape).astype(dt)
        return (rng.standard_normal(shape) * (1 if prod else 10)).astype(dt)

    def reference(xs, op):
        # the kernels reduce in device ordinal order, in the dtype
        acc = xs[0].copy()
        for x in xs[1:]:
            if op in ("sum", "mean"):
                acc = acc + x
            elif op == "prod":
                acc = acc * x
            elif op == "min":
                acc = np.minimum(acc, x)
            else:
                acc = np.maximum(acc, x)
        if op == "mean":
            n = len(xs)
            if np.issubdtype(acc.dtype, np.integer):
                acc = (np.sign(acc) * (np.abs(acc) // n)).astype(acc.dtype)  # toward zero
            else:
                acc = acc / acc.dtype.type(n)
        return acc

    def same(got, want, where):
        assert got.dtype == want.dtype, (where, got.dtype, want.dtype)
        assert got.shape == want.shape, (where, got.shape, want.shape)
        assert np.array_equal(got, want), (where, got, want)
""")

CASES = {
    "all_reduce": """
        for dt in (np.float32, np.float64, np.int32, np.int64):
            for op in ("sum", "mean", "min", "max", "prod"):
                xs = [sample(dt, (5, 7), prod=op == "prod") for _ in DEVS]
                with pg.testing.expect_kernel("CollectiveReduceV2", "MY_DEVICE", min_calls=4):
                    outs = pg.distribute.all_reduce(place(xs), op)
                want = reference(xs, op)
                for d, o in zip(DEVS, outs):
                    assert o.device.endswith(d), (o.device, d)
                    same(o.numpy(), want, (dt, op, d))
        # back-to-back calls with fresh inputs, all in flight before any
        # result is read (the prepared ops and their key inputs are reused)
        batches = [[sample(np.float32, (33,)) for _ in DEVS] for _ in range(20)]
        pending = [pg.distribute.all_reduce(place(xs), "sum") for xs in batches]
        for i, (xs, outs) in enumerate(zip(batches, pending)):
            for o in outs:
                same(o.numpy(), reference(xs, "sum"), ("in flight", i))
        # empty tensors
        for fn in (pg.distribute.all_reduce, pg.distribute.reduce_scatter,
                   pg.distribute.all_gather):
            outs = fn(place([np.zeros((0, 3), np.float32)] * 4))
            assert all(o.numpy().size == 0 for o in outs), fn
                # a group of two of the four devices, listed out of order; a scalar
        xs = [sample(np.float32, ()) for _ in range(2)]
        outs = pg.distribute.all_reduce(place(xs, ["MY_DEVICE:3", "MY_DEVICE:1"]), "sum")
        assert outs[0].device.endswith("MY_DEVICE:3")
        # rank order is device order: x(MY_DEVICE:1) + x(MY_DEVICE:3)
        for o in outs:
            same(o.numpy(), xs[1] + xs[0], "pair")
        # the raw op, with TensorFlow's attributes
        xs = [sample(np.float64, (3,)) for _ in range(2)]
        ts = place(xs)
        outs = []
        for d, t in zip(DEVS, ts):
            with pg.device(d):
                outs.append(pg.raw_ops.CollectiveReduceV2(
                    input=t, group_size=2, group_key=77, instance_key=5, ordering_token=[],
                    merge_op="Max", final_op="Id", communication_hint="auto",
                    timeout_seconds=30.0))
        for o in outs:
            same(o.numpy(), np.maximum(xs[0], xs[1]), "raw")
    """,
    "reduce_scatter_gather_broadcast": """
        for dt in (np.float32, np.float64, np.int32, np.int64):
            for op in ("sum", "mean", "max"):
                xs = [sample(dt, (8, 3)) for _ in DEVS]
                with pg.testing.expect_kernel("CollectiveReduceScatterV2", "MY_DEVICE", 4):
                    outs = pg.distribute.reduce_scatter(place(xs), op)
                want = reference(xs, op)
                for r, o in enumerate(outs):
                    same(o.numpy(), want[2 * r:2 * r + 2], (dt, op, r))
            for axis in (0, 1, -1):
                xs = [sample(dt, (2, 3)) for _ in DEVS]
                with pg.testing.expect_kernel("CollectiveGatherV2", "MY_DEVICE", 4):
                    outs = pg.distribute.all_gather(place(xs), axis=axis)
                for d, o in zip(DEVS, outs):
                    assert o.device.endswith(d)
                    same(o.numpy(), np.concatenate(xs, axis=axis), (dt, axis, d))
            x = sample(dt, (4, 5))
            with pg.device("MY_DEVICE:2"):
                src = pg.constant(x)
            with pg.testing.expect_kernel("CollectiveBcastRecvV2", "MY_DEVICE", 2):
                outs = pg.distribute.broadcast(src, ["MY_DEVICE:0", "MY_DEVICE:3"])
            assert [o.device[-11:] for o in outs] == ["MY_DEVICE:0", "MY_DEVICE:3"]
            for o in outs:
                same(o.numpy(), x, (dt, "broadcast"))
            outs = pg.distribute.broadcast(src, DEVS)   # the source listed too
            for d, o in zip(DEVS, outs):
                assert o.device.endswith(d)
                same(o.numpy(), x, (dt, "broadcast", d))
        # gather ranks by device ordinal, whatever the list order
        xs = [sample(np.float32, (1, 2)) for _ in range(3)]
        outs = pg.distribute.all_gather(place(xs, ["MY_DEVICE:2", "MY_DEVICE:0", "MY_DEVICE:1"]))
        same(outs[0].numpy(), np.concatenate([xs[1], xs[2], xs[0]]), "ordinal order")
    """,
    "group_path": """
        # after a collective's first call (which makes the participants'
        # plans) its participants run in one call into the core
        from pluggable.runtime import dispatch
        used = []
        real = dispatch.run_group

        def spy(calls, *rest):
            out = real(calls, *rest)
            used.append(out is not None)
            return out
        dispatch.run_group = spy
        xs = [sample(np.float64, (16,)) for _ in DEVS]
        ts = place(xs)
        for _ in range(3):
            with pg.testing.expect_kernel("CollectiveReduceV2", "MY_DEVICE", 4):
                outs = pg.distribute.all_reduce(ts, "max")
            for d, o in zip(DEVS, outs):
                assert o.device.endswith(d)
                same(o.numpy(), reference(xs, "max"), "group path")
        assert used == [False, True, True], used
        for _ in range(2):
            gathered = pg.distribute.all_gather(ts)
            scattered = pg.distribute.reduce_scatter(ts, "sum")
            sent = pg.distribute.broadcast(ts[1], DEVS)
        assert used[3:] == [False, False, False, True, True, True], used
        for o in gathered:
            same(o.numpy(), np.concatenate(xs), "gather")
        for r, o in enumerate(scattered):
            same(o.numpy(), reference(xs, "sum")[4 * r:4 * r + 4], "scatter")
        for o in sent:
            same(o.numpy(), xs[1], "broadcast")
    """,
    "errors": """
        def raises(cls, fn, *words):
            try:
                fn()
            except cls as e:
                for w in words:
                    assert w in str(e), (w, str(e))
                return
            raise AssertionError(f"expected {cls.__name__}")
        a = place([sample(np.float32, (2, 3)) for _ in DEVS])
        with pg.device("MY_DEVICE:1"):
            twice = pg.constant(np.ones((2, 3), np.float32))
            wrong_dtype = pg.constant(np.ones((2, 3), np.float64))
            wrong_shape = pg.constant(np.ones((3, 2), np.float32))
        ad = errors.InvalidArgumentError
        raises(ad, lambda: pg.distribute.all_reduce([a[0], a[1], twice]), "both on", "MY_DEVICE:1")
        raises(ad, lambda: pg.distribute.all_reduce([a[0], wrong_dtype]), "dtype", "float64")
        raises(ad, lambda: pg.distribute.all_gather([a[0], wrong_shape]), "shape", "[3, 2]")
        raises(ad, lambda: pg.distribute.all_reduce(a, "median"), "unknown op", "median")
        raises(ad, lambda: pg.distribute.reduce_scatter(a[:3]), "divisible")
        raises(ad, lambda: pg.distribute.all_reduce([]), "at least one")
        raises(ad, lambda: pg.distribute.all_reduce([np.ones(3)]), "not a pg.Tensor")
        raises(ad, lambda: pg.distribute.broadcast(a[0], ["MY_DEVICE:1", "MY_DEVICE:1"]), "twice")
        traced = pg.function(lambda x: pg.distribute.all_reduce([x])[0])
        raises(errors.UnimplementedError, lambda: traced(a[0]), "eagerly")
        cpu = pg.constant(np.ones(3, np.float32))    # no collective kernel on CPU
        raises(errors.NotFoundError, lambda: pg.distribute.all_reduce([cpu]), "CollectiveReduceV2")
        # refused before any participant is enqueued: the MY_DEVICE ones do
        # not wait for the CPU one (this would take the 600 s default timeout)
        with pg.device("MY_DEVICE:0"):
            x = pg.constant(np.ones(3, np.float32))
        raises(ad, lambda: pg.distribute.all_reduce([x, cpu]), "several types")
        with pg.device("MY_DEVICE:0"):
            halves = pg.constant(np.ones(3, np.float16))
        raises(errors.NotFoundError, lambda: pg.distribute.all_gather([halves]), "float16")
        # raw ops that disagree inside one group fail every participant
        outs = []
        for d, t, merge in zip(DEVS, a, ("Add", "Max")):
            with pg.device(d):
                outs.append(pg.raw_ops.CollectiveReduceV2(
                    input=t, group_size=2, group_key=11, instance_key=1, ordering_token=[],
                    merge_op=merge, final_op="Id", timeout_seconds=30.0))
        for o in outs:
            raises(ad, o.numpy, "disagrees with the group")
        after = pg.distribute.all_reduce([x], "sum")
        same(after[0].numpy(), np.ones(3, np.float32), "usable after refusals")
    """,
    "timeout": """
        xs = [sample(np.float32, (3, 3)) for _ in DEVS]
        ts = place(xs)
        # only two of a group of three arrive
        outs = []
        for d, t in zip(DEVS[:2], ts):
            with pg.device(d):
                outs.append(pg.raw_ops.CollectiveReduceV2(
                    input=t, group_size=3, group_key=9, instance_key=1, ordering_token=[],
                    merge_op="Add", final_op="Id", timeout_seconds=0.2))
        for o in outs:
            try:
                o.numpy()
            except errors.DeadlineExceededError as e:
                assert "timed out" in str(e) and "2 of 3" in str(e), str(e)
            else:
                raise AssertionError("no DeadlineExceededError")
        # the same through pg.distribute: the devices work afterwards
        with pg.device("MY_DEVICE:0"):
            lone = pg.raw_ops.CollectiveGatherV2(
                input=ts[0], group_size=2, group_key=3, instance_key=1, ordering_token=[],
                timeout_seconds=0.1)
        try:
            lone.numpy()
        except errors.DeadlineExceededError:
            pass
        else:
            raise AssertionError("no DeadlineExceededError")
        outs = pg.distribute.all_reduce(ts, "sum", timeout=30)
        for o in outs:
            same(o.numpy(), reference(xs, "sum"), "after timeout")
    """,
    "threads": """
        # two threads on the same devices in opposite order: the streams must
        # see the collectives in one order, else they would wait on each other
        import threading
        xs = [sample(np.float64, (64,)) for _ in DEVS]
        ts = place(xs)
        results = {}

        def worker(name, order):
            for _ in range(50):
                outs = pg.distribute.all_reduce([ts[i] for i in order], "sum", timeout=20)
            results[name] = [o.numpy() for o in outs]
        threads = [threading.Thread(target=worker, args=("a", [0, 1, 2, 3])),
                   threading.Thread(target=worker, args=("b", [3, 2, 1, 0]))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        want = reference(xs, "sum")
        for name in "ab":
            for o in results[name]:
                same(o, want, name)
    """,
    "data_parallel": """
        # y = x @ w + b, mean squared error; two replicas on half batches each,
        # gradients averaged with all_reduce, against one step on the whole batch
        dt = np.float64
        w0, b0 = rng.standard_normal((6, 3)).astype(dt), rng.standard_normal(3).astype(dt)
        lr, steps, batch = 0.1, 5, 16

        def make(dev):
            with pg.device(dev):
                return pg.Variable(w0.copy()), pg.Variable(b0.copy())

        def grads(w, b, x, t):
            with pg.GradientTape() as tape:
                y = pg.matmul(x, w) + b
                loss = pg.reduce_mean(pg.square(y - t))
            return tape.gradient(loss, [w, b])

        replicas = [make("MY_DEVICE:0"), make("MY_DEVICE:1")]
        single = make("MY_DEVICE:2")
        for step in range(steps):
            x = rng.standard_normal((batch, 6)).astype(dt)
            t = rng.standard_normal((batch, 3)).astype(dt)
            per = []
            for r, (w, b) in enumerate(replicas):
                with pg.device(f"MY_DEVICE:{r}"):
                    half = slice(r * batch // 2, (r + 1) * batch // 2)
                    per.append(grads(w, b, pg.constant(x[half]), pg.constant(t[half])))
            with pg.testing.expect_kernel("CollectiveReduceV2", "MY_DEVICE", 4):
                gw = pg.distribute.all_reduce([g[0] for g in per], "mean")
                gb = pg.distribute.all_reduce([g[1] for g in per], "mean")
            for r, (w, b) in enumerate(replicas):
                with pg.device(f"MY_DEVICE:{r}"):
                    w.assign_sub(gw[r] * lr)
                    b.assign_sub(gb[r] * lr)
            with pg.device("MY_DEVICE:2"):
                sw, sb = grads(single[0], single[1], pg.constant(x), pg.constant(t))
                single[0].assign_sub(sw * lr)
                single[1].assign_sub(sb * lr)
        (w_a, b_a), (w_b, b_b) = [(w.numpy(), b.numpy()) for w, b in replicas]
        assert np.array_equal(w_a, w_b) and np.array_equal(b_a, b_b)   # identical replicas
        assert not np.allclose(w_a, w0)                                 # it trained
        np.testing.assert_allclose(w_a, single[0].numpy(), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(b_a, single[1].numpy(), rtol=1e-12, atol=1e-12)
    """,
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_distribute_on_four_devices(case):
    code = COMMON + textwrap.dedent(CASES[case]) + "\nprint('OK')\n"
    env = dict(os.environ, PLUGGABLE_MY_DEVICE_COUNT="4")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120, cwd=os.path.dirname(os.path.dirname(
                              os.path.abspath(__file__))))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith("OK"), proc.stdout + proc.stderr

