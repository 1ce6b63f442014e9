/* Loading a device plugin: SE_InitPlugin, validation of every table it
 * fills, and device creation.
 *
 * The core never trusts a plugin: each struct's `struct_size` is compared
 * with the known end offset of each field, fields the plugin did not declare
 * are treated as absent, and a missing required callback rejects the plugin
 * with a message naming it. Every struct handed to the plugin is allocated
 * with spare room so that a plugin built against a newer, larger header
 * cannot write past it.
 *
 * TensorFlow's loader (tensorflow/c/experimental/stream_executor) is stricter
 * than the core needs to be: it also requires the callbacks marked `tf`
 * below, SE_PlatformRegistrationParams.destroy_platform and
 * destroy_platform_fns, and a platform name of upper-case letters and
 * underscores only. The core applies the same rules, so a plugin that loads
 * here also loads into TensorFlow, unless PLUGGABLE_LENIENT_PLUGINS=1 asks for
 * the core's own minimum (its defaults then fill the gaps). */
#include <dlfcn.h>

#include "internal.h"

#define SPARE_BYTES 4096

/* The environment variable that relaxes TensorFlow's rules to the core's. */
#define LENIENT_ENV "PLUGGABLE_LENIENT_PLUGINS"

/* Nonzero when PLUGGABLE_LENIENT_PLUGINS=1: TensorFlow-only rules are off. */
static int lenient(void) {
  const char* v = getenv(LENIENT_ENV);
  return v != NULL && strcmp(v, "1") == 0;
}

/* Sets `status` for a field TensorFlow requires and the plugin left NULL. */
static void tf_requires(TF_Status* status, const char* field,
                        const char* tf_field, const char* tf_struct) {
  pg_set_status(status, TF_FAILED_PRECONDITION,
                "%s is NULL: TensorFlow refuses a plugin without it "
                "(\"'%s' field in %s must be set.\"); set it (a function "
                "that does nothing is fine when there is nothing to free), "
                "or set " LENIENT_ENV "=1 to load the plugin here anyway",
                field, tf_field, tf_struct);
}

static const field_rule platform_rules[] = {
    FIELD(SP_Platform, name, 1),
    FIELD(SP_Platform, type, 1),
    FIELD(SP_Platform, supports_unified_memory, 0),
    FIELD(SP_Platform, use_bfc_allocator, 0),
    FIELD(SP_Platform, force_memory_growth, 0),
};

static const field_rule platform_fns_rules[] = {
    FIELD(SP_PlatformFns, get_device_count, 1),
    FIELD(SP_PlatformFns, create_device, 1),
    FIELD(SP_PlatformFns, destroy_device, 1),
    FIELD_TF(SP_PlatformFns, create_device_fns),
    FIELD_TF(SP_PlatformFns, destroy_device_fns),
    FIELD(SP_PlatformFns, create_stream_executor, 1),
    FIELD(SP_PlatformFns, destroy_stream_executor, 1),
    FIELD(SP_PlatformFns, create_timer_fns, 0),
    FIELD(SP_PlatformFns, destroy_timer_fns, 0),
};

static const field_rule device_rules[] = {
    FIELD(SP_Device, ordinal, 0),
    FIELD(SP_Device, device_handle, 0),
    FIELD(SP_Device, hardware_name, 0),
    FIELD(SP_Device, device_vendor, 0),
    FIELD(SP_Device, pci_bus_id, 0),
};

static const field_rule device_fns_rules[] = {
    FIELD(SP_DeviceFns, get_numa_node, 0),
    FIELD(SP_DeviceFns, get_memory_bandwidth, 0),
    FIELD(SP_DeviceFns, get_gflops, 0),
};

static const field_rule timer_fns_rules[] = {
    FIELD(SP_TimerFns, nanoseconds, 1),
};

static const field_rule se_rules[] = {
    FIELD(SP_StreamExecutor, allocate, 1),
    FIELD(SP_StreamExecutor, deallocate, 1),
    FIELD_TF(SP_StreamExecutor, host_memory_allocate),
    FIELD_TF(SP_StreamExecutor, host_memory_deallocate),
    FIELD(SP_StreamExecutor, unified_memory_allocate, 0),
    FIELD(SP_StreamExecutor, unified_memory_deallocate, 0),
    FIELD_TF(SP_StreamExecutor, get_allocator_stats),
    FIELD_TF(SP_StreamExecutor, device_memory_usage),
    FIELD(SP_StreamExecutor, create_stream, 1),
    FIELD(SP_StreamExecutor, destroy_stream, 1),
    FIELD(SP_StreamExecutor, create_stream_dependency, 1),
    FIELD(SP_StreamExecutor, get_stream_status, 1),
    FIELD(SP_StreamExecutor, create_event, 1),
    FIELD(SP_StreamExecutor, destroy_event, 1),
    FIELD(SP_StreamExecutor, get_event_status, 1),
    FIELD(SP_StreamExecutor, record_event, 1),
    FIELD(SP_StreamExecutor, wait_for_event, 1),
    FIELD(SP_StreamExecutor, create_timer, 0),
    FIELD(SP_StreamExecutor, destroy_timer, 0),
    FIELD(SP_StreamExecutor, start_timer, 0),
    FIELD(SP_StreamExecutor, stop_timer, 0),
    FIELD(SP_StreamExecutor, memcpy_dtoh, 1),
    FIELD(SP_StreamExecutor, memcpy_htod, 1),
    FIELD(SP_StreamExecutor, memcpy_dtod, 1),
    FIELD(SP_StreamExecutor, sync_memcpy_dtoh, 1),
    FIELD(SP_StreamExecutor, sync_memcpy_htod, 1),
    FIELD(SP_StreamExecutor, sync_memcpy_dtod, 1),
    FIELD(SP_StreamExecutor, block_host_for_event, 1),
    FIELD(SP_StreamExecutor, block_host_until_done, 0),
    FIELD(SP_StreamExecutor, synchronize_all_activity, 1),
    FIELD_TF(SP_StreamExecutor, mem_zero),
    FIELD_TF(SP_StreamExecutor, memset),
    FIELD_TF(SP_StreamExecutor, memset32),
    FIELD(SP_StreamExecutor, host_callback, 1),
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* Allocates a zeroed struct of `size` bytes (plus spare room) with its
 * struct_size set. */
static void* new_struct(size_t size, size_t struct_size) {
  void* p = calloc(1, size + SPARE_BYTES);
  if (p != NULL) *(size_t*)p = struct_size;
  return p;
}

/* Checks a filled struct against its rules. Fields past the plugin's
 * struct_size are zeroed (treated as absent). Returns 0 with `status` set if
 * struct_size is 0, a field the core requires is missing, or (unless
 * lenient) a field TensorFlow requires is missing; the core's own rules are
 * reported first. */
static int check_struct(void* s, const char* struct_name,
                        const char* size_macro, const field_rule* rules,
                        size_t n, TF_Status* status) {
  size_t struct_size = *(size_t*)s;
  if (struct_size == 0) {
    pg_set_status(status, TF_FAILED_PRECONDITION,
                  "%s.struct_size is 0: the plugin must set it to %s",
                  struct_name, size_macro);
    return 0;
  }
  int tf_rules = !lenient();
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < n; ++i) {
      const field_rule* r = &rules[i];
      int required = pass == 0 ? r->required : (r->tf && tf_rules);
      if (r->end > struct_size) {
        if (pass == 0) memset((char*)s + r->offset, 0, r->end - r->offset);
        if (!required) continue;
        pg_set_status(status, TF_FAILED_PRECONDITION,
                      "%s is required%s, but the plugin's %s.struct_size (%zu) "
                      "ends before it (it needs at least %zu): rebuild the "
                      "plugin against the current headers",
                      r->name, pass == 0 ? "" : " by TensorFlow", struct_name,
                      struct_size, r->end);
        return 0;
      }
      if (!required || *(void**)((char*)s + r->offset) != NULL) continue;
      if (pass == 0) {
        pg_set_status(status, TF_FAILED_PRECONDITION,
                      "%s is NULL: a device plugin must provide it", r->name);
      } else {
        tf_requires(status, r->name, strchr(r->name, '.') + 1, struct_name);
      }
      return 0;
    }
  }
  return 1;
}

int pg_check_struct(void* s, const char* struct_name, const char* size_macro,
                    const field_rule* rules, size_t n, TF_Status* status) {
  return check_struct(s, struct_name, size_macro, rules, n, status);
}

/* Validates a name: first character upper case, the rest upper case,
 * underscores, and digits if `digits`. */
static int valid_name(const char* s, int digits) {
  if (s == NULL || s[0] < 'A' || s[0] > 'Z' || strnlen(s, 64) > 63) return 0;
  for (const char* c = s + 1; *c; ++c) {
    int ok = (*c >= 'A' && *c <= 'Z') || *c == '_' ||
             (digits && *c >= '0' && *c <= '9');
    if (!ok) return 0;
  }
  return 1;
}

int pg_valid_device_type(const char* s) {
  return valid_name(s, 0) && strcmp(s, "CPU") != 0;
}

/* A string for messages: NULL shows as "(NULL)". */
static const char* shown(const char* s) { return s != NULL ? s : "(NULL)"; }

void* pg_dlopen(const char* path, char* err, size_t errlen) {
  dlerror();
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    const char* e = dlerror();
    pg_copy_str(err, errlen, e != NULL ? e : "unknown dlopen error");
  }
  return h;
}

void* pg_dlsym(void* handle, const char* name) {
  dlerror();
  return dlsym(handle, name);
}

/* Checks the pairs of callbacks that must come together. */
static int check_se_pairs(const SP_StreamExecutor* se, const SP_Platform* p,
                          TF_Status* status) {
  if ((se->host_memory_allocate == NULL) != (se->host_memory_deallocate == NULL)) {
    pg_set_status(status, TF_FAILED_PRECONDITION,
                  "SP_StreamExecutor.host_memory_allocate and "
                  "host_memory_deallocate must be set together");
    return 0;
  }
  if (p->supports_unified_memory &&
      (se->unified_memory_allocate == NULL ||
       se->unified_memory_deallocate == NULL)) {
    pg_set_status(status, TF_FAILED_PRECONDITION,
                  "SP_Platform.supports_unified_memory is set, so "
                  "SP_StreamExecutor.unified_memory_allocate and "
                  "unified_memory_deallocate must be provided");
    return 0;
  }
  int timers = (se->create_timer != NULL) + (se->destroy_timer != NULL) +
               (se->start_timer != NULL) + (se->stop_timer != NULL);
  if (timers != 0 && timers != 4) {
    pg_set_status(status, TF_FAILED_PRECONDITION,
                  "SP_StreamExecutor timer callbacks (create_timer, "
                  "destroy_timer, start_timer, stop_timer) must be set all "
                  "together or not at all");
    return 0;
  }
  return 1;
}

/* TensorFlow's checks of SE_PlatformRegistrationParams after SE_InitPlugin:
 * struct_size set, destroy_platform and destroy_platform_fns set. */
static int check_params(const SE_PlatformRegistrationParams* params,
                        TF_Status* status) {
  if (params->struct_size == 0) {
    pg_set_status(status, TF_FAILED_PRECONDITION,
                  "SE_PlatformRegistrationParams.struct_size is 0: the plugin "
                  "must leave it set (SE_PLATFORM_REGISTRATION_PARAMS_STRUCT_SIZE)");
    return 0;
  }
  if (lenient()) return 1;
  if (params->destroy_platform == NULL) {
    tf_requires(status, "SE_PlatformRegistrationParams.destroy_platform",
                "destroy_platform", "SE_PlatformRegistrationParams");
    return 0;
  }
  if (params->destroy_platform_fns == NULL) {
    tf_requires(status, "SE_PlatformRegistrationParams.destroy_platform_fns",
                "destroy_platform_fns", "SE_PlatformRegistrationParams");
    return 0;
  }
  return 1;
}

pg_platform* pg_platform_init(void* se_init_plugin, int plugin_id,
                              TF_Status* status) {
  TF_SetStatus(status, TF_OK, "");
  pg_platform* p = calloc(1, sizeof(pg_platform));
  if (p == NULL) {
    pg_set_status(status, TF_RESOURCE_EXHAUSTED, "out of host memory");
    return NULL;
  }
  p->plugin_id = plugin_id;
  p->platform = new_struct(sizeof(SP_Platform), SP_PLATFORM_STRUCT_SIZE);
  p->fns = new_struct(sizeof(SP_PlatformFns), SP_PLATFORM_FNS_STRUCT_SIZE);
  p->timer_fns = new_struct(sizeof(SP_TimerFns), SP_TIMER_FNS_STRUCT_SIZE);
  SE_PlatformRegistrationParams* params = &p->params;
  params->struct_size = SE_PLATFORM_REGISTRATION_PARAMS_STRUCT_SIZE;
  params->major_version = SE_MAJOR;
  params->minor_version = SE_MINOR;
  params->patch_version = SE_PATCH;
  params->platform = p->platform;
  params->platform_fns = p->fns;

  ((void (*)(SE_PlatformRegistrationParams*, TF_Status*))se_init_plugin)(
      params, status);
  if (TF_GetCode(status) != TF_OK) {
    char msg[1024];
    snprintf(msg, sizeof msg, "SE_InitPlugin failed: %s", TF_Message(status));
    TF_SetStatus(status, TF_GetCode(status), msg);
    return NULL; /* the plugin's state is unknown: keep what it may point at */
  }
  if (params->major_version != SE_MAJOR) {
    pg_set_status(status, TF_FAILED_PRECONDITION,
                  "the plugin was built for StreamExecutor C API %d.%d.%d, "
                  "this core implements %d.%d.%d; major versions must match: "
                  "rebuild the plugin against pluggable's headers",
                  params->major_version, params->minor_version,
                  params->patch_version, SE_MAJOR, SE_MINOR, SE_PATCH);
    return NULL;
  }
  if (!check_params(params, status)) return NULL;
  if (!check_struct(p->platform, "SP_Platform", "SP_PLATFORM_STRUCT_SIZE",
                    platform_rules, COUNT(platform_rules), status) ||
      !check_struct(p->fns, "SP_PlatformFns", "SP_PLATFORM_FNS_STRUCT_SIZE",
                    platform_fns_rules, COUNT(platform_fns_rules), status))
    return NULL;
  if (!valid_name(p->platform->type, 0) ||
      strcmp(p->platform->type, "CPU") == 0) {
    pg_set_status(status, TF_FAILED_PRECONDITION,
                  "SP_Platform.type \"%s\" is not a valid device type: use an "
                  "upper-case letter followed by upper-case letters and "
                  "underscores (e.g. MY_DEVICE), at most 63 characters; CPU "
                  "is reserved for the built-in device",
                  shown(p->platform->type));
    return NULL;
  }
  if (!lenient() && valid_name(p->platform->name, 1) &&
      !valid_name(p->platform->name, 0)) {
    pg_set_status(status, TF_FAILED_PRECONDITION,
                  "SP_Platform.name \"%s\" has a digit: TensorFlow refuses it "
                  "(\"Device name/type '%s' must match [A-Z][A-Z_]*.\"); use "
                  "upper-case letters and underscores only, or set "
                  LENIENT_ENV "=1 to load the plugin here anyway",
                  p->platform->name, p->platform->name);
    return NULL;
  }
  if (!valid_name(p->platform->name, 1)) {
    pg_set_status(status, TF_FAILED_PRECONDITION,
                  "SP_Platform.name \"%s\" is not a valid platform name: use "
                  "an upper-case letter followed by upper-case letters, "
                  "digits and underscores (e.g. MY_PLATFORM), at most 63 "
                  "characters", shown(p->platform->name));
    return NULL;
  }
  if (p->fns->create_timer_fns != NULL) {
    p->fns->create_timer_fns(p->platform, p->timer_fns, status);
    if (TF_GetCode(status) != TF_OK) {
      char msg[1024];
      snprintf(msg, sizeof msg, "SP_PlatformFns.create_timer_fns failed: %s",
               TF_Message(status));
      TF_SetStatus(status, TF_GetCode(status), msg);
      return NULL;
    }
    if (!check_struct(p->timer_fns, "SP_TimerFns", "SP_TIMER_FNS_STRUCT_SIZE",
                      timer_fns_rules, COUNT(timer_fns_rules), status))
      return NULL;
    p->has_timers = 1;
  }
  int count = -1;
  p->fns->get_device_count(p->platform, &count, status);
  if (TF_GetCode(status) != TF_OK) {
    char msg[1024];
    snprintf(msg, sizeof msg, "SP_PlatformFns.get_device_count failed: %s",
             TF_Message(status));
    TF_SetStatus(status, TF_GetCode(status), msg);
    return NULL;
  }
  if (count < 0 || count > 4096) {
    pg_set_status(status, TF_FAILED_PRECONDITION,
                  "SP_PlatformFns.get_device_count reported %d devices; the "
                  "count must be between 0 and 4096", count);
    return NULL;
  }
  p->device_count = count;
  return p;
}

/* Undoes a partly created device; `has_stream` says whether the default
 * stream was created (its handle may be NULL, a legal value). */
static void destroy_partial(pg_device* d, int has_stream) {
  pg_platform* p = d->platform;
  if (has_stream && d->se != NULL && d->se->destroy_stream != NULL)
    d->se->destroy_stream(d->device, d->stream);
  if (d->se != NULL && d->se->struct_size != 0)
    p->fns->destroy_stream_executor(p->platform, d->se);
  if (d->device_fns != NULL && d->device_fns->struct_size != 0 &&
      p->fns->destroy_device_fns != NULL)
    p->fns->destroy_device_fns(p->platform, d->device_fns);
  p->fns->destroy_device(p->platform, d->device);
}

/* Sets `status` to "<what> failed for device N: <message>". */
static void failed(TF_Status* status, const char* what, int ordinal) {
  char msg[1024];
  snprintf(msg, sizeof msg, "%s failed for device %d: %s", what, ordinal,
           TF_Message(status));
  TF_SetStatus(status, TF_GetCode(status), msg);
}

pg_device* pg_device_create(pg_platform* p, int ordinal, TF_Status* status) {
  TF_SetStatus(status, TF_OK, "");
  pg_device* d = calloc(1, sizeof(pg_device));
  if (d == NULL) {
    pg_set_status(status, TF_RESOURCE_EXHAUSTED, "out of host memory");
    return NULL;
  }
  int has_stream = 0;
  d->platform = p;
  d->ordinal = ordinal;
  snprintf(d->name, sizeof d->name, "/device:%s:%d", p->platform->type, ordinal);
  d->device = new_struct(sizeof(SP_Device), SP_DEVICE_STRUCT_SIZE);
  d->device_fns = new_struct(sizeof(SP_DeviceFns), SP_DEVICE_FNS_STRUCT_SIZE);
  d->se = new_struct(sizeof(SP_StreamExecutor), SP_STREAMEXECUTOR_STRUCT_SIZE);

  SE_CreateDeviceParams dp;
  memset(&dp, 0, sizeof dp);
  dp.struct_size = SE_CREATE_DEVICE_PARAMS_STRUCT_SIZE;
  dp.ordinal = ordinal;
  dp.device = d->device;
  d->device->ordinal = ordinal;
  p->fns->create_device(p->platform, &dp, status);
  if (TF_GetCode(status) != TF_OK) {
    failed(status, "SP_PlatformFns.create_device", ordinal);
    return NULL;
  }
  if (!check_struct(d->device, "SP_Device", "SP_DEVICE_STRUCT_SIZE",
                    device_rules, COUNT(device_rules), status))
    goto fail;
  if (d->device->ordinal != ordinal) {
    pg_set_status(status, TF_FAILED_PRECONDITION,
                  "SP_Device.ordinal is %d but device %d was created",
                  d->device->ordinal, ordinal);
    goto fail;
  }

  d->device_fns->struct_size = 0;
  if (p->fns->create_device_fns != NULL) {
    d->device_fns->struct_size = SP_DEVICE_FNS_STRUCT_SIZE;
    SE_CreateDeviceFnsParams fp = {SE_CREATE_DEVICE_FNS_PARAMS_STRUCT_SIZE,
                                   NULL, d->device_fns};
    p->fns->create_device_fns(p->platform, &fp, status);
    if (TF_GetCode(status) != TF_OK) {
      failed(status, "SP_PlatformFns.create_device_fns", ordinal);
      d->device_fns->struct_size = 0;
      goto fail;
    }
    if (!check_struct(d->device_fns, "SP_DeviceFns", "SP_DEVICE_FNS_STRUCT_SIZE",
                      device_fns_rules, COUNT(device_fns_rules), status))
      goto fail;
  }

  SE_CreateStreamExecutorParams sp = {
      SE_CREATE_STREAM_EXECUTOR_PARAMS_STRUCT_SIZE, NULL, d->se};
  p->fns->create_stream_executor(p->platform, &sp, status);
  if (TF_GetCode(status) != TF_OK) {
    failed(status, "SP_PlatformFns.create_stream_executor", ordinal);
    d->se->struct_size = 0;
    goto fail;
  }
  if (!check_struct(d->se, "SP_StreamExecutor", "SP_STREAMEXECUTOR_STRUCT_SIZE",
                    se_rules, COUNT(se_rules), status) ||
      !check_se_pairs(d->se, p->platform, status))
    goto fail;

  d->se->create_stream(d->device, &d->stream, status);
  if (TF_GetCode(status) != TF_OK) {
    failed(status, "SP_StreamExecutor.create_stream", ordinal);
    goto fail;
  }
  /* Any handle is legal, NULL included (TensorFlow's sample plugin leaves it
   * NULL): the core keys nothing on its value. */
  has_stream = 1;
  pg_allocator_init(d);
  pg_events_init(d);
  pg_oplog_init(d);
  if (d->allocator == NULL || d->events == NULL || d->oplog == NULL) {
    pg_set_status(status, TF_RESOURCE_EXHAUSTED, "out of host memory");
    goto fail;
  }
  return d;

fail:
  destroy_partial(d, has_stream);
  return NULL;
}

/*** The plugin's allocator statistics ***/

static const field_rule allocator_stats_rules[] = {
    FIELD(SP_AllocatorStats, num_allocs, 0),
    FIELD(SP_AllocatorStats, bytes_in_use, 0),
    FIELD(SP_AllocatorStats, peak_bytes_in_use, 0),
    FIELD(SP_AllocatorStats, largest_alloc_size, 0),
    FIELD(SP_AllocatorStats, has_bytes_limit, 0),
    FIELD(SP_AllocatorStats, bytes_limit, 0),
    FIELD(SP_AllocatorStats, bytes_reserved, 0),
    FIELD(SP_AllocatorStats, peak_bytes_reserved, 0),
    FIELD(SP_AllocatorStats, has_bytes_reservable_limit, 0),
    FIELD(SP_AllocatorStats, bytes_reservable_limit, 0),
    FIELD(SP_AllocatorStats, largest_free_block_bytes, 0),
};

int pg_device_allocator_stats(pg_device* dev, SP_AllocatorStats* out,
                              uint32_t* missing) {
  memset(out, 0, sizeof *out);
  *missing = 0;
  if (dev->se->get_allocator_stats == NULL) return 0;
  /* The documented size, with room behind it for a plugin built against a
   * newer, larger struct that writes past it. */
  SP_AllocatorStats* s = new_struct(sizeof(SP_AllocatorStats),
                                    SP_ALLOCATORSTATS_STRUCT_SIZE);
  if (s == NULL) return 0;
  int ok = dev->se->get_allocator_stats(dev->device, s) != 0;
  /* Only the fields both sides know, as far as the plugin filled them. */
  size_t filled = s->struct_size;
  if (filled == 0 || filled > SP_ALLOCATORSTATS_STRUCT_SIZE)
    filled = SP_ALLOCATORSTATS_STRUCT_SIZE;
  out->struct_size = SP_ALLOCATORSTATS_STRUCT_SIZE;
  for (size_t i = 0; i < COUNT(allocator_stats_rules); ++i) {
    const field_rule* r = &allocator_stats_rules[i];
    if (r->end > filled) {
      *missing |= 1u << i;
      continue;
    }
    memcpy((char*)out + r->offset, (char*)s + r->offset, r->end - r->offset);
  }
  free(s);
  return ok;
}
