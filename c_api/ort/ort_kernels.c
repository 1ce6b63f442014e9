/* The kernels the loaded plugins register (through the bridge's host hooks,
 * ort_ep.c) and the lookup of one for a node (ort_partition.c). */
#include <string.h>

#include "ort_bridge.h"

#define MAX_KERNELS 4096
static pg_kernel_def* kernels[MAX_KERNELS];
static int num_kernels;

int pg_ort_register_kernel(pg_kernel_def* def, TF_Status* status) {
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

pg_kernel_def* pg_ort_find_kernel_typed(const char* op, const char* device_type, int n,
                                        const char* const* attrs, const TF_DataType* types) {
  for (int i = 0; i < num_kernels; i++) {
    pg_kernel_def* k = kernels[i];
    if (strcmp(k->op_name, op) != 0 || strcmp(k->device_type, device_type) != 0) continue;
    if (k->label[0] != '\0' || k->compute_func == NULL) continue;
    int ok = 1;
    for (int c = 0; c < k->num_constraints; c++)
      for (int a = 0; a < n; a++)
        if (strcmp(k->constraint_attr[c], attrs[a]) == 0 && k->constraint_type[c] != types[a])
          ok = 0;
    if (ok) return k;
  }
  return NULL;
}

pg_kernel_def* pg_ort_find_kernel(const char* op, const char* device_type, TF_DataType t) {
  static const char* const T[] = {"T"};
  return pg_ort_find_kernel_typed(op, device_type, 1, T, &t);
}
