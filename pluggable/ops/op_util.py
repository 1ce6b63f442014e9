"""Helpers shared by the op definitions and their CPU kernels: typed errors
naming the op, reading host-memory index inputs, axis checks, and random
sample values for the ``examples`` of each op."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..framework import dtypes
from ..framework.errors import InvalidArgumentError
from ..framework.registry import OpDef, make_op_def, register_op


def err(op: str, msg: str) -> InvalidArgumentError:
    """InvalidArgumentError "Op: msg" naming the op."""
    return InvalidArgumentError(f"{op}: {msg}", op=op)


def define(name: str, inputs: list[str], outputs: list[str], attrs: list[str],
           shape_fn: Callable, host: tuple | list = (), examples: Callable | None = None,
           **kw: Any) -> OpDef:
    """Registers a built-in op from TensorFlow op-spec strings. `examples` is
    written over every type attribute (``fill_types`` fills the ones a
    caller leaves out)."""
    op = make_op_def(name, inputs, outputs, attrs, shape_fn=shape_fn,
                     host_value_inputs=tuple(host), **kw)
    if examples is not None:
        op.examples = _typed_examples(op, examples)
    register_op(op)
    return op


def _typed_examples(op: OpDef, fn: Callable) -> Callable:
    def examples(rng: Any, type_attrs: dict) -> list:
        return fn(rng, fill_types(op, type_attrs))
    examples.__doc__ = f"Sample calls of {op.name}: [(inputs, attrs), ...] for type_attrs."
    examples.__qualname__ = f"{op.name}.examples"
    return examples


def ints(op: str, name: str, value: Any, rank: int | None = 1) -> list[int]:
    """A host-memory index input as a list of Python ints; `rank` 1 requires a
    vector, 0 a scalar (returned as a one-element list), None either."""
    a = np.asarray(value)
    if rank is not None and a.ndim != rank:
        what = "a scalar" if rank == 0 else "a vector"
        raise err(op, f"{name} must be {what}, got shape {list(a.shape)}")
    return [int(x) for x in a.reshape(-1)]


def scalar(op: str, name: str, value: Any) -> int:
    """A host-memory scalar index input (a one-element tensor is accepted)."""
    a = np.asarray(value)
    if a.size != 1 or a.ndim > 1:
        raise err(op, f"{name} must be a scalar, got shape {list(a.shape)}")
    return int(a.reshape(-1)[0])


def axis(op: str, ax: int, rank: int, what: str = "axis") -> int:
    """`ax` in [-rank, rank) made non-negative, or InvalidArgumentError."""
    if not -rank <= ax < rank:
        raise err(op, f"{what} {ax} is out of range for a tensor of rank {rank} "
                  f"(expected [{-rank}, {rank}))")
    return ax % rank


def same_shapes(op: str, names: tuple[str, ...], shapes: list) -> None:
    for n, s in zip(names[1:], shapes[1:]):
        if tuple(s) != tuple(shapes[0]):
            raise err(op, f"{names[0]} and {n} must have the same shape, got "
                      f"{list(shapes[0])} and {list(s)}")


def same_shape(shapes, attrs, values):
    """Shape function: the output has the shape of the first input."""
    return [tuple(shapes[0])]


def same_shape_pair(op: str, names: tuple[str, str]):
    """Shape function: two inputs of one shape, an output of that shape."""
    def fn(shapes, attrs, values):
        same_shapes(op, names, shapes)
        return [tuple(shapes[0])]
    return fn


# ---------------------------------------------------------------- examples

FLOATS = (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)


def fill_types(op: OpDef, type_attrs: dict) -> dict:
    """Every type attribute of `op`: from `type_attrs` where given, else its
    default, else float32 where allowed, else the first allowed type."""
    out = {}
    for name, a in op.attrs.items():
        if a.kind != "type":
            continue
        t = type_attrs.get(name)
        if t is None:
            if a.has_default:
                t = a.default
            elif a.allowed is None or dtypes.float32 in a.allowed:
                t = dtypes.float32
            else:
                t = a.allowed[0]
        out[name] = dtypes.as_dtype(t)
    return out


def sample(rng: Any, dt: Any, shape: tuple, low: float = -3.0, high: float = 3.0,
           positive: bool = False, nonzero: bool = False) -> np.ndarray:
    """Random values of dtype `dt` and `shape` for examples and tests:
    floats uniform in [low, high) (or [0.1, high) when `positive`), integers
    in a small range that fits every integer type, bools half and half,
    complex numbers with both parts drawn as floats."""
    dt = dtypes.as_dtype(dt)
    npdt = dt.as_numpy_dtype
    if dt is dtypes.string:  # byte strings of 0 to 5 letters
        out = np.empty(shape, object)
        out.flat[:] = [bytes(rng.integers(97, 123, rng.integers(0, 6)).astype(np.uint8))
                       for _ in range(out.size)]
        return out
    if dt.is_bool:
        return rng.integers(0, 2, shape).astype(np.bool_)
    if dt.is_integer:
        lo = 1 if positive or npdt.kind == "u" else int(max(low, -9) * 3)
        hi = max(int(min(high, 9) * 3), lo + 1)
        a = rng.integers(lo, hi, shape)
        if nonzero:
            a = np.where(a == 0, 1, a)
        return a.astype(npdt)
    if dt.is_complex:   # real and imaginary parts drawn alike
        parts = dt.real_dtype
        re = sample(rng, parts, shape, low, high, positive, nonzero).astype(npdt)
        return (re + 1j * sample(rng, parts, shape, low, high, positive)).astype(npdt)
    a = rng.uniform(0.1 if positive else low, high, shape)
    if nonzero:
        a = np.where(np.abs(a) < 0.1, 0.5, a)
    return a.astype(npdt)


def index_array(values: Any, dt: Any) -> np.ndarray:
    """A host index input of dtype `dt` (a DType)."""
    return np.asarray(values, dtype=dtypes.as_dtype(dt).as_numpy_dtype)
