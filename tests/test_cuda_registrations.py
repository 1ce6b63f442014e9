"""The CUDA reference plugin's kernel registrations, checked without a GPU:
the plugin is loaded by a stand-in core (tests/registration_harness.c) that
records what TF_InitKernel registers, and every registration must be one the
op registry accepts (a defined op, type constraints on type attributes with
allowed types, host-memory arguments that exist and cover the op's host
inputs), and the GPU kernels cover the dtypes the CPU kernels run that the
tests use. A refused registration only prints a warning when the plugin loads
on a GPU machine, so this is where a mismatch with the op definitions shows
up first. Skipped where the plugin was not built (no nvcc) or there is no C
compiler."""
from __future__ import annotations

import pathlib
import shutil
import subprocess

import numpy as np
import pytest

import pluggable as pg  # noqa: F401  (defines the built-in ops)
from cuda_plugin_file import cuda_plugin_file
from op_helpers import ALL, BF16, FLOAT, INT, REAL, U8, WORKLOADS_OPS
from pluggable.framework import dtypes, registry

ROOT = pathlib.Path(__file__).resolve().parent
PLUGIN = cuda_plugin_file()


@pytest.fixture(scope="module")
def registrations(tmp_path_factory) -> list[tuple[str, str, dict, list[str]]]:
    if not PLUGIN.exists():
        pytest.skip("the CUDA plugin is not installed here (pip install ./reference_device/cuda, which needs nvcc)")
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc) to build the registration harness")
    exe = tmp_path_factory.mktemp("harness") / "registration_harness"
    subprocess.run(["cc", "-O1", "-rdynamic", "-o", str(exe), str(ROOT / "registration_harness.c"),
                    "-ldl"], check=True, capture_output=True)
    proc = subprocess.run([str(exe), str(PLUGIN)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = []
    for line in proc.stdout.splitlines():
        op, device, cons, host = line.split("|")
        constraints = dict(c.split("=") for c in cons.split(",") if c)
        out.append((op, device, {k: int(v) for k, v in constraints.items()},
                    [h for h in host.split(",") if h]))
    return out


def _problems(op_name: str, constraints: dict, host: list[str]) -> list[str]:
    op = registry.OPS.get(op_name)
    if op is None:
        return [f"{op_name}: no such op"]
    found = []
    for attr, enum in constraints.items():
        a = op.attrs.get(attr)
        if a is None or not a.is_type:
            found.append(f"{op_name}: constraint on {attr!r}, not a type attribute")
            continue
        dt = dtypes.from_enum(enum)
        if a.allowed is not None and dt not in a.allowed:
            found.append(f"{op_name}: {attr}={dt.name} is not allowed by the op")
    names = {x.name for x in op.inputs} | {x.name for x in op.outputs}
    found += [f"{op_name}: host-memory argument {h!r} is not an argument" for h in host
              if h not in names]
    missing = set(op.host_value_inputs or ()) - set(host)
    if missing:
        found.append(f"{op_name}: host inputs {sorted(missing)} not in host memory")
    return found


def test_every_registration_is_accepted_by_the_registry(registrations):
    assert registrations, "the plugin registered no kernels"
    problems = [p for op, dev, cons, host in registrations for p in _problems(op, cons, host)]
    assert not problems, "\n".join(problems)
    assert {dev for _, dev, _, _ in registrations} == {"GPU"}


VARIABLE_OPS = ("AssignAddVariableOp", "AssignSubVariableOp", "ResourceApplyGradientDescent",
                "ResourceApplyKerasMomentum", "ResourceApplyAdam")


def test_every_op_of_the_workloads_set_has_a_gpu_kernel(registrations):
    have = {op for op, _, _, _ in registrations}
    missing = [op for op in (*WORKLOADS_OPS, *VARIABLE_OPS) if op not in have]
    assert not missing, f"ops without a GPU kernel: {missing}"


# Types the CPU kernel runs but the GPU kernel does not register, per op and
# type attribute, among the dtypes the tests use (op_helpers.ALL). A new gap
# fails the test below (the GPU tests would find no GPU kernel for that
# type); closing one fails it too until it is taken off this list.
_SMALL_INTS = {"int8", "uint8", "int16"}
KNOWN_GPU_DTYPE_GAPS: dict[tuple[str, str], set[str]] = {
    **{(op, "T"): _SMALL_INTS for op in (
        "Abs", "AddN", "AddV2", "BiasAdd", "BiasAddGrad", "Cumsum", "FloorDiv", "FloorMod",
        "Max", "Maximum", "Mean", "Min", "Minimum", "Mul", "Neg", "Prod", "RealDiv", "Relu",
        "ReluGrad", "Square", "Sub", "Sum", "TopKV2", "UnsortedSegmentSum")},
    ("AssignAddVariableOp", "dtype"): _SMALL_INTS | {"bool"},
    ("AssignSubVariableOp", "dtype"): _SMALL_INTS | {"bool"},
    **{(op, "T"): _SMALL_INTS | {"int32", "int64"} for op in (
        "ResourceApplyAdam", "ResourceApplyGradientDescent", "ResourceApplyKerasMomentum")},
    ("ArgMax", "T"): {"bool"},
    ("ArgMin", "T"): {"bool"},
    ("BatchMatMulV2", "T"): {"int16", "uint8"},
    ("Conv2D", "T"): {"int32"},
    ("_FusedConv2D", "T"): {"int8"},
    ("Conv2DBackpropInput", "T"): {"int32"},
    ("FusedBatchNormV3", "U"): {"bfloat16"},
    ("MaxPool", "T"): _SMALL_INTS | {"int32", "int64"},
    ("MaxPoolGrad", "T"): _SMALL_INTS | {"int32", "int64"},
    ("Sign", "T"): {"int8", "int16"},
    ("Round", "T"): {"int8", "int16"},
    # integer 1 / x is 0 or +-1 (or a division by zero): left to the CPU kernel
    ("Reciprocal", "T"): {"int8", "int16", "int32", "int64"},
    # the fused transformer kernels keep their statistics in float32 and run
    # the 16- and 32-bit floats; float64 runs on the CPU kernels
    **{(op, attr): {"float64"} for op in (
        "ScaledDotProductAttention", "ScaledDotProductAttentionGrad")
       for attr in ("T", "Tlse")},
    **{(op, attr): {"float64"} for op in ("LayerNorm", "LayerNormGrad") for attr in ("T", "U")},
    **{(op, "T"): {"float64"} for op in ("BiasGelu", "BiasGeluGrad")},
    # the multi-tensor Adam step updates float32 variables (the master weights
    # of mixed precision) from float32, bfloat16 or float16 gradients; other
    # variables take the per-variable ResourceApplyAdam (Adam's fused=None)
    ("MultiTensorApplyAdam", "T"): {"float16", "bfloat16", "float64"},
    ("MultiTensorApplyAdam", "Tgrad"): {"float64"},
}


def _gpu_dtype_gaps(registrations) -> dict[tuple[str, str], set[str]]:
    """(op, type attr) -> the tested dtypes the op allows, a CPU kernel runs
    and no GPU kernel registers."""
    tested = {dtypes.as_dtype(d) for d in ALL}
    have: dict[tuple[str, str], set] = {}
    for op, _, cons, _ in registrations:
        for attr, enum in cons.items():
            have.setdefault((op, attr), set()).add(dtypes.from_enum(enum))
    gaps = {}
    for (op, attr), types in have.items():
        a = registry.OPS[op].attrs[attr]
        allowed = set(a.allowed) if a.allowed is not None else tested
        cpu = set()
        for k in registry.kernels_for(op, "CPU"):
            c = k.constraints.get(attr)
            cpu |= allowed if c is None else {c}
        missing = (cpu & tested) - types
        if missing:
            gaps[(op, attr)] = {d.name for d in missing}
    return gaps


def test_gpu_kernels_cover_the_cpu_kernels_tested_dtypes(registrations):
    gaps = _gpu_dtype_gaps(registrations)
    new = {k: sorted(v - KNOWN_GPU_DTYPE_GAPS.get(k, set())) for k, v in gaps.items()}
    new = {k: v for k, v in new.items() if v}
    assert not new, f"GPU kernels missing dtypes the CPU kernels run: {new}"
    closed = {k: sorted(v - gaps.get(k, set())) for k, v in KNOWN_GPU_DTYPE_GAPS.items()}
    closed = {k: v for k, v in closed.items() if v}
    assert not closed, f"GPU kernels now cover these: take them off KNOWN_GPU_DTYPE_GAPS: {closed}"


@pytest.mark.parametrize("op,types", [
    ("Less", REAL + [U8]), ("LessEqual", REAL + [U8]), ("Greater", REAL + [U8]),
    ("GreaterEqual", REAL + [U8]), ("ArgMax", REAL + [U8]), ("ArgMin", REAL + [U8]),
    ("Pow", FLOAT + INT + [np.dtype(np.int8), np.dtype(np.int16)]),
    # the NCCL collectives (tests/test_nccl.py), with TensorFlow's type lists
    ("CollectiveReduceV2", REAL), ("CollectiveReduceScatterV2", REAL),
    ("CollectiveAllToAllV2", REAL), ("CollectiveGatherV2", [t for t in REAL if t != BF16]),
    ("CollectiveBcastSendV2", [t for t in REAL if t != BF16]),
    ("CollectiveBcastRecvV2", [t for t in REAL if t != BF16])])
def test_gpu_kernels_cover_the_dtypes_of_the_gpu_tests(registrations, op, types):
    have = {dtypes.from_enum(c["T"]) for o, _, c, _ in registrations if o == op and "T" in c}
    missing = sorted(dtypes.as_dtype(t).name for t in types if dtypes.as_dtype(t) not in have)
    assert not missing, f"{op}: no GPU kernel for {missing}"
