"""Host<->device copy bandwidth of the CUDA reference plugin against PyTorch
(and CuPy when installed), measured in one process on GPU:0.

For 1, 16 and 256 MiB, in both directions, pageable and pinned host memory:

  pluggable, buffer: ``DeviceBuffer.copy_from_host`` / ``copy_to_host``
      (synchronous) with a preallocated host array: numpy for pageable,
      ``Device.allocate_host`` for pinned;
  pluggable, tensor (pageable): ``pg.constant(a)`` + ``pg.synchronize()`` /
      ``t.numpy()`` (allocates the tensor / the array each time);
  PyTorch pageable: ``torch.from_numpy(a).cuda()`` / ``t.cpu()``;
  PyTorch pinned: ``h.cuda(non_blocking=True)`` / ``h.copy_(t,
      non_blocking=True)`` from/into ``pin_memory()``, then a synchronize;
  CuPy pageable: ``cp.asarray`` / ``cp.asnumpy``; pinned: ``d.set(h)`` /
      ``d.get(out=h)`` with ``cupyx.empty_pinned``.

Each figure is bytes / median wall time of one synchronised copy, in GB/s.
The ratio column is pluggable / PyTorch for the same kind of host memory;
the targets (issue 13) are 0.95x pinned and 1.5x pageable.

usage: python benchmarks/bench_copies_gpu.py [--quick] [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import statistics
import sys
import time
import traceback

import numpy as np

from gpu_peers import cuda_cupy, cuda_torch, require_pluggable


pg = require_pluggable()
torch = cuda_torch()
cp, cupyx = cuda_cupy()

MIB = 1 << 20
TARGET = {"pinned": 0.95, "pageable": 1.5}


def median_rate(fn, nbytes: int, repeats: int) -> float:
    """GB/s of fn() (one synchronised copy of nbytes), median of `repeats`."""
    fn()  # warm up: plans, allocator caches, the staging ring
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return nbytes / statistics.median(times) / 1e9


def guarded(label: str, fn):
    try:
        return fn()
    except Exception as exc:  # one failing case must not hide the others
        print(f"[{label}] failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        traceback.print_exc(limit=2)
        return None


def pg_buffer(direction: str, pinned: bool, data: np.ndarray, repeats: int) -> float:
    dev = pg.get_device("GPU:0")
    n = data.nbytes
    buf = dev.allocate(n)
    host = dev.allocate_host(n) if pinned else np.empty(n, np.uint8)
    host[:] = data
    if direction == "H2D":
        return median_rate(lambda: buf.copy_from_host(host), n, repeats)
    buf.copy_from_host(host)
    return median_rate(lambda: buf.copy_to_host(host), n, repeats)


def pg_tensor(direction: str, data: np.ndarray, repeats: int) -> float:
    if direction == "H2D":
        def run():
            with pg.device("GPU:0"):
                pg.constant(data)
            pg.synchronize()
        return median_rate(run, data.nbytes, repeats)
    with pg.device("GPU:0"):
        t = pg.constant(data)
    pg.synchronize()
    return median_rate(lambda: t.numpy(), data.nbytes, repeats)


def torch_copy(direction: str, pinned: bool, data: np.ndarray, repeats: int) -> float:
    n = data.nbytes
    sync = torch.cuda.synchronize
    if pinned:
        host = torch.from_numpy(data.copy()).pin_memory()
        dev_t = torch.empty(n, dtype=torch.uint8, device="cuda")
        if direction == "H2D":
            def run():
                host.cuda(non_blocking=True)
                sync()
        else:
            def run():
                host.copy_(dev_t, non_blocking=True)
                sync()
        return median_rate(run, n, repeats)
    if direction == "H2D":
        def run():
            torch.from_numpy(data).cuda()
            sync()
        return median_rate(run, n, repeats)
    dev_t = torch.from_numpy(data).cuda()
    return median_rate(lambda: dev_t.cpu(), n, repeats)


def cupy_copy(direction: str, pinned: bool, data: np.ndarray, repeats: int) -> float:
    n = data.nbytes
    sync = cp.cuda.runtime.deviceSynchronize
    if pinned:
        host = cupyx.empty_pinned((n,), dtype=np.uint8)
        host[:] = data
        d = cp.empty(n, dtype=cp.uint8)
        if direction == "H2D":
            def run():
                d.set(host)
                sync()
        else:
            def run():
                d.get(out=host)
                sync()
        return median_rate(run, n, repeats)
    if direction == "H2D":
        def run():
            cp.asarray(data)
            sync()
        return median_rate(run, n, repeats)
    d = cp.asarray(data)
    return median_rate(lambda: cp.asnumpy(d), n, repeats)


def measure(quick: bool) -> list[dict]:
    rows = []
    for mib in (1, 16, 256):
        n = mib * MIB
        repeats = {1: 50, 16: 20, 256: 5}[mib] if not quick else {1: 20, 16: 10, 256: 3}[mib]
        data = np.random.default_rng(mib).integers(0, 256, n, dtype=np.uint8)
        for direction in ("H2D", "D2H"):
            for kind in ("pageable", "pinned"):
                pinned = kind == "pinned"
                peer_t = guarded(f"torch {direction} {kind} {mib}",
                                 lambda: torch_copy(direction, pinned, data, repeats)) \
                    if torch else None
                peer_c = guarded(f"cupy {direction} {kind} {mib}",
                                 lambda: cupy_copy(direction, pinned, data, repeats)) \
                    if cp else None
                cases = [("buffer", lambda: pg_buffer(direction, pinned, data, repeats))]
                if not pinned:
                    what = "pg.constant" if direction == "H2D" else ".numpy()"
                    cases.append((what, lambda: pg_tensor(direction, data, repeats)))
                for how, fn in cases:
                    v = guarded(f"pg {direction} {kind} {how} {mib}", fn)
                    rows.append({"size_mib": mib, "direction": direction, "host": kind,
                                 "pluggable_path": how, "pluggable": v, "torch": peer_t,
                                 "cupy": peer_c, "target": TARGET[kind]})
    return rows


def fmt(v) -> str:
    if v is None:
        return "n/a"
    return f"{v:.3g}" if v < 100 else f"{v:.0f}"


def table(rows: list[dict]) -> str:
    out = ["| size | direction | host | pluggable path | pluggable GB/s | PyTorch GB/s | "
           "CuPy GB/s | ratio to PyTorch | target |",
           "|---:|---|---|---|---:|---:|---:|---:|---|"]
    for r in rows:
        ratio = (r["pluggable"] / r["torch"]) if r["pluggable"] and r["torch"] else None
        verdict = "" if ratio is None else ("met" if ratio >= r["target"] else "not met")
        out.append(f"| {r['size_mib']} MiB | {r['direction']} | {r['host']} | "
                   f"{r['pluggable_path']} | {fmt(r['pluggable'])} | {fmt(r['torch'])} | "
                   f"{fmt(r['cupy'])} | {'n/a' if ratio is None else f'{ratio:.2f}x'} | "
                   f">= {r['target']}x {verdict} |")
    return "\n".join(out)


def environment() -> str:
    parts = [f"python {platform.python_version()}", f"numpy {np.__version__}"]
    if torch is not None:
        parts.append(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}")
    if cp is not None:
        parts.append(f"cupy {cp.__version__}")
    threads = os.environ.get("PLUGGABLE_CUDA_COPY_THREADS", "(default)")
    parts.append(f"PLUGGABLE_CUDA_COPY_THREADS={threads}")
    parts.append(f"{os.cpu_count()} CPUs")
    return ", ".join(parts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats")
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args()
    if not pg.list_physical_devices("GPU"):
        print("bench_copies_gpu: no GPU device (the CUDA reference plugin found none)")
        return 2
    rows = measure(args.quick)
    print(environment())
    print()
    print(table(rows))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(
            {"environment": environment(), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
