"""Exp of a float32 tensor (4096x1024 unless told) on one GPU: the CUDA
plugin's kernel, PyTorch's, and the launch shapes of
benchmarks/exp_shapes_gpu.cu (built with nvcc into a cubin and launched
through CuPy), all timed in one process by CUPTI (``torch.profiler``): the
median device time of each kernel over 200 back-to-back calls, in rounds
that take the cases in turn.

The shapes and PyTorch's kernel run twice: on tensors PyTorch allocated,
and on the plugin's own input and output (shared through DLPack), so a
difference of kernel is told apart from a difference of where the data lie.

usage: python3 benchmarks/exp_shapes_gpu.py [--rows R] [--cols C] [--rounds N] [--nvcc PATH]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

import numpy as np

from kernel_trace import traced_kernels

CALLS = 200
HERE = os.path.dirname(os.path.abspath(__file__))


def kernel_times(f, sync) -> list[float]:
    """Device time (us) of each kernel of CALLS calls of `f`, after 30."""
    for _ in range(30):
        f()
    sync()
    return [k["dur"] for k in traced_kernels(f, CALLS, sync)]


def build_cubin(nvcc: str, out_dir: str) -> str:
    cubin = os.path.join(out_dir, "exp_shapes.cubin")
    subprocess.run([nvcc, "-O3", "-std=c++17", "-cubin", "-gencode",
                    "arch=compute_90,code=sm_90", os.path.join(HERE, "exp_shapes_gpu.cu"),
                    "-o", cubin], check=True)
    return cubin


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--cols", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--nvcc", default=shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc")
    args = ap.parse_args(argv)
    try:
        import cupy
        import torch
    except ImportError as e:
        print(f"needs PyTorch and CuPy with CUDA: {e}", file=sys.stderr)
        return 2

    import pluggable as pg
    if not torch.cuda.is_available() or not pg.list_physical_devices("GPU"):
        print("no GPU: needs a CUDA GPU visible to both pluggable and PyTorch", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        module = cupy.RawModule(path=build_cubin(args.nvcc, tmp))
        module.get_function("stride_ldg")  # loads the module while the file exists
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    x = np.random.default_rng(0).standard_normal((args.rows, args.cols)).astype(np.float32)
    nvec = x.size // 4
    with pg.device("GPU:0"):
        gx = pg.constant(x)
    gy = pg.raw_ops.Exp(x=gx)     # the plugin's output, kept for the shapes below
    tx = torch.from_numpy(x).cuda()
    ty = torch.empty_like(tx)
    buffers = {"PyTorch's tensors": (tx, ty),
               "the plugin's tensors": (torch.from_dlpack(gx), torch.from_dlpack(gy))}

    def sync():
        pg.synchronize()
        torch.cuda.synchronize()

    # (kernel, threads, blocks); the grid-stride loop capped at 8 blocks per
    # multiprocessor (the plugin's grid for data held in L2) and at 1024 (beyond)
    shapes = [("stride_ldg", 256, sms * 8), ("stride_ldg", 128, sms * 16),
              ("stride_plain", 256, sms * 8),
              ("stride_ldg", 256, min(-(-nvec // 256), sms * 1024))]
    for v in (1, 2, 4):
        for kind in ("plain", "ldg"):
            for threads in (128, 256):
                blocks = -(-nvec // (threads * v))
                shapes.append((f"chunk_{v}_{kind}", threads, blocks))
    shapes.append(("chunk_2_plain_restrict", 128, -(-nvec // 256)))
    shapes.append(("chunk_2_ldg_restrict", 128, -(-nvec // 256)))

    def launcher(name, threads, blocks, src, dst):
        fn = module.get_function(name)
        idx = np.int64(nvec) if name.startswith("stride") else np.int32(nvec)
        a, b = src.data_ptr(), dst.data_ptr()
        return lambda: fn((blocks,), (threads,), (a, b, idx))

    cases = {"pluggable Exp": lambda: pg.raw_ops.Exp(x=gx),
             "torch.exp(x)": lambda: torch.exp(tx)}
    for where, (src, dst) in buffers.items():
        cases[f"torch.exp(x, out=y), {where}"] = (
            lambda s=src, d=dst: torch.exp(s, out=d))
        for name, threads, blocks in shapes:
            cases[f"{name} x{threads} ({blocks} blocks), {where}"] = launcher(
                name, threads, blocks, src, dst)
    want = np.exp(x)
    for name, (src, dst) in buffers.items():
        dst.zero_()
        module.get_function("chunk_2_plain")((nvec // 256,), (128,),
                                             (src.data_ptr(), dst.data_ptr(), np.int32(nvec)))
        torch.cuda.synchronize()
        np.testing.assert_allclose(dst.cpu().numpy(), want, rtol=2e-6, err_msg=name)
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.rounds):
        for name, f in cases.items():
            times[name].append(statistics.median(kernel_times(f, sync)))
    print(f"{torch.cuda.get_device_name(0)}, {sms} SMs; Exp of {args.rows}x{args.cols} "
          f"float32; median kernel us over {CALLS} calls, per round")
    print("| case | " + " | ".join(f"round {r + 1}" for r in range(args.rounds))
          + " | best |")
    print("|---|" + "---:|" * (args.rounds + 1))
    for name, ts in times.items():
        print(f"| {name} | " + " | ".join(f"{t:.2f}" for t in ts) + f" | {min(ts):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
