"""Training-step benchmark: one step (forward, GradientTape backward, Adam
update) of two models in pluggable, side by side with a peer in the same
process.

Models (``--models cnn,mlp``):
  cnn  the digits CNN of examples/train_digits.py (its own model code),
       batch 32 of 8x8x1 images, 10 classes;
  mlp  dense 1024-4096-4096-1024 with ReLU, softmax cross-entropy over
       1024 classes, batch 256.
All float32, sparse softmax cross-entropy, Adam (TensorFlow's update rule,
learning rate 1e-3). Inputs are a fixed random batch already on the device.

Peers: on GPU, the same model in PyTorch eager on cuda (torch.optim.Adam,
strict float32: TF32 off, as pluggable's default), if torch is installed;
on CPU and MY_DEVICE, the same model in numpy only (benchmarks/numpy_models.py).
Both peers start from pluggable's initial weights; before timing, one step of
each from the same weights on the same batch must give the same loss and
weights (to tolerance), so that the two sides do the same work.

Modes of the pluggable step (``--modes eager,function,capture``; ``--function``
and ``--capture`` add one):
  eager     op by op (``GradientTape`` and the optimizer called eagerly);
  function  the same step traced once with ``pg.function`` and replayed as
            a graph (the trace is not timed; the number of traces is kept);
  capture   the traced step with ``pg.config.set_graph_capture("device")``:
            replayed as a captured device graph where the device can capture
            it; the table's note says whether it was captured, and why not.
Each mode starts from the same weights and passes the same-work check.

Each timed step ends with a device sync (the loss read back to the host).
Reported: median and p10/p90 of the steps after the warm-up, in ms, and
"host ms", the median time until a step returned its loss (before reading
it back): the host's share of the step where the device runs behind it
(numpy peers: n/a, their step is all host).

usage: python3 benchmarks/bench_training.py --device MY_DEVICE [--quick]
           [--models cnn,mlp] [--modes eager,function,capture] [--steps N]
           [--json PATH]
"""
from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import pathlib
import platform
import contextlib
import statistics
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path[:0] = [p for p in (str(ROOT), str(ROOT / "benchmarks")) if p not in sys.path]

import pluggable as pg                                           # noqa: E402
from numpy_models import NumpyCNN, NumpyMLP                     # noqa: E402

LEARNING_RATE = 1e-3
MODES = ("eager", "function", "capture")


def _load_example():
    """examples/train_digits.py as a module (its DigitsCNN, loss_fn, train_step)."""
    spec = importlib.util.spec_from_file_location("train_digits", ROOT / "examples" /
                                                  "train_digits.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


digits = _load_example()


def _import_torch():
    """(torch, None) where torch with a usable CUDA device is installed,
    else (None, why)."""
    if importlib.util.find_spec("torch") is None:
        return None, "torch is not installed"
    import torch
    if not torch.cuda.is_available():
        return None, "torch is installed but sees no CUDA device"
    return torch, None


# ------------------------------------------------------------------ pluggable models

class MLP:
    """Dense layers with ReLU between them; the last gives the logits."""

    def __init__(self, rng: np.random.Generator, sizes: tuple):
        self.layers = []
        for i, (n_in, n_out) in enumerate(zip(sizes, sizes[1:])):
            self.layers.append((
                pg.Variable(digits._he(rng, (n_in, n_out), n_in), name=f"dense{i}/kernel"),
                pg.Variable(np.zeros(n_out, np.float32), name=f"dense{i}/bias")))

    @property
    def trainable_variables(self) -> list:
        return [v for layer in self.layers for v in layer]

    def __call__(self, x):
        for i, (kernel, bias) in enumerate(self.layers):
            x = pg.nn.bias_add(pg.matmul(x, kernel), bias)
            if i < len(self.layers) - 1:
                x = pg.nn.relu(x)
        return x


class Workload:
    """One model at one size: the pluggable model, its batch and its peers."""

    def __init__(self, name: str, batch: int, size: int, seed: int, mode: str = "eager"):
        rng = np.random.default_rng(seed)
        self.name, self.batch, self.mode = name, batch, mode
        if name == "cnn":
            filters, hidden = ((16, 32), 64) if size == 0 else ((4, 8), 16)
            self.model = digits.DigitsCNN(rng, filters, hidden)
            self.shape = f"conv{filters[0]}-conv{filters[1]}-dense{hidden}-10"
            self.x = rng.random((batch, 8, 8, 1), dtype=np.float32)
            classes = 10
        else:
            sizes = (1024, 4096, 4096, 1024) if size == 0 else (64, 128, 128, 32)
            self.model = MLP(rng, sizes)
            self.shape = "-".join(map(str, sizes))
            self.x = rng.standard_normal((batch, sizes[0]), dtype=np.float32)
            classes = sizes[-1]
        self.labels = rng.integers(0, classes, batch).astype(np.int64)
        self.optimizer = pg.optimizers.Adam(LEARNING_RATE)
        self.x_dev, self.labels_dev = pg.constant(self.x), pg.constant(self.labels)
        self._step = digits.make_step(self.model, self.optimizer, function=mode != "eager")

    def weights(self) -> list:
        return [v.numpy() for v in self.model.trainable_variables]

    def gradients(self) -> list:
        """The gradients of the loss at the current weights (no update)."""
        variables = self.model.trainable_variables
        with pg.GradientTape() as tape:
            loss = digits.loss_fn(self.model(self.x_dev), self.labels_dev)
        return [g.numpy() for g in tape.gradient(loss, variables)]

    @property
    def framework(self) -> str:
        return "pluggable" if self.mode == "eager" else f"pluggable {self.mode}"

    def step(self) -> float:
        t0 = time.perf_counter()
        with _capture_policy("device" if self.mode == "capture" else None):
            loss = self._step(self.x_dev, self.labels_dev)
        self.host_ms = (time.perf_counter() - t0) * 1e3           # until the step returns
        return float(loss.numpy())                                # the device sync

    def notes(self) -> list[str]:
        """Traces of a traced step and, in capture mode, what was captured."""
        if self.mode == "eager":
            return []
        out = [f"{self.name} {self.mode}: {self._step.tracing_count} trace(s) of the step"]
        if self.mode == "capture":
            with _capture_policy("device"):
                stats = self._step.get_concrete_function(self.x_dev,
                                                         self.labels_dev).capture_stats()
            if not stats or not stats["graphs"]:
                why = (stats or {}).get("reason") or "; ".join(
                    (stats or {}).get("failed", {}).values()) or "not tried"
                out[-1] += f"; not captured as a device graph ({why}): ran as a graph"
            else:
                out[-1] += f"; captured as a device graph, {stats['launches']} launches"
        return out


@contextlib.contextmanager
def _capture_policy(policy: str | None):
    """Device graph capture set to `policy` inside the block (None: as is)."""
    if policy is None:
        yield
        return
    before = pg.config.get_graph_capture()
    pg.config.set_graph_capture(policy)
    try:
        yield
    finally:
        pg.config.set_graph_capture(before)


# ------------------------------------------------------------------ peers

class NumpyPeer:
    label = "numpy"

    def __init__(self, work: Workload):
        cls = NumpyCNN if work.name == "cnn" else NumpyMLP
        self.model = cls(work.weights(), LEARNING_RATE)
        self.x, self.labels = work.x, work.labels

    def weights(self) -> list:
        return self.model.weights

    def gradients(self) -> list:
        return self.model.loss_and_grads(self.x, self.labels)[1]

    def step(self) -> float:
        return self.model.step(self.x, self.labels)


class TorchPeer:
    """The same model in PyTorch eager on cuda, from the same weights."""
    label = "torch"

    def __init__(self, torch, work: Workload):
        self.torch, self.name = torch, work.name
        dev = torch.device("cuda")
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        ws = work.weights()
        if work.name == "cnn":            # HWIO kernels to OIHW, NHWC images to NCHW
            ws = [w.transpose(3, 2, 0, 1) if w.ndim == 4 else w for w in ws]
            x = work.x.transpose(0, 3, 1, 2)
        else:
            x = work.x
        self.params = [torch.tensor(np.ascontiguousarray(w), device=dev, requires_grad=True)
                       for w in ws]
        self.x = torch.tensor(np.ascontiguousarray(x), device=dev)
        self.labels = torch.tensor(work.labels, device=dev)
        # TensorFlow's epsilon is added to sqrt(v), torch's to sqrt(v / (1 - b2^t)):
        # this epsilon makes the first step identical (the checked one).
        self.opt = torch.optim.Adam(self.params, lr=LEARNING_RATE,
                                    eps=1e-7 / np.sqrt(1 - 0.999))

    def _logits(self):
        F = self.torch.nn.functional
        p = self.params
        if self.name == "cnn":
            h = F.max_pool2d(F.relu(F.conv2d(self.x, p[0], p[1], padding=1)), 2)
            h = F.max_pool2d(F.relu(F.conv2d(h, p[2], p[3], padding=1)), 2)
            h = h.permute(0, 2, 3, 1).reshape(h.shape[0], -1)       # NHWC flatten order
            h = F.relu(h @ p[4] + p[5])
            return h @ p[6] + p[7]
        h = self.x
        for i in range(0, len(p), 2):
            h = h @ p[i] + p[i + 1]
            if i < len(p) - 2:
                h = F.relu(h)
        return h

    @staticmethod
    def _to_hwio(ws: list) -> list:
        return [w.transpose(2, 3, 1, 0) if w.ndim == 4 else w for w in ws]

    def weights(self) -> list:
        return self._to_hwio([p.detach().cpu().numpy() for p in self.params])

    def gradients(self) -> list:
        self.opt.zero_grad(set_to_none=True)
        self.torch.nn.functional.cross_entropy(self._logits(), self.labels).backward()
        grads = self._to_hwio([p.grad.cpu().numpy() for p in self.params])
        self.opt.zero_grad(set_to_none=True)
        return grads

    def step(self) -> float:
        t0 = time.perf_counter()
        self.opt.zero_grad(set_to_none=True)
        loss = self.torch.nn.functional.cross_entropy(self._logits(), self.labels)
        loss.backward()
        self.opt.step()
        self.host_ms = (time.perf_counter() - t0) * 1e3           # until the step returns
        return loss.item()                                        # the device sync


# ------------------------------------------------------------------ measuring

def check_same_step(work: Workload, peer, rtol: float = 1e-4) -> dict:
    """The gradients at the same weights on the same batch, then one step of
    each side: the gradients, the losses and the updated weights must agree.
    Adam normalises the gradient, so the weights alone would hardly see a
    wrong gradient magnitude: the gradients are compared first. Elements whose gradient is at
    float rounding level may take Adam's step with the other sign (Adam
    normalises the gradient), so the check allows that for a very few
    elements (at most 1 in 10^4), never more than two learning rates."""
    grad_err = max(_relative_error(a, b) for a, b in zip(work.gradients(), peer.gradients()))
    before = work.weights()
    loss_pg, loss_peer = work.step(), peer.step()
    worst, off, total = 0.0, 0, 0
    for w0, a, b in zip(before, work.weights(), peer.weights()):
        diff = np.abs(a - b)
        worst = max(worst, float(diff.max()))
        off += int(np.count_nonzero(diff > 1e-6 + rtol * np.abs(w0)))
        total += a.size
    passed = bool(grad_err <= 1e-3 and abs(loss_pg - loss_peer) <= rtol * max(1.0, abs(loss_pg))
                  and worst <= 2 * LEARNING_RATE and off <= max(1, total // 10_000))
    return {"model": work.name, "mode": work.mode, "peer": peer.label, "passed": passed, "loss_pluggable": loss_pg,
            "loss_peer": loss_peer, "max_gradient_error": grad_err, "max_abs_weight_diff": worst, "elements_off": off,
            "elements": total}


def _relative_error(a: np.ndarray, b: np.ndarray) -> float:
    """max |a - b| over max |b| (0 where both are 0)."""
    scale = float(np.abs(b).max()) if b.size else 0.0
    diff = float(np.abs(a - b).max()) if b.size else 0.0
    return diff / scale if scale else diff


def time_steps(step, warmup: int, steps: int, owner=None) -> dict:
    """Median and p10/p90 (ms) of `steps` calls of `step` after `warmup`;
    with the median of `owner.host_ms` (the part of each step until it
    returned, before the loss is read back) where the owner records it."""
    for _ in range(warmup):
        step()
    times, host = [], []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
        if getattr(owner, "host_ms", None) is not None:
            host.append(owner.host_ms)
    q = np.percentile(times, [10, 50, 90])
    return {"steps": steps, "warmup": warmup, "median_ms": float(q[1]),
            "p10_ms": float(q[0]), "p90_ms": float(q[2]), "mean_ms": statistics.fmean(times),
            "host_median_ms": float(np.median(host)) if host else None}


def run(device: str, models: list, warmup: int, steps: int, tiny: bool, seed: int,
        cnn_batch: int, mlp_batch: int, modes: tuple = ("eager",)) -> dict:
    torch, why_no_torch = _import_torch() if device.startswith("GPU") else (None, None)
    out: dict = {"device": device, "results": [], "checks": [], "notes": []}
    if device.startswith("GPU") and torch is None:
        out["notes"].append(f"no PyTorch peer: {why_no_torch}")
    for name in models:
        batch = cnn_batch if name == "cnn" else mlp_batch
        with pg.device(device):
            sides, peer = [], None
            for mode in modes:             # each mode from the same weights
                work = Workload(name, batch, 1 if tiny else 0, seed, mode)
                if device.startswith("GPU"):
                    peer = TorchPeer(torch, work) if torch is not None else None
                else:
                    peer = NumpyPeer(work)
                if peer is not None:
                    out["checks"].append(check_same_step(work, peer))
                sides.append((work, work.framework, work.step))
            sides += [(None, peer.label, peer.step)] if peer else []
            for work, framework, fn in sides:
                row = {"model": name, "shape": sides[0][0].shape, "batch": batch,
                       "device": device, "framework": framework,
                       **time_steps(fn, warmup, steps, getattr(fn, "__self__", None))}
                out["results"].append(row)
                out["notes"] += work.notes() if work is not None else []
    return out



def _ratio(rows: list, row: dict) -> str:
    if not row["framework"].startswith("pluggable"):
        return ""
    peers = [r for r in rows if r["model"] == row["model"]
             and not r["framework"].startswith("pluggable")]
    return f"{row['median_ms'] / peers[0]['median_ms']:.2f}x" if peers else ""


def table(out: dict) -> str:
    lines = ["| model | shape | batch | framework | median ms | p10 ms | p90 ms | host ms "
             "| steps | pluggable / peer |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in out["results"]:
        host = f"{r['host_median_ms']:.2f}" if r.get("host_median_ms") is not None else "n/a"
        lines.append(f"| {r['model']} | {r['shape']} | {r['batch']} | {r['framework']} "
                     f"| {r['median_ms']:.2f} | {r['p10_ms']:.2f} | {r['p90_ms']:.2f} | {host} "
                     f"| {r['steps']} | {_ratio(out['results'], r)} |")
    lines += [""] if out["checks"] else []
    for c in out["checks"]:
        mode = "" if c["mode"] == "eager" else f" ({c['mode']})"
        lines.append(f"same-step check {c['model']}{mode} vs {c['peer']}: "
                     f"{'passed' if c['passed'] else 'FAILED'} (loss {c['loss_pluggable']:.6f} "
                     f"vs {c['loss_peer']:.6f}, gradients within {c['max_gradient_error']:.1e} of the "
                     f"largest, max weight diff {c['max_abs_weight_diff']:.2e}, "
                     f"{c['elements_off']}/{c['elements']} elements off)")
    lines += [f"note: {n}" for n in out["notes"]]
    return "\n".join(lines)


def main(argv: list | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="MY_DEVICE", help="CPU, MY_DEVICE, GPU, GPU:1 ...")
    p.add_argument("--models", default="cnn,mlp", help="comma-separated: cnn, mlp")
    p.add_argument("--quick", action="store_true", help="1 warm-up step and 3 timed steps")
    p.add_argument("--steps", type=int, default=None, help="timed steps (default 20)")
    p.add_argument("--warmup", type=int, default=None, help="warm-up steps (default 3)")
    p.add_argument("--cnn-batch", type=int, default=32)
    p.add_argument("--mlp-batch", type=int, default=256)
    p.add_argument("--tiny", action="store_true",
                   help="tiny layer sizes (tests): cnn conv4-conv8-dense16, mlp 64-128-128-32")
    p.add_argument("--modes", default="eager",
                   help="comma-separated pluggable step modes: eager, function, capture")
    p.add_argument("--function", action="store_true",
                   help="also time the step traced with pg.function (mode function)")
    p.add_argument("--capture", action="store_true",
                   help="also time the traced step with device graph capture (mode capture)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="also write the results as JSON here")
    args = p.parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    if not models or set(models) - {"cnn", "mlp"}:
        p.error(f"--models {args.models}: choose from cnn, mlp")
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    modes += [m for m, on in (("function", args.function), ("capture", args.capture))
              if on and m not in modes]
    if not modes or set(modes) - set(MODES):
        p.error(f"--modes {args.modes}: choose from {', '.join(MODES)}")
    device = digits._device_name(args.device)
    try:
        pg.get_device(device)
    except (pg.errors.OpError, ValueError) as exc:
        p.error(f"--device {device}: {exc}")
    steps = args.steps or (3 if args.quick else 20)
    warmup = args.warmup if args.warmup is not None else (1 if args.quick else 3)
    out = run(device, models, warmup, steps, args.tiny, args.seed, args.cnn_batch,
              args.mlp_batch, tuple(modes))
    out.update(date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               command=" ".join(["python3", "benchmarks/bench_training.py",
                                 *(argv if argv is not None else sys.argv[1:])]),
               host={"python": platform.python_version(), "numpy": np.__version__,
                     "cpus": os.cpu_count(), "load_average": list(os.getloadavg())})
    print(f"training step on {device}, {datetime.date.today()}, load average "
          f"{out['host']['load_average'][0]:.1f} on {os.cpu_count()} cpu(s)")
    print(table(out))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(out, indent=2))
    return 0 if all(c["passed"] for c in out["checks"]) else 1


if __name__ == "__main__":
    sys.exit(main())
