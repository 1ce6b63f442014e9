"""Gradients of the N-dimensional index ops (GatherNd, ScatterNd and the
TensorScatter ops) and the linear algebra ops
(MatrixInverse, MatrixSolve, Cholesky, MatrixDeterminant, Einsum), with
TensorFlow's formulas."""
from __future__ import annotations

import numpy as np

from ..framework import errors
from ..ops import raw_ops as R
from ..ops.linalg_op_defs import parse_einsum
from .grad_util import broadcast_to, ints, mul, neg, reduce_to
from .registration import NotDifferentiable, RegisterGradient

NotDifferentiable("LinSpace")


def _shape_of(t, dtype) -> np.ndarray:
    return np.asarray(tuple(t.shape), dtype.as_numpy_dtype)


# ------------------------------------------------------------ index ops

@RegisterGradient("GatherNd")
def _gather_nd_grad(op, grad):
    params, indices = op.inputs
    return R.ScatterNd(indices=indices, updates=grad, shape=_shape_of(params, indices.dtype)), None


@RegisterGradient("ScatterNd")
def _scatter_nd_grad(op, grad):
    indices = op.inputs[0]
    return None, R.GatherNd(params=grad, indices=indices), None


@RegisterGradient("TensorScatterUpdate")
def _tensor_scatter_update_grad(op, grad):
    _, indices, updates = op.inputs
    gt = R.TensorScatterUpdate(tensor=grad, indices=indices, updates=R.ZerosLike(x=updates))
    return gt, None, R.GatherNd(params=grad, indices=indices)


@RegisterGradient("TensorScatterAdd")
def _tensor_scatter_add_grad(op, grad):
    indices = op.inputs[1]
    return grad, None, R.GatherNd(params=grad, indices=indices)


@RegisterGradient("TensorScatterSub")
def _tensor_scatter_sub_grad(op, grad):
    indices = op.inputs[1]
    return grad, None, neg(R.GatherNd(params=grad, indices=indices))


def _tensor_scatter_extreme_grad(op, grad):
    # TensorFlow's: the gradient goes to whichever of the element and its
    # updates is the result, split evenly between ties
    x, indices, y = op.inputs
    out = op.outputs[0]
    x_hit = R.Cast(x=R.Equal(x=x, y=out), DstT=grad.dtype)
    y_hit = R.Cast(x=R.Equal(x=y, y=R.GatherNd(params=out, indices=indices)), DstT=grad.dtype)
    hits = R.AddV2(x=x_hit, y=R.ScatterNd(indices=indices, updates=y_hit,
                                          shape=_shape_of(x, indices.dtype)))
    gx = R.RealDiv(x=mul(grad, x_hit), y=hits)
    gy = mul(R.RealDiv(x=R.GatherNd(params=grad, indices=indices),
                       y=R.GatherNd(params=hits, indices=indices)), y_hit)
    return gx, None, gy


RegisterGradient("TensorScatterMax")(_tensor_scatter_extreme_grad)
RegisterGradient("TensorScatterMin")(_tensor_scatter_extreme_grad)


# ------------------------------------------------------------ linear algebra

def _matmul(a, b, adj_a=False, adj_b=False):
    return R.BatchMatMulV2(x=a, y=b, adj_x=adj_a, adj_y=adj_b)


def _t(x):
    perm = list(range(x.ndim))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return R.Transpose(x=x, perm=ints(perm))


@RegisterGradient("MatrixInverse")
def _matrix_inverse_grad(op, grad):
    y = op.outputs[0]                      # y = inv(B), B = A or A^T
    gb = neg(_matmul(y, _matmul(grad, y, adj_b=True), adj_a=True))
    return _t(gb) if op.get_attr("adjoint") else gb


@RegisterGradient("MatrixSolve")
def _matrix_solve_grad(op, grad):
    a = op.inputs[0]
    c = op.outputs[0]
    adjoint = op.get_attr("adjoint")
    gb = R.MatrixSolve(matrix=a, rhs=grad, adjoint=not adjoint)
    ga = neg(_matmul(c, gb, adj_b=True) if adjoint else _matmul(gb, c, adj_b=True))
    return ga, gb


@RegisterGradient("MatrixDeterminant")
def _matrix_determinant_grad(op, grad):
    a = op.inputs[0]
    d = op.outputs[0]
    scale = R.ExpandDims(input=R.ExpandDims(input=mul(grad, d), dim=np.int32(-1)),
                         dim=np.int32(-1))
    return mul(scale, _t(R.MatrixInverse(input=a)))


@RegisterGradient("Cholesky")
def _cholesky_grad(op, grad):
    l = op.outputs[0]
    n = l.shape[-1]
    l_inv = R.MatrixInverse(input=l)
    middle = _matmul(l, grad, adj_a=True)
    mask = (np.tril(np.ones((n, n))) - 0.5 * np.eye(n)).astype(l.dtype.as_numpy_dtype)
    middle = R.Mul(x=middle, y=mask)          # the lower triangle, the diagonal halved
    ga = _matmul(_matmul(l_inv, middle, adj_a=True), l_inv)
    ga = R.AddV2(x=ga, y=_t(ga))
    return R.Mul(x=ga, y=np.asarray(0.5, l.dtype.as_numpy_dtype))


@RegisterGradient("Einsum")
def _einsum_grad(op, grad):
    """d/d input i: the einsum of the output gradient with the other inputs
    onto input i's labels; labels only input i has are summed in the
    forward pass, so their gradient is broadcast back; batch dimensions
    broadcast from 1 are summed back."""
    xs = list(op.inputs)
    labels, out, dims = parse_einsum(op.get_attr("equation"), [tuple(x.shape) for x in xs])
    letters = {c: c if c.isalpha() else chr(ord("A") + int(c)) for t in labels + [out]
               for c in t}
    name = lambda t: "".join(letters[c] for c in t)
    grads = []
    for i, (x, lab) in enumerate(zip(xs, labels)):
        if len(set(lab)) != len(lab):
            raise errors.UnimplementedError(
                f"Einsum gradient: input {i} repeats a label in {op.attrs['equation']!r} "
                "(a diagonal); write the diagonal with other ops to differentiate it")
        others = [j for j in range(len(xs)) if j != i]
        seen = set(out).union(*[set(labels[j]) for j in others])
        kept = "".join(c for c in lab if c in seen)
        eq = ",".join([name(out)] + [name(labels[j]) for j in others]) + "->" + name(kept)
        g = R.Einsum(inputs=[grad] + [xs[j] for j in others], equation=eq)
        if kept != lab:   # labels summed only over input i: broadcast back
            full = tuple(1 if c not in kept else dims[c] for c in lab)
            g = R.Reshape(tensor=g, shape=ints(full))
            g = broadcast_to(g, tuple(dims[c] for c in lab))
        grads.append(reduce_to(g, tuple(x.shape)))
    return grads
