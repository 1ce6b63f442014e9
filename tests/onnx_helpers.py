"""What the ONNX model tests share: running an imported model on a device
and counting the kernels that ran there, so a test can prove the device
did the work (a fallback to CPU can still pass numerically)."""
from __future__ import annotations

import pluggable as pg
from pluggable.tools import testing


def run_checked(pm, feeds: dict, dev: str) -> tuple[dict, dict]:
    """Runs imported model `pm` on `dev` (building it first), returning its
    outputs as arrays and the kernel calls of the run itself, by (op,
    device type)."""
    with pg.device(dev):
        pm(feeds)                                    # builds and plans the graph
        before = testing.kernel_call_counts()
        out = {k: t.numpy() for k, t in pm(feeds).items()}
    after = testing.kernel_call_counts()
    ran = {k: n - before.get(k, 0) for k, n in after.items() if n > before.get(k, 0)}
    return out, ran


def ran_elsewhere(ran: dict, dev: str) -> list[str]:
    """The kernels of `ran` that ran on a device type other than `dev`'s
    (device-agnostic "DEFAULT" kernels aside), as "Op on TYPE"."""
    kind = dev.split(":")[0]
    return sorted(f"{op} on {d}" for (op, d), n in ran.items() if d not in (kind, "DEFAULT"))
