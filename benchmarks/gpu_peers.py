"""What the GPU benchmarks import: pluggable (as installed, else from the
checkout the benchmark is in) and the peers measured beside it, PyTorch and
CuPy, each None where it is missing or sees no GPU; and the median timing
they share."""
from __future__ import annotations

import pathlib
import statistics
import sys
import time


def median_time(fn, repeats: int, warmup: int = 1) -> float:
    """Median wall time of fn() over `repeats` runs, after `warmup` runs."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def times_in_turns(runs: dict, repeats: int, warmup: int = 1, on_error=None) -> dict:
    """The seconds of every timed round of each run of `runs` (name ->
    callable): after `warmup` untimed rounds, each of `repeats` rounds calls
    every run once, the first of them moving on by one each round, so that
    a drift of the machine weighs on every run alike and no run always takes
    one place in the round (after one given run's load, with clocks under a
    power limit). A run that raises is re-raised, or, with `on_error`,
    reported as on_error(name, exception) and left out of the result."""
    runs = dict(runs)
    times: dict = {name: [] for name in runs}
    for i in range(warmup + repeats):
        order = list(runs)
        k = i % len(order) if order else 0
        for name in order[k:] + order[:k]:
            try:
                t0 = time.perf_counter()
                runs[name]()
                elapsed = time.perf_counter() - t0
            except Exception as exc:
                if on_error is None:
                    raise
                on_error(name, exc)
                del runs[name], times[name]
                continue
            if i >= warmup:
                times[name].append(elapsed)
    return times


def kernel_table(name: str, call, calls: int, rows: int = 22) -> None:
    """Prints the device time of each kernel over `calls` calls of call()
    (which ends synchronised), per call, as CUPTI records it through
    torch.profiler: it sees every kernel of the process, the CUDA plugin's
    too."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            call()
    torch.cuda.synchronize()
    found = sorted(((getattr(e, "device_time_total", 0), e.count, e.key)
                    for e in prof.key_averages()), reverse=True)
    found = [r for r in found if r[0] > 0]
    print(f"  kernels of {name}: {sum(r[0] for r in found) / calls / 1e3:.2f} ms of device "
          f"time per call, {sum(r[1] for r in found) / calls:.0f} launches per call")
    for us, count, key in found[:rows]:
        print(f"    {us / calls:9.1f} us {count / calls:6.1f}x  {key[:100]}")


def import_pluggable():
    """(pluggable, None), or (None, the exception) when it cannot be
    imported from the installation or the checkout."""
    try:
        import pluggable
        return pluggable, None
    except ImportError:
        root = str(pathlib.Path(__file__).resolve().parent.parent)
        if root not in sys.path:
            sys.path.insert(0, root)
        try:
            import pluggable
            return pluggable, None
        except Exception as exc:  # reported by the benchmark
            return None, exc


def require_pluggable():
    """pluggable, or the exception that importing it raised."""
    pg, error = import_pluggable()
    if pg is None:
        raise error
    return pg


def cuda_torch():
    """torch when it is installed and sees a GPU, else None."""
    try:
        import torch
        return torch if torch.cuda.is_available() else None
    except Exception:
        return None


def cuda_cupy():
    """(cupy, cupyx) when CuPy is installed and sees a GPU, else (None, None)."""
    try:
        import cupy
        import cupyx
        cupy.cuda.runtime.getDeviceCount()
        return cupy, cupyx
    except Exception:
        return None, None
