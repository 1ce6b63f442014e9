"""Dispatch: op call -> attributes and types -> placement -> kernel -> run.

The first call with a given (op, scope, input dtypes and devices, explicit
attributes) builds a ``Plan``: validated attributes with defaults and type
attributes filled in, the chosen device, the kernel and (for plugins) its
kernel instance, and the copies each input needs. Later calls with the same
signature reuse the plan: the hot path is a dict lookup, the copies, the
shape function and one call into the core.

The caches are bounded (least recently used entries go first): plans
(``PLAN_CACHE_SIZE``), kernel instances (``INSTANCE_CACHE_SIZE``; an evicted
instance is freed once no plan uses it and the device has run the work
queued for it) and each op's raw_ops fast-path table (``FAST_CACHE_SIZE``,
oldest first).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .._core import code_and_message, ffi, lib, raw_status, status, thread_state as _tls
from ..framework import config, dtypes, errors, registry
from ..framework.registry import KernelDef, OpDef
from ..framework.tensor import Tensor, to_array
from . import constants, hooks, placement
from .constants import host_input, wrap_host as _wrap_host
from .attrs import make_c_attrs
from .cache import LRUCache, put_bounded
from .device import CpuDevice, Device

PLAN_CACHE_SIZE = 4096
INSTANCE_CACHE_SIZE = 1024
FAST_CACHE_SIZE = 64

_plans = LRUCache(PLAN_CACHE_SIZE)
_instances = LRUCache(INSTANCE_CACHE_SIZE)
_plans_generation = [0]  # config.generation when the plan caches were last cleared


def invalidate() -> None:
    """Forgets cached plans (something was registered: ``config.generation``
    moved on). Plans made under other settings stay: they are keyed by
    ``config.version``, found again when the settings come back. Kernel
    instances stay cached: they depend only on the kernel, the device and
    the attributes."""
    _plans.clear()
    for op in list(registry.OPS.values()):
        op.fast.clear()
    _plans_generation[0] = config.generation[0]


UNSET = object()
"""An attribute not given to a raw op (its default applies)."""

STAND_INS: set = set()
"""Types whose objects stand for a tensor where an op expects one, through
their ``__pg_tensor__()`` (``pg.Variable``: its current value). A raw_ops
call given one reads it first and goes on as a call with tensors, so that
it can take the fast path."""

FAST_ATTR_KINDS = frozenset({"type", "bool", "int", "float", "string", "list(int)"})
"""The attribute kinds whose given values key the raw_ops fast path (the
generated code checks each value's exact type: raw_ops._PLAIN_ATTR)."""


def _fast_key(op: OpDef, scope, inputs: list, version: int, given: dict) -> tuple | None:
    """The key under which the raw_ops fast path finds this call's plan:
    scope, the inputs' dtypes and devices, the settings version and, where
    attributes were given, every attribute's value (UNSET where not given;
    a list as a tuple) in definition order; None when an attribute of
    another kind was given, or a value that cannot be part of a key (the
    fast path never looks such a call up)."""
    key = (scope, *[x for t in inputs for x in (t._dtype, t._dev)], version)
    if given:
        attrs = op.attrs
        if any(attrs[a].kind not in FAST_ATTR_KINDS for a in given):
            return None
        key += tuple([tuple(v) if type(v) in (list, tuple) else v
                      for v in (given.get(a, UNSET) for a in attrs)])
        try:
            hash(key)
        except TypeError:  # (an array given for a list of ints, say)
            return None
    return key


def _is_simple(p: "Plan") -> bool:
    """Whether later calls with this signature can take the raw_ops fast path:
    a plugin kernel, no copies, device outputs (not a list of them) whose
    shapes the shape function gives from the inputs' shapes and host
    values. Host-memory inputs only where the shape function reads them:
    without copies such an input is a CPU tensor, and the fast path of those
    ops passes the core handle the tensor keeps (see raw_ops._fast_path).
    Given attributes are part of the fast path's key (``_fast_key``)."""
    op = p.op
    return (p.kinst is not None and p.moves is None
            and (not p.any_host_in or bool(op.host_value_inputs))
            and p.n_out >= 1 and not any(p.out_host)
            and op.shape_fn is not None and op.exact_shapes)


def kernel_error(p: "Plan", st) -> errors.OpError:
    """The typed error of a failed kernel call."""
    code, msg = code_and_message(st)
    where = p.kernel.plugin.path if p.kernel.plugin is not None else "?"
    return errors.make_error(code, f"{p.op.name} on {p.device.short_name}: {msg} "
                             f"(kernel from {where})", op=p.op.name, device=p.device.name)


class Plan:
    # shape_memo: output shapes the raw_ops fast path computed for this plan,
    # keyed by the input shapes and the bytes of the host values the shape
    # function reads (a pure function of those, the plan fixing the rest).
    __slots__ = ("op", "device", "kernel", "kinst", "moves", "attrs", "out_dtypes",
                 "value_idx", "note", "n_out", "host_in", "any_host_in", "out_host",
                 "shape_memo")


SHAPE_MEMO_SIZE = 256
"""Output shapes a plan remembers for the fast path (emptied when full)."""


def memo_shape(memo: dict, key: tuple, shape: tuple) -> None:
    """Remembers `shape` under `key` in a plan's shape_memo."""
    if len(memo) >= SHAPE_MEMO_SIZE:
        memo.clear()
    memo[key] = shape


# ------------------------------------------------------------------ attributes

def _check_attr(op: OpDef, a: registry.AttrDef, v: Any) -> Any:
    where = f"{op.name}: attribute {a.name!r}"
    k = a.kind
    try:
        if k == "type":
            v = dtypes.as_dtype(v)
            if a.allowed is not None and v not in a.allowed:
                raise errors.InvalidArgumentError(
                    f"{where} = {v.name} is not allowed; allowed: "
                    f"{', '.join(d.name for d in a.allowed)}", op=op.name)
        elif k == "bool":
            if not isinstance(v, (bool, np.bool_)):
                raise TypeError(f"{where} must be a bool, got {v!r}")
            v = bool(v)
        elif k == "int":
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"{where} must be an int, got {v!r}")
            v = int(v)
            if a.minimum is not None and v < a.minimum:
                raise errors.InvalidArgumentError(f"{where} = {v} must be >= {a.minimum}", op=op.name)
        elif k == "float":
            v = float(v)
        elif k == "string":
            if isinstance(v, bytes):
                v = v.decode()
            if not isinstance(v, str):
                raise TypeError(f"{where} must be a string, got {v!r}")
            if a.allowed is not None and v not in a.allowed:
                raise errors.InvalidArgumentError(
                    f"{where} = {v!r} is not allowed; allowed: {', '.join(map(repr, a.allowed))}",
                    op=op.name)
        elif k.startswith("list(") or k == "shape":
            if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__"):
                raise TypeError(f"{where} must be a list, got {v!r}")
            inner = "int" if k == "shape" else k[5:-1]
            item = registry.AttrDef(a.name, inner, allowed=a.allowed)
            v = tuple(_check_attr(op, item, x) for x in v)
            if a.minimum is not None and len(v) < a.minimum:
                raise errors.InvalidArgumentError(
                    f"{where} needs at least {a.minimum} elements, got {len(v)}", op=op.name)
    except TypeError as exc:
        raise TypeError(str(exc)) from None
    return v


def resolve_attrs(op: OpDef, given: dict, inputs: list[Tensor]) -> dict:
    """Validates explicit attributes, infers type attributes from the inputs,
    and fills defaults."""
    attrs = {}
    for name, v in given.items():
        a = op.attrs.get(name)
        if a is None:
            raise TypeError(f"{op.name} got an unexpected attribute {name!r}; its attributes "
                            f"are: {', '.join(op.attrs) or 'none'}")
        attrs[name] = _check_attr(op, a, v)
    args = op.inputs
    if op.has_list_inputs:
        for name, n in _list_lengths(op, attrs, len(inputs)).items():
            attrs[name] = _check_attr(op, op.attrs[name], n)
        args = op.flat_inputs(attrs)
    if len(args) != len(inputs):
        raise errors.InvalidArgumentError(
            f"{op.name}: expected {len(args)} input tensors, got {len(inputs)}", op=op.name)
    for arg, t in zip(args, inputs):
        if arg.type_attr is not None:
            seen = attrs.get(arg.type_attr)
            if seen is None:
                attrs[arg.type_attr] = _check_attr(op, op.attrs[arg.type_attr], t.dtype)
            elif seen is not t.dtype:
                raise errors.InvalidArgumentError(
                    f"{op.name}: input {arg.name!r} has dtype {t.dtype.name} but {arg.type_attr} "
                    f"is {seen.name} (all inputs of type {arg.type_attr} must match)", op=op.name)
        elif t.dtype is not arg.dtype:
            raise errors.InvalidArgumentError(
                f"{op.name}: input {arg.name!r} must be {arg.dtype.name}, got {t.dtype.name}",
                op=op.name)
    for name, a in op.attrs.items():
        if name not in attrs:
            if not a.has_default:
                raise TypeError(f"{op.name} needs attribute {name!r} ({a.kind})")
            attrs[name] = _check_attr(op, a, a.default) if a.kind != "type" else a.default
    return attrs


def _list_lengths(op: OpDef, attrs: dict, n_inputs: int) -> dict:
    """The lengths of list inputs that `attrs` does not give, inferred from
    the number of (flattened) inputs when one length is missing. (The element
    types of a type-list input "x: Targs" must be given.)"""
    untyped = sorted(a.type_list_attr for a in op.inputs
                     if a.type_list_attr and a.type_list_attr not in attrs)
    if untyped:
        raise TypeError(f"{op.name} needs attributes {', '.join(untyped)} (the element types "
                        "of its list inputs), or its list inputs given as lists")
    missing = {a.number_attr for a in op.inputs if a.number_attr and a.number_attr not in attrs}
    if not missing:
        return {}
    uses = [a for a in op.inputs if a.number_attr in missing]
    if len(uses) != 1:
        raise TypeError(f"{op.name} needs attributes {', '.join(sorted(missing))} "
                        "(the lengths of its list inputs)")
    n = n_inputs - (len(op.flat_inputs({**attrs, uses[0].number_attr: 0})))
    return {uses[0].number_attr: max(n, 0)}


def input_args(op: OpDef, given: dict, n_inputs: int) -> list[registry.ArgDef]:
    """The argument of each of `n_inputs` flattened inputs of a call."""
    if not op.has_list_inputs:
        return op.inputs
    return op.flat_inputs({**given, **_list_lengths(op, given, n_inputs)})


def flatten_inputs(op: OpDef, inputs: list, given: dict) -> tuple[list, dict]:
    """Inputs in op-definition order, where a list argument is a list or tuple,
    -> the flattened inputs and `given` with the length of each list input
    (N of "values: N * T") set, or checked where the caller gave it."""
    flat: list = []
    lengths: dict = {}
    for arg, x in zip(op.inputs, inputs):
        if not arg.is_list:
            flat.append(x)
            continue
        if not isinstance(x, (list, tuple)):
            what = (f"{arg.number_attr} * {arg.type_attr or arg.dtype.name}" if arg.number_attr
                    else arg.type_list_attr)
            raise TypeError(f"{op.name}: input {arg.name!r} is a list argument ({what}): pass "
                            f"a list or tuple of tensors, not {type(x).__name__}")
        if arg.type_list_attr is not None:
            lengths[arg.type_list_attr] = _list_types(op, arg, x, given)
            flat.extend(x)
            continue
        expect = lengths.get(arg.number_attr, given.get(arg.number_attr))
        if expect is not None and expect != len(x):
            raise errors.InvalidArgumentError(
                f"{op.name}: input {arg.name!r} has {len(x)} elements but attribute "
                f"{arg.number_attr} is {expect}", op=op.name)
        lengths[arg.number_attr] = len(x)
        flat.extend(x)
    return flat, ({**given, **lengths} if lengths else given)


def _list_types(op: OpDef, arg: registry.ArgDef, values: list, given: dict) -> list:
    """The element types of a type-list input given as a list: those of
    attribute `arg.type_list_attr` when given (checked against the length),
    else each value's dtype."""
    if arg.type_list_attr in given:
        types = [dtypes.as_dtype(t) for t in given[arg.type_list_attr]]
        if len(types) != len(values):
            raise errors.InvalidArgumentError(
                f"{op.name}: input {arg.name!r} has {len(values)} elements but attribute "
                f"{arg.type_list_attr} lists {len(types)} types", op=op.name)
        return types
    return [x.dtype if type(x) is Tensor else dtypes.as_dtype(to_array(x, None).dtype)
            for x in values]


def group_outputs(op: OpDef, attrs: dict, outs: list) -> list:
    """Flattened outputs -> one entry per output argument (a list for a list
    output); `attrs` must give the length of each list output unless it has
    a default."""
    grouped, i = [], 0
    for arg in op.outputs:
        if arg.number_attr is None:
            grouped.append(outs[i])
            i += 1
        else:
            n = attrs.get(arg.number_attr, op.attrs[arg.number_attr].default)
            grouped.append(list(outs[i:i + n]))
            i += n
    return grouped


def call(op: OpDef, inputs: list, given: dict) -> list:
    """Runs `op` with `inputs` in op-definition order, a list argument given
    as a list or tuple; returns one entry per output argument (a list for a
    list output). For ops without list arguments this is ``execute``. A
    call with tensors only whose signature ran before takes the fast path
    (``_call_fast``)."""
    if _hooks_fast[0]:
        outs = _call_fast(op, inputs, given)
        if outs is not None:
            return outs
    if op.has_list_inputs:
        inputs, given = flatten_inputs(op, inputs, given)
    outs = execute(op, inputs, given)
    return group_outputs(op, given, outs) if op.has_list_outputs else outs


def _call_fast(op: OpDef, inputs: list, given: dict) -> list | None:
    """The fast path of an op with list arguments (Pack, Unpack, Split,
    ConcatV2, AddN...): when every input is a tensor (each list argument a
    list or tuple of them, of its declared kind) and a call of this
    signature (scope, dtypes and devices, list lengths, given attributes)
    made a simple plan before, its kernel runs at once, as the raw_ops fast
    path of the other ops does; None sends the call down the general path
    (which makes and keeps the plan)."""
    flat: list = []
    lengths = None
    for arg, x in zip(op.inputs, inputs):
        if arg.is_list:
            tx = type(x)
            if (tx is not list and tx is not tuple) or arg.number_attr is None:
                return None
            for t in x:
                if type(t) is not Tensor:
                    return None
            flat.extend(x)
            if lengths is None:
                lengths = {}
            n = lengths.setdefault(arg.number_attr, len(x))
            if n != len(x) or given.get(arg.number_attr, n) != n:
                return None  # (the general path raises the mismatch)
        elif type(x) is Tensor:
            flat.append(x)
        else:
            return None
    attrs = {**given, **lengths} if lengths else given
    key = _fast_key(op, _scope_get(), flat, config.version[0], attrs)
    p = op.fast.get(key) if key is not None else None
    if p is None:
        return None
    for t, h in zip(flat, p.host_in):
        if h and t._h is None:
            return None
    outs = _run_plugin(p, flat, _out_shapes(op, p, flat))
    if _hooks_active[0]:
        hooks.observe(op, flat, attrs, outs, p.attrs)
    return group_outputs(op, attrs, outs) if op.has_list_outputs else outs


def _attrs_key(given: dict) -> tuple:
    """Attribute values as a key. Values' types are part of it: ``1``,
    ``1.0`` and ``True`` are equal in Python but not the same attribute
    value (an int where a bool belongs must still meet its typed error)."""
    if not given:
        return ()
    return tuple(sorted(
        (k, type(v), (tuple(v), tuple(map(type, v))) if isinstance(v, list) else v)
        for k, v in given.items()))


# ------------------------------------------------------------------- placement

def _type_attrs(op: OpDef, attrs: dict) -> dict:
    return {k: v for k, v in attrs.items() if op.attrs[k].kind == "type"}


def _resource_device(op: OpDef, input_devices: list):
    """The device of the first resource input, or None: an op with a
    resource input runs where the resource lives (as in TensorFlow)."""
    for arg, d in zip(op.inputs, input_devices):
        if arg.dtype is dtypes.resource:
            return d
    return None


def _choose(op: OpDef, attrs: dict, input_devices: list, scope) -> tuple[Any, KernelDef, str]:
    """Picks (device, kernel, note) for a call whose inputs are on
    `input_devices` (the graph placer uses the same rules)."""
    types = _type_attrs(op, attrs)
    pinned = _resource_device(op, input_devices) if op.resource_inputs else None
    if pinned is not None:
        k = registry.find_kernel(op.name, pinned.device_type, types)
        if k is None:
            sig = ", ".join(f"{n}={v.name}" for n, v in sorted(types.items()))
            raise errors.NotFoundError(
                f"no kernel for op {op.name} with {sig or 'these attributes'} on "
                f"{pinned.short_name}, where its resource input lives (an op on a "
                f"variable runs on the variable's device). Registered kernels: "
                f"{registry.describe_kernels(op.name)}.", op=op.name, device=pinned.name)
        return pinned, k, ""
    if scope is not None:
        k = registry.find_kernel(op.name, scope.device_type, types)
        if k is not None:
            return scope, k, ""
        sig = ", ".join(f"{n}={v.name}" for n, v in sorted(types.items()))
        if isinstance(scope, CpuDevice) or not config.get_soft_device_placement():
            raise errors.NotFoundError(
                f"no kernel for op {op.name} with {sig or 'these attributes'} on "
                f"{scope.short_name}. Registered kernels: {registry.describe_kernels(op.name)}. "
                "Place the op on another device, or turn on soft placement "
                "(pg.config.set_soft_device_placement(True)) to fall back to CPU.",
                op=op.name, device=scope.name)
        k = registry.find_kernel(op.name, "CPU", types)
        if k is None:
            raise errors.NotFoundError(
                f"no kernel for op {op.name} with {sig or 'these attributes'} on "
                f"{scope.short_name}, and no CPU kernel to fall back to. Registered kernels: "
                f"{registry.describe_kernels(op.name)}.", op=op.name, device=scope.name)
        return placement.CPU, k, f"soft placement: no {scope.short_name} kernel for {sig}"
    candidates = [d for d in input_devices if isinstance(d, Device)]
    candidates += [d for d in placement.all_devices() if isinstance(d, Device)]
    for d in candidates:
        k = registry.find_kernel(op.name, d.device_type, types)
        if k is not None:
            return d, k, ""
    k = registry.find_kernel(op.name, "CPU", types)
    if k is None:
        raise errors.NotFoundError(
            f"no kernel for op {op.name} on any device; registered kernels: "
            f"{registry.describe_kernels(op.name)}", op=op.name)
    return placement.CPU, k, ""


def _kernel_instance(op: OpDef, k: KernelDef, dev: Device, attrs: dict):
    key = (id(k), dev, _attrs_key(attrs), config.tensor_float_32_execution_enabled())
    inst = _instances.get(key)
    if inst is not None:
        return inst
    full = dict(attrs)
    full["_allow_tf32"] = config.tensor_float_32_execution_enabled()
    cattrs = make_c_attrs(full, op)
    # A kernel sees list arguments flattened (TF_NumInputs counts every element).
    in_args, out_args = op.flat_inputs(attrs), op.flat_outputs(attrs)
    names = [ffi.new("char[]", a.name.encode()) for a in in_args]
    in_host = bytes(1 if a.name in k.host_args else 0 for a in in_args)
    out_host = bytes(1 if a.name in k.host_args else 0 for a in out_args)
    out_types = [_out_dtype(op, a, attrs).enum for a in out_args]
    st = status()
    inst = lib.pg_kernel_create(k.cdef, dev._c, cattrs, len(in_args),
                                ffi.new("char*[]", names or [ffi.NULL]), in_host or b"\0",
                                len(out_args), ffi.new("TF_DataType[]", out_types or [0]),
                                out_host or b"\0", st)
    code, msg = code_and_message(st)
    if inst == ffi.NULL:
        raise errors.make_error(code or 13, f"{op.name} on {dev.short_name}: creating the kernel "
                                f"from {k.plugin.path if k.plugin else '?'} failed: {msg}",
                                op=op.name, device=dev.name)
    # The cache's reference, dropped when the object is collected; a graph
    # plan that runs the instance holds its own (pg_plan_add_kernel).
    inst = ffi.gc(inst, lib.pg_kernel_release)
    _instances.put(key, inst)
    return inst


def _out_dtype(op: OpDef, arg: registry.ArgDef, attrs: dict) -> dtypes.DType:
    return attrs[arg.type_attr] if arg.type_attr is not None else arg.dtype


def _build_plan(op: OpDef, inputs: list[Tensor], given: dict, scope) -> Plan:
    attrs = resolve_attrs(op, given, inputs)
    dev, k, note = _choose(op, attrs, [t._dev for t in inputs], scope)
    p = Plan()
    p.op, p.device, p.kernel, p.attrs, p.note = op, dev, k, attrs, note
    p.shape_memo = {}
    in_args, out_args = op.flat_inputs(attrs), op.flat_outputs(attrs)
    p.out_dtypes = [_out_dtype(op, a, attrs) for a in out_args]
    p.n_out = len(out_args)
    p.host_in = tuple(a.name in k.host_args for a in in_args)
    p.any_host_in = any(p.host_in)
    p.out_host = tuple(a.name in k.host_args for a in out_args)
    p.moves = tuple(
        (placement.CPU if (h or isinstance(dev, CpuDevice)) else dev)
        if (placement.CPU if (h or isinstance(dev, CpuDevice)) else dev) is not t._dev
        and t._dtype is not dtypes.resource else None  # resources never move
        for t, h in zip(inputs, p.host_in))
    if not any(m is not None for m in p.moves):
        p.moves = None
    p.value_idx = {n: next(i for i, a in enumerate(in_args) if a.name == n)
                   for n in op.host_value_inputs}
    for n, i in p.value_idx.items():
        if not p.host_in[i]:
            raise errors.InternalError(
                f"{op.name}: the kernel on {dev.short_name} does not take {n!r} in host memory")
    p.kinst = _kernel_instance(op, k, dev, attrs) if isinstance(dev, Device) else None
    return p


# ------------------------------------------------------------------- execution

def convert_inputs(op: OpDef, inputs: list, given: dict) -> list[Tensor]:
    """Turns non-Tensor inputs into CPU tensors, using the dtype of a Tensor
    input (or attribute) of the same type attribute when there is one, else
    that of the first value converted for it (TensorFlow's rule:
    ``tf.maximum(0., [1, -1])`` is float32, ``tf.multiply(float64_array, 42)``
    float64)."""
    args = input_args(op, given, len(inputs))
    hints: dict = {}
    for arg, x in zip(args, inputs):
        if isinstance(x, Tensor) and arg.type_attr:
            hints.setdefault(arg.type_attr, x.dtype)
    out = []
    for arg, x in zip(args, inputs):
        if isinstance(x, Tensor):  # (a traced symbolic tensor too: a tape sees those)
            out.append(x)
            continue
        dt = arg.dtype or given.get(arg.type_attr) or hints.get(arg.type_attr)
        as_tensor = getattr(x, "__pg_tensor__", None)
        if as_tensor is not None:  # an object that stands for a tensor (a Variable)
            t = as_tensor(dt)
        else:
            try:
                a = to_array(x, dt)
            except TypeError as exc:
                raise TypeError(f"{op.name}: input {arg.name!r}: {exc}") from None
            t = Tensor._from_array(a, placement.CPU)
        if dt is None and arg.type_attr:
            hints[arg.type_attr] = t.dtype
        out.append(t)
    return out


def execute(op: OpDef, inputs: list, given: dict) -> list[Tensor]:
    """Runs `op` on `inputs` (in op-definition order, list arguments
    flattened) with attributes `given` (through the installed hooks, if any:
    see ``runtime.hooks``); returns the flattened outputs. ``call`` takes and
    returns list arguments as lists."""
    if _hooks_active[0]:
        return hooks.call(op, inputs, given, _execute)
    return _execute(op, inputs, given)


def _execute(op: OpDef, inputs: list, given: dict) -> list[Tensor]:
    raw = None  # the inputs as given, when some were not tensors
    for x in inputs:
        if type(x) is not Tensor:
            raw = inputs
            inputs = convert_inputs(op, inputs, given)
            break
    scope = _scope_get()
    key = (op.name, scope, tuple([(t._dtype, t._dev) for t in inputs]),
           _attrs_key(given) if given else (), config.version[0])
    p = _plans.get(key)
    if p is None:
        if _plans_generation[0] != config.generation[0]:
            invalidate()  # drop plans made before the last registration
        p = _build_plan(op, inputs, given, scope)
        _plans.put(key, p)
        if _is_simple(p) and not config._log_placement:
            fast_key = _fast_key(op, scope, inputs, key[4], given)
            if fast_key is not None:
                put_bounded(op.fast, fast_key, p, FAST_CACHE_SIZE)
    if p.moves is not None:
        for i, m in enumerate(p.moves):
            if m is not None:
                # a Python scalar: the cached device constant (runtime.constants)
                c = constants.lookup(raw[i], inputs[i]._dtype, m, inputs[i]) \
                    if raw is not None else None
                inputs[i] = c if c is not None else inputs[i]._copy_to(m)
                if config._log_placement:
                    config.record_placement("_Copy", m.name, f"input "
                                            f"{op.flat_inputs(p.attrs)[i].name} of {op.name}")
    shapes = _out_shapes(op, p, inputs)
    if p.kinst is None:
        outs = _run_cpu(p, inputs, shapes)
    else:
        outs = _run_plugin(p, inputs, shapes)
    if config._log_placement:
        config.record_placement(op.name, p.device.name, p.note)
    return outs


def _out_shapes(op: OpDef, p: Plan, inputs: list[Tensor]) -> list | None:
    """The output shapes `op`'s shape function gives for `inputs` under
    plan `p` (None without a shape function)."""
    if op.shape_fn is None:
        return None
    values = {n: inputs[i]._a for n, i in p.value_idx.items()} if p.value_idx else None
    return op.shape_fn([t._shape for t in inputs], p.attrs, values)


_scope_get = placement._scope.get
_hooks_active = hooks.active
_hooks_fast = hooks.fast

# The graph layer places nodes, makes kernel instances and folds constants
# with exactly the rules of eager calls, through these names.
choose_device = _choose
kernel_instance = _kernel_instance
output_dtype = _out_dtype
execute_unhooked = _execute


def _run_cpu(p: Plan, inputs: list[Tensor], shapes) -> list[Tensor]:
    arrays = [t._a for t in inputs]
    p.kernel._cpu_calls += 1
    try:
        res = p.kernel.fn(arrays, p.attrs)
    except errors.OpError:
        raise
    except (ValueError, FloatingPointError, ArithmeticError) as exc:
        raise errors.InvalidArgumentError(f"{p.op.name} on CPU:0: {exc}", op=p.op.name) from None
    except MemoryError as exc:
        raise errors.ResourceExhaustedError(
            f"{p.op.name} on CPU:0: out of memory ({exc or 'the allocation failed'}); make the "
            "tensors smaller or free memory", op=p.op.name) from None
    out = []
    for i, r in enumerate(res):
        dt = p.out_dtypes[i]
        r = np.asarray(r)
        if r.dtype != dt.as_numpy_dtype:
            r = r.astype(dt.as_numpy_dtype)
        out.append(Tensor._from_array(r, placement.CPU, dt))
    return out


class Prepared:
    """One op with fixed attributes on one device, for a caller that runs it
    many times with inputs of one signature (a process group's collectives).

    ``prepared(inputs)`` takes the inputs flattened as ``execute`` takes
    them (a list argument's tensors in place, its length in `given`) and
    returns the flattened outputs. The first call takes the general path
    under the device's scope and keeps the plan it made; a later call whose
    inputs are tensors of the same dtypes and devices runs the shape
    function and the kernel at once, skipping the plan lookup and the
    attribute key. Hooks that change or time execution (profiler, tracing),
    placement logging, a configuration change, or inputs of another
    signature take the general path again, so the outcome is the same as
    ``execute``'s; a watching hook (a gradient tape) sees the call through
    ``hooks.observe``."""

    __slots__ = ("op", "device", "given", "plan", "sig", "version")

    def __init__(self, op_name: str, device: Any, given: dict):
        self.op = registry.OPS[op_name]
        self.device = device
        self.given = dict(given)
        self.plan: Plan | None = None
        self.sig: tuple = ()
        self.version = -1

    def fast_plan(self, inputs: list) -> Plan | None:
        """The plan a call on `inputs` would run at once, or None where the
        call takes the general path (see the class)."""
        p = self.plan
        if (p is None or not _hooks_fast[0] or self.version != config.version[0]
                or config._log_placement or len(inputs) != len(self.sig)):
            return None
        for t, (dt, dev) in zip(inputs, self.sig):
            if type(t) is not Tensor or t._dtype is not dt or t._dev is not dev:
                return None
        return p

    def __call__(self, inputs: list, donated: int = 0) -> list[Tensor]:
        """`donated` (bit i: input i) marks inputs the caller gives up: on the
        fast path a kernel may write its output over such an input's memory
        (``pg_kernel_run1_donated``). The caller must not use them after the
        call (``Tensor._give_up``)."""
        p = self.fast_plan(inputs)
        if p is not None:
            outs = _run_plugin(p, inputs, _out_shapes(self.op, p, inputs), donated)
            if _hooks_active[0]:
                hooks.observe(self.op, list(inputs), self.given, outs, p.attrs)
            return outs
        token = placement._scope.set(self.device)
        try:
            outs = execute(self.op, inputs, self.given)
        finally:
            placement._scope.reset(token)
        if all(type(t) is Tensor for t in inputs):
            sig = tuple([(t._dtype, t._dev) for t in inputs])
            key = (self.op.name, self.device, sig, _attrs_key(self.given), config.version[0])
            p = _plans.get(key)
            if p is not None and p.kinst is not None and p.moves is None:
                self.plan, self.sig, self.version = p, sig, key[4]
        return outs


def run_group(calls: list[tuple[Prepared, list]], donated: int = 0) -> list[Tensor] | None:
    """Runs prepared ops of one output each at once, as the participants of
    one collective (``pg_kernel_run1_group``: the first on this thread, the
    others on the core's threads, the interpreter's lock released); their
    outputs in order, or the first participant's error once all returned.
    None, having run nothing, where one of them would not take its fast
    path (its first call, a hook, another signature, a host-memory output):
    the caller then calls them its own way. `donated` (bit i: input i) is
    every participant's mask of donated inputs (``Prepared.__call__``)."""
    plans = []
    for prep, inputs in calls:
        p = prep.fast_plan(inputs)
        if p is None or p.n_out != 1 or p.out_host[0]:
            return None
        plans.append(p)
    expects: list = []
    shapes = []
    for p, (prep, inputs) in zip(plans, calls):
        s = _out_shapes(prep.op, p, inputs)
        shape = s[0] if s is not None else None
        shapes.append(shape)
        expects.extend((len(shape), *shape) if shape is not None else (-1,))
    n = len(plans)
    outs = ffi.new("TF_Tensor*[]", n)
    sts = _group_statuses(n)
    handles: list = []
    temps: list = []
    try:
        for p, (prep, inputs) in zip(plans, calls):
            if p.any_host_in:
                t, h = _wrap_host_inputs(p, inputs)
                temps.extend(t or ())
            else:
                h = [x._h for x in inputs]
            handles.extend(h)
        failed = lib.pg_kernel_run1_group(n, [p.kinst for p in plans], handles, expects,
                                          [donated] * n if donated else ffi.NULL, outs, sts)
    finally:
        for w in temps:
            lib.TF_DeleteTensor(w)
    results = []
    for i, p in enumerate(plans):
        h = outs[i]
        if h == ffi.NULL:
            results.append(None)
            continue
        shape = shapes[i]
        if shape is None:
            v = ffi.cast("pg_tensor_view*", h)
            shape = tuple(v.dims[0:v.num_dims])
        results.append(Tensor._from_handle(h, p.device, p.out_dtypes[0], shape))
    if failed:
        i = next(i for i, t in enumerate(results) if t is None)
        raise kernel_error(plans[i], sts[i])
    if _hooks_active[0]:
        for (prep, inputs), p, out in zip(calls, plans, results):
            hooks.observe(prep.op, list(inputs), prep.given, [out], p.attrs)
    return results


def _group_statuses(n: int) -> list:
    """`n` TF_Status objects of the calling thread for run_group."""
    sts = getattr(_tls, "group_statuses", None)
    if sts is None:
        sts = _tls.group_statuses = []
    while len(sts) < n:
        sts.append(ffi.gc(lib.TF_NewStatus(), lib.TF_DeleteStatus))
    return sts[:n]


def _wrap_host_inputs(p: Plan, inputs: list[Tensor]) -> tuple[list, list]:
    """The core handles of a call's inputs. A CPU tensor passed to a
    host-memory input keeps the handle made over its array for later calls
    (as ``host_input`` does); another host value is wrapped for this call
    only (`temps`, deleted after it)."""
    temps, handles = [], []
    for t, h in zip(inputs, p.host_in):
        if h and t._h is not None:  # a host tensor with a core handle
            handles.append(t._h)
        elif h:
            w = _wrap_host(t._a, t._dtype)
            if t._dev is placement.CPU:
                t._h = w  # deleted with the tensor, which holds the array
            else:
                temps.append(w)
            handles.append(w)
        else:
            handles.append(t._h)
    return temps, handles


def expected_shapes(shapes) -> tuple:
    """The `expect` argument of pg_kernel_run: for each output its rank
    (-1 when the shape function left it unknown) and its dims."""
    out: list = []
    for s in shapes:
        if s is None:
            out.append(-1)
        else:
            out.append(len(s))
            out.extend(s)
    return tuple(out)


# The `expect` arrays of single-output calls, by output shape, ready for
# pg_kernel_run (the raw_ops fast path looks them up instead of converting a
# tuple on every call). Bounded: beyond EXPECT_CACHE_SIZE shapes the oldest
# entry goes.
EXPECT_CACHE_SIZE = 256
expects: dict = {}


def expect_array(shape: tuple):
    """The cached `expect` array (rank, then dims) for one output of `shape`."""
    e = expects.get(shape)
    return e if e is not None else _keep_expect(shape, [len(shape), *shape])


def expect_arrays(shapes: tuple):
    """The same for the outputs of a call with several, by the tuple of
    their shapes (a tuple of tuples: never a key of one output's)."""
    e = expects.get(shapes)
    return e if e is not None else _keep_expect(shapes, list(expected_shapes(shapes)))


def _keep_expect(key: tuple, values: list):
    """Makes and keeps the `expect` array of `values` under `key`."""
    if len(expects) >= EXPECT_CACHE_SIZE:
        expects.pop(next(iter(expects)), None)
    e = expects[key] = ffi.new("int64_t[]", values)
    return e


def _run_plugin(p: Plan, inputs: list[Tensor], shapes, donated: int = 0) -> list[Tensor]:
    dev = p.device
    if p.any_host_in:
        temps, handles = _wrap_host_inputs(p, inputs)
    else:
        temps, handles = None, [t._h for t in inputs]
    n_out = p.n_out
    st = raw_status()  # pg_kernel_run resets it
    # The core checks the outputs against the shape function's shapes.
    expect = expected_shapes(shapes) if shapes is not None else ffi.NULL
    if n_out == 1:  # the output comes back as the result (no array to make)
        h = lib.pg_kernel_run1_donated(p.kinst, handles, expect, donated, st) if donated \
            else lib.pg_kernel_run1(p.kinst, handles, expect, st)
        code = 0 if h else 1
        outs = (h,)
    else:
        outs = ffi.new("TF_Tensor*[]", n_out or 1)
        code = lib.pg_kernel_run(p.kinst, handles, outs, expect, st)
    if temps:
        for w in temps:
            lib.TF_DeleteTensor(w)
    if code:
        raise kernel_error(p, st)
    if n_out == 1 and shapes is not None and shapes[0] is not None and not p.out_host[0]:
        return [Tensor._from_handle(outs[0], dev, p.out_dtypes[0], shapes[0])]
    result = []
    for i in range(n_out):
        h = outs[i]
        if shapes is not None and shapes[i] is not None:
            shape = shapes[i]  # the core checked the kernel's output against it
        else:
            v = ffi.cast("pg_tensor_view*", h)
            shape = tuple(v.dims[0:v.num_dims])
        t = Tensor._from_handle(h, dev, p.out_dtypes[i], shape)
        if p.out_host[i]:
            # a host-memory output becomes a CPU tensor
            t = Tensor._from_array(t._numpy().copy(), placement.CPU, p.out_dtypes[i])
        result.append(t)
    return result
