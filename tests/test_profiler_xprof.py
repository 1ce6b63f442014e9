"""TensorBoard's profile plugin (the ``xprof`` package) reads our profile.

A small MY_DEVICE workload is profiled on fresh random inputs and its
``.xplane.pb`` converted with xprof's own converter
(``xprof.convert.raw_to_tool_data``, what the profile plugin's server runs
for the trace viewer); every op must come back on the host and device
tracks with the times we recorded. The XSpace is decoded here with the
proto package, not with the profiler's reader.

xprof is an optional test extra (``pip install .[profile-viewer]`` or
``pip install xprof``; it may live outside site-packages, on PYTHONPATH).
"""
from __future__ import annotations

import json
import pathlib
import time

import numpy as np
import pytest

import pluggable as pg
from pluggable.framework import proto

try:
    from xprof.convert import raw_to_tool_data
except ImportError as exc:  # the extra is not installed
    pytest.skip(f"xprof (TensorBoard's profile plugin) is not importable here, so it cannot "
                f"read the profile: {exc}; pip install xprof to run these tests",
                allow_module_level=True)

OPS = ("AddV2", "Mul", "MatMul", "Relu")
DEVICE_PLANE = "/device:CUSTOM:MY_DEVICE:0"   # how TensorBoard shows MY_DEVICE:0


@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    """n steps of AddV2 -> Mul -> MatMul -> Relu on MY_DEVICE:0."""
    rng = np.random.default_rng()
    n = int(rng.integers(2, 5))
    k = int(rng.integers(4, 17))
    a = rng.standard_normal((k, k)).astype(np.float32)
    b = rng.standard_normal((k, k)).astype(np.float32) / k
    logdir = tmp_path_factory.mktemp("xprof")
    before = time.time_ns()
    with pg.profiler.Profile(logdir) as session:
        with pg.device("MY_DEVICE:0"):
            x, y = pg.constant(a), pg.constant(b)
            with pg.testing.expect_kernel("MatMul", "MY_DEVICE", n), \
                    pg.testing.expect_kernel("Relu", "MY_DEVICE", n):
                ref = a
                for _ in range(n):
                    x = pg.raw_ops.Relu(features=pg.raw_ops.MatMul(
                        a=pg.raw_ops.Mul(x=pg.raw_ops.AddV2(x=x, y=y), y=y), b=y))
                    ref = np.maximum(((ref + b) * b) @ b, 0)
            got = x.numpy()
    after = time.time_ns()
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
    result = session.result
    assert result.errors == []
    space = proto.decode(proto.XSpace, pathlib.Path(result.xplane_path).read_bytes(),
                         strict=True)
    return {"result": result, "space": space, "n": n, "k": k, "before": before,
            "after": after}


def _start_time_ns(space) -> int:
    host = next(p for p in space.planes if p.name == "/host:CPU")
    names = {i: m.name for i, m in host.stat_metadata.items()}
    (start,) = [s.int64_value for s in host.stats if names[s.metadata_id] == "profile_start_time"]
    return start


def _plane_events(space, name: str) -> list[tuple[str, int, int]]:
    """(name, start, duration) of a plane's events, in ns from line time 0."""
    plane = next(p for p in space.planes if p.name == name)
    return sorted((plane.event_metadata[ev.metadata_id].name,
                   line.timestamp_ns + ev.offset_ps // 1000, ev.duration_ps // 1000)
                  for line in plane.lines for ev in line.events)


@pytest.fixture(scope="module")
def trace_viewer(profile):
    """xprof's trace viewer JSON of the profile: (processes by pid, events)."""
    data, content_type = raw_to_tool_data.xspace_to_tool_data(
        [profile["result"].xplane_path], "trace_viewer", {"use_saved_result": False})
    assert data, "xprof's trace_viewer tool returned nothing"
    assert content_type == "application/json"
    events = json.loads(data)["traceEvents"]
    processes = {e["pid"]: e["args"]["name"] for e in events
                 if e.get("ph") == "M" and e.get("name") == "process_name"}
    return processes, [e for e in events if e.get("ph") == "X"]


def test_xprof_offers_its_tools_for_the_file(profile):
    tools = raw_to_tool_data.xspace_to_tool_names([profile["result"].xplane_path])
    assert any(t.startswith("trace_viewer") for t in tools), tools
    assert "framework_op_stats" in tools and "overview_page" in tools, tools


def test_host_and_device_tracks_carry_every_op(profile, trace_viewer):
    processes, events = trace_viewer
    n = profile["n"]
    assert set(processes.values()) == {"/host:CPU", DEVICE_PLANE}, processes
    host_pid = next(p for p, name in processes.items() if name == "/host:CPU")
    device_pid = next(p for p, name in processes.items() if name == DEVICE_PLANE)
    shapes = f"[{profile['k']},{profile['k']}]"
    for op in OPS:
        calls = [e for e in events if e["pid"] == host_pid and e["name"] == op]
        work = [e for e in events if e["pid"] == device_pid and e["name"] == op]
        assert len(calls) == n and len(work) == n, (op, len(calls), len(work))
        for e in calls:  # our span's stats come through as the event's args
            assert e["args"]["category"] == "op" and e["args"]["device"] == "MY_DEVICE:0"
            assert e["args"]["shapes"].startswith(shapes + ",") or e["args"]["shapes"] == shapes
            assert set(e["args"]["dtypes"].split(",")) == {"float32"}
        assert all("correlation_id" in e["args"] for e in work)
    # The data dependence shows on the device track, in xprof's times too.
    chain = sorted((e for e in events if e["pid"] == device_pid and e["name"] in OPS),
                   key=lambda e: e["ts"])
    assert [e["name"] for e in chain] == list(OPS) * n


def test_times_are_the_recorded_ones(profile, trace_viewer):
    """xprof's timestamps (microseconds from line time 0) are ours to the
    nanosecond, and lie inside the profiled interval of the Unix clock."""
    space = profile["space"]
    start = _start_time_ns(space)
    assert profile["before"] <= start <= profile["after"]
    processes, events = trace_viewer
    for plane_name in ("/host:CPU", DEVICE_PLANE):
        pid = next(p for p, name in processes.items() if name == plane_name)
        theirs = sorted((e["name"], round(e["ts"] * 1000), round(e["dur"] * 1000))
                        for e in events if e["pid"] == pid)
        ours = _plane_events(space, plane_name)
        assert len(theirs) == len(ours), plane_name
        for (name, ts, dur), (o_name, o_ts, o_dur) in zip(theirs, ours):
            assert name == o_name and abs(ts - o_ts) <= 1 and abs(dur - o_dur) <= 1, \
                (plane_name, name, ts, o_ts)
            assert profile["before"] <= start + ts <= start + ts + dur <= profile["after"]


def test_framework_op_stats_count_every_op_call(profile):
    """TensorBoard's "Framework op stats" table: one host row per op, with
    our call count and our total time."""
    data, _ = raw_to_tool_data.xspace_to_tool_data(
        [profile["result"].xplane_path], "framework_op_stats", {"use_saved_result": False})
    table = json.loads(data)[0]
    ids = [c["id"] for c in table["cols"]]
    rows = [{k: c.get("v") for k, c in zip(ids, row["c"])} for row in table["rows"]]
    host = {r["operation"]: r for r in rows if r["host_or_device"] == "Host"}
    ours = [e for e in _plane_events(profile["space"], "/host:CPU") if e[0] in OPS]
    for op in OPS:
        row = host.get(op)
        assert row is not None, (op, sorted(host))
        assert row["type"] == op and row["occurrences"] == profile["n"], row
        total_ns = sum(dur for name, _, dur in ours if name == op)
        assert abs(row["total_time"] * 1000 - total_ns) <= profile["n"], (op, row, total_ns)
