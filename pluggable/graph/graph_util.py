"""Frozen graphs: ``pg.graph_util.import_graph_def`` and ``write_graph_def``.

A frozen GraphDef holds its weights as ``Const`` nodes and takes its inputs
through ``Placeholder`` nodes, as TensorFlow's
``convert_variables_to_constants_v2`` writes it, or as a ``pg.function``
traced with its weights captured writes it. Importing one gives a callable
from feeds to fetches that is placed, optimised and planned exactly like a
traced function.
"""
from __future__ import annotations

import os
import stat
from typing import Any, Sequence

from ..framework import errors, proto, registry
from ..runtime import placement
from . import graph_ops, graphdef
from .function import ConcreteFunction, TensorSpec
from .ir import Graph, Node


class ImportedGraph:
    """A loaded frozen graph: call it with its inputs (by position, in
    ``input_names`` order, or by placeholder name as keywords) to get its
    outputs (one tensor, or a list when it has several). Nodes that name no
    device go to the device scope of the call (``with pg.device(...)``), or
    are placed automatically."""

    def __init__(self, graph: Graph, inputs: list[Node], outputs: list[tuple], name: str):
        graph.inputs = inputs
        graph.outputs = outputs
        self._specs = [(n.name, TensorSpec(n.attrs.get("shape"), n.out_dtypes[0]))
                       for n in inputs]
        self._structure = 0 if len(outputs) == 1 else list(range(len(outputs)))
        self.name = name
        self.graph = graph
        self.input_names = [n.name for n in inputs]
        self.output_names = [graphdef._graph_ref(r) for r in outputs]
        self._by_scope: dict = {}
        self.concrete_function = self._for_scope(None)

    def _for_scope(self, scope: Any) -> ConcreteFunction:
        cf = self._by_scope.get(scope)
        if cf is None:
            g = self.graph
            if scope is not None:
                g = self.graph.copy()
                for n in g.nodes:
                    if not n.device:
                        n.device = scope.name
            cf = self._by_scope[scope] = ConcreteFunction(g, self._specs, self._structure,
                                                          self.name)
        return cf

    @property
    def input_specs(self) -> list[TensorSpec]:
        return list(self.concrete_function.input_specs)

    def __call__(self, *args: Any, **feeds: Any) -> Any:
        if feeds:
            unknown = sorted(set(feeds) - set(self.input_names))
            if unknown:
                raise errors.InvalidArgumentError(
                    f"{self.name}: no input named {', '.join(unknown)}; "
                    f"the inputs are {', '.join(self.input_names)}")
            named = dict(zip(self.input_names, args))
            named.update(feeds)
            missing = [n for n in self.input_names if n not in named]
            if missing:
                raise errors.InvalidArgumentError(
                    f"{self.name}: inputs {', '.join(missing)} are not fed")
            args = tuple(named[n] for n in self.input_names)
        if len(args) != len(self.input_names):
            raise errors.InvalidArgumentError(
                f"{self.name} takes {len(self.input_names)} inputs "
                f"({', '.join(self.input_names)}), got {len(args)}")
        cf = self._for_scope(placement.current())
        return cf._call_flat(cf._check_inputs(list(args)))

    def __repr__(self) -> str:
        return (f"<ImportedGraph {self.name}: "
                f"({', '.join(self.input_names)}) -> ({', '.join(self.output_names)})>")


def set_import_limits(max_constant_bytes: int | None = None, max_nodes: int | None = None,
                      max_function_depth: int | None = None,
                      max_file_bytes: int | None = None) -> dict:
    """Changes the bounds ``import_graph_def`` checks before it allocates
    anything for a GraphDef (None keeps a bound); returns the previous
    values, which can be passed back as keywords.

    * `max_constant_bytes` (1 GiB): bytes one tensor attribute (a Const's
      value, or a fill of one value to a shape) may describe;
    * `max_nodes` (10^6): nodes of the graph and of each function;
    * `max_function_depth` (64): how deeply functions may call functions
      (a function calling itself is always refused);
    * `max_file_bytes` (2 GiB): the size of a GraphDef file read from a path.

    A graph past a bound is a ResourceExhaustedError naming the node and
    the setting."""
    limits = graphdef.LIMITS
    old = dict(vars(limits))
    for key, value in (("max_constant_bytes", max_constant_bytes), ("max_nodes", max_nodes),
                       ("max_function_depth", max_function_depth),
                       ("max_file_bytes", max_file_bytes)):
        if value is not None:
            if type(value) is not int or value < 0:
                raise errors.InvalidArgumentError(
                    f"set_import_limits: {key} must be a non-negative int, got {value!r}")
            setattr(limits, key, value)
    return old


def _read_file(path: str) -> bytes:
    """The bytes of GraphDef file `path`: a regular file (opened without
    blocking, so a FIFO never hangs) of at most ``max_file_bytes``."""
    limit = graphdef.LIMITS.max_file_bytes
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise errors.NotFoundError(f"cannot read the GraphDef file {path!r}: "
                                   f"{exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise errors.InvalidArgumentError(
                f"the GraphDef file {path!r} is not a regular file; give the path of a "
                "binary GraphDef (.pb) file")
        if st.st_size > limit:
            raise errors.ResourceExhaustedError(
                f"the GraphDef file {path!r} holds {st.st_size} bytes, more than "
                f"max_file_bytes={limit}; raise it with "
                "pg.graph_util.set_import_limits(max_file_bytes=...) if the file is trusted")
        chunks, left = [], st.st_size + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 24))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > limit:
            raise errors.ResourceExhaustedError(
                f"the GraphDef file {path!r} grew past max_file_bytes={limit} while read")
        return data
    except OSError as exc:
        raise errors.DataLossError(f"cannot read the GraphDef file {path!r}: "
                                   f"{exc.strerror or exc}") from None
    finally:
        os.close(fd)


def _load(graph_def_or_path: Any):
    if isinstance(graph_def_or_path, (str, os.PathLike)):
        path = os.fspath(graph_def_or_path)
        return _decode(_read_file(path), path)
    if isinstance(graph_def_or_path, (bytes, bytearray, memoryview)):
        return _decode(bytes(graph_def_or_path), "the given bytes")
    if hasattr(graph_def_or_path, "SerializeToString"):  # ours, or TensorFlow's class
        if type(graph_def_or_path) is proto.GraphDef:
            return graph_def_or_path
        return _decode(graph_def_or_path.SerializeToString(), "the given GraphDef")
    raise TypeError(f"import_graph_def needs a GraphDef, its bytes or a file path, got "
                    f"{type(graph_def_or_path).__name__}")


def _decode(data: bytes, source: str):
    try:
        return proto.decode(proto.GraphDef, data, source=source, strict=True)
    except errors.DataLossError as strict_error:
        gd = proto.decode(proto.GraphDef, data, source=source)
        if not len(gd.node) or any(not n.name or not n.op for n in gd.node):
            raise strict_error from None
        return gd  # a newer writer's extra fields


def _check_kernels(graph: Graph, seen: set) -> None:
    """Every op node has a kernel on some device (for its type attributes)."""
    for node in graph.nodes:
        if node.op in graph_ops.GRAPH_OPS:
            continue
        op = registry.OPS[node.op]
        types = {k: v for k, v in node.attrs.items() if k in op.attrs and op.attrs[k].is_type}
        if not any(k.matches(types) for (name, _), ks in registry.KERNELS.items()
                   if name == node.op for k in ks):
            sig = ", ".join(f"{k}={v.name}" for k, v in sorted(types.items()))
            raise errors.NotFoundError(
                f"node {node.name!r} of {graph.name!r} uses op {node.op} ({sig}), which has "
                f"no kernel on any device; registered kernels: "
                f"{registry.describe_kernels(node.op)}", op=node.op)
    for name in graphdef._called_functions(graph):
        if name not in seen:
            seen.add(name)
            _check_kernels(graph.library[name], seen)


_WHILE_OPS = ("While", "StatelessWhile")


def _check_while_predicates(graph: Graph) -> None:
    """The condition of every While loop returns one scalar (TensorFlow's
    rule); a shape known only at run time is checked at the first iteration."""
    graphs = [graph] + [graph.library[n] for n in sorted(graphdef._called_functions(graph))]
    for g in graphs:
        for node in g.nodes:
            if node.op not in _WHILE_OPS:
                continue
            cond = graph.library.get(node.attrs.get("cond"))
            if cond is None:
                raise errors.NotFoundError(
                    f"node {node.name!r} ({node.op}) of {g.name!r} calls condition "
                    f"{node.attrs.get('cond')!r}, which is not in the function library",
                    op=node.op)
            outs = cond.outputs
            shape = outs[0][0].out_shapes[outs[0][1]] if len(outs) == 1 else None
            if len(outs) != 1 or (shape is not None and shape != ()):
                raise errors.InvalidArgumentError(
                    f"node {node.name!r} ({node.op}) of {g.name!r}: its condition "
                    f"{cond.name!r} returns {len(outs)} outputs"
                    + (f" of shape {list(shape)}" if shape is not None else "")
                    + "; a While condition must return one scalar", op=node.op)


def _fetch(graph: Graph, name: str) -> tuple:
    node_name, _, index = name.partition(":")
    node = graph.get(node_name)
    if node is None or (index and not index.isdigit()):
        raise errors.NotFoundError(f"output {name!r} names no node of the graph")
    i = int(index or 0)
    if i >= node.num_outputs:
        raise errors.NotFoundError(f"output {name!r}: node {node_name!r} ({node.op}) has "
                                   f"{node.num_outputs} outputs")
    return (node, i)


def _default_outputs(graph: Graph) -> list[tuple]:
    read = {src for n in graph.nodes for src, _ in n.inputs}
    return [(n, i) for n in graph.nodes if n not in read and n.num_outputs
            and n.op not in ("Placeholder", "Const") for i in range(n.num_outputs)]


def _needed_inputs(graph: Graph, outputs: list[tuple]) -> list[Node]:
    seen, stack = set(), [n for n, _ in outputs]
    while stack:
        n = stack.pop()
        if n not in seen:
            seen.add(n)
            stack.extend(src for src, _ in n.inputs)
            stack.extend(n.control)
    return [n for n in graph.nodes if n.op == "Placeholder" and n in seen]


def import_graph_def(graph_def_or_path: Any, inputs: Sequence[str] | None = None,
                     outputs: Sequence[str] | None = None,
                     name: str = "imported") -> ImportedGraph:
    """Loads a frozen GraphDef (a message, its serialised bytes or a file
    path) as a callable from feeds to fetches.

    `inputs` names the Placeholder nodes to feed, in call order (default:
    those the outputs need, in graph order); `outputs` names the fetched
    tensors as "node" or "node:index" (default: every output of the nodes
    nothing reads). The graph is placed and optimised like a traced function
    on its first call. A file that does not parse is a DataLossError; an op
    that no device implements is a NotFoundError naming the node and op."""
    gd = _load(graph_def_or_path)
    try:
        return _import(gd, inputs, outputs, name)
    except errors.PluggableError:
        raise
    except RecursionError:
        raise errors.ResourceExhaustedError(
            f"{name}: the GraphDef nests too deeply to be read (lower its depth, or "
            "check pg.graph_util.set_import_limits(max_function_depth=...))") from None
    except (TypeError, ValueError, KeyError, AttributeError, IndexError, OverflowError,
            MemoryError) as exc:
        raise errors.InvalidArgumentError(
            f"{name}: the GraphDef cannot be imported ({type(exc).__name__}: {exc}); it is "
            "corrupt or from a writer pluggable does not understand") from None


def _import(gd, inputs, outputs, name: str) -> ImportedGraph:
    graph = graphdef.from_graph_def(gd, name=name)
    _check_kernels(graph, set())
    _check_while_predicates(graph)
    outs = [_fetch(graph, o) for o in outputs] if outputs is not None \
        else _default_outputs(graph)
    if not outs:
        raise errors.InvalidArgumentError(f"{name}: the graph has no output to fetch")
    if inputs is None:
        ins = _needed_inputs(graph, outs)
    else:
        ins = []
        for n in inputs:
            node = graph.get(n.partition(":")[0])
            if node is None or node.op != "Placeholder":
                raise errors.NotFoundError(f"input {n!r} names no Placeholder of the graph")
            ins.append(node)
    return ImportedGraph(graph, ins, outs, name)


def write_graph_def(graph: Any, path: str | os.PathLike) -> None:
    """Writes a ``pg.function``'s concrete function, a graph or a GraphDef
    message to `path` as a binary GraphDef (what ``import_graph_def`` and
    TensorFlow read)."""
    if isinstance(graph, ConcreteFunction):
        graph = graph.graph
    gd = graph.as_graph_def() if isinstance(graph, Graph) else graph
    with open(os.fspath(path), "wb") as f:
        f.write(proto.encode(gd))
