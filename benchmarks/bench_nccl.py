"""All-reduce bus bandwidth: pg.distribute on the CUDA plugin's NCCL kernels
against torch.distributed with NCCL, in the same run.

World size = the GPUs present (or --gpus). For each message size (float32,
1 KiB .. 1 GiB per GPU by powers of 4):
  - pluggable: ``pg.distribute.all_reduce`` over one tensor per GPU in ONE
    process (the plugin issues the ranks' ncclAllReduce calls in one group
    over an ncclCommInitAll clique); a call returns once every rank is
    enqueued, the time is taken over back-to-back calls to a final
    synchronisation, so it includes the framework's dispatch.
  - pluggable, processes: ``pg.distribute.all_reduce`` of one tensor per
    process, one process per GPU (``python -m pluggable.distribute.run``,
    the process group's NCCL backend), timed like torch below: back-to-back
    calls to a wait for the GPU, the slowest rank's time.
  - pluggable, processes, donated: the same with ``donate=True`` (``x =
    all_reduce(x, donate=True)`` on zeros: NCCL reduces in place, as
    torch's in-place call does).
  - torch: ``torch.distributed.all_reduce`` (backend nccl), one process per
    GPU (torch.multiprocessing), rank 0's time over back-to-back calls to
    torch.cuda.synchronize (in place).
Each size is timed in --repeats loops per side; the fastest loop counts
(the lent machines' hosts are noisy: single loops of torch's own small
all-reduce moved between 29 and 83 us in one run).
Bus bandwidth follows nccl-tests: algbw = bytes / time, busbw = algbw *
2 (n - 1) / n. With ONE GPU, busbw is 0 by definition (nothing crosses a
link): the table then shows the time and algbw of the single-rank path (a
device-local copy inside NCCL plus the dispatch) and says so.

Prints a markdown table; ``--json PATH`` writes the rows.

usage: python3 benchmarks/bench_nccl.py [--gpus N] [--max-bytes 1073741824]
           [--seconds 0.2] [--repeats 3] [--json PATH] [--no-torch]
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import socket
import subprocess
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _sizes(max_bytes: int) -> list[int]:
    out, b = [], 1024
    while b <= max_bytes:
        out.append(b)
        b *= 4
    return out


def _iters(run_once, seconds: float) -> int:
    """Back-to-back calls that take about `seconds` (at least 3)."""
    t0 = time.perf_counter()
    run_once()
    dt = max(time.perf_counter() - t0, 1e-6)
    return int(min(max(3, seconds / dt), 2000))


def bench_pluggable(n: int, sizes: list[int], seconds: float) -> dict[int, float]:
    """{bytes: seconds per all-reduce} over GPU:0..n-1 in this process."""
    import pluggable as pg
    out = {}
    for nbytes in sizes:
        xs = []
        for i in range(n):
            with pg.device(f"GPU:{i}"):
                xs.append(pg.constant(np.ones(nbytes // 4, np.float32)))
        for _ in range(3):
            pg.distribute.all_reduce(xs)
        pg.synchronize()

        def once():
            pg.distribute.all_reduce(xs)
            pg.synchronize()
        k = _iters(once, seconds)
        t0 = time.perf_counter()
        for _ in range(k):
            ys = pg.distribute.all_reduce(xs)
        pg.synchronize()
        out[nbytes] = (time.perf_counter() - t0) / k
        got = ys[0].numpy()[:4]
        assert np.all(got == n), f"all-reduce of ones over {n} GPUs gave {got}"
        del xs, ys
    return out


def _pg_worker(args) -> int:
    """One rank of the process-group measurement; rank 0 writes --out."""
    import pluggable as pg
    d = pg.distribute
    d.init_process_group(timeout=600)
    n, dev_name = d.get_world_size(), f"GPU:{int(os.environ['LOCAL_RANK'])}"
    dev = pg.get_device(dev_name)

    def slowest(t: float) -> float:      # a CPU tensor: the host backend
        return float(d.all_reduce(pg.constant(np.array([t])), "max").numpy()[0])
    out = {}
    for nbytes in _sizes(args.max_bytes):
        with pg.device(dev_name):
            # ones (the result is n), or zeros reduced over themselves in place
            x = pg.constant((np.zeros if args.donate else np.ones)(nbytes // 4, np.float32))

        def call(x):
            return d.all_reduce(x, donate=True) if args.donate else d.all_reduce(x)
        y = x
        for _ in range(3):
            y = call(y if args.donate else x)
        dev.synchronize()
        t0 = time.perf_counter()
        y = call(y if args.donate else x)
        dev.synchronize()
        k = int(min(max(3, args.seconds / max(slowest(time.perf_counter() - t0), 1e-6)), 2000))
        best = float("inf")
        for _ in range(args.repeats):
            d.barrier()
            t0 = time.perf_counter()
            if args.donate:
                for _ in range(k):
                    y = d.all_reduce(y, donate=True)
            else:
                for _ in range(k):
                    y = d.all_reduce(x)
            dev.synchronize()
            best = min(best, slowest((time.perf_counter() - t0) / k))
        out[nbytes] = best
        got = y.numpy()[:4]
        want = 0 if args.donate else n
        assert np.all(got == want), f"all-reduce over {n} processes gave {got}, not {want}"
        del x, y
    if d.get_rank() == 0:
        pathlib.Path(args.out).write_text(json.dumps({str(b): t for b, t in out.items()}))
    d.destroy_process_group()
    return 0


def bench_processes(n: int, args, donate: bool = False) -> dict[int, float]:
    """{bytes: seconds per all-reduce} with one process per GPU (the input
    donated if `donate`)."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rows.json")
        env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        cmd = [sys.executable, "-m", "pluggable.distribute.run", "--nproc", str(n),
               os.path.abspath(__file__), "--pg-worker", "--out", out,
               "--max-bytes", str(args.max_bytes), "--seconds", str(args.seconds),
               "--repeats", str(args.repeats)] + (["--donate"] if donate else [])
        subprocess.run(cmd, env=env, cwd=ROOT, check=True)
        return {int(b): t for b, t in json.loads(pathlib.Path(out).read_text()).items()}


def _torch_worker(rank: int, n: int, port: int, sizes: list[int], seconds: float, repeats: int,
                  queue) -> None:
    import torch
    import torch.distributed as dist
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=n, device_id=torch.device(f"cuda:{rank}"))
    out = {}
    for nbytes in sizes:
        x = torch.ones(nbytes // 4, dtype=torch.float32, device=f"cuda:{rank}")
        for _ in range(3):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        dist.all_reduce(x)
        torch.cuda.synchronize()
        k = int(min(max(3, seconds / max(time.perf_counter() - t0, 1e-6)), 2000))
        kt = torch.tensor([k], device=f"cuda:{rank}")
        dist.all_reduce(kt, op=dist.ReduceOp.MAX)  # the same count on every rank
        k = int(kt.item())
        best = float("inf")
        for _ in range(repeats):
            dist.barrier()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(k):
                dist.all_reduce(x)
            torch.cuda.synchronize()
            # the slowest rank's time, as for pluggable's processes
            took = torch.tensor([time.perf_counter() - t0], device=f"cuda:{rank}")
            dist.all_reduce(took, op=dist.ReduceOp.MAX)
            best = min(best, float(took.item()) / k)
        out[nbytes] = best
        del x
    if rank == 0:
        queue.put(out)
    dist.destroy_process_group()


def bench_torch(n: int, sizes: list[int], seconds: float,
                repeats: int) -> tuple[dict[int, float] | None, str]:
    """({bytes: seconds per all-reduce}, note) with torch.distributed/NCCL."""
    try:
        import torch
        import torch.multiprocessing as mp
    except ImportError:
        return None, "torch is not installed"
    if not torch.cuda.is_available() or torch.cuda.device_count() < n:
        return None, f"torch sees {torch.cuda.device_count()} GPUs, {n} needed"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_torch_worker, args=(r, n, port, sizes, seconds, repeats, queue))
             for r in range(n)]
    for p in procs:
        p.start()
    try:
        result = queue.get(timeout=600)
    finally:
        for p in procs:
            p.join(timeout=60)
    version = ".".join(str(v) for v in torch.cuda.nccl.version()) if hasattr(
        torch.cuda, "nccl") else "?"
    return result, f"torch {torch.__version__}, NCCL {version}"


def _busbw(nbytes: int, t: float, n: int) -> float:
    return nbytes / t * (2 * (n - 1) / n) / 1e9


def _fmt_size(b: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= scale:
            return f"{b // scale} {unit}"
    return f"{b} B"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", type=int, default=0, help="world size (default: all GPUs)")
    ap.add_argument("--max-bytes", type=int, default=1 << 30)
    ap.add_argument("--seconds", type=float, default=0.2, help="time per size and peer")
    ap.add_argument("--repeats", type=int, default=3,
                    help="timed loops per size and peer; the fastest counts")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--pg-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--donate", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.pg_worker:
        return _pg_worker(args)

    import pluggable as pg
    gpus = len(pg.list_physical_devices("GPU"))
    if gpus == 0:
        print("no GPU device present: nothing to measure")
        return 0
    n = args.gpus or gpus
    sizes = _sizes(args.max_bytes)
    mine = bench_pluggable(n, sizes, args.seconds)
    procs = bench_processes(n, args) if n > 1 else {}
    donated = bench_processes(n, args, donate=True) if n > 1 else {}
    theirs, note = (None, "skipped (--no-torch)") if args.no_torch else bench_torch(
        n, sizes, args.seconds, args.repeats)

    print(f"all-reduce, float32, world size {n} ({gpus} GPUs present); "
          f"PLUGGABLE_NCCL_LIBRARY={os.environ.get('PLUGGABLE_NCCL_LIBRARY', '(unset)')}; "
          f"peer: {note}")
    if n == 1:
        print("ONE GPU: bus bandwidth is 0 by definition (nothing crosses a link); the table "
              "shows the single-rank path's time and algbw (bytes / time) instead.\n")
    metric = "algbw GB/s" if n == 1 else "busbw GB/s"

    def bw_of(b: int, t: float | None) -> float | None:
        return None if t is None else (b / t / 1e9 if n == 1 else _busbw(b, t, n))

    def cell(v: float | None, scale: float = 1.0, fmt: str = ".2f") -> str:
        return "-" if v is None else format(v * scale, fmt)
    print(f"| size | 1 process us | 1 process {metric} | {n} processes us | "
          f"{n} processes {metric} | {n} processes, donated us | donated {metric} | "
          f"torch us | torch {metric} | torch time / "
          f"{'1 process' if n == 1 else f'{n} processes'} | torch time / donated |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for b in sizes:
        t, tp, td = mine[b], procs.get(b), donated.get(b)
        tt = theirs.get(b) if theirs else None
        ours = tp if tp is not None else t
        ratio = None if tt is None else tt / ours
        ratio_d = None if tt is None or td is None else tt / td
        rows.append(dict(bytes=b, world_size=n, pluggable_s=t, pluggable_processes_s=tp,
                         pluggable_donated_s=td, torch_s=tt, pluggable_gbps=bw_of(b, t),
                         pluggable_processes_gbps=bw_of(b, tp),
                         pluggable_donated_gbps=bw_of(b, td), torch_gbps=bw_of(b, tt),
                         metric=metric, ratio=ratio, ratio_donated=ratio_d))
        print(f"| {_fmt_size(b)} | {t * 1e6:.1f} | {cell(bw_of(b, t))} | {cell(tp, 1e6, '.1f')} | "
              f"{cell(bw_of(b, tp))} | {cell(td, 1e6, '.1f')} | {cell(bw_of(b, td))} | "
              f"{cell(tt, 1e6, '.1f')} | {cell(bw_of(b, tt))} | "
              f"{'-' if ratio is None else f'{ratio:.2f}x'} | "
              f"{'-' if ratio_d is None else f'{ratio_d:.2f}x'} |")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(dict(world_size=n, note=note, rows=rows),
                                                      indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
