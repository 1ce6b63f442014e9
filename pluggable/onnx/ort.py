"""The ONNX Runtime execution-provider bridge: where its library is.

`libpluggable_ort_ep.so` (built from c_api/ort with its own copy of the core
C runtime) lets ONNX Runtime run models on pluggable's plugin devices::

    import onnxruntime as ort
    ort.register_execution_provider_library("pluggable", ort_ep_library())
    devices = [d for d in ort.get_ep_devices() if d.ep_name.startswith("pluggable_")]

This module imports nothing of the runtime: an ONNX Runtime process using the
bridge must not load pluggable's core itself (see docs/onnxruntime.md)."""
from __future__ import annotations

import pathlib

LIBRARY_NAME = "libpluggable_ort_ep.so"


def ort_ep_library() -> str:
    """The absolute path of the bridge library, for
    `onnxruntime.register_execution_provider_library`. Raises FileNotFoundError,
    saying how to build it, when the package was built without it."""
    path = pathlib.Path(__file__).resolve().parent / LIBRARY_NAME
    if not path.is_file():
        raise FileNotFoundError(
            f"pluggable: the ONNX Runtime bridge {path} is missing: rebuild the package "
            "(pip install . or python3 setup.py build_ext --inplace) without "
            "PLUGGABLE_BUILD_ORT_EP=0")
    return str(path)
