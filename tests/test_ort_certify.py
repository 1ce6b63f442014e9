"""``python -m pluggable check PLUGIN --onnxruntime`` (pluggable/tools/ort_certify.py
and its child, ort_plugin_check.py): a plugin run inside ONNX Runtime through
the bridge, every op the bridge claims for its kernels compared with ONNX
Runtime's CPU EP, and the failures (a plugin that does not load or crashes,
wrong results, an onnxruntime that is too old) reported with exit status 1.

ONNX Runtime runs in the child process only: this process has imported
pluggable, which the bridge refuses."""
from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

pytest.importorskip("onnxruntime", reason="certifying for ONNX Runtime needs onnxruntime")

from pluggable.onnx.ort import ort_ep_library  # noqa: E402
from pluggable.tools import ort_certify  # noqa: E402
from pluggable.tools.check import main as check_main  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
MY_DEVICE = ROOT / "pluggable" / "plugins" / "libpluggable_my_device.so"
TF_SAMPLE = ROOT / "tests" / "plugins" / "tf_sample_device.c"


def bridge_table() -> dict[str, list[str]]:
    """The bridge's op table, read in a child (the library runs no core code
    at dlopen, but the child keeps this process free of it altogether)."""
    code = ("import ctypes, sys; b = ctypes.CDLL(sys.argv[1]); "
            "b.pg_ort_op_table.restype = ctypes.c_char_p; print(b.pg_ort_op_table().decode())")
    out = subprocess.run([sys.executable, "-c", code, ort_ep_library()], capture_output=True,
                         text=True, check=True).stdout
    return {ln.split()[0]: ln.split()[1:] for ln in out.splitlines() if ln.strip()}


def run_check(*args: str) -> tuple[int, str]:
    proc = subprocess.run([sys.executable, "-m", "pluggable", "check", *args],
                          capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                              [str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])),
                          cwd="/")
    return proc.returncode, proc.stdout + proc.stderr


def sample_plugin(wrong_relu: bool = False) -> pathlib.Path:
    from plugin_build import build_plugin
    if not wrong_relu:
        return build_plugin(TF_SAMPLE, "tf_sample_device_fills", extra_flags=("-DWITH_FILLS",))
    text = TF_SAMPLE.read_text()
    good = "out[i] = in[i] > 0 ? in[i] : 0;"
    assert good in text
    return build_plugin(text.replace(good, "out[i] = in[i] > 0 ? in[i] : 0.25f;"),
                        "tf_sample_wrong_relu", extra_flags=("-DWITH_FILLS",))


def test_the_op_table_lists_the_documented_ops():
    table = bridge_table()
    assert table["Add"] == ["float", "double", "int32", "int64"]
    assert table["Exp"] == ["float", "double"]
    assert {"MatMul", "Gemm", "Conv", "Softmax", "BatchNormalization", "Dropout"} <= set(table)
    # the transformer exports' ops
    assert {"Transpose", "Erf", "Pow", "Cast", "Where", "Gather", "Unsqueeze", "Squeeze",
            "ReduceMean", "Gelu", "LayerNormalization"} <= set(table)
    assert table["Gather"] == ["float", "double", "int32", "int64"]


def test_my_device_is_certified_with_every_claimable_op_run_on_the_plugin():
    """Every (op, element type) of the bridge's table has a model; on
    MY_DEVICE each one ONNX allows is claimed, matches the reference on two
    fresh random inputs (--ort-runs 2), and ran plugin kernels on every run."""
    rc, out = run_check(str(MY_DEVICE), "--onnxruntime", "--json", "--ort-runs", "2")
    assert rc == 0, out
    ox = json.loads(out)["onnxruntime"]
    assert ox["certified"] and ox["error"] is None, ox
    assert ox["devices"] == [{"ep": "pluggable_MY_DEVICE", "device": "/device:MY_DEVICE:0",
                              "hardware": "OrtHardwareDeviceType.CPU"}]
    assert ox["load"].startswith("loaded: platform MY_PLATFORM")
    seen = {(r["op"], r["type"]) for r in ox["results"]}
    assert seen == {(op, t) for op, types in bridge_table().items() for t in types}
    for r in ox["results"]:
        if (r["op"], r["type"]) in {("Sum", "int32"), ("Sum", "int64")}:
            assert r["status"] == "not_onnx", r   # ONNX's Sum is for floats only
            continue
        assert r["status"] == "ok" and r["claimed"] and r["nodes_compiled"] == 1, r
        assert len(r["kernel_runs"]) == 2 and min(r["kernel_runs"]) >= 1, r
    # Lowerings of several kernels count each: Gemm is MatMul, Mul, AddV2.
    gemm = next(r for r in ox["results"] if r["op"] == "Gemm" and r["type"] == "float")
    assert gemm["kernel_runs"] == [3, 3], gemm
    # ORT's CPU EP has no double Conv: numpy is the reference there.
    conv = next(r for r in ox["results"] if r["op"] == "Conv" and r["type"] == "double")
    assert conv["reference"] == "numpy", conv
    assert sum(r["status"] == "ok" for r in ox["results"]) == 147


def test_the_text_report_says_certified_and_groups_element_types():
    rc, out = run_check(str(MY_DEVICE), "--onnxruntime", "--wide")
    assert rc == 0, out
    assert re.search(r"^ONNX Runtime \d+\.\d+", out, re.M), out
    assert "CLAIMED  Add (broadcast [3,4] by [4]) float, double, int32, int64: matches ORT " \
           "CPU; plugin kernels a run: 1" in out, out
    assert "CLAIMED  Gemm (transB, alpha 0.5, C [5]) float, double: matches ORT CPU; plugin " \
           "kernels a run: 3" in out, out
    assert out.rstrip().endswith("CERTIFIED for ONNX Runtime"), out


def test_tensorflows_sample_plugin_is_claimed_only_where_it_has_kernels():
    """The sample registers one kernel (float Relu): that is the one op
    claimed and compared; everything else is left to the CPU EP with the
    bridge's reason, which does not keep the plugin from certification."""
    rep = ort_certify.certify(str(sample_plugin()))
    assert rep.error is None, rep
    assert rep.devices[0]["ep"] == "pluggable_FAKE_CPU_DEVICE", rep.devices
    ok = [(r["op"], r["type"]) for r in rep.with_status("ok")]
    assert ok == [("Relu", "float")], ok
    assert rep.with_status("ok")[0]["kernel_runs"] == [1, 1, 1]
    add = next(r for r in rep.results if r["op"] == "Add" and r["type"] == "float")
    assert add["status"] == "unclaimed" and not add["claimed"]
    assert add["detail"] == "pluggable: node 'node' (Add): no AddV2 kernel of dtype 1 on " \
                            "FAKE_CPU_DEVICE", add
    assert rep.certified
    text = ort_certify.format_report(rep)
    assert "CPU EP   Add float, double, int32, int64: no AddV2 kernel on FAKE_CPU_DEVICE" in text
    assert "CPU EP   Relu double, int32, int64: no Relu kernel on FAKE_CPU_DEVICE" in text


def test_a_plugin_with_a_wrong_kernel_is_not_certified():
    rep = ort_certify.certify(str(sample_plugin(wrong_relu=True)))
    assert rep.error is None, rep
    (bad,) = rep.failures
    assert (bad["op"], bad["type"], bad["status"]) == ("Relu", "float", "mismatch"), bad
    assert "largest difference" in bad["detail"], bad
    assert not rep.certified
    text = ort_certify.format_report(rep)
    assert "DIFFERS  Relu [float, [3,4]]: largest difference" in text, text
    assert text.endswith("NOT certified for ONNX Runtime")


def test_a_plugin_that_fails_to_load_fails_with_the_bridges_reason():
    from broken_plugins import build
    lib = build("init_error")
    rc, out = run_check(str(lib), "--onnxruntime", "--json")
    assert rc == 1, out
    ox = json.loads(out)["onnxruntime"]
    assert ox["error"] == "load_failed" and not ox["certified"], ox
    assert "quarantined: SE_InitPlugin failed: simulated init failure" in ox["detail"], ox
    rc, out = run_check(str(lib), "--onnxruntime", "--wide")
    assert rc == 1 and "FAILED (load_failed): the bridge did not load" in out, out


def test_a_plugin_that_crashes_onnxruntime_is_reported():
    from broken_plugins import build
    rep = ort_certify.certify(str(build("crash_at_load")))
    assert rep.error == "crashed" and not rep.certified, rep
    assert rep.detail == ("ONNX Runtime with the plugin died (SIGSEGV) while registering the "
                          "bridge, which loads the plugin"), rep.detail


def test_an_onnxruntime_older_than_the_bridges_minimum_fails(monkeypatch, capsys):
    """The parent refuses before starting a child; the child refuses too
    when its onnxruntime is older than the version it is given."""
    header = (ROOT / "c_api" / "ort" / "pg_ort_abi.h").read_text()
    api = int(re.search(r"#define\s+PG_ORT_MIN_API_VERSION\s+(\d+)", header).group(1))
    assert ort_certify.MIN_ONNXRUNTIME == (1, api)
    monkeypatch.setattr(ort_certify, "onnxruntime_version", lambda: "1.22.0")
    rep = ort_certify.certify(str(MY_DEVICE))
    assert rep.error == "onnxruntime_too_old", rep
    assert rep.detail.startswith("onnxruntime 1.22.0 is older than 1.23"), rep.detail
    assert "pip install 'onnxruntime>=1.23'" in rep.detail
    monkeypatch.setattr(ort_certify, "onnxruntime_version", lambda: None)
    assert ort_certify.certify(str(MY_DEVICE)).error == "onnxruntime_missing"

    proc = subprocess.run([sys.executable, ort_certify.CHILD, str(MY_DEVICE), "--bridge",
                           ort_ep_library(), "--min-version", "99.0"],
                          capture_output=True, text=True, timeout=120, cwd="/")
    child = json.loads(proc.stdout.strip().splitlines()[-1])
    assert child["error"] == "onnxruntime_too_old", child
    assert "is older than 99.0" in child["detail"], child

    monkeypatch.setattr(ort_certify, "onnxruntime_version", lambda: "1.22.0")
    assert check_main([str(MY_DEVICE), "--onnxruntime"]) == 1
    assert "FAILED (onnxruntime_too_old)" in capsys.readouterr().out
