"""Probe mode: loading a plugin first in a child process, so that a plugin
that crashes or hangs while loading is quarantined instead of taking the
caller down.

The child loads the very file the parent opened and checked: it inherits the
descriptor. It runs isolated (``python -I``: no current directory, user site
or PYTHON* variables on its path) from the root directory, with the parent's
import path minus the current directory given explicitly, so nothing
planted where the caller happens to be is imported."""
from __future__ import annotations

import os
import signal
import sys
from typing import Any

DEFAULT_PROBE_TIMEOUT = 60.0

# Runs in the isolated child: restores the import path, then loads the
# plugin from the inherited descriptor (argv: path list, fd, display path).
_BOOT = ("import json, sys; sys.path[:0] = json.loads(sys.argv[1]); "
         "from pluggable.plugins import probe_child; "
         "sys.exit(probe_child.child_main(sys.argv[3], int(sys.argv[2])))")


def child_path() -> list[str]:
    """The import path for the probe child: the directory this ``pluggable``
    is imported from, then the caller's absolute path entries except the
    current directory."""
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    cwd = os.getcwd()
    out = [here]
    for p in sys.path:
        if p and os.path.isabs(p) and p not in out and (p != cwd or p == here):
            out.append(p)
    return out


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


def probe(opened: Any, timeout: float | None = None) -> tuple[bool, str, dict | None]:
    """Loads the opened plugin file `opened` (security.OpenedPlugin) in a
    fresh, isolated subprocess. Returns (survived, reason, child record).
    `survived` is False when the child crashed, hung or failed to report;
    `reason` then says how."""
    import json  # (here: most imports never probe, and these two cost a few ms)
    import subprocess
    if timeout is None:
        try:
            timeout = float(os.environ.get("PLUGGABLE_PROBE_TIMEOUT", DEFAULT_PROBE_TIMEOUT))
        except ValueError:
            timeout = DEFAULT_PROBE_TIMEOUT
    env = dict(os.environ)
    env["PLUGGABLE_DISABLE_PLUGINS"] = "1"
    env.pop("PLUGGABLE_PROBE_PLUGINS", None)
    cmd = [sys.executable, "-I", "-c", _BOOT, json.dumps(child_path()), str(opened.fd),
           opened.path]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout,
                              cwd="/", pass_fds=(opened.fd,),
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
