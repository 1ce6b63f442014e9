"""The op registry and the kernel registry.

Op definitions come from the built-in op set (``pluggable.ops.definitions``)
and from plugins (``TF_RegisterOpDefinition``); both are written in
TensorFlow's op-spec syntax and parsed here. Kernels come from plugins
(``TF_RegisterKernelBuilder``, through ``pluggable.plugins``) and from the
built-in CPU device (``pluggable.ops.cpu_kernels``). Writers register here;
dispatch only reads, and sees every registration through
``config.version``.
"""
from __future__ import annotations

import dataclasses
import re
import threading
from typing import Any, Callable

from . import config, dtypes
from .errors import AlreadyExistsError, InvalidArgumentError

_TYPE_SETS = {
    "realnumbertype": ("float32", "float64", "int32", "uint8", "int16", "int8",
                       "int64", "bfloat16", "float16", "uint32", "uint64"),
    "numbertype": ("float32", "float64", "int32", "uint8", "int16", "int8",
                   "int64", "bfloat16", "float16", "uint32", "uint64"),
    "floatingpoint": ("float16", "bfloat16", "float32", "float64"),
}
_SCALAR_KINDS = ("type", "int", "float", "bool", "string", "shape")
_LIST_KINDS = tuple(f"list({k})" for k in _SCALAR_KINDS)
_NAME = r"[A-Za-z_][A-Za-z0-9_]*"


class OpSpecError(ValueError):
    """An op-spec string does not parse."""


def _type_name(text: str) -> dtypes.DType:
    text = text.strip()
    if text.upper().startswith("DT_"):
        text = text[3:].lower()
    try:
        return dtypes.as_dtype(text)
    except TypeError:
        raise OpSpecError(f"unknown type {text!r}") from None


@dataclasses.dataclass
class AttrDef:
    name: str
    kind: str                       # "type", "int", ..., "list(int)", ...
    default: Any = None
    has_default: bool = False
    allowed: tuple | None = None    # allowed DTypes, or allowed strings
    minimum: int | None = None

    @property
    def is_type(self) -> bool:
        return self.kind == "type"


@dataclasses.dataclass
class ArgDef:
    name: str
    type_attr: str | None = None    # "T" for "x: T"
    dtype: dtypes.DType | None = None  # fixed type for "x: float"
    number_attr: str | None = None  # "N" for the list argument "x: N * T"
    type_list_attr: str | None = None  # "Targs" for the list "x: Targs" (a list(type) attr)

    @property
    def is_list(self) -> bool:
        """Whether the argument is a list of tensors (its length or element
        types are attributes)."""
        return self.number_attr is not None or self.type_list_attr is not None


def _parse_value(kind: str, text: str) -> Any:
    text = text.strip()
    if kind.startswith("list("):
        inner = kind[5:-1]
        if not (text.startswith("[") and text.endswith("]")):
            raise OpSpecError(f"default of a {kind} attribute must be a [list], got {text!r}")
        body = text[1:-1].strip()
        return [] if not body else [_parse_value(inner, p) for p in body.split(",")]
    if kind == "type":
        return _type_name(text)
    if kind == "bool":
        if text not in ("true", "false"):
            raise OpSpecError(f"bool default must be true or false, got {text!r}")
        return text == "true"
    if kind == "int":
        return int(text)
    if kind == "float":
        return float(text)
    if kind == "string":
        if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
            return text[1:-1]
        raise OpSpecError(f"string default must be quoted, got {text!r}")
    if kind == "shape":
        return _parse_value("list(int)", text)
    raise OpSpecError(f"unknown attribute kind {kind!r}")


# Parsed attribute specs by text: the built-in ops repeat the same few (a
# type attribute over the same type set), and parsing one costs regular
# expressions and a dtype lookup per listed type. parse_attr hands out copies.
_PARSED_ATTRS: dict[str, AttrDef] = {}


def parse_attr(spec: str) -> AttrDef:
    """Parses "name: kind [>= min] [= default]" (TensorFlow op-spec syntax)."""
    a = _PARSED_ATTRS.get(spec) if isinstance(spec, str) else None
    if a is None:
        a = _parse_attr(spec)
        if isinstance(spec, str):
            _PARSED_ATTRS[spec] = a
    default = list(a.default) if isinstance(a.default, list) else a.default
    return AttrDef(a.name, a.kind, default, a.has_default, a.allowed, a.minimum)


def _parse_attr(spec: str) -> AttrDef:
    m = re.fullmatch(rf"\s*({_NAME})\s*:\s*(.+?)\s*", spec or "")
    if not m:
        raise OpSpecError(f"attribute spec {spec!r} is not 'name: type'")
    name, rest = m.group(1), m.group(2)
    default_text = None
    if "=" in rest.replace(">=", ""):
        idx = [i for i, c in enumerate(rest) if c == "=" and rest[i - 1:i] != ">"]
        if idx:
            rest, default_text = rest[:idx[0]].strip(), rest[idx[0] + 1:].strip()
    minimum = None
    mm = re.fullmatch(r"(.+?)\s*>=\s*(-?\d+)", rest)
    if mm:
        rest, minimum = mm.group(1).strip(), int(mm.group(2))
    allowed = None
    if rest.startswith("{") and rest.endswith("}"):
        items = [s.strip() for s in rest[1:-1].split(",") if s.strip()]
        if items and items[0][0] in "'\"":
            kind = "string"
            allowed = tuple(_parse_value("string", s) for s in items)
        else:
            kind = "type"
            allowed = tuple(_type_name(s) for s in items)
    elif rest in _TYPE_SETS:
        kind, allowed = "type", tuple(dtypes.as_dtype(n) for n in _TYPE_SETS[rest])
    elif rest in _SCALAR_KINDS or rest in _LIST_KINDS:
        kind = rest
    elif rest.startswith("list(") and rest.endswith(")") and rest[5:-1].startswith("{"):
        kind = "list(type)"
        allowed = tuple(_type_name(s) for s in rest[6:-2].split(",") if s.strip())
    else:
        raise OpSpecError(f"attribute spec {spec!r}: unknown kind {rest!r}")
    attr = AttrDef(name, kind, allowed=allowed, minimum=minimum)
    if default_text is not None:
        attr.default = _parse_value(kind, default_text)
        attr.has_default = True
    return attr


def parse_arg(spec: str) -> tuple[str, str, str | None]:
    """Parses "name: T", "name: float" or the list argument "name: N * T";
    returns (name, type text, number attribute or None)."""
    m = re.fullmatch(rf"\s*({_NAME})\s*:\s*(.+?)\s*", spec or "")
    if not m:
        raise OpSpecError(f"argument spec {spec!r} is not 'name: type'")
    name, text = m.group(1), m.group(2)
    if "Ref(" in text:
        raise OpSpecError(f"argument spec {spec!r}: reference arguments are not supported")
    number = None
    if "*" in text:
        lm = re.fullmatch(rf"({_NAME})\s*\*\s*({_NAME})", text)
        if not lm:
            raise OpSpecError(f"argument spec {spec!r}: a list argument is written "
                              "'name: N * T' (an int attribute times a type)")
        number, text = lm.group(1), lm.group(2)
    return name, text, number


ShapeFn = Callable[[list, dict, dict], list]
# (rng, type attributes) -> [(inputs, attributes), ...]: sample calls of an op.
ExamplesFn = Callable[[Any, dict], list]


@dataclasses.dataclass
class OpDef:
    name: str
    inputs: list[ArgDef]
    outputs: list[ArgDef]
    attrs: dict[str, AttrDef]
    shape_fn: ShapeFn | None = None
    host_value_inputs: tuple[str, ...] = ()  # inputs whose values shape fns read
    source: str = "built-in"
    is_commutative: bool = False
    is_stateful: bool = False
    deprecation: str | None = None
    # Whether shape_fn always returns the full shape of every output (true of
    # the built-in ops; a plugin's C shape function may leave one unknown).
    exact_shapes: bool = True
    # Sample calls for conformance checks: examples(rng, type_attrs) returns
    # [(inputs, attrs), ...] for a kernel with those type attributes (a dict
    # of attribute name -> DType; attributes it leaves out take their
    # default, else float32 where allowed, else the first allowed type).
    # Inputs are numpy arrays by input name (a list of arrays for a list
    # argument); attrs are the attributes to pass besides the inputs (type
    # attributes only where no input determines them, e.g. a dtype).
    examples: ExamplesFn | None = dataclasses.field(default=None, repr=False, compare=False)
    # Plans of calls that raw_ops can run without the general path (see
    # dispatch.fast_plan_key); cleared whenever plans are invalidated.
    fast: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)
    # The gradient function (set by the autodiff layer through
    # set_gradient): None when none is registered, NOT_DIFFERENTIABLE for an
    # op whose outputs carry no gradient.
    gradient: Any = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def resource_inputs(self) -> tuple[str, ...]:
        """Names of the inputs of type resource (always in host memory)."""
        return tuple(a.name for a in self.inputs if a.dtype is dtypes.resource)

    # Whether an input / output is a list argument ("x: N * T"); set from
    # the arguments when the definition is made.
    has_list_inputs: bool = dataclasses.field(default=False, init=False)
    has_list_outputs: bool = dataclasses.field(default=False, init=False)

    def __post_init__(self) -> None:
        self.has_list_inputs = any(a.is_list for a in self.inputs)
        self.has_list_outputs = any(a.is_list for a in self.outputs)

    def flat_inputs(self, attrs: dict) -> list[ArgDef]:
        """One ArgDef per tensor the op takes: a list argument "x: N * T"
        appears attrs[N] times, a list "x: Targs" once per element type of
        attrs[Targs]. Kernels, shape functions and hooks see inputs in this
        flattened order, as TensorFlow's kernel C API does."""
        return _flatten(self, self.inputs, attrs)

    def flat_outputs(self, attrs: dict) -> list[ArgDef]:
        """One ArgDef per tensor the op produces (see flat_inputs)."""
        return _flatten(self, self.outputs, attrs)

    def input_index(self, name: str) -> int | None:
        for i, a in enumerate(self.inputs):
            if a.name == name:
                return i
        return None

    def output_index(self, name: str) -> int | None:
        for i, a in enumerate(self.outputs):
            if a.name == name:
                return i
        return None


# Most tensors one list argument ("x: N * T") holds.
MAX_LIST_ARGUMENT = 1 << 16


def _flatten(op: "OpDef", args: list[ArgDef], attrs: dict) -> list[ArgDef]:
    if not any(a.is_list for a in args):
        return args
    out = []
    for a in args:
        if a.number_attr:
            n = int(attrs[a.number_attr])
            if not 0 <= n <= MAX_LIST_ARGUMENT:
                raise InvalidArgumentError(
                    f"{op.name}: attribute {a.number_attr} = {n} gives the length of the "
                    f"list argument {a.name!r}; it must be between 0 and {MAX_LIST_ARGUMENT}")
            out.extend([a] * n)
        elif a.type_list_attr:
            out.extend(ArgDef(a.name, dtype=dtypes.as_dtype(t)) for t in attrs[a.type_list_attr])
        else:
            out.append(a)
    return out


# Longest op and attribute/argument names: what the core's fixed fields of
# kernel definitions and attributes hold (pg_core.h, internal.h).
MAX_OP_NAME = 127
MAX_NAME = 63


def make_op_def(name: str, inputs: list[str], outputs: list[str], attrs: list[str],
                **kw: Any) -> OpDef:
    """Builds an OpDef from spec strings, checking that they fit together."""
    if name is not None and len(name) > MAX_OP_NAME:
        raise OpSpecError(f"op name {name[:40]!r}... is {len(name)} characters long; op names "
                          f"have at most {MAX_OP_NAME}")
    if not re.fullmatch(r"_?[A-Z][A-Za-z0-9_]*", name or ""):
        raise OpSpecError(f"op name {name!r} must be UpperCamelCase "
                          "(a capital letter, then letters, digits, underscores; a leading "
                          "underscore marks an internal op such as _FusedMatMul)")
    attr_defs: dict[str, AttrDef] = {}
    for spec in attrs:
        a = parse_attr(spec)
        if len(a.name) > MAX_NAME:
            raise OpSpecError(f"attribute name {a.name[:40]!r}... is longer than {MAX_NAME} "
                              "characters")
        if a.name in attr_defs:
            raise OpSpecError(f"attribute {a.name!r} is declared twice")
        attr_defs[a.name] = a

    def args(specs: list[str], what: str) -> list[ArgDef]:
        out = []
        for spec in specs:
            n, t, number = parse_arg(spec)
            if len(n) > MAX_NAME:
                raise OpSpecError(f"{what} name {n[:40]!r}... is longer than {MAX_NAME} "
                                  "characters")
            if any(x.name == n for x in out):
                raise OpSpecError(f"{what} {n!r} is declared twice")
            if number is not None and (number not in attr_defs
                                       or attr_defs[number].kind != "int"):
                raise OpSpecError(f"{what} spec {spec!r}: the length {number!r} of a list "
                                  "argument must be a declared int attribute")
            if number is None and t in attr_defs and attr_defs[t].kind == "list(type)":
                out.append(ArgDef(n, type_list_attr=t))
            elif t in attr_defs:
                if not attr_defs[t].is_type:
                    raise OpSpecError(f"{what} spec {spec!r}: attribute {t!r} is a "
                                      f"{attr_defs[t].kind}, not a type")
                out.append(ArgDef(n, type_attr=t, number_attr=number))
            else:
                try:
                    out.append(ArgDef(n, dtype=_type_name(t), number_attr=number))
                except OpSpecError:
                    raise OpSpecError(f"{what} spec {spec!r}: {t!r} is neither a "
                                      "declared type attribute nor a type") from None
        return out

    return OpDef(name, args(inputs, "input"), args(outputs, "output"), attr_defs, **kw)


@dataclasses.dataclass
class KernelDef:
    """A kernel: from a plugin (``cdef`` is its pg_kernel_def*) or built-in CPU
    (``fn`` is a Python function)."""
    op: str
    device_type: str
    constraints: dict[str, dtypes.DType]
    host_args: frozenset[str]
    priority: int = 0
    label: str = ""
    plugin: Any = None            # PluginRecord for plugin kernels
    cdef: Any = None              # pg_kernel_def* (plugin kernels)
    fn: Callable | None = None    # CPU kernels
    _cpu_calls: int = 0
    # What makes two kernels of one (op, device type) duplicates (see
    # _kernel_key); worked out once, when the kernel is checked or registered.
    _key: tuple | None = dataclasses.field(default=None, init=False, repr=False, compare=False)

    @property
    def calls(self) -> int:
        """How many times this kernel's compute function ran."""
        return int(self.cdef.calls) if self.cdef is not None else self._cpu_calls

    @property
    def forwarded(self) -> int:
        """How many outputs this kernel wrote over a donated input's buffer
        (``TF_ForwardInputOrAllocateOutput``)."""
        return int(self.cdef.forwarded) if self.cdef is not None else 0

    def matches(self, type_attrs: dict) -> bool:
        return all(type_attrs.get(k) is v for k, v in self.constraints.items())


_lock = threading.RLock()
OPS: dict[str, OpDef] = {}
KERNELS: dict[tuple[str, str], list[KernelDef]] = {}
generation = [0]  # bumped on every registration; dispatch caches compare it
# What makes two kernels of one (op, device type) duplicates, per list of
# KERNELS, and the lists not yet sorted by priority: registering N kernels
# costs O(N log N), however many share an op.
_KERNEL_KEYS: dict[tuple[str, str], dict[tuple, KernelDef]] = {}
_UNSORTED: set[tuple[str, str]] = set()


def _kernel_key(k: "KernelDef") -> tuple:
    key = k._key
    if key is None:
        c = k.constraints
        if len(c) == 1:  # most kernels: nothing to sort
            (a, dt), = c.items()
            constraints: tuple = ((a, dt.name if dt is not None else None),)
        else:
            constraints = tuple(sorted((a, dt.name if dt is not None else None)
                                       for a, dt in c.items()))
        key = k._key = (constraints, k.priority, k.label)
    return key

# Kernels registered for this device type run on every plugin device that
# has no kernel of its own for the op (TensorFlow's DEVICE_DEFAULT): the
# framework's kernels that need no device code (reading and assigning
# variables). CPU never uses them.
DEFAULT_DEVICE = "DEFAULT"

# The gradient of an op whose outputs carry no gradient (comparisons,
# argmax, ...): see set_gradient.
NOT_DIFFERENTIABLE = type("NotDifferentiable", (), {"__repr__": lambda s: "NOT_DIFFERENTIABLE"})()
_pending_gradients: dict[str, Any] = {}


def register_op(op: OpDef) -> None:
    with _lock:
        if op.name in OPS:
            raise AlreadyExistsError(
                f"op {op.name!r} is already defined (by {OPS[op.name].source}); "
                "choose another name")
        if op.gradient is None:
            op.gradient = _pending_gradients.pop(op.name, None)
        OPS[op.name] = op
        generation[0] += 1
    config.bump_version()


def set_gradient(op_name: str, fn: Any) -> None:
    """Records the gradient function of op `op_name` (or NOT_DIFFERENTIABLE).
    An op defined later (by a plugin, say) gets it when it is registered."""
    with _lock:
        op = OPS.get(op_name)
        if op is not None:
            op.gradient = fn
        else:
            _pending_gradients[op_name] = fn


def get_gradient(op_name: str) -> Any:
    """The gradient function of `op_name`: a callable, NOT_DIFFERENTIABLE, or
    None if none is registered."""
    op = OPS.get(op_name)
    return op.gradient if op is not None else _pending_gradients.get(op_name)


def check_kernel(k: KernelDef) -> str | None:
    """Returns why kernel `k` cannot be registered, or None if it can."""
    op = OPS.get(k.op)
    if op is None:
        return (f"kernel for unknown op {k.op!r} on {k.device_type}: define the op "
                "first (built-in op or TF_RegisterOpDefinition before the kernel)")
    if not _valid_device_type(k.device_type):
        return (f"kernel for op {k.op!r}: device type {k.device_type!r} is not "
                "valid (upper-case letters and underscores)")
    if k.device_type == "CPU" and k.cdef is not None:
        return (f"kernel for op {k.op!r} on CPU: plugins cannot register CPU kernels "
                "(the built-in CPU device runs every op on numpy); register the kernel "
                "for your plugin's own device type")
    for attr, dt in k.constraints.items():
        a = op.attrs.get(attr)
        if a is None:
            return (f"kernel for op {k.op!r} on {k.device_type}: type constraint on "
                    f"unknown attribute {attr!r} (the op has: "
                    f"{', '.join(op.attrs) or 'no attributes'})")
        if not a.is_type:
            return (f"kernel for op {k.op!r} on {k.device_type}: type constraint on "
                    f"attribute {attr!r}, which is a {a.kind}, not a type")
        if dt is None:
            return (f"kernel for op {k.op!r} on {k.device_type}: type constraint "
                    f"{attr!r} names a data type pluggable does not support")
        if a.allowed is not None and dt not in a.allowed:
            return (f"kernel for op {k.op!r} on {k.device_type}: {attr}={dt.name} is "
                    f"not allowed by the op (allowed: "
                    f"{', '.join(d.name for d in a.allowed)})")
    for h in k.host_args:
        if op.input_index(h) is None and op.output_index(h) is None:
            return (f"kernel for op {k.op!r} on {k.device_type}: host-memory "
                    f"argument {h!r} is not an input or output of the op")
    other = _KERNEL_KEYS.get((k.op, k.device_type), {}).get(_kernel_key(k))
    if other is not None:
        who = other.plugin.path if other.plugin is not None else "the built-in CPU device"
        return (f"duplicate kernel for op {k.op!r} on {k.device_type} with "
                f"{_fmt_constraints(k.constraints)} (already registered by {who}); "
                "use TF_KernelBuilder_Priority to register an alternative")
    return None


_DEVICE_TYPE = re.compile(r"[A-Z][A-Z_]*")
_device_types_seen: dict[str, bool] = {}  # device type -> valid (a handful per process)


def _valid_device_type(device_type: str) -> bool:
    ok = _device_types_seen.get(device_type)
    if ok is None:
        ok = _device_types_seen[device_type] = _DEVICE_TYPE.fullmatch(device_type) is not None
    return ok


def _fmt_constraints(c: dict) -> str:
    return ", ".join(f"{k}={v.name}" for k, v in sorted(c.items())) or "no type constraints"


def register_kernel(k: KernelDef) -> None:
    op = OPS.get(k.op)
    if op is not None and op.resource_inputs:
        # Resource handles always live in host memory (as in TensorFlow),
        # whether or not the kernel says so.
        k.host_args = k.host_args | frozenset(op.resource_inputs)
    with _lock:
        key = (k.op, k.device_type)
        KERNELS.setdefault(key, []).append(k)
        _KERNEL_KEYS.setdefault(key, {})[_kernel_key(k)] = k
        _UNSORTED.add(key)  # sorted by priority when next looked up
        generation[0] += 1
    config.bump_version()


def kernels_for(op: str, device_type: str) -> list[KernelDef]:
    """The kernels of (op, device type), highest priority first (in
    registration order among equal priorities)."""
    key = (op, device_type)
    if key in _UNSORTED:
        with _lock:
            if key in _UNSORTED:
                # A new list: a list sorted in place looks empty to readers
                # in other threads while it is being sorted.
                KERNELS[key] = sorted(KERNELS[key], key=lambda x: -x.priority)  # stable
                _UNSORTED.discard(key)
    return KERNELS.get(key, [])


def find_kernel(op: str, device_type: str, type_attrs: dict) -> KernelDef | None:
    for k in kernels_for(op, device_type):
        if k.matches(type_attrs):
            return k
    if device_type != "CPU":
        for k in KERNELS.get((op, DEFAULT_DEVICE), ()):
            if k.matches(type_attrs):
                return k
    return None


def describe_kernels(op: str) -> str:
    """A human-readable list of the kernels registered for `op`."""
    rows = []
    for name, dev in sorted(KERNELS):
        if name == op:
            for k in kernels_for(name, dev):
                rows.append(f"{dev} [{_fmt_constraints(k.constraints)}]")
    return "; ".join(rows) or "none"
