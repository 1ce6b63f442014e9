"""Every code block of README.md and docs/*.md runs as pasted.

The blocks of one file run in order, as a reader pastes them into one
session: Python blocks share one interpreter (a child process per file),
shell blocks run with `bash -euo pipefail` in the same working directory, a
temporary directory that holds links to the repository's folders (so
`reference_device/...` and `benchmarks/...` resolve) and not the package,
which comes from the installation under test. `python` and `python3` are
the interpreter running the tests; `PLUGGABLE_*` variables are cleared and
pip refuses to install outside a virtual environment.

An HTML comment on the line just before a block's opening fence changes what
happens to it:

* `<!-- docs-test: skip: REASON -->`: not run (installs, GPUs, several
  machines, long runs); the reason is the skip reason and is required.
* `<!-- docs-test: fragment: REASON -->`: part of a larger program; only
  checked to parse (`compile()` for Python, `bash -n` for shell).
* `<!-- docs-test: file: PATH -->`: the block is a source file; it is
  written to PATH (relative to the working directory) before the file's
  blocks run, for the blocks that use it.
* `<!-- docs-test: fresh -->`: this block and those after it run in a new
  interpreter (for blocks that must run before `import pluggable`).

C, C++ and CUDA blocks must carry `file:`, `fragment:` or `skip:`. Blocks
without a language, and data blocks (toml, json, text), are not code and are
not run. An unknown marker fails the test.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PYTHON = {"python", "py", "python3"}
SHELL = {"sh", "bash", "shell", "console"}
NATIVE = {"c", "cpp", "c++", "cc", "cu", "cuda"}
DATA = {"", "text", "toml", "json", "yaml", "ini", "txt", "output"}
MARKER = re.compile(r"^\s*<!--\s*docs-test:\s*(?P<body>.*?)\s*-->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[^\s`]*)\s*$")
SESSION_TIMEOUT = 600


@dataclasses.dataclass
class Block:
    doc: pathlib.Path
    line: int                  # 1-based line of the opening fence
    lang: str
    code: str
    marker: str | None         # "skip", "fragment", "file", "fresh" or None
    arg: str                   # the marker's reason or path

    @property
    def id(self) -> str:
        doc = self.doc.relative_to(ROOT) if ROOT in self.doc.parents else self.doc.name
        return f"{doc}:{self.line}"


def parse_marker(text: str) -> tuple[str, str]:
    kind, _, arg = text.partition(":")
    kind, arg = kind.strip(), arg.strip()
    if kind not in ("skip", "fragment", "file", "fresh"):
        raise ValueError(f"unknown docs-test marker {text!r}")
    if kind in ("skip", "fragment", "file") and not arg:
        raise ValueError(f"docs-test marker {kind!r} needs a reason or path after ':'")
    return kind, arg


def blocks_of(doc: pathlib.Path) -> list[Block]:
    lines = doc.read_text().splitlines()
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, j = len(m.group("indent")), i + 1
        while j < len(lines) and not re.match(r"^\s*```\s*$", lines[j]):
            j += 1
        body = "\n".join(ln[indent:] if ln[:indent].isspace() else ln
                         for ln in lines[i + 1:j])
        marker = arg = None
        prev = MARKER.match(lines[i - 1]) if i else None
        if prev:
            marker, arg = parse_marker(prev.group("body"))
        out.append(Block(doc, i + 1, m.group("lang").lower(), body + "\n", marker, arg or ""))
        i = j + 1
    return out


def code_blocks() -> list[Block]:
    return [b for d in DOCS for b in blocks_of(d) if b.lang not in DATA or b.marker]


# The driver a child interpreter runs: the blocks of one session in order,
# each block's outcome (None or the traceback) written as JSON.
DRIVER = r"""
import json, subprocess, sys, traceback
blocks, result = json.load(open(sys.argv[1])), sys.argv[2]
ns, out = {"__name__": "__main__"}, {}
for b in blocks:
    try:
        if b["kind"] == "python":
            exec(compile(b["code"], b["id"], "exec"), ns)
        else:
            p = subprocess.run(["bash", "-euo", "pipefail", "-c", b["code"]],
                               capture_output=True, text=True, timeout=300)
            if p.returncode:
                raise RuntimeError(f"exit status {p.returncode}\n{p.stdout[-3000:]}\n"
                                   f"{p.stderr[-3000:]}")
        out[b["id"]] = None
    except BaseException:
        out[b["id"]] = traceback.format_exc()[-6000:]
    json.dump(out, open(result, "w"))
"""


def sessions(doc: pathlib.Path) -> list[list[Block]]:
    """The runnable blocks of `doc`, split into interpreter sessions."""
    out: list[list[Block]] = [[]]
    for b in blocks_of(doc):
        if b.marker == "fresh" and out[-1]:
            out.append([])
        if b.marker in (None, "fresh") and (b.lang in PYTHON or b.lang in SHELL):
            out[-1].append(b)
    return [s for s in out if s]


def workdir(doc: pathlib.Path) -> pathlib.Path:
    d = pathlib.Path(tempfile.mkdtemp(prefix="docs-test-"))
    for name in ("reference_device", "benchmarks", "examples", "tests", "docs", "c_api",
                 ".ci", "README.md"):
        (d / name).symlink_to(ROOT / name)
    for b in blocks_of(doc):
        if b.marker == "file":
            target = (d / b.arg).resolve()
            assert d in target.parents, f"{b.id}: file marker path {b.arg!r} leaves the directory"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(b.code)
    binp = d / ".bin"
    binp.mkdir()
    for name in ("python", "python3"):
        # a script, not a link: a virtual environment's interpreter finds its
        # environment from the path it is started by
        script = binp / name
        script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
        script.chmod(0o755)
    return d


@functools.lru_cache(maxsize=None)
def run_doc(doc: pathlib.Path) -> dict[str, str | None]:
    """Runs every session of `doc`; block id -> None (ran) or the failure."""
    results: dict[str, str | None] = {}
    wd = workdir(doc)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLUGGABLE_")}
    env = dict(env, PIP_REQUIRE_VIRTUALENV="1", PATH=f"{wd / '.bin'}{os.pathsep}{os.environ.get('PATH', '')}",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               MPLBACKEND="Agg")
    for n, sess in enumerate(sessions(doc)):
        spec, res = wd / f".blocks{n}.json", wd / f".result{n}.json"
        spec.write_text(json.dumps([{"id": b.id, "code": b.code,
                                     "kind": "python" if b.lang in PYTHON else "shell"}
                                    for b in sess]))
        try:
            p = subprocess.run([sys.executable, "-c", DRIVER, str(spec), str(res)], cwd=wd,
                               env=env, capture_output=True, text=True,
                               timeout=SESSION_TIMEOUT)
            crash = None if p.returncode == 0 else (
                f"the interpreter exited with status {p.returncode}:\n{p.stderr[-3000:]}")
        except subprocess.TimeoutExpired:
            crash = f"the session did not finish within {SESSION_TIMEOUT} s"
        done = json.loads(res.read_text()) if res.exists() else {}
        for b in sess:
            results[b.id] = done[b.id] if b.id in done else (crash or "did not run")
    return results


BLOCKS = code_blocks()


def test_every_document_has_blocks_and_valid_markers():
    assert len(BLOCKS) > 30
    for b in BLOCKS:
        if b.lang in NATIVE:
            assert b.marker in ("file", "fragment", "skip"), (
                f"{b.id}: a {b.lang} block needs a 'file: PATH', 'fragment: REASON' or "
                f"'skip: REASON' marker")
        elif b.lang not in PYTHON | SHELL:
            assert b.marker in ("file", "fragment", "skip"), (
                f"{b.id}: language {b.lang!r} is neither code the test runs nor data")


def test_markers_are_checked(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("<!-- docs-test: skip -->\n```python\npass\n```\n")
    with pytest.raises(ValueError, match="needs a reason"):
        blocks_of(doc)
    doc.write_text("<!-- docs-test: maybe: later -->\n```python\npass\n```\n")
    with pytest.raises(ValueError, match="unknown docs-test marker"):
        blocks_of(doc)


def test_a_failing_block_is_reported_and_the_session_goes_on(tmp_path):
    doc = tmp_path / "y.md"
    doc.write_text("```python\nx = 1\n```\n```python\nraise KeyError('boom')\n```\n"
                   "```sh\ntest -f hello.txt\n```\n<!-- docs-test: file: hello.txt -->\n"
                   "```text\nhi\n```\n```python\nassert x == 1\n```\n")
    out = run_doc.__wrapped__(doc)
    ids = [b.id for s in sessions(doc) for b in s]
    assert [out[i] is None for i in ids] == [True, False, True, True]
    assert "KeyError: 'boom'" in out[ids[1]]


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_block_runs_as_pasted(block: Block):
    if block.marker == "skip":
        pytest.skip(block.arg)
    if block.marker == "file":
        return  # written for the blocks that use it; they run
    if block.marker == "fragment":
        if block.lang in PYTHON:
            compile(block.code, block.id, "exec")
        elif block.lang in SHELL:
            p = subprocess.run(["bash", "-n"], input=block.code, text=True,
                               capture_output=True)
            assert p.returncode == 0, p.stderr
        return
    failure = run_doc(block.doc)[block.id]
    assert failure is None, f"{block.id} failed:\n{failure}"
