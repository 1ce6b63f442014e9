"""Host time of each kernel call in one eager training step, by op.

Times every call into the core's kernel entry points (``pg_kernel_run1``
and ``pg_kernel_run``: the plugin's compute function with its launches,
allocations and checks, not the Python around it) during eager steps of
``bench_training.py``'s digits CNN, and prints per op the calls per step,
the median host µs per call and the total per step, largest first. Where
a step is bound by host time (small models on a GPU), this says which
kernels' host cost to look at first.

    python3 benchmarks/step_kernel_calls.py --device GPU:0
    python3 benchmarks/step_kernel_calls.py --device MY_DEVICE:0 --steps 20

Each call is attributed to the op whose plan ran it: "fast" calls come from
the raw_ops fast path, "plan" calls from dispatch's general path or a
``dispatch.Prepared`` (variable reads, optimizer updates).
"""
from __future__ import annotations

import argparse
import collections
import pathlib
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path[:0] = [p for p in (str(ROOT), str(ROOT / "benchmarks")) if p not in sys.path]

import pluggable as pg  # noqa: E402
from pluggable._core import lib as core_lib  # noqa: E402
from pluggable.ops import raw_ops  # noqa: E402
from pluggable.runtime import dispatch  # noqa: E402

import bench_training  # noqa: E402

_clock = time.perf_counter
_times: dict = collections.defaultdict(list)
_current = ["?"]


class _TimedLib:
    """The core library as dispatch sees it, timing the kernel calls."""

    def __getattr__(self, name):
        return getattr(core_lib, name)

    def pg_kernel_run1(self, k, handles, expect, st):
        t0 = _clock()
        h = core_lib.pg_kernel_run1(k, handles, expect, st)
        _times[("plan", _current[0])].append(_clock() - t0)
        return h

    def pg_kernel_run(self, k, handles, outs, expect, st):
        t0 = _clock()
        code = core_lib.pg_kernel_run(k, handles, outs, expect, st)
        _times[("plan", _current[0])].append(_clock() - t0)
        return code


def _timed_fast_path(op_name: str):
    def run1(k, handles, expect, st):
        t0 = _clock()
        h = core_lib.pg_kernel_run1(k, handles, expect, st)
        _times[("fast", op_name)].append(_clock() - t0)
        return h
    return run1


def instrument() -> None:
    """Times the kernel calls of dispatch and of every raw_ops function made
    so far (call after a warm-up, which makes them)."""
    run_plugin = dispatch._run_plugin

    def named(p, inputs, shapes, *rest):
        _current[0] = p.op.name
        return run_plugin(p, inputs, shapes, *rest)
    dispatch._run_plugin = named
    dispatch.lib = _TimedLib()
    for name, fn in list(raw_ops._cache.items()):
        if "_run1" in fn.__globals__:
            fn.__globals__["_run1"] = _timed_fast_path(name)


def main(argv: list | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="MY_DEVICE:0")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--batch", type=int, default=32)
    args = p.parse_args(argv)
    with pg.device(args.device):
        work = bench_training.Workload("cnn", args.batch, 0, 0)
        for _ in range(3):
            work.step()
        instrument()
        for _ in range(2):
            work.step()
        _times.clear()
        for _ in range(args.steps):
            work.step()
    rows = []
    for (path, op), ts in _times.items():
        per_step = len(ts) / args.steps
        median = 1e6 * float(np.median(ts))
        rows.append((per_step * median, path, op, per_step, median))
    rows.sort(reverse=True)
    print(f"digits CNN, batch {args.batch}, on {args.device}, {args.steps} steps")
    print("| op | path | calls per step | median us per call | us per step |")
    print("|---|---|---:|---:|---:|")
    for total, path, op, n, median in rows:
        print(f"| {op} | {path} | {n:.1f} | {median:.2f} | {total:.1f} |")
    print(f"| all kernel calls | | {sum(r[3] for r in rows):.1f} | | "
          f"{sum(r[0] for r in rows):.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
