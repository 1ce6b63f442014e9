"""``pg.py_function``: Python code that runs at each call of a graph.

Eagerly, ``py_function(func, inp, Tout)`` calls ``func`` on the tensors
`inp` and converts its results to `Tout`. Inside a traced ``pg.function``
it adds an ``EagerPyFunc`` node (TensorFlow's op name): the node's CPU
kernel looks ``func`` up by the node's ``token`` attribute and calls it on
eager tensors each time the graph runs, not once per trace. The node is
stateful, so the graph passes neither fold, merge nor prune it.

The outputs of the node have unknown shapes (``func`` decides them at run
time). Gradients do not flow through ``py_function``.
"""
from __future__ import annotations

import itertools
import threading
from typing import Any, Callable, Sequence

import numpy as np

from ..framework import dtypes, errors, registry
from ..framework.tensor import Tensor
from ..runtime import dispatch
from ..runtime.tensors import convert_to_tensor
from . import tracing

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


def _define() -> None:
    if OP in registry.OPS:
        return
    registry.register_op(registry.make_op_def(
        OP, ["input: Tin"], ["output: Tout"],
        ["token: string", "Tin: list(type) >= 0", "Tout: list(type) >= 0"],
        shape_fn=_unknown_shapes, is_stateful=True, exact_shapes=False))
    registry.register_kernel(registry.KernelDef(OP, "CPU", {}, frozenset(), fn=_kernel))
    registry.set_gradient(OP, registry.NOT_DIFFERENTIABLE)


_define()


def set_static_shape(t: Tensor, shape: Any) -> None:
    """Records the static `shape` of traced tensor `t` where tracing could
    not infer it (what ``set_shape`` does in TensorFlow)."""
    if isinstance(t, tracing.SymbolicTensor) and t.shape is None and shape is not None:
        shape = tuple(shape)
        shapes = list(t.node.out_shapes)
        shapes[t.index] = shape
        t.node.out_shapes = shapes
        t._shape = shape


def register(func: Callable) -> str:
    """Keeps `func` for the nodes that name the returned token."""
    with _lock:
        token = f"pyfunc_{next(_tokens)}"
        _functions[token] = func
    return token


def call_node(token: str, inputs: list, tout: list) -> list:
    """Adds (while tracing) or runs an EagerPyFunc node for `token`."""
    return dispatch.execute(registry.OPS[OP], list(inputs), {
        "token": token, "Tin": [t.dtype for t in inputs], "Tout": list(tout)})


def py_function(func: Callable, inp: Sequence[Any] | Any, Tout: Any,
                name: str | None = None) -> Any:
    """Runs the Python function `func` on tensors (``tf.py_function``).

    `inp` is a list of tensors (or values convertible to tensors); `func`
    receives them as eager tensors and returns one value per dtype of
    `Tout` (a dtype: one tensor is returned; a list of dtypes: a list).
    Inside a ``pg.function`` the call becomes a graph node that runs `func`
    at every call of the function. Eagerly, an exception `func` raises
    propagates as it is; from a graph it comes back typed as TensorFlow
    types it (ValueError and TypeError: ``InvalidArgumentError``,
    StopIteration: ``OutOfRangeError``, NotImplementedError:
    ``UnimplementedError``, MemoryError: ``ResourceExhaustedError``, others:
    ``UnknownError``), naming `func` and the exception."""
    if not callable(func):
        raise TypeError(f"py_function: func must be callable, got {func!r}")
    single = not isinstance(Tout, (list, tuple))
    tout = [dtypes.as_dtype(t) for t in ([Tout] if single else Tout)]
    inputs = list(inp) if isinstance(inp, (list, tuple)) else [inp]
    inputs = [x if isinstance(x, Tensor) else convert_to_tensor(x) for x in inputs]
    if tracing.current_graph() is None:
        where = f"py_function {name or getattr(func, '__name__', '')!r}".rstrip(" '")
        arrays = _outputs(func, func(*inputs), tout, where)
        outs = [convert_to_tensor(a) for a in arrays]
    else:
        outs = call_node(register(func), inputs, tout)
    if single:
        return outs[0] if outs else None
    return list(outs)
