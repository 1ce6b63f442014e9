"""cffi build script for the core runtime (run by setuptools at install time).

The declarations Python sees are read from the same headers plugin authors
include (``c_api/include``) plus the core's private interface
(``c_api/src/pg_core.h``), so the Python view of every struct and function
cannot drift from the C one. Preprocessor lines are dropped (integer
``#define`` constants are kept) before the text is handed to ``cdef``.
"""
from __future__ import annotations

import pathlib
import re

from cffi import FFI

ROOT = pathlib.Path(__file__).resolve().parents[2]
INCLUDE = ROOT / "c_api" / "include"
SRC = ROOT / "c_api" / "src"

PUBLIC_HEADERS = [
    "c_api_macros.h", "tf_status.h", "tf_datatype.h", "tf_tensor.h", "tf_buffer.h",
    "stream_executor.h", "kernels.h", "kernels_experimental.h", "ops.h", "grappler.h",
    "stream_capture.h", "pluggable_profiler.h", "pluggable_native_stream.h",
    "pluggable_peer.h", "pluggable_collectives.h", "pluggable_host_copy.h",
]
# Entry points that plugins define and the core only looks up with dlsym.
PLUGIN_ENTRY_POINTS = ("SE_InitPlugin", "TF_InitKernel", "TF_InitGraph", "SE_InitStreamCapture",
                       "TF_InitProfiler")
INT_DEFINE = re.compile(r"#define\s+(\w+)\s+(-?\d+)\s*$")


def cdef_text(path: pathlib.Path) -> str:
    """Returns the declarations of a header in a form cffi's cdef accepts."""
    source = re.sub(r"/\*.*?\*/", "", path.read_text(), flags=re.S)
    source = re.sub(r"//[^\n]*", "", source)
    out, continued = [], False
    for line in source.splitlines():
        stripped = line.strip()
        if continued or stripped.startswith("#"):
            match = INT_DEFINE.match(stripped)
            if match and not continued:
                out.append(f"#define {match.group(1)} {match.group(2)}")
            continued = stripped.endswith("\\")
            continue
        if stripped in ('extern "C" {', "}"):
            continue
        out.append(line)
    text = "\n".join(out).replace("TF_CAPI_EXPORT extern ", "")
    for name in PLUGIN_ENTRY_POINTS:
        text = re.sub(rf"\bvoid\s+{name}\s*\([^;]*\);", "", text)
    # Registration and host-callback hooks are implemented in Python (pluggable._core).
    text = re.sub(r"\b(int|void) (pg_hook_\w+)\(", r'extern "Python+C" \1 \2(', text)
    return text


def build_ffi() -> FFI:
    ffi = FFI()
    decls = [cdef_text(INCLUDE / h) for h in PUBLIC_HEADERS]
    decls.append(cdef_text(SRC / "pg_core.h"))
    ffi.cdef("\n".join(decls))
    sources = sorted(str(p.relative_to(ROOT)) for p in SRC.glob("*.c"))
    ffi.set_source(
        "pluggable._core._lib",
        '#include "pg_core.h"\n#include "pluggable_native_stream.h"\n'
        '#include "pluggable_peer.h"\n#include "pluggable_collectives.h"\n'
        '#include "pluggable_host_copy.h"\n',
        sources=sources,
        include_dirs=[str(INCLUDE.relative_to(ROOT)), str(SRC.relative_to(ROOT))],
        extra_compile_args=["-std=gnu11", "-O2", "-fvisibility=default"],
        libraries=["dl", "pthread"],
    )
    return ffi


ffibuilder = build_ffi()

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
