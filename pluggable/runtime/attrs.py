"""Attributes in the form the core hands to kernels (``pg_attrs``)."""
from __future__ import annotations

from typing import Any

from .._core import ffi, lib
from ..framework import dtypes
from ..framework.registry import OpDef


def make_c_attrs(attrs: dict, op: OpDef | None = None):
    """The core's pg_attrs for an attribute dict (kinds from the op def)."""
    c = ffi.gc(lib.pg_attrs_new(), lib.pg_attrs_free)
    for name, v in attrs.items():
        kind = op.attrs[name].kind if op is not None and name in op.attrs else _guess_kind(v)
        n = name.encode()
        if kind == "type":
            lib.pg_attrs_set_type(c, n, v.enum)
        elif kind == "bool":
            lib.pg_attrs_set_bool(c, n, int(v))
        elif kind == "int":
            lib.pg_attrs_set_int(c, n, v)
        elif kind == "float":
            lib.pg_attrs_set_float(c, n, v)
        elif kind == "string":
            b = v.encode()
            lib.pg_attrs_set_string(c, n, b, len(b))
        elif kind in ("list(int)", "shape"):
            lib.pg_attrs_set_int_list(c, n, ffi.new("int64_t[]", list(v) or [0]), len(v))
        elif kind == "list(float)":
            lib.pg_attrs_set_float_list(c, n, ffi.new("float[]", list(v) or [0]), len(v))
        elif kind == "list(bool)":
            lib.pg_attrs_set_bool_list(c, n, ffi.new("int[]", [int(x) for x in v] or [0]), len(v))
        elif kind == "list(type)":
            lib.pg_attrs_set_type_list(c, n, ffi.new("TF_DataType[]", [x.enum for x in v] or [0]), len(v))
        elif kind == "list(string)":
            bs = [x.encode() for x in v]
            ptrs = [ffi.new("char[]", b) for b in bs]
            lib.pg_attrs_set_string_list(c, n, ffi.new("char*[]", ptrs or [ffi.NULL]),
                                         ffi.new("size_t[]", [len(b) for b in bs] or [0]), len(v))
    return c


def _guess_kind(v: Any) -> str:
    if isinstance(v, dtypes.DType):
        return "type"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    if isinstance(v, str):
        return "string"
    return "list(int)"
