"""Re-exports imported at first use, for the public namespace modules.

``import pluggable`` does not import the subsystems it only re-exports (the
graph layer, the profiler, custom ops, collectives, optimizers, checkpoints):
a namespace module lists them as lazy names, and the first access (``pg.x``,
``from pluggable import x``) imports the module that defines the name and
keeps it in the namespace, so later accesses cost a plain attribute lookup.
``__all__`` and ``dir()`` list lazy names like the others. Subsystems defined
here have no import-time effect that a user could see before using them.
"""
from __future__ import annotations

import importlib
from typing import Any, Callable


def lazy_exports(namespace: dict[str, Any],
                 table: dict[str, tuple[str, str | None]]) -> tuple[Callable, Callable]:
    """The ``__getattr__`` and ``__dir__`` of the module whose globals are
    `namespace`: `table` maps each lazy name to (module, attribute), the
    module relative to the package (``".graph"``), the attribute None for the
    module itself."""
    module_name = namespace["__name__"]
    package = namespace.get("__package__") or module_name.rpartition(".")[0]

    def __getattr__(name: str) -> Any:
        try:
            where, attr = table[name]
        except KeyError:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}") from None
        module = importlib.import_module(where, package)
        value = module if attr is None else getattr(module, attr)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(table))

    return __getattr__, __dir__
