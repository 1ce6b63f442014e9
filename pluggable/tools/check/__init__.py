"""The conformance kit behind ``python -m pluggable check``.

``main(argv)`` runs the conformance suite against one plugin file::

    python -m pluggable check path/to/libmy_plugin.so [--json] [--wide] [--timeout S]
                              [--tensorflow] [--onnxruntime]

The suite runs in a subprocess that loads nothing but that plugin
(PLUGGABLE_DISABLE_PLUGINS=1, then ``pg.load_plugin(PATH)``), so a crash or a
hang is reported as a failed check instead of taking the caller down. It
checks, on device 0 of the plugin: loading and validation, device
enumeration, allocation of many sizes (through the core and directly through
the plugin's ``allocate``), synchronous and asynchronous copies, fills,
ordering across two streams with events, event states, timers, host
callbacks and error reporting, allocator statistics, and every registered
kernel on random inputs against the built-in CPU kernels. With
``--tensorflow`` it then runs the plugin inside TensorFlow (``tf_certify``,
another child process) and reports each op whose results differ from
TensorFlow's CPU. With ``--onnxruntime`` it runs the plugin inside ONNX
Runtime through pluggable's execution provider (``ort_certify``, another
child process) and compares every op the bridge claims with ONNX Runtime's
CPU EP. The exit status is 0 when every check passed (or was skipped as not
applicable) and, with ``--tensorflow`` / ``--onnxruntime``, the plugin is
certified for that runtime; 1 otherwise (including "TensorFlow not
installed" and an onnxruntime that is missing or too old).

The checks are grouped by what they check: ``abi`` (loading, registrations,
devices), ``memory`` (allocation, fills, allocator statistics), ``streams``
(copies, stream ordering, events, timers, host callbacks, stream errors) and
``kernels`` (every registered kernel against the CPU reference); ``suite``
runs them in the child (``python -m pluggable.tools.check --suite-child
PATH``) and ``results`` formats the report.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys

from ...plugins.probe import no_core_dumps, signal_name
from .. import ort_certify, tf_certify
from ..table import WIDTH, fit_lines
from .results import CheckResult, format_report

DEFAULT_TIMEOUT = 600.0


def _child_env() -> dict:
    env = dict(os.environ)
    env["PLUGGABLE_DISABLE_PLUGINS"] = "1"
    env.pop("PLUGGABLE_PROBE_PLUGINS", None)
    return env


def run_suite(path: str, timeout: float = DEFAULT_TIMEOUT,
              with_plugins: tuple[str, ...] = ()) -> list[CheckResult]:
    """Runs the conformance suite against `path` in a subprocess and returns
    its results; a crash or a timeout becomes a failed check. `with_plugins`
    are loaded first (e.g. the device plugin a kernel-only plugin targets)."""
    cmd = [sys.executable, "-m", "pluggable.tools.check", "--suite-child", os.path.abspath(path)]
    for w in with_plugins:
        cmd += ["--with", os.path.abspath(w)]
    crashed = ""
    try:
        proc = subprocess.run(cmd, env=_child_env(), capture_output=True, text=True,
                              timeout=timeout, preexec_fn=no_core_dumps)
        out, err, rc = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode("utf-8", "replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err, rc = "", None
        crashed = f"did not finish within {timeout:g} s (hang?); use --timeout to allow more"
    results: list[CheckResult] = []
    started: str | None = None
    stage = ""
    for line in out.splitlines():
        if line.startswith("CHECK_START "):
            started = line[len("CHECK_START "):]
        elif line.startswith("CHECK_RESULT "):
            try:
                results.append(CheckResult(**json.loads(line[len("CHECK_RESULT "):])))
            except (ValueError, TypeError):
                pass
            started = None
        elif line.startswith("PROBE_STAGE "):
            stage = line[len("PROBE_STAGE "):]
    if rc is not None and rc < 0:
        crashed = f"crashed with {signal_name(-rc)}"
    elif rc not in (None, 0, 1) and not crashed:
        tail = " | ".join(err.strip().splitlines()[-3:])
        crashed = f"the check process exited with status {rc}" + (f": {tail}" if tail else "")
    if crashed:
        where = f" (in {stage})" if started == "load" and stage else ""
        results.append(CheckResult(started or "suite", "fail", crashed + where))
    elif not results:
        tail = " | ".join(err.strip().splitlines()[-3:])
        results.append(CheckResult("suite", "fail", f"the check process reported nothing: {tail}"))
    return results


DESCRIPTION = """\
Run the conformance suite against one plugin, in a subprocess that loads
nothing else: loading and validation, devices, memory, copies, streams,
events, timers, host callbacks, allocator statistics, and every registered
kernel on random inputs against the built-in CPU kernels. Exit status 0 when
every check passed or was skipped as not applicable (and, with --tensorflow
or --onnxruntime, the plugin is certified for that runtime), 1 otherwise, 2
for a bad command."""

EXAMPLES = """\
examples:
  python -m pluggable check build/libmy_plugin.so
  python -m pluggable check libmy_kernels.so --with libmy_device.so
  python -m pluggable check libmy_plugin.so --tensorflow --json > report.json
  python -m pluggable check libmy_plugin.so --onnxruntime"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``python -m pluggable check``."""
    parser.add_argument("path", help="the plugin's shared library")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--wide", action="store_true",
                        help="print each check on one line, however long (the table fits "
                             "100 columns otherwise)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                        help=f"seconds the whole suite may take (default {DEFAULT_TIMEOUT:g})")
    parser.add_argument("--tensorflow", action="store_true",
                        help="also run the plugin inside TensorFlow (in a child process) and "
                             "report each op whose results differ from TensorFlow's CPU")
    parser.add_argument("--tf-iterations", type=int, default=200, metavar="N",
                        help="with --tensorflow: calls per op and mode (default 200)")
    parser.add_argument("--onnxruntime", action="store_true",
                        help="also run the plugin inside ONNX Runtime through pluggable's "
                             "execution provider (in a child process) and compare each op "
                             "the bridge claims with ONNX Runtime's CPU EP")
    parser.add_argument("--ort-runs", type=int, default=3, metavar="N",
                        help="with --onnxruntime: runs per model, fresh inputs each (default 3)")
    parser.add_argument("--with", dest="with_plugins", action="append", default=[],
                        metavar="OTHER.so",
                        help="load this plugin first (repeatable), e.g. the device plugin "
                             "whose device type a kernel-only plugin targets")


def run(args: argparse.Namespace) -> int:
    """Runs ``check`` with parsed arguments; returns the exit status."""
    for p in [args.path, *args.with_plugins]:
        if not os.path.exists(p):
            print(f"error: no such file: {p}", file=sys.stderr)
            return 2
    results = run_suite(args.path, args.timeout, tuple(args.with_plugins))
    failed = any(r.outcome == "fail" for r in results)
    tf = tf_certify.certify(args.path, iterations=args.tf_iterations) if args.tensorflow else None
    ox = ort_certify.certify(args.path, runs=args.ort_runs) if args.onnxruntime else None
    if args.json:
        out = {"plugin": os.path.realpath(args.path), "passed": not failed,
               "checks": [r.to_dict() for r in results]}
        if tf is not None:
            out["tensorflow"] = dataclasses.asdict(tf)
            out["tensorflow"]["certified"] = tf.certified
        if ox is not None:
            out["onnxruntime"] = dataclasses.asdict(ox)
            out["onnxruntime"]["certified"] = ox.certified
        print(json.dumps(out, indent=2))
    else:
        width = None if args.wide else WIDTH
        print(fit_lines(format_report(os.path.realpath(args.path), results, width), width))
        if tf is not None:
            print()
            print(fit_lines(tf_certify.format_report(tf), width))
        if ox is not None:
            print()
            print(fit_lines(ort_certify.format_report(ox), width))
    return 1 if (failed or (tf is not None and not tf.certified)
                 or (ox is not None and not ox.certified)) else 0


def main(argv: list[str] | None = None) -> int:
    """``python -m pluggable check PATH.so [--json] [--wide] [--timeout S] ...``."""
    parser = argparse.ArgumentParser(prog="python -m pluggable check", description=DESCRIPTION,
                                     epilog=EXAMPLES,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return run(parser.parse_args(sys.argv[1:] if argv is None else argv))
