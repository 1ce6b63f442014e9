"""What the core calls when a plugin registers a kernel or an op
(``TF_RegisterKernelBuilder``, ``TF_RegisterOpDefinition``): validation
against the registry, attribution to the plugin's record, and storage in
the registry. Installed as the core's hooks when this layer is imported."""
from __future__ import annotations

import logging
import struct
import threading

from .. import _core
from .._core import code_and_message, cstr, ffi, lib, set_status, status
from ..framework import dtypes, errors, registry
from ..runtime.attrs import make_c_attrs
from .records import record_for

log = logging.getLogger("pluggable.plugins")

# Names that do not fit the core's fixed fields are refused with a message
# instead of being cut.
MAX_OP_NAME, MAX_NAME = registry.MAX_OP_NAME, registry.MAX_NAME
_LONG_NAMES = {
    lib.PG_LONG_OP_NAME: f"the op name is longer than {MAX_OP_NAME} characters",
    lib.PG_LONG_DEVICE_TYPE: f"the device type name is longer than {MAX_NAME} characters",
    lib.PG_LONG_LABEL: f"the label is longer than {MAX_NAME} characters",
    lib.PG_LONG_ATTR_NAME: f"a type-constraint attribute name is longer than {MAX_NAME} "
                           "characters",
    lib.PG_LONG_ARG_NAME: f"a host-memory argument name is longer than {MAX_NAME} characters",
}


def _refuse_late(what: str, plugin_id: int, st) -> int:
    """Refuses (and logs) a registration made outside the plugin's
    TF_InitKernel: after it returned, or from another thread."""
    rec = record_for(plugin_id)
    who = rec.path if rec is not None else "a plugin"
    reason = (f"{what} from {who} refused: registration is open only while the plugin's "
              "TF_InitKernel runs, on the thread that runs it (this call came later or from "
              "another thread)")
    set_status(st, 9, reason)  # FAILED_PRECONDITION
    log.warning("%s", reason)
    if rec is not None:
        rec.rejected.append(reason)
    return 0


_from_enum = dtypes.from_enum
_NO_HOST_ARGS: frozenset = frozenset()
_describe = lib.pg_kernel_def_describe
_TEXT_MAX, _NUMBERS = lib.PG_KERNEL_DEF_TEXT_MAX, lib.PG_KERNEL_DEF_NUMBERS
_unpack = ffi.unpack
_ints = struct.Struct(f"{_NUMBERS}i").unpack
_buffers = threading.local()  # per thread: a late registration may come from another one


def _read(cdef) -> tuple[list[str], tuple[int, ...]]:
    """(names, numbers) of the kernel definition as the core copies them out
    (pg_kernel_def_describe): one C call instead of a cffi read per field,
    for a hook that runs once per kernel of every plugin (about 1,500 times
    at import). names: op, device type, label, the constraints' attributes,
    the host-memory arguments; numbers: plugin id, outside_init,
    name_too_long, overflow, no compute_func, priority, number of
    constraints, number of host arguments, the constraints' TF_DataTypes."""
    try:
        names, numbers, view = _buffers.value
    except AttributeError:
        names, numbers = ffi.new("char[]", _TEXT_MAX), ffi.new("int[]", _NUMBERS)
        names, numbers, view = _buffers.value = names, numbers, ffi.buffer(numbers)
    n = _describe(cdef, names, _TEXT_MAX, numbers)
    return _unpack(names, n).decode("utf-8", "replace").split("\0"), _ints(view)


def on_register_kernel(cdef, st) -> int:
    """Validates and keeps one kernel (the core's TF_RegisterKernelBuilder
    hook)."""
    f, v = _read(cdef)
    op, dev = f[0], f[1]
    plugin_id, outside, too_long, overflow, no_compute, priority, nc, nh = v[:8]
    if outside:
        return _refuse_late(f"kernel for op {op!r} on {dev}", plugin_id, st)
    rec = record_for(plugin_id)
    where = rec.path if rec else "an unknown plugin"
    k = None
    if too_long:
        reason = (f"kernel for op {op[:40]!r}... on {dev[:40]}: " + "; ".join(
            why for bit, why in _LONG_NAMES.items() if too_long & bit))
        code = 3
    elif no_compute:
        reason = (f"kernel for op {op!r} on {dev}: compute_func is NULL "
                  "(TF_NewKernelBuilder needs a compute function)")
        code = 3
    elif overflow:
        reason = (f"kernel for op {op!r} on {dev}: too many type constraints or host-memory "
                  f"arguments (at most {lib.PG_MAX_CONSTRAINTS} and {lib.PG_MAX_HOST_ARGS})")
        code = 3
    else:
        constraints = {}
        bad_type = None
        for i in range(nc):
            enum = v[8 + i]
            try:
                constraints[f[3 + i]] = _from_enum(enum)
            except KeyError:
                constraints[f[3 + i]] = None
                bad_type = enum
        host = frozenset(f[3 + nc:3 + nc + nh]) if nh else _NO_HOST_ARGS
        k = registry.KernelDef(op, dev, constraints, host, priority=priority, label=f[2],
                               plugin=rec, cdef=cdef)
        reason = registry.check_kernel(k)
        if reason and bad_type is not None:
            reason += f" (TF_DataType {bad_type})"
        code = 5 if reason and "unknown op" in reason else 6 if reason and reason.startswith("duplicate") else 3
    if reason:
        set_status(st, code, reason)
        log.warning("plugin %s: kernel rejected: %s", where, reason)
        if rec is not None:
            rec.rejected.append(reason)
        return 0
    registry.register_kernel(k)
    if rec is not None:
        rec.kernels += 1
    return 1


def on_register_op(b, st) -> int:
    name = cstr(b.name) or ""
    if b.outside_init:
        return _refuse_late(f"op {name[:80]!r}", b.plugin_id, st)
    rec = record_for(b.plugin_id)
    specs = lambda arr, n: [cstr(arr[i]) or "" for i in range(n)]
    try:
        op = registry.make_op_def(
            name, specs(b.inputs, b.num_inputs), specs(b.outputs, b.num_outputs),
            specs(b.attrs, b.num_attrs), exact_shapes=False,
            source=rec.path if rec else "a plugin", is_commutative=bool(b.is_commutative),
            is_stateful=bool(b.is_stateful),
            deprecation=cstr(b.deprecation) if b.deprecation != ffi.NULL else None)
        if b.shape_fn != ffi.NULL:
            op.shape_fn = _c_shape_fn(b.shape_fn, op)
        registry.register_op(op)
    except registry.OpSpecError as exc:
        reason, code = f"op {name!r}: {exc}", 3
    except Exception as exc:  # AlreadyExistsError
        reason, code = str(exc), getattr(exc, "code", 3)
    else:
        if rec is not None:
            rec.ops += 1
        return 1
    set_status(st, code, reason)
    log.warning("plugin %s: op rejected: %s", rec.path if rec else "?", reason)
    if rec is not None:
        rec.rejected.append(reason)
    return 0


def _c_shape_fn(fnptr, op: registry.OpDef):
    """Wraps a plugin's C shape function for `op` as a Python shape function.
    Outputs it leaves of unknown rank come back as None (the kernel's
    allocation then decides). Inputs and outputs are flattened (a list
    argument counts once per element)."""

    def shape_fn(shapes, attrs, values):
        n_out = len(op.flat_outputs(attrs))
        ranks = ffi.new("int[]", [len(s) for s in shapes] or [0])
        dims = ffi.new("int64_t[]", [d for s in shapes for d in s] or [0])
        out_ranks = ffi.new("int[]", max(n_out, 1))
        out_dims = ffi.new("int64_t[]", max(n_out, 1) * lib.TF_MAX_DIMS)
        st = status()
        lib.pg_run_shape_fn(fnptr, len(shapes), ranks, dims, make_c_attrs(attrs, op), n_out,
                            out_ranks, out_dims, st)
        code, msg = code_and_message(st)
        if code:
            raise errors.make_error(code, f"shape function: {msg}")
        out = []
        for i in range(n_out):
            r = out_ranks[i]
            out.append(None if r < 0 else tuple(out_dims[i * lib.TF_MAX_DIMS + j] for j in range(r)))
        return out
    return shape_fn


_core.hooks.register_kernel = on_register_kernel
_core.hooks.register_op = on_register_op
