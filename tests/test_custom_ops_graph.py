"""Custom ops take part in placement like any op (soft placement, the
placement log) and in pg.function graphs (a node that runs, pruning, CSE,
the GraphDef), on CPU and on MY_DEVICE, against numpy."""
from __future__ import annotations

import numpy as np
import pytest

import pluggable as pg
from pluggable.custom_ops import graph_op
from pluggable.framework import config

from custom_op_helpers import SRC, _cache, needs_cxx  # noqa: F401 (_cache: autouse)
pytestmark = needs_cxx


def _has(device_type: str) -> bool:
    return any(d.device_type == device_type for d in pg.list_physical_devices())


DEVICES = ["CPU:0", pytest.param("MY_DEVICE:0", marks=pytest.mark.skipif(
    not _has("MY_DEVICE"), reason="the MY_DEVICE reference plugin is not built"))]


def rnd(*shape):
    return np.random.default_rng().standard_normal(shape).astype(np.float32)


def add_op():
    """CustomAdd of add.cc; `add_op.name` is its catalogue name (custom::CustomAdd,
    or custom::CustomAdd_N when another module's library took that name)."""
    op = pg.custom_op(f"{SRC}/add.cc:CustomAdd", out_shape=lambda a, b: a)
    add_op.name = op.name
    return op


@pytest.fixture
def log():
    pg.config.set_log_device_placement(True)
    config.placement_log(clear=True)
    yield lambda: [r for r in config.placement_log() if r[0] == add_op.name]
    pg.config.set_log_device_placement(False)


@pytest.mark.parametrize("dev", DEVICES)
def test_eager_call_is_placed_logged_and_runs_its_kernel(dev, log):
    op = add_op()
    a, b = rnd(6), rnd(6)
    with pg.testing.expect_kernel(op.name, dev.split(":")[0]):
        with pg.device(dev):
            y = op(a, b)
    assert y.device.endswith(dev)
    np.testing.assert_allclose(y.numpy(), a + b, rtol=1e-6)
    assert log() and log()[-1][1].endswith(dev)


@pytest.mark.skipif(not _has("MY_DEVICE"), reason="the MY_DEVICE reference plugin is not built")
def test_inputs_on_a_device_choose_it_without_a_scope():
    op = add_op()
    a, b = rnd(3, 4), rnd(3, 4)
    with pg.device("MY_DEVICE:0"):
        x, y = pg.constant(a), pg.constant(b)
    z = op(x, y)
    assert z.device.endswith("MY_DEVICE:0")
    np.testing.assert_allclose(z.numpy(), a + b, rtol=1e-6)


def test_cpu_code_on_the_gpu_soft_places_to_cpu_or_is_refused(log, monkeypatch):
    """C/C++ code has no GPU kernel: under soft placement the call falls
    back to CPU (logged with the reason); without it, a typed error."""
    if not _has("GPU"):
        pytest.skip("no GPU device: soft placement from GPU cannot be shown")
    op = add_op()
    a, b = rnd(5), rnd(5)
    with pg.device("GPU:0"):
        y = op(a, b)
    assert y.device.endswith("CPU:0")
    np.testing.assert_allclose(y.numpy(), a + b, rtol=1e-6)
    assert "soft placement" in log()[-1][2]
    pg.config.set_soft_device_placement(False)
    try:
        with pg.device("GPU:0"), pytest.raises(pg.errors.NotFoundError, match="CustomAdd"):
            op(a, b)
    finally:
        pg.config.set_soft_device_placement(True)


def test_soft_placement_from_a_device_without_the_kernel(log):
    """A fake device type with no custom kernel registered stands in for a
    device the op cannot run on: removing the MY_DEVICE kernel of the op
    makes soft placement choose CPU, and strict placement refuse."""
    if not _has("MY_DEVICE"):
        pytest.skip("the MY_DEVICE reference plugin is not built")
    op = pg.custom_op(f"{SRC}/add.cc:CustomAdd", out_shape=lambda a, b: a)
    op.device_types = lambda: ["CPU"]  # this op object claims no MY_DEVICE kernel
    op.name = "CustomAddCpuOnly"
    a, b = rnd(4), rnd(4)
    with pg.device("MY_DEVICE:0"):
        y = op(a, b)
    assert y.device.endswith("CPU:0")
    np.testing.assert_allclose(y.numpy(), a + b, rtol=1e-6)
    rec = [r for r in config.placement_log() if r[0] == "CustomAddCpuOnly"][-1]
    assert rec[1].endswith("CPU:0") and "soft placement" in rec[2]
    pg.config.set_soft_device_placement(False)
    try:
        with pg.device("MY_DEVICE:0"), pytest.raises(pg.errors.NotFoundError,
                                                     match="CustomAddCpuOnly"):
            op(a, b)
    finally:
        pg.config.set_soft_device_placement(True)


@pytest.mark.parametrize("dev", DEVICES)
def test_traced_function_runs_the_custom_op_node(dev):
    op = add_op()
    red = pg.custom_op(f"{SRC}/reduce.cc:CustomKernel")

    @pg.function
    def f(x, y):
        with pg.device(dev):
            s = op(x, y) * 2.0
            return red(s, y, attrs={"axis": 1, "keep_dim": False})

    for shape in [(3, 5), (4, 2)]:
        a, b = rnd(*shape), rnd(*shape)
        with pg.testing.expect_kernel(op.name, dev.split(":")[0]):
            out = f(pg.constant(a), pg.constant(b))
        assert out.device.endswith(dev)
        np.testing.assert_allclose(out.numpy(), ((a + b) * 2 + b).sum(axis=1), rtol=1e-5,
                                   atol=1e-5)
    node_ops = [n.op for n in f.get_concrete_function(pg.constant(a), pg.constant(b))
                .graph.nodes]
    assert op.name in node_ops and red.name in node_ops


def _graph(f, *args):
    cf = f.get_concrete_function(*args)
    cf(*args)
    return cf


def test_pruning_and_cse_of_custom_op_nodes():
    """An unused call is pruned; two identical calls (same op object, inputs
    and attributes) become one node; calls of two op objects of the same
    function are kept apart by their token."""
    op, other = add_op(), add_op()

    @pg.function
    def f(x, y):
        op(y, y)                      # unused: pruned
        return op(x, y) + op(x, y) + other(x, y)

    a, b = rnd(7), rnd(7)
    cf = _graph(f, pg.constant(a), pg.constant(b))
    np.testing.assert_allclose(cf(pg.constant(a), pg.constant(b)).numpy(), 3 * (a + b),
                               rtol=1e-5)
    kept = [n for n in cf.optimized_graph.nodes if n.op == op.name]
    assert sorted(n.attrs[graph_op.TOKEN] for n in kept) == sorted([op.token, other.token])


def test_graph_def_names_the_op_and_finds_it_again():
    op = pg.custom_op(f"{SRC}/reduce.cc:CustomKernel")

    @pg.function
    def f(x, y):
        return op(x, y, attrs={"axis": 0, "keep_dim": True})

    a, b = rnd(3, 4), rnd(3, 4)
    cf = f.get_concrete_function(pg.constant(a), pg.constant(b))
    gd = cf.graph.as_graph_def()
    nodes = [n for n in gd.node if n.op == op.name]
    assert len(nodes) == 1
    nd = nodes[0]
    assert nd.attr["axis"].i == 0 and nd.attr["keep_dim"].b is True
    assert nd.attr[graph_op.FUNCTION].s.decode() == "CustomKernel"
    assert nd.attr[graph_op.LIBRARY].s.decode() == f"{SRC}/reduce.cc"
    found = graph_op.lookup({graph_op.TOKEN: nd.attr[graph_op.TOKEN].i})
    assert found is op
    # the GraphDef imported back runs the custom op it names (in this process)
    names = [n.name for n in gd.node if n.op == "Placeholder"]
    g = pg.graph_util.import_graph_def(gd, inputs=names, outputs=[nd.name])
    a, b = rnd(3, 4), rnd(3, 4)
    np.testing.assert_allclose(g(a, b).numpy(), (a + b).sum(axis=0, keepdims=True),
                               rtol=1e-5, atol=1e-5)


def test_unknown_token_is_a_typed_error():
    with pytest.raises(pg.errors.NotFoundError, match="create it again"):
        graph_op.lookup({graph_op.TOKEN: 10 ** 9, graph_op.FUNCTION: "F",
                         graph_op.LIBRARY: "x.so"})


@pytest.mark.parametrize("dev", DEVICES)
def test_repeated_calls_take_the_remembered_plan(dev, log):
    """Calls like an earlier one (same scope, input devices, dtypes, shapes)
    reuse its plan: results stay right for fresh inputs, each call is
    counted and logged, and a failure still belongs to its own result."""
    op = add_op()
    fail = pg.custom_op(f"{SRC}/fail.c:FailWith", out_shape=lambda x: x)
    with pg.device(dev):
        for _ in range(4):
            a, b = rnd(2, 3), rnd(2, 3)
            x, y = pg.constant(a), pg.constant(b)
            with pg.testing.expect_kernel(op.name, dev.split(":")[0]):
                z = op(x, y)
            np.testing.assert_allclose(z.numpy(), a + b, rtol=1e-6)
        assert len(log()) >= 4
        for _ in range(2):
            ok = fail(pg.constant(np.array([0, 7], np.int32)))
            np.testing.assert_array_equal(ok.numpy()[:1], [0])
        code = int(np.random.default_rng().integers(1, 100))
        with pytest.raises(pg.errors.UnknownError, match=f"FailWith .*returned {code}"):
            fail(pg.constant(np.array([code, 1], np.int32))).numpy()  # CPU: raised at once
        np.testing.assert_allclose(op(x, y).numpy(), a + b, rtol=1e-6)


def test_registry_definition_does_not_show_as_a_builtin_in_the_catalogue():
    """The registry's definition of a custom op is for graphs only: the
    catalogue lists a named custom op once, by its own entry, and a later
    version of an unnamespaced name is still accepted."""
    v1 = pg.custom_op(f"{SRC}/add.cc:CustomAdd", out_shape=lambda a, b: a,
                      name="CustomAddCat", version=1)
    v2 = pg.custom_op(f"{SRC}/add.cc:CustomAdd", out_shape=lambda a, b: a,
                      name="CustomAddCat", version=2)
    entries = [e for e in pg.ops.list() if e.qualified_name == "CustomAddCat"]
    assert sorted(e.version for e in entries) == [1, 2]
    assert pg.ops.get("CustomAddCat").op is v2 and pg.ops.get("CustomAddCat", 1).op is v1
    assert not [e for e in pg.ops.list() if e.qualified_name == "CustomAdd"
                and e.kind != "custom"]


def _gpu_with_stream():
    from pluggable.custom_ops import cuda
    from pluggable.runtime import placement
    for d in placement.plugin_devices():
        if d.device_type == "GPU" and cuda.native_stream(d) is not None:
            return d
    return None


def _cuda_compiler() -> str | None:
    from pluggable.custom_ops import cuda, nvrtc
    if cuda.nvcc_command() is None and nvrtc.unavailable_reason() is not None:
        return "neither nvcc nor NVRTC is available"
    return None


@pytest.mark.skipif(_gpu_with_stream() is None,
                    reason="no GPU device whose plugin hands over its CUDA stream")
@pytest.mark.skipif(_cuda_compiler() is not None, reason=str(_cuda_compiler()))
def test_cu_op_is_placed_on_the_gpu_and_traced(log):
    """A .cu op has a GPU kernel only: without a scope it goes to the GPU;
    inside pg.function it is a node run on the GPU's stream."""
    gpu = _gpu_with_stream()
    op = pg.custom_op(f"{SRC}/add.cu:AddScaled", out_shape=lambda a, b: a)
    rng = np.random.default_rng()
    a, b = rng.standard_normal((5, 7)).astype(np.float32), rng.standard_normal(
        (5, 7)).astype(np.float32)
    scale = float(rng.standard_normal())
    with pg.testing.expect_kernel(op.name, "GPU"):
        y = op(a, b, attrs={"scale": scale})
    assert y.device.endswith(gpu.short_name)
    np.testing.assert_allclose(y.numpy(), a * np.float32(scale) + b, rtol=1e-5, atol=1e-5)

    @pg.function
    def f(x, z):
        return op(x * 2.0, z, attrs={"scale": scale}) + 1.0

    with pg.device(gpu.short_name), pg.testing.expect_kernel(op.name, "GPU"):
        out = f(pg.constant(a), pg.constant(b))
    np.testing.assert_allclose(out.numpy(), 2 * a * np.float32(scale) + b + 1, rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("dev", DEVICES)
def test_constant_folding_runs_the_custom_op(dev):
    """A call on constants only is folded into a constant, computed by the
    custom op on the node's device."""
    op = add_op()
    a, b = rnd(4), rnd(4)

    @pg.function
    def f(x):
        with pg.device(dev):
            return op(pg.constant(a), pg.constant(b)) * x

    s = np.float32(np.random.default_rng().standard_normal())
    cf = f.get_concrete_function(pg.constant(s))
    np.testing.assert_allclose(cf(pg.constant(s)).numpy(), (a + b) * s, rtol=1e-5)
    assert op.name not in [n.op for n in cf.optimized_graph.nodes]
