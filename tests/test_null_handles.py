"""Plugins whose handles are NULL, or one value repeated, are legal, as in
TensorFlow: the core keys its state on its own objects, never on a handle.

tests/plugins/null_device.c is an asynchronous device (a worker thread runs
one FIFO for the whole plugin) whose SP_Stream, SP_Event, SP_Timer and
device_handle are all NULL for its two devices; built with -DSHARED_HANDLES
every stream, event and timer is one non-NULL value and the devices share a
device_handle. Each variant runs, in a child process, asynchronous ops
(checked to be still pending while the plugin's queue is held), events
(record / wait / query / synchronise), timers, the caching allocator's
stream-ordered reuse and a two-device graph, against numpy on fresh random
inputs; and ``python -m pluggable check`` certifies it."""
from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

from broken_plugins import clean_env, run_child
from plugin_build import build_plugin

HERE = pathlib.Path(__file__).resolve().parent
SRC = HERE / "plugins" / "null_device.c"
VARIANTS = {"null": (), "shared": ("-DSHARED_HANDLES",)}


def _plugin(variant: str) -> pathlib.Path:
    return build_plugin(SRC, f"null_device_{variant}", extra_flags=VARIANTS[variant])


EXTRA = r"""
import ctypes, gc, threading, time
so = ctypes.CDLL(PATH)
so.nulldev_done.restype = ctypes.c_uint64
rng = np.random.default_rng()
dev0, dev1 = pg.get_device("NULL_DEVICE:0"), pg.get_device("NULL_DEVICE:1")
ffi = pg._core.ffi
handle = lambda h: int(ffi.cast("uintptr_t", h))
got = out["got"] = {}

# Asynchronous ops on both devices: launched while the queue is held, they
# have not run when the calls return; once it runs, they match numpy.
xs = [rng.standard_normal(n).astype(np.float32) for n in (1, 333, 4099)]
so.nulldev_hold(1)
done_before = so.nulldev_done()
ys = []
for i, x in enumerate(xs):
    with pg.device(f"NULL_DEVICE:{i % 2}"):
        with pg.testing.expect_kernel("Square", "NULL_DEVICE"):
            ys.append(pg.math.square(pg.math.negative(pg.nn.relu(pg.constant(x)))))
got["pending_while_held"] = so.nulldev_done() == done_before
so.nulldev_hold(0)
got["ops"] = [bool(np.array_equal(y.numpy(), np.maximum(x, 0) ** 2)) for x, y in zip(xs, ys)]
got["op_devices"] = sorted({y.device.rsplit("/", 1)[-1] for y in ys})

# Events: recorded behind held work, pending; waited on by another stream;
# complete after synchronize; the copies they order carry the data.
n = 1 << 20
s1, s2 = dev0.create_stream(), dev0.create_stream()
got["stream_handles"] = sorted({handle(s._s) for s in (s1, s2)})
data = rng.integers(0, 256, n, dtype=np.uint8)
back = np.zeros(n, np.uint8)
a, b = dev0.allocate(n), dev0.allocate(n)
ev = dev0.create_event()
got["event_handles"] = sorted({handle(ev._e), handle(dev0.create_event()._e)})
so.nulldev_hold(1)
a.copy_from_host(data, stream=s1)
s1.record(ev)
got["event_pending"] = ev.status()
s2.wait(ev)
dev0.copy(b, a, stream=s2)
b.copy_to_host(back, stream=s2)
so.nulldev_hold(0)
ev.synchronize()
got["event_done"] = ev.status()
s2.synchronize()
got["event_ordered_copy"] = bool(np.array_equal(back, data))

# Timers (NULL or shared handles): a copy's time, not more than the wall.
tm = dev0.create_timer()
got["timer_handle_seen"] = handle(tm._t)
buf = dev0.allocate(8 << 20)
t0 = time.perf_counter_ns()
tm.start(s1)
buf.copy_from_host(np.ones(8 << 20, np.uint8), stream=s1)
tm.stop(s1)
s1.synchronize()
wall = time.perf_counter_ns() - t0
got["timer_ok"] = 0 < tm.nanoseconds() <= wall

# The caching allocator: memory another stream used is reused only after
# that stream's work is done, though every stream's handle is the same.
SIZE = 1 << 20
gate = threading.Event()
s1.host_callback(lambda: gate.wait(30))
blk = dev0.allocate(SIZE)
blk_addr = blk.address
blk.copy_from_host(rng.integers(0, 255, SIZE, dtype=np.uint8), stream=s2)
del blk
gc.collect()
try:
    other = dev0.allocate(SIZE)
    got["not_reused_while_pending"] = other.address != blk_addr
    other_addr = other.address
finally:
    gate.set()
s2.synchronize()
del other
gc.collect()
again = [dev0.allocate(SIZE) for _ in range(2)]
got["reused_after"] = {x.address for x in again} == {blk_addr, other_addr}

# A graph across the two devices (event-ordered copies within the plugin).
@pg.function
def f(x):
    with pg.device("NULL_DEVICE:0"):
        h = pg.nn.relu(x)
    with pg.device("NULL_DEVICE:1"):
        return pg.math.negative(pg.math.square(h))
x = rng.standard_normal((64, 33)).astype(np.float32)
got["graph"] = [bool(np.array_equal(f(pg.constant(x * k)).numpy(),
                                    -np.maximum(x * k, 0) ** 2)) for k in (1.0, -2.0, 3.0)]
dev0.synchronize()
dev1.synchronize()
"""


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_handles_null_or_repeated_run_async_work(variant):
    lib = _plugin(variant)
    res = run_child([lib], extra=f"PATH = {str(lib)!r}\n" + EXTRA)
    rec = res["records"][0]
    assert rec["status"] == "loaded" and rec["device_count"] == 2, rec
    assert "extra_error" not in res, res["extra_error"]
    got = res["got"]
    one = [0] if variant == "null" else got["stream_handles"]
    assert len(one) == 1, got
    assert got["stream_handles"] == one and got["event_handles"] == one, got
    assert (got["timer_handle_seen"] == 0) is (variant == "null"), got
    assert got["pending_while_held"] and got["ops"] == [True] * 3, got
    assert got["op_devices"] == ["device:NULL_DEVICE:0", "device:NULL_DEVICE:1"], got
    assert got["event_pending"] == "pending" and got["event_done"] == "complete", got
    assert got["event_ordered_copy"] and got["timer_ok"], got
    assert got["not_reused_while_pending"] and got["reused_after"], got
    assert got["graph"] == [True] * 3, got
    assert res["health"] == {"MY_DEVICE:0": True, "CPU:0": True}, res["health"]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_check_certifies_a_plugin_with_null_or_repeated_handles(variant):
    lib = _plugin(variant)
    proc = subprocess.run([sys.executable, "-m", "pluggable", "check", str(lib)],
                          capture_output=True, text=True, timeout=600, cwd=HERE.parent,
                          env=clean_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    kind = "NULL" if variant == "null" else "shared"
    assert f"{kind} event handles (legal)" in proc.stdout, proc.stdout
    assert "PASSED" in proc.stdout and " 0 failed" in proc.stdout, proc.stdout
