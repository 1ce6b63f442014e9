"""Writing a SavedModel: the object graph of a module, its traced
functions as a function library, its signatures and its variables.

The objects reachable from the root (module attributes, lists, tuples,
dicts, variables, and the ``pg.function`` methods of each module) become
the nodes of a ``SavedObjectGraph``, root first, in breadth-first order by
attribute name. Each concrete function of a ``pg.function`` becomes a
``FunctionDef`` whose captured variables are resource inputs after the
arguments (``bound_inputs`` names their nodes), as TensorFlow writes them.
A signature is a function of keyword inputs returning a dict (a single
result is ``output_0``, a tuple or list ``output_<i>``).
"""
from __future__ import annotations

import inspect
import os
import re
import secrets
import shutil
from typing import Any

import numpy as np

from ..framework import dtypes, errors, proto
from ..framework.tensor import Tensor
from ..graph import graphdef, nest
from ..graph.function import ConcreteFunction, Function, TensorSpec
from ..ops.variables import Variable, owner_of
from ..training.checkpoint import _write_atomic
from ..training.module import Module
from . import tensor_bundle

SCHEMA_VERSION = 1
SAVED_MODEL_FILE = "saved_model.pb"
VARIABLES_DIR = "variables"
VARIABLES_PREFIX = "variables"
ASSETS_DIR = "assets"
OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
SERVING_KEY = "serving_default"
PREDICT_METHOD = "tensorflow/serving/predict"
_ARG_NAME = re.compile(r"[a-z][a-z0-9_]*")
# Attribute values that are no objects of the graph (TensorFlow skips them too;
# a tensor attribute is not saved).
_SKIPPED = (str, bytes, int, float, bool, type(None), np.ndarray, np.generic, Tensor, type)


# ------------------------------------------------------------------ values

def _spec_value(spec: TensorSpec, name: str | None = None):
    m = proto.messages()
    v = m.StructuredValue()
    v.tensor_spec_value.dtype = spec.dtype.enum
    v.tensor_spec_value.shape.CopyFrom(proto.to_shape_proto(spec.shape))
    if name or spec.name:
        v.tensor_spec_value.name = name or spec.name
    return v


def structured(value: Any):
    """A ``StructuredValue`` of a nest of TensorSpecs, None, Python values."""
    m = proto.messages()
    v = m.StructuredValue()
    if value is None:
        v.none_value.SetInParent()
    elif isinstance(value, TensorSpec):
        v.CopyFrom(_spec_value(value))
    elif isinstance(value, bool):
        v.bool_value = value
    elif isinstance(value, int):
        v.int64_value = value
    elif isinstance(value, float):
        v.float64_value = value
    elif isinstance(value, str):
        v.string_value = value
    elif isinstance(value, dict):
        v.dict_value.SetInParent()
        for k in sorted(value):
            v.dict_value.fields[str(k)].CopyFrom(structured(value[k]))
    elif isinstance(value, tuple):
        v.tuple_value.SetInParent()
        v.tuple_value.values.extend(structured(x) for x in value)
    elif isinstance(value, list):
        v.list_value.SetInParent()
        v.list_value.values.extend(structured(x) for x in value)
    else:
        raise errors.InvalidArgumentError(f"a SavedModel cannot record the value {value!r}")
    return v


def _fullargspec(args: list[str], kwonly: list[str]):
    m = proto.messages()
    v = m.StructuredValue()
    nt = v.named_tuple_value
    nt.name = "FullArgSpec"
    for key, value in (("args", list(args)), ("varargs", None), ("varkw", None),
                       ("defaults", None), ("kwonlyargs", list(kwonly)),
                       ("kwonlydefaults", None), ("annotations", {})):
        nt.values.add(key=key).value.CopyFrom(structured(value))
    return v


# ------------------------------------------------------------------ objects

class _Node:
    """One object of the graph being written."""

    def __init__(self, obj: Any, path: str):
        self.obj, self.path = obj, path
        self.children: list[tuple[str, int]] = []


def _escape(name: str) -> str:
    return name.replace(".", "..").replace("/", ".S")


def _object_children(obj: Any) -> list[tuple[str, Any]]:
    if isinstance(obj, dict):
        return [(str(k), obj[k]) for k in sorted(obj, key=str)]
    if isinstance(obj, (list, tuple)):
        return [(str(i), x) for i, x in enumerate(obj)]
    out = []
    for k in sorted(vars(obj)):
        if k in ("_name", "_scope_name", "_name_scope_object") or k.startswith("__"):
            continue
        out.append((k, vars(obj)[k]))
    for k in sorted(dir(type(obj))):
        if isinstance(inspect.getattr_static(type(obj), k, None), Function) and \
                k not in vars(obj):
            out.append((k, getattr(obj, k)))
    return sorted(out, key=lambda kv: kv[0])


def _savable(x: Any) -> bool:
    if isinstance(x, _SKIPPED) or callable(x) and not isinstance(x, (Function, Module)):
        return False
    return isinstance(x, (Variable, Function, Module, list, tuple, dict)) or \
        hasattr(x, "__dict__")


def _walk(root: Any) -> list[_Node]:
    nodes = [_Node(root, "")]
    index = {id(root): 0}
    i = 0
    while i < len(nodes):
        node = nodes[i]
        i += 1
        if isinstance(node.obj, (Variable, Function)):
            continue
        for name, child in _object_children(node.obj):
            if not _savable(child):
                continue
            if id(child) not in index:
                index[id(child)] = len(nodes)
                path = f"{node.path}/{_escape(name)}" if node.path else _escape(name)
                nodes.append(_Node(child, path))
            node.children.append((name, index[id(child)]))
    return nodes


# ------------------------------------------------------------------ functions

def _is_handle(node) -> bool:
    return node.op == "Const" and node.out_dtypes[0] is dtypes.resource


def _handle_in(g, var: Variable):
    """A node of `g` giving `var`'s handle (a Const made for it if none is)."""
    for node in g.nodes:
        if _is_handle(node) and owner_of(node.attrs.get("value")) is var:
            return node
    return g.add_node("Const", [], {"dtype": dtypes.resource, "value": var.handle},
                      [dtypes.resource], [()], name="captured_variable")


def _variables_read(g, where: str) -> list[Variable]:
    found: list[Variable] = []
    for node in g.nodes:
        if _is_handle(node):
            var = owner_of(node.attrs.get("value"))
            if var is None:
                raise errors.FailedPreconditionError(
                    f"{where}: node {node.name!r} holds a resource handle that belongs to no "
                    "live pg.Variable; it cannot be saved")
            if all(v is not var for v in found):
                found.append(var)
    return found


def _as_arguments(g, variables: list[Variable]) -> list:
    """Replaces the handle Consts of `variables` in `g` by one resource
    argument each (appended to g.inputs); returns the new arguments."""
    args = []
    for var in variables:
        ph = g.add_node("Placeholder", [], {"dtype": dtypes.resource, "shape": ()},
                        [dtypes.resource], [()], name="captured_variable")
        old = {n for n in g.nodes if _is_handle(n) and owner_of(n.attrs.get("value")) is var}
        for n in g.nodes:
            n.inputs = [(ph, 0) if src in old else (src, i) for src, i in n.inputs]
            n.control = [c for c in n.control if c not in old]
        g.outputs = [(ph, 0) if src in old else (src, i) for src, i in g.outputs]
        g.replace_nodes([n for n in g.nodes if n not in old])
        g.inputs.append(ph)
        args.append(ph)
    return args


_FUNC_ATTRS = {"If": ("then_branch", "else_branch"), "StatelessIf": ("then_branch", "else_branch"),
               "While": ("cond", "body"), "StatelessWhile": ("cond", "body")}


def thread_variables(g, library: dict, counter: list, where: str) -> None:
    """Rewrites `g` (in place) so that the branches and loop bodies it calls
    take the variables they read as resource arguments, passed by the
    calling node, as TensorFlow's functional control flow does: each call
    gets its own copies of its functions (in `library`)."""
    for node in list(g.nodes):
        attrs = _FUNC_ATTRS.get(node.op)
        if attrs is None:
            continue
        copies = []
        for a in attrs:
            src = library.get(node.attrs[a])
            if src is None:
                raise errors.NotFoundError(f"{where}: node {node.name!r} calls "
                                           f"{node.attrs[a]!r}, which is not in its library")
            fg = src.copy()
            counter[0] += 1
            fg.name = f"{src.name}_saved_{counter[0]}"
            fg.library = library
            thread_variables(fg, library, counter, where)
            copies.append(fg)
        needed: list[Variable] = []
        for fg in copies:
            for var in _variables_read(fg, where):
                if all(v is not var for v in needed):
                    needed.append(var)
        if not needed:
            continue
        for a, fg in zip(attrs, copies):
            args = _as_arguments(fg, needed)
            if node.op in ("While", "StatelessWhile") and a == "body":
                fg.outputs.extend((ph, 0) for ph in args)
            library[fg.name] = fg
            node.attrs = dict(node.attrs, **{a: fg.name})
        extra = [dtypes.resource] * len(needed)
        node.inputs = node.inputs + [(_handle_in(g, var), 0) for var in needed]
        if node.op in ("If", "StatelessIf"):
            node.attrs["Tin"] = tuple(node.attrs["Tin"]) + tuple(extra)
        else:
            node.attrs["T"] = tuple(node.attrs["T"]) + tuple(extra)
            node.attrs["output_shapes"] = tuple(node.attrs.get("output_shapes", ())) + \
                ((),) * len(needed)
            node.out_dtypes = node.out_dtypes + extra
            node.out_shapes = node.out_shapes + [()] * len(needed)
        if node.op.startswith("Stateless"):
            node.op = node.op[len("Stateless"):]   # reading a variable is stateful


class _Writer:
    def __init__(self, root: Any):
        self.m = proto.messages()
        self.nodes = _walk(root)
        self.var_node = {id(n.obj): i for i, n in enumerate(self.nodes)
                         if isinstance(n.obj, Variable)}
        self.library: dict[str, Any] = {}
        self.counter = 0

    def fresh(self, base: str) -> str:
        self.counter += 1
        return f"__inference_{re.sub(r'[^A-Za-z0-9_]', '_', base)}_{self.counter}"

    def function_def(self, cf: ConcreteFunction, name: str,
                     output_names: list[str] | None = None) -> tuple[Any, list[int]]:
        """The FunctionDef of `cf` named `name` and the node ids of the
        variables it captures (its inputs after the arguments)."""
        g = cf.graph.copy()
        g.name = name
        g.library = dict(g.library)
        thread_variables(g, g.library, [0], cf.name)
        bound = []
        for node in list(g.nodes):
            if node.op == "Const" and node.out_dtypes[0] is dtypes.resource:
                var = owner_of(node.attrs.get("value"))
                if var is None or id(var) not in self.var_node:
                    raise errors.FailedPreconditionError(
                        f"{cf.name}: node {node.name!r} reads a pg.Variable that is not an "
                        "attribute of the saved object (nor of anything it holds); make the "
                        "variable an attribute of the module so that it is saved")
                node.op = "Placeholder"
                node.attrs = {"dtype": dtypes.resource, "shape": ()}
                g.inputs.append(node)
                bound.append((var, self.var_node[id(var)]))
        fd = graphdef.to_function_def(g)
        if output_names is not None:
            for arg, new in zip(fd.signature.output_arg, output_names):
                fd.ret[new] = fd.ret.pop(arg.name)
                arg.name = new
        n_args = len(cf.input_specs)
        shapes = self.m.AttrValue()
        shapes.list.SetInParent()
        for i, arg in enumerate(fd.signature.input_arg):
            if i >= n_args:
                var = bound[i - n_args][0]
                hd = arg.handle_data.add(dtype=var.dtype.enum)
                hd.shape.CopyFrom(proto.to_shape_proto(tuple(var.shape)))
                shapes.list.shape.add()
            else:
                shapes.list.shape.add().CopyFrom(proto.to_shape_proto(cf.input_specs[i].shape))
                fd.arg_attr[i].attr["_user_specified_name"].s = cf.input_names[i].encode()
        fd.attr["_input_shapes"].CopyFrom(shapes)
        if bound:
            fd.signature.is_stateful = True
        for fname in sorted(graphdef._called_functions(g)):
            self.add_library(graphdef.to_function_def(g.library[fname]))
        self.add_library(fd)
        return fd, [i for _, i in bound]

    def add_library(self, fd) -> None:
        name = fd.signature.name
        old = self.library.get(name)
        if old is not None and old.SerializeToString(deterministic=True) != \
                fd.SerializeToString(deterministic=True):
            raise errors.InternalError(f"two different functions are named {name!r}")
        self.library[name] = fd

    def output_signature(self, cf: ConcreteFunction):
        outs = [TensorSpec(r[0].out_shapes[r[1]], r[0].out_dtypes[r[1]])
                for r in cf.graph.outputs]
        if cf._structure is None:
            return structured(None)

        def spec(mark: Any) -> Any:
            return None if mark is None else outs[mark]
        return structured(nest.map_structure(spec, cf._structure)
                          if nest.is_nested(cf._structure) else spec(cf._structure))


def _concrete_functions(fn: Function) -> list[ConcreteFunction]:
    if fn.input_signature is not None:
        return [fn.get_concrete_function()]
    seen, out = set(), []
    for cf in fn._cache.values():
        if id(cf) not in seen:
            seen.add(id(cf))
            out.append(cf)
    return out


def _signature_function(value: Any, key: str) -> ConcreteFunction:
    if isinstance(value, ConcreteFunction):
        return value
    if isinstance(value, Function):
        if value.input_signature is None:
            raise errors.InvalidArgumentError(
                f"signature {key!r}: the pg.function {value.__name__!r} has no "
                "input_signature; give it one, or pass f.get_concrete_function(spec, ...)")
        return value.get_concrete_function()
    raise errors.InvalidArgumentError(
        f"signature {key!r} is a {type(value).__name__}; a signature is a pg.function "
        "with an input_signature or one of its concrete functions")


def _default_signatures(root: Any) -> dict:
    found = [getattr(root, name) for name, child in _object_children(root)
             if isinstance(child, Function) and child.input_signature is not None] \
        if not isinstance(root, (list, tuple, dict)) else []
    return {SERVING_KEY: found[0]} if len(found) == 1 else {}


def _signature_outputs(cf: ConcreteFunction) -> list[str]:
    s = cf._structure
    if isinstance(s, dict):
        names = [str(k) for k in sorted(s)]
        if not all(isinstance(s[k], int) for k in s):
            raise errors.InvalidArgumentError(
                f"signature function {cf.name!r} returns a dict of nests; a signature "
                "returns a tensor, a flat tuple or list, or a flat dict of tensors")
        by_mark = {s[k]: str(k) for k in s}
        return [by_mark[i] for i in range(len(cf.graph.outputs))]
    if isinstance(s, int):
        return ["output_0"]
    if isinstance(s, (list, tuple)) and all(isinstance(x, int) for x in s):
        return [f"output_{i}" for i in range(len(s))]
    raise errors.InvalidArgumentError(
        f"signature function {cf.name!r} returns {type(s).__name__}; a signature returns "
        "a tensor, a flat tuple or list, or a flat dict of tensors")


def _input_keys(cf: ConcreteFunction) -> list[str]:
    keys = [spec.name or name for name, spec in zip(cf.input_names, cf.input_specs)]
    for k in keys:
        if not _ARG_NAME.fullmatch(k):
            raise errors.InvalidArgumentError(
                f"signature function {cf.name!r}: input {k!r} is not a valid signature key "
                "(lower-case letters, digits and '_', starting with a letter); name it "
                "with pg.TensorSpec(..., name='x')")
    return keys


# ------------------------------------------------------------------ writing

def _saved_function_spec(args: list[str], kwonly: list[str], input_signature: Any):
    spec = proto.messages().FunctionSpec()
    spec.fullargspec.CopyFrom(_fullargspec(args, kwonly))
    spec.input_signature.CopyFrom(structured(input_signature))
    return spec


def build(root: Any, signatures: Any = None):
    """The ``SavedModel`` message of `root` and the values of its variables
    (checkpoint key -> array)."""
    w = _Writer(root)
    m = w.m
    if signatures is None:
        signatures = _default_signatures(root)
    elif not isinstance(signatures, dict):
        signatures = {SERVING_KEY: signatures}
    sig_cfs = {str(k): _signature_function(v, str(k)) for k, v in signatures.items()}

    sm = m.SavedModel(saved_model_schema_version=SCHEMA_VERSION)
    mg = sm.meta_graphs.add()
    mg.meta_info_def.tags.append("serve")
    mg.meta_info_def.meta_graph_version = "pluggable"
    og = mg.object_graph_def
    graph = mg.graph_def
    graph.versions.producer = graphdef.PRODUCER
    ckpt = m.TrackableObjectGraph()
    values: dict[str, np.ndarray] = {}

    for i, node in enumerate(w.nodes):
        so = og.nodes.add()
        co = ckpt.nodes.add()
        for name, child in node.children:
            so.children.add(node_id=child, local_name=name)
            co.children.add(node_id=child, local_name=name)
        obj = node.obj
        if isinstance(obj, Variable):
            v = so.variable
            v.dtype = obj.dtype.enum
            v.shape.CopyFrom(proto.to_shape_proto(tuple(obj.shape)))
            v.trainable = obj.trainable
            v.name = obj.name.rsplit(":", 1)[0]
            key = f"{node.path}/.ATTRIBUTES/VARIABLE_VALUE"
            co.attributes.add(name="VARIABLE_VALUE", full_name=v.name, checkpoint_key=key)
            values[key] = np.asarray(obj.numpy())
            handle = graph.node.add(name=f"var_{i}", op="VarHandleOp")
            handle.attr["dtype"].type = obj.dtype.enum
            handle.attr["shape"].shape.CopyFrom(v.shape)
            handle.attr["shared_name"].s = f"var_{i}".encode()
        elif isinstance(obj, Function):
            fn = so.function
            cfs = _concrete_functions(obj)
            for cf in cfs:
                name = w.fresh(cf.name)
                _, bound = w.function_def(cf, name)
                fn.concrete_functions.append(name)
                scf = og.concrete_functions[name]
                scf.bound_inputs.extend(bound)
                args = tuple(TensorSpec(s.shape, s.dtype, n)
                             for n, s in zip(cf.input_names, cf.input_specs))
                scf.canonicalized_input_signature.CopyFrom(structured((args, {})))
                scf.output_signature.CopyFrom(w.output_signature(cf))
            params = [p.name for p in obj._params]
            fn.function_spec.CopyFrom(_saved_function_spec(
                params, [], None if obj.input_signature is None
                else tuple(obj.input_signature)))
        elif isinstance(obj, (list, tuple)):
            so.user_object.identifier = "trackable_list_wrapper" if isinstance(obj, list) \
                else "trackable_tuple_wrapper"
        elif isinstance(obj, dict):
            so.user_object.identifier = "trackable_dict_wrapper"
        else:
            so.user_object.identifier = "_generic_user_object"
        if so.WhichOneof("kind") == "user_object":
            so.user_object.version.producer = 1
            so.user_object.version.min_consumer = 1

    # the signatures: a "signatures" child of the root holding one function each
    if sig_cfs:
        if isinstance(root, (list, tuple, dict)):
            raise errors.InvalidArgumentError("signatures need a root object with "
                                              "attributes, not a list or dict")
        map_id = len(og.nodes)
        og.nodes[0].children.add(node_id=map_id, local_name="signatures")
        ckpt.nodes[0].children.add(node_id=map_id, local_name="signatures")
        sig_map = og.nodes.add()
        ckpt.nodes.add()
        sig_map.user_object.identifier = "signature_map"
        sig_map.user_object.version.producer = 1
        sig_map.user_object.version.min_consumer = 1
        for key in sorted(sig_cfs):
            cf = sig_cfs[key]
            _write_signature(w, mg, og, ckpt, map_id, key, cf)
    mg.graph_def.library.function.extend(w.library[n] for n in sorted(w.library))
    ckpt_bytes = proto.encode(ckpt)
    values[OBJECT_GRAPH_KEY] = np.array(ckpt_bytes, object)
    return sm, values


def _write_signature(w: _Writer, mg, og, ckpt, map_id: int, key: str, cf: ConcreteFunction):
    m = w.m
    keys = _input_keys(cf)
    outs = _signature_outputs(cf)
    name = w.fresh(f"signature_wrapper_{key}")
    fd, bound = w.function_def(cf, name, outs)
    node_id = len(og.nodes)
    og.nodes[map_id].children.add(node_id=node_id, local_name=key)
    ckpt.nodes[map_id].children.add(node_id=node_id, local_name=key)
    so = og.nodes.add()
    ckpt.nodes.add()
    bare = so.bare_concrete_function
    bare.concrete_function_name = name
    bare.argument_keywords.extend(keys)
    bare.allowed_positional_arguments = len(keys)
    bare.function_spec.CopyFrom(_saved_function_spec([], keys, None))
    scf = og.concrete_functions[name]
    scf.bound_inputs.extend(bound)
    kwargs = {k: TensorSpec(s.shape, s.dtype, k) for k, s in zip(keys, cf.input_specs)}
    scf.canonicalized_input_signature.CopyFrom(structured(((), kwargs)))
    out_specs = {}
    for o, (node, i) in zip(outs, cf.graph.outputs):
        out_specs[o] = TensorSpec(node.out_shapes[i], node.out_dtypes[i], o)
    scf.output_signature.CopyFrom(structured(out_specs))
    # The graph form of the signature (TensorFlow 1 loaders, saved_model_cli).
    graph = mg.graph_def
    sd = mg.signature_def[key]
    sd.method_name = PREDICT_METHOD
    call = m.NodeDef(name=f"{key}_call", op="StatefulPartitionedCall")
    for k, spec in zip(keys, cf.input_specs):
        ph = graph.node.add(name=f"{key}_{k}", op="Placeholder")
        ph.attr["dtype"].type = spec.dtype.enum
        ph.attr["shape"].shape.CopyFrom(proto.to_shape_proto(spec.shape))
        call.input.append(ph.name)
        info = sd.inputs[k]
        info.name = f"{ph.name}:0"
        info.dtype = spec.dtype.enum
        info.tensor_shape.CopyFrom(ph.attr["shape"].shape)
    call.input.extend(f"var_{i}" for i in bound)
    call.attr["f"].func.name = name
    call.attr["Tin"].list.type.extend(a.type for a in fd.signature.input_arg)
    call.attr["Tout"].list.type.extend(a.type for a in fd.signature.output_arg)
    for j, (o, spec) in enumerate(out_specs.items()):
        info = sd.outputs[o]
        info.name = f"{call.name}:{j}"
        info.dtype = spec.dtype.enum
        info.tensor_shape.CopyFrom(proto.to_shape_proto(spec.shape))
    graph.node.append(call)


def save(obj: Any, export_dir: str | os.PathLike, signatures: Any = None) -> None:
    """Writes `obj` as a SavedModel in directory `export_dir` (see the
    package's documentation)."""
    sm, values = build(obj, signatures)
    export_dir = os.fspath(export_dir)
    index, data = tensor_bundle.write_bundle(values)
    try:
        _write(export_dir, index, data, proto.encode(sm))
    except OSError as exc:
        raise errors.PermissionDeniedError(
            f"cannot write the SavedModel {export_dir}: {exc.strerror or exc} (check that the "
            "directory is writable and that its variables/ is a plain directory)") from None


def _write(export_dir: str, index: bytes, data: bytes, saved_model: bytes) -> None:
    os.makedirs(export_dir, exist_ok=True)
    # Everything is written under new names first, then renamed into place.
    tmp = os.path.join(export_dir, f".variables.tmp{secrets.token_hex(8)}")
    os.mkdir(tmp, 0o755)
    try:
        prefix = os.path.join(tmp, VARIABLES_PREFIX)
        _write_atomic(prefix + tensor_bundle.DATA_SUFFIX, data)
        _write_atomic(prefix + ".index", index)
        final = os.path.join(export_dir, VARIABLES_DIR)
        if os.path.isdir(final) and not os.path.islink(final):
            old = os.path.join(export_dir, f".variables.old{secrets.token_hex(8)}")
            os.rename(final, old)
            os.rename(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    os.makedirs(os.path.join(export_dir, ASSETS_DIR), exist_ok=True)
    _write_atomic(os.path.join(export_dir, SAVED_MODEL_FILE), saved_model)
