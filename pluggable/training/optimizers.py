"""Optimizers (``pg.optimizers``): Keras's ``SGD``, ``Adam`` and ``AdamW``.

An update step is one device op per variable, with TensorFlow's training op
names (``ResourceApplyGradientDescent``, ``ResourceApplyKerasMomentum``,
``ResourceApplyAdam``): the variable and its slots (momentum, m, v) are
resource inputs updated in place on the variable's device, so a step never
copies a variable to the host. Adam and AdamW (``fused=None``) instead run
one ``MultiTensorApplyAdam`` per (device, dtype) group when every variable's
device has that op's kernel: the same values, one launch on the GPU. Slots
are variables created on the variable's device the first time it is updated.

Eagerly, a step reads ``iterations`` (a CPU variable) only when something
else wrote it since the optimizer last looked (the core counts each
variable's writes) and counts it up in place, so the step count costs no
op per step.

A step checks every (gradient, variable) pair first (a Variable, the same
dtype and shape, the gradient on the variable's device, no variable twice)
and raises a typed error naming the op, the variable and the shapes before
it changes anything.

Autocast variables (``pg.mixed_precision``) are updated in their stored
dtype (float32): their slots are float32 plain variables, and a gradient
that arrives in the compute dtype (bfloat16, float16) is cast to float32
on its device before the update.

Inside a ``pg.function`` a step is traced like any other code: the slots are
made once, when it is first traced; the step count, the Adam powers and the
learning rate (``schedules``) are computed from ``iterations`` in the graph,
so one graph serves every step.
"""
from __future__ import annotations

import math
import warnings
from typing import Any, Callable, Iterable

import numpy as np

from ..autodiff.backprop import device_of
from ..autodiff.tape import GradientTape
from ..framework import dtype_policy, dtypes, errors, registry
from ..framework.tensor import Tensor
from ..graph import tracing
from .._core import lib
from ..ops import raw_ops, resource_ops
from ..ops.resource_ops import MULTI_ADAM
from ..ops.variables import Variable
from ..runtime import dispatch, hooks, placement
from ..runtime.tensors import convert_to_tensor
from . import schedules


class _StepScalars(dict):
    """One step's hyperparameters by name as scalars on one device and
    dtype, each made at its first use (``Optimizer._device_scalar``)."""

    def __init__(self, opt: "Optimizer", like: Variable, hyper: dict):
        super().__init__()
        self._opt, self._like, self._hyper = opt, like, hyper

    def __missing__(self, name: str) -> Tensor:
        t = self[name] = self._opt._device_scalar(self._like, name, self._hyper[name])
        return t


def _same(a: Any, b: Any) -> bool:
    """Whether two Python numbers are the same value (-0.0 is not 0.0)."""
    return type(a) is type(b) and a == b and (
        type(a) is not float or math.copysign(1.0, a) == math.copysign(1.0, b))


_writes = lib.pg_variable_writes
_LOCKING = (("use_locking", True),)  # the update ops' attributes


def _short(dev) -> str:
    return dev.short_name


class Optimizer:
    """Base class: validation, slots, weight decay and the step counter.
    Subclasses give ``_update_op`` (the training op), ``_slot_names`` and
    ``_apply(var, grad, slots, scalars)``."""

    _update_op = ""
    _slot_names: tuple[str, ...] = ()

    def __init__(self, learning_rate: Any = 0.001, weight_decay: float | None = None,
                 name: str = "optimizer"):
        self.learning_rate = learning_rate
        self.weight_decay = weight_decay
        self.name = name
        with placement.device("CPU:0"):
            self._iterations = Variable(np.int64(0), trainable=False, name="iteration")
        self._slots: dict[int, dict[str, Variable]] = {}
        self._slot_owners: dict[int, Variable] = {}
        self._no_decay_ids: set[int] = set()
        self._no_decay_names: tuple[str, ...] = ()
        self._prepared: dict = {}  # (op, device, attrs) -> Prepared
        self._scalars: dict = {}  # (device, dtype, name) -> (value, device scalar)
        self._seen_step: tuple[int, int] | None = None  # (writes, iterations) last seen

    # ------------------------------------------------------------ state
    @property
    def iterations(self) -> Variable:
        """The number of steps applied so far (an int64 CPU variable)."""
        return self._iterations

    @property
    def variables(self) -> list[Variable]:
        """The optimizer's own variables: the step counter and every slot."""
        return [self._iterations] + [s for slots in self._slots.values() for s in slots.values()]

    def get_slot(self, var: Variable, name: str) -> Variable:
        """Slot `name` of variable `var` (e.g. "m" of Adam)."""
        try:
            return self._slots[id(var)][name]
        except KeyError:
            raise KeyError(f"{type(self).__name__} has no slot {name!r} for variable "
                           f"{var.name!r}; its slots are {list(self._slot_names)}") from None

    def build(self, var_list: Iterable[Variable]) -> None:
        """Creates the slots of every variable in `var_list` (done by the
        first step otherwise)."""
        for v in var_list:
            self._ensure_slots(v)

    def _ensure_slots(self, var: Variable) -> dict[str, Variable]:
        slots = self._slots.get(id(var))
        if slots is None:
            with placement.device(var.device_object), dtype_policy.plain_variables():
                slots = {n: Variable(np.zeros(var.shape, var.dtype.as_numpy_dtype),
                                     trainable=False, name=f"{var._name}/{n}")
                         for n in self._slot_names}
            self._slots[id(var)] = slots
            self._slot_owners[id(var)] = var
        return slots

    def _slot_items(self):
        """(variable, slot name, slot variable) for checkpoints."""
        for key, slots in self._slots.items():
            for n, s in slots.items():
                yield self._slot_owners[key], n, s

    def exclude_from_weight_decay(self, var_list: Iterable[Variable] | None = None,
                                  var_names: Iterable[str] | None = None) -> None:
        """Variables (or variables whose name contains one of `var_names`)
        that weight decay leaves alone."""
        self._no_decay_ids.update(id(v) for v in var_list or ())
        self._no_decay_names += tuple(var_names or ())

    def _decays(self, var: Variable) -> bool:
        return bool(self.weight_decay) and id(var) not in self._no_decay_ids and \
            not any(n in var.name for n in self._no_decay_names)

    def _step_values(self) -> tuple[Any, Any]:
        """(learning rate, number of the step being applied). Eagerly, Python
        numbers; while a step is traced (``pg.function``), float64 CPU
        scalars computed from ``iterations`` when the graph runs, so a
        schedule keeps changing the rate across calls of one graph."""
        lr = self.learning_rate
        if tracing.current_graph() is None:
            it = self._step_count()
            if isinstance(lr, schedules.LearningRateSchedule):
                return lr.at_step(it), it + 1
            return float(lr(it) if callable(lr) else lr), it + 1
        with placement.device("CPU:0"):
            it = raw_ops.Cast(x=self._iterations.value(), DstT=dtypes.float64)
            return schedules.traced_rate(lr, it), it + 1.0

    def _step_count(self) -> int:
        """``iterations`` as a Python int, read from the variable only when
        it was written since the last read (the core counts writes), so a
        step usually reads nothing."""
        writes = _writes(self._iterations._handle._h)
        seen = self._seen_step
        if seen is not None and seen[0] == writes:
            return seen[1]
        it = int(self._iterations.numpy())
        self._seen_step = (writes, it)
        return it

    def _count_step(self) -> None:
        """``iterations += 1``. Eagerly, with no hook that must see every
        op, the core's host buffer is updated in place under the variable's
        lock, and the new count is kept for the next ``_step_count``; else
        the op ``AssignAddVariableOp``."""
        if not hooks.fast[0] or tracing.current_graph() is not None:
            self._iterations.assign_add(np.int64(1))
            return
        h = self._iterations._handle._h
        with resource_ops.updating("AssignAddVariableOp", [h]) as (count,):
            count += 1
            self._seen_step = (_writes(h), int(count))

    def _hyperparameters(self, lr: Any, step: Any) -> dict:
        """The scalars of one step by name (Python numbers, or float64 CPU
        tensors while traced): the learning rate and what subclasses add."""
        return {"lr": lr}

    # ------------------------------------------------------------ checks
    def _checked_pairs(self, grads_and_vars: Iterable) -> list[tuple[Tensor, Variable]]:
        pairs, seen, missing = [], set(), []
        for item in grads_and_vars:
            g, v = item
            if g is None:
                missing.append(getattr(v, "name", repr(v)))
                continue
            if not isinstance(v, Variable):
                raise TypeError(f"{self._update_op}: expected a pg.Variable, got "
                                f"{type(v).__name__}")
            if id(v) in seen:
                raise errors.InvalidArgumentError(
                    f"{self._update_op}: variable {v.name!r} is given twice in one step",
                    op=self._update_op)
            seen.add(id(v))
            pairs.append((self._checked_grad(g, v), v))
        if missing:
            warnings.warn(f"Gradients do not exist for variables {missing} when minimizing the "
                          "loss: they are left unchanged. Check that the loss depends on them "
                          "(and that the tape watched them).", UserWarning, stacklevel=3)
        return pairs

    def _checked_grad(self, g: Any, v: Variable) -> Tensor:
        if type(g) is Tensor and g._dev is v._handle._dev and g._dtype is v._dtype \
                and g._shape == v._shape and v._dtype.is_floating:
            return g  # (the common case: every check below passes)
        op = self._update_op
        if not isinstance(g, Tensor):
            g = convert_to_tensor(g, v.dtype)._copy_to(v.device_object)
        where = f"variable {v.name!r} of shape {list(v.shape)} on {_short(v.device_object)}"
        if not v.dtype.is_floating:
            raise errors.InvalidArgumentError(
                f"{op}: {where} holds {v.dtype.name} values; optimizers update float "
                "variables only", op=op)
        if g.dtype is not v.dtype and v._cast_dtype is not None and g.dtype.is_floating:
            # an autocast variable's gradient computed in the compute dtype:
            # the update runs in the stored dtype, on the stored value
            with placement.device(g._dev if g._dev is not None else v.device_object):
                g = raw_ops.Cast(x=g, DstT=v.dtype)
        if g.dtype is not v.dtype:
            raise errors.InvalidArgumentError(
                f"{op}: the gradient of {where} is {g.dtype.name}, the variable "
                f"{v.dtype.name}", op=op)
        if tuple(g.shape) != tuple(v.shape):
            raise errors.InvalidArgumentError(
                f"{op}: the gradient of {where} has shape {list(g.shape)}", op=op)
        if g._dev is None:  # traced: the update reads it on the variable's device
            if device_of(g) is not v.device_object:
                with placement.device(v.device_object):
                    g = raw_ops.Identity(input=g)
        elif g._dev is not v.device_object:
            raise errors.InvalidArgumentError(
                f"{op}: the gradient of {where} is on {_short(g._dev)}; a step runs on the "
                f"variable's device: compute the gradient there or move it with "
                f"grad.to({_short(v.device_object)!r})", op=op, device=v.device)
        return g

    # ------------------------------------------------------------ steps
    def apply_gradients(self, grads_and_vars: Iterable) -> Variable:
        """Applies one step: for each (gradient, variable) pair (None
        gradients are skipped, with a warning naming their variables, as in
        TensorFlow), weight decay if set, then the update op.
        Everything is checked before anything changes. Returns
        ``iterations``. Inside a ``pg.function`` the step is traced: slots
        are made once, at tracing; the updates are graph nodes."""
        pairs = self._checked_pairs(grads_and_vars)
        with tracing.init_scope():
            for _, v in pairs:
                self._ensure_slots(v)
        lr, step = self._step_values()
        with placement.device("CPU:0"):
            hyper = self._hyperparameters(lr, step)
            if self.weight_decay:
                hyper["decay"] = lr * self.weight_decay
        if self._apply_fused(pairs, hyper):
            self._count_step()
            return self._iterations
        per_device: dict = {}  # (device, dtype) -> this step's scalars there
        for g, v in pairs:
            scalars = per_device.get((v._handle._dev, v._dtype))
            if scalars is None:
                scalars = per_device[(v._handle._dev, v._dtype)] = _StepScalars(self, v, hyper)
            scalar = scalars.__getitem__
            if self._decays(v):
                self._update("ResourceApplyGradientDescent", v, _LOCKING,
                             [v._handle, scalar("decay"), v._stored_value()])
            self._apply(v, g, self._slots[id(v)], scalar)
        self._count_step()
        return self._iterations

    def _device_scalar(self, v: Variable, name: str, value: Any) -> Tensor:
        """`value` as a scalar of `v`'s dtype on `v`'s device (a traced
        value: a cast and a copy in the graph). A Python number keeps its
        device scalar for later steps while it does not change (a constant
        learning rate, the betas), so those cost no copy per step; kernels
        never write their inputs."""
        if isinstance(value, Tensor):
            with placement.device("CPU:0"):
                t = raw_ops.Cast(x=value, DstT=v.dtype)
            with placement.device(v.device_object):
                return raw_ops.Identity(input=t)
        key = (v.device_object, v.dtype, name)
        old = self._scalars.get(key)
        if old is not None and _same(old[0], value):
            return old[1]
        t = Tensor._from_array(np.asarray(value, v.dtype.as_numpy_dtype),
                               placement.CPU)._copy_to(v.device_object)
        self._scalars[key] = (value, t)
        return t

    def _update(self, op_name: str, owner: Variable, attrs: tuple, args: list) -> None:
        """Runs update op `op_name` on `owner`'s device with `args`, its
        inputs in the op's order, and `attrs`, (name, value) pairs.
        Eagerly the call is prepared once per (op, device, attributes)
        (``dispatch.Prepared``): a step's updates skip the general path's
        plan lookup. Traced or profiled, it is a raw_ops call like any
        other."""
        if not hooks.fast[0]:
            names = [a.name for a in registry.OPS[op_name].inputs]
            getattr(raw_ops, op_name)(**dict(zip(names, args)), **dict(attrs))
            return
        key = (op_name, owner._handle._dev, attrs)
        prepared = self._prepared.get(key)
        if prepared is None:
            prepared = self._prepared[key] = dispatch.Prepared(op_name, key[1], dict(attrs))
        prepared(args)

    def _apply(self, var: Variable, grad: Tensor, slots: dict,
               scalar: Callable[[str], Tensor]) -> None:
        raise NotImplementedError

    def _apply_fused(self, pairs: list, hyper: dict) -> bool:
        """Applies the whole step as multi-tensor ops where the subclass has
        them (True), else leaves it to the per-variable ops (False)."""
        return False

    def minimize(self, loss: Any, var_list: Iterable[Variable], tape: Any = None) -> Variable:
        """Computes the gradient of `loss` (a callable returning the loss, or
        a tensor recorded on `tape`) with respect to `var_list` and applies
        it."""
        var_list = list(var_list)
        if tape is None:
            if not callable(loss):
                raise TypeError("minimize: give a callable loss, or a loss tensor with its tape")
            with GradientTape() as tape:
                loss = loss()
        grads = tape.gradient(loss, var_list)
        return self.apply_gradients(zip(grads, var_list))

    def __repr__(self) -> str:
        return f"<pg.optimizers.{type(self).__name__} learning_rate={self.learning_rate}>"


class SGD(Optimizer):
    """Gradient descent with optional momentum and Nesterov momentum
    (Keras's ``SGD``): with momentum m, ``accum = m * accum - lr * grad``
    and ``var += accum`` (Nesterov: ``var += m * accum - lr * grad``)."""

    def __init__(self, learning_rate: Any = 0.01, momentum: float = 0.0,
                 nesterov: bool = False, weight_decay: float | None = None, name: str = "SGD"):
        if momentum < 0 or momentum > 1:
            raise ValueError(f"SGD: momentum must be in [0, 1], got {momentum}")
        super().__init__(learning_rate, weight_decay, name)
        self.momentum = float(momentum)
        self.nesterov = bool(nesterov)
        self._slot_names = ("momentum",) if self.momentum else ()
        self._update_op = ("ResourceApplyKerasMomentum" if self.momentum
                           else "ResourceApplyGradientDescent")

    def _hyperparameters(self, lr, step):
        return {"lr": lr, "momentum": self.momentum}

    def _apply(self, var, grad, slots, scalar):
        if not self.momentum:
            self._update("ResourceApplyGradientDescent", var, _LOCKING,
                         [var._handle, scalar("lr"), grad])
            return
        self._update("ResourceApplyKerasMomentum", var,
                     (("use_locking", True), ("use_nesterov", self.nesterov)),
                     [var._handle, slots["momentum"]._handle, scalar("lr"), grad,
                      scalar("momentum")])


class Adam(Optimizer):
    """Adam (Keras's ``Adam``): with t the step number,
    ``m += (g - m)(1 - beta_1)``, ``v += (g^2 - v)(1 - beta_2)`` and
    ``var -= lr sqrt(1 - beta_2^t) / (1 - beta_1^t) * m / (sqrt(v) + epsilon)``.

    `fused` picks how a step runs: ``None`` (the default) applies it as one
    ``MultiTensorApplyAdam`` op per (device, dtype) group of variables
    (one kernel launch for them all on the GPU) when every variable of the
    step is on a device with that op's kernel, else one ``ResourceApplyAdam``
    per variable; ``True`` demands the multi-tensor op (UnimplementedError
    naming the device where it has none); ``False`` never uses it. Both
    compute the same values."""

    _update_op = "ResourceApplyAdam"
    _slot_names = ("m", "v")

    def __init__(self, learning_rate: Any = 0.001, beta_1: float = 0.9, beta_2: float = 0.999,
                 epsilon: float = 1e-7, weight_decay: float | None = None, name: str = "adam",
                 fused: bool | None = None):
        super().__init__(learning_rate, weight_decay, name)
        self.beta_1, self.beta_2, self.epsilon = float(beta_1), float(beta_2), float(epsilon)
        if fused not in (None, True, False):
            raise TypeError(f"{type(self).__name__}: fused must be None, True or False, got "
                            f"{fused!r}")
        self.fused = fused

    def _hyperparameters(self, lr, step):
        return {"lr": lr, "beta1_power": self.beta_1 ** step,
                "beta2_power": self.beta_2 ** step, "beta1": self.beta_1,
                "beta2": self.beta_2, "epsilon": self.epsilon}

    def _apply(self, var, grad, slots, scalar):
        self._update("ResourceApplyAdam", var, _LOCKING,
                     [var._handle, slots["m"]._handle, slots["v"]._handle,
                      scalar("beta1_power"), scalar("beta2_power"), scalar("lr"),
                      scalar("beta1"), scalar("beta2"), scalar("epsilon"), grad])

    def _apply_fused(self, pairs: list, hyper: dict) -> bool:
        if self.fused is False or not pairs:
            return False
        groups: dict = {}  # (device, dtype, gradient dtype, decays) -> pairs
        for g, v in pairs:
            key = (v._handle._dev, v._dtype, g.dtype, self._decays(v))
            groups.setdefault(key, []).append((g, v))
        for dev, dt, gdt, _ in groups:
            if not _multi_tensor_kernel(dev, dt, gdt):
                if self.fused:
                    raise errors.UnimplementedError(
                        f"{type(self).__name__}(fused=True): {_short(dev)} has no "
                        f"{MULTI_ADAM} kernel for {dt.name} variables with {gdt.name} "
                        "gradients; use fused=None (per-variable updates where it has none) "
                        "or keep the variables on a device that has it", op=MULTI_ADAM,
                        device=_short(dev))
                return False
        hyper = dict(hyper, no_decay=0.0)
        for (_, _, _, decays), group in groups.items():
            owner = group[0][1]
            scalar = _StepScalars(self, owner, hyper).__getitem__
            names = ("beta1_power", "beta2_power", "lr", "beta1", "beta2", "epsilon")
            lists = [[v._handle for _, v in group],
                     [self._slots[id(v)]["m"]._handle for _, v in group],
                     [self._slots[id(v)]["v"]._handle for _, v in group],
                     [g for g, _ in group]]
            tail = [scalar(n) for n in names] + [scalar("decay" if decays else "no_decay")]
            if not hooks.fast[0]:
                raw_ops.MultiTensorApplyAdam(
                    var=lists[0], m=lists[1], v=lists[2], grad=lists[3],
                    **dict(zip(names + ("decay",), tail)), use_locking=True)
                continue
            self._update(MULTI_ADAM, owner, (("N", len(group)), ("use_locking", True)),
                         [x for lst in lists for x in lst] + tail)
        return True


class AdamW(Adam):
    """Adam with decoupled weight decay (Keras's ``AdamW``): before each
    Adam update, ``var -= lr * weight_decay * var``. `fused` as Adam's (the
    multi-tensor op applies the decay in the same launch)."""

    def __init__(self, learning_rate: Any = 0.001, weight_decay: float = 0.004,
                 beta_1: float = 0.9, beta_2: float = 0.999, epsilon: float = 1e-7,
                 name: str = "adamw", fused: bool | None = None):
        if weight_decay is None:
            raise ValueError("AdamW needs a weight_decay (use Adam for none)")
        super().__init__(learning_rate, beta_1, beta_2, epsilon, weight_decay, name, fused)


_MULTI_KERNELS: dict = {}  # (device type, dtype, gradient dtype) -> has a kernel


def _multi_tensor_kernel(dev: Any, dt: dtypes.DType, gdt: dtypes.DType) -> bool:
    """Whether `dev` has a MultiTensorApplyAdam kernel for `dt` variables
    with `gdt` gradients."""
    key = (dev.device_type, dt, gdt)
    have = _MULTI_KERNELS.get(key)
    if have is None:
        have = _MULTI_KERNELS[key] = registry.find_kernel(
            MULTI_ADAM, dev.device_type, {"T": dt, "Tgrad": gdt}) is not None
    return have


__all__ = ["Adam", "AdamW", "Optimizer", "SGD"]
