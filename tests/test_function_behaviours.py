"""pg.function behaviours that TensorFlow code relies on, checked against
TensorFlow in a child process: run_functions_eagerly, reduce_retracing,
custom_gradient (eager and traced, with variables), py_function (runs at
each call of a graph) and TensorArray (eager and in a traced while loop)."""
from __future__ import annotations

import numpy as np
import pytest

import pluggable as pg
from pluggable.framework import errors


def test_run_functions_eagerly_runs_the_body_at_each_call(rng):
    seen = []

    @pg.function
    def f(x):
        seen.append(float(x.numpy().sum()))     # needs a value: eager only
        return x * 2.0
    x = pg.constant(rng.standard_normal(3).astype(np.float32))
    assert pg.config.functions_run_eagerly() is False
    pg.config.run_functions_eagerly(True)
    try:
        assert pg.config.functions_run_eagerly() is True
        np.testing.assert_allclose(f(x).numpy(), x.numpy() * 2)
        f(x)
        assert len(seen) == 2 and f.tracing_count == 0
    finally:
        pg.config.run_functions_eagerly(False)
    assert pg.config.functions_run_eagerly() is False
    with pytest.raises(errors.InvalidArgumentError, match="no value while the function is traced"):
        f(x)


SIZES = [(3,), (4,), (5,), (2, 3), (2, 4), (7,)]


def test_reduce_retracing_traces_like_tensorflow(tf_oracle):
    theirs = tf_oracle.run("""
counts = []
for reduce in (False, True):
    f = tf.function(lambda x: x * 2.0, reduce_retracing=reduce)
    for shape in sizes:
        f(tf.zeros(shape))
    counts.append(f.experimental_get_tracing_count())
result = counts
""", sizes=SIZES)
    ours = []
    for reduce in (False, True):
        f = pg.function(lambda x: x * 2.0, reduce_retracing=reduce)
        for shape in SIZES:
            np.testing.assert_array_equal(f(pg.zeros(shape)).numpy(), np.zeros(shape))
        ours.append(f.experimental_get_tracing_count())
    assert ours == list(theirs)
    g = pg.function(lambda x: x + 1.0, reduce_retracing=True)
    g(pg.zeros([3]))
    g(pg.zeros([4]))
    spec = g.get_concrete_function(pg.zeros([9])).input_specs[0]
    assert spec.shape == (None,)


CUSTOM = """
@lib.custom_gradient
def log1pexp(x):
    e = lib.exp(x)
    def grad(dy):
        return dy * (1 - 1 / (1 + e))
    return lib.math.log(1 + e), grad

@lib.custom_gradient
def clip_grad(x, y):
    def grad(dy):
        return lib.clip_by_value(dy, -0.5, 0.5), dy * 3.0
    return x * y, grad

v = lib.Variable(w)

@lib.custom_gradient
def scaled(x):
    def grad(dy, variables=None):
        return dy * v, [dy * x * 10.0]
    return x * v, grad

def grads(x, y):
    with lib.GradientTape(persistent=True) as tape:
        tape.watch([x, y])
        a = lib.reduce_sum(log1pexp(x))
        b = lib.reduce_sum(clip_grad(x, y) * 4.0)
        c = lib.reduce_sum(scaled(x))
    return tape.gradient(a, x), tape.gradient(b, [x, y]), tape.gradient(c, [x, v])
"""


def _flat(x):
    if isinstance(x, (list, tuple)):
        return [a for v in x for a in _flat(v)]
    return [x.numpy() if hasattr(x, "numpy") else x]


@pytest.mark.parametrize("traced", [False, True])
def test_custom_gradient_matches_tensorflow(traced, rng, tf_oracle):
    x = rng.standard_normal(4).astype(np.float32) * 3
    y = rng.standard_normal(4).astype(np.float32)
    w = rng.standard_normal(4).astype(np.float32)
    wrap = "lib.function(grads)" if traced else "grads"
    theirs = tf_oracle.run("lib = tf\nlib.clip_by_value = tf.clip_by_value\n" + CUSTOM +
                           f"\nresult = {wrap}(tf.constant(x), tf.constant(y))", x=x, y=y, w=w)
    scope = {"lib": pg, "w": w}
    exec(CUSTOM, scope)
    fn = pg.function(scope["grads"]) if traced else scope["grads"]
    ours = fn(pg.constant(x), pg.constant(y))
    for a, b in zip(_flat(ours), _flat(theirs)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_custom_gradient_that_reads_variables_needs_variables_argument(rng):
    v = pg.Variable(rng.standard_normal(3).astype(np.float32))

    @pg.custom_gradient
    def f(x):
        return x * v, lambda dy: dy
    x = pg.constant(rng.standard_normal(3).astype(np.float32))
    with pg.GradientTape() as tape:
        tape.watch(x)
        with pytest.raises(TypeError, match="'variables' keyword"):
            f(x)


def test_py_function_runs_at_each_call_of_the_graph(rng, tf_oracle):
    calls = []

    def bump(x):
        calls.append(1)
        return x.numpy() + len(calls)

    @pg.function
    def f(x):
        return pg.py_function(bump, [x], pg.float32) * 2.0
    x = rng.standard_normal(3).astype(np.float32)
    with pg.device("MY_DEVICE:0"):
        outs = [f(pg.constant(x)).numpy() for _ in range(3)]
    assert f.tracing_count == 1 and len(calls) == 3
    theirs = tf_oracle.run("""
calls = []
def bump(x):
    calls.append(1)
    return x.numpy() + len(calls)
f = tf.function(lambda x: tf.py_function(bump, [x], tf.float32) * 2.0)
result = [f(tf.constant(x)).numpy() for _ in range(3)]
""", x=x)
    for a, b in zip(outs, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    pair = pg.py_function(lambda a, b: (a + b, a * b), [1.0, 2.0], [pg.float32, pg.float32])
    assert [float(t.numpy()) for t in pair] == [3.0, 2.0]


DECORATED = """
log = []

@lib.py_function(Tout=lib.float32)
def py_plus(x, y):
    log.append("executing eagerly")
    return x + y * 2.0

@lib.function
def wrapper(x, y):
    log.append("tracing")
    return py_plus(x, y)

values = [wrapper(lib.constant(a), lib.constant(b)).numpy() for _ in range(2)]
result = [log, values, py_plus(a, b).numpy()]
"""


@pytest.mark.parametrize("device", ["CPU:0", "MY_DEVICE:0"])
def test_py_function_as_a_decorator(rng, tf_oracle, device):
    a, b = (np.float32(v) for v in rng.standard_normal(2))
    theirs = tf_oracle.run("lib = tf\n" + DECORATED, a=a, b=b)
    scope = {"lib": pg, "a": a, "b": b}
    # (the Python function runs on the host whatever the device scope)
    with pg.device(device), pg.testing.expect_kernel("EagerPyFunc", "CPU", min_calls=2):
        exec(DECORATED, scope)
    ours = scope["result"]
    assert ours[0] == theirs[0]
    np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-6)
    np.testing.assert_allclose(ours[2], theirs[2], rtol=1e-6)
    with pytest.raises(TypeError, match="Tout"):
        pg.py_function(lambda x: x, [1.0])


@pytest.mark.parametrize("exc,cls", [(ValueError, errors.InvalidArgumentError),
                                     (KeyError, errors.UnknownError),
                                     (IndexError, errors.UnknownError),
                                     (StopIteration, errors.OutOfRangeError),
                                     (NotImplementedError, errors.UnimplementedError),
                                     (MemoryError, errors.ResourceExhaustedError)])
def test_py_function_error_in_a_graph_is_typed_as_tensorflow_types_it(exc, cls, tf_oracle):
    def bad(x):
        raise exc("broken input")
    f = pg.function(lambda x: pg.py_function(bad, [x], pg.float32))
    with pytest.raises(cls, match="'bad' raised .*broken input"):
        f(pg.constant(1.0))
    theirs = tf_oracle.run(f"""
def bad(x):
    raise {exc.__name__}("broken input")
try:
    tf.function(lambda x: tf.py_function(bad, [x], tf.float32))(tf.constant(1.0))
    result = None
except Exception as e:
    result = type(e).__name__
""")
    assert theirs == cls.__name__


TENSOR_ARRAY = """
def squares(x, dynamic):
    ta = lib.TensorArray(lib.float32, size=0 if dynamic else n, dynamic_size=dynamic)
    def body(i, ta):
        return i + 1, ta.write(i, lib.gather(x, i) * lib.gather(x, i))
    _, ta = lib.while_loop(lambda i, ta: i < n, body, [lib.constant(0), ta])
    again = lib.TensorArray(lib.float32, size=n).unstack(ta.stack())
    return ta.stack(), ta.read(1), ta.size(), again.read(n - 1)
"""


@pytest.mark.parametrize("traced", [False, True])
@pytest.mark.parametrize("dynamic", [False, True])
def test_tensor_array_matches_tensorflow(traced, dynamic, rng, tf_oracle):
    n = int(rng.integers(2, 7))
    x = rng.standard_normal((n, 3)).astype(np.float32)
    call = "lib.function(squares)" if traced else "squares"
    theirs = tf_oracle.run("lib = tf\n" + TENSOR_ARRAY +
                           f"\nresult = {call}(tf.constant(x), dynamic)", x=x, n=n,
                           dynamic=dynamic)
    scope = {"lib": pg, "n": n}
    exec(TENSOR_ARRAY, scope)
    fn = pg.function(scope["squares"]) if traced else scope["squares"]
    ours = fn(pg.constant(x), dynamic)
    for a, b in zip(_flat(ours), _flat(theirs)):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_tensor_array_bad_use_is_a_typed_error():
    ta = pg.TensorArray(pg.float32, size=2)
    with pytest.raises(errors.OutOfRangeError, match="not resizeable"):
        ta.write(2, 1.0)
    with pytest.raises(errors.InvalidArgumentError, match="holds float32"):
        ta.write(0, pg.constant(np.int32(1)))
    with pytest.raises(errors.InvalidArgumentError, match="not been written"):
        ta.read(0)


INIT_SCOPE = """
class Model(lib.Module):
    def __init__(self):
        self.v = lib.Variable(start)
        self.counter = 0

    @lib.function
    def __call__(self, x):
        if self.counter == 0:
            with lib.init_scope():   # runs eagerly, once, while the body is traced
                self.counter += 1
                self.v.assign_add(step)
        return self.v * x

m = Model()
result = [m(lib.constant(x)).numpy() for x in xs] + [m.v.numpy(), m.counter]
"""


@pytest.mark.parametrize("device", ["CPU:0", "MY_DEVICE:0"])
def test_init_scope_runs_eagerly_once_while_tracing(rng, tf_oracle, device):
    inputs = {"start": float(rng.standard_normal()), "step": float(rng.standard_normal()),
              "xs": [float(v) for v in rng.standard_normal(3)]}
    theirs = tf_oracle.run("lib = tf\n" + INIT_SCOPE, **inputs)
    scope = {"lib": pg, **inputs}
    kind = device.split(":")[0]
    with pg.device(device), pg.testing.expect_kernel("AssignAddVariableOp", kind, min_calls=1):
        exec(INIT_SCOPE, scope)
    np.testing.assert_allclose(scope["result"][:-1], theirs[:-1], rtol=1e-6)
    assert scope["result"][-1] == theirs[-1] == 1


MADE_ONCE = """
class Counter(lib.Module):
    def __init__(self):
        self.v = None

    @lib.function
    def __call__(self, x):
        if self.v is None:
            self.v = lib.Variable(start)
        self.v.assign_add(x)
        return self.v.read_value()

c = Counter()
result = [c(lib.constant(x)).numpy() for x in xs]
"""


@pytest.mark.parametrize("device", ["CPU:0", "MY_DEVICE:0"])
def test_a_variable_made_while_tracing_is_made_once_eagerly(rng, tf_oracle, device):
    """Its initial value is set once, when the first trace makes it, not at
    every call of the graph, as in TensorFlow."""
    inputs = {"start": float(rng.standard_normal()),
              "xs": [np.float32(v) for v in rng.standard_normal(3)]}
    theirs = tf_oracle.run("lib = tf\n" + MADE_ONCE, **inputs)
    scope = {"lib": pg, **inputs}
    kind = device.split(":")[0]
    with pg.device(device), pg.testing.expect_kernel("AssignAddVariableOp", kind, min_calls=3):
        exec(MADE_ONCE, scope)
    np.testing.assert_allclose(scope["result"], theirs, rtol=1e-6)


def test_methods_bind_a_function_per_instance_as_tensorflow(tf_oracle, rng):
    """A pg.function method: its input_signature leaves out self, each
    instance has its own traces and concrete functions, instance.method is
    one object, and the bound function does not keep the instance alive."""
    import gc
    x, w = (np.float32(v) for v in rng.standard_normal(2))
    code = """
class M(tf.Module):
    def __init__(self, w):
        self.v = tf.Variable(w)
    @tf.function(input_signature=[tf.TensorSpec([], tf.float32)])
    def grow(self, x):
        return self.v * x
    @tf.function
    def plain(self, x):
        return self.v + x
a, b = M(w), M(w + 1)
r = [a.grow(x), b.grow(x), a.plain(x), a.plain(tf.constant([x, x])),
     a.grow.get_concrete_function()(x), b.plain.get_concrete_function(tf.constant(x))(x)]
result = r + [np.array(a.grow is a.grow), np.array(a.plain.experimental_get_tracing_count()),
              np.array(b.plain.experimental_get_tracing_count())]
"""
    want = tf_oracle.run(code, x=x, w=w)
    scope = {"tf": pg, "np": np, "x": x, "w": w}
    exec(code, scope)
    got = scope["result"]
    assert len(got) == len(want)
    for g, t in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), t, rtol=1e-6)
    M = scope["M"]
    c = M(w)
    c.grow(x)
    bound = M.__dict__["grow"]._bound
    assert any(r() is c for r, _ in bound.values())
    scope.clear()             # (the class's methods hold the scope as their globals)
    del c
    gc.collect()
    assert not bound, "the bound functions kept their instances alive"


# ------------------------------------------ variables made in a trace, leaks

VARIABLE_RULE = """
result = {}

@tf.function
def makes_one_each_trace(x):
    v = tf.Variable(1.0)
    return v + x

try:
    makes_one_each_trace(1.0)
    result["each_trace"] = "ran"
except ValueError:
    result["each_trace"] = "ValueError"

class Lazy(tf.Module):
    def __init__(self):
        self.v = None
        self.traces = 0

    @tf.function
    def __call__(self, x):
        self.traces += 1
        if self.v is None:
            self.v = tf.Variable(2.0)
        return self.v * x

m = Lazy()
result["lazy"] = [float(m(tf.constant(3.0))), float(m(tf.constant(4.0)))]
result["lazy_traces"] = [m.traces, m.__call__.experimental_get_tracing_count()]

leaked = []

@tf.function
def leaky(a):
    leaked.append(a + 1)
    return a + 2

leaky(tf.constant(1))
try:
    leaked[0].numpy()
    result["numpy"] = "ran"
except AttributeError:
    result["numpy"] = "AttributeError"

@tf.function
def uses_leaked(b):
    return b + leaked[0]

try:
    uses_leaked(tf.constant(2))
    result["out_of_scope"] = "ran"
except TypeError:
    result["out_of_scope"] = "TypeError"
"""


def test_variables_made_in_a_trace_and_leaked_tensors_follow_tensorflow(tf_oracle):
    """Only a function's first trace may make variables (one that did is
    traced again without making any, so a lazily built module traces twice);
    a body that makes one on every trace is a ValueError; a tensor leaked
    from a trace has no numpy() (AttributeError) and is out of scope in
    another function (TypeError)."""
    want = tf_oracle.run(VARIABLE_RULE)
    scope = {"tf": pg}
    exec(VARIABLE_RULE, scope)
    got = scope["result"]
    assert got == want
    assert got["each_trace"] == "ValueError" and got["lazy_traces"] == [2, 2]
