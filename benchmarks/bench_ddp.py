"""Data-parallel step time across processes: gradients all-reduced after
the backward pass (``pg.distribute.all_reduce_gradients``) against the
same reduction overlapped with the backward pass
(``pg.distribute.GradientReducer``), in the same run and processes.

    python3 benchmarks/bench_ddp.py                      # 2 processes, MY_DEVICE:0
    python3 benchmarks/bench_ddp.py --device CPU:0 --layers 8 --width 1024 --json out.json

Run plainly, it starts itself on ``--nproc`` processes with
``python -m pluggable.distribute.run``; rank 0 writes a markdown table that
the parent prints (``--json PATH``: the numbers too). The model is an MLP
of ``--layers`` dense layers of ``--width`` units (tanh), float32, each
rank on its shard of a batch of ``--batch`` rows. A step is forward,
backward and the all-reduce of every gradient (mean), without the
optimizer. The modes alternate step by step (after warm-up steps); the
time of a step is the slowest rank's (the ranks meet at a barrier before
each step); the table gives the median and the fastest of ``--steps``
steps per mode, and rank 0's CPU time per step (all its threads: overlap
hides communication only where a core is free for it). "backward only" is the same step without any
reduction: what a perfect overlap would approach. The first step of each
mode is checked to give the same bits.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

from rank_launch import launch_self, show_table


def _model(pg, rng, layers: int, width: int, device: str) -> list:
    with pg.device(device):
        ws = []
        for _ in range(layers):
            ws.append(pg.Variable(rng.standard_normal((width, width)).astype(np.float32)
                                  / np.float32(np.sqrt(width))))
            ws.append(pg.Variable(np.zeros(width, np.float32)))
    return ws


def _loss(pg, ws: list, x):
    h = x
    for i in range(0, len(ws), 2):
        h = pg.tanh(pg.matmul(h, ws[i]) + ws[i + 1])
    return pg.reduce_mean(h * h)


def rank_main(args: argparse.Namespace) -> int:
    import pluggable as pg
    d = pg.distribute
    d.init_process_group(timeout=600)
    rank, n = d.get_rank(), d.get_world_size()
    rng = np.random.default_rng(args.seed)
    ws = _model(pg, rng, args.layers, args.width, args.device)
    x_all = rng.standard_normal((args.batch, args.width)).astype(np.float32)
    with pg.device(args.device):
        x = pg.constant(x_all[rank::n])
    reducer = d.GradientReducer(ws, args.bucket_bytes)

    def step(mode: str):
        with pg.device(args.device), pg.GradientTape() as tape:
            loss = _loss(pg, ws, x)
        if mode == "overlapped":
            grads = reducer.gradient(tape, loss)
        else:
            grads = tape.gradient(loss, ws)
            if mode == "plain":
                grads = d.all_reduce_gradients(grads, args.bucket_bytes)
        return [g.numpy() for g in grads]     # every result on the host: the step is done

    modes = ["plain", "overlapped", "backward only"]
    first = {m: step(m) for m in modes}
    assert all(np.array_equal(a, b) for a, b in zip(first["plain"], first["overlapped"])), \
        "the overlapped gradients differ from the plain ones"
    for _ in range(args.warmup):
        for m in modes:
            step(m)
    times: dict[str, list[float]] = {m: [] for m in modes}
    cpu: dict[str, list[float]] = {m: [] for m in modes}
    for _ in range(args.steps):
        for m in modes:
            d.barrier()
            start, start_cpu = time.perf_counter(), time.process_time()
            step(m)
            mine = time.perf_counter() - start
            cpu[m].append(time.process_time() - start_cpu)
            slowest = d.all_reduce(pg.constant(np.array([mine])), "max")
            times[m].append(float(slowest.numpy()[0]))
    d.destroy_process_group()
    if rank != 0:
        return 0
    grad_bytes = sum(w.shape[0] * (w.shape[1] if len(w.shape) > 1 else 1) * 4 for w in ws)
    plain = float(np.median(times["plain"]))
    lines = [f"Data-parallel step on {n} processes, {args.device}: MLP {args.layers} x "
             f"{args.width} (float32 gradients {grad_bytes / 2**20:.1f} MiB), batch "
             f"{args.batch}, buckets of {args.bucket_bytes / 2**20:.2f} MiB, host backend; "
             f"median of {args.steps} steps", "",
             "| mode | median step ms | fastest step ms | vs plain | rank 0 CPU ms/step |",
             "|---|---:|---:|---:|---:|"]
    for m in modes:
        med = float(np.median(times[m]))
        lines.append(f"| {m} | {med * 1e3:.2f} | {min(times[m]) * 1e3:.2f} | "
                     f"{plain / med:.2f}x | {np.median(cpu[m]) * 1e3:.1f} |")
    table = "\n".join(lines) + "\n"
    show_table(table)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"nproc": n, "device": args.device, "layers": args.layers,
                       "width": args.width, "batch": args.batch,
                       "bucket_bytes": args.bucket_bytes, "step_seconds": times,
                       "rank0_cpu_seconds": cpu}, f, indent=1)
    return 0


def main(argv: list | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--device", default="MY_DEVICE:0", help="where the model lives")
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--width", type=int, default=768)
    p.add_argument("--batch", type=int, default=64, help="the global batch")
    p.add_argument("--bucket-bytes", type=int, default=1 << 20)
    p.add_argument("--steps", type=int, default=15, help="timed steps per mode")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="also write the step times to this file")
    args = p.parse_args(argv)
    if "RANK" in os.environ:
        return rank_main(args)
    return launch_self(__file__, args.nproc, argv)


if __name__ == "__main__":
    sys.exit(main())
