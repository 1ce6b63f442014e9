"""Layer 1: the core C runtime (cffi) and the hooks it calls into Python.

``ffi`` and ``lib`` are the cffi view of the core (built from
``c_api/src`` by ``build.py`` at install time). The core calls back into
Python when a plugin registers a kernel or an op and when a stream runs a
host callback; the registration callbacks are looked up in ``hooks``, which
the plugin layer fills in when it is imported, so this layer imports nothing
above it.
"""
from __future__ import annotations

import ctypes
import os
import threading
from typing import Callable

from . import _lib, tf_guard

ffi = _lib.ffi
lib = _lib.lib

# Plugins are built with the TF_* symbols unresolved. Re-opening the core with
# RTLD_GLOBAL puts its symbols in the global scope, so that every plugin
# loaded afterwards binds to them.
ctypes.CDLL(_lib.__file__, mode=os.RTLD_NOW | os.RTLD_GLOBAL | getattr(os, "RTLD_NOLOAD", 4))
# From now on TensorFlow would abort the process when imported: refuse it.
tf_guard.install()

_tls = threading.local()
# Read inline by the raw_ops fast path (``thread_state.status``, falling back
# to raw_status() when the thread has none yet): saves a call per op.
thread_state = _tls


def status():
    """A TF_Status owned by the calling thread, reset to OK."""
    st = getattr(_tls, "status", None)
    if st is None:
        st = _tls.status = ffi.gc(lib.TF_NewStatus(), lib.TF_DeleteStatus)
    else:
        lib.TF_SetStatus(st, 0, ffi.NULL)
    return st


def raw_status():
    """The calling thread's TF_Status as it is (for C calls that reset it)."""
    st = getattr(_tls, "status", None)
    return st if st is not None else status()


def code_and_message(st) -> tuple[int, str]:
    return lib.TF_GetCode(st), ffi.string(lib.TF_Message(st)).decode("utf-8", "replace")


def set_status(st, code: int, message: str) -> None:
    lib.TF_SetStatus(st, code, message.encode("utf-8", "replace"))


def cstr(p) -> str | None:
    return None if p == ffi.NULL else ffi.string(p).decode("utf-8", "replace")


def _fail_hook(st, exc: BaseException) -> int:
    set_status(st, 13, f"internal error in pluggable while registering: {exc!r}")
    return 0


def _refuse(what: str) -> Callable:
    def refuse(_obj, st) -> int:
        set_status(st, 9, f"{what} registrations are not accepted: the plugin layer "
                   "(pluggable.plugins) is not loaded")
        return 0
    return refuse


def _unavailable(what: str) -> Callable:
    def refuse(*args) -> None:
        set_status(args[-1], 12, f"{what} is not available: the plugin layer "
                   "(pluggable.plugins) is not loaded")
    return refuse


class Hooks:
    """The Python functions behind the core's callbacks. The registration
    hooks take (C object, TF_Status*) and return 1 to keep the registration,
    0 after setting the status. The graph hooks (grappler.h) take the
    arguments of pg_hook_infer_properties / pg_hook_function_library /
    pg_hook_op_def and set the status on failure. ``pluggable.plugins``
    installs them."""

    register_kernel: Callable = staticmethod(_refuse("kernel"))
    register_op: Callable = staticmethod(_refuse("op"))
    infer_properties: Callable = staticmethod(_unavailable("TF_InferStatically"))
    function_library: Callable = staticmethod(_unavailable("TF_NewFunctionLibraryDefinition"))
    op_def: Callable = staticmethod(_unavailable("TF_LookUpOpDef"))


hooks = Hooks()


@ffi.def_extern()
def pg_hook_register_kernel(cdef, st):
    try:
        return hooks.register_kernel(cdef, st)
    except BaseException as exc:  # never let an exception cross into C
        return _fail_hook(st, exc)


@ffi.def_extern()
def pg_hook_register_op(builder, st):
    try:
        return hooks.register_op(builder, st)
    except BaseException as exc:
        return _fail_hook(st, exc)


def _graph_hook_failed(st, what: str, exc: BaseException) -> None:
    set_status(st, 13, f"internal error in pluggable during {what}: {exc!r}")


@ffi.def_extern()
def pg_hook_infer_properties(props, graph, length, st):
    try:
        hooks.infer_properties(props, graph, length, st)
    except BaseException as exc:
        _graph_hook_failed(st, "TF_InferStatically", exc)


@ffi.def_extern()
def pg_hook_function_library(lib_, graph, length, st):
    try:
        hooks.function_library(lib_, graph, length, st)
    except BaseException as exc:
        _graph_hook_failed(st, "TF_NewFunctionLibraryDefinition", exc)


@ffi.def_extern()
def pg_hook_op_def(name, out, st):
    try:
        hooks.op_def(name, out, st)
    except BaseException as exc:
        _graph_hook_failed(st, "TF_LookUpOpDef", exc)


# The core calls up into Python only through its table of host hooks.
_host_hooks = ffi.new("pg_host_hooks*", {
    "register_kernel": lib.pg_hook_register_kernel, "register_op": lib.pg_hook_register_op,
    "infer_properties": lib.pg_hook_infer_properties,
    "function_library": lib.pg_hook_function_library, "op_def": lib.pg_hook_op_def})
lib.pg_set_host_hooks(_host_hooks)

_callbacks: dict[int, object] = {}
_callbacks_lock = threading.Lock()


def make_host_callback(fn) -> tuple[object, object]:
    """Returns (C function, argument) that run `fn()` once from a stream. The
    handle stays referenced here until the callback has run."""
    handle = ffi.new_handle(fn)
    with _callbacks_lock:
        _callbacks[int(ffi.cast("uintptr_t", handle))] = handle
    return lib.pg_hook_host_callback, handle


def drop_host_callback(handle) -> None:
    """Forgets a callback that the plugin refused to enqueue."""
    with _callbacks_lock:
        _callbacks.pop(int(ffi.cast("uintptr_t", handle)), None)


@ffi.def_extern()
def pg_hook_host_callback(arg, st):
    with _callbacks_lock:
        handle = _callbacks.pop(int(ffi.cast("uintptr_t", arg)), None)
    if handle is None:
        return
    try:
        ffi.from_handle(handle)()
    except BaseException as exc:
        set_status(st, 2, f"host callback raised {exc!r}")
