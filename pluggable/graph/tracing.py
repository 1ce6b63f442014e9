"""Tracing: op calls become graph nodes while a function is traced.

While a thread traces (``trace_scope``), the tracer's wrapper in
``runtime.hooks`` turns every op call on that thread into a node of the
graph being built and returns ``SymbolicTensor`` outputs; nothing runs. The
wrapper is installed innermost (``hooks.install(..., innermost=True)``), so
any other wrapper (a gradient tape, the profiler), whether installed before
the trace or inside the traced function, still sees each op call, with the
symbolic inputs and outputs, before the tracer records it.

Inputs that are not symbolic become ``Const`` nodes: Python values and numpy
arrays (with the dtype the op's other inputs imply, as eager calls convert
them) and eager tensors (the node keeps the tensor, so its device memory is
used without a copy when the graph runs). A symbolic tensor of an enclosing
graph (a ``pg.cond`` branch or loop body reading a value of the function
around it) is captured: it becomes an input of the inner graph.
"""
from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ..framework import dtypes, errors, registry
from ..framework.tensor import Tensor, to_array
from ..runtime import dispatch, hooks, placement
from ..ops import variables
from . import resources
from .ir import Graph, Node

# Sizes substituted for unknown dimensions when running shape functions:
# multiples of 720720 (divisible by 1..16), different in two runs, so that a
# size computed from an unknown one differs between the runs.
_PROBE_A = 720720
_PROBE_B = 720720 * 7


class _NoNumpy(errors.InvalidArgumentError, AttributeError):
    """``numpy()`` of a symbolic tensor: an InvalidArgumentError, and an
    AttributeError as TensorFlow's (its SymbolicTensor has no ``numpy``)."""


class _OutOfScope(errors.InvalidArgumentError, TypeError):
    """A symbolic tensor used outside its graph: an InvalidArgumentError, and
    a TypeError as TensorFlow's ("is out of scope and cannot be used here")."""


class SymbolicTensor(Tensor):
    """An output of a graph node while a function is traced: it has a dtype
    and a (possibly partial) shape but no value. Ops on it add nodes to the
    graph; reading its value (``numpy()``, ``bool()``, ``float()`` ...) is an
    error: use ``pg.cond`` / ``pg.while_loop`` for control flow on tensors."""

    __slots__ = ("node", "index")

    def __init__(self, node: Node, index: int):
        self.node = node
        self.index = index
        self._h = None
        self._a = None
        self._dev = None
        self._dtype = node.out_dtypes[index]
        self._shape = node.out_shapes[index]

    @property
    def name(self) -> str:
        """"node:index", as TensorFlow names graph tensors."""
        return f"{self.node.name}:{self.index}"

    @property
    def ref(self) -> tuple:
        return (self.node, self.index)

    @property
    def device(self) -> str:
        return self.node.device

    @property
    def ndim(self) -> int:
        if self._shape is None:
            raise errors.InvalidArgumentError(
                f"the rank of {self.name} is not known while tracing; give the "
                "function an input_signature with a known rank")
        return len(self._shape)

    @property
    def size(self) -> int | None:
        if self._shape is None or any(d is None for d in self._shape):
            return None
        return super().size

    def _no_value(self, what: str):
        raise errors.InvalidArgumentError(
            f"{what} of symbolic tensor {self.name} (op {self.node.op}) inside a traced "
            "pg.function: it has no value while the function is traced. Return it from "
            "the function, or use pg.cond / pg.while_loop for control flow on tensors.",
            op=self.node.op)

    def numpy(self):
        raise _NoNumpy("'SymbolicTensor' object has no attribute 'numpy': a tensor of a "
                       "traced pg.function has no value while the function is traced "
                       "(return it from the function to get its value, or use pg.cond / "
                       "pg.while_loop for control flow on tensors)")

    def _numpy(self):
        self._no_value("numpy()")

    def item(self):
        self._no_value("item()")

    def __array__(self, dtype=None, copy=None):
        self._no_value("converting to a numpy array")

    def __bool__(self):
        self._no_value("using as a Python bool (if/while/and/or)")

    def __float__(self):
        self._no_value("float()")

    def __int__(self):
        self._no_value("int()")

    def __index__(self):
        self._no_value("using as an index")

    def __len__(self) -> int:
        if not self._shape or self._shape[0] is None:
            self._no_value("len()")
        return self._shape[0]

    def __iter__(self):
        self._no_value("iterating")

    def __dlpack__(self, *a, **k):
        self._no_value("DLPack export")

    def to(self, device: Any) -> "SymbolicTensor":
        """An Identity node placed on `device` (a copy when the graph runs)."""
        with placement.device(device):
            return _traced_identity(self)

    def static_value(self) -> np.ndarray:
        """The value of a constant (a ``Const`` node), known while tracing;
        for a computed tensor, the error ``numpy()`` raises."""
        v = const_value(self)
        if v is None:
            self._no_value("reading the value")
        return v

    def __repr__(self) -> str:
        """TensorFlow's text for a graph tensor: ``<tf.Tensor 'x:0' shape=(2,) dtype=float32>``."""
        return f"<tf.Tensor '{self.name}' shape={self._shape_text()} dtype={self._dtype.name}>"

    def __str__(self) -> str:
        """``Tensor("x:0", shape=(2,), dtype=float32)``, as TensorFlow's."""
        return f'Tensor("{self.name}", shape={self._shape_text()}, dtype={self._dtype.name})'

    def _shape_text(self) -> str:
        return "<unknown>" if self._shape is None else str(self.shape)

    __format__ = object.__format__
    __hash__ = object.__hash__


def _traced_identity(t: SymbolicTensor) -> SymbolicTensor:
    return dispatch.execute(registry.OPS["Identity"], [t], {})[0]


# ----------------------------------------------------------------- trace state

_local = threading.local()
_install_lock = threading.Lock()
_tracing_threads = [0]


def current_graph() -> Graph | None:
    """The graph this thread is tracing into, or None."""
    stack = getattr(_local, "stack", None)
    return stack[-1] if stack else None


class trace_scope:
    """Makes `graph` the one this thread's op calls are recorded into."""

    def __init__(self, graph: Graph):
        self.graph = graph

    def __enter__(self) -> Graph:
        stack = getattr(_local, "stack", None)
        if stack is None:
            stack = _local.stack = []
        if not stack:
            with _install_lock:
                _tracing_threads[0] += 1
                hooks.install(_tracer, innermost=True)
        stack.append(self.graph)
        return self.graph

    def __exit__(self, *exc) -> None:
        stack = _local.stack
        stack.pop()
        if not stack:
            with _install_lock:
                _tracing_threads[0] -= 1
                if _tracing_threads[0] == 0:
                    hooks.uninstall(_tracer)


class init_scope:
    """Op calls in this block run eagerly even while a function is traced
    (state made once, at tracing: an optimizer's slot variables)."""

    def __enter__(self) -> None:
        stack = getattr(_local, "stack", None)
        self._traced = bool(stack) and stack[-1] is not None
        if self._traced:
            stack.append(None)

    def __exit__(self, *exc) -> None:
        if self._traced:
            _local.stack.pop()


variables.creation_scope[0] = init_scope


def _tracer(op, inputs: list, attrs: dict, run):
    g = current_graph()
    if g is None:
        return run(op, inputs, attrs)
    return record_call(g, op, inputs, attrs)


# ------------------------------------------------------------------- recording

def symbolic_input(g: Graph, x: Any, dtype: dtypes.DType | None = None,
                   what: str = "input") -> SymbolicTensor:
    """`x` as a symbolic tensor of graph `g`: itself, a capture of an
    enclosing graph's tensor, or a Const node (eager tensors, Python values)."""
    if isinstance(x, SymbolicTensor):
        if x.node.graph is g:
            return x
        return capture(g, x, what)
    if isinstance(x, Tensor):
        key = id(x)
        hit = g.const_cache.get(key)
        if hit is not None and hit[0] is x:
            return SymbolicTensor(hit[1], 0)
        node = g.add_node("Const", [], {"dtype": x.dtype, "value": x}, [x.dtype],
                          [tuple(x.shape)])
        g.const_cache[key] = (x, node)
        return SymbolicTensor(node, 0)
    try:
        a = to_array(x, dtype)
    except TypeError as exc:
        raise TypeError(f"{what}: {exc}") from None
    return constant(g, a)


def constant(g: Graph, a: np.ndarray, name: str = "Const") -> SymbolicTensor:
    dt = dtypes.as_dtype(a.dtype)
    a = np.asarray(a, order="C")
    node = g.add_node("Const", [], {"dtype": dt, "value": a}, [dt], [tuple(a.shape)],
                      name=name)
    return SymbolicTensor(node, 0)


def capture(g: Graph, x: SymbolicTensor, what: str) -> SymbolicTensor:
    """Makes tensor `x` of an enclosing graph an input of graph `g`."""
    chain, h = [], g
    while h is not None and h is not x.node.graph:
        chain.append(h)
        h = h.outer
    if h is None:
        raise _OutOfScope(
            f"{what}: tensor {x.name} belongs to another traced function's graph "
            "and cannot be used here; pass it as an argument instead")
    value: Any = x
    for inner in reversed(chain):  # outermost first
        for outer_value, ph in inner.captures:
            if outer_value.ref == value.ref:
                value = SymbolicTensor(ph, 0)
                break
        else:
            ph = placeholder(inner, f"capture_{x.node.name}", x.dtype, x.shape)
            inner.captures.append((value, ph))
            value = SymbolicTensor(ph, 0)
    return value


def placeholder(g: Graph, name: str, dtype: dtypes.DType, shape) -> Node:
    """Adds an input of graph `g`."""
    node = g.add_node("Placeholder", [], {"dtype": dtype, "shape": shape}, [dtype], [shape],
                      name=name)
    g.inputs.append(node)
    return node


def _convert_inputs(g: Graph, op: registry.OpDef, inputs: list, given: dict) -> list:
    args = dispatch.input_args(op, given, len(inputs))
    if len(args) != len(inputs):
        raise TypeError(f"{op.name} takes {len(args)} inputs, got {len(inputs)}")
    hints: dict = {}
    for arg, x in zip(args, inputs):
        if isinstance(x, Tensor) and arg.type_attr:
            hints.setdefault(arg.type_attr, x.dtype)
    out = []
    for arg, x in zip(args, inputs):
        dt = None if isinstance(x, Tensor) else (
            arg.dtype or given.get(arg.type_attr) or hints.get(arg.type_attr))
        as_tensor = getattr(x, "__pg_tensor__", None)
        if as_tensor is not None:  # a variable: read when the graph runs
            x = as_tensor(dt)
        t = symbolic_input(g, x, dt, f"{op.name}: input {arg.name!r}")
        if dt is None and arg.type_attr and not isinstance(x, Tensor):
            hints[arg.type_attr] = t.dtype  # the first value's dtype, as eagerly
        out.append(t)
    return out


def record_call(g: Graph, op: registry.OpDef, inputs: list, given: dict) -> list:
    """Adds a node for op `op` called on `inputs` with attributes `given`;
    returns its symbolic outputs. Attribute errors are raised now, as an
    eager call would raise them."""
    ins = _convert_inputs(g, op, inputs, given)
    attrs = dispatch.resolve_attrs(op, given, ins)
    out_dtypes = [dispatch.output_dtype(op, a, attrs) for a in op.flat_outputs(attrs)]
    shapes = resources.output_shapes(op, inputs) or infer_shapes(op, ins, attrs)
    node = g.add_node(op.name, [t.ref for t in ins], attrs, out_dtypes, shapes,
                      device=scope_name())
    resources.order(g, op, node)
    return [SymbolicTensor(node, i) for i in range(len(out_dtypes))]


def scope_name() -> str:
    """The full name of the device scope ops are traced under ("" for none)."""
    scope = placement.current()
    return scope.name if scope is not None else ""


def const_value(t: SymbolicTensor) -> np.ndarray | None:
    """The value of `t` if its node is a Const, else None."""
    node = t.node
    if node.op != "Const":
        return None
    v = node.attrs["value"]
    return v._numpy() if isinstance(v, Tensor) else v


def _run_shape_fn(op, shapes, attrs, values) -> list:
    out = op.shape_fn(shapes, attrs, values)
    # (a None size: a data-dependent dimension, as Where's number of rows)
    return [None if s is None else tuple(None if d is None else int(d) for d in s)
            for s in out]


def _probe(op, shapes, attrs, values, distinct: bool) -> list | None:
    """The op's output shapes for the two probe fillings of the unknown
    sizes, or None where the shape function refuses them."""
    probes = []
    for base in (_PROBE_A, _PROBE_B):
        k = iter(range(1, 1000))
        filled = [tuple((base * next(k) if distinct else base) if d is None else d for d in s)
                  for s in shapes]
        try:
            probes.append(_run_shape_fn(op, filled, attrs, values or None))
        except (errors.OpError, ValueError, TypeError, ArithmeticError):
            return None
    return probes


def infer_shapes(op: registry.OpDef, ins: list, attrs: dict) -> list:
    """Static output shapes: exact when the input shapes are known, partial
    (None sizes) when some are not, None (unknown rank) when the op's shape
    function cannot say. Errors for known shapes are raised as eagerly."""
    n = len(op.flat_outputs(attrs))
    if op.shape_fn is None:
        return [None] * n
    flat = [a.name for a in op.flat_inputs(attrs)]
    values = {}
    for name in op.host_value_inputs:
        v = const_value(ins[flat.index(name)])
        if v is None:
            return [None] * n
        values[name] = v
    shapes = [t.shape for t in ins]
    if any(s is None for s in shapes):
        return [None] * n
    if all(d is not None for s in shapes for d in s):
        return _run_shape_fn(op, shapes, attrs, values or None)
    # Each unknown size its own probe value; where the shape function refuses
    # that (unknown sizes that must agree: a broadcast, a batch shared by two
    # inputs), one value for all of them in each run.
    probes = _probe(op, shapes, attrs, values, True) or _probe(op, shapes, attrs, values, False)
    if probes is None:
        return [None] * n
    out = []
    for a, b in zip(*probes):
        if a is None or b is None or len(a) != len(b):
            out.append(None)
        else:
            out.append(tuple(x if x == y else None for x, y in zip(a, b)))
    return out


def structure_error(what: str, value: Any) -> errors.InvalidArgumentError:
    return errors.InvalidArgumentError(
        f"{what} is a {type(value).__name__}, not a tensor: a traced function must "
        "return tensors (or nested tuples, lists and dicts of tensors, or None); "
        "convert Python values with pg.constant")
