"""Index values (axes, permutations, shapes, sizes) as the ops take them:
int32 host tensors, int64 where a value does not fit, as TensorFlow packs
them."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..framework import dtypes
from ..framework.tensor import Tensor
from ..runtime import constants


def int_tuple(v: Any) -> tuple | None:
    """`v` as a tuple of Python ints when it is an int or a list or tuple of
    ints; None for anything else."""
    t = type(v)
    if t is int:
        return (v,)
    if (t is tuple or t is list) and all(type(d) is int for d in v):
        return tuple(v)
    return None


def index_vector(v: Any, dtype: dtypes.DType | None = dtypes.int32) -> Any:
    """Index values (an int or a list or tuple of ints) as the cached host
    tensor of ``runtime.constants.host_vector`` (`dtype`; when None, int32
    where every value fits, else int64), with which the op's call takes the
    raw_ops fast path; `v` itself where a value does not fit (for the op's
    usual error); None when `v` is not such a value (the caller converts it
    its own way)."""
    ints = int_tuple(v)
    if ints is None:
        return None
    t = constants.host_vector(ints, dtype)
    return t if t is not None else v


def shape_input(v: Any) -> Any:
    """A shape-like host input (Fill's dims, BroadcastTo's shape, Tile's
    multiples): for an int or a list or tuple of ints, the cached host
    vector of ``index_vector`` (int32 where every value fits), with which
    the call takes the raw_ops fast path; anything else as ``index_array``
    packs it, flattened."""
    iv = index_vector(v, None)
    return iv if iv is not None else index_array(v).reshape(-1)


def index_array(values: Any) -> np.ndarray:
    """int32 index values (int64 when they do not fit), as TensorFlow packs them."""
    if type(values) in (list, tuple) and values and all(type(v) is int for v in values):
        # the common shape list (pg.zeros([n, m])): no round trip through int64
        small = all(-2**31 <= v < 2**31 for v in values)
        return np.array(values, np.int32 if small else np.int64)
    a = np.asarray(values.numpy() if isinstance(values, Tensor) else values)
    if a.dtype.kind not in "iu" and a.size:
        raise TypeError(f"indices and sizes must be integers, got {a.dtype} values")
    a = a.astype(np.int64)
    fits = a.size == 0 or (a.min() >= np.iinfo(np.int32).min and a.max() <= np.iinfo(np.int32).max)
    return a.astype(np.int32) if fits else a
