"""Definitions of the N-dimensional index ops, GatherNd, ScatterNd,
TensorScatterUpdate, TensorScatterAdd, TensorScatterSub, TensorScatterMin and
TensorScatterMax (TensorFlow's names, inputs,
attributes and type sets), with shape functions, the index checks their
CPU kernels share, and sample calls (``examples``)."""
from __future__ import annotations

import numpy as np

from .op_util import define, err, index_array, ints, sample

_TINDICES = "Tindices: {int16, int32, int64}"
_POLICY = "bad_indices_policy: string = ''"


def nd_geometry(op: str, shape: tuple, ishape: tuple) -> tuple[int, tuple]:
    """(K, the slice shape) of indices of shape `ishape` into a tensor of
    `shape`: the last dimension of the indices, K, indexes the first K
    dimensions; each index selects a slice of shape shape[K:]."""
    if len(ishape) < 1:
        raise err(op, f"indices must have rank >= 1, got a scalar")
    k = ishape[-1]
    if k > len(shape):
        raise err(op, f"the last dimension of indices ({k}) must be <= the rank of the "
                  f"indexed tensor ({len(shape)}, shape {list(shape)})")
    return k, tuple(shape[k:])


def flat_nd_indices(op: str, indices: np.ndarray, shape: tuple, what: str) -> np.ndarray:
    """The row-major offsets (in units of slices) of each index row into the
    first K dimensions of `shape`; an index outside them raises
    InvalidArgumentError naming it, as TensorFlow's CPU kernels do."""
    k = indices.shape[-1]
    rows = indices.reshape(-1, k).astype(np.int64)
    dims = np.asarray(shape[:k], np.int64)
    bad = np.flatnonzero(((rows < 0) | (rows >= dims)).any(axis=1)) if rows.size else []
    if len(bad):
        pos = [int(p) for p in np.unravel_index(int(bad[0]), indices.shape[:-1])]
        dims_text = ",".join(str(d) for d in shape)   # TensorFlow's "[4,3]"
        where = f" {what}" if what else ""
        raise err(op, f"indices{pos} = {rows[bad[0]].tolist()} does not index into{where} "
                  f"shape [{dims_text}]; every index must be in [0, dim) for the first "
                  f"{k} dimensions")
    if k == 0:
        return np.zeros(rows.shape[0], np.int64)
    return np.ravel_multi_index(tuple(rows.T), tuple(int(d) for d in dims)) if rows.size \
        else np.zeros(0, np.int64)


def _updates_shape(op: str, shape: tuple, ishape: tuple, ushape: tuple) -> None:
    k, inner = nd_geometry(op, shape, ishape)
    want = tuple(ishape[:-1]) + inner
    if tuple(ushape) != want:
        raise err(op, f"updates must have shape indices.shape[:-1] + shape[{k}:] = "
                  f"{list(want)}, got {list(ushape)}")


def _gather_nd(shapes, attrs, values):
    p, i = tuple(shapes[0]), tuple(shapes[1])
    _, inner = nd_geometry("GatherNd", p, i)
    return [i[:-1] + inner]


def _scatter_nd(shapes, attrs, values):
    shape = tuple(ints("ScatterNd", "shape", values["shape"]))
    if any(d < 0 for d in shape):
        raise err("ScatterNd", f"shape must be non-negative, got {list(shape)}")
    _updates_shape("ScatterNd", shape, tuple(shapes[0]), tuple(shapes[1]))
    return [shape]


def _tensor_scatter(op):
    def fn(shapes, attrs, values):
        t = tuple(shapes[0])
        _updates_shape(op, t, tuple(shapes[1]), tuple(shapes[2]))
        return [t]
    return fn


def _rows(rng, shape, n, k, unique):
    """n index rows into the first k dimensions of shape."""
    dims = shape[:k]
    total = int(np.prod(dims)) if k else 1
    flat = rng.permutation(total)[:n] if unique else rng.integers(0, max(total, 1), n)
    return np.stack(np.unravel_index(flat, dims), -1) if k else np.zeros((n, 0), np.int64)


def _ex_gather_nd(rng, types):
    T, I = types["Tparams"], types["Tindices"]
    p = sample(rng, T, (4, 3, 2))
    return [({"params": p, "indices": index_array(_rows(rng, p.shape, 5, 2, False), I)}, {}),
            ({"params": p, "indices": index_array(
                _rows(rng, p.shape, 6, 1, False).reshape(2, 3, 1), I)}, {}),
            ({"params": p, "indices": index_array(_rows(rng, p.shape, 3, 3, False), I)}, {}),
            ({"params": p, "indices": index_array(np.zeros((0, 2)), I)}, {})]


def _ex_scatter_nd(rng, types):
    T, I = types["T"], types["Tindices"]
    shape = (5, 3)
    idx = _rows(rng, shape, 4, 1, False)     # repeated rows add up
    idx2 = _rows(rng, shape, 6, 2, False)
    return [({"indices": index_array(idx, I), "updates": sample(rng, T, (4, 3)),
              "shape": index_array(shape, I)}, {}),
            ({"indices": index_array(idx2, I), "updates": sample(rng, T, (6,)),
              "shape": index_array(shape, I)}, {})]


def _ex_tensor_scatter(rng, types):
    T, I = types["T"], types["Tindices"]
    if T.is_bool and types.get("_numbers_only"):
        return []  # no kernel for bool, as in TensorFlow
    t = sample(rng, T, (5, 3))
    idx = _rows(rng, t.shape, 3, 1, True)    # distinct rows: the update order is unseen
    idx2 = _rows(rng, t.shape, 4, 2, True)
    return [({"tensor": t, "indices": index_array(idx, I), "updates": sample(rng, T, (3, 3))},
             {}),
            ({"tensor": t, "indices": index_array(idx2, I), "updates": sample(rng, T, (4,))},
             {})]


def define_nd_index_ops() -> None:
    """Registers GatherNd, ScatterNd, TensorScatterUpdate, TensorScatterAdd,
    TensorScatterSub, TensorScatterMax and TensorScatterMin."""
    define("GatherNd", ["params: Tparams", "indices: Tindices"], ["output: Tparams"],
           ["Tparams: type", _TINDICES, _POLICY], _gather_nd, examples=_ex_gather_nd)
    define("ScatterNd", ["indices: Tindices", "updates: T", "shape: Tindices"], ["output: T"],
           ["T: type", _TINDICES, _POLICY], _scatter_nd, host=["shape"],
           examples=_ex_scatter_nd)
    define("TensorScatterUpdate", ["tensor: T", "indices: Tindices", "updates: T"],
           ["output: T"], ["T: type", _TINDICES, _POLICY], _tensor_scatter("TensorScatterUpdate"),
           examples=_ex_tensor_scatter)
    define("TensorScatterAdd", ["tensor: T", "indices: Tindices", "updates: T"],
           ["output: T"], ["T: type", "Tindices: {int32, int64}", _POLICY],
           _tensor_scatter("TensorScatterAdd"), examples=_ex_tensor_scatter)
    for name in ("TensorScatterMax", "TensorScatterMin"):
        define(name, ["tensor: T", "indices: Tindices", "updates: T"], ["output: T"],
               ["T: type", "Tindices: {int32, int64}", _POLICY], _tensor_scatter(name),
               examples=_ex_tensor_scatter)
    define("TensorScatterSub", ["tensor: T", "indices: Tindices", "updates: T"], ["output: T"],
           ["T: type", "Tindices: {int32, int64}", _POLICY], _tensor_scatter("TensorScatterSub"),
           examples=lambda rng, types: _ex_tensor_scatter(rng, {**types, "_numbers_only": True}))
