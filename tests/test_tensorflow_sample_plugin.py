"""TensorFlow's own sample plugin (the PluggableDevice tutorial's), by its
ABI behaviour (tests/plugins/tf_sample_device.c): NULL streams, events,
timers and device handle, callbacks that do nothing, a host_callback that
enqueues nothing, a Relu kernel, a graph optimizer and a profiler.

TensorFlow decides which plugins load. Run in a child process (it cannot
share one with pluggable's core), TensorFlow 2.21 loads the variant with
mem_zero, memset and memset32 added and runs Relu on it; it refuses the
sample as published (it lacks those three) by aborting with its reason.
pluggable does the same by default: it loads the first and runs Relu with
the same result, and quarantines the second with TensorFlow's reason. With
PLUGGABLE_LENIENT_PLUGINS=1 the published sample loads: the core fills
memory for it, and its graph optimizer and profiler take part."""
from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

from broken_plugins import clean_env, run_child
from plugin_build import build_plugin
from tf_oracle import REFERENCE_KERNELS, tensorflow_missing_reason

HERE = pathlib.Path(__file__).resolve().parent
SRC = HERE / "plugins" / "tf_sample_device.c"

TF_CHILD = r"""
import json, os, sys
import numpy as np
import tensorflow as tf
from tensorflow.python.framework import load_library
path, x = sys.argv[1], np.array(json.loads(sys.argv[2]), np.float32)
load_library.load_pluggable_device_library(path)
out = {"devices": [d.name for d in tf.config.list_physical_devices()]}
with tf.device("/device:FAKE_CPU_DEVICE:0"):
    y = tf.nn.relu(tf.constant(x))
out["device"], out["relu"] = y.device, y.numpy().tolist()
print("TF_RESULT " + json.dumps(out))
"""

PG_CHILD = r"""
import ctypes, tempfile
so = ctypes.CDLL(PATH)
x = np.array(X, np.float32)
with pg.device("FAKE_CPU_DEVICE:0"):
    with pg.testing.expect_kernel("Relu", "FAKE_CPU_DEVICE"):
        y = pg.nn.relu(pg.constant(x))
out["relu"], out["device"] = y.numpy().tolist(), y.device
out["relu_calls"] = so.tfsample_calls(b"relu")

@pg.function
def f(t):
    with pg.device("FAKE_CPU_DEVICE:0"):
        return pg.nn.relu(t)
out["graph"] = f(pg.constant(x)).numpy().tolist()
rec = [r for r in pg.plugins() if r.device_type == "FAKE_CPU_DEVICE"][0].to_dict()
out["optimizer"] = rec["optimizer"]
out["optimize_calls"] = so.tfsample_calls(b"optimize")

with pg.profiler.Profile(tempfile.mkdtemp()) as p:
    with pg.device("FAKE_CPU_DEVICE:0"):
        pg.nn.relu(pg.constant(x)).numpy()
out["planes"] = [pl.name for pl in p.result.space.planes]
names = []
for pl in p.result.space.planes:
    if pl.name == "/device:GPU:0":  # the sample's plane, named as the sample names it
        names += [pl.event_metadata[e.metadata_id].name for ln in pl.lines for e in ln.events]
out["events"] = sorted(set(names))
out["profile_errors"] = p.result.errors
out["profiler_calls"] = [so.tfsample_calls(w) for w in (b"start", b"stop", b"collect")]

rng = np.random.default_rng()
dev = pg.get_device("FAKE_CPU_DEVICE:0")
buf = dev.allocate(4096)
fills = []
for fill, pattern, dtype in ((buf.memset, int(rng.integers(1, 256)), np.uint8),
                             (buf.memset32, int(rng.integers(1, 2**32)), np.uint32),
                             (lambda _: buf.zero(), 0, np.uint8)):
    fill(pattern)
    back = np.zeros(4096, np.uint8)
    buf.copy_to_host(back)
    fills.append(bool((back.view(dtype) == pattern).all()))
out["fills"] = fills
"""


def _variant(published: bool) -> pathlib.Path:
    if published:
        return build_plugin(SRC, "tf_sample_device")
    return build_plugin(SRC, "tf_sample_device_fills", extra_flags=("-DWITH_FILLS",))


def _tensorflow(plugin: pathlib.Path, x: np.ndarray) -> subprocess.CompletedProcess:
    missing = tensorflow_missing_reason()
    if missing:
        pytest.skip(missing)
    return subprocess.run([sys.executable, "-c", TF_CHILD, str(plugin), json.dumps(x.tolist())],
                          capture_output=True, text=True, timeout=300,
                          env=clean_env(TF_CPP_MIN_LOG_LEVEL="2", **REFERENCE_KERNELS))


def _tf_result(proc: subprocess.CompletedProcess) -> dict:
    for line in proc.stdout.splitlines():
        if line.startswith("TF_RESULT "):
            return json.loads(line[len("TF_RESULT "):])
    if "No module named 'tensorflow'" in proc.stderr:
        pytest.skip("import tensorflow fails here")
    raise AssertionError(f"TensorFlow child failed ({proc.returncode}):\n{proc.stderr[-3000:]}")


def _pluggable(plugin: pathlib.Path, x: np.ndarray, **env: str) -> dict:
    extra = f"PATH = {str(plugin)!r}\nX = {x.tolist()!r}\n" + PG_CHILD
    return run_child([plugin], extra=extra, env=clean_env(**env))


def _fresh_input() -> np.ndarray:
    return np.random.default_rng().standard_normal(517).astype(np.float32)


def _assert_takes_part(res: dict, x: np.ndarray) -> None:
    assert "extra_error" not in res, res["extra_error"]
    assert res["relu"] == np.maximum(x, 0).tolist() and res["relu_calls"] >= 1, res
    assert res["device"].endswith("/device:FAKE_CPU_DEVICE:0"), res["device"]
    # The optimizer was asked and its answer (the graph, unchanged) was used.
    assert res["graph"] == np.maximum(x, 0).tolist()
    assert res["optimize_calls"] >= 1 and res["optimizer"]["calls"] >= 1, res["optimizer"]
    assert res["optimizer"]["failures"] == [], res["optimizer"]
    assert res["optimizer"]["configs"]["remapping"] == "OFF"
    # The profiler was started, stopped and collected; its plane is kept.
    start, stop, collect = res["profiler_calls"]
    assert start >= 1 and stop >= 1 and collect >= 1, res["profiler_calls"]
    assert "/device:GPU:0" in res["planes"] and res["events"] == ["DummyKernel"], res
    assert res["profile_errors"] == [], res["profile_errors"]
    assert res["fills"] == [True, True, True], res["fills"]
    assert res["health"] == {"MY_DEVICE:0": True, "CPU:0": True}, res["health"]


def test_tensorflow_and_pluggable_run_the_sample_with_fills_alike():
    plugin, x = _variant(published=False), _fresh_input()
    tf = _tf_result(_tensorflow(plugin, x))
    assert "/physical_device:FAKE_CPU_DEVICE:0" in tf["devices"], tf
    assert tf["device"].endswith("/device:FAKE_CPU_DEVICE:0"), tf
    assert tf["relu"] == np.maximum(x, 0).tolist()
    res = _pluggable(plugin, x)
    rec = res["records"][0]
    assert rec["status"] == "loaded" and rec["reason"] == "", rec
    assert res.get("relu") == tf["relu"], res
    _assert_takes_part(res, x)


def test_the_published_sample_is_refused_with_tensorflows_reason():
    plugin, x = _variant(published=True), _fresh_input()
    proc = _tensorflow(plugin, x)
    if "No module named 'tensorflow'" in proc.stderr:
        pytest.skip("import tensorflow fails here")
    assert proc.returncode != 0 and "TF_RESULT" not in proc.stdout, proc.stdout
    found = re.search(r"FAILED_PRECONDITION: ('\w+' field in \w+ must be set\.)", proc.stderr)
    assert found, proc.stderr[-3000:]
    res = run_child([plugin])
    rec = res["records"][0]
    assert rec["status"] == "quarantined", rec
    assert f'("{found.group(1)}")' in rec["reason"], (found.group(1), rec["reason"])
    assert "PLUGGABLE_LENIENT_PLUGINS=1" in rec["reason"], rec["reason"]
    assert res["health"] == {"MY_DEVICE:0": True, "CPU:0": True}, res["health"]


def test_lenient_mode_loads_the_published_sample_and_its_optimizer_and_profiler_run():
    plugin, x = _variant(published=True), _fresh_input()
    res = _pluggable(plugin, x, PLUGGABLE_LENIENT_PLUGINS="1")
    rec = res["records"][0]
    assert rec["status"] == "loaded" and rec["reason"] == "", rec
    _assert_takes_part(res, x)
