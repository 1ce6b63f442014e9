"""``pg.testing``: helpers for tests that must prove where work ran (public
names only; see ``pluggable.tools.testing``)."""
from .tools.testing import (expect_kernel, has_kernel, kernel_call_counts,  # noqa: F401
                            kernel_calls, kernel_forwards)  # noqa: F401
