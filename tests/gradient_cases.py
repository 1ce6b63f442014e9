"""The gradient checks of every differentiable op: one or more cases per op,
each a function of input tensors that calls the op, the inputs (fresh random
values away from the op's kinks) and which inputs to differentiate.

Used by tests/test_gradients.py, which compares the tape's gradients with
central finite differences in float64 (float32 where the op has no float64
kernels) on every device."""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np

import pluggable as pg

R = pg.raw_ops
I32 = np.int32


@dataclasses.dataclass
class Case:
    op: str
    fn: Callable[..., Any]                # input tensors -> output tensor(s)
    inputs: Callable[[Any], list]         # rng -> list of numpy arrays
    wrt: tuple = (0,)                     # indices of the inputs to differentiate
    label: str = ""
    float32: bool = False                 # the op has no float64 kernels

    @property
    def id(self) -> str:
        return f"{self.op}-{self.label}" if self.label else self.op


def away(rng, shape, lo=0.3, hi=1.0):
    """Values of either sign with magnitude in [lo, hi] (away from 0)."""
    return rng.uniform(lo, hi, shape) * rng.choice([-1.0, 1.0], shape)


def pos(rng, shape, lo=0.5, hi=2.0):
    return rng.uniform(lo, hi, shape)


def distinct(rng, shape, scale=0.2):
    """Distinct values at least `scale` apart (no ties for max/sort)."""
    n = int(np.prod(shape))
    return (rng.permutation(n) * scale - n * scale / 2 + rng.uniform(0, 0.02, n)).reshape(shape)


def normal(rng, shape):
    return rng.standard_normal(shape)


def _pair_apart(rng, shape):
    x = normal(rng, shape)
    return [x, x + away(rng, shape, 0.2, 0.8)]


CONV = dict(strides=[1, 1, 1, 1], padding="SAME")


def _bn(training):
    def fn(x, scale, offset, mean, var):
        return R.FusedBatchNormV3(x=x, scale=scale, offset=offset, mean=mean, variance=var,
                                  epsilon=0.001, is_training=training)[0]
    return fn


def _bn_inputs(rng):
    c = 2
    return [normal(rng, (2, 3, 3, c)), pos(rng, (c,)), normal(rng, (c,)),
            normal(rng, (c,)) * 0.1, pos(rng, (c,))]


def _one_hot_rows(rng, n, k):
    p = rng.uniform(0.1, 1.0, (n, k))
    return p / p.sum(-1, keepdims=True)


CASES = [
    # ---------------------------------------------------------- arithmetic
    Case("AddV2", lambda x, y: R.AddV2(x=x, y=y), lambda r: [normal(r, (2, 3)), normal(r, (3,))],
         (0, 1)),
    Case("Add", lambda x, y: R.Add(x=x, y=y), lambda r: [normal(r, (2, 3)), normal(r, (3,))],
         (0, 1)),
    Case("Sub", lambda x, y: R.Sub(x=x, y=y),
         lambda r: [normal(r, (2, 1, 3)), normal(r, (4, 3))], (0, 1)),
    Case("Mul", lambda x, y: R.Mul(x=x, y=y), lambda r: [normal(r, (3, 1)), normal(r, (1, 4))],
         (0, 1)),
    Case("RealDiv", lambda x, y: R.RealDiv(x=x, y=y),
         lambda r: [normal(r, (2, 3)), away(r, (3,), 0.5, 1.5)], (0, 1)),
    Case("Div", lambda x, y: R.Div(x=x, y=y),
         lambda r: [normal(r, (2, 3)), away(r, (3,), 0.5, 1.5)], (0, 1)),
    Case("Maximum", lambda x, y: R.Maximum(x=x, y=y), lambda r: _pair_apart(r, (2, 3)), (0, 1)),
    Case("Minimum", lambda x, y: R.Minimum(x=x, y=y), lambda r: _pair_apart(r, (2, 3)), (0, 1)),
    Case("Pow", lambda x, y: R.Pow(x=x, y=y), lambda r: [pos(r, (2, 3)), normal(r, (3,))],
         (0, 1)),
    Case("FloorMod", lambda x, y: R.FloorMod(x=x, y=y),
         lambda r: (lambda y: [y * (r.integers(-3, 3, (2, 3)) + r.uniform(0.2, 0.8, (2, 3))), y])(
             pos(r, (3,))), (0, 1)),
    Case("AddN", lambda a, b, c: R.AddN(inputs=[a, b, c]),
         lambda r: [normal(r, (2, 3)) for _ in range(3)], (0, 1, 2)),
    # ---------------------------------------------------------- elementwise
    Case("Neg", lambda x: R.Neg(x=x), lambda r: [normal(r, (2, 3))]),
    Case("Abs", lambda x: R.Abs(x=x), lambda r: [away(r, (2, 3))]),
    Case("Sign", lambda x: R.Sign(x=x), lambda r: [away(r, (2, 3))]),
    Case("Exp", lambda x: R.Exp(x=x), lambda r: [normal(r, (2, 3))]),
    Case("Log", lambda x: R.Log(x=x), lambda r: [pos(r, (2, 3))]),
    Case("Square", lambda x: R.Square(x=x), lambda r: [normal(r, (2, 3))]),
    Case("Sqrt", lambda x: R.Sqrt(x=x), lambda r: [pos(r, (2, 3))]),
    Case("Rsqrt", lambda x: R.Rsqrt(x=x), lambda r: [pos(r, (2, 3))]),
    Case("Tanh", lambda x: R.Tanh(x=x), lambda r: [normal(r, (2, 3))]),
    Case("Sigmoid", lambda x: R.Sigmoid(x=x), lambda r: [normal(r, (2, 3))]),
    Case("Erf", lambda x: R.Erf(x=x), lambda r: [normal(r, (2, 3))]),
    Case("Erfc", lambda x: R.Erfc(x=x), lambda r: [normal(r, (2, 3))]),
    Case("Sin", lambda x: R.Sin(x=x), lambda r: [normal(r, (2, 3))]),
    Case("Cos", lambda x: R.Cos(x=x), lambda r: [normal(r, (2, 3))]),
    Case("Tan", lambda x: R.Tan(x=x), lambda r: [r.uniform(-1.2, 1.2, (2, 3))]),
    Case("Asin", lambda x: R.Asin(x=x), lambda r: [r.uniform(-0.9, 0.9, (2, 3))]),
    Case("Acos", lambda x: R.Acos(x=x), lambda r: [r.uniform(-0.9, 0.9, (2, 3))]),
    Case("Atan", lambda x: R.Atan(x=x), lambda r: [normal(r, (2, 3))]),
    Case("Sinh", lambda x: R.Sinh(x=x), lambda r: [normal(r, (2, 3))]),
    Case("Cosh", lambda x: R.Cosh(x=x), lambda r: [normal(r, (2, 3))]),
    Case("Asinh", lambda x: R.Asinh(x=x), lambda r: [normal(r, (2, 3))]),
    Case("Acosh", lambda x: R.Acosh(x=x), lambda r: [pos(r, (2, 3), 1.2, 3.0)]),
    Case("Atanh", lambda x: R.Atanh(x=x), lambda r: [r.uniform(-0.9, 0.9, (2, 3))]),
    Case("Expm1", lambda x: R.Expm1(x=x), lambda r: [normal(r, (2, 3))]),
    Case("Log1p", lambda x: R.Log1p(x=x), lambda r: [pos(r, (2, 3))]),
    Case("Reciprocal", lambda x: R.Reciprocal(x=x), lambda r: [away(r, (2, 3), 0.5, 1.5)]),
    Case("Relu", lambda x: R.Relu(features=x), lambda r: [away(r, (2, 3))]),
    Case("Gelu", lambda x: R.Gelu(features=x), lambda r: [normal(r, (2, 3))], label="exact"),
    Case("Gelu", lambda x: R.Gelu(features=x, approximate=True), lambda r: [normal(r, (2, 3))],
         label="approximate"),
    Case("Identity", lambda x: R.Identity(input=x), lambda r: [normal(r, (2, 3))]),
    Case("CheckNumerics", lambda x: R.CheckNumerics(tensor=x, message="x"),
         lambda r: [normal(r, (2, 3))]),
    Case("Cast", lambda x: R.Cast(x=x, DstT=pg.float64), lambda r: [normal(r, (2, 3))],
         float32=True),
    Case("Select", lambda c, t, e: R.Select(condition=c, t=t, e=e),
         lambda r: [r.random((2, 3)) < 0.5, normal(r, (2, 3)), normal(r, (2, 3))], (1, 2)),
    Case("SelectV2", lambda c, t, e: R.SelectV2(condition=c, t=t, e=e),
         lambda r: [r.random((2, 1)) < 0.5, normal(r, (2, 3)), normal(r, (3,))], (1, 2)),
    # ---------------------------------------------------------- N-d index ops
    Case("GatherNd", lambda p, i: R.GatherNd(params=p, indices=i),
         lambda r: [normal(r, (4, 3)), np.array([[1, 0], [3, 2], [1, 0]], I32)]),
    Case("GatherNd", lambda p, i: R.GatherNd(params=p, indices=i),
         lambda r: [normal(r, (4, 3)), np.array([[2], [0]], I32)], label="slices"),
    Case("ScatterNd", lambda i, u: R.ScatterNd(indices=i, updates=u, shape=np.array([5, 2], I32)),
         lambda r: [np.array([[1], [4], [1]], I32), normal(r, (3, 2))], (1,)),
    Case("TensorScatterUpdate",
         lambda t, i, u: R.TensorScatterUpdate(tensor=t, indices=i, updates=u),
         lambda r: [normal(r, (4, 3)), np.array([[2], [0]], I32), normal(r, (2, 3))], (0, 2)),
    Case("TensorScatterAdd", lambda t, i, u: R.TensorScatterAdd(tensor=t, indices=i, updates=u),
         lambda r: [normal(r, (4, 3)), np.array([[2, 1], [0, 0]], I32), normal(r, (2,))],
         (0, 2)),
    Case("TensorScatterSub", lambda t, i, u: R.TensorScatterSub(tensor=t, indices=i, updates=u),
         lambda r: [normal(r, (4, 3)), np.array([[2, 1], [0, 0], [2, 1]], I32), normal(r, (3,))],
         (0, 2)),
    *[Case(op, lambda t, i, u, op=op: getattr(R, op)(tensor=t, indices=i, updates=u),
           lambda r: [distinct(r, (4, 3)), np.array([[2], [0]], I32), distinct(r, (2, 3))],
           (0, 2)) for op in ("TensorScatterMax", "TensorScatterMin")],
    # ---------------------------------------------------------- linear algebra
    Case("MatrixInverse", lambda a: R.MatrixInverse(input=a),
         lambda r: [normal(r, (2, 3, 3)) + 3 * np.eye(3)]),
    Case("MatrixInverse", lambda a: R.MatrixInverse(input=a, adjoint=True),
         lambda r: [normal(r, (3, 3)) + 3 * np.eye(3)], label="adjoint"),
    Case("MatrixSolve", lambda a, b: R.MatrixSolve(matrix=a, rhs=b),
         lambda r: [normal(r, (2, 3, 3)) + 3 * np.eye(3), normal(r, (2, 3, 2))], (0, 1)),
    Case("MatrixSolve", lambda a, b: R.MatrixSolve(matrix=a, rhs=b, adjoint=True),
         lambda r: [normal(r, (3, 3)) + 3 * np.eye(3), normal(r, (3, 1))], (0, 1),
         label="adjoint"),
    Case("MatrixDeterminant", lambda a: R.MatrixDeterminant(input=a),
         lambda r: [normal(r, (2, 3, 3)) + 2 * np.eye(3)]),
    # Cholesky reads the lower triangle: differentiate it through a
    # symmetric input, as its gradient (TensorFlow's) is symmetric.
    Case("Cholesky",
         lambda a: R.Cholesky(input=R.Mul(x=R.AddV2(x=a, y=R.Transpose(x=a, perm=I32([0, 2, 1]))),
                                             y=0.5)),
         lambda r: [(lambda b: b @ b.transpose(0, 2, 1) + 3 * np.eye(3))(normal(r, (2, 3, 3)))]),
    Case("Einsum", lambda a, b: R.Einsum(inputs=[a, b], equation="ij,jk->ik"),
         lambda r: [normal(r, (2, 3)), normal(r, (3, 4))], (0, 1), label="matmul"),
    Case("Einsum", lambda a, b: R.Einsum(inputs=[a, b], equation="...ij,...jk->...ik"),
         lambda r: [normal(r, (2, 1, 2, 3)), normal(r, (4, 3, 2))], (0, 1), label="ellipsis"),
    Case("Einsum", lambda a: R.Einsum(inputs=[a], equation="ij->j"),
         lambda r: [normal(r, (3, 4))], label="sum"),
    Case("Einsum", lambda a, b: R.Einsum(inputs=[a, b], equation="ik,j->ij"),
         lambda r: [normal(r, (3, 2)), normal(r, (4,))], (0, 1), label="outer-summed"),
    # ---------------------------------------------------------- gradient ops
    Case("ReluGrad", lambda g, x: R.ReluGrad(gradients=g, features=x),
         lambda r: [normal(r, (2, 3)), away(r, (2, 3))], (0, 1)),
    Case("SigmoidGrad", lambda y, dy: R.SigmoidGrad(y=y, dy=dy),
         lambda r: [r.uniform(0.1, 0.9, (2, 3)), normal(r, (2, 3))], (0, 1)),
    Case("TanhGrad", lambda y, dy: R.TanhGrad(y=y, dy=dy),
         lambda r: [r.uniform(-0.9, 0.9, (2, 3)), normal(r, (2, 3))], (0, 1)),
    Case("SqrtGrad", lambda y, dy: R.SqrtGrad(y=y, dy=dy),
         lambda r: [pos(r, (2, 3)), normal(r, (2, 3))], (0, 1)),
    Case("RsqrtGrad", lambda y, dy: R.RsqrtGrad(y=y, dy=dy),
         lambda r: [pos(r, (2, 3)), normal(r, (2, 3))], (0, 1)),
    Case("GeluGrad", lambda g, x: R.GeluGrad(gradients=g, features=x),
         lambda r: [normal(r, (2, 3)), normal(r, (2, 3))], (0, 1), label="exact"),
    Case("GeluGrad", lambda g, x: R.GeluGrad(gradients=g, features=x, approximate=True),
         lambda r: [normal(r, (2, 3)), normal(r, (2, 3))], (0, 1), label="approximate"),
    # ---------------------------------------------------------- reductions
    Case("Sum", lambda x: R.Sum(input=x, reduction_indices=np.array([0, 2], I32)),
         lambda r: [normal(r, (2, 3, 2))]),
    Case("Mean", lambda x: R.Mean(input=x, reduction_indices=np.array([1], I32), keep_dims=True),
         lambda r: [normal(r, (2, 3, 2))]),
    Case("Max", lambda x: R.Max(input=x, reduction_indices=np.array([0, 2], I32)),
         lambda r: [distinct(r, (2, 3, 2))]),
    Case("Min", lambda x: R.Min(input=x, reduction_indices=np.array([1], I32), keep_dims=True),
         lambda r: [distinct(r, (2, 3, 2))]),
    Case("Prod", lambda x: R.Prod(input=x, reduction_indices=np.array([1], I32)),
         lambda r: [away(r, (2, 3), 0.5, 1.5)], label="nonzero"),
    Case("Prod", lambda x: R.Prod(input=x, reduction_indices=np.array([1], I32), keep_dims=True),
         lambda r: [away(r, (3, 4), 0.5, 1.5) * np.array([[1, 0, 1, 1], [0, 1, 0, 1],
                                                          [1, 1, 1, 1]])], label="zeros"),
    Case("Cumsum", lambda x: R.Cumsum(x=x, axis=np.array(1, I32)), lambda r: [normal(r, (2, 4))]),
    Case("Cumsum", lambda x: R.Cumsum(x=x, axis=np.array(0, I32), exclusive=True, reverse=True),
         lambda r: [normal(r, (3, 2))], label="exclusive_reverse"),
    Case("Cumprod", lambda x: R.Cumprod(x=x, axis=np.array(1, I32)),
         lambda r: [away(r, (2, 4), 0.5, 1.5)]),
    Case("Cumprod", lambda x: R.Cumprod(x=x, axis=np.array(0, I32), exclusive=True,
                                        reverse=True),
         lambda r: [away(r, (3, 2), 0.5, 1.5)], label="exclusive_reverse"),
    Case("TopKV2", lambda x: R.TopKV2(input=x, k=np.array(2, I32))[0],
         lambda r: [distinct(r, (2, 4))]),
    Case("UnsortedSegmentSum",
         lambda d: R.UnsortedSegmentSum(data=d, segment_ids=np.array([0, 2, -1, 2, 1], I32),
                                        num_segments=np.array(3, I32)),
         lambda r: [normal(r, (5, 3))]),
    # ---------------------------------------------------------- matrices
    *[Case("MatMul", lambda a, b, ta=ta, tb=tb: R.MatMul(a=a, b=b, transpose_a=ta, transpose_b=tb),
           lambda r, ta=ta, tb=tb: [normal(r, (3, 2) if ta else (2, 3)),
                                    normal(r, (4, 3) if tb else (3, 4))], (0, 1),
           label=f"ta{int(ta)}_tb{int(tb)}") for ta in (False, True) for tb in (False, True)],
    *[Case("BatchMatMulV2",
           lambda x, y, ax=ax, ay=ay: R.BatchMatMulV2(x=x, y=y, adj_x=ax, adj_y=ay),
           lambda r, ax=ax, ay=ay: [normal(r, (2, 1, 3, 2) if ax else (2, 1, 2, 3)),
                                    normal(r, (3, 4, 3) if ay else (3, 3, 4))], (0, 1),
           label=f"adj{int(ax)}{int(ay)}") for ax in (False, True) for ay in (False, True)],
    # ---------------------------------------------------------- shapes and data movement
    Case("Transpose", lambda x: R.Transpose(x=x, perm=np.array([2, 0, 1], I32)),
         lambda r: [normal(r, (2, 3, 4))]),
    Case("Reshape", lambda x: R.Reshape(tensor=x, shape=np.array([3, -1], I32)),
         lambda r: [normal(r, (2, 6))]),
    Case("ExpandDims", lambda x: R.ExpandDims(input=x, dim=np.array(1, I32)),
         lambda r: [normal(r, (2, 3))]),
    Case("Squeeze", lambda x: R.Squeeze(input=x, squeeze_dims=[1]),
         lambda r: [normal(r, (2, 1, 3))]),
    Case("Fill", lambda v: R.Fill(dims=np.array([2, 3], I32), value=v),
         lambda r: [np.asarray(r.standard_normal())]),
    Case("BroadcastTo", lambda x: R.BroadcastTo(input=x, shape=np.array([2, 4, 3], I32)),
         lambda r: [normal(r, (4, 1))]),
    Case("Tile", lambda x: R.Tile(input=x, multiples=np.array([2, 3], I32)),
         lambda r: [normal(r, (2, 2))]),
    Case("Pad", lambda x: R.Pad(input=x, paddings=np.array([[1, 0], [2, 1]], I32)),
         lambda r: [normal(r, (2, 3))]),
    Case("Slice", lambda x: R.Slice(input=x, begin=np.array([1, 0], I32),
                                    size=np.array([2, 3], I32)),
         lambda r: [normal(r, (4, 5))]),
    Case("StridedSlice",
         lambda x: R.StridedSlice(input=x, begin=np.array([1, 0, 4], I32),
                                  end=np.array([4, 0, 0], I32), strides=np.array([2, 1, -2], I32),
                                  end_mask=2, shrink_axis_mask=0),
         lambda r: [normal(r, (4, 3, 5))]),
    Case("StridedSlice",
         lambda x: R.StridedSlice(input=x, begin=np.array([0, 1], I32), end=np.array([0, 2], I32),
                                  strides=np.array([1, 1], I32), ellipsis_mask=1,
                                  new_axis_mask=0, shrink_axis_mask=2),
         lambda r: [normal(r, (2, 3, 4))], label="ellipsis_shrink"),
    Case("StridedSliceGrad",
         lambda dy: R.StridedSliceGrad(shape=np.array([4, 5], I32), begin=np.array([1, 0], I32),
                                       end=np.array([4, 5], I32), strides=np.array([2, 2], I32),
                                       dy=dy),
         lambda r: [normal(r, (2, 3))]),
    Case("ConcatV2", lambda a, b: R.ConcatV2(values=[a, b], axis=np.array(1, I32)),
         lambda r: [normal(r, (2, 3)), normal(r, (2, 1))], (0, 1)),
    Case("Pack", lambda a, b: R.Pack(values=[a, b], axis=1),
         lambda r: [normal(r, (2, 3)), normal(r, (2, 3))], (0, 1)),
    Case("Unpack", lambda x: R.Unpack(value=x, num=3, axis=1), lambda r: [normal(r, (2, 3))]),
    Case("Split", lambda x: R.Split(split_dim=np.array(1, I32), value=x, num_split=2),
         lambda r: [normal(r, (2, 4))]),
    Case("GatherV2", lambda p: R.GatherV2(params=p, indices=np.array([4, 0, 4, 2], I32),
                                          axis=np.array(0, I32)),
         lambda r: [normal(r, (5, 3))], label="axis0"),
    Case("GatherV2", lambda p: R.GatherV2(params=p, indices=np.array([[1, 0], [1, 1]], I32),
                                          axis=np.array(1, I32)),
         lambda r: [normal(r, (2, 3, 2))], label="axis1"),
    Case("GatherV2", lambda p: R.GatherV2(params=p, indices=np.array([[1, 1], [0, 2]], I32),
                                          axis=np.array(1, I32), batch_dims=1),
         lambda r: [normal(r, (2, 3, 2))], label="batch_dims"),
    # ---------------------------------------------------------- neural networks
    Case("Softmax", lambda x: R.Softmax(logits=x), lambda r: [normal(r, (2, 4))]),
    Case("LogSoftmax", lambda x: R.LogSoftmax(logits=x), lambda r: [normal(r, (2, 4))]),
    Case("SoftmaxCrossEntropyWithLogits",
         lambda f, l: R.SoftmaxCrossEntropyWithLogits(features=f, labels=l)[0],
         lambda r: [normal(r, (3, 4)), _one_hot_rows(r, 3, 4)], (0, 1), label="loss"),
    Case("SoftmaxCrossEntropyWithLogits",
         lambda f, l: list(R.SoftmaxCrossEntropyWithLogits(features=f, labels=l)),
         lambda r: [normal(r, (3, 4)), _one_hot_rows(r, 3, 4)], (0, 1), label="both_outputs"),
    Case("SparseSoftmaxCrossEntropyWithLogits",
         lambda f: R.SparseSoftmaxCrossEntropyWithLogits(features=f,
                                                          labels=np.array([0, 3, 1], I32))[0],
         lambda r: [normal(r, (3, 4))], label="loss"),
    Case("SparseSoftmaxCrossEntropyWithLogits",
         lambda f: list(R.SparseSoftmaxCrossEntropyWithLogits(features=f,
                                                               labels=np.array([2, 0], I32))),
         lambda r: [normal(r, (2, 3))], label="both_outputs"),
    Case("BiasAdd", lambda v, b: R.BiasAdd(value=v, bias=b),
         lambda r: [normal(r, (2, 3, 4)), normal(r, (4,))], (0, 1), label="NHWC"),
    Case("BiasAdd", lambda v, b: R.BiasAdd(value=v, bias=b, data_format="NCHW"),
         lambda r: [normal(r, (2, 4, 3)), normal(r, (4,))], (0, 1), label="NCHW"),
    Case("BiasAddGrad", lambda g: R.BiasAddGrad(out_backprop=g), lambda r: [normal(r, (2, 3, 4))]),
    Case("Conv2D", lambda x, f: R.Conv2D(input=x, filter=f, **CONV),
         lambda r: [normal(r, (1, 4, 4, 2)), normal(r, (3, 3, 2, 2))], (0, 1), label="same"),
    Case("Conv2D", lambda x, f: R.Conv2D(input=x, filter=f, strides=[1, 2, 2, 1],
                                         padding="VALID", dilations=[1, 1, 1, 1]),
         lambda r: [normal(r, (2, 5, 5, 1)), normal(r, (2, 2, 1, 3))], (0, 1), label="valid_s2"),
    Case("Conv2DBackpropInput",
         lambda f, dy: R.Conv2DBackpropInput(input_sizes=np.array([1, 4, 4, 2], I32), filter=f,
                                             out_backprop=dy, **CONV),
         lambda r: [normal(r, (3, 3, 2, 2)), normal(r, (1, 4, 4, 2))], (0, 1)),
    Case("Conv2DBackpropFilter",
         lambda x, dy: R.Conv2DBackpropFilter(input=x, filter_sizes=np.array([3, 3, 2, 2], I32),
                                              out_backprop=dy, **CONV),
         lambda r: [normal(r, (1, 4, 4, 2)), normal(r, (1, 4, 4, 2))], (0, 1)),
    Case("MaxPool", lambda x: R.MaxPool(input=x, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1],
                                        padding="VALID"),
         lambda r: [distinct(r, (1, 4, 4, 2))], float32=True, label="valid"),
    Case("MaxPool", lambda x: R.MaxPool(input=x, ksize=[1, 3, 3, 1], strides=[1, 1, 1, 1],
                                        padding="SAME"),
         lambda r: [distinct(r, (1, 3, 3, 2))], float32=True, label="same"),
    Case("AvgPool", lambda x: R.AvgPool(value=x, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1],
                                        padding="VALID"),
         lambda r: [normal(r, (1, 4, 4, 2))], float32=True, label="valid"),
    Case("AvgPool", lambda x: R.AvgPool(value=x, ksize=[1, 3, 3, 1], strides=[1, 2, 2, 1],
                                        padding="SAME"),
         lambda r: [normal(r, (1, 5, 5, 1))], float32=True, label="same"),
    Case("AvgPoolGrad",
         lambda g: R.AvgPoolGrad(orig_input_shape=np.array([1, 4, 4, 2], I32), grad=g,
                                 ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="VALID"),
         lambda r: [normal(r, (1, 2, 2, 2))], float32=True),
    Case("FusedBatchNormV3", _bn(True), _bn_inputs, (0, 1, 2), float32=True, label="training"),
    Case("FusedBatchNormV3", _bn(False), _bn_inputs, (0, 1, 2), float32=True,
         label="inference"),
]

# Ops whose gradient is registered but checked elsewhere.
CHECKED_ELSEWHERE = {
    "ReadVariableOp": "test_variable_gradients (tests/test_gradients.py)",
    **{op: "finite differences in tests/test_transformer_ops.py"
       for op in ("ScaledDotProductAttention", "LayerNorm")},
    "BiasGelu": "numpy and finite differences in tests/test_fused_ops.py",
    **{op: "complex gradients of real losses against TensorFlow in tests/test_complex.py"
       for op in ("Real", "Imag", "Angle", "ComplexAbs", "Conj", "Complex")},
}

# Differentiable ops whose gradient cannot be written with the op set: a
# gradient through them raises LookupError (checked in test_gradients.py).
NO_GRADIENT = {
    "MaxPoolGrad": "needs MaxPoolGradGrad, which the op set does not have",
    "FusedBatchNormGradV3": "needs a fused second-order batch-norm kernel",
    # Made by graph optimizers after gradients are built (as in TensorFlow,
    # where grappler fuses the forward and backward graph alike).
    "ScaledDotProductAttentionGrad": "no second derivative: the gradient kernels are first order",
    "LayerNormGrad": "no second derivative: the gradient kernels are first order",
    "BiasGeluGrad": "no second derivative: the gradient kernel is first order",
    "_FusedMatMul": "only graph optimizers create it, after differentiation",
    "_FusedConv2D": "only graph optimizers create it, after differentiation",
    # As in TensorFlow: a collective's gradient is another collective that
    # every participant would have to run together, which a tape of one
    # device cannot do; data-parallel training all-reduces the gradients.
    **{op: "no gradient in TensorFlow either; all-reduce the gradients instead"
       for op in ("CollectiveReduceV2", "CollectiveReduceScatterV2", "CollectiveGatherV2",
                  "CollectiveBcastSendV2", "CollectiveBcastRecvV2", "CollectiveAllToAllV2")},
    **{op: "no gradient in TensorFlow either (tf.unique's gradient is a LookupError)"
       for op in ("Unique", "UniqueWithCounts", "UniqueV2", "UniqueWithCountsV2")},
    # Their inputs are strings: TensorFlow registers them as not differentiable.
    **{op: "a string input has no gradient (NotDifferentiable in TensorFlow)"
       for op in ("StringToNumber", "DecodeRaw", "UnicodeDecode", "UnicodeDecodeWithOffsets")},
}
