"""Every registered op as a function: ``pg.raw_ops.AddV2(x=a, y=b)``.

Arguments are keywords named as in the op definition (inputs, then
attributes); ops that plugins define through ``ops.h`` appear here as soon
as the plugin is loaded. Each function returns a Tensor (or a tuple for ops
with several outputs).
"""
from __future__ import annotations

import sys
import types
from typing import Any

from . import errors, registry

_cache: dict[str, Any] = {}


def _make(op_name: str):
    op = registry.OPS[op_name]
    input_names = [a.name for a in op.inputs]

    def fn(*args: Any, **kwargs: Any):
        from . import dispatch
        if args:
            raise TypeError(f"raw_ops.{op_name} takes keyword arguments only "
                            f"({', '.join(input_names + list(op.attrs))})")
        name = kwargs.pop("name", None)  # accepted for TensorFlow compatibility
        del name
        try:
            inputs = [kwargs.pop(n) for n in input_names]
        except KeyError as exc:
            raise TypeError(f"raw_ops.{op_name} missing input {exc.args[0]!r}; inputs: "
                            f"{', '.join(input_names)}") from None
        outs = dispatch.execute(op, inputs, kwargs)
        return outs[0] if len(outs) == 1 else tuple(outs)

    fn.__name__ = op_name
    fn.__qualname__ = op_name
    sig = ", ".join(f"{a.name}: {a.type_attr or a.dtype.name}" for a in op.inputs)
    attrs = ", ".join(f"{a.name}: {a.kind}" + (f" = {a.default!r}" if a.has_default else "")
                      for a in op.attrs.values() if a.name not in {x.type_attr for x in op.inputs})
    fn.__doc__ = (f"Op {op_name} ({op.source}).\n\nInputs: {sig or 'none'}\n"
                  f"Attributes: {attrs or 'none'}\n"
                  f"Outputs: {', '.join(a.name for a in op.outputs)}")
    return fn


class _RawOps(types.ModuleType):
    def __getattr__(self, name: str):
        from . import plugin_loader as plugins
        plugins.ensure_loaded()
        fn = _cache.get(name)
        if fn is None:
            if name not in registry.OPS:
                if name.startswith("__"):
                    raise AttributeError(name)
                raise AttributeError(f"no op named {name!r} is registered; ops: "
                                     f"{', '.join(sorted(registry.OPS))}")
            fn = _cache[name] = _make(name)
        return fn

    def __dir__(self):
        return sorted(registry.OPS)


def refresh() -> None:
    _cache.clear()


sys.modules[__name__].__class__ = _RawOps
del errors
