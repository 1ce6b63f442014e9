"""The DLPack round trip between pluggable and PyTorch on the GPU, in parts.

``bench_gpu.py``'s "DLPack round trip via PyTorch" row is
``pg.from_dlpack(torch.from_dlpack(t))``; this script times each piece of it
(median of 300 calls after 20, µs), beside PyTorch and CuPy handing a
tensor to each other:

- our export, ``t.__dlpack__(stream=1)`` (1: the legacy default stream,
  where PyTorch's default-stream work runs);
- ``torch.from_dlpack`` of a pluggable GPU tensor (our export included);
- ``pg.from_dlpack`` of a torch tensor (PyTorch's export included);
- PyTorch's export alone, asked for the legacy stream (what our import
  asks for) and for the CUDA plugin's own stream;
- the whole round trip, and PyTorch to CuPy and back.

1 MiB float32 tensors. Needs a GPU device of the CUDA plugin and PyTorch
(CuPy optional).

    python3 benchmarks/dlpack_parts_gpu.py
"""
from __future__ import annotations

import sys

import numpy as np
from gpu_peers import cuda_cupy, median_time, require_pluggable

try:
    import torch
except ImportError:
    print("needs PyTorch: it is the peer of the round trip", file=sys.stderr)
    sys.exit(2)

pg = require_pluggable()
from pluggable.runtime import native_stream  # noqa: E402


def _median_us(fn) -> float:
    return median_time(fn, 300, warmup=20) * 1e6


def main() -> int:
    if not torch.cuda.is_available() or not pg.list_physical_devices("GPU"):
        print("no GPU: needs the CUDA plugin's GPU:0 and a CUDA build of PyTorch",
              file=sys.stderr)
        return 2
    n = 1 << 18  # 1 MiB of float32
    with pg.device("GPU:0"):
        t = pg.constant(np.ones(n, np.float32))
    ours = native_stream.native_stream(pg.get_device("GPU:0")).handle
    tt = torch.ones(n, device="cuda")
    rows = [
        ("our export, t.__dlpack__(stream=1)",
         lambda: t.__dlpack__(stream=1, max_version=(1, 0))),
        ("torch.from_dlpack(pluggable tensor)", lambda: torch.from_dlpack(t)),
        ("pg.from_dlpack(torch tensor)", lambda: pg.from_dlpack(tt)),
        ("torch's export, stream=1 (legacy default)",
         lambda: tt.__dlpack__(stream=1, max_version=(1, 0))),
        ("torch's export, stream=the CUDA plugin's",
         lambda: tt.__dlpack__(stream=ours, max_version=(1, 0))),
        ("round trip pg -> torch -> pg", lambda: pg.from_dlpack(torch.from_dlpack(t))),
    ]
    cupy, _ = cuda_cupy()
    if cupy is not None:
        rows.append(("round trip torch -> CuPy -> torch",
                     lambda: torch.from_dlpack(cupy.from_dlpack(tt))))
    print(f"DLPack on GPU:0, torch {torch.__version__}, 1 MiB float32, median of 300 calls\n")
    print("| part | us |\n|---|---:|")
    for name, fn in rows:
        print(f"| {name} | {_median_us(fn):.1f} |")
    pg.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
