"""pg.onnx.import_model: small hand-built models against onnxruntime (fresh
random inputs, rtol 1e-5), on CPU and MY_DEVICE; unknown ops through the
catalogue; bad models and feeds as typed errors."""
import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="ONNX models are read with the onnx package (the onnx extra)")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the reference (a test extra)")
from onnx import TensorProto as T, helper as h, numpy_helper  # noqa: E402

import pluggable as pg  # noqa: E402
from custom_op_helpers import SRC, _cache, needs_cxx  # noqa: E402,F401

DEVICES = ["CPU:0", "MY_DEVICE:0"]
rng = np.random.default_rng()


def rnd(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def model(nodes, inputs, outputs, inits=(), opset=17):
    g = h.make_graph(nodes, "m", inputs, outputs,
                     [numpy_helper.from_array(a, n) for n, a in inits])
    ops = [h.make_opsetid("", opset)]
    # the lowest IR version that carries the opset, which every onnxruntime
    # release that runs the opset reads (onnx writes its newest by default)
    return h.make_model(g, opset_imports=ops, ir_version=h.find_min_ir_version_for(ops))


def ort_run(m, feeds):
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))


def mlp():
    nodes = [h.make_node("Gemm", ["x", "W1", "b1"], ["h"], transB=1, alpha=0.5, beta=2.0),
             h.make_node("Relu", ["h"], ["r"]),
             h.make_node("MatMul", ["r", "W2"], ["y"]),
             h.make_node("Softmax", ["y"], ["out"], axis=-1)]
    inits = [("W1", rnd(16, 8)), ("b1", rnd(16)), ("W2", rnd(16, 5))]
    return model(nodes, [h.make_tensor_value_info("x", T.FLOAT, ["batch", 8])],
                 [h.make_tensor_value_info("out", T.FLOAT, ["batch", 5])], inits)


def convnet():
    nodes = [h.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1], group=2,
                         strides=[1, 1]),
             h.make_node("BatchNormalization", ["c", "s", "o", "mu", "var"], ["bn"],
                         epsilon=1e-3),
             h.make_node("MaxPool", ["bn"], ["p"], kernel_shape=[3, 3], strides=[2, 2],
                         pads=[1, 1, 1, 1]),
             h.make_node("AveragePool", ["p"], ["a"], kernel_shape=[2, 2], pads=[0, 0, 1, 1]),
             h.make_node("GlobalAveragePool", ["a"], ["g"]),
             h.make_node("Flatten", ["g"], ["out"])]
    inits = [("W", rnd(6, 2, 3, 3)), ("B", rnd(6)), ("s", rnd(6)), ("o", rnd(6)),
             ("mu", rnd(6)), ("var", np.abs(rnd(6)) + 0.5)]
    return model(nodes, [h.make_tensor_value_info("x", T.FLOAT, ["batch", 4, 9, 9])],
                 [h.make_tensor_value_info("out", T.FLOAT, ["batch", 6])], inits)


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("make,shape", [(mlp, (3, 8)), (convnet, (2, 4, 9, 9))])
def test_matches_onnxruntime(make, shape, dev):
    m = make()
    pm = pg.onnx.import_model(m)
    x = rnd(*shape)
    with pg.device(dev):
        out = pm(x=x)["out"]
    assert dev.split(":")[0] in out.device
    np.testing.assert_allclose(out.numpy(), ort_run(m, {"x": x})["out"], rtol=1e-5, atol=1e-5)
    (cf,) = pm._cache.values()
    placed = {n.op: n.assigned.device_type for n in cf.optimized_graph.nodes
              if n.assigned is not None and n.op in ("MatMul", "Conv2D", "_FusedMatMul",
                                                      "_FusedConv2D", "MaxPool")}
    assert placed and set(placed.values()) == {dev.split(":")[0]}, placed


def test_dynamic_batch_is_planned_once_per_shape():
    m = mlp()
    pm = pg.onnx.import_model(m.SerializeToString())
    assert [(v.name, v.dtype, v.shape) for v in pm.inputs] == [("x", pg.float32, (None, 8))]
    assert pm.outputs[0].shape == (None, 5)
    for b in (1, 4, 4, 7):
        x = rnd(b, 8)
        np.testing.assert_allclose(pm({"x": x})["out"].numpy(), ort_run(m, {"x": x})["out"],
                                   rtol=1e-5, atol=1e-6)
    assert len(pm._cache) == 3


def test_model_from_path(tmp_path):
    m = mlp()
    onnx.save(m, tmp_path / "m.onnx")
    x = rnd(2, 8)
    np.testing.assert_allclose(pg.onnx.import_model(str(tmp_path / "m.onnx"))(x=x)["out"].numpy(),
                               ort_run(m, {"x": x})["out"], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dev", DEVICES)
def test_concat_of_one_input_is_that_input(dev):
    """torch.onnx writes Concat nodes of one input (BERT's mask); TensorFlow's
    ConcatV2 takes two or more."""
    x = rnd(3, 4)
    m = model([h.make_node("Concat", ["x"], ["y"], axis=1)],
              [h.make_tensor_value_info("x", T.FLOAT, [3, 4])],
              [h.make_tensor_value_info("y", T.FLOAT, None)])
    with pg.device(dev):
        y = pg.onnx.import_model(m)(x=x)["y"]
    np.testing.assert_array_equal(y.numpy(), ort_run(m, {"x": x})["y"])
    bad = model([h.make_node("Concat", ["x"], ["y"], axis=2)],
                [h.make_tensor_value_info("x", T.FLOAT, [3, 4])],
                [h.make_tensor_value_info("y", T.FLOAT, None)])
    with pytest.raises(pg.errors.InvalidArgumentError, match="axis 2 is out of range"):
        pg.onnx.import_model(bad)(x=x)


@pytest.mark.parametrize("fmod", [0, 1])
@pytest.mark.parametrize("dt,tp", [(np.int32, T.INT32), (np.int64, T.INT64),
                                   (np.float32, T.FLOAT)])
def test_div_and_mod_follow_onnx(dt, tp, fmod):
    if fmod == 0 and tp == T.FLOAT:
        pytest.skip("ONNX requires fmod=1 for floating-point Mod")
    a = rng.integers(-20, 20, 50).astype(dt)
    b = rng.integers(1, 7, 50).astype(dt) * rng.choice([-1, 1], 50).astype(dt)
    nodes = [h.make_node("Div", ["a", "b"], ["q"]), h.make_node("Mod", ["a", "b"], ["r"],
                                                                fmod=fmod)]
    vi = [h.make_tensor_value_info(n, tp, [50]) for n in "ab"]
    m = model(nodes, vi, [h.make_tensor_value_info(n, tp, [50]) for n in "qr"], opset=13)
    got = pg.onnx.import_model(m)(a=a, b=b)
    ref = ort_run(m, {"a": a, "b": b})
    for k in "qr":
        np.testing.assert_allclose(got[k].numpy(), ref[k], rtol=1e-6)


def test_value_inputs_fed_at_run_time_key_the_cache():
    nodes = [h.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)]
    m = model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [3, 4, 5]),
                      h.make_tensor_value_info("axes", T.INT64, [1])],
              [h.make_tensor_value_info("y", T.FLOAT, None)])
    pm = pg.onnx.import_model(m)
    x = rnd(3, 4, 5)
    for ax in (0, 2, -2):
        np.testing.assert_allclose(pm(x=x, axes=np.array([ax]))["y"].numpy(),
                                   x.sum(axis=ax), rtol=1e-5, atol=1e-5)


def test_mapping_answers_which_ops_a_node_lowers_to():
    from pluggable.onnx import mapping
    assert mapping.lowers_to("", "Relu", 14) == ("Relu",)
    assert mapping.has_kernels("", "Relu", 14, "MY_DEVICE")
    assert mapping.lowers_to("", "Squeeze", 11) == mapping.lowers_to("", "Squeeze", 13)
    assert mapping.find("", "Squeeze", 11) is not mapping.find("", "Squeeze", 13)
    assert mapping.lowers_to("", "NoSuchOp", 17) is None
    assert not mapping.has_kernels("", "NoSuchOp", 17, "CPU")


# ------------------------------------------------------------- unknown ops

def test_unknown_op_is_named_at_import():
    m = model([h.make_node("Frobnicate", ["x"], ["y"], name="n1", domain="acme")],
              [h.make_tensor_value_info("x", T.FLOAT, [3])],
              [h.make_tensor_value_info("y", T.FLOAT, [3])])
    m.opset_import.append(h.make_opsetid("acme", 1))
    with pytest.raises(pg.errors.NotFoundError, match="'n1'.*'acme'.*'Frobnicate'"):
        pg.onnx.import_model(m)


@needs_cxx
def test_custom_op_of_the_catalogue_runs_with_checked_attributes():
    op = pg.custom_op(f"{SRC}/add.cc:CustomAdd", out_shape=lambda a, b: a,
                      name="acme::MyAdd", schema={"scale": ("float32", 1.0)})
    try:
        def make(**attrs):
            m = model([h.make_node("MyAdd", ["a", "b"], ["y"], name="mine", domain="acme",
                                   **attrs)],
                      [h.make_tensor_value_info(n, T.FLOAT, [6]) for n in "ab"],
                      [h.make_tensor_value_info("y", T.FLOAT, [6])])
            m.opset_import.append(h.make_opsetid("acme", 1))
            return m
        a, b = rnd(6), rnd(6)
        np.testing.assert_allclose(pg.onnx.import_model(make(scale=1.0))(a=a, b=b)["y"].numpy(),
                                   a + b, rtol=1e-6)
        with pytest.raises(pg.errors.InvalidArgumentError, match="scale"):
            pg.onnx.import_model(make(scale="big"))
        with pytest.raises(pg.errors.InvalidArgumentError, match="colour"):
            pg.onnx.import_model(make(colour=1))
    finally:
        from pluggable.framework import op_catalog
        op_catalog.unregister("acme::MyAdd", 1)
    del op


def test_builtin_op_of_the_catalogue_resolves_an_unmapped_node():
    # an ONNX node named like a registry op (a plugin's op resolves the same way)
    m = model([h.make_node("Square", ["x"], ["y"], domain="")],
              [h.make_tensor_value_info("x", T.FLOAT, [5])],
              [h.make_tensor_value_info("y", T.FLOAT, [5])])
    x = rnd(5)
    with pg.device("MY_DEVICE:0"):
        y = pg.onnx.import_model(m)(x=x)["y"]
    np.testing.assert_allclose(y.numpy(), x * x, rtol=1e-6)


# ------------------------------------------------------------- local functions

def _with_functions(nodes, functions, inputs, outputs, domain="fn.lib"):
    m = model(nodes, inputs, outputs)
    m.opset_import.append(h.make_opsetid(domain, 1))
    m.functions.extend(functions)
    return m


def _scaled_act(domain="fn.lib"):
    """fn.lib::ScaledAct(x; alpha, scale) = LeakyRelu(x, alpha) * scale, its
    attributes referenced from the call (ref_attr_name), and fn.lib::Block
    calling it twice (a nested call)."""
    scale = h.make_node("Constant", [], ["s"], value_float=0.0)
    scale.attribute[0].ref_attr_name = "scale"
    leaky = h.make_node("LeakyRelu", ["x"], ["l"])
    leaky.attribute.append(onnx.AttributeProto(name="alpha", ref_attr_name="alpha",
                                               type=onnx.AttributeProto.FLOAT))
    act = h.make_function(domain, "ScaledAct", ["x"], ["y"],
                          [scale, leaky, h.make_node("Mul", ["l", "s"], ["y"])],
                          [h.make_opsetid("", 17)], attributes=["alpha", "scale"])
    block = h.make_function(
        domain, "Block", ["x", "w"], ["y"],
        [h.make_node("MatMul", ["x", "w"], ["m"]),
         h.make_node("ScaledAct", ["m"], ["a"], domain=domain, alpha=0.1, scale=2.0),
         h.make_node("ScaledAct", ["a"], ["y"], domain=domain, alpha=0.3, scale=-1.5)],
        [h.make_opsetid("", 17), h.make_opsetid(domain, 1)])
    return [act, block]


@pytest.mark.parametrize("dev", DEVICES)
def test_local_functions_are_inlined_with_their_attribute_references(dev):
    """What torch.onnx.export(export_modules_as_functions=...) writes: calls
    of model-local functions, nested, with attributes passed by reference;
    the model equals onnxruntime's result and runs on the device."""
    nodes = [h.make_node("Block", ["x", "w1"], ["b"], domain="fn.lib", name="block0"),
             h.make_node("ScaledAct", ["b"], ["y"], domain="fn.lib", alpha=0.5, scale=3.0)]
    m = _with_functions(nodes, _scaled_act(),
                        [h.make_tensor_value_info("x", T.FLOAT, ["n", 6]),
                         h.make_tensor_value_info("w1", T.FLOAT, [6, 4])],
                        [h.make_tensor_value_info("y", T.FLOAT, ["n", 4])])
    feeds = {"x": rnd(5, 6), "w1": rnd(6, 4)}
    pm = pg.onnx.import_model(m)
    assert not pm.proto.functions and len(m.functions) == 2   # the caller's model is kept
    with pg.device(dev):
        y = pm(feeds)["y"]
    assert dev.split(":")[0] in y.device
    np.testing.assert_allclose(y.numpy(), ort_run(m, feeds)["y"], rtol=1e-5, atol=1e-6)


def test_a_local_function_that_calls_itself_is_refused():
    f = h.make_function("fn.lib", "Loop", ["x"], ["y"],
                        [h.make_node("Loop", ["x"], ["y"], domain="fn.lib")],
                        [h.make_opsetid("fn.lib", 1)])
    m = _with_functions([h.make_node("Loop", ["x"], ["y"], domain="fn.lib")], [f],
                        [h.make_tensor_value_info("x", T.FLOAT, [3])],
                        [h.make_tensor_value_info("y", T.FLOAT, [3])])
    with pytest.raises(pg.errors.InvalidArgumentError, match="fn.lib::Loop calls itself"):
        pg.onnx.import_model(m)


def test_local_functions_that_would_inline_past_max_nodes_are_refused_first():
    """F0 = Neg; F(k) calls F(k-1) twice: 2**60 nodes once inlined, refused
    by counting before anything is inlined."""
    funcs = [h.make_function("fn.lib", "F0", ["x"], ["y"], [h.make_node("Neg", ["x"], ["y"])],
                             [h.make_opsetid("", 17)])]
    for k in range(1, 61):
        funcs.append(h.make_function(
            "fn.lib", f"F{k}", ["x"], ["y"],
            [h.make_node(f"F{k - 1}", ["x"], ["t"], domain="fn.lib"),
             h.make_node(f"F{k - 1}", ["t"], ["y"], domain="fn.lib")],
            [h.make_opsetid("fn.lib", 1)]))
    m = _with_functions([h.make_node("F60", ["x"], ["y"], domain="fn.lib")], funcs,
                        [h.make_tensor_value_info("x", T.FLOAT, [3])],
                        [h.make_tensor_value_info("y", T.FLOAT, [3])])
    with pytest.raises(pg.errors.ResourceExhaustedError, match="max_nodes"):
        pg.onnx.import_model(m)


@needs_cxx
def test_a_local_function_named_like_a_catalogue_op_runs_that_op():
    """The function body (a - b) is the fallback; the catalogue's kernel
    (a + b) of the same name wins, as an execution provider's kernel wins
    over a function's decomposition in onnxruntime."""
    op = pg.custom_op(f"{SRC}/add.cc:CustomAdd", out_shape=lambda a, b: a, name="acme::FnAdd")
    try:
        body = h.make_function("acme", "FnAdd", ["a", "b"], ["y"],
                               [h.make_node("Sub", ["a", "b"], ["y"])], [h.make_opsetid("", 17)])
        m = _with_functions([h.make_node("FnAdd", ["a", "b"], ["y"], domain="acme")], [body],
                            [h.make_tensor_value_info(n, T.FLOAT, [6]) for n in "ab"],
                            [h.make_tensor_value_info("y", T.FLOAT, [6])], domain="acme")
        a, b = rnd(6), rnd(6)
        np.testing.assert_allclose(pg.onnx.import_model(m)(a=a, b=b)["y"].numpy(), a + b,
                                   rtol=1e-6)
        np.testing.assert_allclose(ort_run(m, {"a": a, "b": b})["y"], a - b, rtol=1e-6)
    finally:
        from pluggable.framework import op_catalog
        op_catalog.unregister("acme::FnAdd", 1)
    del op


# ------------------------------------------------------------- bad input

def test_truncated_model_is_data_loss():
    data = mlp().SerializeToString()
    with pytest.raises(pg.errors.DataLossError):
        pg.onnx.import_model(data[: len(data) // 2])
    with pytest.raises(pg.errors.DataLossError):
        pg.onnx.import_model(b"\xff\xff\xff garbage")


def test_newer_opset_is_refused():
    m = mlp()
    m.opset_import[0].version = 99
    with pytest.raises(pg.errors.UnimplementedError, match="opset 99"):
        pg.onnx.import_model(m)


def test_missing_initializer_names_the_node():
    m = mlp()
    del m.graph.initializer[1]
    with pytest.raises(pg.errors.InvalidArgumentError, match="Gemm.*'b1'"):
        pg.onnx.import_model(m)


def test_bad_feeds_are_typed_errors_naming_the_input():
    pm = pg.onnx.import_model(mlp())
    with pytest.raises(pg.errors.InvalidArgumentError, match="'x' is not fed|x is not fed"):
        pm()
    with pytest.raises(pg.errors.InvalidArgumentError, match="'x' must be float32"):
        pm(x=rnd(2, 8, dtype=np.float64))
    with pytest.raises(pg.errors.InvalidArgumentError, match="'x' has shape"):
        pm(x=rnd(2, 9))
    with pytest.raises(pg.errors.InvalidArgumentError, match="no input named y"):
        pm(x=rnd(2, 8), y=rnd(1))


def test_external_data_outside_the_model_folder_is_refused(tmp_path):
    secret = tmp_path / "secret.bin"
    secret.write_bytes(np.arange(4, dtype=np.float32).tobytes())
    d = tmp_path / "model"
    d.mkdir()
    w = numpy_helper.from_array(np.zeros(4, np.float32), "w")
    w.ClearField("raw_data")
    w.data_location = T.EXTERNAL
    for k, v in (("location", "../secret.bin"), ("offset", "0"), ("length", "16")):
        w.external_data.add(key=k, value=v)
    m = model([h.make_node("Add", ["x", "w"], ["y"])],
              [h.make_tensor_value_info("x", T.FLOAT, [4])],
              [h.make_tensor_value_info("y", T.FLOAT, [4])])
    m.graph.initializer.append(w)
    onnx.save(m, d / "m.onnx")
    opened = []
    real_open = open

    def spy(path, *a, **k):
        opened.append(os.path.realpath(path))
        return real_open(path, *a, **k)
    import builtins
    builtins.open = spy
    try:
        with pytest.raises(pg.errors.PermissionDeniedError, match="'w'.*outside"):
            pg.onnx.import_model(str(d / "m.onnx"))
    finally:
        builtins.open = real_open
    assert str(secret.resolve()) not in opened
    # inside the folder it is read
    (d / "w.bin").write_bytes(np.arange(4, dtype=np.float32).tobytes())
    m.graph.initializer[0].external_data[0].value = "w.bin"
    onnx.save(m, d / "m2.onnx")
    x = rnd(4)
    np.testing.assert_allclose(pg.onnx.import_model(str(d / "m2.onnx"))(x=x)["y"].numpy(),
                               x + np.arange(4), rtol=1e-6)


@pytest.fixture
def limits():
    old = pg.graph_util.set_import_limits()
    yield pg.graph_util.set_import_limits
    pg.graph_util.set_import_limits(**old)


def test_import_limits_are_the_graph_importers(limits):
    limits(max_nodes=3)
    with pytest.raises(pg.errors.ResourceExhaustedError, match="max_nodes=3"):
        pg.onnx.import_model(mlp())
    limits(max_nodes=100, max_constant_bytes=100)
    with pytest.raises(pg.errors.ResourceExhaustedError, match="'W1'.*max_constant_bytes"):
        pg.onnx.import_model(mlp())
    # a declared size is checked before the data is read: a huge shape with no data
    limits(max_constant_bytes=1 << 20)
    m = mlp()
    big = T(name="huge", data_type=T.FLOAT, dims=[1 << 20, 1 << 20])
    m.graph.initializer.append(big)
    with pytest.raises(pg.errors.ResourceExhaustedError, match="'huge'"):
        pg.onnx.import_model(m)


def test_nesting_depth_is_limited(limits):
    inner = h.make_graph([h.make_node("Identity", ["x"], ["z"])], "inner", [],
                         [h.make_tensor_value_info("z", T.FLOAT, [1])])
    for _ in range(3):
        node = h.make_node("If", ["c"], ["z"], then_branch=inner, else_branch=inner)
        inner = h.make_graph([node], "nest", [], [h.make_tensor_value_info("z", T.FLOAT, [1])])
    m = model(list(inner.node), [h.make_tensor_value_info("c", T.BOOL, []),
                                 h.make_tensor_value_info("x", T.FLOAT, [1])],
              [h.make_tensor_value_info("z", T.FLOAT, [1])])
    limits(max_function_depth=2)
    with pytest.raises(pg.errors.ResourceExhaustedError, match="max_function_depth=2"):
        pg.onnx.import_model(m)


def test_import_pluggable_does_not_import_onnx():
    import subprocess
    import sys
    code = "import sys, pluggable; print('onnx' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ), timeout=120)
    assert out.stdout.strip() == "False", out.stderr


def test_a_tensor_proto_feed_is_read_like_an_array():
    pm = pg.onnx.import_model(mlp())
    x = rnd(2, 8)
    np.testing.assert_allclose(pm(x=numpy_helper.from_array(x))["out"].numpy(),
                               pm(x=x)["out"].numpy(), rtol=1e-6)


def test_a_node_without_a_kernel_on_the_device_is_soft_placed_with_copies():
    # Einsum has no MY_DEVICE kernel: it runs on CPU, the rest on MY_DEVICE
    m = model([h.make_node("Einsum", ["x", "x"], ["n"], equation="ij,ij->ij"),
               h.make_node("Mul", ["x", "n"], ["y"])],
              [h.make_tensor_value_info("x", T.FLOAT, [2, 3])],
              [h.make_tensor_value_info("y", T.FLOAT, [2, 3])])
    pm = pg.onnx.import_model(m)
    x = rnd(2, 3)
    with pg.device("MY_DEVICE:0"):
        y = pm(x=x)["y"]
    np.testing.assert_allclose(y.numpy(), x ** 3, rtol=1e-6)
    (cf,) = pm._cache.values()
    nodes = {n.op: n for n in cf.optimized_graph.nodes}
    assert nodes["Einsum"].assigned.device_type == "CPU"
    assert "soft placement" in nodes["Einsum"].note
    assert nodes["Mul"].assigned.device_type == "MY_DEVICE"
    assert "_Copy" in nodes


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("kind,gates", [("RNN", 1), ("GRU", 3), ("LSTM", 4)])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_recurrent_layers_match_onnxruntime(kind, gates, direction, dev):
    # ragged sequence lengths, initial state and biases, on fresh random inputs
    seq, batch, inp, hid = 5, 3, 4, 6
    nd = 2 if direction == "bidirectional" else 1
    inits = [("W", rnd(nd, gates * hid, inp)), ("R", rnd(nd, gates * hid, hid)),
             ("B", rnd(nd, 2 * gates * hid)), ("lens", np.array([5, 2, 4], np.int32))]
    ins = ["x", "W", "R", "B", "lens", "h0"]
    feeds = {"x": rnd(seq, batch, inp), "h0": rnd(nd, batch, hid)}
    vi = [h.make_tensor_value_info("x", T.FLOAT, [seq, batch, inp]),
          h.make_tensor_value_info("h0", T.FLOAT, [nd, batch, hid])]
    outs = ["Y", "Y_h"]
    if kind == "LSTM":
        ins.append("c0")
        outs.append("Y_c")
        feeds["c0"] = rnd(nd, batch, hid)
        vi.append(h.make_tensor_value_info("c0", T.FLOAT, [nd, batch, hid]))
    attrs = {"linear_before_reset": 1} if kind == "GRU" else {}
    m = model([h.make_node(kind, ins, outs, hidden_size=hid, direction=direction, **attrs)],
              vi, [h.make_tensor_value_info(o, T.FLOAT, None) for o in outs], inits)
    pm = pg.onnx.import_model(m)
    with pg.device(dev), pg.testing.expect_kernel("MatMul", dev.split(":")[0]):
        got = pm(feeds)
    ref = ort_run(m, feeds)
    for o in outs:
        np.testing.assert_allclose(got[o].numpy(), ref[o], rtol=1e-5, atol=1e-5, err_msg=o)


def _one_node(op, x_shape, inits, **attrs):
    names = ["x"] + [n for n, _ in inits]
    return model([h.make_node(op, names, ["y"], **attrs)],
                 [h.make_tensor_value_info("x", T.FLOAT, list(x_shape))],
                 [h.make_tensor_value_info("y", T.FLOAT, None)], inits)


SPATIAL = [
    ("Conv", (2, 4, 11), lambda: [("W", rnd(6, 2, 3)), ("B", rnd(6))],
     dict(group=2, strides=[2], dilations=[2], pads=[1, 2])),
    ("Conv", (1, 2, 6, 7, 5), lambda: [("W", rnd(4, 2, 3, 2, 3)), ("B", rnd(4))],
     dict(strides=[2, 1, 2], dilations=[1, 2, 1], pads=[1, 0, 1, 0, 1, 1])),
    ("ConvTranspose", (2, 4, 5), lambda: [("W", rnd(4, 3, 3)), ("B", rnd(6))],
     dict(group=2, strides=[3], output_padding=[1], pads=[1, 0])),
    ("ConvTranspose", (1, 3, 4, 5), lambda: [("W", rnd(3, 2, 3, 2))],
     dict(strides=[2, 3], dilations=[2, 1], pads=[1, 0, 0, 1])),
    ("ConvTranspose", (1, 2, 3, 4, 3), lambda: [("W", rnd(2, 2, 2, 3, 2))],
     dict(strides=[2, 2, 1], auto_pad="SAME_UPPER")),
    ("MaxPool", (2, 3, 7, 8, 6), lambda: [],
     dict(kernel_shape=[3, 2, 3], strides=[2, 2, 2], pads=[1, 0, 1, 1, 1, 0], ceil_mode=1)),
    ("MaxPool", (2, 3, 9, 8), lambda: [],
     dict(kernel_shape=[3, 3], dilations=[2, 2], strides=[1, 2], pads=[1, 1, 1, 1])),
    ("AveragePool", (2, 3, 10), lambda: [],
     dict(kernel_shape=[3], strides=[2], pads=[1, 1], ceil_mode=1)),
    ("AveragePool", (1, 2, 5, 6, 7), lambda: [],
     dict(kernel_shape=[2, 3, 3], strides=[2, 2, 3], pads=[1, 1, 0, 0, 1, 1],
          count_include_pad=1)),
    ("LpPool", (2, 3, 7, 6), lambda: [], dict(kernel_shape=[3, 2], strides=[2, 2], p=3)),
    ("LRN", (2, 7, 4, 5), lambda: [], dict(size=3, alpha=2e-3, beta=0.6, bias=1.5)),
]


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("op,shape,inits,attrs", SPATIAL,
                         ids=[f"{s[0]}-{len(s[1]) - 2}d-{i}" for i, s in enumerate(SPATIAL)])
def test_spatial_ops_of_every_rank_match_onnxruntime(op, shape, inits, attrs, dev):
    m = _one_node(op, shape, inits(), **attrs)
    x = rnd(*shape)
    pm = pg.onnx.import_model(m)
    kind = dev.split(":")[0]
    before = pg.testing.kernel_call_counts()
    with pg.device(dev):
        y = pm(x=x)["y"]
    np.testing.assert_allclose(y.numpy(), ort_run(m, {"x": x})["y"], rtol=1e-4, atol=1e-5)
    ran = {k for k, n in pg.testing.kernel_call_counts().items() if n > before.get(k, 0)}
    heavy = {"Conv2D", "MaxPool", "AvgPool", "StridedSlice"}
    assert {o for o, d in ran if d == kind} & heavy, ran


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("attrs,sizes", [
    (dict(mode="linear"), [1, 2, 7, 5]),
    (dict(mode="cubic", coordinate_transformation_mode="align_corners"), [1, 2, 9, 11]),
    (dict(mode="linear", antialias=1), [1, 2, 3, 4]),
    (dict(mode="nearest", nearest_mode="floor", coordinate_transformation_mode="asymmetric"),
     [1, 2, 12, 3]),
])
def test_resize_matches_onnxruntime(attrs, sizes, dev):
    m = model([h.make_node("Resize", ["x", "", "", "sizes"], ["y"], **attrs)],
              [h.make_tensor_value_info("x", T.FLOAT, [1, 2, 6, 8])],
              [h.make_tensor_value_info("y", T.FLOAT, None)],
              [("sizes", np.array(sizes, np.int64))], opset=19)
    x = rnd(1, 2, 6, 8)
    with pg.device(dev):
        y = pg.onnx.import_model(m)(x=x)["y"]
    assert dev.split(":")[0] in y.device
    np.testing.assert_allclose(y.numpy(), ort_run(m, {"x": x})["y"], rtol=1e-4, atol=1e-5)


def _branch(name, op, out):
    return h.make_graph([h.make_node(op, ["x", "x"], [out])], name, [],
                        [h.make_tensor_value_info(out, T.FLOAT, [2, 3])])


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("cond_from", ["feed", "tensor"])
def test_if_runs_the_branch_its_condition_selects(cond_from, dev):
    # a fed condition is read when the graph is built (one graph per value);
    # one computed from tensors runs both branches and selects
    then_g, else_g = _branch("then", "Add", "t"), _branch("else", "Mul", "e")
    nodes = [h.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)]
    vi = [h.make_tensor_value_info("x", T.FLOAT, [2, 3])]
    if cond_from == "feed":
        vi.append(h.make_tensor_value_info("c", T.BOOL, []))
    else:
        nodes.insert(0, h.make_node("ReduceSum", ["x"], ["s"], keepdims=0))
        nodes.insert(1, h.make_node("Greater", ["s", "zero"], ["c"]))
    m = model(nodes, vi, [h.make_tensor_value_info("y", T.FLOAT, [2, 3])],
              [("zero", np.zeros((), np.float32))])
    pm = pg.onnx.import_model(m)
    for _ in range(3):
        x = rnd(2, 3)
        feeds = {"x": x}
        if cond_from == "feed":
            feeds["c"] = np.array(rng.random() < 0.5)
        with pg.device(dev):
            y = pm(feeds)["y"]
        np.testing.assert_allclose(y.numpy(), ort_run(m, feeds)["y"], rtol=1e-6)


@pytest.mark.parametrize("dev", DEVICES)
def test_loop_and_scan_are_unrolled(dev):
    # Loop: 4 trips of acc += x * i, scanning acc; Scan: running sum over rows
    body = h.make_graph(
        [h.make_node("Cast", ["i"], ["fi"], to=T.FLOAT),
         h.make_node("Mul", ["x", "fi"], ["xi"]), h.make_node("Add", ["acc", "xi"], ["acc2"]),
         h.make_node("Identity", ["cond"], ["cond2"]), h.make_node("Identity", ["acc2"], ["s"])],
        "body", [h.make_tensor_value_info("i", T.INT64, []),
                 h.make_tensor_value_info("cond", T.BOOL, []),
                 h.make_tensor_value_info("acc", T.FLOAT, [3])],
        [h.make_tensor_value_info(n, t, s) for n, t, s in
         [("cond2", T.BOOL, []), ("acc2", T.FLOAT, [3]), ("s", T.FLOAT, [3])]])
    scan_body = h.make_graph(
        [h.make_node("Add", ["st", "row"], ["st2"]), h.make_node("Identity", ["st2"], ["o"])],
        "scan", [h.make_tensor_value_info("st", T.FLOAT, [3]),
                 h.make_tensor_value_info("row", T.FLOAT, [3])],
        [h.make_tensor_value_info("st2", T.FLOAT, [3]),
         h.make_tensor_value_info("o", T.FLOAT, [3])])
    nodes = [h.make_node("Loop", ["M", "T", "x"], ["acc", "scanned"], body=body),
             h.make_node("Scan", ["x", "rows"], ["total", "running"], body=scan_body,
                         num_scan_inputs=1, scan_input_directions=[1])]
    m = model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [3]),
                      h.make_tensor_value_info("rows", T.FLOAT, [5, 3])],
              [h.make_tensor_value_info(n, T.FLOAT, None)
               for n in ("acc", "scanned", "total", "running")],
              [("M", np.array(4, np.int64)), ("T", np.array(True))])
    feeds = {"x": rnd(3), "rows": rnd(5, 3)}
    with pg.device(dev):
        got = pg.onnx.import_model(m)(feeds)
    for k, r in ort_run(m, feeds).items():
        assert got[k].device.endswith(dev)
        np.testing.assert_allclose(got[k].numpy(), r, rtol=1e-5, err_msg=k)


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("mode,padding,align", [("linear", "zeros", 0), ("cubic", "reflection", 0),
                                                ("nearest", "border", 1)])
def test_affine_grid_and_grid_sample_match_onnxruntime(mode, padding, align, dev):
    # a random affine grid (reaching outside the image) sampling a random image
    m = model([h.make_node("AffineGrid", ["theta", "size"], ["grid"], align_corners=align),
               h.make_node("GridSample", ["x", "grid"], ["y"], mode=mode,
                           padding_mode=padding, align_corners=align)],
              [h.make_tensor_value_info("x", T.FLOAT, [2, 3, 6, 7]),
               h.make_tensor_value_info("theta", T.FLOAT, [2, 2, 3])],
              [h.make_tensor_value_info("y", T.FLOAT, None)],
              [("size", np.array([2, 3, 5, 4], np.int64))], opset=20)
    feeds = {"x": rnd(2, 3, 6, 7), "theta": rnd(2, 2, 3)}
    pm = pg.onnx.import_model(m)
    with pg.device(dev), pg.testing.expect_kernel("GatherNd", dev.split(":")[0]):
        y = pm(feeds)["y"]
    np.testing.assert_allclose(y.numpy(), ort_run(m, feeds)["y"], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("order", [0, 1])
def test_maxpool_indices_and_maxunpool_match_onnxruntime(order, dev):
    m = model([h.make_node("MaxPool", ["x"], ["p", "i"], kernel_shape=[3, 2], strides=[2, 2],
                           pads=[1, 0, 1, 0], storage_order=order),
               h.make_node("MaxUnpool", ["p", "i"], ["u"], kernel_shape=[3, 2],
                           strides=[2, 2], pads=[1, 0, 1, 0])],
              [h.make_tensor_value_info("x", T.FLOAT, [2, 3, 7, 6])],
              [h.make_tensor_value_info(n, t, None) for n, t in
               [("p", T.FLOAT), ("i", T.INT64), ("u", T.FLOAT)]])
    x = rnd(2, 3, 7, 6)
    with pg.device(dev):
        got = pg.onnx.import_model(m)(x=x)
    ref = ort_run(m, {"x": x})
    np.testing.assert_allclose(got["p"].numpy(), ref["p"], rtol=1e-6)
    np.testing.assert_array_equal(got["i"].numpy(), ref["i"])
    if order == 0:   # column-major indices do not address the unpooled (row-major) tensor
        np.testing.assert_allclose(got["u"].numpy(), ref["u"], rtol=1e-6)


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("mode,ctm", [("avg", "half_pixel"), ("avg", "output_half_pixel")])
def test_roi_align_matches_onnxruntime(mode, ctm, dev):
    # random regions, some reaching past the image
    m = model([h.make_node("RoiAlign", ["x", "rois", "b"], ["y"], mode=mode, output_height=3,
                           output_width=4, sampling_ratio=2, spatial_scale=0.5,
                           coordinate_transformation_mode=ctm)],
              [h.make_tensor_value_info("x", T.FLOAT, [2, 3, 9, 8]),
               h.make_tensor_value_info("rois", T.FLOAT, [5, 4]),
               h.make_tensor_value_info("b", T.INT64, [5])],
              [h.make_tensor_value_info("y", T.FLOAT, None)], opset=16)
    lo = rng.uniform(-2, 10, (5, 2))
    feeds = {"x": rnd(2, 3, 9, 8), "b": rng.integers(0, 2, 5).astype(np.int64),
             "rois": np.concatenate([lo, lo + rng.uniform(1, 10, (5, 2))], 1).astype(np.float32)}
    with pg.device(dev), pg.testing.expect_kernel("GatherNd", dev.split(":")[0]):
        y = pg.onnx.import_model(m)(feeds)["y"]
    np.testing.assert_allclose(y.numpy(), ort_run(m, feeds)["y"], rtol=1e-4, atol=1e-5)


def test_a_value_computed_from_a_graph_input_is_read_when_the_graph_is_built():
    # Reshape's shape = s + 0: s is read when the graph is built, one graph per value
    m = model([h.make_node("Add", ["s", "zero"], ["shape"]),
               h.make_node("Reshape", ["x", "shape"], ["y"])],
              [h.make_tensor_value_info("x", T.FLOAT, [2, 6]),
               h.make_tensor_value_info("s", T.INT64, [2])],
              [h.make_tensor_value_info("y", T.FLOAT, None)],
              [("zero", np.zeros(2, np.int64))])
    pm = pg.onnx.import_model(m)
    x = rnd(2, 6)
    for shape in ([3, 4], [4, 3], [3, 4]):
        y = pm(x=x, s=np.array(shape, np.int64))["y"]
        np.testing.assert_array_equal(y.numpy(), x.reshape(shape))
    assert len(pm._cache) == 2


@pytest.mark.parametrize("op,attrs", [("MaxPool", dict(kernel_shape=[2, 2], strides=[0, 1])),
                                      ("AveragePool", dict(kernel_shape=[2, 2], strides=[1])),
                                      ("MaxPool", dict(kernel_shape=[2, 2], dilations=[1, -1]))])
def test_a_bad_stride_or_dilation_is_a_typed_error(op, attrs):
    """Found by the ONNX fuzzer: a zero stride divided by zero in the
    pooling geometry."""
    node = h.make_node(op, ["x"], ["y"], **attrs)
    graph = h.make_graph([node], "g", [h.make_tensor_value_info(
        "x", T.FLOAT, [1, 1, 4, 4])], [h.make_tensor_value_info(
            "y", T.FLOAT, None)])
    m = pg.onnx.import_model(h.make_model(graph, opset_imports=[
        h.make_opsetid("", 17)], ir_version=8))
    with pytest.raises(pg.errors.InvalidArgumentError, match=r"ONNX node .*must give 2 values "
                       r"of at least 1"):
        m(x=np.zeros((1, 1, 4, 4), np.float32))
