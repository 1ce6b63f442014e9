"""Host time of one call into cuDNN and cuBLAS, beside PyTorch's whole call.

For the small shapes of an eager training step, the libraries' own host
cost decides a kernel call's time. This script loads the cuDNN 9 and cuBLAS
libraries that the PyTorch wheel ships (the ones the CUDA plugin finds
first) and times, on the legacy stream with everything made beforehand:

- ``cudnnConvolutionForward`` (NHWC float32, FMA math, the algorithms
  cuDNN's heuristics rank first), and making and setting the four
  descriptors the call needs;
- ``cublasGemmEx`` (float32, ``CUBLAS_COMPUTE_32F``) for the digits CNN's
  dense-layer shapes;

and PyTorch's ``conv2d`` (channels-last) and ``torch.mm`` on the same
shapes, median of 60-200 calls each. Needs a GPU and PyTorch.

    python3 benchmarks/library_host_costs_gpu.py
"""
from __future__ import annotations

import ctypes
import glob
import os
import statistics
import sys
import time

try:
    import torch
except ImportError:
    print("needs PyTorch (its wheel ships the libraries timed here)", file=sys.stderr)
    sys.exit(2)

_VP = ctypes.c_void_p
_clock = time.perf_counter
NHWC, FLOAT, CROSS_CORRELATION, FMA_MATH = 1, 0, 1, 3  # cuDNN's enum values
COMPUTE_32F, GEMM_DEFAULT, R_32F = 68, -1, 0  # cuBLAS's


def _library(pattern: str) -> ctypes.CDLL:
    root = os.path.join(os.path.dirname(torch.__file__), "..", "nvidia")
    for path in sorted(glob.glob(os.path.join(root, "*", "lib", pattern))):
        try:
            return ctypes.CDLL(path)
        except OSError:
            continue
    return ctypes.CDLL(pattern.replace("*", ""))


class _Perf(ctypes.Structure):
    _fields_ = [("algo", ctypes.c_int), ("status", ctypes.c_int), ("time", ctypes.c_float),
                ("memory", ctypes.c_size_t), ("determinism", ctypes.c_int),
                ("math_type", ctypes.c_int), ("reserved", ctypes.c_int * 3)]


def _median_us(fn, n: int) -> float:
    times = []
    for _ in range(n):
        t0 = _clock()
        fn()
        times.append(_clock() - t0)
    torch.cuda.synchronize()
    return 1e6 * statistics.median(times)


def conv_rows(dnn, handle, shapes) -> list[str]:
    rows = []
    for n, c, h, w, k in shapes:
        x, y, f, conv = _VP(), _VP(), _VP(), _VP()

        def make():
            dnn.cudnnCreateTensorDescriptor(ctypes.byref(x))
            dnn.cudnnCreateTensorDescriptor(ctypes.byref(y))
            dnn.cudnnCreateFilterDescriptor(ctypes.byref(f))
            dnn.cudnnCreateConvolutionDescriptor(ctypes.byref(conv))
            dnn.cudnnSetTensor4dDescriptor(x, NHWC, FLOAT, n, c, h, w)
            dnn.cudnnSetTensor4dDescriptor(y, NHWC, FLOAT, n, k, h, w)
            dnn.cudnnSetFilter4dDescriptor(f, FLOAT, NHWC, k, c, 3, 3)
            dnn.cudnnSetConvolution2dDescriptor(conv, 1, 1, 1, 1, 1, 1, CROSS_CORRELATION, FLOAT)
            dnn.cudnnSetConvolutionMathType(conv, FMA_MATH)

        def destroy():
            dnn.cudnnDestroyTensorDescriptor(x)
            dnn.cudnnDestroyTensorDescriptor(y)
            dnn.cudnnDestroyFilterDescriptor(f)
            dnn.cudnnDestroyConvolutionDescriptor(conv)

        descriptors = _median_us(lambda: (make(), destroy()), 100)
        make()
        perf, returned = (_Perf * 8)(), ctypes.c_int()
        dnn.cudnnGetConvolutionForwardAlgorithm_v7(handle, x, f, conv, y, 8,
                                                   ctypes.byref(returned), perf)
        xs = torch.randn(n, h, w, c, device="cuda")
        fs = torch.randn(k, 3, 3, c, device="cuda")
        ys = torch.empty(n, h, w, k, device="cuda")
        ws = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
        one, zero = ctypes.c_float(1.0), ctypes.c_float(0.0)
        for i in range(returned.value):
            algo = perf[i].algo
            size = ctypes.c_size_t()
            if perf[i].status != 0 or dnn.cudnnGetConvolutionForwardWorkspaceSize(
                    handle, x, f, conv, y, algo, ctypes.byref(size)) != 0 \
                    or size.value > (64 << 20):
                continue

            def forward(algo=algo, size=size.value):
                r = dnn.cudnnConvolutionForward(
                    handle, ctypes.byref(one), x, _VP(xs.data_ptr()), f, _VP(fs.data_ptr()), conv,
                    algo, _VP(ws.data_ptr()), ctypes.c_size_t(size), ctypes.byref(zero), y,
                    _VP(ys.data_ptr()))
                assert r == 0, f"cudnnConvolutionForward: status {r}"
            forward()
            rows.append(f"| cudnnConvolutionForward, algorithm {algo} | {n}x{h}x{w}x{c} -> {k}, "
                        f"3x3 | {_median_us(forward, 60):.1f} |")
            break
        destroy()
        rows.append(f"| cuDNN: make and set the 4 descriptors | {n}x{h}x{w}x{c} -> {k} "
                    f"| {descriptors:.1f} |")
        xt = torch.randn(n, c, h, w, device="cuda").to(memory_format=torch.channels_last)
        ft = torch.randn(k, c, 3, 3, device="cuda").to(memory_format=torch.channels_last)
        for _ in range(5):
            torch.nn.functional.conv2d(xt, ft, padding=1)
        torch_us = _median_us(lambda: torch.nn.functional.conv2d(xt, ft, padding=1), 60)
        rows.append(f"| PyTorch conv2d (whole call) | {n}x{h}x{w}x{c} -> {k} | {torch_us:.1f} |")
    return rows


def gemm_rows(blas, handle, shapes) -> list[str]:
    rows = []
    one, zero = ctypes.c_float(1.0), ctypes.c_float(0.0)
    for m_rows, k_inner, n_cols, ta, tb in shapes:
        a = torch.randn(m_rows * k_inner, device="cuda")
        b = torch.randn(k_inner * n_cols, device="cuda")
        out = torch.empty(m_rows * n_cols, device="cuda")
        m, n, k = n_cols, m_rows, k_inner  # row-major C = A B as column-major C^T = B^T A^T
        ldb, lda = (k if tb else m), (n if ta else k)

        def gemm():
            r = blas.cublasGemmEx(handle, int(tb), int(ta), m, n, k, ctypes.byref(one),
                                  _VP(b.data_ptr()), R_32F, ldb, _VP(a.data_ptr()), R_32F, lda,
                                  ctypes.byref(zero), _VP(out.data_ptr()), R_32F, m,
                                  COMPUTE_32F, GEMM_DEFAULT)
            assert r == 0, f"cublasGemmEx: status {r}"
        gemm()
        at = torch.randn(k_inner, m_rows, device="cuda").t() if ta else \
            torch.randn(m_rows, k_inner, device="cuda")
        bt = torch.randn(n_cols, k_inner, device="cuda").t() if tb else \
            torch.randn(k_inner, n_cols, device="cuda")
        torch.mm(at, bt)
        shape = f"{m_rows}x{k_inner} by {k_inner}x{n_cols}" + (" (A transposed)" if ta else "") \
            + (" (B transposed)" if tb else "")
        rows.append(f"| cublasGemmEx | {shape} | {_median_us(gemm, 200):.1f} |")
        rows.append(f"| torch.mm (whole call) | {shape} | "
                    f"{_median_us(lambda: torch.mm(at, bt), 200):.1f} |")
    return rows


def main() -> int:
    if not torch.cuda.is_available():
        print("no GPU", file=sys.stderr)
        return 2
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.zeros(1, device="cuda")
    dnn, blas = _library("libcudnn.so.9"), _library("libcublas.so*")
    dnn_handle, blas_handle = _VP(), _VP()
    assert dnn.cudnnCreate(ctypes.byref(dnn_handle)) == 0
    assert blas.cublasCreate_v2(ctypes.byref(blas_handle)) == 0
    print(f"{torch.cuda.get_device_name()}, cuDNN {dnn.cudnnGetVersion()}, "
          f"PyTorch {torch.__version__}")
    print("| call | shape | host µs (median) |\n|---|---|---:|")
    for row in conv_rows(dnn, dnn_handle, [(32, 1, 8, 8, 16), (32, 16, 4, 4, 32),
                                            (32, 64, 56, 56, 64)]):
        print(row)
    for row in gemm_rows(blas, blas_handle, [(32, 128, 64, False, False),
                                              (32, 64, 10, False, False),
                                              (32, 10, 64, False, True),
                                              (128, 32, 64, True, False)]):
        print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
