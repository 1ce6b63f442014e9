"""``pg.math``: elementwise and reduction ops (public names only; the
functions live in ``pluggable.ops.math_ops``)."""
from .ops.math_ops import (abs, add, divide, exp, log, maximum, minimum, multiply,  # noqa: F401
                           negative, realdiv, reduce_max, reduce_mean, reduce_min, reduce_sum,
                           sigmoid, sqrt, subtract, tanh)
