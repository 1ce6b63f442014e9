"""Probe mode: loading a plugin first in a child process
(``python -m pluggable.plugins.probe_child PATH``), so that a plugin that crashes
or hangs while loading is quarantined instead of taking the caller down."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Any

DEFAULT_PROBE_TIMEOUT = 60.0


def signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def no_core_dumps() -> None:  # runs in the probe child before exec
    try:
        import resource
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except Exception:
        pass


def probe(path: str, timeout: float | None = None) -> tuple[bool, str, dict | None]:
    """Loads `path` in a fresh subprocess (``python -m pluggable.check --probe``).
    Returns (survived, reason, child record). `survived` is False when the
    child crashed, hung or failed to report; `reason` then says how."""
    if timeout is None:
        try:
            timeout = float(os.environ.get("PLUGGABLE_PROBE_TIMEOUT", DEFAULT_PROBE_TIMEOUT))
        except ValueError:
            timeout = DEFAULT_PROBE_TIMEOUT
    env = dict(os.environ)
    env["PLUGGABLE_DISABLE_PLUGINS"] = "1"
    env.pop("PLUGGABLE_PROBE_PLUGINS", None)
    cmd = [sys.executable, "-m", "pluggable.plugins.probe_child", path]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout,
                              preexec_fn=no_core_dumps if os.name == "posix" else None)
    except subprocess.TimeoutExpired as exc:
        where = _last_stage(exc.stdout)
        return False, (f"the probe did not finish within {timeout:g} s{where} "
                       "(hang while loading); raise PLUGGABLE_PROBE_TIMEOUT if it is "
                       "only slow"), None
    except OSError as exc:
        return False, f"could not start the probe subprocess: {exc}", None
    where = _last_stage(proc.stdout)
    if proc.returncode < 0:
        return False, f"crashed with {signal_name(-proc.returncode)} while loading{where}", None
    result = None
    for line in proc.stdout.splitlines():
        if line.startswith("PROBE_RESULT "):
            try:
                result = json.loads(line[len("PROBE_RESULT "):])
            except ValueError:
                result = None
    if result is None:
        tail = (proc.stderr or "").strip().splitlines()[-3:]
        return False, (f"exited with status {proc.returncode} while loading{where} without "
                       f"reporting a result{': ' + ' | '.join(tail) if tail else ''}"), None
    return True, "", result


def _last_stage(out: Any) -> str:
    if isinstance(out, bytes):
        out = out.decode("utf-8", "replace")
    stages = [l[len("PROBE_STAGE "):] for l in (out or "").splitlines()
              if l.startswith("PROBE_STAGE ")]
    return f" (in {stages[-1]})" if stages else ""
