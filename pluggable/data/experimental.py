"""``pg.data.experimental``: the names TensorFlow keeps under
``tf.data.experimental`` that input pipelines commonly use."""
from typing import Any

from .dataset import AUTOTUNE, INFINITE_CARDINALITY, UNKNOWN_CARDINALITY  # noqa: F401


def cardinality(dataset: Any) -> Any:
    """``dataset.cardinality()``."""
    return dataset.cardinality()
