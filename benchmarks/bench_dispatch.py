"""Per-op dispatch time, side by side with a peer checkout (e.g. main):
``pg.raw_ops.AddV2(x=a, y=b)`` on 1-element MY_DEVICE tensors and, with
``--api``, the user-level calls of a model's op mix (``pg.reduce_sum``,
``pg.cast``, ``x @ w``, ``pg.transpose``, ``pg.reshape``, ``pg.zeros``,
``pg.nn.bias_add``, ``pg.nn.softmax``: benchmarks/user_calls.py) on a 4x8
float32 MY_DEVICE tensor, and with ``--collectives`` the in-process
``pg.distribute.all_reduce`` of 256 float32 over one device
(``all_reduce[1]``: the framework's part alone) and over two
(``all_reduce[2]``; the children see two MY_DEVICE devices), a twentieth
of ``--calls`` each, timed with timeit.

    python3 benchmarks/bench_dispatch.py --peer /tmp/pluggable-main [--api] [--collectives]

Each round runs every checkout once, in a fresh interpreter whose
``pluggable`` is imported from that checkout (both must be built in place),
alternating the order; the table gives the median and the best round per
checkout in microseconds per call. Results: docs/benchmarks.md.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys

import user_calls

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent

CHILD = r"""
import json, sys, timeit
import numpy as np, pluggable as pg
assert pg.__file__.startswith(sys.argv[1]), (pg.__file__, sys.argv[1])
n = int(sys.argv[2])
names = sys.argv[3].split(",")
sys.path.insert(0, sys.argv[4])   # this benchmark's folder: the call mix
from user_calls import user_calls
rng = np.random.default_rng(0)
with pg.device("MY_DEVICE:0"):
    a = pg.constant(np.ones(1, np.float32))
    b = pg.constant(np.ones(1, np.float32))
    x = pg.constant(rng.standard_normal((4, 8)).astype(np.float32))
    w = pg.constant(rng.standard_normal((8, 8)).astype(np.float32))
    bias = pg.constant(rng.standard_normal(8).astype(np.float32))
    add = pg.raw_ops.AddV2
    cases = {"AddV2": lambda: add(x=a, y=b), **user_calls(pg, x, w, bias)}
if "all_reduce[2]" in names:
    parts = []
    for d in ("MY_DEVICE:0", "MY_DEVICE:1"):
        with pg.device(d):
            parts.append(pg.constant(np.ones(256, np.float32)))
    cases["all_reduce[1]"] = lambda: pg.distribute.all_reduce(parts[:1])
    cases["all_reduce[2]"] = lambda: pg.distribute.all_reduce(parts)
out = {}
for name in names:
    f = cases[name]
    k = max(n // 20, 100) if name.startswith("all_reduce") else n
    f()
    pg.synchronize()
    t = timeit.Timer(f).timeit(number=k)
    pg.synchronize()
    out[name] = t / k * 1e6
print(json.dumps(out))
"""

API = list(user_calls.NAMES)


def run_once(checkout: pathlib.Path, calls: int, names: list[str]) -> dict:
    path = [str(checkout)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
    if "all_reduce[2]" in names:
        env["PLUGGABLE_MY_DEVICE_COUNT"] = "2"
    proc = subprocess.run([sys.executable, "-c", CHILD, str(checkout), str(calls),
                           ",".join(names), str(HERE)],
                          cwd=str(checkout), env=env, capture_output=True, text=True,
                          timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"benchmark child for {checkout} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peer", required=True, help="another checkout, built in place")
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--calls", type=int, default=100000)
    ap.add_argument("--api", action="store_true",
                    help="also time the user-level calls (4x8 float32)")
    ap.add_argument("--collectives", action="store_true",
                    help="also time pg.distribute.all_reduce over one and two devices")
    args = ap.parse_args(argv)
    names = (["AddV2"] + (API if args.api else [])
             + (["all_reduce[1]", "all_reduce[2]"] if args.collectives else []))
    checkouts = {"this": ROOT, "peer": pathlib.Path(args.peer).resolve()}
    times: dict[str, dict[str, list[float]]] = {k: {n: [] for n in names} for k in checkouts}
    for r in range(args.rounds):
        order = list(checkouts) if r % 2 == 0 else list(reversed(checkouts))
        for name in order:
            for case, us in run_once(checkouts[name], args.calls, names).items():
                times[name][case].append(us)
    print(f"MY_DEVICE:0, {args.calls} calls x {args.rounds} rounds (us per call); "
          f"this = {checkouts['this']}, peer = {checkouts['peer']}")
    print(f"{'call':12} {'this median':>12} {'this best':>10} {'peer median':>12} "
          f"{'peer best':>10} {'this/peer':>10}")
    for case in names:
        t, p = times["this"][case], times["peer"][case]
        ratio = statistics.median(t) / statistics.median(p)
        print(f"{case:12} {statistics.median(t):12.3f} {min(t):10.3f} "
              f"{statistics.median(p):12.3f} {min(p):10.3f} {ratio:10.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
