"""Turning a TF_Status into a typed exception."""
from __future__ import annotations

from .._core import code_and_message, lib
from ..framework import errors


def raise_status(st, what: str, device: str | None = None, op: str | None = None) -> None:
    """Raises the typed error held by `st` (if any), prefixed by `what`."""
    if not lib.TF_GetCode(st):
        return  # OK: the message is not read
    code, msg = code_and_message(st)
    raise errors.make_error(code, f"{what}: {msg}" if what else msg, op=op, device=device)
