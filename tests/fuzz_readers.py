"""A seeded, hand-rolled mutator for the readers of untrusted files: the
GraphDef importer, the ONNX importer and the checkpoint reader. Run as a
child process (``python fuzz_readers.py graphdef|onnx|checkpoint SEED CASES``); it prints one
JSON line: how many cases ran, and every case that raised something other
than a pluggable error (the case number, the mutation and the exception),
so a crash shows as the child's exit status and a hang as its timeout."""
from __future__ import annotations

import json
import os
import pathlib
import random
import sys
import tempfile
import traceback

import numpy as np

import pluggable as pg
from pluggable.framework import proto

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from graph_defs import GraphBuilder  # noqa: E402

BAD_INPUTS = ["x:abc", "x:-1", "x:99", "x:1:2:3", "^ghost", "", ":", "x::0", "x:0x1",
              "x:" + "9" * 40, "^", "ghost:0", "x:\u0661"]
OPS = ["Const", "Placeholder", "Identity", "Neg", "AddV2", "MatMul", "Relu", "Sum",
       "StatelessWhile", "While", "StatelessIf", "If", "PartitionedCall", "Reshape",
       "Fill", "Cast", "NoSuchOp", ""]


# ------------------------------------------------------------- GraphDef bases

def _bases() -> list:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((6, 3)).astype(np.float32)
    wt = pg.constant(w)

    @pg.function
    def model(x, scale):
        h = pg.nn.relu(pg.matmul(x, wt) + 1.0)
        return pg.reduce_sum(h, axis=1) * scale, h

    @pg.function
    def loop(n):
        def body(i, acc):
            return i + 1, pg.cond(i > 2, lambda: acc * 2.0, lambda: acc + 1.0)
        return pg.while_loop(lambda i, acc: i < n, body, [pg.constant(0), pg.constant(1.0)])

    out = [model.get_concrete_function(pg.TensorSpec([None, 6]), pg.TensorSpec([]))
           .graph.as_graph_def(),
           loop.get_concrete_function(pg.TensorSpec([], pg.int32)).graph.as_graph_def()]
    b = GraphBuilder()
    b.placeholder("x", np.float32, [2, 2])
    b.const("c", np.arange(4, dtype=np.float32).reshape(2, 2))
    b.node("y", "AddV2", ["x", "c"], T=pg.float32)
    b.node("z", "Neg", ["y"], T=pg.float32)
    out.append(b.graph)
    return [proto.encode(g) for g in out]


def _random_attr(r: random.Random):
    av = proto.AttrValue()
    k = r.randrange(9)
    if k == 0:
        av.i = r.choice([0, -1, 2**62, 7])
    elif k == 1:
        av.s = r.choice([b"", b"\xff\xfe", b"float", b"x" * 100])
    elif k == 2:
        av.type = r.choice([0, 1, 3, 7, 20, 101, 999])
    elif k == 3:
        av.shape.dim.add(size=r.choice([-1, 0, 10**12, 2**62]))
        av.shape.dim.add(size=r.choice([1, 10**9]))
    elif k == 4:                       # a fill: one value, a huge declared shape
        av.tensor.dtype = r.choice([1, 2, 3, 9, 10])
        for _ in range(r.randrange(1, 4)):
            av.tensor.tensor_shape.dim.add(size=r.choice([10**5, 10**6, 2**31, 3]))
        av.tensor.float_val.append(1.0)
        av.tensor.int_val.append(1)
    elif k == 5:
        av.list.SetInParent()
        av.list.i.extend([r.randrange(-3, 10) for _ in range(r.randrange(4))])
    elif k == 6:
        av.func.name = r.choice(["ghost", "", "f0"])
    elif k == 7:
        av.b = True
    else:
        av.list.type.extend([r.choice([1, 3, 999])])
    return av


def _nest(gd, r: random.Random) -> None:
    """Adds a chain of functions calling each other (deep, or a cycle)."""
    depth = r.choice([2, 70, 300])
    cycle = r.random() < 0.5
    for i in range(depth):
        fd = gd.library.function.add()
        fd.signature.name = f"f{i}"
        fd.signature.input_arg.add(name="a", type=1)
        fd.signature.output_arg.add(name="o", type=1)
        callee = "f0" if (cycle and i == depth - 1) else f"f{i + 1}"
        if i == depth - 1 and not cycle:
            fd.ret["o"] = "a"
            continue
        n = fd.node_def.add(name="call", op="PartitionedCall", input=["a"])
        n.attr["f"].func.name = callee
        n.attr["Tin"].list.type.append(1)
        n.attr["Tout"].list.type.append(1)
        fd.ret["o"] = "call:output:0"
    n = gd.node.add(name="top_call", op="PartitionedCall", input=[gd.node[0].name])
    n.attr["f"].func.name = "f0"
    n.attr["Tin"].list.type.append(1)
    n.attr["Tout"].list.type.append(1)


def mutate_graphdef(data: bytes, r: random.Random) -> tuple[bytes, str]:
    if r.random() < 0.15:                          # raw bytes
        b = bytearray(data)
        for _ in range(r.randrange(1, 6)):
            b[r.randrange(len(b))] = r.randrange(256)
        return bytes(b), "bytes"
    gd = proto.decode(proto.GraphDef, data)
    what = []
    for _ in range(r.randrange(1, 4)):
        k = r.randrange(9)
        nodes = list(gd.node) + [n for f in gd.library.function for n in f.node_def]
        n = r.choice(nodes)
        if k == 0:
            n.op = r.choice(OPS)
            what.append(f"op {n.name}={n.op}")
        elif k == 1:
            if n.input:
                n.input[r.randrange(len(n.input))] = r.choice(BAD_INPUTS)
            else:
                n.input.append(r.choice(BAD_INPUTS))
            what.append(f"input {n.name}")
        elif k == 2 and n.attr:
            key = r.choice(sorted(n.attr))
            n.attr[key].CopyFrom(_random_attr(r))
            what.append(f"attr {n.name}.{key}")
        elif k == 3 and n.attr:
            key = r.choice(sorted(n.attr))
            del n.attr[key]
            what.append(f"del {n.name}.{key}")
        elif k == 4:
            n.attr[r.choice(["value", "shape", "dtype", "T", "cond", "body", "f"])] \
                .CopyFrom(_random_attr(r))
            what.append(f"add attr {n.name}")
        elif k == 5:
            gd.node.add().CopyFrom(n)
            what.append(f"dup {n.name}")
        elif k == 6:
            _nest(gd, r)
            what.append("nest")
        elif k == 7 and gd.library.function:
            f = r.choice(list(gd.library.function))
            if f.signature.output_arg:
                f.ret[f.signature.output_arg[0].name] = r.choice(BAD_INPUTS + ["a"])
            what.append(f"ret {f.signature.name}")
        else:
            n.name = r.choice(["", n.name + "x", "x"])
            what.append("rename")
    return proto.encode(gd), "; ".join(what)


def fuzz_graphdef(seed: int, cases: int) -> dict:
    bases = _bases()
    r = random.Random(seed)

    def case(_n):
        data, what = mutate_graphdef(r.choice(bases), r)
        return what, lambda: pg.graph_util.import_graph_def(data)
    return _tally(cases, case)


def _tally(cases: int, case) -> dict:
    """Runs `cases` cases: case(n) gives (what was mutated, the read to try).
    Counts reads that succeed, that raise a pluggable error, and keeps the
    others (the bugs) with their traceback."""
    untyped, typed, ok = [], 0, 0
    for n in range(cases):
        what, read = case(n)
        try:
            read()
            ok += 1
        except pg.errors.PluggableError:
            typed += 1
        except Exception as exc:  # noqa: BLE001 - what the fuzzer looks for
            untyped.append({"case": n, "what": what, "error": repr(exc)[:300],
                            "where": traceback.format_exc(limit=-2)[-600:]})
    return {"cases": cases, "ok": ok, "typed": typed, "untyped": untyped[:20],
            "n_untyped": len(untyped)}


# ------------------------------------------------------------- ONNX models

ONNX_OPS = ["Add", "MatMul", "Relu", "Gemm", "Conv", "MaxPool", "Reshape", "Slice", "Gather",
            "Concat", "Transpose", "ReduceSum", "Softmax", "Cast", "Split", "Pad", "Clip",
            "Identity", "Constant", "If", "Loop", "NoSuchOp", ""]


def _onnx_bases() -> list:
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    f32 = TensorProto.FLOAT
    init = lambda name, a: numpy_helper.from_array(np.asarray(a), name)  # noqa: E731
    mlp = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["s"]),
         helper.make_node("Relu", ["s"], ["y"])], "mlp",
        [helper.make_tensor_value_info("x", f32, ["batch", 4])],
        [helper.make_tensor_value_info("y", f32, ["batch", 3])],
        [init("w", rng.standard_normal((4, 3)).astype(np.float32)),
         init("b", np.zeros(3, np.float32))])
    conv = helper.make_graph(
        [helper.make_node("Conv", ["x", "k"], ["c"], pads=[1, 1, 1, 1], group=1),
         helper.make_node("MaxPool", ["c"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
         helper.make_node("Reshape", ["p", "shape"], ["y"])], "conv",
        [helper.make_tensor_value_info("x", f32, [1, 2, 4, 4])],
        [helper.make_tensor_value_info("y", f32, [1, -1])],
        [init("k", rng.standard_normal((3, 2, 3, 3)).astype(np.float32)),
         init("shape", np.array([1, -1], np.int64))])
    shapes = helper.make_graph(
        [helper.make_node("Slice", ["x", "starts", "ends", "axes"], ["s"]),
         helper.make_node("Gather", ["s", "idx"], ["g"], axis=1),
         helper.make_node("ReduceSum", ["g", "axes"], ["r"], keepdims=1),
         helper.make_node("Softmax", ["r"], ["y"], axis=-1)], "shapes",
        [helper.make_tensor_value_info("x", f32, [3, 5])],
        [helper.make_tensor_value_info("y", f32, None)],
        [init("starts", np.array([1], np.int64)), init("ends", np.array([3], np.int64)),
         init("axes", np.array([0], np.int64)), init("idx", np.array([0, 2, 4], np.int64))])
    return [helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
            for g in (mlp, conv, shapes)]


def _random_onnx_attr(r: random.Random, name: str):
    from onnx import helper
    k = r.randrange(7)
    value = [lambda: r.choice([-1, 0, 1, 3, 2**31, -2**63]),
             lambda: r.choice([0.5, float("nan"), -1e30]),
             lambda: r.choice(["", "SAME_UPPER", "x" * 50, "\0"]),
             lambda: [r.randrange(-3, 5) for _ in range(r.randrange(1, 6))],
             lambda: [r.random() for _ in range(r.randrange(1, 4))],
             lambda: [r.choice(["a", ""]) for _ in range(r.randrange(1, 3))],
             lambda: r.choice([2**40, -5])][k]()
    return helper.make_attribute(name, value)


def mutate_onnx(data: bytes, r: random.Random) -> tuple[bytes, str]:
    import onnx
    if r.random() < 0.15:                          # raw bytes
        b = bytearray(data)
        for _ in range(r.randrange(1, 6)):
            b[r.randrange(len(b))] = r.randrange(256)
        return bytes(b[: len(b) - r.randrange(3)]), "bytes"
    m = onnx.ModelProto.FromString(data)
    g, what = m.graph, []
    for _ in range(r.randrange(1, 4)):
        k = r.randrange(10)
        n = r.choice(list(g.node))
        if k == 0:
            n.op_type = r.choice(ONNX_OPS)
            what.append(f"op {n.name}={n.op_type}")
        elif k == 1:
            if n.input and r.random() < 0.7:
                n.input[r.randrange(len(n.input))] = r.choice(["", "ghost", "y", "x", *n.output[:1]])
            else:
                n.input.append(r.choice(["", "ghost", "x"]))
            what.append("input")
        elif k == 2:
            name = r.choice([a.name for a in n.attribute] + ["axis", "axes", "pads", "kernel_shape",
                                                              "perm", "to", "group", "then_branch"])
            keep = [a for a in n.attribute if a.name != name]
            del n.attribute[:]
            n.attribute.extend(keep + [_random_onnx_attr(r, name)])
            what.append(f"attr {name}")
        elif k == 3 and g.initializer:
            t = r.choice(list(g.initializer))
            j = r.randrange(4)
            if j == 0 and t.dims:
                t.dims[r.randrange(len(t.dims))] = r.choice([0, -1, 7, 2**40])
            elif j == 1:
                t.data_type = r.randrange(30)
            elif j == 2:
                t.raw_data = t.raw_data[: r.randrange(len(t.raw_data) + 1)]
            else:
                t.data_location = 1
                e = t.external_data.add()
                e.key, e.value = "location", r.choice(["../../etc/passwd", "/dev/zero", "w.bin"])
            what.append(f"initializer {t.name}")
        elif k == 4:
            g.node.add().CopyFrom(n)
            what.append("dup")
        elif k == 5 and len(g.node) > 1:
            del g.node[r.randrange(len(g.node))]
            what.append("del node")
        elif k == 6:
            m.opset_import[0].version = r.choice([1, 6, 13, 99, -1])
            what.append("opset")
        elif k == 7:
            vi = r.choice(list(g.input) + list(g.output))
            dims = vi.type.tensor_type.shape.dim
            if dims:
                d = dims[r.randrange(len(dims))]
                d.dim_value = r.choice([0, 1, 2**40]) if r.random() < 0.7 else 0
            vi.type.tensor_type.elem_type = r.choice([1, 1, 7, 0, 999])
            what.append(f"value info {vi.name}")
        elif k == 8:
            n.domain = r.choice(["", "acme", "com.microsoft", "ai.onnx.ml"])
            what.append(f"domain {n.domain}")
        else:
            del n.output[:]
            n.output.extend(r.choice([[], ["y"], ["x"], ["a", "a"]]))
            what.append("outputs")
    return m.SerializeToString(), "; ".join(what)


def fuzz_onnx(seed: int, cases: int) -> dict:
    bases = _onnx_bases()
    r = random.Random(seed)
    rng = np.random.default_rng(seed)
    feeds = [{"x": rng.standard_normal((2, 4)).astype(np.float32)},
             {"x": rng.standard_normal((1, 2, 4, 4)).astype(np.float32)},
             {"x": rng.standard_normal((3, 5)).astype(np.float32)}]

    def case(_n):
        i = r.randrange(len(bases))
        data, what = mutate_onnx(bases[i], r)
        return what, lambda: pg.onnx.import_model(data)(feeds[i])
    return _tally(cases, case)


# ------------------------------------------------------------- checkpoints

def _random_json(r: random.Random, depth: int = 0):
    k = r.randrange(8 if depth < 3 else 5)
    return [lambda: None, lambda: r.choice([-1, 0, 7, 2**64, 10**400]),
            lambda: r.choice([1.5, float("nan"), -0.0]),
            lambda: r.choice(["", "../x", "/dev/zero", "float64", "v-1.data", "\0"]),
            lambda: r.choice([True, False]),
            lambda: [_random_json(r, depth + 1) for _ in range(r.randrange(3))],
            lambda: {str(i): _random_json(r, depth + 1) for i in range(r.randrange(3))},
            lambda: [[[[[[[[]]]]]]]]][k]()


def _mutate_tree(obj, r: random.Random):
    if isinstance(obj, dict) and obj and r.random() < 0.7:
        key = r.choice(sorted(obj))
        k = r.randrange(3)
        if k == 0:
            del obj[key]
        elif k == 1:
            obj[key] = _random_json(r)
        else:
            _mutate_tree(obj[key], r)
    elif isinstance(obj, list) and obj:
        i = r.randrange(len(obj))
        obj[i] = _random_json(r) if r.random() < 0.5 else obj[i]
        _mutate_tree(obj[i], r)


def fuzz_checkpoint(seed: int, cases: int) -> dict:
    r = random.Random(seed)
    d = tempfile.mkdtemp()
    rng = np.random.default_rng(seed)
    vs = {"a": pg.Variable(rng.standard_normal(5)),
          "b": pg.Variable(rng.standard_normal((2, 3)).astype(np.float32)),
          "c": pg.Variable(np.int32(3))}
    ckpt = pg.train.Checkpoint(**vs)
    prefix = ckpt.save(os.path.join(d, "v"))
    index = pathlib.Path(prefix + ".index").read_text()
    data = pathlib.Path(prefix + ".data").read_bytes()

    def case(_n):
        k = r.randrange(5)
        idx, dat, what = index, data, ""
        if k <= 1:
            tree = json.loads(index)
            for _ in range(r.randrange(1, 4)):
                _mutate_tree(tree, r)
            idx, what = json.dumps(tree), "index tree"
        elif k == 2:
            b = bytearray(index.encode())
            for _ in range(r.randrange(1, 5)):
                b[r.randrange(len(b))] = r.randrange(256)
            idx, what = b.decode("latin-1"), "index bytes"
        elif k == 3:
            dat = data[: r.randrange(len(data) + 1)] + (b"\0" * r.randrange(3))
            what = "data length"
        else:
            b = bytearray(data)
            b[r.randrange(len(b))] ^= 1 << r.randrange(8)
            dat, what = bytes(b), "data bit"
        with open(prefix + ".index", "w", encoding="latin-1") as f:
            f.write(idx)
        with open(prefix + ".data", "wb") as f:
            f.write(dat)
        return what, lambda: ckpt.restore(prefix)
    return _tally(cases, case)


if __name__ == "__main__":
    import logging
    logging.disable(logging.WARNING)      # unknown attributes are logged, by design
    kind, seed, cases = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    result = {"graphdef": fuzz_graphdef, "onnx": fuzz_onnx,
              "checkpoint": fuzz_checkpoint}[kind](seed, cases)
    print(json.dumps(result))
