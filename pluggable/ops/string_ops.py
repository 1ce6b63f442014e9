"""The string ops (TensorFlow's ``StringLength``, ``Substr``,
``StringSplitV2``, ``UnicodeDecode``, ...) and their CPU kernels. Strings
live on the host (as in TensorFlow, whose string kernels are CPU kernels):
each kernel works on numpy arrays of ``bytes``. The user functions over
them, some of which return ragged tensors, are ``pluggable.strings``."""
from __future__ import annotations

import re
from typing import Any

import numpy as np

from ..framework import dtypes, errors
from ..framework.registry import KernelDef, OPS, register_kernel
from .logging_ops import _array as _format_array
from .op_util import define, err, sample

_ENCODINGS = {"UTF-8": "utf-8", "UTF-16-BE": "utf-16-be", "UTF-32-BE": "utf-32-be"}
_UNIT = "unit: {'BYTE', 'UTF8_CHAR'} = 'BYTE'"
_ERRORS = "errors: {'strict', 'replace', 'ignore'} = 'replace'"
_SPLITS = "Tsplits: {int32, int64} = DT_INT64"
_NUMBERS = "{float, double, int32, int64, uint32, uint64}"
_AS_STRING = "{float, double, int32, uint8, int16, int8, int64, bfloat16, half, uint32, " \
             "uint64, bool, string}"


def _strings(shape) -> np.ndarray:
    return np.empty(shape, object)


def _map(fn, a: np.ndarray) -> np.ndarray:
    out = _strings(a.shape)
    out.flat[:] = [fn(s) for s in a.flat]
    return out


# ---------------------------------------------------------------- elementwise

def _utf8_len(s: bytes) -> int:
    return sum(1 for c in s if c & 0xC0 != 0x80)


def _string_length(ins, attrs):
    count = len if attrs["unit"] == "BYTE" else _utf8_len
    a = ins[0]
    return [np.fromiter((count(s) for s in a.flat), np.int32, a.size).reshape(a.shape)]


def _substr(ins, attrs):
    a, pos, length = ins
    try:
        shape = np.broadcast_shapes(a.shape, pos.shape, length.shape)
    except ValueError:
        raise err("Substr", f"input, pos and len must broadcast, got shapes {list(a.shape)}, "
                  f"{list(pos.shape)} and {list(length.shape)}") from None
    a, pos, length = (np.broadcast_to(x, shape) for x in (a, pos, length))
    chars = attrs["unit"] == "UTF8_CHAR"
    out = _strings(shape)
    for i, (s, p, n) in enumerate(zip(a.flat, pos.flat, length.flat)):
        text = s.decode("utf-8", "surrogateescape") if chars else s
        size, p, n = len(text), int(p), int(n)
        start = p + size if p < 0 else p
        if not 0 <= start <= size:
            raise err("Substr", f"pos {p} out of range for string b'{s.decode('latin-1')}' "
                      f"at index {i}")
        piece = text[start:start + max(n, 0)]
        out.flat[i] = piece.encode("utf-8", "surrogateescape") if chars else piece
    return [out]


def _case(upper: bool):
    def kernel(ins, attrs):
        enc = attrs["encoding"]
        if enc == "":
            return [_map(bytes.upper if upper else bytes.lower, ins[0])]
        if enc.lower().replace("-", "") != "utf8":
            raise err("StringUpper" if upper else "StringLower",
                      f"encoding {enc!r} is not supported; use '' (ASCII) or 'utf-8'")
        fn = str.upper if upper else str.lower
        return [_map(lambda s: fn(s.decode("utf-8", "replace")).encode("utf-8"), ins[0])]
    return kernel


def _compile(op: str, pattern: bytes):
    try:
        return re.compile(pattern)
    except re.error as e:
        raise err(op, f"invalid pattern {pattern!r}: {e}") from None


_GROUP = re.compile(rb"\\(\d)")


def _replace(op: str, a: np.ndarray, pattern: bytes, rewrite: bytes, glob: bool) -> np.ndarray:
    rx = _compile(op, pattern)
    rewrite = _GROUP.sub(rb"\\g<\1>", rewrite)  # RE2's \0 .. \9
    return _map(lambda s: rx.sub(rewrite, s, count=0 if glob else 1), a)


def _regex_replace(ins, attrs):
    a, pattern, rewrite = ins
    return [_replace("RegexReplace", a, pattern.item(), rewrite.item(), attrs["replace_global"])]


def _static_regex_replace(ins, attrs):
    enc = lambda s: s.encode() if isinstance(s, str) else s
    return [_replace("StaticRegexReplace", ins[0], enc(attrs["pattern"]), enc(attrs["rewrite"]),
                     attrs["replace_global"])]


def _string_to_number(ins, attrs):
    dt = dtypes.as_dtype(attrs["out_type"])
    npdt = dt.as_numpy_dtype
    a = ins[0]
    out = np.empty(a.shape, npdt)
    for i, s in enumerate(a.flat):
        try:
            text = s.decode("ascii").strip()
            v = float(text) if dt.is_floating else int(text, 10)
            if dt.is_integer and not np.iinfo(npdt).min <= v <= np.iinfo(npdt).max:
                raise ValueError
        except (ValueError, UnicodeDecodeError):
            raise err("StringToNumber", "StringToNumberOp could not correctly convert string: "
                      f"{s.decode('latin-1')}") from None
        out.flat[i] = v
    return [out]


def _as_string(ins, attrs):
    a = ins[0]
    prec, width, fill = attrs["precision"], attrs["width"], attrs["fill"]
    if isinstance(fill, bytes):
        fill = fill.decode()
    if len(fill) > 1:
        raise err("AsString", f"fill must be at most one character, got {fill!r}")
    if a.dtype.kind == "f" or a.dtype.name == "bfloat16":
        a = a.astype(np.float64)
        code = "g" if attrs["shortest"] else "e" if attrs["scientific"] else "f"
        spec = f".{prec}{code}" if prec >= 0 else code
    elif attrs["shortest"] or attrs["scientific"] or prec >= 0:
        raise err("AsString", "precision, scientific and shortest apply to floats only")
    else:
        spec = ""

    def text(v):
        if a.dtype == np.bool_:
            t = "true" if v else "false"
        elif a.dtype == object:
            t = v.decode("utf-8", "replace")
        else:
            t = format(v.item() if hasattr(v, "item") else v, spec)
        if width > len(t):
            pad = fill or " "
            t = (t[0] + t[1:].rjust(width - 1, "0")) if pad == "0" and t[:1] == "-" \
                else t.rjust(width, pad)
        return t.encode()
    return [_map(text, a)]


def _join(op: str, arrays: list, sep: bytes) -> np.ndarray:
    try:
        shape = np.broadcast_shapes(*(x.shape for x in arrays))
    except ValueError:
        raise err(op, "inputs must be scalars or have the same shape, got shapes "
                  f"{[list(x.shape) for x in arrays]}") from None
    arrays = [np.broadcast_to(x, shape) for x in arrays]
    out = _strings(shape)
    out.flat[:] = [sep.join(parts) for parts in zip(*(x.flat for x in arrays))]
    return out


def _sep(attrs, name="separator") -> bytes:
    s = attrs[name]
    return s.encode() if isinstance(s, str) else s


def _string_join(ins, attrs):
    return [_join("StringJoin", list(ins), _sep(attrs))]


def _reduce_join(ins, attrs):
    a, axes = ins
    rank = a.ndim
    axes = [int(x) for x in np.asarray(axes).reshape(-1)]
    for x in axes:
        if not -rank <= x < rank:
            raise errors.OutOfRangeError(f"ReduceJoin: Invalid reduction dimension {x} for "
                                         f"input with {rank} dimension(s)", op="ReduceJoin")
    axes = [x % rank for x in axes]
    for i, x in enumerate(axes):
        if x in axes[:i]:
            raise err("ReduceJoin", f"Duplicate reduction dimension {x}")
    keep = [d for d in range(rank) if d not in axes]
    # the axes reduce in the order given: the first one varies fastest
    moved = np.transpose(a, keep + axes[::-1]).reshape([a.shape[d] for d in keep] + [-1])
    sep = _sep(attrs)
    out = _strings(moved.shape[:-1])
    out.flat[:] = [sep.join(row) for row in moved.reshape(-1, moved.shape[-1])]
    if attrs["keep_dims"]:
        out = out.reshape([1 if d in axes else a.shape[d] for d in range(rank)])
    return [out]


def _to_hash_bucket_fast(ins, attrs):
    a, n = ins[0], attrs["num_buckets"]
    return [np.fromiter((fingerprint64(s) % n for s in a.flat), np.int64, a.size)
            .reshape(a.shape)]


def _string_format(ins, attrs):
    template, ph = attrs["template"], attrs["placeholder"]
    parts = template.split(ph)
    if len(parts) - 1 != len(ins):
        raise err("StringFormat", f"{len(parts) - 1} placeholder(s) in template {template!r} "
                  f"do not match the {len(ins)} input tensor(s)")
    out = parts[0]
    for a, tail in zip(ins, parts[1:]):
        out += _format_tensor(a, attrs["summarize"]) + tail
    return [np.array(out.encode(), object)]


def _format_tensor(a: np.ndarray, summarize: int) -> str:
    if a.dtype == object:
        b = np.vectorize(lambda s: '"' + s.decode("utf-8", "replace") + '"', otypes=[object])(a)
        return str(b.item()) if a.ndim == 0 else _format_array(np.array(b, dtype="U"),
                                                               summarize, 0)
    return _format_array(a, summarize, 0)


def _decode_raw(ins, attrs):
    a = ins[0]
    dt = dtypes.as_dtype(attrs["out_type"]).as_numpy_dtype
    npdt = np.dtype(dt).newbyteorder("<" if attrs["little_endian"] else ">")
    sizes = {len(s) for s in a.flat}
    if len(sizes) > 1:
        raise err("DecodeRaw", f"DecodeRaw requires input strings to all be the same size, "
                  f"but element 0 has size {len(a.flat[0])} != {sorted(sizes)[-1]}")
    size = sizes.pop() if sizes else 0
    if size % npdt.itemsize:
        raise err("DecodeRaw", f"Input to DecodeRaw has length {size} that is not a multiple "
                  f"of {npdt.itemsize}, the size of {dtypes.as_dtype(attrs['out_type']).name}")
    n = size // npdt.itemsize
    out = np.frombuffer(b"".join(a.flat), npdt).astype(dt) if a.size else np.zeros(0, dt)
    return [out.reshape(a.shape + (n,))]


_MAX_PARSED_BYTES = 1 << 31   # as a serialised TensorProto itself: below 2 GiB


def _serialize_tensor(ins, attrs):
    """The TensorProto of the tensor, as TensorFlow's SerializeTensor writes
    it: dtype, shape and the elements (raw little-endian bytes for numbers
    and bools, string_val for strings)."""
    from ..framework.proto import tensors as tensor_protos
    a = ins[0]
    dt = dtypes.as_dtype(attrs["T"])
    proto = tensor_protos.messages().TensorProto(
        dtype=dt.enum, tensor_shape=tensor_protos.to_shape_proto(a.shape))
    if dt is dtypes.string:
        proto.string_val.extend(list(a.reshape(-1)))
    elif a.size:
        proto.tensor_content = np.ascontiguousarray(a).astype(
            a.dtype.newbyteorder("<"), copy=False).tobytes()
    out = np.empty((), object)
    out[()] = proto.SerializeToString()
    return [out]


def _parse_tensor(ins, attrs):
    from ..framework.proto import tensors as tensor_protos
    from google.protobuf.message import DecodeError
    data = ins[0]
    if data.ndim != 0:
        raise err("ParseTensor", f"serialized must be a scalar string, got shape "
                  f"{list(data.shape)}")
    proto = tensor_protos.messages().TensorProto()
    try:
        proto.ParseFromString(bytes(data.item()))
    except (DecodeError, RuntimeWarning, ValueError) as exc:
        raise err("ParseTensor", f"Could not parse `serialized` as TensorProto: {exc}") \
            from None
    want = dtypes.as_dtype(attrs["out_type"])
    got = tensor_protos.from_datatype(proto.dtype) if proto.dtype else None
    if got is not want:
        name = got.name if got is not None else "an invalid dtype"
        raise err("ParseTensor", f"Type mismatch between parsed tensor ({name}) and dtype "
                  f"({want.name})")
    shape = tensor_protos.from_shape_proto(proto.tensor_shape)
    if shape is None or None in shape:
        raise err("ParseTensor", "the serialized TensorProto has no fully known shape")
    nbytes = int(np.prod(shape, dtype=np.float64)) * max(want.size, 1)
    if nbytes > _MAX_PARSED_BYTES:
        raise errors.ResourceExhaustedError(
            f"ParseTensor: the serialized tensor of shape {list(shape)} would take {nbytes} "
            f"bytes, more than the {_MAX_PARSED_BYTES} a parsed tensor may take")
    return [tensor_protos.from_tensor_proto(proto)]


def _ex_serialize(rng, types):
    t = types["T"]
    return [({"tensor": sample(rng, t, (2, 3))}, {}), ({"tensor": sample(rng, t, ())}, {})]


def _ex_parse(rng, types):
    return [({"serialized": np.array(b"\x08\x01\x12\x04\x12\x02\x08\x02\"\x08"
                                     b"\x00\x00\x80?\x00\x00\x00@", object)},
             {"out_type": dtypes.float32})]


# ---------------------------------------------------------------- splitting

def _string_split_v2(ins, attrs):
    a, sep = ins
    if a.ndim != 1:
        raise err("StringSplitV2", f"input must be a vector, got shape {list(a.shape)}")
    sep = sep.item()
    maxsplit = attrs["maxsplit"]
    rows = [s.split(None if sep == b"" else sep, maxsplit) for s in a]
    indices = [(r, c) for r, row in enumerate(rows) for c in range(len(row))]
    values = _strings(len(indices))
    values[:] = [p for row in rows for p in row]
    width = max((len(row) for row in rows), default=0)
    return [np.array(indices, np.int64).reshape(-1, 2), values,
            np.array([len(rows), width], np.int64)]


def _decoder(op: str, attrs) -> Any:
    enc = attrs["input_encoding"]
    codec = _ENCODINGS.get(enc.upper()) or _codec(op, enc)
    mode, repl = attrs["errors"], attrs["replacement_char"]
    control = attrs["replace_control_characters"]

    def decode(s: bytes) -> list[int]:
        try:
            text = s.decode(codec, "strict" if mode == "strict" else
                            "ignore" if mode == "ignore" else "replace")
        except UnicodeDecodeError as e:
            raise err(op, f"Invalid formatting on input string: {e}") from None
        cps = [repl if mode == "replace" and ord(ch) == 0xFFFD and repl != 0xFFFD
               else ord(ch) for ch in text]
        if control:
            cps = [repl if c < 0x20 else c for c in cps]
        return cps
    return decode, codec


def _codec(op: str, enc: str) -> str:
    import codecs
    try:
        return codecs.lookup(enc).name
    except LookupError:
        raise err(op, f"Could not create converter for input encoding: {enc}") from None


def _unicode_decode(offsets: bool):
    op = "UnicodeDecodeWithOffsets" if offsets else "UnicodeDecode"

    def kernel(ins, attrs):
        decode, codec = _decoder(op, attrs)
        rows = [decode(s) for s in ins[0].flat]
        split_t = dtypes.as_dtype(attrs["Tsplits"]).as_numpy_dtype
        splits = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(split_t)
        chars = np.array([c for r in rows for c in r], np.int32)
        outs = [splits, chars]
        if offsets:
            starts = []
            for s, row in zip(ins[0].flat, rows):
                pos = 0
                for c in row:
                    starts.append(pos)
                    pos += len(chr(c).encode(codec, "surrogatepass")) if c < 0x110000 else 1
            outs.append(np.array(starts, np.int64))
        return outs
    return kernel


def _encode(codepoints, codec: str, mode: str, repl: int, op: str) -> bytes:
    out = []
    for c in codepoints:
        c = int(c)
        if not (0 <= c < 0x110000) or 0xD800 <= c < 0xE000:
            if mode == "strict":
                raise err(op, f"code point {c} is not a valid Unicode scalar value")
            if mode == "ignore":
                continue
            c = repl
        out.append(chr(c))
    return "".join(out).encode(codec)


def _unicode_encode(ins, attrs):
    values, splits = ins
    codec = _ENCODINGS[attrs["output_encoding"]]
    splits = [int(x) for x in splits]
    if not splits or splits[0] != 0 or splits[-1] != len(values) \
            or any(b < a for a, b in zip(splits, splits[1:])):
        raise err("UnicodeEncode", "input_splits must start at 0, not decrease and end at the "
                  f"number of input_values ({len(values)}), got {splits}")
    out = _strings(len(splits) - 1)
    out[:] = [_encode(values[a:b], codec, attrs["errors"], attrs["replacement_char"],
                      "UnicodeEncode") for a, b in zip(splits, splits[1:])]
    return [out]


def _unicode_transcode(ins, attrs):
    decode, _ = _decoder("UnicodeTranscode", attrs)
    codec = _ENCODINGS[attrs["output_encoding"]]
    return [_map(lambda s: _encode(decode(s), codec, "replace", attrs["replacement_char"],
                                   "UnicodeTranscode"), ins[0])]


# ---------------------------------------------------------------- fingerprint

_M64 = (1 << 64) - 1
_K0, _K1, _K2 = 0xc3a5c85c97cb3127, 0xb492b66fbe98f273, 0x9ae16a3b2f90404f


def _f64(s: bytes, i: int) -> int:
    return int.from_bytes(s[i:i + 8], "little")


def _f32(s: bytes, i: int) -> int:
    return int.from_bytes(s[i:i + 4], "little")


def _rot(v: int, r: int) -> int:
    return ((v >> r) | (v << (64 - r))) & _M64 if r else v


def _mix(v: int) -> int:
    return v ^ (v >> 47)


def _len16(u: int, v: int, mul: int) -> int:
    a = ((u ^ v) * mul) & _M64
    a ^= a >> 47
    b = ((v ^ a) * mul) & _M64
    b ^= b >> 47
    return (b * mul) & _M64


def _len0to16(s: bytes) -> int:
    n = len(s)
    if n >= 8:
        mul = _K2 + n * 2
        a = (_f64(s, 0) + _K2) & _M64
        b = _f64(s, n - 8)
        c = (_rot(b, 37) * mul + a) & _M64
        d = ((_rot(a, 25) + b) * mul) & _M64
        return _len16(c, d, mul)
    if n >= 4:
        mul = _K2 + n * 2
        return _len16((n + (_f32(s, 0) << 3)) & _M64, _f32(s, n - 4), mul)
    if n > 0:
        y = (s[0] + (s[n >> 1] << 8)) & 0xFFFFFFFF
        z = (n + (s[n - 1] << 2)) & 0xFFFFFFFF
        return (_mix(((y * _K2) ^ (z * _K0)) & _M64) * _K2) & _M64
    return _K2


def _len17to32(s: bytes) -> int:
    n = len(s)
    mul = _K2 + n * 2
    a = (_f64(s, 0) * _K1) & _M64
    b = _f64(s, 8)
    c = (_f64(s, n - 8) * mul) & _M64
    d = (_f64(s, n - 16) * _K2) & _M64
    return _len16((_rot((a + b) & _M64, 43) + _rot(c, 30) + d) & _M64,
                  (a + _rot((b + _K2) & _M64, 18) + c) & _M64, mul)


def _len33to64(s: bytes) -> int:
    n = len(s)
    mul = _K2 + n * 2
    a = (_f64(s, 0) * _K2) & _M64
    b = _f64(s, 8)
    c = (_f64(s, n - 8) * mul) & _M64
    d = (_f64(s, n - 16) * _K2) & _M64
    y = (_rot((a + b) & _M64, 43) + _rot(c, 30) + d) & _M64
    z = _len16(y, (a + _rot((b + _K2) & _M64, 18) + c) & _M64, mul)
    e = (_f64(s, 16) * mul) & _M64
    f = _f64(s, 24)
    g = ((y + _f64(s, n - 32)) * mul) & _M64
    h = ((z + _f64(s, n - 24)) * mul) & _M64
    return _len16((_rot((e + f) & _M64, 43) + _rot(g, 30) + h) & _M64,
                  (e + _rot((f + a) & _M64, 18) + g) & _M64, mul)


def _weak32(s: bytes, i: int, a: int, b: int) -> tuple[int, int]:
    w, x, y, z = _f64(s, i), _f64(s, i + 8), _f64(s, i + 16), _f64(s, i + 24)
    a = (a + w) & _M64
    b = _rot((b + a + z) & _M64, 21)
    c = a
    a = (a + x + y) & _M64
    b = (b + _rot(a, 44)) & _M64
    return (a + z) & _M64, (b + c) & _M64


def fingerprint64(s: bytes) -> int:
    """TensorFlow's ``Fingerprint64`` of `s` (FarmHash's 64-bit fingerprint),
    the hash of ``StringToHashBucketFast``."""
    n = len(s)
    if n <= 16:
        return _len0to16(s)
    if n <= 32:
        return _len17to32(s)
    if n <= 64:
        return _len33to64(s)
    seed = 81
    x = seed
    y = (seed * _K1 + 113) & _M64
    z = (_mix((y * _K2 + 113) & _M64) * _K2) & _M64
    v = (0, 0)
    w = (0, 0)
    x = (x * _K2 + _f64(s, 0)) & _M64
    end = ((n - 1) // 64) * 64
    last64 = end + ((n - 1) & 63) - 63
    i = 0
    while True:
        x = (_rot((x + y + v[0] + _f64(s, i + 8)) & _M64, 37) * _K1) & _M64
        y = (_rot((y + v[1] + _f64(s, i + 48)) & _M64, 42) * _K1) & _M64
        x ^= w[1]
        y = (y + v[0] + _f64(s, i + 40)) & _M64
        z = (_rot((z + w[0]) & _M64, 33) * _K1) & _M64
        v = _weak32(s, i, (v[1] * _K1) & _M64, (x + w[0]) & _M64)
        w = _weak32(s, i + 32, (z + w[1]) & _M64, (y + _f64(s, i + 16)) & _M64)
        z, x = x, z
        i += 64
        if i == end:
            break
    mul = _K1 + ((z & 0xFF) << 1)
    i = last64
    w = ((w[0] + ((n - 1) & 63)) & _M64, w[1])
    v = ((v[0] + w[0]) & _M64, v[1])
    w = ((w[0] + v[0]) & _M64, w[1])
    x = (_rot((x + y + v[0] + _f64(s, i + 8)) & _M64, 37) * mul) & _M64
    y = (_rot((y + v[1] + _f64(s, i + 48)) & _M64, 42) * mul) & _M64
    x ^= (w[1] * 9) & _M64
    y = (y + v[0] * 9 + _f64(s, i + 40)) & _M64
    z = (_rot((z + w[0]) & _M64, 33) * mul) & _M64
    v = _weak32(s, i, (v[1] * mul) & _M64, (x + w[0]) & _M64)
    w = _weak32(s, i + 32, (z + w[1]) & _M64, (y + _f64(s, i + 16)) & _M64)
    z, x = x, z
    return _len16((_len16(v[0], w[0], mul) + _mix(y) * _K0 + z) & _M64,
                  (_len16(v[1], w[1], mul) + x) & _M64, mul)


# ---------------------------------------------------------------- definitions

def _same(shapes, attrs, values):
    return [shapes[0]]


def _broadcast(op: str, n: int | None = None):
    def shape_fn(shapes, attrs, values):
        known = [s for s in shapes[:n] if s is not None]
        if len(known) < len(shapes[:n]):
            return [None]
        try:
            return [tuple(np.broadcast_shapes(*[tuple(0 if d is None else d for d in s)
                                               for s in known]))]
        except ValueError:
            raise err(op, f"inputs must broadcast, got shapes {[list(s) for s in known]}") \
                from None
    return shape_fn


def _decode_raw_shape(shapes, attrs, values):
    return [None if shapes[0] is None else tuple(shapes[0]) + (None,)]


def _scalar(shapes, attrs, values):
    return [()]


def _unknown(shapes, attrs, values):
    return [None]


def _reduce_join_shape(shapes, attrs, values):
    return [None]


def _split_shapes(shapes, attrs, values):
    return [(None, 2), (None,), (2,)]


def _decode_shapes(offsets: bool):
    def fn(shapes, attrs, values):
        return [(None,), (None,)] + ([(None,)] if offsets else [])
    return fn


def _encode_shape(shapes, attrs, values):
    for name, s in zip(("input_values", "input_splits"), shapes):
        if s is not None and len(s) != 1:
            raise err("UnicodeEncode", f"{name} must be a vector, got shape {list(s)}")
    return [(None if shapes[1] is None or shapes[1][0] is None else shapes[1][0] - 1,)]


def _words(rng, shape):
    return sample(rng, dtypes.string, shape)


def _ex_strings(rng, types):
    return [({"input": _words(rng, s)}, {}) for s in ((2, 3), (), (0,))]


def _ex_length(rng, types):
    uni = np.array([b"caf\xc3\xa9", b"\xf0\x9f\xa6\x86", b""], object)
    return [({"input": _words(rng, (2, 3))}, {}), ({"input": uni}, {"unit": "UTF8_CHAR"})]


def _ex_substr(rng, types):
    t = types["T"].as_numpy_dtype
    return [({"input": np.array([b"hello", b"world!"], object), "pos": np.array([1, -3], t),
              "len": np.array([3, 9], t)}, {}),
            ({"input": np.array(b"caf\xc3\xa9", object), "pos": np.array(2, t),
              "len": np.array(2, t)}, {"unit": "UTF8_CHAR"})]


def _ex_regex(rng, types):
    return [({"input": _words(rng, (4,)), "pattern": np.array(b"[aeiou]", object),
              "rewrite": np.array(b"<\\0>", object)}, {}),
            ({"input": _words(rng, (2, 2)), "pattern": np.array(b"a", object),
              "rewrite": np.array(b"", object)}, {"replace_global": False})]


def _ex_static_regex(rng, types):
    return [({"input": _words(rng, (4,))}, {"pattern": "[aeiou]", "rewrite": "_"})]


def _ex_to_number(rng, types):
    t = types["out_type"]
    vals = sample(rng, t, (2, 3))
    return [({"string_tensor": _map(lambda v: str(v).encode(), vals)}, {"out_type": t})]


def _ex_as_string(rng, types):
    t = types["T"]
    return [({"input": sample(rng, t, (2, 3))}, {"T": t}), ({"input": sample(rng, t, ())}, {})]


def _ex_join(rng, types):
    return [({"inputs": [_words(rng, (3,)), _words(rng, (3,)), np.array(b"!", object)]},
             {"separator": "-"}),
            ({"inputs": [_words(rng, (2, 2))]}, {})]


def _ex_reduce_join(rng, types):
    a = _words(rng, (2, 3))
    return [({"inputs": a, "reduction_indices": np.array([1], np.int32)}, {"separator": " "}),
            ({"inputs": a, "reduction_indices": np.array([0, 1], np.int32)},
             {"keep_dims": True})]


def _ex_hash(rng, types):
    return [({"input": _words(rng, (2, 3))}, {"num_buckets": 7})]


def _ex_decode_raw(rng, types):
    t = types["out_type"]
    a = sample(rng, t, (3, 4))
    return [({"bytes": _map(lambda i: a[i].tobytes(), np.arange(3))}, {"out_type": t}),
            ({"bytes": np.array(a[0].astype(a.dtype.newbyteorder(">")).tobytes(), object)},
             {"out_type": t, "little_endian": False})]


def _ex_format(rng, types):
    return [({"inputs": [sample(rng, dtypes.float32, (4,)), sample(rng, dtypes.int32, ())]},
             {"template": "x={} n={}", "placeholder": "{}"})]


def _ex_split(rng, types):
    text = np.array([b"a b  c", b"", b"hello world"], object)
    return [({"input": text, "sep": np.array(b"", object)}, {}),
            ({"input": text, "sep": np.array(b" ", object)}, {"maxsplit": 1})]


def _ex_decode(rng, types):
    text = np.array([b"caf\xc3\xa9", b"\xf0\x9f\xa6\x86 x", b"bad\xff"], object)
    return [({"input": text}, {"input_encoding": "UTF-8"}),
            ({"input": text}, {"input_encoding": "UTF-8", "errors": "ignore",
                               "Tsplits": dtypes.int32})]


def _ex_encode(rng, types):
    return [({"input_values": np.array([99, 97, 102, 233, 129414], np.int32),
              "input_splits": np.array([0, 4, 5], np.int64)}, {"output_encoding": "UTF-8"}),
            ({"input_values": np.array([72, 105], np.int32),
              "input_splits": np.array([0, 1, 2], np.int64)}, {"output_encoding": "UTF-16-BE"})]


def _ex_transcode(rng, types):
    text = np.array([b"caf\xc3\xa9", b"\xf0\x9f\xa6\x86"], object)
    return [({"input": text}, {"input_encoding": "UTF-8", "output_encoding": "UTF-16-BE"})]


_DECODE_ATTRS = ["input_encoding: string", _ERRORS, "replacement_char: int = 65533",
                 "replace_control_characters: bool = false", _SPLITS]

_OPS = [
    ("StringLength", ["input: string"], ["output: int32"], [_UNIT], _same, _ex_length,
     _string_length),
    ("Substr", ["input: string", "pos: T", "len: T"], ["output: string"],
     ["T: {int32, int64}", _UNIT], _broadcast("Substr"), _ex_substr, _substr),
    ("StringUpper", ["input: string"], ["output: string"], ["encoding: string = ''"], _same,
     _ex_strings, _case(True)),
    ("StringLower", ["input: string"], ["output: string"], ["encoding: string = ''"], _same,
     _ex_strings, _case(False)),
    ("RegexReplace", ["input: string", "pattern: string", "rewrite: string"],
     ["output: string"], ["replace_global: bool = true"], _same, _ex_regex, _regex_replace),
    ("StaticRegexReplace", ["input: string"], ["output: string"],
     ["pattern: string", "rewrite: string", "replace_global: bool = true"], _same,
     _ex_static_regex, _static_regex_replace),
    ("StringToNumber", ["string_tensor: string"], ["output: out_type"],
     [f"out_type: {_NUMBERS} = DT_FLOAT"], _same, _ex_to_number, _string_to_number),
    ("AsString", ["input: T"], ["output: string"],
     [f"T: {_AS_STRING}", "precision: int = -1", "scientific: bool = false",
      "shortest: bool = false", "width: int = -1", "fill: string = ''"], _same, _ex_as_string,
     _as_string),
    ("StringJoin", ["inputs: N * string"], ["output: string"],
     ["N: int >= 0", "separator: string = ''"], _broadcast("StringJoin"), _ex_join,
     _string_join),
    ("ReduceJoin", ["inputs: string", "reduction_indices: int32"], ["output: string"],
     ["keep_dims: bool = false", "separator: string = ''"], _reduce_join_shape,
     _ex_reduce_join, _reduce_join),
    ("StringToHashBucketFast", ["input: string"], ["output: int64"], ["num_buckets: int >= 1"],
     _same, _ex_hash, _to_hash_bucket_fast),
    ("StringFormat", ["inputs: T"], ["output: string"],
     ["T: list(type) >= 0", "template: string = '%s'", "placeholder: string = '%s'",
      "summarize: int = 3"], _scalar, _ex_format, _string_format),
    ("DecodeRaw", ["bytes: string"], ["output: out_type"],
     ["out_type: {half, float, double, int32, uint8, int16, int8, int64, bool, "
      "bfloat16}", "little_endian: bool = true"], _decode_raw_shape, _ex_decode_raw,
     _decode_raw),
    ("SerializeTensor", ["tensor: T"], ["serialized: string"], ["T: type"], _scalar,
     _ex_serialize, _serialize_tensor),
    ("ParseTensor", ["serialized: string"], ["output: out_type"], ["out_type: type"],
     _unknown, _ex_parse, _parse_tensor),
    ("StringSplitV2", ["input: string", "sep: string"],
     ["indices: int64", "values: string", "shape: int64"], ["maxsplit: int = -1"],
     _split_shapes, _ex_split, _string_split_v2),
    ("UnicodeDecode", ["input: string"], ["row_splits: Tsplits", "char_values: int32"],
     _DECODE_ATTRS, _decode_shapes(False), _ex_decode, _unicode_decode(False)),
    ("UnicodeDecodeWithOffsets", ["input: string"],
     ["row_splits: Tsplits", "char_values: int32", "char_to_byte_starts: int64"],
     _DECODE_ATTRS, _decode_shapes(True), _ex_decode, _unicode_decode(True)),
    ("UnicodeEncode", ["input_values: int32", "input_splits: Tsplits"], ["output: string"],
     ["errors: {'ignore', 'replace', 'strict'} = 'replace'",
      "output_encoding: {'UTF-8', 'UTF-16-BE', 'UTF-32-BE'}", "replacement_char: int = 65533",
      _SPLITS], _encode_shape, _ex_encode, _unicode_encode),
    ("UnicodeTranscode", ["input: string"], ["output: string"],
     ["input_encoding: string", "output_encoding: {'UTF-8', 'UTF-16-BE', 'UTF-32-BE'}",
      _ERRORS, "replacement_char: int = 65533", "replace_control_characters: bool = false"],
     _same, _ex_transcode, _unicode_transcode),
]


def define_string_ops() -> None:
    """Registers the string ops and their CPU kernels."""
    for name, ins, outs, attrs, shape_fn, examples, kernel in _OPS:
        define(name, ins, outs, attrs, shape_fn, examples=examples)
        host = frozenset(a.name for a in OPS[name].inputs)
        register_kernel(KernelDef(name, "CPU", {}, host, fn=kernel))
