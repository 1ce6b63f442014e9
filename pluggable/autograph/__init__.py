"""Layer 6: AutoGraph. ``pg.function`` converts the Python function it
traces by source transformation, so that ``if`` / ``while`` / ``for`` and
``break`` / ``continue`` / ``return`` on tensors become ``pg.cond`` /
``pg.while_loop`` (TensorFlow's AutoGraph); on Python values they stay
Python. ``pg.function(autograph=False)`` turns it off. See
docs/graph-mode.md (AutoGraph)."""
from types import SimpleNamespace as _Namespace

from .api import do_not_convert, to_code, to_graph
from .operators import AutoGraphTypeError, UndefinedVariableError
from .transformer import ConversionError

experimental = _Namespace(do_not_convert=do_not_convert)

__all__ = ["AutoGraphTypeError", "ConversionError", "UndefinedVariableError",
           "do_not_convert", "experimental", "to_code", "to_graph"]
