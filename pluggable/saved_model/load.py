"""Reading a SavedModel: objects, variables and functions back.

Every node of the ``SavedObjectGraph`` becomes a Python object: a user
object a ``pg.Module`` whose attributes are its children, a list or dict
wrapper a list or dict, a variable a ``pg.Variable`` holding its value
from the TensorBundle checkpoint, a function a ``RestoredFunction``
(its concrete functions, chosen by the arguments of a call), a bare
concrete function (a signature) a ``RestoredSignature`` called with
keywords. Each ``FunctionDef`` is read with the GraphDef importer; calls
of one library function from another (``PartitionedCall``,
``StatefulPartitionedCall``) are inlined first, and the function's resource
inputs named by ``bound_inputs`` become the handles of the restored
variables.

Nothing in the files is trusted: ``saved_model.pb`` and the checkpoint
files must be regular files inside the directory (symbolic links are
refused), sizes, versions, references between nodes and checksums are
checked, asset names are plain names inside ``assets/``, and every problem
is a typed error naming the file.
"""
from __future__ import annotations

import copy
import logging
import os
from typing import Any

import numpy as np

from ..framework import dtypes, errors, proto
from ..framework.tensor import Tensor
from ..graph import graphdef, nest
from ..graph.function import ConcreteFunction, TensorSpec
from ..ops.variables import Variable
from ..training.checkpoint import _read_regular
from ..training.module import Module
from . import tensor_bundle
from .save import (ASSETS_DIR, OBJECT_GRAPH_KEY, SAVED_MODEL_FILE, SCHEMA_VERSION,
                   VARIABLES_DIR, VARIABLES_PREFIX)

log = logging.getLogger("pluggable.saved_model")
CALL_OPS = ("PartitionedCall", "StatefulPartitionedCall")
_MAX_PB_BYTES = 1 << 31


class RestoredObject(Module):
    """An object of a loaded SavedModel: its saved attributes are its
    attributes (``variables`` and ``trainable_variables`` collect them)."""

    def __init__(self) -> None:
        super().__init__(name="restored")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        call = vars(self).get("__call__")
        if call is None:
            raise TypeError("this restored object was saved without a __call__ function")
        return call(*args, **kwargs)


class Signatures(dict):
    """The signatures of a loaded SavedModel, by key (``"serving_default"``)."""


class RestoredSignature:
    """A signature of a loaded SavedModel: call it with its inputs as
    keywords (``sig(x=...)``); it returns a dict of its outputs."""

    def __init__(self, name: str, cf: ConcreteFunction, keywords: list[str], positional: int):
        self.name, self.concrete_function = name, cf
        self.argument_keywords, self._positional = keywords, positional

    @property
    def structured_input_signature(self) -> tuple:
        return ((), {k: s for k, s in zip(self.argument_keywords,
                                          self.concrete_function.input_specs)})

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) > self._positional:
            raise TypeError(f"{self.name} takes its inputs as keywords "
                            f"({', '.join(self.argument_keywords)}), got {len(args)} "
                            "positional arguments")
        values = list(args)
        for key in self.argument_keywords[len(args):]:
            if key not in kwargs:
                raise TypeError(f"{self.name}: missing input {key!r} (its inputs are "
                                f"{', '.join(self.argument_keywords)})")
            values.append(kwargs.pop(key))
        if kwargs:
            raise TypeError(f"{self.name}: no input named {', '.join(sorted(kwargs))}; its "
                            f"inputs are {', '.join(self.argument_keywords)}")
        cf = self.concrete_function
        return cf._call_flat(cf._check_inputs(values))

    def __repr__(self) -> str:
        return f"<RestoredSignature {self.name}({', '.join(self.argument_keywords)})>"


class RestoredFunction:
    """A ``pg.function`` of a loaded SavedModel: a call runs the first of
    its concrete functions whose input specs the arguments match."""

    def __init__(self, name: str, functions: list[tuple[ConcreteFunction, Any]],
                 arg_names: list[str]):
        self.__name__ = name
        self._functions = functions       # (concrete function, args structure)
        self._arg_names = arg_names

    @property
    def concrete_functions(self) -> list[ConcreteFunction]:
        return [cf for cf, _ in self._functions]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        args = list(args)
        for name in self._arg_names[len(args):]:
            if name in kwargs:
                args.append(kwargs.pop(name))
        if kwargs:
            raise TypeError(f"{self.__name__}: unexpected arguments {sorted(kwargs)}")
        tried = []
        for cf, structure in self._functions:
            if len(structure) != len(args) or not all(
                    nest.same_structure(s, a) for s, a in zip(structure, args)):
                tried.append(cf.input_specs)
                continue
            flat = nest.flatten(args)
            if all(_compatible(s, v) for s, v in zip(cf.input_specs, flat)):
                return cf._call_flat(cf._check_inputs(flat))
            tried.append(cf.input_specs)
        raise TypeError(f"{self.__name__}: no saved concrete function takes these "
                        f"arguments; the saved input specs are {tried}")

    def __repr__(self) -> str:
        return f"<RestoredFunction {self.__name__}: {len(self._functions)} concrete functions>"


def _compatible(spec: TensorSpec, v: Any) -> bool:
    if not isinstance(v, (Tensor, np.ndarray, np.generic, int, float, bool, list, Variable)):
        return False
    a = v if isinstance(v, Tensor) else None
    shape = tuple(a.shape) if a is not None else np.shape(v)
    dtype = a.dtype if a is not None else None
    if dtype is not None and dtype != spec.dtype:
        return False
    if spec.shape is None:
        return True
    return len(shape) == len(spec.shape) and all(
        s is None or s == d for s, d in zip(spec.shape, shape))


# ------------------------------------------------------------------ files

def _bad(path: str, why: str) -> errors.DataLossError:
    return errors.DataLossError(f"SavedModel file {path}: {why}")


def _read(directory: str, *parts: str, limit: int) -> bytes:
    path = os.path.join(directory, *parts)
    try:
        return _read_regular(path, limit, lambda why: _bad(path, why), follow=False)
    except errors.NotFoundError:
        raise errors.NotFoundError(
            f"{path} does not exist: {directory} is not a complete SavedModel directory "
            f"(it needs {os.path.join(*parts)}; save it again with "
            "pg.saved_model.save or tf.saved_model.save)") from None


def read_saved_model(directory: str):
    """The ``SavedModel`` message of `directory`, checked."""
    path = os.path.join(directory, SAVED_MODEL_FILE)
    if not os.path.isdir(directory):
        raise errors.NotFoundError(f"{directory} is not a directory; pg.saved_model.load "
                                   "takes the directory that saved_model.pb is in")
    data = _read(directory, SAVED_MODEL_FILE, limit=_MAX_PB_BYTES)
    sm = proto.decode(proto.messages().SavedModel, data, source=path)
    if not sm.meta_graphs or sm.saved_model_schema_version == 0:
        raise _bad(path, f"it holds {len(sm.meta_graphs)} MetaGraphDefs and schema version "
                   f"{sm.saved_model_schema_version} (the file is empty or truncated)")
    if sm.saved_model_schema_version != SCHEMA_VERSION:
        raise errors.UnimplementedError(
            f"{path} has SavedModel schema version {sm.saved_model_schema_version}; "
            f"pluggable reads version {SCHEMA_VERSION} (save it with a writer of that "
            "version)")
    return sm


def _meta_graph(sm, path: str):
    for mg in sm.meta_graphs:
        if "serve" in mg.meta_info_def.tags:
            break
    else:
        mg = sm.meta_graphs[0]
    if not mg.object_graph_def.nodes:
        raise errors.UnimplementedError(
            f"{path} has no object graph (a SavedModel of TensorFlow 1's API); pluggable "
            "loads SavedModels written by TensorFlow 2 or by pg.saved_model.save")
    return mg


def _checkpoint_values(directory: str, og) -> dict[int, np.ndarray]:
    """Saved node id -> value of every variable node, from the bundle."""
    wanted = [i for i, n in enumerate(og.nodes) if n.WhichOneof("kind") == "variable"]
    if not wanted:
        return {}
    base = os.path.join(VARIABLES_DIR, VARIABLES_PREFIX)
    where = os.path.join(directory, base + ".index")
    index = _read(directory, VARIABLES_DIR, VARIABLES_PREFIX + ".index", limit=1 << 30)
    entries = tensor_bundle.read_entries(index, where)
    data_where = os.path.join(directory, base + tensor_bundle.DATA_SUFFIX)
    data = _read(directory, VARIABLES_DIR, VARIABLES_PREFIX + tensor_bundle.DATA_SUFFIX,
                 limit=1 << 40)
    keys = _checkpoint_keys(entries, data, og, where)
    out = {}
    for i in wanted:
        key = keys.get(i)
        if key is None or key not in entries:
            raise errors.NotFoundError(
                f"{where} has no value for variable node {i} "
                f"({og.nodes[i].variable.name!r}); the checkpoint does not belong to this "
                "saved_model.pb")
        out[i] = tensor_bundle.read_value(entries[key], data, key, data_where)
    return out


def _checkpoint_keys(entries: dict, data: bytes, og, where: str) -> dict[int, str]:
    """Saved node id -> checkpoint key, matching the checkpoint's object
    graph to the SavedModel's by the names of the children from the root."""
    entry = entries.get(OBJECT_GRAPH_KEY)
    if entry is None:
        raise errors.DataLossError(f"{where} has no {OBJECT_GRAPH_KEY} (it is no object-"
                                   "based checkpoint)")
    raw = tensor_bundle.read_value(entry, data, OBJECT_GRAPH_KEY, where)
    ckpt = proto.decode(proto.messages().TrackableObjectGraph, bytes(raw.reshape(-1)[0]),
                        source=f"{where} ({OBJECT_GRAPH_KEY})")
    out: dict[int, str] = {}
    stack, seen = [(0, 0)], set()
    while stack:
        saved_id, ckpt_id = stack.pop()
        if (saved_id, ckpt_id) in seen or ckpt_id >= len(ckpt.nodes):
            continue
        seen.add((saved_id, ckpt_id))
        node = ckpt.nodes[ckpt_id]
        for attr in node.attributes:
            if attr.name == "VARIABLE_VALUE":
                out[saved_id] = attr.checkpoint_key
        children = {c.local_name: c.node_id for c in og.nodes[saved_id].children}
        for c in node.children:
            if c.local_name in children:
                stack.append((children[c.local_name], c.node_id))
    return out


def _asset_path(directory: str, mg, index: int) -> str:
    path = os.path.join(directory, SAVED_MODEL_FILE)
    if not 0 <= index < len(mg.asset_file_def):
        raise _bad(path, f"an asset names asset_file_def {index}, of "
                   f"{len(mg.asset_file_def)}")
    name = mg.asset_file_def[index].filename
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
        raise errors.InvalidArgumentError(
            f"SavedModel file {path}: asset {name!r} is not a plain file name inside "
            f"{ASSETS_DIR}/; it is refused (nothing outside the SavedModel is read)")
    return os.path.join(directory, ASSETS_DIR, name)


# ------------------------------------------------------------------ functions

def _split(ref: str) -> tuple[str, str]:
    """'node:out:i' -> ('node', ':out:i'); 'arg' -> ('arg', '')."""
    head, sep, tail = ref.partition(":")
    return head, sep + tail


def inline_calls(fd, library: dict, depth: int = 0):
    """`fd` with every call of a library function (PartitionedCall,
    StatefulPartitionedCall) replaced by the callee's nodes."""
    if not any(nd.op in CALL_OPS for nd in fd.node_def):
        return fd
    if depth > graphdef.LIMITS.max_function_depth:
        raise errors.ResourceExhaustedError(
            f"function {fd.signature.name!r}: calls nest deeper than max_function_depth="
            f"{graphdef.LIMITS.max_function_depth}")
    out = copy.deepcopy(fd)
    del out.node_def[:]
    renamed: dict[str, str] = {}          # "call:output:i" -> the callee's result
    for nd in fd.node_def:
        callee_name = nd.attr["f"].func.name if nd.op in CALL_OPS else None
        if callee_name is None:
            out.node_def.append(nd)
            continue
        callee = library.get(callee_name)
        if callee is None:
            raise errors.NotFoundError(
                f"function {fd.signature.name!r}: node {nd.name!r} calls {callee_name!r}, "
                "which is not in the function library")
        callee = inline_calls(callee, library, depth + 1)
        data = [i for i in nd.input if not i.startswith("^")]
        controls = [i for i in nd.input if i.startswith("^")]
        params = [a.name for a in callee.signature.input_arg]
        if len(data) != len(params):
            raise errors.InvalidArgumentError(
                f"function {fd.signature.name!r}: node {nd.name!r} passes {len(data)} "
                f"inputs to {callee_name!r}, which takes {len(params)}")
        args = dict(zip(params, data))
        prefix = nd.name + "/"

        def mapped(ref: str) -> str:
            if ref.startswith("^"):
                src = ref[1:]
                return "^" + (_split(args[src])[0].lstrip("^") if src in args
                              else prefix + src)
            head, tail = _split(ref)
            return args[head] if head in args and not tail else prefix + ref
        members = []
        for cnd in callee.node_def:
            new = copy.deepcopy(cnd)
            new.name = prefix + cnd.name
            del new.input[:]
            ins = [mapped(i) for i in cnd.input]
            new.input.extend([i for i in ins if not i.startswith("^")] +
                             [i for i in ins if i.startswith("^")] + controls)
            out.node_def.append(new)
            members.append(new.name)
        done = out.node_def.add(name=nd.name, op="NoOp")   # stands for "^call"
        done.input.extend("^" + n for n in members)
        for k, arg in enumerate(callee.signature.output_arg):
            renamed[f"{nd.name}:output:{k}"] = mapped(callee.ret[arg.name])
    for nd in out.node_def:
        new = [renamed.get(i, i) for i in nd.input]
        del nd.input[:]
        nd.input.extend(new)
    for key in list(out.ret):
        out.ret[key] = renamed.get(out.ret[key], out.ret[key])
    return out


def _called(fd) -> set[str]:
    names = set()
    for nd in fd.node_def:
        for a in nd.attr.values():
            which = a.WhichOneof("value")
            if which == "func":
                names.add(a.func.name)
            elif which == "list":
                names.update(f.name for f in a.list.func)
    return names


class _Functions:
    """The function library of the SavedModel, read into graphs on demand."""

    def __init__(self, library, path: str):
        self.defs = {}
        for fd in library.function:
            self.defs[fd.signature.name] = fd
        self.graphs: dict = {}
        self.path = path

    def graph(self, name: str):
        fd = self.defs.get(name)
        if fd is None:
            raise _bad(self.path, f"the object graph names function {name!r}, which is not "
                       "in the function library")
        fd = inline_calls(fd, self.defs)
        for callee in sorted(_called(fd)):   # control-flow branches and bodies
            if callee not in self.graphs and callee in self.defs:
                self.graphs[callee] = None
                self.graphs[callee] = self.graph(callee)
        graphdef._check_count(len(fd.node_def), f"function {name!r}")
        return graphdef.from_function_def(fd, self.graphs)


_FUNC_ATTRS = {"If": ("then_branch", "else_branch"), "StatelessIf": ("then_branch", "else_branch"),
               "While": ("cond", "body"), "StatelessWhile": ("cond", "body")}


def bind_handles(g, counter: list) -> None:
    """Where a branch or loop function of `g` receives a variable's handle
    as an argument, a copy of the function reads the handle from a Const
    instead (how traced functions hold variables), recursively."""
    for node in list(g.nodes):
        attrs = _FUNC_ATTRS.get(node.op)
        if attrs is None:
            continue
        first = 1 if node.op.endswith("If") else 0
        handles = {k - first: src for k, (src, _) in enumerate(node.inputs)
                   if k >= first and src.op == "Const" and
                   src.out_dtypes[0] is dtypes.resource}
        if not handles:
            continue
        for a in attrs:
            src_graph = g.library.get(node.attrs[a])
            if src_graph is None:
                continue
            fg = src_graph.copy()
            counter[0] += 1
            fg.name = f"{src_graph.name}_bound_{counter[0]}"
            for k, const in handles.items():
                if k >= len(fg.inputs):
                    continue
                ph = fg.inputs[k]
                c = fg.add_node("Const", [], dict(const.attrs), [dtypes.resource], [()],
                                name="variable_handle")
                for n in fg.nodes:
                    n.inputs = [(c, 0) if s is ph else (s, i) for s, i in n.inputs]
                fg.outputs = [(c, 0) if s is ph else (s, i) for s, i in fg.outputs]
            bind_handles(fg, counter)
            g.library[fg.name] = fg
            node.attrs = dict(node.attrs, **{a: fg.name})


def _spec_of(v) -> Any:
    """The nest of TensorSpecs (or Python values) a StructuredValue holds."""
    which = v.WhichOneof("kind")
    if which == "tensor_spec_value":
        s = v.tensor_spec_value
        return TensorSpec(proto.from_shape_proto(s.shape), proto.from_datatype(s.dtype),
                          s.name or None)
    if which == "none_value" or which is None:
        return None
    if which in ("tuple_value", "list_value"):
        items = [_spec_of(x) for x in getattr(v, which).values]
        return tuple(items) if which == "tuple_value" else items
    if which == "dict_value":
        return {k: _spec_of(v.dict_value.fields[k]) for k in sorted(v.dict_value.fields)}
    if which == "named_tuple_value":
        return tuple(_spec_of(p.value) for p in v.named_tuple_value.values)
    if which in ("int64_value", "float64_value", "string_value", "bool_value"):
        return getattr(v, which)
    raise errors.UnimplementedError(f"a saved function's signature holds a {which}, "
                                    "which pluggable does not read")


def _structure(output_spec: Any) -> Any:
    """The output structure with each TensorSpec replaced by its flat index."""
    counter = iter(range(1 << 30))
    if output_spec is None:
        return None
    if not nest.is_nested(output_spec):
        return next(counter)
    return nest.map_structure(lambda s: None if s is None else next(counter), output_spec)


def _concrete(functions: _Functions, name: str, saved, variables: dict, og,
              path: str) -> tuple[ConcreteFunction, Any, list[str]]:
    g = functions.graph(name)
    bound = list(saved.bound_inputs)
    n_args = len(g.inputs) - len(bound)
    if n_args < 0:
        raise _bad(path, f"function {name!r} captures {len(bound)} objects but has "
                   f"{len(g.inputs)} inputs")
    for ph, node_id in zip(g.inputs[n_args:], bound):
        var = variables.get(node_id)
        if var is None:
            raise errors.UnimplementedError(
                f"function {name!r} captures saved node {node_id} "
                f"({og.nodes[node_id].WhichOneof('kind') if node_id < len(og.nodes) else '?'}),"
                " which is not a variable; pluggable restores functions that capture "
                "variables only")
        ph.op = "Const"
        ph.attrs = {"dtype": dtypes.resource, "value": var.handle}
        ph.out_shapes = [()]
    g.inputs = g.inputs[:n_args]
    bind_handles(g, [0])
    args, kwargs = _spec_of(saved.canonicalized_input_signature) or ((), {})
    flat = nest.flatten(list(args)) + [kwargs[k] for k in kwargs]
    specs = [s for s in flat if isinstance(s, TensorSpec)]
    if len(specs) != n_args:
        raise _bad(path, f"function {name!r} takes {n_args} tensors but its signature "
                   f"gives {len(specs)}")
    names = [s.name or ph.name for s, ph in zip(specs, g.inputs)]
    for s, ph in zip(specs, g.inputs):
        ph.attrs["shape"] = s.shape
        ph.out_shapes = [s.shape]
    structure = _structure(_spec_of(saved.output_signature))
    n_out = len(nest.flatten(structure)) if nest.is_nested(structure) else \
        (0 if structure is None else 1)
    if n_out != len(g.outputs):
        raise _bad(path, f"function {name!r} returns {len(g.outputs)} tensors but its "
                   f"output signature has {n_out}")
    cf = ConcreteFunction(g, list(zip(names, specs)), structure, name)
    return cf, tuple(args), list(kwargs)


# ------------------------------------------------------------------ objects

def load(export_dir: str | os.PathLike) -> Any:
    """The root object of the SavedModel in `export_dir` (see the package's
    documentation)."""
    directory = os.fspath(export_dir)
    path = os.path.join(directory, SAVED_MODEL_FILE)
    try:
        return _load(directory, path)
    except errors.PluggableError:
        raise
    except RecursionError:
        raise _bad(path, "it nests too deeply to be read") from None
    except (TypeError, ValueError, KeyError, IndexError, AttributeError, OverflowError,
            MemoryError) as exc:
        raise _bad(path, f"it cannot be read ({type(exc).__name__}: {exc}); it is damaged "
                   "or from a writer pluggable does not understand") from None


def _load(directory: str, path: str) -> Any:
    sm = read_saved_model(directory)
    mg = _meta_graph(sm, path)
    og = mg.object_graph_def
    for i, node in enumerate(og.nodes):
        for ref in list(node.children) + list(node.dependencies):
            if not 0 <= ref.node_id < len(og.nodes):
                raise _bad(path, f"object {i} names child {ref.node_id}, of "
                           f"{len(og.nodes)} objects")
    values = _checkpoint_values(directory, og)
    objects: list[Any] = [None] * len(og.nodes)
    variables: dict[int, Variable] = {}
    for i, node in enumerate(og.nodes):
        kind = node.WhichOneof("kind")
        if kind == "variable":
            sv = node.variable
            value = values[i]
            want = proto.from_datatype(sv.dtype)
            if dtypes.as_dtype(value.dtype) != want or \
                    not _shape_matches(proto.from_shape_proto(sv.shape), value.shape):
                raise errors.InvalidArgumentError(
                    f"variable {sv.name!r}: the checkpoint holds a {value.dtype} of shape "
                    f"{list(value.shape)}, but saved_model.pb declares {want.name} "
                    f"{proto.from_shape_proto(sv.shape)}")
            variables[i] = objects[i] = Variable(value, trainable=sv.trainable,
                                                 name=sv.name or None)
        elif kind == "user_object":
            ident = node.user_object.identifier
            objects[i] = ([] if ident == "trackable_list_wrapper" else
                          {} if ident == "trackable_dict_wrapper" else
                          Signatures() if ident == "signature_map" else RestoredObject())
        elif kind == "asset":
            objects[i] = _asset_path(directory, mg, node.asset.asset_file_def_index)
        elif kind not in ("function", "bare_concrete_function"):
            log.debug("object %d of %s is a %s, which is restored as None", i, path, kind)
    functions = _Functions(mg.graph_def.library, path)
    for i, node in enumerate(og.nodes):
        kind = node.WhichOneof("kind")
        if kind == "function":
            fns = []
            arg_names = []
            for name in node.function.concrete_functions:
                saved = og.concrete_functions.get(name)
                if saved is None:
                    raise _bad(path, f"function {name!r} has no SavedConcreteFunction")
                cf, args, _ = _concrete(functions, name, saved, variables, og, path)
                fns.append((cf, args))
            spec = _spec_of(node.function.function_spec.fullargspec)
            if isinstance(spec, tuple) and spec and isinstance(spec[0], list):
                arg_names = [a for a in spec[0] if isinstance(a, str)]
            objects[i] = RestoredFunction(_name_in_parent(og, i), fns, arg_names)
        elif kind == "bare_concrete_function":
            bare = node.bare_concrete_function
            saved = og.concrete_functions.get(bare.concrete_function_name)
            if saved is None:
                raise _bad(path, f"function {bare.concrete_function_name!r} has no "
                           "SavedConcreteFunction")
            cf, _, kw = _concrete(functions, bare.concrete_function_name, saved, variables,
                                  og, path)
            keywords = list(bare.argument_keywords) or kw
            objects[i] = RestoredSignature(_name_in_parent(og, i), cf, keywords,
                                           int(bare.allowed_positional_arguments))
    for i, node in enumerate(og.nodes):
        parent = objects[i]
        for ref in node.children:
            child = objects[ref.node_id]
            if isinstance(parent, list):
                parent.append(child)
            elif isinstance(parent, dict):
                parent[ref.local_name] = child
            elif isinstance(parent, RestoredObject):
                if ref.local_name in ("_name", "_scope_name", "_name_scope_object"):
                    continue
                object.__setattr__(parent, ref.local_name, child)
    return objects[0]


def _shape_matches(declared: Any, shape: tuple) -> bool:
    return declared is None or (len(declared) == len(shape) and all(
        d is None or d == s for d, s in zip(declared, shape)))


def _name_in_parent(og, node_id: int) -> str:
    for node in og.nodes:
        for ref in node.children:
            if ref.node_id == node_id:
                return ref.local_name
    return f"function_{node_id}"
