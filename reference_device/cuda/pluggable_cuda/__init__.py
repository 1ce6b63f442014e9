"""The CUDA reference plugin of pluggable, shipped as its own distribution.

pluggable finds it through the ``pluggable.plugins`` entry point that this
distribution declares (see pyproject.toml): the entry point names
`plugin_paths`, which returns the absolute path of the shared object
installed beside this file."""
from __future__ import annotations

import os

LIBRARY = "libpluggable_cuda.so"


def plugin_paths() -> list[str]:
    """Absolute paths of the plugin files this package ships."""
    return [os.path.join(os.path.dirname(os.path.abspath(__file__)), LIBRARY)]
