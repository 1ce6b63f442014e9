"""The host reference plugin is a valid TensorFlow PluggableDevice plugin,
and ``python -m pluggable check PLUGIN --tensorflow`` certifies it.

TensorFlow runs in a child process (it aborts when imported next to
pluggable's core): the child loads libpluggable_my_device.so with
TensorFlow's own loader, runs every op the plugin registers on
/device:MY_DEVICE:0 eagerly and inside tf.function, 200 calls each for the
float32 kernel (a few for every other dtype) with all results read at the
end, and compares them with TensorFlow's CPU kernels on fresh random inputs.
The whole run happens once, through the command line, for all the tests here.
"""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

from pluggable.framework import registry
from pluggable.tools import tf_certify

ROOT = pathlib.Path(__file__).resolve().parent.parent
PLUGIN = ROOT / "pluggable" / "plugins" / "libpluggable_my_device.so"


def _check_cli(*args: str, env: dict | None = None,
               plugin: pathlib.Path = PLUGIN) -> subprocess.CompletedProcess:
    from broken_plugins import clean_env
    return subprocess.run([sys.executable, "-m", "pluggable", "check", str(plugin), *args],
                          capture_output=True, text=True, timeout=900, cwd=ROOT,
                          env=clean_env(**(env or {})))


@pytest.fixture(scope="module")
def cli_json() -> dict:
    missing = tf_certify.tensorflow_missing_reason()
    if missing:
        pytest.skip(missing)
    if not PLUGIN.exists():
        pytest.skip(f"{PLUGIN} is not built (python3 setup.py build_ext --inplace)")
    proc = _check_cli("--tensorflow", "--json")
    data = json.loads(proc.stdout)
    if data["tensorflow"]["error"] == "tensorflow_missing":
        pytest.skip(f"import tensorflow fails here: {data['tensorflow']['detail']}")
    data["returncode"] = proc.returncode
    return data


@pytest.fixture(scope="module")
def tf_report(cli_json) -> tf_certify.TfReport:
    return tf_certify.from_dict(cli_json["tensorflow"])


VARIABLE_API_OPS = {"AssignAddVariableOp", "AssignSubVariableOp", "ResourceApplyGradientDescent",
                    "ResourceApplyKerasMomentum", "ResourceApplyAdam"}


def test_tensorflow_loads_the_plugin(tf_report):
    assert tf_report.error is None, tf_certify.format_report(tf_report)
    assert tf_report.device_types == ["MY_DEVICE"]


def test_tensorflow_registers_every_kernel_the_plugin_has(tf_report):
    """TensorFlow sees the same ops as pluggable does for MY_DEVICE."""
    assert tf_report.error is None, tf_certify.format_report(tf_report)
    # The reference plugin's own kernels (custom ops made by other tests also
    # have MY_DEVICE kernels in the registry).
    ours = {op for (op, device_type), kernels in registry.KERNELS.items()
            if device_type == "MY_DEVICE" and any(
                k.plugin is not None and k.plugin.path.endswith("libpluggable_my_device.so")
                for k in kernels)}
    in_tensorflow = {r["op"] for r in tf_report.results}
    # TensorFlow's pip packages do not export the variable functions of
    # kernels_experimental.h, so the plugin leaves these kernels out there.
    assert ours and ours - VARIABLE_API_OPS == in_tensorflow


def test_every_op_matches_tensorflow_cpu_in_loops(tf_report):
    assert tf_report.error is None, tf_certify.format_report(tf_report)
    assert not tf_report.differences, tf_certify.format_report(tf_report)
    assert not tf_report.with_status("no_recipe"), tf_certify.format_report(tf_report)
    by_op: dict[str, list[dict]] = {}
    for r in tf_report.results:
        by_op.setdefault(r["op"], []).append(r)
    no_tf_op = set()
    for op, results in by_op.items():
        stressed = [r for r in results if r["iterations"] == 200]
        assert len(stressed) == 1, (op, results)
        if stressed[0].get("detail", "").startswith("TensorFlow has no op named"):
            no_tf_op.add(op)  # a pluggable op: nothing to compare with
            continue
        if op.startswith("Collective"):  # needs a group: tests/test_distribute.py
            assert stressed[0]["status"] == "no_reference", (op, results)
            continue
        # Each op ran hundreds of times on the device, eagerly and in
        # tf.function, and matched TensorFlow's CPU.
        assert stressed[0]["status"] == "ok", (op, results)
        assert stressed[0]["modes"] == ["eager", "tf.function"]
    # Gelu, GeluGrad and the fused transformer ops are not TensorFlow ops;
    # the fused ops are internal to TensorFlow (made by grappler, absent
    # from tf.raw_ops).
    assert no_tf_op <= {"Gelu", "GeluGrad", "_FusedMatMul", "_FusedConv2D",
                        "ScaledDotProductAttention", "ScaledDotProductAttentionGrad",
                        "LayerNorm", "LayerNormGrad"}, no_tf_op
    assert tf_report.certified


def test_check_command_certifies_for_both_runtimes(cli_json):
    assert cli_json["returncode"] == 0
    assert cli_json["passed"] is True and cli_json["tensorflow"]["certified"] is True


def test_check_command_says_when_tensorflow_cannot_be_imported(tmp_path):
    """A `tensorflow` that fails to import (as where it is not installed)
    gives a clear message and a failing exit status, not a traceback."""
    from broken_plugins import build
    fake = tmp_path / "tensorflow"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('no TensorFlow in this test')\n")
    proc = _check_cli("--tensorflow", env={"PYTHONPATH": str(tmp_path)},
                      plugin=build("good_mini"))  # one kernel: a quick conformance run
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "TensorFlow not installed or not importable here" in proc.stdout
    assert "no TensorFlow in this test" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr


def test_certify_reports_tensorflow_not_installed(monkeypatch):
    monkeypatch.setattr(tf_certify.importlib.util, "find_spec", lambda name: None)
    report = tf_certify.certify(str(PLUGIN))
    assert report.error == "tensorflow_missing" and not report.certified
    assert tf_certify.format_report(report).startswith("TensorFlow not installed")


def test_a_sanitizer_report_is_named_in_the_crash_detail():
    """Under .ci/run-sanitizers an ASan report aborts the TensorFlow child;
    the report's SUMMARY line is what the crash detail names."""
    stderr = ("==1==ERROR: AddressSanitizer: heap-use-after-free on address 0x6\n"
              "    #0 0x7f in matmul_f32 kernels_matmul.c:88\n"
              "SUMMARY: AddressSanitizer: heap-use-after-free kernels_matmul.c:88 in matmul_f32\n"
              "Shadow bytes around the buggy address:\n  0x0ff: fa fa\n==1==ABORTING\n")
    assert tf_certify._sanitizer_summary(stderr) == (
        "AddressSanitizer: heap-use-after-free kernels_matmul.c:88 in matmul_f32")
    assert tf_certify._sanitizer_summary("Fatal Python error: Aborted\n") is None
    ubsan = ("kernel_util.h:361:43: runtime error: load of misaligned address 0x6 for type "
             "'const int64_t'\n    #0 0x7f in md_index_at kernel_util.h:361\n")
    assert tf_certify._sanitizer_summary(ubsan) == (
        "UndefinedBehaviorSanitizer: kernel_util.h:361:43: runtime error: load of misaligned "
        "address 0x6 for type 'const int64_t'")
