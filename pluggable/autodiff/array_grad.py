"""Gradients of the data-movement and shape ops, of variable reads, and the
ops through which no gradient flows (StopGradient, random numbers, updates
of variables)."""
from __future__ import annotations

import numpy as np

from ..framework import dtypes, errors
from ..ops import raw_ops as R
from ..runtime import constants
from .grad_util import host_ints, host_value, ints, reduce_to, scalar
from .registration import NotDifferentiable, RegisterGradient

for _op in ("StopGradient", "OneHot", "StatelessRandomUniformV2", "StatelessRandomNormalV2",
            "StatelessTruncatedNormalV2", "AssignVariableOp", "AssignAddVariableOp",
            "AssignSubVariableOp", "ResourceApplyGradientDescent",
            "ResourceApplyKerasMomentum", "ResourceApplyAdam", "MultiTensorApplyAdam", "Shape",
            "Size", "Rank", "SerializeTensor", "ParseTensor"):   # (TensorFlow's list too)
    NotDifferentiable(_op)


@RegisterGradient("ReadVariableOp")
def _read_variable_grad(op, grad):
    # The gradient of the variable (its handle), made on the variable's
    # device (the value may have been used on another one), where an
    # optimizer step needs it.
    return grad if grad._dev is op.device else R.Identity(input=grad)


@RegisterGradient("Identity")
def _identity_grad(op, grad):
    return grad


@RegisterGradient("Reshape")
def _reshape_grad(op, grad):
    return R.Reshape(tensor=grad, shape=ints(op.inputs[0].shape)), None


RegisterGradient("ExpandDims")(_reshape_grad)


@RegisterGradient("Squeeze")
def _squeeze_grad(op, grad):
    return R.Reshape(tensor=grad, shape=ints(op.inputs[0].shape))


@RegisterGradient("Transpose")
def _transpose_grad(op, grad):
    perm = host_ints(op.inputs[1])
    return R.Transpose(x=grad, perm=ints(np.argsort(perm))), None


@RegisterGradient("Fill")
def _fill_grad(op, grad):
    return None, R.Sum(input=grad, reduction_indices=ints(range(grad.ndim)), keep_dims=False)


@RegisterGradient("BroadcastTo")
def _broadcast_to_grad(op, grad):
    return reduce_to(grad, op.inputs[0].shape), None


@RegisterGradient("Select")
def _select_grad(op, grad):
    c = op.inputs[0]
    zeros = R.ZerosLike(x=grad)
    return None, R.Select(condition=c, t=grad, e=zeros), R.Select(condition=c, t=zeros, e=grad)


@RegisterGradient("SelectV2")
def _select_v2_grad(op, grad):
    c, t, e = op.inputs
    zero = scalar(0, grad)
    return (None, reduce_to(R.SelectV2(condition=c, t=grad, e=zero), t.shape),
            reduce_to(R.SelectV2(condition=c, t=zero, e=grad), e.shape))


# ------------------------------------------------------------- slicing

_MASKS = ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask")


def _masks(op) -> dict:
    return {m: op.get_attr(m) for m in _MASKS}


@RegisterGradient("StridedSlice")
def _strided_slice_grad(op, grad):
    x, begin, end, strides = op.inputs
    shape = np.asarray(x.shape, begin.dtype.as_numpy_dtype)
    return (R.StridedSliceGrad(shape=shape, begin=begin, end=end, strides=strides, dy=grad,
                               **_masks(op)), None, None, None)


@RegisterGradient("StridedSliceGrad")
def _strided_slice_grad_grad(op, grad):
    _, begin, end, strides, _ = op.inputs
    return (None, None, None, None,
            R.StridedSlice(input=grad, begin=begin, end=end, strides=strides, **_masks(op)))


@RegisterGradient("Slice")
def _slice_grad(op, grad):
    x, begin = op.inputs[0], host_ints(op.inputs[1])
    pads = [[b, d - b - s] for b, d, s in zip(begin, x.shape, grad.shape)]
    return R.Pad(input=grad, paddings=np.asarray(pads, np.int32)), None, None


@RegisterGradient("Pad")
def _pad_grad(op, grad):
    x = op.inputs[0]
    before = host_value(op.inputs[1]).reshape(-1, 2)[:, 0]
    return R.Slice(input=grad, begin=ints(before), size=ints(x.shape)), None


@RegisterGradient("Tile")
def _tile_grad(op, grad):
    shape = op.inputs[0].shape
    multiples = host_ints(op.inputs[1])
    split = [v for pair in zip(multiples, shape) for v in pair]
    g = R.Reshape(tensor=grad, shape=ints(split))
    g = R.Sum(input=g, reduction_indices=ints(range(0, 2 * len(shape), 2)), keep_dims=False)
    return g, None


# ------------------------------------------------------------- lists

@RegisterGradient("ConcatV2")
def _concat_grad(op, grad):
    values = op.inputs[:-1]
    axis = host_ints(op.inputs[-1])[0] % grad.ndim
    out, offset = [], 0
    for v in values:
        begin = [0] * grad.ndim
        begin[axis] = offset
        out.append(R.Slice(input=grad, begin=ints(begin), size=ints(v.shape)))
        offset += v.shape[axis]
    return out + [None]


@RegisterGradient("Pack")
def _pack_grad(op, grad):
    return list(R.Unpack(value=grad, num=len(op.inputs), axis=op.get_attr("axis")))


def _filled(grads, outputs):
    return [g if g is not None else R.ZerosLike(x=o) for g, o in zip(grads, outputs)]


@RegisterGradient("Unpack", accepts_none=True)
def _unpack_grad(op, *grads):
    return R.Pack(values=_filled(grads, op.outputs), axis=op.get_attr("axis"))


@RegisterGradient("Split", accepts_none=True)
def _split_grad(op, *grads):
    return None, R.ConcatV2(values=_filled(grads, op.outputs), axis=op.inputs[0])


# ------------------------------------------------------------- gather/scatter

def _segment_sum(values, ids, n: int):
    if ids.dtype.name not in ("int32", "int64"):
        ids = R.Cast(x=ids, DstT=np.int32)
    count = constants.host_constant(int(n), dtypes.int32)  # held: the fast path
    return R.UnsortedSegmentSum(data=values, segment_ids=ids,
                                num_segments=count if count is not None
                                else np.asarray(n, np.int32))


def _batch_offsets(batch: tuple, extra_rank: int, stride: int, dtype) -> np.ndarray:
    """Offset of each batch row (row * stride), shaped to broadcast over
    `extra_rank` trailing index dimensions."""
    n = int(np.prod(batch, dtype=np.int64))
    return (np.arange(n) * stride).reshape(tuple(batch) + (1,) * extra_rank).astype(dtype)


@RegisterGradient("GatherV2")
def _gather_grad(op, grad):
    params, indices = op.inputs[0], op.inputs[1]
    rank = params.ndim
    axis = host_ints(op.inputs[2])[0] % rank
    bd = op.get_attr("batch_dims") % max(indices.ndim, 1) if op.get_attr("batch_dims") else 0
    if bd:
        if axis != bd:
            raise errors.UnimplementedError(
                f"the gradient of GatherV2 with batch_dims={bd} needs axis == batch_dims, got "
                f"axis={axis}", op="GatherV2")
        batch = params.shape[:bd]
        offsets = _batch_offsets(batch, indices.ndim - bd, params.shape[axis],
                                 indices.dtype.as_numpy_dtype)
        indices = R.AddV2(x=indices, y=offsets)
        flat = (int(np.prod(batch, dtype=np.int64)) * params.shape[axis],) + params.shape[axis + 1:]
        values = R.Reshape(tensor=grad, shape=ints((indices.size,) + params.shape[axis + 1:]))
        seg = _segment_sum(values, R.Reshape(tensor=indices, shape=ints([-1])), flat[0])
        return R.Reshape(tensor=seg, shape=ints(params.shape)), None, None
    outer, inner = params.shape[:axis], params.shape[axis + 1:]
    g = R.Reshape(tensor=grad, shape=ints(outer + (indices.size,) + inner))
    if axis:
        g = R.Transpose(x=g, perm=ints([axis] + list(range(axis)) + list(range(axis + 1, rank))))
    seg = _segment_sum(g, R.Reshape(tensor=indices, shape=ints([-1])), params.shape[axis])
    if axis:
        seg = R.Transpose(x=seg, perm=ints(list(range(1, axis + 1)) + [0] +
                                           list(range(axis + 1, rank))))
    return seg, None, None


@RegisterGradient("UnsortedSegmentSum")
def _unsorted_segment_sum_grad(op, grad):
    data, ids = op.inputs[0], op.inputs[1]
    valid = R.GreaterEqual(x=ids, y=scalar(0, ids))
    gathered = R.GatherV2(params=grad, indices=R.Maximum(x=ids, y=scalar(0, ids)),
                          axis=np.asarray(0, np.int32))
    mask = R.Reshape(tensor=valid, shape=ints(ids.shape + (1,) * (data.ndim - ids.ndim)))
    return R.SelectV2(condition=mask, t=gathered, e=scalar(0, grad)), None, None


@RegisterGradient("TopKV2", accepts_none=True)
def _top_k_grad(op, grad_values, grad_indices):
    x, indices = op.inputs[0], op.outputs[1]
    if grad_values is None:
        return None, None
    n = x.shape[-1]
    offsets = _batch_offsets(x.shape[:-1], 1, n, indices.dtype.as_numpy_dtype)
    flat_ids = R.Reshape(tensor=R.AddV2(x=indices, y=offsets), shape=ints([-1]))
    values = R.Reshape(tensor=grad_values, shape=ints([-1]))
    seg = _segment_sum(values, flat_ids, x.size)
    return R.Reshape(tensor=seg, shape=ints(x.shape)), None
