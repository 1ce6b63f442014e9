"""Build of pluggable-cuda, the CUDA reference plugin, as its own distribution.

`pip install ./reference_device/cuda` (after pluggable itself) compiles
libpluggable_cuda.so with nvcc, one compile job per core, and installs it in
the package pluggable_cuda; pluggable finds it through the
`pluggable.plugins` entry point of pyproject.toml. It is built the way a
third-party plugin package would be: against pluggable's public headers (the
checkout's c_api/include, else `pluggable.get_include()` of the installed
core), plus the graph optimizer (../graph) and XSpace writer (../profiler)
sources the reference plugins share.

Variables: NVCC (the CUDA compiler; else nvcc on PATH, else
/usr/local/cuda/bin/nvcc), NVCCFLAGS (extra nvcc flags), PLUGGABLE_CUDA_ARCHS
(e.g. "90" or "80;90"; by default the GPUs present, asked of the CUDA
runtime through cuda-python where the build environment has it, else of
nvidia-smi, else sm_80 and sm_90), CC, CXX, CPPFLAGS, CFLAGS, CXXFLAGS,
LDFLAGS. Objects are cached per set of tools and flags in build/.
"""
from __future__ import annotations

import concurrent.futures
import hashlib
import importlib.util
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
GRAPH_SRC = HERE.parent / "graph"
PROFILER_SRC = HERE.parent / "profiler"
OBJ_CACHE = HERE / "build" / "plugin-objects"
PACKAGE = "pluggable_cuda"
DEFAULT_CUDA_ARCHS = ["80", "90"]


class BuildError(RuntimeError):
    """The plugin cannot be built here; the message says what to do."""


def say(msg: str) -> None:
    """A progress line the user sees: pip hides a build's output unless -v,
    so the line goes to the terminal when there is one, and to stderr."""
    line = f"pluggable-cuda: {msg}\n"
    sys.stderr.write(line)
    sys.stderr.flush()
    try:
        with open("/dev/tty", "w") as tty:
            tty.write(line)
    except OSError:
        pass


def _include_dir() -> pathlib.Path:
    """The checkout's public headers, else those the installed core ships."""
    inc = REPO / "c_api" / "include"
    if (inc / "tensorflow").is_dir():
        return inc
    try:
        import pluggable  # noqa: PLC0415
        return pathlib.Path(pluggable.get_include())
    except ImportError:
        raise BuildError("pluggable's headers were not found: build from a checkout of "
                         "pluggable, or install pluggable first (pip install pluggable) "
                         "and build with --no-build-isolation") from None


def _run(cmd: list[str]) -> None:
    try:
        proc = subprocess.run(cmd, cwd=HERE, capture_output=True, text=True)
    except FileNotFoundError:
        raise BuildError(f"the compiler {cmd[0]!r} was not found: install it, or name "
                         "another with NVCC=..., CC=... or CXX=...") from None
    if proc.returncode != 0:
        out = proc.stdout + proc.stderr
        hint = ""
        if re.search(r"Unsupported gpu architecture|not defined for option 'gpu-name'|"
                     r"Value '.*' is not defined for option", out):
            hint = ("\nthis nvcc cannot compile for the GPU architecture asked for: install a "
                    "newer CUDA toolkit, or pick older architectures with "
                    "PLUGGABLE_CUDA_ARCHS (e.g. PLUGGABLE_CUDA_ARCHS=80)")
        raise BuildError(f"command failed: {' '.join(cmd)}\n{out}{hint}")


def _stale(obj: pathlib.Path, deps: list[pathlib.Path]) -> bool:
    if not obj.exists():
        return True
    t = obj.stat().st_mtime
    return any(d.stat().st_mtime > t for d in deps)


def _compile_all(jobs: list[tuple[list[str], pathlib.Path, list[pathlib.Path]]]) -> None:
    """Runs the compile commands whose object is older than its inputs, one
    job per core, and says how far it got."""
    todo = [cmd for cmd, obj, deps in jobs if _stale(obj, deps)]
    workers = max(1, os.cpu_count() or 1)
    say(f"compiling {len(todo)} of {len(jobs)} files with {workers} jobs")
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        futures = {pool.submit(_run, c): c for c in todo}
        for i, f in enumerate(concurrent.futures.as_completed(futures), 1):
            f.result()
            say(f"[{i}/{len(todo)}] {pathlib.Path(futures[f][-3]).name}")


def _tool(var: str, default: str) -> list[str]:
    """The command named by environment variable `var` (which may carry
    arguments, e.g. CC="ccache gcc"), or `default`."""
    return shlex.split(os.environ.get(var, "").strip() or default)


def _flags(*names: str) -> list[str]:
    """The flags in the environment variables `names`, in order."""
    return [f for n in names for f in shlex.split(os.environ.get(n, ""))]


def _objdir(kind: str, *cmds: list[str]) -> pathlib.Path:
    """Where objects built with these tools and flags are cached."""
    tag = hashlib.sha256(repr(cmds).encode()).hexdigest()[:10]
    d = OBJ_CACHE / f"{kind}-{tag}"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _headers(include: pathlib.Path) -> list[pathlib.Path]:
    return (list(include.glob("*.h")) + list(HERE.glob("*.h")) + list(HERE.glob("*.cuh"))
            + list(GRAPH_SRC.glob("*.h")) + list(PROFILER_SRC.glob("*.h"))
            + [HERE / "setup.py"])


def _cudart():
    """cuda-python's runtime module (the checkout's
    pluggable/_core/cuda_python.py, loaded by path), or None where the build
    environment lacks cuda-python (an isolated build; one with
    `pip install --no-build-isolation` after `pip install cuda-python`, or
    setup.py run directly, has it)."""
    path = REPO / "pluggable" / "_core" / "cuda_python.py"
    if not path.exists():
        return None
    spec = importlib.util.spec_from_file_location("pluggable_cuda_python", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.cudart()


def _gpu_archs(rt) -> list[str]:
    """The compute capabilities of the GPUs present ("90" for 9.0), asked of
    the CUDA runtime `rt` (cuda-python); [] without a driver or a GPU."""
    err, count = rt.cudaGetDeviceCount()
    if int(err) == 35:  # cudaErrorInsufficientDriver
        say("the NVIDIA driver is older than this CUDA runtime: the plugin is built for "
            "the default architectures but will not run until the driver is updated (or a "
            "CUDA toolkit no newer than the driver is used, NVCC=...)")
    if int(err) != 0:
        return []
    attr = rt.cudaDeviceAttr
    caps = set()
    for i in range(count):
        e1, major = rt.cudaDeviceGetAttribute(attr.cudaDevAttrComputeCapabilityMajor, i)
        e2, minor = rt.cudaDeviceGetAttribute(attr.cudaDevAttrComputeCapabilityMinor, i)
        if int(e1) == 0 and int(e2) == 0:
            caps.add(f"{major}{minor}")
    return sorted(caps)


def _cuda_archs() -> list[str]:
    """PLUGGABLE_CUDA_ARCHS, else the GPUs present (cuda-python, else
    nvidia-smi where cuda-python is not in the build environment), else
    DEFAULT_CUDA_ARCHS."""
    env = os.environ.get("PLUGGABLE_CUDA_ARCHS")
    if env:
        return [a.strip().replace(".", "") for a in env.replace(",", ";").split(";") if a.strip()]
    rt = _cudart()
    caps = _gpu_archs(rt) if rt is not None else []
    if caps:
        return caps
    smi = shutil.which("nvidia-smi") if rt is None else None
    if smi:
        proc = subprocess.run([smi, "--query-gpu=compute_cap", "--format=csv,noheader"],
                              capture_output=True, text=True)
        caps = sorted({l.strip().replace(".", "") for l in proc.stdout.splitlines() if l.strip()})
        if proc.returncode == 0 and caps:
            return caps
    return DEFAULT_CUDA_ARCHS


def build_cuda_plugin(out: pathlib.Path) -> None:
    src = HERE
    nvcc = os.environ.get("NVCC", "").strip() or shutil.which("nvcc") or (
        "/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
    if nvcc is None:
        raise BuildError("no CUDA toolkit found (nvcc is not on PATH, nor in "
                         "/usr/local/cuda/bin): install the CUDA toolkit, or name its "
                         "compiler with NVCC=/path/to/nvcc. pluggable itself and its host "
                         "plugin need no CUDA.")
    INCLUDE = _include_dir()
    archs = _cuda_archs()
    say(f"building the CUDA reference plugin for sm_{', sm_'.join(archs)} with {nvcc} "
        "(PLUGGABLE_CUDA_ARCHS picks others)")
    gencode = []
    for a in archs:
        gencode += ["-gencode", f"arch=compute_{a},code=sm_{a}"]
    gencode += ["-gencode", f"arch=compute_{archs[-1]},code=compute_{archs[-1]}"]
    nvcc_cmd = [*shlex.split(nvcc), *_flags("NVCCFLAGS")]
    cuda_inc = pathlib.Path(shlex.split(nvcc)[0]).resolve().parent.parent / "include"
    ldflags = _flags("LDFLAGS")
    host_link = ["-Xcompiler", ",".join(ldflags)] if ldflags else []
    objdir = _objdir("cuda-" + "-".join(archs), nvcc_cmd, _tool("CC", "cc"),
                     _tool("CXX", "c++"), _flags("CPPFLAGS", "CFLAGS", "CXXFLAGS", "LDFLAGS"))
    deps = _headers(INCLUDE)
    jobs, objs = [], []
    extra = sorted(GRAPH_SRC.glob("*.c")) + sorted(PROFILER_SRC.glob("*.c"))
    for f in sorted(src.iterdir()) + extra:
        obj = objdir / (f.name + ".o")
        if f.suffix == ".cu":
            cmd = [*nvcc_cmd, "-O3", "-std=c++17", "-Xcompiler", "-fPIC", f"-I{INCLUDE}",
                   f"-I{src}", f"-I{GRAPH_SRC}", f"-I{PROFILER_SRC}", *gencode,
                   "-c", str(f), "-o", str(obj)]
        elif f.suffix in (".c", ".cc", ".cpp"):
            c = f.suffix == ".c"
            std = ["-std=gnu11"] if c else []
            cmd = [*(_tool("CC", "cc") if c else _tool("CXX", "c++")), "-O2", "-fPIC", "-Wall",
                   *std, f"-I{INCLUDE}", f"-I{src}", f"-I{GRAPH_SRC}", f"-I{PROFILER_SRC}",
                   f"-I{cuda_inc}",
                   *_flags("CPPFLAGS", "CFLAGS" if c else "CXXFLAGS"),
                   "-c", str(f), "-o", str(obj)]
        else:
            continue
        objs.append(str(obj))
        jobs.append((cmd, obj, deps + [f]))
    _compile_all(jobs)
    _run([*nvcc_cmd, "-shared", "-cudart", "static", *host_link, "-o",
          str(out / "libpluggable_cuda.so"), *objs, "-ldl", "-lpthread"])
    say(f"built {out / 'libpluggable_cuda.so'} for sm_{', sm_'.join(archs)}")




class BuildPyWithPlugin(build_py):
    """Copies the Python package, then builds libpluggable_cuda.so into it
    (and into the source package for an editable install)."""

    def run(self) -> None:
        super().run()
        targets = {pathlib.Path(self.build_lib) / PACKAGE}
        if getattr(self, "editable_mode", False):
            targets = {HERE / PACKAGE}
        try:
            for out in targets:
                out.mkdir(parents=True, exist_ok=True)
                build_cuda_plugin(out)
        except BuildError as exc:
            say(f"error: {exc}")
            raise SystemExit(f"pluggable-cuda: {exc}") from None


class BinaryDistribution(Distribution):
    """A wheel for one platform: it holds a shared object."""

    def has_ext_modules(self) -> bool:
        return True


if __name__ == "__main__" and sys.argv[1:2] == ["--plugin-into"] and len(sys.argv) == 3:
    # `python3 setup.py --plugin-into DIR`: only libpluggable_cuda.so, into DIR
    # (e.g. pluggable/plugins of a checkout, as the GPU machine's scripts do).
    try:
        build_cuda_plugin(pathlib.Path(sys.argv[2]).resolve())
    except BuildError as exc:
        raise SystemExit(f"pluggable-cuda: {exc}") from None
elif __name__ == "__main__":  # setuptools runs this file as __main__
    setup(distclass=BinaryDistribution, cmdclass={"build_py": BuildPyWithPlugin})
