/* TF_Tensor handles over reference-counted buffers (buffer.c), shapes and
 * sizes, and TF_DataTypeSize. */
#include "internal.h"

/* pg_tensor_view must describe the start of TF_Tensor exactly. */
_Static_assert(offsetof(TF_Tensor, dtype) == offsetof(pg_tensor_view, dtype) &&
                   offsetof(TF_Tensor, num_dims) == offsetof(pg_tensor_view, num_dims) &&
                   offsetof(TF_Tensor, dims) == offsetof(pg_tensor_view, dims),
               "pg_tensor_view does not match TF_Tensor");

size_t TF_DataTypeSize(TF_DataType dt) {
  switch (dt) {
    case TF_BOOL: case TF_INT8: case TF_UINT8: case TF_QINT8: case TF_QUINT8:
    case TF_FLOAT8_E5M2: case TF_FLOAT8_E4M3FN: case TF_FLOAT8_E4M3FNUZ:
    case TF_FLOAT8_E5M2FNUZ: case TF_INT4: case TF_UINT4: case TF_INT2:
    case TF_UINT2: case TF_FLOAT4_E2M1FN:
      return 1;
    case TF_INT16: case TF_UINT16: case TF_HALF: case TF_BFLOAT16:
    case TF_QINT16: case TF_QUINT16:
      return 2;
    case TF_FLOAT: case TF_INT32: case TF_UINT32: case TF_QINT32:
      return 4;
    case TF_DOUBLE: case TF_INT64: case TF_UINT64: case TF_COMPLEX64:
      return 8;
    case TF_COMPLEX128:
      return 16;
    default:
      return 0;
  }
}

int64_t pg_shape_nbytes(TF_DataType dtype, const int64_t* dims, int num_dims,
                        TF_Status* status) {
  size_t esize = TF_DataTypeSize(dtype);
  if (esize == 0) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "data type %d has no fixed element size; pluggable tensors "
                  "support bool, int8/16/32/64, uint8/16/32/64, float16, "
                  "bfloat16, float32, float64 and the float8/int4/uint4/"
                  "int2/uint2/float4 types", (int)dtype);
    return -1;
  }
  if (num_dims < 0 || num_dims > TF_MAX_DIMS) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "a tensor has 0 to %d dimensions, got num_dims=%d",
                  TF_MAX_DIMS, num_dims);
    return -1;
  }
  if (num_dims > 0 && dims == NULL) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "dims is NULL but num_dims is %d", num_dims);
    return -1;
  }
  int64_t count = 1;
  for (int i = 0; i < num_dims; ++i) {
    if (dims[i] < 0) {
      pg_set_status(status, TF_INVALID_ARGUMENT,
                    "dimension %d is negative (%lld)", i, (long long)dims[i]);
      return -1;
    }
    if (dims[i] != 0 && count > INT64_MAX / 16 / dims[i]) {
      pg_set_status(status, TF_INVALID_ARGUMENT,
                    "shape is too large (dimension %d overflows)", i);
      return -1;
    }
    count *= dims[i];
  }
  return count * (int64_t)esize;
}

/*** Handle records ***/

/* Each thread keeps up to HANDLE_CACHE freed handle records for its next
 * ones: an op makes and deletes several handles (its inputs, its output),
 * and malloc/free of them was a tenth of a small op's host time. The records
 * go back to malloc when the thread ends. Under AddressSanitizer every
 * handle is a fresh allocation, so that a use after TF_DeleteTensor is
 * caught. */
#define HANDLE_CACHE 64

#if defined(__SANITIZE_ADDRESS__)
#define PG_HANDLE_CACHE 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PG_HANDLE_CACHE 0
#endif
#endif
#ifndef PG_HANDLE_CACHE
#define PG_HANDLE_CACHE 1
#endif

typedef struct handle_cache {
  TF_Tensor* head; /* linked through the records' `buf` field */
  int n;
} handle_cache;

/* The cache is heap memory found through a thread-specific key (not a
 * thread-local variable: the core is loaded with dlopen, and its dynamic
 * TLS is torn down by glibc later than the key's destructor runs). */
static pthread_key_t cache_key;
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;
static int cache_ok;

static void drain_cache(void* p) {
  handle_cache* c = p;
  while (c->head != NULL) {
    TF_Tensor* t = c->head;
    c->head = (TF_Tensor*)t->buf;
    free(t);
  }
  free(c);
}

static void make_cache_key(void) { cache_ok = pthread_key_create(&cache_key, drain_cache) == 0; }

/* This thread's cache; made on first use when `create`; NULL if none. */
static handle_cache* thread_cache(int create) {
  pthread_once(&cache_once, make_cache_key);
  if (!cache_ok) return NULL;
  handle_cache* c = pthread_getspecific(cache_key);
  if (c == NULL && create) {
    c = calloc(1, sizeof *c);
    if (c != NULL && pthread_setspecific(cache_key, c) != 0) {
      free(c);
      c = NULL;
    }
  }
  return c;
}

/* A handle record (contents undefined). */
static TF_Tensor* handle_alloc(void) {
  handle_cache* c = PG_HANDLE_CACHE ? thread_cache(0) : NULL;
  if (c != NULL && c->head != NULL) {
    TF_Tensor* t = c->head;
    c->head = (TF_Tensor*)t->buf;
    c->n--;
    return t;
  }
  return malloc(sizeof(TF_Tensor));
}

static void handle_free(TF_Tensor* t) {
  handle_cache* c = PG_HANDLE_CACHE ? thread_cache(1) : NULL;
  if (c == NULL || c->n >= HANDLE_CACHE) {
    free(t);
    return;
  }
  t->buf = (pg_buffer*)c->head;
  c->head = t;
  c->n++;
}

TF_Tensor* pg_tensor_new(TF_DataType dtype, const int64_t* dims, int num_dims,
                         pg_buffer* buf, TF_Status* status) {
  int64_t nbytes = pg_shape_nbytes(dtype, dims, num_dims, status);
  if (nbytes < 0) return NULL;
  if (buf != NULL && (uint64_t)nbytes > buf->nbytes) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "shape needs %lld bytes but the buffer holds %zu",
                  (long long)nbytes, buf->nbytes);
    return NULL;
  }
  TF_Tensor* t = handle_alloc();
  if (t == NULL) {
    pg_set_status(status, TF_RESOURCE_EXHAUSTED, "out of host memory");
    return NULL;
  }
  memset(t, 0, sizeof(TF_Tensor));
  t->dtype = dtype;
  t->num_dims = num_dims;
  for (int i = 0; i < num_dims; ++i) t->dims[i] = dims[i];
  t->buf = buf;
  pg_buffer_ref(buf);
  return t;
}

TF_Tensor* TF_NewTensor(TF_DataType dtype, const int64_t* dims, int num_dims,
                        void* data, size_t len,
                        void (*deallocator)(void* data, size_t len, void* arg),
                        void* deallocator_arg) {
  int64_t nbytes = pg_shape_nbytes(dtype, dims, num_dims, NULL);
  if (nbytes < 0 || (size_t)nbytes != len || (data == NULL && len != 0)) {
    if (deallocator != NULL) deallocator(data, len, deallocator_arg);
    return NULL;
  }
  pg_buffer* b = pg_buffer_new_external(data, len, deallocator, deallocator_arg);
  if (b == NULL) {
    if (deallocator != NULL) deallocator(data, len, deallocator_arg);
    return NULL;
  }
  TF_Tensor* t = pg_tensor_new(dtype, dims, num_dims, b, NULL);
  pg_buffer_unref(b);
  return t;
}

TF_Tensor* TF_AllocateTensor(TF_DataType dtype, const int64_t* dims,
                             int num_dims, size_t len) {
  int64_t nbytes = pg_shape_nbytes(dtype, dims, num_dims, NULL);
  if (nbytes < 0 || (size_t)nbytes != len) return NULL;
  pg_buffer* b = pg_buffer_new_host(len);
  if (b == NULL) return NULL;
  TF_Tensor* t = pg_tensor_new(dtype, dims, num_dims, b, NULL);
  pg_buffer_unref(b);
  return t;
}

TF_Tensor* TF_TensorMaybeMove(TF_Tensor* t) {
  if (t == NULL || t->buf == NULL) return NULL;
  return atomic_load(&t->buf->refs) == 1 ? t : NULL;
}

void TF_DeleteTensor(TF_Tensor* t) {
  if (t == NULL) return;
  pg_opstate_unref(t->state);
  pg_buffer_unref(t->buf);
  handle_free(t);
}

TF_DataType TF_TensorType(const TF_Tensor* t) {
  return t == NULL ? (TF_DataType)0 : t->dtype;
}

void TF_SetShape(TF_Tensor* t, const int64_t* dims, int num_dims) {
  if (t == NULL) return;
  int64_t nbytes = pg_shape_nbytes(t->dtype, dims, num_dims, NULL);
  size_t cap = t->buf != NULL ? t->buf->nbytes : 0;
  if (nbytes < 0 || (size_t)nbytes > cap) return;
  t->num_dims = num_dims;
  for (int i = 0; i < num_dims; ++i) t->dims[i] = dims[i];
}

int TF_NumDims(const TF_Tensor* t) { return t == NULL ? 0 : t->num_dims; }

int64_t TF_Dim(const TF_Tensor* t, int dim_index) {
  if (t == NULL || dim_index < 0 || dim_index >= t->num_dims) return -1;
  return t->dims[dim_index];
}

int64_t TF_TensorElementCount(const TF_Tensor* t) {
  if (t == NULL) return 0;
  int64_t n = 1;
  for (int i = 0; i < t->num_dims; ++i) n *= t->dims[i];
  return n;
}

size_t TF_TensorByteSize(const TF_Tensor* t) {
  if (t == NULL) return 0;
  return (size_t)TF_TensorElementCount(t) * TF_DataTypeSize(t->dtype);
}

void* TF_TensorData(const TF_Tensor* t) {
  return (t == NULL || t->buf == NULL) ? NULL : t->buf->data;
}

void TF_TensorBitcastFrom(const TF_Tensor* from, TF_DataType type,
                          TF_Tensor* to, const int64_t* new_dims,
                          int num_new_dims, TF_Status* status) {
  if (from == NULL || to == NULL) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "TF_TensorBitcastFrom: `from` and `to` must not be NULL");
    return;
  }
  int64_t nbytes = pg_shape_nbytes(type, new_dims, num_new_dims, status);
  if (nbytes < 0) return;
  if ((size_t)nbytes != TF_TensorByteSize(from)) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "TF_TensorBitcastFrom: the new shape holds %lld bytes but "
                  "the source holds %zu", (long long)nbytes,
                  TF_TensorByteSize(from));
    return;
  }
  pg_buffer* old = to->buf;
  to->buf = from->buf;
  pg_buffer_ref(to->buf);
  pg_buffer_unref(old);
  to->dtype = type;
  to->num_dims = num_new_dims;
  for (int i = 0; i < num_new_dims; ++i) to->dims[i] = new_dims[i];
  TF_SetStatus(status, TF_OK, "");
}

TF_Bool TF_TensorIsAligned(const TF_Tensor* t) {
  void* p = TF_TensorData(t);
  return ((uintptr_t)p % 64) == 0;
}

TF_Tensor* pg_tensor_wrap_host(TF_DataType dtype, const int64_t* dims,
                               int num_dims, void* data, size_t nbytes) {
  pg_buffer* b = pg_buffer_new_external(data, nbytes, NULL, NULL);
  if (b == NULL) return NULL;
  TF_Tensor* t = pg_tensor_new(dtype, dims, num_dims, b, NULL);
  pg_buffer_unref(b);
  return t;
}

pg_device* pg_tensor_device(const TF_Tensor* t) {
  return (t == NULL || t->buf == NULL) ? NULL : t->buf->device;
}

const int64_t* pg_tensor_dims(const TF_Tensor* t) { return t->dims; }

TF_Tensor* pg_tensor_ref(const TF_Tensor* t) {
  if (t == NULL) return NULL;
  /* `t` is valid already (and may be a resource handle, which has no element
   * size), so the new handle is a plain copy of it, sharing its buffer and
   * the outcome of the op that produced it. */
  TF_Tensor* r = handle_alloc();
  if (r == NULL) return NULL;
  *r = *t;
  pg_buffer_ref(r->buf);
  pg_opstate_ref(r->state);
  return r;
}

TF_Tensor* pg_tensor_reshaped(const TF_Tensor* t, const int64_t* dims,
                              int num_dims, TF_Status* status) {
  if (t == NULL) {
    pg_set_status(status, TF_INVALID_ARGUMENT, "Reshape: the tensor is NULL");
    return NULL;
  }
  TF_Tensor* const in[1] = {(TF_Tensor*)t};
  if (!pg_op_inputs_ok(in, 1, status)) return NULL;
  int64_t nbytes = pg_shape_nbytes(t->dtype, dims, num_dims, status);
  if (nbytes < 0) return NULL;
  if ((size_t)nbytes != TF_TensorByteSize(t)) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "Reshape: the new shape holds %lld bytes but the tensor "
                  "holds %zu", (long long)nbytes, TF_TensorByteSize(t));
    return NULL;
  }
  TF_Tensor* r = pg_tensor_ref(t);
  if (r == NULL) {
    pg_set_status(status, TF_RESOURCE_EXHAUSTED,
                  "Reshape: out of host memory for a tensor handle");
    return NULL;
  }
  r->num_dims = num_dims;
  for (int i = 0; i < num_dims; ++i) r->dims[i] = dims[i];
  TF_SetStatus(status, TF_OK, "");
  return r;
}

void pg_tensor_mem(const TF_Tensor* t, SP_DeviceMemoryBase* mem) {
  pg_buffer_mem(t->buf, mem);
}

TF_Tensor* pg_device_alloc_tensor(pg_device* dev, TF_DataType dtype,
                                  const int64_t* dims, int num_dims,
                                  TF_Status* status) {
  int64_t nbytes = pg_shape_nbytes(dtype, dims, num_dims, status);
  if (nbytes < 0) return NULL;
  pg_buffer* b = pg_device_alloc(dev, (size_t)nbytes, status);
  if (b == NULL) return NULL;
  TF_Tensor* t = pg_tensor_new(dtype, dims, num_dims, b, status);
  pg_buffer_unref(b);
  if (t != NULL) TF_SetStatus(status, TF_OK, "");
  return t;
}
