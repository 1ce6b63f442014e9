"""TensorFlow as a reference, in a process of its own.

TensorFlow cannot be imported into a process that has loaded pluggable: the
core exports the TF_* C API globally for plugins, so TensorFlow's own kernel
registration binds to pluggable's functions and TensorFlow aborts.  Tests
therefore ask a worker process (this file run as a script) that imports
TensorFlow and never pluggable.

Client side::

    oracle = TfOracle()                     # starts the worker
    reply = oracle.call("graph_def")        # one JSON request, one JSON reply
    oracle.close()

Bytes travel base64-encoded (``pack``/``unpack``), arrays as
``{"dtype", "shape", "data"}`` (``pack_array``/``unpack_array``).  The
worker prints nothing else on its protocol stream; TensorFlow's logging goes
to its stderr, which is kept for error messages.

The op tests use ``TFOracle`` (below): ``oracle.raw("Less", x=a, y=b)`` runs
``tf.raw_ops.Less`` in a child that imports only TensorFlow and numpy and
returns numpy arrays; ``oracle.run(code, **inputs)`` executes a snippet that
sets ``result``. TensorFlow's errors come back as ``OracleError`` with the
exception class name in ``tf_type``.
"""
from __future__ import annotations

import base64
import importlib.util
import json
import os
import pickle
import struct
import subprocess
import sys
import tempfile
from typing import Any

import numpy as np


# TensorFlow's own kernels, not oneDNN's: TensorFlow turns oneDNN on by
# default on x86 CPUs with some instruction sets only, and its kernels differ
# on edge cases (softmax of a row holding +inf, placeholder output shapes of
# FusedBatchNormGradV3, CPU allocator statistics), so the oracle would
# change with the machine.
REFERENCE_KERNELS = {"TF_ENABLE_ONEDNN_OPTS": "0"}


def tensorflow_missing_reason() -> str | None:
    """Why TensorFlow cannot serve as the oracle, or None when it can."""
    if importlib.util.find_spec("tensorflow") is None:
        return ("TensorFlow is not installed; install tensorflow-cpu to compare with "
                "TensorFlow")
    return None


def pack(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unpack(text: str) -> bytes:
    return base64.b64decode(text)


def _numpy_dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def pack_array(array: np.ndarray) -> dict:
    array = np.asarray(array, order="C")  # keeps 0-d arrays 0-d
    return {"dtype": str(array.dtype), "shape": list(array.shape), "data": pack(array.tobytes())}


def unpack_array(packed: dict) -> np.ndarray:
    flat = np.frombuffer(unpack(packed["data"]), _numpy_dtype(packed["dtype"]))
    return flat.reshape(packed["shape"]).copy()


class TensorFlowUnavailable(RuntimeError):
    """TensorFlow is installed but cannot be imported in this environment."""


class TfOracle:
    """A TensorFlow worker process answering one request at a time.

    Starting it imports TensorFlow in the worker; if that fails,
    ``TensorFlowUnavailable`` says why."""

    def __init__(self):
        self._stderr = tempfile.TemporaryFile()
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="",
                   **REFERENCE_KERNELS)
        self._proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__)], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self._stderr, env=env, text=True)
        try:
            self.call("ready")
        except RuntimeError as exc:
            self.close()
            raise TensorFlowUnavailable(str(exc).splitlines()[0]) from None

    def call(self, command: str, **args: Any) -> Any:
        """Sends a command; returns its reply or raises RuntimeError with the
        worker's error and the end of its stderr."""
        self._proc.stdin.write(json.dumps({"command": command, "args": args}) + "\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the TensorFlow worker exited ({self._proc.poll()}):\n"
                               f"{self._stderr_tail()}")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"TensorFlow worker: {command}: {reply['error']}\n"
                               f"{self._stderr_tail()}")
        return reply["result"]

    def _stderr_tail(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")[-4000:]

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.stdin.close()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        self._stderr.close()


# ------------------------------------------------------------------ worker side

def _message_class(full_name: str):
    from google.protobuf import descriptor_pool, message_factory
    return message_factory.GetMessageClass(
        descriptor_pool.Default().FindMessageTypeByName(full_name))


def _unknown_fields(message) -> bool:
    size = message.ByteSize()
    copy = type(message)()
    copy.CopyFrom(message)
    copy.DiscardUnknownFields()
    return copy.ByteSize() != size


def cmd_ready() -> str:
    import tensorflow as tf
    return tf.__version__


def cmd_descriptors(modules: list[str]) -> dict:
    """TensorFlow's FileDescriptorSet for the given generated modules and
    everything they import, and the names of the modules' own files."""
    import importlib
    from google.protobuf import descriptor_pb2
    out, seen = descriptor_pb2.FileDescriptorSet(), set()

    def add(file_desc):
        if file_desc.name in seen:
            return
        seen.add(file_desc.name)
        for dep in file_desc.dependencies:
            add(dep)
        file_desc.CopyToProto(out.file.add())

    files = [importlib.import_module(name).DESCRIPTOR for name in modules]
    for file_desc in files:
        add(file_desc)
    return {"set": pack(out.SerializeToString()), "files": [f.name for f in files]}


def cmd_datatypes(names: list[str]) -> dict:
    import tensorflow as tf
    return {n: tf.as_dtype(n).as_datatype_enum for n in names}


def cmd_shapes(shapes: list) -> list[str]:
    import tensorflow as tf
    return [pack(tf.TensorShape(s).as_proto().SerializeToString()) for s in shapes]


def cmd_graph_def() -> dict:
    """A GraphDef traced from a small CNN (convolution, pooling, batch norm,
    dense, softmax, a branch), with the Const values TensorFlow reads."""
    import tensorflow as tf
    from tensorflow.python.framework import error_interpolation

    rng = np.random.default_rng(0)
    w_conv = tf.constant(rng.standard_normal((3, 3, 3, 4)).astype(np.float32))
    b_conv = tf.constant(rng.standard_normal(4).astype(np.float32))
    gamma, beta = tf.ones([4]), tf.zeros([4])
    mean = tf.constant(rng.standard_normal(4).astype(np.float32))
    var = tf.constant(rng.random(4).astype(np.float32) + 0.5)
    w_dense = tf.Variable(rng.standard_normal((16, 10)).astype(np.float32))
    b_dense = tf.constant(rng.standard_normal(10).astype(np.float16))

    @tf.function
    def model(x, training):
        y = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, w_conv, 1, "SAME"), b_conv))
        y = tf.nn.max_pool2d(y, 2, 2, "VALID")
        y, _, _ = tf.compat.v1.nn.fused_batch_norm(y, gamma, beta, mean, var,
                                                   is_training=False)
        y = tf.nn.avg_pool2d(y, 2, 2, "VALID")
        y = tf.reshape(y, [-1, 16])
        logits = tf.matmul(y, w_dense) + tf.cast(b_dense, tf.float32)
        logits = tf.cond(training, lambda: logits * 0.5, lambda: logits)
        return tf.nn.softmax(logits)

    concrete = model.get_concrete_function(tf.TensorSpec([None, 8, 8, 3], tf.float32),
                                           tf.TensorSpec([], tf.bool))
    graph_def = concrete.graph.as_graph_def(add_shapes=True)
    graph_def.debug_info.CopyFrom(error_interpolation.create_graph_debug_info_def(
        [("", op) for op in concrete.graph.get_operations()]))
    consts = {n.name: pack_array(tf.make_ndarray(n.attr["value"].tensor))
              for n in graph_def.node if n.op == "Const"}
    return {"bytes": pack(graph_def.SerializeToString()),
            "deterministic": pack(graph_def.SerializeToString(deterministic=True)),
            "ops": sorted({n.op for n in graph_def.node}),
            "functions": [f.signature.name for f in graph_def.library.function],
            "consts": consts}


def cmd_parse(type_name: str, data: str) -> dict:
    """Parses bytes with TensorFlow's class; says whether every field was known
    and returns the deterministic re-serialisation and the text form."""
    message = _message_class(type_name)()
    message.ParseFromString(unpack(data))
    return {"unknown_fields": _unknown_fields(message),
            "deterministic": pack(message.SerializeToString(deterministic=True)),
            "text": str(message)}


def cmd_xspace_trace_events(path: str) -> list[dict]:
    """The trace events TensorFlow's profiler tools (what TensorBoard's
    profile plugin serves) make of an .xplane.pb file."""
    from tensorflow.python.profiler.internal import _pywrap_profiler_plugin
    data, ok = _pywrap_profiler_plugin.xspace_to_tools_data([path], "trace_viewer@", {})
    if not ok:
        raise ValueError(f"the trace_viewer tool could not read {path}")
    return json.loads(data)["traceEvents"]


def cmd_make_tensor_proto(items: list[dict]) -> list[str]:
    """tf.make_tensor_proto of each {"array", "shape"?} item."""
    import tensorflow as tf
    out = []
    for item in items:
        array = unpack_array(item["array"])
        proto = tf.make_tensor_proto(array, shape=item.get("shape"))
        out.append(pack(proto.SerializeToString()))
    return out


def cmd_make_ndarray(protos: list[str]) -> list[dict]:
    import tensorflow as tf
    from tensorflow.core.framework import tensor_pb2
    return [pack_array(tf.make_ndarray(tensor_pb2.TensorProto.FromString(unpack(p))))
            for p in protos]


def run_config_steps(config: Any, steps: list) -> list:
    """Runs device-configuration calls on `config` (``tf.config`` or
    ``pg.config``, which share their shapes) and returns, for each step, its
    result or its error as ``{"error": type name, "message": text}``. A step
    is ``[function path, args]``; an argument ``{"physical": [name, type]}``
    is a ``PhysicalDevice``, ``{"physical_list": type}`` is
    ``list_physical_devices(type)``, ``{"logical": {fields}}`` a
    ``LogicalDeviceConfiguration``. Results are made JSON-friendly (named
    tuples as lists)."""
    def arg(a):
        if isinstance(a, dict) and "physical" in a:
            return config.PhysicalDevice(*a["physical"])
        if isinstance(a, dict) and "physical_list" in a:
            return config.list_physical_devices(a["physical_list"])
        if isinstance(a, dict) and "logical" in a:
            return config.LogicalDeviceConfiguration(**a["logical"])
        if isinstance(a, list):
            return [arg(x) for x in a]
        return a

    def plain(v):
        if isinstance(v, tuple):
            return [plain(x) for x in v]
        if isinstance(v, list):
            return [plain(x) for x in v]
        return v

    out = []
    for path, args in steps:
        fn = config
        for part in path.split("."):
            fn = getattr(fn, part)
        try:
            out.append({"result": plain(fn(*[arg(a) for a in args]))})
        except Exception as exc:
            out.append({"error": type(exc).__name__, "message": str(exc)})
    return out


def cmd_config_steps(steps: list) -> list:
    import tensorflow as tf
    return run_config_steps(tf.config, steps)


def cmd_op_defs(names: list[str]) -> dict:
    """TensorFlow's serialised OpDef of each op (None for an unknown op)."""
    import tensorflow as tf  # noqa: F401  (registers the ops)
    from tensorflow.python.framework import op_def_registry
    out = {}
    for name in names:
        op_def = op_def_registry.get(name)
        out[name] = pack(op_def.SerializeToString()) if op_def is not None else None
    return out


def cmd_run_graph(graph: str, feeds: dict, fetches: list[str]) -> list[dict]:
    """Runs a serialised GraphDef on TensorFlow's CPU (device fields cleared)
    with `feeds` (node name -> packed array) and returns the fetched arrays."""
    import tensorflow as tf
    graph_def = tf.compat.v1.GraphDef.FromString(unpack(graph))
    for node in graph_def.node:
        node.device = ""
    with tf.Graph().as_default() as g:
        tf.graph_util.import_graph_def(graph_def, name="")
        with tf.compat.v1.Session(graph=g) as session:
            values = session.run(
                [g.get_tensor_by_name(f if ":" in f else f + ":0") for f in fetches],
                {g.get_tensor_by_name(k if ":" in k else k + ":0"): unpack_array(v)
                 for k, v in feeds.items()})
    return [pack_array(v) for v in values]


def _serve() -> None:
    reply_stream = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # anything TensorFlow prints goes to stderr
    commands = {name[4:]: fn for name, fn in globals().items() if name.startswith("cmd_")}
    for line in sys.stdin:
        request = json.loads(line)
        try:
            result = {"result": commands[request["command"]](**request["args"])}
        except Exception as exc:  # report to the client, keep serving
            result = {"error": f"{type(exc).__name__}: {exc}"}
        reply_stream.write(json.dumps(result) + "\n")
        reply_stream.flush()


# ------------------------------------------------------------------------
# TFOracle: tf.raw_ops calls and code snippets, numpy values pickled both ways
# (the op tests; the worker imports only TensorFlow and numpy).

_WORKER = r'''
import os, pickle, struct, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np
import tensorflow as tf

inp, out = sys.stdin.buffer, sys.stdout.buffer
def send(obj):
    data = pickle.dumps(obj)
    out.write(struct.pack("<Q", len(data))); out.write(data); out.flush()

def to_numpy(x):
    if isinstance(x, (list, tuple)):
        return type(x)(to_numpy(v) for v in x) if not hasattr(x, "_fields") else tuple(to_numpy(v) for v in x)
    if isinstance(x, dict):
        return {k: to_numpy(v) for k, v in x.items()}
    return x.numpy() if hasattr(x, "numpy") else x

def execute_by_name(op, inputs, attrs):
    """Runs TensorFlow op `op` with `inputs` (op definition order, list
    arguments flattened) and `attrs` (dtypes by name; type and length
    attributes TensorFlow can infer may be left out); every output."""
    from tensorflow.python.eager import context, execute
    from tensorflow.python.framework import op_def_registry
    op_def = op_def_registry.get(op)
    values, pos = dict(attrs), 0
    for arg in op_def.input_arg:
        count = 1
        if arg.number_attr:
            count = values.setdefault(arg.number_attr, len(inputs) - len(op_def.input_arg) + 1)
        if arg.type_attr and arg.type_attr not in values:
            values[arg.type_attr] = tf.as_dtype(inputs[pos].dtype).name
        pos += count
    flat = []
    for a in op_def.attr:
        if a.name not in values and a.HasField("default_value"):
            d = a.default_value
            which = d.WhichOneof("value")
            if which == "list":
                values[a.name] = list(d.list.i)
            elif which is not None:
                values[a.name] = getattr(d, which)
        if a.name in values:
            v = values[a.name]
            flat += [a.name, tf.as_dtype(v) if a.type == "type" else
                     v.encode() if isinstance(v, str) else v]
    outs = sum(values[o.number_attr] if o.number_attr else 1 for o in op_def.output_arg)
    tensors = [tf.constant(x) for x in inputs]
    return [t.numpy() for t in execute.execute(op, outs, tensors, tuple(flat), context.context())]

def run_case(op, inputs, attrs):
    """("ok", outputs) or ("error", exception class name, message)."""
    try:
        with tf.device("/CPU:0"):
            return ("ok", execute_by_name(op, inputs, attrs))
    except Exception as exc:
        return ("error", type(exc).__name__, str(exc)[:300])

send("ready")
while True:
    head = inp.read(8)
    if len(head) < 8:
        break
    kind, what, kwargs = pickle.loads(inp.read(struct.unpack("<Q", head)[0]))
    try:
        with tf.device("/CPU:0"):
            if kind == "raw":
                res = getattr(tf.raw_ops, what)(**kwargs)
            elif kind == "batch":
                res = [run_case(*case) for case in kwargs["cases"]]
            elif kind == "raw_names":
                res = sorted(n for n in dir(tf.raw_ops) if not n.startswith("_"))
            else:
                scope = {"tf": tf, "np": np, **kwargs}
                exec(what, scope)
                res = scope.get("result")
        send(("ok", to_numpy(res)))
    except Exception as exc:
        send(("error", type(exc).__name__, str(exc)))
'''


class OracleError(Exception):
    """TensorFlow raised `tf_type` (its exception class name)."""

    def __init__(self, tf_type: str, message: str):
        super().__init__(f"{tf_type}: {message}")
        self.tf_type = tf_type


class TFOracle:
    """A child process running TensorFlow (see the module docstring)."""

    def __init__(self):
        env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3",
                   **REFERENCE_KERNELS)
        self._p = subprocess.Popen([sys.executable, "-c", _WORKER], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        if self._recv() != "ready":
            raise RuntimeError("the TensorFlow child process did not start")

    def _recv(self) -> Any:
        head = self._p.stdout.read(8)
        if len(head) < 8:
            raise RuntimeError("the TensorFlow child process exited")
        return pickle.loads(self._p.stdout.read(struct.unpack("<Q", head)[0]))

    def _ask(self, kind: str, what: str, kwargs: dict) -> Any:
        data = pickle.dumps((kind, what, kwargs))
        self._p.stdin.write(struct.pack("<Q", len(data)) + data)
        self._p.stdin.flush()
        reply = self._recv()
        if reply[0] == "error":
            raise OracleError(reply[1], reply[2])
        return reply[1]

    def raw(self, op: str, **kwargs: Any) -> Any:
        """tf.raw_ops.<op>(**kwargs) as numpy (a tuple for several outputs)."""
        return self._ask("raw", op, kwargs)

    def batch(self, cases: list[tuple[str, list, dict]]) -> list[tuple]:
        """Runs many ops by name in one round trip: each case is (op name,
        inputs in op definition order with list arguments flattened, attrs
        with dtypes by name); each reply ("ok", [outputs]) or ("error",
        TensorFlow's exception class name, message)."""
        return self._ask("batch", "", {"cases": cases})

    def raw_op_names(self) -> list[str]:
        """The names in tf.raw_ops."""
        return self._ask("raw_names", "", {})

    def run(self, code: str, **inputs: Any) -> Any:
        """Executes `code` with `tf`, `np` and `inputs` in scope; returns the
        value it assigns to `result`, as numpy."""
        return self._ask("code", code, inputs)

    def close(self) -> None:
        self._p.stdin.close()
        self._p.wait(timeout=30)


def tensorflow_available() -> bool:
    """Whether TensorFlow is installed (for TFOracle)."""
    return importlib.util.find_spec("tensorflow") is not None


if __name__ == "__main__":
    _serve()
