"""The framework's fusion pass: composite attention, layer-norm and
bias + GELU subgraphs become the fused ops ``ScaledDotProductAttention``,
``LayerNorm`` and ``BiasGelu``.

It rewrites a match only when the rewrite provably computes the same
function (up to rounding):

- every node of the match is placed on one device, and that device has a
  kernel for the fused op with the match's dtypes;
- no intermediate result of the match is read outside it (not by another
  node, not as a graph output, not through a control edge), so the nodes it
  replaces have no other use: a training step whose gradient reads the
  softmax probabilities or the normalized values keeps its composite form;
- shapes are static and fit the fused op; reductions are over the last
  axis; the scale and epsilon are scalar constants; a constant mask is
  exactly causal, a mask tensor (bool, of a shape the op accepts) is
  honoured by a select before the softmax and zeroes the rows it empties
  after it (the composite ``pg.nn.scaled_dot_product_attention`` emits).

Attention, ``[batch, heads, seq, head_dim]`` operands::

    s = BatchMatMulV2(q, k, adj_y=True) [* scale]
    s = SelectV2(allowed, s, lowest) | AddV2(s, bias)     (optional)
    p = Softmax(s) [* Cast(allowed)]
    out = BatchMatMulV2(p, v)

``allowed`` is a constant causal mask, a bool mask tensor, or the
``LogicalAnd`` of both; ``lowest`` a scalar constant at most -1e9 (or the
dtype's lowest value); ``bias`` a constant that is 0 on and below the
diagonal and at most -1e9 above it. Without the ``Cast`` multiply a mask
tensor is not fused (a row it empties would give the uniform average
instead of the fused op's zeros).

Layer norm over the last axis (``pg.nn.moments`` with
``pg.nn.batch_normalization``, or the same written out)::

    mean = Mean(x, [-1], keep_dims=True)
    var = Mean(Square(Sub(x, mean)) | SquaredDifference(x, mean), [-1], keep_dims=True)
    y = Sub(x, mean) * Rsqrt(var + epsilon) * gamma + beta   (products in any order)

with ``gamma`` and ``beta`` vectors of x's last dimension.

Bias + GELU along the last axis::

    y = Gelu(BiasAdd(x, bias) | AddV2(x, bias) | AddV2(bias, x))

with ``bias`` a vector of x's last dimension (static shapes; a BiasAdd in
NCHW layout of rank > 2 adds along another axis and is not fused), the
``approximate`` attribute kept.

The pass honours the ``remapping`` field of the plugin optimizers'
``TP_OptimizerConfigs`` (TensorFlow's fusing pass) for the device of a
match, and is turned off for graphs prepared from then on by
``pg.config.set_graph_fusion_enabled(False)`` or the environment variable
``PLUGGABLE_DISABLE_GRAPH_FUSION=1``.
"""
from __future__ import annotations

import os
from typing import Any, Callable

import numpy as np

from ..framework import dtypes, errors, registry
from ..framework.tensor import Tensor
from ..ops.transformer_ops import LOWEST_SCORE, check_attention_shapes
from .ir import Graph, Node, static_nbytes

Allowed = Callable[[Node, str], bool]
Ref = tuple

CONFIG_FIELD = "remapping"
"""The TP_OptimizerConfigs field a plugin sets OFF to keep the pass off its device."""

_enabled = [os.environ.get("PLUGGABLE_DISABLE_GRAPH_FUSION", "").strip().lower()
            not in ("1", "true", "yes", "on")]

# Constants larger than this are not read to match them.
_CONST_LIMIT_BYTES = 64 << 20
# An additive mask or select value at most this (or the dtype's lowest value)
# removes a key: exp(score + it - max) is 0 for scores of magnitude below 1e8,
# as the fused op's exclusion of the key.
_MASKED = -1e9
_FLOAT_TYPES = ("float16", "bfloat16", "float32", "float64")
_ADDS = ("Add", "AddV2")


def set_enabled(enabled: bool) -> None:
    """Turns the fusion pass on or off for graphs prepared from now on
    (a concrete function keeps the graph it has already prepared)."""
    _enabled[0] = bool(enabled)


def enabled() -> bool:
    """Whether the fusion pass runs on graphs prepared from now on."""
    return _enabled[0]


# ------------------------------------------------------------ matching helpers

class _Match:
    """The graph's consumers and outputs, to tell whether a node is read
    only inside a candidate match."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.consumers = graph.consumers()
        self.outputs = {n for n, _ in graph.outputs}
        self.controlling = {c for n in graph.nodes for c in n.control}

    def private(self, inner: set, last: Node) -> bool:
        """Whether every node of `inner` but `last` is read only by nodes of
        `inner`, none is a graph output or has control edges, and all are
        placed on `last`'s device."""
        for n in inner:
            if n.assigned is not last.assigned or n.control or n in self.controlling:
                return False
            if n is last:
                continue
            if n in self.outputs or any(c not in inner for c, _ in self.consumers.get(n, ())):
                return False
        return True


def _src(node: Node, i: int) -> Node:
    return node.inputs[i][0]


def _first_output(node: Node, i: int) -> bool:
    return node.inputs[i][1] == 0


def _const_value(node: Node) -> np.ndarray | None:
    """The value of a Const node of a numeric or bool dtype (small enough
    to read), else None."""
    if node.op != "Const" or not node.out_dtypes:
        return None
    dt = node.out_dtypes[0]
    if not (dt.is_floating or dt.is_integer or dt == dtypes.bool_):
        return None
    size = static_nbytes(dt, node.out_shapes[0]) if node.out_shapes else None
    if size is not None and size > _CONST_LIMIT_BYTES:
        return None
    v = node.attrs.get("value")
    try:
        return np.asarray(v.numpy() if isinstance(v, Tensor) else v)
    except (errors.OpError, TypeError, ValueError):
        return None


def _scalar_const(ref: Ref) -> float | None:
    node, i = ref
    if i != 0:
        return None
    v = _const_value(node)
    if v is None or v.size != 1 or v.dtype == np.bool_:
        return None
    return float(v.reshape(()))


def _static(shape: Any, rank: int | None = None) -> tuple | None:
    if shape is None or any(d is None for d in shape):
        return None
    shape = tuple(int(d) for d in shape)
    return shape if rank is None or len(shape) == rank else None


def _other(node: Node, ref: Ref) -> Ref | None:
    """The input of a binary node that is not `ref` (None if neither is)."""
    a, b = node.inputs
    if a == ref:
        return b
    if b == ref:
        return a
    return None


def _dtype(node: Node) -> dtypes.DType | None:
    t = node.attrs.get("T")
    return t if isinstance(t, dtypes.DType) and t.name in _FLOAT_TYPES else None


def _has_kernel(op: str, node: Node, type_attrs: dict) -> Any:
    dev = node.assigned
    if dev is None:
        return None
    return registry.find_kernel(op, dev.device_type, type_attrs)


def _replace(graph: Graph, last: Node, fused: Node) -> None:
    """Puts `fused` (named as `last`) where `last` was: its readers and
    the graph outputs read the fused node's first output."""
    graph.replace_nodes([n for n in graph.nodes if n is not last])
    graph.adopt(fused)
    for n in graph.nodes:
        n.inputs = [(fused, 0) if r == (last, 0) else r for r in n.inputs]
    graph.outputs = [(fused, 0) if r == (last, 0) else r for r in graph.outputs]


def _new_node(last: Node, op: str, inputs: list, attrs: dict, out_dtypes: list,
              out_shapes: list, kernel: Any) -> Node:
    fused = Node(last.name, op, inputs, attrs, out_dtypes, out_shapes, last.device)
    fused.assigned, fused.kernel = last.assigned, kernel
    fused.note = f"fused by the framework's fusion pass ({op})"
    return fused


# ------------------------------------------------------------ attention

def _is_causal(v: np.ndarray, q_len: int, k_len: int) -> bool:
    """Whether a bool array of shape [q, k] or [1, 1, q, k] is the
    lower-triangular (top-left aligned) causal mask."""
    if v.dtype != np.bool_ or v.shape not in ((q_len, k_len), (1, 1, q_len, k_len)):
        return False
    return bool(np.array_equal(v.reshape(q_len, k_len), np.tril(np.ones((q_len, k_len), bool))))


def _masked_value(x: float, t: dtypes.DType) -> bool:
    return x == -np.inf or x <= _MASKED or x <= LOWEST_SCORE[t.name]


def _causal_bias(v: np.ndarray, q_len: int, k_len: int, t: dtypes.DType) -> bool:
    """Whether a float array of shape [q, k] or [1, 1, q, k] is 0 on and
    below the diagonal and a masking value above it."""
    if v.dtype.kind != "f" or v.shape not in ((q_len, k_len), (1, 1, q_len, k_len)):
        return False
    v = v.reshape(q_len, k_len).astype(np.float64)
    tri = np.tril(np.ones((q_len, k_len), bool))
    return bool(np.all(v[tri] == 0) and np.all((v[~tri] <= max(_MASKED, LOWEST_SCORE[t.name]))
                                               | (v[~tri] == -np.inf)))


def _mask_shape_ok(shape: tuple | None, q: tuple, k: tuple) -> bool:
    if shape is None:
        return False
    return (len(shape) == 2 and shape == (q[2], k[2])) or \
        (len(shape) == 4 and shape[2:] == (q[2], k[2]) and shape[0] in (1, q[0])
         and shape[1] in (1, q[1]))


def _allowed_keys(ref: Ref, q: tuple, k: tuple):
    """(causal, mask ref or None, nodes of the mask expression) for a
    SelectV2 condition, or None when it is neither a causal constant nor
    a bool mask (nor the LogicalAnd of a causal constant and a mask)."""
    node, i = ref
    if node.out_dtypes[i] != dtypes.bool_:
        return None
    v = _const_value(node) if i == 0 else None
    if v is not None:
        if _is_causal(v, q[2], k[2]):
            return True, None, set()
        return (False, ref, set()) if _mask_shape_ok(tuple(v.shape), q, k) else None
    if node.op == "LogicalAnd" and i == 0:
        for a, b in (node.inputs, node.inputs[::-1]):
            tri = _const_value(a[0]) if a[1] == 0 else None
            if tri is not None and _is_causal(tri, q[2], k[2]) and b[0].op != "Const" \
                    and _mask_shape_ok(_static(b[0].out_shapes[b[1]]), q, k):
                return True, b, {node}
        return None
    return (False, ref, set()) if _mask_shape_ok(_static(node.out_shapes[i]), q, k) else None


def _zeroing_cast(mul: Node, p: Node, cond: Ref, t: dtypes.DType) -> set | None:
    """The nodes of `cond` cast to `t` when `mul` is p * Cast(cond) (an
    empty set when that cast was folded into a constant), else None."""
    other = _other(mul, (p, 0))
    if other is None:
        return None
    node, i = other
    if node.op == "Cast" and i == 0 and node.inputs[0] == cond and node.attrs.get("DstT") is t:
        return {node}
    c, f = _const_value(cond[0]) if cond[1] == 0 else None, _const_value(node) if i == 0 else None
    if c is not None and f is not None and f.shape == c.shape and \
            np.array_equal(f, c.astype(f.dtype)) and node.out_dtypes[0] is t:
        return set()
    return None


def _scores_input(node: Node) -> Ref | None:
    """The input of a Mul/BatchMatMulV2 computing the scores of an
    additive or select mask."""
    refs = node.inputs[1:2] if node.op == "SelectV2" else node.inputs
    return next((r for r in refs if r[0].op in ("Mul", "BatchMatMulV2") and r[1] == 0), None)


def _fuse_attention(graph: Graph, out: Node, m: _Match) -> bool:
    if out.op != "BatchMatMulV2" or out.attrs.get("adj_x") or out.attrs.get("adj_y") \
            or not _first_output(out, 0):
        return False
    t = _dtype(out)
    if t is None:
        return False
    inner = {out}
    probs, v_ref = _src(out, 0), out.inputs[1]
    zero_rows = None
    if probs.op == "Mul":   # p * Cast(allowed): a row with no allowed key gives 0
        zero_rows = probs
        probs = next((r[0] for r in probs.inputs if r[0].op == "Softmax" and r[1] == 0), None)
        if probs is None:
            return False
        inner.add(zero_rows)
    if probs.op != "Softmax" or _dtype(probs) is not t or not _first_output(probs, 0):
        return False
    inner.add(probs)
    s = _src(probs, 0)
    masking = None
    if s.op == "SelectV2" or s.op in _ADDS:
        masking = s
        ref = _scores_input(s)
        if ref is None:
            return False
        s = ref[0]
    scale = 1.0
    if s.op == "Mul":
        inner.add(s)
        mm = next((r for r in s.inputs if r[0].op == "BatchMatMulV2" and r[1] == 0), None)
        scale = None if mm is None else _scalar_const(_other(s, mm))
        if scale is None:
            return False
        s = mm[0]
    if s.op != "BatchMatMulV2" or s.attrs.get("adj_x") or not s.attrs.get("adj_y") \
            or _dtype(s) is not t:
        return False
    inner.add(s)
    q_ref, k_ref = s.inputs
    q, k, vs = (_static(r[0].out_shapes[r[1]], 4) for r in (q_ref, k_ref, v_ref))
    if q is None or k is None or vs is None or 0 in q + k + vs or \
            any(r[0].out_dtypes[r[1]] is not t for r in (q_ref, k_ref, v_ref)):
        return False
    try:
        check_attention_shapes("ScaledDotProductAttention", q, k, vs, None)
    except errors.InvalidArgumentError:
        return False
    causal, mask_ref = False, None
    if masking is not None:
        inner.add(masking)
        scores = _scores_input(masking)
        if masking.op in _ADDS:
            bias = _other(masking, scores)
            v = _const_value(bias[0]) if bias[1] == 0 else None
            if v is None or not _causal_bias(v, q[2], k[2], t):
                return False
            causal = True
        else:
            lowest = _scalar_const(masking.inputs[2])
            found = _allowed_keys(masking.inputs[0], q, k)
            if lowest is None or not _masked_value(lowest, t) or found is None:
                return False
            causal, mask_ref, mask_nodes = found
            inner |= mask_nodes
            if mask_ref is not None:   # a mask may empty a row: it must be zeroed
                cast = None if zero_rows is None else \
                    _zeroing_cast(zero_rows, probs, masking.inputs[0], t)
                if cast is None:
                    return False
                inner |= cast
                zero_rows = None
    if zero_rows is not None:      # a product the fused op would not compute
        return False
    scores_shape = (q[0], q[1], q[2], k[2])
    if _static(out.out_shapes[0]) != q or any(
            _static(n.out_shapes[0]) != scores_shape
            for n in inner if n.op in ("BatchMatMulV2", "Mul", "SelectV2", "Softmax") + _ADDS
            and n is not out):
        return False
    lse = dtypes.float64 if t == dtypes.float64 else dtypes.float32
    kernel = _has_kernel("ScaledDotProductAttention", out, {"T": t, "Tlse": lse})
    if kernel is None or not m.private(inner, out):
        return False
    masks = [] if mask_ref is None else [mask_ref]
    fused = _new_node(out, "ScaledDotProductAttention", [q_ref, k_ref, v_ref] + masks,
                      {"T": t, "Tlse": lse, "num_masks": len(masks), "causal": causal,
                       "scale": float(scale)}, [t, lse], [q, q[:3]], kernel)
    _replace(graph, out, fused)
    return True


# ------------------------------------------------------------ layer norm

def _last_axis_mean(node: Node, x_ref: Ref | None, rank: int) -> bool:
    if node.op != "Mean" or not node.attrs.get("keep_dims") or not _first_output(node, 1):
        return False
    axes = _const_value(_src(node, 1))
    if axes is None or axes.dtype.kind not in "iu" or axes.size != 1:
        return False
    if int(axes.reshape(())) not in (-1, rank - 1):
        return False
    return x_ref is None or node.inputs[0] == x_ref


def _product_leaves(node: Node, inner: set, depth: int = 2) -> list:
    """The factors of a tree of Mul nodes (at most `depth` deep), adding
    the Mul nodes to `inner`."""
    if node.op != "Mul" or depth < 0:
        return []
    inner.add(node)
    leaves = []
    for ref in node.inputs:
        if ref[0].op == "Mul" and ref[1] == 0 and depth > 0:
            leaves += _product_leaves(ref[0], inner, depth - 1)
        else:
            leaves.append(ref)
    return leaves


def _fuse_layer_norm(graph: Graph, out: Node, m: _Match) -> bool:
    if out.op not in _ADDS:
        return False
    t = _dtype(out)
    if t is None:
        return False
    for prod_ref, beta_ref in (out.inputs, out.inputs[::-1]):
        if prod_ref[0].op == "Mul" and prod_ref[1] == 0 and \
                _try_layer_norm(graph, out, prod_ref[0], beta_ref, t, m):
            return True
    return False


def _try_layer_norm(graph: Graph, out: Node, prod: Node, beta_ref: Ref, t: dtypes.DType,
                    m: _Match) -> bool:
    inner = {out}
    leaves = _product_leaves(prod, inner)
    if len(leaves) != 3:
        return False
    inv = next((r for r in leaves if r[0].op == "Rsqrt" and r[1] == 0), None)
    centred = next((r for r in leaves if r[0].op == "Sub" and r[1] == 0), None)
    if inv is None or centred is None:
        return False
    gamma_ref = next(r for r in leaves if r is not inv and r is not centred)
    if gamma_ref is inv or gamma_ref is centred:
        return False
    d2 = centred[0]
    x_ref, mean_ref = d2.inputs
    xs = _static(x_ref[0].out_shapes[x_ref[1]])
    if xs is None or len(xs) < 1 or 0 in xs or mean_ref[1] != 0:
        return False
    rank, c = len(xs), xs[-1]
    mean = mean_ref[0]
    if not _last_axis_mean(mean, x_ref, rank):
        return False
    add_eps = _src(inv[0], 0)
    if add_eps.op not in _ADDS:
        return False
    var = next((r[0] for r in add_eps.inputs if r[0].op == "Mean" and r[1] == 0), None)
    if var is None or not _last_axis_mean(var, None, rank):
        return False
    eps = _scalar_const(_other(add_eps, (var, 0)))
    if eps is None or not eps >= 0:
        return False
    sq = _src(var, 0)
    if sq.op == "Square" and sq.inputs[0][0].op == "Sub":
        d1 = _src(sq, 0)
        if d1.inputs != [x_ref, mean_ref]:
            return False
        nodes = {sq, d1}
    elif sq.op == "SquaredDifference" and set(sq.inputs) == {x_ref, mean_ref}:
        nodes = {sq}
    else:
        return False
    inner |= nodes | {d2, mean, var, add_eps, inv[0]}
    stats = xs[:-1] + (1,)
    for n in inner:
        if n.out_dtypes[0] is not t or _static(n.out_shapes[0]) != \
                (stats if n in (mean, var, add_eps, inv[0]) else xs):
            return False
    for r in (gamma_ref, beta_ref):
        if r[0] in inner or r[0].out_dtypes[r[1]] is not t or \
                _static(r[0].out_shapes[r[1]]) != (c,):
            return False
    u = dtypes.float64 if t == dtypes.float64 else dtypes.float32
    kernel = _has_kernel("LayerNorm", out, {"T": t, "U": u})
    if kernel is None or not m.private(inner, out):
        return False
    fused = _new_node(out, "LayerNorm", [x_ref, gamma_ref, beta_ref],
                      {"T": t, "U": u, "epsilon": eps}, [t, u, u],
                      [xs, xs[:-1], xs[:-1]], kernel)
    _replace(graph, out, fused)
    return True


# ------------------------------------------------------------ bias + gelu

def _bias_along_last_axis(add: Node) -> tuple | None:
    """(x ref, bias ref, x's shape) when `add` adds a vector of x's last
    dimension along that axis, x keeping its static shape; else None."""
    out = _static(add.out_shapes[0]) if add.out_shapes else None
    if out is None or len(out) < 1 or 0 in out:
        return None
    if add.op == "BiasAdd":
        if add.attrs.get("data_format", "NHWC") == "NCHW" and len(out) > 2:
            return None
        orders = [add.inputs]
    else:
        orders = [add.inputs, add.inputs[::-1]]
    for x_ref, b_ref in orders:
        xs = _static(x_ref[0].out_shapes[x_ref[1]])
        bs = _static(b_ref[0].out_shapes[b_ref[1]])
        if xs == out and bs == (out[-1],):
            return x_ref, b_ref, out
    return None


def _fuse_bias_gelu(graph: Graph, gelu: Node, m: _Match) -> bool:
    if gelu.op != "Gelu" or not _first_output(gelu, 0):
        return False
    t = _dtype(gelu)
    add = _src(gelu, 0)
    if t is None or add.op not in ("BiasAdd",) + _ADDS or _dtype(add) is not t:
        return False
    found = _bias_along_last_axis(add)
    if found is None:
        return False
    x_ref, b_ref, xs = found
    if any(r[0].out_dtypes[r[1]] is not t for r in (x_ref, b_ref)) or \
            _static(gelu.out_shapes[0]) != xs:
        return False
    kernel = _has_kernel("BiasGelu", gelu, {"T": t})
    if kernel is None or not m.private({add, gelu}, gelu):
        return False
    fused = _new_node(gelu, "BiasGelu", [x_ref, b_ref],
                      {"T": t, "approximate": bool(gelu.attrs.get("approximate", False))},
                      [t], [xs], kernel)
    _replace(graph, gelu, fused)
    return True


# ------------------------------------------------------------ the pass

def fuse(graph: Graph, allowed: Allowed) -> int:
    """Rewrites every provably equivalent attention, layer-norm and
    bias + GELU match
    (see the module docstring); returns how many. The nodes a rewrite
    replaces are left unread, for pruning to remove."""
    if not _enabled[0]:
        return 0
    count, m = 0, _Match(graph)
    for node in graph.topological():
        if node.op not in ("BatchMatMulV2", "Gelu") + _ADDS or \
                graph.get(node.name) is not node or not allowed(node, CONFIG_FIELD):
            continue
        if _fuse_attention(graph, node, m) or _fuse_layer_norm(graph, node, m) or \
                _fuse_bias_gelu(graph, node, m):
            count += 1
            m = _Match(graph)
    return count
