"""Type dispatch of the public functions (``pg.add``, ``pg.concat``, ...)
for value types that are not tensors, such as ``pg.RaggedTensor``: the
TensorFlow dispatch that makes ``tf.reduce_sum(ragged, axis=1)`` work.

``add_dispatch_support(module, names)`` wraps the listed functions of a
module once (the ops layer lists its own); a higher layer then registers
a handler with ``register(fn, types, handler)``: a call whose arguments
(positional or keyword, and the items of a list or tuple argument, as in
``pg.concat([a, b], 0)``) hold an instance of one of `types` runs
`handler` with the same arguments instead. A call without such an
argument costs one scan of its arguments (a few hundred nanoseconds)."""
from __future__ import annotations

import functools
from types import ModuleType
from typing import Any, Callable, Iterable

# wrapper -> [(types, handler)], in registration order
_HANDLERS: dict[Callable, list[tuple[tuple[type, ...], Callable]]] = {}


def _in_sequence(value: list | tuple, types: tuple[type, ...]) -> bool:
    for v in value:
        if isinstance(v, types):
            return True
    return False


def _wrap(fn: Callable) -> Callable:
    handlers: list = []
    sequences = (list, tuple)

    @functools.wraps(fn)
    def dispatching(*args: Any, **kwargs: Any) -> Any:
        if handlers:
            values = (*args, *kwargs.values()) if kwargs else args
            for types, handler in handlers:
                for a in values:
                    if isinstance(a, types) or (type(a) in sequences and
                                                _in_sequence(a, types)):
                        return handler(*args, **kwargs)
        return fn(*args, **kwargs)

    dispatching.__wrapped_dispatch__ = fn
    _HANDLERS[dispatching] = handlers
    return dispatching


def add_dispatch_support(module: ModuleType, names: Iterable[str]) -> None:
    """Replaces each function `names` of `module` by one that dispatches on
    the argument types registered for it (once: a second call is a no-op)."""
    for name in names:
        fn = getattr(module, name)
        if fn not in _HANDLERS:
            setattr(module, name, _wrap(fn))


def register(fn: Callable, types: tuple[type, ...], handler: Callable) -> None:
    """Runs `handler` for calls of `fn` (a function made dispatchable with
    ``add_dispatch_support``) that get an argument of one of `types`."""
    handlers = _HANDLERS.get(fn)
    if handlers is None:
        raise TypeError(f"{getattr(fn, '__name__', fn)!r} does not dispatch on argument types; "
                        "list it in the ops layer's add_dispatch_support call")
    handlers.append((tuple(types), handler))


def dispatches(fn: Callable) -> bool:
    """Whether `fn` dispatches on argument types."""
    return fn in _HANDLERS
