"""pg.function: tracing, signatures and retracing, the planned executor,
control flow, and the errors of bad input."""
import contextlib
import logging
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import pluggable as pg
from pluggable.graph import SymbolicTensor
from pluggable.runtime import hooks

BODY_RUNS = []


def body_ran():
    """Counts runs of a traced body."""
    BODY_RUNS.append(1)


def _mlp(x, w, b):
    body_ran()
    h = pg.nn.relu(pg.matmul(x, w) + b)
    return pg.reduce_sum(h * h, axis=1), h


def _mlp_ref(x, w, b):
    h = np.maximum(x @ w + b, 0)
    return (h * h).sum(axis=1), h


@pytest.mark.parametrize("device", ["CPU:0", "MY_DEVICE:0"])
def test_traced_function_matches_numpy_and_runs_without_python(device, rng):
    f = pg.function(_mlp)
    with pg.device(device):
        args = [pg.constant(rng.standard_normal(s).astype(np.float32))
                for s in [(6, 5), (5, 7), (7,)]]
        BODY_RUNS.clear()
        first = f(*args)
        assert len(BODY_RUNS) == 1
        if device.startswith("CPU"):
            ran = [pg.testing.expect_kernel("MatMul", "CPU"), pg.testing.expect_kernel("Relu", "CPU")]
        else:  # the reference plugin's optimizer fuses MatMul + bias + Relu
            ran = [pg.testing.expect_kernel("_FusedMatMul", "MY_DEVICE")]
        with contextlib.ExitStack() as stack:
            for check in ran:
                stack.enter_context(check)
            again = f(*args)
    assert len(BODY_RUNS) == 1 and f.tracing_count == 1
    want = _mlp_ref(*[a.numpy() for a in args])
    for got in (first, again):
        assert isinstance(got, tuple) and len(got) == 2
        for g, w in zip(got, want):
            np.testing.assert_allclose(g.numpy(), w, rtol=1e-5, atol=1e-5)
            assert g.device.endswith(device)


def test_retracing_follows_the_signature(rng, caplog):
    BODY_RUNS.clear()
    f = pg.function(lambda x, k: (body_ran(), x * k)[1])
    x32 = pg.constant(rng.standard_normal(3).astype(np.float32))
    with caplog.at_level(logging.INFO, logger="pluggable.graph"):
        f(x32, 2.0)
        f(pg.constant(rng.standard_normal(3).astype(np.float32)), 2.0)   # same signature
        assert f.tracing_count == 1
        f(pg.constant(rng.standard_normal(4).astype(np.float32)), 2.0)   # new shape
        f(pg.constant(rng.standard_normal(3)), 2.0)                       # new dtype
        out = f(x32, 3.0)                                                 # new Python value
    assert f.tracing_count == 4 and len(BODY_RUNS) == 4
    np.testing.assert_allclose(out.numpy(), x32.numpy() * 3.0, rtol=1e-6)
    traces = [r for r in caplog.records if "tracing" in r.getMessage()]
    assert len(traces) == 4 and "trace 4" in traces[-1].getMessage()
    with pg.device("MY_DEVICE:0"):                                        # new device scope
        f(x32, 3.0)
    assert f.tracing_count == 5


def test_frequent_retracing_is_warned_about_once(caplog):
    f = pg.function(lambda x, k: x + k)
    with caplog.at_level(logging.WARNING, logger="pluggable.graph"):
        for k in range(8):
            f(pg.constant(np.float32(1.0)), float(k))
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "traced 6 times" in warnings[0].getMessage()


def test_input_signature_with_none_dims_gives_one_graph(rng):
    spec = [pg.TensorSpec([None, 4], pg.float32), pg.TensorSpec([4], pg.float32)]
    f = pg.function(lambda x, b: pg.nn.relu(x + b), input_signature=spec)
    b = rng.standard_normal(4).astype(np.float32)
    with pg.device("MY_DEVICE:0"):
        for n in (1, 3, 17):
            x = rng.standard_normal((n, 4)).astype(np.float32)
            np.testing.assert_allclose(f(pg.constant(x), b).numpy(), np.maximum(x + b, 0),
                                       rtol=1e-6)
    assert f.tracing_count == 1
    cf = f.get_concrete_function()
    assert cf.inputs[0].shape == (None, 4) and cf.outputs[0].shape == (None, 4)


def test_concrete_function_for_specs_serves_matching_shapes(rng):
    f = pg.function(lambda x: x * 2.0)
    cf = f.get_concrete_function(pg.TensorSpec([None], pg.float32))
    for n in (2, 5):
        x = rng.standard_normal(n).astype(np.float32)
        np.testing.assert_allclose(f(pg.constant(x)).numpy(), x * 2, rtol=1e-6)
        np.testing.assert_allclose(cf(pg.constant(x)).numpy(), x * 2, rtol=1e-6)
    assert f.tracing_count == 1


@pytest.mark.parametrize("bad, message", [
    (lambda: pg.constant(np.zeros((2, 4), np.int32)), "argument 'x' must be a float32"),
    (lambda: pg.constant(np.zeros((2, 4, 1), np.float32)), "argument 'x' must have rank 2"),
    (lambda: pg.constant(np.zeros((2, 5), np.float32)), "argument 'x' must have shape"),
    (lambda: "text", "argument 'x'"),
])
def test_wrong_feeds_are_errors_naming_the_argument(bad, message):
    f = pg.function(lambda x: x + 1.0, input_signature=[pg.TensorSpec([None, 4])])
    with pytest.raises(TypeError, match=message):  # TensorFlow's class for a signature
        f(bad())
    cf = f.get_concrete_function()
    with pytest.raises(pg.errors.InvalidArgumentError, match=message):
        cf(bad())


def test_nested_arguments_and_results(rng):
    @pg.function
    def f(inputs, scale=2.0):
        return {"sum": inputs["a"] + inputs["b"][0], "scaled": (inputs["b"][1] * scale,)}
    a, b0, b1 = (rng.standard_normal(3).astype(np.float32) for _ in range(3))
    out = f({"a": pg.constant(a), "b": [pg.constant(b0), pg.constant(b1)]}, scale=3.0)
    assert set(out) == {"sum", "scaled"} and isinstance(out["scaled"], tuple)
    np.testing.assert_allclose(out["sum"].numpy(), a + b0, rtol=1e-6)
    np.testing.assert_allclose(out["scaled"][0].numpy(), b1 * 3, rtol=1e-6)
    assert f.get_concrete_function(
        {"a": pg.constant(a), "b": [pg.constant(b0), pg.constant(b1)]}, scale=3.0
    ).input_names == ["inputs['a']", "inputs['b'][0]", "inputs['b'][1]"]


def test_python_values_are_baked_in_as_constants(rng):
    f = pg.function(lambda x, k: x * k)
    cf = f.get_concrete_function(pg.TensorSpec([3]), 4.0)
    consts = [n for n in cf.graph.nodes if n.op == "Const"]
    assert len(consts) == 1 and float(consts[0].attrs["value"]) == 4.0
    assert [n.op for n in cf.graph.nodes if n.op == "Placeholder"] == ["Placeholder"]


def test_eager_tensors_are_captured_without_a_copy(rng):
    with pg.device("MY_DEVICE:0"):
        w = pg.constant(rng.standard_normal((4, 4)).astype(np.float32))
        f = pg.function(lambda x: pg.matmul(x, w))
        x = pg.constant(rng.standard_normal((2, 4)).astype(np.float32))
        np.testing.assert_allclose(f(x).numpy(), x.numpy() @ w.numpy(), rtol=1e-5,
                                   atol=1e-5)
    cf = f.get_concrete_function(x)
    const = [n for n in cf.graph.nodes if n.op == "Const"][0]
    assert const.attrs["value"] is w


# ----------------------------------------------------------------- bad input

class Thing:
    pass


@pytest.mark.parametrize("result, where", [
    (lambda x: "done", "the returned value is a str"),
    (lambda x: (x, Thing()), r"the returned value\[1\] is a Thing"),
    (lambda x: {"y": x, "n": b"raw"}, r"the returned value\['n'\] is a bytes "
     r"\(pluggable has no string dtype\)"),
])
def test_returning_non_tensors_is_a_typed_error(result, where):
    f = pg.function(result)
    with pytest.raises(pg.errors.InvalidArgumentError, match=where):
        f(pg.constant(np.float32(1.0)))


# One source for both frameworks: `fn` is pg.function or tf.function, `const`
# pg.constant or tf.constant, `is_tensor` whether a value is one of its tensors.
TF_NAMES = "fn, const, is_tensor = tf.function, tf.constant, tf.is_tensor\n"
PG_NAMES = {"fn": pg.function, "const": pg.constant, "np": np,
            "is_tensor": lambda x: isinstance(x, pg.Tensor)}

SIDE_EFFECTS = """
import contextlib, io
calls = [0]
traced_with = []
total = 0
printed = io.StringIO()

@fn
def step(x, scale):
    global total
    calls[0] += 1                 # the counter of TensorFlow's guide
    total += 1                    # a global rebound
    traced_with.append(scale)     # a list appended to
    print("tracing step: shape", list(x.shape), "scale", scale)
    return x * scale

def make_counted():
    seen = 0
    @fn
    def add_one(x):
        nonlocal seen             # a closure variable rebound
        seen += 1
        print("tracing add_one")
        return x + 1.0
    return add_one, lambda: seen

add_one, add_one_traces = make_counted()
with contextlib.redirect_stdout(printed):
    outs = [step(const(a), 2.0) for _ in range(3)] + [step(const(b), 2.0)]
    outs += [add_one(const(a)) for _ in range(3)]
    outs += [step(const(a), 3.0)]
result = {"calls": calls[0], "total": total, "traced_with": traced_with,
          "add_one_traces": add_one_traces(), "printed": printed.getvalue(),
          "outs": [o.numpy() for o in outs]}
"""


@pytest.mark.parametrize("device", ["CPU:0", "MY_DEVICE:0"])
def test_python_side_effects_run_once_per_trace_as_in_tensorflow(device, rng, tf_oracle):
    a = rng.standard_normal(3).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    want = tf_oracle.run(TF_NAMES + SIDE_EFFECTS, a=a, b=b)
    scope = dict(PG_NAMES, a=a, b=b)
    with pg.device(device):
        exec(SIDE_EFFECTS, scope)
    got = scope["result"]
    # three calls of one signature, one of a new shape, one of a new Python value
    assert want["calls"] == want["total"] == 3 and want["add_one_traces"] == 1
    assert {k: v for k, v in got.items() if k != "outs"} == \
        {k: v for k, v in want.items() if k != "outs"}
    assert got["printed"].count("\n") == 4
    for g, w in zip(got["outs"], want["outs"], strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6)
    assert scope["step"].tracing_count == 3


RETURNS = """
@fn
def mixed(x):
    return {"t": x * 2.0, "i": 3, "big": 2**40, "neg": -7, "f": 1.5, "yes": True,
            "none": None, "np": np.float64(0.25), "arr": np.arange(3, dtype=np.int64),
            "nest": [x, 4, (None, 0.5, [False])], "empty": ()}

def kinds(x):   # each leaf as (its type, dtype, shape, values)
    if isinstance(x, dict):
        return {k: kinds(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(kinds(v) for v in x)
    if x is None:
        return None
    v = np.asarray(x.numpy())
    return ("tensor" if is_tensor(x) else type(x).__name__, str(v.dtype), v.shape, v.tolist())

x = const(a)
result = [kinds(mixed(x)), kinds(mixed(x)), kinds(fn(lambda: 5)()),
          kinds(fn(lambda x: None)(x)), kinds(fn(lambda x: (x, [None]))(x))]
"""


def test_python_values_returned_are_those_tensorflow_returns(rng, tf_oracle):
    a = rng.standard_normal(2).astype(np.float32)
    want = tf_oracle.run(TF_NAMES + RETURNS, a=a)
    scope = dict(PG_NAMES, a=a)
    exec(RETURNS, scope)
    assert scope["result"] == want
    assert scope["mixed"].tracing_count == 1


@pytest.mark.parametrize("use", [bool, float, lambda t: t.numpy(), lambda t: np.asarray(t)])
def test_reading_a_symbolic_value_is_a_typed_error(use):
    f = pg.function(lambda x: use(x))
    with pytest.raises(pg.errors.InvalidArgumentError, match="pg.cond"):
        f(pg.constant(np.float32(1.0)))


# ---------------------------------------------------------------- control flow

def _piecewise(x, p):
    return pg.cond(p, lambda: x * 2.0, lambda: pg.nn.relu(x) - 1.0)


@pytest.mark.parametrize("device", ["CPU:0", "MY_DEVICE:0"])
def test_cond_traces_both_branches_into_stateless_if(device, rng):
    f = pg.function(_piecewise)
    a = rng.standard_normal(5).astype(np.float32)
    with pg.device(device):
        x = pg.constant(a)
        for p in (True, False, True):
            got = f(x, pg.constant(p)).numpy()
            want = a * 2 if p else np.maximum(a, 0) - 1
            np.testing.assert_allclose(got, want, rtol=1e-6)
            np.testing.assert_allclose(_piecewise(x, pg.constant(p)).numpy(), want, rtol=1e-6)
    assert f.tracing_count == 1
    cf = f.get_concrete_function(x, pg.constant(True))
    if_node = [n for n in cf.graph.nodes if n.op == "StatelessIf"][0]
    lib = cf.graph.library
    assert {n.op for n in lib[if_node.attrs["then_branch"]].nodes} >= {"Mul"}
    assert {n.op for n in lib[if_node.attrs["else_branch"]].nodes} >= {"Relu", "Sub"}


def test_cond_branches_must_agree():
    f = pg.function(lambda x, p: pg.cond(p, lambda: x, lambda: (x, x)))
    with pytest.raises(pg.errors.InvalidArgumentError, match="same structure"):
        f(pg.constant(np.float32(1.0)), pg.constant(True))
    g = pg.function(lambda x, p: pg.cond(p, lambda: x, lambda: pg.cast(x, pg.int32)))
    with pytest.raises(pg.errors.InvalidArgumentError, match="float32 in true_fn but int32"):
        g(pg.constant(np.float32(1.0)), pg.constant(True))


def _power_loop(x, n):
    def cond(i, acc):
        return pg.cast(i, pg.bool)

    def body(i, acc):
        return i - 1, pg.cond(pg.cast(i - 1, pg.bool), lambda: acc * x, lambda: acc + 0.5)
    return pg.while_loop(cond, body, [n, pg.identity(x)])[1]


def _power_ref(a, n):
    acc = a.copy()
    for i in range(n, 0, -1):
        acc = acc * a if i - 1 else acc + 0.5
    return acc


@pytest.mark.parametrize("device", ["CPU:0", "MY_DEVICE:0"])
def test_while_loop_with_nested_cond_and_captures(device, rng):
    f = pg.function(_power_loop)
    a = rng.uniform(0.5, 1.5, 4).astype(np.float32)
    with pg.device(device):
        x = pg.constant(a)
        for n in (1, 3, 5):
            np.testing.assert_allclose(f(x, pg.constant(np.int32(n))).numpy(),
                                       _power_ref(a, n), rtol=1e-5)
            np.testing.assert_allclose(_power_loop(x, pg.constant(np.int32(n))).numpy(),
                                       _power_ref(a, n), rtol=1e-5)
    assert f.tracing_count == 1
    cf = f.get_concrete_function(x, pg.constant(np.int32(1)))
    node = [n for n in cf.graph.nodes if n.op == "StatelessWhile"][0]
    assert len(node.inputs) == 3  # n, the accumulator, and the captured x


def test_while_loop_shape_changes_need_invariants():
    def grow(x):
        return pg.while_loop(lambda i, v: pg.cast(i, pg.bool),
                             lambda i, v: (i - 1, pg.reshape(pg.fill([2], 1.0), [2])),
                             [pg.constant(np.int32(2)), x])[1]
    with pytest.raises(pg.errors.InvalidArgumentError, match="shape_invariants"):
        pg.function(grow)(pg.constant(np.zeros(1, np.float32)))

    def grow_ok(x):
        return pg.while_loop(lambda i, v: pg.cast(i, pg.bool),
                             lambda i, v: (i - 1, pg.fill([2], 1.0)),
                             [pg.constant(np.int32(2)), x],
                             shape_invariants=[(), (None,)])[1]
    out = pg.function(grow_ok)(pg.constant(np.zeros(1, np.float32)))
    np.testing.assert_array_equal(out.numpy(), [1.0, 1.0])


def test_while_condition_must_be_a_bool_scalar():
    f = pg.function(lambda x: pg.while_loop(lambda v: v, lambda v: v - 1.0, [x]))
    with pytest.raises(pg.errors.InvalidArgumentError, match="scalar bool"):
        f(pg.constant(np.float32(3.0)))


# ------------------------------------------------------------------ hooks

def test_wrappers_outside_and_inside_the_trace_see_traced_ops():
    seen_outside, seen_inside = [], []

    def outside(op, inputs, attrs, run):
        out = run(op, inputs, attrs)
        seen_outside.append((op.name, all(isinstance(o, SymbolicTensor) for o in out)))
        return out

    def inside(op, inputs, attrs, run):
        seen_inside.append(op.name)
        return run(op, inputs, attrs)

    def body(x):
        y = pg.exp(x)
        hooks.install(inside)
        try:
            return pg.nn.relu(y)
        finally:
            hooks.uninstall(inside)
    hooks.install(outside)
    try:
        pg.function(body)(pg.constant(np.float32(1.0)))
    finally:
        hooks.uninstall(outside)
    assert seen_outside == [("Exp", True), ("Relu", True)]
    assert seen_inside == ["Relu"]
    assert not hooks.active[0]


# ---------------------------------------------------------------- executor

def _chain(x, y):
    for _ in range(25):
        x = pg.raw_ops.Maximum(x=pg.raw_ops.Sub(x=pg.raw_ops.Mul(
            x=pg.raw_ops.AddV2(x=x, y=y), y=y), y=y), y=y)
    return x


def test_replay_is_one_plan_call_that_reuses_planned_buffers(rng):
    f = pg.function(_chain)
    with pg.device("MY_DEVICE:0"):
        x = pg.constant(rng.standard_normal(16).astype(np.float32))
        y = pg.constant(rng.uniform(0.1, 1, 16).astype(np.float32))
        with pg.testing.expect_kernel("Maximum", "MY_DEVICE", 25):
            got = f(x, y)
        np.testing.assert_allclose(got.numpy(), _chain(x, y).numpy(), rtol=1e-6)
        stats = f.get_concrete_function(x, y).plan_stats()
    assert stats["fast"] and stats["kernel_steps"] == 100 and stats["python_steps"] == 0
    assert stats["planned_buffers"] == 2          # 99 intermediates share two buffers
    assert stats["planned_hits"] == 99 and stats["planned_misses"] == 0
    assert stats["planned_bytes"] == 2 * 64 and stats["unplanned_bytes"] == 99 * 64


def test_results_held_by_the_caller_are_never_overwritten(rng):
    f = pg.function(lambda x: pg.reshape(pg.exp(x) + 1.0, [2, 2]))
    with pg.device("MY_DEVICE:0"):
        a, b = (rng.standard_normal(4).astype(np.float32) for _ in range(2))
        first = f(pg.constant(a))
        second = f(pg.constant(b))
    np.testing.assert_allclose(first.numpy(), (np.exp(a) + 1).reshape(2, 2), rtol=1e-6)
    np.testing.assert_allclose(second.numpy(), (np.exp(b) + 1).reshape(2, 2), rtol=1e-6)


def test_kernel_errors_name_the_node(rng):
    f = pg.function(lambda a, b: pg.matmul(a, b),
                    input_signature=[pg.TensorSpec([None, None])] * 2)
    with pg.device("MY_DEVICE:0"):
        a = pg.constant(np.ones((2, 3), np.float32))
        b = pg.constant(np.ones((4, 2), np.float32))
        with pytest.raises(pg.errors.InvalidArgumentError, match="node 'MatMul'"):
            f(a, b)
        np.testing.assert_allclose(f(a, pg.constant(np.ones((3, 2), np.float32))).numpy(),
                                   np.full((2, 2), 3.0))


def test_asynchronous_errors_surface_when_read():
    f = pg.function(lambda x: pg.raw_ops.CheckNumerics(tensor=x * 2.0, message="graph check"))
    with pg.device("MY_DEVICE:0"):
        bad = f(pg.constant(np.array([1.0, np.nan], np.float32)))
        with pytest.raises(pg.errors.InvalidArgumentError, match="graph check"):
            bad.numpy()
        ok = f(pg.constant(np.array([1.0, 2.0], np.float32)))
        np.testing.assert_array_equal(ok.numpy(), [2.0, 4.0])


_SPAN_EVENTS_CHILD = r"""
import sys, numpy as np, pluggable as pg
from pluggable._core import ffi
dev = pg.get_device("MY_DEVICE:0")
rng = np.random.default_rng(int(sys.argv[1]))
records = [0]
real = dev._se.record_event

def _count(d, stream, ev, st):
    records[0] += 1
    real(d, stream, ev, st)

counting = ffi.callback(ffi.typeof(real), _count)

def body(x, y):
    a = pg.raw_ops.Mul(x=x, y=y)
    b = pg.raw_ops.AddV2(x=a, y=x)
    c = pg.raw_ops.Sub(x=b, y=y)
    return pg.raw_ops.Mul(x=c, y=c), pg.raw_ops.Neg(x=a)

f = pg.function(body)
xa, ya = rng.standard_normal(16), rng.standard_normal(16)
want = (((xa * ya + xa) - ya) ** 2, -(xa * ya))
with pg.device("MY_DEVICE:0"):
    x, y = pg.constant(xa), pg.constant(ya)
    f(x, y)
    pg.synchronize()
    counts, right = [], []
    for run in (lambda: f(x, y), lambda: body(x, y), lambda: f(x, y)):
        records[0] = 0
        dev._se.record_event = counting
        try:
            out = run()
        finally:
            dev._se.record_event = real
        counts.append(records[0])
        right.append(all(np.allclose(o.numpy(), w, rtol=1e-12, atol=0) for o, w in zip(out, want)))
    stats = f.get_concrete_function(x, y).plan_stats()
print(*counts, all(right), stats["kernel_steps"], stats["spans"], stats["runs"])
"""


def test_a_graph_run_records_one_completion_event_per_device(rng):
    """The planned executor launches a function's kernels on one device as
    one span with a single completion event (eager ops record one each);
    counted by wrapping MY_DEVICE's record_event in a child process."""
    seed = int(rng.integers(1 << 30))
    proc = subprocess.run([sys.executable, "-c", _SPAN_EVENTS_CHILD, str(seed)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    graph1, eager, graph2, right, steps, spans, runs = proc.stdout.split()
    assert right == "True", proc.stdout
    assert int(steps) == 5, proc.stdout            # Mul, AddV2, Sub, Mul, Neg
    assert (int(graph1), int(eager), int(graph2)) == (1, 5, 1), proc.stdout
    assert int(spans) == int(runs) == 3, proc.stdout  # the first call and two more


def test_an_asynchronous_failure_fails_every_output_of_the_graph_run(rng):
    """The ops of a span share its completion event: a failure found by the
    device's work fails the span's other outputs too (TensorFlow fails the
    whole call), each error says so, and it is reported once."""
    def body(x):
        before = x + 1.0
        checked = pg.raw_ops.CheckNumerics(tensor=x * 2.0, message="span check")
        after = x - 1.0
        return before, checked, after

    f = pg.function(body)
    data = rng.standard_normal(8).astype(np.float32)
    with pg.device("MY_DEVICE:0"):
        with pg.testing.expect_kernel("CheckNumerics", "MY_DEVICE"):
            outs = f(pg.constant(data))
        for got, want in zip(outs, (data + 1, data * 2, data - 1)):
            np.testing.assert_array_equal(got.numpy(), want, err_msg=rng.seed_text)
        bad = data.copy()
        bad[int(rng.integers(8))] = np.nan
        outs = f(pg.constant(bad))
        messages = []
        for out in outs:
            with pytest.raises(pg.errors.InvalidArgumentError, match="span check") as info:
                out.numpy()
            messages.append(str(info.value))
        assert all("share one completion event" in m for m in messages), messages
        assert "AddV2" in messages[0] and "Sub" in messages[2], messages
        pg.synchronize()  # reported once: nothing is left for this thread
        outs = f(pg.constant(data))
        for got, want in zip(outs, (data + 1, data * 2, data - 1)):
            np.testing.assert_array_equal(got.numpy(), want, err_msg=rng.seed_text)
        assert f.get_concrete_function(pg.constant(data)).plan_stats()["spans"] == 3


def test_a_step_failing_inside_a_span_leaves_the_device_working(rng):
    """A kernel step that fails at launch (its input carries a failure)
    after steps of its span were launched: the call raises, those steps'
    work is closed by an event of its own, and the device goes on."""
    from pluggable._core import lib

    f = pg.function(lambda a, b: (a * 2.0, (a * 3.0) + b))
    data = rng.standard_normal(4).astype(np.float32)
    other = rng.standard_normal(4).astype(np.float32)
    dev = pg.get_device("MY_DEVICE:0")
    with pg.device("MY_DEVICE:0"):
        a = pg.constant(data)
        f(a, pg.constant(other))
        failed = pg.raw_ops.CheckNumerics(tensor=pg.constant(np.full(4, np.nan, np.float32)),
                                          message="planted upstream")
        with pytest.raises(pg.errors.InvalidArgumentError, match="planted upstream"):
            failed.numpy()
        with pytest.raises(pg.errors.InvalidArgumentError, match="planted upstream"):
            f(a, failed)
        pg.synchronize()
        assert lib.pg_device_unsettled_ops(dev._c) == 0
        twice, total = f(a, pg.constant(other))
        np.testing.assert_array_equal(twice.numpy(), data * 2, err_msg=rng.seed_text)
        np.testing.assert_array_equal(total.numpy(), data * 3 + other, err_msg=rng.seed_text)


def test_placement_soft_fallback_and_log(rng):
    f = pg.function(lambda x: pg.add(x, x) * 3)
    a = rng.integers(-20, 20, 6).astype(np.int8)
    pg.config.placement_log(clear=True)
    pg.config.set_log_device_placement(True)
    try:
        with pg.device("MY_DEVICE:0"):
            x = pg.constant(a)
            with pg.testing.expect_kernel("AddV2", "CPU"):
                out = f(x)
        log = pg.config.placement_log(clear=True)
    finally:
        pg.config.set_log_device_placement(False)
    np.testing.assert_array_equal(out.numpy(), (a + a) * 3)
    graph_records = [r for r in log if "of graph" in r[2]]
    assert ("AddV2", "/job:localhost/replica:0/task:0/device:CPU:0") in [
        r[:2] for r in graph_records]
    assert any("soft placement" in r[2] for r in graph_records)


def test_strict_placement_is_an_error_naming_the_node(rng):
    f = pg.function(lambda x: x + x)
    pg.config.set_soft_device_placement(False)
    try:
        with pg.device("MY_DEVICE:0"), pytest.raises(pg.errors.NotFoundError,
                                                    match="node 'AddV2'"):
            f(pg.constant(np.int8(3)))
    finally:
        pg.config.set_soft_device_placement(True)


def test_concurrent_calls_from_threads(rng):
    f = pg.function(_chain)
    data = [(rng.standard_normal(8).astype(np.float32), rng.uniform(0.1, 1, 8).astype(np.float32))
            for _ in range(4)]
    with pg.device("MY_DEVICE:0"):
        want = [_chain(pg.constant(a), pg.constant(b)).numpy() for a, b in data]
    errors_, results = [], {}

    def work(i):
        try:
            with pg.device("MY_DEVICE:0"):
                for _ in range(20):
                    results[i] = f(pg.constant(data[i][0]), pg.constant(data[i][1])).numpy()
        except Exception as exc:  # noqa: BLE001 - reported below
            errors_.append(exc)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors_
    for i in range(4):
        np.testing.assert_allclose(results[i], want[i], rtol=1e-6)


def test_a_failing_eager_op_of_another_thread_never_fails_a_graph_run(rng):
    """While one thread replays a traced function on MY_DEVICE, another
    launches ops there that fail asynchronously: the function's span holds
    the device's launch lock, so no failing op comes between its kernels and
    every graph output is good, every failing op's value fails."""
    f = pg.function(_chain)
    a = rng.standard_normal(64).astype(np.float32)
    b = rng.uniform(0.1, 1, 64).astype(np.float32)
    with pg.device("MY_DEVICE:0"):
        want = _chain(pg.constant(a), pg.constant(b)).numpy()
        f(pg.constant(a), pg.constant(b))  # traced and planned here
    problems, stop = [], threading.Event()
    counts = {"graph": 0, "failed": 0}

    def replay():
        try:
            with pg.device("MY_DEVICE:0"):
                x, y = pg.constant(a), pg.constant(b)
                while not stop.is_set() and counts["graph"] < 400:
                    outs = [f(x, y) for _ in range(8)]
                    for out in outs:
                        np.testing.assert_allclose(out.numpy(), want, rtol=1e-6)
                    counts["graph"] += len(outs)
        except Exception as exc:  # noqa: BLE001 - reported below
            problems.append(exc)

    def fail():
        bad = np.full(16, np.nan, np.float32)
        try:
            with pg.device("MY_DEVICE:0"):
                while counts["graph"] < 400 and not problems:
                    ys = [pg.raw_ops.CheckNumerics(tensor=pg.constant(bad), message="other thread")
                          for _ in range(4)]
                    for y in ys:
                        with pytest.raises(pg.errors.InvalidArgumentError, match="other thread"):
                            y.numpy()
                        counts["failed"] += 1
        except Exception as exc:  # noqa: BLE001 - reported below
            problems.append(exc)
        finally:
            stop.set()

    threads = [threading.Thread(target=replay), threading.Thread(target=fail)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not problems, problems
    assert counts["graph"] >= 8 and counts["failed"] >= 4, counts


TWO_DEVICES = textwrap.dedent("""
    import numpy as np, pluggable as pg
    rng = np.random.default_rng()
    a = rng.standard_normal((4, 4)).astype(np.float32)

    @pg.function
    def f(x):
        with pg.device("MY_DEVICE:1"):
            y = pg.exp(x)
        with pg.device("MY_DEVICE:0"):
            return pg.matmul(y, x) + 1.0

    with pg.device("MY_DEVICE:0"):
        x = pg.constant(a)
    for _ in range(3):
        out = f(x)
        np.testing.assert_allclose(out.numpy(), np.exp(a) @ a + 1, rtol=1e-5, atol=1e-5)
    assert out.device.endswith("MY_DEVICE:0")
    stats = f.get_concrete_function(x).plan_stats()
    assert stats["fast"] and stats["copy_steps"] == 2, stats
    print("OK")
""")


def test_copies_between_two_devices_are_plan_steps():
    env = dict(os.environ, PLUGGABLE_MY_DEVICE_COUNT="2")
    proc = subprocess.run([sys.executable, "-c", TWO_DEVICES], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith("OK")


BINDING = """
@lib.function(input_signature=(lib.TensorSpec(shape=[None], dtype=lib.int32),))
def collatz(x):
    return lib.where(x % 2 == 0, x // 2, 3 * x + 1)

@lib.function
def power(a, b):
    return a ** b

square = power.get_concrete_function(a=lib.TensorSpec(None, lib.float32), b=2)
calls = [lambda: collatz(lib.constant(ints)), lambda: collatz(lib.constant([ints, ints])),
         lambda: collatz(lib.constant(floats)), lambda: square(lib.constant(floats)),
         lambda: square(lib.constant(floats), b=2), lambda: square(lib.constant(floats), b=3)]
result = []
for call in calls:
    try:
        result.append(("ok", call().numpy()))
    except Exception as exc:
        result.append(("error", type(exc).__name__))
"""


@pytest.mark.parametrize("device", ["CPU:0", "MY_DEVICE:0"])
def test_binding_errors_are_tensorflows(tf_oracle, rng, device):
    inputs = {"ints": rng.integers(1, 50, 4).astype(np.int32),
              "floats": rng.standard_normal(3).astype(np.float32)}
    theirs = tf_oracle.run("lib = tf\n" + BINDING, **inputs)
    scope = {"lib": pg, **inputs}
    kind = device.split(":")[0]
    with pg.device(device), pg.testing.expect_kernel("Pow", kind, min_calls=2):
        exec(BINDING, scope)
    ours = scope["result"]
    assert [r[0] for r in ours] == [r[0] for r in theirs]
    for a, b in zip(ours, theirs):
        if a[0] == "ok":
            np.testing.assert_allclose(a[1], b[1], rtol=1e-6)
        else:
            assert a[1] == b[1]
