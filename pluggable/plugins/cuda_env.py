"""Helps the CUDA reference plugin find cuBLAS, cuDNN, CUPTI and NCCL.

The plugin loads cuBLAS, cuDNN for its convolutions and, for its profiler,
CUPTI at run time (PLUGGABLE_CUBLAS_LIBRARY / PLUGGABLE_CUDNN_LIBRARY /
PLUGGABLE_CUPTI_LIBRARY, and NCCL for its collectives from
PLUGGABLE_NCCL_LIBRARY; then the loader's search path and the toolkit's
folders). NVIDIA's Python wheels (installed with PyTorch, CuPy, or `pip
install nvidia-cublas` / `nvidia-cudnn-cu13` / `nvidia-cuda-cupti`) put the
libraries in site-packages, outside that path, so when a variable is unset
this module points it at the newest matching library found there. Nothing is
loaded here.
"""
from __future__ import annotations

import glob
import os
import re
import site
import sys

# Where the wheels put each library, relative to a site-packages folder:
# CUDA 13 wheels share nvidia/cu13/lib, CUDA 12 wheels have one folder each.
_LIBRARIES = {
    "libcublas": ("nvidia/cu13/lib", "nvidia/cublas/lib", "nvidia/cu12/lib"),
    "libcudnn": ("nvidia/cudnn/lib", "nvidia/cu13/lib", "nvidia/cu12/lib"),
    "libcupti": ("nvidia/cu13/lib", "nvidia/cuda_cupti/lib", "nvidia/cu12/lib"),
    "libnccl": ("nvidia/nccl/lib", "nvidia/cu13/lib", "nvidia/cu12/lib"),
}
_VARIABLES = {"libcublas": "PLUGGABLE_CUBLAS_LIBRARY", "libcudnn": "PLUGGABLE_CUDNN_LIBRARY",
              "libcupti": "PLUGGABLE_CUPTI_LIBRARY", "libnccl": "PLUGGABLE_NCCL_LIBRARY"}


def _site_dirs() -> list[str]:
    dirs = [p for p in sys.path if p and os.path.isdir(p)]
    try:
        dirs += site.getsitepackages() + [site.getusersitepackages()]
    except AttributeError:  # some virtual environments lack these
        pass
    return list(dict.fromkeys(dirs))


def locate(library: str) -> str | None:
    """Absolute path of the newest `library` ("libcublas", "libcudnn", "libcupti" or "libnccl",
    as ``<library>.so.<major>``) in the NVIDIA wheels, or None."""
    found = []
    pattern = re.compile(re.escape(library) + r"\.so\.(\d+)")
    for base in _site_dirs():
        if not os.path.isdir(os.path.join(base, "nvidia")):
            continue  # (every folder of _LIBRARIES is under nvidia/: no glob needed)
        for folder in _LIBRARIES[library]:
            for path in glob.glob(os.path.join(base, folder, library + ".so.*")):
                m = pattern.match(os.path.basename(path))
                if m:
                    found.append((int(m.group(1)), path))
    return max(found)[1] if found else None


def locate_cublas() -> str | None:
    """Absolute path of the newest libcublas in the NVIDIA wheels, or None."""
    return locate("libcublas")


def locate_cupti() -> str | None:
    """Absolute path of the newest libcupti in the NVIDIA wheels, or None."""
    return locate("libcupti")


def configure(plugin_dir: str) -> None:
    """Sets PLUGGABLE_CUBLAS_LIBRARY, PLUGGABLE_CUDNN_LIBRARY,
    PLUGGABLE_CUPTI_LIBRARY and PLUGGABLE_NCCL_LIBRARY, each where
    it is unset, when the CUDA plugin is installed."""
    if not (os.path.exists(os.path.join(plugin_dir, "libpluggable_cuda.so"))
            or _cuda_package_installed()):
        return
    for library, variable in _VARIABLES.items():
        if variable in os.environ:
            continue
        path = locate(library)
        if path:
            os.environ[variable] = path


# How to get the CUDA reference plugin, said where a GPU is present without it.
INSTALL_HINT = ("an NVIDIA GPU driver is present but the CUDA reference plugin is not "
                "installed: from a checkout of pluggable run `pip install "
                "./reference_device/cuda` (it needs the CUDA toolkit's nvcc), or install the "
                "pluggable-cuda package")


def _cuda_package_installed() -> bool:
    """Whether the pluggable-cuda distribution (package pluggable_cuda) is
    importable."""
    import importlib.util  # noqa: PLC0415
    try:
        return importlib.util.find_spec("pluggable_cuda") is not None
    except (ImportError, ValueError):
        return False


def gpu_driver_present() -> bool:
    """Whether an NVIDIA driver is visible: /proc/driver/nvidia, or libcuda
    loadable."""
    if os.path.exists("/proc/driver/nvidia"):
        return True
    import ctypes  # noqa: PLC0415
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def missing_plugin_hint(plugin_paths: list[str]) -> str:
    """INSTALL_HINT where a GPU driver is present and none of `plugin_paths`
    (the plugins found) is the CUDA reference plugin; else ""."""
    if any(os.path.basename(p) == "libpluggable_cuda.so" for p in plugin_paths):
        return ""
    return INSTALL_HINT if gpu_driver_present() else ""
