"""AutoGraph: Python control flow on tensors inside ``pg.function``.

One program (PROGRAM) is written to a file twice, once importing pluggable and
once TensorFlow as ``tf``, so that both frameworks convert the same source
(AutoGraph reads it with inspect.getsource). Each case runs on fresh random
inputs as a graph on CPU and on MY_DEVICE, eagerly (run_functions_eagerly)
and under TensorFlow 2.21 in a child process; all must agree.
"""
from __future__ import annotations

import importlib.util
import io
import contextlib
import sys

import numpy as np
import pytest

import pluggable as pg
from pluggable import errors

PROGRAM = '''
import numpy as np
import {module} as tf


@tf.function
def if_tensor(x):
    if tf.reduce_sum(x) > 0:
        y = x * 2.0
    else:
        y = -x
    return y


@tf.function
def elif_chain(x):
    s = tf.reduce_sum(x)
    if s > 1.0:
        y = x + 1.0
    elif s > -1.0:
        y = x * 0.0
    else:
        y = x - 1.0
    return y


@tf.function
def while_tensor(x):
    while tf.reduce_sum(x) > 1.0:
        x = tf.tanh(x)
    return x


@tf.function
def for_range(x, n):
    s = tf.zeros_like(x)
    for i in tf.range(n):
        s = s + x * tf.cast(i, tf.float32)
    return s


@tf.function
def break_continue(x, n):
    total = tf.constant(0.0)
    for i in tf.range(n):
        if i % 2 == 0:
            continue
        if total > 3.0:
            break
        total += tf.reduce_sum(x * x) / tf.cast(i, tf.float32)
    return total


@tf.function
def early_return(x):
    if tf.reduce_mean(x) > 0:
        return x * 3.0
    return x - 3.0


@tf.function
def rows(x):
    total = tf.constant(0.0)
    for row in x:
        total += tf.reduce_max(row)
    return total


def clip_step(v):
    if tf.reduce_max(v) > 1.0:
        v = v / tf.reduce_max(v)
    return v


@tf.function
def nested_call(x, n):
    for _ in tf.range(n):
        x = clip_step(x * 1.5)
    return x


@tf.function
def logical(x):
    s = tf.reduce_sum(x)
    if s > 0 and not tf.reduce_max(x) > 2.0 or s < -2.0:
        r = x + 10.0
    else:
        r = x - 10.0
    return r


@tf.function
def defined_in_loop(x, n):
    for i in tf.range(n):
        z = x * tf.cast(i, tf.float32)
    return z


@tf.function
def tensor_array(x):
    states = tf.TensorArray(tf.float32, size=x.shape[0])
    state = tf.zeros_like(x[0])
    for i in tf.range(x.shape[0]):
        state = state + x[i]
        states = states.write(i, state)
    return states.stack()


@tf.function
def python_loop_tensor_if(x):
    for k in range(3):
        if tf.reduce_sum(x) > float(k):
            x = x - 1.0
    return x


@tf.function
def while_break(x):
    i = tf.constant(0)
    while i < 100:
        x = x * 1.1
        if tf.reduce_max(x) > 4.0:
            break
        i += 1
    return x, i


@tf.function
def nested_break(x, n):
    total = tf.constant(0.0)
    for i in tf.range(n):
        for j in tf.range(n):
            if j > i:
                break
            total += x[0] * tf.cast(j, tf.float32)
    return total


@tf.function
def try_break(x, n):
    i = tf.constant(0)
    s = tf.constant(0.0)
    while i < n:
        i += 1
        try:
            if tf.cast(i, tf.float32) > x[1] * 4.0 + 4.0:
                break
        except ValueError:
            pass
        s += x[0]
    return s, i


@tf.function
def conditional_expression(x):
    return x * 2.0 if tf.reduce_sum(x) > 0 else -x


def make_inputs(name, rng):
    x = rng.uniform(-1.0, 1.0, 5).astype(np.float32)
    n = np.int32(rng.integers(3, 9))
    if name in ("while_tensor",):
        return [rng.uniform(0.2, 1.0, 5).astype(np.float32)]
    if name in ("for_range", "break_continue", "nested_call", "defined_in_loop",
                "nested_break", "try_break"):
        return [x, n]
    if name in ("rows", "tensor_array"):
        return [rng.uniform(-1.0, 1.0, (int(n), 3)).astype(np.float32)]
    if name == "while_break":
        return [rng.uniform(0.5, 1.0, 4).astype(np.float32)]
    return [x]
'''

CASES = ["if_tensor", "elif_chain", "while_tensor", "for_range", "break_continue",
         "early_return", "rows", "nested_call", "logical", "defined_in_loop", "tensor_array",
         "python_loop_tensor_if", "while_break", "nested_break", "try_break",
         "conditional_expression"]


# A kernel each case runs on its device whatever the inputs (the check that
# the graph ran there, not on a fallback).
KERNEL = {"if_tensor": "Sum", "early_return": "Mean", "logical": "Sum",
          "python_loop_tensor_if": "Sum", "while_tensor": "Tanh", "elif_chain": "Sum",
          "conditional_expression": "Sum"}


def _load(tmp_dir, module: str):
    path = tmp_dir / f"autograph_program_{module}.py"
    path.write_text(PROGRAM.format(module=module))
    return path


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    d = tmp_path_factory.mktemp("autograph")
    path = _load(d, "pluggable")
    spec = importlib.util.spec_from_file_location("autograph_program", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod, _load(d, "tensorflow")


def _tf_result(tf_oracle, tf_path, name, inputs):
    code = ("import runpy\n"
            f"ns = runpy.run_path({str(tf_path)!r})\n"
            f"out = ns[{name!r}](*[tf.constant(a) for a in inputs])\n"
            "result = [t.numpy() for t in out] if isinstance(out, tuple) else out.numpy()\n")
    return tf_oracle.run(code, inputs=inputs)


def _as_list(out):
    return list(out) if isinstance(out, (list, tuple)) else [out]


@pytest.mark.parametrize("device", ["CPU", "MY_DEVICE"])
@pytest.mark.parametrize("name", CASES)
def test_construct_matches_eager_and_tensorflow(program, tf_oracle, rng, name, device):
    mod, tf_path = program
    inputs = mod.make_inputs(name, rng)
    fn = getattr(mod, name)
    with pg.device(f"{device}:0"):
        args = [pg.constant(a) for a in inputs]
        with pg.testing.expect_kernel(KERNEL.get(name, "AddV2"), device):
            graph = [t.numpy() for t in _as_list(fn(*args))]
        pg.config.run_functions_eagerly(True)
        try:
            eager = [t.numpy() for t in _as_list(fn(*args))]
        finally:
            pg.config.run_functions_eagerly(False)
    expected = [np.asarray(t) for t in _as_list(_tf_result(tf_oracle, tf_path, name, inputs))]
    assert len(graph) == len(expected) == len(eager)
    for g, e, t in zip(graph, eager, expected):
        np.testing.assert_allclose(g, t, rtol=1e-5, atol=1e-6, err_msg=f"{name}: graph vs TF "
                                   f"({rng.seed_text})")
        np.testing.assert_allclose(e, t, rtol=1e-5, atol=1e-6, err_msg=f"{name}: eager vs TF")


def _ops(cf) -> list[str]:
    return [n.op for n in cf.graph.nodes]


def test_a_converted_loop_is_one_while_node_not_unrolled(program, rng):
    mod, _ = program
    x = pg.constant(rng.uniform(-1, 1, 5).astype(np.float32))
    for_range = pg.function(mod.for_range.python_function)
    for n in (3, 7):
        cf = for_range.get_concrete_function(x, pg.constant(np.int32(n)))
        ops = _ops(cf)
        assert ops.count("StatelessWhile") == 1, ops
        assert ops.count("Mul") == 0, ops          # the body lives in the loop's function
        body = cf.graph.library[next(n.attrs["body"] for n in cf.graph.nodes
                                     if n.op == "StatelessWhile")]
        assert [n.op for n in body.nodes].count("Mul") == 1
    assert for_range.tracing_count == 1       # a tensor n: one trace for every n
    cf = mod.if_tensor.get_concrete_function(x)
    assert _ops(cf).count("StatelessIf") == 1


def test_python_bool_condition_stays_python():
    @pg.function
    def f(x, flag):
        if flag:
            x = x + 1.0
        else:
            x = x - 1.0
        return x
    x = pg.constant(np.float32(2.0))
    assert float(f(x, True).numpy()) == 3.0 and float(f(x, False).numpy()) == 1.0
    ops = _ops(f.get_concrete_function(x, True))
    assert "StatelessIf" not in ops and "If" not in ops


def test_python_range_loop_is_unrolled_as_in_tensorflow():
    @pg.function
    def f(x):
        for _ in range(4):
            x = x * 2.0
        return x
    x = pg.constant(np.float32(1.5))
    assert float(f(x).numpy()) == 24.0
    ops = _ops(f.get_concrete_function(x))
    assert ops.count("Mul") == 4 and "StatelessWhile" not in ops


def test_autograph_false_keeps_python_semantics():
    def relu(x):
        if x > 0:
            return x
        return 0 * x
    f = pg.function(relu, autograph=False)
    with pytest.raises(errors.InvalidArgumentError, match="Python bool"):
        f(pg.constant(1.0))
    assert float(pg.function(relu)(pg.constant(-2.0)).numpy()) == 0.0


def test_to_code_shows_the_converted_source(program):
    mod, _ = program
    code = pg.autograph.to_code(mod.if_tensor)
    assert code.startswith("def if_tensor(x):")
    assert "ag__.if_stmt(" in code and "def if_body():" in code and "def else_body():" in code
    assert "nonlocal y" in code
    loop = pg.autograph.to_code(mod.break_continue.python_function)
    assert "ag__.for_stmt(" in loop and "break_ = True" in loop and "continue_ = True" in loop
    compile(loop, "<to_code>", "exec")   # valid Python


def test_conversion_happens_once_per_function(program, rng):
    from pluggable.autograph import api
    mod, _ = program
    code = mod.clip_step.__code__
    first = api._cache.get(code)
    mod.nested_call.get_concrete_function(pg.constant(rng.uniform(-1, 1, 3).astype(np.float32)),
                                          pg.constant(np.int32(2)))
    assert api._cache[code] is (first or api._cache[code])
    assert api.convert(mod.clip_step).__code__ is api._cache[code][0]


def test_do_not_convert_runs_the_function_as_written():
    @pg.autograph.experimental.do_not_convert
    def helper(x):
        if x > 0:
            return x
        return -x

    @pg.function
    def f(x):
        return helper(x)
    with pytest.raises(errors.InvalidArgumentError, match="Python bool"):
        f(pg.constant(1.0))


def test_library_code_is_not_converted():
    from pluggable.autograph import api
    assert api.convertible(pg.nn.relu) is None
    assert api.convertible(np.sum) is None
    assert api.convertible(contextlib.redirect_stdout) is None


def test_undefined_before_loop_names_the_variable_and_line():
    @pg.function
    def f(x):
        for i in pg.range(3):
            y = y + x  # noqa: F821
        return y
    line = f.python_function.__code__.co_firstlineno + 2      # (the decorator, def, for)
    with pytest.raises(errors.InvalidArgumentError, match=f"'y' must be defined before the "
                       f"for loop at line {line}:"):
        f(pg.constant(1))


def test_variable_set_in_one_branch_only():
    @pg.function
    def f(x):
        if x > 0:
            y = x
        return y
    with pytest.raises(errors.InvalidArgumentError,
                       match="'y' must also be initialized in the else branch"):
        f(pg.constant(1))

    @pg.function
    def g(x):
        if x > 0:
            return x
    with pytest.raises(errors.InvalidArgumentError,
                       match="the else branch must also have a return statement"):
        g(pg.constant(1))


def test_dtype_change_in_a_branch_is_a_type_error():
    @pg.function
    def f(x):
        if x > 0:
            y = 1
        else:
            y = 2.0
        return y
    with pytest.raises(TypeError, match="'y' has dtype int32 in the main branch, but dtype "
                       "float32 in the else branch"):
        f(pg.constant(1))


def test_return_inside_a_graph_loop_is_unimplemented():
    @pg.function
    def f(n):
        for i in pg.range(n):
            if i > 2:
                return i
        return -1
    with pytest.raises(errors.UnimplementedError, match="return statement cannot be placed "
                       "inside the for loop at line"):
        f(pg.constant(5))


def test_generator_is_left_unconverted_with_a_warning(caplog):
    @pg.function
    def f(x):
        def g():
            yield x
        return pg.add_n(list(g()))
    assert int(f(pg.constant(5)).numpy()) == 5
    with pytest.raises(pg.autograph.ConversionError, match="yield"):
        def gen(x):
            yield x
        pg.autograph.to_code(gen)


def test_print_runs_at_each_call_inside_converted_control_flow(capfd):
    @pg.function
    def f(n):
        for i in pg.range(n):
            if i % 2 == 0:
                pg.print("even", i)
        return n
    f(pg.constant(4))
    f(pg.constant(3))
    err = capfd.readouterr().err
    assert err.splitlines() == ["even 0", "even 2", "even 0", "even 2"]


def test_method_and_variable_updates_in_loops():
    class Counter(pg.Module):
        def __init__(self):
            super().__init__()
            self.v = pg.Variable(0.0)

        @pg.function
        def __call__(self, n):
            for i in pg.range(n):
                if i % 3 == 0:
                    self.v.assign_add(1.0)
            return self.v.read_value()
    c = Counter()
    assert float(c(pg.constant(7)).numpy()) == 3.0      # i = 0, 3, 6
    assert float(c(pg.constant(4)).numpy()) == 5.0      # i = 0, 3


def test_recursion_on_python_values_calls_the_function_itself(capsys):
    @pg.function
    def countdown(n):
        if n > 0:
            print("tracing")
            return countdown(n - 1)
        return 1
    assert int(countdown(4).numpy()) == 1
    assert capsys.readouterr().out.count("tracing") == 4


_flag = None


def test_a_global_set_in_a_tensor_branch_is_carried():
    @pg.function
    def f(x):
        global _flag
        if x > 0:
            _flag = x * 2.0
        else:
            _flag = x
        return _flag
    assert float(f(pg.constant(3.0)).numpy()) == 6.0
    assert float(f(pg.constant(-3.0)).numpy()) == -3.0


def test_methods_keep_private_names_and_super():
    class Base(pg.Module):
        def scale(self):
            return 3.0

    class Scaled(Base):
        def __init__(self):
            super().__init__()
            self.__offset = 1.0

        @pg.function
        def __call__(self, x):
            if pg.reduce_sum(x) > 0:
                x = x * super().scale()
            return x + self.__offset
    m = Scaled()
    x = np.array([1.0, 2.0], np.float32)
    np.testing.assert_allclose(m(pg.constant(x)).numpy(), x * 3.0 + 1.0)
    np.testing.assert_allclose(m(pg.constant(-x)).numpy(), -x + 1.0)


def test_run_functions_eagerly_runs_the_python_body(capsys):
    @pg.function
    def f(x):
        if x > 0:
            print("positive", float(x.numpy()))
            x = x - 1.0
        return x
    pg.config.run_functions_eagerly(True)
    try:
        assert float(f(pg.constant(2.0)).numpy()) == 1.0
        assert float(f(pg.constant(5.0)).numpy()) == 4.0
    finally:
        pg.config.run_functions_eagerly(False)
    assert capsys.readouterr().out.splitlines() == ["positive 2.0", "positive 5.0"]


def test_tensor_break_in_a_python_loop_is_unimplemented():
    @pg.function
    def f(x):
        for k in [1, 2, 3]:
            if x > k:
                break
            x = x + 1
        return x
    with pytest.raises(errors.UnimplementedError, match=r"the for loop at line \d+ iterates a "
                       r"Python value \(list\) but a break or return in it depends on a tensor"):
        f(pg.constant(0))


def test_a_shape_that_changes_in_a_graph_loop_names_the_variable():
    @pg.function
    def f(x):
        for _ in pg.range(3):
            x = pg.concat([x, x], 0)
        return x
    with pytest.raises(errors.InvalidArgumentError, match=r"'x' has shape \(1,\) before the for "
                       r"loop at line \d+, but shape \(2,\) after one iteration"):
        f(pg.constant([1]))


def test_for_over_a_dataset_of_known_size(rng):
    data = rng.uniform(-1, 1, (6, 2)).astype(np.float32)
    ds = pg.data.Dataset.from_tensor_slices(data)

    @pg.function
    def total(d):
        s = pg.constant(0.0)
        for row in d:
            if pg.reduce_sum(row) > 0:       # a tensor condition inside the Python loop
                s += pg.reduce_sum(row)
        return s
    expected = sum(float(r.sum()) for r in data if r.sum() > 0)
    np.testing.assert_allclose(float(total(ds).numpy()), expected, rtol=1e-5)


def test_for_over_a_dataset_of_unknown_size_is_one_graph_loop(rng):
    pairs = [(int(a), int(b)) for a, b in rng.integers(-9, 9, (5, 2))]
    ds = pg.data.Dataset.from_generator(lambda: pairs, (pg.int32, pg.int32))

    @pg.function
    def train(d):
        loss = pg.constant(0)
        for x, y in d:
            loss += pg.abs(y - x)
        return loss
    expected = sum(abs(b - a) for a, b in pairs)
    assert int(train(ds).numpy()) == expected
    assert int(train(ds).numpy()) == expected        # a fresh iterator at each call
    ops = [n.op for n in train.get_concrete_function(ds).graph.nodes]
    assert ops.count("While") == 1, ops

    @pg.function
    def first_above(d, limit):
        out = pg.constant(-1, pg.int64)
        for v in d:
            if v > limit:
                out = v
                break
        return out
    big = pg.data.Dataset.range(10 ** 6)            # too large to unroll: a graph loop
    limit = int(rng.integers(10, 50))
    assert int(first_above(big, pg.constant(limit, pg.int64)).numpy()) == limit + 1
    endless = pg.data.Dataset.from_tensor_slices(np.array([[1, 2]], np.int32)).repeat()
    with pytest.raises(errors.UnimplementedError, match="infinite"):
        train(endless.map(lambda v: (v[0], v[1])))   # no break: it would never end


def test_a_called_module_is_converted_too(rng):
    class Clip(pg.Module):
        def __call__(self, x):
            while pg.reduce_max(pg.abs(x)) > 1.0:
                x = x / 2.0
            return x

    clip = Clip()

    @pg.function
    def f(x):
        return clip(x) + 0.0
    x = rng.uniform(-8, 8, 4).astype(np.float32)
    expected = x.copy()
    while np.abs(expected).max() > 1.0:
        expected = expected / 2.0
    np.testing.assert_allclose(f(pg.constant(x)).numpy(), expected, rtol=1e-6)
    assert "StatelessWhile" in _ops(f.get_concrete_function(pg.constant(x)))
