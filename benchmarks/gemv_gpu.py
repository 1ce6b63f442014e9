"""The CUDA plugin's matrix-vector path against its cuBLAS path and PyTorch.

For each shape M x K x N (default: the layers of the MLP 1024-4096-4096-1024
at batch 1, plus a few others), times on GPU:0 the device work of
``MatMul`` and of ``_FusedMatMul`` (BiasAdd + Relu) per call, from the
profiler's device events (CUPTI where installed, else CUDA events), once with
the matrix-vector path (this process) and once with PLUGGABLE_CUDA_GEMV=0
(a child process: the setting is read once per process), both with
PLUGGABLE_CUDA_PDL=0 (a programmatic dependent launch starts before the
kernel ahead of it ends, so its device span would include that wait; the
overlap it buys in a chain is measured by graph_gpu.py), and, where PyTorch
with CUDA is installed, ``torch.nn.functional.linear`` timed with CUDA
events over back-to-back calls. Effective bandwidth is the bytes of B (plus
A and C) over the device time. The outputs of the two paths are compared
(max abs difference over the output's scale).

Prints a markdown table; ``--json PATH`` writes the rows.

usage: python3 benchmarks/gemv_gpu.py [--shapes 1x1024x4096,1x4096x4096]
           [--repeats 50] [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("PLUGGABLE_CUDA_GEMV", "1")  # the matrix-vector path, in this process
os.environ.setdefault("PLUGGABLE_CUDA_PDL", "0")   # device spans of the kernel alone
import pluggable as pg  # noqa: E402

DEFAULT_SHAPES = "1x1024x4096,1x4096x4096,1x4096x1024,8x4096x4096,1x4096x1001,4x1000x1000"


def _shapes(text: str) -> list[tuple[int, int, int]]:
    return [tuple(int(v) for v in s.split("x")) for s in text.split(",") if s]


def _inputs(m: int, k: int, n: int):
    rng = np.random.default_rng(m * 1_000_003 + k * 1009 + n)
    return (rng.standard_normal((m, k)).astype(np.float32),
            (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32),
            rng.standard_normal(n).astype(np.float32))


def measure(shapes, repeats: int) -> dict:
    """{shape: {op: mean device us, op + "_out": output}} on GPU:0."""
    out = {}
    for m, k, n in shapes:
        a, b, c = _inputs(m, k, n)
        with pg.device("GPU:0"):
            ad, bd, cd = pg.constant(a), pg.constant(b), pg.constant(c)
            calls = {
                "MatMul": lambda: pg.raw_ops.MatMul(a=ad, b=bd),
                "_FusedMatMul": lambda: pg.raw_ops._FusedMatMul(
                    a=ad, b=bd, args=[cd], fused_ops=["BiasAdd", "Relu"]),
            }
            row = {}
            for op, call in calls.items():
                for _ in range(5):
                    call()
                row[op + "_out"] = call().numpy().tolist()
                pg.synchronize()
                with tempfile.TemporaryDirectory() as logdir:
                    with pg.profiler.Profile(logdir) as prof:
                        for _ in range(repeats):
                            call()
                        pg.synchronize()
                stats = next(r for r in prof.result.summary.rows
                             if r.name == op and r.device.endswith("GPU:0"))
                row[op] = stats.device_mean_ns / 1e3
        out[f"{m}x{k}x{n}"] = row
    return out


def torch_linear(shapes, repeats: int) -> dict:
    try:
        import torch
        if not torch.cuda.is_available():
            return {}
    except Exception:
        return {}
    torch.backends.cuda.matmul.allow_tf32 = False
    out = {}
    for m, k, n in shapes:
        a, b, c = _inputs(m, k, n)
        x = torch.from_numpy(a).cuda()
        w = torch.from_numpy(np.ascontiguousarray(b.T)).cuda()
        bias = torch.from_numpy(c).cuda()
        f = torch.nn.functional.linear
        for _ in range(5):
            f(x, w, bias)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(repeats):
            f(x, w, bias)
        end.record()
        torch.cuda.synchronize()
        out[f"{m}x{k}x{n}"] = start.elapsed_time(end) * 1e3 / repeats
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default=DEFAULT_SHAPES)
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--json", default=None)
    ap.add_argument("--child-out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    shapes = _shapes(args.shapes)
    if not pg.list_physical_devices("GPU"):
        print("no GPU device present: this benchmark needs the CUDA reference plugin")
        return 1
    if args.child_out:
        pathlib.Path(args.child_out).write_text(json.dumps(measure(shapes, args.repeats)))
        return 0
    ours = measure(shapes, args.repeats)
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "cublas.json"
        env = dict(os.environ, PLUGGABLE_CUDA_GEMV="0")
        subprocess.run([sys.executable, __file__, "--shapes", args.shapes, "--repeats",
                        str(args.repeats), "--child-out", str(path)], env=env, check=True)
        theirs = json.loads(path.read_text())
    torch_us = torch_linear(shapes, args.repeats)
    rows = []
    print("| M x K x N | MB | op | gemv us | gemv GB/s | cuBLAS us | cuBLAS GB/s | "
          "cuBLAS / gemv | torch linear us | max diff / scale |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for m, k, n in shapes:
        key = f"{m}x{k}x{n}"
        mb = 4 * (k * n + m * k + m * n) / 1e6
        for op in ("MatMul", "_FusedMatMul"):
            g, cb = ours[key][op], theirs[key][op]
            o1, o2 = np.array(ours[key][op + "_out"]), np.array(theirs[key][op + "_out"])
            diff = float(np.abs(o1 - o2).max() / (np.abs(o2).max() or 1.0))
            row = {"shape": key, "op": op, "mb": mb, "gemv_us": g, "cublas_us": cb,
                   "gemv_gbs": mb * 1e3 / g if g else None,
                   "cublas_gbs": mb * 1e3 / cb if cb else None,
                   "torch_linear_us": torch_us.get(key) if op == "_FusedMatMul" else None,
                   "max_diff_over_scale": diff}
            rows.append(row)
            t = f"{row['torch_linear_us']:.2f}" if row["torch_linear_us"] else "-"
            print(f"| {key} | {mb:.1f} | {op} | {g:.2f} | {row['gemv_gbs'] or 0:.0f} | "
                  f"{cb:.2f} | {row['cublas_gbs'] or 0:.0f} | {cb / g if g else 0:.2f} | {t} | "
                  f"{diff:.1e} |")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
