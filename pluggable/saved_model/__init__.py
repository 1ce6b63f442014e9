"""``pg.saved_model``: TensorFlow's SavedModel format."""
from __future__ import annotations

from .save import save

__all__ = ["save"]
