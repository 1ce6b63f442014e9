"""AOT custom operators: one C/C++ function with MindSpore's AOT signature.

    extern "C" int f(int nparam, void **params, int *ndims, int64_t **shapes,
                     const char **dtypes, void *stream, void *extra);

``params`` holds the inputs, then the outputs, then the workspace buffers;
``dtypes`` MindSpore's dtype strings; ``stream`` the device's native stream
(NULL on the CPU and host-memory devices); ``extra`` the ``AotExtra`` of
``custom_aot_extra.h``. Optional companions ``fInit`` (attributes, workspace
and kernel data; called once per attribute set, shapes and dtypes) and
``fInferShape`` (the output shape from the input shapes; -1 is an unknown
dimension and [-2] an unknown rank)."""
from __future__ import annotations

import os
import sys
import threading
from typing import Any, Callable, Sequence

import numpy as np

from .._core import ffi as core_ffi
from .._core import lib as core_lib
from .._core import status as new_status
from .._core.ownership import OwnsCoreResource
from ..framework import config, dtypes, errors, op_catalog, registry
from ..framework.tensor import Tensor
from ..runtime import dispatch, hooks, native_stream, placement
from ..runtime.status import raise_status
from ..runtime.tensors import convert_to_tensor
from . import compiler, cuda, graph_op, security

# The core's compiled cffi module parses type strings in C (no pycparser on
# first use). The AOT structs of custom_aot_extra.h are word arrays here:
#   PG_AotAttrValue  {data, size, row_sizes, num_rows}
#   PG_AotExtraTable {struct_size, ctx, get_attr, set_workspace}
#   AotExtra         {pg_table, pg_kernel_data, pg_release}
ffi = core_ffi
MAIN_T = "int(*)(int, void**, int*, int64_t**, const char**, void*, void*)"
INIT_T = "int(*)(int*, int64_t**, const char**, void*)"
INFER_T = "int(*)(void*, int*, int64_t**, void*, int64_t*, int)"
RELEASE_T = "void(*)(void*)"
TABLE_SIZE = 4 * ffi.sizeof("void*")

# MindSpore's dtype strings.
DTYPE_STRINGS = {d: d.name for d in dtypes.ALL}
MAX_RANK = 64
KINDS = {1: "bool", 2: "string", 3: "int", 4: "float", 5: "list(int)", 6: "list(float)",
         7: "list(list(int))", 8: "list(list(float))"}


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _is_num(v: Any) -> bool:
    return _is_int(v) or isinstance(v, (float, np.floating))


def _seq(v: Any, ok: Callable[[Any], bool]) -> bool:
    return isinstance(v, (list, tuple, np.ndarray)) and all(ok(x) for x in v)


_CHECKS: dict[int, Callable[[Any], bool]] = {
    1: lambda v: isinstance(v, (bool, np.bool_)),
    2: lambda v: isinstance(v, str),
    3: _is_int,
    4: _is_num,
    5: lambda v: _seq(v, _is_int),
    6: lambda v: _seq(v, _is_num),
    7: lambda v: _seq(v, lambda r: _seq(r, _is_int)),
    8: lambda v: _seq(v, lambda r: _seq(r, _is_num)),
}


class Library(OwnsCoreResource):
    """A loaded custom-op library. The checked descriptor stays open while
    the library is loaded, so its /proc/self/fd name is never reused."""

    def __init__(self, fd: int, path: str):
        self.path = path
        self._fd = fd
        err = core_ffi.new("char[512]")
        self._h = core_lib.pg_dlopen(f"/proc/self/fd/{fd}".encode(), err, 512)
        if self._h == core_ffi.NULL:
            os.close(fd)
            raise errors.InvalidArgumentError(
                f"cannot load custom op library {path}: {core_ffi.string(err).decode(errors='replace')}")

    def sym(self, name: str, ctype: str) -> Any:
        p = core_lib.pg_dlsym(self._h, name.encode())
        return None if p == ffi.NULL else ffi.cast(ctype, p)


_libs: dict[tuple, Library] = {}
_libs_lock = threading.Lock()


def _open_cached(so: Any) -> int:
    """A compiled library of the cache, opened and checked like a given one
    (the private cache directory counts as allowed)."""
    return security.open_checked(str(so), (compiler.cache_dir(),))


def load(path: str, flags: Sequence[str] = (), capability: tuple | None = None) -> Library:
    """Loads a library, or compiles a source first (see ``compiler``; a
    ``.cu`` source for the GPU `capability`); both pass the allow-list
    checks of ``security``."""
    ext = os.path.splitext(path)[1].lower()
    # The compiler route is part of the key: nvcc and NVRTC build different
    # libraries, and a bad choice is an error even when one is loaded.
    route = cuda.compiler_choice() if ext in cuda.CUDA_EXTS else None
    fd = security.open_checked(path)
    st = os.fstat(fd)
    key = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size, tuple(flags), capability, route)
    with _libs_lock:
        if key in _libs:
            os.close(fd)
            return _libs[key]
        if ext in compiler.SOURCE_EXTS:
            src = security.read_fd(fd)
            os.close(fd)
            so = compiler.compile_source(src, ext, path, list(flags))
            fd = _open_cached(so)
        elif ext in cuda.CUDA_EXTS:
            src = security.read_fd(fd)
            os.close(fd)
            so = cuda.compile_cuda(src, path, capability, list(flags))
            fd = _open_cached(so)
        lib = _libs[key] = Library(fd, path)
        return lib


class _Instance(OwnsCoreResource):
    """One FuncNameInit call: the AotExtra for one attribute set, input
    shapes and dtypes, with its workspace sizes and kernel data."""

    def __init__(self, op: "CustomOp", attrs: dict):
        self.op = op
        self.attrs = attrs
        self.errors: list[str] = []
        self._prep: Any = None  # pg_aot_prep*, made on the first device call
        self.workspace: list[int] = []
        self._keep: list = []
        self._handle = ffi.new_handle(self)
        self.table = ffi.new("uintptr_t[4]", [TABLE_SIZE, _addr(self._handle),
                                              _addr(_get_attr), _addr(_set_workspace)])
        self.extra = ffi.new("void*[3]", [ffi.cast("void*", self.table), ffi.NULL, ffi.NULL])

    def __del__(self):
        if getattr(self, "_prep", None) is not None:
            core_lib.pg_aot_prep_release(self._prep)  # the last call releases the kernel data
            return
        e = getattr(self, "extra", None)
        if e is not None and e[1] != ffi.NULL and e[2] != ffi.NULL:
            ffi.cast(RELEASE_T, e[2])(e[1])

    def prep(self, main: Any, full: "_Shapes", n_in: int, odts: list, what: str) -> Any:
        """The core's prepared call of the main function for this instance
        (made once): device calls go through C without Python."""
        p = self._prep
        if p is None:
            types = ffi.new("TF_DataType[]", [d.enum for d in odts] or [0])
            p = core_lib.pg_aot_prepare(what.encode(), ffi.cast("void*", main), full.n, n_in,
                                        len(odts), full.ndims, full.shapes, full.dtypes, types,
                                        self.extra)
            if p == ffi.NULL:
                raise errors.ResourceExhaustedError(f"preparing {what}: out of host memory")
            self._prep = p
        return p

    def check(self, what: str) -> None:
        if self.errors:
            msg, self.errors = "; ".join(self.errors), []
            raise errors.InvalidArgumentError(
                f"custom op {self.op.name}: {what}: {msg}. Attributes given: "
                f"{self.op._describe_attrs(self.attrs)}", op=self.op.name)

    def get_attr(self, name: str, kind: int, out: Any) -> int:
        want = KINDS.get(kind, f"kind {kind}")
        if name not in self.attrs:
            self.errors.append(f"attribute {name!r} ({want}) is required but not given")
            return 0
        v = self.attrs[name]
        if kind not in _CHECKS or not _CHECKS[kind](v):
            self.errors.append(f"attribute {name!r} must be {want}, got {v!r} "
                               f"({type(v).__name__})")
            return 0
        self._keep = _encode(kind, v, out)
        return 1


def _addr(p: Any) -> int:
    return int(ffi.cast("uintptr_t", p))


def _put(out: Any, data: Any, size: int, rows: Any = None, num_rows: int = 0) -> None:
    w = ffi.cast("uintptr_t*", out)
    w[0], w[1] = _addr(data), size
    w[2], w[3] = (_addr(rows) if rows is not None else 0), num_rows


def _encode(kind: int, v: Any, out: Any) -> list:
    if kind in (1, 3):
        data = ffi.new("int64_t[1]", [int(v)])
        _put(out, data, 1)
        return [data]
    if kind == 4:
        data = ffi.new("double[1]", [float(v)])
        _put(out, data, 1)
        return [data]
    if kind == 2:
        b = v.encode()
        data = ffi.new("char[]", b)
        _put(out, data, len(b))
        return [data]
    ctype = "int64_t[]" if kind in (5, 7) else "double[]"
    rows = [list(r) for r in v] if kind in (7, 8) else [list(v)]
    flat = [x for r in rows for x in r]
    data = ffi.new(ctype, [int(x) if kind in (5, 7) else float(x) for x in flat] or [0])
    sizes = ffi.new("int64_t[]", [len(r) for r in rows] or [0])
    _put(out, data, len(flat), sizes, len(rows) if kind in (7, 8) else 0)
    return [data, sizes]


@ffi.callback("int(void*, const char*, int, void*)", onerror=lambda *a: 0)
def _get_attr(ctx, name, kind, out):
    inst = ffi.from_handle(ctx)
    return inst.get_attr(ffi.string(name).decode(), int(kind), out)


@ffi.callback("void(void*, const size_t*, size_t)")
def _set_workspace(ctx, sizes, n):
    ffi.from_handle(ctx).workspace = [int(sizes[i]) for i in range(n)]


class _Shapes:
    """ndims/shapes/dtypes arrays of one call signature, built once."""

    def __init__(self, shapes: list[tuple], dts: list[dtypes.DType]):
        self.n = len(shapes)
        self.ndims = ffi.new("int[]", [len(s) for s in shapes] or [0])
        self._rows = [ffi.new("int64_t[]", list(s) or [0]) for s in shapes]
        self.shapes = ffi.new("int64_t*[]", self._rows or [ffi.NULL])
        self._names = [ffi.new("char[]", DTYPE_STRINGS[d].encode()) for d in dts]
        self.dtypes = ffi.new("const char*[]", self._names or [ffi.NULL])


def _as_dtype(d: Any) -> dtypes.DType:
    return dtypes.as_dtype(d)


class CustomOp:
    """A callable custom op (see ``pg.custom_op``)."""

    def __init__(self, lib: Library, func: str, out_shape: Callable | None,
                 out_dtype: Callable | None, attrs: dict | None,
                 capability: tuple | None = None):
        self.lib = lib
        self.capability = capability  # set for GPU code (.cu sources)
        self.func_name = func
        self.name = func
        self._main = lib.sym(func, MAIN_T)
        if self._main is None:
            raise errors.NotFoundError(
                f"custom op library {lib.path} does not export {func!r} (declare it "
                "extern \"C\" and make it visible)")
        self._init = lib.sym(func + "Init", INIT_T)
        infer = lib.sym(func + "InferShape", "void*")
        caller = lib.sym("pg_aot_call_infer_shape", INFER_T)
        self._infer = (infer, caller) if infer is not None and caller is not None else None
        if out_shape is None and self._infer is None:
            raise errors.InvalidArgumentError(
                f"custom op {func}: give out_shape=, or export {func}InferShape from "
                f"{lib.path} (including custom_aot_extra.h)")
        self.out_shape = out_shape
        self.out_dtype = out_dtype
        self.attrs = dict(attrs or {})
        self.entry: op_catalog.OpEntry | None = None  # set when registered
        self.checked = True  # calls are checked against the entry's schema
        self._instances: dict[tuple, tuple] = {}
        self._default: tuple | None = None  # (attrs, key) of calls without attrs=
        self.bprop: Callable | None = None    # MindSpore's bprop(*inputs, out, dout)
        self._fast: dict[tuple, tuple] = {}    # _fast_key -> (config version, run)
        self._places: dict[tuple, tuple] = {}  # (scope, input devices, version) -> placement
        self._lock = threading.Lock()
        self.token = graph_op.new_token(self)  # finds this object from a graph node

    def __repr__(self) -> str:
        return f"<pg.custom_op {self.lib.path}:{self.func_name}>"

    def _describe_attrs(self, attrs: dict) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in sorted(attrs.items())) or "none"

    # ------------------------------------------------------------ shapes
    def infer_shape(self, *shapes: Sequence[int], attrs: dict | None = None) -> list[int]:
        """The output shape FuncNameInferShape gives for input shapes that
        may hold -1 (unknown dimension) or be [-2] (unknown rank)."""
        if self._infer is None:
            raise errors.FailedPreconditionError(
                f"custom op {self.name} exports no {self.func_name}InferShape")
        inst = _Instance(self, {**self.attrs, **(attrs or {})})
        return self._call_infer(inst, _Shapes([tuple(s) for s in shapes], []))

    def _call_infer(self, inst: _Instance, sh: _Shapes) -> list[int]:
        fn, caller = self._infer
        out = ffi.new(f"int64_t[{MAX_RANK}]")
        n = caller(fn, sh.ndims, sh.shapes, inst.extra, out, MAX_RANK)
        inst.check(f"{self.func_name}InferShape")
        if n < 0 or n > MAX_RANK:
            raise errors.InvalidArgumentError(
                f"custom op {self.name}: {self.func_name}InferShape failed (returned rank {n}"
                f"{'; it threw a C++ exception' if n == -100 else ''})", op=self.name)
        return [int(out[i]) for i in range(n)]

    def _raw_shapes(self, inst: _Instance, shapes: list[tuple], dts: list) -> list[tuple]:
        if self.out_shape is not None:
            s = self.out_shape(*[list(x) for x in shapes])
        else:
            s = self._call_infer(inst, _Shapes(shapes, dts))
        multi = isinstance(s, tuple) and s and isinstance(s[0], (list, tuple))
        return [tuple(int(d) for d in x) for x in (s if multi else [s])]

    def _out_dtypes(self, dts: list, n: int) -> list:
        if self.out_dtype is not None:
            d = self.out_dtype(*dts)
            odts = [_as_dtype(x) for x in d] if isinstance(d, (tuple, list)) else [_as_dtype(d)]
        else:
            odts = [dts[0]] * n
        if len(odts) == 1 and n > 1:
            odts = odts * n
        return odts

    def output_shapes(self, shapes: list[tuple], dts: list, attrs: dict) -> list[tuple]:
        """The output shapes for inputs of `shapes` and `dts` (the shape
        function of the op's graph nodes)."""
        given, _ = self._attrs(attrs)
        oshapes = self._raw_shapes(_Instance(self, given), shapes, dts)
        return oshapes

    def _outputs(self, inst: _Instance, shapes: list[tuple], dts: list) -> tuple[list, list]:
        oshapes = self._raw_shapes(inst, shapes, dts)
        odts = self._out_dtypes(dts, len(oshapes))
        for sh in oshapes:
            if any(d < 0 for d in sh):
                raise errors.InvalidArgumentError(
                    f"custom op {self.name}: output shape {list(sh)} is not fully known for "
                    f"inputs of shapes {[list(x) for x in shapes]}", op=self.name)
        return oshapes, odts

    def _attrs(self, attrs: dict | None) -> tuple[dict, Any]:
        """The call's attributes (checked against the schema, if any) and
        their hashable key; those of a call without attrs= are kept."""
        if not attrs and self._default is not None:
            return self._default
        given = {**self.attrs, **(attrs or {})}
        if self.entry is not None and self.checked:
            given = self.entry.check_attrs(given)
        out = (given, _freeze(given))
        if not attrs:
            self._default = out
        return out

    def _instance(self, attrs: dict, fkey: Any, shapes: list[tuple], dts: list) -> tuple:
        key = (fkey, tuple(shapes), tuple(dts))
        got = self._instances.get(key)
        if got is not None:
            return got
        with self._lock:
            got = self._instances.get(key)
            if got is None:
                got = self._instances[key] = self._make_instance(attrs, shapes, dts)
        return got

    def _make_instance(self, attrs: dict, shapes: list[tuple], dts: list) -> tuple:
        inst = _Instance(self, attrs)
        oshapes, odts = self._outputs(inst, shapes, dts)
        io = _Shapes(shapes + oshapes, dts + odts)
        if self._init is not None:
            rc = self._init(io.ndims, io.shapes, io.dtypes, inst.extra)
            inst.check(f"{self.func_name}Init")
            if rc != 0:
                raise errors.UnknownError(
                    f"custom op {self.func_name}Init returned {rc} for inputs of shapes "
                    f"{[list(x) for x in shapes]}", op=self.name)
        ws = [(n,) for n in inst.workspace]
        full = _Shapes(shapes + oshapes + ws, dts + odts + [dtypes.uint8] * len(ws))
        return inst, oshapes, odts, full

    # -------------------------------------------------------------- calls
    def __call__(self, *inputs: Any, attrs: dict | None = None, device: Any = None) -> Any:
        """Runs the op; returns one Tensor, or a tuple for several outputs."""
        if attrs is None and device is None and not hooks.active[0]:
            key = self._fast_key(inputs)
            plan = self._fast.get(key) if key is not None else None
            if plan is not None and plan[0] == config.version[0]:
                outs = plan[1](inputs)
                return outs[0] if len(outs) == 1 else tuple(outs)
        ts = [x if isinstance(x, Tensor) else _convert(x) for x in inputs]
        if hooks.active[0]:  # tapes, tracing, profiling see the call like any op's
            outs = self._hooked(ts, attrs, device)
        else:
            outs = self._execute(ts, attrs, device)
            if attrs is None and device is None:
                self._remember_fast(ts)
        return outs[0] if len(outs) == 1 else tuple(outs)

    @staticmethod
    def _fast_key(inputs: tuple) -> tuple | None:
        """What decides a call's plan: the device scope and each input's
        device, dtype and shape (None when an input is not a Tensor)."""
        key: list = [placement._scope.get()]
        for x in inputs:
            if type(x) is not Tensor:
                return None
            key.append((x._dev, x._dtype, x._shape))
        return tuple(key)

    def _remember_fast(self, ts: list) -> None:
        """Keeps a plan for later calls like this one (no attrs=, no
        device=) on a host-memory device: the prepared call, the outputs'
        dtypes and shapes and the kernel counter."""
        dev, note, k = self._device(ts, None)
        if self.capability is not None or dev.device_type in ("CPU", "GPU"):
            return
        given, fkey = self._attrs(None)
        inst, oshapes, odts, full = self._instance(given, fkey, [t.shape for t in ts],
                                                   [t.dtype for t in ts])
        prep = inst._prep
        if prep is None or any(t._dev is not dev for t in ts):
            return
        name, n, c_dev = _op_name(self.name), len(odts), dev._c
        launch, from_handle = core_lib.pg_aot_launch, Tensor._from_handle

        def run(inputs: tuple) -> list:
            if k is not None:
                k._cpu_calls += 1
            if config._log_placement:
                config.record_placement(self.name, dev.name, note)
            hout = ffi.new("TF_Tensor*[]", n or 1)
            st = new_status()
            if launch(c_dev, name, prep, [t._h for t in inputs], hout, st) != 0:
                raise_status(st, f"custom op {self.name} on {dev.short_name}", dev.name,
                             op=self.name)
            _ = inst  # the prepared call lives while the plan does
            return [from_handle(hout[i], dev, odts[i], oshapes[i]) for i in range(n)]

        if len(self._fast) > 64:
            self._fast.clear()
        self._fast[self._fast_key(tuple(ts))] = (config.version[0], run)

    def _hooked(self, ts: list, attrs: dict | None, device: Any) -> list:
        """The call through the hooks, as op `self.name` of the registry
        (see graph_op) with its dtypes, token and attributes as node
        attributes; under a tracer it becomes a graph node."""
        given, _ = self._attrs(attrs)
        d = graph_op.op_def(self, given)
        dts = [t.dtype for t in ts]
        node_attrs = {**given, "Tin": dts, "Tout": self._out_dtypes(dts, self._n_out(ts, given)),
                      graph_op.TOKEN: self.token, graph_op.LIBRARY: self.lib.path,
                      graph_op.FUNCTION: self.func_name}
        run = lambda _op, ins, _a: self._execute(ins, attrs, device)  # noqa: E731
        if device is None:
            return hooks.call(d, ts, node_attrs, run)
        with placement.device(device):
            return hooks.call(d, ts, node_attrs, run)

    def _n_out(self, ts: list, given: dict) -> int:
        """How many outputs a call has (traced inputs may have unknown dims)."""
        if self.out_shape is None:
            return 1
        shapes = [[-1 if d is None else d for d in (t.shape or ())] for t in ts]
        try:
            return len(self._raw_shapes(None, [tuple(s) for s in shapes], []))
        except Exception:  # a shape function that needs known sizes: one output
            return 1

    def device_types(self) -> list[str]:
        """The device types this op has a kernel on."""
        return _devices(self)

    def _device(self, ts: list, device: Any) -> tuple:
        """(device, note) with the placement rules of every op
        (``dispatch.choose_device``), remembered per scope and input devices."""
        scope = placement.get_device(device) if device is not None else placement.current()
        key = (scope, tuple([t._dev for t in ts]), config.version[0])
        hit = self._places.get(key)
        if hit is None:
            d = graph_op.op_def(self, {})
            try:
                dev, _, note = dispatch.choose_device(d, {}, list(key[1]), scope)
            except errors.NotFoundError:
                if self.capability is None:
                    raise
                dev, note = _place(ts, scope), ""  # _run_gpu says what is wrong
            k = graph_op.kernel(self.name, dev.device_type)
            hit = (dev, note, k)
            if len(self._places) > 64:
                self._places.clear()
            self._places[key] = hit = (dev, note, k)
        return hit

    def _execute(self, ts: list, attrs: dict | None, device: Any) -> list[Tensor]:
        given, fkey = self._attrs(attrs)
        dev, note, k = self._device(ts, device)
        if k is not None:
            k._cpu_calls += 1
        if config._log_placement:
            config.record_placement(self.name, dev.name, note)
        shapes = [t.shape for t in ts]
        dts = [t.dtype for t in ts]
        inst, oshapes, odts, full = self._instance(given, fkey, shapes, dts)
        if self.capability is not None:
            outs = self._run_gpu(dev, ts, inst, oshapes, odts, full)
        elif dev.device_type == "CPU":
            outs = self._run_cpu(ts, inst, oshapes, odts, full)
        else:
            outs = self._run_device(dev, ts, inst, oshapes, odts, full)
        return outs

    def _fail(self, rc: int, shapes: list, dev: Any) -> errors.OpError:
        return errors.UnknownError(
            f"custom op function {self.func_name} ({self.lib.path}) returned {rc} on "
            f"{dev.short_name} for inputs of shapes {[list(s) for s in shapes]}",
            op=self.name, device=dev.name)

    def _run_cpu(self, ts, inst, oshapes, odts, full) -> list[Tensor]:
        arrs = [np.ascontiguousarray(t._numpy()) for t in ts]
        outs = [np.empty(s, d.as_numpy_dtype) for s, d in zip(oshapes, odts)]
        ws = [np.empty(n, np.uint8) for n in inst.workspace]
        params = ffi.new("void*[]", [ffi.from_buffer(a, require_writable=False)
                                     for a in arrs + outs + ws] or [ffi.NULL])
        rc = self._main(full.n, params, full.ndims, full.shapes, full.dtypes, ffi.NULL,
                        inst.extra)
        cpu = placement.get_device("CPU:0")
        if rc != 0:
            raise self._fail(rc, [t.shape for t in ts], cpu)
        return [Tensor._from_array(o, cpu, d) for o, d in zip(outs, odts)]

    def _run_gpu(self, dev, ts, inst, oshapes, odts, full) -> list[Tensor]:
        ns = cuda.native_stream(dev) if dev.device_type != "CPU" else None
        if ns is None or ns.kind != 1:
            raise errors.InvalidArgumentError(
                f"custom op {self.name} is CUDA code ({self.lib.path}) and runs only on a GPU "
                f"device whose plugin hands over its CUDA stream; {dev.short_name} does not "
                "(place the call on a GPU with pg.device(\"GPU:0\"))", op=self.name,
                device=dev.name)
        if ns.capability is not None and ns.capability < self.capability:
            raise errors.InvalidArgumentError(
                f"custom op {self.name} was compiled for sm_{self.capability[0]}"
                f"{self.capability[1]}, newer than {dev.short_name} (sm_{ns.capability[0]}"
                f"{ns.capability[1]}); create it again under pg.device({dev.short_name!r})",
                op=self.name, device=dev.name)
        ins = [t if t._dev is dev else dev.copy_in(t) for t in ts]
        outs = [_alloc(dev, d, s) for s, d in zip(oshapes, odts)]
        ws = [_alloc(dev, dtypes.uint8, (n,)) for n in inst.workspace]
        params = ffi.new("void*[]", [ffi.cast("void*", _address(t._h))
                                     for t in ins + outs + ws] or [ffi.NULL])
        rc = self._main(full.n, params, full.ndims, full.shapes, full.dtypes,
                        ffi.cast("void*", native_stream.handoff(dev)), inst.extra)
        if rc != 0:
            raise self._fail(rc, [t.shape for t in ts], dev)
        return outs

    def _run_device(self, dev, ts, inst, oshapes, odts, full) -> list[Tensor]:
        """A host-memory plugin device: the core allocates the outputs and
        workspace and enqueues the prepared call on the device's stream
        (pg_aot_launch); no Python runs there."""
        if dev.device_type == "GPU":
            raise errors.InvalidArgumentError(
                f"custom op {self.name}: GPU devices run CUDA code: build it from a .cu "
                "source", op=self.name, device=dev.name)
        prep = inst._prep or inst.prep(
            self._main, full, len(ts), odts, f"{self.func_name} ({self.lib.path}) for inputs "
                                             f"of shapes {[list(t.shape) for t in ts]}")
        held = [t if t._dev is dev else dev.copy_in(t) for t in ts]  # alive for the launch
        ins = [t._h for t in held]
        n = len(odts)
        hout = ffi.new("TF_Tensor*[]", n or 1)
        st = new_status()
        if core_lib.pg_aot_launch(dev._c, _op_name(self.name), prep, ins, hout, st) != 0:
            raise_status(st, f"custom op {self.name} on {dev.short_name}", dev.name,
                         op=self.name)
        return [Tensor._from_handle(hout[i], dev, odts[i], oshapes[i]) for i in range(n)]


_op_names: dict[str, Any] = {}


def _op_name(name: str) -> Any:
    """A C string for the op's name that lives as long as the process (the
    core's op states keep the pointer)."""
    c = _op_names.get(name)
    if c is None:
        c = _op_names[name] = ffi.new("char[]", name.encode())
    return c


def _freeze(v: Any) -> Any:
    if isinstance(v, dict):
        return tuple(sorted((k, _freeze(x)) for k, x in v.items()))
    if isinstance(v, (list, tuple, np.ndarray)):
        return ("L",) + tuple(_freeze(x) for x in v)
    return (type(v).__name__, v)


def _convert(x: Any) -> Tensor:
    return convert_to_tensor(x)


def _place(ts: list[Tensor], device: Any) -> Any:
    if device is not None:
        return placement.get_device(device)
    scope = placement.current()
    if scope is not None:
        return scope
    for t in ts:
        if t._dev.device_type != "CPU":
            return t._dev
    return placement.get_device("CPU:0")


def _alloc(dev: Any, dt: dtypes.DType, shape: tuple) -> Tensor:
    st = new_status()
    dims = core_ffi.new("int64_t[]", list(shape) or [0])
    h = core_lib.pg_device_alloc_tensor(dev._c, dt.enum, dims, len(shape), st)
    raise_status(st, f"allocating a custom op output of shape {list(shape)} on "
                     f"{dev.short_name}", dev.name)
    return Tensor._from_handle(h, dev, dt, tuple(shape))


def _address(h: Any) -> int:
    mem = core_ffi.new("SP_DeviceMemoryBase*")
    core_lib.pg_tensor_mem(h, mem)
    return int(core_ffi.cast("uintptr_t", mem.opaque))


def _capability(arch: Any) -> tuple[int, int]:
    """(major, minor) from "sm_90" / "90" / (9, 0), else from the GPU device
    in scope or the first GPU device."""
    if isinstance(arch, (tuple, list)):
        return int(arch[0]), int(arch[1])
    if arch is not None:
        digits = str(arch).lower().replace("sm_", "").replace("compute_", "")
        if not digits.isdigit() or len(digits) < 2:
            raise errors.InvalidArgumentError(f"arch={arch!r}: write it as 'sm_90' or (9, 0)")
        return int(digits[:-1]), int(digits[-1])
    scope = placement.current()
    devs = [scope] if scope is not None else [d for d in placement.plugin_devices()]
    for d in devs:
        ns = cuda.native_stream(d) if d.device_type != "CPU" else None
        if ns is not None and ns.capability is not None:
            return ns.capability
    raise errors.FailedPreconditionError(
        "a .cu custom op is compiled for the GPU it runs on, and no GPU device with the "
        "native-stream extension is present: pass arch='sm_90' (or the device's compute "
        "capability) to compile it anyway")


def _devices(op: CustomOp) -> list[str]:
    if op.capability is not None:
        return ["GPU"]
    return sorted({"CPU"} | {d.device_type for d in placement.plugin_devices()
                             if d.device_type != "GPU"})


def _register(op: CustomOp, name: str, version: int, schema: Any, description: str,
              origin: str) -> None:
    ns, short = op_catalog.split_name(name)
    op.name = name
    op.entry = op_catalog.register(op_catalog.OpEntry(
        ns, short, int(version), op_catalog.parse_schema(schema), description,
        f"{origin} ({op.lib.path}:{op.func_name})", "custom",
        devices=lambda: _devices(op), op=op))


def _register_unnamed(op: CustomOp, version: int, schema: Any, description: str,
                      origin: str) -> None:
    """Enters an op made without ``name=`` as ``custom::<function>``, or
    ``custom::<function>_2``, ``_3``, ... when that name is taken by a
    function of another library (the same function made again takes over)."""
    for i in range(1, 10000):
        name = f"custom::{op.func_name}" + (f"_{i}" if i > 1 else "")
        try:
            _register(op, name, version, schema, description, origin)
        except errors.AlreadyExistsError:
            old = op_catalog.get(name, version).op
            if not (isinstance(old, CustomOp) and old.lib is op.lib
                    and old.func_name == op.func_name):
                continue
            # The same function of the same library made again: it takes the name over.
            op_catalog.unregister(name, version)
            _register(op, name, version, schema, description, origin)
        op.checked = schema is not None  # no schema given: attributes are free
        return
    raise errors.AlreadyExistsError(
        f"custom op {op.func_name}: every derived name custom::{op.func_name}_N is taken; "
        "pass name='namespace::Name'")


def custom_op(func: str, out_shape: Callable | None = None, out_dtype: Callable | None = None,
              attrs: dict | None = None, flags: Sequence[str] = (),
              arch: Any = None, *, name: str | None = None, version: int = 1,
              schema: Any = None, description: str = "",
              bprop: Callable | None = None) -> CustomOp:
    """A callable op from one AOT function: ``"path/lib.so:Func"`` or a
    source ``"path/add.cc:Func"`` (``.c``, ``.cc``, ``.cpp``; compiled on
    first use and cached). ``out_shape(*input_shapes)`` and
    ``out_dtype(*input_dtypes)`` give the output (omit ``out_shape`` when
    the library exports ``FuncInferShape``; ``out_dtype`` defaults to the
    first input's dtype). ``attrs`` are default attributes (a call's
    ``attrs=`` overrides them), ``flags`` extra compiler flags. A ``.cu``
    source is compiled with nvcc for the compute capability of the GPU in
    scope (or the first GPU; ``arch="sm_90"`` chooses it) and its function
    gets the GPU plugin's CUDA stream as ``stream``.

    With ``name="namespace::Name"`` the op is entered in the op catalogue
    (``pg.ops.get``) at ``version`` with its attribute ``schema``
    (``{"axis": "int64", "scale": ("float32", 1.0)}``: TensorRT field types,
    a tuple gives a default) and ``description``; calls are then checked
    against the schema. Without ``name=`` it is entered as
    ``custom::<FunctionName>`` (``custom::<FunctionName>_2``, ... when that
    name belongs to another library's function), so every custom op is in the catalogue. ``bprop(*inputs, out, dout)`` (MindSpore's
    convention) returns the input gradients, written with ops: it makes the
    op differentiable under ``pg.GradientTape``."""
    path, sep, fname = func.rpartition(":")
    if not sep or not path or not fname:
        raise errors.InvalidArgumentError(
            f"custom op {func!r}: write it as 'path/to/lib.so:FunctionName'")
    cap = _capability(arch) if path.lower().endswith(cuda.CUDA_EXTS) else None
    op = CustomOp(load(path, flags, cap), fname, out_shape, out_dtype, attrs, cap)
    op.bprop = bprop
    f = sys._getframe(1)
    where = f"{f.f_code.co_filename}:{f.f_lineno}"
    if name is not None:
        _register(op, name, version, schema, description, where)
    else:
        _register_unnamed(op, version, schema, description, where)
    graph_op.op_def(op, {})  # an op of the registry, with its kernels
    return op
