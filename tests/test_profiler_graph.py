"""Graph execution under the profiler: a span per node run by the planned
executor and per run or replay, on the host track, tied to the device work
of each node on its device's track (trace JSON and XSpace, decoded here with
json and the proto package)."""
from __future__ import annotations

import gzip
import json
import pathlib

import numpy as np
import pytest

import pluggable as pg
from pluggable.framework import proto
from pluggable.graph import device_capture
from pluggable.runtime import capture, trace

DEV = "MY_DEVICE:0"
OPS = ("AddV2", "Mul", "MatMul")


def _step(x, y):
    return pg.raw_ops.MatMul(a=pg.raw_ops.Mul(x=pg.raw_ops.AddV2(x=x, y=y), y=y), b=y)


def _profile_function(tmp_path, rng, f, runs: int):
    a = rng.standard_normal((8, 8)).astype(np.float32)
    b = rng.standard_normal((8, 8)).astype(np.float32)
    with pg.device(DEV):
        x, y = pg.constant(a), pg.constant(b)
        f(x, y)  # traced and compiled before the profile
        with pg.profiler.Profile(tmp_path) as session:
            for _ in range(runs):
                out = f(x, y)
            got = out.numpy()
        graph = f.get_concrete_function(x, y).optimized_graph
    np.testing.assert_allclose(got, ((a + b) * b) @ b, rtol=1e-4, atol=1e-4,
                               err_msg=rng.seed_text)
    return session.result, graph


def _trace(result) -> dict:
    with gzip.open(result.trace_path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


def _processes(trace_json: dict) -> dict[int, str]:
    return {e["pid"]: e["args"]["name"] for e in trace_json["traceEvents"]
            if e["ph"] == "M" and e["name"] == "process_name"}


def _plane_events(space, name: str) -> list[dict]:
    plane = next(p for p in space.planes if p.name == name)
    stat_names = {k: m.name for k, m in plane.stat_metadata.items()}
    out = []
    for line in plane.lines:
        for ev in line.events:
            stats = {stat_names[s.metadata_id]: getattr(s, s.WhichOneof("value"))
                     for s in ev.stats}
            start = line.timestamp_ns + ev.offset_ps // 1000
            out.append({"name": plane.event_metadata[ev.metadata_id].name, "line": line.id,
                        "start": start, "end": start + ev.duration_ps // 1000, "stats": stats})
    return out


def test_every_graph_node_is_a_span_tied_to_its_device_track(tmp_path, rng):
    runs = int(rng.integers(2, 5))
    f = pg.function(_step)
    result, graph = _profile_function(tmp_path, rng, f, runs)
    assert result.errors == []
    nodes = {n.name: n for n in graph.nodes if n.op in OPS}
    assert sorted(n.op for n in nodes.values()) == sorted(OPS), [n.op for n in graph.nodes]

    # --- the trace JSON: node spans on a host thread, flows to MY_DEVICE:0
    tj = _trace(result)
    procs = _processes(tj)
    events = tj["traceEvents"]
    spans = [e for e in events if e["ph"] == "X" and e.get("cat") == "graph"]
    for name, node in nodes.items():
        mine = [e for e in spans if e["args"].get("node") == name]
        assert len(mine) == runs, (name, len(mine))
        for e in mine:
            assert e["name"] == node.op and e["args"]["device"] == DEV
            assert e["args"]["shapes"] == "[8,8],[8,8]"
            assert e["args"]["dtypes"] == "float32,float32"
            assert procs[e["pid"]] == "/host:CPU"
    run_spans = [e for e in events if e["ph"] == "X" and e.get("cat") == "graph_run"]
    assert len(run_spans) == runs and all(e["args"]["kind"] == "run" for e in run_spans)
    assert {e["name"] for e in run_spans} == {graph.name}
    for e in spans:  # every node span lies inside a run span of its thread
        assert any(r["tid"] == e["tid"] and r["ts"] <= e["ts"] and
                   e["ts"] + e["dur"] <= r["ts"] + r["dur"] + 0.002 for r in run_spans), e
    starts = {(e["pid"], e["tid"], e["id"]): e for e in events if e["ph"] == "s"}
    by_id = {e["id"]: e for e in events if e["ph"] == "s"}
    assert starts
    device_x = [e for e in events if e["ph"] == "X" and procs[e["pid"]] == f"/device:{DEV}"]
    for name, node in nodes.items():
        mine = [e for e in spans if e["args"].get("node") == name]
        for span in mine:
            # a flow starts inside this node span and ends on a MY_DEVICE:0
            # event named after the node's op
            tied = [fe for fe in events if fe["ph"] == "f" and
                    procs[fe["pid"]] == f"/device:{DEV}" and
                    by_id[fe["id"]]["tid"] == span["tid"] and
                    span["ts"] <= by_id[fe["id"]]["ts"] <= span["ts"] + span["dur"]]
            assert tied, (name, span)
            for fe in tied:
                dev = [d for d in device_x if d["tid"] == fe["tid"] and
                       d["ts"] <= fe["ts"] <= d["ts"] + d["dur"]]
                assert any(d["name"] == node.op for d in dev), (name, fe)

    # --- the XSpace: the same spans on /host:CPU; each node's device event
    # on /device:MY_DEVICE:0 was enqueued (plugin host plane) inside its span
    space = proto.decode(proto.XSpace, pathlib.Path(result.xplane_path).read_bytes(),
                         strict=True)
    host = [e for e in _plane_events(space, "/host:CPU") if e["stats"].get("category") == "graph"]
    device = _plane_events(space, f"/device:CUSTOM:{DEV}")
    launches = {e["stats"]["correlation_id"]: e
                for e in _plane_events(space, "/host:MY_DEVICE")}
    for name, node in nodes.items():
        mine = [e for e in host if e["stats"].get("node") == name]
        assert len(mine) == runs
        for span in mine:
            assert span["stats"]["device"] == DEV
            inside = [d for d in device if d["name"] == node.op and
                      span["start"] <= launches[d["stats"]["correlation_id"]]["start"]
                      <= span["end"] and launches[d["stats"]["correlation_id"]]["line"]
                      == span["line"]]
            assert len(inside) == 1, (name, span)
            assert inside[0]["start"] <= inside[0]["end"]
    row = {r.name: r for r in result.summary.rows if r.device == DEV}
    for op in OPS:  # no eager call: every count and device event is a node's
        assert row[op].device_events == runs and row[op].count == runs


def test_graph_spans_are_recorded_only_while_a_sink_is_installed(rng):
    f = pg.function(_step)
    trace.set_sink(None)
    with pg.device(DEV):
        x = pg.constant(rng.standard_normal((8, 8)).astype(np.float32))
        f(x, x)
        assert trace.enabled[0] is False
        trace_sink = []
        # a sink installed for one run only sees that run's spans
        trace.set_sink(lambda *span: trace_sink.append(span))
        try:
            f(x, x)
        finally:
            trace.set_sink(None)
        f(x, x)
    cats = [s[0] for s in trace_sink]
    assert cats.count("graph") >= len(OPS) and cats.count("graph_run") == 1


@pytest.fixture
def capturing(monkeypatch):
    if not capture.supported(pg.get_device(DEV)):
        pytest.skip("the host plugin was built without stream capture")
    monkeypatch.setattr(device_capture, "_policy", ["off"])
    pg.config.set_graph_capture("device")


def test_replays_of_a_captured_graph_are_spans(capturing, tmp_path, rng):
    f = pg.function(_step)
    a = rng.standard_normal((8, 8)).astype(np.float32)
    with pg.device(DEV):
        x = pg.constant(a)
        for _ in range(device_capture.WARMUP + 2):
            f(x, x)  # warm-up runs, the capture, a replay
        with pg.profiler.Profile(tmp_path) as session:
            out = f(x, x)
            got = out.numpy()
    np.testing.assert_allclose(got, ((a + a) * a) @ a, rtol=1e-4, atol=1e-4,
                               err_msg=rng.seed_text)
    events = _trace(session.result)["traceEvents"]
    runs = [e for e in events if e["ph"] == "X" and e.get("cat") == "graph_run"]
    assert [e["args"]["kind"] for e in runs] == ["replay"] and runs[0]["args"]["device"] == DEV
    assert not [e for e in events if e["ph"] == "X" and e.get("cat") == "graph"]


def test_replays_of_captured_partitions_are_spans(monkeypatch, tmp_path, rng):
    """A function with a CPU op between two partitions: each partition's
    replay is a run span of kind "replay"; the CPU node is a node span."""
    if not capture.supported(pg.get_device(DEV)):
        pytest.skip("the host plugin was built without stream capture")
    monkeypatch.setattr(device_capture, "_policy", ["partitions"])

    def fn(x):
        with pg.device("CPU:0"):
            h = pg.exp(x * 0.5)
        return pg.tanh(h) - 1.0

    f = pg.function(fn)
    a = rng.standard_normal((4, 4)).astype(np.float32)
    with pg.device(DEV):
        x = pg.constant(a)
        for _ in range(device_capture.WARMUP + 2):
            f(x)
        with pg.profiler.Profile(tmp_path) as session:
            got = f(x).numpy()
    np.testing.assert_allclose(got, np.tanh(np.exp(a * 0.5)) - 1.0, rtol=1e-5, atol=1e-6,
                               err_msg=rng.seed_text)
    events = _trace(session.result)["traceEvents"]
    runs = [e for e in events if e["ph"] == "X" and e.get("cat") == "graph_run"]
    assert [e["args"].get("kind") for e in runs].count("replay") >= 1, runs
    nodes = [e["name"] for e in events if e["ph"] == "X" and e.get("cat") == "graph"]
    assert any("Exp" in n for n in nodes), nodes
