"""Collectives over tensors placed on several devices of one process.

Each function takes one tensor per device (a list), checks them, and calls
the collective op (``CollectiveReduceV2`` and friends) once per device,
concurrently, as TensorFlow's executor runs its collective kernels. Each
participant's op is prepared once per op, device, dtype, attributes and
group (``dispatch.Prepared``, with its group_size and group_key inputs made
once and the instance key in a host tensor of the calling thread); when
every participant takes the prepared fast path, one call into the core
runs them all (``dispatch.run_group``: the first on the calling thread, the
others on the core's threads, without the interpreter's lock), otherwise
the first runs in the calling thread and the others on a pool of Python
threads. A
plugin's kernel may return at once, having enqueued its part (the host
plugin's rendezvous lives on the devices' streams), or wait on the host
until every participant has arrived (the CUDA plugin, which then issues
the NCCL calls of all of them); either way every participant is called
before any must wait. Results are ordinary tensors, one per device;
errors (such as a participant that timed out) are raised as typed
exceptions by the call or where a result is read.

Several threads may call these functions at once: one lock orders whole
collectives, so every device sees them in the same order.

Ranks: the devices of a group are ranked by device ordinal (TensorFlow
ranks by device name), so ``all_gather`` concatenates and
``reduce_scatter`` hands out chunks in ordinal order, whatever the order of
the list.
"""
from __future__ import annotations

import functools
import itertools
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence

from ..framework import dtypes, registry
from ..framework.errors import InvalidArgumentError, NotFoundError, UnimplementedError
from ..framework.tensor import Tensor
from ..ops import raw_ops
from ..runtime import dispatch
from ..runtime.placement import device as device_scope
from ..runtime.placement import get_device
from . import group as process_group

# op name -> (merge_op, final_op) of CollectiveReduceV2
REDUCTIONS = {"sum": ("Add", "Id"), "mean": ("Add", "Div"), "prod": ("Mul", "Id"),
              "min": ("Min", "Id"), "max": ("Max", "Id")}
# The ops' attributes besides timeout_seconds: the ordering-token list is
# empty, and each reduction names TensorFlow's merge_op/final_op.
ORDERED = (("Nordering_token", 0),)
REDUCE_ATTRS = {op: (("merge_op", merge), ("final_op", final)) + ORDERED
                for op, (merge, final) in REDUCTIONS.items()}

# pg.distribute's group keys start here, away from small keys chosen by hand
# for raw collective ops; instance keys count up (int32, wrapping).
_GROUP_KEY_BASE = 1 << 30
_lock = threading.Lock()
# Held while one collective's participants are called, so every device
# sees the collectives of all threads in one order (two threads calling on
# devices 0, 1 and 1, 0 would otherwise wait for each other until the
# timeout).
_enqueue_lock = threading.Lock()
_instance_keys = itertools.count(1)
_group_keys: dict[tuple[str, ...], int] = {}


def _keys(devices: Sequence[str]) -> tuple[int, int]:
    """A group key for this set of devices and a fresh instance key."""
    with _lock:
        group = tuple(sorted(devices))
        gk = _group_keys.setdefault(group, _GROUP_KEY_BASE + len(_group_keys))
        return gk, next(_instance_keys) % (2**31 - 1) + 1


# (op, device, dtype, attributes, timeout, group size, group key) -> the prepared op
# and its group_size and group_key inputs; at most _MAX_PREPARED, emptied
# when full.
_prepared: dict[tuple, tuple[dispatch.Prepared, Tensor, Tensor]] = {}
_MAX_PREPARED = 256
_local = threading.local()    # this thread's instance_key input
# (op, device type, dtype, registry generation) that check_kernels passed
_kernels_checked: set[tuple] = set()


def prepare(op_name: str, dev: Any, attrs: tuple, timeout: float, group_size: int,
            group_key: int) -> tuple[dispatch.Prepared, Tensor, Tensor]:
    """`op_name` with attributes `attrs` ((name, value) pairs) and
    `timeout` on device `dev`, prepared once (``dispatch.Prepared``), and
    host tensors of its group_size and group_key inputs, made once."""
    return (dispatch.Prepared(op_name, dev, dict(attrs, timeout_seconds=float(timeout))),
            dispatch.host_input(group_size, dtypes.int32),
            dispatch.host_input(group_key, dtypes.int32))


def instance_input(instance_key: int) -> Tensor:
    """This thread's instance_key input, holding `instance_key`. The
    collective kernels read it while they are called, so a thread may set
    it again for its next call."""
    try:
        t = _local.instance
    except AttributeError:
        t = _local.instance = dispatch.host_input(0, dtypes.int32)
    t._a[()] = instance_key
    return t


def _call(op_name: str, dev: Any, attrs: tuple, timeout: float, n: int, gk: int, ik: int,
          inputs: list, shape: list | None = None) -> tuple[dispatch.Prepared, list]:
    """One participant's prepared op and inputs: `inputs` (the input tensor,
    or none for a broadcast receiver, whose output shape is `shape`) then
    the key inputs."""
    key = (op_name, dev, inputs[0]._dtype if inputs else None, attrs, timeout, n, gk)
    ready = _prepared.get(key)
    if ready is None:
        if len(_prepared) >= _MAX_PREPARED:
            _prepared.clear()
        ready = _prepared.setdefault(key, prepare(op_name, dev, attrs, timeout, n, gk))
    prepared, size_t, key_t = ready
    keys = [size_t, key_t, instance_input(ik)]
    if shape is not None:
        return prepared, keys + [dispatch.host_input(shape, dtypes.int32)]
    return prepared, inputs + keys


def _run(calls: list[tuple[dispatch.Prepared, list]], donated: int = 0) -> list[Tensor]:
    """Runs one collective's participants at once (see ``_concurrently``):
    in one call into the core where every one takes its fast path
    (``dispatch.run_group``, the core's threads, with the inputs of mask
    `donated` donated), else on the pool."""
    with _enqueue_lock:
        outs = dispatch.run_group(calls, donated)
        if outs is not None:
            return outs
        return [out[0] for out in _concurrently(
            [functools.partial(prepared, inputs) for prepared, inputs in calls])]


def _per_process(tensors: Any) -> bool:
    """Whether a call means the process group's form (one tensor, not a list)."""
    return isinstance(tensors, Tensor) or (process_group.is_initialized()
                                           and not isinstance(tensors, (list, tuple)))


def _err(fn: str, msg: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"pg.distribute.{fn}: {msg}", op=fn)


def _check_tensors(fn: str, tensors: Sequence[Any], same_shape: bool = True) -> list[Tensor]:
    """One tensor per device, all of one dtype (and shape)."""
    tensors = list(tensors)
    if not tensors:
        raise _err(fn, "needs at least one tensor (one per device)")
    for i, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise _err(fn, f"tensors[{i}] is a {type(t).__name__}, not a pg.Tensor placed on a "
                       "device; create each one under `with pg.device(...)`")
        if not t.device:
            raise UnimplementedError(f"pg.distribute.{fn}: tensors[{i}] has no device (a "
                                     "symbolic tensor of pg.function?); collectives run "
                                     "eagerly only: call pg.distribute outside pg.function",
                                     op=fn)
    seen: dict[str, int] = {}
    for i, t in enumerate(tensors):
        if t.device in seen:
            raise _err(fn, f"tensors[{seen[t.device]}] and tensors[{i}] are both on {t.device}; "
                       "pass one tensor per device")
        seen[t.device] = i
    first = tensors[0]
    for i, t in enumerate(tensors[1:], 1):
        if t.dtype != first.dtype:
            raise _err(fn, f"tensors[{i}] is {t.dtype.name} on {t.device}, tensors[0] is "
                       f"{first.dtype.name}: every tensor must have the same dtype")
        if same_shape and t.shape != first.shape:
            raise _err(fn, f"tensors[{i}] has shape {list(t.shape)} on {t.device}, tensors[0] "
                       f"has {list(first.shape)}: every tensor must have the same shape")
    return tensors


def check_kernels(fn: str, op: str, devices: Sequence[Any], dtype: Any) -> None:
    """Every participant can run `op` (checked before any is enqueued: one
    that fails at dispatch would leave the others waiting until their
    timeout). The rendezvous lives inside one plugin, so all devices must be
    of one type."""
    types = {d.device_type for d in devices}
    if len(types) == 1:
        checked = (op, next(iter(types)), dtype, registry.generation[0])
        if checked in _kernels_checked:
            return
    if len(types) > 1:
        raise _err(fn, f"the devices are of several types ({sorted(types)}); a collective "
                   "runs across the devices of one plugin")
    kind = types.pop()
    if not any(k.matches({"T": dtype}) for k in registry.kernels_for(op, kind)):
        raise NotFoundError(f"pg.distribute.{fn}: no {op} kernel for {dtype.name} on {kind}; "
                            f"registered: {registry.describe_kernels(op)}. Collectives run on "
                            "devices whose plugin implements them (MY_DEVICE and GPU)", op=op)
    if len(_kernels_checked) >= _MAX_PREPARED:
        _kernels_checked.clear()
    _kernels_checked.add(checked)


def _on(t: Tensor, fn: Callable[[], Tensor]) -> Tensor:
    """fn() under `t`'s device."""
    with device_scope(t.device_object):
        return fn()


def _timeout(timeout: float | None) -> float:
    return 0.0 if timeout is None else float(timeout)


_pool: ThreadPoolExecutor | None = None


def _concurrently(jobs: list[Callable[[], Any]]) -> list[Any]:
    """Runs the participants' calls at once (job 0 in this thread, the others
    on the pool; the caller holds the enqueue lock); their results in
    order, or the first error once all have returned."""
    global _pool
    if len(jobs) == 1:
        return [jobs[0]()]
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=64, thread_name_prefix="pg-collective")
    futures = [_pool.submit(job) for job in jobs[1:]]
    results: list[Any] = []
    errors: list[BaseException] = []
    try:
        results.append(jobs[0]())
    except Exception as exc:  # noqa: BLE001 (raised once every participant returned)
        errors.append(exc)
    for f in futures:
        try:
            results.append(f.result())
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)
    if errors:
        raise errors[0]
    return results


def all_reduce(tensors: Sequence[Tensor] | Tensor, op: str = "sum",
               timeout: float | None = None, *, donate: bool = False) -> list[Tensor] | Tensor:
    """Reduces the tensors (one per device, same dtype and shape) element-wise
    with `op` ("sum", "mean", "min", "max" or "prod"); returns the result on
    every device, in the order of `tensors`. "mean" of integers truncates
    toward zero. `timeout` (seconds; None: the plugin's default) bounds the
    wait for the other participants (DeadlineExceededError when read).
    ``donate=True`` gives the tensors up to the call: each device's result
    may be written over its tensor's memory (see ``group.all_reduce``).
    Given one tensor in a process group: across the processes (group.py)."""
    if _per_process(tensors):
        return process_group.all_reduce(tensors, op, timeout, donate=donate)
    if op not in REDUCTIONS:
        raise _err("all_reduce", f"unknown op {op!r}; use one of {sorted(REDUCTIONS)}")
    tensors = _check_tensors("all_reduce", tensors)
    check_kernels("all_reduce", "CollectiveReduceV2", [t.device_object for t in tensors],
                   tensors[0].dtype)
    gk, ik = _keys([t.device for t in tensors])
    n, attrs, secs = len(tensors), REDUCE_ATTRS[op], _timeout(timeout)
    calls = [_call("CollectiveReduceV2", t._dev, attrs, secs, n, gk, ik, [t]) for t in tensors]
    if not donate:
        return _run(calls)
    try:
        return _run(calls, donated=1)
    finally:
        for t in tensors:
            t._give_up("pg.distribute.all_reduce")


def reduce_scatter(tensors: Sequence[Tensor] | Tensor, op: str = "sum",
                   timeout: float | None = None) -> list[Tensor] | Tensor:
    """Reduces the tensors like ``all_reduce`` and gives the device of rank r
    (ordinal order) the r-th of len(tensors) equal chunks of the result along
    the first axis, which must be divisible by len(tensors). Given one
    tensor in a process group: across the processes (group.py)."""
    if _per_process(tensors):
        return process_group.reduce_scatter(tensors, op, timeout)
    if op not in REDUCTIONS:
        raise _err("reduce_scatter", f"unknown op {op!r}; use one of {sorted(REDUCTIONS)}")
    tensors = _check_tensors("reduce_scatter", tensors)
    check_kernels("reduce_scatter", "CollectiveReduceScatterV2",
                   [t.device_object for t in tensors], tensors[0].dtype)
    n = len(tensors)
    shape = tensors[0].shape
    if not shape or shape[0] % n != 0:
        raise _err("reduce_scatter", f"the first dimension of shape {list(shape)} must be "
                   f"divisible by the number of devices ({n})")
    gk, ik = _keys([t.device for t in tensors])
    attrs, secs = REDUCE_ATTRS[op], _timeout(timeout)
    return _run([_call("CollectiveReduceScatterV2", t._dev, attrs, secs, n, gk, ik, [t])
                 for t in tensors])


def all_gather(tensors: Sequence[Tensor] | Tensor, axis: int = 0,
               timeout: float | None = None) -> list[Tensor] | Tensor:
    """Concatenates the tensors (one per device, same dtype and shape) along
    `axis` in device ordinal order; returns the result on every device.
    Given one tensor in a process group: across the processes (group.py)."""
    if _per_process(tensors):
        return process_group.all_gather(tensors, axis, timeout)
    tensors = _check_tensors("all_gather", tensors)
    check_kernels("all_gather", "CollectiveGatherV2", [t.device_object for t in tensors],
                   tensors[0].dtype)
    rank = len(tensors[0].shape)
    if not -rank <= axis < rank:
        raise _err("all_gather", f"axis {axis} is out of range for shape "
                   f"{list(tensors[0].shape)}")
    axis %= rank
    gk, ik = _keys([t.device for t in tensors])
    n, secs = len(tensors), _timeout(timeout)
    perm = [axis] + [d for d in range(rank) if d != axis]
    if axis != 0:   # gather along the first axis, then move it back
        tensors = [_on(t, lambda t=t: raw_ops.Transpose(x=t, perm=perm)) for t in tensors]
    outs = _run([_call("CollectiveGatherV2", t._dev, ORDERED, secs, n, gk, ik, [t])
                 for t in tensors])
    if axis != 0:
        inverse = [perm.index(d) for d in range(rank)]
        outs = [_on(y, lambda y=y: raw_ops.Transpose(x=y, perm=inverse)) for y in outs]
    return outs


def broadcast(tensor: Tensor, devices: Sequence[str] | None = None,
              timeout: float | None = None, *, src: int = 0) -> list[Tensor] | Tensor:
    """Copies `tensor` to each of `devices` (names such as "MY_DEVICE:1")
    through the collective broadcast: returns one tensor per entry of
    `devices`. The source device takes part even when it is not listed.
    Without `devices`, in a process group: rank `src`'s tensor on every
    process (``broadcast(t, src=0)`` or ``broadcast(t, 0)``, group.py)."""
    if devices is None or isinstance(devices, int):
        return process_group.broadcast(tensor, src if devices is None else devices, timeout)
    if not isinstance(tensor, Tensor):
        raise _err("broadcast", f"tensor is a {type(tensor).__name__}, not a pg.Tensor "
                   "placed on a device")
    if isinstance(devices, str) or not devices:
        raise _err("broadcast", f"devices must be a non-empty list of device names, got "
                   f"{devices!r}")
    objects = [get_device(d) for d in devices]
    names = [d.name for d in objects]
    if len(set(names)) != len(names):
        raise _err("broadcast", f"devices {list(devices)} name a device twice")
    check_kernels("broadcast", "CollectiveBcastRecvV2", objects + [tensor.device_object],
                   tensor.dtype)
    src = tensor.device
    group = names if src in names else [src] + names
    gk, ik = _keys(group)
    n, shape, secs = len(group), list(tensor.shape), _timeout(timeout)
    by_name = {d.name: d for d in objects}
    recv_attrs = (("T", tensor.dtype),)

    def call(name: str) -> tuple[dispatch.Prepared, list]:
        if name == src:
            return _call("CollectiveBcastSendV2", tensor._dev, (), secs, n, gk, ik, [tensor])
        return _call("CollectiveBcastRecvV2", by_name[name], recv_attrs, secs, n, gk, ik, [],
                     shape)
    results = dict(zip(group, _run([call(name) for name in group])))
    return [results[name] for name in names]
