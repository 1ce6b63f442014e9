"""Extract the code cells of TensorFlow's guide notebooks into the compact JSON
corpus that ``tests/guide_harness.py`` runs (``tests/guide_cells/<name>.json``).

Only code is kept: the code cells in notebook order, each with its index in the
notebook, minus shell (``!pip ...``) and IPython magic (``%...``) lines and minus
cells left with nothing but comments. Prose, outputs and metadata are dropped.

Usage::

    # from a checkout (a work tree, or a git directory with --rev) of tensorflow/docs
    python3 tools/guide_notebooks/fetch_cells.py --docs PATH [--rev HEAD]
    # or from .ipynb files given one by one (the name is the file's stem)
    python3 tools/guide_notebooks/fetch_cells.py FILE.ipynb ...
"""
from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "guide_cells"

# corpus name -> path inside tensorflow/docs
NOTEBOOKS = {
    "tensor": "site/en/guide/tensor.ipynb",
    "variable": "site/en/guide/variable.ipynb",
    "basics": "site/en/guide/basics.ipynb",
    "autodiff": "site/en/guide/autodiff.ipynb",
    "advanced_autodiff": "site/en/guide/advanced_autodiff.ipynb",
    "intro_to_graphs": "site/en/guide/intro_to_graphs.ipynb",
    "function": "site/en/guide/function.ipynb",
    "intro_to_modules": "site/en/guide/intro_to_modules.ipynb",
    "basic_training_loops": "site/en/guide/basic_training_loops.ipynb",
    "ragged_tensor": "site/en/guide/ragged_tensor.ipynb",
    "tensor_slicing": "site/en/guide/tensor_slicing.ipynb",
    "random_numbers": "site/en/guide/random_numbers.ipynb",
    "customization_basics": "site/en/tutorials/customization/basics.ipynb",
    "custom_training_walkthrough":
        "site/en/tutorials/customization/custom_training_walkthrough.ipynb",
}


def _keep_line(line: str) -> bool:
    stripped = line.lstrip()
    return not (stripped.startswith("!") or stripped.startswith("%"))


def _has_code(code: str) -> bool:
    return any(ln.strip() and not ln.strip().startswith("#") for ln in code.splitlines())


def extract(notebook: dict, name: str, source: str) -> dict:
    """The corpus entry for one parsed notebook."""
    cells = []
    for index, cell in enumerate(notebook.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        text = cell.get("source", "")
        if isinstance(text, list):
            text = "".join(text)
        code = "\n".join(ln for ln in text.splitlines() if _keep_line(ln)).rstrip()
        if _has_code(code):
            cells.append({"index": index, "code": code})
    return {"notebook": name, "source": source, "cells": cells}


def _read_from_checkout(docs: pathlib.Path, path: str, rev: str | None) -> str:
    if rev is None:
        return (docs / path).read_text(encoding="utf-8")
    return subprocess.run(["git", "--git-dir", str(docs), "show", f"{rev}:{path}"],
                          check=True, capture_output=True, text=True).stdout


def write(entry: dict, out: pathlib.Path) -> pathlib.Path:
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"{entry['notebook']}.json"
    target.write_text(json.dumps(entry, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=pathlib.Path, help=".ipynb files")
    parser.add_argument("--docs", type=pathlib.Path,
                        help="a tensorflow/docs work tree, or its git directory with --rev")
    parser.add_argument("--rev", help="read the notebooks at this revision of --docs (git)")
    parser.add_argument("--out", type=pathlib.Path, default=OUT)
    args = parser.parse_args(argv)
    if not args.files and args.docs is None:
        parser.error("give --docs PATH or .ipynb files")
    sources: list[tuple[str, str, str]] = []
    if args.docs is not None:
        for name, path in NOTEBOOKS.items():
            sources.append((name, path, _read_from_checkout(args.docs, path, args.rev)))
    for file in args.files:
        sources.append((file.stem, file.name, file.read_text(encoding="utf-8")))
    for name, path, text in sources:
        entry = extract(json.loads(text), name, path)
        target = write(entry, args.out)
        print(f"{target.relative_to(ROOT) if target.is_relative_to(ROOT) else target}: "
              f"{len(entry['cells'])} code cells")
    return 0


if __name__ == "__main__":
    sys.exit(main())
