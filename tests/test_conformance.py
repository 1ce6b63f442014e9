"""The conformance kit (``python -m pluggable check``): the reference plugin
and the correct test plugins pass it, every broken plugin fails it with its
specific reason, and crashes and hangs are reported, not suffered."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

import pluggable as pg
from broken_plugins import build, clean_env
from pluggable.tools import check

HOST_PLUGIN = pathlib.Path(pg.__file__).resolve().parent / "plugins" / "libpluggable_my_device.so"

pytestmark = pytest.mark.skipif(not HOST_PLUGIN.exists(),
                                reason="the host reference plugin is not built")

DEVICE_CHECKS = {"allocation (core)", "allocation (plugin)", "sync copies", "async copies",
                 "fills", "stream ordering", "event states", "timers", "host callback",
                 "stream errors", "native stream", "allocator stats"}


def _suite(path, env: dict | None = None, **kw) -> dict[str, check.CheckResult]:
    env_before = dict(os.environ)
    try:
        # The suite child inherits the environment: keep PLUGGABLE_* out of it.
        for k in [k for k in os.environ if k.startswith("PLUGGABLE_")]:
            del os.environ[k]
        os.environ.update(env or {})
        results = check.run_suite(str(path), **kw)
    finally:
        os.environ.clear()
        os.environ.update(env_before)
    return {r.name: r for r in results}


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pluggable", "check", *args], env=clean_env(),
                          capture_output=True, text=True, timeout=timeout)


def test_host_plugin_passes_cli_table():
    proc = _cli(str(HOST_PLUGIN))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "PASSED" in out and "FAIL " not in out
    for name in ["load", "devices", *DEVICE_CHECKS, "kernel AddV2", "kernel Conv2D",
                 "kernel Sum", "kernel Cast"]:
        assert name in out, name


def test_host_plugin_passes_json():
    proc = _cli(str(HOST_PLUGIN), "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["passed"] is True and data["plugin"] == str(HOST_PLUGIN)
    by = {c["name"]: c for c in data["checks"]}
    # collectives need a group of devices at once: the kit skips them, saying
    # so (tests/test_distribute.py runs them)
    collective = lambda c: c["name"].startswith("kernel Collective")
    assert all(c["outcome"] == "pass" for c in data["checks"] if not collective(c)), \
        [c for c in data["checks"] if c["outcome"] != "pass"]
    assert all(c["outcome"] == "skip" and "collective" in c["detail"]
               for c in data["checks"] if collective(c))
    # One reason for all of an op's kernels: said once, with their count.
    for c in filter(collective, data["checks"]):
        assert c["detail"].count("is a collective") == 1 and " kernels: " in c["detail"], c
    assert DEVICE_CHECKS <= set(by)
    assert "match the CPU reference" in by["kernel MatMul"]["detail"]
    kernels = [c for c in data["checks"] if c["name"].startswith("kernel ")]
    assert len(kernels) >= 20  # every op the host plugin implements


@pytest.mark.parametrize("name", ["good_mini", "old_structs", "constructor_marker"])
def test_correct_test_plugins_pass(name):
    res = _suite(build(name))
    assert all(r.outcome != "fail" for r in res.values()), res
    assert "plugin provides: mem_zero, memset, memset32" in res["fills"].detail
    assert res["kernel Neg"].outcome == "pass"


def test_core_defaults_serve_a_minimal_plugin_in_lenient_mode():
    """core_minimum leaves the fills (and what else only TensorFlow requires)
    to the core; with PLUGGABLE_LENIENT_PLUGINS=1 it passes on the core's
    defaults."""
    res = _suite(build("core_minimum"), env={"PLUGGABLE_LENIENT_PLUGINS": "1"})
    assert all(r.outcome != "fail" for r in res.values()), res
    assert "none, core defaults" in res["fills"].detail
    assert res["kernel Neg"].outcome == "pass"


# (plugin, failing check, reason substring)
FAILURES = [
    ("no_entry_points", "load", "exports neither SE_InitPlugin nor TF_InitKernel"),
    ("init_error", "load", "SE_InitPlugin failed: simulated init failure"),
    ("null_required_callback", "load", "SP_StreamExecutor.memcpy_htod is NULL"),
    ("null_platform_fn", "load", "SP_PlatformFns.create_device is NULL"),
    ("struct_size_zero", "load", "SP_Platform.struct_size is 0"),
    ("wrong_major", "load", "major versions must match"),
    ("bad_device_type", "load", "is not a valid device type"),
    ("cpu_device_type", "load", "CPU is reserved"),
    ("bad_platform_name", "load", "is not a valid platform name"),
    ("negative_devices", "load", "reported -1 devices"),
    ("create_device_fails", "load", "create_device failed for device 0: no such hardware"),
    ("unresolved_symbol", "load", "undefined symbol: pg_test_symbol_nobody_defines"),
    ("short_stream_executor", "load", "SP_StreamExecutor.host_callback is required"),
    ("partial_timers", "load", "must be set all together"),
    ("zero_devices", "devices", "the plugin reports 0 devices"),
    ("allocate_null", "allocation (core)", "ResourceExhaustedError"),
    ("unknown_op_kernel", "registrations", "kernel for unknown op 'NoSuchOp'"),
    ("bad_type_constraint", "registrations", "3 registration(s) rejected"),
    ("null_compute_kernel", "registrations", "compute_func is NULL"),
    ("hostile_api", "registrations", "kernel for unknown op ''"),
    ("crash_at_load", "load", "crashed with SIGSEGV (in SE_InitPlugin)"),
    ("native_stream_overrun", "native stream", "wrote past struct_size"),
]


@pytest.mark.parametrize("name,check_name,reason", FAILURES, ids=[f[0] for f in FAILURES])
def test_broken_plugin_fails_with_its_reason(name, check_name, reason):
    res = _suite(build(name), timeout=120)
    assert check_name in res, list(res)
    assert res[check_name].outcome == "fail", res[check_name]
    assert reason in res[check_name].detail, res[check_name]


def test_allocate_null_fails_the_plugin_allocation_check_too():
    res = _suite(build("allocate_null"))
    assert "out of memory" in res["allocation (core)"].detail
    assert res["allocation (plugin)"].outcome == "fail"
    assert "SP_StreamExecutor.allocate(1) failed" in res["allocation (plugin)"].detail


def test_hang_is_reported_with_the_timeout():
    res = _suite(build("hang_at_load"), timeout=5)
    assert res["load"].outcome == "fail"
    assert "did not finish within 5 s" in res["load"].detail


def test_kernel_only_plugin_needs_its_device_plugin():
    lib = build("foreign_kernel")
    alone = _suite(lib)
    assert alone["devices"].outcome == "fail"
    assert "--with PATH" in alone["devices"].detail
    together = _suite(lib, with_plugins=(str(HOST_PLUGIN),))
    assert together["registrations"].outcome == "fail"
    assert "duplicate kernel for op 'AddV2' on MY_DEVICE" in together["registrations"].detail


def test_cli_exit_codes(tmp_path):
    proc = _cli(str(build("init_error")))
    assert proc.returncode == 1
    assert "FAILED" in proc.stdout and "simulated init failure" in proc.stdout
    proc = _cli(str(tmp_path / "libmissing.so"))
    assert proc.returncode == 2 and "no such file" in proc.stderr


def test_check_runs_isolated_from_installed_plugins():
    """The suite child loads only the plugin under test, so a plugin that
    claims MY_DEVICE is checked on its own instead of clashing."""
    res = _suite(build("duplicate_device_type"))
    assert res["load"].outcome == "pass", res["load"]
    assert res["kernel Neg"].outcome == "pass"
