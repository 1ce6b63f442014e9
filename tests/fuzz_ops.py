"""A seeded mutator of op calls, as a careless user or a hostile caller makes
them: every op with a kernel on the device, called through ``raw_ops`` with
one of its own example calls (``OpDef.examples``) mutated (shapes, dtypes,
host values such as indices and sizes, attributes, missing or extra
inputs), its outputs read back. Run as a child process
(``python fuzz_ops.py DEVICE SEED CASES``); it prints one JSON line with the
tally (see fuzz_readers._tally), so a crash shows as the child's exit status
and a hang as its timeout. A call may succeed or raise a pluggable error; a
TypeError is the typed answer to arguments of the wrong Python kind, as in
TensorFlow; anything else is a finding."""
from __future__ import annotations

import json
import os
import random
import resource
import sys

import numpy as np

import pluggable as pg
from pluggable.framework import dtypes, registry
from pluggable.ops import raw_ops

from fuzz_readers import _tally  # noqa: E402  (tests/ is on sys.path)

# Ops a random call must not reach: collectives wait for peers that never
# come, a py_func runs Python the caller gives, and the ops that only exist
# inside graphs (function calls, loop frames) take attributes no caller makes.
SKIP_PREFIXES = ("Collective", "Nccl", "EagerPyFunc", "PyFunc", "_", "Send", "Recv")
INTS = [0, 1, -1, 2, 3, -2, 7, 2**31, -2**31, 2**62, 10**12]
FLOATS = [0.0, -1.0, 1e-30, 1e30, float("nan"), float("inf"), 0.5]
NUMERIC = [np.float32, np.float64, np.int32, np.int64, np.uint8, np.int8, np.bool_,
           np.float16]
# Each mutation must fit in this address space: an allocation past it is a
# ResourceExhaustedError (or numpy's MemoryError), never the machine's memory.
ADDRESS_SPACE = 6 << 30


def _ops(device_type: str) -> list[str]:
    out = []
    for name, op in sorted(registry.OPS.items()):
        if name.startswith(SKIP_PREFIXES):
            continue
        if registry.kernels_for(name, device_type):
            out.append(name)
    return out


def _mutate_array(a: np.ndarray, r: random.Random, rng) -> tuple[np.ndarray, str]:
    k = r.randrange(8)
    if k == 0:
        return np.zeros((0,) + a.shape[1:], a.dtype), "empty"
    if k == 1:
        return a.reshape(-1), "flattened"
    if k == 2:
        return a[None], "extra leading axis"
    if k == 3:
        return np.asarray(a.reshape(-1)[:1].reshape(()) if a.size else np.zeros((), a.dtype)), \
            "scalar"
    if k == 4 and a.dtype.kind in "OSU":   # strings: numbers instead
        return np.zeros(a.shape, r.choice(NUMERIC)), "numbers for strings"
    if k == 4:
        t = r.choice(NUMERIC)
        with np.errstate(all="ignore"):
            return a.astype(t), f"dtype {np.dtype(t).name}"
    if k == 5 and a.dtype.kind in "iu":
        vals = np.array([r.choice(INTS) for _ in range(a.size)], dtype=np.int64)
        with np.errstate(all="ignore"):
            return vals.astype(a.dtype).reshape(a.shape), "integer values"
    if k == 6 and a.dtype.kind == "f":
        b = a.copy()
        if b.size:
            b.reshape(-1)[r.randrange(b.size)] = r.choice(FLOATS)
        return b, "float value"
    shape = tuple(r.choice([0, 1, 2, 3, 5]) for _ in range(r.randrange(0, 5)))
    return rng.standard_normal(shape).astype(a.dtype if a.dtype.kind != "b" else np.float32), \
        f"random shape {shape}"


def _mutate_attr(v, r: random.Random):
    if isinstance(v, bool):
        return not v
    if isinstance(v, int):
        return r.choice(INTS)
    if isinstance(v, float):
        return r.choice(FLOATS)
    if isinstance(v, (list, tuple)):
        k = r.randrange(3)
        if k == 0:
            return list(v)[:-1]
        if k == 1:
            return list(v) + [r.choice(INTS)]
        return [r.choice(INTS) if isinstance(x, int) else x for x in v]
    if isinstance(v, str):
        return r.choice(["", "NCHW", "NHWC", "VALID", "SAME", "EXPLICIT", "\xff", v * 50])
    if isinstance(v, dtypes.DType):
        return r.choice([dtypes.float32, dtypes.int32, dtypes.bool_, dtypes.uint8,
                         dtypes.float64, dtypes.resource])
    return v


def _new_attr(op: registry.OpDef, r: random.Random):
    """A value for an attribute the example left at its default."""
    names = [n for n, a in op.attrs.items() if not a.is_type]
    if not names:
        return None
    name = r.choice(names)
    kind = op.attrs[name].kind
    value = {"int": lambda: r.choice(INTS), "float": lambda: r.choice(FLOATS),
             "bool": lambda: r.choice([True, False]),
             "string": lambda: r.choice(["", "NCHW", "SAME", "bogus"]),
             "list(int)": lambda: [r.choice(INTS) for _ in range(r.randrange(0, 5))],
             "shape": lambda: [r.choice([-1, 0, 2, 2**40]) for _ in range(r.randrange(0, 4))],
             }.get(kind, lambda: r.choice(INTS))()
    return name, value


def generic_example(op: registry.OpDef, types: dict, r: random.Random, rng) -> list:
    """An example call for an op without ``examples``: inputs of one random
    shape (of the kernel's types), small integer vectors for the inputs whose
    values shape functions read, random values for required attributes."""
    shape = tuple(r.choice([0, 1, 2, 3, 4]) for _ in range(r.randrange(0, 4)))
    inputs = {}
    for a in op.inputs:
        if a.number_attr or a.type_list_attr or a.dtype is dtypes.resource:
            return []
        dt = a.dtype or types.get(a.type_attr) or dtypes.float32
        if dt is dtypes.resource or dt.as_numpy_dtype is object:
            return []
        if a.name in (op.host_value_inputs or ()):
            n = r.choice([0, 1, 2, len(shape)])
            inputs[a.name] = np.array([r.randint(-2, 4) for _ in range(n)], np.int32)
        else:
            s = shape if r.random() < 0.8 else tuple(r.choice([1, 2, 3]) for _ in shape)
            with np.errstate(all="ignore"):
                inputs[a.name] = (rng.standard_normal(s) * 3).astype(dt.as_numpy_dtype)
    attrs = {}
    for name, ad in op.attrs.items():
        if ad.has_default or ad.is_type and any(x.type_attr == name for x in op.inputs):
            continue
        if ad.is_type:
            attrs[name] = r.choice([dtypes.float32, dtypes.int32, dtypes.float64])
        else:
            new = {"int": r.choice(INTS[:6]), "float": 0.5, "bool": True, "string": "",
                   "list(int)": [1, 1], "shape": [2]}.get(ad.kind)
            if new is None:
                return []
            attrs[name] = new
    return [(inputs, attrs)]


def mutate_call(op: registry.OpDef, inputs: dict, attrs: dict, r: random.Random, rng):
    inputs, attrs = dict(inputs), dict(attrs)
    what = []
    for _ in range(r.randint(1, 4)):
        k = r.randrange(10)
        if k < 5 and inputs:
            name = r.choice(list(inputs))
            v = inputs[name]
            if isinstance(v, list):
                if v and r.random() < 0.5:
                    i = r.randrange(len(v))
                    v = list(v)
                    v[i], w = _mutate_array(np.asarray(v[i]), r, rng)
                else:
                    v, w = (v[:-1], "one fewer") if len(v) > 1 else (v * 2, "doubled")
                inputs[name] = v
            else:
                inputs[name], w = _mutate_array(np.asarray(v), r, rng)
            what.append(f"input {name}: {w}")
        elif k < 8:
            if attrs and r.random() < 0.6:
                name = r.choice(list(attrs))
                attrs[name] = _mutate_attr(attrs[name], r)
                what.append(f"attr {name}")
            else:
                new = _new_attr(op, r)
                if new is not None:
                    attrs[new[0]] = new[1]
                    what.append(f"attr {new[0]}={new[1]!r}"[:60])
        elif k == 8 and inputs:
            name = r.choice(list(inputs))
            del inputs[name]
            what.append(f"input {name} missing")
        elif len(inputs) > 1:
            a, b = r.sample(list(inputs), 2)
            inputs[a], inputs[b] = inputs[b], inputs[a]
            what.append(f"inputs {a} and {b} swapped")
    return inputs, attrs, "; ".join(what) or "none"


def fuzz_ops(device: str, seed: int, cases: int) -> dict:
    r = random.Random(seed)
    rng = np.random.default_rng(seed)
    device_type = device.split(":")[0]
    names = _ops(device_type)

    def case(_n):
        name = r.choice(names)
        op = registry.OPS[name]
        kernels = registry.kernels_for(name, device_type)
        types = dict(r.choice(kernels).constraints)
        try:
            examples = (op.examples(rng, types) if op.examples is not None
                        else generic_example(op, types, r, rng))
        except Exception:  # noqa: BLE001 - an example the kernel's types cannot make
            examples = []
        if not examples:
            return f"{name}: no example", lambda: None
        inputs, attrs = r.choice(examples)
        inputs, attrs, what = mutate_call(op, inputs, attrs, r, rng)
        traced = r.random() < 0.3

        def run(**kw):
            return getattr(raw_ops, name)(**kw, **attrs)

        def call():
            with pg.device(device):
                if traced:   # the shape functions of tracing, the graph executor's plans
                    outs = pg.function(run)(**inputs)
                else:
                    outs = run(**inputs)
            for t in outs if isinstance(outs, (list, tuple)) else [outs]:
                for u in t if isinstance(t, (list, tuple)) else [t]:
                    if isinstance(u, pg.Tensor) and u.dtype is not dtypes.resource:
                        u.numpy()

        def typed_call():
            try:
                call()
            except TypeError:
                pass                  # the wrong Python kind of argument
        return f"{name} on {device}{' traced' if traced else ''}: {what}", typed_call
    return _tally(cases, case)


if __name__ == "__main__":
    import logging
    logging.disable(logging.WARNING)
    # (a sanitizer's shadow memory needs the whole address space: under one,
    # .ci/run-sanitizers lets a failed allocation return NULL instead)
    sanitized = any(s in os.environ.get("LD_PRELOAD", "") for s in ("libasan", "libtsan"))
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY and not sanitized:
        # on top of what is mapped already (a GPU plugin's driver reserves
        # far more address space than it uses)
        mapped = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (mapped + ADDRESS_SPACE, hard))
    device, seed, cases = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    print(json.dumps(fuzz_ops(device, seed, cases)))
