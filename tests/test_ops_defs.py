"""The built-in op definitions against TensorFlow's op registry, list
arguments in the registry and dispatch, and the ``examples`` of every op."""
from __future__ import annotations

import numpy as np
import pytest

import pluggable as pg
from pluggable.framework import dtypes, registry

# Ops that are pluggable's own (TensorFlow has no raw op of that name).
OWN_OPS = {"Gelu", "GeluGrad", "ScaledDotProductAttention",
           "ScaledDotProductAttentionGrad", "LayerNorm", "LayerNormGrad", "BiasGelu",
           "BiasGeluGrad", "MultiTensorApplyAdam"}
# Existing ops defined before the workloads op set: their allowed type lists
# are narrower than TensorFlow's (the reference kernels cover these).
NARROWER_TYPES = {"AddV2", "Sub", "Mul", "RealDiv", "Maximum", "Minimum", "Neg", "Abs", "Exp",
                  "Log", "Sqrt", "Tanh", "Sigmoid", "Relu", "MatMul", "Sum", "Mean", "Max",
                  "Min", "Cast", "Transpose", "Reshape", "Fill", "Identity", "Conv2D",
                  "CheckNumerics", "Softmax"}
# Ops whose complex64/complex128 kernels are not written: their type sets are
# TensorFlow's without the complex types (docs/user-guide.md, "Complex
# tensors", lists them).
NO_COMPLEX = {"AsString", "Bitcast", "DecodeRaw", "FloorDiv", "Round", "Cholesky", "MatrixDeterminant", "MatrixInverse", "MatrixSolve",
              "ResourceApplyAdam", "ResourceApplyGradientDescent", "ResourceApplyKerasMomentum"}
_COMPLEX_ENUMS = {dtypes.complex64.enum, dtypes.complex128.enum}

_DESCRIBE = r'''
from tensorflow.python.framework import op_def_registry
result = {}
for name in names:
    od = op_def_registry.get(name)
    if od is None:
        continue
    arg = lambda a: (a.name, a.type_attr or None, a.number_attr or None,
                     a.type_list_attr or None,
                     None if a.type_attr or a.type_list_attr else int(a.type))
    attrs = {}
    for a in od.attr:
        d = None
        if a.HasField("default_value"):
            w = a.default_value.WhichOneof("value")
            v = a.default_value
            d = (int(v.type) if w == "type" else list(v.list.i) if w == "list"
                 else v.s.decode() if w == "s" else getattr(v, w))
        attrs[a.name] = dict(kind=a.type, types=[int(t) for t in a.allowed_values.list.type],
                             strings=[s.decode() for s in a.allowed_values.list.s],
                             minimum=a.minimum if a.has_minimum else None,
                             has_default=a.HasField("default_value"), default=d)
    result[name] = dict(inputs=[arg(a) for a in od.input_arg],
                        outputs=[arg(a) for a in od.output_arg], attrs=attrs,
                        commutative=od.is_commutative)
'''


@pytest.fixture(scope="module")
def tf_defs(tf_oracle):
    return tf_oracle.run(_DESCRIBE, names=sorted(registry.OPS))


def _builtin_ops():
    return sorted(n for n, op in registry.OPS.items() if op.source == "built-in")


@pytest.mark.parametrize("name", _builtin_ops())
def test_definition_matches_tensorflow(name, tf_defs):
    op = registry.OPS[name]
    if name in OWN_OPS:
        assert name not in tf_defs, f"{name} is marked as pluggable's own but TF defines it"
        return
    tf = tf_defs[name]
    arg = lambda a: (a.name, a.type_attr, a.number_attr, a.type_list_attr,
                     a.dtype.enum if a.dtype else None)
    assert [arg(a) for a in op.inputs] == [tuple(x) for x in tf["inputs"]]
    assert [arg(a) for a in op.outputs] == [tuple(x) for x in tf["outputs"]]
    if name in NARROWER_TYPES:
        return
    assert set(op.attrs) == set(tf["attrs"])
    for attr, want in tf["attrs"].items():
        a = op.attrs[attr]
        assert a.kind == want["kind"], attr
        # the dtypes pluggable has (string and the dtypes.LIMITED types only where the op
        # takes them: CPU ops of strings, uint16 arithmetic, Cast and data movement)
        ours = {d.enum for d in dtypes.ALL} | {
            d.enum for d in (dtypes.string, *dtypes.LIMITED) if d in (a.allowed or ())}
        if name in NO_COMPLEX:
            ours -= _COMPLEX_ENUMS
        if want["types"]:
            assert {d.enum for d in a.allowed} == {t for t in want["types"] if t in ours}, attr
        elif want["strings"]:
            assert set(a.allowed) == set(want["strings"]), attr
        elif a.kind == "type":
            assert a.allowed is None, f"{attr}: TensorFlow allows every type"
        assert a.minimum == want["minimum"], attr
        assert a.has_default == want["has_default"], attr
        if a.has_default:
            got = a.default.enum if a.kind == "type" else \
                list(a.default) if a.kind.startswith("list") else a.default
            assert got == pytest.approx(want["default"]), attr
    assert op.is_commutative == tf["commutative"] or name in ("Maximum", "Minimum")


# ----------------------------------------------------------- list arguments

def test_list_argument_specs_parse():
    op = registry.make_op_def("ListOpSpec", ["values: N * T", "extra: K * int32"],
                              ["out: M * T"], ["N: int >= 1", "K: int >= 0", "M: int",
                                               "T: type"])
    assert [(a.name, a.number_attr) for a in op.inputs] == [("values", "N"), ("extra", "K")]
    assert op.has_list_inputs and op.has_list_outputs
    flat = op.flat_inputs({"N": 2, "K": 1})
    assert [a.name for a in flat] == ["values", "values", "extra"]
    with pytest.raises(registry.OpSpecError, match="int attribute"):
        registry.make_op_def("BadList", ["values: T * T"], [], ["T: type"])
    with pytest.raises(registry.OpSpecError, match="int attribute"):
        registry.make_op_def("BadList", ["values: N * T"], [], ["T: type"])


@pytest.mark.parametrize("device", ["CPU:0"])
def test_list_inputs_infer_and_check_their_length(device, rng):
    a = rng.standard_normal((2, 3)).astype(np.float32)
    b = rng.standard_normal((2, 3)).astype(np.float32)
    with pg.device(device):
        out = pg.raw_ops.AddN(inputs=[a, b])
        np.testing.assert_allclose(out.numpy(), a + b, rtol=1e-6)
        out = pg.raw_ops.AddN(inputs=(pg.constant(a),), N=1)
        np.testing.assert_array_equal(out.numpy(), a)
        with pytest.raises(pg.errors.InvalidArgumentError, match="AddN.*2 elements.*N is 3"):
            pg.raw_ops.AddN(inputs=[a, b], N=3)
        with pytest.raises(TypeError, match="AddN.*list argument"):
            pg.raw_ops.AddN(inputs=pg.constant(a))
        with pytest.raises(pg.errors.InvalidArgumentError, match="ConcatV2.*'N' = 1 must be >= 2"):
            pg.raw_ops.ConcatV2(values=[a], axis=0)
        # values that are not tensors take the first one's dtype, as in TensorFlow
        out = pg.raw_ops.AddN(inputs=[a, b.astype(np.float64)])
        assert out.dtype == pg.float32
        np.testing.assert_allclose(out.numpy(), a + b, rtol=1e-6)
        with pytest.raises(pg.errors.InvalidArgumentError, match="dtype"):
            pg.raw_ops.AddN(inputs=[pg.constant(a), pg.constant(b.astype(np.float64))])


def test_list_outputs_come_back_as_lists(rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    parts = pg.raw_ops.Unpack(value=x, num=3)
    assert isinstance(parts, list) and len(parts) == 3
    for i, p in enumerate(parts):
        np.testing.assert_array_equal(p.numpy(), x[i])
    assert pg.raw_ops.Unpack(value=np.zeros((0, 2), np.float32), num=0) == []
    parts = pg.raw_ops.Split(split_dim=1, value=x, num_split=2)
    np.testing.assert_array_equal(parts[1].numpy(), x[:, 2:])


def test_hooks_see_flattened_list_inputs(rng):
    from pluggable.runtime import hooks
    seen = []

    def wrapper(op, inputs, attrs, run):
        outs = run(op, inputs, attrs)
        seen.append((op.name, len(inputs), attrs.get("N"), len(outs)))
        return outs
    hooks.install(wrapper)
    try:
        a = rng.standard_normal(3).astype(np.float32)
        pg.raw_ops.ConcatV2(values=[a, a, a], axis=0)
        pg.raw_ops.Unpack(value=np.stack([a, a]), num=2)
    finally:
        hooks.uninstall(wrapper)
    assert seen == [("ConcatV2", 4, 3, 1), ("Unpack", 1, None, 2)]


# ------------------------------------------------------------------ examples

def _new_ops():
    # Ops on resource variables take handles, not arrays: their cases make
    # variables (tests/test_variables.py, test_optimizers.py, the kit).
    # Collective ops need a group of devices and have no CPU kernel:
    # tests/test_distribute.py runs them across MY_DEVICE devices.
    return sorted(n for n, op in registry.OPS.items()
                  if op.source == "built-in" and n not in NARROWER_TYPES
                  and not n.startswith("Collective")
                  and not any(a.dtype is dtypes.resource for a in op.inputs))


def test_every_new_op_has_examples():
    missing = [n for n in _new_ops() if registry.OPS[n].examples is None]
    assert not missing, f"ops without an examples function: {missing}"


@pytest.mark.parametrize("name", _new_ops())
def test_examples_run_on_cpu(name, rng):
    op = registry.OPS[name]
    allowed = [a for a in op.attrs.values() if a.kind == "type"]
    # every allowed type of the first type attribute, the others at their default
    first = allowed[0] if allowed else None
    choices = (first.allowed or dtypes.ALL) if first is not None else [None]
    ran = 0
    for t in choices:
        types = {first.name: t} if first is not None else {}
        for inputs, attrs in op.examples(rng, types):
            with pg.device("CPU:0"), pg.testing.expect_kernel(name, "CPU"):
                out = getattr(pg.raw_ops, name)(**inputs, **attrs)
            outs = out if isinstance(out, (list, tuple)) else [out]
            for o in outs:
                # 0-d: a numpy scalar (bytes for a string, as in TensorFlow)
                assert isinstance(o.numpy(), (np.ndarray, np.generic, bytes))
            ran += 1
    assert ran > 0
