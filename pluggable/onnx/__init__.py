"""``pg.onnx``: ONNX models on every plugin device.

``pg.onnx.import_model(model)`` reads a model (path, bytes, ``onnx.ModelProto``)
with the optional ``onnx`` package (``pip install "pluggable[onnx]"``) and
returns a callable run by the graph runtime; ``pg.onnx.export(fn,
input_signature, path)`` writes a traced function as an ONNX model; ``pluggable.onnx.mapping`` is
the one ONNX -> op-registry table; ``pluggable.onnx.backend`` is an
``onnx.backend.base.Backend``; ``pluggable.onnx.ort_ep_library()`` is the
path of the ONNX Runtime plugin EP library (docs/onnxruntime.md).
"""
from .export import export  # noqa: F401
from .importer import Model, ValueInfo, import_model  # noqa: F401
from .ort import ort_ep_library  # noqa: F401

__all__ = ["Model", "ValueInfo", "export", "import_model", "ort_ep_library"]
