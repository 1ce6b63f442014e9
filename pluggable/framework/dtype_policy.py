"""Mixed precision policies (``pg.mixed_precision``): TensorFlow's
``DTypePolicy`` (``tf.keras.mixed_precision.Policy``), the global policy
and the rules that make floating variables autocast.

A policy has a compute dtype (the dtype ops compute in) and a variable
dtype (the dtype variables store): ``"mixed_bfloat16"`` is bfloat16 /
float32, ``"mixed_float16"`` float16 / float32, a dtype name such as
``"float32"`` or ``"bfloat16"`` is that dtype for both. The global policy
is one per process (``set_global_policy``), ``"float32"`` at start.

Autocast variables (TensorFlow's ``AutoCastVariable``). While the global
policy is *mixed* (compute dtype != variable dtype), a floating
``pg.Variable`` made with no ``dtype`` stores its value in the policy's
variable dtype (a bfloat16 or float64 initial value is cast to float32),
and one made with a floating ``dtype`` keeps that dtype; either way the
variable is an autocast variable whose cast dtype is the policy's compute
dtype, fixed at creation (as a Keras layer keeps the policy it was built
with). Integer and bool variables are never autocast.

Reading an autocast variable (``value()``, ``read_value()``, passing it to
an op, its operators) gives its value cast to the cast dtype, by a ``Cast``
op on the variable's device after the ``ReadVariableOp``, so a tape's
gradient flows back through Cast's gradient in the variable dtype.
``v.dtype`` is the stored dtype (float32), as ``AutoCastVariable.dtype``
is in TensorFlow (``v.true_dtype`` is the same, TensorFlow's deprecated
alias). ``numpy()``, checkpoints, assignments and optimizer updates use the
stored value. Inside ``with pg.mixed_precision.autocast(None):`` reads give
the stored value; ``autocast(dtype)`` casts reads to another floating
dtype. The decision is made when a read runs (inside a ``pg.function``:
when it is traced).
"""
from __future__ import annotations

import contextlib
import contextvars
import threading
from typing import Any, Iterator

from . import dtypes, errors

_MIXED = {"mixed_float16": ("float16", "float32"), "mixed_bfloat16": ("bfloat16", "float32")}
_NAMES = frozenset(d.name for d in dtypes.ALL)


def _parse(name: Any) -> tuple[str, str]:
    if not isinstance(name, str):
        raise TypeError("'name' must be a string, such as 'mixed_float16'. "
                        f"Received: name={name} (of type {type(name)})")
    if name in _MIXED:
        return _MIXED[name]
    if name in _NAMES:
        return name, name
    raise errors.InvalidArgumentError(
        f"Cannot convert '{name}' to a mixed precision DTypePolicy. Valid policies include "
        "'mixed_float16', 'mixed_bfloat16', and the name of any float dtype such as "
        f"'float32'. The dtype names pluggable knows: {', '.join(sorted(_NAMES))}.")


class DTypePolicy:
    """A dtype policy (TensorFlow's ``tf.keras.mixed_precision.Policy``,
    Keras 3's ``DTypePolicy``)::

        p = pg.mixed_precision.Policy("mixed_bfloat16")
        p.compute_dtype, p.variable_dtype     # ('bfloat16', 'float32')

    `name` is ``"mixed_float16"``, ``"mixed_bfloat16"`` or a dtype name
    (``"float32"``, ``"bfloat16"``, ...); None is the global policy's name.
    A name that is neither raises ``InvalidArgumentError`` (a ValueError, as
    TensorFlow's), a name that is not a string TypeError. The dtypes are
    strings, as TensorFlow's."""

    def __init__(self, name: str | None = None):
        if name is None:
            name = global_policy().name
        self._compute_dtype, self._variable_dtype = _parse(name)
        self._name = name

    @property
    def name(self) -> str:
        """The policy's name."""
        return self._name

    @property
    def compute_dtype(self) -> str:
        """The dtype ops compute in (and autocast variables are read as)."""
        return self._compute_dtype

    @property
    def variable_dtype(self) -> str:
        """The dtype floating variables are stored in."""
        return self._variable_dtype

    @property
    def is_mixed(self) -> bool:
        """Whether compute and variable dtypes differ (variables autocast)."""
        return self._compute_dtype != self._variable_dtype

    def get_config(self) -> dict:
        return {"name": self._name}

    @classmethod
    def from_config(cls, config: dict) -> "DTypePolicy":
        return cls(**config)

    def __eq__(self, other: Any) -> bool:
        return type(other) is DTypePolicy and other._name == self._name

    def __hash__(self) -> int:
        return hash(self._name)

    def __repr__(self) -> str:
        return f'<DTypePolicy "{self._name}">'


Policy = DTypePolicy  # TensorFlow's (legacy) name

_lock = threading.Lock()
_global: list[DTypePolicy | None] = [None]
# Variables made inside ``plain_variables()`` (optimizer slots, loss scales)
# are never autocast; ``autocast(dtype)`` changes the dtype reads cast to.
_plain: contextvars.ContextVar[bool] = contextvars.ContextVar("pg_plain_variables",
                                                              default=False)
_UNSET = object()
_read_cast: contextvars.ContextVar[Any] = contextvars.ContextVar("pg_autocast", default=_UNSET)


def global_policy() -> DTypePolicy:
    """The global policy (``"float32"`` until ``set_global_policy``)."""
    p = _global[0]
    if p is None:
        with _lock:
            if _global[0] is None:
                _global[0] = DTypePolicy("float32")
            p = _global[0]
    return p


def set_global_policy(policy: Any) -> None:
    """Sets the global policy, from a ``DTypePolicy`` or a policy name
    (``pg.mixed_precision.set_global_policy("mixed_bfloat16")``). Floating
    variables made while a mixed policy is global are autocast variables;
    variables made before keep what they are. Anything else than a policy
    or a string raises ``InvalidArgumentError`` (TensorFlow's ValueError)."""
    if not isinstance(policy, DTypePolicy):
        if not isinstance(policy, str):
            raise errors.InvalidArgumentError(
                "Invalid `policy` argument. Expected the string name of a policy (such as "
                "'mixed_float16') or a `DTypePolicy` instance. Received: "
                f"policy={policy} (of type {type(policy)})")
        policy = DTypePolicy(policy)
    with _lock:
        _global[0] = policy


@contextlib.contextmanager
def policy_scope(policy: Any) -> Iterator[None]:
    """Makes `policy` global inside the block and restores the previous
    policy after it (as Keras's ``policy_scope``)."""
    old = global_policy()
    set_global_policy(policy)
    try:
        yield
    finally:
        set_global_policy(old)


def new_variable_cast(value_dtype: dtypes.DType, explicit: bool) -> tuple[Any, Any]:
    """(stored dtype, cast dtype) for a new variable whose initial value
    has `value_dtype` (`explicit`: the caller gave the dtype): (None, None)
    when it is not an autocast variable, else the dtype to store it in and
    the dtype its reads cast to."""
    p = _global[0]
    if p is None or not p.is_mixed or not value_dtype.is_floating or _plain.get():
        return None, None
    store = value_dtype if explicit else dtypes.as_dtype(p.variable_dtype)
    return store, dtypes.as_dtype(p.compute_dtype)


@contextlib.contextmanager
def plain_variables() -> Iterator[None]:
    """Variables made inside the block are never autocast (an optimizer's
    slots, a loss scale)."""
    token = _plain.set(True)
    try:
        yield
    finally:
        _plain.reset(token)


def read_dtype(cast_dtype: dtypes.DType) -> dtypes.DType | None:
    """The dtype a read of an autocast variable of cast dtype `cast_dtype`
    gives here (None: the stored value)."""
    c = _read_cast.get()
    return cast_dtype if c is _UNSET else c


@contextlib.contextmanager
def autocast(dtype: Any = _UNSET) -> Iterator[None]:
    """Changes what reads of autocast variables give inside the block:
    ``autocast(None)``, the stored value (float32); ``autocast("float16")``,
    the value cast to that floating dtype; ``autocast()``, each variable's
    own cast dtype (the default, undoing an outer scope). Plain variables
    are not affected. A dtype that is not floating raises
    ``InvalidArgumentError`` (a ValueError, as TensorFlow's AutoCastVariable
    does for a non-floating variable)."""
    if dtype is not _UNSET and dtype is not None:
        dt = dtypes.as_dtype(dtype)
        if not dt.is_floating:
            raise errors.InvalidArgumentError(
                f"autocast: reads can only be cast to a floating dtype, got {dt.name}; give "
                "float16, bfloat16, float32 or float64, or None for the stored value")
        dtype = dt
    token = _read_cast.set(dtype)
    try:
        yield
    finally:
        _read_cast.reset(token)


__all__ = ["DTypePolicy", "Policy", "autocast", "global_policy", "policy_scope",
           "set_global_policy"]
