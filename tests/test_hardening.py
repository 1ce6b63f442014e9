"""Plugin hardening: discovery, validation and versioning, isolation, probe
mode, the security policy and the TF_* API boundary.

Every broken plugin is loaded in a child process (broken_plugins.run_child),
which also checks that MY_DEVICE and CPU still compute correctly next to it.
"""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import stat
import subprocess
import sys

import pytest

import pluggable as pg
from broken_plugins import HERE as CORPUS_DIR, build, clean_env, run_child

HOST_PLUGIN = pathlib.Path(pg.__file__).resolve().parent / "plugins" / "libpluggable_my_device.so"

pytestmark = pytest.mark.skipif(not HOST_PLUGIN.exists(),
                                reason="the host reference plugin is not built")


def _healthy(res: dict) -> None:
    assert res["health"] == {"MY_DEVICE:0": True, "CPU:0": True}, res["health"]


def _copy(src: pathlib.Path, dest_dir: pathlib.Path, name: str | None = None) -> pathlib.Path:
    dest_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(dest_dir, 0o755)
    dest = dest_dir / (name or src.name)
    shutil.copyfile(src, dest)
    os.chmod(dest, 0o755)
    return dest


# ----------------------------------------------------------------- the corpus

# (plugin, status, reason substring, rejected-registration substrings)
CORPUS = [
    ("no_entry_points", "quarantined",
     "exports neither SE_InitPlugin nor TF_InitKernel", []),
    ("init_error", "quarantined", "SE_InitPlugin failed: simulated init failure", []),
    ("null_required_callback", "quarantined", "SP_StreamExecutor.memcpy_htod is NULL", []),
    ("null_platform_fn", "quarantined", "SP_PlatformFns.create_device is NULL", []),
    ("struct_size_zero", "quarantined", "SP_Platform.struct_size is 0", []),
    ("wrong_major", "quarantined", "major versions must match", []),
    ("bad_device_type", "quarantined",
     'SP_Platform.type "my-device" is not a valid device type', []),
    ("cpu_device_type", "quarantined", "CPU is reserved", []),
    ("bad_platform_name", "quarantined",
     'SP_Platform.name "my platform" is not a valid platform name', []),
    ("negative_devices", "quarantined", "get_device_count reported -1 devices", []),
    ("create_device_fails", "quarantined",
     "SP_PlatformFns.create_device failed for device 0: no such hardware", []),
    ("unresolved_symbol", "quarantined",
     "undefined symbol: pg_test_symbol_nobody_defines", []),
    ("short_stream_executor", "quarantined",
     "SP_StreamExecutor.host_callback is required, but the plugin's "
     "SP_StreamExecutor.struct_size", []),
    ("partial_timers", "quarantined", "must be set all together", []),
    # TensorFlow's load-time rules (stream_executor.cc), applied unless
    # PLUGGABLE_LENIENT_PLUGINS=1
    ("no_destroy_platform", "quarantined",
     "SE_PlatformRegistrationParams.destroy_platform is NULL: TensorFlow refuses a plugin "
     "without it (\"'destroy_platform' field in SE_PlatformRegistrationParams must be set.\")",
     []),
    ("no_destroy_device_fns", "quarantined",
     "SP_PlatformFns.destroy_device_fns is NULL: TensorFlow refuses a plugin without it", []),
    ("no_memset32", "quarantined",
     "SP_StreamExecutor.memset32 is NULL: TensorFlow refuses a plugin without it", []),
    ("platform_name_digit", "quarantined",
     "SP_Platform.name \"MINI2\" has a digit: TensorFlow refuses it", []),
    ("core_minimum", "quarantined",
     "SE_PlatformRegistrationParams.destroy_platform is NULL", []),
    ("zero_devices", "loaded",
     "loaded with 0 devices: the plugin's SP_PlatformFns.get_device_count reported none", []),
    ("allocate_null", "loaded", "", []),
    ("unknown_op_kernel", "loaded", "", ["kernel for unknown op 'NoSuchOp' on MINI"]),
    ("bad_type_constraint", "loaded", "", [
        "type constraint on unknown attribute 'Q'",
        "type constraint on attribute 'transpose_a', which is a bool, not a type",
        "T=bool is not allowed by the op"]),
    ("null_compute_kernel", "loaded", "", ["compute_func is NULL"]),
    ("old_structs", "loaded", "", []),
    ("good_mini", "loaded", "", []),
]


def test_a_gpu_plugin_without_devices_says_what_this_process_sees(monkeypatch):
    from pluggable.plugins import loader
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert "CUDA_VISIBLE_DEVICES='-1' hides every GPU" in loader.no_devices_reason("GPU")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    real_exists = os.path.exists
    for driver in (False, True):
        monkeypatch.setattr(os.path, "exists", lambda p, d=driver: d if p.startswith(
            "/proc/driver/nvidia") else real_exists(p))
        why = loader.no_devices_reason("GPU")
        assert why.startswith("loaded with 0 devices")
        assert ("no NVIDIA driver is loaded" in why) is not driver, why
        assert ("check `nvidia-smi`" in why) is driver, why
    assert "hardware is present" in loader.no_devices_reason("MINI")


@pytest.mark.parametrize("name,status,reason,rejected", CORPUS, ids=[c[0] for c in CORPUS])
def test_corpus_plugin(name, status, reason, rejected):
    path = build(name)
    res = run_child([path])
    rec = res["records"][0]
    assert rec["status"] == status, rec
    assert reason in rec["reason"], rec
    assert len(rec["rejected"]) == len(rejected), rec
    for want, got in zip(rejected, rec["rejected"]):
        assert want in got, rec
    _healthy(res)


def test_corpus_is_large_enough():
    broken = [p for p in CORPUS_DIR.glob("*.c")
              if p.stem not in ("good_mini", "old_structs", "core_minimum", "waiting_collective")]
    assert len(broken) >= 15


@pytest.mark.parametrize("name", ["no_destroy_platform", "no_destroy_device_fns", "no_memset32",
                                  "platform_name_digit", "core_minimum"])
def test_lenient_mode_loads_what_only_tensorflow_refuses(name):
    """PLUGGABLE_LENIENT_PLUGINS=1 keeps only the core's own rules: the core's
    defaults (fills, host memory) serve the plugin, and it computes."""
    extra = """
x = np.arange(-3, 3, dtype=np.float32)
with pg.device("MINI:0"):
    with pg.testing.expect_kernel("Neg", "MINI"):
        out["neg"] = pg.raw_ops.Neg(x=pg.constant(x)).numpy().tolist()
    out["zeros"] = pg.zeros([5], pg.int32).numpy().tolist()
"""
    res = run_child([build(name)], extra=extra, env=clean_env(PLUGGABLE_LENIENT_PLUGINS="1"))
    rec = res["records"][0]
    assert rec["status"] == "loaded" and rec["reason"] == "", rec
    assert "extra_error" not in res, res["extra_error"]
    assert res["neg"] == [3.0, 2.0, 1.0, -0.0, -1.0, -2.0]
    assert res["zeros"] == [0] * 5
    _healthy(res)


def test_quarantined_plugin_reports_no_devices():
    res = run_child([build("create_device_fails")],
                    extra="out['types'] = [d.device_type for d in pg.list_physical_devices()]")
    assert "MINI" not in res["types"]
    assert res["records"][0]["device_count"] == 0


def test_zero_devices_is_legal():
    res = run_child([build("zero_devices")],
                    extra="out['n'] = len(pg.list_physical_devices('MINI'))")
    rec = res["records"][0]
    assert rec["status"] == "loaded" and rec["device_count"] == 0
    assert rec["reason"].startswith("loaded with 0 devices"), rec
    assert res["n"] == 0
    _healthy(res)


def test_allocate_null_raises_resource_exhausted():
    extra = """
try:
    pg.get_device("MINI:0").allocate(1024)
    out["alloc"] = "no error"
except pg.errors.ResourceExhaustedError as exc:
    out["alloc"] = str(exc)
out["empty"] = pg.get_device("MINI:0").allocate(0).nbytes
"""
    res = run_child([build("allocate_null")], extra=extra)
    assert "out of memory on /device:MINI:0" in res["alloc"], res
    assert res["empty"] == 0
    _healthy(res)


def test_not_a_shared_library(tmp_path):
    fake = tmp_path / "libnot_a_library.so"
    fake.write_text("this is text, not an ELF shared object\n")
    os.chmod(fake, 0o644)
    res = run_child([fake])
    rec = res["records"][0]
    assert rec["status"] == "quarantined"
    # Refused by the check of its ELF dynamic section, before dlopen.
    assert "is not a shared library" in rec["reason"] and "no ELF magic" in rec["reason"], rec
    _healthy(res)


def test_missing_file_is_quarantined(tmp_path):
    res = run_child([tmp_path / "libdoes_not_exist.so"])
    assert res["records"][0]["status"] == "quarantined"
    assert "no such file" in res["records"][0]["reason"]


def test_duplicate_device_type_names_both_files():
    path = build("duplicate_device_type")
    res = run_child([path])
    rec = res["records"][0]
    assert rec["status"] == "quarantined"
    assert f"device type 'MY_DEVICE' of {os.path.realpath(path)}" in rec["reason"]
    assert f"is already provided by {HOST_PLUGIN}" in rec["reason"]
    _healthy(res)


def test_kernel_for_another_plugins_device_is_rejected():
    """A kernel-only plugin may add kernels to a device type, but not replace
    the kernels registered for it: MY_DEVICE keeps its own AddV2."""
    res = run_child([build("foreign_kernel")])
    rec = res["records"][0]
    assert rec["status"] == "loaded"
    assert any("duplicate kernel for op 'AddV2' on MY_DEVICE" in r and str(HOST_PLUGIN) in r
               for r in rec["rejected"]), rec
    _healthy(res)


def test_many_broken_plugins_at_import(tmp_path):
    """`import pluggable` never fails because of plugins, whatever is in the
    plugin path; the good ones keep working."""
    d = tmp_path / "plugins"
    for name, *_ in CORPUS:
        _copy(build(name), d)
    (d / "libgarbage.so").write_bytes(b"\x7fELF garbage")
    os.chmod(d / "libgarbage.so", 0o644)
    res = run_child(env=clean_env(PLUGGABLE_PLUGIN_PATH=str(d)))
    by_name = {pathlib.Path(r["path"]).name: r for r in res["all"]}
    for name, status, reason, _ in CORPUS:
        rec = by_name[f"lib{name}.so"]
        # Several corpus plugins claim device type MINI: the first one found
        # (in name order) that gets that far wins, the later ones are
        # quarantined as duplicates.
        duplicate = "is already provided by" in rec["reason"]
        if status == "quarantined":
            assert rec["status"] == "quarantined", rec
            assert reason in rec["reason"] or duplicate, rec
        elif rec["status"] != "loaded":
            assert duplicate, rec
    assert by_name["liballocate_null.so"]["status"] == "loaded"
    assert by_name["libgarbage.so"]["status"] == "quarantined"
    _healthy(res)


# ------------------------------------------------------- versioning and ABI

def test_older_smaller_structs_load_with_fields_absent():
    extra = """
d = pg.get_device("MINI:0")
out["pci"] = d.pci_bus_id
out["vendor"] = d.vendor
out["bfc"] = int(d._c.platform.platform.use_bfc_allocator)
out["growth"] = int(d._c.platform.platform.force_memory_growth)
with pg.device("MINI:0"):
    out["neg"] = pg.raw_ops.Neg(x=pg.constant([1.5, -2.0])).numpy().tolist()
"""
    res = run_child([build("old_structs")], extra=extra)
    assert res["records"][0]["status"] == "loaded", res["records"][0]
    assert res["pci"] is None            # past SP_Device.struct_size: absent
    assert res["vendor"] == "pluggable tests"
    assert res["bfc"] == 0 and res["growth"] == 0
    assert res["neg"] == [-1.5, 2.0]


def test_record_fields():
    res = run_child([build("good_mini")])
    rec = res["records"][0]
    assert rec["status"] == "loaded"
    assert rec["abi_version"] == "0.0.1"
    assert rec["platform_name"] == "MINI_PLATFORM" and rec["device_type"] == "MINI"
    assert rec["device_count"] == 1 and rec["kernels"] == 1 and rec["ops"] == 0
    assert rec["source"] == "load_plugin"


# --------------------------------------------------------------- probe mode

def test_probe_quarantines_a_crash():
    res = run_child([build("crash_at_load")], probe=True)
    rec = res["records"][0]
    assert rec["status"] == "quarantined"
    assert "crashed with SIGSEGV while loading" in rec["reason"], rec
    assert "SE_InitPlugin" in rec["reason"]
    _healthy(res)


def test_probe_quarantines_a_hang():
    res = run_child([build("hang_at_load")], probe=True,
                    env=clean_env(PLUGGABLE_PROBE_TIMEOUT="3"))
    rec = res["records"][0]
    assert rec["status"] == "quarantined"
    assert "did not finish within 3 s" in rec["reason"], rec
    _healthy(res)


def test_probe_env_var_at_import(tmp_path):
    d = tmp_path / "plugins"
    _copy(build("crash_at_load"), d)
    _copy(build("good_mini"), d)
    res = run_child(env=clean_env(PLUGGABLE_PLUGIN_PATH=str(d), PLUGGABLE_PROBE_PLUGINS="1"),
                    extra="out['neg'] = pg.raw_ops.Neg(x=pg.constant([2.0])).numpy().tolist()")
    by_name = {pathlib.Path(r["path"]).name: r for r in res["all"]}
    assert "crashed with SIGSEGV" in by_name["libcrash_at_load.so"]["reason"]
    assert by_name["libgood_mini.so"]["status"] == "loaded"
    assert res["neg"] == [-2.0]
    _healthy(res)


def test_probe_reports_a_quarantine_without_loading_in_process():
    res = run_child([build("init_error")], probe=True)
    rec = res["records"][0]
    assert rec["status"] == "quarantined"
    assert "SE_InitPlugin failed: simulated init failure" in rec["reason"]


# ----------------------------------------------------------------- discovery

def test_search_order_and_sources(tmp_path):
    env_dir = tmp_path / "env"
    xdg = tmp_path / "xdg"
    _copy(build("good_mini"), env_dir)
    _copy(build("zero_devices"), xdg / "pluggable" / "plugins")
    res = run_child(env=clean_env(PLUGGABLE_PLUGIN_PATH=str(env_dir), XDG_DATA_HOME=str(xdg)))
    names = [pathlib.Path(r["path"]).name for r in res["all"]]
    sources = {pathlib.Path(r["path"]).name: r["source"] for r in res["all"]}
    assert names.index("libgood_mini.so") < names.index("libpluggable_my_device.so") \
        < names.index("libzero_devices.so")
    assert sources["libgood_mini.so"].startswith("PLUGGABLE_PLUGIN_PATH")
    assert sources["libpluggable_my_device.so"] == "package directory"
    assert sources["libzero_devices.so"] == "user directory"


def test_each_file_loaded_once(tmp_path):
    d1, d2 = tmp_path / "one", tmp_path / "two"
    real = _copy(build("good_mini"), d1)
    d2.mkdir()
    os.chmod(d2, 0o755)
    (d2 / "liblink.so").symlink_to(real)
    path = os.pathsep.join([str(d1), str(d1), str(d2), str(d1) + "/"])
    extra = f"out['again'] = pg.load_plugin({str(d2 / 'liblink.so')!r}).id"
    res = run_child(env=clean_env(PLUGGABLE_PLUGIN_PATH=path), extra=extra)
    minis = [r for r in res["all"] if r["device_type"] == "MINI"]
    assert len(minis) == 1 and minis[0]["path"] == str(real) and minis[0]["status"] == "loaded"
    assert len(res["all"]) == len({r["path"] for r in res["all"]})


def test_current_directory_is_never_searched(tmp_path):
    cwd = tmp_path / "cwd"
    _copy(build("good_mini"), cwd)
    for plugin_path in ("", os.pathsep, ".", f"{os.pathsep}.{os.pathsep}plugins"):
        res = run_child(env=clean_env(PLUGGABLE_PLUGIN_PATH=plugin_path), cwd=str(cwd))
        assert not any("good_mini" in r["path"] for r in res["all"]), (plugin_path, res["all"])


def _fake_distribution(site: pathlib.Path, value: str, module_body: str) -> None:
    (site / "fake_plugin_pkg").mkdir(parents=True)
    (site / "fake_plugin_pkg" / "__init__.py").write_text(module_body)
    info = site / "fake_plugin_pkg-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-plugin-pkg\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[pluggable.plugins]\nfake = {value}\n")


@pytest.mark.parametrize("value,body", [
    ("fake_plugin_pkg:PLUGIN", "PLUGIN = {path!r}\n"),
    ("fake_plugin_pkg:plugin_dirs", "def plugin_dirs():\n    return [{dir!r}]\n"),
], ids=["attribute-path", "callable-dirs"])
def test_entry_point_plugins(tmp_path, value, body):
    plugin = _copy(build("good_mini"), tmp_path / "pkgplugins")
    site = tmp_path / "site"
    _fake_distribution(site, value, body.format(path=str(plugin), dir=str(plugin.parent)))
    res = run_child(env=clean_env(PYTHONPATH=str(site)))
    recs = [r for r in res["all"] if r["path"] == str(plugin)]
    assert len(recs) == 1 and recs[0]["status"] == "loaded", res["all"]
    assert recs[0]["source"] == f"entry point fake = {value}"
    assert [r["path"] for r in res["all"]].index(str(plugin)) == len(res["all"]) - 1
    _healthy(res)


def test_broken_entry_point_never_breaks_import(tmp_path):
    site = tmp_path / "site"
    _fake_distribution(site, "fake_plugin_pkg:boom",
                       "def boom():\n    raise RuntimeError('no plugin here')\n")
    res = run_child(env=clean_env(PYTHONPATH=str(site)))
    bad = [r for r in res["all"] if r["source"].startswith("entry point fake")]
    assert bad and bad[0]["status"] == "quarantined" and "no plugin here" in bad[0]["reason"]
    _healthy(res)


# ------------------------------------------------------------------- security

def _marker_setup(tmp_path):
    lib = build("constructor_marker")
    allowed, outside, evil = tmp_path / "allowed", tmp_path / "outside", tmp_path / "allowed_evil"
    out_lib = _copy(lib, outside)
    evil_lib = _copy(lib, evil)
    allowed.mkdir()
    os.chmod(allowed, 0o755)
    link = allowed / "liblinked.so"
    link.symlink_to(out_lib)
    marker = tmp_path / "marker"
    return allowed, out_lib, evil_lib, link, marker


def test_allowlist_refuses_outside_files_without_opening(tmp_path):
    allowed, out_lib, evil_lib, link, marker = _marker_setup(tmp_path)
    allow = os.pathsep.join([str(allowed), str(HOST_PLUGIN.parent)])
    env = clean_env(PLUGGABLE_PLUGIN_ALLOWLIST=allow, PLUGGABLE_TEST_MARKER=str(marker),
                    PLUGGABLE_PLUGIN_PATH=os.pathsep.join(
                        [str(allowed), str(out_lib.parent), str(evil_lib.parent)]))
    res = run_child([out_lib, link, evil_lib], env=env)
    res_probe = run_child([link], env=env, probe=True)
    assert not marker.exists(), "a refused plugin was opened"
    for rec in res["records"] + res_probe["records"]:
        assert rec["status"] == "skipped", rec
        assert "outside the directories of PLUGGABLE_PLUGIN_ALLOWLIST" in rec["reason"]
    assert f"through the symlink {link}" in res["records"][1]["reason"]
    assert not any(r["status"] == "loaded" and r["device_type"] == "MINI" for r in res["all"])
    _healthy(res)


def test_allowlist_allows_files_inside(tmp_path):
    allowed = tmp_path / "allowed"
    lib = _copy(build("constructor_marker"), allowed / "sub")
    marker = tmp_path / "marker"
    env = clean_env(PLUGGABLE_PLUGIN_ALLOWLIST=str(allowed), PLUGGABLE_TEST_MARKER=str(marker))
    res = run_child([lib], env=env)
    assert res["records"][0]["status"] == "loaded"
    assert marker.exists()
    # The package directory is outside this allow-list: MY_DEVICE is refused.
    host = [r for r in res["all"] if r["path"] == str(HOST_PLUGIN)]
    assert host and host[0]["status"] == "skipped"


@pytest.mark.parametrize("mode,dir_mode,why", [
    (0o775, 0o755, "writable by group or others"),
    (0o757, 0o755, "writable by group or others"),
    (0o755, 0o777, "world-writable directory"),
], ids=["group-writable-file", "other-writable-file", "world-writable-dir"])
def test_insecure_permissions_are_refused(tmp_path, mode, dir_mode, why):
    d = tmp_path / "plugins"
    lib = _copy(build("constructor_marker"), d)
    os.chmod(lib, mode)
    os.chmod(d, dir_mode)
    marker = tmp_path / "marker"
    try:
        res = run_child([lib], env=clean_env(PLUGGABLE_TEST_MARKER=str(marker)))
        assert res["records"][0]["status"] == "skipped"
        assert why in res["records"][0]["reason"]
        assert "PLUGGABLE_ALLOW_INSECURE_PLUGINS=1" in res["records"][0]["reason"]
        assert not marker.exists()
        res = run_child([lib], env=clean_env(PLUGGABLE_TEST_MARKER=str(marker),
                                             PLUGGABLE_ALLOW_INSECURE_PLUGINS="1"))
        assert res["records"][0]["status"] == "loaded"
        assert marker.exists()
    finally:
        os.chmod(d, 0o755)


def test_skip_list(tmp_path):
    lib = _copy(build("good_mini"), tmp_path / "p")
    res = run_child([lib], env=clean_env(PLUGGABLE_SKIP_PLUGINS="libother.so, libgood_mini.so"))
    assert res["records"][0]["status"] == "skipped"
    assert "PLUGGABLE_SKIP_PLUGINS" in res["records"][0]["reason"]


def test_disable_plugins():
    res = run_child(env=clean_env(PLUGGABLE_DISABLE_PLUGINS="1"),
                    extra="out['types'] = [d.device_type for d in pg.list_physical_devices()]")
    assert res["all"] == [] and res["types"] == ["CPU"]


# -------------------------------------------------------------- API boundary

# Expected TF_Code (or 1 = "documented failure value returned") per call of
# tests/broken_plugins/hostile_api.c.
OK, INVALID, NOT_FOUND, OUT_OF_RANGE, UNIMPLEMENTED, RETURNED = 0, 3, 5, 11, 12, 1
HOSTILE_EXPECTED = {
    "init": {
        "register_null_op_name": NOT_FOUND, "type_constraint_null_builder": INVALID,
        "register_null_builder": INVALID, "register_with_kernel_def": UNIMPLEMENTED,
        "register_null_op_def": INVALID, "get_input_null_ctx": INVALID,
        "get_input_null_ctx_clears_output": RETURNED, "get_input_null_out": INVALID,
        "allocate_output_null_ctx_ret": RETURNED, "allocate_output_null_ctx": INVALID,
        "get_stream_null_ctx": INVALID, "get_attr_null_ctx": INVALID,
        "num_inputs_null_ctx": RETURNED, "new_tensor_negative_dim": RETURNED,
        "new_tensor_wrong_len": RETURNED, "new_tensor_null_dims": RETURNED,
        "new_tensor_bad_dtype": RETURNED, "allocate_tensor_negative_rank": RETURNED,
        "allocate_tensor_too_many_dims": RETURNED, "bitcast_size_mismatch": INVALID,
        "bitcast_null": INVALID, "set_shape_negative_ignored": RETURNED,
        "dim_out_of_range": RETURNED, "dim_null": RETURNED, "num_dims_null": RETURNED,
        "byte_size_null": RETURNED, "data_null": RETURNED, "get_code_null": INVALID,
        "message_null": RETURNED, "register_good_kernel": OK,
    },
    "create": {
        "int32_of_type_attr": INVALID, "missing_attr": NOT_FOUND, "null_output": INVALID,
        "list_of_scalar_attr": INVALID, "string_of_type_attr": INVALID,
        "size_of_missing_attr": NOT_FOUND, "size_null_outputs": INVALID,
        "has_attr_null_name": INVALID, "tensor_attr": NOT_FOUND, "good_type_attr": OK,
        "good_type_value": RETURNED,
    },
    "compute": {
        "input_negative_index": OUT_OF_RANGE, "input_index_past_end": OUT_OF_RANGE,
        "input_null_out": INVALID, "input_dtype_out_of_range": RETURNED,
        "requested_input_out_of_range": RETURNED, "allocate_bad_index_ret": RETURNED,
        "allocate_bad_index": OUT_OF_RANGE, "allocate_negative_index": OUT_OF_RANGE,
        "allocate_negative_dim": INVALID, "allocate_len_mismatch": INVALID,
        "allocate_wrong_dtype": INVALID, "allocate_null_dims": INVALID,
        "allocate_too_many_dims": INVALID, "allocate_negative_rank": INVALID,
        "temp_negative_dim": INVALID, "temp_bad_dtype": INVALID, "temp_null_ctx": INVALID,
        "forward_bad_index": OUT_OF_RANGE, "set_output_null": INVALID,
        "set_output_bad_index": OUT_OF_RANGE, "set_output_host_tensor": INVALID,
        "mutable_output_bad_index": OUT_OF_RANGE, "host_memory_input_bad_index": OUT_OF_RANGE,
        "host_memory_output_bad_index": OUT_OF_RANGE,
    },
}


def test_hostile_plugin_gets_error_codes_not_crashes(tmp_path):
    out_file = tmp_path / "codes.txt"
    extra = """
with pg.device("HOSTILE:0"):
    out["neg"] = pg.raw_ops.Neg(x=pg.constant([1.0, -3.0])).numpy().tolist()
    out["neg2"] = pg.raw_ops.Neg(x=pg.constant([[4.0]])).numpy().tolist()
"""
    res = run_child([build("hostile_api")], extra=extra,
                    env=clean_env(PLUGGABLE_HOSTILE_OUT=str(out_file)))
    assert res["returncode"] == 0
    assert "extra_error" not in res, res.get("extra_error")
    assert res["neg"] == [-1.0, 3.0] and res["neg2"] == [[-4.0]]
    rec = res["records"][0]
    assert rec["status"] == "loaded" and rec["kernels"] == 1
    assert rec["rejected"] == ["kernel for unknown op '' on HOSTILE: define the op first "
                               "(built-in op or TF_RegisterOpDefinition before the kernel)"]
    got: dict = {}
    for line in out_file.read_text().splitlines():
        phase, check, code = line.split()
        got.setdefault(phase, {})[check] = int(code)
    # create runs once per kernel instance; compute twice (two calls): the
    # last value of each check is kept, and all must match.
    for phase, expected in HOSTILE_EXPECTED.items():
        assert got.get(phase) == expected, (phase, got.get(phase))
    _healthy(res)


# ---------------------------------------------------------------- CLI table

def test_plugins_table(capsys):
    from pluggable.tools import cli
    assert cli.plugins_main([]) == 0
    text = capsys.readouterr().out
    assert "STATUS" in text and "DEVICE TYPE" in text and "KERNELS" in text
    assert str(HOST_PLUGIN) in text and "MY_DEVICE" in text


def test_plugins_json_cli():
    proc = subprocess.run([sys.executable, "-m", "pluggable", "plugins", "--json"],
                          env=clean_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    host = [r for r in data if r["path"] == str(HOST_PLUGIN)][0]
    assert host["status"] == "loaded" and host["device_type"] == "MY_DEVICE"
    assert set(host) >= {"path", "status", "reason", "abi_version", "platform_name",
                         "device_type", "device_count", "kernels", "ops"}


def test_records_in_process():
    recs = pg.plugins()
    host = [r for r in recs if r.path == str(HOST_PLUGIN)]
    assert host and host[0].status == "loaded" and host[0].kernels > 0
    assert pg.load_plugin(str(HOST_PLUGIN)) is host[0]


def test_registration_is_closed_outside_init_kernel():
    lib = build("late_register")
    extra = f"""
import ctypes
from pluggable.framework import registry
import logging
logged = []
handler = logging.Handler()
handler.emit = lambda r: logged.append(r.getMessage())
logging.getLogger("pluggable.plugins").addHandler(handler)
so = ctypes.CDLL({str(lib)!r})
out["thread_code"] = ctypes.c_int.in_dll(so, "thread_code").value
before = len(registry.KERNELS[("AddV2", "MY_DEVICE")])
out["late_code"] = so.late_register()
out["added"] = len(registry.KERNELS[("AddV2", "MY_DEVICE")]) - before
out["logged"] = logged
x = pg.constant([1.0, 2.0])
with pg.device("MY_DEVICE:0"):
    with pg.testing.expect_kernel("AddV2", "MY_DEVICE"):
        out["sum"] = pg.raw_ops.AddV2(x=x, y=x).numpy().tolist()
"""
    res = run_child([lib], extra=extra)
    assert "extra_error" not in res, res["extra_error"]
    rec = res["records"][0]
    assert rec["status"] == "loaded", rec
    rejected = rec["rejected"]
    assert len(rejected) == 2, rejected
    assert "the op name is longer than 127 characters" in rejected[0]
    assert "the label is longer than 63 characters" in rejected[1]
    FAILED_PRECONDITION = 9
    # From its own thread or after init, a call carries no plugin: it is
    # refused and logged.
    assert res["thread_code"] == FAILED_PRECONDITION
    assert res["late_code"] == FAILED_PRECONDITION and res["added"] == 0
    assert any("kernel for op 'AddV2' on MY_DEVICE" in m and "registration is open only "
               "while the plugin's TF_InitKernel runs" in m for m in res["logged"]), res["logged"]
    assert res["sum"] == [2.0, 4.0]
    _healthy(res)


def test_long_device_type_is_refused_with_the_limit():
    from plugin_build import build_plugin
    long_type = "L" * 70
    lib = build_plugin(CORPUS_DIR / "good_mini.c", "long_device_type",
                       extra_flags=(f"-I{CORPUS_DIR}", f'-DMINI_DEVICE_TYPE="{long_type}"'))
    res = run_child([lib])
    rec = res["records"][0]
    assert rec["status"] == "quarantined", rec
    assert "at most 63 characters" in rec["reason"] and long_type in rec["reason"], rec
    _healthy(res)
