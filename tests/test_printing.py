"""What ``print`` and ``repr`` show of tensors, variables, dtypes, shapes and
specs: TensorFlow's text exactly, checked against real TensorFlow in a child
process on fresh random values (``import pluggable as tf`` code prints what
TensorFlow prints)."""
from __future__ import annotations

import numpy as np
import pytest

import pluggable as pg
from pluggable.framework import registry

# One snippet for both frameworks (`lib` is tensorflow or pluggable): the
# texts of eager values, then those a traced function prints of its symbolic
# input.
TEXTS = """
texts = []

def add(x):
    texts.extend([str(x), repr(x), f"{x}"])

for a in arrays:
    add(lib.constant(a))
add(lib.constant(scalar))
add(lib.constant(flag))
add(lib.constant(whole))
add([lib.constant(whole), lib.constant(arrays[0])])
texts.append("{:.3f}|{:>12}".format(lib.constant(scalar), lib.constant(whole)))
texts.append(repr(lib.constant(arrays[0]).numpy()))
texts.append(repr(lib.constant(scalar).numpy()))
texts.append(repr(lib.constant(flag).numpy()))
texts += [repr(lib.float32), str(lib.int64), str(lib.constant(arrays[0]).dtype)]
texts += [repr(lib.constant(arrays[2]).shape), str(lib.constant(arrays[2]).shape)]
texts += [repr(lib.TensorShape([None, 3])), str(lib.TensorShape([None, 3])),
          repr(lib.TensorShape(None)), str(lib.TensorShape(None))]
texts += [repr(lib.TensorSpec([None, 3], lib.float32)),
          repr(lib.TensorSpec([2], lib.int32, name="x")), repr(lib.TensorSpec(None, lib.int64))]
variables = [lib.Variable(arrays[0], name="w"), lib.Variable(scalar), lib.Variable(arrays[1])]
for v in variables:
    add(v)
add(variables)
texts.append(repr(variables[1].numpy()))

@lib.function(input_signature=[lib.TensorSpec([None, 3], lib.float32)])
def traced(x):
    texts.extend([str(x), repr(x), f"{x}", repr(variables[0])])
    return x

traced(lib.constant(np.ones((2, 3), np.float32)))
result = texts
"""


def _inputs(rng) -> dict:
    return {
        "arrays": [rng.standard_normal((2, 3)).astype(np.float32),
                   rng.integers(-1000, 1000, 2000).astype(np.int32),     # summarised
                   rng.integers(-50, 50, (2, 3, 4)).astype(np.int64),
                   (rng.standard_normal(5) * 100).astype(np.float64),
                   rng.standard_normal((3, 1)).astype(np.float16),
                   rng.standard_normal(3) > 0,
                   np.zeros((2, 0), np.float32),
                   rng.standard_normal((40, 40)).astype(np.float32)],  # summarised, multi-line
        "scalar": float(rng.standard_normal()),
        "flag": bool(rng.integers(2)),
        "whole": int(rng.integers(-100, 100)),
    }


def _kernel_device(op: str, device: str) -> str:
    kind = device.split(":")[0]
    return kind if kind == "CPU" or registry.KERNELS.get((op, kind)) else registry.DEFAULT_DEVICE


@pytest.mark.parametrize("device", ["CPU:0", "MY_DEVICE:0"])
def test_texts_are_tensorflows(tf_oracle, rng, device):
    inputs = _inputs(rng)
    theirs = tf_oracle.run("lib = tf\n" + TEXTS, **inputs)
    scope = {"lib": pg, "np": np, **inputs}
    with pg.device(device):
        with pg.testing.expect_kernel("ReadVariableOp", _kernel_device("ReadVariableOp", device)):
            exec(TEXTS, scope)
        assert pg.constant(inputs["arrays"][0]).device.endswith(device)
    ours = scope["result"]
    assert len(ours) == len(theirs)
    for i, (a, b) in enumerate(zip(ours, theirs)):
        assert a == b, f"text {i} differs ({rng.seed_text}):\npluggable:\n{a}\nTensorFlow:\n{b}"


def test_a_scalar_tensor_reads_as_a_numpy_scalar(rng):
    value = np.float32(rng.standard_normal())
    with pg.device("MY_DEVICE:0"):
        t = pg.constant(value)
    got = t.numpy()
    assert isinstance(got, np.float32) and got == value
    assert np.asarray(t).shape == () and np.asarray(t).dtype == np.float32
    a = rng.standard_normal(3).astype(np.float32)
    assert isinstance(pg.constant(a).numpy(), np.ndarray)


ASSIGNS = """
v = lib.Variable(a, name="v")
texts = [repr(v.assign(b)), repr(v.assign_add(b)), repr(v.assign_sub(a)), repr(v),
         repr(v.shape), str(v.assign(a, read_value=False))]
result = texts
"""


@pytest.mark.parametrize("device", ["CPU:0", "MY_DEVICE:0"])
def test_assign_returns_an_unread_variable(tf_oracle, rng, device):
    inputs = {"a": rng.standard_normal(4).astype(np.float32),
              "b": rng.standard_normal(4).astype(np.float32)}
    theirs = tf_oracle.run("lib = tf\n" + ASSIGNS, **inputs)
    scope = {"lib": pg, **inputs}
    with pg.device(device):
        with pg.testing.expect_kernel("AssignAddVariableOp",
                                      _kernel_device("AssignAddVariableOp", device)):
            exec(ASSIGNS, scope)
    assert scope["result"] == theirs


SIGNATURES = """
import re
texts = []

@lib.function
def double(a):
    return a + a

double(lib.constant(whole))
double(lib.constant(scalar))
double(lib.constant(arrays[0]))
texts.append(double.pretty_printed_concrete_signatures())

@lib.function
def power(a, b):
    return a ** b

texts.append(str(power.get_concrete_function(a=lib.TensorSpec(None, lib.float32), b=2)))
v = lib.Variable(scalar)

@lib.function
def nested(x, y=3, *, z=None):
    return {"a": x * v, "b": (x, x + 1), "c": None}

cf = nested.get_concrete_function(lib.TensorSpec([None, 2], lib.float32, name="xx"))
texts.append(str(cf))
texts.append(re.sub(r" at 0x[0-9A-F]+>$", ">", repr(cf)))
result = [re.sub(r"  \\d+: TensorSpec", "  ID: TensorSpec", t) for t in texts]
"""


@pytest.mark.parametrize("device", ["CPU:0", "MY_DEVICE:0"])
def test_concrete_function_signatures_are_tensorflows(tf_oracle, rng, device):
    inputs = _inputs(rng)
    theirs = tf_oracle.run("lib = tf\n" + SIGNATURES, **inputs)
    scope = {"lib": pg, "np": np, **inputs}
    with pg.device(device):
        with pg.testing.expect_kernel("AddV2", _kernel_device("AddV2", device)):
            exec(SIGNATURES, scope)
    for i, (a, b) in enumerate(zip(scope["result"], theirs)):
        assert a == b, f"text {i} differs:\npluggable:\n{a}\nTensorFlow:\n{b}"


STRINGS = """
texts = []

@lib.function
def double(a):
    return a + a

s = lib.constant(word)
many = lib.constant(words)
texts += [str(s), repr(s), str(many), repr(many), repr(s.numpy()), repr(many.numpy())]
texts += [str(double(s)), str(many + "!"), str("<" + s), repr(lib.string), str(lib.string)]
texts.append(str(lib.gather(many, [2, 0])))
texts += [str(lib.reshape(many, [2, 2])), str(lib.reshape(many, [-1, 1]).shape)]
cf = double.get_concrete_function(lib.TensorSpec(shape=[], dtype=lib.string))
texts += [str(cf), str(cf(lib.constant(words[1])))]
texts += [str(lib.constant("\\u00e9t\\u00e9 \\U0001F986")), str(lib.constant([[b"a", b"b"]]).shape)]
result = texts
"""


@pytest.mark.parametrize("device", ["CPU:0", "MY_DEVICE:0"])
def test_string_tensors_are_tensorflows(tf_oracle, rng, device):
    letters = "abcdefghij"
    words = ["".join(rng.choice(list(letters), rng.integers(1, 6))) for _ in range(4)]
    inputs = {"word": words[0], "words": words}
    theirs = tf_oracle.run("lib = tf\n" + STRINGS, **inputs)
    scope = {"lib": pg, **inputs}
    # strings live on the host: the CPU kernels join them, whatever the scope
    with pg.device(device), pg.testing.expect_kernel("Add", "CPU", min_calls=4):
        exec(STRINGS, scope)
    for i, (a, b) in enumerate(zip(scope["result"], theirs)):
        assert a == b, f"text {i} differs:\npluggable:\n{a}\nTensorFlow:\n{b}"


ASSIGN_ERRORS = """
result = []
for v, bad in ((lib.Variable(a), np.concatenate([a, a])), (lib.Variable(a[0], name="w"), a)):
    try:
        v.assign(bad)
    except Exception as e:
        result.append(f"{type(e).__name__}: {e}")
"""


def test_assign_of_another_shape_is_tensorflows_value_error(tf_oracle, rng):
    inputs = {"a": rng.standard_normal(int(rng.integers(1, 5))).astype(np.float32)}
    theirs = tf_oracle.run("lib = tf\n" + ASSIGN_ERRORS, **inputs)
    scope = {"lib": pg, "np": np, **inputs}
    exec(ASSIGN_ERRORS, scope)
    assert scope["result"] == theirs and len(theirs) == 2


FUNCTION_TYPES = """
@lib.function
def double(a):
    return a + a

@lib.function
def power(a, b=2, *, c=None):
    return a ** b

cf = double.get_concrete_function(lib.constant(word))
pf = power.get_concrete_function(lib.TensorSpec([None], lib.float32))
result = [str(cf.function_type), repr(cf.function_type), str(pf.function_type),
          repr(cf.inference_fn(lib.constant(word))), repr(pf(lib.constant(floats)))]
"""


@pytest.mark.parametrize("device", ["CPU:0", "MY_DEVICE:0"])
def test_function_types_are_tensorflows(tf_oracle, rng, device):
    inputs = {"word": "".join(rng.choice(list("xyz"), 3)),   # (whole numbers: exact squares)
              "floats": rng.integers(-50, 50, 3).astype(np.float32)}
    theirs = tf_oracle.run("lib = tf\n" + FUNCTION_TYPES, **inputs)
    scope = {"lib": pg, **inputs}
    with pg.device(device), pg.testing.expect_kernel("Pow", _kernel_device("Pow", device)):
        exec(FUNCTION_TYPES, scope)
    assert scope["result"] == theirs
