/* Graph plans: the steps of a placed graph, run in one call.
 *
 * The Python graph executor builds a plan once per concrete function and
 * input placement: kernel steps (a kernel instance, the slots of its inputs
 * and outputs, the planned buffer of each output) and copy steps between
 * devices (ordered by events), each with the slots to release after it.
 * Replaying the plan is then a loop over preallocated handle arrays, with no
 * Python in between.
 *
 * Slots hold TF_Tensor handles. A slot is borrowed (the caller keeps the
 * handle alive for the run: the graph's inputs), owned (the plan deletes the
 * handle when the slot is released: intermediate values) or persistent
 * (owned and kept across runs: constants).
 *
 * Planned buffers are device buffers the plan holds from its first run to
 * its end. The executor assigns one to each intermediate output whose size
 * it knows, reusing a buffer once the tensors in it are dead; a kernel's
 * TF_AllocateOutput then writes into the planned buffer instead of asking the
 * allocator, provided nothing else still references it (the plan's reference
 * is the only one) and it is large enough. Otherwise the output is allocated
 * normally, so a wrong plan costs memory, never correctness.
 *
 * A run launches consecutive kernel steps on one device as a *span*: under
 * one hold of the device's launch lock, with one completion event, recorded
 * after the span's last step (opstate.c: the ops before it share it). An
 * event per op costs a call into the plugin per op (a cudaEventRecord on the
 * GPU), much of a small kernel's launch. */
#include "internal.h"

enum { STEP_KERNEL, STEP_COPY };

typedef struct plan_step {
  int kind;
  pg_kernel* kernel;        /* STEP_KERNEL; one reference, held until free_step */
  pg_device* dev;           /* STEP_KERNEL: the kernel's device */
  int num_inputs, num_outputs;
  int* inputs;              /* slot of each input */
  int* outputs;             /* slot of each output */
  int* buffers;             /* planned buffer of each output, -1: none */
  TF_Tensor** in_handles;   /* scratch arrays reused by every run */
  TF_Tensor** out_handles;
  pg_buffer** preset;
  int num_release;
  int* release;             /* slots released after the step */
  /* STEP_COPY */
  pg_device* src_dev;       /* NULL: the source is host memory */
  pg_device* dst_dev;
  SP_Event src_ready;       /* recorded on the source stream, waited on by the
                               destination stream */
  SP_Event copy_done;       /* recorded after the copy, waited on by the
                               source stream before it reuses the source */
  /* Whether each event was created: its handle may be NULL, so a flag says,
   * never the handle's value. */
  int has_src_ready, has_copy_done;
} plan_step;

typedef struct plan_buffer {
  pg_device* dev;
  size_t nbytes;
  pg_buffer* buf;           /* allocated on the first run */
} plan_buffer;

struct pg_plan {
  int num_slots;
  TF_Tensor** slots;
  unsigned char* modes;
  int num_steps, cap_steps;
  plan_step* steps;
  int num_buffers, cap_buffers;
  plan_buffer* buffers;
  int num_in, num_out;
  int* in_slots;
  int* out_slots;
  pg_plan_stats stats;
};

static void* grow(void* items, int* cap, int need, size_t size) {
  if (need <= *cap) return items;
  int n = *cap ? *cap * 2 : 16;
  while (n < need) n *= 2;
  void* p = realloc(items, (size_t)n * size);
  if (p != NULL) *cap = n;
  return p;
}

static int* copy_ints(const int* v, int n) {
  int* out = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
  if (out != NULL && n > 0) memcpy(out, v, sizeof(int) * (size_t)n);
  return out;
}

pg_plan* pg_plan_new(int num_slots, TF_Status* status) {
  TF_SetStatus(status, TF_OK, "");
  pg_plan* p = calloc(1, sizeof(pg_plan));
  if (p != NULL) {
    p->num_slots = num_slots;
    p->slots = calloc((size_t)(num_slots > 0 ? num_slots : 1), sizeof(TF_Tensor*));
    p->modes = calloc((size_t)(num_slots > 0 ? num_slots : 1), 1);
  }
  if (p == NULL || p->slots == NULL || p->modes == NULL) {
    pg_plan_free(p);
    pg_set_status(status, TF_RESOURCE_EXHAUSTED, "out of host memory making a plan");
    return NULL;
  }
  return p;
}

static void forget_slot(pg_plan* p, int s) {
  TF_Tensor* t = p->slots[s];
  p->slots[s] = NULL;
  if (t != NULL && p->modes[s] != PG_SLOT_BORROWED) TF_DeleteTensor(t);
  p->modes[s] = PG_SLOT_BORROWED;
}

static void free_step(plan_step* s) {
  pg_kernel_release(s->kernel); /* NULL for copies and unfinished steps */
  s->kernel = NULL;
  free(s->inputs);
  free(s->outputs);
  free(s->buffers);
  free(s->in_handles);
  free(s->out_handles);
  free(s->preset);
  free(s->release);
  if (s->has_src_ready) s->src_dev->se->destroy_event(s->src_dev->device, s->src_ready);
  if (s->has_copy_done) s->dst_dev->se->destroy_event(s->dst_dev->device, s->copy_done);
  s->has_src_ready = s->has_copy_done = 0;
}

void pg_plan_free(pg_plan* p) {
  if (p == NULL) return;
  for (int s = 0; s < p->num_slots && p->slots != NULL; ++s) forget_slot(p, s);
  for (int i = 0; i < p->num_steps; ++i) free_step(&p->steps[i]);
  for (int i = 0; i < p->num_buffers; ++i) pg_buffer_unref(p->buffers[i].buf);
  free(p->steps);
  free(p->buffers);
  free(p->slots);
  free(p->modes);
  free(p->in_slots);
  free(p->out_slots);
  free(p);
}

static int check_slots(const pg_plan* p, const int* slots, int n, TF_Status* status) {
  for (int i = 0; i < n; ++i) {
    if (slots[i] < 0 || slots[i] >= p->num_slots) {
      pg_set_status(status, TF_INVALID_ARGUMENT, "plan: slot %d is out of range (0..%d)",
                    slots[i], p->num_slots - 1);
      return 0;
    }
  }
  return 1;
}

int pg_plan_add_buffer(pg_plan* p, pg_device* dev, size_t nbytes, TF_Status* status) {
  TF_SetStatus(status, TF_OK, "");
  plan_buffer* b = grow(p->buffers, &p->cap_buffers, p->num_buffers + 1, sizeof *b);
  if (b == NULL) {
    pg_set_status(status, TF_RESOURCE_EXHAUSTED, "out of host memory making a plan");
    return -1;
  }
  p->buffers = b;
  b[p->num_buffers] = (plan_buffer){dev, nbytes, NULL};
  p->stats.planned_bytes += (int64_t)nbytes;
  p->stats.num_buffers += 1;
  return p->num_buffers++;
}

/* A new zeroed step at the end of the plan, or NULL with `status` set. */
static plan_step* new_step(pg_plan* p, int num_release, const int* release,
                           TF_Status* status) {
  plan_step* steps = grow(p->steps, &p->cap_steps, p->num_steps + 1, sizeof *steps);
  if (steps == NULL) {
    pg_set_status(status, TF_RESOURCE_EXHAUSTED, "out of host memory making a plan");
    return NULL;
  }
  p->steps = steps;
  if (!check_slots(p, release, num_release, status)) return NULL;
  plan_step* s = &steps[p->num_steps];
  memset(s, 0, sizeof *s);
  s->num_release = num_release;
  s->release = copy_ints(release, num_release);
  if (s->release == NULL) {
    pg_set_status(status, TF_RESOURCE_EXHAUSTED, "out of host memory making a plan");
    return NULL;
  }
  return s;
}

int pg_plan_add_kernel(pg_plan* p, pg_kernel* k, int num_inputs, const int* inputs,
                       int num_outputs, const int* outputs, const int* buffers,
                       int num_release, const int* release, TF_Status* status) {
  TF_SetStatus(status, TF_OK, "");
  if (k == NULL || !check_slots(p, inputs, num_inputs, status) ||
      !check_slots(p, outputs, num_outputs, status)) {
    if (k == NULL) pg_set_status(status, TF_INVALID_ARGUMENT, "plan: kernel is NULL");
    return -1;
  }
  for (int i = 0; i < num_outputs; ++i) {
    if (buffers != NULL && buffers[i] >= p->num_buffers) {
      pg_set_status(status, TF_INVALID_ARGUMENT, "plan: buffer %d does not exist", buffers[i]);
      return -1;
    }
  }
  plan_step* s = new_step(p, num_release, release, status);
  if (s == NULL) return -1;
  s->kind = STEP_KERNEL;
  pg_kernel_retain(k);
  s->kernel = k;
  s->dev = pg_kernel_device(k);
  s->num_inputs = num_inputs;
  s->num_outputs = num_outputs;
  s->inputs = copy_ints(inputs, num_inputs);
  s->outputs = copy_ints(outputs, num_outputs);
  s->buffers = malloc(sizeof(int) * (size_t)(num_outputs > 0 ? num_outputs : 1));
  s->in_handles = calloc((size_t)(num_inputs > 0 ? num_inputs : 1), sizeof(TF_Tensor*));
  s->out_handles = calloc((size_t)(num_outputs > 0 ? num_outputs : 1), sizeof(TF_Tensor*));
  s->preset = calloc((size_t)(num_outputs > 0 ? num_outputs : 1), sizeof(pg_buffer*));
  if (s->inputs == NULL || s->outputs == NULL || s->buffers == NULL ||
      s->in_handles == NULL || s->out_handles == NULL || s->preset == NULL) {
    free_step(s);
    pg_set_status(status, TF_RESOURCE_EXHAUSTED, "out of host memory making a plan");
    return -1;
  }
  for (int i = 0; i < num_outputs; ++i) s->buffers[i] = buffers != NULL ? buffers[i] : -1;
  return p->num_steps++;
}

int pg_plan_add_copy(pg_plan* p, pg_device* src_dev, pg_device* dst_dev, int src, int dst,
                     int num_release, const int* release, TF_Status* status) {
  TF_SetStatus(status, TF_OK, "");
  if (dst_dev == NULL || !check_slots(p, &src, 1, status) || !check_slots(p, &dst, 1, status)) {
    if (dst_dev == NULL) pg_set_status(status, TF_INVALID_ARGUMENT, "plan: copy to no device");
    return -1;
  }
  plan_step* s = new_step(p, num_release, release, status);
  if (s == NULL) return -1;
  s->kind = STEP_COPY;
  s->num_inputs = s->num_outputs = 1;
  s->inputs = copy_ints(&src, 1);
  s->outputs = copy_ints(&dst, 1);
  s->src_dev = src_dev;
  s->dst_dev = dst_dev;
  if (s->inputs == NULL || s->outputs == NULL) {
    free_step(s);
    pg_set_status(status, TF_RESOURCE_EXHAUSTED, "out of host memory making a plan");
    return -1;
  }
  /* Copies within one plugin are ordered by two events instead of waiting
   * for the streams (see run_copy). */
  if (src_dev != NULL && src_dev != dst_dev && src_dev->platform == dst_dev->platform) {
    src_dev->se->create_event(src_dev->device, &s->src_ready, status);
    s->has_src_ready = TF_GetCode(status) == TF_OK;
    if (s->has_src_ready) {
      dst_dev->se->create_event(dst_dev->device, &s->copy_done, status);
      s->has_copy_done = TF_GetCode(status) == TF_OK;
    }
    if (TF_GetCode(status) != TF_OK) {
      free_step(s);
      return -1;
    }
  }
  return p->num_steps++;
}

int pg_plan_set_io(pg_plan* p, int num_in, const int* in_slots, int num_out,
                   const int* out_slots, TF_Status* status) {
  TF_SetStatus(status, TF_OK, "");
  if (!check_slots(p, in_slots, num_in, status) || !check_slots(p, out_slots, num_out, status))
    return 0;
  free(p->in_slots);
  free(p->out_slots);
  p->in_slots = copy_ints(in_slots, num_in);
  p->out_slots = copy_ints(out_slots, num_out);
  p->num_in = num_in;
  p->num_out = num_out;
  if (p->in_slots == NULL || p->out_slots == NULL) {
    pg_set_status(status, TF_RESOURCE_EXHAUSTED, "out of host memory making a plan");
    return 0;
  }
  return 1;
}

void pg_plan_set(pg_plan* p, int slot, TF_Tensor* t, int mode) {
  if (slot < 0 || slot >= p->num_slots) return;
  forget_slot(p, slot);
  p->slots[slot] = t;
  p->modes[slot] = (unsigned char)mode;
}

TF_Tensor* pg_plan_get(const pg_plan* p, int slot) {
  return (slot < 0 || slot >= p->num_slots) ? NULL : p->slots[slot];
}

TF_Tensor* pg_plan_take(pg_plan* p, int slot) {
  if (slot < 0 || slot >= p->num_slots) return NULL;
  return pg_tensor_ref(p->slots[slot]);
}

void pg_plan_release(pg_plan* p, int slot) {
  if (slot >= 0 && slot < p->num_slots && p->modes[slot] != PG_SLOT_PERSISTENT)
    forget_slot(p, slot);
}

void pg_plan_reset(pg_plan* p) {
  for (int s = 0; s < p->num_slots; ++s)
    if (p->modes[s] != PG_SLOT_PERSISTENT) forget_slot(p, s);
}

void pg_plan_get_stats(const pg_plan* p, pg_plan_stats* stats) { *stats = p->stats; }

/* Allocates the planned buffers that do not exist yet. */
static int ensure_buffers(pg_plan* p, TF_Status* status) {
  for (int i = 0; i < p->num_buffers; ++i) {
    plan_buffer* b = &p->buffers[i];
    if (b->buf != NULL) continue;
    b->buf = pg_device_alloc(b->dev, b->nbytes, status);
    if (b->buf == NULL) return 0;
  }
  return 1;
}

static void put_output(pg_plan* p, int slot, TF_Tensor* t) {
  forget_slot(p, slot);
  p->slots[slot] = t;
  p->modes[slot] = PG_SLOT_OWNED;
}

/* Runs kernel step `s` (number `index`) of a span; `shares_event`: not the
 * span's last step. `*logged` as pg_kernel_run_in_span gives it. */
static TF_Code run_kernel(pg_plan* p, plan_step* s, int index, int shares_event,
                          int64_t* logged, TF_Status* status) {
  for (int i = 0; i < s->num_inputs; ++i) {
    s->in_handles[i] = p->slots[s->inputs[i]];
    if (s->in_handles[i] == NULL) {
      pg_set_status(status, TF_INTERNAL, "plan step %d: input %d (slot %d) has no value",
                    index, i, s->inputs[i]);
      return TF_INTERNAL;
    }
  }
  for (int i = 0; i < s->num_outputs; ++i)
    s->preset[i] = s->buffers[i] >= 0 ? p->buffers[s->buffers[i]].buf : NULL;
  TF_Code code = pg_kernel_run_in_span(s->kernel, s->in_handles, s->out_handles,
                                       s->preset, shares_event, logged, status);
  if (code != TF_OK) return code;
  for (int i = 0; i < s->num_outputs; ++i) {
    TF_Tensor* t = s->out_handles[i];
    if (s->preset[i] != NULL) {
      if (t->buf == s->preset[i]) p->stats.planned_hits += 1;
      else p->stats.planned_misses += 1;
    }
    put_output(p, s->outputs[i], t);
    s->out_handles[i] = NULL;
  }
  return TF_OK;
}

/* Copies within one plugin: the destination stream waits for the source
 * stream to produce the value, copies, and the source stream then waits for
 * the copy, so that memory the source frees afterwards is reused only after
 * the copy has read it. Other copies go through the host (synchronously). */
static TF_Code run_copy(pg_plan* p, plan_step* s, TF_Status* status) {
  TF_Tensor* src = p->slots[s->inputs[0]];
  if (src == NULL) {
    pg_set_status(status, TF_INTERNAL, "plan: copy source (slot %d) has no value", s->inputs[0]);
    return TF_INTERNAL;
  }
  pg_device* from = pg_tensor_device(src);
  pg_device* to = s->dst_dev;
  TF_Tensor* t = NULL;
  if (from == to) {
    t = pg_tensor_ref(src);
  } else if (from == s->src_dev && s->has_copy_done) {
    from->se->record_event(from->device, from->stream, s->src_ready, status);
    if (TF_GetCode(status) == TF_OK)
      to->se->wait_for_event(to->device, to->stream, s->src_ready, status);
    if (TF_GetCode(status) == TF_OK)
      t = pg_device_alloc_tensor(to, src->dtype, src->dims, src->num_dims, status);
    size_t nbytes = TF_TensorByteSize(src);
    if (t != NULL && nbytes != 0) {
      SP_DeviceMemoryBase dst_mem, src_mem;
      pg_buffer_mem(t->buf, &dst_mem);
      pg_buffer_mem(src->buf, &src_mem);
      to->se->memcpy_dtod(to->device, to->stream, &dst_mem, &src_mem, nbytes, status);
    }
    if (TF_GetCode(status) == TF_OK)
      to->se->record_event(to->device, to->stream, s->copy_done, status);
    if (TF_GetCode(status) == TF_OK)
      from->se->wait_for_event(from->device, from->stream, s->copy_done, status);
  } else {
    t = pg_tensor_copy_to_device(src, to, status);
  }
  if (TF_GetCode(status) != TF_OK) {
    TF_DeleteTensor(t);
    return TF_GetCode(status);
  }
  put_output(p, s->outputs[0], t);
  return TF_OK;
}

TF_Code pg_plan_run(pg_plan* p, int first, int last, int* failed_step, TF_Status* status) {
  TF_SetStatus(status, TF_OK, "");
  if (failed_step != NULL) *failed_step = -1;
  if (first < 0 || last > p->num_steps || first > last) {
    pg_set_status(status, TF_INVALID_ARGUMENT, "plan: steps [%d, %d) are out of range (0..%d)",
                  first, last, p->num_steps);
    return TF_INVALID_ARGUMENT;
  }
  if (!ensure_buffers(p, status)) return TF_GetCode(status);
  for (int i = first; i < last;) {
    plan_step* s = &p->steps[i];
    if (s->kind == STEP_COPY) {
      if (run_copy(p, s, status) != TF_OK) {
        if (failed_step != NULL) *failed_step = i;
        return TF_GetCode(status);
      }
      for (int r = 0; r < s->num_release; ++r) pg_plan_release(p, s->release[r]);
      ++i;
      continue;
    }
    /* A span: the kernel steps from i on that run on the same device. */
    pg_device* dev = s->dev;
    int end = i + 1;
    while (end < last && p->steps[end].kind == STEP_KERNEL && p->steps[end].dev == dev)
      ++end;
    int64_t first_logged = -1, logged = -1;
    pg_op_launch_lock(dev);
    for (int j = i; j < end; ++j) {
      plan_step* t = &p->steps[j];
      int64_t got = -1;
      if (run_kernel(p, t, j, j + 1 < end, &got, status) != TF_OK) {
        if (j > i) pg_op_close_span(dev);
        pg_op_launch_unlock(dev);
        pg_op_maintain_span(dev, first_logged, logged);
        if (failed_step != NULL) *failed_step = j;
        return TF_GetCode(status);
      }
      logged = got;
      if (first_logged < 0) first_logged = got;
      for (int r = 0; r < t->num_release; ++r) pg_plan_release(p, t->release[r]);
    }
    pg_op_launch_unlock(dev);
    pg_op_maintain_span(dev, first_logged, logged);
    p->stats.spans += 1;
    i = end;
  }
  p->stats.steps += last - first;
  return TF_OK;
}

TF_Code pg_plan_call(pg_plan* p, TF_Tensor* const* inputs, TF_Tensor** outputs,
                     int* failed_step, TF_Status* status) {
  for (int i = 0; i < p->num_in; ++i) pg_plan_set(p, p->in_slots[i], inputs[i], PG_SLOT_BORROWED);
  TF_Code code = pg_plan_run(p, 0, p->num_steps, failed_step, status);
  for (int i = 0; i < p->num_out; ++i)
    outputs[i] = code == TF_OK ? pg_tensor_ref(p->slots[p->out_slots[i]]) : NULL;
  pg_plan_reset(p);
  if (code == TF_OK) p->stats.runs += 1;
  return code;
}

int pg_plan_num_steps(const pg_plan* p) { return p->num_steps; }
