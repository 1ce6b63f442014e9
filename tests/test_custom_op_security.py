"""Custom ops never run code another user could have written: the compile
cache, cached libraries, sources, headers and given libraries all pass the
owner / mode / allow-list checks on the opened descriptor."""
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import pluggable as pg
from pluggable.custom_ops import aot, security
from custom_op_helpers import SRC, needs_cxx

pytestmark = needs_cxx
NOBODY = 65534

# An op whose library announces itself: its constructor writes MARK's path,
# and CustomAdd returns a + b + VALUE.
OP = r'''
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#ifndef MARK
#define MARK ""
#endif
#ifndef VALUE
#include "value.h"
#endif
__attribute__((constructor)) static void announce(void) {
  if (MARK[0]) { FILE *f = fopen(MARK, "w"); if (f) fclose(f); }
}
extern "C" int CustomAdd(int n, void **p, int *nd, int64_t **sh, const char **dt, void *s, void *x) {
  float *a = (float *)p[0], *b = (float *)p[1], *c = (float *)p[2];
  int64_t k = 1;
  for (int i = 0; i < nd[2]; i++) k *= sh[2][i];
  for (int64_t i = 0; i < k; i++) c[i] = a[i] + b[i] + (float)(VALUE);
  return 0;
}
'''


@pytest.fixture
def env(tmp_path, monkeypatch):
    """A private cache, an allow-list of one directory, fresh library table."""
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv(security.ENV, str(allowed))
    monkeypatch.setattr(aot, "_libs", {})
    return allowed


def rnd(*shape):
    return np.random.default_rng().standard_normal(shape).astype(np.float32)


def build(dst: Path, *defs: str) -> Path:
    src = dst.with_suffix(".cc")
    src.write_text(OP)
    subprocess.run(["c++", "-shared", "-fPIC", "-o", str(dst), str(src),
                    *[f"-D{d}" for d in defs]], check=True)
    src.unlink()
    dst.chmod(0o755)
    return dst


def source(d: Path, name: str, value: float | None = 1.0) -> Path:
    p = d / name
    p.write_text((f"#define VALUE {value}\n" if value is not None else "") + OP)
    return p


def run_add(spec: str, value: float, flags=()) -> None:
    op = pg.custom_op(spec, out_shape=lambda a, b: a, flags=flags)
    a, b = rnd(5), rnd(5)
    np.testing.assert_allclose(op(a, b).numpy(), a + b + value, rtol=1e-6)


@pytest.mark.parametrize("owner,mode,why", [(NOBODY, 0o700, "XDG_CACHE_HOME"),
                                            (None, 0o777, "chmod go-w")])
def test_cache_directory_of_another_user_or_writable_by_others_is_refused(
        env, tmp_path, owner, mode, why):
    cache = tmp_path / "xdg" / "pluggable" / "custom_ops"
    cache.mkdir(parents=True)
    cache.chmod(mode)
    if owner is not None:
        os.chown(cache, owner, owner)
    with pytest.raises(pg.errors.PermissionDeniedError, match=why) as e:
        run_add(f"{source(env, 'op.cc')}:CustomAdd", 1.0)
    assert str(cache) in str(e.value)


@pytest.mark.parametrize("plant", ["other-owner", "mode-0666", "symlink"])
def test_planted_cached_library_is_refused_and_never_runs(env, tmp_path, plant):
    src = source(env, "op.cc")
    run_add(f"{src}:CustomAdd", 1.0)
    cache = tmp_path / "xdg" / "pluggable" / "custom_ops"
    [so] = cache.glob("*.so")
    mark = tmp_path / "planted-ran"
    evil = build(tmp_path / "evil.so", f'MARK="{mark}"', "VALUE=1000")
    so.unlink()
    if plant == "symlink":
        so.symlink_to(evil)
    else:
        shutil.copy(evil, so)
        if plant == "other-owner":
            os.chown(so, NOBODY, NOBODY)
        else:
            so.chmod(0o666)
    aot._libs.clear()
    with pytest.raises(pg.errors.PermissionDeniedError):
        run_add(f"{src}:CustomAdd", 1.0)
    assert not mark.exists()


def test_symlink_swap_never_loads_a_library_from_outside_the_allow_list(env, tmp_path):
    """`allowed/x` flips between a real directory holding the good library
    and a symlink to a directory outside the list holding a planted one."""
    outside = tmp_path / "outside"
    outside.mkdir()
    mark = tmp_path / "planted-ran"
    build(outside / "lib.so", f'MARK="{mark}"', "VALUE=1000")
    real = env / "x"
    real.mkdir()
    build(real / "lib.so", "VALUE=1")
    hold, link = env / "x-hold", env / "x-link"
    stop = threading.Event()

    def swap():
        while not stop.is_set():
            os.rename(real, hold)
            os.symlink(outside, link)
            os.rename(link, real)
            time.sleep(0)
            os.unlink(real)
            os.rename(hold, real)
            time.sleep(0.0005)

    t = threading.Thread(target=swap)
    t.start()
    ran = refused = 0
    try:
        for _ in range(300):
            aot._libs.clear()
            try:
                op = pg.custom_op(f"{real}/lib.so:CustomAdd", out_shape=lambda a, b: a)
            except (pg.errors.PermissionDeniedError, pg.errors.NotFoundError) as e:
                refused += 1
                continue
            a, b = rnd(3), rnd(3)
            np.testing.assert_allclose(op(a, b).numpy(), a + b + 1, rtol=1e-6)
            ran += 1
    finally:
        stop.set()
        t.join()
    assert not mark.exists(), "a library from outside the allow-list ran"
    assert ran > 0


def test_fifo_is_refused_without_blocking(env):
    fifo = env / "op.so"
    os.mkfifo(fifo)
    out = []

    def load():
        try:
            pg.custom_op(f"{fifo}:CustomAdd", out_shape=lambda a, b: a)
        except pg.errors.PermissionDeniedError as e:
            out.append(e)

    t = threading.Thread(target=load, daemon=True)
    t.start()
    t.join(20)
    assert not t.is_alive(), "loading a FIFO blocked"
    assert out and "not a regular file" in str(out[0])


@pytest.mark.parametrize("where", ["outside", "world-writable", "other-owner"])
def test_unsafe_header_is_refused(env, tmp_path, where):
    inc = tmp_path / "inc" if where == "outside" else env / "inc"
    inc.mkdir()
    h = inc / "value.h"
    h.write_text("#define VALUE 2\n")
    if where == "world-writable":
        h.chmod(0o666)
    elif where == "other-owner":
        os.chown(h, NOBODY, NOBODY)
    src = source(env, "op.cc", value=None)
    with pytest.raises(pg.errors.PermissionDeniedError, match="header"):
        run_add(f"{src}:CustomAdd", 2.0, flags=[f"-I{inc}"])


def test_header_inside_the_allow_list_is_compiled_and_keyed(env):
    """A header found through -I is part of the cache key: changing it
    compiles again (the old library is not reused)."""
    inc = env / "inc"
    inc.mkdir()
    h = inc / "value.h"
    v1, v2 = np.random.default_rng().integers(1, 100, 2)
    h.write_text(f"#define VALUE {v1}\n")
    src = source(env, "op.cc", value=None)
    run_add(f"{src}:CustomAdd", float(v1), flags=[f"-I{inc}"])
    h.write_text(f"#define VALUE {v2 + 100}\n")
    aot._libs.clear()
    run_add(f"{src}:CustomAdd", float(v2 + 100), flags=[f"-I{inc}"])


@pytest.mark.parametrize("entry", [".", "allowed", ""])
def test_relative_allow_list_entry_is_refused(env, monkeypatch, entry):
    monkeypatch.chdir(env.parent)
    monkeypatch.setenv(security.ENV, os.pathsep.join([entry or "x/../allowed", str(env)]))
    with pytest.raises(pg.errors.PermissionDeniedError, match="absolute"):
        run_add(f"{source(env, 'op.cc')}:CustomAdd", 1.0)


def test_library_of_another_user_is_refused(env):
    lib = build(env / "lib.so", "VALUE=1")
    os.chown(lib, NOBODY, NOBODY)
    with pytest.raises(pg.errors.PermissionDeniedError, match="user id 65534"):
        pg.custom_op(f"{lib}:CustomAdd", out_shape=lambda a, b: a)


def test_unnamed_op_is_in_the_catalogue_under_a_derived_name(env, tmp_path):
    first = pg.custom_op(f"{build(env / 'one.so', 'VALUE=1')}:CustomAdd",
                         out_shape=lambda a, b: a)
    again = pg.custom_op(f"{env / 'one.so'}:CustomAdd", out_shape=lambda a, b: a)
    other = pg.custom_op(f"{build(env / 'two.so', 'VALUE=2')}:CustomAdd",
                         out_shape=lambda a, b: a)
    names = {e.qualified_name: e for e in pg.ops.list()}
    assert first.name == again.name and first.name.startswith("custom::CustomAdd")
    assert other.name != first.name and other.name.startswith("custom::CustomAdd_")
    assert names[first.name].op is again and names[other.name].op is other
    a, b = rnd(4), rnd(4)
    np.testing.assert_allclose(pg.ops.get(other.name)(a, b).numpy(), a + b + 2, rtol=1e-6)
    np.testing.assert_allclose(pg.ops.get(first.name)(a, b).numpy(), a + b + 1, rtol=1e-6)
