"""The graph executor: a placed, optimised graph compiled once into a plan.

``Executable(graph, input_devices)`` runs the graph pipeline
(``pipeline.prepare``: placement, pruning, constant folding, common
subexpressions, plugin optimizers, copies) and compiles the result:

* every plugin-kernel node whose inputs are device values (and constant
  host-memory arguments) becomes a *kernel step* of a C plan
  (``c_api/src/plan.c``): the kernel instance is made now, the slots of its
  inputs and outputs are fixed, and each output whose size is static gets a
  *planned buffer*, reused by later outputs once every tensor in it is dead
  (device memory planned by lifetime);
* a ``_Copy`` between two plugin devices becomes a *copy step* of the plan,
  ordered by events instead of host waits;
* constants are put on every device that reads them once, as persistent
  slots;
* ``Identity`` nodes on the device of their input are aliases (no step);
* anything else (CPU kernels, kernels whose host-memory argument is computed,
  ``If``/``While``, copies from the host) is a Python step that runs the node
  through eager dispatch.

A graph of kernel steps only is replayed by one call into the core
(``pg_plan_call``); otherwise consecutive kernel steps still run as one
``pg_plan_run`` between the Python steps.
"""
from __future__ import annotations

import threading
from typing import Any

import numpy as np

from .._core import code_and_message, ffi, lib, raw_status, status
from ..framework import dtypes, errors, registry
from ..framework.tensor import Tensor
from ..runtime import dispatch, placement, trace
from ..runtime.attrs import make_c_attrs  # noqa: F401  (kernel attributes, via dispatch)
from ..runtime.device import Device
from . import graph_ops, ir, node_trace, passes, pipeline

# Ops whose kernels may hand their first input's buffer to their output.
_MAY_FORWARD = frozenset({"Identity", "Reshape", "Squeeze", "ExpandDims", "Snapshot",
                          "StopGradient", "PreventGradient", "EnsureShape"})


class _Value:
    """One tensor of the graph and where the executor keeps it."""

    __slots__ = ("dtype", "shape", "cs", "py", "const", "device")

    def __init__(self, dtype: dtypes.DType, shape, device: Any = None):
        self.dtype = dtype
        self.shape = shape
        self.cs: dict = {}        # device (None: host memory) -> C slot
        self.py: int | None = None  # Python slot holding a Tensor
        self.const: Any = None    # the Tensor of a constant
        self.device = device      # where the value is made (static)


class _CStep:
    __slots__ = ("node", "reads", "writes", "index")

    def __init__(self, node: ir.Node, reads: list, writes: list):
        self.node, self.reads, self.writes, self.index = node, reads, writes, -1


class _PyStep:
    __slots__ = ("node", "fn", "reads", "writes", "release_c", "release_py")

    def __init__(self, node: ir.Node | None, fn, reads: list, writes: list):
        self.node, self.fn, self.reads, self.writes = node, fn, reads, writes
        self.release_c: list[int] = []
        self.release_py: list[int] = []


class _State:
    """The Python side of one run: Tensors of the Python slots."""

    __slots__ = ("py", "keep")

    def __init__(self, n: int):
        self.py: list = [None] * n
        self.keep: list = []


class Executable:
    """A graph placed for one set of input devices and compiled into a plan.

    ``run(inputs)`` feeds ``graph.inputs`` and returns ``graph.outputs`` as
    Tensors. The original graph is not changed; ``optimized_graph`` is the
    one that runs (placed, optimised, with copies)."""

    def __init__(self, graph: ir.Graph, input_devices: list, default_device: str = ""):
        self.source = graph
        self.optimized_graph = pipeline.prepare(graph, input_devices, default_device)
        self._lock = threading.Lock()
        self._subs: dict = {}
        self._compile(self.optimized_graph, input_devices)

    # ================================================================ compile
    def _compile(self, g: ir.Graph, input_devices: list) -> None:
        self._n_c = 0
        self._n_py = 0
        self._values: dict[tuple, _Value] = {}
        self._steps: list = []
        self._persistent: list[tuple[int, Any]] = []   # (C slot, handle)
        self._keep: list = []                           # arrays behind host handles
        self._const_py: list[tuple[int, Tensor]] = []
        self._input_c: list[tuple[int, int]] = []      # (input index, C slot)
        self._input_py: list[tuple[int, int]] = []     # (input index, Python slot)
        for i, (node, dev) in enumerate(zip(g.inputs, input_devices)):
            v = self._new_value(node, 0, dev)
            v.py = self._py_slot()
            self._input_py.append((i, v.py))
            if isinstance(dev, Device):
                v.cs[dev] = self._c_slot()
                self._input_c.append((i, v.cs[dev]))
        for node in g.topological():
            self._compile_node(node)
        self._outputs = [self._output_source(self._values[(n, i)]) for n, i in g.outputs]
        self._finish()

    def _c_slot(self) -> int:
        self._n_c += 1
        return self._n_c - 1

    def _py_slot(self) -> int:
        self._n_py += 1
        return self._n_py - 1

    def _new_value(self, node: ir.Node, i: int, device: Any) -> _Value:
        v = _Value(node.out_dtypes[i], node.out_shapes[i], device)
        self._values[(node, i)] = v
        return v

    def _compile_node(self, node: ir.Node) -> None:
        op = node.op
        if op == "Placeholder" or op == "NoOp":
            return
        if op == "Const":
            v = self._new_value(node, 0, node.assigned)
            value = node.attrs["value"]
            v.const = value if isinstance(value, Tensor) else Tensor._from_array(
                np.asarray(value, order="C"), placement.CPU, node.out_dtypes[0])
            v.py = self._py_slot()
            self._const_py.append((v.py, v.const))
            return
        if op == "Identity" and self._is_alias(node):
            self._values[(node, 0)] = self._values[node.inputs[0]]
            return
        if op == "_Copy":
            self._compile_copy(node)
        elif op in graph_ops.CONTROL_FLOW_OPS:
            self._compile_control_flow(node)
        elif op in graph_ops.METADATA_OPS:
            self._compile_metadata(node)
        elif self._c_eligible(node):
            self._compile_kernel(node)
        else:
            self._compile_eager(node)

    def _is_alias(self, node: ir.Node) -> bool:
        return self._values[node.inputs[0]].device is node.assigned

    # ---------------------------------------------------------- conversions
    def _ensure_c(self, v: _Value, dev: Any) -> int:
        """A C slot holding value `v` on device `dev` (None: host memory)."""
        slot = v.cs.get(dev)
        if slot is not None:
            return slot
        have = list(v.cs.items())
        slot = v.cs[dev] = self._c_slot()
        if v.const is not None:
            self._persistent.append((slot, self._const_handle(v.const, dev)))
            return slot
        if have and dev is not None:
            src_dev, src_slot = have[0]
            step = _CStep(None, [src_slot], [slot])
            step.index = ("copy", src_dev, dev)
            self._steps.append(step)
            return slot
        py = self._ensure_py(v)
        self._steps.append(_PyStep(None, _to_c(py, slot, dev), [("py", py)], [("c", slot)]))
        return slot

    def _ensure_py(self, v: _Value) -> int:
        if v.py is not None:
            return v.py
        dev, c = next(iter(v.cs.items()))
        v.py = self._py_slot()
        self._steps.append(_PyStep(None, _to_py(c, v.py, dev, v.dtype), [("c", c)],
                                   [("py", v.py)]))
        return v.py

    def _const_handle(self, t: Tensor, dev: Any):
        if t.dtype is dtypes.resource:  # a captured variable: its handle, never a copy
            return lib.pg_tensor_ref(t._h)
        if dev is None:
            a = np.asarray(t.numpy(), order="C")
            self._keep.append(a)
            dims = ffi.new("int64_t[]", list(a.shape) or [0])
            return lib.pg_tensor_wrap_host(t.dtype.enum, dims, a.ndim, ffi.from_buffer(a),
                                           a.nbytes)
        moved = t._copy_to(dev)
        return lib.pg_tensor_ref(moved._h)

    # ---------------------------------------------------------------- nodes
    def _host_args(self, node: ir.Node) -> list[bool]:
        op = registry.OPS[node.op]
        return [a.name in node.kernel.host_args for a in op.flat_inputs(node.attrs)]

    def _c_eligible(self, node: ir.Node) -> bool:
        k = node.kernel
        if k is None or k.cdef is None or not isinstance(node.assigned, Device):
            return False
        for (src, i), host in zip(node.inputs, self._host_args(node)):
            v = self._values[(src, i)]
            if host and v.const is None and None not in v.cs and isinstance(v.device, Device):
                return False  # a host-memory argument computed on a device
        return True

    def _compile_kernel(self, node: ir.Node) -> None:
        dev = node.assigned
        reads = []
        for (src, i), host in zip(node.inputs, self._host_args(node)):
            reads.append(self._ensure_c(self._values[(src, i)], None if host else dev))
        op = registry.OPS[node.op]
        writes = []
        for i, arg in enumerate(op.flat_outputs(node.attrs)):
            out_host = arg.name in node.kernel.host_args
            v = self._new_value(node, i, None if out_host else dev)
            v.cs[None if out_host else dev] = slot = self._c_slot()
            writes.append(slot)
        self._steps.append(_CStep(node, reads, writes))

    def _compile_copy(self, node: ir.Node) -> None:
        src = self._values[node.inputs[0]]
        to = node.assigned
        v = self._new_value(node, 0, to)
        if src.const is not None:  # constants are put on each device once
            v.const, v.py = src.const, src.py
        elif isinstance(to, Device):
            v.cs[to] = self._ensure_c(src, to)
        else:
            py = self._ensure_py(src)
            v.py = self._py_slot()
            self._steps.append(_PyStep(node, _copy_py(py, v.py, to), [("py", py)],
                                       [("py", v.py)]))

    def _compile_eager(self, node: ir.Node) -> None:
        op = registry.OPS[node.op]
        reads = [self._ensure_py(self._values[r]) for r in node.inputs]
        writes = []
        for i in range(len(op.flat_outputs(node.attrs))):
            v = self._new_value(node, i, node.assigned)
            v.py = self._py_slot()
            writes.append(v.py)
        fn = _eager(op, node.attrs, node.assigned, reads, writes)
        self._steps.append(_PyStep(node, fn, [("py", s) for s in reads],
                                   [("py", s) for s in writes]))

    def _compile_metadata(self, node: ir.Node) -> None:
        """Shape, Size, Rank: computed from the input's shape, wherever the
        input lives (its data is never read)."""
        read = self._ensure_py(self._values[node.inputs[0]])
        v = self._new_value(node, 0, placement.CPU)
        v.py = self._py_slot()
        fn = _metadata(node.op, node.out_dtypes[0], read, v.py)
        self._steps.append(_PyStep(node, fn, [("py", read)], [("py", v.py)]))

    def _compile_control_flow(self, node: ir.Node) -> None:
        reads = [self._ensure_py(self._values[r]) for r in node.inputs]
        writes = []
        for i in range(node.num_outputs):
            v = self._new_value(node, i, None)
            v.py = self._py_slot()
            writes.append(v.py)
        lib_ = self.source.library
        if node.op in graph_ops.IF_OPS:
            fn = _if_step(self, node, lib_, reads, writes)
        else:
            fn = _while_step(self, node, lib_, reads, writes)
        self._steps.append(_PyStep(node, fn, [("py", s) for s in reads],
                                   [("py", s) for s in writes]))

    def _output_source(self, v: _Value) -> tuple:
        for dev, slot in v.cs.items():
            if isinstance(dev, Device) and v.const is None:
                return ("c", slot, dev, v.dtype, _static(v.shape))
        return ("py", self._ensure_py(v), None, v.dtype, None)

    # ------------------------------------------------------- plan building
    def _finish(self) -> None:
        last_c, last_py = self._lifetimes()
        st = status()
        self._plan = ffi.gc(lib.pg_plan_new(max(self._n_c, 1), st), lib.pg_plan_free)
        _raise(st, "making a graph plan")
        buffers = _MemoryPlanner(self).assign(last_c)
        self._c_nodes: list[ir.Node | None] = []
        self._c_copies: dict[int, tuple] = {}   # copy step index -> (src, dst) devices
        self._spans: list | None = None         # per C step, made when first profiled
        segments: list = []
        for pos, step in enumerate(self._steps):
            if isinstance(step, _CStep):
                rel = [s for s in step.reads + step.writes if last_c.get(s) == pos]
                idx = self._add_c_step(step, buffers, rel, st)
                if segments and isinstance(segments[-1], list):
                    segments[-1][1] = idx + 1
                else:
                    segments.append([idx, idx + 1])
            else:
                step.release_c = [s for r, s in step.reads + step.writes
                                  if r == "c" and last_c.get(s) == pos]
                step.release_py = [s for r, s in step.reads + step.writes
                                   if r == "py" and last_py.get(s) == pos]
                segments.append(step)
        for slot, handle in self._persistent:
            lib.pg_plan_set(self._plan, slot, handle, lib.PG_SLOT_PERSISTENT)
        self._segments = [tuple(s) if isinstance(s, list) else s for s in segments]
        self._failed = ffi.new("int*")
        ins = [s for _, s in self._input_c]
        outs = [o[1] for o in self._outputs if o[0] == "c"]
        lib.pg_plan_set_io(self._plan, len(ins), ins or [0], len(outs), outs or [0], st)
        _raise(st, "making a graph plan")
        self.fast = (all(not isinstance(s, _PyStep) for s in self._steps)
                     and all(o[0] == "c" for o in self._outputs)
                     and len(self._input_c) == len(self.optimized_graph.inputs))
        # The fast path's handle arrays, made once (runs hold self._lock).
        self._fast_ins = ffi.new("TF_Tensor*[]", len(self._input_c) or 1)
        self._fast_outs = ffi.new("TF_Tensor*[]", len(self._outputs) or 1)
        self._fast_in_order = [i for i, _ in self._input_c]
        self._fast_out_meta = [(dev, dtype, shape) for _, _, dev, dtype, shape in self._outputs]

    def _add_c_step(self, step: _CStep, buffers: dict, release: list, st) -> int:
        if step.node is None:  # a copy between devices
            _, src_dev, dst_dev = step.index
            idx = lib.pg_plan_add_copy(
                self._plan, src_dev._c if isinstance(src_dev, Device) else ffi.NULL,
                dst_dev._c, step.reads[0], step.writes[0], len(release), release or [0], st)
            _raise(st, f"planning a copy to {dst_dev.short_name}")
            self._c_copies[idx] = (src_dev if isinstance(src_dev, Device) else None, dst_dev)
            self._c_nodes.append(None)
            return idx
        node = step.node
        kinst = dispatch.kernel_instance(registry.OPS[node.op], node.kernel, node.assigned,
                                         node.attrs)
        bufs = [buffers.get(s, -1) for s in step.writes]
        idx = lib.pg_plan_add_kernel(self._plan, kinst, len(step.reads), step.reads or [0],
                                     len(step.writes), step.writes or [0], bufs or [0],
                                     len(release), release or [0], st)
        _raise(st, f"planning node {node.name!r}")
        self._c_nodes.append(node)
        return idx

    def _lifetimes(self) -> tuple[dict, dict]:
        """The step after which each slot is dead (graph outputs never are)."""
        last_c: dict[int, int] = {}
        last_py: dict[int, int] = {}
        for pos, step in enumerate(self._steps):
            if isinstance(step, _CStep):
                for s in step.reads + step.writes:
                    last_c[s] = pos
            else:
                for kind, s in step.reads + step.writes:
                    (last_c if kind == "c" else last_py)[s] = pos
        for kind, slot, *_ in self._outputs:
            (last_c if kind == "c" else last_py).pop(slot, None)
        for slot, _ in self._persistent:
            last_c.pop(slot, None)
        for _, slot in self._input_py:
            last_py.setdefault(slot, -1)
        return last_c, last_py

    # ==================================================================== run
    def run(self, inputs: list[Tensor], segments: list | None = None) -> list[Tensor]:
        """Runs the graph on `inputs` (Tensors on the devices it was built
        for); returns the outputs. `segments` replaces the plan's own run
        order (``partition_capture`` passes one whose captured partitions
        stand for their steps): ranges of kernel steps, and objects with
        ``fn(plan, state)``, ``release_c`` and ``release_py`` like a Python
        step."""
        # An input that carries an asynchronous failure fails the first kernel
        # step that reads it (the core checks kernel inputs); outputs share
        # their producers' outcome.
        with self._lock:
            segs = self._segments if segments is None else segments
            if trace.enabled[0]:
                return self._run_traced(inputs, segs)
            if self.fast and segments is None:
                return self._run_fast(inputs)
            return self._run_general(inputs, segs)

    def _run_traced(self, inputs: list[Tensor], segments: list) -> list[Tensor]:
        """``run`` while a profiler records: a span per node and one for the
        run (see ``node_trace``)."""
        if self._spans is None:
            name = self.source.name
            self._spans = [node_trace.node_span(n, name) if n is not None
                           else node_trace.copy_span(*self._c_copies[i], name)
                           for i, n in enumerate(self._c_nodes)]
        t0 = trace.clock()
        try:
            return self._run_general(inputs, segments, traced=True)
        finally:
            trace.record(node_trace.RUN, self.source.name, t0, trace.clock(), kind="run",
                         steps=len(self._steps), device=self._run_device())

    def _run_device(self) -> str:
        devs = {n.assigned.short_name for n in self._c_nodes if n is not None}
        return devs.pop() if len(devs) == 1 else ",".join(sorted(devs)) or "CPU:0"

    def _run_c_traced(self, start: int, end: int) -> None:
        """Kernel and copy steps [start, end) one at a time, each a span."""
        for i in range(start, end):
            t0 = trace.clock()
            try:
                self._run_c(i, i + 1)
            finally:
                name, args = self._spans[i]
                trace.record(node_trace.NODE, name, t0, trace.clock(), **args)

    def _run_c(self, start: int, end: int) -> None:
        st = raw_status()
        if lib.pg_plan_run(self._plan, start, end, self._failed, st):
            raise self._step_error(st)

    def _run_py_traced(self, seg: _PyStep, state: _State) -> None:
        t0 = trace.clock()
        try:
            seg.fn(self._plan, state)
        finally:
            if seg.node is not None:
                name, args = node_trace.node_span(seg.node, self.source.name)
                trace.record(node_trace.NODE, name, t0, trace.clock(), **args)

    def _run_fast(self, inputs: list[Tensor]) -> list[Tensor]:
        ins, outs = self._fast_ins, self._fast_outs
        for j, i in enumerate(self._fast_in_order):
            ins[j] = inputs[i]._h  # `inputs` keeps the handles alive for the call
        st = raw_status()
        if lib.pg_plan_call(self._plan, ins, outs, self._failed, st):
            raise self._step_error(st)
        result = []
        for i, (dev, dtype, shape) in enumerate(self._fast_out_meta):
            h = outs[i]
            result.append(Tensor._from_handle(h, dev, dtype, shape or _dims(h)))
        return result

    def _run_general(self, inputs: list[Tensor], segments: list,
                     traced: bool = False) -> list[Tensor]:
        plan = self._plan
        state = _State(self._n_py)
        for i, slot in self._input_py:
            state.py[slot] = inputs[i]
        for slot, t in self._const_py:
            state.py[slot] = t
        for i, slot in self._input_c:
            lib.pg_plan_set(plan, slot, inputs[i]._h, lib.PG_SLOT_BORROWED)
        try:
            for seg in segments:
                if isinstance(seg, tuple):
                    (self._run_c_traced if traced else self._run_c)(seg[0], seg[1])
                elif traced:
                    self._run_py_traced(seg, state)
                else:
                    seg.fn(plan, state)
                    for s in seg.release_c:
                        lib.pg_plan_release(plan, s)
                    for s in seg.release_py:
                        state.py[s] = None
            return self._collect(state)
        finally:
            lib.pg_plan_reset(plan)

    def _collect(self, state: _State) -> list[Tensor]:
        out = []
        for kind, slot, dev, dtype, shape in self._outputs:
            if kind == "py":
                out.append(state.py[slot])
                continue
            h = lib.pg_plan_take(self._plan, slot)
            if h == ffi.NULL:
                raise errors.InternalError("a graph output has no value")
            out.append(Tensor._from_handle(h, dev, dtype, shape or _dims(h)))
        return out

    def _step_error(self, st) -> errors.OpError:
        code, msg = code_and_message(st)
        i = self._failed[0]
        node = self._c_nodes[i] if 0 <= i < len(self._c_nodes) else None
        if node is None:
            return errors.make_error(code, f"graph {self.source.name!r}: {msg}")
        where = node.kernel.plugin.path if node.kernel.plugin is not None else "?"
        return errors.make_error(
            code, f"{node.op} (node {node.name!r} of graph {self.source.name!r}) on "
            f"{node.assigned.short_name}: {msg} (kernel from {where})", op=node.op,
            device=node.assigned.name)

    # ================================================================== stats
    def stats(self) -> dict:
        """Steps, planned buffers and their reuse, for tests and benchmarks."""
        s = ffi.new("pg_plan_stats*")
        lib.pg_plan_get_stats(self._plan, s)
        n_kernel = sum(1 for x in self._steps if isinstance(x, _CStep) and x.node is not None)
        n_copy = sum(1 for x in self._steps if isinstance(x, _CStep) and x.node is None)
        return {"kernel_steps": n_kernel, "copy_steps": n_copy,
                "python_steps": sum(1 for x in self._steps if isinstance(x, _PyStep)),
                "fast": self.fast, "runs": int(s.runs),
                "planned_buffers": int(s.num_buffers), "planned_bytes": int(s.planned_bytes),
                "unplanned_bytes": self._naive_bytes, "planned_hits": int(s.planned_hits),
                "planned_misses": int(s.planned_misses), "spans": int(s.spans)}

    def sub_executable(self, node: ir.Node, graph: ir.Graph,
                       inputs: list[Tensor]) -> "Executable":
        """The executable of function `graph` called by control-flow `node`."""
        key = (id(graph), tuple(t._dev for t in inputs))
        ex = self._subs.get(key)
        if ex is None:
            ex = self._subs[key] = Executable(graph, [t._dev for t in inputs], node.device)
        return ex


# ------------------------------------------------------------- memory planning

class _MemoryPlanner:
    """Assigns planned buffers to kernel outputs by lifetime: an output
    whose size is static gets the smallest free buffer of its device that
    fits (growing one, or adding one, if none does); a buffer is free again
    after the last step that reads any tensor in it."""

    def __init__(self, ex: Executable):
        self.ex = ex

    def assign(self, last_c: dict) -> dict:
        ex = self.ex
        sizes: list[int] = []
        devs: list = []
        busy_until: list[int] = []
        busy: set[int] = set()
        free: dict = {}
        result: dict[int, int] = {}
        holder: dict[int, int] = {}   # C slot -> the buffer holding it
        naive = 0
        for pos, step in enumerate(ex._steps):
            if not isinstance(step, _CStep) or step.node is None:
                continue
            node = step.node
            forwards = node.op in _MAY_FORWARD and bool(step.reads)
            if forwards and step.reads[0] in holder:
                # the output may share the input's buffer: keep it busy
                b = holder[step.reads[0]]
                busy_until[b] = max(busy_until[b], last_c.get(step.writes[0], 1 << 30))
                holder[step.writes[0]] = b
            for slot, (dt, shape) in zip(step.writes, zip(node.out_dtypes, node.out_shapes)):
                nbytes = ir.static_nbytes(dt, shape)
                if forwards or not nbytes or slot not in last_c:
                    continue
                naive += nbytes
                dev = node.assigned
                b = self._take(free.setdefault(dev, []), sizes, nbytes)
                if b is None:
                    b = len(sizes)
                    sizes.append(nbytes)
                    devs.append(dev)
                    busy_until.append(0)
                busy_until[b] = last_c[slot]
                busy.add(b)
                holder[slot] = b
                result[slot] = b
            for b in [b for b in busy if busy_until[b] <= pos]:
                busy.discard(b)
                free[devs[b]].append(b)
        st = status()
        index = [lib.pg_plan_add_buffer(ex._plan, devs[b]._c, sizes[b], st)
                 for b in range(len(sizes))]
        _raise(st, "planning device memory")
        ex._naive_bytes = naive
        return {slot: index[b] for slot, b in result.items()}

    @staticmethod
    def _take(free: list, sizes: list, nbytes: int) -> int | None:
        if not free:
            return None
        fits = [b for b in free if sizes[b] >= nbytes]
        b = min(fits, key=lambda x: sizes[x]) if fits else max(free, key=lambda x: sizes[x])
        free.remove(b)
        sizes[b] = max(sizes[b], nbytes)
        return b


# --------------------------------------------------------------- Python steps

def _to_c(py: int, slot: int, dev: Any):
    def step(plan, state: _State) -> None:
        t = state.py[py]
        if dev is None:
            a = np.asarray(t.numpy(), order="C")
            state.keep.append(a)
            dims = ffi.new("int64_t[]", list(a.shape) or [0])
            h = lib.pg_tensor_wrap_host(t.dtype.enum, dims, a.ndim, ffi.from_buffer(a),
                                        a.nbytes)
        else:
            moved = t._copy_to(dev)  # kept alive until its handle is referenced
            h = lib.pg_tensor_ref(moved._h)
        lib.pg_plan_set(plan, slot, h, lib.PG_SLOT_OWNED)
    return step


def _to_py(c: int, py: int, dev: Any, dtype: dtypes.DType):
    def step(plan, state: _State) -> None:
        h = lib.pg_plan_take(plan, c)
        if h == ffi.NULL:
            raise errors.InternalError("a graph value has no handle")
        if dev is None:  # the host-memory output of a plugin kernel
            state.py[py] = Tensor._from_array(_host_array(h, dtype), placement.CPU, dtype)
        else:
            state.py[py] = Tensor._from_handle(h, dev, dtype, _dims(h))
    return step


def _host_array(h, dtype: dtypes.DType) -> np.ndarray:
    """The value of a host-memory handle (which it deletes) as an array."""
    try:
        out = np.empty(_dims(h), dtype.as_numpy_dtype)
        st = status()
        lib.pg_tensor_to_host(h, ffi.from_buffer(out, require_writable=True), out.nbytes, st)
        _raise(st, "reading a host-memory output")
        return out
    finally:
        lib.TF_DeleteTensor(h)


def _copy_py(src: int, dst: int, dev: Any):
    def step(plan, state: _State) -> None:
        state.py[dst] = state.py[src]._copy_to(dev)
    return step


def _eager(op: registry.OpDef, attrs: dict, dev: Any, reads: list, writes: list):
    given = dict(attrs)

    def step(plan, state: _State) -> None:
        outs = passes.run_op(op, [state.py[s] for s in reads], dict(given), dev)
        for s, t in zip(writes, outs):
            state.py[s] = t
    return step


def _metadata(op: str, dtype: dtypes.DType, read: int, write: int):
    def step(plan, state: _State) -> None:
        shape = tuple(state.py[read].shape)
        value = {"Shape": shape, "Size": int(np.prod(shape, dtype=np.int64)),
                 "Rank": len(shape)}[op]
        state.py[write] = Tensor._from_array(np.asarray(value, dtype.as_numpy_dtype),
                                             placement.CPU, dtype)
    return step


def _branch_graph(library: dict, name: str, node: ir.Node) -> ir.Graph:
    g = library.get(name)
    if g is None:
        raise errors.NotFoundError(f"node {node.name!r} ({node.op}) calls function {name!r}, "
                                   "which is not in the graph's function library", op=node.op)
    return g


def _truth(t: Tensor) -> bool:
    a = np.asarray(t.numpy())
    return bool(a.reshape(-1)[0]) if a.size == 1 else a.size > 0


def _if_step(ex: Executable, node: ir.Node, library: dict, reads: list, writes: list):
    then_g = _branch_graph(library, node.attrs["then_branch"], node)
    else_g = _branch_graph(library, node.attrs["else_branch"], node)

    def step(plan, state: _State) -> None:
        cond = state.py[reads[0]]
        args = [state.py[s] for s in reads[1:]]
        g = then_g if _truth(cond) else else_g
        outs = ex.sub_executable(node, g, args).run(args)
        for s, t in zip(writes, outs):
            state.py[s] = t
    return step


def _while_step(ex: Executable, node: ir.Node, library: dict, reads: list, writes: list):
    cond_g = _branch_graph(library, node.attrs["cond"], node)
    body_g = _branch_graph(library, node.attrs["body"], node)

    def predicate(args: list) -> bool:
        t = ex.sub_executable(node, cond_g, args).run(args)[0]
        if tuple(t.shape) != ():
            raise errors.InvalidArgumentError(
                f"node {node.name!r} ({node.op}): its condition {cond_g.name!r} returned a "
                f"tensor of shape {list(t.shape)}; a While condition must return a scalar",
                op=node.op)
        return _truth(t)

    def step(plan, state: _State) -> None:
        args = [state.py[s] for s in reads]
        while predicate(args):
            args = ex.sub_executable(node, body_g, args).run(args)
        for s, t in zip(writes, args):
            state.py[s] = t
    return step


# --------------------------------------------------------------------- helpers

def _static(shape) -> tuple | None:
    if shape is None or any(d is None for d in shape):
        return None
    return tuple(shape)


def _dims(h) -> tuple:
    v = ffi.cast("pg_tensor_view*", h)
    return tuple(v.dims[0:v.num_dims])


def _raise(st, what: str) -> None:
    code, msg = code_and_message(st)
    if code:
        raise errors.make_error(code, f"{what}: {msg}")
