"""Models written by PyTorch's real exporters (``tests/data/exported/``, made by
``tools/onnx_models/export_models.py``): a ResNet, a MobileNetV3, BERT, GPT-2,
ViT and a two-layer LSTM, tiny and with random weights, each exported by the
TorchScript exporter (opset 17) and by the dynamo exporter (opsets 20 and 25),
and the ResNet and LSTM once more with their blocks as ONNX local functions
(TorchScript's ``export_modules_as_functions``), which the importer inlines.

Every file runs through ``pg.onnx.import_model`` on CPU, MY_DEVICE and the
GPU (where one is listed) on fresh random inputs of a batch (and, for the
text models and the LSTM, a sequence length) other than the export's, so
the dynamic axes are exercised, against onnxruntime's CPU provider. On a
plugin device no kernel of another device may run during the call: the
device does all the work. The manifest's digests must match the files, and
the ResNet, BERT and GPT-2 exports also run through ONNX Runtime with the
pluggable execution provider (the bridge) against ORT CPU."""
from __future__ import annotations

import collections
import hashlib
import json
import pathlib
import textwrap
import zlib

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="ONNX models are read with the onnx package "
                                          "(the onnx extra)")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the reference (a test extra)")

import pluggable as pg  # noqa: E402
from onnx_helpers import ran_elsewhere, run_checked  # noqa: E402

DATA = pathlib.Path(__file__).resolve().parent / "data" / "exported"
MANIFEST = json.loads((DATA / "MANIFEST.json").read_text())["models"]
FILES = sorted(MANIFEST)
FAMILIES = {"resnet", "mobilenet", "bert", "gpt2", "vit", "lstm"}
EXPORTS = {("torchscript", 17), ("dynamo", 20), ("dynamo", 25)}
AS_FUNCTIONS = {"resnet": ["torchvision.models.resnet::BasicBlock",
                           "torchvision.models.resnet::BasicBlock.1"],
                "lstm": ["torch.nn.modules.linear::Linear", "torch.nn.modules.rnn::LSTM"]}
# The sizes a test feeds on the dynamic axes: the exports ran at batch 2 and
# sequence 7 (text) or 5 (LSTM).
RUN_SIZES = {"batch": 3, "sequence": 11}
RTOL, ATOL = 1e-3, 1e-5   # outputs are of order 0.1 to 3; float32 sums differ near 1e-6
# The kernels that carry each family's work; at least one must run on the device.
WORK = {"resnet": ("Conv2D", "_FusedConv2D"), "mobilenet": ("Conv2D", "_FusedConv2D",
                                                            "DepthwiseConv2dNative"),
        "bert": ("BatchMatMulV2", "MatMul"), "gpt2": ("BatchMatMulV2", "MatMul"),
        "vit": ("BatchMatMulV2", "MatMul"), "lstm": ("MatMul",)}


def _has(kind: str) -> bool:
    return any(d.device_type == kind for d in pg.list_physical_devices())


def _rng(*key) -> np.random.Generator:
    """A generator seeded by the test's parameters (a failure can be replayed)."""
    return np.random.default_rng(zlib.crc32("/".join(map(str, key)).encode()))


def _feeds(entry: dict, rng: np.random.Generator) -> dict:
    """Random inputs for a manifest entry: dynamic axes at RUN_SIZES, token
    ids within the vocabulary, attention masks that keep a random-length
    prefix of each sequence (at least one token), token types 0 or 1."""
    out = {}
    for i in entry["inputs"]:
        shape = tuple(RUN_SIZES[d] if isinstance(d, str) else d for d in i["shape"])
        if i["name"] == "attention_mask":
            keep = rng.integers(1, shape[1] + 1, shape[0])
            x = (np.arange(shape[1])[None, :] < keep[:, None]).astype(i["dtype"])
        elif "range" in i:
            x = rng.integers(*i["range"], shape).astype(i["dtype"])
        else:
            x = rng.standard_normal(shape).astype(i["dtype"])
        out[i["name"]] = x
    return out


def _ort_cpu(path: pathlib.Path, feeds: dict) -> dict:
    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))


# ================================================================ the manifest

def test_the_suite_has_every_family_from_every_exporter():
    got = collections.Counter((e["model"], e["exporter"], e["opset"], tuple(e["functions"]))
                              for e in MANIFEST.values())
    want = {(m, x, o, ()) for m in FAMILIES for x, o in EXPORTS} | {
        (m, "torchscript", 17, tuple(f)) for m, f in AS_FUNCTIONS.items()}
    assert set(got) == want and max(got.values()) == 1, sorted(set(got) ^ want)
    on_disk = sorted(p.name for p in DATA.glob("*.onnx"))
    assert on_disk == FILES, "files without a manifest entry, or entries without a file"
    sizes = [(DATA / f).stat().st_size for f in FILES]
    assert max(sizes) < 400_000 and sum(sizes) < 4_000_000, dict(zip(FILES, sizes))


@pytest.mark.parametrize("name", FILES)
def test_manifest_describes_the_file(name):
    e = MANIFEST[name]
    data = (DATA / name).read_bytes()
    assert hashlib.sha256(data).hexdigest() == e["sha256"], \
        f"{name} differs from the one the manifest records: regenerate both with " \
        "tools/onnx_models/export_models.py"
    assert len(data) == e["bytes"]
    m = onnx.load_from_string(data)
    assert {o.domain: o.version for o in m.opset_import}[""] == e["opset"]
    assert m.producer_name == "pytorch"
    inputs = [(v.name, onnx.helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type).name,
               [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim])
              for v in m.graph.input]
    assert inputs == [(i["name"], i["dtype"], i["shape"]) for i in e["inputs"]]
    assert [o.name for o in m.graph.output] == e["outputs"]
    assert sorted(f"{f.domain}::{f.name}" for f in m.functions) == e["functions"]
    if e["functions"]:   # the graph calls them
        assert {f"{n.domain}::{n.op_type}" for n in m.graph.node} & set(e["functions"])
    # the batch axis is dynamic in every export
    assert all(i["shape"][0] == "batch" for i in e["inputs"]), e["inputs"]


# ================================================================ pg.onnx

DEVICES = [pytest.param("CPU:0", id="CPU"), pytest.param("MY_DEVICE:0", id="MY_DEVICE"),
           pytest.param("GPU:0", id="GPU", marks=pytest.mark.skipif(
               not _has("GPU"), reason="no GPU device is listed (the CUDA plugin is not "
                                       "installed, or there is no GPU)"))]


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("name", FILES)
def test_exported_model_matches_onnxruntime(name, dev):
    e = MANIFEST[name]
    path = DATA / name
    pm = pg.onnx.import_model(path)
    # the symbolic axes are open (None) to pluggable, the rest as exported
    assert [v.name for v in pm.inputs] == [i["name"] for i in e["inputs"]]
    assert [v.shape for v in pm.inputs] == [
        tuple(None if isinstance(d, str) else d for d in i["shape"]) for i in e["inputs"]]
    feeds = _feeds(e, _rng(name, dev))
    assert next(iter(feeds.values())).shape[0] != e["export_batch"]
    out, ran = run_checked(pm, feeds, dev)
    ref = _ort_cpu(path, feeds)
    assert list(out) == list(ref) == e["outputs"]
    for k, r in ref.items():
        assert np.isfinite(r).all() and np.std(r) > 1e-3, f"{name}: {k} tells nothing"
        assert out[k].shape == r.shape and out[k].dtype == r.dtype, (k, out[k].shape, r.shape)
        np.testing.assert_allclose(out[k], r, rtol=RTOL, atol=ATOL,
                                   err_msg=f"{name} output {k!r} on {dev}")
    if dev != "CPU:0":
        kind = dev.split(":")[0]
        elsewhere = ran_elsewhere(ran, dev)
        assert not elsewhere, f"{name} on {dev}: kernels ran elsewhere: {elsewhere}"
        work = WORK[e["model"]]
        assert sum(ran.get((op, kind), 0) for op in work) > 0, \
            f"{name} on {dev}: none of {work} ran there: {sorted(ran)}"


def test_a_second_batch_size_builds_a_second_graph_with_the_same_weights():
    """One imported model fed batches 1 and 4 in turn: each size is its own
    graph, and each row of the batch-4 result equals that row run alone."""
    name = "bert_dynamo_opset25.onnx"
    pm = pg.onnx.import_model(DATA / name)
    rng = _rng(name, "batches")
    big = _feeds(MANIFEST[name], rng)
    big = {k: np.concatenate([v, v[:1]]) for k, v in big.items()}     # batch 4
    with pg.device("MY_DEVICE:0"):
        whole = pm(big)["last_hidden_state"].numpy()
        for row in (0, 3):
            one = pm({k: v[row:row + 1] for k, v in big.items()})["last_hidden_state"].numpy()
            np.testing.assert_allclose(one[0], whole[row], rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(whole, _ort_cpu(DATA / name, big)["last_hidden_state"],
                               rtol=RTOL, atol=ATOL)


# ================================================================ the ORT bridge

# Op types the bridge's table does not run (left to ORT's CPU EP): shape
# plumbing (a Reshape to a computed shape, Shape, Slice, Range, Expand),
# index ops and the boolean mask arithmetic of the transformer exports
# (Gather, Reshape and Flatten of bool). The fused
# nodes ORT offers back after inlining the Attention functions of opset 25
# are "another domain" too.
BRIDGE_LEAVES = {"And", "Equal", "Expand", "Flatten", "Gather", "GatherND", "GreaterOrEqual",
                 "IsNaN", "LessOrEqual", "Max", "Mod", "Not", "Pad", "Range", "ReduceMax",
                 "Reshape", "Shape", "Slice", "Split"}
# Op types whose nodes all run on the plugin whenever a model has them.
BRIDGE_RUNS = {"MatMul", "Gemm", "Conv", "Relu", "Add", "Sub", "Mul", "Div", "Softmax", "Tanh",
               "Sqrt", "MaxPool", "Transpose", "Erf", "Pow", "Cast", "Where", "Unsqueeze",
               "Squeeze", "ReduceMean", "Gelu", "LayerNormalization"}

def _ort_keeps_attention() -> bool:
    """Whether the installed onnxruntime runs ONNX's Attention (opset 23) as
    one node of its own rather than inlining its function body, so that the
    bridge is offered the Attention node itself (1.30 does; 1.32 inlines it)."""
    import onnxruntime
    major, minor = (int(v) for v in onnxruntime.__version__.split(".")[:2])
    return (major, minor) < (1, 32)


BRIDGE = """
    import collections, re
    import onnx
    mp = onnx.load(path)
    m = mp.SerializeToString()
    bridge.pg_ort_unclaimed_report.restype = ctypes.c_char_p
    inputs = json.loads(inputs)

    def feeds():
        out = {}
        for name, dtype, shape, lo, hi in inputs:
            if name == "attention_mask":
                keep = rng.integers(1, shape[1] + 1, shape[0])
                out[name] = (np.arange(shape[1])[None, :] < keep[:, None]).astype(dtype)
            elif lo is not None:
                out[name] = rng.integers(lo, hi, shape).astype(dtype)
            else:
                out[name] = rng.standard_normal(shape).astype(dtype)
        return out

    r = compare(m, feeds, runs=2)
    lines = bridge.pg_ort_unclaimed_report().decode().splitlines()
    r["unclaimed"] = sorted({re.match(r"pluggable: node '.*' \\((\\w+)\\)", l).group(1)
                             for l in lines if not re.search(r"\\(pluggable_\\w+\\)", l)})
    r["ops"] = dict(collections.Counter(n.op_type for n in mp.graph.node))
    print(json.dumps(r))
"""


@pytest.mark.parametrize("name", [f for f in FILES if MANIFEST[f]["model"] in
                                  ("resnet", "bert", "gpt2")])
def test_exported_model_through_the_ort_bridge_matches_ort_cpu(name):
    """ONNX Runtime with the pluggable EP on MY_DEVICE: the outputs equal
    ORT CPU's on fresh random inputs (batch 3), the plugin's kernels run
    every compute node (matrix products, convolutions, activations,
    element-wise math, softmax), and what is left to the CPU EP is only
    the op types the bridge's table lacks. The ResNets run whole as one
    partition (the dynamo ones' global average pool is a ReduceMean)."""
    test_ort_bridge = pytest.importorskip("test_ort_bridge", reason="the bridge's test helpers")
    e = MANIFEST[name]
    sizes = dict(RUN_SIZES, sequence=6)
    inputs = [(i["name"], i["dtype"], [sizes[d] if isinstance(d, str) else d for d in i["shape"]],
               *(i.get("range") or (None, None))) for i in e["inputs"]]
    out = test_ort_bridge.graphs_child(f"path = {str(DATA / name)!r}\n"
                                       f"inputs = {json.dumps(inputs)!r}\n"
                                       + textwrap.dedent(BRIDGE))
    assert out["same"] and out["err"] < 1e-4, out
    unclaimed = set(out["unclaimed"])
    leaves = set(BRIDGE_LEAVES)
    if _ort_keeps_attention():
        leaves.add("Attention")   # a node of ORT's own, not inlined: the table has no row
    assert unclaimed <= leaves, sorted(unclaimed - leaves)
    assert not unclaimed & BRIDGE_RUNS, sorted(unclaimed & BRIDGE_RUNS)
    products = out["ops"].get("MatMul", 0) + out["ops"].get("Gemm", 0) + out["ops"].get("Conv", 0)
    assert products > 0
    assert all(run["kernel_runs"] >= products for run in out["per_run"]), out
    if e["model"] == "resnet":
        assert out["compiled"]["partitions_compiled"] == 1 and not unclaimed, out
