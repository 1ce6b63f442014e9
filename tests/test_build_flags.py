"""The build honours CC, CXX, CPPFLAGS, CFLAGS, CXXFLAGS, LDFLAGS, NVCC and
NVCCFLAGS for the reference plugins (setuptools applies them to the core),
so the project can be built with sanitizers without patching setup.py."""
from __future__ import annotations

import importlib.util
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


CUDA_SETUP = ROOT / "reference_device" / "cuda" / "setup.py"


def _setup_module(path=ROOT / "setup.py"):
    spec = importlib.util.spec_from_file_location("pluggable_setup", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)   # defines the build functions, runs no build
    return mod


def test_host_plugin_commands_use_the_environment(monkeypatch, tmp_path):
    setup = _setup_module()
    monkeypatch.setenv("CC", "ccache gcc-test")
    monkeypatch.setenv("CPPFLAGS", "-DPG_FROM_CPPFLAGS")
    monkeypatch.setenv("CFLAGS", "-fsanitize=address,undefined -g")
    monkeypatch.setenv("LDFLAGS", "-fsanitize=address,undefined -Wl,-z,now")
    sources = [ROOT / "reference_device" / "host" / "device.c"]
    compile_cmds, link = setup.host_plugin_commands(sources, tmp_path, tmp_path)
    cmd = compile_cmds[0]
    assert cmd[:2] == ["ccache", "gcc-test"]
    # The user's flags come after the project's, so they win.
    assert cmd.index("-fsanitize=address,undefined") > cmd.index("-O2")
    assert "-DPG_FROM_CPPFLAGS" in cmd and "-g" in cmd
    assert link[:2] == ["ccache", "gcc-test"]
    assert "-Wl,-z,now" in link and "-fsanitize=address,undefined" in link


def test_object_cache_depends_on_tools_and_flags(monkeypatch):
    setup = _setup_module()
    monkeypatch.delenv("CFLAGS", raising=False)
    plain = setup._objdir("host", setup._tool("CC", "cc"), setup._flags("CFLAGS"))
    monkeypatch.setenv("CFLAGS", "-O0")
    flagged = setup._objdir("host", setup._tool("CC", "cc"), setup._flags("CFLAGS"))
    assert plain != flagged



class _FakeRuntime:
    """cuda-python's runtime module as far as the build asks it: devices with
    the given compute capabilities, or an error code for the device count."""

    class cudaDeviceAttr:
        cudaDevAttrComputeCapabilityMajor = "major"
        cudaDevAttrComputeCapabilityMinor = "minor"

    def __init__(self, caps, count_error=0):
        self.caps, self.count_error, self.asked = caps, count_error, []

    def cudaGetDeviceCount(self):
        return self.count_error, (0 if self.count_error else len(self.caps))

    def cudaDeviceGetAttribute(self, attr, device):
        self.asked.append((attr, device))
        major, minor = self.caps[device]
        return 0, major if attr == "major" else minor


def test_cuda_archs_come_from_the_gpus_through_cuda_python(monkeypatch):
    setup = _setup_module(CUDA_SETUP)
    monkeypatch.delenv("PLUGGABLE_CUDA_ARCHS", raising=False)
    fake = _FakeRuntime([(9, 0), (8, 6), (9, 0)])
    monkeypatch.setattr(setup, "_cudart", lambda: fake)
    monkeypatch.setattr(setup.shutil, "which", lambda name: pytest.fail(f"ran {name}"))
    assert setup._cuda_archs() == ["86", "90"]
    assert {d for _, d in fake.asked} == {0, 1, 2}
    monkeypatch.setenv("PLUGGABLE_CUDA_ARCHS", "8.0;90")       # the variable wins
    assert setup._cuda_archs() == ["80", "90"]


def test_cuda_archs_without_a_gpu_or_without_cuda_python(monkeypatch, tmp_path):
    setup = _setup_module(CUDA_SETUP)
    monkeypatch.delenv("PLUGGABLE_CUDA_ARCHS", raising=False)
    # cuda-python present, no driver: it says so, and nothing else is asked
    monkeypatch.setattr(setup, "_cudart", lambda: _FakeRuntime([], count_error=35))
    monkeypatch.setattr(setup.shutil, "which", lambda name: pytest.fail(f"ran {name}"))
    assert setup._cuda_archs() == setup.DEFAULT_CUDA_ARCHS
    # no cuda-python in the build environment: nvidia-smi, where present
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nprintf '9.0\\n8.0\\n9.0\\n'\n")
    smi.chmod(0o755)
    monkeypatch.setattr(setup, "_cudart", lambda: None)
    monkeypatch.setattr(setup.shutil, "which", lambda name: str(smi))
    assert setup._cuda_archs() == ["80", "90"]
    monkeypatch.setattr(setup.shutil, "which", lambda name: None)
    assert setup._cuda_archs() == setup.DEFAULT_CUDA_ARCHS


def test_cuda_archs_with_the_real_cuda_python_never_raise():
    setup = _setup_module(CUDA_SETUP)
    rt = setup._cudart()
    if rt is None:
        pytest.skip("cuda-python is not installed (pip install .[cuda]): the fake runtime "
                    "tests above cover the logic")
    archs = setup._gpu_archs(rt)      # [] without a driver or a GPU
    assert all(a.isdigit() and len(a) >= 2 for a in archs), archs


def _fake_nvcc(tmp_path, body: str) -> str:
    nvcc = tmp_path / "nvcc"
    nvcc.write_text("#!/bin/sh\n" + body)
    nvcc.chmod(0o755)
    return str(nvcc)


def test_cuda_build_with_an_nvcc_too_old_for_the_arch_says_what_to_do(monkeypatch, tmp_path):
    cuda = _setup_module(CUDA_SETUP)
    monkeypatch.setattr(cuda, "OBJ_CACHE", tmp_path / "objects")
    monkeypatch.setenv("PLUGGABLE_CUDA_ARCHS", "90")
    monkeypatch.setenv("NVCC", _fake_nvcc(
        tmp_path, "echo \"nvcc fatal   : Unsupported gpu architecture 'compute_90'\" >&2\nexit 1\n"))
    with pytest.raises(cuda.BuildError) as info:
        cuda.build_cuda_plugin(tmp_path)
    msg = str(info.value)
    assert "Unsupported gpu architecture" in msg
    assert "newer CUDA toolkit" in msg and "PLUGGABLE_CUDA_ARCHS" in msg
    assert not (tmp_path / "libpluggable_cuda.so").exists()


def test_cuda_build_without_nvcc_or_with_a_missing_one(monkeypatch, tmp_path):
    cuda = _setup_module(CUDA_SETUP)
    monkeypatch.setattr(cuda, "OBJ_CACHE", tmp_path / "objects")
    monkeypatch.setenv("PLUGGABLE_CUDA_ARCHS", "80")
    monkeypatch.setenv("NVCC", str(tmp_path / "nonexistent-nvcc"))
    with pytest.raises(cuda.BuildError, match="was not found.*NVCC="):
        cuda.build_cuda_plugin(tmp_path)
    monkeypatch.delenv("NVCC")
    monkeypatch.setattr(cuda.shutil, "which", lambda name: None)
    monkeypatch.setattr(cuda.os.path, "exists", lambda p: False)
    with pytest.raises(cuda.BuildError, match="no CUDA toolkit found.*need no CUDA"):
        cuda.build_cuda_plugin(tmp_path)


def test_cuda_archs_say_when_the_driver_is_older_than_the_runtime(monkeypatch, capsys):
    cuda = _setup_module(CUDA_SETUP)
    assert cuda._gpu_archs(_FakeRuntime([], count_error=35)) == []
    assert "driver is older than this CUDA runtime" in capsys.readouterr().err
    assert cuda._gpu_archs(_FakeRuntime([], count_error=100)) == []     # no GPU: quiet
    assert "driver" not in capsys.readouterr().err


def test_host_plugin_without_a_c_compiler_says_what_to_do(monkeypatch, tmp_path):
    setup = _setup_module()
    monkeypatch.setattr(setup, "OBJ_CACHE", tmp_path / "objects")
    monkeypatch.setenv("CC", "/nonexistent")
    with pytest.raises(RuntimeError, match="'/nonexistent' was not found.*C compiler.*CC="):
        setup.build_host_plugin(tmp_path)


def test_ort_bridge_commands_use_the_environment(monkeypatch, tmp_path):
    """The ONNX Runtime bridge compiles the core's C and c_api/ort with the
    user's tools and flags after the project's, and links -Bsymbolic (its
    calls bind to its own core even when pluggable's Python core is loaded)."""
    setup = _setup_module()
    monkeypatch.setenv("CC", "ccache gcc-test")
    monkeypatch.setenv("CFLAGS", "-fsanitize=address -g")
    monkeypatch.setenv("LDFLAGS", "-Wl,-z,now")
    jobs, link = setup.ort_bridge_commands(tmp_path, tmp_path)
    sources = {src.relative_to(ROOT).as_posix() for _, _, src in jobs}
    assert "c_api/ort/ort_ep.c" in sources and "c_api/src/kernels.c" in sources
    assert len({obj for _, obj, _ in jobs}) == len(jobs)  # no two share an object
    for cmd, _, _ in jobs:
        assert cmd[:2] == ["ccache", "gcc-test"]
        assert cmd.index("-fsanitize=address") > cmd.index("-O2")
    assert link[:2] == ["ccache", "gcc-test"] and "-Wl,-Bsymbolic" in link
    assert "-Wl,-z,now" in link and link[link.index("-o") + 1].endswith("libpluggable_ort_ep.so")


def test_the_bridges_op_table_header_is_written_from_the_python_table(tmp_path):
    """setup.py writes ort_op_table.h from pluggable/onnx/ort_ops.py before
    the bridge compiles (the compile commands look there first for it), and
    leaves an unchanged file alone so that nothing recompiles."""
    from pluggable.onnx import ort_ops
    setup = _setup_module()
    header = setup.generate_ort_op_table(tmp_path / "gen")
    assert header == tmp_path / "gen" / "ort_op_table.h"
    assert header.read_text() == ort_ops.c_header()
    assert '{"Conv", K_CONV, "conv", {"Conv2D", NULL}, {"Transpose", "BiasAdd", NULL}' \
        in header.read_text()
    os.utime(header, (1, 1))
    setup.generate_ort_op_table(tmp_path / "gen")
    assert header.stat().st_mtime == 1
    header.write_text("stale")
    setup.generate_ort_op_table(tmp_path / "gen")
    assert header.read_text() == ort_ops.c_header()
    jobs, _ = setup.ort_bridge_commands(tmp_path, tmp_path)
    for cmd, _, _ in jobs:
        assert f"-I{setup.ORT_GENERATED}" in cmd
