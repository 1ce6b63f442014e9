"""Converting Python functions: source in, a new function over the same
globals and closure cells out, made once per code object."""
from __future__ import annotations

import ast
import functools
import inspect
import logging
import os
import sysconfig
import textwrap
import threading
import types
from typing import Any, Callable

from . import operators, transformer

log = logging.getLogger("pluggable.autograph")

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_LIBRARY = tuple(p + os.sep for p in {sysconfig.get_paths()[k] for k in
                                      ("stdlib", "platstdlib", "purelib", "platlib")})
_lock = threading.Lock()
# code object -> (converted code, converted source text) or (None, reason)
_cache: dict = {}


def _is_user_code(fn: types.FunctionType) -> bool:
    path = fn.__code__.co_filename
    if path.startswith("<") or fn.__name__ == "<lambda>":
        return False
    path = os.path.abspath(path)
    return not path.startswith(_PACKAGE) and not path.startswith(_LIBRARY)


def _marked(fn: Any) -> bool:
    return bool(getattr(fn, "__ag_do_not_convert__", False) or
                getattr(fn, "__ag_converted__", False))


def convertible(f: Any) -> Callable | None:
    """The converted form of `f` when it is user code to convert, else None
    (call `f` as it is)."""
    if _marked(f) or hasattr(f, "get_concrete_function"):
        return None   # a pg.function converts its own body
    if isinstance(f, types.FunctionType):
        return convert(f) if _is_user_code(f) else None
    if isinstance(f, types.MethodType) and isinstance(f.__func__, types.FunctionType):
        func = f.__func__
        if _marked(func) or not _is_user_code(func):
            return None
        new = convert(func)
        return None if new is None else functools.partial(new, f.__self__)
    if isinstance(f, type) or isinstance(f, functools.partial):
        return None
    call = getattr(type(f), "__call__", None)
    if isinstance(call, types.FunctionType) and not _marked(call) and _is_user_code(call):
        new = convert(call)
        return None if new is None else functools.partial(new, f)
    return None


operators.convertible[0] = convertible


def convert(fn: types.FunctionType) -> Callable | None:
    """`fn` converted (None when it cannot be: no source, a generator ...;
    the reason is logged once)."""
    code = fn.__code__
    entry = _cache.get(code)
    if entry is None:
        with _lock:
            entry = _cache.get(code)
            if entry is None:
                entry = _cache[code] = _convert_code(fn)
    new_code, text = entry
    if new_code is None:
        return None
    return _instantiate(fn, new_code)


def _convert_code(fn: types.FunctionType) -> tuple:
    try:
        node = _parse(fn)
        transformer.convert_function(node)
    except (transformer.ConversionError, OSError, TypeError, SyntaxError) as exc:
        log.warning("AutoGraph could not convert %s and runs it as it is: %s",
                    getattr(fn, "__qualname__", fn), exc)
        return None, str(exc)
    text = ast.unparse(node)
    # The factory must not bind the function's own name: the body may call
    # it (recursion), which reads the global, not the converted function.
    node.name = "__ag_converted"
    params = [transformer.AG] + list(fn.__code__.co_freevars)
    factory = ast.FunctionDef("__ag_factory", ast.arguments(
        [], [ast.arg(p) for p in params], None, [], [], None, []),
        [node, ast.Return(ast.Name(node.name, ast.Load()))], [], None)
    module = ast.Module([factory], [])
    ast.copy_location(factory, node)
    ast.fix_missing_locations(module)
    compiled = compile(module, fn.__code__.co_filename, "exec")
    outer = next(c for c in compiled.co_consts if isinstance(c, types.CodeType))
    inner = next(c for c in outer.co_consts if isinstance(c, types.CodeType)
                 and c.co_name == node.name)
    inner = inner.replace(co_name=fn.__code__.co_name)
    if hasattr(inner, "co_qualname"):
        inner = inner.replace(co_qualname=fn.__code__.co_qualname)
    return inner, text


def _parse(fn: types.FunctionType) -> ast.FunctionDef:
    lines, start = inspect.getsourcelines(fn)
    source = textwrap.dedent("".join(lines))
    tree = ast.parse(source)
    node = tree.body[0] if tree.body else None
    if not isinstance(node, ast.FunctionDef):
        raise transformer.ConversionError("only functions defined with `def` are converted")
    ast.increment_lineno(tree, start - 1)
    node.decorator_list = []
    if "__class__" in fn.__code__.co_freevars:
        _explicit_super(node)
    parts = fn.__qualname__.split(".")
    if len(parts) > 1 and parts[-2] != "<locals>":
        _mangle(node, parts[-2])
    return node


def _mangle(fn: ast.FunctionDef, cls: str) -> None:
    """Private names (``self.__x``) as the class body compiled them: the
    converted function is compiled outside its class."""
    prefix = "_" + cls.lstrip("_")

    def mangled(name: str) -> str:
        if name.startswith("__") and not name.endswith("__") and cls.strip("_"):
            return prefix + name
        return name
    for n in ast.walk(fn):
        if isinstance(n, ast.Attribute):
            n.attr = mangled(n.attr)
        elif isinstance(n, ast.Name):
            n.id = mangled(n.id)


def _explicit_super(fn: ast.FunctionDef) -> None:
    """``super()`` -> ``super(__class__, self)``: the converted body runs in
    nested functions, where the zero-argument form finds no class."""
    args = fn.args.posonlyargs + fn.args.args
    if not args:
        return
    for n in ast.walk(fn):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "super" \
                and not n.args and not n.keywords:
            n.args = [ast.Name("__class__", ast.Load()), ast.Name(args[0].arg, ast.Load())]


def _instantiate(fn: types.FunctionType, code: types.CodeType) -> Callable:
    original = dict(zip(fn.__code__.co_freevars, fn.__closure__ or ()))
    cells = []
    for name in code.co_freevars:
        if name == transformer.AG:
            cells.append(types.CellType(operators))
        else:
            cells.append(original[name])
    new = types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__, tuple(cells))
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__dict__.update(fn.__dict__)
    new.__qualname__ = fn.__qualname__
    new.__doc__ = fn.__doc__
    new.__ag_converted__ = True
    return new


def _unwrap(fn: Any) -> Any:
    fn = getattr(fn, "python_function", fn)   # a pg.function
    if isinstance(fn, types.MethodType):
        fn = fn.__func__
    return fn


def to_code(fn: Callable) -> str:
    """The source of `fn` as AutoGraph converts it (a ``pg.function`` or a
    plain Python function)."""
    fn = _unwrap(fn)
    if not isinstance(fn, types.FunctionType):
        raise TypeError(f"to_code needs a Python function, got {type(fn).__name__}")
    convert(fn)
    code, text = _cache[fn.__code__]
    if code is None:
        raise transformer.ConversionError(
            f"{fn.__qualname__} cannot be converted: {text}")
    return text + "\n"


def to_graph(fn: Callable) -> Callable:
    """`fn` converted (its Python control flow on tensors builds graph
    control flow when it runs inside a traced function)."""
    fn = _unwrap(fn)
    new = convert(fn) if isinstance(fn, types.FunctionType) else None
    if new is None:
        raise transformer.ConversionError(f"{fn!r} cannot be converted")
    return new


def do_not_convert(func: Callable | None = None) -> Any:
    """Marks `func` to run as it is, never converted by AutoGraph
    (``@pg.autograph.experimental.do_not_convert``)."""
    if func is None:
        return do_not_convert
    try:
        func.__ag_do_not_convert__ = True
        return func
    except (AttributeError, TypeError):
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return func(*args, **kwargs)
        wrapper.__ag_do_not_convert__ = True
        return wrapper
