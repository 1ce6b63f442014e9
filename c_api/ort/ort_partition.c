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
 * device once, here (ONNX Runtime is told not to pass them); arguments a
 * kernel reads in host memory (a permutation, an axis, a shape) are host
 * constants made from the node's attributes or initializers; a step whose
 * inputs are all constants runs here, once, and its result becomes a
 * constant. Compute reads the partition's other inputs where ONNX Runtime
 * keeps them (in place in the device's memory, which ort_memory.c
 * allocates; copied in from host memory), runs the steps in order with
 * every intermediate value staying in device memory (freed after its last
 * reader), and writes only the partition's outputs into ONNX Runtime's
 * tensors (within the device, or copied out to host memory). */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ort_bridge.h"
#include "ort_op_table.h"

/*** Counters (for tests and diagnostics) ***/

static int64_t kernel_runs, partitions_compiled, nodes_compiled;
static int64_t live_parts;

#define COUNT(var, n) __atomic_add_fetch(&(var), (n), __ATOMIC_SEQ_CST)
#define READ(var) __atomic_load_n(&(var), __ATOMIC_SEQ_CST)

/* Plugin kernel runs of claimed nodes so far (a Gemm lowered to MatMul and
 * Add counts two). */
PG_EXPORT int64_t pg_ort_kernel_runs(void) { return READ(kernel_runs); }
/* (host copies: pg_ort_host_copies, ort_memory.c) */
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
    /* (no row runs bool data; Where's condition and Cast's result are) */
    case PG_ONNX_BOOL: return TF_BOOL;
    default: return (TF_DataType)0;
  }
}

static const char* onnx_type_name(int onnx) {
  switch (onnx) {
    case PG_ONNX_FLOAT: return "float";
    case PG_ONNX_DOUBLE: return "double";
    case PG_ONNX_INT32: return "int32";
    case PG_ONNX_INT64: return "int64";
    case PG_ONNX_BOOL: return "bool";
    default: return "an element type the bridge does not run";
  }
}

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

#define MAX_IO 32

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
  int64_t dims0[TF_MAX_DIMS];     /* input 0's dims, -1 where not static */
  const char* out_name;
  int out_type;
  int out_rank;                   /* 0 also when the shape is unknown */
  int64_t out_dims[TF_MAX_DIMS];  /* -1 where not static */
} node_desc;

/* The element type and rank a value info declares (0 and 0 if not a tensor). */
static void value_type_dims(const void* vi, int* type, int* rank, int64_t* dims) {
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
  if (dims != NULL && r <= TF_MAX_DIMS &&
      (s = CALL(GetDimensions, OrtStatus* (*)(const void*, int64_t*, size_t))(tsi, dims, r))) {
    pg_ort_drop(s);
    for (size_t k = 0; k < r; k++) dims[k] = -1;
  }
}

static void value_type(const void* vi, int* type, int* rank) {
  value_type_dims(vi, type, rank, NULL);
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
  if ((s = CALL(Node_GetOperatorType, OrtStatus* (*)(const OrtNode*, const char**))(node,
                                                                                   &d->op)) ||
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
    value_type_dims(d->in_vi[i], &d->in_type[i], &d->in_rank[i], i == 0 ? d->dims0 : NULL);
  }
  d->out_name = value_name(out_vi);
  value_type_dims(out_vi, &d->out_type, &d->out_rank, d->out_dims);
  if (d->name == NULL) d->name = "";
  return d->out_name != NULL;
}

/* Attribute `name` of the node read as `type` into `out` (`cap` bytes):
 * 1 (and *len, the bytes it holds) when present, 0 when absent, -1 when of
 * another type or larger than `cap`. */
static int read_attr(const node_desc* d, const char* name, int type, void* out, size_t cap,
                     size_t* len) {
  const void* a = NULL;
  size_t got = 0;
  OrtStatus* s = CALL(Node_GetAttributeByName,
                      OrtStatus* (*)(const OrtNode*, const char*, const void**))(d->node, name, &a);
  if (s != NULL || a == NULL) {
    pg_ort_drop(s);
    return 0;
  }
  s = CALL(ReadOpAttr, OrtStatus* (*)(const void*, int, void*, size_t, size_t*))(a, type, out,
                                                                                 cap, &got);
  if (s != NULL) {
    pg_ort_drop(s);
    return -1;
  }
  if (len) *len = got;
  return 1;
}

static int attr_int(const node_desc* d, const char* name, int64_t* out) {
  return read_attr(d, name, PG_ORT_OP_ATTR_INT, out, sizeof *out, NULL);
}

static int attr_float(const node_desc* d, const char* name, float* out) {
  return read_attr(d, name, PG_ORT_OP_ATTR_FLOAT, out, sizeof *out, NULL);
}

/* An INTS attribute of exactly `n` values (absent: *out unchanged, 1). */
static int attr_ints(const node_desc* d, const char* name, int64_t* out, int n) {
  int64_t buf[16];
  size_t len = 0;
  int r = read_attr(d, name, PG_ORT_OP_ATTR_INTS, buf, sizeof buf, &len);
  if (r == 0) return 1;
  if (r < 0 || len != (size_t)n * sizeof(int64_t)) return 0;
  memcpy(out, buf, len);
  return 1;
}

/* An INTS attribute of at most `cap` values into `out`, their count in *n:
 * 1 present, 0 absent (*n = 0), -1 unreadable or longer. */
static int attr_ints_upto(const node_desc* d, const char* name, int64_t* out, int cap, int* n) {
  size_t len = 0;
  *n = 0;
  int r = read_attr(d, name, PG_ORT_OP_ATTR_INTS, out, (size_t)cap * sizeof(int64_t), &len);
  if (r == 1) *n = (int)(len / sizeof(int64_t));
  return r;
}

/* A STRING attribute (absent: `dflt`); 0 when unreadable. */
static int attr_string(const node_desc* d, const char* name, char* out, size_t cap,
                       const char* dflt) {
  size_t len = 0;
  int r = read_attr(d, name, PG_ORT_OP_ATTR_STRING, out, cap - 1, &len);
  if (r == 0) snprintf(out, cap, "%s", dflt);
  else if (r < 0 || len >= cap) return 0;
  else out[len] = '\0';
  return 1;
}

/*** The op table ***/

/* OPS[] (ort_op_table.h) is generated by setup.py from
 * pluggable/onnx/ort_ops.py, the table pg.onnx's importer shares: per ONNX
 * op, its lowering kind (a case of lower() below), the plugin ops the
 * lowering emits, its element types and the schema versions claimed. */

static const op_entry* find_entry(const char* onnx) {
  for (size_t i = 0; i < sizeof OPS / sizeof OPS[0]; i++)
    if (strcmp(OPS[i].onnx, onnx) == 0) return &OPS[i];
  return NULL;
}

/* The op table as text, one line per ONNX op: "Add float double int32
 * int64" (the element types its lowering is exact for). Whether a node is
 * claimed also depends on the plugin's kernels and the node's attributes;
 * `python -m pluggable check --onnxruntime` builds a model for each entry. */
static char op_table_text[PG_ORT_OP_TEXT_MAX];
static pthread_once_t op_table_once = PTHREAD_ONCE_INIT;

static void fill_op_table(void) {
  static const int types[] = {PG_ONNX_FLOAT, PG_ONNX_DOUBLE, PG_ONNX_INT32, PG_ONNX_INT64};
  size_t len = 0;
  for (size_t i = 0; i < sizeof OPS / sizeof OPS[0]; i++) {
    len += (size_t)snprintf(op_table_text + len, sizeof op_table_text - len, "%s", OPS[i].onnx);
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
      if (OPS[i].types & type_bit(types[t]))
        len += (size_t)snprintf(op_table_text + len, sizeof op_table_text - len, " %s",
                                onnx_type_name(types[t]));
    len += (size_t)snprintf(op_table_text + len, sizeof op_table_text - len, "\n");
  }
}

PG_EXPORT const char* pg_ort_op_table(void) {
  pthread_once(&op_table_once, fill_op_table);
  return op_table_text;
}

/* The rest of each row, one line per ONNX op: "Conv kind=conv opsets=1-
 * tf=Conv2D aux=Transpose,BiasAdd" (its lowering kind, the schema versions
 * claimed, the plugin ops it computes with and the ones it adds), as
 * pluggable.onnx.ort_ops.lowerings_text() writes it. */
static char op_lowerings_text[PG_ORT_OP_TEXT_MAX];
static pthread_once_t op_lowerings_once = PTHREAD_ONCE_INIT;

/* Appends to op_lowerings_text at `len` (PG_ORT_OP_TEXT_MAX holds it all;
 * past the end, nothing more is written); the new length. */
static size_t put_text(size_t len, const char* fmt, ...) {
  size_t cap = sizeof op_lowerings_text;
  if (len >= cap) return len;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(op_lowerings_text + len, cap - len, fmt, ap);
  va_end(ap);
  return n < 0 ? cap : len + (size_t)n;
}

static size_t put_names(size_t len, const char* key, const char* const* names) {
  len = put_text(len, " %s=", key);
  for (size_t k = 0; names[k] != NULL; k++) len = put_text(len, "%s%s", k ? "," : "", names[k]);
  return len;
}

static void fill_op_lowerings(void) {
  size_t len = 0;
  for (size_t i = 0; i < sizeof OPS / sizeof OPS[0]; i++) {
    const op_entry* e = &OPS[i];
    len = put_text(len, "%s kind=%s opsets=%d-", e->onnx, e->kind_name, e->since);
    if (e->until < PG_ORT_OPEN_OPSET) len = put_text(len, "%d", e->until);
    len = put_names(len, "tf", e->tf);
    len = put_names(len, "aux", e->aux);
    len = put_text(len, "\n");
  }
}

PG_EXPORT const char* pg_ort_op_lowerings(void) {
  pthread_once(&op_lowerings_once, fill_op_lowerings);
  return op_lowerings_text;
}

/*** Compiled partitions ***/

typedef struct step {
  pg_kernel* kernel;
  const char* tf;
  int nin;
  int* in;
  int out;
  int node; /* index into the partition's node names */
} step;

typedef struct bridge_part {
  OrtNodeComputeInfo info; /* first */
  pg_device* dev;
  char name[128];          /* the fused node's name */
  /* Value slots, by name; temporaries and constants the lowering makes have
   * no name. */
  int num_slots, cap_slots;
  char** slot_name;
  TF_Tensor** consts;      /* per slot: a constant (device or host), or NULL */
  void** host_buf;         /* per slot: the memory of a host constant */
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
  for (int i = 0; i < p->num_steps; i++) {
    if (p->steps[i].kernel) pg_kernel_release(p->steps[i].kernel);
    free(p->steps[i].in);
  }
  for (int i = 0; i < p->num_slots; i++) {
    free(p->slot_name[i]);
    if (p->consts[i]) TF_DeleteTensor(p->consts[i]);
    free(p->host_buf[i]);
  }
  for (int i = 0; i < p->num_nodes; i++) free(p->node_name[i]), free(p->node_op[i]);
  free(p->slot_name), free(p->consts), free(p->host_buf), free(p->last_use), free(p->is_output);
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
    void** h = realloc(p->host_buf, cap * sizeof *h);
    if (h) p->host_buf = h;
    int* l = realloc(p->last_use, cap * sizeof *l);
    if (l) p->last_use = l;
    int* o = realloc(p->is_output, cap * sizeof *o);
    if (o) p->is_output = o;
    if (!n || !c || !h || !l || !o) return -1;
    p->cap_slots = cap;
  }
  int s = p->num_slots++;
  p->slot_name[s] = name ? strdup(name) : NULL;
  p->consts[s] = NULL;
  p->host_buf[s] = NULL;
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
  const char* who; /* "'name' (Op)" */
  const op_entry* entry; /* its row of OPS[] */
  /* For the next emit only: type attributes besides "T" that select and
   * configure its kernel (Cast's SrcT, DstT), and its output's dtype when
   * not the input's (0). */
  int ntypes;
  const char* type_attr[3];
  TF_DataType type_val[3];
  TF_DataType out_t;
  char err[1024];
} lowering;

/* The next step's extra type attributes (up to three) and output dtype. */
static void next_types(lowering* L, TF_DataType out_t, int n, const char* a0, TF_DataType t0,
                       const char* a1, TF_DataType t1, const char* a2, TF_DataType t2) {
  L->out_t = out_t;
  L->ntypes = n;
  L->type_attr[0] = a0, L->type_val[0] = t0;
  L->type_attr[1] = a1, L->type_val[1] = t1;
  L->type_attr[2] = a2, L->type_val[2] = t2;
}

#define MAX_STEP_IN 64

/* Whether `tf` is one of the NULL-terminated `names`. */
static int listed(const char* const* names, const char* tf) {
  for (; *names != NULL; names++)
    if (strcmp(*names, tf) == 0) return 1;
  return 0;
}

/* The kernels whose attributes (a data_format, a window) a plugin may
 * accept or refuse at creation: GetCapability tries creating them. */
static int layout_sensitive(const char* tf) {
  static const char* const names[] = {"Conv2D", "MaxPool", "AvgPool", "BiasAdd",
                                      "FusedBatchNormV3", NULL};
  return listed(names, tf);
}

/* Whether `def`'s kernel can be made on `dev` with `attrs` (not taken):
 * made once and dropped; if not, the plugin's message goes to `why`. */
static int kernel_creates(pg_kernel_def* def, pg_device* dev, pg_attrs* attrs, int nin,
                          const char* const* names, const unsigned char* in_host,
                          TF_DataType out_t, char* why, size_t why_size) {
  unsigned char out_host = 0;
  TF_Status* st = TF_NewStatus();
  pg_kernel* k = pg_kernel_create(def, dev, attrs, nin, names, in_host, 1, &out_t, &out_host,
                                  st);
  if (k == NULL) snprintf(why, why_size, "%s", TF_Message(st));
  else pg_kernel_free(k);
  TF_DeleteStatus(st);
  return k != NULL;
}

/* One step: kernel `tf` for dtype `t` over slots `in` (named `names`, the
 * plugin op's input names; bit i of `host` set: input i is a host
 * constant) into slot `out`, created with `attrs` (taken: freed here, may
 * be NULL for just "T"). Returns 1, 0 (an op the node's row of OPS[] does
 * not name, no such kernel, or one that wants other inputs in host memory)
 * or -1 (the kernel could not be created: L->err). */
static int emit(lowering* L, const char* tf, TF_DataType t, int nin, const char* const* names,
                const int* in, uint64_t host, int out, pg_attrs* attrs) {
  int ntypes = L->ntypes;
  const char* type_attr[3] = {L->type_attr[0], L->type_attr[1], L->type_attr[2]};
  TF_DataType type_val[3] = {L->type_val[0], L->type_val[1], L->type_val[2]};
  TF_DataType out_t = L->out_t ? L->out_t : t;
  L->ntypes = 0;
  L->out_t = (TF_DataType)0;
  /* A lowering emits only the ops its row names, so that the table says
   * what the bridge runs. */
  if (L->entry == NULL || !(listed(L->entry->tf, tf) || listed(L->entry->aux, tf))) {
    snprintf(L->err, sizeof L->err, "pluggable: node %s: the %s lowering emits %s, which the "
             "op table (pluggable/onnx/ort_ops.py) does not list for %s", L->who,
             L->entry ? L->entry->kind_name : "?", tf, L->entry ? L->entry->onnx : "?");
    if (attrs) pg_attrs_free(attrs);
    return 0;
  }
  pg_kernel_def* def = ntypes ? pg_ort_find_kernel_typed(tf, L->device_type, ntypes, type_attr,
                                                         type_val)
                              : pg_ort_find_kernel(tf, L->device_type, t);
  if (attrs != NULL)
    for (int k = 0; k < ntypes; k++) pg_attrs_set_type(attrs, type_attr[k], type_val[k]);
  unsigned char in_host[MAX_STEP_IN];
  int r = 1;
  if (def == NULL) {
    snprintf(L->err, sizeof L->err, "pluggable: node %s: no %s kernel of dtype %d on %s", L->who,
             tf, (int)t, L->device_type);
    r = 0;
  }
  for (int i = 0; r == 1 && i < nin; i++) {
    in_host[i] = 0;
    for (int h = 0; h < def->num_host_args; h++)
      if (strcmp(def->host_args[h], names[i]) == 0) in_host[i] = 1;
    if (in_host[i] != ((host >> i) & 1)) {
      snprintf(L->err, sizeof L->err, "pluggable: node %s: the %s kernel on %s reads input '%s' "
               "in %s memory", L->who, tf, L->device_type, names[i],
               in_host[i] ? "host" : "device");
      r = 0;
    }
  }
  bridge_part* p = L->p;
  if (r == 1 && p == NULL && L->dev != NULL && attrs != NULL && layout_sensitive(tf)) {
    /* GetCapability: a kernel whose attributes a plugin may refuse (an NCHW
     * data_format its kernel lacks, say) is created once and dropped, so
     * that a node is claimed only where its kernels can be made. */
    char why[512];
    pg_attrs_set_type(attrs, "T", t);
    if (!kernel_creates(def, L->dev, attrs, nin, names, in_host, out_t, why, sizeof why)) {
      snprintf(L->err, sizeof L->err, "pluggable: node %s: the %s kernel on %s refuses the "
               "node's attributes: %s", L->who, tf, L->device_type, why);
      r = 0;
    }
  }
  if (r != 1 || p == NULL) {
    if (attrs) pg_attrs_free(attrs);
    return r;
  }
  if (attrs == NULL) attrs = pg_attrs_new();
  pg_attrs_set_type(attrs, "T", t);
  for (int k = 0; k < ntypes; k++) pg_attrs_set_type(attrs, type_attr[k], type_val[k]);
  step* s = NULL;
  if (p->num_steps == p->cap_steps) {
    int cap = p->cap_steps ? 2 * p->cap_steps : 8;
    step* grown = realloc(p->steps, cap * sizeof *grown);
    if (grown != NULL) {
      p->steps = grown;
      p->cap_steps = cap;
    }
  }
  int* ins = malloc((size_t)nin * sizeof *ins);
  if (p->num_steps == p->cap_steps || ins == NULL) {
    free(ins);
    pg_attrs_free(attrs);
    snprintf(L->err, sizeof L->err, "pluggable: out of memory compiling %s", L->who);
    return -1;
  }
  unsigned char out_host = 0;
  TF_Status* st = TF_NewStatus();
  pg_kernel* k = pg_kernel_create(def, L->dev, attrs, nin, names, in_host, 1, &out_t, &out_host,
                                  st);
  pg_attrs_free(attrs);
  if (k == NULL) {
    snprintf(L->err, sizeof L->err, "pluggable: node %s: creating kernel %s on %s failed: %s",
             L->who, tf, L->dev->name, TF_Message(st));
    TF_DeleteStatus(st);
    free(ins);
    return -1;
  }
  TF_DeleteStatus(st);
  s = &p->steps[p->num_steps++];
  s->kernel = k;
  s->tf = tf;
  s->nin = nin;
  s->in = ins;
  memcpy(ins, in, (size_t)nin * sizeof *ins);
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
  int32_t i32 = (int32_t)v;
  int64_t i64 = (int64_t)v;
  if (t == TF_FLOAT) memcpy(buf, &f, 4);
  else if (t == TF_INT32) memcpy(buf, &i32, 4);
  else if (t == TF_INT64) memcpy(buf, &i64, 8);
  else memcpy(buf, &v, 8);
  TF_Status* st = TF_NewStatus();
  L->p->consts[s] = pg_tensor_from_host(L->dev, t, NULL, 0, buf, elem_size(t), st);
  if (L->p->consts[s] == NULL) {
    snprintf(L->err, sizeof L->err, "pluggable: node %s: copying a constant to %s failed: %s",
             L->who, L->dev->name, TF_Message(st));
    TF_DeleteStatus(st);
    return -2;
  }
  TF_DeleteStatus(st);
  pg_ort_count_host_copies(1);
  return s;
}

/* A slot holding int32 `v[0..n)` in host memory (a host-memory argument:
 * a permutation, an axis); `n` < 0 makes a scalar. */
static int host_i32_slot(lowering* L, const int32_t* v, int n) {
  if (L->p == NULL) return -1;
  int s = new_slot(L->p, NULL);
  size_t count = n < 0 ? 1 : (size_t)n;
  void* buf = s < 0 ? NULL : malloc(count * 4 + 4);
  if (buf == NULL) {
    snprintf(L->err, sizeof L->err, "pluggable: out of memory compiling %s", L->who);
    return -2;
  }
  memcpy(buf, v, count * 4);
  int64_t dims[1] = {n};
  L->p->host_buf[s] = buf;
  L->p->consts[s] = pg_tensor_wrap_host(TF_INT32, dims, n < 0 ? 0 : 1, buf, count * 4);
  if (L->p->consts[s] == NULL) {
    snprintf(L->err, sizeof L->err, "pluggable: out of memory compiling %s", L->who);
    return -2;
  }
  return s;
}

/* A slot holding `vals` (`count` of them, as dtype `t`: float or double)
 * of shape `dims` on the device (-1 in check mode, -2 on failure). */
static int device_const_slot(lowering* L, TF_DataType t, const int64_t* dims, int nd,
                             const double* vals, size_t count) {
  if (L->p == NULL) return -1;
  int s = new_slot(L->p, NULL);
  size_t es = elem_size(t);
  unsigned char* buf = s < 0 ? NULL : malloc(count * es + 1);
  if (buf == NULL) {
    snprintf(L->err, sizeof L->err, "pluggable: out of memory compiling %s", L->who);
    return -2;
  }
  for (size_t i = 0; i < count; i++) {
    float f = (float)vals[i];
    if (t == TF_FLOAT) memcpy(buf + 4 * i, &f, 4);
    else memcpy(buf + 8 * i, &vals[i], 8);
  }
  TF_Status* st = TF_NewStatus();
  L->p->consts[s] = pg_tensor_from_host(L->dev, t, dims, nd, buf, count * es, st);
  free(buf);
  int ok = L->p->consts[s] != NULL;
  if (!ok)
    snprintf(L->err, sizeof L->err, "pluggable: node %s: copying a constant to %s failed: %s",
             L->who, L->dev->name, TF_Message(st));
  TF_DeleteStatus(st);
  if (!ok) return -2;
  pg_ort_count_host_copies(1);
  return s;
}

/* A slot holding int64 `v[0..n)` in host memory (Reshape's shape). */
static int host_i64_slot(lowering* L, const int64_t* v, int n) {
  if (L->p == NULL) return -1;
  int s = new_slot(L->p, NULL);
  void* buf = s < 0 ? NULL : malloc((size_t)n * 8 + 8);
  if (buf == NULL) {
    snprintf(L->err, sizeof L->err, "pluggable: out of memory compiling %s", L->who);
    return -2;
  }
  memcpy(buf, v, (size_t)n * 8);
  int64_t dims[1] = {n};
  L->p->host_buf[s] = buf;
  L->p->consts[s] = pg_tensor_wrap_host(TF_INT64, dims, 1, buf, (size_t)n * 8);
  if (L->p->consts[s] == NULL) {
    snprintf(L->err, sizeof L->err, "pluggable: out of memory compiling %s", L->who);
    return -2;
  }
  return s;
}

static OrtStatus* ort_shape(const OrtValue* v, int* type, int64_t* dims, size_t* rank);

/* The elements of input `i` of `d` when it is a constant initializer of at
 * most `cap` elements, as doubles (`ints` NULL) or int64 (`dbl` NULL), and
 * their count; -1 when it is not one. */
static int64_t const_input(const node_desc* d, int i, double* dbl, int64_t* ints, size_t cap) {
  bool constant = false;
  const OrtValue* v = NULL;
  if (d->in_vi[i] == NULL) return -1;
  OrtStatus* s = CALL(ValueInfo_IsConstantInitializer, OrtStatus* (*)(const void*, bool*))(
      d->in_vi[i], &constant);
  if (s == NULL && constant)
    s = CALL(ValueInfo_GetInitializerValue, OrtStatus* (*)(const void*, const OrtValue**))(
        d->in_vi[i], &v);
  int type = 0;
  int64_t dims[TF_MAX_DIMS];
  size_t rank = 0;
  void* data = NULL;
  if (s == NULL && v != NULL) s = ort_shape(v, &type, dims, &rank);
  if (s == NULL && v != NULL)
    s = CALL(GetTensorMutableData, OrtStatus* (*)(OrtValue*, void**))((OrtValue*)v, &data);
  if (s != NULL || v == NULL || data == NULL) {
    pg_ort_drop(s);
    return -1;
  }
  size_t n = 1;
  for (size_t k = 0; k < rank; k++) n *= (size_t)dims[k];
  if (n > cap) return -1;
  for (size_t k = 0; k < n; k++) {
    double x;
    int64_t y;
    switch (type) {
      case PG_ONNX_FLOAT: x = ((const float*)data)[k], y = (int64_t)x; break;
      case PG_ONNX_DOUBLE: x = ((const double*)data)[k], y = (int64_t)x; break;
      case PG_ONNX_INT32: y = ((const int32_t*)data)[k], x = (double)y; break;
      case PG_ONNX_INT64: y = ((const int64_t*)data)[k], x = (double)y; break;
      default: return -1;
    }
    if (dbl) dbl[k] = x;
    if (ints) ints[k] = y;
  }
  return (int64_t)n;
}

static int temp_slot(lowering* L) {
  if (L->p == NULL) return -1;
  int s = new_slot(L->p, NULL);
  if (s < 0) snprintf(L->err, sizeof L->err, "pluggable: out of memory compiling %s", L->who);
  return s < 0 ? -2 : s;
}

static const char* const XY[] = {"x", "y"};
static const char* const AB[] = {"a", "b"};

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

static pg_attrs* bool_attrs(const char* a, int va, const char* b, int vb) {
  pg_attrs* attrs = pg_attrs_new();
  pg_attrs_set_bool(attrs, a, va);
  pg_attrs_set_bool(attrs, b, vb);
  return attrs;
}

/* The NCHW window attributes of Conv / MaxPool: strides, pads (ONNX order
 * [h0, w0, h1, w1]), dilations, auto_pad; 0 when not expressible. */
typedef struct window {
  int64_t strides[2], pads[4], dilations[2], kernel[2];
  char padding[16]; /* "EXPLICIT", "VALID" or "SAME" */
} window;

static int read_window(const node_desc* d, window* w) {
  char auto_pad[32];
  w->strides[0] = w->strides[1] = w->dilations[0] = w->dilations[1] = 1;
  memset(w->pads, 0, sizeof w->pads);
  w->kernel[0] = w->kernel[1] = -1;
  if (!attr_ints(d, "strides", w->strides, 2) || !attr_ints(d, "pads", w->pads, 4) ||
      !attr_ints(d, "dilations", w->dilations, 2) || !attr_ints(d, "kernel_shape", w->kernel, 2) ||
      !attr_string(d, "auto_pad", auto_pad, sizeof auto_pad, "NOTSET"))
    return 0;
  if (strcmp(auto_pad, "NOTSET") == 0) snprintf(w->padding, sizeof w->padding, "EXPLICIT");
  else if (strcmp(auto_pad, "VALID") == 0) snprintf(w->padding, sizeof w->padding, "VALID");
  /* TensorFlow's SAME puts the odd padding element at the end, as SAME_UPPER. */
  else if (strcmp(auto_pad, "SAME_UPPER") == 0) snprintf(w->padding, sizeof w->padding, "SAME");
  else return 0;
  if (strcmp(w->padding, "EXPLICIT") != 0) memset(w->pads, 0, sizeof w->pads);
  for (int i = 0; i < 4; i++)
    if (w->pads[i] < 0) return 0;
  return w->strides[0] > 0 && w->strides[1] > 0 && w->dilations[0] > 0 && w->dilations[1] > 0;
}

static void window_attrs_in(pg_attrs* a, const window* w, int nhwc) {
  int64_t strides[4] = {1, 1, w->strides[0], w->strides[1]};
  int64_t pads[8] = {0, 0, 0, 0, w->pads[0], w->pads[2], w->pads[1], w->pads[3]};
  if (nhwc) {
    int64_t s2[4] = {1, w->strides[0], w->strides[1], 1};
    int64_t p2[8] = {0, 0, w->pads[0], w->pads[2], w->pads[1], w->pads[3], 0, 0};
    memcpy(strides, s2, sizeof strides);
    memcpy(pads, p2, sizeof pads);
  }
  pg_attrs_set_int_list(a, "strides", strides, 4);
  pg_attrs_set_string(a, "padding", w->padding, strlen(w->padding));
  pg_attrs_set_int_list(a, "explicit_paddings", pads, 8);
  pg_attrs_set_string(a, "data_format", nhwc ? "NHWC" : "NCHW", 4);
}

static void window_attrs(pg_attrs* a, const window* w) { window_attrs_in(a, w, 0); }

/* Conv2D's attributes for window `w` in one layout. */
static pg_attrs* conv_attrs(const window* w, int nhwc) {
  pg_attrs* ca = pg_attrs_new();
  window_attrs_in(ca, w, nhwc);
  int64_t dil[4] = {1, 1, w->dilations[0], w->dilations[1]};
  if (nhwc) {
    dil[1] = w->dilations[0];
    dil[2] = w->dilations[1];
    dil[3] = 1;
  }
  pg_attrs_set_int_list(ca, "dilations", dil, 4);
  pg_attrs_set_bool(ca, "use_cudnn_on_gpu", 1);
  return ca;
}

/* A node's `axes`: an attribute before opset `since_input`, a constant
 * input from it on (absent: n = 0). 0 where they are not readable so
 * (L->err says why where the input is not a constant). */
static int read_axes(lowering* L, const node_desc* d, int since_input, int64_t* axes, int* n) {
  *n = 0;
  if (d->since < since_input) return attr_ints_upto(d, "axes", axes, TF_MAX_DIMS, n) >= 0;
  if (d->nin < 2 || d->in_vi[1] == NULL) return 1;
  int64_t got = const_input(d, 1, NULL, axes, TF_MAX_DIMS);
  if (got < 0) {
    snprintf(L->err, sizeof L->err, "pluggable: node %s: %s runs axes given as a constant "
             "initializer only", L->who, d->op);
    return 0;
  }
  *n = (int)got;
  return 1;
}

/* Whether the device's Conv2D kernel for dtype `t` can be made for NCHW
 * (the CUDA plugin's runs NHWC only); 1 where no device is at hand. */
static int conv_nchw_ok(lowering* L, const window* w, TF_DataType t) {
  if (L->dev == NULL) return 1;
  pg_kernel_def* def = pg_ort_find_kernel("Conv2D", L->device_type, t);
  if (def == NULL) return 1; /* emit says why */
  pg_attrs* a = conv_attrs(w, 0);
  pg_attrs_set_type(a, "T", t);
  char why[512];
  const int ok = kernel_creates(def, L->dev, a, 2, (const char* const[]){"input", "filter"},
                                (const unsigned char[]){0, 0}, t, why, sizeof why);
  pg_attrs_free(a);
  return ok;
}

/* Lowers node `d` reading slots `in` into slot `out`: 1 done (or, in check
 * mode, possible), 0 not supported (L->err says why), -1 failed (L->err). */
static int lower(lowering* L, const node_desc* d, const int* in, int out) {
  const op_entry* e = find_entry(d->op);
  if (e == NULL) {
    snprintf(L->err, sizeof L->err, "pluggable: node %s: op not in the bridge's table", L->who);
    return 0;
  }
  L->entry = e;
  /* Only the schema versions the importer's mapping has a row for. */
  if (d->since < e->since || d->since > e->until) {
    if (e->until >= PG_ORT_OPEN_OPSET)
      snprintf(L->err, sizeof L->err, "pluggable: node %s: %s of opset %d is not lowered (the "
               "op table takes opset %d and later)", L->who, d->op, d->since, e->since);
    else
      snprintf(L->err, sizeof L->err, "pluggable: node %s: %s of opset %d is not lowered (the "
               "op table takes opsets %d to %d)", L->who, d->op, d->since, e->since, e->until);
    return 0;
  }
  /* The input whose element type picks the kernels (Where's first is its
   * condition); Cast's result has its own type. */
  int data = e->kind == K_WHERE ? 1 : 0;
  if (d->nin <= data) return 0;
  int type = d->in_type[data];
  TF_DataType t = tf_type(type);
  int bool_cast = e->kind == K_CAST && type == PG_ONNX_BOOL; /* (a mask made a number) */
  if (!(e->types & type_bit(type) || bool_cast) || (d->out_type != type && e->kind != K_CAST)) {
    snprintf(L->err, sizeof L->err, "pluggable: node %s: %s is not run for %s", L->who, d->op,
             onnx_type_name(type));
    return 0;
  }
  int need = e->kind == K_WHERE ? 3
             : e->kind == K_BINARY || e->kind == K_MATMUL || e->kind == K_GEMM ||
                     e->kind == K_CONV || e->kind == K_GATHER
                 ? 2
                 : 1;
  if (d->nin < need) return 0;
  /* Reshape's shape, Squeeze's and ReduceMean's axes and Gather's indices
   * are integers; Dropout's ratio and training_mode differ too. */
  int typed = e->kind == K_RESHAPE || e->kind == K_IDENTITY || e->kind == K_SQUEEZE ||
                      e->kind == K_REDUCE || e->kind == K_GATHER || e->kind == K_CAST
                  ? 1
              : e->kind == K_WHERE ? 3
                                   : d->nin;
  for (int i = data; i < typed; i++)
    if (d->in_vi[i] != NULL && (d->in_type[i] != type || d->in_rank[i] > TF_MAX_DIMS)) {
      snprintf(L->err, sizeof L->err, "pluggable: node %s: mixed or unknown input types", L->who);
      return 0;
    }
  for (int i = 0; i < need; i++)
    if (d->in_vi[i] == NULL) return 0;
  switch (e->kind) {
    case K_BINARY:
      if (d->nin != 2) return 0;
      EMIT(e->tf[0], t, 2, XY, in, 0, out, NULL);
      return 1;
    case K_UNARY:
      if (d->nin != 1) return 0;
      EMIT(e->tf[0], t, 1, strcmp(e->tf[0], "Relu") == 0 ? (const char* const[]){"features"} : XY,
           in, 0, out, NULL);
      return 1;
    case K_SOFTMAX: {
      /* The plugin's Softmax / LogSoftmax take the last axis. Opset 13's
       * other axes: Transpose the axis last and back. Before opset 13 the
       * op flattens to 2-D at `axis`: Reshape to that and back (static
       * dims only), or nothing when `axis` is the last axis. */
      if (d->nin != 1) return 0;
      int64_t axis = d->since >= 13 ? -1 : 1;
      if (attr_int(d, "axis", &axis) < 0) return 0;
      int rank = d->in_rank[0];
      if (axis < 0) axis += rank;
      if (rank < 1 || axis < 0 || axis >= rank) return 0;
      int64_t inner = 1, outer = 1;
      for (int k = 0; k < rank; k++) {
        int64_t* side = k < axis ? &outer : &inner;
        *side = (d->dims0[k] < 0 || *side < 0) ? -1 : *side * d->dims0[k];
      }
      int last = axis == rank - 1, flatten = d->since < 13 && !last;
      if (flatten && (inner < 0 || outer < 0)) {
        snprintf(L->err, sizeof L->err, "pluggable: node %s: %s before opset 13 on axis %d of "
                 "%d runs with static dims only", L->who, d->op, (int)axis, rank);
        return 0;
      }
      const char* const logits[] = {"logits"};
      const char* const tr[] = {"x", "perm"};
      const char* const rs[] = {"tensor", "shape"};
      if (last) {
        EMIT(e->tf[0], t, 1, logits, in, 0, out, NULL);
        return 1;
      }
      int pre, sm, there, back;
      SLOT(pre, temp_slot(L));
      SLOT(sm, temp_slot(L));
      if (flatten) {
        int64_t flat[2] = {outer, inner};
        SLOT(there, host_i64_slot(L, flat, 2));
        SLOT(back, host_i64_slot(L, d->dims0, rank));
        pg_attrs* a1 = pg_attrs_new();
        pg_attrs_set_type(a1, "Tshape", TF_INT64);
        EMIT("Reshape", t, 2, rs, ((int[]){in[0], there}), 2, pre, a1);
        EMIT(e->tf[0], t, 1, logits, &pre, 0, sm, NULL);
        pg_attrs* a2 = pg_attrs_new();
        pg_attrs_set_type(a2, "Tshape", TF_INT64);
        EMIT("Reshape", t, 2, rs, ((int[]){sm, back}), 2, out, a2);
        return 1;
      }
      int32_t perm[TF_MAX_DIMS], inv[TF_MAX_DIMS];
      for (int k = 0, j = 0; k < rank; k++)
        if (k != axis) perm[j++] = k;
      perm[rank - 1] = (int32_t)axis;
      for (int k = 0; k < rank; k++) inv[perm[k]] = k;
      SLOT(there, host_i32_slot(L, perm, rank));
      SLOT(back, host_i32_slot(L, inv, rank));
      pg_attrs* a1 = pg_attrs_new();
      pg_attrs_set_type(a1, "Tperm", TF_INT32);
      EMIT("Transpose", t, 2, tr, ((int[]){in[0], there}), 2, pre, a1);
      EMIT(e->tf[0], t, 1, logits, &pre, 0, sm, NULL);
      pg_attrs* a2 = pg_attrs_new();
      pg_attrs_set_type(a2, "Tperm", TF_INT32);
      EMIT("Transpose", t, 2, tr, ((int[]){sm, back}), 2, out, a2);
      return 1;
    }
    case K_MATMUL: {
      if (d->nin != 2) return 0;
      int ra = d->in_rank[0], rb = d->in_rank[1];
      if (ra == 2 && rb == 2)
        EMIT("MatMul", t, 2, AB, in, 0, out, bool_attrs("transpose_a", 0, "transpose_b", 0));
      else if (ra >= 2 && rb >= 2)
        EMIT("BatchMatMulV2", t, 2, XY, in, 0, out, bool_attrs("adj_x", 0, "adj_y", 0));
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
      EMIT("MatMul", t, 2, AB, in, 0, prod,
           bool_attrs("transpose_a", ta != 0, "transpose_b", tb != 0));
      if (alpha != 1.0f) {
        int a, scaled;
        SLOT(a, scalar_slot(L, t, alpha));
        SLOT(scaled, has_c ? temp_slot(L) : out);
        EMIT("Mul", t, 2, XY, ((int[]){prod, a}), 0, scaled, NULL);
        prod = scaled;
      }
      if (has_c) {
        int c = in[2];
        if (beta != 1.0f) {
          int b, cb;
          SLOT(b, scalar_slot(L, t, beta));
          SLOT(cb, temp_slot(L));
          EMIT("Mul", t, 2, XY, ((int[]){in[2], b}), 0, cb, NULL);
          c = cb;
        }
        EMIT("AddV2", t, 2, XY, ((int[]){prod, c}), 0, out, NULL);
      }
      return 1;
    }
    case K_CONV: {
      /* Conv2D reads an HWIO filter: Transpose the OIHW weight (a constant
       * weight is transposed once, when the partition is compiled). */
      window w;
      int64_t group = 1;
      if (d->in_rank[0] != 4 || d->in_rank[1] != 4 || !read_window(d, &w) ||
          attr_int(d, "group", &group) < 0 || group != 1) {
        snprintf(L->err, sizeof L->err, "pluggable: node %s: Conv runs 2-D, group 1, NOTSET, "
                 "VALID or SAME_UPPER padding only", L->who);
        return 0;
      }
      int has_b = d->nin == 3 && d->in_vi[2] != NULL;
      if (has_b && d->in_rank[2] != 1) return 0;
      /* A device whose Conv2D runs NHWC only (the CUDA plugin's) gets the
       * input transposed to NHWC and the result back to NCHW. */
      const int nhwc = !conv_nchw_ok(L, &w, t);
      int perm, filter, conv, x = in[0];
      SLOT(perm, host_i32_slot(L, (const int32_t[]){2, 3, 1, 0}, 4));
      SLOT(filter, temp_slot(L));
      pg_attrs* ta = pg_attrs_new();
      pg_attrs_set_type(ta, "Tperm", TF_INT32);
      EMIT("Transpose", t, 2, (const char* const[]){"x", "perm"}, ((int[]){in[1], perm}), 2,
           filter, ta);
      if (nhwc) {
        int to_nhwc;
        SLOT(to_nhwc, host_i32_slot(L, (const int32_t[]){0, 2, 3, 1}, 4));
        SLOT(x, temp_slot(L));
        pg_attrs* xa = pg_attrs_new();
        pg_attrs_set_type(xa, "Tperm", TF_INT32);
        EMIT("Transpose", t, 2, (const char* const[]){"x", "perm"}, ((int[]){in[0], to_nhwc}),
             2, x, xa);
      }
      SLOT(conv, has_b || nhwc ? temp_slot(L) : out);
      EMIT("Conv2D", t, 2, (const char* const[]){"input", "filter"}, ((int[]){x, filter}), 0,
           conv, conv_attrs(&w, nhwc));
      int y = conv;
      if (has_b) {
        pg_attrs* ba = pg_attrs_new();
        pg_attrs_set_string(ba, "data_format", nhwc ? "NHWC" : "NCHW", 4);
        if (nhwc) SLOT(y, temp_slot(L));
        else y = out;
        EMIT("BiasAdd", t, 2, (const char* const[]){"value", "bias"}, ((int[]){conv, in[2]}), 0,
             y, ba);
      }
      if (nhwc) {
        int to_nchw;
        SLOT(to_nchw, host_i32_slot(L, (const int32_t[]){0, 3, 1, 2}, 4));
        pg_attrs* oa = pg_attrs_new();
        pg_attrs_set_type(oa, "Tperm", TF_INT32);
        EMIT("Transpose", t, 2, (const char* const[]){"x", "perm"}, ((int[]){y, to_nchw}), 2,
             out, oa);
      }
      return 1;
    }
    case K_MAXPOOL: {
      window w;
      int64_t ceil_mode = 0, storage = 0;
      if (d->nin != 1 || d->in_rank[0] != 4 || !read_window(d, &w) || w.kernel[0] < 1 ||
          w.dilations[0] != 1 || w.dilations[1] != 1 || attr_int(d, "ceil_mode", &ceil_mode) < 0 ||
          ceil_mode != 0 || attr_int(d, "storage_order", &storage) < 0 || storage != 0) {
        snprintf(L->err, sizeof L->err, "pluggable: node %s: MaxPool runs 2-D windows without "
                 "dilation or ceil_mode only", L->who);
        return 0;
      }
      pg_attrs* ma = pg_attrs_new();
      window_attrs(ma, &w);
      int64_t ksize[4] = {1, 1, w.kernel[0], w.kernel[1]};
      pg_attrs_set_int_list(ma, "ksize", ksize, 4);
      EMIT(e->tf[0], t, 1, (const char* const[]){"input"}, in, 0, out, ma);
      return 1;
    }
    case K_GLOBALAVG: {
      if (d->nin != 1 || d->in_rank[0] < 3) return 0;
      int32_t axes[TF_MAX_DIMS];
      int n = d->in_rank[0] - 2;
      for (int i = 0; i < n; i++) axes[i] = 2 + i;
      int ax;
      SLOT(ax, host_i32_slot(L, axes, n));
      pg_attrs* ra = pg_attrs_new();
      pg_attrs_set_bool(ra, "keep_dims", 1);
      pg_attrs_set_type(ra, "Tidx", TF_INT32);
      EMIT(e->tf[0], t, 2, (const char* const[]){"input", "reduction_indices"},
           ((int[]){in[0], ax}), 2, out, ra);
      return 1;
    }
    case K_AVGPOOL: {
      /* The plugin's AvgPool pads VALID or SAME and never counts padding:
       * ONNX's zero pads, or SAME_UPPER without count_include_pad. */
      window w;
      int64_t ceil_mode = 0, include = 0;
      int ok = d->nin == 1 && d->in_rank[0] == 4 && read_window(d, &w) && w.kernel[0] >= 1 &&
               w.dilations[0] == 1 && w.dilations[1] == 1 &&
               attr_int(d, "ceil_mode", &ceil_mode) >= 0 && ceil_mode == 0 &&
               attr_int(d, "count_include_pad", &include) >= 0;
      if (ok && strcmp(w.padding, "EXPLICIT") == 0) {
        int zero = 1, same = !include;
        for (int i = 0; i < 4; i++) zero = zero && w.pads[i] == 0;
        /* With stride 1 and an odd window, SAME pads (k - 1) / 2 on both
         * sides whatever the input's size. */
        for (int a = 0; a < 2; a++)
          same = same && w.strides[a] == 1 && w.kernel[a] % 2 == 1 &&
                 w.pads[a] == (w.kernel[a] - 1) / 2 && w.pads[a + 2] == w.pads[a];
        ok = zero || same;
        snprintf(w.padding, sizeof w.padding, "%s", zero ? "VALID" : "SAME");
      }
      if (ok && strcmp(w.padding, "SAME") == 0 && include) ok = 0;
      if (!ok) {
        snprintf(L->err, sizeof L->err, "pluggable: node %s: AveragePool runs 2-D windows "
                 "without padding, or padded as SAME_UPPER (stride 1, odd windows with "
                 "explicit pads) and not counting the padding, only", L->who);
        return 0;
      }
      pg_attrs* aa = pg_attrs_new();
      window_attrs(aa, &w);
      int64_t ksize[4] = {1, 1, w.kernel[0], w.kernel[1]};
      pg_attrs_set_int_list(aa, "ksize", ksize, 4);
      EMIT(e->tf[0], t, 1, (const char* const[]){"value"}, in, 0, out, aa);
      return 1;
    }
    case K_SUM: {
      /* A chain of broadcasting adds. */
      if (d->nin < 2) return 0;
      int acc = in[0];
      for (int i = 1; i < d->nin; i++) {
        if (d->in_vi[i] == NULL) return 0;
        int dst;
        SLOT(dst, i == d->nin - 1 ? out : temp_slot(L));
        EMIT(e->tf[0], t, 2, XY, ((int[]){acc, in[i]}), 0, dst, NULL);
        acc = dst;
      }
      return 1;
    }
    case K_RESHAPE: {
      /* A constant shape; 0 (copy the input's dim, unless allowzero) is not
       * TensorFlow's and is not run. */
      int64_t shape[TF_MAX_DIMS], allowzero = 0;
      int64_t n = d->nin == 2 ? const_input(d, 1, NULL, shape, TF_MAX_DIMS) : -1;
      if (attr_int(d, "allowzero", &allowzero) < 0) return 0;
      int ok = n >= 0;
      for (int64_t i = 0; ok && i < n; i++) ok = shape[i] >= -1 && (shape[i] != 0 || allowzero);
      if (!ok) {
        snprintf(L->err, sizeof L->err, "pluggable: node %s: Reshape runs a constant shape "
                 "without 0 entries only", L->who);
        return 0;
      }
      int sh;
      SLOT(sh, host_i64_slot(L, shape, (int)n));
      pg_attrs* ra = pg_attrs_new();
      pg_attrs_set_type(ra, "Tshape", TF_INT64);
      EMIT(e->tf[0], t, 2, (const char* const[]){"tensor", "shape"}, ((int[]){in[0], sh}), 2,
           out, ra);
      return 1;
    }
    case K_BATCHNORM: {
      /* Inference with constant statistics: x * a + b per channel, with
       * a = scale / sqrt(var + epsilon) and b = B - mean * a computed here. */
      enum { MAX_C = 1 << 16 };
      int64_t training = 0, spatial = 1;
      float eps = 1e-5f;
      int rank = d->in_rank[0];
      if (d->nin != 5 || rank < 2 || attr_float(d, "epsilon", &eps) < 0 ||
          attr_int(d, "training_mode", &training) < 0 || training != 0 ||
          attr_int(d, "spatial", &spatial) < 0 || spatial != 1)
        return 0;
      double* v = malloc(4 * MAX_C * sizeof *v);
      if (v == NULL) return 0;
      int64_t c = const_input(d, 1, v, NULL, MAX_C);
      int ok = c > 0;
      for (int k = 2; ok && k < 5; k++) ok = const_input(d, k, v + k * MAX_C - MAX_C, NULL,
                                                         MAX_C) == c;
      if (!ok) {
        free(v);
        snprintf(L->err, sizeof L->err, "pluggable: node %s: BatchNormalization runs constant "
                 "statistics in inference only", L->who);
        return 0;
      }
      double *scale = v, *bias = v + MAX_C, *mean = v + 2 * MAX_C, *var = v + 3 * MAX_C;
      for (int64_t k = 0; k < c; k++) {
        double a = scale[k] / sqrt(var[k] + (double)eps);
        bias[k] -= mean[k] * a;
        scale[k] = a;
      }
      int64_t dims[TF_MAX_DIMS];
      dims[0] = c;
      for (int k = 1; k < rank - 1; k++) dims[k] = 1;
      int a, b, prod;
      a = device_const_slot(L, t, dims, rank - 1, scale, (size_t)c);
      b = a == -2 ? -2 : device_const_slot(L, t, dims, rank - 1, bias, (size_t)c);
      free(v);
      if (a == -2 || b == -2) return -1;
      SLOT(prod, temp_slot(L));
      EMIT("Mul", t, 2, XY, ((int[]){in[0], a}), 0, prod, NULL);
      EMIT("AddV2", t, 2, XY, ((int[]){prod, b}), 0, out, NULL);
      return 1;
    }
    case K_FLATTEN: {
      /* Reshape to [d0 * ... * d(axis-1), -1] (or [-1, rest]): one side's
       * dims must be static. */
      int64_t axis = 1;
      int rank = d->in_rank[0];
      if (d->nin != 1 || attr_int(d, "axis", &axis) < 0) return 0;
      if (axis < 0) axis += rank;
      if (rank < 1 || axis < 0 || axis > rank) return 0;
      int64_t head = 1, tail = 1;
      for (int k = 0; k < rank; k++) {
        int64_t* side = k < axis ? &head : &tail;
        *side = (d->dims0[k] < 0 || *side < 0) ? -1 : *side * d->dims0[k];
      }
      if (head < 0 && tail < 0) {
        snprintf(L->err, sizeof L->err, "pluggable: node %s: Flatten of dims known on neither "
                 "side of its axis", L->who);
        return 0;
      }
      int64_t shape[2] = {head >= 0 ? head : -1, head >= 0 ? -1 : tail};
      int sh;
      SLOT(sh, host_i64_slot(L, shape, 2));
      pg_attrs* ra = pg_attrs_new();
      pg_attrs_set_type(ra, "Tshape", TF_INT64);
      EMIT(e->tf[0], t, 2, (const char* const[]){"tensor", "shape"}, ((int[]){in[0], sh}), 2,
           out, ra);
      return 1;
    }
    case K_IDENTITY: {
      /* Dropout at inference: its output is its input (no mask output, no
       * training_mode input). */
      if (d->nin != 1 && !(strcmp(d->op, "Dropout") == 0 && d->nin <= 3 &&
                           (d->nin < 3 || d->in_vi[2] == NULL)))
        return 0;
      EMIT(e->tf[0], t, 1, (const char* const[]){"input"}, in, 0, out, NULL);
      return 1;
    }
    case K_TRANSPOSE: {
      /* perm (absent: the dims reversed) as a host int32 vector. */
      int64_t perm[TF_MAX_DIMS];
      int n = 0, rank = d->in_rank[0];
      int r = attr_ints_upto(d, "perm", perm, TF_MAX_DIMS, &n);
      if (d->nin != 1 || r < 0) return 0;
      if (r == 0) {
        n = rank;
        for (int k = 0; k < n; k++) perm[k] = n - 1 - k;
      }
      int seen[TF_MAX_DIMS] = {0}, ok = n >= 1 && (rank == n || (r == 1 && rank == 0));
      for (int k = 0; ok && k < n; k++) {
        ok = perm[k] >= 0 && perm[k] < n && !seen[perm[k]];
        if (ok) seen[perm[k]] = 1;
      }
      if (!ok) {
        snprintf(L->err, sizeof L->err, "pluggable: node %s: Transpose runs a permutation of "
                 "the dims of an input of known rank only", L->who);
        return 0;
      }
      int32_t p32[TF_MAX_DIMS];
      for (int k = 0; k < n; k++) p32[k] = (int32_t)perm[k];
      int ps;
      SLOT(ps, host_i32_slot(L, p32, n));
      pg_attrs* ta = pg_attrs_new();
      pg_attrs_set_type(ta, "Tperm", TF_INT32);
      EMIT(e->tf[0], t, 2, (const char* const[]){"x", "perm"}, ((int[]){in[0], ps}), 2, out, ta);
      return 1;
    }
    case K_GELU: {
      char approx[16];
      if (d->nin != 1 || !attr_string(d, "approximate", approx, sizeof approx, "none") ||
          (strcmp(approx, "none") != 0 && strcmp(approx, "tanh") != 0)) {
        snprintf(L->err, sizeof L->err, "pluggable: node %s: Gelu runs approximate \"none\" or "
                 "\"tanh\" only", L->who);
        return 0;
      }
      pg_attrs* ga = pg_attrs_new();
      pg_attrs_set_bool(ga, "approximate", strcmp(approx, "tanh") == 0);
      EMIT(e->tf[0], t, 1, (const char* const[]){"features"}, in, 0, out, ga);
      return 1;
    }
    case K_REDUCE: {
      /* axes: an attribute before opset 18, a constant input from 18 on;
       * none: every axis (unless noop_with_empty_axes, not run). */
      int64_t keep = 1, noop = 0, axes[TF_MAX_DIMS];
      int n = 0, rank = d->in_rank[0];
      if (d->nin > 2 || attr_int(d, "keepdims", &keep) < 0 ||
          attr_int(d, "noop_with_empty_axes", &noop) < 0)
        return 0;
      if (!read_axes(L, d, 18, axes, &n)) return 0;
      if (rank < 1 || (n == 0 && noop)) {
        snprintf(L->err, sizeof L->err, "pluggable: node %s: %s runs inputs of known rank 1 or "
                 "more, and not noop_with_empty_axes without axes", L->who, d->op);
        return 0;
      }
      if (n == 0)
        for (n = 0; n < rank; n++) axes[n] = n;
      int32_t ax32[TF_MAX_DIMS];
      int seen[TF_MAX_DIMS] = {0};
      for (int k = 0; k < n; k++) {
        int64_t a = axes[k] < 0 ? axes[k] + rank : axes[k];
        if (a < 0 || a >= rank || seen[a]) {
          snprintf(L->err, sizeof L->err, "pluggable: node %s: %s axis %lld is out of range or "
                   "repeated for rank %d", L->who, d->op, (long long)axes[k], rank);
          return 0;
        }
        seen[a] = 1;
        ax32[k] = (int32_t)a;
      }
      int ax;
      SLOT(ax, host_i32_slot(L, ax32, n));
      pg_attrs* ra = pg_attrs_new();
      pg_attrs_set_bool(ra, "keep_dims", keep != 0);
      pg_attrs_set_type(ra, "Tidx", TF_INT32);
      EMIT(e->tf[0], t, 2, (const char* const[]){"input", "reduction_indices"},
           ((int[]){in[0], ax}), 2, out, ra);
      return 1;
    }
    case K_SQUEEZE: {
      /* Squeeze / Unsqueeze: axes an attribute before opset 13, a constant
       * input from 13 on. A Reshape to the output's shape when at most one
       * of its dims is not static, else Squeeze or ExpandDims per axis. */
      int unsq = strcmp(d->op, "Unsqueeze") == 0;
      int64_t axes[TF_MAX_DIMS];
      int n = 0, rank = d->in_rank[0];
      if (d->nin > 2) return 0;
      if (!read_axes(L, d, 13, axes, &n)) return 0;
      /* An input of rank 0 is a scalar only where the output's rank says so. */
      int out_rank = unsq ? rank + n : rank - n;
      int known = unsq ? n > 0 && d->out_rank == out_rank && out_rank <= TF_MAX_DIMS
                       : rank > 0 && (n > 0 ? d->out_rank == out_rank : 1);
      int64_t shape[TF_MAX_DIMS];
      int marked[TF_MAX_DIMS] = {0}, ok = known;
      for (int k = 0; ok && k < n; k++) {
        int r = unsq ? out_rank : rank;
        int64_t a = axes[k] < 0 ? axes[k] + r : axes[k];
        ok = a >= 0 && a < r && !marked[a] && (unsq || d->dims0[a] == 1 || d->dims0[a] < 0);
        if (ok) marked[a] = 1, axes[k] = a;
      }
      if (!ok) {
        snprintf(L->err, sizeof L->err, "pluggable: node %s: %s runs distinct, in-range axes "
                 "(of dims of size 1) on an input of known rank only", L->who, d->op);
        return 0;
      }
      int m = 0, unknown = 0;
      if (unsq) {
        for (int k = 0, j = 0; k < out_rank; k++) shape[m++] = marked[k] ? 1 : d->dims0[j++];
      } else {
        for (int k = 0; k < rank; k++) {
          int drop = n > 0 ? marked[k] : d->dims0[k] == 1;
          if (n == 0 && d->dims0[k] < 0) unknown = 2; /* which dims are 1 is not known */
          if (!drop) shape[m++] = d->dims0[k];
        }
      }
      for (int k = 0; k < m; k++)
        if (shape[k] < 0) unknown++, shape[k] = -1;
      if (unknown <= 1) {
        int sh;
        SLOT(sh, host_i64_slot(L, shape, m));
        pg_attrs* ra = pg_attrs_new();
        pg_attrs_set_type(ra, "Tshape", TF_INT64);
        EMIT("Reshape", t, 2, (const char* const[]){"tensor", "shape"}, ((int[]){in[0], sh}), 2,
             out, ra);
        return 1;
      }
      if (!unsq) {
        int64_t dims[TF_MAX_DIMS];
        for (int k = 0; k < n; k++) dims[k] = axes[k];
        pg_attrs* sa = pg_attrs_new();
        pg_attrs_set_int_list(sa, "squeeze_dims", dims, n);
        EMIT("Squeeze", t, 1, (const char* const[]){"input"}, in, 0, out, sa);
        return 1;
      }
      /* One ExpandDims per output axis of size 1, in increasing order. */
      int x = in[0], last = 0;
      for (int k = 0; k < out_rank; k++)
        if (marked[k]) last = k;
      for (int k = 0; k < out_rank; k++) {
        if (!marked[k]) continue;
        int dim, dst;
        SLOT(dim, host_i32_slot(L, (const int32_t[]){(int32_t)k}, -1));
        SLOT(dst, k == last ? out : temp_slot(L));
        pg_attrs* ea = pg_attrs_new();
        pg_attrs_set_type(ea, "Tdim", TF_INT32);
        EMIT("ExpandDims", t, 2, (const char* const[]){"input", "dim"}, ((int[]){x, dim}), 2,
             dst, ea);
        x = dst;
      }
      return 1;
    }
    case K_GATHER: {
      /* GatherV2 at a host axis; negative indices (ONNX counts them from
       * the end) become index + dim first, which needs the dim static
       * unless the indices are constants none of which is negative. */
      int it = d->in_type[1];
      int64_t axis = 0;
      int rank = d->in_rank[0];
      if (d->nin != 2 || attr_int(d, "axis", &axis) < 0) {
        snprintf(L->err, sizeof L->err, "pluggable: node %s: Gather runs an integer `axis` "
                 "attribute only", L->who);
        return 0;
      }
      if (it != PG_ONNX_INT32 && it != PG_ONNX_INT64) {
        snprintf(L->err, sizeof L->err, "pluggable: node %s: Gather runs int32 or int64 indices "
                 "only, not %s", L->who, onnx_type_name(it));
        return 0;
      }
      if (axis < 0) axis += rank;
      if (rank < 1 || axis < 0 || axis >= rank) {
        snprintf(L->err, sizeof L->err, "pluggable: node %s: Gather runs an axis inside an "
                 "input of known rank only", L->who);
        return 0;
      }
      TF_DataType ti = tf_type(it);
      int64_t dim = d->dims0[axis];
      enum { MAX_CONST_IDX = 1 << 14 };
      int64_t* idx = malloc(MAX_CONST_IDX * sizeof *idx);
      if (idx == NULL) return 0;
      int64_t count = const_input(d, 1, NULL, idx, MAX_CONST_IDX);
      int fix = count < 0;
      for (int64_t k = 0; k < count; k++) fix = fix || idx[k] < 0;
      free(idx);
      if (fix && dim < 0) {
        snprintf(L->err, sizeof L->err, "pluggable: node %s: Gather's indices may be negative "
                 "and the size of axis %d is not static", L->who, (int)axis);
        return 0;
      }
      int indices = in[1];
      if (fix) {
        int zero, size, neg, added;
        SLOT(zero, scalar_slot(L, ti, 0));
        SLOT(size, scalar_slot(L, ti, (double)dim));
        SLOT(neg, temp_slot(L));
        SLOT(added, temp_slot(L));
        SLOT(indices, temp_slot(L));
        next_types(L, TF_BOOL, 0, NULL, 0, NULL, 0, NULL, 0);
        EMIT("Less", ti, 2, XY, ((int[]){in[1], zero}), 0, neg, NULL);
        EMIT("AddV2", ti, 2, XY, ((int[]){in[1], size}), 0, added, NULL);
        EMIT("SelectV2", ti, 3, (const char* const[]){"condition", "t", "e"},
             ((int[]){neg, added, in[1]}), 0, indices, NULL);
      }
      int ax;
      SLOT(ax, host_i32_slot(L, (const int32_t[]){(int32_t)axis}, -1));
      pg_attrs* ga = pg_attrs_new();
      pg_attrs_set_int(ga, "batch_dims", 0);
      next_types(L, t, 3, "Tparams", t, "Tindices", ti, "Taxis", TF_INT32);
      EMIT(e->tf[0], t, 3, (const char* const[]){"params", "indices", "axis"},
           ((int[]){in[0], indices, ax}), 4, out, ga);
      return 1;
    }
    case K_CAST: {
      int64_t to = 0;
      if (d->nin != 1 || attr_int(d, "to", &to) != 1) {
        snprintf(L->err, sizeof L->err, "pluggable: node %s: Cast runs an integer `to` "
                 "attribute (opset 6 on) only", L->who);
        return 0;
      }
      TF_DataType dst = tf_type((int)to);
      if (dst == 0 || to != d->out_type) {
        snprintf(L->err, sizeof L->err, "pluggable: node %s: Cast runs to float, double, int32, "
                 "int64 or bool only, not ONNX element type %lld", L->who, (long long)to);
        return 0;
      }
      pg_attrs* ca = pg_attrs_new();
      pg_attrs_set_bool(ca, "Truncate", 0);
      next_types(L, dst, 2, "SrcT", t, "DstT", dst, NULL, 0);
      EMIT(e->tf[0], t, 1, (const char* const[]){"x"}, in, 0, out, ca);
      return 1;
    }
    case K_WHERE: {
      /* SelectV2 broadcasts its three inputs as ONNX's Where does. */
      if (d->nin != 3 || d->in_type[0] != PG_ONNX_BOOL) {
        snprintf(L->err, sizeof L->err, "pluggable: node %s: Where runs a bool condition only",
                 L->who);
        return 0;
      }
      EMIT(e->tf[0], t, 3, (const char* const[]){"condition", "t", "e"}, in, 0, out, NULL);
      return 1;
    }
    case K_LAYERNORM: {
      /* The importer's composition: the mean and variance over the axes
       * from `axis` on (keep_dims), (x - mean) * scale * rsqrt(var + eps)
       * + bias; only the Y output (describe takes one-output nodes). */
      int64_t axis = -1, stash = 1;
      float eps = 1e-5f;
      int rank = d->in_rank[0];
      if (d->nin < 2 || d->nin > 3 || attr_int(d, "axis", &axis) < 0 ||
          attr_float(d, "epsilon", &eps) < 0 || attr_int(d, "stash_type", &stash) < 0)
        return 0;
      if (axis < 0) axis += rank;
      if (rank < 1 || axis < 0 || axis >= rank) {
        snprintf(L->err, sizeof L->err, "pluggable: node %s: LayerNormalization runs an axis "
                 "inside an input of known rank only", L->who);
        return 0;
      }
      int32_t axes[TF_MAX_DIMS];
      int n = 0;
      for (int k = (int)axis; k < rank; k++) axes[n++] = k;
      const char* const mean_in[] = {"input", "reduction_indices"};
      int ax, mean, dev, sq, var, eps_s, sum, inv, scaled, normed;
      SLOT(ax, host_i32_slot(L, axes, n));
      SLOT(eps_s, scalar_slot(L, t, eps));
      SLOT(mean, temp_slot(L));
      SLOT(dev, temp_slot(L));
      SLOT(sq, temp_slot(L));
      SLOT(var, temp_slot(L));
      SLOT(sum, temp_slot(L));
      SLOT(inv, temp_slot(L));
      SLOT(scaled, temp_slot(L));
      int has_b = d->nin == 3 && d->in_vi[2] != NULL;
      SLOT(normed, has_b ? temp_slot(L) : out);
      for (int pass = 0; pass < 2; pass++) {
        pg_attrs* ma = pg_attrs_new();
        pg_attrs_set_bool(ma, "keep_dims", 1);
        pg_attrs_set_type(ma, "Tidx", TF_INT32);
        if (pass == 0) {
          EMIT("Mean", t, 2, mean_in, ((int[]){in[0], ax}), 2, mean, ma);
          EMIT("Sub", t, 2, XY, ((int[]){in[0], mean}), 0, dev, NULL);
          EMIT("Mul", t, 2, XY, ((int[]){dev, dev}), 0, sq, NULL);
        } else {
          EMIT("Mean", t, 2, mean_in, ((int[]){sq, ax}), 2, var, ma);
        }
      }
      EMIT("AddV2", t, 2, XY, ((int[]){var, eps_s}), 0, sum, NULL);
      EMIT("Rsqrt", t, 1, XY, &sum, 0, inv, NULL);
      EMIT("Mul", t, 2, XY, ((int[]){dev, in[1]}), 0, scaled, NULL);
      EMIT("Mul", t, 2, XY, ((int[]){scaled, inv}), 0, normed, NULL);
      if (has_b) EMIT("AddV2", t, 2, XY, ((int[]){normed, in[2]}), 0, out, NULL);
      return 1;
    }
    case K_CONCAT: {
      int64_t axis = 0;
      int rank = d->in_rank[0];
      if (attr_int(d, "axis", &axis) != 1 || rank < 1 || d->nin + 1 > MAX_STEP_IN) return 0;
      if (axis < 0) axis += rank;
      if (axis < 0 || axis >= rank) return 0;
      const char* names[MAX_STEP_IN];
      int ins[MAX_STEP_IN];
      for (int i = 0; i < d->nin; i++) {
        if (d->in_vi[i] == NULL || d->in_rank[i] != rank) return 0;
        names[i] = "values";
        ins[i] = in[i];
      }
      names[d->nin] = "axis";
      SLOT(ins[d->nin], host_i32_slot(L, (const int32_t[]){(int32_t)axis}, -1));
      pg_attrs* ca = pg_attrs_new();
      pg_attrs_set_int(ca, "N", d->nin);
      pg_attrs_set_type(ca, "Tidx", TF_INT32);
      EMIT(e->tf[0], t, d->nin + 1, names, ins, (uint64_t)1 << d->nin, out, ca);
      return 1;
    }
  }
  return 0;
}

static void who(char* buf, size_t cap, const node_desc* d) {
  snprintf(buf, cap, "'%s' (%s)", d->name, d->op);
}

/* Whether the bridge can run node `node` on `device_type`. */
/* What the last GetCapability left to other EPs, and why (one line per
 * node, as much as fits). */
static pthread_mutex_t report_lock = PTHREAD_MUTEX_INITIALIZER;
static char unclaimed[16384];
static size_t unclaimed_len;
static char unclaimed_copy[sizeof unclaimed];

/* One line per node the last GetCapability of any session did not claim:
 * "pluggable: node 'name' (Op): why". For diagnostics; the text stays
 * valid until the next call. */
PG_EXPORT const char* pg_ort_unclaimed_report(void) {
  pthread_mutex_lock(&report_lock);
  memcpy(unclaimed_copy, unclaimed, unclaimed_len + 1);
  pthread_mutex_unlock(&report_lock);
  return unclaimed_copy;
}

static void note_unclaimed(const char* line) {
  size_t n = strlen(line);
  if (unclaimed_len + n + 2 >= sizeof unclaimed) return;
  memcpy(unclaimed + unclaimed_len, line, n);
  unclaimed_len += n;
  unclaimed[unclaimed_len++] = '\n';
  unclaimed[unclaimed_len] = '\0';
}

/* Whether the bridge can run node `d` on `device_type`; if not, why is
 * noted in the report (report_lock held). */
static int supported(const char* device_type, pg_device* dev, const node_desc* d) {
  lowering L;
  memset(&L, 0, sizeof L);
  L.device_type = device_type;
  L.dev = dev;
  char w[300];
  who(w, sizeof w, d);
  L.who = w;
  int dummy[MAX_IO];
  for (int i = 0; i < MAX_IO; i++) dummy[i] = -1;
  if (lower(&L, d, dummy, -1) == 1) return 1;
  if (L.err[0] == '\0')
    snprintf(L.err, sizeof L.err, "pluggable: node %s: its inputs, attributes or shapes are "
             "not ones the bridge runs", w);
  note_unclaimed(L.err);
  return 0;
}

enum { INPUTS, OUTPUTS, IMPLICIT_INPUTS };

/* The value infos of a node's inputs, outputs or implicit inputs (the outer
 * values its subgraphs read), allocated. */
static OrtStatus* node_values(const OrtNode* node, int which, const void*** out, size_t* n) {
  typedef OrtStatus* (*count_fn)(const OrtNode*, size_t*);
  typedef OrtStatus* (*get_fn)(const OrtNode*, const void**, size_t);
  count_fn count = which == INPUTS    ? CALL(Node_GetNumInputs, count_fn)
                   : which == OUTPUTS ? CALL(Node_GetNumOutputs, count_fn)
                                      : CALL(Node_GetNumImplicitInputs, count_fn);
  get_fn get = which == INPUTS    ? CALL(Node_GetInputs, get_fn)
               : which == OUTPUTS ? CALL(Node_GetOutputs, get_fn)
                                  : CALL(Node_GetImplicitInputs, get_fn);
  *out = NULL;
  *n = 0;
  OrtStatus* s = count(node, n);
  if (s != NULL || *n == 0) return s;
  *out = calloc(*n, sizeof **out);
  if (*out == NULL) return pg_ort_status(PG_ORT_FAIL, "pluggable: out of memory");
  return get(node, *out, *n);
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
  int locked = 0;
  if (!nodes || !ok || !descs || !order || !indeg || !g.pred_start || !g.succ_start ||
      !g.cluster || !g.next || !g.mark || !g.stack || !map_init(&producers, n)) {
    s = pg_ort_status(PG_ORT_FAIL, "pluggable: out of memory in GetCapability");
    goto done;
  }
  s = CALL(Graph_GetNodes, OrtStatus* (*)(const OrtGraph*, const OrtNode**, size_t))(graph,
                                                                                    nodes, n);
  if (s != NULL) goto done;
  pthread_mutex_lock(&report_lock);
  locked = 1;
  unclaimed_len = 0;
  unclaimed[0] = '\0';
  /* A subgraph is claimed only in the bodies of If, Loop and Scan, which
   * ONNX Runtime runs with kernels of its own. Another op's body (SequenceMap)
   * is a function's: ONNX Runtime expands it into nodes whose opset imports
   * have no entry for a fused node's domain, and the expanded graph would
   * not resolve. */
  const OrtNode* parent = NULL;
  const char* parent_op = NULL;
  const char* parent_domain = NULL;
  pg_ort_drop(CALL(Graph_GetParentNode, OrtStatus* (*)(const OrtGraph*, const OrtNode**))(
      graph, &parent));
  if (parent != NULL) {
    pg_ort_drop(CALL(Node_GetOperatorType, OrtStatus* (*)(const OrtNode*, const char**))(
        parent, &parent_op));
    pg_ort_drop(CALL(Node_GetDomain, OrtStatus* (*)(const OrtNode*, const char**))(
        parent, &parent_domain));
  }
  int function_body =
      parent != NULL &&
      !(parent_op != NULL && (parent_domain == NULL || parent_domain[0] == '\0') &&
        (strcmp(parent_op, "If") == 0 || strcmp(parent_op, "Loop") == 0 ||
         strcmp(parent_op, "Scan") == 0));
  /* Which nodes the device runs; the producer of each output name (of
   * every node: a path through a node the bridge does not take is still a
   * path). */
  for (size_t i = 0; i < n; i++) {
    int described = describe(nodes[i], &descs[i]);
    if (described && function_body) {
      char line[400];
      snprintf(line, sizeof line, "pluggable: node '%s' (%s): in the body of a %s node, "
               "which ONNX Runtime expands as a function (only If, Loop and Scan bodies "
               "are claimed)", descs[i].name ? descs[i].name : "", descs[i].op,
               parent_op ? parent_op : "?");
      note_unclaimed(line);
    } else if (described) {
      ok[i] = supported(e->device_type, e->dev, &descs[i]);
    } else {
      const char* op = NULL;
      const char* name = NULL;
      pg_ort_drop(CALL(Node_GetOperatorType, OrtStatus* (*)(const OrtNode*, const char**))(
          nodes[i], &op));
      pg_ort_drop(CALL(Node_GetName, OrtStatus* (*)(const OrtNode*, const char**))(nodes[i],
                                                                                   &name));
      char line[400];
      snprintf(line, sizeof line, "pluggable: node '%s' (%s): another domain, or more inputs "
               "or outputs than the bridge's ops have", name ? name : "", op ? op : "?");
      note_unclaimed(line);
    }
    const void** outs = NULL;
    size_t nout = 0;
    if ((s = node_values(nodes[i], OUTPUTS, &outs, &nout))) {
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
  /* Edges from producers to consumers, through inputs and implicit inputs
   * (two passes: count, then fill). */
  size_t num_edges = 0;
  for (int pass = 0; pass < 2; pass++) {
    for (size_t i = 0; i < n; i++) {
      if (pass == 0) g.pred_start[i + 1] = g.pred_start[i];
      for (int which = INPUTS; which <= IMPLICIT_INPUTS; which += IMPLICIT_INPUTS - INPUTS) {
        const void** ins = NULL;
        size_t nin = 0;
        if ((s = node_values(nodes[i], which, &ins, &nin))) {
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
  if (locked) pthread_mutex_unlock(&report_lock);
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
  int on_device = 0; /* some input or output is ONNX Runtime's device memory */
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
    size_t nbytes = count_of(dims, rank) * elem_size(t);
    int where = pg_ort_placement(v, p->dev);
    if (where == PG_ORT_IN_OTHER) {
      err = pg_ort_status(PG_ORT_INVALID_ARGUMENT, "pluggable: partition %s: input '%s' is in "
                          "the memory of another device than %s", p->name, p->slot_name[slot],
                          p->dev->name);
      break;
    }
    if (where == PG_ORT_IN_DEVICE) {
      vals[slot] = pg_ort_wrap_device(p->dev, t, dims, (int)rank, data, nbytes, st);
      on_device = 1;
    } else {
      vals[slot] = pg_tensor_from_host(p->dev, t, dims, (int)rank, data, nbytes, st);
    }
    if (vals[slot] == NULL)
      err = pg_ort_status(PG_ORT_RUNTIME_EXCEPTION, "pluggable: partition %s: input '%s' on %s "
                          "failed: %s", p->name, p->slot_name[slot], p->dev->name,
                          TF_Message(st));
    else if (where == PG_ORT_IN_HOST)
      pg_ort_count_host_copies(1);
  }
  for (int si = 0; si < p->num_steps && err == NULL; si++) {
    step* s = &p->steps[si];
    TF_Tensor* in[MAX_STEP_IN];
    for (int k = 0; k < s->nin; k++) {
      int slot = s->in[k];
      in[k] = p->consts[slot] ? p->consts[slot] : vals[slot];
    }
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
    size_t nbytes = count_of(dims, (size_t)nd) * elem_size(want);
    int where = pg_ort_placement(ov, p->dev);
    if (where == PG_ORT_IN_OTHER) {
      err = pg_ort_status(PG_ORT_INVALID_ARGUMENT, "pluggable: partition %s: output '%s' is in "
                          "the memory of another device than %s", p->name,
                          p->slot_name[p->out_slot[j]], p->dev->name);
      break;
    }
    if (where == PG_ORT_IN_DEVICE) {
      /* Into ONNX Runtime's device tensor, within the device. */
      on_device = 1;
      pg_tensor_check(t, st);
      TF_Tensor* dst = TF_GetCode(st) == TF_OK
                           ? pg_ort_wrap_device(p->dev, want, dims, nd, data, nbytes, st)
                           : NULL;
      if (dst != NULL) {
        pg_tensor_copy_into(dst, t, st);
        TF_DeleteTensor(dst);
      }
    } else {
      pg_tensor_to_host(t, data, nbytes, st);
    }
    if (TF_GetCode(st) != TF_OK) {
      const char* op = pg_tensor_failed_op(t);
      err = pg_ort_status(PG_ORT_RUNTIME_EXCEPTION, "pluggable: partition %s: output '%s' "
                          "failed on %s%s%s: %s", p->name, p->slot_name[p->out_slot[j]],
                          p->dev->name, op ? " in kernel " : "", op ? op : "", TF_Message(st));
      break;
    }
    if (where == PG_ORT_IN_HOST) pg_ort_count_host_copies(1);
  }
  /* ONNX Runtime may free or read its device memory as soon as Compute
   * returns: the work that reads or writes it has finished by then, also
   * when a step failed after earlier ones were enqueued. */
  if (on_device) {
    TF_Status* wait = TF_NewStatus();
    pg_device_sync(p->dev, wait);
    if (err == NULL && TF_GetCode(wait) != TF_OK)
      err = pg_ort_status(PG_ORT_RUNTIME_EXCEPTION, "pluggable: partition %s on %s: %s", p->name,
                          p->dev->name, TF_Message(wait));
    TF_DeleteStatus(wait);
  }
  for (int i = 0; i < p->num_slots; i++)
    if (vals[i]) TF_DeleteTensor(vals[i]);
  free(vals);
  TF_DeleteStatus(st);
  return err;
}

/*** Compile ***/

/* Runs, now, every step whose inputs are all constants (the transposed
 * filter of a Conv with a constant weight): its result becomes a device
 * constant and the step leaves the partition. Constants no step reads any
 * more are freed. */
static OrtStatus* fold_constants(bridge_part* p) {
  OrtStatus* err = NULL;
  TF_Status* st = TF_NewStatus();
  int kept = 0;
  for (int i = 0; i < p->num_steps; i++) {
    step* s = &p->steps[i];
    int all = err == NULL && !p->is_output[s->out] && p->consts[s->out] == NULL;
    for (int k = 0; k < s->nin && all; k++) all = p->consts[s->in[k]] != NULL;
    if (all) {
      TF_Tensor* in[MAX_STEP_IN];
      for (int k = 0; k < s->nin; k++) in[k] = p->consts[s->in[k]];
      TF_Tensor* t = pg_kernel_run1(s->kernel, in, NULL, st);
      if (t != NULL) pg_tensor_check(t, st);
      if (t != NULL && TF_GetCode(st) == TF_OK) {
        COUNT(kernel_runs, 1);
        p->consts[s->out] = t;
        pg_kernel_release(s->kernel);
        free(s->in);
        continue;
      }
      err = pg_ort_status(PG_ORT_FAIL, "pluggable: node '%s' (ONNX %s, kernel %s on %s) failed "
                          "on its constant inputs: %s", p->node_name[s->node],
                          p->node_op[s->node], s->tf, p->dev->name, TF_Message(st));
      if (t != NULL) TF_DeleteTensor(t);
    }
    p->steps[kept++] = *s;
  }
  p->num_steps = kept;
  TF_DeleteStatus(st);
  int* used = calloc((size_t)p->num_slots + 1, sizeof *used);
  if (used == NULL) return err;
  for (int i = 0; i < p->num_steps; i++)
    for (int k = 0; k < p->steps[i].nin; k++) used[p->steps[i].in[k]] = 1;
  for (int i = 0; i < p->num_slots; i++)
    if (p->consts[i] != NULL && !used[i] && !p->is_output[i]) {
      TF_DeleteTensor(p->consts[i]);
      p->consts[i] = NULL;
      free(p->host_buf[i]);
      p->host_buf[i] = NULL;
    }
  free(used);
  return err;
}

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
    pg_ort_count_host_copies(1);
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
  if ((s = node_values(fused, INPUTS, &fin, &nfin)) ||
      (s = node_values(fused, OUTPUTS, &fout, &nfout)))
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
      int in[MAX_IO];
      for (int k = 0; k < MAX_IO; k++) in[k] = -1;
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
  if ((s = fold_constants(p))) goto fail;
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
