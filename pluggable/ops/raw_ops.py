"""Every registered op as a function: ``pg.raw_ops.AddV2(x=a, y=b)``.

Arguments are keywords named as in the op definition (inputs, then
attributes), or as ``tf.raw_ops`` names them where the two differ
(``PYTHON_NAMES``: ``Sum(input=x, axis=0)``); ops that plugins define through ``ops.h`` appear here as soon
as the plugin is loaded. Each function returns a Tensor (or a tuple for ops
with several outputs).
"""
from __future__ import annotations

import re

import sys
import types
from typing import Any

from .._core import ffi, lib, raw_status, thread_state
from ..framework import config, dtypes, registry
from ..framework.tensor import Tensor
from ..plugins import loader as plugins
from ..runtime import constants, hooks, placement
from ..runtime.dispatch import (FAST_ATTR_KINDS, STAND_INS, UNSET, call, execute, expect_array,
                                expect_arrays, expects, kernel_error, memo_shape)

_cache: dict[str, Any] = {}

# TensorFlow's Python names of arguments whose op-definition names differ
# (its api_def renames: ``tf.raw_ops.Sum(input=x, axis=0)`` for the input
# the OpDef calls reduction_indices). Both names are accepted.
PYTHON_NAMES: dict[str, dict[str, str]] = {
    **{op: {"reduction_indices": "axis"} for op in (
        "Sum", "Mean", "Max", "Min", "Prod", "All", "Any", "EuclideanNorm")},
    "Split": {"split_dim": "axis"},
    "ExpandDims": {"dim": "axis"},
    "Squeeze": {"squeeze_dims": "axis"},
    "Select": {"t": "x", "e": "y"},
}
_DTYPE_TYPES = frozenset(type(d) for d in dtypes.ALL)
_UNSET = UNSET

# How the fast path checks an attribute value given to a call: only values of
# exactly these types take it (so that equal values of different types, True
# and 1, never share a plan), with the values themselves part of the key (a
# list of ints as a tuple). Attributes of other kinds take it only when not
# given.
_PLAIN_ATTR = {
    "type": "type({a}) in _dtype_types",
    "bool": "({a} is True or {a} is False)",
    "int": "type({a}) is int",
    "float": "type({a}) is float",
    "string": "type({a}) is str",
    "list(int)": "(type({a}) is list or type({a}) is tuple) and all(type(_x) is int for _x in {a})",
}
assert set(_PLAIN_ATTR) == FAST_ATTR_KINDS, "dispatch keys the plans of these kinds"

# Ops whose attributes are all of these kinds have shape functions cheaper
# than a memo lookup (elementwise ops, MatMul); the others' fast path
# remembers output shapes by input shapes.
_CHEAP_SHAPE_ATTRS = frozenset({"type", "bool"})


def _fast_path(op, inputs: list[str], attrs: list[str]) -> str:
    """Code for calls whose plan dispatch marked simple (dispatch._is_simple):
    one dict lookup, the shape function, one call into the core (which checks
    the outputs' shapes and the inputs' asynchronous failures) and the new
    Tensor (a tuple of them for an op of several outputs), in this frame. A
    Python scalar operand (``a * 2.0``) is first replaced by its cached
    device constant (``runtime.constants``) on the device of the tensor it
    meets, and the call continues exactly as one with two tensors there (the
    same plan, placement and fast path). An op whose
    shape function reads input values (``Fill``'s dims) takes it with
    tensors only, once each host-memory input holds its core handle (a CPU
    tensor keeps it from its first call). Output shapes are remembered by
    the input shapes (and those host values) where the shape function is
    more than a few comparisons. Anything else falls through to the
    general path. Attributes given as values of their plain kinds
    (a type, bool, int, float, string or list of ints: ``Cast(DstT=...)``,
    ``MatMul(transpose_a=...)``) take the fast path too, keyed by their
    values. While a watching hook is installed (a gradient tape), each call
    is reported to it (``hooks.observe``)."""
    if not inputs or not op.outputs or op.has_list_inputs \
            or op.has_list_outputs or any(n.startswith("_") for n in inputs):
        return ""  # (the fast path's own locals start with "_")
    n_out = len(op.outputs)
    no_attrs = " and ".join(f"{a} is _UNSET" for a in attrs) or "True"
    tensors = " and ".join(f"type({n}) is _Tensor" for n in inputs)
    values = "None"
    if op.host_value_inputs:
        tensors += "".join(f" and {n}._h is not None" for n in inputs)
        values = "{" + ", ".join(f"{n!r}: {n}._a" for n in op.host_value_inputs) + "}"
        memo = ", ".join([f"{n}._shape" for n in inputs]
                         + [f"{n}._a.tobytes()" for n in op.host_value_inputs])
        values = (values, memo)
    elif any(a.kind not in _CHEAP_SHAPE_ATTRS for a in op.attrs.values()):
        # geometry from strides, padding, layouts (Conv2D, MaxPool): ~2 us
        values = ("None", ", ".join(f"{n}._shape" for n in inputs) + ",")
    code = (f"    if {no_attrs} and _hooks_fast[0]:\n"
            f"        if {tensors}:\n{_fast_body(inputs, '            ', values, n_out=n_out)}")
    sources = _scalar_sources(op) if not op.host_value_inputs else ()
    first, pick = ("", "[0]") if n_out == 1 else ("tuple", "")
    for i, j in enumerate(sources):  # one Python scalar among tensors
        if j is None:
            continue
        others = " and ".join(f"type({n}) is _Tensor" for k, n in enumerate(inputs) if k != i)
        names = [("_c" if k == i else n) for k, n in enumerate(inputs)]
        code += (f"        elif {others}:\n"
                 f"            _c = _constant({inputs[i]}, {inputs[j]}._dtype, {inputs[j]}._dev)\n"
                 f"            if _c is not None:\n"
                 f"{_fast_body(names, '                ', n_out=n_out)}"
                 f"                return {first}(execute(op, [{', '.join(names)}], {{}})){pick}\n")
    plain = [a for a in attrs if op.attrs[a].kind in _PLAIN_ATTR]
    if plain:  # attributes given: their values extend the key
        given = " and ".join(
            f"({a} is _UNSET or {_PLAIN_ATTR[op.attrs[a].kind].format(a=a)})"
            if a in plain else f"{a} is _UNSET" for a in attrs)
        key = "".join(f", tuple({a}) if {a} is not _UNSET else _UNSET"
                      if op.attrs[a].kind.startswith("list(") else ", " + a for a in attrs)
        given_dict = "{" + ", ".join(f"{a!r}: {a}" for a in attrs) + "}"
        observed = f"{{_k: _v for _k, _v in {given_dict}.items() if _v is not _UNSET}}"
        code += (f"    elif {given} and _hooks_fast[0]:\n"
                 f"        if {tensors}:\n"
                 f"{_fast_body(inputs, '            ', values, key, observed, n_out)}")
    return code


def _fast_body(names: list[str], ind: str, values="None", attrs: str = "",
               given: str = "{}", n_out: int = 1) -> str:
    """The fast path's body for inputs `names`. `values` is "None", or, for
    an op whose shape function reads host values, (the values argument, the
    key under which the plan remembers the shape: input shapes and the host
    values' bytes), so that a repeated call skips the shape function.
    `attrs` extends the plan's key with the given attributes, and `given`
    is the expression of the attributes given, which a watching hook (a
    gradient tape: ``hooks.observe``) sees with the call. An op of several
    outputs (`n_out`) returns them as a tuple."""
    key = ", ".join(f"{n}._dtype, {n}._dev" for n in names) + ", _version[0]" + attrs
    handles = ", ".join(f"{n}._h" for n in names)
    shapes = ", ".join(f"{n}._shape" for n in names)
    # one output: its shape; several: the tuple of their shapes
    first, pick = ("", "[0]") if n_out == 1 else ("tuple", "")
    fn = f"{first}(_p.op.shape_fn([{shapes}], _p.attrs, "
    if values == "None":
        shape = f"{ind}    _shape = {fn}None)){pick}\n"
    else:
        values, memo = values
        shape = (f"{ind}    _mk = ({memo})\n"
                 f"{ind}    _shape = _p.shape_memo.get(_mk)\n"
                 f"{ind}    if _shape is None:\n"
                 f"{ind}        _shape = {fn}{values})){pick}\n"
                 f"{ind}        _memo_shape(_p.shape_memo, _mk, _shape)\n")
    head = (
        f"{ind}_p = _fast.get((_scope_get(), {key}))\n"
        f"{ind}if _p is not None:\n"
        f"{shape}"
        f"{ind}    try:\n"
        f"{ind}        _st = _tls.status\n"
        f"{ind}    except AttributeError:\n"
        f"{ind}        _st = _raw_status()\n")
    if n_out > 1:  # outputs through an array; `expect` by the tuple of shapes
        return head + (
            f"{ind}    _e = _expects.get(_shape)\n"
            f"{ind}    if _e is None:\n"
            f"{ind}        _e = _expect_arrays(_shape)\n"
            f"{ind}    _o = _new_outs('TF_Tensor*[]', {n_out})\n"
            f"{ind}    if _run(_p.kinst, [{handles}], _o, _e, _st):\n"
            f"{ind}        raise _kernel_error(_p, _st)\n"
            f"{ind}    _ts = []\n"
            f"{ind}    for _i in range({n_out}):\n"
            f"{ind}        _t = _new(_Tensor)\n"
            f"{ind}        _t._h = _o[_i]; _t._a = None; _t._dev = _p.device\n"
            f"{ind}        _t._dtype = _p.out_dtypes[_i]; _t._shape = _shape[_i]\n"
            f"{ind}        _ts.append(_t)\n"
            f"{ind}    if _hooks_active[0]:\n"
            f"{ind}        _observe(op, [{', '.join(names)}], {given}, _ts, _p.attrs)\n"
            f"{ind}    return tuple(_ts)\n")
    return head + (
        f"{ind}    _e = _expects.get(_shape)\n"  # (op inputs never start with _)
        f"{ind}    if _e is None:\n"
        f"{ind}        _e = _expect_array(_shape)\n"
        f"{ind}    _h = _run1(_p.kinst, [{handles}], _e, _st)\n"
        f"{ind}    if not _h:\n"
        f"{ind}        raise _kernel_error(_p, _st)\n"
        f"{ind}    _t = _new(_Tensor)\n"
        f"{ind}    _t._h = _h; _t._a = None; _t._dev = _p.device\n"
        f"{ind}    _t._dtype = _p.out_dtypes[0]; _t._shape = _shape\n"
        f"{ind}    if _hooks_active[0]:\n"
        f"{ind}        _observe(op, [{', '.join(names)}], {given}, [_t], _p.attrs)\n"
        f"{ind}    return _t\n")


def _scalar_sources(op) -> tuple:
    """For each input, the index of another input of the same type attribute
    (whose tensor gives a scalar operand its dtype and device), or None."""
    out = []
    for i, a in enumerate(op.inputs):
        j = next((k for k, b in enumerate(op.inputs)
                  if k != i and a.type_attr is not None and b.type_attr == a.type_attr), None)
        out.append(j)
    return tuple(out)


def _fast_globals(op) -> dict:
    return {"_fast": op.fast, "_scope_get": placement._scope.get, "_version": config.version,
            "_raw_status": raw_status, "_tls": thread_state, "_run1": lib.pg_kernel_run1,
            "_kernel_error": kernel_error, "_new": Tensor.__new__, "_Tensor": Tensor,
            "_hooks_active": hooks.active, "_hooks_fast": hooks.fast,
            "_observe": hooks.observe, "_constant": constants.lookup,
            "_expects": expects, "_expect_array": expect_array,
            "_expect_arrays": expect_arrays, "_run": lib.pg_kernel_run, "_new_outs": ffi.new,
            "_dtype_types": _DTYPE_TYPES, "_memo_shape": memo_shape}


def _alias_code(op_name: str, name: str, py: str, required: bool) -> str:
    """Code taking argument `name` under TensorFlow's Python name `py` too."""
    code = (f"    if {py} is not _UNSET:\n"
            f"        if {name} is not _UNSET:\n"
            f"            raise TypeError(\"{op_name}() got {py!r} and {name!r}, two names of "
            f"one argument\")\n"
            f"        {name} = {py}\n")
    if required:
        code += (f"    elif {name} is _UNSET:\n"
                 f"        raise TypeError(\"{op_name}() missing required keyword argument: "
                 f"{py!r}\")\n")
    return code


def _make(op_name: str):
    """Builds the function for one op, with the op's inputs and attributes as
    keyword-only parameters, so that a call costs little more than a plain
    function call and a misspelt name is a TypeError naming it."""
    op = registry.OPS[op_name]
    inputs = [a.name for a in op.inputs]
    attrs = list(op.attrs)
    type_attrs = {a.type_attr for a in op.inputs if a.type_attr}
    lengths = {a.number_attr or a.type_list_attr for a in op.inputs if a.is_list}
    renames = {n: py for n, py in PYTHON_NAMES.get(op_name, {}).items()
               if n in inputs or n in attrs}
    params = ", ".join([f"{n}=_UNSET, {renames[n]}=_UNSET" if n in renames else n
                        for n in inputs] + [f"{a}=_UNSET" for a in attrs]
                       + [f"{renames[a]}=_UNSET" for a in attrs if a in renames] + ["name=None"])
    aliases = "".join(_alias_code(op_name, n, py, n in inputs) for n, py in renames.items())
    collect = "".join(f"    if {a} is not _UNSET:\n        given[{a!r}] = {a}\n" for a in attrs)
    fast = aliases + _fast_path(op, inputs, attrs)
    if fast:  # a Variable among the inputs: read it, then the call as with tensors
        # (a hook that replaces or times execution sees the Variable as given)
        read = ", ".join(f"{n}=({n}.__pg_tensor__() if type({n}) in _stand_ins else {n})"
                         for n in inputs)
        again = ", ".join([read] + [f"{a}={a}" for a in attrs] + ["name=name"])
        fast += (f"    if _hooks_fast[0] and "
                 f"({' or '.join(f'type({n}) in _stand_ins' for n in inputs)}):\n"
                 f"        return {op_name}({again})\n")
    code = (f"def {op_name}(*, {params}):\n"
            f"{fast}"
            f"    given = {{}}\n{collect}"
            f"    outs = {'call' if op.has_list_inputs or op.has_list_outputs else 'execute'}"
            f"(op, [{', '.join(inputs)}], given)\n"
            f"    return outs[0] if len(outs) == 1 else tuple(outs)\n")
    # the builtins as _type, _len: an attribute may be named "type" (Bitcast's
    # is), an input "len" (Substr's is)
    code = re.sub(r"(?<![\w.])(type|len)\(", r"_\1(", code)
    scope = {"execute": execute, "call": call, "op": op, "_UNSET": _UNSET,
             "_stand_ins": STAND_INS, "_type": type, "_len": len, **_fast_globals(op)}
    exec(compile(code, f"<raw_ops.{op_name}>", "exec"), scope)
    fn = scope[op_name]
    fn.__qualname__ = op_name
    fn.__module__ = __name__
    sig = ", ".join(f"{a.name}: " + (f"{a.number_attr} * " if a.number_attr else "")
                    + (a.type_list_attr or a.type_attr or a.dtype.name) for a in op.inputs)
    described = ", ".join(f"{a.name}: {a.kind}" + (f" = {a.default!r}" if a.has_default else "")
                          for a in op.attrs.values()
                          if a.name not in type_attrs and a.name not in lengths)
    fn.__doc__ = (f"Op {op_name} (defined by {op.source}).\n\n"
                  f"Inputs (keyword arguments): {sig or 'none'}\n"
                  f"Attributes: {described or 'none'} (type attributes "
                  f"{', '.join(sorted(type_attrs | lengths)) or 'none'} follow the inputs)\n"
                  f"Outputs: {', '.join(a.name for a in op.outputs)}"
                  + "".join(f"\n{py!r} is TensorFlow's Python name of {n!r}"
                            for n, py in renames.items()))
    return fn


class _RawOps(types.ModuleType):
    def __getattr__(self, name: str):
        plugins.ensure_loaded()
        fn = _cache.get(name)
        if fn is None:
            if name not in registry.OPS:
                if name.startswith("__"):
                    raise AttributeError(name)
                raise AttributeError(f"no op named {name!r} is registered; ops: "
                                     f"{', '.join(sorted(registry.OPS))}")
            fn = _cache[name] = _make(name)
            setattr(self, name, fn)  # later lookups skip __getattr__
        return fn

    def __dir__(self):
        return sorted(registry.OPS)


sys.modules[__name__].__class__ = _RawOps
