"""Build of the core runtime (cffi) and of the host reference plugin.

`pip install .` compiles:
  * pluggable._core: the core C runtime (c_api/src) through cffi;
  * pluggable/framework/proto/*_pb2.py: the wire-format classes (GraphDef,
    XSpace ...), by protoc from grpcio-tools (generate_protos);
  * pluggable/plugins/libpluggable_my_device.so: the host reference plugin;
  * pluggable/onnx/libpluggable_ort_ep.so: the ONNX Runtime execution-provider
    bridge (c_api/ort) with its own copy of the core C runtime (no Python);
    its op table, build/ort-generated/ort_op_table.h, is written first from
    pluggable/onnx/ort_ops.py (generate_ort_op_table).
The CUDA reference plugin is its own distribution, built by
reference_device/cuda/setup.py (`pip install ./reference_device/cuda`).
Plugins are built like third-party plugins: shared objects with the TF_*
symbols left unresolved, bound to the core when loaded.

The usual variables choose the tools and add flags, for the core and the
host plugin (e.g. a sanitizer build: CFLAGS="-fsanitize=address,undefined -g"
LDFLAGS=-fsanitize=address,undefined): CC and CXX (compilers), CPPFLAGS,
CFLAGS, CXXFLAGS (compile flags, after the project's own), LDFLAGS (link
flags). The core gets them through setuptools; the plugin through
`_tool`/`_flags` below.
Objects are cached per set of tools and flags.
"""
from __future__ import annotations

import concurrent.futures
import hashlib
import os
import pathlib
import shlex
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = pathlib.Path(__file__).resolve().parent
INCLUDE = ROOT / "c_api" / "include"
# The graph optimizer code both reference plugins compile in.
GRAPH_SRC = ROOT / "reference_device" / "graph"
# The XSpace writer both reference plugins' profilers compile in.
PROFILER_SRC = ROOT / "reference_device" / "profiler"
OBJ_CACHE = ROOT / "build" / "plugin-objects"


def say(msg: str) -> None:
    """A progress line the user sees: pip hides a build's stdout and stderr
    unless -v, so the line goes to the terminal when there is one (and to
    stderr, which `pip -v` and logs show)."""
    line = f"pluggable: {msg}\n"
    sys.stderr.write(line)
    sys.stderr.flush()
    try:
        with open("/dev/tty", "w") as tty:
            tty.write(line)
    except OSError:
        pass


def _run(cmd: list[str]) -> None:
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    except FileNotFoundError:
        raise RuntimeError(f"pluggable: the compiler {cmd[0]!r} was not found: install a C "
                           "compiler (e.g. apt-get install gcc) or name one with CC=...") from None
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
        say("PLUGGABLE_BUILD_HOST=0, skipping the host reference plugin")
        return
    sources = (sorted(src.glob("*.c")) + sorted(GRAPH_SRC.glob("*.c"))
               + sorted(PROFILER_SRC.glob("*.c")))
    objdir = _objdir("host", _tool("CC", "cc"), _flags("CPPFLAGS", "CFLAGS", "LDFLAGS"))
    compile_cmds, link = host_plugin_commands(sources, objdir, out)
    say(f"building the host reference plugin ({len(sources)} C files) into {out}")
    deps = _headers(src)
    _compile_all([(cmd, objdir / (c.stem + ".o"), deps + [c])
                  for cmd, c in zip(compile_cmds, sources)])
    _run(link)


ORT_SRC = ROOT / "c_api" / "ort"
CORE_SRC = ROOT / "c_api" / "src"
# ort_op_table.h, written from pluggable/onnx/ort_ops.py (generate_ort_op_table).
ORT_GENERATED = ROOT / "build" / "ort-generated"
ORT_OPS = ROOT / "pluggable" / "onnx" / "ort_ops.py"


def generate_ort_op_table(dest: pathlib.Path) -> pathlib.Path:
    """Writes `dest`/ort_op_table.h, the bridge's op table, from the table
    the importer's mapping shares (pluggable/onnx/ort_ops.py, loaded by path:
    the package is not built yet). The file is rewritten only when its text
    changes, so that an unchanged table recompiles nothing."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("_pluggable_ort_ops", ORT_OPS)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        text = module.c_header()
    finally:
        sys.modules.pop(spec.name, None)
    header = dest / "ort_op_table.h"
    dest.mkdir(parents=True, exist_ok=True)
    if not header.exists() or header.read_text() != text:
        header.write_text(text)
    return header


def ort_bridge_commands(objdir: pathlib.Path, out: pathlib.Path
                        ) -> tuple[list[tuple[list[str], pathlib.Path, pathlib.Path]], list[str]]:
    """The compile commands (command, object, source) and the link command of
    the ONNX Runtime bridge: the core's C sources and c_api/ort in one shared
    object, honouring CC, CPPFLAGS, CFLAGS and LDFLAGS."""
    cc = _tool("CC", "cc")
    sources = sorted(CORE_SRC.glob("*.c")) + sorted(ORT_SRC.glob("*.c"))
    jobs = []
    for c in sources:
        obj = objdir / f"{c.parent.name}-{c.stem}.o"
        jobs.append(([*cc, "-O2", "-std=gnu11", "-fPIC", "-pthread", "-fvisibility=default",
                      f"-I{INCLUDE}", f"-I{CORE_SRC}", f"-I{ORT_SRC}", f"-I{ORT_GENERATED}",
                      *_flags("CPPFLAGS", "CFLAGS"), "-c", str(c), "-o", str(obj)], obj, c))
    # -Bsymbolic: the bridge's calls into its core bind to its own copy even
    # when another process-global copy (pluggable's Python core) came first.
    link = [*cc, "-shared", "-pthread", "-Wl,-Bsymbolic", *_flags("CFLAGS", "LDFLAGS"), "-o",
            str(out / "libpluggable_ort_ep.so"), *[str(o) for _, o, _ in jobs], "-ldl", "-lm"]
    return jobs, link


def build_ort_bridge(out: pathlib.Path) -> None:
    """Builds pluggable/onnx/libpluggable_ort_ep.so (see c_api/ort)."""
    if os.environ.get("PLUGGABLE_BUILD_ORT_EP", "1") == "0":
        say("PLUGGABLE_BUILD_ORT_EP=0, skipping the ONNX Runtime bridge")
        return
    objdir = _objdir("ort", _tool("CC", "cc"), _flags("CPPFLAGS", "CFLAGS", "LDFLAGS"))
    jobs, link = ort_bridge_commands(objdir, out)
    say(f"building the ONNX Runtime bridge ({len(jobs)} C files) into {out}")
    deps = (list(INCLUDE.glob("*.h")) + list(CORE_SRC.glob("*.h")) + list(ORT_SRC.glob("*.h"))
            + [generate_ort_op_table(ORT_GENERATED), ROOT / "setup.py"])
    out.mkdir(parents=True, exist_ok=True)
    _compile_all([(cmd, obj, deps + [c]) for cmd, obj, c in jobs])
    _run(link)


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
        # protobuf's well-known types (any.proto, wrappers.proto) ship with grpcio-tools
        where = getattr(protoc, "__file__", None)
        paths = [str(ROOT)] + ([str(pathlib.Path(where).resolve().parent / "_proto")]
                               if where else [])
        cmd = ["protoc", f"--proto_path={os.pathsep.join(paths)}", f"--python_out={out}",
               *map(str, protos)]
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
        say("building the core runtime (cffi, c_api/src)")
        super().run()
        targets = {pathlib.Path(self.build_lib) / "pluggable"}
        if self.inplace or getattr(self, "editable_mode", False):
            targets.add(ROOT / "pluggable")
        for pkg in targets:
            plugins = pkg / "plugins"
            plugins.mkdir(parents=True, exist_ok=True)
            build_host_plugin(plugins)
            build_ort_bridge(pkg / "onnx")
            copy_headers(pkg)
            generate_protos(pkg / "framework" / "proto")


if __name__ == "__main__":  # setuptools runs this file as __main__
    setup(cffi_modules=["pluggable/_core/build.py:ffibuilder"],
          cmdclass={"build_ext": BuildExtWithPlugins})
