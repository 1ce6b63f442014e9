"""The ONNX Runtime execution-provider bridge: where its library is.

`libpluggable_ort_ep.so` (built from c_api/ort with its own copy of the core
C runtime) lets ONNX Runtime run models on pluggable's plugin devices. The
ONNX Runtime process that registers it must not have imported pluggable
(importing this module imports the package and its core): such a process
finds the file without importing, as docs/onnxruntime.md shows; this
function gives the path to code that uses pluggable and starts that process."""
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
