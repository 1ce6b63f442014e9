"""cuda-python's CUDA runtime binding, the one way the Python side reaches
the CUDA runtime. Imports nothing of pluggable: setup.py loads this file by
its path to find the GPUs' architectures before the package is built."""
from __future__ import annotations

from typing import Any


def cudart() -> Any:
    """cuda-python's runtime module (``cuda.bindings.runtime``, or
    ``cuda.cudart`` before cuda-python 12.6), or None where it is not
    installed."""
    try:
        from cuda.bindings import runtime  # noqa: PLC0415 (optional dependency)
        return runtime
    except ImportError:
        pass
    try:
        from cuda import cudart as runtime  # noqa: PLC0415
        return runtime
    except ImportError:
        return None
