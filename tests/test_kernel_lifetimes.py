"""Kernel instances a graph plan uses are the plan's as long as it lives:
the instance cache of dispatch (1024 entries) may evict them, and the plan
still runs them (c_api/src/kernels.c, "Kernel instances": a reference
count, one reference per plan step)."""
from __future__ import annotations

import numpy as np

import pluggable as pg
from pluggable.runtime import dispatch
INSTANCE_CACHE_SIZE = dispatch.INSTANCE_CACHE_SIZE


def _fill_instance_cache(rng, n):
    """`n` eager ops of distinct attribute sets: every one a new kernel
    instance, evicting the least recently used ones."""
    for i in range(n):
        x = rng.standard_normal((2, 3)).astype(np.float32)
        got = pg.raw_ops.CheckNumerics(tensor=pg.constant(x), message=f"attrs {i}")
        if i % 97 == 0:
            np.testing.assert_array_equal(got.numpy(), x)


def test_function_runs_after_its_kernels_left_the_instance_cache(rng):
    with pg.device("MY_DEVICE:0"):
        @pg.function
        def f(a, b):
            return pg.exp(a * b) + pg.reduce_sum(a, axis=1, keepdims=True) - b

        a = rng.standard_normal((4, 5)).astype(np.float32)
        b = rng.standard_normal((4, 5)).astype(np.float32)
        want = np.exp(a * b) + a.sum(axis=1, keepdims=True) - b
        np.testing.assert_allclose(f(pg.constant(a), pg.constant(b)).numpy(), want,
                                   rtol=1e-5, atol=1e-5)
        _fill_instance_cache(rng, INSTANCE_CACHE_SIZE + 200)
        assert len(dispatch._instances) == INSTANCE_CACHE_SIZE  # the first ones are gone
        for _ in range(3):
            a = rng.standard_normal((4, 5)).astype(np.float32)
            b = rng.standard_normal((4, 5)).astype(np.float32)
            want = np.exp(a * b) + a.sum(axis=1, keepdims=True) - b
            np.testing.assert_allclose(f(pg.constant(a), pg.constant(b)).numpy(), want,
                                       rtol=1e-5, atol=1e-5)
