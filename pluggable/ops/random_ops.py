"""Random numbers (``pg.random``): counter-based generators over the
StatelessRandom*V2 ops, in TensorFlow's layout.

A ``Generator`` holds a Philox state [counter_lo, counter_hi, key] as
``tf.random.Generator`` does: each draw runs a stateless op with the
current key and counter on the current device, then advances the counter
by 256 per element, so ``Generator.from_seed(s)`` gives the same streams as
TensorFlow's. ``pg.random.normal`` / ``uniform`` / ``truncated_normal`` draw
from the global generator (``set_seed`` resets it), or, given an op
``seed``, from a generator kept for that (global seed, op seed) pair. The
``stateless_*`` functions derive the key and counter from a seed pair as
TensorFlow's stateless functions do.

Integer ``uniform`` draws are made on the host (with TensorFlow's
algorithm: lo + bits % (hi - lo)) and copied to the device: no device op
of the op set makes them.
"""
from __future__ import annotations

import os
import threading
from typing import Any, Sequence

import numpy as np

from ..framework import dtypes, errors
from ..framework.tensor import Tensor
from ..runtime.tensors import constant, convert_to_tensor
from . import math_ops, philox, raw_ops
from .random_op_defs import ALG_PHILOX

_U64 = 0xFFFFFFFFFFFFFFFF
_SKIP_PER_ELEMENT = 256  # counter advance per element drawn (TensorFlow's choice)
DEFAULT_GLOBAL_SEED = 87654321  # used with an op seed when no global seed is set


def _shape(shape: Any) -> np.ndarray:
    s = np.asarray(shape.numpy() if isinstance(shape, Tensor) else shape, np.int64).reshape(-1)
    if (s < 0).any():
        raise errors.InvalidArgumentError(f"random: shape must be non-negative, got {list(s)}")
    return s.astype(np.int32) if s.size == 0 or s.max() <= np.iinfo(np.int32).max else s


def _scaled(rnd: Tensor, scale: Any, shift: Any) -> Tensor:
    """rnd * scale + shift in rnd's dtype (skipped where they are 1 and 0)."""
    dt = rnd.dtype
    if not (isinstance(scale, (int, float)) and scale == 1):
        rnd = math_ops.multiply(rnd, convert_to_tensor(_value(scale), dt))
    if not (isinstance(shift, (int, float)) and shift == 0):
        rnd = math_ops.add(rnd, convert_to_tensor(_value(shift), dt))
    return rnd


def _to_range(rnd: Tensor, minval: Any, maxval: Any) -> Tensor:
    """[0, 1) samples -> rnd * (maxval - minval) + minval, in rnd's dtype."""
    hi = 1 if maxval is None else maxval
    if isinstance(minval, Tensor) or isinstance(hi, Tensor):
        lo = convert_to_tensor(_value(minval), rnd.dtype)
        return _scaled(rnd, math_ops.subtract(convert_to_tensor(_value(hi), rnd.dtype), lo), lo)
    npdt = rnd.dtype.as_numpy_dtype
    span = np.asarray(hi).astype(npdt) - np.asarray(minval).astype(npdt)
    return _scaled(rnd, 1 if span == 1 else span, minval)


def _value(v: Any) -> Any:
    return v if isinstance(v, Tensor) else np.asarray(v)


def _float_dtype(dtype: Any) -> dtypes.DType:
    dt = dtypes.as_dtype(dtype)
    if not dt.is_floating:
        raise errors.InvalidArgumentError(f"random: dtype must be a floating type, got {dt.name}")
    return dt


def _uniform_ints(key: int, counter: tuple[int, int], n: int, lo: int, hi: int,
                  dt: dtypes.DType) -> np.ndarray:
    """TensorFlow's integer uniform: lo + bits % (hi - lo) (64-bit bits for int64)."""
    if dt.name not in ("int32", "int64", "uint32", "uint64"):
        raise errors.InvalidArgumentError(f"random.uniform: integer samples must be int32, "
                                          f"int64, uint32 or uint64, not {dt.name}")
    if hi <= lo:
        raise errors.InvalidArgumentError(f"random.uniform: need minval < maxval, got {lo} "
                                          f"and {hi}")
    wide = dt.size == 8
    per = 2 if wide else 4
    words = philox.philox(key, counter, np.arange(-(-n // per), dtype=np.uint64)).reshape(-1)
    if wide:
        w = words.astype(np.uint64).reshape(-1, 2)
        bits = w[:, 0] | (w[:, 1] << np.uint64(32))
    else:
        bits = words.astype(np.uint64)
    span = np.uint64((hi - lo) & _U64)
    out = (bits % span).astype(np.uint64) + np.uint64(lo & _U64)
    return out[:n].astype(np.uint64 if wide else np.uint32).view(
        np.int64 if wide else np.int32).astype(dt.as_numpy_dtype)


# ------------------------------------------------------------- Generator

_ALG_NAMES = {"philox": ALG_PHILOX, "auto_select": 3, "threefry": 2}


def _algorithm(alg: Any) -> int:
    """TensorFlow's ways of naming an algorithm: a name ("philox",
    "threefry", "auto_select", any case), an enum member with an int
    value, or the int itself (1 Philox, 2 ThreeFry, 3 auto-select)."""
    if isinstance(alg, str):
        key = alg.lower()
        if key not in _ALG_NAMES:
            raise errors.InvalidArgumentError(f"random.Generator: unknown algorithm {alg!r}; "
                                              f"use one of {sorted(_ALG_NAMES)}")
        return _ALG_NAMES[key]
    return int(getattr(alg, "value", alg))


class Generator:
    """A Philox random generator with TensorFlow's state layout
    [counter_lo, counter_hi, key] (like ``tf.random.Generator``)."""

    def __init__(self, state: Sequence[int] | None = None, alg: Any = ALG_PHILOX):
        alg = _algorithm(alg)
        if alg not in (ALG_PHILOX, 3):
            raise errors.UnimplementedError(f"random.Generator: algorithm {alg} is not "
                                            "supported; use Philox (1)")
        s = [0, 0, 0] if state is None else [int(x) & _U64 for x in state]
        if len(s) != 3:
            raise errors.InvalidArgumentError(f"random.Generator: a Philox state has 3 "
                                              f"entries, got {len(s)}")
        self._state = s
        self._lock = threading.Lock()
        self.algorithm = ALG_PHILOX

    @classmethod
    def from_seed(cls, seed: Any, alg: Any = ALG_PHILOX) -> "Generator":
        """A generator whose state is made from `seed` as TensorFlow makes
        it: an int fills the counter's low word; a list is right-aligned."""
        if isinstance(seed, (int, np.integer)):
            seed = int(seed)
            state = [seed & _U64, (seed >> 64) & _U64, (seed >> 128) & _U64]
        else:
            vals = [int(x) for x in np.asarray(seed).reshape(-1)][-3:]
            state = [0] * (3 - len(vals)) + vals
        return cls(state, alg)

    @classmethod
    def from_non_deterministic_state(cls, alg: Any = ALG_PHILOX) -> "Generator":
        """A generator seeded from the operating system's entropy."""
        return cls([int.from_bytes(os.urandom(8), "little") for _ in range(3)], alg)

    def reset_from_seed(self, seed: Any) -> None:
        with self._lock:
            self._state = Generator.from_seed(seed)._state

    @property
    def state(self) -> np.ndarray:
        """[counter_lo, counter_hi, key] as int64 (like TensorFlow's variable)."""
        return np.asarray(self._state, np.uint64).view(np.int64)

    def _take(self, n: int) -> tuple[int, tuple[int, int]]:
        """(key, counter) for `n` elements; advances the counter past them."""
        with self._lock:
            lo, hi, key = self._state
            total = lo + n * _SKIP_PER_ELEMENT  # a 128-bit counter
            self._state = [total & _U64, (hi + (total >> 64)) & _U64, key]
        return key, (lo, hi)

    def skip(self, delta: int) -> None:
        """Advances the state as drawing `delta` elements would."""
        self._take(int(delta))

    def _draw(self, op, shape: Any, dtype: dtypes.DType) -> Tensor:
        s = _shape(shape)
        key, (lo, hi) = self._take(int(np.prod(s, dtype=np.int64)))
        return op(shape=s, key=np.asarray([key], np.uint64),
                  counter=np.asarray([lo, hi], np.uint64), alg=np.int32(self.algorithm),
                  dtype=dtype)

    def normal(self, shape: Any, mean: Any = 0.0, stddev: Any = 1.0,
               dtype: Any = dtypes.float32, name: str | None = None) -> Tensor:
        """Normal samples (op StatelessRandomNormalV2)."""
        rnd = self._draw(raw_ops.StatelessRandomNormalV2, shape, _float_dtype(dtype))
        return _scaled(rnd, stddev, mean)

    def truncated_normal(self, shape: Any, mean: Any = 0.0, stddev: Any = 1.0,
                         dtype: Any = dtypes.float32, name: str | None = None) -> Tensor:
        """Normal samples within two standard deviations of the mean (op
        StatelessTruncatedNormalV2)."""
        rnd = self._draw(raw_ops.StatelessTruncatedNormalV2, shape, _float_dtype(dtype))
        return _scaled(rnd, stddev, mean)

    def uniform(self, shape: Any, minval: Any = 0, maxval: Any = None,
                dtype: Any = dtypes.float32, name: str | None = None) -> Tensor:
        """Uniform samples in [minval, maxval) (maxval defaults to 1 for
        floats and is required for integers) (op StatelessRandomUniformV2;
        integers on the host, see the module docstring)."""
        dt = dtypes.as_dtype(dtype)
        if dt.is_integer:
            if maxval is None:
                raise errors.InvalidArgumentError("random.uniform: maxval is required for an "
                                                  f"integer dtype ({dt.name})")
            s = _shape(shape)
            n = int(np.prod(s, dtype=np.int64))
            key, counter = self._take(n)
            vals = _uniform_ints(key, counter, n, int(_value(minval)), int(_value(maxval)), dt)
            return constant(vals.reshape(tuple(int(d) for d in s)))
        rnd = self._draw(raw_ops.StatelessRandomUniformV2, shape, _float_dtype(dt))
        return _to_range(rnd, minval, maxval)

    def make_seeds(self, count: int = 1) -> np.ndarray:
        """[2, count] int64 seeds for the stateless functions (the second row
        is 0), as TensorFlow's make_seeds returns."""
        key, counter = self._take(count)
        words = philox.philox(key, counter, np.arange(-(-count // 2), dtype=np.uint64))
        w = words.astype(np.uint64).reshape(-1, 2)
        bits = (w[:, 0] | (w[:, 1] << np.uint64(32)))[:count].view(np.int64)
        return np.stack([bits, np.zeros_like(bits)])

    def split(self, count: int = 1) -> list["Generator"]:
        """`count` new generators seeded from this one."""
        seeds = self.make_seeds(count)
        return [Generator.from_seed(list(seeds[:, i])) for i in range(count)]


_global: list = [None]
_global_seed: list = [None]
_op_generators: dict = {}
_lock = threading.Lock()


def get_global_generator() -> Generator:
    """The generator that ``pg.random.normal`` and friends draw from."""
    with _lock:
        if _global[0] is None:
            _global[0] = Generator.from_non_deterministic_state()
        return _global[0]


def set_global_generator(generator: Generator) -> None:
    """Replaces the global generator."""
    with _lock:
        _global[0] = generator


def set_seed(seed: int) -> None:
    """Makes later draws reproducible: resets the global generator from
    `seed` and forgets the generators of op seeds."""
    with _lock:
        _global_seed[0] = int(seed)
        _global[0] = Generator.from_seed(int(seed))
        _op_generators.clear()


def _generator(seed: int | None) -> Generator:
    if seed is None:
        return get_global_generator()
    with _lock:
        g = _op_generators.get(int(seed))
        if g is None:
            gs = DEFAULT_GLOBAL_SEED if _global_seed[0] is None else _global_seed[0]
            key, (lo, hi) = philox.key_counter_from_seed((gs, int(seed)))
            g = _op_generators[int(seed)] = Generator([lo, hi, key])
        return g


def normal(shape: Any, mean: Any = 0.0, stddev: Any = 1.0, dtype: Any = dtypes.float32,
           seed: int | None = None, name: str | None = None) -> Tensor:
    """Normal samples from the global generator (or the op seed's)."""
    return _generator(seed).normal(shape, mean, stddev, dtype)


def uniform(shape: Any, minval: Any = 0, maxval: Any = None, dtype: Any = dtypes.float32,
            seed: int | None = None, name: str | None = None) -> Tensor:
    """Uniform samples in [minval, maxval) from the global generator (or the op seed's)."""
    return _generator(seed).uniform(shape, minval, maxval, dtype)


def truncated_normal(shape: Any, mean: Any = 0.0, stddev: Any = 1.0,
                     dtype: Any = dtypes.float32, seed: int | None = None,
                     name: str | None = None) -> Tensor:
    """Truncated normal samples from the global generator (or the op seed's)."""
    return _generator(seed).truncated_normal(shape, mean, stddev, dtype)


# -------------------------------------------------------------- stateless

def _stateless(seed: Any) -> tuple[int, tuple[int, int]]:
    s = np.asarray(seed.numpy() if isinstance(seed, Tensor) else seed).reshape(-1)
    if s.size != 2 or s.dtype.kind not in "iu":
        raise errors.InvalidArgumentError(f"stateless random: seed must be 2 integers, got "
                                          f"{seed!r}")
    return philox.key_counter_from_seed((int(s[0]), int(s[1])))


def _stateless_draw(op, shape: Any, seed: Any, dtype: dtypes.DType) -> Tensor:
    key, (lo, hi) = _stateless(seed)
    return op(shape=_shape(shape), key=np.asarray([key], np.uint64),
              counter=np.asarray([lo, hi], np.uint64), alg=np.int32(ALG_PHILOX), dtype=dtype)


def stateless_normal(shape: Any, seed: Any, mean: Any = 0.0, stddev: Any = 1.0,
                     dtype: Any = dtypes.float32, name: str | None = None) -> Tensor:
    """Normal samples determined by `seed` (2 ints) (op StatelessRandomNormalV2)."""
    rnd = _stateless_draw(raw_ops.StatelessRandomNormalV2, shape, seed, _float_dtype(dtype))
    return _scaled(rnd, stddev, mean)


def stateless_truncated_normal(shape: Any, seed: Any, mean: Any = 0.0, stddev: Any = 1.0,
                               dtype: Any = dtypes.float32, name: str | None = None) -> Tensor:
    """Truncated normal samples determined by `seed` (op StatelessTruncatedNormalV2)."""
    rnd = _stateless_draw(raw_ops.StatelessTruncatedNormalV2, shape, seed, _float_dtype(dtype))
    return _scaled(rnd, stddev, mean)


def stateless_uniform(shape: Any, seed: Any, minval: Any = 0, maxval: Any = None,
                      dtype: Any = dtypes.float32, name: str | None = None) -> Tensor:
    """Uniform samples in [minval, maxval) determined by `seed` (op
    StatelessRandomUniformV2; integers on the host)."""
    dt = dtypes.as_dtype(dtype)
    if dt.is_integer:
        if maxval is None:
            raise errors.InvalidArgumentError("stateless_uniform: maxval is required for an "
                                              f"integer dtype ({dt.name})")
        key, counter = _stateless(seed)
        s = _shape(shape)
        n = int(np.prod(s, dtype=np.int64))
        vals = _uniform_ints(key, counter, n, int(_value(minval)), int(_value(maxval)), dt)
        return constant(vals.reshape(tuple(int(d) for d in s)))
    rnd = _stateless_draw(raw_ops.StatelessRandomUniformV2, shape, seed, _float_dtype(dt))
    return _to_range(rnd, minval, maxval)
