"""pg.distribute with a plugin whose collective kernel waits in compute_func
until every participant of its group has arrived, as the CUDA reference
plugin's kernels do (tests/broken_plugins/waiting_collective.c: four MEET
devices, CollectiveReduceV2 for float32, a 10 s limit). Such a plugin
needs every participant called concurrently: one called after the other,
the first would wait for the rest until its deadline. The first call of a
collective goes through the pool of Python threads, the later ones through
the core's participant threads (pg_kernel_run1_group); both must gather the
group, which this runs on the host, where CI runs."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from broken_plugins import TESTS, build, clean_env

CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    import pluggable as pg
    from pluggable.runtime import dispatch
    record = pg.load_plugin(sys.argv[1])
    assert record.status == "loaded", record.to_dict()
    used = []
    real = dispatch.run_group

    def spy(calls, *rest):
        out = real(calls, *rest)
        used.append(out is not None)
        return out
    dispatch.run_group = spy
    devs = [f"MEET:{i}" for i in range(4)]
    rng = np.random.default_rng()
    for step in range(6):
        xs = [rng.standard_normal((3, 5)).astype(np.float32) for _ in devs]
        ts = []
        for d, x in zip(devs, xs):
            with pg.device(d):
                ts.append(pg.constant(x))
        with pg.testing.expect_kernel("CollectiveReduceV2", "MEET", 4):
            outs = pg.distribute.all_reduce(ts, "sum", timeout=30)
        want = ((xs[0] + xs[1]) + xs[2]) + xs[3]      # ordinal order, float32
        for d, o in zip(devs, outs):
            assert o.device.endswith(d), (o.device, d)
            assert np.array_equal(o.numpy(), want), (step, d)
    print(json.dumps({"used": used}))
""")


def test_participants_that_wait_for_each_other_are_called_at_once():
    plugin = build("waiting_collective")
    env = clean_env(PYTHONPATH=str(TESTS.parent))
    proc = subprocess.run([sys.executable, "-c", CHILD, str(plugin)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    # the first call makes the plans on the pool's threads, the rest run
    # in one call into the core
    assert out["used"] == [False] + [True] * 5, out
