"""Donated inputs (``pg_kernel_run1_donated``, TF_ForwardInputOrAllocateOutput):
a kernel may write its output over an input its caller gave up, where no
other handle shares that input's memory and the memory is the core's own.
On MY_DEVICE through the host plugin's CollectiveReduceV2 (which forwards
its input, as TensorFlow's kernel does) and through
``pg.distribute.all_reduce(t, donate=True)``; the CUDA plugin's NCCL path
runs in tests/test_distribute_mp.py on a GPU."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import pluggable as pg
from pluggable import errors
from pluggable._core import ffi, lib
from pluggable.distribute import collectives
from pluggable.distribute.run import free_port

DEV = "MY_DEVICE:0"
_keys = iter(range(70000, 80000))


def _address(t) -> int:
    return int(ffi.cast("uintptr_t", lib.TF_TensorData(t._h)))


def _forwarded(op: str = "CollectiveReduceV2", device_type: str = "MY_DEVICE") -> int:
    return pg.testing.kernel_forwards(op, device_type)


@pytest.fixture
def reduce1():
    """A prepared all-reduce of a group of one on MY_DEVICE:0 (the first
    call made, so that later calls take the fast path) and its inputs
    after the tensor."""
    dev = pg.get_device(DEV)
    prep, size_t, key_t = collectives.prepare("CollectiveReduceV2", dev,
                                              collectives.REDUCE_ATTRS["sum"], 30.0, 1,
                                              next(_keys))
    keys = lambda: [size_t, key_t, collectives.instance_input(next(_keys))]  # noqa: E731
    with pg.device(DEV):
        prep([pg.constant(np.ones(4, np.float32)), *keys()])[0].numpy()
    assert prep.plan is not None
    return prep, keys


def _on_device(a):
    with pg.device(DEV):
        return pg.constant(a)


def test_a_donated_input_takes_the_result(reduce1, rng):
    prep, keys = reduce1
    for _ in range(3):
        a = rng.standard_normal((64, 33)).astype(np.float32)
        x = _on_device(a)
        where, before = _address(x), _forwarded()
        with pg.testing.expect_kernel("CollectiveReduceV2", "MY_DEVICE"):
            y = prep([x, *keys()], 1)[0]
        x._give_up("the test")
        assert _forwarded() == before + 1
        assert _address(y) == where and y.device.endswith(DEV)
        np.testing.assert_array_equal(y.numpy(), a)   # the sum over a group of one


def test_an_input_not_donated_is_left_alone(reduce1, rng):
    prep, keys = reduce1
    a = rng.standard_normal(100).astype(np.float32)
    x = _on_device(a)
    before = _forwarded()
    y = prep([x, *keys()])[0]
    assert _forwarded() == before and _address(y) != _address(x)
    np.testing.assert_array_equal(y.numpy(), a)
    np.testing.assert_array_equal(x.numpy(), a)


def test_shared_memory_is_never_written_over(reduce1, rng):
    """A reshape shares the donated tensor's buffer; a DLPack export holds it
    too; memory imported from numpy is not the core's: none is forwarded."""
    prep, keys = reduce1
    a = rng.standard_normal((8, 8)).astype(np.float32)
    x = _on_device(a)
    view = pg.reshape(x, [64])
    before = _forwarded()
    y = prep([x, *keys()], 1)[0]
    assert _forwarded() == before and _address(y) != _address(view)
    np.testing.assert_array_equal(view.numpy(), a.reshape(64))
    np.testing.assert_array_equal(y.numpy(), a)

    x2 = _on_device(a)
    exported = np.from_dlpack(x2)
    y2 = prep([x2, *keys()], 1)[0]
    assert _forwarded() == before
    np.testing.assert_array_equal(exported, a)
    np.testing.assert_array_equal(y2.numpy(), a)

    b = rng.standard_normal(16).astype(np.float32)
    imported = pg.from_dlpack(b)                        # CPU, the caller's memory
    assert imported.numpy().ctypes.data == b.ctypes.data
    x3 = _on_device(b)
    del imported
    y3 = prep([x3, *keys()], 1)[0]
    np.testing.assert_array_equal(y3.numpy(), b)


def test_a_donated_tensor_cannot_be_used_again():
    x = _on_device(np.arange(6, dtype=np.float32))
    x._give_up("pg.distribute.all_reduce")
    assert x.is_donated and x.shape == (6,)
    for use in (x.numpy, lambda: x + 1, lambda: np.asarray(x), lambda: pg.reduce_sum(x),
                lambda: x.to("CPU:0"), lambda: np.from_dlpack(x), lambda: pg.reshape(x, [2, 3])):
        with pytest.raises(errors.FailedPreconditionError, match="donated to pg.distribute") \
                as info:
            use()
        assert "asynchronous" not in str(info.value)
    assert "donated" in repr(x)
    c = pg.constant(np.ones(3, np.float32))         # a CPU tensor is never given up
    c._give_up("pg.distribute.all_reduce")
    assert not c.is_donated and c.numpy().tolist() == [1, 1, 1]


_GROUP_OF_ONE = """
    d.init_process_group(backend="host", timeout=30)
    for dt in (np.float32, np.int64, np.bool_):
        a = (rng.standard_normal((5, 7)) * 10).astype(dt)
        with pg.device("MY_DEVICE:0"):
            x = pg.constant(a)
        y = d.all_reduce(x, op="max", donate=True)
        assert x.is_donated and not y.is_donated
        np.testing.assert_array_equal(y.numpy(), a)
        try:
            x.numpy()
        except errors.FailedPreconditionError as e:
            assert "pg.distribute.all_reduce" in str(e)
        else:
            raise AssertionError("a donated tensor was read")
    try:                                    # refused before anything is given up
        d.all_reduce(y, op="nope", donate=True)
    except errors.InvalidArgumentError:
        assert not y.is_donated
    d.destroy_process_group()
"""


def test_all_reduce_donate_in_a_process_group(monkeypatch, rng):
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    scope = dict(os=os, np=np, pg=pg, errors=errors, d=pg.distribute, rng=rng)
    exec(compile(textwrap.dedent(_GROUP_OF_ONE), "group_of_one", "exec"), scope)


_IN_PROCESS = """
import json, sys
import numpy as np
import pluggable as pg
from pluggable import errors
from pluggable._core import ffi, lib

def address(t):
    return int(ffi.cast("uintptr_t", lib.TF_TensorData(t._h)))

def forwarded():
    return pg.testing.kernel_forwards("CollectiveReduceV2", "MY_DEVICE")

rng = np.random.default_rng(int(sys.argv[1]))
devs = [f"MY_DEVICE:{i}" for i in range(3)]
out = []
for step in range(4):       # the first call takes the general path: nothing forwarded
    arrays = [rng.standard_normal((40, 9)).astype(np.float32) for _ in devs]
    xs = []
    for d, a in zip(devs, arrays):
        with pg.device(d):
            xs.append(pg.constant(a))
    where, before = [address(x) for x in xs], forwarded()
    ys = pg.distribute.all_reduce(xs, op="max", donate=True)
    want = np.maximum(np.maximum(arrays[0], arrays[1]), arrays[2])
    assert all(x.is_donated for x in xs) and not any(y.is_donated for y in ys)
    for d, y in zip(devs, ys):
        assert y.device.endswith(d)
        np.testing.assert_array_equal(y.numpy(), want)
    try:
        xs[1].numpy()
        raise AssertionError("a donated tensor was read")
    except errors.FailedPreconditionError:
        pass
    out.append([forwarded() - before, [address(y) for y in ys] == where])
kept = []
for d in devs:
    with pg.device(d):
        kept.append(pg.constant(np.ones(5, np.float32)))
ys = pg.distribute.all_reduce(kept)              # not donated: left alone
assert not any(k.is_donated for k in kept) and kept[0].numpy().tolist() == [1] * 5
np.testing.assert_array_equal(ys[2].numpy(), np.full(5, 3, np.float32))
print("RESULT " + json.dumps(out))
"""


def test_the_in_process_form_donates_each_devices_tensor(rng):
    """Three MY_DEVICE devices in a fresh process; from the second call on
    (the first makes the plans) every participant's kernel writes its result
    over its donated input."""
    env = dict(os.environ, PLUGGABLE_MY_DEVICE_COUNT="3")
    proc = subprocess.run([sys.executable, "-c", _IN_PROCESS, str(rng.integers(1 << 30))],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    steps = json.loads(line[len("RESULT "):])
    assert steps[0] == [0, False]
    assert steps[1:] == [[3, True]] * 3


def test_the_prepared_general_path_ignores_donation(rng):
    """The first call of a Prepared op (no plan yet) runs through execute:
    nothing is forwarded, the result is right."""
    dev = pg.get_device(DEV)
    prep, size_t, key_t = collectives.prepare("CollectiveReduceV2", dev,
                                              collectives.REDUCE_ATTRS["sum"], 30.0, 1,
                                              next(_keys))
    a = rng.standard_normal(10).astype(np.float32)
    x = _on_device(a)
    before = _forwarded()
    y = prep([x, size_t, key_t, collectives.instance_input(next(_keys))], 1)[0]
    assert prep.plan is not None and _forwarded() == before
    np.testing.assert_array_equal(y.numpy(), a)
    np.testing.assert_array_equal(x.numpy(), a)
