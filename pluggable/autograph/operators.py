"""The run-time half of AutoGraph: what converted code calls (``ag__.*``).

Each operator decides when it runs: on Python values (and eager tensors)
it is plain Python control flow; on a symbolic tensor of a function being
traced it builds ``pg.cond`` / ``pg.while_loop``. The statement's
variables go in and out through the ``get_state`` / ``set_state`` pair the
converter writes next to it.
"""
from __future__ import annotations

import builtins
from typing import Any, Callable, Sequence

import numpy as np

from ..framework import dtypes, errors
from ..framework.tensor import Tensor
from ..graph import control_flow, tensor_array, tracing
from ..graph.ir import Graph
from ..graph.tracing import SymbolicTensor
from ..graph import nest, py_function
from ..ops import array_ops, logging_ops, math_ops


class AutoGraphTypeError(errors.InvalidArgumentError, TypeError):
    """A variable changes dtype across a branch or an iteration on a tensor
    condition (TensorFlow raises TypeError there)."""


class UndefinedVariableError(errors.InvalidArgumentError, UnboundLocalError):
    """A variable was read where it is not defined."""


# ------------------------------------------------------------ undefined values

class Undefined:
    """The value of a variable that a converted statement may assign but
    that is not defined yet. Using it raises ``UndefinedVariableError``."""

    __slots__ = ("symbol_name",)

    def __init__(self, symbol_name: str):
        object.__setattr__(self, "symbol_name", symbol_name)

    def _fail(self, *args: Any, **kwargs: Any) -> Any:
        raise UndefinedVariableError(f"'{self.symbol_name}' is used before assignment")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        self._fail()

    def __repr__(self) -> str:
        return f"Undefined({self.symbol_name!r})"


for _m in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or",
           "xor", "lshift", "rshift"):
    setattr(Undefined, f"__{_m}__", Undefined._fail)
    setattr(Undefined, f"__r{_m}__", Undefined._fail)
for _m in ("neg", "pos", "abs", "invert", "bool", "iter", "len", "getitem", "call", "lt", "le",
           "gt", "ge", "float", "int", "index", "array"):
    setattr(Undefined, f"__{_m}__", Undefined._fail)


class UndefinedReturnValue:
    """``retval_`` before a ``return`` ran: the function returns None."""

    def __repr__(self) -> str:
        return "UndefinedReturnValue()"


def retval(value: Any) -> Any:
    return None if isinstance(value, UndefinedReturnValue) else value


def _is_undefined(v: Any) -> bool:
    return isinstance(v, (Undefined, UndefinedReturnValue))


# --------------------------------------------------------------- conditions

def _symbolic(x: Any) -> Any:
    """`x` as a symbolic tensor when it is one (a variable read inside a
    trace included), else None."""
    if isinstance(x, SymbolicTensor):
        return x
    if tracing.current_graph() is not None and getattr(x, "__pg_tensor__", None) is not None:
        t = x.__pg_tensor__()
        return t if isinstance(t, SymbolicTensor) else None
    return None


def not_(x: Any) -> Any:
    t = _symbolic(x)
    return math_ops.logical_not(t) if t is not None else not x


def and_(*fns: Callable[[], Any]) -> Any:
    """``a and b and ...`` with each operand a thunk: tensors give
    ``logical_and``, Python values short-circuit as in Python."""
    value = fns[0]()
    for fn in fns[1:]:
        t = _symbolic(value)
        if t is None:
            if not value:
                return value
            value = fn()
        else:
            value = math_ops.logical_and(t, fn())
    return value


def or_(*fns: Callable[[], Any]) -> Any:
    value = fns[0]()
    for fn in fns[1:]:
        t = _symbolic(value)
        if t is None:
            if value:
                return value
            value = fn()
        else:
            value = math_ops.logical_or(t, fn())
    return value


def if_exp(cond: Any, true_fn: Callable[[], Any], false_fn: Callable[[], Any]) -> Any:
    t = _symbolic(cond)
    if t is None:
        return true_fn() if cond else false_fn()
    return control_flow.cond(t, true_fn, false_fn)


# ------------------------------------------------------------------------ if

def _carries(v: Any) -> bool:
    """Whether a branch or loop on a tensor carries `v` as a graph value."""
    return isinstance(v, (Tensor, bool, int, float, np.ndarray, np.generic)) or \
        getattr(v, "__pg_tensor__", None) is not None


def _dtype(v: Any) -> dtypes.DType:
    if isinstance(v, Tensor):
        return v.dtype
    as_tensor = getattr(v, "__pg_tensor__", None)
    if as_tensor is not None:
        return as_tensor().dtype
    if isinstance(v, bool):
        return dtypes.bool_
    if isinstance(v, int):
        return dtypes.int32
    if isinstance(v, float):
        return dtypes.float32
    return dtypes.as_dtype(np.asarray(v).dtype)


def _kind(v: Any) -> str:
    return type(v).__name__


def if_stmt(cond: Any, body: Callable[[], None], orelse: Callable[[], None],
            get_state: Callable[[], tuple], set_state: Callable[[tuple], None],
            names: Sequence[str], lineno: int) -> None:
    """``if cond: body() else: orelse()``; a symbolic `cond` traces both
    branches into one ``pg.cond`` whose outputs are the variables `names`."""
    t = _symbolic(cond)
    if t is None:
        if cond:
            body()
        else:
            orelse()
        return
    init = list(get_state())
    plan: list = []    # per variable: "out", "same" (a Python value) or "undefined"
    then_values: list = []

    def then_branch():
        set_state(tuple(init))
        body()
        values = list(get_state())
        then_values[:] = values
        for v in values:
            plan.append("undefined" if _is_undefined(v) else "out" if _carries(v) else "same")
        return [v for v, p in zip(values, plan) if p == "out"]

    def else_branch():
        set_state(tuple(init))
        orelse()
        values = list(get_state())
        for name, p, a, b in zip(names, plan, then_values, values):
            _check_branch_pair(name, p, a, b, lineno)
        return [v for v, p in zip(values, plan) if p == "out"]

    outs = control_flow.cond(t, then_branch, else_branch)
    it = iter(outs if isinstance(outs, (list, tuple)) else [outs])
    set_state(tuple(next(it) if p == "out" else v for p, v in zip(plan, then_values)))


def _check_branch_pair(name: str, plan: str, a: Any, b: Any, lineno: int) -> None:
    where = f" (the if statement at line {lineno})"
    if plan == "undefined" or _is_undefined(b):
        if plan == "undefined" and _is_undefined(b):
            return
        missing = "main" if plan == "undefined" else "else"
        if name == "retval_":
            raise errors.InvalidArgumentError(
                f"the {missing} branch must also have a return statement{where}: when one "
                "branch of a condition on a tensor returns a value, every branch must")
        raise errors.InvalidArgumentError(
            f"'{name}' must also be initialized in the {missing} branch{where}: a variable "
            "that a condition on a tensor sets and that is used after it needs a value in "
            "both branches")
    if plan == "same":
        if a is not b:
            raise errors.InvalidArgumentError(
                f"'{name}' is a {_kind(a)} in the main branch and a {_kind(b)} in the else "
                f"branch{where}: a condition on a tensor can only change tensors and Python "
                "numbers; compute the value outside the condition")
        return
    if not _carries(b):
        raise errors.InvalidArgumentError(
            f"'{name}' is a {_kind(a)} in the main branch but a {_kind(b)} in the else "
            f"branch{where}: both branches must give it a tensor (or a Python number)")
    if _dtype(a) is not _dtype(b):
        raise AutoGraphTypeError(
            f"'{name}' has dtype {_dtype(a).name} in the main branch, but dtype "
            f"{_dtype(b).name} in the else branch{where}; cast one of them (pg.cast)")


# --------------------------------------------------------------------- loops

def while_stmt(test: Callable[[], Any], body: Callable[[], None],
               get_state: Callable[[], tuple], set_state: Callable[[tuple], None],
               names: Sequence[str], lineno: int) -> None:
    """``while test(): body()``; a symbolic test makes one ``pg.while_loop``
    carrying the variables `names`."""
    while True:
        c = test()
        t = _symbolic(c)
        if t is not None:
            _tensor_loop(lambda: test(), lambda: body(), get_state, set_state, names, lineno,
                         "while")
            return
        if not c:
            return
        body()


def for_stmt(iterable: Any, extra_test: Callable[[], Any] | None,
             body: Callable[[Any], None], get_state: Callable[[], tuple],
             set_state: Callable[[tuple], None], names: Sequence[str], lineno: int) -> None:
    """``for x in iterable: body(x)`` while `extra_test()` (break / return
    flags) holds. A symbolic tensor is iterated along its first axis in one
    ``pg.while_loop``; anything else is a Python loop."""
    t = _symbolic(iterable)
    if t is not None:
        _tensor_for(t, extra_test, body, get_state, set_state, names, lineno)
        return
    if _dataset_loop(iterable):
        _dataset_for(iterable, extra_test, body, get_state, set_state, names, lineno)
        return
    for x in iterable:
        if extra_test is not None:
            ok = extra_test()
            if _symbolic(ok) is not None:
                raise errors.UnimplementedError(
                    f"the for loop at line {lineno} iterates a Python value "
                    f"({type(iterable).__name__}) but a break or return in it depends on a "
                    "tensor; iterate a tensor instead (pg.range(n) for range(n)) so the loop "
                    "becomes a graph loop")
            if not ok:
                break
        body(x)


def _tensor_for(t: SymbolicTensor, extra_test: Callable | None, body: Callable,
                get_state: Callable, set_state: Callable, names: Sequence[str],
                lineno: int) -> None:
    if t.shape is not None and len(t.shape) == 0:
        raise errors.InvalidArgumentError(
            f"the for loop at line {lineno} iterates a scalar tensor; iterate a tensor of "
            "rank 1 or more (pg.range(n) for n steps)")
    n = array_ops.shape(t)[0]
    index = [None]

    def test():
        ok = math_ops.less(index[0], n)
        return ok if extra_test is None else and_(lambda: ok, extra_test)

    def step():
        element = array_ops.gather(t, index[0])
        if t.shape is not None or t.node.op == "Range":
            py_function.set_static_shape(element, t.shape[1:] if t.shape is not None else ())
        body(element)
        index[0] = math_ops.add(index[0], 1)

    _tensor_loop(test, step, get_state, set_state, names, lineno, "for", index)


_UNROLL_LIMIT = 1024   # the most elements a dataset's loop unrolls (pluggable.data)


def _dataset_loop(x: Any) -> bool:
    """Whether `x` is a dataset whose loop in a trace must be a graph loop:
    one of unknown, infinite or large size (smaller ones unroll)."""
    if tracing.current_graph() is None or not hasattr(x, "_unrolled"):
        return False
    n = getattr(x, "_cardinality", None)
    return isinstance(n, int) and (n < 0 or n > _UNROLL_LIMIT)


def _dataset_for(ds: Any, extra_test: Callable | None, body: Callable,
                 get_state: Callable, set_state: Callable, names: Sequence[str],
                 lineno: int) -> None:
    """``for x in dataset`` as one graph loop: a node opens a fresh iterator
    at each run of the function, the loop's condition asks it for the next
    element and the body takes that element."""
    if ds._cardinality == -1 and extra_test is None:   # infinite, and no break
        ds._unrolled()   # raises: such a loop never ends
    spec = ds.element_spec
    specs = nest.flatten(spec) if nest.is_nested(spec) else [spec]
    state: dict = {}

    def open_iterator() -> list:
        state["it"], state["next"] = iter(ds), None
        return [np.int32(0)]

    def peek(token: Any) -> list:
        try:
            element = next(state["it"])
        except StopIteration:
            state["next"] = None
            return [np.bool_(False)]
        state["next"] = nest.flatten(element) if nest.is_nested(spec) else [element]
        return [np.bool_(True)]

    def take(token: Any) -> list:
        return state["next"]

    token = py_function.call_node(py_function.register(open_iterator), [], [dtypes.int32])[0]
    index = [token]

    def test():
        more = py_function.call_node(py_function.register(peek), [index[0]], [dtypes.bool_])[0]
        py_function.set_static_shape(more, ())
        return more if extra_test is None else and_(lambda: extra_test(), lambda: more)

    def step():
        outs = py_function.call_node(py_function.register(take), [index[0]],
                                     [s.dtype for s in specs])
        for o, sp in zip(outs, specs):
            py_function.set_static_shape(o, sp.shape)
        body(nest.pack_as(spec, list(outs)) if nest.is_nested(spec) else outs[0])

    # The elements' shapes may be unknown: what they feed may change shape.
    _tensor_loop(test, step, get_state, set_state, names, lineno, "for", index, start=token,
                 relax=True)


def _tensor_loop(test: Callable[[], Any], body: Callable[[], None], get_state: Callable,
                 set_state: Callable, names: Sequence[str], lineno: int, kind: str,
                 index: list | None = None, start: Any = None, relax: bool = False) -> None:
    """One ``pg.while_loop`` for a converted loop. `index` (a one-item list)
    is an extra value the loop carries: the position of a for loop over a
    tensor (from 0), or what `start` gives. `relax` lets the carried
    tensors change shape (a dataset's elements of unknown shape)."""
    if "do_return" in names:
        raise errors.UnimplementedError(
            f"a return statement cannot be placed inside the {kind} loop at line {lineno}, "
            "which is a graph loop (its condition is a tensor): set a variable and return "
            "it after the loop")
    init = list(get_state())
    if index is not None:
        index[0] = np.int32(0) if start is None else start
    if any(isinstance(v, Undefined) for v in init):
        init = _define_undefined(body, set_state, get_state, init, names, lineno, kind, index)
    plan = ["out" if _carries(v) or isinstance(v, tensor_array.TensorArray) else
            "undefined" if _is_undefined(v) else "same" for v in init]
    carried = [v for v, p in zip(init, plan) if p == "out"]
    first = [_carried_spec(v) for v in carried]
    relax = relax and not any(isinstance(v, tensor_array.TensorArray) for v in carried)
    if relax:
        first = [(kind_, dtype, None) for kind_, dtype, _ in first]

    def unpack(values: Sequence) -> None:
        it = iter(values)
        if index is not None:
            index[0] = next(it)
        set_state(tuple(next(it) if p == "out" else v for p, v in zip(plan, init)))

    def cond_fn(*values):
        unpack(values)
        c = test()
        return c

    def body_fn(*values):
        unpack(values)
        body()
        after = list(get_state())
        out = []
        for name, p, before, v, spec in zip(names, plan, init, after, _specs_for(plan, first)):
            if p == "out":
                _check_iteration(name, spec, v, lineno, kind)
                out.append(v)
            elif p == "same" and v is not before:
                raise errors.InvalidArgumentError(
                    f"'{name}' is a {_kind(before)} that the {kind} loop at line {lineno} "
                    f"changes, but a loop on a tensor condition can only carry tensors and "
                    "Python numbers; use a tensor (or pg.TensorArray for a growing list)")
        return ([index[0]] if index is not None else []) + out

    start = ([index[0]] if index is not None else []) + carried
    if not start:
        control_flow.while_loop(lambda _: test(), lambda z: (body(), z)[1], [np.int32(0)])
        return
    invariants = None
    if relax:
        invariants = [()] * (index is not None) + [None] * len(carried)
    outs = control_flow.while_loop(cond_fn, body_fn, start, invariants)
    unpack(outs if isinstance(outs, (list, tuple)) else [outs])


def _specs_for(plan: list, first: list) -> list:
    it = iter(first)
    return [next(it) if p == "out" else None for p in plan]


def _carried_spec(v: Any) -> tuple:
    if isinstance(v, tensor_array.TensorArray):
        return ("array", None, None)
    if isinstance(v, Tensor):
        return ("tensor", v.dtype, v.shape)
    return ("tensor", _dtype(v), ())


def _check_iteration(name: str, spec: tuple, v: Any, lineno: int, kind: str) -> None:
    if spec[0] == "array":
        return
    if _is_undefined(v) or not _carries(v):
        raise errors.InvalidArgumentError(
            f"'{name}' is a {_kind(v)} after one iteration of the {kind} loop at line "
            f"{lineno}; a loop on a tensor condition carries it as a tensor")
    dtype = _dtype(v)
    if dtype is not spec[1]:
        raise AutoGraphTypeError(
            f"'{name}' has dtype {spec[1].name} before the {kind} loop at line {lineno}, but "
            f"dtype {dtype.name} after one iteration; cast it (pg.cast) so it keeps one dtype")
    shape = tuple(v.shape) if isinstance(v, Tensor) and v.shape is not None else ()
    before = tuple(spec[2]) if spec[2] is not None else None
    if before is not None and isinstance(v, Tensor) and v.shape is not None and (
            len(shape) != len(before) or any(a is not None and b is not None and a != b
                                             for a, b in zip(before, shape))):
        raise errors.InvalidArgumentError(
            f"'{name}' has shape {before} before the {kind} loop at line {lineno}, but shape "
            f"{shape} after one iteration; a graph loop keeps each variable's shape: write "
            "the loop with pg.while_loop and shape_invariants to let it change")


def _define_undefined(body: Callable, set_state: Callable, get_state: Callable, init: list,
                      names: Sequence[str], lineno: int, kind: str,
                      index: list | None) -> list:
    """Values for the variables that the loop body assigns but that are
    undefined before the loop: the body is traced once into a scratch graph
    to learn their dtypes and shapes, and they start as zeros."""
    outer = tracing.current_graph()
    scratch = Graph(f"{outer.name}_autograph_probe", library={}, outer=outer)
    start_index = index[0] if index is not None else None
    try:
        with tracing.trace_scope(scratch):
            set_state(tuple(init))
            body()
            after = list(get_state())
    except UndefinedVariableError as exc:
        name = str(exc).split("'")[1] if "'" in str(exc) else "?"
        raise errors.InvalidArgumentError(
            f"'{name}' must be defined before the {kind} loop at line {lineno}: the loop "
            "runs in the graph (its condition is a tensor) and reads it before assigning "
            "it; give it a value before the loop") from None
    finally:
        if index is not None:
            index[0] = start_index
    out = list(init)
    for i, (name, v, a) in enumerate(zip(names, init, after)):
        if not isinstance(v, Undefined):
            continue
        if isinstance(a, Tensor) and a.shape is not None and None not in a.shape:
            out[i] = array_ops.zeros(list(a.shape), a.dtype)
        elif isinstance(a, (bool, int, float)):
            out[i] = array_ops.zeros([], _dtype(a))
        elif not _is_undefined(a):
            raise errors.InvalidArgumentError(
                f"'{name}' must be defined before the {kind} loop at line {lineno}: it has "
                "no value before the loop and its value after one iteration is not a tensor "
                "of a known shape")
    set_state(tuple(init))
    return out


# -------------------------------------------------------------------- calls

# What converted_call converts: api.convertible, set when api is imported.
convertible: list[Callable[[Any], Callable | None]] = [lambda f: None]


def converted_call(f: Any, args: tuple, kwargs: dict | None) -> Any:
    """Calls `f`, converted first when it is a function of user code (not of
    pluggable, the standard library or an installed package)."""
    kwargs = kwargs or {}
    if f is builtins.range and any(_symbolic(a) is not None for a in args):
        return array_ops.range(*args, **kwargs)
    if f is logging_ops.print and tracing.current_graph() is not None:
        return _graph_print(args, kwargs)
    target = convertible[0](f)
    return (target or f)(*args, **kwargs)


def converted_function(fn: Callable) -> Callable:
    """Marks a function defined inside converted code: already converted."""
    try:
        fn.__ag_converted__ = True
    except (AttributeError, TypeError):
        pass
    return fn



def _graph_print(args: tuple, kwargs: dict) -> None:
    """``pg.print`` in a traced function: a node that prints the values
    each time the graph runs (``tf.print``)."""
    leaves = nest.flatten(list(args))
    where = [i for i, x in enumerate(leaves) if isinstance(x, Tensor)]
    tensors = [leaves[i] for i in where]

    def run(*values: Any) -> list:
        filled = list(leaves)
        for i, v in zip(where, values):
            filled[i] = v
        logging_ops.print(*nest.pack_as(list(args), filled), **kwargs)
        return []
    py_function.call_node(py_function.register(run), tensors, [])
