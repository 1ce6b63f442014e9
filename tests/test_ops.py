"""Op tests for the plugin devices: every starter op against a numpy reference.

Each test runs on "MY_DEVICE:0" (the host reference plugin) and on "GPU:0"
when a GPU plugin device is present. Inputs are fresh random values (the seed
is printed in every assertion message); references are computed in float64
and rounded to the op's dtype. Every op call runs inside
``pg.testing.expect_kernel`` so that a silent CPU fallback fails the test.
"""
from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest

import pluggable as pg

BF16 = np.dtype(ml_dtypes.bfloat16)
F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
I8, U8, I16 = np.dtype(np.int8), np.dtype(np.uint8), np.dtype(np.int16)
I32, I64, BOOL = np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.bool_)

FLOATS = [F16, BF16, F32, F64]
INTS = [I32, I64]
REAL = FLOATS + INTS
ALL = [BOOL, I8, U8, I16, I32, I64, F16, BF16, F32, F64]

# Relative (and absolute, for values near 0) tolerance of one rounding step.
TOL = {F16: 1e-2, BF16: 3e-2, F32: 1e-5, F64: 1e-12}


def _name(dt) -> str:
    return np.dtype(dt).name


def pg_dtype(dt):
    """The pluggable DType for a numpy dtype."""
    return getattr(pg, {"bool": "bool"}.get(_name(dt), _name(dt)))


@pytest.fixture(params=["MY_DEVICE:0", "GPU:0"])
def device(request):
    name = request.param
    if name.startswith("GPU") and not pg.list_physical_devices("GPU"):
        pytest.skip("no GPU device present")
    return name


def device_type(device: str) -> str:
    return device.split(":")[0]


def run(device: str, op: str, **inputs):
    """Runs raw op `op` on `device`. numpy arrays become device constants;
    other keyword arguments are passed as attributes. Returns the output as a
    numpy array."""
    with pg.device(device):
        args = {k: pg.constant(v) if isinstance(v, np.ndarray) else v
                for k, v in inputs.items()}
        with pg.testing.expect_kernel(op, device_type(device)):
            out = getattr(pg.raw_ops, op)(**args)
        return out.numpy()


def index(values, dt=I32) -> np.ndarray:
    """A host-memory index argument (reduction_indices, perm, shape, dims)."""
    return np.asarray(values, dtype=dt)


def is_float(dt) -> bool:
    return np.dtype(dt) in FLOATS


def random(rng, shape, dt, low=-2.0, high=2.0) -> np.ndarray:
    """Random values of dtype `dt` (integers in [low*25, high*25) for ints)."""
    dt = np.dtype(dt)
    if dt == BOOL:
        x = rng.integers(0, 2, size=shape) != 0
    elif not is_float(dt):
        lo, hi = int(low * 25), int(high * 25)
        if dt.kind == "u":
            lo, hi = 0, max(hi, 1) * 2
        x = rng.integers(lo, hi, size=shape)
    else:
        x = rng.uniform(low, high, size=shape)
    return np.array(x, dtype=dt).reshape(shape)


def check(actual, expected64, dt, rng, what, scale=1.0, bound=None):
    """Compares `actual` (dtype dt) with a float64 reference.

    Integers and bools must match exactly. Floats: the reference is rounded to
    dt, then |actual - expected| <= tol * (scale + |expected|), or
    <= tol * (bound + 1) elementwise when an error bound array (e.g. the sum
    of |terms| of a dot product) is given."""
    dt = np.dtype(dt)
    msg = f"{what} dtype={_name(dt)} {rng.seed_text}"
    assert actual.dtype == dt, f"{msg}: got dtype {actual.dtype}"
    expected = np.asarray(expected64).astype(dt)
    assert actual.shape == expected.shape, f"{msg}: shape {actual.shape} != {expected.shape}"
    if not is_float(dt):
        np.testing.assert_array_equal(actual, expected, err_msg=msg)
        return
    a = actual.astype(np.float64)
    e = expected.astype(np.float64)
    tol = TOL[dt]
    if bound is None:
        np.testing.assert_allclose(a, e, rtol=tol, atol=tol * scale, err_msg=msg,
                                   equal_nan=True)
    else:
        limit = tol * (np.asarray(bound, np.float64) + 1.0)
        with np.errstate(invalid="ignore"):
            diff = np.abs(a - e)
        bad = ~((diff <= limit) | (np.isnan(a) & np.isnan(e)) | (a == e))
        assert not bad.any(), (f"{msg}: {bad.sum()} elements out of tolerance, "
                               f"max diff {diff[bad].max()}\nactual={a[bad][:8]}\n"
                               f"expected={e[bad][:8]}")


def f64(x):
    return np.asarray(x).astype(np.float64)


# --------------------------------------------------------------------------
# Binary ops with broadcasting
# --------------------------------------------------------------------------

def _int_div(x, y):
    """C-style integer division (truncates toward zero); x / 0 gives 0."""
    x, y = x.astype(np.int64), y.astype(np.int64)
    safe = np.where(y == 0, 1, y)
    q = np.abs(x) // np.abs(safe) * np.sign(x) * np.sign(safe)
    return np.where(y == 0, 0, q)


BINARY = {
    "AddV2": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "RealDiv": np.divide,
    "Maximum": np.maximum,
    "Minimum": np.minimum,
}

BROADCAST_SHAPES = [
    ((3, 4), (3, 4)),
    ((3, 1, 5), (4, 1)),
    ((), (2, 3)),
    ((2, 3), ()),
    ((), ()),
    ((0, 3), (1, 3)),
    ((2, 1, 3, 1), (1, 4, 1, 5)),
    ((6,), (2, 3, 6)),
]


@pytest.mark.parametrize("dt", REAL, ids=_name)
@pytest.mark.parametrize("op", list(BINARY))
def test_binary(device, rng, op, dt):
    for xs, ys in BROADCAST_SHAPES:
        x = random(rng, xs, dt)
        y = random(rng, ys, dt)
        if op == "RealDiv" and is_float(dt):
            # Keep denominators away from 0.
            y = (np.sign(f64(y)) * (np.abs(f64(y)) + 0.5)).astype(dt)
        out = run(device, op, x=x, y=y)
        if op == "RealDiv" and not is_float(dt):
            expected = _int_div(x, y)
        else:
            expected = BINARY[op](f64(x), f64(y))
        check(out, expected, dt, rng, f"{op} {xs} with {ys}", scale=4.0)


def test_realdiv_int_by_zero(device, rng):
    x = np.array([7, -7, 0, 5, -9], np.int32)
    y = np.array([0, 0, 0, 2, 2], np.int32)
    out = run(device, "RealDiv", x=x, y=y)
    np.testing.assert_array_equal(out, [0, 0, 0, 2, -4], err_msg=rng.seed_text)


@pytest.mark.parametrize("dt", [F32, I64], ids=_name)
def test_binary_large(device, rng, dt):
    n = 1 << 20
    x = random(rng, (n,), dt)
    y = random(rng, (n,), dt)
    out = run(device, "AddV2", x=x, y=y)
    check(out, f64(x) + f64(y), dt, rng, "AddV2 1<<20", scale=4.0)
    # The same with broadcasting of a row vector.
    r = random(rng, (1024,), dt)
    out = run(device, "Mul", x=x.reshape(1024, 1024), y=r)
    check(out, f64(x).reshape(1024, 1024) * f64(r), dt, rng, "Mul broadcast", scale=4.0)


def test_binary_incompatible_shapes(device):
    with pg.device(device):
        a = pg.constant(np.zeros((2, 3), np.float32))
        b = pg.constant(np.zeros((4,), np.float32))
        with pytest.raises(pg.errors.InvalidArgumentError, match="AddV2"):
            with pg.testing.expect_kernel("AddV2", device_type(device)):
                pg.raw_ops.AddV2(x=a, y=b).numpy()


# --------------------------------------------------------------------------
# Unary ops
# --------------------------------------------------------------------------

def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


UNARY = {
    # op: (reference, dtypes, input range)
    "Neg": (np.negative, REAL, (-2, 2)),
    "Abs": (np.abs, REAL, (-2, 2)),
    "Exp": (np.exp, FLOATS, (-3, 3)),
    "Log": (np.log, FLOATS, (0.05, 5)),
    "Sqrt": (np.sqrt, FLOATS, (0, 5)),
    "Tanh": (np.tanh, FLOATS, (-3, 3)),
    "Sigmoid": (_sigmoid, FLOATS, (-8, 8)),
    "Relu": (lambda x: np.maximum(x, 0), REAL, (-2, 2)),
}
UNARY_CASES = [(op, dt) for op, (_, dts, _) in UNARY.items() for dt in dts]
UNARY_SHAPES = [(), (7,), (3, 4, 5), (0, 3)]


@pytest.mark.parametrize("op,dt", UNARY_CASES,
                         ids=[f"{op}-{_name(dt)}" for op, dt in UNARY_CASES])
def test_unary(device, rng, op, dt):
    fn, _, (lo, hi) = UNARY[op]
    arg = "features" if op == "Relu" else "x"
    for shape in UNARY_SHAPES:
        x = random(rng, shape, dt, lo, hi)
        out = run(device, op, **{arg: x})
        check(out, fn(f64(x)), dt, rng, f"{op} {shape}")


def test_unary_large(device, rng):
    x = random(rng, (1 << 20,), F32, -3, 3)
    check(run(device, "Tanh", x=x), np.tanh(f64(x)), F32, rng, "Tanh 1<<20")


# --------------------------------------------------------------------------
# Softmax
# --------------------------------------------------------------------------

@pytest.mark.parametrize("dt", FLOATS, ids=_name)
def test_softmax(device, rng, dt):
    # Large spreads check the max subtraction (exp(500) overflows float).
    for shape, spread in [((5,), 2), ((4, 7), 2), ((2, 3, 8), 4), ((3, 6), 60),
                          ((3, 6), 500), ((0, 4), 1), ((4, 1), 1), ((2, 1000), 5)]:
        x = random(rng, shape, dt, -spread, spread)
        xf = f64(x)
        e = np.exp(xf - xf.max(axis=-1, keepdims=True)) if xf.size else xf
        expected = e / e.sum(axis=-1, keepdims=True) if xf.size else xf
        out = run(device, "Softmax", logits=x)
        check(out, expected, dt, rng, f"Softmax {shape}", scale=0.1)


# --------------------------------------------------------------------------
# MatMul
# --------------------------------------------------------------------------

MATMUL_TYPES = FLOATS + INTS


@pytest.mark.parametrize("transpose_b", [False, True])
@pytest.mark.parametrize("transpose_a", [False, True])
@pytest.mark.parametrize("dt", MATMUL_TYPES, ids=_name)
def test_matmul(device, rng, dt, transpose_a, transpose_b):
    for m, k, n in [(3, 4, 5), (1, 1, 1), (7, 16, 2), (0, 3, 4), (3, 0, 4), (2, 5, 0)]:
        a = random(rng, (m, k), dt, -1, 1)
        b = random(rng, (k, n), dt, -1, 1)
        a_in = np.ascontiguousarray(a.T) if transpose_a else a
        b_in = np.ascontiguousarray(b.T) if transpose_b else b
        out = run(device, "MatMul", a=a_in, b=b_in, transpose_a=transpose_a,
                  transpose_b=transpose_b)
        expected = f64(a) @ f64(b)
        bound = np.abs(f64(a)) @ np.abs(f64(b))
        check(out, expected, dt, rng, f"MatMul {m}x{k}x{n} ta={transpose_a} "
              f"tb={transpose_b}", bound=bound)


@pytest.mark.parametrize("dt", [F32, F64, BF16], ids=_name)
def test_matmul_large(device, rng, dt):
    a = random(rng, (512, 512), dt, -1, 1)
    b = random(rng, (512, 512), dt, -1, 1)
    out = run(device, "MatMul", a=a, b=b)
    # TF32 is off by default, so float32 must be accurate to ~1e-5 of the
    # sum of |terms| of each dot product.
    bound = np.abs(f64(a)) @ np.abs(f64(b))
    check(out, f64(a) @ f64(b), dt, rng, "MatMul 512x512", bound=bound)


def test_matmul_mismatched_inner_dims(device):
    with pg.device(device):
        a = pg.constant(np.ones((2, 3), np.float32))
        b = pg.constant(np.ones((4, 5), np.float32))
        with pytest.raises(pg.errors.InvalidArgumentError) as info:
            with pg.testing.expect_kernel("MatMul", device_type(device)):
                pg.raw_ops.MatMul(a=a, b=b).numpy()
    assert "MatMul" in str(info.value)


# --------------------------------------------------------------------------
# Reductions
# --------------------------------------------------------------------------

REDUCE_AXES = [[0], [1], [-1], [0, 2], [2, 0], [], 1, -2, [0, 1, 2]]


def _reduce_ref(op, x, axes, keep_dims, dt):
    """Reference with TF semantics for empty reductions and integer Mean:
    float64 for floats, exact int64 arithmetic for ints. Also returns the
    error bound (sum of |x| over the reduced elements, / count for Mean)."""
    axes = tuple(np.atleast_1d(np.asarray(axes, np.int64)).tolist())
    axes = tuple(a % x.ndim for a in axes) if x.ndim else axes
    count = int(np.prod([x.shape[a] for a in axes])) if axes else 1
    integer = not is_float(dt)
    xr = x.astype(np.int64) if integer else f64(x)
    if op in ("Sum", "Mean"):
        r = xr.sum(axis=axes, keepdims=keep_dims)
        if op == "Mean":
            if integer:
                r = np.where(r < 0, -(-r // max(count, 1)), r // max(count, 1))
                r = r if count else np.zeros_like(r)
            else:
                with np.errstate(invalid="ignore", divide="ignore"):
                    r = r / count
    else:
        if integer:
            info = np.iinfo(dt)
            ident = info.min if op == "Max" else info.max
        else:
            ident = -np.inf if op == "Max" else np.inf
        fn = np.max if op == "Max" else np.min
        r = fn(xr, axis=axes, keepdims=keep_dims, initial=ident)
    bound = np.abs(f64(x)).sum(axis=axes, keepdims=keep_dims)
    if op == "Mean" and count:
        bound = bound / count
    return r, bound


@pytest.mark.parametrize("tidx", [I32, I64], ids=_name)
@pytest.mark.parametrize("dt", REAL, ids=_name)
@pytest.mark.parametrize("op", ["Sum", "Mean", "Max", "Min"])
def test_reduce(device, rng, op, dt, tidx):
    x = random(rng, (3, 4, 5), dt)
    for axes, keep_dims in itertools.product(REDUCE_AXES, [False, True]):
        out = run(device, op, input=x, reduction_indices=index(axes, tidx),
                  keep_dims=keep_dims)
        ref, bound = _reduce_ref(op, x, axes, keep_dims, dt)
        check(out, ref, dt, rng, f"{op} axes={axes} keep_dims={keep_dims}",
              bound=bound)


@pytest.mark.parametrize("dt", REAL, ids=_name)
@pytest.mark.parametrize("op", ["Sum", "Mean", "Max", "Min"])
def test_reduce_edge_cases(device, rng, op, dt):
    cases = [
        (random(rng, (), dt), []),           # 0-d, no reduction
        (random(rng, (0, 3), dt), [0]),      # empty reduction: identities
        (random(rng, (0, 3), dt), [1]),      # empty output
        (random(rng, (2, 0), dt), [0, 1]),   # everything, empty
        (random(rng, (4, 1, 3), dt), [1]),   # size-1 axis
    ]
    for x, axes in cases:
        for keep_dims in (False, True):
            out = run(device, op, input=x, reduction_indices=index(axes),
                      keep_dims=keep_dims)
            ref, bound = _reduce_ref(op, x, axes, keep_dims, dt)
            check(out, ref, dt, rng, f"{op} {x.shape} axes={axes} "
                  f"keep_dims={keep_dims}", bound=bound)


@pytest.mark.parametrize("op", ["Sum", "Mean", "Max"])
def test_reduce_large(device, rng, op):
    x = random(rng, (1024, 1024), F32)
    for axes in ([0], [1], [0, 1]):
        out = run(device, op, input=x, reduction_indices=index(axes))
        ref, bound = _reduce_ref(op, x, axes, False, F32)
        check(out, ref, F32, rng, f"{op} 1024x1024 axes={axes}", bound=bound)


def test_reduce_duplicate_axes(device):
    with pg.device(device):
        x = pg.constant(np.ones((2, 3), np.float32))
        axes = pg.constant([1, -1], dtype=pg.int32)
        with pytest.raises(pg.errors.InvalidArgumentError):
            with pg.testing.expect_kernel("Sum", device_type(device)):
                pg.raw_ops.Sum(input=x, reduction_indices=axes).numpy()


# --------------------------------------------------------------------------
# Cast
# --------------------------------------------------------------------------

CAST_TYPES = [BOOL, I32, I64, F16, F32, F64]


def _cast_input(rng, shape, src):
    if is_float(src):
        # Fractions of both signs (truncation toward zero), exact integers,
        # and zeros (for bool).
        x = np.array(rng.uniform(-100, 100, size=shape), dtype=np.float64).reshape(shape)
        x.flat[::3] = np.round(x.flat[::3])
        x.flat[::5] = 0
        return x.astype(src)
    return random(rng, shape, src, -4, 4)


@pytest.mark.parametrize("dst", CAST_TYPES, ids=_name)
@pytest.mark.parametrize("src", CAST_TYPES, ids=_name)
def test_cast(device, rng, src, dst):
    for shape in [(), (4, 5), (0, 3), (1000,)]:
        x = _cast_input(rng, shape, src)
        out = run(device, "Cast", x=x, DstT=pg_dtype(dst))
        assert out.dtype == dst
        expected = x.astype(dst)  # numpy: truncation toward 0, x != 0 for bool
        np.testing.assert_array_equal(out, expected,
                                      err_msg=f"Cast {src}->{dst} {rng.seed_text}")


@pytest.mark.parametrize("other", [I8, U8, I16, BF16, F16, F32, F64, I32],
                         ids=_name)
def test_cast_more_types(device, rng, other):
    # bfloat16 <-> other types; small ints <-> float32.
    x = random(rng, (6, 7), other, -1, 1)
    for dst in ([BF16, F32] if other != BF16 else [F32, F64, I32, BOOL]):
        out = run(device, "Cast", x=x, DstT=pg_dtype(dst))
        expected = x.astype(np.float64).astype(np.float32).astype(dst) \
            if dst == BF16 else x.astype(dst)
        np.testing.assert_array_equal(out, expected,
                                      err_msg=f"Cast {other}->{dst} {rng.seed_text}")


# --------------------------------------------------------------------------
# Transpose, Reshape, Fill, Identity
# --------------------------------------------------------------------------

@pytest.mark.parametrize("tperm", [I32, I64], ids=_name)
@pytest.mark.parametrize("dt", ALL, ids=_name)
def test_transpose(device, rng, dt, tperm):
    cases = [((2, 3, 4, 5), (2, 0, 3, 1)), ((2, 3, 4, 5), (3, 2, 1, 0)),
             ((5, 7), (1, 0)), ((3, 4), (0, 1)), ((), ()), ((0, 3), (1, 0)),
             ((2, 1, 3), (1, 2, 0)), ((64, 33), (1, 0))]
    for shape, perm in cases:
        x = random(rng, shape, dt)
        out = run(device, "Transpose", x=x, perm=index(perm, tperm))
        np.testing.assert_array_equal(out, np.transpose(x, perm),
                                      err_msg=f"Transpose {shape} {perm} {rng.seed_text}")
        assert out.dtype == dt


@pytest.mark.parametrize("dt", ALL, ids=_name)
def test_reshape(device, rng, dt):
    cases = [((2, 3, 4), (4, -1)), ((2, 3, 4), (24,)), ((6,), (2, 3)),
             ((), (1, 1)), ((1,), ()), ((0, 3), (3, 0)), ((0, 3), (-1, 3)),
             ((2, 3, 4), (-1,)), ((12,), (2, -1, 3))]
    for shape, target in cases:
        x = random(rng, shape, dt)
        for tshape in (I32, I64):
            out = run(device, "Reshape", tensor=x, shape=index(target, tshape))
            np.testing.assert_array_equal(out, x.reshape(target),
                                          err_msg=f"Reshape {shape}->{target} {rng.seed_text}")
            assert out.shape == x.reshape(target).shape and out.dtype == dt


def test_reshape_incompatible(device):
    with pg.device(device):
        x = pg.constant(np.ones((2, 3), np.float32))
        for target in ([4, 2], [-1, 4]):
            shape = pg.constant(target, dtype=pg.int32)
            with pytest.raises(pg.errors.InvalidArgumentError, match="Reshape"):
                with pg.testing.expect_kernel("Reshape", device_type(device)):
                    pg.raw_ops.Reshape(tensor=x, shape=shape).numpy()


@pytest.mark.parametrize("dt", ALL, ids=_name)
def test_fill(device, rng, dt):
    for dims, itype in [((2, 3), I64), ((4,), I32), ((), I64), ((0, 4), I64),
                        ((3, 1, 2), I32), ((1000, 3), I64)]:
        value = random(rng, (), dt)
        out = run(device, "Fill", dims=index(dims, itype), value=np.asarray(value, dt))
        np.testing.assert_array_equal(out, np.full(dims, value, dt),
                                      err_msg=f"Fill {dims} {rng.seed_text}")
        assert out.dtype == dt and out.shape == tuple(dims)


@pytest.mark.parametrize("dt", ALL, ids=_name)
def test_identity(device, rng, dt):
    for shape in [(), (5,), (2, 3, 4), (0, 2)]:
        x = random(rng, shape, dt)
        out = run(device, "Identity", input=x)
        np.testing.assert_array_equal(out, x, err_msg=f"Identity {shape} {rng.seed_text}")
        assert out.dtype == dt


# --------------------------------------------------------------------------
# Conv2D
# --------------------------------------------------------------------------

def _conv2d_ref(x, f, strides, padding, dilations, explicit=None):
    """float64 NHWC / HWIO convolution with TensorFlow's padding rules.
    Returns (output, bound) where bound is the same conv on |x|, |f|."""
    n, h, w, c = x.shape
    kh, kw, _, co = f.shape
    sh, sw = strides
    dh, dw = dilations

    def geometry(size, k, s, d, pads):
        eff = (k - 1) * d + 1
        if padding == "SAME":
            out = -(-size // s)
            total = max((out - 1) * s + eff - size, 0)
            return out, total // 2, total - total // 2
        before, after = pads if padding == "EXPLICIT" else (0, 0)
        return max((size + before + after - eff) // s + 1, 0), before, after

    oh, pt, pb = geometry(h, kh, sh, dh, explicit[0] if explicit else None)
    ow, pl, pr = geometry(w, kw, sw, dw, explicit[1] if explicit else None)
    xp = np.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, 0)))
    out = np.zeros((n, oh, ow, co))
    bound = np.zeros((n, oh, ow, co))
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, i * dh: i * dh + (oh - 1) * sh + 1: sh,
                       j * dw: j * dw + (ow - 1) * sw + 1: sw, :]
            patch = patch[:, :oh, :ow, :]
            out += patch @ f[i, j]
            bound += np.abs(patch) @ np.abs(f[i, j])
    return out, bound


CONV_CASES = [
    ("SAME", (1, 1), (1, 1)),
    ("VALID", (1, 1), (1, 1)),
    ("SAME", (2, 2), (1, 1)),
    ("VALID", (2, 2), (1, 1)),
    ("SAME", (1, 1), (2, 2)),
    ("VALID", (1, 1), (2, 2)),
    ("SAME", (2, 1), (1, 1)),
]


@pytest.mark.parametrize("padding,strides,dilations", CONV_CASES,
                         ids=[f"{p}-s{s[0]}{s[1]}-d{d[0]}{d[1]}" for p, s, d in CONV_CASES])
@pytest.mark.parametrize("dt", FLOATS, ids=_name)
def test_conv2d(device, rng, dt, padding, strides, dilations):
    for xshape, fshape in [((2, 9, 10, 3), (3, 3, 3, 4)), ((1, 5, 5, 2), (2, 2, 2, 1)),
                           ((1, 4, 4, 1), (1, 1, 1, 3))]:
        x = random(rng, xshape, dt, -1, 1)
        f = random(rng, fshape, dt, -1, 1)
        out = run(device, "Conv2D", input=x, filter=f,
                  strides=[1, strides[0], strides[1], 1], padding=padding,
                  dilations=[1, dilations[0], dilations[1], 1])
        ref, bound = _conv2d_ref(f64(x), f64(f), strides, padding, dilations)
        check(out, ref, dt, rng, f"Conv2D {xshape} {fshape} {padding} "
              f"strides={strides} dilations={dilations}", bound=bound)


@pytest.mark.parametrize("dt", [F32, F64], ids=_name)
def test_conv2d_explicit_and_empty(device, rng, dt):
    x = random(rng, (1, 6, 5, 2), dt, -1, 1)
    f = random(rng, (3, 2, 2, 3), dt, -1, 1)
    out = run(device, "Conv2D", input=x, filter=f, strides=[1, 1, 2, 1],
              padding="EXPLICIT", explicit_paddings=[0, 0, 1, 2, 0, 1, 0, 0])
    ref, bound = _conv2d_ref(f64(x), f64(f), (1, 2), "EXPLICIT", (1, 1),
                             explicit=((1, 2), (0, 1)))
    check(out, ref, dt, rng, "Conv2D EXPLICIT", bound=bound)
    # Empty batch: correct output shape, no work.
    x0 = random(rng, (0, 6, 5, 2), dt)
    out = run(device, "Conv2D", input=x0, filter=f, strides=[1, 1, 1, 1], padding="SAME")
    assert out.shape == (0, 6, 5, 3)


# --------------------------------------------------------------------------
# CheckNumerics (finite inputs; the error path is in test_async.py)
# --------------------------------------------------------------------------

@pytest.mark.parametrize("dt", FLOATS, ids=_name)
def test_check_numerics_finite(device, rng, dt):
    for shape in [(), (3, 4), (0, 2)]:
        x = random(rng, shape, dt)
        out = run(device, "CheckNumerics", tensor=x, message="finite")
        np.testing.assert_array_equal(out, x, err_msg=rng.seed_text)
