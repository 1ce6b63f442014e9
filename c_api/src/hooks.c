/* The host's hooks: the table through which the core calls up into the
 * program that hosts it (pg_host_hooks in pg_core.h). Until a host installs
 * its own, each entry refuses with FAILED_PRECONDITION. */
#include "internal.h"

#define NO_HOST "pluggable: the core's host has not installed its hooks (pg_set_host_hooks)"

static int no_register_kernel(pg_kernel_def* def, TF_Status* status) {
  (void)def;
  TF_SetStatus(status, TF_FAILED_PRECONDITION, NO_HOST);
  return 0;
}

static int no_register_op(pg_op_builder* b, TF_Status* status) {
  (void)b;
  TF_SetStatus(status, TF_FAILED_PRECONDITION, NO_HOST);
  return 0;
}

static void no_infer_properties(TF_GraphProperties* p, const void* graph, size_t len,
                                TF_Status* status) {
  (void)p, (void)graph, (void)len;
  TF_SetStatus(status, TF_FAILED_PRECONDITION, NO_HOST);
}

static void no_function_library(TF_FunctionLibraryDefinition* lib, const void* graph,
                                size_t len, TF_Status* status) {
  (void)lib, (void)graph, (void)len;
  TF_SetStatus(status, TF_FAILED_PRECONDITION, NO_HOST);
}

static void no_op_def(const char* name, TF_Buffer* out, TF_Status* status) {
  (void)name, (void)out;
  TF_SetStatus(status, TF_FAILED_PRECONDITION, NO_HOST);
}

pg_host_hooks pg_hooks = {no_register_kernel, no_register_op, no_infer_properties,
                          no_function_library, no_op_def};

void pg_set_host_hooks(const pg_host_hooks* h) {
  if (h == NULL) return;
  if (h->register_kernel) pg_hooks.register_kernel = h->register_kernel;
  if (h->register_op) pg_hooks.register_op = h->register_op;
  if (h->infer_properties) pg_hooks.infer_properties = h->infer_properties;
  if (h->function_library) pg_hooks.function_library = h->function_library;
  if (h->op_def) pg_hooks.op_def = h->op_def;
}
