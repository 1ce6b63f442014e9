"""The security policy applied before a plugin file is opened: the
allow-list (PLUGGABLE_PLUGIN_ALLOWLIST) and the refusal of files others
could replace."""
from __future__ import annotations

import os
import stat


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def allowlist() -> list[str] | None:
    """The resolved directories of PLUGGABLE_PLUGIN_ALLOWLIST, or None when
    the variable is not set (every location allowed)."""
    raw = os.environ.get("PLUGGABLE_PLUGIN_ALLOWLIST")
    if raw is None:
        return None
    return [os.path.realpath(d) for d in raw.split(os.pathsep) if d and os.path.isabs(d)]


def _inside(path: str, directory: str) -> bool:
    try:
        return os.path.commonpath([path, directory]) == directory
    except ValueError:
        return False


def policy_refusal(given: str, real: str) -> str | None:
    """Why the security policy forbids opening `real` (the resolved path of
    `given`), or None if it may be opened. Nothing is opened here."""
    allowed = allowlist()
    if allowed is not None and not any(_inside(real, d) for d in allowed):
        via = f" (through the symlink {given})" if os.path.abspath(given) != real else ""
        return (f"{real}{via} is outside the directories of PLUGGABLE_PLUGIN_ALLOWLIST "
                f"({os.pathsep.join(allowed) or 'empty'}): move the plugin into one of "
                "them or add its directory to the list")
    if env_flag("PLUGGABLE_ALLOW_INSECURE_PLUGINS"):
        return None
    try:
        st = os.stat(real)
        parent = os.stat(os.path.dirname(real))
    except OSError as exc:
        return f"cannot inspect {real}: {exc.strerror}"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return (f"{real} is writable by group or others (mode {stat.filemode(st.st_mode)}), so "
                f"another user could replace its code: run 'chmod go-w {real}' (or set "
                "PLUGGABLE_ALLOW_INSECURE_PLUGINS=1 to accept the risk)")
    if parent.st_mode & stat.S_IWOTH:
        d = os.path.dirname(real)
        return (f"{real} is in the world-writable directory {d}, where another user could "
                "replace it: install it in a directory only its owner can write to (or set "
                "PLUGGABLE_ALLOW_INSECURE_PLUGINS=1 to accept the risk)")
    return None
