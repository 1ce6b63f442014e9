"""The CUDA plugin's matrix-vector path (reference_device/cuda/kernels_gemv.cu):
MatMul and _FusedMatMul with at most 8 output rows, no transposes, float32
(and float16/bfloat16, accumulated in float) run a split-K kernel and an
ordered reduction instead of cuBLAS; with transpose_b, a warp-per-column
kernel. Against numpy in float64 (tolerance
scaled by K), against the cuBLAS path (PLUGGABLE_CUDA_GEMV=0, in a child
process), through a traced MLP with the graph optimizer on (fused
MatMul + BiasAdd + Relu), replayed as a CUDA graph, and with CUPTI, that the
matrix-vector kernels are the ones that ran (and not for 9 rows).

Skipped with the reason where no GPU is present."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import pluggable as pg

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEV = "GPU:0"
EPS32 = float(np.finfo(np.float32).eps)
# (K, N): single elements, odd sizes (scalar loads), multiples of 4 (vector
# loads), one slice and many.
SHAPES = [(1, 1), (3, 5), (1000, 3), (3, 4096), (1000, 1000), (4096, 1001), (1024, 4096)]
ROWS = list(range(1, 10))  # 9 rows: the cuBLAS path

pytestmark = pytest.mark.skipif(
    not pg.list_physical_devices("GPU"),
    reason="no GPU device present: these tests need the CUDA reference plugin and an "
           "NVIDIA GPU")


@pytest.fixture(scope="module")
def weights():
    """Fresh random b [K, N] and bias [N] per shape, as numpy and on the GPU."""
    seed = int(np.random.default_rng().integers(2**31))
    gen = np.random.default_rng(seed)
    out = {}
    for k, n in SHAPES:
        b = gen.standard_normal((k, n)).astype(np.float32)
        bias = gen.standard_normal(n).astype(np.float32)
        with pg.device(DEV):
            out[(k, n)] = (b, bias, pg.constant(b), pg.constant(bias))
    return seed, out


def _check(got, a, b, bias=None, relu=False, what=""):
    """got == act(a @ b + bias) within the float32 bound for K products."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref, bound = a64 @ b64, np.abs(a64) @ np.abs(b64)
    if bias is not None:
        ref, bound = ref + bias, bound + np.abs(bias)
    if relu:
        ref = np.maximum(ref, 0)
    tol = (a.shape[1] + 2) * EPS32 * bound + 1e-30
    err = np.abs(got.astype(np.float64) - ref)
    assert got.shape == ref.shape, what
    assert np.all(err <= tol), f"{what}: max error {err.max()} (tolerance {tol.max()})"


def _fused(a, b, bias, relu):
    ops = ["BiasAdd", "Relu"] if relu else ["BiasAdd"]
    return pg.raw_ops._FusedMatMul(a=a, b=b, args=[bias], fused_ops=ops)


@pytest.mark.parametrize("m", ROWS)
def test_matmul_matches_numpy(m, weights, rng):
    seed, ws = weights
    for (k, n), (b, _, b_dev, _) in ws.items():
        a = rng.standard_normal((m, k)).astype(np.float32)
        with pg.device(DEV), pg.testing.expect_kernel("MatMul", "GPU"):
            got = pg.raw_ops.MatMul(a=pg.constant(a), b=b_dev).numpy()
        _check(got, a, b, what=f"MatMul m={m} K={k} N={n} {rng.seed_text} weights seed={seed}")


@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("m", ROWS)
def test_fused_matmul_matches_numpy(m, relu, weights, rng):
    seed, ws = weights
    for (k, n), (b, bias, b_dev, bias_dev) in ws.items():
        a = rng.standard_normal((m, k)).astype(np.float32)
        with pg.device(DEV), pg.testing.expect_kernel("_FusedMatMul", "GPU"):
            got = _fused(pg.constant(a), b_dev, bias_dev, relu).numpy()
        _check(got, a, b, bias, relu,
               what=f"_FusedMatMul m={m} K={k} N={n} relu={relu} {rng.seed_text} "
                    f"weights seed={seed}")


def test_back_to_back_products_repeat_bit_for_bit(weights, rng):
    """Many products queued on one stream without a wait (each reuses the
    stream's tile tickets, which every launch must leave at zero), with
    different inputs and shapes interleaved: each result is the one the
    same product gives alone."""
    seed, ws = weights
    shapes = [(k, n) for (k, n) in ws if k >= 1000]  # several K slices
    xs = [rng.standard_normal((int(rng.integers(1, 9)), k)).astype(np.float32)
          for k, _ in shapes]
    with pg.device(DEV):
        alone = []
        for (k, n), x in zip(shapes, xs):
            alone.append(pg.raw_ops.MatMul(a=pg.constant(x), b=ws[(k, n)][2]).numpy())
        xd = [pg.constant(x) for x in xs]
        queued = [[pg.raw_ops.MatMul(a=x, b=ws[kn][2]) for kn, x in zip(shapes, xd)]
                  for _ in range(20)]
        for round_ in queued:
            for got, want, (k, n), x in zip(round_, alone, shapes, xs):
                assert np.array_equal(got.numpy(), want), (k, n, x.shape, rng.seed_text, seed)
                _check(want, x, ws[(k, n)][0], what=f"MatMul K={k} N={n} {rng.seed_text}")


def _run_child(script: str, tmp_path, inputs: dict, **env_vars) -> dict:
    """Runs `script` (argv: an .npz of `inputs`, the .npz to write) in a
    child process with `env_vars` set; returns the arrays it wrote."""
    np.savez(tmp_path / "in.npz", **inputs)
    env = dict(os.environ, **env_vars)
    parts = [str(ROOT), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in parts if p)
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path / "in.npz"),
                           str(tmp_path / "out.npz")], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return dict(np.load(tmp_path / "out.npz"))


def test_weights_written_by_the_kernel_just_before_are_read(rng):
    """The product's pass 1 is a programmatic dependent launch where the GPU
    allows it (sm_90 and later): it may start while the kernel before it
    runs. Here the kernel just before writes B (a Mul into a buffer the
    allocator reuses from round to round, and an assignment into a
    variable), and A is the output of the product before: every product
    sees the new values, never the old ones."""
    k, n = 4096, 1024
    w0 = rng.standard_normal((k, n)).astype(np.float32)
    x = rng.standard_normal((1, k)).astype(np.float32)
    with pg.device(DEV):
        wd, xd = pg.constant(w0), pg.constant(x)
        var = pg.Variable(np.zeros((k, n), np.float32))
        assert var.device.endswith(DEV)
        for i in range(12):
            scale = np.float32(i - 5.5)
            w = pg.multiply(wd, scale)            # written just before the product
            got = pg.raw_ops.MatMul(a=xd, b=w).numpy()
            _check(got, x, w0 * scale, what=f"after Mul, round {i} {rng.seed_text}")
            fresh = rng.standard_normal((k, n)).astype(np.float32)
            var.assign(fresh)                     # an in-place write just before
            y = pg.raw_ops.MatMul(a=xd, b=var.read_value())
            z = pg.raw_ops.MatMul(a=y, b=pg.constant(fresh[:n, :n]))  # A from the product before
            _check(y.numpy(), x, fresh, what=f"after assign, round {i} {rng.seed_text}")
            _check(z.numpy(), y.numpy(), fresh[:n, :n], what=f"chained, round {i} {rng.seed_text}")


_PDL_CHILD = r"""
import sys
import numpy as np
import pluggable as pg
data = dict(np.load(sys.argv[1]))
out = {}
with pg.device("GPU:0"):
    h = pg.constant(data["x"])
    for i in range(3):
        h = pg.raw_ops._FusedMatMul(a=h, b=pg.constant(data[f"w{i}"]),
                                    args=[pg.constant(data[f"b{i}"])],
                                    fused_ops=["BiasAdd", "Relu"])
        out[f"h{i}"] = h.numpy()
np.savez(sys.argv[2], **out)
"""


@pytest.mark.parametrize("m", [1, 3])
def test_programmatic_launch_gives_the_same_bits(m, tmp_path, rng):
    """A chain of fused products gives the same bits with the programmatic
    dependent launch (this process, where the GPU has it) and without it
    (PLUGGABLE_CUDA_PDL=0, in a child): the launch changes when blocks
    start, never what they sum or in which order."""
    sizes = [1024, 4096, 4096, 1024]
    data = {"x": rng.standard_normal((m, sizes[0])).astype(np.float32)}
    for i, (k, n) in enumerate(zip(sizes, sizes[1:])):
        data[f"w{i}"] = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
        data[f"b{i}"] = rng.standard_normal(n).astype(np.float32)
    without = _run_child(_PDL_CHILD, tmp_path, data, PLUGGABLE_CUDA_PDL="0",
                         PLUGGABLE_CUDA_GEMV="1")
    with pg.device(DEV):
        h = pg.constant(data["x"])
        ref = data["x"]
        for i in range(3):
            h = _fused(h, pg.constant(data[f"w{i}"]), pg.constant(data[f"b{i}"]), True)
            got = h.numpy()
            assert np.array_equal(got, without[f"h{i}"]), (i, m, rng.seed_text)
            _check(got, ref, data[f"w{i}"], data[f"b{i}"], relu=True,
                   what=f"layer {i} m={m} {rng.seed_text}")
            ref = got


@pytest.mark.parametrize("m", [1, 2, 5, 8, 9])
def test_transpose_b_matches_numpy(m, weights, rng):
    """B stored [N, K] (transpose_b) takes the warp-per-column kernel."""
    seed, ws = weights
    for (k, n), (b, bias, _, bias_dev) in ws.items():
        a = rng.standard_normal((m, k)).astype(np.float32)
        bt = np.ascontiguousarray(b.T)
        what = f"m={m} K={k} N={n} {rng.seed_text} weights seed={seed}"
        with pg.device(DEV):
            ad, btd = pg.constant(a), pg.constant(bt)
            with pg.testing.expect_kernel("MatMul", "GPU"):
                got = pg.raw_ops.MatMul(a=ad, b=btd, transpose_b=True).numpy()
            _check(got, a, b, what="MatMul transpose_b " + what)
            with pg.testing.expect_kernel("_FusedMatMul", "GPU"):
                got = pg.raw_ops._FusedMatMul(a=ad, b=btd, args=[bias_dev], transpose_b=True,
                                              fused_ops=["BiasAdd", "Relu"]).numpy()
            _check(got, a, b, bias, True, what="_FusedMatMul transpose_b " + what)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16_bit_floats_accumulate_in_float(dtype, rng):
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes gives numpy bfloat16")
    dt = np.dtype(np.float16) if dtype == "float16" else np.dtype(ml_dtypes.bfloat16)
    out_eps = float(ml_dtypes.finfo(dt).eps)
    for m, k, n in [(1, 1000, 1001), (3, 64, 4096), (8, 5, 3)]:
        a = rng.standard_normal((m, k)).astype(dt)
        b = rng.standard_normal((k, n)).astype(dt)
        bias = rng.standard_normal(n).astype(dt)
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        ref = np.maximum(a64 @ b64 + bias.astype(np.float64), 0)
        bound = np.abs(a64) @ np.abs(b64) + np.abs(bias.astype(np.float64))
        # float accumulation, then one rounding to the 16-bit output
        tol = (k + 2) * EPS32 * bound + out_eps * np.abs(ref) + 1e-30
        for tb in (False, True):
            with pg.device(DEV), pg.testing.expect_kernel("_FusedMatMul", "GPU"):
                got = pg.raw_ops._FusedMatMul(
                    a=pg.constant(a), b=pg.constant(np.ascontiguousarray(b.T) if tb else b),
                    args=[pg.constant(bias)], transpose_b=tb,
                    fused_ops=["BiasAdd", "Relu"]).numpy()
            err = np.abs(got.astype(np.float64) - ref)
            assert np.all(err <= tol), (dtype, m, k, n, tb, err.max(), rng.seed_text)


_CUBLAS_CHILD = r"""
import sys
import numpy as np
import pluggable as pg
data = dict(np.load(sys.argv[1]))
out = {}
with pg.device("GPU:0"):
    for key in sorted({k[2:] for k in data if k.startswith("a_")}):
        a, b, bias = (pg.constant(data[p + key]) for p in ("a_", "b_", "c_"))
        out["mm_" + key] = pg.raw_ops.MatMul(a=a, b=b).numpy()
        out["fu_" + key] = pg.raw_ops._FusedMatMul(
            a=a, b=b, args=[bias], fused_ops=["BiasAdd", "Relu"]).numpy()
        bt = pg.constant(np.ascontiguousarray(data["b_" + key].T))
        out["tb_" + key] = pg.raw_ops.MatMul(a=a, b=bt, transpose_b=True).numpy()
np.savez(sys.argv[2], **out)
"""


def test_results_equal_the_cublas_path(tmp_path, rng):
    cases = {}
    for m, k, n in [(1, 3, 5), (1, 1024, 4096), (4, 1000, 1000), (8, 4096, 1001)]:
        key = f"{m}_{k}_{n}"
        cases["a_" + key] = rng.standard_normal((m, k)).astype(np.float32)
        cases["b_" + key] = rng.standard_normal((k, n)).astype(np.float32)
        cases["c_" + key] = rng.standard_normal(n).astype(np.float32)
    cublas = _run_child(_CUBLAS_CHILD, tmp_path, cases, PLUGGABLE_CUDA_GEMV="0")
    for key in sorted({k[2:] for k in cases if k.startswith("a_")}):
        a, b, bias = cases["a_" + key], cases["b_" + key], cases["c_" + key]
        with pg.device(DEV):
            ours = pg.raw_ops.MatMul(a=pg.constant(a), b=pg.constant(b)).numpy()
            fused = _fused(pg.constant(a), pg.constant(b), pg.constant(bias), True).numpy()
            tb = pg.raw_ops.MatMul(a=pg.constant(a), b=pg.constant(np.ascontiguousarray(b.T)),
                                   transpose_b=True).numpy()
        # both within the float32 bound of the exact product: twice it apart at most
        bound = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
        tol = 2 * (a.shape[1] + 2) * EPS32 * (bound + np.abs(bias)) + 1e-30
        assert np.all(np.abs(ours - cublas["mm_" + key]) <= tol), (key, rng.seed_text)
        assert np.all(np.abs(fused - cublas["fu_" + key]) <= tol), (key, rng.seed_text)
        assert np.all(np.abs(tb - cublas["tb_" + key]) <= tol), (key, rng.seed_text)


def _mlp(rng, sizes):
    params = []
    for i, (k, n) in enumerate(zip(sizes, sizes[1:])):
        w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
        params.append((w, (rng.standard_normal(n) * 0.1).astype(np.float32)))
    with pg.device(DEV):
        dev = [(pg.constant(w), pg.constant(b)) for w, b in params]

    def fn(x):
        h = x
        for i, (w, b) in enumerate(dev):
            h = pg.nn.bias_add(pg.matmul(h, w), b)
            if i + 1 < len(dev):
                h = pg.nn.relu(h)
        return h

    def ref(x):
        h = x.astype(np.float64)
        for i, (w, b) in enumerate(params):
            h = h @ w + b
            if i + 1 < len(params):
                h = np.maximum(h, 0)
        return h
    return fn, ref


@pytest.mark.parametrize("m", [1, 5, 9])
def test_traced_mlp_runs_fused_products(m, rng):
    sizes = [1000, 1027, 4096, 3]
    fn, ref = _mlp(rng, sizes)
    f = pg.function(fn)
    for _ in range(2):
        x = rng.standard_normal((m, sizes[0])).astype(np.float32)
        with pg.device(DEV), pg.testing.expect_kernel("_FusedMatMul", "GPU", len(sizes) - 1):
            got = f(pg.constant(x)).numpy()
        want = ref(x)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max(),
                                   err_msg=rng.seed_text)


def test_traced_mlp_replays_as_a_cuda_graph(rng, monkeypatch):
    from pluggable.graph import device_capture
    from pluggable.runtime import capture
    if not capture.supported(pg.get_device(DEV)):
        pytest.skip("the CUDA plugin was built without stream capture")
    sizes = [1024, 4096, 4096, 1024]
    fn, ref = _mlp(rng, sizes)
    x = rng.standard_normal((1, sizes[0])).astype(np.float32)
    with pg.device(DEV):
        xd = pg.constant(x)
        plain = pg.function(fn)(xd).numpy()
        monkeypatch.setattr(device_capture, "_policy", ["off"])
        pg.config.set_graph_capture("device")
        f = pg.function(fn)
        outs = [f(xd).numpy() for _ in range(device_capture.WARMUP + 3)]
        stats = f.get_concrete_function(xd).capture_stats()
    assert stats["graphs"] and stats["reason"] == "", stats
    for got in outs:  # the split-K sums are in a fixed order: same bits every time
        np.testing.assert_array_equal(got, plain)
    want = ref(x)
    np.testing.assert_allclose(plain, want, rtol=1e-4, atol=1e-4 * np.abs(want).max(),
                               err_msg=rng.seed_text)


def _cupti_missing_reason() -> str | None:
    import ctypes.util
    from pluggable.plugins import cuda_env
    paths = [os.environ.get("PLUGGABLE_CUPTI_LIBRARY") or cuda_env.locate_cupti(),
             "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so", "/usr/local/cuda/lib64/libcupti.so"]
    paths += [os.path.join(d, "libcupti.so")
              for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    if any(p and os.path.exists(p) for p in paths) or ctypes.util.find_library("cupti"):
        return None
    return "CUPTI (libcupti) is not installed here: the kernel names come from CUPTI"


def _kernels_by_op(logdir, run) -> dict[str, list[str]]:
    """The names of the GPU kernels each op launched inside `run()`."""
    from pluggable.framework import proto
    with pg.profiler.Profile(logdir) as prof:
        run()
    res = prof.result
    assert res.errors == []
    space = proto.decode(proto.XSpace, pathlib.Path(res.xplane_path).read_bytes(), strict=True)
    plane = next(p for p in space.planes if p.name == "/device:GPU:0")
    names = {k: md.name for k, md in plane.stat_metadata.items()}
    out: dict[str, list[str]] = {}
    for line in plane.lines:
        for ev in line.events:
            stats = {names[s.metadata_id]: getattr(s, s.WhichOneof("value")) for s in ev.stats}
            if "grid" in stats and "op" in stats:
                out.setdefault(stats["op"], []).append(plane.event_metadata[ev.metadata_id].name)
    return out


def test_the_matrix_vector_kernels_ran(tmp_path, rng):
    reason = _cupti_missing_reason()
    if reason:
        pytest.skip(reason)
    b = rng.standard_normal((1024, 4096)).astype(np.float32)
    bias = rng.standard_normal(4096).astype(np.float32)
    x1 = rng.standard_normal((1, 1024)).astype(np.float32)
    x9 = rng.standard_normal((9, 1024)).astype(np.float32)
    with pg.device(DEV):
        bd, cd = pg.constant(b), pg.constant(bias)
        a1, a9 = pg.constant(x1), pg.constant(x9)
        pg.synchronize()

        btd = pg.constant(np.ascontiguousarray(b.T))

        def small():
            pg.raw_ops.MatMul(a=a1, b=bd).numpy()
            _fused(a1, bd, cd, True).numpy()

        def transposed():
            pg.raw_ops.MatMul(a=a1, b=btd, transpose_b=True).numpy()

        def nine():
            pg.raw_ops.MatMul(a=a9, b=bd).numpy()
            _fused(a9, bd, cd, True).numpy()
        ran = _kernels_by_op(tmp_path / "one", small)
        ran9 = _kernels_by_op(tmp_path / "nine", nine)
        ran_t = _kernels_by_op(tmp_path / "transposed", transposed)
    assert any("gemv_t_kernel" in k for k in ran_t.get("MatMul", [])), ran_t
    for op in ("MatMul", "_FusedMatMul"):
        # One launch per product: the last block of each tile sums the slices.
        assert any("gemv_partial_kernel" in k for k in ran.get(op, [])), (op, ran)
        assert not any("gemv_reduce_kernel" in k for k in ran.get(op, [])), (op, ran)
        assert ran9.get(op) and not any("gemv" in k for k in ran9[op]), (op, ran9)
