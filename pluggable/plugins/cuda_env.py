"""Helps the CUDA reference plugin find cuBLAS.

The plugin loads cuBLAS at run time (PLUGGABLE_CUBLAS_LIBRARY, then the
loader's search path). NVIDIA's Python wheels (installed with PyTorch, CuPy
or `pip install nvidia-cublas`) put the library in site-packages, outside
that path, so when the variable is unset this module points it at the newest
`libcublas.so.*` found there. Nothing is loaded here.
"""
from __future__ import annotations

import glob
import os
import re
import site
import sys

_PATTERNS = ("nvidia/cu13/lib/libcublas.so.*", "nvidia/cublas/lib/libcublas.so.*",
             "nvidia/cu12/lib/libcublas.so.*")


def _site_dirs() -> list[str]:
    dirs = [p for p in sys.path if p and os.path.isdir(p)]
    try:
        dirs += site.getsitepackages() + [site.getusersitepackages()]
    except AttributeError:  # some virtual environments lack these
        pass
    return list(dict.fromkeys(dirs))


def locate_cublas() -> str | None:
    """Absolute path of the newest libcublas in the NVIDIA wheels, or None."""
    found = []
    for base in _site_dirs():
        for pattern in _PATTERNS:
            for path in glob.glob(os.path.join(base, pattern)):
                m = re.search(r"libcublas\.so\.(\d+)", os.path.basename(path))
                if m:
                    found.append((int(m.group(1)), path))
    return max(found)[1] if found else None


def configure(plugin_dir: str) -> None:
    """Sets PLUGGABLE_CUBLAS_LIBRARY when the CUDA plugin is installed and the
    variable is unset."""
    if "PLUGGABLE_CUBLAS_LIBRARY" in os.environ:
        return
    if not os.path.exists(os.path.join(plugin_dir, "libpluggable_cuda.so")):
        return
    path = locate_cublas()
    if path:
        os.environ["PLUGGABLE_CUBLAS_LIBRARY"] = path
