"""A small TCP key-value store that the processes of a group meet through.

Rank 0 hosts it (``TCPStore(..., is_server=True)``) at MASTER_ADDR:MASTER_PORT;
every rank, rank 0 included, talks to it through one client connection:
``set(key, value)``, ``get(key, timeout)`` (waits until some rank sets the
key), ``add(key, n)`` (an integer counter) and ``barrier(name, timeout)``.

Wire format: every message is a frame, a 4-byte big-endian length followed
by that many bytes. A request frame is a command byte followed by fields,
each a 4-byte big-endian length and its bytes; a reply is a status byte (0,
or the TF_Code of the error) followed by fields the same way. The first
request of a connection is HELLO (rank, world size); the last is BYE. A
connection that closes without BYE marks its rank as dead: every rank
waiting in ``get`` or ``barrier`` then fails at once with
``UnavailableError`` naming it, instead of waiting for a rank that will
never come.

``watch(callback)`` opens a second connection on which the store reports,
once, the ranks that died (closed without BYE): backends whose transfers a
dead peer would leave waiting forever (NCCL's) abort them on that call.

Errors are typed (``pluggable.errors``): bad arguments are
``InvalidArgumentError``, a wait that runs out is ``DeadlineExceededError``
naming the key and the ranks that did not arrive, a store that cannot be
reached or goes away is ``UnavailableError``.
"""
from __future__ import annotations

import select
import socket
import struct
import threading
import time
from typing import Callable, Iterable

from ..framework.errors import (DeadlineExceededError, InvalidArgumentError, UnavailableError,
                                make_error)

MAX_FRAME = 1 << 30          # a frame larger than this is refused (1 GiB)
MAX_KEY = 4096               # bytes of a key, UTF-8
_LEN = struct.Struct("!I")
_HELLO, _SET, _GET, _ADD, _BARRIER, _BYE, _WATCH = range(1, 8)
_OK = 0
_CODE_DEADLINE, _CODE_INVALID, _CODE_UNAVAILABLE = 4, 3, 14


# ------------------------------------------------------------------ framing

def _pack(head: int, fields: Iterable[bytes]) -> bytes:
    body = bytearray([head])
    for f in fields:
        body += _LEN.pack(len(f))
        body += f
    return _LEN.pack(len(body)) + bytes(body)


def _unpack(frame: bytes) -> tuple[int, list[bytes]]:
    """(head byte, fields) of a frame's body; ValueError when malformed."""
    if not frame:
        raise ValueError("empty frame")
    fields, pos = [], 1
    while pos < len(frame):
        if pos + 4 > len(frame):
            raise ValueError("truncated field length")
        (n,) = _LEN.unpack_from(frame, pos)
        pos += 4
        if pos + n > len(frame):
            raise ValueError("field longer than its frame")
        fields.append(bytes(frame[pos:pos + n]))
        pos += n
    return frame[0], fields


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            raise ConnectionError("connection closed")
        got += k
    return bytes(buf)


def _recv_frame(sock: socket.socket) -> bytes:
    (n,) = _LEN.unpack(_recv_exact(sock, 4))
    if n > MAX_FRAME + 64:
        raise ValueError(f"frame of {n} bytes is over the limit of {MAX_FRAME}")
    return _recv_exact(sock, n)


# ------------------------------------------------------------------ server

class _Server:
    """The store's state and one thread per connection (started by rank 0)."""

    def __init__(self, host: str, port: int, world_size: int):
        self.world_size = world_size
        self.data: dict[str, bytes] = {}
        self.cond = threading.Condition()
        self.ranks: set[int] = set()          # connected (HELLO seen)
        self.dead: set[int] = set()           # closed without BYE
        self.waiting: dict[str, set[int]] = {}
        self.barriers: dict[str, set[int]] = {}
        self.listener = socket.create_server((host, port), reuse_port=False, backlog=128)
        self.port = self.listener.getsockname()[1]
        self.closed = False
        threading.Thread(target=self._accept, name="pg-store-accept", daemon=True).start()

    def close(self) -> None:
        self.closed = True
        with self.cond:
            self.cond.notify_all()      # watchers answer "closing"
        try:
            self.listener.close()
        except OSError:
            pass

    def _accept(self) -> None:
        while not self.closed:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._serve, args=(conn,), name="pg-store-conn",
                             daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        rank, clean = None, False
        try:
            while True:
                cmd, fields = _unpack(_recv_frame(conn))
                if cmd == _BYE:
                    clean = True
                    conn.sendall(_pack(_OK, []))
                    return
                if cmd == _HELLO:
                    rank = self._hello(fields)
                    conn.sendall(_pack(_OK, []))
                    continue
                if cmd == _WATCH and rank is None:
                    self._watch(conn)
                    clean = True
                    return
                if rank is None:
                    raise ValueError("first request is not HELLO")
                conn.sendall(self._handle(rank, cmd, fields))
        except (OSError, ValueError, IndexError, struct.error, UnicodeDecodeError):
            pass     # a dead peer or garbage on the port: drop this connection only
        finally:
            conn.close()
            if rank is not None:
                with self.cond:
                    self.ranks.discard(rank)
                    if not clean:
                        self.dead.add(rank)
                    self.cond.notify_all()

    def _watch(self, conn: socket.socket) -> None:
        """Acknowledges a watch connection at once (the watch is in place when
        ``TCPStore.watch`` returns), then answers it once: the dead ranks
        (comma-separated), or nothing when the store closes; returns early
        when the watcher hangs up."""
        conn.sendall(_pack(_OK, []))
        with self.cond:
            while not self.dead and not self.closed:
                self.cond.wait(0.25)
                if self.dead or self.closed:
                    break
                readable, _, _ = select.select([conn], [], [], 0)
                if readable:            # the watcher closed (or sent garbage)
                    return
            dead = sorted(self.dead) if not self.closed else []
        conn.sendall(_pack(_OK, [",".join(str(r) for r in dead).encode()]))

    def _hello(self, fields: list[bytes]) -> int:
        rank, world = (int(f) for f in fields)
        if world != self.world_size or not 0 <= rank < world:
            raise ValueError(f"rank {rank} of {world} does not fit a group of {self.world_size}")
        with self.cond:
            self.ranks.add(rank)
            self.dead.discard(rank)
            self.cond.notify_all()
        return rank

    def _handle(self, rank: int, cmd: int, fields: list[bytes]) -> bytes:
        if cmd == _SET:
            with self.cond:
                self.data[fields[0].decode()] = fields[1]
                self.cond.notify_all()
            return _pack(_OK, [])
        if cmd == _ADD:
            key = fields[0].decode()
            with self.cond:
                try:
                    value = int(self.data.get(key, b"0")) + int(fields[1])
                except ValueError:
                    return _pack(_CODE_INVALID, [
                        f"store.add({key!r}): the key holds a value that is not an integer "
                        "counter; use another key".encode()])
                self.data[key] = str(value).encode()
                self.cond.notify_all()
            return _pack(_OK, [str(value).encode()])
        if cmd == _GET:
            return self._get(rank, fields[0].decode(), float(fields[1]))
        if cmd == _BARRIER:
            return self._barrier(rank, fields[0].decode(), float(fields[1]))
        raise ValueError(f"unknown command {cmd}")

    def _wait(self, ready, deadline: float) -> str | None:
        """Waits (holding cond) until ready(); None, or "dead"/"timeout"."""
        while not ready():
            if self.dead:
                return "dead"
            left = deadline - time.monotonic()
            if left <= 0:
                return "timeout"
            self.cond.wait(min(left, 1.0))
        return None

    def _missing(self, present: set[int]) -> list[int]:
        return sorted(set(range(self.world_size)) - present)

    def _get(self, rank: int, key: str, timeout: float) -> bytes:
        with self.cond:
            waiting = self.waiting.setdefault(key, set())
            waiting.add(rank)
            try:
                why = self._wait(lambda: key in self.data, time.monotonic() + timeout)
                if why is None:
                    return _pack(_OK, [self.data[key]])
                if why == "dead":
                    return _pack(_CODE_UNAVAILABLE, [
                        f"store: get({key!r}) gave up: rank(s) {sorted(self.dead)} left the group "
                        "without closing (the process died?)".encode()])
                missing = self._missing(waiting)
                return _pack(_CODE_DEADLINE, [
                    f"store: get({key!r}) timed out after {timeout:g} s: no rank set it; "
                    f"rank(s) {missing} did not arrive (rank(s) {sorted(waiting)} wait for it, "
                    f"rank(s) {self._missing(self.ranks)} are not connected)".encode()])
            finally:
                waiting.discard(rank)

    def _barrier(self, rank: int, name: str, timeout: float) -> bytes:
        with self.cond:
            arrived = self.barriers.setdefault(name, set())
            arrived.add(rank)
            self.cond.notify_all()
            why = self._wait(lambda: len(arrived) >= self.world_size,
                             time.monotonic() + timeout)
            if why is None:
                return _pack(_OK, [])
            if why == "dead":
                return _pack(_CODE_UNAVAILABLE, [
                    f"store: barrier {name!r} gave up: rank(s) {sorted(self.dead)} left the "
                    "group without closing (the process died?)".encode()])
            return _pack(_CODE_DEADLINE, [
                f"store: barrier {name!r} timed out after {timeout:g} s: rank(s) "
                f"{self._missing(arrived)} did not arrive".encode()])


# ------------------------------------------------------------------ client

def _check_key(op: str, key: object) -> bytes:
    if not isinstance(key, str) or not key:
        raise InvalidArgumentError(f"store.{op}: the key must be a non-empty str, got {key!r}",
                                   op=f"store.{op}")
    raw = key.encode()
    if len(raw) > MAX_KEY:
        raise InvalidArgumentError(f"store.{op}: key of {len(raw)} bytes is longer than "
                                   f"{MAX_KEY}; use a shorter key", op=f"store.{op}")
    return raw


def _check_timeout(op: str, timeout: object) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise InvalidArgumentError(f"store.{op}: timeout must be a positive number of seconds, "
                                   f"got {timeout!r}", op=f"store.{op}")
    return float(timeout)


class TCPStore:
    """A client of the group's key-value store (and, with `is_server`, the
    store itself, which lives in a thread of this process).

    `host`/`port` locate the store (port 0 with `is_server`: any free port,
    see ``port``); `rank` and `world_size` identify this process; `timeout`
    (seconds) bounds connecting and is the default wait of ``get`` and
    ``barrier``. Thread-safe: requests from several threads are serialised.
    """

    def __init__(self, host: str, port: int, rank: int, world_size: int,
                 is_server: bool = False, timeout: float = 300.0):
        self.rank, self.world_size = int(rank), int(world_size)
        self.timeout = _check_timeout("connect", timeout)
        self._server = _Server(host, port, world_size) if is_server else None
        self.host, self.port = host, (self._server.port if self._server else int(port))
        self._lock = threading.Lock()
        self._barriers: dict[str, int] = {}
        self._sock = self._connect()
        self._request(_HELLO, [str(self.rank).encode(), str(self.world_size).encode()])

    # -------------------------------------------------------------- transport
    def _where(self) -> str:
        return f"the store at {self.host}:{self.port}"

    def _connect(self) -> socket.socket:
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                sock = socket.create_connection((self.host, self.port), timeout=5.0)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                return sock
            except OSError as exc:
                if time.monotonic() >= deadline:
                    raise UnavailableError(
                        f"rank {self.rank}: cannot reach {self._where()} after "
                        f"{self.timeout:g} s ({exc}); is rank 0 running, and are MASTER_ADDR "
                        "and MASTER_PORT the same on every rank?", op="store.connect") from None
                time.sleep(0.05)

    def _request(self, cmd: int, fields: list[bytes], wait: float = 0.0,
                 op: str = "store") -> list[bytes]:
        frame = _pack(cmd, fields)
        if len(frame) > MAX_FRAME:
            raise InvalidArgumentError(f"{op}: a value of {len(frame)} bytes is over the "
                                       f"store's limit of {MAX_FRAME} bytes", op=op)
        with self._lock:
            if self._sock is None:
                raise UnavailableError(f"{op}: the store client of rank {self.rank} is closed",
                                       op=op)
            try:
                self._sock.settimeout(wait + 30.0)
                self._sock.sendall(frame)
                status, out = _unpack(_recv_frame(self._sock))
            except socket.timeout:
                raise DeadlineExceededError(f"{op}: {self._where()} did not answer within "
                                            f"{wait + 30.0:g} s", op=op) from None
            except (OSError, ValueError) as exc:
                raise UnavailableError(f"{op}: lost the connection to {self._where()} ({exc}); "
                                       "rank 0, which hosts it, may have exited", op=op) from None
        if status != _OK:
            raise make_error(status, out[0].decode() if out else f"{op} failed", op=op)
        return out

    # ---------------------------------------------------------------- the API
    def set(self, key: str, value: bytes) -> None:
        """Stores `value` (bytes) under `key`, waking every rank waiting on it."""
        raw = _check_key("set", key)
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise InvalidArgumentError(f"store.set({key!r}): the value must be bytes, got a "
                                       f"{type(value).__name__}; encode it first", op="store.set")
        self._request(_SET, [raw, bytes(value)], op="store.set")

    def get(self, key: str, timeout: float | None = None) -> bytes:
        """The value of `key`, waiting up to `timeout` seconds (default: the
        store's) for some rank to set it (DeadlineExceededError naming the
        key and the ranks that did not arrive; UnavailableError when a rank
        died meanwhile)."""
        raw = _check_key("get", key)
        t = self.timeout if timeout is None else _check_timeout("get", timeout)
        return self._request(_GET, [raw, repr(t).encode()], wait=t, op="store.get")[0]

    def add(self, key: str, n: int = 1) -> int:
        """Adds `n` to the integer counter `key` (0 when unset); returns the new value."""
        raw = _check_key("add", key)
        if isinstance(n, bool) or not isinstance(n, int):
            raise InvalidArgumentError(f"store.add({key!r}): n must be an int, got {n!r}",
                                       op="store.add")
        return int(self._request(_ADD, [raw, str(n).encode()], op="store.add")[0])

    def barrier(self, name: str = "barrier", timeout: float | None = None) -> None:
        """Waits until every rank has called ``barrier(name)`` as many times as
        this one (DeadlineExceededError naming the ranks that did not arrive)."""
        _check_key("barrier", name)
        t = self.timeout if timeout is None else _check_timeout("barrier", timeout)
        with self._lock:
            count = self._barriers[name] = self._barriers.get(name, 0) + 1
        key = f"{name}#{count}".encode()
        self._request(_BARRIER, [key, repr(t).encode()], wait=t, op="store.barrier")

    def close(self) -> None:
        """Says goodbye (so the others do not take this rank for dead) and
        closes the connection; rank 0 also stops the store."""
        with self._lock:
            sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.settimeout(5.0)
                sock.sendall(_pack(_BYE, []))
                _recv_frame(sock)
            except (OSError, ValueError):
                pass
            sock.close()
        if self._server is not None:
            self._server.close()

    def watch(self, callback: Callable[[list[int], str], None]) -> "StoreWatch":
        """Calls ``callback(ranks, why)`` once, from a thread of its own, when
        ranks of the group die (their store connection closes without
        BYE; ``why`` says so) or the store itself goes away while watched
        (rank 0, which hosts it, died: ``ranks`` is [0]). Not called after
        ``StoreWatch.close()`` nor when the store closes normally."""
        return StoreWatch(self, callback)

    def local_address(self) -> str:
        """The address of this host on the interface that reaches the store."""
        with self._lock:
            return self._sock.getsockname()[0] if self._sock else self.host


class StoreWatch:
    """A connection on which the store reports dead ranks (``TCPStore.watch``)."""

    def __init__(self, store: TCPStore, callback: Callable[[list[int], str], None]):
        self._callback = callback
        self._closed = False
        self._where = store._where()
        self._sock = store._connect()
        try:
            # Served before this returns: a store that closes normally
            # afterwards answers "closing" rather than dropping a watch it
            # had not taken yet (which would read as rank 0's death).
            self._sock.settimeout(store.timeout)
            self._sock.sendall(_pack(_WATCH, [str(store.rank).encode()]))
            _recv_frame(self._sock)
        except (OSError, ValueError) as exc:
            self._sock.close()
            raise UnavailableError(f"store.watch: {self._where} did not take the watch: "
                                   f"{exc}", op="store.watch") from None
        self._thread = threading.Thread(target=self._run, name="pg-store-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._sock.settimeout(None)
            status, fields = _unpack(_recv_frame(self._sock))
            ranks = [int(r) for r in fields[0].decode().split(",") if r] if fields else []
            why = (f"rank(s) {ranks} left the group without closing (the process died?)"
                   if ranks else "")
        except (OSError, ValueError, ConnectionError):
            ranks, why = [0], (f"lost the connection to {self._where}: rank 0, which hosts "
                               "it, died or closed the group")
        finally:
            try:
                self._sock.close()
            except OSError:
                pass
        if ranks and not self._closed:
            self._callback(ranks, why)

    def close(self) -> None:
        """Stops watching (the callback will not be called)."""
        self._closed = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
