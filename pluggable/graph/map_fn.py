"""``pg.map_fn``: a function applied to each element of tensors along their
first axis (``tf.map_fn``).

Where the number of elements is known (always eagerly; in a traced
function when the first dimension is static) the calls are unrolled and
the results stacked; otherwise, for dense tensors, one ``while_loop``
appends each result to an accumulator. Ragged elements are the rows of a
``pg.RaggedTensor``; ragged results (the default when the elements are
ragged, or a ``RaggedTensorSpec`` as ``fn_output_signature``) are stacked
into a RaggedTensor."""
from __future__ import annotations

from typing import Any, Callable

from ..framework import dtypes, errors
from ..framework.tensor_shape import TensorShape
from ..ops import array_ops
from ..runtime.tensors import convert_to_tensor
from . import nest
from .control_flow import while_loop


def _ragged():
    from .. import ragged
    return ragged


def _is_ragged(x: Any) -> bool:
    return isinstance(x, _ragged().RaggedTensor)


def _leading(x: Any) -> Any:
    if _is_ragged(x):
        return x.nrows()
    return array_ops.shape(x)[0]


def _static_leading(x: Any) -> int | None:
    if _is_ragged(x):
        n = x.shape[0] if x.shape.rank else None
        return None if n is None else int(n)
    d = x.shape[0] if x.shape.rank else None
    return None if d is None else int(d)


def _output_is_ragged(signature: Any, elems_flat: list) -> bool:
    ragged = _ragged()
    if signature is None:
        return bool(elems_flat) and all(_is_ragged(e) for e in elems_flat)
    return isinstance(signature, ragged.RaggedTensorSpec)


def _stack(values: list, ragged_out: bool, signature: Any) -> Any:
    if ragged_out:
        ragged = _ragged()
        if any(_is_ragged(v) for v in values):
            return ragged.stack([v if _is_ragged(v) else ragged.RaggedTensor.from_tensor(v)
                                 for v in values])
        rows = [convert_to_tensor(v) for v in values]
        if any(r.shape.rank == 0 for r in rows):
            return array_ops.stack(rows)   # one scalar per row: a dense vector
        lengths = [int(r.shape[0]) for r in rows]
        return ragged.RaggedTensor.from_row_lengths(
            array_ops.concat(rows, 0), convert_to_tensor(lengths, dtypes.int64))
    dtype = getattr(signature, "dtype", None) if signature is not None else None
    if dtype is None and isinstance(signature, dtypes.DType):
        dtype = signature
    tensors = [convert_to_tensor(v, dtype) for v in values]
    return array_ops.stack(tensors)


def map_fn(fn: Callable, elems: Any, dtype: Any = None, parallel_iterations: int | None = None,
           back_prop: bool = True, swap_memory: bool = False, infer_shape: bool = True,
           name: str | None = None, fn_output_signature: Any = None) -> Any:
    """``stack([fn(e) for e in unstack(elems)])`` (``tf.map_fn``): `elems` is a
    tensor, a RaggedTensor or a nested structure of them with the same first
    dimension; `fn` takes one element of the same structure. The result has
    `fn`'s structure, each leaf stacked; `fn_output_signature` (or the
    deprecated `dtype`) says its dtypes where they differ from `elems`'."""
    if not callable(fn):
        raise TypeError(f"map_fn: fn must be callable, got {type(fn).__name__}")
    signature = fn_output_signature if fn_output_signature is not None else dtype
    flat = [e if _is_ragged(e) else convert_to_tensor(e) for e in nest.flatten(elems)]
    if not flat:
        raise ValueError("map_fn: elems must be a tensor or a non-empty structure of tensors")
    sizes = [_static_leading(e) for e in flat]
    known = sorted({s for s in sizes if s is not None})
    if len(known) > 1:
        raise errors.InvalidArgumentError(
            f"map_fn: the tensors of elems must have the same first dimension, got {known}")
    n = known[0] if known and None not in sizes else None
    if n is not None:
        results = [fn(nest.pack_as(elems, [e[i] for e in flat])) for i in range(n)]
        if results:
            _check_structure(results[0], elems, signature)
        if not results:
            return _empty(fn, elems, flat, signature)
        flat_out = [nest.flatten(r) for r in results]
        sig_flat = nest.flatten(signature) if signature is not None and \
            nest.is_nested(signature) else [signature] * len(flat_out[0])
        ragged_outs = [_output_is_ragged(s, flat) for s in sig_flat]
        stacked = [_stack([r[j] for r in flat_out], ragged_outs[j], sig_flat[j])
                   for j in range(len(flat_out[0]))]
        return nest.pack_as(results[0], stacked)
    if any(_is_ragged(e) for e in flat):
        raise errors.UnimplementedError(
            "map_fn over a RaggedTensor whose number of rows is unknown while the function "
            "is traced is not supported; give the function an input_signature with a "
            "static first dimension, or call map_fn eagerly")
    return _loop(fn, elems, flat, signature)


def _check_structure(result: Any, elems: Any, signature: Any) -> None:
    """Without a signature, fn must return elems' structure (TensorFlow's rule)."""
    if signature is None and not nest.same_structure(result, elems):
        raise ValueError(
            f"map_fn: fn returned a value of structure {_shape_of(result)} but elems have "
            f"structure {_shape_of(elems)}; where they differ, give fn_output_signature "
            "(a dtype, TensorSpec or RaggedTensorSpec per output)")


def _shape_of(x: Any) -> str:
    """A structure with its leaves as '.' (as TensorFlow's nest messages show it)."""
    if isinstance(x, dict):
        return "{" + ", ".join(f"{k!r}: {_shape_of(x[k])}" for k in sorted(x)) + "}"
    if isinstance(x, (tuple, list)):
        inner = ", ".join(_shape_of(v) for v in x)
        return f"({inner},)" if isinstance(x, tuple) and len(x) == 1 else \
            (f"({inner})" if isinstance(x, tuple) else f"[{inner}]")
    return "."


def _empty(fn: Callable, elems: Any, flat: list, signature: Any) -> Any:
    """The result of mapping over zero elements: `elems`' shape and dtype
    (or the signature's dtype) with a first dimension of 0."""
    if signature is not None and not isinstance(signature, dtypes.DType) and \
            getattr(signature, "shape", None) is None:
        raise errors.UnimplementedError("map_fn over zero elements needs fn_output_signature "
                                        "to be a dtype or a TensorSpec")
    out = []
    for e in flat:
        dt = getattr(signature, "dtype", signature) if signature is not None else e.dtype
        shape = [0] + list(e.shape.as_list()[1:]) if not _is_ragged(e) else [0]
        out.append(array_ops.zeros(shape, dt))
    return nest.pack_as(elems, out)


def _loop(fn: Callable, elems: Any, flat: list, signature: Any) -> Any:
    """One graph loop over a first dimension unknown while tracing: each
    result is appended to an accumulator of a growing first dimension."""
    n = _leading(flat[0])
    probe = fn(nest.pack_as(elems, [e[0] for e in flat]))
    _check_structure(probe, elems, signature)
    probe_flat = [convert_to_tensor(p) for p in nest.flatten(probe)]
    if any(p.shape.rank is None for p in probe_flat):
        raise errors.UnimplementedError("map_fn in a traced function needs fn's results to "
                                        "have a known rank")
    accs = [array_ops.expand_dims(p, 0)[0:0] for p in probe_flat]   # [0, ...]

    def body(i: Any, *accs: Any) -> Any:
        out = nest.flatten(fn(nest.pack_as(elems, [e[i] for e in flat])))
        return (i + 1,) + tuple(
            array_ops.concat([a, array_ops.expand_dims(convert_to_tensor(o, a.dtype), 0)], 0)
            for a, o in zip(accs, out))

    invariants = [TensorShape([])] + [TensorShape([None] * (p.shape.rank + 1))
                                      for p in probe_flat]
    final = while_loop(lambda i, *accs: i < n, body,
                       (convert_to_tensor(0, dtypes.int32),) + tuple(accs),
                       shape_invariants=invariants)
    return nest.pack_as(probe, list(final[1:]))


__all__ = ["map_fn"]
