"""The TCP store against hostile local traffic: the shared secret and its
handshake (a wrong or missing secret is refused, and an unauthenticated
connection never marks a rank dead), size and memory limits with typed
errors, read timeouts, bounded connections, an accept loop that outlives
EMFILE and thread-start failures, loopback binding by default, a
legitimate client that keeps working while the port is hammered, and a
seeded fuzz of the frame parser and the connection handler."""
from __future__ import annotations

import os
import random
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import pluggable as pg
from pluggable import errors
from pluggable.distribute import run, store
from pluggable.distribute.run import free_port
from pluggable.distribute.store import StoreLimits, TCPStore

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECRET = os.urandom(16).hex()


@pytest.fixture(autouse=True)
def _secret(monkeypatch):
    monkeypatch.setenv(store.SECRET_ENV, SECRET)
    monkeypatch.delenv(store.INSECURE_ENV, raising=False)


@pytest.fixture
def pair():
    s0 = TCPStore("127.0.0.1", 0, 0, 2, is_server=True, timeout=10)
    s1 = TCPStore("127.0.0.1", s0.port, 1, 2, timeout=10)
    yield s0, s1
    s1.close()
    s0.close()


def raw(port: int, authenticate: bool = True, key: bytes = SECRET.encode()) -> socket.socket:
    """A bare connection to the store (authenticated with `key`)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    if authenticate:
        store._authenticate(sock, key, 10.0, "test")
    sock.settimeout(10)
    return sock


def ask(sock: socket.socket, frame: bytes) -> tuple[int, list[bytes]]:
    sock.sendall(frame)
    return store._unpack(store._recv_frame(sock))


def closed_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the peer closes `sock` within `seconds` (what it sends first is skipped)."""
    sock.settimeout(seconds)
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            if not sock.recv(65536):
                return True
    except socket.timeout:
        return False
    except OSError:
        return True
    return False


def still_healthy(s0: TCPStore, s1: TCPStore) -> None:
    """Both ranks serve, and neither is taken for dead."""
    value = os.urandom(64)
    key = f"health-{value.hex()[:8]}"
    threading.Timer(0.05, s1.set, (key, value)).start()
    assert s0.get(key, timeout=10) == value
    done = []
    t = threading.Thread(target=lambda: done.append(s1.barrier("health", 10)))
    t.start()
    s0.barrier("health", 10)
    t.join(10)
    assert done == [None]
    assert s0._server.dead == set()


# ------------------------------------------------------------------ the secret

def test_a_missing_secret_is_refused_unless_a_group_of_one_or_loopback_opt_out(monkeypatch):
    monkeypatch.delenv(store.SECRET_ENV)
    with pytest.raises(errors.UnauthenticatedError, match="PLUGGABLE_STORE_SECRET is not set"):
        TCPStore("127.0.0.1", 0, 0, 2, is_server=True, timeout=5)
    with pytest.raises(errors.UnauthenticatedError, match="export PLUGGABLE_STORE_SECRET"):
        TCPStore("127.0.0.1", free_port(), 1, 2, timeout=5)
    # a group of one: its only client is this process, which makes up a secret
    alone = TCPStore("127.0.0.1", 0, 0, 1, is_server=True, timeout=5)
    alone.set("k", b"v")
    assert alone.get("k") == b"v"
    with pytest.raises(errors.UnauthenticatedError, match="differs"):
        raw(alone.port, key=b"")           # and nobody else knows it, not even the empty key
    alone.close()
    # the opt-out holds on loopback only
    monkeypatch.setenv(store.INSECURE_ENV, "1")
    with pytest.raises(errors.UnauthenticatedError, match="loopback"):
        TCPStore("0.0.0.0", 0, 0, 2, is_server=True, timeout=5)
    s0 = TCPStore("127.0.0.1", 0, 0, 2, is_server=True, timeout=5)
    s1 = TCPStore("127.0.0.1", s0.port, 1, 2, timeout=5)
    still_healthy(s0, s1)
    s1.close()
    s0.close()
    with pytest.raises(errors.InvalidArgumentError, match="at least 16 bytes"):
        TCPStore("127.0.0.1", 0, 0, 2, is_server=True, timeout=5, secret="short")


def test_a_wrong_secret_is_refused_and_harms_no_rank(pair):
    s0, s1 = pair
    with pytest.raises(errors.UnauthenticatedError, match="secret differs"):
        TCPStore("127.0.0.1", s0.port, 1, 2, timeout=5, secret=os.urandom(16))
    with pytest.raises(errors.UnauthenticatedError, match="secret differs"):
        raw(s0.port, key=os.urandom(32))
    still_healthy(s0, s1)


def test_a_store_that_does_not_know_the_secret_is_not_trusted():
    """The client checks the store's proof too: an impostor on the port
    that accepts any answer is refused."""
    listener = socket.create_server(("127.0.0.1", 0))

    def impostor():
        conn, _ = listener.accept()
        with conn:
            conn.sendall(store._pack(0, [store._MAGIC, os.urandom(32)]))
            store._recv_frame(conn)
            conn.sendall(store._pack(0, [os.urandom(32)]))
            conn.recv(1)
    threading.Thread(target=impostor, daemon=True).start()
    with pytest.raises(errors.UnauthenticatedError, match="without knowing the group's secret"):
        TCPStore("127.0.0.1", listener.getsockname()[1], 1, 2, timeout=5)
    listener.close()


def test_unauthenticated_requests_are_never_served_and_kill_no_rank(pair):
    s0, s1 = pair
    s0.set("backend/host/token", b"0123456789abcdef")
    hello = store._pack(store._HELLO, [b"1", b"2"])
    get = store._pack(store._GET, [b"backend/host/token", b"1.0"])
    put = store._pack(store._SET, [b"backend/host/token", b"forged"])
    for frames in ([hello], [hello, get], [put], [get]):
        sock = raw(s0.port, authenticate=False)
        sock.sendall(b"".join(frames))
        status, fields = store._unpack(store._recv_frame(sock))     # the challenge only
        assert fields[0] == store._MAGIC
        assert closed_within(sock, 10)                              # then dropped
        sock.close()
    # a HELLO and a hang-up without reading anything
    for _ in range(5):
        with socket.create_connection(("127.0.0.1", s0.port)) as sock:
            sock.sendall(hello)
    assert s1.get("backend/host/token") == b"0123456789abcdef"
    still_healthy(s0, s1)
    # with the secret, a second HELLO for a live rank is refused: it cannot take rank 1's place
    sock = raw(s0.port)
    status, fields = ask(sock, hello)
    assert status == errors.AlreadyExistsError.code and b"rank 1 is connected" in fields[0]
    sock.close()
    still_healthy(s0, s1)


# ------------------------------------------------------------------ limits

def test_values_and_the_total_are_bounded_with_typed_errors(monkeypatch):
    monkeypatch.setenv("PLUGGABLE_STORE_MAX_VALUE", "1000")
    monkeypatch.setenv("PLUGGABLE_STORE_MAX_BYTES", "20000")
    s0 = TCPStore("127.0.0.1", 0, 0, 2, is_server=True, timeout=10)
    s1 = TCPStore("127.0.0.1", s0.port, 1, 2, timeout=10)
    try:
        assert s0._server.limits == StoreLimits(1000, 20000, 72)
        s1.set("big", os.urandom(1000))
        with pytest.raises(errors.ResourceExhaustedError, match="PLUGGABLE_STORE_MAX_VALUE"):
            s1.set("bigger", os.urandom(1001))
        with pytest.raises(errors.ResourceExhaustedError, match="PLUGGABLE_STORE_MAX_VALUE"):
            s1.set("huge", os.urandom(200_000))       # over the frame limit: skipped, not kept
        values = {}
        with pytest.raises(errors.ResourceExhaustedError, match="PLUGGABLE_STORE_MAX_BYTES"):
            for i in range(100):
                values[f"k{i}"] = os.urandom(900)
                s1.set(f"k{i}", values[f"k{i}"])
        assert 15 <= i < 25, i
        del values[f"k{i}"]
        held = s0._server.held
        assert held <= 20000
        for k, v in values.items():          # the connection still serves, nothing lost
            assert s0.get(k) == v
        s1.set("k0", b"x")                   # a smaller value frees room
        assert s0._server.held < held
        still_healthy(s0, s1)
        # a length prefix of 1 GiB is answered at once, before its bytes are sent
        sock = raw(s0.port)
        sock.sendall(struct.pack("!I", 1 << 30))
        status, fields = store._unpack(store._recv_frame(sock))
        assert status == errors.ResourceExhaustedError.code
        assert b"PLUGGABLE_STORE_MAX_VALUE" in fields[0]
        sock.close()
        assert s0._server.held < held
    finally:
        s1.close()
        s0.close()
    monkeypatch.setenv("PLUGGABLE_STORE_MAX_BYTES", "lots")
    with pytest.raises(errors.InvalidArgumentError, match="PLUGGABLE_STORE_MAX_BYTES='lots'"):
        TCPStore("127.0.0.1", 0, 0, 2, is_server=True, timeout=10)


def test_slow_clients_are_dropped_and_handshakes_are_bounded(pair, monkeypatch):
    s0, s1 = pair
    monkeypatch.setattr(store, "AUTH_TIMEOUT", 0.5)
    monkeypatch.setattr(store, "FRAME_TIMEOUT", 0.5)
    monkeypatch.setattr(store, "MAX_PENDING", 8)
    # a handshake that trickles in, and one that never starts
    trickle, silent = raw(s0.port, authenticate=False), raw(s0.port, authenticate=False)
    trickle.sendall(b"\x00")
    assert closed_within(trickle, 5) and closed_within(silent, 5)
    # an authenticated client that starts a frame and stalls
    stalled = raw(s0.port)
    stalled.sendall(struct.pack("!I", 100) + b"\x02")
    assert closed_within(stalled, 5)
    # idle between frames is fine for an authenticated client
    idle = raw(s0.port)
    time.sleep(1.0)
    assert ask(idle, store._pack(store._BYE, []))[0] == 0
    # more open handshakes than MAX_PENDING: the oldest go, a real client still gets in
    crowd = [raw(s0.port, authenticate=False) for _ in range(40)]
    late = raw(s0.port)                            # raises unless the handshake completes
    assert ask(late, store._pack(store._BYE, []))[0] == 0
    assert sum(closed_within(c, 0.05) for c in crowd) >= 40 - 8 - 1
    for sock in crowd + [trickle, silent, stalled, idle, late]:
        sock.close()
    still_healthy(s0, s1)


def test_connections_are_bounded(monkeypatch):
    monkeypatch.setenv("PLUGGABLE_STORE_MAX_CONNECTIONS", "3")
    s0 = TCPStore("127.0.0.1", 0, 0, 2, is_server=True, timeout=10)
    s1 = TCPStore("127.0.0.1", s0.port, 1, 2, timeout=10)
    third = raw(s0.port)
    with pytest.raises(errors.ResourceExhaustedError, match="PLUGGABLE_STORE_MAX_CONNECTIONS"):
        raw(s0.port)
    third.close()
    deadline = time.monotonic() + 10
    while True:                          # the slot frees once the server sees the close
        try:
            raw(s0.port).close()
            break
        except errors.ResourceExhaustedError:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    still_healthy(s0, s1)
    s1.close()
    s0.close()


def test_the_accept_loop_survives_running_out_of_descriptors(tmp_path):
    """RLIMIT_NOFILE lowered in a child process until accept() fails with
    EMFILE: once descriptors are free again, a rank still connects."""
    script = tmp_path / "emfile.py"
    script.write_text(textwrap.dedent("""
        import errno, logging, os, resource, socket, sys
        from pluggable.distribute.store import TCPStore
        seen = []
        class Catch(logging.Handler):
            def emit(self, record):
                seen.append(record.getMessage())
        logging.getLogger("pluggable.distribute.store").addHandler(Catch())
        s0 = TCPStore("127.0.0.1", 0, 0, 2, is_server=True, timeout=10)
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 8, hard))
        socks = []
        try:
            while True:
                socks.append(socket.create_connection(("127.0.0.1", s0.port)))
        except OSError as e:
            assert e.errno == errno.EMFILE, e
        import time
        deadline = time.monotonic() + 10
        while not any("cannot accept" in m for m in seen):
            assert time.monotonic() < deadline, seen
            time.sleep(0.05)
        for s in socks:
            s.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        s1 = TCPStore("127.0.0.1", s0.port, 1, 2, timeout=10)
        s1.set("k", b"after")
        assert s0.get("k") == b"after"
        s1.close(); s0.close()
        print("OK")
    """))
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout + proc.stderr


def test_the_accept_loop_survives_thread_start_failures(pair, monkeypatch):
    s0, s1 = pair
    real, failures = store._start_thread, []

    def flaky(target, args, name):
        if len(failures) < 3:
            failures.append(name)
            raise RuntimeError("can't start new thread")
        real(target, args, name)
    monkeypatch.setattr(store, "_start_thread", flaky)
    sock = raw(s0.port, authenticate=False)
    sock.close()
    watched = s1.watch(lambda ranks, why: None)       # a new connection: retried until served
    assert len(failures) == 3
    watched.close()
    still_healthy(s0, s1)


# ------------------------------------------------------------------ binding

def test_the_store_binds_loopback_unless_told_otherwise(tmp_path, monkeypatch):
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR"):
        monkeypatch.delenv(var, raising=False)
    g = pg.distribute.init_process_group(rank=0, world_size=1, master_port=free_port(),
                                         timeout=10)
    try:
        assert g.store._server.listener.getsockname()[0] == "127.0.0.1"
    finally:
        pg.distribute.destroy_process_group()
    # the launcher: loopback, and a fresh secret per run unless one is exported
    monkeypatch.delenv(store.SECRET_ENV)
    script = tmp_path / "env.py"
    script.write_text("import os\nprint(os.environ['MASTER_ADDR'], "
                      "os.environ['PLUGGABLE_STORE_SECRET'])\n")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))

    def secrets_of_one_run(**extra):
        proc = subprocess.run([sys.executable, "-m", "pluggable.distribute.run", "--nproc", "2",
                               str(script)], env=dict(env, **extra), capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        lines = [ln.split("] ", 1)[1].split() for ln in proc.stdout.splitlines()]
        assert len(lines) == 2 and all(addr == "127.0.0.1" for addr, _ in lines), lines
        assert lines[0][1] == lines[1][1]
        return lines[0][1]
    first, second = secrets_of_one_run(), secrets_of_one_run()
    assert first != second and len(bytes.fromhex(first)) == 32
    assert secrets_of_one_run(PLUGGABLE_STORE_SECRET=SECRET) == SECRET


# ------------------------------------------------------------------ hostile traffic

def _hostile(port: int, stop: threading.Event, kind: int, seed: int) -> None:
    """One attacker: at most 8 connections of its own open at once."""
    rng, mine = random.Random(seed), []
    while not stop.is_set():
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=1)
            if kind == 0:                                  # garbage
                sock.sendall(rng.randbytes(rng.randrange(1, 2000)))
            elif kind == 1:                                # a huge length prefix, then silence
                sock.sendall(struct.pack("!I", (1 << 30) + rng.randrange(1 << 20)))
            elif kind == 2:                                # half-open: connect and sit
                pass
            else:                                          # a HELLO as rank 1, hang up
                sock.sendall(store._pack(store._HELLO, [b"1", b"2"]))
                sock.close()
                continue
            mine.append(sock)
            if len(mine) >= 8:
                mine.pop(0).close()
        except OSError:
            time.sleep(0.01)
    for sock in mine:
        sock.close()


def test_a_legitimate_client_works_while_the_port_is_hammered(pair):
    s0, s1 = pair
    stop = threading.Event()
    attackers = [threading.Thread(target=_hostile, args=(s0.port, stop, k % 4, k), daemon=True)
                 for k in range(8)]
    for t in attackers:
        t.start()
    rng = random.Random()
    slowest, t0 = 0.0, time.monotonic()
    try:
        time.sleep(0.3)
        for i in range(150):
            value = rng.randbytes(rng.randrange(1, 4096))
            start = time.monotonic()
            s1.set(f"v{i}", value)
            assert s0.get(f"v{i}", timeout=30) == value
            assert s0.add("count", 1) == i + 1
            slowest = max(slowest, time.monotonic() - start)
            assert time.monotonic() - t0 < 60, f"150 rounds took over 60 s (slowest {slowest})"
        # a new rank's connection also gets through the crowd
        watch = s1.watch(lambda ranks, why: None)
        watch.close()
    finally:
        stop.set()
        for t in attackers:
            t.join(10)
    still_healthy(s0, s1)


# ------------------------------------------------------------------ fuzz

def _valid_frames(rng: random.Random) -> list[bytes]:
    key = rng.choice([b"k", b"backend/host/addr/0", "ключ".encode(), b"x" * 100])
    t = rng.choice([b"0.01", b"0.002", b"1e-3"])
    return [store._pack(store._HELLO, [b"1", b"2"]),
            store._pack(store._SET, [key, rng.randbytes(rng.randrange(0, 64))]),
            store._pack(store._GET, [b"there", t]),
            store._pack(store._GET, [key, t]),
            store._pack(store._ADD, [b"n", str(rng.randrange(-9, 9)).encode()]),
            store._pack(store._BARRIER, [b"fuzz", t]),
            store._pack(store._WATCH, [b"1"]),
            store._pack(store._BYE, [])]


def _mutate(frame: bytes, rng: random.Random) -> bytes:
    """A frame (length prefix included) with up to three mutations (none
    for one frame in four, so that the handler also sees valid requests)."""
    b = bytearray(frame)
    for _ in range(rng.choice([0, 1, 2, 3])):
        m = rng.randrange(8)
        if m == 0 and len(b) > 4:                        # flip bytes of the body
            for _ in range(rng.randrange(1, 4)):
                b[rng.randrange(4, len(b))] ^= 1 << rng.randrange(8)
        elif m == 1 and len(b) > 5:                      # truncate the body
            b = b[:rng.randrange(5, len(b) + 1)]
        elif m == 2 and len(b) > 9:                      # a huge or wrong field length
            pos = rng.randrange(5, len(b) - 3)
            b[pos:pos + 4] = struct.pack("!I", rng.choice([0, 1 << 30, (1 << 32) - 1,
                                                           rng.randrange(256)]))
        elif m == 3 and len(b) > 4:                      # another command byte
            b[4] = rng.randrange(256)
        elif m == 4:                                     # an extra field
            b += struct.pack("!I", 3) + rng.randbytes(3)
        elif m == 5 and len(b) > 5:                      # a field of another type
            junk = rng.choice([b"nan", b"inf", b"-1", b"1e999", b"\xff\xfe", b"",
                               b"99999999999999999999999", b"1_0", b" 1"])
            b = bytearray(b[:5]) + struct.pack("!I", len(junk)) + junk + b[5:]
        elif m == 6:                                     # random bytes appended
            b += rng.randbytes(rng.randrange(1, 16))
        else:                                            # garbage body
            b = b[:5] + bytearray(rng.randbytes(rng.randrange(0, 40)))
    body = bytes(b[4:])
    return struct.pack("!I", len(body)) + body           # the outer length fits the body


def test_fuzz_the_frame_parser_and_the_connection_handler(pair):
    s0, s1 = pair
    rng = random.Random(20240611)
    # the parser alone: valid or _Malformed, nothing else
    parsed = malformed = 0
    for _ in range(4000):
        frame = _mutate(rng.choice(_valid_frames(rng)), rng)
        try:
            store._parse_request(frame[4:])
            parsed += 1
        except store._Malformed:
            malformed += 1
    assert parsed > 500 and malformed > 500, (parsed, malformed)

    # the handler: every frame answered with a status, within a bound
    codes = {0, errors.InvalidArgumentError.code, errors.DeadlineExceededError.code,
             errors.AlreadyExistsError.code, errors.FailedPreconditionError.code,
             errors.ResourceExhaustedError.code}
    start = time.monotonic()

    def rank1():
        # rank 1 is free again once the server has handled the last BYE's
        # close, which can come after the client sees the socket shut
        deadline = time.monotonic() + 5
        while True:
            sock = raw(s0.port)
            status = ask(sock, store._pack(store._HELLO, [b"1", b"2"]))[0]
            if status == 0:
                return sock
            sock.close()
            assert status == errors.AlreadyExistsError.code and time.monotonic() < deadline, \
                status
            time.sleep(0.01)
    s1.close()                                   # the fuzzer speaks as rank 1 instead
    sock = rank1()
    for _ in range(1500):
        frame = _mutate(rng.choice(_valid_frames(rng)), rng)
        try:
            cmd, args = store._parse_request(frame[4:])
        except store._Malformed:
            cmd, args = None, []
        if cmd in (store._GET, store._BARRIER) and args[1] > 0.05:
            continue                             # a legitimate long wait, not a hang
        status, fields = ask(sock, frame)
        assert status in codes, (frame, status, fields)
        if cmd == store._BYE:
            assert closed_within(sock, 5)
            sock.close()
            sock = rank1()
    # frames whose outer length lies, and mutated handshakes, on connections of their own
    for _ in range(150):
        frame = bytearray(_mutate(rng.choice(_valid_frames(rng)), rng))
        frame[:4] = struct.pack("!I", rng.choice([len(frame), len(frame) + 50, 1 << 30]))
        with raw(s0.port) as other:
            other.sendall(frame)
        with raw(s0.port, authenticate=False) as stranger:
            stranger.settimeout(5)
            store._recv_frame(stranger)
            stranger.sendall(_mutate(store._pack(store._AUTH, [os.urandom(32)] * 2), rng))
            assert closed_within(stranger, 5)
    assert time.monotonic() - start < 60
    # the store still serves; no rank was taken for dead; nothing is held for frames
    ask(sock, store._pack(store._BYE, []))
    sock.close()
    pair_s1 = TCPStore("127.0.0.1", s0.port, 1, 2, timeout=10)
    try:
        still_healthy(s0, pair_s1)
        deadline = time.monotonic() + 10
        while s0._server.conns != 2:             # the fuzzer's connections have all gone
            assert time.monotonic() < deadline, s0._server.conns
            time.sleep(0.05)
        stored = sum(len(k.encode()) + len(v) + store._OVERHEAD for k, v in s0._server.data.items())
        barriers = sum(len(k.encode()) + store._OVERHEAD for k in s0._server.barriers)
        assert s0._server.held == stored + barriers
    finally:
        pair_s1.close()


# ------------------------------------------------------------------ host backend listener

def _host_rank0(s0: TCPStore, prefix: str, out: dict) -> threading.Thread:
    """Rank 0 of a host backend of two ranks, set up on a thread (its
    listener waits for rank 1)."""
    from pluggable.distribute.host import HostBackend

    def start():
        try:
            out[0] = HostBackend(s0, prefix, 0, 2, 20.0)
        except Exception as exc:  # reported by the test
            out[0] = exc
    t = threading.Thread(target=start)
    t.start()
    return t


def test_the_host_backend_listener_drops_silent_and_wrong_peers(pair, monkeypatch, rng):
    """Rank 0's peer listener drops a connection that sends nothing, and one
    that drips its greeting, after the store's handshake timeout (not the
    group's 20 s), refuses a wrong token, and still accepts rank 1, whose
    all_reduce with rank 0 then gives numpy's sum."""
    from pluggable.distribute.host import HostBackend
    monkeypatch.setattr(store, "AUTH_TIMEOUT", 0.5)
    s0, s1 = pair
    prefix = f"host-{rng.integers(1 << 30)}"
    out: dict = {}
    t0 = _host_rank0(s0, prefix, out)
    # (through rank 1's client: rank 0's is busy on its thread)
    host, port = s1.get(f"{prefix}/addr/0", 10).decode().rsplit(":", 1)
    silent = socket.create_connection((host, int(port)), timeout=10)
    drip = socket.create_connection((host, int(port)), timeout=10)
    wrong = socket.create_connection((host, int(port)), timeout=10)
    wrong.sendall(os.urandom(16) + struct.pack("!i", 1))
    start = time.monotonic()
    for _ in range(5):                       # 5 of the 20 bytes, slowly
        drip.sendall(b"x")
        time.sleep(0.15)
    assert closed_within(wrong, 2.0)
    assert closed_within(silent, 3.0) and closed_within(drip, 3.0)
    assert time.monotonic() - start < 4.0
    assert t0.is_alive()                     # still waiting for the real rank 1
    r1 = HostBackend(s1, prefix, 1, 2, 20.0)
    t0.join(20)
    r0 = out[0]
    assert isinstance(r0, HostBackend), r0
    try:
        a, b = rng.standard_normal(64), rng.standard_normal(64)
        res: dict = {}
        th = threading.Thread(target=lambda: res.setdefault(
            0, r0.all_reduce(pg.constant(a), "sum", 10.0)))
        th.start()
        got1 = r1.all_reduce(pg.constant(b), "sum", 10.0)
        th.join(20)
        np.testing.assert_allclose(res[0].numpy(), a + b, rtol=1e-12)
        np.testing.assert_allclose(got1.numpy(), a + b, rtol=1e-12)
    finally:
        r0.close()
        r1.close()
        for sock in (silent, drip, wrong):
            sock.close()
