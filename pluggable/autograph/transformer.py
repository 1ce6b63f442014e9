"""The source transformation of AutoGraph: a function's syntax tree in, the
converted tree out.

Passes, in order, over one ``def`` (and every ``def`` nested in it):

1. ``break`` / ``continue`` become flags (``break_``, ``continue_``); the
   statements after one that may set a flag are guarded by ``if not flag``,
   and a loop with ``break`` also tests ``not break_``.
2. ``return`` inside control flow becomes ``do_return = True; retval_ = v``
   with the same guards; the function ends with ``return ag__.retval(retval_)``.
3. ``and`` / ``or`` / ``not`` / ``a if c else b`` become ``ag__.and_`` ...,
   calls become ``ag__.converted_call`` (user functions are converted too).
4. ``if`` / ``while`` / ``for`` become nested functions (the branches, the
   loop test and body, and ``get_state`` / ``set_state`` over the variables
   they change) passed to ``ag__.if_stmt`` / ``while_stmt`` / ``for_stmt``,
   which decide at run time: plain Python, or ``pg.cond`` / ``pg.while_loop``.

The variables a statement carries are the names it assigns that are read
later (after it, or in the next iteration of a loop before being assigned).
"""
from __future__ import annotations

import ast
import itertools
from typing import Iterable

AG = "ag__"
# Calls left alone: they read the caller's frame or build its class cell.
_FRAME_CALLS = {"super", "locals", "globals", "vars", "eval", "exec", "dir"}


class ConversionError(Exception):
    """A construct AutoGraph cannot convert (with its source line)."""


def _ag(attr: str) -> ast.expr:
    return ast.Attribute(ast.Name(AG, ast.Load()), attr, ast.Load())


def _call(attr: str, *args: ast.expr) -> ast.Call:
    return ast.Call(_ag(attr), list(args), [])


def _name(n: str, store: bool = False) -> ast.Name:
    return ast.Name(n, ast.Store() if store else ast.Load())


def _assign(n: str, value: ast.expr) -> ast.Assign:
    return ast.Assign([_name(n, True)], value)


def _const(v) -> ast.Constant:
    return ast.Constant(v)


def _lambda(body: ast.expr) -> ast.Lambda:
    return ast.Lambda(ast.arguments([], [], None, [], [], None, []), body)


# ------------------------------------------------------------ name analysis

def _walk_scope(node: ast.AST, root: bool = True) -> Iterable[ast.AST]:
    """The nodes of `node` in its own scope: nested function bodies are not
    entered, but their defaults and decorators (and the names they read,
    as closures) are. With ``root=False`` a def `node` is itself such a
    nested function (a statement of the scope)."""
    if not root and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        holder = ast.Module([node], []) if not isinstance(node, ast.Lambda) else \
            ast.Expression(node)
        yield from (n for n in _walk_scope(holder) if n is not holder)
        return
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        for child in ast.iter_child_nodes(n):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                yield child
                stack.extend(child.args.defaults + [d for d in child.args.kw_defaults if d])
                if not isinstance(child, ast.Lambda):
                    stack.extend(child.decorator_list)
                for inner in ast.walk(child):   # names a closure reads (or sets)
                    if isinstance(inner, ast.Name) and isinstance(inner.ctx, ast.Load) or \
                            isinstance(inner, ast.Nonlocal):
                        yield inner
            elif isinstance(child, ast.ClassDef):
                yield child
            elif isinstance(child, (ast.ListComp, ast.SetComp, ast.DictComp,
                                    ast.GeneratorExp)):
                for inner in ast.walk(child):   # a scope of its own: only what it reads
                    if isinstance(inner, ast.Name) and isinstance(inner.ctx, ast.Load):
                        yield inner
            else:
                stack.append(child)


def assigned(nodes: Iterable[ast.AST]) -> set[str]:
    """The local names the statements assign."""
    out = set()
    for node in nodes:
        for n in _walk_scope(node, root=False):
            if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
                out.add(n.id)
            elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.add(n.name)
            elif isinstance(n, (ast.Import, ast.ImportFrom)):
                out.update((a.asname or a.name).split(".")[0] for a in n.names)
            elif isinstance(n, ast.Nonlocal):
                out.update(n.names)   # assigned by a converted statement's functions
    return out


def _loads(node: ast.AST) -> set[str]:
    return {n.id for n in _walk_scope(node, root=False) if isinstance(n, ast.Name)
            and isinstance(n.ctx, ast.Load)}


def exposed(stmts: list[ast.stmt], written: set[str] | None = None) -> tuple[set, set]:
    """(names read before being assigned, names assigned on every path) of
    a statement list, given the names already `written`."""
    written = set(written or ())
    reads: set[str] = set()
    for s in stmts:
        r, written = _exposed_stmt(s, written)
        reads |= r
    return reads, written


def _exposed_stmt(s: ast.stmt, w: set) -> tuple[set, set]:
    if hasattr(s, "_ag_defines"):    # a converted statement, or an undefined-probe
        return set(getattr(s, "_ag_reads", set())) - w, w | s._ag_defines
    if isinstance(s, ast.If):
        reads = _loads(s.test) - w
        r1, w1 = exposed(s.body, w)
        r2, w2 = exposed(s.orelse, w)
        return reads | r1 | r2, w1 & w2
    if isinstance(s, (ast.While, ast.For)):
        head = s.test if isinstance(s, ast.While) else s.iter
        reads = _loads(head) - w
        inner = w | (assigned([s.target]) if isinstance(s, ast.For) else set())
        r1, _ = exposed(s.body, inner)
        r2, _ = exposed(s.orelse, w)
        return reads | r1 | r2, w
    if isinstance(s, ast.Try):
        r1, w1 = exposed(s.body, w)
        reads = set(r1)
        for h in s.handlers:
            reads |= exposed(h.body, w | ({h.name} if h.name else set()))[0]
        r2, w2 = exposed(s.orelse, w1)
        r3, w3 = exposed(s.finalbody, w)
        return reads | r2 | r3, w | w3
    if isinstance(s, ast.With):
        reads = set()
        for item in s.items:
            reads |= _loads(item.context_expr) - w
        r1, w1 = exposed(s.body, w | assigned([i.optional_vars for i in s.items
                                               if i.optional_vars]))
        return reads | r1, w1
    if isinstance(s, ast.AugAssign):
        return (_loads(s) | assigned([s.target])) - w, w | assigned([s])
    return _loads(s) - w, w | assigned([s])


# ------------------------------------------------------------- the passes

class _Counter:
    """Fresh names: ``if_body``, ``if_body_1``, ..."""

    def __init__(self):
        self._n: dict[str, itertools.count] = {}

    def name(self, base: str) -> str:
        i = next(self._n.setdefault(base, itertools.count(0)))
        return base if i == 0 else f"{base.rstrip('_')}_{i}"


def _sets_flag(node: ast.AST, flags: set[str]) -> bool:
    """Whether the statement may assign one of `flags` (in its own scope)."""
    return bool(assigned([node]) & flags)


def _always_sets(stmts: list[ast.stmt], flags: set[str]) -> bool:
    """Whether every path through `stmts` sets one of `flags`: a statement
    of the block assigns it, or is an if whose branches all do."""
    for s in stmts:
        if isinstance(s, ast.Assign) and len(s.targets) == 1 and \
                isinstance(s.targets[0], ast.Name) and s.targets[0].id in flags:
            return True
        if isinstance(s, ast.If) and _always_sets(s.body, flags) and \
                _always_sets(s.orelse, flags):
            return True
    return False


def _not_any(flags: list[str]) -> ast.expr:
    test: ast.expr = _name(flags[0])
    for f in flags[1:]:
        test = ast.BoolOp(ast.Or(), [test, _name(f)])
    return ast.UnaryOp(ast.Not(), test)


def guard(stmts: list[ast.stmt], flags: list[str]) -> list[ast.stmt]:
    """`stmts` with the statements after one that may set a flag run only
    while no flag is set: folded into the other branch of an if whose one
    branch always sets it, else under ``if not flag``."""
    fset = set(flags)
    for i, s in enumerate(stmts):
        if not _sets_flag(s, fset):
            continue
        rest = stmts[i + 1:]
        if not rest:
            return stmts
        if isinstance(s, ast.If) and _always_sets(s.body, fset) and \
                not _sets_flag(ast.Module(s.orelse, []), fset):
            s.orelse = guard(s.orelse + rest, flags)
            return stmts[:i + 1]
        if isinstance(s, ast.If) and _always_sets(s.orelse, fset) and \
                not _sets_flag(ast.Module(s.body, []), fset):
            s.body = guard(s.body + rest, flags)
            return stmts[:i + 1]
        if _always_sets([s], fset):
            return stmts[:i + 1]
        cond = ast.copy_location(ast.If(_not_any(flags), guard(rest, flags), []), rest[0])
        return stmts[:i + 1] + [cond]
    return stmts


class _Jumps(ast.NodeTransformer):
    """Pass 1: ``break`` and ``continue`` of the innermost loop become flags."""

    def __init__(self, names: _Counter):
        self.names = names
        self.loop: list[dict] = []

    def visit_FunctionDef(self, node):
        return node   # converted on its own

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node):
        return node

    def _loop(self, node):
        frame = {"break": None, "continue": None}
        self.loop.append(frame)
        node.body = [self.visit(s) for s in node.body]
        node.body = _flatten(node.body)
        self.loop.pop()
        node.orelse = _flatten([self.visit(s) for s in node.orelse])
        flags = [f for f in (frame["continue"], frame["break"]) if f]
        if not flags:
            return node
        node.body = guard(node.body, flags)
        out: list[ast.stmt] = []
        if frame["continue"]:
            node.body.insert(0, ast.copy_location(_assign(frame["continue"], _const(False)),
                                                  node))
        if frame["break"]:
            b = frame["break"]
            out.append(ast.copy_location(_assign(b, _const(False)), node))
            node._ag_extra = getattr(node, "_ag_extra", []) + [b]
            if node.orelse:
                node.orelse = [ast.copy_location(ast.If(_not_any([b]), node.orelse, []),
                                                 node)]
        return out + [node]

    visit_While = visit_For = _loop

    def _jump(self, node, kind):
        if not self.loop:
            return node
        frame = self.loop[-1]
        if frame[kind] is None:
            frame[kind] = self.names.name(f"{kind}_")
        return ast.copy_location(_assign(frame[kind], _const(True)), node)

    def visit_Break(self, node):
        return self._jump(node, "break")

    def visit_Continue(self, node):
        return self._jump(node, "continue")


def _flatten(stmts: list) -> list:
    out = []
    for s in stmts:
        out.extend(s if isinstance(s, list) else [s])
    return out


class _Returns(ast.NodeTransformer):
    """Pass 2: ``return`` inside control flow sets ``do_return`` / ``retval_``."""

    def __init__(self):
        self.used = False

    def visit_FunctionDef(self, node):
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node):
        return node

    def visit_Return(self, node):
        self.used = True
        value = node.value if node.value is not None else _const(None)
        out = [_assign("retval_", value), _assign("do_return", _const(True))]
        for s in out:
            ast.copy_location(s, node)
        return out

    def _block(self, node):
        self.generic_visit(node)
        for field in ("body", "orelse", "finalbody"):
            if hasattr(node, field):
                setattr(node, field, _flatten(getattr(node, field)))
        if isinstance(node, (ast.While, ast.For)) and _sets_flag(
                ast.Module(node.body, []), {"do_return"}):
            node.body = guard(node.body, ["do_return"])
            node._ag_extra = getattr(node, "_ag_extra", []) + ["do_return"]
        elif hasattr(node, "body"):
            node.body = guard(node.body, ["do_return"])
            if getattr(node, "orelse", None):
                node.orelse = guard(node.orelse, ["do_return"])
        return node

    visit_If = visit_While = visit_For = visit_With = visit_Try = _block


def lower_returns(fn: ast.FunctionDef) -> None:
    body = fn.body
    simple = all(not isinstance(n, ast.Return) for s in body[:-1] for n in _walk_scope(s)) \
        and not any(isinstance(n, ast.Return) for n in _walk_scope(body[-1])
                    if n is not body[-1])
    if simple:
        return
    r = _Returns()
    new = _flatten([r.visit(s) for s in body])
    new = guard(new, ["do_return"])
    head = [_assign("do_return", _const(False)),
            _assign("retval_", _call("UndefinedReturnValue"))]
    tail = [ast.Return(_call("retval", _name("retval_")))]
    for s in head + tail:
        ast.copy_location(s, body[0])
    fn.body = head + new + tail


class _Expressions(ast.NodeTransformer):
    """Pass 3: logical operators, conditional expressions and calls."""

    def visit_FunctionDef(self, node):
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_BoolOp(self, node):
        self.generic_visit(node)
        fn = "and_" if isinstance(node.op, ast.And) else "or_"
        return ast.copy_location(
            ast.Call(_ag(fn), [_lambda(v) for v in node.values], []), node)

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, ast.Not):
            return ast.copy_location(_call("not_", node.operand), node)
        return node

    def visit_IfExp(self, node):
        self.generic_visit(node)
        return ast.copy_location(
            _call("if_exp", node.test, _lambda(node.body), _lambda(node.orelse)), node)

    def visit_Call(self, node):
        self.generic_visit(node)
        f = node.func
        if isinstance(f, ast.Name) and f.id in _FRAME_CALLS:
            return node
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == AG:
            return node
        args = ast.Tuple(node.args, ast.Load())
        keys, values = [], []
        for k in node.keywords:
            keys.append(None if k.arg is None else _const(k.arg))
            values.append(k.value)
        kwargs = ast.Dict(keys, values) if keys else _const(None)
        return ast.copy_location(ast.Call(_ag("converted_call"), [f, args, kwargs], []), node)


# ----------------------------------------------------- pass 4: control flow

class _ControlFlow(ast.NodeTransformer):
    """Pass 4: if / while / for become calls of ag__ operators."""

    def __init__(self, fn: ast.FunctionDef, names: _Counter, excluded: set[str],
                 globals_: set[str]):
        self.fn = fn
        self.names = names
        self.excluded = excluded
        self.globals = globals_
        self.parents: list[tuple[list, int, ast.AST]] = []   # (block, index, owner)

    # --- liveness
    def _live_after(self) -> set[str]:
        """Names read after the statement being converted: in the rest of
        each enclosing block and, inside a loop, in the loop again."""
        live: set[str] = set()
        kill: set[str] = set()
        for block, i, owner in reversed(self.parents):
            reads, written = exposed(block[i + 1:])
            live |= reads - kill
            kill |= written
            if isinstance(owner, (ast.While, ast.For)):
                head = owner.test if isinstance(owner, ast.While) else owner.iter
                again, _ = exposed(owner.body)
                live |= (again | _loads(head) | set(getattr(owner, "_ag_extra", []))) - kill
        return live

    def _block(self, stmts: list, owner: ast.AST) -> list:
        out = []
        for i, s in enumerate(stmts):
            self.parents.append((stmts, i, owner))
            r = self.visit(s)
            self.parents.pop()
            out.extend(r if isinstance(r, list) else [r])
        return out

    def visit_FunctionDef(self, node):
        if node is not self.fn:
            return node
        node.body = self._block(node.body, node)
        return node

    # --- helpers
    def _state(self, names: list[str]) -> tuple[list, str, str]:
        get_name, set_name = self.names.name("get_state"), self.names.name("set_state")
        getter = ast.FunctionDef(get_name, _no_args(), [ast.Return(
            ast.Tuple([_name(n) for n in names], ast.Load()))], [], None)
        setter_body: list[ast.stmt] = self._declare(names, [])
        if names:
            setter_body.append(ast.Assign([ast.Tuple([_name(n, True) for n in names],
                                                     ast.Store())], _name("vars_")))
        else:
            setter_body.append(ast.Pass())
        setter = ast.FunctionDef(set_name, _args("vars_"), setter_body, [], None)
        return [getter, setter], get_name, set_name

    def _def(self, base: str, body: list, names: list[str], args: ast.arguments | None = None,
             ) -> tuple[ast.FunctionDef, str]:
        name = self.names.name(base)
        stmts = self._declare(names, body) + (body or [ast.Pass()])
        return ast.FunctionDef(name, args or _no_args(), stmts, [], None), name

    def _declare(self, names: list[str], body: list) -> list[ast.stmt]:
        """``nonlocal`` for the statement's variables; ``global`` for the
        function's globals among them or assigned in `body`."""
        globals_ = sorted(self.globals & (set(names) | assigned(body)))
        local = [n for n in names if n not in self.globals]
        return ([ast.Global(globals_)] if globals_ else []) + \
            ([ast.Nonlocal(local)] if local else [])

    def _undefined(self, names: list[str], node: ast.AST) -> list[ast.stmt]:
        """``x = ag__.Undefined('x')`` for each name that may not be bound yet."""
        defined = set(self.fn_params)
        for block, i, _ in self.parents:
            defined |= exposed(block[:i])[1]
        out = []
        for n in names:
            if n in defined:
                continue
            probe = ast.Try([ast.Expr(_name(n))], [ast.ExceptHandler(
                _name("NameError"), None, [_assign(n, _call("Undefined", _const(n)))])], [], [])
            probe._ag_defines = {n}
            out.append(probe)
        return out

    def _names_tuple(self, names: list[str]) -> ast.Tuple:
        return ast.Tuple([_const(n) for n in names], ast.Load())

    def _finish(self, node: ast.AST, defs: list, call: ast.expr, names: list[str],
                defines: set[str] = frozenset()) -> list:
        stmt = ast.Expr(call)
        stmt._ag_defines = set(defines)
        stmt._ag_reads = exposed([node])[0]
        out = self._undefined(names, node) + defs + [stmt]
        for s in out:
            ast.copy_location(s, node)
            for n in ast.walk(s):
                if not hasattr(n, "lineno") and "lineno" in n._attributes:
                    ast.copy_location(n, node)
        return out

    @property
    def fn_params(self) -> set[str]:
        a = self.fn.args
        return {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs} | \
            {x.arg for x in (a.vararg, a.kwarg) if x}

    # --- if
    def visit_If(self, node):
        live = self._live_after()
        original = ast.copy_location(ast.If(node.test, list(node.body), list(node.orelse)),
                                     node)
        node.body = self._block(node.body, node)
        node.orelse = self._block(node.orelse, node)
        changed = assigned(node.body + node.orelse) - self.excluded
        names = sorted(changed & live)
        defines = set(names) & exposed(node.body)[1] & exposed(node.orelse)[1]
        body, body_name = self._def("if_body", node.body, names)
        orelse, else_name = self._def("else_body", node.orelse, names)
        state, get_name, set_name = self._state(names)
        call = _call("if_stmt", node.test, _name(body_name), _name(else_name),
                     _name(get_name), _name(set_name), self._names_tuple(names),
                     _const(node.lineno))
        return self._finish(original, state + [body, orelse], call, names, defines)

    # --- while
    def visit_While(self, node):
        live = self._live_after()
        node.body = self._block(node.body, node)
        node.orelse = self._block(node.orelse, node)
        names = self._loop_vars(node, live)
        test = node.test
        for flag in getattr(node, "_ag_extra", []):
            test = _call("and_", _lambda(_call("not_", _name(flag))), _lambda(test))
        test_fn = ast.FunctionDef(self.names.name("loop_test"), _no_args(),
                                  [ast.Return(test)], [], None)
        body, body_name = self._def("loop_body", node.body, names)
        state, get_name, set_name = self._state(names)
        call = _call("while_stmt", _name(test_fn.name), _name(body_name), _name(get_name),
                     _name(set_name), self._names_tuple(names), _const(node.lineno))
        out = self._finish(node, state + [test_fn, body], call, names)
        return out + node.orelse

    def _loop_vars(self, node, live: set[str]) -> list[str]:
        changed = assigned(node.body) - self.excluded
        if isinstance(node, ast.For):
            changed |= assigned([node.target]) - self.excluded
        head = node.test if isinstance(node, ast.While) else None
        reads, _ = exposed(node.body, assigned([node.target]) if isinstance(node, ast.For)
                           else set())
        used = reads | (_loads(head) if head is not None else set()) | \
            set(getattr(node, "_ag_extra", [])) | live
        return sorted(changed & used)

    # --- for
    def visit_For(self, node):
        if isinstance(node, ast.AsyncFor):
            raise ConversionError(f"line {node.lineno}: async for is not converted")
        live = self._live_after()
        node.body = self._block(node.body, node)
        node.orelse = self._block(node.orelse, node)
        names = self._loop_vars(node, live)
        itr = self.names.name("itr")
        target = ast.Assign([node.target], _name(itr))
        ast.copy_location(target, node)
        body, body_name = self._def("loop_body", [target] + node.body, names, _args(itr))
        extra = getattr(node, "_ag_extra", [])
        defs = []
        if extra:
            test: ast.expr = _call("not_", _name(extra[0]))
            for f in extra[1:]:
                test = _call("and_", _lambda(test), _lambda(_call("not_", _name(f))))
            test_fn = ast.FunctionDef(self.names.name("extra_test"), _no_args(),
                                      [ast.Return(test)], [], None)
            defs.append(test_fn)
            extra_arg: ast.expr = _name(test_fn.name)
        else:
            extra_arg = _const(None)
        state, get_name, set_name = self._state(names)
        call = _call("for_stmt", node.iter, extra_arg, _name(body_name), _name(get_name),
                     _name(set_name), self._names_tuple(names), _const(node.lineno))
        out = self._finish(node, state + defs + [body], call, names)
        return out + node.orelse


def _no_args() -> ast.arguments:
    return ast.arguments([], [], None, [], [], None, [])


def _args(*names: str) -> ast.arguments:
    return ast.arguments([], [ast.arg(n) for n in names], None, [], [], None, [])


# ---------------------------------------------------------------- the entry

def _check_supported(fn: ast.FunctionDef) -> None:
    for n in _walk_scope(fn):
        if isinstance(n, (ast.Yield, ast.YieldFrom)):
            raise ConversionError(
                f"line {n.lineno}: `yield`: generator functions are not converted")
        if isinstance(n, (ast.AsyncFor, ast.AsyncWith, ast.Await)):
            raise ConversionError(f"line {n.lineno}: async code is not converted")
        if isinstance(n, ast.Match):
            raise ConversionError(f"line {n.lineno}: `match` is not converted; use if/elif")


def convert_function(fn: ast.FunctionDef) -> ast.FunctionDef:
    """Converts `fn` in place (and the functions defined inside it)."""
    _check_supported(fn)
    for n in list(_walk_scope(fn)):
        if isinstance(n, ast.FunctionDef) and n is not fn:
            try:
                convert_function(n)
            except ConversionError:
                continue   # left as Python (a generator, say)
            n.decorator_list.insert(0, _ag("converted_function"))
    names = _Counter()
    excluded: set[str] = set()
    globals_: set[str] = set()
    for n in _walk_scope(fn):
        if isinstance(n, ast.Global):
            globals_.update(n.names)
    fn.body = _flatten([_Jumps(names).visit(s) for s in fn.body])
    lower_returns(fn)
    fn.body = [_Expressions().visit(s) for s in fn.body]
    _ControlFlow(fn, names, excluded, globals_).visit(fn)
    return fn
