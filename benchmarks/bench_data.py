"""Input-pipeline benchmark: a training step on a device fed by a
``pg.data`` pipeline whose ``map`` is costly, with and without
``prefetch`` (and with a parallel map).

The step: a dense 256-512-10 model with ReLU, sparse softmax
cross-entropy, SGD, traced once with ``pg.function`` and run on the chosen
device (default MY_DEVICE). The pipeline: ``from_tensor_slices`` of 256-wide
float32 rows and labels, ``map`` of a costly host transformation (numpy
inside ``pg.py_function``: three 256x256 by 256x64 products and tanh per
row, standing for decoding and augmenting one sample), ``batch(32)``, then per mode:

  plain              no prefetch: the step waits for each batch to be made;
  prefetch           ``prefetch(AUTOTUNE)``: a background thread makes the
                     next batches while the step runs;
  prefetch+parallel  the same with ``map(num_parallel_calls=AUTOTUNE)``.

Reported: steps per second over the timed steps (after a warm-up), the
median of `--repeats` runs, and the speed-up over "plain". Each timed run
ends with a device sync (the last loss read back); ``--sync-each-step``
reads every step's loss (a loop that logs it), so that the step no longer
runs behind the pipeline asynchronously and an unprefetched pipeline
stalls the device for the whole time it makes a batch.

usage: python3 benchmarks/bench_data.py [--device MY_DEVICE] [--steps 30]
           [--repeats 3] [--sync-each-step]
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import pluggable as pg

WIDTH, HIDDEN, CLASSES, BATCH = 256, 4096, 10, 32


def costly(row: pg.Tensor, mix: np.ndarray) -> np.ndarray:
    a = row.numpy()
    m = np.outer(a, a[:64])                 # 256x64
    for _ in range(3):
        m = np.tanh(mix @ m)                # numpy releases the GIL in the product
    return m.mean(axis=1).astype(np.float32)


def pipeline(x, y, mix, mode: str) -> pg.data.Dataset:
    parallel = pg.data.AUTOTUNE if mode == "prefetch+parallel" else None
    ds = pg.data.Dataset.from_tensor_slices((x, y)).map(
        lambda r, label: (pg.py_function(lambda t: costly(t, mix), [r], pg.float32), label),
        num_parallel_calls=parallel)
    ds = ds.map(lambda r, label: (pg.reshape(r, [WIDTH]), label)).batch(BATCH,
                                                                       drop_remainder=True)
    return ds.prefetch(pg.data.AUTOTUNE) if mode != "plain" else ds


def make_step(device: str, rng):
    with pg.device(device):
        w1 = pg.Variable(rng.standard_normal((WIDTH, HIDDEN)).astype(np.float32) * 0.05)
        w2 = pg.Variable(rng.standard_normal((HIDDEN, CLASSES)).astype(np.float32) * 0.05)
    opt = pg.optimizers.SGD(0.01)

    @pg.function
    def step(xb, yb):
        with pg.GradientTape() as tape:
            logits = pg.matmul(pg.nn.relu(pg.matmul(xb, w1)), w2)
            loss = pg.reduce_mean(pg.nn.sparse_softmax_cross_entropy_with_logits(yb, logits))
        grads = tape.gradient(loss, [w1, w2])
        opt.apply_gradients(zip(grads, [w1, w2]))
        return loss
    return step


def run(device: str, steps: int, repeats: int,
        sync_each_step: bool) -> list[tuple[str, float]]:
    rng = np.random.default_rng(0)
    n = steps * BATCH
    x = rng.standard_normal((n, WIDTH)).astype(np.float32)
    y = rng.integers(0, CLASSES, n).astype(np.int32)
    mix = (rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH)).astype(np.float32)
    step = make_step(device, rng)
    out = []
    for mode in ("plain", "prefetch", "prefetch+parallel"):
        ds = pipeline(x, y, mix, mode)
        with pg.device(device):
            for xb, yb in ds.take(3):   # warm-up: traces, plans, thread start
                step(xb, yb).numpy()
            rates = []
            for _ in range(repeats):
                start = time.perf_counter()
                loss = None
                for xb, yb in ds:
                    loss = step(xb, yb)
                    if sync_each_step:
                        float(loss.numpy())
                float(loss.numpy())
                rates.append(steps / (time.perf_counter() - start))
        out.append((mode, statistics.median(rates)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="MY_DEVICE")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sync-each-step", action="store_true",
                    help="read the loss back after every step (a loop that logs it)")
    args = ap.parse_args()
    results = run(args.device, args.steps, args.repeats, args.sync_each_step)
    base = results[0][1]
    print(f"device {args.device}, batch {BATCH}, {args.steps} steps per run, median of "
          f"{args.repeats} runs, loss read back "
          f"{'after every step' if args.sync_each_step else 'at the end'}")
    print(f"{'mode':<20}{'steps/s':>10}{'speed-up':>10}")
    for mode, rate in results:
        print(f"{mode:<20}{rate:>10.1f}{rate / base:>9.2f}x")


if __name__ == "__main__":
    main()
