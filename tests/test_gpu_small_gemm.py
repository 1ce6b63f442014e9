"""The CUDA plugin's tiled kernel for small floating products
(reference_device/cuda/kernels_matmul.cu): MatMul and BatchMatMulV2 of at
most 2^19 multiply-adds that the matrix-vector path does not take run
`matmul_tiled_kernel` instead of cuBLAS. Against numpy in float64 (the
float32 bound for K products), for every transpose, odd sizes, broadcast
batches and the 16-bit types; against the cuBLAS path
(PLUGGABLE_CUDA_SMALL_GEMM=0, in a child process); and with CUPTI, that
the tiled kernel is the one that ran, and not for a large product.

Skipped with the reason where no GPU is present."""
from __future__ import annotations

import numpy as np
import pytest

import pluggable as pg
from test_gpu_gemv import EPS32, _cupti_missing_reason, _kernels_by_op, _run_child

DEV = "GPU:0"

pytestmark = pytest.mark.skipif(
    not pg.list_physical_devices("GPU"),
    reason="no GPU device present: these tests need the CUDA reference plugin and an "
           "NVIDIA GPU")

# (M, K, N): the digits CNN's dense layers and their gradients, single
# elements, sizes off the 16-wide tile, and the largest the path takes.
SHAPES = [(32, 128, 64), (128, 32, 64), (32, 64, 10), (9, 1, 1), (17, 33, 15),
          (64, 128, 64)]


def _bound_check(got, a64, b64, what, out_eps=0.0):
    ref, bound = a64 @ b64, np.abs(a64) @ np.abs(b64)
    tol = (a64.shape[-1] + 2) * EPS32 * bound + out_eps * np.abs(ref) + 1e-30
    assert got.shape == ref.shape, what
    err = np.abs(got.astype(np.float64) - ref)
    assert np.all(err <= tol), f"{what}: max error {err.max()} (tolerance {tol.max()})"


@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
def test_matmul_matches_numpy(ta, tb, rng):
    for m, k, n in SHAPES:
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        ai = np.ascontiguousarray(a.T) if ta else a
        bi = np.ascontiguousarray(b.T) if tb else b
        with pg.device(DEV), pg.testing.expect_kernel("MatMul", "GPU"):
            got = pg.raw_ops.MatMul(a=pg.constant(ai), b=pg.constant(bi), transpose_a=ta,
                                    transpose_b=tb).numpy()
        _bound_check(got, a.astype(np.float64), b.astype(np.float64),
                     f"{m}x{k}x{n} ta={ta} tb={tb} {rng.seed_text}")


def test_float64_accumulates_in_double(rng):
    a = rng.standard_normal((40, 70))
    b = rng.standard_normal((70, 30))
    with pg.device(DEV):
        got = pg.raw_ops.MatMul(a=pg.constant(a), b=pg.constant(b)).numpy()
    np.testing.assert_allclose(got, a @ b, rtol=1e-12, atol=1e-12, err_msg=rng.seed_text)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16_bit_floats_accumulate_in_float(dtype, rng):
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes gives numpy bfloat16")
    dt = np.dtype(np.float16) if dtype == "float16" else np.dtype(ml_dtypes.bfloat16)
    a = rng.standard_normal((33, 48)).astype(dt)
    b = rng.standard_normal((48, 20)).astype(dt)
    with pg.device(DEV):
        got = pg.raw_ops.MatMul(a=pg.constant(a), b=pg.constant(b)).numpy()
    _bound_check(got, a.astype(np.float64), b.astype(np.float64), f"{dtype} {rng.seed_text}",
                 out_eps=float(ml_dtypes.finfo(dt).eps))


def test_batch_matmul_with_broadcast_batches(rng):
    a = rng.standard_normal((3, 1, 20, 12)).astype(np.float32)
    b = rng.standard_normal((4, 12, 9)).astype(np.float32)
    with pg.device(DEV), pg.testing.expect_kernel("BatchMatMulV2", "GPU"):
        got = pg.raw_ops.BatchMatMulV2(x=pg.constant(a), y=pg.constant(b)).numpy()
        adj = pg.raw_ops.BatchMatMulV2(
            x=pg.constant(np.ascontiguousarray(np.swapaxes(a, -1, -2))), y=pg.constant(b),
            adj_x=True).numpy()
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    _bound_check(got, a64, b64, "broadcast " + rng.seed_text)
    _bound_check(adj, a64, b64, "adj_x " + rng.seed_text)


_CUBLAS_CHILD = r"""
import sys
import numpy as np
import pluggable as pg
data = dict(np.load(sys.argv[1]))
out = {}
with pg.device("GPU:0"):
    for key in sorted({k[2:] for k in data if k.startswith("a_")}):
        a, b = pg.constant(data["a_" + key]), pg.constant(data["b_" + key])
        out["mm_" + key] = pg.raw_ops.MatMul(a=a, b=b).numpy()
np.savez(sys.argv[2], **out)
"""


def test_results_agree_with_the_cublas_path(tmp_path, rng):
    cases = {}
    for m, k, n in SHAPES:
        cases[f"a_{m}_{k}_{n}"] = rng.standard_normal((m, k)).astype(np.float32)
        cases[f"b_{m}_{k}_{n}"] = rng.standard_normal((k, n)).astype(np.float32)
    cublas = _run_child(_CUBLAS_CHILD, tmp_path, cases, PLUGGABLE_CUDA_SMALL_GEMM="0")
    for key in sorted({k[2:] for k in cases if k.startswith("a_")}):
        a, b = cases["a_" + key], cases["b_" + key]
        with pg.device(DEV):
            ours = pg.raw_ops.MatMul(a=pg.constant(a), b=pg.constant(b)).numpy()
        # both within the float32 bound of the exact product: twice it apart at most
        bound = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
        tol = 2 * (a.shape[1] + 2) * EPS32 * bound + 1e-30
        assert np.all(np.abs(ours - cublas["mm_" + key]) <= tol), (key, rng.seed_text)


def test_the_tiled_kernel_ran_for_small_products_only(tmp_path, rng):
    reason = _cupti_missing_reason()
    if reason:
        pytest.skip(reason)
    with pg.device(DEV):
        small = [pg.constant(rng.standard_normal(s).astype(np.float32))
                 for s in ((32, 128), (128, 64))]
        large = [pg.constant(rng.standard_normal(s).astype(np.float32))
                 for s in ((256, 256), (256, 256))]
        pg.synchronize()
        ran_small = _kernels_by_op(tmp_path / "small",
                                   lambda: pg.raw_ops.MatMul(a=small[0], b=small[1]).numpy())
        ran_large = _kernels_by_op(tmp_path / "large",
                                   lambda: pg.raw_ops.MatMul(a=large[0], b=large[1]).numpy())
    assert any("matmul_tiled_kernel" in k for k in ran_small.get("MatMul", [])), ran_small
    assert ran_large.get("MatMul") and not any(
        "matmul_tiled_kernel" in k for k in ran_large["MatMul"]), ran_large
