"""One-element `a + b` on GPU:0 in one process: PyTorch before pluggable has
launched anything, pluggable, PyTorch right after it, and the two
alternating; with the CPU time each thread of the process used during
PyTorch's loops (the CUDA plugin's launcher thread must be idle there, so
that it cannot slow the peer it is compared with).

    python3 benchmarks/launch_thread_gpu.py [--calls N]
    PLUGGABLE_CUDA_LAUNCH_THREAD=0 python3 benchmarks/launch_thread_gpu.py

Times are µs per call over N calls ending with one synchronisation.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np


def thread_ticks() -> dict[str, int]:
    """CPU time (clock ticks, user + system) of each thread of the process."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        out[tid] = int(fields[11]) + int(fields[12])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20000)
    args = ap.parse_args()
    import torch

    import pluggable as pg
    n = args.calls
    ta, tb = torch.ones(1, device="cuda"), torch.ones(1, device="cuda")
    with pg.device("GPU:0"):
        pa, pb = pg.constant(np.ones(1, np.float32)), pg.constant(np.ones(1, np.float32))

    def torch_loop() -> float:
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(n):
            ta + tb
        torch.cuda.synchronize()
        return (time.perf_counter() - t) / n * 1e6

    def pg_loop() -> float:
        with pg.device("GPU:0"):
            pg.synchronize()
            t = time.perf_counter()
            for _ in range(n):
                pa + pb
            pg.synchronize()
        return (time.perf_counter() - t) / n * 1e6

    mode = "off" if os.environ.get("PLUGGABLE_CUDA_LAUNCH_THREAD") == "0" else "on"
    print(f"launch thread {mode}, {n} calls of a + b (1 float32) per figure, us per call")
    main_tid = str(os.getpid())
    print("torch before pluggable launched:", [round(torch_loop(), 2) for _ in range(3)])
    print("pluggable:", [round(pg_loop(), 2) for _ in range(3)])
    for _ in range(3):
        t0 = thread_ticks()
        r = torch_loop()
        t1 = thread_ticks()
        others = sum(v - t0.get(k, 0) for k, v in t1.items() if k != main_tid)
        print(f"torch right after: {r:.2f} (CPU ticks of the other threads meanwhile: {others}; "
              f"main thread: {t1[main_tid] - t0[main_tid]})")
    ratios = []
    for _ in range(3):
        p, r = pg_loop(), torch_loop()
        ratios.append(p / r)
        print(f"alternating: pluggable {p:.2f}, torch {r:.2f}, ratio {p / r:.2f}")
    print(f"median ratio pluggable / torch: {sorted(ratios)[1]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
