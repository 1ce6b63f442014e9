"""pg.saved_model: TensorFlow's SavedModel format, both ways.

TensorFlow loads what pluggable saves and pluggable loads what TensorFlow
saves (TensorFlow runs in a child process: tests/tf_oracle.py says why);
pluggable's own round trip runs on CPU and MY_DEVICE; damaged, truncated,
newer and hostile directories are typed errors naming the file."""
from __future__ import annotations

import os
import struct

import numpy as np
import pytest

import pluggable as pg
from pluggable.saved_model import tensor_bundle

SPEC = [pg.TensorSpec([None, 4], pg.float32, name="x")]


class Dense(pg.Module):
    def __init__(self, rng, n_in, n_out, name=None):
        super().__init__(name=name)
        self.w = pg.Variable(rng.standard_normal((n_in, n_out)).astype(np.float32), name="w")
        self.b = pg.Variable(rng.standard_normal(n_out).astype(np.float32), name="b")


class Model(pg.Module):
    def __init__(self, rng):
        super().__init__()
        self.layers = [Dense(rng, 4, 5, name="one"), Dense(rng, 5, 3, name="two")]
        self.scale = pg.Variable(np.float32(rng.uniform(0.5, 2.0)), trainable=False,
                                 name="scale")

    @pg.function(input_signature=SPEC)
    def __call__(self, x):
        h = pg.tanh(pg.matmul(x, self.layers[0].w) + self.layers[0].b)
        return (pg.matmul(h, self.layers[1].w) + self.layers[1].b) * self.scale


def reference(model: Model, x: np.ndarray) -> np.ndarray:
    (l1, l2) = model.layers
    h = np.tanh(x @ l1.w.numpy() + l1.b.numpy())
    return (h @ l2.w.numpy() + l2.b.numpy()) * model.scale.numpy()


def variable_values(model) -> dict:
    return {v.name: v.numpy() for v in model.variables}


# ------------------------------------------------------------------ TensorFlow loads ours

def test_tensorflow_loads_a_pluggable_savedmodel(tmp_path, rng, tf_oracle):
    model = Model(rng)
    x = rng.standard_normal((7, 4)).astype(np.float32)
    want = model(pg.constant(x)).numpy()
    np.testing.assert_allclose(want, reference(model, x), rtol=1e-5, atol=1e-5)
    pg.saved_model.save(model, tmp_path / "m")
    got = tf_oracle.run(
        "m = tf.saved_model.load(path)\n"
        "sig = m.signatures['serving_default']\n"
        "result = {'call': m(x), 'sig': sig(x=tf.constant(x)),\n"
        "          'vars': [(v.numpy(), v.trainable) for v in\n"
        "                   [m.layers[0].w, m.layers[0].b, m.layers[1].w, m.layers[1].b,\n"
        "                    m.scale]],\n"
        "          'inputs': sorted(sig.structured_input_signature[1])}\n",
        path=str(tmp_path / "m"), x=x)
    np.testing.assert_allclose(got["call"], want, rtol=1e-5, atol=1e-5)
    assert list(got["sig"]) == ["output_0"]
    np.testing.assert_allclose(got["sig"]["output_0"], want, rtol=1e-5, atol=1e-5)
    assert got["inputs"] == ["x"]
    ours = [model.layers[0].w, model.layers[0].b, model.layers[1].w, model.layers[1].b,
            model.scale]
    for var, (value, trainable) in zip(ours, got["vars"]):
        np.testing.assert_array_equal(value, var.numpy())
        assert trainable == var.trainable
    assert [t for _, t in got["vars"]] == [True] * 4 + [False]


def test_tensorflow_reads_the_variables_as_a_tensorflow_checkpoint(tmp_path, rng, tf_oracle):
    model = Model(rng)
    pg.saved_model.save(model, tmp_path)
    got = tf_oracle.run(
        "r = tf.train.load_checkpoint(prefix)\n"
        "result = {k: r.get_tensor(k) for k in r.get_variable_to_shape_map()\n"
        "          if k != '_CHECKPOINTABLE_OBJECT_GRAPH'}\n",
        prefix=str(tmp_path / "variables" / "variables"))
    assert sorted(got) == ["layers/0/b/.ATTRIBUTES/VARIABLE_VALUE",
                           "layers/0/w/.ATTRIBUTES/VARIABLE_VALUE",
                           "layers/1/b/.ATTRIBUTES/VARIABLE_VALUE",
                           "layers/1/w/.ATTRIBUTES/VARIABLE_VALUE",
                           "scale/.ATTRIBUTES/VARIABLE_VALUE"]
    np.testing.assert_array_equal(got["layers/1/w/.ATTRIBUTES/VARIABLE_VALUE"],
                                  model.layers[1].w.numpy())
    np.testing.assert_array_equal(got["scale/.ATTRIBUTES/VARIABLE_VALUE"],
                                  model.scale.numpy())


# ------------------------------------------------------------------ we load TensorFlow's

TF_SAVE = """
class Block(tf.Module):
    def __init__(self, w, b):
        super().__init__()
        self.w = tf.Variable(w, name="w")
        self.b = tf.Variable(b, name="b", trainable=False)

class M(tf.Module):
    def __init__(self):
        super().__init__()
        self.block = Block(w, b)
        self.steps = tf.Variable(np.int64(3), trainable=False, name="steps")

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32)])
    def predict(self, x):
        y = tf.nn.relu(tf.matmul(x, self.block.w) + self.block.b)
        return y * tf.cast(self.steps, tf.float32)

m = M()
tf.saved_model.save(m, path)
result = {"predict": m.predict(x), "sig": m.predict.get_concrete_function()(x)}
"""


def test_pluggable_loads_a_tensorflow_savedmodel(tmp_path, rng, tf_oracle):
    w = rng.standard_normal((4, 3)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    x = rng.standard_normal((6, 4)).astype(np.float32)
    want = tf_oracle.run(TF_SAVE, path=str(tmp_path), w=w, b=b, x=x)
    loaded = pg.saved_model.load(tmp_path)
    np.testing.assert_allclose(loaded.predict(pg.constant(x)).numpy(), want["predict"],
                               rtol=1e-5, atol=1e-6)
    out = loaded.signatures["serving_default"](x=pg.constant(x))
    assert list(out) == ["output_0"]
    np.testing.assert_allclose(out["output_0"].numpy(), want["predict"], rtol=1e-5, atol=1e-6)
    assert isinstance(loaded.block.w, pg.Variable) and loaded.block.w.trainable
    np.testing.assert_array_equal(loaded.block.w.numpy(), w)
    assert not loaded.block.b.trainable
    np.testing.assert_array_equal(loaded.block.b.numpy(), b)
    assert loaded.steps.dtype == pg.int64 and loaded.steps.numpy() == 3
    assert [v.name for v in loaded.trainable_variables] == ["w:0"]
    # the restored function reads the variables when it runs
    loaded.block.w.assign(np.zeros((4, 3), np.float32))
    np.testing.assert_allclose(loaded.predict(pg.constant(x)).numpy(),
                               np.maximum(b, 0) * 3 * np.ones((6, 1)), rtol=1e-6)
    with pytest.raises(TypeError, match="no saved concrete function"):
        loaded.predict(pg.constant(rng.standard_normal((2, 5)).astype(np.float32)))
    with pytest.raises(TypeError, match="missing input 'x'"):
        loaded.signatures["serving_default"]()


def test_pluggable_reads_a_tensorflow_checkpoint_of_several_dtypes(tmp_path, rng, tf_oracle):
    values = {"f64": rng.standard_normal((3, 2)), "i32": rng.integers(-9, 9, 5).astype(np.int32),
              "i64": rng.integers(-9, 9, (2, 2)).astype(np.int64),
              "f16": rng.standard_normal(4).astype(np.float16),
              "u8": rng.integers(0, 255, 6).astype(np.uint8)}
    tf_oracle.run("ckpt = tf.train.Checkpoint(**{k: tf.Variable(v) for k, v in values.items()})\n"
                  "result = ckpt.write(prefix)\n", values=values, prefix=str(tmp_path / "c"))
    index = (tmp_path / "c.index").read_bytes()
    data = (tmp_path / f"c{tensor_bundle.DATA_SUFFIX}").read_bytes()
    entries = tensor_bundle.read_entries(index, "c.index")
    for k, v in values.items():
        key = f"{k}/.ATTRIBUTES/VARIABLE_VALUE"
        got = tensor_bundle.read_value(entries[key], data, key, "c.data")
        assert got.dtype == v.dtype
        np.testing.assert_array_equal(got, v)


# ------------------------------------------------------------------ our round trip

@pytest.mark.parametrize("device", ["CPU", "MY_DEVICE"])
def test_round_trip(tmp_path, rng, device):
    with pg.device(f"{device}:0"):
        model = Model(rng)
        x = pg.constant(rng.standard_normal((5, 4)).astype(np.float32))
        want = model(x).numpy()
        pg.saved_model.save(model, tmp_path / "m")
        loaded = pg.saved_model.load(tmp_path / "m")
        with pg.testing.expect_kernel("Tanh", device):
            got = loaded(x)
        with pg.testing.expect_kernel("Tanh", device):
            sig = loaded.signatures["serving_default"](x=x)["output_0"]
    assert got.device.endswith(f"{device}:0")
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(sig.numpy(), want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got.numpy(), reference(model, x.numpy()), rtol=1e-5, atol=1e-5)
    assert variable_values(loaded).keys() == variable_values(model).keys()
    for name, value in variable_values(model).items():
        np.testing.assert_array_equal(variable_values(loaded)[name], value)
    assert isinstance(loaded.layers, list) and len(loaded.layers) == 2
    assert loaded.layers[1].w.trainable and not loaded.scale.trainable
    assert loaded.layers[0].w.device.endswith(f"{device}:0")


def test_a_function_traced_for_several_shapes_keeps_every_trace(tmp_path, rng):
    class Poly(pg.Module):
        def __init__(self):
            super().__init__()
            self.k = pg.Variable(rng.standard_normal(3).astype(np.float32))

        @pg.function
        def apply(self, x):
            return {"sum": pg.reduce_sum(x * self.k, axis=-1), "max": pg.reduce_max(x)}

    p = Poly()
    a = rng.standard_normal((2, 3)).astype(np.float32)
    b = rng.standard_normal((4, 2, 3)).astype(np.float32)
    p.apply(pg.constant(a))
    p.apply(pg.constant(b))
    pg.saved_model.save(p, tmp_path, signatures=p.apply.get_concrete_function(
        pg.TensorSpec([None, 3], pg.float32)))
    loaded = pg.saved_model.load(tmp_path)
    for arr in (a, b):
        out = loaded.apply(pg.constant(arr))
        np.testing.assert_allclose(out["sum"].numpy(), (arr * p.k.numpy()).sum(-1), rtol=1e-5)
        np.testing.assert_allclose(out["max"].numpy(), arr.max(), rtol=1e-6)
    sig = loaded.signatures["serving_default"](x=pg.constant(a))
    assert sorted(sig) == ["max", "sum"]
    np.testing.assert_allclose(sig["sum"].numpy(), (a * p.k.numpy()).sum(-1), rtol=1e-5)


def test_saving_again_replaces_the_files_atomically(tmp_path, rng):
    model = Model(rng)
    pg.saved_model.save(model, tmp_path)
    model.scale.assign(np.float32(7.0))
    pg.saved_model.save(model, tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["assets", "saved_model.pb", "variables"]
    assert sorted(os.listdir(tmp_path / "variables")) == [
        "variables.data-00000-of-00001", "variables.index"]
    assert pg.saved_model.load(tmp_path).scale.numpy() == 7.0


def test_a_variable_outside_the_saved_object_is_refused(tmp_path, rng):
    stray = pg.Variable(rng.standard_normal(4).astype(np.float32))

    class Leaky(pg.Module):
        @pg.function(input_signature=SPEC)
        def __call__(self, x):
            return x * stray

    with pytest.raises(pg.errors.FailedPreconditionError, match="not an attribute"):
        pg.saved_model.save(Leaky(), tmp_path)
    assert not (tmp_path / "saved_model.pb").exists()


# ------------------------------------------------------------------ bad input

@pytest.fixture
def saved(tmp_path, rng):
    pg.saved_model.save(Model(rng), tmp_path / "m")
    return tmp_path / "m"


def test_a_truncated_saved_model_pb_is_data_loss_naming_the_file(saved, rng):
    pb = saved / "saved_model.pb"
    data = pb.read_bytes()
    pb.write_bytes(data[:int(rng.integers(10, len(data) // 2))])
    with pytest.raises(pg.errors.DataLossError, match="saved_model.pb"):
        pg.saved_model.load(saved)
    pb.write_bytes(b"")
    with pytest.raises(pg.errors.DataLossError, match="saved_model.pb"):
        pg.saved_model.load(saved)


def test_a_newer_schema_version_is_refused(saved):
    from pluggable.framework import proto
    pb = saved / "saved_model.pb"
    sm = proto.decode(proto.messages().SavedModel, pb.read_bytes())
    sm.saved_model_schema_version = 2
    pb.write_bytes(proto.encode(sm))
    with pytest.raises(pg.errors.UnimplementedError, match="schema version 2"):
        pg.saved_model.load(saved)


def test_a_newer_bundle_version_is_refused(saved):
    from pluggable.framework import proto
    index = saved / "variables" / "variables.index"
    records = tensor_bundle.read_table(index.read_bytes(), "index")
    header = proto.decode(proto.messages().BundleHeaderProto, records[0][1])
    header.version.min_consumer = 9
    records[0] = (b"", proto.encode(header))
    index.write_bytes(tensor_bundle.write_table(records))
    with pytest.raises(pg.errors.UnimplementedError, match="variables.index.*version 9"):
        pg.saved_model.load(saved)


@pytest.mark.parametrize("missing", ["variables.index", "variables.data-00000-of-00001"])
def test_missing_variables_files_are_not_found_naming_the_file(saved, missing):
    os.unlink(saved / "variables" / missing)
    with pytest.raises(pg.errors.NotFoundError, match=missing):
        pg.saved_model.load(saved)


def test_a_missing_directory_or_pb_is_not_found(tmp_path):
    with pytest.raises(pg.errors.NotFoundError, match="not a directory"):
        pg.saved_model.load(tmp_path / "absent")
    with pytest.raises(pg.errors.NotFoundError, match="saved_model.pb"):
        pg.saved_model.load(tmp_path)


def test_a_corrupted_value_fails_its_checksum(saved, rng):
    data = saved / "variables" / "variables.data-00000-of-00001"
    raw = bytearray(data.read_bytes())
    i = int(rng.integers(0, len(raw)))
    raw[i] ^= 0x10
    data.write_bytes(bytes(raw))
    with pytest.raises(pg.errors.DataLossError, match="variables.data-00000-of-00001|checksum"):
        pg.saved_model.load(saved)


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = data[pos]
        value |= (b & 0x7F) << shift
        pos += 1
        shift += 7
        if not b & 0x80:
            return value, pos


def _read_blocks(raw: bytes) -> list[int]:
    """The byte positions of the table's blocks that the loader reads, each
    with its 5-byte trailer: all but the 48-byte footer (checked apart) and
    the empty metaindex block, which the loader, reading only the footer,
    the index block and the data blocks, never opens."""
    meta_offset, pos = _varint(raw, len(raw) - 48)
    meta_size, _ = _varint(raw, pos)
    skip = range(meta_offset, meta_offset + meta_size + 5)
    return [i for i in range(len(raw) - 48) if i not in skip]


def test_a_corrupted_or_truncated_index_is_data_loss(saved, rng):
    index = saved / "variables" / "variables.index"
    raw = bytearray(index.read_bytes())
    damaged = bytearray(raw)
    damaged[int(rng.choice(_read_blocks(bytes(raw))))] ^= 0x01
    for bad in (bytes(damaged), bytes(raw[:-int(rng.integers(1, 40))]), b"\0" * 47):
        index.write_bytes(bad)
        with pytest.raises(pg.errors.DataLossError, match="variables.index"):
            pg.saved_model.load(saved)


def test_a_value_past_the_end_of_the_data_file_is_data_loss(saved):
    data = saved / "variables" / "variables.data-00000-of-00001"
    data.write_bytes(data.read_bytes()[:-8])
    with pytest.raises(pg.errors.DataLossError, match="truncated|checksum"):
        pg.saved_model.load(saved)


def test_a_symbolic_link_out_of_the_directory_is_refused(saved, tmp_path):
    outside = tmp_path / "outside.index"
    outside.write_bytes((saved / "variables" / "variables.index").read_bytes())
    os.unlink(saved / "variables" / "variables.index")
    os.symlink(outside, saved / "variables" / "variables.index")
    with pytest.raises(pg.errors.DataLossError, match="symbolic link"):
        pg.saved_model.load(saved)


@pytest.mark.parametrize("name", ["../../etc/passwd", "/etc/passwd", "..", "a/b"])
def test_an_asset_name_that_leaves_the_directory_is_refused(saved, name):
    from pluggable.framework import proto
    pb = saved / "saved_model.pb"
    sm = proto.decode(proto.messages().SavedModel, pb.read_bytes())
    mg = sm.meta_graphs[0]
    mg.asset_file_def.add(filename=name)
    node = mg.object_graph_def.nodes.add()
    node.asset.asset_file_def_index = 0
    mg.object_graph_def.nodes[0].children.add(node_id=len(mg.object_graph_def.nodes) - 1,
                                              local_name="vocab")
    pb.write_bytes(proto.encode(sm))
    with pytest.raises(pg.errors.InvalidArgumentError, match="not a plain file name"):
        pg.saved_model.load(saved)


def test_a_child_reference_out_of_range_is_data_loss(saved):
    from pluggable.framework import proto
    pb = saved / "saved_model.pb"
    sm = proto.decode(proto.messages().SavedModel, pb.read_bytes())
    sm.meta_graphs[0].object_graph_def.nodes[0].children.add(node_id=10 ** 6, local_name="x")
    pb.write_bytes(proto.encode(sm))
    with pytest.raises(pg.errors.DataLossError, match="saved_model.pb.*child 1000000"):
        pg.saved_model.load(saved)


def test_sstable_round_trip_of_many_records(rng):
    keys = sorted({f"k/{int(i):06d}/{'x' * int(rng.integers(0, 40))}"
                   for i in rng.integers(0, 10 ** 6, 3000)})
    records = [(k.encode(), rng.bytes(int(rng.integers(0, 300)))) for k in keys]
    table = tensor_bundle.write_table(records)
    assert tensor_bundle.read_table(table, "t") == records
    assert struct.unpack("<Q", table[-8:])[0] == tensor_bundle.MAGIC


class Branchy(pg.Module):
    def __init__(self, rng):
        super().__init__()
        self.v = pg.Variable(rng.uniform(0.5, 2.0, 3).astype(np.float32), name="v")

    @pg.function(input_signature=[pg.TensorSpec([3], pg.float32, name="x")])
    def __call__(self, x):
        y = pg.cond(pg.reduce_sum(x) > 0, lambda: x * self.v, lambda: x - self.v)
        _, y = pg.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y + self.v),
                             [pg.constant(0), y])
        return y


def branchy_reference(v: np.ndarray, x: np.ndarray) -> np.ndarray:
    return (x * v if x.sum() > 0 else x - v) + 3 * v


def test_branches_and_loops_that_read_variables_round_trip(tmp_path, rng, tf_oracle):
    model = Branchy(rng)
    xs = [rng.uniform(0.1, 1, 3).astype(np.float32), -rng.uniform(0.1, 1, 3).astype(np.float32)]
    pg.saved_model.save(model, tmp_path)
    loaded = pg.saved_model.load(tmp_path)
    tf_got = tf_oracle.run("m = tf.saved_model.load(path)\nresult = [m(x) for x in xs]\n",
                           path=str(tmp_path), xs=xs)
    for x, theirs in zip(xs, tf_got):
        want = branchy_reference(model.v.numpy(), x)
        np.testing.assert_allclose(model(pg.constant(x)).numpy(), want, rtol=1e-6)
        np.testing.assert_allclose(loaded(pg.constant(x)).numpy(), want, rtol=1e-6)
        np.testing.assert_allclose(theirs, want, rtol=1e-6)
    loaded.v.assign(np.ones(3, np.float32))     # the loaded branches read the variable
    np.testing.assert_allclose(loaded(pg.constant(xs[0])).numpy(), xs[0] + 3, rtol=1e-6)


def test_pluggable_runs_tensorflows_branches_over_variables(tmp_path, rng, tf_oracle):
    v = rng.uniform(0.5, 2.0, 3).astype(np.float32)
    xs = [rng.uniform(0.1, 1, 3).astype(np.float32), -rng.uniform(0.1, 1, 3).astype(np.float32)]
    want = tf_oracle.run(
        "class M(tf.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.v = tf.Variable(v)\n"
        "    @tf.function(input_signature=[tf.TensorSpec([3], tf.float32)])\n"
        "    def f(self, x):\n"
        "        y = tf.cond(tf.reduce_sum(x) > 0, lambda: x * self.v, lambda: x - self.v)\n"
        "        return tf.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y + self.v),\n"
        "                             [tf.constant(0), y])[1]\n"
        "m = M()\n"
        "tf.saved_model.save(m, path)\n"
        "result = [m.f(x) for x in xs]\n", v=v, xs=xs, path=str(tmp_path))
    loaded = pg.saved_model.load(tmp_path)
    for x, theirs in zip(xs, want):
        np.testing.assert_allclose(theirs, branchy_reference(v, x), rtol=1e-6)
        np.testing.assert_allclose(loaded.f(pg.constant(x)).numpy(), theirs, rtol=1e-6)


def test_random_damage_to_saved_model_pb_never_crashes(saved, rng):
    pb = saved / "saved_model.pb"
    original = pb.read_bytes()
    for _ in range(40):
        raw = bytearray(original)
        for i in rng.integers(0, len(raw), int(rng.integers(1, 4))):
            raw[i] = int(rng.integers(0, 256))
        pb.write_bytes(bytes(raw))
        try:
            pg.saved_model.load(saved)
        except pg.errors.PluggableError:
            pass    # typed, with a message
