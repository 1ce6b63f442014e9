"""Run the code cells of TensorFlow's guide notebooks under real TensorFlow and
under ``pluggable`` (``import pluggable as tf``) and compare what they print.

    python3 tests/guide_harness.py [--device CPU|MY_DEVICE] [--notebook NAME ...]
                                   [--report FILE] [--timeout SECONDS]

The corpus is ``tests/guide_cells/<notebook>.json`` (made by
``tools/guide_notebooks/fetch_cells.py``). For each notebook and framework one
child interpreter runs the cells in order in one namespace, as a notebook does:
each cell's stdout is captured, and when its last statement is an expression
whose value is not None, that value's ``repr`` is appended (IPython's display).

Rules (docs/user-guide.md, "TensorFlow's guide notebooks"):

* The pluggable run rewrites only imports: ``import tensorflow`` /
  ``from tensorflow`` become ``import pluggable`` / ``from pluggable`` (the
  alias stays, so ``import tensorflow as tf`` is ``import pluggable as tf``).
* Device: before the first cell the child enters ``tf.device("<DEVICE>:0")``
  at the top level, so every cell (and every function traced in it) runs in
  that scope. TensorFlow always runs on its CPU, in a ``tf.device("CPU:0")``
  scope entered the same way: it is the reference. (Entering a scope starts
  the runtime in both, so a cell that then configures logical devices fails
  under both, and is "tf_fails".)
* A cell that mentions ``keras`` is a "keras" cell, outside the target.
  A cell that raises under TensorFlow is "tf_fails", outside the target.
* A cell matches when it runs under both and (a) the numbers printed agree
  (same count, ``rtol=1e-4, atol=1e-6``, NaN equals NaN) and (b) TensorFlow's
  repr markers agree (``tf.Tensor(``, ``<tf.Variable``, ``shape=...``,
  ``dtype=...``, ``numpy=``). Hex addresses (``0x7f..``) are ignored.
* Nondeterministic cells compare structure only: a cell that calls a random
  or timing API (``tf.random``, ``np.random``, ``Generator``, initialisers,
  ``shuffle``, ``dropout``, ``time``/``timeit``), or that reads a name assigned
  by such a cell (followed through assignments across cells), compares the
  count of numbers and the text with every number replaced by ``#``, not the
  values: TensorFlow's values there come from its own RNG stream or clock.
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import io
import json
import math
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import time
import traceback

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "guide_cells"
CELL_TIMEOUT = 30.0
RTOL, ATOL = 1e-4, 1e-6

KERAS = re.compile(r"\bkeras\b")
NONDETERMINISTIC = re.compile(
    r"\brandom\b|\bGenerator\b|initializers?\b|\bshuffle\b|\bdropout\b|"
    r"\btimeit\b|\btime\.(time|perf_counter|monotonic)\b|\bdatetime\b|\buuid\b")
IMPORT = re.compile(r"^(\s*)(import|from)(\s+)tensorflow\b", re.M)
HEX = re.compile(r"\b0x[0-9a-fA-F]+\b")
NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?(?![\w])|"
                    r"(?<![\w])-?(?:nan|inf)\b")
ANNOTATIONS = re.compile(r"shape=\([^)]*\)|dtype=[\w.]+|device=[\w:/]+")
MARKERS = re.compile(r"tf\.Tensor\(|<tf\.Variable|tf\.RaggedTensor|shape=\([^)]*\)|"
                     r"dtype=[\w.]+|numpy=")


# ---------------------------------------------------------------- the child


def _run_child(corpus: str, framework: str, device: str, results: str, timeout: float,
               skip: set[int]) -> None:
    """Run one notebook's cells in this interpreter; one JSON line per cell.

    Each cell is written to a file first and compiled under that name, so that
    ``inspect.getsource`` (AutoGraph) finds its source, as in a notebook; a
    ``{"start": index}`` line before each cell lets the parent see a hang."""
    os.environ.setdefault("MPLBACKEND", "Agg")
    entry = json.loads(pathlib.Path(corpus).read_text(encoding="utf-8"))
    namespace: dict = {"__name__": "__main__"}

    class CellTimeout(Exception):
        pass

    def on_alarm(signum, frame):
        raise CellTimeout(f"the cell ran past {timeout:g} s")

    signal.signal(signal.SIGALRM, on_alarm)
    with open(results, "w", encoding="utf-8") as out:
        # the device scope stays entered for the whole notebook, under both
        # frameworks: entering it starts the runtime, after which neither lets
        # a cell change its logical devices
        module = "pluggable" if framework == "pluggable" else "tensorflow"
        exec(compile(f"import {module} as _guide_tf\n"
                     f"_guide_scope = _guide_tf.device({device + ':0'!r})\n"
                     f"_guide_scope.__enter__()\n", "<harness>", "exec"), namespace)
        for cell in entry["cells"]:
            if cell["index"] in skip:
                continue
            out.write(json.dumps({"start": cell["index"]}) + "\n")
            out.flush()
            code = cell["code"]
            if framework == "pluggable":
                code = IMPORT.sub(r"\1\2\3pluggable", code)
            buf = io.StringIO()
            record = {"index": cell["index"], "ok": True, "output": "", "error": None}
            start = time.perf_counter()
            signal.setitimer(signal.ITIMER_REAL, timeout)
            try:
                source = pathlib.Path(f"cell_{cell['index']}.py").resolve()
                source.write_text(code + "\n", encoding="utf-8")
                with contextlib.redirect_stdout(buf):
                    tree = ast.parse(code)
                    last = None
                    if tree.body and isinstance(tree.body[-1], ast.Expr):
                        last = ast.Expression(tree.body.pop().value)
                    exec(compile(tree, str(source), "exec"), namespace)
                    if last is not None:
                        value = eval(compile(last, str(source), "eval"), namespace)
                        if value is not None:
                            print(repr(value))
            except BaseException as exc:  # noqa: BLE001 - a cell may raise anything
                if isinstance(exc, KeyboardInterrupt):
                    raise
                lines = str(exc).strip().splitlines()
                record["ok"] = False
                record["error"] = f"{type(exc).__name__}: {lines[0] if lines else ''}"[:400]
                record["traceback"] = "".join(traceback.format_exception(exc)[-3:])[-1500:]
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            record["output"] = buf.getvalue()[-20000:]
            record["seconds"] = round(time.perf_counter() - start, 3)
            out.write(json.dumps(record) + "\n")
            out.flush()
    sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown (threads of either framework)


# ---------------------------------------------------------------- the parent


def run_notebook(name: str, framework: str, device: str, timeout: float = CELL_TIMEOUT,
                 corpus: pathlib.Path = CORPUS) -> dict[int, dict]:
    """Run one notebook under one framework in a child; index -> cell record."""
    entry = json.loads((corpus / f"{name}.json").read_text(encoding="utf-8"))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="",
               MPLBACKEND="Agg", PYTHONHASHSEED="0")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    records: dict[int, dict] = {}
    skip: set[int] = set()
    died = None
    for _attempt in range(MAX_RESTARTS + 1):
        hung, died = _run_child_once(entry, corpus / f"{name}.json", framework, device,
                                     timeout, env, skip, records)
        if hung is None:
            break
        # a cell the alarm could not stop (blocked in native code) or that
        # killed the interpreter: record it, then replay the notebook from the
        # start without it
        records.setdefault(hung, {"index": hung, "ok": False, "output": "",
                                  "error": f"CellTimeout: the cell ran past {timeout:g} s "
                                           "and did not stop; the notebook was replayed "
                                           "without it"})
        skip.add(hung)
    for cell in entry["cells"]:
        if cell["index"] not in records:
            records[cell["index"]] = {"index": cell["index"], "ok": False, "output": "",
                                      "error": died or "ChildDied: no result"}
            died = died or "ChildDied: no result"
    return records


MAX_RESTARTS = 3


def _complete_lines(path: pathlib.Path) -> list[str]:
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    return text[:text.rfind("\n") + 1].splitlines()


def _run_child_once(entry: dict, corpus_file: pathlib.Path, framework: str, device: str,
                    timeout: float, env: dict, skip: set[int],
                    records: dict[int, dict]) -> tuple[int | None, str | None]:
    """One child over the notebook; fills ``records``. Returns (the index of a
    cell that hung and was killed, or None; why the child died, or None)."""
    with tempfile.TemporaryDirectory(prefix="guide-") as tmp:
        results = pathlib.Path(tmp) / "cells.jsonl"
        cmd = [sys.executable, str(pathlib.Path(__file__).resolve()), "--child",
               str(corpus_file), framework, device, str(results), str(timeout),
               ",".join(map(str, sorted(skip)))]
        with open(pathlib.Path(tmp) / "stderr", "w+", encoding="utf-8") as err:
            proc = subprocess.Popen(cmd, cwd=tmp, env=env, stdout=subprocess.DEVNULL,
                                    stderr=err)
            current, since, seen = None, time.monotonic(), 0
            hung = None
            while proc.poll() is None:
                time.sleep(0.2)
                lines = _complete_lines(results)
                for line in lines[seen:]:
                    rec = json.loads(line)
                    if "start" in rec:
                        current, since = rec["start"], time.monotonic()
                    else:
                        records[rec["index"]] = rec
                        current = None
                seen = len(lines)
                if current is not None and time.monotonic() - since > timeout + 15:
                    proc.kill()
                    proc.wait()
                    hung = current
            if results.exists():
                for line in _complete_lines(results)[seen:]:
                    rec = json.loads(line)
                    if "start" not in rec:
                        records[rec["index"]] = rec
            if hung is not None:
                return hung, None
            died = None
            if proc.returncode != 0:
                err.seek(0)
                tail = err.read().strip().splitlines()
                died = f"ChildDied: exit status {proc.returncode}: {tail[-1] if tail else ''}"
                if current is not None and current not in records:
                    # the cell that was running took the interpreter down: it is
                    # recorded as such and the notebook replays without it
                    records[current] = {"index": current, "ok": False, "output": "",
                                        "error": f"{died} (in this cell; the notebook was "
                                                 "replayed without it)"}
                    return current, None
            return None, died


def numbers(text: str) -> list[float]:
    return [float(m) for m in NUMBER.findall(HEX.sub(" ", text))]


def skeleton(text: str) -> str:
    text = NUMBER.sub("#", HEX.sub(" ", text))
    return re.sub(r"\s+", "", text)


def numbers_agree(a: list[float], b: list[float]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if math.isnan(x) or math.isnan(y):
            if not (math.isnan(x) and math.isnan(y)):
                return False
        elif math.isinf(x) or math.isinf(y):
            if x != y:
                return False
        elif abs(x - y) > ATOL + RTOL * abs(y):
            return False
    return True


def nondeterministic_cells(cells: list[dict]) -> set[int]:
    """Cells whose TensorFlow output depends on its RNG stream or the clock."""
    tainted_names: set[str] = set()
    result = set()
    for cell in cells:
        code = cell["code"]
        try:
            tree = ast.parse(code)
        except SyntaxError:
            continue
        loads, stores = set(), set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                (stores if isinstance(node.ctx, (ast.Store, ast.Del)) else loads).add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                stores.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                base = node.value
                while isinstance(base, ast.Attribute):
                    base = base.value
                if isinstance(base, ast.Name):
                    stores.add(base.id)
        if NONDETERMINISTIC.search(code) or loads & tainted_names:
            result.add(cell["index"])
            tainted_names |= stores
    return result


def compare(tf_out: str, pg_out: str, structural: bool) -> str | None:
    """None when the outputs agree, else why not."""
    a, b = numbers(tf_out), numbers(pg_out)
    if structural:
        if len(a) != len(b) or skeleton(tf_out) != skeleton(pg_out):
            return "structure differs"
        return None
    if MARKERS.findall(tf_out) == MARKERS.findall(pg_out) and numbers_agree(a, b):
        return None
    loose_a, loose_b = (numbers(ANNOTATIONS.sub(" ", t)) for t in (tf_out, pg_out))
    if numbers_agree(loose_a, loose_b):
        return "repr differs (values agree)"
    return "numbers differ" if len(loose_a) == len(loose_b) else "number count differs"


_MISSING_ATTR = re.compile(r"module '([\w.]+)' has no attribute '(\w+)'")
_MISSING_MOD = re.compile(r"No module named '([\w.]+)'")


def categorise(error: str, earlier_failed: bool) -> str:
    """A short cause for a failing cell: a missing API name where that is it."""
    m = _MISSING_ATTR.search(error)
    if m:
        module = re.sub(r"^pluggable\b", "tf", m.group(1))
        return f"missing API: {module}.{m.group(2)}"
    m = _MISSING_MOD.search(error)
    if m and m.group(1).startswith("pluggable"):
        return "missing module: " + re.sub(r"^pluggable\b", "tf", m.group(1))
    kind = error.split(":", 1)[0]
    if kind == "NameError" and earlier_failed:
        return "NameError (a name an earlier failing cell defines)"
    if kind == "ChildDied":
        return error
    msg = error.split(":", 1)[1].strip() if ":" in error else ""
    msg = re.sub(r"'[^']*'|\"[^\"]*\"|\b\d+\b", "_", msg)[:80]
    return f"{kind}: {msg}" if msg else kind


def evaluate(name: str, device: str, timeout: float = CELL_TIMEOUT,
             corpus: pathlib.Path = CORPUS, tf_run: dict[int, dict] | None = None) -> dict:
    """Both runs of one notebook and the verdict for each cell (``tf_run``: a
    TensorFlow run of it made before, reused; TensorFlow always runs on CPU)."""
    entry = json.loads((corpus / f"{name}.json").read_text(encoding="utf-8"))
    if tf_run is None:
        tf_run = run_notebook(name, "tensorflow", "CPU", timeout, corpus)
    pg_run = run_notebook(name, "pluggable", device, timeout, corpus)
    nondet = nondeterministic_cells(entry["cells"])
    cells, earlier_failed = [], False
    for cell in entry["cells"]:
        i = cell["index"]
        t, p = tf_run[i], pg_run[i]
        verdict = {"index": i, "nondeterministic": i in nondet}
        if KERAS.search(cell["code"]):
            verdict["status"] = "keras"
        elif not t["ok"]:
            verdict["status"] = "tf_fails"
            verdict["error"] = t["error"]
        elif not p["ok"]:
            verdict["status"] = "error"
            verdict["error"] = p["error"]
            verdict["cause"] = categorise(p["error"], earlier_failed)
            earlier_failed = True
        else:
            why = compare(t["output"], p["output"], i in nondet)
            verdict["status"] = "matched" if why is None else "mismatch"
            verdict["silent"] = not t["output"].strip()
            if why is not None:
                verdict["cause"] = why
                verdict["tf_output"] = t["output"][:600]
                verdict["pg_output"] = p["output"][:600]
        if not p["ok"] and verdict["status"] != "error":
            earlier_failed = True
        cells.append(verdict)
    counts = {k: sum(c["status"] == k for c in cells)
              for k in ("keras", "tf_fails", "matched", "mismatch", "error")}
    counts["matched_silent"] = sum(c["status"] == "matched" and c["silent"] for c in cells)
    counts["values_agree"] = counts["matched"] + sum(
        c.get("cause") == "repr differs (values agree)" for c in cells)
    counts["total"] = len(cells)
    counts["target"] = counts["total"] - counts["keras"] - counts["tf_fails"]
    return {"notebook": name, "device": device, "counts": counts, "cells": cells,
            "tf_run": tf_run}


def notebooks(corpus: pathlib.Path = CORPUS) -> list[str]:
    return sorted(p.stem for p in corpus.glob("*.json"))


def _pct(part: int, whole: int) -> float:
    return 100.0 * part / whole if whole else 100.0


def _row(name: str, c: dict) -> str:
    return (f"{name:30} {c['total']:5} {c['keras']:5} {c['tf_fails']:8} {c['target']:6} "
            f"{c['matched']:7} {_pct(c['matched'], c['target']):6.1f} "
            f"{c['values_agree']:6} {_pct(c['values_agree'], c['target']):6.1f}")


def summary(results: list[dict]) -> str:
    head = f"{'notebook':30} {'cells':>5} {'keras':>5} {'tf_fails':>8} {'target':>6} " \
           f"{'matched':>7} {'%':>6} {'values':>6} {'%':>6}"
    lines = [head, "-" * len(head)]
    total = {k: 0 for k in ("total", "keras", "tf_fails", "target", "matched", "values_agree")}
    for r in results:
        c = r["counts"]
        for k in total:
            total[k] += c[k]
        lines.append(_row(r["notebook"], c))
    lines.append("-" * len(head))
    lines.append(_row("all", total))
    return "\n".join(lines)


def causes(results: list[dict]) -> list[tuple[str, int]]:
    tally: dict[str, int] = {}
    for r in results:
        for c in r["cells"]:
            if c["status"] in ("error", "mismatch"):
                key = c.get("cause", c["status"])
                if c["status"] == "mismatch":
                    key = "output differs: " + key
                tally[key] = tally.get(key, 0) + 1
    return sorted(tally.items(), key=lambda kv: (-kv[1], kv[0]))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        _run_child(argv[1], argv[2], argv[3], argv[4], float(argv[5]),
                   {int(i) for i in argv[6].split(",") if i})
        return 0
    parser = argparse.ArgumentParser(description="Run TensorFlow's guide notebooks under "
                                     "TensorFlow and pluggable and compare their output.")
    parser.add_argument("--device", action="append", choices=["CPU", "MY_DEVICE"],
                        help="the device pluggable runs on (repeatable; default CPU)")
    parser.add_argument("--notebook", action="append", help="a notebook name (repeatable)")
    parser.add_argument("--report", type=pathlib.Path, help="write the full JSON report here")
    parser.add_argument("--timeout", type=float, default=CELL_TIMEOUT, help="seconds per cell")
    args = parser.parse_args(argv)
    names = args.notebook or notebooks()
    unknown = sorted(set(names) - set(notebooks()))
    if unknown:
        parser.error(f"no corpus for {unknown}; known: {notebooks()}")
    report = run_all(names, args.device or ["CPU"], args.timeout)
    for device, results in report.items():
        print(f"\n== pluggable on {device} (TensorFlow {tf_version()} on CPU is the reference)")
        print(summary(results))
        print("failure causes (cells):")
        for cause, n in causes(results)[:25]:
            print(f"  {n:3}  {cause}")
    if args.report:
        args.report.write_text(json.dumps(
            {"tensorflow": tf_version(), "devices": {
                d: {"notebooks": [{k: v for k, v in r.items() if k != "tf_run"} for r in rs],
                    "causes": causes(rs)} for d, rs in report.items()}}, indent=1) + "\n",
            encoding="utf-8")
    return 0


def run_all(names: list[str], devices: list[str], timeout: float = CELL_TIMEOUT,
            corpus: pathlib.Path = CORPUS) -> dict[str, list[dict]]:
    """device -> one evaluate() result per notebook; TensorFlow runs once per notebook."""
    report: dict[str, list[dict]] = {d: [] for d in devices}
    for name in names:
        tf_run = None
        for device in devices:
            result = evaluate(name, device, timeout, corpus, tf_run)
            tf_run = result["tf_run"]
            report[device].append(result)
    return report


def tf_version() -> str:
    from importlib import metadata
    for dist in ("tensorflow-cpu", "tensorflow"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return "absent"


if __name__ == "__main__":
    sys.exit(main())
