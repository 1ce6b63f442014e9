"""One producer cannot hold a device's queue.

A thread that launches ops on MY_DEVICE in a loop and never reads is held
back once the device's queue is about 1024 ops deep (c_api/src/opstate.c,
SYNC_AFTER), so another thread's small read of the same device waits for at
most that much work, not for everything the producer queued meanwhile.
"""
from __future__ import annotations

import threading
import time

import numpy as np

import pluggable as pg
from pluggable._core import lib

DEVICE = "MY_DEVICE:0"
QUEUE_LIMIT = 1024  # SYNC_AFTER in c_api/src/opstate.c
N = 128             # the producer's MatMul size: well above the inline limit


def _op_seconds(x) -> float:
    """Median time of one N x N MatMul on the idle device."""
    dev = pg.get_device(DEVICE)
    times = []
    for _ in range(5):
        dev.synchronize()
        t0 = time.perf_counter()
        for _ in range(20):
            y = pg.raw_ops.MatMul(a=x, b=x)
        y.numpy()
        times.append((time.perf_counter() - t0) / 20)
    return sorted(times)[2]


def test_a_flooding_producer_holds_a_small_read_only_a_bounded_time(rng):
    dev = pg.get_device(DEVICE)
    a = rng.standard_normal((N, N)).astype(np.float32)
    small = rng.standard_normal(1).astype(np.float32)
    with pg.device(DEVICE):
        x = pg.constant(a)
        op = _op_seconds(x)
    stop = threading.Event()
    launched, deepest, last = [0], [0], [None]

    def producer():
        with pg.device(DEVICE):
            while not stop.is_set():
                last[0] = pg.raw_ops.MatMul(a=x, b=x)
                launched[0] += 1

    def watch():
        while not stop.is_set():
            deepest[0] = max(deepest[0], lib.pg_device_unsettled_ops(dev._c))
            time.sleep(0.005)

    threads = [threading.Thread(target=producer), threading.Thread(target=watch)]
    for t in threads:
        t.start()
    try:
        # Flood: without back-pressure the queue would be tens of thousands
        # deep by now (a slow machine, or a sanitizer build, takes longer).
        deadline = time.monotonic() + 120
        while (launched[0] <= 2 * QUEUE_LIMIT or time.monotonic() < deadline - 117) \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        with pg.device(DEVICE):
            t0 = time.perf_counter()
            got = pg.constant(small).numpy()
            waited = time.perf_counter() - t0
    finally:
        stop.set()
        for t in threads:
            t.join()
    np.testing.assert_array_equal(got, small)
    np.testing.assert_allclose(last[0].numpy(), a @ a, rtol=1e-4, atol=1e-4)
    # The producer did flood: far more launches than the queue may hold.
    assert launched[0] > 2 * QUEUE_LIMIT, launched[0]
    # The queue stayed bounded (a launch may land while the drain runs).
    assert deepest[0] <= QUEUE_LIMIT + 64, deepest[0]
    # The read waited for at most the queue's depth of the producer's work
    # twice over (the constant's copy and the read queue behind it), with
    # a generous margin against a loaded machine; before the bound it
    # waited for the whole backlog (over 20 s here).
    bound = 1.0 + 6 * QUEUE_LIMIT * op
    assert waited < bound, (waited, bound, op, launched[0])
