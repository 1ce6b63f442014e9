"""The conformance suite run in the child process: ``Suite`` runs each check
and prints one protocol line per check (``CHECK_START``/``CHECK_RESULT``) so
that the parent can report a crash at the check that caused it."""
from __future__ import annotations

import json
import os
import time
from typing import Any, Callable, Iterator

import numpy as np

from ...plugins import loader
from .abi import AbiChecks
from .kernels import KernelChecks
from .memory import MemoryChecks
from .results import CheckFailed, CheckResult, CheckSkipped
from .streams import StreamChecks


class Suite(AbiChecks, MemoryChecks, StreamChecks, KernelChecks):
    """The conformance checks for one plugin, run in the current process."""

    def __init__(self, path: str):
        self.path = path
        self.rec: Any = None
        self.dev: Any = None
        self.rng = np.random.default_rng(1234)

    def checks(self) -> Iterator[tuple[str, Callable[[], str | None]]]:
        yield "load", self.check_load
        if self.rec is None or self.rec.status != "loaded":
            return
        yield "registrations", self.check_registrations
        yield "devices", self.check_devices
        if self.dev is not None:
            yield "allocation (core)", self.check_alloc_core
            yield "allocation (plugin)", self.check_alloc_plugin
            yield "sync copies", self.check_sync_copies
            yield "async copies", self.check_async_copies
            yield "fills", self.check_fills
            yield "stream ordering", self.check_stream_ordering
            yield "event states", self.check_events
            yield "timers", self.check_timers
            yield "host callback", self.check_host_callback
            yield "stream errors", self.check_stream_errors
            yield "native stream", self.check_native_stream
            yield "allocator stats", self.check_allocator_stats
        yield from self.kernel_checks()


def _emit(line: str) -> None:
    """Writes a protocol line at once (it must survive a crash right after)."""
    os.write(1, (line + "\n").encode("utf-8", "replace"))


def _stage_printer(what: str) -> None:
    _emit(f"PROBE_STAGE {what}")


def child_main(path: str, with_plugins: list[str]) -> int:
    for w in with_plugins:
        rec = loader.load_plugin(w, probe=False, source="--with")
        if rec.status != "loaded":
            _emit("CHECK_RESULT " + json.dumps(CheckResult(
                "load --with", "fail", f"{w}: {rec.status}: {rec.reason}").to_dict()))
            return 1
    loader.stage_hook = _stage_printer
    suite = Suite(path)
    failed = False
    for name, fn in suite.checks():
        _emit(f"CHECK_START {name}")
        t0 = time.perf_counter()
        try:
            detail = fn() or ""
            outcome = "pass"
        except CheckSkipped as exc:
            outcome, detail = "skip", str(exc)
        except CheckFailed as exc:
            outcome, detail = "fail", str(exc)
        except Exception as exc:
            outcome, detail = "fail", f"{type(exc).__name__}: {exc}"
        loader.stage_hook = None
        failed |= outcome == "fail"
        res = CheckResult(name, outcome, " ".join(str(detail).split()),
                          round(time.perf_counter() - t0, 3))
        _emit("CHECK_RESULT " + json.dumps(res.to_dict()))
    return 1 if failed else 0
