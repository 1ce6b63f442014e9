"""``pg.types``: the public types of values (``tf.types``):
``pg.types.experimental.TraceType`` for arguments of ``pg.function`` that
choose how they key its traces."""
from __future__ import annotations

import types as _py_types

from .graph.trace_type import TraceType

experimental = _py_types.SimpleNamespace(TraceType=TraceType)

__all__ = ["experimental"]
