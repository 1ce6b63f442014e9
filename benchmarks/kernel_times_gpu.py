"""Device time of each kernel of the eager op mix, pluggable's beside
PyTorch's, on one GPU: Sum over the last axis, Softmax, Exp and Cast to
float16 of a 4096x1024 float32 tensor, the middle MatMul of the MLP at
batch 64 (64x4096 by 4096x4096, float32 without TF32): the `ops` rows of
bench_gpu.py; and the 4096^3 float32 MatMul with TF32, a `matmul` row.

Both frameworks' kernels are recorded in one process by CUPTI through
``torch.profiler`` (it sees every kernel of the process, the CUDA plugin's
included). The per-call rows of bench_gpu.py are the larger of the host's
cost of a call and the kernel's device time; this script gives the second,
so a row's gap to PyTorch can be told apart as host or device time.

usage: python3 benchmarks/kernel_times_gpu.py [--calls N] [--rows R] [--cols C]
"""
from __future__ import annotations

import argparse
import statistics
import sys

import numpy as np


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--cols", type=int, default=1024)
    args = ap.parse_args(argv)
    import torch
    from torch.profiler import ProfilerActivity, profile

    import pluggable as pg
    if not torch.cuda.is_available() or not pg.list_physical_devices("GPU"):
        print("needs a CUDA GPU visible to both pluggable and PyTorch", file=sys.stderr)
        return 1
    x = np.random.default_rng(0).standard_normal((args.rows, args.cols)).astype(np.float32)
    with pg.device("GPU:0"):
        gx = pg.constant(x)
    with pg.device("CPU:0"):
        axis = pg.constant(np.array([1], np.int32))
    tx = torch.from_numpy(x).cuda()
    rng = np.random.default_rng(1)
    h = rng.standard_normal((64, 4096)).astype(np.float32)
    w = (rng.standard_normal((4096, 4096)) / 64).astype(np.float32)
    with pg.device("GPU:0"):
        gh, gw = pg.constant(h), pg.constant(w)
    th, tw = torch.from_numpy(h).cuda(), torch.from_numpy(w).cuda()
    torch.backends.cuda.matmul.allow_tf32 = False   # as pluggable's default
    big = rng.standard_normal((2, 4096, 4096)).astype(np.float32)
    with pg.device("GPU:0"):
        ga, gb = pg.constant(big[0]), pg.constant(big[1])
    ta, tb = torch.from_numpy(big[0]).cuda(), torch.from_numpy(big[1]).cuda()
    r = pg.raw_ops

    def pg_tf32():
        pg.config.enable_tensor_float_32_execution(True)
        try:
            return r.MatMul(a=ga, b=gb)
        finally:
            pg.config.enable_tensor_float_32_execution(False)

    def torch_tf32():
        torch.backends.cuda.matmul.allow_tf32 = True
        try:
            return ta @ tb
        finally:
            torch.backends.cuda.matmul.allow_tf32 = False
    cases = {
        "Sum over axis 1": (lambda: r.Sum(input=gx, reduction_indices=axis),
                            lambda: tx.sum(1)),
        "Softmax": (lambda: r.Softmax(logits=gx), lambda: torch.softmax(tx, -1)),
        "Exp": (lambda: r.Exp(x=gx), lambda: torch.exp(tx)),
        "Cast to float16": (lambda: r.Cast(x=gx, DstT=pg.float16),
                            lambda: tx.to(torch.float16)),
        "MatMul 64x4096x4096": (lambda: r.MatMul(a=gh, b=gw), lambda: th @ tw),
        "MatMul 4096^3 TF32": (pg_tf32, torch_tf32),
    }

    def sync():
        pg.synchronize()
        torch.cuda.synchronize()

    print(f"{args.rows}x{args.cols} float32, {args.calls} calls each, device us per kernel "
          "(median; CUPTI through torch.profiler)")
    print("| op | framework | kernel | median us | min us |")
    print("|---|---|---|---:|---:|")
    for label, fns in cases.items():
        for framework, f in zip(("pluggable", "PyTorch"), fns):
            for _ in range(10):
                f()
            sync()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(args.calls):
                    f()
                sync()
            times: dict[str, list[float]] = {}
            for e in prof.events():
                if "CUDA" in str(e.device_type):
                    times.setdefault(e.name, []).append(e.device_time)
            for name, ts in times.items():
                if len(ts) >= args.calls:   # this op's kernels, not stray copies
                    short = name if len(name) <= 60 else name[:57] + "..."
                    print(f"| {label} | {framework} | `{short}` | "
                          f"{statistics.median(ts):.2f} | {min(ts):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
