"""Time of ``import pluggable``, side by side with a peer checkout (e.g. main).

    python3 benchmarks/bench_import.py --peer /work/main --rounds 9

Each round runs ``python3 -X importtime -c "import pluggable"`` once per
checkout, alternating the order, in a fresh interpreter whose ``pluggable``
is imported from that checkout (both built in place, with the same plugins in
``pluggable/plugins/``); the time is the cumulative time of the last
importtime line (``pluggable`` itself, numpy and the plugins' loading
included). Bytecode is compiled into a private cache per checkout
(PYTHONPYCACHEPREFIX) by one uncounted warm-up run, so neither checkout pays
for compiling and neither tree is written to. The table gives the median, the
best and the worst run in milliseconds, and the plugins each checkout loaded
(they must match for the comparison to mean anything). With --callgrind, one
import per checkout (and `import numpy` alone) also runs under valgrind and
the instructions are counted: wall time on a shared machine varies with its
load, instruction counts hardly do. Results:
docs/benchmarks.md.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent

CHILD = r"""
import sys
import pluggable as pg
assert pg.__file__.startswith(sys.argv[1]), (pg.__file__, sys.argv[1])
print(",".join(sorted(f"{r.device_type}:{r.status}" for r in pg.plugins())))
"""

_LAST = re.compile(r"import time:\s+\d+ \|\s+(\d+) \| pluggable$")
_COLLECTED = re.compile(r"Collected : (\d+)")


def _env(checkout: pathlib.Path, cache: str) -> dict:
    path = [str(checkout)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path), PYTHONPYCACHEPREFIX=cache)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def instructions(checkout: pathlib.Path | None, cache: str) -> int:
    """Instructions the whole process executes for ``import pluggable`` from
    `checkout` (None: ``import numpy`` alone, the floor), counted by
    valgrind's callgrind: a figure that does not depend on the machine's load."""
    code = "import numpy" if checkout is None else CHILD
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
           sys.executable, "-c", code] + ([str(checkout)] if checkout else [])
    proc = subprocess.run(cmd, cwd=str(checkout or ROOT),
                          env=_env(checkout or ROOT, cache), capture_output=True, text=True,
                          timeout=1800)
    found = _COLLECTED.findall(proc.stderr)
    if proc.returncode != 0 or not found:
        raise RuntimeError(f"callgrind run for {checkout} failed:\n{proc.stderr[-2000:]}")
    return int(found[-1])


def run_once(checkout: pathlib.Path, cache: str) -> tuple[float, str]:
    """(milliseconds of `import pluggable`, the plugins loaded) for one run."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", CHILD, str(checkout)],
                          cwd=str(checkout), env=_env(checkout, cache), capture_output=True,
                          text=True,
                          timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"benchmark child for {checkout} failed:\n{proc.stderr}")
    times = [m.group(1) for m in map(_LAST.search, proc.stderr.splitlines()) if m]
    if not times:
        raise RuntimeError(f"no importtime line for pluggable from {checkout}:\n{proc.stderr}")
    return int(times[-1]) / 1000, proc.stdout.strip().splitlines()[-1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peer", required=True, help="another checkout, built in place")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--json", metavar="PATH", help="also write the runs as JSON here")
    ap.add_argument("--callgrind", action="store_true",
                    help="also count the instructions of one import per checkout under "
                         "valgrind (about a minute each; independent of the machine's load)")
    args = ap.parse_args(argv)
    checkouts = {"this": ROOT, "peer": pathlib.Path(args.peer).resolve()}
    times: dict[str, list[float]] = {k: [] for k in checkouts}
    loaded: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="bench_import_") as tmp:
        caches = {name: os.path.join(tmp, name) for name in checkouts}
        for name in checkouts:  # warm-up: compiles the bytecode into the cache
            run_once(checkouts[name], caches[name])
        for r in range(args.rounds):
            order = list(checkouts) if r % 2 == 0 else list(reversed(checkouts))
            for name in order:
                ms, plugins = run_once(checkouts[name], caches[name])
                times[name].append(ms)
                loaded[name] = plugins
        counts: dict[str, int] = {}
        if args.callgrind:
            counts = {name: instructions(checkouts[name], caches[name]) for name in checkouts}
            counts["numpy"] = instructions(None, caches["this"])
    print(f"`import pluggable` (python3 -X importtime, cumulative ms), {args.rounds} runs "
          "each, alternating\n")
    print("| checkout | median ms | best | worst | plugins | path |")
    print("|---|---:|---:|---:|---|---|")
    for name, ts in times.items():
        print(f"| {name} | {statistics.median(ts):.1f} | {min(ts):.1f} | {max(ts):.1f} | "
              f"{loaded[name]} | {checkouts[name]} |")
    ratio = statistics.median(times["this"]) / statistics.median(times["peer"])
    print(f"\nthis / peer (medians): {ratio:.3f}")
    if counts:
        print("\nInstructions of the whole process (valgrind --tool=callgrind), and above "
              "'import numpy' alone\n")
        print("| checkout | instructions | above numpy |")
        print("|---|---:|---:|")
        for name in checkouts:
            print(f"| {name} | {counts[name] / 1e6:.1f} M | "
                  f"{(counts[name] - counts['numpy']) / 1e6:.1f} M |")
        print(f"| numpy alone | {counts['numpy'] / 1e6:.1f} M | |")
        print(f"\nthis / peer (instructions above numpy): "
              f"{(counts['this'] - counts['numpy']) / (counts['peer'] - counts['numpy']):.3f}")
    if loaded["this"] != loaded["peer"]:
        print("warning: the checkouts loaded different plugins; the times do not compare")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rounds": args.rounds, "ms": times, "plugins": loaded,
                       "instructions": counts,
                       "paths": {k: str(v) for k, v in checkouts.items()}}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
