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
# the CUDA plugin's EP, listed beside MY_DEVICE's on a machine with a GPU
CUDA_EPS = {"pluggable_GPU"}
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
    # other entries of the path stay (where cffi lives beside the tree, say)
    keep = [p for p in full.pop("PYTHONPATH", "").split(os.pathsep)
            if p and pathlib.Path(p).resolve() != ROOT.resolve()]
    if tree_on_path:
        keep.insert(0, str(ROOT))
    if keep:
        full["PYTHONPATH"] = os.pathsep.join(keep)
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
    ep_api = ctypes.CFUNCTYPE(ctypes.c_void_p)(table(api, c["PG_ORT_GetEpApi"]))()
    assert ep_api
    # Memory infos (what the bridge declares per OrtEpDevice) and the
    # OrtEpApi entries that read them back.
    create_info = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint32,
                                   ctypes.c_int32, ctypes.c_int, ctypes.c_size_t, ctypes.c_int,
                                   ctypes.POINTER(ctypes.c_void_p))(
        table(api, c["PG_ORT_CreateMemoryInfo_V2"]))
    get_md = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(
        table(ep_api, c["PG_ORTEP_MemoryInfo_GetMemoryDevice"]))
    dev_type = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)(
        table(ep_api, c["PG_ORTEP_MemoryDevice_GetDeviceType"]))
    mem_type = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)(
        table(ep_api, c["PG_ORTEP_MemoryDevice_GetMemoryType"]))
    equal = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_void_p, ctypes.c_void_p)(
        table(ep_api, c["PG_ORTEP_MemoryDevice_AreEqual"]))
    devices = []
    for kind, mem in ((c["PG_ORT_MEM_DEVICE_NPU"], c["PG_ORT_MEM_HOST_ACCESSIBLE"]),
                      (c["PG_ORT_MEM_DEVICE_GPU"], c["PG_ORT_MEM_DEFAULT"])):
        info = ctypes.c_void_p()
        st = create_info(b"probe", kind, 0x5047, 1, mem, 0, c["PG_ORT_DEVICE_ALLOCATOR"],
                         ctypes.byref(info))
        assert st is None and info, msg(st) if st else "no memory info"
        md = get_md(info)
        assert dev_type(md) == kind and mem_type(md) == mem
        devices.append(md)
    assert equal(devices[0], devices[0]) and not equal(devices[0], devices[1])


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
    ours = [d for d in out["devices"] if d["ep"].startswith("pluggable_")
            and d["ep"] not in CUDA_EPS]
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
    assert [d["ep"] for d in out["devices"] if d["ep"].startswith("pluggable_")
            and d["ep"] not in CUDA_EPS] == ["pluggable_MY_DEVICE"]


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
        model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
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
    """)], capture_output=True, text=True, timeout=120, cwd="/", env=dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT)] + [p for p in [
            os.environ.get("PYTHONPATH")] if p])))
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
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
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


# Models of several nodes, run by our EP and by ORT's CPU EP on the same
# fresh random inputs; the bridge's counters say what ran where.
GRAPHS = SESSION + """
    from onnx import numpy_helper
    COUNTERS = ("kernel_runs", "host_copies", "partitions_compiled", "nodes_compiled")
    for c in COUNTERS:
        getattr(bridge, "pg_ort_" + c).restype = ctypes.c_int64
    rng = np.random.default_rng()
    ELEM = {"float32": TensorProto.FLOAT, "float64": TensorProto.DOUBLE,
            "int32": TensorProto.INT32, "int64": TensorProto.INT64, "int8": TensorProto.INT8,
            "bool": TensorProto.BOOL}

    def snap():
        return {c: getattr(bridge, "pg_ort_" + c)() for c in COUNTERS}

    def since(before):
        now = snap()
        return {c: now[c] - before[c] for c in COUNTERS}

    def model(nodes, inputs, outputs, inits=(), opset=17):
        vi = lambda n, t, s: helper.make_tensor_value_info(n, ELEM[t], s)
        g = helper.make_graph(nodes, "g", [vi(n, t, s) for n, t, s in inputs],
                              [vi(n, t, None) for n, t in outputs],
                              initializer=[numpy_helper.from_array(v, k) for k, v in inits])
        ops = [helper.make_opsetid("", opset)]
        return helper.make_model(g, opset_imports=ops,
                                 ir_version=helper.find_min_ir_version_for(ops)).SerializeToString()

    def ours(m, optimize=True):
        so = ort.SessionOptions()
        if not optimize:
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        so.add_provider_for_devices([d for d in ort.get_ep_devices()
                                     if d.ep_name == "pluggable_MY_DEVICE"], {})
        return ort.InferenceSession(m, so)

    def cpu(m):
        return ort.InferenceSession(m, providers=["CPUExecutionProvider"])

    def rand(shape, dtype, positive=False, nonzero=False):
        if dtype.startswith("int"):
            x = rng.integers(-9, 10, size=shape)
            if nonzero:
                x = np.where(x == 0, 3, x)
            return x.astype(dtype)
        x = rng.standard_normal(shape)
        return (np.abs(x) + 0.1 if positive else x).astype(dtype)

    def compare(m, feeds_fn, runs=3, optimize=True):
        before = snap()
        s = ours(m, optimize)
        compiled = since(before)
        c = cpu(m)
        errs, per_run, same = [], [], True
        for _ in range(runs):
            feeds = feeds_fn()
            b = snap()
            got = s.run(None, feeds)
            per_run.append(since(b))
            want = c.run(None, feeds)
            for g, w in zip(got, want):
                same = same and g.dtype == w.dtype and g.shape == w.shape
                errs.append(float(np.max(np.abs(g.astype(np.float64) - w) / (1 + np.abs(w))))
                            if g.size else 0.0)
        return {"compiled": compiled, "per_run": per_run, "err": max(errs), "same": same}
"""


def graphs_child(body: str) -> dict:
    return run_child(textwrap.dedent(GRAPHS) + textwrap.dedent(body), {"BRIDGE": ort_ep_library()})


def test_a_diamond_and_chain_run_as_one_partition_with_intermediates_on_the_device():
    """Add feeds Relu and Tanh, whose results Mul joins, then MatMul: five
    nodes, one partition; per run the only copies are the three inputs in
    and the output out (no intermediate visits the host)."""
    out = graphs_child("""
        n = helper.make_node
        m = model([n("Add", ["a", "b"], ["s"]), n("Relu", ["s"], ["r"]), n("Tanh", ["s"], ["t"]),
                   n("Mul", ["r", "t"], ["p"]), n("MatMul", ["p", "w"], ["y"])],
                  [("a", "float32", [5, 7]), ("b", "float32", [5, 7]), ("w", "float32", [7, 3])],
                  [("y", "float32")])
        print(json.dumps(compare(m, lambda: {k: rand(s, "float32") for k, s in
                                             (("a", (5, 7)), ("b", (5, 7)), ("w", (7, 3)))})))
    """)
    assert out["compiled"]["partitions_compiled"] == 1, out
    assert out["compiled"]["nodes_compiled"] == 5, out
    for run in out["per_run"]:
        assert run["kernel_runs"] == 5 and run["host_copies"] == 4, out
    assert out["same"] and out["err"] < 1e-5, out


def test_an_intermediate_that_is_also_a_graph_output_comes_back():
    out = graphs_child("""
        n = helper.make_node
        m = model([n("Sub", ["a", "b"], ["d"]), n("Abs", ["d"], ["y"])],
                  [("a", "float64", [4, 6]), ("b", "float64", [6])],
                  [("y", "float64"), ("d", "float64")])
        print(json.dumps(compare(m, lambda: {"a": rand((4, 6), "float64"),
                                             "b": rand((6,), "float64")})))
    """)
    assert out["compiled"]["partitions_compiled"] == 1, out
    assert [r["host_copies"] for r in out["per_run"]] == [4, 4, 4], out
    assert out["same"] and out["err"] < 1e-12, out


def test_a_partition_never_depends_on_itself():
    """Add -> Cos -> Mul with Mul also reading Add's result: Cos runs on the
    CPU, so Add and Mul cannot be one partition (it would feed Cos and wait
    for it); they are two, and the result is ORT CPU's."""
    out = graphs_child("""
        n = helper.make_node
        m = model([n("Add", ["a", "b"], ["s"]), n("Cos", ["s"], ["c"]),
                   n("Mul", ["s", "c"], ["y"])],
                  [("a", "float32", [8]), ("b", "float32", [8])], [("y", "float32")])
        print(json.dumps(compare(m, lambda: {"a": rand((8,), "float32"),
                                             "b": rand((8,), "float32")})))
    """)
    assert out["compiled"]["partitions_compiled"] == 2, out
    assert all(r["kernel_runs"] == 2 for r in out["per_run"]), out
    assert out["same"] and out["err"] < 1e-6, out


def test_constant_initializers_are_copied_to_the_device_once():
    """y = relu(x @ W + B) with W and B initializers: they are copied at
    compile time; a run copies x in and y out only."""
    out = graphs_child("""
        n = helper.make_node
        W, B = rand((6, 5), "float32"), rand((5,), "float32")
        m = model([n("MatMul", ["x", "W"], ["h"]), n("Add", ["h", "B"], ["z"]),
                   n("Relu", ["z"], ["y"])],
                  [("x", "float32", [3, 6])], [("y", "float32")], inits=[("W", W), ("B", B)])
        print(json.dumps(compare(m, lambda: {"x": rand((3, 6), "float32")})))
    """)
    assert out["compiled"]["partitions_compiled"] == 1, out
    assert out["compiled"]["host_copies"] == 2, out
    # MatMul, Add, Relu; or ORT's MatMul+Add -> Gemm fusion, lowered to
    # MatMul and Add again: three kernels either way.
    assert all(r["host_copies"] == 2 and r["kernel_runs"] == 3 for r in out["per_run"]), out
    assert out["same"] and out["err"] < 1e-5, out


def run_cases(cases: list, body: str) -> list[dict]:
    """Runs `body` (which builds `m` and `feeds` from `case`, and may set
    `optimize` False to turn ORT's graph optimizations off) for each case in
    one child; one compare() result per case."""
    out = graphs_child(f"""
        results = []
        for case in {cases!r}:
            optimize = True
{textwrap.indent(textwrap.dedent(body), ' ' * 12)}
            results.append(dict(compare(m, feeds, optimize=optimize), case=case))
        print(json.dumps({{"results": results}}))
    """)
    return out["results"]


def claimed(r: dict, kernels: int) -> bool:
    return (r["compiled"]["partitions_compiled"] == 1
            and all(run["kernel_runs"] == kernels for run in r["per_run"]))


def test_binary_ops_broadcast_in_every_registered_dtype():
    cases = [(op, dt, sa, sb) for op in ("Add", "Sub", "Mul", "Div")
             for dt in ("float32", "float64", "int32", "int64")
             for sa, sb in (((2, 3, 4), (3, 1)), ((5,), ()), ((4, 1), (1, 6)))]
    results = run_cases(cases, """
        op, dt, sa, sb = case
        m = model([helper.make_node(op, ["a", "b"], ["y"])],
                  [("a", dt, list(sa)), ("b", dt, list(sb))], [("y", dt)])
        feeds = lambda: {"a": rand(sa, dt), "b": rand(sb, dt, nonzero=True)}
    """)
    for r in results:
        assert claimed(r, 1), r
        exact = r["case"][1].startswith("int")
        assert r["same"] and r["err"] <= (0 if exact else 1e-6), r


def test_unary_ops_in_every_registered_dtype():
    cases = [(op, dt) for op in ("Relu", "Neg", "Abs", "Exp", "Log", "Sqrt", "Tanh", "Sigmoid")
             for dt in ("float32", "float64")] + \
        [(op, dt) for op in ("Neg", "Abs") for dt in ("int32", "int64")]
    results = run_cases(cases, """
        op, dt = case
        m = model([helper.make_node(op, ["x"], ["y"])], [("x", dt, [3, 5])], [("y", dt)])
        feeds = lambda: {"x": rand((3, 5), dt, positive=op in ("Log", "Sqrt"))}
    """)
    for r in results:
        assert claimed(r, 1), r
        exact = r["case"][1].startswith("int")
        assert r["same"] and r["err"] <= (0 if exact else 1e-6), r


def test_integer_relu_runs_on_the_plugin_where_orts_cpu_has_no_kernel():
    """ONNX allows Relu of int32 and int64 (opset 14); ORT's CPU EP has no
    such kernel, the plugin has: the session runs, equal to numpy."""
    out = graphs_child("""
        res = []
        for dt in ("int32", "int64"):
            s = ours(model([helper.make_node("Relu", ["x"], ["y"])], [("x", dt, [4, 4])],
                           [("y", dt)]))
            x = rand((4, 4), dt)
            before = snap()
            y = s.run(None, {"x": x})[0]
            res.append({"ok": bool(y.dtype == x.dtype and (y == np.maximum(x, 0)).all()),
                        "runs": since(before)["kernel_runs"]})
        print(json.dumps({"res": res}))
    """)
    assert out["res"] == [{"ok": True, "runs": 1}] * 2, out


def test_gemm_lowers_to_matmul_scale_and_add():
    """transA / transB / alpha / beta and C of shape (N,), (1, N), (M, N) or
    absent: MatMul, then Mul by alpha and beta where they are not 1, then
    Add."""
    cases = [(ta, tb, alpha, beta, c, dt) for ta in (0, 1) for tb in (0, 1)
             for alpha, beta in ((1.0, 1.0), (0.5, 2.0))
             for c in (None, (4,), (1, 4), (3, 4)) for dt in ("float32", "float64")]
    results = run_cases(cases, """
        ta, tb, alpha, beta, c, dt = case
        ins = ["A", "B"] + (["C"] if c else [])
        sa, sb = ((5, 3) if ta else (3, 5)), ((4, 5) if tb else (5, 4))
        m = model([helper.make_node("Gemm", ins, ["y"], transA=ta, transB=tb, alpha=alpha,
                                    beta=beta)],
                  [("A", dt, list(sa)), ("B", dt, list(sb))] + ([("C", dt, list(c))] if c else []),
                  [("y", dt)])
        feeds = lambda: dict({"A": rand(sa, dt), "B": rand(sb, dt)},
                             **({"C": rand(c, dt)} if c else {}))
    """)
    for r in results:
        ta, tb, alpha, beta, c, dt = r["case"]
        kernels = 1 + (alpha != 1) + (2 if c and beta != 1 else 1 if c else 0)
        assert claimed(r, kernels), r
        assert r["same"] and r["err"] < (1e-5 if dt == "float32" else 1e-12), r


def test_matmul_batched_runs_and_one_d_falls_back():
    cases = [((2, 3, 4), (4, 5), "float32", True), ((2, 1, 3, 4), (3, 4, 2), "float64", True),
             ((3, 4), (4, 2), "int32", True), ((4,), (4, 3), "float32", False)]
    results = run_cases(cases, """
        sa, sb, dt, _ = case
        m = model([helper.make_node("MatMul", ["a", "b"], ["y"])],
                  [("a", dt, list(sa)), ("b", dt, list(sb))], [("y", dt)])
        feeds = lambda: {"a": rand(sa, dt), "b": rand(sb, dt)}
    """)
    for r in results:
        if r["case"][3]:
            assert claimed(r, 1), r
        else:
            assert r["compiled"]["partitions_compiled"] == 0, r
        assert r["same"] and r["err"] < 1e-5, r


def test_softmax_and_log_softmax_on_any_axis():
    """The plugin's Softmax / LogSoftmax take the last axis. Opset 13 runs
    any other axis between two Transposes; before opset 13 the op flattens
    to 2-D at `axis`, run between two Reshapes when the dims are static, and
    left to the CPU when they are not."""
    cases = [  # op, opset, axis, shape, kernels (0: not claimed)
        ("Softmax", 13, None, [3, 4, 5], 1), ("Softmax", 13, 2, [3, 4, 5], 1),
        ("Softmax", 13, 0, [3, 4, 5], 3), ("LogSoftmax", 13, 1, ["n", 4, 5], 3),
        ("Softmax", 11, None, [6, 7], 1), ("Softmax", 11, None, [3, 4, 5], 3),
        ("LogSoftmax", 11, 0, [3, 4, 5], 3), ("Softmax", 11, -1, [3, 4, 5], 1),
        ("Softmax", 11, 1, ["n", 4, 5], 0), ("LogSoftmax", 13, None, [2, 9], 1)]
    results = run_cases(cases, """
        op, opset, axis, shape, _ = case
        attrs = {} if axis is None else {"axis": axis}
        concrete = tuple(s if isinstance(s, int) else 2 for s in shape)
        m = model([helper.make_node(op, ["x"], ["y"], **attrs)],
                  [("x", "float32", list(shape))], [("y", "float32")], opset=opset)
        feeds = lambda: {"x": rand(concrete, "float32") * 3}
    """)
    for r in results:
        kernels = r["case"][4]
        if kernels:
            assert claimed(r, kernels), r
        else:
            assert r["compiled"]["partitions_compiled"] == 0, r
        assert r["same"] and r["err"] < 1e-6, r


def test_a_dtype_without_plugin_kernels_runs_on_the_cpu():
    """int8 Abs: the bridge runs no int8 node; ORT's CPU EP runs it."""
    results = run_cases([0], """
        n = helper.make_node
        m = model([n("Abs", ["x"], ["y"])], [("x", "int8", [10])], [("y", "int8")])
        feeds = lambda: {"x": rand((10,), "int8")}
    """)
    assert results[0]["compiled"]["partitions_compiled"] == 0, results
    assert results[0]["same"] and results[0]["err"] == 0, results


def test_bad_inputs_inside_a_partition_give_ort_errors_and_the_session_survives():
    """Add -> Relu -> Mul of dynamic shapes, one partition: shapes that do not
    broadcast fail Add's kernel (our message names the node, the kernel and
    the device); an input of the wrong dtype is refused by ORT itself; the
    session then runs good inputs, equal to ORT CPU."""
    out = graphs_child("""
        n = helper.make_node
        m = model([n("Add", ["a", "b"], ["s"], name="the_add"), n("Relu", ["s"], ["r"]),
                   n("Mul", ["r", "a"], ["y"], name="the_mul")],
                  [("a", "float32", ["m", "k"]), ("b", "float32", ["p", "q"])],
                  [("y", "float32")])
        s, c = ours(m), cpu(m)
        msgs = []
        for feeds in ({"a": np.ones((2, 3), np.float32), "b": np.ones((4, 5), np.float32)},
                      {"a": np.ones((2, 3), np.float64), "b": np.ones((2, 3), np.float64)}):
            try:
                s.run(None, feeds)
                msgs.append(None)
            except Exception as exc:
                msgs.append(f"{type(exc).__name__}: {exc}")
        feeds = {"a": rand((3, 4), "float32"), "b": rand((1, 4), "float32")}
        before = snap()
        y = s.run(None, feeds)[0]
        runs = since(before)["kernel_runs"]
        err = float(np.abs(y - c.run(None, feeds)[0]).max())
        print(json.dumps({"msgs": msgs, "err": err, "runs": runs}))
    """)
    shape_msg, dtype_msg = out["msgs"]
    assert shape_msg is not None and dtype_msg is not None, out
    assert "pluggable: node 'the_add' (ONNX Add, kernel AddV2 on /device:MY_DEVICE:0) failed" \
        in shape_msg, shape_msg
    assert "InvalidArgument" in dtype_msg and "data type" in dtype_msg.lower(), dtype_msg
    assert out["runs"] == 3 and out["err"] < 1e-6, out


LIGHT = pathlib.Path(__import__("onnx").__file__).parent / "backend" / "test" / "data" / "light"

# Loads one of onnx's light models (`path`) into `m` with fresh random
# weights in place of its ConstantOfShape stand-ins, random biases and
# batch-norm statistics, every initializer a constant (not a graph input),
# and the input of the final Softmax (the logits) as a second output.
LIGHT_MODEL = """
    import onnx
    mp = onnx.load(path)
    g = mp.graph
    shapes = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    nodes = []
    positive = {x for node in g.node if node.op_type == "BatchNormalization"
                for x in (node.input[1], node.input[4])}  # scales and variances
    for node in g.node:
        if node.op_type == "ConstantOfShape":
            shape = tuple(int(v) for v in shapes[node.input[0]])
            fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 16
            w = rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)
            if node.output[0] in positive:
                w = 0.25 + np.abs(rng.standard_normal(shape)) * 0.25
            g.initializer.append(numpy_helper.from_array(w.astype(np.float32), node.output[0]))
        else:
            nodes.append(node)
    del g.node[:]
    g.node.extend(nodes)
    for init in g.initializer:
        if init.name.endswith("_b_0") and init.data_type == TensorProto.FLOAT:
            init.CopyFrom(numpy_helper.from_array(
                (rng.standard_normal(tuple(init.dims)) * 0.1).astype(np.float32), init.name))
    inits = {i.name for i in g.initializer}
    keep = [i for i in g.input if i.name not in inits]
    del g.input[:]
    g.input.extend(keep)
    image_name = keep[0].name
    g.output.append(helper.make_tensor_value_info(nodes[-1].input[0], TensorProto.FLOAT, None))
    mp.ir_version = 7
    m = mp.SerializeToString()
    bridge.pg_ort_unclaimed_report.restype = ctypes.c_char_p
"""


def light_model_child(name: str, runs: int) -> dict:
    return graphs_child(f"path = {str(LIGHT / name)!r}\n" + textwrap.dedent(LIGHT_MODEL)
                        + textwrap.dedent(f"""
        r = compare(m, lambda: {{image_name: rand((1, 3, 224, 224), "float32")}}, runs={runs})
        r["unclaimed"] = bridge.pg_ort_unclaimed_report().decode()
        r["nodes"] = len([n for n in nodes if n.op_type != "Dropout"])
        image = rand((1, 3, 224, 224), "float32")
        r["logit_scale"] = float(np.abs(cpu(m).run(None, {{image_name: image}})[1]).max())
        print(json.dumps(r))
    """))


@pytest.mark.skipif(not (LIGHT / "light_squeezenet.onnx").is_file(),
                    reason="onnx ships no light_squeezenet.onnx here")
def test_squeezenet_runs_on_the_plugin_and_matches_cpu():
    """onnx's light SqueezeNet 1.0 (Conv, Relu, MaxPool, Concat, Dropout,
    GlobalAveragePool, Softmax) with fresh random weights and biases in
    place of its constant stand-ins: every node but Dropout (ORT removes it
    for inference) runs on MY_DEVICE as one partition, the weights stay on
    the device (a run copies the image in, the logits and the probabilities
    out), and both outputs equal ORT CPU's on fresh random images."""
    out = light_model_child("light_squeezenet.onnx", runs=2)
    assert out["compiled"]["partitions_compiled"] == 1, out
    assert out["compiled"]["nodes_compiled"] == out["nodes"], out
    assert out["unclaimed"] == "", out["unclaimed"]
    # 26 Conv (Conv2D + BiasAdd), 26 Relu, 3 MaxPool, 8 Concat, 1 Mean, and
    # the opset-9 Softmax on axis 1 of [1, 1000, 1, 1] (Reshape, Softmax,
    # Reshape).
    assert all(r["kernel_runs"] == 93 and r["host_copies"] == 3 for r in out["per_run"]), out
    assert out["same"] and out["err"] < 1e-5, out
    assert out["logit_scale"] > 0.1, out  # the logits compared are not all ~0


@pytest.mark.skipif(not (LIGHT / "light_resnet50.onnx").is_file(),
                    reason="onnx ships no light_resnet50.onnx here")
def test_resnet50_runs_whole_on_the_plugin_and_matches_cpu():
    """onnx's light ResNet-50 with random weights: ORT folds each
    BatchNormalization into its Conv, and the 123 nodes left (Conv, Relu,
    MaxPool, Sum, AveragePool, Reshape, Gemm, Softmax) are one partition on
    MY_DEVICE: per run 177 kernels (Conv2D + BiasAdd each), the image copied
    in and the two outputs out, both equal to ORT CPU's."""
    out = light_model_child("light_resnet50.onnx", runs=1)
    assert out["compiled"]["partitions_compiled"] == 1, out
    assert out["unclaimed"] == "", out["unclaimed"]
    assert out["compiled"]["nodes_compiled"] == 123, out
    assert all(r["kernel_runs"] == 177 and r["host_copies"] == 3 for r in out["per_run"]), out
    assert out["same"] and out["err"] < 1e-4, out
    assert out["logit_scale"] > 0.1, out


@pytest.mark.parametrize("name", ["light_densenet121.onnx", "light_inception_v2.onnx"])
def test_densenet_and_inception_run_whole_on_the_plugin(name):
    """DenseNet-121 (BatchNormalization before its Convs, Concat) and
    Inception v2 (stride-1 padded AveragePool): one partition, nothing left
    to the CPU, the image in and the two outputs out, equal to ORT CPU."""
    if not (LIGHT / name).is_file():
        pytest.skip(f"onnx ships no {name} here")
    out = light_model_child(name, runs=1)
    assert out["compiled"]["partitions_compiled"] == 1, out
    assert out["unclaimed"] == "", out["unclaimed"]
    run = out["per_run"][0]
    assert run["host_copies"] == 3 and run["kernel_runs"] >= out["compiled"]["nodes_compiled"], out
    assert out["same"] and out["err"] < 1e-5 and out["logit_scale"] > 0.1, out


def test_conv_variants_run_on_the_plugin_and_unsupported_ones_fall_back():
    """Conv with strides, pads, dilations, VALID / SAME_UPPER, with and
    without bias (float: ORT's CPU EP, the reference, has no double Conv);
    a weight that is a graph input runs
    its HWIO transpose every run (3 kernels with bias), a constant weight's
    is done at compile time (2). group 2 and SAME_LOWER stay on the CPU."""
    cases = [  # attrs, weight constant?, bias?, dtype, claimed?
        ({}, True, True, "float32", True),
        ({"strides": [2, 2], "pads": [1, 0, 2, 1]}, True, False, "float32", True),
        ({"dilations": [2, 1], "pads": [1, 1, 1, 1]}, False, True, "float32", True),
        ({"auto_pad": "VALID", "strides": [1, 2]}, False, False, "float32", True),
        ({"auto_pad": "SAME_UPPER", "strides": [2, 2]}, True, True, "float32", True),
        ({"auto_pad": "SAME_LOWER", "strides": [2, 2]}, True, True, "float32", False),
        ({"group": 2}, True, False, "float32", False),
    ]
    results = run_cases(cases, """
        attrs, const_w, bias, dt, _ = case
        cin = 2 if attrs.get("group") == 2 else 4
        W = rand((6, cin // attrs.get("group", 1), 3, 3), dt)
        ins = ["x", "W"] + (["B"] if bias else [])
        inputs = [("x", dt, [2, cin, 9, 8])] + ([] if const_w else [("W", dt, list(W.shape))])
        inits = ([("W", W)] if const_w else []) + ([("B", rand((6,), dt))] if bias else [])
        m = model([helper.make_node("Conv", ins, ["y"], **attrs)], inputs, [("y", dt)],
                  inits=inits)
        feeds = lambda: dict({"x": rand((2, cin, 9, 8), dt)},
                             **({} if const_w else {"W": rand(W.shape, dt)}))
    """)
    for r in results:
        attrs, const_w, bias, dt, want = r["case"]
        if want:
            assert claimed(r, (1 if const_w else 2) + (1 if bias else 0)), r
        else:
            assert r["compiled"]["partitions_compiled"] == 0, r
        assert r["same"] and r["err"] < (1e-5 if dt == "float32" else 1e-12), r


def test_pooling_and_concat_run_on_the_plugin():
    cases = [
        ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2]}, True),
        ("MaxPool", {"kernel_shape": [2, 3], "pads": [1, 1, 0, 1]}, True),
        ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}, False),
        ("MaxPool", {"kernel_shape": [2, 2], "dilations": [2, 2]}, False),
        ("GlobalAveragePool", {}, True),
        ("Concat", {"axis": 1}, True),
        ("Concat", {"axis": -1}, True),
    ]
    results = run_cases(cases, """
        op, attrs, _ = case
        if op == "Concat":
            m = model([helper.make_node("Concat", ["a", "b", "c"], ["y"], **attrs)],
                      [("a", "float32", [2, 3, 4]), ("b", "float32", [2, 3, 4]),
                       ("c", "float32", [2, 3, 4])], [("y", "float32")])
            feeds = lambda: {k: rand((2, 3, 4), "float32") for k in "abc"}
        else:
            m = model([helper.make_node(op, ["x"], ["y"], **attrs)],
                      [("x", "float32", [2, 3, 9, 10])], [("y", "float32")])
            feeds = lambda: {"x": rand((2, 3, 9, 10), "float32")}
    """)
    for r in results:
        if r["case"][2]:
            assert claimed(r, 1), r
        else:
            assert r["compiled"]["partitions_compiled"] == 0, r
        assert r["same"] and r["err"] < 1e-6, r


def test_the_unclaimed_report_says_why():
    out = graphs_child("""
        n = helper.make_node
        m = model([n("Cos", ["x"], ["c"], name="the_cos"),
                   n("Softmax", ["c"], ["y"], name="sm", axis=0)],
                  [("x", "float32", ["n", 4])], [("y", "float32")], opset=11)
        ours(m)
        bridge.pg_ort_unclaimed_report.restype = ctypes.c_char_p
        print(json.dumps({"report": bridge.pg_ort_unclaimed_report().decode()}))
    """)
    assert out["report"].splitlines() == [
        "pluggable: node 'the_cos' (Cos): op not in the bridge's table",
        "pluggable: node 'sm' (Softmax): Softmax before opset 13 on axis 0 of 2 runs with "
        "static dims only"], out


def test_random_graphs_of_claimed_and_unclaimed_nodes_partition_without_cycles():
    """Random DAGs of Add / Mul / Tanh / Relu (claimed) and Cos / Sin (left
    to the CPU EP): ONNX Runtime accepts every partitioning (one that made a
    partition depend on itself would be a cycle in its graph) and the
    results equal ORT CPU's on fresh random inputs."""
    out = graphs_child("""
        n = helper.make_node
        bridge.pg_ort_unclaimed_report.restype = ctypes.c_char_p
        results = []
        for trial in range(25):
            values, nodes = ["a", "b", "c"], []
            for i in range(int(rng.integers(6, 18))):
                op = str(rng.choice(["Add", "Mul", "Tanh", "Relu", "Cos", "Sin"]))
                k = 2 if op in ("Add", "Mul") else 1
                ins = [str(v) for v in rng.choice(values, size=k)]
                nodes.append(n(op, ins, [f"v{i}"]))
                values.append(f"v{i}")
            used = {x for node in nodes for x in node.input}
            outs = [v for v in values[3:] if v not in used]
            m = model(nodes, [(x, "float32", [4]) for x in "abc"], [(o, "float32") for o in outs])
            r = compare(m, lambda: {x: rand((4,), "float32") * 0.5 for x in "abc"}, runs=1)
            r["claimable"] = sum(node.op_type in ("Add", "Mul", "Tanh", "Relu") for node in nodes)
            r["unclaimed"] = bridge.pg_ort_unclaimed_report().decode()
            results.append(r)
        print(json.dumps({"results": results}))
    """)
    for r in out["results"]:
        assert r["same"] and r["err"] < 1e-5, r
        # ORT may first merge identical nodes (common subexpressions)
        assert (r["compiled"]["nodes_compiled"] > 0) == (r["claimable"] > 0), r
        assert r["compiled"]["nodes_compiled"] <= r["claimable"], r
        assert r["per_run"][0]["kernel_runs"] == r["compiled"]["nodes_compiled"], r
        assert not re.search(r"\((Add|Mul|Tanh|Relu)\)", r["unclaimed"]), r
    assert sum(r["compiled"]["partitions_compiled"] < r["claimable"] for r in out["results"]) > 5


def test_scalars_empty_tensors_and_concurrent_runs():
    """Rank-0 and zero-element inputs through a partition; and eight threads
    running one session at once, each with its own inputs, every result
    equal to ORT CPU's."""
    out = graphs_child("""
        from concurrent.futures import ThreadPoolExecutor
        n = helper.make_node
        res = {}
        m = model([n("Add", ["a", "b"], ["s"]), n("Relu", ["s"], ["y"])],
                  [("a", "float32", []), ("b", "float32", [])], [("y", "float32")])
        res["scalar"] = compare(m, lambda: {"a": rand((), "float32"), "b": rand((), "float32")})
        m = model([n("MatMul", ["a", "b"], ["p"]), n("Tanh", ["p"], ["y"])],
                  [("a", "float32", ["n", 3]), ("b", "float32", [3, 4])], [("y", "float32")])
        res["empty"] = compare(m, lambda: {"a": rand((0, 3), "float32"),
                                           "b": rand((3, 4), "float32")})
        s, c = ours(m), cpu(m)
        feeds = [{"a": rand((64, 3), "float32"), "b": rand((3, 4), "float32")} for _ in range(64)]
        with ThreadPoolExecutor(8) as pool:
            got = list(pool.map(lambda f: s.run(None, f)[0], feeds))
        res["threads"] = max(float(np.abs(g - c.run(None, f)[0]).max()) for g, f in zip(got, feeds))
        print(json.dumps(res))
    """)
    for key in ("scalar", "empty"):
        r = out[key]
        assert r["compiled"]["partitions_compiled"] == 1 and r["same"] and r["err"] < 1e-6, out
    assert out["threads"] < 1e-6, out


def test_a_subgraph_reading_a_claimed_value_keeps_the_partitions_apart():
    """s = Add(a, b); an If whose branches read s from the outer scope (an
    implicit input); y = Mul(s, if_out). Add and Mul would be a partition
    depending on itself through the If: they are two."""
    out = graphs_child("""
        n = helper.make_node
        vi = lambda name: helper.make_tensor_value_info(name, TensorProto.FLOAT, [5])
        branch = lambda op: helper.make_graph([n(op, ["s"], ["t"])], op, [], [vi("t")])
        g = helper.make_graph(
            [n("Add", ["a", "b"], ["s"]),
             n("If", ["cond"], ["f"], then_branch=branch("Cos"), else_branch=branch("Sin")),
             n("Mul", ["s", "f"], ["y"])], "g",
            [vi("a"), vi("b"), helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
            [vi("y")])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                              ir_version=8).SerializeToString()
        res = [compare(m, lambda: {"a": rand((5,), "float32"), "b": rand((5,), "float32"),
                                   "cond": np.array(c)}) for c in (True, False)]
        print(json.dumps({"res": res}))
    """)
    for r in out["res"]:
        assert r["compiled"]["partitions_compiled"] == 2, r
        assert all(run["kernel_runs"] == 2 for run in r["per_run"]), r
        assert r["same"] and r["err"] < 1e-6, r


def test_sum_average_pool_reshape_and_batch_norm_run_on_the_plugin():
    """Sum of three (broadcasting), AveragePool without padding, Reshape to a
    constant shape with -1, and BatchNormalization with constant statistics
    (a Mul and an Add per channel); Reshape with a 0 in its shape, counted
    AveragePool padding and BatchNormalization of non-constant statistics
    stay on the CPU."""
    cases = ["sum", "avgpool", "avgpool_same", "avgpool_pads_same", "reshape", "batchnorm",
             "reshape_zero", "avgpool_counted", "avgpool_pads_strided", "batchnorm_inputs"]
    results = run_cases(cases, """
        n = helper.make_node
        x4 = ("x", "float32", [2, 3, 8, 9])
        feeds = lambda: {"x": rand((2, 3, 8, 9), "float32")}
        if case == "sum":
            m = model([n("Sum", ["a", "b", "c"], ["y"])],
                      [("a", "float32", [4, 5]), ("b", "float32", [5]), ("c", "float32", [4, 1])],
                      [("y", "float32")])
            feeds = lambda: {"a": rand((4, 5), "float32"), "b": rand((5,), "float32"),
                             "c": rand((4, 1), "float32")}
        elif case.startswith("avgpool"):
            attrs = {"kernel_shape": [3, 2], "strides": [2, 1]}
            if case == "avgpool_same":
                attrs["auto_pad"] = "SAME_UPPER"
            if case == "avgpool_counted":
                attrs.update(pads=[1, 1, 1, 1], count_include_pad=1)
            if case == "avgpool_pads_same":  # stride 1, odd window: SAME
                attrs = {"kernel_shape": [3, 5], "pads": [1, 2, 1, 2]}
            if case == "avgpool_pads_strided":
                attrs = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
            m = model([n("AveragePool", ["x"], ["y"], **attrs)], [x4], [("y", "float32")])
        elif case.startswith("reshape"):
            shape = np.array([0, -1] if case == "reshape_zero" else [6, -1, 3], np.int64)
            m = model([n("Reshape", ["x", "shape"], ["y"])], [x4], [("y", "float32")],
                      inits=[("shape", shape)])
        else:
            stats = [("s", rand((3,), "float32")), ("B", rand((3,), "float32")),
                     ("mean", rand((3,), "float32")), ("var", rand((3,), "float32", positive=True))]
            if case == "batchnorm":
                m = model([n("BatchNormalization", ["x", "s", "B", "mean", "var"], ["y"],
                             epsilon=1e-3)], [x4], [("y", "float32")], inits=stats)
            else:
                m = model([n("BatchNormalization", ["x", "s", "B", "mean", "var"], ["y"])],
                          [x4] + [(k, "float32", [3]) for k, _ in stats], [("y", "float32")])
                feeds = lambda: dict({"x": rand((2, 3, 8, 9), "float32"),
                                      "var": rand((3,), "float32", positive=True)},
                                     **{k: rand((3,), "float32") for k in ("s", "B", "mean")})
    """)
    kernels = {"sum": 2, "avgpool": 1, "avgpool_same": 1, "avgpool_pads_same": 1, "reshape": 1,
               "batchnorm": 2}
    for r in results:
        if r["case"] in kernels:
            assert claimed(r, kernels[r["case"]]), r
        else:
            assert r["compiled"]["partitions_compiled"] == 0, r
        assert r["same"] and r["err"] < 1e-5, r


def test_flatten_identity_and_inference_dropout_run_on_the_plugin():
    """Flatten with static dims before its axis (or after it), Identity, and
    Dropout with ORT's optimizations off (so it is not removed first);
    Flatten whose dims are dynamic on both sides stays on the CPU."""
    cases = [("flatten", 1, [2, 3, 4, 5], True), ("flatten", 2, ["n", 3, 4, 5], True),
             ("flatten", 0, [2, 3], True), ("flatten", 2, ["n", 3, "h", 5], False),
             ("identity", None, [3, 4], True), ("dropout", None, [3, 4], True)]
    results = run_cases(cases, """
        op, axis, shape, _ = case
        concrete = tuple(s if isinstance(s, int) else 2 for s in shape)
        if op == "flatten":
            node = helper.make_node("Flatten", ["x"], ["y"], axis=axis)
        elif op == "identity":
            node = helper.make_node("Identity", ["x"], ["y"])
        else:
            node = helper.make_node("Dropout", ["x"], ["y"])
        m = model([node], [("x", "float32", shape)], [("y", "float32")])
        feeds = lambda: {"x": rand(concrete, "float32")}
        optimize = op != "dropout"  # ORT's optimizations would remove the Dropout
    """)
    for r in results:
        if r["case"][3]:
            assert claimed(r, 1), r
        else:
            assert r["compiled"]["partitions_compiled"] == 0, r
        assert r["same"] and r["err"] == 0, r


def test_claims_follow_the_kernels_the_plugin_registered():
    """TensorFlow's sample plugin (tests/plugins/tf_sample_device.c with its
    memory fills, device type FAKE_CPU_DEVICE) registers one kernel, Relu
    for float32: its EP
    claims float Relu and nothing else (no AddV2 kernel, no float64 Relu),
    and the report says so."""
    from plugin_build import build_plugin
    lib = build_plugin(ROOT / "tests" / "plugins" / "tf_sample_device.c",
                       "tf_sample_device_fills", extra_flags=("-DWITH_FILLS",))
    out = run_child(textwrap.dedent(GRAPHS) + textwrap.dedent("""
        n = helper.make_node
        devs = [d for d in ort.get_ep_devices() if d.ep_name == "pluggable_FAKE_CPU_DEVICE"]
        def ours(m, optimize=True):
            so = ort.SessionOptions()
            so.add_provider_for_devices(devs, {})
            return ort.InferenceSession(m, so)
        bridge.pg_ort_unclaimed_report.restype = ctypes.c_char_p
        res = []
        for dt in ("float32", "float64"):
            m = model([n("Add", ["a", "b"], ["s"], name="add"), n("Relu", ["s"], ["y"], name="relu")],
                      [("a", dt, [6]), ("b", dt, [6])], [("y", dt)])
            r = compare(m, lambda: {"a": rand((6,), dt), "b": rand((6,), dt)})
            r["report"] = bridge.pg_ort_unclaimed_report().decode()
            res.append(r)
        print(json.dumps({"res": res, "devices": len(devs)}))
    """), {"BRIDGE": ort_ep_library(), "PLUGGABLE_PLUGIN_PATH": str(lib)})
    assert out["devices"] == 1, out
    f32, f64 = out["res"]
    assert f32["compiled"]["nodes_compiled"] == 1 and claimed(f32, 1), f32
    assert "node 'add' (Add): no AddV2 kernel of dtype 1 on FAKE_CPU_DEVICE" in f32["report"], f32
    assert f64["compiled"]["partitions_compiled"] == 0, f64
    assert "node 'relu' (Relu): no Relu kernel of dtype 2 on FAKE_CPU_DEVICE" in f64["report"], f64
    for r in out["res"]:
        assert r["same"] and r["err"] < 1e-6, r


# Device memory, data transfer and sync streams (ort_memory.c): ORT keeps
# tensors in the device's memory, which the bridge's allocators serve, and
# moves them with the bridge's data transfer.
DEVICE = GRAPHS + """
    for c in ("device_bytes", "device_blocks", "live_streams", "live_transfers",
              "live_eps", "live_partitions"):
        getattr(bridge, "pg_ort_" + c).restype = ctypes.c_int64
    bridge.pg_ort_transfers.restype = ctypes.c_int64
    EP = [d for d in ort.get_ep_devices() if d.ep_name == "pluggable_MY_DEVICE"]
    DEV = EP[0].memory_info(ort.OrtDeviceMemoryType.DEFAULT)

    def transfers(on_stream=False):
        return [bridge.pg_ort_transfers(k) for k in range(4 if on_stream else 3)]

    def to_device(x):
        v = ort.OrtValue.ortvalue_from_shape_and_type(list(x.shape), x.dtype, memory_info=DEV)
        ort.copy_tensors([ort.OrtValue.ortvalue_from_numpy(x)], [v], None)
        return v

    def from_device(v, dtype=np.float32):
        # (the array, not the OrtValue's numpy(): that view does not keep
        # the OrtValue's memory alive)
        out = np.zeros(v.shape(), dtype)
        ort.copy_tensors([v], [ort.OrtValue.ortvalue_from_numpy(out)], None)
        return out

    def live():
        return {c: getattr(bridge, "pg_ort_" + c)() for c in
                ("device_bytes", "device_blocks", "live_streams", "live_eps", "live_partitions")}
"""


def device_child(body: str) -> dict:
    return run_child(textwrap.dedent(DEVICE) + textwrap.dedent(body), {"BRIDGE": ort_ep_library()})


def test_each_ep_device_declares_device_and_host_accessible_memory():
    """MY_DEVICE's OrtEpDevice declares its own memory (ONNX Runtime NPU
    memory of the bridge's vendor id, so never taken for CPU memory) and a
    host-accessible one, both of ordinal 0; an OrtValue allocated in the
    device memory comes from the plugin's allocate and goes back with it."""
    out = device_child("""
        host = EP[0].memory_info(ort.OrtDeviceMemoryType.HOST_ACCESSIBLE)
        infos = [{"name": m.name, "id": m.device_id, "vendor": m.device_vendor_id,
                  "mem": str(m.device_mem_type)} for m in (DEV, host)]
        before = live()
        v = ort.OrtValue.ortvalue_from_shape_and_type([3, 5], np.float32, memory_info=DEV)
        during = live()
        kind = v.device_name()
        del v
        print(json.dumps({"infos": infos, "before": before, "during": during, "after": live(),
                          "kind": kind}))
    """)
    dev, host = out["infos"]
    assert dev == {"name": "pluggable_MY_DEVICE", "id": 0, "vendor": 0x5047,
                   "mem": "OrtDeviceMemoryType.DEFAULT"}, out
    assert host["vendor"] == 0x5047 and host["mem"] == "OrtDeviceMemoryType.HOST_ACCESSIBLE", out
    assert out["kind"] == "npu", out
    assert out["during"]["device_blocks"] == out["before"]["device_blocks"] + 1, out
    assert out["during"]["device_bytes"] >= out["before"]["device_bytes"] + 60, out
    assert out["after"]["device_blocks"] == out["before"]["device_blocks"], out


def test_iobinding_with_device_resident_inputs_and_outputs_gives_cpu_results():
    """Inputs copied to MY_DEVICE once (the bridge's data transfer), bound
    with the device's memory info, output bound in device memory: each run
    executes the plugin's kernels with no copy between host and device (the
    bridge's counters), and the result read back equals ORT CPU's on fresh
    random inputs."""
    out = device_child("""
        n = helper.make_node
        m = model([n("Add", ["a", "b"], ["s"]), n("Relu", ["s"], ["r"]),
                   n("MatMul", ["r", "w"], ["y"])],
                  [("a", "float32", [6, 4]), ("b", "float32", [6, 4]), ("w", "float32", [4, 3])],
                  [("y", "float32")])
        s, c = ours(m), cpu(m)
        res = []
        for _ in range(3):
            feeds = {k: rand(sh, "float32") for k, sh in (("a", (6, 4)), ("b", (6, 4)),
                                                          ("w", (4, 3)))}
            t0 = transfers()
            dev = {k: to_device(v) for k, v in feeds.items()}
            t1 = transfers()
            y = ort.OrtValue.ortvalue_from_shape_and_type([6, 3], np.float32, memory_info=DEV)
            io = s.io_binding()
            for k, v in dev.items():
                io.bind_ortvalue_input(k, v)
            io.bind_ortvalue_output("y", y)
            b = snap()
            t2 = transfers()
            s.run_with_iobinding(io)
            ran = since(b)
            t3 = transfers()
            got = from_device(y)
            want = c.run(None, feeds)[0]
            res.append({"in": [x - w for x, w in zip(t1, t0)], "run": [x - w for x, w in
                        zip(t3, t2)], "ran": ran, "err": float(np.abs(got - want).max())})
        print(json.dumps(res))
    """)
    for r in out:
        assert r["in"] == [3, 0, 0], r
        assert r["run"] == [0, 0, 0], r
        assert r["ran"]["kernel_runs"] == 3 and r["ran"]["host_copies"] == 0, r
        assert r["err"] < 1e-5, r


def test_two_partitions_pass_their_intermediate_on_the_device():
    """s = a + b; r = relu(s) on the plugin; c = cos(s) on ORT's CPU EP; y =
    r * c on the plugin: two partitions. r goes from the first to the second
    in device memory: per run the host copies are a and b in, s out (for
    Cos), c in and y out -- five, not the seven of passing r through the
    host -- and no copy stays within the device."""
    out = device_child("""
        n = helper.make_node
        m = model([n("Add", ["a", "b"], ["s"]), n("Relu", ["s"], ["r"]), n("Cos", ["s"], ["c"]),
                   n("Mul", ["r", "c"], ["y"])],
                  [("a", "float32", [16]), ("b", "float32", [16])], [("y", "float32")])
        r = compare(m, lambda: {"a": rand((16,), "float32"), "b": rand((16,), "float32")})
        t0 = transfers()
        compare(m, lambda: {"a": rand((16,), "float32"), "b": rand((16,), "float32")}, runs=1)
        r["dtod"] = transfers()[2] - t0[2]
        print(json.dumps(r))
    """)
    assert out["compiled"]["partitions_compiled"] == 2, out
    for run in out["per_run"]:
        assert run["kernel_runs"] == 3 and run["host_copies"] == 5, out
    assert out["dtod"] == 0, out
    assert out["same"] and out["err"] < 1e-6, out


def test_a_failing_kernel_on_device_resident_inputs_is_an_ort_error_and_the_session_survives():
    """MatMul of device-resident (2, 3) and (4, 5) inputs: the plugin's kernel
    fails, ORT raises with the bridge's message naming node and device; then
    good device-resident inputs run and match numpy."""
    out = device_child("""
        n = helper.make_node
        m = model([n("MatMul", ["a", "b"], ["y"], name="the_matmul")],
                  [("a", "float32", ["m", "k"]), ("b", "float32", ["k2", "n"])],
                  [("y", "float32")])
        s = ours(m)
        def run(a, b):
            io = s.io_binding()
            io.bind_ortvalue_input("a", to_device(a))
            io.bind_ortvalue_input("b", to_device(b))
            y = ort.OrtValue.ortvalue_from_shape_and_type([a.shape[0], b.shape[1]], np.float32,
                                                          memory_info=DEV)
            io.bind_ortvalue_output("y", y)
            s.run_with_iobinding(io)
            return from_device(y)
        try:
            run(rand((2, 3), "float32"), rand((4, 5), "float32"))
            msg = None
        except Exception as exc:
            msg = str(exc)
        a, b = rand((2, 3), "float32"), rand((3, 5), "float32")
        print(json.dumps({"msg": msg, "err": float(np.abs(run(a, b) - a @ b).max())}))
    """)
    assert out["msg"] is not None
    assert "pluggable: node 'the_matmul' (ONNX MatMul, kernel MatMul on /device:MY_DEVICE:0)" \
        in out["msg"], out["msg"]
    assert out["err"] < 1e-5, out


def test_a_session_destroyed_with_work_in_flight_releases_everything():
    """Four threads run one session (device-resident inputs and outputs) in
    a loop; the main thread drops its reference while they run, so the
    session is destroyed when the last run lets go of it. The device tensors
    the runs produced outlive the session and read back ORT CPU's results;
    once they are gone too, the bridge holds no device memory, stream, EP or
    partition."""
    out = device_child("""
        import gc, threading
        n = helper.make_node
        m = model([n("MatMul", ["a", "b"], ["p"]), n("Tanh", ["p"], ["y"])],
                  [("a", "float32", [64, 32]), ("b", "float32", [32, 48])], [("y", "float32")])
        c = cpu(m)
        before = live()
        s = ours(m)
        feeds = [{"a": rand((64, 32), "float32"), "b": rand((32, 48), "float32")}
                 for _ in range(4)]
        kept, errors = [None] * 4, []
        def work(i, sess):
            try:
                dev = {k: to_device(v) for k, v in feeds[i].items()}
                for _ in range(10):
                    io = sess.io_binding()
                    for k, v in dev.items():
                        io.bind_ortvalue_input(k, v)
                    y = ort.OrtValue.ortvalue_from_shape_and_type([64, 48], np.float32,
                                                                  memory_info=DEV)
                    io.bind_ortvalue_output("y", y)
                    sess.run_with_iobinding(io)
                    kept[i] = y
            except Exception as exc:
                errors.append(repr(exc))
        threads = [threading.Thread(target=work, args=(i, s)) for i in range(4)]
        for t in threads:
            t.start()
        del s
        for t in threads:
            t.join()
        gc.collect()
        after_session = live()
        err = max(float(np.abs(from_device(kept[i]) - c.run(None, feeds[i])[0]).max())
                  for i in range(4))
        del kept[:]
        gc.collect()
        print(json.dumps({"errors": errors, "err": err, "before": before,
                          "after_session": after_session, "after": live()}))
    """)
    assert out["errors"] == [], out
    assert out["err"] < 1e-5, out
    assert out["after_session"]["live_eps"] == 0 and out["after_session"]["device_blocks"] >= 4, out
    assert out["after"] == {"device_bytes": 0, "device_blocks": 0, "live_streams": 0,
                            "live_eps": 0, "live_partitions": 0}, out


def test_sync_streams_come_from_the_plugin_and_order_copies():
    """ORT asks the bridge for a stream per device (an SP_Stream of its
    own): one made outside a session has no native handle on MY_DEVICE
    (host memory; the plugin's native-stream extension says so), copies on
    it in both directions give the data back exactly, and it is released
    with its Python object; a session's streams live as long as the
    session."""
    out = device_child("""
        import gc
        base = bridge.pg_ort_live_streams()
        st = EP[0].create_sync_stream()
        made = bridge.pg_ort_live_streams() - base
        handle = st.get_handle()
        x = rand((33, 7), "float32")
        v = ort.OrtValue.ortvalue_from_shape_and_type([33, 7], np.float32, memory_info=DEV)
        t0 = transfers(on_stream=True)
        ort.copy_tensors([ort.OrtValue.ortvalue_from_numpy(x)], [v], st)
        back = np.zeros_like(x)
        ort.copy_tensors([v], [ort.OrtValue.ortvalue_from_numpy(back)], st)
        t1 = transfers(on_stream=True)
        del st
        gc.collect()
        released = bridge.pg_ort_live_streams() - base
        n = helper.make_node
        s = ours(model([n("Relu", ["a"], ["y"])], [("a", "float32", [5])], [("y", "float32")]))
        s.run(None, {"a": rand((5,), "float32")})
        in_session = bridge.pg_ort_live_streams() - base
        del s
        gc.collect()
        print(json.dumps({"made": made, "handle": handle, "exact": bool((back == x).all()),
                          "copies": [b - a for a, b in zip(t0, t1)], "released": released,
                          "in_session": in_session,
                          "after": bridge.pg_ort_live_streams() - base}))
    """)
    assert out["made"] == 1 and out["released"] == 0, out
    assert not out["handle"], out
    assert out["exact"] and out["copies"] == [1, 1, 0, 2], out
    assert out["in_session"] >= 1 and out["after"] == 0, out


def test_a_session_on_the_gpu_runs_through_the_cuda_plugin(tmp_path):
    """On a machine with a GPU: ONNX Runtime lists the CUDA plugin's device
    (pluggable_GPU), and a session on it runs Conv, Add, Relu, MatMul and
    Softmax through the plugin's kernels (the bridge's run counter and ORT's
    profile) with ORT CPU's results on fresh random inputs."""
    import pluggable as pg
    if not pg.config.list_physical_devices("GPU"):
        pytest.skip("no GPU device is present (the CUDA plugin needs a CUDA GPU)")
    out = run_child(textwrap.dedent(f"""
        import ctypes, json, numpy as np, onnxruntime as ort
        from onnx import helper, TensorProto
        lib = {ort_ep_library()!r}
        ort.register_execution_provider_library("pluggable", lib)
        bridge = ctypes.CDLL(lib)
        bridge.pg_ort_kernel_runs.restype = ctypes.c_int64
        n = helper.make_node
        nodes = [n("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
                 n("Relu", ["c"], ["r"], name="relu"), n("Flatten", ["r"], ["f"], name="flat"),
                 n("MatMul", ["f", "m"], ["y"], name="mm"), n("Add", ["y", "b"], ["z"], name="add"),
                 n("Softmax", ["z"], ["p"], name="softmax", axis=-1)]
        shapes = {{"x": [2, 3, 6, 6], "w": [4, 3, 3, 3], "m": [144, 5], "b": [5]}}
        g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(k, TensorProto.FLOAT, s)
                                           for k, s in shapes.items()],
                              [helper.make_tensor_value_info("p", TensorProto.FLOAT, None)])
        model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
        devs = [d for d in ort.get_ep_devices() if d.ep_name == "pluggable_GPU"]
        so = ort.SessionOptions()
        so.enable_profiling = True
        so.profile_file_prefix = {str(tmp_path / "prof")!r}
        so.add_provider_for_devices(devs, {{}})
        sess = ort.InferenceSession(model.SerializeToString(), so)
        cpu = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        rng = np.random.default_rng()
        errs, runs = [], []
        for _ in range(3):
            feeds = {{k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}}
            before = bridge.pg_ort_kernel_runs()
            got = sess.run(None, feeds)[0]
            runs.append(bridge.pg_ort_kernel_runs() - before)
            errs.append(float(np.abs(got - cpu.run(None, feeds)[0]).max()))
        prof = json.load(open(sess.end_profiling()))
        providers = {{e["name"]: e["args"].get("provider") for e in prof
                     if e.get("cat") == "Node" and "provider" in e.get("args", {{}})}}
        print(json.dumps({{"devices": len(devs), "errs": errs, "runs": runs,
                          "providers": providers, "eps": sess.get_providers()}}))
    """))
    assert out["devices"] == 1, out
    assert max(out["errs"]) < 1e-4, out
    assert min(out["runs"]) >= 1, out
    assert out["eps"][0] == "pluggable_GPU"
    assert set(out["providers"].values()) == {"pluggable_GPU"}, out["providers"]


def test_transformer_plumbing_with_dynamic_dims_runs_on_the_device():
    """The lowerings that dynamic dims take: Gather of graph-input indices
    (negative ones moved into range on the device), Unsqueeze and Squeeze of
    two dynamic dims (ExpandDims, Squeeze), Cast of a bool mask, Where,
    Transpose, ReduceMean and LayerNormalization: every node claimed (five
    partitions, one per connected part), the results ORT CPU's on fresh
    inputs of three shapes."""
    out = graphs_child("""
        n = helper.make_node
        table = rng.standard_normal((7, 3)).astype(np.float32)
        nodes = [n("Gather", ["table", "idx"], ["g"]),
                 n("Unsqueeze", ["x", "axes12"], ["u"]),
                 n("Squeeze", ["u", "axes1"], ["sq"]),
                 n("Cast", ["m"], ["mf"], to=TensorProto.FLOAT),
                 n("Where", ["m", "x", "mf"], ["wh"]),
                 n("Transpose", ["wh"], ["tr"]),
                 n("ReduceMean", ["x"], ["rm"], axes=[1], keepdims=1),
                 n("LayerNormalization", ["x3", "s", "b"], ["ln"], epsilon=1e-3)]
        inits = [("table", table), ("axes12", np.array([1, 2], np.int64)),
                 ("axes1", np.array([1], np.int64)),
                 ("s", rng.standard_normal(5).astype(np.float32)),
                 ("b", rng.standard_normal(5).astype(np.float32))]
        m = model(nodes, [("idx", "int64", ["K"]), ("x", "float32", ["B", "S"]),
                          ("m", "bool", ["B", "S"]), ("x3", "float32", ["B", "S", 5])],
                  [("g", "float32"), ("sq", "float32"), ("tr", "float32"), ("rm", "float32"),
                   ("ln", "float32")], inits)
        shapes = iter([(2, 3), (4, 1), (3, 6)])
        def feeds():
            b, s = next(shapes)
            return {"idx": rng.integers(-7, 7, 5).astype(np.int64),
                    "x": rand((b, s), "float32"), "m": rng.random((b, s)) < 0.5,
                    "x3": rand((b, s, 5), "float32")}
        r = compare(m, feeds)
        bridge.pg_ort_unclaimed_report.restype = ctypes.c_char_p
        r["report"] = bridge.pg_ort_unclaimed_report().decode()
        print(json.dumps(r))
    """)
    assert out["report"] == "", out
    assert out["compiled"]["partitions_compiled"] == 5, out
    assert out["compiled"]["nodes_compiled"] == 8, out
    assert out["same"] and out["err"] < 1e-5, out
    # Gather: Less, AddV2, SelectV2, GatherV2; Unsqueeze: two ExpandDims;
    # Squeeze, Cast, Where, Transpose, ReduceMean: one each; LayerNorm: nine
    assert [run["kernel_runs"] for run in out["per_run"]] == [20, 20, 20], out


def test_nodes_the_new_lowerings_cannot_run_are_left_to_the_cpu_with_their_reason():
    """Gather of indices that may be negative along a dynamic dim, ReduceMean-18
    axes that are not constants, Cast to and from float16 and Pow of an
    int64 exponent: each left to the CPU EP with the reason in the report, the
    session's results still ORT CPU's."""
    out = graphs_child("""
        n = helper.make_node
        nodes = [n("Gather", ["x", "idx"], ["g"], axis=1, name="gather"),
                 n("ReduceMean", ["x", "axes"], ["rm"], name="mean"),
                 n("Cast", ["x"], ["h"], to=TensorProto.FLOAT16, name="half"),
                 n("Cast", ["h"], ["hf"], to=TensorProto.FLOAT, name="back"),
                 n("Pow", ["x", "e"], ["p"], name="pow")]
        m = model(nodes, [("x", "float32", ["B", "S"]), ("idx", "int64", [2]),
                          ("axes", "int64", [1])],
                  [("g", "float32"), ("rm", "float32"), ("hf", "float32"), ("p", "float32")],
                  [("e", np.array(2, np.int64))], opset=18)
        r = compare(m, lambda: {"x": rand((2, 3), "float32"),
                                "idx": np.array([-1, 1], np.int64),
                                "axes": np.array([-1], np.int64)})
        bridge.pg_ort_unclaimed_report.restype = ctypes.c_char_p
        r["report"] = bridge.pg_ort_unclaimed_report().decode().splitlines()
        print(json.dumps(r))
    """)
    assert out["same"] and out["err"] < 1e-6, out
    why = {line.split("'")[1]: line for line in out["report"]}
    assert set(why) == {"gather", "mean", "half", "back", "pow"}, out
    assert "indices may be negative and the size of axis 1 is not static" in why["gather"]
    assert "axes given as a constant initializer only" in why["mean"]
    assert "not ONNX element type 10" in why["half"]
    assert "mixed or unknown input types" in why["pow"]
    assert "Cast is not run for an element type the bridge does not run" in why["back"]
    assert out["compiled"]["nodes_compiled"] == 0, out
