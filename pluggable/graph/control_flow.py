"""``pg.cond`` and ``pg.while_loop``: functional control flow.

Outside a traced function they are plain Python (``if`` / ``while`` on the
tensor's value). Inside one, with a symbolic predicate, they trace their
branches (loop condition and body) into functions of the graph's library
and add TensorFlow's ``StatelessIf`` / ``StatelessWhile`` node (``If`` /
``While`` where they hold stateful ops, which the graph keeps even when
their outputs are unused). Tensors of
the enclosing function that a branch reads are captured: they become extra
inputs of the node (and, for a loop, extra loop variables passed through
unchanged).
"""
from __future__ import annotations

import itertools
from typing import Any, Callable, Sequence

from ..framework import dtypes, errors, registry
from ..framework.tensor import Tensor
from . import graph_ops, nest, tensor_array, tracing
from .ir import Graph
from .tracing import SymbolicTensor

_ids = itertools.count(1)


def _function_name(outer: Graph, what: str) -> str:
    return f"{outer.name}_{what}_{next(_ids)}"


def _trace_function(outer: Graph, fn: Callable, args: list[tuple[str, Any, Any]],
                    name: str, convert_numbers: bool = True) -> tuple[Graph, Any, list]:
    """Traces `fn` into a new function graph whose inputs are `args`
    ((name, dtype, shape)); returns (graph, result structure, flat outputs)."""
    g = Graph(name, library=outer.library, outer=outer)
    with tracing.trace_scope(g):
        phs = [SymbolicTensor(tracing.placeholder(g, n, dt, sh), 0) for n, dt, sh in args]
        result = fn(*phs)
        flat = []
        for path, x in nest.flatten_with_paths(result):
            if not isinstance(x, Tensor) and not (convert_numbers and _is_number(x)):
                raise tracing.structure_error(f"{name}: the returned value{path}", x)
            flat.append(tracing.symbolic_input(g, x, what=f"{name}: output{path}"))
    g.outputs = [t.ref for t in flat]
    return g, result, flat


def _is_number(x: Any) -> bool:
    return isinstance(x, (bool, int, float)) or hasattr(x, "dtype")


def _align_captures(graphs: list[Graph], n_args: int) -> list[SymbolicTensor]:
    """Gives every graph one input per value any of them captured, in one
    order (after its `n_args` own inputs); returns the captured outer values."""
    outer: list[SymbolicTensor] = []
    for g in graphs:
        for value, _ in g.captures:
            if all(v.ref != value.ref for v in outer):
                outer.append(value)
    for g in graphs:
        own = g.inputs[:n_args]
        mine = {v.ref: ph for v, ph in g.captures}
        extra = []
        for v in outer:
            ph = mine.get(v.ref)
            if ph is None:
                ph = tracing.placeholder(g, f"capture_{v.node.name}", v.dtype, v.shape)
                g.captures.append((v, ph))
            extra.append(ph)
        g.inputs = own + extra
    return outer


def _stateful(g: Graph) -> bool:
    """Whether function graph `g` has a stateful op (a print, a variable
    update): its control-flow node is then ``If`` / ``While``, which the
    graph keeps even when its outputs are unused, as TensorFlow does."""
    for n in g.nodes:
        op = registry.OPS.get(n.op)
        if n.op in ("If", "While") or (op is not None and op.is_stateful):
            return True
    return False


def _merge_shape(a, b):
    if a is None or b is None or len(a) != len(b):
        return None
    return tuple(x if x == y else None for x, y in zip(a, b))


# ---------------------------------------------------------------------- cond

def cond(pred: Any, true_fn: Callable[[], Any], false_fn: Callable[[], Any],
         name: str | None = None) -> Any:
    """`true_fn()` if `pred` is true, else `false_fn()`.

    Eagerly (or with a Python bool) only the chosen branch runs. Inside a
    traced function with a symbolic `pred`, both branches are traced (they
    must return the same structure of tensors with the same dtypes) into a
    ``StatelessIf`` node, and only the chosen one runs each time the graph
    runs."""
    g = tracing.current_graph()
    if g is None or not isinstance(pred, SymbolicTensor):
        return true_fn() if bool(pred) else false_fn()
    p = tracing.symbolic_input(g, pred, what="cond: pred")
    base = name or "cond"
    then_g, then_res, then_out = _trace_function(g, lambda: true_fn(), [],
                                                 _function_name(g, f"{base}_true"))
    else_g, else_res, else_out = _trace_function(g, lambda: false_fn(), [],
                                                 _function_name(g, f"{base}_false"))
    _check_branches(base, then_res, then_out, else_res, else_out)
    outer = _align_captures([then_g, else_g], 0)
    ins = [tracing.symbolic_input(g, v, what="cond: captured input") for v in outer]
    g.library[then_g.name] = then_g
    g.library[else_g.name] = else_g
    out_dtypes = [t.dtype for t in then_out]
    out_shapes = [_merge_shape(a.shape, b.shape) for a, b in zip(then_out, else_out)]
    attrs = graph_ops.default_if_attrs(p.dtype, [t.dtype for t in ins], out_dtypes,
                                       then_g.name, else_g.name, out_shapes)
    op = "If" if _stateful(then_g) or _stateful(else_g) else "StatelessIf"
    node = g.add_node(op, [p.ref] + [t.ref for t in ins], attrs, out_dtypes,
                      out_shapes, name=base, device=tracing.scope_name())
    outs = [SymbolicTensor(node, i) for i in range(len(out_dtypes))]
    return nest.pack_as(then_res, outs) if then_res is not None else None


def _check_branches(name: str, a_res: Any, a_out: list, b_res: Any, b_out: list) -> None:
    if not nest.same_structure(a_res, b_res) or len(a_out) != len(b_out):
        raise errors.InvalidArgumentError(
            f"{name}: true_fn and false_fn must return the same structure; true_fn "
            f"returned {_shape_of(a_res)}, false_fn returned {_shape_of(b_res)}")
    for i, (a, b) in enumerate(zip(a_out, b_out)):
        if a.dtype is not b.dtype:
            raise errors.InvalidArgumentError(
                f"{name}: output {i} is {a.dtype.name} in true_fn but {b.dtype.name} in "
                "false_fn; both branches must return the same dtypes")


def _shape_of(x: Any) -> str:
    return repr(nest.map_structure(lambda v: type(v).__name__, x))


# ----------------------------------------------------------------- while_loop

def while_loop(cond: Callable[..., Any], body: Callable[..., Any], loop_vars: Sequence,
               shape_invariants: Sequence | None = None, name: str | None = None) -> Any:
    """Runs ``loop_vars = body(*loop_vars)`` while ``cond(*loop_vars)`` is
    true; returns the final `loop_vars` (same structure).

    Eagerly it is a Python loop. Inside a traced function (when a loop
    variable or the condition is symbolic) the condition and the body are
    traced once into a ``StatelessWhile`` node. The body must keep each loop
    variable's dtype and shape; `shape_invariants` (a structure of shapes
    like `loop_vars`, None for unknown sizes) allows shapes to change.
    A ``pg.TensorArray`` may be a loop variable (at the top level of
    `loop_vars`): its buffer is carried through the loop."""
    single = not isinstance(loop_vars, (list, tuple))
    vars_ = [loop_vars] if single else list(loop_vars)
    g = tracing.current_graph()
    if g is None:
        return _eager_loop(cond, body, vars_, single)
    arrays = {i: v for i, v in enumerate(vars_) if isinstance(v, tensor_array.TensorArray)}
    if arrays:
        return _loop_with_arrays(cond, body, vars_, arrays, single, loop_vars,
                                 shape_invariants, name)
    flat_in = [tracing.symbolic_input(g, v, what=f"while_loop: loop_vars{p}")
               for p, v in nest.flatten_with_paths(vars_)]
    shapes = _invariants(flat_in, vars_, shape_invariants)
    base = name or "while"
    args = [(f"loop_var_{i}", t.dtype, s) for i, (t, s) in enumerate(zip(flat_in, shapes))]

    def packed(fn):
        return lambda *phs: fn(*nest.pack_as(vars_, list(phs)))

    body_g, body_res, body_out = _trace_function(g, packed(body), args,
                                                 _function_name(g, f"{base}_body"))
    if len(vars_) == 1 and not isinstance(body_res, (list, tuple)):
        body_res = [body_res]
    _check_body(base, vars_, flat_in, shapes, body_res, body_out)
    cond_g, _, cond_out = _trace_function(g, packed(cond), args,
                                          _function_name(g, f"{base}_cond"))
    if len(cond_out) != 1 or cond_out[0].dtype is not dtypes.bool_ or \
            cond_out[0].shape not in ((), None):
        got = ", ".join(f"{t.dtype.name}{list(t.shape or [])}" for t in cond_out) or "nothing"
        raise errors.InvalidArgumentError(
            f"{base}: cond must return one scalar bool tensor, got {got}")
    outer = _align_captures([body_g, cond_g], len(flat_in))
    body_g.outputs = body_g.outputs + [(ph, 0) for ph in body_g.inputs[len(flat_in):]]
    captured = [tracing.symbolic_input(g, v, what="while_loop: captured input") for v in outer]
    g.library[body_g.name] = body_g
    g.library[cond_g.name] = cond_g
    all_in = flat_in + captured
    all_shapes = list(shapes) + [t.shape for t in captured]
    attrs = graph_ops.default_while_attrs([t.dtype for t in all_in], cond_g.name, body_g.name,
                                          all_shapes)
    op = "While" if _stateful(body_g) or _stateful(cond_g) else "StatelessWhile"
    node = g.add_node(op, [t.ref for t in all_in], attrs,
                      [t.dtype for t in all_in], all_shapes, name=base, device=tracing.scope_name())
    outs = [SymbolicTensor(node, i) for i in range(len(flat_in))]
    result = nest.pack_as(vars_, outs)
    return result[0] if single else type(loop_vars)(result)


def _loop_with_arrays(cond: Callable, body: Callable, vars_: list, arrays: dict,
                      single: bool, loop_vars: Any, shape_invariants: Any,
                      name: str | None) -> Any:
    """``while_loop`` where the loop variables at `arrays` (index ->
    TensorArray) are TensorArrays: the loop carries their buffers."""
    if any(a._buffer is None for a in arrays.values()):
        arrays = _probe_element_shapes(body, vars_, arrays)

    def wrap(values: list) -> list:
        return [tensor_array.with_buffer(arrays[i], x) if i in arrays else x
                for i, x in enumerate(values)]

    def unwrap(values: Any) -> Any:
        if isinstance(values, tensor_array.TensorArray):
            return values.stack()
        if not isinstance(values, (list, tuple)):
            return values
        return [v.stack() if isinstance(v, tensor_array.TensorArray) else v for v in values]

    plain = [arrays[i]._buffer if i in arrays else v for i, v in enumerate(vars_)]
    invariants = shape_invariants
    if invariants is None and any(a.dynamic_size for a in arrays.values()):
        invariants = [tensor_array.buffer_shape(arrays[i]) if i in arrays else
                      nest.map_structure(lambda x: tuple(x.shape) if isinstance(x, Tensor)
                                         else (), v)
                      for i, v in enumerate(vars_)]
    out = while_loop(lambda *xs: cond(*wrap(list(xs))),
                     lambda *xs: unwrap(body(*wrap(list(xs)))),
                     plain, invariants, name)
    out = wrap(list(out))
    return out[0] if single else type(loop_vars)(out)


def _probe_element_shapes(body: Callable, vars_: list, arrays: dict) -> dict:
    """Traces `body` once into a scratch graph to learn the element shape
    of each TensorArray that enters the loop unwritten."""
    outer = tracing.current_graph()
    scratch = Graph(f"{outer.name}_probe", library={}, outer=outer)
    with tracing.trace_scope(scratch):
        args = []
        for i, v in enumerate(vars_):
            if i in arrays:
                args.append(arrays[i])
                continue
            args.append(nest.map_structure(
                lambda x: SymbolicTensor(tracing.placeholder(
                    scratch, "probe", tracing.symbolic_input(scratch, x).dtype,
                    tracing.symbolic_input(scratch, x).shape), 0), v))
        res = body(*args)
    res = [res] if not isinstance(res, (list, tuple)) else list(res)
    found = dict(arrays)
    for i, a in arrays.items():
        if a._buffer is not None:
            continue
        after = res[i] if i < len(res) else None
        shape = getattr(after, "element_shape", None)
        if not isinstance(after, tensor_array.TensorArray) or shape is None or None in shape:
            raise errors.InvalidArgumentError(
                f"while_loop: loop variable {i} is a TensorArray that enters the loop "
                "unwritten, and the body does not write it with a known shape; give the "
                "TensorArray an element_shape")
        fresh = a._copy()
        fresh._make_buffer(shape)
        found[i] = fresh
    return found


def _eager_loop(cond: Callable, body: Callable, vars_: list, single: bool) -> Any:
    while bool(cond(*vars_)):
        new = body(*vars_)
        if len(vars_) == 1 and not isinstance(new, (list, tuple)):
            new = [new]
        if not nest.same_structure(list(new), vars_):
            raise errors.InvalidArgumentError(
                f"while_loop: body must return the structure of loop_vars "
                f"({_shape_of(vars_)}), got {_shape_of(new)}")
        vars_ = list(new)
    return vars_[0] if single else vars_


def _invariants(flat_in: list, vars_: list, given: Sequence | None) -> list:
    if given is None:
        return [t.shape for t in flat_in]
    flat = _shapes_like(vars_, list(given) if isinstance(given, (list, tuple)) else [given])
    if len(flat) != len(flat_in):
        raise errors.InvalidArgumentError(
            f"while_loop: shape_invariants has {len(flat)} shapes for {len(flat_in)} "
            "loop variables")
    return [None if s is None else tuple(s) for s in flat]


def _shapes_like(structure: Any, shapes: Any) -> list:
    """The shapes of `shapes`, a structure like `structure` whose leaves are
    shapes (tuples of sizes, None for unknown)."""
    if isinstance(structure, dict) and isinstance(shapes, dict):
        return [s for k in sorted(structure) for s in _shapes_like(structure[k], shapes[k])]
    if isinstance(structure, (list, tuple)) and isinstance(shapes, (list, tuple)) \
            and len(structure) == len(shapes):
        return [s for a, b in zip(structure, shapes) for s in _shapes_like(a, b)]
    return [shapes]


def _check_body(name: str, vars_: list, flat_in: list, shapes: list, res: Any,
                out: list) -> None:
    if not nest.same_structure(list(res) if isinstance(res, tuple) else res, vars_) \
            or len(out) != len(flat_in):
        raise errors.InvalidArgumentError(
            f"{name}: body must return the structure of loop_vars ({_shape_of(vars_)}), "
            f"got {_shape_of(res)}")
    for i, (t, o, s) in enumerate(zip(flat_in, out, shapes)):
        if o.dtype is not t.dtype:
            raise errors.InvalidArgumentError(
                f"{name}: loop variable {i} enters the loop as {t.dtype.name} but the body "
                f"returns {o.dtype.name}")
        known = getattr(o, "_shape", o.shape)   # None: an unknown rank
        ok = s is None or (known is not None and len(known) == len(s) and all(
            a is None or a == b for a, b in zip(s, known)))
        if not ok:
            raise errors.InvalidArgumentError(
                f"{name}: loop variable {i} enters the loop with shape {t.shape} but has "
                f"shape {o.shape} after one iteration; to let its shape change, pass "
                "shape_invariants with None for the sizes that vary")
