"""Launches a script on several processes of this host, like torchrun:

    python -m pluggable.distribute.run --nproc 2 train.py --epochs 3

Each process runs ``python script.py args...`` with RANK and LOCAL_RANK
(0..N-1), WORLD_SIZE and LOCAL_WORLD_SIZE (N), MASTER_ADDR and MASTER_PORT
(a free port unless ``--master-port`` is given) and PLUGGABLE_STORE_SECRET
(the group's shared secret: the one exported, else 32 random bytes, hex) in
its environment, which ``pg.distribute.init_process_group()`` reads. Their output is streamed with
each line prefixed by ``[rank R]``. When one process fails, the others are
terminated and the launcher exits with that process's exit code (1 for a
signal), naming the rank; when all succeed it exits 0.
"""
from __future__ import annotations

import argparse
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import BinaryIO, Sequence

GRACE_SECONDS = 5.0      # between SIGTERM and SIGKILL of the survivors


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on `host` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _pump(src: BinaryIO, dst: BinaryIO, prefix: bytes, lock: threading.Lock) -> None:
    """Copies `src` to `dst` line by line, each line prefixed."""
    for line in iter(src.readline, b""):
        if not line.endswith(b"\n"):
            line += b"\n"
        with lock:
            dst.write(prefix + line)
            dst.flush()
    src.close()


SECRET_ENV = "PLUGGABLE_STORE_SECRET"    # as pluggable.distribute.store reads it


def store_secret() -> str:
    """The group's secret: the one exported, else a fresh random one (hex)."""
    return os.environ.get(SECRET_ENV) or secrets.token_bytes(32).hex()


def _env(rank: int, nproc: int, addr: str, port: int, secret: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(nproc),
               LOCAL_WORLD_SIZE=str(nproc), MASTER_ADDR=addr, MASTER_PORT=str(port),
               PYTHONUNBUFFERED="1")
    env[SECRET_ENV] = secret
    return env


def _stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM to every live process, SIGKILL to those alive GRACE_SECONDS later."""
    live = [p for p in procs if p.poll() is None]
    for p in live:
        p.terminate()
    deadline = time.monotonic() + GRACE_SECONDS
    for p in live:
        try:
            p.wait(max(deadline - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def launch(command: Sequence[str], nproc: int, master_addr: str = "127.0.0.1",
           master_port: int | None = None, out: BinaryIO | None = None,
           err: BinaryIO | None = None) -> int:
    """Runs `command` (argv) `nproc` times as ranks 0..nproc-1; returns 0
    when all exit 0, else the first failure's exit code (1 for a signal)
    after terminating the others."""
    out = out or sys.stdout.buffer
    err = err or sys.stderr.buffer
    port = master_port or free_port(master_addr)
    secret = store_secret()
    lock = threading.Lock()
    procs, pumps = [], []
    for rank in range(nproc):
        p = subprocess.Popen(list(command), env=_env(rank, nproc, master_addr, port, secret),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        procs.append(p)
        prefix = f"[rank {rank}] ".encode()
        for src, dst in ((p.stdout, out), (p.stderr, err)):
            t = threading.Thread(target=_pump, args=(src, dst, prefix, lock), daemon=True)
            t.start()
            pumps.append(t)
    code = _watch(procs, err, lock)
    for t in pumps:
        t.join(5.0)
    return code


def _watch(procs: list[subprocess.Popen], err: BinaryIO, lock: threading.Lock) -> int:
    try:
        while True:
            codes = [p.poll() for p in procs]
            failed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                rank, code = failed[0]
                _stop(procs)
                why = f"signal {-code}" if code < 0 else f"exit code {code}"
                with lock:
                    err.write(f"pluggable.distribute.run: rank {rank} failed ({why}); "
                              f"terminated the other {len(procs) - 1} process(es)\n".encode())
                    err.flush()
                return code if code > 0 else 1
            if all(c == 0 for c in codes):
                return 0
            time.sleep(0.05)
    except KeyboardInterrupt:
        _stop(procs)
        return 130


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt    # SIGTERM: stop the ranks as for Ctrl-C


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pluggable.distribute.run",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--nproc", "--nproc-per-node", type=int, required=True,
                   help="the number of processes (ranks) to start")
    p.add_argument("--master-addr", default="127.0.0.1", help="where rank 0 hosts the store")
    p.add_argument("--master-port", type=int, default=None,
                   help="the store's port (default: a free one)")
    p.add_argument("-m", dest="module", default=None,
                   help="run a module (python -m MODULE) instead of a script")
    p.add_argument("script", nargs="?", help="the Python script every process runs")
    p.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    a = p.parse_args(argv)
    if a.nproc < 1:
        p.error(f"--nproc must be at least 1, got {a.nproc}")
    if a.module:
        command = [sys.executable, "-m", a.module] + ([a.script] if a.script else []) + a.args
    elif a.script:
        command = [sys.executable, a.script] + a.args
    else:
        p.error("give a script (or -m MODULE) to run")
    signal.signal(signal.SIGTERM, _interrupt)
    return launch(command, a.nproc, a.master_addr, a.master_port)


if __name__ == "__main__":
    sys.exit(main())
