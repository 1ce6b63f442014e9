"""``pg.saved_model``: TensorFlow's SavedModel format."""
from __future__ import annotations

from .load import RestoredFunction, RestoredObject, RestoredSignature, load
from .save import save

__all__ = ["save", "load", "RestoredObject", "RestoredFunction", "RestoredSignature"]
