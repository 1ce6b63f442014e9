"""ONNX models exported by torch.onnx, run by pluggable (`pg.onnx.import_model`
on GPU:0), beside PyTorch eager on the same weights and ONNX Runtime on the
execution providers the machine has, in one process.

Models (random weights, float32, eval mode): torchvision's ResNet-50 and a
BERT-base encoder (transformers' BertModel, 12 layers, d_model 768, eager
attention so the export is plain MatMul/Softmax), exported with the
TorchScript-based exporter at opset 17 with a dynamic batch axis (BERT: also
a dynamic sequence axis; measured at sequence 128). For each model and
batch: the outputs of pluggable and ONNX Runtime against PyTorch's (max
relative error over the output's largest magnitude), and the median ms per
call of `--repeats` rounds, the frameworks timed in turns. Inputs are on the
device for pluggable and PyTorch; ONNX Runtime is fed numpy arrays (its
figure includes the copies) unless its CUDA provider is present, where an
IOBinding keeps inputs and outputs on the GPU. Also reported: the import
time of each model (reading the file, then planning).

With `--ort-ep` the same models also run in ONNX Runtime through
pluggable's execution provider (`pluggable.onnx.ort_ep_library()`, the EP
device of `--device`'s plugin, e.g. `pluggable_GPU`), in a child process
(the bridge refuses a process that has pluggable's core loaded), beside
`pg.onnx.import_model` timed the same way: numpy feeds in, numpy outputs
out, so both figures include the host-device copies. Reported: ms per
call, the ratio to import_model's, and the share of the model's nodes the
bridge compiled onto the device (its `pg_ort_nodes_compiled` counter).

usage: python3 benchmarks/onnx_gpu.py [--models resnet50,bert] [--batches 1,32]
       [--repeats 20] [--device GPU:0] [--json PATH] [--tiny] [--kernels CALLS]
       [--ort-ep]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_peers import kernel_table, times_in_turns  # noqa: E402


def export_resnet(path: str, tiny: bool):
    import torch
    import torchvision
    net = (torchvision.models.resnet18 if tiny else torchvision.models.resnet50)(weights=None)
    net = net.eval().cuda()
    x = torch.randn(2, 3, 224, 224, device="cuda")
    torch.onnx.export(net, (x,), path, input_names=["x"], output_names=["logits"], opset_version=17,
                      dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}}, dynamo=False)

    def feeds(batch: int, rng) -> dict:
        return {"x": rng.standard_normal((batch, 3, 224, 224)).astype(np.float32)}
    return net, feeds


def export_bert(path: str, tiny: bool):
    import torch
    from transformers import BertConfig, BertModel
    cfg = (BertConfig(num_hidden_layers=2, hidden_size=128, num_attention_heads=2,
                      intermediate_size=512) if tiny else BertConfig())
    cfg._attn_implementation = "eager"
    bert = BertModel(cfg).eval().cuda()

    class Encoder(torch.nn.Module):   # the two inputs by name, the two outputs as a tuple
        def __init__(self):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask):
            out = self.bert(input_ids=input_ids, attention_mask=attention_mask, return_dict=True)
            return out.last_hidden_state, out.pooler_output

    net = Encoder().eval()
    ids = torch.randint(0, cfg.vocab_size, (2, 128), device="cuda")
    mask = torch.ones(2, 128, dtype=torch.int64, device="cuda")
    torch.onnx.export(net, (ids, mask), path, input_names=["input_ids", "attention_mask"],
                      output_names=["last_hidden_state", "pooler_output"], opset_version=17,
                      dynamic_axes={n: {0: "batch", 1: "seq"} for n in
                                    ("input_ids", "attention_mask", "last_hidden_state")} |
                      {"pooler_output": {0: "batch"}}, dynamo=False)

    def feeds(batch: int, rng) -> dict:
        return {"input_ids": rng.integers(0, cfg.vocab_size, (batch, 128)).astype(np.int64),
                "attention_mask": np.ones((batch, 128), np.int64)}
    return net, feeds


def torch_call(net, feeds: dict):
    import torch
    args = [torch.from_numpy(v).cuda() for v in feeds.values()]

    def call():
        with torch.no_grad():
            out = net(*args)
        return out

    def result():
        out = call()
        first = out[0] if isinstance(out, tuple) else getattr(out, "last_hidden_state", out)
        return first.detach().float().cpu().numpy()

    def timed():
        call()
        torch.cuda.synchronize()
    return timed, result


def pg_call(pg, model, feeds: dict, device: str):
    with pg.device(device):
        args = {k: pg.constant(v) for k, v in feeds.items()}
    first = model.outputs[0].name

    def call():
        with pg.device(device):
            return model(**args)

    def timed():
        call()
        pg.synchronize(device)
    return timed, lambda: call()[first].numpy()


def ort_call(ort, path: str, feeds: dict):
    providers = [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider")
                 if p in ort.get_available_providers()]
    sess = ort.InferenceSession(path, providers=providers)
    first = sess.get_outputs()[0].name
    if providers[0] == "CUDAExecutionProvider":
        binding = sess.io_binding()
        for k, v in feeds.items():
            binding.bind_ortvalue_input(k, ort.OrtValue.ortvalue_from_numpy(v, "cuda", 0))
        for o in sess.get_outputs():
            binding.bind_output(o.name, "cuda")

        def timed():
            sess.run_with_iobinding(binding)
            binding.synchronize_outputs()

        def result():
            sess.run_with_iobinding(binding)
            return binding.copy_outputs_to_cpu()[0]
        return timed, result, providers[0]
    return (lambda: sess.run([first], feeds), lambda: sess.run([first], feeds)[0],
            providers[0])


# Run by a child interpreter that never imports pluggable: ONNX Runtime with
# pluggable's EP on one device, numpy in and out, timed per call.
EP_CHILD = r"""
import ctypes, json, statistics, sys, time, numpy as np, onnxruntime as ort
lib, ep, path, feeds_path, repeats = sys.argv[1:6]
ort.register_execution_provider_library("pluggable", lib)
bridge = ctypes.CDLL(lib)
bridge.pg_ort_nodes_compiled.restype = ctypes.c_int64
devs = [d for d in ort.get_ep_devices() if d.ep_name == ep]
if not devs:
    print(json.dumps({"error": f"no EP device {ep}: {[d.ep_name for d in ort.get_ep_devices()]}"}))
    sys.exit(0)
so = ort.SessionOptions()
so.add_provider_for_devices(devs, {})
before = bridge.pg_ort_nodes_compiled()
sess = ort.InferenceSession(path, so)
compiled = bridge.pg_ort_nodes_compiled() - before
feeds = dict(np.load(feeds_path))
first = sess.get_outputs()[0].name
for _ in range(3):
    out = sess.run(None, feeds)
times = []
for _ in range(int(repeats)):
    t0 = time.perf_counter()
    sess.run(None, feeds)
    times.append(time.perf_counter() - t0)
np.save(feeds_path + ".out.npy", out[0])
print(json.dumps({"ms": statistics.median(times) * 1e3, "compiled": compiled,
                  "providers": sess.get_providers()}))
"""


def ort_ep_child(path: str, feeds: dict, device: str, repeats: int) -> dict:
    """Runs EP_CHILD for `path`: its median ms per call, the nodes the
    bridge compiled and the output it gave (or the error it reported)."""
    from pluggable.onnx.ort import ort_ep_library
    ep = "pluggable_" + device.split(":")[0]
    with tempfile.TemporaryDirectory() as tmp:
        fp = os.path.join(tmp, "feeds.npz")
        np.savez(fp, **feeds)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env["PYTHONPATH"] = os.pathsep.join(p for p in os.environ.get("PYTHONPATH", "").split(
            os.pathsep) if p and not os.path.isdir(os.path.join(p, "pluggable")))
        proc = subprocess.run([sys.executable, "-c", EP_CHILD, ort_ep_library(), ep, path, fp,
                               str(repeats)], capture_output=True, text=True, timeout=900,
                              cwd=tmp, env=env)
        if proc.returncode != 0:
            return {"error": f"child exited {proc.returncode}: {proc.stderr[-1500:]}"}
        res = json.loads(proc.stdout.strip().splitlines()[-1])
        if "error" not in res:
            res["out"] = np.load(fp + ".out.npy")
        return res


def host_to_host(pg, model, feeds: dict, device: str):
    """import_model's call as ONNX Runtime's sess.run is timed: numpy in,
    every output back as numpy."""
    def call():
        with pg.device(device):
            outs = model(**{k: pg.constant(v) for k, v in feeds.items()})
        return [t.numpy() for t in outs.values()]
    return call


def rel_err(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-12))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="resnet50,bert")
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--device", default="GPU:0")
    ap.add_argument("--json", default=None)
    ap.add_argument("--tiny", action="store_true", help="small models, to check the script")
    ap.add_argument("--ort-ep", action="store_true",
                    help="also run the models in ONNX Runtime through pluggable's EP")
    ap.add_argument("--kernels", type=int, default=0, metavar="CALLS",
                    help="also list the kernels of CALLS calls of PyTorch and pluggable at "
                         "the last batch")
    args = ap.parse_args(argv)
    import onnxruntime as ort
    import torch
    import pluggable as pg
    print(f"torch {torch.__version__}, onnxruntime {ort.__version__} "
          f"({', '.join(ort.get_available_providers())}), {torch.cuda.get_device_name()}")
    rng = np.random.default_rng(0)
    rows = []
    tmp = tempfile.mkdtemp()
    for name in args.models.split(","):
        path = os.path.join(tmp, f"{name}.onnx")
        torch.manual_seed(0)
        net, make_feeds = {"resnet50": export_resnet, "bert": export_bert}[name](path, args.tiny)
        size = os.path.getsize(path)
        t0 = time.perf_counter()
        data = open(path, "rb").read()
        t_read = time.perf_counter() - t0
        t0 = time.perf_counter()
        model = pg.onnx.import_model(data)
        t_import = time.perf_counter() - t0
        print(f"[{name}] {size / 1e6:.1f} MB, read {t_read * 1e3:.0f} ms, "
              f"pg.onnx.import_model {t_import * 1e3:.0f} ms")
        for batch in map(int, args.batches.split(",")):
            feeds = make_feeds(batch, rng)
            t_call, t_res = torch_call(net, feeds)
            ref = t_res()
            runs, errs, notes = {"torch eager": t_call}, {}, {}
            try:
                t0 = time.perf_counter()
                p_call, p_res = pg_call(pg, model, feeds, args.device)
                errs["pluggable"] = rel_err(p_res(), ref)
                notes["pluggable first call ms"] = (time.perf_counter() - t0) * 1e3
                runs["pluggable"] = p_call
            except Exception as exc:  # a model that cannot run says why; the others go on
                print(f"  pluggable FAILED at batch {batch}: {type(exc).__name__}: "
                      f"{str(exc)[:400]}")
            o_call, o_res, provider = ort_call(ort, path, feeds)
            errs[f"onnxruntime ({provider})"] = rel_err(o_res(), ref)
            runs[f"onnxruntime ({provider})"] = o_call
            times = times_in_turns(runs, args.repeats, warmup=3)
            med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
            for k, ms in med.items():
                err = f"max rel err {errs[k]:.1e}" if k in errs else "reference"
                ratio = f"{ms / med['torch eager']:.2f}x torch eager"
                print(f"  batch {batch:3d}  {k:34s} {ms:9.3f} ms/call  {ratio:18s}  {err}")
                rows.append({"model": name, "batch": batch, "framework": k, "ms": ms,
                             "rel_err": errs.get(k), "import_ms": t_import * 1e3,
                             "read_ms": t_read * 1e3, "size_mb": size / 1e6, **notes})
            if args.ort_ep and "pluggable" in runs:
                ep = ort_ep_child(path, feeds, args.device, args.repeats)
                h2h = host_to_host(pg, model, feeds, args.device)
                h_times = times_in_turns({"h2h": h2h}, args.repeats, warmup=3)["h2h"]
                h_ms = statistics.median(h_times) * 1e3
                total = len(__import__("onnx").load(path, load_external_data=False).graph.node)
                if "error" in ep:
                    print(f"  batch {batch:3d}  pluggable EP FAILED: {ep['error']}")
                else:
                    share = ep["compiled"] / total
                    print(f"  batch {batch:3d}  {'import_model, numpy in and out':34s} "
                          f"{h_ms:9.3f} ms/call")
                    print(f"  batch {batch:3d}  {'ORT + pluggable EP, numpy in and out':34s} "
                          f"{ep['ms']:9.3f} ms/call  {ep['ms'] / h_ms:.2f}x import_model  "
                          f"max rel err {rel_err(ep['out'], ref):.1e}  "
                          f"{ep['compiled']}/{total} nodes on the device ({share:.0%})")
                    for k, ms in (("pg import_model host-to-host", h_ms),
                                  ("ORT pluggable EP host-to-host", ep["ms"])):
                        rows.append({"model": name, "batch": batch, "framework": k, "ms": ms,
                                     "rel_err": rel_err(ep["out"], ref) if "EP" in k else None,
                                     "nodes_on_device": ep["compiled"], "nodes": total})
        if args.kernels:
            for k in ("torch eager", "pluggable"):
                if k in runs:
                    kernel_table(f"{k}, {name} batch {batch}", runs[k], args.kernels)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
