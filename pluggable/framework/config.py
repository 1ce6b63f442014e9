"""Process-wide settings of the runtime (public through ``pg.config``).

``version`` identifies the state that cached dispatch decisions depend on:
the settings and the *generation*, which every registration of an op or a
kernel moves on. Dispatch caches key on it, so a change is seen by the next
call without the registering code knowing about dispatch. A state seen
before in the same generation (a setting turned on and back off) gets its
earlier id again, so the decisions cached for it are found again; ids of
earlier generations never come back."""
from __future__ import annotations

import logging
import threading

_lock = threading.Lock()
_soft_placement = True
_log_placement = False
_tf32 = False
generation = [0]  # moved on by every registration: earlier decisions are stale for good
version = [0]     # the id of (generation, settings); dispatch caches key on it
_ids: dict[tuple, int] = {(0, True, False, False): 0}  # state -> id, this generation
_last_id = [0]

placement_logger = logging.getLogger("pluggable.placement")
_placement_records: list[tuple[str, str, str]] = []
_MAX_RECORDS = 10000


def _bump() -> None:
    """Sets ``version`` to the id of the current state (under _lock)."""
    key = (generation[0], _soft_placement, _log_placement, _tf32)
    v = _ids.get(key)
    if v is None:
        _last_id[0] += 1
        v = _ids[key] = _last_id[0]
    version[0] = v


def bump_version() -> None:
    """Marks cached dispatch decisions as stale (a registration happened)."""
    with _lock:
        generation[0] += 1
        _ids.clear()  # the ids of earlier generations are never given again
        _bump()


def live_versions() -> set:
    """The ids of this generation's states: decisions cached under another
    id are stale."""
    with _lock:
        return set(_ids.values())


def set_soft_device_placement(enabled: bool) -> None:
    """When on (the default), an op whose requested device has no kernel for
    it runs on CPU instead, with the copies inserted and logged. When off,
    such a call raises NotFoundError."""
    global _soft_placement
    with _lock:
        if _soft_placement != bool(enabled):  # an unchanged setting keeps the caches
            _soft_placement = bool(enabled)
            _bump()


def get_soft_device_placement() -> bool:
    return _soft_placement


def set_log_device_placement(enabled: bool) -> None:
    """Logs the device of every op (logger "pluggable.placement", level INFO,
    also printed to stderr when no handler is configured) and keeps the
    records for ``placement_log()``."""
    global _log_placement
    with _lock:
        if _log_placement != bool(enabled):  # an unchanged setting keeps the caches
            _log_placement = bool(enabled)
            _bump()


def get_log_device_placement() -> bool:
    return _log_placement


def enable_tensor_float_32_execution(enabled: bool) -> None:
    """Allows float32 matrix products to use TF32 tensor cores (faster, about
    10 bits of mantissa). Off by default: float32 results are full precision.
    Kernels read it as the boolean attribute ``_allow_tf32``."""
    global _tf32
    with _lock:
        if _tf32 != bool(enabled):  # an unchanged setting keeps the caches
            _tf32 = bool(enabled)
            _bump()


def tensor_float_32_execution_enabled() -> bool:
    return _tf32


def record_placement(op: str, device: str, note: str = "") -> None:
    msg = f"Executing op {op} in device {device}" + (f" ({note})" if note else "")
    with _lock:
        _placement_records.append((op, device, note))
        if len(_placement_records) > _MAX_RECORDS:
            del _placement_records[: _MAX_RECORDS // 2]
    if placement_logger.hasHandlers():
        placement_logger.info(msg)
    else:
        import sys
        print(msg, file=sys.stderr)


def placement_log(clear: bool = False) -> list[tuple[str, str, str]]:
    """The (op, device, note) records logged while placement logging was on."""
    with _lock:
        out = list(_placement_records)
        if clear:
            _placement_records.clear()
    return out
