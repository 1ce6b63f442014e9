"""``pg.debugging``: placement logging (public names only)."""
from .framework.config import placement_log, set_log_device_placement  # noqa: F401
