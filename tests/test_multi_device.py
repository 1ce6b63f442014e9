"""Two devices of one plugin (PLUGGABLE_MY_DEVICE_COUNT=2), in a child
process so the device list of the test process is unchanged: ops on device
1, device-to-device copies both ways, scopes choosing the ordinal."""
import os
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent("""
    import numpy as np, pluggable as pg
    assert [d.name for d in pg.list_physical_devices("MY_DEVICE")] == [
        "/physical_device:MY_DEVICE:0", "/physical_device:MY_DEVICE:1"]
    rng = np.random.default_rng()
    a = rng.standard_normal((64, 33)).astype(np.float32)
    with pg.device("MY_DEVICE:1"):
        x = pg.constant(a)
        with pg.testing.expect_kernel("Exp", "MY_DEVICE"):
            y = pg.exp(x)
    assert y.device.endswith("MY_DEVICE:1"), y.device
    np.testing.assert_allclose(y.numpy(), np.exp(a), rtol=1e-6)
    z = y.to("MY_DEVICE:0")
    assert z.device.endswith("MY_DEVICE:0")
    np.testing.assert_array_equal(z.numpy(), y.numpy())
    with pg.device("MY_DEVICE:0"):
        w = pg.add(z, x)            # x lives on device 1: copied to device 0
    assert w.device.endswith("MY_DEVICE:0")
    np.testing.assert_allclose(w.numpy(), np.exp(a) + a, rtol=1e-6, atol=1e-6)
    back = w.to("MY_DEVICE:1").to("CPU:0")
    np.testing.assert_allclose(back.numpy(), np.exp(a) + a, rtol=1e-6, atol=1e-6)
    print("OK")
""")


def test_two_devices_of_one_plugin():
    env = dict(os.environ, PLUGGABLE_MY_DEVICE_COUNT="2")
    proc = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith("OK")
