"""``pg.function``: Python functions traced into graphs, like ``tf.function``.

The first call with a new *signature* (the dtype and shape of each tensor
argument, the value of each Python argument, the device scope) traces the
Python function into a graph; later calls with that signature run the graph
and never the Python body. Python values are baked into the graph as
constants, so a new Python value means a new trace. ``input_signature``
fixes one signature for all calls (``None`` dimensions accept any size).
Every trace is counted (``tracing_count``) and logged on the
``pluggable.graph`` logger; frequent retracing is warned about once.

Nested tuples, lists and dicts of tensors are accepted as arguments and
returned as results, and so are composite values (``pg.RaggedTensor``): a
type with ``__pg_flatten__()`` -> (component tensors, static part) and
``__pg_unflatten__(static, components)`` is traced through its components,
its static part (a ragged tensor's row partitions) being part of the
signature, as a Python value is. Python numbers and bools (and numpy values) that a body
returns become constant tensors of the graph and None stays None, as in
``tf.function``. The Python body's side effects (printing, appending to a
list, changing a global) happen when it runs, that is once per trace, and
not on the calls that reuse a trace.
"""
from __future__ import annotations

import functools
import inspect
import logging
import sys
import threading
import weakref
from typing import Any, Callable, Sequence

import numpy as np

from ..framework import config, dtypes, errors
from ..framework.tensor import Tensor
from ..framework.tensor_shape import TensorShape
from ..runtime import placement
from ..ops import variables
from ..runtime.tensors import convert_to_tensor
from . import device_capture, nest, trace_type, tracing
from .executor import Executable
from .ir import Graph

log = logging.getLogger("pluggable.graph")
RETRACE_WARNING = 5  # traces of one function after which retracing is warned about
_run_eagerly = [False]


def run_functions_eagerly(run_eagerly: bool) -> None:
    """Makes every ``pg.function`` run its Python body eagerly, op by op,
    instead of tracing and running a graph (``tf.config.run_functions_eagerly``):
    a debugging aid, so breakpoints and ``print`` work on values. Python side
    effects then happen at each call. ``False`` restores graphs."""
    _run_eagerly[0] = bool(run_eagerly)


def functions_run_eagerly() -> bool:
    """Whether ``pg.function``s run eagerly (see ``run_functions_eagerly``)."""
    return _run_eagerly[0]


class TensorSpec:
    """The dtype and shape of a tensor argument; ``None`` (or -1) for a
    dimension of any size, ``shape=None`` for any rank."""

    __slots__ = ("shape", "dtype", "name")

    def __init__(self, shape: Sequence[int | None] | None = None, dtype: Any = dtypes.float32,
                 name: str | None = None):
        self.shape = None if shape is None else tuple(
            None if d is None or d == -1 else int(d) for d in shape)
        self.dtype = dtypes.as_dtype(dtype)
        self.name = name

    @classmethod
    def from_tensor(cls, t: Tensor, name: str | None = None) -> "TensorSpec":
        return cls(t.shape, t.dtype, name)

    def is_compatible_with(self, t: Any) -> bool:
        """Whether tensor (or spec) `t` has this dtype and a matching shape."""
        if t.dtype is not self.dtype:
            return False
        return shape_compatible(self.shape, t.shape)

    def __eq__(self, other: Any) -> bool:
        return (isinstance(other, TensorSpec) and other.shape == self.shape
                and other.dtype is self.dtype)

    def __hash__(self) -> int:
        return hash((self.shape, self.dtype.name))

    def __repr__(self) -> str:
        """TensorFlow's text: ``TensorSpec(shape=(None, 3), dtype=tf.float32, name=None)``."""
        shape = "<unknown>" if self.shape is None else str(TensorShape(self.shape))
        return f"TensorSpec(shape={shape}, dtype={self.dtype!r}, name={self.name!r})"


def shape_compatible(spec, shape) -> bool:
    """Whether `shape` fits `spec` (None sizes and ranks match anything)."""
    if spec is None or shape is None:
        return True
    return len(spec) == len(shape) and all(a is None or b is None or a == b
                                           for a, b in zip(spec, shape))


def _describe(t: Any) -> str:
    return f"{t.dtype.name} of shape {t.shape}"


# --------------------------------------------------------------- signatures

class _Mark:
    """Tags the leaves of a signature key: a tensor, a hashable Python value,
    an unhashable one (by identity)."""

    __slots__ = ("what",)

    def __init__(self, what: str):
        self.what = what

    def __repr__(self) -> str:
        return self.what


_T, _P, _I = _Mark("tensor"), _Mark("value"), _Mark("object")
_C = _Mark("composite")


def composite_parts(x: Any) -> tuple[list, Any] | None:
    """(components, static part) of a composite value, None for others."""
    flatten = getattr(type(x), "__pg_flatten__", None)
    return None if flatten is None else flatten(x)


class _CompositeResult:
    """A composite leaf of a traced function's result: its type, static
    part and the graph outputs of its components."""

    __slots__ = ("kind", "static", "outputs")

    def __init__(self, kind: type, static: Any, outputs: list[int]):
        self.kind, self.static, self.outputs = kind, static, outputs

    def rebuild(self, outs: list) -> Any:
        return self.kind.__pg_unflatten__(self.static, [outs[i] for i in self.outputs])


def _expand_composites(leaves: list) -> list:
    out = []
    for x in leaves:
        parts = composite_parts(x)
        out.extend(parts[0] if parts is not None else [x])
    return out


def _leaf_key(x: Any, tensors: list) -> Any:
    """The part of the signature one argument contributes; tensor leaves are
    appended to `tensors` in order."""
    t = type(x)
    if t is Tensor:
        tensors.append(x)
        return (_T, x._dtype, x._shape)
    if isinstance(x, Tensor):
        tensors.append(x)
        return (_T, x.dtype, x.shape)
    if isinstance(x, TensorSpec):
        tensors.append(x)
        return (_T, x.dtype, x.shape)
    if t is np.ndarray:
        v = convert_to_tensor(x)
        tensors.append(v)
        return (_T, v._dtype, v._shape)
    if t is tuple or t is list or (isinstance(x, tuple) and hasattr(x, "_fields")):
        return (t, tuple(_leaf_key(v, tensors) for v in x))
    if t is dict:
        return (t, tuple((k, _leaf_key(x[k], tensors)) for k in sorted(x)))
    parts = composite_parts(x)
    if parts is not None:
        return (_C, t, parts[1], tuple(_leaf_key(c, tensors) for c in parts[0]))
    traced_as = trace_type.tracing_type(x)
    if traced_as is not None:  # the argument's own key (tf.types.experimental.TraceType)
        return (_P, trace_type.TraceType, traced_as)
    try:
        hash(x)
        return (_P, t, x)
    except TypeError:
        return (_I, t, id(x))


def _relax(a: Any, b: Any) -> Any:
    """The most specific signature both `a` and `b` fit, where they differ
    only in tensor shapes (sizes that differ become None, a rank that
    differs an unknown shape); None when they differ otherwise."""
    if isinstance(a, tuple) and a and type(a[0]) is _Mark:
        if a[0] is _T and isinstance(b, tuple) and b[:1] == (_T,) and a[1] is b[1]:
            sa, sb = a[2], b[2]
            if sa is None or sb is None or len(sa) != len(sb):
                return (_T, a[1], None)
            return (_T, a[1], tuple(x if x == y else None for x, y in zip(sa, sb)))
        return a if a == b else None
    if not isinstance(a, tuple) or not isinstance(b, tuple):
        return a if a == b else None
    if len(a) != len(b):
        return None
    out = []
    for x, y in zip(a, b):
        r = _relax(x, y)
        if r is None and not (x is None and y is None):
            return None
        out.append(r)
    return tuple(out)


def _tensor_specs(key: Any, out: list) -> list:
    """The TensorSpecs of the tensor leaves of signature `key`, in order."""
    if isinstance(key, tuple) and key and type(key[0]) is _Mark:
        if key[0] is _T:
            out.append(TensorSpec(key[2], key[1]))
        return out
    if isinstance(key, tuple):
        for x in key:
            _tensor_specs(x, out)
    return out


def _with_specs(value: Any, specs: list) -> Any:
    """`value` with its tensor leaves replaced by the next of `specs`."""
    def leaf(x: Any) -> Any:
        if isinstance(x, (Tensor, TensorSpec, np.ndarray)):
            return specs.pop(0)
        return x
    return nest.map_structure(leaf, value) if nest.is_nested(value) else leaf(value)


def _key_compatible(general: Any, specific: Any) -> bool:
    """Whether a trace made for signature `general` can run `specific`."""
    if isinstance(general, tuple) and general and type(general[0]) is _Mark:
        if general[0] is _T and isinstance(specific, tuple) and specific[:1] == (_T,):
            return general[1] is specific[1] and shape_compatible(general[2], specific[2])
        return general == specific
    if not isinstance(general, tuple) or not isinstance(specific, tuple):
        return general == specific
    return len(general) == len(specific) and all(
        _key_compatible(a, b) for a, b in zip(general, specific))


# ------------------------------------------------------------ concrete functions

class ConcreteFunction:
    """One traced graph of a ``pg.function``, for one input signature.

    ``graph`` is the traced graph (``graph.as_graph_def()`` gives the
    GraphDef); ``inputs`` / ``outputs`` are its symbolic tensors. Calling it
    runs the graph on tensors matching its ``input_specs`` (a wrong dtype or
    rank is an error naming the argument). It is placed and optimised for
    the devices of the tensors it is called with, once per set of devices."""

    def __init__(self, graph: Graph, specs: list[tuple[str, TensorSpec]], structure: Any,
                 name: str, parameters: list[tuple[str, str, str]] | None = None,
                 literals: dict | None = None):
        self.graph = graph
        self.name = name
        # (name, kind, type text) of each argument the body was traced with
        self._parameters = parameters or []
        self._literals = literals or {}   # name -> the Python value it was traced with
        self.input_specs = [s for _, s in specs]
        self.input_names = [n for n, _ in specs]
        self._structure = structure
        marks = nest.flatten(structure) if structure is not None else []
        # The leaves to fill when the result holds None leaves (None: none does).
        self._marks = marks if any(m is None or isinstance(m, _CompositeResult)
                                   for m in marks) else None
        self._executables: dict = {}
        self._captures: dict = {}   # id(executable) -> device_capture.CaptureState
        self._last: Executable | None = None
        self._lock = threading.Lock()

    @property
    def inputs(self) -> list:
        return [tracing.SymbolicTensor(n, 0) for n in self.graph.inputs]

    @property
    def outputs(self) -> list:
        return [tracing.SymbolicTensor(n, i) for n, i in self.graph.outputs]

    @property
    def structured_outputs(self) -> Any:
        return self._pack(self.outputs) if self._structure is not None else None

    def _pack(self, outs: list) -> Any:
        """The graph's outputs `outs` in the structure the body returned."""
        if self._marks is None:
            return nest.pack_as(self._structure, outs)
        return nest.pack_as(self._structure, [
            None if m is None else m.rebuild(outs) if isinstance(m, _CompositeResult)
            else outs[m] for m in self._marks])

    def _check_literals(self, args: tuple, kwargs: dict) -> None:
        """TypeError where a Python value differs from the one the body was
        traced with (TensorFlow's "Can not cast 3 to Literal[2]")."""
        literals = self._literals
        given = dict(zip((n for n, _, _ in self._parameters), args))
        given.update(kwargs)
        for name, v in given.items():
            if name in literals and not isinstance(v, (Tensor, np.ndarray)):
                lit = literals[name]
                if type(v) is not type(lit) or v != lit:
                    raise TypeError(
                        f"{self.name}: argument {name!r} was traced as Literal[{lit!r}]; "
                        f"cannot cast {v!r} to it (call the pg.function to trace it for "
                        "this value)")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._literals:
            self._check_literals(args, kwargs)
        leaves = _expand_composites(
            nest.flatten(list(args)) + nest.flatten([kwargs[k] for k in sorted(kwargs)]))
        tensors = [x for x in leaves if isinstance(x, (Tensor, np.ndarray))]
        if len(tensors) != len(self.input_specs):
            tensors = leaves
        if len(tensors) != len(self.input_specs):
            raise TypeError(f"{self.name} takes {len(self.input_specs)} tensor arguments "
                            f"({', '.join(self.input_names)}), got {len(tensors)}")
        return self._call_flat(self._check_inputs(tensors))

    def _check_inputs(self, values: list) -> list[Tensor]:
        out = []
        for name, spec, v in zip(self.input_names, self.input_specs, values):
            out.append(check_argument(self.name, name, spec, v))
        return out

    def _call_flat(self, tensors: list[Tensor]) -> Any:
        ex = self.executable([t._dev for t in tensors])
        if device_capture.get_graph_capture() == "off":
            outs = ex.run(tensors)
        else:
            outs = self._capture_state(ex).run(tensors)
        if self._structure is None:
            return None
        return self._pack(outs)

    def executable(self, devices: list) -> Executable:
        """The compiled graph for inputs on `devices` (built on first use)."""
        key = (tuple(devices), config.version[0])
        ex = self._executables.get(key)
        if ex is None:
            with self._lock:
                ex = self._executables.get(key)
                if ex is None:
                    ex = Executable(self.graph, list(devices))
                    current = config.live_versions()  # other settings' stay, for a change back
                    self._executables = {k: v for k, v in self._executables.items()
                                         if k[1] in current}
                    self._executables[key] = ex
                    live = {id(e) for e in self._executables.values()}
                    self._captures = {k: c for k, c in self._captures.items() if k in live}
        self._last = ex
        return ex

    def _capture_state(self, ex: Executable) -> device_capture.CaptureState:
        state = self._captures.get(id(ex))
        if state is None:
            with self._lock:
                state = self._captures.get(id(ex))
                if state is None:
                    state = self._captures[id(ex)] = device_capture.CaptureState(ex)
        return state

    def capture_stats(self) -> dict | None:
        """Device graphs captured for the latest call's executable (see
        ``pg.config.set_graph_capture``), or None when none was tried."""
        state = self._captures.get(id(self._last)) if self._last is not None else None
        return state.stats() if state is not None else None

    @property
    def optimized_graph(self) -> Graph | None:
        """The placed and optimised graph of the latest call (None before)."""
        return self._last.optimized_graph if self._last is not None else None

    def plan_stats(self) -> dict | None:
        """Statistics of the latest call's plan (see ``Executable.stats``)."""
        return self._last.stats() if self._last is not None else None

    def _output_text(self) -> str:
        if self._structure is None:
            return "Literal[None]"
        outs = self.outputs
        leaves = [None if m is None else TensorSpec(outs[m].shape, outs[m].dtype)
                  for m in nest.flatten(self._structure)]
        return type_text(nest.pack_as(self._structure, leaves))

    def pretty_printed_signature(self, verbose: bool = True) -> str:
        """TensorFlow's text of the signature: the input parameters with
        their kinds and types (``TensorSpec(...)`` or ``Literal[value]``), the
        output type and the captured values."""
        lines = ["Input Parameters:"]
        lines += [f"  {n} ({kind}): {text}" for n, kind, text in self._parameters]
        lines += ["Output Type:", f"  {self._output_text()}", "Captures:"]
        captures = [f"  {id(value)}: {TensorSpec(ph.out_shapes[0], ph.out_dtypes[0])!r}"
                    for value, ph in self.graph.captures]
        captures += [f"  {id(n.attrs['value'])}: "  # the variables' resource handles
                     f"{TensorSpec(n.out_shapes[0], n.out_dtypes[0])!r}"
                     for n in self.graph.nodes
                     if n.op == "Const" and n.out_dtypes[0] is dtypes.resource]
        lines += captures or ["  None"]
        return "\n".join(lines)

    def __str__(self) -> str:
        return "ConcreteFunction " + self.pretty_printed_signature()

    @property
    def function_type(self) -> "FunctionType":
        """The traced signature: ``(a: TensorSpec(...), b: Literal[2]) ->
        TensorSpec(...)`` as TensorFlow prints it."""
        return FunctionType(self)

    @property
    def inference_fn(self) -> "ConcreteFunction":
        """What runs the graph on the flat tensor inputs (TensorFlow's
        AtomicFunction): here the concrete function itself."""
        return self

    def __repr__(self) -> str:
        return f"<ConcreteFunction {FunctionType(self)} at 0x{id(self):X}>"


class FunctionType:
    """The signature of a ConcreteFunction (TensorFlow's FunctionType): its
    text is ``(params) -> output``, its repr the full signature block."""

    def __init__(self, cf: ConcreteFunction):
        self._cf = cf

    def __str__(self) -> str:
        params, star = [], False
        for n, kind, text in self._cf._parameters:
            if kind == "KEYWORD_ONLY" and not star:
                params.append("*")
                star = True
            params.append(f"{n}: {text}")
        return f"({', '.join(params)}) -> {self._cf._output_text()}"

    def __repr__(self) -> str:
        return self._cf.pretty_printed_signature()


def type_text(value: Any) -> str:
    """TensorFlow's text for the type of a traced argument or result:
    ``TensorSpec(...)`` for a tensor, ``Literal[2]`` for a Python value,
    ``Tuple[...]`` / ``List[...]`` / ``Dict[[key, ...], ...]`` for nests."""
    if isinstance(value, TensorSpec):
        return repr(value)
    if isinstance(value, (Tensor, np.ndarray)):
        t = convert_to_tensor(value) if isinstance(value, np.ndarray) else value
        return repr(TensorSpec(t.shape, t.dtype))
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return f"Tuple[{', '.join(type_text(v) for v in value)}]"
    if isinstance(value, list):
        return f"List[{', '.join(type_text(v) for v in value)}]"
    if isinstance(value, dict):
        return "Dict[" + ", ".join(f"[{k!r}, {type_text(value[k])}]" for k in value) + "]"
    return f"Literal[{value!r}]"


def check_argument(fname: str, name: str, spec: TensorSpec, v: Any,
                   error: type = errors.InvalidArgumentError) -> Tensor:
    """`v` as a tensor matching `spec`, or an `error` naming argument `name`
    (TensorFlow raises TypeError where a tf.function's input_signature does
    not fit, InvalidArgumentError where a concrete function's inputs do not)."""
    if not isinstance(v, Tensor):
        try:  # numpy values keep their dtype (checked below); Python values convert
            v = convert_to_tensor(v, None if isinstance(v, (np.ndarray, np.generic))
                                  else spec.dtype)
        except (TypeError, ValueError, errors.OpError) as exc:
            raise error(
                f"{fname}: argument {name!r} must be a {spec.dtype.name} tensor of shape "
                f"{spec.shape}; converting {type(v).__name__} failed: {exc}") from None
    if v.dtype is not spec.dtype:
        raise error(
            f"{fname}: argument {name!r} must be a {spec.dtype.name} tensor of shape "
            f"{spec.shape}, got a {_describe(v)}: cast it (pg.cast) or trace the function "
            "for this dtype")
    if spec.shape is not None and len(spec.shape) != len(v.shape):
        raise error(
            f"{fname}: argument {name!r} must have rank {len(spec.shape)} (shape "
            f"{spec.shape}), got a {_describe(v)}")
    if not shape_compatible(spec.shape, v.shape):
        raise error(
            f"{fname}: argument {name!r} must have shape {spec.shape} (None: any size), "
            f"got a {_describe(v)}")
    return v


# ----------------------------------------------------------------- functions

class Function:
    """A Python function traced into graphs: see ``pg.function``."""

    def __init__(self, python_function: Callable, input_signature: Sequence | None = None,
                 name: str | None = None, reduce_retracing: bool = False,
                 autograph: bool = True):
        if not callable(python_function):
            raise TypeError(f"pg.function needs a callable, got {python_function!r}")
        functools.update_wrapper(self, python_function)
        self.python_function = python_function
        self.__name__ = name or getattr(python_function, "__name__", "function")
        self._signature = inspect.signature(python_function)
        self._params = [p for p in self._signature.parameters.values()
                        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        self._varargs = next((p.name for p in self._signature.parameters.values()
                              if p.kind is p.VAR_POSITIONAL), None)
        self.input_signature = None if input_signature is None else tuple(input_signature)
        # A spec of a composite value (pg.RaggedTensorSpec) checks the values
        # of each call, which are then traced by their static parts.
        self._value_signature = False
        if self.input_signature is not None:
            for path, s in nest.flatten_with_paths(list(self.input_signature)):
                if getattr(s, "__pg_composite_spec__", False):
                    self._value_signature = True
                elif not isinstance(s, TensorSpec):
                    raise TypeError(f"{self.__name__}: input_signature{path} must be a "
                                    f"pg.TensorSpec, got {s!r}")
        self.reduce_retracing = bool(reduce_retracing)
        self._autograph = bool(autograph)
        self._method_of = None   # (function, instance weakref) of a bound method
        self._cache: dict = {}
        self._lock = threading.RLock()
        self._traces = 0
        self._traced_once = False  # only the first trace may make variables
        self._warned = False
        self._bound: dict = {}    # id(instance) -> (weakref, bound Function): __get__

    # ------------------------------------------------------------- calling
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if tracing.current_graph() is not None or _run_eagerly[0]:
            # inside another trace: inlined; run_functions_eagerly: op by op
            body = self.python_function if _run_eagerly[0] else self._traced_body()
            return body(*args, **kwargs)
        # The tape module is loaded once a tape exists; while another thread
        # is still importing it, it has no records_call yet and no tape can
        # be recording.
        records_call = getattr(sys.modules.get("pluggable.autodiff.tape"), "records_call", None)
        if records_call is not None and records_call((args, kwargs)):
            # A recording GradientTape sees the call: run it eagerly, op by op,
            # so the tape records them and gradients flow through the call.
            return self.python_function(*args, **kwargs)
        cf, tensors = self._concrete_for(args, kwargs)
        return cf._call_flat(tensors)

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        """A method decorated with pg.function: as TensorFlow's, each
        instance gets its own bound Function (its own traces;
        ``get_concrete_function`` and an ``input_signature`` that leaves out
        ``self``), kept while the instance lives. The bound function holds
        the instance weakly."""
        if instance is None:
            return self
        with self._lock:
            bound = self._bound.get(id(instance))
            if bound is not None and bound[0]() is instance:
                return bound[1]
            try:
                ref = weakref.ref(instance, lambda _r, k=id(instance): self._bound.pop(k, None))
            except TypeError:  # (an instance without __weakref__: no cache)
                return functools.partial(self, instance)
            fn = self.python_function

            def method(*args: Any, **kwargs: Any) -> Any:
                return fn(ref(), *args, **kwargs)
            functools.update_wrapper(method, fn)
            params = list(self._signature.parameters.values())[1:]
            method.__signature__ = self._signature.replace(parameters=params)
            f = Function(method, self.input_signature, self.__name__, self.reduce_retracing,
                         self._autograph)
            f._method_of = (fn, ref)
            self._bound[id(instance)] = (ref, f)
            return f

    def get_concrete_function(self, *args: Any, **kwargs: Any) -> ConcreteFunction:
        """The traced graph for these arguments (tensors or ``pg.TensorSpec``s;
        none needed when the function has an ``input_signature``), tracing it
        if needed."""
        if self.input_signature is not None and not args and not kwargs:
            if self._value_signature:
                raise TypeError(
                    f"{self.__name__}: its input_signature holds a spec of a composite value "
                    f"({self.input_signature!r}), which is traced for the values it is called "
                    "with: pass values to get_concrete_function")
            args = self.input_signature
        named = list(zip(self._arg_names(len(args)), args)) + sorted(kwargs.items())
        for arg, value in named:
            leaf = next((v for v in nest.flatten(value)
                         if getattr(v, "__pg_composite_spec__", False)), None)
            if leaf is not None:
                raise TypeError(
                    f"{self.__name__}.get_concrete_function: argument {arg!r} is {leaf!r}; a "
                    "ragged argument is traced for the row partitions of the value it is "
                    "called with, so pass a value (a pg.RaggedTensor), or put the spec in "
                    "the function's input_signature")
        return self._concrete_for(args, kwargs)[0]

    @property
    def tracing_count(self) -> int:
        """How many times the Python function has been traced."""
        return self._traces

    def experimental_get_tracing_count(self) -> int:
        return self._traces

    # ------------------------------------------------------------- lookup
    def _canonical(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        if not kwargs:
            return args, kwargs
        try:
            bound = self._signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{self.__name__}: {exc}") from None
        return bound.args, bound.kwargs

    def _concrete_for(self, args: tuple, kwargs: dict) -> tuple[ConcreteFunction, list]:
        args, kwargs = self._canonical(args, kwargs)
        if self._value_signature:
            self._check_value_signature(args, kwargs)
        elif self.input_signature is not None:
            return self._signature_call(args, kwargs)
        tensors: list = []
        leaves = []
        for a in args:
            if type(a) is Tensor:  # the common case, inline (as _leaf_key keys it)
                tensors.append(a)
                leaves.append((_T, a._dtype, a._shape))
            else:
                leaves.append(_leaf_key(a, tensors))
        key = (placement.current(), tuple(leaves),
               tuple((k, _leaf_key(kwargs[k], tensors)) for k in sorted(kwargs)) if kwargs
               else ())
        cf = self._cache.get(key)
        if cf is None:
            cf = self._find_or_trace(key, args, kwargs, tensors)
        return cf, tensors

    def _signature_call(self, args: tuple, kwargs: dict) -> tuple[ConcreteFunction, list]:
        if kwargs:
            raise TypeError(f"{self.__name__} has an input_signature: pass its arguments "
                            f"by position, got keywords {sorted(kwargs)}")
        specs = self.input_signature
        if len(args) != len(specs):
            raise TypeError(f"{self.__name__} takes {len(specs)} arguments (its "
                            f"input_signature), got {len(args)}")
        key = (placement.current(), "signature")
        cf = self._cache.get(key)
        if cf is None:
            cf = self._find_or_trace(key, specs, {}, nest.flatten(list(specs)))
        if args is specs:
            return cf, []
        tensors = []
        for name, spec, value in zip(self._arg_names(len(args)), specs, args):
            if not nest.same_structure(spec, value):
                raise TypeError(
                    f"{self.__name__}: argument {name!r} does not have the structure of "
                    f"its input_signature entry {spec!r}")
            for (path, s), v in zip(nest.flatten_with_paths(spec), nest.flatten(value)):
                tensors.append(check_argument(self.__name__, name + path, s, v, TypeError))
        return cf, tensors

    def _check_value_signature(self, args: tuple, kwargs: dict) -> None:
        specs = self.input_signature
        if kwargs or len(args) != len(specs):
            raise TypeError(f"{self.__name__} takes {len(specs)} positional arguments (its "
                            f"input_signature), got {len(args)}"
                            f"{f' and keywords {sorted(kwargs)}' if kwargs else ''}")
        for name, spec, value in zip(self._arg_names(len(args)), specs, args):
            if getattr(spec, "__pg_composite_spec__", False):
                if not spec.is_compatible_with(value):
                    raise TypeError(f"{self.__name__}: argument {name!r} is not compatible "
                                    f"with its input_signature entry {spec!r}: got {value!r}")
                continue
            if not nest.same_structure(spec, value):
                raise errors.InvalidArgumentError(
                    f"{self.__name__}: argument {name!r} does not have the structure of "
                    f"its input_signature entry {spec!r}")
            for (path, s), v in zip(nest.flatten_with_paths(spec), nest.flatten(value)):
                check_argument(self.__name__, name + path, s, v)

    def _arg_names(self, n: int) -> list[str]:
        names = [p.name for p in self._params[:n]]
        return names + [f"{self._varargs or 'args'}_{i}" for i in range(len(names), n)]

    def _find_or_trace(self, key: tuple, args: tuple, kwargs: dict,
                       tensors: list) -> ConcreteFunction:
        with self._lock:
            cf = self._cache.get(key)
            if cf is not None:
                return cf
            for k, other in self._cache.items():
                if k[0] is key[0] and _key_compatible(k[1:], key[1:]):
                    self._cache[key] = other
                    return other
            if self.reduce_retracing and self.input_signature is None:
                for k in list(self._cache):
                    general = _relax(k[1:], key[1:]) if k[0] is key[0] else None
                    if general is not None:  # trace once for both shapes
                        specs = _tensor_specs(general, [])
                        pos = [_with_specs(a, specs) for a in args]
                        kw = {n: _with_specs(kwargs[n], specs) for n in sorted(kwargs)}
                        cf = self._trace(tuple(pos), kw)
                        self._cache[(key[0],) + general] = cf
                        self._cache[key] = cf
                        return cf
            cf = self._trace(args, kwargs)
            self._cache[key] = cf
            return cf

    # ------------------------------------------------------------- tracing
    def _trace(self, args: tuple, kwargs: dict) -> ConcreteFunction:
        """Traces the body for `args`. As in TensorFlow, only the first trace
        may make variables, and one that did is traced again at once without
        making any (a body that makes a variable on every trace is a
        ValueError, one that keeps what it made in an attribute is not)."""
        first = not self._traced_once
        watch = [0, first]
        token = variables.trace_creation.set(watch)
        try:
            cf = self._trace_once(args, kwargs)
            if watch[0]:
                watch[:] = [0, False]
                cf = self._trace_once(args, kwargs)
        finally:
            variables.trace_creation.reset(token)
        self._traced_once = True
        return cf

    def _trace_once(self, args: tuple, kwargs: dict) -> ConcreteFunction:
        self._traces += 1
        graph = Graph(self.__name__)
        named = list(zip(self._arg_names(len(args)), args)) + sorted(kwargs.items())
        specs: list[tuple[str, TensorSpec]] = []
        with tracing.trace_scope(graph):
            symbolic = [(name, self._symbolic_arg(graph, name, v, specs)) for name, v in named]
            pos = [v for _, v in symbolic[:len(args)]]
            kw = dict(symbolic[len(args):])
            # Side effects of the body (print, a counter, a list it appends
            # to) happen here, once per trace, as in tf.function.
            result = self._traced_body()(*pos, **kw)
            structure = self._outputs(graph, result)
        self._log_trace(specs, named)
        given = dict(named)
        literals = {n: v for n, v in given.items()
                    if isinstance(v, (bool, int, float, str, type(None)))}
        parameters = []
        for prm in self._signature.parameters.values():
            if prm.kind in (prm.VAR_POSITIONAL, prm.VAR_KEYWORD):
                continue
            if prm.name in given:
                parameters.append((prm.name, prm.kind.name, type_text(given.pop(prm.name))))
            elif prm.default is not prm.empty:  # as TensorFlow lists them: with the default
                parameters.append((prm.name, prm.kind.name, type_text(prm.default)))
        parameters += [(n, "VAR_POSITIONAL", type_text(v)) for n, v in given.items()]
        return ConcreteFunction(graph, specs, structure, self.__name__, parameters, literals)

    def _traced_body(self) -> Callable:
        """What a trace runs: the Python function as AutoGraph converts it
        (``pluggable.autograph``), or as it is with ``autograph=False``."""
        if not self._autograph:
            return self.python_function
        from ..autograph import api
        if self._method_of is None:
            return api.convertible(self.python_function) or self.python_function
        fn, ref = self._method_of
        converted = api.convertible(fn)
        if converted is None:
            return self.python_function
        return lambda *args, **kwargs: converted(ref(), *args, **kwargs)

    def _symbolic_arg(self, graph: Graph, name: str, value: Any, specs: list) -> Any:
        def leaf(path: str, x: Any) -> Any:
            if isinstance(x, (Tensor, TensorSpec, np.ndarray)):
                spec = x if isinstance(x, TensorSpec) else TensorSpec.from_tensor(
                    convert_to_tensor(x) if isinstance(x, np.ndarray) else x)
                arg = _placeholder_name(name + path)
                node = tracing.placeholder(graph, arg, spec.dtype, spec.shape)
                specs.append((name + path, spec))
                return tracing.SymbolicTensor(node, 0)
            parts = composite_parts(x)
            if parts is not None:
                comps = [leaf(f"{path}.component{i}", c) for i, c in enumerate(parts[0])]
                return type(x).__pg_unflatten__(parts[1], comps)
            return x
        pairs = nest.flatten_with_paths(value)
        return nest.pack_as(value, [leaf(p, x) for p, x in pairs])

    def _outputs(self, graph: Graph, result: Any) -> Any:
        if result is None:
            return None
        pairs = nest.flatten_with_paths(result)
        marks: list = []   # per leaf: its graph output, None for None, or a composite
        for path, x in pairs:
            if x is None:
                marks.append(None)
                continue
            parts = composite_parts(x)
            if parts is not None:
                first = len(graph.outputs)
                for i, c in enumerate(parts[0]):
                    self._output(graph, f"{path}.component{i}", c)
                marks.append(_CompositeResult(type(x), parts[1],
                                              list(range(first, len(graph.outputs)))))
                continue
            self._output(graph, path, x)
            marks.append(len(graph.outputs) - 1)
        return nest.pack_as(result, marks)

    def _output(self, graph: Graph, path: str, x: Any) -> None:
        """Adds `x` (a tensor or a Python or numpy value) as a graph output."""
        as_tensor = getattr(x, "__pg_tensor__", None)
        if as_tensor is not None:  # a variable: its value when the graph runs
            x = as_tensor()
        if not isinstance(x, (Tensor, bool, int, float, np.ndarray, np.generic)):
            raise self._result_error(path, x)
        try:  # Python and numpy values become constants, as tf.function's do
            t = tracing.symbolic_input(graph, x, what=f"the returned value{path}")
        except (TypeError, errors.InvalidArgumentError) as exc:
            raise self._result_error(path, x, str(exc)) from None
        node = graph.add_node("Identity", [t.ref], {"T": t.dtype}, [t.dtype], [t.shape],
                              name="Identity", device=tracing.scope_name())
        graph.outputs.append((node, 0))

    def _result_error(self, path: str, x: Any, why: str = "") -> errors.InvalidArgumentError:
        kind = type(x).__name__
        if isinstance(x, (str, bytes)):
            why = "pluggable has no string dtype"
        return errors.InvalidArgumentError(
            f"pg.function {self.__name__!r}: the returned value{path} is a {kind}"
            f"{f' ({why})' if why else ''}, not a tensor: a traced function returns "
            "tensors, Python numbers and bools, numpy values, None, or nested tuples, "
            "lists and dicts of them; return other Python objects from outside the "
            "function")

    def _log_trace(self, specs: list, named: list) -> None:
        sig = ", ".join(f"{n}: {s.dtype.name}{list(s.shape) if s.shape is not None else '[?]'}"
                        for n, s in specs)
        log.info("tracing %s (trace %d) for (%s)", self.__name__, self._traces, sig)
        if self._traces > RETRACE_WARNING and not self._warned:
            self._warned = True
            log.warning(
                "%s has been traced %d times. Tracing is expensive: each new Python value, "
                "dtype or shape of an argument makes a new graph. Pass changing values as "
                "tensors, or give an input_signature with None dimensions.",
                self.__name__, self._traces)

    def pretty_printed_concrete_signatures(self, verbose: bool = True) -> str:
        """The signatures of the traced concrete functions, in trace order,
        as TensorFlow prints them (one block each, blank lines between)."""
        seen, blocks = set(), []
        for cf in self._cache.values():
            if id(cf) not in seen:
                seen.add(id(cf))
                blocks.append(cf.pretty_printed_signature(verbose))
        return "\n\n".join(blocks)

    def __repr__(self) -> str:
        return f"<pg.function {self.__name__} ({self._traces} traces)>"


def _placeholder_name(path: str) -> str:
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in path)
    return out.strip("_") or "input"


def function(func: Callable | None = None, *, input_signature: Sequence | None = None,
             name: str | None = None, reduce_retracing: bool = False,
             autograph: bool = True) -> Any:
    """Compiles a Python function into graphs (``tf.function``)::

        @pg.function
        def step(x, w):
            return pg.nn.relu(x @ w)

        @pg.function(input_signature=[pg.TensorSpec([None, 4], pg.float32)])
        def f(x): ...

    The first call for each new signature (tensor dtypes and shapes, Python
    argument values, device scope) traces `func`: its op calls are recorded
    as a graph instead of running. The graph is then placed, optimised
    (constant folding, common subexpressions, plugin optimizers) and
    compiled into a plan that later calls replay without Python. See
    ``docs/user-guide.md`` (Graph mode).

    ``reduce_retracing=True`` generalises shapes when a call needs a new
    trace that differs from an earlier one only in tensor sizes: the new
    trace has None for the sizes that differ (an unknown shape where the
    ranks differ), so later calls of other sizes reuse it.

    ``autograph=True`` (the default) converts Python ``if`` / ``while`` /
    ``for`` (and ``break``, ``continue``, ``return`` in them) on tensors into
    graph control flow by source transformation (``pg.autograph``);
    ``False`` traces the Python function as it is."""
    if func is None:
        return lambda f: Function(f, input_signature, name, reduce_retracing, autograph)
    return Function(func, input_signature, name, reduce_retracing, autograph)
