"""The backend interface of process groups, and the table of backends.

A backend moves the data of the collectives between the processes of a
group: one instance per process, made by ``init_process_group`` (or on first
use, for backends picked by "auto"), each method called by every rank in
the same order with one tensor per process, returning the result as a new
tensor on the input's device. ``host.py`` is the backend that works for
every device (bytes over TCP, reductions with numpy); a backend for one
kind of device (NCCL for GPUs) registers itself with ``register_backend``
and is preferred by "auto" for tensors of the device types it names.
"""
from __future__ import annotations

import abc
import importlib
import threading
import time
from typing import Any, Callable, Sequence

from ..framework.errors import InvalidArgumentError
from ..framework.tensor import Tensor
from .store import TCPStore


class Work:
    """A collective started by ``Backend.all_reduce_async``: ``wait()``
    returns its result (or raises its typed error) in the calling thread.
    `started_at` is the ``time.perf_counter()`` at which the backend began
    moving its data (None until then)."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self._result: Any = None
        self._error: BaseException | None = None
        self._finish: Callable[[Any], Tensor] | None = None
        self.started_at: float | None = None

    def set_result(self, value: Any, finish: Callable[[Any], Tensor] | None = None) -> None:
        """Completes the work with `value` (`finish(value)` makes the tensor
        in the waiting thread)."""
        self._result, self._finish = value, finish
        self._done.set()

    def set_error(self, error: BaseException) -> None:
        self._error = error
        self._done.set()

    def done(self) -> bool:
        """Whether the collective has finished (successfully or not)."""
        return self._done.is_set()

    def wait(self) -> Tensor:
        """Blocks until the collective has finished; its result, or its error
        (the backend's own timeout bounds the wait)."""
        self._done.wait()
        if self._error is not None:
            raise self._error
        if self._finish is not None:
            self._result, self._finish = self._finish(self._result), None
        return self._result


class Backend(abc.ABC):
    """One process's end of a group's communication.

    `store` is the group's key-value store (for the backend's own
    rendezvous: keys under `prefix`), `rank` and `world_size` place this
    process, `timeout` (seconds) is the default bound of every wait: a rank
    that does not arrive in time makes the others raise
    ``DeadlineExceededError``, one that dies ``UnavailableError``."""

    name = "?"

    def __init__(self, store: TCPStore, prefix: str, rank: int, world_size: int,
                 timeout: float):
        self.store, self.prefix = store, prefix
        self.rank, self.world_size, self.timeout = rank, world_size, timeout

    @abc.abstractmethod
    def all_reduce(self, t: Tensor, op: str, timeout: float) -> Tensor:
        """The element-wise reduction (`op` of REDUCTIONS) of every rank's `t`."""

    def all_reduce_donated(self, t: Tensor, op: str, timeout: float) -> Tensor:
        """``all_reduce`` of a tensor the caller gives up: the backend may
        write the result over `t`'s memory (the caller makes `t` unusable
        afterwards). The default reduces into new memory."""
        return self.all_reduce(t, op, timeout)

    @abc.abstractmethod
    def reduce_scatter(self, t: Tensor, op: str, timeout: float) -> Tensor:
        """Rank r's chunk (first axis in world_size parts) of the reduction."""

    @abc.abstractmethod
    def all_gather(self, t: Tensor, axis: int, timeout: float) -> Tensor:
        """Every rank's `t` concatenated along `axis` in rank order."""

    @abc.abstractmethod
    def broadcast(self, t: Tensor, src: int, timeout: float) -> Tensor:
        """Rank `src`'s `t` (every rank passes a tensor of that dtype and shape)."""

    @abc.abstractmethod
    def all_to_all(self, t: Tensor, timeout: float) -> Tensor:
        """Chunk j (first axis in world_size parts) of every rank goes to rank j,
        which concatenates what it receives in rank order."""

    def all_reduce_async(self, t: Tensor, op: str, timeout: float) -> Work:
        """Starts ``all_reduce(t, op, timeout)`` and returns its ``Work``.
        The default runs it now; a backend that can overlap it with the
        caller's work (the host backend: a thread of its own) overrides
        this. Collectives still run in the order they are called."""
        work = Work()
        work.started_at = time.perf_counter()
        try:
            work.set_result(self.all_reduce(t, op, timeout))
        except Exception as exc:  # noqa: BLE001 (raised at wait, like a real async error)
            work.set_error(exc)
        return work

    def close(self) -> None:
        """Releases the backend's connections (called by destroy_process_group)."""


# name -> (class, device types it is meant for; () for every device)
_BACKENDS: dict[str, tuple[type[Backend], tuple[str, ...]]] = {}
# backends living in optional modules of this package, imported on first lookup
_OPTIONAL = ("nccl_backend",)
_optional_loaded = False


def register_backend(name: str, cls: type[Backend], device_types: Sequence[str] = ()) -> None:
    """Makes backend `cls` available as `name`; "auto" prefers it for
    tensors on `device_types` (none: it serves every device)."""
    _BACKENDS[name] = (cls, tuple(device_types))


def _load_optional() -> None:
    global _optional_loaded
    if _optional_loaded:
        return
    _optional_loaded = True
    for mod in _OPTIONAL:
        full = f"{__package__}.{mod}"
        try:
            importlib.import_module(full)
        except ModuleNotFoundError as exc:
            if exc.name != full:
                raise


def backend_class(name: str) -> type[Backend]:
    """The class registered as `name` (InvalidArgumentError when there is none)."""
    _load_optional()
    if name not in _BACKENDS:
        raise InvalidArgumentError(f"pg.distribute: no backend {name!r}; available: "
                                   f"{sorted(_BACKENDS) + ['auto']}",
                                   op="init_process_group")
    return _BACKENDS[name][0]


def auto_backend(device_type: str) -> str:
    """The backend "auto" picks for tensors on `device_type`: one registered
    for that device type if any, else "host"."""
    _load_optional()
    for name, (_, types) in _BACKENDS.items():
        if device_type in types:
            return name
    return "host"
