"""Name scopes (``pg.name_scope``): prefixes for the names of variables.

The scope is per thread of control (a ``contextvars`` variable, like the
device scope). Inside ``with pg.name_scope("dense"):`` a variable made
with ``name="w"`` is named ``"dense/w:0"``, as in TensorFlow's eager mode;
scopes nest (``"outer/dense/"``), and a name that ends with "/" is taken
as a full scope, not nested under the current one.
"""
from __future__ import annotations

import contextvars
import re

_scope: contextvars.ContextVar[str] = contextvars.ContextVar("pg_name_scope", default="")
_VALID = re.compile(r"[A-Za-z0-9_.\-/>]*")


def current() -> str:
    """The current scope, "" or ending with "/"."""
    return _scope.get()


def prefixed(name: str) -> str:
    """`name` under the current scope."""
    return current() + name


class name_scope:
    """A context manager that scopes the names of variables made inside it
    (``tf.name_scope``); ``name`` is the full scope it enters, ending with
    "/"."""

    def __init__(self, name: str):
        if not isinstance(name, str):
            raise TypeError(f"name_scope: the name must be a str, got {type(name).__name__}")
        if name and not _VALID.fullmatch(name):
            raise ValueError(f"'{name}' is not a valid scope name: use letters, digits "
                             "and _ . - / >")
        if name.endswith("/") or not name:
            self._name = name
        else:
            self._name = current() + name + "/"
        self._tokens: list = []

    @property
    def name(self) -> str:
        return self._name

    def __enter__(self) -> str:
        self._tokens.append(_scope.set(self._name))
        return self._name

    def __exit__(self, *exc) -> None:
        _scope.reset(self._tokens.pop())
