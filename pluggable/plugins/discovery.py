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


def user_plugin_dir() -> pathlib.Path | None:
    """``$XDG_DATA_HOME/pluggable/plugins``, else ``$HOME/.local/share/...``;
    only absolute: a relative XDG_DATA_HOME is ignored (as the XDG spec
    says), and a relative HOME gives no user directory."""
    xdg = os.environ.get("XDG_DATA_HOME", "")
    if os.path.isabs(xdg):
        return pathlib.Path(xdg) / "pluggable" / "plugins"
    if xdg:
        log.warning("XDG_DATA_HOME=%r is ignored: it is not an absolute path", xdg)
    home = os.path.expanduser("~")
    if not os.path.isabs(home):
        log.warning("no user plugin directory: HOME=%r is not an absolute path (the "
                    "current directory is never searched)", home)
        return None
    return pathlib.Path(home) / ".local" / "share" / "pluggable" / "plugins"


def _env_path_entries() -> list[pathlib.Path]:
    """The absolute entries of PLUGGABLE_PLUGIN_PATH (directories or files)."""
    entries = []
    for entry in os.environ.get("PLUGGABLE_PLUGIN_PATH", "").split(os.pathsep):
        if not entry:
            continue  # an empty entry would mean the current directory
        if not os.path.isabs(entry):
            log.warning("PLUGGABLE_PLUGIN_PATH entry %r is ignored: plugin directories and "
                        "files must be absolute paths (the current directory is never "
                        "searched)", entry)
            continue
        entries.append(pathlib.Path(entry))
    return entries


def search_dirs() -> list[pathlib.Path]:
    """The plugin directories and files, in search order (entry points come
    after)."""
    user = user_plugin_dir()
    return [*_env_path_entries(), PACKAGE_PLUGIN_DIR, *([user] if user is not None else [])]


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


def _script_dir() -> str | None:
    """The directory the interpreter put at sys.path[0] for ``python
    script.py`` (resolved), or None: under -P/-I (``sys.flags.safe_path``)
    nothing is put there, and for -c, -m, standard input and the interactive
    prompt it is the current directory, not a script's."""
    if getattr(sys.flags, "safe_path", False) or sys.flags.isolated:
        return None
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if not isinstance(path, str) or getattr(main, "__spec__", None) is not None:
        return None  # -m (a spec), -c, stdin or the prompt (no file)
    return os.path.realpath(os.path.dirname(os.path.abspath(path)))


def entry_point_path() -> list[str]:
    """The sys.path entries searched for ``pluggable.plugins`` entry points:
    every absolute entry except those that are the current directory, the
    directory of the script being run (``python script.py``) excepted.
    Relative entries ('' of -c and the prompt, '.') are never searched, nor
    is the current directory that -m puts at sys.path[0]."""
    try:
        cwd = os.path.realpath(os.getcwd())
    except OSError:
        cwd = None
    script = _script_dir()
    out = []
    for i, entry in enumerate(sys.path):
        if not isinstance(entry, str) or not os.path.isabs(entry):
            continue
        if cwd is not None and os.path.realpath(entry) == cwd and not (
                i == 0 and script is not None and script == cwd):
            continue
        out.append(entry)
    return out


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
    for entry in entry_point_path():
        try:
            listing = os.scandir(entry)
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
        from importlib.metadata import distributions
        eps, names = [], set()
        for dist in distributions(path=entry_point_path()):
            name = (dist.metadata["Name"] or "").lower().replace("_", "-")
            if name in names:
                continue  # the first of a name on the path wins, as for imports
            names.add(name)
            eps.extend(ep for ep in dist.entry_points if ep.group == ENTRY_POINT_GROUP)
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
    for entry in _env_path_entries():
        source = f"PLUGGABLE_PLUGIN_PATH ({entry})"
        if entry.is_dir():
            found.extend((f, source) for f in plugin_files(entry))
        elif entry.exists():  # a plugin file, as load_pluggable_device_library takes
            found.append((entry, source))
        else:
            log.warning("PLUGGABLE_PLUGIN_PATH entry %s does not exist: no plugin loaded "
                        "from it", entry)
    user = user_plugin_dir()
    for d, what in ((PACKAGE_PLUGIN_DIR, "package"), (user, "user")):
        if d is not None and d.is_dir():
            found.extend((f, f"{what} directory") for f in plugin_files(d))
    return found
