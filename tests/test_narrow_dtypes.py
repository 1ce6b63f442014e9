"""The narrow element types (pg.dtypes.LIMITED: uint16, the float8 types,
int4/uint4/int2/uint2 and float4_e2m1fn): Cast on CPU and MY_DEVICE against
ml_dtypes bit for bit, copies to and from MY_DEVICE, the data-movement
kernels that carry them, TensorProto round trips, and the ONNX Cast,
CastLike, QuantizeLinear and DequantizeLinear of them against
onnx.reference."""
import ml_dtypes
import numpy as np
import pytest

import pluggable as pg
from pluggable.framework import dtypes
from pluggable.framework.proto import tensors as tensor_protos

DEVICES = ["CPU:0", "MY_DEVICE:0"]
NARROW = [d for d in dtypes.LIMITED if d is not dtypes.uint16]
FLOAT8 = [dtypes.float8_e5m2, dtypes.float8_e4m3fn, dtypes.float8_e4m3fnuz,
          dtypes.float8_e5m2fnuz]
WIDE_FLOATS = [np.float32, np.float16, np.float64]


def _kind(device: str) -> str:
    return device.split(":")[0]


def _floats(rng, n: int) -> np.ndarray:
    """Values across every range the narrow floats have: tiny (subnormal),
    ties, large (overflow), both zeros, NaN and the infinities."""
    x = np.concatenate([rng.standard_normal(n) * 10.0 ** rng.integers(-4, 6, n),
                        rng.integers(-20, 20, n) / 4.0,
                        [0.0, -0.0, np.nan, np.inf, -np.inf, 448, 464, 480, 57344, 61440,
                         6.0, 7.0, -8.5, 1e-9, -1e-9]])
    return rng.permutation(x)


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint8 if a.dtype.itemsize == 1 else np.uint16)


def _same(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert got.dtype == want.dtype, what
    if want.dtype.itemsize <= 2 and want.dtype.kind == "V":
        g, w = got.astype(np.float64), want.astype(np.float64)
        nan = np.isnan(w)
        np.testing.assert_array_equal(np.isnan(g), nan, err_msg=what)
        np.testing.assert_array_equal(_bits(got)[~nan], _bits(want)[~nan], err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


def _cast(device: str, x: np.ndarray, to) -> np.ndarray:
    with pg.device(device):
        t = pg.constant(x)
        with pg.testing.expect_kernel("Cast", _kind(device)):
            y = pg.cast(t, to)
        assert y.device.endswith(device), y.device
    return y.numpy()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dt", NARROW, ids=lambda d: d.name)
def test_cast_from_wide_types_matches_ml_dtypes(device, dt, rng):
    x = _floats(rng, 300)
    with np.errstate(invalid="ignore", over="ignore"):
        for src in WIDE_FLOATS:
            xs = x.astype(src)
            _same(_cast(device, xs, dt), xs.astype(dt.as_numpy_dtype), f"{src} -> {dt.name}")
        for src in (np.int8, np.int32, np.int64, np.uint16, np.uint64):
            info = np.iinfo(src)
            xi = rng.integers(max(info.min, -300), min(info.max, 300), 200).astype(src)
            _same(_cast(device, xi, dt), xi.astype(dt.as_numpy_dtype), f"{src} -> {dt.name}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dt", NARROW, ids=lambda d: d.name)
def test_cast_to_wide_types_matches_ml_dtypes(device, dt, rng):
    every = np.arange(256, dtype=np.uint8)
    if dt.is_integer:   # the values of the type, in ml_dtypes' layout
        every = np.arange(int(ml_dtypes.iinfo(dt.as_numpy_dtype).min),
                          int(ml_dtypes.iinfo(dt.as_numpy_dtype).max) + 1)
        x = rng.permutation(every).astype(dt.as_numpy_dtype)
    else:
        every = every[every < (16 if dt is dtypes.float4_e2m1fn else 256)]
        x = rng.permutation(every).view(dt.as_numpy_dtype)
    with np.errstate(invalid="ignore"):
        for dst in (np.float32, np.float16, np.float64, np.int8, np.int32, np.uint8):
            want = x.astype(np.float64) if dt.is_floating else x   # (ints wrap)
            if np.dtype(dst).kind in "iu" and dt.is_floating:   # TensorFlow's rule: truncate,
                # clamp, NaN -> 0
                info = np.iinfo(dst)
                want = np.clip(np.nan_to_num(np.trunc(want), nan=0, posinf=info.max,
                                             neginf=info.min), info.min, info.max)
            _same(_cast(device, x, dst), want.astype(dst), f"{dt.name} -> {np.dtype(dst)}")
        for other in NARROW:
            _same(_cast(device, x, other), x.astype(other.as_numpy_dtype),
                  f"{dt.name} -> {other.name}")


@pytest.mark.parametrize("device", DEVICES)
def test_unsigned_casts(device, rng):
    x = rng.integers(0, 2**64, 500, dtype=np.uint64)
    x[:3] = [0, 2**63, 2**64 - 1]
    for dst in (np.float64, np.float32, np.uint32, np.uint16, np.int64):
        _same(_cast(device, x, dst), x.astype(dst), f"uint64 -> {np.dtype(dst)}")
    f = np.concatenate([rng.uniform(-10, 7e4, 300), [np.nan, np.inf, -np.inf]])
    for dst in (np.uint16, np.uint32):
        info = np.iinfo(dst)
        want = np.clip(np.nan_to_num(np.trunc(f), nan=0, posinf=info.max, neginf=0), 0,
                       info.max).astype(dst)
        _same(_cast(device, f, dst), want, f"float64 -> {np.dtype(dst)}")


@pytest.mark.parametrize("dt", list(dtypes.LIMITED), ids=lambda d: d.name)
def test_copies_and_data_movement_on_my_device(dt, rng):
    x = _floats(rng, 40)[:60].reshape(3, 4, 5)
    with np.errstate(invalid="ignore", over="ignore"):
        x = x.astype(dt.as_numpy_dtype)
    assert pg.dtypes.as_dtype(x.dtype) is dt
    with pg.device("MY_DEVICE:0"):
        t = pg.constant(x)
        with pg.testing.expect_kernel("Reshape", "MY_DEVICE"):   # (pg.reshape makes a view)
            r = pg.raw_ops.Reshape(tensor=t, shape=np.array([5, 12], np.int32))
        with pg.testing.expect_kernel("Identity", "MY_DEVICE"):
            i = pg.identity(r)
    assert t.device.endswith("MY_DEVICE:0") and i.device.endswith("MY_DEVICE:0")
    assert t.dtype is dt and i.dtype is dt
    np.testing.assert_array_equal(_bits(t.numpy()), _bits(x))
    np.testing.assert_array_equal(_bits(i.numpy()), _bits(x.reshape(5, 12)))


@pytest.mark.parametrize("dt", list(dtypes.LIMITED), ids=lambda d: d.name)
def test_tensor_proto_round_trip(dt, rng):
    with np.errstate(invalid="ignore", over="ignore"):
        x = _floats(rng, 10).astype(dt.as_numpy_dtype)
    for a in (x, x[:1].reshape(())):
        back = tensor_protos.from_tensor_proto(tensor_protos.to_tensor_proto(a))
        assert back.dtype == a.dtype and back.shape == a.shape
        np.testing.assert_array_equal(_bits(back), _bits(a))


@pytest.mark.parametrize("dt", [dtypes.int4, dtypes.uint4, dtypes.int2, dtypes.uint2,
                                dtypes.uint16], ids=lambda d: d.name)
def test_constants_check_the_range_of_small_integers(dt, rng):
    info = ml_dtypes.iinfo(dt.as_numpy_dtype)
    lo, hi = int(info.min), int(info.max)
    v = [int(i) for i in rng.integers(lo, hi + 1, 6)]
    np.testing.assert_array_equal(pg.constant(v, dtype=dt).numpy().astype(np.int64), v)
    for bad in (hi + 1, lo - 1, [0, hi + 1]):
        with pytest.raises(pg.errors.InvalidArgumentError, match=f"out of range for {dt.name}"):
            pg.constant(bad, dtype=dt)


def test_enum_values_are_tensorflows():
    from pluggable.framework.proto.library import messages
    data_type = messages().DataType
    for d in dtypes.LIMITED:
        assert data_type.Name(d.enum) == "DT_" + d.name.upper(), d


# ------------------------------------------------------------------ ONNX

onnx = pytest.importorskip("onnx", reason="ONNX models are read with the onnx package")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

_ONNX_TYPE = {dtypes.float8_e4m3fn: TensorProto.FLOAT8E4M3FN,
              dtypes.float8_e4m3fnuz: TensorProto.FLOAT8E4M3FNUZ,
              dtypes.float8_e5m2: TensorProto.FLOAT8E5M2,
              dtypes.float8_e5m2fnuz: TensorProto.FLOAT8E5M2FNUZ,
              dtypes.int4: TensorProto.INT4, dtypes.uint4: TensorProto.UINT4,
              dtypes.int2: TensorProto.INT2, dtypes.uint2: TensorProto.UINT2,
              dtypes.float4_e2m1fn: TensorProto.FLOAT4E2M1, dtypes.uint16: TensorProto.UINT16}


def _run_onnx(model, feeds: dict, device: str, kernel: str) -> list:
    m = pg.onnx.import_model(model)
    with pg.device(device), pg.testing.expect_kernel(kernel, _kind(device)):
        out = m(feeds)
    return [out[o.name].numpy() for o in model.graph.output]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("saturate", [1, 0])
@pytest.mark.parametrize("dt", FLOAT8, ids=lambda d: d.name)
def test_onnx_cast_saturate_matches_onnx_reference(device, dt, saturate, rng):
    x = _floats(rng, 100).astype(np.float32)
    node = helper.make_node("Cast", ["x"], ["y"], to=_ONNX_TYPE[dt], saturate=saturate)
    g = helper.make_graph([node], "cast", [helper.make_tensor_value_info("x", 1, [x.size])],
                          [helper.make_tensor_value_info("y", _ONNX_TYPE[dt], [x.size])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    _same(_run_onnx(model, {"x": x}, device, "Cast")[0], want, f"saturate={saturate}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dt", [dtypes.int4, dtypes.uint4, dtypes.int2, dtypes.uint2,
                                dtypes.float8_e4m3fn, dtypes.float4_e2m1fn, dtypes.uint16],
                         ids=lambda d: d.name)
def test_onnx_quantize_round_trip_matches_onnx_reference(device, dt, rng):
    """QuantizeLinear then DequantizeLinear, per axis, the zero point an
    initializer (packed two or four to a byte in the proto for 4- and 2-bit
    types: the importer unpacks it)."""
    x = (rng.standard_normal((3, 7)) * 4).astype(np.float32)
    scale = rng.uniform(0.2, 1.0, 3).astype(np.float32)
    if dt.is_integer:
        info = ml_dtypes.iinfo(dt.as_numpy_dtype)
        zp = rng.integers(int(info.min), int(info.max) + 1, 3).astype(dt.as_numpy_dtype)
    else:
        zp = np.zeros(3, dt.as_numpy_dtype)
    zp_init = numpy_helper.from_array(zp, "zp")
    nodes = [helper.make_node("QuantizeLinear", ["x", "scale", "zp"], ["q"], axis=0),
             helper.make_node("DequantizeLinear", ["q", "scale", "zp"], ["y"], axis=0)]
    g = helper.make_graph(nodes, "q", [helper.make_tensor_value_info("x", 1, list(x.shape))],
                          [helper.make_tensor_value_info("q", _ONNX_TYPE[dt], list(x.shape)),
                           helper.make_tensor_value_info("y", 1, list(x.shape))],
                          [numpy_helper.from_array(scale, "scale"), zp_init])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 25)])
    want_q, want_y = ReferenceEvaluator(model).run(None, {"x": x})
    q, y = _run_onnx(model, {"x": x}, device, "Mul")
    _same(q, want_q, "QuantizeLinear")
    np.testing.assert_allclose(y, want_y, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_onnx_string_inputs_and_outputs(device, rng):
    words = np.array(["a", "bc", "d\u00e9f", ""], dtype=object)[rng.permutation(4)]
    node = helper.make_node("StringConcat", ["x", "y"], ["z"])
    eq = helper.make_node("Equal", ["z", "x"], ["e"])
    g = helper.make_graph([node, eq], "s", [helper.make_tensor_value_info("x", 8, [4]),
                                            helper.make_tensor_value_info("y", 8, [1])],
                          [helper.make_tensor_value_info("z", 8, [4]),
                           helper.make_tensor_value_info("e", 9, [4])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    y = np.array([""], dtype=object)
    from pluggable.onnx import backend
    with pg.testing.expect_kernel("Add", "CPU"):   # string kernels are the CPU's
        z, e = backend.for_device(device).run_model(model, [words, y])
    np.testing.assert_array_equal(z, words)
    assert all(isinstance(v, str) for v in z)
    np.testing.assert_array_equal(e, np.ones(4, bool))


@pytest.mark.parametrize("dt", [dtypes.int4, dtypes.uint4, dtypes.int2, dtypes.uint2,
                                dtypes.float4_e2m1fn], ids=lambda d: d.name)
def test_onnx_packed_initializers_inline_and_external(dt, rng, tmp_path):
    """An odd number of 4- or 2-bit values, packed in the model (inline and
    in an external data file), reads back one per byte."""
    if dt.is_integer:
        info = ml_dtypes.iinfo(dt.as_numpy_dtype)
        w = rng.integers(int(info.min), int(info.max) + 1, (3, 5)).astype(dt.as_numpy_dtype)
    else:
        w = np.arange(16, dtype=np.uint8)[rng.integers(0, 16, (3, 5))].view(dt.as_numpy_dtype)
    nodes = [helper.make_node("Cast", ["w"], ["f"], to=TensorProto.FLOAT),   # (folded)
             helper.make_node("Mul", ["f", "x"], ["y"])]
    g = helper.make_graph(nodes, "w", [helper.make_tensor_value_info("x", 1, [3, 5])],
                          [helper.make_tensor_value_info("y", 1, [3, 5])],
                          [numpy_helper.from_array(w, "w")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    x = rng.uniform(-2, 2, (3, 5)).astype(np.float32)
    want = w.astype(np.float32) * x
    np.testing.assert_array_equal(pg.onnx.import_model(model)(x=x)["y"].numpy(), want)
    path = tmp_path / "m.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="m.data", size_threshold=0)
    assert (tmp_path / "m.data").stat().st_size == -(-15 // (8 // int(ml_dtypes.iinfo(
        dt.as_numpy_dtype).bits if dt.is_integer else 4)))
    with pg.device("MY_DEVICE:0"), pg.testing.expect_kernel("Mul", "MY_DEVICE"):
        got = pg.onnx.import_model(str(path))(x=x)["y"]
    np.testing.assert_array_equal(got.numpy(), want)
