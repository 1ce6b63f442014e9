"""``pg.RaggedTensor``: a tensor whose rows have different lengths, as
TensorFlow's ``tf.RaggedTensor``.

A ragged tensor is its ``flat_values`` (a ``pg.Tensor`` on the device of the
scope it was made in) and one ``row_splits`` vector per ragged dimension
(int64 unless asked otherwise): row ``i`` of a partition holds the values
``splits[i]:splits[i + 1]`` of the level below. The splits are bookkeeping:
they are kept on the host as numpy arrays (and given out as CPU tensors);
every value computation (gathering rows, padding, slicing, arithmetic) runs
as ops on the values' device."""
from __future__ import annotations

import contextlib
from typing import Any, Sequence

import numpy as np

from ..framework import dtypes, errors
from ..framework.tensor import Tensor
from ..framework.tensor_shape import TensorShape
from ..ops import array_ops, math_ops
from ..runtime import placement
from ..runtime.tensors import constant, convert_to_tensor

_SPLIT_DTYPES = (dtypes.int32, dtypes.int64)


# ------------------------------------------------------------ helpers

def _np(value: Any) -> np.ndarray:
    if isinstance(value, Tensor):
        return np.asarray(value.numpy())
    return np.asarray(value)


def _splits_dtype(dtype: Any) -> dtypes.DType:
    dt = dtypes.as_dtype(dtype)
    if dt not in _SPLIT_DTYPES:
        raise ValueError(f"row_splits_dtype must be int32 or int64, got {dt.name}")
    return dt


def _index_vector(value: Any, what: str, dtype: dtypes.DType | None) -> np.ndarray:
    """`value` (list, array or tensor) as a 1-D integer numpy array."""
    if isinstance(value, Tensor):
        a = np.asarray(value.numpy())
        if not value.dtype.is_integer:
            raise ValueError(f"{what} must have dtype int32 or int64, got {value.dtype.name}")
        dt = value.dtype if dtype is None else dtype
    else:
        a = np.asarray(value)
        if a.size == 0:
            a = a.astype(np.int64)
        if a.dtype.kind not in "iu":
            raise ValueError(f"{what} must have dtype int32 or int64, got {a.dtype}")
        dt = dtypes.int64 if dtype is None else dtype
    if a.ndim != 1:
        raise ValueError(f"{what} must be a vector (rank 1), got shape {list(a.shape)}")
    if dt not in _SPLIT_DTYPES:
        raise ValueError(f"{what} must be int32 or int64, got {dt.name}")
    return a.astype(dt.as_numpy_dtype)


def values_device(t: Tensor) -> Any:
    """A scope on the device of tensor `t` (no change for a traced tensor,
    which takes the function's scope)."""
    return placement.device(t._dev) if t._dev is not None else contextlib.nullcontext()


def _values_tensor(values: Any) -> "Tensor | RaggedTensor":
    """A values argument as a tensor (or ragged tensor) on the scope's device."""
    if isinstance(values, (Tensor, RaggedTensor)):
        return values
    t = convert_to_tensor(values)
    dev = placement.current()
    return t if dev is None or dev is placement.CPU else t._copy_to(dev)


def _nrows_of(values: Any) -> int:
    if isinstance(values, RaggedTensor):
        return values.nrows_int()
    if not values.shape:
        raise ValueError("values must have rank >= 1 (a scalar cannot be partitioned into rows)")
    return values.shape[0]


def _invalid(ctor: str, why: str) -> errors.InvalidArgumentError:
    return errors.InvalidArgumentError(
        f"Arguments to {ctor} do not form a valid RaggedTensor: {why}")


def _check_splits(ctor: str, splits: np.ndarray, nvals: int) -> None:
    if splits.size == 0:
        raise _invalid(ctor, "row_splits must have at least one element (row_splits[0] == 0)")
    if splits[0] != 0:
        raise _invalid(ctor, f"first value of row_splits must be 0, got {splits[0]}")
    if np.any(np.diff(splits) < 0):
        raise _invalid(ctor, "row_splits must be monotonically increasing")
    if splits[-1] != nvals:
        raise _invalid(ctor, f"last value of row_splits ({splits[-1]}) must be nvals "
                             f"(the number of values, {nvals})")


def splits_of(lengths: Any, dtype: Any = np.int64) -> np.ndarray:
    """The row splits of rows of these lengths: [0, cumsum(lengths)...]."""
    lengths = np.asarray(lengths, np.int64).reshape(-1)
    return np.concatenate([np.zeros(1, np.int64), np.cumsum(lengths)]).astype(dtype)


def gather_rows(values: "Tensor | RaggedTensor", index: np.ndarray) -> "Tensor | RaggedTensor":
    """The rows `index` (host int array) of a tensor or ragged tensor (op
    GatherV2 on the values' device)."""
    index = np.asarray(index, np.int64)
    if isinstance(values, RaggedTensor):
        s = values._splits
        starts, limits = s[index], s[index + 1]
        lengths = limits - starts
        new_splits = splits_of(lengths, s.dtype)
        inner = ragged_positions(starts, lengths)
        return RaggedTensor._make(gather_rows(values._values, inner), new_splits,
                                  values._uniform)
    return array_ops.gather(values, index.astype(np.int64))


def ragged_positions(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """concat(range(starts[i], starts[i] + lengths[i]) for i), vectorised."""
    lengths = np.asarray(lengths, np.int64)
    total = int(lengths.sum()) if lengths.size else 0
    if total == 0:
        return np.zeros(0, np.int64)
    rowids = np.repeat(np.arange(lengths.size), lengths)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    return (np.asarray(starts, np.int64)[rowids] + np.arange(total) - offsets[rowids])


# ------------------------------------------------------------- formatting

def _element_text(x: Any) -> str:
    """TensorFlow's element formatter of a ragged value: nested arrays with
    ", " between elements, ``str`` of each scalar."""
    if isinstance(x, np.ndarray):
        if x.size != 0:
            return np.array2string(x, separator=", ")
        return repr(x.tolist())
    return str(x)


# ------------------------------------------------------------- the type

class RaggedTensor:
    """A tensor with one or more ragged dimensions (``tf.RaggedTensor``).

    Make one with ``pg.ragged.constant`` or a ``RaggedTensor.from_*``
    factory, never with the constructor. ``rt.values`` is the next level
    down (a ``pg.Tensor`` or another ``RaggedTensor``), ``rt.flat_values``
    the dense values at the bottom, ``rt.row_splits`` the partition of this
    level; ``rt.to_tensor()`` pads to a dense tensor. The ops of ``pg``
    that TensorFlow extends to ragged tensors (elementwise math, reductions,
    ``pg.concat``, ``pg.stack``, ``pg.gather``) accept one.

    ``from_tensor``, ``to_tensor``, ``merge_dims`` and indexing are
    attached by ``pluggable.ragged`` (``ragged_factory``, ``ragged_getitem``)."""

    __slots__ = ("_values", "_splits", "_uniform", "__weakref__")
    __array_priority__ = 101   # numpy defers to our reflected operators

    def __init__(self, *args: Any, **kwargs: Any):
        raise errors.InvalidArgumentError(
            "RaggedTensor's constructor is private: use pg.ragged.constant or a "
            "RaggedTensor.from_* factory (from_row_splits, from_row_lengths, ...)")

    @classmethod
    def _make(cls, values: Any, splits: np.ndarray, uniform: int | None = None) -> "RaggedTensor":
        rt = object.__new__(cls)
        rt._values = values
        rt._splits = splits
        rt._uniform = uniform
        return rt

    # ----------------------------------------------------------- factories
    @classmethod
    def _from_splits(cls, ctor: str, values: Any, splits: Any, validate: bool,
                     dtype: Any = None, uniform: int | None = None) -> "RaggedTensor":
        values = _values_tensor(values)
        if isinstance(values, RaggedTensor):
            sdt = dtypes.as_dtype(values._splits.dtype) if dtype is None else dtype
            if isinstance(splits, Tensor) and splits.dtype is not sdt:
                raise ValueError(f"{ctor}: row_splits dtype {splits.dtype.name} does not match "
                                 f"the values' row_splits dtype {sdt.name}; cast one of them")
        else:
            sdt = dtype
        s = _index_vector(splits, "row_splits", sdt)
        if validate:
            _check_splits(ctor, s, _nrows_of(values))
        return cls._make(values, s, uniform)

    @classmethod
    def from_row_splits(cls, values: Any, row_splits: Any, name: str | None = None,
                        validate: bool = True) -> "RaggedTensor":
        """Row ``i`` is ``values[row_splits[i]:row_splits[i + 1]]``."""
        return cls._from_splits("from_row_splits", values, row_splits, validate)

    @classmethod
    def from_row_lengths(cls, values: Any, row_lengths: Any, name: str | None = None,
                         validate: bool = True) -> "RaggedTensor":
        """Row ``i`` holds the next ``row_lengths[i]`` values."""
        values = _values_tensor(values)
        lengths = _index_vector(row_lengths, "row_lengths", None)
        if validate and np.any(lengths < 0):
            raise _invalid("from_row_lengths", "row_lengths must be non-negative")
        splits = splits_of(lengths, lengths.dtype)
        if validate and splits[-1] != _nrows_of(values):
            raise _invalid("from_row_lengths", f"sum of row_lengths ({splits[-1]}) must be "
                                               f"nvals ({_nrows_of(values)})")
        return cls._from_splits("from_row_lengths", values, splits, False)

    @classmethod
    def from_value_rowids(cls, values: Any, value_rowids: Any, nrows: Any = None,
                          name: str | None = None, validate: bool = True) -> "RaggedTensor":
        """Value ``j`` goes to row ``value_rowids[j]`` (sorted ascending);
        `nrows` (default: last row id + 1) adds trailing empty rows."""
        values = _values_tensor(values)
        ids = _index_vector(value_rowids, "value_rowids", None)
        n = (int(ids[-1]) + 1 if ids.size else 0) if nrows is None else int(_np(nrows))
        if validate:
            if ids.size != _nrows_of(values):
                raise _invalid("from_value_rowids", f"value_rowids has {ids.size} elements, "
                               f"values has {_nrows_of(values)} rows: they must match")
            if n < 0:
                raise _invalid("from_value_rowids", "nrows must be non-negative")
            if ids.size and (ids[0] < 0 or np.any(np.diff(ids) < 0)):
                raise _invalid("from_value_rowids",
                               "value_rowids must be sorted in ascending order and >= 0")
            if ids.size and ids[-1] >= n:
                raise ValueError(f"Expected nrows >= value_rowids[-1] + 1; got nrows={n}, "
                                 f"value_rowids[-1]={ids[-1]}")
        counts = np.bincount(ids, minlength=n)[:n] if ids.size else np.zeros(n, np.int64)
        splits = splits_of(counts, ids.dtype)
        return cls._from_splits("from_value_rowids", values, splits, False)

    @classmethod
    def from_row_starts(cls, values: Any, row_starts: Any, name: str | None = None,
                        validate: bool = True) -> "RaggedTensor":
        """Row ``i`` starts at ``row_starts[i]`` and ends where the next starts."""
        values = _values_tensor(values)
        starts = _index_vector(row_starts, "row_starts", None)
        splits = np.concatenate([starts, np.asarray([_nrows_of(values)], starts.dtype)])
        return cls._from_splits("from_row_starts", values, splits, validate)

    @classmethod
    def from_row_limits(cls, values: Any, row_limits: Any, name: str | None = None,
                        validate: bool = True) -> "RaggedTensor":
        """Row ``i`` ends at ``row_limits[i]`` and starts where the last ended."""
        limits = _index_vector(row_limits, "row_limits", None)
        splits = np.concatenate([np.zeros(1, limits.dtype), limits])
        return cls._from_splits("from_row_limits", values, splits, validate)

    @classmethod
    def from_uniform_row_length(cls, values: Any, uniform_row_length: Any, nrows: Any = None,
                                validate: bool = True, name: str | None = None) -> "RaggedTensor":
        """Rows of `uniform_row_length` values each (a dimension of known size)."""
        values = _values_tensor(values)
        length = int(_np(uniform_row_length))
        nvals = _nrows_of(values)
        if validate and length < 0:
            raise _invalid("from_uniform_row_length", "uniform_row_length must be >= 0")
        if nrows is None:
            n = nvals // length if length else 0
        else:
            n = int(_np(nrows))
        if validate and n * length != nvals:
            raise ValueError(f"uniform_row_length={length} times nrows={n} must equal "
                             f"nvals={nvals}")
        dt = dtypes.int64
        if isinstance(values, RaggedTensor):
            dt = dtypes.as_dtype(values._splits.dtype)
        splits = (np.arange(n + 1) * length).astype(dt.as_numpy_dtype)
        return cls._make(values, splits, length)

    @classmethod
    def from_nested_row_splits(cls, flat_values: Any, nested_row_splits: Sequence[Any],
                               name: str | None = None, validate: bool = True) -> "RaggedTensor":
        """One partition per element of `nested_row_splits`, outermost first."""
        if isinstance(nested_row_splits, (Tensor, np.ndarray)) or not nested_row_splits:
            raise ValueError("nested_row_splits must be a non-empty list of vectors")
        result = flat_values
        for splits in reversed(list(nested_row_splits)):
            result = cls.from_row_splits(result, splits, validate=validate)
        return result

    @classmethod
    def from_nested_row_lengths(cls, flat_values: Any, nested_row_lengths: Sequence[Any],
                                name: str | None = None, validate: bool = True) -> "RaggedTensor":
        result = flat_values
        for lengths in reversed(list(nested_row_lengths)):
            result = cls.from_row_lengths(result, lengths, validate=validate)
        return result

    @classmethod
    def from_nested_value_rowids(cls, flat_values: Any, nested_value_rowids: Sequence[Any],
                                 nested_nrows: Sequence[Any] | None = None,
                                 name: str | None = None,
                                 validate: bool = True) -> "RaggedTensor":
        ids = list(nested_value_rowids)
        nrows = [None] * len(ids) if nested_nrows is None else list(nested_nrows)
        result = flat_values
        for rowids, n in reversed(list(zip(ids, nrows))):
            result = cls.from_value_rowids(result, rowids, n, validate=validate)
        return result

    # ----------------------------------------------------------- accessors
    @property
    def values(self) -> "Tensor | RaggedTensor":
        """The concatenated rows (the next level down)."""
        return self._values

    @property
    def flat_values(self) -> Tensor:
        """The dense values under every ragged dimension."""
        v = self._values
        while isinstance(v, RaggedTensor):
            v = v._values
        return v

    def _splits_tensor(self, a: np.ndarray) -> Tensor:
        with placement.device("CPU:0"):
            return constant(a)

    @property
    def row_splits(self) -> Tensor:
        """The partition of this level: row i is values[splits[i]:splits[i+1]]."""
        return self._splits_tensor(self._splits)

    @property
    def nested_row_splits(self) -> tuple[Tensor, ...]:
        return tuple(self._splits_tensor(s) for s in self._nested_np())

    def _nested_np(self) -> list[np.ndarray]:
        out, rt = [], self
        while isinstance(rt, RaggedTensor):
            out.append(rt._splits)
            rt = rt._values
        return out

    @property
    def row_splits_dtype(self) -> dtypes.DType:
        return dtypes.as_dtype(self._splits.dtype)

    @property
    def ragged_rank(self) -> int:
        """The number of ragged (partitioned) dimensions."""
        return len(self._nested_np())

    @property
    def dtype(self) -> dtypes.DType:
        return self.flat_values.dtype

    @property
    def device(self) -> str:
        return self.flat_values.device

    def nrows_int(self) -> int:
        return int(self._splits.size - 1)

    def nrows(self, out_type: Any = None, name: str | None = None) -> Tensor:
        """The number of rows, as a scalar tensor."""
        dt = self.row_splits_dtype if out_type is None else dtypes.as_dtype(out_type)
        with placement.device("CPU:0"):
            return constant(np.asarray(self.nrows_int(), dt.as_numpy_dtype))

    def _lengths_np(self) -> np.ndarray:
        return np.diff(self._splits)

    def row_lengths(self, axis: int = 1, name: str | None = None) -> "Tensor | RaggedTensor":
        """The length of each row (axis 1), or of each row of a deeper
        ragged dimension (a ragged tensor of lengths)."""
        if axis == 0:
            raise ValueError("row_lengths: axis 0 is the number of rows: use nrows()")
        if axis < 0:
            axis += self.shape.rank
        if axis == 1:
            return self._splits_tensor(self._lengths_np())
        if axis > self.ragged_rank:
            raise ValueError(f"row_lengths: axis {axis} is not a ragged dimension "
                             f"(ragged_rank is {self.ragged_rank})")
        return self.with_values(self._values.row_lengths(axis - 1))

    def nested_row_lengths(self, name: str | None = None) -> tuple[Tensor, ...]:
        return tuple(self._splits_tensor(np.diff(s)) for s in self._nested_np())

    def value_rowids(self, name: str | None = None) -> Tensor:
        """The row of each value."""
        return self._splits_tensor(self._rowids_np())

    def _rowids_np(self) -> np.ndarray:
        return np.repeat(np.arange(self.nrows_int(), dtype=self._splits.dtype),
                         self._lengths_np())

    def nested_value_rowids(self, name: str | None = None) -> tuple[Tensor, ...]:
        out, rt = [], self
        while isinstance(rt, RaggedTensor):
            out.append(rt.value_rowids())
            rt = rt._values
        return tuple(out)

    def row_starts(self, name: str | None = None) -> Tensor:
        return self._splits_tensor(self._splits[:-1])

    def row_limits(self, name: str | None = None) -> Tensor:
        return self._splits_tensor(self._splits[1:])

    @property
    def uniform_row_length(self) -> Tensor | None:
        """The common row length when the rows were made uniform, else None."""
        if self._uniform is None:
            return None
        with placement.device("CPU:0"):
            return constant(np.asarray(self._uniform, self._splits.dtype))

    @property
    def shape(self) -> TensorShape:
        """The static shape: None for every ragged dimension."""
        dims: list = [self.nrows_int()]
        rt: Any = self
        while isinstance(rt, RaggedTensor):
            dims.append(rt._uniform)
            rt = rt._values
        dims.extend(rt.shape[1:])
        return TensorShape(dims)

    def get_shape(self) -> TensorShape:
        return self.shape

    def bounding_shape(self, axis: Any = None, name: str | None = None,
                       out_type: Any = None) -> Tensor:
        """The smallest dense shape that holds every row (int64 by default)."""
        dims = self._bounding_dims()
        dt = self.row_splits_dtype if out_type is None else dtypes.as_dtype(out_type)
        a = np.asarray(dims, dt.as_numpy_dtype)
        if axis is not None:
            a = a[axis]
        with placement.device("CPU:0"):
            return constant(a)

    def _bounding_dims(self) -> list[int]:
        dims = [self.nrows_int()]
        rt: Any = self
        while isinstance(rt, RaggedTensor):
            lengths = np.diff(rt._splits)
            dims.append(int(lengths.max()) if lengths.size else 0)
            rt = rt._values
        dims.extend(rt.shape[1:])
        return dims

    # ------------------------------------------------------ new from old
    def with_values(self, new_values: Any) -> "RaggedTensor":
        """This partition over `new_values` (same number of rows)."""
        new_values = _values_tensor(new_values)
        if _nrows_of(new_values) != _nrows_of(self._values):
            raise ValueError(f"with_values: new values have {_nrows_of(new_values)} rows, the "
                             f"partition needs {_nrows_of(self._values)}")
        splits = self._splits
        if isinstance(new_values, RaggedTensor) and new_values._splits.dtype != splits.dtype:
            raise ValueError("with_values: the row_splits dtypes differ; use "
                             "with_row_splits_dtype first")
        return RaggedTensor._make(new_values, splits, self._uniform)

    def with_flat_values(self, new_values: Any) -> "RaggedTensor":
        """Every partition of this tensor over `new_values`."""
        if isinstance(self._values, RaggedTensor):
            return self.with_values(self._values.with_flat_values(new_values))
        return self.with_values(new_values)

    def with_row_splits_dtype(self, dtype: Any) -> "RaggedTensor":
        dt = _splits_dtype(dtype).as_numpy_dtype
        values = self._values
        if isinstance(values, RaggedTensor):
            values = values.with_row_splits_dtype(dtype)
        return RaggedTensor._make(values, self._splits.astype(dt), self._uniform)

    # ------------------------------------------------------------ values
    def to_list(self) -> list:
        """The value as nested Python lists."""
        values = self._values
        vals = values.to_list() if isinstance(values, RaggedTensor) else values.numpy().tolist()
        s = self._splits.tolist()
        return [vals[s[i]:s[i + 1]] for i in range(len(s) - 1)]

    def numpy(self) -> np.ndarray:
        """The rows as numpy arrays: one array when they have one length,
        else an object array of row arrays (TensorFlow's numpy())."""
        values = self._values.numpy()
        s = self._splits
        rows = [values[s[i]:s[i + 1]] for i in range(len(s) - 1)]
        if not rows:
            return np.zeros((0, 0) + values.shape[1:], dtype=values.dtype)
        ragged_rows = any(len(r) != len(rows[0]) for r in rows)
        if ragged_rows:
            out = np.empty(len(rows), dtype=object)
            for i, r in enumerate(rows):
                out[i] = r
            return out
        return np.array(rows)

    def to_sparse(self, name: str | None = None) -> "SparseTensor":
        """The values as a ``pg.SparseTensor`` of the bounding shape (indices
        in row-major order)."""
        from ..sparse import SparseTensor
        idx = None
        for splits in self._nested_np():
            rows = np.repeat(np.arange(len(splits) - 1), np.diff(splits))
            cols = np.arange(int(splits[-1])) - splits[:-1][rows]
            idx = np.stack([rows, cols], 1) if idx is None else \
                np.concatenate([idx[rows], cols[:, None]], 1)
        flat = self.flat_values
        inner = list(flat.shape)[1:]
        if inner:  # every element of the uniform inner dimensions is a value
            cells = np.indices(inner).reshape(len(inner), -1).T
            idx = np.concatenate([np.repeat(idx, len(cells), 0),
                                  np.tile(cells, (len(idx), 1))], 1)
        values = math_ops.reshape(flat, [-1])
        return SparseTensor(idx.astype(np.int64), values,
                            np.array(self._bounding_dims(), np.int64))

    @classmethod
    def from_sparse(cls, st_input: Any, name: str | None = None,
                    row_splits_dtype: Any = dtypes.int64) -> "RaggedTensor":
        """The rows of a 2-D ``pg.SparseTensor`` whose indices are in
        row-major order, each ending at its last value."""
        idx, shape = st_input.indices.numpy(), st_input.dense_shape.numpy()
        if len(shape) != 2:
            raise ValueError(f"from_sparse: the SparseTensor must have rank 2, got dense_shape "
                             f"{shape.tolist()}")
        if len(idx) and (np.any(np.diff(idx[:, 0]) < 0) or np.any(
                idx[:, 1] != np.arange(len(idx)) - np.searchsorted(idx[:, 0], idx[:, 0]))):
            raise errors.InvalidArgumentError(
                "from_sparse: the SparseTensor's indices must be in row-major order and each "
                "row's values must start at column 0 without gaps; pg.sparse.reorder first")
        return cls.from_value_rowids(st_input.values, idx[:, 0].astype(np.int64),
                                     nrows=int(shape[0])).with_row_splits_dtype(
                                         row_splits_dtype)

    # --------------------------------------------------------------- misc
    def __repr__(self) -> str:
        if self.flat_values._dev is None:   # traced in a pg.function: no values yet
            return f"tf.RaggedTensor(values={self._values}, row_splits={self.row_splits})"
        with np.printoptions(formatter={"all": _element_text}):
            text = _element_text(self.numpy())
        return f"<tf.RaggedTensor {text}>"

    __str__ = __repr__

    # pg.function traces a ragged tensor through its flat values; the row
    # partitions are static, part of the trace's signature.
    def __pg_flatten__(self) -> tuple[list, tuple]:
        static, level = [], self
        while isinstance(level, RaggedTensor):
            static.append((level._splits.dtype.str, level._splits.tobytes(), level._uniform))
            level = level._values
        return [level], tuple(static)

    @classmethod
    def __pg_unflatten__(cls, static: tuple, components: list) -> "RaggedTensor":
        result = components[0]
        for dt, data, uniform in reversed(static):
            result = cls._make(result, np.frombuffer(data, np.dtype(dt)).copy(), uniform)
        return result

    def __bool__(self) -> bool:
        raise TypeError("the truth value of a RaggedTensor is ambiguous; use pg.reduce_any "
                        "or pg.reduce_all")

    def __hash__(self) -> int:
        return id(self)
