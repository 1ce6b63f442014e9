"""The plugin's native-stream extension (``pluggable_native_stream.h``).

A plugin that exports ``PG_GetNativeStreamFns`` says what kind of memory and
streams its devices have: ``PG_NATIVE_STREAM_CUDA`` (CUDA device memory, and
the ``cudaStream_t`` behind each SP_Stream, for custom ops and DLPack stream
ordering) or ``PG_NATIVE_STREAM_NONE`` (a host-memory device: its device
addresses are host pointers). A plugin without the extension is neither."""
from __future__ import annotations

from typing import Any, NamedTuple

from .._core import ffi, lib, status
from .extensions import extension
from .status import raise_status

KIND_NONE = 0   # PG_NATIVE_STREAM_NONE: host-memory devices
KIND_CUDA = 1   # PG_NATIVE_STREAM_CUDA
STREAM_AFTER_NATIVE = 0  # PG_ORDER_STREAM_AFTER_NATIVE
NATIVE_AFTER_STREAM = 1  # PG_ORDER_NATIVE_AFTER_STREAM


class NativeStream(NamedTuple):
    kind: int             # PG_NATIVE_STREAM_CUDA = 1
    handle: int           # the cudaStream_t, as an integer
    capability: tuple[int, int] | None


def plugin_fns(dev: Any) -> Any:
    """The PG_NativeStreamFns of `dev`'s plugin (cached per plugin), or None
    when the plugin does not export the extension (version 1 or later)."""
    return extension(dev, "NativeStreamFns")


def memory_kind(dev: Any) -> int | None:
    """KIND_CUDA or KIND_NONE (host memory) as `dev`'s plugin declares it,
    or None when it declares nothing."""
    fns = plugin_fns(dev)
    return None if fns is None else int(fns.kind)


def native_stream(dev: Any) -> NativeStream | None:
    """The native handle behind `dev`'s default stream, or None when its
    plugin has none (no extension, or no native_stream function). Asked of
    the plugin once per device: a device keeps its default stream for life.
    Work enqueued on the handle by another library goes through
    ``handoff(dev)``, which asks again."""
    return per_device(dev, "_native_stream", _ask_native_stream)


def handoff(dev: Any) -> int:
    """The native handle of `dev`'s default stream, for work another library
    enqueues on it right after the call. Asked of the plugin each time: its
    ``native_stream`` puts on the native stream whatever it still holds for
    the stream (the CUDA plugin queues launches for a thread of its own), so
    the work enqueued next comes after everything the device was given
    before. Needs the extension (``native_stream(dev)`` is not None)."""
    fns = plugin_fns(dev)
    st = status()
    h = fns.native_stream(dev._sp, dev._c.stream, st)
    raise_status(st, f"native_stream of {dev.short_name}", dev.name)
    return int(ffi.cast("uintptr_t", h))


def per_device(dev: Any, key: str, ask: Any) -> Any:
    """`ask(dev)`, kept on `dev` under `key` after the first call (for what
    a device keeps for life: its stream, ordinal, an event of its own)."""
    try:
        return dev.__dict__[key]
    except KeyError:
        pass
    value = ask(dev)
    dev.__dict__[key] = value
    return value


def _ask_native_stream(dev: Any) -> NativeStream | None:
    fns = plugin_fns(dev)
    if fns is None or fns.native_stream == ffi.NULL:
        return None
    h = handoff(dev)
    cap = None
    if fns.compute_capability != ffi.NULL:
        mj, mn, o = ffi.new("int*"), ffi.new("int*"), ffi.new("int*")
        if fns.compute_capability(dev._sp, mj, mn, o):
            cap = (int(mj[0]), int(mn[0]))
    return NativeStream(int(fns.kind), h, cap)


def native_ordinal(dev: Any) -> int:
    """The native device ordinal of `dev` (CUDA device N), else its ordinal
    (asked of the plugin once per device)."""
    return per_device(dev, "_native_ordinal", _ask_native_ordinal)


def _ask_native_ordinal(dev: Any) -> int:
    fns = plugin_fns(dev)
    if fns is not None and fns.compute_capability != ffi.NULL:
        mj, mn, o = ffi.new("int*"), ffi.new("int*"), ffi.new("int*")
        if fns.compute_capability(dev._sp, mj, mn, o):
            return int(o[0])
    return int(dev.ordinal)


def order_fn(dev: Any) -> Any:
    """The ``order_native`` function of `dev`'s plugin (extension version
    2), or None where the plugin has none."""
    return per_device(dev, "_order_native", _ask_order_fn)


def _ask_order_fn(dev: Any) -> Any:
    fns = plugin_fns(dev)
    if fns is None or fns.version < 2 or fns.order_native == ffi.NULL:
        return None
    return fns.order_native


def order(dev: Any, native: int, how: int) -> str | None:
    """Orders `dev`'s stream and the native stream `native` (a handle, or 1 /
    2 for CUDA's legacy / per-thread default stream) through the plugin:
    `how` is STREAM_AFTER_NATIVE or NATIVE_AFTER_STREAM. Returns None when
    ordered, else why not (the plugin has no ``order_native``, or its
    message), for the caller to order the streams another way."""
    fn = order_fn(dev)
    if fn is None:
        return "the plugin has no order_native"
    st = status()
    fn(dev._sp, dev._c.stream, ffi.cast("void*", native), how, st)
    if lib.TF_GetCode(st) == 0:
        return None
    return ffi.string(lib.TF_Message(st)).decode(errors="replace")
