"""``pg.train``: checkpoints (public names only; see
``pluggable.training.checkpoint``)."""
from .training.checkpoint import (Checkpoint, LoadStatus, latest_checkpoint,  # noqa: F401
                                  list_variables, load_variable)
