"""The CUDA reference plugin inside TensorFlow: its kernels do not clash with
TensorFlow's own "GPU" kernels, and, wherever TensorFlow and a CUDA GPU are on
one machine, every op it registers runs on /device:GPU:0 inside TensorFlow and
matches TensorFlow's CPU kernels.

TensorFlow runs in a child process (it cannot share a process with
pluggable), through ``pluggable.tools.tf_certify`` as in
tests/test_tensorflow_plugin.py. The plugin's device type is "GPU":
TensorFlow registers a PluggableDevice factory at priority 220, above its own
CUDA GPU factory (210), so the plugin's device *is* /device:GPU:0 there; its
kernels share the "GPU" kernel registry with those TensorFlow registers for
GPU itself (see "A plugin of device type GPU" in docs/plugin-author-guide.md).
"""
from __future__ import annotations

import importlib.util
import os
import pathlib
import subprocess
import sys

import pytest

import pluggable as pg
from pluggable.framework import registry
from pluggable.tools import tf_certify

from cuda_plugin_file import cuda_plugin_file

ROOT = pathlib.Path(__file__).resolve().parent.parent
CUDA_PLUGIN = cuda_plugin_file()
# Kernels pluggable has for GPU that TensorFlow's pip packages cannot take
# (kernels_experimental.h's variable functions are not exported there).
VARIABLE_API_OPS = {"AssignAddVariableOp", "AssignSubVariableOp", "ResourceApplyGradientDescent",
                    "ResourceApplyKerasMomentum", "ResourceApplyAdam"}


def _not_built_reason() -> str | None:
    if not CUDA_PLUGIN.exists():
        return (f"{CUDA_PLUGIN.name} is not installed here (pip install "
                "./reference_device/cuda, which needs nvcc)")
    return None


def tensorflow_with_gpu_missing_reason() -> str | None:
    """Why the CUDA plugin cannot be checked inside TensorFlow here (None
    when TensorFlow, a CUDA GPU and the built plugin are all present)."""
    missing = []
    if importlib.util.find_spec("tensorflow") is None:
        missing.append("TensorFlow (pip install tensorflow-cpu)")
    if not pg.list_physical_devices("GPU"):
        missing.append("a CUDA GPU")
    if not CUDA_PLUGIN.exists():
        missing.append(f"{CUDA_PLUGIN.name} (pip install ./reference_device/cuda, which needs nvcc)")
    if missing:
        return ("the CUDA plugin inside TensorFlow needs TensorFlow, a CUDA GPU and the "
                "built plugin on one machine; missing here: " + ", ".join(missing))
    return None


def _tensorflow_built_with_cuda() -> bool:
    """Whether the installed TensorFlow has CUDA of its own (asked in a
    child: TensorFlow cannot be imported next to pluggable)."""
    proc = subprocess.run([sys.executable, "-c", "import tensorflow as tf; "
                           "print(tf.test.is_built_with_cuda())"],
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3",
                                   CUDA_VISIBLE_DEVICES=""))
    return proc.stdout.strip().endswith("True")


def test_cuda_plugin_kernels_do_not_clash_with_tensorflows_own():
    """Loading the plugin into TensorFlow needs no GPU: TensorFlow registers
    its kernels either way. None may match the nodes one of TensorFlow's own
    "GPU" kernels matches at the same priority (TensorFlow would refuse to
    run such a node on the GPU)."""
    reason = tf_certify.tensorflow_missing_reason() or _not_built_reason()
    if reason:
        pytest.skip(reason)
    report = tf_certify.certify(str(CUDA_PLUGIN), registrations_only=True)
    assert report.error is None, tf_certify.format_report(report)
    assert report.plugin_kernels > 100, tf_certify.format_report(report)
    assert not report.clashes, tf_certify.format_report(report)


def test_cuda_plugin_runs_every_op_on_the_gpu_inside_tensorflow():
    """TensorFlow loads libpluggable_cuda.so as its GPU device and every op
    the plugin registers runs on /device:GPU:0, eagerly and in tf.function,
    in loops read at the end, with TensorFlow's CPU results."""
    reason = tensorflow_with_gpu_missing_reason()
    if reason:
        pytest.skip(reason)
    if _tensorflow_built_with_cuda():
        pytest.skip("the installed TensorFlow is built with CUDA: its own GPU kernels would "
                    "run on the plugin's device; check with tensorflow-cpu")
    report = tf_certify.certify(str(CUDA_PLUGIN), iterations=50, hide_gpus=False)
    assert report.error is None, tf_certify.format_report(report)
    assert report.device_types == ["GPU"], tf_certify.format_report(report)
    ours = {op for (op, device_type) in registry.KERNELS if device_type == "GPU"}
    assert ours - VARIABLE_API_OPS == {r["op"] for r in report.results}
    assert not report.differences, tf_certify.format_report(report)
    assert report.certified, tf_certify.format_report(report)
