"""A small TCP key-value store that the processes of a group meet through.

Rank 0 hosts it (``TCPStore(..., is_server=True)``) at MASTER_ADDR:MASTER_PORT;
every rank, rank 0 included, talks to it through one client connection:
``set(key, value)``, ``get(key, timeout)`` (waits until some rank sets the
key), ``add(key, n)`` (an integer counter) and ``barrier(name, timeout)``.

Wire format: every message is a frame, a 4-byte big-endian length followed
by that many bytes. A request frame is a command byte followed by fields,
each a 4-byte big-endian length and its bytes; a reply is a status byte (0,
or the TF_Code of the error) followed by fields the same way.

Authentication: the ranks share a secret (``PLUGGABLE_STORE_SECRET``, which
``python -m pluggable.distribute.run`` sets; see ``_resolve_secret``). On
every new connection the store sends a challenge (``_MAGIC`` and a random
server nonce); the client answers with a nonce of its own and
HMAC-SHA256(secret, client label, both nonces); the store checks it
(``hmac.compare_digest``) and answers with its own HMAC over the nonces, so
each side knows the other holds the secret. Until then a connection gets no
thread of its own: one selector thread runs every handshake, each bounded in
size (``_MAX_AUTH_FRAME``) and time (``AUTH_TIMEOUT``); when more than
``MAX_PENDING`` handshakes are open the oldest is dropped. A connection that
fails the handshake is closed and affects no rank.

After the handshake the first request is HELLO (rank, world size) or WATCH;
the last is BYE. A connection that said HELLO and closes without BYE marks
its rank as dead: every rank waiting in ``get`` or ``barrier`` then fails at
once with ``UnavailableError`` naming it, instead of waiting for a rank that
will never come. A HELLO for a rank that is connected already is refused
(``AlreadyExistsError``), so a second connection cannot take a live rank's
place.

Limits (``StoreLimits``, read from the environment when the store starts):
a value of at most ``PLUGGABLE_STORE_MAX_VALUE`` bytes, at most
``PLUGGABLE_STORE_MAX_BYTES`` bytes held in all (stored keys and values,
and the frames being read), at most ``PLUGGABLE_STORE_MAX_CONNECTIONS``
authenticated connections; a frame, once its first byte has come, must
arrive whole within ``FRAME_TIMEOUT`` seconds. Over a limit the client gets
``ResourceExhaustedError`` naming it and the variable that raises it.

``watch(callback)`` opens a second connection on which the store reports,
once, the ranks that died (closed without BYE): backends whose transfers a
dead peer would leave waiting forever (NCCL's) abort them on that call.

Errors are typed (``pluggable.errors``): bad arguments are
``InvalidArgumentError``, a wait that runs out is ``DeadlineExceededError``
naming the key and the ranks that did not arrive, a store that cannot be
reached or goes away is ``UnavailableError``, a secret that is missing or
differs from the store's is ``UnauthenticatedError``.
"""
from __future__ import annotations

import errno
import hashlib
import hmac
import ipaddress
import logging
import os
import re
import secrets
import select
import selectors
import socket
import struct
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable

from ..framework.errors import (DeadlineExceededError, InvalidArgumentError, UnauthenticatedError,
                                UnavailableError, make_error)

log = logging.getLogger("pluggable.distribute.store")

SECRET_ENV = "PLUGGABLE_STORE_SECRET"
INSECURE_ENV = "PLUGGABLE_STORE_ALLOW_INSECURE"
MIN_SECRET = 16              # bytes of a secret, at least
MAX_KEY = 4096               # bytes of a key, UTF-8
MAX_WAIT = 30 * 86400.0      # seconds a get or barrier may ask to wait, at most
AUTH_TIMEOUT = 10.0          # seconds a new connection has to complete the handshake
FRAME_TIMEOUT = 60.0         # seconds a frame may take to arrive, from its first byte
MAX_PENDING = 64             # handshakes open at once (beyond: the oldest is dropped)
MAX_FRAME = (1 << 32) - 1    # what a 4-byte length can say (the store's limits are lower)
_MAGIC = b"PGstore1"
_NONCE = 32
_MAX_AUTH_FRAME = 256
_LEN = struct.Struct("!I")
_HELLO, _SET, _GET, _ADD, _BARRIER, _BYE, _WATCH, _AUTH = range(1, 9)
_OK = 0
_CODE_INVALID, _CODE_DEADLINE, _CODE_EXISTS, _CODE_EXHAUSTED = 3, 4, 6, 8
_CODE_PRECONDITION, _CODE_UNAVAILABLE, _CODE_UNAUTHENTICATED = 9, 14, 16
_OVERHEAD = 64               # bytes charged per stored entry besides its key and value
_INT = re.compile(rb"-?[0-9]{1,19}\Z")
_FLOAT = re.compile(rb"[0-9]{1,20}(\.[0-9]{0,20})?([eE][-+]?[0-9]{1,3})?\Z")


@dataclass(frozen=True)
class StoreLimits:
    """What one store holds at most (the defaults, or the environment's)."""

    max_value: int = 16 << 20          # PLUGGABLE_STORE_MAX_VALUE: bytes of one value
    max_bytes: int = 256 << 20         # PLUGGABLE_STORE_MAX_BYTES: bytes held in all
    max_connections: int = 0           # PLUGGABLE_STORE_MAX_CONNECTIONS (0: 64 + 4 per rank)

    @classmethod
    def from_env(cls, world_size: int) -> "StoreLimits":
        def read(name: str, default: int) -> int:
            raw = os.environ.get(name)
            if raw is None:
                return default
            if not re.fullmatch(r"[0-9]{1,15}", raw.strip()) or int(raw) < 1:
                raise InvalidArgumentError(f"store: {name}={raw!r} is not a positive integer",
                                           op="store.limits")
            return int(raw)
        d = cls()
        return cls(read("PLUGGABLE_STORE_MAX_VALUE", d.max_value),
                   read("PLUGGABLE_STORE_MAX_BYTES", d.max_bytes),
                   read("PLUGGABLE_STORE_MAX_CONNECTIONS", 64 + 4 * max(world_size, 1)))

    @property
    def max_frame(self) -> int:
        """The largest request frame: a SET of the largest key and value."""
        return self.max_value + MAX_KEY + 32


# ------------------------------------------------------------------ the secret

def _is_loopback(host: str) -> bool:
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return False
    return bool(infos) and all(ipaddress.ip_address(i[4][0].split("%")[0]).is_loopback
                               for i in infos)


def _resolve_secret(secret: bytes | str | None, host: str, world_size: int,
                    is_server: bool) -> bytes:
    """The key of the handshake: `secret`, else $PLUGGABLE_STORE_SECRET;
    without either, a fresh random one for a group of one (its only client
    is this process), the empty key where PLUGGABLE_STORE_ALLOW_INSECURE=1
    and the store is on loopback, and otherwise UnauthenticatedError."""
    raw = secret if secret is not None else os.environ.get(SECRET_ENV)
    if isinstance(raw, str):
        raw = raw.encode()
    if raw:
        if not isinstance(raw, (bytes, bytearray)) or len(raw) < MIN_SECRET:
            raise InvalidArgumentError(
                f"store: the secret ({SECRET_ENV}) must be at least {MIN_SECRET} bytes; make "
                "one with `python -c 'import secrets; print(secrets.token_hex(32))'`",
                op="store.connect")
        return bytes(raw)
    if world_size == 1 and is_server:
        return secrets.token_bytes(32)
    if os.environ.get(INSECURE_ENV) == "1":
        if not _is_loopback(host):
            raise UnauthenticatedError(
                f"store: {INSECURE_ENV}=1 is honoured only for a store on a loopback address, "
                f"not {host!r}; set {SECRET_ENV} to the same value on every rank",
                op="store.connect")
        log.warning("store at %s: %s=1, so any local process can join the group", host,
                    INSECURE_ENV)
        return b""
    raise UnauthenticatedError(
        f"store: {SECRET_ENV} is not set, so this rank cannot prove to the store at {host} that "
        "it belongs to the group. `python -m pluggable.distribute.run` sets it; with torchrun "
        "or another launcher, export the same value to every rank first, e.g. "
        f"`export {SECRET_ENV}=$(python -c 'import secrets; print(secrets.token_hex(32))')`. "
        f"On one host only, {INSECURE_ENV}=1 skips the check (any local process can then "
        "join)", op="store.connect")


def _mac(key: bytes, label: bytes, first: bytes, second: bytes) -> bytes:
    return hmac.new(key, label + first + second, hashlib.sha256).digest()


# ------------------------------------------------------------------ framing

class _Malformed(ValueError):
    """Bytes that are not a well-formed frame or request (the message says why)."""


def _pack(head: int, fields: Iterable[bytes]) -> bytes:
    body = bytearray([head])
    for f in fields:
        body += _LEN.pack(len(f))
        body += f
    return _LEN.pack(len(body)) + bytes(body)


def _unpack(frame: bytes) -> tuple[int, list[bytes]]:
    """(head byte, fields) of a frame's body; _Malformed when malformed."""
    if not frame:
        raise _Malformed("empty frame")
    fields, pos = [], 1
    while pos < len(frame):
        if pos + 4 > len(frame):
            raise _Malformed("truncated field length")
        (n,) = _LEN.unpack_from(frame, pos)
        pos += 4
        if pos + n > len(frame):
            raise _Malformed("field longer than its frame")
        fields.append(bytes(frame[pos:pos + n]))
        pos += n
    return frame[0], fields


_SCHEMA = {_HELLO: ("int", "int"), _SET: ("key", "bytes"), _GET: ("key", "time"),
           _ADD: ("key", "int"), _BARRIER: ("key", "time"), _BYE: (), _WATCH: ("int",)}
_NAMES = {_HELLO: "HELLO", _SET: "SET", _GET: "GET", _ADD: "ADD", _BARRIER: "BARRIER",
          _BYE: "BYE", _WATCH: "WATCH"}


def _parse_request(frame: bytes) -> tuple[int, list]:
    """(command, arguments) of a request frame, each argument checked and
    converted (keys to str, integers to int, timeouts to float seconds);
    _Malformed naming what is wrong otherwise."""
    cmd, fields = _unpack(frame)
    kinds = _SCHEMA.get(cmd)
    if kinds is None:
        raise _Malformed(f"unknown command {cmd}")
    name = _NAMES[cmd]
    if len(fields) != len(kinds):
        raise _Malformed(f"{name} takes {len(kinds)} field(s), got {len(fields)}")
    args: list = []
    for kind, f in zip(kinds, fields):
        if kind == "bytes":
            args.append(f)
        elif kind == "key":
            if not 0 < len(f) <= MAX_KEY:
                raise _Malformed(f"{name}: a key of {len(f)} bytes (1 to {MAX_KEY})")
            try:
                args.append(f.decode())
            except UnicodeDecodeError:
                raise _Malformed(f"{name}: the key is not UTF-8") from None
        elif kind == "int":
            if not _INT.match(f):
                raise _Malformed(f"{name}: {f[:32]!r} is not an integer")
            args.append(int(f))
        else:
            if not _FLOAT.match(f):
                raise _Malformed(f"{name}: timeout {f[:32]!r} is not a number of seconds")
            t = float(f)
            if not 0 < t <= MAX_WAIT:
                raise _Malformed(f"{name}: timeout {t:g} s is not in (0, {MAX_WAIT:g}]")
            args.append(t)
    return cmd, args


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            raise ConnectionError("connection closed")
        got += k
    return bytes(buf)


def _recv_frame(sock: socket.socket, limit: int = MAX_FRAME) -> bytes:
    """One frame (the client's side: the store it authenticated is trusted)."""
    (n,) = _LEN.unpack(_recv_exact(sock, 4))
    if n > limit:
        raise _Malformed(f"frame of {n} bytes is over the limit of {limit}")
    return _recv_exact(sock, n)


class _TooSlow(Exception):
    """A frame did not arrive within FRAME_TIMEOUT."""


def _recv_by(sock: socket.socket, view: memoryview, deadline: float) -> None:
    """Fills `view` from `sock` before `deadline` (_TooSlow, ConnectionError)."""
    got = 0
    while got < len(view):
        left = deadline - time.monotonic()
        if left <= 0:
            raise _TooSlow()
        sock.settimeout(left)
        try:
            k = sock.recv_into(view[got:])
        except socket.timeout:
            raise _TooSlow() from None
        if k == 0:
            raise ConnectionError("connection closed")
        got += k


# ------------------------------------------------------------------ server

def _start_thread(target: Callable, args: tuple, name: str) -> None:
    """Starts a daemon thread (RuntimeError when the system cannot)."""
    threading.Thread(target=target, args=args, name=name, daemon=True).start()


class _RateLimitedLog:
    """Logs one message per kind every `every` seconds at most (a flood of
    bad connections must not flood the log)."""

    def __init__(self, every: float = 10.0):
        self.every, self.last, self.lock = every, {}, threading.Lock()

    def __call__(self, kind: str, msg: str, *args) -> None:
        now = time.monotonic()
        with self.lock:
            if now - self.last.get(kind, -1e9) < self.every:
                return
            self.last[kind] = now
        log.warning(msg, *args)


@dataclass
class _Pending:
    """A connection in its handshake."""

    sock: socket.socket
    nonce: bytes
    deadline: float
    buf: bytearray


class _Server:
    """The store's state, one selector thread for the handshakes and one
    thread per authenticated connection (started by rank 0)."""

    def __init__(self, host: str, port: int, world_size: int, key: bytes,
                 limits: StoreLimits | None = None):
        self.world_size = world_size
        self.key = key
        self.limits = limits or StoreLimits.from_env(world_size)
        self.data: dict[str, bytes] = {}
        self.held = 0                         # bytes charged: entries and frames being read
        self.cond = threading.Condition()
        self.ranks: set[int] = set()          # connected (HELLO seen)
        self.dead: set[int] = set()           # closed without BYE
        self.waiting: dict[str, set[int]] = {}
        self.barriers: dict[str, set[int]] = {}
        self.conns = 0                        # authenticated connections open
        self.warn = _RateLimitedLog()
        self.listener = socket.create_server((host, port), reuse_port=False, backlog=128)
        self.listener.setblocking(False)
        self.port = self.listener.getsockname()[1]
        self.closed = False
        self._pending: dict[socket.socket, _Pending] = {}    # oldest first
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._sel.register(self.listener, selectors.EVENT_READ)
        self._sel.register(self._wake_r, selectors.EVENT_READ)
        self._thread = threading.Thread(target=self._loop, name="pg-store-accept", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.closed = True
        with self.cond:
            self.cond.notify_all()      # watchers answer "closing"
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        if threading.current_thread() is not self._thread:
            self._thread.join(5.0)

    # -------------------------------------------------------------- handshakes
    def _loop(self) -> None:
        paused_until, backoff = 0.0, 0.05
        try:
            while not self.closed:
                now = time.monotonic()
                if paused_until and now >= paused_until:
                    self._sel.register(self.listener, selectors.EVENT_READ)
                    paused_until = 0.0
                waits = [p.deadline for p in self._pending.values()]
                if paused_until:
                    waits.append(paused_until)
                timeout = max(0.0, min(waits) - now) if waits else None
                for sk, _ in self._sel.select(timeout):
                    if sk.fileobj is self.listener:
                        try:
                            pause = self._accept_some()
                        except Exception as exc:    # noqa: BLE001 (keep accepting)
                            self.warn("accept-loop", "store on port %d: accepting failed "
                                      "(%r); backing off", self.port, exc)
                            pause = True
                        if pause:
                            self._sel.unregister(self.listener)
                            paused_until = time.monotonic() + backoff
                            backoff = min(backoff * 2, 1.0)
                        else:
                            backoff = 0.05
                    elif sk.fileobj is self._wake_r:
                        try:
                            self._wake_r.recv(64)
                        except OSError:
                            pass
                    elif sk.fileobj in self._pending:
                        p = self._pending[sk.fileobj]
                        try:
                            self._advance(p)
                        except Exception as exc:    # noqa: BLE001 (one connection's fault)
                            self.warn("handshake", "store on port %d: a handshake failed "
                                      "(%r)", self.port, exc)
                            self._drop(p, None)
                now = time.monotonic()
                for p in [p for p in self._pending.values() if p.deadline <= now]:
                    self._drop(p, "timeout")
        except Exception as exc:    # noqa: BLE001 (must not die silently)
            log.error("store on port %d: the accept loop failed (%r); no new connections",
                      self.port, exc)
            raise
        finally:
            for p in list(self._pending.values()):
                self._drop(p, None)
            for s in (self.listener, self._wake_r, self._wake_w):
                try:
                    s.close()
                except OSError:
                    pass
            self._sel.close()

    def _accept_some(self) -> bool:
        """Accepts what is waiting; True when out of a resource (pause accepting)."""
        for _ in range(64):
            try:
                conn, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return False
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self.warn("accept", "store on port %d: cannot accept a connection (%s); "
                              "backing off", self.port, exc)
                    if self._pending:            # frees a descriptor for a real client
                        self._drop(next(iter(self._pending.values())), None)
                    return True
                self.warn("accept-other", "store on port %d: accept failed (%s)", self.port, exc)
                return False
            try:
                self._begin(conn)
            except OSError:
                conn.close()
        return False

    def _begin(self, conn: socket.socket) -> None:
        if len(self._pending) >= MAX_PENDING:
            self.warn("pending", "store on port %d: more than %d unauthenticated connections; "
                      "dropping the oldest", self.port, MAX_PENDING)
            self._drop(next(iter(self._pending.values())), None)
        conn.setblocking(False)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        p = _Pending(conn, secrets.token_bytes(_NONCE), time.monotonic() + AUTH_TIMEOUT,
                     bytearray())
        conn.send(_pack(_OK, [_MAGIC, p.nonce]))     # small: fits the empty send buffer
        self._pending[conn] = p
        self._sel.register(conn, selectors.EVENT_READ)

    def _drop(self, p: _Pending, why: str | None, reply: bytes | None = None) -> None:
        if self._pending.pop(p.sock, None) is not None:
            try:
                self._sel.unregister(p.sock)
            except (KeyError, ValueError):
                pass
        if why:
            self.warn(why, "store on port %d: dropped a connection that did not authenticate "
                      "(%s)", self.port, why)
        if reply is not None:
            try:
                p.sock.send(reply)
            except OSError:
                pass
        p.sock.close()

    def _advance(self, p: _Pending) -> None:
        try:
            part = p.sock.recv(_MAX_AUTH_FRAME + 4 - len(p.buf))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            part = b""
        if not part:
            self._drop(p, None)
            return
        p.buf += part
        if len(p.buf) < 4:
            return
        (n,) = _LEN.unpack_from(p.buf)
        if n > _MAX_AUTH_FRAME:
            self._drop(p, "oversized handshake")
            return
        if len(p.buf) < 4 + n:
            if len(p.buf) >= _MAX_AUTH_FRAME + 4:
                self._drop(p, "oversized handshake")
            return
        if len(p.buf) > 4 + n:              # the client speaks before it is answered
            self._drop(p, "unexpected bytes")
            return
        try:
            cmd, fields = _unpack(bytes(p.buf[4:]))
        except _Malformed:
            cmd, fields = -1, []
        if cmd != _AUTH or len(fields) != 2 or len(fields[0]) != _NONCE:
            self._drop(p, "not a handshake")
            return
        client_nonce, proof = fields
        want = _mac(self.key, b"client", p.nonce, client_nonce)
        if not hmac.compare_digest(proof, want):
            self._drop(p, "wrong secret", _pack(_CODE_UNAUTHENTICATED, [
                b"the store refused this connection: its secret differs from the store's "
                b"(is " + SECRET_ENV.encode() + b" the same on every rank?)"]))
            return
        with self.cond:
            full = self.conns >= self.limits.max_connections
            if not full:
                self.conns += 1
        if full:
            self._drop(p, "too many connections", _pack(_CODE_EXHAUSTED, [
                f"the store has {self.limits.max_connections} connections open, its limit; "
                "raise PLUGGABLE_STORE_MAX_CONNECTIONS".encode()]))
            return
        self._pending.pop(p.sock)
        self._sel.unregister(p.sock)
        conn = p.sock
        try:
            conn.setblocking(True)
            # the thread sends the store's proof: a client whose connection
            # gets no thread sees the handshake fail, and retries
            _start_thread(self._serve, (conn, _pack(_OK, [_mac(self.key, b"server",
                                                                client_nonce, p.nonce)])),
                          "pg-store-conn")
        except (OSError, RuntimeError) as exc:
            self.warn("thread", "store on port %d: cannot serve a connection (%s); the "
                      "client will retry", self.port, exc)
            conn.close()
            with self.cond:
                self.conns -= 1

    # -------------------------------------------------------------- requests
    def _read_request(self, conn: socket.socket) -> bytes | None:
        """The next request frame; None when it was refused (over a limit:
        the reply is sent and its bytes skipped). ConnectionError at the end,
        _TooSlow when a frame takes longer than FRAME_TIMEOUT."""
        head = bytearray(4)
        conn.settimeout(None)               # a rank may be quiet for hours between requests
        k = conn.recv_into(head)
        if k == 0:
            raise ConnectionError("connection closed")
        deadline = time.monotonic() + FRAME_TIMEOUT
        _recv_by(conn, memoryview(head)[k:], deadline)
        (n,) = _LEN.unpack(head)
        lim = self.limits
        refusal = None
        if n > lim.max_frame:
            refusal = (f"a request of {n} bytes is over the store's limit of {lim.max_frame} "
                       f"(values up to {lim.max_value} bytes); raise PLUGGABLE_STORE_MAX_VALUE "
                       "on rank 0, or store less")
        else:
            with self.cond:
                if self.held + n > lim.max_bytes:
                    refusal = (f"a request of {n} bytes does not fit: the store holds "
                               f"{self.held} of its {lim.max_bytes} bytes; raise "
                               "PLUGGABLE_STORE_MAX_BYTES on rank 0, or store less")
                else:
                    self.held += n
        if refusal is not None:
            conn.sendall(_pack(_CODE_EXHAUSTED, [refusal.encode()]))
            scratch = memoryview(bytearray(min(n, 1 << 16)))
            while n:
                step = min(n, len(scratch))
                _recv_by(conn, scratch[:step], deadline)
                n -= step
            return None
        try:
            body = bytearray(n)
            _recv_by(conn, memoryview(body), deadline)
            return bytes(body)
        finally:
            with self.cond:
                self.held -= n
                self.cond.notify_all()

    def _serve(self, conn: socket.socket, welcome: bytes) -> None:
        rank, clean = None, False
        try:
            conn.settimeout(FRAME_TIMEOUT)
            conn.sendall(welcome)
            while True:
                frame = self._read_request(conn)
                if frame is None:
                    continue
                try:
                    cmd, args = _parse_request(frame)
                except _Malformed as exc:
                    conn.sendall(_pack(_CODE_INVALID, [f"store: bad request: {exc}".encode()]))
                    continue
                if cmd == _BYE:
                    clean = True
                    conn.sendall(_pack(_OK, []))
                    return
                if cmd == _HELLO:
                    reply, new = self._hello(rank, *args)
                    if new is not None:
                        rank = new
                    conn.sendall(reply)
                    continue
                if cmd == _WATCH:
                    if rank is not None:
                        conn.sendall(_pack(_CODE_INVALID, [
                            b"store: WATCH on a connection that said HELLO"]))
                        continue
                    self._watch(conn)
                    clean = True
                    return
                if rank is None:
                    conn.sendall(_pack(_CODE_PRECONDITION, [
                        b"store: the first request of a connection must be HELLO"]))
                    continue
                conn.sendall(self._handle(rank, cmd, args))
        except (OSError, ConnectionError, _TooSlow):
            pass     # a dead or stalled peer: drop this connection only
        finally:
            conn.close()
            with self.cond:
                self.conns -= 1
                if rank is not None:
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
        conn.settimeout(FRAME_TIMEOUT)
        conn.sendall(_pack(_OK, [",".join(str(r) for r in dead).encode()]))

    def _hello(self, current: int | None, rank: int, world: int) -> tuple[bytes, int | None]:
        """(reply, the connection's rank or None) of a HELLO."""
        if current is not None:
            return _pack(_CODE_PRECONDITION, [
                f"store: this connection is rank {current} already".encode()]), None
        if world != self.world_size or not 0 <= rank < world:
            return _pack(_CODE_INVALID, [
                f"store: rank {rank} of {world} does not fit a group of {self.world_size}; "
                "is WORLD_SIZE the same on every rank?".encode()]), None
        with self.cond:
            if rank in self.ranks:
                return _pack(_CODE_EXISTS, [
                    f"store: rank {rank} is connected already; is RANK different on every "
                    "rank?".encode()]), None
            self.ranks.add(rank)
            self.dead.discard(rank)
            self.cond.notify_all()
        return _pack(_OK, []), rank

    def _charge_locked(self, delta: int) -> str | None:
        """Charges `delta` bytes (held cond); the refusal message when over the limit."""
        lim = self.limits.max_bytes
        if delta > 0 and self.held + delta > lim:
            return (f"the store holds {self.held} of its {lim} bytes and this needs {delta} "
                    "more; raise PLUGGABLE_STORE_MAX_BYTES on rank 0, or store less")
        self.held += delta
        return None

    def _put_locked(self, key: str, value: bytes) -> str | None:
        old = self.data.get(key)
        size = lambda v: len(key.encode()) + len(v) + _OVERHEAD  # noqa: E731
        refusal = self._charge_locked(size(value) - (size(old) if old is not None else 0))
        if refusal is None:
            self.data[key] = value
            self.cond.notify_all()
        return refusal

    def _handle(self, rank: int, cmd: int, args: list) -> bytes:
        if cmd == _SET:
            key, value = args
            if len(value) > self.limits.max_value:
                return _pack(_CODE_EXHAUSTED, [
                    f"store.set({key!r}): a value of {len(value)} bytes is over the store's "
                    f"limit of {self.limits.max_value}; raise PLUGGABLE_STORE_MAX_VALUE on "
                    "rank 0".encode()])
            with self.cond:
                refusal = self._put_locked(key, value)
            if refusal:
                return _pack(_CODE_EXHAUSTED, [f"store.set({key!r}): {refusal}".encode()])
            return _pack(_OK, [])
        if cmd == _ADD:
            key, n = args
            with self.cond:
                old = self.data.get(key, b"0")
                if not _INT.match(old):
                    return _pack(_CODE_INVALID, [
                        f"store.add({key!r}): the key holds a value that is not an integer "
                        "counter; use another key".encode()])
                value = int(old) + n
                if abs(value) >= 1 << 63:
                    return _pack(_CODE_INVALID, [
                        f"store.add({key!r}): the counter would leave the 64-bit range".encode()])
                refusal = self._put_locked(key, str(value).encode())
            if refusal:
                return _pack(_CODE_EXHAUSTED, [f"store.add({key!r}): {refusal}".encode()])
            return _pack(_OK, [str(value).encode()])
        if cmd == _GET:
            return self._get(rank, *args)
        return self._barrier(rank, *args)

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
                if not waiting:
                    self.waiting.pop(key, None)

    def _barrier(self, rank: int, name: str, timeout: float) -> bytes:
        with self.cond:
            arrived = self.barriers.get(name)
            if arrived is None:
                refusal = self._charge_locked(len(name.encode()) + _OVERHEAD)
                if refusal:
                    return _pack(_CODE_EXHAUSTED, [f"store: barrier {name!r}: {refusal}".encode()])
                arrived = self.barriers[name] = set()
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
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or \
            not 0 < timeout <= MAX_WAIT:
        raise InvalidArgumentError(f"store.{op}: timeout must be a positive number of seconds "
                                   f"(at most {MAX_WAIT:g}), got {timeout!r}", op=f"store.{op}")
    return float(timeout)


def _authenticate(sock: socket.socket, key: bytes, timeout: float, where: str) -> None:
    """The client's half of the handshake (see the module's docstring).
    UnauthenticatedError when the store refuses the secret or cannot prove
    it holds it; ResourceExhaustedError when it is full; OSError or
    _Malformed when the connection breaks (the caller retries)."""
    sock.settimeout(timeout)
    status, fields = _unpack(_recv_frame(sock, _MAX_AUTH_FRAME))
    if status != _OK or len(fields) != 2 or fields[0] != _MAGIC or len(fields[1]) != _NONCE:
        raise _Malformed(f"{where} did not open with the store's handshake")
    server_nonce, client_nonce = fields[1], secrets.token_bytes(_NONCE)
    sock.sendall(_pack(_AUTH, [client_nonce, _mac(key, b"client", server_nonce, client_nonce)]))
    status, fields = _unpack(_recv_frame(sock, 1 << 16))
    if status == _CODE_UNAUTHENTICATED:
        raise UnauthenticatedError(f"{where}: {fields[0].decode(errors='replace')}"
                                   if fields else f"{where} refused the secret",
                                   op="store.connect")
    if status != _OK:
        raise make_error(status, f"{where}: " + (fields[0].decode(errors="replace") if fields
                                                 else "refused the connection"),
                         op="store.connect")
    want = _mac(key, b"server", client_nonce, server_nonce)
    if len(fields) != 1 or not hmac.compare_digest(fields[0], want):
        raise UnauthenticatedError(f"{where} answered without knowing the group's secret: it is "
                                   f"not this group's store; check MASTER_ADDR, MASTER_PORT and "
                                   f"{SECRET_ENV}", op="store.connect")


class TCPStore:
    """A client of the group's key-value store (and, with `is_server`, the
    store itself, which lives in a thread of this process).

    `host`/`port` locate the store (port 0 with `is_server`: any free port,
    see ``port``); `rank` and `world_size` identify this process; `timeout`
    (seconds) bounds connecting and is the default wait of ``get`` and
    ``barrier``. `secret` (bytes or str, at least 16 bytes) is the group's
    shared secret, by default ``$PLUGGABLE_STORE_SECRET`` (see
    ``_resolve_secret`` for what happens without one); `limits` (the
    server's) default to ``StoreLimits.from_env``. Thread-safe: requests
    from several threads are serialised.
    """

    def __init__(self, host: str, port: int, rank: int, world_size: int,
                 is_server: bool = False, timeout: float = 300.0,
                 secret: bytes | str | None = None, limits: StoreLimits | None = None):
        self.rank, self.world_size = int(rank), int(world_size)
        self.timeout = _check_timeout("connect", timeout)
        self._key = _resolve_secret(secret, host, self.world_size, is_server)
        self._server = _Server(host, port, world_size, self._key, limits) if is_server else None
        self.host, self.port = host, (self._server.port if self._server else int(port))
        self._lock = threading.Lock()
        self._barriers: dict[str, int] = {}
        self._sock = None
        try:
            self._sock = self._connect()
            self._request(_HELLO, [str(self.rank).encode(), str(self.world_size).encode()],
                          op="store.connect")
        except BaseException:
            self.close()
            raise

    # -------------------------------------------------------------- transport
    def _where(self) -> str:
        return f"the store at {self.host}:{self.port}"

    def _connect(self) -> socket.socket:
        """A connection to the store that passed the handshake; retried (a
        store not up yet, or one that dropped the handshake while busy)
        until `timeout` runs out."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                sock = socket.create_connection((self.host, self.port), timeout=5.0)
            except OSError as exc:
                if time.monotonic() >= deadline:
                    raise UnavailableError(
                        f"rank {self.rank}: cannot reach {self._where()} after "
                        f"{self.timeout:g} s ({exc}); is rank 0 running, and are MASTER_ADDR "
                        "and MASTER_PORT the same on every rank?", op="store.connect") from None
                time.sleep(0.05)
                continue
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                left = max(deadline - time.monotonic(), 0.05)
                _authenticate(sock, self._key, min(AUTH_TIMEOUT, left), self._where())
                return sock
            except (OSError, _Malformed) as exc:
                sock.close()
                if time.monotonic() >= deadline:
                    raise UnavailableError(
                        f"rank {self.rank}: {self._where()} did not complete the handshake "
                        f"within {self.timeout:g} s ({exc}); is MASTER_PORT the store's "
                        "port?", op="store.connect") from None
                time.sleep(0.05)
            except BaseException:
                sock.close()
                raise

    def _request(self, cmd: int, fields: list[bytes], wait: float = 0.0,
                 op: str = "store") -> list[bytes]:
        frame = _pack(cmd, fields)
        if len(frame) - 4 > MAX_FRAME:
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
            raise make_error(status, out[0].decode(errors="replace") if out else f"{op} failed",
                             op=op)
        return out

    # ---------------------------------------------------------------- the API
    def set(self, key: str, value: bytes) -> None:
        """Stores `value` (bytes) under `key`, waking every rank waiting on it
        (ResourceExhaustedError when over the store's limits)."""
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
        if isinstance(n, bool) or not isinstance(n, int) or abs(n) >= 1 << 63:
            raise InvalidArgumentError(f"store.add({key!r}): n must be an int (64-bit), got "
                                       f"{n!r}", op="store.add")
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
