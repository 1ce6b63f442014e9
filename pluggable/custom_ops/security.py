"""Which custom-op libraries and sources may be loaded or compiled.

``PLUGGABLE_CUSTOM_OP_ALLOW_LIST`` (``os.pathsep``-separated directories)
restricts them: a file is accepted only if its resolved path lies inside a
resolved allowed directory (compared by path components, so ``/opt/ops_evil``
is not inside ``/opt/ops``; a symlink that leads out of the tree is refused),
it is a regular file owned by the user (or root), and neither group nor
others may write it; every entry must be an absolute path. The same checks
hold for the headers a source includes and for compiled libraries of the
cache. The file is opened once (``O_NOFOLLOW | O_NONBLOCK``, so a FIFO never
blocks), its real location is read from the descriptor and everything after (hashing a source, loading a library) reads
that same descriptor, so it cannot be swapped between the check and the use.
Without the variable every path is accepted and a one-time warning says how
to restrict it."""
from __future__ import annotations

import os
import stat
import warnings
from pathlib import Path

from ..framework import errors

ENV = "PLUGGABLE_CUSTOM_OP_ALLOW_LIST"
_warned = [False]


def allowed_dirs() -> list[Path] | None:
    """The resolved allowed directories, or None when the variable is unset.
    Every entry must be absolute: a relative one (``.``) would depend on the
    current directory, so it raises PermissionDeniedError instead."""
    raw = os.environ.get(ENV)
    if raw is None:
        return None
    out = []
    for p in raw.split(os.pathsep):
        if not p:
            continue
        if not os.path.isabs(p):
            raise errors.PermissionDeniedError(
                f"{ENV} entry {p!r} is not an absolute path; it would be resolved against "
                f"the current directory: write the directory as an absolute path")
        out.append(Path(os.path.realpath(p)))
    return out


def _inside(path: Path, root: Path) -> bool:
    return path.parts[:len(root.parts)] == root.parts


def _warn_open() -> None:
    if not _warned[0]:
        _warned[0] = True
        warnings.warn(f"pg.custom_op loads any library or source; set {ENV} to the "
                      "directories custom ops may come from to restrict it",
                      RuntimeWarning, stacklevel=4)


def open_checked(path: str, extra_dirs: tuple = ()) -> int:
    """Opens `path` read-only and checks what was opened (not the name):
    opened with O_NOFOLLOW | O_NONBLOCK (a FIFO or device never blocks),
    then, on the descriptor, a regular file, owned by the user or root, not
    writable by group or others, whose real location (``/proc/self/fd/N``)
    is inside the allow-list (or `extra_dirs`) when one is set. Returns the
    descriptor (the caller closes it; load it as ``/proc/self/fd/N``).
    Raises PermissionDeniedError saying why a file is refused, NotFoundError
    if it does not exist."""
    dirs = allowed_dirs()
    if dirs is None:
        _warn_open()
    try:
        real = os.path.realpath(path)
        fd = os.open(real, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise errors.NotFoundError(f"custom op file {path!r} does not exist") from None
    except OSError as exc:
        raise errors.PermissionDeniedError(f"cannot open custom op file {path!r}: {exc}") from None
    try:
        _check_fd(fd, path, dirs, [Path(os.path.realpath(d)) for d in extra_dirs])
    except BaseException:
        os.close(fd)
        raise
    return fd


def _where(fd: int, path: str) -> Path:
    try:
        w = os.readlink(f"/proc/self/fd/{fd}")
    except OSError as exc:
        raise errors.PermissionDeniedError(
            f"cannot find where custom op file {path!r} really is (/proc/self/fd: "
            f"{exc.strerror}); loading custom ops needs Linux's /proc") from None
    if w.endswith(" (deleted)"):
        raise errors.PermissionDeniedError(f"custom op file {path!r} was deleted while opened")
    return Path(w)


def check_stat(st: os.stat_result, path: str, what: str = "custom op file") -> None:
    """Refuses a non-regular file, one owned by another user (root excepted)
    and one writable by group or others."""
    if not stat.S_ISREG(st.st_mode):
        raise errors.PermissionDeniedError(f"{what} {path!r} is not a regular file")
    if st.st_uid not in (os.geteuid(), 0):
        raise errors.PermissionDeniedError(
            f"{what} {path!r} belongs to user id {st.st_uid}, not to you or root, who "
            "could change its code: copy it to a file you own")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise errors.PermissionDeniedError(
            f"{what} {path!r} is writable by group or others (mode "
            f"{stat.S_IMODE(st.st_mode):o}); run `chmod go-w {path}`")


def _check_fd(fd: int, path: str, dirs: list[Path] | None, extra: list[Path]) -> None:
    check_stat(os.fstat(fd), path)
    if dirs is not None:
        real = _where(fd, path)
        roots = [*dirs, *extra]
        if not any(_inside(real, d) for d in roots):
            raise errors.PermissionDeniedError(
                f"custom op file {path!r} (really: {real}) is outside {ENV} "
                f"({os.pathsep.join(map(str, dirs))}); move it there or extend the variable")


def check_header(path: str, extra_dirs: tuple = ()) -> None:
    """Refuses a header a custom op source includes that is writable by group
    or others, owned by another user, or outside the allow-list (the shipped
    include directory, `extra_dirs`, always allowed)."""
    real = Path(os.path.realpath(path))
    try:
        st = os.stat(real)
    except OSError as exc:
        raise errors.PermissionDeniedError(f"cannot inspect header {path!r}: {exc.strerror}") from None
    check_stat(st, path, "custom op header")
    dirs = allowed_dirs()
    if dirs is not None and not any(_inside(real, Path(os.path.realpath(d)))
                                    for d in [*dirs, *extra_dirs]):
        raise errors.PermissionDeniedError(
            f"custom op header {path!r} (really: {real}) is outside {ENV} "
            f"({os.pathsep.join(map(str, dirs))}); move it there or extend the variable")


def read_fd(fd: int) -> bytes:
    """The whole content of an open file, from its start."""
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while True:
        b = os.read(fd, 1 << 20)
        if not b:
            return b"".join(chunks)
        chunks.append(b)
