"""Data-parallel gradients all-reduced while the backward pass runs.

A ``GradientReducer`` is made once for a model's variables. It plans
buckets of about `bucket_bytes` over the variables in *reverse* order
(the backward pass finishes the last layers' gradients first, like
PyTorch's DDP), one device and dtype per bucket. ``reducer.gradient(tape,
loss)`` runs ``tape.gradient`` with an ``on_gradient`` callback: each
gradient is put in its bucket as soon as the tape reports it final, and a
bucket whose gradients are all there is handed to the backend's
``all_reduce_async`` at once (buckets start in plan order, so every rank
starts the same collectives in the same order) while the pass goes on.
The result is the list ``all_reduce_gradients`` returns, in the
variables' order, with the same bits: each element is reduced in rank
order whatever bucket it travels in.

Errors (a rank that died, a rank that called other collectives, a
timeout) surface at the wait as the collectives' typed errors, after
every started bucket has finished; no gradient is returned, so nothing is
half-applied.
"""
from __future__ import annotations

import time
from typing import Any, Sequence

from ..framework.errors import InvalidArgumentError
from ..framework.tensor import Tensor
from . import group
from .backend import Work
from .data_parallel import DEFAULT_BUCKET_BYTES, _buckets, flat_bucket, plan_buckets, \
    unflat_bucket


def _nbytes(x: Any) -> int:
    size = 1
    for d in x.shape:
        size *= int(d)
    return size * x.dtype.size


class GradientReducer:
    """Averages (or sums) the gradients of `sources` across the process
    group, bucket by bucket, while the backward pass computes them.

    `sources`: the variables (or tensors) whose gradients are reduced, the
    same on every rank. `bucket_bytes`, `op` and `timeout` are those of
    ``all_reduce_gradients``. One reducer serves any number of steps, one
    at a time. ``events`` lists the last step's (what, index, time) with
    what "ready" (gradient `index` final), "launch" (bucket `index` handed
    to the backend) or "sent" (the backend began moving bucket `index`),
    time from ``time.perf_counter()``."""

    def __init__(self, sources: Sequence[Any], bucket_bytes: int = DEFAULT_BUCKET_BYTES,
                 op: str = "mean", timeout: float | None = None):
        self.sources = list(sources)
        if isinstance(bucket_bytes, bool) or not isinstance(bucket_bytes, int) or \
                bucket_bytes < 1:
            raise InvalidArgumentError("GradientReducer: bucket_bytes must be a positive int, "
                                       f"got {bucket_bytes!r}", op="GradientReducer")
        for i, s in enumerate(self.sources):
            if not hasattr(s, "dtype") or not hasattr(s, "shape"):
                raise InvalidArgumentError(f"GradientReducer: sources[{i}] is a "
                                           f"{type(s).__name__}, not a variable or tensor",
                                           op="GradientReducer")
        self.op, self.timeout = op, timeout
        n = len(self.sources)
        self.buckets = plan_buckets(((i, _nbytes(s), (s.device, s.dtype))
                                     for i, s in zip(range(n - 1, -1, -1),
                                                     reversed(self.sources))), bucket_bytes)
        self._bucket_of = {i: b for b, idx in enumerate(self.buckets) for i in idx}
        self.events: list[tuple[str, int, float]] = []
        self._reset()

    def _reset(self) -> None:
        self._grads: dict[int, Tensor | None] = {}
        self._missing = [set(b) for b in self.buckets]
        self._next = 0
        self._works: list[list[tuple[list[int], Work]]] = []
        self.events = []

    # ------------------------------------------------------------ filling
    def add(self, index: int, grad: Tensor | None) -> None:
        """Gradient `index` (of `sources`) is final: it goes into its bucket,
        and every bucket now complete (in plan order) starts reducing."""
        if index in self._grads:
            return
        if grad is not None and not isinstance(grad, Tensor):
            raise InvalidArgumentError(f"GradientReducer: gradient {index} is a "
                                       f"{type(grad).__name__}, not a pg.Tensor or None",
                                       op="GradientReducer")
        self._grads[index] = grad
        self.events.append(("ready", index, time.perf_counter()))
        self._missing[self._bucket_of[index]].discard(index)
        while self._next < len(self.buckets) and not self._missing[self._next]:
            self._launch(self._next)
            self._next += 1

    def _launch(self, b: int) -> None:
        present = [i for i in self.buckets[b] if self._grads[i] is not None]
        grads = [self._grads[i] for i in present]
        runs = []      # a bucket's gradients on other devices than planned: one run each
        for run in _buckets(grads, 1 << 62):
            idx = [present[j] for j in run]
            flat = flat_bucket([self._grads[i] for i in idx])
            runs.append((idx, group.all_reduce_async(flat, self.op, self.timeout)))
        self.events.append(("launch", b, time.perf_counter()))
        self._works.append(runs)

    # ------------------------------------------------------------ results
    def finish(self, grads: Sequence[Tensor | None]) -> list[Tensor | None]:
        """Adds the gradients not reported yet (`grads`: all of them, in the
        sources' order), waits for every bucket and returns the reduced
        gradients in the sources' order (None stays None). Raises the first
        bucket's error, after every started bucket has finished."""
        grads = list(grads)
        if len(grads) != len(self.sources):
            raise InvalidArgumentError(f"GradientReducer: {len(grads)} gradients for "
                                       f"{len(self.sources)} sources", op="GradientReducer")
        for b in range(len(self.buckets)):        # in the order the buckets are planned
            for i in self.buckets[b]:
                self.add(i, grads[i])
        return self.wait()

    def wait(self) -> list[Tensor | None]:
        """The reduced gradients of a step whose gradients were all added."""
        works, self._works = self._works, []
        error: BaseException | None = None
        done: list[tuple[list[int], Tensor]] = []
        for b, runs in enumerate(works):
            for idx, work in runs:
                try:
                    done.append((idx, work.wait()))
                except BaseException as exc:  # noqa: BLE001 (the first is raised below)
                    error = error or exc
                if work.started_at is not None:
                    self.events.append(("sent", b, work.started_at))
        complete = self._next == len(self.buckets)
        grads, events = self._grads, self.events
        self._reset()
        self.events = events
        if error is not None:
            raise error
        if not complete:
            raise InvalidArgumentError("GradientReducer.wait: some gradients were never added; "
                                       "call finish(grads) with every gradient",
                                       op="GradientReducer")
        out: list[Tensor | None] = [None] * len(self.sources)
        for idx, total in done:
            for i, r in zip(idx, unflat_bucket(total, [grads[i] for i in idx])):
                out[i] = r
        return out

    def gradient(self, tape: Any, target: Any, **kwargs: Any) -> list[Tensor | None]:
        """``tape.gradient(target, sources, **kwargs)`` with each gradient
        reduced as soon as the backward pass has it: the reduced gradients,
        in the sources' order."""
        try:
            grads = tape.gradient(target, self.sources, on_gradient=self.add, **kwargs)
        except BaseException:
            self._abandon()
            raise
        return self.finish(grads)

    def _abandon(self) -> None:
        """After a failed backward pass: lets the started buckets finish (or
        fail) so that the next step starts clean."""
        for runs in self._works:
            for _, work in runs:
                try:
                    work.wait()
                except BaseException:  # noqa: BLE001 (the backward pass's error wins)
                    pass
        self._reset()
