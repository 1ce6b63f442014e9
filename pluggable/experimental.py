"""``pg.experimental``: TensorFlow's ``tf.experimental`` names that
pluggable has (public names only)."""
from .ragged.dynamic_ragged_shape import DynamicRaggedShape, RowPartition  # noqa: F401
