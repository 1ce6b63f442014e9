"""The command line (``python -m pluggable``): the demo, the plugin table,
and the conformance check.

  python -m pluggable            list the devices and run a small workload on
                                 each, printing results, timings and where
                                 each op ran
  python -m pluggable plugins    the plugins found and their status
  python -m pluggable ops [--device X]
                                 every op: namespace, name, version, devices
                                 with kernels, attribute schema, origin
  python -m pluggable check SO   run the conformance suite against a plugin
  python -m pluggable profile SCRIPT [ARGS]
                                 run a script under the profiler and print
                                 the per-op summary
"""
from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
import time
import traceback

import numpy as np

from ..framework import config, op_catalog
from ..framework.version import VERSION as __version__
from ..ops import math_ops, nn_ops
from ..ops.cpu_kernels import conv2d_reference
from ..plugins import cuda_env, loader
from .. import profiler
from ..runtime import placement
from ..runtime.device import Device
from ..runtime.tensors import constant
from . import check, testing
from .check.results import format_table


def _graph_column(r) -> str:
    parts = (["optimizer"] if r.optimizer is not None else []) + \
        (["capture"] if r.stream_capture else [])
    return "+".join(parts) or "-"


def _plugin_rows(records: list) -> list[tuple[str, ...]]:
    rows = []
    for r in records:
        rows.append((r.status, r.device_type or "-", r.platform_name or "-", r.abi_version or "-",
                     str(r.device_count), str(r.kernels), str(r.ops), _graph_column(r), r.path))
    return rows


def _optimizer_notes(r) -> list[str]:
    """What `plugins` prints about a plugin's graph optimizer."""
    opt = r.optimizer
    if opt is None:
        return []
    set_ = [f"{k}={v}" for k, v in opt.configs.items() if v != "DEFAULT"]
    notes = [f"  {r.path}: graph optimizer for {opt.device_type}, configs: "
             f"{', '.join(set_) or 'all DEFAULT'}"
             f"{' (the others DEFAULT)' if set_ else ''}; {opt.calls} call(s)"]
    notes += [f"  {r.path}: graph optimizer result not used: {why}" for why in opt.failures[-3:]]
    return notes


def _profiler_notes(r) -> list[str]:
    """What `plugins` prints about a plugin's device profiler."""
    prof = r.profiler
    if prof is None:
        return []
    state = prof.status + (f": {prof.reason}" if prof.reason else "")
    notes = [f"  {r.path}: profiler for {prof.device_type or '?'}: {state}"]
    notes += [f"  {r.path}: profiler data left out of a profile: {why}"
              for why in prof.failures[-3:]]
    return notes


def plugins_main(argv: list[str] | None = None) -> int:
    """``python -m pluggable plugins [--json]``: the plugins found, their
    status, reason, ABI version, platform, device type, device count, number
    of kernels and ops, and their graph side (a graph optimizer with its
    configs, stream capture). Returns the exit status (0)."""
    parser = argparse.ArgumentParser(prog="python -m pluggable plugins",
                                     description="List the plugins found and their status.")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    records = loader.records()
    if args.json:
        print(json.dumps([r.to_dict() for r in records], indent=2))
        return 0
    if not records:
        print("no plugins found (see 'python -c \"import pluggable.plugins as p; "
              "help(p)\"' for the search order)")
        return 0
    header = ("STATUS", "DEVICE TYPE", "PLATFORM", "ABI", "DEVICES", "KERNELS", "OPS", "GRAPH",
              "PATH")
    print(format_table(header, _plugin_rows(records)))
    notes = []
    for r in records:
        if r.reason:
            notes.append(f"  {r.path}: {r.status}: {r.reason}")
        for why in r.rejected:
            notes.append(f"  {r.path}: rejected registration: {why}")
        notes += _optimizer_notes(r)
        notes += _profiler_notes(r)
    hint = cuda_env.missing_plugin_hint([r.path for r in records])
    if hint:
        notes.append(f"  {hint}")
    if notes:
        print()
        print("\n".join(notes))
    return 0


def _workload(rng: np.random.Generator) -> list[tuple[str, object, object]]:
    """(name, pluggable function, numpy reference) triples."""
    a = rng.standard_normal((256, 256)).astype(np.float32)
    b = rng.standard_normal((256, 256)).astype(np.float32)
    img = rng.standard_normal((4, 32, 32, 8)).astype(np.float32)
    filt = rng.standard_normal((3, 3, 8, 16)).astype(np.float32)
    conv_attrs = {"strides": [1, 1, 1, 1], "padding": "SAME", "dilations": [1, 1, 1, 1],
                  "data_format": "NHWC", "explicit_paddings": []}
    e = np.exp(a - a.max(-1, keepdims=True))
    return [
        ("AddV2", lambda: math_ops.add(constant(a), constant(b)), a + b),
        ("Relu", lambda: nn_ops.relu(constant(a)), np.maximum(a, 0)),
        ("MatMul", lambda: math_ops.matmul(constant(a), constant(b)), a @ b),
        ("Softmax", lambda: nn_ops.softmax(constant(a)), e / e.sum(-1, keepdims=True)),
        ("Sum", lambda: math_ops.reduce_sum(constant(a), axis=0), a.sum(0)),
        ("Conv2D", lambda: nn_ops.conv2d(constant(img), constant(filt), padding="SAME"),
         conv2d_reference(img, filt, conv_attrs).astype(np.float32)),
    ]


def demo() -> int:
    """Lists the devices and runs a small workload on each; returns the exit
    status (1 if a result is wrong)."""
    print(f"pluggable {__version__}\n")
    print("Devices:")
    for d in placement.list_physical_devices():
        dev = placement.get_device(d.name.replace("/physical_device:", ""))
        extra = ""
        if isinstance(dev, Device):
            mem = dev.memory_usage()
            mem_s = f", {mem[1] / 2**30:.1f} GiB" if mem else ""
            extra = f"  ({dev.platform_name}, {dev.vendor}, {dev.hardware_name}{mem_s})"
        print(f"  {d.name:32s} {d.device_type:10s}{extra}")
    bad = [r for r in loader.records() if r.status != "loaded"]
    for r in bad:
        print(f"  plugin {r.path}: {r.status}: {r.reason}")
    print()
    rng = np.random.default_rng()
    rows = []
    config.set_log_device_placement(False)
    for d in placement.list_physical_devices():
        name = d.name.replace("/physical_device:", "")
        for op, fn, ref in _workload(rng):
            before = testing.kernel_calls(op, d.device_type)
            with placement.device(name):
                fn().numpy()  # warm-up (kernel creation, allocator)
                t0 = time.perf_counter()
                out = fn().numpy()
                ms = (time.perf_counter() - t0) * 1e3
            ran = testing.kernel_calls(op, d.device_type) - before
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


def profile_main(argv: list[str] | None = None) -> int:
    """``python -m pluggable profile [--logdir DIR] [--top N] SCRIPT [ARGS]``:
    runs SCRIPT (with ARGS as its sys.argv) under the profiler, writes the
    profile under DIR and prints the per-op summary. Returns 0, or 1 if the
    script raised."""
    parser = argparse.ArgumentParser(
        prog="python -m pluggable profile",
        description="Run a Python script under the profiler and print the per-op summary. "
                    "Open the written files with TensorBoard (tensorboard --logdir DIR), "
                    "Perfetto or chrome://tracing (the .trace.json.gz file).")
    parser.add_argument("--logdir", default="logs",
                        help="where to write plugins/profile/<run>/ (default: logs)")
    parser.add_argument("--top", type=int, default=20, help="rows of the summary (default: 20)")
    parser.add_argument("script", help="the Python script to run")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    args = parser.parse_args(argv)
    if not os.path.isfile(args.script):
        parser.error(f"no such script: {args.script}")
    saved_argv, failed = sys.argv, False
    sys.argv = [args.script] + args.args
    session = profiler.Profile(args.logdir)
    try:
        with session:
            runpy.run_path(args.script, run_name="__main__")
    except SystemExit as exc:
        failed = exc.code not in (None, 0)
    except Exception:
        traceback.print_exc()
        failed = True
    finally:
        sys.argv = saved_argv
    result = session.result
    print(result.summary.table(args.top))
    for err in result.errors:
        print(f"profiler: {err}")
    print(f"\nprofile: {result.xplane_path}\ntrace:   {result.trace_path}")
    return 1 if failed else 0


def ops_main(argv: list[str] | None = None) -> int:
    """``python -m pluggable ops [--device X] [--json]``: the op catalogue."""
    parser = argparse.ArgumentParser(prog="python -m pluggable ops",
                                     description="List every op (built-in, plugin, custom).")
    parser.add_argument("--device", help="only ops with a kernel for this device (type)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    entries = op_catalog.list_ops(args.device)
    rows = [(e.qualified_name, str(e.version), e.kind, ",".join(e.devices()), e.schema_text(),
             e.origin) for e in entries]
    if args.json:
        keys = ("name", "version", "kind", "devices", "attributes", "origin")
        print(json.dumps([dict(zip(keys, r)) for r in rows], indent=2))
    else:
        print(format_table(("OP", "VERSION", "KIND", "DEVICES", "ATTRIBUTES", "ORIGIN"), rows))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(
        prog="python -m pluggable",
        description="pluggable: a tensor runtime whose devices are plugins. Without a command, "
                    "lists the devices and runs a small workload on each.")
    parser.add_argument("command", nargs="?", default="demo",
                        choices=["demo", "plugins", "ops", "check", "profile"],
                        help="demo (default): devices and workload; plugins: table of plugins; "
                             "ops: the op catalogue; "
                             "check PATH.so: conformance suite for a plugin; profile SCRIPT: "
                             "run a script under the profiler")
    args, rest = parser.parse_known_args(argv)
    if args.command == "demo":
        if rest:
            parser.error(f"unexpected arguments: {' '.join(rest)}")
        return demo()
    if args.command == "plugins":
        return plugins_main(rest)
    if args.command == "profile":
        return profile_main(rest)
    if args.command == "ops":
        return ops_main(rest)
    return check.main(rest)
