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
 * per session; the devices' memory, the data transfer and the sync streams
 * are ort_memory.c's. The ABI declarations are pg_ort_abi.h (our own). */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ort_bridge.h"

/*** The bridge's host hooks (pg_host_hooks), installed before plugins load ***/

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

static const pg_host_hooks bridge_hooks = {pg_ort_register_kernel, bridge_register_op,
                                           bridge_infer_properties, bridge_function_library,
                                           bridge_op_def};

/*** Loading the plugins ***/

#define MAX_PLATFORMS 8
#define MAX_DEVICES PG_ORT_MAX_DEVICES

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
  PG_GetNativeStreamFnsFn native = (PG_GetNativeStreamFnsFn)pg_dlsym(h, PG_NATIVE_STREAM_SYMBOL);
  if (native != NULL) {
    bp->native.struct_size = PG_NATIVE_STREAM_FNS_STRUCT_SIZE;
    native(&bp->native);
    if (bp->native.version < 1) memset(&bp->native, 0, sizeof bp->native);
  }
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

/* (the negotiated tables themselves, pg_ort and pg_ort_ep: ort_api.c) */

static OrtStatus* make_status(const OrtApi* api, int code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  OrtStatus* s = pg_ort_vstatus(api, code, fmt, ap);
  va_end(ap);
  return s;
}

/*** The EP of one session ***/

static const char* ep_get_name(const OrtEp* self) {
  return ((const bridge_platform*)((const bridge_ep*)self)->bp)->ep_name;
}

/* Live EP instances: 0 again once ONNX Runtime released every session. */
static int64_t live_eps;
PG_EXPORT int64_t pg_ort_live_eps(void) { return __atomic_load_n(&live_eps, __ATOMIC_SEQ_CST); }

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
static OrtStatus* add_pair(OrtKeyValuePairs* kv, const char* k, const char* v) {
  API_FN(pg_ort, PG_ORT_AddKeyValuePair, void (*)(OrtKeyValuePairs*, const char*, const char*))(
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
      if (API_FN(pg_ort, PG_ORT_HardwareDevice_Type, type_fn)(hw[j]) == want) {
        match = hw[j];
        if (want == PG_ORT_HW_GPU) next_hw = j + 1;
        break;
      }
    }
    if (match == NULL) break; /* no such hardware visible to ONNX Runtime */
    OrtKeyValuePairs* meta = NULL;
    API_FN(pg_ort, PG_ORT_CreateKeyValuePairs, void (*)(OrtKeyValuePairs**))(&meta);
    char ordinal[16];
    snprintf(ordinal, sizeof ordinal, "%d", i);
    add_pair(meta, "pluggable.device", bp->devices[i]->name);
    add_pair(meta, "pluggable.device_type", bp->device_type);
    add_pair(meta, "pluggable.ordinal", ordinal);
    add_pair(meta, "pluggable.platform", bp->platform_name);
    add_pair(meta, "pluggable.plugin", bp->path);
    OrtEpDevice* dev = NULL;
    OrtStatus* s = API_FN(pg_ort_ep, PG_ORTEP_CreateEpDevice, create_fn)(self, match, meta, NULL,
                                                                      &dev);
    API_FN(pg_ort, PG_ORT_ReleaseKeyValuePairs, void (*)(OrtKeyValuePairs*))(meta);
    if (s != NULL) return s;
    if (pg_ort_version >= PG_ORT_MEMORY_API_VERSION &&
        (s = pg_ort_add_memory(bp, i, match, dev)) != NULL) {
      API_FN(pg_ort_ep, PG_ORTEP_ReleaseEpDevice, void (*)(OrtEpDevice*))(dev);
      return s;
    }
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
    return pg_ort_status(PG_ORT_FAIL, "pluggable: out of memory creating the EP");
  bridge_platform* bp = (bridge_platform*)self;
  e->bp = bp;
  e->device_type = bp->device_type;
  e->dev = bp->devices[0];
  /* The first chosen device; its OrtEpDevice's metadata names the ordinal. */
  const char* ord = n > 0 && meta != NULL && meta[0] != NULL
                        ? API_FN(pg_ort, PG_ORT_GetKeyValue,
                                 const char* (*)(const OrtKeyValuePairs*, const char*))(
                              meta[0], "pluggable.ordinal")
                        : NULL;
  if (ord != NULL) {
    int o = atoi(ord);
    if (o < 0 || o >= bp->num_devices) {
      OrtStatus* s = pg_ort_status(PG_ORT_INVALID_ARGUMENT,
                                 "pluggable: %s has no device %s (it has %d)", bp->ep_name,
                                 ord, bp->num_devices);
      free(e);
      return s;
    }
    e->dev = bp->devices[o];
  }
  e->ep.ort_version_supported = PG_ORT_API_VERSION;
  e->ep.GetName = ep_get_name;
  e->ep.GetCapability = pg_ort_get_capability;
  e->ep.Compile = pg_ort_compile;
  e->ep.ReleaseNodeComputeInfos = pg_ort_release_infos;
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
  pg_ort = api;
  pg_ort_ep = epapi;
  pg_ort_version = PG_ORT_MIN_API_VERSION; /* the table negotiate asked for */
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
    if (pg_ort_version >= PG_ORT_MEMORY_API_VERSION) {
      f->CreateAllocator = pg_ort_create_allocator;
      f->ReleaseAllocator = pg_ort_release_allocator;
      f->CreateDataTransfer = pg_ort_create_data_transfer;
      f->IsStreamAware = pg_ort_is_stream_aware;
      f->CreateSyncStreamForDevice = pg_ort_create_sync_stream;
    }
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
