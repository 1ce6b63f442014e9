"""CPU kernels (numpy) of Where, Unique, UniqueWithCounts, UniqueV2,
UniqueWithCountsV2 and NonMaxSuppressionV3, with TensorFlow's orders: Where
lists coordinates in row-major order, Unique keeps the order of first
occurrence, NonMaxSuppressionV3 selects greedily by descending score (equal
scores: the lower index first)."""
from __future__ import annotations

import numpy as np

from .op_util import err
from .selection_op_defs import unique_axis


def _where(ins, attrs):
    x = ins[0]
    if not 1 <= x.ndim <= 8:
        raise err("Where", f"Unhandled input dimensions: {x.ndim} (the input must have "
                  "rank 1 to 8)")
    return [np.argwhere(x != 0 if x.dtype != np.bool_ else x).astype(np.int64)]


def unique_first(x: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(unique slices of `x` along `axis` in order of first occurrence, the
    index of each slice's unique value, the count of each unique value)."""
    rest = int(np.prod(x.shape[:axis] + x.shape[axis + 1:], dtype=np.int64))
    rows = np.moveaxis(x, axis, 0).reshape(x.shape[axis], rest)
    seen: dict = {}
    idx = np.empty(rows.shape[0], np.int64)
    first = []
    for i, r in enumerate(rows):
        key = tuple(r.tolist())   # (0.0 and -0.0 are one value; NaNs are distinct)
        j = seen.get(key)
        if j is None:
            j = seen[key] = len(first)
            first.append(i)
        idx[i] = j
    counts = np.bincount(idx, minlength=len(first)) if idx.size else np.zeros(0, np.int64)
    y = np.take(x, np.asarray(first, np.int64), axis=axis)
    return y, idx, counts


def _unique_kernel(counts: bool, v2: bool):
    def kernel(ins, attrs):
        x = ins[0]
        op = ("UniqueWithCounts" if counts else "Unique") + ("V2" if v2 else "")
        if v2:
            ax = unique_axis(op, x.shape, ins[1])
        elif x.ndim != 1:
            raise err(op, f"unique expects a 1D vector, got shape {list(x.shape)}")
        else:
            ax = None
        y, idx, c = unique_first(x, 0 if ax is None else ax)
        out_dt = attrs["out_idx"].as_numpy_dtype
        return [y, idx.astype(out_dt)] + ([c.astype(out_dt)] if counts else [])
    return kernel


def _iou(boxes: np.ndarray, i: int, js: np.ndarray) -> np.ndarray:
    """Intersection over union of box i with boxes js (corners in either
    order; a box of no area overlaps nothing), as TensorFlow computes it."""
    lo = np.minimum(boxes[:, :2], boxes[:, 2:])
    hi = np.maximum(boxes[:, :2], boxes[:, 2:])
    area = np.prod(hi - lo, axis=1)
    inter = np.prod(np.maximum(np.minimum(hi[i], hi[js]) - np.maximum(lo[i], lo[js]), 0.0),
                    axis=1)
    with np.errstate(all="ignore"):
        iou = inter / (area[i] + area[js] - inter)
    return np.where((area[i] <= 0) | (area[js] <= 0), 0.0, iou)


def _nms_v3(ins, attrs):
    op = "NonMaxSuppressionV3"
    boxes, scores, k, iou_t, score_t = ins
    if boxes.ndim != 2 or boxes.shape[1] != 4:
        raise err(op, f"boxes must be 2-D [num_boxes, 4], got shape {list(boxes.shape)}")
    if scores.shape != (boxes.shape[0],):
        raise err(op, f"scores must be 1-D [num_boxes] with num_boxes = {boxes.shape[0]}, "
                  f"got shape {list(scores.shape)}")
    iou_t, score_t = float(iou_t), float(score_t)
    if not 0.0 <= iou_t <= 1.0:
        raise err(op, f"iou_threshold must be in [0, 1], got {iou_t}")
    limit = min(int(k), boxes.shape[0])
    b = boxes.astype(np.float32)
    s = scores.astype(np.float32)
    cand = np.flatnonzero(s > score_t)
    cand = cand[np.lexsort((cand, -s[cand]))]   # descending score, then index
    selected: list[int] = []
    for i in cand:
        if len(selected) >= limit:
            break
        if selected and (_iou(b, int(i), np.asarray(selected)) > iou_t).any():
            continue
        selected.append(int(i))
    return [np.asarray(selected, np.int32)]


KERNELS = {
    "Where": _where,
    "Unique": _unique_kernel(False, False),
    "UniqueWithCounts": _unique_kernel(True, False),
    "UniqueV2": _unique_kernel(False, True),
    "UniqueWithCountsV2": _unique_kernel(True, True),
    "NonMaxSuppressionV3": _nms_v3,
}
