"""The framework's own graph passes: pruning, constant folding,
common-subexpression elimination and transpose sinking.

They run on a placed graph, before the plugin optimizers. Each takes an
``allowed(node, field)`` predicate that says whether the pass named by a
``TP_OptimizerConfigs`` field may touch a node: a plugin can turn a pass off
(or on) for the nodes placed on its device (``pipeline.pass_allowed``).
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..framework import errors, registry
from ..framework.tensor import Tensor
from ..runtime import dispatch, placement
from . import graph_ops
from .ir import Graph, Node, static_nbytes

Allowed = Callable[[Node, str], bool]

# Constant folding leaves outputs larger than this to the device.
FOLD_LIMIT_BYTES = 10 << 20
# Constants at most this large are compared by value for merging.
CSE_CONST_BYTES = 4096


def rewire(graph: Graph, mapping: dict) -> None:
    """Points every edge (and graph output) reading a key of `mapping`
    ((node, index) -> (node, index)) at its value."""
    if not mapping:
        return
    for n in graph.nodes:
        n.inputs = [mapping.get(r, r) for r in n.inputs]
    graph.outputs = [mapping.get(r, r) for r in graph.outputs]


def _stateful(node: Node) -> bool:
    if node.op in ("If", "While"):   # control flow whose functions have stateful ops
        return True
    op = registry.OPS.get(node.op)
    return op is not None and op.is_stateful


# ------------------------------------------------------------------ pruning

def prune(graph: Graph, allowed: Allowed, preserve: set[str] = frozenset()) -> int:
    """Removes nodes no output, preserved node or stateful node depends on;
    returns how many."""
    roots = [n for n, _ in graph.outputs] + list(graph.inputs)
    roots += [n for n in graph.nodes if n.name in preserve or _stateful(n)
              or not allowed(n, "disable_model_pruning")]
    keep: set[Node] = set()
    stack = list(roots)
    while stack:
        n = stack.pop()
        if n in keep:
            continue
        keep.add(n)
        stack.extend(src for src, _ in n.inputs)
        stack.extend(n.control)
    removed = len(graph.nodes) - len(keep)
    if removed:
        graph.replace_nodes([n for n in graph.nodes if n in keep])
    return removed


# --------------------------------------------------------- constant folding

def _const_tensor(node: Node) -> Tensor:
    v = node.attrs["value"]
    if isinstance(v, Tensor):
        return v
    return Tensor._from_array(np.asarray(v, order="C"), placement.CPU, node.out_dtypes[0])


def _foldable(node: Node) -> bool:
    if node.op in graph_ops.GRAPH_OPS or not node.inputs or node.control:
        return False
    op = registry.OPS.get(node.op)
    if op is None or op.is_stateful or node.assigned is None:
        return False
    if any(src.op != "Const" for src, _ in node.inputs):
        return False
    sizes = [static_nbytes(d, s) for d, s in zip(node.out_dtypes, node.out_shapes)]
    return all(s is not None and s <= FOLD_LIMIT_BYTES for s in sizes)


def run_op(op: registry.OpDef, inputs: list, attrs: dict, device: Any) -> list:
    """Runs one node's op on `device` without hooks: through the op's own
    ``run_node`` where it has one (custom ops), else through dispatch."""
    run_node = getattr(op, "run_node", None)
    if run_node is not None:
        return run_node(op, inputs, attrs, device)
    with placement.device(device):
        return dispatch.execute_unhooked(op, inputs, attrs)


def fold_constants(graph: Graph, allowed: Allowed) -> int:
    """Replaces nodes whose inputs are all constants by their values,
    computed now by the kernel the node is placed on (so the numbers are
    the ones the graph would compute); returns how many nodes were folded.
    A node whose kernel fails is left to fail when the graph runs."""
    mapping: dict = {}
    dropped: set[Node] = set()
    added: list[Node] = []
    for node in graph.topological():
        node.inputs = [mapping.get(r, r) for r in node.inputs]
        if not _foldable(node) or not allowed(node, "constant_folding"):
            continue
        ins = [_const_tensor(src) for src, _ in node.inputs]
        try:
            outs = run_op(registry.OPS[node.op], ins, dict(node.attrs), node.assigned)
        except (errors.OpError, ValueError, TypeError, ArithmeticError):
            continue
        for i, t in enumerate(outs):
            name = node.name if i == 0 else graph.unique_name(f"{node.name}/output_{i}")
            c = Node(name, "Const", [], {"dtype": t.dtype, "value": t}, [t.dtype],
                     [tuple(t.shape)], node.device)
            c.assigned = t._dev
            mapping[(node, i)] = (c, 0)
            added.append(c)
        dropped.add(node)
    if dropped:
        graph.replace_nodes([n for n in graph.nodes if n not in dropped] + added)
        rewire(graph, mapping)
    return len(dropped)


# ---------------------------------------------- common-subexpression elimination

def _hashable(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return tuple(_hashable(x) for x in v)
    if isinstance(v, np.ndarray):
        return ("array", v.dtype.str, v.shape, v.tobytes())
    if isinstance(v, Tensor):
        return ("tensor", id(v))
    if isinstance(v, dict):
        return tuple(sorted((k, _hashable(x)) for k, x in v.items()))
    return v


def _const_key(node: Node) -> Any:
    v = node.attrs["value"]
    if isinstance(v, np.ndarray) and v.nbytes <= CSE_CONST_BYTES:
        return ("Const", node.out_dtypes[0].name, v.shape, v.tobytes(), node.device)
    return ("Const", id(v))


def _key(node: Node) -> Any:
    if node.op == "Const":
        return _const_key(node)
    return (node.op, tuple((id(s), i) for s, i in node.inputs),
            tuple(id(c) for c in node.control), _hashable(node.attrs), node.device,
            id(node.assigned))


def eliminate_common_subexpressions(graph: Graph, allowed: Allowed) -> int:
    """Merges nodes that compute the same thing (same op, inputs, attributes
    and device); returns how many were removed."""
    seen: dict = {}
    mapping: dict = {}
    dropped: set[Node] = set()
    for node in graph.topological():
        node.inputs = [mapping.get(r, r) for r in node.inputs]
        if (node.op in ("Placeholder", "NoOp") or node.op in graph_ops.CONTROL_FLOW_OPS
                or _stateful(node) or not allowed(node, "common_subgraph_elimination")):
            continue
        key = _key(node)
        first = seen.get(key)
        if first is None:
            seen[key] = node
            continue
        for i in range(node.num_outputs):
            mapping[(node, i)] = (first, i)
        dropped.add(node)
    if dropped:
        graph.replace_nodes([n for n in graph.nodes if n not in dropped])
        rewire(graph, mapping)
        merged = {n: mapping[(n, 0)][0] for n in dropped if (n, 0) in mapping}
        for n in graph.nodes:
            n.control = [merged.get(c, c) for c in n.control]
    return len(dropped)


# ------------------------------------------------------------- transposes

# Ops that act element by element (with broadcasting between operands of one
# rank, which is per axis): a transpose commutes with them.
_ELEMENTWISE_UNARY = frozenset((
    "Abs", "Ceil", "Elu", "Erf", "Exp", "Floor", "Gelu", "Identity", "LeakyRelu", "Log",
    "Neg", "Reciprocal", "Relu", "Relu6", "Round", "Rsqrt", "Selu", "Sigmoid", "Sign",
    "Softplus", "Sqrt", "Square", "Tanh"))
_ELEMENTWISE_BINARY = frozenset((
    "Add", "AddV2", "Maximum", "Minimum", "Mul", "Pow", "RealDiv", "SquaredDifference", "Sub"))
_MAX_TRANSPOSE_ROUNDS = 64


def _perm(node: Node) -> list[int] | None:
    """The constant permutation of a Transpose node, else None."""
    if node.op != "Transpose" or len(node.inputs) != 2 or node.control:
        return None
    src = node.inputs[1][0]
    if src.op != "Const":
        return None
    p = [int(v) for v in np.asarray(_const_tensor(src).numpy()).ravel()]
    return p if sorted(p) == list(range(len(p))) else None


def _rank(node: Node, i: int = 0) -> int | None:
    s = node.out_shapes[i] if i < len(node.out_shapes) else None
    return None if s is None else len(s)


def sink_transposes(graph: Graph, allowed: Allowed) -> int:
    """Moves each constant Transpose below the element-wise ops that read
    it, where that removes a transpose (its only reader is the op), and drops
    a Transpose of a Transpose whose permutations cancel (or an identity
    permutation): the per-node layout changes of an imported NCHW model meet
    and vanish between the NHWC kernels. Returns how many transposes went."""
    if not any(n.op == "Transpose" for n in graph.nodes):
        return 0
    before = sum(n.op == "Transpose" for n in graph.nodes)
    controlled = {c for n in graph.nodes for c in n.control}
    for _ in range(_MAX_TRANSPOSE_ROUNDS):   # (a round moves each transpose one op down)
        if not _transpose_round(graph, allowed, controlled):
            break
    prune(graph, allowed)
    graph.replace_nodes(graph.topological())
    return before - sum(n.op == "Transpose" for n in graph.nodes)


def _transpose_round(graph: Graph, allowed: Allowed, controlled: set) -> bool:
    readers = graph.consumers()
    changed = False
    for node in graph.topological():
        if node.control or node in controlled or not allowed(node, "arithmetic_optimization"):
            continue
        done = False
        if node.op == "Transpose":
            done = _cancel(graph, node, readers)
        elif (node.op in _ELEMENTWISE_UNARY and len(node.inputs) == 1) or \
                (node.op in _ELEMENTWISE_BINARY and len(node.inputs) == 2):
            done = _sink(graph, node, readers, {n for n, _ in graph.outputs}, controlled)
        if done:
            changed = True
            readers = graph.consumers()
    return changed


def _cancel(graph: Graph, node: Node, readers: dict) -> bool:
    """Transpose(x, identity) or Transpose(Transpose(x, p), q) with q undoing p:
    the readers of `node` read x."""
    q = _perm(node)
    if q is None:
        return False
    src, idx = node.inputs[0]
    if q == list(range(len(q))):
        target = (src, idx)
    else:
        p = _perm(src)
        if p is None or len(p) != len(q) or any(p[q[j]] != j for j in range(len(q))):
            return False
        target = src.inputs[0]
    if not readers.get(node) and node not in {n for n, _ in graph.outputs}:
        return False
    rewire(graph, {(node, 0): target})
    return True


def _sink(graph: Graph, node: Node, readers: dict, outputs: set, controlled: set) -> bool:
    """op(T(a), T(b)) -> T(op(a, b)) for one permutation T, reusing a
    transpose that only `node` reads as the one after it."""
    rank = _rank(node)
    if rank is None or rank < 2 or node.num_outputs != 1:
        return False
    perm, moved, spare = None, [], None
    for pos, (src, idx) in enumerate(node.inputs):
        p = _perm(src) if idx == 0 else None
        if p is None:
            if _rank(src, idx) == 0:
                continue          # a scalar broadcasts alike in every layout
            return False
        if perm is not None and p != perm:
            return False
        if src.assigned is not node.assigned or src.out_dtypes[0] != node.out_dtypes[0] \
                or _rank(src) != rank or src in controlled:
            return False
        perm = p
        moved.append(pos)
        if spare is None and src not in outputs and \
                [r for r, _ in readers.get(src, [])] == [node] * len(readers.get(src, [])):
            spare = src
    if perm is None or spare is None:
        return False
    old_shape = node.out_shapes[0]
    inner = [None] * rank
    for i, d in enumerate(old_shape):
        inner[perm[i]] = d
    for pos in moved:
        node.inputs[pos] = node.inputs[pos][0].inputs[0]
    node.out_shapes = [tuple(inner)]
    rewire(graph, {(node, 0): (spare, 0)})
    spare.inputs = [(node, 0), spare.inputs[1]]
    spare.out_shapes = [old_shape]
    return True
