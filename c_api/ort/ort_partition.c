/* Which ONNX nodes the pluggable EP takes, and the compiled partitions that
 * run them on a plugin's device.
 *
 * GetCapability describes each node (op, input and output element types and
 * ranks, attributes), lowers it through the op table below in "check" mode
 * (every plugin kernel the lowering needs must be registered for the node's
 * dtype), and groups the supported nodes into partitions: maximal sets
 * connected through the values they pass, merged only while no path leaves
 * the set and comes back (a partition that did would depend on itself).
 * Each partition is one fused node (OrtEpGraphSupportInfo_AddNodesToFuse).
 *
 * Compile lowers the partition's nodes again, this time creating the
 * kernels: the partition is a list of steps (one plugin kernel each) over
 * value slots. The partition's constant initializers are copied to the
 * device once, here (ONNX Runtime is told not to pass them). Compute copies
 * the partition's other inputs to the device, runs the steps in order with
 * every intermediate value staying in device memory, and copies only the
 * partition's outputs back into ONNX Runtime's tensors. */
#define _GNU_SOURCE
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ort_bridge.h"

/*** Counters (for tests and diagnostics) ***/

static int64_t kernel_runs, host_copies, partitions_compiled, nodes_compiled;
static int64_t live_parts;

#define COUNT(var, n) __atomic_add_fetch(&(var), (n), __ATOMIC_SEQ_CST)
#define READ(var) __atomic_load_n(&(var), __ATOMIC_SEQ_CST)

/* Plugin kernel runs of claimed nodes so far (a Gemm lowered to MatMul and
 * Add counts two). */
PG_EXPORT int64_t pg_ort_kernel_runs(void) { return READ(kernel_runs); }
/* Tensors copied between ONNX Runtime's memory and a device so far (each
 * partition input copied in, each partition output copied out, each constant
 * initializer copied in at compile time). */
PG_EXPORT int64_t pg_ort_host_copies(void) { return READ(host_copies); }
/* Partitions compiled so far, and the ONNX nodes in them. */
PG_EXPORT int64_t pg_ort_partitions_compiled(void) { return READ(partitions_compiled); }
PG_EXPORT int64_t pg_ort_nodes_compiled(void) { return READ(nodes_compiled); }
/* Compiled partitions not yet released (0 once every session is gone). */
PG_EXPORT int64_t pg_ort_live_partitions(void) { return READ(live_parts); }

/*** Element types ***/

static TF_DataType tf_type(int onnx) {
  switch (onnx) {
    case PG_ONNX_FLOAT: return TF_FLOAT;
    case PG_ONNX_DOUBLE: return TF_DOUBLE;
    case PG_ONNX_INT32: return TF_INT32;
    case PG_ONNX_INT64: return TF_INT64;
    default: return (TF_DataType)0;
  }
}

static const char* onnx_type_name(int onnx) {
  switch (onnx) {
    case PG_ONNX_FLOAT: return "float";
    case PG_ONNX_DOUBLE: return "double";
    case PG_ONNX_INT32: return "int32";
    case PG_ONNX_INT64: return "int64";
    default: return "an element type the bridge does not run";
  }
}

/* Bits of op_entry.types. */
#define T_F32 1u
#define T_F64 2u
#define T_I32 4u
#define T_I64 8u
#define T_FLOATS (T_F32 | T_F64)
#define T_ALL (T_F32 | T_F64 | T_I32 | T_I64)

static unsigned type_bit(int onnx) {
  switch (onnx) {
    case PG_ONNX_FLOAT: return T_F32;
    case PG_ONNX_DOUBLE: return T_F64;
    case PG_ONNX_INT32: return T_I32;
    case PG_ONNX_INT64: return T_I64;
    default: return 0;
  }
}

/*** Node descriptions ***/

#define MAX_IO 3

typedef struct node_desc {
  const OrtNode* node;
  const char* op;
  const char* name;
  int since;                      /* the opset of its schema */
  int nin, nout;
  const void* in_vi[MAX_IO];      /* NULL: an absent optional input */
  const char* in_name[MAX_IO];
  int in_type[MAX_IO];            /* ONNX element type; 0: not a tensor */
  int in_rank[MAX_IO];            /* 0 also when the shape is unknown */
  const char* out_name;
  int out_type;
} node_desc;

/* The element type and rank a value info declares (0 and 0 if not a tensor). */
static void value_type(const void* vi, int* type, int* rank) {
  const void* ti = NULL;
  const void* tsi = NULL;
  int et = 0;
  size_t r = 0;
  *type = 0;
  *rank = 0;
  OrtStatus* s;
  if (vi == NULL) return;
  if ((s = CALL(GetValueInfoTypeInfo, OrtStatus* (*)(const void*, const void**))(vi, &ti)) ||
      ti == NULL) {
    pg_ort_drop(s);
    return;
  }
  if ((s = CALL(CastTypeInfoToTensorInfo, OrtStatus* (*)(const void*, const void**))(ti, &tsi)) ||
      tsi == NULL) {
    pg_ort_drop(s);
    return;
  }
  if ((s = CALL(GetTensorElementType, OrtStatus* (*)(const void*, int*))(tsi, &et)) ||
      (s = CALL(GetDimensionsCount, OrtStatus* (*)(const void*, size_t*))(tsi, &r))) {
    pg_ort_drop(s);
    return;
  }
  *type = et;
  *rank = (int)r;
}

static const char* value_name(const void* vi) {
  const char* name = NULL;
  if (vi == NULL) return NULL;
  OrtStatus* s = CALL(GetValueInfoName, OrtStatus* (*)(const void*, const char**))(vi, &name);
  if (s != NULL) {
    pg_ort_drop(s);
    return NULL;
  }
  return name != NULL && name[0] != '\0' ? name : NULL;
}

/* Fills `d` from `node`; 0 when the node is not one the bridge could take
 * (another domain, more inputs or outputs than any op of the table, a
 * failing query). */
static int describe(const OrtNode* node, node_desc* d) {
  memset(d, 0, sizeof *d);
  d->node = node;
  const char* domain = NULL;
  size_t nin = 0, nout = 0;
  OrtStatus* s = NULL;
  if ((s = CALL(Node_GetOperatorType, OrtStatus* (*)(const OrtNode*, const char**))(node, &d->op)) ||
      (s = CALL(Node_GetDomain, OrtStatus* (*)(const OrtNode*, const char**))(node, &domain)) ||
      (s = CALL(Node_GetName, OrtStatus* (*)(const OrtNode*, const char**))(node, &d->name)) ||
      (s = CALL(Node_GetSinceVersion, OrtStatus* (*)(const OrtNode*, int*))(node, &d->since)) ||
      (s = CALL(Node_GetNumInputs, OrtStatus* (*)(const OrtNode*, size_t*))(node, &nin)) ||
      (s = CALL(Node_GetNumOutputs, OrtStatus* (*)(const OrtNode*, size_t*))(node, &nout))) {
    pg_ort_drop(s);
    return 0;
  }
  if (d->op == NULL || (domain != NULL && domain[0] != '\0' && strcmp(domain, "ai.onnx") != 0))
    return 0;
  if (nin == 0 || nin > MAX_IO || nout != 1) return 0;
  if ((s = CALL(Node_GetInputs, OrtStatus* (*)(const OrtNode*, const void**, size_t))(
           node, d->in_vi, nin))) {
    pg_ort_drop(s);
    return 0;
  }
  const void* out_vi = NULL;
  if ((s = CALL(Node_GetOutputs, OrtStatus* (*)(const OrtNode*, const void**, size_t))(
           node, &out_vi, 1))) {
    pg_ort_drop(s);
    return 0;
  }
  d->nin = (int)nin;
  d->nout = 1;
  for (int i = 0; i < d->nin; i++) {
    d->in_name[i] = value_name(d->in_vi[i]);
    if (d->in_name[i] == NULL) d->in_vi[i] = NULL; /* an absent optional input */
    value_type(d->in_vi[i], &d->in_type[i], &d->in_rank[i]);
  }
  int out_rank;
  d->out_name = value_name(out_vi);
  value_type(out_vi, &d->out_type, &out_rank);
  if (d->name == NULL) d->name = "";
  return d->out_name != NULL;
}

/* Attribute `name` of the node: 1 and *out when present. */
static int attr_int(const node_desc* d, const char* name, int64_t* out) {
  const void* a = NULL;
  size_t got = 0;
  OrtStatus* s = CALL(Node_GetAttributeByName,
                      OrtStatus* (*)(const OrtNode*, const char*, const void**))(d->node, name, &a);
  if (s != NULL || a == NULL) {
    pg_ort_drop(s);
    return 0;
  }
  s = CALL(ReadOpAttr, OrtStatus* (*)(const void*, int, void*, size_t, size_t*))(
      a, PG_ORT_OP_ATTR_INT, out, sizeof *out, &got);
  if (s != NULL) {
    pg_ort_drop(s);
    return -1; /* present but not an int */
  }
  return 1;
}

static int attr_float(const node_desc* d, const char* name, float* out) {
  const void* a = NULL;
  size_t got = 0;
  OrtStatus* s = CALL(Node_GetAttributeByName,
                      OrtStatus* (*)(const OrtNode*, const char*, const void**))(d->node, name, &a);
  if (s != NULL || a == NULL) {
    pg_ort_drop(s);
    return 0;
  }
  s = CALL(ReadOpAttr, OrtStatus* (*)(const void*, int, void*, size_t, size_t*))(
      a, PG_ORT_OP_ATTR_FLOAT, out, sizeof *out, &got);
  if (s != NULL) {
    pg_ort_drop(s);
    return -1;
  }
  return 1;
}

/*** The op table ***/

typedef enum op_kind { K_BINARY, K_UNARY, K_MATMUL, K_GEMM, K_SOFTMAX } op_kind;

typedef struct op_entry {
  const char* onnx;
  op_kind kind;
  const char* tf;  /* the plugin op (K_MATMUL and K_GEMM pick their own) */
  unsigned types;  /* the element types the lowering is exact for */
} op_entry;

/* Binary ops broadcast as numpy does, in ONNX and in the plugin ops alike;
 * integer Div truncates toward zero in both. */
static const op_entry OPS[] = {
    {"Add", K_BINARY, "AddV2", T_ALL},     {"Sub", K_BINARY, "Sub", T_ALL},
    {"Mul", K_BINARY, "Mul", T_ALL},       {"Div", K_BINARY, "RealDiv", T_ALL},
    {"Relu", K_UNARY, "Relu", T_ALL},      {"Neg", K_UNARY, "Neg", T_ALL},
    {"Abs", K_UNARY, "Abs", T_ALL},        {"Exp", K_UNARY, "Exp", T_FLOATS},
    {"Log", K_UNARY, "Log", T_FLOATS},     {"Sqrt", K_UNARY, "Sqrt", T_FLOATS},
    {"Tanh", K_UNARY, "Tanh", T_FLOATS},   {"Sigmoid", K_UNARY, "Sigmoid", T_FLOATS},
    {"MatMul", K_MATMUL, NULL, T_ALL},     {"Gemm", K_GEMM, NULL, T_FLOATS},
    {"Softmax", K_SOFTMAX, "Softmax", T_FLOATS},
};

static const op_entry* find_entry(const char* onnx) {
  for (size_t i = 0; i < sizeof OPS / sizeof OPS[0]; i++)
    if (strcmp(OPS[i].onnx, onnx) == 0) return &OPS[i];
  return NULL;
}

/* The input names of the plugin ops the table uses (their OpDefs). */
static int tf_inputs(const char* tf, const char* names[2]) {
  static const struct { const char* op; int n; const char* in[2]; } defs[] = {
      {"AddV2", 2, {"x", "y"}},   {"Sub", 2, {"x", "y"}},     {"Mul", 2, {"x", "y"}},
      {"RealDiv", 2, {"x", "y"}}, {"Relu", 1, {"features"}},  {"Neg", 1, {"x"}},
      {"Abs", 1, {"x"}},          {"Exp", 1, {"x"}},          {"Log", 1, {"x"}},
      {"Sqrt", 1, {"x"}},         {"Tanh", 1, {"x"}},         {"Sigmoid", 1, {"x"}},
      {"MatMul", 2, {"a", "b"}},  {"BatchMatMulV2", 2, {"x", "y"}},
      {"Softmax", 1, {"logits"}},
  };
  for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++)
    if (strcmp(defs[i].op, tf) == 0) {
      names[0] = defs[i].in[0];
      names[1] = defs[i].in[1];
      return defs[i].n;
    }
  return 0;
}

/*** Compiled partitions ***/

typedef struct step {
  pg_kernel* kernel;
  const char* tf;
  int nin;
  int in[2];
  int out;
  int node; /* index into the partition's node names */
} step;

typedef struct bridge_part {
  OrtNodeComputeInfo info; /* first */
  pg_device* dev;
  char name[128];          /* the fused node's name */
  /* Value slots, by name; temporaries and Gemm's scalars have no name. */
  int num_slots, cap_slots;
  char** slot_name;
  TF_Tensor** consts;      /* per slot: a constant on the device, or NULL */
  int* last_use;           /* per slot: the last step reading it, -1 none */
  int* is_output;
  /* The fused node's inputs ONNX Runtime passes, and its outputs. */
  int num_inputs;
  int* in_slot;            /* -1: an input no step reads */
  int* in_type;            /* ONNX element type */
  int num_outputs;
  int* out_slot;
  int* out_type;
  int num_steps, cap_steps;
  step* steps;
  int num_nodes;
  char** node_name;        /* per node: its name and its op, for messages */
  char** node_op;
} bridge_part;

static void free_part(bridge_part* p) {
  if (p == NULL) return;
  __atomic_sub_fetch(&live_parts, 1, __ATOMIC_SEQ_CST);
  for (int i = 0; i < p->num_steps; i++)
    if (p->steps[i].kernel) pg_kernel_release(p->steps[i].kernel);
  for (int i = 0; i < p->num_slots; i++) {
    free(p->slot_name[i]);
    if (p->consts[i]) TF_DeleteTensor(p->consts[i]);
  }
  for (int i = 0; i < p->num_nodes; i++) free(p->node_name[i]), free(p->node_op[i]);
  free(p->slot_name), free(p->consts), free(p->last_use), free(p->is_output);
  free(p->in_slot), free(p->in_type), free(p->out_slot), free(p->out_type);
  free(p->steps), free(p->node_name), free(p->node_op);
  free(p);
}

/* A new slot (named `name`, or a temporary with NULL); -1 without memory. */
static int new_slot(bridge_part* p, const char* name) {
  if (p->num_slots == p->cap_slots) {
    int cap = p->cap_slots ? 2 * p->cap_slots : 16;
    char** n = realloc(p->slot_name, cap * sizeof *n);
    if (n) p->slot_name = n;
    TF_Tensor** c = realloc(p->consts, cap * sizeof *c);
    if (c) p->consts = c;
    int* l = realloc(p->last_use, cap * sizeof *l);
    if (l) p->last_use = l;
    int* o = realloc(p->is_output, cap * sizeof *o);
    if (o) p->is_output = o;
    if (!n || !c || !l || !o) return -1;
    p->cap_slots = cap;
  }
  int s = p->num_slots++;
  p->slot_name[s] = name ? strdup(name) : NULL;
  p->consts[s] = NULL;
  p->last_use[s] = -1;
  p->is_output[s] = 0;
  return s;
}

static int find_slot(const bridge_part* p, const char* name) {
  for (int i = p->num_slots - 1; i >= 0; i--)
    if (p->slot_name[i] && strcmp(p->slot_name[i], name) == 0) return i;
  return -1;
}

/*** Lowering ***/

/* Lowers nodes into steps (p != NULL), or only checks that every kernel a
 * lowering needs is registered (p == NULL: GetCapability). */
typedef struct lowering {
  bridge_part* p;
  const char* device_type;
  pg_device* dev;
  int node;        /* index of the node being lowered */
  const char* who; /* "name (Op)" */
  char err[1024];
} lowering;

/* One step: kernel `tf` for dtype `t` over slots `in` into slot `out`;
 * `flags` are MatMul's transposes (bit 0: a, bit 1: b). Returns 1, or 0
 * (no such kernel) / -1 (the kernel could not be created: L->err). */
static int emit(lowering* L, const char* tf, TF_DataType t, int nin, const int* in, int out,
                int flags) {
  pg_kernel_def* def = pg_ort_find_kernel(tf, L->device_type, t);
  if (def == NULL) {
    snprintf(L->err, sizeof L->err, "pluggable: node %s: no %s kernel of dtype %d on %s", L->who,
             tf, (int)t, L->device_type);
    return 0;
  }
  bridge_part* p = L->p;
  if (p == NULL) return 1;
  if (p->num_steps == p->cap_steps) {
    int cap = p->cap_steps ? 2 * p->cap_steps : 8;
    step* s = realloc(p->steps, cap * sizeof *s);
    if (s == NULL) {
      snprintf(L->err, sizeof L->err, "pluggable: out of memory compiling %s", L->who);
      return -1;
    }
    p->steps = s;
    p->cap_steps = cap;
  }
  const char* names[2] = {NULL, NULL};
  int n = tf_inputs(tf, names);
  if (n != nin) {
    snprintf(L->err, sizeof L->err, "pluggable: node %s: %s takes %d inputs, not %d", L->who, tf,
             n, nin);
    return -1;
  }
  pg_attrs* attrs = pg_attrs_new();
  pg_attrs_set_type(attrs, "T", t);
  if (strcmp(tf, "MatMul") == 0) {
    pg_attrs_set_bool(attrs, "transpose_a", flags & 1);
    pg_attrs_set_bool(attrs, "transpose_b", (flags >> 1) & 1);
  } else if (strcmp(tf, "BatchMatMulV2") == 0) {
    pg_attrs_set_bool(attrs, "adj_x", 0);
    pg_attrs_set_bool(attrs, "adj_y", 0);
  }
  unsigned char host[2] = {0, 0};
  TF_Status* st = TF_NewStatus();
  pg_kernel* k = pg_kernel_create(def, L->dev, attrs, nin, names, host, 1, &t, host, st);
  pg_attrs_free(attrs);
  if (k == NULL) {
    snprintf(L->err, sizeof L->err, "pluggable: node %s: creating kernel %s on %s failed: %s",
             L->who, tf, L->dev->name, TF_Message(st));
    TF_DeleteStatus(st);
    return -1;
  }
  TF_DeleteStatus(st);
  step* s = &p->steps[p->num_steps++];
  memset(s, 0, sizeof *s);
  s->kernel = k;
  s->tf = tf;
  s->nin = nin;
  for (int i = 0; i < nin; i++) s->in[i] = in[i];
  s->out = out;
  s->node = L->node;
  return 1;
}

static size_t elem_size(TF_DataType t) { return TF_DataTypeSize(t); }

/* A slot holding the scalar `v` of dtype `t` on the device (-1 in check
 * mode, -2 on failure: L->err). */
static int scalar_slot(lowering* L, TF_DataType t, double v) {
  if (L->p == NULL) return -1;
  int s = new_slot(L->p, NULL);
  if (s < 0) {
    snprintf(L->err, sizeof L->err, "pluggable: out of memory compiling %s", L->who);
    return -2;
  }
  unsigned char buf[8];
  float f = (float)v;
  if (t == TF_FLOAT) memcpy(buf, &f, 4);
  else memcpy(buf, &v, 8); /* Gemm runs float and double only */
  TF_Status* st = TF_NewStatus();
  L->p->consts[s] = pg_tensor_from_host(L->dev, t, NULL, 0, buf, elem_size(t), st);
  if (L->p->consts[s] == NULL) {
    snprintf(L->err, sizeof L->err, "pluggable: node %s: copying a constant to %s failed: %s",
             L->who, L->dev->name, TF_Message(st));
    TF_DeleteStatus(st);
    return -2;
  }
  TF_DeleteStatus(st);
  COUNT(host_copies, 1);
  return s;
}

static int temp_slot(lowering* L) {
  if (L->p == NULL) return -1;
  int s = new_slot(L->p, NULL);
  if (s < 0) snprintf(L->err, sizeof L->err, "pluggable: out of memory compiling %s", L->who);
  return s < 0 ? -2 : s;
}

#define EMIT(...)                     \
  do {                                \
    int r_ = emit(L, __VA_ARGS__);    \
    if (r_ != 1) return r_;           \
  } while (0)
#define SLOT(var, expr)                 \
  do {                                  \
    var = (expr);                       \
    if (var == -2) return -1;           \
  } while (0)

/* Lowers node `d` reading slots `in` into slot `out`: 1 done (or, in check
 * mode, possible), 0 not supported (L->err says why), -1 failed (L->err). */
static int lower(lowering* L, const node_desc* d, const int* in, int out) {
  const op_entry* e = find_entry(d->op);
  if (e == NULL) {
    snprintf(L->err, sizeof L->err, "pluggable: node %s: op not in the bridge's table", L->who);
    return 0;
  }
  int type = d->in_type[0];
  TF_DataType t = tf_type(type);
  if (!(e->types & type_bit(type)) || d->out_type != type) {
    snprintf(L->err, sizeof L->err, "pluggable: node %s: %s is not run for %s", L->who, d->op,
             onnx_type_name(type));
    return 0;
  }
  int need = e->kind == K_BINARY || e->kind == K_MATMUL ? 2 : e->kind == K_GEMM ? 2 : 1;
  if (d->nin < need) return 0;
  for (int i = 0; i < d->nin; i++)
    if (d->in_vi[i] != NULL && (d->in_type[i] != type || d->in_rank[i] > TF_MAX_DIMS)) {
      snprintf(L->err, sizeof L->err, "pluggable: node %s: mixed or unknown input types", L->who);
      return 0;
    }
  for (int i = 0; i < need; i++)
    if (d->in_vi[i] == NULL) return 0;
  switch (e->kind) {
    case K_BINARY:
      if (d->nin != 2) return 0;
      EMIT(e->tf, t, 2, in, out, 0);
      return 1;
    case K_UNARY:
      if (d->nin != 1) return 0;
      EMIT(e->tf, t, 1, in, out, 0);
      return 1;
    case K_SOFTMAX: {
      if (d->nin != 1) return 0;
      int64_t axis = d->since >= 13 ? -1 : 1;
      if (attr_int(d, "axis", &axis) < 0) return 0;
      int rank = d->in_rank[0];
      if (axis < 0) axis += rank;
      /* Before opset 13 Softmax flattens to 2-D at `axis`: the same as the
       * last-axis Softmax only when `axis` is the last axis. */
      if (rank < 1 || axis != rank - 1) {
        snprintf(L->err, sizeof L->err, "pluggable: node %s: Softmax runs on the last axis only",
                 L->who);
        return 0;
      }
      EMIT(e->tf, t, 1, in, out, 0);
      return 1;
    }
    case K_MATMUL: {
      if (d->nin != 2) return 0;
      int ra = d->in_rank[0], rb = d->in_rank[1];
      if (ra == 2 && rb == 2) EMIT("MatMul", t, 2, in, out, 0);
      else if (ra >= 2 && rb >= 2) EMIT("BatchMatMulV2", t, 2, in, out, 0);
      else {
        snprintf(L->err, sizeof L->err, "pluggable: node %s: MatMul of ranks %d and %d "
                 "(1-D or unknown shapes are not run)", L->who, ra, rb);
        return 0;
      }
      return 1;
    }
    case K_GEMM: {
      int64_t ta = 0, tb = 0;
      float alpha = 1.0f, beta = 1.0f;
      if (attr_int(d, "transA", &ta) < 0 || attr_int(d, "transB", &tb) < 0 ||
          attr_float(d, "alpha", &alpha) < 0 || attr_float(d, "beta", &beta) < 0)
        return 0;
      if (d->in_rank[0] != 2 || d->in_rank[1] != 2) return 0;
      int has_c = d->nin == 3 && d->in_vi[2] != NULL;
      if (has_c && d->in_rank[2] > 2) return 0;
      int last_is_mm = !has_c && alpha == 1.0f;
      int prod;
      SLOT(prod, last_is_mm ? out : temp_slot(L));
      EMIT("MatMul", t, 2, in, prod, (ta ? 1 : 0) | (tb ? 2 : 0));
      if (alpha != 1.0f) {
        int a, scaled;
        SLOT(a, scalar_slot(L, t, alpha));
        SLOT(scaled, has_c ? temp_slot(L) : out);
        EMIT("Mul", t, 2, ((int[]){prod, a}), scaled, 0);
        prod = scaled;
      }
      if (has_c) {
        int c = in[2];
        if (beta != 1.0f) {
          int b, cb;
          SLOT(b, scalar_slot(L, t, beta));
          SLOT(cb, temp_slot(L));
          EMIT("Mul", t, 2, ((int[]){in[2], b}), cb, 0);
          c = cb;
        }
        EMIT("AddV2", t, 2, ((int[]){prod, c}), out, 0);
      }
      return 1;
    }
  }
  return 0;
}

static void who(char* buf, size_t cap, const node_desc* d) {
  snprintf(buf, cap, "'%s' (%s)", d->name, d->op);
}

/* Whether the bridge can run node `node` on `device_type`. */
static int supported(const char* device_type, const OrtNode* node) {
  node_desc d;
  if (!describe(node, &d)) return 0;
  lowering L;
  memset(&L, 0, sizeof L);
  L.device_type = device_type;
  char w[300];
  who(w, sizeof w, &d);
  L.who = w;
  int dummy[MAX_IO] = {-1, -1, -1};
  return lower(&L, &d, dummy, -1) == 1;
}

/* The value infos of a node's inputs or outputs (`outputs`), allocated. */
static OrtStatus* node_values(const OrtNode* node, int outputs, const void*** out, size_t* n) {
  *out = NULL;
  *n = 0;
  OrtStatus* s = outputs
                     ? CALL(Node_GetNumOutputs, OrtStatus* (*)(const OrtNode*, size_t*))(node, n)
                     : CALL(Node_GetNumInputs, OrtStatus* (*)(const OrtNode*, size_t*))(node, n);
  if (s != NULL || *n == 0) return s;
  *out = calloc(*n, sizeof **out);
  if (*out == NULL) return pg_ort_status(PG_ORT_FAIL, "pluggable: out of memory");
  s = outputs ? CALL(Node_GetOutputs, OrtStatus* (*)(const OrtNode*, const void**, size_t))(
                    node, *out, *n)
              : CALL(Node_GetInputs, OrtStatus* (*)(const OrtNode*, const void**, size_t))(
                    node, *out, *n);
  return s;
}

/*** Names to node indices (GetCapability) ***/

typedef struct name_map {
  size_t cap, count;
  const char** keys;
  int* vals;
} name_map;

static size_t hash(const char* s) {
  size_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static int map_init(name_map* m, size_t n) {
  m->count = 0;
  m->cap = 16;
  while (m->cap < 2 * n + 1) m->cap *= 2;
  m->keys = calloc(m->cap, sizeof *m->keys);
  m->vals = calloc(m->cap, sizeof *m->vals);
  return m->keys != NULL && m->vals != NULL;
}

static void map_put(name_map* m, const char* k, int v) {
  size_t i = hash(k) & (m->cap - 1);
  while (m->keys[i] != NULL && strcmp(m->keys[i], k) != 0) i = (i + 1) & (m->cap - 1);
  if (m->keys[i] == NULL) m->count++;
  m->keys[i] = k;
  m->vals[i] = v;
}

/* Doubles the table; 0 without memory (the table is unchanged). */
static int map_grow(name_map* m) {
  name_map bigger = {2 * m->cap, 0, calloc(2 * m->cap, sizeof(char*)),
                     calloc(2 * m->cap, sizeof(int))};
  if (bigger.keys == NULL || bigger.vals == NULL) {
    free(bigger.keys), free(bigger.vals);
    return 0;
  }
  for (size_t i = 0; i < m->cap; i++)
    if (m->keys[i] != NULL) map_put(&bigger, m->keys[i], m->vals[i]);
  free(m->keys), free(m->vals);
  *m = bigger;
  return 1;
}

static int map_get(const name_map* m, const char* k) {
  size_t i = hash(k) & (m->cap - 1);
  while (m->keys[i] != NULL) {
    if (strcmp(m->keys[i], k) == 0) return m->vals[i];
    i = (i + 1) & (m->cap - 1);
  }
  return -1;
}

static void map_free(name_map* m) { free(m->keys), free(m->vals); }

/*** GetCapability ***/

/* The graph as the grouping sees it: node i's producers and consumers. */
typedef struct dag {
  int n;
  int* pred_start; /* CSR: preds of i are pred[pred_start[i] .. pred_start[i + 1]) */
  int* pred;
  int* succ_start;
  int* succ;
  int* cluster;    /* cluster id of each node (a node index) */
  int* next;       /* the cluster's members as a list: head is the id */
  int* mark;       /* DFS visit stamps */
  int stamp;
  int* stack;
} dag;

/* Whether cluster `b` is reachable from cluster `a` through a node outside
 * both. */
static int reaches_around(dag* g, int a, int b) {
  int top = 0;
  g->stamp++;
  for (int m = a; m >= 0; m = g->next[m])
    for (int k = g->succ_start[m]; k < g->succ_start[m + 1]; k++) {
      int c = g->cluster[g->succ[k]];
      if (c != a && c != b && g->mark[c] != g->stamp) {
        g->mark[c] = g->stamp;
        g->stack[top++] = c;
      }
    }
  while (top > 0) {
    int c = g->stack[--top];
    for (int m = c; m >= 0; m = g->next[m])
      for (int k = g->succ_start[m]; k < g->succ_start[m + 1]; k++) {
        int x = g->cluster[g->succ[k]];
        if (x == b) return 1;
        if (x != a && g->mark[x] != g->stamp) {
          g->mark[x] = g->stamp;
          g->stack[top++] = x;
        }
      }
  }
  return 0;
}

static void merge(dag* g, int a, int b) {
  /* b's members join a (a keeps its id) */
  int last = a;
  while (g->next[last] >= 0) last = g->next[last];
  g->next[last] = b;
  for (int m = b; m >= 0; m = g->next[m]) g->cluster[m] = a;
}

OrtStatus* pg_ort_get_capability(OrtEp* self, const OrtGraph* graph,
                                 OrtEpGraphSupportInfo* info) {
  bridge_ep* e = (bridge_ep*)self;
  size_t n = 0;
  OrtStatus* s = CALL(Graph_GetNumNodes, OrtStatus* (*)(const OrtGraph*, size_t*))(graph, &n);
  if (s != NULL || n == 0) return s;
  const OrtNode** nodes = calloc(n, sizeof *nodes);
  int* ok = calloc(n, sizeof *ok);
  node_desc* descs = calloc(n, sizeof *descs);
  int* order = calloc(n, sizeof *order);
  int* indeg = calloc(n, sizeof *indeg);
  dag g = {0};
  g.n = (int)n;
  g.pred_start = calloc(n + 1, sizeof(int));
  g.succ_start = calloc(n + 2, sizeof(int));
  g.cluster = calloc(n, sizeof(int));
  g.next = calloc(n, sizeof(int));
  g.mark = calloc(n, sizeof(int));
  g.stack = calloc(n, sizeof(int));
  name_map producers = {0};
  if (!nodes || !ok || !descs || !order || !indeg || !g.pred_start || !g.succ_start ||
      !g.cluster || !g.next || !g.mark || !g.stack || !map_init(&producers, n)) {
    s = pg_ort_status(PG_ORT_FAIL, "pluggable: out of memory in GetCapability");
    goto done;
  }
  s = CALL(Graph_GetNodes, OrtStatus* (*)(const OrtGraph*, const OrtNode**, size_t))(graph,
                                                                                    nodes, n);
  if (s != NULL) goto done;
  /* Which nodes the device runs; the producer of each output name (of
   * every node: a path through a node the bridge does not take is still a
   * path). */
  for (size_t i = 0; i < n; i++) {
    ok[i] = describe(nodes[i], &descs[i]) && supported(e->device_type, nodes[i]);
    const void** outs = NULL;
    size_t nout = 0;
    if ((s = node_values(nodes[i], 1, &outs, &nout))) {
      free(outs);
      goto done;
    }
    for (size_t k = 0; k < nout; k++) {
      const char* name = value_name(outs[k]);
      if (name == NULL) continue;
      if (producers.count * 2 >= producers.cap && !map_grow(&producers)) {
        free(outs);
        s = pg_ort_status(PG_ORT_FAIL, "pluggable: out of memory in GetCapability");
        goto done;
      }
      map_put(&producers, name, (int)i);
    }
    free(outs);
  }
  /* Edges from producers to consumers (two passes: count, then fill). */
  size_t num_edges = 0;
  for (int pass = 0; pass < 2; pass++) {
    for (size_t i = 0; i < n; i++) {
      const void** ins = NULL;
      size_t nin = 0;
      if (pass == 0) g.pred_start[i + 1] = g.pred_start[i];
      if ((s = node_values(nodes[i], 0, &ins, &nin))) {
        free(ins);
        goto done;
      }
      for (size_t k = 0; k < nin; k++) {
        const char* name = value_name(ins[k]);
        int p = name ? map_get(&producers, name) : -1;
        if (p < 0 || p == (int)i) continue;
        if (pass == 0) {
          g.pred_start[i + 1]++;
          num_edges++;
        } else {
          g.pred[g.pred_start[i] + indeg[i]++] = p;
        }
      }
      free(ins);
    }
    if (pass == 0) {
      g.pred = calloc(num_edges + 1, sizeof(int));
      g.succ = calloc(num_edges + 1, sizeof(int));
      if (!g.pred || !g.succ) {
        s = pg_ort_status(PG_ORT_FAIL, "pluggable: out of memory in GetCapability");
        goto done;
      }
    }
  }
  /* Successors (CSR from the predecessor lists). */
  for (size_t i = 0; i < n; i++)
    for (int k = g.pred_start[i]; k < g.pred_start[i + 1]; k++) g.succ_start[g.pred[k] + 2]++;
  for (size_t i = 0; i < n; i++) g.succ_start[i + 2] += g.succ_start[i + 1];
  for (size_t i = 0; i < n; i++)
    for (int k = g.pred_start[i]; k < g.pred_start[i + 1]; k++)
      g.succ[g.succ_start[g.pred[k] + 1]++] = (int)i;
  /* Topological order (Kahn); a node in a cycle (none in a valid graph) is
   * left out of every partition. */
  int head = 0, tail = 0;
  for (size_t i = 0; i < n; i++) {
    indeg[i] = g.pred_start[i + 1] - g.pred_start[i];
    if (indeg[i] == 0) order[tail++] = (int)i;
    g.cluster[i] = (int)i;
    g.next[i] = -1;
  }
  while (head < tail) {
    int v = order[head++];
    for (int k = g.succ_start[v]; k < g.succ_start[v + 1]; k++)
      if (--indeg[g.succ[k]] == 0) order[tail++] = g.succ[k];
  }
  /* Greedy merging in topological order: a supported node joins the
   * partition of each supported producer unless that would make the
   * partition depend on itself. */
  for (int oi = 0; oi < tail; oi++) {
    int v = order[oi];
    if (!ok[v]) continue;
    for (int k = g.pred_start[v]; k < g.pred_start[v + 1]; k++) {
      int u = g.pred[k];
      if (!ok[u]) continue;
      int a = g.cluster[u], b = g.cluster[v];
      if (a == b) continue;
      if (reaches_around(&g, a, b) || reaches_around(&g, b, a)) continue;
      merge(&g, a, b);
    }
  }
  /* One fused node per partition, its nodes in topological order. */
  OrtNodeFusionOptions opts = {PG_ORT_API_VERSION, true};
  const OrtNode** group = calloc(n, sizeof *group);
  if (group == NULL) {
    s = pg_ort_status(PG_ORT_FAIL, "pluggable: out of memory in GetCapability");
    goto done;
  }
  for (int oi = 0; oi < tail && s == NULL; oi++) {
    int c = order[oi];
    if (!ok[c] || g.cluster[c] != c) continue;
    size_t m = 0;
    for (int oj = 0; oj < tail; oj++)
      if (ok[order[oj]] && g.cluster[order[oj]] == c) group[m++] = nodes[order[oj]];
    s = API_FN(pg_ort_ep, PG_ORTEP_EpGraphSupportInfo_AddNodesToFuse,
               OrtStatus* (*)(OrtEpGraphSupportInfo*, const OrtNode* const*, size_t,
                              const OrtNodeFusionOptions*))(info, group, m, &opts);
  }
  free(group);
done:
  free(nodes), free(ok), free(descs), free(order), free(indeg);
  free(g.pred_start), free(g.succ_start), free(g.pred), free(g.succ);
  free(g.cluster), free(g.next), free(g.mark), free(g.stack);
  map_free(&producers);
  return s;
}

/*** Compute ***/

static OrtStatus* part_create_state(OrtNodeComputeInfo* self, OrtNodeComputeContext* ctx,
                                    void** state) {
  (void)ctx;
  *state = self;
  return NULL;
}
static void part_release_state(OrtNodeComputeInfo* self, void* state) { (void)self, (void)state; }

/* Shape and element type of an ORT tensor. */
static OrtStatus* ort_shape(const OrtValue* v, int* type, int64_t* dims, size_t* rank) {
  void* tsi = NULL;
  OrtStatus* err = CALL(GetTensorTypeAndShape, OrtStatus* (*)(const OrtValue*, void**))(v, &tsi);
  if (err != NULL) return err;
  err = CALL(GetTensorElementType, OrtStatus* (*)(const void*, int*))(tsi, type);
  if (err == NULL) err = CALL(GetDimensionsCount, OrtStatus* (*)(const void*, size_t*))(tsi, rank);
  if (err == NULL && *rank > TF_MAX_DIMS)
    err = pg_ort_status(PG_ORT_INVALID_ARGUMENT, "pluggable: a tensor of rank %zu (at most %d)",
                        *rank, TF_MAX_DIMS);
  if (err == NULL)
    err = CALL(GetDimensions, OrtStatus* (*)(const void*, int64_t*, size_t))(tsi, dims, *rank);
  CALL(ReleaseTensorTypeAndShapeInfo, void (*)(void*))(tsi);
  return err;
}

static size_t count_of(const int64_t* dims, size_t rank) {
  size_t c = 1;
  for (size_t d = 0; d < rank; d++) c *= (size_t)dims[d];
  return c;
}

static OrtStatus* part_compute(OrtNodeComputeInfo* self, void* state, OrtKernelContext* ctx) {
  (void)state;
  bridge_part* p = (bridge_part*)self;
  TF_Tensor** vals = calloc((size_t)p->num_slots + 1, sizeof *vals);
  if (vals == NULL) return pg_ort_status(PG_ORT_FAIL, "pluggable: out of memory in %s", p->name);
  TF_Status* st = TF_NewStatus();
  OrtStatus* err = NULL;
  for (int i = 0; i < p->num_inputs && err == NULL; i++) {
    int slot = p->in_slot[i];
    if (slot < 0) continue;
    const OrtValue* v = NULL;
    int type = 0;
    int64_t dims[TF_MAX_DIMS];
    size_t rank = 0;
    void* data = NULL;
    if ((err = CALL(KernelContext_GetInput,
                    OrtStatus* (*)(OrtKernelContext*, size_t, const OrtValue**))(ctx, i, &v)))
      break;
    if (v == NULL) {
      err = pg_ort_status(PG_ORT_INVALID_ARGUMENT, "pluggable: partition %s: input '%s' is "
                          "missing", p->name, p->slot_name[slot]);
      break;
    }
    if ((err = ort_shape(v, &type, dims, &rank))) break;
    if (type != p->in_type[i]) {
      err = pg_ort_status(PG_ORT_INVALID_ARGUMENT, "pluggable: partition %s: input '%s' is %s, "
                          "compiled for %s", p->name, p->slot_name[slot], onnx_type_name(type),
                          onnx_type_name(p->in_type[i]));
      break;
    }
    if ((err = CALL(GetTensorMutableData, OrtStatus* (*)(OrtValue*, void**))((OrtValue*)v, &data)))
      break;
    TF_DataType t = tf_type(type);
    vals[slot] = pg_tensor_from_host(p->dev, t, dims, (int)rank, data,
                                     count_of(dims, rank) * elem_size(t), st);
    if (vals[slot] == NULL)
      err = pg_ort_status(PG_ORT_RUNTIME_EXCEPTION, "pluggable: partition %s: copying input '%s' "
                          "to %s failed: %s", p->name, p->slot_name[slot], p->dev->name,
                          TF_Message(st));
    else
      COUNT(host_copies, 1);
  }
  for (int si = 0; si < p->num_steps && err == NULL; si++) {
    step* s = &p->steps[si];
    TF_Tensor* in[2] = {NULL, NULL};
    for (int k = 0; k < s->nin; k++) in[k] = p->consts[s->in[k]] ? p->consts[s->in[k]] : vals[s->in[k]];
    TF_Tensor* out = pg_kernel_run1(s->kernel, in, NULL, st);
    if (out == NULL) {
      err = pg_ort_status(PG_ORT_RUNTIME_EXCEPTION, "pluggable: node '%s' (ONNX %s, kernel %s on "
                          "%s) failed: %s", p->node_name[s->node] ? p->node_name[s->node] : "?",
                          p->node_op[s->node] ? p->node_op[s->node] : "?", s->tf, p->dev->name,
                          TF_Message(st));
      break;
    }
    COUNT(kernel_runs, 1);
    if (vals[s->out]) TF_DeleteTensor(vals[s->out]);
    vals[s->out] = out;
    /* Values no later step reads leave the device now. */
    for (int k = 0; k < s->nin; k++) {
      int slot = s->in[k];
      if (p->last_use[slot] == si && !p->is_output[slot] && vals[slot]) {
        TF_DeleteTensor(vals[slot]);
        vals[slot] = NULL;
      }
    }
  }
  for (int j = 0; j < p->num_outputs && err == NULL; j++) {
    TF_Tensor* t = vals[p->out_slot[j]];
    if (t == NULL) t = p->consts[p->out_slot[j]];
    if (t == NULL) {
      err = pg_ort_status(PG_ORT_FAIL, "pluggable: partition %s: output '%s' was not computed",
                          p->name, p->slot_name[p->out_slot[j]]);
      break;
    }
    TF_DataType want = tf_type(p->out_type[j]);
    if (TF_TensorType(t) != want) {
      err = pg_ort_status(PG_ORT_FAIL, "pluggable: partition %s: output '%s' has dtype %d, not "
                          "%s", p->name, p->slot_name[p->out_slot[j]], (int)TF_TensorType(t),
                          onnx_type_name(p->out_type[j]));
      break;
    }
    int nd = TF_NumDims(t);
    int64_t dims[TF_MAX_DIMS];
    for (int d = 0; d < nd; d++) dims[d] = TF_Dim(t, d);
    OrtValue* ov = NULL;
    void* data = NULL;
    err = CALL(KernelContext_GetOutput, OrtStatus* (*)(OrtKernelContext*, size_t,
                                                      const int64_t*, size_t, OrtValue**))(
        ctx, j, dims, (size_t)nd, &ov);
    if (err == NULL) err = CALL(GetTensorMutableData, OrtStatus* (*)(OrtValue*, void**))(ov, &data);
    if (err != NULL) break;
    pg_tensor_to_host(t, data, count_of(dims, (size_t)nd) * elem_size(want), st);
    if (TF_GetCode(st) != TF_OK) {
      const char* op = pg_tensor_failed_op(t);
      err = pg_ort_status(PG_ORT_RUNTIME_EXCEPTION, "pluggable: partition %s: output '%s' "
                          "failed on %s%s%s: %s", p->name, p->slot_name[p->out_slot[j]],
                          p->dev->name, op ? " in kernel " : "", op ? op : "", TF_Message(st));
      break;
    }
    COUNT(host_copies, 1);
  }
  for (int i = 0; i < p->num_slots; i++)
    if (vals[i]) TF_DeleteTensor(vals[i]);
  free(vals);
  TF_DeleteStatus(st);
  return err;
}

/*** Compile ***/

/* Uploads the constant initializer `vi` named `name` into a new slot. */
static OrtStatus* upload_initializer(bridge_part* p, const void* vi, const char* name,
                                     int* slot) {
  bool constant = false;
  const OrtValue* v = NULL;
  OrtStatus* s = CALL(ValueInfo_IsConstantInitializer, OrtStatus* (*)(const void*, bool*))(
      vi, &constant);
  if (s != NULL) return s;
  if (!constant)
    return pg_ort_status(PG_ORT_FAIL, "pluggable: partition %s: value '%s' is neither an input "
                         "of the partition nor computed in it", p->name, name);
  s = CALL(ValueInfo_GetInitializerValue, OrtStatus* (*)(const void*, const OrtValue**))(vi, &v);
  if (s != NULL) return s;
  int type = 0;
  int64_t dims[TF_MAX_DIMS];
  size_t rank = 0;
  void* data = NULL;
  if ((s = ort_shape(v, &type, dims, &rank))) return s;
  if ((s = CALL(GetTensorMutableData, OrtStatus* (*)(OrtValue*, void**))((OrtValue*)v, &data)))
    return s;
  TF_DataType t = tf_type(type);
  if (t == 0)
    return pg_ort_status(PG_ORT_FAIL, "pluggable: partition %s: initializer '%s' is %s",
                         p->name, name, onnx_type_name(type));
  *slot = new_slot(p, name);
  if (*slot < 0) return pg_ort_status(PG_ORT_FAIL, "pluggable: out of memory");
  TF_Status* st = TF_NewStatus();
  p->consts[*slot] = pg_tensor_from_host(p->dev, t, dims, (int)rank, data,
                                         count_of(dims, rank) * elem_size(t), st);
  if (p->consts[*slot] == NULL)
    s = pg_ort_status(PG_ORT_FAIL, "pluggable: partition %s: copying initializer '%s' to %s "
                      "failed: %s", p->name, name, p->dev->name, TF_Message(st));
  else
    COUNT(host_copies, 1);
  TF_DeleteStatus(st);
  return s;
}

static OrtStatus* compile_one(bridge_ep* e, const OrtGraph* graph, const OrtNode* fused,
                              bridge_part** out) {
  bridge_part* p = calloc(1, sizeof *p);
  if (p == NULL) return pg_ort_status(PG_ORT_FAIL, "pluggable: out of memory");
  __atomic_add_fetch(&live_parts, 1, __ATOMIC_SEQ_CST);
  p->dev = e->dev;
  const char* fname = NULL;
  OrtStatus* s = CALL(Node_GetName, OrtStatus* (*)(const OrtNode*, const char**))(fused, &fname);
  snprintf(p->name, sizeof p->name, "%s", s == NULL && fname ? fname : "?");
  pg_ort_drop(s);
  const void** fin = NULL;
  const void** fout = NULL;
  const OrtNode** nodes = NULL;
  node_desc* descs = NULL;
  int* placed = NULL;
  size_t nfin = 0, nfout = 0, n = 0;
  if ((s = node_values(fused, 0, &fin, &nfin)) || (s = node_values(fused, 1, &fout, &nfout)))
    goto fail;
  /* The inputs ONNX Runtime passes, in its order. */
  p->num_inputs = (int)nfin;
  p->in_slot = calloc(nfin + 1, sizeof(int));
  p->in_type = calloc(nfin + 1, sizeof(int));
  p->num_outputs = (int)nfout;
  p->out_slot = calloc(nfout + 1, sizeof(int));
  p->out_type = calloc(nfout + 1, sizeof(int));
  if (!p->in_slot || !p->in_type || !p->out_slot || !p->out_type) {
    s = pg_ort_status(PG_ORT_FAIL, "pluggable: out of memory");
    goto fail;
  }
  for (size_t i = 0; i < nfin; i++) {
    const char* name = value_name(fin[i]);
    int rank;
    value_type(fin[i], &p->in_type[i], &rank);
    p->in_slot[i] = name ? new_slot(p, name) : -1;
  }
  /* The partition's nodes, in an order where producers come first. */
  if ((s = CALL(Graph_GetNumNodes, OrtStatus* (*)(const OrtGraph*, size_t*))(graph, &n)))
    goto fail;
  nodes = calloc(n + 1, sizeof *nodes);
  descs = calloc(n + 1, sizeof *descs);
  placed = calloc(n + 1, sizeof *placed);
  p->node_name = calloc(n + 1, sizeof *p->node_name);
  p->node_op = calloc(n + 1, sizeof *p->node_op);
  if (!nodes || !descs || !placed || !p->node_name || !p->node_op) {
    s = pg_ort_status(PG_ORT_FAIL, "pluggable: out of memory");
    goto fail;
  }
  if ((s = CALL(Graph_GetNodes, OrtStatus* (*)(const OrtGraph*, const OrtNode**, size_t))(
           graph, nodes, n)))
    goto fail;
  for (size_t i = 0; i < n; i++)
    if (!describe(nodes[i], &descs[i])) {
      s = pg_ort_status(PG_ORT_FAIL, "pluggable: partition %s: a node the bridge cannot read",
                        p->name);
      goto fail;
    }
  for (size_t done = 0; done < n;) {
    size_t before = done;
    for (size_t i = 0; i < n; i++) {
      if (placed[i]) continue;
      const node_desc* d = &descs[i];
      int ready = 1;
      for (int k = 0; k < d->nin && ready; k++) {
        if (d->in_name[k] == NULL || find_slot(p, d->in_name[k]) >= 0) continue;
        for (size_t j = 0; j < n; j++)
          if (j != i && strcmp(descs[j].out_name, d->in_name[k]) == 0) ready = 0;
      }
      if (!ready) continue;
      /* Lower it. */
      int in[MAX_IO] = {-1, -1, -1};
      for (int k = 0; k < d->nin; k++) {
        if (d->in_name[k] == NULL) continue;
        in[k] = find_slot(p, d->in_name[k]);
        if (in[k] < 0 && (s = upload_initializer(p, d->in_vi[k], d->in_name[k], &in[k])))
          goto fail;
      }
      char w[300];
      who(w, sizeof w, d);
      int node_index = p->num_nodes++;
      p->node_name[node_index] = strdup(d->name);
      p->node_op[node_index] = strdup(d->op);
      int outs = new_slot(p, d->out_name);
      if (outs < 0) {
        s = pg_ort_status(PG_ORT_FAIL, "pluggable: out of memory");
        goto fail;
      }
      lowering L;
      memset(&L, 0, sizeof L);
      L.p = p;
      L.device_type = e->device_type;
      L.dev = e->dev;
      L.node = node_index;
      L.who = w;
      int r = lower(&L, d, in, outs);
      if (r != 1) {
        s = pg_ort_status(PG_ORT_FAIL, "%s", L.err[0] ? L.err : "pluggable: lowering failed");
        goto fail;
      }
      placed[i] = 1;
      done++;
    }
    if (done == before) {
      s = pg_ort_status(PG_ORT_FAIL, "pluggable: partition %s: its nodes depend on each other "
                        "in a cycle", p->name);
      goto fail;
    }
  }
  /* Outputs, and the last step reading each slot. */
  for (size_t j = 0; j < nfout; j++) {
    const char* name = value_name(fout[j]);
    int rank;
    value_type(fout[j], &p->out_type[j], &rank);
    p->out_slot[j] = name ? find_slot(p, name) : -1;
    if (p->out_slot[j] < 0) {
      s = pg_ort_status(PG_ORT_FAIL, "pluggable: partition %s: output '%s' is not computed in it",
                        p->name, name ? name : "?");
      goto fail;
    }
    if (tf_type(p->out_type[j]) == 0) {
      s = pg_ort_status(PG_ORT_FAIL, "pluggable: partition %s: output '%s' is %s", p->name, name,
                        onnx_type_name(p->out_type[j]));
      goto fail;
    }
    p->is_output[p->out_slot[j]] = 1;
  }
  for (int si = 0; si < p->num_steps; si++)
    for (int k = 0; k < p->steps[si].nin; k++) p->last_use[p->steps[si].in[k]] = si;
  p->info.ort_version_supported = PG_ORT_API_VERSION;
  p->info.CreateState = part_create_state;
  p->info.Compute = part_compute;
  p->info.ReleaseState = part_release_state;
  COUNT(partitions_compiled, 1);
  COUNT(nodes_compiled, (int64_t)n);
  free(fin), free(fout), free(nodes), free(descs), free(placed);
  *out = p;
  return NULL;
fail:
  free(fin), free(fout), free(nodes), free(descs), free(placed);
  free_part(p);
  return s;
}

OrtStatus* pg_ort_compile(OrtEp* self, const OrtGraph** graphs, const OrtNode** fused,
                          size_t count, OrtNodeComputeInfo** infos, OrtNode** ctx_nodes) {
  (void)ctx_nodes;
  bridge_ep* e = (bridge_ep*)self;
  for (size_t i = 0; i < count; i++) infos[i] = NULL;
  for (size_t i = 0; i < count; i++) {
    bridge_part* p = NULL;
    OrtStatus* s = compile_one(e, graphs[i], fused[i], &p);
    if (s != NULL) {
      for (size_t j = 0; j < i; j++) free_part((bridge_part*)infos[j]), infos[j] = NULL;
      return s;
    }
    infos[i] = &p->info;
  }
  return NULL;
}

void pg_ort_release_infos(OrtEp* self, OrtNodeComputeInfo** infos, size_t count) {
  (void)self;
  for (size_t i = 0; i < count; i++) free_part((bridge_part*)infos[i]);
}
