"""Data-parallel training across the processes of a group.

Each process holds a replica of the model and computes gradients on its
shard of the batch; ``all_reduce_gradients`` averages (or sums) them across
the processes in few large messages: the gradients are flattened and
concatenated into *buckets* of about `bucket_bytes` (one per device and
dtype run), each bucket is all-reduced once, and the results are split back
into the gradients' shapes. Every replica receives the same bits, so the
replicas stay identical when they apply the same update.
``broadcast_variables`` gives every replica rank `src`'s weights (at the
start).
"""
from __future__ import annotations

from typing import Any, Iterable, Sequence

from ..framework.errors import InvalidArgumentError
from ..framework.tensor import Tensor
from ..ops import array_ops, math_ops
from ..runtime.placement import device as device_scope
from . import group

DEFAULT_BUCKET_BYTES = 25 << 20


def plan_buckets(items: Iterable[tuple[int, int, Any]], bucket_bytes: int) -> list[list[int]]:
    """Indices of `items` ((index, bytes, key) in order; key: device and
    dtype) grouped into runs of one key of at most `bucket_bytes` each (a
    larger item is a bucket of its own)."""
    buckets: list[list[int]] = []
    size, key = 0, None
    for i, nbytes, k in items:
        if not buckets or k != key or size + nbytes > bucket_bytes:
            buckets.append([])
            size, key = 0, k
        buckets[-1].append(i)
        size += nbytes
    return buckets


def _buckets(grads: Sequence[Tensor | None], bucket_bytes: int) -> list[list[int]]:
    """Indices of `grads` grouped into runs of one device and dtype of at
    most `bucket_bytes` each (a larger gradient is a bucket of its own)."""
    return plan_buckets(((i, g.size * g.dtype.size, (g.device, g.dtype))
                         for i, g in enumerate(grads) if g is not None), bucket_bytes)


def flat_bucket(grads: Sequence[Tensor]) -> Tensor:
    """`grads` (one device and dtype) as one flat tensor on their device."""
    with device_scope(grads[0].device):
        if len(grads) == 1:
            return math_ops.reshape(grads[0], [-1])
        return array_ops.concat([math_ops.reshape(g, [-1]) for g in grads], axis=0)


def unflat_bucket(total: Tensor, grads: Sequence[Tensor]) -> list[Tensor]:
    """`total` (from ``flat_bucket(grads)``, reduced) split back into the
    shapes of `grads`."""
    with device_scope(grads[0].device):
        sizes = [g.size for g in grads]
        parts = [total] if len(grads) == 1 else array_ops.split(total, sizes, axis=0)
        return [math_ops.reshape(p, list(g.shape)) for p, g in zip(parts, grads)]


def _reduce_bucket(grads: Sequence[Tensor], op: str, timeout: float | None) -> list[Tensor]:
    """All-reduces `grads` (one device and dtype) as one flat tensor, which
    is this call's own: the reduction may go over it (in place with NCCL;
    a lone gradient's flat view shares the caller's memory, which is never
    written over)."""
    total = group.all_reduce(flat_bucket(grads), op, timeout, donate=True)
    return unflat_bucket(total, grads)


def all_reduce_gradients(grads: Iterable[Tensor | None], bucket_bytes: int = DEFAULT_BUCKET_BYTES,
                         op: str = "mean", timeout: float | None = None) -> list[Tensor | None]:
    """Every rank's `grads` reduced element-wise across the process group
    (`op` "mean" by default, or "sum" when each rank already scaled its loss
    by its share of the global batch), in buckets of about `bucket_bytes`.
    Returns a list in the order of `grads`; None entries stay None. Every
    rank must pass gradients of the same shapes, dtypes and order."""
    grads = list(grads)
    if isinstance(bucket_bytes, bool) or not isinstance(bucket_bytes, int) or bucket_bytes < 1:
        raise InvalidArgumentError("all_reduce_gradients: bucket_bytes must be a positive int, "
                                   f"got {bucket_bytes!r}", op="all_reduce_gradients")
    for i, g in enumerate(grads):
        if g is not None and not isinstance(g, Tensor):
            raise InvalidArgumentError(f"all_reduce_gradients: grads[{i}] is a "
                                       f"{type(g).__name__}, not a pg.Tensor or None",
                                       op="all_reduce_gradients")
    out: list[Tensor | None] = [None] * len(grads)
    for bucket in _buckets(grads, bucket_bytes):
        for i, r in zip(bucket, _reduce_bucket([grads[i] for i in bucket], op, timeout)):
            out[i] = r
    return out


def broadcast_variables(variables: Iterable[Any], src: int = 0,
                        timeout: float | None = None) -> None:
    """Assigns rank `src`'s value of each variable to it on every rank."""
    for v in variables:
        v.assign(group.broadcast(v._stored_value(), src, timeout))
