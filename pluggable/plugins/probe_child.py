"""The probe child (``python -m pluggable.plugins.probe_child PATH``): loads
one plugin in this fresh process and prints its record as a protocol line,
and before each loading step that runs plugin code the step, so that the
parent (``probe.probe``) can say where a crash happened."""
from __future__ import annotations

import json
import os
import sys

from . import loader


def _emit(line: str) -> None:
    """Writes a protocol line at once (it must survive a crash right after)."""
    os.write(1, (line + "\n").encode("utf-8", "replace"))


def child_main(path: str) -> int:
    """The probe child: loads `path` in this fresh process and prints its
    record (and, before each step that runs plugin code, the step)."""
    loader.stage_hook = lambda what: _emit(f"PROBE_STAGE {what}")
    rec = loader.load_plugin(path, probe=False, source="probe")
    loader.stage_hook = None
    _emit("PROBE_RESULT " + json.dumps(rec.to_dict()))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python -m pluggable.plugins.probe_child PLUGIN.so", file=sys.stderr)
        sys.exit(2)
    sys.exit(child_main(sys.argv[1]))
