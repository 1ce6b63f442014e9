"""``pg.onnx``: ONNX models on every plugin device.

``pg.onnx.import_model(model)`` reads a model (path, bytes, ``onnx.ModelProto``)
with the optional ``onnx`` package (``pip install "pluggable[onnx]"``) and
returns a callable run by the graph runtime; ``pluggable.onnx.mapping`` is
the one ONNX -> op-registry table; ``pluggable.onnx.backend`` is an
``onnx.backend.base.Backend``.
"""
from .importer import Model, ValueInfo, import_model  # noqa: F401

__all__ = ["Model", "ValueInfo", "import_model"]
