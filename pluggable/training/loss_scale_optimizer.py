"""``pg.mixed_precision.LossScaleOptimizer``: TensorFlow's loss scaling
for float16 training (``tf.keras.mixed_precision.LossScaleOptimizer``).

float16 gradients underflow to zero below 6e-8: the loss is multiplied by
the loss scale before the backward pass and the gradients divided by it
after, as in TensorFlow::

    opt = pg.mixed_precision.LossScaleOptimizer(pg.optimizers.Adam())
    with pg.GradientTape() as tape:
        loss = loss_fn()
        scaled_loss = opt.get_scaled_loss(loss)
    scaled_grads = tape.gradient(scaled_loss, variables)
    grads = opt.get_unscaled_gradients(scaled_grads)
    opt.apply_gradients(zip(grads, variables))

Dynamic loss scaling follows TensorFlow's ``DynamicLossScale``: a step
whose gradients are all finite is applied and counted; after
`dynamic_growth_steps` (2000) such steps in a row the scale doubles (when
the doubled scale is finite) and the count restarts. A step with an inf or
NaN gradient is skipped (the inner optimizer, its slots and its
``iterations`` are left unchanged), the scale is halved, but not below 1,
and the count restarts. The scale starts at `initial_scale` (2**15).

The finiteness check reads one scalar per device to the host, so a dynamic
step synchronises with the devices of its gradients; it runs eagerly
(inside a ``pg.function`` the scaling methods raise UnimplementedError).
The scale and the count are float32 and int64 CPU variables
(``variables``).
"""
from __future__ import annotations

import math
from typing import Any, Callable, Iterable

import numpy as np

from ..autodiff.tape import GradientTape
from ..framework import dtype_policy, dtypes, errors
from ..framework.tensor import Tensor
from ..graph import tracing
from ..ops import raw_ops
from ..ops.variables import Variable
from ..runtime import placement
from .optimizers import Optimizer


def _eager(what: str) -> None:
    if tracing.current_graph() is not None:
        raise errors.UnimplementedError(
            f"LossScaleOptimizer.{what} runs eagerly only: call the step outside pg.function, "
            "or trace the bfloat16 step, which needs no loss scaling")


def _scalar_like(t: Tensor, value: float) -> Tensor:
    """`value` as a scalar of `t`'s dtype on `t`'s device."""
    return Tensor._from_array(np.asarray(value, t.dtype.as_numpy_dtype),
                              placement.CPU)._copy_to(t._dev)


class LossScaleOptimizer:
    """An optimizer that scales the loss (TensorFlow's
    ``LossScaleOptimizer``). `inner_optimizer` is a ``pg.optimizers``
    optimizer. With `dynamic` (the default) the scale changes as the module
    says; with ``dynamic=False`` it stays `initial_scale`, which must then
    be given."""

    def __init__(self, inner_optimizer: Optimizer, dynamic: bool = True,
                 initial_scale: float | None = None, dynamic_growth_steps: int | None = None):
        if isinstance(inner_optimizer, LossScaleOptimizer):
            raise TypeError("LossScaleOptimizer cannot wrap another LossScaleOptimizer")
        if not isinstance(inner_optimizer, Optimizer):
            raise TypeError('"inner_optimizer" must be an instance of pg.optimizers.Optimizer '
                            f"(SGD, Adam, AdamW), but got: {inner_optimizer!r}")
        if not isinstance(dynamic, bool):
            raise TypeError(f'"dynamic" argument to LossScaleOptimizer.__init__ must be a bool, '
                            f"but got: {dynamic!r}")
        if not dynamic:
            if initial_scale is None:
                raise errors.InvalidArgumentError(
                    '"initial_scale" must be specified if "dynamic" is False')
            if dynamic_growth_steps is not None:
                raise errors.InvalidArgumentError(
                    '"dynamic_growth_steps" must be None if "dynamic" is False, but got: '
                    f"{dynamic_growth_steps}")
        initial_scale = 2.0 ** 15 if initial_scale is None else initial_scale
        if isinstance(initial_scale, bool) or not isinstance(initial_scale, (int, float)) \
                or not math.isfinite(initial_scale) or initial_scale <= 0:
            raise errors.InvalidArgumentError(
                f"LossScaleOptimizer: initial_scale must be a finite number > 0, got "
                f"{initial_scale!r}")
        growth = 2000 if dynamic_growth_steps is None else dynamic_growth_steps
        if isinstance(growth, bool) or not isinstance(growth, int) or growth < 1:
            raise errors.InvalidArgumentError(
                f"LossScaleOptimizer: dynamic_growth_steps must be an int >= 1, got {growth!r}")
        self._inner = inner_optimizer
        self._dynamic = dynamic
        self._initial_scale = float(initial_scale)
        self._growth_steps = growth
        with placement.device("CPU:0"), dtype_policy.plain_variables():
            self._scale = Variable(np.float32(initial_scale), trainable=False,
                                   name="current_loss_scale")
            self._counter = Variable(np.int64(0), trainable=False, name="good_steps")

    # ------------------------------------------------------------ state
    @property
    def inner_optimizer(self) -> Optimizer:
        return self._inner

    @property
    def dynamic(self) -> bool:
        return self._dynamic

    @property
    def initial_scale(self) -> float:
        return self._initial_scale

    @property
    def dynamic_growth_steps(self) -> int | None:
        return self._growth_steps if self._dynamic else None

    @property
    def loss_scale(self) -> Tensor:
        """The current loss scale (a float32 CPU scalar)."""
        return self._scale.value()

    @property
    def dynamic_counter(self) -> Tensor | None:
        """Finite steps since the scale last changed (None if not dynamic)."""
        return self._counter.value() if self._dynamic else None

    @property
    def iterations(self) -> Variable:
        return self._inner.iterations

    @property
    def learning_rate(self) -> Any:
        return self._inner.learning_rate

    @learning_rate.setter
    def learning_rate(self, value: Any) -> None:
        self._inner.learning_rate = value

    @property
    def variables(self) -> list[Variable]:
        """The inner optimizer's variables, then the scale and the count."""
        return self._inner.variables + [self._scale, self._counter]

    def _current(self) -> float:
        return float(self._scale.numpy())

    # ------------------------------------------------------------ scaling
    def get_scaled_loss(self, loss: Any) -> Any:
        """`loss` times the loss scale (in `loss`'s dtype, on its device); a
        callable `loss` gives a callable."""
        if callable(loss):
            return lambda: self.get_scaled_loss(loss())
        _eager("get_scaled_loss")
        loss = loss if isinstance(loss, Tensor) else Tensor._from_array(
            np.asarray(loss, np.float32), placement.CPU)
        with placement.device(loss._dev):
            return raw_ops.Mul(x=loss, y=_scalar_like(loss, self._current()))

    def get_unscaled_gradients(self, grads: Iterable) -> list:
        """Each gradient times 1 / loss scale (None stays None)."""
        _eager("get_unscaled_gradients")
        reciprocal = 1.0 / self._current()
        out = []
        for g in grads:
            if g is None:
                out.append(None)
                continue
            with placement.device(g._dev):
                out.append(raw_ops.Mul(x=g, y=_scalar_like(g, reciprocal)))
        return out

    @staticmethod
    def _all_finite(grads: list) -> bool:
        """Whether every gradient is finite: sum(g * 0) is 0 exactly when g
        holds no inf or NaN; one float32 sum per device is read."""
        per_device: dict = {}
        for g in grads:
            with placement.device(g._dev):
                z = raw_ops.Sum(input=raw_ops.Mul(x=g, y=_scalar_like(g, 0.0)),
                                axis=np.arange(len(g.shape), dtype=np.int32))
                if z.dtype is not dtypes.float32:
                    z = raw_ops.Cast(x=z, DstT=dtypes.float32)
                per_device.setdefault(g._dev, []).append(z)
        for dev, sums in per_device.items():
            with placement.device(dev):
                total = sums[0] if len(sums) == 1 else raw_ops.AddN(inputs=sums)
            if not math.isfinite(float(total.numpy())):
                return False
        return True

    def _update_scale(self, finite: bool) -> None:
        """TensorFlow's DynamicLossScale.update."""
        scale, count = self._current(), int(self._counter.numpy())
        if finite:
            if count + 1 >= self._growth_steps:
                doubled = np.float32(scale * 2.0)
                if math.isfinite(doubled):
                    self._scale.assign(doubled)
                self._counter.assign(np.int64(0))
            else:
                self._counter.assign(np.int64(count + 1))
        else:
            self._scale.assign(np.float32(max(scale / 2.0, 1.0)))
            self._counter.assign(np.int64(0))

    # ------------------------------------------------------------ steps
    def apply_gradients(self, grads_and_vars: Iterable) -> Variable:
        """Applies the (already unscaled) gradients with the inner optimizer
        when all are finite; a dynamic scale is updated either way (see the
        module). Returns ``iterations``."""
        pairs = list(grads_and_vars)
        if not self._dynamic:
            return self._inner.apply_gradients(pairs)
        _eager("apply_gradients")
        grads = [g for g, _ in pairs if g is not None]
        finite = self._all_finite(grads)
        self._update_scale(finite)
        if finite:
            self._inner.apply_gradients(pairs)
        return self._inner.iterations

    def minimize(self, loss: Any, var_list: Iterable[Variable], tape: Any = None) -> Variable:
        """Scales `loss` (a callable returning the loss, or a tensor recorded
        on `tape`), takes the gradients, unscales and applies them. With a
        tape, the backward pass starts from the loss scale
        (``output_gradients``), the gradient of the scaled loss."""
        var_list = list(var_list)
        if tape is None:
            if not callable(loss):
                raise TypeError("minimize: give a callable loss, or a loss tensor with its tape")
            with GradientTape() as tape:
                scaled = self.get_scaled_loss(loss())
            scaled_grads = tape.gradient(scaled, var_list)
        else:
            _eager("minimize")
            with placement.device(loss._dev):
                seed = _scalar_like(loss, self._current())
                seed = raw_ops.Fill(dims=np.asarray(loss.shape, np.int32), value=seed) \
                    if loss.shape else seed
            scaled_grads = tape.gradient(loss, var_list, output_gradients=seed)
        grads = self.get_unscaled_gradients(scaled_grads)
        return self.apply_gradients(zip(grads, var_list))

    def __repr__(self) -> str:
        return (f"<pg.mixed_precision.LossScaleOptimizer inner={self._inner!r} "
                f"dynamic={self._dynamic} loss_scale={self._current()}>")


__all__ = ["LossScaleOptimizer"]
