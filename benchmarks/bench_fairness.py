"""Read latency of a one-element MY_DEVICE tensor (``pg.constant(v).numpy()``)
on an idle device and while another thread floods the same device with
N x N MatMuls that it never reads: median and p99 in milliseconds, and the
deepest queue seen (unsettled ops).

    PYTHONPATH=CHECKOUT python3 benchmarks/bench_fairness.py [--size 128] [--reads 20]

Before each flooded read the producer runs alone for ``--gap`` seconds, so
the read finds whatever queue the producer could build meanwhile.
"""
from __future__ import annotations

import argparse
import statistics
import threading
import time

import numpy as np

import pluggable as pg
from pluggable._core import lib

DEVICE = "MY_DEVICE:0"


def read_once(v: np.ndarray) -> float:
    t0 = time.perf_counter()
    pg.constant(v).numpy()
    return time.perf_counter() - t0


def summary(name: str, times: list[float]) -> None:
    ms = sorted(t * 1e3 for t in times)
    p99 = ms[min(len(ms) - 1, int(round(0.99 * (len(ms) - 1))))]
    print(f"  {name:<10} median {statistics.median(ms):10.2f} ms   p99 {p99:10.2f} ms"
          f"   ({len(ms)} reads)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=128, help="producer's MatMul size")
    ap.add_argument("--reads", type=int, default=20)
    ap.add_argument("--gap", type=float, default=0.5, help="seconds between flooded reads")
    args = ap.parse_args()
    dev = pg.get_device(DEVICE)
    v = np.ones(1, np.float32)
    with pg.device(DEVICE):
        x = pg.constant(np.random.default_rng(0).standard_normal(
            (args.size, args.size)).astype(np.float32))
        read_once(v)
        idle = [read_once(v) for _ in range(args.reads)]
    stop = threading.Event()
    deepest = [0]

    def producer():
        with pg.device(DEVICE):
            while not stop.is_set():
                pg.raw_ops.MatMul(a=x, b=x)
                deepest[0] = max(deepest[0], lib.pg_device_unsettled_ops(dev._c))

    t = threading.Thread(target=producer)
    t.start()
    flooded = []
    try:
        with pg.device(DEVICE):
            for _ in range(args.reads):
                time.sleep(args.gap)
                flooded.append(read_once(v))
    finally:
        stop.set()
        t.join()
    dev.synchronize()
    print(f"{pg.__file__}: one-element read on {DEVICE}, producer MatMul {args.size}x{args.size}")
    summary("idle", idle)
    summary("flooded", flooded)
    print(f"  deepest queue seen: {deepest[0]} ops")


if __name__ == "__main__":
    main()
