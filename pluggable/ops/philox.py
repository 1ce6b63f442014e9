"""Philox4x32-10 and TensorFlow's distributions over it, in numpy.

TensorFlow's stateless random ops (alg 1 = Philox) fill the output in
groups: group g of uniform and normal samples comes from Philox call g
(the 128-bit counter plus g), each call giving four 32-bit words; a group
of truncated normal samples starts at counter + 256 * g and takes words
until it has accepted enough samples. Floats are made from the low
mantissa bits of each word, normals by Box-Muller. These functions
reproduce that bit for bit (float32 normals use the C library's logf,
sinf and cosf where their rounding matters, as TensorFlow does on Linux).
"""
from __future__ import annotations

import ctypes

import numpy as np

_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_W0, _W1 = 0x9E3779B9, 0xBB67AE85
_MASK32 = np.uint64(0xFFFFFFFF)
_32 = np.uint64(32)
TRUNCATE = 2.0         # truncated normal: |x| < 2
_SKIP_PER_GROUP = 256  # words reserved per truncated-normal sample (Philox calls: x per/4)


def philox(key: int, counter: tuple[int, int], offsets: np.ndarray) -> np.ndarray:
    """[len(offsets), 4] uint32: Philox4x32-10 of (counter + offset, key)."""
    off = np.asarray(offsets, np.uint64).reshape(-1)
    lo = np.uint64(counter[0] & 0xFFFFFFFFFFFFFFFF) + off
    carry = (lo < off).astype(np.uint64)
    hi = np.uint64(counter[1] & 0xFFFFFFFFFFFFFFFF) + carry
    c = [lo & _MASK32, lo >> _32, hi & _MASK32, hi >> _32]
    k0, k1 = key & 0xFFFFFFFF, (key >> 32) & 0xFFFFFFFF
    for r in range(10):
        p0 = _M0 * c[0]
        p1 = _M1 * c[2]
        c = [(p1 >> _32) ^ c[1] ^ np.uint64(k0), p1 & _MASK32,
             (p0 >> _32) ^ c[3] ^ np.uint64(k1), p0 & _MASK32]
        k0, k1 = (k0 + _W0) & 0xFFFFFFFF, (k1 + _W1) & 0xFFFFFFFF
    return np.stack(c, axis=-1).astype(np.uint32)


# ------------------------------------------------------------ bits -> floats

def _uniform_from(words: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """[0, 1) values of `dtype` from uint32 words (two words per double)."""
    if dtype == np.float64:
        w = words.reshape(-1, 2).astype(np.uint64)
        bits = (((w[:, 0] << _32) | w[:, 1]) & np.uint64(0xFFFFFFFFFFFFF)) | \
            np.uint64(0x3FF0000000000000)
        return bits.view(np.float64) - 1.0
    if dtype == np.float32:
        bits = (words & np.uint32(0x7FFFFF)) | np.uint32(0x3F800000)
        return bits.view(np.float32) - np.float32(1.0)
    if dtype == np.float16:
        bits = ((words & np.uint32(0x3FF)) | np.uint32(0x3C00)).astype(np.uint16)
        return bits.view(np.float16) - np.float16(1.0)
    bits = ((words & np.uint32(0x7F)) | np.uint32(0x3F80)).astype(np.uint16)  # bfloat16
    return bits.view(dtype) - dtype.type(1.0)


def _libm_float(libm, name: str):
    """The C library's float function `name` (logf, sinf, cosf), or None."""
    try:
        fn = getattr(libm, name)
    except AttributeError:
        return None
    fn.restype, fn.argtypes = ctypes.c_float, [ctypes.c_float]
    return fn


_LIBM: dict = {}  # name -> the C library's function or None, looked up at first use


def _libm(name: str):
    """The C library's float function `name`, or None. The library is found
    at the first call (find_library runs a subprocess), not at import."""
    if not _LIBM:
        import ctypes.util
        try:
            libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
        except OSError:
            libm = None
        found = {n: _libm_float(libm, n) if libm is not None else None
                 for n in ("logf", "sinf", "cosf")}
        _LIBM.update(found)  # all at once: other threads see none or all
    return _LIBM[name]


def _float_fn(name: str, x: np.ndarray) -> np.ndarray:
    """float32 log/sin/cos as the C library computes them (TensorFlow's
    kernels call it): float64 rounded to float32, except where the float64
    value lies so near the middle of two floats that the library (accurate
    to about 0.52-0.56 ulp) may round the other way; those few are asked of
    the library itself."""
    r = getattr(np, name[:-1])(x.astype(np.float64))
    f = r.astype(np.float32)
    fn = _libm(name)
    if fn is not None and f.size:
        ulp = np.spacing(np.abs(f)).astype(np.float64)
        near = np.flatnonzero(np.abs(r - f.astype(np.float64)) > 0.43 * ulp)
        flat = f.reshape(-1)
        xs = x.reshape(-1)
        for i in near:
            flat[i] = fn(float(xs[i]))
    return f


def _box_muller_float(x0: np.ndarray, x1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """TensorFlow's BoxMullerFloat on word pairs: two float32 normals each."""
    u1 = _uniform_from(x0, np.dtype(np.float32))
    u1 = np.maximum(u1, np.float32(1.0e-7))
    v1 = (2.0 * np.pi * _uniform_from(x1, np.dtype(np.float32)).astype(np.float64)) \
        .astype(np.float32)
    u2 = np.sqrt(np.float32(-2.0) * _float_fn("logf", u1))
    return _float_fn("sinf", v1) * u2, _float_fn("cosf", v1) * u2


def _box_muller_double(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """TensorFlow's BoxMullerDouble on groups of four words."""
    d = _uniform_from(x.reshape(-1), np.dtype(np.float64)).reshape(-1, 2)
    u1 = np.maximum(d[:, 0], 1.0e-7)
    v1 = 2.0 * np.pi * d[:, 1]
    u2 = np.sqrt(-2.0 * np.log(u1))
    return np.sin(v1) * u2, np.cos(v1) * u2


def _per_call(dtype: np.dtype) -> int:
    return 2 if dtype == np.float64 else 4


def uniform(key: int, counter: tuple[int, int], n: int, dtype: np.dtype) -> np.ndarray:
    """n samples of StatelessRandomUniformV2 (Philox) in [0, 1)."""
    per = _per_call(dtype)
    calls = -(-n // per)
    words = philox(key, counter, np.arange(calls, dtype=np.uint64))
    return _uniform_from(words.reshape(-1), dtype)[:n]


def normal(key: int, counter: tuple[int, int], n: int, dtype: np.dtype) -> np.ndarray:
    """n samples of StatelessRandomNormalV2 (Philox)."""
    per = _per_call(dtype)
    calls = -(-n // per)
    words = philox(key, counter, np.arange(calls, dtype=np.uint64))
    if dtype == np.float64:
        a, b = _box_muller_double(words)
        return np.stack([a, b], axis=-1).reshape(-1)[:n]
    a, b = _box_muller_float(words[:, 0::2].reshape(-1), words[:, 1::2].reshape(-1))
    return np.stack([a, b], axis=-1).reshape(-1)[:n].astype(dtype)


def truncated_normal(key: int, counter: tuple[int, int], n: int,
                     dtype: np.dtype) -> np.ndarray:
    """n samples of StatelessTruncatedNormalV2 (Philox): normals with
    |x| >= 2 rejected, each group drawing from its own reserved counters."""
    per = _per_call(dtype)
    groups = -(-n // per)
    out = np.empty((groups, per), np.float64 if dtype == np.float64 else np.float32)
    todo = np.arange(groups)
    start = np.zeros(groups, np.int64)   # Philox calls already used by each group
    have = np.zeros(groups, np.int64)    # samples accepted so far
    calls = 2                            # enough for nearly every group at once
    while todo.size:
        base = todo.astype(np.uint64) * np.uint64(per * _SKIP_PER_GROUP // 4)
        offs = (base[:, None] + start[todo].astype(np.uint64)[:, None]
                + np.arange(calls, dtype=np.uint64)[None, :])
        words = philox(key, counter, offs.reshape(-1)).reshape(todo.size, calls * 4)
        if dtype == np.float64:
            a, b = _box_muller_double(words.reshape(-1, 4))
        else:
            a, b = _box_muller_float(words[:, 0::2].reshape(-1), words[:, 1::2].reshape(-1))
        cand = np.stack([a, b], axis=-1).reshape(todo.size, -1)
        ok = np.abs(cand) < TRUNCATE
        rank = np.cumsum(ok, axis=1) + have[todo][:, None]  # 1-based slot of each accepted one
        rows, cols = np.nonzero(ok & (rank <= per))
        out[todo[rows], rank[rows, cols] - 1] = cand[rows, cols]
        have[todo] = np.minimum(rank[:, -1], per)
        start[todo] += calls
        todo = todo[have[todo] < per]
    return out.reshape(-1)[:n].astype(dtype)


# ---------------------------------------------------- seeds and key/counter

def key_counter_from_seed(seed: tuple[int, int]) -> tuple[int, tuple[int, int]]:
    """TensorFlow's StatelessRandomGetKeyCounter for Philox: the key and
    counter that stateless_* ops derive from a seed pair."""
    s0, s1 = (int(s) & 0xFFFFFFFF for s in seed)  # each seed is used as a uint32
    mixed = philox(0x02461E29_3EC8F720, (s0, s1), np.zeros(1, np.uint64))[0].astype(np.uint64)
    key = int(mixed[0]) | (int(mixed[1]) << 32)
    counter_hi = int(mixed[2]) | (int(mixed[3]) << 32)
    return key, (0, counter_hi)
