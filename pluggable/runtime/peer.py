"""The plugin's peer-copy extension (``pluggable_peer.h``).

A plugin that exports ``PG_GetPeerFns`` copies directly between two of its
devices (on GPUs: ``cudaMemcpyPeerAsync`` over NVLink or PCIe peer-to-peer
after ``cudaDeviceEnablePeerAccess``). ``Device.copy_in`` uses it for a
tensor on another device of the same plugin; without it, such copies go
through the core's device-to-device copy (``memcpy_dtod``) as before.
"""
from __future__ import annotations

from typing import Any

from .._core import ffi, lib, status
from .extensions import extension
from .native_stream import native_ordinal as _native_ordinal
from .status import raise_status

def plugin_fns(dev: Any) -> Any:
    """The PG_PeerFns of `dev`'s plugin (cached per plugin), or None when the
    plugin does not export the extension (version 1 or later)."""
    return extension(dev, "PeerFns")


def can_access_peer(src: Any, dst: Any) -> bool:
    """Whether `dst` reads `src`'s memory directly (both devices of one
    plugin with the extension); False otherwise."""
    if src.plugin is not dst.plugin:
        return False
    fns = plugin_fns(dst)
    if fns is None or fns.can_access_peer == ffi.NULL:
        return False
    return bool(fns.can_access_peer(_native_ordinal(src), _native_ordinal(dst)))


def supports_peer_copy(t: Any, dst: Any) -> bool:
    """Whether copying tensor `t` (on a device) to device `dst` can use the
    plugin's memcpy_peer: another device of the same plugin, and `t` is not
    a value captured into a device graph (the core's copy refuses those)."""
    src = t._dev
    if src is dst or src.plugin is None or src.plugin is not dst.plugin:
        return False
    if lib.pg_tensor_captured(t._h):
        return False
    fns = plugin_fns(dst)
    return fns is not None and fns.memcpy_peer != ffi.NULL


def copy_tensor_handle(t: Any, dst: Any) -> Any:
    """A new TF_Tensor handle on device `dst` holding the value of tensor `t`
    (on another device of the same plugin), copied with memcpy_peer on
    `dst`'s stream after `t`'s producer; complete on return."""
    src = t._dev
    st = status()
    lib.pg_device_sync(src._c, st)
    if not lib.TF_GetCode(st):
        lib.pg_tensor_check(t._h, st)
    raise_status(st, f"peer copy from {src.short_name}", src.name)
    dims = ffi.new("int64_t[]", list(t._shape) or [0])
    h = lib.pg_device_alloc_tensor(dst._c, t._dtype.enum, dims, len(t._shape), st)
    raise_status(st, f"peer copy to {dst.short_name}", dst.name)
    n = lib.TF_TensorByteSize(h)
    if n:
        src_mem = ffi.new("SP_DeviceMemoryBase*")
        dst_mem = ffi.new("SP_DeviceMemoryBase*")
        lib.pg_tensor_mem(t._h, src_mem)
        lib.pg_tensor_mem(h, dst_mem)
        fns = plugin_fns(dst)
        fns.memcpy_peer(_native_ordinal(dst), dst_mem.opaque, _native_ordinal(src),
                        src_mem.opaque, n, dst._c.stream, st)
        if not lib.TF_GetCode(st):
            lib.pg_device_sync(dst._c, st)
        if lib.TF_GetCode(st):
            lib.TF_DeleteTensor(h)
            raise_status(st, f"peer copy {src.short_name} -> {dst.short_name}", dst.name)
    return h
