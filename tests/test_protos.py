"""The wire formats in pluggable.framework.proto: the modules the build
generates with protoc, our descriptors against TensorFlow's, wire round trips in both directions, and
the numpy/TensorProto, DataType and shape helpers.

TensorFlow runs in a worker process (tests/tf_oracle.py says why)."""
from __future__ import annotations

import ast
import hashlib
import importlib.util
import pathlib
import subprocess
import sys
import threading
import types

import numpy as np
import pytest

import pluggable as pg
from pluggable.framework import proto
from pluggable.framework.proto import library
from tf_oracle import (TensorFlowUnavailable, TfOracle, pack, pack_array,
                       tensorflow_missing_reason, unpack, unpack_array)

ROOT = pathlib.Path(__file__).resolve().parent.parent

# TensorFlow's generated modules for the files we define.
TF_MODULES = [f"tensorflow.core.framework.{name}_pb2" for name in (
    "graph", "graph_debug_info", "node_def", "attr_value", "tensor", "tensor_shape",
    "types", "function", "versions", "op_def", "resource_handle", "full_type")] + [
    "tensorflow.core.grappler.costs.op_performance_data_pb2",
    "tensorflow.core.protobuf.device_properties_pb2",
    "tensorflow.tsl.profiler.protobuf.xplane_pb2",
    "tensorflow.core.framework.tensor_slice_pb2", "tensorflow.core.framework.variable_pb2",
] + [f"tensorflow.core.protobuf.{name}_pb2" for name in (
    "saved_model", "meta_graph", "saved_object_graph", "saver", "struct",
    "trackable_object_graph", "tensor_bundle")]


@pytest.fixture(scope="module")
def tf():
    reason = tensorflow_missing_reason()
    if reason:
        pytest.skip(reason)
    try:
        oracle = TfOracle()
    except TensorFlowUnavailable as exc:
        pytest.skip(f"TensorFlow cannot be imported here, so it cannot be compared "
                    f"with: {exc}")
    yield oracle
    oracle.close()


def load_setup():
    """setup.py as a module: defines the build functions, runs no build."""
    spec = importlib.util.spec_from_file_location("pluggable_setup", ROOT / "setup.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


# ------------------------------------------------------------------ the generated modules

def test_every_proto_file_has_a_generated_module_in_the_private_pool():
    for name, text in proto.proto_sources().items():
        module = proto.generated_module(name)
        assert module.__name__ == f"pluggable.framework.proto.{name[:-6]}_pb2"
        assert module.DESCRIPTOR.pool is proto.pool()
        assert module.DESCRIPTOR.name == f"pluggable/framework/proto/{name}"
        assert module.SOURCE_SHA256 == hashlib.sha256(text.encode()).hexdigest()
    assert proto.GraphDef.__module__ == "pluggable.framework.proto.graph_pb2"


def test_a_module_generated_from_another_text_is_refused(monkeypatch, tmp_path, rng):
    for name, text in proto.proto_sources().items():
        (tmp_path / name).write_text(text)
    changed = str(rng.choice(sorted(proto.proto_sources())))
    with open(tmp_path / changed, "a") as f:
        f.write("// edited after the build\n")
    monkeypatch.setattr(library, "PROTO_DIR", tmp_path)
    with pytest.raises(pg.errors.FailedPreconditionError,
                       match=f"generated from another version of {changed}.*rebuild"):
        proto.generated_module(changed)
    monkeypatch.setattr(library, "_loaded", None)
    with pytest.raises(pg.errors.FailedPreconditionError, match=changed):
        proto.messages()


def test_a_missing_module_says_how_to_build_it():
    with pytest.raises(pg.errors.FailedPreconditionError,
                       match=r"absent_pb2.py, the classes of absent.proto, is missing .*"
                             r"setup.py build_ext --inplace"):
        proto.generated_module("absent.proto")


def test_a_protobuf_older_than_the_generated_code_is_refused():
    # As if the installed protobuf were 6.0.0, older than any code the build
    # requirements generate; protobuf's own check refuses it.
    res = run_python(
        "import google.protobuf.runtime_version as r\n"
        "r.MAJOR, r.MINOR, r.PATCH = 6, 0, 0\n"
        "import pluggable as pg\n"
        "from pluggable.framework import proto\n"
        "try:\n"
        "    proto.GraphDef()\n"
        "except pg.errors.FailedPreconditionError as exc:\n"
        "    print(exc)\n")
    assert res.returncode == 0, res.stderr
    assert "was generated for another protobuf than the installed" in res.stdout
    assert "grpcio-tools" in res.stdout


def test_tensorflows_generated_classes_live_beside_ours():
    """Both define tensorflow.GraphDef ...: in one pool they would clash.
    TensorFlow's pb2 modules are imported without TensorFlow itself, which
    cannot share a process with pluggable (tests/tf_oracle.py says why)."""
    reason = tensorflow_missing_reason()
    if reason:
        pytest.skip(reason)
    stub_tensorflow = (
        "import importlib.util, sys, types\n"
        "tf_dir = importlib.util.find_spec('tensorflow').submodule_search_locations[0]\n"
        "for name, sub in [('tensorflow', ''), ('tensorflow.core', '/core'),\n"
        "                  ('tensorflow.core.framework', '/core/framework')]:\n"
        "    sys.modules[name] = types.ModuleType(name)\n"
        "    sys.modules[name].__path__ = [tf_dir + sub]\n")
    use = ("ours = proto.GraphDef()\n"
           "ours.node.add(name='x', op='Const').attr['dtype'].type = proto.DataType.DT_HALF\n"
           "assert type(ours) is not theirs.GraphDef\n"
           "back = theirs.GraphDef.FromString(proto.encode(ours))\n"
           "assert back.node[0].attr['dtype'].type == 19, back\n"
           "assert proto.decode(proto.GraphDef, back.SerializeToString()) == ours\n")
    ours = "from pluggable.framework import proto\nproto.messages()\n"
    theirs = "from tensorflow.core.framework import graph_pb2 as theirs\n"
    for first, second in ((ours, theirs), (theirs, ours)):
        res = run_python(stub_tensorflow + first + second + use)
        assert res.returncode == 0, res.stderr[-3000:]


# ------------------------------------------------------------------ the build step

def test_the_build_generates_modules_for_the_private_pool(tmp_path):
    pytest.importorskip("grpc_tools", reason="grpcio-tools is not installed here; an "
                        "isolated build (pip install) installs it for the build only")
    from google.protobuf import descriptor_pb2
    setup = load_setup()
    setup.generate_protos(tmp_path)
    made = sorted(p.name for p in tmp_path.iterdir())
    assert made == sorted(n[:-6] + "_pb2.py" for n in proto.proto_sources())
    for name, source in proto.proto_sources().items():
        text = (tmp_path / (name[:-6] + "_pb2.py")).read_text()
        assert "from . import _pool\n" in text and "_descriptor_pool" not in text
        assert f"SOURCE_SHA256 = '{hashlib.sha256(source.encode()).hexdigest()}'" in text
        # The descriptor it adds is the one of the module the package loads.
        call = text.index("_pool.POOL.AddSerializedFile(")
        literal = text[text.index("b'", call):text.index("')\n", call) + 1]
        written = descriptor_pb2.FileDescriptorProto.FromString(ast.literal_eval(literal))
        loaded = descriptor_pb2.FileDescriptorProto()
        proto.generated_module(name).DESCRIPTOR.CopyToProto(loaded)
        assert written == loaded, name


def fake_protoc(monkeypatch, main):
    package = types.ModuleType("grpc_tools")
    package.protoc = types.SimpleNamespace(main=main)
    monkeypatch.setitem(sys.modules, "grpc_tools", package)


def test_the_build_refuses_protoc_output_it_does_not_know(monkeypatch, tmp_path):
    setup = load_setup()

    def main(cmd):  # writes modules without the line the build points at the pool
        out = pathlib.Path(next(a for a in cmd if a.startswith("--python_out="))[13:])
        for source in cmd[3:]:
            path = out / pathlib.Path(source).relative_to(ROOT)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.with_name(path.stem + "_pb2.py").write_text("DESCRIPTOR = None\n")
        return 0

    fake_protoc(monkeypatch, main)
    with pytest.raises(RuntimeError, match=r"does not contain .* \[build-system\]"):
        setup.generate_protos(tmp_path / "out")
    assert not (tmp_path / "out").exists()  # nothing half written

    fake_protoc(monkeypatch, lambda cmd: 1)
    with pytest.raises(RuntimeError, match="protoc failed"):
        setup.generate_protos(tmp_path / "out")

    monkeypatch.setitem(sys.modules, "grpc_tools", None)  # not installed
    with pytest.raises(RuntimeError, match="needs grpcio-tools.*pip install grpcio-tools"):
        setup.generate_protos(tmp_path / "out")


# ------------------------------------------------------------------ our files

EXPECTED_NAMES = {
    "GraphDef", "NodeDef", "AttrValue", "NameAttrList", "TensorProto",
    "VariantTensorDataProto", "TensorShapeProto", "DataType", "SerializedDType",
    "FunctionDefLibrary", "FunctionDef", "GradientDef", "RegisteredGradient",
    "VersionDef", "OpDef", "OpDeprecation", "OpList", "ResourceHandleProto",
    "FullTypeId", "FullTypeDef", "GraphDebugInfo", "DeviceProperties", "NamedDevice",
    "OpInfo", "SessionInfo", "OpPerformance", "OpPerformanceList", "NormalDistribution",
    "LogNormalDistribution", "XSpace", "XPlane", "XLine", "XEvent", "XStat",
    "XEventMetadata", "XStatMetadata",
    # SavedModel and TensorBundle checkpoints
    "SavedModel", "MetaGraphDef", "CollectionDef", "TensorInfo", "SignatureDef",
    "AssetFileDef", "SaverDef", "SavedObjectGraph", "SavedObject", "SavedUserObject",
    "SavedAsset", "SavedFunction", "CapturedTensor", "SavedConcreteFunction",
    "SavedBareConcreteFunction", "SavedConstant", "SavedVariable", "FunctionSpec",
    "SavedResource", "SaveableObject", "StructuredValue", "NoneValue", "ListValue",
    "TupleValue", "DictValue", "PairValue", "NamedTupleValue", "TensorSpecProto",
    "BoundedTensorSpecProto", "TypeSpecProto", "TrackableObjectGraph", "RegisteredSaver",
    "BundleHeaderProto", "BundleEntryProto", "TensorSliceProto", "VariableSynchronization",
    "VariableAggregation", "VariableDef", "SaveSliceInfoDef",
}


def our_files() -> list:
    """The FileDescriptorProtos of our files, each after the files it imports."""
    from google.protobuf import descriptor_pb2
    out = []
    for name in proto.proto_sources():
        fdp = descriptor_pb2.FileDescriptorProto()
        proto.generated_module(name).DESCRIPTOR.CopyToProto(fdp)
        out.append(fdp)
    ordered = []
    # protobuf's own files (google/protobuf/any.proto ...) are in the pool already
    done = {d for fdp in out for d in fdp.dependency} - {fdp.name for fdp in out}
    while len(ordered) < len(out):
        for fdp in out:
            if fdp.name not in done and set(fdp.dependency) <= done:
                ordered.append(fdp)
                done.add(fdp.name)
    return ordered


def our_definitions() -> list[str]:
    """Full names of every top-level message and enum of our files."""
    names = []
    for fdp in our_files():
        prefix = fdp.package + "."
        names += [prefix + m.name for m in fdp.message_type]
        names += [prefix + e.name for e in fdp.enum_type]
    return sorted(names)


def test_every_message_is_reachable_by_name():
    m = proto.messages()
    assert set(vars(m)) == EXPECTED_NAMES
    assert proto.GraphDef is m.GraphDef
    from pluggable.framework.proto import XSpace
    assert XSpace is m.XSpace and XSpace.DESCRIPTOR.full_name == "tensorflow.profiler.XSpace"
    assert m.DataType.DT_FLOAT == 1 and m.DataType.Name(19) == "DT_HALF"
    assert m.GraphDebugInfo.FileLineCol.DESCRIPTOR.full_name == \
        "tensorflow.GraphDebugInfo.FileLineCol"
    with pytest.raises(AttributeError, match="the messages are"):
        proto.NoSuchMessage  # noqa: B018


def test_messages_live_in_a_private_pool():
    from google.protobuf import descriptor_pool
    assert proto.pool() is not descriptor_pool.Default()
    assert proto.pool().FindMessageTypeByName("tensorflow.GraphDef") is \
        proto.GraphDef.DESCRIPTOR
    if "tensorflow" not in sys.modules:  # TensorFlow's classes would be there
        with pytest.raises(KeyError):
            descriptor_pool.Default().FindMessageTypeByName("tensorflow.GraphDef")


def test_another_pool_with_the_same_names_leaves_ours_alone(monkeypatch):
    """As when TensorFlow's generated classes are imported after ours."""
    from google.protobuf import descriptor_pool, message_factory
    monkeypatch.setattr(library, "_loaded", None)
    ours = proto.messages()
    other = descriptor_pool.DescriptorPool()
    from google.protobuf import any_pb2, wrappers_pb2
    for known in (any_pb2, wrappers_pb2):
        other.AddSerializedFile(known.DESCRIPTOR.serialized_pb)
    for fdp in our_files():
        file = other.AddSerializedFile(fdp.SerializeToString())
        for desc in file.message_types_by_name.values():
            assert message_factory.GetMessageClass(desc) is not getattr(ours, desc.name)
    shape = ours.TensorShapeProto(dim=[ours.TensorShapeProto.Dim(size=3)])
    assert proto.from_shape_proto(shape) == (3,)


def test_first_use_loads_once_across_threads(monkeypatch):
    monkeypatch.setattr(library, "_loaded", None)
    seen, barrier = [], threading.Barrier(8)

    def first_use():
        barrier.wait()
        seen.append(proto.messages())

    threads = [threading.Thread(target=first_use) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 8 and all(s is seen[0] for s in seen)


def test_importing_loads_no_message_class():
    # Graph mode imports the package (its converters name the messages), but
    # neither the protobuf runtime nor a generated module is loaded until a
    # message is made.
    code = ("import sys, pluggable\n"
            "import pluggable.framework.proto as p\n"
            "assert not [m for m in sys.modules if m.startswith('google.protobuf')\n"
            "            or m.endswith('_pb2')]\n"
            "assert p.library._loaded is None\n"
            "p.GraphDef()\n"
            "assert p.library._loaded is not None\n")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=120)


def test_proto_files_ship_in_the_wheel():
    import warnings
    from setuptools.config.pyprojecttoml import read_configuration
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # setuptools calls its [tool.setuptools] support beta
        config = read_configuration(ROOT / "pyproject.toml")
    setup = config["tool"]["setuptools"]
    assert "pluggable.framework.proto" in setup["packages"]
    folder = ROOT / "pluggable" / "framework" / "proto"
    shipped = {p for pattern in setup["package-data"]["pluggable.framework.proto"]
               for p in folder.glob(pattern)}
    assert len(shipped) == 24 and shipped == set(folder.glob("*.proto"))
    assert any(d.replace(" ", "").startswith("protobuf>=")
               for d in config["project"]["dependencies"])
    # The *_pb2.py modules are made by the build, with this requirement.
    import tomllib
    build = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]
    assert any(r.startswith("grpcio-tools>=") for r in build["requires"])
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    assert "pluggable/framework/proto/*_pb2.py" in ignored


# ------------------------------------------------------------------ against TensorFlow

@pytest.fixture(scope="module")
def tf_files(tf):
    """TensorFlow's own descriptors, loaded into a pool of their own, and the
    names of the files that correspond to ours."""
    from google.protobuf import descriptor_pb2, descriptor_pool
    reply = tf.call("descriptors", modules=TF_MODULES)
    pool = descriptor_pool.DescriptorPool()
    for fdp in descriptor_pb2.FileDescriptorSet.FromString(unpack(reply["set"])).file:
        pool.Add(fdp)
    return pool, reply["files"]


def file_syntax(desc) -> str:
    from google.protobuf import descriptor_pb2
    raw = descriptor_pb2.FileDescriptorProto()
    desc.file.CopyToProto(raw)
    return raw.syntax or "proto2"  # an unset syntax means proto2


def canonical_message(desc) -> dict:
    """What of a message descriptor matters on the wire and to the API."""
    from google.protobuf import descriptor_pb2
    raw = descriptor_pb2.DescriptorProto()
    desc.CopyToProto(raw)
    fields = {f.number: dict(
        name=f.name, type=f.type, repeated=f.is_repeated, required=f.is_required,
        message=f.message_type.full_name if f.message_type else None,
        enum=f.enum_type.full_name if f.enum_type else None,
        oneof=f.containing_oneof.name if f.containing_oneof else None,
        packed=f.is_packed, presence=f.has_presence, deprecated=f.GetOptions().deprecated,
    ) for f in desc.fields}
    return dict(
        full_name=desc.full_name, syntax=file_syntax(desc), fields=fields,
        oneofs=[o.name for o in desc.oneofs], map_entry=desc.GetOptions().map_entry,
        nested={n.name: canonical_message(n) for n in desc.nested_types},
        enums={e.name: canonical_enum(e) for e in desc.enum_types},
        reserved=sorted(n for r in raw.reserved_range for n in range(r.start, r.end)),
        reserved_names=sorted(raw.reserved_name))


def canonical_enum(desc) -> dict:
    return dict(full_name=desc.full_name,
                values=sorted((v.name, v.number) for v in desc.values))


@pytest.mark.parametrize("full_name", our_definitions())
def test_descriptor_matches_tensorflow(tf_files, full_name):
    tf_pool, _ = tf_files
    ours_pool = proto.pool()
    try:
        ours, theirs = ours_pool.FindMessageTypeByName(full_name), \
            tf_pool.FindMessageTypeByName(full_name)
        canonical = canonical_message
    except KeyError:
        ours, theirs = ours_pool.FindEnumTypeByName(full_name), \
            tf_pool.FindEnumTypeByName(full_name)
        canonical = canonical_enum
    assert canonical(ours) == canonical(theirs)


def test_tensorflow_defines_nothing_more_in_these_files(tf_files):
    tf_pool, names = tf_files
    theirs = set()
    for name in names:
        file = tf_pool.FindFileByName(name)
        theirs |= {f"{file.package}.{n}" for n in file.message_types_by_name}
        theirs |= {f"{file.package}.{n}" for n in file.enum_types_by_name}
    assert theirs == set(our_definitions())


def test_datatypes_match_tensorflow(tf):
    names = [d.name for d in pg.dtypes.ALL]
    theirs = tf.call("datatypes", names=names)
    for d in pg.dtypes.ALL:
        assert proto.to_datatype(d) == theirs[d.name]
        assert proto.from_datatype(theirs[d.name]) is d


def test_shape_protos_match_tensorflow(tf):
    shapes = [None, [], [3], [None, 4], [2, None, None, 7], [0, 5]]
    theirs = tf.call("shapes", shapes=shapes)
    for shape, data in zip(shapes, theirs):
        ours = proto.to_shape_proto(shape)
        assert proto.encode(ours) == unpack(data), shape
        back = proto.from_shape_proto(proto.decode(proto.TensorShapeProto, unpack(data)))
        assert back == (None if shape is None else tuple(shape))


def test_graphdef_from_tensorflow_round_trips(tf):
    made = tf.call("graph_def")
    assert {"Conv2D", "MaxPool", "AvgPool", "FusedBatchNormV3", "MatMul", "BiasAdd",
            "Softmax", "StatelessIf"} <= set(made["ops"])
    original = unpack(made["bytes"])
    graph = proto.decode(proto.GraphDef, original, source="TensorFlow", strict=True)

    # Every field was known: the same bytes come back, map entries in key order.
    assert proto.encode(graph) == unpack(made["deterministic"])
    assert {n.op for n in graph.node} == set(made["ops"])
    assert [f.signature.name for f in graph.library.function] == made["functions"]
    assert len(graph.debug_info.traces_by_id) and len(graph.debug_info.frames_by_id)

    # Const values read as TensorFlow reads them.
    consts = {n.name: n for n in graph.node if n.op == "Const"}
    assert set(consts) == set(made["consts"])
    for name, packed in made["consts"].items():
        expected = unpack_array(packed)
        got = proto.from_tensor_proto(consts[name].attr["value"].tensor)
        assert got.dtype == expected.dtype and got.shape == expected.shape
        assert got.tobytes() == expected.tobytes(), name

    # Shapes with unknown sizes, as the graph records them.
    placeholder = next(n for n in graph.node if n.op == "Placeholder"
                       and n.attr["dtype"].type == proto.DataType.DT_FLOAT)
    assert proto.from_shape_proto(placeholder.attr["shape"].shape) == (None, 8, 8, 3)

    # Ours serialised (in whatever map order) parses in TensorFlow to the same graph.
    back = tf.call("parse", type_name="tensorflow.GraphDef", data=pack(graph.SerializeToString()))
    assert not back["unknown_fields"]
    assert unpack(back["deterministic"]) == unpack(made["deterministic"])


def test_graphdef_written_here_parses_in_tensorflow(tf, rng):
    graph = proto.GraphDef(versions=proto.VersionDef(producer=2000, min_consumer=12))
    weights = rng.standard_normal((4, 3)).astype(np.float32)
    x = graph.node.add(name="x", op="Placeholder")
    x.attr["dtype"].type = proto.to_datatype(pg.float32)
    x.attr["shape"].shape.CopyFrom(proto.to_shape_proto((None, 4)))
    w = graph.node.add(name="w", op="Const")
    w.attr["dtype"].type = proto.DataType.DT_FLOAT
    w.attr["value"].tensor.CopyFrom(proto.to_tensor_proto(weights))
    mm = graph.node.add(name="mm", op="MatMul", input=["x", "w"], device="/device:CPU:0")
    mm.attr["T"].type = proto.DataType.DT_FLOAT
    mm.attr["transpose_a"].b = False
    mm.experimental_debug_info.original_node_names.append("dense/MatMul")
    fn = graph.library.function.add()
    fn.signature.name = "double_it"
    fn.signature.input_arg.add(name="v", type=proto.DataType.DT_FLOAT)
    fn.ret["out"] = "mul:z:0"
    fn.arg_attr[0].attr["_user_specified_name"].s = b"v"
    data = proto.encode(graph)

    back = tf.call("parse", type_name="tensorflow.GraphDef", data=pack(data))
    assert not back["unknown_fields"]
    assert unpack(back["deterministic"]) == data
    assert 'original_node_names: "dense/MatMul"' in back["text"]
    assert "size: -1" in back["text"]
    [theirs] = tf.call("make_ndarray", protos=[pack(proto.encode(w.attr["value"].tensor))])
    assert unpack_array(theirs).tobytes() == weights.tobytes()


def make_xspace(rng):
    m = proto.messages()
    space = m.XSpace(hostnames=["host-a"], warnings=["a plugin was slow"])
    plane = space.planes.add(id=1, name="/device:MY_DEVICE:0")
    plane.event_metadata[1].CopyFrom(m.XEventMetadata(id=1, name="MatMul", display_name="mm",
                                                      child_id=[2]))
    plane.event_metadata[2].CopyFrom(m.XEventMetadata(id=2, name="copy", metadata=b"\x00\x01"))
    for i, name in enumerate(["bytes", "shape", "flops", "ratio", "raw", "kind"], start=1):
        plane.stat_metadata[i].CopyFrom(m.XStatMetadata(id=i, name=name, description=name))
    plane.stats.add(metadata_id=6, ref_value=2)
    line = plane.lines.add(id=7, display_id=1, name="stream 0", display_name="s0",
                           timestamp_ns=1_700_000_000_000_000_000, duration_ps=10**9)
    offset = 0
    for _ in range(20):
        duration = int(rng.integers(1, 10**6))
        event = line.events.add(metadata_id=int(rng.integers(1, 3)), offset_ps=offset,
                                duration_ps=duration)
        event.stats.add(metadata_id=1, uint64_value=int(rng.integers(0, 2**63)))
        event.stats.add(metadata_id=2, str_value="[2, 3]")
        event.stats.add(metadata_id=3, int64_value=-int(rng.integers(0, 2**62)))
        event.stats.add(metadata_id=4, double_value=float(rng.random()))
        event.stats.add(metadata_id=5, bytes_value=rng.bytes(5))
        offset += duration
    plane.lines.add(id=8, name="counts").events.add(metadata_id=1, num_occurrences=42)
    return space


def test_xspace_written_here_parses_in_tensorflow(tf, rng):
    space = make_xspace(rng)
    data = proto.encode(space)
    back = tf.call("parse", type_name="tensorflow.profiler.XSpace", data=pack(data))
    assert not back["unknown_fields"]
    assert unpack(back["deterministic"]) == data
    assert "num_occurrences: 42" in back["text"] and "ref_value: 2" in back["text"]
    assert proto.decode(proto.XSpace, unpack(back["deterministic"])) == space


# ------------------------------------------------------------------ TensorProto helpers

SHAPES = [(), (1,), (7,), (2, 3, 4), (0, 3)]


def random_array(rng, dtype: pg.DType, shape) -> np.ndarray:
    np_dtype = dtype.as_numpy_dtype
    if dtype.is_bool:
        return rng.random(shape) < 0.5
    if dtype.is_integer:
        info = np.iinfo(np_dtype)
        return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=np_dtype)
    values = rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 4, size=shape)
    if dtype.is_complex:
        values = values + 1j * rng.standard_normal(shape)
    values = np.asarray(values).astype(np_dtype)
    if values.size > 3:  # special values survive too
        values.reshape(-1)[:3] = [np.inf, -np.inf, np.nan]
    return values


def same(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal dtype, shape and bits (NaNs included)."""
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("dtype", pg.dtypes.ALL, ids=lambda d: d.name)
def test_tensor_protos_round_trip_every_dtype(rng, dtype):
    for shape in SHAPES:
        array = np.asarray(random_array(rng, dtype, shape))
        message = proto.to_tensor_proto(array)
        assert proto.from_datatype(message.dtype) is dtype
        assert proto.from_shape_proto(message.tensor_shape) == shape
        wire = proto.decode(proto.TensorProto, proto.encode(message))
        assert same(proto.from_tensor_proto(wire), array), (shape, rng.seed_text)
    # A single value fills the shape and is stored once.
    value = random_array(rng, dtype, ())
    filled = proto.to_tensor_proto(value, shape=[2, 5])
    assert not filled.tensor_content
    assert same(proto.from_tensor_proto(filled), np.full((2, 5), value, dtype.as_numpy_dtype))


def test_tensor_protos_match_make_tensor_proto_and_make_ndarray(tf, rng):
    cases = [(random_array(rng, d, s), None) for d in pg.dtypes.ALL for s in SHAPES]
    cases += [(random_array(rng, d, ()), [3, 2]) for d in pg.dtypes.ALL]
    cases = [(np.asarray(a), s) for a, s in cases]
    theirs = tf.call("make_tensor_proto", items=[
        dict(array=pack_array(a), **({"shape": s} if s else {})) for a, s in cases])
    ours = [proto.to_tensor_proto(a, shape=s) for a, s in cases]
    for (array, shape), mine, data in zip(cases, ours, theirs):
        assert proto.encode(mine) == unpack(data), (array.dtype, array.shape, shape,
                                                   rng.seed_text)
    read_by_tf = tf.call("make_ndarray", protos=[pack(proto.encode(p)) for p in ours])
    for (array, shape), mine, packed in zip(cases, ours, read_by_tf):
        assert same(unpack_array(packed), proto.from_tensor_proto(mine)), rng.seed_text


TYPED_FIELD = {"float32": "float_val", "float64": "double_val", "int64": "int64_val",
               "int32": "int_val", "int16": "int_val", "int8": "int_val", "uint8": "int_val",
               "bool": "bool_val", "float16": "half_val", "bfloat16": "half_val",
               "uint32": "uint32_val", "uint64": "uint64_val", "complex64": "scomplex_val",
               "complex128": "dcomplex_val"}


def test_partly_filled_typed_values_read_as_tensorflow_reads_them(tf, rng):
    """Fewer typed values than elements: the last one repeats; none: zeros."""
    protos = []
    for dtype in pg.dtypes.ALL:
        for given in (0, 1, 3):
            values = random_array(rng, dtype, (given,))
            if TYPED_FIELD[dtype.name] == "half_val":
                values = values.view(np.uint16)
            if dtype.is_complex:   # (real, imaginary) pairs
                values = values.view(dtype.real_dtype.as_numpy_dtype)
            protos.append(proto.TensorProto(
                dtype=proto.to_datatype(dtype), tensor_shape=proto.to_shape_proto((2, 3)),
                **{TYPED_FIELD[dtype.name]: values.tolist()}))
    theirs = tf.call("make_ndarray", protos=[pack(proto.encode(p)) for p in protos])
    for message, packed in zip(protos, theirs):
        got = proto.from_tensor_proto(message)
        assert got.shape == (2, 3)
        assert same(got, unpack_array(packed)), (message, rng.seed_text)


def test_tensor_proto_conversions_follow_pg_constant():
    assert proto.from_tensor_proto(proto.to_tensor_proto(1.5)).dtype == np.float32
    assert proto.from_tensor_proto(proto.to_tensor_proto([1, 2])).dtype == np.int32
    assert proto.from_tensor_proto(proto.to_tensor_proto(2**40)).dtype == np.int64
    tensor = pg.constant(np.arange(6, dtype=np.float16).reshape(2, 3))
    assert same(proto.from_tensor_proto(proto.to_tensor_proto(tensor)), tensor.numpy())
    as_int8 = proto.to_tensor_proto([1.0, -2.0], dtype=pg.int8)
    assert same(proto.from_tensor_proto(as_int8), np.array([1, -2], np.int8))
    reshaped = proto.to_tensor_proto(np.arange(6, dtype=np.int64), shape=(3, 2))
    assert proto.from_tensor_proto(reshaped).shape == (3, 2)


def test_string_tensor_protos_match_tensorflows(tf, rng):
    words = np.array(["".join(rng.choice(list("abc"), rng.integers(0, 4))) for _ in range(6)])
    arrays = [words.reshape(2, 3), words[:1].reshape(()), words[:0]]
    theirs = tf.call("make_tensor_proto", items=[{"array": pack_array(
        np.char.encode(a, "utf-8"))} for a in arrays])
    ours = [proto.to_tensor_proto(a).SerializeToString() for a in arrays]
    assert ours == [unpack(t) for t in theirs]
    filled = proto.to_tensor_proto(words[0], shape=[2, 2])
    back = proto.from_tensor_proto(filled)
    assert back.dtype == object and back.tolist() == [[words[0].encode()] * 2] * 2
    for a, t in zip(arrays, theirs):
        read = proto.from_tensor_proto(proto.messages().TensorProto.FromString(unpack(t)))
        assert read.shape == a.shape and read.tolist() == np.char.encode(a, "utf-8").tolist()


def test_bad_tensor_values_and_protos_give_typed_errors():
    m = proto.messages()
    with pytest.raises(pg.errors.InvalidArgumentError, match="cannot fill a tensor of shape"):
        proto.to_tensor_proto(np.zeros(4), shape=[3])
    with pytest.raises(pg.errors.InvalidArgumentError, match="fully known shape"):
        proto.to_tensor_proto(1.0, shape=[-1])
    with pytest.raises(TypeError, match="not a supported dtype|cannot make a tensor"):
        proto.to_tensor_proto(np.array(["2020-01-01"], "datetime64[D]"))

    def tensor(**fields):
        return m.TensorProto(tensor_shape=proto.to_shape_proto(fields.pop("shape")), **fields)

    cases = [
        (tensor(dtype=1, shape=(2, 2), tensor_content=b"\x00" * 15), "15 bytes"),
        (tensor(dtype=1, shape=(2,), float_val=[1.0, 2.0, 3.0]), "at most 2 fit"),
        (tensor(dtype=1, shape=(None, 2)), "fully known"),
        (m.TensorProto(dtype=1, tensor_shape=m.TensorShapeProto(unknown_rank=True)),
         "unknown rank"),
    ]
    for bad, words in cases:
        with pytest.raises(pg.errors.InvalidArgumentError, match=words):
            proto.from_tensor_proto(bad)
    with pytest.raises(pg.errors.UnimplementedError, match=r"DT_VARIANT \(21\) has no pluggable"):
        proto.from_tensor_proto(m.TensorProto(dtype=21))
    with pytest.raises(pg.errors.InvalidArgumentError, match="pairs"):
        proto.from_tensor_proto(tensor(dtype=8, shape=(2,), scomplex_val=[1.0, 2.0, 3.0]))


def test_datatype_mapping():
    names = {"bool": "DT_BOOL", "int8": "DT_INT8", "uint8": "DT_UINT8", "int16": "DT_INT16",
             "int32": "DT_INT32", "int64": "DT_INT64", "float16": "DT_HALF",
             "bfloat16": "DT_BFLOAT16", "float32": "DT_FLOAT", "float64": "DT_DOUBLE",
             "uint32": "DT_UINT32", "uint64": "DT_UINT64", "complex64": "DT_COMPLEX64",
             "complex128": "DT_COMPLEX128"}
    data_type = proto.DataType
    for d in pg.dtypes.ALL:
        assert data_type.Name(proto.to_datatype(d)) == names[d.name]
        assert proto.from_datatype(data_type.Value(names[d.name])) is d
    assert proto.to_datatype("float") == data_type.DT_FLOAT
    assert proto.to_datatype(np.dtype(np.int16)) == data_type.DT_INT16
    with pytest.raises(pg.errors.UnimplementedError, match="DT_FLOAT_REF"):
        proto.from_datatype(data_type.DT_FLOAT_REF)
    with pytest.raises(pg.errors.InvalidArgumentError, match="999 is not a DataType"):
        proto.from_datatype(999)
    with pytest.raises(TypeError):
        proto.to_datatype("complex256")


def test_shape_conversions():
    assert proto.from_shape_proto(proto.to_shape_proto(None)) is None
    assert proto.from_shape_proto(proto.to_shape_proto(())) == ()
    assert proto.from_shape_proto(proto.to_shape_proto([None, 3, -1])) == (None, 3, None)
    assert proto.to_shape_proto([None, 3]).dim[0].size == -1
    with pytest.raises(pg.errors.InvalidArgumentError, match="-2"):
        proto.to_shape_proto([2, -2])
    bad = proto.TensorShapeProto(unknown_rank=True)
    bad.dim.add(size=3)
    with pytest.raises(pg.errors.InvalidArgumentError, match="unknown_rank"):
        proto.from_shape_proto(bad)
    with pytest.raises(pg.errors.InvalidArgumentError, match="-5"):
        proto.from_shape_proto(proto.TensorShapeProto(dim=[proto.TensorShapeProto.Dim(size=-5)]))


# ------------------------------------------------------------------ corrupt bytes

def test_corrupt_bytes_give_a_data_loss_error(rng):
    graph = proto.GraphDef()
    node = graph.node.add(name="c", op="Const")
    node.attr["value"].tensor.CopyFrom(proto.to_tensor_proto(rng.standard_normal(64)))
    data = proto.encode(graph)
    corrupt = [
        (proto.GraphDef, data[:len(data) // 2]),                    # truncated
        (proto.GraphDef, b"\x0f\x01\x02"),                          # wire type 7
        (proto.GraphDef, b"\x08" + b"\xff" * 11),                    # varint too long
        (proto.GraphDef, b"\x0a\xff\x01abc"),                        # length past the end
        (proto.NodeDef, proto.encode(proto.NodeDef(name="x"))[:-1] + b"\xff"),  # bad UTF-8
        (proto.FullTypeDef, nested_full_type(300)),  # deeper than protobuf allows
    ]
    for message_type, bad in corrupt:
        name = message_type.DESCRIPTOR.name
        with pytest.raises(pg.errors.DataLossError,
                           match=f"cannot parse a {name} from model.pb .{len(bad)} bytes") as info:
            proto.decode(message_type, bad, source="model.pb")
        assert info.value.code == 15
        assert f"not a serialised {name}" in str(info.value)


def nested_full_type(depth: int) -> bytes:
    """A FullTypeDef whose `args` (field 2) nest `depth` levels deep."""
    data = b""
    for _ in range(depth):
        data = b"\x12" + varint(len(data)) + data
    return data


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append(n & 0x7F | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def test_decode_strict_refuses_unknown_fields():
    unknown_only = b"\xf8\x06\x01"  # field 111, varint 1: no GraphDef has it
    lenient = proto.decode(proto.GraphDef, unknown_only)
    assert lenient.ListFields() == [] and proto.encode(lenient) == unknown_only  # kept
    with pytest.raises(pg.errors.DataLossError, match="fields a GraphDef does not have"):
        proto.decode(proto.GraphDef, unknown_only, strict=True)
    with pytest.raises(pg.errors.InvalidArgumentError, match="expected bytes, got str"):
        proto.decode(proto.GraphDef, "not bytes")


def test_the_value_of_a_node_without_one_is_named_as_such():
    """A Placeholder has no 'value' attribute; reading it through the proto
    map gives an empty TensorProto, which is refused as empty, not as a
    DT_INVALID tensor."""
    graph = proto.decode(proto.GraphDef, (ROOT / "examples" / "frozen_mlp.pb").read_bytes(),
                         source="frozen_mlp.pb")
    placeholder = next(n for n in graph.node if n.op == "Placeholder")
    with pytest.raises(pg.errors.InvalidArgumentError, match="TensorProto is empty.*Placeholder"):
        proto.from_tensor_proto(placeholder.attr["value"].tensor)
    const = next(n for n in graph.node if n.op == "Const")
    assert proto.from_tensor_proto(const.attr["value"].tensor).size > 0
