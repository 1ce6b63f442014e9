"""Device constants for Python scalar operands (``a * 2.0``), and host
index vectors (axes, permutations, shapes) for the ops that read them.

A Python scalar that meets a plugin-device tensor becomes a tensor of that
device. Without a cache that is a host-to-device copy on every call; here the
device tensor is made once per (value, dtype, device) and kept in a bounded
least-recently-used table of ``CONSTANT_CACHE_SIZE`` entries, so later calls
cost one dictionary lookup and reach the same plan (and the raw_ops fast
path) as a call with two tensors.

Caching never changes a result:

* the constant is converted exactly as an uncached operand would be
  (``framework.tensor.to_array`` with the dtype of the tensor it meets), and
  a value that conversion refuses is not cached: the general path raises its
  usual error;
* keys tell apart what Python's ``==`` merges: the value's type is part of
  the key (``True``, ``1`` and ``1.0`` are three entries) and floats that
  compare equal without being the same value (``0.0`` and ``-0.0``) or that
  never compare equal (NaN) are keyed by their bits;
* the cached tensors are never handed to the caller and kernels never write
  their inputs (the core does not forward inputs), so they stay immutable;
* a constant first needed while the calling thread captures a device graph
  is made for that call only (its value would exist only once the graph is
  replayed), never cached.

The index vectors that ``pg.reduce_sum``, ``pg.transpose``, ``pg.reshape``
and ``pg.fill`` pass to their ops are CPU tensors that hold their core
handle (``host_vector``), made once per (values, dtype) and kept the same
way, so that those calls take the raw_ops fast path. Their arrays are
read-only and they are never handed to the caller.
"""
from __future__ import annotations

import struct
from typing import Any

import numpy as np

from .._core import ffi, lib
from ..framework import dtypes, errors
from ..framework.tensor import Tensor, to_array
from . import placement
from .cache import LRUCache
from .device import Device

CONSTANT_CACHE_SIZE = 256
"""How many (value, dtype, device) constants are kept (about 100 bytes of
host memory and one small device allocation each)."""

_table = LRUCache(CONSTANT_CACHE_SIZE)
_get = _table.get
_vectors = LRUCache(CONSTANT_CACHE_SIZE)
_vector_get = _vectors.get
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_pack = struct.Struct("<d").pack


def lookup(v: Any, dtype: dtypes.DType, dev: Any, converted: Tensor | None = None) -> Tensor | None:
    """The constant tensor of Python scalar `v` as `dtype` on plugin device
    `dev` (made and cached on first use; `converted`, when given, is `v`
    already converted on the CPU). None when `v` is not a Python scalar, `dev`
    is not a plugin device or the conversion fails (the caller's general path
    then raises the usual error). A hit costs one dictionary lookup."""
    t = type(v)
    if t is float:
        if v == v and v != 0.0:
            key = (t, v, dtype, dev)
        else:  # NaN (any payload) and signed zeros: by their bits
            key = (t, _pack(v), dtype, dev)
    elif t is int or t is bool:
        key = (t, v, dtype, dev)
    else:
        return None
    c = _get(key)
    if c is not None:
        return c
    return _make(key, v, dtype, dev, converted)


def _make(key: tuple, v: Any, dtype: dtypes.DType, dev: Any,
          converted: Tensor | None) -> Tensor | None:
    if dev is _HOST:  # a host scalar holding its core handle
        try:
            a = to_array(v, dtype)
        except (TypeError, errors.PluggableError):
            return None
        return _keep_on_host(_table, key, a, dtype)
    if not isinstance(dev, Device):
        return None
    if converted is None:
        try:
            converted = Tensor._from_array(to_array(v, dtype), placement.CPU)
        except (TypeError, errors.PluggableError):
            return None
    c = dev.copy_in(converted)
    if not dev._c.capturing:
        _table.maxsize = CONSTANT_CACHE_SIZE  # a new size applies from the next insertion
        _table.put(key, c)
    return c


_HOST = object()  # the `dev` of host_constant's entries


def host_constant(v: Any, dtype: dtypes.DType) -> Tensor | None:
    """The CPU tensor of Python scalar `v` as `dtype`, holding its core
    handle, for a kernel that takes the value in host memory (the CUDA
    plugin's Fill); cached like ``lookup``'s constants, None where
    ``lookup`` would give None."""
    return lookup(v, dtype, _HOST)


def host_vector(values: tuple, dtype: dtypes.DType | None = None) -> Tensor | None:
    """The CPU tensor of the index vector `values` (a tuple of Python ints)
    as `dtype` (int32 or int64; when None, int32 where every value fits,
    else int64), holding its core handle; made once and cached. None when a
    value does not fit `dtype` (the caller's general path then raises the
    usual error)."""
    key = (dtype, values)
    t = _vector_get(key)
    if t is not None:
        return t
    fits32 = all(_INT32_MIN <= v <= _INT32_MAX for v in values)
    dt = dtype if dtype is not None else (dtypes.int32 if fits32 else dtypes.int64)
    if dt is dtypes.int32 and not fits32 or dt is dtypes.int64 and not all(
            -(1 << 63) <= v < (1 << 63) for v in values):
        return None
    return _keep_on_host(_vectors, key, values, dt)


def _keep_on_host(table: LRUCache, key: tuple, value: Any, dtype: dtypes.DType) -> Tensor:
    """The read-only CPU tensor of `value` holding its core handle, kept in
    `table` under `key`."""
    t = host_input(value, dtype)
    t._a.flags.writeable = False
    table.maxsize = CONSTANT_CACHE_SIZE  # a new size applies from the next insertion
    table.put(key, t)
    return t


def host_input(value: Any, dtype: dtypes.DType) -> Tensor:
    """A CPU tensor of `value` that also holds a core handle over its own
    memory, for a host-memory input passed to many calls (the key inputs of
    a process group's collectives, the cached index vectors): a call then
    hands the handle over as it is instead of wrapping the array every
    time."""
    a = np.array(value, dtype.as_numpy_dtype)
    t = Tensor._from_array(a, placement.CPU, dtype)
    t._h = wrap_host(a, dtype)
    return t


def wrap_host(a: np.ndarray, dtype: dtypes.DType) -> Any:
    """A core handle over host array `a` (which must outlive it)."""
    dims = ffi.new("int64_t[]", list(a.shape) or [0])
    return lib.pg_tensor_wrap_host(dtype.enum, dims, a.ndim, ffi.from_buffer(a), a.nbytes)


fill_inputs: dict = {}
"""Fill's inputs (dims vector, value constant) that ``pg.zeros`` and
``pg.ones`` remembered, by (dims, dtype, 0 or 1, device scope, settings
version); at most 64, emptied when full."""


def clear() -> None:
    """Forgets every cached constant (their device memory is freed once no
    queued work uses it) and index vector."""
    _table.clear()
    _vectors.clear()
    fill_inputs.clear()


def cached() -> int:
    """How many constants are cached now."""
    return len(_table)
