"""pluggable: a tensor runtime whose devices are plugins.

Devices are shared libraries that implement a C ABI source-compatible with
TensorFlow's PluggableDevice API (``SE_InitPlugin`` / ``TF_InitKernel``).
They are discovered in the plugin directories (see ``pluggable.plugin_loader``)
when the package is imported::

    import numpy as np, pluggable as pg
    pg.list_physical_devices()
    with pg.device("MY_DEVICE:0"):
        y = pg.nn.relu(pg.constant(np.random.randn(10).astype("float32")))
    y.numpy()

Start with ``help(pg.device)``, ``pg.plugins()`` and ``python -m pluggable --help``.
"""
from __future__ import annotations

import os as _os

from . import config, debugging, dtypes, errors, registry  # noqa: F401
from ._ffi import ffi as _ffi  # noqa: F401  (loads the core runtime)
from . import builtin_ops as _builtin_ops, cpu_kernels as _cpu_kernels

_builtin_ops.define_builtin_ops()
_cpu_kernels.register_cpu_kernels()

from . import plugin_loader as _plugins  # noqa: E402
from . import math, nn, raw_ops, testing  # noqa: E402,F401
from .device import Device, PhysicalDevice  # noqa: E402,F401
from .dtypes import (DType, as_dtype, bfloat16, float16, float32, float64, int8,  # noqa: E402,F401
                     int16, int32, int64, uint8)
from .dtypes import bool_ as bool  # noqa: E402,A001
from .math_ops import (abs, add, cast, divide, exp, fill, identity, log, matmul,  # noqa: E402,F401
                       maximum, minimum, multiply, negative, reduce_max, reduce_mean,
                       reduce_min, reduce_sum, reshape, sigmoid, sqrt, subtract, tanh,
                       transpose)
from .placement import device, get_device, list_physical_devices  # noqa: E402,F401
from .tensor import Tensor, constant, convert_to_tensor, from_dlpack  # noqa: E402,F401

__version__ = "0.1.0"


def plugins() -> list:
    """Every plugin file found, with its status ("loaded", "quarantined",
    "skipped"), reason, ABI version, platform, device type, device count and
    the number of kernels and ops it registered."""
    return _plugins.records()


def load_plugin(path: str, probe: "bool | None" = None) -> "_plugins.PluginRecord":
    """Loads a plugin file now. Returns its record; a plugin that fails is
    quarantined (record.status, record.reason), never raised. With
    ``probe=True`` (default: env PLUGGABLE_PROBE_PLUGINS) the file is first
    loaded in a subprocess, and quarantined if that crashes."""
    return _plugins.load_plugin(path, probe=probe)


def synchronize(device_name: "str | None" = None) -> None:
    """Waits for all work (or one device's) and raises the first
    asynchronous error as a typed exception naming the device."""
    devs = [get_device(device_name)] if device_name else [d for d in _plugins.devices()]
    for d in devs:
        d.synchronize()


def get_include() -> str:
    """Directory of the C headers plugin authors compile against."""
    here = _os.path.dirname(__file__)
    packaged = _os.path.join(here, "include")
    if _os.path.isdir(packaged):
        return packaged
    return _os.path.join(_os.path.dirname(here), "c_api", "include")


from . import _cuda_env  # noqa: E402

_cuda_env.configure(str(_plugins.PACKAGE_PLUGIN_DIR))
_plugins.ensure_loaded()
