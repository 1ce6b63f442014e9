"""``pg.data.Dataset``: input pipelines (``tf.data.Dataset``).

A dataset is a recipe: each transformation (``map``, ``batch``, ...)
returns a new dataset over its input, and iterating one runs the recipe
from the start, element by element, on the host (CPU:0, whatever device
scope the caller is in, as tf.data runs on the CPU). Elements are nested
tuples and dicts of eager tensors; ``element_spec`` gives their structure
as ``pg.TensorSpec``s.

``map`` and ``filter`` functions are traced once into a ``pg.function``
(with ``reduce_retracing``, as TensorFlow traces them once), when the
transformation is made; ``num_parallel_calls`` runs that many calls in
worker threads (each with its own trace of the function, since one graph
runs one call at a time) and keeps the elements in order. ``prefetch`` produces
elements in a background thread into a bounded buffer, so that the
pipeline works while the consumer (a training step on a device) runs.

A function of a transformation that fails, at tracing or on an element,
raises an error of ``pg.errors`` typed like TensorFlow's (ValueError ->
``InvalidArgumentError``, ...) whose message names the transformation and
the index of the element; the iterator is finished afterwards and any
background thread it started has stopped.

Inside a traced ``pg.function``, ``next(iterator)`` becomes a graph node
that takes the next element at each call, and ``for x in dataset`` over a
dataset of known, finite cardinality takes every element at each call.
"""
from __future__ import annotations

import collections
import concurrent.futures
import os
import queue
import threading
from typing import Any, Callable, Iterator as PyIterator, Sequence

import numpy as np

from ..framework import dtypes, errors
from ..framework.tensor import Tensor
from ..graph import nest, py_function, tracing
from ..graph.function import Function, TensorSpec
from ..ops import array_ops, random_ops
from ..runtime import placement
from ..runtime.tensors import convert_to_tensor

AUTOTUNE = -1
INFINITE_CARDINALITY = -1
UNKNOWN_CARDINALITY = -2
_PREFETCH_AUTOTUNE = 4          # buffer of prefetch(AUTOTUNE)
_UNROLL_LIMIT = 1024            # most elements a `for` inside pg.function unrolls
HOST = "CPU:0"                  # where pipelines run, whatever the caller's device scope


class _Finished(Exception):
    """Raised inside the pipeline when an error has ended the iteration."""


# ------------------------------------------------------------- helpers

def _to_tensor(x: Any) -> Tensor:
    if isinstance(x, Tensor):
        return x
    as_tensor = getattr(x, "__pg_tensor__", None)
    if as_tensor is not None:
        return as_tensor()
    return convert_to_tensor(x)


def _structure(value: Any, lists: bool = False) -> Any:
    """`value` with every leaf a tensor. Tuples and dicts are structure; a
    list is one tensor, as in tf.data, unless `lists` (a function's
    result: a list becomes a tuple)."""
    if isinstance(value, dict):
        return {k: _structure(value[k], lists) for k in value}
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*[_structure(v, lists) for v in value])
    if isinstance(value, tuple) or (lists and isinstance(value, list)):
        return tuple(_structure(v, lists) for v in value)
    return _to_tensor(value)


def _spec_of(element: Any) -> Any:
    return nest.map_structure(lambda t: TensorSpec(t.shape, t.dtype), element) \
        if nest.is_nested(element) else TensorSpec(element.shape, element.dtype)


def _relax_spec(spec: Any, batch: int | None) -> Any:
    return nest.map_structure(
        lambda s: TensorSpec(None if s.shape is None else (batch,) + tuple(s.shape), s.dtype),
        spec) if nest.is_nested(spec) else TensorSpec(
        None if spec.shape is None else (batch,) + tuple(spec.shape), spec.dtype)


def _error_class(exc: BaseException) -> type:
    if isinstance(exc, errors.OpError):
        return type(exc)
    return py_function._error_class(exc)


def _user_error(what: str, index: int | None, exc: BaseException) -> errors.OpError:
    msg = getattr(exc, "message", None) or str(exc)
    if index is None:
        text = (f"{what} failed while its function was traced: {type(exc).__name__}: {msg} "
                "(no dataset was made; the function must work on symbolic tensors, as in "
                "tf.data)")
    else:
        text = (f"{what} failed on element {index}: {type(exc).__name__}: {msg} (the "
                "iterator is finished; fix the function or the data and iterate again)")
    err = _error_class(exc)(text)
    err.__cause__ = exc
    return err


def _call(args: Any, fn: Callable) -> Any:
    if isinstance(args, tuple) and not hasattr(args, "_fields"):
        return fn(*args)
    return fn(args)


def _trace_fn(fn: Callable, spec: Any, what: str) -> Callable:
    """`fn` as a traced function of one element of `spec`; tracing errors
    are raised now, naming `what`."""
    traced = Function(lambda element: _call(element, fn), name=getattr(fn, "__name__", "fn"),
                      reduce_retracing=True)
    try:
        with placement.device(HOST):
            traced.get_concrete_function(spec)
    except Exception as exc:
        raise _user_error(what, None, exc) from exc
    return traced


def _fn_name(fn: Callable) -> str:
    return getattr(fn, "__name__", type(fn).__name__)


def _int_arg(x: Any, what: str) -> int:
    if isinstance(x, Tensor):
        x = x.numpy()
    try:
        return int(x)
    except (TypeError, ValueError):
        raise errors.InvalidArgumentError(f"{what} must be an integer, got {x!r}") from None


# ------------------------------------------------------------- datasets

class Dataset:
    """A sequence of elements built by a recipe (``tf.data.Dataset``)::

        ds = (pg.data.Dataset.from_tensor_slices((x, y))
              .shuffle(1000, seed=1).map(augment, num_parallel_calls=pg.data.AUTOTUNE)
              .batch(32).prefetch(pg.data.AUTOTUNE))
        for xb, yb in ds:
            step(xb, yb)
    """

    def __init__(self, spec: Any, cardinality: int):
        self._spec = spec
        self._cardinality = cardinality

    # -------------------------------------------------- to override
    def _elements(self) -> PyIterator:
        """A fresh Python iterator over the elements."""
        raise NotImplementedError

    # -------------------------------------------------- sources
    @staticmethod
    def from_tensors(tensors: Any, name: str | None = None) -> "Dataset":
        """A dataset of one element, `tensors`."""
        element = _structure(tensors)
        return _Elements([element], _spec_of(element))

    @staticmethod
    def from_tensor_slices(tensors: Any, name: str | None = None) -> "Dataset":
        """A dataset of the slices of `tensors` along their first axis (every
        component must have the same first size)."""
        return _Slices(_structure(tensors))

    @staticmethod
    def range(*args: Any, output_type: Any = dtypes.int64, name: str | None = None) -> "Dataset":
        """``range(stop)``, ``range(start, stop[, step])`` as a dataset of
        scalars (int64 by default)."""
        if not 1 <= len(args) <= 3:
            raise TypeError("Dataset.range takes 1 to 3 arguments (start, stop, step)")
        vals = [_int_arg(a, "Dataset.range: an argument") for a in args]
        start, stop, step = (0, vals[0], 1) if len(vals) == 1 else (
            vals[0], vals[1], vals[2] if len(vals) == 3 else 1)
        if step == 0:
            raise errors.InvalidArgumentError("Dataset.range: step must not be 0")
        return _Range(start, stop, step, dtypes.as_dtype(output_type))

    @staticmethod
    def from_generator(generator: Callable, output_types: Any = None,
                       output_shapes: Any = None, args: Sequence | None = None,
                       output_signature: Any = None, name: str | None = None) -> "Dataset":
        """A dataset of what ``generator(*args)`` yields, called anew for each
        iteration; `output_signature` (``pg.TensorSpec``s) says the
        structure, dtypes and shapes of its elements."""
        if not callable(generator):
            raise TypeError("Dataset.from_generator: generator must be a callable that "
                            "returns an iterator")
        if output_signature is None:
            if output_types is None:
                raise TypeError("Dataset.from_generator: give output_signature (or "
                                "output_types)")
            output_signature = _signature_from(output_types, output_shapes)
        return _Generator(generator, tuple(args or ()), output_signature)

    @staticmethod
    def zip(*datasets: Any, name: str | None = None) -> "Dataset":
        """A dataset of tuples (or the structure given) of the elements of
        `datasets`, as long as the shortest."""
        structure = datasets[0] if len(datasets) == 1 else datasets
        return _Zip(structure)

    # -------------------------------------------------- transformations
    def map(self, map_func: Callable, num_parallel_calls: int | None = None,
            deterministic: bool | None = None, name: str | None = None) -> "Dataset":
        """Applies `map_func` to each element (a tuple element is passed as
        separate arguments). `num_parallel_calls` (an int or ``AUTOTUNE``)
        calls it in that many threads; the order is kept."""
        return _Map(self, map_func, num_parallel_calls)

    def filter(self, predicate: Callable, name: str | None = None) -> "Dataset":
        """The elements for which `predicate` returns a true scalar bool."""
        return _Filter(self, predicate)

    def batch(self, batch_size: int, drop_remainder: bool = False,
              num_parallel_calls: int | None = None, deterministic: bool | None = None,
              name: str | None = None) -> "Dataset":
        """Stacks `batch_size` consecutive elements (the last batch may be
        smaller unless `drop_remainder`)."""
        return _Batch(self, _int_arg(batch_size, "batch: batch_size"), drop_remainder)

    def padded_batch(self, batch_size: int, padded_shapes: Any = None,
                     padding_values: Any = None, drop_remainder: bool = False,
                     name: str | None = None) -> "Dataset":
        """Like ``batch``, padding each component to `padded_shapes` (None
        sizes: the longest in the batch) with `padding_values` (default 0)."""
        return _Batch(self, _int_arg(batch_size, "padded_batch: batch_size"), drop_remainder,
                      padded=True, padded_shapes=padded_shapes, padding_values=padding_values)

    def unbatch(self, name: str | None = None) -> "Dataset":
        """Splits each element along its first axis into elements."""
        return _Unbatch(self)

    def shuffle(self, buffer_size: int, seed: int | None = None,
                reshuffle_each_iteration: bool = True, name: str | None = None) -> "Dataset":
        """Shuffles with a buffer of `buffer_size` elements: each element is
        drawn at random from the buffer, which the next input refills. With
        a `seed` the order is reproducible; `reshuffle_each_iteration`
        gives each iteration (epoch) a different order."""
        return _Shuffle(self, _int_arg(buffer_size, "shuffle: buffer_size"), seed,
                        reshuffle_each_iteration)

    def repeat(self, count: int | None = None, name: str | None = None) -> "Dataset":
        """The dataset `count` times (None or -1: forever)."""
        n = None if count is None else _int_arg(count, "repeat: count")
        return _Repeat(self, None if n is None or n < 0 else n)

    def take(self, count: int, name: str | None = None) -> "Dataset":
        """The first `count` elements (-1: all)."""
        return _Take(self, _int_arg(count, "take: count"))

    def skip(self, count: int, name: str | None = None) -> "Dataset":
        """All but the first `count` elements (-1: none)."""
        return _Skip(self, _int_arg(count, "skip: count"))

    def prefetch(self, buffer_size: int, name: str | None = None) -> "Dataset":
        """Makes elements ahead in a background thread, into a buffer of
        `buffer_size` elements (``AUTOTUNE``: a small default)."""
        n = _int_arg(buffer_size, "prefetch: buffer_size")
        return _Prefetch(self, _PREFETCH_AUTOTUNE if n == AUTOTUNE else n)

    def cache(self, filename: str = "", name: str | None = None) -> "Dataset":
        """Keeps the elements of the first complete iteration in memory; later
        iterations read them from there (only the in-memory cache, filename
        "", is supported)."""
        if filename:
            raise errors.UnimplementedError(
                "Dataset.cache: caching to a file is not supported; use cache() (memory)")
        return _Cache(self)

    def concatenate(self, dataset: "Dataset", name: str | None = None) -> "Dataset":
        """This dataset's elements, then those of `dataset` (same structure)."""
        return _Concatenate(self, dataset)

    def enumerate(self, start: int = 0, name: str | None = None) -> "Dataset":
        """``(index, element)`` pairs, the index an int64 scalar."""
        return Dataset.zip((Dataset.range(start, np.iinfo(np.int64).max), self))

    def apply(self, transformation_func: Callable[["Dataset"], "Dataset"]) -> "Dataset":
        return transformation_func(self)

    # -------------------------------------------------- inspection
    @property
    def element_spec(self) -> Any:
        """The structure of an element, as ``pg.TensorSpec``s."""
        return self._spec

    def cardinality(self) -> Tensor:
        """The number of elements as an int64 scalar; ``INFINITE_CARDINALITY``
        (-1) or ``UNKNOWN_CARDINALITY`` (-2) when not finite or not known."""
        return convert_to_tensor(np.int64(self._cardinality))

    def __len__(self) -> int:
        if self._cardinality == INFINITE_CARDINALITY:
            raise TypeError("The dataset is infinite.")
        if self._cardinality == UNKNOWN_CARDINALITY:
            raise TypeError("The dataset length is unknown.")
        return self._cardinality

    def __bool__(self) -> bool:
        return True

    def __iter__(self) -> "Iterator":
        if tracing.current_graph() is not None:
            return iter(self._unrolled())
        return Iterator(self)

    def as_numpy_iterator(self) -> PyIterator:
        """Iterates the elements as numpy arrays (same structure)."""
        def value(t: Tensor) -> Any:
            return t.numpy()  # scalars as numpy scalars, as in tf.data
        for element in self:
            yield nest.map_structure(value, element) if nest.is_nested(element) else value(element)

    def reduce(self, initial_state: Any, reduce_func: Callable) -> Any:
        """Folds the elements into a state: ``state = reduce_func(state, element)``."""
        state = _structure(initial_state)
        for element in self:
            state = _structure(reduce_func(state, element), lists=True)
        return state

    def _unrolled(self) -> list:
        """The elements as graph nodes of the function being traced, taken
        from a fresh iterator at each call of the function."""
        n = self._cardinality
        if n < 0 or n > _UNROLL_LIMIT:
            what = "infinite" if n == INFINITE_CARDINALITY else (
                "of unknown size" if n == UNKNOWN_CARDINALITY else f"of {n} elements")
            raise errors.UnimplementedError(
                f"iterating a dataset {what} inside a pg.function: a `for` loop over a "
                f"dataset in a traced function needs a known size of at most "
                f"{_UNROLL_LIMIT}; iterate it outside and pass the elements to the function, "
                "or call next() on an iterator inside it (iterator = iter(dataset))")
        holder: dict = {}

        def first() -> Any:
            holder["it"] = Iterator(self)
            return holder["it"].get_next()
        return [_graph_next(first if i == 0 else (lambda: holder["it"].get_next()),
                            self._spec) for i in range(n)]

    def __repr__(self) -> str:
        return f"<{type(self).__name__.lstrip('_')}Dataset element_spec={self._spec}>"


def _signature_from(types: Any, shapes: Any) -> Any:
    flat_t = nest.flatten(types) if nest.is_nested(types) else [types]
    if shapes is None:
        flat_s = [None] * len(flat_t)
    elif nest.is_nested(types):
        flat_s = [None if s is None else tuple(s) for s in _shape_leaves(types, shapes)]
    else:
        flat_s = [tuple(shapes)]
    specs = [TensorSpec(s, t) for t, s in zip(flat_t, flat_s)]
    return nest.pack_as(types, specs) if nest.is_nested(types) else specs[0]


def _shape_leaves(types: Any, shapes: Any) -> list:
    if isinstance(types, dict):
        return [s for k in sorted(types) for s in _shape_leaves(types[k], shapes[k])]
    if isinstance(types, (list, tuple)):
        return [s for t, sh in zip(types, shapes) for s in _shape_leaves(t, sh)]
    return [shapes]


# ------------------------------------------------------------- the sources

class _Elements(Dataset):
    def __init__(self, elements: list, spec: Any):
        super().__init__(spec, len(elements))
        self._items = elements

    def _elements(self) -> PyIterator:
        return iter(self._items)


class _Slices(Dataset):
    def __init__(self, element: Any):
        leaves = nest.flatten(element) if nest.is_nested(element) else [element]
        if not leaves:
            raise errors.InvalidArgumentError("from_tensor_slices: no tensors given")
        sizes = []
        for path, t in (nest.flatten_with_paths(element) if nest.is_nested(element)
                        else [("", element)]):
            if not t.shape:
                raise errors.InvalidArgumentError(
                    f"from_tensor_slices: component{path} is a scalar; every component "
                    "needs at least one dimension to slice")
            sizes.append((path, t.shape[0]))
        if len({s for _, s in sizes}) != 1:
            got = ", ".join(f"component{p or ''} has {s}" for p, s in sizes)
            raise errors.InvalidArgumentError(
                f"from_tensor_slices: all components must have the same size in their "
                f"first dimension ({got})")
        spec = nest.map_structure(lambda t: TensorSpec(t.shape[1:], t.dtype), element) \
            if nest.is_nested(element) else TensorSpec(element.shape[1:], element.dtype)
        super().__init__(spec, sizes[0][1])
        self._arrays = [t._numpy() for t in leaves]
        self._structure = element

    def _elements(self) -> PyIterator:
        nested = nest.is_nested(self._structure)
        for i in range(self._cardinality):
            parts = [convert_to_tensor(a[i]) for a in self._arrays]
            yield nest.pack_as(self._structure, parts) if nested else parts[0]


class TextLineDataset(Dataset):
    """The lines of text files, in order, as scalar string tensors without
    their line ends (``\n``, ``\r\n``), as ``tf.data.TextLineDataset``. The
    files are read when the dataset is iterated (a missing one raises
    NotFoundError then); its size is unknown until then."""

    def __init__(self, filenames: Any, compression_type: str | None = None,
                 buffer_size: int | None = None, num_parallel_reads: int | None = None,
                 name: str | None = None):
        if compression_type not in (None, ""):
            raise errors.UnimplementedError(
                f"TextLineDataset: compression_type={compression_type!r} is not supported; "
                "decompress the files first", op="TextLineDataset")
        if isinstance(filenames, Tensor):
            filenames = filenames.numpy()
        names = [filenames] if isinstance(filenames, (str, bytes, os.PathLike)) \
            else list(np.asarray(filenames, object).reshape(-1))
        self._files = [os.fsdecode(f) for f in names]
        super().__init__(TensorSpec((), dtypes.string), UNKNOWN_CARDINALITY)

    def _elements(self) -> PyIterator:
        for path in self._files:
            try:
                f = open(path, "rb")
            except FileNotFoundError:
                raise errors.NotFoundError(f"TextLineDataset: {path}; No such file or "
                                           "directory", op="TextLineDataset") from None
            with f:
                for line in f:
                    line = line[:-1] if line.endswith(b"\n") else line
                    yield convert_to_tensor(line[:-1] if line.endswith(b"\r") else line)


class _Range(Dataset):
    def __init__(self, start: int, stop: int, step: int, dtype: dtypes.DType):
        n = max(0, -(-(stop - start) // step)) if step > 0 else max(0, -(-(start - stop) // -step))
        super().__init__(TensorSpec((), dtype), n)
        self._args = (start, stop, step)
        self._np = np.dtype(dtype.as_numpy_dtype).type

    def _elements(self) -> PyIterator:
        for v in range(*self._args):
            yield convert_to_tensor(self._np(v))


class _Generator(Dataset):
    def __init__(self, generator: Callable, args: tuple, signature: Any):
        for path, s in (nest.flatten_with_paths(signature) if nest.is_nested(signature)
                        else [("", signature)]):
            if not isinstance(s, TensorSpec):
                raise TypeError(f"from_generator: output_signature{path} must be a "
                                f"pg.TensorSpec, got {s!r}")
        super().__init__(signature, UNKNOWN_CARDINALITY)
        self._generator = generator
        self._args = args

    def _elements(self) -> PyIterator:
        what = f"Dataset.from_generator({_fn_name(self._generator)})"
        try:
            it = iter(self._generator(*self._args))
        except Exception as exc:
            raise _user_error(what, 0, exc) from exc
        specs = nest.flatten(self._spec) if nest.is_nested(self._spec) else [self._spec]
        i = 0
        while True:
            try:
                value = next(it)
            except StopIteration:
                return
            except Exception as exc:
                raise _user_error(what, i, exc) from exc
            yield self._check(what, i, value, specs)
            i += 1

    def _check(self, what: str, i: int, value: Any, specs: list) -> Any:
        nested = nest.is_nested(self._spec)
        leaves = _leaves_like(self._spec, value)
        if leaves is None:
            raise errors.InvalidArgumentError(
                f"{what}: element {i} does not have the structure of output_signature "
                f"{self._spec}")
        out = []
        for k, (x, s) in enumerate(zip(leaves, specs)):
            try:
                t = x if isinstance(x, Tensor) else convert_to_tensor(  # as tf.data converts
                    np.asarray(x, s.dtype.as_numpy_dtype))
            except (TypeError, ValueError) as exc:
                raise errors.InvalidArgumentError(
                    f"{what}: element {i}, component {k} ({type(x).__name__}) cannot be "
                    f"converted to {s.dtype.name}: {exc}") from None
            if t.dtype is not s.dtype:
                raise errors.InvalidArgumentError(
                    f"{what}: element {i}, component {k} is {t.dtype.name}, but "
                    f"output_signature says {s.dtype.name}")
            if not s.is_compatible_with(t):
                raise errors.InvalidArgumentError(
                    f"{what}: element {i}, component {k} has shape {list(t.shape)}, which "
                    f"does not fit the shape {s.shape} of output_signature")
            out.append(t)
        return nest.pack_as(self._spec, out) if nested else out[0]


def _leaves_like(spec: Any, value: Any) -> list | None:
    """The parts of `value` at the leaves of `spec` (a leaf of `spec` takes
    whatever `value` holds there, a list included); None if they differ."""
    if isinstance(spec, dict):
        if not isinstance(value, dict) or sorted(value) != sorted(spec):
            return None
        parts = [_leaves_like(spec[k], value[k]) for k in sorted(spec)]
    elif isinstance(spec, (tuple, list)):
        if not isinstance(value, (tuple, list)) or len(value) != len(spec):
            return None
        parts = [_leaves_like(a, b) for a, b in zip(spec, value)]
    else:
        return [value]
    if any(p is None for p in parts):
        return None
    return [x for p in parts for x in p]


class _Zip(Dataset):
    def __init__(self, structure: Any):
        flat = nest.flatten(structure) if nest.is_nested(structure) else [structure]
        for d in flat:
            if not isinstance(d, Dataset):
                raise TypeError(f"Dataset.zip takes datasets, got {type(d).__name__}")
        cards = [d._cardinality for d in flat]
        finite = [c for c in cards if c >= 0]
        if finite:
            card = min(finite) if UNKNOWN_CARDINALITY not in cards or min(finite) == 0 \
                else UNKNOWN_CARDINALITY
        else:
            card = UNKNOWN_CARDINALITY if UNKNOWN_CARDINALITY in cards else INFINITE_CARDINALITY
        spec = nest.map_structure(lambda d: d._spec, structure) \
            if nest.is_nested(structure) else structure._spec
        super().__init__(spec, card)
        self._structure = structure
        self._inputs = flat

    def _elements(self) -> PyIterator:
        its = [d._elements() for d in self._inputs]
        try:
            while True:
                parts = []
                for it in its:
                    try:
                        parts.append(next(it))
                    except StopIteration:
                        return
                yield nest.pack_as(self._structure, parts) if nest.is_nested(
                    self._structure) else parts[0]
        finally:
            for it in its:
                close = getattr(it, "close", None)
                if close is not None:
                    close()


# ------------------------------------------------------------- transformations

class _Unary(Dataset):
    def __init__(self, input_: Dataset, spec: Any, cardinality: int):
        if not isinstance(input_, Dataset):
            raise TypeError(f"expected a Dataset, got {type(input_).__name__}")
        super().__init__(spec, cardinality)
        self._input = input_


class _Map(_Unary):
    def __init__(self, input_: Dataset, fn: Callable, parallel: int | None):
        if not callable(fn):
            raise TypeError(f"Dataset.map: map_func must be callable, got {fn!r}")
        self._what = f"Dataset.map({_fn_name(fn)})"
        self._user_fn = fn
        self._fn = _trace_fn(fn, input_._spec, self._what)
        self._spare = [self._fn]          # traced functions no thread has taken yet
        self._local = threading.local()
        self._lock = threading.Lock()
        cf = self._fn.get_concrete_function(input_._spec)
        out = cf.structured_outputs
        spec = nest.map_structure(lambda t: TensorSpec(t.shape, t.dtype), out) \
            if nest.is_nested(out) else TensorSpec(out.shape, out.dtype)
        super().__init__(input_, spec, input_._cardinality)
        if parallel is not None:
            parallel = _int_arg(parallel, "map: num_parallel_calls")
            parallel = (os.cpu_count() or 1) if parallel == AUTOTUNE else parallel
            if parallel < 1:
                raise errors.InvalidArgumentError(
                    f"Dataset.map: num_parallel_calls must be positive or AUTOTUNE, got "
                    f"{parallel}")
        self._parallel = parallel

    def _thread_fn(self) -> Callable:
        """This thread's traced function: a graph runs one call at a time,
        so each worker thread of a parallel map has its own trace."""
        fn = getattr(self._local, "fn", None)
        if fn is None:
            with self._lock:
                fn = self._spare.pop() if self._spare else None
            if fn is None:
                fn = _trace_fn(self._user_fn, self._input._spec, self._what)
            self._local.fn = fn
        return fn

    def _apply(self, i: int, element: Any) -> Any:
        try:
            with placement.device(HOST):  # (also in the worker threads)
                return _structure(self._thread_fn()(element), lists=True)
        except Exception as exc:
            raise _user_error(self._what, i, exc) from exc

    def _elements(self) -> PyIterator:
        source = self._input._elements()
        if not self._parallel or self._parallel == 1:
            for i, element in enumerate(source):
                yield self._apply(i, element)
            return
        pool = concurrent.futures.ThreadPoolExecutor(self._parallel,
                                                     thread_name_prefix="pg-data-map")
        pending: collections.deque = collections.deque()
        try:
            for i, element in enumerate(source):
                pending.append(pool.submit(self._apply, i, element))
                if len(pending) >= self._parallel:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for f in pending:
                f.cancel()
            pool.shutdown(wait=True)
            close = getattr(source, "close", None)
            if close is not None:
                close()


class _Filter(_Unary):
    def __init__(self, input_: Dataset, predicate: Callable):
        self._what = f"Dataset.filter({_fn_name(predicate)})"
        self._fn = _trace_fn(predicate, input_._spec, self._what)
        out = self._fn.get_concrete_function(input_._spec).structured_outputs
        if not isinstance(out, Tensor) or out.dtype is not dtypes.bool_ or \
                out.shape not in ((), None):
            got = getattr(out, "dtype", None)
            raise errors.InvalidArgumentError(
                f"{self._what}: the predicate must return a scalar bool tensor, got "
                f"{got.name if got is not None else type(out).__name__}"
                f"{list(out.shape) if isinstance(out, Tensor) and out.shape else ''}")
        super().__init__(input_, input_._spec, UNKNOWN_CARDINALITY)

    def _elements(self) -> PyIterator:
        for i, element in enumerate(self._input._elements()):
            try:
                keep = bool(self._fn(element).numpy())
            except Exception as exc:
                raise _user_error(self._what, i, exc) from exc
            if keep:
                yield element


class _Batch(_Unary):
    def __init__(self, input_: Dataset, size: int, drop: bool, padded: bool = False,
                 padded_shapes: Any = None, padding_values: Any = None):
        if size < 1:
            raise errors.InvalidArgumentError(f"batch: batch_size must be positive, got {size}")
        n = input_._cardinality
        card = n if n < 0 else (n // size if drop else -(-n // size))
        spec = _relax_spec(input_._spec, size if drop else None)
        self._what = "Dataset.padded_batch" if padded else "Dataset.batch"
        if padded:
            self._pad_shapes = self._padded_shapes(input_._spec, padded_shapes)
            self._pad_values = self._padding_values(input_._spec, padding_values)
            leaves = nest.flatten(spec) if nest.is_nested(spec) else [spec]
            leaves = [TensorSpec((s.shape[0],) + tuple(p), s.dtype)
                      for s, p in zip(leaves, self._pad_shapes)]
            spec = nest.pack_as(spec, leaves) if nest.is_nested(spec) else leaves[0]
        super().__init__(input_, spec, card)
        self._size, self._drop, self._padded = size, bool(drop), padded

    @staticmethod
    def _padded_shapes(spec: Any, given: Any) -> list:
        specs = nest.flatten(spec) if nest.is_nested(spec) else [spec]
        if given is None:
            for s in specs:
                if s.shape is None:
                    raise errors.InvalidArgumentError(
                        "padded_batch: an element component has an unknown rank; give "
                        "padded_shapes")
            return [tuple(s.shape) for s in specs]
        flat = _shape_leaves(spec, given) if nest.is_nested(spec) else [given]
        out = []
        for s, p in zip(specs, flat):
            p = tuple(None if d is None or d == -1 else int(d) for d in p)
            if s.shape is not None and len(s.shape) != len(p):
                raise errors.InvalidArgumentError(
                    f"padded_batch: padded shape {list(p)} has rank {len(p)}, but the "
                    f"component has shape {list(s.shape)}")
            out.append(p)
        return out

    @staticmethod
    def _padding_values(spec: Any, given: Any) -> list:
        specs = nest.flatten(spec) if nest.is_nested(spec) else [spec]
        if given is None:
            return [np.zeros((), s.dtype.as_numpy_dtype) for s in specs]
        flat = nest.flatten(given) if nest.is_nested(given) else [given] * len(specs)
        return [np.asarray(v.numpy() if isinstance(v, Tensor) else v, s.dtype.as_numpy_dtype)
                for v, s in zip(flat, specs)]

    def _elements(self) -> PyIterator:
        batch: list = []
        first = 0
        for i, element in enumerate(self._input._elements()):
            if not batch:
                first = i
            batch.append(element)
            if len(batch) == self._size:
                yield self._stack(batch, first)
                batch = []
        if batch and not self._drop:
            yield self._stack(batch, first)

    def _stack(self, batch: list, first: int) -> Any:
        nested = nest.is_nested(batch[0])
        columns = list(zip(*[nest.flatten(e) if nested else [e] for e in batch]))
        out = []
        for k, column in enumerate(columns):
            arrays = [t._numpy() for t in column]
            if self._padded:
                out.append(convert_to_tensor(self._pad(arrays, k, first)))
                continue
            for j, a in enumerate(arrays[1:], 1):
                if a.shape != arrays[0].shape:
                    raise errors.InvalidArgumentError(
                        f"{self._what}: cannot batch tensors with different shapes in "
                        f"component {k}: element {first} has shape {list(arrays[0].shape)} "
                        f"and element {first + j} has shape {list(a.shape)}; use "
                        "padded_batch, or map them to one shape first")
            out.append(convert_to_tensor(np.stack(arrays)))
        return nest.pack_as(batch[0], out) if nested else out[0]

    def _pad(self, arrays: list, k: int, first: int) -> np.ndarray:
        target = list(self._pad_shapes[k])
        for d in range(len(target)):
            longest = max(a.shape[d] for a in arrays)
            if target[d] is None:
                target[d] = longest
            elif longest > target[d]:
                raise errors.InvalidArgumentError(
                    f"{self._what}: component {k} of an element from index {first} has "
                    f"size {longest} in dimension {d}, larger than its padded shape "
                    f"{list(self._pad_shapes[k])}")
        out = np.full([len(arrays)] + target, self._pad_values[k])
        for j, a in enumerate(arrays):
            out[(j,) + tuple(slice(0, n) for n in a.shape)] = a
        return out


class _Unbatch(_Unary):
    def __init__(self, input_: Dataset):
        specs = nest.flatten(input_._spec) if nest.is_nested(input_._spec) else [input_._spec]
        for s in specs:
            if s.shape is not None and len(s.shape) == 0:
                raise errors.InvalidArgumentError(
                    "unbatch: every component needs at least one dimension")
        spec = nest.map_structure(
            lambda s: TensorSpec(None if s.shape is None else s.shape[1:], s.dtype),
            input_._spec) if nest.is_nested(input_._spec) else TensorSpec(
            None if input_._spec.shape is None else input_._spec.shape[1:], input_._spec.dtype)
        super().__init__(input_, spec, UNKNOWN_CARDINALITY)

    def _elements(self) -> PyIterator:
        for element in self._input._elements():
            nested = nest.is_nested(element)
            arrays = [t._numpy() for t in (nest.flatten(element) if nested else [element])]
            n = {a.shape[0] for a in arrays}
            if len(n) != 1:
                raise errors.InvalidArgumentError(
                    f"unbatch: the components of an element have different first sizes "
                    f"({sorted(n)})")
            for i in range(n.pop()):
                parts = [convert_to_tensor(a[i]) for a in arrays]
                yield nest.pack_as(element, parts) if nested else parts[0]


class _Shuffle(_Unary):
    def __init__(self, input_: Dataset, buffer: int, seed: int | None, reshuffle: bool):
        if buffer < 1:
            raise errors.InvalidArgumentError(
                f"shuffle: buffer_size must be positive, got {buffer}")
        super().__init__(input_, input_._spec, input_._cardinality)
        self._buffer = buffer
        if seed is None:
            seed = random_ops._global_seed[0]
            self._seed = None if seed is None else (int(seed), 0)
        else:
            self._seed = (int(seed), 1)
        self._reshuffle = bool(reshuffle)
        self._epoch = 0
        self._fixed = int(np.random.SeedSequence().entropy % (1 << 63)) \
            if not reshuffle and self._seed is None else None
        self._lock = threading.Lock()

    def _rng(self) -> np.random.Generator:
        with self._lock:
            epoch = self._epoch
            self._epoch += 1
        if self._seed is None:
            return np.random.default_rng(self._fixed)  # None: fresh entropy each time
        return np.random.default_rng([*self._seed, epoch if self._reshuffle else 0])

    def _elements(self) -> PyIterator:
        rng = self._rng()
        buf: list = []
        for element in self._input._elements():
            if len(buf) < self._buffer:
                buf.append(element)
                if len(buf) < self._buffer:
                    continue
            j = int(rng.integers(len(buf)))
            yield buf[j]
            buf[j] = buf[-1]
            buf.pop()
        while buf:
            j = int(rng.integers(len(buf)))
            yield buf[j]
            buf[j] = buf[-1]
            buf.pop()


class _Repeat(_Unary):
    def __init__(self, input_: Dataset, count: int | None):
        n = input_._cardinality
        if count is None:
            card = 0 if n == 0 else (UNKNOWN_CARDINALITY if n == UNKNOWN_CARDINALITY
                                     else INFINITE_CARDINALITY)
        else:
            card = n * count if n >= 0 else (n if count else 0)
        super().__init__(input_, input_._spec, card)
        self._count = count

    def _elements(self) -> PyIterator:
        epoch = 0
        while self._count is None or epoch < self._count:
            empty = True
            for element in self._input._elements():
                empty = False
                yield element
            if empty:
                return
            epoch += 1


class _Take(_Unary):
    def __init__(self, input_: Dataset, count: int):
        n = input_._cardinality
        if count < 0:
            card = n
        elif n == INFINITE_CARDINALITY:
            card = count
        elif n == UNKNOWN_CARDINALITY:
            card = UNKNOWN_CARDINALITY if count else 0
        else:
            card = min(n, count)
        super().__init__(input_, input_._spec, card)
        self._count = count

    def _elements(self) -> PyIterator:
        if self._count == 0:
            return
        source = self._input._elements()
        try:
            for i, element in enumerate(source):
                yield element
                if i + 1 == self._count:
                    return
        finally:
            close = getattr(source, "close", None)
            if close is not None:
                close()


class _Skip(_Unary):
    def __init__(self, input_: Dataset, count: int):
        n = input_._cardinality
        if count < 0:
            card = 0 if n != INFINITE_CARDINALITY else INFINITE_CARDINALITY
        else:
            card = n if n < 0 else max(n - count, 0)
        super().__init__(input_, input_._spec, card)
        self._count = count

    def _elements(self) -> PyIterator:
        for i, element in enumerate(self._input._elements()):
            if self._count < 0 or i < self._count:
                continue
            yield element


class _Concatenate(_Unary):
    def __init__(self, input_: Dataset, other: Dataset):
        if not isinstance(other, Dataset):
            raise TypeError(f"concatenate takes a Dataset, got {type(other).__name__}")
        a, b = input_._spec, other._spec
        fa = nest.flatten(a) if nest.is_nested(a) else [a]
        fb = nest.flatten(b) if nest.is_nested(b) else [b]
        if not nest.same_structure(a, b) or len(fa) != len(fb) or any(
                x.dtype is not y.dtype for x, y in zip(fa, fb)):
            raise errors.InvalidArgumentError(
                f"concatenate: the datasets' elements differ ({a} and {b}); they must have "
                "the same structure and dtypes")
        merged = [TensorSpec(None if x.shape is None or y.shape is None or
                             len(x.shape) != len(y.shape) else
                             tuple(p if p == q else None for p, q in zip(x.shape, y.shape)),
                             x.dtype) for x, y in zip(fa, fb)]
        ca, cb = input_._cardinality, other._cardinality
        card = INFINITE_CARDINALITY if INFINITE_CARDINALITY in (ca, cb) else (
            UNKNOWN_CARDINALITY if UNKNOWN_CARDINALITY in (ca, cb) else ca + cb)
        super().__init__(input_, nest.pack_as(a, merged) if nest.is_nested(a) else merged[0],
                         card)
        self._other = other

    def _elements(self) -> PyIterator:
        yield from self._input._elements()
        yield from self._other._elements()


class _Cache(_Unary):
    def __init__(self, input_: Dataset):
        super().__init__(input_, input_._spec, input_._cardinality)
        self._cached: list | None = None
        self._lock = threading.Lock()

    def _elements(self) -> PyIterator:
        if self._cached is not None:
            yield from self._cached
            return
        got = []
        for element in self._input._elements():
            got.append(element)
            yield element
        with self._lock:  # kept only once an iteration has seen every element
            if self._cached is None:
                self._cached = got


class _Prefetch(_Unary):
    def __init__(self, input_: Dataset, buffer: int):
        if buffer < 0:
            raise errors.InvalidArgumentError(
                f"prefetch: buffer_size must be >= 0 or AUTOTUNE, got {buffer}")
        super().__init__(input_, input_._spec, input_._cardinality)
        self._buffer = buffer

    def _elements(self) -> PyIterator:
        if self._buffer == 0:
            yield from self._input._elements()
            return
        producer = _Producer(self._input._elements(), self._buffer)
        try:
            while True:
                kind, value = producer.get()
                if kind == "end":
                    return
                if kind == "error":
                    raise value
                yield value
        finally:
            producer.stop()


_END = ("end", None)


class _Producer:
    """A thread that takes elements from `source` into a bounded queue."""

    def __init__(self, source: PyIterator, size: int):
        self._source = source
        self._queue: queue.Queue = queue.Queue(maxsize=size)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pg-data-prefetch",
                                        daemon=True)
        self._thread.start()

    def _put(self, item: tuple) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        try:
            with placement.device(HOST):
                for element in self._source:
                    if not self._put(("element", element)):
                        return
            self._put(_END)
        except BaseException as exc:  # handed to the consumer, raised there
            self._put(("error", exc))
        finally:
            close = getattr(self._source, "close", None)
            if close is not None:
                try:
                    close()
                except Exception:
                    pass

    def get(self) -> tuple:
        while True:
            try:
                return self._queue.get(timeout=0.1)
            except queue.Empty:
                if not self._thread.is_alive() and self._queue.empty():
                    return _END

    def stop(self) -> None:
        self._stop.set()
        while True:  # unblock a producer waiting on a full queue
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        if self._thread is not threading.current_thread():
            self._thread.join()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()


# ------------------------------------------------------------- iterators

class Iterator:
    """Iterates a dataset (``iter(dataset)``): ``next(it)`` or
    ``it.get_next()`` give the next element; ``get_next_as_optional`` is
    not supported. After the last element (or an error) the iterator is
    finished and keeps raising StopIteration. Inside a traced
    ``pg.function``, ``next(it)`` is a graph node that takes the next
    element at each call (``OutOfRangeError`` at the end)."""

    def __init__(self, dataset: Dataset):
        self._dataset = dataset
        self._it: Any = dataset._elements()
        self._lock = threading.Lock()

    @property
    def element_spec(self) -> Any:
        return self._dataset._spec

    def __iter__(self) -> "Iterator":
        return self

    def __next__(self) -> Any:
        if tracing.current_graph() is not None:
            return _graph_next(self.get_next, self._dataset._spec)
        with self._lock:
            if self._it is None:
                raise StopIteration
            try:
                with placement.device(HOST):
                    return next(self._it)
            except StopIteration:
                self._finish()
                raise
            except BaseException:
                self._finish()
                raise

    def get_next(self) -> Any:
        try:
            return self.__next__()
        except StopIteration:
            raise errors.OutOfRangeError("End of sequence: the iterator has no more "
                                         "elements") from None

    def _finish(self) -> None:
        it, self._it = self._it, None
        close = getattr(it, "close", None)
        if close is not None:
            close()

    def close(self) -> None:
        """Ends the iteration now, stopping any background thread."""
        with self._lock:
            self._finish()

    def __del__(self) -> None:
        try:
            self._finish()
        except Exception:
            pass


def _graph_next(take: Callable[[], Any], spec: Any) -> Any:
    """A graph node (in the function being traced) whose run calls `take`
    and returns its element; its outputs have the shapes of `spec`."""
    nested = nest.is_nested(spec)
    specs = nest.flatten(spec) if nested else [spec]

    def run() -> list:
        element = take()
        return nest.flatten(element) if nested else [element]
    outs = py_function.call_node(py_function.register(run), [], [s.dtype for s in specs])
    for t, s in zip(outs, specs):
        py_function.set_static_shape(t, s.shape)
    return nest.pack_as(spec, list(outs)) if nested else outs[0]
