"""Build of the core runtime (cffi) and of the reference device plugins.

`pip install .` compiles:
  * pluggable._core: the core C runtime (c_api/src) through cffi;
  * pluggable/framework/proto/*_pb2.py: the wire-format classes (GraphDef,
    XSpace ...), by protoc from grpcio-tools (generate_protos);
  * pluggable/plugins/libpluggable_my_device.so: the host reference plugin;
  * pluggable/plugins/libpluggable_cuda.so: the CUDA reference plugin, when
    nvcc is found (PLUGGABLE_BUILD_CUDA=0 skips it; PLUGGABLE_CUDA_ARCHS, e.g.
    "90" or "80;90", picks the GPU architectures; by default those of the
    GPUs present, asked of the CUDA runtime through cuda-python where the
    build environment has it, else of nvidia-smi, else sm_80 and sm_90).
Plugins are built like third-party plugins: shared objects with the TF_*
symbols left unresolved, bound to the core when loaded.

The usual variables choose the tools and add flags, for the core and both
plugins (e.g. a sanitizer build: CFLAGS="-fsanitize=address,undefined -g"
LDFLAGS=-fsanitize=address,undefined): CC and CXX (compilers), CPPFLAGS,
CFLAGS, CXXFLAGS (compile flags, after the project's own), LDFLAGS (link
flags), NVCC and NVCCFLAGS (the CUDA compiler and its extra flags). The core
gets them through setuptools; the plugins through `_tool`/`_flags` below.
Objects are cached per set of tools and flags.
"""
from __future__ import annotations

import concurrent.futures
import hashlib
import importlib.util
import os
import pathlib
import shlex
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = pathlib.Path(__file__).resolve().parent
INCLUDE = ROOT / "c_api" / "include"
# The graph optimizer code both reference plugins compile in.
GRAPH_SRC = ROOT / "reference_device" / "graph"
# The XSpace writer both reference plugins' profilers compile in.
PROFILER_SRC = ROOT / "reference_device" / "profiler"
OBJ_CACHE = ROOT / "build" / "plugin-objects"
DEFAULT_CUDA_ARCHS = ["80", "90"]


def _run(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"command failed: {' '.join(cmd)}\n{proc.stdout}{proc.stderr}")


def _stale(obj: pathlib.Path, deps: list[pathlib.Path]) -> bool:
    if not obj.exists():
        return True
    t = obj.stat().st_mtime
    return any(d.stat().st_mtime > t for d in deps)


def _compile_all(jobs: list[tuple[list[str], pathlib.Path, list[pathlib.Path]]]) -> None:
    """Runs the compile commands whose object is older than its inputs."""
    todo = [cmd for cmd, obj, deps in jobs if _stale(obj, deps)]
    workers = max(1, os.cpu_count() or 1)
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        for f in [pool.submit(_run, c) for c in todo]:
            f.result()


def _headers(src_dir: pathlib.Path) -> list[pathlib.Path]:
    found = list(INCLUDE.glob("*.h")) + list(src_dir.glob("*.h")) + list(src_dir.glob("*.cuh"))
    return (found + list(GRAPH_SRC.glob("*.h")) + list(PROFILER_SRC.glob("*.h"))
            + [ROOT / "setup.py"])


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


def host_plugin_commands(sources: list[pathlib.Path], objdir: pathlib.Path,
                         out: pathlib.Path) -> tuple[list[list[str]], list[str]]:
    """The compile commands (one per source) and the link command of the
    host reference plugin, honouring CC, CPPFLAGS, CFLAGS and LDFLAGS."""
    src = ROOT / "reference_device" / "host"
    cc = _tool("CC", "cc")
    compile_cmds = [[*cc, "-O2", "-std=gnu11", "-fPIC", "-pthread", "-Wall", "-Wextra",
                     f"-I{INCLUDE}", f"-I{src}", f"-I{GRAPH_SRC}", f"-I{PROFILER_SRC}",
                     *_flags("CPPFLAGS", "CFLAGS"),
                     "-c", str(c), "-o", str(objdir / (c.stem + ".o"))] for c in sources]
    link = [*cc, "-shared", "-pthread", *_flags("CFLAGS", "LDFLAGS"), "-o",
            str(out / "libpluggable_my_device.so"), *[str(objdir / (c.stem + ".o"))
                                                      for c in sources], "-lm"]
    return compile_cmds, link


def build_host_plugin(out: pathlib.Path) -> None:
    src = ROOT / "reference_device" / "host"
    if os.environ.get("PLUGGABLE_BUILD_HOST", "1") == "0":
        print("pluggable: PLUGGABLE_BUILD_HOST=0, skipping the host reference plugin")
        return
    sources = (sorted(src.glob("*.c")) + sorted(GRAPH_SRC.glob("*.c"))
               + sorted(PROFILER_SRC.glob("*.c")))
    objdir = _objdir("host", _tool("CC", "cc"), _flags("CPPFLAGS", "CFLAGS", "LDFLAGS"))
    compile_cmds, link = host_plugin_commands(sources, objdir, out)
    deps = _headers(src)
    _compile_all([(cmd, objdir / (c.stem + ".o"), deps + [c])
                  for cmd, c in zip(compile_cmds, sources)])
    _run(link)


def _cudart():
    """cuda-python's runtime module (pluggable/_core/cuda_python.py, loaded by
    path: the package cannot be imported before it is built), or None where
    the build environment lacks cuda-python (an isolated build; the `cuda`
    extra installed first with `pip install --no-build-isolation`, or
    setup.py run directly, has it)."""
    spec = importlib.util.spec_from_file_location(
        "pluggable_cuda_python", ROOT / "pluggable" / "_core" / "cuda_python.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.cudart()


def _gpu_archs(rt) -> list[str]:
    """The compute capabilities of the GPUs present ("90" for 9.0), asked of
    the CUDA runtime `rt` (cuda-python); [] without a driver or a GPU."""
    err, count = rt.cudaGetDeviceCount()
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
    src = ROOT / "reference_device" / "cuda"
    nvcc = os.environ.get("NVCC", "").strip() or shutil.which("nvcc") or (
        "/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
    if os.environ.get("PLUGGABLE_BUILD_CUDA", "1") == "0":
        print("pluggable: PLUGGABLE_BUILD_CUDA=0, skipping the CUDA reference plugin")
        return
    if nvcc is None or not any(src.glob("*.cu")):
        print("pluggable: no CUDA toolkit (nvcc) found, skipping the CUDA reference plugin")
        return
    archs = _cuda_archs()
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
    deps = _headers(src)
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
    print(f"pluggable: built the CUDA reference plugin for sm_{', sm_'.join(archs)}")


def copy_headers(pkg: pathlib.Path) -> None:
    """Ships the public headers inside the package (pluggable.get_include())."""
    dest = pkg / "include"
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(INCLUDE, dest)


def generate_protos(dest: pathlib.Path) -> None:
    """Compiles pluggable/framework/proto/*.proto into `*_pb2.py` modules in
    `dest` with the protoc of grpcio-tools (a build requirement).

    protoc's modules add their descriptors to protobuf's default pool, where
    TensorFlow's classes of the same names live, and the two would clash in
    one process; each module is pointed at the package's own pool
    (`_pool.POOL`) instead, and records the sha256 of its .proto so that the
    package refuses a module older than its source."""
    import hashlib
    import tempfile
    try:
        from grpc_tools import protoc
    except ImportError:
        raise RuntimeError(
            "pluggable: generating the *_pb2.py modules needs grpcio-tools, which pip "
            "installs for an isolated build; where setup.py runs directly, install it "
            "first: python3 -m pip install grpcio-tools (a release whose protobuf "
            "requirement the installed protobuf meets)") from None
    protos = sorted((ROOT / "pluggable" / "framework" / "proto").glob("*.proto"))
    edits = [("from google.protobuf import descriptor_pool as _descriptor_pool\n",
              "from . import _pool\n"),
             ("_descriptor_pool.Default().AddSerializedFile(", "_pool.POOL.AddSerializedFile(")]
    with tempfile.TemporaryDirectory() as out:
        cmd = ["protoc", f"--proto_path={ROOT}", f"--python_out={out}", *map(str, protos)]
        if protoc.main(cmd) != 0:
            raise RuntimeError(f"pluggable: protoc failed (its message is above): {cmd}")
        modules = {}
        for proto in protos:
            name = proto.stem + "_pb2.py"
            text = (pathlib.Path(out) / proto.parent.relative_to(ROOT) / name).read_text()
            for old, new in edits:
                if text.count(old) != 1:
                    raise RuntimeError(f"pluggable: protoc's {name} does not contain {old!r} "
                                       "once; use a grpcio-tools in the range that "
                                       "pyproject.toml's [build-system] requires")
                text = text.replace(old, new)
            digest = hashlib.sha256(proto.read_bytes()).hexdigest()
            modules[name] = f"{text}\nSOURCE_SHA256 = {digest!r}\n"
    dest.mkdir(parents=True, exist_ok=True)
    for name, text in modules.items():
        (dest / name).write_text(text)


class BuildExtWithPlugins(build_ext):
    """Builds the cffi core, then the reference plugins and the headers."""

    def run(self) -> None:
        super().run()
        targets = {pathlib.Path(self.build_lib) / "pluggable"}
        if self.inplace or getattr(self, "editable_mode", False):
            targets.add(ROOT / "pluggable")
        for pkg in targets:
            plugins = pkg / "plugins"
            plugins.mkdir(parents=True, exist_ok=True)
            build_host_plugin(plugins)
            build_cuda_plugin(plugins)
            copy_headers(pkg)
            generate_protos(pkg / "framework" / "proto")


if __name__ == "__main__":  # setuptools runs this file as __main__
    setup(cffi_modules=["pluggable/_core/build.py:ffibuilder"],
          cmdclass={"build_ext": BuildExtWithPlugins})
