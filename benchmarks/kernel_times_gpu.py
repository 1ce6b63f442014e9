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

With --mlp BATCH: the kernels of the `ops` row's MLP 1024-4096-4096-1024
(MatMul, bias, Relu per layer) at that batch, one line per kernel in the
order a call issues them, and per call the sum of the kernels' times and the
span from the first kernel's start to the last one's end (the difference is
the GPU's idle time between them); the idle time before each kernel (for the
first, since the previous call's last); and the wall time per call without
the profiler (median of 5 runs of the calls, each ending with a
synchronisation).

usage: python3 benchmarks/kernel_times_gpu.py [--calls N] [--rows R] [--cols C] [--mlp BATCH]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--cols", type=int, default=1024)
    ap.add_argument("--mlp", type=int, default=0, metavar="BATCH")
    args = ap.parse_args(argv)
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile
    except ImportError:
        print("needs PyTorch: its profiler records the kernels (CUPTI)", file=sys.stderr)
        return 2

    import pluggable as pg
    if not torch.cuda.is_available() or not pg.list_physical_devices("GPU"):
        print("no GPU: needs a CUDA GPU visible to both pluggable and PyTorch", file=sys.stderr)
        return 2
    if args.mlp:
        return mlp_kernels(torch, pg, args.mlp, args.calls)
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


def mlp_kernels(torch, pg, batch: int, calls: int) -> int:
    from kernel_trace import traced_kernels
    rng = np.random.default_rng(0)
    sizes = [1024, 4096, 4096, 1024]
    ws = [(rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32)
          for a, b in zip(sizes, sizes[1:])]
    bs = [(rng.standard_normal(b) * 0.1).astype(np.float32) for b in sizes[1:]]
    h = rng.standard_normal((batch, 1024)).astype(np.float32)
    torch.backends.cuda.matmul.allow_tf32 = False   # as pluggable's default
    with pg.device("GPU:0"):
        gw, gb, gh = [pg.constant(w) for w in ws], [pg.constant(b) for b in bs], pg.constant(h)
    tw = [torch.from_numpy(w).cuda() for w in ws]
    tb = [torch.from_numpy(b).cuda() for b in bs]
    th = torch.from_numpy(h).cuda()
    r = pg.raw_ops

    def pg_mlp():
        y = gh
        for w, b in zip(gw, gb):
            y = r.Relu(features=r.BiasAdd(value=r.MatMul(a=y, b=w), bias=b))
        return y

    def torch_mlp():
        y = th
        for w, b in zip(tw, tb):
            y = torch.relu(y @ w + b)
        return y

    def sync():
        pg.synchronize()
        torch.cuda.synchronize()
    print(f"MLP 1024-4096-4096-1024 at batch {batch}, {calls} calls each, device us "
          "(median; CUPTI through torch.profiler)")
    print("| framework | # | kernel | median us | idle before, us |")
    print("|---|---:|---|---:|---:|")
    totals = {}
    for framework, f in (("pluggable", pg_mlp), ("PyTorch", torch_mlp)):
        walls = []
        for _ in range(6):
            t0 = time.perf_counter()
            for _ in range(calls):
                f()
            sync()
            walls.append((time.perf_counter() - t0) / calls * 1e6)
        wall = statistics.median(walls[1:])
        ks = traced_kernels(f, calls, sync)
        per = len(ks) // calls
        if per == 0 or len(ks) % calls:
            print(f"| {framework} | | {len(ks)} kernels for {calls} calls | |")
            continue
        idle = [b["ts"] - (a["ts"] + a["dur"]) for a, b in zip(ks, ks[1:])]
        for j in range(per):
            name = ks[j]["name"]
            short = name if len(name) <= 60 else name[:57] + "..."
            print(f"| {framework} | {j + 1} | `{short}` | "
                  f"{statistics.median(k['dur'] for k in ks[j::per]):.2f} | "
                  f"{statistics.median(idle[j - 1 if j else per - 1::per]):.2f} |")
        calls_k = [ks[i * per:(i + 1) * per] for i in range(calls)]
        busy = statistics.median(sum(k["dur"] for k in c) for c in calls_k)
        span = statistics.median(c[-1]["ts"] + c[-1]["dur"] - c[0]["ts"] for c in calls_k)
        totals[framework] = (busy, span, wall)
    for framework, (busy, span, wall) in totals.items():
        print(f"{framework}: kernels {busy:.2f} us per call, span {span:.2f} us; "
              f"without the profiler {wall:.2f} us per call")
    return 0


if __name__ == "__main__":
    sys.exit(main())
