"""``pg.print``: TensorFlow's tf.print for eager code, with its formatting
(floats in 6 significant digits, or 9 where 6 do not read back as the
same float32; 15 or 17 for float64; bools as 1/0, rows
without commas, dimensions longer than 2 * `summarize` elided with
"...")."""
from __future__ import annotations

import sys
from typing import Any

import numpy as np

from ..framework import errors
from ..framework.tensor import Tensor


def _scalar(v: Any, dtype: np.dtype) -> str:
    if dtype == np.bool_:
        return "1" if v else "0"
    if dtype.kind in "iu":
        return str(int(v))
    # The shortest of two precisions that reads back as the same value:
    # 6 then 9 significant digits for float32, 15 then 17 for float64.
    short, full, ftype = (15, 17, np.float64) if dtype == np.float64 else (6, 9, np.float32)
    text = f"{float(v):.{short}g}"
    return text if ftype(text) == ftype(v) or np.isnan(v) else f"{float(v):.{full}g}"


def _array(a: np.ndarray, summarize: int, indent: int) -> str:
    if a.ndim == 0:
        return _scalar(a.item(), a.dtype)
    n = a.shape[0]
    cut = summarize >= 0 and n > 2 * summarize
    idx = list(range(summarize)) + [None] + list(range(n - summarize, n)) if cut else range(n)
    if a.ndim == 1:
        return "[" + " ".join("..." if i is None else _scalar(a[i], a.dtype) for i in idx) + "]"
    sep = "\n" * (a.ndim - 1) + " " * (indent + 1)
    return "[" + sep.join("..." if i is None else _array(a[i], summarize, indent + 1)
                          for i in idx) + "]"


def format_value(x: Any, summarize: int = 3, top: bool = True) -> str:
    """One argument of ``print`` as tf.print writes it."""
    if isinstance(x, Tensor):
        a = x._numpy()
        if str(a.dtype) == "bfloat16" or a.dtype == np.float16:
            a = a.astype(np.float32)
        return _array(a, summarize, 0)
    if hasattr(x, "__pg_tensor__"):  # a Variable: its value
        return format_value(x.__pg_tensor__(None), summarize, top)
    if isinstance(x, str):
        return x if top else repr(x)
    if isinstance(x, list):
        return "[" + ", ".join(format_value(v, summarize, False) for v in x) + "]"
    if isinstance(x, tuple):
        return "(" + ", ".join(format_value(v, summarize, False) for v in x) + \
            ("," if len(x) == 1 else "") + ")"
    if isinstance(x, dict):
        return "{" + ", ".join(f"{k!r}: {format_value(v, summarize, False)}"
                               for k, v in x.items()) + "}"
    if isinstance(x, np.ndarray):
        return _array(x, summarize, 0)
    return str(x)


def print(*inputs: Any, output_stream: Any = None, summarize: int = 3,  # noqa: A001
          sep: str = " ", end: str = "\n", name: str | None = None) -> None:
    """Prints `inputs` (tensors, Python values, nested lists/dicts of them)
    as tf.print does, to `output_stream`: sys.stderr by default, sys.stdout,
    any object with ``write``, or a "file://path" to append to.
    `summarize` elements are kept at each end of a long dimension (-1:
    all). Reads tensor values, so it waits for their device work."""
    text = sep.join(format_value(x, summarize) for x in inputs) + end
    stream = sys.stderr if output_stream is None else output_stream
    if isinstance(stream, str):
        if not stream.startswith("file://"):
            raise errors.InvalidArgumentError(f"print: output_stream {stream!r} must be "
                                              "sys.stdout, sys.stderr, a writable object or "
                                              "'file://<path>'")
        with open(stream[len("file://"):], "a", encoding="utf-8") as f:
            f.write(text)
        return
    stream.write(text)
