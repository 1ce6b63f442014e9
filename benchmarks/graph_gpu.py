"""Graph mode on a device against PyTorch: a traced MLP, eager, planned and
captured, next to PyTorch eager and a PyTorch CUDA graph of the same model.

The model is an MLP 1024-4096-4096-1024 in float32 (Linear + ReLU, Linear +
ReLU, Linear), with the same weights in both frameworks (TF32 off in both).
For each batch size (default 1 and 8192), in one process, it times per call:

  pluggable eager          the Python function, op by op;
  pluggable traced         the same function as ``pg.function`` through the
                           planned executor (graph optimizer on: fused
                           MatMul + BiasAdd + Relu), capture off;
  pluggable traced+capt.   the same with ``set_graph_capture("device")``:
                           replayed as a device graph (CUDA graph on the GPU);
  torch eager              ``torch.nn.Sequential`` of Linear/ReLU;
  torch CUDA graph         that model captured with ``torch.cuda.CUDAGraph``
                           and replayed: input copied into the static input,
                           ``replay()``, output cloned (the same guarantees as
                           a pluggable replay, whose outputs are copies).

Every timed call ends with a synchronisation of the device used
(``Device.synchronize`` or ``torch.cuda.synchronize``). Each variant is
timed two ways, in turns (a round runs every variant, the first of them
moving on by one each round):

  one call      a round calls each variant once; the median over
                ``--repeats`` rounds after warm-up. A call then follows the
                other variants' calls, with the host's caches as they left
                them, which costs a framework with a longer host path more;
  back to back  a round calls each variant ``--burst`` times in a row; the
                median over the rounds (a tenth of ``--repeats``, at least
                10) of a burst's time per call: the host's caches warm, the
                way a loop calling one model sees them.

Each pluggable variant's result is checked against torch eager (max abs
diff; the run fails above ``--tol`` times the output's scale). Prints a
markdown table for each way with the ratios the graph-mode issue names
(traced / torch eager at batch 1 <= 0.5, traced / torch CUDA graph at batch 1
<= 1.2, traced / torch eager at batch 8192 <= 1.0; "traced" is the faster of
the planned and the captured pluggable runs); a target counts as met only
where it is met both ways. ``--json PATH`` writes the rows. Without PyTorch
(or without CUDA for it) the torch columns are left out and said so. On a
device without capture the captured column says "not captured".

usage: python3 benchmarks/graph_gpu.py --device GPU:0 [--batches 1,8192]
           [--repeats 50] [--burst 20] [--json PATH]
       python3 benchmarks/graph_gpu.py --device MY_DEVICE:0 --sizes 64,256,256,64
"""
from __future__ import annotations

import argparse
import contextlib
import json
import pathlib
import platform
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
import pluggable as pg  # noqa: E402
from gpu_peers import times_in_turns  # noqa: E402

try:
    import torch
    if not torch.cuda.is_available():
        torch = None
except Exception:  # not installed, or broken: the torch columns are skipped
    torch = None

TARGETS = [  # (batch, peer, at most): traced / peer
    (1, "torch eager", 0.5), (1, "torch CUDA graph", 1.2), (8192, "torch eager", 1.0)]


def _burst_rounds(args) -> int:
    """Rounds of the back-to-back figures: a tenth of --repeats, at least 10."""
    return max(10, args.repeats // 10)


def _median_calls_in_turns(cases: dict, warmup: int, repeats: int, burst: int = 1) -> dict:
    """Median seconds per `fn(); sync()` of each case of `cases` (name ->
    (fn, sync)), the cases run in turns (``gpu_peers.times_in_turns``), each
    `burst` calls in a row per round: a drift of the host during the run
    weighs on every variant alike."""
    def run(fn, sync):
        for _ in range(burst):
            fn()
            sync()
    runs = {name: (lambda fn=fn, sync=sync: run(fn, sync)) for name, (fn, sync) in cases.items()}
    return {name: statistics.median(v) / burst
            for name, v in times_in_turns(runs, repeats, warmup).items()}


def make_weights(sizes, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [((rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32),
             (rng.standard_normal(b) * 0.1).astype(np.float32))
            for a, b in zip(sizes, sizes[1:])]


def pluggable_mlp(weights, device: str):
    """The MLP as a Python function of pluggable ops on `device`."""
    with pg.device(device):
        params = [(pg.constant(w), pg.constant(b)) for w, b in weights]

    def mlp(x):
        h = x
        for i, (w, b) in enumerate(params):
            h = pg.nn.bias_add(pg.matmul(h, w), b)
            if i + 1 < len(params):
                h = pg.nn.relu(h)
        return h
    return mlp


def torch_mlp(weights):
    layers = []
    for i, (w, b) in enumerate(weights):
        lin = torch.nn.Linear(w.shape[0], w.shape[1])
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(np.ascontiguousarray(w.T)))
            lin.bias.copy_(torch.from_numpy(b))
        layers.append(lin)
        if i + 1 < len(weights):
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers).cuda().eval()


def torch_graph(model, x):
    """A CUDA graph of `model` on static input `x`: returns call(x)."""
    static_x = x.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), torch.no_grad():
        for _ in range(3):
            model(static_x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g), torch.no_grad():
        static_y = model(static_x)

    def call(inp):
        static_x.copy_(inp)
        g.replay()
        return static_y.clone()
    return call


def bench_batch(batch: int, sizes, weights, args) -> dict:
    dev = args.device
    rng = np.random.default_rng(batch)
    xa = rng.standard_normal((batch, sizes[0])).astype(np.float32)
    # the measured device only, as torch.cuda.synchronize waits for the
    # current GPU only (pg.synchronize() would also wait for MY_DEVICE)
    sync = pg.get_device(dev).synchronize
    fn = pluggable_mlp(weights, dev)
    row: dict = {"batch": batch, "device": dev}
    with pg.device(dev):
        x = pg.constant(xa)
        pg.config.set_graph_capture("off")
        planned = pg.function(fn)
        t0 = time.perf_counter()
        planned(x)
        sync()
        row["first_call_s"] = time.perf_counter() - t0
        pg.config.set_graph_capture("device")
        captured = pg.function(fn)
        for _ in range(4):      # warm-up runs, then the capture
            captured(x)
        stats = captured.get_concrete_function(x).capture_stats() or {}
        row["captured"] = bool(stats.get("graphs"))
        if not row["captured"]:
            row["not_captured_because"] = stats.get("reason") or stats.get("failed")
        outs = {"pluggable eager": fn(x).numpy(),
                "pluggable traced+captured": captured(x).numpy()}
        pg.config.set_graph_capture("off")
        outs["pluggable traced"] = planned(x).numpy()

    def under(policy, f):
        """`f(x)` under the capture policy the function was made for."""
        def run():
            pg.config.set_graph_capture(policy)
            f(x)
        return run
    cases = {"pluggable eager": (lambda: fn(x), sync),
             "pluggable traced": (under("off", planned), sync),
             "pluggable traced+captured": (under("device", captured), sync)}
    ref = None
    model = call = None
    if torch is not None and dev.upper().startswith("GPU"):
        torch.backends.cuda.matmul.allow_tf32 = False
        model = torch_mlp(weights)
        xt = torch.from_numpy(xa).cuda()
        tsync = torch.cuda.synchronize
        with torch.no_grad():
            ref = model(xt).cpu().numpy()
        call = torch_graph(model, xt)
        outs["torch CUDA graph"] = call(xt).cpu().numpy()
        cases["torch eager"] = (lambda: model(xt), tsync)
        cases["torch CUDA graph"] = (lambda: call(xt), tsync)
    try:
        # each side's scope entered once, as a loop of its own would: neither
        # looks at the other's
        with contextlib.ExitStack() as scopes:
            scopes.enter_context(pg.device(dev))
            if model is not None:
                scopes.enter_context(torch.no_grad())
            row.update(_median_calls_in_turns(cases, 3, args.repeats))
            row["back to back"] = _median_calls_in_turns(cases, 1, _burst_rounds(args),
                                                         args.burst)
    finally:
        pg.config.set_graph_capture("off")
    if model is not None:
        del model, call
        torch.cuda.empty_cache()
    if ref is None:  # no torch peer: check against numpy in float64
        h = xa.astype(np.float64)
        for i, (w, b) in enumerate(weights):
            h = h @ w + b
            h = np.maximum(h, 0) if i + 1 < len(weights) else h
        ref = h
    scale = float(np.abs(ref).max()) or 1.0
    row["max_abs_diff"] = {k: float(np.abs(v - ref).max()) for k, v in outs.items()}
    row["same_result"] = all(d <= args.tol * scale for d in row["max_abs_diff"].values())
    _ratios(row, row["captured"])
    _ratios(row["back to back"], row["captured"])
    return row


def _ratios(times: dict, captured: bool) -> None:
    """Adds "traced_best" (the faster of the planned and the captured runs)
    and its ratio to each torch variant to `times`."""
    best = min(times["pluggable traced"], times["pluggable traced+captured"] if captured
               else float("inf"))
    times["traced_best"] = best
    for peer in ("torch eager", "torch CUDA graph"):
        if peer in times:
            times[f"traced / {peer}"] = best / times[peer]


def tracing_rows(args) -> list[dict]:
    """Tracing time per node of a 200-node chain of one-element ops, and
    the time of optimising, planning and running it once (best of 5)."""
    chain_len = 200
    out = []
    with pg.device(args.device):
        k, c = pg.constant(np.float32(1.0001)), pg.constant(np.float32(0.5))
        x = pg.constant(np.float32(0.25))

        def chain(v):
            for _ in range(chain_len // 2):
                v = pg.add(pg.multiply(v, k), c)
            return v
        for _ in range(5):
            f = pg.function(chain)
            t0 = time.perf_counter()
            cf = f.get_concrete_function(x)
            t1 = time.perf_counter()
            cf(x)
            pg.synchronize()
            t2 = time.perf_counter()
            out.append((t1 - t0, t2 - t1))
    trace = min(a for a, _ in out) / chain_len     # the least disturbed of 5
    plan = min(b for _, b in out) / chain_len
    return [{"what": f"tracing, {chain_len}-node chain", "us_per_node": trace * 1e6},
            {"what": f"optimise + plan + first run, {chain_len}-node chain",
             "us_per_node": plan * 1e6}]


def _fmt_us(v) -> str:
    return "n/a" if v is None else f"{v * 1e6:.1f}"


def print_table(rows: list[dict], trace: list[dict], args) -> None:
    cols = ["pluggable eager", "pluggable traced", "pluggable traced+captured",
            "torch eager", "torch CUDA graph"]
    print(f"pluggable {pg.__file__}, device {args.device}, python {platform.python_version()}, "
          f"torch {torch.__version__ if torch is not None else 'absent (torch columns skipped)'}"
          f", MLP {args.sizes} float32, synchronised calls, the variants in turns\n")
    ways = (("one call", f"one call of each variant a round, median of {args.repeats}",
             lambda r: r),
            ("back to back", f"{args.burst} calls of each variant a round, median of "
             f"{_burst_rounds(args)}", lambda r: r["back to back"]))
    for name, what, times_of in ways:
        print(f"{name} ({what}):\n")
        print("| batch | " + " | ".join(f"{c} (us)" for c in cols)
              + " | traced / torch eager | traced / torch graph | max abs diff vs ref | same |")
        print("| ---: | " + " | ".join("---:" for _ in cols) + " | ---: | ---: | ---: | --- |")
        for r in rows:
            t = times_of(r)
            cells = [_fmt_us(t.get(c)) for c in cols]
            if not r["captured"]:
                cells[2] += " (not captured)"
            ratios = [f"{t[k]:.3f}x" if k in t else "n/a"
                      for k in ("traced / torch eager", "traced / torch CUDA graph")]
            diff = max(r["max_abs_diff"].values())
            print(f"| {r['batch']} | " + " | ".join(cells) + f" | {' | '.join(ratios)} | "
                  f"{diff:.2e} | {'yes' if r['same_result'] else 'NO'} |")
        print()
    for batch, peer, most in TARGETS:
        r = next((x for x in rows if x["batch"] == batch), None)
        key = f"traced / {peer}"
        if r is None or key not in r:
            print(f"- target traced / {peer} at batch {batch} <= {most}: not measured")
            continue
        one, b2b = r[key], r["back to back"][key]
        ok = "met" if max(one, b2b) <= most else "NOT met"
        print(f"- target traced / {peer} at batch {batch} <= {most}: {one:.3f}x one call, "
              f"{b2b:.3f}x back to back ({ok})")
    print()
    for t in trace:
        print(f"- {t['what']} on {args.device}: {t['us_per_node']:.1f} us/node")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="GPU:0")
    ap.add_argument("--batches", default="1,8192")
    ap.add_argument("--sizes", default="1024,4096,4096,1024")
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--burst", type=int, default=20,
                    help="calls of a variant in a row for the back-to-back figures")
    ap.add_argument("--tol", type=float, default=1e-4,
                    help="largest max abs diff accepted, relative to the output's scale")
    ap.add_argument("--json", type=pathlib.Path)
    args = ap.parse_args()
    device_type = args.device.split(":")[0]
    if not pg.list_physical_devices(device_type):
        print(f"no {device_type} device present ({args.device}): nothing to measure; "
              "see pg.plugins() for plugins that failed to load", file=sys.stderr)
        return 2
    sizes = [int(s) for s in args.sizes.split(",")]
    weights = make_weights(sizes)
    rows = [bench_batch(int(b), sizes, weights, args) for b in args.batches.split(",")]
    trace = tracing_rows(args)
    print_table(rows, trace, args)
    if args.json:
        args.json.write_text(json.dumps({"device": args.device, "sizes": sizes,
                                         "torch": torch.__version__ if torch else None,
                                         "rows": rows, "tracing": trace}, indent=1,
                                        default=str))
    return 0 if all(r["same_result"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
