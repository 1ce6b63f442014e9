"""Layer 6: automatic differentiation.

``pg.GradientTape`` records op calls through a wrapper installed in
``runtime.hooks`` (``tape``), the backward pass walks the records
(``backprop``), and every differentiable op has a gradient function written
with ops (``math_grad``, ``nn_grad``, ``array_grad``, ``linalg_grad``,
``transformer_grad``), registered on the
op's record in the registry (``registration``; public as
``pg.RegisterGradient`` and ``pg.NotDifferentiable``). Imports ``ops`` and
the layers below."""
from . import (array_grad, linalg_grad, math_grad, nn_grad,  # noqa: F401  (register the gradients)
               transformer_grad)
from .registration import NotDifferentiable, RegisterGradient

__all__ = ["GradientTape", "NotDifferentiable", "RegisterGradient", "UnconnectedGradients"]

# The tape and the backward pass are imported when first used (the gradient
# functions above are all that importing this layer must register).
_TAPE_NAMES = ("GradientTape", "UnconnectedGradients")


def __getattr__(name: str):
    if name not in _TAPE_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from . import tape
    value = globals()[name] = getattr(tape, name)
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
