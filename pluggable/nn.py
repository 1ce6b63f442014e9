"""``pg.nn``: neural-network ops (public names only; the functions live in
``pluggable.ops.nn_ops``)."""
from .ops.math_ops import sigmoid, tanh  # noqa: F401
from .ops.nn_ops import conv2d, relu, softmax  # noqa: F401
