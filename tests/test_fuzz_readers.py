"""Fuzzing the readers of untrusted files at small scale: a seeded mutator
(tests/fuzz_readers.py) turns valid GraphDefs, ONNX models and a valid checkpoint into a
few thousand broken ones, read in a child process. The child must exit
normally (no signal), within a time bound (no hang), and every failure must
be a pluggable error. The seed is fresh each run (PLUGGABLE_FUZZ_SEED fixes
it) and is printed with any failure, so a failing case replays."""
from __future__ import annotations

import json
import os
import pathlib
import random
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent


def _run(kind: str, cases: int, timeout: float, script: str = "fuzz_readers.py") -> dict:
    """Runs `cases` cases of fuzzer `script` (a child process) on `kind`
    with a fresh seed; fails on a signal, a hang or an untyped error."""
    seed = int(os.environ.get("PLUGGABLE_FUZZ_SEED") or random.SystemRandom().randrange(2**31))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), str(HERE)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    try:
        proc = subprocess.run([sys.executable, str(HERE / script), kind, str(seed),
                               str(cases)], env=env, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{kind} fuzzing (seed={seed}) hung past {timeout} s")
    assert proc.returncode == 0, (f"seed={seed}: the child exited with {proc.returncode}"
                                  f"\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["n_untyped"] == 0, f"seed={seed}: " + json.dumps(result["untyped"], indent=1)
    assert result["cases"] == cases
    return result


def test_fuzzed_graph_defs_give_only_typed_errors():
    result = _run("graphdef", 2000, timeout=240)
    # the mutator must reach both outcomes, or it tests nothing
    assert result["typed"] > 1000 and result["ok"] > 20, result


def test_fuzzed_checkpoints_give_only_typed_errors():
    result = _run("checkpoint", 3000, timeout=240)
    assert result["typed"] > 1500 and result["ok"] > 50, result


def test_fuzzed_onnx_models_give_only_typed_errors():
    pytest.importorskip("onnx", reason="the ONNX importer reads models with the onnx package")
    result = _run("onnx", 1500, timeout=300)
    assert result["typed"] > 700 and result["ok"] > 100, result
