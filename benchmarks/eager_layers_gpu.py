"""Where a one-element eager op's time goes on a GPU, beside PyTorch in the
same process: the whole call, the call into the core alone, and the
allocation and Fill rows, in microseconds per call (median of 7 runs of N
calls, each run ending with a synchronisation).

  pg C pg_kernel_run1 (AddV2)   the core's kernel call and the release of its
                                output, from Python through cffi, with the
                                kernel instance, inputs and expected shape
                                prepared once: the plugin's launch, the
                                core's per-op event and state, the allocation
  pg a + b / raw_ops.AddV2      the whole eager call (operator or raw op)
  pg Relu 1024, pg a * 2.0      the other dispatch rows of bench_gpu.py
  pg dev.allocate 1 MiB         Device.allocate and its release
  pg C alloc_tensor 1 MiB       the core's allocation and release alone
  pg Fill 1 MiB                 raw_ops.Fill with dims and value on the host
  torch ...                     the same calls in PyTorch

The difference between the whole call and the core's call is the Python
side; the core's call less the plugin's launch (a CUDA kernel launch costs
3.3-4 us on the lent H100 hosts) is the core and plugin bookkeeping.

usage: python3 benchmarks/eager_layers_gpu.py [--device GPU:0] [--calls N] [--no-torch]
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import pluggable as pg
from pluggable._core import ffi, lib


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="GPU:0")
    ap.add_argument("--calls", type=int, default=4000)
    ap.add_argument("--no-torch", action="store_true", help="pluggable's rows only")
    args = ap.parse_args(argv)
    n = args.calls
    torch = None
    if not args.no_torch:
        try:
            import torch
            if not torch.cuda.is_available():
                torch = None
        except ImportError:
            torch = None

    def row(name, body, sync):
        def run():
            for _ in range(n):
                body()
        run()
        sync()
        times = []
        for _ in range(7):
            sync()
            t0 = time.perf_counter()
            run()
            sync()
            times.append((time.perf_counter() - t0) / n * 1e6)
        print(f"{name:40s} {statistics.median(times):8.2f} us", flush=True)

    dev = pg.get_device(args.device)
    with pg.device(args.device):
        a = pg.constant(np.ones(1, np.float32))
        b = pg.constant(np.ones(1, np.float32))
        r = pg.constant(np.ones(1024, np.float32))
        pg.raw_ops.AddV2(x=a, y=b)
        pg.synchronize()
    plan = next(iter(pg.registry.OPS["AddV2"].fast.values()))
    st = lib.TF_NewStatus()
    expect = ffi.new("int64_t[]", [1, 1])
    handles = [a._h, b._h]
    run1, delete, kinst = lib.pg_kernel_run1, lib.TF_DeleteTensor, plan.kinst
    dims = ffi.new("int64_t[1]", [1 << 20])
    with pg.device("CPU:0"):
        fill_dims = pg.constant(np.array([1 << 20], np.int32))
        fill_value = pg.constant(np.uint8(0))
    sync = pg.synchronize
    with pg.device(args.device):
        row("pg C pg_kernel_run1 (AddV2)", lambda: delete(run1(kinst, handles, expect, st)), sync)
        row("pg a + b", lambda: a + b, sync)
        row("pg raw_ops.AddV2", lambda: pg.raw_ops.AddV2(x=a, y=b), sync)
        row("pg Relu 1024", lambda: pg.raw_ops.Relu(features=r), sync)
        row("pg a * 2.0", lambda: a * 2.0, sync)
        row("pg dev.allocate 1 MiB", lambda: dev.allocate(1 << 20), sync)
        row("pg C alloc_tensor 1 MiB",
            lambda: delete(lib.pg_device_alloc_tensor(dev._c, 4, dims, 1, st)), sync)
        row("pg Fill 1 MiB", lambda: pg.raw_ops.Fill(dims=fill_dims, value=fill_value), sync)
    lib.TF_DeleteStatus(st)
    if torch is not None:
        ta, tb = torch.ones(1, device="cuda"), torch.ones(1, device="cuda")
        tr = torch.ones(1024, device="cuda")
        ts = torch.cuda.synchronize
        row("torch a + b", lambda: ta + tb, ts)
        row("torch relu 1024", lambda: torch.relu(tr), ts)
        row("torch a * 2.0", lambda: ta * 2.0, ts)
        row("torch empty 1 MiB", lambda: torch.empty(1 << 20, dtype=torch.uint8, device="cuda"),
            ts)
        row("torch full 1 MiB",
            lambda: torch.full((1 << 20,), 0, dtype=torch.uint8, device="cuda"), ts)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
