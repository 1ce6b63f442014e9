"""Does an out-of-place all-reduce cost NCCL time? NCCL alone, no framework.

``pg.distribute.all_reduce`` returns a new tensor, so the CUDA plugin calls
ncclAllReduce out of place (a fresh output buffer per call, the caching
allocator handing back the previous call's buffer once it is dropped),
while ``torch.distributed.all_reduce`` reduces in place. This probe times
the three ways on the same NCCL, with PyTorch's single-process
``torch.cuda.nccl.all_reduce`` over every GPU present (one communicator
clique, as ``pg.distribute.all_reduce`` over a list of tensors):

  in place         inputs == outputs (torch.distributed's form);
  out, fixed       one output buffer per GPU, reused every call;
  out, alternate   two output buffers per GPU used in turns (what a loop
                   ``y = all_reduce(x)`` gets from a caching allocator:
                   the new output is allocated before the old one is
                   dropped).

For each size (float32, per GPU) and way: back-to-back calls between two
CUDA events on GPU 0's NCCL stream, the GPU's time per call (the host is
far ahead of the GPU from a few MiB up), median of --repeats loops, ways
in turns. Bus bandwidth as in nccl-tests: bytes / time * 2 (n - 1) / n.

usage: python3 benchmarks/nccl_out_of_place_gpu.py [--sizes-mib 4,16,64]
           [--calls 100] [--repeats 7] [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes-mib", default="1,4,16,64")
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--json")
    args = ap.parse_args()
    try:
        import torch
        import torch.cuda.nccl as nccl
    except ImportError as exc:
        print(f"needs PyTorch with CUDA: {exc}")
        return 1
    n = torch.cuda.device_count()
    if n < 2:
        print(f"needs 2 or more GPUs, {n} present")
        return 1
    print(f"{n} x {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
          f"NCCL {'.'.join(map(str, nccl.version()))}")
    streams = [torch.cuda.Stream(device=i) for i in range(n)]
    rows = []
    for mib in (int(s) for s in args.sizes_mib.split(",")):
        count = mib * (1 << 20) // 4
        xs = [torch.ones(count, device=f"cuda:{i}") for i in range(n)]
        own = [x.clone() for x in xs]        # the in-place calls' buffers
        outs = [[torch.empty_like(x) for x in xs] for _ in range(2)]

        def run(way: str, k: int) -> None:
            for c in range(k):
                if way == "in place":
                    nccl.all_reduce(own, streams=streams)
                    continue
                o = outs[c % 2] if way == "out, alternate" else outs[0]
                nccl.all_reduce(xs, outputs=o, streams=streams)

        ways = ["in place", "out, fixed", "out, alternate"]
        for w in ways:                     # warm-up (and the clique, once)
            run(w, 5)
        for i in range(n):
            torch.cuda.synchronize(i)
        times: dict[str, list[float]] = {w: [] for w in ways}
        for r in range(args.repeats):
            for w in ways[r % 3:] + ways[:r % 3]:
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record(streams[0])
                run(w, args.calls)
                end.record(streams[0])
                end.synchronize()
                times[w].append(start.elapsed_time(end) * 1e3 / args.calls)
        # (the in-place buffers grow call by call: sums of sums, not checked)
        got = outs[0][0][:4].cpu().tolist()
        assert all(v == n for v in got), f"out-of-place all-reduce of ones gave {got}"
        for w in ways:
            us = statistics.median(times[w])
            busbw = count * 4 / (us * 1e-6) * 2 * (n - 1) / n / 1e9
            rows.append({"mib": mib, "way": w, "us": us, "busbw_gbs": busbw,
                         "spread_us": [min(times[w]), max(times[w])]})
    base = {r["mib"]: r["us"] for r in rows if r["way"] == "in place"}
    print("\n| MiB | way | us per call | busbw GB/s | in place / this |")
    print("|---:|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['mib']} | {r['way']} | {r['us']:.1f} | {r['busbw_gbs']:.1f} | "
              f"{base[r['mib']] / r['us']:.3f}x |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
