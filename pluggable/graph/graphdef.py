"""Graphs <-> TensorFlow's ``GraphDef`` (``pluggable.framework.proto``).

``to_graph_def(graph)`` writes a graph and the functions its control-flow
nodes call (the ``FunctionDefLibrary``) with TensorFlow's field numbers, so
TensorFlow reads it; ``from_graph_def(message)`` reads a GraphDef written by
TensorFlow or by pluggable back into a graph, inferring each node's output
dtypes and static shapes. Attribute values convert by the kind the op
definition gives (``type``, ``shape``, ``tensor``, ``func``, lists ...).

Inside a ``FunctionDef``, node inputs follow TensorFlow's function naming:
a function argument by its name, a node output as ``node:out_arg:index``.
"""
from __future__ import annotations

import logging
from typing import Any

import numpy as np

from ..framework import dtypes, errors, proto, registry
from ..framework.tensor import Tensor
from ..runtime import dispatch
from . import graph_ops, tracing
from .ir import Graph, Node

log = logging.getLogger("pluggable.graph")

# The GraphDef version written (TensorFlow accepts any producer down to 0).
PRODUCER = 1766

_warned_attrs: set = set()


class ImportLimits:
    """Bounds a GraphDef read here must keep, checked before anything is
    allocated for it (``pg.graph_util.set_import_limits`` changes them).

    * ``max_constant_bytes``: the bytes one tensor attribute (a ``Const``'s
      value, or a fill: one value repeated to a shape) may describe;
    * ``max_nodes``: the nodes of the graph and of each function;
    * ``max_function_depth``: how deeply functions may call functions;
      a function calling itself is refused at any depth;
    * ``max_file_bytes``: the size of a GraphDef file read from a path."""

    def __init__(self) -> None:
        self.max_constant_bytes = 1 << 30
        self.max_nodes = 1_000_000
        self.max_function_depth = 64
        self.max_file_bytes = 1 << 31


LIMITS = ImportLimits()


# =============================================================== attributes

def attr_kinds(op: str) -> dict[str, str]:
    """Attribute name -> kind for op `op` ({} when the op is unknown)."""
    g = graph_ops.GRAPH_OPS.get(op)
    if g is not None:
        return g.attr_kinds
    d = registry.OPS.get(op)
    return {n: a.kind for n, a in d.attrs.items()} if d is not None else {}


def _guess_kind(v: Any) -> str:
    if isinstance(v, dtypes.DType):
        return "type"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, np.integer)):
        return "int"
    if isinstance(v, float):
        return "float"
    if isinstance(v, (str, bytes)):
        return "string"
    if isinstance(v, (np.ndarray, Tensor)):
        return "tensor"
    if isinstance(v, (list, tuple)):
        inner = _guess_kind(v[0]) if v else "int"
        return f"list({inner})"
    raise TypeError(f"cannot write attribute value {v!r}")


def _bytes(v: Any) -> bytes:
    return v if isinstance(v, bytes) else str(v).encode()


def to_attr_value(kind: str, v: Any):
    """An ``AttrValue`` for value `v` of attribute kind `kind`."""
    m = proto.messages()
    a = m.AttrValue()
    if kind == "type":
        a.type = dtypes.as_dtype(v).enum
    elif kind == "int":
        a.i = int(v)
    elif kind == "float":
        a.f = float(v)
    elif kind == "bool":
        a.b = bool(v)
    elif kind == "string":
        a.s = _bytes(v)
    elif kind == "shape":
        a.shape.CopyFrom(proto.to_shape_proto(None if v is None else tuple(v)))
    elif kind == "tensor":
        a.tensor.CopyFrom(proto.to_tensor_proto(v._numpy() if isinstance(v, Tensor) else v))
    elif kind == "func":
        a.func.name = v
    elif kind.startswith("list("):
        a.list.SetInParent()  # an empty list is still a list value
        _to_list(a.list, kind[5:-1], v)
    else:
        raise TypeError(f"unknown attribute kind {kind!r}")
    return a


def _to_list(lst, inner: str, values: Any) -> None:
    if inner == "type":
        lst.type.extend(dtypes.as_dtype(x).enum for x in values)
    elif inner == "int":
        lst.i.extend(int(x) for x in values)
    elif inner == "float":
        lst.f.extend(float(x) for x in values)
    elif inner == "bool":
        lst.b.extend(bool(x) for x in values)
    elif inner == "string":
        lst.s.extend(_bytes(x) for x in values)
    elif inner == "shape":
        lst.shape.extend(proto.to_shape_proto(None if s is None else tuple(s)) for s in values)
    elif inner == "tensor":
        lst.tensor.extend(proto.to_tensor_proto(x) for x in values)
    elif inner == "func":
        for name in values:
            lst.func.add(name=name)
    else:
        raise TypeError(f"unknown attribute kind list({inner})")


def from_attr_value(a, kind: str | None = None) -> Any:
    """The Python value of an ``AttrValue`` (kind from the op definition when
    known, else from the field set)."""
    which = a.WhichOneof("value")
    if which == "list":
        return _from_list(a.list, kind[5:-1] if kind and kind.startswith("list(") else None)
    if which == "type":
        return proto.from_datatype(a.type)
    if which == "i":
        return int(a.i)
    if which == "f":
        return float(a.f)
    if which == "b":
        return bool(a.b)
    if which == "s":
        try:
            return a.s.decode()
        except UnicodeDecodeError:
            return bytes(a.s)
    if which == "shape":
        shape = proto.from_shape_proto(a.shape)
        return shape
    if which == "tensor":
        return _tensor(a.tensor)
    if which == "func":
        return a.func.name
    if which == "placeholder":
        raise errors.UnimplementedError(
            f"attribute placeholder {a.placeholder!r}: only function bodies use them, and "
            "pluggable reads functions without attribute placeholders")
    return None if kind is None else _empty(kind)


def _tensor(t) -> np.ndarray:
    """The array of TensorProto `t`, once its declared size is known to
    fit ``LIMITS.max_constant_bytes`` (a fill of one value may declare any
    shape)."""
    count = 1
    for d in t.tensor_shape.dim:
        count *= max(int(d.size), 0)
    size = count * max(dtypes.from_enum(t.dtype).size if t.dtype in _ENUMS else 1, 1)
    if size > LIMITS.max_constant_bytes:
        dims = [int(d.size) for d in t.tensor_shape.dim]
        raise errors.ResourceExhaustedError(
            f"a tensor attribute of shape {dims} describes {size} bytes, more than "
            f"max_constant_bytes={LIMITS.max_constant_bytes}; raise it with "
            "pg.graph_util.set_import_limits(max_constant_bytes=...) if the graph is trusted")
    return proto.from_tensor_proto(t)


_ENUMS = {d.enum for d in dtypes.ALL + dtypes.LIMITED}


def _empty(kind: str) -> Any:
    return () if kind.startswith("list(") else None


def _from_list(lst, inner: str | None) -> tuple:
    fields = {"type": lambda: tuple(proto.from_datatype(t) for t in lst.type),
              "int": lambda: tuple(int(x) for x in lst.i),
              "float": lambda: tuple(float(x) for x in lst.f),
              "bool": lambda: tuple(bool(x) for x in lst.b),
              "string": lambda: tuple(x.decode(errors="replace") for x in lst.s),
              "shape": lambda: tuple(proto.from_shape_proto(s) for s in lst.shape),
              "tensor": lambda: tuple(_tensor(t) for t in lst.tensor),
              "func": lambda: tuple(f.name for f in lst.func)}
    if inner in fields:
        return fields[inner]()
    for name, field in (("type", lst.type), ("int", lst.i), ("float", lst.f),
                        ("bool", lst.b), ("string", lst.s), ("shape", lst.shape),
                        ("tensor", lst.tensor), ("func", lst.func)):
        if len(field):
            return fields[name]()
    return ()


# ================================================================ writing

def _node_attrs(node: Node, into) -> None:
    kinds = attr_kinds(node.op)
    for name, v in node.attrs.items():
        kind = kinds.get(name) or _guess_kind(v)
        into[name].CopyFrom(to_attr_value(kind, v))


def _node_def(node: Node, input_names: list[str], device: str | None = None):
    if node.op == "Const" and node.out_dtypes[0] is dtypes.resource:
        raise errors.UnimplementedError(
            f"node {node.name!r} holds the handle of a pg.Variable the function reads or "
            "changes: a GraphDef cannot carry a live variable. To write the graph, pass the "
            "variable's value as an argument (or a pg.constant of it) instead.",
            op="Const")
    nd = proto.messages().NodeDef(name=node.name, op=node.op)
    nd.input.extend(input_names)
    nd.input.extend(f"^{c.name}" for c in node.control)
    nd.device = node.device if device is None else device
    _node_attrs(node, nd.attr)
    return nd


def _graph_ref(ref: tuple) -> str:
    node, i = ref
    return node.name if i == 0 else f"{node.name}:{i}"


def to_graph_def(graph: Graph, placed: bool = False):
    """`graph` as a ``GraphDef`` (with the library of every function its
    control-flow nodes call). `placed` writes each node's assigned device
    instead of the requested one."""
    m = proto.messages()
    gd = m.GraphDef()
    gd.versions.producer = PRODUCER
    for node in graph.nodes:
        device = node.assigned.name if placed and node.assigned is not None else None
        gd.node.append(_node_def(node, [_graph_ref(r) for r in node.inputs], device))
    for name in sorted(_called_functions(graph)):
        gd.library.function.append(to_function_def(graph.library[name]))
    return gd


def _as_graph_def(self: Graph):
    """This graph as TensorFlow's ``GraphDef`` message, with the library of
    the functions its control-flow nodes call."""
    return to_graph_def(self)


Graph.as_graph_def = _as_graph_def


def _called_functions(graph: Graph, seen: set | None = None) -> set[str]:
    seen = set() if seen is None else seen
    for node in graph.nodes:
        for name in _func_attrs(node):
            if name not in seen and name in graph.library:
                seen.add(name)
                _called_functions(graph.library[name], seen)
    return seen


def _func_attrs(node: Node) -> list[str]:
    kinds = attr_kinds(node.op)
    out = []
    for name, v in node.attrs.items():
        if kinds.get(name) == "func":
            out.append(v)
        elif kinds.get(name) == "list(func)":
            out.extend(v)
    return out


def output_arg_names(node: Node) -> list[tuple[str, int]]:
    """(output argument, index in it) of each output of `node`, as
    FunctionDef node inputs name them."""
    g = graph_ops.GRAPH_OPS.get(node.op)
    if g is not None:
        return [(g.output_arg, i) for i in range(node.num_outputs)]
    d = registry.OPS.get(node.op)
    if d is None:
        return [("output", i) for i in range(node.num_outputs)]
    out, counts = [], {}
    for a in d.flat_outputs(node.attrs):
        out.append((a.name, counts.get(a.name, 0)))
        counts[a.name] = counts.get(a.name, 0) + 1
    return out


def to_function_def(graph: Graph):
    """A function graph (inputs: its Placeholders, outputs: its outputs) as
    a ``FunctionDef`` named after the graph."""
    m = proto.messages()
    fd = m.FunctionDef()
    fd.signature.name = graph.name
    args = set(graph.inputs)
    for ph in graph.inputs:
        fd.signature.input_arg.add(name=ph.name, type=ph.out_dtypes[0].enum)

    def ref(r: tuple) -> str:
        node, i = r
        if node in args:
            return node.name
        arg, k = output_arg_names(node)[i]
        return f"{node.name}:{arg}:{k}"
    for node in graph.nodes:
        if node not in args:
            fd.node_def.append(_node_def(node, [ref(r) for r in node.inputs]))
    for i, r in enumerate(graph.outputs):
        name = f"output_{i}"
        fd.signature.output_arg.add(name=name, type=r[0].out_dtypes[r[1]].enum)
        fd.ret[name] = ref(r)
    return fd


# ================================================================ reading

class _Pending:
    """A NodeDef being read: its node and the names of its inputs."""

    __slots__ = ("node", "inputs", "control")

    def __init__(self, node: Node, inputs: list, control: list):
        self.node, self.inputs, self.control = node, inputs, control


def _read_attrs(nd) -> dict:
    kinds = attr_kinds(nd.op)
    attrs = {}
    for name, a in nd.attr.items():
        if kinds and name not in kinds:
            if not name.startswith("_") and (nd.op, name) not in _warned_attrs:
                _warned_attrs.add((nd.op, name))
                # a newer TensorFlow's attributes usually default to "off"
                which = a.WhichOneof("value")
                on = bool(getattr(a, which)) if which in ("b", "i", "f", "s") else \
                    which is not None
                level = logging.WARNING if on else logging.DEBUG
                log.log(level, "attribute %r of op %s is not in pluggable's definition of "
                        "the op; it is ignored", name, nd.op)
            continue
        try:
            attrs[name] = from_attr_value(a, kinds.get(name))
        except errors.OpError as exc:
            raise type(exc)(f"node {nd.name!r} ({nd.op}), attribute {name!r}: {exc.message}",
                            op=nd.op) from None
        except (TypeError, ValueError, KeyError, AttributeError, OverflowError,
                MemoryError) as exc:
            raise errors.InvalidArgumentError(
                f"node {nd.name!r} ({nd.op}): attribute {name!r} cannot be read "
                f"({type(exc).__name__}: {exc}); the GraphDef is corrupt", op=nd.op) from None
    return attrs


def _split_input(text: str, where: str = "graph") -> tuple[str, str | None, int, bool]:
    """"^name" -> control; "name:arg:i" (functions) or "name:i" / "name"."""
    if text.startswith("^"):
        return text[1:], None, 0, True
    parts = text.split(":")
    if len(parts) in (2, 3):
        index = parts[-1]
        if not (index.isascii() and index.isdigit()) or len(index) > 9:
            raise errors.InvalidArgumentError(
                f"{where}: input {text!r} ends in {index!r}, which is no output index "
                "(write 'node', 'node:<index>' or, in a function, 'node:<arg>:<index>')")
        return parts[0], parts[1] if len(parts) == 3 else None, int(index), False
    if len(parts) > 3:
        raise errors.InvalidArgumentError(f"{where}: input {text!r} is not a node name")
    return text, None, 0, False


def from_graph_def(gd, name: str = "graph", library: dict | None = None) -> Graph:
    """The graph a ``GraphDef`` message describes (its function library too).
    Every Placeholder becomes an input; outputs are left empty."""
    library = {} if library is None else library
    graph = Graph(name, library)
    _check_count(len(gd.node), name)
    for fd in gd.library.function:
        _check_count(len(fd.node_def), f"function {fd.signature.name!r}")
    pending = []
    for nd in gd.node:
        pending.append(_new_node(graph, nd, name))
    _link(graph, pending, name, lambda n, arg, i: (graph.get(n), i))
    _infer(graph, name)
    graph.inputs = [n for n in graph.nodes if n.op == "Placeholder"]
    for fd in gd.library.function:
        if fd.signature.name not in library:
            library[fd.signature.name] = None  # reserve: functions may call each other
    for fd in gd.library.function:
        library[fd.signature.name] = from_function_def(fd, library)
    check_call_depth(graph)
    return graph


def _check_count(n: int, where: str) -> None:
    if n > LIMITS.max_nodes:
        raise errors.ResourceExhaustedError(
            f"{where} has {n} nodes, more than max_nodes={LIMITS.max_nodes}; raise it with "
            "pg.graph_util.set_import_limits(max_nodes=...) if the graph is trusted")


def check_call_depth(graph: Graph) -> None:
    """Refuses a graph whose functions call themselves (directly or
    through others) or nest deeper than ``LIMITS.max_function_depth``."""
    depth: dict[str, int] = {}          # function -> depth of its deepest call chain

    def calls(g: Graph) -> list[tuple[Node, str]]:
        return [(n, f) for n in g.nodes for f in _func_attrs(n)]

    for root_node, root in calls(graph):
        if root in depth:
            continue
        # iterative depth-first walk; `path` is the chain of calls being followed
        path: list[str] = [root]
        stack: list[list] = [[root, None]]
        while stack:
            frame = stack[-1]
            fname = frame[0]
            g = graph.library.get(fname)
            if frame[1] is None:
                frame[1] = iter(calls(g)) if g is not None else iter(())
                frame.append(0)
            nxt = next(frame[1], None)
            if nxt is None:
                depth[fname] = frame[2] + 1
                stack.pop()
                path.pop()
                if stack:
                    stack[-1][2] = max(stack[-1][2], depth[fname])
                continue
            node, callee = nxt
            if callee in path:
                raise errors.InvalidArgumentError(
                    f"function {fname!r}: node {node.name!r} ({node.op}) calls "
                    f"{callee!r}, which is already being called "
                    f"({' -> '.join(path + [callee])}); recursive functions are not "
                    "supported", op=node.op)
            if callee in depth:
                frame[2] = max(frame[2], depth[callee])
            else:
                if len(path) >= LIMITS.max_function_depth:
                    raise errors.ResourceExhaustedError(
                        f"function {fname!r}: node {node.name!r} ({node.op}) calls "
                        f"{callee!r} at depth {len(path) + 1}, deeper than "
                        f"max_function_depth={LIMITS.max_function_depth}; raise it with "
                        "pg.graph_util.set_import_limits(max_function_depth=...)",
                        op=node.op)
                path.append(callee)
                stack.append([callee, None])
        if depth.get(root, 0) > LIMITS.max_function_depth:
            raise errors.ResourceExhaustedError(
                f"node {root_node.name!r} calls functions nested {depth[root]} deep, more "
                f"than max_function_depth={LIMITS.max_function_depth}")


def _new_node(graph: Graph, nd, where: str) -> _Pending:
    if not nd.name or not nd.op:
        raise errors.InvalidArgumentError(
            f"{where}: a NodeDef has no {'name' if not nd.name else 'op'} (node "
            f"{nd.name!r}, op {nd.op!r}); the GraphDef is corrupt")
    if nd.name in graph:
        raise errors.InvalidArgumentError(f"{where}: two nodes are named {nd.name!r}")
    node = Node(nd.name, nd.op, [], _read_attrs(nd), [], [], nd.device)
    graph.adopt(node)
    ins, ctl = [], []
    for text in nd.input:
        src, arg, i, control = _split_input(text, f"{where}: node {nd.name!r} ({nd.op})")
        (ctl if control else ins).append((src, arg, i, text))
    return _Pending(node, ins, ctl)


def _link(graph: Graph, pending: list, where: str, resolve) -> None:
    for p in pending:
        for src, arg, i, text in p.inputs:
            got = resolve(src, arg, i)
            if got is None or got[0] is None:
                raise errors.InvalidArgumentError(
                    f"{where}: node {p.node.name!r} ({p.node.op}) reads {text!r}, which "
                    "names no node of the graph (a dangling input)", op=p.node.op)
            p.node.inputs.append(got)
        for src, _, _, text in p.control:
            c = graph.get(src)
            if c is None:
                raise errors.InvalidArgumentError(
                    f"{where}: node {p.node.name!r} has control input {text!r}, which "
                    "names no node of the graph")
            p.node.control.append(c)


def _infer(graph: Graph, where: str) -> None:
    """Output dtypes and static shapes of every node, producers first."""
    for node in graph.topological():
        for src, i in node.inputs:
            if i >= src.num_outputs:
                raise errors.InvalidArgumentError(
                    f"{where}: node {node.name!r} reads output {i} of {src.name!r} "
                    f"({src.op}), which has {src.num_outputs} outputs")
        infer_node(node, where)


def infer_node(node: Node, where: str = "graph") -> None:
    """Fills node.out_dtypes and node.out_shapes from its op, attributes
    and inputs (attributes are completed with defaults and inferred types).
    Attributes of the wrong kind or missing are an InvalidArgumentError
    naming the node."""
    try:
        _infer_node(node, where)
    except errors.OpError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError, IndexError, OverflowError,
            MemoryError, ZeroDivisionError) as exc:
        raise errors.InvalidArgumentError(
            f"{where}: node {node.name!r} ({node.op}) has attributes or inputs its op "
            f"cannot take ({type(exc).__name__}: {exc}); the GraphDef is corrupt or from a "
            "writer pluggable does not understand", op=node.op) from None


def _infer_node(node: Node, where: str) -> None:
    g = graph_ops.GRAPH_OPS.get(node.op)
    if g is not None:
        _infer_graph_op(node, g)
        return
    op = registry.OPS.get(node.op)
    if op is None:
        raise errors.NotFoundError(
            f"{where}: node {node.name!r} uses op {node.op!r}, which is not registered and "
            "has no kernel on any device (built-in ops and the ops of loaded plugins are "
            "listed by `python -m pluggable ops`)", op=node.op)
    ins = [tracing.SymbolicTensor(src, i) for src, i in node.inputs]
    try:
        node.attrs = dispatch.resolve_attrs(op, node.attrs, ins)
    except (TypeError, errors.InvalidArgumentError) as exc:
        raise errors.InvalidArgumentError(f"{where}: node {node.name!r} ({node.op}): {exc}",
                                          op=node.op) from None
    node.out_dtypes = [dispatch.output_dtype(op, a, node.attrs)
                       for a in op.flat_outputs(node.attrs)]
    node.out_shapes = tracing.infer_shapes(op, ins, node.attrs)


def _infer_graph_op(node: Node, g: graph_ops.GraphOp) -> None:
    try:
        node.out_dtypes = list(g.out_dtypes(node.attrs))
    except KeyError as exc:
        raise errors.InvalidArgumentError(
            f"node {node.name!r} ({node.op}) lacks attribute {exc.args[0]!r}", op=node.op) \
            from None
    n = len(node.out_dtypes)
    if node.op == "Const":
        v = node.attrs.get("value")
        if v is None:
            raise errors.InvalidArgumentError(f"Const node {node.name!r} has no value")
        node.out_shapes = [tuple(np.shape(v))]
    elif node.op == "Placeholder":
        node.out_shapes = [node.attrs.get("shape")]
        node.attrs.setdefault("shape", None)
    elif "output_shapes" in node.attrs and len(node.attrs["output_shapes"]) == n:
        node.out_shapes = list(node.attrs["output_shapes"])
    else:
        node.out_shapes = [None] * n


def from_function_def(fd, library: dict) -> Graph:
    """A function graph from a ``FunctionDef``."""
    sig = fd.signature
    where = f"function {sig.name!r}"
    g = Graph(sig.name, library)
    for arg in sig.input_arg:
        if arg.number_attr or arg.type_list_attr or not arg.type:
            raise errors.UnimplementedError(
                f"{where}: argument {arg.name!r} is a list or has a type attribute; "
                "pluggable reads functions whose arguments have fixed types")
        dt = proto.from_datatype(arg.type)
        ph = g.add_node("Placeholder", [], {"dtype": dt, "shape": None}, [dt], [None],
                        name=arg.name)
        g.inputs.append(ph)
    args = {ph.name: ph for ph in g.inputs}
    pending = [_new_node(g, nd, where) for nd in fd.node_def]

    def resolve(name: str, arg: str | None, i: int):
        node = g.get(name)
        if node is None:
            return None
        if arg is None:
            return (node, 0 if name in args else i)
        return (node, _function_output_index(node, arg, i, where))
    _link(g, pending, where, resolve)
    _infer(g, where)
    for arg in sig.output_arg:
        text = fd.ret.get(arg.name)
        got = None if text is None else resolve(*_split_input(text, where)[:3])
        if got is None:
            raise errors.InvalidArgumentError(
                f"{where}: output {arg.name!r} reads {text!r}, which names nothing in the "
                "function")
        g.outputs.append(got)
    return g


def _function_output_index(node: Node, arg: str, k: int, where: str) -> int:
    """The flat output index of `node`'s output `arg:k` (FunctionDef naming)."""
    g = graph_ops.GRAPH_OPS.get(node.op)
    d = registry.OPS.get(node.op)
    if g is not None and arg == g.output_arg:
        return k
    if d is not None:
        for flat, (a, i) in enumerate(output_arg_names(node)):
            if a == arg and i == k:
                return flat
    if g is None and d is None:
        raise errors.NotFoundError(
            f"{where}: node {node.name!r} uses op {node.op!r}, which is not registered and "
            "has no kernel on any device", op=node.op)
    raise errors.InvalidArgumentError(
        f"{where}: node {node.name!r} ({node.op}) has no output {arg}:{k}", op=node.op)
