"""Conformance checks of a plugin's kernels: every registered kernel on random
inputs against the built-in CPU kernels."""
from __future__ import annotations

from typing import Callable, Iterator

import numpy as np

from ...framework import dtypes, registry
from ...ops import raw_ops
from ...ops.variables import Variable
from ...runtime import placement
from ...runtime.tensors import constant
from .abi import devices_of_type
from .results import CheckFailed, CheckSkipped



class KernelChecks:
    """One check per op the plugin has kernels for (mixed into ``Suite``)."""

    def kernel_checks(self) -> Iterator[tuple[str, Callable[[], str | None]]]:
        by_op: dict[str, list] = {}
        for (op, _dev), ks in sorted(registry.KERNELS.items()):
            for k in ks:
                if k.plugin is self.rec:
                    by_op.setdefault(op, []).append(k)
        if not by_op:
            yield "kernels", lambda: (_ for _ in ()).throw(
                CheckSkipped("the plugin registers no kernels"))
            return
        for op, ks in sorted(by_op.items()):
            yield f"kernel {op}", (lambda op=op, ks=ks: self.check_kernel(op, ks))

    def check_kernel(self, op_name: str, kernels: list) -> str:
        op = registry.OPS[op_name]
        done, notes, failures = 0, [], []
        for k in kernels:
            devices = devices_of_type(k.device_type)
            if not devices:
                notes.append((k.device_type, "no device of this type is present"))
                continue
            dev = devices[0]
            sig = ", ".join(f"{a}={t.name}" for a, t in sorted(k.constraints.items()) if t)
            try:
                cases = op_cases(op, k.constraints, self.rng)
            except CheckSkipped as exc:
                notes.append((sig, str(exc)))
                continue
            has_cpu = bool(registry.KERNELS.get((op_name, "CPU")))
            for inputs, attrs in cases:
                shapes = [[list(np.shape(x)) for x in v] if isinstance(v, list)
                          else list(getattr(v, "shape", np.shape(v))) for v in inputs.values()]
                what = f"[{sig}] shapes {shapes}"
                try:
                    err = run_and_compare(op_name, inputs, attrs, dev, self.rec, has_cpu)
                except Exception as exc:
                    err = _unless_cpu_refuses(op_name, inputs, attrs, exc, has_cpu)
                if err:
                    failures.append(f"{what}: {err}")
                else:
                    done += 1
        if failures:
            more = f" (and {len(failures) - 3} more)" if len(failures) > 3 else ""
            raise CheckFailed("; ".join(failures[:3]) + more)
        merged = merge_notes(notes)
        if done == 0:
            raise CheckSkipped("; ".join(merged) or "no case could be generated")
        ref = "match the CPU reference" if registry.KERNELS.get((op_name, "CPU")) else \
            "completed (no CPU reference for this op)"
        return f"{done} case(s) over {len(kernels)} kernel(s) {ref}" + \
            (f"; {'; '.join(merged)}" if merged else "")


def merge_notes(notes: list[tuple[str, str]], shown: int = 3) -> list[str]:
    """Why kernels were not run, given as (kernel, reason) pairs: each
    distinct reason once, in the order first seen, with the kernels it
    applies to (the first `shown` of them, then how many more)."""
    by_reason: dict[str, list[str]] = {}
    for kernel, reason in notes:
        by_reason.setdefault(reason, []).append(kernel)
    out = []
    for reason, kernels in by_reason.items():
        if len(kernels) == 1:
            out.append(f"[{kernels[0]}] {reason}" if kernels[0] else reason)
            continue
        names = " | ".join(k or "-" for k in kernels[:shown])
        more = f" and {len(kernels) - shown} more" if len(kernels) > shown else ""
        out.append(f"{reason} ({len(kernels)} kernels: {names}{more})")
    return out


class VarInput:
    """The initial value of a resource input: each run makes a variable of
    it on the device under test and compares the variable's value after."""

    def __init__(self, value: np.ndarray):
        self.value = value
        self.shape = value.shape


_RESOURCE_SCALARS = {
    "ResourceApplyGradientDescent": {"alpha": 0.1},
    "ResourceApplyKerasMomentum": {"lr": 0.05, "momentum": 0.9},
    "ResourceApplyAdam": {"beta1_power": 0.729, "beta2_power": 0.997, "lr": 0.01,
                          "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-7},
}


def _resource_cases(op, types: dict, rng: np.random.Generator) -> list[tuple[dict, dict]]:
    """Cases of an op updating resource variables: (2, 3) variables (Adam's
    `v` positive), scalar hyper-parameters, (2, 3) values or gradients."""
    T = types.get("T") or types.get("dtype")
    scalars = _RESOURCE_SCALARS.get(op.name, {})
    inputs: dict = {}
    for a in op.inputs:
        if a.dtype is dtypes.resource:
            inputs[a.name] = VarInput(_values(T, (2, 3), rng, positive=a.name == "v"))
        elif a.name in scalars:
            inputs[a.name] = np.asarray(scalars[a.name], T.as_numpy_dtype)
        else:
            inputs[a.name] = _values(T, (2, 3), rng)
    attrs = {n: False for n, a in op.attrs.items() if n == "use_nesterov"}
    cases = [(inputs, attrs)]
    if attrs:
        cases.append((inputs, {"use_nesterov": True}))
    return cases


_TOL = {"float16": (2e-2, 2e-2), "bfloat16": (6e-2, 6e-2), "float32": (1e-4, 1e-5),
        "float64": (1e-9, 1e-12)}
_BINARY = {"AddV2", "Sub", "Mul", "RealDiv", "Maximum", "Minimum"}
_UNARY = {"Neg", "Abs", "Relu", "Identity", "Exp", "Tanh", "Sigmoid", "Log", "Sqrt"}
_POSITIVE = {"Log", "Sqrt"}
_REDUCE = {"Sum", "Mean", "Max", "Min"}


def _values(dt, shape: tuple, rng: np.random.Generator, positive: bool = False,
            nonzero: bool = False) -> np.ndarray:
    """Random values of dtype `dt` (a pluggable DType) and `shape`."""
    npdt = np.dtype(dt.as_numpy_dtype)
    if npdt == np.bool_:
        return rng.integers(0, 2, shape).astype(np.bool_)
    if npdt.kind in "iu":
        lo = 1 if (positive or npdt.kind == "u") else -6
        a = rng.integers(lo, 7, shape)
        if nonzero:
            a = np.where(a == 0, 1, a)
        return a.astype(npdt)
    a = rng.uniform(0.1, 3.0, shape) if positive else rng.uniform(-2.0, 2.0, shape)
    if nonzero:
        a = np.where(np.abs(a) < 0.1, 0.5, a)
    return a.astype(npdt)


def _pick_type(attr, constraints: dict):
    if attr.name in constraints and constraints[attr.name] is not None:
        return constraints[attr.name]
    if attr.allowed:
        return dtypes.float32 if dtypes.float32 in attr.allowed else attr.allowed[0]
    return dtypes.float32


def op_cases(op, constraints: dict, rng: np.random.Generator) -> list[tuple[dict, dict]]:
    """Inputs and attributes to run `op` with, for the kernel whose type
    constraints are `constraints`. Raises CheckSkipped when it cannot."""
    types = {n: _pick_type(a, constraints) for n, a in op.attrs.items() if a.kind == "type"}
    bound = {a.type_attr for a in op.inputs if a.type_attr}
    extra = {n: t for n, t in types.items() if n not in bound}
    name = op.name
    T = types.get("T")
    ix = lambda attr, vals: np.array(vals, dtype=types[attr].as_numpy_dtype)
    if name in _BINARY:
        nz = name == "RealDiv"
        return [({"x": _values(T, s1, rng), "y": _values(T, s2, rng, nonzero=nz)}, {})
                for s1, s2 in (((3, 4), (4,)), ((2, 3), (2, 3)), ((), (3,)), ((0, 4), (4,)))]
    if name in _UNARY:
        arg = op.inputs[0].name
        pos = name in _POSITIVE
        return [({arg: _values(T, s, rng, positive=pos)}, {}) for s in ((2, 3, 4), (), (0, 3))]
    if name == "Softmax":
        return [({"logits": _values(T, s, rng)}, {}) for s in ((4, 7), (5,))]
    if name == "MatMul":
        return [({"a": _values(T, (5, 3), rng), "b": _values(T, (3, 4), rng)}, {}),
                ({"a": _values(T, (3, 5), rng), "b": _values(T, (4, 3), rng)},
                 {"transpose_a": True, "transpose_b": True})]
    if name in _REDUCE:
        return [({"input": _values(T, (3, 4, 5), rng), "reduction_indices": ix("Tidx", [1, -1])},
                 {"keep_dims": False}),
                ({"input": _values(T, (3, 4), rng), "reduction_indices": ix("Tidx", 0)},
                 {"keep_dims": True}),
                ({"input": _values(T, (0, 3), rng), "reduction_indices": ix("Tidx", [0])},
                 {"keep_dims": False})]
    if name == "Cast":
        src = types["SrcT"]
        dst = {"DstT": types["DstT"]}
        return [({"x": _values(src, (3, 4), rng)}, dst), ({"x": _values(src, (), rng)}, dst)]
    if name == "Transpose":
        return [({"x": _values(T, (2, 3, 4), rng), "perm": ix("Tperm", [2, 0, 1])}, {})]
    if name == "Reshape":
        return [({"tensor": _values(T, (2, 6), rng), "shape": ix("Tshape", [3, -1])}, {})]
    if name == "Fill":
        return [({"dims": ix("index_type", [2, 3]), "value": _values(T, (), rng)}, {})]
    if name == "Conv2D":
        base = {"strides": [1, 1, 1, 1], "padding": "SAME"}
        return [({"input": _values(T, (1, 5, 5, 2), rng), "filter": _values(T, (3, 3, 2, 3), rng)}, base),
                ({"input": _values(T, (2, 6, 6, 1), rng), "filter": _values(T, (2, 2, 1, 2), rng)},
                 {"strides": [1, 2, 2, 1], "padding": "VALID"})]
    if name.startswith("Collective"):
        raise CheckSkipped(f"{name} is a collective: it needs one call on each device of a "
                           "group at once, and the kit runs one call at a time")
    if any(a.dtype is dtypes.resource for a in op.inputs):
        if name not in _RESOURCE_SCALARS and name not in ("AssignVariableOp",
                                                          "AssignAddVariableOp",
                                                          "AssignSubVariableOp"):
            raise CheckSkipped(f"{name} takes a resource variable; the kit knows no case "
                               "for it")
        return _resource_cases(op, types, rng)
    if name == "CheckNumerics":
        return [({"tensor": _values(T, (3, 4), rng)}, {"message": "conformance"})]
    if op.examples is not None:
        return _examples(op, types, rng)
    # Any other op (e.g. defined by the plugin): inputs from the definition.
    for a in op.attrs.values():
        if a.kind != "type" and not a.has_default:
            raise CheckSkipped(f"cannot make up a value for attribute {a.name!r} ({a.kind})")
    inputs = {}
    for a in op.inputs:
        dt = types[a.type_attr] if a.type_attr else a.dtype
        inputs[a.name] = _values(dt, (2, 3), rng)
    return [(inputs, dict(extra))]


def _examples(op, types: dict, rng: np.random.Generator) -> list[tuple[dict, dict]]:
    """The op definition's examples for `types`. numpy has no bfloat16
    limits, so where an example cannot be made for bfloat16 the float32 one
    is rounded to it."""
    try:
        return op.examples(rng, types)
    except ValueError:
        if dtypes.bfloat16 not in types.values():
            raise
    f32 = {n: dtypes.float32 if t is dtypes.bfloat16 else t for n, t in types.items()}
    bf16 = np.dtype(dtypes.bfloat16.as_numpy_dtype)
    conv = lambda v: v.astype(bf16) if getattr(v, "dtype", None) == np.float32 else v
    return [({n: [conv(x) for x in v] if isinstance(v, list) else conv(v)
              for n, v in ins.items()}, attrs) for ins, attrs in op.examples(rng, f32)]


def _unless_cpu_refuses(op_name: str, inputs: dict, attrs: dict, exc: Exception,
                        has_cpu: bool) -> str:
    """Empty when the CPU kernel refuses the same call with the same error class
    (the op definition's examples include calls that must fail), else what
    the plugin's kernel raised."""
    err = f"raised {type(exc).__name__}: {exc}"
    if not has_cpu:
        return err
    try:
        with placement.device("CPU:0"):
            outs = _flat_outputs(getattr(raw_ops, op_name)(**_constants(inputs), **attrs))
            [o.numpy() for o in outs]
    except Exception as cpu_exc:  # noqa: BLE001 - compared by class below
        if type(cpu_exc) is type(exc):
            return ""
        return f"{err}; the CPU raised {type(cpu_exc).__name__}: {cpu_exc}"
    return err


def _flat_outputs(out) -> list:
    """Every output of a raw op call, list outputs (Unpack, Split) flattened."""
    flat = []
    for o in (out if isinstance(out, (tuple, list)) else [out]):
        flat += list(o) if isinstance(o, (tuple, list)) else [o]
    return flat


def _constants(inputs: dict, variables: list | None = None) -> dict:
    """Tensors for numpy inputs (a list of them for a list argument), and
    for a resource input the handle of a new variable holding its value
    (appended to `variables`)."""
    out = {}
    for n, v in inputs.items():
        if isinstance(v, VarInput):
            var = Variable(v.value)
            out[n] = var.handle
            if variables is not None:
                variables.append(var)
        elif isinstance(v, list):
            out[n] = [constant(x) for x in v]
        else:
            out[n] = constant(v)
    return out


def run_and_compare(op_name: str, inputs: dict, attrs: dict, dev, rec, has_cpu: bool) -> str:
    """Runs the op on `dev` and (if it has one) on the CPU; returns "" when
    they agree, else what differs."""

    def calls() -> int:
        return sum(k.calls for k in registry.KERNELS.get((op_name, dev.device_type), ())
                   if k.plugin is rec)

    def run(where: str) -> list[np.ndarray]:
        with placement.device(where):
            variables: list = []
            outs = _flat_outputs(getattr(raw_ops, op_name)(**_constants(inputs, variables),
                                                           **attrs))
        return [o.numpy() for o in outs if o is not None] + [v.numpy() for v in variables]

    before = calls()
    got = run(dev.short_name)
    dev.synchronize()
    if calls() == before:
        return (f"the plugin's kernel did not run on {dev.short_name} (dispatch chose another "
                "kernel or device)")
    if not has_cpu:
        return ""
    want = run("CPU:0")
    for i, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape:
            return f"output {i} has shape {list(g.shape)}, the CPU reference {list(w.shape)}"
        if g.dtype != w.dtype:
            return f"output {i} has dtype {g.dtype}, the CPU reference {w.dtype}"
        key = str(w.dtype)
        if key in _TOL:
            rtol, atol = _TOL[key]
            gf, wf = g.astype(np.float64), w.astype(np.float64)
            if not np.allclose(gf, wf, rtol=rtol, atol=atol, equal_nan=True):
                bad = np.abs(gf - wf)
                bad = np.where(np.isnan(bad), np.inf, bad)
                j = np.unravel_index(int(np.argmax(bad)), bad.shape) if bad.size else ()
                return (f"output {i} differs from the CPU reference: at {list(j)} got "
                        f"{gf[j]!r}, expected {wf[j]!r} (rtol {rtol}, atol {atol})")
        elif not np.array_equal(g, w):
            j = np.argwhere(g != w)[0] if g.size else ()
            return (f"output {i} differs from the CPU reference at {list(j)}: got "
                    f"{g[tuple(j)]!r}, expected {w[tuple(j)]!r}")
    return ""
