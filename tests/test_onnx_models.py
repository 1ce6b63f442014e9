"""The model-zoo networks onnx ships (onnx/backend/test/data/light: AlexNet,
DenseNet-121, Inception v1 and v2, ResNet-50, ShuffleNet, SqueezeNet,
VGG-19, ZFNet-512) through ``pg.onnx.import_model`` on CPU and MY_DEVICE,
against onnxruntime on a fresh random input of the model's input shape.

The shipped models build every weight with ConstantOfShape (one value per
tensor), which makes their softmax output uniform whatever the input: each
runs with those weights replaced by fresh random ones (so every layer's
result matters) and with the logits (the input of the final Softmax) as an
extra output; SqueezeNet also runs as shipped. The device's kernels must have done the work:
on MY_DEVICE no CPU kernel may run while the model runs (constants are
folded when the graph is built, before), and its convolutions run there."""
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="ONNX models are read with the onnx package (the onnx extra)")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the reference (a test extra)")
from onnx import helper, numpy_helper  # noqa: E402

import pluggable as pg  # noqa: E402
from onnx_helpers import ran_elsewhere, run_checked  # noqa: E402

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
MODELS = sorted(p.stem[len("light_"):] for p in LIGHT.glob("light_*.onnx"))
DEVICES = ["CPU:0", "MY_DEVICE:0"]
rng = np.random.default_rng()


def _randomized(m):
    """`m` with each ConstantOfShape weight replaced by a random initializer
    of its shape (He-scaled for kernels, in [0.5, 1.5) for vectors, so that
    batch-norm variances stay positive), and the logits as an extra output."""
    m = onnx.ModelProto.FromString(m.SerializeToString())
    g = m.graph
    shapes = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    keep = []
    for node in g.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in shapes:
            shape = tuple(int(d) for d in shapes[node.input[0]])
            if len(shape) >= 2:
                w = rng.standard_normal(shape) * np.sqrt(2.0 / np.prod(shape[1:]))
            else:
                w = rng.uniform(0.5, 1.5, shape)
            g.initializer.append(numpy_helper.from_array(w.astype(np.float32), node.output[0]))
        else:
            keep.append(node)
    del g.node[:]
    g.node.extend(keep)
    last = g.node[-1]
    if last.op_type == "Softmax":
        g.output.append(helper.make_tensor_value_info(last.input[0], onnx.TensorProto.FLOAT,
                                                      None))
    return m


def _feeds(pm):
    (v,) = pm.inputs
    return {v.name: rng.standard_normal(v.shape).astype(np.float32)}


def _ort(m, feeds):
    so = ort.SessionOptions()
    so.log_severity_level = 3   # the models keep unused initializers: not worth a warning
    s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))


# every network with random weights; one as shipped, for the ConstantOfShape weights
CASES = [(n, "random") for n in MODELS] + [("squeezenet", "shipped")]


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("name,weights", CASES)
def test_light_model_matches_onnxruntime(name, dev, weights):
    m = onnx.load(str(LIGHT / f"light_{name}.onnx"))
    if weights == "random":
        m = _randomized(m)
    pm = pg.onnx.import_model(m)
    feeds = _feeds(pm)
    out, ran = run_checked(pm, feeds, dev)
    ref = _ort(m, feeds)
    assert set(out) == set(ref)
    for k, r in ref.items():
        assert np.isfinite(r).all()
        np.testing.assert_allclose(out[k], r, rtol=1e-3, atol=1e-4 * max(np.abs(r).max(), 1),
                                   err_msg=f"{name} output {k!r} on {dev}")
    if weights == "random" and len(ref) > 1:
        assert np.std(list(ref.values())[-1]) > 1e-3   # the logits depend on the input
    kind = dev.split(":")[0]
    elsewhere = ran_elsewhere(ran, dev)
    assert not elsewhere, f"{name} on {dev}: kernels ran elsewhere: {elsewhere}"
    assert ran.get(("Conv2D", kind), 0) + ran.get(("_FusedConv2D", kind), 0) > 0, ran
