"""What ``import pluggable`` does and leaves for later: the subsystems it only
re-exports are imported at first use (and are then the same objects), the
public names stay listed, and the entry-point scan reads importlib.metadata
only when a distribution can declare a plugin. (Its time is measured by
benchmarks/bench_import.py, never asserted here.)"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import zipfile

import pytest

import pluggable as pg
from pluggable.plugins import discovery

ROOT = pathlib.Path(__file__).resolve().parent.parent
LAZY_SUBSYSTEMS = ("pluggable.graph", "pluggable.profiler", "pluggable.custom_ops",
                   "pluggable.distribute", "pluggable.training", "pluggable.framework.proto",
                   "pluggable.framework.op_catalog", "ml_dtypes")

CHILD = r"""
import json, sys
import pluggable as pg
before = sorted(m for m in sys.modules if m.startswith("pluggable"))
f = pg.function
from pluggable import custom_op, profiler
print(json.dumps({"file": pg.__file__, "before": before,
                  "after": sorted(m for m in sys.modules if m.startswith("pluggable")),
                  "plugins": [r.status for r in pg.plugins()]}))
"""


def _run_child(code: str) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter that imports this checkout (the caller's
    PYTHONPATH kept after it)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    return subprocess.run([sys.executable, "-c", code], cwd=str(ROOT), env=env,
                          capture_output=True, text=True, timeout=120)


def _child() -> dict:
    proc = _run_child(CHILD)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_import_leaves_subsystems_to_first_use():
    res = _child()
    assert res["file"].startswith(str(ROOT)), res["file"]
    for name in LAZY_SUBSYSTEMS:
        assert not any(m == name or m.startswith(name + ".") for m in res["before"]), name
    for name in ("pluggable.graph", "pluggable.custom_ops", "pluggable.profiler"):
        assert name in res["after"], name
    assert "pluggable.autodiff" in res["before"]  # registers the gradient functions
    assert "pluggable.autodiff.tape" not in res["before"]
    assert res["plugins"] and all(s in ("loaded", "quarantined", "skipped")
                                  for s in res["plugins"])


def test_lazy_names_are_the_defining_modules_objects():
    from pluggable import custom_ops, graph, optimizers, profiler, train  # noqa: F401
    from pluggable.graph import device_capture
    from pluggable.training import checkpoint, optimizers as training_optimizers
    assert pg.function is graph.function and pg.cond is graph.cond
    assert pg.while_loop is graph.while_loop and pg.TensorSpec is graph.TensorSpec
    assert pg.ConcreteFunction is graph.ConcreteFunction
    assert pg.custom_op is custom_ops.custom_op
    from pluggable.autodiff import tape
    assert pg.GradientTape is tape.GradientTape
    assert pg.UnconnectedGradients is tape.UnconnectedGradients
    assert pg.optimizers.SGD is training_optimizers.SGD
    assert pg.train.Checkpoint is checkpoint.Checkpoint
    assert pg.profiler is sys.modules["pluggable.profiler"]
    assert pg.distribute is sys.modules["pluggable.distribute"]
    assert pg.graph_util.import_graph_def is sys.modules["pluggable.graph.graph_util"].import_graph_def
    assert pg.config.set_graph_capture is device_capture.set_graph_capture
    assert pg.config.get_graph_capture is device_capture.get_graph_capture
    from pluggable.framework import op_catalog
    assert pg.ops.get is op_catalog.get and pg.ops.list is op_catalog.list_ops
    assert {"get", "list"} <= set(dir(pg.ops))


def test_bfloat16_numpy_type_is_found_when_first_needed():
    # In a fresh interpreter: ml_dtypes is not imported by import pluggable,
    # a bfloat16 array made by the user maps to pg.bfloat16, and a bfloat16
    # tensor reads back as the same numpy type.
    code = ("import sys, numpy as np, pluggable as pg\n"
            "assert 'ml_dtypes' not in sys.modules\n"
            "import ml_dtypes\n"
            "a = np.random.default_rng().standard_normal(5).astype(ml_dtypes.bfloat16)\n"
            "assert pg.as_dtype(a.dtype) is pg.bfloat16\n"
            "t = pg.constant(a)\n"
            "assert t.dtype is pg.bfloat16 and t.numpy().dtype == a.dtype\n"
            "np.testing.assert_array_equal(t.numpy(), a)\n"
            "print('ok')\n")
    proc = _run_child(code)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def test_public_names_are_listed_and_resolve():
    listed = dir(pg)
    missing = [n for n in pg.__all__ if n not in listed]
    assert not missing, missing
    for name in pg.__all__:
        getattr(pg, name)  # raises AttributeError for a name that does not resolve
    assert {"get_graph_capture", "set_graph_capture"} <= set(dir(pg.config))
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        pg.no_such_name  # noqa: B018
    with pytest.raises(ImportError):
        from pluggable import no_such_name  # noqa: F401


def _dist(site: pathlib.Path, name: str, entry_points: str | None) -> None:
    info = site / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    if entry_points is not None:
        (info / "entry_points.txt").write_text(entry_points)


def test_entry_point_scan_reads_metadata_only_when_a_distribution_may_declare_one(
        tmp_path, monkeypatch):
    site = tmp_path / "site"
    _dist(site, "no_entry_points", None)
    _dist(site, "other_group", "[console_scripts]\nx = y:z\n")
    monkeypatch.setattr(sys, "path", [str(site), str(tmp_path / "missing")])
    import importlib.metadata
    calls = []
    real = importlib.metadata.distributions
    monkeypatch.setattr(importlib.metadata, "distributions",
                        lambda **kw: calls.append(kw) or real(**kw))
    assert discovery._may_declare_entry_points() is False
    assert discovery.entry_point_items() == [] and calls == []
    _dist(site, "a_plugin", f"[{discovery.ENTRY_POINT_GROUP}]\nx = some_module:PATH\n")
    assert discovery._may_declare_entry_points() is True
    items = discovery.entry_point_items()  # some_module does not exist: a broken entry
    assert calls == [{"path": [str(site), str(tmp_path / "missing")]}]
    assert len(items) == 1 and items[0][0] is None and "x = some_module:PATH" in items[0][1]


def test_entry_point_scan_defers_to_metadata_for_what_it_cannot_read(tmp_path, monkeypatch):
    archive = tmp_path / "dists.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("pkg-1.0.dist-info/METADATA", "Name: pkg\n")
    monkeypatch.setattr(sys, "path", [str(archive)])
    assert discovery._may_declare_entry_points() is True

    class Finder:
        @staticmethod
        def find_distributions(context=None):
            return iter(())
    monkeypatch.setattr(sys, "path", [str(tmp_path / "missing")])
    assert discovery._may_declare_entry_points() is False
    monkeypatch.setattr(sys, "meta_path", sys.meta_path + [Finder])
    assert discovery._may_declare_entry_points() is True
