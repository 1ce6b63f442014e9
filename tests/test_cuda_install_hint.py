"""Where an NVIDIA driver is present but the CUDA reference plugin (its own
distribution, reference_device/cuda) is not installed, pg.plugins() and
`python -m pluggable plugins` say how to install it; elsewhere they say
nothing of it. The driver detection is faked."""
from __future__ import annotations

import logging
import random

import pluggable as pg
from pluggable.plugins import cuda_env, loader
from pluggable.tools import cli


def _fake_driver(monkeypatch, present: bool) -> None:
    monkeypatch.setattr(cuda_env, "gpu_driver_present", lambda: present)


def test_hint_only_with_a_driver_and_without_the_plugin(monkeypatch):
    rng = random.Random()
    others = [f"/x/{rng.randrange(10**6)}/libpluggable_my_device.so"]
    _fake_driver(monkeypatch, True)
    hint = cuda_env.missing_plugin_hint(others)
    assert "pip install ./reference_device/cuda" in hint and "pluggable-cuda" in hint
    assert cuda_env.missing_plugin_hint(others + ["/y/libpluggable_cuda.so"]) == ""
    _fake_driver(monkeypatch, False)
    assert cuda_env.missing_plugin_hint(others) == ""


def test_plugins_logs_the_hint_once(monkeypatch, caplog):
    _fake_driver(monkeypatch, True)
    monkeypatch.setattr(loader, "_hint_given", False)
    with caplog.at_level(logging.WARNING, logger="pluggable.plugins"):
        recs = pg.plugins()
        pg.plugins()
    cuda_present = any(r.path.endswith("libpluggable_cuda.so") for r in recs)
    said = [m for m in caplog.messages if "reference_device/cuda" in m]
    assert len(said) == (0 if cuda_present else 1), said


def test_plugins_says_nothing_without_a_driver(monkeypatch, caplog):
    _fake_driver(monkeypatch, False)
    monkeypatch.setattr(loader, "_hint_given", False)
    with caplog.at_level(logging.WARNING, logger="pluggable.plugins"):
        pg.plugins()
    assert not [m for m in caplog.messages if "reference_device/cuda" in m]


def test_cli_prints_the_hint(monkeypatch, capsys):
    _fake_driver(monkeypatch, True)
    cli.plugins_main([])
    out = capsys.readouterr().out
    cuda_present = any(r.path.endswith("libpluggable_cuda.so") for r in pg.plugins())
    assert ("pip install ./reference_device/cuda" in out) == (not cuda_present)


def test_real_detection_matches_the_machine():
    import ctypes
    import os
    try:
        ctypes.CDLL("libcuda.so.1")
        loadable = True
    except OSError:
        loadable = False
    assert cuda_env.gpu_driver_present() == (os.path.exists("/proc/driver/nvidia") or loadable)
