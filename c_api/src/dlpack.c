/* DLPack export and import (the Python array API's __dlpack__ protocol).
 *
 * Export: a managed tensor (legacy or versioned, dlpack.h) describing a
 * tensor's memory without copying it. Its manager context holds one
 * reference to the tensor's buffer (a device tensor) or to the Python object
 * that owns host memory (a CPU tensor's numpy array), so the memory stays
 * valid until the consumer calls the deleter, whatever happens to the
 * producer's tensor meanwhile.
 *
 * Import: pg_dlpack_describe checks a producer's managed tensor (device,
 * dtype, shape, strides) and pg_dlpack_wrap makes a TF_Tensor of a plugin
 * device over its memory; the tensor's buffer calls the producer's deleter
 * exactly once, when the last handle goes.
 *
 * Capsules: Python creates and consumes the PyCapsules; the core provides
 * the capsule destructor, which must be a C function. This file is loaded
 * into the interpreter, so it calls the few CPython functions it needs
 * directly (declared below: the core is compiled without Python's headers). */
#include "dlpack.h"

#include "internal.h"

/* CPython's stable ABI, resolved in the running interpreter. */
extern int PyCapsule_IsValid(void* capsule, const char* name);
extern void* PyCapsule_GetPointer(void* capsule, const char* name);
extern int PyCapsule_SetName(void* capsule, const char* name);
extern int PyGILState_Ensure(void);
extern void PyGILState_Release(int state);
extern void Py_IncRef(void* obj);
extern void Py_DecRef(void* obj);

static const char kName[] = "dltensor";
static const char kNameVersioned[] = "dltensor_versioned";
static const char kUsed[] = "used_dltensor";
static const char kUsedVersioned[] = "used_dltensor_versioned";

const char* pg_dlpack_capsule_name(int versioned, int used) {
  if (used) return versioned ? kUsedVersioned : kUsed;
  return versioned ? kNameVersioned : kName;
}

/* ------------------------------------------------------------- data types */

static int to_dl_dtype(TF_DataType t, PG_DLDataType* out) {
  out->lanes = 1;
  switch (t) {
    case TF_BOOL: out->code = PG_DL_BOOL; out->bits = 8; return 1;
    case TF_INT8: out->code = PG_DL_INT; out->bits = 8; return 1;
    case TF_INT16: out->code = PG_DL_INT; out->bits = 16; return 1;
    case TF_INT32: out->code = PG_DL_INT; out->bits = 32; return 1;
    case TF_INT64: out->code = PG_DL_INT; out->bits = 64; return 1;
    case TF_UINT8: out->code = PG_DL_UINT; out->bits = 8; return 1;
    case TF_UINT32: out->code = PG_DL_UINT; out->bits = 32; return 1;
    case TF_UINT64: out->code = PG_DL_UINT; out->bits = 64; return 1;
    case TF_HALF: out->code = PG_DL_FLOAT; out->bits = 16; return 1;
    case TF_FLOAT: out->code = PG_DL_FLOAT; out->bits = 32; return 1;
    case TF_DOUBLE: out->code = PG_DL_FLOAT; out->bits = 64; return 1;
    case TF_BFLOAT16: out->code = PG_DL_BFLOAT; out->bits = 16; return 1;
    /* DLPack counts the bits of the whole complex number (both parts). */
    case TF_COMPLEX64: out->code = PG_DL_COMPLEX; out->bits = 64; return 1;
    case TF_COMPLEX128: out->code = PG_DL_COMPLEX; out->bits = 128; return 1;
    default: return 0;
  }
}

static TF_DataType from_dl_dtype(PG_DLDataType d) {
  if (d.lanes != 1) return (TF_DataType)0;
  switch (d.code) {
    case PG_DL_BOOL: return d.bits == 8 ? TF_BOOL : (TF_DataType)0;
    case PG_DL_INT:
      return d.bits == 8 ? TF_INT8 : d.bits == 16 ? TF_INT16
           : d.bits == 32 ? TF_INT32 : d.bits == 64 ? TF_INT64 : (TF_DataType)0;
    case PG_DL_UINT:
      return d.bits == 8 ? TF_UINT8
           : d.bits == 32 ? TF_UINT32 : d.bits == 64 ? TF_UINT64 : (TF_DataType)0;
    case PG_DL_FLOAT:
      return d.bits == 16 ? TF_HALF : d.bits == 32 ? TF_FLOAT
           : d.bits == 64 ? TF_DOUBLE : (TF_DataType)0;
    case PG_DL_BFLOAT: return d.bits == 16 ? TF_BFLOAT16 : (TF_DataType)0;
    case PG_DL_COMPLEX:
      return d.bits == 64 ? TF_COMPLEX64 : d.bits == 128 ? TF_COMPLEX128 : (TF_DataType)0;
    default: return (TF_DataType)0;
  }
}

/* ----------------------------------------------------------------- export */

/* What an exported managed tensor keeps alive. One allocation holds the
 * managed struct (either layout), the shape and the strides. */
typedef struct export_ctx {
  union {
    PG_DLManagedTensor legacy;
    PG_DLManagedTensorVersioned versioned;
  } m;
  TF_Tensor* ref;    /* a handle sharing the exported tensor's buffer, or NULL */
  void* py_owner;    /* a strong reference to the owner of host memory, or NULL */
  int64_t shape[TF_MAX_DIMS];
  int64_t strides[TF_MAX_DIMS];
} export_ctx;

static void release_ctx(export_ctx* c) {
  if (c->ref != NULL) TF_DeleteTensor(c->ref);
  if (c->py_owner != NULL) {
    /* The consumer may call the deleter from any thread. */
    int g = PyGILState_Ensure();
    Py_DecRef(c->py_owner);
    PyGILState_Release(g);
  }
  free(c);
}

static void delete_legacy(PG_DLManagedTensor* m) { release_ctx(m->manager_ctx); }
static void delete_versioned(PG_DLManagedTensorVersioned* m) {
  release_ctx(m->manager_ctx);
}

void* pg_dlpack_export(const TF_Tensor* t, void* host_data, void* py_owner,
                       TF_DataType dtype, const int64_t* dims, int num_dims,
                       int versioned, int32_t device_type, int32_t device_id,
                       int read_only, TF_Status* status) {
  PG_DLDataType dl;
  if (!to_dl_dtype(dtype, &dl)) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "DLPack has no type for data type %d", (int)dtype);
    return NULL;
  }
  if (num_dims < 0 || num_dims > TF_MAX_DIMS) {
    pg_set_status(status, TF_INVALID_ARGUMENT, "bad rank %d", num_dims);
    return NULL;
  }
  export_ctx* c = calloc(1, sizeof(export_ctx));
  if (c == NULL) {
    pg_set_status(status, TF_RESOURCE_EXHAUSTED, "out of host memory");
    return NULL;
  }
  void* data = host_data;
  if (t != NULL) {
    SP_DeviceMemoryBase mem;
    pg_tensor_mem(t, &mem);
    data = mem.opaque;
    c->ref = pg_tensor_ref(t);
    if (c->ref == NULL) {
      free(c);
      pg_set_status(status, TF_RESOURCE_EXHAUSTED, "out of host memory");
      return NULL;
    }
  } else if (py_owner != NULL) {
    /* cffi releases the GIL around calls into the core: take it back */
    int g = PyGILState_Ensure();
    Py_IncRef(py_owner);
    PyGILState_Release(g);
    c->py_owner = py_owner;
  }
  int64_t stride = 1;
  for (int i = num_dims - 1; i >= 0; --i) {
    c->shape[i] = dims[i];
    c->strides[i] = stride;
    stride *= dims[i] > 0 ? dims[i] : 1;
  }
  PG_DLTensor* dt;
  if (versioned) {
    c->m.versioned.version.major = PG_DLPACK_MAJOR_VERSION;
    c->m.versioned.version.minor = PG_DLPACK_MINOR_VERSION;
    c->m.versioned.manager_ctx = c;
    c->m.versioned.deleter = delete_versioned;
    c->m.versioned.flags = read_only ? PG_DLPACK_FLAG_READ_ONLY : 0;
    dt = &c->m.versioned.dl_tensor;
  } else {
    c->m.legacy.manager_ctx = c;
    c->m.legacy.deleter = delete_legacy;
    dt = &c->m.legacy.dl_tensor;
  }
  dt->data = data;
  dt->device.device_type = device_type;
  dt->device.device_id = device_id;
  dt->ndim = num_dims;
  dt->dtype = dl;
  dt->shape = c->shape;
  dt->strides = c->strides;
  dt->byte_offset = 0;
  TF_SetStatus(status, TF_OK, "");
  return &c->m;
}

/* Calls the managed tensor's deleter (if any). */
void pg_dlpack_delete(void* managed, int versioned) {
  if (managed == NULL) return;
  if (versioned) {
    PG_DLManagedTensorVersioned* m = managed;
    if (m->deleter != NULL) m->deleter(m);
  } else {
    PG_DLManagedTensor* m = managed;
    if (m->deleter != NULL) m->deleter(m);
  }
}

/* The destructor of the capsules the core's tensors export: a capsule that
 * no consumer renamed ("used_...") still owns its managed tensor. It never
 * raises (a capsule of either name is valid by construction). */
void pg_dlpack_capsule_destructor(void* capsule) {
  if (PyCapsule_IsValid(capsule, kNameVersioned))
    pg_dlpack_delete(PyCapsule_GetPointer(capsule, kNameVersioned), 1);
  else if (PyCapsule_IsValid(capsule, kName))
    pg_dlpack_delete(PyCapsule_GetPointer(capsule, kName), 0);
}

/* ----------------------------------------------------------------- import */

static PG_DLTensor* dl_tensor_of(void* managed, int versioned) {
  return versioned ? &((PG_DLManagedTensorVersioned*)managed)->dl_tensor
                   : &((PG_DLManagedTensor*)managed)->dl_tensor;
}

void pg_dlpack_describe(void* managed, int versioned, pg_dlpack_info* info,
                        TF_Status* status) {
  memset(info, 0, sizeof *info);
  if (managed == NULL) {
    pg_set_status(status, TF_INVALID_ARGUMENT, "the DLPack capsule holds NULL");
    return;
  }
  if (versioned) {
    PG_DLManagedTensorVersioned* m = managed;
    if (m->version.major != PG_DLPACK_MAJOR_VERSION) {
      pg_set_status(status, TF_INVALID_ARGUMENT,
                    "DLPack version %u.%u is not supported (major version %d)",
                    m->version.major, m->version.minor, PG_DLPACK_MAJOR_VERSION);
      return;
    }
    info->read_only = (m->flags & PG_DLPACK_FLAG_READ_ONLY) != 0;
  }
  PG_DLTensor* dt = dl_tensor_of(managed, versioned);
  info->device_type = dt->device.device_type;
  info->device_id = dt->device.device_id;
  info->dtype = from_dl_dtype(dt->dtype);
  if (info->dtype == 0) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "DLPack data type (code %d, %d bits, %d lanes) has no "
                  "pluggable dtype; supported: bool, int8/16/32/64, uint8/32/64, "
                  "float16/32/64 and bfloat16",
                  dt->dtype.code, dt->dtype.bits, dt->dtype.lanes);
    return;
  }
  if (dt->ndim < 0 || dt->ndim > TF_MAX_DIMS) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "DLPack tensor has %d dimensions; at most %d are supported",
                  dt->ndim, TF_MAX_DIMS);
    return;
  }
  info->num_dims = dt->ndim;
  int64_t expect = 1, count = 1;
  info->compact = 1;
  for (int i = dt->ndim - 1; i >= 0; --i) {
    int64_t d = dt->shape[i];
    if (d < 0) {
      pg_set_status(status, TF_INVALID_ARGUMENT,
                    "DLPack tensor has a negative dimension (%lld)", (long long)d);
      return;
    }
    info->dims[i] = d;
    info->strides[i] = dt->strides != NULL ? dt->strides[i] : expect;
    /* A dimension of size 1 (or an empty tensor) may have any stride. */
    if (d > 1 && info->strides[i] != expect) info->compact = 0;
    expect *= d > 0 ? d : 1;
    count *= d;
  }
  if (count == 0) info->compact = 1;
  info->nbytes = count * (int64_t)TF_DataTypeSize(info->dtype);
  info->data = (char*)dt->data + dt->byte_offset;
  TF_SetStatus(status, TF_OK, "");
}

typedef struct import_owner {
  void* managed;
  int versioned;
  pg_device* dev;
} import_owner;

/* The producer's memory may still be used by work queued on the device's
 * stream: wait for it before handing the memory back, leaving an
 * asynchronous error of that work to the next synchronisation. */
static void release_import(pg_buffer* b) {
  import_owner* o = b->owner;
  if (o->dev != NULL) pg_device_drain_quietly(o->dev);
  pg_dlpack_delete(o->managed, o->versioned);
  free(o);
}

TF_Tensor* pg_dlpack_wrap(void* managed, int versioned, pg_device* dev,
                          TF_Status* status) {
  pg_dlpack_info info;
  pg_dlpack_describe(managed, versioned, &info, status);
  if (TF_GetCode(status) != TF_OK) return NULL;
  if (!info.compact) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "the DLPack tensor is not compact row-major; device tensors "
                  "are (make it contiguous before the exchange)");
    return NULL;
  }
  import_owner* o = calloc(1, sizeof *o);
  pg_buffer* b = o != NULL ? pg_buffer_new(info.data, (size_t)info.nbytes,
                                           release_import, o) : NULL;
  if (b == NULL) {
    free(o);
    pg_set_status(status, TF_RESOURCE_EXHAUSTED, "out of host memory");
    return NULL;
  }
  o->managed = managed;
  o->versioned = versioned;
  o->dev = dev;
  if (dev != NULL) {
    b->device = dev;
    b->mem.struct_size = SP_DEVICE_MEMORY_BASE_STRUCT_SIZE;
    b->mem.opaque = info.data;
    b->mem.size = (uint64_t)info.nbytes;
  }
  TF_Tensor* t = pg_tensor_new(info.dtype, info.dims, info.num_dims, b, status);
  if (t == NULL) {
    /* The caller still owns the managed tensor: do not call its deleter. */
    o->managed = NULL;
    o->dev = NULL;
  }
  pg_buffer_unref(b);
  if (t != NULL) TF_SetStatus(status, TF_OK, "");
  return t;
}

TF_Tensor* pg_dlpack_import(void* capsule, pg_device* dev, int32_t device_type,
                            int32_t device_id, pg_dlpack_info* info,
                            TF_Status* status) {
  TF_SetStatus(status, TF_OK, "");
  if (capsule == NULL || dev == NULL) return NULL;
  int gil = PyGILState_Ensure();
  TF_Tensor* t = NULL;
  int versioned = PyCapsule_IsValid(capsule, kNameVersioned) ? 1
                  : PyCapsule_IsValid(capsule, kName)       ? 0
                                                            : -1;
  if (versioned >= 0) {
    void* managed = PyCapsule_GetPointer(capsule, versioned ? kNameVersioned : kName);
    TF_Status* st = TF_NewStatus();
    pg_dlpack_describe(managed, versioned, info, st);
    if (TF_GetCode(st) == TF_OK && info->compact && info->device_type == device_type &&
        info->device_id == device_id) {
      t = pg_dlpack_wrap(managed, versioned, dev, status);
      /* The tensor owns the managed tensor now; renaming a capsule checked
       * valid above cannot fail. */
      if (t != NULL) (void)PyCapsule_SetName(capsule, versioned ? kUsedVersioned : kUsed);
    }
    TF_DeleteStatus(st);
  }
  PyGILState_Release(gil);
  return t;
}
