"""pg.distribute across processes: the TCP store (values, counters,
barriers, waits that run out, bad input, garbage on its port, a client that
dies), the launcher (prefixed output, a failing rank stops the others), the
host backend's collectives on 2-3 processes for every op and dtype, on CPU
and MY_DEVICE, exact against numpy (every rank computes every rank's input
from a seed the test draws fresh), ranks that call different collectives,
a rank that never arrives and one that is killed (typed errors, never a
hang), gradient buckets, and the data-parallel digits example (replicas
bit-identical, equal to one process on the whole batch)."""
from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import pluggable as pg
from pluggable import errors
from pluggable.distribute.run import free_port
from pluggable.distribute.store import TCPStore

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def _group_secret(monkeypatch):
    """Every test's ranks (and the processes they start) share a fresh secret."""
    monkeypatch.setenv("PLUGGABLE_STORE_SECRET", os.urandom(16).hex())

PRELUDE = textwrap.dedent("""
    import os, sys, time
    import numpy as np, pluggable as pg
    from pluggable import errors
    d = pg.distribute
    SEED = int(os.environ["TEST_SEED"])

    def expect(cls, fn, *words):
        try:
            fn()
        except cls as e:
            for w in words:
                assert w in str(e), (w, str(e))
            return e
        raise AssertionError(f"expected {cls.__name__}")
""")


def _script(tmp_path, body: str, prelude: str = PRELUDE) -> str:
    path = tmp_path / "worker.py"
    path.write_text(prelude + textwrap.dedent(body))
    return str(path)


def _env(**extra) -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               TEST_SEED=str(np.random.default_rng().integers(1 << 30)),
               PYTHONFAULTHANDLER="1")   # a rank that crashes shows where
    env.update(extra)
    return env


def launch(tmp_path, body: str, nproc: int, timeout: float = 120, prelude: str = PRELUDE):
    """Runs `body` on `nproc` ranks with the launcher; the CompletedProcess."""
    cmd = [sys.executable, "-m", "pluggable.distribute.run", "--nproc", str(nproc),
           _script(tmp_path, body, prelude)]
    return subprocess.run(cmd, env=_env(), cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def ok(proc, nproc: int) -> None:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    for r in range(nproc):
        assert f"[rank {r}] OK" in proc.stdout, out


# ------------------------------------------------------------------ collectives

# every rank's reduction of xs in rank order ("mean" of integers toward 0)
REFERENCE = """
    def reference(xs, op):
        acc = xs[0].copy()
        for x in xs[1:]:
            acc = {"sum": np.add, "mean": np.add, "prod": np.multiply,
                   "min": np.minimum, "max": np.maximum}[op](acc, x)
        if op == "mean":
            if np.issubdtype(acc.dtype, np.integer):
                acc = np.trunc(acc.astype(np.float64) / n).astype(acc.dtype)   # toward 0
            else:
                acc = acc / acc.dtype.type(n)
        return acc
"""

COLLECTIVES = REFERENCE + """
    d.init_process_group(timeout=60)
    r, n = d.get_rank(), d.get_world_size()
    assert (r, n) == (int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))

    calls = [0]

    def inputs(dt, shape, prod=False):
        # every rank's input, the same on every rank (one seed; ranks call in one order)
        calls[0] += 1
        rng = np.random.default_rng([SEED, calls[0]])
        out = []
        for _ in range(n):
            if dt == np.bool_:
                out.append(rng.integers(0, 2, shape).astype(dt))
            elif np.issubdtype(dt, np.integer):
                lim = 3 if prod else 100
                lo = 0 if np.issubdtype(dt, np.unsignedinteger) else -lim
                out.append(rng.integers(lo, lim + 1, shape).astype(dt))
            else:
                out.append((rng.standard_normal(shape) * (1 if prod else 10)).astype(dt))
        return out


    def same(t, want, dev, where):
        assert t.device.endswith(dev), (where, t.device, dev)
        got = t.numpy()
        assert got.dtype == want.dtype and got.shape == want.shape, (where, got, want)
        assert np.array_equal(got, want), (where, got, want)

    for dev in ("CPU:0", "MY_DEVICE:0"):
        def put(a):
            with pg.device(dev):
                return pg.constant(a)
        for dt in DTYPES:
            ops = ("max", "min") if dt == np.bool_ else ("sum", "mean", "prod", "min", "max")
            for op in ops:
                xs = inputs(dt, (2 * n, 3), prod=op == "prod")
                same(d.all_reduce(put(xs[r]), op), reference(xs, op), dev, (dt, op))
                want = reference(xs, op)[2 * r:2 * r + 2]
                same(d.reduce_scatter(put(xs[r]), op), want, dev, (dt, op, "rs"))
            xs = inputs(dt, (n, 2))
            for axis in (0, 1, -1):
                same(d.all_gather(put(xs[r]), axis=axis), np.concatenate(xs, axis), dev,
                     (dt, axis))
            for src in range(n):
                same(d.broadcast(put(xs[r]), src=src), xs[src], dev, (dt, "bcast", src))
            same(d.broadcast(put(xs[r]), 1), xs[1], dev, (dt, "bcast", "positional"))
            want = np.concatenate([x[r:r + 1] for x in xs])    # row r of every rank
            same(d.all_to_all(put(xs[r])), want, dev, (dt, "all_to_all"))
        # a scalar, an empty tensor, one large enough to take many socket writes
        xs = inputs(np.float64, ())
        same(d.all_reduce(put(xs[r])), reference(xs, "sum"), dev, "scalar")
        same(d.all_reduce(put(np.zeros((0, 4), np.float32))), np.zeros((0, 4), np.float32),
             dev, "empty")
        for dt in (np.float32, np.int32):     # the two-phase all_reduce (over 64 KiB)
            for op in ("sum", "mean", "prod", "min", "max"):
                xs = inputs(dt, (3 * n, 7001), prod=op == "prod")
                same(d.all_reduce(put(xs[r]), op), reference(xs, op), dev, ("large", dt, op))
    # the single-process form still takes lists
    with pg.device("MY_DEVICE:0"):
        x = pg.constant(np.arange(3.0))
    assert np.array_equal(d.all_reduce([x])[0].numpy(), np.arange(3.0))
    d.destroy_process_group()
    print("OK")
"""


@pytest.mark.parametrize("nproc", [2, 3])
def test_collectives_every_op_and_dtype(tmp_path, nproc):
    dtypes = ("np.float32", "np.float64", "np.int32", "np.int64") if nproc == 3 else \
        ("np.float32", "np.float64", "np.int32", "np.int64", "np.float16", "np.uint8",
         "np.int8", "np.bool_", "pg.bfloat16.as_numpy_dtype")
    body = f"DTYPES = ({', '.join(dtypes)},)\n" + textwrap.dedent(COLLECTIVES)
    ok(launch(tmp_path, body, nproc), nproc)


def test_bad_arguments_and_mismatched_collectives(tmp_path):
    body = """
        expect(errors.FailedPreconditionError, lambda: d.all_reduce(pg.constant([1.0])),
               "init_process_group")
        expect(errors.FailedPreconditionError, d.get_rank, "no process group")
        expect(errors.InvalidArgumentError, lambda: d.init_process_group(backend="carrier"),
               "carrier", "host")
        d.init_process_group(timeout=30)
        r = d.get_rank()
        expect(errors.AlreadyExistsError, d.init_process_group, "already rank")
        x = pg.constant(np.ones((3, 2), np.float32))
        expect(errors.InvalidArgumentError, lambda: d.all_reduce(x, "median"), "median")
        expect(errors.InvalidArgumentError, lambda: d.reduce_scatter(x), "divisible", "[3, 2]")
        expect(errors.InvalidArgumentError, lambda: d.all_to_all(x), "divisible")
        expect(errors.InvalidArgumentError, lambda: d.broadcast(x, src=2), "src=2")
        expect(errors.InvalidArgumentError, lambda: d.all_gather(x, axis=2), "axis 2")
        flags = pg.constant(np.ones(2, bool))
        expect(errors.InvalidArgumentError, lambda: d.all_reduce(flags, "mean"), "bool")
        expect(errors.InvalidArgumentError, lambda: d.all_reduce(np.ones(3)), "ndarray")
        expect(errors.InvalidArgumentError, lambda: d.all_reduce_gradients([x], bucket_bytes=0),
               "bucket_bytes")
        # nothing above reached the other rank: the group still works
        assert np.array_equal(d.all_reduce(x).numpy(), np.full((3, 2), 2, np.float32))
        # rank 0 reduces while rank 1 gathers: both refuse, naming the other call
        if r == 0:
            e = expect(errors.InvalidArgumentError, lambda: d.all_reduce(x), "all_gather")
        else:
            e = expect(errors.InvalidArgumentError, lambda: d.all_gather(x), "all_reduce")
        assert "same order" in str(e)
        # the group is broken afterwards, and says so
        expect(errors.FailedPreconditionError, lambda: d.all_reduce(x), "broken")
        d.destroy_process_group()
        print("OK")
    """
    ok(launch(tmp_path, body, 2), 2)


def test_auto_picks_the_backend_registered_for_the_device_type(tmp_path):
    body = """
        from pluggable.distribute.host import HostBackend

        class Counting(HostBackend):          # a backend for MY_DEVICE tensors only
            calls = 0

            def all_reduce(self, t, op, timeout):
                Counting.calls += 1
                return super().all_reduce(t, op, timeout)

        d.register_backend("counting", Counting, device_types=["MY_DEVICE"])
        d.init_process_group(timeout=30)
        with pg.device("MY_DEVICE:0"):
            x = pg.constant(np.ones(3, np.float32))
        assert np.array_equal(d.all_reduce(x).numpy(), np.full(3, 2, np.float32))
        assert Counting.calls == 1
        assert np.array_equal(d.all_reduce(pg.constant([1.0])).numpy(), [2.0])   # CPU: host
        assert Counting.calls == 1
        assert sorted(d.group.current().backends) == ["counting", "host"]
        d.destroy_process_group()
        print("OK")
    """
    ok(launch(tmp_path, body, 2), 2)


def test_init_without_environment_is_a_clear_error(monkeypatch):
    for var in ("RANK", "WORLD_SIZE", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(errors.InvalidArgumentError, match="WORLD_SIZE is not set"):
        pg.distribute.init_process_group()
    with pytest.raises(errors.InvalidArgumentError, match=r"not in \[0, 2\)"):
        pg.distribute.init_process_group(rank=2, world_size=2, master_port=1)
    # rank 0 of two, and rank 1 never starts
    with pytest.raises(errors.DeadlineExceededError, match=r"rank\(s\) \[1\] to connect"):
        pg.distribute.init_process_group(rank=0, world_size=2, master_port=free_port(),
                                         timeout=0.5)
    assert not pg.distribute.is_initialized()


def test_a_rank_that_does_not_arrive_times_out(tmp_path):
    body = """
        d.init_process_group(timeout=30)
        x = pg.constant(np.ones(4, np.float32))
        if d.get_rank() == 0:
            e = expect(errors.DeadlineExceededError, lambda: d.all_reduce(x, timeout=0.5),
                       "rank(s) [1] did not arrive", "0.5 s")
            expect(errors.FailedPreconditionError, lambda: d.all_reduce(x), "broken")
        d.barrier()          # rank 1 skipped the collective and waits here
        d.destroy_process_group()
        print("OK")
    """
    ok(launch(tmp_path, body, 2), 2)


def _spawn(tmp_path, body: str, nproc: int) -> list[subprocess.Popen]:
    """The ranks without the launcher (which would stop them when one dies)."""
    script, env, port = _script(tmp_path, body), _env(), free_port()
    return [subprocess.Popen([sys.executable, script], cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True,
                             env=dict(env, RANK=str(r), WORLD_SIZE=str(nproc),
                                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)))
            for r in range(nproc)]


def test_a_killed_rank_fails_the_others_with_unavailable(tmp_path):
    body = """
        import signal, threading
        d.init_process_group(timeout=60)
        r = d.get_rank()
        x = pg.constant(np.ones((1000, 100), np.float32))
        assert d.all_reduce(x).numpy()[0, 0] == 3
        if r == 2:     # dies inside its next collective, which the others join late
            threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGKILL)).start()
            d.all_reduce(x)
            raise AssertionError("rank 2 should be dead")
        time.sleep(1.0)
        # rank 2, or (when the other survivor has already failed and left) that one
        e = expect(errors.UnavailableError, lambda: d.all_reduce(x), "lost rank", "died")
        assert "lost rank 2" in str(e) or f"lost rank {1 - r}" in str(e), str(e)
        print("OK", flush=True)
    """
    procs = _spawn(tmp_path, body, 3)
    outs = [p.communicate(timeout=60)[0] for p in procs]
    assert procs[2].returncode == -signal.SIGKILL, outs[2]
    for r in (0, 1):
        assert procs[r].returncode == 0 and "OK" in outs[r], outs[r]


# ------------------------------------------------------------------ launcher

def test_launcher_prefixes_output_and_stops_the_others_when_one_fails(tmp_path):
    # Every rank has printed before rank 1 fails (each marks a file once its
    # lines are written), so the test does not depend on start-up order.
    body = f"""
        r = int(os.environ["RANK"])
        print(f"hello from {{r}} of {{os.environ['WORLD_SIZE']}} "
              f"local {{os.environ['LOCAL_RANK']}} port {{os.environ['MASTER_PORT']}}", flush=True)
        print("to stderr", file=sys.stderr, flush=True)
        open(os.path.join({str(tmp_path)!r}, f"printed{{r}}"), "w").close()
        if r == 1:
            deadline = time.monotonic() + 50
            while time.monotonic() < deadline and not all(
                    os.path.exists(os.path.join({str(tmp_path)!r}, f"printed{{q}}")) for q in (0, 2)):
                time.sleep(0.01)
            sys.exit(7)
        time.sleep(600)      # terminated by the launcher
    """
    proc = launch(tmp_path, body, 3, 60, prelude="import os, sys, time\n")
    assert proc.returncode == 7, proc.stdout + proc.stderr
    for r in range(3):
        assert f"[rank {r}] hello from {r} of 3 local {r} port" in proc.stdout
        assert f"[rank {r}] to stderr" in proc.stderr
    assert "rank 1 failed (exit code 7)" in proc.stderr
    assert "terminated the other 2" in proc.stderr


def test_launcher_succeeds_and_rejects_bad_arguments(tmp_path):
    proc = launch(tmp_path, "print('OK')", 2, 60, prelude="")
    ok(proc, 2)
    bad = subprocess.run([sys.executable, "-m", "pluggable.distribute.run", "--nproc", "0",
                          "x.py"], cwd=ROOT, env=_env(), capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and "--nproc must be at least 1" in bad.stderr


# ------------------------------------------------------------------ the store

@pytest.fixture
def stores():
    """A store of a group of two: rank 0 (hosting it) and rank 1."""
    s0 = TCPStore("127.0.0.1", 0, 0, 2, is_server=True, timeout=10)
    s1 = TCPStore("127.0.0.1", s0.port, 1, 2, timeout=10)
    yield s0, s1
    s1.close()
    s0.close()


def test_store_values_counters_and_waits(stores):
    s0, s1 = stores
    value = np.random.default_rng().bytes(100_000)
    s0.set("blob", value)
    assert s1.get("blob") == value
    assert [s0.add("n", 2), s1.add("n", 3), s1.add("n", -1)] == [2, 5, 4]
    threading.Timer(0.2, s0.set, ("late", b"here")).start()
    assert s1.get("late", timeout=10) == b"here"         # waits until set
    done = []
    t = threading.Thread(target=lambda: done.append(s1.barrier("b", 10)))
    t.start()
    s0.barrier("b", 10)
    t.join(10)
    assert done == [None]


def test_store_errors_are_typed(stores):
    s0, s1 = stores
    with pytest.raises(errors.DeadlineExceededError, match=r"'never'.*rank\(s\) \[0\] did not"):
        s1.get("never", timeout=0.3)
    with pytest.raises(errors.DeadlineExceededError, match=r"rank\(s\) \[1\] did not arrive"):
        s0.barrier("alone", timeout=0.3)
    with pytest.raises(errors.InvalidArgumentError, match="must be bytes"):
        s0.set("k", "text")
    with pytest.raises(errors.InvalidArgumentError, match="non-empty str"):
        s0.get("")
    with pytest.raises(errors.InvalidArgumentError, match="positive number"):
        s0.get("k", timeout=-1)
    with pytest.raises(errors.InvalidArgumentError, match="n must be an int"):
        s0.add("k", 1.5)
    s0.set("text", b"abc")
    with pytest.raises(errors.InvalidArgumentError, match="not an integer counter"):
        s0.add("text", 1)
    # garbage on the store's port closes that connection only
    with socket.create_connection(("127.0.0.1", s0.port)) as junk:
        junk.sendall(b"GET / HTTP/1.1\r\n\r\n" * 3)
    s1.set("still", b"up")
    assert s0.get("still") == b"up"


def test_store_reports_a_dead_client_and_an_unreachable_store():
    s0 = TCPStore("127.0.0.1", 0, 0, 2, is_server=True, timeout=10)
    s1 = TCPStore("127.0.0.1", s0.port, 1, 2, timeout=10)
    try:
        s1._sock.close()         # as if rank 1's process died: no goodbye
        with pytest.raises(errors.UnavailableError, match=r"rank\(s\) \[1\] left the group"):
            s0.get("from-1", timeout=30)
    finally:
        s0.close()
    with pytest.raises(errors.UnavailableError, match="cannot reach the store"):
        TCPStore("127.0.0.1", free_port(), 1, 2, timeout=0.3)


def test_a_store_closed_right_after_watch_is_not_a_death():
    """A watch is in place when watch() returns: a normal close straight
    after it answers "closing", never the dropped connection that reads as
    rank 0's death (before the server acknowledged watches, about 1 in 75
    such closes did)."""
    import queue
    heard: queue.Queue = queue.Queue()
    for _ in range(100):
        s0 = TCPStore("127.0.0.1", 0, 0, 2, is_server=True, timeout=10)
        s1 = TCPStore("127.0.0.1", s0.port, 1, 2, timeout=10)
        s1.watch(lambda ranks, why: heard.put((ranks, why)))
        s1.close()
        s0.close()
    with pytest.raises(queue.Empty):
        print(heard.get(timeout=0.5))


def test_store_watch_reports_dead_ranks_and_not_a_clean_close():
    import queue
    s0 = TCPStore("127.0.0.1", 0, 0, 3, is_server=True, timeout=10)
    s1 = TCPStore("127.0.0.1", s0.port, 1, 3, timeout=10)
    s2 = TCPStore("127.0.0.1", s0.port, 2, 3, timeout=10)
    heard: dict[int, queue.Queue] = {0: queue.Queue(), 2: queue.Queue()}
    stopped = queue.Queue()
    watches = [s.watch(lambda ranks, why, r=r: heard[r].put((ranks, why)))
               for r, s in ((0, s0), (2, s2))]
    quiet = s2.watch(lambda ranks, why: stopped.put(ranks))
    quiet.close()                                 # closed before anything happened
    try:
        s1._sock.close()                          # rank 1's process "dies": no goodbye
        for r in (0, 2):
            ranks, why = heard[r].get(timeout=10)
            assert ranks == [1] and "rank(s) [1] left the group" in why, why
            assert heard[r].empty()               # once
        assert stopped.empty()
    finally:
        for w in watches:
            w.close()
        s2.close()
        s0.close()
    # a normal close of the store is not a death
    s0 = TCPStore("127.0.0.1", 0, 0, 2, is_server=True, timeout=10)
    s1 = TCPStore("127.0.0.1", s0.port, 1, 2, timeout=10)
    calm: queue.Queue = queue.Queue()
    s1.watch(lambda ranks, why: calm.put(ranks))
    s1.close()
    s0.close()
    with pytest.raises(queue.Empty):
        calm.get(timeout=0.6)


def test_store_watch_reports_rank_0_when_the_store_process_dies(tmp_path):
    import queue
    port = free_port()
    host = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\n"
         "from pluggable.distribute.store import TCPStore\n"
         f"s = TCPStore('127.0.0.1', {port}, 0, 2, is_server=True)\n"
         "print('up', flush=True)\ntime.sleep(120)\n"],
        cwd=ROOT, env=_env(), stdout=subprocess.PIPE, text=True)
    try:
        assert host.stdout.readline().strip() == "up"
        s1 = TCPStore("127.0.0.1", port, 1, 2, timeout=10)
        heard: queue.Queue = queue.Queue()
        s1.watch(lambda ranks, why: heard.put((ranks, why)))
        host.kill()
        ranks, why = heard.get(timeout=10)
        assert ranks == [0] and "rank 0, which hosts it" in why, why
    finally:
        host.kill()
        host.wait(30)


# ------------------------------------------------------------------ data parallel

def test_gradient_buckets_take_fewer_messages(tmp_path):
    body = """
        d.init_process_group(timeout=30)
        r = d.get_rank()
        rng = np.random.default_rng(SEED)
        shapes = [(3, 4), (5,), (2, 2, 2), (7,)]
        every = [[rng.standard_normal(s).astype(np.float32) for s in shapes] for _ in range(2)]
        with pg.device("MY_DEVICE:0"):
            grads = [pg.constant(a) for a in every[r]] + [None]
        host = d.group.current().backend("host")
        # one bucket, or one per gradient (one exchange per all-reduce of <= 64 KiB)
        for bucket_bytes, exchanges in ((1 << 20, 1), (1, 4)):
            before = host._seq
            out = d.all_reduce_gradients(grads, bucket_bytes=bucket_bytes)
            assert host._seq - before == exchanges, (bucket_bytes, host._seq - before)
            assert out[-1] is None
            for g, a, b in zip(out, every[0], every[1]):
                assert g.device.endswith("MY_DEVICE:0") and g.shape == a.shape
                assert np.array_equal(g.numpy(), (a + b) / np.float32(2))
        d.destroy_process_group()
        print("OK")
    """
    ok(launch(tmp_path, body, 2), 2)


@pytest.mark.parametrize("overlap", [[], ["--overlap"]], ids=["plain", "overlap"])
def test_data_parallel_digits_replicas_match_one_whole_batch_process(tmp_path, monkeypatch,
                                                                     overlap):
    pytest.importorskip("sklearn", reason="examples/train_digits.py needs scikit-learn")
    example = os.path.join(ROOT, "examples", "train_digits_ddp.py")
    args = ["--epochs", "1", "--steps", "4", "--batch-size", "24", "--device", "MY_DEVICE:0",
            "--seed", str(np.random.default_rng().integers(1000)), "--bucket-bytes", "20000"]
    ddp = subprocess.run([sys.executable, "-m", "pluggable.distribute.run", "--nproc", "2",
                          example, *args, *overlap, "--save", str(tmp_path / "ddp{rank}.npz")],
                         cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    assert ddp.returncode == 0, ddp.stdout + ddp.stderr
    assert "[rank 0] 2 replica(s) on MY_DEVICE:0" in ddp.stdout
    # the same steps on the whole batch, in this process (a group of one)
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(var, raising=False)
    spec = importlib.util.spec_from_file_location("train_digits_ddp", example)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main([*args, "--save", str(tmp_path / "one.npz")]) == 0
    assert not pg.distribute.is_initialized()
    a, b, one = (np.load(tmp_path / f) for f in ("ddp0.npz", "ddp1.npz", "one.npz"))
    for k in (k for k in a.files if k.startswith("w")):
        assert not np.array_equal(a[k], a["i" + k[1:]]), k          # it trained
        assert np.array_equal(a[k], b[k]), k                      # identical replicas
        np.testing.assert_allclose(a[k], one[k], rtol=1e-4, atol=1e-6, err_msg=k)


# ------------------------------------------------------------------ overlapped reduction

MLP = """
        rng = np.random.default_rng(SEED)
        sizes = [48, 96, 64, 32, 10]
        with pg.device("MY_DEVICE:0"):
            ws = []
            for a, b in zip(sizes, sizes[1:]):
                ws += [pg.Variable(rng.standard_normal((a, b)).astype(np.float32) * 0.2),
                       pg.Variable(rng.standard_normal(b).astype(np.float32) * 0.1)]
            unused = pg.Variable(np.ones(3, np.float32))       # no gradient: None
        x_all = rng.standard_normal((16, sizes[0])).astype(np.float32)

        def loss_of(x):
            h = pg.constant(x)
            for i in range(0, len(ws), 2):
                h = pg.matmul(h, ws[i]) + ws[i + 1]
                if i < len(ws) - 2:
                    h = pg.tanh(h)
            return pg.reduce_mean(h * h)

        def grads_of(x, reducer=None, **kw):
            with pg.device("MY_DEVICE:0"), pg.GradientTape() as tape:
                loss = loss_of(x)
            if reducer is None:
                return tape.gradient(loss, ws + [unused])
            return reducer.gradient(tape, loss, **kw)
"""


def test_overlapped_gradients_match_the_plain_path_and_start_during_backward(tmp_path):
    body = MLP + """
        d.init_process_group(timeout=30)
        r, n = d.get_rank(), d.get_world_size()
        mine = x_all[r::n]
        plain = d.all_reduce_gradients(grads_of(mine), bucket_bytes=4000)
        reducer = d.GradientReducer(ws + [unused], bucket_bytes=4000)
        assert len(reducer.buckets) >= 3, reducer.buckets
        # buckets hold the sources in reverse order, like PyTorch's DDP
        assert reducer.buckets[0][0] == len(ws), reducer.buckets
        for step in range(2):
            with pg.device("MY_DEVICE:0"), pg.GradientTape() as tape:
                loss = loss_of(mine)
            seen = {}

            def report(i, g, seen=seen):
                # hold the first op's gradient back until bucket 0 is on the wire:
                # the reduction overlaps the backward pass
                if i == 0:
                    works = reducer._works[0] if reducer._works else []
                    deadline = time.monotonic() + 20
                    while not all(w.started_at for _, w in works) and time.monotonic() < deadline:
                        time.sleep(0.001)
                    seen["started"] = bool(works) and all(w.started_at for _, w in works)
                reducer.add(i, g)
            got = reducer.finish(tape.gradient(loss, reducer.sources, on_gradient=report))
            assert seen["started"], reducer.events
            ev = reducer.events
            ready = [t for what, i, t in ev if what == "ready"]
            sent0 = min(t for what, b, t in ev if what == "sent" and b == 0)
            assert sent0 < max(ready), ev
            assert got[-1] is None and plain[-1] is None
            for i, (a, b) in enumerate(zip(got[:-1], plain[:-1])):
                assert a.device.endswith("MY_DEVICE:0"), a.device
                assert np.array_equal(a.numpy(), b.numpy()), (step, i)   # bit-identical
        # the method form, and the whole batch in one process (mean of equal shards)
        via = d.GradientReducer(ws + [unused], bucket_bytes=1 << 20)
        whole = grads_of(x_all)
        for a, b, w in zip(grads_of(mine, via)[:-1], plain[:-1], whole[:-1]):
            assert np.array_equal(a.numpy(), b.numpy())
            np.testing.assert_allclose(a.numpy(), w.numpy(), rtol=1e-5, atol=1e-6)
        # bad input: typed errors before anything is sent
        expect(errors.InvalidArgumentError, lambda: d.GradientReducer(ws, bucket_bytes=0),
               "positive int")
        expect(errors.InvalidArgumentError, lambda: d.GradientReducer([ws[0], "w"]),
               "sources[1] is a str")
        expect(errors.InvalidArgumentError, lambda: via.finish(whole[:2]), "2 gradients for")
        # a rank that plans other buckets: the mismatch is raised at the wait
        odd = d.GradientReducer(ws + [unused], bucket_bytes=4000 if r == 0 else 1 << 20)
        expect(errors.InvalidArgumentError, lambda: grads_of(mine, odd), "same collectives")
        expect(errors.FailedPreconditionError, lambda: d.all_reduce(pg.constant([1.0])),
               "broken")
        print("OK")
    """
    ok(launch(tmp_path, body, 2), 2)


def test_a_rank_killed_during_an_overlapped_step_fails_the_other_at_the_wait(tmp_path):
    body = MLP + """
        import signal
        d.init_process_group(timeout=30)
        r = d.get_rank()
        reducer = d.GradientReducer(ws, bucket_bytes=4000)
        grads_of(x_all[r::2], reducer)          # a good step first
        with pg.device("MY_DEVICE:0"), pg.GradientTape() as tape:
            loss = loss_of(x_all[r::2])

        def report(i, g):
            if r == 1 and i == 0:               # dies with buckets in flight
                os.kill(os.getpid(), signal.SIGKILL)
            reducer.add(i, g)
        expect(errors.UnavailableError,
               lambda: reducer.finish(tape.gradient(loss, ws, on_gradient=report)),
               "lost rank 1")
        assert not reducer._works              # every started bucket was waited for
        expect(errors.FailedPreconditionError, lambda: grads_of(x_all[r::2], reducer),
               "broken")
        print("OK", flush=True)
    """
    procs = _spawn(tmp_path, body, 2)
    outs = [p.communicate(timeout=90)[0] for p in procs]
    assert procs[1].returncode == -signal.SIGKILL, outs[1]
    assert procs[0].returncode == 0 and "OK" in outs[0], outs[0]


# ------------------------------------------------------------------ the nccl backend
# One process per GPU through the CUDA plugin's NCCL kernels. Without a GPU
# only the refusals run; on one GPU a group of one and two ranks that share
# the GPU (refused); with two GPUs every collective, a dead rank, a rank that
# never calls, and data-parallel training.

GPUS = len(pg.list_physical_devices("GPU"))
needs_gpu = pytest.mark.skipif(GPUS < 1, reason="no GPU device present: needs the CUDA "
                               "reference plugin and an NVIDIA GPU")
needs_2_gpus = pytest.mark.skipif(GPUS < 2, reason=f"needs 2 GPUs (one per process), {GPUS} "
                                  "present")


def test_auto_sends_gpu_tensors_to_the_nccl_backend():
    from pluggable.distribute import backend
    assert backend.auto_backend("GPU") == "nccl"
    assert backend.auto_backend("MY_DEVICE") == "host"
    assert backend.backend_class("nccl").__name__ == "NcclBackend"


def test_nccl_backend_refuses_a_device_without_the_extension():
    d = pg.distribute
    d.init_process_group(backend="nccl", rank=0, world_size=1, master_port=free_port(),
                         timeout=30)
    try:
        with pg.device("MY_DEVICE:0"):
            x = pg.constant(np.ones(3, np.float32))
        with pytest.raises(errors.UnimplementedError, match="PG_GetCollectiveFns"):
            d.all_reduce(x)
        with pytest.raises(errors.NotFoundError, match="no CollectiveReduceV2 kernel for "
                           "float32 on CPU"):
            d.all_reduce(pg.constant(np.ones(3, np.float32)))
    finally:
        d.destroy_process_group()


def test_nccl_backend_first_collectives_of_two_threads_make_one_communicator(monkeypatch):
    """Two threads of one rank making their first collective on a device at
    once: one NCCL communicator is made (one id published, one init), both
    get its group key, and a second device then gets the next serial. The
    plugin side (nccl.require, unique_id, init) is replaced by stand-ins
    that record the calls, the init slow enough for the threads to meet."""
    from pluggable.distribute import nccl, nccl_backend

    calls = {"unique_id": 0, "init": []}
    lock = threading.Lock()

    def unique_id(dev):
        with lock:
            calls["unique_id"] += 1
            return f"id-{dev.name}-{calls['unique_id']}".encode()

    def init(dev, world_size, rank, uid, group_key):
        with lock:
            calls["init"].append((dev.name, uid, group_key))
        threading.Event().wait(0.3)

    monkeypatch.setattr(nccl, "require", lambda dev: None)
    monkeypatch.setattr(nccl, "unique_id", unique_id)
    monkeypatch.setattr(nccl, "init", init)
    aborted: list = []
    monkeypatch.setattr(nccl, "abort", lambda dev, key: aborted.append((dev.name, key)))

    class Dev:
        def __init__(self, name):
            self.name, self.pci_bus_id = name, f"bus-{name}"

        def wait_for_work(self):
            return True

    class T:
        def __init__(self, dev):
            self.device_object = dev

    store = TCPStore("127.0.0.1", 0, 0, 1, is_server=True, timeout=10)
    b = nccl_backend.NcclBackend(store, "t", 0, 1, 10.0)
    try:
        gpu0, gpu1 = Dev("GPU:0"), Dev("GPU:1")
        keys: list = []
        threads = [threading.Thread(target=lambda: keys.append(
            b._group_key("all_reduce", T(gpu0), 10.0))) for _ in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(30)
        assert len(keys) == 4 and len(set(keys)) == 1, keys
        assert calls["unique_id"] == 1 and len(calls["init"]) == 1, calls
        assert b._group_key("all_reduce", T(gpu1), 10.0) == keys[0] + 1
        assert [c[0] for c in calls["init"]] == ["GPU:0", "GPU:1"]
        b.close()
        assert sorted(aborted) == [("GPU:0", keys[0]), ("GPU:1", keys[0] + 1)]
    finally:
        b.close()
        store.close()


NCCL_COLLECTIVES = REFERENCE + """
    d.init_process_group(backend=BACKEND, timeout=60)
    r, n = d.get_rank(), d.get_world_size()
    dev = f"GPU:{int(os.environ.get('LOCAL_RANK', 0))}"
    import ml_dtypes
    calls = [0]

    def inputs(dt, shape):
        calls[0] += 1
        rng = np.random.default_rng([SEED, calls[0]])
        if dt == np.bool_:
            return [rng.integers(0, 2, shape).astype(dt) for _ in range(n)]
        if np.dtype(dt).kind in "iu":
            return [rng.integers(-50, 51, shape).astype(dt) for _ in range(n)]
        return [rng.standard_normal(shape).astype(np.float32).astype(dt) for _ in range(n)]

    def same(t, want, where):
        assert t.device.endswith(dev), (where, t.device, dev)
        got = t.numpy()
        assert got.dtype == want.dtype and got.shape == want.shape, (where, got, want)
        assert np.array_equal(got, want), (where, got, want)

    def put(a):
        with pg.device(dev):
            return pg.constant(a)

    for dt in (np.float32, np.float64, np.int32, np.int64, np.float16, ml_dtypes.bfloat16,
               np.bool_):
        ops = ("max", "min", "sum", "prod") if dt == np.bool_ else \\
            ("sum", "mean", "prod", "min", "max")
        for op in ops:
            xs = inputs(dt, (2 * n, 5))
            with pg.testing.expect_kernel("CollectiveReduceV2", "GPU"):
                got = d.all_reduce(put(xs[r]), op)
            want = reference(xs, op) if dt != np.bool_ else \\
                reference([x.astype(np.int32) for x in xs], op).astype(bool)
            same(got, want, (dt, op))
            if dt != np.bool_:
                with pg.testing.expect_kernel("CollectiveReduceScatterV2", "GPU"):
                    got = d.reduce_scatter(put(xs[r]), op)
                same(got, reference(xs, op)[2 * r:2 * r + 2], (dt, op, "rs"))
    for dt in (np.float32, np.float64, np.int32, np.int64, np.float16):
        xs = inputs(dt, (n, 3))
        for axis in (0, 1):
            with pg.testing.expect_kernel("CollectiveGatherV2", "GPU"):
                got = d.all_gather(put(xs[r]), axis=axis)
            same(got, np.concatenate(xs, axis), (dt, "gather", axis))
        for src in range(n):
            same(d.broadcast(put(xs[r]), src=src), xs[src], (dt, "bcast", src))
        with pg.testing.expect_kernel("CollectiveAllToAllV2", "GPU"):
            got = d.all_to_all(put(xs[r]))
        same(got, np.concatenate([x[r:r + 1] for x in xs]), (dt, "all_to_all"))
    xs = inputs(np.float32, (3 * n, 70001))       # large: many NCCL chunks
    same(d.all_reduce(put(xs[r])), reference(xs, "sum"), "large")
    same(d.all_reduce(put(np.zeros((0, 4), np.float32))), np.zeros((0, 4), np.float32), "empty")
    # donated: the kernel takes the input's memory and NCCL reduces in place
    def forwarded():
        return pg.testing.kernel_forwards("CollectiveReduceV2", "GPU")
    before = forwarded()
    for i, op in enumerate(("sum", "max", "mean", "sum")):
        xs = inputs(np.float32, (257, 33))
        x = put(xs[r])
        with pg.testing.expect_kernel("CollectiveReduceV2", "GPU"):
            y = d.all_reduce(x, op=op, donate=True)
        assert x.is_donated and not y.is_donated, i
        same(y, reference(xs, op), ("donated", op))
    assert forwarded() >= before + 3, (before, forwarded())
    assert "nccl" in d.group.current().backends
    d.destroy_process_group()
    print("OK")
"""


@needs_gpu
def test_nccl_backend_group_of_one(monkeypatch):
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    scope = dict(os=os, sys=sys, np=np, pg=pg, errors=errors, d=pg.distribute,
                 SEED=int(np.random.default_rng().integers(1 << 30)), BACKEND="nccl")
    exec(compile(textwrap.dedent(NCCL_COLLECTIVES), "nccl_collectives", "exec"), scope)


@needs_gpu
def test_nccl_backend_refuses_two_ranks_on_one_gpu(tmp_path):
    body = """
        d.init_process_group(backend="nccl", timeout=60)
        with pg.device("GPU:0"):
            x = pg.constant(np.ones(4, np.float32))
        expect(errors.FailedPreconditionError, lambda: d.all_reduce(x),
               "ranks 0 and 1 use the same GPU", "GPU:<LOCAL_RANK>", 'backend="host"')
        d.destroy_process_group()
        print("OK")
    """
    ok(launch(tmp_path, body, 2), 2)


@needs_2_gpus
def test_nccl_backend_every_collective_two_processes(tmp_path):
    ok(launch(tmp_path, "BACKEND = 'auto'\n" + textwrap.dedent(NCCL_COLLECTIVES), 2,
              timeout=300), 2)


@needs_2_gpus
def test_nccl_backend_a_killed_rank_fails_the_other_with_unavailable(tmp_path):
    body = """
        import signal
        d.init_process_group(backend="nccl", timeout=120)
        r = d.get_rank()
        with pg.device(f"GPU:{r}"):
            x = pg.constant(np.ones((1000, 100), np.float32))
        for _ in range(3):
            assert d.all_reduce(x).numpy()[0, 0] == 2
        d.barrier()
        if r == 1:                           # dies while rank 0 waits in the collective
            time.sleep(1.0)
            os.kill(os.getpid(), signal.SIGKILL)
        y = d.all_reduce(x)                  # rank 1 never joins: NCCL waits on the GPU
        start = time.monotonic()
        expect(errors.UnavailableError, y.numpy, "aborted")
        assert time.monotonic() - start < 30
        expect(errors.FailedPreconditionError, lambda: d.all_reduce(x), "rank(s) [1]", "died")
        with pg.device("GPU:0"):             # the GPU still works
            assert np.array_equal((x + x).numpy(), np.full((1000, 100), 2, np.float32))
        print("OK", flush=True)
    """
    procs = _spawn(tmp_path, body, 2)
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert procs[1].returncode == -signal.SIGKILL, outs[1]
    assert procs[0].returncode == 0 and "OK" in outs[0], outs[0]


def _run_cxx_program(tmp_path, name: str, sources: list[str]) -> subprocess.CompletedProcess:
    """Builds `sources` (paths under the repository, .cu files read as C++)
    with the host C++ compiler against tests/cuda_sim's stand-in of the CUDA
    runtime and runs the program; skips without a compiler."""
    import shutil
    cxx = shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler (CXX, c++ or g++) to build the test program")
    exe = tmp_path / name
    cmd = [cxx, "-std=c++17", "-O0", "-pthread", f"-I{ROOT}/tests/cuda_sim",
           f"-I{ROOT}/c_api/include", f"-I{ROOT}/reference_device/cuda"]
    for src in sources:
        cmd += ["-x", "c++", f"{ROOT}/{src}"]
    built = subprocess.run(cmd + ["-o", str(exe)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-3000:]
    return subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)


def test_waits_behind_an_abandoned_collective_end_on_a_simulated_runtime(tmp_path):
    """The CUDA plugin's wait_work (reference_device/cuda/wait_work.cu), built
    against the host-only stand-in of the CUDA runtime (tests/cuda_sim): a
    task that never ends plays the NCCL kernel of a collective whose peer is
    alive but never calls. A wait for the stream, or for an event behind the
    task, returns the collective's error once the watchdog abandons it; when
    the task ends after all, waits complete again (wait_sim.cc). What the
    hung-rank test below checks on two GPUs, here on every machine."""
    ran = _run_cxx_program(tmp_path, "wait_sim", ["reference_device/cuda/wait_work.cu",
                                                  "tests/cuda_sim/wait_sim.cc"])
    assert ran.returncode == 0 and "wait_sim: OK" in ran.stdout, ran.stdout + ran.stderr


def test_work_joined_at_exit_outlives_neither_its_caller_nor_the_process(tmp_path):
    """The CUDA plugin runs every ncclCommAbort through run_joined_at_exit
    (reference_device/cuda/exit_joined.cc): an abort still running as the
    process exits crashed a surviving rank (NCCL's proxy thread freed device
    memory after the CUDA runtime inside NCCL was gone), its caller being
    the store watcher, a daemon thread Python does not wait for. Built alone
    with the host compiler (exit_joined_sim.cc): the work runs on its own
    thread, its future is ready once it returned, ended threads are joined,
    and work still running when main returns ends before the process does."""
    ran = _run_cxx_program(tmp_path, "exit_joined_sim", ["reference_device/cuda/exit_joined.cc",
                                                         "tests/cuda_sim/exit_joined_sim.cc"])
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert ran.stdout.splitlines() == ["exit_joined_sim: OK", "exit_joined_sim: late work ended"], (
        ran.stdout + ran.stderr)


@needs_2_gpus
@pytest.mark.parametrize("size", [64, 100_000])
def test_nccl_backend_a_rank_that_does_not_call_times_out(tmp_path, size):
    body = f"""
        SIZE = {size}
    """ + """
        import faulthandler
        faulthandler.dump_traceback_later(25, exit=True)    # a hang shows where it is
        d.init_process_group(backend="nccl", timeout=120)
        r = d.get_rank()
        with pg.device(f"GPU:{r}"):
            x = pg.constant(np.ones(SIZE, np.float32))
        assert d.all_reduce(x).numpy()[0] == 2
        if r == 0:
            y = d.all_reduce(x, timeout=2)
            print("enqueued", flush=True)
            start = time.monotonic()
            expect(errors.DeadlineExceededError, y.numpy, "timed out after 2 s")
            assert time.monotonic() - start < 20
            expect(errors.FailedPreconditionError, lambda: d.all_reduce(x).numpy(), "aborted")
        d.barrier()                          # rank 1 skipped the collective
        store = d.group.current().store
        if r == 1:                           # rank 0 hosts the store: it leaves last
            store.set("rank 1 leaves", b"")
        else:
            store.get("rank 1 leaves", 60)
        print("OK", flush=True)
        os._exit(0)                          # rank 1's communicator lost its peer
    """
    ok(launch(tmp_path, body, 2, timeout=180), 2)


@needs_2_gpus
@pytest.mark.parametrize("overlap", [[], ["--overlap"]], ids=["plain", "overlap"])
def test_nccl_data_parallel_digits_on_two_gpus(tmp_path, overlap):
    pytest.importorskip("sklearn", reason="examples/train_digits.py needs scikit-learn")
    example = os.path.join(ROOT, "examples", "train_digits_ddp.py")
    args = ["--epochs", "1", "--steps", "4", "--batch-size", "24",
            "--seed", str(np.random.default_rng().integers(1000)), "--bucket-bytes", "20000"]
    ddp = subprocess.run([sys.executable, "-m", "pluggable.distribute.run", "--nproc", "2",
                          example, *args, *overlap, "--save", str(tmp_path / "ddp{rank}.npz")],
                         cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    assert ddp.returncode == 0, ddp.stdout + ddp.stderr
    assert "[rank 0] 2 replica(s) on GPU:0" in ddp.stdout, ddp.stdout
    one = subprocess.run([sys.executable, example, *args, "--device", "GPU:0",
                          "--save", str(tmp_path / "one.npz")],
                         cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    assert one.returncode == 0, one.stdout + one.stderr
    a, b, c = (np.load(tmp_path / f) for f in ("ddp0.npz", "ddp1.npz", "one.npz"))
    for k in (k for k in a.files if k.startswith("w")):
        assert not np.array_equal(a[k], a["i" + k[1:]]), k          # it trained
        assert np.array_equal(a[k], b[k]), k                      # identical replicas
        np.testing.assert_allclose(a[k], c[k], rtol=1e-4, atol=1e-5, err_msg=k)
