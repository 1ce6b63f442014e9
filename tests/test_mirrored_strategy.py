"""``pg.distribute.MirroredStrategy`` against TensorFlow's: the same script
runs under TensorFlow and under pluggable (``import pluggable as tf``), each
in a child process of its own (the logical CPU devices must be configured
before the runtime starts, and TensorFlow cannot share a process with
pluggable), on fresh random data; the printed PerReplica values, reductions,
dataset splits and the weights after a few training steps must agree. A
training step on 2 replicas gives the weights of 1 replica on the doubled
batch. MY_DEVICE runs it on two devices of the host plugin
(PLUGGABLE_MY_DEVICE_COUNT=2), with the reduction on the collective op."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = textwrap.dedent('''
    import json, sys
    import numpy as np
    import {module} as tf
    data = np.load(sys.argv[1])
    x, y, w0 = data["x"], data["y"], data["w0"]
    devices = {devices!r}
    if devices[0].startswith("cpu"):
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in devices])
    out = {{}}

    def train(strategy, batch):
        with strategy.scope():
            w = tf.Variable(w0)
        n = strategy.num_replicas_in_sync
        dist = strategy.experimental_distribute_dataset(
            tf.data.Dataset.from_tensor_slices((x, y)).batch(batch))

        def step(xb, yb):
            with tf.GradientTape() as tape:
                err = tf.matmul(xb, w) - yb
                loss = tf.reduce_sum(err * err) / batch
            return tape.gradient(loss, w), loss

        losses = []
        for xb, yb in dist:
            grads, loss = strategy.run(step, args=(xb, yb))
            g = strategy.reduce(tf.distribute.ReduceOp.SUM, grads, axis=None)
            w.assign_sub(0.1 * g)
            losses.append(float(strategy.reduce("SUM", loss, axis=None)))
        return w, losses

    two = tf.distribute.MirroredStrategy(devices)
    out["replicas"] = two.num_replicas_in_sync
    w, losses = train(two, 8)
    out["weights"] = [v.numpy().tolist() for v in two.experimental_local_results(w)]
    out["losses"] = losses
    one = tf.distribute.MirroredStrategy(devices[:1])
    w1, losses1 = train(one, 8)
    out["weights_one"] = w1.numpy().tolist()
    out["losses_one"] = losses1

    per = two.run(lambda v: v * 2.0 + tf.cast(
        tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32),
        args=(tf.constant(x[:2, 0]),))
    out["per_replica"] = str(per)
    out["sum"] = two.reduce("SUM", per, axis=None).numpy().tolist()
    out["mean"] = two.reduce("MEAN", per, axis=None).numpy().tolist()
    out["sum_axis"] = two.reduce(tf.distribute.ReduceOp.SUM, per, axis=0).numpy().tolist()
    out["mean_axis"] = two.reduce(tf.distribute.ReduceOp.MEAN, per, axis=0).numpy().tolist()
    parts = next(iter(two.experimental_distribute_dataset(
        tf.data.Dataset.from_tensor_slices(x[:5]).batch(5))))
    out["split"] = [p.numpy().tolist() for p in two.experimental_local_results(parts)]
    {extra}
    print("RESULT" + json.dumps(out))
''')


def make_data(tmp_path):
    """Fresh random regression data for both children (tmp_path/data.npz)."""
    rng = np.random.default_rng()
    x = rng.standard_normal((16, 3)).astype(np.float32)
    w_true = rng.standard_normal((3, 1)).astype(np.float32)
    np.savez(tmp_path / "data.npz", x=x, y=x @ w_true, w0=np.zeros((3, 1), np.float32))


def child(module, devices, tmp_path, extra="", env=None):
    """The script's results under `module` on `devices` (None: it found too
    few devices and said so)."""
    code = SCRIPT.format(module=module, devices=devices, extra=extra)
    full_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="",
                    TF_ENABLE_ONEDNN_OPTS="0", **(env or {}))
    full_env["PYTHONPATH"] = ROOT + os.pathsep + full_env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "data.npz")],
                          env=full_env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    if "NO_MY_DEVICE" in proc.stdout:
        return None
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")][-1]
    return json.loads(line[len("RESULT"):])


def close(a, b):
    np.testing.assert_allclose(np.asarray(a, float), np.asarray(b, float), rtol=1e-5,
                               atol=1e-6)


def check_against(got, want):
    assert got["replicas"] == want["replicas"] == 2
    for key in ("weights", "losses", "weights_one", "losses_one", "sum", "mean", "sum_axis",
                "mean_axis"):
        close(got[key], want[key])
    assert [len(p) for p in got["split"]] == [len(p) for p in want["split"]]
    close(sum(got["split"], []), sum(want["split"], []))
    # the same text with the numbers compared as numbers
    num = r"-?\d+\.?\d*(?:e[-+]?\d+)?"
    assert re.sub(num, "#", got["per_replica"]) == re.sub(num, "#", want["per_replica"])
    close([float(v) for v in re.findall(num, got["per_replica"])],
          [float(v) for v in re.findall(num, want["per_replica"])])
    # two replicas on halves of each batch: the weights of one on the whole batch
    close(got["weights"][0], got["weights_one"])
    close(got["weights"][1], got["weights_one"])
    close(got["losses"], got["losses_one"])


def tensorflow_or_skip():
    import importlib.util
    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("TensorFlow is not installed: the reference for this test")


def test_logical_cpu_devices_match_tensorflow(tmp_path):
    tensorflow_or_skip()
    make_data(tmp_path)
    want = child("tensorflow", ["cpu:0", "cpu:1"], tmp_path)
    got = child("pluggable", ["cpu:0", "cpu:1"], tmp_path, textwrap.dedent('''
    out["logical"] = [d.name for d in tf.config.list_logical_devices("CPU")]
    '''))
    check_against(got, want)
    assert got["logical"] == ["/device:CPU:0", "/device:CPU:1"]


def test_two_my_devices_match_tensorflow(tmp_path):
    tensorflow_or_skip()
    make_data(tmp_path)
    want = child("tensorflow", ["cpu:0", "cpu:1"], tmp_path)
    extra = textwrap.dedent('''
    if len(tf.list_physical_devices("MY_DEVICE")) < 2:
        print("NO_MY_DEVICE"); sys.exit(0)
    with tf.testing.expect_kernel("CollectiveReduceV2", "MY_DEVICE"), \\
            tf.testing.expect_kernel("Mul", "MY_DEVICE", 2):
        with two.scope():
            v = tf.Variable(np.ones(3, np.float32))
        grads = two.run(lambda: v * 3.0)
        total = two.reduce("SUM", grads, axis=None)
    out["devices"] = [c.device for c in v.values]
    out["total"] = total.numpy().tolist()
    ''')
    got = child("pluggable", ["MY_DEVICE:0", "MY_DEVICE:1"], tmp_path, extra,
                {"PLUGGABLE_MY_DEVICE_COUNT": "2"})
    if got is None:
        pytest.skip("the MY_DEVICE host plugin is not built")
    check_against(got, want)
    assert [d.rsplit("/", 1)[-1] for d in got["devices"]] == ["device:MY_DEVICE:0",
                                                             "device:MY_DEVICE:1"]
    assert got["total"] == [6.0, 6.0, 6.0]


ERRORS = textwrap.dedent('''
    import numpy as np, pluggable as pg
    from pluggable import errors
    cpu = pg.config.list_physical_devices("CPU")[0]
    pg.config.set_logical_device_configuration(cpu, [pg.config.LogicalDeviceConfiguration()] * 2)
    def raises(kind, fn, match):
        try:
            fn()
        except kind as e:
            assert match in str(e), (match, str(e))
        else:
            raise AssertionError(f"expected {kind.__name__}")
    raises(ValueError, lambda: pg.distribute.MirroredStrategy(["cpu:0", "CPU:0"]), "duplicates")
    raises(ValueError, lambda: pg.distribute.MirroredStrategy(["cpu:0", "MY_DEVICE:0"]),
           "one type")
    raises(errors.InvalidArgumentError, lambda: pg.distribute.MirroredStrategy(["NOPE:0"]),
           "NOPE:0")
    # a CPU ordinal beyond the logical CPUs soft-places on CPU:0, as in TensorFlow
    far = pg.distribute.MirroredStrategy(["cpu:0", "cpu:7"])
    assert far.extended.worker_devices[1].endswith("device:CPU:7")
    assert float(far.reduce("SUM", far.run(lambda: pg.constant(2.0)), axis=None)) == 4.0
    pg.config.set_soft_device_placement(False)
    raises(errors.InvalidArgumentError, lambda: pg.distribute.MirroredStrategy(["cpu:7"]),
           "cpu:7")
    pg.config.set_soft_device_placement(True)
    s = pg.distribute.MirroredStrategy(["cpu:0", "cpu:1"])
    with s.scope():
        raises(errors.FailedPreconditionError, lambda: s.run(lambda: pg.Variable(1.0)),
               "strategy.scope()")
    raises(errors.UnimplementedError, lambda: s.run(
        lambda: pg.distribute.get_replica_context().all_reduce("SUM", pg.constant(1.0))),
        "strategy.reduce")
    raises(ValueError, lambda: s.reduce("MAX", pg.constant(1.0), axis=None), "ReduceOp")
    assert pg.distribute.get_replica_context() is None
    v = pg.Variable(1.0)
    assert type(v) is pg.Variable     # outside scope(): a plain variable
    assert float(s.reduce("SUM", pg.constant(2.0), axis=None)) == 4.0
    print("OK")
''')


def test_bad_use_is_a_typed_error():
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", ERRORS], env=env, capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout + proc.stderr
