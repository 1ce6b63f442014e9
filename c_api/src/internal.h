/* Definitions shared by the core runtime's C files (not part of any API). */
#ifndef PLUGGABLE_INTERNAL_H_
#define PLUGGABLE_INTERNAL_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg_core.h"

/* Sets `status` (if non-NULL) to `code` with a printf-style message. */
void pg_set_status(TF_Status* status, TF_Code code, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The plugin whose TF_InitKernel is running (-1 outside), for attribution. */
int pg_current_plugin(void);

/* Copies `src` into the fixed buffer `dst[cap]`, always NUL-terminated. */
void pg_copy_str(char* dst, size_t cap, const char* src);

struct TF_Status {
  TF_Code code;
  char* msg;
  struct pg_payload* payloads;
};

/* Where a buffer's memory came from, which decides how it is released. */
typedef enum pg_mem_kind {
  PG_MEM_HOST,      /* pg_host_alloc; freed with pg_host_free */
  PG_MEM_EXTERNAL,  /* caller's memory; released through its deallocator */
  PG_MEM_DEVICE,    /* a block of a device's caching allocator */
} pg_mem_kind;

/* Reference-counted storage shared by every TF_Tensor handle that views it. */
typedef struct pg_buffer {
  atomic_int refs;
  pg_mem_kind kind;
  void* data;      /* host pointer, or SP_DeviceMemoryBase.opaque */
  size_t nbytes;
  pg_device* device;        /* NULL for host memory */
  struct pg_block* block;   /* PG_MEM_DEVICE only */
  void (*deallocator)(void*, size_t, void*);
  void* deallocator_arg;
} pg_buffer;

struct TF_Tensor {
  TF_DataType dtype;
  int num_dims;
  int64_t dims[TF_MAX_DIMS];
  pg_buffer* buf;
};

/* Buffers. */
pg_buffer* pg_buffer_new_host(size_t nbytes);
pg_buffer* pg_buffer_new_external(void* data, size_t nbytes,
                                  void (*dealloc)(void*, size_t, void*),
                                  void* arg);
void pg_buffer_unref(pg_buffer* b);

/* Builds a tensor handle over `buf` (takes one reference). Returns NULL and
 * sets `status` if the shape is invalid or does not match the buffer. */
TF_Tensor* pg_tensor_new(TF_DataType dtype, const int64_t* dims, int num_dims,
                         pg_buffer* buf, TF_Status* status);
/* Checks dims and computes the byte size; -1 with `status` set if invalid. */
int64_t pg_shape_nbytes(TF_DataType dtype, const int64_t* dims, int num_dims,
                        TF_Status* status);

/* Device memory through the caching allocator. */
pg_buffer* pg_device_alloc(pg_device* dev, size_t nbytes, TF_Status* status);
void pg_device_free_block(pg_device* dev, struct pg_block* block);
void pg_allocator_init(pg_device* dev);
/* Fills an SP_DeviceMemoryBase describing `buf`. */
void pg_buffer_mem(const pg_buffer* buf, SP_DeviceMemoryBase* mem);

/* Attribute lookup for kernels and shape functions. */
typedef enum pg_attr_kind {
  PG_ATTR_INT, PG_ATTR_FLOAT, PG_ATTR_BOOL, PG_ATTR_TYPE, PG_ATTR_STRING,
  PG_ATTR_INT_LIST, PG_ATTR_FLOAT_LIST, PG_ATTR_BOOL_LIST, PG_ATTR_TYPE_LIST,
  PG_ATTR_STRING_LIST,
} pg_attr_kind;

typedef struct pg_attr {
  char name[64];
  pg_attr_kind kind;
  int64_t i;           /* INT, BOOL, TYPE */
  float f;             /* FLOAT */
  int n;               /* list length */
  void* list;          /* int64_t / float / int / TF_DataType array */
  char* str;           /* STRING */
  size_t str_len;
  char** strs;         /* STRING_LIST */
  size_t* str_lens;
} pg_attr;

struct pg_attrs {
  int n, cap;
  pg_attr* items;
};

const pg_attr* pg_attrs_find(const pg_attrs* a, const char* name);

/* Shape handles used by shape inference. */
struct TF_ShapeHandle {
  int rank; /* -1 unknown */
  int64_t dims[TF_MAX_DIMS];
};
struct TF_DimensionHandle {
  int64_t value; /* -1 unknown */
};

#endif /* PLUGGABLE_INTERNAL_H_ */
