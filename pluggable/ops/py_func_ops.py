"""The ``EagerPyFunc`` op (TensorFlow's name) behind ``pg.py_function``: its
definition and its CPU kernel, which looks the Python function up by the
node's ``token`` attribute and calls it on eager tensors each time the op
runs. Registered with the built-in ops, so ``pg.raw_ops.EagerPyFunc``
exists from the start; ``pluggable.graph.py_function`` adds the nodes."""
from __future__ import annotations

import itertools
import threading
from typing import Any, Callable

import numpy as np

from ..framework import dtypes, errors, registry
from ..framework.tensor import Tensor
from ..runtime.tensors import convert_to_tensor

OP = "EagerPyFunc"
_functions: dict[str, Callable] = {}   # token -> the Python function of a node
_tokens = itertools.count(1)
_lock = threading.Lock()


def _unknown_shapes(shapes: list, attrs: dict, values: Any) -> list:
    return [None] * len(attrs["Tout"])


def _outputs(func: Callable, result: Any, tout: list, where: str) -> list[np.ndarray]:
    """`result` of `func` as one array per dtype of `tout`."""
    if not isinstance(result, (list, tuple)):
        result = [] if result is None and not tout else [result]
    if len(result) != len(tout):
        raise errors.InvalidArgumentError(
            f"{where}: {_name(func)} returned {len(result)} values but Tout lists "
            f"{len(tout)} dtypes ({', '.join(d.name for d in tout) or 'none'}); return one "
            "value per dtype of Tout")
    out = []
    for i, (r, dt) in enumerate(zip(result, tout)):
        a = r.numpy() if isinstance(r, Tensor) else np.asarray(r)
        if dtypes.as_dtype(a.dtype) is not dt:
            if isinstance(r, Tensor) or a.dtype.kind not in "biuf":
                raise errors.InvalidArgumentError(
                    f"{where}: {_name(func)} returned a {a.dtype} value for output {i}, "
                    f"but Tout[{i}] is {dt.name}; cast it or change Tout")
            a = a.astype(dt.as_numpy_dtype)
        out.append(np.asarray(a, order="C"))  # (0-d stays 0-d)
    return out


def _name(func: Callable) -> str:
    return f"the function {getattr(func, '__name__', repr(func))!r}"


def _kernel(ins: list, attrs: dict) -> list:
    token = attrs["token"]
    func = _functions.get(token)
    where = f"py_function (op {OP}, token {token!r})"
    if func is None:
        raise errors.NotFoundError(
            f"{where}: no Python function is registered under this token; a graph that "
            "holds an EagerPyFunc node runs only in the process that traced it", op=OP)
    args = [convert_to_tensor(a) for a in ins]
    try:
        result = func(*args)
    except errors.OpError:
        raise
    except Exception as exc:  # the Python function's own error, typed and placed
        raise _error_class(exc)(
            f"{where}: {_name(func)} raised {type(exc).__name__}: {exc}", op=OP) from exc
    return _outputs(func, result, [dtypes.as_dtype(t) for t in attrs["Tout"]], where)


def _error_class(exc: Exception) -> type:
    """The error class TensorFlow gives a Python exception raised in a graph."""
    for py, ours in ((StopIteration, errors.OutOfRangeError),
                     (MemoryError, errors.ResourceExhaustedError),
                     (NotImplementedError, errors.UnimplementedError),
                     ((TypeError, ValueError), errors.InvalidArgumentError)):
        if isinstance(exc, py):
            return ours
    return errors.UnknownError


def _examples(rng: np.random.Generator, types: dict) -> list:
    """Sample calls: a registered function of two inputs and two outputs."""
    token = register(lambda a, b: (a * 2.0, b + 1))
    a = rng.standard_normal((2, 3)).astype(np.float32)
    b = rng.integers(-5, 5, 4).astype(np.int32)
    return [({"input": [a, b]}, {"token": token, "Tout": [dtypes.float32, dtypes.int32]})]


def _define() -> None:
    if OP in registry.OPS:
        return
    registry.register_op(registry.make_op_def(
        OP, ["input: Tin"], ["output: Tout"],
        ["token: string", "is_async: bool = false", "Tin: list(type) >= 0",
         "Tout: list(type) >= 0"],
        shape_fn=_unknown_shapes, is_stateful=True, exact_shapes=False, examples=_examples))
    registry.register_kernel(registry.KernelDef(OP, "CPU", {}, frozenset(), fn=_kernel))
    registry.set_gradient(OP, registry.NOT_DIFFERENTIABLE)


_define()


def register(func: Callable) -> str:
    """Keeps `func` for the nodes that name the returned token."""
    with _lock:
        token = f"pyfunc_{next(_tokens)}"
        _functions[token] = func
    return token
