"""Data-parallel training throughput on several GPUs against one GPU:
``pg.distribute`` with the NCCL backend (one process per GPU), the same
model and per-GPU batch, in the same run.

    python3 benchmarks/ddp_scaling_gpu.py                  # every GPU of the host
    python3 benchmarks/ddp_scaling_gpu.py --nproc 2 --layers 4 --width 4096 --batch 512

The model is an MLP of ``--layers`` dense layers of ``--width`` units
(tanh), float32; a step is forward, backward, the gradients' mean over the
ranks and an SGD update (``pg.optimizers.SGD``), ending with a wait for the
GPU. Each GPU takes ``--batch`` rows per step (weak scaling, as data
parallelism is used), so the throughput is ``nproc * batch / step time``.
Runs, one after the other: one GPU alone (one process, no process
group), then ``--nproc`` processes with the gradients all-reduced after the
backward pass (``all_reduce_gradients``, buckets of ``--bucket-mib``), then
overlapped with it (``GradientReducer``); then the peer, PyTorch: the same
model (``nn.Linear`` + ``nn.Tanh``), batch and SGD step on one GPU and with
``DistributedDataParallel`` (NCCL, buckets of ``--bucket-mib``) on
``--nproc``. The step time of a run is the
median over ``--steps`` steps of the slowest rank (the ranks meet at a
barrier before each step). The replicas' weights are compared at the end
(the same bits on every rank). Prints a markdown table; ``--json PATH``
writes the numbers.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from bench_ddp import _loss, _model   # the same MLP as the host-backend benchmark

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def worker(args: argparse.Namespace) -> int:
    """One rank (or the lone GPU when RANK is unset); writes its step times."""
    import pluggable as pg
    grouped = "RANK" in os.environ
    d = pg.distribute
    if grouped:
        d.init_process_group(timeout=600)
    rank = d.get_rank() if grouped else 0
    device = f"GPU:{int(os.environ.get('LOCAL_RANK', 0))}"
    ws = _model(pg, np.random.default_rng(args.seed), args.layers, args.width, device)
    rng = np.random.default_rng([args.seed, rank])
    with pg.device(device):
        x = pg.constant(rng.standard_normal((args.batch, args.width)).astype(np.float32))
    opt = pg.optimizers.SGD(learning_rate=1e-3)
    bucket = args.bucket_mib << 20
    reducer = d.GradientReducer(ws, bucket) if grouped and args.mode == "overlapped" else None
    dev = pg.get_device(device)

    def step() -> None:
        with pg.device(device):
            with pg.GradientTape() as tape:
                loss = _loss(pg, ws, x)
            if reducer is not None:
                grads = reducer.gradient(tape, loss)
            else:
                grads = tape.gradient(loss, ws)
                if grouped:
                    grads = d.all_reduce_gradients(grads, bucket)
            opt.apply_gradients(zip(grads, ws))
        dev.synchronize()

    for _ in range(args.warmup):
        step()
    times = []
    for _ in range(args.steps):
        if grouped:
            d.barrier()
        start = time.perf_counter()
        step()
        mine = time.perf_counter() - start
        if grouped:     # the slowest rank's time (host backend: a CPU tensor)
            mine = float(d.all_reduce(pg.constant(np.array([mine])), "max").numpy()[0])
        times.append(mine)
    digest = float(sum(float(np.abs(w.numpy()).sum()) for w in ws))
    same = True
    if grouped:
        digests = d.all_gather(pg.constant(np.array([digest]))).numpy()
        same = bool(np.all(digests == digests[0]))
        d.destroy_process_group()
    if rank == 0:
        with open(args.out, "w") as f:
            json.dump({"times": times, "same": same}, f)
    return 0


def _torch_worker(rank: int, n: int, port: int, args: argparse.Namespace, queue) -> None:
    """The same MLP, batch and step in PyTorch: one GPU, or DDP over n."""
    import torch
    import torch.distributed as dist
    torch.cuda.set_device(rank)
    if n > 1:
        dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=n, device_id=torch.device(f"cuda:{rank}"))
    layers = []
    for _ in range(args.layers):
        layers += [torch.nn.Linear(args.width, args.width), torch.nn.Tanh()]
    model = torch.nn.Sequential(*layers).cuda(rank)
    if n > 1:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank],
                                                          bucket_cap_mb=args.bucket_mib)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(args.batch, args.width, device=f"cuda:{rank}")

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        h = model(x)
        (h * h).mean().backward()
        opt.step()
        torch.cuda.synchronize(rank)
    for _ in range(args.warmup):
        step()
    times = []
    for _ in range(args.steps):
        if n > 1:
            dist.barrier()
        start = time.perf_counter()
        step()
        t = torch.tensor([time.perf_counter() - start], device=f"cuda:{rank}")
        if n > 1:
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
        times.append(float(t.item()))
    if rank == 0:
        queue.put(times)
    if n > 1:
        dist.destroy_process_group()


def _torch_run(args: argparse.Namespace, n: int) -> list | None:
    """PyTorch's step times on n GPUs (None without torch)."""
    try:
        import torch
        import torch.multiprocessing as mp
    except ImportError:
        return None
    if torch.cuda.device_count() < n:
        return None
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_torch_worker, args=(r, n, port, args, queue))
             for r in range(n)]
    for p in procs:
        p.start()
    try:
        return queue.get(timeout=300)
    finally:
        for p in procs:
            p.join(timeout=60)


def _run(args: argparse.Namespace, nproc: int, mode: str, out: str) -> dict:
    script = os.path.abspath(__file__)
    flags = ["--worker", "--mode", mode, "--out", out, "--layers", str(args.layers),
             "--width", str(args.width), "--batch", str(args.batch), "--steps", str(args.steps),
             "--warmup", str(args.warmup), "--bucket-mib", str(args.bucket_mib),
             "--seed", str(args.seed)]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if nproc == 1:
        env.pop("RANK", None)
        cmd = [sys.executable, script, *flags]
    else:
        cmd = [sys.executable, "-m", "pluggable.distribute.run", "--nproc", str(nproc),
               script, *flags]
    subprocess.run(cmd, env=env, cwd=ROOT, check=True)
    with open(out) as f:
        return json.load(f)


def main(argv: list | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nproc", type=int, default=0, help="GPUs (default: all)")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--width", type=int, default=4096)
    p.add_argument("--batch", type=int, default=512, help="rows per GPU per step")
    p.add_argument("--bucket-mib", type=int, default=25)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None)
    p.add_argument("--no-torch", action="store_true", help="skip the PyTorch peer")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--mode", default="plain", help=argparse.SUPPRESS)
    p.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return worker(args)
    import pluggable as pg
    gpus = len(pg.list_physical_devices("GPU"))
    n = args.nproc or gpus
    if gpus < 2 or n < 2 or n > gpus:
        print(f"ddp_scaling_gpu: needs at least 2 GPUs (found {gpus}, asked for {n})")
        return 1
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        runs = [("1 GPU", 1, "single"), (f"{n} GPUs, all-reduce after backward", n, "plain"),
                (f"{n} GPUs, all-reduce overlapped", n, "overlapped")]
        for label, nproc, mode in runs:
            r = _run(args, nproc, mode, os.path.join(tmp, f"{mode}.json"))
            med = float(np.median(r["times"]))
            rows.append({"run": label, "gpus": nproc, "mode": mode, "step_s": med,
                         "fastest_s": min(r["times"]), "samples_per_s": nproc * args.batch / med,
                         "replicas_identical": r["same"]})
    if not args.no_torch:
        for label, nproc in (("PyTorch, 1 GPU", 1), (f"PyTorch DDP, {n} GPUs", n)):
            times = _torch_run(args, nproc)
            if times is None:
                continue
            med = float(np.median(times))
            rows.append({"run": label, "gpus": nproc, "mode": "torch", "step_s": med,
                         "fastest_s": min(times), "samples_per_s": nproc * args.batch / med,
                         "replicas_identical": True})
    base = rows[0]["samples_per_s"]
    torch_base = next((r["samples_per_s"] for r in rows if r["run"] == "PyTorch, 1 GPU"), None)
    params = args.layers * (args.width * args.width + args.width)
    lines = [f"Data-parallel MLP {args.layers} x {args.width} (float32, {params * 4 / 2**20:.0f} "
             f"MiB of gradients), {args.batch} rows per GPU, SGD; median of {args.steps} steps",
             "", "| run | step ms | fastest ms | samples/s | vs its own 1 GPU | "
             "replicas identical |", "|---|---:|---:|---:|---:|---|"]
    for r in rows:
        own = torch_base if r["mode"] == "torch" else base
        lines.append(f"| {r['run']} | {r['step_s'] * 1e3:.2f} | {r['fastest_s'] * 1e3:.2f} | "
                     f"{r['samples_per_s']:.0f} | {r['samples_per_s'] / own:.2f}x | "
                     f"{'yes' if r['replicas_identical'] else 'NO'} |")
    print("\n".join(lines))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
