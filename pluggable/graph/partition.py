"""Plugin graph optimizers, each on the partition placed on its device.

For every plugin device that has graph optimizers
(``plugins.graph_optimizers.optimizers_for(device_type)``), the nodes placed
on it are written as a GraphDef (each NodeDef's ``device`` is the device's
full name): the constants they read are included; values they read from
other devices come in as ``Placeholder`` nodes named ``_input/<node>_<i>``.
*Fetch* nodes are those whose outputs are read outside the partition; the
nodes to *preserve* are the fetch nodes, the input placeholders, stateful
nodes, nodes that nodes outside the partition wait for and nodes that wait
for nodes outside it (control edges). A control edge from outside is left out
of the GraphDef the optimizer sees (it names no node there) and put back on
the preserved node afterwards.

The answer of ``optimizer.optimize(graph_def, fetch, preserve)`` is not
trusted. It is used only if it parses, keeps every fetch and preserved
node (fetch outputs with their dtypes, placeholders unchanged), has no
dangling input or cycle, reuses no name of a node outside the partition,
and every op in it has a kernel on the device. Otherwise (and when the
optimizer raises) the partition stays as it was, the reason is logged and
kept on the optimizer (``graph_optimizers.record_failure``): never a crash,
never a different result.
"""
from __future__ import annotations

import logging
from typing import Any

import numpy as np

from ..framework import dtypes, errors, proto, registry
from ..plugins import graph_optimizers
from ..runtime.device import Device
from . import graph_ops, graphdef, passes
from .ir import Graph, Node

log = logging.getLogger("pluggable.graph")


class Rejected(Exception):
    """An optimizer's answer cannot be used; the message says why."""


class Partition:
    """The part of a graph placed on one device, as a plugin sees it."""

    def __init__(self, graph: Graph, device: Device):
        self.graph = graph
        self.device = device
        self.members = [n for n in graph.nodes if n.assigned is device
                        and n.op not in ("Placeholder", "Const")]
        member_set = set(self.members)
        self.consts: dict[str, Node] = {}
        self.inputs: dict[str, tuple] = {}   # placeholder name -> (producer, index)
        self._names: dict[tuple, str] = {}
        taken = {n.name for n in graph.nodes}
        for n in self.members:
            for src, i in n.inputs:
                if src.op == "Const" and src.out_dtypes[0] is not dtypes.resource:
                    self.consts[src.name] = src  # (a variable's handle comes in as an input)
                elif src not in member_set and (src, i) not in self._names:
                    name = _free_name(f"_input/{src.name}_{i}", taken)
                    self._names[(src, i)] = name
                    self.inputs[name] = (src, i)
        outside: dict[Node, set[int]] = {}
        for n in graph.nodes:
            if n not in member_set:
                for src, i in n.inputs:
                    if src in member_set:
                        outside.setdefault(src, set()).add(i)
        for src, i in graph.outputs:
            if src in member_set:
                outside.setdefault(src, set()).add(i)
        self.read_outside = outside
        self.fetch = [n.name for n in self.members if n in outside]
        waited_on = {c.name for n in graph.nodes if n not in member_set
                     for c in n.control if c in member_set}
        # member name -> the nodes outside the partition it waits for (a
        # stateful node traced before, a NoOp of TensorFlow's): left out of
        # the GraphDef, put back on the node kept by name
        self.control_from_outside = {n.name: [c for c in n.control if c not in member_set]
                                     for n in self.members
                                     if any(c not in member_set for c in n.control)}
        self.preserve = sorted(set(self.fetch) | set(self.inputs) | waited_on
                               | set(self.control_from_outside)
                               | {n.name for n in self.members if passes._stateful(n)})

    def graph_def(self):
        """The partition as a GraphDef message."""
        m = proto.messages()
        gd = m.GraphDef()
        gd.versions.producer = graphdef.PRODUCER
        dev = self.device.name
        for name, (src, i) in self.inputs.items():
            nd = gd.node.add(name=name, op="Placeholder", device=src.assigned.name)
            nd.attr["dtype"].CopyFrom(graphdef.to_attr_value("type", src.out_dtypes[i]))
            nd.attr["shape"].CopyFrom(graphdef.to_attr_value("shape", src.out_shapes[i]))
        for c in self.consts.values():
            gd.node.append(graphdef._node_def(c, [], dev))
        for n in self.members:
            names = [self._names.get(r) or graphdef._graph_ref(r) for r in n.inputs]
            nd = graphdef._node_def(n, names, dev)
            outside = {f"^{c.name}" for c in self.control_from_outside.get(n.name, ())}
            if outside:  # names no node of the partition; `apply` puts it back
                kept = [ref for ref in nd.input if ref not in outside]
                del nd.input[:]
                nd.input.extend(kept)
            gd.node.append(nd)
        return gd


def _free_name(base: str, taken: set) -> str:
    name, k = base, 0
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    taken.add(name)
    return name


# ------------------------------------------------------------------ validation

def _decode(answer: Any):
    if not isinstance(answer, (bytes, bytearray, memoryview)):
        raise Rejected(f"the answer is a {type(answer).__name__}, not a serialised GraphDef")
    try:
        return proto.decode(proto.GraphDef, bytes(answer), source="the optimizer's answer")
    except errors.OpError as exc:
        raise Rejected(f"the answer does not parse: {exc.message}") from None


def _parse(part: Partition, gd) -> Graph:
    try:
        return graphdef.from_graph_def(gd, name=f"{part.graph.name} (optimised)",
                                       library=dict(part.graph.library))
    except errors.OpError as exc:
        raise Rejected(exc.message) from None


def validate(part: Partition, answer: Any) -> Graph:
    """The answer as a graph, or Rejected saying what is wrong with it."""
    g = _parse(part, _decode(answer))
    for name in part.preserve:
        if name not in g:
            raise Rejected(f"it drops node {name!r}, which must be kept (fetched or preserved)")
    for name, (src, i) in part.inputs.items():
        ph = g.get(name)
        if ph.op != "Placeholder" or ph.out_dtypes[0] is not src.out_dtypes[i]:
            raise Rejected(f"it changes the input placeholder {name!r}")
    outside = {n.name for n in part.graph.nodes} - {n.name for n in part.members}
    # A graph output the placer left where its value is made runs without a
    # kernel (placer.place): kept as it was, it needs none now either.
    passed_through = {n.name for n in part.members if n.op == "Identity" and n.kernel is None}
    for node in g.nodes:
        if node.name in outside and node.name not in part.inputs and not (
                node.op == "Const" and node.name in part.consts):
            raise Rejected(f"node {node.name!r} reuses the name of a node outside the partition")
        if node.op == "Placeholder" and node.name not in part.inputs:
            raise Rejected(f"it adds the input placeholder {node.name!r}, which nothing feeds")
        if node.op == "Identity" and node.name in passed_through:
            node.kernel = None
            continue
        _check_kernel(node, part.device)
    for old in part.members:
        if old not in part.read_outside:
            continue
        new = g.get(old.name)
        for i in part.read_outside[old]:
            if i >= new.num_outputs or new.out_dtypes[i] is not old.out_dtypes[i]:
                raise Rejected(f"fetch node {old.name!r} no longer has output {i} of dtype "
                               f"{old.out_dtypes[i].name}")
    return g


def _check_kernel(node: Node, device: Device) -> None:
    if node.op in graph_ops.GRAPH_OPS:
        if node.op in ("Const", "Placeholder", "NoOp"):
            return
        raise Rejected(f"node {node.name!r} uses {node.op}, which an optimizer may not add")
    op = registry.OPS[node.op]
    types = {k: v for k, v in node.attrs.items() if k in op.attrs and op.attrs[k].kind == "type"}
    kernel = registry.find_kernel(node.op, device.device_type, types)
    if kernel is None:
        sig = ", ".join(f"{k}={v.name}" for k, v in sorted(types.items()))
        raise Rejected(f"node {node.name!r} uses op {node.op} ({sig}), which has no kernel "
                       f"on {device.device_type}")
    node.kernel = kernel


# ---------------------------------------------------------------------- merging

def apply(part: Partition, g: Graph) -> None:
    """Replaces the partition's nodes in the main graph by those of `g`."""
    main = part.graph
    mapping: dict[Node, Any] = {}
    for node in g.nodes:
        if node.name in part.inputs:
            continue
        old_const = part.consts.get(node.name)
        if old_const is not None:
            if _same_value(old_const, node):
                mapping[node] = old_const
                continue
            node.name = main.unique_name(f"{node.name}/optimized")  # a changed constant
        node.assigned, node.device = part.device, part.device.name
        mapping[node] = node
    for node in g.nodes:
        if mapping.get(node) is node:
            node.inputs = [part.inputs[src.name] if src.name in part.inputs
                           else (mapping[src], i) for src, i in node.inputs]
            node.control = [mapping[c] for c in node.control if c in mapping]
            node.control += [c for c in part.control_from_outside.get(node.name, ())
                             if c not in node.control]
    members = set(part.members)
    new_nodes = [n for n in g.nodes if mapping.get(n) is n]
    by_name = {n.name: n for n in new_nodes}
    outside = [n for n in main.nodes if n not in members]
    for n in outside:  # control edges into the partition: to the node kept by name
        n.control = [by_name[c.name] if c in members else c for c in n.control]
    main.replace_nodes(outside + new_nodes)
    remap = {(old, i): (mapping[g.get(old.name)], i)
             for old, idx in part.read_outside.items() for i in idx}
    passes.rewire(main, remap)


def _same_value(a: Node, b: Node) -> bool:
    va, vb = a.attrs["value"], b.attrs["value"]
    va = va.numpy() if hasattr(va, "numpy") else va
    return (a.out_dtypes == b.out_dtypes and np.shape(va) == np.shape(vb)
            and np.array_equal(va, vb, equal_nan=va.dtype.kind == "f"))


def run_plugin_optimizers(graph: Graph) -> int:
    """Runs every plugin optimizer on its device's partition; returns how
    many answers were used."""
    devices = []
    for n in graph.nodes:
        if isinstance(n.assigned, Device) and n.assigned not in devices:
            devices.append(n.assigned)
    used = 0
    for dev in devices:
        for opt in graph_optimizers.optimizers_for(dev.device_type):
            part = Partition(graph, dev)
            if not part.members:
                break
            if _optimize_once(part, opt):
                used += 1
    return used


def _optimize_once(part: Partition, opt: graph_optimizers.GraphOptimizer) -> bool:
    who = opt.name or (opt.plugin.path if opt.plugin is not None else "an optimizer")
    try:
        data = proto.encode(part.graph_def())
        answer = opt.optimize(data, list(part.fetch), list(part.preserve))
        g = validate(part, answer)
    except Rejected as exc:
        reason = f"graph {part.graph.name!r} on {part.device.short_name}: {exc}"
    except Exception as exc:  # noqa: BLE001 - a plugin's failure never escapes
        reason = (f"graph {part.graph.name!r} on {part.device.short_name}: the optimizer "
                  f"failed: {type(exc).__name__}: {exc}")
    else:
        apply(part, g)
        return True
    graph_optimizers.record_failure(opt, reason)
    log.warning("graph optimizer %s was not used: %s; the unoptimised graph runs", who, reason)
    return False
