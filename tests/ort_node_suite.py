"""Runs onnx's backend node suite through ``onnxruntime.backend`` twice: with
ONNX Runtime's CPU EP only, and with pluggable's EP for a device type first
(``pluggable_MY_DEVICE``, then the CPU EP), and prints one JSON line per case
and a summary line.

Run as a script, in a process that has not imported pluggable (the bridge
refuses one that has)::

    python tests/ort_node_suite.py --bridge pluggable/onnx/libpluggable_ort_ep.so [--ep NAME]
                                   [--case REGEX]

The cases are onnx's own (``onnx.backend.test.case.node.collect_testcases``:
the models and data sets from which onnx writes ``backend/test/data/node``),
run as onnx's runner runs a node case: ``Backend.prepare(model, "CPU")``,
``rep.run(inputs)`` per data set, ``Runner.assert_similar_outputs`` with the
case's rtol and atol. For each case the bridge's counters say what ran on
the plugin: ``nodes_compiled`` (the case's nodes the EP claimed) and
``kernel_runs`` (plugin kernels run over its data sets).
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import sys
import time
import warnings

import numpy as np
import onnxruntime as ort
from onnx.backend.test.case import node as node_cases
from onnx.backend.test.runner import Runner, _normalize_tensor
from onnxruntime import InferenceSession, SessionOptions
from onnxruntime.backend.backend import OnnxRuntimeBackend
from onnxruntime.backend.backend_rep import OnnxRuntimeBackendRep


def backend_for(providers: list[str]) -> type:
    """An ``onnxruntime.backend`` backend whose sessions use `providers`
    (``OnnxRuntimeBackend.prepare`` takes no provider list: it uses every
    available provider, which does not include plugin EPs)."""

    class Backend(OnnxRuntimeBackend):
        @classmethod
        def prepare(cls, model, device=None, **kwargs):
            if isinstance(model, (str, bytes)):
                options = SessionOptions()
                options.add_session_config_entry(
                    "session.allow_released_opsets_only",
                    "1" if cls.allowReleasedOpsetsOnly else "0")
                session = InferenceSession(model, sess_options=options, providers=providers)
                session.disable_fallback()
                return OnnxRuntimeBackendRep(session)
            return super().prepare(model, device, **kwargs)

    Backend.__name__ = "Backend_" + "_".join(providers)
    return Backend


def run_case(backend, case) -> str | None:
    """None when `case` passes on `backend`, else the first line of why not."""
    try:
        rep = backend.prepare(case.model, "CPU")
        for inputs, ref_outputs in case.data_sets:
            outputs = rep.run([_normalize_tensor(x) for x in inputs])
            Runner.assert_similar_outputs([_normalize_tensor(x) for x in ref_outputs], outputs,
                                          rtol=case.rtol, atol=case.atol)
    except Exception as exc:  # noqa: BLE001 - the failure is the result
        text = str(exc).strip().splitlines()
        return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bridge", required=True)
    ap.add_argument("--ep", default="pluggable_MY_DEVICE")
    ap.add_argument("--case", default=None, help="only cases whose name matches this regex")
    args = ap.parse_args(argv)
    if "pluggable" in sys.modules:
        raise SystemExit("run without pluggable imported")
    warnings.simplefilter("ignore")
    np.seterr(all="ignore")
    ort.set_default_logger_severity(3)
    ort.register_execution_provider_library("pluggable", args.bridge)
    if args.ep not in {d.ep_name for d in ort.get_ep_devices()}:
        raise SystemExit(f"no OrtEpDevice of {args.ep}")
    bridge = ctypes.CDLL(args.bridge)
    for c in ("kernel_runs", "nodes_compiled", "partitions_compiled"):
        getattr(bridge, "pg_ort_" + c).restype = ctypes.c_int64
    cpu = backend_for(["CPUExecutionProvider"])
    ours = backend_for([args.ep, "CPUExecutionProvider"])
    start = time.time()
    with warnings.catch_warnings():
        cases = [c for c in node_cases.collect_testcases(None)
                 if args.case is None or re.search(args.case, c.name)]
    summary = {"cases": 0, "cpu_passed": 0, "ours_passed": 0, "regressions": [],
               "claimed_cases": 0, "claimed_and_passed": 0, "nodes_compiled": 0,
               "kernel_runs": 0}
    for case in sorted(cases, key=lambda c: c.name):
        print("CASE " + case.name, file=sys.stderr, flush=True)
        cpu_err = run_case(cpu, case)
        n0, k0, p0 = (bridge.pg_ort_nodes_compiled(), bridge.pg_ort_kernel_runs(),
                      bridge.pg_ort_partitions_compiled())
        ours_err = run_case(ours, case)
        rec = {"name": case.name, "nodes": len(case.model.graph.node),
               "cpu": cpu_err is None, "ours": ours_err is None,
               "nodes_compiled": bridge.pg_ort_nodes_compiled() - n0,
               "partitions": bridge.pg_ort_partitions_compiled() - p0,
               "kernel_runs": bridge.pg_ort_kernel_runs() - k0}
        if ours_err and not cpu_err:
            rec["error"] = ours_err
        print(json.dumps(rec), flush=True)
        summary["cases"] += 1
        summary["cpu_passed"] += rec["cpu"]
        summary["ours_passed"] += rec["ours"]
        summary["nodes_compiled"] += rec["nodes_compiled"]
        summary["kernel_runs"] += rec["kernel_runs"]
        claimed = rec["nodes_compiled"] > 0 and rec["kernel_runs"] > 0
        summary["claimed_cases"] += claimed
        summary["claimed_and_passed"] += claimed and rec["ours"]
        if rec["cpu"] and not rec["ours"]:
            summary["regressions"].append(case.name)
    summary["seconds"] = round(time.time() - start, 1)
    print("SUMMARY " + json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
