"""Definitions of the ops whose output shapes depend on input values:
Where (the coordinates of true elements), Unique, UniqueWithCounts,
UniqueV2, UniqueWithCountsV2 and NonMaxSuppressionV3 (TensorFlow's names,
inputs, attributes and type sets). Their shape functions leave the
data-dependent dimension unknown (None); they have CPU kernels only, so
under another device's scope soft placement runs them on the host."""
from __future__ import annotations

import numpy as np

from .op_util import define, err, index_array, sample

_OUT_IDX = "out_idx: {int32, int64} = DT_INT32"
# TensorFlow's numbertypes that pluggable has
_NUMBERS = "int8, uint8, int16, int32, int64, uint32, uint64, half, bfloat16, float, double"


def _where(shapes, attrs, values):
    return [(None, len(shapes[0]))]


def unique_axis(op: str, shape: tuple, axis_value) -> int | None:
    """The axis UniqueV2 works along (None: x is a vector taken whole), as
    TensorFlow checks it."""
    a = np.asarray(axis_value)
    if a.ndim != 1:
        raise err(op, f"axis expects a 1D vector, got shape {list(a.shape)}")
    if a.size > 1:
        raise err(op, f"axis does not support input tensors larger than 1 elements, got "
                  f"{a.size}")
    if a.size == 0:
        if len(shape) != 1:
            raise err(op, f"unique expects a 1D vector, got shape {list(shape)}")
        return None
    ax = int(a[0])
    if ax < 0:
        ax += len(shape)
    if not 0 <= ax < len(shape):
        raise err(op, f"axis has to be between [0, {len(shape)}), got {int(a[0])}")
    return ax


def _unique(op, counts):
    def fn(shapes, attrs, values):
        s = tuple(shapes[0])
        if len(s) != 1:
            raise err(op, f"unique expects a 1D vector, got shape {list(s)}")
        return [(None,), s] + ([(None,)] if counts else [])
    return fn


def _unique_v2(op, counts):
    def fn(shapes, attrs, values):
        s = tuple(shapes[0])
        ax = unique_axis(op, s, values["axis"])
        ax = 0 if ax is None else ax
        y = s[:ax] + (None,) + s[ax + 1:]
        return [y, (s[ax],)] + ([(None,)] if counts else [])
    return fn


def _nms(shapes, attrs, values):
    op = "NonMaxSuppressionV3"
    b, s = tuple(shapes[0]), tuple(shapes[1])
    if len(b) != 2 or b[1] != 4:
        raise err(op, f"boxes must be 2-D [num_boxes, 4], got shape {list(b)}")
    if len(s) != 1 or s[0] != b[0]:
        raise err(op, f"scores must be 1-D [num_boxes] with num_boxes = {b[0]}, got shape "
                  f"{list(s)}")
    for name, i in (("max_output_size", 2), ("iou_threshold", 3), ("score_threshold", 4)):
        if len(shapes[i]) != 0:
            raise err(op, f"{name} must be 0-D, got shape {list(shapes[i])}")
    return [(None,)]


def _ex_where(rng, types):
    T = types["T"]
    out = []
    for shape in ((7,), (3, 4), (2, 3, 2), (0, 3)):
        x = sample(rng, T, shape)
        if not T.is_bool:   # zeros where the sample is small
            x = np.where(rng.random(shape) < 0.4, 0, x).astype(x.dtype)
        out.append(({"input": x}, {}))
    return out


def _repeats(rng, T, shape, axis=None):
    """Values of `shape` with repeats (along `axis`: repeated slices)."""
    if axis is None:
        pool = sample(rng, T, (4,))
        return pool[rng.integers(0, 4, shape)]
    pool = sample(rng, T, shape[:axis] + (3,) + shape[axis + 1:])
    return np.take(pool, rng.integers(0, 3, shape[axis]), axis=axis)


def _ex_unique(rng, types):
    T = types["T"]
    return [({"x": _repeats(rng, T, (n,))}, {}) for n in (9, 1, 0)]


def _ex_unique_v2(rng, types):
    T, A = types["T"], types["Taxis"]
    return [({"x": _repeats(rng, T, (9,)), "axis": index_array(np.zeros(0), A)}, {}),
            ({"x": _repeats(rng, T, (5, 3), 0), "axis": index_array([0], A)}, {}),
            ({"x": _repeats(rng, T, (2, 6), 1), "axis": index_array([-1], A)}, {}),
            ({"x": _repeats(rng, T, (2, 4, 3), 1), "axis": index_array([1], A)}, {})]


def _ex_nms(rng, types):
    T, TT = types["T"].as_numpy_dtype, types["T_threshold"].as_numpy_dtype
    out = []
    for n, k, iou, score in ((12, 5, 0.5, -np.inf), (12, 12, 0.3, 0.2), (6, 0, 0.5, 0.0),
                             (1, 3, 0.7, 0.0)):
        corner = rng.uniform(0, 4, (n, 2))
        size = rng.uniform(0.5, 3, (n, 2))
        boxes = np.concatenate([corner, corner + size], 1)
        flip = rng.random(n) < 0.3          # corners given the other way round
        boxes[flip] = boxes[flip][:, [2, 3, 0, 1]]
        scores = rng.permutation(n) / n + 0.05   # distinct scores: no ties
        out.append(({"boxes": boxes.astype(T), "scores": scores.astype(T),
                     "max_output_size": np.asarray(k, np.int32),
                     "iou_threshold": np.asarray(iou, TT),
                     "score_threshold": np.asarray(score, TT)}, {}))
    return out


def define_selection_ops() -> None:
    """Registers Where, Unique, UniqueWithCounts, UniqueV2,
    UniqueWithCountsV2 and NonMaxSuppressionV3."""
    define("Where", ["input: T"], ["index: int64"],
           [f"T: {{bool, {_NUMBERS}, complex64, complex128}} = DT_BOOL"], _where,
           examples=_ex_where)
    define("Unique", ["x: T"], ["y: T", "idx: out_idx"], ["T: type", _OUT_IDX],
           _unique("Unique", False), examples=_ex_unique)
    define("UniqueWithCounts", ["x: T"], ["y: T", "idx: out_idx", "count: out_idx"],
           ["T: type", _OUT_IDX], _unique("UniqueWithCounts", True), examples=_ex_unique)
    define("UniqueV2", ["x: T", "axis: Taxis"], ["y: T", "idx: out_idx"],
           ["T: type", "Taxis: {int32, int64} = DT_INT64", _OUT_IDX],
           _unique_v2("UniqueV2", False), host=["axis"], examples=_ex_unique_v2)
    define("UniqueWithCountsV2", ["x: T", "axis: Taxis"],
           ["y: T", "idx: out_idx", "count: out_idx"],
           ["T: type", "Taxis: {int32, int64} = DT_INT64", _OUT_IDX],
           _unique_v2("UniqueWithCountsV2", True), host=["axis"], examples=_ex_unique_v2)
    define("NonMaxSuppressionV3", ["boxes: T", "scores: T", "max_output_size: int32",
                                   "iou_threshold: T_threshold", "score_threshold: T_threshold"],
           ["selected_indices: int32"],
           ["T: {half, float} = DT_FLOAT", "T_threshold: {half, float} = DT_FLOAT"],
           _nms, examples=_ex_nms)
