"""Certify a plugin for ONNX Runtime: run it inside ONNX Runtime through
pluggable's execution provider, in a child process, and compare every op the
bridge claims with ONNX Runtime's CPU EP.

The bridge (``pluggable/onnx/libpluggable_ort_ep.so``) carries its own copy
of the core and refuses a process that has loaded ``pluggable``'s, so the
work happens in ``ort_plugin_check.py`` run as a script: it imports
onnxruntime, onnx and numpy, never ``pluggable``. This module starts it,
reads its JSON report and turns a crash of the child into a result.

``python -m pluggable check PLUGIN --onnxruntime`` prints the result; see
"Certify for ONNX Runtime" in docs/plugin-author-guide.md.
"""
from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import os
import re
import signal
import subprocess
import sys

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ort_plugin_check.py")

# The oldest onnxruntime the bridge works with: the OrtApi version it asks
# for (PG_ORT_MIN_API_VERSION in c_api/ort/pg_ort_abi.h) is its minor version.
MIN_ONNXRUNTIME = (1, 23)


def onnxruntime_version() -> str | None:
    """The installed onnxruntime's version, or None when none is installed."""
    for dist in ("onnxruntime", "onnxruntime-gpu"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _release(version: str) -> tuple[int, ...]:
    parts = []
    for p in version.split(".")[:2]:
        digits = "".join(ch for ch in p if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


@dataclasses.dataclass
class OrtReport:
    """What the ONNX Runtime child found.

    error: None when the plugin loaded into the bridge, has an OrtEpDevice
        and every model ran; otherwise "onnxruntime_missing",
        "onnxruntime_too_old", "bridge_missing", "register_failed",
        "load_failed", "no_devices", "crashed" or "timeout", with `detail`.
    results: one dict per (ONNX op, element type, variant): "op", "type",
        "variant", "claimed", "nodes_compiled", "kernel_runs" (plugin kernels
        run, per run), "reference" ("onnxruntime CPU", or "numpy" where ONNX
        Runtime's CPU EP has no kernel of that type), "status" ("ok",
        "mismatch": different results or an error, "not_run": claimed but no
        plugin kernel ran, "unclaimed": the bridge left it to the CPU EP,
        "detail" saying why, "no_reference", "not_onnx": ONNX's schema takes
        no such type, "no_recipe") and "detail".
    """

    plugin: str
    error: str | None = None
    detail: str = ""
    onnxruntime_version: str | None = None
    load: str = ""
    devices: list[dict] = dataclasses.field(default_factory=list)
    results: list[dict] = dataclasses.field(default_factory=list)
    seed: int | None = None
    seconds: float | None = None
    stderr_tail: str = ""

    def with_status(self, status: str) -> list[dict]:
        """The results whose status is `status`."""
        return [r for r in self.results if r["status"] == status]

    @property
    def failures(self) -> list[dict]:
        """Claimed nodes that gave other results than the reference, failed,
        or ran no plugin kernel."""
        return [r for r in self.results if r["status"] in ("mismatch", "not_run")]

    @property
    def certified(self) -> bool:
        """True when the plugin loaded into the bridge, has a device, the
        bridge claimed at least one op for it, every claimed op gave the
        reference's results with plugin kernels running, and every op of the
        bridge's table had a model."""
        return (self.error is None and bool(self.with_status("ok")) and not self.failures
                and not self.with_status("no_recipe"))


def _signal_name(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def _child_env(plugin: str) -> dict:
    env = dict(os.environ)
    env["PLUGGABLE_PLUGIN_PATH"] = plugin
    env.pop("PLUGGABLE_SKIP_PLUGINS", None)
    return env


def certify(plugin: str, runs: int = 3, ops: list[str] | None = None, timeout: float = 600.0,
            seed: int | None = None) -> OrtReport:
    """Runs `plugin` inside ONNX Runtime in a child process (see the module
    docstring) and returns its report. Never raises for a bad plugin: a
    crash or a hang of the child is reported in `OrtReport.error`."""
    path = os.path.realpath(plugin)
    report = OrtReport(plugin=path)
    version = onnxruntime_version()
    need = ".".join(map(str, MIN_ONNXRUNTIME))
    if version is None:
        report.error = "onnxruntime_missing"
        report.detail = (f"ONNX Runtime not installed: pip install 'onnxruntime>={need}' "
                         "to certify a plugin for ONNX Runtime")
        return report
    report.onnxruntime_version = version
    if _release(version) < MIN_ONNXRUNTIME:
        report.error = "onnxruntime_too_old"
        report.detail = (f"onnxruntime {version} is older than {need}, the oldest the pluggable "
                         f"execution provider supports: pip install 'onnxruntime>={need}'")
        return report
    from ..onnx.ort import ort_ep_library
    try:
        bridge = ort_ep_library()
    except FileNotFoundError as exc:
        report.error, report.detail = "bridge_missing", str(exc)
        return report
    cmd = [sys.executable, CHILD, path, "--bridge", bridge, "--min-version", need,
           "--runs", str(runs)]
    for op in ops or []:
        cmd += ["--op", op]
    if seed is not None:
        cmd += ["--seed", str(seed)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env=_child_env(path), cwd="/")
    except subprocess.TimeoutExpired as exc:
        report.error = "timeout"
        report.detail = f"ONNX Runtime with the plugin did not finish in {timeout:.0f} s"
        err = exc.stderr or b""
        report.stderr_tail = (err.decode(errors="replace") if isinstance(err, bytes)
                              else err)[-4000:]
        return report
    report.stderr_tail = proc.stderr[-4000:]
    lines = proc.stdout.strip().splitlines()
    data = None
    if lines:
        try:
            data = json.loads(lines[-1])
        except ValueError:
            data = None
    if proc.returncode != 0 or data is None:
        report.error = "crashed"
        how = (_signal_name(proc.returncode) if proc.returncode < 0
               else f"exit status {proc.returncode}")
        stages = [ln[len("STAGE "):] for ln in lines if ln.startswith("STAGE ")]
        report.detail = (f"ONNX Runtime with the plugin died ({how}) "
                         + (f"while {stages[-1]}" if stages and stages[-1].startswith("reg")
                            else f"in {stages[-1]}" if stages else "before reporting"))
        return report
    report.error = data.get("error")
    report.detail = data.get("detail", "")
    report.onnxruntime_version = data.get("onnxruntime", version)
    report.load = data.get("load", "")
    report.devices = data.get("devices", [])
    report.results = data.get("results", [])
    report.seed = data.get("seed")
    report.seconds = data.get("seconds")
    return report


def from_dict(data: dict) -> OrtReport:
    """An OrtReport from `dataclasses.asdict` of one (the JSON of
    ``python -m pluggable check --onnxruntime --json``)."""
    fields = {f.name for f in dataclasses.fields(OrtReport)}
    return OrtReport(**{k: v for k, v in data.items() if k in fields})


def _name(r: dict) -> str:
    return f"{r['op']} [{r['type']}{', ' + r['variant'] if r.get('variant') else ''}]"


def _reason(detail: str) -> str:
    """The bridge's reason without the node prefix and the dtype number
    (the line groups the element types)."""
    detail = re.sub(r"^pluggable: node '[^']*' \([^)]*\): ", "", detail)
    return re.sub(r" of dtype \d+", "", detail)


def _grouped(results: list[dict], key) -> list[tuple[tuple, list[dict]]]:
    groups: dict[tuple, list[dict]] = {}
    for r in results:
        groups.setdefault(key(r), []).append(r)
    return list(groups.items())


def format_report(report: OrtReport) -> str:
    """A plain-text summary: the ops claimed (one line per op and model, its
    element types grouped), those that fail, those left to the CPU EP and
    why, then counts."""
    lines = [f"ONNX Runtime {report.onnxruntime_version or '?'}: {report.plugin}"]
    if report.error:
        lines.append(f"FAILED ({report.error}): {report.detail}")
        if report.error == "crashed" and report.stderr_tail:
            lines.append("--- end of ONNX Runtime's output ---")
            lines.append(report.stderr_tail.rstrip()[-2000:])
        return "\n".join(lines)
    devs = ", ".join(f"{d['ep']} {d['device']}" for d in report.devices)
    lines.append(f"devices: {devs}; seed {report.seed}")
    for (op, variant), rs in _grouped(report.with_status("ok"),
                                      lambda r: (r["op"], r["variant"])):
        runs = sorted({n for r in rs for n in r.get("kernel_runs", [])})
        numpy_ = [r["type"] for r in rs if r.get("reference") == "numpy"]
        ref = "ORT CPU" + (f" (numpy for {', '.join(numpy_)})" if numpy_ else "")
        lines.append(f"CLAIMED  {op} ({variant}) {', '.join(r['type'] for r in rs)}: matches "
                     f"{ref}; plugin kernels a run: {'/'.join(map(str, runs))}")
    for r in report.with_status("mismatch"):
        lines.append(f"DIFFERS  {_name(r)}: {r['detail']}")
    for r in report.with_status("not_run"):
        lines.append(f"NOT RUN  {_name(r)}: {r['detail']}")
    for (op, why), rs in _grouped(report.with_status("unclaimed"),
                                  lambda r: (r["op"], _reason(r["detail"]))):
        types = ", ".join(dict.fromkeys(r["type"] for r in rs))
        lines.append(f"CPU EP   {op} {types}: {why}")
    for r in report.with_status("no_reference"):
        lines.append(f"NO REFERENCE {_name(r)}: {r['detail']} (not compared)")
    for r in report.with_status("no_recipe"):
        lines.append(f"UNCHECKED {_name(r)}: {r['detail']}")
    ok, claimed = report.with_status("ok"), [r for r in report.results if r.get("claimed")]
    lines.append(f"{len(ok)} of {len(claimed)} claimed (op, type) models match, "
                 f"{len(report.failures)} fail; {len(report.with_status('unclaimed'))} "
                 f"left to ONNX Runtime's CPU EP")
    if not ok:
        lines.append("the bridge claimed no op for this plugin's kernels")
    lines.append("CERTIFIED for ONNX Runtime" if report.certified
                 else "NOT certified for ONNX Runtime")
    return "\n".join(lines)
