"""Loading is decided on the opened file: a path swapped between the checks
and dlopen cannot bring in other code; directories others can write to,
search paths relative to the current directory and modules planted in the
current directory are refused or ignored. Each test runs in a child process
(tests/broken_plugins.run_child) so that what it loads dies with it."""
from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

import pluggable as pg
from broken_plugins import HERE as CORPUS_DIR, build, clean_env, run_child

HOST_PLUGIN = pathlib.Path(pg.__file__).resolve().parent / "plugins" / "libpluggable_my_device.so"

pytestmark = pytest.mark.skipif(not HOST_PLUGIN.exists(),
                                reason="the host reference plugin is not built")


def _copy(src: pathlib.Path, dest_dir: pathlib.Path, name: str | None = None) -> pathlib.Path:
    dest_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(dest_dir, 0o755)
    dest = dest_dir / (name or src.name)
    shutil.copyfile(src, dest)
    os.chmod(dest, 0o755)
    return dest


def _cc(out: pathlib.Path, *args: str) -> pathlib.Path:
    """Compiles a test library the way a plugin author would."""
    cmd = ["cc", "-shared", "-fPIC", "-O1", "-std=gnu11", "-pthread", f"-I{pg.get_include()}",
           f"-I{CORPUS_DIR}", *args, "-o", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr}"
    os.chmod(out, 0o755)
    return out


def test_directory_swapped_before_dlopen_loads_the_checked_file(tmp_path):
    """The allow-listed directory is replaced by a symlink to another one
    right before dlopen (as a racing attacker would): the library that was
    checked is loaded, never the one now at that path."""
    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    inside = _copy(build("good_mini"), allowed / "sub", "libplug.so")
    _copy(build("constructor_marker"), outside, "libplug.so")
    marker = tmp_path / "marker"
    extra = f"""
import os
from pluggable.plugins import loader
sub, outside = {str(inside.parent)!r}, {str(outside)!r}
def swap(stage):
    if stage == "dlopen" and not os.path.islink(sub):
        os.rename(sub, sub + ".old")
        os.symlink(outside, sub)
loader.stage_hook = swap
out["rec"] = pg.load_plugin({str(inside)!r}).to_dict()
loader.stage_hook = None
out["swapped"] = os.path.islink(sub)
"""
    allow = os.pathsep.join([str(allowed), str(HOST_PLUGIN.parent)])
    res = run_child(env=clean_env(PLUGGABLE_PLUGIN_ALLOWLIST=allow,
                                  PLUGGABLE_TEST_MARKER=str(marker)), extra=extra)
    assert "extra_error" not in res, res["extra_error"]
    assert res["swapped"], "the swap did not happen"
    assert not marker.exists(), "the library swapped in after the check was loaded"
    assert res["rec"]["status"] == "loaded" and res["rec"]["device_type"] == "MINI", res["rec"]
    assert res["rec"]["path"] == str(inside)


def test_file_swapped_before_dlopen_loads_the_checked_file(tmp_path):
    """The file itself is renamed over right before dlopen."""
    d = tmp_path / "plugins"
    lib = _copy(build("good_mini"), d, "libplug.so")
    evil = _copy(build("constructor_marker"), tmp_path / "evil", "libplug.so")
    marker = tmp_path / "marker"
    extra = f"""
import os
from pluggable.plugins import loader
def swap(stage):
    if stage == "dlopen":
        os.replace({str(evil)!r}, {str(lib)!r})
loader.stage_hook = swap
out["rec"] = pg.load_plugin({str(lib)!r}).to_dict()
"""
    res = run_child(env=clean_env(PLUGGABLE_TEST_MARKER=str(marker)), extra=extra)
    assert "extra_error" not in res, res["extra_error"]
    assert not marker.exists(), "the library renamed in after the check was loaded"
    assert res["rec"]["status"] == "loaded" and res["rec"]["device_type"] == "MINI", res["rec"]


def test_vanished_file_is_a_worded_quarantine(tmp_path):
    extra = f"""
out["rec"] = pg.load_plugin({str(tmp_path / "gone" / "libx.so")!r}).to_dict()
"""
    res = run_child(extra=extra)
    assert res["rec"]["status"] == "quarantined"
    assert res["rec"]["reason"].startswith("no such file"), res["rec"]


@pytest.mark.parametrize("dir_mode,why", [
    (0o775, "group-writable directory"),
    (0o1777, "world-writable directory"),
], ids=["group-writable", "sticky-world-writable"])
def test_writable_directories_are_refused(tmp_path, dir_mode, why):
    d = tmp_path / "plugins"
    lib = _copy(build("constructor_marker"), d)
    os.chmod(d, dir_mode)
    marker = tmp_path / "marker"
    try:
        res = run_child([lib], env=clean_env(PLUGGABLE_TEST_MARKER=str(marker)))
    finally:
        os.chmod(d, 0o755)
    rec = res["records"][0]
    assert rec["status"] == "skipped" and why in rec["reason"], rec
    assert "PLUGGABLE_ALLOW_INSECURE_PLUGINS=1" in rec["reason"]
    assert not marker.exists()


def test_writable_directory_above_the_plugin_inside_the_allowlist(tmp_path):
    allowed = tmp_path / "allowed"
    lib = _copy(build("constructor_marker"), allowed / "team" / "sub")
    os.chmod(allowed / "team", 0o775)
    marker = tmp_path / "marker"
    try:
        res = run_child([lib], env=clean_env(PLUGGABLE_PLUGIN_ALLOWLIST=str(allowed),
                                             PLUGGABLE_TEST_MARKER=str(marker)))
    finally:
        os.chmod(allowed / "team", 0o755)
    rec = res["records"][0]
    assert rec["status"] == "skipped", rec
    assert f"group-writable directory {allowed / 'team'}" in rec["reason"], rec
    assert not marker.exists()


@pytest.mark.parametrize("flags,what", [
    (("-Wl,-rpath,.", "-Wl,--enable-new-dtags"), "RUNPATH entry '.'"),
    (("-Wl,-rpath,lib:/usr/lib", "-Wl,--enable-new-dtags"), "RUNPATH entry 'lib'"),
    (("-Wl,-rpath,.", "-Wl,--disable-new-dtags"), "RPATH entry '.'"),
], ids=["runpath-dot", "runpath-relative", "rpath-dot"])
def test_search_paths_relative_to_the_current_directory_are_refused(tmp_path, flags, what):
    d = tmp_path / "plugins"
    d.mkdir()
    os.chmod(d, 0o755)
    lib = _cc(d / "librelative.so", *flags, str(CORPUS_DIR / "constructor_marker.c"))
    marker = tmp_path / "marker"
    res = run_child([lib], env=clean_env(PLUGGABLE_TEST_MARKER=str(marker)))
    rec = res["records"][0]
    assert rec["status"] == "skipped", rec
    assert "current directory" in rec["reason"] and what in rec["reason"], rec
    assert not marker.exists()


def test_origin_relative_dependency_loads_next_to_the_plugin(tmp_path):
    """A plugin whose RUNPATH is $ORIGIN finds its bundled library although
    it is loaded through a file descriptor, even from another directory."""
    d = tmp_path / "plugins"
    d.mkdir()
    os.chmod(d, 0o755)
    dep = d / "libpgtestdep.so"
    dep_src = tmp_path / "dep.c"
    dep_src.write_text("int pgtestdep_value(void) { return 42; }\n")
    _cc(dep, str(dep_src))
    src = tmp_path / "plug.c"
    src.write_text('#include "mini_device.h"\nint pgtestdep_value(void);\n'
                   "int plug_value(void) { return pgtestdep_value(); }\n")
    lib = _cc(d / "libwithdep.so", f"-L{d}", "-Wl,--no-as-needed", str(src), "-lpgtestdep",
              "-Wl,-rpath,$ORIGIN", "-Wl,--enable-new-dtags")
    res = run_child([lib], env=clean_env(), cwd=str(tmp_path))
    rec = res["records"][0]
    assert rec["status"] == "loaded" and rec["device_type"] == "MINI", rec


def test_probe_child_never_imports_from_the_current_directory(tmp_path):
    planted = tmp_path / "planted"
    planted.mkdir()
    marker = tmp_path / "marker"
    for mod in ("numpy", "cffi", "json", "pluggable"):
        (planted / f"{mod}.py").write_text(
            f"open({str(marker)!r}, 'a').write('{mod} imported\\n')\n"
            "raise ImportError('planted module')\n")
    lib = _copy(build("good_mini"), tmp_path / "plugins")
    extra = f"""
import os
os.chdir({str(planted)!r})
out["rec"] = pg.load_plugin({str(lib)!r}, probe=True).to_dict()
"""
    res = run_child(extra=extra)
    assert "extra_error" not in res, res["extra_error"]
    assert not marker.exists(), marker.read_text()
    assert res["rec"]["status"] == "loaded", res["rec"]


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
@pytest.mark.parametrize("what", ["file", "directory"])
def test_plugin_owned_by_another_user_is_refused(tmp_path, what):
    d = tmp_path / "plugins"
    lib = _copy(build("constructor_marker"), d)
    os.chown(lib if what == "file" else d, 54321, -1)
    marker = tmp_path / "marker"
    res = run_child([lib], env=clean_env(PLUGGABLE_TEST_MARKER=str(marker)))
    rec = res["records"][0]
    assert rec["status"] == "skipped", rec
    assert "user id 54321" in rec["reason"] and "PLUGGABLE_ALLOW_INSECURE_PLUGINS" in rec["reason"]
    assert not marker.exists()


# ------------------------------------------------------------- where plugins are found

def test_plugin_path_takes_files_and_names_missing_entries(tmp_path):
    lib = _copy(build("constructor_marker"), tmp_path / "one", "libmarked.so")
    missing = tmp_path / "no_such_dir"
    marker = tmp_path / "marker"
    env = clean_env(PLUGGABLE_PLUGIN_PATH=os.pathsep.join([str(missing), str(lib), "rel"]),
                    PLUGGABLE_TEST_MARKER=str(marker))
    res = run_child(env=env)
    recs = [r for r in res["all"] if r["path"] == str(lib)]
    assert len(recs) == 1 and recs[0]["status"] == "loaded", res["all"]
    assert recs[0]["source"] == f"PLUGGABLE_PLUGIN_PATH ({lib})"
    assert marker.exists()
    assert f"PLUGGABLE_PLUGIN_PATH entry {missing} does not exist" in res["stderr"]
    assert "PLUGGABLE_PLUGIN_PATH entry 'rel' is ignored" in res["stderr"]


@pytest.mark.parametrize("xdg,home,found", [
    ("data", ".", False),          # both relative: no user directory
    ("data", "", False),           # an empty HOME is relative too
    (None, "home", False),
    ("data", "ABS", True),         # a relative XDG_DATA_HOME falls back to $HOME
], ids=["both-relative", "empty-home", "relative-home", "relative-xdg-absolute-home"])
def test_user_directory_is_never_relative_to_the_current_directory(tmp_path, xdg, home, found):
    cwd, abs_home = tmp_path / "cwd", tmp_path / "abshome"
    lib = build("constructor_marker")
    for base in (cwd / "data", cwd / ".local" / "share", cwd / "home" / ".local" / "share",
                 abs_home / ".local" / "share"):
        _copy(lib, base / "pluggable" / "plugins")
    marker = tmp_path / "marker"
    env = clean_env(PLUGGABLE_TEST_MARKER=str(marker),
                    HOME=str(abs_home) if home == "ABS" else home)
    env.pop("XDG_DATA_HOME", None)
    if xdg is not None:
        env["XDG_DATA_HOME"] = xdg
    res = run_child(env=env, cwd=str(cwd))
    loaded = [r["path"] for r in res["all"] if r["device_type"] == "MINI"]
    if found:
        assert loaded == [str(abs_home / ".local/share/pluggable/plugins/libconstructor_marker.so")]
        assert marker.exists()
    else:
        assert loaded == [] and not marker.exists(), loaded
    if xdg is not None:
        assert "XDG_DATA_HOME='data' is ignored" in res["stderr"]


def _planted_distribution(site: pathlib.Path, marker: pathlib.Path, plugin: pathlib.Path):
    (site / "planted_plugin_mod.py").write_text(
        f"open({str(marker)!r}, 'a').write('imported\\n')\nPATH = {str(plugin)!r}\n")
    info = site / "planted_plugin-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: planted-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[pluggable.plugins]\nplanted = planted_plugin_mod:PATH\n")


def test_distribution_in_the_current_directory_is_not_an_entry_point(tmp_path):
    """python -c puts '' (the current directory) first on sys.path; a
    distribution found only there is not read, so its module is never
    imported. The same distribution on an absolute PYTHONPATH entry is."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    plugin = _copy(build("good_mini"), tmp_path / "plugins")
    marker = tmp_path / "marker"
    _planted_distribution(cwd, marker, plugin)
    res = run_child(env=clean_env(), cwd=str(cwd))
    assert not marker.exists(), "a module of the current directory was imported"
    assert not any(r["source"].startswith("entry point planted") for r in res["all"])
    # python -m (the current directory as an absolute sys.path[0]) and
    # PYTHONPATH=. neither
    for args, env in ((["-m", "pluggable", "plugins", "--json"], clean_env()),
                      (["-c", "import pluggable as pg; pg.plugins()"],
                       clean_env(PYTHONPATH="."))):
        proc = subprocess.run([sys.executable, *args], cwd=str(cwd), env=env,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert not marker.exists(), args
    # the script's own directory (python script.py) is searched
    (cwd / "main.py").write_text("import pluggable as pg\n"
                                 "print([r.source for r in pg.plugins()])\n")
    proc = subprocess.run([sys.executable, "main.py"], cwd=str(cwd), env=clean_env(),
                          capture_output=True, text=True, timeout=120)
    assert "entry point planted" in proc.stdout, proc.stdout + proc.stderr
    assert marker.exists()


def test_os_error_while_opening_is_a_quarantine_naming_the_file(tmp_path):
    """A file replaced by another process while it is opened and checked can
    make the kernel answer EINVAL; that is the plugin's quarantine reason."""
    lib = _copy(build("good_mini"), tmp_path / "plugins")
    extra = f"""
import errno, os
real_fstat = os.fstat
def fstat(fd):
    raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
os.fstat = fstat
try:
    out["rec"] = pg.load_plugin({str(lib)!r}).to_dict()
finally:
    os.fstat = real_fstat
"""
    res = run_child(extra=extra)
    assert "extra_error" not in res, res["extra_error"]
    rec = res["rec"]
    assert rec["status"] == "quarantined", rec
    assert f"cannot open and check {lib}: Invalid argument (errno 22)" in rec["reason"], rec
    assert res["health"] == {"MY_DEVICE:0": True, "CPU:0": True}, res["health"]
