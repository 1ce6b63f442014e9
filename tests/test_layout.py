"""The package's layers stay true: every import points to the same or a lower
layer, and there is no import cycle, neither between Python modules (imports
inside functions count) nor between the C files of the core runtime.

The layer of a module is given by its folder (see docs/architecture.md)."""
from __future__ import annotations

import ast
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "pluggable"

LAYERS = {
    "pluggable._core": 1,
    "pluggable.framework": 2,
    "pluggable.runtime": 3,
    "pluggable.plugins": 4,
    "pluggable.ops": 5,
    "pluggable.autodiff": 6,
    "pluggable.graph": 6,
    "pluggable.autograph": 6,
    "pluggable.profiler": 6,
    "pluggable.custom_ops": 6,
    "pluggable.data": 6,
    "pluggable.distribute": 6,
    "pluggable.training": 6,
    "pluggable.onnx": 6,
    "pluggable.ragged": 6,
    "pluggable.sparse": 6,
    "pluggable.saved_model": 6,
    "pluggable.keras": 6,
    "pluggable.image": 6,
    "pluggable.tools": 7,
}
TOP = 8  # pluggable/__init__.py, __main__.py and the public namespace modules


def module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(module: str) -> int:
    for prefix, layer in LAYERS.items():
        if module == prefix or module.startswith(prefix + "."):
            return layer
    if module == "pluggable":
        return TOP
    if module.count(".") == 1:
        sub = ROOT / module.replace(".", "/")
        if not sub.is_dir():  # a top-level module file
            return TOP
    raise AssertionError(f"{module} belongs to no layer: give its folder a layer in "
                         "tests/test_layout.py and docs/architecture.md")


def python_modules() -> dict[str, pathlib.Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(module: str, path: pathlib.Path, known: set[str]) -> set[str]:
    """The pluggable modules `module` imports anywhere in its file."""
    tree = ast.parse(path.read_text(), str(path))
    is_pkg = path.name == "__init__.py"
    package = module if is_pkg else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "pluggable":
                    found.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "pluggable":
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in known else target)
    return {m for m in found if m != module}


def import_graph() -> dict[str, set[str]]:
    mods = python_modules()
    known = set(mods)
    return {m: {t for t in imports_of(m, p, known) if not m.startswith(t + ".")}
            for m, p in mods.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_every_module_has_a_layer():
    for m in python_modules():
        layer_of(m)


def test_imports_point_down():
    graph = import_graph()
    upward = [f"{m} (layer {layer_of(m)}) imports {t} (layer {layer_of(t)})"
              for m, targets in sorted(graph.items()) for t in sorted(targets)
              if t in graph and layer_of(t) > layer_of(m)]
    assert not upward, "imports that point up a layer:\n  " + "\n  ".join(upward)


def test_no_python_import_cycles():
    found = cycles(import_graph())
    assert not found, "import cycles:\n  " + "\n  ".join(" <-> ".join(c) for c in found)


def test_cycle_detection_works():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_layer_detection_flags_an_upward_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from ..ops import raw_ops\n\ndef f():\n    from ..tools import cli\n")
    found = imports_of("pluggable.runtime.bad", bad,
                       {"pluggable.ops.raw_ops", "pluggable.tools.cli"})
    assert found == {"pluggable.ops.raw_ops", "pluggable.tools.cli"}
    assert all(layer_of(t) > layer_of("pluggable.runtime.bad") for t in found)


# ------------------------------------------------------------------ C files

def _c_symbols(obj: pathlib.Path) -> tuple[set[str], set[str]]:
    out = subprocess.run(["nm", str(obj)], capture_output=True, text=True, check=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "U":
            undefined.add(parts[1])
        elif len(parts) == 3 and parts[1] in "TDBR":
            defined.add(parts[2])
    return defined, undefined


@pytest.mark.skipif(shutil.which("cc") is None or shutil.which("nm") is None,
                    reason="needs a C compiler (cc) and nm to read the core's object files")
def test_no_c_call_cycles(tmp_path):
    src = ROOT / "c_api" / "src"
    symbols = {}
    for c in sorted(src.glob("*.c")):
        obj = tmp_path / (c.stem + ".o")
        subprocess.run(["cc", "-c", "-std=gnu11", "-fPIC", f"-I{ROOT / 'c_api' / 'include'}",
                        f"-I{src}", str(c), "-o", str(obj)], check=True, capture_output=True)
        symbols[c.name] = _c_symbols(obj)
    owner = {s: f for f, (defs, _) in symbols.items() for s in defs}
    graph = {f: {owner[s] for s in undef if s in owner and owner[s] != f}
             for f, (_, undef) in symbols.items()}
    found = cycles(graph)
    assert not found, "C files of c_api/src that call each other:\n  " + "\n  ".join(
        " <-> ".join(c) for c in found)
