"""Ops on resource variables (TensorFlow's names, inputs and attributes):
reading and assigning (``ReadVariableOp``, ``AssignVariableOp``), in-place
updates (``AssignAddVariableOp``, ``AssignSubVariableOp``) and the training
updates of the optimizers (``ResourceApplyGradientDescent``,
``ResourceApplyKerasMomentum``, ``ResourceApplyAdam``), and pluggable's own
``MultiTensorApplyAdam``: one Adam/AdamW step of N variables in one call.

A variable lives in the core (``c_api/src/variables.c``); ops see it through
a resource handle, a host-memory scalar of dtype ``resource``. Reading and
assigning need no device code, so the core runs them on every plugin device
(kernels registered for ``registry.DEFAULT_DEVICE``); plugins implement the
updates with ``kernels_experimental.h``. The CPU kernels here work on the
core's host buffers in place, under the variables' locks, with the same
copy-on-write rule as the C functions.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import numpy as np

from .._core import code_and_message, ffi, lib, status
from .._core.ownership import OwnsCoreResource
from ..framework import dtypes, errors
from ..framework.registry import (DEFAULT_DEVICE, OPS, KernelDef, make_op_def,
                                  register_kernel, register_op)
from ..framework.tensor import Tensor
from .cpu_kernels import _wide

_NUMBER = "numbertype"


# ------------------------------------------------------------ handle tensors

def handle_tensor(h, device) -> Tensor:
    """A Tensor of dtype resource owning the core handle `h` of a variable on
    `device`. Its value (for CPU kernels) is a 0-d object array holding the
    handle; plugin kernels receive the handle itself."""
    t = Tensor.__new__(Tensor)
    a = np.empty((), object)
    a[()] = h
    t._h, t._a, t._dev, t._dtype, t._shape = h, a, device, dtypes.resource, ()
    return t


def _check(st, op: str) -> None:
    code, msg = code_and_message(st)
    if code:
        raise errors.make_error(code, f"{op} on CPU:0: {msg}", op=op, device="CPU:0")


class _HostBuffer(OwnsCoreResource):
    """Keeps a core host tensor handle alive for the numpy arrays that view
    its memory (numpy holds this object as their base)."""

    __slots__ = ("_h", "__array_interface__")

    def __init__(self, h, writable: bool):
        self._h = h
        ptr = int(ffi.cast("uintptr_t", lib.TF_TensorData(h)))
        self.__array_interface__ = {"shape": (int(lib.TF_TensorByteSize(h)),),
                                    "typestr": "|u1", "data": (ptr, not writable),
                                    "version": 3}

    def __del__(self, _delete=lib.TF_DeleteTensor) -> None:
        _delete(self._h)


def host_array(h, writable: bool = False) -> np.ndarray:
    """A numpy view of the core host tensor `h` (takes ownership of `h`)."""
    v = ffi.cast("pg_tensor_view*", h)
    dt = dtypes.from_enum(int(v.dtype)).as_numpy_dtype
    shape = tuple(v.dims[0:v.num_dims])
    return np.asarray(_HostBuffer(h, writable)).view(dt).reshape(shape)


def host_tensor(a: np.ndarray, dtype: dtypes.DType):
    """A new core host tensor holding a copy of `a` (caller owns it)."""
    a = np.asarray(a, order="C")  # (ascontiguousarray would make a scalar 1-d)
    dims = ffi.new("int64_t[]", list(a.shape) or [0])
    h = lib.TF_AllocateTensor(dtype.enum, dims, a.ndim, a.nbytes)
    if h == ffi.NULL:
        raise errors.ResourceExhaustedError(f"out of host memory for {a.nbytes} bytes")
    if a.nbytes:
        ffi.memmove(lib.TF_TensorData(h), ffi.from_buffer(a), a.nbytes)
    return h


@contextlib.contextmanager
def updating(op: str, handles: list) -> Iterator[list[np.ndarray]]:
    """Locks the CPU variables of `handles` (in the core's global order) and
    yields writable views of their values, copied on write first if another
    tensor shares them."""
    st = status()
    holder = lib.pg_variables_lock(ffi.new("TF_Tensor*[]", handles), len(handles), 1, st)
    _check(st, op)
    try:
        views = []
        for h in handles:
            t = lib.pg_variable_prepare_update(h, st)
            _check(st, op)
            views.append(host_array(t, writable=True))
        yield views
    finally:
        lib.TF_ReleaseVariableInputLockHolder(holder)


def _same_shape(op: str, what: str, a: np.ndarray, b: np.ndarray) -> None:
    if a.shape != b.shape:
        raise errors.InvalidArgumentError(
            f"{op}: {what} must have the variable's shape {list(a.shape)}, got "
            f"{list(b.shape)}", op=op)


def _scalar(op: str, name: str, a: np.ndarray):
    if a.ndim != 0:
        raise errors.InvalidArgumentError(f"{op}: {name} must be a scalar, got shape "
                                          f"{list(a.shape)}", op=op)
    return a[()]


def _var_dtype(op: str, var: np.ndarray, t: np.dtype) -> None:
    if var.dtype != t:
        raise errors.InvalidArgumentError(
            f"{op}: the variable holds {var.dtype} values but the update is {t}", op=op)


# ------------------------------------------------------------- CPU kernels

def _read(ins, attrs):
    st = status()
    h = lib.pg_variable_read(ins[0][()], st)
    _check(st, "ReadVariableOp")
    value = host_array(h)
    if value.dtype != attrs["dtype"].as_numpy_dtype:
        raise errors.InvalidArgumentError(
            f"ReadVariableOp: the variable holds {value.dtype} values, asked for "
            f"{attrs['dtype'].name}", op="ReadVariableOp")
    return [value]


def _assign(ins, attrs):
    handle, value = ins[0][()], ins[1]
    h = host_tensor(value, attrs["dtype"])
    st = status()
    lib.pg_variable_assign(handle, h, int(attrs["validate_shape"]), st)
    lib.TF_DeleteTensor(h)
    _check(st, "AssignVariableOp")
    return []


def _assign_update(op: str, fn):
    def kernel(ins, attrs):
        handle, value = ins[0][()], ins[1]
        with updating(op, [handle]) as (var,):
            _var_dtype(op, var, value.dtype)
            _same_shape(op, "the value", var, value)
            fn(var, value, out=var)
        return []
    return kernel


def _apply_gradient_descent(ins, attrs):
    op = "ResourceApplyGradientDescent"
    alpha, delta = ins[1], ins[2]
    a = _scalar(op, "alpha", alpha)
    with updating(op, [ins[0][()]]) as (var,):
        _var_dtype(op, var, delta.dtype)
        _same_shape(op, "delta", var, delta)
        var[...] = _wide(var) - _wide(a) * _wide(delta)
    return []


def _apply_keras_momentum(ins, attrs):
    op = "ResourceApplyKerasMomentum"
    lr, grad, momentum = (ins[2], ins[3], ins[4])
    lr = _wide(_scalar(op, "lr", lr))
    mom = _wide(_scalar(op, "momentum", momentum))
    with updating(op, [ins[0][()], ins[1][()]]) as (var, accum):
        for name, x in (("var", var), ("accum", accum)):
            _var_dtype(op, x, grad.dtype)
        _same_shape(op, "accum", var, accum)
        _same_shape(op, "grad", var, grad)
        g = _wide(grad)
        acc = _wide(accum) * mom - lr * g
        accum[...] = acc
        step = acc * mom - lr * g if attrs["use_nesterov"] else acc
        var[...] = _wide(var) + step
    return []


def _apply_adam(ins, attrs):
    op = "ResourceApplyAdam"
    names = ("beta1_power", "beta2_power", "lr", "beta1", "beta2", "epsilon")
    b1p, b2p, lr, b1, b2, eps = (_wide(_scalar(op, n, x)) for n, x in zip(names, ins[3:9]))
    grad = ins[9]
    with updating(op, [ins[0][()], ins[1][()], ins[2][()]]) as (var, m, v):
        for x in (var, m, v):
            _var_dtype(op, x, grad.dtype)
        _same_shape(op, "m", var, m)
        _same_shape(op, "v", var, v)
        _same_shape(op, "grad", var, grad)
        g = _wide(grad)
        alpha = lr * np.sqrt(1 - b2p) / (1 - b1p)
        m_new = _wide(m) + (g - _wide(m)) * (1 - b1)
        v_new = _wide(v) + (g * g - _wide(v)) * (1 - b2)
        m[...] = m_new
        v[...] = v_new
        num = (g * (1 - b1) + b1 * m_new) if attrs["use_nesterov"] else m_new
        var[...] = _wide(var) - num * alpha / (np.sqrt(v_new) + eps)
    return []


MULTI_ADAM = "MultiTensorApplyAdam"
_MULTI_SCALARS = ("beta1_power", "beta2_power", "lr", "beta1", "beta2", "epsilon", "decay")


def _multi_tensor_apply_adam(ins, attrs):
    """ResourceApplyAdam on each of the N variables, after the decoupled
    weight decay ``var -= decay * var`` where ``decay`` is not 0 (computed
    as ResourceApplyGradientDescent(var, decay, var) does, so the result is
    that of the per-variable ops)."""
    op, n = MULTI_ADAM, attrs["N"]
    b1p, b2p, lr, b1, b2, eps, decay = (
        _wide(_scalar(op, name, x)) for name, x in zip(_MULTI_SCALARS, ins[4 * n:4 * n + 7]))
    handles = [h[()] for h in ins[:3 * n]]
    grads = ins[3 * n:4 * n]
    alpha = lr * np.sqrt(1 - b2p) / (1 - b1p)
    with updating(op, handles) as views:
        triples = [views[i::n] for i in range(n)]
        for i, ((var, m, v), grad) in enumerate(zip(triples, grads)):
            for x in (var, m, v):
                _var_dtype(op, x, np.dtype(attrs["T"].as_numpy_dtype))
            for what, x in (("m", m), ("v", v), ("grad", grad)):
                if x.shape != var.shape:
                    raise errors.InvalidArgumentError(
                        f"{op}: {what} {i} must have variable {i}'s shape {list(var.shape)}, "
                        f"got {list(x.shape)}", op=op)
        for (var, m, v), grad in zip(triples, grads):
            if decay != 0:
                var[...] = _wide(var) - decay * _wide(var)
            g = _wide(grad).astype(_wide(var).dtype, copy=False)
            m_new = _wide(m) + (g - _wide(m)) * (1 - b1)
            v_new = _wide(v) + (g * g - _wide(v)) * (1 - b2)
            m[...] = m_new
            v[...] = v_new
            var[...] = _wide(var) - m_new * alpha / (np.sqrt(v_new) + eps)
    return []


# ------------------------------------------------------------- definitions

def _no_outputs(shapes, attrs, values):
    return []


def _unknown(shapes, attrs, values):
    return [None]  # the variable's shape: known when the kernel has run


_DEFS = [
    ("ReadVariableOp", ["resource: resource"], ["value: dtype"], ["dtype: type"], _unknown,
     _read),
    ("AssignVariableOp", ["resource: resource", "value: dtype"], [],
     ["dtype: type", "validate_shape: bool = false"], _no_outputs, _assign),
    ("AssignAddVariableOp", ["resource: resource", "value: dtype"], [], ["dtype: type"],
     _no_outputs, _assign_update("AssignAddVariableOp", np.add)),
    ("AssignSubVariableOp", ["resource: resource", "value: dtype"], [], ["dtype: type"],
     _no_outputs, _assign_update("AssignSubVariableOp", np.subtract)),
    ("ResourceApplyGradientDescent", ["var: resource", "alpha: T", "delta: T"], [],
     [f"T: {_NUMBER}", "use_locking: bool = false"], _no_outputs, _apply_gradient_descent),
    ("ResourceApplyKerasMomentum",
     ["var: resource", "accum: resource", "lr: T", "grad: T", "momentum: T"], [],
     [f"T: {_NUMBER}", "use_locking: bool = false", "use_nesterov: bool = false"],
     _no_outputs, _apply_keras_momentum),
    ("ResourceApplyAdam",
     ["var: resource", "m: resource", "v: resource", "beta1_power: T", "beta2_power: T",
      "lr: T", "beta1: T", "beta2: T", "epsilon: T", "grad: T"], [],
     [f"T: {_NUMBER}", "use_locking: bool = false", "use_nesterov: bool = false"],
     _no_outputs, _apply_adam),
    (MULTI_ADAM,
     ["var: N * resource", "m: N * resource", "v: N * resource", "grad: N * Tgrad"]
     + [f"{name}: T" for name in _MULTI_SCALARS], [],
     ["N: int >= 1", "T: {half, bfloat16, float, double}",
      "Tgrad: {half, bfloat16, float, double}", "use_locking: bool = true"],
     _no_outputs, _multi_tensor_apply_adam),
]

# Ops the core runs on every plugin device (no device code needed).
_FRAMEWORK_KERNELS = ("ReadVariableOp", "AssignVariableOp")


def register_framework_kernel(name: str) -> None:
    """Registers the core's kernel for op `name` for every plugin device."""
    cdef = lib.pg_core_kernel_def(name.encode())
    register_kernel(KernelDef(name, DEFAULT_DEVICE, {}, frozenset(), cdef=cdef,
                              label="framework"))


def define_resource_ops() -> None:
    """Defines the ops, their CPU kernels and the framework kernels."""
    for name, inputs, outputs, attrs, shape_fn, cpu in _DEFS:
        register_op(make_op_def(name, inputs, outputs, attrs, shape_fn=shape_fn,
                                is_stateful=True, exact_shapes=shape_fn is not _unknown))
        host = frozenset(a.name for a in OPS[name].inputs)
        register_kernel(KernelDef(name, "CPU", {}, host, fn=cpu))
    for name in _FRAMEWORK_KERNELS:
        register_framework_kernel(name)
