/* Synchronisation and copies between the host and devices. */
#include "internal.h"
#include "pluggable_host_copy.h"

/* Copies up to this size are staged through a core-owned host buffer so the
 * caller's memory can be released at once and the copy stays asynchronous. */
#define STAGING_LIMIT ((size_t)1 << 20)

/* Refuses to read a value that work being captured produces: that work is
 * recorded, not run, so the value exists only when the graph is replayed. */
static int captured_value(const TF_Tensor* t, TF_Status* status) {
  if (t == NULL || t->buf == NULL || !pg_pool_owns_active(t->buf)) return 0;
  pg_set_status(status, TF_FAILED_PRECONDITION,
                "this value is produced by device work that is being captured "
                "into a device graph: it exists only once the graph is "
                "replayed, so it cannot be read or copied during the capture");
  return 1;
}

int pg_tensor_captured(const TF_Tensor* t) {
  return t != NULL && t->buf != NULL && pg_pool_owns_active(t->buf);
}

/* Prefixes a failed status with what was being done. */
static void annotate(TF_Status* status, const char* what, const pg_device* dev) {
  if (TF_GetCode(status) == TF_OK) return;
  char msg[1024];
  snprintf(msg, sizeof msg, "%s on %s: %s", what, dev->name, TF_Message(status));
  TF_SetStatus(status, TF_GetCode(status), msg);
}

int pg_platform_init_host_copy(pg_platform* p, void* getter) {
  if (p == NULL || getter == NULL) return 0;
  PG_HostCopyFns fns;
  memset(&fns, 0, sizeof fns);
  fns.struct_size = sizeof fns;
  ((PG_GetHostCopyFnsFn)getter)(&fns);
  if (fns.version < 1 || fns.memcpy_htod_consumed == NULL) return 0;
  p->htod_consumed = fns.memcpy_htod_consumed;
  return 1;
}

TF_Tensor* pg_tensor_from_host(pg_device* dev, TF_DataType dtype,
                               const int64_t* dims, int num_dims,
                               const void* src, size_t nbytes,
                               TF_Status* status) {
  TF_Tensor* t = pg_device_alloc_tensor(dev, dtype, dims, num_dims, status);
  if (t == NULL) return NULL;
  if (TF_TensorByteSize(t) != nbytes) {
    TF_DeleteTensor(t);
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "host data holds %zu bytes, the shape needs %zu", nbytes,
                  TF_TensorByteSize(t));
    return NULL;
  }
  if (nbytes == 0) return t;
  SP_DeviceMemoryBase mem;
  pg_buffer_mem(t->buf, &mem);
  if (dev->platform->htod_consumed != NULL) {
    /* The plugin has read `src` when this returns (pluggable_host_copy.h):
     * no staging copy, no wait. */
    dev->platform->htod_consumed(dev->device, dev->stream, &mem, src, nbytes,
                                 status);
  } else if (nbytes <= STAGING_LIMIT) {
    void* staging = malloc(nbytes);
    if (staging == NULL) {
      TF_DeleteTensor(t);
      pg_set_status(status, TF_RESOURCE_EXHAUSTED, "out of host memory");
      return NULL;
    }
    memcpy(staging, src, nbytes);
    dev->se->memcpy_htod(dev->device, dev->stream, &mem, staging, nbytes,
                         status);
    if (TF_GetCode(status) != TF_OK) {
      /* The copy was not enqueued, so nothing reads the staging buffer. */
      free(staging);
      annotate(status, "copy to device", dev);
      TF_DeleteTensor(t);
      return NULL;
    }
    if (!pg_host_callback_once(dev, dev->stream, free, staging)) {
      pg_device_sync(dev, status);
      free(staging);
    }
  } else {
    /* The caller's buffer is used directly: wait until the copy is done. */
    dev->se->memcpy_htod(dev->device, dev->stream, &mem, src, nbytes, status);
    if (TF_GetCode(status) == TF_OK) pg_device_sync(dev, status);
  }
  if (TF_GetCode(status) != TF_OK) {
    annotate(status, "copy to device", dev);
    TF_DeleteTensor(t);
    return NULL;
  }
  return t;
}

void pg_tensor_to_host(const TF_Tensor* t, void* dst, size_t nbytes,
                       TF_Status* status) {
  TF_SetStatus(status, TF_OK, "");
  if (t == NULL || (dst == NULL && nbytes != 0)) {
    pg_set_status(status, TF_INVALID_ARGUMENT, "copy to host: NULL argument");
    return;
  }
  if (nbytes != TF_TensorByteSize(t)) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "copy to host: destination holds %zu bytes, tensor %zu",
                  nbytes, TF_TensorByteSize(t));
    return;
  }
  if (captured_value(t, status)) return;
  pg_device* dev = t->buf != NULL ? t->buf->device : NULL;
  if (dev == NULL) {
    if (nbytes != 0) memcpy(dst, t->buf->data, nbytes);
    return;
  }
  if (nbytes != 0) {
    SP_DeviceMemoryBase mem;
    pg_buffer_mem(t->buf, &mem);
    dev->se->memcpy_dtoh(dev->device, dev->stream, dst, &mem, nbytes, status);
  }
  if (TF_GetCode(status) == TF_OK) pg_device_sync(dev, status);
  annotate(status, "copy to host", dev);
  /* The value's own failure comes first: it says what went wrong. */
  if (t->state != NULL) {
    TF_Status* st = TF_NewStatus();
    pg_opstate_check(dev, t->state, st);
    if (TF_GetCode(st) != TF_OK) TF_SetStatus(status, TF_GetCode(st), TF_Message(st));
    TF_DeleteStatus(st);
  }
}

void pg_tensor_check(const TF_Tensor* t, TF_Status* status) {
  TF_SetStatus(status, TF_OK, "");
  pg_device* dev = pg_tensor_device(t);
  if (dev != NULL && t->state != NULL) pg_opstate_check(dev, t->state, status);
}

TF_Tensor* pg_tensor_given_up(const TF_Tensor* t, const char* msg) {
  if (t == NULL || msg == NULL) return NULL;
  pg_opstate* s = pg_opstate_new_failed(TF_FAILED_PRECONDITION, msg, PG_GIVEN_UP_OP);
  TF_Tensor* r = s != NULL ? pg_tensor_ref(t) : NULL;
  if (r == NULL) {
    pg_opstate_unref(s);
    return NULL;
  }
  pg_opstate_unref(r->state);
  r->state = s;
  return r;
}

const char* pg_tensor_failed_op(const TF_Tensor* t) {
  return t != NULL ? pg_opstate_failed_op(t->state) : NULL;
}

TF_Tensor* pg_tensor_copy_to_device(const TF_Tensor* src, pg_device* dev,
                                    TF_Status* status) {
  TF_SetStatus(status, TF_OK, "");
  pg_device* from = pg_tensor_device(src);
  size_t nbytes = TF_TensorByteSize(src);
  if (from == dev) return pg_tensor_ref(src);
  if (captured_value(src, status)) return NULL;
  if (from == NULL)
    return pg_tensor_from_host(dev, src->dtype, src->dims, src->num_dims,
                               src->buf->data, nbytes, status);
  if (from->platform == dev->platform) {
    /* Same plugin: a device-to-device copy, ordered after the producer. */
    pg_device_sync(from, status);
    if (TF_GetCode(status) == TF_OK) pg_tensor_check(src, status);
    if (TF_GetCode(status) != TF_OK) return NULL;
    TF_Tensor* t =
        pg_device_alloc_tensor(dev, src->dtype, src->dims, src->num_dims, status);
    if (t == NULL) return NULL;
    if (nbytes != 0) {
      SP_DeviceMemoryBase dst_mem, src_mem;
      pg_buffer_mem(t->buf, &dst_mem);
      pg_buffer_mem(src->buf, &src_mem);
      dev->se->memcpy_dtod(dev->device, dev->stream, &dst_mem, &src_mem, nbytes,
                           status);
      /* The source may be freed once this returns: wait for the copy. */
      if (TF_GetCode(status) == TF_OK) pg_device_sync(dev, status);
    }
    if (TF_GetCode(status) != TF_OK) {
      annotate(status, "device-to-device copy", dev);
      TF_DeleteTensor(t);
      return NULL;
    }
    return t;
  }
  /* Different plugins: through a host buffer. */
  void* host = pg_host_alloc(nbytes);
  if (host == NULL) {
    pg_set_status(status, TF_RESOURCE_EXHAUSTED, "out of host memory");
    return NULL;
  }
  pg_tensor_to_host(src, host, nbytes, status);
  TF_Tensor* t = NULL;
  if (TF_GetCode(status) == TF_OK)
    t = pg_tensor_from_host(dev, src->dtype, src->dims, src->num_dims, host,
                            nbytes, status);
  /* from_host copies large buffers synchronously and stages small ones. */
  pg_host_free(host);
  return t;
}

void pg_tensor_copy_into(TF_Tensor* dst, const TF_Tensor* src,
                         TF_Status* status) {
  TF_SetStatus(status, TF_OK, "");
  pg_device* dev = pg_tensor_device(dst);
  pg_device* from = pg_tensor_device(src);
  size_t nbytes = TF_TensorByteSize(dst);
  if (dev == NULL || (from != NULL && from != dev) ||
      TF_TensorByteSize(src) != nbytes) {
    pg_set_status(status, TF_INVALID_ARGUMENT,
                  "copy into a device tensor: the destination must be a "
                  "device tensor and the source a host tensor or a tensor of "
                  "the same device, of the same byte size (%zu and %zu bytes)",
                  nbytes, TF_TensorByteSize(src));
    return;
  }
  if (nbytes == 0) return;
  SP_DeviceMemoryBase dst_mem, src_mem;
  pg_buffer_mem(dst->buf, &dst_mem);
  if (from == NULL) {
    dev->se->memcpy_htod(dev->device, dev->stream, &dst_mem, src->buf->data,
                         nbytes, status);
  } else {
    pg_buffer_mem(src->buf, &src_mem);
    dev->se->memcpy_dtod(dev->device, dev->stream, &dst_mem, &src_mem, nbytes,
                         status);
  }
  annotate(status, "copy into a device tensor", dev);
}
