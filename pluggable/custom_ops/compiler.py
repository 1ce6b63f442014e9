"""Compiling custom-op sources into a content-addressed cache.

A source (``.c``, ``.cc``, ``.cpp``, ``.cxx``) is compiled with ``$CC`` /
``$CXX`` (default ``cc`` / ``c++``) into
``$XDG_CACHE_HOME/pluggable/custom_ops/<key>.so`` (``~/.cache`` when unset),
where ``key`` is the sha256 of the source, the headers it includes,
the compiler's identity and version, and the flags. The headers are the
compiler's own ``-MM`` list (so ``-I`` directories count); each must pass the
allow-list checks of ``security``. The cache directory must belong to the
user and be writable by nobody else, and a cached library is opened and
checked like any library before it is loaded. A later call, in this
process or another, finds the file and compiles nothing. The compiler writes
a private temporary file that is renamed into place, so processes compiling
the same source at once never see a partial library."""
from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

from ..framework import errors
from . import security

INCLUDE_DIR = Path(__file__).resolve().parent / "include"
C_EXTS = (".c",)
CXX_EXTS = (".cc", ".cpp", ".cxx")
SOURCE_EXTS = C_EXTS + CXX_EXTS
_INCLUDE_RE = re.compile(rb'^\s*#\s*include\s*"([^"]+)"', re.M)
_versions: dict[str, str] = {}


def cache_dir() -> Path:
    """The directory of compiled custom ops (created private on first use).
    An existing one owned by another user or writable by group or others
    raises PermissionDeniedError: anyone who can write there could plant a
    library under a computable key."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    d = Path(base) / "pluggable" / "custom_ops"
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = os.stat(d, follow_symlinks=False)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        st = None
    if st is None or st.st_uid != os.geteuid():
        who = "is not a directory" if st is None else f"belongs to user id {st.st_uid}"
        raise errors.PermissionDeniedError(
            f"the custom op cache {d} {who}, not to you, so another user could plant a "
            "library there: set XDG_CACHE_HOME to a directory of your own")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise errors.PermissionDeniedError(
            f"the custom op cache {d} is writable by group or others (mode "
            f"{stat.S_IMODE(st.st_mode):o}), so another user could plant a library there: "
            f"run `chmod go-w {d}` or set XDG_CACHE_HOME to a private directory")
    return d


def compiler_for(ext: str) -> list[str]:
    """The compiler command for a source extension, honouring CC / CXX."""
    var, default = ("CC", "cc") if ext in C_EXTS else ("CXX", "c++")
    cmd = shlex.split(os.environ.get(var) or default)
    if not cmd or shutil.which(cmd[0]) is None:
        raise errors.FailedPreconditionError(
            f"no C/C++ compiler found for {ext} sources (${var}={cmd[0] if cmd else ''!r}); "
            f"install one or set {var}")
    return cmd


def flags_for(ext: str, extra: list[str]) -> list[str]:
    std = [] if ext in C_EXTS else ["-std=c++17"]
    return ["-O2", "-shared", "-fPIC", *std, f"-I{INCLUDE_DIR}", *extra]


def compiler_version(cmd: list[str]) -> str:
    """`cmd --version`, remembered per binary identity (path, size, mtime)
    in the cache so that a cache hit runs no process."""
    exe = os.path.realpath(shutil.which(cmd[0]) or cmd[0])
    st = os.stat(exe)
    ident = f"{' '.join(cmd)}|{exe}|{st.st_size}|{st.st_mtime_ns}"
    if ident in _versions:
        return _versions[ident]
    f = cache_dir() / ("cc-" + hashlib.sha256(ident.encode()).hexdigest()[:24] + ".version")
    try:
        v = f.read_text()
    except OSError:
        out = subprocess.run([*cmd, "--version"], capture_output=True, text=True)
        v = ident + "\n" + out.stdout
        _atomic_write(f, v.encode())
    _versions[ident] = v
    return v


def _headers(src: bytes, dirs: list[Path], seen: dict[str, bytes]) -> None:
    for name in _INCLUDE_RE.findall(src):
        n = name.decode(errors="replace")
        for d in dirs:
            p = d / n
            if p.is_file():
                key = str(p.resolve())
                if key not in seen:
                    seen[key] = p.read_bytes()
                    _headers(seen[key], [p.parent, *dirs], seen)
                break


def _header_hash(base: str, headers: list[str]) -> str:
    """The cache key: `base` and the path and content of every header, each
    checked by ``security.check_header`` first."""
    h = hashlib.sha256(base.encode())
    for k in sorted(set(headers)):
        security.check_header(k, (INCLUDE_DIR,))
        h.update(b"\0H" + k.encode() + b"\0" + Path(k).read_bytes())
    return h.hexdigest()


def _parse_deps(text: str, source: str) -> list[str]:
    """The headers of a make-style dependency file (``-MMD``), less `source`."""
    _, _, rest = text.replace("\\\n", " ").partition(":")
    return [os.path.realpath(t) for t in rest.split() if t != source]


def _cached_headers(d: Path, base: str) -> list[str] | None:
    """The headers recorded when `base` was last compiled, or None."""
    m = d / (base + ".deps")
    if not os.path.lexists(m):
        return None
    fd = security.open_checked(str(m), (d,))
    try:
        return [x for x in security.read_fd(fd).decode().split("\n") if x]
    finally:
        os.close(fd)


def cache_key(src: bytes, ext: str, src_dir: Path, cmd: list[str], flags: list[str]) -> str:
    """For a CUDA source: sha256 of the source, its quoted includes (each
    checked by ``security.check_header``), the compiler's identity and
    version and the flags."""
    h = hashlib.sha256()
    h.update(b"pluggable-custom-op-1\0" + ext.encode() + b"\0" + src)
    seen: dict[str, bytes] = {}
    _headers(src, [src_dir, INCLUDE_DIR], seen)
    for k in seen:
        security.check_header(k, (INCLUDE_DIR,))
    for k in sorted(seen):
        h.update(b"\0H" + k.encode() + b"\0" + seen[k])
    h.update(b"\0C" + compiler_version(cmd).encode() + b"\0F" + "\0".join(flags).encode())
    return h.hexdigest()


def _atomic_write(dst: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=dst.parent, prefix=".tmp-")
    try:
        os.write(fd, data)
        os.close(fd)
        os.replace(tmp, dst)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def compile_source(src: bytes, ext: str, src_path: str, flags: list[str] = ()) -> Path:
    """The cached library built from `src` (the content of `src_path`, read
    through the checked descriptor), compiling it on a miss. The key covers
    the source, the compiler (path, identity, version), the flags, and the
    content of every header the compiler read (its ``-MMD`` list, recorded
    in ``<base>.deps`` so a hit runs no process). A compile error raises
    InvalidArgumentError carrying the compiler's message."""
    cmd = compiler_for(ext)
    src_dir = Path(os.path.realpath(src_path)).parent
    fl = [*flags_for(ext, list(flags)), f"-I{src_dir}"]
    d = cache_dir()
    hb = hashlib.sha256(b"pluggable-custom-op-2\0" + ext.encode() + b"\0" + src)
    hb.update(b"\0C" + compiler_version(cmd).encode() + b"\0F" + "\0".join(fl).encode())
    base = hb.hexdigest()
    known = _cached_headers(d, base)
    if known is not None:
        out = d / (_header_hash(base, known) + ".so")
        if os.path.lexists(out):
            return out
    with tempfile.TemporaryDirectory(dir=d, prefix=".build-") as tmp:
        s = Path(tmp) / ("source" + ext)
        s.write_bytes(src)
        lib = Path(tmp) / "lib.so"
        dep = Path(tmp) / "lib.d"
        r = subprocess.run([*cmd, *fl, "-MMD", "-MF", str(dep), "-o", str(lib), str(s)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            msg = (r.stderr or r.stdout).replace(str(s), src_path)
            e = errors.InvalidArgumentError(
                f"compiling custom op source {src_path} failed ({' '.join(cmd)}, exit "
                f"{r.returncode}):\n{msg}")
            e.compiler_output = msg
            raise e
        headers = _parse_deps(dep.read_text(), os.path.realpath(s))
        out = d / (_header_hash(base, headers) + ".so")
        os.chmod(lib, 0o600)
        os.replace(lib, out)
        _atomic_write(d / (base + ".deps"), "".join(h + "\n" for h in sorted(set(headers))).encode())
    return out
