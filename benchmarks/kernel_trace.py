"""The kernels a stretch of GPU work ran, as CUPTI records them through
``torch.profiler`` (it sees every kernel of the process, the CUDA plugin's
and CuPy's included): shared by the scripts that time kernels."""
from __future__ import annotations

import json
import os
import tempfile


def traced_kernels(f, calls: int, sync) -> list[dict]:
    """The kernels of `calls` calls of `f` followed by `sync()`, in order of
    their start: chrome-trace events with "name", and "ts" and "dur" in us."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            f()
        sync()
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as fh:
            events = json.load(fh)["traceEvents"]
    finally:
        os.unlink(path)
    return sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["ts"])
