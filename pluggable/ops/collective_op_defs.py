"""Definitions of TensorFlow's collective ops (the V2 family, whose group
size, group key and instance key are host-memory inputs):
CollectiveReduceV2, CollectiveReduceScatterV2, CollectiveGatherV2,
CollectiveBcastSendV2, CollectiveBcastRecvV2 and CollectiveAllToAllV2.

One call of a collective op runs on one device; the `group_size` calls with
the same (group_key, instance_key), each on another device, meet in the
plugin's rendezvous and each gets its part of the result. There is no CPU
kernel: the host reference plugin (MY_DEVICE) implements them across its
devices in shared memory. ``pluggable.distribute`` calls them."""
from __future__ import annotations

import numpy as np

from .op_util import define, err, scalar

_REDUCE_T = "T: {bfloat16, float, half, double, int32, int64}"
_GATHER_T = "T: {float, half, double, int32, int64}"
_BCAST_T = "T: {bool, float, half, double, int32, int64}"
_KEYS = ["group_size: int32", "group_key: int32", "instance_key: int32"]
_HOST = ["group_size", "group_key", "instance_key"]
_COMMON = ["communication_hint: string = 'auto'", "timeout_seconds: float = 0"]
_ORDERED = ["is_stateless: bool = false", "Nordering_token: int >= 0 = 0"]


def group_size(op: str, values: dict) -> int:
    """The host-memory group_size input, checked to be at least 1."""
    n = scalar(op, "group_size", values["group_size"])
    if n < 1:
        raise err(op, f"group_size must be at least 1, got {n}")
    return n


def _reduce_shape(shapes, attrs, values):
    group_size("CollectiveReduceV2", values)
    return [tuple(shapes[0])]


def _split_first(op: str, shapes, values, why: str = "") -> tuple[int, tuple]:
    """group_size and the input shape, whose first dimension group_size
    must divide (one chunk per rank)."""
    n, shape = group_size(op, values), tuple(shapes[0])
    if len(shape) == 0 or shape[0] % n != 0:
        raise err(op, f"the first dimension of the input {list(shape)} must be divisible by "
                  f"group_size {n}{why}")
    return n, shape


def _reduce_scatter_shape(shapes, attrs, values):
    n, shape = _split_first("CollectiveReduceScatterV2", shapes, values)
    return [(shape[0] // n,) + shape[1:]]


def _gather_shape(shapes, attrs, values):
    op = "CollectiveGatherV2"
    n, shape = group_size(op, values), tuple(shapes[0])
    if len(shape) == 0:
        raise err(op, "the input must have at least one dimension (gathered along the first)")
    return [(shape[0] * n,) + shape[1:]]


def _all_to_all_shape(shapes, attrs, values):
    return [_split_first("CollectiveAllToAllV2", shapes, values, " (chunk r goes to rank r)")[1]]


def _send_shape(shapes, attrs, values):
    group_size("CollectiveBcastSendV2", values)
    return [tuple(shapes[0])]


def _recv_shape(shapes, attrs, values):
    op = "CollectiveBcastRecvV2"
    group_size(op, values)
    dims = [int(d) for d in np.asarray(values["shape"]).reshape(-1)]
    if any(d < 0 for d in dims):
        raise err(op, f"shape must be non-negative, got {dims}")
    return [tuple(dims)]


def define_collective_ops() -> None:
    """Registers the collective ops with TensorFlow's names and attributes."""
    reduce_attrs = [_REDUCE_T, "merge_op: {'Min', 'Max', 'Mul', 'Add'}",
                    "final_op: {'Id', 'Div'}"] + _COMMON + _ORDERED + [
                        "max_subdivs_per_device: int = -1"]
    ordered_inputs = ["input: T"] + _KEYS + ["ordering_token: Nordering_token * resource"]
    define("CollectiveReduceV2", ordered_inputs, ["data: T"], reduce_attrs, _reduce_shape,
           host=_HOST)
    define("CollectiveReduceScatterV2", ordered_inputs, ["data: T"], reduce_attrs,
           _reduce_scatter_shape, host=_HOST)
    define("CollectiveGatherV2", ordered_inputs, ["data: T"], [_GATHER_T] + _COMMON + _ORDERED,
           _gather_shape, host=_HOST)
    define("CollectiveAllToAllV2", ordered_inputs, ["data: T"], [_REDUCE_T] + _COMMON + _ORDERED,
           _all_to_all_shape, host=_HOST)
    define("CollectiveBcastSendV2", ["input: T"] + _KEYS, ["data: T"], [_BCAST_T] + _COMMON,
           _send_shape, host=_HOST)
    define("CollectiveBcastRecvV2", _KEYS + ["shape: Tshape"], ["data: T"],
           [_BCAST_T, "Tshape: {int32, int64} = DT_INT32"] + _COMMON, _recv_shape,
           host=_HOST + ["shape"])
