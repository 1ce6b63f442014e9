"""CPU kernels (numpy / LAPACK) of MatrixInverse, MatrixSolve, Cholesky,
MatrixDeterminant and Einsum. half is computed in float32, einsum of
16-bit floats in float32, and each result rounded once."""
from __future__ import annotations

import numpy as np

from .cpu_kernels import _wide
from .linalg_op_defs import parse_einsum
from .op_util import err


def _adjoint(a: np.ndarray) -> np.ndarray:
    return np.swapaxes(a, -1, -2)


def _invertible(op: str, a: np.ndarray, what: str) -> None:
    """A NaN or Inf entry makes the LU factorisation fail, as on TensorFlow."""
    if not np.isfinite(a).all():
        raise err(op, f"{what} is not invertible: it holds NaN or Inf values")


def _matrix_inverse(ins, attrs):
    a = _wide(ins[0])
    _invertible("MatrixInverse", a, "Input")
    if attrs["adjoint"]:
        a = _adjoint(a)
    if a.size == 0:
        return [a.copy()]
    try:
        out = np.linalg.inv(a)
    except np.linalg.LinAlgError:
        raise err("MatrixInverse", "Input is not invertible: a matrix of the batch is "
                  "singular") from None
    return [out]


def _matrix_solve(ins, attrs):
    m, rhs = (_wide(x) for x in ins)
    _invertible("MatrixSolve", m, "Input matrix")
    if attrs["adjoint"]:
        m = _adjoint(m)
    if m.size == 0 or rhs.size == 0:
        return [np.zeros(rhs.shape, rhs.dtype)]
    try:
        return [np.linalg.solve(m, rhs)]
    except np.linalg.LinAlgError:
        raise err("MatrixSolve", "Input matrix is not invertible: a matrix of the batch is "
                  "singular") from None


def _cholesky(ins, attrs):
    """The lower triangle L with L L^T = input, read from the input's lower
    triangle. A matrix that is not positive definite gives NaN in its lower
    triangle, as TensorFlow's CPU kernel does (it logs and does not fail)."""
    a = _wide(ins[0])
    lower = np.tril(a) + np.swapaxes(np.tril(a, -1), -1, -2)
    out = np.zeros_like(a)
    if a.size == 0:
        return [out]
    n = a.shape[-1]
    flat_in, flat_out = lower.reshape(-1, n, n), out.reshape(-1, n, n)
    for i in range(flat_in.shape[0]):
        try:
            flat_out[i] = np.linalg.cholesky(flat_in[i])
        except np.linalg.LinAlgError:
            flat_out[i] = np.where(np.tri(n, dtype=bool), np.nan, 0)
    return [out]


def _matrix_determinant(ins, attrs):
    a = _wide(ins[0])
    if a.shape[-1] == 0:
        return [np.ones(a.shape[:-2], a.dtype)]
    with np.errstate(all="ignore"):  # NaN/Inf entries give NaN, as TensorFlow
        return [np.linalg.det(a) if a.size else np.zeros(a.shape[:-2], a.dtype)]


def _einsum(ins, attrs):
    labels, out, _ = parse_einsum(attrs["equation"], [x.shape for x in ins])
    letters = {}
    for c in "".join(labels) + out:   # digits (ellipsis dims) -> free letters
        if c not in letters:
            letters[c] = c if c.isalpha() else next(
                x for x in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                if x not in letters.values() and x not in attrs["equation"])
    sub = ",".join("".join(letters[c] for c in t) for t in labels) + "->" + \
        "".join(letters[c] for c in out)
    with np.errstate(all="ignore"):
        return [np.einsum(sub, *[_wide(x) for x in ins])]


KERNELS = {
    "MatrixInverse": _matrix_inverse, "MatrixSolve": _matrix_solve, "Cholesky": _cholesky,
    "MatrixDeterminant": _matrix_determinant, "Einsum": _einsum,
}
