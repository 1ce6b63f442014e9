"""Memory used by other streams (record_stream) and NULL plugin handles
(legal for streams, events and timers, as in TensorFlow)."""
from __future__ import annotations

import gc
import threading
import types
import weakref

import numpy as np
import pytest

import pluggable as pg
from pluggable.framework import errors
from broken_plugins import HERE, build, run_child
from plugin_build import build_plugin

SIZE = 1 << 20


def _device():
    try:
        return pg.get_device("MY_DEVICE:0")
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"MY_DEVICE (the host reference plugin) is not available: {exc}")


def test_memory_used_by_another_stream_waits_for_it(rng):
    dev = _device()
    s = dev.create_stream()
    gate = threading.Event()
    s.host_callback(lambda: gate.wait(30))   # holds the stream here
    a = dev.allocate(SIZE)
    a_addr = a.address
    host = rng.integers(0, 255, size=SIZE, dtype=np.uint8)
    a.copy_from_host(host, stream=s)         # queued behind the gate
    del a
    gc.collect()
    try:
        b = dev.allocate(SIZE)
        # The copy into a's memory has not run yet: that memory must not be
        # handed out again (the default stream does not wait for s).
        assert b.address != a_addr
        b_addr = b.address
    finally:
        gate.set()
    s.synchronize()
    del b
    gc.collect()
    again = [dev.allocate(SIZE) for _ in range(2)]
    # Once s is past the copy, a's memory is reused, not a new block.
    assert {x.address for x in again} == {a_addr, b_addr}


def test_recorded_stream_lives_until_the_memory_is_freed(rng):
    dev = _device()
    s = dev.create_stream()
    alive = weakref.ref(s)
    a = dev.allocate(SIZE)
    host = rng.integers(0, 255, size=SIZE, dtype=np.uint8)
    a.copy_from_host(host, stream=s)
    del s
    gc.collect()
    # The allocator records an event on s when a is freed: s must still exist.
    assert alive() is not None
    back = np.empty_like(host)
    a.copy_to_host(back)
    np.testing.assert_array_equal(back, host)
    del a
    gc.collect()
    assert alive() is None
    c = dev.allocate(SIZE)   # the parked memory is usable again
    c.copy_from_host(host)
    c.copy_to_host(back)
    np.testing.assert_array_equal(back, host)


def test_record_stream_of_another_device_is_refused():
    dev = _device()
    a = dev.allocate(16)

    class Other:  # a stream of another device
        device = types.SimpleNamespace(short_name="OTHER:0", name="/device:OTHER:0")
    with pytest.raises(errors.InvalidArgumentError, match="record_stream"):
        a.record_stream(Other())


def test_null_stream_event_and_timer_handles_are_legal():
    """A plugin whose streams, timers and events are NULL: streams and
    timers work, events are created, recorded and waited for, and ops (an
    event each from the core's pool, every one NULL) run and read back
    right."""
    lib = build("null_handles")
    extra = """
import numpy as np
dev = pg.get_device("NULLH:0")
got = {}
s1, s2 = dev.create_stream(), dev.create_stream()
got["streams_null"] = [int(pg._core.ffi.cast("uintptr_t", s._s)) for s in (s1, s2)]
tm = dev.create_timer()
tm.start(s1)
tm.stop(s1)
s1.synchronize()
got["timer_ns"] = tm.nanoseconds()
ev = dev.create_event()
got["event_null"] = int(pg._core.ffi.cast("uintptr_t", ev._e))
s1.record(ev)
s2.wait(ev)
ev.synchronize()
got["event_status"] = ev.status()
rng = np.random.default_rng()
ok = []
for n in (1, 257, 4096):
    x = rng.standard_normal(n).astype(np.float32)
    with pg.device("NULLH:0"):
        y = pg.math.negative(pg.math.negative(pg.math.negative(pg.constant(x))))
    ok.append(bool(np.array_equal(y.numpy(), -x)))
dev.synchronize()
got["ops_ok"] = ok
out["got"] = got
"""
    res = run_child([lib], extra=extra)
    assert "extra_error" not in res, res["extra_error"]
    assert res["records"][0]["status"] == "loaded", res["records"][0]
    got = res["got"]
    assert got["streams_null"] == [0, 0], got
    assert got["timer_ns"] >= 1, got
    assert got["event_null"] == 0 and got["event_status"] == "complete", got
    assert got["ops_ok"] == [True, True, True], got
    assert res["health"] == {"MY_DEVICE:0": True, "CPU:0": True}, res["health"]


def test_null_default_stream_loads_and_runs_ops():
    """TensorFlow loads a plugin whose default stream is NULL (its own sample
    plugin is one); so does the core, and ops run on it."""
    lib = build_plugin(HERE / "null_handles.c", "null_handles_default",
                       extra_flags=(f"-I{HERE}", "-DNULL_DEFAULT_STREAM"))
    extra = """
import numpy as np
x = np.random.default_rng().standard_normal(257).astype(np.float32)
with pg.device("NULLH:0"):
    y = pg.math.negative(pg.constant(x))
out["ok"] = bool(np.array_equal(y.numpy(), -x))
out["dev"] = y.device
"""
    res = run_child([lib], extra=extra)
    rec = res["records"][0]
    assert rec["status"] == "loaded", rec
    assert "extra_error" not in res, res["extra_error"]
    assert res["ok"] and "NULLH" in res["dev"], res
    assert res["health"] == {"MY_DEVICE:0": True, "CPU:0": True}, res["health"]


def test_hostile_plugin_answers_are_checked(rng):
    """Each answer of tests/broken_plugins/hostile_answers.c would corrupt
    memory or mislead if used as given."""
    lib = build("hostile_answers")
    n = 64 * 1024
    seed = int(rng.integers(0, 2**31))
    extra = f"""
import ctypes
import numpy as np
from pluggable._core import lib as core
from pluggable.framework import errors
so = ctypes.CDLL({str(lib)!r})
dev = pg.get_device("HOSTILE_ANSWERS:0")
data = np.random.default_rng({seed}).standard_normal({n}).astype(np.float32)
# 1: a short allocation is refused, the memory never used.
so.set_mode(1)
dev.empty_cache()
try:
    dev.allocate(1 << 20)
    out["short"] = "no error"
except errors.OpError as exc:
    out["short"] = type(exc).__name__ + ": " + str(exc)
# 2: every host callback run twice: the second run is ignored.
so.set_mode(2)
before = core.pg_host_callbacks_ignored()
ok = True
with pg.device("HOSTILE_ANSWERS:0"):
    for _ in range(20):
        x = pg.raw_ops.Neg(x=pg.constant(data))
        ok &= bool(np.array_equal(x.numpy(), -data))
out["twice_ok"] = ok
out["ignored"] = core.pg_host_callbacks_ignored() - before
# 3, 4: memory-usage answers that make no sense are ignored.
so.set_mode(3)
out["usage_free_gt_total"] = dev.memory_usage()
so.set_mode(4)
out["usage_negative"] = dev.memory_usage()
so.set_mode(0)
out["usage_good"] = dev.memory_usage()
# Statistics written past the documented struct: only known fields, and the
# negative count dropped.
out["stats"] = dev.allocator_stats()
"""
    res = run_child([lib], extra=extra)
    assert "extra_error" not in res, res["extra_error"]
    assert res["records"][0]["status"] == "loaded", res["records"][0]
    short = res["short"]
    assert short.startswith("InternalError") and "returned a buffer of 524288 bytes" in short, \
        short
    assert res["twice_ok"] and res["ignored"] >= 20, res
    assert res["usage_free_gt_total"] is None and res["usage_negative"] is None
    assert res["usage_good"] == [1000, 2000]
    stats = res["stats"]
    assert stats["bytes_in_use"] is None and stats["num_allocs"] >= 1, stats
    assert set(stats) == {"num_allocs", "bytes_in_use", "peak_bytes_in_use",
                          "largest_alloc_size", "bytes_limit", "bytes_reserved",
                          "peak_bytes_reserved", "largest_free_block_bytes"}
    assert res["health"] == {"MY_DEVICE:0": True, "CPU:0": True}, res["health"]


def test_null_capture_stream_is_created_once():
    """A capture stream whose handle is NULL is still the one created: two
    captures on a plugin whose every stream is NULL make one capture stream
    (not one per capture), and the graphs end_capture gave (NULL) are
    destroyed."""
    lib = build("null_capture")
    extra = f"""
import ctypes
import numpy as np
from pluggable.runtime.capture import DeviceGraph
so = ctypes.CDLL({str(lib)!r})
dev = pg.get_device("NULLH:0")
before = so.null_streams_made()
with pg.device("NULLH:0"):
    x = pg.constant(np.random.default_rng().standard_normal(64).astype(np.float32))
graphs = [DeviceGraph.capture(dev, lambda t: [pg.math.negative(t)], [x], warmup=0)
          for _ in range(2)]
out["new_streams"] = so.null_streams_made() - before
del graphs
import gc; gc.collect()
out["graphs_destroyed"] = so.null_graphs_destroyed()
"""
    res = run_child([lib], extra=extra)
    assert res["records"][0]["status"] == "loaded", res["records"][0]
    assert "extra_error" not in res, res["extra_error"]
    assert res["new_streams"] == 1, res
    assert res["graphs_destroyed"] == 2, res
    assert res["health"] == {"MY_DEVICE:0": True, "CPU:0": True}, res["health"]
