"""``pg.GradientTape``: records op calls for automatic differentiation.

While a tape is active on a thread, a wrapper installed in
``runtime.hooks`` sees every op call of that thread. An op is recorded when
one of its inputs is *watched* (given to ``watch``, a trainable variable
read while ``watch_accessed_variables`` is on, or the output of a recorded
op); its outputs become watched in turn. ``gradient`` walks the records
backwards (``backprop``). Tapes nest: an outer tape records the ops that an
inner tape's ``gradient`` runs, which gives higher derivatives.

Inside a traced ``pg.function`` the wrapper sees the symbolic tensors the
tracer makes (it is installed outside the tracer), so the records hold
graph tensors and ``gradient`` traces the backward pass into the same graph,
each gradient function under the device scope its forward op was traced in.
"""
from __future__ import annotations

import contextlib
import enum
import logging
import threading
from typing import Any, Callable, Iterator

import numpy as np

from ..framework import registry
from ..framework.tensor import Tensor
from ..ops import array_ops, math_ops
from ..ops.variables import Variable, owner_of
from ..runtime import dispatch, hooks
from . import backprop

_log = logging.getLogger("pluggable.autodiff")


def _trainable(t: Tensor) -> bool:
    """Whether gradients flow through `t`: not through integer or bool
    tensors, as in TensorFlow."""
    dt = getattr(t, "_dtype", None) or getattr(t, "dtype", None)
    return dt is None or not (getattr(dt, "is_integer", False) or getattr(dt, "is_bool", False))


class UnconnectedGradients(enum.Enum):
    """What ``gradient`` returns for a source the targets do not depend on."""
    NONE = "none"
    ZERO = "zero"


_local = threading.local()
_active = [0]  # tapes active on any thread; the wrapper is installed while > 0
_active_lock = threading.Lock()


def _stack() -> list:
    s = getattr(_local, "stack", None)
    if s is None:
        s = _local.stack = []
    return s


class OpCall:
    """A recorded op call, as gradient functions see it (``op`` argument)."""

    __slots__ = ("op_def", "inputs", "outputs", "device", "_given", "_attrs")

    def __init__(self, op_def, inputs: list, given: dict, outputs: list):
        self.op_def = op_def
        self.inputs = tuple(inputs)
        self.outputs = tuple(outputs)
        dev = outputs[0]._dev
        self.device = dev if dev is not None else backprop.device_of(outputs[0])
        self._given = dict(given)
        self._attrs = None

    @property
    def type(self) -> str:
        """The op's name, e.g. "MatMul"."""
        return self.op_def.name

    name = type

    @property
    def attrs(self) -> dict:
        """Every attribute of the call (defaults and type attributes included)."""
        if self._attrs is None:
            self._attrs = dispatch.resolve_attrs(self.op_def, self._given, list(self.inputs))
        return self._attrs

    def get_attr(self, name: str) -> Any:
        try:
            return self.attrs[name]
        except KeyError:
            raise ValueError(f"op {self.type} has no attribute {name!r}") from None

    def __repr__(self) -> str:
        return f"<recorded {self.type} on {backprop.device_name(self.device)}>"


def _recording_tapes() -> list | None:
    stack = getattr(_local, "stack", None)
    return [t for t in stack if t._recording] if stack else None


def _note(op, inputs: list, attrs: dict, outputs: list, tapes: list,
          resolved: dict | None = None) -> None:
    """Records a call that ran on the tapes it is connected to (`resolved`:
    its attributes in full, where the caller has them)."""
    if outputs and op.gradient is not _NOT_DIFFERENTIABLE:
        call = None
        for t in tapes:
            w = t._watched
            for x in inputs:
                if id(x) in w:
                    break
            else:
                continue  # not connected to this tape
            if call is None:
                call = OpCall(op, inputs, attrs, outputs)
                call._attrs = resolved
            t._record(call)


_NOT_DIFFERENTIABLE = registry.NOT_DIFFERENTIABLE


def records_call(args: Any) -> bool:
    """Whether a recording tape of this thread would record ops on `args`
    (a nested structure) or on the variables a call reads: a ``pg.function``
    call then runs its Python function eagerly, so that the tape records
    each op and gradients flow through the call."""
    tapes = _recording_tapes()
    if not tapes:
        return False
    if any(t._watch_accessed for t in tapes):
        return True
    flat = [x for x in backprop.flatten(args) if isinstance(x, (Tensor, Variable))]
    for t in tapes:
        for x in flat:
            key = id(x.handle) if isinstance(x, Variable) else id(x)
            if key in t._watched:
                return True
    return False


def _watch_read(op, inputs: list, tapes: list) -> None:
    """A trainable variable read while a tape watches accessed variables
    becomes watched on that tape."""
    if op.name == "ReadVariableOp":
        var = owner_of(inputs[0])
        if var is not None and var.trainable:
            for t in tapes:
                if t._watch_accessed:
                    t._watch_variable(var)


def _record_wrapper(op, inputs: list, attrs: dict, run):
    """The hook on the general path: records the call on this thread's
    recording tapes."""
    tapes = _recording_tapes()
    if not tapes:
        return run(op, inputs, attrs)
    for x in inputs:
        if not isinstance(x, Tensor):  # (traced symbolic tensors stay as they are)
            inputs = dispatch.convert_inputs(op, list(inputs), attrs)
            break
    _watch_read(op, inputs, tapes)
    outputs = run(op, list(inputs), attrs)  # dispatch replaces moved inputs in its list
    _note(op, inputs, attrs, outputs, tapes)
    return outputs


def _record_observer(op, inputs: list, attrs: dict, outputs: list, resolved: dict) -> None:
    """The same for a call that a fast path ran (its inputs are tensors on
    the op's device): what the wrapper does, after the call."""
    stack = getattr(_local, "stack", None)
    if stack:
        tapes = stack if len(stack) == 1 and stack[0]._recording else \
            [t for t in stack if t._recording]
        if tapes:
            if op.name == "ReadVariableOp":
                _watch_read(op, inputs, tapes)
            _note(op, inputs, attrs, outputs, tapes, resolved)


def _activate() -> None:
    with _active_lock:
        _active[0] += 1
        if _active[0] == 1:
            hooks.install(_record_wrapper, observer=_record_observer)


def _deactivate() -> None:
    with _active_lock:
        _active[0] -= 1
        if _active[0] == 0:
            hooks.uninstall(_record_wrapper)


class GradientTape:
    """Records operations for automatic differentiation (TensorFlow's
    ``tf.GradientTape``)::

        x = pg.constant(3.0)
        with pg.GradientTape() as tape:
            tape.watch(x)
            y = x * x
        tape.gradient(y, x)          # 6.0

    Trainable variables read inside the block are watched automatically
    (``watch_accessed_variables=False`` turns that off). A tape can compute
    gradients once, unless it is ``persistent``. Nest tapes for higher
    derivatives. Tapes are per thread."""

    def __init__(self, persistent: bool = False, watch_accessed_variables: bool = True):
        self._persistent = bool(persistent)
        self._watch_accessed = bool(watch_accessed_variables)
        self._recording = False
        self._entered = False
        self._used = False
        self.reset()

    # ---------------------------------------------------------------- context
    def __enter__(self) -> "GradientTape":
        if self._entered:
            raise ValueError("Tape is still recording, This can happen if you try to "
                             "re-enter an already-active tape.")
        self._entered = True
        self._recording = True
        _stack().append(self)
        _activate()
        return self

    def __exit__(self, *exc) -> None:
        self._recording = False
        self._entered = False
        stack = _stack()
        if self in stack:
            stack.remove(self)
        _deactivate()

    @contextlib.contextmanager
    def stop_recording(self) -> Iterator[None]:
        """Ops in this block are not recorded on this tape."""
        if not self._recording:
            raise ValueError("Tape.stop_recording() can only be used while the tape is "
                             "recording (inside its `with` block)")
        self._recording = False
        try:
            yield
        finally:
            self._recording = True

    def reset(self) -> None:
        """Forgets everything recorded and watched so far."""
        self._records: list[OpCall] = []
        self._watched: dict[int, Tensor] = {}
        self._variables: dict[int, Variable] = {}

    # --------------------------------------------------------------- watching
    def watch(self, tensor: Any) -> None:
        """Makes the tape trace computations on `tensor` (a Tensor, a
        Variable, or a nested list/tuple/dict of them)."""
        for x in backprop.flatten(tensor):
            if isinstance(x, Variable):
                self._watch_variable(x)
            elif isinstance(x, Tensor):
                if not _trainable(x):   # TensorFlow warns and does not watch it
                    _log.warning("GradientTape.watch: the dtype of the watched tensor must be "
                                 "floating (e.g. float32), got %s; its gradient is None",
                                 x.dtype.name)
                    continue
                self._watched[id(x)] = x
            else:
                raise ValueError(f"GradientTape.watch: cannot watch {type(x).__name__}; "
                                 "pass tensors or variables")

    def _watch_variable(self, var: Variable) -> None:
        self._variables.setdefault(id(var), var)
        self._watched[id(var.handle)] = var.handle

    def watched_variables(self) -> tuple[Variable, ...]:
        """The variables watched so far, in the order they were first seen."""
        return tuple(self._variables.values())

    def _record(self, call: OpCall) -> None:
        self._records.append(call)
        for o in call.outputs:
            if _trainable(o):
                self._watched[id(o)] = o

    # -------------------------------------------------------------- gradients
    def _start_gradient(self) -> None:
        if self._used and not self._persistent:
            raise RuntimeError("A non-persistent GradientTape can only be used to compute "
                               "one set of gradients (or jacobians)")
        self._used = True
        if not self._persistent:
            self._recording = False  # its own backward pass is not recorded

    def _finish(self) -> None:
        if not self._persistent:  # release the recorded tensors
            self._records, self._watched = [], {}

    def gradient(self, target: Any, sources: Any, output_gradients: Any = None,
                 unconnected_gradients: "UnconnectedGradients | str" = UnconnectedGradients.NONE,
                 on_gradient: Callable[[int, Any], None] | None = None) -> Any:
        """The gradient of `target` (a tensor or nested structure of tensors,
        summed) with respect to each of `sources` (tensors or variables,
        nested), returned in the structure of `sources`. `output_gradients`
        (one per target) weight the targets (default: ones). A source the
        targets do not depend on gets None, or zeros with
        ``unconnected_gradients="zero"``. Raises LookupError naming the op
        when a gradient must flow through an op that has no gradient.

        `on_gradient(i, grad)`, if given, is called during the backward pass
        with the gradient of source i (its index in the flattened `sources`)
        as soon as that gradient is final: once the first recorded op that
        uses the source has been processed, before the pass goes on (so a
        data-parallel reducer can start sending it while the rest is
        computed). It is the same tensor the call returns. A source that
        gets no gradient is reported with None (at the start when no op
        uses it), even where ``unconnected_gradients="zero"`` returns zeros
        for it. An exception it raises stops the pass."""
        how = UnconnectedGradients(unconnected_gradients)
        self._start_gradient()
        try:
            return backprop.gradient(self._records, target, sources, output_gradients,
                                     how is UnconnectedGradients.ZERO, self._watched,
                                     on_gradient)
        finally:
            self._finish()

    def batch_jacobian(self, target: Any, source: Any,
                       unconnected_gradients: "UnconnectedGradients | str" =
                       UnconnectedGradients.NONE, parallel_iterations: Any = None,
                       experimental_use_pfor: bool = True) -> Any:
        """The Jacobian of each example of `target` ([B, T...]) with respect
        to the same example of `source` ([B, S...]): a tensor [B, T..., S...]
        (TensorFlow's; right when example b of the target depends only on
        example b of the source)."""
        tshape, sshape = list(target.shape), list(source.shape)
        if not tshape or not sshape or tshape[0] != sshape[0]:
            raise ValueError(f"batch_jacobian: target {tshape} and source {sshape} need the "
                             "same first (batch) dimension")
        j = self.jacobian(target, source, unconnected_gradients)
        if j is None:
            return None
        b = tshape[0]
        tn, sn = int(np.prod(tshape[1:])), int(np.prod(sshape[1:]))
        j = math_ops.transpose(math_ops.reshape(j, [b, tn, b, sn]), [0, 2, 1, 3])
        diag = array_ops.gather(math_ops.reshape(j, [b * b, tn, sn]),
                                np.arange(b, dtype=np.int64) * (b + 1))
        return math_ops.reshape(diag, [b] + tshape[1:] + sshape[1:])

    def jacobian(self, target: Any, sources: Any,
                 unconnected_gradients: "UnconnectedGradients | str" = UnconnectedGradients.NONE,
                 parallel_iterations: Any = None, experimental_use_pfor: bool = True) -> Any:
        """The Jacobian of `target` with respect to each of `sources`: for a
        source of shape S and a target of shape T, a tensor of shape T + S
        (one backward pass per element of the target)."""
        how = UnconnectedGradients(unconnected_gradients)
        self._start_gradient()
        try:
            return backprop.jacobian(self._records, target, sources,
                                     how is UnconnectedGradients.ZERO, self._watched)
        finally:
            self._finish()
