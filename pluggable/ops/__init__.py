"""Layer 5: ops. The built-in op definitions (``definitions`` and the
``*_op_defs`` modules), their CPU kernels on numpy (``cpu_kernels*``),
every registered op as a function (``raw_ops``), the user functions over
them (``math_ops``, ``array_ops``, ``nn_ops``, ``linalg_ops``,
``random_ops``) and the Tensor operators (``tensor_methods``);
``fused_ops`` defines the ops graph optimizers fuse into; ``transformer_ops``
the fused attention and layer norm ops.

Importing this package registers the built-in ops and their CPU kernels, so
it happens before any plugin is loaded (a plugin's kernels can only be
registered for ops that exist). Imports ``plugins``, ``runtime``,
``framework`` and ``_core``."""
from . import (array_op_defs, collective_op_defs, cpu_kernels, cpu_kernels_array, cpu_kernels_math, cpu_kernels_nn,
               cpu_kernels_random, definitions, fused_ops, gradient_ops, math_op_defs,
               nn_op_defs, random_op_defs, resource_ops, transformer_ops)
from . import cpu_kernels_linalg, cpu_kernels_nd_index, linalg_op_defs, nd_index_op_defs
from . import cpu_kernels_selection, selection_op_defs
from . import py_func_ops  # noqa: F401  (EagerPyFunc)
from . import string_ops

definitions.define_builtin_ops()
array_op_defs.define_array_ops()
math_op_defs.define_math_ops()
nn_op_defs.define_nn_ops()
random_op_defs.define_random_ops()
nd_index_op_defs.define_nd_index_ops()
linalg_op_defs.define_linalg_ops()
selection_op_defs.define_selection_ops()
cpu_kernels.register_cpu_kernels(cpu_kernels_math.KERNELS, cpu_kernels_array.KERNELS,
                                 cpu_kernels_nn.KERNELS, cpu_kernels_random.KERNELS,
                                 cpu_kernels_nd_index.KERNELS, cpu_kernels_linalg.KERNELS,
                                 cpu_kernels_selection.KERNELS)
resource_ops.define_resource_ops()
gradient_ops.define_gradient_ops()
fused_ops.define_fused_ops()
collective_op_defs.define_collective_ops()
transformer_ops.define_transformer_ops()
string_ops.define_string_ops()

from . import tensor_methods  # noqa: E402,F401  (Tensor operators, indexing, iteration)

# The functions that other value types (pg.RaggedTensor) extend through
# framework.api_dispatch; the subsystem that owns the type registers handlers.
from ..framework import api_dispatch as _api_dispatch  # noqa: E402
from . import array_ops as _array_ops, math_ops as _math_ops, nn_ops as _nn_ops  # noqa: E402

DISPATCHABLE = {
    _math_ops: (
        "add", "subtract", "multiply", "divide", "realdiv", "truediv", "floordiv", "floormod",
        "maximum", "minimum", "pow", "squared_difference", "less", "less_equal", "greater",
        "greater_equal", "equal", "not_equal", "logical_and", "logical_or", "logical_xor",
        "logical_not", "negative", "abs", "exp", "log", "sqrt", "tanh", "sigmoid", "square",
        "rsqrt", "erf", "floor", "ceil", "round", "sign", "reciprocal", "sin", "cos", "tan",
        "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "expm1", "log1p",
        "erfc", "cast", "reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod",
        "reduce_any", "reduce_all", "fill", "reshape"),
    _array_ops: ("concat", "stack", "gather", "zeros_like", "ones_like", "size", "rank",
                 "reverse", "tile", "shape", "zeros", "ones"),
    _nn_ops: ("relu", "embedding_lookup"),
}
for _module, _names in DISPATCHABLE.items():
    _api_dispatch.add_dispatch_support(_module, _names)
_math_ops.mod = _math_ops.floormod

# The op catalogue as pg.ops.list() / pg.ops.get("acme::Gelu", version=2),
# imported at first use: importing pluggable does not need it.
_CATALOG = {"get": "get", "list": "list_ops", "list_ops": "list_ops"}


def __getattr__(name: str):
    if name not in _CATALOG:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from ..framework import op_catalog
    value = globals()[name] = getattr(op_catalog, _CATALOG[name])
    return value


def __dir__() -> list:
    return sorted(set(globals()) | set(_CATALOG))
