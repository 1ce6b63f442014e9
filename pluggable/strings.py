"""``pg.strings``: TensorFlow's ``tf.strings`` over the string ops of
``pluggable.ops.string_ops`` (CPU kernels: strings live on the host).

Elementwise functions accept ragged tensors (the result has the same row
partition); ``split``, ``bytes_split``, ``unicode_split`` and
``unicode_decode`` return a dense tensor for a scalar and a
``pg.RaggedTensor`` with one more (ragged) dimension otherwise, as in
TensorFlow::

    pg.strings.split(pg.constant(["a b", "c"]))      # <tf.RaggedTensor [[b'a', b'b'], [b'c']]>
    pg.strings.length("café", unit="UTF8_CHAR")       # 4
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .framework import dtypes, errors
from .framework.errors import InvalidArgumentError
from .framework.tensor import Tensor
from .ops import raw_ops
from .ragged import RaggedTensor
from .ragged.ragged_math import map_flat_values
from .runtime.tensors import convert_to_tensor

__all__ = ["as_string", "bytes_split", "format", "join", "length", "lower", "reduce_join",
           "regex_replace", "split", "substr", "to_hash_bucket_fast", "to_number",
           "unicode_decode", "unicode_decode_with_offsets", "unicode_encode", "unicode_split",
           "unicode_transcode", "upper"]


def _strings(value: Any, fn: str) -> Any:
    """`value` as a string tensor (ragged stays ragged); InvalidArgumentError,
    as in TensorFlow, for a tensor of another dtype."""
    if isinstance(value, RaggedTensor):
        t = value.flat_values
    else:
        t = value = convert_to_tensor(value) if not isinstance(value, Tensor) else value
    if t.dtype is not dtypes.string:
        raise InvalidArgumentError(f"tf.strings.{fn}: expected a string tensor but got a "
                                   f"{t.dtype.name} tensor; convert it first "
                                   "(pg.strings.as_string)")
    return value


def _elementwise(fn: Callable, x: Any, *args: Any, **kwargs: Any) -> Any:
    if isinstance(x, RaggedTensor):
        return x.with_flat_values(fn(x.flat_values, *args, **kwargs))
    return fn(x, *args, **kwargs)


def length(input: Any, name: str | None = None, unit: str = "BYTE") -> Any:  # noqa: A002
    """The length of each string in bytes (`unit` "BYTE") or in Unicode code
    points ("UTF8_CHAR", of UTF-8 text); op StringLength."""
    return _elementwise(lambda t: raw_ops.StringLength(input=t, unit=unit),
                        _strings(input, "length"))


def substr(input: Any, pos: Any, len: Any, unit: str = "BYTE",  # noqa: A002
           name: str | None = None) -> Any:
    """The substring of each string from `pos` (negative: from the end), of at
    most `len` bytes or characters; op Substr."""
    return _elementwise(lambda t: raw_ops.Substr(input=t, pos=pos, len=len, unit=unit),
                        _strings(input, "substr"))


def upper(input: Any, encoding: str = "", name: str | None = None) -> Any:  # noqa: A002
    """Each string in upper case (ASCII letters; all letters with `encoding`
    "utf-8"); op StringUpper."""
    return _elementwise(lambda t: raw_ops.StringUpper(input=t, encoding=encoding),
                        _strings(input, "upper"))


def lower(input: Any, encoding: str = "", name: str | None = None) -> Any:  # noqa: A002
    """Each string in lower case; op StringLower."""
    return _elementwise(lambda t: raw_ops.StringLower(input=t, encoding=encoding),
                        _strings(input, "lower"))


def regex_replace(input: Any, pattern: Any, rewrite: Any,  # noqa: A002
                  replace_global: bool = True, name: str | None = None) -> Any:
    """Each string with the matches of `pattern` replaced by `rewrite` (``\\0``
    .. ``\\9`` name groups); ops StaticRegexReplace (Python strings) or
    RegexReplace (tensors)."""
    def fn(t):
        if isinstance(pattern, (str, bytes)) and isinstance(rewrite, (str, bytes)):
            text = lambda s: s.decode() if isinstance(s, bytes) else s
            return raw_ops.StaticRegexReplace(input=t, pattern=text(pattern),
                                              rewrite=text(rewrite),
                                              replace_global=replace_global)
        return raw_ops.RegexReplace(input=t, pattern=pattern, rewrite=rewrite,
                                    replace_global=replace_global)
    return _elementwise(fn, _strings(input, "regex_replace"))


def to_number(input: Any, out_type: Any = dtypes.float32,  # noqa: A002
              name: str | None = None) -> Any:
    """Each string read as a number of `out_type`; op StringToNumber
    (InvalidArgumentError for text that is not a number)."""
    return _elementwise(lambda t: raw_ops.StringToNumber(string_tensor=t,
                                                         out_type=dtypes.as_dtype(out_type)),
                        _strings(input, "to_number"))


def to_hash_bucket_fast(input: Any, num_buckets: int,  # noqa: A002
                        name: str | None = None) -> Any:
    """Each string's Fingerprint64 modulo `num_buckets` (int64), TensorFlow's
    values; op StringToHashBucketFast."""
    return _elementwise(lambda t: raw_ops.StringToHashBucketFast(input=t,
                                                                 num_buckets=num_buckets),
                        _strings(input, "to_hash_bucket_fast"))


def as_string(input: Any, precision: int = -1, scientific: bool = False,  # noqa: A002
              shortest: bool = False, width: int = -1, fill: str = "",
              name: str | None = None) -> Any:
    """Each number as text (floats as ``%f`` unless told otherwise, bools as
    "true"/"false"); op AsString."""
    return _elementwise(lambda t: raw_ops.AsString(
        input=t, precision=precision, scientific=scientific, shortest=shortest, width=width,
        fill=fill), input)


def join(inputs: Any, separator: str = "", name: str | None = None) -> Any:
    """The strings of `inputs` (tensors of one shape, or scalars) joined
    element by element with `separator`; op StringJoin."""
    inputs = [_strings(x, "join") for x in inputs]
    return map_flat_values(lambda *ts: raw_ops.StringJoin(inputs=list(ts), separator=separator),
                           *inputs)


def reduce_join(inputs: Any, axis: Any = None, keepdims: bool = False,
                separator: str = "", name: str | None = None) -> Tensor:
    """The strings joined along `axis` (every axis when None; several axes
    reduce in the order given); op ReduceJoin."""
    t = _strings(inputs, "reduce_join")
    if isinstance(t, RaggedTensor):
        raise errors.UnimplementedError("tf.strings.reduce_join of a ragged tensor is not "
                                        "supported; use its to_tensor() or flat_values")
    # every axis, the last first: the strings in row-major order
    axes = list(range(t.shape.rank))[::-1] if axis is None else np.asarray(axis).reshape(-1)
    return raw_ops.ReduceJoin(inputs=t, reduction_indices=np.asarray(axes, np.int32),
                              keep_dims=keepdims, separator=separator)


def format(template: str, inputs: Any, placeholder: str = "{}",  # noqa: A001
           summarize: int = 3, name: str | None = None) -> Tensor:
    """`template` with each `placeholder` replaced by the next of `inputs`,
    printed as ``tf.print`` prints it; op StringFormat."""
    if not isinstance(inputs, (list, tuple)):
        inputs = [inputs]
    return raw_ops.StringFormat(inputs=list(inputs), template=template,
                                placeholder=placeholder, summarize=summarize)


# ------------------------------------------------------ results with one more axis

def _ragged_result(t: Any, rows: Callable) -> Any:
    """`rows(vector)` -> (values, row_splits) made into the ragged result
    for `t`: a dense vector for a scalar, one ragged dimension more otherwise."""
    if isinstance(t, RaggedTensor):
        return t.with_flat_values(_ragged_result(t.flat_values, rows))
    shape = list(t.shape)
    values, splits = rows(raw_ops.Reshape(tensor=t, shape=np.array([-1], np.int64)))
    if not shape:
        return values
    out = RaggedTensor.from_row_splits(values, splits, validate=False)
    for n in reversed(shape[1:]):
        out = RaggedTensor.from_uniform_row_length(out, n, validate=False)
    return out


def split(input: Any = None, sep: Any = None, maxsplit: int = -1,  # noqa: A002
          name: str | None = None) -> Any:
    """Each string split at `sep` (runs of whitespace when None), into at most
    ``maxsplit + 1`` parts; op StringSplitV2."""
    t = _strings(input, "split")

    def rows(v):
        indices, values, shape = raw_ops.StringSplitV2(input=v, sep="" if sep is None else sep,
                                                       maxsplit=maxsplit)
        counts = np.bincount(indices.numpy()[:, 0], minlength=int(shape.numpy()[0]))
        return values, np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return _ragged_result(t, rows)


def _decode(encoding: str, errors_: str, replacement_char: int,
            replace_control_characters: bool, offsets: bool) -> Callable:
    op = raw_ops.UnicodeDecodeWithOffsets if offsets else raw_ops.UnicodeDecode
    return lambda v: op(input=v, input_encoding=encoding, errors=errors_,
                        replacement_char=replacement_char,
                        replace_control_characters=replace_control_characters)


def unicode_decode(input: Any, input_encoding: str, errors: str = "replace",  # noqa: A002
                   replacement_char: int = 65533, replace_control_characters: bool = False,
                   name: str | None = None) -> Any:
    """The Unicode code points (int32) of each string; op UnicodeDecode."""
    t = _strings(input, "unicode_decode")
    dec = _decode(input_encoding, errors, replacement_char, replace_control_characters,
                  False)

    def rows(v):
        splits, chars = dec(v)
        return chars, splits.numpy()
    return _ragged_result(t, rows)


def unicode_decode_with_offsets(input: Any, input_encoding: str,  # noqa: A002
                                errors: str = "replace", replacement_char: int = 65533,
                                replace_control_characters: bool = False,
                                name: str | None = None) -> tuple:
    """(code points, byte offset where each starts); op
    UnicodeDecodeWithOffsets."""
    t = _strings(input, "unicode_decode_with_offsets")
    dec = _decode(input_encoding, errors, replacement_char, replace_control_characters,
                  True)
    found = {}

    def rows(v):
        splits, chars, starts = dec(v)
        found["starts"] = starts
        return chars, splits.numpy()
    chars = _ragged_result(t, rows)
    starts = found["starts"]
    return chars, starts if isinstance(chars, Tensor) else chars.with_flat_values(starts)


def unicode_split(input: Any, input_encoding: str, errors: str = "replace",  # noqa: A002
                  replacement_char: int = 65533, name: str | None = None) -> Any:
    """Each string split into its characters (each a string, in
    `input_encoding`)."""
    t = _strings(input, "unicode_split")
    dec = _decode(input_encoding, errors, replacement_char, False, True)

    def rows(v):
        splits, _, starts = dec(v)
        sp, st = splits.numpy().astype(np.int64), starts.numpy()
        row = np.repeat(np.arange(len(sp) - 1), np.diff(sp))
        strings = v.numpy()[row] if len(row) else np.array([], object)
        ends = np.append(st[1:], 0)
        last = sp[1:][np.diff(sp) > 0] - 1          # the last character of each row
        ends[last] = [len(s) for s in strings[last]]
        chars = raw_ops.Substr(input=strings, pos=st, len=ends - st)
        return chars, sp
    return _ragged_result(t, rows)


def bytes_split(input: Any, name: str | None = None) -> Any:  # noqa: A002
    """Each string split into one-byte strings."""
    t = _strings(input, "bytes_split")

    def rows(v):
        sizes = raw_ops.StringLength(input=v).numpy().astype(np.int64)
        splits = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        row = np.repeat(np.arange(len(sizes)), sizes)
        pos = np.arange(int(splits[-1]), dtype=np.int64) - np.repeat(splits[:-1], sizes)
        strings = v.numpy()[row] if len(row) else np.array([], object)
        return raw_ops.Substr(input=strings, pos=pos, len=np.ones_like(pos)), splits
    return _ragged_result(t, rows)


def unicode_encode(input: Any, output_encoding: str, errors: str = "replace",  # noqa: A002
                   replacement_char: int = 65533, name: str | None = None) -> Tensor:
    """The strings whose code points are the rows of `input` (a vector: one
    string; a matrix or ragged tensor: one per row); op UnicodeEncode."""
    run = lambda values, splits: raw_ops.UnicodeEncode(
        input_values=values, input_splits=splits, output_encoding=output_encoding,
        errors=errors, replacement_char=replacement_char)
    if isinstance(input, RaggedTensor):
        if isinstance(input.values, RaggedTensor):
            return input.with_values(unicode_encode(input.values, output_encoding, errors,
                                                    replacement_char))
        return run(raw_ops.Cast(x=input.values, DstT=dtypes.int32), input.row_splits)
    t = convert_to_tensor(input)
    if not t.dtype.is_integer:
        raise TypeError(f"tf.strings.unicode_encode: expected int32 code points, got dtype "
                        f"{t.dtype.name}")
    shape = list(t.shape)
    if not shape:
        raise InvalidArgumentError(
            "tf.strings.unicode_encode: input must have rank >= 1 (a row of code points)")
    width = shape[-1]
    rows = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
    flat = raw_ops.Reshape(tensor=raw_ops.Cast(x=t, DstT=dtypes.int32),
                           shape=np.array([-1], np.int64))
    out = run(flat, np.arange(rows + 1, dtype=np.int64) * width)
    return raw_ops.Reshape(tensor=out, shape=np.array(shape[:-1], np.int64))


def unicode_transcode(input: Any, input_encoding: str, output_encoding: str,  # noqa: A002
                      errors: str = "replace", replacement_char: int = 65533,
                      replace_control_characters: bool = False,
                      name: str | None = None) -> Any:
    """Each string re-encoded from `input_encoding` to `output_encoding`; op
    UnicodeTranscode."""
    return _elementwise(lambda t: raw_ops.UnicodeTranscode(
        input=t, input_encoding=input_encoding, output_encoding=output_encoding,
        errors=errors, replacement_char=replacement_char,
        replace_control_characters=replace_control_characters),
        _strings(input, "unicode_transcode"))
