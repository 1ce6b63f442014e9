"""``pg.math``: elementwise, comparison, reduction and scan ops (public names
only; the functions live in ``pluggable.ops.math_ops``)."""
from .ops.math_ops import (abs, add, add_n, argmax, argmin, cumsum, divide, equal,  # noqa: F401
                           erf, exp, floor, floordiv, floormod, greater, greater_equal, less,
                           less_equal, log, logical_and, logical_not, logical_or, logical_xor,
                           maximum, minimum, mod, multiply, negative, not_equal, pow, realdiv,
                           reciprocal, reduce_all, reduce_any, reduce_max, reduce_mean,
                           reduce_min, reduce_prod, reduce_sum, rsqrt, sigmoid, sign, sqrt,
                           square, squared_difference, subtract, tanh, top_k, truediv,
                           unsorted_segment_sum)
from .ops.math_ops import (acos, acosh, asin, asinh, atan, atanh, ceil, cos, cosh,  # noqa: F401
                           erfc, expm1, log1p, round, sin, sinh, tan)
from .ops.math_ops import angle, conj, imag, real  # noqa: F401
from .ops.nn_ops import log_softmax, softmax, softplus  # noqa: F401
from .ops.nd_index_ops import argsort, sort  # noqa: F401
