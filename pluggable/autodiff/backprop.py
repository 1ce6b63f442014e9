"""The backward pass over a tape's records.

Records are in execution order, so walking them backwards visits every
consumer of a tensor before its producer: when a record is reached, the
gradients of its outputs are complete. Only records on a path from a source
run their gradient function, each on the device of its forward op; the
contributions to a tensor are summed.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..framework import dtypes, errors, registry
from ..framework.tensor import Tensor
from ..ops import math_ops, raw_ops
from ..ops.variables import Variable
from ..runtime import placement
from ..runtime.tensors import convert_to_tensor

# ------------------------------------------------------------ nested values


def flatten(structure: Any) -> list:
    """The leaves of nested lists, tuples and dicts (dicts in key order)."""
    if isinstance(structure, dict):
        return [x for k in sorted(structure) for x in flatten(structure[k])]
    if isinstance(structure, (list, tuple)):
        return [x for s in structure for x in flatten(s)]
    return [structure]


def pack_like(structure: Any, flat: list) -> Any:
    """`flat` (from ``flatten``) in the nesting of `structure`."""
    it = iter(flat)

    def build(s):
        if isinstance(s, dict):
            out = {k: build(s[k]) for k in sorted(s)}
            return type(s)((k, out[k]) for k in s) if type(s) is not dict else \
                {k: out[k] for k in s}
        if isinstance(s, (list, tuple)):
            items = [build(x) for x in s]
            return type(s)(*items) if hasattr(s, "_fields") else type(s)(items)
        return next(it)
    return build(structure)


# ------------------------------------------------------------------ helpers

def _key(x: Any) -> int:
    """The id under which a tape knows `x` (a variable: its handle)."""
    return id(x.handle if isinstance(x, Variable) else x)


def device_of(t: Tensor) -> Any:
    """The device `t` is on; for a tensor traced in a ``pg.function``, the
    device scope it was traced under (None: placed when the graph runs), so
    its gradient is traced under the same scope."""
    if t._dev is not None:
        return t._dev
    name = getattr(t, "device", "")
    return placement.get_device(name) if name else None


def device_name(dev: Any) -> str:
    return dev.short_name if dev is not None else "the device the graph places it on"


def _info(x: Any) -> tuple:
    """(shape, dtype, device) of a tensor or of a variable's value."""
    if isinstance(x, Variable):
        return x.shape, x.dtype, x.device_object
    return x.shape, x.dtype, device_of(x)


def filled(shape: tuple, dtype, device, value: float) -> Tensor:
    """A tensor of `shape` full of `value`, made on `device` (op Fill, with
    its dims and value as ``math_ops.fill`` passes them: cached, so the
    call takes the raw_ops fast path)."""
    with placement.device(device):
        return math_ops.fill([int(d) for d in shape], np.asarray(value, dtype.as_numpy_dtype))


def _add_all(grads: list) -> Tensor:
    total = grads[0]
    for g in grads[1:]:
        total = raw_ops.AddV2(x=total, y=g)
    return total


def _no_gradient(call) -> errors.NotFoundError:
    op = call.type
    shapes = ", ".join(f"{x.dtype.name}{list(x.shape)}" for x in call.inputs)
    return errors.NotFoundError(
        f"gradient registry has no entry for: {op} (the op ran on "
        f"{device_name(call.device)} with inputs {shapes}, and a gradient must flow "
        "through it). Register its "
        f"gradient with @pg.RegisterGradient({op!r}), or pg.NotDifferentiable({op!r}) if "
        "no gradient flows through it.", op=op,
        device=call.device.name if call.device is not None else "")


def _check(call, i: int, x: Tensor, g: Any) -> None:
    """A gradient function's result for input `i` must match the input."""
    if type(g) is Tensor and type(x) is Tensor and g._dtype is x._dtype \
            and g._shape == x._shape:
        return  # (eager tensors that match: the common case)
    if not isinstance(g, Tensor):
        raise TypeError(f"the gradient function of {call.type} returned "
                        f"{type(g).__name__} for input {i}; expected a Tensor or None")
    if x.dtype is not dtypes.resource and (g.shape != x.shape or g.dtype is not x.dtype):
        raise errors.InternalError(
            f"the gradient function of {call.type} returned a {g.dtype.name} gradient of "
            f"shape {list(g.shape)} for input {i} ({call.op_def.inputs[i].name}), which is "
            f"{x.dtype.name} of shape {list(x.shape)}", op=call.type)


def _static_shapes(call) -> None:
    """Gradient functions compute with static shapes: inside a traced
    function, every input and output of a record must have a known shape."""
    for what, ts in (("input", call.inputs), ("output", call.outputs)):
        for i, t in enumerate(ts):
            shape = t.shape
            if shape is None or any(d is None for d in shape):
                raise errors.UnimplementedError(
                    f"the gradient of {call.type} is traced with static shapes, but its "
                    f"{what} {i} has shape {'<unknown>' if shape is None else list(shape)} "
                    "inside this pg.function: trace it for full shapes (no input_signature, "
                    "or one without None sizes)", op=call.type)


_scope_set = placement._scope.set
_scope_reset = placement._scope.reset


def _input_grads(call, out_grads: list) -> list:
    """Runs the gradient function of a record on its device."""
    fn = call.op_def.gradient
    if fn is None:
        raise _no_gradient(call)
    if call.outputs[0]._dev is None:  # traced
        _static_shapes(call)
    if not getattr(fn, "_pg_accepts_none", False):
        out_grads = [g if g is not None or not (o.dtype.is_floating or o.dtype.is_complex)
                     else filled(o.shape, o.dtype, device_of(o), 0)
                     for g, o in zip(out_grads, call.outputs)]
    token = _scope_set(call.device)  # (placement.device's scope, without the object)
    try:
        res = fn(call, *out_grads)
    finally:
        _scope_reset(token)
    if isinstance(res, Tensor) or res is None:
        res = [res]
    res = list(res)
    if len(res) != len(call.inputs):
        raise errors.InternalError(
            f"the gradient function of {call.type} returned {len(res)} gradients for "
            f"{len(call.inputs)} inputs", op=call.type)
    return res


def _final_at(useful: list, source_keys: list) -> tuple[dict, list]:
    """For ``backward``'s `on_final`: maps id(record) to the source keys
    whose gradient is final once that record is processed (the first record
    that uses them: the backward pass reaches it last), and lists the keys
    final from the start (never used: seeded, or without a gradient)."""
    first: dict = {}
    keys = set(source_keys)
    for call in useful:
        for x in call.inputs:
            if id(x) in keys and id(x) not in first:
                first[id(x)] = call
    at: dict = {}
    for k, call in first.items():
        at.setdefault(id(call), []).append(k)
    return at, [k for k in dict.fromkeys(source_keys) if k not in first]


def _deliver(keys: list, pending: dict, on_final) -> None:
    """Sums the contributions of each key now (the same sum ``backward``
    returns) and hands it to `on_final` (None: the key gets no gradient)."""
    for k in keys:
        if pending.get(k):
            total = pending[k] = [_add_all(pending[k])]
            on_final(k, total[0])
        else:
            on_final(k, None)


def backward(records: list, seeds: dict, source_keys: list, on_final=None) -> dict:
    """Gradients of the seeded tensors with respect to the sources: maps
    each reached source key to its summed gradient. `on_final(key, grad)`,
    if given, is called for each source key as soon as its gradient is
    final (after the first op that uses it; at the start for one no op
    uses), while the pass goes on; grad None: the source gets none."""
    reach = set(source_keys)
    useful = []
    for call in records:
        for x in call.inputs:
            if id(x) in reach:
                useful.append(call)
                reach.update([id(o) for o in call.outputs])
                break
    pending = {k: list(v) for k, v in seeds.items()}
    keep = set(source_keys)
    final_at: dict = {}
    if on_final is not None:
        final_at, at_start = _final_at(useful, source_keys)
        _deliver(at_start, pending, on_final)
    for call in reversed(useful):
        got = [pending.get(id(o)) for o in call.outputs]
        if any(got):
            out_grads = [_add_all(g) if g else None for g in got]
            for o in call.outputs:
                if id(o) not in keep:
                    pending.pop(id(o), None)
            if call.op_def.gradient is not registry.NOT_DIFFERENTIABLE:
                for i, (x, g) in enumerate(zip(call.inputs, _input_grads(call, out_grads))):
                    if g is None or id(x) not in reach:
                        continue
                    _check(call, i, x, g)
                    pending.setdefault(id(x), []).append(g)
        if final_at and id(call) in final_at:
            _deliver(final_at[id(call)], pending, on_final)
    return {k: _add_all(pending[k]) for k in source_keys if pending.get(k)}


def _seeds(targets: list, output_gradients: Any) -> dict:
    if output_gradients is None:
        ogs = [None] * len(targets)
    else:
        ogs = flatten(output_gradients)
        if len(ogs) != len(targets):
            raise errors.InvalidArgumentError(
                f"GradientTape.gradient: {len(ogs)} output_gradients for {len(targets)} "
                "targets; give one per target (None for ones)")
    seeds: dict = {}
    for t, og in zip(targets, ogs):
        if not isinstance(t, (Tensor, Variable)):
            raise TypeError(f"GradientTape.gradient: a target must be a Tensor or a "
                            f"Variable, got {type(t).__name__}")
        shape, dtype, dev = _info(t)
        if og is None:
            seed = filled(shape, dtype, dev, 1)
        else:
            seed = convert_to_tensor(og, dtype) if not isinstance(og, Tensor) else og
            if tuple(seed.shape) != tuple(shape):
                raise errors.InvalidArgumentError(
                    f"GradientTape.gradient: output gradient of shape {list(seed.shape)} "
                    f"for a target of shape {list(shape)} (they must be equal)")
        seeds.setdefault(_key(t), []).append(seed)
    return seeds


def _results(sources: list, grads: dict, zeros: bool) -> list:
    out = []
    for s in sources:
        if not isinstance(s, (Tensor, Variable)):
            raise TypeError(f"GradientTape.gradient: a source must be a Tensor or a "
                            f"Variable, got {type(s).__name__}")
        g = grads.get(_key(s))
        if g is None and zeros:
            g = filled(*_info(s), 0)
        out.append(g)
    return out


def gradient(records: list, target: Any, sources: Any, output_gradients: Any,
             zeros: bool, watched: dict, on_gradient=None) -> Any:
    """``GradientTape.gradient`` over `records`; `on_gradient(i, grad)` is
    called with each reached source's final gradient (i: its index in the
    flattened `sources`) as soon as it is final (None: it gets none)."""
    flat_sources = flatten(sources)
    seeds = _seeds(flatten(target), output_gradients)
    keys = [_key(s) for s in flat_sources if isinstance(s, (Tensor, Variable))]
    on_final = None
    if on_gradient is not None:
        where: dict = {}
        for i, s in enumerate(flat_sources):
            where.setdefault(_key(s), []).append(i)

        def on_final(key: int, grad: Tensor) -> None:
            for i in where[key]:
                on_gradient(i, grad)
    grads = backward(records, seeds, keys, on_final)
    return pack_like(sources, _results(flat_sources, grads, zeros))


def jacobian(records: list, target: Any, sources: Any, zeros: bool, watched: dict) -> Any:
    """``GradientTape.jacobian``: one backward pass per target element."""
    if not isinstance(target, Tensor):
        raise TypeError("GradientTape.jacobian: the target must be a Tensor")
    if target._dev is None:
        raise errors.UnimplementedError(
            "GradientTape.jacobian is not supported inside pg.function (it stacks one "
            "backward pass per element on the host); call it eagerly, or take "
            "tape.gradient of each element you need")
    flat_sources = flatten(sources)
    keys = [_key(s) for s in flat_sources]
    n = target.size
    rows: list[list] = [[] for _ in flat_sources]
    for i in range(n):
        onehot = np.zeros(n, target.dtype.as_numpy_dtype)
        onehot[i] = 1
        seed = convert_to_tensor(onehot.reshape(target.shape))
        grads = backward(records, {id(target): [seed]}, keys)
        for j, k in enumerate(keys):
            rows[j].append(grads.get(k))
    out = []
    for s, r in zip(flat_sources, rows):
        shape, dtype, dev = _info(s)
        if all(g is None for g in r) and not zeros:
            out.append(None)
            continue
        z = np.zeros(shape, dtype.as_numpy_dtype)
        stacked = np.stack([z if g is None else g.numpy() for g in r]) if r else \
            np.zeros((0,) + tuple(shape), dtype.as_numpy_dtype)
        out.append(convert_to_tensor(stacked.reshape(tuple(target.shape) + tuple(shape)))
                   ._copy_to(dev))
    return pack_like(sources, out)
