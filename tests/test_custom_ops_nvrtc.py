""".cu custom ops without nvcc: the source split into an NVRTC device part
and a host part built by the host compiler (launches through the driver),
the typed errors for what the route does not support, the compiler choice,
and, where NVRTC and a GPU are present, the op run on GPU:0."""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import pluggable as pg
from pluggable.custom_ops import cuda, nvrtc, security
from pluggable.runtime import placement

SRC = Path(__file__).parent / "custom_ops_src"
ADD_CU = SRC / "add.cu"
pytestmark = pytest.mark.skipif(shutil.which(os.environ.get("CXX", "c++")) is None,
                                reason="no C++ compiler for the host part")
NO_NVRTC = nvrtc.unavailable_reason()


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv(security.ENV, raising=False)
    security._warned[0] = True


def test_split_of_the_sample_op():
    parts = nvrtc.split(ADD_CU.read_text(), str(ADD_CU))
    assert parts.kernels == ["scale_kernel", "add_kernel"]
    assert 'extern "C"' not in parts.device and "#include" not in parts.device
    assert "__global__ void scale_kernel" in parts.device and "blockIdx" in parts.device
    assert "<<<" not in parts.host and "blockIdx" not in parts.host
    assert parts.host.count("pg_nvrtc::launch(&") == 2
    assert 'pg_nvrtc::launch(&scale_kernel, "scale_kernel", blocks, 256, 0, st,' in parts.host


@pytest.mark.skipif(cuda.nvcc_command() is None, reason="nvcc is not installed (it checks "
                    "the device part in place of NVRTC)")
def test_device_part_is_valid_cuda(tmp_path):
    """The device part alone compiles to a cubin for sm_90 (nvcc stands in
    for NVRTC here: both compile the same device C++)."""
    parts = nvrtc.split(ADD_CU.read_text(), str(ADD_CU))
    (tmp_path / "dev.cu").write_text(parts.device)
    r = subprocess.run([*cuda.nvcc_command(), "-cubin", "-arch=sm_90", "-std=c++17",
                        str(tmp_path / "dev.cu"), "-o", str(tmp_path / "dev.cubin")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "dev.cubin").read_bytes()[:4] == b"\x7fELF"


def test_host_part_builds_and_exports_the_aot_functions(tmp_path):
    """The host part compiles without CUDA headers or nvcc and loads without
    a GPU (the driver is opened at the first launch)."""
    parts = nvrtc.split(ADD_CU.read_text(), str(ADD_CU))
    out = tmp_path / "host.so"
    nvrtc.build_host(parts.host, b"\x7fELF-not-a-real-cubin",
                     {k: f"_Z{len(k)}{k}v" for k in parts.kernels}, str(ADD_CU), out)
    lib = ctypes.CDLL(str(out))
    assert lib.AddScaled and lib.AddScaledInit


@pytest.mark.parametrize("code, what", [
    ("template <typename T> __global__ void k(T* x) { x[0] = 0; }\n", "template kernel"),
    ("__constant__ float table[4];\n__global__ void k(float* x) { x[0] = table[0]; }\n",
     "__constant__ variable"),
    ('extern "C" {\nint F(int n, void** p, int* d, long** s, const char** t, void* st, '
     'void* e) { return 0; }\n}\n', 'extern "C" { ... } block'),
    ("#include <cuda_fp16.h>\n__global__ void k(float* x) { x[0] = 0; }\n",
     "cuda_fp16.h"),
])
def test_unsupported_constructs_are_typed_errors(code, what):
    with pytest.raises(pg.errors.UnimplementedError, match="NVRTC") as e:
        nvrtc.split(code, "op.cu")
    assert what in str(e.value)


def test_compiler_choice_is_checked(monkeypatch):
    """Checked on every use, also when the library is already loaded."""
    if cuda.nvcc_command() is not None:
        pg.custom_op(f"{ADD_CU}:AddScaled", out_shape=lambda a, b: a, arch="sm_90")
    monkeypatch.setenv(nvrtc.ENV, "clang")
    with pytest.raises(pg.errors.InvalidArgumentError, match="nvcc' or 'nvrtc'"):
        pg.custom_op(f"{ADD_CU}:AddScaled", out_shape=lambda a, b: a, arch="sm_90")


@pytest.mark.skipif(NO_NVRTC is None, reason="NVRTC is available here")
def test_nvrtc_route_without_nvrtc_says_what_to_install(monkeypatch):
    monkeypatch.setenv(nvrtc.ENV, "nvrtc")
    with pytest.raises(pg.errors.FailedPreconditionError, match="cuda-python|libnvrtc"):
        pg.custom_op(f"{ADD_CU}:AddScaled", out_shape=lambda a, b: a, arch="sm_90")


@pytest.mark.skipif(NO_NVRTC is not None, reason=f"NVRTC cannot be used: {NO_NVRTC}")
def test_nvrtc_compiles_the_sample_op_to_a_cubin_for_sm_90():
    parts = nvrtc.split(ADD_CU.read_text(), str(ADD_CU))
    cubin, names = nvrtc.compile_device(parts.device, parts.kernels, (9, 0), str(ADD_CU))
    assert cubin[:4] == b"\x7fELF"
    assert set(names) == {"scale_kernel", "add_kernel"}
    assert "scale_kernel" in names["scale_kernel"] and "add_kernel" in names["add_kernel"]


@pytest.mark.skipif(NO_NVRTC is not None, reason=f"NVRTC cannot be used: {NO_NVRTC}")
def test_nvrtc_route_is_cached_by_version_and_arch(monkeypatch):
    monkeypatch.setenv(nvrtc.ENV, "nvrtc")
    src = ADD_CU.read_bytes()
    a = nvrtc.compile_cuda(src, str(ADD_CU), (9, 0))
    assert nvrtc.compile_cuda(src, str(ADD_CU), (9, 0)) == a   # a hit
    assert nvrtc.compile_cuda(src, str(ADD_CU), (8, 0)) != a   # another arch
    assert ctypes.CDLL(str(a)).AddScaled


def _gpu_with_stream():
    for d in placement.plugin_devices():
        if d.device_type == "GPU" and cuda.native_stream(d) is not None:
            return d
    return None


@pytest.mark.skipif(NO_NVRTC is not None, reason=f"NVRTC cannot be used: {NO_NVRTC}")
def test_cu_op_built_through_nvrtc_runs_on_gpu(monkeypatch):
    gpu = _gpu_with_stream()
    if gpu is None:
        pytest.skip("no GPU device whose plugin hands over its CUDA stream")
    monkeypatch.setenv(nvrtc.ENV, "nvrtc")
    with pg.device(gpu.short_name):
        op = pg.custom_op(f"{ADD_CU}:AddScaled", out_shape=lambda a, b: a)
        for shape in [(1000,), (33, 65), (1,)]:
            rng = np.random.default_rng()
            a = rng.standard_normal(shape).astype(np.float32)
            b = rng.standard_normal(shape).astype(np.float32)
            scale = float(rng.standard_normal())
            x = pg.constant(a) * 1.0  # made by a built-in GPU kernel, same stream
            y = op(x, pg.constant(b), attrs={"scale": scale})
            assert y.device.endswith(gpu.short_name)
            np.testing.assert_allclose((y + 1.0).numpy(), a * np.float32(scale) + b + 1,
                                       rtol=1e-5, atol=1e-5)


def test_split_keeps_extern_c_kernels_and_forward_declarations():
    src = ('#include <cuda_runtime.h>\n'
           '__global__ void k(float* x, long n);\n'
           'extern "C" __global__ void plain(float* x) { x[threadIdx.x] = 1; }\n'
           'extern "C" int Op(int np, void** p, int* nd, long** s, const char** t, '
           'void* st, void* e) {\n'
           '  k<<<1, 32, 0, (cudaStream_t)st>>>((float*)p[0], 32);\n'
           '  plain<<<dim3(1), dim3(32)>>>((float*)p[0]);\n'
           '  return cudaGetLastError() == cudaSuccess ? 0 : 1;\n}\n'
           '__global__ void k(float* x, long n) { if (threadIdx.x < n) x[threadIdx.x] *= 2; }\n')
    parts = nvrtc.split(src, "op.cu")
    assert parts.kernels == ["k", "plain"]
    assert 'extern "C" __global__ void plain' in parts.device
    assert "int Op(" not in parts.device
    assert 'pg_nvrtc::launch(&plain, "plain", dim3(1), dim3(32), 0, 0, (float*)p[0])' \
        in parts.host


def _has_driver() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


@pytest.mark.skipif(_has_driver(), reason="a CUDA driver is present: launches would run")
def test_launch_without_a_driver_is_the_functions_error(tmp_path):
    """Without libcuda.so.1 a launch fails and cudaGetLastError reports it,
    so the AOT function returns its error code (no crash)."""
    src = ('#include <cuda_runtime.h>\n'
           '__global__ void k(float* x) { x[threadIdx.x] = 1; }\n'
           'extern "C" int Op(int np, void** p, int* nd, long** s, const char** t, '
           'void* st, void* e) {\n'
           '  k<<<1, 32, 0, (cudaStream_t)st>>>((float*)p[0]);\n'
           '  cudaError_t err = cudaGetLastError();\n'
           '  return err == cudaSuccess ? 0 : 7;\n}\n')
    parts = nvrtc.split(src, "op.cu")
    out = tmp_path / "op.so"
    nvrtc.build_host(parts.host, b"\x7fELF", {"k": "_Z1kPf"}, str(tmp_path / "op.cu"), out)
    fn = ctypes.CDLL(str(out)).Op
    params = (ctypes.c_void_p * 1)(None)
    assert fn(1, params, None, None, None, None, None) == 7
