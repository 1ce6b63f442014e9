"""Friendly wrappers over the built-in ops (``pg.math``, ``pg.matmul``, ...)
and the Python operators of Tensor."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..framework import config, dtypes, errors, registry
from ..framework.tensor import Tensor, to_array
from ..runtime import constants, dispatch, placement
from ..runtime.device import Device
from ..runtime.tensors import convert_to_tensor
from . import definitions, raw_ops
from .index_values import index_vector, shape_input
from .._core import code_and_message as _code_and_message, ffi, lib
from .._core import raw_status as _raw_status, thread_state as _tls
from ..runtime.hooks import active as _hooks_active

_CPU = placement.CPU
_PY_COMPLEX = complex   # (the module's own complex() makes complex tensors)
_STRING = dtypes.string
_scope_get = placement._scope.get
_reshaped = lib.pg_tensor_reshaped
_new = Tensor.__new__


def add(x: Any, y: Any) -> Tensor:
    """x + y with broadcasting (op AddV2; op Add, which joins them, for
    strings, as TensorFlow's)."""
    if getattr(x, "_dtype", None) is _STRING or getattr(y, "_dtype", None) is _STRING \
            or isinstance(x, (str, bytes)) or isinstance(y, (str, bytes)):
        return raw_ops.Add(x=x, y=y)
    return raw_ops.AddV2(x=x, y=y)


def subtract(x: Any, y: Any) -> Tensor:
    """x - y with broadcasting (op Sub)."""
    return raw_ops.Sub(x=x, y=y)


def multiply(x: Any, y: Any) -> Tensor:
    """x * y with broadcasting (op Mul)."""
    return raw_ops.Mul(x=x, y=y)


def realdiv(x: Any, y: Any) -> Tensor:
    """x / y in the inputs' type (op RealDiv; integers truncate)."""
    return raw_ops.RealDiv(x=x, y=y)


def divide(x: Any, y: Any) -> Tensor:
    """True division: integer inputs are converted to float64 first."""
    x, y = _pair(x, y)
    if x.dtype.is_integer:
        x, y = cast(x, dtypes.float64), cast(y, dtypes.float64)
    return raw_ops.RealDiv(x=x, y=y)


def maximum(x: Any, y: Any) -> Tensor:
    return raw_ops.Maximum(x=x, y=y)


def minimum(x: Any, y: Any) -> Tensor:
    return raw_ops.Minimum(x=x, y=y)


def negative(x: Any) -> Tensor:
    return raw_ops.Neg(x=x)


def abs(x: Any) -> Tensor:  # noqa: A001 - TensorFlow's name
    """|x| elementwise; the magnitude, of the real type (op ComplexAbs), for
    complex x."""
    if getattr(x, "_dtype", None) is not None and x._dtype.is_complex \
            or isinstance(x, _PY_COMPLEX):
        x = convert_to_tensor(x)
        return raw_ops.ComplexAbs(x=x, Tout=x.dtype.real_dtype)
    return raw_ops.Abs(x=x)


def real(input: Any, name: str | None = None) -> Tensor:  # noqa: A002 - TensorFlow's name
    """The real parts of complex `input` (op Real, of float32 for complex64,
    float64 for complex128); a real `input` is returned as it is."""
    x = convert_to_tensor(input)
    if x.dtype.is_complex:
        return raw_ops.Real(input=x, Tout=x.dtype.real_dtype)
    return x


def imag(input: Any, name: str | None = None) -> Tensor:  # noqa: A002
    """The imaginary parts of complex `input` (op Imag); zeros for a real one."""
    x = convert_to_tensor(input)
    if x.dtype.is_complex:
        return raw_ops.Imag(input=x, Tout=x.dtype.real_dtype)
    return raw_ops.ZerosLike(x=x)


def angle(input: Any, name: str | None = None) -> Tensor:  # noqa: A002
    """The argument of each complex element, in (-pi, pi] (op Angle); for a
    real `input`, pi where it is negative and 0 elsewhere."""
    x = convert_to_tensor(input)
    if x.dtype.is_complex:
        return raw_ops.Angle(input=x, Tout=x.dtype.real_dtype)
    if not x.dtype.is_floating:
        raise TypeError(f"angle needs a floating or complex tensor, got {x.dtype.name}")
    pi = convert_to_tensor(np.pi, x.dtype)
    zero = raw_ops.ZerosLike(x=x)
    return raw_ops.SelectV2(condition=raw_ops.Less(x=x, y=zero), t=pi, e=zero)


def conj(x: Any, name: str | None = None) -> Tensor:
    """The complex conjugate (op Conj); a real number tensor is returned as
    it is, as TensorFlow does."""
    x = convert_to_tensor(x)
    if x.dtype.is_complex:
        return raw_ops.Conj(input=x)
    if x.dtype.is_floating or x.dtype.is_integer:
        return x
    raise TypeError(f"Expected numeric or variant tensor, got dtype {x.dtype!r}")


def complex(real: Any, imag: Any, name: str | None = None) -> Tensor:  # noqa: A001
    """real + imag * 1j elementwise, with broadcasting (op Complex):
    complex64 from float32 parts, complex128 from float64 parts."""
    re, im = convert_to_tensor(real), convert_to_tensor(imag)
    if re.dtype != im.dtype or re.dtype not in (dtypes.float32, dtypes.float64):
        raise TypeError(f"real and imag must both be float32 or both float64, got "
                        f"{re.dtype.name} and {im.dtype.name}; cast them first")
    out = dtypes.complex64 if re.dtype == dtypes.float32 else dtypes.complex128
    return raw_ops.Complex(real=re, imag=im, Tout=out)


def exp(x: Any) -> Tensor:
    return raw_ops.Exp(x=x)


def log(x: Any) -> Tensor:
    return raw_ops.Log(x=x)


def sqrt(x: Any) -> Tensor:
    return raw_ops.Sqrt(x=x)


def tanh(x: Any) -> Tensor:
    return raw_ops.Tanh(x=x)


def sigmoid(x: Any) -> Tensor:
    return raw_ops.Sigmoid(x=x)


def _axes(x: Tensor, axis: Any) -> Any:
    iv = index_vector(tuple(range(x.ndim)) if axis is None else axis)
    if iv is not None:
        return iv
    return np.asarray(axis, dtype=np.int32).reshape(-1) if np.ndim(axis) else np.asarray(axis, np.int32)


def _reduce(op, x: Any, axis: Any, keepdims: bool) -> Tensor:
    x = convert_to_tensor(x)
    return op(input=x, reduction_indices=_axes(x, axis), keep_dims=keepdims)


def reduce_sum(input_tensor: Any, axis: Any = None, keepdims: bool = False) -> Tensor:
    """Sum over `axis` (all axes when None)."""
    return _reduce(raw_ops.Sum, input_tensor, axis, keepdims)


def reduce_mean(input_tensor: Any, axis: Any = None, keepdims: bool = False) -> Tensor:
    return _reduce(raw_ops.Mean, input_tensor, axis, keepdims)


def reduce_max(input_tensor: Any, axis: Any = None, keepdims: bool = False) -> Tensor:
    return _reduce(raw_ops.Max, input_tensor, axis, keepdims)


def reduce_min(input_tensor: Any, axis: Any = None, keepdims: bool = False) -> Tensor:
    return _reduce(raw_ops.Min, input_tensor, axis, keepdims)


def cast(x: Any, dtype: Any) -> Tensor:
    """Converts `x` to `dtype` (float -> int truncates toward zero)."""
    return raw_ops.Cast(x=x, DstT=dtypes.as_dtype(dtype))


def matmul(a: Any, b: Any, transpose_a: bool = False, transpose_b: bool = False,
           adjoint_a: bool = False, adjoint_b: bool = False) -> Tensor:
    """Matrix product (op MatMul for two matrices; BatchMatMulV2, with batch
    dimensions broadcast, when either has rank > 2)."""
    a, b = _pair(a, b)
    ta, tb = transpose_a or adjoint_a, transpose_b or adjoint_b
    if a.ndim > 2 or b.ndim > 2:
        if a.dtype.is_complex and transpose_a != adjoint_a and transpose_a:
            a = raw_ops.Conj(input=a)   # adj_x conjugates; a plain transpose does not
        if b.dtype.is_complex and transpose_b != adjoint_b and transpose_b:
            b = raw_ops.Conj(input=b)
        return raw_ops.BatchMatMulV2(x=a, y=b, adj_x=ta, adj_y=tb)
    if a.dtype.is_complex and adjoint_a:   # MatMul transposes without conjugating
        a = raw_ops.Conj(input=a)
    if b.dtype.is_complex and adjoint_b:
        b = raw_ops.Conj(input=b)
    return raw_ops.MatMul(a=a, b=b, transpose_a=ta, transpose_b=tb)


def transpose(a: Any, perm: Sequence[int] | None = None) -> Tensor:
    """Permutes the axes (reverses them when `perm` is None)."""
    a = convert_to_tensor(a)
    if perm is None:
        perm = tuple(range(a.ndim))[::-1]
    iv = index_vector(perm)
    return raw_ops.Transpose(x=a, perm=iv if iv is not None else np.asarray(perm, np.int32))


_views: dict = {}  # (shape, target as given) -> (new shape, its C dims)
VIEW_SHAPES_SIZE = 1024
"""Reshapes whose resolved shapes ``reshape`` remembers (emptied when full)."""


def reshape(tensor: Any, shape: Sequence[int]) -> Tensor:
    """Same elements, new shape (one dimension may be -1).

    A tensor on a plugin device reshaped by a list or tuple of ints becomes a
    view: a new tensor sharing its buffer (and the outcome of the op that
    produced it), made by the core without a kernel or any work on the
    device, as TensorFlow's Reshape kernel (registered for every device
    type) forwards its input. That needs no Reshape kernel on the device.
    Gradient tapes, tracing, the profiler, a device scope other than the
    tensor's own and the placement log see the ``Reshape`` op as before."""
    if type(tensor) is Tensor and not _hooks_active[0]:
        h = tensor._h
        if h is not None and type(shape) in (list, tuple) and tensor._dev is not _CPU \
                and not config._log_placement:
            scope = _scope_get()
            if scope is None or scope is tensor._dev:
                try:
                    v = _views.get((tensor._shape, tuple(shape)))
                except TypeError:  # an unhashable dimension: the op decides
                    v = False
                if v is None:
                    v = _view_shape(tensor._shape, shape)
                if v:
                    try:
                        st = _tls.status
                    except AttributeError:
                        st = _raw_status()
                    nh = _reshaped(h, v[1], len(v[0]), st)
                    if not nh:
                        code, msg = _code_and_message(st)
                        raise errors.make_error(code, f"Reshape on {tensor._dev.short_name}: "
                                                f"{msg}", op="Reshape", device=tensor._dev.name)
                    t = _new(Tensor)
                    t._h = nh
                    t._a = None
                    t._dev = tensor._dev
                    t._dtype = tensor._dtype
                    t._shape = v[0]
                    return t
    iv = index_vector(shape, None) if type(shape) in (list, tuple) else None
    if iv is not None:  # int32 where all fit
        return raw_ops.Reshape(tensor=tensor, shape=iv)
    dims = np.asarray(shape, np.int64)
    if np.all(np.abs(dims) <= np.iinfo(np.int32).max):
        dims = dims.astype(np.int32)   # else int64: never wrap a dimension
    return raw_ops.Reshape(tensor=tensor, shape=dims)


def _view_shape(shape: tuple, target: Sequence) -> tuple | bool:
    """The shape `reshape` gives a tensor of `shape` for `target` and its C
    dims, remembered; False (the op decides) unless every dimension is a
    Python int. An impossible shape raises the op's error."""
    if not all(type(d) is int for d in target):
        return False
    new = definitions.reshape_target(shape, np.asarray(target, np.int64))
    v = (new, ffi.new("int64_t[]", new or [0]))
    if len(_views) >= VIEW_SHAPES_SIZE:
        _views.clear()
    _views[(shape, tuple(target))] = v
    return v


def fill(dims: Sequence[int], value: Any, name: str | None = None) -> Tensor:
    """A tensor of shape `dims` filled with the scalar `value` (op Fill). A
    Python or numpy scalar value goes where the Fill kernel that placement
    picks takes it, as a cached tensor (``runtime.constants``): in host
    memory for a kernel that reads it there (the CUDA plugin's), else on
    the device. No host-to-device copy per call, and the call takes the
    raw_ops fast path."""
    if isinstance(value, (np.generic, np.ndarray)) and value.ndim == 0 \
            and value.dtype.kind in "biuf":
        # a numpy scalar: as the Python scalar of the same value, with its
        # dtype given (Python scalars are what the constant cache keys)
        return fill_scalar(dims, value.item(), dtypes.as_dtype(value.dtype))
    if type(value) in (int, float, bool):
        return fill_scalar(dims, value, dtypes.as_dtype(to_array(value).dtype))
    return raw_ops.Fill(dims=shape_input(dims), value=value)


def fill_scalar(dims: Sequence[int], value: Any, dt: dtypes.DType) -> Tensor:
    """``fill`` of the Python scalar `value` as `dt` (a bool, integer or
    float dtype whose numpy kind is one of "biuf")."""
    ins = fill_scalar_inputs(dims, value, dt)
    if ins is not None:
        return raw_ops.Fill(dims=ins[0], value=ins[1])
    return fill_general(dims, value, dt)


def fill_general(dims: Sequence[int], value: Any, dt: dtypes.DType) -> Tensor:
    """``fill_scalar`` where ``fill_scalar_inputs`` gives None: the general
    path (the CPU's kernel, or the usual error)."""
    return raw_ops.Fill(dims=shape_input(dims), value=value, T=dt)


def fill_scalar_inputs(dims: Sequence[int], value: Any, dt: dtypes.DType) -> tuple | None:
    """Fill's inputs for ``fill_scalar`` under the current scope: (the
    cached dims vector, the cached constant of `value`, whether that
    constant may be kept beyond this call), or None where the call takes
    the general path (the CPU, a value that does not convert)."""
    dev, on_host = _fill_target(dt)
    if dev is None:
        return None
    c = constants.host_constant(value, dt) if on_host else constants.lookup(value, dt, dev)
    if c is None:
        return None
    return shape_input(dims), c, on_host or not dev._c.capturing


_fill_targets: dict = {}


def _fill_target(dt: dtypes.DType) -> tuple:
    """Where Fill of `dt` runs under the current scope, as placement picks it
    for host inputs, and whether that kernel takes its value in host memory
    (the CUDA plugin's reads it by value): (plugin device, bool), or
    (None, False) for the CPU. Remembered per scope and settings version
    (which a new registration or device setting moves on)."""
    scope = placement.current()
    key = (scope, dt, config.version[0])
    target = _fill_targets.get(key)
    if target is None:
        target = (None, False)
        try:
            dev, k, _ = dispatch.choose_device(registry.OPS["Fill"], {"T": dt},
                                               [placement.CPU, placement.CPU], scope)
        except errors.PluggableError:
            dev = None  # the call's general path raises the error
        if isinstance(dev, Device):
            target = (dev, "value" in k.host_args)
        if len(_fill_targets) > 64:
            _fill_targets.clear()
        _fill_targets[key] = target
    return target


def identity(x: Any) -> Tensor:
    """`x` itself, or a copy of it on the device of the current scope."""
    return raw_ops.Identity(input=x)


def _pair(x: Any, y: Any) -> tuple[Tensor, Tensor]:
    if isinstance(x, Tensor) and not isinstance(y, Tensor):
        return x, convert_to_tensor(y, x.dtype)
    if isinstance(y, Tensor) and not isinstance(x, Tensor):
        return convert_to_tensor(x, y.dtype), y
    return convert_to_tensor(x), convert_to_tensor(y)


def _install_operators() -> None:
    # The commonest go to their op at once (a frame less per call).
    ops = {
        "__add__": lambda a, b: add(a, b),
        "__radd__": lambda a, b: add(b, a),
        "__sub__": lambda a, b: raw_ops.Sub(x=a, y=b),
        "__rsub__": lambda a, b: raw_ops.Sub(x=b, y=a),
        "__mul__": lambda a, b: raw_ops.Mul(x=a, y=b),
        "__rmul__": lambda a, b: raw_ops.Mul(x=b, y=a),
        "__truediv__": lambda a, b: divide(a, b), "__rtruediv__": lambda a, b: divide(b, a),
        "__matmul__": lambda a, b: matmul(a, b), "__rmatmul__": lambda a, b: matmul(b, a),
        "__neg__": lambda a: negative(a), "__abs__": lambda a: abs(a),
        "__pos__": lambda a: a,
    }
    for name, fn in ops.items():
        setattr(Tensor, name, fn)


_install_operators()


# ------------------------------------------------- comparisons and logic

def less(x: Any, y: Any, name: str | None = None) -> Tensor:
    """x < y elementwise, with broadcasting (op Less)."""
    x, y = _pair(x, y)
    return raw_ops.Less(x=x, y=y)


def less_equal(x: Any, y: Any, name: str | None = None) -> Tensor:
    """x <= y elementwise (op LessEqual)."""
    x, y = _pair(x, y)
    return raw_ops.LessEqual(x=x, y=y)


def greater(x: Any, y: Any, name: str | None = None) -> Tensor:
    """x > y elementwise (op Greater)."""
    x, y = _pair(x, y)
    return raw_ops.Greater(x=x, y=y)


def greater_equal(x: Any, y: Any, name: str | None = None) -> Tensor:
    """x >= y elementwise (op GreaterEqual)."""
    x, y = _pair(x, y)
    return raw_ops.GreaterEqual(x=x, y=y)


def equal(x: Any, y: Any, name: str | None = None) -> Tensor:
    """x == y elementwise; shapes must broadcast (op Equal)."""
    x, y = _pair(x, y)
    return raw_ops.Equal(x=x, y=y)


def not_equal(x: Any, y: Any, name: str | None = None) -> Tensor:
    """x != y elementwise; shapes must broadcast (op NotEqual)."""
    x, y = _pair(x, y)
    return raw_ops.NotEqual(x=x, y=y)


def logical_and(x: Any, y: Any, name: str | None = None) -> Tensor:
    """x AND y for bool tensors (op LogicalAnd)."""
    return raw_ops.LogicalAnd(x=x, y=y)


def logical_or(x: Any, y: Any, name: str | None = None) -> Tensor:
    """x OR y for bool tensors (op LogicalOr)."""
    return raw_ops.LogicalOr(x=x, y=y)


def logical_not(x: Any, name: str | None = None) -> Tensor:
    """NOT x for a bool tensor (op LogicalNot)."""
    return raw_ops.LogicalNot(x=x)


def logical_xor(x: Any, y: Any, name: str | None = None) -> Tensor:
    """x XOR y for bool tensors: (x OR y) AND NOT (x AND y)."""
    return logical_and(logical_or(x, y), logical_not(logical_and(x, y)))


# ------------------------------------------------------------ elementwise

def pow(x: Any, y: Any, name: str | None = None) -> Tensor:  # noqa: A001 - TensorFlow's name
    """x ** y elementwise (op Pow; a negative integer exponent is an error)."""
    x, y = _pair(x, y)
    return raw_ops.Pow(x=x, y=y)


def square(x: Any, name: str | None = None) -> Tensor:
    """x * x (op Square)."""
    return raw_ops.Square(x=x)


def rsqrt(x: Any, name: str | None = None) -> Tensor:
    """1 / sqrt(x) (op Rsqrt)."""
    return raw_ops.Rsqrt(x=x)


def erf(x: Any, name: str | None = None) -> Tensor:
    """The Gauss error function (op Erf)."""
    return raw_ops.Erf(x=x)


def floor(x: Any, name: str | None = None) -> Tensor:
    """The largest integer <= x, for floats (op Floor)."""
    return raw_ops.Floor(x=x)


def _unary_op(op_name: str, doc: str):
    def fn(x: Any, name: str | None = None) -> Tensor:
        return getattr(raw_ops, op_name)(x=x)
    fn.__doc__ = f"{doc} (op {op_name})."
    return fn


sin = _unary_op("Sin", "The sine of x, elementwise")
cos = _unary_op("Cos", "The cosine of x, elementwise")
tan = _unary_op("Tan", "The tangent of x, elementwise")
asin = _unary_op("Asin", "The inverse sine of x, in [-pi/2, pi/2]")
acos = _unary_op("Acos", "The inverse cosine of x, in [0, pi]")
atan = _unary_op("Atan", "The inverse tangent of x, in (-pi/2, pi/2)")
sinh = _unary_op("Sinh", "The hyperbolic sine of x")
cosh = _unary_op("Cosh", "The hyperbolic cosine of x")
asinh = _unary_op("Asinh", "The inverse hyperbolic sine of x")
acosh = _unary_op("Acosh", "The inverse hyperbolic cosine of x (x >= 1)")
atanh = _unary_op("Atanh", "The inverse hyperbolic tangent of x (|x| < 1)")
expm1 = _unary_op("Expm1", "exp(x) - 1, accurate near 0")
log1p = _unary_op("Log1p", "log(1 + x), accurate near 0")
erfc = _unary_op("Erfc", "The complementary error function 1 - erf(x)")
ceil = _unary_op("Ceil", "The smallest integer >= x, for floats")
for _f, _n in ((sin, "sin"), (cos, "cos"), (tan, "tan"), (asin, "asin"), (acos, "acos"),
               (atan, "atan"), (sinh, "sinh"), (cosh, "cosh"), (asinh, "asinh"),
               (acosh, "acosh"), (atanh, "atanh"), (expm1, "expm1"), (log1p, "log1p"),
               (erfc, "erfc"), (ceil, "ceil")):
    _f.__name__ = _f.__qualname__ = _n


def round(x: Any, name: str | None = None) -> Tensor:  # noqa: A001 - TensorFlow's name
    """x rounded to the nearest integer, halves to even (op Round); an
    integer tensor is returned as it is, as TensorFlow's tf.round does."""
    x = convert_to_tensor(x)
    if x.dtype.is_integer:
        return x
    return raw_ops.Round(x=x)


def sign(x: Any, name: str | None = None) -> Tensor:
    """-1, 0 or 1 by the sign of x (op Sign)."""
    return raw_ops.Sign(x=x)


def floordiv(x: Any, y: Any, name: str | None = None) -> Tensor:
    """floor(x / y) (op FloorDiv; integer division by zero is an error)."""
    x, y = _pair(x, y)
    return raw_ops.FloorDiv(x=x, y=y)


def floormod(x: Any, y: Any, name: str | None = None) -> Tensor:
    """x - floor(x / y) * y: the remainder with the sign of y (op FloorMod)."""
    x, y = _pair(x, y)
    return raw_ops.FloorMod(x=x, y=y)


mod = floormod


def truediv(x: Any, y: Any, name: str | None = None) -> Tensor:
    """True division (integers are converted to float64 first)."""
    return divide(x, y)


def reciprocal(x: Any, name: str | None = None) -> Tensor:
    """1 / x (op Reciprocal for floats; RealDiv, which truncates, for
    integers)."""
    x = convert_to_tensor(x)
    if x.dtype.is_floating or x.dtype.is_complex:
        return raw_ops.Reciprocal(x=x)
    return raw_ops.RealDiv(x=convert_to_tensor(1, x.dtype), y=x)


def squared_difference(x: Any, y: Any, name: str | None = None) -> Tensor:
    """(x - y) ** 2 elementwise."""
    return square(subtract(*_pair(x, y)))


# ------------------------------------------------ reductions, scans, ...

def reduce_prod(input_tensor: Any, axis: Any = None, keepdims: bool = False,
                name: str | None = None) -> Tensor:
    """Product over `axis` (all axes when None) (op Prod)."""
    return _reduce(raw_ops.Prod, input_tensor, axis, keepdims)


def reduce_any(input_tensor: Any, axis: Any = None, keepdims: bool = False,
               name: str | None = None) -> Tensor:
    """Logical OR over `axis` of a bool tensor (op Max over int32)."""
    x = cast(input_tensor, dtypes.int32)
    return cast(reduce_max(x, axis, keepdims), dtypes.bool_)


def reduce_all(input_tensor: Any, axis: Any = None, keepdims: bool = False,
               name: str | None = None) -> Tensor:
    """Logical AND over `axis` of a bool tensor (op Min over int32)."""
    x = cast(input_tensor, dtypes.int32)
    return cast(reduce_min(x, axis, keepdims), dtypes.bool_)


def _argreduce(op, input: Any, axis: Any, output_type: Any) -> Tensor:  # noqa: A002
    ax = 0 if axis is None else int(axis)
    return op(input=input, dimension=np.int32(ax), output_type=dtypes.as_dtype(output_type))


def argmax(input: Any, axis: Any = None, output_type: Any = dtypes.int64,  # noqa: A002
           name: str | None = None) -> Tensor:
    """Index of the largest value along `axis` (0 when None) (op ArgMax)."""
    return _argreduce(raw_ops.ArgMax, input, axis, output_type)


def argmin(input: Any, axis: Any = None, output_type: Any = dtypes.int64,  # noqa: A002
           name: str | None = None) -> Tensor:
    """Index of the smallest value along `axis` (0 when None) (op ArgMin)."""
    return _argreduce(raw_ops.ArgMin, input, axis, output_type)


def cumsum(x: Any, axis: int = 0, exclusive: bool = False, reverse: bool = False,
           name: str | None = None) -> Tensor:
    """Running sums along `axis` (op Cumsum)."""
    return raw_ops.Cumsum(x=x, axis=np.int32(axis), exclusive=exclusive, reverse=reverse)


class TopKV2(tuple):
    """(values, indices) of ``top_k``."""

    @property
    def values(self) -> Tensor:
        return self[0]

    @property
    def indices(self) -> Tensor:
        return self[1]


def top_k(input: Any, k: int = 1, sorted: bool = True,  # noqa: A002 - TensorFlow's names
          index_type: Any = dtypes.int32, name: str | None = None) -> TopKV2:
    """The `k` largest values along the last axis and their indices, largest
    first, equal values in index order (op TopKV2)."""
    v, i = raw_ops.TopKV2(input=input, k=np.int32(k), sorted=sorted,
                          index_type=dtypes.as_dtype(index_type))
    return TopKV2((v, i))


def add_n(inputs: Sequence[Any], name: str | None = None) -> Tensor:
    """The elementwise sum of tensors of one shape and dtype (op AddN)."""
    return raw_ops.AddN(inputs=list(inputs))


def unsorted_segment_sum(data: Any, segment_ids: Any, num_segments: int,
                         name: str | None = None) -> Tensor:
    """Sums of the slices of `data` with each segment id (negative ids are
    dropped, ids >= num_segments are an error) (op UnsortedSegmentSum)."""
    return raw_ops.UnsortedSegmentSum(data=data, segment_ids=segment_ids,
                                      num_segments=np.int32(num_segments))
