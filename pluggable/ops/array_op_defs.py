"""Definitions of the shape and data-movement ops (TensorFlow's names,
inputs, attributes, defaults and allowed types), their shape functions and
sample calls (``examples``).

Shape functions see list arguments flattened (ConcatV2's inputs are the N
values, then the axis) and read host-memory inputs from `values`.
"""
from __future__ import annotations

import numpy as np

from . import strided_slice
from .op_util import axis, define, err, index_array, ints, sample, scalar

_IDX32_64 = "{int32, int64}"
_INDEX_16_64 = "{int16, int32, int64}"
_MASKS = ["begin_mask: int = 0", "end_mask: int = 0", "ellipsis_mask: int = 0",
          "new_axis_mask: int = 0", "shrink_axis_mask: int = 0"]


def _masks(attrs: dict) -> dict:
    return {k: attrs[k] for k in ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask",
                                  "shrink_axis_mask")}


def strided_slice_spec(op: str, shape: tuple, values: dict, attrs: dict):
    """The SliceSpec of a StridedSlice(Grad) call."""
    b = ints(op, "begin", values["begin"])
    e = ints(op, "end", values["end"])
    s = ints(op, "strides", values["strides"])
    return strided_slice.dense_slices(op, tuple(shape), b, e, s, **_masks(attrs))


# ------------------------------------------------------------------ shape fns

def _strided_slice(shapes, attrs, values):
    return [strided_slice_spec("StridedSlice", shapes[0], values, attrs).final_shape]


def _strided_slice_grad(shapes, attrs, values):
    op = "StridedSliceGrad"
    shape = tuple(ints(op, "shape", values["shape"]))
    if any(d < 0 for d in shape):
        raise err(op, f"shape must be non-negative, got {list(shape)}")
    want = strided_slice_spec(op, shape, values, attrs).final_shape
    if tuple(shapes[4]) != want:
        raise err(op, f"dy has shape {list(shapes[4])} but the slice of a tensor of shape "
                  f"{list(shape)} has shape {list(want)}")
    return [shape]


def slice_bounds(op: str, shape: tuple, begin: list[int], size: list[int]) -> list[int]:
    """The sizes of Slice (-1 = to the end), checked against `shape`."""
    if len(begin) != len(shape) or len(size) != len(shape):
        raise err(op, f"begin and size must have one entry per dimension of the input "
                  f"(shape {list(shape)}), got {begin} and {size}")
    out = []
    for i, (b, s, d) in enumerate(zip(begin, size, shape)):
        s = d - b if s == -1 else s
        if not (0 <= b <= d and 0 <= s and b + s <= d):
            raise err(op, f"expected begin[{i}] in [0, {d}] and size[{i}] in [0, {d - b}] "
                      f"(or -1), got begin {begin} and size {size} for input shape {list(shape)}")
        out.append(s)
    return out


def _slice(shapes, attrs, values):
    op = "Slice"
    return [tuple(slice_bounds(op, tuple(shapes[0]), ints(op, "begin", values["begin"]),
                               ints(op, "size", values["size"])))]


def concat_shape(op: str, shapes: list, ax: int) -> tuple:
    rank = len(shapes[0])
    if rank == 0:
        raise err(op, "cannot concatenate scalars (rank 0 tensors); use Pack (pg.stack)")
    ax = axis(op, ax, rank)
    total = 0
    for i, s in enumerate(shapes):
        if len(s) != rank or any(a != b for j, (a, b) in enumerate(zip(s, shapes[0])) if j != ax):
            raise err(op, f"values[{i}] has shape {list(s)}, which does not match values[0] "
                      f"{list(shapes[0])} outside axis {ax}")
        total += s[ax]
    return tuple(total if j == ax else d for j, d in enumerate(shapes[0]))


def _concat(shapes, attrs, values):
    n = attrs["N"]
    return [concat_shape("ConcatV2", shapes[:n], scalar("ConcatV2", "axis", values["axis"]))]


def _pack(shapes, attrs, values):
    op = "Pack"
    for i, s in enumerate(shapes):
        if tuple(s) != tuple(shapes[0]):
            raise err(op, f"values[{i}] has shape {list(s)} but values[0] has shape "
                      f"{list(shapes[0])}; all values must have the same shape")
    rank = len(shapes[0])
    ax = axis(op, attrs["axis"], rank + 1)
    s = list(shapes[0])
    s.insert(ax, attrs["N"])
    return [tuple(s)]


def _unpack(shapes, attrs, values):
    op = "Unpack"
    s = tuple(shapes[0])
    ax = axis(op, attrs["axis"], len(s))
    if s[ax] != attrs["num"]:
        raise err(op, f"value has shape {list(s)}: dimension {ax} is {s[ax]} but num is "
                  f"{attrs['num']}")
    out = s[:ax] + s[ax + 1:]
    return [out] * attrs["num"]


def _split(shapes, attrs, values):
    op = "Split"
    s = tuple(shapes[1])
    ax = axis(op, scalar(op, "split_dim", values["split_dim"]), len(s), "split_dim")
    k = attrs["num_split"]
    if s[ax] % k:
        raise err(op, f"dimension {ax} of value (shape {list(s)}) is {s[ax]}, which is not "
                  f"divisible by num_split {k}")
    out = tuple(s[ax] // k if j == ax else d for j, d in enumerate(s))
    return [out] * k


def gather_geometry(op: str, pshape: tuple, ishape: tuple, ax: int, batch_dims: int):
    """(axis, batch_dims, output shape) of GatherV2, checked."""
    ax = axis(op, ax, len(pshape))
    irank = len(ishape)
    if batch_dims < 0:
        batch_dims += irank
    if not 0 <= batch_dims <= irank:
        raise err(op, f"batch_dims must be in [{-irank}, {irank}] for indices of rank "
                  f"{irank}, got {batch_dims}")
    if batch_dims > ax:
        raise err(op, f"batch_dims ({batch_dims}) must be <= axis ({ax})")
    if tuple(pshape[:batch_dims]) != tuple(ishape[:batch_dims]):
        raise err(op, f"the first {batch_dims} dimensions of params {list(pshape)} and "
                  f"indices {list(ishape)} must match (batch_dims)")
    return ax, batch_dims, tuple(pshape[:ax]) + tuple(ishape[batch_dims:]) + tuple(pshape[ax + 1:])


def _gather(shapes, attrs, values):
    op = "GatherV2"
    return [gather_geometry(op, tuple(shapes[0]), tuple(shapes[1]),
                            scalar(op, "axis", values["axis"]), attrs["batch_dims"])[2]]


def pad_amounts(op: str, shape: tuple, paddings) -> list[tuple[int, int]]:
    p = np.asarray(paddings)
    if p.shape != (len(shape), 2):
        raise err(op, f"paddings must have shape [{len(shape)}, 2] for an input of shape "
                  f"{list(shape)}, got {list(p.shape)}")
    pairs = [(int(a), int(b)) for a, b in p.reshape(-1, 2)]
    if any(a < 0 or b < 0 for a, b in pairs):
        raise err(op, f"paddings must be non-negative, got {[list(x) for x in pairs]}")
    return pairs


def _pad(shapes, attrs, values):
    s = tuple(shapes[0])
    pairs = pad_amounts("Pad", s, values["paddings"])
    return [tuple(d + a + b for d, (a, b) in zip(s, pairs))]


def _tile(shapes, attrs, values):
    op = "Tile"
    s = tuple(shapes[0])
    m = ints(op, "multiples", values["multiples"])
    if len(m) != len(s):
        raise err(op, f"multiples must have one entry per dimension of the input (shape "
                  f"{list(s)}), got {m}")
    if any(x < 0 for x in m):
        raise err(op, f"multiples must be non-negative, got {m}")
    return [tuple(d * x for d, x in zip(s, m))]


def _expand_dims(shapes, attrs, values):
    op = "ExpandDims"
    s = list(shapes[0])
    d = axis(op, scalar(op, "dim", values["dim"]), len(s) + 1, "dim")
    s.insert(d, 1)
    return [tuple(s)]


def squeeze_axes(op: str, shape: tuple, dims: tuple) -> set:
    if not dims:
        return {i for i, d in enumerate(shape) if d == 1}
    out = set()
    for d in dims:
        a = axis(op, d, len(shape), "squeeze_dims entry")
        if shape[a] != 1:
            raise err(op, f"cannot squeeze dimension {d} of shape {list(shape)}: its size is "
                      f"{shape[a]}, not 1")
        out.add(a)
    return out


def _shape(shapes, attrs, values):
    return [(None if shapes[0] is None else len(shapes[0]),)]


def _scalar_of_shape(shapes, attrs, values):
    return [()]


def _squeeze(shapes, attrs, values):
    s = tuple(shapes[0])
    drop = squeeze_axes("Squeeze", s, attrs["squeeze_dims"])
    return [tuple(d for i, d in enumerate(s) if i not in drop)]


def _broadcast_to(shapes, attrs, values):
    op = "BroadcastTo"
    target = tuple(ints(op, "shape", values["shape"]))
    s = tuple(shapes[0])
    if any(d < 0 for d in target):
        raise err(op, f"shape must be non-negative, got {list(target)}")
    ok = len(s) <= len(target) and all(
        a == b or a == 1 for a, b in zip(reversed(s), reversed(target)))
    if not ok:
        raise err(op, f"cannot broadcast a tensor of shape {list(s)} to shape {list(target)}")
    return [target]


def _one_hot(shapes, attrs, values):
    op = "OneHot"
    s = list(shapes[0])
    depth = scalar(op, "depth", values["depth"])
    if depth < 0:
        raise err(op, f"depth must be non-negative, got {depth}")
    ax = attrs["axis"]
    if ax < -1 or ax > len(s):
        raise err(op, f"axis must be -1 or in [0, {len(s)}], got {ax}")
    for n, sh in (("on_value", shapes[2]), ("off_value", shapes[3])):
        if tuple(sh) != ():
            raise err(op, f"{n} must be a scalar, got shape {list(sh)}")
    s.insert(len(s) if ax == -1 else ax, depth)
    return [tuple(s)]


def range_values(values: dict) -> tuple:
    """(start, limit, delta) of a Range call as numpy scalars of its dtype."""
    out = []
    for n in ("start", "limit", "delta"):
        a = np.asarray(values[n])
        if a.ndim != 0:
            raise err("Range", f"{n} must be a scalar, got shape {list(a.shape)}")
        out.append(a[()])
    return tuple(out)


def range_size(start, limit, delta) -> int:
    """Number of elements of Range(start, limit, delta) (numpy scalars of
    one dtype), computed in that dtype as TensorFlow does."""
    op = "Range"
    if delta == 0:
        raise err(op, "delta must be non-zero")
    if delta > 0 and start > limit:
        raise err(op, f"requires start <= limit when delta > 0: {start}/{limit}")
    if delta < 0 and start < limit:
        raise err(op, f"requires start >= limit when delta < 0: {start}/{limit}")
    if np.asarray(delta).dtype.kind in "iu":
        span, step = abs(int(limit) - int(start)), abs(int(delta))
        return (span + step - 1) // step
    with np.errstate(all="ignore"):
        n = np.ceil(np.abs((limit - start) / delta))
    if not np.isfinite(n):
        raise err(op, f"the number of elements of range({start}, {limit}, {delta}) is not finite")
    if n > np.iinfo(np.int64).max:
        raise err(op, f"requires ((limit - start) / delta) <= {np.iinfo(np.int64).max}: "
                  f"range({start}, {limit}, {delta}) has {n:g} elements")
    return int(n)


def _range(shapes, attrs, values):
    return [(range_size(*range_values(values)),)]


# ------------------------------------------------------------------- examples

def _ex_strided_slice(rng, types):
    T, I = types["T"], types["Index"]
    x = lambda *s: sample(rng, T, s)
    ix = lambda v: index_array(v, I)
    return [
        ({"input": x(5, 6), "begin": ix([1, 0]), "end": ix([4, 6]), "strides": ix([2, 1])}, {}),
        ({"input": x(4, 3, 2), "begin": ix([-1, 0]), "end": ix([0, 0]), "strides": ix([-1, 1])},
         {"begin_mask": 1, "end_mask": 3}),
        ({"input": x(4, 3, 2), "begin": ix([0, 1, 0]), "end": ix([0, 2, 0]),
          "strides": ix([1, 1, 1])}, {"ellipsis_mask": 1, "new_axis_mask": 4,
                                      "shrink_axis_mask": 2}),
        ({"input": x(0, 3), "begin": ix([0]), "end": ix([2]), "strides": ix([1])}, {}),
    ]


def _ex_strided_slice_grad(rng, types):
    T, I = types["T"], types["Index"]
    ix = lambda v: index_array(v, I)
    return [({"shape": ix([5, 6]), "begin": ix([1, 0]), "end": ix([4, 6]),
              "strides": ix([2, 1]), "dy": sample(rng, T, (2, 6))}, {}),
            ({"shape": ix([4, 3]), "begin": ix([2]), "end": ix([3]), "strides": ix([1]),
              "dy": sample(rng, T, (3,))}, {"shrink_axis_mask": 1})]


def _ex_slice(rng, types):
    T, I = types["T"], types["Index"]
    return [({"input": sample(rng, T, (4, 5, 3)), "begin": index_array([1, 0, 2], I),
              "size": index_array([2, -1, 1], I)}, {}),
            ({"input": sample(rng, T, (3, 2)), "begin": index_array([3, 0], I),
              "size": index_array([0, 2], I)}, {})]


def _ex_concat(rng, types):
    T, I = types["T"], types["Tidx"]
    return [({"values": [sample(rng, T, (2, 3)), sample(rng, T, (4, 3))],
              "axis": index_array(0, I)}, {}),
            ({"values": [sample(rng, T, (2, 1, 3)), sample(rng, T, (2, 0, 3)),
                         sample(rng, T, (2, 2, 3))], "axis": index_array(-2, I)}, {})]


def _ex_pack(rng, types):
    T = types["T"]
    return [({"values": [sample(rng, T, (2, 3)) for _ in range(3)]}, {"axis": 1}),
            ({"values": [sample(rng, T, ())]}, {}),
            ({"values": [sample(rng, T, (0, 2)), sample(rng, T, (0, 2))]}, {"axis": -1})]


def _ex_unpack(rng, types):
    T = types["T"]
    return [({"value": sample(rng, T, (3, 4))}, {"num": 3}),
            ({"value": sample(rng, T, (2, 4, 0))}, {"num": 4, "axis": 1})]


def _ex_split(rng, types):
    T = types["T"]
    return [({"split_dim": np.int32(1), "value": sample(rng, T, (2, 6))}, {"num_split": 3}),
            ({"split_dim": np.int32(-1), "value": sample(rng, T, (3, 2))}, {"num_split": 1})]


def _ex_gather(rng, types):
    T, I, A = types["Tparams"], types["Tindices"], types["Taxis"]
    return [({"params": sample(rng, T, (5, 3)), "indices": index_array([4, 0, 2, 2], I),
              "axis": index_array(0, A)}, {}),
            ({"params": sample(rng, T, (2, 4, 3)), "indices": index_array([[3, 1], [0, 0]], I),
              "axis": index_array(1, A)}, {"batch_dims": 1}),
            ({"params": sample(rng, T, (3, 4)), "indices": index_array(np.zeros((0,)), I),
              "axis": index_array(-1, A)}, {})]


def _ex_pad(rng, types):
    T, P = types["T"], types["Tpaddings"]
    return [({"input": sample(rng, T, (2, 3)), "paddings": index_array([[1, 0], [2, 1]], P)}, {}),
            ({"input": sample(rng, T, (0, 1)), "paddings": index_array([[1, 1], [0, 0]], P)}, {})]


def _ex_tile(rng, types):
    T, M = types["T"], types["Tmultiples"]
    return [({"input": sample(rng, T, (2, 3)), "multiples": index_array([2, 1], M)}, {}),
            ({"input": sample(rng, T, (3,)), "multiples": index_array([0], M)}, {})]


def _ex_expand_dims(rng, types):
    T, D = types["T"], types["Tdim"]
    return [({"input": sample(rng, T, (2, 3)), "dim": index_array(-1, D)}, {}),
            ({"input": sample(rng, T, ()), "dim": index_array(0, D)}, {})]


def _ex_shape(rng, types):
    T = types["T"]
    return [({"input": sample(rng, T, (2, 3, 1))}, {}), ({"input": sample(rng, T, ())}, {}),
            ({"input": sample(rng, T, (4, 0))}, {})]


def _ex_squeeze(rng, types):
    T = types["T"]
    return [({"input": sample(rng, T, (1, 3, 1))}, {}),
            ({"input": sample(rng, T, (1, 3, 1))}, {"squeeze_dims": [-1]})]


def _ex_broadcast_to(rng, types):
    T, I = types["T"], types["Tidx"]
    return [({"input": sample(rng, T, (3, 1)), "shape": index_array([2, 3, 4], I)}, {}),
            ({"input": sample(rng, T, ()), "shape": index_array([0, 2], I)}, {})]


def _ex_one_hot(rng, types):
    T, TI = types["T"], types["TI"]
    on, off = sample(rng, T, ()), sample(rng, T, ())
    ids = rng.integers(-1, 5, (2, 3)) if TI.as_numpy_dtype.kind == "i" else rng.integers(0, 6, (2, 3))
    return [({"indices": ids.astype(TI.as_numpy_dtype), "depth": np.int32(4), "on_value": on,
              "off_value": off}, {}),
            ({"indices": ids.astype(TI.as_numpy_dtype), "depth": np.int32(5), "on_value": on,
              "off_value": off}, {"axis": 0})]


def _ex_range(rng, types):
    T = types["Tidx"]
    npdt = T.as_numpy_dtype
    if T.is_integer:
        start = int(rng.integers(0, 5))
        return [({"start": npdt.type(start), "limit": npdt.type(start + 11),
                  "delta": npdt.type(3)}, {}),
                ({"start": npdt.type(4), "limit": npdt.type(4), "delta": npdt.type(1)}, {})]
    return [({"start": npdt.type(-1.5), "limit": npdt.type(2.0), "delta": npdt.type(0.5)}, {}),
            ({"start": npdt.type(3.0), "limit": npdt.type(0.0), "delta": npdt.type(-0.75)}, {})]


# --------------------------------------------------------------- definitions

def define_array_ops() -> None:
    """Registers the shape and data-movement ops (every dtype)."""
    ops = [
        ("StridedSlice", ["input: T", "begin: Index", "end: Index", "strides: Index"],
         ["output: T"], ["T: type", f"Index: {_INDEX_16_64}"] + _MASKS, _strided_slice,
         ["begin", "end", "strides"], _ex_strided_slice),
        ("StridedSliceGrad", ["shape: Index", "begin: Index", "end: Index", "strides: Index",
                              "dy: T"], ["output: T"], ["T: type", f"Index: {_IDX32_64}"] + _MASKS,
         _strided_slice_grad, ["shape", "begin", "end", "strides"], _ex_strided_slice_grad),
        ("Slice", ["input: T", "begin: Index", "size: Index"], ["output: T"],
         ["T: type", f"Index: {_IDX32_64}"], _slice, ["begin", "size"], _ex_slice),
        ("ConcatV2", ["values: N * T", "axis: Tidx"], ["output: T"],
         ["N: int >= 2", "T: type", f"Tidx: {_IDX32_64} = DT_INT32"], _concat, ["axis"],
         _ex_concat),
        ("Pack", ["values: N * T"], ["output: T"], ["N: int >= 1", "T: type", "axis: int = 0"],
         _pack, [], _ex_pack),
        ("Unpack", ["value: T"], ["output: num * T"], ["num: int >= 0", "T: type",
                                                      "axis: int = 0"], _unpack, [], _ex_unpack),
        ("Split", ["split_dim: int32", "value: T"], ["output: num_split * T"],
         ["num_split: int >= 1", "T: type"], _split, ["split_dim"], _ex_split),
        ("GatherV2", ["params: Tparams", "indices: Tindices", "axis: Taxis"], ["output: Tparams"],
         ["batch_dims: int = 0", "Tparams: type", f"Tindices: {_INDEX_16_64}",
          f"Taxis: {_IDX32_64}"], _gather, ["axis"], _ex_gather),
        ("Pad", ["input: T", "paddings: Tpaddings"], ["output: T"],
         ["T: type", f"Tpaddings: {_IDX32_64} = DT_INT32"], _pad, ["paddings"], _ex_pad),
        ("Tile", ["input: T", "multiples: Tmultiples"], ["output: T"],
         ["T: type", f"Tmultiples: {_IDX32_64} = DT_INT32"], _tile, ["multiples"], _ex_tile),
        ("ExpandDims", ["input: T", "dim: Tdim"], ["output: T"],
         ["T: type", f"Tdim: {_IDX32_64} = DT_INT32"], _expand_dims, ["dim"], _ex_expand_dims),
        ("Squeeze", ["input: T"], ["output: T"], ["T: type", "squeeze_dims: list(int) >= 0 = []"],
         _squeeze, [], _ex_squeeze),
        # Shape, Size and Rank read only their input's shape (the graph
        # executor never copies the input's data for them).
        ("Shape", ["input: T"], ["output: out_type"],
         ["T: type", f"out_type: {_IDX32_64} = DT_INT32"], _shape, [], _ex_shape),
        ("Size", ["input: T"], ["output: out_type"],
         ["T: type", f"out_type: {_IDX32_64} = DT_INT32"], _scalar_of_shape, [], _ex_shape),
        ("Rank", ["input: T"], ["output: int32"], ["T: type"], _scalar_of_shape, [],
         _ex_shape),
        ("BroadcastTo", ["input: T", "shape: Tidx"], ["output: T"],
         ["T: type", f"Tidx: {_IDX32_64} = DT_INT32"], _broadcast_to, ["shape"],
         _ex_broadcast_to),
        ("OneHot", ["indices: TI", "depth: int32", "on_value: T", "off_value: T"], ["output: T"],
         ["axis: int = -1", "T: type", "TI: {uint8, int8, int32, int64} = DT_INT64"], _one_hot,
         ["depth"], _ex_one_hot),
        ("Range", ["start: Tidx", "limit: Tidx", "delta: Tidx"], ["output: Tidx"],
         ["Tidx: {bfloat16, half, float, double, int8, int16, int32, int64, uint32, uint64} "
          "= DT_INT32"], _range, ["start", "limit", "delta"], _ex_range),
    ]
    for name, ins, outs, attrs, fn, host, ex in ops:
        define(name, ins, outs, attrs, fn, host=host, examples=ex)
