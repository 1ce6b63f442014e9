"""``pg.distribute.MirroredStrategy``: synchronous data parallelism over the
devices of one process (TensorFlow's ``tf.distribute.MirroredStrategy``).

Each replica is one device. Inside ``strategy.scope()`` a ``pg.Variable``
is a ``MirroredVariable``: one variable per replica device, all given the
same value; ``strategy.run(fn, args)`` calls `fn` once per replica, in
order, under that replica's device scope, with each ``PerReplica`` argument
replaced by the replica's value and each mirrored variable standing for its
replica's copy, and gives back ``PerReplica`` results; ``strategy.reduce``
sums or averages them. Across plugin devices of one type the reduction is
``pg.distribute.all_reduce`` (the collective ops; NCCL on GPUs); across the
logical CPU devices that ``pg.config.set_logical_device_configuration``
makes, which share the host CPU, it is an ``AddN`` on the CPU.

Replicas run one after another in the calling thread, so a replica cannot
wait for the others: ``get_replica_context().all_reduce`` raises
UnimplementedError; return the values from ``run`` and ``reduce`` them
(the gradients of a training step, for example) in the cross-replica
context instead."""
from __future__ import annotations

import contextlib
import contextvars
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from ..framework import errors
from ..framework.tensor import Tensor
from ..ops import math_ops, variables
from ..ops.variables import Variable
from ..runtime import dispatch, placement
from ..runtime.tensors import convert_to_tensor
from . import collectives


class ReduceOp:
    """How ``MirroredStrategy.reduce`` combines the replicas' values."""
    SUM = "SUM"
    MEAN = "MEAN"


_REDUCE_OPS = {"SUM": "SUM", "MEAN": "MEAN"}


class ReplicaContext:
    """The replica a ``strategy.run`` call is running (``get_replica_context()``)."""

    def __init__(self, strategy: "MirroredStrategy", replica_id: int):
        self.strategy = strategy
        self.replica_id_in_sync_group = replica_id

    @property
    def num_replicas_in_sync(self) -> int:
        return self.strategy.num_replicas_in_sync

    @property
    def devices(self) -> tuple[str, ...]:
        return (self.strategy._devices[self.replica_id_in_sync_group],)

    def all_reduce(self, reduce_op: Any, value: Any, options: Any = None) -> Any:
        raise errors.UnimplementedError(
            "ReplicaContext.all_reduce: pluggable runs the replicas of MirroredStrategy.run "
            "one after another, so a replica cannot wait for the others; return the values "
            "from strategy.run and combine them with strategy.reduce(...)")


_replica: contextvars.ContextVar = contextvars.ContextVar("pluggable_replica", default=None)
_strategy: contextvars.ContextVar = contextvars.ContextVar("pluggable_strategy", default=None)


def get_replica_context() -> ReplicaContext | None:
    """The replica being run by ``strategy.run``, or None outside it."""
    return _replica.get()


def get_strategy() -> "MirroredStrategy | None":
    """The strategy whose ``scope()`` (or ``run``) is active, or None."""
    ctx = _replica.get()
    return ctx.strategy if ctx is not None else _strategy.get()


def has_strategy() -> bool:
    return get_strategy() is not None


def in_cross_replica_context() -> bool:
    return _strategy.get() is not None and _replica.get() is None


# ------------------------------------------------------------------ values

class DistributedValues:
    """One value per replica (``values``: in replica order)."""

    _kind = "DistributedValues"

    def __init__(self, values: Sequence[Any]):
        self._values = tuple(values)

    @property
    def values(self) -> tuple:
        return self._values

    def _text(self, fn: Callable) -> str:
        body = ",\n".join(f"  {i}: {fn(v)}" for i, v in enumerate(self._values))
        return f"{self._kind}:{{\n{body}\n}}"

    def __str__(self) -> str:
        return self._text(str)

    def __repr__(self) -> str:
        return self._text(repr)


class PerReplica(DistributedValues):
    """Values that differ per replica (what ``strategy.run`` returns)."""
    _kind = "PerReplica"


class Mirrored(DistributedValues):
    """Values that are the same on every replica."""
    _kind = "Mirrored"


class MirroredVariable(Variable):
    """A variable with one copy per replica device, kept equal: in
    ``strategy.run`` it stands for its replica's copy, elsewhere for the
    first; an assignment outside ``run`` writes every copy, one inside it
    that replica's."""

    def __init__(self, *args: Any, **kwargs: Any):  # made by the creator below
        pass

    @classmethod
    def _make(cls, strategy: "MirroredStrategy", components: list[Variable]) -> "MirroredVariable":
        self = object.__new__(cls)
        self.__dict__["_strategy"] = strategy
        self.__dict__["_components"] = tuple(components)
        return self

    @property
    def values(self) -> tuple[Variable, ...]:
        return self._components

    def _current(self) -> Variable:
        ctx = _replica.get()
        if ctx is not None and ctx.strategy is self._strategy:
            return self._components[ctx.replica_id_in_sync_group]
        return self._components[0]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_strategy", "_components"):
            raise AttributeError(name)
        return getattr(self._current(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"MirroredVariable attribute {name!r} cannot be set; "
                             "assign to the variable instead")

    # the reads and properties of the current copy
    handle = property(lambda self: self._current().handle)
    dtype = property(lambda self: self._current().dtype)
    shape = property(lambda self: self._current().shape)
    name = property(lambda self: self._components[0].name)
    trainable = property(lambda self: self._current().trainable)
    device = property(lambda self: self._current().device)

    def value(self) -> Tensor:
        return self._current().value()

    def read_value(self) -> Tensor:
        return self._current().value()

    def _stored_value(self) -> Tensor:
        return self._current()._stored_value()

    def numpy(self) -> Any:
        return self._current().numpy()

    def __pg_tensor__(self, dtype: Any = None) -> Tensor:
        return self._current().__pg_tensor__(dtype)

    def _targets(self) -> tuple[Variable, ...]:
        ctx = _replica.get()
        return (self._current(),) if ctx is not None else self._components

    def _update(self, method: str, value: Any, read_value: bool) -> Any:
        targets = self._targets()
        for i, v in enumerate(targets):
            x = value.values[i] if isinstance(value, DistributedValues) and len(targets) > 1 \
                else value
            getattr(v, method)(x, read_value=False)
        return self if read_value else None

    def assign(self, value: Any, use_locking: Any = None, name: str | None = None,
               read_value: bool = True) -> Any:
        return self._update("assign", value, read_value)

    def assign_add(self, delta: Any, use_locking: Any = None, name: str | None = None,
                   read_value: bool = True) -> Any:
        return self._update("assign_add", delta, read_value)

    def assign_sub(self, delta: Any, use_locking: Any = None, name: str | None = None,
                   read_value: bool = True) -> Any:
        return self._update("assign_sub", delta, read_value)

    def __repr__(self) -> str:
        body = ",\n".join(f"  {i}: {v!r}" for i, v in enumerate(self._components))
        return f"MirroredVariable:{{\n{body}\n}}"

    def __hash__(self) -> int:
        return object.__hash__(self)


dispatch.STAND_INS.add(MirroredVariable)


# ------------------------------------------------------------------ strategy

def _canonical(name: str) -> str:
    kind, ordinal = placement.parse(name)
    return f"/job:localhost/replica:0/task:0/device:{kind}:{ordinal}"


def _default_devices() -> list[str]:
    gpus = [d.short_name for d in placement.all_devices() if d.device_type == "GPU"]
    return gpus or ["CPU:0"]


class MirroredStrategy:
    """Synchronous replicas on the devices of this process
    (``tf.distribute.MirroredStrategy``)::

        strategy = pg.distribute.MirroredStrategy(["MY_DEVICE:0", "MY_DEVICE:1"])
        with strategy.scope():
            w = pg.Variable(np.zeros(3, np.float32))      # one copy per device
        per_replica = strategy.run(step, args=(dist_batch,))
        total = strategy.reduce(pg.distribute.ReduceOp.SUM, per_replica, axis=None)

    `devices` (names such as "GPU:0", "MY_DEVICE:1", "cpu:1") default to
    every GPU, or the CPU where there is none. They must be distinct and of
    one device type; logical CPU devices come from
    ``pg.config.set_logical_device_configuration``."""

    def __init__(self, devices: Sequence[str] | None = None, cross_device_ops: Any = None):
        names = list(devices) if devices is not None else _default_devices()
        if not names:
            raise ValueError("MirroredStrategy: `devices` must be a non-empty list of "
                             "device names")
        if any(not isinstance(d, str) for d in names):
            raise ValueError(f"MirroredStrategy: devices must be device names (strings), got "
                             f"{names!r}")
        canonical = [_canonical(d) for d in names]
        if len(set(canonical)) != len(canonical):
            raise ValueError(f"No duplicates allowed in `devices` argument: {names}")
        kinds = {placement.parse(d)[0] for d in names}
        if len(kinds) > 1:
            raise ValueError(f"MirroredStrategy: the devices must be of one type, got "
                             f"{sorted(kinds)}; make one strategy per device type")
        for d in names:
            placement._scope_device(d)  # InvalidArgumentError for an unknown device
        self._names = names
        self._devices = tuple(canonical)
        self._kind = kinds.pop()

    @property
    def num_replicas_in_sync(self) -> int:
        return len(self._devices)

    @property
    def extended(self) -> "MirroredStrategy":
        return self

    @property
    def worker_devices(self) -> tuple[str, ...]:
        return self._devices

    # ------------------------------------------------------------ scope
    @contextlib.contextmanager
    def scope(self) -> Iterator["MirroredStrategy"]:
        """Variables made inside are mirrored on every replica device."""
        token = _strategy.set(self)
        creator = variables.variable_creator.set(self._create_variable)
        try:
            yield self
        finally:
            variables.variable_creator.reset(creator)
            _strategy.reset(token)

    def _create_variable(self, initial_value: Any, *args: Any, **kwargs: Any) -> Any:
        if _replica.get() is not None:
            raise errors.FailedPreconditionError(
                "MirroredStrategy: a variable cannot be created inside strategy.run (each "
                "replica would make its own); create it in strategy.scope() before run")
        token = variables.variable_creator.set(None)
        try:
            with placement.device(self._devices[0]):
                first = Variable(initial_value, *args, **kwargs)
            value = first.value()
            components = [first]
            for i, d in enumerate(self._devices[1:], 1):
                with placement.device(d):
                    v = Variable(math_ops.identity(value), *args, **kwargs)
                v._name = f"{first._name}/replica_{i}"  # TensorFlow's names of the copies
                components.append(v)
        finally:
            variables.variable_creator.reset(token)
        return MirroredVariable._make(self, components)

    # ------------------------------------------------------------ run
    def run(self, fn: Callable, args: Sequence[Any] = (), kwargs: dict | None = None,
            options: Any = None) -> Any:
        """`fn(*args, **kwargs)` on every replica (PerReplica arguments
        replaced by the replica's value); the results regrouped: PerReplica
        where they differ, the value itself where every replica returned
        the same object (or there is one replica)."""
        kwargs = kwargs or {}
        token = _strategy.set(self)
        outs = []
        try:
            for i, d in enumerate(self._devices):
                ctx = _replica.set(ReplicaContext(self, i))
                try:
                    with placement.device(d):
                        outs.append(fn(*_select(args, i), **_select(kwargs, i)))
                finally:
                    _replica.reset(ctx)
        finally:
            _strategy.reset(token)
        return _regroup(outs)

    # ------------------------------------------------------------ values
    def experimental_local_results(self, value: Any) -> tuple:
        """The replicas' values of `value` (one element for a plain value)."""
        if isinstance(value, (DistributedValues, MirroredVariable)):
            return tuple(value.values)
        return (value,)

    def reduce(self, reduce_op: Any, value: Any, axis: int | None = None) -> Tensor:
        """The replicas' values combined (ReduceOp.SUM or MEAN; "SUM" and
        "MEAN" too), first along `axis` of each when it is not None; a plain
        value counts once per replica. The result is on the current device
        scope's device (the first replica's when none)."""
        op = _REDUCE_OPS.get(str(getattr(reduce_op, "value", reduce_op)).upper())
        if op is None:
            raise ValueError(f"MirroredStrategy.reduce: reduce_op must be ReduceOp.SUM or "
                             f"ReduceOp.MEAN, got {reduce_op!r}")
        parts = list(self.experimental_local_results(value))
        if len(parts) == 1 and not isinstance(value, (DistributedValues, MirroredVariable)):
            parts = parts * self.num_replicas_in_sync
        parts = [convert_to_tensor(p) for p in parts]
        count = float(len(parts))
        if axis is not None:
            count = float(sum(int(p.shape[axis]) for p in parts))
            parts = [math_ops.reduce_sum(p, axis=axis) for p in parts]
        total = self._sum(parts)
        if op == "MEAN":
            total = math_ops.cast(math_ops.divide(total, count), total.dtype) \
                if total.dtype.is_floating else math_ops.cast(
                    math_ops.floordiv(total, int(count)), total.dtype)
        return total

    def _sum(self, parts: list[Tensor]) -> Tensor:
        devs = [p.device for p in parts]
        if self._kind != "CPU" and len(set(devs)) == len(devs) > 1:
            return collectives.all_reduce(parts, "sum")[0]
        with placement.device(placement._scope.get() or self._devices[0]):
            return math_ops.add_n([math_ops.identity(p) for p in parts]) if len(parts) > 1 \
                else math_ops.identity(parts[0])

    def experimental_distribute_dataset(self, dataset: Any, options: Any = None) -> "_Distributed":
        """Each batch of `dataset` split along its first axis into one
        PerReplica part per replica (sizes differ by at most one)."""
        return _Distributed(self, dataset)

    def distribute_datasets_from_function(self, dataset_fn: Callable,
                                          options: Any = None) -> "_Distributed":
        return _Distributed(self, dataset_fn(None))


class _Distributed:
    def __init__(self, strategy: MirroredStrategy, dataset: Any):
        self._strategy, self._dataset = strategy, dataset

    def __iter__(self) -> Iterator[Any]:
        n = self._strategy.num_replicas_in_sync
        for batch in self._dataset:
            yield _split(batch, n, self._strategy._devices)


def _split(batch: Any, n: int, devices: tuple[str, ...]) -> Any:
    if isinstance(batch, (list, tuple)):
        return type(batch)(_split(b, n, devices) for b in batch)
    if isinstance(batch, dict):
        return {k: _split(v, n, devices) for k, v in batch.items()}
    t = convert_to_tensor(batch)
    if n == 1:
        return t
    sizes = [len(p) for p in np.array_split(np.arange(int(t.shape[0])), n)]
    starts = np.cumsum([0] + sizes)
    parts = []
    for i, d in enumerate(devices):
        with placement.device(d):
            parts.append(math_ops.identity(t[int(starts[i]):int(starts[i + 1])]))
    return PerReplica(parts)


def _select(value: Any, i: int) -> Any:
    if isinstance(value, DistributedValues):
        return value.values[i]
    if isinstance(value, list):
        return [_select(v, i) for v in value]
    if isinstance(value, tuple):
        return tuple(_select(v, i) for v in value)
    if isinstance(value, dict):
        return {k: _select(v, i) for k, v in value.items()}
    return value


def _regroup(outs: list[Any]) -> Any:
    first = outs[0]
    if len(outs) == 1:
        return first
    if isinstance(first, (list, tuple)) and not hasattr(first, "_fields") \
            and all(type(o) is type(first) and len(o) == len(first) for o in outs):
        return type(first)(_regroup([o[j] for o in outs]) for j in range(len(first)))
    if isinstance(first, dict) and all(isinstance(o, dict) and o.keys() == first.keys()
                                       for o in outs):
        return {k: _regroup([o[k] for o in outs]) for k in first}
    if not isinstance(first, Tensor) and all(o is first for o in outs):
        return first  # a mirrored variable, a Python value
    return PerReplica(outs)
