"""``pg.keras``: the part of Keras that TensorFlow code most often builds on,
over ``pg.Module`` and ``pg.Variable``: ``layers.Layer`` (build on the
first call, ``add_weight``, weight tracking), ``layers.Dense``,
``layers.BatchNormalization``, ``Model`` and ``Sequential`` by subclassing
and composition, ``activations`` and ``initializers`` by name.

It is not Keras: there is no ``compile``/``fit``, no functional ``Input``
graph, no saving to ``.keras`` files; those names raise an AttributeError
that says so."""
from __future__ import annotations

from . import activations, initializers, layers  # noqa: F401
from .layers import Layer, Model, Sequential  # noqa: F401

_NOT_HERE = ("Input", "optimizers", "losses", "metrics", "callbacks", "saving", "models",
             "utils", "datasets", "applications", "mixed_precision", "regularizers",
             "constraints", "backend", "ops")


def __getattr__(name: str):
    if name in _NOT_HERE:
        raise AttributeError(
            f"pg.keras.{name} is not part of pluggable's Keras subset (layers.Layer, "
            "layers.Dense, layers.BatchNormalization, Model, Sequential, activations, "
            "initializers); write the training loop with pg.GradientTape and pg.optimizers")
    raise AttributeError(f"module 'pluggable.keras' has no attribute {name!r}")
