"""The host reference plugin's kernels (MY_DEVICE) beyond the shared op tests.

* Every kernel the plugin registers (every op, every dtype it registers)
  runs the op definition's examples on fresh random inputs and is compared
  with TensorFlow's CPU kernel, run by name with the inputs in op definition
  order (in a child process: tests/tf_oracle.py says why); where
  TensorFlow's CPU kernel refuses a case (NCHW pooling, dilated convolution
  gradients, int8 Range) the reference is computed in a form it accepts.
* Errors only the device work can find (an out-of-range gather index or
  sparse label, a segment id past num_segments, integer division by zero, a
  negative integer exponent) surface asynchronously, at the next read or
  synchronisation, name the op, the device and the value, and leave the
  device working.
* Large shapes, broadcasting of non-contiguous dims, list arguments, Gelu,
  and the stateless random ops bit for bit against TensorFlow.
* Attributes a kernel refuses give the error class of TensorFlow's code,
  naming the op; dependent training steps queued without reads match the CPU.

Every op call runs inside ``pg.testing.expect_kernel(op, "MY_DEVICE")`` so a
fallback to the CPU cannot pass.
"""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import pluggable as pg
from pluggable.framework import dtypes, registry

from tf_oracle import OracleError, TFOracle, tensorflow_available

DEVICE = "MY_DEVICE:0"
BF16 = np.dtype(ml_dtypes.bfloat16)
FLOATS = [np.dtype(np.float16), BF16, np.dtype(np.float32), np.dtype(np.float64)]

# (rtol, atol) per dtype for elementwise results.
TOL = {"float16": (2e-2, 2e-2), "bfloat16": (6e-2, 6e-2), "float32": (2e-5, 1e-5),
       "float64": (1e-10, 1e-12), "complex64": (2e-5, 1e-5), "complex128": (1e-10, 1e-12)}
# Ops that sum many products: half / bfloat16 are compared with a float32
# reference (this device accumulates in float; TensorFlow's CPU kernels round
# partial sums to the dtype), within the dtype's precision of the largest value.
ACCUMULATING = {"BatchMatMulV2", "BiasAddGrad", "Conv2DBackpropFilter", "Conv2DBackpropInput",
                "Cumsum", "AddN", "UnsortedSegmentSum", "Prod", "AvgPool", "AvgPoolGrad",
                "MaxPoolGrad", "FusedBatchNormV3", "FusedBatchNormGradV3",
                "SoftmaxCrossEntropyWithLogits", "SparseSoftmaxCrossEntropyWithLogits",
                "LogSoftmax", "_FusedConv2D"}
# Pluggable's own ops (no TensorFlow raw op): tested against numpy below.
OWN_OPS = {"Gelu", "GeluGrad", "ScaledDotProductAttention",
           "ScaledDotProductAttentionGrad", "LayerNorm", "LayerNormGrad"}


# Runs in TensorFlow's process (tests/tf_oracle.py) with `op`, `inputs` (in
# op definition order, list arguments flattened) and `attrs` (dtypes by
# name; type and length attributes TensorFlow can infer may be left out).
_EXECUTE = """
from tensorflow.python.eager import context, execute
from tensorflow.python.framework import op_def_registry
op_def = op_def_registry.get(op)
values, pos = dict(attrs), 0
for arg in op_def.input_arg:
    count = 1
    if arg.number_attr:
        count = values.setdefault(arg.number_attr, len(inputs) - len(op_def.input_arg) + 1)
    if arg.type_attr and arg.type_attr not in values:
        values[arg.type_attr] = tf.as_dtype(inputs[pos].dtype).name
    pos += count
flat = []
for a in op_def.attr:
    if a.name not in values and a.HasField("default_value"):
        d = a.default_value
        kind = d.WhichOneof("value")
        if kind == "list":
            values[a.name] = list(d.list.i)
        elif kind is not None:
            values[a.name] = getattr(d, kind)
    if a.name in values:
        v = values[a.name]
        if a.type == "list(type)":
            v = [tf.as_dtype(x) for x in v]
        elif a.type == "list(string)":
            v = [x.encode() if isinstance(x, str) else x for x in v]
        flat += [a.name, tf.as_dtype(v) if a.type == "type" else
                 v.encode() if isinstance(v, str) else v]
outs = sum(values[o.number_attr] if o.number_attr else 1 for o in op_def.output_arg)
tensors = [tf.constant(x) for x in inputs]
result = [t.numpy() for t in execute.execute(op, outs, tensors, tuple(flat), context.context())]
"""


class TfKernels:
    """TensorFlow's CPU kernels by op name (see _EXECUTE)."""

    def __init__(self, oracle: TFOracle):
        self.oracle = oracle

    def run(self, op: str, inputs: list, attrs: dict | None = None) -> list[np.ndarray]:
        return list(self.oracle.run(_EXECUTE, op=op, inputs=[np.asarray(x) for x in inputs],
                                    attrs=dict(attrs or {})))


@pytest.fixture(scope="module")
def tf():
    if not tensorflow_available():
        pytest.skip("TensorFlow is not installed; install tensorflow-cpu to compare with it")
    oracle = TFOracle()
    yield TfKernels(oracle)
    oracle.close()


# ----------------------------------------------------------------- helpers

def _plain(attrs: dict) -> dict:
    """Attributes with dtypes as names (for the TensorFlow worker), in lists too."""
    def name(v):
        return v.name if isinstance(v, dtypes.DType) else v
    return {k: [name(x) for x in v] if isinstance(v, list) else name(v)
            for k, v in attrs.items()}


def _flat(op: str, inputs: dict) -> list[np.ndarray]:
    """The inputs in the op definition's order, list arguments flattened."""
    out = []
    for a in registry.OPS[op].inputs:
        v = inputs[a.name]
        out += [np.asarray(x) for x in v] if isinstance(v, list) else [np.asarray(v)]
    return out


def on_device(op: str, inputs: dict, attrs: dict | None = None) -> list[np.ndarray]:
    """Runs raw op `op` on MY_DEVICE (numpy inputs; a list for a list
    argument) and returns every output, list outputs flattened."""
    with pg.device(DEVICE):
        args = {n: [pg.constant(x) for x in v] if isinstance(v, list) else pg.constant(v)
                for n, v in inputs.items()}
        with pg.testing.expect_kernel(op, "MY_DEVICE"):
            out = getattr(pg.raw_ops, op)(**args, **(attrs or {}))
        outs = []
        for o in (out if isinstance(out, (list, tuple)) else [out]):
            outs += [x.numpy() for x in o] if isinstance(o, list) else [o.numpy()]
    return outs


_NHWC, _NCHW = (0, 2, 3, 1), (0, 3, 1, 2)


def _to_nhwc(attrs: dict) -> dict:
    """NCHW attributes (ksize, strides, dilations, explicit_paddings) as NHWC."""
    out = dict(attrs, data_format="NHWC")
    for k in ("ksize", "strides", "dilations"):
        if k in out:
            out[k] = [out[k][i] for i in _NHWC]
    if out.get("explicit_paddings"):
        p = out["explicit_paddings"]
        out["explicit_paddings"] = [p[2 * i + j] for i in _NHWC for j in (0, 1)]
    return out


def tf_reference(tf, op: str, inputs: dict, attrs: dict, upcast: bool) -> list[np.ndarray]:
    """TensorFlow's outputs for the call; `upcast` computes half / bfloat16
    in float32 (the outputs stay float32). Cases TensorFlow's CPU kernels
    refuse are computed in a form they accept: NHWC instead of NCHW, undilated
    filters for the convolution gradients, int64 instead of int8/int16/uint32/uint64 Range."""
    flat = _flat(op, inputs)
    plain = _plain(attrs)
    if op == "FusedBatchNormGradV3" and attrs.get("is_training", True):
        # reserve_space_2 is 1 / sqrt(var + epsilon) here, the variance in TensorFlow.
        eps = attrs.get("epsilon", 1e-4)
        flat[4] = (1 / flat[4].astype(np.float64) ** 2 - eps).astype(flat[4].dtype)
    if upcast:
        flat = [x.astype(np.float32) if x.dtype in (FLOATS[0], BF16) else x for x in flat]
        up = lambda v: "float32" if v in ("float16", "bfloat16") else v  # noqa: E731
        plain = {k: [up(x) for x in v] if isinstance(v, list) else up(v)
                 for k, v in plain.items()}
    if op == "Range" and flat[0].dtype in (np.int8, np.int16, np.uint32, np.uint64):
        # No TensorFlow CPU kernel for these: the examples' values fit int64.
        return [o.astype(flat[0].dtype) for o in tf.run(op, [x.astype(np.int64) for x in flat])]
    if op == "FusedBatchNormV3" and attrs.get("is_training", True):
        outs = tf.run(op, flat, plain)
        outs[4] = _inverse_std(outs[4], attrs.get("epsilon", 1e-4))
        return outs
    if plain.get("data_format") == "NCHW" and op in _NHWC_ONLY:
        # TensorFlow's CPU kernel takes only NHWC: transpose there and back.
        images, sizes, image_out = _NHWC_ONLY[op]
        flat = [x.transpose(_NHWC) if i in images else x[list(_NHWC)] if i in sizes else x
                for i, x in enumerate(flat)]
        outs = _run_nhwc(tf, op, flat, _to_nhwc(plain))
        return [outs[0].transpose(_NCHW) if image_out else outs[0]] + outs[1:]
    return _run_nhwc(tf, op, flat, plain)


def _inverse_std(variance: np.ndarray, epsilon: float) -> np.ndarray:
    """TensorFlow's CPU batch norm keeps the variance in reserve_space_2;
    this device (like the built-in CPU kernel and cuDNN) 1 / sqrt(var + eps)."""
    return (1 / np.sqrt(variance.astype(np.float64) + epsilon)).astype(variance.dtype)


def _run_nhwc(tf, op: str, flat: list, plain: dict) -> list[np.ndarray]:
    if op.startswith("Conv2DBackprop") and max(plain.get("dilations", [1])) > 1:
        return _dilated_conv_backprop(tf, op, flat, plain)
    return tf.run(op, flat, plain)


def _dilated_conv_backprop(tf, op: str, flat: list, attrs: dict) -> list[np.ndarray]:
    """TensorFlow's CPU kernels refuse dilations > 1 in the convolution
    gradients: a dilated filter is the undilated filter with zeros between
    its taps, so compute with that and keep every dilation-th tap."""
    dh, dw = attrs["dilations"][1:3]  # NHWC here
    plain = dict(attrs, dilations=[1, 1, 1, 1])
    if op == "Conv2DBackpropInput":
        f = flat[1]
        big = np.zeros(((f.shape[0] - 1) * dh + 1, (f.shape[1] - 1) * dw + 1) + f.shape[2:], f.dtype)
        big[::dh, ::dw] = f
        return tf.run(op, [flat[0], big, flat[2]], plain)
    kh, kw, ci, co = (int(v) for v in flat[1])
    sizes = np.array([(kh - 1) * dh + 1, (kw - 1) * dw + 1, ci, co], np.int32)
    (big,) = tf.run(op, [flat[0], sizes, flat[2]], plain)
    return [np.ascontiguousarray(big[::dh, ::dw])]


# Ops whose TensorFlow CPU kernels refuse NCHW: (inputs that are images,
# inputs that are image shapes, whether output 0 is an image).
_NHWC_ONLY = {"MaxPool": ((0,), (), True), "AvgPool": ((0,), (), True),
              "MaxPoolGrad": ((0, 1, 2), (), True), "AvgPoolGrad": ((1,), (0,), True),
              "FusedBatchNormGradV3": ((0, 1), (), True), "Conv2D": ((0,), (), True),
              "Conv2DBackpropInput": ((2,), (0,), True),
              "Conv2DBackpropFilter": ((0, 2), (), False)}


def assert_close(got: np.ndarray, want: np.ndarray, what: str, scaled: bool = False) -> None:
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, expected {want.dtype}"
    if got.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    rtol, atol = TOL[got.dtype.name]
    wide = np.complex128 if got.dtype.kind == "c" else np.float64
    w = want.astype(wide)
    if scaled and w.size:  # within the dtype's precision of the largest value
        atol = max(atol, rtol * float(np.max(np.abs(w[np.isfinite(w)]), initial=1.0)))
    np.testing.assert_allclose(got.astype(wide), w, rtol=rtol, atol=atol, err_msg=what)


def _examples(op: str, rng, types: dict) -> list:
    """The op definition's examples for `types`. Where they cannot be made
    for bfloat16 (numpy knows no bfloat16 limits), the float32 examples are
    converted: the values are the same, rounded."""
    try:
        return registry.OPS[op].examples(rng, types)
    except ValueError:
        if dtypes.bfloat16 not in types.values():
            raise
    f32 = {k: dtypes.float32 if v is dtypes.bfloat16 else v for k, v in types.items()}
    conv = lambda v: v.astype(BF16) if getattr(v, "dtype", None) == np.float32 else v
    return [({n: [conv(x) for x in v] if isinstance(v, list) else conv(v) for n, v in ins.items()},
             attrs) for ins, attrs in registry.OPS[op].examples(rng, f32)]


def _kernel_cases() -> list:
    ops = sorted({op for (op, dev) in registry.KERNELS if dev == "MY_DEVICE"})
    return [op for op in ops if op not in OWN_OPS and registry.OPS[op].examples is not None]


# ------------------------------------------------ every kernel vs TensorFlow

@pytest.mark.parametrize("op", _kernel_cases())
def test_every_kernel_matches_tensorflow(tf, rng, op):
    """Each kernel the plugin registers for `op` (one per dtype), on every
    example of the op definition: same outputs as TensorFlow's CPU kernel,
    or both refuse the call with the same error class."""
    kernels = [k for k in registry.KERNELS[(op, "MY_DEVICE")] if k.plugin is not None]
    assert kernels, f"no MY_DEVICE kernel for {op}"
    stateless = op.startswith("Stateless")
    for k in kernels:
        for inputs, attrs in _examples(op, rng, dict(k.constraints)):
            what = (f"{op} {_plain(k.constraints)} shapes "
                    f"{[np.shape(v) if not isinstance(v, list) else len(v) for v in inputs.values()]} "
                    f"attrs {_plain(attrs)} ({rng.seed_text})")
            upcast = op in ACCUMULATING
            try:
                want = tf_reference(tf, op, inputs, attrs, upcast)
            except OracleError as exc:
                with pytest.raises(getattr(pg.errors, exc.tf_type)):
                    on_device(op, inputs, attrs)
                continue
            got = on_device(op, inputs, attrs)
            if op == "FusedBatchNormV3":
                # reserve_space_3 is an unused scalar; in inference TensorFlow
                # leaves the reserve spaces unset.
                keep = 3 if not attrs.get("is_training", True) else 5
                got, want = got[:keep], want[:keep]
            if op == "FusedBatchNormGradV3":
                got, want = got[:3], want[:3]
            assert len(got) == len(want), what
            for i, (g, w) in enumerate(zip(got, want)):
                if upcast and w.dtype == np.float32:
                    w = w.astype(g.dtype)  # computed in float32 for half / bfloat16
                if stateless:
                    np.testing.assert_array_equal(g, w, err_msg=f"{what} output {i}")
                else:
                    assert_close(g, w, f"{what} output {i}", scaled=upcast)


# ------------------------------------------------ asynchronous device errors

ASYNC_ERRORS = [
    ("GatherV2", lambda: {"params": np.arange(12.0).reshape(3, 4),
                          "indices": np.array([[0, 2], [5, 1]], np.int32),
                          "axis": np.array(1, np.int32)}, {},
     "indices[1,0] = 5 is not in [0, 4)"),
    ("GatherV2", lambda: {"params": np.arange(6, dtype=np.int64),
                          "indices": np.array([-1], np.int64), "axis": np.array(0, np.int64)},
     {}, "indices[0] = -1 is not in [0, 6)"),
    ("SparseSoftmaxCrossEntropyWithLogits",
     lambda: {"features": np.zeros((3, 4), np.float32), "labels": np.array([0, 4, 1], np.int64)},
     {}, "label value of 4"),
    ("SparseSoftmaxCrossEntropyWithLogits",
     lambda: {"features": np.zeros((2, 4), np.float16), "labels": np.array([-2, 0], np.int32)},
     {}, "label value of -2"),
    ("UnsortedSegmentSum", lambda: {"data": np.ones((3, 2), np.float32),
                                    "segment_ids": np.array([0, 9, 1], np.int32),
                                    "num_segments": np.array(2, np.int32)}, {},
     "segment_ids[1] = 9 is out of range [0, 2)"),
    ("FloorDiv", lambda: {"x": np.array([4, 5, 6], np.int32), "y": np.array([2, 0, 3], np.int32)},
     {}, "Integer division by zero"),
    ("FloorMod", lambda: {"x": np.array([4, 5], np.int64), "y": np.array([0], np.int64)},
     {}, "Integer division by zero"),
    ("Pow", lambda: {"x": np.array([2, 3], np.int32), "y": np.array([2, -1], np.int32)},
     {}, "negative integer powers"),
]


@pytest.mark.parametrize("op,make,attrs,message", ASYNC_ERRORS,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(ASYNC_ERRORS)])
@pytest.mark.parametrize("how", ["read", "synchronize"])
def test_device_error_surfaces_at_next_synchronisation(op, make, attrs, message, how):
    """The call returns; the error is raised at the next read (or
    pg.synchronize()) as InvalidArgumentError naming the op, the device and
    the bad value; it is reported once and the device keeps working."""
    with pg.device(DEVICE):
        args = {n: pg.constant(v) for n, v in make().items()}
        with pg.testing.expect_kernel(op, "MY_DEVICE"):
            out = getattr(pg.raw_ops, op)(**args, **attrs)  # must not raise
        first = out[0] if isinstance(out, (list, tuple)) else out
        with pytest.raises(pg.errors.InvalidArgumentError) as info:
            if how == "read":
                first.numpy()
            else:
                pg.synchronize()
        text = str(info.value)
        assert op in text and "MY_DEVICE" in text and message in text, text
        pg.synchronize()  # reported once: nothing left
        with pg.testing.expect_kernel("GatherV2", "MY_DEVICE"):
            again = pg.raw_ops.GatherV2(params=pg.constant(np.arange(4.0)),
                                        indices=pg.constant(np.array([3, 0], np.int32)),
                                        axis=pg.constant(np.array(0, np.int32)))
        np.testing.assert_array_equal(again.numpy(), [3.0, 0.0])


def test_a_good_call_after_a_bad_one_is_unaffected(rng):
    """Errors belong to the call that made them: the same kernel instance
    runs clean inputs correctly once the error has been reported."""
    params = rng.standard_normal((5, 3)).astype(np.float32)
    with pg.device(DEVICE):
        p = pg.constant(params)
        axis = pg.constant(np.array(0, np.int32))
        bad = pg.raw_ops.GatherV2(params=p, indices=pg.constant(np.array([5], np.int32)),
                                  axis=axis)
        with pytest.raises(pg.errors.InvalidArgumentError, match="not in"):
            bad.numpy()
        good = pg.raw_ops.GatherV2(params=p, indices=pg.constant(np.array([4, 0], np.int32)),
                                   axis=axis)
        np.testing.assert_array_equal(good.numpy(), params[[4, 0]])


# ---------------------------------------------------------- large shapes

def test_large_gather_concat_split(rng):
    params = rng.standard_normal((3000, 257)).astype(np.float32)
    idx = rng.integers(0, 3000, (40, 250)).astype(np.int64)
    (got,) = on_device("GatherV2", {"params": params, "indices": idx,
                                    "axis": np.array(0, np.int32)})
    np.testing.assert_array_equal(got, params[idx], err_msg=rng.seed_text)

    parts = [rng.standard_normal((600, n)).astype(np.float16) for n in (700, 1, 333)]
    (joined,) = on_device("ConcatV2", {"values": parts, "axis": np.array(-1, np.int32)})
    np.testing.assert_array_equal(joined, np.concatenate(parts, axis=1))
    back = on_device("Split", {"split_dim": np.array(0, np.int32), "value": joined},
                     {"num_split": 8})
    for got, want in zip(back, np.split(joined, 8, axis=0)):
        np.testing.assert_array_equal(got, want)


def test_large_topk_argmax_cumsum_segments(rng):
    x = rng.standard_normal((3, 200_003)).astype(np.float32)
    values, indices = on_device("TopKV2", {"input": x, "k": np.array(1000, np.int32)})
    order = np.argsort(-x, axis=1, kind="stable")[:, :1000]
    np.testing.assert_array_equal(indices, order, err_msg=rng.seed_text)
    np.testing.assert_array_equal(values, np.take_along_axis(x, order, axis=1))

    (am,) = on_device("ArgMax", {"input": x, "dimension": np.array(1, np.int32)})
    np.testing.assert_array_equal(am, x.argmax(axis=1))

    y = rng.standard_normal((2, 1_000_001))
    (cs,) = on_device("Cumsum", {"x": y, "axis": np.array(1, np.int32)}, {"reverse": True})
    np.testing.assert_allclose(cs, np.cumsum(y[:, ::-1], axis=1)[:, ::-1], rtol=1e-9, atol=1e-9)

    data = rng.standard_normal((200_000, 3)).astype(np.float32)
    ids = rng.integers(-1, 1000, 200_000).astype(np.int32)
    (seg,) = on_device("UnsortedSegmentSum", {"data": data, "segment_ids": ids,
                                              "num_segments": np.array(1000, np.int32)})
    want = np.zeros((1000, 3))
    np.add.at(want, ids[ids >= 0], data[ids >= 0].astype(np.float64))
    np.testing.assert_allclose(seg, want, rtol=1e-5, atol=1e-4)


def test_large_strided_slice_tile_pad(rng):
    x = rng.standard_normal((1001, 999)).astype(np.float64)
    (got,) = on_device("StridedSlice", {"input": x, "begin": np.array([-2, 900], np.int64),
                                        "end": np.array([3, 10], np.int64),
                                        "strides": np.array([-3, -7], np.int64)})
    np.testing.assert_array_equal(got, x[-2:3:-3, 900:10:-7])
    small = rng.integers(-100, 100, (301, 299)).astype(np.int16)
    (tiled,) = on_device("Tile", {"input": small, "multiples": np.array([3, 4], np.int32)})
    np.testing.assert_array_equal(tiled, np.tile(small, (3, 4)))
    (padded,) = on_device("Pad", {"input": small, "paddings": np.array([[5, 0], [1, 300]])})
    np.testing.assert_array_equal(padded, np.pad(small, [[5, 0], [1, 300]]))


# ------------------------------------------- broadcasting, non-contiguous

BROADCASTS = [((3, 1, 5, 1), (1, 4, 1, 6)), ((2, 1, 3), (4, 1)), ((1, 7, 1), (6, 1, 8)),
              ((5, 1, 1, 2), (3, 2)), ((), (2, 3)), ((4, 1, 3), (4, 2, 1))]


@pytest.mark.parametrize("xs,ys", BROADCASTS, ids=[f"{a}x{b}" for a, b in BROADCASTS])
def test_broadcasting_of_non_contiguous_dims(rng, xs, ys):
    x = rng.integers(-5, 5, xs).astype(np.int64)
    y = rng.integers(-5, 5, ys).astype(np.int64)
    y = np.where(y == 0, 3, y)
    cases = {"Less": np.less, "GreaterEqual": np.greater_equal, "Equal": np.equal,
             "FloorDiv": np.floor_divide, "FloorMod": np.mod, "Maximum": np.maximum}
    for op, fn in cases.items():
        (got,) = on_device(op, {"x": x, "y": y})
        np.testing.assert_array_equal(got, fn(x, y), err_msg=f"{op} {xs} {ys} {rng.seed_text}")
    cond = rng.integers(0, 2, ys[:-1] + (1,) if ys else ()).astype(bool)
    (sel,) = on_device("SelectV2", {"condition": cond, "t": x, "e": y})
    np.testing.assert_array_equal(sel, np.where(cond, x, y))
    shape = np.broadcast_shapes(xs, ys)
    (b,) = on_device("BroadcastTo", {"input": x, "shape": np.array(shape, np.int32)})
    np.testing.assert_array_equal(b, np.broadcast_to(x, shape))


def test_select_picks_rows_with_a_vector_condition(rng):
    cond = np.array([True, False, True])
    t = rng.standard_normal((3, 2, 4)).astype(BF16)
    e = rng.standard_normal((3, 2, 4)).astype(BF16)
    (got,) = on_device("Select", {"condition": cond, "t": t, "e": e})
    np.testing.assert_array_equal(got, np.where(cond[:, None, None], t, e))


# ---------------------------------------------------------- list arguments

@pytest.mark.parametrize("n", [1, 2, 7])
def test_add_n_sums_every_element_of_the_list(rng, n):
    values = [rng.standard_normal((3, 5)).astype(np.float32) for _ in range(n)]
    (got,) = on_device("AddN", {"inputs": values})
    np.testing.assert_allclose(got, np.sum(values, axis=0, dtype=np.float64), rtol=1e-6,
                               atol=1e-6)


def test_long_lists_and_empty_outputs(rng):
    values = [rng.integers(0, 255, (2, int(rng.integers(0, 4)))).astype(np.uint8)
              for _ in range(40)]
    (joined,) = on_device("ConcatV2", {"values": values, "axis": np.array(1, np.int64)})
    np.testing.assert_array_equal(joined, np.concatenate(values, axis=1))
    (stacked,) = on_device("Pack", {"values": values[:1] * 5}, {"axis": -1})
    np.testing.assert_array_equal(stacked, np.stack(values[:1] * 5, axis=-1))
    assert on_device("Unpack", {"value": np.zeros((0, 3), np.float32)}, {"num": 0}) == []
    pieces = on_device("Unpack", {"value": np.arange(6).reshape(2, 3)}, {"num": 3, "axis": 1})
    for i, p in enumerate(pieces):
        np.testing.assert_array_equal(p, [i, 3 + i])


# --------------------------------------------------------------- Gelu

def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf)(x)


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
@pytest.mark.parametrize("approximate", [False, True])
def test_gelu_and_its_gradient(rng, dt, approximate):
    x = rng.uniform(-4, 4, (7, 9)).astype(dt)
    g = rng.uniform(-2, 2, (7, 9)).astype(dt)
    xf = x.astype(np.float64)
    if approximate:
        k = math.sqrt(2 / math.pi)
        t = np.tanh(k * (xf + 0.044715 * xf ** 3))
        want = 0.5 * xf * (1 + t)
        dwant = 0.5 * (1 + t) + 0.5 * xf * (1 - t * t) * k * (1 + 3 * 0.044715 * xf ** 2)
    else:
        want = 0.5 * xf * (1 + _erf(xf / math.sqrt(2)))
        dwant = 0.5 * (1 + _erf(xf / math.sqrt(2))) + xf * np.exp(-xf * xf / 2) / math.sqrt(2 * math.pi)
    (y,) = on_device("Gelu", {"features": x}, {"approximate": approximate})
    assert_close(y, want.astype(dt), f"Gelu {dt} {rng.seed_text}")
    (dy,) = on_device("GeluGrad", {"gradients": g, "features": x}, {"approximate": approximate})
    assert_close(dy, (g.astype(np.float64) * dwant).astype(dt), f"GeluGrad {dt} {rng.seed_text}")
    # The derivative is the derivative of the forward kernel.
    if dt == np.float64:
        h = 1e-6
        (up,) = on_device("Gelu", {"features": x + h}, {"approximate": approximate})
        (down,) = on_device("Gelu", {"features": x - h}, {"approximate": approximate})
        (d1,) = on_device("GeluGrad", {"gradients": np.ones_like(x), "features": x},
                          {"approximate": approximate})
        np.testing.assert_allclose(d1, (up - down) / (2 * h), rtol=1e-6, atol=1e-7)


# ------------------------------------------------------- stateless random

RANDOM_OPS = ["StatelessRandomUniformV2", "StatelessRandomNormalV2", "StatelessTruncatedNormalV2"]
# Counters next to the carries of Philox's 128-bit counter.
COUNTERS = [(0, 0), (2**32 - 3, 7), (2**64 - 2, 5), (2**64 - 1, 2**64 - 1)]


@pytest.mark.parametrize("op", RANDOM_OPS)
@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_stateless_random_matches_tensorflow_bit_for_bit(tf, rng, op, dt):
    for size in (1, 3, 5, 7, 1031):
        for counter in COUNTERS:
            key = rng.integers(0, 2**63, (1,), dtype=np.uint64)
            inputs = {"shape": np.array([size], np.int64), "key": key,
                      "counter": np.array(counter, np.uint64), "alg": np.array(1, np.int32)}
            attrs = {"dtype": dtypes.as_dtype(dt.name)}
            (got,) = on_device(op, inputs, attrs)
            (want,) = tf.run(op, _flat(op, inputs), _plain(attrs))
            np.testing.assert_array_equal(got, want, err_msg=f"{op} {dt} {size} {counter} "
                                                             f"key {key} {rng.seed_text}")


def test_stateless_random_algorithms_and_a_large_draw(tf, rng):
    base = {"shape": np.array([1001, 999], np.int32),
            "key": rng.integers(0, 2**63, (1,), dtype=np.uint64),
            "counter": rng.integers(0, 2**63, (2,), dtype=np.uint64)}
    (philox,) = on_device("StatelessRandomNormalV2", dict(base, alg=np.array(1, np.int32)))
    (auto,) = on_device("StatelessRandomNormalV2", dict(base, alg=np.array(3, np.int32)))
    np.testing.assert_array_equal(philox, auto)
    (want,) = tf.run("StatelessRandomNormalV2", _flat("StatelessRandomNormalV2",
                                                      dict(base, alg=np.array(1, np.int32))))
    np.testing.assert_array_equal(philox, want)
    assert abs(float(philox.mean())) < 0.01 and abs(float(philox.std()) - 1) < 0.01
    with pg.device(DEVICE), pytest.raises(pg.errors.InvalidArgumentError, match="algorithm"):
        pg.raw_ops.StatelessRandomUniformV2(
            shape=pg.constant(np.array([2], np.int32)), key=pg.constant(base["key"]),
            counter=pg.constant(base["counter"]), alg=pg.constant(np.array(4, np.int32))).numpy()


# ------------------------------------------------ bad attributes and shapes

_IMAGE = {"input": lambda rng: rng.standard_normal((2, 6, 6, 3)).astype(np.float32)}
_FILTER = lambda rng: rng.standard_normal((2, 2, 3, 4)).astype(np.float32)
BAD_CALLS = [
    # (op, inputs, attrs, error class, text the message must contain)
    ("MaxPool", _IMAGE, {"ksize": [1, 2, 2, 1, 1], "strides": [1, 1, 1, 1], "padding": "VALID"},
     "InvalidArgumentError", "'ksize' has 5 entries"),
    ("MaxPool", _IMAGE, {"ksize": [1, 0, 2, 1], "strides": [1, 1, 1, 1], "padding": "VALID"},
     "InvalidArgumentError", "ksize must have 4 entries >= 1"),
    ("MaxPool", _IMAGE, {"ksize": [2, 2, 2, 1], "strides": [1, 1, 1, 1], "padding": "VALID"},
     "UnimplementedError", "batch and channel"),
    ("MaxPool", _IMAGE, {"ksize": [1, 2, 2, 1], "strides": [1, 1, 1, 1], "padding": "VALID",
                         "data_format": "NCHW_VECT_C"}, "UnimplementedError", "NCHW_VECT_C"),
    ("MaxPool", _IMAGE, {"ksize": [1, 2, 2, 1], "strides": [1, 1, 1, 1], "padding": "EXPLICIT",
                         "explicit_paddings": [0, 0, 1, 1, 1, 1, 1, 0]},
     "InvalidArgumentError", "explicit_paddings"),
    ("AvgPool", {"value": _IMAGE["input"]},
     {"ksize": [1, 2, 2, 1], "strides": [1, 1, 2, 2], "padding": "SAME"},
     "UnimplementedError", "strides other than 1"),
    ("Conv2D", dict(_IMAGE, filter=_FILTER), {"strides": [1, 1, 1], "padding": "SAME"},
     "InvalidArgumentError", "strides must have 4 entries"),
    ("Conv2D", dict(_IMAGE, filter=_FILTER),
     {"strides": [1, 1, 1, 1], "dilations": [1, 1, 1, 2], "padding": "SAME"},
     "UnimplementedError", "dilations other than 1"),
    ("Conv2D", dict(_IMAGE, filter=lambda rng: rng.standard_normal((2, 2, 5, 4)).astype(np.float32)),
     {"strides": [1, 1, 1, 1], "padding": "SAME"}, "InvalidArgumentError", "channels"),
    ("FusedBatchNormV3", {"x": lambda rng: rng.standard_normal((2, 3, 3, 4)).astype(np.float32),
                          **{n: lambda rng: np.ones(4, np.float32)
                             for n in ("scale", "offset", "mean", "variance")}},
     {"data_format": "HWNC"}, "InvalidArgumentError", "data_format"),
]


@pytest.mark.parametrize("op,inputs,attrs,error,message", BAD_CALLS,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(BAD_CALLS)])
def test_bad_attributes_and_shapes_raise_typed_errors_naming_the_op(rng, op, inputs, attrs,
                                                                    error, message):
    """A kernel that refuses its attributes (at construction) reports a
    TF_Status that surfaces as the error class of its code, naming the op;
    input shapes the op cannot take are refused before the kernel runs, with
    the same kind of error."""
    with pg.device(DEVICE):
        args = {n: pg.constant(make(rng)) for n, make in inputs.items()}
        with pytest.raises(getattr(pg.errors, error)) as info:
            getattr(pg.raw_ops, op)(**args, **attrs).numpy()
    text = str(info.value)
    assert op in text and message in text, text


# ----------------------------------------------------------------- Range

@pytest.mark.parametrize("dt", [np.uint32, np.uint64, np.int64], ids=lambda d: np.dtype(d).name)
def test_range_of_unsigned_and_wide_integers(rng, dt):
    """Integer Range is exact over the dtype's whole span (uint64 above 2^63
    included) and refuses a delta pointing away from limit."""
    top = int(np.iinfo(dt).max)
    start = top - int(rng.integers(100, 1000))
    delta = int(rng.integers(1, 17))
    (got,) = on_device("Range", {"start": dt(start), "limit": dt(top), "delta": dt(delta)})
    want = np.arange(start, top, delta, dtype=object).astype(dt)
    np.testing.assert_array_equal(got, want, err_msg=rng.seed_text)
    assert got.dtype == np.dtype(dt)
    with pytest.raises(pg.errors.InvalidArgumentError, match="Range"):
        on_device("Range", {"start": dt(top), "limit": dt(start), "delta": dt(delta)})


# ------------------------------------- a training step, asynchronously

def _train_steps(device: str, x, f, b, w, labels, steps: int, lr: float):
    """A small CNN's forward and backward pass and an SGD update, `steps`
    times, built from the workloads ops only; every intermediate is dropped
    as soon as the next op is queued and nothing is read until the end."""
    raw = pg.raw_ops
    with pg.device(device):
        x, f, b, w, labels = (pg.constant(v) for v in (x, f, b, w, labels))
        lr = pg.constant(np.array(lr, np.float64))
        n = x.shape[0]
        losses = []
        for _ in range(steps):
            y = raw.BiasAdd(value=raw.Conv2D(input=x, filter=f, strides=[1, 1, 1, 1],
                                             padding="SAME"), bias=b)
            r = raw.Relu(features=y)
            p = raw.MaxPool(input=r, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="VALID")
            flat = raw.Reshape(tensor=p, shape=pg.constant(np.array([n, -1], np.int32)))
            logits = raw.MatMul(a=flat, b=w)
            loss, back = raw.SparseSoftmaxCrossEntropyWithLogits(features=logits, labels=labels)
            losses.append(raw.Mean(input=loss, reduction_indices=pg.constant(np.array([0], np.int32))))
            dflat = raw.MatMul(a=back, b=w, transpose_b=True)
            dw = raw.MatMul(a=flat, b=back, transpose_a=True)
            dp = raw.Reshape(tensor=dflat, shape=pg.constant(np.array(p.shape, np.int32)))
            dy = raw.ReluGrad(gradients=raw.MaxPoolGrad(orig_input=r, orig_output=p, grad=dp,
                                                        ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1],
                                                        padding="VALID"), features=y)
            df = raw.Conv2DBackpropFilter(input=x, filter_sizes=pg.constant(
                np.array(f.shape, np.int32)), out_backprop=dy, strides=[1, 1, 1, 1],
                padding="SAME")
            db = raw.BiasAddGrad(out_backprop=dy)
            f = raw.Sub(x=f, y=raw.Mul(x=lr, y=df))
            b = raw.Sub(x=b, y=raw.Mul(x=lr, y=db))
            w = raw.Sub(x=w, y=raw.Mul(x=lr, y=dw))
        return [t.numpy() for t in (f, b, w, raw.Pack(values=losses))]


TRAIN_OPS = ["Conv2D", "BiasAdd", "MaxPool", "SparseSoftmaxCrossEntropyWithLogits",
             "MaxPoolGrad", "ReluGrad", "Conv2DBackpropFilter", "BiasAddGrad", "Pack"]


def test_training_steps_run_on_the_device_and_match_the_cpu(rng):
    """Twelve dependent training steps queued on MY_DEVICE (intermediates
    released while the work is in flight) give the CPU's weights and losses,
    every op ran on MY_DEVICE, and the loss goes down."""
    x = rng.standard_normal((8, 6, 6, 3))
    f = rng.standard_normal((3, 3, 3, 4)) * 0.3
    b = rng.standard_normal(4) * 0.1
    w = rng.standard_normal((36, 5)) * 0.3
    labels = rng.integers(0, 5, 8).astype(np.int64)
    steps = 12
    before = {op: pg.testing.kernel_calls(op, "MY_DEVICE") for op in TRAIN_OPS}
    got = _train_steps(DEVICE, x, f, b, w, labels, steps, 0.1)
    for op in TRAIN_OPS:
        want_calls = 1 if op == "Pack" else steps
        assert pg.testing.kernel_calls(op, "MY_DEVICE") - before[op] == want_calls, op
    want = _train_steps("CPU:0", x, f, b, w, labels, steps, 0.1)
    for name, g, e in zip(("filter", "bias", "weights", "losses"), got, want):
        np.testing.assert_allclose(g, e, rtol=1e-9, atol=1e-12, err_msg=f"{name} {rng.seed_text}")
    assert got[3][-1] < got[3][0], got[3]


# ------------------------------------- cases the op examples leave out

@pytest.mark.parametrize("fmt", ["NDHWC", "NCDHW"])
@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_of_5d_inputs_matches_tensorflow(tf, rng, fmt, training):
    """FusedBatchNormV3 and its gradient on NDHWC / NCDHW volumes."""
    c = int(rng.integers(2, 5))
    shape = (2, 3, 4, 2, c) if fmt == "NDHWC" else (2, c, 3, 4, 2)
    x = rng.standard_normal(shape).astype(np.float32)
    vec = lambda: rng.uniform(0.5, 1.5, c).astype(np.float32)
    inputs = {"x": x, "scale": vec(), "offset": vec(), "mean": vec(), "variance": vec()}
    attrs = {"data_format": fmt, "is_training": training, "epsilon": 0.01,
             "exponential_avg_factor": 0.5}
    what = f"{fmt} training={training} {rng.seed_text}"
    got = on_device("FusedBatchNormV3", inputs, attrs)
    want = tf.run("FusedBatchNormV3", _flat("FusedBatchNormV3", inputs), attrs)
    if training:
        want[4] = _inverse_std(want[4], attrs["epsilon"])
    for i in range(5 if training else 3):  # TensorFlow leaves them unset in inference
        assert_close(got[i], want[i], f"FusedBatchNormV3 output {i} {what}", scaled=True)
    # The gradient from each side's own reserve spaces in training, the
    # population mean and variance in inference; TensorFlow's CPU kernel
    # takes inference gradients in NHWC / NDHWC only.
    dy = rng.standard_normal(shape).astype(np.float32)
    grad = lambda res: {"y_backprop": dy, "x": x, "scale": inputs["scale"],
                        "reserve_space_1": res[3] if training else inputs["mean"],
                        "reserve_space_2": res[4] if training else inputs["variance"],
                        "reserve_space_3": np.zeros((), np.float32)}
    attrs.pop("exponential_avg_factor")
    tf_want = tf.run("FusedBatchNormV3", _flat("FusedBatchNormV3", inputs), attrs)
    tf_in, tf_attrs = grad(tf_want), dict(attrs)
    if fmt == "NCDHW" and not training:
        to_last = (0, 2, 3, 4, 1)
        tf_in["y_backprop"], tf_in["x"] = dy.transpose(to_last), x.transpose(to_last)
        tf_attrs["data_format"] = "NDHWC"
    got = on_device("FusedBatchNormGradV3", grad(got), attrs)
    want = tf.run("FusedBatchNormGradV3", _flat("FusedBatchNormGradV3", tf_in), tf_attrs)
    if tf_attrs["data_format"] != fmt:
        want[0] = want[0].transpose(0, 4, 1, 2, 3)
    for i in range(3):
        assert_close(got[i], want[i], f"FusedBatchNormGradV3 output {i} {what}", scaled=True)


@pytest.mark.parametrize("op", ["Equal", "NotEqual"])
def test_equality_of_incompatible_shapes_without_an_error(tf, rng, op):
    """incompatible_shape_error=False: shapes that do not broadcast compare
    as TensorFlow's (a scalar: not equal); compatible shapes as usual."""
    for xs, ys in (((3,), (4,)), ((2, 3), (3, 2)), ((2, 1), (1, 3))):
        x = rng.integers(0, 2, xs).astype(np.int32)
        y = rng.integers(0, 2, ys).astype(np.int32)
        attrs = {"incompatible_shape_error": False}
        (got,) = on_device(op, {"x": x, "y": y}, attrs)
        (want,) = tf.run(op, [x, y], attrs)
        assert_close(got, want, f"{op} {xs} {ys} {rng.seed_text}")
