"""The user-level calls of a model's op mix (the `pg.*` functions, not raw
ops), shared by `bench_gpu.py --only api` and `bench_dispatch.py --api`.
Takes the pluggable module as an argument, so a benchmark can time the
calls of another checkout."""
from __future__ import annotations

from typing import Any, Callable

NAMES = ("reduce_sum", "reduce_mean", "cast", "matmul", "transpose", "reshape", "zeros",
         "bias_add", "softmax")


def user_calls(pg: Any, x: Any, w: Any, bias: Any) -> dict[str, Callable[[], Any]]:
    """Name -> a call that allocates its output, on the 2-D float32 tensor
    `x` (rows x cols), `w` (cols x k) and `bias` (cols)."""
    rows, cols = x.shape
    return {
        "reduce_sum": lambda: pg.reduce_sum(x, 1),
        "reduce_mean": lambda: pg.reduce_mean(x),
        "cast": lambda: pg.cast(x, pg.float16),
        "matmul": lambda: x @ w,
        "transpose": lambda: pg.transpose(x),
        "reshape": lambda: pg.reshape(x, [rows // 2, cols * 2]),
        "zeros": lambda: pg.zeros([rows, cols]),
        "bias_add": lambda: pg.nn.bias_add(x, bias),
        "softmax": lambda: pg.nn.softmax(x),
    }
