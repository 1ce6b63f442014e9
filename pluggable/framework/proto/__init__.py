"""TensorFlow's wire formats (GraphDef, TensorProto, XSpace ...).

The ``.proto`` files next to this module are our own texts with
TensorFlow's package, message and field names and numbers, so bytes written
here parse in TensorFlow and the other way round.  The build (setup.py)
compiles them with protoc into ``*_pb2`` modules whose descriptors live in
a private ``DescriptorPool`` (never protobuf's default pool, so TensorFlow's
own classes can be imported alongside).  Importing this package imports no
protobuf module; the first use imports the generated modules.

Message classes and enums, by their short names::

    from pluggable.framework import proto
    graph = proto.GraphDef()                     # the first use imports the classes
    node = graph.node.add(name="x", op="Const")
    node.attr["dtype"].type = proto.DataType.DT_FLOAT
    data = proto.encode(graph)                   # deterministic bytes
    same = proto.decode(proto.GraphDef, data, source="model.pb")

``from pluggable.framework.proto import GraphDef`` works as well, and
``proto.messages()`` returns the namespace of all of them.  Defined:

* graph.proto: GraphDef; node_def.proto: NodeDef (with ExperimentalDebugInfo);
  attr_value.proto: AttrValue, NameAttrList; tensor.proto: TensorProto,
  VariantTensorDataProto; tensor_shape.proto: TensorShapeProto; types.proto:
  DataType (enum), SerializedDType; function.proto: FunctionDefLibrary,
  FunctionDef, GradientDef, RegisteredGradient; versions.proto: VersionDef;
  op_def.proto: OpDef, OpDeprecation, OpList; resource_handle.proto:
  ResourceHandleProto; full_type.proto: FullTypeId (enum), FullTypeDef;
  graph_debug_info.proto: GraphDebugInfo; device_properties.proto:
  DeviceProperties, NamedDevice; op_performance_data.proto: OpInfo (with
  TensorProperties), SessionInfo, OpPerformance, OpPerformanceList,
  NormalDistribution, LogNormalDistribution (all in package ``tensorflow``);
* xplane.proto (package ``tensorflow.profiler``): XSpace, XPlane, XLine,
  XEvent, XStat, XEventMetadata, XStatMetadata.

Functions:

* ``messages()``, ``pool()``: the namespace of classes and enums, and the
  private DescriptorPool;
* ``decode(message_type, data, *, source=None, strict=False)``: bytes to a
  message; malformed data raises ``pluggable.errors.DataLossError``;
* ``encode(message)``: deterministic bytes;
* ``to_datatype(dtype)`` / ``from_datatype(value)``: pluggable DType <->
  DataType enum value;
* ``to_shape_proto(shape)`` / ``from_shape_proto(proto)``: a tuple with
  ``None`` for unknown sizes (``None`` for an unknown rank) <->
  TensorShapeProto;
* ``to_tensor_proto(value, dtype=None, shape=None)`` /
  ``from_tensor_proto(proto)``: numpy array <-> TensorProto, as
  ``tf.make_tensor_proto`` / ``tf.make_ndarray``;
* ``proto_sources()``: the ``.proto`` texts, by file name;
  ``generated_module(file)``: the ``*_pb2`` module of one of them.
"""
from __future__ import annotations

from typing import Any

from .library import Messages, decode, encode, generated_module, messages, pool, proto_sources
from .tensors import (from_datatype, from_shape_proto, from_tensor_proto, to_datatype,
                      to_shape_proto, to_tensor_proto)

__all__ = [
    "Messages", "messages", "pool", "decode", "encode", "proto_sources", "generated_module",
    "to_datatype", "from_datatype", "to_shape_proto", "from_shape_proto",
    "to_tensor_proto", "from_tensor_proto",
]


def __getattr__(name: str) -> Any:
    """Message classes and enums as attributes of the package (``GraphDef``,
    ``DataType`` ...), loaded on first access.  Submodules not yet imported
    (``graph_pb2`` ...) are left to the import system, which asks here first
    while the generated modules import each other."""
    if name.startswith("_") or name.endswith("_pb2"):
        raise AttributeError(name)
    try:
        return getattr(messages(), name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}; the "
                             f"messages are: {', '.join(sorted(vars(messages())))}") from None
