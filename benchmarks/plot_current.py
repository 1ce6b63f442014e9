"""The current benchmark figures: one data file, the tables of
docs/benchmarks.md and the plot docs/images/bench-current.png.

benchmarks/current.json holds, per machine kind, the runs (date, software,
command) and one row per workload: pluggable's figure, the peer's figure
(either may be null where the run recorded only the ratio), the ratio as the
run recorded it, which way the ratio reads ("pluggable/peer" or
"peer/pluggable") and which way is better ("lower" or "higher"). Every figure
is copied from a recorded run; nothing here measures anything.

    python3 benchmarks/plot_current.py           # rewrite the tables and the PNG
    python3 benchmarks/plot_current.py --check   # exit 1 if the tables drifted

The tables sit in docs/benchmarks.md between the lines
``<!-- current-figures: ID -->`` and ``<!-- /current-figures: ID -->``;
anything between them is replaced when the tables are written.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
DATA = ROOT / "benchmarks" / "current.json"
DOC = ROOT / "docs" / "benchmarks.md"
PNG = ROOT / "docs" / "images" / "bench-current.png"

ROW_KEYS = ("workload", "unit", "pluggable", "peer_name", "peer", "ratio",
            "ratio_of", "better", "run")
RUN_KEYS = ("date", "software", "command")
NONE = "—"


class DataError(ValueError):
    """benchmarks/current.json does not have the expected shape."""


def load(path: pathlib.Path = DATA) -> dict:
    """The data file, checked: every row has its keys, names a run of its
    kind, and gives a ratio that reads as a positive number (or null)."""
    data = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
    kinds = data.get("kinds")
    if not isinstance(kinds, list) or not kinds:
        raise DataError(f"{path}: 'kinds' must be a non-empty list")
    seen = set()
    for kind in kinds:
        kid = kind.get("id")
        if not kid or kid in seen:
            raise DataError(f"{path}: kind id {kid!r} missing or repeated")
        seen.add(kid)
        for key in ("title", "hardware", "runs", "rows"):
            if key not in kind:
                raise DataError(f"{path}: kind {kid!r} has no {key!r}")
        for name, run in kind["runs"].items():
            missing = [k for k in RUN_KEYS if not run.get(k)]
            if missing:
                raise DataError(f"{path}: run {name!r} of {kid!r} lacks {missing}")
        for row in kind["rows"]:
            where = f"{path}: kind {kid!r}, row {row.get('workload')!r}"
            missing = [k for k in ROW_KEYS if k not in row]
            if missing:
                raise DataError(f"{where}: missing {missing}")
            if row["run"] not in kind["runs"]:
                raise DataError(f"{where}: run {row['run']!r} is not in the kind's runs")
            if row["better"] not in ("lower", "higher"):
                raise DataError(f"{where}: 'better' must be 'lower' or 'higher'")
            if row["ratio"] is not None:
                if row["ratio_of"] not in ("pluggable/peer", "peer/pluggable"):
                    raise DataError(f"{where}: 'ratio_of' must be 'pluggable/peer' "
                                    "or 'peer/pluggable'")
                try:
                    value = float(row["ratio"])
                except ValueError:
                    raise DataError(f"{where}: ratio {row['ratio']!r} is not a number") from None
                if not value > 0 or math.isinf(value):
                    raise DataError(f"{where}: ratio {row['ratio']!r} must be positive")
    return data


def speed(row: dict) -> float | None:
    """Pluggable's speed relative to the peer (above 1: pluggable is faster),
    from the recorded ratio; None where no ratio was recorded. A ratio whose
    lower value is better (a time of pluggable over the peer's) is read the
    other way up; one whose higher value is better (a rate of pluggable over
    the peer's, or the peer's time over pluggable's) is that speed."""
    if row["ratio"] is None:
        return None
    value = float(row["ratio"])
    return 1.0 / value if row["better"] == "lower" else value


def _cell(text) -> str:
    return NONE if text is None else str(text).replace("|", "\\|")


def reads(row: dict) -> str:
    if row["ratio"] is None:
        return "not recorded"
    return f"{row['ratio_of'].replace('/', ' / ')}, {row['better']} is better"


def table(kind: dict) -> str:
    """The markdown of one kind: the table, then its runs."""
    lines = ["| workload | unit | pluggable | peer | peer figure | ratio | ratio reads | run |",
             "|---|---|---:|---|---:|---:|---|---|"]
    for row in kind["rows"]:
        ratio = NONE if row["ratio"] is None else f"{row['ratio']}x"
        run = f"{row['run']} ({kind['runs'][row['run']]['date'].split()[0]})"
        lines.append("| " + " | ".join([
            _cell(row["workload"]), _cell(row["unit"]), _cell(row["pluggable"]),
            _cell(row["peer_name"]), _cell(row["peer"]), ratio, reads(row),
            _cell(run)]) + " |")
    lines.append("")
    lines.append(f"Hardware: {kind['hardware']}. Runs:")
    lines.append("")
    for name, run in kind["runs"].items():
        lines.append(f"* **{name}**, {run['date']}: `{run['command']}`; "
                     f"{run['software']}.")
    return "\n".join(lines)


def _markers(kid: str) -> tuple[str, str]:
    return f"<!-- current-figures: {kid} -->", f"<!-- /current-figures: {kid} -->"


def render(doc: str, data: dict) -> str:
    """``doc`` with every kind's block replaced by its table; raises
    DataError if a kind has no block (or its markers are out of order)."""
    for kind in data["kinds"]:
        start, end = _markers(kind["id"])
        i, j = doc.find(start), doc.find(end)
        if i < 0 or j < i:
            raise DataError(f"docs/benchmarks.md has no block {start} ... {end} "
                            f"for the kind {kind['id']!r}: add the two lines "
                            "where its table goes")
        doc = doc[:i + len(start)] + "\n" + table(kind) + "\n" + doc[j:]
    return doc


def check(doc_path: pathlib.Path = DOC, data_path: pathlib.Path = DATA) -> list[str]:
    """What differs between the doc's tables and the data file (empty: none)."""
    data = load(data_path)
    doc = pathlib.Path(doc_path).read_text(encoding="utf-8")
    want = render(doc, data)
    problems = []
    if want != doc:
        have_lines, want_lines = doc.splitlines(), want.splitlines()
        for n, (a, b) in enumerate(zip(have_lines, want_lines), 1):
            if a != b:
                problems.append(f"{doc_path}:{n}: has {a!r}, the data file gives {b!r}")
                break
        else:
            problems.append(f"{doc_path}: the tables have {len(have_lines)} lines "
                            f"where the data file gives {len(want_lines)}")
    return problems


def plot(data: dict, path: pathlib.Path = PNG) -> None:
    """One horizontal bar chart per kind: pluggable's speed relative to its
    peer, per workload, on a log scale (rows without a ratio are left out)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    panels = []
    for kind in data["kinds"]:
        rows = [(r, speed(r)) for r in kind["rows"] if speed(r) is not None]
        if rows:
            panels.append((kind, rows))
    heights = [len(rows) + 2 for _, rows in panels]
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 0.17 * sum(heights) + 1.5),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    faster, slower = "#3a7", "#c55"
    for ax, (kind, rows) in zip(axes[:, 0], panels):
        ypos = list(range(len(rows)))[::-1]
        values = [v for _, v in rows]
        ax.barh(ypos, values, color=[faster if v >= 1 else slower for v in values],
                height=0.7)
        labels = [f"{r['workload']} (vs {r['peer_name']}; run {r['run']})"
                  for r, _ in rows]
        ax.set_yticks(ypos, labels, fontsize=5.5)
        ax.set_xscale("log")
        ax.axvline(1.0, color="k", linewidth=0.8)
        top = max(32.0, 2 * max(values))
        ax.set_xlim(0.2, top)
        ticks = [t for t in (0.25, 0.5, 1, 2, 4, 8, 16, 32, 64) if t <= top]
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        ax.minorticks_off()
        for y, v in zip(ypos, values):
            ax.text(v, y, f" {v:.2f}", va="center", fontsize=5)
        ax.set_title(kind["title"].replace("`", ""), fontsize=8)
        ax.tick_params(axis="x", labelsize=6)
        ax.set_xlabel("pluggable's speed relative to the peer "
                      "(log scale; above 1: pluggable is faster)", fontsize=6)
    axes[0, 0].legend(handles=[Patch(color=faster, label="pluggable faster or level"),
                               Patch(color=slower, label="pluggable slower"),
                               plt.Line2D([], [], color="k", linewidth=0.8,
                                          label="parity")],
                      fontsize=6, loc="lower right")
    fig.suptitle("pluggable against its peers: the latest recorded figure of each "
                 "workload (benchmarks/current.json)", fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 0.985))
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80)
    plt.close(fig)
    # A palette of 64 colours keeps the file small (the chart uses a handful).
    from PIL import Image
    buf.seek(0)
    Image.open(buf).convert("RGB").quantize(colors=64).save(path, optimize=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="only compare the tables of docs/benchmarks.md with the data")
    ap.add_argument("--data", type=pathlib.Path, default=DATA)
    ap.add_argument("--doc", type=pathlib.Path, default=DOC)
    ap.add_argument("--png", type=pathlib.Path, default=PNG)
    args = ap.parse_args(argv)
    try:
        if args.check:
            problems = check(args.doc, args.data)
            for p in problems:
                print(p, file=sys.stderr)
            if problems:
                print("the tables drifted from the data: run "
                      "`python3 benchmarks/plot_current.py` to rewrite them",
                      file=sys.stderr)
                return 1
            print(f"{args.doc}: tables match {args.data}")
            return 0
        data = load(args.data)
        doc = args.doc.read_text(encoding="utf-8")
        args.doc.write_text(render(doc, data), encoding="utf-8")
        plot(data, args.png)
        print(f"wrote the tables of {args.doc} and {args.png}")
        return 0
    except (DataError, OSError, json.JSONDecodeError) as exc:
        print(f"plot_current: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
