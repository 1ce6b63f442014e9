"""pg.nn.scaled_dot_product_attention and pg.nn.layer_norm (ops
ScaledDotProductAttention, LayerNorm and their gradient ops) against numpy
on fresh random inputs: the fused CPU kernels, the composed form on
MY_DEVICE (which has no fused kernel), and the CUDA kernels on GPU:0 where
one is present (skipped with the reason otherwise), which must also agree
with the composed form on the same device. The CUDA attention has two paths,
each test run on both: the cuBLAS one that materialises the scores, taken
where its scratch is at most PLUGGABLE_CUDA_ATTENTION_SCRATCH_MB (256 by
default; the plugin reads it on every call), and the memory-efficient kernels
(the variable set to 0); they must agree with each other, and CUPTI's kernel
names show which one ran. Gradients are checked by finite differences in
float64 on CPU."""
from __future__ import annotations

import numpy as np
import pytest

import pluggable as pg
from pluggable import errors
from pluggable.framework import registry
from pluggable.ops import transformer_ops
from pluggable.tools.testing import expect_kernel
from test_gpu_gemv import _cupti_missing_reason, _kernels_by_op

HAS_GPU = bool(pg.list_physical_devices("GPU"))
needs_gpu = pytest.mark.skipif(not HAS_GPU, reason="no GPU device present")
TOL = {"float16": 2e-2, "bfloat16": 8e-2, "float32": 2e-5, "float64": 1e-10}
GPU_TOL = {"float16": 2e-2, "bfloat16": 8e-2, "float32": 2e-4}
SCRATCH_ENV = "PLUGGABLE_CUDA_ATTENTION_SCRATCH_MB"


def _np(dt: str):
    return pg.as_dtype(dt).as_numpy_dtype


def ref_attention(q, k, v, mask=None, causal=False, scale=None):
    """Attention in float64 by the textbook formula."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    s = q @ np.swapaxes(k, -1, -2) * scale
    ok = np.ones(s.shape[-2:], bool)
    if causal:
        ok = np.tril(ok)
    if mask is not None:
        ok = ok & mask
    ok = np.broadcast_to(ok, s.shape)
    s = np.where(ok, s, -np.inf)
    m = np.max(s, axis=-1, keepdims=True)
    e = np.where(ok, np.exp(s - np.where(np.isfinite(m), m, 0)), 0)
    den = e.sum(-1, keepdims=True)
    return (e / np.where(den > 0, den, 1)) @ v


def ref_layer_norm(x, g, b, eps=1e-5):
    x = np.asarray(x, np.float64)
    m = x.mean(-1, keepdims=True)
    return (x - m) / np.sqrt(((x - m) ** 2).mean(-1, keepdims=True) + eps) * g + b


def _qkv(rng, dt, b, h, sq, sk, d):
    t = _np(dt)
    return tuple(rng.uniform(-1, 1, s).astype(t) for s in ((b, h, sq, d), (b, h, sk, d),
                                                          (b, h, sk, d)))


def _close(got, want, tol, what):
    got = np.asarray(got, np.float64)
    scale = max(1.0, float(np.abs(want).max()) if np.size(want) else 1.0)
    assert np.allclose(got, want, atol=tol * scale, rtol=tol), \
        f"{what}: max error {np.abs(got - want).max()}"


# ------------------------------------------------------------ attention

@pytest.mark.parametrize("device", ["CPU:0", "MY_DEVICE:0"])
@pytest.mark.parametrize("dt", ["float32", "float64", "float16"])
@pytest.mark.parametrize("mode", ["plain", "causal", "mask", "mask4", "both"])
def test_attention_matches_numpy(rng, device, dt, mode):
    q, k, v = _qkv(rng, dt, 2, 3, 7, 9 if mode != "causal" else 7, 16)
    mask = None
    if mode in ("mask", "both"):
        mask = rng.random((7, k.shape[2])) > 0.4
        mask[2] = False  # a row that sees no key gives zeros
    if mode == "mask4":
        mask = rng.random((2, 1, 7, 9)) > 0.4
    causal = mode in ("causal", "both")
    with pg.device(device):
        out = pg.nn.scaled_dot_product_attention(q, k, v, mask=mask, causal=causal)
    assert out.dtype.name == dt and out.shape == q.shape
    _close(out.numpy(), ref_attention(q, k, v, mask, causal), TOL[dt],
           f"{device} {dt} {mode} {rng.seed_text}")


def test_attention_uses_fused_op_on_cpu_and_composes_on_my_device(rng):
    q, k, v = _qkv(rng, "float32", 1, 2, 5, 5, 8)
    with expect_kernel("ScaledDotProductAttention", "CPU"):
        with pg.device("CPU:0"):
            pg.nn.scaled_dot_product_attention(q, k, v, causal=True)
    types = {"T": pg.float32, "Tlse": pg.float32}
    assert transformer_ops.fused_kernel_available("ScaledDotProductAttention", types)
    with pg.device("MY_DEVICE:0"):
        assert not transformer_ops.fused_kernel_available("ScaledDotProductAttention", types)
        out = pg.nn.scaled_dot_product_attention(q, k, v, causal=True)
    assert "MY_DEVICE" in out.device


@pytest.mark.parametrize("op", ["ScaledDotProductAttention", "LayerNorm"])
def test_a_device_kernel_constrained_on_every_type_attr_is_found(rng, monkeypatch, op):
    """A plugin kernel names every type attribute (the CUDA plugin's:
    T and Tlse, or T and U); the user function must pick it up."""
    want = {"T": pg.float32, "Tlse" if op != "LayerNorm" else "U": pg.float32}
    seen = []

    def find(name, device_type, types):
        seen.append((name, device_type))
        k = registry.KernelDef(name, device_type, want, frozenset())
        return k if device_type == "MY_DEVICE" and k.matches(types) else None
    monkeypatch.setattr(transformer_ops, "find_kernel", find)
    x = rng.uniform(-1, 1, (1, 1, 3, 4)).astype(np.float32)
    with pg.device("MY_DEVICE:0"):
        # the fused op was called: with no real MY_DEVICE kernel, soft
        # placement runs it on CPU
        with expect_kernel(op, "CPU"):
            if op == "LayerNorm":
                pg.nn.layer_norm(x, np.ones(4, np.float32), np.zeros(4, np.float32))
            else:
                pg.nn.scaled_dot_product_attention(x, x, x)
    assert seen == [(op, "MY_DEVICE")]


def _attention_loss(q, k, v, w, mask, causal, device):
    with pg.device(device):
        qv, kv, vv = pg.Variable(q), pg.Variable(k), pg.Variable(v)
        with pg.GradientTape() as tape:
            o = pg.nn.scaled_dot_product_attention(qv, kv, vv, mask=mask, causal=causal)
            loss = pg.math.reduce_sum(o * pg.constant(w))
        return [g.numpy() for g in tape.gradient(loss, [qv, kv, vv])]


@pytest.mark.parametrize("mode", ["plain", "causal", "mask"])
def test_attention_gradient_by_finite_differences(rng, mode):
    q, k, v = _qkv(rng, "float64", 1, 2, 4, 5 if mode != "causal" else 4, 3)
    w = rng.uniform(-1, 1, q.shape)
    mask = rng.random((4, 5)) > 0.3 if mode == "mask" else None
    if mask is not None:
        mask[1] = False
    causal = mode == "causal"
    grads = _attention_loss(q, k, v, w, mask, causal, "CPU:0")
    eps = 1e-6
    for name, x, g in zip("qkv", (q, k, v), grads):
        num = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            hi, lo = x.copy(), x.copy()
            hi[idx] += eps
            lo[idx] -= eps
            args = [hi if n == name else a for n, a in zip("qkv", (q, k, v))]
            f_hi = (ref_attention(*args, mask, causal) * w).sum()
            args = [lo if n == name else a for n, a in zip("qkv", (q, k, v))]
            f_lo = (ref_attention(*args, mask, causal) * w).sum()
            num[idx] = (f_hi - f_lo) / (2 * eps)
        _close(g, num, 1e-6, f"d{name} {mode} {rng.seed_text}")


def test_attention_gradient_composed_equals_fused(rng):
    q, k, v = _qkv(rng, "float32", 2, 2, 6, 7, 8)
    w = rng.uniform(-1, 1, q.shape).astype(np.float32)
    mask = rng.random((6, 7)) > 0.3
    fused = _attention_loss(q, k, v, w, mask, True, "CPU:0")
    composed = _attention_loss(q, k, v, w, mask, True, "MY_DEVICE:0")
    for a, b in zip(fused, composed):
        _close(a, b, 1e-5, rng.seed_text)


@pytest.mark.parametrize("device", ["CPU:0", "MY_DEVICE:0"])
def test_attention_errors_name_the_shapes(rng, device):
    q, k, v = _qkv(rng, "float32", 1, 2, 4, 5, 8)
    attn = pg.nn.scaled_dot_product_attention
    with pg.device(device):
        with pytest.raises(errors.InvalidArgumentError, match=r"head dimension.*\[1, 2, 5, 6\]"):
            attn(q, k[..., :6], v[..., :6])
        with pytest.raises(errors.InvalidArgumentError, match=r"mask has shape \[4, 4\]"):
            attn(q, k, v, mask=np.ones((4, 4), bool))
        with pytest.raises(errors.InvalidArgumentError, match=r"mask must be bool.*float32"):
            attn(q, k, v, mask=np.ones((4, 5), np.float32))
        with pytest.raises(errors.InvalidArgumentError, match=r"key has dtype float16"):
            attn(q, k.astype(np.float16), v)
        long_k = np.zeros((1, 1, transformer_ops.MAX_SEQUENCE + 1, 1), np.float16)
        with pytest.raises(errors.InvalidArgumentError,
                           match=r"sequence too long.*\[1, 1, 1048577, 1\]"):
            attn(np.zeros((1, 1, 1, 1), np.float16), long_k, long_k)
    with pytest.raises(errors.InvalidArgumentError, match="takes at most one mask"):
        pg.raw_ops.ScaledDotProductAttention(query=q, key=k, value=v,
                                             mask=[np.ones((4, 5), bool)] * 2, scale=1.0)


# ------------------------------------------------------------ layer norm

@pytest.mark.parametrize("device", ["CPU:0", "MY_DEVICE:0"])
@pytest.mark.parametrize("dt", ["float32", "float64", "float16"])
def test_layer_norm_matches_numpy(rng, device, dt):
    t = _np(dt)
    x = (rng.standard_normal((3, 5, 37)) * 3 + 1).astype(t)
    g, b = rng.standard_normal(37).astype(t), rng.standard_normal(37).astype(t)
    with pg.device(device):
        y = pg.nn.layer_norm(x, g, b, epsilon=1e-3)
    _close(y.numpy(), ref_layer_norm(x, np.float64(g), np.float64(b), 1e-3), TOL[dt] * 5,
           f"{device} {dt} {rng.seed_text}")


def _ln_grads(x, g, b, w, device):
    with pg.device(device):
        xv, gv, bv = pg.Variable(x), pg.Variable(g), pg.Variable(b)
        with pg.GradientTape() as tape:
            loss = pg.math.reduce_sum(pg.nn.layer_norm(xv, gv, bv) * pg.constant(w))
        return [t.numpy() for t in tape.gradient(loss, [xv, gv, bv])]


def test_layer_norm_gradient_by_finite_differences(rng):
    x = rng.standard_normal((3, 6))
    g, b, w = rng.standard_normal(6), rng.standard_normal(6), rng.standard_normal((3, 6))
    grads = _ln_grads(x, g, b, w, "CPU:0")
    eps = 1e-6
    for i, (a, got) in enumerate(zip((x, g, b), grads)):
        num = np.zeros_like(a)
        for idx in np.ndindex(a.shape):
            args = [x, g, b]
            hi, lo = a.copy(), a.copy()
            hi[idx] += eps
            lo[idx] -= eps
            args[i] = hi
            f_hi = (ref_layer_norm(*args) * w).sum()
            args[i] = lo
            f_lo = (ref_layer_norm(*args) * w).sum()
            num[idx] = (f_hi - f_lo) / (2 * eps)
        _close(got, num, 1e-6, f"input {i} {rng.seed_text}")


def test_layer_norm_composed_equals_fused_and_errors(rng):
    x = rng.standard_normal((4, 9)).astype(np.float32)
    g, b = rng.standard_normal(9).astype(np.float32), rng.standard_normal(9).astype(np.float32)
    w = rng.standard_normal((4, 9)).astype(np.float32)
    with expect_kernel("LayerNormGrad", "CPU"):
        fused = _ln_grads(x, g, b, w, "CPU:0")
    for a, c in zip(fused, _ln_grads(x, g, b, w, "MY_DEVICE:0")):
        _close(a, c, 1e-5, rng.seed_text)
    with pytest.raises(errors.InvalidArgumentError, match=r"vectors of x's last dimension 9"):
        pg.nn.layer_norm(x, g[:8], b)
    with pytest.raises(errors.InvalidArgumentError, match=r"only the last axis"):
        pg.nn.layer_norm(x, g, b, axis=0)


# ------------------------------------------------------------ GPU

@pytest.fixture(params=["gemm", "kernel"])
def attention_path(request, monkeypatch):
    """Runs the test on the CUDA attention's cuBLAS path (the default bound)
    and on its memory-efficient kernels (the bound set to 0)."""
    if request.param == "gemm":
        monkeypatch.delenv(SCRATCH_ENV, raising=False)
    else:
        monkeypatch.setenv(SCRATCH_ENV, "0")
    return request.param


def _raw_attention(q, k, v, mask, causal, scale, w):
    """The forward and gradient ops on GPU:0: (out, lse, dq, dk, dv)."""
    masks = [] if mask is None else [pg.constant(mask)]
    with pg.device("GPU:0"):
        qd, kd, vd, wd = (pg.constant(x) for x in (q, k, v, w))
        out, lse = pg.raw_ops.ScaledDotProductAttention(query=qd, key=kd, value=vd, mask=masks,
                                                        causal=causal, scale=scale)
        grads = pg.raw_ops.ScaledDotProductAttentionGrad(
            query=qd, key=kd, value=vd, mask=masks, output=out, logsumexp=lse, grad=wd,
            causal=causal, scale=scale)
        return [x.numpy() for x in (out, lse, *grads)]


@needs_gpu
@pytest.mark.parametrize("dt", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("d", [64, 128, 24])
@pytest.mark.parametrize("mode", ["plain", "causal", "mask", "both"])
def test_gpu_attention_matches_numpy_and_composed(rng, attention_path, dt, d, mode):
    sq, sk = (77, 77) if mode in ("causal", "both") else (77, 131)
    q, k, v = _qkv(rng, dt, 2, 3, sq, sk, d)
    mask = None
    if mode in ("mask", "both"):
        mask = rng.random((2, 1, sq, sk)) > 0.3
        mask[0, 0, 5] = False
    causal = mode in ("causal", "both")
    w = rng.uniform(-1, 1, q.shape).astype(_np(dt))
    with expect_kernel("ScaledDotProductAttention", "GPU"), \
            expect_kernel("ScaledDotProductAttentionGrad", "GPU"):
        fused = _attention_loss(q, k, v, w, mask, causal, "GPU:0")
        with pg.device("GPU:0"):
            out = pg.nn.scaled_dot_product_attention(q, k, v, mask=mask, causal=causal)
    want = ref_attention(q, k, v, mask, causal)
    _close(out.numpy(), want, GPU_TOL[dt],
           f"out {attention_path} {dt} d={d} {mode} {rng.seed_text}")
    with pg.device("GPU:0"):
        qv, kv, vv = pg.Variable(q), pg.Variable(k), pg.Variable(v)
        with pg.GradientTape() as tape:
            o = transformer_ops._attention_composite(
                qv.value(), kv.value(), vv.value(), None if mask is None else pg.constant(mask),
                causal, 1 / np.sqrt(d), 0.0, None)
            loss = pg.math.reduce_sum(o * pg.constant(w))
        composed = [x.numpy() for x in tape.gradient(loss, [qv, kv, vv])]
    for name, a, b in zip("qkv", fused, composed):
        _close(a, np.asarray(b, np.float64), GPU_TOL[dt] * 4,
               f"d{name} {attention_path} {dt} d={d} {mode} {rng.seed_text}")


@needs_gpu
@pytest.mark.parametrize("dt", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("mask_shape", [None, "2d", "heads", "batch"])
@pytest.mark.parametrize("causal", [False, True])
def test_gpu_attention_paths_agree(rng, monkeypatch, dt, mask_shape, causal):
    """The cuBLAS path and the memory-efficient kernels give the same output,
    logsumexp and gradients on one input (odd lengths, more keys than
    queries, a mask broadcast over heads or batch, a row with no allowed
    key: output zeros, logsumexp +inf, no gradient through it), and both
    agree with numpy."""
    b, h, sq, sk, d = 2, 3, 45, 70, 64
    q, k, v = _qkv(rng, dt, b, h, sq, sk, d)
    w = rng.uniform(-1, 1, q.shape).astype(_np(dt))
    shape = {None: None, "2d": (sq, sk), "heads": (1, h, sq, sk), "batch": (b, 1, sq, sk)}
    mask = None
    if mask_shape is not None:
        mask = rng.random(shape[mask_shape]) > 0.3
        mask[..., 7, :] = False
    scale = 0.3
    runs = {}
    for path, env in (("gemm", None), ("kernel", "0")):
        if env is None:
            monkeypatch.delenv(SCRATCH_ENV, raising=False)
        else:
            monkeypatch.setenv(SCRATCH_ENV, env)
        with expect_kernel("ScaledDotProductAttention", "GPU"), \
                expect_kernel("ScaledDotProductAttentionGrad", "GPU"):
            runs[path] = _raw_attention(q, k, v, mask, causal, scale, w)
    want = ref_attention(q, k, v, mask, causal, scale)
    what = f"{dt} mask={mask_shape} causal={causal} {rng.seed_text}"
    for path, (out, lse, *_) in runs.items():
        _close(out, want, GPU_TOL[dt], f"out {path} {what}")
        if mask is not None:
            assert np.all(np.isinf(lse[..., 7])) and np.all(lse[..., 7] > 0), (path, what)
            assert np.all(out[..., 7, :].astype(np.float64) == 0), (path, what)
    gemm, kern = runs["gemm"], runs["kernel"]
    finite = np.isfinite(kern[1])
    assert np.array_equal(finite, np.isfinite(gemm[1])), what
    # both compute the scores in float from the same inputs
    np.testing.assert_allclose(gemm[1][finite], kern[1][finite], rtol=1e-5, atol=1e-4,
                               err_msg=what)
    for name, a, c in zip(("out", "dq", "dk", "dv"), [gemm[0], *gemm[2:]],
                          [kern[0], *kern[2:]]):
        _close(a, np.asarray(c, np.float64), GPU_TOL[dt] * 4, f"{name} gemm vs kernel {what}")


@needs_gpu
def test_gpu_attention_runs_the_path_its_scratch_allows(rng, monkeypatch, tmp_path):
    """CUPTI's kernel names: within the bound the forward runs the softmax
    row kernel between cuBLAS products and the gradient its row kernels, not
    the memory-efficient kernels; with the bound at 0, or below the scratch
    the shape needs (1 MiB against 4 MiB here), the memory-efficient kernels
    run and no product."""
    reason = _cupti_missing_reason()
    if reason:
        pytest.skip(reason)
    q, k, v = _qkv(rng, "float32", 1, 2, 512, 512, 64)  # scratch 2*512*512*8 B = 4 MiB
    w = rng.uniform(-1, 1, q.shape).astype(np.float32)
    fwd, grad = "ScaledDotProductAttention", "ScaledDotProductAttentionGrad"
    ran = {}
    for name, env in (("default", None), ("eight", "8"), ("off", "0"), ("one", "1")):
        if env is None:
            monkeypatch.delenv(SCRATCH_ENV, raising=False)
        else:
            monkeypatch.setenv(SCRATCH_ENV, env)
        ran[name] = _kernels_by_op(tmp_path / name,
                                   lambda: _raw_attention(q, k, v, None, True, 0.125, w))
    for name in ("default", "eight"):
        f, g = ran[name].get(fwd, []), ran[name].get(grad, [])
        assert any("attn_softmax_kernel" in x for x in f), (name, ran[name])
        assert not any("attn_forward_kernel" in x for x in f), (name, ran[name])
        assert len(f) >= 3, (name, ran[name])  # two products and the softmax
        assert any("attn_grad_probs_kernel" in x for x in g), (name, ran[name])
        assert any("attn_grad_ds_kernel" in x for x in g), (name, ran[name])
        assert not any("attn_grad_q_kernel" in x or "attn_grad_kv_kernel" in x for x in g), \
            (name, ran[name])
        assert len(g) >= 7, (name, ran[name])  # five products and two row kernels
    for name in ("off", "one"):
        f, g = ran[name].get(fwd, []), ran[name].get(grad, [])
        assert f and all("attn_forward_kernel" in x for x in f), (name, ran[name])
        assert any("attn_grad_q_kernel" in x for x in g), (name, ran[name])
        assert any("attn_grad_kv_kernel" in x for x in g), (name, ran[name])
        assert all("attn_grad_q_kernel" in x or "attn_grad_kv_kernel" in x for x in g), \
            (name, ran[name])


@needs_gpu
@pytest.mark.parametrize("dt", ["float32", "float16", "bfloat16"])
def test_gpu_layer_norm_matches_numpy_and_composed(rng, dt):
    t = _np(dt)
    x = (rng.standard_normal((6, 33, 515)) * 2 + 3).astype(t)
    g, b = rng.standard_normal(515).astype(t), rng.standard_normal(515).astype(t)
    w = rng.standard_normal(x.shape).astype(t)
    with expect_kernel("LayerNorm", "GPU"), expect_kernel("LayerNormGrad", "GPU"):
        with pg.device("GPU:0"):
            y = pg.nn.layer_norm(x, g, b)
        fused = _ln_grads(x, g, b, w, "GPU:0")
    _close(y.numpy(), ref_layer_norm(x, np.float64(g), np.float64(b)), GPU_TOL[dt] * 2,
           f"{dt} {rng.seed_text}")
    want = _ln_grads(x.astype(np.float64), g.astype(np.float64), b.astype(np.float64),
                     w.astype(np.float64), "CPU:0")
    for a, c in zip(fused, want):
        _close(np.asarray(a, np.float64), c, GPU_TOL[dt] * 8, f"grad {dt} {rng.seed_text}")
