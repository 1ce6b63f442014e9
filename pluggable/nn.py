"""``pg.nn``: neural-network ops (public names only; the functions live in
``pluggable.ops.nn_ops``)."""
from .ops.math_ops import sigmoid, tanh  # noqa: F401
from .ops.nn_ops import (avg_pool, avg_pool2d, batch_normalization, bias_add,  # noqa: F401
                         conv2d, conv2d_transpose, dropout, elu, embedding_lookup, fused_batch_norm,
                         gelu, l2_normalize, leaky_relu, log_softmax, max_pool, max_pool2d,
                         moments, relu, relu6, selu, silu, softmax, softmax_cross_entropy_with_logits,
                         softplus, sparse_softmax_cross_entropy_with_logits, swish,
                         top_k)
from .ops.transformer_ops import (bias_gelu, layer_norm,  # noqa: F401
                                  scaled_dot_product_attention)
