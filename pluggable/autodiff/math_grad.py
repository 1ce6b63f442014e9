"""Gradients of the math ops: elementwise arithmetic, comparisons,
reductions, matrix products and casts (TensorFlow's formulas)."""
from __future__ import annotations

import math

import numpy as np

from ..ops import raw_ops as R
from .grad_util import broadcast_to, ints, mul, neg, reduce_to, reduction_grad_base, scalar
from .registration import NotDifferentiable, RegisterGradient


def conj(x):
    """The complex conjugate of a complex tensor; any other tensor as it is.
    The gradients of complex functions follow TensorFlow's convention: the
    incoming gradient times the conjugate of the derivative."""
    return R.Conj(input=x) if x.dtype.is_complex else x

for _op in ("Less", "LessEqual", "Greater", "GreaterEqual", "Equal", "NotEqual",
            "LogicalAnd", "LogicalOr", "LogicalNot", "ArgMax", "ArgMin", "Floor",
            "FloorDiv", "ZerosLike", "OnesLike", "Range", "Round", "Ceil",
            "BitwiseAnd", "BitwiseOr", "BitwiseXor", "Invert", "LeftShift", "RightShift",
            "Bitcast"):
    NotDifferentiable(_op)


# ------------------------------------------------------------- arithmetic

@RegisterGradient("AddV2")
def _add_grad(op, grad):
    x, y = op.inputs
    return reduce_to(grad, x.shape), reduce_to(grad, y.shape)


RegisterGradient("Add")(_add_grad)  # Add of numbers (strings have no gradient)


@RegisterGradient("Sub")
def _sub_grad(op, grad):
    x, y = op.inputs
    return reduce_to(grad, x.shape), reduce_to(neg(grad), y.shape)


@RegisterGradient("Mul")
def _mul_grad(op, grad):
    x, y = op.inputs
    return reduce_to(mul(grad, conj(y)), x.shape), reduce_to(mul(conj(x), grad), y.shape)


@RegisterGradient("RealDiv")
def _real_div_grad(op, grad):
    x, y = op.inputs
    gx = R.RealDiv(x=grad, y=conj(y))
    gy = mul(grad, conj(R.RealDiv(x=R.RealDiv(x=neg(x), y=y), y=y)))
    return reduce_to(gx, x.shape), reduce_to(gy, y.shape)


RegisterGradient("Div")(_real_div_grad)  # (integer Div has no gradient; TensorFlow's too)


def _select_grad(op, grad, selector):
    x, y = op.inputs
    xmask = selector(x=x, y=y)
    zero = scalar(0, grad)
    gx = R.SelectV2(condition=xmask, t=grad, e=zero)
    gy = R.SelectV2(condition=xmask, t=zero, e=grad)
    return reduce_to(gx, x.shape), reduce_to(gy, y.shape)


@RegisterGradient("Maximum")
def _maximum_grad(op, grad):
    return _select_grad(op, grad, R.GreaterEqual)


@RegisterGradient("Minimum")
def _minimum_grad(op, grad):
    return _select_grad(op, grad, R.LessEqual)


@RegisterGradient("Pow")
def _pow_grad(op, grad):
    x, y = op.inputs
    z = op.outputs[0]
    if x.dtype.is_complex:   # TensorFlow's: conjugates, log(x) where x != 0
        gx = mul(grad, conj(mul(y, R.Pow(x=x, y=R.Sub(x=y, y=scalar(1, y))))))
        nonzero = R.NotEqual(x=x, y=scalar(0, x))
        safe_x = R.SelectV2(condition=nonzero, t=x, e=scalar(1, x))
        log_x = R.SelectV2(condition=nonzero, t=R.Log(x=safe_x), e=scalar(0, x))
        gy = mul(grad, conj(mul(z, log_x)))
        return reduce_to(gx, x.shape), reduce_to(gy, y.shape)
    gx = mul(mul(grad, y), R.Pow(x=x, y=R.Sub(x=y, y=scalar(1, y))))
    positive = R.Greater(x=x, y=scalar(0, x))
    safe_x = R.SelectV2(condition=positive, t=x, e=scalar(1, x))
    log_x = R.SelectV2(condition=positive, t=R.Log(x=safe_x), e=scalar(0, x))
    gy = mul(mul(grad, z), log_x)
    return reduce_to(gx, x.shape), reduce_to(gy, y.shape)


@RegisterGradient("FloorMod")
def _floor_mod_grad(op, grad):
    x, y = op.inputs
    gy = mul(grad, neg(R.FloorDiv(x=x, y=y)))
    return reduce_to(grad, x.shape), reduce_to(gy, y.shape)


# ------------------------------------------------------------- elementwise

@RegisterGradient("Neg")
def _neg_grad(op, grad):
    return neg(grad)


@RegisterGradient("Abs")
def _abs_grad(op, grad):
    return mul(grad, R.Sign(x=op.inputs[0]))


@RegisterGradient("Sign")
def _sign_grad(op, grad):
    return R.ZerosLike(x=op.inputs[0])


@RegisterGradient("Exp")
def _exp_grad(op, grad):
    return mul(grad, conj(op.outputs[0]))


@RegisterGradient("Log")
def _log_grad(op, grad):
    return R.RealDiv(x=grad, y=conj(op.inputs[0]))


@RegisterGradient("Square")
def _square_grad(op, grad):
    return mul(grad, mul(conj(op.inputs[0]), scalar(2, grad)))


@RegisterGradient("Sqrt")
def _sqrt_grad(op, grad):
    return R.SqrtGrad(y=op.outputs[0], dy=grad)


@RegisterGradient("Rsqrt")
def _rsqrt_grad(op, grad):
    return R.RsqrtGrad(y=op.outputs[0], dy=grad)


@RegisterGradient("Tanh")
def _tanh_grad(op, grad):
    return R.TanhGrad(y=conj(op.outputs[0]), dy=grad)


@RegisterGradient("Sigmoid")
def _sigmoid_grad(op, grad):
    return R.SigmoidGrad(y=conj(op.outputs[0]), dy=grad)


@RegisterGradient("Erf")
def _erf_grad(op, grad):
    x = op.inputs[0]
    two_over_root_pi = scalar(2 / math.sqrt(math.pi), x)
    return mul(grad, mul(two_over_root_pi, R.Exp(x=neg(R.Square(x=x)))))


@RegisterGradient("Erfc")
def _erfc_grad(op, grad):
    x = op.inputs[0]
    minus_two_over_root_pi = scalar(-2 / math.sqrt(math.pi), x)
    return mul(grad, mul(minus_two_over_root_pi, R.Exp(x=neg(R.Square(x=x)))))


@RegisterGradient("Sin")
def _sin_grad(op, grad):
    return mul(grad, conj(R.Cos(x=op.inputs[0])))


@RegisterGradient("Cos")
def _cos_grad(op, grad):
    return neg(mul(grad, conj(R.Sin(x=op.inputs[0]))))


@RegisterGradient("Tan")
def _tan_grad(op, grad):
    sec = R.Reciprocal(x=R.Cos(x=op.inputs[0]))
    return mul(grad, conj(R.Square(x=sec)))


def _one_minus_square(x):
    return R.Sub(x=scalar(1, x), y=R.Square(x=x))


@RegisterGradient("Asin")
def _asin_grad(op, grad):
    return mul(grad, conj(R.Rsqrt(x=_one_minus_square(op.inputs[0]))))


@RegisterGradient("Acos")
def _acos_grad(op, grad):
    return neg(mul(grad, conj(R.Rsqrt(x=_one_minus_square(op.inputs[0])))))


@RegisterGradient("Atan")
def _atan_grad(op, grad):
    x = op.inputs[0]
    return R.RealDiv(x=grad, y=conj(R.AddV2(x=scalar(1, x), y=R.Square(x=x))))


@RegisterGradient("Sinh")
def _sinh_grad(op, grad):
    return mul(grad, conj(R.Cosh(x=op.inputs[0])))


@RegisterGradient("Cosh")
def _cosh_grad(op, grad):
    return mul(grad, conj(R.Sinh(x=op.inputs[0])))


@RegisterGradient("Asinh")
def _asinh_grad(op, grad):
    return R.RealDiv(x=grad, y=conj(R.Cosh(x=op.outputs[0])))


@RegisterGradient("Acosh")
def _acosh_grad(op, grad):
    return R.RealDiv(x=grad, y=conj(R.Sinh(x=op.outputs[0])))


@RegisterGradient("Atanh")
def _atanh_grad(op, grad):
    return R.RealDiv(x=grad, y=conj(_one_minus_square(op.inputs[0])))


@RegisterGradient("Expm1")
def _expm1_grad(op, grad):
    return mul(grad, conj(R.Exp(x=op.inputs[0])))


@RegisterGradient("Log1p")
def _log1p_grad(op, grad):
    x = op.inputs[0]
    return R.RealDiv(x=grad, y=conj(R.AddV2(x=scalar(1, x), y=x)))


@RegisterGradient("Reciprocal")
def _reciprocal_grad(op, grad):
    return neg(mul(grad, conj(R.Square(x=op.outputs[0]))))


# Gradients of the gradient ops (for second derivatives).

@RegisterGradient("SqrtGrad")
def _sqrt_grad_grad(op, grad):
    y, dy = op.inputs                       # z = dy / (2y)
    ga = R.RealDiv(x=grad, y=y)
    gy = neg(mul(op.outputs[0], ga))        # dz/dy = -z / y
    return gy, mul(ga, scalar(0.5, y))


@RegisterGradient("RsqrtGrad")
def _rsqrt_grad_grad(op, grad):
    y, dy = op.inputs                       # z = -dy * y^3 / 2
    y2 = R.Square(x=y)
    gy = mul(grad, mul(dy, mul(y2, scalar(-1.5, y))))
    gdy = mul(grad, mul(mul(y2, y), scalar(-0.5, y)))
    return gy, gdy


@RegisterGradient("TanhGrad")
def _tanh_grad_grad(op, grad):
    y, dy = op.inputs                       # z = dy * (1 - y^2)
    gy = mul(grad, mul(dy, mul(y, scalar(-2, y))))
    return gy, R.TanhGrad(y=y, dy=grad)


@RegisterGradient("SigmoidGrad")
def _sigmoid_grad_grad(op, grad):
    y, dy = op.inputs                       # z = dy * y * (1 - y)
    one_minus_2y = R.Sub(x=scalar(1, y), y=mul(y, scalar(2, y)))
    return mul(grad, mul(dy, one_minus_2y)), R.SigmoidGrad(y=y, dy=grad)


# ------------------------------------------------------------- reductions

@RegisterGradient("Sum")
def _sum_grad(op, grad):
    g, _ = reduction_grad_base(op, grad)
    return broadcast_to(g, op.inputs[0].shape), None


@RegisterGradient("Mean")
def _mean_grad(op, grad):
    g, axes = reduction_grad_base(op, grad)
    x = op.inputs[0]
    count = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    g = R.RealDiv(x=g, y=scalar(max(count, 1), g))
    return broadcast_to(g, x.shape), None


def _min_or_max_grad(op, grad):
    x = op.inputs[0]
    g, axes = reduction_grad_base(op, grad)
    y = R.Reshape(tensor=op.outputs[0], shape=ints(g.shape))
    indicators = R.Cast(x=R.Equal(x=x, y=y), DstT=grad.dtype)
    num_selected = R.Sum(input=indicators, reduction_indices=ints(axes), keep_dims=True)
    return mul(R.RealDiv(x=indicators, y=num_selected), g), None


RegisterGradient("Max")(_min_or_max_grad)
RegisterGradient("Min")(_min_or_max_grad)


@RegisterGradient("Prod")
def _prod_grad(op, grad):
    # The product of the other elements of each reduced slice, written so a
    # zero in the input is not divided by: with no zero in the slice it is
    # prod / x; with one zero, the product of the non-zero elements at the
    # zero and 0 elsewhere; with more, 0.
    x = op.inputs[0]
    g, axes = reduction_grad_base(op, grad)
    zero = scalar(0, x)
    is_zero = R.Equal(x=x, y=zero)
    n_zero = R.Sum(input=R.Cast(x=is_zero, DstT=x.dtype), reduction_indices=ints(axes),
                   keep_dims=True)
    safe = R.SelectV2(condition=is_zero, t=scalar(1, x), e=x)
    prod_nonzero = R.Prod(input=safe, reduction_indices=ints(axes), keep_dims=True)
    no_zero = R.RealDiv(x=prod_nonzero, y=safe)
    one_zero = R.SelectV2(condition=is_zero, t=prod_nonzero, e=zero)
    others = R.SelectV2(condition=R.Equal(x=n_zero, y=zero), t=no_zero,
                        e=R.SelectV2(condition=R.Equal(x=n_zero, y=scalar(1, x)),
                                     t=one_zero, e=zero))
    return mul(broadcast_to(g, x.shape), conj(others)), None


@RegisterGradient("Cumsum")
def _cumsum_grad(op, grad):
    return R.Cumsum(x=grad, axis=op.inputs[1], exclusive=op.get_attr("exclusive"),
                    reverse=not op.get_attr("reverse")), None


@RegisterGradient("Cumprod")
def _cumprod_grad(op, grad):
    # TensorFlow's formula: the running products times the incoming gradient,
    # summed the other way, over x (inputs must be nonzero, as there)
    x, axis = op.inputs
    ex, rev = op.get_attr("exclusive"), op.get_attr("reverse")
    prod = R.Cumprod(x=x, axis=axis, exclusive=ex, reverse=rev)
    out = R.Cumsum(x=mul(prod, grad), axis=axis, exclusive=ex, reverse=not rev)
    return R.RealDiv(x=out, y=x), None


@RegisterGradient("AddN")
def _add_n_grad(op, grad):
    return [grad] * len(op.inputs)


# ------------------------------------------------------------- matrices

@RegisterGradient("MatMul")
def _matmul_grad(op, grad):
    a, b = (conj(t) for t in op.inputs)
    ta, tb = op.get_attr("transpose_a"), op.get_attr("transpose_b")
    if not ta and not tb:
        return (R.MatMul(a=grad, b=b, transpose_b=True), R.MatMul(a=a, b=grad, transpose_a=True))
    if not ta and tb:
        return (R.MatMul(a=grad, b=b), R.MatMul(a=grad, b=a, transpose_a=True))
    if ta and not tb:
        return (R.MatMul(a=b, b=grad, transpose_b=True), R.MatMul(a=a, b=grad))
    return (R.MatMul(a=b, b=grad, transpose_a=True, transpose_b=True),
            R.MatMul(a=grad, b=a, transpose_a=True, transpose_b=True))


@RegisterGradient("BatchMatMulV2")
def _batch_matmul_grad(op, grad):
    x, y = op.inputs
    ax, ay = op.get_attr("adj_x"), op.get_attr("adj_y")

    def bmm(a, b, adj_a=False, adj_b=False):
        return R.BatchMatMulV2(x=a, y=b, adj_x=adj_a, adj_y=adj_b)
    if not ax and not ay:
        gx, gy = bmm(grad, y, adj_b=True), bmm(x, grad, adj_a=True)
    elif not ax and ay:
        gx, gy = bmm(grad, y), bmm(grad, x, adj_a=True)
    elif ax and not ay:
        gx, gy = bmm(y, grad, adj_b=True), bmm(x, grad)
    else:
        gx, gy = bmm(y, grad, True, True), bmm(grad, x, True, True)
    return reduce_to(gx, x.shape), reduce_to(gy, y.shape)


# ------------------------------------------------------------- casts

@RegisterGradient("Cast")
def _cast_grad(op, grad):
    src = op.inputs[0].dtype
    if (src.is_floating or src.is_complex) and (grad.dtype.is_floating or grad.dtype.is_complex):
        return R.Cast(x=grad, DstT=src)
    return None


@RegisterGradient("CheckNumerics")
def _check_numerics_grad(op, grad):
    message = ("Not a number (NaN) or infinity (Inf) values detected in gradient. "
               + op.get_attr("message"))
    return R.CheckNumerics(tensor=grad, message=message)



# ------------------------------------------------------------- complex parts

def _complex_of(re, im):
    from ..framework import dtypes
    out = dtypes.complex64 if re.dtype == dtypes.float32 else dtypes.complex128
    return R.Complex(real=re, imag=im, Tout=out)


@RegisterGradient("Real")
def _real_grad(op, grad):
    return _complex_of(grad, R.ZerosLike(x=grad))


@RegisterGradient("Imag")
def _imag_grad(op, grad):
    return _complex_of(R.ZerosLike(x=grad), grad)


@RegisterGradient("Conj")
def _conj_grad(op, grad):
    return R.Conj(input=grad)


@RegisterGradient("Complex")
def _complex_grad(op, grad):
    re, im = op.inputs
    parts = re.dtype
    return (reduce_to(R.Real(input=grad, Tout=parts), re.shape),
            reduce_to(R.Imag(input=grad, Tout=parts), im.shape))


@RegisterGradient("ComplexAbs")
def _complex_abs_grad(op, grad):
    # grad * x / |x|, and 0 where x is 0 (TensorFlow's div_no_nan)
    x, y = op.inputs[0], op.outputs[0]
    zeros = R.ZerosLike(x=grad)
    nonzero = R.NotEqual(x=y, y=scalar(0, y))
    safe = R.SelectV2(condition=nonzero, t=y, e=scalar(1, y))
    g = mul(_complex_of(R.RealDiv(x=grad, y=safe), zeros), x)
    return R.SelectV2(condition=nonzero, t=g, e=R.ZerosLike(x=x))


@RegisterGradient("Angle")
def _angle_grad(op, grad):
    # -grad / (imag(x) + i real(x)), as TensorFlow's
    x = op.inputs[0]
    parts = grad.dtype
    re, im = R.Real(input=x, Tout=parts), R.Imag(input=x, Tout=parts)
    z = R.Reciprocal(x=_complex_of(im, re))
    return neg(mul(_complex_of(grad, R.ZerosLike(x=grad)), z))
