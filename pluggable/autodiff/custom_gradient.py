"""``pg.custom_gradient``: a function that defines its own gradient.

The decorated function returns ``(y, grad_fn)``. Its body runs with the
tapes paused, so none of its ops is recorded; instead each tape that
watches one of the inputs records a single call whose inputs are the
function's tensor arguments (and the handles of the trainable variables
the body read) and whose outputs are the tensors of ``y``. The backward
pass calls ``grad_fn`` with the upstream gradients of ``y``. Inside a
traced ``pg.function`` the same happens with symbolic tensors, so
``grad_fn``'s ops are traced into the graph.

As in TensorFlow, a body that reads variables must give ``grad_fn`` a
``variables`` keyword argument and return ``(input_grads, variable_grads)``
from it, one gradient per variable in the order of ``variables``.
"""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

from ..framework import errors
from ..framework.tensor import Tensor
from ..ops import math_ops
from ..ops.variables import Variable
from ..runtime.tensors import convert_to_tensor
from . import backprop, tape


class _Arg:
    """An input of the recorded call (for error messages)."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name


class _CustomOp:
    """The op definition a recorded custom-gradient call points to."""

    is_stateful = False

    def __init__(self, name: str, n_inputs: int, grad_fn: Callable, variables: list):
        self.name = name
        self.inputs = [_Arg(f"input_{i}") for i in range(n_inputs)]
        self._grad_fn = grad_fn
        self._variables = variables
        self._n_args = n_inputs - len(variables)
        self.gradient = self._gradient

    def _gradient(self, call: Any, *dys: Any) -> list:
        dys = list(dys)
        if self._variables:
            res = self._grad_fn(*dys, variables=list(self._variables))
            if not isinstance(res, (list, tuple)) or len(res) != 2:
                raise errors.InvalidArgumentError(
                    f"custom_gradient {self.name!r}: the body reads variables, so its "
                    "grad_fn must return (input_grads, variable_grads)")
            in_grads, var_grads = res
            var_grads = list(var_grads)
            if len(var_grads) != len(self._variables):
                raise errors.InvalidArgumentError(
                    f"custom_gradient {self.name!r}: grad_fn returned {len(var_grads)} "
                    f"variable gradients for {len(self._variables)} variables "
                    f"({', '.join(v.name for v in self._variables)})")
            for v, g in zip(self._variables, var_grads):
                if g is not None and tuple(g.shape) != tuple(v.shape):
                    raise errors.InvalidArgumentError(
                        f"custom_gradient {self.name!r}: grad_fn returned a gradient of "
                        f"shape {list(g.shape)} for variable {v.name}, of shape "
                        f"{list(v.shape)}; they must be equal")
        else:
            in_grads, var_grads = self._grad_fn(*dys), []
        in_grads = [in_grads] if not isinstance(in_grads, (list, tuple)) else list(in_grads)
        if len(in_grads) != self._n_args:
            raise errors.InvalidArgumentError(
                f"custom_gradient {self.name!r}: grad_fn returned {len(in_grads)} gradients "
                f"for {self._n_args} tensor inputs; return one per input (None for none)")
        out = []
        for g, x in zip(in_grads + var_grads, call.inputs):
            if g is not None and not isinstance(g, Tensor):
                g = convert_to_tensor(g, x.dtype)
            out.append(g)
        return out


def _accepts_variables(fn: Callable) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.name == "variables" or p.kind is p.VAR_KEYWORD for p in params)


def _checked(f: Callable, result: Any) -> tuple:
    if not isinstance(result, (list, tuple)) or len(result) != 2 or not callable(result[1]):
        raise TypeError(f"custom_gradient {f.__name__!r}: the function must return "
                        f"(y, grad_fn), got {type(result).__name__}")
    return result


def custom_gradient(f: Callable | None = None) -> Any:
    """Decorates `f`, which returns ``(y, grad_fn)``, so that gradients of
    ``y`` are ``grad_fn(dy)`` (``tf.custom_gradient``)::

        @pg.custom_gradient
        def clip_grad(x):
            def grad(dy):
                return pg.clip_by_value(dy, -1.0, 1.0)
            return pg.identity(x), grad

    ``grad_fn`` takes one upstream gradient per tensor of ``y`` and returns
    one gradient per tensor argument of `f`. When `f` reads trainable
    variables, ``grad_fn(*dys, variables=...)`` must return
    ``(input_grads, variable_grads)``. Works eagerly and in ``pg.function``."""
    if f is None:
        return custom_gradient

    @functools.wraps(f)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        tapes = tape._recording_tapes() or []
        for t in tapes:
            t._recording = False
        probe = tape.GradientTape(watch_accessed_variables=True) if tapes else None
        try:
            if probe is not None:
                with probe:
                    result = _checked(f, f(*args, **kwargs))
                    # Fresh outputs, so that a returned input is not its own producer.
                    outs = [math_ops.identity(t) if isinstance(t, Tensor) else t
                            for t in backprop.flatten(result[0])]
            else:
                result = _checked(f, f(*args, **kwargs))
        finally:
            for t in tapes:
                t._recording = True
        y, grad_fn = result
        if not tapes:
            return y
        inputs = [x for x in backprop.flatten([list(args), kwargs]) if isinstance(x, Tensor)]
        variables = [v for v in probe.watched_variables() if isinstance(v, Variable)]
        if variables and not _accepts_variables(grad_fn):
            raise TypeError(
                f"custom_gradient {f.__name__!r} reads variables "
                f"({', '.join(v.name for v in variables)}), so its grad_fn must accept a "
                "'variables' keyword argument and return (input_grads, variable_grads)")
        for t in tapes:
            if t._watch_accessed:
                for v in variables:
                    if v.trainable:
                        t._watch_variable(v)
        tensors_out = [t for t in outs if isinstance(t, Tensor)]
        op = _CustomOp(f.__name__, len(inputs) + len(variables), grad_fn, variables)
        call_inputs = inputs + [v.handle for v in variables]
        call = None
        for t in tapes:
            if any(id(x) in t._watched for x in call_inputs):
                if call is None:
                    call = tape.OpCall(op, call_inputs, {}, tensors_out)
                    call._attrs = {}
                t._record(call)
        return backprop.pack_like(y, outs)

    return wrapped
