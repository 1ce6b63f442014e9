"""``pg.onnx.import_model``: an ONNX model as a callable graph.

The model's nodes are lowered through ``mapping.RULES`` (or, for an
unknown (domain, op_type), the catalogue op ``domain::OpType``) into a
``pluggable.graph`` graph, built once per set of input shapes and device
scope, and run as a ``ConcreteFunction``: the same placement (soft
placement included), passes, plugin optimizers and executor as a
``pg.function``. Constant subgraphs are folded while the graph is built.
Import limits are the GraphDef importer's (``pg.graph_util.set_import_limits``).
"""
from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np

from ..framework import errors, op_catalog
from ..framework.tensor import Tensor
from ..graph import graph_util, graphdef, tracing
from ..graph.function import ConcreteFunction, TensorSpec
from ..graph.ir import Graph
from ..runtime import placement
from . import mapping

# What a malformed model makes Python raise while it is read or lowered (a
# dimension past int64, a zero stride, a value of the wrong type, a missing
# attribute): each becomes an InvalidArgumentError naming the node or model.
_MALFORMED = (TypeError, ValueError, KeyError, IndexError, AttributeError, ArithmeticError)


def _onnx():
    try:
        import onnx
    except ImportError:
        raise errors.FailedPreconditionError(
            'pg.onnx needs the onnx package: pip install "pluggable[onnx]"') from None
    return onnx


class ValueInfo:
    """Name, dtype and shape (None for a symbolic dimension) of a model input or output."""

    def __init__(self, name: str, dtype: Any, shape: tuple | None, sequence: bool = False,
                 optional: bool = False):
        self.name, self.dtype, self.shape = name, dtype, shape
        self.sequence = sequence   # a sequence of tensors of that dtype and shape (a list)
        self.optional = optional   # may be fed None (no value)

    def __repr__(self) -> str:
        kind = ", sequence" if self.sequence else ""
        return (f"ValueInfo({self.name!r}, {getattr(self.dtype, 'name', self.dtype)}, "
                f"{self.shape}{kind})")


# ================================================================ loading

def _load(model: Any, onnx) -> tuple[Any, str | None]:
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        data = graph_util._read_file(path)
        return _parse(data, path, onnx), os.path.dirname(os.path.abspath(path))
    if isinstance(model, (bytes, bytearray, memoryview)):
        return _parse(bytes(model), "the given bytes", onnx), None
    if isinstance(model, onnx.ModelProto):
        return model, None
    raise TypeError(f"import_model needs a path, bytes or an onnx.ModelProto, got "
                    f"{type(model).__name__}")


def _parse(data: bytes, source: str, onnx):
    m = onnx.ModelProto()
    try:
        m.ParseFromString(data)
    except Exception as exc:  # protobuf's DecodeError, RuntimeWarning of a bad varint...
        raise errors.DataLossError(f"{source} is not an ONNX model ({exc}); the file is "
                                   "truncated or corrupt") from None
    if not m.HasField("graph"):
        raise errors.DataLossError(f"{source} holds no ONNX graph; the file is truncated, "
                                   "corrupt, or not an ONNX model")
    return m


def _opsets(model) -> dict[str, int]:
    out = {}
    for o in model.opset_import:
        out["" if o.domain == "ai.onnx" else o.domain] = int(o.version)
    if "" not in out:
        out[""] = 1
    if out[""] > mapping.MAX_OPSET:
        raise errors.UnimplementedError(
            f"the model uses opset {out['']} of the default ONNX domain; pluggable maps "
            f"opsets up to {mapping.MAX_OPSET}. Convert it with "
            "onnx.version_converter.convert_version(model, "
            f"{mapping.MAX_OPSET})")
    return out


def _check_limits(graph, depth: int = 0) -> None:
    limits = graphdef.LIMITS
    if depth > limits.max_function_depth:
        raise errors.ResourceExhaustedError(
            f"graph {graph.name!r} nests subgraphs {depth} deep, more than "
            f"max_function_depth={limits.max_function_depth}; raise it with "
            "pg.graph_util.set_import_limits(max_function_depth=...)")
    graphdef._check_count(len(graph.node), f"ONNX graph {graph.name!r}")
    for t in graph.initializer:
        _check_tensor_size(t, f"initializer {t.name!r}")
    for node in graph.node:
        for a in node.attribute:
            if a.HasField("t"):
                _check_tensor_size(a.t, f"node {node.name!r} ({node.op_type}) attribute "
                                   f"{a.name!r}")
            for g in list(a.graphs) + ([a.g] if a.HasField("g") else []):
                _check_limits(g, depth + 1)


def _check_tensor_size(t, where: str) -> None:
    count = 1
    for d in t.dims:
        if d < 0:
            raise errors.InvalidArgumentError(f"{where} has a negative dimension {d}")
        count *= int(d)
    size = count * max(mapping.ONNX_DTYPES[t.data_type].size
                       if t.data_type in mapping.ONNX_DTYPES else 1, 1)
    if size > graphdef.LIMITS.max_constant_bytes:
        raise errors.ResourceExhaustedError(
            f"{where} of shape {list(t.dims)} describes {size} bytes, more than "
            f"max_constant_bytes={graphdef.LIMITS.max_constant_bytes}; raise it with "
            "pg.graph_util.set_import_limits(max_constant_bytes=...) if the model is trusted")


def _external_path(t, base: str | None) -> str:
    info = {e.key: e.value for e in t.external_data}
    loc = info.get("location", "")
    if base is None:
        raise errors.InvalidArgumentError(
            f"tensor {t.name!r} keeps its data in external file {loc!r}; load the model "
            "from its path so the file can be found next to it")
    full = os.path.realpath(os.path.join(base, loc))
    root = os.path.realpath(base)
    if not loc or os.path.isabs(loc) or os.path.commonpath([full, root]) != root:
        raise errors.PermissionDeniedError(
            f"tensor {t.name!r}: external data location {loc!r} is outside the model's "
            f"directory {root!r}; refused (external data must lie in the model's folder)")
    return full


def _tensor_value(t, base: str | None, onnx) -> np.ndarray:
    from onnx import numpy_helper
    if t.data_location == onnx.TensorProto.EXTERNAL:
        path = _external_path(t, base)
        info = {e.key: e.value for e in t.external_data}
        dt = mapping.ONNX_DTYPES.get(t.data_type)
        if dt is None:
            raise errors.UnimplementedError(f"tensor {t.name!r}: ONNX type {t.data_type}")
        count = int(np.prod(list(t.dims), dtype=np.int64))
        per_byte = _PACKED.get(dt.name, 0)
        size = -(-count // per_byte) if per_byte else count * dt.size
        offset, length = int(info.get("offset", 0)), int(info.get("length", size))
        if length != size:
            raise errors.DataLossError(f"tensor {t.name!r}: external length {length} does not "
                                       f"match its shape {list(t.dims)}")
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                raw = f.read(length)
        except OSError as exc:
            raise errors.NotFoundError(f"tensor {t.name!r}: cannot read external data "
                                       f"{path!r}: {exc.strerror or exc}") from None
        if len(raw) != length:
            raise errors.DataLossError(f"tensor {t.name!r}: external data {path!r} is short")
        if per_byte:
            return _unpack(raw, per_byte, count).view(dt.as_numpy_dtype).reshape(tuple(t.dims))
        return np.frombuffer(raw, dt.as_numpy_dtype).reshape(tuple(t.dims)).copy()
    try:
        a = numpy_helper.to_array(t)
    except Exception as exc:
        raise errors.DataLossError(f"tensor {t.name!r} cannot be read ({exc}); the model is "
                                   "corrupt") from None
    if a.dtype == object:   # strings: bytes, as pluggable's string tensors hold them
        return np.vectorize(_as_bytes, otypes=[object])(a) if a.size else a
    return a


# ONNX stores these two (4-bit) or four (2-bit) to a byte, the first in the low
# bits; pluggable's tensors hold one per byte (the bits at the bottom).
_PACKED = {"int4": 2, "uint4": 2, "float4_e2m1fn": 2, "int2": 4, "uint2": 4}


def _unpack(raw: bytes, per_byte: int, count: int) -> np.ndarray:
    b = np.frombuffer(raw, np.uint8)
    bits = 8 // per_byte
    parts = [(b >> (bits * i)) & ((1 << bits) - 1) for i in range(per_byte)]
    return np.stack(parts, axis=-1).reshape(-1)[:count].astype(np.uint8)


def _as_bytes(v) -> bytes:
    return v.encode() if isinstance(v, str) else bytes(v)


def _no_dtype(v, onnx) -> str:
    kind = v.type.WhichOneof("value")
    if kind != "tensor_type":
        kind = (kind or "unset").replace("_type", "")
        return (f"model input {v.name!r} is of an ONNX {kind} type; the inputs of a model "
                "pluggable imports are tensors (sequences and optionals exist only inside "
                "the graph)")
    elem = v.type.tensor_type.elem_type
    name = onnx.TensorProto.DataType.Name(elem) if elem in \
        onnx.TensorProto.DataType.values() else str(elem)
    return (f"model input {v.name!r} has the ONNX element type {name} ({elem}), which has no "
            "pluggable dtype; see pg.dtypes for the types there are")


def _value_info(v) -> ValueInfo:
    t, sequence, optional = v.type, False, v.type.HasField("optional_type")
    if optional:   # fed as its value, or None
        t = t.optional_type.elem_type
    if t.HasField("sequence_type"):
        t, sequence = t.sequence_type.elem_type, True
    tt = t.tensor_type
    dt = mapping.ONNX_DTYPES.get(tt.elem_type)
    shape = None
    if tt.HasField("shape"):
        shape = tuple(int(d.dim_value) if d.HasField("dim_value") else None
                      for d in tt.shape.dim)
    return ValueInfo(v.name, dt, shape, sequence, optional)


def _attrs(node, onnx) -> dict:
    out = {}
    for a in node.attribute:
        v = onnx.helper.get_attribute_value(a)
        if isinstance(v, bytes):
            v = v.decode(errors="replace")
        elif isinstance(v, onnx.TensorProto):
            v = _tensor_value(v, None, onnx)
        elif isinstance(v, list):
            v = [x.decode(errors="replace") if isinstance(x, bytes) else x for x in v]
        out[a.name] = v
    return out


# ================================================================ the model

class Model:
    """An imported ONNX model: ``m(**feeds)`` or ``m(feeds)`` returns
    {output name: tensor} (a list of tensors for a sequence output).
    ``inputs`` / ``outputs`` describe its values."""

    def __init__(self, model, base: str | None, onnx):
        self._onnx = onnx
        self.proto = model
        self.opsets = _opsets(model)
        if model.functions:
            model = self.proto = _inline_functions(model, self.opsets, onnx)
        g = model.graph
        _check_limits(g)
        self.name = g.name or "onnx_model"
        self._inits = {}
        for t in g.initializer:
            self._inits[t.name] = _tensor_value(t, base, onnx)
        self.inputs = [_value_info(v) for v in g.input if v.name not in self._inits]
        self.outputs = [_value_info(v) for v in g.output]
        for v, proto in zip(self.inputs, [p for p in g.input if p.name not in self._inits]):
            if v.dtype is None:
                raise errors.UnimplementedError(_no_dtype(proto, onnx))
        self._rules = [self._resolve(n) for n in g.node]
        self._value_inputs = self._find_value_inputs()
        self._check_wiring()
        self._cache: dict = {}
        self._lock = threading.Lock()

    def _resolve(self, node):
        domain = "" if node.domain == "ai.onnx" else node.domain
        opset = self.opsets.get(domain, 1)
        r = mapping.find(domain, node.op_type, opset)
        if r is not None:
            return r
        qualified = f"{domain}::{node.op_type}" if domain else node.op_type
        entry = _catalogue_entry(domain, node.op_type, self.opsets)
        if entry is None:
            raise errors.NotFoundError(
                f"ONNX node {node.name!r} (domain {domain or 'ai.onnx'!r}, op type "
                f"{node.op_type!r}, opset {opset}) maps to no built-in op and no catalogue op "
                f"named {qualified!r}; register one with pg.custom_op(..., "
                f"name={qualified!r}) or load a plugin that defines it")
        attrs = _attrs(node, self._onnx)
        if entry.kind == "custom":
            entry.check_attrs(attrs)
        return entry

    def _find_value_inputs(self) -> set:
        """Graph inputs whose values a converter needs (axes, shapes, a
        condition), read there or through the nodes that compute such a
        value from them (not through Shape or Size, which need only a
        shape): their values are part of the cache key and constants of the
        graph."""
        nodes = list(_all_nodes(self.proto.graph, self._onnx))
        needed = set()
        for node in nodes:
            for i in mapping.VALUE_INPUTS.get(node.op_type, ()):
                if i < len(node.input) and node.input[i]:
                    needed.add(node.input[i])
        grew = True
        while grew:   # a needed value needs the values it is computed from
            grew = False
            for node in reversed(nodes):
                if node.op_type in ("Shape", "Size") or \
                        not any(o in needed for o in node.output):
                    continue
                more = _reads(node) - needed
                if more:
                    needed |= more
                    grew = True
        return needed & {v.name for v in self.inputs}

    def _check_wiring(self) -> None:
        known = set(self._inits) | {v.name for v in self.inputs} | {""}
        for node in self.proto.graph.node:
            for name in node.input:
                if name not in known:
                    raise errors.InvalidArgumentError(
                        f"ONNX node {node.name!r} ({node.op_type}) reads {name!r}, which no "
                        "input, initializer or earlier node produces (a missing initializer, "
                        "or nodes out of topological order)")
            known.update(node.output)
        for v in self.outputs:
            if v.name not in known:
                raise errors.InvalidArgumentError(f"model output {v.name!r} is produced by "
                                                  "no node")

    # ---------------------------------------------------------- calling
    def __call__(self, feeds: dict | None = None, **kw: Any) -> dict:
        feeds = dict(feeds or {}, **kw)
        names = [v.name for v in self.inputs]
        unknown = sorted(set(feeds) - set(names))
        if unknown:
            raise errors.InvalidArgumentError(
                f"{self.name}: no input named {', '.join(unknown)}; inputs: {', '.join(names)}")
        missing = [n for n in names if n not in feeds]
        if missing:
            raise errors.InvalidArgumentError(
                f"{self.name}: input {', '.join(missing)} is not fed")
        fed = [None if v.optional and feeds[v.name] is None else
               self._feed_sequence(v, feeds[v.name]) if v.sequence else self._feed(v, feeds[v.name])
               for v in self.inputs]
        tensors = [t for f in fed if f is not None for t in (f if isinstance(f, list) else [f])]
        scope = placement.current()
        values = {v.name: np.asarray(t.numpy()) for v, t in zip(self.inputs, fed)
                  if v.name in self._value_inputs and not v.sequence}
        key = (None if scope is None else scope.name,
               tuple(len(f) if isinstance(f, list) else f is None for f in fed),
               tuple((t.dtype, tuple(t.shape)) for t in tensors),
               tuple((k, a.tobytes()) for k, a in sorted(values.items())))
        cf = self._cache.get(key)
        if cf is None:
            with self._lock:
                cf = self._cache.get(key)
                if cf is None:
                    cf = self._cache[key] = self._build_checked(fed, values)
        flat = list(cf._call_flat(cf._check_inputs(tensors)))
        out = {}
        for v, n in zip(self.outputs, cf.onnx_layout):
            if n is None:
                out[v.name] = flat.pop(0)
            else:
                out[v.name], flat = flat[:n], flat[n:]
        return out

    def _feed(self, v: ValueInfo, x: Any) -> Tensor:
        from ..runtime.tensors import convert_to_tensor
        if isinstance(x, self._onnx.TensorProto):
            x = _tensor_value(x, None, self._onnx)
        if not isinstance(x, Tensor):
            x = convert_to_tensor(np.asarray(x))
        if x.dtype is not v.dtype:
            raise errors.InvalidArgumentError(
                f"{self.name}: input {v.name!r} must be {v.dtype.name}, got {x.dtype.name}")
        if v.shape is not None:
            if len(v.shape) != len(x.shape) or any(
                    d is not None and d != s for d, s in zip(v.shape, x.shape)):
                raise errors.InvalidArgumentError(
                    f"{self.name}: input {v.name!r} has shape {tuple(x.shape)}, but the model "
                    f"declares {v.shape} (None: any size)")
        return x

    def _feed_sequence(self, v: ValueInfo, x: Any) -> list:
        if not isinstance(x, (list, tuple)):
            raise errors.InvalidArgumentError(
                f"{self.name}: input {v.name!r} is a sequence: feed a list of tensors")
        return [self._feed(v, e) for e in x]

    def _build_checked(self, tensors: list, values: dict) -> ConcreteFunction:
        """`_build`, with whatever a malformed model makes go wrong there
        (a value of a type pluggable lacks, a shape no op accepts) as a
        typed error."""
        try:
            return self._build(tensors, values)
        except errors.PluggableError:
            raise
        except RecursionError:
            raise errors.ResourceExhaustedError(
                f"{self.name}: the ONNX graph nests too deeply") from None
        except _MALFORMED as exc:
            raise errors.InvalidArgumentError(
                f"{self.name}: the ONNX graph cannot be built for these inputs "
                f"({type(exc).__name__}: {exc}); the model is corrupt or uses a form "
                "pluggable does not read") from None

    def _build(self, tensors: list, values: dict) -> ConcreteFunction:
        g = Graph(self.name)
        specs = []
        with tracing.trace_scope(g):
            env: dict[str, Any] = {}
            for v, t in zip(self.inputs, tensors):
                if t is None:   # an optional input fed no value
                    env[v.name] = None
                    continue
                items = []   # (a sequence input: one placeholder per tensor fed)
                for i, e in enumerate(t if isinstance(t, list) else [t]):
                    name = f"{v.name}_{i}" if isinstance(t, list) else v.name
                    ph = tracing.placeholder(g, name, e.dtype, tuple(e.shape))
                    items.append(tracing.SymbolicTensor(ph, 0))
                    specs.append((ph.name, TensorSpec(tuple(e.shape), e.dtype)))
                env[v.name] = items if isinstance(t, list) else values[v.name] \
                    if v.name in values else items[0]
            for name, a in self._inits.items():
                env[name] = a
            for node, r in zip(self.proto.graph.node, self._rules):
                self._emit(g, node, r, env)
            outs, layout = [], []
            for v in self.outputs:
                val = env[v.name]
                items = val if isinstance(val, list) else [val]   # a sequence: its tensors
                layout.append(len(items) if isinstance(val, list) else None)
                outs.extend(mapping.Ctx(0, v.name).op("Identity", _as_tensor(g, t))
                            for t in items)
        g.outputs = [t.ref for t in outs]
        cf = ConcreteFunction(g, specs, list(range(len(outs))), self.name)
        cf.onnx_layout = layout
        return cf

    def _emit(self, g: Graph, node, r, env: dict) -> None:
        ins = [env[n] if n else None for n in node.input]
        attrs = _attrs(node, self._onnx)
        domain = "" if node.domain == "ai.onnx" else node.domain
        c = mapping.Ctx(self.opsets.get(domain, 1), node.name or node.op_type)
        c.n_outputs = len(node.output)
        c.subgraph = lambda body, values: self._subgraph(g, body, env, values)
        raw = isinstance(r, mapping.Rule) and r.raw
        if raw:
            outs = self._lower(c, r, ins, attrs, node)
        elif all(x is None or isinstance(x, np.ndarray) for x in ins) and \
                isinstance(r, mapping.Rule):
            outs = self._fold(c, r, ins, attrs, g)
        else:
            if any(isinstance(x, list) for x in ins):
                raise errors.UnimplementedError(
                    f"ONNX node {c.node!r} ({node.op_type}) reads a sequence where it "
                    "needs a tensor")
            outs = self._lower(c, r, [None if x is None else _as_tensor(g, x) for x in ins],
                               attrs, node)
        for name, t in zip(node.output, outs):
            if name:
                env[name] = t

    def _subgraph(self, g: Graph, body, outer: dict, values: list) -> list:
        """Lowers subgraph `body` (of an If, Loop or Scan) into graph `g`
        with its inputs bound to `values`; names of the enclosing scopes
        are visible. Returns the values of its outputs."""
        env = dict(outer)
        if len(values) != len(body.input):
            raise errors.InvalidArgumentError(
                f"subgraph {body.name!r} takes {len(body.input)} inputs, given {len(values)}")
        for v, x in zip(body.input, values):
            env[v.name] = x
        for t in body.initializer:
            env[t.name] = _tensor_value(t, None, self._onnx)
        for node in body.node:
            for name in node.input:
                if name and name not in env:
                    raise errors.InvalidArgumentError(
                        f"ONNX node {node.name!r} ({node.op_type}) of subgraph {body.name!r} "
                        f"reads {name!r}, which nothing in scope produces")
            self._emit(g, node, self._resolve(node), env)
        return [env[v.name] for v in body.output]

    def _lower(self, c, r, ins, attrs, node) -> list:
        try:
            if isinstance(r, mapping.Rule):
                return list(r.fn(c, ins, attrs))
            return _call_catalogue(r, ins, attrs)
        except errors.OpError as exc:
            if f"{c.node!r}" in exc.message:
                raise
            raise type(exc)(f"ONNX node {c.node!r} ({node.op_type}): {exc.message}",
                            op=getattr(exc, "op", None)) from None
        except _MALFORMED as exc:
            raise errors.InvalidArgumentError(
                f"ONNX node {c.node!r} ({node.op_type}) cannot be lowered "
                f"({type(exc).__name__}: {exc}); check its attributes and inputs") from None

    def _fold(self, c, r, ins, attrs, g) -> list:
        """A node of constant inputs, computed now on CPU (its outputs are constants)."""
        from ..runtime.tensors import constant
        with tracing.init_scope(), placement.device("CPU:0"):
            ts = [None if x is None else constant(x) for x in ins]
            outs = self._lower(c, r, ts, attrs, type("N", (), {"op_type": r.op_type}))
            # (numpy() of a 0-d tensor is a numpy scalar: constants are arrays here)
            return [o if isinstance(o, np.ndarray) else np.asarray(o.numpy()) for o in outs]


def _catalogue_entry(domain: str, op_type: str, opsets: dict):
    """The catalogue op a node of (domain, op_type) resolves to, or None."""
    qualified = f"{domain}::{op_type}" if domain else op_type
    try:
        return op_catalog.get(qualified, opsets.get(domain, 1) if domain in opsets and domain
                              else None)
    except errors.NotFoundError:
        return None


def _inline_functions(model, opsets: dict, onnx):
    """`model` with every call of one of its local functions (``FunctionProto``:
    what ``torch.onnx.export(..., export_modules_as_functions=...)`` writes
    for each module) replaced by the function's body, recursively, as ONNX
    Runtime inlines them. A function whose (domain, name) the mapping table
    or the op catalogue already knows stays a call of that op (a kernel
    beats its decomposition). The size the inlined graph will have is
    counted first, so nesting cannot blow up past ``max_nodes``."""
    funcs = {(f.domain, f.name, getattr(f, "overload", "")): f for f in model.functions}
    keep = {k for k in funcs if mapping.find(k[0], k[1], opsets.get(k[0], 1)) is not None
            or _catalogue_entry(k[0], k[1], opsets) is not None}
    sizes: dict = {}

    def count(nodes, stack: tuple) -> int:
        n = 0
        for node in nodes:
            key = (node.domain, node.op_type, getattr(node, "overload", ""))
            if key not in funcs or key in keep:
                n += 1 + sum(count(g.node, stack) for a in node.attribute
                             for g in list(a.graphs) + ([a.g] if a.HasField("g") else []))
                continue
            if key in stack:
                raise errors.InvalidArgumentError(
                    f"local function {key[0]}::{key[1]} calls itself (through "
                    f"{' -> '.join(k[1] for k in stack)}); ONNX functions may not recurse")
            if len(stack) >= graphdef.LIMITS.max_function_depth:
                raise errors.ResourceExhaustedError(
                    f"local functions nest more than max_function_depth="
                    f"{graphdef.LIMITS.max_function_depth} deep (at {key[0]}::{key[1]}); "
                    "raise it with pg.graph_util.set_import_limits(max_function_depth=...)")
            if key not in sizes:
                sizes[key] = count(funcs[key].node, stack + (key,))
            n += sizes[key]
            graphdef._check_count(n, f"ONNX graph {model.graph.name!r} with its local "
                                  "functions inlined")
        return n

    graphdef._check_count(count(model.graph.node, ()), f"ONNX graph {model.graph.name!r} "
                          "with its local functions inlined")
    from onnx import inliner
    try:
        return inliner.inline_selected_functions(model, [k[:2] for k in keep], exclude=True)
    except Exception as exc:  # onnx's C++ inliner raises plain exceptions
        raise errors.InvalidArgumentError(
            f"the local functions of ONNX graph {model.graph.name!r} cannot be inlined "
            f"({exc}); check their inputs, outputs and attribute references") from None


def _all_nodes(graph, onnx):
    """The nodes of `graph` and of its subgraphs (If, Loop, Scan bodies)."""
    for node in graph.node:
        yield node
        for a in node.attribute:
            for sub in list(a.graphs) + ([a.g] if a.HasField("g") else []):
                yield from _all_nodes(sub, onnx)


def _reads(node) -> set:
    """The names `node` reads: its inputs and, for an If, Loop or Scan,
    the names its subgraphs read (the outer values they capture
    included)."""
    out = {n for n in node.input if n}
    for a in node.attribute:
        for sub in list(a.graphs) + ([a.g] if a.HasField("g") else []):
            for inner in sub.node:
                out |= _reads(inner)
    return out


def _as_tensor(g: Graph, x: Any):
    if isinstance(x, np.ndarray):
        return tracing.constant(g, x)
    return x


def _call_catalogue(entry, ins: list, attrs: dict) -> list:
    xs = [x for x in ins if x is not None]
    if entry.kind == "custom":
        out = entry(*xs, attrs=entry.check_attrs(attrs) or None)
    else:
        from ..runtime import dispatch
        out = dispatch.execute(entry.op, xs, attrs)
    return list(out) if isinstance(out, (list, tuple)) else [out]


def import_model(model: Any) -> Model:
    """Loads an ONNX model (a path, its bytes or an ``onnx.ModelProto``) as a
    callable: ``m(**feeds)`` (or ``m(feeds)``) returns {output name: tensor},
    on the device of the caller's scope (``with pg.device("MY_DEVICE:0")``),
    placed and optimised like a ``pg.function`` graph. A new set of input
    shapes builds and plans a graph once; it is cached. Bad models raise
    typed errors naming the node or input (see ``pluggable.framework.errors``)."""
    onnx = _onnx()
    proto, base = _load(model, onnx)
    try:
        return Model(proto, base, onnx)
    except errors.PluggableError:
        raise
    except RecursionError:
        raise errors.ResourceExhaustedError("the ONNX model nests too deeply") from None
    except _MALFORMED as exc:
        raise errors.InvalidArgumentError(
            f"the ONNX model cannot be imported ({type(exc).__name__}: {exc}); it is corrupt "
            "or uses a form pluggable does not read") from None
