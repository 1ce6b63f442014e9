"""Hooks around op execution, for the subsystems above the runtime.

Graph tracing (an op call adds a node instead of running), gradient tapes
(an op call is recorded for the backward pass) and the profiler (an op call
is timed) all need to see every op call, but dispatch cannot import them
(they live in higher layers). Instead they install a *wrapper* here:

    def wrapper(op, inputs, attrs, run):
        ...                      # before
        outputs = run(op, inputs, attrs)
        ...                      # after
        return outputs

`op` is the OpDef, `inputs` the inputs in op-definition order (any Python
values, not yet converted to tensors: a tracer may see its own symbolic
tensors), `attrs` the attributes given by the caller, and `run` the rest of
the chain (the next wrapper, or plain execution). List arguments are
flattened, as TensorFlow's eager execution does: ConcatV2's inputs are the
N values then the axis, and `attrs` holds N; `run` returns the flattened
outputs (Unpack's num outputs), which raw_ops regroups into lists. A wrapper may return
without calling `run` (a tracer does). Wrappers run in the order they were
installed, the first installed outermost, except that wrappers installed
with ``innermost=True`` always come after the others: the graph tracer is one
(it turns a call into a graph node instead of calling `run`), so a tape or
profiler wrapper, whether installed before a trace starts or inside the
traced function, still sees every op the trace records. A wrapper that only
matters on some threads (tapes and tracing are per thread) checks its own
thread state and otherwise just calls `run`.

While no wrapper is installed, dispatch pays one list lookup per call: the
generated ``raw_ops`` functions take their fast path while ``fast[0]`` is
True.

A wrapper that only *watches* calls (it runs every call unchanged and looks
at the inputs and outputs afterwards, as a gradient tape does) can also be
installed with an ``observer``::

    def observer(op, inputs, attrs, outputs, resolved):
        ...                      # after the call, with its tensors

Calls on the fast paths (``raw_ops``' generated code, ``dispatch.Prepared``)
then stay on them and report to ``observe`` after running, with `resolved`,
every attribute of the call (defaults and type attributes included: the
plan's, which the observer must not change), while the general
path still calls the wrapper. The fast paths stay open only while every
installed wrapper has an observer: a tracer or the profiler (which replace
or time the execution itself) close them."""
from __future__ import annotations

import threading
from typing import Any, Callable

Wrapper = Callable[[Any, list, dict, Callable], list]

_lock = threading.Lock()
_wrappers: tuple[Wrapper, ...] = ()
_outer: tuple[Wrapper, ...] = ()
_inner: tuple[Wrapper, ...] = ()
_observer_of: dict = {}  # wrapper -> its observer
_observers: tuple = ()
active = [False]  # some wrapper is installed (read by dispatch and raw_ops)
fast = [True]  # no wrapper, or only wrappers with observers: fast paths may run


def _update() -> None:
    global _wrappers, _observers
    _wrappers = _outer + _inner
    _observers = tuple(_observer_of[w] for w in _wrappers if w in _observer_of)
    active[0] = bool(_wrappers)
    fast[0] = len(_observers) == len(_wrappers)


def install(wrapper: Wrapper, innermost: bool = False,
            observer: Callable[[Any, list, dict, list, dict], None] | None = None) -> None:
    """Adds `wrapper` around every op call from now on (idempotent).
    `innermost` places it after every other wrapper, including ones
    installed later (for a wrapper that replaces execution). `observer`,
    for a wrapper that only watches, is what the fast paths call after a
    call instead (see the module's description)."""
    global _outer, _inner
    with _lock:
        if wrapper not in _wrappers:
            if innermost:
                _inner = _inner + (wrapper,)
            else:
                _outer = _outer + (wrapper,)
            if observer is not None:
                _observer_of[wrapper] = observer
        _update()


def uninstall(wrapper: Wrapper) -> None:
    """Removes `wrapper` (no error if it is not installed)."""
    global _outer, _inner
    with _lock:
        _outer = tuple(w for w in _outer if w is not wrapper)
        _inner = tuple(w for w in _inner if w is not wrapper)
        _observer_of.pop(wrapper, None)
        _update()


def installed() -> tuple[Wrapper, ...]:
    return _wrappers


def observe(op: Any, inputs: list, attrs: dict, outputs: list, resolved: dict) -> None:
    """Reports a call that a fast path ran to every installed observer."""
    for o in _observers:
        o(op, inputs, attrs, outputs, resolved)


def call(op: Any, inputs: list, attrs: dict, execute: Callable) -> list:
    """Runs the op call through every installed wrapper, then `execute`."""
    chain = _wrappers

    def step(i: int) -> Callable:
        if i == len(chain):
            return execute
        wrapper, nxt = chain[i], None

        def run(op_, inputs_, attrs_):
            nonlocal nxt
            if nxt is None:
                nxt = step(i + 1)
            return nxt(op_, inputs_, attrs_)
        return lambda op_, inputs_, attrs_: wrapper(op_, inputs_, attrs_, run)

    return step(0)(op, inputs, attrs)
