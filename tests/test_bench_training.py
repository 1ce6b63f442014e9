"""benchmarks/bench_training.py: on tiny sizes (seconds), the script runs
on MY_DEVICE, its numpy peer does the same step as pluggable (the check
passes, and fails when the peer does different work), the step runs on
MY_DEVICE kernels, and the JSON has its fields. Timings are never asserted."""
from __future__ import annotations

import importlib.util
import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import pluggable as pg

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "bench_training.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_training", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_quick_run_on_my_device_writes_json(tmp_path, rng):
    out = tmp_path / "bench.json"
    seed = int(rng.integers(1 << 30))
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--device", "MY_DEVICE", "--models", "cnn",
         "--tiny", "--cnn-batch", "8", "--seed", str(seed), "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (seed, proc.stdout, proc.stderr)
    assert "same-step check cnn vs numpy: passed" in proc.stdout, proc.stdout
    data = json.loads(out.read_text())
    assert data["device"] == "MY_DEVICE:0"
    assert {"date", "command", "host", "results", "checks", "notes"} <= set(data)
    (check,) = data["checks"]
    assert check["passed"] and check["model"] == "cnn" and check["peer"] == "numpy"
    assert abs(check["loss_pluggable"] - check["loss_peer"]) < 1e-4
    assert [(r["model"], r["framework"]) for r in data["results"]] == \
        [("cnn", "pluggable"), ("cnn", "numpy")]
    for r in data["results"]:
        assert r["steps"] == 3 and r["batch"] == 8
        assert 0 < r["p10_ms"] <= r["median_ms"] <= r["p90_ms"]
    pluggable_row, numpy_row = data["results"]
    assert 0 < pluggable_row["host_median_ms"] and numpy_row["host_median_ms"] is None
    assert "| host ms |" in proc.stdout


def test_step_kernel_calls_names_the_step_kernels():
    """benchmarks/step_kernel_calls.py times the kernel calls of eager steps
    by op: the CNN's forward, backward and Adam kernels, on their paths."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "step_kernel_calls.py"), "--device",
         "MY_DEVICE:0", "--steps", "2", "--batch", "4"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    rows = {tuple(c.strip() for c in line.split("|")[1:3]): line
            for line in proc.stdout.splitlines() if line.startswith("| ")}
    for op in ("Conv2D", "Conv2DBackpropFilter", "MatMul", "BiasAddGrad", "Relu"):
        assert (op, "fast") in rows, proc.stdout
    assert ("ResourceApplyAdam", "plan") in rows and ("ReadVariableOp", "plan") in rows
    calls = float(rows[("ResourceApplyAdam", "plan")].split("|")[3])
    assert calls == 8.0  # one per variable of the model


@pytest.mark.parametrize("model", ["cnn", "mlp"])
def test_step_runs_on_my_device_and_matches_numpy(bench, model, rng):
    seed = int(rng.integers(1 << 30))
    with pg.testing.expect_kernel("ResourceApplyAdam", "MY_DEVICE", min_calls=8 if model == "cnn"
                                  else 6), pg.testing.expect_kernel("MatMul", "MY_DEVICE"):
        with pg.device("MY_DEVICE:0"):
            work = bench.Workload(model, 8, 1, seed)
            check = bench.check_same_step(work, bench.NumpyPeer(work))
    assert check["passed"], (seed, check)
    assert check["max_gradient_error"] < 1e-4, (seed, check)


class _WrongPeer:
    """A numpy peer whose learning rate is twice the benchmark's."""
    label = "numpy"

    def __init__(self, bench, work):
        self.inner = bench.NumpyPeer(work)
        self.inner.model.optimizer.lr *= 2

    def __getattr__(self, name):
        return getattr(self.inner, name)


class _WrongGradientPeer(_WrongPeer):
    """A numpy peer whose gradients are scaled (Adam hides the scale in
    the first step's weights: the gradient comparison must catch it)."""

    def __init__(self, bench, work):
        self.inner = bench.NumpyPeer(work)
        grads = self.inner.model.loss_and_grads
        self.inner.model.loss_and_grads = lambda x, y: (lambda lg: (lg[0], [
            g * np.float32(3) for g in lg[1]]))(grads(x, y))


@pytest.mark.parametrize("peer", [_WrongPeer, _WrongGradientPeer])
def test_check_fails_when_the_peer_does_other_work(bench, peer, rng):
    with pg.device("MY_DEVICE:0"):
        work = bench.Workload("cnn", 8, 1, int(rng.integers(1 << 30)))
        assert not bench.check_same_step(work, peer(bench, work))["passed"]


def test_traced_and_captured_modes_do_the_same_work(bench, rng):
    """--modes eager,function,capture: every mode passes the same-step
    check from the same weights, the traced step is traced once, and the
    table has one row per mode and one for the peer."""
    seed = int(rng.integers(1 << 30))
    with pg.testing.expect_kernel("ResourceApplyAdam", "MY_DEVICE", min_calls=8 * 3 * 3):
        out = bench.run("MY_DEVICE:0", ["cnn"], warmup=1, steps=2, tiny=True, seed=seed,
                        cnn_batch=8, mlp_batch=8, modes=("eager", "function", "capture"))
    assert [c["mode"] for c in out["checks"]] == ["eager", "function", "capture"]
    assert all(c["passed"] for c in out["checks"]), (seed, out["checks"])
    assert [r["framework"] for r in out["results"]] == \
        ["pluggable", "pluggable function", "pluggable capture", "numpy"]
    # two traces, as in TensorFlow: the first makes Adam's slots, the second makes none
    assert any("cnn function: 2 trace(s)" in n for n in out["notes"]), out["notes"]
    assert any(n.startswith("cnn capture:") for n in out["notes"]), out["notes"]
    table = bench.table(out)
    assert "| pluggable capture |" in table and "(capture) vs numpy: passed" in table


def _gpu_script(name: str, *, plugin_gpu: bool):
    """Runs benchmarks/`name`. Without PyTorch, or without a GPU (one the
    CUDA plugin sees too, when `plugin_gpu`), it must say which is missing
    and exit 2 (then None); with both it must succeed (then the process)."""
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / name)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    try:
        import torch
        has_gpu = torch.cuda.is_available() and (
            not plugin_gpu or bool(pg.list_physical_devices("GPU")))
    except ImportError:
        assert proc.returncode == 2 and "needs PyTorch" in proc.stderr, proc.stderr
        return None
    if not has_gpu:
        assert proc.returncode == 2 and "no GPU" in proc.stderr, proc.stderr
        return None
    assert proc.returncode == 0, proc.stderr
    return proc


def test_library_host_costs_needs_a_gpu_and_pytorch():
    """benchmarks/library_host_costs_gpu.py times cuDNN and cuBLAS through
    the libraries of the PyTorch wheel: without PyTorch, or without a GPU,
    it says which is missing and exits 2 instead of failing."""
    proc = _gpu_script("library_host_costs_gpu.py", plugin_gpu=False)
    if proc is not None:
        assert "| cublasGemmEx |" in proc.stdout and "| cudnnConvolutionForward" in proc.stdout


def test_dlpack_parts_needs_a_gpu_and_pytorch():
    """benchmarks/dlpack_parts_gpu.py times the pieces of the DLPack round
    trip with PyTorch: without PyTorch or a GPU it says which is missing
    and exits 2; with both it prints every part."""
    proc = _gpu_script("dlpack_parts_gpu.py", plugin_gpu=True)
    if proc is not None:
        for part in ("| our export", "| pg.from_dlpack(torch tensor) |", "| round trip pg"):
            assert part in proc.stdout, proc.stdout


def test_kernel_times_needs_a_gpu_and_pytorch():
    """benchmarks/kernel_times_gpu.py reads kernel times from PyTorch's
    profiler: without PyTorch, or without a GPU, it says which is missing
    and exits 2; with both it prints each op's kernels for both frameworks."""
    proc = _gpu_script("kernel_times_gpu.py", plugin_gpu=True)
    if proc is not None:
        for row in ("| Exp | pluggable | `", "| Exp | PyTorch | `", "| Softmax | pluggable | `"):
            assert row in proc.stdout, proc.stdout
