"""pg.Module: variable and submodule tracking, names and name scopes, and
checkpoints of modules, compared with tf.Module run on the same code in a
TensorFlow child process."""
from __future__ import annotations

import numpy as np
import pytest

import pluggable as pg

# One program, run with `lib` = pluggable here and = tensorflow in the oracle.
PROGRAM = """
class Dense(lib.Module):
    def __init__(self, w, b, name=None):
        super().__init__(name=name)
        self.w = lib.Variable(w, name="w")
        self.b = lib.Variable(b, name="b", trainable=False)

    @lib.Module.with_name_scope
    def __call__(self, x):
        self.calls = lib.Variable(0.0, name="calls", trainable=False) \\
            if not hasattr(self, "calls") else self.calls
        return lib.matmul(x, self.w) + self.b

class Net(lib.Module):
    def __init__(self, ws, bs):
        super().__init__()
        with self.name_scope:
            self.layers = [Dense(ws[0], bs[0]), Dense(ws[1], bs[1], name="head")]
            self.extra = {"scale": lib.Variable(2.0, name="scale"),
                          "pair": (lib.Variable(ws[0] * 0, name="z"), self.layers[0])}
        self._hidden = lib.Variable(bs[1], name="hidden")

    def __call__(self, x):
        for layer in self.layers:
            x = layer(x)
        return x * self.extra["scale"]

net = Net(ws, bs)
y = net(x)
out = {
    "names": [v.name for v in net.variables],
    "trainable": [v.name for v in net.trainable_variables],
    "non_trainable": [v.name for v in net.non_trainable_variables],
    "submodules": [m.name for m in net.submodules],
    "module_name": net.name, "scope": net.name_scope.name,
    "layer_scope": net.layers[0].name_scope.name,
    "values": [v.numpy() for v in net.variables],
    "y": y.numpy(),
}
"""


def _inputs(rng):
    ws = [rng.standard_normal((3, 4)).astype(np.float32),
          rng.standard_normal((4, 2)).astype(np.float32)]
    bs = [rng.standard_normal(4).astype(np.float32), rng.standard_normal(2).astype(np.float32)]
    x = rng.standard_normal((5, 3)).astype(np.float32)
    return ws, bs, x


def _run_here(ws, bs, x) -> dict:
    scope = {"lib": pg, "ws": ws, "bs": bs, "x": x}
    exec(PROGRAM, scope)
    return scope["out"]


def test_tracking_and_names_match_tensorflow(rng, tf_oracle):
    ws, bs, x = _inputs(rng)
    ours = _run_here(ws, bs, x)
    theirs = tf_oracle.run("lib = tf\n" + PROGRAM + "\nresult = out", ws=ws, bs=bs, x=x)
    for key in ("names", "trainable", "non_trainable", "submodules", "module_name", "scope",
                "layer_scope"):
        assert ours[key] == theirs[key], key
    for a, b in zip(ours["values"], theirs["values"]):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(ours["y"], theirs["y"], rtol=1e-5, atol=1e-5)


def test_tracking_follows_attribute_changes(rng):
    m = pg.Module(name="holder")
    assert m.variables == () and m.submodules == ()
    v = pg.Variable(rng.standard_normal(3).astype(np.float32))
    m.items = [v, v]                     # one variable, reached twice: listed once
    assert m.variables == (v,)
    m.items = ()
    assert m.variables == ()


@pytest.mark.parametrize("bad", ["has space", "1abc", "a/b", ""])
def test_invalid_module_name_is_refused_as_tensorflow_does(bad, tf_oracle):
    with pytest.raises(ValueError) as ours:
        pg.Module(name=bad)
    theirs = tf_oracle.run("""
try:
    tf.Module(name=name)
    result = None
except ValueError as exc:
    result = str(exc)
""", name=bad)
    assert theirs is not None and str(ours.value) == theirs


def test_checkpoint_of_a_module_round_trips_and_names_match_tensorflow(rng, tmp_path,
                                                                        tf_oracle):
    ws, bs, x = _inputs(rng)
    scope = {"lib": pg, "ws": ws, "bs": bs, "x": x}
    exec(PROGRAM, scope)
    net = scope["net"]
    path = pg.train.Checkpoint(model=net).save(str(tmp_path / "ours" / "ckpt"))
    saved = [v.numpy().copy() for v in net.variables]
    for v in net.variables:
        v.assign(np.zeros(v.shape, v.dtype.as_numpy_dtype))
    pg.train.Checkpoint(model=net).restore(path)
    for v, a in zip(net.variables, saved):
        np.testing.assert_array_equal(v.numpy(), a)

    theirs = tf_oracle.run("lib = tf\n" + PROGRAM + """
path = tf.train.Checkpoint(model=net).save(prefix)
result = sorted(n for n, _ in tf.train.list_variables(path)
                if n != "_CHECKPOINTABLE_OBJECT_GRAPH")
""", ws=ws, bs=bs, x=x, prefix=str(tmp_path / "theirs" / "ckpt"))
    assert [n for n, _ in pg.train.list_variables(path)] == theirs
    name = "model/layers/1/w/.ATTRIBUTES/VARIABLE_VALUE"
    np.testing.assert_array_equal(pg.train.load_variable(path, name), ws[1])

    # write (no save): no save counter in the checkpoint, as in TensorFlow
    written = pg.train.Checkpoint(model=net).write(str(tmp_path / "ours" / "written"))
    theirs = tf_oracle.run("lib = tf\n" + PROGRAM + """
path = tf.train.Checkpoint(model=net).write(prefix)
result = sorted(n for n, _ in tf.train.list_variables(path)
                if n != "_CHECKPOINTABLE_OBJECT_GRAPH")
""", ws=ws, bs=bs, x=x, prefix=str(tmp_path / "theirs" / "written"))
    assert [n for n, _ in pg.train.list_variables(written)] == theirs
    assert not any(n.startswith("save_counter") for n in theirs)


NAMES = """
names = []
with lib.name_scope("outer"):
    names.append(lib.Variable(1.0, name="a").name)
    with lib.name_scope("inner"):
        names.append(lib.Variable(1.0).name)
    with lib.name_scope("top/"):
        names.append(lib.Variable(1.0, name="c").name)
names.append(lib.Variable(1.0, name="d").name)
"""


def test_name_scopes_name_variables_as_tensorflow_does(tf_oracle):
    scope = {"lib": pg}
    exec(NAMES, scope)
    assert scope["names"] == tf_oracle.run("lib = tf\n" + NAMES + "result = names")
