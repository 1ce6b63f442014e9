"""Keras layers over ``pg.Module``: a layer makes its weights on its first
call (``build(input_shape)``), in its name scope, and is then a callable of
its inputs (``call``)."""
from __future__ import annotations

import inspect
import itertools
import re
from typing import Any, Iterable

import numpy as np

from ..framework import dtypes
from ..framework.name_scope import name_scope as _name_scope
from ..framework.tensor import Tensor
from ..framework.tensor_shape import TensorShape
from ..ops import array_ops, math_ops, nn_ops
from ..ops.variables import Variable
from ..runtime.tensors import convert_to_tensor
from ..training.module import Module
from . import activations, initializers

_counts: dict[str, itertools.count] = {}
_ACCEPTED = frozenset(("input_shape", "input_dim", "batch_input_shape", "autocast"))


def _snake(name: str) -> str:
    name = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower()


def _unique(base: str) -> str:
    """"dense", then "dense_1", "dense_2", ... as Keras names its layers."""
    n = next(_counts.setdefault(base, itertools.count()))
    return base if n == 0 else f"{base}_{n}"


def _accepts(fn: Any, name: str) -> bool:
    params = inspect.signature(fn).parameters
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def _first_shape(inputs: Any) -> TensorShape:
    while isinstance(inputs, (list, tuple)) and inputs and not isinstance(inputs, Tensor):
        inputs = inputs[0]
    if isinstance(inputs, dict) and inputs:
        inputs = next(iter(inputs.values()))
    return TensorShape(getattr(inputs, "shape", None))


class KerasVariable(Variable):
    """A layer's weight as Keras shows it: ``name`` is the weight's own name
    ("kernel"), ``path`` the name with the layers around it
    ("dense/kernel"), and the text is Keras's ``<Variable path=...>``."""

    @property
    def name(self) -> str:
        return self._name.rsplit("/", 1)[-1]

    @property
    def path(self) -> str:
        return self._name

    def __repr__(self) -> str:
        return (f"<Variable path={self.path}, shape={tuple(self.shape)}, "
                f"dtype={self.dtype.name}, value={np.asarray(self.numpy())}>")


class Layer(Module):
    """A Keras layer (``tf.keras.layers.Layer``): subclasses make weights in
    ``build(input_shape)`` (or ``__init__``) and compute in ``call``; the
    first ``layer(x)`` builds. ``training=`` reaches ``call`` when it takes it."""

    def __init__(self, trainable: bool = True, name: str | None = None, dtype: Any = None,
                 **kwargs: Any):
        unknown = sorted(set(kwargs) - _ACCEPTED)
        if unknown:
            raise TypeError(f"{type(self).__name__}: unrecognized keyword arguments "
                            f"{unknown}; a layer takes trainable, name and dtype")
        super().__init__(name=name if name is not None else _unique(_snake(type(self).__name__)))
        self._trainable = bool(trainable)
        self._layer_dtype = dtypes.as_dtype(dtype) if dtype is not None else dtypes.float32
        self._own_weights: list = []
        self._building = ""
        self.built = False

    # ------------------------------------------------------------ state
    @property
    def dtype(self) -> Any:
        return self._layer_dtype

    @property
    def trainable(self) -> bool:
        return self._trainable

    @trainable.setter
    def trainable(self, value: bool) -> None:
        self._trainable = bool(value)

    def add_weight(self, name: str | None = None, shape: Iterable[int] = (),
                   dtype: Any = None, initializer: Any = "glorot_uniform",
                   trainable: bool = True) -> Variable:
        """A new variable of this layer, made by `initializer` (a name or a
        callable ``(shape, dtype)``) in the layer's name scope."""
        shape = tuple(int(d) for d in shape)
        dtype = dtypes.as_dtype(dtype) if dtype is not None else self._layer_dtype
        with self._scope():
            v = KerasVariable(initializers.get(initializer)(shape, dtype),
                              name=name or "weight", trainable=trainable)
        self._own_weights.append(v)
        return v

    def _tracked(self, seen: set) -> Iterable[tuple]:
        """(variable, trainable) in Keras's order: the layer's own weights as
        made, then the layers and weights of its attributes in the order
        they were assigned; a frozen layer's weights are all non-trainable.
        As in Keras 3, a plain ``pg.Variable`` attribute is not a weight
        (make weights with ``add_weight``)."""
        def walk(value: Any) -> Iterable[tuple]:
            if isinstance(value, Layer):
                yield from value._tracked(seen)
            elif isinstance(value, KerasVariable):
                if id(value) not in seen:
                    seen.add(id(value))
                    yield value, value.trainable
            elif isinstance(value, (list, tuple)):
                for item in value:
                    yield from walk(item)
            elif isinstance(value, dict):
                for item in value.values():
                    yield from walk(item)

        if id(self) in seen:
            return
        seen.add(id(self))
        for value in [self._own_weights, *vars(self).values()]:
            for v, trainable in walk(value):
                yield v, trainable and self._trainable

    @property
    def variables(self) -> list:
        """The layer's weights and its sublayers', a list as in Keras."""
        return [v for v, _ in self._tracked(set())]

    @property
    def trainable_variables(self) -> list:
        return [v for v, t in self._tracked(set()) if t]

    @property
    def non_trainable_variables(self) -> list:
        return [v for v, t in self._tracked(set()) if not t]

    weights = variables
    trainable_weights = trainable_variables
    non_trainable_weights = non_trainable_variables

    # ------------------------------------------------------------ calling
    def _scope(self) -> Any:
        """The layer's name under the scope it is built or called in
        ("sequential/dense/"), as Keras paths its weights; inside its own
        scope already (add_weight from build), that scope."""
        if self._building:
            return _name_scope(self._building)
        return _name_scope(self.name)

    def build(self, input_shape: TensorShape) -> None:
        """Makes the layer's weights for inputs of `input_shape` (nothing here)."""

    def call(self, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        return inputs

    def __call__(self, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(inputs, (Tensor, Variable, list, tuple, dict)):
            inputs = convert_to_tensor(inputs, dtype=self._layer_dtype)
        with self._scope() as scope:
            if not self.built:
                self._building = scope
                try:
                    self.build(_first_shape(inputs))
                finally:
                    self._building = ""
                self.built = True
            if "training" in kwargs and not _accepts(self.call, "training"):
                kwargs.pop("training")
            return self.call(inputs, *args, **kwargs)


class Dense(Layer):
    """``activation(inputs @ kernel + bias)`` over the last axis of the
    inputs (``tf.keras.layers.Dense``)."""

    def __init__(self, units: int, activation: Any = None, use_bias: bool = True,
                 kernel_initializer: Any = "glorot_uniform", bias_initializer: Any = "zeros",
                 **kwargs: Any):
        super().__init__(**kwargs)
        if not isinstance(units, int) or isinstance(units, bool) or units <= 0:
            raise ValueError(f"Received an invalid value for `units`, expected a positive "
                             f"integer. Received: units={units!r}")
        self.units = units
        self.activation = activations.get(activation)
        self.use_bias = use_bias
        self.kernel_initializer = initializers.get(kernel_initializer)
        self.bias_initializer = initializers.get(bias_initializer)
        self.kernel = self.bias = None

    def build(self, input_shape: TensorShape) -> None:
        if input_shape.rank is None or input_shape.rank < 1 or input_shape[-1] is None:
            raise ValueError(f"{self.name}: the last dimension of the inputs to a Dense layer "
                             f"must be known, got inputs of shape {input_shape}")
        self.kernel = self.add_weight("kernel", (input_shape[-1], self.units),
                                      initializer=self.kernel_initializer)
        if self.use_bias:
            self.bias = self.add_weight("bias", (self.units,), initializer=self.bias_initializer)

    def call(self, inputs: Any) -> Any:
        x = convert_to_tensor(inputs)
        if x.dtype != self.kernel.dtype:
            x = math_ops.cast(x, self.kernel.dtype)
        if x.shape.rank == 2:
            y = math_ops.matmul(x, self.kernel)
        else:
            lead = array_ops.shape(x)[:-1]
            y = math_ops.matmul(math_ops.reshape(x, [-1, self.kernel.shape[0]]), self.kernel)
            y = math_ops.reshape(y, array_ops.concat([lead, [self.units]], 0))
        if self.use_bias:
            y = nn_ops.bias_add(y, self.bias)
        return self.activation(y)


class BatchNormalization(Layer):
    """Normalizes over every axis but `axis` (``tf.keras.layers.BatchNormalization``):
    with ``training=True`` by the batch's moments, updating the moving mean
    and variance (``moving = moving * momentum + batch * (1 - momentum)``);
    otherwise by the moving statistics."""

    def __init__(self, axis: int = -1, momentum: float = 0.99, epsilon: float = 1e-3,
                 center: bool = True, scale: bool = True, **kwargs: Any):
        super().__init__(**kwargs)
        self.axis, self.momentum, self.epsilon = axis, float(momentum), float(epsilon)
        self.center, self.scale = center, scale
        self.gamma = self.beta = self.moving_mean = self.moving_variance = None

    def build(self, input_shape: TensorShape) -> None:
        rank = input_shape.rank
        if rank is None or not -rank <= self.axis < rank or input_shape[self.axis] is None:
            raise ValueError(f"{self.name}: axis {self.axis} of inputs of shape {input_shape} "
                             "must exist and be known")
        self._axis = self.axis % rank
        n = (input_shape[self._axis],)
        if self.scale:
            self.gamma = self.add_weight("gamma", n, initializer="ones")
        if self.center:
            self.beta = self.add_weight("beta", n, initializer="zeros")
        self.moving_mean = self.add_weight("moving_mean", n, initializer="zeros",
                                           trainable=False)
        self.moving_variance = self.add_weight("moving_variance", n, initializer="ones",
                                               trainable=False)

    def call(self, inputs: Any, training: Any = None) -> Any:
        x = convert_to_tensor(inputs)
        rank = x.shape.rank
        axes = [a for a in range(rank) if a != self._axis]
        shape = [1] * rank
        shape[self._axis] = -1

        def bcast(v: Any) -> Any:
            return None if v is None else math_ops.reshape(v, shape)

        if training:
            mean, var = nn_ops.moments(x, axes)
            m = self.momentum
            self.moving_mean.assign(self.moving_mean * m + mean * (1.0 - m))
            self.moving_variance.assign(self.moving_variance * m + var * (1.0 - m))
        else:
            mean, var = self.moving_mean, self.moving_variance
        return nn_ops.batch_normalization(x, bcast(mean), bcast(var), bcast(self.beta),
                                          bcast(self.gamma), self.epsilon)


class Model(Layer):
    """A model by subclassing (``tf.keras.Model``): layers as attributes,
    the forward pass in ``call``. The functional form (``Model(inputs=,
    outputs=)``) is not supported."""

    def __init__(self, *args: Any, **kwargs: Any):
        if args or "inputs" in kwargs or "outputs" in kwargs:
            raise NotImplementedError(
                "pg.keras.Model(inputs=..., outputs=...) (the functional form) is not "
                "supported: subclass pg.keras.Model and write call(), or use "
                "pg.keras.Sequential([...])")
        super().__init__(**kwargs)


class Sequential(Model):
    """Layers applied in order (``tf.keras.Sequential``)."""

    def __init__(self, layers: Iterable[Layer] | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self._layers: list = []
        for layer in layers or ():
            self.add(layer)

    def add(self, layer: Layer) -> None:
        if not callable(layer):
            raise TypeError(f"Sequential.add takes a layer, got {type(layer).__name__}")
        self._layers.append(layer)

    @property
    def layers(self) -> list:
        return list(self._layers)

    def call(self, inputs: Any, training: Any = None) -> Any:
        x = inputs
        for layer in self._layers:
            x = layer(x, training=training) if isinstance(layer, Layer) else layer(x)
        return x
