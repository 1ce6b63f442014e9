"""docs/benchmarks.md's tables are benchmarks/current.json's figures, and
benchmarks/plot_current.py draws and checks them (so the two cannot drift)."""

import importlib.util
import json
import math
import pathlib
import random
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "plot_current.py"
DATA = ROOT / "benchmarks" / "current.json"
DOC = ROOT / "docs" / "benchmarks.md"
PNG = ROOT / "docs" / "images" / "bench-current.png"


@pytest.fixture(scope="module")
def pc():
    spec = importlib.util.spec_from_file_location("plot_current", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def raw_data():
    return json.loads(DATA.read_text(encoding="utf-8"))


def doc_rows(doc: str, kid: str) -> list[list[str]]:
    """The body rows of one kind's table, parsed from the markdown alone."""
    block = doc.split(f"<!-- current-figures: {kid} -->", 1)[1]
    block = block.split(f"<!-- /current-figures: {kid} -->", 1)[0]
    rows = [line for line in block.splitlines() if line.startswith("| ")]
    return [[c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]] for line in rows[1:]]


def test_doc_tables_match_the_data_file(pc):
    assert pc.check() == []


def test_every_table_cell_is_the_data_files_figure():
    doc = DOC.read_text(encoding="utf-8")
    data = raw_data()
    assert len(data["kinds"]) >= 3
    for kind in data["kinds"]:
        rows = doc_rows(doc, kind["id"])
        assert len(rows) == len(kind["rows"]), kind["id"]
        for cells, row in zip(rows, kind["rows"]):
            dash = lambda v: "—" if v is None else v  # noqa: E731
            assert cells[0] == row["workload"]
            assert cells[1] == row["unit"]
            assert cells[2] == dash(row["pluggable"])
            assert cells[3] == row["peer_name"]
            assert cells[4] == dash(row["peer"])
            assert cells[5] == ("—" if row["ratio"] is None else row["ratio"] + "x")
            if row["ratio"] is not None:
                assert row["better"] + " is better" in cells[6]
            date = kind["runs"][row["run"]]["date"].split()[0]
            assert cells[7] == f"{row['run']} ({date})"
            assert re.fullmatch(r"\d{4}-\d\d-\d\d", date)


def test_every_run_is_listed_with_its_date_software_and_command():
    doc = DOC.read_text(encoding="utf-8")
    for kind in raw_data()["kinds"]:
        for name, run in kind["runs"].items():
            line = f"* **{name}**, {run['date']}: `{run['command']}`; {run['software']}."
            assert line in doc


def test_recorded_ratios_agree_with_their_figures():
    # Ratios are medians of per-round ratios or of rounded figures: within 5%.
    checked = 0
    for kind in raw_data()["kinds"]:
        for row in kind["rows"]:
            if None in (row["pluggable"], row["peer"], row["ratio"]):
                continue
            p, q = float(row["pluggable"]), float(row["peer"])
            got = p / q if row["ratio_of"] == "pluggable/peer" else q / p
            assert math.isclose(got, float(row["ratio"]), rel_tol=0.05), row
            checked += 1
    assert checked >= 30


def test_check_reports_a_changed_figure(pc, tmp_path):
    doc = DOC.read_text(encoding="utf-8")
    rng = random.Random()
    kind = rng.choice(raw_data()["kinds"])
    names = [r["workload"] for r in kind["rows"]]
    row = rng.choice([r for r in kind["rows"]
                      if r["ratio"] is not None and names.count(r["workload"]) == 1])
    start = doc.index(f"<!-- current-figures: {kind['id']} -->")
    line_start = doc.index(f"| {row['workload']} |", start)
    line_end = doc.index("\n", line_start)
    line = doc[line_start:line_end]
    changed = line.replace(f"| {row['ratio']}x |", f"| {float(row['ratio']) * 1.5:.3f}x |")
    assert changed != line
    bad = tmp_path / "benchmarks.md"
    bad.write_text(doc[:line_start] + changed + doc[line_end:], encoding="utf-8")
    problems = pc.check(bad, DATA)
    assert len(problems) == 1
    lineno = doc[:line_start].count("\n") + 1
    assert f"{bad}:{lineno}:" in problems[0] and row["workload"] in problems[0]
    assert pc.main(["--check", "--doc", str(bad)]) == 1
    # Rewriting the tables puts the figure back.
    assert pc.main(["--doc", str(bad), "--png", str(tmp_path / "p.png")]) == 0
    assert bad.read_text(encoding="utf-8") == doc


def test_a_doc_without_a_kinds_block_fails_with_what_to_do(pc, tmp_path, capsys):
    doc = DOC.read_text(encoding="utf-8").replace("<!-- /current-figures: dev -->", "")
    bad = tmp_path / "benchmarks.md"
    bad.write_text(doc, encoding="utf-8")
    with pytest.raises(pc.DataError, match="'dev'.*add the two lines"):
        pc.check(bad, DATA)
    assert pc.main(["--check", "--doc", str(bad)]) == 1
    assert "no block" in capsys.readouterr().err


@pytest.mark.parametrize("change, message", [
    (lambda r: r.update(better="faster"), "'better' must be"),
    (lambda r: r.update(run="ZZ"), "run 'ZZ' is not in the kind's runs"),
    (lambda r: r.update(ratio="-1"), "must be positive"),
    (lambda r: r.update(ratio="about 2"), "is not a number"),
    (lambda r: r.pop("peer_name"), "missing \\['peer_name'\\]"),
])
def test_a_malformed_data_file_is_refused(pc, tmp_path, change, message):
    data = raw_data()
    row = random.choice([r for k in data["kinds"] for r in k["rows"] if r["ratio"]])
    change(row)
    path = tmp_path / "current.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(pc.DataError, match=message):
        pc.load(path)


def test_speed_reads_each_ratio_the_right_way_up(pc):
    x = random.uniform(0.2, 5.0)
    row = {"ratio": f"{x}", "ratio_of": "pluggable/peer", "better": "lower"}
    assert pc.speed(row) == pytest.approx(1 / x)       # a time: lower is better
    row.update(better="higher")
    assert pc.speed(row) == pytest.approx(x)           # a rate
    row.update(ratio_of="peer/pluggable")
    assert pc.speed(row) == pytest.approx(x)           # the peer's time over ours
    row.update(ratio=None)
    assert pc.speed(row) is None


def test_the_plot_is_a_small_png_and_the_doc_shows_it(pc, tmp_path):
    pytest.importorskip("matplotlib", reason="the plot needs matplotlib (the test extra)")
    out = tmp_path / "bench-current.png"
    pc.plot(pc.load(), out)
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) < 150 * 1024
    assert PNG.stat().st_size < 150 * 1024
    assert "](images/bench-current.png)" in DOC.read_text(encoding="utf-8")
