"""onnx's backend node suite through ``onnxruntime.backend`` with pluggable's
EP on MY_DEVICE (tests/ort_node_suite.py, in one child process that has not
imported pluggable): every case ONNX Runtime's CPU EP passes also passes
with the EP registered, and the cases that ran claimed nodes on MY_DEVICE
do not drop below today's count."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("onnxruntime", reason="the bridge is for onnxruntime")
pytest.importorskip("onnx.backend.test.case.node", reason="the cases are onnx's")

from pluggable.onnx.ort import ort_ep_library  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "ort_node_suite.py"

# Cases that ran plugin kernels for claimed nodes and passed, with
# onnx 1.23 and onnxruntime 1.32 (of 1884 cases, 1588 pass on the CPU EP).
CLAIMED_FLOOR = 642


def claimed_floor(cpu_passed: int) -> int:
    """CLAIMED_FLOOR under onnxruntime 1.32; another release passes another
    set of cases on its CPU EP (1.30: 1349, of which 491 claimed), so there
    the floor is 90% of the same share of the cases it passes."""
    import onnxruntime as ort
    if ort.__version__.startswith("1.32."):
        return CLAIMED_FLOOR
    return int(0.9 * CLAIMED_FLOOR * cpu_passed / 1588)


@pytest.fixture(scope="module")
def suite() -> tuple[dict, dict]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([sys.executable, str(SCRIPT), "--bridge", ort_ep_library()],
                          capture_output=True, text=True, timeout=900, env=env, cwd="/")
    last = proc.stderr.strip().splitlines()[-1:] if proc.stderr else []
    assert proc.returncode == 0, f"the suite's child failed (last case: {last}):\n" \
                                 + proc.stderr[-3000:]
    cases, summary = {}, None
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            cases[r["name"]] = r
        elif line.startswith("SUMMARY "):
            summary = json.loads(line[len("SUMMARY "):])
    assert summary is not None, proc.stdout[-2000:]
    return cases, summary


def test_every_case_the_cpu_ep_passes_passes_with_the_pluggable_ep(suite):
    cases, s = suite
    print(f"\nnode suite: {s['cases']} cases, CPU EP passes {s['cpu_passed']}, with "
          f"pluggable_MY_DEVICE {s['ours_passed']}; {s['claimed_and_passed']} passed with claimed "
          f"nodes run on MY_DEVICE ({s['nodes_compiled']} nodes compiled, {s['kernel_runs']} "
          f"kernel runs) in {s['seconds']} s")
    assert s["cases"] == len(cases) > 1000 and s["cpu_passed"] > 1000, s
    bad = {n: cases[n].get("error") for n in s["regressions"]}
    assert not bad, bad
    assert s["claimed_and_passed"] >= claimed_floor(s["cpu_passed"]), s


def test_claimed_cases_ran_on_the_plugin(suite):
    cases, _ = suite
    for name, kernels in [("test_add", 1), ("test_relu", 1), ("test_matmul_2d", 1),
                          ("test_conv_with_strides_padding", 2), ("test_softmax_axis_0", 3)]:
        r = cases[name]
        assert r["ours"] and r["nodes_compiled"] == 1 and r["kernel_runs"] == kernels, r
    # Ops outside the bridge's table stay on the CPU EP.
    for name in ("test_cos", "test_top_k", "test_nonzero_example"):
        r = cases[name]
        assert r["ours"] and r["nodes_compiled"] == 0 and r["kernel_runs"] == 0, r
    # A SequenceMap's body is a function's: not claimed there, but in the Loop
    # ONNX Runtime expands it into (whose body ONNX Runtime runs).
    r = cases["test_sequence_map_identity_1_sequence"]
    assert r["ours"] and r["kernel_runs"] > 0, r
