"""Device configuration with tf.config's shapes (``pg.config``): visible
devices, logical devices with memory limits, memory growth, memory info.

Configuration must happen before the runtime is initialised, and this test
process initialised it long ago, so every test that configures runs a fresh
interpreter (``run_fresh``); the tests in this process check what holds
after initialisation. Behaviour TensorFlow defines is compared with
TensorFlow through ``tf_oracle`` (on the CPU, the device both have)."""
from __future__ import annotations

import gc
import json
import os
import pathlib
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import pluggable as pg
from tf_oracle import TensorFlowUnavailable, TfOracle, tensorflow_missing_reason

ROOT = pathlib.Path(__file__).resolve().parent.parent
HERE = pathlib.Path(__file__).resolve().parent

PLUGIN_TYPES = ["MY_DEVICE", "GPU"]


def require(device_type: str) -> None:
    if not pg.list_physical_devices(device_type):
        pytest.skip(f"no {device_type} device in this process (the GPU tests need an NVIDIA "
                    "GPU and the CUDA plugin)")


def run_fresh(body: str, env: dict | None = None, **values) -> dict:
    """Runs `body` in a new interpreter (fresh runtime; `env` added to the
    environment) with ``pg``, ``np`` and the given `values` defined; the body
    stores what it found in the dict ``out``, which comes back."""
    prelude = ("import json, sys\nimport numpy as np\nimport pluggable as pg\n"
               f"sys.path.insert(0, {str(HERE)!r})\n"
               f"globals().update(json.loads({json.dumps(values)!r}))\nout = {{}}\n")
    code = prelude + textwrap.dedent(body) + "\nprint('RESULT ' + json.dumps(out))\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env={**os.environ, **(env or {})})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


# ----------------------------------------------------------- before initialisation

def test_configuration_is_lazy_and_list_physical_devices_does_not_initialise():
    out = run_fresh("""
        from pluggable.runtime import placement
        out["at_import"] = placement.initialized()
        pg.list_physical_devices(); pg.config.get_visible_devices()
        pg.config.get_device_details("CPU:0")
        out["after_queries"] = placement.initialized()
        pg.config.list_logical_devices()
        out["after_logical"] = placement.initialized()
    """)
    assert out == {"at_import": False, "after_queries": False, "after_logical": True}


@pytest.mark.parametrize("device_type", PLUGIN_TYPES)
def test_hidden_device_gets_no_logical_device_and_ops_go_to_cpu(device_type, rng):
    require(device_type)
    x = rng.standard_normal((4, 5)).astype(np.float32)
    out = run_fresh("""
        hidden = pg.config.list_physical_devices(device_type)
        pg.config.set_visible_devices(pg.config.list_physical_devices("CPU"))
        out["visible"] = [list(d) for d in pg.config.get_visible_devices()]
        out["physical"] = [list(d) for d in pg.config.list_physical_devices(device_type)]
        out["logical"] = [list(d) for d in pg.config.list_logical_devices()]
        a = np.array(x, np.float32)
        with pg.testing.expect_kernel("Relu", "CPU"):
            y = pg.nn.relu(a)
        out["device"] = y.device
        out["value"] = y.numpy().tolist()
        try:
            with pg.device(device_type + ":0"):
                out["scoped"] = pg.nn.relu(a).device
        except pg.errors.InvalidArgumentError as e:
            out["scope_error"] = str(e)
        try:
            pg.config.set_visible_devices(hidden + pg.config.list_physical_devices("CPU"))
        except RuntimeError as e:
            out["late"] = str(e)
    """, device_type=device_type, x=x.tolist())
    assert out["visible"] == [["/physical_device:CPU:0", "CPU"]]
    assert out["physical"] and out["physical"][0][1] == device_type
    assert out["logical"] == [["/device:CPU:0", "CPU"]]
    assert out["device"].endswith("device:CPU:0")
    np.testing.assert_array_equal(out["value"], np.maximum(x, 0))
    if device_type == "GPU":   # TensorFlow soft-places a GPU scope on the CPU
        assert out["scoped"].endswith("device:CPU:0"), out
    else:
        assert device_type in out["scope_error"], out
    assert out["late"] == "Visible devices cannot be modified after being initialized"


@pytest.mark.parametrize("device_type", PLUGIN_TYPES)
def test_visible_device_runs_the_ops(device_type, rng):
    require(device_type)
    x = rng.standard_normal(7).astype(np.float32)
    out = run_fresh("""
        devs = pg.config.list_physical_devices(device_type)
        pg.config.set_visible_devices(devs, device_type)
        out["logical"] = [list(d) for d in pg.config.list_logical_devices(device_type)]
        with pg.device(device_type + ":0"), pg.testing.expect_kernel("Relu", device_type):
            y = pg.nn.relu(np.array(x, np.float32))
        out["device"] = y.device
        out["value"] = y.numpy().tolist()
    """, device_type=device_type, x=x.tolist())
    assert out["logical"][0] == [f"/device:{device_type}:0", device_type]
    assert out["device"].endswith(f"device:{device_type}:0")
    np.testing.assert_array_equal(out["value"], np.maximum(x, 0))


def test_visible_devices_are_renumbered_from_zero(rng):
    x = rng.standard_normal(9).astype(np.float32)
    out = run_fresh("""
        second = pg.config.list_physical_devices("MY_DEVICE")[1]
        pg.config.set_visible_devices([second], "MY_DEVICE")
        out["visible"] = [list(d) for d in pg.config.get_visible_devices("MY_DEVICE")]
        out["logical"] = [list(d) for d in pg.config.list_logical_devices("MY_DEVICE")]
        out["physical_of_0"] = list(pg.get_device("MY_DEVICE:0").physical())
        with pg.device("MY_DEVICE:0"), pg.testing.expect_kernel("Relu", "MY_DEVICE"):
            out["value"] = pg.nn.relu(np.array(x, np.float32)).numpy().tolist()
        try:
            pg.get_device("MY_DEVICE:1")
        except pg.errors.InvalidArgumentError as e:
            out["second"] = str(e)
    """, env={"PLUGGABLE_MY_DEVICE_COUNT": "2"}, x=x.tolist())
    assert out["visible"] == [["/physical_device:MY_DEVICE:1", "MY_DEVICE"]]
    assert out["logical"] == [["/device:MY_DEVICE:0", "MY_DEVICE"]]
    assert out["physical_of_0"] == ["/physical_device:MY_DEVICE:1", "MY_DEVICE"]
    np.testing.assert_array_equal(out["value"], np.maximum(x, 0))
    assert "out of range" in out["second"]


@pytest.mark.parametrize("device_type", PLUGIN_TYPES)
def test_two_logical_devices_with_their_own_memory_limits(device_type, rng):
    require(device_type)
    x = rng.standard_normal(1000).astype(np.float32)
    out = run_fresh("""
        phys = pg.config.list_physical_devices(device_type)[0]
        cfg = pg.config.LogicalDeviceConfiguration
        pg.config.set_logical_device_configuration(phys, [cfg(memory_limit=2), cfg(memory_limit=8)])
        out["config"] = [list(c) for c in pg.config.get_logical_device_configuration(phys)]
        out["logical"] = [list(d) for d in pg.config.list_logical_devices(device_type)]
        out["physical"] = len(pg.config.list_physical_devices(device_type))
        a = np.array(x, np.float32)
        for i in (0, 1):
            with pg.device(f"{device_type}:{i}"), pg.testing.expect_kernel("Relu", device_type):
                y = pg.nn.relu(a)
            out[f"device{i}"] = y.device
            out[f"value{i}"] = y.numpy().tolist()
        # 3 MiB: beyond the 2 MiB of logical device 0, within the 8 MiB of device 1
        big = 3 << 20
        try:
            pg.get_device(f"{device_type}:0").allocate(big)
        except pg.errors.ResourceExhaustedError as e:
            out["oom0"] = str(e)
        buf = pg.get_device(f"{device_type}:1").allocate(big)
        out["info1"] = pg.config.experimental.get_memory_info(f"{device_type}:1")
        try:
            pg.get_device(f"{device_type}:1").allocate(big * 2)
        except pg.errors.ResourceExhaustedError as e:
            out["oom1"] = str(e)
        # logical device 0 still serves what fits its limit
        with pg.device(f"{device_type}:0"):
            out["after"] = pg.nn.relu(a).numpy().tolist()
    """, device_type=device_type, x=x.tolist())
    assert out["config"] == [[2, None, None], [8, None, None]]
    # the first physical device's two, then one for each other physical device
    assert out["logical"] == [[f"/device:{device_type}:{i}", device_type]
                              for i in range(out["physical"] + 1)]
    for i in (0, 1):
        assert out[f"device{i}"].endswith(f"device:{device_type}:{i}")
        np.testing.assert_array_equal(out[f"value{i}"], np.maximum(x, 0))
    assert f"{device_type}:0" in out["oom0"] and str(3 << 20) in out["oom0"]
    # the error names the limit the user configured, and where to change it
    assert f"configured for this logical device is {2 << 20} bytes (2.0 MiB)" in out["oom0"]
    assert "memory_limit" in out["oom0"]
    assert out["info1"]["current"] >= 3 << 20
    assert f"{device_type}:1" in out["oom1"] and f"{8 << 20} bytes (8.0 MiB)" in out["oom1"]
    np.testing.assert_array_equal(out["after"], np.maximum(x, 0))


@pytest.mark.parametrize("device_type", PLUGIN_TYPES)
def test_memory_growth_is_set_before_initialisation_only(device_type):
    require(device_type)
    out = run_fresh("""
        d = pg.config.list_physical_devices(device_type)[0]
        out["default"] = pg.config.experimental.get_memory_growth(d)
        pg.config.experimental.set_memory_growth(d, not out["default"])
        out["set"] = pg.config.experimental.get_memory_growth(d)
        pg.config.list_logical_devices()
        pg.config.experimental.set_memory_growth(d, out["set"])  # unchanged: accepted
        try:
            pg.config.experimental.set_memory_growth(d, not out["set"])
        except RuntimeError as e:
            out["late"] = str(e)
        try:
            pg.config.set_logical_device_configuration(
                d, [pg.config.LogicalDeviceConfiguration(memory_limit=64)])
        except RuntimeError as e:
            out["late_logical"] = str(e)
    """, device_type=device_type)
    assert out["set"] is (not out["default"])
    assert out["late"] == "Physical devices cannot be modified after being initialized"
    assert out["late_logical"] == "Virtual devices cannot be modified after being initialized"


def test_memory_growth_refused_on_a_split_device():
    require("MY_DEVICE")
    out = run_fresh("""
        d = pg.config.list_physical_devices("MY_DEVICE")[0]
        pg.config.set_logical_device_configuration(
            d, [pg.config.LogicalDeviceConfiguration(memory_limit=16)] * 2)
        try:
            pg.config.experimental.set_memory_growth(d, True)
        except ValueError as e:
            out["error"] = str(e)
    """)
    assert out["error"] == "Cannot set memory growth on device when virtual devices configured"


# ---------------------------------------------------------- same as TensorFlow

CPU = {"physical": ["/physical_device:CPU:0", "CPU"]}
UNKNOWN = {"physical": ["/physical_device:GPU:7", "GPU"]}
LIMIT = {"logical": {"memory_limit": 5}}
STEPS = [
    ["experimental.set_memory_growth", [CPU, True]],
    ["experimental.get_memory_growth", [UNKNOWN]],
    ["set_visible_devices", [[UNKNOWN]]],
    ["set_visible_devices", [[CPU], "GPU"]],
    ["set_logical_device_configuration", [CPU, [LIMIT]]],
    ["get_logical_device_configuration", [CPU]],
    ["get_visible_devices", []],
    ["get_visible_devices", ["cpu"]],
    ["set_visible_devices", [{"physical_list": "CPU"}]],
    ["list_logical_devices", ["CPU"]],                       # initialises
    ["set_visible_devices", [[], "CPU"]],
    ["set_logical_device_configuration", [CPU, [{"logical": {}}, {"logical": {}}]]],
    ["set_visible_devices", [{"physical_list": "CPU"}]],
    ["experimental.get_memory_info", ["CPU:0"]],
    ["experimental.reset_memory_stats", ["CPU:0"]],
    ["experimental.get_memory_info", ["XYZ:0"]],
]


class _TfSteps(threading.Thread):
    """Asks TensorFlow for the results of STEPS in the background (starting
    TensorFlow takes a while), so the other tests run meanwhile."""

    def __init__(self):
        super().__init__(daemon=True)
        self.result: list | None = None
        self.skip: str | None = tensorflow_missing_reason()

    def run(self) -> None:
        if self.skip:
            return
        try:
            oracle = TfOracle()
        except TensorFlowUnavailable as exc:
            self.skip = f"TensorFlow cannot be imported here: {exc}"
            return
        try:
            self.result = oracle.call("config_steps", steps=STEPS)
        finally:
            oracle.close()


@pytest.fixture(scope="module", autouse=True)
def _tf_background(request):
    worker = _TfSteps()
    if any(item.name == "test_errors_and_results_match_tensorflow"
           for item in request.session.items):
        worker.start()
    yield worker
    if worker.is_alive():
        worker.join(timeout=300)


@pytest.fixture
def tf_steps(_tf_background):
    _tf_background.join(timeout=300)
    if _tf_background.skip:
        pytest.skip(_tf_background.skip)
    assert _tf_background.result is not None, "the TensorFlow worker did not answer"
    return _tf_background.result


# ------------------------------------------------------- after initialisation

@pytest.mark.parametrize("device_type", PLUGIN_TYPES)
def test_memory_info_follows_allocations_and_reset(device_type, rng):
    require(device_type)
    name = f"{device_type}:0"
    dev = pg.get_device(name)
    info = pg.config.experimental.get_memory_info
    gc.collect()
    gc.disable()  # no tensor of another test may be freed while we count
    try:
        before = info(name)
        nbytes = int(rng.integers(3 << 20, 6 << 20))
        buf = dev.allocate(nbytes)
        during = info(name)
        grown = during["current"] - before["current"]
        assert nbytes <= grown <= nbytes + (2 << 20)  # the allocator rounds up its blocks
        assert during["peak"] >= during["current"]
        del buf
        after = info(name)
        assert after["current"] == before["current"]
        assert after["peak"] >= before["current"] + grown
        pg.config.experimental.reset_memory_stats(name)
        assert info(name) == {"current": after["current"], "peak": after["current"]}
        x = rng.standard_normal(1 << 18).astype(np.float32)  # 1 MiB
        with pg.device(name):
            y = pg.nn.relu(x)
        assert info(name)["peak"] >= after["current"] + (1 << 20)
        np.testing.assert_array_equal(y.numpy(), np.maximum(x, 0))
    finally:
        gc.enable()


def test_list_logical_devices_names_every_device():
    logical = pg.config.list_logical_devices()
    assert logical[0] == pg.config.LogicalDevice("/device:CPU:0", "CPU")
    assert all(isinstance(d, pg.config.LogicalDevice) for d in logical)
    assert {d.name for d in logical} == {f"/device:{d.short_name}" for d in
                                         pg.placement.all_devices()}
    assert pg.config.list_logical_devices("MY_DEVICE") == [
        d for d in logical if d.device_type == "MY_DEVICE"]


def test_changes_after_initialisation_raise_and_unchanged_values_pass():
    require("MY_DEVICE")
    pg.config.list_logical_devices()
    d = pg.config.list_physical_devices("MY_DEVICE")[0]
    pg.config.set_visible_devices(pg.config.get_visible_devices())
    with pytest.raises(RuntimeError, match="^Visible devices cannot be modified after "
                                           "being initialized$"):
        pg.config.set_visible_devices(pg.config.list_physical_devices("CPU"))
    with pytest.raises(RuntimeError, match="^Virtual devices cannot be modified"):
        pg.config.set_logical_device_configuration(
            d, [pg.config.LogicalDeviceConfiguration(memory_limit=1)])
    with pytest.raises(RuntimeError, match="^Physical devices cannot be modified"):
        pg.config.experimental.set_memory_growth(
            d, not pg.config.experimental.get_memory_growth(d))


def test_bad_arguments_are_value_errors():
    d = pg.config.list_physical_devices("MY_DEVICE")
    with pytest.raises(ValueError, match="LogicalDeviceConfiguration"):
        pg.config.set_logical_device_configuration(pg.config.list_physical_devices("CPU")[0],
                                                   [{"memory_limit": 3}])
    if d:
        with pytest.raises(ValueError, match="memory_limit must be a positive"):
            pg.config.set_logical_device_configuration(
                d[0], [pg.config.LogicalDeviceConfiguration(memory_limit=-1)])
    with pytest.raises(ValueError, match="No matching devices found for 'MY_DEVICE:9'"):
        pg.config.experimental.get_memory_info("MY_DEVICE:9")
    with pytest.raises(TypeError, match="device name"):
        pg.config.experimental.get_memory_info(0)


def test_errors_and_results_match_tensorflow(tf_steps):
    # TensorFlow's worker has only its CPU: so has this process, without plugins
    ours = run_fresh("""
        from tf_oracle import run_config_steps
        out["steps"] = run_config_steps(pg.config, steps)
    """, env={"PLUGGABLE_DISABLE_PLUGINS": "1"}, steps=STEPS)["steps"]
    assert len(ours) == len(tf_steps)
    for step, mine, theirs in zip(STEPS, ours, tf_steps):
        assert mine == theirs, f"{step}: pluggable {mine}, TensorFlow {theirs}"
