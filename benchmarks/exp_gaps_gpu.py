"""Exp of a 4096x1024 float32 tensor called back to back on one GPU, for
pluggable and PyTorch in one process: the host's time per call (200 calls
without a synchronisation, median of 5), the wall time per call with the
synchronisation, and from a CUPTI trace (``torch.profiler``) of 200 calls
the kernel's device time and the idle gap between one kernel and the next
(medians; p90 of the gaps). Each framework also runs on the other's input
tensor (shared through DLPack), which tells the kernel apart from where its
input lies. Two rounds.

usage: python3 benchmarks/exp_gaps_gpu.py
"""
from __future__ import annotations

import statistics
import sys
import time

import numpy as np

from kernel_trace import traced_kernels

CALLS = 200


def main() -> int:
    import torch

    import pluggable as pg
    if not torch.cuda.is_available() or not pg.list_physical_devices("GPU"):
        print("needs a CUDA GPU visible to both pluggable and PyTorch", file=sys.stderr)
        return 1
    x = np.random.default_rng(0).standard_normal((4096, 1024)).astype(np.float32)
    with pg.device("GPU:0"):
        gx = pg.constant(x)
    tx = torch.from_numpy(x).cuda()
    gx_of_torch, tx_of_pg = pg.from_dlpack(tx), torch.from_dlpack(gx)

    def both_sync():
        pg.synchronize()
        torch.cuda.synchronize()
    cases = {"pluggable": lambda: pg.raw_ops.Exp(x=gx),
             "PyTorch": lambda: torch.exp(tx),
             "pluggable, PyTorch's input": lambda: pg.raw_ops.Exp(x=gx_of_torch),
             "PyTorch, pluggable's input": lambda: torch.exp(tx_of_pg)}
    print("| round | case | host us/call | wall us/call | kernel us | gap us (p90) |")
    print("|---|---|---:|---:|---:|---:|")
    for rnd in (1, 2):
        for name, f in cases.items():
            for _ in range(50):
                f()
            both_sync()
            hosts, walls = [], []
            for _ in range(5):
                t0 = time.perf_counter()
                for _ in range(CALLS):
                    f()
                t1 = time.perf_counter()
                both_sync()
                t2 = time.perf_counter()
                hosts.append((t1 - t0) / CALLS * 1e6)
                walls.append((t2 - t0) / CALLS * 1e6)
            ks = traced_kernels(f, CALLS, both_sync)
            gaps = [b["ts"] - (a["ts"] + a["dur"]) for a, b in zip(ks, ks[1:])]
            print(f"| {rnd} | {name} | {statistics.median(hosts):.2f} | "
                  f"{statistics.median(walls):.2f} | "
                  f"{statistics.median(k['dur'] for k in ks):.2f} | "
                  f"{statistics.median(gaps):.2f} ({np.percentile(gaps, 90):.2f}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
