"""``pg.testing``: helpers for tests that must prove where work ran (public
names only; see ``pluggable.tools.testing``)."""
from .tools.testing import expect_kernel, kernel_calls, kernel_forwards  # noqa: F401
