"""_FusedMatMul and MatMul products whose algorithm is chosen by timing
(reference_device/cuda/lt_matmul.cu): a product of at least 2^26
multiply-adds that the matrix-vector path does not take times cuBLASLt's
first candidates (and, for MatMul, its own cublasGemmEx call) on its first
call of a shape and keeps the fastest for the process.

Against numpy in float64 for every dtype (TF32 included), transpose and
epilogue (none, bias, bias + Relu); the tuned call and the calls after it
give the same bits; a traced function replayed as a CUDA graph gives the
bits of the eager product; against the untimed choice
(PLUGGABLE_CUDA_AUTOTUNE=0, in a child process); and with CUPTI, that the
first call of a shape ran the candidates, the next ran one product, and a
product below 2^26 multiply-adds times nothing.

Skipped with the reason where no GPU is present."""
from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest

import pluggable as pg
# pytestmark: skipped, with the reason, where no GPU is present
from test_gpu_gemv import (DEV, EPS32, _cupti_missing_reason, _kernels_by_op,  # noqa: F401
                           _run_child, pytestmark)

# Every test takes shapes of its own (M*N*K >= 2^26), so that its first call
# of each is the one that tunes.
_dims = itertools.count()


def _fresh_shape() -> tuple[int, int, int]:
    i = next(_dims)
    return 384 + 8 * i, 512 + 4 * (i % 7), 448 + 12 * i


# dtype label -> (numpy storage type, TF32, relative rounding of the inputs
# and output the product may carry beyond float32 accumulation)
DTYPES = {"float32": (np.float32, False, 0.0), "TF32": (np.float32, True, 2.0 ** -10),
          "float16": (np.float16, False, 2.0 ** -10),
          "bfloat16": (ml_dtypes.bfloat16, False, 2.0 ** -7)}


def _check(got, a, b, rel, bias=None, relu=False, what=""):
    """got == act(op(a) op(b) + bias) within the float32 bound for K
    products, plus `rel` of the bound for TF32 inputs and 16-bit outputs."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref, bound = a64 @ b64, np.abs(a64) @ np.abs(b64)
    if bias is not None:
        b_64 = bias.astype(np.float64)
        ref, bound = ref + b_64, bound + np.abs(b_64)
    if relu:
        ref = np.maximum(ref, 0)
    tol = ((a.shape[1] + 2) * EPS32 + 2 * rel) * bound + 1e-30
    err = np.abs(got.astype(np.float64) - ref)
    assert got.shape == ref.shape, what
    assert np.all(err <= tol), f"{what}: max error {err.max()} (tolerance {tol.max()})"


def _operands(rng, m, k, n, npdt, ta, tb):
    a = rng.standard_normal((m, k)).astype(np.float32).astype(npdt)
    b = rng.standard_normal((k, n)).astype(np.float32).astype(npdt)
    a_in = np.ascontiguousarray(a.T) if ta else a
    b_in = np.ascontiguousarray(b.T) if tb else b
    return a, b, a_in, b_in


def _fused(x, y, c, relu, ta=False, tb=False):
    ops = ["BiasAdd", "Relu"] if relu else ["BiasAdd"]
    return pg.raw_ops._FusedMatMul(a=x, b=y, args=[c], fused_ops=ops, transpose_a=ta,
                                   transpose_b=tb)


@pytest.mark.parametrize("label", list(DTYPES))
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_tuned_fused_matmul_matches_numpy(label, relu, ta, tb, rng):
    npdt, tf32, rel = DTYPES[label]
    m, k, n = _fresh_shape()
    a, b, a_in, b_in = _operands(rng, m, k, n, npdt, ta, tb)
    bias = rng.standard_normal(n).astype(np.float32).astype(npdt)
    pg.config.enable_tensor_float_32_execution(tf32)
    try:
        with pg.device(DEV), pg.testing.expect_kernel("_FusedMatMul", "GPU", 4):
            x, y, c = pg.constant(a_in), pg.constant(b_in), pg.constant(bias)
            first = _fused(x, y, c, relu, ta, tb).numpy()
            again = [_fused(x, y, c, relu, ta, tb) for _ in range(3)]
            again = [t.numpy() for t in again]
    finally:
        pg.config.enable_tensor_float_32_execution(False)
    _check(first, a, b, rel, bias=bias, relu=relu,
           what=f"_FusedMatMul {label} relu={relu} ta={ta} tb={tb} {m}x{k}x{n} {rng.seed_text}")
    for got in again:  # one algorithm for the shape from the first call on
        np.testing.assert_array_equal(got.view(np.uint8), first.view(np.uint8),
                                      err_msg=rng.seed_text)


@pytest.mark.parametrize("label", list(DTYPES))
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_tuned_matmul_matches_numpy(label, ta, tb, rng):
    npdt, tf32, rel = DTYPES[label]
    m, k, n = _fresh_shape()
    a, b, a_in, b_in = _operands(rng, m, k, n, npdt, ta, tb)
    pg.config.enable_tensor_float_32_execution(tf32)
    try:
        with pg.device(DEV), pg.testing.expect_kernel("MatMul", "GPU", 4):
            x, y = pg.constant(a_in), pg.constant(b_in)
            first = pg.raw_ops.MatMul(a=x, b=y, transpose_a=ta, transpose_b=tb).numpy()
            again = [pg.raw_ops.MatMul(a=x, b=y, transpose_a=ta, transpose_b=tb)
                     for _ in range(3)]
            again = [t.numpy() for t in again]
    finally:
        pg.config.enable_tensor_float_32_execution(False)
    _check(first, a, b, rel, what=f"MatMul {label} ta={ta} tb={tb} {m}x{k}x{n} {rng.seed_text}")
    for got in again:  # one algorithm for the shape from the first call on
        np.testing.assert_array_equal(got.view(np.uint8), first.view(np.uint8),
                                      err_msg=rng.seed_text)


@pytest.mark.parametrize("layer_kind", ["fused", "matmul"])
def test_replayed_graph_gives_the_bits_of_the_eager_product(layer_kind, rng, monkeypatch):
    from pluggable.graph import device_capture
    from pluggable.runtime import capture
    if not capture.supported(pg.get_device(DEV)):
        pytest.skip("the CUDA plugin was built without stream capture")
    m, k, n = _fresh_shape()
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    with pg.device(DEV):
        x, y, c = pg.constant(a), pg.constant(b), pg.constant(bias)

        def layer(x):
            if layer_kind == "matmul":
                return pg.matmul(x, y)
            return pg.nn.relu(pg.nn.bias_add(pg.matmul(x, y), c))
        monkeypatch.setattr(device_capture, "_policy", ["off"])
        pg.config.set_graph_capture("device")
        f = pg.function(layer)
        op = "MatMul" if layer_kind == "matmul" else "_FusedMatMul"
        with pg.testing.expect_kernel(op, "GPU"):
            replays = [f(x).numpy() for _ in range(device_capture.WARMUP + 3)]
        stats = f.get_concrete_function(x).capture_stats()
        if layer_kind == "matmul":
            eager = pg.raw_ops.MatMul(a=x, b=y).numpy()
        else:
            eager = pg.raw_ops._FusedMatMul(a=x, b=y, args=[c],
                                            fused_ops=["BiasAdd", "Relu"]).numpy()
    assert stats["graphs"] and stats["reason"] == "", stats
    if layer_kind == "matmul":
        _check(eager, a, b, 0.0, what=rng.seed_text)
    else:
        _check(eager, a, b, 0.0, bias=bias, relu=True, what=rng.seed_text)
    for got in replays:  # warm-up calls (the first tunes), the capture, replays
        np.testing.assert_array_equal(got, eager, err_msg=rng.seed_text)


_FIRST_CHOICE_CHILD = r"""
import sys
import numpy as np
import pluggable as pg
inp = np.load(sys.argv[1])
out = {}
with pg.device("GPU:0"):
    for key in ("plain", "ta", "tb"):
        a, b, c = (pg.constant(inp[p + key]) for p in ("a_", "b_", "c_"))
        out[key] = pg.raw_ops._FusedMatMul(a=a, b=b, args=[c], fused_ops=["BiasAdd"],
                                           transpose_a=key == "ta",
                                           transpose_b=key == "tb").numpy()
        out["mm_" + key] = pg.raw_ops.MatMul(a=a, b=b, transpose_a=key == "ta",
                                             transpose_b=key == "tb").numpy()
np.savez(sys.argv[2], **out)
"""


def test_results_agree_with_the_heuristics_first_choice(tmp_path, rng):
    m, k, n = _fresh_shape()
    cases, ours = {}, {}
    for key in ("plain", "ta", "tb"):
        a, b, a_in, b_in = _operands(rng, m, k, n, np.float32, key == "ta", key == "tb")
        bias = rng.standard_normal(n).astype(np.float32)
        cases["a_" + key], cases["b_" + key], cases["c_" + key] = a_in, b_in, bias
        with pg.device(DEV):
            x, y = pg.constant(a_in), pg.constant(b_in)
            got = _fused(x, y, pg.constant(bias), False, key == "ta", key == "tb").numpy()
            got_mm = pg.raw_ops.MatMul(a=x, b=y, transpose_a=key == "ta",
                                       transpose_b=key == "tb").numpy()
        ours[key] = (a, b, bias, got, got_mm)
    first = _run_child(_FIRST_CHOICE_CHILD, tmp_path, cases, PLUGGABLE_CUDA_AUTOTUNE="0")
    for key, (a, b, bias, got, got_mm) in ours.items():
        _check(got, a, b, 0.0, bias=bias, what=f"tuned {key} {rng.seed_text}")
        _check(first[key], a, b, 0.0, bias=bias, what=f"first choice {key} {rng.seed_text}")
        _check(got_mm, a, b, 0.0, what=f"tuned MatMul {key} {rng.seed_text}")
        _check(first["mm_" + key], a, b, 0.0, what=f"cublasGemmEx {key} {rng.seed_text}")


@pytest.mark.parametrize("op", ["_FusedMatMul", "MatMul"])
def test_the_first_call_of_a_shape_times_the_candidates(op, tmp_path, rng):
    reason = _cupti_missing_reason()
    if reason:
        pytest.skip(reason)
    m, k, n = _fresh_shape()
    with pg.device(DEV):
        x = pg.constant(rng.standard_normal((m, k)).astype(np.float32))
        y = pg.constant(rng.standard_normal((k, n)).astype(np.float32))
        c = pg.constant(rng.standard_normal(n).astype(np.float32))
        pg.synchronize()

        def call():
            if op == "MatMul":
                return pg.raw_ops.MatMul(a=x, b=y).numpy()
            return _fused(x, y, c, True).numpy()
        first = _kernels_by_op(tmp_path / "first", call)
        second = _kernels_by_op(tmp_path / "second", call)
    # Each timed candidate runs once untimed and three times timed: with two
    # candidates or more (for MatMul, cublasGemmEx and at least one of
    # cuBLASLt's) the first call launches at least 8 + 1 products.
    assert len(first.get(op, [])) >= 9, first
    # Afterwards one product (cuBLASLt may split it into a product and a
    # reduction of its K slices).
    assert 1 <= len(second.get(op, [])) <= 2, second
    assert len(second[op]) < len(first[op]) // 4, (first, second)


def test_a_product_below_the_threshold_times_nothing(tmp_path, rng):
    reason = _cupti_missing_reason()
    if reason:
        pytest.skip(reason)
    m, k, n = 256, 384, 512  # 2^25.6 multiply-adds, above the tiled kernel's size
    with pg.device(DEV):
        x = pg.constant(rng.standard_normal((m, k)).astype(np.float32))
        y = pg.constant(rng.standard_normal((k, n)).astype(np.float32))
        pg.synchronize()
        got = {}
        first = _kernels_by_op(tmp_path / "first",
                               lambda: got.setdefault("c", pg.raw_ops.MatMul(a=x, b=y).numpy()))
    assert 1 <= len(first.get("MatMul", [])) <= 2, first
    _check(got["c"], x.numpy(), y.numpy(), 0.0, what=rng.seed_text)
