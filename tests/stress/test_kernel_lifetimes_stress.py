"""Kernel instances under threads: eager ops, traced calls, gradient tapes
and variable updates in eight threads while the instance cache of dispatch
evicts all the time (it is cut to 8 entries in the child). Evictions, and
the cache replacing an instance another thread built for the same
attributes, only drop the cache's reference: plans and running launches
keep theirs (c_api/src/kernels.c, "Kernel instances"). Under
ThreadSanitizer or AddressSanitizer (.ci/run-sanitizers) a kernel instance
freed while in use is a report; here it is also a crash or a wrong result."""
from __future__ import annotations

from .test_async_stress import _clean, run_stress

BODY = r'''
from pluggable.runtime import dispatch
from pluggable.runtime.cache import LRUCache
dispatch._instances = LRUCache(8)
with pg.device(DEV):
    @pg.function
    def traced(a, b):
        return pg.exp(a * b) + pg.reduce_sum(a, axis=1, keepdims=True) - b
    var = pg.Variable(np.zeros((3, 4), np.float32))
added = [np.zeros((3, 4), np.float32) for _ in range(8)]

def close(got, want):
    return np.allclose(got, want, rtol=1e-5, atol=1e-5)

def worker(i):
    rng = np.random.default_rng(seed + i)
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        n += 1
        a = rng.standard_normal((3, 4)).astype(np.float32)
        b = rng.standard_normal((3, 4)).astype(np.float32)
        with pg.device(DEV):
            role = (i + n) % 4
            if role == 0:    # eager, a new attribute set every time
                got = pg.raw_ops.CheckNumerics(tensor=pg.constant(a), message=f"{i} {n}")
                ok = np.array_equal(got.numpy(), a)
                got = pg.multiply(pg.add(pg.constant(a), pg.constant(b)), pg.constant(b))
                ok = ok and close(got.numpy(), (a + b) * b)
            elif role == 1:  # a traced call
                got = traced(pg.constant(a), pg.constant(b)).numpy()
                ok = close(got, np.exp(a * b) + a.sum(axis=1, keepdims=True) - b)
            elif role == 2:  # a tape
                x = pg.constant(a)
                with pg.GradientTape() as tape:
                    tape.watch(x)
                    y = pg.reduce_sum(x * x * pg.constant(b))
                ok = close(tape.gradient(y, x).numpy(), 2 * a * b)
            else:            # a variable update
                var.assign_add(pg.constant(a))
                added[i] += a
                ok = True
        note("ops")
        if not ok:
            note("wrong")

run_threads([worker] * 8)
pg.synchronize()
want = sum(added)
out["variable_ok"] = bool(np.allclose(var.numpy(), want, rtol=1e-4, atol=1e-4))
out["evicted"] = len(dispatch._instances) == 8
'''


def test_threads_of_mixed_work_while_the_instance_cache_evicts():
    res = run_stress(BODY, seconds=2.0)
    _clean(res)
    assert res["ops"] > 100 and res["evicted"], res
    assert res["variable_ok"], res
