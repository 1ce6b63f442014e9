"""Graph mode against eager on MY_DEVICE (the host reference plugin).

Measures, in one process, per call (the best of --repeats timed batches: the
machine may be shared, and the best batch is the one least disturbed):
  1. a chain of 200 one-element ops (Mul/AddV2 alternating), eagerly, as a
     pg.function through the planned executor, and captured and replayed
     (pg.config.set_graph_capture("device")); us per node;
  2. a small MLP step (64-256-256-10, batch 32, forward with softmax: the
     fused MatMul+BiasAdd+Relu kernels of the plugin's optimizer in graph
     mode), eagerly, through the executor, and replayed; us per step;
  3. the same MLP with a host op in the middle (the hidden layer's exp on
     CPU:0), eagerly, through the executor, and with its two device
     partitions captured and replayed (set_graph_capture("partitions"));
  4. tracing time per node of the 200-node chain (get_concrete_function),
     then optimising and planning it with its first run, per node;
  5. a function of a single one-element op (x + 0.5), eagerly, through the
     executor and replayed: the fixed cost of a call; us per call.
Every timed call ends with pg.synchronize(), so device work is counted.
Prints a markdown table; --json PATH writes the rows.

usage: python benchmarks/graph_vs_eager.py [--repeats N] [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
import pluggable as pg  # noqa: E402

DEV = "MY_DEVICE:0"
CHAIN = 200


def _timed(fn, calls: int, repeats: int) -> float:
    """Median seconds per call of `fn` over `repeats` batches of `calls`."""
    fn()
    pg.synchronize()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        pg.synchronize()
        samples.append((time.perf_counter() - t0) / calls)
    return min(samples)


def _chain():
    """A function of CHAIN one-element ops: x * 1.0001, + 0.5, alternating
    (the scalars are device tensors made once, as a graph's constants are)."""
    k, c = pg.constant(np.float32(1.0001)), pg.constant(np.float32(0.5))

    def chain(x):
        for _ in range(CHAIN // 2):
            x = pg.add(pg.multiply(x, k), c)
        return x
    return chain


def _mlp(rng):
    sizes = (64, 256, 256, 10)
    ws = [pg.constant((rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32))
          for a, b in zip(sizes, sizes[1:])]
    bs = [pg.constant(rng.standard_normal(b).astype(np.float32) * 0.1) for b in sizes[1:]]

    def step(x):
        h = pg.nn.relu(pg.add(pg.matmul(x, ws[0]), bs[0]))
        h = pg.nn.relu(pg.add(pg.matmul(h, ws[1]), bs[1]))
        return pg.nn.softmax(pg.add(pg.matmul(h, ws[2]), bs[2]))
    return step


def _split_mlp(rng):
    """The MLP with a host op between its layers: two device partitions."""
    step = _mlp(rng)
    sizes = (64, 256)
    w = pg.constant((rng.standard_normal(sizes) / 8).astype(np.float32))

    def split(x):
        h = pg.nn.relu(pg.matmul(x, w))
        with pg.device("CPU:0"):
            h = pg.exp(h * -1.0)
        return step(pg.matmul(h, pg.transpose(w)))
    return split


def _three_ways(fn, x, calls: int, repeats: int, policy: str = "device") -> dict:
    """Seconds per call eagerly, through the executor and replayed."""
    out = {"eager": _timed(lambda: fn(x), calls, repeats)}
    pg.config.set_graph_capture("off")
    planned = pg.function(fn)
    out["planned"] = _timed(lambda: planned(x), calls, repeats)
    pg.config.set_graph_capture(policy)
    captured = pg.function(fn)
    for _ in range(4):          # warm-up runs, then the capture
        captured(x)
    out["replayed"] = _timed(lambda: captured(x), calls, repeats)
    stats = captured.get_concrete_function(x).capture_stats()
    out["captured"] = bool(stats and stats["graphs"])
    out["partitions"] = stats["captured_partitions"] if stats else 0
    pg.config.set_graph_capture("off")
    np.testing.assert_allclose(planned(x).numpy(), fn(x).numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(captured(x).numpy(), fn(x).numpy(), rtol=1e-5, atol=1e-6)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--json", type=pathlib.Path)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    rows = []
    with pg.device(DEV):
        x1 = pg.constant(np.float32(rng.standard_normal()))
        chain = _chain()
        t = _three_ways(chain, x1, 20, args.repeats)
        for k in ("eager", "planned", "replayed"):
            rows.append((f"{CHAIN}-node chain of 1-element ops, {k}", t[k] * 1e6 / CHAIN,
                         "us/node", t[k] / t["eager"]))
        traces, plans = [], []
        for _ in range(3):
            f = pg.function(chain)
            t0 = time.perf_counter()
            cf = f.get_concrete_function(x1)
            t1 = time.perf_counter()
            cf(x1)
            pg.synchronize()
            traces.append(t1 - t0)
            plans.append(time.perf_counter() - t1)
        rows.append((f"tracing the {CHAIN}-node chain (get_concrete_function)",
                     min(traces) * 1e6 / CHAIN, "us/node", None))
        rows.append((f"optimise + plan + first run of the {CHAIN}-node chain",
                     min(plans) * 1e6 / CHAIN, "us/node", None))
        xb = pg.constant(rng.standard_normal((32, 64)).astype(np.float32))
        t = _three_ways(_mlp(rng), xb, 200, args.repeats)
        for k in ("eager", "planned", "replayed"):
            rows.append((f"MLP 64-256-256-10 batch 32 forward step, {k}", t[k] * 1e6,
                         "us/step", t[k] / t["eager"]))
        t = _three_ways(_split_mlp(rng), xb, 100, args.repeats, policy="partitions")
        names = {"eager": "eager", "planned": "planned executor",
                 "replayed": f"{t['partitions']} partitions captured and replayed"}
        for k in ("eager", "planned", "replayed"):
            rows.append((f"MLP with a CPU op between layers, batch 32, {names[k]}", t[k] * 1e6,
                         "us/step", t[k] / t["eager"]))
        c = pg.constant(np.float32(0.5))
        t = _three_ways(lambda v: pg.add(v, c), x1, 2000, args.repeats)
        for k in ("eager", "planned", "replayed"):
            rows.append((f"one 1-element op as a function (a call's fixed cost), {k}",
                         t[k] * 1e6, "us/call", t[k] / t["eager"]))
    print(f"pluggable {pg.__file__}, device {DEV}, best of {args.repeats} batches\n")
    print("| what | time | unit | vs eager |\n| --- | ---: | --- | ---: |")
    for what, v, unit, ratio in rows:
        print(f"| {what} | {v:.2f} | {unit} | {'' if ratio is None else f'{ratio:.3f}x'} |")
    if args.json:
        args.json.write_text(json.dumps([dict(zip(("what", "value", "unit", "vs_eager"), r))
                                         for r in rows], indent=1))


if __name__ == "__main__":
    main()
