"""All-reduce bandwidth across processes: pg.distribute's host backend
(TCP between the processes, numpy reductions) side by side with
``torch.distributed`` on its gloo backend, in the same run and the same
processes, for float32 tensors of 1 KiB to 64 MiB.

    python3 benchmarks/bench_allreduce.py                   # 2 processes
    python3 benchmarks/bench_allreduce.py --nproc 4 --device MY_DEVICE --json out.json

Run plainly, it starts itself on ``--nproc`` processes with
``python -m pluggable.distribute.run``; each rank measures, rank 0 writes a
markdown table that the parent prints (``--json PATH``: the rows too).
Per size: a warm-up, three calls to estimate the time of one, then as many
sum all-reduces as fill ``--seconds`` (at least 3, the count chosen by rank
0); the time of one is the slowest rank's mean. ``algbw`` = bytes / time,
``busbw`` = algbw * 2 (n - 1) / n (the traffic each rank's link carries in
a bandwidth-optimal all-reduce, as nccl-tests reports it). Without torch
the peer's columns stay empty and the title says why.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

from rank_launch import launch_self, show_table

SIZES = [1 << k for k in range(10, 27, 2)]         # 1 KiB .. 64 MiB


def _human(n: int) -> str:
    for unit, k in (("MiB", 20), ("KiB", 10)):
        if n >= 1 << k:
            return f"{n >> k} {unit}"
    return f"{n} B"


def _time(fn, seconds: float) -> float:
    """Mean seconds of fn() after a warm-up call: three calls estimate its
    time, rank 0 picks the count that fills `seconds` (at least 3) and every
    rank runs that many (so no collective is left unmatched)."""
    import pluggable as pg
    fn()
    start = time.perf_counter()
    for _ in range(3):
        fn()
    guess = max(3, int(seconds / max((time.perf_counter() - start) / 3, 1e-9)))
    count = pg.distribute.broadcast(pg.constant(np.array([guess], np.int64)), src=0)
    count = int(count.numpy()[0])
    start = time.perf_counter()
    for _ in range(count):
        fn()
    return (time.perf_counter() - start) / count


def _slowest(seconds: float) -> float:
    import pluggable as pg
    return float(pg.distribute.all_reduce(pg.constant(np.array([seconds])), "max").numpy()[0])


def measure_pluggable(device: str, size: int, seconds: float) -> float:
    import pluggable as pg
    n = size // 4
    with pg.device(device):
        x = pg.constant(np.ones(n, np.float32))
    want = float(pg.distribute.get_world_size())
    got = pg.distribute.all_reduce(x).numpy()
    assert got[0] == want and got[-1] == want, (got[:3], want)
    return _slowest(_time(lambda: pg.distribute.all_reduce(x).numpy(), seconds))


def torch_peer() -> tuple[object | None, str]:
    """(torch.distributed initialised with gloo, "") or (None, why not)."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError as exc:
        return None, f"torch is not importable ({exc})"
    if not dist.is_available() or not dist.is_gloo_available():
        return None, "torch.distributed has no gloo backend in this build"
    port = int(os.environ["MASTER_PORT"]) + 1
    dist.init_process_group("gloo", init_method=f"tcp://{os.environ['MASTER_ADDR']}:{port}",
                            rank=int(os.environ["RANK"]),
                            world_size=int(os.environ["WORLD_SIZE"]))
    torch.set_num_threads(1)
    return dist, ""


def measure_torch(dist, size: int, seconds: float) -> float:
    import torch
    x = torch.ones(size // 4, dtype=torch.float32)
    return _slowest(_time(lambda: dist.all_reduce(x), seconds))


def _gbps(size: int, t: float | None, factor: float = 1.0) -> str:
    return "" if t is None else f"{size / t * factor / 1e9:.3f}"


def rank_main(args: argparse.Namespace) -> int:
    import pluggable as pg
    pg.distribute.init_process_group(timeout=600)
    rank, n = pg.distribute.get_rank(), pg.distribute.get_world_size()
    dist, why = torch_peer() if not args.no_torch else (None, "--no-torch")
    sizes = [s for s in SIZES if s <= args.max_bytes]
    rows = []
    for size in sizes:
        ours = measure_pluggable(args.device, size, args.seconds)
        theirs = measure_torch(dist, size, args.seconds) if dist else None
        rows.append({"bytes": size, "pluggable_s": ours, "gloo_s": theirs})
    if dist:
        dist.destroy_process_group()
    pg.distribute.destroy_process_group()
    if rank != 0:
        return 0
    bus = 2 * (n - 1) / n
    lines = [f"all_reduce (sum, float32) across {n} processes, pluggable host backend on "
          f"{args.device} vs torch.distributed gloo (CPU tensors)"
          + (f"; gloo skipped: {why}" if not dist else ""), "",
             "| size | pluggable us | pluggable algbw GB/s | pluggable busbw GB/s "
             "| gloo us | gloo busbw GB/s | gloo time / pluggable time |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        t, g = r["pluggable_s"], r["gloo_s"]
        ratio = f"{g / t:.2f}x" if g else "n/a"
        lines.append(f"| {_human(r['bytes'])} | {t * 1e6:.0f} | {_gbps(r['bytes'], t)} | "
                     f"{_gbps(r['bytes'], t, bus)} | {'' if g is None else f'{g * 1e6:.0f}'} | "
                     f"{_gbps(r['bytes'], g, bus)} | {ratio} |")
    table = "\n".join(lines) + "\n"
    show_table(table)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"nproc": n, "device": args.device, "peer": "gloo" if dist else why,
                       "rows": rows}, f, indent=1)
    return 0


def main(argv: list | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--device", default="CPU:0", help="where pluggable's tensors live")
    p.add_argument("--max-bytes", type=int, default=SIZES[-1])
    p.add_argument("--seconds", type=float, default=0.3, help="timed work per size and side")
    p.add_argument("--no-torch", action="store_true", help="skip the torch gloo peer")
    p.add_argument("--json", default=None, help="also write the rows to this file")
    args = p.parse_args(argv)
    if "RANK" in os.environ:
        return rank_main(args)
    return launch_self(__file__, args.nproc, argv)


if __name__ == "__main__":
    sys.exit(main())
