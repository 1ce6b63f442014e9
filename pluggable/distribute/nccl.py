"""One communicator per process: the bootstrap of multi-process collectives.

A process group of N processes (one per GPU) sets up NCCL through the CUDA
plugin's collectives extension (``PG_GetCollectiveFns``,
``c_api/include/pluggable_collectives.h``): one process makes an id with
``unique_id()`` and hands it to the others (e.g. through a TCP store); each
process calls ``init(device, nranks, rank, uid, group_key)``. From then on
the collective ops (``CollectiveReduceV2`` ...) on `device` with that
`group_key` and ``group_size == nranks`` run as this process's rank of the
group. ``abort`` tears a communicator down so that collectives stuck on a
dead peer fail instead of waiting.

Nothing here is loaded until called; a device whose plugin lacks the
extension raises ``UnimplementedError``.
"""
from __future__ import annotations

from typing import Any

from .._core import ffi, status
from ..framework.errors import InvalidArgumentError, UnimplementedError
from ..runtime.extensions import extension
from ..runtime.native_stream import native_ordinal
from ..runtime.placement import get_device
from ..runtime.status import raise_status

ID_BYTES = 128  # PG_COLLECTIVE_ID_BYTES
def _device(device: Any) -> Any:
    return get_device(device) if isinstance(device, str) else device


def collective_fns(device: Any) -> Any:
    """The PG_CollectiveFns of `device`'s plugin (cached per plugin), or None
    when the plugin does not export the extension (version 1 or later)."""
    return extension(_device(device), "CollectiveFns")


def _required(device: Any, field: str) -> tuple[Any, Any]:
    dev = _device(device)
    fns = collective_fns(dev)
    if fns is None or getattr(fns, field) == ffi.NULL:
        raise UnimplementedError(
            f"pg.distribute.nccl: the plugin of {dev.name} does not export "
            f"PG_GetCollectiveFns with {field} (multi-process collectives need the CUDA "
            "reference plugin or another plugin implementing pluggable_collectives.h)",
            device=dev.name)
    return dev, fns


def require(device: Any) -> None:
    """Raises UnimplementedError unless `device`'s plugin can set up
    communicators between processes (every function of the extension)."""
    for field in ("get_unique_id", "init_communicator", "abort_communicator"):
        _required(device, field)


def unique_id(device: Any = "GPU:0") -> bytes:
    """A fresh id (128 opaque bytes) for a new group, made by `device`'s
    plugin (ncclGetUniqueId). Call it in ONE process and send the bytes to
    the others."""
    dev, fns = _required(device, "get_unique_id")
    out = ffi.new("char[]", ID_BYTES)
    st = status()
    fns.get_unique_id(out, st)
    raise_status(st, "pg.distribute.nccl.unique_id", dev.name)
    return bytes(ffi.buffer(out, ID_BYTES))


def init(device: Any, nranks: int, rank: int, uid: bytes, group_key: int) -> None:
    """Joins this process to the group `uid` of `nranks` processes as `rank`,
    on `device` (a name such as "GPU:0" or a device object), for collectives
    of `group_key`. Blocks until every process of the group has called it."""
    if not isinstance(uid, (bytes, bytearray)) or len(uid) != ID_BYTES:
        raise InvalidArgumentError(f"pg.distribute.nccl.init: uid must be the {ID_BYTES} bytes "
                                   "of unique_id(), got "
                                   f"{type(uid).__name__} of length {len(uid) if hasattr(uid, '__len__') else '?'}")
    if not 0 <= rank < nranks:
        raise InvalidArgumentError(f"pg.distribute.nccl.init: need 0 <= rank < nranks, got rank "
                                   f"{rank} and nranks {nranks}")
    dev, fns = _required(device, "init_communicator")
    st = status()
    fns.init_communicator(native_ordinal(dev), int(nranks), int(rank),
                          ffi.from_buffer(bytes(uid)), int(group_key), st)
    raise_status(st, f"pg.distribute.nccl.init (rank {rank} of {nranks})", dev.name)


def abort(device: Any, group_key: int) -> None:
    """Aborts the communicator of (`device`, `group_key`) made by `init`:
    collectives waiting on it fail instead of hanging. NotFoundError when
    there is none."""
    dev, fns = _required(device, "abort_communicator")
    st = status()
    fns.abort_communicator(native_ordinal(dev), int(group_key), st)
    raise_status(st, "pg.distribute.nccl.abort", dev.name)
