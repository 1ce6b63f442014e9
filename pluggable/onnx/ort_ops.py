"""The ONNX ops the ONNX Runtime bridge lowers to plugin kernels, as data.

One row (``OrtOp``) per ONNX op of the default domain: the lowering kind
(the C code of c_api/ort/ort_partition.c that lowers every op of that kind),
the TensorFlow ops it computes with, the ops only the bridge's lowering
adds, the element types it is exact for, and the opsets of the importer's
row for the op. The same rows serve both sides:

* ``mapping.py`` makes its rows for the ``direct`` entries (one TensorFlow
  op applied to the node's inputs) from this table, and lowers every other
  entry's op to a graph that contains the entry's ``tf`` ops
  (tests/test_ort_op_table.py checks it);
* setup.py writes ``c_header()`` into the build directory as
  ``ort_op_table.h``, the table ``OPS[]`` that the bridge's GetCapability
  and Compile read: a node is claimed only for an op listed here, of one of
  its element types, with a schema inside its opsets, and a lowering emits
  only the ops its row names.

This module imports nothing of the package: setup.py loads it by path,
before the package is built.
"""
from __future__ import annotations

from typing import NamedTuple

# The element types the bridge runs, in the order of its text export.
TYPES = ("float", "double", "int32", "int64")
ALL = TYPES
FLOATS = ("float", "double")

# The lowering kinds: each is one `case K_<KIND>` of ort_partition.c's lower().
KINDS = ("binary", "unary", "matmul", "gemm", "softmax", "conv", "maxpool", "avgpool",
         "globalavg", "concat", "sum", "reshape", "batchnorm", "flatten", "identity",
         "transpose", "gelu", "reduce", "squeeze", "gather", "cast", "where", "layernorm")

OPEN = 10_000   # `until` of a row that covers every later opset (mapping.rule's default)


class OrtOp(NamedTuple):
    onnx: str            # the ONNX op type (default domain)
    kind: str            # one of KINDS
    tf: tuple            # the TensorFlow ops the op computes with, in both lowerings
    types: tuple         # the element types (of TYPES) the bridge's lowering is exact for
    aux: tuple = ()      # ops only the bridge adds, by attribute or shape (layout, bias)
    direct: bool = False  # the importer's row is tf[0] of the node's inputs, made from here
    since: int = 1       # the opsets of the importer's row (and of the schemas claimed)
    until: int = OPEN


# Binary ops broadcast as numpy does, in ONNX and in the plugin ops alike;
# integer Div truncates toward zero in both (the importer composes FloorDiv
# and FloorMod for it, so its Div row is its own).
OPS = (
    OrtOp("Add", "binary", ("AddV2",), ALL, direct=True),
    OrtOp("Sub", "binary", ("Sub",), ALL, direct=True),
    OrtOp("Mul", "binary", ("Mul",), ALL, direct=True),
    OrtOp("Div", "binary", ("RealDiv",), ALL),
    OrtOp("Relu", "unary", ("Relu",), ALL, direct=True),
    OrtOp("Neg", "unary", ("Neg",), ALL, direct=True),
    OrtOp("Abs", "unary", ("Abs",), ALL, direct=True),
    OrtOp("Exp", "unary", ("Exp",), FLOATS, direct=True),
    OrtOp("Log", "unary", ("Log",), FLOATS, direct=True),
    OrtOp("Sqrt", "unary", ("Sqrt",), FLOATS, direct=True),
    OrtOp("Tanh", "unary", ("Tanh",), FLOATS, direct=True),
    OrtOp("Sigmoid", "unary", ("Sigmoid",), FLOATS, direct=True),
    OrtOp("Erf", "unary", ("Erf",), FLOATS, direct=True),
    OrtOp("Gelu", "gelu", ("Gelu",), FLOATS, since=20),
    # (an exponent of another element type than the base is not run)
    OrtOp("Pow", "binary", ("Pow",), FLOATS),
    OrtOp("MatMul", "matmul", ("MatMul", "BatchMatMulV2"), ALL),
    OrtOp("Gemm", "gemm", ("MatMul", "Mul", "AddV2"), FLOATS),
    OrtOp("Softmax", "softmax", ("Softmax",), FLOATS, aux=("Transpose", "Reshape")),
    OrtOp("LogSoftmax", "softmax", ("LogSoftmax",), FLOATS, aux=("Transpose", "Reshape")),
    OrtOp("Conv", "conv", ("Conv2D",), FLOATS, aux=("Transpose", "BiasAdd")),
    OrtOp("MaxPool", "maxpool", ("MaxPool",), FLOATS),
    OrtOp("GlobalAveragePool", "globalavg", ("Mean",), FLOATS),
    OrtOp("Concat", "concat", ("ConcatV2",), ALL),
    OrtOp("AveragePool", "avgpool", ("AvgPool",), FLOATS),
    OrtOp("Sum", "sum", ("AddV2",), ALL),
    OrtOp("Reshape", "reshape", ("Reshape",), ALL, since=5),
    OrtOp("BatchNormalization", "batchnorm", ("Mul", "AddV2"), FLOATS),
    OrtOp("Flatten", "flatten", ("Reshape",), ALL),
    OrtOp("Identity", "identity", ("Identity",), ALL),
    OrtOp("Dropout", "identity", ("Identity",), FLOATS),
    OrtOp("Transpose", "transpose", ("Transpose",), ALL),
    # Cast from these types to them or to bool; Where's condition is bool.
    OrtOp("Cast", "cast", ("Cast",), ALL),
    OrtOp("Where", "where", ("SelectV2",), ALL),
    # Negative indices are moved into range first (folded for constants).
    OrtOp("Gather", "gather", ("GatherV2",), ALL, aux=("Less", "AddV2", "SelectV2")),
    # A Reshape to the static output shape, else ExpandDims / Squeeze.
    OrtOp("Unsqueeze", "squeeze", ("Reshape",), ALL, aux=("ExpandDims",)),
    OrtOp("Squeeze", "squeeze", ("Reshape",), ALL, aux=("Squeeze",)),
    OrtOp("ReduceMean", "reduce", ("Mean",), FLOATS),
    # The importer's composition (mean and variance over the trailing axes).
    OrtOp("LayerNormalization", "layernorm", ("Mean", "Sub", "Mul", "Rsqrt", "AddV2"), FLOATS,
          since=17),
)

BY_ONNX = {e.onnx: e for e in OPS}


def direct(kind: str) -> list[OrtOp]:
    """The entries of `kind` whose importer row is made from this table."""
    return [e for e in OPS if e.direct and e.kind == kind]


def opsets_text(e: OrtOp) -> str:
    return f"{e.since}-" if e.until >= OPEN else f"{e.since}-{e.until}"


def table_text() -> str:
    """What the bridge's ``pg_ort_op_table()`` returns: one line per op,
    the op and its element types (``Add float double int32 int64``)."""
    return "".join(" ".join((e.onnx,) + tuple(t for t in TYPES if t in e.types)) + "\n"
                   for e in OPS)


def lowerings_text() -> str:
    """What the bridge's ``pg_ort_op_lowerings()`` returns: one line per
    op, ``Conv kind=conv opsets=1- tf=Conv2D aux=Transpose,BiasAdd``."""
    return "".join(f"{e.onnx} kind={e.kind} opsets={opsets_text(e)} tf={','.join(e.tf)} "
                   f"aux={','.join(e.aux)}\n" for e in OPS)


def _c_names(names: tuple) -> str:
    return "{" + ", ".join([f'"{n}"' for n in names] + ["NULL"]) + "}"


def c_header() -> str:
    """The C text of ort_op_table.h (the op kinds, the row type and OPS[])."""
    bad = [e.onnx for e in OPS if e.kind not in KINDS or not e.tf or
           not set(e.types) <= set(TYPES) or not e.types]
    if bad:
        raise ValueError(f"pluggable/onnx/ort_ops.py: rows {bad} name an unknown kind or "
                         "element type, or no TensorFlow op")
    width = max(len(e.tf) + len(e.aux) for e in OPS)
    bits = {"float": "T_F32", "double": "T_F64", "int32": "T_I32", "int64": "T_I64"}
    rows = []
    for e in OPS:
        types = " | ".join(bits[t] for t in TYPES if t in e.types)
        rows.append(f'    {{"{e.onnx}", K_{e.kind.upper()}, "{e.kind}", {_c_names(e.tf)}, '
                    f"{_c_names(e.aux)}, {types}, {e.since}, {e.until}}},")
    kinds = ",\n  ".join(f"K_{k.upper()}" for k in KINDS)
    return f"""\
/* The ONNX ops the bridge lowers: generated by setup.py from
 * pluggable/onnx/ort_ops.py (the table the importer's mapping shares).
 * Do not edit; change the Python table and rebuild. */
#ifndef PG_ORT_OP_TABLE_H_
#define PG_ORT_OP_TABLE_H_

#include <stddef.h>

/* The lowering kinds: one case of lower() in ort_partition.c each. */
typedef enum op_kind {{
  {kinds}
}} op_kind;

/* Bits of op_entry.types. */
#define T_F32 1u
#define T_F64 2u
#define T_I32 4u
#define T_I64 8u

/* The most TensorFlow ops (tf and aux together) of one row. */
#define PG_ORT_MAX_TF {width}

typedef struct op_entry {{
  const char* onnx;
  op_kind kind;
  const char* kind_name;
  /* The plugin ops the lowering computes with (tf[0]: the op of one-kernel
   * lowerings), and the ones it adds for layout or a bias; NULL-terminated.
   * A lowering emits no other op. */
  const char* tf[PG_ORT_MAX_TF + 1];
  const char* aux[PG_ORT_MAX_TF + 1];
  unsigned types; /* the element types the lowering is exact for */
  int since, until; /* the schema versions claimed (the importer's row) */
}} op_entry;

#define PG_ORT_OPEN_OPSET {OPEN}

/* Bytes that pg_ort_op_table() and pg_ort_op_lowerings() need. */
#define PG_ORT_OP_TEXT_MAX {max(len(table_text()), len(lowerings_text())) + 1}

static const op_entry OPS[] = {{
{chr(10).join(rows)}
}};

#endif /* PG_ORT_OP_TABLE_H_ */
"""
