"""The profiler: plugin profilers (TF_InitProfiler), the host tracer and the
files a profile writes (XSpace, Chrome trace, summary).

The files are decoded here without the profiler's own readers where that is
cheap (the XSpace with the proto package, the trace with json), so the
checks do not share the code they check."""
from __future__ import annotations

import gzip
import json
import os
import pathlib
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

import pluggable as pg
from pluggable.framework import proto
from pluggable.runtime import hooks
from broken_plugins import HERE as BROKEN_DIR, _header_tag, clean_env, run_child
from plugin_build import build_plugin
from tf_oracle import TensorFlowUnavailable, TfOracle, pack, tensorflow_missing_reason, unpack

ROOT = pathlib.Path(__file__).resolve().parent.parent
OPS = ("AddV2", "Mul", "MatMul")


def _stat_names(plane) -> dict:
    return {k: m.name for k, m in plane.stat_metadata.items()}


def _start_time_ns(space) -> int:
    """The host plane's "profile_start_time": line timestamps count from it."""
    host = _plane(space, "/host:CPU")
    names = _stat_names(host)
    found = [s.int64_value for s in host.stats if names[s.metadata_id] == "profile_start_time"]
    assert len(found) == 1, found
    return found[0]


def _events(space, plane_name: str) -> list[dict]:
    """Every event of a plane as {name, line, start_ns, end_ns, stats}, with
    times in Unix-epoch nanoseconds."""
    plane = _plane(space, plane_name)
    names = _stat_names(plane)
    base = _start_time_ns(space)
    out = []
    for line in plane.lines:
        for ev in line.events:
            stats = {names[s.metadata_id]: getattr(s, s.WhichOneof("value"))
                     for s in ev.stats}
            start = base + line.timestamp_ns + ev.offset_ps // 1000
            out.append({"name": plane.event_metadata[ev.metadata_id].name, "line": line.id,
                        "line_name": line.name, "start_ns": start,
                        "end_ns": start + ev.duration_ps // 1000, "stats": stats})
    return out


def _plane(space, name: str):
    found = [p for p in space.planes if p.name == name]
    assert len(found) == 1, (name, [p.name for p in space.planes])
    return found[0]


@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    """One profile of a small MY_DEVICE workload on fresh random inputs."""
    rng = np.random.default_rng()
    logdir = tmp_path_factory.mktemp("profile")
    n = int(rng.integers(3, 7))
    a = rng.standard_normal((8, 8)).astype(np.float32)
    b = rng.standard_normal((8, 8)).astype(np.float32)
    before = time.time_ns()
    with pg.profiler.Profile(logdir) as session:
        with pg.device("MY_DEVICE:0"):
            x, y = pg.constant(a), pg.constant(b)
            with pg.testing.expect_kernel("AddV2", "MY_DEVICE", n), \
                    pg.testing.expect_kernel("MatMul", "MY_DEVICE", n):
                ref = a
                for _ in range(n):
                    x = pg.raw_ops.MatMul(a=pg.raw_ops.Mul(x=pg.raw_ops.AddV2(x=x, y=y), y=y),
                                          b=y)
                    ref = ((ref + b) * b) @ b
            got = x.numpy()
        with pg.profiler.Trace("my_step", step=7):
            pass
    after = time.time_ns()
    np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-3)
    return {"result": session.result, "n": n, "before": before, "after": after,
            "logdir": logdir}


def _space_from_file(profile):
    data = pathlib.Path(profile["result"].xplane_path).read_bytes()
    return proto.decode(proto.XSpace, data, strict=True, source="test")


def test_files_are_where_tensorboard_looks(profile):
    res = profile["result"]
    run = pathlib.Path(res.run_dir)
    assert run.parent == pathlib.Path(profile["logdir"]) / "plugins" / "profile"
    host = socket.gethostname()
    assert pathlib.Path(res.xplane_path) == run / f"{host}.xplane.pb"
    assert pathlib.Path(res.trace_path) == run / f"{host}.trace.json.gz"
    assert res.errors == []
    space = _space_from_file(profile)
    assert space == res.space
    assert list(space.hostnames) == [host]


def test_every_op_is_on_the_device_track_with_real_ordered_times(profile):
    space, n = _space_from_file(profile), profile["n"]
    device = _events(space, "/device:CUSTOM:MY_DEVICE:0")
    host = [e for e in _events(space, "/host:CPU") if e["stats"].get("category") == "op"]
    for op in OPS:
        calls = [e for e in host if e["name"] == op]
        work = [e for e in device if e["name"] == op]
        assert len(calls) == n and len(work) == n, (op, len(calls), len(work))
        assert all(c["stats"]["device"] == "MY_DEVICE:0" for c in calls)
        assert all(c["stats"]["dtypes"] == "float32,float32" for c in calls)
        assert all(c["stats"]["shapes"] == "[8,8],[8,8]" for c in calls)
    for ev in device + host:
        # Unix-epoch nanoseconds inside the session, not made-up offsets.
        assert profile["before"] <= ev["start_ns"] <= ev["end_ns"] <= profile["after"], ev
    by_line = {}
    for ev in device:
        by_line.setdefault(ev["line"], []).append(ev)
    for evs in by_line.values():  # a stream runs one task at a time, in order
        evs.sort(key=lambda e: e["start_ns"])
        assert all(p["end_ns"] <= q["start_ns"] for p, q in zip(evs, evs[1:]))
    # The data dependence AddV2 -> Mul -> MatMul shows in the device times.
    chain = sorted((e for e in device if e["name"] in OPS), key=lambda e: e["start_ns"])
    assert [e["name"] for e in chain] == list(OPS) * n


def test_device_work_is_tied_to_the_op_that_enqueued_it(profile):
    space = _space_from_file(profile)
    launches = {e["stats"]["correlation_id"]: e
                for e in _events(space, "/host:MY_DEVICE")}
    host_ops = [e for e in _events(space, "/host:CPU") if e["stats"].get("category") == "op"]
    for ev in _events(space, "/device:CUSTOM:MY_DEVICE:0"):
        launch = launches[ev["stats"]["correlation_id"]]
        assert launch["start_ns"] <= ev["start_ns"] + 2000
        if ev["name"] in OPS:
            assert any(o["name"] == ev["name"] and o["line"] == launch["line"] and
                       o["start_ns"] - 2000 <= launch["start_ns"] <= o["end_ns"] + 2000
                       for o in host_ops), ev
    flows = profile["result"].timeline.flows
    assert sum(1 for f in flows if f.op.name in OPS and f.device.name == f.op.name) \
        == len(OPS) * profile["n"]


def test_user_trace_span(profile):
    spans = [e for e in _events(_space_from_file(profile), "/host:CPU")
             if e["name"] == "my_step"]
    assert len(spans) == 1 and spans[0]["stats"] == {"category": "user", "step": 7}


def test_chrome_trace_loads_with_tracks_events_and_flows(profile):
    with gzip.open(profile["result"].trace_path, "rt") as f:
        trace = json.load(f)
    events = trace["traceEvents"]
    processes = {e["pid"]: e["args"]["name"] for e in events
                 if e["ph"] == "M" and e["name"] == "process_name"}
    assert set(processes.values()) == {"/host:CPU", "/device:MY_DEVICE:0", "/host:MY_DEVICE"}
    device_pid = next(p for p, name in processes.items() if name == "/device:MY_DEVICE:0")
    threads = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    complete = [e for e in events if e["ph"] == "X"]
    assert all((e["pid"], e["tid"]) in threads for e in complete)
    for op in OPS:
        on_device = [e for e in complete if e["name"] == op and e["pid"] == device_pid]
        assert len(on_device) == profile["n"]
        assert all(e["ts"] >= 0 and e["dur"] >= 0 for e in on_device)
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    assert starts and starts.keys() == ends.keys()
    assert len(starts) == len(profile["result"].timeline.flows)
    assert all(ends[k]["pid"] == device_pid for k in ends)
    assert all(ends[k]["ts"] >= starts[k]["ts"] - 2 for k in ends)


def test_summary_numbers_match_the_events(profile):
    res, n = profile["result"], profile["n"]
    space = _space_from_file(profile)
    host = [e for e in _events(space, "/host:CPU") if e["stats"].get("category") == "op"]
    device = _events(space, "/device:CUSTOM:MY_DEVICE:0")
    rows = {(r.name, r.device): r for r in res.summary.rows}
    for op in OPS:
        row = rows[(op, "MY_DEVICE:0")]
        assert row.count == n
        # No other span nests in these op calls, so self time = duration.
        assert row.host_ns == sum(e["end_ns"] - e["start_ns"] for e in host if e["name"] == op)
        assert row.device_ns == sum(e["end_ns"] - e["start_ns"] for e in device
                                    if e["name"] == op)
        assert row.device_events == n
        assert row.host_mean_ns == pytest.approx(row.host_ns / n)
    assert res.summary.device_ns == sum(e["end_ns"] - e["start_ns"] for e in device)
    assert res.summary.host_ns == sum(r.host_ns for r in res.summary.rows)
    table = str(res.summary)
    for op in OPS:
        line = next(ln for ln in table.splitlines() if ln.startswith(op + " "))
        assert f" {n} " in line and f"{rows[(op, 'MY_DEVICE:0')].host_ns / 1e6:.3f}" in line
    assert pg.profiler.summary() is res.summary
    # The same summary is remade from the written file alone.
    again = pg.profiler.summary(profile["logdir"])
    assert again.to_dict() == res.summary.to_dict()


def test_no_profile_and_missing_files_raise_typed_errors(tmp_path):
    with pytest.raises(pg.errors.NotFoundError, match="no .xplane.pb"):
        pg.profiler.summary(tmp_path)
    with pytest.raises(pg.errors.UnavailableError, match="no profiling session"):
        pg.profiler.stop()


def test_session_rules_and_nothing_left_installed(tmp_path):
    assert hooks.installed() == () and not hooks.active[0]
    pg.profiler.start(tmp_path)
    try:
        assert hooks.active[0]
        with pytest.raises(pg.errors.AlreadyExistsError):
            pg.profiler.start(tmp_path)
    finally:
        res = pg.profiler.stop(save=False)
    assert res.run_dir is None and not any(tmp_path.iterdir())
    assert hooks.installed() == () and not hooks.active[0]
    with pytest.raises(pg.errors.UnimplementedError, match="python_tracer_level"):
        pg.profiler.start(tmp_path, pg.profiler.ProfilerOptions(python_tracer_level=1))
    assert not pg.profiler.session.running()


def test_a_start_that_fails_part_way_leaves_no_plugin_profiler_recording(tmp_path, rng,
                                                                          monkeypatch):
    """The plugin profilers start before the host tracer; when the host
    tracer then fails, every plugin profiler started is stopped again and no
    session is left half open: the next session starts and records."""
    from pluggable.plugins.profilers import PluginProfiler, ready_profilers
    from pluggable.profiler.host_tracer import HostTracer
    pg.list_physical_devices()
    expected = sorted(p.device_type for p in ready_profilers())
    assert "MY_DEVICE" in expected
    stopped = []
    real_stop = PluginProfiler.stop

    def counting_stop(self):
        stopped.append(self.device_type)
        real_stop(self)

    def failing_start(self):
        raise RuntimeError("the host tracer could not install")

    monkeypatch.setattr(PluginProfiler, "stop", counting_stop)
    monkeypatch.setattr(HostTracer, "start", failing_start)
    with pytest.raises(RuntimeError, match="could not install"):
        pg.profiler.start(tmp_path)
    assert sorted(stopped) == expected
    assert not pg.profiler.session.running()
    assert hooks.installed() == () and not hooks.active[0]
    monkeypatch.undo()
    a = rng.standard_normal(32).astype(np.float32)
    with pg.profiler.Profile(tmp_path) as p:
        with pg.device("MY_DEVICE:0"):
            out = pg.raw_ops.Neg(x=pg.constant(a)).numpy()
    np.testing.assert_array_equal(out, -a)
    assert not p.result.errors, p.result.errors
    names = [e["name"] for e in _events(p.result.space, "/device:CUSTOM:MY_DEVICE:0")]
    assert "Neg" in names, names


def test_device_tracer_level_zero_records_host_only(tmp_path, rng):
    a = rng.standard_normal(16).astype(np.float32)
    with pg.profiler.Profile(tmp_path, pg.profiler.ProfilerOptions(device_tracer_level=0)) as p:
        with pg.device("MY_DEVICE:0"):
            out = pg.raw_ops.Neg(x=pg.constant(a)).numpy()
    np.testing.assert_array_equal(out, -a)
    assert [pl.name for pl in p.result.space.planes] == ["/host:CPU"]
    assert any(e.name == "Neg" for e in p.result.timeline.op_spans())


# ------------------------------------------------------------------ hostile profilers

MODES = {  # device type: (macro, what the profile or the record must say)
    "PROF_GOOD": ("PROF_GOOD", None),
    "PROF_INIT_ERROR": ("PROF_INIT_ERROR", "no performance counters on this machine"),
    "PROF_BAD_FNS_SIZE": ("PROF_BAD_FNS_SIZE", "TP_ProfilerFns"),
    "PROF_NULL_COLLECT": ("PROF_NULL_COLLECT", "collect_data_xspace"),
    "PROF_WRONG_TYPE": ("PROF_WRONG_TYPE", "a plugin profiles its own devices"),
    "PROF_START_FAILS": ("PROF_START_FAILS", "the counters are busy"),
    "PROF_STOP_FAILS": ("PROF_STOP_FAILS", "the counters stopped answering"),
    "PROF_COLLECT_FAILS": ("PROF_COLLECT_FAILS", "lost the records"),
    "PROF_GARBAGE": ("PROF_GARBAGE", "not an XSpace"),
    "PROF_SIZE_LIE": ("PROF_SIZE_LIE", "into a buffer of the"),
    "PROF_OVERFLOW": ("PROF_OVERFLOW", "wrote past the end"),
    "PROF_HUGE": ("PROF_HUGE", "more than the"),
}
QUARANTINED_AT_LOAD = {"PROF_INIT_ERROR", "PROF_BAD_FNS_SIZE", "PROF_NULL_COLLECT",
                       "PROF_WRONG_TYPE"}


def _plugin_space(device_type: str, rng) -> bytes:
    m = proto.messages()
    space = m.XSpace()
    plane = space.planes.add(id=int(rng.integers(1, 1000)), name=f"/device:{device_type}:0")
    plane.event_metadata[1].CopyFrom(m.XEventMetadata(id=1, name="SecretKernel"))
    plane.stat_metadata[1].CopyFrom(m.XStatMetadata(id=1, name="occupancy"))
    line = plane.lines.add(id=3, name="Stream #3", timestamp_ns=time.time_ns())
    for i in range(int(rng.integers(2, 6))):
        ev = line.events.add(metadata_id=1, offset_ps=i * 10**6,
                             duration_ps=int(rng.integers(1, 10**5)))
        ev.stats.add(metadata_id=1, double_value=float(rng.random()))
    return proto.encode(space)


def _build_mode(device_type: str, macro: str, space: bytes):
    initialiser = ",".join(str(b) for b in space)
    source = (f'#define MINI_DEVICE_TYPE "{device_type}"\n'
              f'#define MINI_PLATFORM_NAME "{device_type}_PLATFORM"\n'
              f"#define {macro} 1\n#define PROF_SPACE {initialiser}\n"
              + (BROKEN_DIR / "profiler_modes.c").read_text())
    return build_plugin(source, device_type.lower(),
                        extra_flags=(f"-I{BROKEN_DIR}", f"-DMINI_HEADER_TAG_{_header_tag()}"))


HOSTILE_CHILD = """
import base64, logging, io
log = io.StringIO()
logging.getLogger("pluggable").addHandler(logging.StreamHandler(log))
a = np.arange(6, dtype=np.float32)
with pg.profiler.Profile(LOGDIR) as p:
    with pg.device("MY_DEVICE:0"):
        out["neg"] = pg.raw_ops.Neg(x=pg.constant(a)).numpy().tolist()
    for t in TYPES:
        with pg.device(t + ":0"):
            out.setdefault("mini", {})[t] = pg.raw_ops.Neg(x=pg.constant(a)).numpy().tolist()
out["errors"] = p.result.errors
out["planes"] = [pl.name for pl in p.result.space.planes]
out["space"] = base64.b64encode(open(p.result.xplane_path, "rb").read()).decode()
out["profilers"] = {r.device_type: r.to_dict()["profiler"] for r in pg.plugins()}
with pg.profiler.Profile(LOGDIR) as p2:
    pass
out["second_errors"] = p2.result.errors
out["log"] = log.getvalue()
"""


def test_hostile_profilers_are_reported_and_skipped(tmp_path, rng):
    spaces = {t: _plugin_space(t, rng) for t in MODES}
    paths = [_build_mode(t, macro, spaces[t]) for t, (macro, _) in MODES.items()]
    extra = (HOSTILE_CHILD.replace("LOGDIR", repr(str(tmp_path)))
             .replace("TYPES", repr(list(MODES))))
    res = run_child(paths, extra=extra, timeout=240)
    assert "extra_error" not in res, res.get("extra_error")
    assert res["returncode"] == 0
    assert res["health"] == {"MY_DEVICE:0": True, "CPU:0": True}   # nothing else broke
    a = np.arange(6, dtype=np.float32)
    assert res["neg"] == (-a).tolist()
    assert all(v == (-a).tolist() for v in res["mini"].values())  # every device still works
    records = {r["device_type"]: r for r in res["records"]}
    assert all(r["status"] == "loaded" for r in records.values())
    errors = "\n".join(res["errors"])
    for t, (_, why) in MODES.items():
        prof = res["profilers"][t]
        if t in QUARANTINED_AT_LOAD:
            assert prof["status"] == "quarantined" and why in prof["reason"], (t, prof)
            assert "profiler quarantined" in res["stderr"] and why in res["stderr"], t
        elif why is not None:
            assert f"{t} profiler" in errors and why in errors, (t, errors)
            assert why in res["log"], t
        else:
            assert prof["status"] == "ready" and prof["failures"] == []
    # Writing past the buffer quarantines; the other failures last one profile.
    assert res["profilers"]["PROF_OVERFLOW"]["status"] == "quarantined"
    assert res["profilers"]["PROF_GARBAGE"]["status"] == "ready"
    second = "\n".join(res["second_errors"])
    assert "PROF_OVERFLOW" not in second and "PROF_GARBAGE profiler" in second
    # The good plugin's plane is in the merged file as it was sent, but for
    # the name TensorBoard shows and line times counted from the profile's
    # start; no plane of a failing one is.
    space = proto.decode(proto.XSpace, unpack(res["space"]), strict=True)
    sent = proto.decode(proto.XSpace, spaces["PROF_GOOD"]).planes[0]
    sent.name = "/device:CUSTOM:PROF_GOOD:0"
    for line in sent.lines:
        line.timestamp_ns -= _start_time_ns(space)
    assert [p for p in space.planes if p.name == sent.name] == [sent]
    assert set(res["planes"]) == {"/host:CPU", "/device:CUSTOM:MY_DEVICE:0", "/host:MY_DEVICE",
                                  "/device:CUSTOM:PROF_GOOD:0"}
    assert list(space.errors) == res["errors"]


# ------------------------------------------------------------------ TensorFlow reads it

@pytest.fixture(scope="module")
def tf():
    reason = tensorflow_missing_reason()
    if reason:
        pytest.skip(reason)
    try:
        oracle = TfOracle()
    except TensorFlowUnavailable as exc:
        pytest.skip(f"TensorFlow cannot be imported here, so it cannot read the profile: {exc}")
    oracle.call("descriptors", modules=["tensorflow.tsl.profiler.protobuf.xplane_pb2"])
    yield oracle
    oracle.close()


def test_tensorflow_parses_the_xspace(tf, profile):
    data = pathlib.Path(profile["result"].xplane_path).read_bytes()
    back = tf.call("parse", type_name="tensorflow.profiler.XSpace", data=pack(data))
    assert not back["unknown_fields"]
    assert proto.decode(proto.XSpace, unpack(back["deterministic"])) == profile["result"].space
    assert 'name: "/device:CUSTOM:MY_DEVICE:0"' in back["text"]


def test_tensorflow_profiler_tools_read_the_profile(tf, profile):
    """TensorBoard's profile plugin converts the file with these tools."""
    events = tf.call("xspace_trace_events", path=str(profile["result"].xplane_path))
    names = [e.get("name") for e in events if e.get("ph") == "X"]
    for op in OPS:
        assert names.count(op) >= profile["n"], (op, sorted(set(names)))


# ------------------------------------------------------------------ the command line

def test_profile_command(tmp_path, rng):
    n = int(rng.integers(2, 5))
    script = tmp_path / "step.py"
    script.write_text(
        "import sys, numpy as np, pluggable as pg\n"
        "with pg.device('MY_DEVICE:0'):\n"
        "    x = pg.constant(np.ones(4, np.float32))\n"
        "    for _ in range(int(sys.argv[1])):\n"
        "        x = pg.raw_ops.AddV2(x=x, y=x)\n"
        "print('result', x.numpy()[0])\n")
    proc = subprocess.run([sys.executable, "-m", "pluggable", "profile", "--logdir",
                           str(tmp_path / "logs"), str(script), str(n)],
                          capture_output=True, text=True, cwd=ROOT, env=clean_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"result {2.0 ** n}" in proc.stdout
    row = next(ln for ln in proc.stdout.splitlines() if ln.startswith("AddV2 "))
    assert row.split()[1:3] == ["MY_DEVICE:0", str(n)]
    written = next(ln for ln in proc.stdout.splitlines() if ln.startswith("profile: "))
    assert os.path.isfile(written.split(": ", 1)[1])
    bad = subprocess.run([sys.executable, "-m", "pluggable", "profile", str(tmp_path / "nope.py")],
                         capture_output=True, text=True, cwd=ROOT, env=clean_env(), timeout=120)
    assert bad.returncode == 2 and "no such script" in bad.stderr


# ------------------------------------------------------------------ the CUDA plugin

def _cuda_plugin():
    return next((r for r in pg.plugins() if r.path.endswith("libpluggable_cuda.so")), None)


def test_cuda_plugin_registers_its_profiler():
    rec = _cuda_plugin()
    if rec is None:
        pytest.skip("the CUDA reference plugin is not installed here (pip install "
                    "./reference_device/cuda, which needs nvcc)")
    if rec.status != "loaded":
        pytest.skip(f"the CUDA reference plugin did not load here: {rec.reason}")
    assert rec.profiler is not None and rec.profiler.device_type == "GPU"
    assert rec.profiler.status == "ready", rec.profiler.reason


def _plane_stats(plane) -> dict:
    names = _stat_names(plane)
    return {names[s.metadata_id]: getattr(s, s.WhichOneof("value")) for s in plane.stats}


def _need_gpu() -> None:
    if not pg.list_physical_devices("GPU"):
        pytest.skip("no GPU device present: this test needs the CUDA reference plugin and "
                    "an NVIDIA GPU")


def _cupti_missing_reason() -> str | None:
    """None when a libcupti is installed where the CUDA plugin looks for one
    (checked without loading it: two CUPTI copies in one process may clash)."""
    import ctypes.util
    from pluggable.plugins import cuda_env
    paths = [os.environ.get("PLUGGABLE_CUPTI_LIBRARY") or cuda_env.locate_cupti(),
             "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so", "/usr/local/cuda/lib64/libcupti.so"]
    dirs = os.environ.get("LD_LIBRARY_PATH", "").split(":")
    paths += [os.path.join(d, "libcupti.so") for d in dirs if d]
    if any(p and os.path.exists(p) for p in paths) or ctypes.util.find_library("cupti"):
        return None
    return ("CUPTI (libcupti) is not installed here: pip install nvidia-cuda-cupti, or the "
            "toolkit's extras/CUPTI")


def _profile_adds(tmp_path, rng):
    """n AddV2 calls on GPU:0 under the profiler; the result and the XSpace."""
    n = int(rng.integers(2, 5))
    a = rng.standard_normal((64, 64)).astype(np.float32)
    before = time.time_ns()
    with pg.profiler.Profile(tmp_path) as prof:
        with pg.device("GPU:0"):
            x, y = pg.constant(a), pg.constant(a)
            with pg.testing.expect_kernel("AddV2", "GPU", n):
                ref = a
                for _ in range(n):
                    x = pg.raw_ops.AddV2(x=x, y=y)
                    ref = ref + a
            got = x.numpy()
    after = time.time_ns()
    np.testing.assert_allclose(got, ref, rtol=1e-5)
    res = prof.result
    assert res.errors == []
    space = proto.decode(proto.XSpace, pathlib.Path(res.xplane_path).read_bytes(), strict=True)
    return {"n": n, "a": a, "before": before, "after": after, "result": res, "space": space}


def _check_times(device: list[dict], before: int, after: int) -> None:
    """Every event inside the profiled interval; one stream's work in order."""
    slack = 100_000  # the device clock is tied to the host clock within this
    for ev in device:
        assert before - slack <= ev["start_ns"] <= ev["end_ns"] <= after + slack, ev
    for line in {e["line"] for e in device}:
        evs = sorted((e for e in device if e["line"] == line), key=lambda e: e["start_ns"])
        assert all(p["end_ns"] <= q["start_ns"] + 1000 for p, q in zip(evs, evs[1:])), line


def test_gpu_ops_are_on_the_gpu_track_with_cupti(tmp_path, rng):
    """With CUPTI, kernels (named after the kernel, tied to their op) and
    copies are on the device plane, timed by the GPU."""
    _need_gpu()
    reason = _cupti_missing_reason()
    if reason:
        pytest.skip(reason)
    p = _profile_adds(tmp_path, rng)
    n, a = p["n"], p["a"]
    plane = _plane(p["space"], "/device:GPU:0")
    stats = _plane_stats(plane)
    assert stats.get("profiler_source") == "cupti", stats
    device = _events(p["space"], "/device:GPU:0")
    tied = [e for e in device if e["stats"].get("op") == "AddV2"]
    adds = [e for e in tied if "grid" in e["stats"]]  # kernels, not copies or memsets
    assert len({e["stats"]["correlation_id"] for e in adds}) == n
    for e in adds:
        assert e["name"] != "AddV2" and "Memcpy" not in e["name"]  # the kernel's own name
        grid = [int(v) for v in e["stats"]["grid"].split(",")]
        block = [int(v) for v in e["stats"]["block"].split(",")]
        assert len(grid) == len(block) == 3 and min(grid + block) >= 1, e
    h2d = [e for e in device if e["name"] == "MemcpyH2D" and e["stats"].get("copy_kind") == "HtoD"
           and e["stats"]["bytes_transferred"] == a.nbytes]
    assert len(h2d) >= 2
    assert any(e["name"] == "MemcpyD2H" and e["stats"]["bytes_transferred"] == a.nbytes
               for e in device)
    _check_times(device, p["before"], p["after"])
    row = next(r for r in p["result"].summary.rows if (r.name, r.device) == ("AddV2", "GPU:0"))
    assert row.count == n and row.device_events == len(tied)


def test_gpu_ops_are_on_the_gpu_track(tmp_path, rng, monkeypatch):
    """The CUDA-event path (chosen here; used when CUPTI is absent)."""
    _need_gpu()
    monkeypatch.setenv("PLUGGABLE_CUDA_PROFILER", "events")
    p = _profile_adds(tmp_path, rng)
    n, a = p["n"], p["a"]
    plane = _plane(p["space"], "/device:GPU:0")
    stats = _plane_stats(plane)
    assert stats.get("profiler_source") == "cuda_events", stats
    assert "PLUGGABLE_CUDA_PROFILER=events" in stats.get("profiler_note", ""), stats
    device = _events(p["space"], "/device:GPU:0")
    adds = sorted((e for e in device if e["name"] == "AddV2"), key=lambda e: e["start_ns"])
    assert len(adds) == n
    copies = [e for e in device if e["name"] == "MemcpyH2D"]
    assert len(copies) >= 2 and all(e["stats"]["bytes_transferred"] == a.nbytes for e in copies)
    _check_times(device, p["before"], p["after"])
    res = p["result"]
    row = next(r for r in res.summary.rows if (r.name, r.device) == ("AddV2", "GPU:0"))
    assert row.count == n and row.device_events == n
    assert row.device_ns == sum(e["end_ns"] - e["start_ns"] for e in adds)


def test_ops_without_outputs_are_shown_on_their_variables_device(tmp_path, rng):
    """A variable update (ResourceApplyAdam, AssignAddVariableOp) has no
    output: the summary puts it on the device of the variable it updates."""
    with pg.device("MY_DEVICE:0"):
        w = pg.Variable(rng.standard_normal(8).astype(np.float32), name="w")
    opt = pg.optimizers.Adam(0.1)
    with pg.profiler.Profile(tmp_path) as p:
        with pg.GradientTape() as tape:
            loss = pg.reduce_sum(w * w)
        opt.apply_gradients([(tape.gradient(loss, w), w)])
        w.assign_add(np.ones(8, np.float32))
    devices = {(r.name, r.device) for r in p.result.summary.rows}
    assert ("ResourceApplyAdam", "MY_DEVICE:0") in devices, devices
    assert ("AssignAddVariableOp", "MY_DEVICE:0") in devices, devices
    assert not any(d == "?" for _, d in devices), devices
