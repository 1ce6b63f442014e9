/* Attribute values of an op call, as kernels and shape functions read them. */
#include "internal.h"

pg_attrs* pg_attrs_new(void) { return calloc(1, sizeof(pg_attrs)); }

static void attr_clear(pg_attr* a) {
  free(a->list);
  free(a->str);
  if (a->strs != NULL)
    for (int i = 0; i < a->n; ++i) free(a->strs[i]);
  free(a->strs);
  free(a->str_lens);
  memset(a, 0, sizeof *a);
}

void pg_attrs_free(pg_attrs* a) {
  if (a == NULL) return;
  for (int i = 0; i < a->n; ++i) attr_clear(&a->items[i]);
  free(a->items);
  free(a);
}

const pg_attr* pg_attrs_find(const pg_attrs* a, const char* name) {
  if (a == NULL || name == NULL) return NULL;
  for (int i = 0; i < a->n; ++i)
    if (strcmp(a->items[i].name, name) == 0) return &a->items[i];
  return NULL;
}

/* Returns a cleared slot for `name` (replacing an existing value). */
static pg_attr* slot(pg_attrs* a, const char* name, pg_attr_kind kind) {
  pg_attr* s = (pg_attr*)pg_attrs_find(a, name);
  if (s != NULL) {
    attr_clear(s);
  } else {
    if (a->n == a->cap) {
      int cap = a->cap ? a->cap * 2 : 8;
      pg_attr* items = realloc(a->items, (size_t)cap * sizeof(pg_attr));
      if (items == NULL) return NULL;
      a->items = items;
      a->cap = cap;
    }
    s = &a->items[a->n++];
    memset(s, 0, sizeof *s);
  }
  pg_copy_str(s->name, sizeof s->name, name);
  s->kind = kind;
  return s;
}

void pg_attrs_set_int(pg_attrs* a, const char* name, int64_t v) {
  pg_attr* s = slot(a, name, PG_ATTR_INT);
  if (s) s->i = v;
}

void pg_attrs_set_float(pg_attrs* a, const char* name, float v) {
  pg_attr* s = slot(a, name, PG_ATTR_FLOAT);
  if (s) s->f = v;
}

void pg_attrs_set_bool(pg_attrs* a, const char* name, int v) {
  pg_attr* s = slot(a, name, PG_ATTR_BOOL);
  if (s) s->i = v != 0;
}

void pg_attrs_set_type(pg_attrs* a, const char* name, TF_DataType v) {
  pg_attr* s = slot(a, name, PG_ATTR_TYPE);
  if (s) s->i = (int64_t)v;
}

void pg_attrs_set_string(pg_attrs* a, const char* name, const char* v,
                         size_t len) {
  pg_attr* s = slot(a, name, PG_ATTR_STRING);
  if (s == NULL) return;
  s->str = malloc(len + 1);
  if (s->str == NULL) return;
  memcpy(s->str, v, len);
  s->str[len] = '\0';
  s->str_len = len;
}

static void set_list(pg_attrs* a, const char* name, pg_attr_kind kind,
                     const void* v, int n, size_t elem) {
  pg_attr* s = slot(a, name, kind);
  if (s == NULL) return;
  s->n = n;
  s->list = malloc(elem * (size_t)(n > 0 ? n : 1));
  if (s->list != NULL && n > 0) memcpy(s->list, v, elem * (size_t)n);
}

void pg_attrs_set_int_list(pg_attrs* a, const char* name, const int64_t* v,
                           int n) {
  set_list(a, name, PG_ATTR_INT_LIST, v, n, sizeof(int64_t));
}

void pg_attrs_set_float_list(pg_attrs* a, const char* name, const float* v,
                             int n) {
  set_list(a, name, PG_ATTR_FLOAT_LIST, v, n, sizeof(float));
}

void pg_attrs_set_bool_list(pg_attrs* a, const char* name, const int* v,
                            int n) {
  set_list(a, name, PG_ATTR_BOOL_LIST, v, n, sizeof(int));
}

void pg_attrs_set_type_list(pg_attrs* a, const char* name,
                            const TF_DataType* v, int n) {
  set_list(a, name, PG_ATTR_TYPE_LIST, v, n, sizeof(TF_DataType));
}

void pg_attrs_set_string_list(pg_attrs* a, const char* name,
                              const char* const* v, const size_t* lens,
                              int n) {
  pg_attr* s = slot(a, name, PG_ATTR_STRING_LIST);
  if (s == NULL) return;
  s->strs = calloc((size_t)(n > 0 ? n : 1), sizeof(char*));
  s->str_lens = calloc((size_t)(n > 0 ? n : 1), sizeof(size_t));
  if (s->strs == NULL || s->str_lens == NULL) return;
  s->n = n;
  for (int i = 0; i < n; ++i) {
    s->strs[i] = malloc(lens[i] + 1);
    if (s->strs[i] == NULL) continue;
    memcpy(s->strs[i], v[i], lens[i]);
    s->strs[i][lens[i]] = '\0';
    s->str_lens[i] = lens[i];
  }
}
