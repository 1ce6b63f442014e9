/* Graph optimizer plugins (grappler.h): TF_InitGraph and the validation of
 * what it fills, the optimizer's life (create once, optimize, destroy at
 * exit), the grappler item, graph properties and op definitions.
 *
 * Graph properties and op definitions need the framework's op registry and
 * protobuf messages, which live in Python: TF_InferStatically and
 * TF_NewFunctionLibraryDefinition call a Python hook that parses the graph
 * and stores serialised messages here (pg_blob_table_add); TF_LookUpOpDef
 * asks a hook for ops that are not functions of the graph. */
#include "grappler.h"

#include "internal.h"

#define SPARE_BYTES 4096

/*** A table of named lists of serialised messages ***/

typedef struct pg_blob {
  char* data;
  size_t len;
} pg_blob;

typedef struct pg_blob_entry {
  char* name;
  int n[2];          /* blobs per kind (inputs, outputs / signature) */
  int cap[2];
  pg_blob* blobs[2];
} pg_blob_entry;

/* Open addressing on the name's hash; `cap` is a power of two. */
typedef struct pg_blob_table {
  pg_blob_entry* slots;
  size_t cap, used;
} pg_blob_table;

static uint64_t hash_name(const char* s) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (; *s; ++s) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static pg_blob_entry* table_find(const pg_blob_table* t, const char* name) {
  if (t->cap == 0 || name == NULL) return NULL;
  for (size_t i = hash_name(name) & (t->cap - 1);; i = (i + 1) & (t->cap - 1)) {
    pg_blob_entry* e = &t->slots[i];
    if (e->name == NULL) return NULL;
    if (strcmp(e->name, name) == 0) return e;
  }
}

static int table_grow(pg_blob_table* t) {
  size_t cap = t->cap ? t->cap * 2 : 64;
  pg_blob_entry* slots = calloc(cap, sizeof(pg_blob_entry));
  if (slots == NULL) return 0;
  for (size_t i = 0; i < t->cap; ++i) {
    if (t->slots[i].name == NULL) continue;
    size_t j = hash_name(t->slots[i].name) & (cap - 1);
    while (slots[j].name != NULL) j = (j + 1) & (cap - 1);
    slots[j] = t->slots[i];
  }
  free(t->slots);
  t->slots = slots;
  t->cap = cap;
  return 1;
}

static pg_blob_entry* table_entry(pg_blob_table* t, const char* name) {
  pg_blob_entry* e = table_find(t, name);
  if (e != NULL) return e;
  if ((t->used + 1) * 2 > t->cap && !table_grow(t)) return NULL;
  size_t i = hash_name(name) & (t->cap - 1);
  while (t->slots[i].name != NULL) i = (i + 1) & (t->cap - 1);
  e = &t->slots[i];
  e->name = malloc(strlen(name) + 1);
  if (e->name == NULL) return NULL;
  strcpy(e->name, name);
  t->used++;
  return e;
}

static void table_free(pg_blob_table* t) {
  for (size_t i = 0; i < t->cap; ++i) {
    pg_blob_entry* e = &t->slots[i];
    if (e->name == NULL) continue;
    for (int k = 0; k < 2; ++k) {
      for (int j = 0; j < e->n[k]; ++j) free(e->blobs[k][j].data);
      free(e->blobs[k]);
    }
    free(e->name);
  }
  free(t->slots);
  memset(t, 0, sizeof *t);
}

/* Appends a copy of data[0..len) to list `kind` of entry `name`. */
static int table_add(pg_blob_table* t, const char* name, int kind,
                     const void* data, size_t len) {
  if (name == NULL || kind < 0 || kind > 1) return 0;
  pg_blob_entry* e = table_entry(t, name);
  if (e == NULL) return 0;
  if (e->n[kind] == e->cap[kind]) {
    int cap = e->cap[kind] ? e->cap[kind] * 2 : 4;
    pg_blob* grown = realloc(e->blobs[kind], (size_t)cap * sizeof(pg_blob));
    if (grown == NULL) return 0;
    e->blobs[kind] = grown;
    e->cap[kind] = cap;
  }
  char* copy = malloc(len ? len : 1);
  if (copy == NULL) return 0;
  if (len) memcpy(copy, data, len);
  e->blobs[kind][e->n[kind]++] = (pg_blob){copy, len};
  return 1;
}

/*** The grappler item ***/

struct TF_GrapplerItem {
  const void* graph; /* the serialised GraphDef (borrowed from the caller) */
  size_t graph_len;
  int num_fetch, num_preserve;
  char** fetch;
  char** preserve;
};

static char** copy_names(const char* const* names, int n) {
  char** out = calloc(n > 0 ? (size_t)n : 1, sizeof(char*));
  if (out == NULL) return NULL;
  for (int i = 0; i < n; ++i) {
    const char* s = names[i] != NULL ? names[i] : "";
    out[i] = malloc(strlen(s) + 1);
    if (out[i] == NULL) {
      while (i-- > 0) free(out[i]);
      free(out);
      return NULL;
    }
    strcpy(out[i], s);
  }
  return out;
}

static void free_names(char** names, int n) {
  if (names == NULL) return;
  for (int i = 0; i < n; ++i) free(names[i]);
  free(names);
}

TF_GrapplerItem* pg_grappler_item_new(const void* graph, size_t graph_len,
                                      const char* const* fetch, int num_fetch,
                                      const char* const* preserve,
                                      int num_preserve) {
  TF_GrapplerItem* item = calloc(1, sizeof(TF_GrapplerItem));
  if (item == NULL) return NULL;
  item->graph = graph;
  item->graph_len = graph_len;
  item->num_fetch = num_fetch > 0 ? num_fetch : 0;
  item->num_preserve = num_preserve > 0 ? num_preserve : 0;
  item->fetch = copy_names(fetch, item->num_fetch);
  item->preserve = copy_names(preserve, item->num_preserve);
  if (item->fetch == NULL || item->preserve == NULL) {
    pg_grappler_item_free(item);
    return NULL;
  }
  return item;
}

void pg_grappler_item_free(TF_GrapplerItem* item) {
  if (item == NULL) return;
  free_names(item->fetch, item->num_fetch);
  free_names(item->preserve, item->num_preserve);
  free(item);
}

static void list_size(char** names, int n, int* num_values,
                      size_t* storage_size, TF_Status* status) {
  TF_SetStatus(status, TF_OK, "");
  size_t total = 0;
  for (int i = 0; i < n; ++i) total += strlen(names[i]);
  if (num_values != NULL) *num_values = n;
  if (storage_size != NULL) *storage_size = total;
}

static void list_copy(char** names, int n, char** values, size_t* lengths,
                      int num_values, void* storage, size_t storage_size,
                      TF_Status* status) {
  TF_SetStatus(status, TF_OK, "");
  int count = n < num_values ? n : num_values;
  if (count > 0 && (values == NULL || lengths == NULL || storage == NULL)) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "values, lengths and storage must not be NULL");
    return;
  }
  char* p = storage;
  size_t used = 0;
  for (int i = 0; i < count; ++i) {
    size_t len = strlen(names[i]);
    if (used + len > storage_size) {
      pg_set_status(status, TF_INVALID_ARGUMENT,
                    "storage_size %zu is too small for the list of node "
                    "names: ask its size first", storage_size);
      return;
    }
    memcpy(p + used, names[i], len);
    values[i] = p + used;
    lengths[i] = len;
    used += len;
  }
}

#define CHECK_ITEM(item, status)                                          \
  if ((item) == NULL) {                                                   \
    pg_set_status(status, TF_INVALID_ARGUMENT, "the item is NULL");       \
    return;                                                               \
  }

void TF_GetNodesToPreserveListSize(const TF_GrapplerItem* item,
                                   int* num_values, size_t* storage_size,
                                   TF_Status* status) {
  CHECK_ITEM(item, status);
  list_size(item->preserve, item->num_preserve, num_values, storage_size,
            status);
}

void TF_GetNodesToPreserveList(const TF_GrapplerItem* item, char** values,
                               size_t* lengths, int num_values, void* storage,
                               size_t storage_size, TF_Status* status) {
  CHECK_ITEM(item, status);
  list_copy(item->preserve, item->num_preserve, values, lengths, num_values,
            storage, storage_size, status);
}

void TF_GetFetchNodesListSize(const TF_GrapplerItem* item, int* num_values,
                              size_t* storage_size, TF_Status* status) {
  CHECK_ITEM(item, status);
  list_size(item->fetch, item->num_fetch, num_values, storage_size, status);
}

void TF_GetFetchNodesList(const TF_GrapplerItem* item, char** values,
                          size_t* lengths, int num_values, void* storage,
                          size_t storage_size, TF_Status* status) {
  CHECK_ITEM(item, status);
  list_copy(item->fetch, item->num_fetch, values, lengths, num_values, storage,
            storage_size, status);
}

/*** Graph properties ***/

struct TF_GraphProperties {
  const TF_GrapplerItem* item;
  int inferred;
  pg_blob_table nodes; /* kind 0: input properties, kind 1: output */
};

TF_GraphProperties* TF_NewGraphProperties(const TF_GrapplerItem* item) {
  TF_GraphProperties* p = calloc(1, sizeof(TF_GraphProperties));
  if (p != NULL) p->item = item;
  return p;
}

void TF_DeleteGraphProperties(TF_GraphProperties* p) {
  if (p == NULL) return;
  table_free(&p->nodes);
  free(p);
}

int pg_graph_properties_add(TF_GraphProperties* p, const char* node, int kind,
                            const void* data, size_t len) {
  return p != NULL && table_add(&p->nodes, node, kind, data, len);
}

void TF_InferStatically(TF_GraphProperties* p, TF_Bool assume_valid_feeds,
                        TF_Bool aggressive_shape_inference,
                        TF_Bool include_input_tensor_values,
                        TF_Bool include_output_tensor_values, TF_Status* s) {
  (void)assume_valid_feeds, (void)aggressive_shape_inference;
  (void)include_input_tensor_values, (void)include_output_tensor_values;
  TF_SetStatus(s, TF_OK, "");
  if (p == NULL || p->item == NULL) {
    pg_set_status(s, TF_INVALID_ARGUMENT,
                  "TF_InferStatically: the graph properties are NULL");
    return;
  }
  if (p->inferred) return;
  table_free(&p->nodes);
  TF_Status* local = s != NULL ? s : TF_NewStatus();
  pg_hooks.infer_properties(p, p->item->graph, p->item->graph_len, local);
  if (TF_GetCode(local) == TF_OK) p->inferred = 1;
  else table_free(&p->nodes);
  if (local != s) TF_DeleteStatus(local);
}

static pg_blob_entry* props_entry(TF_GraphProperties* p, const char* name,
                                  TF_Status* status) {
  TF_SetStatus(status, TF_OK, "");
  if (p == NULL || name == NULL) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "graph properties and node name must not be NULL");
    return NULL;
  }
  return table_find(&p->nodes, name);
}

static void props_size(TF_GraphProperties* p, const char* name, int kind,
                       int* num_values, TF_Status* status) {
  pg_blob_entry* e = props_entry(p, name, status);
  if (num_values != NULL) *num_values = e != NULL ? e->n[kind] : 0;
}

/* Stores a copy of `b` in the empty buffer `out`. */
static int fill_buffer(TF_Buffer* out, const pg_blob* b, TF_Status* status) {
  if (out == NULL || out->data != NULL || out->length != 0) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "the output TF_Buffer must be empty (as TF_NewBuffer makes "
                  "it)");
    return 0;
  }
  if (!pg_tf_buffer_fill(out, b->data, b->len)) {
    pg_set_status(status, TF_RESOURCE_EXHAUSTED, "out of host memory");
    return 0;
  }
  return 1;
}

static void props_list(TF_GraphProperties* p, const char* name, int kind,
                       TF_Buffer** properties, int num_values,
                       TF_Status* status) {
  pg_blob_entry* e = props_entry(p, name, status);
  if (e == NULL) return;
  int count = e->n[kind] < num_values ? e->n[kind] : num_values;
  if (count > 0 && properties == NULL) {
    pg_set_status(status, TF_INVALID_ARGUMENT, "properties must not be NULL");
    return;
  }
  for (int i = 0; i < count; ++i)
    if (!fill_buffer(properties[i], &e->blobs[kind][i], status)) return;
}

void TF_GetInputPropertiesListSize(TF_GraphProperties* p, const char* name,
                                   int* num_values, TF_Status* status) {
  props_size(p, name, 0, num_values, status);
}

void TF_GetOutputPropertiesListSize(TF_GraphProperties* p, const char* name,
                                    int* num_values, TF_Status* status) {
  props_size(p, name, 1, num_values, status);
}

void TF_GetInputPropertiesList(TF_GraphProperties* p, const char* name,
                               TF_Buffer** properties, int num_values,
                               TF_Status* status) {
  props_list(p, name, 0, properties, num_values, status);
}

void TF_GetOutputPropertiesList(TF_GraphProperties* p, const char* name,
                                TF_Buffer** properties, int num_values,
                                TF_Status* status) {
  props_list(p, name, 1, properties, num_values, status);
}

/*** Function libraries and op definitions ***/

struct TF_FunctionLibraryDefinition {
  pg_blob_table functions; /* kind 0: the signature OpDef of each function */
};

int pg_function_library_add(TF_FunctionLibraryDefinition* lib,
                            const char* name, const void* data, size_t len) {
  return lib != NULL && table_add(&lib->functions, name, 0, data, len);
}

TF_FunctionLibraryDefinition* TF_NewFunctionLibraryDefinition(
    const TF_Buffer* graph_buf, TF_Status* status) {
  TF_SetStatus(status, TF_OK, "");
  if (graph_buf == NULL || (graph_buf->data == NULL && graph_buf->length)) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "TF_NewFunctionLibraryDefinition: the graph buffer is NULL");
    return NULL;
  }
  TF_FunctionLibraryDefinition* lib =
      calloc(1, sizeof(TF_FunctionLibraryDefinition));
  if (lib == NULL) {
    pg_set_status(status, TF_RESOURCE_EXHAUSTED, "out of host memory");
    return NULL;
  }
  TF_Status* local = status != NULL ? status : TF_NewStatus();
  pg_hooks.function_library(lib, graph_buf->data, graph_buf->length, local);
  int ok = TF_GetCode(local) == TF_OK;
  if (local != status) TF_DeleteStatus(local);
  if (!ok) {
    TF_DeleteFunctionLibraryDefinition(lib);
    return NULL;
  }
  return lib;
}

void TF_DeleteFunctionLibraryDefinition(TF_FunctionLibraryDefinition* lib) {
  if (lib == NULL) return;
  table_free(&lib->functions);
  free(lib);
}

void TF_LookUpOpDef(TF_FunctionLibraryDefinition* lib, const char* name,
                    TF_Buffer* buf, TF_Status* s) {
  TF_SetStatus(s, TF_OK, "");
  if (lib == NULL || name == NULL) {
    pg_set_status(s, TF_INVALID_ARGUMENT,
                  "TF_LookUpOpDef: library and name must not be NULL");
    return;
  }
  if (buf == NULL || buf->data != NULL || buf->length != 0) {
    pg_set_status(s, TF_INVALID_ARGUMENT,
                  "TF_LookUpOpDef: the output TF_Buffer must be empty (as "
                  "TF_NewBuffer makes it)");
    return;
  }
  pg_blob_entry* e = table_find(&lib->functions, name);
  if (e != NULL && e->n[0] > 0) {
    fill_buffer(buf, &e->blobs[0][0], s);
    return;
  }
  TF_Status* local = s != NULL ? s : TF_NewStatus();
  pg_hooks.op_def(name, buf, local);
  if (local != s) TF_DeleteStatus(local);
}

/*** Optimizer registration ***/

struct pg_optimizer {
  TP_OptimizerRegistrationParams* params;
  TP_OptimizerConfigs* configs;
  TP_Optimizer* optimizer;
  pthread_mutex_t mu; /* one optimize_func at a time per state */
  void* state;
  int created;
  int plugin_id;
};

static void* new_struct(size_t size, size_t struct_size) {
  void* p = calloc(1, size + SPARE_BYTES);
  if (p != NULL) *(size_t*)p = struct_size;
  return p;
}

static void free_optimizer(pg_optimizer* o) {
  if (o == NULL) return;
  free(o->params);
  free(o->configs);
  free(o->optimizer);
  free(o);
}

/* Rejects a struct the plugin left at struct_size 0. */
static int check_size(size_t struct_size, const char* name, const char* macro,
                      TF_Status* status) {
  if (struct_size != 0) return 1;
  pg_set_status(status, TF_FAILED_PRECONDITION,
                "%s.struct_size is 0: the plugin must set it to %s", name,
                macro);
  return 0;
}

/* Zeroes the part of a struct past the plugin's struct_size. */
static void clear_past(void* s, size_t size) {
  size_t struct_size = *(size_t*)s;
  if (struct_size < size) memset((char*)s + struct_size, 0, size - struct_size);
}

static int validate(pg_optimizer* o, TF_Status* status) {
  TP_OptimizerRegistrationParams* p = o->params;
  if (!check_size(p->struct_size, "TP_OptimizerRegistrationParams",
                  "TP_OPTIMIZER_REGISTRATION_PARAMS_STRUCT_SIZE", status))
    return 0;
  if (p->major_version != GO_MAJOR) {
    pg_set_status(status, TF_FAILED_PRECONDITION,
                  "the graph optimizer was built for graph C API %d.%d.%d, "
                  "this core implements %d.%d.%d; major versions must match: "
                  "rebuild the plugin against pluggable's grappler.h",
                  p->major_version, p->minor_version, p->patch_version,
                  GO_MAJOR, GO_MINOR, GO_PATCH);
    return 0;
  }
  if (p->struct_size < TF_OFFSET_OF_END(TP_OptimizerRegistrationParams,
                                        device_type) ||
      p->device_type == NULL) {
    pg_set_status(status, TF_FAILED_PRECONDITION,
                  "TP_OptimizerRegistrationParams.device_type is NULL: the "
                  "plugin must name the device type its optimizer is for");
    return 0;
  }
  if (!check_size(o->optimizer->struct_size, "TP_Optimizer",
                  "TP_OPTIMIZER_STRUCT_SIZE", status) ||
      !check_size(o->configs->struct_size, "TP_OptimizerConfigs",
                  "TP_OPTIMIZER_CONFIGS_STRUCT_SIZE", status))
    return 0;
  clear_past(o->optimizer, sizeof(TP_Optimizer));
  clear_past(o->configs, sizeof(TP_OptimizerConfigs));
  if (o->optimizer->optimize_func == NULL) {
    pg_set_status(status, TF_FAILED_PRECONDITION,
                  "TP_Optimizer.optimize_func is NULL: a graph optimizer "
                  "must provide it");
    return 0;
  }
  return 1;
}

pg_optimizer* pg_optimizer_init(void* init_fn, int plugin_id,
                                TF_Status* status) {
  TF_SetStatus(status, TF_OK, "");
  pg_optimizer* o = calloc(1, sizeof(pg_optimizer));
  if (o == NULL) {
    pg_set_status(status, TF_RESOURCE_EXHAUSTED, "out of host memory");
    return NULL;
  }
  o->plugin_id = plugin_id;
  o->params = new_struct(sizeof(TP_OptimizerRegistrationParams),
                         TP_OPTIMIZER_REGISTRATION_PARAMS_STRUCT_SIZE);
  o->configs = new_struct(sizeof(TP_OptimizerConfigs),
                          TP_OPTIMIZER_CONFIGS_STRUCT_SIZE);
  o->optimizer = new_struct(sizeof(TP_Optimizer), TP_OPTIMIZER_STRUCT_SIZE);
  if (o->params == NULL || o->configs == NULL || o->optimizer == NULL) {
    free_optimizer(o);
    pg_set_status(status, TF_RESOURCE_EXHAUSTED, "out of host memory");
    return NULL;
  }
  o->params->major_version = GO_MAJOR;
  o->params->minor_version = GO_MINOR;
  o->params->patch_version = GO_PATCH;
  o->params->optimizer_configs = o->configs;
  o->params->optimizer = o->optimizer;
  ((void (*)(TP_OptimizerRegistrationParams*, TF_Status*))init_fn)(o->params,
                                                                   status);
  if (TF_GetCode(status) != TF_OK) {
    char msg[1024];
    snprintf(msg, sizeof msg, "TF_InitGraph failed: %s", TF_Message(status));
    TF_SetStatus(status, TF_GetCode(status), msg);
    return NULL; /* the plugin's state is unknown: keep what it may point at */
  }
  /* The plugin may have redirected the pointers; validate what they point
   * at now only if they still are ours. */
  if (o->params->optimizer != o->optimizer ||
      o->params->optimizer_configs != o->configs) {
    pg_set_status(status, TF_FAILED_PRECONDITION,
                  "TF_InitGraph replaced TP_OptimizerRegistrationParams."
                  "optimizer or optimizer_configs: fill the structs the "
                  "core provides instead");
    return NULL;
  }
  if (!validate(o, status)) {
    free_optimizer(o);
    return NULL;
  }
  pthread_mutex_init(&o->mu, NULL);
  return o;
}

const char* pg_optimizer_device_type(const pg_optimizer* o) {
  return o->params->device_type;
}

int pg_optimizer_config(const pg_optimizer* o, int index) {
  if (index < 0 || (size_t)index >= (sizeof(TP_OptimizerConfigs) -
                                     offsetof(TP_OptimizerConfigs,
                                              disable_model_pruning)) /
                                        sizeof(TF_TriState))
    return -1;
  const TF_TriState* first = &o->configs->disable_model_pruning;
  return (int)first[index];
}

TF_Buffer* pg_optimizer_run(pg_optimizer* o, const void* graph,
                            size_t graph_len, const TF_GrapplerItem* item,
                            TF_Status* status) {
  TF_SetStatus(status, TF_OK, "");
  TF_Buffer in = {graph, graph_len, NULL};
  TF_Buffer* out = TF_NewBuffer();
  if (out == NULL) {
    pg_set_status(status, TF_RESOURCE_EXHAUSTED, "out of host memory");
    return NULL;
  }
  pthread_mutex_lock(&o->mu);
  if (!o->created) {
    o->state = o->optimizer->create_func != NULL ? o->optimizer->create_func()
                                                 : NULL;
    o->created = 1;
  }
  o->optimizer->optimize_func(o->state, &in, item, out, status);
  pthread_mutex_unlock(&o->mu);
  if (TF_GetCode(status) == TF_OK && out->data == NULL && out->length != 0) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "optimize_func returned a buffer of %zu bytes with no data",
                  out->length);
  }
  if (TF_GetCode(status) != TF_OK) {
    TF_DeleteBuffer(out);
    return NULL;
  }
  return out;
}

void pg_optimizer_destroy(pg_optimizer* o) {
  if (o == NULL) return;
  pthread_mutex_lock(&o->mu);
  if (o->created && o->optimizer->destroy_func != NULL)
    o->optimizer->destroy_func(o->state);
  o->created = 0;
  o->state = NULL;
  pthread_mutex_unlock(&o->mu);
}
