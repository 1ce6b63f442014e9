"""Where the CUDA reference plugin is: in the installed pluggable_cuda package
(pip install ./reference_device/cuda), else built into the checkout's
pluggable/plugins (reference_device/cuda/setup.py --plugin-into, as the GPU
machine's scripts do)."""
from __future__ import annotations

import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent


def cuda_plugin_file() -> pathlib.Path:
    try:
        import pluggable_cuda  # noqa: PLC0415
    except ImportError:
        return ROOT / "pluggable" / "plugins" / "libpluggable_cuda.so"
    return pathlib.Path(pluggable_cuda.plugin_paths()[0])
