"""The "nccl" backend: collectives between processes on GPUs, through the
collective kernels of the device's plugin (NCCL in the CUDA reference
plugin) and its collectives extension (``nccl.py``).

One communicator per device a rank uses, made at the first collective on
it (every rank at the same call): rank 0 asks its plugin for an id, puts it
in the group's store, the others read it, and each joins as its rank
(``nccl.init``, in a thread of its own, so that a peer that died meanwhile
gives ``UnavailableError`` rather than a wait without end). Then each
collective is ONE op on the tensor's device (``CollectiveReduceV2`` with
``group_size`` = world size and the communicator's group key, and
friends), enqueued on the device's stream like any other op: the call
returns at once, the result is ready when read, and the ranks' data never
leaves the GPUs.

Every rank must use a device of its own (one GPU per process: ``GPU:<LOCAL_RANK>``
on a host, or ``CUDA_VISIBLE_DEVICES``); NCCL refuses two ranks on one GPU.

Faults:
  - a rank that dies: the store reports it (``TCPStore.watch``), this
    backend aborts its communicators, and the collectives in flight fail
    with ``UnavailableError`` where their results are read; later calls
    raise ``FailedPreconditionError`` naming the dead rank(s);
  - a rank that is alive but does not call the collective within
    `timeout`: the plugin's watchdog aborts the communicator
    (``DeadlineExceededError`` where the result is read).

Reductions in the device's dtype: sums of floats in NCCL's ring or tree
order (the same bits on every rank; not numpy's order), "mean" divides
after the sum (integers toward zero), bool tensors reduce as 0/1 integers
("sum"/"max": any, "prod"/"min": all). ``all_reduce_async`` enqueues at
once (the collective runs on the device's stream, in order with the
rest of its work).
"""
from __future__ import annotations

import itertools
import socket
import threading
from typing import Any

from ..framework import dtypes
from ..framework.errors import (DeadlineExceededError, FailedPreconditionError, OpError,
                                UnavailableError)
from ..framework.tensor import Tensor
from ..ops import raw_ops
from ..runtime import dispatch
from ..runtime.placement import device as device_scope
from . import nccl
from .backend import Backend, register_backend
from .collectives import ORDERED, REDUCE_ATTRS, check_kernels, instance_input, prepare
from .store import TCPStore

# Group keys of this backend's communicators: away from the in-process
# collectives' keys (1 << 30 and up) and from small keys chosen by hand.
_GROUP_KEY_BASE = 1 << 29


class NcclBackend(Backend):
    """Collectives between processes, one GPU per rank, through NCCL."""

    name = "nccl"

    def __init__(self, store: TCPStore, prefix: str, rank: int, world_size: int,
                 timeout: float):
        super().__init__(store, prefix, rank, world_size, timeout)
        self._lock = threading.Lock()
        # One communicator set-up at a time in this process: two threads
        # making their first collective at once would otherwise both take
        # the same serial (and rank 0 publish two NCCL ids under one key).
        self._setup = threading.Lock()
        self._comms: dict[str, tuple[Any, int]] = {}    # device name -> (device, group key)
        self._instances = itertools.count(1)
        # (op, device name, dtype, attributes) -> (the prepared op, the
        # group_size and group_key inputs), once the kernel check passed and
        # the communicator exists.
        self._ready: dict[tuple, tuple[Any, Tensor, Tensor]] = {}
        self._broken: OpError | None = None
        self._watch = store.watch(self._peers_lost)

    # -------------------------------------------------------------- faults
    def _peers_lost(self, ranks: list[int], why: str) -> None:
        """The store saw ranks die: abort every communicator, so that the
        collectives waiting for them fail instead of hanging."""
        with self._lock:
            if self._broken is None:
                self._broken = UnavailableError(
                    f"pg.distribute (nccl backend, rank {self.rank}): {why}; the group is "
                    "broken: call destroy_process_group() and start again", op="nccl")
            comms = list(self._comms.values())
        for dev, key in comms:
            try:
                nccl.abort(dev, key)
            except OpError:
                pass     # aborted already (by the plugin's watchdog)

    def _check_alive(self, fn: str) -> None:
        if self._broken is not None:
            raise FailedPreconditionError(f"pg.distribute.{fn}: {self._broken.message}",
                                          op=fn)

    # -------------------------------------------------------------- set-up
    def _group_key(self, fn: str, t: Tensor, timeout: float) -> int:
        """The group key of the communicator on `t`'s device, made (by every
        rank at this call) when it is the first collective there."""
        self._check_alive(fn)
        dev = t.device_object
        with self._lock:
            known = self._comms.get(dev.name)
        if known is not None:
            return known[1]
        with self._setup:
            with self._lock:     # made by another thread while this one waited
                known = self._comms.get(dev.name)
                if known is not None:
                    return known[1]
                serial = len(self._comms)
            nccl.require(dev)        # every rank refuses a plugin without the extension
            self._check_distinct(fn, dev, serial, timeout)
            key = f"{self.prefix}/uid/{serial}"
            if self.rank == 0:
                uid = nccl.unique_id(dev)
                self.store.set(key, uid)
            else:
                uid = self.store.get(key, timeout)
            group_key = _GROUP_KEY_BASE + serial
            self._join(fn, dev, uid, group_key, timeout)
            with self._lock:
                self._comms[dev.name] = (dev, group_key)
        return group_key

    def _check_distinct(self, fn: str, dev: Any, serial: int, timeout: float) -> None:
        """Every rank publishes which GPU it is about to use (host and PCI bus
        id); two ranks on one GPU fail on every rank, before NCCL sees them."""
        me = f"{socket.gethostname()}/{dev.pci_bus_id or dev.name}"
        self.store.set(f"{self.prefix}/gpu/{serial}/{self.rank}", me.encode())
        seen: dict[str, int] = {}
        for r in range(self.world_size):
            where = self.store.get(f"{self.prefix}/gpu/{serial}/{r}", timeout).decode()
            if where in seen:
                raise FailedPreconditionError(
                    f"pg.distribute.{fn} (nccl backend): ranks {seen[where]} and {r} use the "
                    f"same GPU ({where}); NCCL needs one GPU per rank: place rank r's tensors on "
                    "GPU:<LOCAL_RANK> (or give each process its own CUDA_VISIBLE_DEVICES), or "
                    "use init_process_group(backend=\"host\") to share a GPU", op=fn)
            seen[where] = r

    def _join(self, fn: str, dev: Any, uid: bytes, group_key: int, timeout: float) -> None:
        """nccl.init in a thread, waited for while the group is alive."""
        outcome: list[BaseException | None] = []

        def run() -> None:
            try:
                nccl.init(dev, self.world_size, self.rank, uid, group_key)
                outcome.append(None)
            except BaseException as exc:   # noqa: BLE001 (handed to the waiting thread)
                outcome.append(exc)
        joiner = threading.Thread(target=run, name="pg-nccl-init", daemon=True)
        joiner.start()
        waited = 0.0
        while joiner.is_alive():
            joiner.join(0.05)
            waited += 0.05
            self._check_alive(fn)
            if waited > timeout:
                raise DeadlineExceededError(
                    f"pg.distribute.{fn} (nccl backend, rank {self.rank}): the communicator "
                    f"on {dev.name} was not ready after {timeout:g} s (every rank must make "
                    "its first collective on a GPU at the same call)", op=fn)
        if outcome and outcome[0] is not None:
            raise outcome[0]

    def close(self) -> None:
        self._watch.close()
        self._ready.clear()
        with self._lock:
            comms, self._comms = list(self._comms.values()), {}
            broken = self._broken is not None
        for dev, key in comms:
            if not broken:
                dev.wait_for_work()      # nothing of ours in flight when it goes
            try:
                nccl.abort(dev, key)
            except OpError:
                pass

    # -------------------------------------------------------------- collectives
    def _op(self, fn: str, op_name: str, t: Tensor, timeout: float, attrs: tuple,
            recv_shape: tuple | None = None, donate: bool = False) -> Tensor:
        """`op_name` with attributes `attrs` ((name, value) pairs) and
        `timeout` on `t`'s device, the key inputs naming the communicator;
        `t` is the input (the receiver's template for a broadcast receive,
        whose shape is `recv_shape`).

        The per-call path is short (a small all-reduce is all host cost): the
        kernel check, the communicator and the op's plan are looked up once
        per op, device, dtype and attributes (``dispatch.Prepared``); the key
        inputs are host tensors made once, the instance key one per thread
        whose value is set before each call (the kernel reads it during the
        call)."""
        dev = t._dev
        ready_key = (op_name, dev, t._dtype, attrs, timeout)
        ready = self._ready.get(ready_key)
        if ready is None:
            check_kernels(fn, op_name, [dev], t.dtype)
            group_key = self._group_key(fn, t, timeout)
            ready = self._ready[ready_key] = prepare(op_name, dev, attrs, timeout,
                                                     self.world_size, group_key)
        elif self._broken is not None:
            self._check_alive(fn)
        prepared, size_t, key_t = ready
        instance = instance_input(next(self._instances) % (2**31 - 1) + 1)
        if recv_shape is not None:
            shape = dispatch.host_input(list(recv_shape), dtypes.int32)
            return prepared([size_t, key_t, instance, shape])[0]
        return prepared([t, size_t, key_t, instance], 1 if donate else 0)[0]

    def all_reduce(self, t: Tensor, op: str, timeout: float) -> Tensor:
        return self._reduce("all_reduce", "CollectiveReduceV2", t, op, timeout)

    def all_reduce_donated(self, t: Tensor, op: str, timeout: float) -> Tensor:
        return self._reduce("all_reduce", "CollectiveReduceV2", t, op, timeout, donate=True)

    def reduce_scatter(self, t: Tensor, op: str, timeout: float) -> Tensor:
        return self._reduce("reduce_scatter", "CollectiveReduceScatterV2", t, op, timeout)

    def _reduce(self, fn: str, op_name: str, t: Tensor, op: str, timeout: float,
                donate: bool = False) -> Tensor:
        if t.dtype.is_bool:     # as 0/1 integers: sum/max = any, prod/min = all
            with device_scope(t.device_object):
                as_int = raw_ops.Cast(x=t, DstT=dtypes.int32)
            # the integer copy is this call's own: the reduction may go over it
            out = self._reduce(fn, op_name, as_int, op, timeout,
                               donate=op_name == "CollectiveReduceV2")
            with device_scope(t.device_object):
                return raw_ops.Cast(x=out, DstT=dtypes.bool_)
        return self._op(fn, op_name, t, timeout, REDUCE_ATTRS[op], donate=donate)

    def all_gather(self, t: Tensor, axis: int, timeout: float) -> Tensor:
        rank = len(t.shape)
        perm = [axis] + [d for d in range(rank) if d != axis]
        if axis != 0:     # gather along the first axis, then move it back
            with device_scope(t.device_object):
                t = raw_ops.Transpose(x=t, perm=perm)
        y = self._op("all_gather", "CollectiveGatherV2", t, timeout, ORDERED)
        if axis != 0:
            with device_scope(y.device_object):
                y = raw_ops.Transpose(x=y, perm=[perm.index(d) for d in range(rank)])
        return y

    def broadcast(self, t: Tensor, src: int, timeout: float) -> Tensor:
        if self.rank == src:
            return self._op("broadcast", "CollectiveBcastSendV2", t, timeout, ())
        return self._op("broadcast", "CollectiveBcastRecvV2", t, timeout, (("T", t.dtype),),
                        recv_shape=tuple(t.shape))

    def all_to_all(self, t: Tensor, timeout: float) -> Tensor:
        return self._op("all_to_all", "CollectiveAllToAllV2", t, timeout, ORDERED)


register_backend("nccl", NcclBackend, ("GPU",))
