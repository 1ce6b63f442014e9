"""Op semantics against TensorFlow: every built-in op that has a TensorFlow
counterpart of the same name, on every device kind.

Inputs come from the conformance kit's generators
(``pluggable.tools.check.kernels.op_cases``: the op definitions' examples)
for every dtype the op definition allows, plus edge cases made from them:
NaN/Inf poisoned float inputs, integer inputs at the type's limits (wrap
around), and out-of-range indices / bad shapes, which must fail with the
error class TensorFlow raises.  TensorFlow runs by op name with the same
inputs and attributes, all cases in one round trip to its worker process
(tests/tf_oracle.py: TensorFlow cannot share a process with pluggable).

Each (op, device) test runs every case the device has a kernel for inside
``pg.testing.expect_kernel``; GPU:0 skips where no GPU is present.  Cases
TensorFlow's CPU kernels do not support (a dtype it has no kernel for) are
not compared.  The differences the docs list ("Differences from
TensorFlow" in docs/user-guide.md) are in ``KNOWN`` with their reason.
"""
from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
import pytest

import pluggable as pg
from pluggable import errors
from pluggable.framework import dtypes, registry
from pluggable.tools.check.kernels import CheckSkipped, VarInput, op_cases

from conftest import SeededRng

DEVICES = ["CPU:0", "MY_DEVICE:0", "GPU:0"]

# Ops with no TensorFlow counterpart to compare with, and why.
NO_COUNTERPART = {
    "Gelu": "TensorFlow has no Gelu raw op on its CPU (tf.nn.gelu is composed of other ops); "
            "tests/test_host_kernels.py compares it with numpy",
    "GeluGrad": "TensorFlow has no GeluGrad raw op; tests/test_host_kernels.py compares it "
                "with numpy",
    "EagerPyFunc": "its token names a Python function registered in one runtime's own "
                   "table, so TensorFlow cannot run ours; tests/test_function_behaviours.py "
                   "checks pg.py_function against TensorFlow's tf.py_function",
    **{op: "pluggable's own fused transformer op; tests/test_transformer_ops.py compares it "
           "with numpy, finite differences and its composed form"
       for op in ("ScaledDotProductAttention", "ScaledDotProductAttentionGrad", "LayerNorm", "LayerNormGrad")},
    **{op: "a collective runs as one call per device of a group at once, not one op at a "
           "time; tests/test_distribute.py compares it with numpy across MY_DEVICE devices"
       for op in ("CollectiveBcastSendV2", "CollectiveBcastRecvV2")},
    "UnicodeDecodeWithOffsets": "TensorFlow's CPU kernel aborts its process (a CHECK "
                                "failure) for Tsplits=int32; tests/test_strings.py compares "
                                "it with tf.strings.unicode_decode_with_offsets and unicode_split",
    "StringFormat": "its list(type) attribute T cannot cross to the oracle's by-name execution "
                    "(TensorFlow aborts without it); tests/test_strings.py compares it with "
                    "tf.strings.format",
}
# Ops whose inputs are resource variables: TensorFlow's raw ops need its own
# variable handles, so they are compared through their effect elsewhere.
RESOURCE_REASON = ("takes a resource variable handle, which cannot cross to TensorFlow's "
                   "process; tests/test_variables.py and tests/test_optimizers.py compare "
                   "the updates")

# Type variants for attributes that allow any type.
ANY_TYPE = [dtypes.bool_ if hasattr(dtypes, "bool_") else dtypes.as_dtype("bool"), dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.int32, dtypes.int64,
            dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64, dtypes.complex64,
            dtypes.complex128]
INDEX_TYPES = {"Tindices", "Taxis", "Tidx", "Tperm", "Tshape", "Tpaddings", "TI", "Tk",
               "index_type", "Index", "Tnumsegments", "Tmultiples", "out_type",
               "output_type", "Tlen", "Tseed", "Tsplits"}

TOL = {"float16": (2e-2, 2e-2), "bfloat16": (6e-2, 6e-2), "float32": (2e-5, 1e-5),
       "float64": (1e-10, 1e-12), "complex64": (2e-5, 1e-5), "complex128": (1e-10, 1e-12)}
# Ops summing many terms: half types are compared within the dtype's
# precision of the largest reference value (TensorFlow rounds partial sums).
ACCUMULATING = {"BatchMatMulV2", "BiasAddGrad", "Conv2D", "Conv2DBackpropFilter",
                "Conv2DBackpropInput", "Cumsum", "AddN", "UnsortedSegmentSum", "Prod", "Sum",
                "Mean", "AvgPool", "AvgPoolGrad", "MaxPoolGrad", "FusedBatchNormV3",
                "FusedBatchNormGradV3", "SoftmaxCrossEntropyWithLogits",
                "SparseSoftmaxCrossEntropyWithLogits", "LogSoftmax", "Softmax", "MatMul"}
# Outputs compared, where not all are (reserve_space_2 of FusedBatchNormV3
# holds 1/sqrt(var + eps), the cuDNN convention, where TensorFlow's CPU keeps
# the variance).
OUTPUTS = {"FusedBatchNormV3": 3}

# Elementwise arithmetic where integer overflow wraps around.
WRAPPING = {"AddV2", "Sub", "Mul", "Neg", "Abs", "Square", "AddN", "Sum", "Prod", "Cumsum"}
# Ops whose float inputs get NaN / +Inf / -Inf.
NO_NAN_CASE = {"Cast": "float to integer conversion of NaN/Inf is undefined in C++ and "
                       "differs between TensorFlow builds"}

# Known differences (op -> (case tag prefix, reason)); docs/user-guide.md
# lists them.
NAN_MAX = "NaN/Inf: pluggable's max propagates NaN (like numpy); TensorFlow's Eigen max skips it"
KNOWN: dict[str, list[tuple[str, str]]] = {
    "MaxPool": [("nan/inf", NAN_MAX)],
    "MaxPoolGrad": [("nan/inf", NAN_MAX + " (the gradient goes to another element)")],
    "ReluGrad": [("nan/inf", "a NaN gradient where features <= 0 gives 0 (select); "
                             "TensorFlow multiplies by the mask and gives NaN")],
    "Conv2D": [("nan/inf", "windows holding both +Inf and -Inf: the order of accumulation "
                           "decides between Inf and NaN")],
    "Conv2DBackpropFilter": [("nan/inf", "as Conv2D: Inf or NaN by order of accumulation")],
    "Conv2DBackpropInput": [("nan/inf", "as Conv2D: Inf or NaN by order of accumulation")],
    "Erf": [("nan/inf T=float64", "erf(+-Inf) is +-1; TensorFlow's float64 CPU kernel "
                                  "returns NaN")],
    "Round": [(f"random T={t}", "integers are returned unchanged (as tf.round does); "
                                "TensorFlow's raw Round kernel on its CPU returns 0 for them")
              for t in ("int8", "int16", "int32", "int64")],
    "Cast": [("random DstT=uint8", "a negative float to an unsigned type is undefined in "
                                   "C++: pluggable gives 0, TensorFlow wraps around")],
}
# The reserve_space_2 FusedBatchNormGradV3 takes in training: 1/sqrt(var +
# eps) here (cuDNN's convention), the variance on TensorFlow's CPU.
def _tf_inputs(op, case: "Case") -> list[np.ndarray]:
    flat = _flat_inputs(op, case.inputs)
    if op.name == "FusedBatchNormGradV3" and case.attrs.get("is_training", True):
        eps = case.attrs.get("epsilon", op.attrs["epsilon"].default)
        inv = flat[4].astype(np.float64)
        flat[4] = (1.0 / (inv * inv) - eps).astype(flat[4].dtype)
    return flat


@dataclasses.dataclass
class Case:
    tag: str                 # "random float32", "nan float32", "error gather index"...
    inputs: dict
    attrs: dict
    types: dict              # type attribute -> DType (for kernel lookup)


def _np(dt) -> np.dtype:
    return np.dtype(dt.as_numpy_dtype)


def _type_variants(op) -> list[dict]:
    """One constraint dict per (value type attribute, allowed dtype)."""
    variants = []
    for name, a in op.attrs.items():
        if a.kind != "type" or name in INDEX_TYPES:
            continue
        for dt in (a.allowed or ANY_TYPE):
            if dt in ANY_TYPE:
                variants.append({name: dt})
    return variants or [{}]


def _index_types(op) -> dict:
    """int32 for the index type attributes that allow it (TensorFlow's CPU
    kernels read some int16 index inputs as int32)."""
    return {n: dtypes.int32 for n, a in op.attrs.items()
            if n in INDEX_TYPES and a.kind == "type" and a.allowed and dtypes.int32 in a.allowed}


def _full_types(op, constraints: dict) -> dict:
    out = {}
    for n, a in op.attrs.items():
        if a.kind == "type":
            out[n] = constraints.get(n) or (
                dtypes.float32 if not a.allowed or dtypes.float32 in a.allowed else a.allowed[0])
    return out


def _poisoned(inputs: dict, fn) -> dict | None:
    """`inputs` with fn applied to each array fn accepts; None if none."""
    out, changed = {}, False
    for n, v in inputs.items():
        if isinstance(v, list):
            new = [fn(x) for x in v]
            changed |= any(x is not None for x in new)
            out[n] = [x if y is None else y for x, y in zip(v, new)]
        else:
            y = fn(v) if isinstance(v, np.ndarray) else None
            changed |= y is not None
            out[n] = v if y is None else y
    return out if changed else None


def _nan_inf(x: np.ndarray):
    if x.dtype.kind != "f" and x.dtype != np.dtype(ml_dtypes.bfloat16) or x.size < 3:
        return None
    y = x.copy().reshape(-1)
    y[:3] = [np.nan, np.inf, -np.inf]
    return y.reshape(x.shape)


def _limits(x: np.ndarray):
    if x.dtype.kind not in "iu" or x.size < 2:
        return None
    info = np.iinfo(x.dtype)
    y = x.copy().reshape(-1)
    y[0], y[1] = info.max, info.min if info.min < 0 else info.max - 1
    return y.reshape(x.shape)


def _error_cases() -> dict[str, list[tuple[str, dict, dict]]]:
    """Calls that must fail (out-of-range indices, bad shapes)."""
    f = lambda *s: np.arange(np.prod(s), dtype=np.float32).reshape(s)
    i32 = lambda v: np.asarray(v, np.int32)
    return {
        "GatherV2": [("error index past the end", {"params": f(4, 3), "indices": i32([0, 4]),
                                                   "axis": i32(0)}, {}),
                     ("error negative index", {"params": f(4, 3), "indices": i32([-1]),
                                               "axis": i32(0)}, {}),
                     ("error axis out of range", {"params": f(4, 3), "indices": i32([0]),
                                                  "axis": i32(2)}, {})],
        "OneHot": [("edge index out of range", {"indices": i32([0, 5, -1]), "depth": i32(3),
                                                "on_value": np.float32(1),
                                                "off_value": np.float32(0)}, {}),
                   ("error negative depth", {"indices": i32([0]), "depth": i32(-1),
                                             "on_value": np.float32(1),
                                             "off_value": np.float32(0)}, {})],
        "StridedSlice": [("edge begin/end clamped", {"input": f(4, 3), "begin": i32([-9, 1]),
                                                     "end": i32([9, 7]),
                                                     "strides": i32([1, 1])}, {}),
                         ("error shrink index out of range",
                          {"input": f(4, 3), "begin": i32([5]), "end": i32([6]),
                           "strides": i32([1])}, {"shrink_axis_mask": 1}),
                         ("error zero stride", {"input": f(4, 3), "begin": i32([0]),
                                                "end": i32([2]), "strides": i32([0])}, {})],
        "UnsortedSegmentSum": [("error segment id past num_segments",
                                {"data": f(4, 2), "segment_ids": i32([0, 1, 3, 0]),
                                 "num_segments": i32(3)}, {}),
                               ("edge negative segment id dropped",
                                {"data": f(4, 2), "segment_ids": i32([0, -1, 2, 0]),
                                 "num_segments": i32(3)}, {})],
        "TopKV2": [("error k past the last dim", {"input": f(2, 3), "k": i32(4)}, {}),
                   ("error negative k", {"input": f(2, 3), "k": i32(-1)}, {})],
        "Slice": [("error size past the end", {"input": f(4, 3), "begin": i32([2, 0]),
                                               "size": i32([3, 3])}, {})],
        "Split": [("error not divisible", {"split_dim": i32(0), "value": f(5, 2)},
                   {"num_split": 2})],
        "Reshape": [("error element count", {"tensor": f(2, 3), "shape": i32([4, 2])}, {})],
        "ConcatV2": [("error rank mismatch", {"values": [f(2, 3), f(2, 3, 1)],
                                              "axis": i32(0)}, {})],
        "Transpose": [("error bad perm", {"x": f(2, 3), "perm": i32([0, 0])}, {})],
        "AddV2": [("error incompatible shapes", {"x": f(2, 3), "y": f(4)}, {})],
        "MatMul": [("error inner dims", {"a": f(2, 3), "b": f(4, 2)}, {})],
        "Pad": [("error negative padding", {"input": f(2, 3),
                                            "paddings": i32([[0, 0], [-4, 0]])}, {})],
        "Tile": [("error multiples length", {"input": f(2, 3), "multiples": i32([2])}, {})],
        "SparseSoftmaxCrossEntropyWithLogits": [
            ("error label out of range", {"features": f(2, 3), "labels": i32([0, 3])}, {})],
        "Div": [("error integer division by zero", {"x": i32([4, 5]), "y": i32([2, 0])}, {})],
        "FloorDiv": [("error integer division by zero",
                      {"x": i32([4, 5]), "y": i32([2, 0])}, {})],
        "Range": [("error zero delta", {"start": i32(0), "limit": i32(4), "delta": i32(0)}, {})],
        "GatherNd": [("error index past the end", {"params": f(4, 3),
                                                   "indices": i32([[1, 0], [4, 0]])}, {}),
                     ("error negative index", {"params": f(4, 3), "indices": i32([[-1]])}, {}),
                     ("error index deeper than params", {"params": f(4, 3),
                                                         "indices": i32([[0, 0, 0]])}, {})],
        "ScatterNd": [("error index past the end", {"indices": i32([[1], [5]]),
                                                    "updates": f(2), "shape": i32([4])}, {}),
                      ("error updates shape", {"indices": i32([[1]]), "updates": f(2, 2),
                                               "shape": i32([4, 3])}, {})],
        "TensorScatterUpdate": [("error index past the end",
                                 {"tensor": f(4), "indices": i32([[4]]), "updates": f(1)}, {})],
        "TensorScatterAdd": [("error negative index",
                              {"tensor": f(4, 2), "indices": i32([[-2]]), "updates": f(1, 2)},
                              {})],
        "TensorScatterSub": [("error index past the end",
                              {"tensor": f(4, 2), "indices": i32([[4]]), "updates": f(1, 2)},
                              {}),
                             ("repeated indices", {"tensor": f(4, 2), "indices": i32([[1], [1]]),
                                                   "updates": f(2, 2)}, {})],
        "TensorScatterMin": [("repeated indices", {"tensor": f(4, 2), "indices": i32([[3], [3]]),
                                                   "updates": f(2, 2)}, {}),
                             ("error negative index",
                              {"tensor": f(4), "indices": i32([[-1]]), "updates": f(1)}, {})],
        "TensorScatterMax": [("repeated indices", {"tensor": f(4, 2), "indices": i32([[0], [0]]),
                                                   "updates": f(2, 2)}, {}),
                             ("error updates shape",
                              {"tensor": f(4, 2), "indices": i32([[1]]), "updates": f(2, 2)},
                              {})],
        "MatrixInverse": [("error singular", {"input": np.float32([[1, 2], [2, 4]])}, {}),
                          ("error not square", {"input": f(2, 3)}, {})],
        "MatrixSolve": [("error singular", {"matrix": np.float64([[0, 0], [0, 1]]),
                                            "rhs": np.float64([[1], [1]])}, {}),
                        ("error rhs rows", {"matrix": f(2, 2), "rhs": f(3, 1)}, {})],
        "MatrixDeterminant": [("edge singular", {"input": np.float64([[1, 2], [2, 4]])}, {})],
        "Einsum": [("error label dims differ", {"inputs": [f(2, 3), f(4, 5)]},
                    {"equation": "ij,jk->ik"}),
                   ("error no output", {"inputs": [f(2, 3)]}, {"equation": "ij"}),
                   ("error label count", {"inputs": [f(2, 3)]}, {"equation": "ijk->i"})],
        "LinSpace": [("error num zero", {"start": np.float32(0), "stop": np.float32(1),
                                         "num": i32(0)}, {}),
                     ("edge num one", {"start": np.float32(2), "stop": np.float32(5),
                                       "num": i32(1)}, {})],
        "CheckNumerics": [("error NaN", {"tensor": np.float32([1, np.nan])},
                           {"message": "semantics"})],
    }


def build_cases(op, rng) -> list[Case]:
    """Random cases for every allowed dtype, NaN/Inf and integer-limit
    versions of them, and the op's error cases."""
    cases: list[Case] = []
    seen_int_limits: set = set()
    for constraints in _type_variants(op):
        constraints = {**_index_types(op), **constraints}
        types = _full_types(op, constraints)
        try:
            made = op_cases(op, constraints, rng)
        except (CheckSkipped, ValueError, TypeError):
            continue
        label = ",".join(f"{n}={t.name}" for n, t in constraints.items() if n not in INDEX_TYPES)
        label = label or "default"
        for inputs, attrs in made:
            if any(isinstance(v, VarInput) for v in inputs.values()):
                continue
            cases.append(Case(f"random {label}", inputs, attrs, types))
            if op.name not in NO_NAN_CASE:
                poisoned = _poisoned(inputs, _nan_inf)
                if poisoned is not None:
                    cases.append(Case(f"nan/inf {label}", poisoned, attrs, types))
            if op.name in WRAPPING and label not in seen_int_limits:
                poisoned = _poisoned(inputs, _limits)
                if poisoned is not None:
                    seen_int_limits.add(label)
                    cases.append(Case(f"int limits {label}", poisoned, attrs, types))
    for tag, inputs, attrs in _error_cases().get(op.name, []):
        cases.append(Case(tag, inputs, attrs, _full_types(op, _index_types(op))))
    return cases


def _flat_inputs(op, inputs: dict) -> list[np.ndarray]:
    out = []
    for a in op.inputs:
        v = inputs[a.name]
        out += [np.asarray(x) for x in v] if isinstance(v, list) else [np.asarray(v)]
    return out


def _plain(attrs: dict) -> dict:
    return {k: (v.name if isinstance(v, dtypes.DType) else v) for k, v in attrs.items()}


# What TensorFlow's CPU kernels say when they lack a dtype or a layout
# (NCHW pooling, dilated convolution gradients, half-type batch-norm
# gradients): such cases are not compared.
TF_CPU_LIMITS = ("Could not find device", "No OpKernel", "not in the list of allowed values",
                 "only supports NHWC", "Conv2DCustomBackprop", "The implementation of",
                 "is not yet supported", "only supports", "No WhereOp available for")


def _tf_unsupported(reply) -> bool:
    """TensorFlow's CPU has no kernel for the case's dtypes or layout."""
    return reply[0] == "error" and reply[1] in (
        "NotFoundError", "InvalidArgumentError", "UnimplementedError") and any(
        m in reply[2] for m in TF_CPU_LIMITS)


def _ops() -> list[str]:
    """The built-in ops (internal ops made by graph rewrites, named "_...",
    are not callable through TensorFlow's eager raw ops)."""
    return sorted(n for n in registry.OPS if not n.startswith("_"))


@dataclasses.dataclass
class Suite:
    cases: dict            # op -> [Case]
    replies: dict          # op -> [TF reply]
    tf_names: set
    seed_text: str


@pytest.fixture(scope="module")
def suite(tf_oracle) -> Suite:
    rng = SeededRng()
    tf_names = set(tf_oracle.raw_op_names())
    cases, batch, where = {}, [], []
    for name in _ops():
        op = registry.OPS[name]
        if name not in tf_names or name in NO_COUNTERPART or op.resource_inputs or \
                name.startswith("_"):
            continue
        cases[name] = build_cases(op, rng)
        for i, c in enumerate(cases[name]):
            batch.append((name, _tf_inputs(op, c), _plain(c.attrs)))
            where.append((name, i))
    replies = {n: [None] * len(cs) for n, cs in cases.items()}
    for (name, i), reply in zip(where, tf_oracle.batch(batch)):
        replies[name][i] = reply
    return Suite(cases, replies, tf_names, rng.seed_text)


def _device_present(device: str) -> bool:
    kind = device.split(":")[0]
    return any(d.device_type == kind for d in pg.config.list_logical_devices())


def _run_ours(op_name: str, case: Case, device: str, expect: bool):
    """("ok", outputs) or ("error", class name, message)."""
    kind = device.split(":")[0]
    try:
        with pg.device(device):
            args = {n: [pg.constant(x) for x in v] if isinstance(v, list) else pg.constant(v)
                    for n, v in case.inputs.items()}
            if expect:
                with pg.testing.expect_kernel(op_name, kind):
                    out = getattr(pg.raw_ops, op_name)(**args, **case.attrs)
                    outs = _numpy_outputs(out)
            else:
                outs = _numpy_outputs(getattr(pg.raw_ops, op_name)(**args, **case.attrs))
        return ("ok", outs)
    except AssertionError:
        raise
    except Exception as exc:  # noqa: BLE001 - compared by class with TensorFlow's
        return ("error", type(exc).__name__, str(exc)[:300])


def _numpy_outputs(out) -> list[np.ndarray]:
    outs = []
    for o in (out if isinstance(out, (list, tuple)) else [out]):
        outs += [x.numpy() for x in o] if isinstance(o, list) else [o.numpy()]
    return outs


def _compare(op_name: str, got: list, want: list) -> str:
    n = OUTPUTS.get(op_name, len(want))
    if len(got) != len(want):
        return f"{len(got)} outputs, TensorFlow {len(want)}"
    for i, (g, w) in enumerate(zip(got[:n], want[:n])):
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape:
            return f"output {i}: shape {list(g.shape)}, TensorFlow {list(w.shape)}"
        if g.dtype != w.dtype:
            return f"output {i}: dtype {g.dtype}, TensorFlow {w.dtype}"
        if str(w.dtype) in TOL:
            rtol, atol = TOL[str(w.dtype)]
            wide = np.complex128 if w.dtype.kind == "c" else np.float64
            gf, wf = g.astype(wide), w.astype(wide)
            if op_name in ACCUMULATING and str(w.dtype) in ("float16", "bfloat16"):
                finite = wf[np.isfinite(wf)]
                atol = max(atol, rtol * float(np.abs(finite).max(initial=0)))
            if not np.allclose(gf, wf, rtol=rtol, atol=atol, equal_nan=True):
                bad = np.argwhere(~np.isclose(gf, wf, rtol=rtol, atol=atol, equal_nan=True))[0]
                j = tuple(bad)
                return f"output {i} at {list(j)}: {gf[j]!r}, TensorFlow {wf[j]!r}"
        elif not np.array_equal(g, w):
            j = tuple(np.argwhere(g != w)[0])
            return f"output {i} at {list(j)}: {g[j]!r}, TensorFlow {w[j]!r}"
    return ""


def _known(op_name: str, tag: str) -> bool:
    return any(tag.startswith(prefix) for prefix, _ in KNOWN.get(op_name, []))


def _has_kernel(op_name: str, device: str, types: dict) -> bool:
    kind = device.split(":")[0]
    return any(k.matches(types) for k in registry.kernels_for(op_name, kind))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op_name", _ops())
def test_op_matches_tensorflow(suite: Suite, op_name: str, device: str):
    op = registry.OPS[op_name]
    if op_name in NO_COUNTERPART:
        pytest.skip(NO_COUNTERPART[op_name])
    if op.resource_inputs:
        pytest.skip(f"{op_name} {RESOURCE_REASON}")
    if op_name not in suite.tf_names:
        pytest.skip(f"TensorFlow has no raw op named {op_name}")
    if not _device_present(device):
        pytest.skip(f"no {device} device is present (the GPU plugin needs a CUDA GPU)")
    kind = device.split(":")[0]
    if not registry.kernels_for(op_name, kind):
        pytest.skip(f"{op_name} has no {kind} kernel")
    compared, failures = 0, []
    for case, reply in zip(suite.cases[op_name], suite.replies[op_name]):
        if _tf_unsupported(reply) or not _has_kernel(op_name, device, case.types):
            continue
        if _known(op_name, case.tag):
            continue
        expect = reply[0] == "ok" and not case.tag.startswith("error")
        ours = _run_ours(op_name, case, device, expect)
        compared += 1
        if reply[0] == "error" or ours[0] == "error":
            if ours[0] != reply[0] or ours[1] != reply[1]:
                theirs = f"{reply[1]}" if reply[0] == "error" else "a result"
                mine = f"{ours[1]} ({ours[2]})" if ours[0] == "error" else "a result"
                failures.append(f"[{case.tag}] ours: {mine}; TensorFlow: {theirs}"
                                + (f" ({reply[2][:120]})" if reply[0] == "error" else ""))
            continue
        err = _compare(op_name, ours[1], reply[1])
        if err:
            failures.append(f"[{case.tag}] {err}")
    assert not failures, (f"{op_name} on {device} differs from TensorFlow "
                          f"({suite.seed_text}):\n  " + "\n  ".join(failures[:8]))
    assert compared, f"no case of {op_name} could be compared on {device}"
