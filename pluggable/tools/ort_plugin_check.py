"""Runs a plugin inside ONNX Runtime, through pluggable's execution provider
(``pluggable/onnx/libpluggable_ort_ep.so``), and compares every op the
bridge can claim with ONNX Runtime's own CPU EP.

This file is run as a script in a process of its own (``python
.../ort_plugin_check.py PLUGIN --bridge LIB``): the bridge carries its own
copy of the core and refuses a process that has loaded ``pluggable``
(docs/onnxruntime.md), so this module imports onnxruntime, onnx and numpy
only, never ``pluggable``. ``pluggable.tools.ort_certify`` starts it and
reads its JSON report (the last line it prints; "STAGE ..." lines before
it say what ran, so a crash is placed).

The child registers the bridge with ``PLUGGABLE_PLUGIN_PATH`` naming the
plugin, finds the plugin's line in ``pg_ort_report()`` (loaded, or why not)
and its ``OrtEpDevice`` entries (EP metadata ``pluggable.plugin``), reads
the bridge's op table (``pg_ort_op_table()``: each ONNX op and the element
types its lowering is exact for), and for every (op, element type) builds a
one-node model from a recipe below. Each model runs ``--runs`` times in a
session with the plugin's EP (graph optimizations off, so the node reaches
the EP as built) and in one with the CPU EP only, on the same fresh random
inputs. Whether the EP claimed the node is the bridge's answer
(``pg_ort_nodes_compiled``; the reason from ``pg_ort_unclaimed_report``
where it did not), and a claimed node must run plugin kernels on every run
(``pg_ort_kernel_runs``), so a node quietly left to the CPU cannot pass.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import sys
import time
import traceback

import numpy as np

ELEM = {"float": "float32", "double": "float64", "int32": "int32", "int64": "int64"}
# Tolerances, relative to 1 + |reference| (exact for integers).
TOLERANCE = {"float32": 1e-4, "float64": 1e-9, "int32": 0.0, "int64": 0.0}
COUNTERS = ("kernel_runs", "nodes_compiled", "partitions_compiled", "host_copies")

BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply,
          "Div": lambda a, b: (np.trunc(a / b).astype(a.dtype) if a.dtype.kind == "i"
                               else a / b)}
UNARY = {"Relu": lambda x: np.maximum(x, 0).astype(x.dtype), "Neg": np.negative,
         "Abs": np.abs, "Exp": np.exp, "Log": np.log, "Sqrt": np.sqrt, "Tanh": np.tanh,
         "Sigmoid": lambda x: 1 / (1 + np.exp(-x)),
         "Erf": lambda x: np.vectorize(math.erf)(x).astype(x.dtype)}
POSITIVE = {"Log", "Sqrt"}
# The input whose element type the op's rows are of (Where's first is its condition).
DATA_INPUT = {"Where": 1}


def gelu_ref(x, tanh=False):
    if tanh:
        return (0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))).astype(x.dtype)
    return (0.5 * x * (1 + np.vectorize(math.erf)(x / np.sqrt(2)))).astype(x.dtype)


def conv_ref(x, w, b, pad=1):
    """NCHW convolution, stride 1, symmetric padding `pad` (a reference for
    element types ONNX Runtime's CPU EP has no Conv of)."""
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    win = np.lib.stride_tricks.sliding_window_view(xp, w.shape[2:], axis=(2, 3))
    return (np.einsum("nchwij,ocij->nohw", win, w) + b[None, :, None, None]).astype(x.dtype)


def pool_ref(x, reduce):
    """2x2 windows with stride 2 over NCHW."""
    n, c, h, w = x.shape
    return reduce(x.reshape(n, c, h // 2, 2, w // 2, 2), axis=(3, 5))


class Case:
    """One model: `nodes` (onnx NodeProtos), graph inputs [(name, shape,
    kind)] with kind "any", "positive" or "nonzero", `inits` {name: array},
    `ref`: a numpy function of the inputs (for element types ONNX Runtime's
    CPU EP has no kernel of), `opset`, `out`: the output's numpy dtype
    when not the inputs' (Cast)."""

    def __init__(self, variant, nodes, inputs, inits=None, ref=None, opset=17, out=None):
        self.variant, self.nodes, self.inputs = variant, nodes, inputs
        self.inits, self.ref, self.opset, self.out = inits or {}, ref, opset, out


def recipes(op: str, dt: str, rng) -> list[Case]:
    """The models that check `op` in element type `dt` (numpy name)."""
    from onnx import helper
    n = helper.make_node
    if op in BINARY:
        return [Case("broadcast [3,4] by [4]", [n(op, ["a", "b"], ["y"], name="node")],
                     [("a", [3, 4], "any"), ("b", [4], "nonzero" if op == "Div" else "any")],
                     ref=BINARY[op])]
    if op in UNARY:
        return [Case("[3,4]", [n(op, ["x"], ["y"], name="node")],
                     [("x", [3, 4], "positive" if op in POSITIVE else "any")], ref=UNARY[op])]
    if op == "Pow":
        return [Case("positive [3,4] ** [4]", [n(op, ["a", "b"], ["y"], name="node")],
                     [("a", [3, 4], "positive"), ("b", [4], "any")], ref=np.power)]
    if op == "Gelu":
        return [Case(f"approximate {m}, [3,4]", [n(op, ["x"], ["y"], name="node", approximate=m)],
                     [("x", [3, 4], "any")], ref=lambda x, m=m: gelu_ref(x, m == "tanh"),
                     opset=20)
                # (ONNX Runtime's CPU EP computes the double tanh form ~6e-9 off the formula)
                for m in (("none", "tanh") if dt == "float32" else ("none",))]
    if op == "Transpose":
        return [Case("perm [2,0,1] of [2,3,4]", [n(op, ["x"], ["y"], name="node", perm=[2, 0, 1])],
                     [("x", [2, 3, 4], "any")], ref=lambda x: x.transpose(2, 0, 1)),
                Case("reversed (no perm) [2,3,4]", [n(op, ["x"], ["y"], name="node")],
                     [("x", [2, 3, 4], "any")], ref=lambda x: x.transpose())]
    if op == "Cast":
        from onnx.helper import np_dtype_to_tensor_dtype
        other = "float32" if dt != "float32" else "int32"
        return [Case(f"to {to}, [3,4]", [n(op, ["x"], ["y"], name="node",
                                           to=np_dtype_to_tensor_dtype(np.dtype(to)))],
                     [("x", [3, 4], "any")], ref=lambda x, to=to: x.astype(to), out=to)
                for to in (other, "bool")]
    if op == "Where":
        cond = rng.random((3, 4)) < 0.5
        return [Case("condition [3,4], [3,4] or [4]", [n(op, ["c", "a", "b"], ["y"], name="node")],
                     [("a", [3, 4], "any"), ("b", [4], "any")], inits={"c": cond},
                     ref=lambda a, b, c: np.where(c, a, b))]
    if op == "Gather":
        i64 = np.array([[0, 4], [-1, 2]], np.int64)
        i32 = np.array([1, -2, 0], np.int32)
        return [Case("axis 0 of [5,4], int64 [[0,4],[-1,2]]",
                     [n(op, ["x", "i"], ["y"], name="node", axis=0)], [("x", [5, 4], "any")],
                     inits={"i": i64}, ref=lambda x, i: np.take(x, i, axis=0)),
                Case("axis 1 of [5,4], int32 [1,-2,0]",
                     [n(op, ["x", "i"], ["y"], name="node", axis=1)], [("x", [5, 4], "any")],
                     inits={"i": i32}, ref=lambda x, i: np.take(x, i, axis=1))]
    if op == "Unsqueeze":
        return [Case("axes [0,2] input of [3,4]", [n(op, ["x", "axes"], ["y"], name="node")],
                     [("x", [3, 4], "any")], inits={"axes": np.array([0, 2], np.int64)},
                     ref=lambda x, axes: x.reshape(1, 3, 1, 4), opset=13),
                Case("axes [-1] attribute of [3,4]",
                     [n(op, ["x"], ["y"], name="node", axes=[-1])], [("x", [3, 4], "any")],
                     ref=lambda x: x.reshape(3, 4, 1), opset=11)]
    if op == "Squeeze":
        return [Case("axes [1] input of [3,1,4]", [n(op, ["x", "axes"], ["y"], name="node")],
                     [("x", [3, 1, 4], "any")], inits={"axes": np.array([1], np.int64)},
                     ref=lambda x, axes: x.reshape(3, 4), opset=13),
                Case("no axes, [3,1,4,1]", [n(op, ["x"], ["y"], name="node")],
                     [("x", [3, 1, 4, 1], "any")], ref=lambda x: x.reshape(3, 4), opset=13),
                Case("axes [0] attribute of [1,3,4]",
                     [n(op, ["x"], ["y"], name="node", axes=[0])], [("x", [1, 3, 4], "any")],
                     ref=lambda x: x.reshape(3, 4), opset=11)]
    if op == "ReduceMean":
        return [Case("axes [1] attribute, keepdims 0, [3,4,5]",
                     [n(op, ["x"], ["y"], name="node", axes=[1], keepdims=0)],
                     [("x", [3, 4, 5], "any")], ref=lambda x: x.mean(axis=1)),
                Case("axes [-1] input, keepdims 1, [3,4,5]",
                     [n(op, ["x", "axes"], ["y"], name="node")], [("x", [3, 4, 5], "any")],
                     inits={"axes": np.array([-1], np.int64)},
                     ref=lambda x, axes: x.mean(axis=-1, keepdims=True), opset=18),
                Case("no axes (every one), keepdims 0, [3,4]",
                     [n(op, ["x"], ["y"], name="node", keepdims=0)], [("x", [3, 4], "any")],
                     ref=lambda x: np.asarray(x.mean(), x.dtype), opset=18)]
    if op == "LayerNormalization":
        def ln_ref(x, s, b, axis):
            axes = tuple(range(axis, x.ndim))
            m = x.mean(axis=axes, keepdims=True)
            v = ((x - m) ** 2).mean(axis=axes, keepdims=True)
            return ((x - m) / np.sqrt(v + 1e-5) * s + b).astype(x.dtype)
        return [Case(f"axis {axis} of [3,4,5], scale and bias",
                     [n(op, ["x", "s", "b"], ["y"], name="node", axis=axis)],
                     [("x", [3, 4, 5], "any")],
                     inits={"s": rng.standard_normal(shape).astype(dt),
                            "b": rng.standard_normal(shape).astype(dt)},
                     ref=lambda x, s, b, axis=axis: ln_ref(x, s, b, axis))
                for axis, shape in ((-1, (5,)), (1, (4, 5)))]
    if op == "MatMul":
        return [Case("2-D [3,4] @ [4,5]", [n(op, ["a", "b"], ["y"], name="node")],
                     [("a", [3, 4], "any"), ("b", [4, 5], "any")], ref=np.matmul),
                Case("batched [2,3,4] @ [2,4,5]", [n(op, ["a", "b"], ["y"], name="node")],
                     [("a", [2, 3, 4], "any"), ("b", [2, 4, 5], "any")], ref=np.matmul)]
    if op == "Gemm":
        return [Case("transB, alpha 0.5, C [5]",
                     [n(op, ["a", "b", "c"], ["y"], name="node", transB=1, alpha=0.5)],
                     [("a", [3, 4], "any"), ("b", [5, 4], "any"), ("c", [5], "any")])]
    if op in ("Softmax", "LogSoftmax"):
        return [Case("axis -1 of [3,5]", [n(op, ["x"], ["y"], name="node", axis=-1)],
                     [("x", [3, 5], "any")])]
    if op == "Conv":
        return [Case("3x3, pads 1, bias, NCHW [1,2,5,5]",
                     [n(op, ["x", "w", "b"], ["y"], name="node", kernel_shape=[3, 3],
                        pads=[1, 1, 1, 1])],
                     [("x", [1, 2, 5, 5], "any")],
                     inits={"w": rng.standard_normal((3, 2, 3, 3)).astype(dt),
                            "b": rng.standard_normal(3).astype(dt)}, ref=conv_ref)]
    if op in ("MaxPool", "AveragePool"):
        return [Case("2x2, strides 2, NCHW [1,2,6,6]",
                     [n(op, ["x"], ["y"], name="node", kernel_shape=[2, 2], strides=[2, 2])],
                     [("x", [1, 2, 6, 6], "any")],
                     ref=lambda x: pool_ref(x, np.max if op == "MaxPool" else np.mean))]
    if op == "GlobalAveragePool":
        return [Case("NCHW [1,3,4,4]", [n(op, ["x"], ["y"], name="node")],
                     [("x", [1, 3, 4, 4], "any")],
                     ref=lambda x: x.mean(axis=(2, 3), keepdims=True))]
    if op == "Concat":
        return [Case("axis 1, [2,3] and [2,2]", [n(op, ["a", "b"], ["y"], name="node", axis=1)],
                     [("a", [2, 3], "any"), ("b", [2, 2], "any")],
                     ref=lambda a, b: np.concatenate([a, b], 1))]
    if op == "Sum":
        return [Case("three [3,4]", [n(op, ["a", "b", "c"], ["y"], name="node")],
                     [("a", [3, 4], "any"), ("b", [3, 4], "any"), ("c", [3, 4], "any")],
                     ref=lambda a, b, c: a + b + c)]
    if op == "Reshape":
        return [Case("[2,6] to [3,4]", [n(op, ["x", "shape"], ["y"], name="node")],
                     [("x", [2, 6], "any")], inits={"shape": np.array([3, 4], np.int64)},
                     ref=lambda x, shape: x.reshape(shape))]
    if op == "Flatten":
        return [Case("axis 1 of [2,3,4]", [n(op, ["x"], ["y"], name="node", axis=1)],
                     [("x", [2, 3, 4], "any")], ref=lambda x: x.reshape(2, 12))]
    if op == "BatchNormalization":
        c = 3
        return [Case("inference, NCHW [2,3,4,4]",
                     [n(op, ["x", "s", "b", "m", "v"], ["y"], name="node")],
                     [("x", [2, c, 4, 4], "any")],
                     inits={"s": rng.standard_normal(c).astype(dt),
                            "b": rng.standard_normal(c).astype(dt),
                            "m": rng.standard_normal(c).astype(dt),
                            "v": (np.abs(rng.standard_normal(c)) + 0.5).astype(dt)},
                     ref=lambda x, s, b, m, v: ((x - m[:, None, None]) / np.sqrt(
                         v[:, None, None] + 1e-5) * s[:, None, None] + b[:, None, None]))]
    if op == "Identity":
        return [Case("[3,4]", [n(op, ["x"], ["y"], name="node")], [("x", [3, 4], "any")],
                     ref=lambda x: x)]
    if op == "Dropout":
        return [Case("inference, one output", [n(op, ["x"], ["y"], name="node")],
                     [("x", [3, 4], "any")], ref=lambda x: x)]
    return []


def onnx_allows(op: str, onnx_type: str, opset: int) -> bool:
    """Whether ONNX's schema of `op` at `opset` takes tensors of `onnx_type`
    (the bridge's table may list types the op's schema has not)."""
    from onnx import defs
    try:
        schema = defs.get_schema(op, opset)
    except Exception:  # noqa: BLE001 - no schema: let ONNX Runtime say
        return True
    want = f"tensor({onnx_type})"
    t0 = schema.inputs[DATA_INPUT.get(op, 0)].type_str
    for c in schema.type_constraints:
        if c.type_param_str == t0:
            return want in c.allowed_type_strs
    return True


def random_input(rng, shape, dt, kind):
    if dt.startswith("int"):
        x = rng.integers(-9, 10, size=shape)
        if kind == "positive":
            x = np.abs(x) + 1
        elif kind == "nonzero":
            x = np.where(x == 0, 3, x)
        return x.astype(dt)
    x = rng.standard_normal(shape)
    if kind == "positive":
        x = np.abs(x) + 0.1
    elif kind == "nonzero":
        x = np.where(np.abs(x) < 0.1, 0.5, x)
    return x.astype(dt)


def build_model(case: Case, dt: str) -> bytes:
    from onnx import helper, numpy_helper
    from onnx.helper import np_dtype_to_tensor_dtype
    t = np_dtype_to_tensor_dtype(np.dtype(dt))
    g = helper.make_graph(
        case.nodes, "check",
        [helper.make_tensor_value_info(name, t, shape) for name, shape, _ in case.inputs],
        [helper.make_tensor_value_info(
            "y", t if case.out is None else np_dtype_to_tensor_dtype(np.dtype(case.out)), None)],
        initializer=[numpy_helper.from_array(v, k) for k, v in case.inits.items()])
    ops = [helper.make_opsetid("", case.opset)]
    # the lowest IR version that carries the opset: onnx writes its newest, which
    # an onnxruntime release older than that onnx refuses
    return helper.make_model(g, opset_imports=ops,
                             ir_version=helper.find_min_ir_version_for(ops)).SerializeToString()


def differs(got, want, dt) -> str | None:
    """Why `got` is not `want` (None when equal within the tolerance)."""
    if got.dtype != want.dtype or got.shape != want.shape:
        return f"got {got.dtype}{list(got.shape)}, expected {want.dtype}{list(want.shape)}"
    if got.size == 0:
        return None
    err = float(np.max(np.abs(got.astype(np.float64) - want) / (1 + np.abs(want))))
    if not err <= TOLERANCE[dt]:
        return f"largest difference {err:.3g} (tolerance {TOLERANCE[dt]:g})"
    return None


def check_case(ort, bridge, devices, op, onnx_type, case, runs, rng) -> dict:
    dt = ELEM[onnx_type]
    out = {"op": op, "type": onnx_type, "variant": case.variant, "status": "ok", "detail": "",
           "claimed": False, "nodes_compiled": 0, "kernel_runs": []}
    model = build_model(case, dt)

    def counters():
        return {c: getattr(bridge, "pg_ort_" + c)() for c in COUNTERS}

    before = counters()
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.add_provider_for_devices(devices, {})
    ours_error = None
    try:
        ours = ort.InferenceSession(model, so)
    except Exception as exc:  # noqa: BLE001 - ONNX Runtime's error is the result
        ours, ours_error = None, f"{type(exc).__name__}: {exc}"
    compiled = counters()["nodes_compiled"] - before["nodes_compiled"]
    out["nodes_compiled"] = compiled
    out["claimed"] = compiled > 0
    if not out["claimed"]:
        lines = [ln for ln in bridge.pg_ort_unclaimed_report().decode().splitlines()
                 if "node 'node'" in ln]
        out["status"] = "unclaimed"
        out["detail"] = lines[-1] if lines else (
            "not claimed" + (f" ({ours_error})" if ours_error else ""))
        return out
    if ours is None:
        out["status"], out["detail"] = "mismatch", f"the session failed: {ours_error}"
        return out
    try:
        cpu = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - no CPU kernel: numpy is the reference
        cpu, cpu_error = None, f"{type(exc).__name__}: {exc}".splitlines()[0]
    if cpu is None and case.ref is None:
        out["status"] = "no_reference"
        out["detail"] = f"ONNX Runtime's CPU EP cannot run it ({cpu_error})"
        return out
    out["reference"] = "onnxruntime CPU" if cpu is not None else "numpy"
    for _ in range(runs):
        feeds = {name: random_input(rng, shape, dt, kind) for name, shape, kind in case.inputs}
        b = counters()["kernel_runs"]
        try:
            got, = ours.run(None, feeds)
        except Exception as exc:  # noqa: BLE001 - a failed kernel is the result
            out["status"], out["detail"] = "mismatch", f"{type(exc).__name__}: {exc}"
            return out
        ran = counters()["kernel_runs"] - b
        out["kernel_runs"].append(ran)
        want = (cpu.run(None, feeds)[0] if cpu is not None
                else np.asarray(case.ref(*[feeds[name] for name, _, _ in case.inputs],
                                         *case.inits.values())))
        why = differs(got, want, dt)
        if why:
            out["status"], out["detail"] = "mismatch", why
            return out
        if ran <= 0:
            out["status"] = "not_run"
            out["detail"] = "claimed, but no plugin kernel ran (the node ran elsewhere)"
            return out
    return out


def stage(what: str) -> None:
    """Says what runs next (the parent names it if this process dies)."""
    print("STAGE " + what, flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("plugin")
    ap.add_argument("--bridge", required=True, help="libpluggable_ort_ep.so")
    ap.add_argument("--min-version", default="1.23",
                    help="the oldest onnxruntime the bridge supports")
    ap.add_argument("--runs", type=int, default=3, help="runs per model, fresh inputs each")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--op", action="append", default=[], help="check only these ONNX ops")
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    report = {"error": None, "detail": "", "seed": seed, "devices": [], "results": []}
    start = time.time()

    def done(error=None, detail=""):
        report["error"], report["detail"] = error, detail
        report["seconds"] = round(time.time() - start, 3)
        print(json.dumps(report))
        return 0

    if "pluggable" in sys.modules:
        return done("crashed", "this checker must run without pluggable imported")
    try:
        import onnx  # noqa: F401 - the recipes build models with it
        import onnxruntime as ort
    except Exception as exc:  # noqa: BLE001
        return done("onnxruntime_missing", f"{type(exc).__name__}: {exc}")
    report["onnxruntime"] = ort.__version__
    have = tuple(int(p) for p in ort.__version__.split(".")[:2] if p.isdigit())
    need = tuple(int(p) for p in args.min_version.split("."))
    if have < need:
        return done("onnxruntime_too_old",
                    f"onnxruntime {ort.__version__} is older than {args.min_version}, the "
                    "oldest the pluggable execution provider supports: pip install "
                    f"'onnxruntime>={args.min_version}'")
    plugin = os.path.realpath(args.plugin)
    stage("registering the bridge, which loads the plugin")
    try:
        ort.register_execution_provider_library("pluggable", args.bridge)
    except Exception as exc:  # noqa: BLE001
        return done("register_failed", f"{type(exc).__name__}: {exc}")
    bridge = ctypes.CDLL(args.bridge)
    for f in ("pg_ort_report", "pg_ort_unclaimed_report", "pg_ort_op_table"):
        getattr(bridge, f).restype = ctypes.c_char_p
    for c in COUNTERS:
        getattr(bridge, "pg_ort_" + c).restype = ctypes.c_int64
    lines = [ln for ln in bridge.pg_ort_report().decode().splitlines()
             if ln.startswith(plugin + ": ")]
    report["load"] = lines[0][len(plugin) + 2:] if lines else "not found by the bridge"
    if not lines or not lines[0][len(plugin) + 2:].startswith("loaded"):
        return done("load_failed", f"the bridge did not load {plugin}: {report['load']}")
    devices = [d for d in ort.get_ep_devices()
               if os.path.realpath(d.ep_metadata.get("pluggable.plugin", "")) == plugin]
    report["devices"] = [{"ep": d.ep_name, "device": d.ep_metadata.get("pluggable.device"),
                          "hardware": str(d.device.type)} for d in devices]
    if not devices:
        return done("no_devices", f"ONNX Runtime lists no OrtEpDevice for {plugin}")
    rng = np.random.default_rng(seed)
    table = [ln.split() for ln in bridge.pg_ort_op_table().decode().splitlines() if ln]
    for op, *types in table:
        if args.op and op not in args.op:
            continue
        for t in types:
            cases = recipes(op, ELEM[t], rng)
            if not cases:
                report["results"].append({"op": op, "type": t, "variant": "", "claimed": False,
                                          "status": "no_recipe",
                                          "detail": "the checker has no model for this op"})
            for case in cases:
                if not onnx_allows(op, t, case.opset):
                    report["results"].append({
                        "op": op, "type": t, "variant": case.variant, "claimed": False,
                        "status": "not_onnx",
                        "detail": f"ONNX's {op} (opset {case.opset}) takes no {t} tensors"})
                    continue
                stage(f"{op} [{t}, {case.variant}]")
                try:
                    r = check_case(ort, bridge, devices[:1], op, t, case, args.runs, rng)
                except Exception:  # noqa: BLE001 - a checker error is reported, not raised
                    r = {"op": op, "type": t, "variant": case.variant, "claimed": False,
                         "status": "mismatch", "detail": traceback.format_exc(limit=2)}
                report["results"].append(r)
    return done()


if __name__ == "__main__":
    sys.exit(main())
