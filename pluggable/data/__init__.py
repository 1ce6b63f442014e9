"""Layer 6: input pipelines, ``pg.data`` (TensorFlow's ``tf.data``): see
``pluggable.data.dataset``."""
from . import experimental  # noqa: F401
from .dataset import (AUTOTUNE, INFINITE_CARDINALITY, UNKNOWN_CARDINALITY, Dataset,  # noqa: F401
                      Iterator, TextLineDataset)

__all__ = ["AUTOTUNE", "Dataset", "INFINITE_CARDINALITY", "Iterator", "TextLineDataset",
           "UNKNOWN_CARDINALITY", "experimental"]
