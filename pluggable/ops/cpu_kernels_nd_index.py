"""CPU kernels (numpy) of GatherNd, ScatterNd, TensorScatterUpdate,
TensorScatterAdd, TensorScatterSub, TensorScatterMin and TensorScatterMax. Out-of-range indices are InvalidArgumentError, as on
TensorFlow's CPU."""
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


def _numbers_only(op: str, tensor: np.ndarray) -> None:
    if tensor.dtype == np.bool_:
        raise errors.NotFoundError(f"{op}: no kernel for bool tensors (TensorFlow has none "
                                   "either); cast to an integer type first", op=op)


def _tensor_scatter_sub(ins, attrs):
    tensor, indices, updates = ins
    _numbers_only("TensorScatterSub", tensor)
    with np.errstate(all="ignore"):
        return [_scatter("TensorScatterSub", tensor, indices, -_wide(updates), True)]


def _combining(op: str, combine: np.ufunc):
    """The kernel of TensorScatterMin / Max (`combine` np.fmin / np.fmax):
    as TensorFlow's, a NaN update is passed over and a NaN element of the
    tensor stays NaN."""
    def kernel(ins, attrs):
        tensor, indices, updates = ins
        _numbers_only(op, tensor)
        out = _scatter(op, tensor, indices, updates, False, combine)
        if out.dtype.kind in "fV":
            nan = np.isnan(_wide(tensor))
            if nan.any():
                out[nan] = tensor[nan]
        return [out]
    return kernel


KERNELS = {
    "GatherNd": _gather_nd, "ScatterNd": _scatter_nd,
    "TensorScatterUpdate": _tensor_scatter_update, "TensorScatterAdd": _tensor_scatter_add,
    "TensorScatterSub": _tensor_scatter_sub,
    "TensorScatterMin": _combining("TensorScatterMin", np.fmin),
    "TensorScatterMax": _combining("TensorScatterMax", np.fmax),
}
