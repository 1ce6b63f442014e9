"""pluggable: a tensor runtime whose devices are plugins.

Devices are shared libraries that implement a C ABI source-compatible with
TensorFlow's PluggableDevice API (``SE_InitPlugin`` / ``TF_InitKernel``).
They are discovered in the plugin directories (see ``pluggable.plugins``)
when the package is imported::

    import numpy as np, pluggable as pg
    pg.list_physical_devices()
    with pg.device("MY_DEVICE:0"):
        y = pg.nn.relu(pg.constant(np.random.randn(10).astype("float32")))
    y.numpy()

Start with ``help(pg.device)``, ``pg.plugins()`` and ``python -m pluggable --help``.

This module only re-exports the public API; the code lives in the layer
packages (``_core``, ``framework``, ``runtime``, ``plugins``, ``ops``,
``tools``: see ``docs/architecture.md``).
"""
from . import ops as _ops  # registers the built-in ops and their CPU kernels
from . import config, debugging, linalg, math, nn, random, testing  # noqa: F401  (namespaces)
from ._lazy import lazy_exports as _lazy_exports
from .autodiff import NotDifferentiable, RegisterGradient  # (registers the gradient functions)
from .framework import dtypes, errors, registry  # noqa: F401
from .framework.dtypes import (DType, as_dtype, bfloat16, float16, float32, float64, int8,
                               int16, int32, int64, string, uint8, uint32, uint64)
from .framework.dtypes import bool_ as bool  # noqa: A001
from .framework.dtypes import complex64, complex128  # noqa: F401
from .framework.dtypes import uint16  # (the narrow types: pg.dtypes.float8_e4m3fn, int4, ...)
from .framework.name_scope import name_scope
from .framework.tensor import Tensor
from .framework.tensor_shape import TensorShape
from .framework.version import VERSION as __version__
from .ops import raw_ops
from .ops.array_ops import (broadcast_to, clip_by_norm, clip_by_value, concat, expand_dims,
                            eye, gather, newaxis, one_hot, ones, ones_like, pad, range, rank, reverse, shape,
                            size, slice, split, squeeze, stack, strided_slice, tile, unstack,
                            where, zeros, zeros_like)
from .ops.gradient_ops import stop_gradient
from .ops.math_ops import (abs, add, add_n, argmax, argmin, cast, cumsum, divide, equal, exp,
                           fill, floor, greater, greater_equal, identity, less, less_equal, log,
                           logical_and, logical_not, logical_or, matmul, maximum, minimum,
                           multiply, negative, not_equal, pow, reduce_all, reduce_any, reduce_max,
                           reduce_mean, reduce_min, reduce_prod, reduce_sum, reshape, sigmoid,
                           sign, sqrt, square, subtract, tanh, transpose, truediv)
from .ops.math_ops import (acos, acosh, asin, asinh, atan, atanh, cos, cosh, round, sin,  # noqa: A004
                           sinh, tan)
from .ops.math_ops import complex  # noqa: A004  (tf.complex)
from .ops.linalg_ops import einsum, norm
from .ops.logging_ops import print  # noqa: A004  (tf.print)
from .ops.nd_index_ops import (argsort, gather_nd, linspace, scatter_nd, sort,
                               tensor_scatter_nd_add, tensor_scatter_nd_max,
                               tensor_scatter_nd_min, tensor_scatter_nd_sub,
                               tensor_scatter_nd_update)
from .ops.tensor_methods import Reference
from .ops.variables import Variable
from .plugins import cuda_env as _cuda_env, loader as _loader
from .plugins.loader import load_plugin, plugins
from .runtime import placement  # noqa: F401
from .runtime.copy_streams import PendingCopy, copy_to_device_async
from .runtime.device import Device, PhysicalDevice
from .runtime.placement import device, get_device, list_physical_devices, synchronize
from .runtime.tensors import constant, convert_to_tensor, from_dlpack
from .tools.headers import get_include

__all__ = [
    # namespaces
    "config", "debugging", "distribute", "dtypes", "errors", "experimental", "graph_util", "linalg",
    "math", "mixed_precision", "nn", "onnx",
    "optimizers", "profiler", "ragged", "random", "raw_ops", "testing", "train",
    "strings", "sparse", "SparseTensor", "io", "saved_model", "keras", "image", "types",
    # devices and plugins
    "Device", "PhysicalDevice", "device", "get_device", "list_physical_devices",
    "load_plugin", "plugins", "synchronize", "get_include",
    "copy_to_device_async", "PendingCopy",
    # tensors and dtypes
    "custom_op",
    "Tensor", "RaggedTensor", "RaggedTensorSpec", "Reference", "constant", "convert_to_tensor", "from_dlpack", "DType",
    "as_dtype", "bool", "bfloat16", "float16", "float32", "float64", "int8", "int16",
    "int32", "int64", "string", "uint8", "uint32", "uint64", "newaxis",
    "uint16", "complex64", "complex128",
    # automatic differentiation and variables
    "GradientTape", "NotDifferentiable", "RegisterGradient", "UnconnectedGradients",
    "Variable", "custom_gradient", "stop_gradient",
    # graph mode
    "function", "ConcreteFunction", "TensorSpec", "TensorArray", "cond", "py_function",
    "init_scope",
    "while_loop", "autograph", "map_fn",
    # models and input pipelines
    "Module", "data", "name_scope",
    # ops
    "abs", "add", "add_n", "argmax", "argmin", "broadcast_to", "cast", "clip_by_norm",
    "clip_by_value", "complex",
    "concat", "cumsum", "divide", "equal", "exp", "expand_dims", "eye", "fill", "floor",
    "gather", "greater", "greater_equal", "identity", "less", "less_equal", "log",
    "logical_and", "logical_not", "logical_or", "matmul", "maximum", "minimum", "multiply",
    "negative", "not_equal", "one_hot", "ones", "ones_like", "pad", "pow", "range", "rank",
    "reduce_all", "reduce_any", "reduce_max", "reduce_mean", "reduce_min", "reduce_prod",
    "reduce_sum", "reshape", "reverse", "shape", "sigmoid", "sign", "size", "slice", "split",
    "sqrt", "square", "squeeze", "stack", "strided_slice", "subtract", "tanh", "tile",
    "transpose", "truediv", "unstack", "where", "zeros", "zeros_like",
    "acos", "acosh", "asin", "asinh", "atan", "atanh", "cos", "cosh", "round", "sin", "sinh",
    "tan", "argsort", "einsum", "norm", "gather_nd", "linspace", "scatter_nd", "sort",
    "tensor_scatter_nd_add", "tensor_scatter_nd_update", "tensor_scatter_nd_sub",
    "tensor_scatter_nd_min", "tensor_scatter_nd_max", "print", "TensorShape",
]

# Imported at first use (``pluggable._lazy``): subsystems that ``import
# pluggable`` only re-exports, with the layer packages that were attributes of
# the package when they were imported eagerly.
__getattr__, __dir__ = _lazy_exports(globals(), {
    "distribute": (".distribute", None), "graph_util": (".graph_util", None), "onnx": (".onnx", None),
    "mixed_precision": (".mixed_precision", None),
    "optimizers": (".optimizers", None), "profiler": (".profiler", None),
    "train": (".train", None), "saved_model": (".saved_model", None),
    "custom_op": (".custom_ops", "custom_op"),
    "ConcreteFunction": (".graph", "ConcreteFunction"), "TensorSpec": (".graph", "TensorSpec"),
    "cond": (".graph", "cond"), "function": (".graph", "function"),
    "while_loop": (".graph", "while_loop"),
    "graph": (".graph", None), "custom_ops": (".custom_ops", None),
    "autograph": (".autograph", None),
    "training": (".training", None),
    "GradientTape": (".autodiff", "GradientTape"),
    "UnconnectedGradients": (".autodiff", "UnconnectedGradients"),
    "custom_gradient": (".autodiff.custom_gradient", "custom_gradient"),
    "py_function": (".graph.py_function", "py_function"),
    "init_scope": (".graph.tracing", "init_scope"),
    "TensorArray": (".graph.tensor_array", "TensorArray"),
    "Module": (".training.module", "Module"),
    "data": (".data", None),
    "ragged": (".ragged", None), "RaggedTensor": (".ragged", "RaggedTensor"),
    "RaggedTensorSpec": (".ragged", "RaggedTensorSpec"), "experimental": (".experimental", None),
    "strings": (".strings", None), "sparse": (".sparse", None), "io": (".io", None),
    "SparseTensor": (".sparse", "SparseTensor"), "keras": (".keras", None),
    "image": (".image", None), "types": (".types", None),
    "map_fn": (".graph.map_fn", "map_fn"),
})

# Start-up: point the CUDA plugin at cuBLAS, then discover and load plugins.
_cuda_env.configure(str(_loader.PACKAGE_PLUGIN_DIR))
_loader.ensure_loaded()
