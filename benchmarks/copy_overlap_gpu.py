"""Copies overlapped with compute: stream N batches to GPU:0 while running a
matmul per batch, serial against overlapped, pluggable against PyTorch in
the same run.

Each batch is a (rows, 1024) float32 matrix (64 MiB by default) multiplied
by a (1024, cols) weight (TF32 off on both sides). Variants:

  serial, pageable: ``pg.constant(batch)`` then the matmul, batch after
      batch (the copy of batch i+1 starts when the matmul of batch i is
      done); PyTorch: ``torch.from_numpy(batch).cuda()``;
  serial, pinned: the same from page-locked batches (``Device.allocate_host``
      / ``pin_memory()``; PyTorch: ``.cuda()``, which waits);
  overlapped, pinned / pageable: the copy of batch i+1 is issued on the
      device's copy stream before the matmul of batch i
      (``pg.copy_to_device_async``, ordered with events); PyTorch: pinned
      ``.cuda(non_blocking=True)`` on a side stream, ``wait_stream`` and
      ``record_stream``.

Also the time of the copies alone and of the matmuls alone: with full
overlap a batch costs about the larger of the two. Figures are ms per batch,
the median of --repeats runs of all batches, each ending with a synchronize.

usage: python benchmarks/copy_overlap_gpu.py [--batches N] [--batch-mib M]
           [--cols C] [--repeats R] [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import pathlib
import platform
import statistics
import sys
import time

import numpy as np

from gpu_peers import cuda_torch, require_pluggable


pg = require_pluggable()
torch = cuda_torch()

K = 1024  # inner dimension


def timed(run, repeats: int, n_batches: int) -> float:
    """Median ms per batch of run() (all batches + a synchronize)."""
    run()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) / n_batches * 1e3


def pg_variants(pageable: list, pinned: list, w: np.ndarray, repeats: int) -> dict:
    n = len(pageable)
    with pg.device("GPU:0"):
        wt = pg.constant(w)
    check = {}

    def serial(batches):
        def run():
            with pg.device("GPU:0"):
                for b in batches:
                    y = pg.matmul(pg.constant(b), wt)
            check["y"] = y
            pg.synchronize()
        return run

    def overlapped(batches):
        def run():
            with pg.device("GPU:0"):
                nxt = pg.copy_to_device_async(batches[0])
                for i in range(n):
                    x = nxt.result()
                    if i + 1 < n:
                        nxt = pg.copy_to_device_async(batches[i + 1])
                    y = pg.matmul(x, wt)
            check["y"] = y
            pg.synchronize()
        return run

    def copies_only(batches):
        def run():
            with pg.device("GPU:0"):
                for b in batches:
                    pg.constant(b)
            pg.synchronize()
        return run

    with pg.device("GPU:0"):
        x0 = pg.constant(pinned[0])

    def compute_only():
        with pg.device("GPU:0"):
            for _ in range(n):
                y = pg.matmul(x0, wt)
        del y
        pg.synchronize()

    out = {
        "serial, pageable": timed(serial(pageable), repeats, n),
        "serial, pinned": timed(serial(pinned), repeats, n),
        "overlapped, pinned": timed(overlapped(pinned), repeats, n),
        "overlapped, pageable": timed(overlapped(pageable), repeats, n),
        "copies only, pinned": timed(copies_only(pinned), repeats, n),
        "copies only, pageable": timed(copies_only(pageable), repeats, n),
        "matmuls only": timed(compute_only, repeats, n),
    }
    # The last batch's product, against float64 numpy on a few rows.
    got = check["y"].numpy()[:8]
    want = pinned[-1][:8].astype(np.float64) @ w.astype(np.float64)
    out["max abs error (8 rows)"] = float(np.max(np.abs(got - want)))
    return out


def torch_variants(pageable: list, w: np.ndarray, repeats: int) -> dict:
    n = len(pageable)
    pinned = [torch.from_numpy(b).pin_memory() for b in pageable]
    wt = torch.from_numpy(w).cuda()
    side = torch.cuda.Stream()
    main = torch.cuda.current_stream()
    sync = torch.cuda.synchronize

    def serial_pageable():
        for b in pageable:
            torch.from_numpy(b).cuda() @ wt
        sync()

    def serial_pinned():
        for h in pinned:
            h.cuda() @ wt
        sync()

    def prefetch(h):
        with torch.cuda.stream(side):
            side.wait_stream(main)  # the memory may be reused from main's work
            return h.cuda(non_blocking=True)

    def overlapped():
        nxt = prefetch(pinned[0])
        for i in range(n):
            main.wait_stream(side)
            x = nxt
            x.record_stream(main)
            if i + 1 < n:
                nxt = prefetch(pinned[i + 1])
            x @ wt
        sync()

    def copies_only():
        for h in pinned:
            h.cuda(non_blocking=True)
        sync()

    x0 = pinned[0].cuda()

    def compute_only():
        for _ in range(n):
            x0 @ wt
        sync()

    return {
        "serial, pageable": timed(serial_pageable, repeats, n),
        "serial, pinned": timed(serial_pinned, repeats, n),
        "overlapped, pinned": timed(overlapped, repeats, n),
        "copies only, pinned": timed(copies_only, repeats, n),
        "matmuls only": timed(compute_only, repeats, n),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", type=int, default=12)
    ap.add_argument("--batch-mib", type=int, default=64)
    ap.add_argument("--cols", type=int, default=2048, help="columns of the weight")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    if not pg.list_physical_devices("GPU"):
        print("copy_overlap_gpu: no GPU device (the CUDA reference plugin found none)")
        return 2
    pg.config.enable_tensor_float_32_execution(False)
    if torch is not None:
        torch.backends.cuda.matmul.allow_tf32 = False
    rows = args.batch_mib * (1 << 20) // (4 * K)
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((K, args.cols)) / 32).astype(np.float32)
    pageable = [rng.standard_normal((rows, K), dtype=np.float32) for _ in range(args.batches)]
    dev = pg.get_device("GPU:0")
    pinned = []
    for b in pageable:
        h = dev.allocate_host(b.nbytes).view(np.float32).reshape(b.shape)
        h[:] = b
        pinned.append(h)
    figures = {"pluggable": pg_variants(pageable, pinned, w, args.repeats)}
    if torch is not None:
        figures["torch"] = torch_variants(pageable, w, args.repeats)
    env = (f"{args.batches} batches of {args.batch_mib} MiB ({rows}x{K} float32)"
           f" @ ({K}x{args.cols}), python {platform.python_version()}"
           + (f", torch {torch.__version__} on {torch.cuda.get_device_name(0)}" if torch else ""))
    print(env)
    print()
    print("| variant | pluggable ms/batch | PyTorch ms/batch | ratio |")
    print("|---|---:|---:|---:|")
    p, t = figures["pluggable"], figures.get("torch", {})
    for k, v in p.items():
        if k.startswith("max abs"):
            continue
        tv = t.get(k)
        ratio = f"{v / tv:.2f}x" if tv else "n/a"
        print(f"| {k} | {v:.3f} | {'n/a' if tv is None else f'{tv:.3f}'} | {ratio} |")
    for name, f in figures.items():
        ser, ov = f["serial, pinned"], f["overlapped, pinned"]
        ideal = max(f["copies only, pinned"], f["matmuls only"])
        print(f"\n{name}: overlapped pinned is {ser / ov:.2f}x faster than serial pinned; "
              f"{ov:.3f} ms/batch against max(copy, matmul) = {ideal:.3f}")
    print(f"\npluggable max abs error of the last batch (8 rows): "
          f"{p['max abs error (8 rows)']:.2e}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"environment": env, "figures": figures},
                                                      indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
