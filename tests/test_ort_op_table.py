"""One op table for the importer and the ONNX Runtime bridge
(pluggable/onnx/ort_ops.py): the bridge's compiled table (generated into
ort_op_table.h at build time) says what the Python table says, every entry
has the importer's row for exactly the table's opsets, the importer lowers
each of the certifier's one-node models of an entry to a graph that holds
the entry's TensorFlow ops and computes what ONNX Runtime does, and the
bridge refuses a node whose schema the importer has no row for."""
from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from pluggable.onnx import mapping, ort_ops
from pluggable.tools import ort_plugin_check as chk   # (imports onnx only when it builds)

ROOT = pathlib.Path(__file__).resolve().parent.parent
rng = np.random.default_rng()


def bridge_library() -> str:
    from pluggable.onnx.ort import ort_ep_library
    try:
        return ort_ep_library()
    except FileNotFoundError as exc:
        pytest.skip(f"the package was built without the ONNX Runtime bridge ({exc})")


def child(code: str) -> dict:
    """Runs `code` in a fresh interpreter that has not imported pluggable
    (the bridge refuses a process that has); it prints one JSON line last."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code), bridge_library()],
                          capture_output=True, text=True, timeout=120, env=env, cwd="/")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_bridges_compiled_table_is_the_python_table():
    out = child("""
        import ctypes, json, sys
        b = ctypes.CDLL(sys.argv[1])
        b.pg_ort_op_table.restype = b.pg_ort_op_lowerings.restype = ctypes.c_char_p
        print(json.dumps({"types": b.pg_ort_op_table().decode(),
                          "lowerings": b.pg_ort_op_lowerings().decode()}))
    """)
    assert out["types"] == ort_ops.table_text()
    assert out["lowerings"] == ort_ops.lowerings_text()
    assert out["types"].splitlines()[0] == "Add float double int32 int64"
    assert "Conv kind=conv opsets=1- tf=Conv2D aux=Transpose,BiasAdd" in out["lowerings"]


def test_the_generated_header_is_the_tables_and_every_kind_is_lowered():
    header = ROOT / "build" / "ort-generated" / "ort_op_table.h"
    if not header.is_file():
        pytest.skip(f"{header} is written by setup.py build_ext; this tree was built elsewhere")
    assert header.read_text() == ort_ops.c_header()
    source = (ROOT / "c_api" / "ort" / "ort_partition.c").read_text()
    assert '#include "ort_op_table.h"' in source
    assert "static const op_entry OPS[]" not in source   # the table is written once
    cases = set(re.findall(r"case K_(\w+):", source))
    assert cases == {k.upper() for k in ort_ops.KINDS}


def test_a_row_with_an_unknown_kind_or_type_is_refused(monkeypatch):
    monkeypatch.setattr(ort_ops, "OPS", ort_ops.OPS + (
        ort_ops.OrtOp("Cos", "trig", ("Cos",), ort_ops.FLOATS),))
    with pytest.raises(ValueError, match=r"rows \['Cos'\] name an unknown kind"):
        ort_ops.c_header()


@pytest.mark.parametrize("entry", ort_ops.OPS, ids=lambda e: e.onnx)
def test_the_importer_has_a_row_for_exactly_the_tables_opsets(entry):
    for opset in range(1, mapping.MAX_OPSET + 1):
        r = mapping.find("", entry.onnx, opset)
        inside = entry.since <= opset <= entry.until
        assert (r is not None) == inside, (entry, opset)
        if inside:
            assert set(entry.tf) <= set(r.ops), (entry, r.ops)
            if entry.direct:
                assert r.ops == entry.tf[:1], (entry, r.ops)


def test_direct_rows_are_made_from_the_table(monkeypatch):
    """Changing a direct entry changes the importer's row: a reloaded mapping
    with Neg's entry pointing at Abs lowers Neg to Abs."""
    import importlib
    neg = ort_ops.BY_ONNX["Neg"]
    table = tuple(e._replace(tf=("Abs",)) if e is neg else e for e in ort_ops.OPS)
    monkeypatch.setattr(ort_ops, "OPS", table)
    fresh = importlib.util.module_from_spec(importlib.util.find_spec("pluggable.onnx.mapping"))
    fresh.__spec__.loader.exec_module(fresh)
    assert fresh.lowers_to("", "Neg", 17) == ("Abs",)
    assert mapping.lowers_to("", "Neg", 17) == ("Neg",)


def needs_onnxruntime():
    pytest.importorskip("onnx", reason="the one-node models are built with the onnx package")
    return pytest.importorskip("onnxruntime", reason="onnxruntime is the reference and host")


def reference(case, model: bytes, feeds: dict, dt: str):
    ort = needs_onnxruntime()
    try:
        cpu = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - no CPU kernel of this type: numpy is the reference
        return np.asarray(case.ref(*[feeds[n] for n, _, _ in case.inputs], *case.inits.values()))
    return cpu.run(None, feeds)[0]


@pytest.mark.parametrize("entry", ort_ops.OPS, ids=lambda e: e.onnx)
def test_the_importer_lowers_each_entry_to_its_tensorflow_ops(entry):
    """Each (element type, certifier model) of the entry, imported with
    pg.onnx, computes what ONNX Runtime's CPU EP (numpy where that has no
    kernel) computes on fresh random inputs, and the graphs of the entry's
    models hold every TensorFlow op of the entry (integer Div is the
    importer's own composition: its float models hold RealDiv)."""
    needs_onnxruntime()
    import pluggable as pg
    seen, ran = set(), 0
    for t in entry.types:
        dt = chk.ELEM[t]
        cases = chk.recipes(entry.onnx, dt, rng)
        assert cases, f"the certifier has no model for {entry.onnx}"
        for case in cases:
            if not chk.onnx_allows(entry.onnx, t, case.opset):
                continue
            model = chk.build_model(case, dt)
            pm = pg.onnx.import_model(model)
            feeds = {n: chk.random_input(rng, s, dt, k) for n, s, k in case.inputs}
            got = pm(feeds)["y"].numpy()
            why = chk.differs(np.asarray(got), reference(case, model, feeds, dt), dt)
            assert why is None, (entry.onnx, t, case.variant, why)
            (cf,) = pm._cache.values()
            seen |= {n.op for n in cf.graph.nodes}
            ran += 1
    assert ran, entry
    assert set(entry.tf) <= seen, (entry.onnx, seen)


def test_the_bridge_claims_no_schema_the_importer_has_no_row_for():
    """Reshape before opset 5 (its shape an attribute) has no importer row:
    the bridge leaves it to the CPU EP and says why; Reshape-5 is claimed."""
    needs_onnxruntime()
    assert mapping.find("", "Reshape", 4) is None
    out = child("""
        import ctypes, json, os, sys
        import numpy as np
        import onnxruntime as ort
        from onnx import TensorProto, helper, numpy_helper
        lib = sys.argv[1]
        ort.register_execution_provider_library("pluggable", lib)
        b = ctypes.CDLL(lib)
        b.pg_ort_unclaimed_report.restype = ctypes.c_char_p
        b.pg_ort_nodes_compiled.restype = ctypes.c_int64
        devs = [d for d in ort.get_ep_devices() if d.ep_name == "pluggable_MY_DEVICE"]

        def run(opset):
            if opset < 5:
                node = helper.make_node("Reshape", ["x"], ["y"], name="r", shape=[3, 4])
                inits = []
            else:
                node = helper.make_node("Reshape", ["x", "s"], ["y"], name="r")
                inits = [numpy_helper.from_array(np.array([3, 4], np.int64), "s")]
            g = helper.make_graph([node], "g",
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                                  initializer=inits)
            ops = [helper.make_opsetid("", opset)]
            # (onnx's table of IR versions starts at opset 7; opset 4 is IR 3)
            m = helper.make_model(g, opset_imports=ops, ir_version=3 if opset < 7 else
                                  helper.find_min_ir_version_for(ops))
            so = ort.SessionOptions()
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
            so.add_provider_for_devices(devs, {})
            before = b.pg_ort_nodes_compiled()
            s = ort.InferenceSession(m.SerializeToString(), so)
            compiled = b.pg_ort_nodes_compiled() - before
            x = np.random.default_rng().standard_normal((2, 6)).astype(np.float32)
            same = bool(np.array_equal(s.run(None, {"x": x})[0], x.reshape(3, 4)))
            return {"compiled": compiled, "same": same,
                    "report": b.pg_ort_unclaimed_report().decode()}

        print(json.dumps({"old": run(4), "new": run(13)}))
    """)
    assert out["old"]["compiled"] == 0 and out["old"]["same"], out
    assert out["old"]["report"].splitlines() == [
        "pluggable: node 'r' (Reshape): Reshape of opset 1 is not lowered (the op table "
        "takes opset 5 and later)"], out
    assert out["new"]["compiled"] == 1 and out["new"]["same"], out
    assert out["new"]["report"] == "", out
