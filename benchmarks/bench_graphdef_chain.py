"""Importing and running a long chain GraphDef: the time and memory a
frozen graph of N nodes costs (a Placeholder, then N Neg nodes).

    python3 benchmarks/bench_graphdef_chain.py 100000

Prints the import time, the first call (placement, passes, planning and the
run), a second call (the plan replayed) and the process's peak resident
memory; the result is checked against numpy.
"""
from __future__ import annotations

import pathlib
import resource
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))
import pluggable as pg  # noqa: E402
from graph_defs import GraphBuilder  # noqa: E402


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    b = GraphBuilder()
    b.placeholder("x", np.float32, [4])
    prev = "x"
    for i in range(n):
        b.node(f"n{i}", "Neg", [prev], T=pg.float32)
        prev = f"n{i}"
    t0 = time.perf_counter()
    m = pg.graph_util.import_graph_def(b.graph, outputs=[prev + ":0"])
    t1 = time.perf_counter()
    x = np.arange(4, dtype=np.float32)
    y = m(x)
    y = y[0] if isinstance(y, (list, tuple)) else y
    np.testing.assert_allclose(np.asarray(y), x * (-1) ** n)
    t2 = time.perf_counter()
    m(x)
    t3 = time.perf_counter()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{n} nodes: import {t1 - t0:.1f} s, first call {t2 - t1:.1f} s, "
          f"second call {t3 - t2:.3f} s, peak RSS {rss:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
