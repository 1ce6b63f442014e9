"""``pg.saved_model``: modules in TensorFlow's SavedModel format.

``save(obj, export_dir, signatures=None)`` writes `obj` (a ``pg.Module`` or
any object holding variables, submodules and ``pg.function`` methods) as
``export_dir/saved_model.pb`` and a TensorBundle checkpoint in
``export_dir/variables/``, which ``tf.saved_model.load`` reads;
``load(export_dir)`` reads a SavedModel that pluggable or TensorFlow 2
wrote back into a ``RestoredObject`` (a ``pg.Module``) whose attributes are
the saved ones, variables as ``pg.Variable``, functions as
``RestoredFunction`` and ``signatures[key]`` as ``RestoredSignature``.
``docs/user-guide.md`` ("SavedModel") describes what is kept and checked.
"""
from __future__ import annotations

from .load import RestoredFunction, RestoredObject, RestoredSignature, load
from .save import save

__all__ = ["save", "load", "RestoredObject", "RestoredFunction", "RestoredSignature"]
