"""Definitions of the linear algebra ops, MatrixInverse, MatrixSolve,
Cholesky, MatrixDeterminant and Einsum (TensorFlow's names, inputs,
attributes and type sets), with shape functions, the einsum equation
parser their CPU kernels share, and sample calls (``examples``)."""
from __future__ import annotations

import numpy as np

from .definitions import broadcast_shapes
from .op_util import define, err, sample

_LINALG_T = "T: {double, float, half}"


def _square(op: str, s: tuple, name: str = "input") -> None:
    if len(s) < 2 or s[-1] != s[-2]:
        raise err(op, f"{name} must be a batch of square matrices (shape [..., M, M]), got "
                  f"shape {list(s)}")


def _square_same(op):
    def fn(shapes, attrs, values):
        _square(op, tuple(shapes[0]))
        return [tuple(shapes[0])]
    return fn


def _determinant(shapes, attrs, values):
    s = tuple(shapes[0])
    _square("MatrixDeterminant", s)
    return [s[:-2]]


def _solve(shapes, attrs, values):
    m, r = tuple(shapes[0]), tuple(shapes[1])
    _square("MatrixSolve", m, "matrix")
    if len(r) != len(m) or r[:-2] != m[:-2] or r[-2] != m[-1]:
        raise err("MatrixSolve", f"rhs must have shape [..., {m[-1] if m else 'M'}, K] with the "
                  f"batch dimensions of matrix {list(m)}, got {list(r)}")
    return [r]


# ------------------------------------------------------------------- einsum

def implicit_output(equation: str) -> str:
    """`equation` with its output written out where it has no "->": the
    ellipsis (if an input has one), then the labels that appear once,
    sorted (numpy's and tf.einsum's rule)."""
    if "->" in equation:
        return equation
    lhs = equation.replace(" ", "")
    letters = [c for c in lhs if c.isalpha()]
    once = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    return f"{lhs}->{'...' if '...' in lhs else ''}{once}"


def parse_einsum(equation: str, shapes: list) -> tuple[list[str], str, dict]:
    """(each input's labels, the output's labels, label -> dimension) of an
    einsum `equation` over inputs of `shapes`. An ellipsis "..." stands for
    the broadcast batch dimensions, labelled with upper-case letters
    outside [a-zA-Z] use (the characters '0'..'9' here). The op needs an
    explicit output ("->"), as TensorFlow's; ``implicit_output`` adds it."""
    op = "Einsum"
    eq = equation.replace(" ", "")
    if eq.count("->") != 1:
        raise err(op, f"Expecting exactly one '->' in einsum equation: {equation!r} (write "
                  "the output labels, or call pg.einsum, which adds them)")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise err(op, f"equation {equation!r} has {len(terms)} inputs, got {len(shapes)} "
                  "tensors")
    for t in terms + ([rhs] if arrow else []):
        body = t.replace("...", "")
        if not all(c.isalpha() for c in body) or t.count("...") > 1 or "." in body:
            raise err(op, f"invalid term {t!r} in equation {equation!r}: use letters and at "
                      "most one '...'")
    batch_rank = 0
    for t, s in zip(terms, shapes):
        n = len(t.replace("...", ""))
        if "..." in t:
            if len(s) < n:
                raise err(op, f"term {t!r} needs rank >= {n}, got shape {list(s)}")
            batch_rank = max(batch_rank, len(s) - n)
        elif len(s) != n:
            raise err(op, f"term {t!r} of {equation!r} has {n} labels but the input has "
                      f"shape {list(s)}")
    ell = "".join(str(i) for i in range(batch_rank))
    labels, dims, batch = [], {}, ()
    for t, s in zip(terms, shapes):
        n = len(t.replace("...", ""))
        if "..." in t:
            br = len(s) - n
            mine = ell[batch_rank - br:]
            batch = broadcast_shapes(op, batch, tuple(s[t.index("..."):t.index("...") + br]))
            t = t.replace("...", mine)
        lab = list(t)
        for c, d in zip(lab, s):
            if c.isdigit():
                continue
            if c in dims and dims[c] != d and 1 not in (dims[c], d):
                raise err(op, f"label {c!r} of {equation!r} has dimension {dims[c]} and {d}")
            dims[c] = d if c not in dims or dims[c] == 1 else dims[c]
        labels.append(t)
    for i, d in enumerate(batch):
        dims[ell[i]] = d
    out = rhs.replace("...", ell)
    for c in out:
        if c not in dims:
            raise err(op, f"output label {c!r} of {equation!r} is in no input")
    return labels, out, dims


def _einsum(shapes, attrs, values):
    _, out, dims = parse_einsum(attrs["equation"], [tuple(s) for s in shapes])
    return [tuple(dims[c] for c in out)]


# ------------------------------------------------------------------ examples

def well_conditioned(rng, T, shape):
    """Random matrices of `shape` [..., M, M] plus M on the diagonal."""
    a = rng.uniform(-1, 1, shape) + shape[-1] * np.eye(shape[-1])
    return a.astype(T.as_numpy_dtype)


def positive_definite(rng, T, shape):
    b = rng.uniform(-1, 1, shape)
    a = b @ np.swapaxes(b, -1, -2) + shape[-1] * np.eye(shape[-1])
    return a.astype(T.as_numpy_dtype)


def _ex_square(make):
    def ex(rng, types):
        T = types["T"]
        return [({"input": make(rng, T, (3, 3))}, {}), ({"input": make(rng, T, (2, 4, 4))}, {}),
                ({"input": make(rng, T, (0, 2, 2))}, {})]
    return ex


def _ex_inverse(rng, types):
    cases = _ex_square(well_conditioned)(rng, types)
    return cases + [({"input": cases[1][0]["input"]}, {"adjoint": True})]


def _ex_solve(rng, types):
    T = types["T"]
    m = well_conditioned(rng, T, (2, 3, 3))
    return [({"matrix": m, "rhs": sample(rng, T, (2, 3, 2))}, {}),
            ({"matrix": m, "rhs": sample(rng, T, (2, 3, 1))}, {"adjoint": True}),
            ({"matrix": m[0], "rhs": sample(rng, T, (3, 4))}, {})]


def _ex_einsum(rng, types):
    T = types["T"]
    v = lambda *s: sample(rng, T, s, low=-2, high=2)
    return [({"inputs": [v(2, 3), v(3, 4)]}, {"equation": "ij,jk->ik"}),
            ({"inputs": [v(2, 3, 4), v(2, 4, 5)]}, {"equation": "bij,bjk->bik"}),
            ({"inputs": [v(3, 3)]}, {"equation": "ii->i"}),
            ({"inputs": [v(3, 4)]}, {"equation": "ij->ji"}),
            ({"inputs": [v(5), v(4)]}, {"equation": "i,j->ij"}),
            ({"inputs": [v(2, 1, 3, 4), v(5, 4, 2)]}, {"equation": "...ij,...jk->...ik"}),
            ({"inputs": [v(3, 4), v(4)]}, {"equation": "ij,j->i"}),
            ({"inputs": [v(2, 3, 4)]}, {"equation": "...j->..."})]


def define_linalg_ops() -> None:
    """Registers MatrixInverse, MatrixSolve, Cholesky, MatrixDeterminant and Einsum."""
    define("MatrixInverse", ["input: T"], ["output: T"], ["adjoint: bool = false", _LINALG_T],
           _square_same("MatrixInverse"), examples=_ex_inverse)
    define("MatrixSolve", ["matrix: T", "rhs: T"], ["output: T"],
           ["adjoint: bool = false", _LINALG_T], _solve, examples=_ex_solve)
    define("Cholesky", ["input: T"], ["output: T"], [_LINALG_T], _square_same("Cholesky"),
           examples=_ex_square(positive_definite))
    define("MatrixDeterminant", ["input: T"], ["output: T"], ["T: {half, float, double}"],
           _determinant, examples=_ex_square(well_conditioned))
    define("Einsum", ["inputs: N * T"], ["output: T"],
           ["equation: string", "N: int >= 1", "T: type"], _einsum,
           examples=_ex_einsum)
