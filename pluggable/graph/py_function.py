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

import functools
from typing import Any, Callable, Sequence

from ..framework import dtypes, registry
from ..framework.tensor import Tensor
from ..ops.py_func_ops import OP, _error_class, _outputs, register  # noqa: F401  (the op)
from ..runtime import dispatch
from ..runtime.tensors import convert_to_tensor
from . import tracing


def set_static_shape(t: Tensor, shape: Any) -> None:
    """Records the static `shape` of traced tensor `t` where tracing could
    not infer it (what ``set_shape`` does in TensorFlow)."""
    if isinstance(t, tracing.SymbolicTensor) and t.shape is None and shape is not None:
        shape = tuple(shape)
        shapes = list(t.node.out_shapes)
        shapes[t.index] = shape
        t.node.out_shapes = shapes
        t._shape = shape


def call_node(token: str, inputs: list, tout: list) -> list:
    """Adds (while tracing) or runs an EagerPyFunc node for `token`."""
    return dispatch.execute(registry.OPS[OP], list(inputs), {
        "token": token, "Tin": [t.dtype for t in inputs], "Tout": list(tout)})


def py_function(func: Callable | None = None, inp: Sequence[Any] | Any = None,
                Tout: Any = None, name: str | None = None) -> Any:
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
    ``UnknownError``), naming `func` and the exception.

    Without `func` (``@pg.py_function(Tout=pg.float32)`` over a def) it is
    a decorator: calling the decorated function with tensors runs it so."""
    if Tout is None:
        raise TypeError("py_function: give Tout, the dtype (or list of dtypes) func returns")
    if func is None:
        if inp is not None:
            raise TypeError("py_function: as a decorator it takes no inp; call the decorated "
                            "function with the tensors")

        def decorator(f: Callable) -> Callable:
            @functools.wraps(f)
            def wrapped(*args: Any) -> Any:
                return py_function(f, list(args), Tout, name)
            return wrapped
        return decorator
    if inp is None:
        raise TypeError("py_function: give inp, the list of tensors func receives")
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
