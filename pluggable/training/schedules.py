"""Learning-rate schedules (``pg.optimizers.schedules``), Keras's shape.

A schedule is called with the optimizer's step count (``iterations`` before
the step, a float64 scalar tensor on the CPU) and returns the learning rate
as a scalar tensor. Because it is made of ops, a training step traced with
``pg.function`` computes the rate when the graph runs: one graph serves
every step. A plain Python function ``lr(step)`` also works as a learning
rate: eagerly it gets the step as an int; in a traced step it gets the
tensor, so it must be written with ops (``0.1 * 0.99 ** step`` is).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..framework import dtypes, errors
from ..framework.tensor import Tensor
from ..ops import raw_ops
from ..runtime import placement


class LearningRateSchedule:
    """Base class: ``__call__(step)`` returns the learning rate at `step`.
    ``at_step(step)`` gives the same rate as a Python float for an int step:
    an eager optimizer step uses it, so a schedule that defines it costs no
    op per step (the default runs ``__call__`` on the CPU)."""

    def __call__(self, step: Tensor) -> Tensor:
        raise NotImplementedError

    def at_step(self, step: int) -> float:
        with placement.device("CPU:0"):
            return float(self(Tensor._from_array(np.float64(step), placement.CPU)).numpy())


class ExponentialDecay(LearningRateSchedule):
    """``initial_learning_rate * decay_rate ** (step / decay_steps)``
    (the exponent floored when `staircase`)."""

    def __init__(self, initial_learning_rate: float, decay_steps: int, decay_rate: float,
                 staircase: bool = False):
        if decay_steps <= 0:
            raise ValueError(f"ExponentialDecay: decay_steps must be positive, got {decay_steps}")
        self.initial_learning_rate = float(initial_learning_rate)
        self.decay_steps = float(decay_steps)
        self.decay_rate = float(decay_rate)
        self.staircase = bool(staircase)

    def __call__(self, step: Tensor) -> Tensor:
        p = raw_ops.RealDiv(x=step, y=np.float64(self.decay_steps))
        if self.staircase:
            p = raw_ops.Floor(x=p)
        return raw_ops.Mul(x=np.float64(self.initial_learning_rate),
                           y=raw_ops.Pow(x=np.float64(self.decay_rate), y=p))

    def at_step(self, step: int) -> float:
        p = np.float64(step) / np.float64(self.decay_steps)
        if self.staircase:
            p = np.floor(p)
        return float(np.float64(self.initial_learning_rate) * np.float64(self.decay_rate) ** p)


class Tabulated(LearningRateSchedule):
    """The rate of each step from a table: ``values[min(step, len - 1)]``.
    Any schedule of a known number of steps, computed in Python beforehand::

        rates = [cosine(step) for step in range(total_steps)]
        pg.optimizers.Adam(pg.optimizers.schedules.Tabulated(rates))
    """

    def __init__(self, values: Sequence[float]):
        self.values = np.asarray(values, np.float64).reshape(-1)
        if self.values.size == 0:
            raise ValueError("Tabulated: give at least one learning rate")

    def __call__(self, step: Tensor) -> Tensor:
        last = np.float64(self.values.size - 1)
        index = raw_ops.Cast(x=raw_ops.Minimum(x=step, y=last), DstT=dtypes.int32)
        return raw_ops.GatherV2(params=self.values, indices=index,
                                axis=np.int32(0))

    def at_step(self, step: int) -> float:
        return float(self.values[min(max(int(step), 0), self.values.size - 1)])


def traced_rate(lr: Any, step: Tensor) -> Any:
    """The learning rate of a traced step: a number, or a float64 tensor
    computed from `step` (the traced step count) by a schedule."""
    if not callable(lr):
        return float(lr)
    try:
        rate = lr(step)
    except errors.InvalidArgumentError as exc:
        raise errors.InvalidArgumentError(
            f"the learning-rate schedule {lr!r} could not be traced: it is called with "
            "the step count as a tensor inside pg.function, so it must compute with ops "
            "(pg.math ...), or be a pg.optimizers.schedules.LearningRateSchedule "
            f"(Tabulated takes rates computed beforehand). {exc}") from None
    if not isinstance(rate, Tensor):
        return float(rate)
    if rate.dtype is not dtypes.float64:
        rate = raw_ops.Cast(x=rate, DstT=dtypes.float64)
    return rate


__all__ = ["ExponentialDecay", "LearningRateSchedule", "Tabulated"]
