"""Linear algebra (``pg.linalg``) over MatMul, BatchMatMulV2 and the
elementwise ops."""
from __future__ import annotations

from typing import Any

from ..framework import errors
from ..framework.tensor import Tensor
from ..runtime.tensors import convert_to_tensor
from . import math_ops, raw_ops
from .linalg_op_defs import implicit_output
from .array_ops import eye  # noqa: F401  (pg.linalg.eye)
from .math_ops import matmul  # noqa: F401  (pg.linalg.matmul)
from .nn_ops import l2_normalize  # noqa: F401  (pg.linalg.l2_normalize)


def matrix_transpose(a: Any, conjugate: bool = False, name: str | None = None) -> Tensor:
    """`a` with its last two dimensions swapped (op Transpose)."""
    x = convert_to_tensor(a)
    if x.ndim < 2:
        raise errors.InvalidArgumentError(f"matrix_transpose: a must have rank >= 2, got shape "
                                          f"{list(x.shape)}", op="Transpose")
    perm = list(range(x.ndim))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return math_ops.transpose(x, perm)


adjoint = matrix_transpose  # real dtypes only: the adjoint is the transpose


def norm(tensor: Any, ord: Any = "euclidean", axis: Any = None, keepdims: bool = False,  # noqa: A002
         name: str | None = None) -> Tensor:
    """The Euclidean (Frobenius) norm over `axis` (all axes when None), or
    the 1-norm / max-norm of vectors (ord 1 / inf)."""
    x = convert_to_tensor(tensor)
    if ord in ("euclidean", "fro", 2, 2.0):
        return math_ops.sqrt(math_ops.reduce_sum(math_ops.square(x), axis, keepdims))
    if ord in (1, 1.0):
        return math_ops.reduce_sum(math_ops.abs(x), axis, keepdims)
    if ord == float("inf"):
        return math_ops.reduce_max(math_ops.abs(x), axis, keepdims)
    raise errors.UnimplementedError(f"norm: ord {ord!r} is not supported (use 'euclidean', 1 "
                                    "or inf)")


def inv(input: Any, adjoint: bool = False, name: str | None = None) -> Tensor:  # noqa: A002
    """The inverse of each square matrix of `input` [..., M, M] (op
    MatrixInverse); a singular one is InvalidArgumentError."""
    return raw_ops.MatrixInverse(input=input, adjoint=adjoint)


def solve(matrix: Any, rhs: Any, adjoint: bool = False, name: str | None = None) -> Tensor:
    """X with matrix @ X = rhs, for each matrix of the batch (op MatrixSolve)."""
    m = convert_to_tensor(matrix)
    return raw_ops.MatrixSolve(matrix=m, rhs=convert_to_tensor(rhs, m.dtype), adjoint=adjoint)


def cholesky(input: Any, name: str | None = None) -> Tensor:  # noqa: A002
    """The lower-triangular L with L @ L^T = input, read from the lower
    triangle (op Cholesky). A matrix that is not positive definite gives
    NaN in its lower triangle, as TensorFlow's CPU kernel does."""
    return raw_ops.Cholesky(input=input)


def det(input: Any, name: str | None = None) -> Tensor:  # noqa: A002
    """The determinant of each square matrix of `input` (op MatrixDeterminant)."""
    return raw_ops.MatrixDeterminant(input=input)


def einsum(equation: str, *inputs: Any, **kwargs: Any) -> Tensor:
    """Einstein summation over the labelled dimensions of `inputs` (op
    Einsum); "..." stands for broadcast batch dimensions, and an equation
    without "->" gets numpy's implicit output."""
    ts = [convert_to_tensor(x) for x in inputs]
    return raw_ops.Einsum(inputs=ts, equation=implicit_output(equation))
