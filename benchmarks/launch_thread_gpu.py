"""One-element `a + b` on GPU:0 in one process: PyTorch before pluggable has
launched anything, pluggable, PyTorch right after it, and the two
alternating; with the CPU time each thread of the process used during
PyTorch's loops (the CUDA plugin's launcher thread must be idle there, so
that it cannot slow the peer it is compared with).

Then bursts after an idle spell: a round sleeps --idle-ms (longer than the
launcher's 2 ms idle spin, so that it falls asleep), then makes --burst
calls and one synchronisation, pluggable and PyTorch in turns; medians over
--rounds rounds of the time to launch the burst and of the whole burst, µs
per call, and how the burst's launches were issued (launch queue counters:
by the launcher or by the calling thread, and the pushes that found the
launcher asleep).

    python3 benchmarks/launch_thread_gpu.py [--calls N] [--idle-ms 5]
        [--burst 50] [--rounds 50]
    PLUGGABLE_CUDA_LAUNCH_THREAD=0 python3 benchmarks/launch_thread_gpu.py

Times are µs per call over N calls ending with one synchronisation.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import statistics
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
    ap.add_argument("--idle-ms", type=float, default=5.0)
    ap.add_argument("--burst", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=50)
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
    bursts(args, pg, torch, (pa, pb), (ta, tb))
    return 0


def queue_stats(pg) -> dict | None:
    """The CUDA plugin's launch queue counters for GPU:0, or None without a
    queue (PLUGGABLE_CUDA_LAUNCH_THREAD=0)."""
    rec = next(r for r in pg.plugins() if r.path.endswith("libpluggable_cuda.so"))
    fn = ctypes.CDLL(rec.path).PG_CudaLaunchQueueStats
    fn.argtypes, fn.restype = [ctypes.c_int, ctypes.POINTER(ctypes.c_uint64)], ctypes.c_int
    out = (ctypes.c_uint64 * 5)()
    if not fn(0, out):
        return None
    return dict(zip(("queued", "by_launcher", "by_flush", "wakes", "failed"), out))


def bursts(args, pg, torch, pgin, tin) -> None:
    """The bursts after an idle spell (see the top)."""
    k, idle = args.burst, args.idle_ms / 1e3
    dev = pg.get_device("GPU:0")
    pa, pb = pgin
    ta, tb = tin

    def pg_burst() -> tuple[float, float]:
        with pg.device("GPU:0"):
            t0 = time.perf_counter()
            for _ in range(k):
                pa + pb
            t1 = time.perf_counter()
            dev.synchronize()
        return t1 - t0, time.perf_counter() - t0

    def torch_burst() -> tuple[float, float]:
        t0 = time.perf_counter()
        for _ in range(k):
            ta + tb
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        return t1 - t0, time.perf_counter() - t0

    times = {"pluggable": [], "torch": []}
    before = queue_stats(pg)
    for i in range(args.rounds):
        for name, fn in ((("pluggable", pg_burst), ("torch", torch_burst)) if i % 2 == 0
                         else (("torch", torch_burst), ("pluggable", pg_burst))):
            time.sleep(idle)
            times[name].append(fn())
    after = queue_stats(pg)
    print(f"\nbursts of {k} calls after {args.idle_ms:g} ms idle, median of {args.rounds} "
          "rounds, us per call (launch / launch and synchronise):")
    for name, ts in times.items():
        launch = statistics.median(t[0] for t in ts) / k * 1e6
        whole = statistics.median(t[1] for t in ts) / k * 1e6
        print(f"  {name}: {launch:.2f} / {whole:.2f}")
    if before is None:
        print("  launch queue: none (PLUGGABLE_CUDA_LAUNCH_THREAD=0)")
        return
    d = {key: after[key] - before[key] for key in before}
    print(f"  launch queue per burst: {d['queued'] / args.rounds:.1f} items queued, "
          f"{d['by_launcher'] / args.rounds:.1f} issued by the launcher, "
          f"{d['by_flush'] / args.rounds:.1f} by the calling thread, "
          f"{d['wakes'] / args.rounds:.1f} pushes found it asleep")


if __name__ == "__main__":
    raise SystemExit(main())
