"""What the graph C API (grappler.h) asks of Python: static properties of a
graph's nodes (``TF_InferStatically``), the function signatures of a
graph's library (``TF_NewFunctionLibraryDefinition``) and op definitions
(``TF_LookUpOpDef``), as serialised protobuf messages.

Properties are inferred from the GraphDef alone: ``Placeholder``, ``Const``
and ``_Arg`` nodes give their dtypes and shapes, every other node's outputs
come from the op registry (type attributes for dtypes, the op's shape
function for shapes, fed with the values of ``Const`` producers where it
reads input values). What cannot be inferred is reported unknown (dtype
DT_INVALID, unknown rank), never guessed. Installed as the core's graph
hooks when this module is imported.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .. import _core
from .._core import ffi, lib, set_status
from ..framework import dtypes, errors, registry


class _Proto:
    """``framework.proto``, imported when a graph hook first needs it: the
    protobuf layer is not needed to load plugins, and ``import pluggable``
    would pay for it (about 10 ms) otherwise. Replaces itself with the module
    at first use."""

    def __getattr__(self, name: str) -> Any:
        from ..framework import proto as module
        globals()["proto"] = module
        return getattr(module, name)


proto: Any = _Proto()

# (dtype enum or 0, shape tuple with None for unknown sizes, or None)
Props = tuple[int, Any]
_UNKNOWN: Props = (0, None)


# ------------------------------------------------------------- node attributes

def attr_to_python(value: Any, kind: str) -> Any:
    """The Python value of an AttrValue for a registry attribute kind."""
    if kind == "type":
        return proto.from_datatype(value.type)
    if kind == "int":
        return int(value.i)
    if kind == "float":
        return float(value.f)
    if kind == "bool":
        return bool(value.b)
    if kind == "string":
        return value.s.decode("utf-8", "replace")
    if kind == "shape":
        return proto.from_shape_proto(value.shape)
    lst = value.list
    inner = kind[5:-1]
    if inner == "int":
        return [int(v) for v in lst.i]
    if inner == "float":
        return [float(v) for v in lst.f]
    if inner == "bool":
        return [bool(v) for v in lst.b]
    if inner == "type":
        return [proto.from_datatype(v) for v in lst.type]
    if inner == "string":
        return [v.decode("utf-8", "replace") for v in lst.s]
    if inner == "shape":
        return [proto.from_shape_proto(s) for s in lst.shape]
    raise errors.UnimplementedError(f"attribute kind {kind!r}")


def node_attrs(node: Any, op: registry.OpDef) -> dict:
    """The node's attributes as the op's Python values, defaults filled."""
    out = {}
    for name, a in op.attrs.items():
        if name in node.attr:
            out[name] = attr_to_python(node.attr[name], a.kind)
        elif a.has_default:
            out[name] = a.default
    return out


# ------------------------------------------------------------------ inference

def _split_ref(ref: str) -> tuple[str, int] | None:
    """(node, output index) of a data input reference; None for "^ctrl"."""
    if ref.startswith("^"):
        return None
    name, _, index = ref.rpartition(":")
    if name and index.isdigit():
        return name, int(index)
    return ref, 0


def _shape_attr(node: Any, name: str) -> Any:
    return proto.from_shape_proto(node.attr[name].shape) if name in node.attr else None


def _source_props(node: Any) -> list[Props] | None:
    """Outputs of the nodes that feed a graph (no registry op needed)."""
    if node.op == "Placeholder":
        return [(node.attr["dtype"].type, _shape_attr(node, "shape"))]
    if node.op == "Const":
        value = node.attr["value"].tensor
        return [(node.attr["dtype"].type, proto.from_shape_proto(value.tensor_shape))]
    if node.op == "_Arg":
        shapes = node.attr["_output_shapes"].list.shape if "_output_shapes" in node.attr else []
        shape = proto.from_shape_proto(shapes[0]) if len(shapes) else None
        return [(node.attr["T"].type, shape)]
    return None


class _Inference:
    """Output properties of every node, computed on demand in dependency
    order (cycles, as in loops, read as unknown)."""

    def __init__(self, graph_def: Any):
        self.nodes = {n.name: n for n in graph_def.node}
        self.outputs: dict[str, list[Props]] = {}
        self._busy: set[str] = set()

    def input_props(self, node: Any) -> list[Props]:
        out = []
        for ref in node.input:
            split = _split_ref(ref)
            if split is None:
                continue
            produced = self.output_props(split[0])
            out.append(produced[split[1]] if split[1] < len(produced) else _UNKNOWN)
        return out

    def output_props(self, name: str) -> list[Props]:
        if name in self.outputs:
            return self.outputs[name]
        node = self.nodes.get(name)
        if node is None or name in self._busy:
            return []
        self._busy.add(name)
        try:
            props = self._infer(node)
        except (errors.PluggableError, KeyError, ValueError, TypeError, IndexError):
            props = []
        finally:
            self._busy.discard(name)
        self.outputs[name] = props
        return props

    def _const_value(self, ref: str) -> np.ndarray | None:
        split = _split_ref(ref)
        node = self.nodes.get(split[0]) if split else None
        if node is None or node.op != "Const":
            return None
        return proto.from_tensor_proto(node.attr["value"].tensor)

    def _infer(self, node: Any) -> list[Props]:
        source = _source_props(node)
        if source is not None:
            return source
        op = registry.OPS.get(node.op)
        if op is None:
            return []
        attrs = node_attrs(node, op)
        try:
            flat_in, flat_out = op.flat_inputs(attrs), op.flat_outputs(attrs)
        except (KeyError, TypeError, ValueError):  # list attributes missing or bad
            return []
        data_inputs = [r for r in node.input if not r.startswith("^")]
        in_props = self.input_props(node)
        for a, p in zip(flat_in, in_props):
            if a.type_attr and a.type_attr not in attrs and p[0]:
                attrs[a.type_attr] = proto.from_datatype(p[0])
        out_types = []
        for a in flat_out:
            dt = attrs.get(a.type_attr) if a.type_attr else a.dtype
            out_types.append(dt.enum if isinstance(dt, dtypes.DType) else 0)
        shapes = self._shapes(op, flat_in, len(flat_out), attrs, data_inputs, in_props)
        return [(t, s) for t, s in zip(out_types, shapes)]

    def _shapes(self, op: registry.OpDef, flat_in: list, n_out: int, attrs: dict, refs: list,
                in_props: list) -> list:
        unknown = [None] * n_out
        in_shapes = [p[1] for p in in_props]
        if op.shape_fn is None or len(in_shapes) != len(flat_in) or any(
                s is None or None in s for s in in_shapes):
            return unknown
        names = [a.name for a in flat_in]
        values = {}
        for name in op.host_value_inputs:
            value = self._const_value(refs[names.index(name)])
            if value is None:
                return unknown
            values[name] = value
        try:
            shapes = op.shape_fn([tuple(s) for s in in_shapes], attrs, values or None)
        except Exception:  # a shape function that rejects the node: unknown
            return unknown
        return [tuple(s) if s is not None else None for s in shapes]


def _tensor_properties(props: Props) -> bytes:
    msg = proto.OpInfo.TensorProperties(dtype=props[0])
    msg.shape.CopyFrom(proto.to_shape_proto(props[1]))
    return proto.encode(msg)


def infer(graph_def: Any) -> dict[str, tuple[list[bytes], list[bytes]]]:
    """For every node: (serialised input properties, output properties)."""
    inference = _Inference(graph_def)
    out = {}
    for node in graph_def.node:
        outputs = [_tensor_properties(p) for p in inference.output_props(node.name)]
        inputs = [_tensor_properties(p) for p in inference.input_props(node)]
        out[node.name] = (inputs, outputs)
    return out


# ------------------------------------------------------------------- op defs

def python_to_attr(kind: str, value: Any) -> Any:
    """An AttrValue holding `value` as an attribute of kind `kind`."""
    m = proto.messages()
    av = m.AttrValue()
    if kind == "type":
        av.type = dtypes.as_dtype(value).enum
    elif kind == "int":
        av.i = int(value)
    elif kind == "float":
        av.f = float(value)
    elif kind == "bool":
        av.b = bool(value)
    elif kind == "string":
        av.s = str(value).encode()
    elif kind == "shape":
        av.shape.CopyFrom(proto.to_shape_proto(value))
    else:
        inner = kind[5:-1]
        av.list.SetInParent()
        items = list(value)
        if inner == "type":
            av.list.type.extend(dtypes.as_dtype(v).enum for v in items)
        elif inner == "string":
            av.list.s.extend(str(v).encode() for v in items)
        elif inner == "shape":
            av.list.shape.extend(proto.to_shape_proto(v) for v in items)
        else:
            getattr(av.list, inner[0]).extend(items)
    return av


def op_def_message(op: registry.OpDef) -> Any:
    """The OpDef message of a registry op (TensorFlow's op_def.proto)."""
    m = proto.messages()
    msg = m.OpDef(name=op.name, is_commutative=op.is_commutative, is_stateful=op.is_stateful)
    for args, field in ((op.inputs, msg.input_arg), (op.outputs, msg.output_arg)):
        for a in args:
            arg = field.add(name=a.name)
            if a.type_attr:
                arg.type_attr = a.type_attr
            elif a.type_list_attr:
                arg.type_list_attr = a.type_list_attr
            elif a.dtype is not None:
                arg.type = a.dtype.enum
            if a.number_attr:
                arg.number_attr = a.number_attr
    for a in op.attrs.values():
        attr = msg.attr.add(name=a.name, type=a.kind)
        if a.has_default:
            attr.default_value.CopyFrom(python_to_attr(a.kind, a.default))
        if a.minimum is not None:
            attr.has_minimum = True
            attr.minimum = a.minimum
        if a.allowed:
            kind = "list(type)" if a.kind in ("type", "list(type)") else "list(string)"
            attr.allowed_values.CopyFrom(python_to_attr(kind, a.allowed))
    if op.deprecation:
        msg.deprecation.explanation = op.deprecation
    return msg


# --------------------------------------------------------------------- hooks

def _graph_from(data, length: int) -> Any:
    raw = bytes(ffi.buffer(data, length)) if length else b""
    return proto.decode(proto.GraphDef, raw, source="the graph given to the C API")


def _fail(st, exc: BaseException) -> None:
    code = getattr(exc, "code", 3)
    set_status(st, code, str(exc))


def on_infer_properties(props, data, length, st) -> None:
    try:
        graph_def = _graph_from(data, length)
    except errors.OpError as exc:
        _fail(st, exc)
        return
    for name, (inputs, outputs) in infer(graph_def).items():
        key = name.encode()
        for kind, items in ((0, inputs), (1, outputs)):
            for item in items:
                if not lib.pg_graph_properties_add(props, key, kind, item, len(item)):
                    set_status(st, 8, "out of host memory storing graph properties")
                    return


def on_function_library(fn_lib, data, length, st) -> None:
    try:
        graph_def = _graph_from(data, length)
    except errors.OpError as exc:
        _fail(st, exc)
        return
    for function in graph_def.library.function:
        item = proto.encode(function.signature)
        if not lib.pg_function_library_add(fn_lib, function.signature.name.encode(), item,
                                           len(item)):
            set_status(st, 8, "out of host memory storing function signatures")
            return


def on_op_def(name, out, st) -> None:
    op_name = ffi.string(name).decode("utf-8", "replace")
    op = registry.OPS.get(op_name)
    if op is None:
        set_status(st, 5, f"TF_LookUpOpDef: no op or function named {op_name!r} is "
                   "registered")
        return
    data = proto.encode(op_def_message(op))
    if not lib.pg_tf_buffer_fill(out, data, len(data)):
        set_status(st, 8, "out of host memory")


_core.hooks.infer_properties = on_infer_properties
_core.hooks.function_library = on_function_library
_core.hooks.op_def = on_op_def
