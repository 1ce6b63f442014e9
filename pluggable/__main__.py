"""Command line of pluggable.

  python -m pluggable            list the devices and run a small workload on
                                 each, printing results, timings and where
                                 each op ran
  python -m pluggable plugins    the plugins found and their status
  python -m pluggable check SO   run the conformance suite against a plugin
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def _workload(rng: np.random.Generator) -> list[tuple[str, object, object]]:
    """(name, pluggable function, numpy reference) triples."""
    import pluggable as pg
    a = rng.standard_normal((256, 256)).astype(np.float32)
    b = rng.standard_normal((256, 256)).astype(np.float32)
    img = rng.standard_normal((4, 32, 32, 8)).astype(np.float32)
    filt = rng.standard_normal((3, 3, 8, 16)).astype(np.float32)
    from .cpu_kernels import conv2d_reference
    conv_attrs = {"strides": [1, 1, 1, 1], "padding": "SAME", "dilations": [1, 1, 1, 1],
                  "data_format": "NHWC", "explicit_paddings": []}
    e = np.exp(a - a.max(-1, keepdims=True))
    return [
        ("AddV2", lambda: pg.add(pg.constant(a), pg.constant(b)), a + b),
        ("Relu", lambda: pg.nn.relu(pg.constant(a)), np.maximum(a, 0)),
        ("MatMul", lambda: pg.matmul(pg.constant(a), pg.constant(b)), a @ b),
        ("Softmax", lambda: pg.nn.softmax(pg.constant(a)), e / e.sum(-1, keepdims=True)),
        ("Sum", lambda: pg.reduce_sum(pg.constant(a), axis=0), a.sum(0)),
        ("Conv2D", lambda: pg.nn.conv2d(pg.constant(img), pg.constant(filt), padding="SAME"),
         conv2d_reference(img, filt, conv_attrs).astype(np.float32)),
    ]


def demo() -> int:
    import pluggable as pg
    print(f"pluggable {pg.__version__}\n")
    print("Devices:")
    for d in pg.list_physical_devices():
        dev = pg.get_device(d.name.replace("/physical_device:", ""))
        extra = ""
        if isinstance(dev, pg.Device):
            mem = dev.memory_usage()
            mem_s = f", {mem[1] / 2**30:.1f} GiB" if mem else ""
            extra = f"  ({dev.platform_name}, {dev.vendor}, {dev.hardware_name}{mem_s})"
        print(f"  {d.name:32s} {d.device_type:10s}{extra}")
    bad = [r for r in pg.plugins() if r.status != "loaded"]
    for r in bad:
        print(f"  plugin {r.path}: {r.status}: {r.reason}")
    print()
    rng = np.random.default_rng()
    rows = []
    pg.config.set_log_device_placement(False)
    for d in pg.list_physical_devices():
        name = d.name.replace("/physical_device:", "")
        for op, fn, ref in _workload(rng):
            before = pg.testing.kernel_calls(op, d.device_type)
            with pg.device(name):
                fn().numpy()  # warm-up (kernel creation, allocator)
                t0 = time.perf_counter()
                out = fn().numpy()
                ms = (time.perf_counter() - t0) * 1e3
            ran = pg.testing.kernel_calls(op, d.device_type) - before
            err = float(np.max(np.abs(out - ref)) / (np.max(np.abs(ref)) + 1e-30))
            ok = "ok" if err < 1e-4 else "MISMATCH"
            where = d.device_type if ran >= 2 else "fallback (CPU)"
            rows.append((name, op, f"{err:.1e}", ok, f"{ms:8.3f}", where))
    header = ("device", "op", "rel. error", "check", "time (ms)", "ran on")
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths))
    print(line)
    print("-" * len(line))
    for r in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))
    print("\ntime: one call including the copy in and the read back, after a warm-up call")
    return 0 if all(r[3] == "ok" for r in rows) else 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(
        prog="python -m pluggable",
        description="pluggable: a tensor runtime whose devices are plugins. Without a command, "
                    "lists the devices and runs a small workload on each.")
    parser.add_argument("command", nargs="?", default="demo", choices=["demo", "plugins", "check"],
                        help="demo (default): devices and workload; plugins: table of plugins; "
                             "check PATH.so: conformance suite for a plugin")
    args, rest = parser.parse_known_args(argv)
    if args.command == "demo":
        if rest:
            parser.error(f"unexpected arguments: {' '.join(rest)}")
        return demo()
    from . import check
    if args.command == "plugins":
        return check.plugins_main(rest)
    return check.main(rest)


if __name__ == "__main__":
    sys.exit(main())
