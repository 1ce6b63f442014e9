"""Where the time of a traced batch-1 MLP call goes on a GPU, beside
PyTorch: the graph-mode issue's batch-1 figure (traced / PyTorch eager)
split into host launch time and synchronisation.

The model is graph_gpu.py's MLP 1024-4096-4096-1024 (float32, TF32 off).
Each row is the median over 300 calls after warm-up, in microseconds:

  traced, sync all / GPU:0 / device   ``planned(x)`` then ``pg.synchronize()``
                                      (every plugin device), then only the
                                      GPU, then ``Device.synchronize``
  traced launch only                  ``planned(x)`` on an idle GPU, without
                                      waiting (the host's part of a call)
  traced back-to-back per call        200 calls, one wait at the end
  idle ... synchronize                a wait with nothing to wait for
  eager, ... / eager launch only      the same function op by op
  1 AddV2 + sync                      one 1-element op and a wait
  torch eager / launch only / idle sync / CUDA graph
                                      the same for ``torch.nn.Sequential``
                                      and its captured CUDA graph (input
                                      copied in, replay, output cloned)

Then the functions of a cProfile of 500 traced calls, by own time. Set
PLUGGABLE_CUDA_GEMV=0 for the cuBLAS path instead of the plugin's
matrix-vector kernels, PLUGGABLE_CUDA_PDL=0 for those without programmatic
dependent launch.

usage: python3 benchmarks/graph_breakdown_gpu.py [--device GPU:0]
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import graph_gpu as G  # noqa: E402  (the same model and weights)

pg = G.pg


def _median(f, sync, n: int = 300) -> float:
    """graph_gpu.py's timing of one case (median of `f(); sync()` after 20
    warm-up calls), in us."""
    return G._median_calls_in_turns({"f": (f, sync)}, 20, n)["f"] * 1e6


def _launch_only(f, sync, n: int = 300) -> float:
    for _ in range(20):
        f()
    sync()
    samples = []
    for _ in range(n):
        sync()
        t0 = time.perf_counter()
        f()
        samples.append(time.perf_counter() - t0)
    sync()
    return statistics.median(samples) * 1e6


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="GPU:0")
    args = ap.parse_args(argv)
    if not pg.list_physical_devices("GPU"):
        print("no GPU device present: nothing to measure")
        return 0
    sizes = [1024, 4096, 4096, 1024]
    weights = G.make_weights(sizes)
    dev = args.device
    fn = G.pluggable_mlp(weights, dev)
    xa = np.random.default_rng(1).standard_normal((1, sizes[0])).astype(np.float32)
    rows = {}
    with pg.device(dev):
        x = pg.constant(xa)
        pg.config.set_graph_capture("off")
        planned = pg.function(fn)
        planned(x)
        gdev = pg.get_device(dev)
        rows["traced, sync all"] = _median(lambda: planned(x), pg.synchronize)
        rows[f"traced, sync {dev}"] = _median(lambda: planned(x), lambda: pg.synchronize(dev))
        rows["traced, dev.synchronize"] = _median(lambda: planned(x), gdev.synchronize)
        rows["traced launch only"] = _launch_only(lambda: planned(x), gdev.synchronize)
        rows["idle dev.synchronize"] = _median(lambda: None, gdev.synchronize)
        rows["idle pg.synchronize()"] = _median(lambda: None, pg.synchronize)
        rows["eager, dev.synchronize"] = _median(lambda: fn(x), gdev.synchronize)
        rows["eager launch only"] = _launch_only(lambda: fn(x), gdev.synchronize)
        rows["1 AddV2 + sync"] = _median(lambda: pg.raw_ops.AddV2(x=x, y=x), gdev.synchronize)
        for _ in range(10):
            planned(x)
        gdev.synchronize()
        t0 = time.perf_counter()
        for _ in range(200):
            planned(x)
        gdev.synchronize()
        rows["traced back-to-back per call"] = (time.perf_counter() - t0) / 200 * 1e6
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(500):
            planned(x)
        gdev.synchronize()
        prof.disable()
    torch = G.torch
    if torch is not None:
        torch.backends.cuda.matmul.allow_tf32 = False
        model = G.torch_mlp(weights)
        xt = torch.from_numpy(xa).cuda()
        with torch.no_grad():
            rows["torch eager"] = _median(lambda: model(xt), torch.cuda.synchronize)
            rows["torch launch only"] = _launch_only(lambda: model(xt), torch.cuda.synchronize)
            rows["torch idle sync"] = _median(lambda: None, torch.cuda.synchronize)
        call = G.torch_graph(model, xt)
        rows["torch CUDA graph"] = _median(lambda: call(xt), torch.cuda.synchronize)
    print(f"MLP {'-'.join(map(str, sizes))} float32, batch 1, on {dev} "
          f"(PLUGGABLE_CUDA_GEMV={os.environ.get('PLUGGABLE_CUDA_GEMV', '(unset)')}, "
          f"PLUGGABLE_CUDA_PDL={os.environ.get('PLUGGABLE_CUDA_PDL', '(unset)')})")
    for k, v in rows.items():
        print(f"{k:32s} {v:8.1f} us")
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(8)
    print(out.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
