/* libpluggable_ort_ep.so: ONNX Runtime hosts pluggable's device plugins.
 *
 * The library holds its own copy of the core C runtime (c_api/src, linked
 * in, no Python) and loads the plugins through it, as the Python loader
 * does: pg_dlopen, SE_InitPlugin validated by pg_platform_init, the devices
 * by pg_device_create, TF_InitKernel by pg_call_init_kernel. The core's
 * registration hooks, which the Python package implements, are implemented
 * here in C (registry below).
 *
 * ONNX Runtime side: one OrtEpFactory per loaded plugin platform, named
 * "pluggable_<DEVICE_TYPE>", listing one OrtEpDevice per SP_ device; one OrtEp
 * per session. The ABI declarations are pg_ort_abi.h (our own). */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pg_core.h"
#include "pg_ort_abi.h"

#define PG_EXPORT __attribute__((visibility("default")))

/*** The bridge's host hooks (pg_host_hooks), installed before plugins load ***/

#define MAX_KERNELS 4096
static pg_kernel_def* kernels[MAX_KERNELS];
static int num_kernels;

static int bridge_register_kernel(pg_kernel_def* def, TF_Status* status) {
  if (def->outside_init) {
    TF_SetStatus(status, TF_FAILED_PRECONDITION,
                 "pluggable ORT bridge: kernels can only be registered inside TF_InitKernel");
    return 0;
  }
  if (def->overflow || def->name_too_long || def->device_type[0] == '\0') {
    TF_SetStatus(status, TF_INVALID_ARGUMENT,
                 "pluggable ORT bridge: kernel registration rejected (a name or a list "
                 "did not fit, or no device type)");
    return 0;
  }
  if (num_kernels >= MAX_KERNELS) {
    TF_SetStatus(status, TF_RESOURCE_EXHAUSTED, "pluggable ORT bridge: too many kernels");
    return 0;
  }
  kernels[num_kernels++] = def;
  return 1;
}

static int bridge_register_op(pg_op_builder* b, TF_Status* status) {
  (void)b;
  (void)status;
  return 0; /* the core frees it: the bridge runs only built-in ONNX ops */
}

static void bridge_infer_properties(TF_GraphProperties* p, const void* graph, size_t len,
                                    TF_Status* status) {
  (void)p, (void)graph, (void)len;
  TF_SetStatus(status, TF_UNIMPLEMENTED,
               "pluggable ORT bridge: graph properties are not available here");
}

static void bridge_function_library(TF_FunctionLibraryDefinition* lib, const void* graph,
                                    size_t len, TF_Status* status) {
  (void)lib, (void)graph, (void)len;
  TF_SetStatus(status, TF_UNIMPLEMENTED,
               "pluggable ORT bridge: function libraries are not available here");
}

static void bridge_op_def(const char* name, TF_Buffer* out, TF_Status* status) {
  (void)out;
  char msg[256];
  snprintf(msg, sizeof msg, "pluggable ORT bridge: no OpDef for '%s' here", name);
  TF_SetStatus(status, TF_UNIMPLEMENTED, msg);
}

static const pg_host_hooks bridge_hooks = {bridge_register_kernel, bridge_register_op,
                                           bridge_infer_properties, bridge_function_library,
                                           bridge_op_def};

/* The registered kernel for (op, device type), or NULL. */
__attribute__((unused)) static pg_kernel_def* find_kernel(const char* op, const char* device_type) {
  for (int i = 0; i < num_kernels; i++)
    if (strcmp(kernels[i]->op_name, op) == 0 &&
        strcmp(kernels[i]->device_type, device_type) == 0)
      return kernels[i];
  return NULL;
}

/*** Loading the plugins ***/

#define MAX_PLATFORMS 8
#define MAX_DEVICES 8

typedef struct bridge_platform {
  OrtEpFactory factory; /* first: an OrtEpFactory* is a bridge_platform* */
  char path[1024];
  char ep_name[96];
  char device_type[64];
  char platform_name[64];
  pg_platform* platform;
  pg_device* devices[MAX_DEVICES];
  int num_devices;
  int released;
} bridge_platform;

static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
static int loaded_once;
static bridge_platform platforms[MAX_PLATFORMS];
static int num_platforms;
/* What happened to each plugin file, for pg_ort_report. */
static char report[8192];
static size_t report_len;

static void note(const char* fmt, ...) {
  if (report_len >= sizeof report - 1) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(report + report_len, sizeof report - report_len, fmt, ap);
  va_end(ap);
  if (n > 0) report_len += (size_t)n;
  if (report_len >= sizeof report) report_len = sizeof report - 1;
}

/* What the bridge did with each plugin file: one line per file, "loaded" or
 * "quarantined: <why>". For tests and diagnostics. */
PG_EXPORT const char* pg_ort_report(void) { return report; }

static int skipped(const char* path) {
  const char* skip = getenv("PLUGGABLE_SKIP_PLUGINS");
  if (skip == NULL) return 0;
  const char* base = strrchr(path, '/');
  base = base ? base + 1 : path;
  size_t n = strlen(base);
  for (const char* s = skip; *s;) {
    const char* e = strchr(s, ',');
    size_t len = e ? (size_t)(e - s) : strlen(s);
    if (len == n && strncmp(s, base, n) == 0) return 1;
    if (!e) break;
    s = e + 1;
  }
  return 0;
}

static void load_file(const char* path) {
  for (int i = 0; i < num_platforms; i++)
    if (strcmp(platforms[i].path, path) == 0) return;
  if (skipped(path)) {
    note("%s: skipped (PLUGGABLE_SKIP_PLUGINS)\n", path);
    return;
  }
  if (num_platforms >= MAX_PLATFORMS) {
    note("%s: quarantined: more than %d plugin platforms\n", path, MAX_PLATFORMS);
    return;
  }
  char err[1024];
  void* h = pg_dlopen(path, err, sizeof err);
  if (h == NULL) {
    note("%s: quarantined: dlopen failed: %s\n", path, err);
    return;
  }
  void* se_init = pg_dlsym(h, "SE_InitPlugin");
  void* init_kernel = pg_dlsym(h, "TF_InitKernel");
  if (se_init == NULL) {
    note("%s: quarantined: it exports no SE_InitPlugin (no devices for ONNX Runtime)\n",
         path);
    return; /* the handle stays open: a library's code may be in use */
  }
  int id = 1000 + num_platforms;
  TF_Status* st = TF_NewStatus();
  pg_platform* plat = pg_platform_init(se_init, id, st);
  if (plat == NULL) {
    note("%s: quarantined: %s\n", path, TF_Message(st));
    TF_DeleteStatus(st);
    return;
  }
  for (int i = 0; i < num_platforms; i++) {
    if (strcmp(platforms[i].device_type, plat->platform->type) == 0) {
      note("%s: quarantined: device type '%s' is already provided by %s\n", path,
           plat->platform->type, platforms[i].path);
      TF_DeleteStatus(st);
      return;
    }
  }
  void* host_copy = pg_dlsym(h, "PG_GetHostCopyFns");
  if (host_copy != NULL) pg_platform_init_host_copy(plat, host_copy);
  bridge_platform* bp = &platforms[num_platforms];
  memset(bp, 0, sizeof *bp);
  snprintf(bp->path, sizeof bp->path, "%s", path);
  snprintf(bp->device_type, sizeof bp->device_type, "%s", plat->platform->type);
  snprintf(bp->platform_name, sizeof bp->platform_name, "%s", plat->platform->name);
  snprintf(bp->ep_name, sizeof bp->ep_name, "pluggable_%s", plat->platform->type);
  bp->platform = plat;
  for (int o = 0; o < plat->device_count && o < MAX_DEVICES; o++) {
    pg_device* d = pg_device_create(plat, o, st);
    if (d == NULL) {
      note("%s: quarantined: creating device %d failed: %s\n", path, o, TF_Message(st));
      TF_DeleteStatus(st);
      return;
    }
    bp->devices[bp->num_devices++] = d;
  }
  TF_DeleteStatus(st);
  if (init_kernel != NULL) pg_call_init_kernel(init_kernel, id);
  num_platforms++;
  note("%s: loaded: platform %s, device type %s, %d device(s)\n", path, bp->platform_name,
       bp->device_type, bp->num_devices);
}

static int has_suffix(const char* s, const char* suf) {
  size_t n = strlen(s), m = strlen(suf);
  return n >= m && strcmp(s + n - m, suf) == 0;
}

static int cmp_str(const void* a, const void* b) {
  return strcmp(*(char* const*)a, *(char* const*)b);
}

static void load_entry(const char* entry) {
  struct stat sb;
  if (entry[0] != '/') {
    note("%s: ignored: plugin directories and files must be absolute paths\n", entry);
    return;
  }
  if (stat(entry, &sb) != 0) return;
  if (S_ISREG(sb.st_mode)) {
    load_file(entry);
    return;
  }
  if (!S_ISDIR(sb.st_mode)) return;
  DIR* d = opendir(entry);
  if (d == NULL) return;
  char* names[256];
  int n = 0;
  struct dirent* e;
  while ((e = readdir(d)) != NULL && n < 256)
    if (has_suffix(e->d_name, ".so")) names[n++] = strdup(e->d_name);
  closedir(d);
  qsort(names, (size_t)n, sizeof names[0], cmp_str);
  for (int i = 0; i < n; i++) {
    char p[2048];
    snprintf(p, sizeof p, "%s/%s", entry, names[i]);
    if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode)) load_file(p);
    free(names[i]);
  }
}

/* The bridge's own directory (pluggable/onnx), found from this function. */
static void own_path(char* out, size_t cap) {
  Dl_info info;
  out[0] = '\0';
  if (dladdr((void*)own_path, &info) && info.dli_fname) snprintf(out, cap, "%s", info.dli_fname);
}

/* Plugins, in the Python loader's order: PLUGGABLE_PLUGIN_PATH entries, the
 * package's plugin directory (pluggable/plugins), the per-user directory.
 * The `pluggable.plugins` entry points are Python metadata: a plugin
 * distribution is found through PLUGGABLE_PLUGIN_PATH here. */
static void load_all(void) {
  const char* env = getenv("PLUGGABLE_PLUGIN_PATH");
  if (env != NULL) {
    char* copy = strdup(env);
    for (char* save = NULL, *tok = strtok_r(copy, ":", &save); tok;
         tok = strtok_r(NULL, ":", &save))
      load_entry(tok);
    free(copy);
  }
  char self[1024];
  own_path(self, sizeof self);
  char* slash = strrchr(self, '/');
  if (slash != NULL) {
    *slash = '\0';
    slash = strrchr(self, '/');
    if (slash != NULL) {
      *slash = '\0';
      char dir[1100];
      snprintf(dir, sizeof dir, "%s/plugins", self);
      load_entry(dir);
    }
  }
  const char* xdg = getenv("XDG_DATA_HOME");
  const char* home = getenv("HOME");
  char user[1100];
  if (xdg != NULL && xdg[0] == '/') {
    snprintf(user, sizeof user, "%s/pluggable/plugins", xdg);
    load_entry(user);
  } else if (home != NULL && home[0] == '/') {
    snprintf(user, sizeof user, "%s/.local/share/pluggable/plugins", home);
    load_entry(user);
  }
}

/*** ONNX Runtime's tables ***/

static const OrtApi* ort;       /* the negotiated OrtApi */
static const OrtEpApi* ort_ep;  /* its OrtEpApi */

#define API_FN(table, index, type) ((type)(((void* const*)(table))[index]))

static OrtStatus* make_status(const OrtApi* api, int code, const char* fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return API_FN(api, PG_ORT_CreateStatus, OrtStatus* (*)(int, const char*))(code, msg);
}

/*** The EP of one session ***/

typedef struct bridge_ep {
  OrtEp ep; /* first */
  bridge_platform* bp;
  pg_device* dev; /* the device ONNX Runtime chose (its OrtEpDevice's ordinal) */
} bridge_ep;

static const char* ep_get_name(const OrtEp* self) {
  return ((const bridge_ep*)self)->bp->ep_name;
}

/* The ONNX ops the bridge runs, and the plugin op (with its input names)
 * each maps to. TO BE REPLACED by the shared ONNX-to-op mapping
 * (pluggable/onnx/mapping.py) exported as a table at build time. */
typedef struct op_map {
  const char* onnx;
  const char* tf;
  int num_inputs;
  const char* inputs[2];
  int rank2; /* MatMul: TF's MatMul is 2-D only */
} op_map;
static const op_map OPS[] = {
    {"Add", "AddV2", 2, {"x", "y"}, 0}, {"Sub", "Sub", 2, {"x", "y"}, 0},
    {"Mul", "Mul", 2, {"x", "y"}, 0},   {"Relu", "Relu", 1, {"features", NULL}, 0},
    {"MatMul", "MatMul", 2, {"a", "b"}, 1},
};

static const op_map* find_op(const char* onnx) {
  for (size_t i = 0; i < sizeof OPS / sizeof OPS[0]; i++)
    if (strcmp(OPS[i].onnx, onnx) == 0) return &OPS[i];
  return NULL;
}

/* The kernel of `op` on `device_type` for float inputs. */
static pg_kernel_def* find_float_kernel(const char* op, const char* device_type) {
  for (int i = 0; i < num_kernels; i++) {
    pg_kernel_def* k = kernels[i];
    if (strcmp(k->op_name, op) != 0 || strcmp(k->device_type, device_type) != 0) continue;
    int ok = 1;
    for (int c = 0; c < k->num_constraints; c++)
      if (strcmp(k->constraint_attr[c], "T") == 0 && k->constraint_type[c] != TF_FLOAT) ok = 0;
    if (ok && k->label[0] == '\0') return k;
  }
  return NULL;
}

/* Runs of claimed nodes through plugin kernels (for tests and diagnostics). */
static int64_t kernel_runs;
PG_EXPORT int64_t pg_ort_kernel_runs(void) { return __atomic_load_n(&kernel_runs, __ATOMIC_SEQ_CST); }

#define CALL(name, type) API_FN(ort, PG_ORT_##name, type)
typedef OrtStatus* (*st_fn)();

/* 1 when every input of `node` is a float tensor (of rank 2 where `rank2`). */
static int float_inputs(const OrtNode* node, int rank2) {
  size_t n = 0;
  if (CALL(Node_GetNumInputs, OrtStatus* (*)(const OrtNode*, size_t*))(node, &n) || n == 0 ||
      n > 8)
    return 0;
  const void* vis[8];
  if (CALL(Node_GetInputs, OrtStatus* (*)(const OrtNode*, const void**, size_t))(node, vis, n))
    return 0;
  for (size_t i = 0; i < n; i++) {
    const void* ti = NULL;
    const void* tsi = NULL;
    int et = 0;
    size_t rank = 0;
    if (vis[i] == NULL ||
        CALL(GetValueInfoTypeInfo, OrtStatus* (*)(const void*, const void**))(vis[i], &ti) ||
        ti == NULL ||
        CALL(CastTypeInfoToTensorInfo, OrtStatus* (*)(const void*, const void**))(ti, &tsi) ||
        tsi == NULL ||
        CALL(GetTensorElementType, OrtStatus* (*)(const void*, int*))(tsi, &et) ||
        CALL(GetDimensionsCount, OrtStatus* (*)(const void*, size_t*))(tsi, &rank))
      return 0;
    if (et != PG_ONNX_FLOAT || (rank2 && rank != 2)) return 0;
  }
  return 1;
}

/* Claims each node of the ONNX domain whose op the table maps and whose
 * float kernel the plugin registered, one partition per node; ONNX Runtime
 * runs the rest on its CPU EP. */
static OrtStatus* ep_get_capability(OrtEp* self, const OrtGraph* graph,
                                    OrtEpGraphSupportInfo* info) {
  bridge_ep* e = (bridge_ep*)self;
  size_t n = 0;
  OrtStatus* s = CALL(Graph_GetNumNodes, OrtStatus* (*)(const OrtGraph*, size_t*))(graph, &n);
  if (s != NULL || n == 0) return s;
  const OrtNode** nodes = calloc(n, sizeof *nodes);
  if (nodes == NULL) return make_status(ort, PG_ORT_FAIL, "pluggable: out of memory");
  s = CALL(Graph_GetNodes, OrtStatus* (*)(const OrtGraph*, const OrtNode**, size_t))(graph,
                                                                                    nodes, n);
  for (size_t i = 0; s == NULL && i < n; i++) {
    const char* op = NULL;
    const char* domain = NULL;
    if (CALL(Node_GetOperatorType, OrtStatus* (*)(const OrtNode*, const char**))(nodes[i], &op) ||
        CALL(Node_GetDomain, OrtStatus* (*)(const OrtNode*, const char**))(nodes[i], &domain))
      continue;
    if (domain != NULL && domain[0] != '\0' && strcmp(domain, "ai.onnx") != 0) continue;
    const op_map* m = find_op(op);
    if (m == NULL || find_float_kernel(m->tf, e->bp->device_type) == NULL) continue;
    if (!float_inputs(nodes[i], m->rank2)) continue;
    s = API_FN(ort_ep, PG_ORTEP_EpGraphSupportInfo_AddNodesToFuse,
               OrtStatus* (*)(OrtEpGraphSupportInfo*, const OrtNode* const*, size_t,
                              const void*))(info, &nodes[i], 1, NULL);
  }
  free(nodes);
  return s;
}

/* One compiled partition: one plugin kernel on one device. */
typedef struct bridge_part {
  OrtNodeComputeInfo info; /* first */
  const op_map* map;
  pg_kernel* kernel;
  pg_device* dev;
  char node[256];
} bridge_part;

static OrtStatus* part_create_state(OrtNodeComputeInfo* self, OrtNodeComputeContext* ctx,
                                    void** state) {
  (void)ctx;
  *state = self;
  return NULL;
}
static void part_release_state(OrtNodeComputeInfo* self, void* state) { (void)self, (void)state; }

static OrtStatus* part_compute(OrtNodeComputeInfo* self, void* state, OrtKernelContext* ctx) {
  (void)state;
  bridge_part* p = (bridge_part*)self;
  TF_Status* st = TF_NewStatus();
  TF_Tensor* in[2] = {NULL, NULL};
  TF_Tensor* out = NULL;
  OrtStatus* err = NULL;
  for (int i = 0; i < p->map->num_inputs && err == NULL; i++) {
    const OrtValue* v = NULL;
    void* tsi = NULL;
    size_t rank = 0;
    int64_t dims[16];
    void* data = NULL;
    if ((err = CALL(KernelContext_GetInput, OrtStatus* (*)(OrtKernelContext*, size_t,
                                                           const OrtValue**))(ctx, i, &v)))
      break;
    if ((err = CALL(GetTensorTypeAndShape, OrtStatus* (*)(const OrtValue*, void**))(v, &tsi)))
      break;
    err = CALL(GetDimensionsCount, OrtStatus* (*)(const void*, size_t*))(tsi, &rank);
    if (err == NULL && rank > 16)
      err = make_status(ort, PG_ORT_INVALID_ARGUMENT, "pluggable: node '%s': rank %zu > 16",
                        p->node, rank);
    if (err == NULL)
      err = CALL(GetDimensions, OrtStatus* (*)(const void*, int64_t*, size_t))(tsi, dims, rank);
    CALL(ReleaseTensorTypeAndShapeInfo, void (*)(void*))(tsi);
    if (err == NULL)
      err = CALL(GetTensorMutableData, OrtStatus* (*)(OrtValue*, void**))((OrtValue*)v, &data);
    if (err != NULL) break;
    size_t count = 1;
    for (size_t d = 0; d < rank; d++) count *= (size_t)dims[d];
    in[i] = pg_tensor_from_host(p->dev, TF_FLOAT, dims, (int)rank, data, count * sizeof(float),
                                st);
    if (in[i] == NULL)
      err = make_status(ort, PG_ORT_RUNTIME_EXCEPTION,
                        "pluggable: node '%s' (%s): copying input %d to %s failed: %s", p->node,
                        p->map->onnx, i, p->dev->name, TF_Message(st));
  }
  if (err == NULL) {
    out = pg_kernel_run1(p->kernel, in, NULL, st);
    if (out == NULL)
      err = make_status(ort, PG_ORT_RUNTIME_EXCEPTION,
                        "pluggable: node '%s' (ONNX %s, kernel %s on %s) failed: %s", p->node,
                        p->map->onnx, p->map->tf, p->dev->name, TF_Message(st));
    else
      __atomic_add_fetch(&kernel_runs, 1, __ATOMIC_SEQ_CST);
  }
  if (err == NULL) {
    int nd = TF_NumDims(out);
    int64_t dims[16];
    size_t count = 1;
    for (int d = 0; d < nd && d < 16; d++) count *= (size_t)(dims[d] = TF_Dim(out, d));
    OrtValue* ov = NULL;
    void* data = NULL;
    err = CALL(KernelContext_GetOutput, OrtStatus* (*)(OrtKernelContext*, size_t,
                                                      const int64_t*, size_t, OrtValue**))(
        ctx, 0, dims, (size_t)nd, &ov);
    if (err == NULL) err = CALL(GetTensorMutableData, OrtStatus* (*)(OrtValue*, void**))(ov, &data);
    if (err == NULL) {
      pg_tensor_to_host(out, data, count * sizeof(float), st);
      if (TF_GetCode(st) != TF_OK)
        err = make_status(ort, PG_ORT_RUNTIME_EXCEPTION,
                          "pluggable: node '%s' (ONNX %s, kernel %s on %s) failed: %s",
                          p->node, p->map->onnx, p->map->tf, p->dev->name, TF_Message(st));
    }
  }
  for (int i = 0; i < 2; i++)
    if (in[i]) TF_DeleteTensor(in[i]);
  if (out) TF_DeleteTensor(out);
  TF_DeleteStatus(st);
  return err;
}

/* Live compiled partitions and EP instances: both return to 0 once ONNX
 * Runtime released every session (for tests: no leak). */
static int64_t live_parts, live_eps;
PG_EXPORT int64_t pg_ort_live_partitions(void) {
  return __atomic_load_n(&live_parts, __ATOMIC_SEQ_CST);
}
PG_EXPORT int64_t pg_ort_live_eps(void) { return __atomic_load_n(&live_eps, __ATOMIC_SEQ_CST); }

static void free_part(bridge_part* p) {
  if (p == NULL) return;
  __atomic_sub_fetch(&live_parts, 1, __ATOMIC_SEQ_CST);
  if (p->kernel) pg_kernel_release(p->kernel);
  free(p);
}

static OrtStatus* ep_compile(OrtEp* self, const OrtGraph** graphs, const OrtNode** fused,
                             size_t count, OrtNodeComputeInfo** infos, OrtNode** ctx_nodes) {
  (void)ctx_nodes;
  bridge_ep* e = (bridge_ep*)self;
  for (size_t i = 0; i < count; i++) infos[i] = NULL;
  for (size_t i = 0; i < count; i++) {
    const OrtNode* node = NULL;
    size_t n = 0;
    const char* op = NULL;
    const char* name = NULL;
    OrtStatus* s = CALL(Graph_GetNumNodes, OrtStatus* (*)(const OrtGraph*, size_t*))(graphs[i], &n);
    if (s == NULL && n != 1)
      s = make_status(ort, PG_ORT_FAIL, "pluggable: a partition of %zu nodes (1 expected)", n);
    if (s == NULL)
      s = CALL(Graph_GetNodes, OrtStatus* (*)(const OrtGraph*, const OrtNode**, size_t))(
          graphs[i], &node, 1);
    if (s == NULL)
      s = CALL(Node_GetOperatorType, OrtStatus* (*)(const OrtNode*, const char**))(node, &op);
    if (s == NULL)
      s = CALL(Node_GetName, OrtStatus* (*)(const OrtNode*, const char**))(node, &name);
    if (s == NULL && (name == NULL || name[0] == '\0')) /* an unnamed ONNX node */
      s = CALL(Node_GetName, OrtStatus* (*)(const OrtNode*, const char**))(fused[i], &name);
    bridge_part* p = s == NULL ? calloc(1, sizeof *p) : NULL;
    if (s == NULL && p == NULL) s = make_status(ort, PG_ORT_FAIL, "pluggable: out of memory");
    if (p != NULL) __atomic_add_fetch(&live_parts, 1, __ATOMIC_SEQ_CST);
    if (s == NULL) {
      snprintf(p->node, sizeof p->node, "%s", name ? name : "?");
      p->map = find_op(op);
      p->dev = e->dev;
      pg_kernel_def* def = p->map ? find_float_kernel(p->map->tf, e->bp->device_type) : NULL;
      if (def == NULL) {
        s = make_status(ort, PG_ORT_FAIL, "pluggable: node '%s' (%s): no kernel on %s", p->node,
                        op, e->bp->device_type);
      } else {
        pg_attrs* attrs = pg_attrs_new();
        pg_attrs_set_type(attrs, "T", TF_FLOAT);
        if (p->map->rank2) {
          pg_attrs_set_bool(attrs, "transpose_a", 0);
          pg_attrs_set_bool(attrs, "transpose_b", 0);
        }
        unsigned char host[2] = {0, 0};
        TF_DataType out_type = TF_FLOAT;
        TF_Status* st = TF_NewStatus();
        p->kernel = pg_kernel_create(def, p->dev, attrs, p->map->num_inputs, p->map->inputs,
                                     host, 1, &out_type, host, st);
        if (p->kernel == NULL)
          s = make_status(ort, PG_ORT_FAIL, "pluggable: node '%s': creating kernel %s on %s "
                          "failed: %s", p->node, p->map->tf, p->dev->name, TF_Message(st));
        TF_DeleteStatus(st);
        pg_attrs_free(attrs);
      }
    }
    if (s != NULL) {
      free_part(p);
      for (size_t j = 0; j < i; j++) free_part((bridge_part*)infos[j]), infos[j] = NULL;
      return s;
    }
    p->info.ort_version_supported = PG_ORT_API_VERSION;
    p->info.CreateState = part_create_state;
    p->info.Compute = part_compute;
    p->info.ReleaseState = part_release_state;
    infos[i] = &p->info;
  }
  return NULL;
}

static void ep_release_infos(OrtEp* self, OrtNodeComputeInfo** infos, size_t count) {
  (void)self;
  for (size_t i = 0; i < count; i++) free_part((bridge_part*)infos[i]);
}

/*** The factory of one platform ***/

static const char* f_get_name(const OrtEpFactory* self) {
  return ((const bridge_platform*)self)->ep_name;
}
static const char* f_get_vendor(const OrtEpFactory* self) {
  (void)self;
  return "pluggable";
}
static uint32_t f_get_vendor_id(const OrtEpFactory* self) {
  (void)self;
  return 0;
}
static const char* f_get_version(const OrtEpFactory* self) {
  (void)self;
  return "0.1.0";
}
static OrtStatus* f_validate_compiled(OrtEpFactory* self, const OrtHardwareDevice* const* d,
                                      size_t n, const char* info, int* compat) {
  (void)self, (void)d, (void)n, (void)info;
  *compat = 0; /* not applicable: the bridge writes no precompiled models */
  return NULL;
}
static OrtStatus* f_create_allocator(OrtEpFactory* self, const OrtMemoryInfo* mi,
                                     const OrtKeyValuePairs* opts, OrtAllocator** out) {
  (void)self, (void)mi, (void)opts;
  *out = NULL; /* the OrtEpDevices declare no memory of their own yet */
  return NULL;
}
static void f_release_allocator(OrtEpFactory* self, OrtAllocator* a) { (void)self, (void)a; }
static OrtStatus* f_create_data_transfer(OrtEpFactory* self, void** out) {
  (void)self;
  *out = NULL;
  return NULL;
}
static OrtStatus* f_create_sync_stream(OrtEpFactory* self, const void* md,
                                       const OrtKeyValuePairs* opts, void** out) {
  (void)self, (void)md, (void)opts;
  *out = NULL;
  return NULL;
}
static bool f_is_stream_aware(const OrtEpFactory* self) {
  (void)self;
  return false;
}

static OrtStatus* add_pair(OrtKeyValuePairs* kv, const char* k, const char* v) {
  API_FN(ort, PG_ORT_AddKeyValuePair, void (*)(OrtKeyValuePairs*, const char*, const char*))(
      kv, k, v);
  return NULL;
}

/* One OrtEpDevice per SP_ device, over the ONNX Runtime hardware device of
 * its kind: a GPU plugin's devices over ONNX Runtime's GPU (in order), any
 * other plugin's over the CPU (host-emulated or third-party hardware that ONNX
 * Runtime does not enumerate). */
static OrtStatus* f_get_supported_devices(OrtEpFactory* self,
                                          const OrtHardwareDevice* const* hw, size_t num_hw,
                                          OrtEpDevice** out, size_t max, size_t* num_out) {
  bridge_platform* bp = (bridge_platform*)self;
  int want = strcmp(bp->device_type, "GPU") == 0 ? PG_ORT_HW_GPU : PG_ORT_HW_CPU;
  typedef int (*type_fn)(const OrtHardwareDevice*);
  typedef OrtStatus* (*create_fn)(OrtEpFactory*, const OrtHardwareDevice*,
                                  const OrtKeyValuePairs*, const OrtKeyValuePairs*,
                                  OrtEpDevice**);
  *num_out = 0;
  size_t next_hw = 0;
  for (int i = 0; i < bp->num_devices && *num_out < max; i++) {
    const OrtHardwareDevice* match = NULL;
    for (size_t j = (want == PG_ORT_HW_GPU ? next_hw : 0); j < num_hw; j++) {
      if (API_FN(ort, PG_ORT_HardwareDevice_Type, type_fn)(hw[j]) == want) {
        match = hw[j];
        if (want == PG_ORT_HW_GPU) next_hw = j + 1;
        break;
      }
    }
    if (match == NULL) break; /* no such hardware visible to ONNX Runtime */
    OrtKeyValuePairs* meta = NULL;
    API_FN(ort, PG_ORT_CreateKeyValuePairs, void (*)(OrtKeyValuePairs**))(&meta);
    char ordinal[16];
    snprintf(ordinal, sizeof ordinal, "%d", i);
    add_pair(meta, "pluggable.device", bp->devices[i]->name);
    add_pair(meta, "pluggable.device_type", bp->device_type);
    add_pair(meta, "pluggable.ordinal", ordinal);
    add_pair(meta, "pluggable.platform", bp->platform_name);
    add_pair(meta, "pluggable.plugin", bp->path);
    OrtEpDevice* dev = NULL;
    OrtStatus* s = API_FN(ort_ep, PG_ORTEP_CreateEpDevice, create_fn)(self, match, meta, NULL,
                                                                      &dev);
    API_FN(ort, PG_ORT_ReleaseKeyValuePairs, void (*)(OrtKeyValuePairs*))(meta);
    if (s != NULL) return s;
    out[(*num_out)++] = dev;
  }
  return NULL;
}

static OrtStatus* f_create_ep(OrtEpFactory* self, const OrtHardwareDevice* const* hw,
                              const OrtKeyValuePairs* const* meta, size_t n,
                              const OrtSessionOptions* opts, const OrtLogger* logger,
                              OrtEp** out) {
  (void)hw, (void)opts, (void)logger;
  bridge_ep* e = calloc(1, sizeof *e);
  if (e == NULL)
    return make_status(ort, PG_ORT_FAIL, "pluggable: out of memory creating the EP");
  e->bp = (bridge_platform*)self;
  e->dev = e->bp->devices[0];
  /* The first chosen device; its OrtEpDevice's metadata names the ordinal. */
  const char* ord = n > 0 && meta != NULL && meta[0] != NULL
                        ? API_FN(ort, PG_ORT_GetKeyValue,
                                 const char* (*)(const OrtKeyValuePairs*, const char*))(
                              meta[0], "pluggable.ordinal")
                        : NULL;
  if (ord != NULL) {
    int o = atoi(ord);
    if (o < 0 || o >= e->bp->num_devices) {
      OrtStatus* s = make_status(ort, PG_ORT_INVALID_ARGUMENT,
                                 "pluggable: %s has no device %s (it has %d)", e->bp->ep_name,
                                 ord, e->bp->num_devices);
      free(e);
      return s;
    }
    e->dev = e->bp->devices[o];
  }
  e->ep.ort_version_supported = PG_ORT_API_VERSION;
  e->ep.GetName = ep_get_name;
  e->ep.GetCapability = ep_get_capability;
  e->ep.Compile = ep_compile;
  e->ep.ReleaseNodeComputeInfos = ep_release_infos;
  __atomic_add_fetch(&live_eps, 1, __ATOMIC_SEQ_CST);
  *out = &e->ep;
  return NULL;
}

static void f_release_ep(OrtEpFactory* self, OrtEp* ep) {
  (void)self;
  if (ep != NULL) __atomic_sub_fetch(&live_eps, 1, __ATOMIC_SEQ_CST);
  free(ep);
}

/* The running ONNX Runtime's table of `version`, else NULL. */
static OrtStatus* negotiate(const OrtApiBase* base, const OrtApi** api_out) {
  *api_out = NULL;
  if (base == NULL || base->GetApi == NULL) return NULL;
  const OrtApi* api = base->GetApi(PG_ORT_MIN_API_VERSION);
  if (api != NULL) {
    *api_out = api;
    return NULL;
  }
  const OrtApi* v1 = base->GetApi(1); /* every ONNX Runtime has version 1 */
  const char* release = base->GetVersionString ? base->GetVersionString() : "?";
  if (v1 == NULL) return NULL;
  return make_status(v1, PG_ORT_NOT_IMPLEMENTED,
                     "pluggable: ONNX Runtime %s is too old for the pluggable execution "
                     "provider, which needs API version %d (onnxruntime 1.%d or newer): "
                     "upgrade onnxruntime (pip install -U onnxruntime)",
                     release, PG_ORT_MIN_API_VERSION, PG_ORT_MIN_API_VERSION);
}

PG_EXPORT OrtStatus* CreateEpFactories(const char* registered_name,
                                       const OrtApiBase* ort_api_base,
                                       const OrtLogger* default_logger,
                                       OrtEpFactory** factories, size_t max_factories,
                                       size_t* num_factories) {
  (void)registered_name, (void)default_logger;
  *num_factories = 0;
  const OrtApi* api = NULL;
  OrtStatus* refused = negotiate(ort_api_base, &api);
  if (api == NULL) return refused; /* NULL only when not even version 1 exists */
  const OrtEpApi* epapi = API_FN(api, PG_ORT_GetEpApi, const OrtEpApi* (*)(void))();
  if (epapi == NULL)
    return make_status(api, PG_ORT_FAIL, "pluggable: ONNX Runtime gave no OrtEpApi");
  /* Plugins leave the TF_* symbols unresolved: they bind to the first
   * definition in the process's global scope, which must be this library's
   * core. ONNX Runtime opened it locally; make its symbols global. */
  char self[1024];
  own_path(self, sizeof self);
  if (self[0] == '\0' || dlopen(self, RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL) == NULL)
    return make_status(api, PG_ORT_FAIL,
                       "pluggable: cannot make the bridge's core symbols global (%s)",
                       dlerror());
  /* The global scope in load order, as a plugin's undefined symbols see it
   * (RTLD_DEFAULT would search this -Bsymbolic library first). */
  void* global = dlopen(NULL, RTLD_LAZY);
  void* first = global ? dlsym(global, "TF_NewStatus") : NULL;
  if (first != (void*)TF_NewStatus) {
    Dl_info info = {0};
    dladdr(first, &info);
    return make_status(api, PG_ORT_FAIL,
                       "pluggable: another copy of the core runtime (%s) is loaded in this "
                       "process, so plugins would bind to it: run ONNX Runtime with the "
                       "pluggable EP in a process that has not imported pluggable",
                       info.dli_fname ? info.dli_fname : "?");
  }
  pthread_mutex_lock(&load_lock);
  ort = api;
  ort_ep = epapi;
  if (!loaded_once) {
    loaded_once = 1;
    pg_set_host_hooks(&bridge_hooks);
    load_all();
  }
  size_t n = 0;
  for (int i = 0; i < num_platforms && n < max_factories; i++) {
    bridge_platform* bp = &platforms[i];
    if (bp->num_devices == 0) continue;
    OrtEpFactory* f = &bp->factory;
    memset(f, 0, sizeof *f);
    f->ort_version_supported = PG_ORT_API_VERSION;
    f->GetName = f_get_name;
    f->GetVendor = f_get_vendor;
    f->GetSupportedDevices = f_get_supported_devices;
    f->CreateEp = f_create_ep;
    f->ReleaseEp = f_release_ep;
    f->GetVendorId = f_get_vendor_id;
    f->GetVersion = f_get_version;
    f->ValidateCompiledModelCompatibilityInfo = f_validate_compiled;
    f->CreateAllocator = f_create_allocator;
    f->ReleaseAllocator = f_release_allocator;
    f->CreateDataTransfer = f_create_data_transfer;
    f->IsStreamAware = f_is_stream_aware;
    f->CreateSyncStreamForDevice = f_create_sync_stream;
    bp->released = 0;
    factories[n++] = f;
  }
  pthread_mutex_unlock(&load_lock);
  *num_factories = n;
  return NULL;
}

PG_EXPORT OrtStatus* ReleaseEpFactory(OrtEpFactory* factory) {
  /* The platforms and devices live as long as the process: a plugin's
   * library is never unloaded (its code may still run on other threads). */
  ((bridge_platform*)factory)->released = 1;
  return NULL;
}
