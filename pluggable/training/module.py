"""``pg.Module``: a container of variables and other modules (``tf.Module``).

A module finds its variables and submodules by walking its attributes
(sorted by name) and the lists, tuples and dicts they hold, as TensorFlow
does: first the direct values of every attribute, then, recursively, the
submodules it found, each object once. ``variables``,
``trainable_variables``, ``non_trainable_variables`` and ``submodules`` are
computed at each access, so they follow attribute changes.

A module has a ``name`` (by default its class name in snake case) and a
``name_scope`` made when it is created (nested in the scope active then);
methods decorated with ``Module.with_name_scope`` run inside it, so the
variables they make are named ``"<module>/<name>:0"``. ``pg.train.Checkpoint``
saves a module's variables under the paths of its attributes.
"""
from __future__ import annotations

import functools
import re
from typing import Any, Callable, Iterator

from ..framework.name_scope import name_scope as _name_scope
from ..ops.variables import Variable

# Attributes of a module that are its own bookkeeping, never walked.
_IGNORED = frozenset(("_name", "_scope_name", "_name_scope_object"))
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _camel_to_snake(name: str) -> str:
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s).lower()


def _leaves(value: Any) -> Iterator[Any]:
    """The leaves of nested lists, tuples and dicts (dicts by sorted key)."""
    if isinstance(value, dict):
        for k in sorted(value, key=lambda k: (str(type(k)), k) if not isinstance(k, str)
                        else ("", k)):
            yield from _leaves(value[k])
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _leaves(v)
    else:
        yield value


def _flatten(module: "Module", predicate: Callable[[Any], bool], recursive: bool = True,
             seen: set | None = None, stack: set | None = None) -> Iterator[Any]:
    seen = set() if seen is None else seen
    stack = set() if stack is None else stack
    submodules = []
    attrs = vars(module)
    for key in sorted(attrs):
        if key in _IGNORED:
            continue
        for leaf in _leaves(attrs[key]):
            if id(leaf) in seen:
                continue
            seen.add(id(leaf))
            if predicate(leaf):
                yield leaf
            if recursive and isinstance(leaf, Module):
                submodules.append(leaf)
    stack.add(id(module))
    for sub in submodules:
        if id(sub) not in stack:
            yield from _flatten(sub, predicate, recursive, seen, stack)
    stack.discard(id(module))


class Module:
    """Base class of models and layers that own variables::

        class Dense(pg.Module):
            def __init__(self, n_in, n_out, name=None):
                super().__init__(name=name)
                self.w = pg.Variable(np.random.randn(n_in, n_out).astype("float32"),
                                     name="w")
                self.b = pg.Variable(np.zeros(n_out, "float32"), name="b")

            @pg.Module.with_name_scope
            def __call__(self, x):
                return pg.nn.relu(x @ self.w + self.b)

    ``variables``, ``trainable_variables`` and ``submodules`` collect what its
    attributes hold (lists, tuples and dicts included)."""

    def __init__(self, name: str | None = None):
        if name is None:
            name = _camel_to_snake(type(self).__name__)
        elif not isinstance(name, str) or not _IDENTIFIER.fullmatch(name):
            raise ValueError(f"{name!r} is not a valid module name. Module names must be "
                             "valid Python identifiers (e.g. a valid class name).")
        self._name = name
        self._name_scope_object = _name_scope(name)
        self._scope_name = self._name_scope_object.name

    @property
    def name(self) -> str:
        """The module's name (given, or its class name in snake case)."""
        return self._name

    @property
    def name_scope(self) -> _name_scope:
        """The module's name scope (a context manager; ``.name`` ends with "/")."""
        return self._name_scope_object

    @property
    def variables(self) -> tuple:
        """Every variable of this module and its submodules, each once."""
        return tuple(_flatten(self, lambda x: isinstance(x, Variable)))

    @property
    def trainable_variables(self) -> tuple:
        """The variables with ``trainable=True``."""
        return tuple(_flatten(self, lambda x: isinstance(x, Variable) and x.trainable))

    @property
    def non_trainable_variables(self) -> tuple:
        """The variables with ``trainable=False``."""
        return tuple(_flatten(self, lambda x: isinstance(x, Variable) and not x.trainable))

    @property
    def submodules(self) -> tuple:
        """Every module reachable from this one (not itself), each once."""
        return tuple(_flatten(self, lambda x: isinstance(x, Module)))

    @classmethod
    def with_name_scope(cls, method: Callable) -> Callable:
        """Decorates a method so that it runs inside the module's name scope."""
        @functools.wraps(method)
        def wrapped(self: "Module", *args: Any, **kwargs: Any) -> Any:
            with self.name_scope:
                return method(self, *args, **kwargs)
        return wrapped
