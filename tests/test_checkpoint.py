"""pg.train.Checkpoint: exact round trips of variables and optimizer slots on
every device, the latest-checkpoint file, and damaged or mismatched
checkpoints (typed errors, nothing restored)."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

import pluggable as pg

DEVICES = ["CPU:0", "MY_DEVICE:0", "GPU:0"]


@pytest.fixture(params=DEVICES)
def device(request):
    name = request.param
    if name.startswith("GPU") and not pg.list_physical_devices("GPU"):
        pytest.skip("no GPU device present")
    return name


class Dense:
    def __init__(self, rng, n_in, n_out, dtype=np.float32):
        self.kernel = pg.Variable(rng.standard_normal((n_in, n_out)).astype(dtype), name="kernel")
        self.bias = pg.Variable(rng.standard_normal(n_out).astype(dtype), name="bias")


class Model:
    def __init__(self, rng):
        self.layers = [Dense(rng, 3, 4), Dense(rng, 4, 2, np.float64)]
        self.extra = {"scale": pg.Variable(np.float16(rng.standard_normal()))}


def _values(model):
    return [v.numpy().copy() for layer in model.layers for v in (layer.kernel, layer.bias)] + \
        [model.extra["scale"].numpy().copy()]


def _step(opt, model, rng):
    pairs = [(pg.constant(rng.standard_normal(v.shape).astype(v.dtype.as_numpy_dtype))
              ._copy_to(v.device_object), v)
             for layer in model.layers for v in (layer.kernel, layer.bias)]
    opt.apply_gradients(pairs)


def test_round_trip_is_exact_with_optimizer_slots(device, rng, tmp_path):
    with pg.device(device):
        model = Model(rng)
    opt = pg.optimizers.Adam(0.1)
    _step(opt, model, rng)
    ckpt = pg.train.Checkpoint(model=model, optimizer=opt)
    path = ckpt.save(str(tmp_path / "run"))
    assert path.endswith("run-1") and pg.train.latest_checkpoint(str(tmp_path)) == path
    saved = _values(model)
    slots = [opt.get_slot(model.layers[0].kernel, n).numpy().copy() for n in ("m", "v")]
    _step(opt, model, rng)
    _step(opt, model, rng)
    assert not np.array_equal(_values(model)[0], saved[0])
    ckpt.restore(path).assert_consumed()
    for after, before in zip(_values(model), saved):
        assert after.dtype == before.dtype
        np.testing.assert_array_equal(after, before)
    for n, before in zip(("m", "v"), slots):
        np.testing.assert_array_equal(opt.get_slot(model.layers[0].kernel, n).numpy(), before)
    assert int(opt.iterations.numpy()) == 1
    assert model.layers[0].kernel.device.endswith(device)


def test_restore_into_fresh_objects_makes_the_slots(rng, tmp_path):
    with pg.device("MY_DEVICE:0"):
        model = Model(rng)
    opt = pg.optimizers.SGD(0.1, momentum=0.9)
    _step(opt, model, rng)
    path = pg.train.Checkpoint(model=model, optimizer=opt).save(str(tmp_path / "c"))
    fresh_rng = np.random.default_rng(1)
    with pg.device("MY_DEVICE:0"):
        other = Model(fresh_rng)
    other_opt = pg.optimizers.SGD(0.1, momentum=0.9)
    pg.train.Checkpoint(model=other, optimizer=other_opt).restore(path).assert_consumed()
    for a, b in zip(_values(other), _values(model)):
        np.testing.assert_array_equal(a, b)
    k, k2 = model.layers[1].kernel, other.layers[1].kernel
    np.testing.assert_array_equal(other_opt.get_slot(k2, "momentum").numpy(),
                                  opt.get_slot(k, "momentum").numpy())
    assert other_opt.get_slot(k2, "momentum").device == k2.device


def test_save_counts_and_latest_checkpoint(rng, tmp_path):
    v = pg.Variable(np.arange(3.0))
    ckpt = pg.train.Checkpoint(v=v)
    assert pg.train.latest_checkpoint(str(tmp_path)) is None
    first = ckpt.save(str(tmp_path / "s"))
    v.assign(np.ones(3))
    second = ckpt.save(str(tmp_path / "s"))
    assert (first, second) == (str(tmp_path / "s-1"), str(tmp_path / "s-2"))
    assert pg.train.latest_checkpoint(str(tmp_path)) == second
    ckpt.restore(first)
    np.testing.assert_array_equal(v.numpy(), np.arange(3.0))


def test_mismatched_checkpoint_restores_nothing(rng, tmp_path):
    a = pg.Variable(rng.standard_normal(3))
    b = pg.Variable(rng.standard_normal((2, 2)))
    path = pg.train.Checkpoint(a=a, b=b).save(str(tmp_path / "m"))
    a2 = pg.Variable(np.zeros(3))
    b2 = pg.Variable(np.zeros((3, 2)))
    with pytest.raises(pg.errors.InvalidArgumentError, match=r"b: .*\[2, 2\].*\[3, 2\]"):
        pg.train.Checkpoint(a=a2, b=b2).restore(path)
    np.testing.assert_array_equal(a2.numpy(), np.zeros(3))     # a fitted, yet was left alone
    b3 = pg.Variable(np.zeros((2, 2), np.float32))
    with pytest.raises(pg.errors.InvalidArgumentError, match="float64.*float32"):
        pg.train.Checkpoint(a=a2, b=b3).restore(path)
    np.testing.assert_array_equal(a2.numpy(), np.zeros(3))
    status = pg.train.Checkpoint(a=a2).restore(path)
    with pytest.raises(AssertionError, match="b"):
        status.assert_consumed()
    np.testing.assert_array_equal(a2.numpy(), a.numpy())


def test_damaged_or_missing_checkpoint_is_a_typed_error(rng, tmp_path):
    v = pg.Variable(rng.standard_normal(16))
    before = v.numpy().copy()
    ckpt = pg.train.Checkpoint(v=v)
    path = ckpt.save(str(tmp_path / "d"))
    with pytest.raises(pg.errors.NotFoundError, match="not found"):
        ckpt.restore(str(tmp_path / "nothing-1"))
    with open(path + ".data", "r+b") as f:          # flip one byte of the value
        f.seek(5)
        byte = f.read(1)
        f.seek(5)
        f.write(bytes([byte[0] ^ 0xFF]))
    v.assign(np.zeros(16))
    with pytest.raises(pg.errors.DataLossError, match="checksum"):
        ckpt.restore(path)
    np.testing.assert_array_equal(v.numpy(), np.zeros(16))
    with open(path + ".data", "r+b") as f:
        f.truncate(10)
    with pytest.raises(pg.errors.DataLossError, match="bytes"):
        ckpt.restore(path)
    with open(path + ".index", "w") as f:
        f.write("{not json")
    with pytest.raises(pg.errors.DataLossError, match="JSON"):
        ckpt.restore(path)
    assert not np.array_equal(before, np.zeros(16))
    assert not [n for n in os.listdir(tmp_path) if ".tmp" in n]


# --------------------------------------------------------------- hostile files

def _saved(rng, tmp_path):
    v = pg.Variable(rng.standard_normal(8))
    ckpt = pg.train.Checkpoint(v=v)
    path = ckpt.save(str(tmp_path / "h"))
    return v, ckpt, path


def _edit_index(path, **changes):
    with open(path + ".index") as f:
        index = json.load(f)
    index.update(changes)
    with open(path + ".index", "w") as f:
        json.dump(index, f)


@pytest.mark.parametrize("name", ["../outside.data", "/etc/passwd", "sub/h-1.data", "..",
                                  "", 7, None])
def test_data_file_outside_the_directory_is_refused(rng, tmp_path, name):
    inner = tmp_path / "inner"
    inner.mkdir()
    v, ckpt, path = _saved(rng, inner)
    os.rename(path + ".data", tmp_path / "outside.data")   # a file that would fit
    (inner / "sub").mkdir()
    os.symlink(tmp_path / "outside.data", inner / "sub" / "h-1.data")
    _edit_index(path, data_file=name)
    v.assign(np.zeros(8))
    with pytest.raises(pg.errors.DataLossError, match="plain file name"):
        ckpt.restore(path)
    np.testing.assert_array_equal(v.numpy(), np.zeros(8))


def test_data_file_that_is_a_symlink_is_refused(rng, tmp_path):
    v, ckpt, path = _saved(rng, tmp_path)
    os.rename(path + ".data", tmp_path / "real")
    os.symlink(tmp_path / "real", path + ".data")
    with pytest.raises(pg.errors.DataLossError, match="symbolic link"):
        ckpt.restore(path)


@pytest.mark.parametrize("kind", ["dev_zero", "fifo", "directory"])
def test_data_file_that_is_no_regular_file_is_refused_unread(rng, tmp_path, kind):
    v, ckpt, path = _saved(rng, tmp_path)
    os.remove(path + ".data")
    if kind == "dev_zero":
        _edit_index(path, data_file="zero")
        os.symlink("/dev/zero", tmp_path / "zero")   # and as itself, below
    elif kind == "fifo":
        os.mkfifo(path + ".data")                    # no writer: a blocking read hangs
    else:
        os.mkdir(path + ".data")
    with pytest.raises(pg.errors.DataLossError, match="symbolic link|not a regular file"):
        ckpt.restore(path)


def test_dev_zero_and_fifo_index_are_refused(rng, tmp_path):
    v, ckpt, path = _saved(rng, tmp_path)
    with pytest.raises(pg.errors.DataLossError, match="p.index is not a regular file"):
        ckpt.restore(_prefix_of(tmp_path, "/dev/zero"))
    os.remove(path + ".index")
    os.mkfifo(path + ".index")
    with pytest.raises(pg.errors.DataLossError, match="not a regular file"):
        ckpt.restore(path)
    os.remove(path + ".index")
    os.mkdir(path + ".index")
    with pytest.raises(pg.errors.DataLossError, match="not a regular file"):
        ckpt.restore(path)


def _prefix_of(tmp_path, index_path):
    """A prefix whose index is `index_path` (a link named <prefix>.index)."""
    os.symlink(index_path, tmp_path / "p.index")
    return str(tmp_path / "p")


def test_data_larger_than_declared_is_not_read(rng, tmp_path):
    v, ckpt, path = _saved(rng, tmp_path)
    with open(path + ".data", "ab") as f:
        f.write(b"\0" * 4096)
    with pytest.raises(pg.errors.DataLossError, match=r"more than the 72 allowed"):
        ckpt.restore(path)


@pytest.mark.parametrize("index_text", [
    "[" * 100000 + "]" * 100000,                      # RecursionError in json
    '{"format": "pluggable.checkpoint", "version": 1, "data_file": "h-1.data", '
    '"data_size": "64", "entries": {}}',
    '{"format": "pluggable.checkpoint", "version": 1, "data_file": "h-1.data", '
    '"data_size": 64, "entries": {"v": {"dtype": "float64", "shape": [1e300], '
    '"offset": 0, "size": 64, "crc32": 0}}}',
    '{"format": "pluggable.checkpoint", "version": 1, "data_file": "h-1.data", '
    '"data_size": 64, "entries": {"v": {"dtype": "float64", "shape": [-8, -1], '
    '"offset": 0, "size": 64, "crc32": 0}}}',
    '{"format": "pluggable.checkpoint", "version": 1, "data_file": "h-1.data", '
    '"data_size": 64, "entries": {"v": {"dtype": "float64", "shape": [99999999999999999999, '
    '99999999999999999999], "offset": 0, "size": 64, "crc32": 0}}}',
    '{"format": "pluggable.checkpoint", "version": 1, "data_file": "h-1.data", '
    '"data_size": 64, "entries": {"v": [1, 2]}}',
    '{"format": "pluggable.checkpoint", "version": 1, "data_file": "h-1.data", '
    '"data_size": 64, "entries": {"v": {"dtype": "nope", "shape": [8], '
    '"offset": 0, "size": 64, "crc32": 0}}}',
    '{"a": NaN, "b": 1e999999}',
])
def test_malformed_index_is_data_loss(rng, tmp_path, index_text):
    v, ckpt, path = _saved(rng, tmp_path)
    with open(path + ".index", "w") as f:
        f.write(index_text)
    with pytest.raises(pg.errors.DataLossError, match=r"checkpoint .*h-1 is damaged"):
        ckpt.restore(path)


def test_latest_checkpoint_never_leaves_the_directory(rng, tmp_path):
    inner = tmp_path / "inner"
    inner.mkdir()
    v, ckpt, path = _saved(rng, tmp_path)      # a real checkpoint one level up
    for name in ["../h-1", str(tmp_path / "h-1"), "..", "a/../../h-1"]:
        (inner / "checkpoint").write_text(f'model_checkpoint_path: "{name}"\n')
        with pytest.raises(pg.errors.DataLossError, match="not a plain name"):
            pg.train.latest_checkpoint(str(inner))
    os.remove(inner / "checkpoint")
    os.mkfifo(inner / "checkpoint")
    with pytest.raises(pg.errors.DataLossError, match="not a regular file"):
        pg.train.latest_checkpoint(str(inner))


def test_save_never_writes_through_a_planted_link(rng, tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    v = pg.Variable(rng.standard_normal(4))
    ckpt = pg.train.Checkpoint(v=v)
    prefix = tmp_path / "s-1"
    # every name the old writer could have used, planted as links to the victim
    for suffix in (".data", ".index"):
        os.symlink(victim, f"{prefix}{suffix}.tmp{os.getpid()}")
    os.symlink(victim, tmp_path / f"checkpoint.tmp{os.getpid()}")
    path = ckpt.save(str(tmp_path / "s"))
    assert victim.read_bytes() == b"precious"
    assert not os.path.islink(path + ".data") and os.path.isfile(path + ".data")
    v.assign(np.zeros(4))
    ckpt.restore(pg.train.latest_checkpoint(str(tmp_path)))
    assert not np.array_equal(v.numpy(), np.zeros(4))
