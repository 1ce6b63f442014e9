"""``onnx.backend.base.Backend`` over ``pg.onnx.import_model``.

``Backend.prepare(model, device)`` imports the model and runs it under
``pg.device(device)``; ONNX's device names map to pluggable's ("CPU" ->
"CPU:0", "CUDA" -> "GPU:0"), and any pluggable device name ("MY_DEVICE:0")
is accepted. ``for_device("MY_DEVICE:0")`` gives a backend whose "CPU" is
that device, so onnx's own suite (whose cases are named ``*_cpu``) runs on it.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from onnx.backend.base import Backend, BackendRep

from ..runtime import placement
from .importer import import_model

_ONNX_NAMES = {"CPU": "CPU:0", "CUDA": "GPU:0"}


def device_name(device: str) -> str:
    d = str(device)
    return _ONNX_NAMES.get(d.upper(), d if ":" in d else f"{d}:0")


class PluggableRep(BackendRep):
    def __init__(self, model, device: str):
        self.model = model
        self.device = device

    def run(self, inputs: Any, **kwargs: Any) -> tuple:
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            feeds = {v.name: x for v, x in zip(self.model.inputs, inputs)}
        with placement.device(self.device):
            outs = self.model(feeds)
        return tuple([_value(t) for t in o] if isinstance(o, list) else _value(o)
                     for o in (outs[v.name] for v in self.model.outputs))


def _value(t) -> np.ndarray:
    """A tensor's value as onnx's runners give one: strings as str (UTF-8),
    not the bytes pluggable's string tensors hold."""
    if t.dtype.name != "string":
        return t.numpy()
    a = np.asarray(t.numpy(), dtype=object)
    return np.vectorize(lambda b: b.decode("utf-8", errors="replace") if isinstance(b, bytes)
                        else b, otypes=[object])(a) if a.size else a


class PluggableBackend(Backend):
    """Runs ONNX models with pluggable; ``device`` maps through ``DEVICE_MAP``."""

    DEVICE_MAP: dict = {}

    @classmethod
    def _device(cls, device: str) -> str:
        return cls.DEVICE_MAP.get(str(device).upper(), device_name(device))

    @classmethod
    def supports_device(cls, device: str) -> bool:
        name = cls._device(device)
        kind = name.split(":")[0].upper()
        return any(d.device_type == kind for d in placement.list_physical_devices())

    @classmethod
    def prepare(cls, model, device: str = "CPU", **kwargs: Any) -> PluggableRep:
        return PluggableRep(import_model(model), cls._device(device))

    @classmethod
    def run_model(cls, model, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node, inputs: Any, device: str = "CPU", outputs_info=None,
                 **kwargs: Any) -> tuple:
        from onnx import helper
        ins = [np.asarray(x) for x in inputs]
        vi = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype),
                                            x.shape) for n, x in zip(node.input, ins)]
        out = [helper.make_empty_tensor_value_info(n) for n in node.output]
        graph = helper.make_graph([node], "node", vi, out)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", kwargs.get(
            "opset_version", 17))])
        return cls.run_model(model, ins, device)


def for_device(device: str) -> type:
    """A backend class whose ONNX "CPU" is pluggable device `device`."""
    return type(f"PluggableBackend_{device.replace(':', '_')}", (PluggableBackend,),
                {"DEVICE_MAP": {"CPU": device}})


backend = PluggableBackend
prepare = PluggableBackend.prepare
run_model = PluggableBackend.run_model
run_node = PluggableBackend.run_node
supports_device = PluggableBackend.supports_device
