"""The framework's graph passes before a graph first runs: pruning, constant
folding, common-subexpression elimination and transpose sinking, checked on
the optimised graph and on which kernels run."""
import numpy as np
import pytest

import pluggable as pg
from pluggable.framework import registry
from pluggable.framework.registry import KernelDef, make_op_def
from pluggable.graph import passes


def _optimized(fn, *arrays, device="MY_DEVICE:0"):
    f = pg.function(fn)
    with pg.device(device):
        args = [pg.constant(a) for a in arrays]
        out = f(*args)
        cf = f.get_concrete_function(*args)
    return cf.optimized_graph, out, f, args


def _ops(graph):
    return sorted(n.op for n in graph.nodes)


def test_unused_nodes_are_pruned(rng):
    a = rng.standard_normal(4).astype(np.float32)

    def fn(x):
        pg.exp(x)          # computed, never used
        return pg.nn.relu(x)
    g, out, f, args = _optimized(fn, a)
    assert "Exp" not in _ops(g) and g.pass_counts["pruned"] >= 1
    with pg.device("MY_DEVICE:0"):
        before = pg.testing.kernel_calls("Exp", "MY_DEVICE")
        np.testing.assert_array_equal(f(*args).numpy(), np.maximum(a, 0))
    assert pg.testing.kernel_calls("Exp", "MY_DEVICE") == before


def test_constant_subexpressions_are_folded_on_their_device(rng):
    a = rng.standard_normal(4).astype(np.float32)
    k = rng.standard_normal(4).astype(np.float32)

    def fn(x):
        return x * pg.exp(pg.sqrt(pg.abs(pg.constant(k))))
    g, out, f, args = _optimized(fn, a)
    assert _ops(g) == ["Const", "Identity", "Mul", "Placeholder"]
    assert g.pass_counts["folded"] == 3
    folded = next(n for n in g.nodes if n.op == "Const" and n.name == "Exp")
    assert folded.assigned.device_type == "MY_DEVICE"   # computed by the device kernel
    np.testing.assert_allclose(out.numpy(), a * np.exp(np.sqrt(np.abs(k))), rtol=1e-6)
    with pg.device("MY_DEVICE:0"):
        before = pg.testing.kernel_calls("Exp", "MY_DEVICE")
        f(*args)
    assert pg.testing.kernel_calls("Exp", "MY_DEVICE") == before


def test_large_constants_are_left_to_the_device(rng, monkeypatch):
    monkeypatch.setattr(passes, "FOLD_LIMIT_BYTES", 64)
    g, out, _, _ = _optimized(lambda x: x + pg.fill([100], 2.0),
                              rng.standard_normal(100).astype(np.float32))
    assert "Fill" in _ops(g) and g.pass_counts["folded"] == 0


def test_common_subexpressions_are_merged(rng):
    a = rng.standard_normal(6).astype(np.float32)

    def fn(x):
        return pg.exp(x) * pg.exp(x) + pg.exp(x) * pg.exp(x)
    g, out, f, args = _optimized(fn, a)
    assert _ops(g).count("Exp") == 1 and _ops(g).count("Mul") == 1
    np.testing.assert_allclose(out.numpy(), 2 * np.exp(a) ** 2, rtol=1e-5)
    with pg.device("MY_DEVICE:0"), pg.testing.expect_kernel("Exp", "MY_DEVICE"):
        before = pg.testing.kernel_calls("Exp", "MY_DEVICE")
        f(*args)
        assert pg.testing.kernel_calls("Exp", "MY_DEVICE") == before + 1


RUNS = []


@pytest.fixture(scope="module")
def stateful_op():
    if "GraphTestTick" not in registry.OPS:
        registry.register_op(make_op_def("GraphTestTick", ["x: T"], ["y: T"], ["T: {float}"],
                                         shape_fn=lambda s, a, v: [s[0]], is_stateful=True,
                                         source="test"))
        registry.register_kernel(KernelDef("GraphTestTick", "CPU", {}, frozenset({"x"}),
                                           fn=lambda ins, attrs: (RUNS.append(1), ins)[1]))


def test_stateful_nodes_are_neither_pruned_nor_folded_nor_merged(stateful_op, rng):
    a = rng.standard_normal(3).astype(np.float32)

    def fn(x):
        pg.raw_ops.GraphTestTick(x=pg.constant(np.float32(1.0)))   # unused, constant input
        pg.raw_ops.GraphTestTick(x=pg.constant(np.float32(1.0)))
        return x + 1.0
    RUNS.clear()
    g, out, f, args = _optimized(fn, a, device="CPU:0")
    assert _ops(g).count("GraphTestTick") == 2 and len(RUNS) == 2
    with pg.device("CPU:0"):
        f(*args)
    assert len(RUNS) == 4


# ---------------------------------------------------------------- transposes

def _np_t(x, p):
    return np.transpose(x, p)


@pytest.mark.parametrize("device", ["CPU:0", "MY_DEVICE:0"])
def test_transposes_that_undo_each_other_across_elementwise_ops_vanish(device, rng):
    """relu(T(a)) + T(b), then T^-1: no transpose runs, the values are numpy's."""
    a, b = (rng.standard_normal((2, 3, 4, 5)).astype(np.float32) for _ in range(2))
    p, inv = [0, 2, 3, 1], [0, 3, 1, 2]

    def fn(x, y):
        s = pg.nn.relu(pg.transpose(x, p)) + pg.transpose(y, p)
        return pg.transpose(pg.math.tanh(s) * 2.0, inv)
    g, out, f, args = _optimized(fn, a, b, device=device)
    assert "Transpose" not in _ops(g) and g.pass_counts["transposes"] == 3
    ref = _np_t(np.tanh(np.maximum(_np_t(a, p), 0) + _np_t(b, p)) * 2.0, inv)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-6)
    kind = device.split(":")[0]
    with pg.device(device):
        before = pg.testing.kernel_calls("Transpose", kind)
        np.testing.assert_allclose(f(*args).numpy(), ref, rtol=1e-6)
    assert pg.testing.kernel_calls("Transpose", kind) == before


def test_a_transpose_read_twice_or_by_a_reshaping_op_stays(rng):
    """No transpose is added: one read by two ops, one feeding a reduction,
    a broadcast against a lower-rank operand and a graph output keep theirs."""
    a = rng.standard_normal((3, 4, 5)).astype(np.float32)
    v = rng.standard_normal(4).astype(np.float32)
    p = [2, 0, 1]

    def fn(x, w):
        t = pg.transpose(x, p)
        return pg.nn.relu(t), pg.exp(t) + w, pg.reduce_sum(pg.transpose(x, p), 0)
    g, out, f, args = _optimized(fn, a, v)
    t = _np_t(a, p)
    for got, ref in zip(out, (np.maximum(t, 0), np.exp(t) + v, t.sum(0))):
        # (a float32 sum of 3 values in another order: an absolute 1e-6 too)
        np.testing.assert_allclose(got.numpy(), ref, rtol=1e-5, atol=1e-6)
    assert g.pass_counts["transposes"] == 0


def test_random_chains_of_transposes_and_elementwise_ops_match_numpy(rng):
    """Random permutations (some inverse, some not) between random unary and
    binary element-wise ops, with scalar and same-rank broadcast operands."""
    unary = [(pg.nn.relu, lambda x: np.maximum(x, 0)), (pg.math.tanh, np.tanh),
             (pg.math.abs, np.abs), (pg.math.negative, np.negative)]
    perms = [[0, 1, 2], [2, 0, 1], [1, 2, 0], [0, 2, 1]]
    for trial in range(12):
        shape = tuple(int(s) for s in rng.integers(1, 5, 3))
        x0 = rng.standard_normal(shape).astype(np.float32)
        ops = []
        for _ in range(6):
            kind = int(rng.integers(0, 3))
            ops.append((kind, perms[int(rng.integers(0, 4))], int(rng.integers(0, 4))))

        def run(x, lib):
            for kind, p, u in ops:
                if kind == 0:
                    x = (pg.transpose(x, p) if lib == "pg" else np.transpose(x, p))
                elif kind == 1:
                    x = unary[u][0](x) if lib == "pg" else unary[u][1](x)
                else:   # x + T(T^-1(x)) * 0.5: a second transposed operand of one rank
                    inv = list(np.argsort(p))
                    if lib == "pg":
                        x = x + pg.transpose(pg.transpose(x, inv), p) * 0.5
                    else:
                        x = x + np.transpose(np.transpose(x, inv), p) * np.float32(0.5)
            return x
        g, out, f, args = _optimized(lambda x: run(x, "pg"), x0)
        np.testing.assert_allclose(out.numpy(), run(x0, "np"), rtol=1e-5, atol=1e-6,
                                   err_msg=f"trial {trial}: {ops}")


@pytest.mark.parametrize("device", ["CPU:0", "MY_DEVICE:0"])
def test_an_imported_nchw_network_keeps_only_its_edge_transposes(device, rng):
    """An ONNX residual CNN (Conv, Relu, Add, MaxPool, GlobalAveragePool,
    Gemm): the importer's NCHW <-> NHWC transposes around each convolution
    and pooling meet and cancel; 2 are left (into the first convolution and
    into the global pooling), ONNX Runtime's outputs."""
    onnx = pytest.importorskip("onnx", reason="the ONNX import needs the onnx package")
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the reference")
    h, T, nh = onnx.helper, onnx.TensorProto, onnx.numpy_helper

    def w(*s):
        return (rng.standard_normal(s) * 0.2).astype(np.float32)
    inits = [nh.from_array(w(8, 3, 3, 3), "w1"), nh.from_array(w(8), "b1"),
             nh.from_array(w(8, 8, 3, 3), "w2"), nh.from_array(w(8), "b2"),
             nh.from_array(w(8, 8, 1, 1), "w3"), nh.from_array(w(8), "b3"),
             nh.from_array(w(8, 5), "wf"), nh.from_array(w(5), "bf")]
    n = h.make_node
    nodes = [n("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]), n("Relu", ["c1"], ["r1"]),
             n("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]), n("Relu", ["c2"], ["r2"]),
             n("Conv", ["r2", "w3", "b3"], ["c3"]), n("Add", ["c3", "r1"], ["s"]),
             n("Relu", ["s"], ["r3"]),
             n("MaxPool", ["r3"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             n("GlobalAveragePool", ["p"], ["g"]), n("Flatten", ["g"], ["f"]),
             n("Gemm", ["f", "wf", "bf"], ["y"])]
    graph = h.make_graph(nodes, "cnn", [h.make_tensor_value_info("x", T.FLOAT, ["N", 3, 16, 16])],
                         [h.make_tensor_value_info("y", T.FLOAT, None)], inits)
    ops = [h.make_opsetid("", 17)]
    m = h.make_model(graph, opset_imports=ops, ir_version=h.find_min_ir_version_for(ops))
    x = rng.standard_normal((2, 3, 16, 16)).astype(np.float32)
    ref = ort.InferenceSession(m.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    pm = pg.onnx.import_model(m)
    kind = device.split(":")[0]
    with pg.device(device):
        pm(x=x)
        before = pg.testing.kernel_calls("Transpose", kind)
        y = pm(x=x)["y"]
        np.testing.assert_allclose(y.numpy(), ref, rtol=1e-4, atol=1e-5)
    assert pg.testing.kernel_calls("Transpose", kind) - before == 2
