"""The "host" backend: collectives between processes over TCP, for tensors
on any device (their bytes are staged through host memory).

Every pair of ranks shares one TCP connection, set up through the store
(each rank listens on a free port of the interface that reaches the store
and publishes it; the higher rank connects to the lower one). Each
collective is one or two *exchanges*: every rank sends a buffer to some
peers and receives one from others, all at once through a selector, so no
pair waits on another. Each buffer is preceded by a header (sequence
number, collective, dtype, size): a peer that called another collective,
or the same with another dtype or size, is an ``InvalidArgumentError``
rather than garbage or a hang.

Reductions (all_reduce, reduce_scatter) are direct: rank r receives chunk r
of every rank and reduces it with numpy in rank order
(``((x0 + x1) + x2) + ...``), then (all_reduce) sends the reduced chunk to
every rank. An all_reduce of at most 64 KiB takes one exchange instead:
every rank receives every tensor and reduces them all in rank order.
Either way the result is exact and the same bits on every rank.

Threads of one process take turns (one lock per backend), but the ranks
must still see the collectives in one order: call them from one thread, or
order the threads yourself. ``all_reduce_async`` (used by the overlapping
``GradientReducer``) reads the tensor to the host and runs the same
exchanges on the backend's own thread, in the order of the calls; a
blocking collective first waits for those.

Faults: a peer whose connection closes raises ``UnavailableError``, one
that sends nothing before the timeout ``DeadlineExceededError``, both
naming the ranks. After a fault the group is broken: later collectives
raise ``FailedPreconditionError`` until ``destroy_process_group``.
"""
from __future__ import annotations

import functools
import hmac
import os
import queue
import selectors
import socket
import struct
import threading
import time

import numpy as np

from ..framework import dtypes
from ..framework.errors import (DeadlineExceededError, FailedPreconditionError,
                                InvalidArgumentError, OpError, UnavailableError)
from ..framework.tensor import Tensor
from ..runtime import placement
from .backend import Backend, Work, register_backend
from . import store as _store
from .store import TCPStore

_HEADER = struct.Struct("!4sQBiQ")        # magic, sequence, collective, dtype enum, bytes
_MAGIC = b"PGc1"
_OPS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "all_to_all")
_SOCKBUF = 4 << 20
_ONE_ROUND_BYTES = 64 << 10   # all_reduce of at most this many bytes: one exchange
_GREETING = 20                # bytes a connecting peer sends first: the token and its rank


# ------------------------------------------------------------------ numpy side

def _reduce(chunks: list[np.ndarray], op: str, out: np.ndarray) -> None:
    """`op` over `chunks` (rank order), in their dtype, into `out`."""
    ufunc = {"sum": np.add, "mean": np.add, "prod": np.multiply,
             "min": np.minimum, "max": np.maximum}[op]
    if len(chunks) == 1:
        out[...] = chunks[0]
    else:
        ufunc(chunks[0], chunks[1], out=out)
    for c in chunks[2:]:
        ufunc(out, c, out=out)
    if op == "mean":
        n = len(chunks)
        if out.dtype.kind in "iu":       # toward zero, like the in-process collectives
            negative_rest = (out % n != 0) & (out < 0)
            np.floor_divide(out, n, out=out)
            out += negative_rest.astype(out.dtype)
        else:
            np.divide(out, out.dtype.type(n), out=out)


def _bytes(a: np.ndarray) -> memoryview:
    """The bytes of C-contiguous `a`, without a copy (receives write into `a`)."""
    assert a.flags.c_contiguous
    return memoryview(a.reshape(-1).view(np.uint8))


def _array(t: Tensor, fn: str) -> np.ndarray:
    if not (t.dtype.is_floating or t.dtype.is_integer or t.dtype.is_bool):
        raise InvalidArgumentError(f"pg.distribute.{fn}: {t.dtype.name} tensors cannot be "
                                   "sent between processes (numbers and bools only)", op=fn)
    a = t._numpy()
    return a if a.flags.c_contiguous else a.copy()   # (ascontiguousarray makes scalars 1-d)


def _place(a: np.ndarray, like: Tensor) -> Tensor:
    """`a` as a tensor on `like`'s device, with `like`'s dtype."""
    t = Tensor._from_array(a, placement.CPU, like.dtype)
    return t._copy_to(like.device_object)


def _serialised(method):
    """Runs a collective under the backend's lock (threads take turns),
    after the collectives started asynchronously before it."""
    @functools.wraps(method)
    def run(self, *args):
        self._drain()
        with self.lock:
            return method(self, *args)
    return run


# ------------------------------------------------------------------ backend

class HostBackend(Backend):
    """Collectives over TCP between the processes of a group, any device."""

    name = "host"

    def __init__(self, store: TCPStore, prefix: str, rank: int, world_size: int,
                 timeout: float):
        super().__init__(store, prefix, rank, world_size, timeout)
        self._seq = 0
        # one collective at a time: the two exchanges of an all_reduce must not
        # interleave with another thread's collective
        self.lock = threading.Lock()
        self._broken: OpError | None = None
        self._peers: dict[int, socket.socket] = {}
        # all_reduce_async: started collectives, run in order by one thread
        self._jobs: queue.Queue = queue.Queue()
        self._in_flight: list[Work] = []
        self._worker: threading.Thread | None = None
        self._connect()

    # -------------------------------------------------------------- set-up
    def _connect(self) -> None:
        me, n = self.rank, self.world_size
        listener = socket.create_server((self.store.local_address(), 0), backlog=n)
        try:
            host, port = listener.getsockname()[:2]
            self.store.set(f"{self.prefix}/addr/{me}", f"{host}:{port}".encode())
            token = self._token()
            for peer in range(me):                  # connect to every lower rank
                host, port = self.store.get(f"{self.prefix}/addr/{peer}",
                                            self.timeout).decode().rsplit(":", 1)
                sock = socket.create_connection((host, int(port)), timeout=self.timeout)
                sock.sendall(token + struct.pack("!i", me))
                self._peers[peer] = sock
            self._accept_peers(listener, token)
        finally:
            listener.close()
        for sock in self._peers.values():
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _SOCKBUF)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _SOCKBUF)
            sock.setblocking(False)

    def _token(self) -> bytes:
        """16 random bytes chosen by rank 0: connections without them are refused."""
        key = f"{self.prefix}/token"
        if self.rank == 0:
            self.store.set(key, os.urandom(16))
        return self.store.get(key, self.timeout)

    def _accept_peers(self, listener: socket.socket, token: bytes) -> None:
        """Accepts a connection from every higher rank. Greetings are read
        side by side through a selector, each bounded like the store's
        handshakes: ``_GREETING`` bytes within ``_store.AUTH_TIMEOUT`` seconds,
        at most ``_store.MAX_PENDING`` open at once (beyond, the oldest is
        dropped), so a connection that sends nothing, or drips, holds no
        rank back."""
        me, n = self.rank, self.world_size
        deadline = time.monotonic() + self.timeout
        pending: dict[socket.socket, tuple[bytearray, float]] = {}   # oldest first
        sel = selectors.DefaultSelector()
        listener.setblocking(False)
        sel.register(listener, selectors.EVENT_READ)

        def drop(sock: socket.socket) -> None:
            sel.unregister(sock)
            del pending[sock]
            sock.close()

        try:
            while len(self._peers) < n - 1:
                now = time.monotonic()
                for sock in [s for s, (_, by) in pending.items() if by <= now]:
                    drop(sock)          # silent or too slow
                if now >= deadline:
                    missing = sorted(set(range(me + 1, n)) - set(self._peers))
                    raise DeadlineExceededError(
                        f"pg.distribute: rank {me} waited {self.timeout:g} s for rank(s) "
                        f"{missing} to connect", op="init_process_group")
                wake = min([deadline] + [by for _, by in pending.values()])
                for key, _ in sel.select(max(wake - now, 0.0)):
                    if key.fileobj is listener:
                        try:
                            sock, _ = listener.accept()
                        except (BlockingIOError, InterruptedError):
                            continue
                        except OSError:      # out of descriptors: try again shortly
                            time.sleep(0.05)
                            continue
                        if len(pending) >= _store.MAX_PENDING:
                            drop(next(iter(pending)))
                        sock.setblocking(False)
                        sel.register(sock, selectors.EVENT_READ)
                        pending[sock] = (bytearray(), time.monotonic() + _store.AUTH_TIMEOUT)
                        continue
                    sock = key.fileobj
                    buf = pending[sock][0]
                    try:
                        part = sock.recv(_GREETING - len(buf))
                    except (BlockingIOError, InterruptedError):
                        continue
                    except OSError:
                        part = b""
                    if not part:
                        drop(sock)
                        continue
                    buf += part
                    if len(buf) == _GREETING:
                        sel.unregister(sock)
                        del pending[sock]
                        self._accept_peer(sock, bytes(buf), token)
        finally:
            for sock in list(pending):
                drop(sock)
            sel.close()

    def _accept_peer(self, sock: socket.socket, hello: bytes, token: bytes) -> None:
        """Keeps `sock` as the connection of the rank its greeting names, if
        the greeting carries the group's token; closes it otherwise."""
        peer = struct.unpack("!i", hello[16:])[0]
        if (not hmac.compare_digest(hello[:16], token)
                or not self.rank < peer < self.world_size or peer in self._peers):
            sock.close()         # a stranger on the port, or a stale process
            return
        sock.setblocking(True)
        self._peers[peer] = sock

    def close(self) -> None:
        if self._worker is not None:
            self._jobs.put(None)
            self._worker = None
        for sock in self._peers.values():
            sock.close()
        self._peers.clear()

    # -------------------------------------------------------------- exchange
    def _exchange(self, op: str, dtype: dtypes.DType, sends: dict[int, memoryview],
                  recvs: dict[int, memoryview], timeout: float) -> None:
        """Sends sends[p] to each peer p while receiving recvs[p] from each
        peer p (exactly len(recvs[p]) bytes), all at once."""
        if self._broken is not None:
            raise FailedPreconditionError(
                f"pg.distribute.{op}: the process group is broken by an earlier error "
                f"({self._broken}); call destroy_process_group() and start again", op=op)
        self._seq += 1
        try:
            self._run_exchange(op, dtype, sends, recvs, timeout)
        except OpError as exc:
            self._broken = exc
            raise

    def _run_exchange(self, op: str, dtype: dtypes.DType, sends: dict[int, memoryview],
                      recvs: dict[int, memoryview], timeout: float) -> None:
        code = _OPS.index(op)
        out = {p: [memoryview(_HEADER.pack(_MAGIC, self._seq, code, dtype.enum, len(b))), b]
               for p, b in sends.items()}
        headers = {p: bytearray(_HEADER.size) for p in recvs}
        got = {p: 0 for p in recvs}
        sel = selectors.DefaultSelector()
        for p in set(out) | set(recvs):
            events = (selectors.EVENT_WRITE if p in out else 0) | \
                     (selectors.EVENT_READ if p in recvs else 0)
            sel.register(self._peers[p], events, p)
        deadline = time.monotonic() + timeout
        mismatch: InvalidArgumentError | None = None
        try:
            while out or any(got[p] < _HEADER.size + len(recvs[p]) for p in recvs):
                left = deadline - time.monotonic()
                if left <= 0:
                    if mismatch is not None:
                        raise mismatch
                    self._timed_out(op, timeout, out, recvs, got)
                for key, mask in sel.select(min(left, 1.0)):
                    p = key.data
                    if mask & selectors.EVENT_READ:
                        try:
                            self._read(op, dtype, p, headers[p], recvs[p], got)
                        except InvalidArgumentError as exc:
                            # keep sending our headers briefly, so that the
                            # peers notice the mismatch too instead of waiting
                            mismatch = mismatch or exc
                            got[p] = _HEADER.size + len(recvs[p])
                            deadline = min(deadline, time.monotonic() + 2.0)
                    if mask & selectors.EVENT_WRITE and p in out:
                        self._write(op, p, out)
                    self._update(sel, p, out, recvs, got)
        finally:
            sel.close()
        if mismatch is not None:
            raise mismatch

    def _update(self, sel, p: int, out: dict, recvs: dict, got: dict) -> None:
        events = (selectors.EVENT_WRITE if p in out else 0) | \
                 (selectors.EVENT_READ if p in recvs and
                  got[p] < _HEADER.size + len(recvs[p]) else 0)
        if events:
            sel.modify(self._peers[p], events, p)
        else:
            sel.unregister(self._peers[p])

    def _lost(self, op: str, p: int, why: str) -> UnavailableError:
        return UnavailableError(f"pg.distribute.{op}: rank {self.rank} lost rank {p} ({why}) "
                                f"during collective #{self._seq}: that process died or left "
                                "the group", op=op)

    def _write(self, op: str, p: int, out: dict) -> None:
        parts = out[p]
        try:
            n = self._peers[p].send(parts[0])
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            raise self._lost(op, p, exc.strerror or str(exc)) from None
        parts[0] = parts[0][n:]
        while parts and len(parts[0]) == 0:
            parts.pop(0)
        if not parts:
            del out[p]

    def _read(self, op: str, dtype: dtypes.DType, p: int, header: bytearray,
              buf: memoryview, got: dict) -> None:
        sock, done = self._peers[p], got[p]
        try:
            if done < _HEADER.size:
                n = sock.recv_into(memoryview(header)[done:])
            else:
                n = sock.recv_into(buf[done - _HEADER.size:])
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            raise self._lost(op, p, exc.strerror or str(exc)) from None
        if n == 0:
            raise self._lost(op, p, "connection closed")
        got[p] = done + n
        if done < _HEADER.size <= got[p]:
            self._check_header(op, dtype, p, bytes(header), len(buf))

    def _check_header(self, op: str, dtype: dtypes.DType, p: int, header: bytes,
                      size: int) -> None:
        magic, seq, code, dt, nbytes = _HEADER.unpack(header)
        if magic != _MAGIC:
            raise UnavailableError(f"pg.distribute.{op}: rank {p} sent bytes that are not a "
                                   "collective; the connection is corrupt", op=op)
        if (seq, code, dt, nbytes) != (self._seq, _OPS.index(op), dtype.enum, size):
            theirs = f"{_OPS[code] if code < len(_OPS) else code}"
            try:
                their_dt = dtypes.from_enum(dt).name
            except KeyError:
                their_dt = str(dt)
            raise InvalidArgumentError(
                f"pg.distribute.{op}: rank {p} called {theirs} ({their_dt}, {nbytes} bytes) as "
                f"its collective #{seq} while rank {self.rank} called {op} ({dtype.name}, "
                f"{size} bytes) as #{self._seq}: every rank must call the same collectives in "
                "the same order, with tensors of one dtype and shape", op=op)

    def _timed_out(self, op: str, timeout: float, out: dict, recvs: dict, got: dict) -> None:
        silent = sorted(p for p in recvs if got[p] < _HEADER.size + len(recvs[p]))
        stuck = sorted(out)
        raise DeadlineExceededError(
            f"pg.distribute.{op}: rank {self.rank} waited {timeout:g} s in collective "
            f"#{self._seq}; rank(s) {silent or stuck} did not arrive (a process is stuck, "
            "slower than the timeout, or called other collectives)", op=op)

    # -------------------------------------------------------------- the collectives
    def _others(self):
        return [p for p in range(self.world_size) if p != self.rank]

    def _scatter_reduce(self, op: str, flat: np.ndarray, bounds: list[int], reduction: str,
                        dtype: dtypes.DType, timeout: float, out: np.ndarray) -> None:
        """Rank r gets flat[bounds[r]:bounds[r+1]] of every rank, reduced into `out`."""
        me = self.rank
        lo, hi = bounds[me], bounds[me + 1]
        parts = {p: np.empty(hi - lo, flat.dtype) for p in self._others()}
        self._exchange(op, dtype, {p: _bytes(flat[bounds[p]:bounds[p + 1]])
                                   for p in self._others()},
                       {p: _bytes(parts[p]) for p in parts}, timeout)
        parts[me] = flat[lo:hi]
        _reduce([parts[p] for p in range(self.world_size)], reduction, out)

    # -------------------------------------------------------------- asynchronous
    def all_reduce_async(self, t: Tensor, op: str, timeout: float) -> Work:
        """Reads `t` to the host and all-reduces it on the backend's thread
        while the caller goes on launching work (reading `t` there waits for
        the device without stalling the caller); ``Work.wait()`` places the
        result on `t`'s device. The same exchanges and reduction as
        ``all_reduce`` (the same bits), in the order of the calls."""
        if not (t.dtype.is_floating or t.dtype.is_integer or t.dtype.is_bool):
            _array(t, "all_reduce")        # raises the typed error now
        work = Work()
        self._in_flight = [w for w in self._in_flight if not w.done()] + [work]
        if self._worker is None:
            self._worker = threading.Thread(target=self._run_jobs, args=(self._jobs,),
                                            name=f"pg.distribute host rank {self.rank}",
                                            daemon=True)
            self._worker.start()
        self._jobs.put((work, t, op, timeout,
                        lambda result: _place(result.reshape(t.shape), t)))
        return work

    def _run_jobs(self, jobs: queue.Queue) -> None:
        while True:
            job = jobs.get()
            if job is None:
                return
            work, t, op, timeout, finish = job
            try:
                try:
                    a = _array(t, "all_reduce")
                except OpError as exc:
                    # this rank cannot join the collective: the ranks are out
                    # of step, so later collectives must not pair up wrongly
                    self._broken = self._broken or exc
                    raise
                with self.lock:
                    work.started_at = time.perf_counter()
                    result = self._all_reduce_array(a, op, t.dtype, timeout)
            except BaseException as exc:  # noqa: BLE001 (handed to the waiting thread)
                work.set_error(exc)
            else:
                work.set_result(result, finish)

    def _drain(self) -> None:
        """Waits for the collectives started asynchronously (their errors
        are raised at their own wait; a fault has broken the group)."""
        for w in self._in_flight:
            w._done.wait()
        self._in_flight = []

    @_serialised
    def all_reduce(self, t: Tensor, op: str, timeout: float) -> Tensor:
        a = _array(t, "all_reduce")
        return _place(self._all_reduce_array(a, op, t.dtype, timeout).reshape(a.shape), t)

    def _all_reduce_array(self, a: np.ndarray, op: str, dtype: dtypes.DType,
                          timeout: float) -> np.ndarray:
        """The all-reduce of host array `a` (flat result); under the lock."""
        n, flat = self.world_size, a.reshape(-1)
        result = np.empty_like(flat)
        if flat.nbytes <= _ONE_ROUND_BYTES:
            # one exchange of whole tensors, each rank reducing all of them:
            # the same bits, half the round trips
            parts = {p: np.empty_like(flat) for p in self._others()}
            self._exchange("all_reduce", dtype, {p: _bytes(flat) for p in self._others()},
                           {p: _bytes(parts[p]) for p in parts}, timeout)
            parts[self.rank] = flat
            _reduce([parts[p] for p in range(n)], op, result)
            return result
        bounds = [flat.size * i // n for i in range(n + 1)]
        mine = result[bounds[self.rank]:bounds[self.rank + 1]]
        self._scatter_reduce("all_reduce", flat, bounds, op, dtype, timeout, mine)
        self._exchange("all_reduce", dtype, {p: _bytes(mine) for p in self._others()},
                       {p: _bytes(result[bounds[p]:bounds[p + 1]]) for p in self._others()},
                       timeout)
        return result

    @_serialised
    def reduce_scatter(self, t: Tensor, op: str, timeout: float) -> Tensor:
        a = _array(t, "reduce_scatter")
        n = self.world_size
        rows = a.shape[0] // n
        row = a[0].size if a.shape[0] else 0
        bounds = [i * rows * row for i in range(n + 1)]
        mine = np.empty(rows * row, a.dtype)
        self._scatter_reduce("reduce_scatter", a.reshape(-1), bounds, op, t.dtype, timeout, mine)
        return _place(mine.reshape((rows,) + a.shape[1:]), t)

    @_serialised
    def all_gather(self, t: Tensor, axis: int, timeout: float) -> Tensor:
        a = _array(t, "all_gather")
        parts = {p: np.empty_like(a) for p in self._others()}
        self._exchange("all_gather", t.dtype, {p: _bytes(a) for p in self._others()},
                       {p: _bytes(parts[p]) for p in parts}, timeout)
        parts[self.rank] = a
        return _place(np.concatenate([parts[p] for p in range(self.world_size)], axis), t)

    @_serialised
    def broadcast(self, t: Tensor, src: int, timeout: float) -> Tensor:
        a = _array(t, "broadcast")
        if self.rank == src:
            self._exchange("broadcast", t.dtype, {p: _bytes(a) for p in self._others()}, {},
                           timeout)
            return _place(a.copy(), t)
        out = np.empty_like(a)
        self._exchange("broadcast", t.dtype, {}, {src: _bytes(out)}, timeout)
        return _place(out, t)

    @_serialised
    def all_to_all(self, t: Tensor, timeout: float) -> Tensor:
        a = _array(t, "all_to_all")
        chunks = np.split(a, self.world_size, axis=0)
        parts = {p: np.empty_like(chunks[p]) for p in self._others()}
        self._exchange("all_to_all", t.dtype, {p: _bytes(chunks[p]) for p in self._others()},
                       {p: _bytes(parts[p]) for p in parts}, timeout)
        parts[self.rank] = chunks[self.rank]
        return _place(np.concatenate([parts[p] for p in range(self.world_size)], 0), t)


register_backend("host", HostBackend)
