"""GPU-to-GPU copy bandwidth: ``x.to("GPU:1")`` (the CUDA plugin's peer
copy, PG_GetPeerFns) against PyTorch's ``x.to("cuda:1")``, in the same run.

    python3 benchmarks/peer_copy_gpu.py [--seconds 0.3] [--json PATH]

For each size (float32, 1 MiB .. 1 GiB by powers of 16): a warm-up, then
as many copies GPU:0 -> GPU:1 as fill ``--seconds``, each followed by a
wait for both GPUs (a copy is done when it returns, as pluggable's is); the
median of three such rounds. The result of the last copy is checked
against the source. Prints whether the GPUs reach each other directly
(peer access: NVLink or PCIe) and a markdown table.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from gpu_peers import cuda_torch, require_pluggable

SIZES = [1 << 20, 1 << 24, 1 << 28, 1 << 30]


def _time(copy, sync, seconds: float) -> float:
    copy()
    sync()
    t0 = time.perf_counter()
    copy()
    sync()
    k = int(min(max(3, seconds / max(time.perf_counter() - t0, 1e-6)), 1000))
    rounds = []
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(k):
            copy()
            sync()
        rounds.append((time.perf_counter() - t0) / k)
    return float(np.median(rounds))


def main(argv: list | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=0.3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    pg = require_pluggable()
    from pluggable.runtime import peer
    if len(pg.list_physical_devices("GPU")) < 2:
        print("peer_copy_gpu: needs 2 GPUs")
        return 1
    torch = cuda_torch()
    if torch is not None and torch.cuda.device_count() < 2:
        torch = None
    g0, g1 = pg.get_device("GPU:0"), pg.get_device("GPU:1")
    direct = peer.can_access_peer(g0, g1)
    rows = []
    for nbytes in SIZES:
        a = np.random.default_rng().standard_normal(nbytes // 4).astype(np.float32)
        with pg.device("GPU:0"):
            x = pg.constant(a)
        out = {}

        def ours():
            out["y"] = x.to("GPU:1")
        t = _time(ours, g1.synchronize, args.seconds)
        assert np.array_equal(out["y"].numpy(), a), "the peer copy changed the data"
        tt = None
        if torch is not None:
            tx = torch.from_numpy(a).to("cuda:0")
            got = {}

            def theirs():
                got["y"] = tx.to("cuda:1")
            tt = _time(theirs, lambda: torch.cuda.synchronize(1), args.seconds)
            del tx, got
        rows.append({"bytes": nbytes, "pluggable_s": t, "torch_s": tt})
        del x, out
    print(f"GPU:0 -> GPU:1 copies, float32; peer access: {'yes' if direct else 'no'}; "
          f"peer: {'torch ' + torch.__version__ if torch else 'PyTorch missing or one GPU'}")
    print("\n| size | pluggable us | pluggable GB/s | torch us | torch GB/s | "
          "pluggable bandwidth / torch |")
    print("|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        b, t, tt = r["bytes"], r["pluggable_s"], r["torch_s"]
        ratio = f"{tt / t:.2f}x" if tt else "-"
        print(f"| {b >> 20} MiB | {t * 1e6:.1f} | {b / t / 1e9:.1f} | "
              f"{'-' if tt is None else f'{tt * 1e6:.1f}'} | "
              f"{'-' if tt is None else f'{b / tt / 1e9:.1f}'} | {ratio} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"peer_access": direct, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
