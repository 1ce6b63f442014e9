"""Where plugin files are found: PLUGGABLE_PLUGIN_PATH, the package's own
plugin directory, the per-user directory and the ``pluggable.plugins``
entry points (see ``pluggable.plugins`` for the search order)."""
from __future__ import annotations

import logging
import os
import pathlib
import sys
from importlib.machinery import PathFinder
from typing import Any, Iterable

log = logging.getLogger("pluggable.plugins")

# The reference plugins are built into this package's own directory.
PACKAGE_PLUGIN_DIR = pathlib.Path(__file__).resolve().parent
ENTRY_POINT_GROUP = "pluggable.plugins"
PLUGIN_SUFFIXES = (".so",)


def user_plugin_dir() -> pathlib.Path:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return pathlib.Path(base) / "pluggable" / "plugins"


def _env_path_dirs() -> list[pathlib.Path]:
    dirs = []
    for entry in os.environ.get("PLUGGABLE_PLUGIN_PATH", "").split(os.pathsep):
        if not entry:
            continue  # an empty entry would mean the current directory
        if not os.path.isabs(entry):
            log.warning("PLUGGABLE_PLUGIN_PATH entry %r is ignored: plugin directories must "
                        "be absolute paths (the current directory is never searched)", entry)
            continue
        dirs.append(pathlib.Path(entry))
    return dirs


def search_dirs() -> list[pathlib.Path]:
    """The plugin directories, in search order (entry points come after)."""
    return [*_env_path_dirs(), PACKAGE_PLUGIN_DIR, user_plugin_dir()]


def plugin_files(d: pathlib.Path) -> list[pathlib.Path]:
    try:
        return sorted(p for p in d.iterdir() if p.suffix in PLUGIN_SUFFIXES and p.is_file())
    except OSError as exc:
        log.warning("cannot list plugin directory %s: %s", d, exc)
        return []


def _as_paths(value: Any) -> list[str]:
    """Turns an entry point's object into a list of paths."""
    if callable(value):
        value = value()
    if isinstance(value, (str, os.PathLike)):
        return [os.fspath(value)]
    if isinstance(value, Iterable):
        out = []
        for v in value:
            if not isinstance(v, (str, os.PathLike)):
                raise TypeError(f"expected a path, got {type(v).__name__}")
            out.append(os.fspath(v))
        return out
    raise TypeError(f"expected a path, an iterable of paths or a callable returning them, "
                    f"got {type(value).__name__}")


_METADATA_DIRS = (".dist-info", ".egg-info")


def _may_declare_entry_points() -> bool:
    """False only when no distribution on ``sys.path`` can declare a
    ``pluggable.plugins`` entry point: no metadata directory's
    entry_points.txt mentions the group, and nothing but the standard path
    finder could add distributions (no zip or egg on the path, no other meta
    path finder with ``find_distributions``). Reading those few files is much
    cheaper than importing and running ``importlib.metadata`` for every
    distribution, which most imports would do for nothing."""
    if any(getattr(f, "find_distributions", None) is not None and f is not PathFinder
           for f in sys.meta_path):
        return True
    group = ENTRY_POINT_GROUP.encode()
    for entry in sys.path:
        if not isinstance(entry, str):
            return True
        try:
            listing = os.scandir(entry or ".")
        except NotADirectoryError:
            return True  # a zip file: let importlib.metadata read it
        except OSError:
            continue  # missing: importlib.metadata finds nothing there either
        with listing:
            for child in listing:
                name = child.name.lower()
                if name.endswith(".egg"):
                    return True
                if not name.endswith(_METADATA_DIRS):
                    continue
                try:
                    with open(os.path.join(child.path, "entry_points.txt"), "rb") as f:
                        if group in f.read():
                            return True
                except OSError:
                    continue  # no entry points (or an .egg-info file)
    return False


def entry_point_items() -> list[tuple[pathlib.Path | None, str, str]]:
    """(path, source, error) triples from the ``pluggable.plugins`` entry
    points; `path` is None (and `error` set) when an entry point is broken."""
    if not _may_declare_entry_points():
        return []
    try:
        from importlib.metadata import entry_points
        eps = entry_points(group=ENTRY_POINT_GROUP)
    except Exception as exc:  # a broken distribution must not stop the import
        log.warning("cannot read the %s entry points: %r", ENTRY_POINT_GROUP, exc)
        return []
    items = []
    for ep in sorted(eps, key=lambda e: e.name):
        source = f"entry point {ep.name} = {ep.value}"
        try:
            paths = _as_paths(ep.load())
        except Exception as exc:
            items.append((None, source, f"the entry point failed: {exc!r}"))
            continue
        for p in paths:
            if not os.path.isabs(p):
                items.append((None, source, f"the entry point gave the relative path {p!r}; "
                              "plugin paths must be absolute (e.g. built from __file__)"))
                continue
            path = pathlib.Path(p)
            if path.is_dir():
                items.extend((f, source, "") for f in plugin_files(path))
            else:
                items.append((path, source, ""))
    return items


def discover() -> list[tuple[pathlib.Path, str]]:
    """(plugin file, source) pairs in search order, before de-duplication."""
    found: list[tuple[pathlib.Path, str]] = []
    env_dirs = _env_path_dirs()
    for d in env_dirs:
        if d.is_dir():
            found.extend((f, f"PLUGGABLE_PLUGIN_PATH ({d})") for f in plugin_files(d))
    for d, what in ((PACKAGE_PLUGIN_DIR, "package"), (user_plugin_dir(), "user")):
        if d.is_dir():
            found.extend((f, f"{what} directory") for f in plugin_files(d))
    return found
