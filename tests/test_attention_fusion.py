"""The framework's fusion pass (pluggable/graph/fusion.py): composite
attention and layer norm in a traced function become ScaledDotProductAttention
and LayerNorm where the node's device has the fused kernel, and give the
unfused numbers; a pattern that differs, an intermediate read elsewhere
(a training step's gradient) or a device without the kernel keeps the graph."""
import numpy as np
import pytest

import pluggable as pg
from graph_helpers import graph_ops, traced
from pluggable.framework import registry
from pluggable.graph import pipeline
from pluggable.ops import transformer_ops

B, H, S, D = 2, 3, 6, 4
DEVICES = ["CPU:0", "MY_DEVICE:0"]


_traced, _ops = traced, graph_ops


def _qkv(rng, dtype=np.float32, q_len=S, k_len=S):
    shapes = ((B, H, q_len, D), (B, H, k_len, D), (B, H, k_len, D))
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


def _attention_np(q, k, v, allowed, scale):
    s = np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), k) * scale
    s = np.where(allowed, s, -np.inf)
    m = np.max(s, axis=-1, keepdims=True)
    e = np.where(allowed, np.exp(s - np.where(np.isfinite(m), m, 0)), 0)
    p = e / np.maximum(e.sum(-1, keepdims=True), 1e-300)
    return np.einsum("bhqk,bhkd->bhqd", p, v)


def _composite(mask=False, causal=True, scale=0.5):
    if mask:
        return lambda q, k, v, m: transformer_ops._attention_composite(
            q, k, v, m, causal, scale, 0.0, None)
    return lambda q, k, v: transformer_ops._attention_composite(
        q, k, v, None, causal, scale, 0.0, None)


def _causal_bias(n, dtype=np.float32, masked=-1e9):
    return np.where(np.tril(np.ones((n, n), bool)), 0.0, masked).astype(dtype)


def _user_attention(bias, scale):
    """Attention as a user writes it: matmul, scale, additive mask, softmax."""
    def fn(q, k, v):
        s = pg.matmul(q, k, transpose_b=True) * scale + bias
        return pg.matmul(pg.nn.softmax(s), v)
    return fn


# ------------------------------------------------------------ attention fused

@pytest.mark.parametrize("dtype,rtol", [(np.float32, 2e-5), (np.float64, 1e-12),
                                        (np.float16, 1e-2)])
@pytest.mark.parametrize("q_len,k_len", [(S, S), (4, 7)])
def test_composite_causal_attention_is_fused_on_cpu(rng, dtype, rtol, q_len, k_len):
    q, k, v = _qkv(rng, dtype, q_len, k_len)
    g, out, eager = _traced(_composite(), q, k, v)
    fused = [n for n in g.nodes if n.op == "ScaledDotProductAttention"]
    assert len(fused) == 1 and "Softmax" not in _ops(g) and g.pass_counts["fused"] == 1
    assert fused[0].attrs["causal"] and fused[0].attrs["scale"] == 0.5
    assert fused[0].attrs["num_masks"] == 0 and fused[0].assigned.device_type == "CPU"
    assert fused[0].attrs["T"] == pg.as_dtype(dtype)
    want = _attention_np(q, k, v, np.tril(np.ones((q_len, k_len), bool)), 0.5)
    np.testing.assert_allclose(out.numpy(), want, rtol=rtol, atol=rtol)
    np.testing.assert_allclose(out.numpy(), eager.numpy(), rtol=rtol, atol=rtol)


def test_fused_attention_kernel_runs(rng):
    q, k, v = _qkv(rng)
    f = pg.function(_composite())
    with pg.device("CPU:0"):
        args = [pg.constant(a) for a in (q, k, v)]
        f(*args)
        before = pg.testing.kernel_calls("Softmax", "CPU")
        with pg.testing.expect_kernel("ScaledDotProductAttention", "CPU"):
            out = f(*args)
    assert pg.testing.kernel_calls("Softmax", "CPU") == before
    np.testing.assert_allclose(out.numpy(), _attention_np(
        q, k, v, np.tril(np.ones((S, S), bool)), 0.5), rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("causal", [True, False])
def test_composite_attention_with_a_mask_tensor_is_fused(rng, causal):
    q, k, v = _qkv(rng)
    mask = rng.random((B, 1, S, S)) > 0.4
    mask[0, 0, 2] = False                         # a row with no allowed key gives 0
    g, out, eager = _traced(_composite(mask=True, causal=causal, scale=0.3), q, k, v, mask)
    fused = next(n for n in g.nodes if n.op == "ScaledDotProductAttention")
    assert fused.attrs["num_masks"] == 1 and fused.attrs["causal"] == causal
    assert fused.inputs[3][0].op == "Placeholder"
    allowed = mask & (np.tril(np.ones((S, S), bool)) if causal else True)
    want = _attention_np(q, k, v, allowed, 0.3)
    np.testing.assert_allclose(out.numpy(), want, rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(out.numpy(), eager.numpy(), rtol=2e-5, atol=2e-6)
    assert np.all(out.numpy()[0, :, 2] == 0)


@pytest.mark.parametrize("masked", [-1e9, -np.inf, np.finfo(np.float32).min])
def test_user_written_attention_with_an_additive_causal_bias_is_fused(rng, masked):
    q, k, v = _qkv(rng)
    scale = pg.constant(np.float32(1 / np.sqrt(D)))
    bias = pg.constant(_causal_bias(S, masked=masked))
    g, out, eager = _traced(_user_attention(bias, scale), q, k, v)
    fused = next(n for n in g.nodes if n.op == "ScaledDotProductAttention")
    assert fused.attrs["causal"] and np.isclose(fused.attrs["scale"], 1 / np.sqrt(D))
    assert "Softmax" not in _ops(g) and "AddV2" not in _ops(g)
    want = _attention_np(q, k, v, np.tril(np.ones((S, S), bool)), 1 / np.sqrt(D))
    np.testing.assert_allclose(out.numpy(), want, rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(out.numpy(), eager.numpy(), rtol=2e-5, atol=2e-6)


def test_attention_without_scale_or_mask_is_fused(rng):
    q, k, v = _qkv(rng, q_len=3, k_len=5)
    g, out, eager = _traced(lambda q, k, v: pg.matmul(
        pg.nn.softmax(pg.matmul(q, k, transpose_b=True)), v), q, k, v)
    fused = next(n for n in g.nodes if n.op == "ScaledDotProductAttention")
    assert not fused.attrs["causal"] and fused.attrs["scale"] == 1.0
    np.testing.assert_allclose(out.numpy(), _attention_np(q, k, v, np.ones((3, 5), bool), 1.0),
                               rtol=2e-5, atol=2e-6)


def test_attention_is_not_fused_where_the_device_has_no_fused_kernel(rng):
    if not pg.list_physical_devices("MY_DEVICE"):
        pytest.skip("the host reference plugin (MY_DEVICE) is not loaded")
    assert not registry.kernels_for("ScaledDotProductAttention", "MY_DEVICE")
    q, k, v = _qkv(rng)
    g, out, eager = _traced(_composite(), q, k, v, device="MY_DEVICE:0")
    assert "ScaledDotProductAttention" not in _ops(g) and g.pass_counts["fused"] == 0
    assert {n.assigned.device_type for n in g.nodes if n.op == "Softmax"} == {"MY_DEVICE"}
    want = _attention_np(q, k, v, np.tril(np.ones((S, S), bool)), 0.5)
    np.testing.assert_allclose(out.numpy(), want, rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(out.numpy(), eager.numpy(), rtol=1e-6, atol=1e-7)


# ------------------------------------------------------------ attention left alone

def _not_fused(fn, *arrays, device="CPU:0", rtol=1e-6):
    g, out, eager = _traced(fn, *arrays, device=device)
    assert "ScaledDotProductAttention" not in _ops(g) and "LayerNorm" not in _ops(g), _ops(g)
    assert g.pass_counts["fused"] == 0
    outs, eagers = (list(x) if isinstance(x, (list, tuple)) else [x] for x in (out, eager))
    for a, b in zip(outs, eagers):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=rtol, atol=rtol)
    return g


def test_softmax_over_another_axis_is_not_fused(rng):
    q, k, v = _qkv(rng)
    _not_fused(lambda q, k, v: pg.matmul(
        pg.nn.softmax(pg.matmul(q, k, transpose_b=True) * 0.5, axis=2), v), q, k, v)


def test_a_bias_that_is_not_causal_is_not_fused(rng):
    q, k, v = _qkv(rng)
    bias = _causal_bias(S)
    bias[3, 1] = -1e9                              # one more key masked: not causal
    _not_fused(_user_attention(pg.constant(bias), 0.5), q, k, v)
    near = _causal_bias(S, masked=-1e4)            # not low enough to remove a key
    _not_fused(_user_attention(pg.constant(near), 0.5), q, k, v)
    upper = np.triu(np.full((S, S), -1e9, np.float32), 1).T.copy()   # anti-causal
    _not_fused(_user_attention(pg.constant(upper), 0.5), q, k, v)


def test_a_constant_select_mask_that_is_not_causal_is_not_fused(rng):
    q, k, v = _qkv(rng)
    cond = np.tril(np.ones((S, S), bool))
    cond[4, 1] = False

    def fn(q, k, v):
        s = pg.raw_ops.SelectV2(condition=pg.constant(cond),
                                t=pg.matmul(q, k, transpose_b=True) * 0.5, e=-3.4e38)
        return pg.matmul(pg.nn.softmax(s), v)
    _not_fused(fn, q, k, v)


def test_a_mask_tensor_without_zeroing_the_empty_rows_is_not_fused(rng):
    q, k, v = _qkv(rng)
    mask = rng.random((S, S)) > 0.5

    def fn(q, k, v, m):
        s = pg.raw_ops.SelectV2(condition=m, t=pg.matmul(q, k, transpose_b=True) * 0.5,
                                e=-3.4e38)
        return pg.matmul(pg.nn.softmax(s), v)
    _not_fused(fn, q, k, v, mask)


def test_a_scale_that_is_not_constant_is_not_fused(rng):
    q, k, v = _qkv(rng)

    def fn(q, k, v, scale):
        return pg.matmul(pg.nn.softmax(pg.matmul(q, k, transpose_b=True) * scale
                                       + _causal_bias(S)), v)
    _not_fused(fn, q, k, v, np.float32(0.7))
    _not_fused(lambda q, k, v: pg.matmul(pg.nn.softmax(
        pg.matmul(q, k, transpose_b=True) * np.full((S,), 0.5, np.float32)), v), q, k, v)


def test_attention_whose_probabilities_are_read_elsewhere_is_not_fused(rng):
    q, k, v = _qkv(rng)

    def fn(q, k, v):
        p = pg.nn.softmax(pg.matmul(q, k, transpose_b=True) * 0.5)
        return pg.matmul(p, v), pg.math.reduce_sum(p)
    _not_fused(fn, q, k, v, rtol=1e-5)

    def scores_out(q, k, v):
        s = pg.matmul(q, k, transpose_b=True) * 0.5
        return pg.matmul(pg.nn.softmax(s), v), s
    _not_fused(scores_out, q, k, v)


def test_attention_of_rank_3_is_not_fused(rng):
    q, k, v = (rng.standard_normal((H, S, D)).astype(np.float32) for _ in range(3))
    _not_fused(lambda q, k, v: pg.matmul(
        pg.nn.softmax(pg.matmul(q, k, transpose_b=True) * 0.5), v), q, k, v)


# ------------------------------------------------------------ layer norm

def _ln_np(x, g, b, eps):
    x = x.astype(np.float64)
    m = x.mean(-1, keepdims=True)
    return (x - m) / np.sqrt(((x - m) ** 2).mean(-1, keepdims=True) + eps) * g + b


def _moments_ln(eps=1e-5, axis=-1):
    def fn(x, g, b):
        mean, var = pg.nn.moments(x, [axis % len(x.shape)], keepdims=True)
        inv = pg.math.rsqrt(var + pg.constant(eps, x.dtype))
        return (x - mean) * inv * g + b
    return fn


def _batch_norm_ln(eps=1e-5):
    def fn(x, g, b):
        mean, var = pg.nn.moments(x, [len(x.shape) - 1], keepdims=True)
        return pg.nn.batch_normalization(x, mean, var, b, g, eps)
    return fn


def _ln_inputs(rng, shape=(4, 5, 16), dtype=np.float32):
    return (rng.standard_normal(shape).astype(dtype) * 3 + 1,
            rng.standard_normal(shape[-1:]).astype(dtype),
            rng.standard_normal(shape[-1:]).astype(dtype))


@pytest.mark.parametrize("form", [_moments_ln, _batch_norm_ln])
@pytest.mark.parametrize("dtype,rtol", [(np.float32, 1e-4), (np.float64, 1e-10)])
def test_moments_and_normalization_become_layer_norm(rng, form, dtype, rtol):
    x, g, b = _ln_inputs(rng, dtype=dtype)
    graph, out, eager = _traced(form(1e-3), x, g, b)
    fused = [n for n in graph.nodes if n.op == "LayerNorm"]
    assert len(fused) == 1 and "Mean" not in _ops(graph) and "Rsqrt" not in _ops(graph)
    assert np.isclose(fused[0].attrs["epsilon"], 1e-3)
    np.testing.assert_allclose(out.numpy(), _ln_np(x, g, b, 1e-3), rtol=rtol, atol=rtol)
    np.testing.assert_allclose(out.numpy(), eager.numpy(), rtol=rtol, atol=rtol)


def test_fused_layer_norm_kernel_runs(rng):
    x, g, b = _ln_inputs(rng, shape=(7, 32))
    f = pg.function(_moments_ln())
    with pg.device("CPU:0"):
        args = [pg.constant(a) for a in (x, g, b)]
        f(*args)
        with pg.testing.expect_kernel("LayerNorm", "CPU"):
            out = f(*args)
    np.testing.assert_allclose(out.numpy(), _ln_np(x, g, b, 1e-5), rtol=1e-4, atol=1e-5)


def test_layer_norm_is_not_fused_where_the_device_has_no_fused_kernel(rng):
    if not pg.list_physical_devices("MY_DEVICE"):
        pytest.skip("the host reference plugin (MY_DEVICE) is not loaded")
    assert not registry.kernels_for("LayerNorm", "MY_DEVICE")
    x, g, b = _ln_inputs(rng)
    graph = _not_fused(_moments_ln(), x, g, b, device="MY_DEVICE:0")
    assert {n.assigned.device_type for n in graph.nodes if n.op == "Rsqrt"} == {"MY_DEVICE"}


def test_layer_norm_over_another_axis_is_not_fused(rng):
    x, g, b = _ln_inputs(rng, shape=(6, 6))
    _not_fused(_moments_ln(axis=0), x, g, b, rtol=1e-5)


def test_layer_norm_with_an_epsilon_that_is_not_constant_is_not_fused(rng):
    x, g, b = _ln_inputs(rng)

    def fn(x, g, b, eps):
        mean, var = pg.nn.moments(x, [2], keepdims=True)
        return (x - mean) * pg.math.rsqrt(var + eps) * g + b
    _not_fused(fn, x, g, b, np.float32(1e-5), rtol=1e-5)


def test_layer_norm_whose_statistics_are_read_elsewhere_is_not_fused(rng):
    x, g, b = _ln_inputs(rng)

    def fn(x, g, b):
        mean, var = pg.nn.moments(x, [2], keepdims=True)
        return (x - mean) * pg.math.rsqrt(var + 1e-5) * g + b, mean
    _not_fused(fn, x, g, b, rtol=1e-5)


def test_layer_norm_with_a_gamma_that_is_not_a_vector_is_not_fused(rng):
    x, g, b = _ln_inputs(rng)
    _not_fused(_moments_ln(), x, g.reshape(1, -1), b, rtol=1e-5)


def test_every_attention_and_layer_norm_of_a_transformer_block_is_fused(rng):
    """A pre-LN block written as the composite benchmark writes it: two
    layer norms and one causal attention, inputs made by reshapes."""
    d = H * D
    x = rng.standard_normal((B * S, d)).astype(np.float32)
    wqkv = (rng.standard_normal((d, 3 * d)) / np.sqrt(d)).astype(np.float32)
    g1, b1, g2, b2 = (rng.standard_normal(d).astype(np.float32) for _ in range(4))
    bias = pg.constant(_causal_bias(S))
    norm, attention = _moments_ln(), _user_attention(bias, 1 / np.sqrt(D))

    def block(x, wqkv, g1, b1, g2, b2):
        qkv = pg.matmul(norm(x, g1, b1), wqkv)
        q, k, v = pg.unstack(pg.transpose(pg.reshape(qkv, [B, S, 3, H, D]), [2, 0, 3, 1, 4]),
                             axis=0)
        o = pg.reshape(pg.transpose(attention(q, k, v), [0, 2, 1, 3]), [B * S, d])
        return norm(x + o, g2, b2)
    graph, out, eager = _traced(block, x, wqkv, g1, b1, g2, b2)
    assert _ops(graph).count("LayerNorm") == 2 and graph.pass_counts["fused"] == 3
    assert _ops(graph).count("ScaledDotProductAttention") == 1
    assert not {"Softmax", "Rsqrt", "Mean"} & set(_ops(graph))
    np.testing.assert_allclose(out.numpy(), eager.numpy(), rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------ training steps, switches

def test_a_training_step_keeps_its_composite_form_and_gradients(rng):
    """The gradient reads the softmax probabilities and the normalized
    values, so the forward pattern has other readers and is left alone."""
    q, k, v = _qkv(rng)
    g0, b0 = (rng.standard_normal(D).astype(np.float32) for _ in range(2))
    attention, norm = _composite(), _moments_ln()

    def step(q, k, v, g, b):
        with pg.GradientTape() as tape:
            tape.watch([q, k, v, g, b])
            loss = pg.math.reduce_sum(norm(attention(q, k, v), g, b) ** 2)
        return [loss] + tape.gradient(loss, [q, k, v, g, b])
    graph, out, eager = _traced(step, q, k, v, g0, b0)
    assert "ScaledDotProductAttention" not in _ops(graph) and "LayerNorm" not in _ops(graph)
    assert graph.pass_counts["fused"] == 0
    for a, e in zip(out, eager):
        np.testing.assert_allclose(a.numpy(), e.numpy(), rtol=1e-4, atol=1e-5)


def test_the_pass_can_be_turned_off(rng):
    q, k, v = _qkv(rng)
    assert pg.config.graph_fusion_enabled()
    pg.config.set_graph_fusion_enabled(False)
    try:
        _not_fused(_composite(), q, k, v)
    finally:
        pg.config.set_graph_fusion_enabled(True)
    g, _, _ = _traced(_composite(), q, k, v)
    assert "ScaledDotProductAttention" in _ops(g)


def test_a_plugin_that_sets_remapping_off_keeps_the_pass_off_its_nodes(rng, monkeypatch):
    x, g, b = _ln_inputs(rng)
    real = pipeline.pass_allowed
    monkeypatch.setattr(pipeline, "pass_allowed",
                        lambda node, field: field != "remapping" and real(node, field))
    _not_fused(_moments_ln(), x, g, b, rtol=1e-5)
