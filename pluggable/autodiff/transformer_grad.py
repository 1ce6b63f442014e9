"""Gradients of the fused transformer ops: ScaledDotProductAttention through
ScaledDotProductAttentionGrad (which recomputes the probabilities from the
saved logsumexp), LayerNorm through LayerNormGrad and BiasGelu through
BiasGeluGrad (dx and dbias in one call). The gradient ops have
no gradient of their own (no second derivatives). Only the main outputs
carry gradients: a gradient arriving at logsumexp, mean or rstd raises
UnimplementedError."""
from __future__ import annotations

from ..framework import errors
from ..ops import raw_ops as R
from .registration import RegisterGradient


def _only_first(op, extra) -> None:
    if any(g is not None for g in extra):
        raise errors.UnimplementedError(
            f"{op.type}: only its first output has a gradient; a gradient reached one of its "
            "statistics outputs (do not differentiate through them)", op=op.type)


@RegisterGradient("ScaledDotProductAttention", accepts_none=True)
def _attention_grad(op, grad, grad_lse):
    _only_first(op, [grad_lse])
    n = op.get_attr("num_masks")
    q, k, v = op.inputs[:3]
    masks = list(op.inputs[3:3 + n])
    if grad is None:
        return [None] * (3 + n)
    dq, dk, dv = R.ScaledDotProductAttentionGrad(
        query=q, key=k, value=v, mask=masks, output=op.outputs[0], logsumexp=op.outputs[1],
        grad=grad, causal=op.get_attr("causal"), scale=op.get_attr("scale"),
        Tlse=op.get_attr("Tlse"))
    return [dq, dk, dv] + [None] * n


@RegisterGradient("LayerNorm", accepts_none=True)
def _layer_norm_grad(op, grad, grad_mean, grad_rstd):
    _only_first(op, [grad_mean, grad_rstd])
    if grad is None:
        return [None, None, None]
    x, gamma, _ = op.inputs
    dx, dg, db = R.LayerNormGrad(dy=grad, x=x, gamma=gamma, mean=op.outputs[1],
                                 rstd=op.outputs[2], U=op.get_attr("U"))
    return [dx, dg, db]


@RegisterGradient("BiasGelu")
def _bias_gelu_grad(op, grad):
    x, bias = op.inputs
    dx, db = R.BiasGeluGrad(dy=grad, x=x, bias=bias, approximate=op.get_attr("approximate"))
    return [dx, db]
