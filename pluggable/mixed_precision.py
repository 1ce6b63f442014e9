"""``pg.mixed_precision``: TensorFlow's mixed precision (public names only;
see ``pluggable.framework.dtype_policy`` for policies and autocast
variables, ``pluggable.training.loss_scale_optimizer`` for loss scaling)::

    pg.mixed_precision.set_global_policy("mixed_bfloat16")
    w = pg.Variable(np.zeros((4, 4), np.float32))   # stored float32
    w.value().dtype                                  # pg.bfloat16
"""
from .framework.dtype_policy import (DTypePolicy, Policy, autocast, global_policy,  # noqa: F401
                                     policy_scope, set_global_policy)
from .training.loss_scale_optimizer import LossScaleOptimizer  # noqa: F401

__all__ = ["DTypePolicy", "LossScaleOptimizer", "Policy", "autocast", "global_policy",
           "policy_scope", "set_global_policy"]
