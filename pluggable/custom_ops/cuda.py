"""GPU custom ops: compiling ``.cu`` sources for a device's compute
capability and finding the plugin's native stream.

A plugin that exports ``PG_GetNativeStreamFns`` (``pluggable_native_stream.h``,
implemented by the CUDA reference plugin) hands over the ``cudaStream_t``
behind its default stream and the device's compute capability; a custom op's
function then receives that stream as its ``stream`` argument and enqueues
its kernels on it, in order with every other op of the device. The
extension itself is read in ``runtime.native_stream``."""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path
from ..framework import errors
from ..runtime.native_stream import NativeStream, native_stream  # noqa: F401 (re-exported)
from . import compiler, nvrtc

CUDA_EXTS = (".cu",)


def nvcc_command() -> list[str] | None:
    """``$NVCC`` or ``nvcc`` on PATH or in CUDA_HOME, or None."""
    cmd = shlex.split(os.environ.get("NVCC") or "nvcc")
    if cmd and shutil.which(cmd[0]):
        return cmd
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    p = Path(home) / "bin" / "nvcc"
    return [str(p)] if p.exists() else None


def arch_flags(capability: tuple[int, int]) -> list[str]:
    """Machine code for the device's architecture plus PTX for newer ones."""
    cc = f"{capability[0]}{capability[1]}"
    return ["-gencode", f"arch=compute_{cc},code=[sm_{cc},compute_{cc}]"]


def compiler_choice() -> str:
    """``PLUGGABLE_CUSTOM_OP_COMPILER``: '' (nvcc where found, else NVRTC),
    'nvcc' or 'nvrtc'; anything else is an InvalidArgumentError."""
    choice = os.environ.get(nvrtc.ENV, "").strip().lower()
    if choice not in ("", "nvcc", "nvrtc"):
        raise errors.InvalidArgumentError(
            f"{nvrtc.ENV}={choice!r}: use 'nvcc' or 'nvrtc' (or leave it unset)")
    return choice


def compile_cuda(src: bytes, src_path: str, capability: tuple[int, int],
                 flags: list[str] = ()) -> Path:
    """The cached library of a ``.cu`` source for `capability`: nvcc, or
    NVRTC plus the host compiler (``nvrtc``) where nvcc is absent or
    ``PLUGGABLE_CUSTOM_OP_COMPILER=nvrtc``."""
    choice = compiler_choice()
    cmd = nvcc_command() if choice != "nvrtc" else None
    if cmd is None:
        if choice == "nvcc":
            raise errors.FailedPreconditionError(
                f"compiling {src_path}: {nvrtc.ENV}=nvcc but no nvcc was found (set NVCC or "
                "CUDA_HOME)")
        return nvrtc.compile_cuda(src, src_path, capability, list(flags))
    src_dir = Path(os.path.realpath(src_path)).parent
    fl = ["-O2", "-shared", "-Xcompiler", "-fPIC", "-std=c++17", f"-I{compiler.INCLUDE_DIR}",
          f"-I{src_dir}", *arch_flags(capability), *flags]
    out = compiler.cache_dir() / (compiler.cache_key(src, ".cu", src_dir, cmd, fl) + ".so")
    if out.exists():
        return out
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".build-") as tmp:
        s = Path(tmp) / "source.cu"
        s.write_bytes(src)
        so = Path(tmp) / "lib.so"
        r = subprocess.run([*cmd, *fl, "-o", str(so), str(s)], capture_output=True, text=True)
        if r.returncode != 0:
            msg = (r.stderr or r.stdout).replace(str(s), src_path)
            e = errors.InvalidArgumentError(
                f"compiling custom op source {src_path} failed ({' '.join(cmd)}, exit "
                f"{r.returncode}):\n{msg}")
            e.compiler_output = msg
            raise e
        os.chmod(so, 0o600)
        os.replace(so, out)
    return out
