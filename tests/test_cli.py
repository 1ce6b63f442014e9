"""The command line (python -m pluggable): a help per command, --version,
output that fits 100 columns (--wide for whole rows), and the conformance
report's skip reasons given once. Each runs the CLI in a subprocess."""
from __future__ import annotations

import json
import pathlib
import platform
import re
import subprocess
import sys

import numpy as np
import pytest

import pluggable as pg
from pluggable.tools import cli
from pluggable.tools.check.kernels import merge_notes
from pluggable.tools.table import fold, format_table

ROOT = pathlib.Path(__file__).resolve().parent.parent
HOST_PLUGIN = ROOT / "pluggable" / "plugins" / "libpluggable_my_device.so"


def run_cli(*args: str, cwd=ROOT, timeout: float = 300) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "pluggable", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def longest(text: str) -> int:
    return max(len(line) for line in text.splitlines())


@pytest.mark.parametrize("command", list(cli.COMMANDS))
def test_each_command_has_its_own_help(command):
    top = run_cli("--help").stdout
    own = run_cli(command, "--help").stdout
    assert own != top and own.startswith(f"usage: python -m pluggable {command}")
    assert cli.COMMANDS[command][1].splitlines()[0] in own and "examples:" in own
    assert longest(own) <= 100


def test_version_names_the_package_abi_python_and_numpy():
    header = (ROOT / "c_api" / "include" / "stream_executor.h").read_text()
    abi = ".".join(re.search(rf"#define {n} (\d+)", header).group(1)
                   for n in ("SE_MAJOR", "SE_MINOR", "SE_PATCH"))
    out = run_cli("--version").stdout.splitlines()
    assert out == [f"pluggable {pg.__version__}", f"C ABI (SE_MAJOR.SE_MINOR.SE_PATCH) {abi}",
                   f"Python {platform.python_version()}, numpy {np.__version__}"]


@pytest.fixture(scope="module")
def script(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "step.py"
    path.write_text("import numpy as np, pluggable as pg\n"
                    "with pg.device('MY_DEVICE:0'):\n"
                    "    x = pg.constant(np.ones((8, 8), np.float32))\n"
                    "    y = pg.raw_ops.SparseSoftmaxCrossEntropyWithLogits(\n"
                    "        features=x, labels=pg.constant(np.zeros(8, np.int32)))\n")
    return path


COMMAND_LINES = {
    "demo": [], "plugins": [], "ops": [], "check": [str(HOST_PLUGIN)],
    "profile": ["--logdir", "logs", "{script}"],  # run in tmp: short paths
}


@pytest.mark.parametrize("command", list(COMMAND_LINES))
def test_every_command_fits_100_columns_and_wide_prints_whole_rows(command, script, tmp_path):
    if not HOST_PLUGIN.exists():
        pytest.skip("the host plugin is not built (python3 setup.py build_ext --inplace)")
    args = [a.format(tmp=tmp_path, script=script) for a in COMMAND_LINES[command]]
    narrow = run_cli(command, *args, cwd=tmp_path).stdout
    assert longest(narrow) <= 100, narrow
    wide = run_cli(command, "--wide", *args, cwd=tmp_path).stdout
    if command == "ops":  # 400 columns and more whole: the attribute schemas
        assert longest(wide) > 100 and "(cells cut" in narrow and "(cells cut" not in wide
        for op in json.loads(run_cli("ops", "--json").stdout):
            assert f"  {op['attributes']}  " in wide or not op["attributes"]


def test_plugins_path_goes_under_its_row():
    out = run_cli("plugins").stdout.splitlines()
    rows = [i for i, line in enumerate(out) if line.startswith("loaded ")]
    # a path cut to the width ends the row's next line (the CUDA plugin's row
    # comes first on a machine with a GPU)
    assert any(out[i + 1].strip() == str(HOST_PLUGIN) or
               str(HOST_PLUGIN).startswith(out[i + 1].strip()) for i in rows), out


def test_a_skip_reason_shows_once_with_the_kernels_it_covers(rng):
    reasons = [f"reason {i} " + "x" * int(rng.integers(1, 30)) for i in range(3)]
    notes = [(f"T=t{k}", reasons[int(rng.integers(0, 3))]) for k in range(100)]
    merged = merge_notes(notes)
    for reason in {r for _, r in notes}:
        [line] = [m for m in merged if reason in m]
        n = sum(r == reason for _, r in notes)
        assert line.count(reason) == 1 and (n == 1 or f"({n} kernels: " in line)
        if n > 3:
            assert f"and {n - 3} more)" in line


def test_tables_fit_the_width_and_lose_nothing_when_folded(rng):
    for _ in range(20):
        words = ["".join(rng.choice(list("ab/c,d "), int(rng.integers(1, 40))))
                 for _ in range(6)]
        width = int(rng.integers(10, 60))
        text = " ".join(words)
        lines = fold(text, width)
        assert all(len(line) <= width for line in lines)
        assert "".join(lines).replace(" ", "") == text.replace(" ", "")
        rows = [(w, w[::-1], w.upper()) for w in words]
        table = format_table(("A", "B", "C"), rows, width=width + 40,
                             fit={0: "wrap", 1: "cut", 2: "below"})
        assert longest(table) <= width + 40
