"""Train a small CNN on scikit-learn's bundled 8x8 digits with pluggable.

The model is the usual one a TensorFlow user writes by hand: two blocks of
Conv2D + BiasAdd + Relu + MaxPool, a hidden Dense layer, a Dense layer of
logits and the sparse softmax cross-entropy, trained with Adam. Every op,
the backward pass and the Adam step (``ResourceApplyAdam``) run on the
device chosen with ``--device``. With ``--function`` each training step is
traced once into a graph (``pg.function``) that later steps replay.

    python3 examples/train_digits.py --device MY_DEVICE      # full run
    python3 examples/train_digits.py --quick                 # a few seconds
    python3 examples/train_digits.py --device GPU:0 --epochs 30
    python3 examples/train_digits.py --quick --function      # steps as graphs

Needs the ``examples`` extra (``pip install -e ".[examples]"``: scikit-learn,
whose bundled data set is used, nothing is downloaded; matplotlib for the
plot; tqdm for the progress bar). Prints the loss, test accuracy, time and
examples/s of each epoch and, at the end, on which devices the kernels of
a training step ran (and why any op ran elsewhere). Writes the loss curve as a PNG
(``--png``, default ``train_digits_loss.png``).
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from typing import Callable, TextIO

import numpy as np

import pluggable as pg


# ------------------------------------------------------------------ data

def load_digits(seed: int, test_fraction: float = 0.2):
    """(x_train, y_train, x_test, y_test): NHWC float32 images in [0, 1] and
    int64 labels, split per class (stratified) with `seed`."""
    try:
        from sklearn.datasets import load_digits as sk_load_digits
    except ImportError:
        sys.exit("train_digits needs scikit-learn: pip install -e \".[examples]\"")
    digits = sk_load_digits()
    x = (digits.images / 16.0).astype(np.float32)[..., None]
    y = digits.target.astype(np.int64)
    rng = np.random.default_rng(seed)
    test = np.zeros(len(y), bool)
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        test[idx[:round(len(idx) * test_fraction)]] = True
    return x[~test], y[~test], x[test], y[test]


# ------------------------------------------------------------------ model

def _he(rng: np.random.Generator, shape: tuple, fan_in: int) -> np.ndarray:
    return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)


class DigitsCNN:
    """conv 3x3x16 - pool - conv 3x3x32 - pool - dense 64 - dense 10, NHWC."""

    def __init__(self, rng: np.random.Generator, filters: tuple = (16, 32), hidden: int = 64):
        f1, f2 = filters
        self.conv1 = pg.Variable(_he(rng, (3, 3, 1, f1), 9), name="conv1/kernel")
        self.conv1_bias = pg.Variable(np.zeros(f1, np.float32), name="conv1/bias")
        self.conv2 = pg.Variable(_he(rng, (3, 3, f1, f2), 9 * f1), name="conv2/kernel")
        self.conv2_bias = pg.Variable(np.zeros(f2, np.float32), name="conv2/bias")
        self.flat = 2 * 2 * f2
        self.dense1 = pg.Variable(_he(rng, (self.flat, hidden), self.flat), name="dense1/kernel")
        self.dense1_bias = pg.Variable(np.zeros(hidden, np.float32), name="dense1/bias")
        self.dense2 = pg.Variable(_he(rng, (hidden, 10), hidden), name="dense2/kernel")
        self.dense2_bias = pg.Variable(np.zeros(10, np.float32), name="dense2/bias")

    @property
    def trainable_variables(self) -> list:
        return [self.conv1, self.conv1_bias, self.conv2, self.conv2_bias,
                self.dense1, self.dense1_bias, self.dense2, self.dense2_bias]

    @staticmethod
    def _conv_block(x, kernel, bias):
        h = pg.nn.conv2d(x, kernel, strides=1, padding="SAME")                # Conv2D
        h = pg.nn.relu(pg.nn.bias_add(h, bias))                               # BiasAdd, Relu
        return pg.nn.max_pool2d(h, ksize=2, strides=2, padding="VALID")       # MaxPool

    def __call__(self, images):
        """Logits (batch, 10) of NHWC images (batch, 8, 8, 1)."""
        h = self._conv_block(images, self.conv1, self.conv1_bias)        # (b, 4, 4, f1)
        h = self._conv_block(h, self.conv2, self.conv2_bias)             # (b, 2, 2, f2)
        h = pg.reshape(h, [-1, self.flat])
        h = pg.nn.relu(pg.nn.bias_add(pg.matmul(h, self.dense1), self.dense1_bias))
        return pg.nn.bias_add(pg.matmul(h, self.dense2), self.dense2_bias)


def loss_fn(logits, labels):
    """Mean sparse softmax cross-entropy (SparseSoftmaxCrossEntropyWithLogits)."""
    return pg.reduce_mean(pg.nn.sparse_softmax_cross_entropy_with_logits(labels=labels,
                                                                         logits=logits))


def train_step(model: DigitsCNN, optimizer, images, labels):
    """One step: forward, backward, Adam update. Returns the loss tensor."""
    with pg.GradientTape() as tape:
        loss = loss_fn(model(images), labels)
    variables = model.trainable_variables
    optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
    return loss


def make_step(model: DigitsCNN, optimizer, function: bool = False) -> Callable:
    """``train_step`` of `model` and `optimizer` on (images, labels); traced
    into a graph with ``pg.function`` when `function`."""
    def step(images, labels):
        return train_step(model, optimizer, images, labels)
    return pg.function(step) if function else step


def accuracy(model: DigitsCNN, images, labels: np.ndarray) -> float:
    """Fraction of `images` (a tensor on the device) classified as `labels`."""
    predicted = pg.argmax(model(images), axis=1).numpy()
    return float(np.mean(predicted == labels))


# ------------------------------------------------------------------ progress

class Progress:
    """A tqdm bar over the steps of an epoch on a terminal (none in logs and
    CI), then one line per epoch: loss, test accuracy, time, examples/s."""

    def __init__(self, stream: TextIO | None):
        self.stream = stream
        self.live = bool(stream is not None and getattr(stream, "isatty", lambda: False)())
        self._bar = None

    def start_epoch(self, epoch: int, epochs: int, steps: int) -> None:
        if self.live:
            from tqdm import tqdm
            self._bar = tqdm(total=steps, desc=f"epoch {epoch}/{epochs}", file=self.stream,
                             leave=False, unit="step", dynamic_ncols=True,
                             mininterval=0, miniters=1)

    def update(self, loss: float | None) -> None:
        if self._bar is not None:
            if loss is not None:
                self._bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
            self._bar.update(1)

    def end_epoch(self, epoch: int, epochs: int, loss: float, accuracy: float,
                  seconds: float, examples: int) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        if self.stream is not None:
            self.stream.write(f"epoch {epoch:>{len(str(epochs))}}/{epochs}  loss {loss:.4f}  "
                              f"test accuracy {accuracy:.2%}  {seconds:.2f} s  "
                              f"{examples / max(seconds, 1e-9):,.0f} examples/s\n")
            self.stream.flush()


# ------------------------------------------------------------------ where the ops ran

def kernel_counts() -> dict:
    """How many times each (op, device type) kernel has run so far."""
    return pg.testing.kernel_call_counts()


def placement_summary(before: dict, after: dict, device: str) -> list[str]:
    """Lines saying how many kernel calls between two ``kernel_counts``
    snapshots ran on each device type and, for any op that ran elsewhere
    than `device`'s type, why."""
    ran = {k: after[k] - before.get(k, 0) for k in after if after[k] > before.get(k, 0)}
    dev_type = device.split(":")[0].upper()
    per_type: dict = {}
    for (op, t), n in ran.items():
        per_type[t] = per_type.get(t, 0) + n
    names = {"DEFAULT": "device-agnostic kernels (on the tensors' device)"}
    lines = ["kernel calls of the last training step: " + ", ".join(
        f"{n:,} {names.get(t, 'on ' + t)}" for t, n in sorted(per_type.items(),
                                                                key=lambda kv: -kv[1]))]
    elsewhere = sorted((op, t, n) for (op, t), n in ran.items() if t not in (dev_type, "DEFAULT"))
    if not elsewhere:
        lines.append(f"every op of the step ran on {device}")
    for op, t, n in elsewhere:
        why = (f"no {dev_type} kernel for {op}" if not pg.testing.has_kernel(op, dev_type)
               else f"its inputs were on {t}")
        lines.append(f"  {op}: {n} call(s) on {t} ({why})")
    return lines


# ------------------------------------------------------------------ plot

def write_loss_plot(path: str, step_losses: list, steps_per_epoch: int, device: str) -> None:
    """The loss curve with matplotlib: each step's loss and each epoch's
    mean against the step, on a log scale, with axes, legend and title."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("the loss plot needs matplotlib: pip install -e \".[examples]\" (or --png '')")
    losses = np.asarray(step_losses, np.float64)
    epochs = -(-len(losses) // max(steps_per_epoch, 1))
    means = [losses[e * steps_per_epoch:(e + 1) * steps_per_epoch].mean() for e in range(epochs)]
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    ax.plot(np.arange(1, len(losses) + 1) / steps_per_epoch, losses, color="#78aae6",
            linewidth=1, label="loss of each step")
    ax.plot(np.arange(epochs) + 0.5, means, color="#b41e1e", marker="o", linewidth=2,
            label="mean loss of the epoch")
    ax.set_yscale("log")
    ax.set_xlabel("epoch")
    ax.set_ylabel("sparse softmax cross-entropy")
    ax.set_title(f"digits CNN on {device}: training loss")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# ------------------------------------------------------------------ training

@dataclasses.dataclass
class Result:
    """What ``train`` measured: the final test accuracy, the mean loss of
    each epoch and the loss of each step, and the training time."""
    device: str
    epochs: int
    test_accuracy: float
    epoch_losses: list
    step_losses: list
    seconds: float
    traces: int = 0          # traces of the step function (--function)
    epoch_seconds: list = dataclasses.field(default_factory=list)
    examples_per_second: float = 0.0   # training examples per second of training
    placement: list = dataclasses.field(default_factory=list)  # placement_summary's lines


def cosine_decay(learning_rate: float, total_steps: int,
                 floor: float = 0.05) -> "pg.optimizers.schedules.Tabulated":
    """The learning rate at each step: from `learning_rate` down to
    `floor` times it at the last step, along half a cosine. A table of the
    rate of each step, which the optimizer reads when a step runs (so a
    step traced with ``--function`` follows it too)."""
    t = np.minimum(np.arange(total_steps) / max(total_steps - 1, 1), 1.0)
    rates = learning_rate * (floor + (1 - floor) * 0.5 * (1 + np.cos(np.pi * t)))
    return pg.optimizers.schedules.Tabulated(rates)


def train(device: str, epochs: int = 20, batch_size: int = 32, learning_rate: float = 3e-3,
          seed: int = 0, train_limit: int | None = None,
          progress: TextIO | None = None, png: str | None = None,
          function: bool = False) -> Result:
    """Trains the CNN on `device` and returns the test accuracy and losses.
    `train_limit` keeps only the first examples of the training set (tests);
    `function` runs each step as a graph (``pg.function``)."""
    x_train, y_train, x_test, y_test = load_digits(seed)
    if train_limit:
        x_train, y_train = x_train[:train_limit], y_train[:train_limit]
    rng = np.random.default_rng(seed)
    bar = Progress(progress)
    steps = -(-len(x_train) // batch_size)
    step_losses, epoch_losses, epoch_seconds = [], [], []
    start = time.perf_counter()
    with pg.device(device):
        model = DigitsCNN(rng)
        optimizer = pg.optimizers.Adam(cosine_decay(learning_rate, epochs * steps))
        step_fn = make_step(model, optimizer, function)
        test_images = pg.constant(x_test)
        for epoch in range(1, epochs + 1):
            order = rng.permutation(len(x_train))
            pending, last = [], None
            bar.start_epoch(epoch, epochs, steps)
            t0 = time.perf_counter()
            for step in range(steps):
                idx = order[step * batch_size:(step + 1) * batch_size]
                last_step = epoch == epochs and step == steps - 1
                if last_step:                   # where the kernels of one step run
                    counts = kernel_counts()
                loss = step_fn(pg.constant(x_train[idx]), pg.constant(y_train[idx]))
                if last_step:
                    where = placement_summary(counts, kernel_counts(), device)
                if pending and bar.live:       # the previous step's loss: no stall
                    last = float(pending[-1].numpy())
                pending.append(loss)
                bar.update(last)
            losses = [float(t.numpy()) for t in pending]
            epoch_seconds.append(time.perf_counter() - t0)
            step_losses += losses
            epoch_losses.append(float(np.mean(losses)))
            acc = accuracy(model, test_images, y_test)
            bar.end_epoch(epoch, epochs, epoch_losses[-1], acc, epoch_seconds[-1], len(x_train))
    seconds = time.perf_counter() - start
    if png:
        write_loss_plot(png, step_losses, steps, device)
    traces = getattr(step_fn, "tracing_count", 0)
    return Result(device, epochs, acc, epoch_losses, step_losses, seconds, traces,
                  epoch_seconds, epochs * len(x_train) / max(sum(epoch_seconds), 1e-9), where)


def default_device() -> str:
    """GPU:0 where there is a GPU, else the embedded MY_DEVICE:0, else the
    first other plugin device, else CPU:0."""
    types = [d.device_type for d in pg.list_physical_devices()]
    for t in ("GPU", "MY_DEVICE", *types):
        if t in types and t != "CPU":
            return f"{t}:0"
    return "CPU:0"


def _device_name(name: str) -> str:
    return name if ":" in name else f"{name.upper()}:0"


def main(argv: list | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default=None,
                   help="CPU, MY_DEVICE, GPU:0, ... (default: GPU:0 if present, else MY_DEVICE:0)")
    p.add_argument("--epochs", type=int, default=None, help="default 20 (3 with --quick)")
    p.add_argument("--quick", action="store_true",
                   help="a shortened run (3 epochs) that takes seconds")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--learning-rate", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--function", action="store_true",
                   help="run each training step as a graph (pg.function)")
    p.add_argument("--png", default="train_digits_loss.png",
                   help="where to write the loss curve ('' for none)")
    args = p.parse_args(argv)
    device = _device_name(args.device) if args.device else default_device()
    epochs = args.epochs or (3 if args.quick else 20)
    try:
        pg.get_device(device)
    except (pg.errors.OpError, ValueError) as exc:
        p.error(f"--device {device}: {exc}")
    print(f"training the digits CNN on {device} for {epochs} epoch(s)", flush=True)
    r = train(device, epochs, args.batch_size, args.learning_rate, args.seed,
              progress=sys.stdout, png=args.png or None, function=args.function)
    print(f"test accuracy {r.test_accuracy:.2%} on {device} after {epochs} epoch(s), "
          f"{r.seconds:.1f} s, {r.examples_per_second:,.0f} training examples/s"
          + (f" ({r.traces} traces of the step)" if args.function else "")
          + (f"; loss curve: {os.path.abspath(args.png)}" if args.png else ""))
    print("\n".join(r.placement))
    return 0


if __name__ == "__main__":
    sys.exit(main())
