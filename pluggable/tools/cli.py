"""The command line (``python -m pluggable``): the demo, the plugin table,
the op catalogue, the conformance check and the profiler.

  python -m pluggable [demo]     list the devices and run a small workload on
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
  python -m pluggable --version  the versions of pluggable, its C ABI, Python
                                 and numpy

Each command has its own ``--help``. Tables fit 100 columns (long cells are
folded or cut, the PATH of ``plugins`` goes under its row); ``--wide``
prints them whole and ``--json``, where offered, prints the data.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import runpy
import sys
import time
import traceback
from typing import Callable, Sequence

import numpy as np

from .._core import lib as _core_lib
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
from .table import WIDTH, cuts_cells, fit_lines, format_table

CUT_HINT = f"(cells cut to fit {WIDTH} columns: --wide prints them whole)"


def version_text() -> str:
    """What ``--version`` prints: pluggable's version, the C ABI version the
    core implements (SE_MAJOR.SE_MINOR.SE_PATCH of stream_executor.h, which a
    plugin's major version must equal) and the Python and numpy versions."""
    abi = f"{_core_lib.SE_MAJOR}.{_core_lib.SE_MINOR}.{_core_lib.SE_PATCH}"
    return (f"pluggable {__version__}\n"
            f"C ABI (SE_MAJOR.SE_MINOR.SE_PATCH) {abi}\n"
            f"Python {platform.python_version()}, numpy {np.__version__}")


def _width(args: argparse.Namespace) -> int | None:
    return None if getattr(args, "wide", False) else WIDTH


def _table(args: argparse.Namespace, header: Sequence[str], rows: list,
           fit: dict[int, str], align: str = "") -> str:
    """The table at the command's width, and a hint when cells were cut."""
    width = _width(args)
    text = format_table(header, rows, width=width, fit=fit, align=align)
    return text + "\n" + CUT_HINT if cuts_cells(header, rows, width=width, fit=fit) else text


# ------------------------------------------------------------------ plugins

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
    notes = [f"graph optimizer for {opt.device_type}, configs: "
             f"{', '.join(set_) or 'all DEFAULT'}"
             f"{' (the others DEFAULT)' if set_ else ''}; {opt.calls} call(s)"]
    notes += [f"graph optimizer result not used: {why}" for why in opt.failures[-3:]]
    return notes


def _profiler_notes(r) -> list[str]:
    """What `plugins` prints about a plugin's device profiler."""
    prof = r.profiler
    if prof is None:
        return []
    state = prof.status + (f": {prof.reason}" if prof.reason else "")
    notes = [f"profiler for {prof.device_type or '?'}: {state}"]
    notes += [f"profiler data left out of a profile: {why}" for why in prof.failures[-3:]]
    return notes


def _plugin_notes(r) -> list[str]:
    notes = [f"{r.status}: {r.reason}"] if r.reason else []
    notes += [f"rejected registration: {why}" for why in r.rejected]
    return notes + _optimizer_notes(r) + _profiler_notes(r)


def _plugins(args: argparse.Namespace) -> int:
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
    print(_table(args, header, _plugin_rows(records), fit={1: "cut", 2: "cut", 8: "below"}))
    lines = []
    for r in records:
        notes = _plugin_notes(r)
        if notes:
            lines += ["", r.path] + [f"  {n}" for n in notes]
    hint = cuda_env.missing_plugin_hint([r.path for r in records])
    if hint:
        lines += ["", hint]
    if lines:
        print(fit_lines("\n".join(lines), _width(args)))
    return 0


# ------------------------------------------------------------------ demo

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


def _devices_table(args: argparse.Namespace) -> str:
    rows = []
    for d in placement.list_physical_devices():
        dev = placement.get_device(d.name.replace("/physical_device:", ""))
        about = "-"
        if isinstance(dev, Device):
            mem = dev.memory_usage()
            mem_s = f", {mem[1] / 2**30:.1f} GiB" if mem else ""
            about = f"{dev.platform_name}, {dev.vendor}, {dev.hardware_name}{mem_s}"
        rows.append((d.name, d.device_type, about))
    return _table(args, ("device", "type", "platform, vendor, hardware, memory"), rows,
                  fit={2: "wrap"})


def _demo(args: argparse.Namespace) -> int:
    """Lists the devices and runs a small workload on each; returns the exit
    status (1 if a result is wrong)."""
    print(f"pluggable {__version__}\n")
    print(_devices_table(args))
    bad = [f"plugin {r.path}: {r.status}: {r.reason}" for r in loader.records()
           if r.status != "loaded"]
    if bad:
        print(fit_lines("\n".join(bad), _width(args)))
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
            rows.append((name, op, f"{err:.1e}", ok, f"{ms:.3f}", where))
    header = ("device", "op", "rel. error", "check", "time (ms)", "ran on")
    print(_table(args, header, rows, fit={0: "cut", 5: "cut"}, align="llrlrl"))
    print("\ntime: one call including the copy in and the read back, after a warm-up call")
    return 0 if all(r[3] == "ok" for r in rows) else 1


def demo() -> int:
    """``python -m pluggable``: the devices and the workload (see `_demo`)."""
    return main(["demo"])


# ------------------------------------------------------------------ profile

def _summary_table(args: argparse.Namespace, summary, top: int) -> str:
    """The profiler's per-op summary in columns that fit the width."""
    def pct(part: int, whole: int) -> str:
        return f"{100.0 * part / whole:.1f}" if whole else "-"

    rows = [(r.name, r.device, r.count, f"{r.host_ns / 1e6:.3f}", f"{r.host_mean_ns / 1e3:.1f}",
             pct(r.host_ns, summary.host_ns), f"{r.device_ns / 1e6:.3f}",
             f"{r.device_mean_ns / 1e3:.1f}", pct(r.device_ns, summary.device_ns))
            for r in summary.rows[:top]]
    header = ("Op", "Device", "Count", "Host ms", "Host us/op", "Host %", "Dev ms", "Dev us/op",
              "Dev %")
    total = (f"wall {summary.wall_ns / 1e6:.3f} ms, host (self) {summary.host_ns / 1e6:.3f} ms, "
             f"device {summary.device_ns / 1e6:.3f} ms; us/op: mean per call")
    return _table(args, header, rows, fit={0: "cut", 1: "cut"}, align="llrrrrrrr") + \
        "\n" + total


def _profile(args: argparse.Namespace) -> int:
    if not os.path.isfile(args.script):
        args.parser.error(f"no such script: {args.script}")
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
    print(_summary_table(args, result.summary, args.top))
    for err in result.errors:
        print(fit_lines(f"profiler: {err}", _width(args)))
    # Paths whole, to be copied.
    print(f"\nprofile: {result.xplane_path}\ntrace:   {result.trace_path}")
    return 1 if failed else 0


# ------------------------------------------------------------------ ops

def _ops(args: argparse.Namespace) -> int:
    entries = op_catalog.list_ops(args.device)
    rows = [(e.qualified_name, str(e.version), e.kind, ",".join(e.devices()), e.schema_text(),
             e.origin) for e in entries]
    if args.json:
        keys = ("name", "version", "kind", "devices", "attributes", "origin")
        print(json.dumps([dict(zip(keys, r)) for r in rows], indent=2))
    else:
        header = ("OP", "VER", "KIND", "DEVICES", "ATTRIBUTES", "ORIGIN")
        print(_table(args, header, rows, fit={3: "cut", 4: "cut", 5: "cut-start"}))
    return 0


# ------------------------------------------------------------------ the parser

def _wide(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--wide", action="store_true",
                        help=f"print every cell whole, however long the lines (by default "
                             f"the output fits {WIDTH} columns)")


def _plugins_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    _wide(parser)


def _ops_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", help="only ops with a kernel for this device (type)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    _wide(parser)


def _profile_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--logdir", default="logs",
                        help="where to write plugins/profile/<run>/ (default: logs)")
    parser.add_argument("--top", type=int, default=20, help="rows of the summary (default: 20)")
    _wide(parser)
    parser.add_argument("script", help="the Python script to run")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")


# name: (one-line summary, description, examples, arguments, run)
COMMANDS: dict[str, tuple[str, str, str, Callable, Callable]] = {
    "demo": (
        "list the devices and run a small workload on each (the default)",
        "List the devices, then run AddV2, Relu, MatMul, Softmax, Sum and Conv2D on\n"
        "each with fresh random inputs, and print the error against numpy, the time\n"
        "of one call and where the kernel ran. Exit status 1 if a result is wrong.",
        "  python -m pluggable\n  python -m pluggable demo --wide",
        _wide, _demo),
    "plugins": (
        "the plugins found, their status and what they register",
        "List the plugin files found: status (and why a plugin was quarantined or\n"
        "skipped), device type, platform, ABI version, device count, kernels, ops\n"
        "and their graph side (a graph optimizer with its configs, stream capture),\n"
        "then the notes about each plugin under its path.",
        "  python -m pluggable plugins\n"
        "  PLUGGABLE_PLUGIN_PATH=build python -m pluggable plugins --json",
        _plugins_arguments, _plugins),
    "ops": (
        "the op catalogue: built-in, plugin and custom ops",
        "List every registered op: namespace and name, version, kind, the devices\n"
        "with a kernel for it, its attribute schema and where it comes from.",
        "  python -m pluggable ops\n  python -m pluggable ops --device MY_DEVICE --wide\n"
        "  python -m pluggable ops --json > ops.json",
        _ops_arguments, _ops),
    "check": (
        "run the conformance suite against a plugin",
        check.DESCRIPTION, check.EXAMPLES.split("\n", 1)[1], check.add_arguments,
        check.run),
    "profile": (
        "run a Python script under the profiler and print the per-op summary",
        "Run SCRIPT (with ARGS as its sys.argv) under the profiler, write the profile\n"
        "under LOGDIR/plugins/profile/<run>/ and print the per-op summary. Open the\n"
        "files with TensorBoard (tensorboard --logdir LOGDIR), Perfetto or\n"
        "chrome://tracing (the .trace.json.gz file). Exit status 1 if the script\n"
        "raised or exited with a non-zero status.",
        "  python -m pluggable profile train.py --epochs 1\n"
        "  python -m pluggable profile --logdir /tmp/logs --top 5 examples/train_digits.py",
        _profile_arguments, _profile),
}

DESCRIPTION = """\
pluggable: a tensor runtime whose devices are plugins behind a C ABI
compatible with TensorFlow's PluggableDevice API. Without a command, lists
the devices and runs a small workload on each. Each command has its own
--help."""


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m pluggable`` and its commands."""
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="python -m pluggable", description=DESCRIPTION, formatter_class=raw,
        epilog="examples:\n  python -m pluggable check --help\n"
               "  python -m pluggable check pluggable/plugins/libpluggable_my_device.so\n"
               "  python -m pluggable ops --device MY_DEVICE")
    parser.add_argument("--version", action="version", version=version_text(),
                        help="print the versions of pluggable, its C ABI, Python and numpy")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND",
                                title="commands (python -m pluggable COMMAND --help)")
    for name, (summary, description, example, arguments, run) in COMMANDS.items():
        p = sub.add_parser(name, help=summary, description=description,
                           epilog=f"examples:\n{example}", formatter_class=raw,
                           prog=f"python -m pluggable {name}")
        arguments(p)
        p.set_defaults(run=run, parser=p)
    return parser


def main(argv: list[str] | None = None) -> int:
    """``python -m pluggable [COMMAND] [OPTIONS]``; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.command is None:
        args = parser.parse_args(["demo"])
    return args.run(args)


def plugins_main(argv: list[str] | None = None) -> int:
    """``python -m pluggable plugins [--json] [--wide]``."""
    return main(["plugins", *(argv or [])])


def ops_main(argv: list[str] | None = None) -> int:
    """``python -m pluggable ops [--device X] [--json] [--wide]``."""
    return main(["ops", *(argv or [])])


def profile_main(argv: list[str] | None = None) -> int:
    """``python -m pluggable profile [--logdir DIR] [--top N] SCRIPT [ARGS]``."""
    return main(["profile", *(argv or [])])
