"""``pg.linalg``: linear algebra (public names only; the functions live in
``pluggable.ops.linalg_ops``)."""
from .ops.linalg_ops import adjoint, eye, l2_normalize, matmul, matrix_transpose, norm  # noqa: F401
from .ops.linalg_ops import cholesky, det, einsum, inv, solve  # noqa: F401
