"""Export the small ONNX models of ``tests/data/exported/`` with PyTorch's own
exporters, for ``tests/test_onnx_exported.py``.

Six architectures, each built with a fixed seed and random weights at a tiny
size (a few thousand to a few tens of thousands of parameters), each exported
three times: by the TorchScript-based exporter (``torch.onnx.export(...,
dynamo=False)``, opset 17) and by the dynamo-based one (``dynamo=True``)
at opsets 20 and 25; the ResNet and the LSTM once more by the TorchScript
exporter with their blocks as ONNX local functions. The batch axis is
dynamic in every export (the sequence axis too for the text models and
the LSTM). ``MANIFEST.json`` beside the models
records, per file, the model, exporter, opset, the versions of torch,
transformers, torchvision and onnx that made it, its inputs (names, shapes
with the dynamic axes named, dtypes, the value range of token ids), the
batch it was exported at, and its sha256.

The project does not depend on torch: the models are generated once and
shipped. To regenerate them (the same versions give the same bytes; other
versions may change the graphs, which the manifest then records)::

    python3 -m venv ~/torchenv          # any folder outside the tree
    ~/torchenv/bin/pip install torch torchvision transformers onnx onnxscript onnxruntime numpy
    ~/torchenv/bin/python tools/onnx_models/export_models.py [--out DIR] [--only NAME ...]

Each exported model is checked against the PyTorch module with
onnxruntime before it is written, and node metadata (the exporters' stack
traces and source paths) is dropped so the files do not depend on where the
script ran.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib
import io
import json
import pathlib
import sys
import warnings

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "data" / "exported"
SEED = 20261204
# (exporter, opset): the TorchScript exporter at 17; the dynamo exporter
# at 20 and at 25, the newest it writes that onnxruntime 1.32 loads (at 26
# onnxruntime refuses its Attention node). From 23 on it writes
# scaled_dot_product_attention as Attention and the GELU as Gelu.
EXPORTS = [("torchscript", 17), ("dynamo", 20), ("dynamo", 25)]
# Models also exported by the TorchScript exporter with these module classes
# as ONNX local functions (``export_modules_as_functions``): each call of a
# module is a node of the function's (domain, name), its body in
# ``model.functions``.
AS_FUNCTIONS = {"resnet": ("torchvision.models.resnet", "BasicBlock"),
                "lstm": ("torch.nn", "LSTM", "Linear")}


# ================================================================ the models
# Each builder returns (module, example inputs {name: array}, dynamic axes
# {input name: {axis: name}}, output names, extra manifest fields).

def resnet():
    """A ResNet: torchvision's BasicBlock (3x3 convs, BatchNorm, identity and
    1x1 strided downsample shortcuts) behind a stem, global average pool, Linear."""
    import torch
    from torch import nn
    from torchvision.models.resnet import BasicBlock

    def down(cin, cout):
        return nn.Sequential(nn.Conv2d(cin, cout, 1, stride=2, bias=False), nn.BatchNorm2d(cout))

    class TinyResNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False),
                                      nn.BatchNorm2d(8), nn.ReLU(inplace=True),
                                      nn.MaxPool2d(3, stride=2, padding=1))
            self.layers = nn.Sequential(BasicBlock(8, 8), BasicBlock(8, 16, 2, down(8, 16)),
                                        BasicBlock(16, 24, 2, down(16, 24)))
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(24, 10)

        def forward(self, x):
            return self.fc(torch.flatten(self.pool(self.layers(self.stem(x))), 1))

    m = TinyResNet()
    _randomize_batchnorm(m)
    x = np.random.default_rng(SEED).standard_normal((2, 3, 32, 32)).astype(np.float32)
    return m, {"image": x}, {"image": {0: "batch"}}, ["logits"], {}


def mobilenet():
    """torchvision's MobileNetV3 (inverted residuals, depthwise convs,
    squeeze-excitation with Hardsigmoid, Hardswish) with three tiny blocks."""
    from torchvision.models.mobilenetv3 import InvertedResidualConfig, MobileNetV3

    cfg = [InvertedResidualConfig(8, 3, 16, 8, True, "RE", 2, 1, 1.0),
           InvertedResidualConfig(8, 3, 24, 12, False, "RE", 2, 1, 1.0),
           InvertedResidualConfig(12, 5, 32, 16, True, "HS", 1, 1, 1.0)]
    m = MobileNetV3(cfg, last_channel=32, num_classes=10)
    _randomize_batchnorm(m)
    for mod in m.classifier:   # torchvision draws these from N(0, 0.01): logits near 0
        if hasattr(mod, "reset_parameters"):
            mod.reset_parameters()
    x = np.random.default_rng(SEED + 1).standard_normal((2, 3, 32, 32)).astype(np.float32)
    return m, {"image": x}, {"image": {0: "batch"}}, ["logits"], {}


VOCAB = 96


def _text_inputs(seed, batch=2, seq=7, types=True):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, VOCAB, (batch, seq), dtype=np.int64)
    mask = np.ones((batch, seq), np.int64)
    mask[1, seq - 2:] = 0      # padding in the second sequence
    out = {"input_ids": ids, "attention_mask": mask}
    if types:
        t = np.zeros((batch, seq), np.int64)
        t[:, seq // 2:] = 1
        out["token_type_ids"] = t
    return out


def bert():
    """transformers' BertModel: two layers, hidden 32, four heads."""
    import torch
    from transformers import BertConfig, BertModel

    cfg = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                     num_attention_heads=4, intermediate_size=64, max_position_embeddings=32,
                     type_vocab_size=2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    m = BertModel(cfg, add_pooling_layer=True)

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = m

        def forward(self, input_ids, attention_mask, token_type_ids):
            o = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                          token_type_ids=token_type_ids, return_dict=True)
            return o.last_hidden_state, o.pooler_output

    feeds = _text_inputs(SEED + 2)
    dyn = {k: {0: "batch", 1: "sequence"} for k in feeds}
    return Wrapped(), feeds, dyn, ["last_hidden_state", "pooler_output"], \
        {"vocab_size": VOCAB, "max_sequence": 32}


def gpt2():
    """transformers' GPT2LMHeadModel (causal self-attention, tied LM head):
    two layers, hidden 32, four heads, no KV cache."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2, n_head=4,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False,
                     bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1)
    m = GPT2LMHeadModel(cfg)

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gpt2 = m

        def forward(self, input_ids, attention_mask):
            return self.gpt2(input_ids=input_ids, attention_mask=attention_mask,
                             use_cache=False, return_dict=True).logits

    feeds = _text_inputs(SEED + 3, types=False)
    dyn = {k: {0: "batch", 1: "sequence"} for k in feeds}
    return Wrapped(), feeds, dyn, ["logits"], {"vocab_size": VOCAB, "max_sequence": 32}


def vit():
    """transformers' ViTModel: 16x16 images in 4x4 patches, two layers,
    hidden 32, four heads, with the pooler."""
    import torch
    from transformers import ViTConfig, ViTModel

    cfg = ViTConfig(image_size=16, patch_size=4, num_channels=3, hidden_size=32,
                    num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                    hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    m = ViTModel(cfg, add_pooling_layer=True)

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.vit = m

        def forward(self, pixel_values):
            o = self.vit(pixel_values=pixel_values, return_dict=True)
            return o.last_hidden_state, o.pooler_output

    x = np.random.default_rng(SEED + 4).standard_normal((2, 3, 16, 16)).astype(np.float32)
    return Wrapped(), {"pixel_values": x}, {"pixel_values": {0: "batch"}}, \
        ["last_hidden_state", "pooler_output"], {}


def lstm():
    """torch.nn.LSTM (two layers, batch first) and a Linear on its last step."""
    import torch
    from torch import nn

    class Tagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(input_size=8, hidden_size=16, num_layers=2, batch_first=True)
            self.head = nn.Linear(16, 4)

        def forward(self, x):
            y, _ = self.lstm(x)
            return self.head(y[:, -1])

    x = np.random.default_rng(SEED + 5).standard_normal((2, 5, 8)).astype(np.float32)
    return Tagger(), {"x": x}, {"x": {0: "batch", 1: "sequence"}}, ["scores"], {}


MODELS = {"resnet": resnet, "mobilenet": mobilenet, "bert": bert, "gpt2": gpt2, "vit": vit,
          "lstm": lstm}


def _randomize_batchnorm(m):
    """Random running statistics and affine parameters for every BatchNorm
    (fresh modules have mean 0, variance 1: folding them would test nothing)."""
    import torch
    g = torch.Generator().manual_seed(SEED)
    for mod in m.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            n = mod.num_features
            with torch.no_grad():
                mod.running_mean.copy_(torch.randn(n, generator=g) * 0.1)
                mod.running_var.copy_(torch.rand(n, generator=g) + 0.5)
                mod.weight.copy_(torch.rand(n, generator=g) + 0.5)
                mod.bias.copy_(torch.randn(n, generator=g) * 0.1)


# ================================================================ exporting

def _export(module, feeds, dyn, outputs, exporter, opset, functions=()):
    import onnx
    import torch
    args = tuple(torch.from_numpy(v) for v in feeds.values())
    names = list(feeds)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "torchscript":
            buf = io.BytesIO()
            torch.onnx.export(module, args, buf, dynamo=False, opset_version=opset,
                              input_names=names, output_names=outputs,
                              dynamic_axes=dyn,   # (the outputs' axes are inferred)
                              export_modules_as_functions=set(functions) or False,
                              do_constant_folding=True)
            model = onnx.load_from_string(buf.getvalue())
        else:
            from torch.export import Dim
            dims = {}
            shapes = tuple({a: dims.setdefault(n, Dim(n, min=1, max=1024) if n == "batch"
                                                else Dim(n, min=2, max=32))
                            for a, n in dyn.get(k, {}).items()} for k in names)
            prog = torch.onnx.export(module, args, dynamo=True, opset_version=opset,
                                     input_names=names, output_names=outputs,
                                     dynamic_shapes=shapes, optimize=True, verbose=False)
            model = prog.model_proto
    return _scrub(model)


def _scrub(model):
    """Drops node metadata and doc strings (source paths, stack traces) and
    keeps the graph as the exporter wrote it."""
    def clean(graph):
        graph.doc_string = ""
        for n in graph.node:
            n.doc_string = ""
            del n.metadata_props[:]
            for a in n.attribute:
                if a.HasField("g"):
                    clean(a.g)
                for sub in a.graphs:
                    clean(sub)
        for v in list(graph.input) + list(graph.output) + list(graph.value_info):
            del v.metadata_props[:]
        for t in graph.initializer:
            del t.metadata_props[:]
        del graph.metadata_props[:]
    clean(model.graph)
    model.doc_string = ""
    del model.metadata_props[:]
    for f in model.functions:
        for n in f.node:
            n.doc_string = ""
            del n.metadata_props[:]
    return model


def _check(model, module, feeds, outputs):
    import onnxruntime as ort
    import torch
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = s.run(None, feeds)
    with torch.no_grad():
        want = module(*[torch.from_numpy(v) for v in feeds.values()])
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want) == len(outputs)
    for g, w, name in zip(got, want, outputs):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-4, atol=1e-5, err_msg=name)


def _inputs(model, feeds, extra):
    import onnx
    out = []
    for v in model.graph.input:
        tt = v.type.tensor_type
        entry = {"name": v.name,
                 "dtype": onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type).name,
                 "shape": [d.dim_value if d.HasField("dim_value") else d.dim_param or None
                           for d in tt.shape.dim]}
        if v.name == "input_ids":
            entry["range"] = [0, extra["vocab_size"]]
        elif v.name in ("attention_mask", "token_type_ids"):
            entry["range"] = [0, 2]
        out.append(entry)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=pathlib.Path, default=OUT)
    ap.add_argument("--only", nargs="*", choices=sorted(MODELS), default=None)
    a = ap.parse_args(argv)
    import onnx
    import torch
    import torchvision
    import transformers
    torch.use_deterministic_algorithms(True)
    a.out.mkdir(parents=True, exist_ok=True)
    manifest_path = a.out / "MANIFEST.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    models = manifest.setdefault("models", {})
    versions = {"torch": torch.__version__, "torchvision": torchvision.__version__,
                "transformers": transformers.__version__, "onnx": onnx.__version__}
    for name in a.only or MODELS:
        runs = [(x, o, ()) for x, o in EXPORTS]
        if name in AS_FUNCTIONS:
            mod, *classes = AS_FUNCTIONS[name]
            runs.append(("torchscript", 17, tuple(getattr(importlib.import_module(mod), c)
                                                  for c in classes)))
        for exporter, opset, functions in runs:
            torch.manual_seed(SEED)
            module, feeds, dyn, outputs, extra = MODELS[name]()
            module.eval()
            model = _export(module, feeds, dyn, outputs, exporter, opset, functions)
            _check(model, module, feeds, outputs)
            data = model.SerializeToString()
            variant = "_functions" if functions else ""
            fname = f"{name}_{exporter}{variant}_opset{opset}.onnx"
            (a.out / fname).write_bytes(data)
            got_opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
            models[fname] = {
                "model": name, "exporter": exporter, "opset": got_opset,
                "functions": sorted(f"{f.domain}::{f.name}" for f in model.functions),
                "versions": versions, "inputs": _inputs(model, feeds, extra),
                "outputs": [o.name for o in model.graph.output],
                "export_batch": int(next(iter(feeds.values())).shape[0]),
                "dynamic_axes": {k: {str(ax): n for ax, n in v.items()} for k, v in dyn.items()},
                "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
            print(f"{fname}: {len(data)} bytes, {len(model.graph.node)} nodes", file=sys.stderr)
    manifest["note"] = ("made by tools/onnx_models/export_models.py; "
                        "tests/test_onnx_exported.py runs every file listed here")
    manifest["models"] = dict(sorted(models.items()))
    manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
