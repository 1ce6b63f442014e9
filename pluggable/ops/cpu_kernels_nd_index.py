"""CPU kernels (numpy) of GatherNd, ScatterNd, TensorScatterUpdate,
TensorScatterAdd, TensorScatterSub, TensorScatterMax and TensorScatterMin.
Out-of-range indices are InvalidArgumentError, as on TensorFlow's CPU."""
from __future__ import annotations

import numpy as np

from ..framework import errors
from .cpu_kernels import _wide
from .nd_index_op_defs import flat_nd_indices, nd_geometry
from .op_util import ints


def _slices(x: np.ndarray, k: int) -> np.ndarray:
    """`x` as rows of slices over its first k dimensions."""
    return x.reshape((int(np.prod(x.shape[:k], dtype=np.int64)),) + x.shape[k:])


def _gather_nd(ins, attrs):
    params, indices = ins
    k, inner = nd_geometry("GatherNd", params.shape, indices.shape)
    flat = flat_nd_indices("GatherNd", indices, params.shape, "param")
    return [_slices(params, k)[flat].reshape(indices.shape[:-1] + inner)]


def _scatter(op: str, base: np.ndarray, indices: np.ndarray, updates: np.ndarray,
             add: bool, combine: np.ufunc | None = None) -> np.ndarray:
    """`base` with `updates` written at `indices` (added when `add`; combined
    with ufunc `combine`, repeated indices included, when given)."""
    k, inner = nd_geometry(op, base.shape, indices.shape)
    flat = flat_nd_indices(op, indices, base.shape, "")
    out = _wide(base).copy() if add else base.copy()
    rows = _slices(out, k)
    u = updates.reshape((flat.size,) + inner)
    if add:
        with np.errstate(all="ignore"):
            np.add.at(rows, flat, _wide(u) if u.dtype != np.bool_ else u)
    elif combine is not None:
        with np.errstate(all="ignore"):
            combine.at(rows, flat, u)
    else:
        rows[flat] = u
    return out.astype(base.dtype, copy=False)


def _scatter_nd(ins, attrs):
    indices, updates, shape = ins
    base = np.zeros(tuple(ints("ScatterNd", "shape", shape)), updates.dtype)
    if updates.dtype == np.bool_:  # a logical OR of the updates, as TensorFlow
        return [_scatter("ScatterNd", base.astype(np.int8), indices,
                         updates.astype(np.int8), True) != 0]
    return [_scatter("ScatterNd", base, indices, updates, True)]


def _tensor_scatter_update(ins, attrs):
    tensor, indices, updates = ins
    return [_scatter("TensorScatterUpdate", tensor, indices, updates, False)]


def _tensor_scatter_add(ins, attrs):
    tensor, indices, updates = ins
    return [_scatter("TensorScatterAdd", tensor, indices, updates, True)]


def _tensor_scatter_sub(ins, attrs):
    tensor, indices, updates = ins
    if tensor.dtype == np.bool_:
        raise errors.NotFoundError("TensorScatterSub: no kernel for bool tensors (TensorFlow "
                                   "has none either); cast to an integer type first",
                                   op="TensorScatterSub")
    with np.errstate(all="ignore"):
        return [_scatter("TensorScatterSub", tensor, indices, -_wide(updates), True)]


def _tensor_scatter_extreme(name, better):
    """TensorScatterMax / Min: an update replaces the element it beats
    (`better(update, element)`); a NaN update never does, a NaN element
    stays, as in TensorFlow's Eigen max and min."""
    def kernel(ins, attrs):
        tensor, indices, updates = ins
        k, inner = nd_geometry(name, tensor.shape, indices.shape)
        flat = flat_nd_indices(name, indices, tensor.shape, "")
        out = tensor.copy()
        rows = _slices(out, k)
        u = updates.reshape((flat.size,) + inner)
        for i, r in enumerate(flat):
            rows[r] = np.where(better(u[i], rows[r]), u[i], rows[r])
        return [out]
    return kernel


KERNELS = {
    "GatherNd": _gather_nd, "ScatterNd": _scatter_nd,
    "TensorScatterUpdate": _tensor_scatter_update, "TensorScatterAdd": _tensor_scatter_add,
    "TensorScatterSub": _tensor_scatter_sub,
    "TensorScatterMax": _tensor_scatter_extreme("TensorScatterMax", np.greater),
    "TensorScatterMin": _tensor_scatter_extreme("TensorScatterMin", np.less),
}
