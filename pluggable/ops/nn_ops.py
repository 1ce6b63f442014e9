"""Neural-network ops (the implementation behind ``pg.nn``)."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..framework import errors
from ..framework.tensor import Tensor
from ..runtime.tensors import convert_to_tensor
from . import array_ops, math_ops, random_ops, raw_ops
from .math_ops import transpose


def relu(features: Any) -> Tensor:
    """max(features, 0) (op Relu)."""
    return raw_ops.Relu(features=features)


def softmax(logits: Any, axis: int = -1) -> Tensor:
    """Softmax over `axis` (default last) (op Softmax)."""
    if axis == -1 and type(logits) is Tensor:  # (the common call, without a closure)
        return raw_ops.Softmax(logits=logits)
    return _last_axis(lambda x: raw_ops.Softmax(logits=x), logits, axis)


def _quad(v: Any, name: str) -> list[int]:
    if isinstance(v, int):
        return [1, v, v, 1]
    v = list(v)
    if len(v) == 2:
        return [1, v[0], v[1], 1]
    if len(v) == 4:
        return v
    raise errors.InvalidArgumentError(f"conv2d: {name} must be an int, 2 or 4 values, got {v}")


def conv2d(input: Any, filters: Any, strides: Any = 1, padding: str = "VALID",  # noqa: A002
           data_format: str = "NHWC", dilations: Any = 1,
           explicit_paddings: Sequence[int] = ()) -> Tensor:
    """2-D convolution of NHWC `input` with HWIO `filters` (op Conv2D)."""
    return raw_ops.Conv2D(input=input, filter=filters, strides=_quad(strides, "strides"),
                          padding=padding, data_format=data_format,
                          dilations=_quad(dilations, "dilations"),
                          explicit_paddings=list(explicit_paddings))


# ----------------------------------------------------------- activations

def gelu(features: Any, approximate: bool = False, name: str | None = None) -> Tensor:
    """x * Phi(x), or its tanh approximation (op Gelu)."""
    return raw_ops.Gelu(features=features, approximate=approximate)


def relu6(features: Any, name: str | None = None) -> Tensor:
    """min(max(features, 0), 6) (ops Relu, Minimum)."""
    x = raw_ops.Relu(features=features)
    return raw_ops.Minimum(x=x, y=convert_to_tensor(6, x.dtype))


def leaky_relu(features: Any, alpha: float = 0.2, name: str | None = None) -> Tensor:
    """features where positive, alpha * features elsewhere (0 <= alpha <= 1)."""
    x = convert_to_tensor(features)
    scaled = raw_ops.Mul(x=x, y=convert_to_tensor(alpha, x.dtype))
    return raw_ops.Maximum(x=x, y=scaled)


def elu(features: Any, name: str | None = None) -> Tensor:
    """features where positive, exp(features) - 1 elsewhere (ops Greater,
    Minimum, Expm1, SelectV2)."""
    x = convert_to_tensor(features)
    zero = convert_to_tensor(0, x.dtype)
    negative = raw_ops.Expm1(x=raw_ops.Minimum(x=x, y=zero))
    return raw_ops.SelectV2(condition=raw_ops.Greater(x=x, y=zero), t=x, e=negative)


_SELU_ALPHA, _SELU_SCALE = 1.6732632423543772, 1.0507009873554805


def selu(features: Any, name: str | None = None) -> Tensor:
    """scale * elu with alpha (1.6733, scale 1.0507: the self-normalizing
    constants TensorFlow uses)."""
    x = convert_to_tensor(features)
    zero = convert_to_tensor(0, x.dtype)
    negative = raw_ops.Mul(x=convert_to_tensor(_SELU_ALPHA, x.dtype),
                           y=raw_ops.Expm1(x=raw_ops.Minimum(x=x, y=zero)))
    e = raw_ops.SelectV2(condition=raw_ops.Greater(x=x, y=zero), t=x, e=negative)
    return raw_ops.Mul(x=convert_to_tensor(_SELU_SCALE, x.dtype), y=e)


def silu(features: Any, beta: float = 1.0, name: str | None = None) -> Tensor:
    """features * sigmoid(beta * features) (swish)."""
    x = convert_to_tensor(features)
    bx = x if beta == 1.0 else raw_ops.Mul(x=x, y=convert_to_tensor(beta, x.dtype))
    return raw_ops.Mul(x=x, y=raw_ops.Sigmoid(x=bx))


swish = silu


def softplus(features: Any, name: str | None = None) -> Tensor:
    """log(1 + exp(features)), computed as TensorFlow's kernel does: the
    features themselves above -log(eps) + 2, where the log would round to
    them, else log1p(exp(x)) (ops Greater, Minimum, Exp, Log1p, SelectV2).
    Its gradient is sigmoid(features)."""
    x = convert_to_tensor(features)
    if not x.dtype.is_floating:
        raise errors.InvalidArgumentError(
            f"softplus needs a floating-point tensor, got {x.dtype.name}; cast it first",
            op="Softplus")
    eps = float(np.finfo(np.float32 if x.dtype.size < 4 else x.dtype.as_numpy_dtype).eps)
    threshold = convert_to_tensor(-np.log(eps) + 2.0, x.dtype)
    large = raw_ops.Greater(x=x, y=threshold)
    # clamped so that the branch not taken stays finite (and so its gradient)
    small = raw_ops.Log1p(x=raw_ops.Exp(x=raw_ops.Minimum(x=x, y=threshold)))
    return raw_ops.SelectV2(condition=large, t=x, e=small)


def _last_axis(op, logits: Any, axis: int | None) -> Tensor:
    """op over `axis` (moved to the end and back when it is not last)."""
    x = convert_to_tensor(logits)
    ax = -1 if axis is None else axis
    if ax in (-1, x.ndim - 1):
        return op(x)
    perm = list(range(x.ndim))
    ax %= x.ndim
    perm[ax], perm[-1] = perm[-1], perm[ax]
    return transpose(op(transpose(x, perm)), perm)


def log_softmax(logits: Any, axis: int | None = None, name: str | None = None) -> Tensor:
    """log(softmax(logits)) over `axis` (default last) (op LogSoftmax)."""
    if (axis is None or axis == -1) and type(logits) is Tensor:
        return raw_ops.LogSoftmax(logits=logits)
    return _last_axis(lambda x: raw_ops.LogSoftmax(logits=x), logits, axis)


def bias_add(value: Any, bias: Any, data_format: str | None = None,
             name: str | None = None) -> Tensor:
    """value + bias along the channel dimension (op BiasAdd)."""
    if data_format is None:
        return raw_ops.BiasAdd(value=value, bias=bias)
    fmt = "NCHW" if data_format is not None and data_format.startswith("NC") else "NHWC"
    return raw_ops.BiasAdd(value=value, bias=bias, data_format=fmt)


# ---------------------------------------------------------------- pooling

def _pool_args(v: Any, name: str, fmt: str) -> list[int]:
    if isinstance(v, int):
        v = [v, v]
    v = list(v)
    if len(v) == 1:
        v = v * 2
    if len(v) == 2:
        return [1, 1] + v if fmt.startswith("NC") else [1] + v + [1]
    if len(v) == 4:
        return v
    raise errors.InvalidArgumentError(f"{name} must be an int, or 1, 2 or 4 values, got {v}")


def max_pool2d(input: Any, ksize: Any, strides: Any, padding: str,  # noqa: A002
               data_format: str = "NHWC", name: str | None = None) -> Tensor:
    """Maximum over each window (op MaxPool)."""
    return raw_ops.MaxPool(input=input, ksize=_pool_args(ksize, "ksize", data_format),
                           strides=_pool_args(strides, "strides", data_format),
                           padding=padding, data_format=data_format)


def avg_pool2d(input: Any, ksize: Any, strides: Any, padding: str,  # noqa: A002
               data_format: str = "NHWC", name: str | None = None) -> Tensor:
    """Mean over each window, padding excluded (op AvgPool)."""
    return raw_ops.AvgPool(value=input, ksize=_pool_args(ksize, "ksize", data_format),
                           strides=_pool_args(strides, "strides", data_format),
                           padding=padding, data_format=data_format)


max_pool = max_pool2d
avg_pool = avg_pool2d


def conv2d_transpose(input: Any, filters: Any, output_shape: Sequence[int],  # noqa: A002
                     strides: Any, padding: str = "SAME", data_format: str = "NHWC",
                     dilations: Any = None, name: str | None = None) -> Tensor:
    """The transpose (gradient) of conv2d: `filters` is [h, w, out, in]
    (op Conv2DBackpropInput)."""
    return raw_ops.Conv2DBackpropInput(
        input_sizes=np.asarray(output_shape, np.int32), filter=filters, out_backprop=input,
        strides=_quad(strides, "strides") if data_format == "NHWC" else
        _pool_args(strides, "strides", data_format),
        padding=padding, data_format=data_format,
        dilations=[1, 1, 1, 1] if dilations is None else _quad(dilations, "dilations"))


# ----------------------------------------------------- normalization, ...

def fused_batch_norm(x: Any, scale: Any, offset: Any, mean: Any = None, variance: Any = None,
                     epsilon: float = 0.001, data_format: str = "NHWC", is_training: bool = True,
                     exponential_avg_factor: float = 1.0, name: str | None = None):
    """Batch normalization over all but the channel dimension (op
    FusedBatchNormV3). Returns (y, mean, variance): the batch statistics
    (variance unbiased) when training, else `mean` and `variance`."""
    empty = np.zeros((0,), np.float32)
    out = raw_ops.FusedBatchNormV3(
        x=x, scale=scale, offset=offset, mean=empty if mean is None else mean,
        variance=empty if variance is None else variance, epsilon=epsilon,
        exponential_avg_factor=exponential_avg_factor, data_format=data_format,
        is_training=is_training)
    return out[0], out[1], out[2]


def batch_normalization(x: Any, mean: Any, variance: Any, offset: Any, scale: Any,
                        variance_epsilon: float, name: str | None = None) -> Tensor:
    """(x - mean) * scale / sqrt(variance + epsilon) + offset, broadcast."""
    x = convert_to_tensor(x)
    inv = math_ops.rsqrt(math_ops.add(variance, convert_to_tensor(variance_epsilon, x.dtype)))
    if scale is not None:
        inv = math_ops.multiply(inv, scale)
    y = math_ops.multiply(math_ops.subtract(x, mean), inv)
    return y if offset is None else math_ops.add(y, offset)


def moments(x: Any, axes: Sequence[int], keepdims: bool = False, name: str | None = None):
    """(mean, variance) over `axes` (the variance is the biased one)."""
    m = math_ops.reduce_mean(x, axes, keepdims=True)
    v = math_ops.reduce_mean(math_ops.squared_difference(x, m), axes, keepdims=keepdims)
    return (m if keepdims else math_ops.reduce_mean(x, axes)), v


def l2_normalize(x: Any, axis: Any = None, epsilon: float = 1e-12,
                 name: str | None = None) -> Tensor:
    """x / sqrt(max(sum(x ** 2, axis), epsilon))."""
    x = convert_to_tensor(x)
    ss = math_ops.reduce_sum(math_ops.square(x), axis, keepdims=True)
    ss = math_ops.maximum(ss, convert_to_tensor(epsilon, x.dtype))
    return math_ops.multiply(x, math_ops.rsqrt(ss))


# ------------------------------------------------------------ losses

def softmax_cross_entropy_with_logits(labels: Any, logits: Any, axis: int = -1,
                                      name: str | None = None) -> Tensor:
    """-sum(labels * log_softmax(logits)) per row of rank-2 logits (op
    SoftmaxCrossEntropyWithLogits)."""
    logits = convert_to_tensor(logits)
    if axis not in (-1, logits.ndim - 1):
        raise errors.UnimplementedError("softmax_cross_entropy_with_logits: only the last axis "
                                        "is supported", op="SoftmaxCrossEntropyWithLogits")
    labels = convert_to_tensor(labels, logits.dtype) if not isinstance(labels, Tensor) else labels
    return raw_ops.SoftmaxCrossEntropyWithLogits(features=logits, labels=labels)[0]


def sparse_softmax_cross_entropy_with_logits(labels: Any, logits: Any,
                                             name: str | None = None) -> Tensor:
    """-log_softmax(logits)[label] per row (op
    SparseSoftmaxCrossEntropyWithLogits); a label outside [0, classes) is an error."""
    return raw_ops.SparseSoftmaxCrossEntropyWithLogits(features=logits, labels=labels)[0]


def top_k(input: Any, k: int = 1, sorted: bool = True, name: str | None = None):  # noqa: A002
    """The k largest entries of the last axis (see ``pg.math.top_k``)."""
    return math_ops.top_k(input, k, sorted)


def embedding_lookup(params: Any, ids: Any, name: str | None = None) -> Tensor:
    """Rows of `params` at `ids` (op GatherV2 on axis 0)."""
    return array_ops.gather(params, ids)


def dropout(x: Any, rate: float, noise_shape: Any = None, seed: int | None = None,
            name: str | None = None) -> Tensor:
    """Sets each element to 0 with probability `rate` and scales the others
    by 1 / (1 - rate), using the global generator (or `seed`)."""
    x = convert_to_tensor(x)
    if not 0 <= rate < 1:
        raise errors.InvalidArgumentError(f"dropout: rate must be in [0, 1), got {rate}")
    if rate == 0:
        return x
    shape = x.shape if noise_shape is None else tuple(noise_shape)
    u = random_ops.uniform(shape, dtype=x.dtype, seed=seed)
    keep = math_ops.greater_equal(u, convert_to_tensor(rate, x.dtype))
    scaled = math_ops.multiply(x, convert_to_tensor(1.0 / (1.0 - rate), x.dtype))
    return raw_ops.SelectV2(condition=keep, t=scaled, e=convert_to_tensor(0, x.dtype))
