"""``pg.Variable``: TensorFlow's resource variable.

A variable is created on the device of the current ``pg.device`` scope (else
the device of a Tensor initial value, else the first plugin device, as
automatic placement does for ops; CPU when there is none) and stays there.
Its value lives in the core and is read and changed only through ops
(``ReadVariableOp``, ``AssignVariableOp``, ``AssignAddVariableOp``, ...),
which run on the variable's device; so gradient tapes, graph tracing and the
profiler see every access. A variable can be given to any op where a tensor
is expected: it stands for its current value.
"""
from __future__ import annotations

import contextlib
import contextvars
import itertools
import weakref
from typing import Any, Callable

import numpy as np

from .._core import code_and_message, ffi, lib, status
from ..framework import dtype_policy, dtypes, errors, name_scope
from ..framework.tensor import Tensor, value_text
from ..framework.tensor_shape import TensorShape
from ..runtime import dispatch, hooks, placement
from ..runtime.device import Device
from ..runtime.tensors import convert_to_tensor
from . import raw_ops
from .resource_ops import handle_tensor

_owners: "weakref.WeakValueDictionary[int, Variable]" = weakref.WeakValueDictionary()
_uid = itertools.count(1)
# The scope a variable is made in: the graph layer sets its init_scope here,
# so that a variable made while a function is traced is made eagerly, once,
# as in TensorFlow.
creation_scope: list[Callable] = [contextlib.nullcontext]
# What ``pg.Variable(...)`` makes while set: ``creator(*args, **kwargs)``
# instead of a plain Variable (``MirroredStrategy.scope()`` sets one).
variable_creator: contextvars.ContextVar = contextvars.ContextVar(
    "pluggable_variable_creator", default=None)


# The trace of a pg.function in progress, as [variables made, may make]:
# TensorFlow's rule that only a function's first trace makes variables.
trace_creation: contextvars.ContextVar = contextvars.ContextVar(
    "pluggable_trace_creation", default=None)

SINGLETON_VARIABLES = (
    "tf.function only supports singleton tf.Variables created on the first call. Make sure "
    "the tf.Variable is only created once or created outside tf.function (in pluggable: "
    "make it before calling the pg.function, or only when an attribute that holds it is "
    "still None)")


def owner_of(handle: Any) -> "Variable | None":
    """The live Variable whose resource handle is the tensor `handle`."""
    v = _owners.get(id(handle))
    return v if v is not None and v._handle is handle else None


def _creation_device(initial: Any):
    dev = placement.current()
    if dev is not None:
        return dev
    if isinstance(initial, Tensor) and isinstance(initial._dev, Device):
        return initial._dev
    plugin = placement.plugin_devices()
    return plugin[0] if plugin else placement.CPU


def _unpickle(value: np.ndarray, trainable: bool, full_name: str,
              cast_dtype: str | None = None) -> "Variable":
    """A pickled variable (Variable.__reduce__) as a new variable."""
    v = Variable.__new__(Variable)
    v._init(value, trainable, full_name,
            cast_dtype=None if cast_dtype is None else dtypes.as_dtype(cast_dtype))
    return v


class Variable:
    """A mutable tensor on one device (TensorFlow's ``tf.Variable``)::

        with pg.device("MY_DEVICE:0"):
            w = pg.Variable(np.zeros((3, 2), np.float32), name="w")
        w.assign_add(np.ones((3, 2), np.float32))
        y = pg.matmul(x, w)          # a variable stands for its value

    `initial_value` may be a callable returning it. `dtype` converts Python
    values (a Tensor must already have it). `trainable` variables are
    watched automatically by ``pg.GradientTape`` when they are read.

    While a mixed precision policy is global
    (``pg.mixed_precision.set_global_policy("mixed_bfloat16")``), a
    floating variable is an autocast variable: stored in the policy's
    variable dtype (float32 unless `dtype` says otherwise), read as the
    compute dtype (see ``pluggable.framework.dtype_policy``)."""

    def __new__(cls, *args: Any, **kwargs: Any):
        # (no arguments: a copy or an unpickled variable, made field by field)
        creator = variable_creator.get() if cls is Variable and (args or kwargs) else None
        if creator is not None:
            return creator(*args, **kwargs)
        return super().__new__(cls)

    def __init__(self, initial_value: Any, trainable: bool = True, name: str | None = None,
                 dtype: Any = None):
        if isinstance(initial_value, Tensor) and type(initial_value) is not Tensor:
            self._create(initial_value, trainable, name, dtype)  # a traced value: in the graph
            return
        watch = trace_creation.get()
        if watch is not None:
            if not watch[1]:
                raise ValueError(SINGLETON_VARIABLES)
            watch[0] += 1
        with creation_scope[0]():  # made eagerly, once, even while a function is traced
            self._create(initial_value, trainable, name, dtype)

    def _create(self, initial_value: Any, trainable: bool, name: str | None,
                dtype: Any) -> None:
        if callable(initial_value):
            initial_value = initial_value()
        if isinstance(initial_value, Variable):
            initial_value = initial_value._stored_value()
        self._init(initial_value, trainable, name_scope.prefixed(name or "Variable"), dtype,
                   policy=True)

    def _init(self, initial_value: Any, trainable: bool, full_name: str,
              dtype: Any = None, dev: Any = None, cast_dtype: Any = None,
              policy: bool = False) -> None:
        dev = dev if dev is not None else _creation_device(initial_value)
        value = convert_to_tensor(initial_value, dtype)
        if value.dtype is dtypes.resource:
            raise TypeError("a Variable cannot hold a resource handle")
        if policy:  # the global policy decides whether it autocasts
            store, cast_dtype = dtype_policy.new_variable_cast(value.dtype, dtype is not None)
            if store is not None and store is not value.dtype:
                with placement.device(dev):
                    value = raw_ops.Cast(x=value, DstT=store)
        st = status()
        h = lib.pg_variable_new(dev._c if isinstance(dev, Device) else ffi.NULL,
                                value.dtype.enum, st)
        code, msg = code_and_message(st)
        if code:
            raise errors.make_error(code, f"creating a variable on {dev.short_name}: {msg}")
        self._handle = handle_tensor(h, dev)
        self._dtype = value.dtype
        self._shape = tuple(value.shape)
        self._trainable = bool(trainable)
        self._name = full_name
        self._unique_id = next(_uid)
        self._reader: dispatch.Prepared | None = None
        self._cast_dtype: dtypes.DType | None = cast_dtype  # an autocast variable's
        self._caster: dispatch.Prepared | None = None
        _owners[id(self._handle)] = self
        raw_ops.AssignVariableOp(resource=self._handle, value=value)

    # ------------------------------------------------------------ properties
    @property
    def handle(self) -> Tensor:
        """The resource handle (a host scalar of dtype resource)."""
        return self._handle

    @property
    def dtype(self) -> dtypes.DType:
        """The dtype the value is stored in; for an autocast variable too, as
        TensorFlow's ``AutoCastVariable.dtype`` (its reads give the mixed
        precision policy's compute dtype)."""
        return self._dtype

    @property
    def true_dtype(self) -> dtypes.DType:
        """The stored dtype (TensorFlow's deprecated alias of ``dtype``)."""
        return self._dtype

    @property
    def shape(self) -> TensorShape:
        return TensorShape(self._shape)

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def name(self) -> str:
        """The name given at creation with TensorFlow's ":0" suffix."""
        return f"{self._name}:0"

    @property
    def trainable(self) -> bool:
        return self._trainable

    @property
    def device(self) -> str:
        """Full name of the variable's device."""
        return self._handle._dev.name

    @property
    def device_object(self):
        return self._handle._dev

    # ------------------------------------------------------- copies, pickles
    # As TensorFlow's: copy.copy is the variable itself (one variable, one
    # state); copy.deepcopy is a new variable of the same name, trainability
    # and device holding a copy of the current value; a pickle holds the
    # value and unpickles as a new variable on the default device.
    def __copy__(self) -> "Variable":
        return self

    def __deepcopy__(self, memo) -> "Variable":
        v = Variable.__new__(Variable)
        memo[id(self)] = v
        v._init(self._stored_value(), self._trainable, self._name, dev=self._handle._dev,
                cast_dtype=self._cast_dtype)
        return v

    def __reduce__(self):
        cast = None if self._cast_dtype is None else self._cast_dtype.name
        return _unpickle, (np.array(self.numpy()), self._trainable, self._name, cast)

    # --------------------------------------------------------------- reading
    def value(self) -> Tensor:
        """The current value as a Tensor on the variable's device (op
        ReadVariableOp; it shares the buffer until the variable changes).
        Eagerly, the read is prepared once (``dispatch.Prepared``), so a
        repeated read costs one kernel call (a tape still records it).
        An autocast variable's value is then cast to its compute dtype (op
        Cast on the variable's device; ``pg.mixed_precision.autocast``)."""
        t = self._stored_value()
        if self._cast_dtype is None:
            return t
        to = dtype_policy.read_dtype(self._cast_dtype)
        if to is None or to is self._dtype:
            return t
        if not hooks.fast[0]:  # traced or profiled: placed as the read is
            with placement.device(self._handle._dev):
                return raw_ops.Cast(x=t, DstT=to)
        c = self._caster
        if c is None or c.given["DstT"] is not to:
            c = self._caster = dispatch.Prepared("Cast", self._handle._dev,
                                                 {"SrcT": self._dtype, "DstT": to,
                                                  "Truncate": False})
        return c([t])[0]

    def _stored_value(self) -> Tensor:
        """The value as stored (an autocast variable's too, uncast)."""
        if not hooks.fast[0]:  # traced or profiled: the call as any op's
            return raw_ops.ReadVariableOp(resource=self._handle, dtype=self._dtype)
        r = self._reader
        if r is None:
            r = self._reader = dispatch.Prepared("ReadVariableOp", self._handle._dev,
                                                 {"dtype": self._dtype})
        return r([self._handle])[0]

    read_value = value

    def numpy(self) -> Any:
        """The stored value as numpy's (an autocast variable's in its stored
        dtype; a numpy scalar for a 0-d variable, as in TensorFlow)."""
        return self._stored_value().numpy()

    def __pg_tensor__(self, dtype: Any = None) -> Tensor:
        """The tensor this variable stands for where an op expects one (of
        `dtype` when the op says so). An autocast variable read as another
        floating dtype than the one asked for raises InvalidArgumentError
        (TensorFlow's ValueError for AutoCastVariable)."""
        t = self.value()
        if dtype is not None and self._cast_dtype is not None and t.dtype is not dtype \
                and dtypes.as_dtype(dtype).is_floating:
            raise errors.InvalidArgumentError(
                f"Incompatible type conversion requested to type {dtypes.as_dtype(dtype).name!r} "
                f"for autocast variable {self.name!r}, which is read as {t.dtype.name!r} "
                f"(stored {self._dtype.name}, mixed precision policy): cast the other inputs "
                f"to {t.dtype.name} (pg.cast), or read the stored value inside "
                "pg.mixed_precision.autocast(None)")
        return t

    def __array__(self, dtype=None, copy=None):
        a = self._stored_value()._numpy()  # as numpy() reads it
        return a if dtype is None else a.astype(dtype)

    # ------------------------------------------------------------- assigning
    def _checked(self, value: Any, op: str) -> Any:
        """`value` as something AssignVariableOp & co. accept, after checking
        its dtype and shape against the variable's (nothing runs otherwise)."""
        if isinstance(value, Variable):
            value = value._stored_value()
        if isinstance(value, Tensor):
            if value.dtype is not self._dtype:
                raise errors.InvalidArgumentError(
                    f"{op}: cannot assign a {value.dtype.name} tensor to variable "
                    f"{self.name!r} of dtype {self._dtype.name}; cast it first "
                    "(pg.cast)", op=op)
        else:
            value = convert_to_tensor(value, self._dtype)
        if tuple(value.shape) != self._shape:
            if op == "AssignVariableOp":  # TensorFlow's check in assign, and its words
                raise ValueError(
                    f"Cannot assign value to variable ' {self.name}': Shape mismatch.The "
                    f"variable shape {TensorShape(self._shape)}, and the assigned value shape "
                    f"{TensorShape(tuple(value.shape))} are incompatible.")
            raise errors.InvalidArgumentError(
                f"{op}: cannot assign a value of shape {list(value.shape)} to variable "
                f"{self.name!r} of shape {list(self._shape)} (shapes must be equal)",
                op=op)
        return value

    def assign(self, value: Any, use_locking: Any = None, name: str | None = None,
               read_value: bool = True) -> "Variable | None":
        """Sets the value (op AssignVariableOp). `value` must have the
        variable's shape (else ValueError, as in TensorFlow) and dtype (Python
        values are converted). Returns TensorFlow's UnreadVariable of it when
        `read_value`, else None."""
        value = self._checked(value, "AssignVariableOp")
        raw_ops.AssignVariableOp(resource=self._handle, value=value, validate_shape=True)
        return _UnreadVariable(self) if read_value else None

    def assign_add(self, delta: Any, use_locking: Any = None, name: str | None = None,
                   read_value: bool = True) -> "Variable | None":
        """Adds `delta` in place (op AssignAddVariableOp)."""
        delta = self._checked(delta, "AssignAddVariableOp")
        raw_ops.AssignAddVariableOp(resource=self._handle, value=delta)
        return _UnreadVariable(self) if read_value else None

    def assign_sub(self, delta: Any, use_locking: Any = None, name: str | None = None,
                   read_value: bool = True) -> "Variable | None":
        """Subtracts `delta` in place (op AssignSubVariableOp)."""
        delta = self._checked(delta, "AssignSubVariableOp")
        raw_ops.AssignSubVariableOp(resource=self._handle, value=delta)
        return _UnreadVariable(self) if read_value else None

    # ------------------------------------------------------------------ misc
    def __repr__(self) -> str:
        """TensorFlow's text: ``<tf.Variable 'v:0' shape=(2,) dtype=float32,
        numpy=array([1., 2.], dtype=float32)>`` (no value while traced)."""
        head = (f"<tf.Variable '{self.name}' shape={TensorShape(self._shape)} "
                f"dtype={self._dtype.name}")
        cast = "" if self._cast_dtype is None else f" dtype_to_cast_to={self._cast_dtype.name}"
        try:
            value = self._stored_value()
            if type(value) is not Tensor:  # traced: a symbolic value has none to show
                return head + cast + ">"
            text = value_text(value._numpy(), True)
        except errors.PluggableError:
            text = "<unavailable>"
        return f"{head}{cast}, numpy={text}>"

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d variable")
        return self._shape[0]

    def __eq__(self, other: Any):
        if type(self.value()).__eq__ is object.__eq__:
            return self is other
        return self.value() == other

    def __ne__(self, other: Any):
        if type(self.value()).__ne__ is object.__ne__:
            return self is not other
        return self.value() != other

    def __hash__(self) -> int:
        if Tensor.__hash__ is None:
            raise TypeError("Variable is unhashable (like Tensor); key by id(variable)")
        return object.__hash__(self)


class _UnreadVariable(Variable):
    """What ``assign`` and its kin return, as TensorFlow's: the same variable
    (its state is the variable's own, so a later assign through it changes
    the variable) under the name "UnreadVariable", its value read when used."""

    def __init__(self, variable: Variable):  # noqa: super().__init__ would make a new one
        self.__dict__ = variable.__dict__

    @property
    def name(self) -> str:
        return "UnreadVariable"


def _forward(name: str) -> Callable:
    def method(self, *args):
        return getattr(self.value(), name)(*args)
    method.__name__ = name
    return method


# Operators act on the value, through the Tensor's own operators (whatever
# the ops layer has installed on Tensor when they are called).
for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
              "__truediv__", "__rtruediv__", "__floordiv__", "__rfloordiv__", "__mod__",
              "__rmod__", "__pow__", "__rpow__", "__matmul__", "__rmatmul__", "__neg__",
              "__pos__", "__abs__", "__invert__", "__and__", "__rand__", "__or__", "__ror__",
              "__xor__", "__rxor__", "__lt__", "__le__", "__gt__", "__ge__", "__getitem__",
              "__iter__", "__bool__", "__float__", "__int__", "__index__"):
    setattr(Variable, _name, _forward(_name))
del _name

dispatch.STAND_INS.add(Variable)  # raw_ops read a Variable input, then take the fast path
