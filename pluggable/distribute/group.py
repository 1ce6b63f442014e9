"""The process group: several processes (one per device, usually), each
calling the same collectives with one tensor of its own.

``init_process_group`` reads torchrun's environment variables (RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK; ``python -m
pluggable.distribute.run`` sets them), meets the other ranks through the
TCP store that rank 0 hosts, and makes the backend. Afterwards
``pg.distribute.all_reduce(t)`` and the other collectives, given one tensor
instead of a list, run across the processes; ``all_to_all`` exists only
here.
"""
from __future__ import annotations

import atexit
import os
from typing import Any

from ..framework.errors import (AlreadyExistsError, FailedPreconditionError,
                                InvalidArgumentError, UnimplementedError)
from ..framework.tensor import Tensor
from . import host  # noqa: F401 (registers the "host" backend)
from .backend import Backend, Work, auto_backend, backend_class
from .store import TCPStore

REDUCE_OPS = ("sum", "mean", "prod", "min", "max")
DEFAULT_TIMEOUT = 300.0


class ProcessGroup:
    """This process's membership of a group: rank, size, store, backends."""

    def __init__(self, rank: int, world_size: int, store: TCPStore, backend: str,
                 timeout: float, local_rank: int):
        self.rank, self.world_size, self.local_rank = rank, world_size, local_rank
        self.store, self.backend_name, self.timeout = store, backend, timeout
        self.backends: dict[str, Backend] = {}

    def backend(self, name: str) -> Backend:
        """The backend `name`, made (collectively: every rank at the same
        call) on first use."""
        if name not in self.backends:
            cls = backend_class(name)
            self.backends[name] = cls(self.store, f"backend/{name}", self.rank,
                                      self.world_size, self.timeout)
        return self.backends[name]

    def backend_for(self, t: Tensor) -> Backend:
        name = self.backend_name
        if name == "auto":
            name = auto_backend(t.device_object.device_type)
        return self.backend(name)

    def close(self) -> None:
        for b in self.backends.values():
            b.close()
        self.backends.clear()
        self.store.close()


_group: ProcessGroup | None = None


def _env_int(name: str, given: int | None, default: int | None = None) -> int:
    if given is not None:
        return int(given)
    raw = os.environ.get(name)
    if raw is None:
        if default is not None:
            return default
        raise InvalidArgumentError(
            f"init_process_group: {name} is not set and was not given; launch with `python -m "
            "pluggable.distribute.run --nproc N script.py`, or set RANK, WORLD_SIZE, "
            "MASTER_ADDR and MASTER_PORT", op="init_process_group")
    try:
        return int(raw)
    except ValueError:
        raise InvalidArgumentError(f"init_process_group: {name}={raw!r} is not an integer",
                                   op="init_process_group") from None


def init_process_group(backend: str = "auto", rank: int | None = None,
                       world_size: int | None = None, timeout: float = DEFAULT_TIMEOUT,
                       master_addr: str | None = None,
                       master_port: int | None = None) -> ProcessGroup:
    """Joins this process to a group of `world_size` processes as `rank`.

    Arguments left out come from RANK, WORLD_SIZE, MASTER_ADDR (default
    127.0.0.1) and MASTER_PORT. Rank 0 hosts the store at
    MASTER_ADDR:MASTER_PORT; the others connect to it (waiting up to
    `timeout` seconds). `backend` is "host" (TCP between processes, any
    device), another registered backend, or "auto" (per tensor: the
    backend registered for its device type, else "host"). `timeout` is also
    the default bound of every collective (``DeadlineExceededError``)."""
    global _group
    if _group is not None:
        raise AlreadyExistsError("init_process_group: this process is already rank "
                                 f"{_group.rank} of a group of {_group.world_size}; call "
                                 "destroy_process_group() first", op="init_process_group")
    if backend != "auto":
        backend_class(backend)      # an unknown name fails before anyone waits
    world = _env_int("WORLD_SIZE", world_size)
    me = _env_int("RANK", rank)
    if world < 1 or not 0 <= me < world:
        raise InvalidArgumentError(f"init_process_group: rank {me} is not in [0, {world}) "
                                   "(RANK must be below WORLD_SIZE)", op="init_process_group")
    addr = master_addr or os.environ.get("MASTER_ADDR", "127.0.0.1")
    port = _env_int("MASTER_PORT", master_port)
    store = TCPStore(addr, port, me, world, is_server=me == 0, timeout=timeout)
    group = ProcessGroup(me, world, store, backend, float(timeout),
                         _env_int("LOCAL_RANK", None, default=me))
    try:
        group.backend("host" if backend == "auto" else backend)
        store.barrier("init", timeout)
    except BaseException:
        group.close()
        raise
    _group = group
    return group


def is_initialized() -> bool:
    """Whether this process belongs to a process group."""
    return _group is not None


def current(fn: str = "pg.distribute") -> ProcessGroup:
    """The process group (FailedPreconditionError when there is none)."""
    if _group is None:
        raise FailedPreconditionError(f"{fn}: no process group; call "
                                      "pg.distribute.init_process_group() first", op=fn)
    return _group


def get_rank() -> int:
    """This process's rank in the group."""
    return current("get_rank").rank


def get_world_size() -> int:
    """The number of processes in the group."""
    return current("get_world_size").world_size


def barrier(timeout: float | None = None) -> None:
    """Waits until every rank has called ``barrier`` (through the store)."""
    g = current("barrier")
    g.store.barrier("user", g.timeout if timeout is None else timeout)


def destroy_process_group() -> None:
    """Leaves the group: waits briefly for the other ranks (rank 0 hosts the
    store they may still need), then closes connections."""
    global _group
    g, _group = _group, None
    if g is None:
        return
    try:
        g.store.barrier("destroy", min(g.timeout, 30.0))
    except Exception:   # noqa: BLE001 (a dead peer must not stop this rank from leaving)
        pass
    g.close()


atexit.register(destroy_process_group)


# ------------------------------------------------------------------ collectives

def _check(fn: str, t: Any) -> Tensor:
    if not isinstance(t, Tensor):
        raise InvalidArgumentError(f"pg.distribute.{fn}: expected one pg.Tensor per process, "
                                   f"got a {type(t).__name__}", op=fn)
    if not t.device:
        raise UnimplementedError(f"pg.distribute.{fn}: the tensor has no device (a symbolic "
                                 "tensor of pg.function?); collectives run eagerly only", op=fn)
    return t


def _op(fn: str, op: str) -> str:
    if op not in REDUCE_OPS:
        raise InvalidArgumentError(f"pg.distribute.{fn}: unknown op {op!r}; use one of "
                                   f"{sorted(REDUCE_OPS)}", op=fn)
    return op


def _bool_mean(fn: str, t: Tensor, op: str) -> None:
    if op == "mean" and t.dtype.is_bool:
        raise InvalidArgumentError(f"pg.distribute.{fn}: 'mean' of bool tensors is undefined; "
                                   "use 'max' (any) or 'min' (all)", op=fn)


def _split_check(fn: str, t: Tensor, n: int) -> None:
    if not t.shape or t.shape[0] % n:
        raise InvalidArgumentError(f"pg.distribute.{fn}: the first dimension of shape "
                                   f"{list(t.shape)} on {t.device} must be divisible by the "
                                   f"world size ({n})", op=fn)


def _timeout(g: ProcessGroup, timeout: float | None) -> float:
    return g.timeout if timeout is None else float(timeout)


def all_reduce(t: Tensor, op: str = "sum", timeout: float | None = None, *,
               donate: bool = False) -> Tensor:
    """The element-wise `op` ("sum", "mean", "prod", "min", "max") of every
    rank's `t` (same dtype and shape on every rank), reduced in rank order:
    the same bits on every rank, on `t`'s device.

    ``donate=True`` gives `t` up to the call, as ``torch.distributed``'s
    in-place all-reduce does with its tensor: the result may be written over
    `t`'s memory (the NCCL backend then reduces in place, which NCCL does
    faster than into a second buffer, and needs no second buffer), and `t`
    cannot be used afterwards (``t.is_donated``; any use raises
    FailedPreconditionError). Memory that another tensor shares (a reshape
    of `t`, a DLPack export) is never written over: the result then goes to
    new memory."""
    g, t, op = current("all_reduce"), _check("all_reduce", t), _op("all_reduce", op)
    _bool_mean("all_reduce", t, op)
    backend = g.backend_for(t)
    if not donate:
        return backend.all_reduce(t, op, _timeout(g, timeout))
    try:
        return backend.all_reduce_donated(t, op, _timeout(g, timeout))
    finally:
        t._give_up("pg.distribute.all_reduce")


def all_reduce_async(t: Tensor, op: str = "sum", timeout: float | None = None) -> Work:
    """Starts ``all_reduce(t, op, timeout)`` and returns at once (with the
    host backend; other backends may run it now): ``.wait()`` on the result
    gives the reduced tensor, or raises the collective's typed error."""
    g, t, op = current("all_reduce"), _check("all_reduce", t), _op("all_reduce", op)
    _bool_mean("all_reduce", t, op)
    return g.backend_for(t).all_reduce_async(t, op, _timeout(g, timeout))


def reduce_scatter(t: Tensor, op: str = "sum", timeout: float | None = None) -> Tensor:
    """Rank r's chunk of ``all_reduce(t, op)``: the first axis split in
    world_size equal parts (it must be divisible)."""
    g, t, op = current("reduce_scatter"), _check("reduce_scatter", t), _op("reduce_scatter", op)
    _split_check("reduce_scatter", t, g.world_size)
    _bool_mean("reduce_scatter", t, op)
    return g.backend_for(t).reduce_scatter(t, op, _timeout(g, timeout))


def all_gather(t: Tensor, axis: int = 0, timeout: float | None = None) -> Tensor:
    """Every rank's `t` (same dtype and shape) concatenated along `axis` in rank order."""
    g, t = current("all_gather"), _check("all_gather", t)
    rank = len(t.shape)
    if not -rank <= axis < rank:
        raise InvalidArgumentError(f"pg.distribute.all_gather: axis {axis} is out of range for "
                                   f"shape {list(t.shape)}", op="all_gather")
    return g.backend_for(t).all_gather(t, axis % rank, _timeout(g, timeout))


def broadcast(t: Tensor, src: int = 0, timeout: float | None = None) -> Tensor:
    """Rank `src`'s `t` on every rank (each passes a tensor of that dtype and shape)."""
    g, t = current("broadcast"), _check("broadcast", t)
    if isinstance(src, bool) or not isinstance(src, int) or not 0 <= src < g.world_size:
        raise InvalidArgumentError(f"pg.distribute.broadcast: src={src!r} is not a rank of "
                                   f"the group [0, {g.world_size})", op="broadcast")
    return g.backend_for(t).broadcast(t, src, _timeout(g, timeout))


def all_to_all(t: Tensor, timeout: float | None = None) -> Tensor:
    """Splits `t`'s first axis in world_size chunks and sends chunk j to rank
    j; returns the chunks received from ranks 0..n-1, concatenated."""
    g, t = current("all_to_all"), _check("all_to_all", t)
    _split_check("all_to_all", t, g.world_size)
    return g.backend_for(t).all_to_all(t, _timeout(g, timeout))
