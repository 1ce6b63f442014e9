"""Frozen graphs: pg.graph_util.import_graph_def and write_graph_def, the
example model, and the typed errors of bad files, unknown ops and bad feeds."""
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import pluggable as pg
from pluggable.framework import proto, registry
from pluggable.framework.registry import make_op_def

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _frozen(rng, tmp_path):
    w = rng.standard_normal((6, 3)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    with pg.device("MY_DEVICE:0"):
        wt, bt = pg.constant(w), pg.constant(b)

    @pg.function
    def model(x, scale):
        h = pg.nn.relu(pg.matmul(x, wt) + bt)
        return pg.reduce_sum(h, axis=1) * scale, h

    cf = model.get_concrete_function(pg.TensorSpec([None, 6]), pg.TensorSpec([]))
    path = tmp_path / "model.pb"
    pg.graph_util.write_graph_def(cf, path)
    return path, w, b


def test_a_traced_model_written_and_imported_back(rng, tmp_path):
    path, w, b = _frozen(rng, tmp_path)
    model = pg.graph_util.import_graph_def(str(path))
    assert model.input_names == ["x", "scale"]
    assert model.output_names == ["Identity", "Identity_1"]
    assert [s.shape for s in model.input_specs] == [(None, 6), ()]
    x = rng.standard_normal((4, 6)).astype(np.float32)
    with pg.device("MY_DEVICE:0"), pg.testing.expect_kernel("MatMul", "MY_DEVICE"):
        total, h = model(pg.constant(x), np.float32(2.0))
    ref = np.maximum(x @ w + b, 0)
    np.testing.assert_allclose(h.numpy(), ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(total.numpy(), ref.sum(axis=1) * 2, rtol=1e-5, atol=1e-5)
    by_name = model(scale=np.float32(1.0), x=x)
    np.testing.assert_allclose(by_name[0].numpy(), ref.sum(axis=1), rtol=1e-5, atol=1e-5)


def test_inputs_and_outputs_can_be_chosen(rng, tmp_path):
    path, w, b = _frozen(rng, tmp_path)
    model = pg.graph_util.import_graph_def(path, outputs=["Identity_1"])
    assert model.input_names == ["x"]      # only what the output needs
    x = rng.standard_normal((2, 6)).astype(np.float32)
    np.testing.assert_allclose(model(x).numpy(), np.maximum(x @ w + b, 0), rtol=1e-5,
                               atol=1e-6)
    with pytest.raises(pg.errors.NotFoundError, match="'nope:0' names no node"):
        pg.graph_util.import_graph_def(path, outputs=["nope:0"])
    with pytest.raises(pg.errors.NotFoundError, match="names no Placeholder"):
        pg.graph_util.import_graph_def(path, inputs=["Identity"])


def test_the_example_frozen_model_loads_and_runs():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "frozen_graph.py")],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith("OK")


# --------------------------------------------------------------- bad input

@pytest.mark.parametrize("make", [
    lambda data: data[: len(data) // 2],
    lambda data: b"\x08" + bytes(range(256)) * 4,
    lambda data: b"this is not a GraphDef, it is text\n",
])
def test_corrupt_files_are_data_loss_errors(rng, tmp_path, make):
    path, _, _ = _frozen(rng, tmp_path)
    bad = tmp_path / "bad.pb"
    bad.write_bytes(make(path.read_bytes()))
    with pytest.raises(pg.errors.DataLossError, match="bad.pb"):
        pg.graph_util.import_graph_def(bad)


def test_missing_files_and_wrong_objects():
    with pytest.raises(pg.errors.NotFoundError, match="cannot read the GraphDef file"):
        pg.graph_util.import_graph_def("/no/such/model.pb")
    with pytest.raises(TypeError, match="needs a GraphDef"):
        pg.graph_util.import_graph_def(42)


def _graph_def(rng, tmp_path):
    path, _, _ = _frozen(rng, tmp_path)
    return proto.decode(proto.GraphDef, path.read_bytes())


def test_an_unregistered_op_names_the_node_and_op(rng, tmp_path):
    gd = _graph_def(rng, tmp_path)
    next(n for n in gd.node if n.op == "Relu").op = "FancyRelu"
    with pytest.raises(pg.errors.NotFoundError, match="node 'Relu' uses op 'FancyRelu'"):
        pg.graph_util.import_graph_def(gd)


def test_an_op_without_kernels_names_the_node_and_op(rng, tmp_path):
    if "GraphTestNoKernels" not in registry.OPS:
        registry.register_op(make_op_def("GraphTestNoKernels", ["features: T"],
                                         ["activations: T"], ["T: {float}"],
                                         shape_fn=lambda s, a, v: [s[0]], source="test"))
    gd = _graph_def(rng, tmp_path)
    next(n for n in gd.node if n.op == "Relu").op = "GraphTestNoKernels"
    with pytest.raises(pg.errors.NotFoundError,
                       match="node 'Relu' .*GraphTestNoKernels.*no kernel on any device"):
        pg.graph_util.import_graph_def(gd.SerializeToString())


def test_a_dangling_input_is_an_error(rng, tmp_path):
    gd = _graph_def(rng, tmp_path)
    next(n for n in gd.node if n.op == "Relu").input[0] = "ghost:0"
    with pytest.raises(pg.errors.InvalidArgumentError, match="'ghost:0'.*dangling"):
        pg.graph_util.import_graph_def(gd)


@pytest.mark.parametrize("feeds, message", [
    (lambda x: dict(x=x.astype(np.int32), scale=np.float32(1)), "argument 'x' must be a float32"),
    (lambda x: dict(x=x[0], scale=np.float32(1)), "argument 'x' must have rank 2"),
    (lambda x: dict(x=x, scale=np.ones(2, np.float32)), "argument 'scale' must have rank 0"),
    (lambda x: dict(x=x), "inputs scale are not fed"),
    (lambda x: dict(x=x, scale=1.0, bias=2.0), "no input named bias"),
])
def test_bad_feeds_name_the_input(rng, tmp_path, feeds, message):
    path, _, _ = _frozen(rng, tmp_path)
    model = pg.graph_util.import_graph_def(path)
    x = rng.standard_normal((3, 6)).astype(np.float32)
    with pytest.raises(pg.errors.InvalidArgumentError, match=message):
        model(**feeds(x))


# --------------------------------------------------------------- hostile graphs

import time  # noqa: E402

from graph_defs import GraphBuilder  # noqa: E402


def _neg_graph(input_name="x"):
    b = GraphBuilder()
    b.placeholder("x", np.float32, [3])
    b.node("y", "Neg", [input_name], T=pg.float32)
    return b


@pytest.mark.parametrize("name", ["x:abc", "x:-1", "x:1:2:3", "x:" + "9" * 30])
def test_a_bad_input_name_is_a_typed_error_naming_the_node(name):
    with pytest.raises(pg.errors.InvalidArgumentError, match=r"node 'y' \(Neg\).*input"):
        pg.graph_util.import_graph_def(_neg_graph(name).graph)


def test_a_huge_fill_is_refused_before_allocation():
    b = _neg_graph()
    t = proto.TensorProto(dtype=proto.to_datatype("float32"))
    for d in (1 << 20, 1 << 20):
        t.tensor_shape.dim.add(size=d)
    t.float_val.append(1.0)                     # one value filling 4 TiB: a tiny file
    b.node("big", "Const", dtype=pg.float32, value=t)
    assert len(b.encode()) < 200
    with pytest.raises(pg.errors.ResourceExhaustedError,
                       match=r"node 'big' \(Const\).*max_constant_bytes=1073741824.*"
                             r"set_import_limits"):
        pg.graph_util.import_graph_def(b.graph)


def test_import_limits_are_settable(rng):
    value = rng.standard_normal(64).astype(np.float32)       # 256 bytes
    b = _neg_graph()
    b.const("c", value)
    b.node("z", "Neg", ["c"], T=pg.float32)
    old = pg.graph_util.set_import_limits(max_constant_bytes=255)
    try:
        with pytest.raises(pg.errors.ResourceExhaustedError, match="node 'c'.*255"):
            pg.graph_util.import_graph_def(b.graph, outputs=["z"])
        pg.graph_util.set_import_limits(max_constant_bytes=256, max_nodes=3)
        with pytest.raises(pg.errors.ResourceExhaustedError, match="4 nodes.*max_nodes=3"):
            pg.graph_util.import_graph_def(b.graph, outputs=["z"])
        pg.graph_util.set_import_limits(max_nodes=4)
        m = pg.graph_util.import_graph_def(b.graph, outputs=["z"])
        np.testing.assert_array_equal(m().numpy(), -value)
        with pytest.raises(pg.errors.InvalidArgumentError, match="non-negative int"):
            pg.graph_util.set_import_limits(max_nodes=-1)
    finally:
        pg.graph_util.set_import_limits(**old)


def _calls(gd, names, last_calls=None):
    """Functions names[i] calling names[i+1] (the last one calls
    `last_calls`, or returns its argument); the graph calls names[0]."""
    for i, fname in enumerate(names):
        fd = gd.library.function.add()
        fd.signature.name = fname
        fd.signature.input_arg.add(name="a", type=1)
        fd.signature.output_arg.add(name="o", type=1)
        callee = names[i + 1] if i + 1 < len(names) else last_calls
        if callee is None:
            fd.ret["o"] = "a"
            continue
        _if_call(fd.node_def.add(name="call", op="StatelessIf", input=["a", "a"]), callee)
        fd.ret["o"] = "call:output:0"
    _if_call(gd.node.add(name="top", op="StatelessIf", input=["x", "x"]), names[0])


def _if_call(n, callee):
    """`n` a StatelessIf on a float32 predicate calling `callee` either way."""
    n.attr["then_branch"].func.name = callee
    n.attr["else_branch"].func.name = callee
    n.attr["Tcond"].type = 1
    n.attr["Tin"].list.type.append(1)
    n.attr["Tout"].list.type.append(1)


def test_recursive_and_too_deep_functions_are_refused(rng):
    b = _neg_graph()
    _calls(b.graph, ["f", "g"], last_calls="f")
    with pytest.raises(pg.errors.InvalidArgumentError, match=r"f -> g -> f.*recursive"):
        pg.graph_util.import_graph_def(b.graph, outputs=["top"])
    b = _neg_graph()
    _calls(b.graph, ["self"], last_calls="self")
    with pytest.raises(pg.errors.InvalidArgumentError, match=r"self -> self"):
        pg.graph_util.import_graph_def(b.graph, outputs=["top"])
    b = _neg_graph()
    _calls(b.graph, [f"f{i}" for i in range(500)])
    with pytest.raises(pg.errors.ResourceExhaustedError, match="max_function_depth=64"):
        pg.graph_util.import_graph_def(b.graph, outputs=["top"])
    b = _neg_graph()
    _calls(b.graph, [f"f{i}" for i in range(10)])       # within the bound: it runs
    m = pg.graph_util.import_graph_def(b.graph, outputs=["top"])
    x = rng.standard_normal(3).astype(np.float32)
    np.testing.assert_array_equal(m(x).numpy(), x)


def _while_graph(pred_shape):
    """A StatelessWhile whose condition returns a constant of `pred_shape`
    (a static shape), or with None its loop variable (shape known only when
    it runs)."""
    gd = proto.GraphDef()
    x = gd.node.add(name="x", op="Placeholder")
    x.attr["dtype"].type = proto.to_datatype("bool")
    x.attr["shape"].shape.CopyFrom(proto.to_shape_proto(None))
    cond = gd.library.function.add()
    cond.signature.name = "cond"
    cond.signature.input_arg.add(name="a", type=proto.to_datatype("bool"))
    cond.signature.output_arg.add(name="o", type=proto.to_datatype("bool"))
    if pred_shape is None:           # the shape of the loop variable: known when run
        n = cond.node_def.add(name="id", op="Identity", input=["a"])
        n.attr["T"].type = proto.to_datatype("bool")
    else:
        n = cond.node_def.add(name="id", op="Const")
        n.attr["dtype"].type = proto.to_datatype("bool")
        n.attr["value"].tensor.CopyFrom(proto.to_tensor_proto(np.ones(pred_shape, bool)))
    cond.ret["o"] = "id:output:0"
    body = gd.library.function.add()
    body.signature.name = "body"
    body.signature.input_arg.add(name="a", type=proto.to_datatype("bool"))
    body.signature.output_arg.add(name="o", type=proto.to_datatype("bool"))
    body.ret["o"] = "a"
    w = gd.node.add(name="loop", op="StatelessWhile", input=["x"])
    w.attr["T"].list.type.append(proto.to_datatype("bool"))
    w.attr["cond"].func.name = "cond"
    w.attr["body"].func.name = "body"
    return gd


def test_a_while_condition_must_be_a_scalar():
    with pytest.raises(pg.errors.InvalidArgumentError,
                       match=r"node 'loop' \(StatelessWhile\).*shape \[2\].*one scalar"):
        pg.graph_util.import_graph_def(_while_graph([2]), outputs=["loop"])
    m = pg.graph_util.import_graph_def(_while_graph(None), outputs=["loop"])
    with pytest.raises(pg.errors.InvalidArgumentError,
                       match=r"node 'loop' \(StatelessWhile\).*shape \[2\].*scalar"):
        m(np.array([True, False]))            # would loop for ever without the check
    assert m(np.array(False)).numpy() == np.False_


def test_a_path_that_is_no_regular_file_is_refused(tmp_path):
    with pytest.raises(pg.errors.InvalidArgumentError, match="/dev/zero.*not a regular file"):
        pg.graph_util.import_graph_def("/dev/zero")
    fifo = tmp_path / "model.pb"
    os.mkfifo(fifo)                           # no writer: a blocking read would hang
    with pytest.raises(pg.errors.InvalidArgumentError, match="model.pb.*not a regular file"):
        pg.graph_util.import_graph_def(fifo)
    with pytest.raises(pg.errors.InvalidArgumentError, match="not a regular file"):
        pg.graph_util.import_graph_def(tmp_path)


def test_a_file_larger_than_the_bound_is_not_read(rng, tmp_path):
    path, _, _ = _frozen(rng, tmp_path)
    old = pg.graph_util.set_import_limits(max_file_bytes=path.stat().st_size - 1)
    try:
        with pytest.raises(pg.errors.ResourceExhaustedError, match="max_file_bytes"):
            pg.graph_util.import_graph_def(path)
    finally:
        pg.graph_util.set_import_limits(**old)
    assert pg.graph_util.import_graph_def(path).input_names == ["x", "scale"]


def test_attributes_of_the_wrong_kind_name_the_node(rng, tmp_path):
    gd = _graph_def(rng, tmp_path)
    node = next(n for n in gd.node if n.op == "MatMul")
    node.attr["transpose_a"].Clear()
    node.attr["transpose_a"].s = b"yes"
    node.attr["T"].Clear()
    node.attr["T"].i = 7
    with pytest.raises(pg.errors.InvalidArgumentError, match=f"node '{node.name}'"):
        pg.graph_util.import_graph_def(gd)


def test_a_long_chain_imports_in_linear_time():
    def chain(n):
        b = GraphBuilder()
        b.placeholder("x", np.float32, [4])
        for i in range(n):
            b.node(f"n{i}", "Neg", [f"n{i - 1}" if i else "x"], T=pg.float32)
        t = time.perf_counter()
        m = pg.graph_util.import_graph_def(b.graph, outputs=[f"n{n - 1}"])
        return m, time.perf_counter() - t
    m, small = chain(2000)
    m, large = chain(20000)
    np.testing.assert_array_equal(m(np.ones(4, np.float32)).numpy(), np.ones(4))
    assert large < 25 * small + 1.0, (small, large)   # 10x the nodes, not 100x the time
