"""``pg.debugging``: placement logging."""
from .config import placement_log, set_log_device_placement  # noqa: F401
