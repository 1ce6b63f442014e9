"""Definitions of the neural-network ops (TensorFlow's names, inputs,
attributes, defaults and allowed types; Gelu and GeluGrad are pluggable's
own), with shape functions and sample calls (``examples``)."""
from __future__ import annotations

import numpy as np

from ..framework import dtypes
from .definitions import broadcast_shapes, conv2d_geometry
from .math_op_defs import FLOAT, NUMBER, REAL, with_complex
from .op_util import define, err, ints, sample, same_shape, same_shape_pair, same_shapes
from .pooling import (array_from_nhwc, array_to_nhwc, channels_first, from_nhwc,
                      max_pool_nhwc, nhwc_attrs, pool_geometry, to_nhwc)

_POOL_ATTRS = ["ksize: list(int) >= 4", "strides: list(int) >= 4"]
_CONV_ATTRS = ["strides: list(int)", "use_cudnn_on_gpu: bool = true",
               "padding: {'SAME', 'VALID', 'EXPLICIT'}", "explicit_paddings: list(int) = []",
               "data_format: {'NHWC', 'NCHW'} = 'NHWC'", "dilations: list(int) = [1, 1, 1, 1]"]
_BN_FORMATS = "{'NHWC', 'NCHW', 'NDHWC', 'NCDHW'}"


# ------------------------------------------------------------------ pooling

def _pool(op):
    def fn(shapes, attrs, values):
        g = pool_geometry(op, tuple(shapes[0]), attrs)
        return [from_nhwc(g.out_nhwc, attrs["data_format"])]
    return fn


def _max_pool_grad(shapes, attrs, values):
    op = "MaxPoolGrad"
    g = pool_geometry(op, tuple(shapes[0]), attrs)
    want = from_nhwc(g.out_nhwc, attrs["data_format"])
    for n, s in (("orig_output", shapes[1]), ("grad", shapes[2])):
        if tuple(s) != want:
            raise err(op, f"{n} has shape {list(s)}, expected the pooled shape {list(want)} "
                      f"of orig_input {list(shapes[0])}")
    return [tuple(shapes[0])]


def _avg_pool_grad(shapes, attrs, values):
    op = "AvgPoolGrad"
    shape = tuple(ints(op, "orig_input_shape", values["orig_input_shape"]))
    if len(shape) != 4 or min(shape) < 0:
        raise err(op, f"orig_input_shape must be 4 non-negative sizes, got {list(shape)}")
    g = pool_geometry(op, shape, attrs)
    want = from_nhwc(g.out_nhwc, attrs["data_format"])
    if tuple(shapes[1]) != want:
        raise err(op, f"grad has shape {list(shapes[1])}, expected the pooled shape "
                  f"{list(want)} of an input of shape {list(shape)}")
    return [shape]


# ----------------------------------------------------------- conv backprop

def conv_backprop_geometry(op: str, in_shape: tuple, f_shape: tuple, dy_shape: tuple,
                           attrs: dict):
    """Checks that `dy_shape` is the Conv2D output of `in_shape` and
    `f_shape` (both in the op's data format / HWIO); returns the NHWC
    output shape and padding (top, left) of that forward convolution."""
    fmt = attrs["data_format"]
    if len(in_shape) != 4 or len(f_shape) != 4 or len(dy_shape) != 4:
        raise err(op, f"input, filter and out_backprop must be rank 4, got {list(in_shape)}, "
                  f"{list(f_shape)} and {list(dy_shape)}")
    out, pads = conv2d_geometry(to_nhwc(in_shape, fmt), tuple(f_shape), nhwc_attrs(attrs), op)
    if out != to_nhwc(dy_shape, fmt):
        raise err(op, f"out_backprop has shape {list(dy_shape)}, but a convolution of input "
                  f"{list(in_shape)} with filter {list(f_shape)} gives "
                  f"{list(from_nhwc(out, fmt))}")
    return out, pads


def _sizes(op: str, name: str, value, dy_shape: tuple, other: tuple, fmt: str,
           is_input: bool) -> tuple:
    s = ints(op, name, value)
    if len(s) == 2 and is_input:  # spatial sizes only: batch and depth from the others
        if len(dy_shape) != 4 or len(other) != 4:
            raise err(op, f"filter and out_backprop must be rank 4, got {list(other)} and "
                      f"{list(dy_shape)}")
        n, c = (dy_shape[0], other[2])
        s = list(from_nhwc((n, s[0], s[1], c), fmt))
    if len(s) != 4 or min(s) < 0:
        raise err(op, f"{name} must be 4 non-negative sizes, got {s}")
    return tuple(s)


def _conv_backprop_input(shapes, attrs, values):
    op = "Conv2DBackpropInput"
    f, dy = tuple(shapes[1]), tuple(shapes[2])
    in_shape = _sizes(op, "input_sizes", values["input_sizes"], dy, f, attrs["data_format"], True)
    conv_backprop_geometry(op, in_shape, f, dy, attrs)
    return [in_shape]


def _conv_backprop_filter(shapes, attrs, values):
    op = "Conv2DBackpropFilter"
    x, dy = tuple(shapes[0]), tuple(shapes[2])
    f_shape = _sizes(op, "filter_sizes", values["filter_sizes"], dy, x, attrs["data_format"],
                     False)
    conv_backprop_geometry(op, x, f_shape, dy, attrs)
    return [f_shape]


# ---------------------------------------------------------- batch norm, ...

def bn_channels(op: str, shape: tuple, fmt: str) -> int:
    rank = 5 if "D" in fmt else 4
    if len(shape) != rank:
        raise err(op, f"x must be rank {rank} for data_format {fmt}, got shape {list(shape)}")
    return shape[1] if channels_first(fmt) else shape[-1]


def _vector(op: str, name: str, shape: tuple, c: int, empty_ok: bool = False) -> None:
    if tuple(shape) == (c,) or (empty_ok and tuple(shape) == (0,)):
        return
    raise err(op, f"{name} must be a vector of the {c} channels of x, got shape {list(shape)}")


def _batch_norm(shapes, attrs, values):
    op = "FusedBatchNormV3"
    c = bn_channels(op, tuple(shapes[0]), attrs["data_format"])
    training = attrs["is_training"]
    for name, s in zip(("scale", "offset", "mean", "variance"), shapes[1:5]):
        _vector(op, name, s, c, empty_ok=training and name in ("mean", "variance"))
    if training and attrs["exponential_avg_factor"] != 1.0:
        for name, s in zip(("mean", "variance"), shapes[3:5]):
            _vector(op, name, s, c)  # running statistics are blended in
    return [tuple(shapes[0]), (c,), (c,), (c,), (c,), ()]


def _batch_norm_grad(shapes, attrs, values):
    op = "FusedBatchNormGradV3"
    same_shapes(op, ("y_backprop", "x"), shapes[:2])
    c = bn_channels(op, tuple(shapes[1]), attrs["data_format"])
    for name, s in zip(("scale", "reserve_space_1", "reserve_space_2"), shapes[2:5]):
        _vector(op, name, s, c)
    return [tuple(shapes[1]), (c,), (c,), (0,), (0,)]


def _log_softmax(shapes, attrs, values):
    if len(shapes[0]) < 1:
        raise err("LogSoftmax", "logits must have rank >= 1, got a scalar")
    return [tuple(shapes[0])]


def _xent(shapes, attrs, values):
    op = "SoftmaxCrossEntropyWithLogits"
    s = broadcast_shapes(op, tuple(shapes[0]), tuple(shapes[1]))
    if len(s) != 2:
        raise err(op, f"features and labels must be rank 2 ([batch, classes]) after "
                  f"broadcasting, got shapes {list(shapes[0])} and {list(shapes[1])}")
    return [(s[0],), s]


def _sparse_xent(shapes, attrs, values):
    op = "SparseSoftmaxCrossEntropyWithLogits"
    f, lab = tuple(shapes[0]), tuple(shapes[1])
    if len(f) != 2:
        raise err(op, f"features must be rank 2 ([batch, classes]), got shape {list(f)}")
    if lab != (f[0],):
        raise err(op, f"labels must be a vector of the batch size {f[0]}, got shape {list(lab)}")
    return [(f[0],), f]


def bias_channel(op: str, shape: tuple, fmt: str) -> int:
    if len(shape) < 2:
        raise err(op, f"the input must be at least rank 2, got shape {list(shape)}")
    return 1 if fmt == "NCHW" else len(shape) - 1


def _bias_add(shapes, attrs, values):
    op = "BiasAdd"
    v, b = tuple(shapes[0]), tuple(shapes[1])
    ch = bias_channel(op, v, attrs["data_format"])
    if b != (v[ch],):
        raise err(op, f"bias must be a vector of the {v[ch]} channels of value (shape "
                  f"{list(v)}, data_format {attrs['data_format']}), got shape {list(b)}")
    return [v]


def _bias_add_grad(shapes, attrs, values):
    v = tuple(shapes[0])
    return [(v[bias_channel("BiasAddGrad", v, attrs["data_format"])],)]


# ------------------------------------------------------------------- examples

def _ex_bias_add(rng, types):
    T = types["T"]
    return [({"value": sample(rng, T, (2, 3, 4)), "bias": sample(rng, T, (4,))}, {}),
            ({"value": sample(rng, T, (2, 3, 2)), "bias": sample(rng, T, (3,))},
             {"data_format": "NCHW"}),
            ({"value": sample(rng, T, (0, 5)), "bias": sample(rng, T, (5,))}, {})]


def _ex_bias_add_grad(rng, types):
    T = types["T"]
    return [({"out_backprop": sample(rng, T, (2, 3, 4))}, {}),
            ({"out_backprop": sample(rng, T, (2, 3, 2, 2))}, {"data_format": "NCHW"})]


def _pool_cases():
    return [((2, 5, 6, 3), [1, 2, 2, 1], [1, 2, 2, 1], "VALID", "NHWC"),
            ((1, 5, 5, 2), [1, 3, 3, 1], [1, 2, 2, 1], "SAME", "NHWC"),
            ((1, 2, 4, 4), [1, 1, 2, 2], [1, 1, 1, 1], "VALID", "NCHW")]


def _ex_pool(arg, explicit=False):
    def ex(rng, types):
        T = types["T"]
        out = [({arg: sample(rng, T, s)}, {"ksize": k, "strides": st, "padding": p,
                                           "data_format": f})
               for s, k, st, p, f in _pool_cases()]
        if explicit:
            out.append(({arg: sample(rng, T, (1, 4, 4, 1))},
                        {"ksize": [1, 2, 2, 1], "strides": [1, 2, 2, 1], "padding": "EXPLICIT",
                         "explicit_paddings": [0, 0, 1, 1, 0, 1, 0, 0]}))
        return out
    return ex


def _ex_max_pool_grad(rng, types):
    T = types["T"]
    out = []
    for s, k, st, p, f in _pool_cases():
        x = sample(rng, T, s)
        attrs = {"ksize": k, "strides": st, "padding": p, "data_format": f}
        g = pool_geometry("MaxPool", s, attrs)
        y = array_from_nhwc(max_pool_nhwc(array_to_nhwc(x, f), g), f)  # a consistent orig_output
        out.append(({"orig_input": x, "orig_output": y, "grad": sample(rng, T, y.shape)}, attrs))
    return out


def _ex_avg_pool_grad(rng, types):
    T = types["T"]
    out = []
    for s, k, st, p, f in _pool_cases():
        attrs = {"ksize": k, "strides": st, "padding": p, "data_format": f}
        g = pool_geometry("AvgPoolGrad", s, attrs)
        dy = sample(rng, T, from_nhwc(g.out_nhwc, f))
        out.append(({"orig_input_shape": np.asarray(s, np.int32), "grad": dy}, attrs))
    return out


_CONV_CASES = [((2, 5, 5, 3), (3, 3, 3, 2), [1, 1, 1, 1], "SAME", "NHWC", [1, 1, 1, 1]),
               ((1, 7, 6, 2), (2, 3, 2, 4), [1, 2, 2, 1], "VALID", "NHWC", [1, 1, 1, 1]),
               ((1, 2, 6, 6), (3, 3, 2, 1), [1, 1, 1, 1], "VALID", "NCHW", [1, 1, 2, 2])]


def _conv_case(rng, T, case):
    xs, fs, strides, padding, fmt, dil = case
    attrs = {"strides": strides, "padding": padding, "data_format": fmt, "dilations": dil}
    out, _ = conv_backprop_geometry("Conv2DBackpropInput", xs, fs,
                                    _conv_out(xs, fs, attrs), attrs)
    return xs, fs, from_nhwc(out, fmt), attrs


def _conv_out(xs, fs, attrs):
    return from_nhwc(conv2d_geometry(to_nhwc(xs, attrs["data_format"]), fs,
                                     nhwc_attrs(attrs))[0], attrs["data_format"])


def _ex_conv_input(rng, types):
    T = types["T"]
    out = []
    for case in _CONV_CASES:
        xs, fs, ys, attrs = _conv_case(rng, T, case)
        out.append(({"input_sizes": np.asarray(xs, np.int32), "filter": sample(rng, T, fs),
                     "out_backprop": sample(rng, T, ys)}, attrs))
    return out


def _ex_conv_filter(rng, types):
    T = types["T"]
    out = []
    for case in _CONV_CASES:
        xs, fs, ys, attrs = _conv_case(rng, T, case)
        out.append(({"input": sample(rng, T, xs), "filter_sizes": np.asarray(fs, np.int32),
                     "out_backprop": sample(rng, T, ys)}, attrs))
    return out


def _ex_batch_norm(rng, types):
    T, U = types["T"], types["U"]
    c = 3
    vec = lambda **kw: sample(rng, U, (c,), **kw)
    base = lambda shape: {"x": sample(rng, T, shape), "scale": vec(), "offset": vec(),
                          "mean": vec(), "variance": vec(positive=True)}
    empty = np.zeros((0,), U.as_numpy_dtype)
    return [(base((2, 4, 4, c)), {"is_training": True}),
            (dict(base((2, 4, 4, c)), mean=empty, variance=empty), {"epsilon": 0.001}),
            (base((2, c, 3, 3)), {"is_training": False, "data_format": "NCHW"}),
            (base((2, 4, 4, c)), {"exponential_avg_factor": 0.25})]


def _ex_batch_norm_grad(rng, types):
    T, U = types["T"], types["U"]
    c = 3
    out = []
    for shape, fmt, training in (((2, 4, 4, c), "NHWC", True), ((2, c, 3, 3), "NCHW", False)):
        x = sample(rng, T, shape)
        mean = sample(rng, U, (c,), low=-0.5, high=0.5)
        second = (sample(rng, U, (c,), low=0.5, high=2.0) if training
                  else sample(rng, U, (c,), positive=True))
        out.append(({"y_backprop": sample(rng, T, shape), "x": x,
                     "scale": sample(rng, dtypes.float32, (c,)), "reserve_space_1": mean,
                     "reserve_space_2": second,
                     "reserve_space_3": np.zeros((), U.as_numpy_dtype)},
                    {"is_training": training, "data_format": fmt}))
    return out


def _ex_logits(arg):
    def ex(rng, types):
        T = types["T"]
        return [({arg: sample(rng, T, s)}, {}) for s in ((4, 7), (5,), (2, 0, 3))]
    return ex


def _ex_xent(rng, types):
    T = types["T"]
    lab = rng.dirichlet(np.ones(5), 4).astype(T.as_numpy_dtype)
    return [({"features": sample(rng, T, (4, 5)), "labels": lab}, {}),
            ({"features": sample(rng, T, (3, 5)), "labels": lab[:1]}, {})]


def _ex_sparse_xent(rng, types):
    T, L = types["T"], types["Tlabels"]
    return [({"features": sample(rng, T, (4, 6)),
              "labels": rng.integers(0, 6, (4,)).astype(L.as_numpy_dtype)}, {}),
            ({"features": sample(rng, T, (0, 3)), "labels": np.zeros((0,), L.as_numpy_dtype)},
             {})]


def _ex_grad_pair(a, b, approximate=False):
    def ex(rng, types):
        T = types["T"]
        out = [({a: sample(rng, T, s), b: sample(rng, T, s)}, {}) for s in ((3, 4), (0, 2))]
        if approximate:
            out.append(({a: sample(rng, T, (5,)), b: sample(rng, T, (5,))},
                        {"approximate": True}))
        return out
    return ex


def _ex_gelu(rng, types):
    T = types["T"]
    return [({"features": sample(rng, T, (3, 4))}, {}),
            ({"features": sample(rng, T, (6,))}, {"approximate": True}),
            ({"features": sample(rng, T, (0,))}, {})]


# --------------------------------------------------------------- definitions

def define_nn_ops() -> None:
    """Registers the neural-network ops."""
    define("BiasAdd", ["value: T", "bias: T"], ["output: T"],
           [f"T: {with_complex(NUMBER)}", "data_format: {'NHWC', 'NCHW'} = 'NHWC'"],
           _bias_add,
           examples=_ex_bias_add)
    define("BiasAddGrad", ["out_backprop: T"], ["output: T"],
           [f"T: {with_complex(NUMBER)}", "data_format: {'NHWC', 'NCHW'} = 'NHWC'"],
           _bias_add_grad,
           examples=_ex_bias_add_grad)
    define("MaxPool", ["input: T"], ["output: T"],
           ["T: {half, bfloat16, float, double, int32, int64, uint8, int16, int8} = DT_FLOAT"]
           + _POOL_ATTRS + ["padding: {'SAME', 'VALID', 'EXPLICIT'}",
                            "explicit_paddings: list(int) = []",
                            "data_format: {'NHWC', 'NCHW', 'NCHW_VECT_C'} = 'NHWC'"],
           _pool("MaxPool"), examples=_ex_pool("input", explicit=True))
    define("MaxPoolGrad", ["orig_input: T", "orig_output: T", "grad: T"], ["output: T"],
           _POOL_ATTRS + ["padding: {'SAME', 'VALID', 'EXPLICIT'}",
                          "explicit_paddings: list(int) = []",
                          "data_format: {'NHWC', 'NCHW'} = 'NHWC'", f"T: {REAL} = DT_FLOAT"],
           _max_pool_grad, examples=_ex_max_pool_grad)
    define("AvgPool", ["value: T"], ["output: T"],
           _POOL_ATTRS + ["padding: {'SAME', 'VALID'}", "data_format: {'NHWC', 'NCHW'} = 'NHWC'",
                          f"T: {FLOAT}"], _pool("AvgPool"), examples=_ex_pool("value"))
    define("AvgPoolGrad", ["orig_input_shape: int32", "grad: T"], ["output: T"],
           _POOL_ATTRS + ["padding: {'SAME', 'VALID'}", "data_format: {'NHWC', 'NCHW'} = 'NHWC'",
                          f"T: {FLOAT}"], _avg_pool_grad, host=["orig_input_shape"],
           examples=_ex_avg_pool_grad)
    define("Conv2DBackpropInput", ["input_sizes: int32", "filter: T", "out_backprop: T"],
           ["output: T"], ["T: {half, bfloat16, float, double, int32}"] + _CONV_ATTRS,
           _conv_backprop_input, host=["input_sizes"], examples=_ex_conv_input)
    define("Conv2DBackpropFilter", ["input: T", "filter_sizes: int32", "out_backprop: T"],
           ["output: T"], [f"T: {FLOAT}"] + _CONV_ATTRS, _conv_backprop_filter,
           host=["filter_sizes"], examples=_ex_conv_filter)
    bn_attrs = ["epsilon: float = 0.0001", f"data_format: {_BN_FORMATS} = 'NHWC'",
                "is_training: bool = true"]
    define("FusedBatchNormV3", ["x: T", "scale: U", "offset: U", "mean: U", "variance: U"],
           ["y: T", "batch_mean: U", "batch_variance: U", "reserve_space_1: U",
            "reserve_space_2: U", "reserve_space_3: U"],
           ["T: {half, bfloat16, float}", "U: {bfloat16, float}",
            "exponential_avg_factor: float = 1.0"] + bn_attrs, _batch_norm,
           examples=_ex_batch_norm)
    define("FusedBatchNormGradV3", ["y_backprop: T", "x: T", "scale: float",
                                    "reserve_space_1: U", "reserve_space_2: U",
                                    "reserve_space_3: U"],
           ["x_backprop: T", "scale_backprop: U", "offset_backprop: U", "reserve_space_4: U",
            "reserve_space_5: U"], ["T: {half, bfloat16, float}", "U: {float}"] + bn_attrs,
           _batch_norm_grad, examples=_ex_batch_norm_grad)
    define("LogSoftmax", ["logits: T"], ["logsoftmax: T"], [f"T: {FLOAT}"], _log_softmax,
           examples=_ex_logits("logits"))
    define("SoftmaxCrossEntropyWithLogits", ["features: T", "labels: T"],
           ["loss: T", "backprop: T"], [f"T: {FLOAT}"], _xent, examples=_ex_xent)
    define("SparseSoftmaxCrossEntropyWithLogits", ["features: T", "labels: Tlabels"],
           ["loss: T", "backprop: T"], [f"T: {FLOAT}", "Tlabels: {int32, int64} = DT_INT64"],
           _sparse_xent, examples=_ex_sparse_xent)
    define("ReluGrad", ["gradients: T", "features: T"], ["backprops: T"], [f"T: {REAL}"],
           same_shape_pair("ReluGrad", ("gradients", "features")),
           examples=_ex_grad_pair("gradients", "features"))
    define("Gelu", ["features: T"], ["activations: T"],
           [f"T: {FLOAT}", "approximate: bool = false"], same_shape, examples=_ex_gelu)
    define("GeluGrad", ["gradients: T", "features: T"], ["backprops: T"],
           [f"T: {FLOAT}", "approximate: bool = false"],
           same_shape_pair("GeluGrad", ("gradients", "features")),
           examples=_ex_grad_pair("gradients", "features", approximate=True))
