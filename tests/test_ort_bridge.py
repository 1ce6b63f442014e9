"""The ONNX Runtime bridge (c_api/ort, pluggable/onnx/libpluggable_ort_ep.so):
our ORT ABI indices against the installed onnxruntime, the factories and
devices ONNX Runtime lists, the version gate, and bad input.

ONNX Runtime runs in a child process that does not import pluggable: the
bridge carries its own core, and a process that has loaded pluggable's core
already is refused (tested below)."""
from __future__ import annotations

import ctypes
import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime", reason="the bridge is for onnxruntime")

from pluggable.onnx.ort import ort_ep_library  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
ABI_HEADER = ROOT / "c_api" / "ort" / "pg_ort_abi.h"
ORT_LIB = next((pathlib.Path(ort.__file__).parent / "capi").glob("libonnxruntime.so*"))


def header_constants() -> dict[str, int]:
    """PG_ORT_* enum entries and #defines of our ABI header."""
    text = ABI_HEADER.read_text()
    found = {m.group(1): int(m.group(2))
             for m in re.finditer(r"\b(PG_ORT\w*)\s*=\s*(\d+)", text)}
    found.update({m.group(1): int(m.group(2))
                  for m in re.finditer(r"#define\s+(PG_ORT\w+)\s+(\d+)", text)})
    return found


def run_child(code: str, env: dict[str, str] | None = None, tree_on_path: bool = False) -> dict:
    """Runs `code` in a fresh interpreter (it prints one JSON line last).
    The child does not import pluggable; with `tree_on_path` this tree comes
    first on its path (for find_spec)."""
    full = dict(os.environ, **(env or {}))
    full.pop("PYTHONPATH", None)
    if tree_on_path:
        full["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120, env=full, cwd="/")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def table(api: int, index: int) -> int:
    return ctypes.cast(api + 8 * index, ctypes.POINTER(ctypes.c_void_p)).contents.value


def test_abi_indices_match_installed_onnxruntime():
    """Calls the OrtApi entries the bridge uses, by the header's indices,
    in the installed libonnxruntime: wrong indices give wrong results."""
    c = header_constants()
    lib = ctypes.CDLL(str(ORT_LIB))
    lib.OrtGetApiBase.restype = ctypes.POINTER(ctypes.c_void_p * 2)
    base = lib.OrtGetApiBase().contents
    get_api = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_uint32)(base[0])
    version = ctypes.CFUNCTYPE(ctypes.c_char_p)(base[1])()
    assert version.decode() == ort.__version__
    api = get_api(c["PG_ORT_MIN_API_VERSION"])
    assert api
    create = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p)(
        table(api, c["PG_ORT_CreateStatus"]))
    code = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)(table(api, c["PG_ORT_GetErrorCode"]))
    msg = ctypes.CFUNCTYPE(ctypes.c_char_p, ctypes.c_void_p)(
        table(api, c["PG_ORT_GetErrorMessage"]))
    release = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(table(api, c["PG_ORT_ReleaseStatus"]))
    text = f"probe {np.random.randint(1 << 30)}".encode()
    st = create(c["PG_ORT_NOT_IMPLEMENTED"], text)
    assert code(st) == c["PG_ORT_NOT_IMPLEMENTED"] and msg(st) == text
    release(st)
    # Key-value pairs: create, add, read back, release.
    kv = ctypes.c_void_p()
    ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p))(
        table(api, c["PG_ORT_CreateKeyValuePairs"]))(ctypes.byref(kv))
    ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p)(
        table(api, c["PG_ORT_AddKeyValuePair"]))(kv, b"k", text)
    got = ctypes.CFUNCTYPE(ctypes.c_char_p, ctypes.c_void_p, ctypes.c_char_p)(
        table(api, c["PG_ORT_GetKeyValue"]))(kv, b"k")
    assert got == text
    ctypes.CFUNCTYPE(None, ctypes.c_void_p)(table(api, c["PG_ORT_ReleaseKeyValuePairs"]))(kv)
    assert ctypes.CFUNCTYPE(ctypes.c_void_p)(table(api, c["PG_ORT_GetEpApi"]))()


LIST_DEVICES = """
    import ctypes, json, os, onnxruntime as ort
    lib = os.environ["BRIDGE"]
    ort.register_execution_provider_library("pluggable", lib)
    devs = [{"ep": d.ep_name, "vendor": d.ep_vendor, "meta": dict(d.ep_metadata),
             "hw": str(d.device.type)} for d in ort.get_ep_devices()]
    bridge = ctypes.CDLL(lib)
    bridge.pg_ort_report.restype = ctypes.c_char_p
    print(json.dumps({"devices": devs, "report": bridge.pg_ort_report().decode()}))
"""


def test_get_ep_devices_lists_my_device():
    out = run_child(LIST_DEVICES, {"BRIDGE": ort_ep_library()})
    ours = [d for d in out["devices"] if d["ep"].startswith("pluggable_")]
    assert [d["ep"] for d in ours] == ["pluggable_MY_DEVICE"], out
    meta = ours[0]["meta"]
    assert meta["pluggable.device"] == "/device:MY_DEVICE:0"
    assert meta["pluggable.device_type"] == "MY_DEVICE"
    assert meta["pluggable.platform"] == "MY_PLATFORM"
    assert ours[0]["vendor"] == "pluggable"
    assert "libpluggable_my_device.so: loaded" in out["report"]


def test_a_plugin_that_fails_to_load_is_reported_not_fatal(tmp_path):
    bad = tmp_path / "libbroken.so"
    bad.write_bytes(os.urandom(256))
    out = run_child(LIST_DEVICES, {"BRIDGE": ort_ep_library(),
                                   "PLUGGABLE_PLUGIN_PATH": str(tmp_path)})
    assert f"{bad}: quarantined: dlopen failed" in out["report"], out["report"]
    assert any(d["ep"] == "pluggable_MY_DEVICE" for d in out["devices"])


def test_a_plugin_the_cores_validation_rejects_is_left_out(tmp_path):
    """A plugin whose SE_InitPlugin fills nothing: the core's own validation
    (pg_platform_init) rejects it and its message is the recorded reason."""
    src = tmp_path / "empty.c"
    src.write_text('#include "stream_executor.h"\n'
                   "void SE_InitPlugin(SE_PlatformRegistrationParams* const p,\n"
                   "                   TF_Status* const s) { (void)p; (void)s; }\n")
    lib = tmp_path / "libempty_plugin.so"
    subprocess.run(["cc", "-shared", "-fPIC", f"-I{ROOT / 'c_api' / 'include'}", str(src), "-o",
                    str(lib)], check=True, capture_output=True)
    out = run_child(LIST_DEVICES, {"BRIDGE": ort_ep_library(),
                                   "PLUGGABLE_PLUGIN_PATH": str(lib)})
    line = next(ln for ln in out["report"].splitlines() if ln.startswith(str(lib)))
    assert line.startswith(f"{lib}: quarantined: ") and len(line) > len(str(lib)) + 20, line
    assert [d["ep"] for d in out["devices"] if d["ep"].startswith("pluggable_")] == \
        ["pluggable_MY_DEVICE"]


SESSION = """
    import ctypes, json, os, numpy as np, onnxruntime as ort
    from onnx import helper, TensorProto
    lib = os.environ["BRIDGE"]
    ort.register_execution_provider_library("pluggable", lib)
    bridge = ctypes.CDLL(lib)
    bridge.pg_ort_kernel_runs.restype = ctypes.c_int64

    def session(nodes, inputs, output, profile=None):
        g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                                           for n, s in inputs],
                              [helper.make_tensor_value_info(output, TensorProto.FLOAT, None)])
        model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        so = ort.SessionOptions()
        if profile:
            so.enable_profiling = True
            so.profile_file_prefix = profile
        so.add_provider_for_devices([d for d in ort.get_ep_devices()
                                     if d.ep_name == "pluggable_MY_DEVICE"], {})
        return ort.InferenceSession(model.SerializeToString(), so)
"""


def test_add_relu_matmul_runs_on_the_plugin_and_matches_cpu(tmp_path):
    """The three nodes run through MY_DEVICE's kernels (the bridge's run
    counter and ORT's profile name our EP for each), with ORT CPU's results
    on fresh random inputs."""
    out = run_child(textwrap.dedent(SESSION) + textwrap.dedent(f"""
        n = helper.make_node
        sess = session([n("Add", ["a", "b"], ["s"], name="add"), n("Relu", ["s"], ["r"], name="relu"),
                        n("MatMul", ["r", "w"], ["y"], name="mm")],
                       [("a", [5, 7]), ("b", [5, 7]), ("w", [7, 3])], "y",
                       profile={str(tmp_path / "prof")!r})
        rng = np.random.default_rng()
        errs, runs = [], []
        for _ in range(3):
            feeds = {{k: rng.standard_normal(s).astype(np.float32)
                     for k, s in (("a", (5, 7)), ("b", (5, 7)), ("w", (7, 3)))}}
            before = bridge.pg_ort_kernel_runs()
            y = sess.run(None, feeds)[0]
            runs.append(bridge.pg_ort_kernel_runs() - before)
            ref = np.maximum(feeds["a"] + feeds["b"], 0) @ feeds["w"]
            errs.append(float(np.abs(y - ref).max()))
        prof = json.load(open(sess.end_profiling()))
        providers = {{e["name"]: e["args"].get("provider") for e in prof
                     if e.get("cat") == "Node" and "provider" in e.get("args", {{}})}}
        print(json.dumps({{"errs": errs, "runs": runs, "providers": providers,
                          "eps": sess.get_providers()}}))
    """), {"BRIDGE": ort_ep_library()})
    assert max(out["errs"]) < 1e-5, out
    assert out["runs"] == [3, 3, 3], out
    assert out["eps"][0] == "pluggable_MY_DEVICE"
    ran_on = set(out["providers"].values())
    assert ran_on == {"pluggable_MY_DEVICE"}, out["providers"]


def test_unmapped_ops_fall_back_to_the_cpu_provider():
    """Add -> Cos -> Mul: Cos is not in the bridge's table and runs on
    ORT's CPU EP; Add and Mul run on the plugin."""
    out = run_child(textwrap.dedent(SESSION) + textwrap.dedent("""
        n = helper.make_node
        sess = session([n("Add", ["a", "b"], ["s"]), n("Cos", ["s"], ["t"]),
                        n("Mul", ["t", "b"], ["y"])], [("a", [6]), ("b", [6])], "y")
        rng = np.random.default_rng()
        a, b = (rng.standard_normal(6).astype(np.float32) for _ in range(2))
        before = bridge.pg_ort_kernel_runs()
        y = sess.run(None, {"a": a, "b": b})[0]
        print(json.dumps({"err": float(np.abs(y - np.cos(a + b) * b).max()),
                          "runs": bridge.pg_ort_kernel_runs() - before}))
    """), {"BRIDGE": ort_ep_library()})
    assert out["err"] < 1e-5 and out["runs"] == 2, out


def test_a_claimed_node_whose_kernel_fails_gives_an_ort_error_with_pluggables_message():
    """MatMul of dynamic 2-D inputs is claimed; inner dimensions 3 and 4 make
    the plugin's kernel fail at run time: ORT raises with our message, and
    the session still runs good inputs afterwards."""
    out = run_child(textwrap.dedent(SESSION) + textwrap.dedent("""
        n = helper.make_node
        sess = session([n("MatMul", ["a", "b"], ["y"], name="the_matmul")],
                       [("a", ["m", "k"]), ("b", ["k2", "n"])], "y")
        rng = np.random.default_rng()
        try:
            sess.run(None, {"a": np.ones((2, 3), np.float32), "b": np.ones((4, 5), np.float32)})
            msg = None
        except Exception as exc:
            msg = str(exc)
        a = rng.standard_normal((2, 3)).astype(np.float32)
        b = rng.standard_normal((3, 5)).astype(np.float32)
        y = sess.run(None, {"a": a, "b": b})[0]
        print(json.dumps({"msg": msg, "err": float(np.abs(y - a @ b).max())}))
    """), {"BRIDGE": ort_ep_library()})
    assert out["msg"] is not None
    assert "pluggable: node 'the_matmul' (ONNX MatMul, kernel MatMul on /device:MY_DEVICE:0)" \
        in out["msg"], out["msg"]
    assert out["err"] < 1e-5


def test_a_process_with_pluggables_core_loaded_is_refused():
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import pluggable, onnxruntime as ort
        from pluggable.onnx.ort import ort_ep_library
        pluggable.constant(1.0)
        try:
            ort.register_execution_provider_library("pluggable", ort_ep_library())
        except Exception as exc:
            print("REFUSED", exc)
    """)], capture_output=True, text=True, timeout=120,
        env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd="/")
    assert proc.returncode == 0, proc.stderr
    assert "REFUSED" in proc.stdout and "another copy of the core runtime" in proc.stdout, \
        proc.stdout + proc.stderr


@pytest.mark.parametrize("release, api_version", [("1.20.1", 20), ("1.22.0", 22)])
def test_onnxruntime_older_than_supported_is_refused(release, api_version):
    """CreateEpFactories with a fake OrtApiBase whose GetApi knows versions
    up to `api_version` only: the bridge answers with an OrtStatus built
    through version 1's CreateStatus, naming both versions."""
    c = header_constants()
    bridge = ctypes.CDLL(ort_ep_library())
    seen = {}

    @ctypes.CFUNCTYPE(ctypes.c_size_t, ctypes.c_int, ctypes.c_char_p)
    def create_status(code, msg):
        seen["code"], seen["msg"] = code, msg.decode()
        return 0xABC0

    v1 = (ctypes.c_void_p * 128)()
    v1[c["PG_ORT_CreateStatus"]] = ctypes.cast(create_status, ctypes.c_void_p)

    @ctypes.CFUNCTYPE(ctypes.c_size_t, ctypes.c_uint32)
    def get_api(v):
        seen.setdefault("asked", []).append(v)
        return ctypes.addressof(v1) if v <= api_version else 0

    text = ctypes.create_string_buffer(release.encode())

    @ctypes.CFUNCTYPE(ctypes.c_size_t)
    def version_string():
        return ctypes.addressof(text)

    base = (ctypes.c_void_p * 2)(ctypes.cast(get_api, ctypes.c_void_p),
                                 ctypes.cast(version_string, ctypes.c_void_p))
    factories = (ctypes.c_void_p * 4)()
    n = ctypes.c_size_t(99)
    bridge.CreateEpFactories.restype = ctypes.c_void_p
    st = bridge.CreateEpFactories(b"pluggable", ctypes.byref(base), None, factories, 4,
                                  ctypes.byref(n))
    assert st == 0xABC0 and n.value == 0
    assert seen["asked"][0] == c["PG_ORT_MIN_API_VERSION"]
    assert seen["code"] == c["PG_ORT_NOT_IMPLEMENTED"]
    assert f"ONNX Runtime {release} is too old" in seen["msg"]
    assert f"onnxruntime 1.{c['PG_ORT_MIN_API_VERSION']} or newer" in seen["msg"]


def test_sessions_release_their_eps_and_partitions():
    """Twenty sessions created, run (every other one with a failing kernel)
    and dropped: the bridge's live EP and partition counts return to 0 (Add
    and MatMul are one partition)."""
    out = run_child(textwrap.dedent(SESSION) + textwrap.dedent("""
        import gc
        bridge.pg_ort_live_eps.restype = bridge.pg_ort_live_partitions.restype = ctypes.c_int64
        n = helper.make_node
        peak = 0
        for i in range(20):
            sess = session([n("Add", ["a", "b"], ["s"]), n("MatMul", ["s", "b"], ["y"])],
                           [("a", ["m", "k"]), ("b", ["k2", "n"])], "y")
            shape = (3, 3) if i % 2 else (2, 3)
            try:
                sess.run(None, {"a": np.ones(shape, np.float32), "b": np.ones((3, 3), np.float32)})
            except Exception:
                pass
            peak = max(peak, bridge.pg_ort_live_partitions())
            del sess
            gc.collect()
        print(json.dumps({"peak": peak, "parts": bridge.pg_ort_live_partitions(),
                          "eps": bridge.pg_ort_live_eps()}))
    """), {"BRIDGE": ort_ep_library()})
    assert out["peak"] == 1 and out["parts"] == 0 and out["eps"] == 0, out


def test_providers_by_ep_name_runs_on_the_plugin():
    """InferenceSession(model, providers=["pluggable_MY_DEVICE"]) selects the
    bridge's EP by name (ONNX Runtime 1.32 resolves registered plugin EPs)."""
    out = run_child(textwrap.dedent(SESSION) + textwrap.dedent("""
        g = helper.make_graph([helper.make_node("Relu", ["a"], ["y"])], "g",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, [9])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [9])])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        sess = ort.InferenceSession(m.SerializeToString(), providers=["pluggable_MY_DEVICE"])
        a = np.random.default_rng().standard_normal(9).astype(np.float32)
        before = bridge.pg_ort_kernel_runs()
        y = sess.run(None, {"a": a})[0]
        print(json.dumps({"err": float(np.abs(y - np.maximum(a, 0)).max()),
                          "runs": bridge.pg_ort_kernel_runs() - before,
                          "eps": sess.get_providers()}))
    """), {"BRIDGE": ort_ep_library()})
    assert out["err"] == 0 and out["runs"] == 1 and out["eps"][0] == "pluggable_MY_DEVICE", out


def test_the_documented_path_without_importing_pluggable_is_the_library():
    """docs/onnxruntime.md finds the library through find_spec, which does
    not import the package: same file as ort_ep_library()."""
    out = run_child("""
        import importlib.util, json, os, sys
        pkg = importlib.util.find_spec("pluggable").submodule_search_locations[0]
        print(json.dumps({"path": os.path.join(pkg, "onnx", "libpluggable_ort_ep.so"),
                          "imported": "pluggable" in sys.modules}))
    """, tree_on_path=True)
    assert not out["imported"]
    assert os.path.samefile(out["path"], ort_ep_library())
