"""The part the multi-process benchmarks share (bench_allreduce.py,
bench_ddp.py): the script starts itself once per rank through
``python -m pluggable.distribute.run``, and rank 0's table is printed by the
parent, without the launcher's rank prefixes."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile

_TABLE = "BENCH_TABLE"


def launch_self(script: str, nproc: int, argv: list | None) -> int:
    """Runs `script` with `argv` (None: this process's arguments) on `nproc`
    ranks, prints the table rank 0 wrote, and returns the launcher's exit
    code."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with tempfile.TemporaryDirectory() as tmp:
        table = os.path.join(tmp, "table.md")
        env = dict(os.environ, **{_TABLE: table},
                   PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
        cmd = [sys.executable, "-m", "pluggable.distribute.run", "--nproc", str(nproc),
               os.path.abspath(script)] + (argv if argv is not None else sys.argv[1:])
        code = subprocess.call(cmd, env=env, cwd=root)
        if os.path.exists(table):
            with open(table) as f:
                print("\n" + f.read(), end="")
    return code


def show_table(table: str) -> None:
    """Rank 0's table: to the file the parent prints, or to stdout when the
    script was started by hand under a launcher."""
    if os.environ.get(_TABLE):
        with open(os.environ[_TABLE], "w") as f:
            f.write(table)
    else:
        print(table)
