/* Asynchronous errors belong to values.
 *
 * A plugin reports an error of asynchronous work per stream: the stream
 * keeps its first error until block_host_until_done reports and clears it.
 * The core turns that into an outcome per op result:
 *
 *  - Every op launched on a device gets a state (pg_opstate), shared by the
 *    TF_Tensor handles of its outputs and dropped with the last of them.
 *    Its parents are the states of its inputs that were not settled yet, so
 *    a failure reaches everything computed from it and nothing else.
 *  - Right after the op's work, under the device's launch lock (so no other
 *    op's work comes between), the core records an event on the default
 *    stream. A plugin that follows the contract of stream_executor.h marks
 *    the event SE_EVENT_ERROR when work enqueued since the previous event
 *    on that stream failed: the event's *verdict* then names the failed op.
 *  - A graph plan runs consecutive kernels on one device as a *span* under
 *    one hold of the launch lock (plan.c): only the span's last op records
 *    an event, and the ops before it are *covered*: their verdict is that
 *    event's. An ERROR verdict then fails every op of the span (a graph run
 *    fails as a whole, as in TensorFlow), each saying that the failure may
 *    be another op's of the span.
 *  - States are kept in launch order in the device's log until they are
 *    *settled* (OK or FAILED), always a prefix of the log at a time, so
 *    parents settle before their children:
 *      * at a synchronisation (pg_device_sync): the error the stream
 *        reports goes to the ops whose verdict is ERROR; if no verdict says
 *        ERROR, to every op that ran before the synchronisation when the
 *        device's events cannot tell (none ever said ERROR), and to no op
 *        when they can (the error is a late copy of one an op already
 *        failed with: see attribute). Without an error, every op that ran
 *        before it is OK unless its verdict says otherwise.
 *      * in passing, without waiting (reap): when the verdicts of a prefix
 *        are all COMPLETE and the stream reports no error, the prefix is OK.
 *        While the device never reported an error, a completed event and a
 *        stream without error are enough (see reap).
 *    A state whose parent failed fails with the parent's error, naming the
 *    op where the failure started.
 *  - A thread's pg_device_synchronize reports the first failure of an op
 *    that thread launched (once); reading a failed value reports it too.
 *
 * Locks: launch_mu (launch + event, one op at a time), sync_mu (one
 * synchronisation or reap at a time: the stream's error is only cleared
 * under it), mu (the log and the states). Order: launch_mu, then mu;
 * sync_mu, then mu. The plugin's stream functions are called with mu held
 * only when they do not wait (get_event_status, get_stream_status). */
#include <stdarg.h>

#include "internal.h"

enum { ST_PENDING = 0, ST_OK = 1, ST_FAILED = 2 };
enum { V_UNKNOWN = 0, V_COMPLETE = 1, V_ERROR = 2 };

#define REAP_AFTER 64           /* reap once this many states are unsettled */
/* Back-pressure: a launch that finds this many ops unsettled (queued, or
 * done but not settled yet) waits for the device to drain before it returns.
 * The device queue is then never much deeper than this, so a thread that
 * launches without ever reading holds another thread's read of the same
 * device at most this many ops (a GPU's own launch queue is about as deep). */
#define SYNC_AFTER 1024
#define MAX_NOTES 64            /* unreported failures kept per device */

struct pg_opstate {
  atomic_int refs;
  _Atomic int state;        /* ST_* */
  int verdict;              /* V_*, under mu */
  int covered;              /* the verdict is the next event's (a span) */
  uint64_t span;            /* with a span's verdict: the serial of the span's
                               last op (its failures' origin), else 0 */
  pg_event* event;          /* under mu; NULL: none, or its verdict was read */
  pg_opstate* next;         /* the log, under mu */
  uint64_t serial;          /* identifies the op in notes */
  uint64_t thread;          /* pg_thread_key of the launching thread */
  const char* op;           /* kernel definitions live as long as the process */
  /* FAILED: the error (`msg` for the user, `detail` as the plugin reported
   * it), the op where the failure started and its serial. */
  TF_Code code;
  char* msg;
  char* detail;
  const char* origin_op;
  uint64_t origin;
  int num_parents;
  pg_opstate* parents[];
};

/* A failure not yet reported to the thread that launched the op. */
typedef struct pg_note {
  uint64_t thread, origin;
  TF_Code code;
  char* msg;
} pg_note;

typedef struct pg_oplog {
  pthread_mutex_t mu, sync_mu, launch_mu;
  pg_opstate* head;
  pg_opstate* tail;
  int64_t len;
  uint64_t serials;
  TF_Code last_code; /* the last error a synchronisation reported */
  char* last_msg;
  TF_Code orphan_code; /* an error of a reap-time sync that no op took */
  int verdicts_tell;   /* an event of the device has said ERROR */
  char* orphan_msg;
  pg_note notes[MAX_NOTES];
  int num_notes;
} pg_oplog;

void pg_oplog_init(pg_device* dev) {
  pg_oplog* L = calloc(1, sizeof *L);
  if (L == NULL) return;
  pthread_mutex_init(&L->mu, NULL);
  pthread_mutex_init(&L->sync_mu, NULL);
  pthread_mutex_init(&L->launch_mu, NULL);
  dev->oplog = L;
}

static char* dup_str(const char* s) {
  size_t n = strlen(s);
  char* d = malloc(n + 1);
  if (d != NULL) memcpy(d, s, n + 1);
  return d;
}

/* A malloc'ed printf. */
static char* format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static char* format(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char* s = n >= 0 ? malloc((size_t)n + 1) : NULL;
  if (s == NULL) return NULL;
  va_start(ap, fmt);
  vsnprintf(s, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return s;
}

/*** States ***/

void pg_opstate_ref(pg_opstate* s) {
  if (s != NULL) atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
}

static void drop_parents(pg_opstate* s) {
  for (int i = 0; i < s->num_parents; ++i) pg_opstate_unref(s->parents[i]);
  s->num_parents = 0;
}

void pg_opstate_unref(pg_opstate* s) {
  /* Iterative over parents, so a long chain cannot overflow the stack. */
  while (s != NULL &&
         atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) == 1) {
    pg_opstate* parent = NULL;
    for (int i = 0; i < s->num_parents; ++i) {
      if (i == s->num_parents - 1) parent = s->parents[i];
      else pg_opstate_unref(s->parents[i]);
    }
    free(s->msg);
    free(s->detail);
    free(s);
    s = parent;
  }
}

const char PG_GIVEN_UP_OP[] = "(given up)";

pg_opstate* pg_opstate_new_failed(TF_Code code, const char* msg, const char* op) {
  pg_opstate* s = calloc(1, sizeof *s);
  if (s == NULL) return NULL;
  atomic_init(&s->refs, 1);
  atomic_init(&s->state, ST_FAILED);
  s->verdict = V_COMPLETE;
  s->op = s->origin_op = op;
  s->code = code;
  s->msg = dup_str(msg);
  if (s->msg == NULL) {
    free(s);
    return NULL;
  }
  return s;
}

const char* pg_opstate_failed_op(const pg_opstate* s) {
  if (s == NULL || atomic_load(&s->state) != ST_FAILED) return NULL;
  return s->origin_op;
}

int pg_op_inputs_ok(TF_Tensor* const* inputs, int n, TF_Status* status) {
  for (int i = 0; i < n; ++i) {
    pg_opstate* s = inputs[i] != NULL ? inputs[i]->state : NULL;
    if (s != NULL && atomic_load_explicit(&s->state, memory_order_acquire) == ST_FAILED) {
      if (s->origin_op == PG_GIVEN_UP_OP) /* pg_tensor_given_up: not asynchronous */
        pg_set_status(status, s->code, "input %d: %s", i, s->msg);
      else
        pg_set_status(status, s->code, "input %d carries an asynchronous "
                      "failure: %s", i, s->msg != NULL ? s->msg : "(no message)");
      return 0;
    }
  }
  return 1;
}

void pg_op_launch_lock(pg_device* dev) {
  pthread_mutex_lock(&((pg_oplog*)dev->oplog)->launch_mu);
}

void pg_op_launch_unlock(pg_device* dev) {
  pthread_mutex_unlock(&((pg_oplog*)dev->oplog)->launch_mu);
}

/*** Settling (all called with mu held) ***/

/* Records an unreported failure for the launching thread. */
static void add_note(pg_oplog* L, const pg_opstate* s) {
  for (int i = 0; i < L->num_notes; ++i) /* one note per failure (a span's ops share it) */
    if (L->notes[i].thread == s->thread && L->notes[i].origin == s->origin) return;
  if (L->num_notes == MAX_NOTES) { /* drop the oldest */
    free(L->notes[0].msg);
    memmove(&L->notes[0], &L->notes[1], (MAX_NOTES - 1) * sizeof(pg_note));
    L->num_notes--;
  }
  pg_note* n = &L->notes[L->num_notes];
  n->msg = dup_str(s->msg);
  if (n->msg == NULL) return;
  n->thread = s->thread;
  n->origin = s->origin;
  n->code = s->code;
  L->num_notes++;
}

/* Marks `s` failed by its own op with the plugin's error `msg`. */
static void fail_own(pg_oplog* L, pg_device* dev, pg_opstate* s, TF_Code code,
                     const char* msg) {
  if (atomic_load(&s->state) != ST_PENDING) return;
  s->code = code != TF_OK ? code : TF_UNKNOWN;
  s->detail = dup_str(msg);
  s->msg = s->span != 0
               ? format("%s on %s failed asynchronously, or another op of its graph "
                        "run on that device did (they share one completion event): %s",
                        s->op, dev->name, msg)
               : format("%s on %s failed asynchronously: %s", s->op, dev->name, msg);
  s->origin_op = s->op;
  s->origin = s->span != 0 ? s->span : s->serial;
  atomic_store_explicit(&s->state, ST_FAILED, memory_order_release);
  if (s->msg != NULL) add_note(L, s);
}

/* Settles `s` (its verdict and any own failure are known): a failed parent
 * makes it fail too, else it is OK. Drops its parents. */
static void settle(pg_device* dev, pg_opstate* s) {
  if (atomic_load(&s->state) == ST_PENDING) {
    for (int i = 0; i < s->num_parents; ++i) {
      pg_opstate* p = s->parents[i];
      if (atomic_load(&p->state) != ST_FAILED) continue;
      const char* detail = p->detail != NULL ? p->detail : "(no message)";
      s->code = p->code;
      s->origin_op = p->origin_op;
      s->origin = p->origin;
      s->detail = dup_str(detail);
      s->msg = format("%s on %s: computed from the result of %s, which failed "
                      "asynchronously: %s", s->op, dev->name, p->origin_op,
                      detail);
      atomic_store_explicit(&s->state, ST_FAILED, memory_order_release);
      break;
    }
    if (atomic_load(&s->state) == ST_PENDING)
      atomic_store_explicit(&s->state, ST_OK, memory_order_release);
  }
  drop_parents(s);
}

/* Removes the log's prefix up to and including `last`, settling each. */
static void settle_prefix(pg_device* dev, pg_oplog* L, pg_opstate* last) {
  if (last == NULL) return;
  for (;;) {
    pg_opstate* s = L->head;
    L->head = s->next;
    if (L->head == NULL) L->tail = NULL;
    L->len--;
    settle(dev, s);
    pg_opstate_unref(s); /* the log's reference */
    if (s == last) break;
  }
}

/* Gives `s` its verdict and returns its event to the pool. */
static void close_event(pg_device* dev, pg_oplog* L, pg_opstate* s, int verdict) {
  s->verdict = verdict;
  if (verdict == V_ERROR) L->verdicts_tell = 1;
  pg_event_release(dev, s->event);
  s->event = NULL;
}

/* Reads the verdicts of states up to `last` (all of the log if NULL) whose
 * events have completed; returns the last state whose verdict is known with
 * all before it known too. */
static pg_opstate* read_verdicts(pg_device* dev, pg_oplog* L, pg_opstate* last) {
  pg_opstate* known = NULL;
  for (pg_opstate* s = L->head; s != NULL; s = s->next) {
    if (s->event != NULL) {
      SE_EventStatus e = dev->se->get_event_status(dev->device, s->event->handle);
      if (e == SE_EVENT_PENDING) break;
      close_event(dev, L, s, e == SE_EVENT_ERROR ? V_ERROR : V_COMPLETE);
    } else if (s->verdict == V_UNKNOWN && s->covered) {
      /* The span's event, on the first op after `s` that is not covered. */
      pg_opstate* c = s->next;
      while (c != NULL && c->covered && c->event == NULL && c->verdict == V_UNKNOWN)
        c = c->next;
      if (c == NULL) break; /* the span is still being launched */
      if (c->event != NULL) {
        SE_EventStatus e = dev->se->get_event_status(dev->device, c->event->handle);
        if (e == SE_EVENT_PENDING) break;
        close_event(dev, L, c, e == SE_EVENT_ERROR ? V_ERROR : V_COMPLETE);
      }
      if (c->verdict == V_UNKNOWN) break; /* no event: only a synchronisation tells */
      for (pg_opstate* t = s; t != c; t = t->next) {
        t->verdict = c->verdict;
        t->span = c->serial;
      }
      c->span = c->serial;
    } else if (s->verdict == V_UNKNOWN) {
      break; /* no event could be recorded: only a synchronisation tells */
    }
    known = s;
    if (s == last) break;
  }
  return known;
}

static int any_error_verdict(pg_oplog* L, pg_opstate* last) {
  for (pg_opstate* s = L->head; s != NULL; s = s->next) {
    if (s->verdict == V_ERROR && atomic_load(&s->state) == ST_PENDING) return 1;
    if (s == last) break;
  }
  return 0;
}

static void remember_error(pg_oplog* L, TF_Code code, const char* msg) {
  free(L->last_msg);
  L->last_code = code;
  L->last_msg = dup_str(msg);
}

/*** Launch and reap ***/

static void reap(pg_device* dev, pg_oplog* L);

static int64_t log_op(pg_device* dev, const char* op, TF_Tensor* const* inputs,
                      int num_inputs, pg_event* event, int covered, TF_Tensor** outputs,
                      int num_outputs) {
  pg_oplog* L = dev->oplog;
  int np = 0;
  for (int i = 0; i < num_inputs; ++i) {
    pg_opstate* p = inputs[i] != NULL ? inputs[i]->state : NULL;
    if (p != NULL && atomic_load(&p->state) != ST_OK) np++;
  }
  pg_opstate* s = calloc(1, sizeof *s + (size_t)np * sizeof(pg_opstate*));
  if (s == NULL) {
    /* Without a state the outputs count as good; the error, if any, is
     * still reported by the next synchronisation. */
    pg_event_release(dev, event);
    return 0;
  }
  for (int i = 0; i < num_inputs && s->num_parents < np; ++i) {
    pg_opstate* p = inputs[i] != NULL ? inputs[i]->state : NULL;
    if (p == NULL || atomic_load(&p->state) == ST_OK) continue;
    pg_opstate_ref(p);
    s->parents[s->num_parents++] = p;
  }
  s->op = op;
  s->event = event;
  s->covered = covered;
  s->thread = pg_thread_key();
  atomic_init(&s->refs, 1 + num_outputs);
  atomic_init(&s->state, ST_PENDING);
  for (int i = 0; i < num_outputs; ++i) {
    pg_opstate_unref(outputs[i]->state);
    outputs[i]->state = s;
  }
  pthread_mutex_lock(&L->mu);
  s->serial = ++L->serials;
  if (L->tail != NULL) L->tail->next = s;
  else L->head = s;
  L->tail = s;
  int64_t len = ++L->len;
  pthread_mutex_unlock(&L->mu);
  return len;
}

int64_t pg_op_launched(pg_device* dev, const char* op, TF_Tensor* const* inputs,
                       int num_inputs, pg_event* event, TF_Tensor** outputs,
                       int num_outputs) {
  return log_op(dev, op, inputs, num_inputs, event, 0, outputs, num_outputs);
}

int64_t pg_op_launched_in_span(pg_device* dev, const char* op, TF_Tensor* const* inputs,
                               int num_inputs, TF_Tensor** outputs, int num_outputs) {
  return log_op(dev, op, inputs, num_inputs, NULL, 1, outputs, num_outputs);
}

void pg_op_close_span(pg_device* dev) {
  pg_oplog* L = dev->oplog;
  pg_event* ev = pg_event_record_end(dev, pg_event_acquire(dev, NULL));
  pthread_mutex_lock(&L->mu);
  /* The launch lock is held: the log's newest state is the span's last
   * logged op, unless a synchronisation has settled it already. */
  pg_opstate* t = L->tail;
  if (t != NULL && t->covered && t->event == NULL && t->verdict == V_UNKNOWN) {
    t->event = ev; /* NULL: the span waits for a synchronisation */
    t->covered = 0;
    ev = NULL;
  }
  pthread_mutex_unlock(&L->mu);
  if (ev != NULL) { /* nothing left to cover: the event goes back once done */
    TF_Status* st = TF_NewStatus();
    dev->se->block_host_for_event(dev->device, ev->handle, st);
    TF_DeleteStatus(st);
    pg_event_release(dev, ev);
  }
}

void pg_op_maintain_span(pg_device* dev, int64_t first, int64_t last) {
  if (last < 0) return;
  /* A reap is due where pg_op_maintain after any op of the span would have
   * made one: at a multiple of 32 from REAP_AFTER on. */
  int64_t due = last & ~(int64_t)31;
  if (last < SYNC_AFTER && first >= 0 && due >= first && due >= REAP_AFTER) last = due;
  pg_op_maintain(dev, last);
}

void pg_op_maintain(pg_device* dev, int64_t len) {
  pg_oplog* L = dev->oplog;
  if (len >= SYNC_AFTER) {
    TF_Status* st = TF_NewStatus();
    pg_device_sync(dev, st); /* an error no op took is kept as an orphan */
    if (TF_GetCode(st) != TF_OK) {
      pthread_mutex_lock(&L->mu);
      if (L->orphan_code == TF_OK) {
        L->orphan_code = TF_GetCode(st);
        L->orphan_msg = dup_str(TF_Message(st));
      }
      pthread_mutex_unlock(&L->mu);
    }
    TF_DeleteStatus(st);
  } else if (len >= REAP_AFTER && (len & 31) == 0) {
    reap(dev, L);
  }
}

/* Whether the work of log state `s` (at index `j` of the log) is known to be
 * done; `j` is advanced past states without an event (none could be
 * recorded, or their verdict was read and the event released) to the next
 * one that has an event or a verdict, up to `hi`. */
static int known_done(pg_device* dev, pg_opstate** s, int64_t* j, int64_t hi) {
  while (*j < hi && (*s)->event == NULL && (*s)->verdict == V_UNKNOWN) {
    *s = (*s)->next;
    ++*j;
  }
  if (*j >= hi) return 0;
  return (*s)->event == NULL ||
         dev->se->get_event_status(dev->device, (*s)->event->handle) != SE_EVENT_PENDING;
}

/* A state of the log's first `n` (1 <= n <= len) whose work is done, late in
 * the log, or NULL if none is known to be. Events complete in stream order,
 * so the states whose work is done are a prefix of the log, and a completed
 * event marks every state before it done too. The device is usually only a
 * few ops behind: the state 8 before the end is tried first; if it is not
 * done yet, the newest done state before it is found by bisection. */
static pg_opstate* newest_done(pg_device* dev, pg_oplog* L, int64_t n) {
  int64_t near = n > 8 ? n - 8 : 0, j = near;
  pg_opstate* s = L->head;
  for (int64_t i = 0; i < near; ++i) s = s->next;
  if (known_done(dev, &s, &j, n)) return s;
  pg_opstate* done = NULL;
  pg_opstate* from = L->head; /* state `lo` */
  int64_t lo = 0, hi = near;  /* done: [0, lo); not known: [lo, hi) */
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    s = from;
    for (int64_t i = lo; i < mid; ++i) s = s->next;
    j = mid;
    if (known_done(dev, &s, &j, hi)) {
      done = s;
      from = s->next;
      lo = j + 1;
    } else {
      hi = mid;
    }
  }
  return done;
}

/* Settles, without waiting, the prefix of ops that are known to be done and
 * good. Skipped while a synchronisation runs.
 *
 * While the device has never reported an asynchronous error, a failure of
 * any op is still held by the stream (the plugin keeps its first error until
 * a synchronisation clears it, and none has cleared one): the ops whose work
 * came before a completed event are good when the stream reports no error,
 * and their own verdicts need not be read. The completed prefix is found by
 * bisection, so a reap reads a few events instead of one per op. Once an
 * error was reported, a verdict may say ERROR while the stream has nothing
 * to say, and every verdict is read. */
static void reap(pg_device* dev, pg_oplog* L) {
  if (pthread_mutex_trylock(&L->sync_mu) != 0) return;
  pthread_mutex_lock(&L->mu);
  pg_opstate* known;
  int quick = L->last_code == TF_OK && L->orphan_code == TF_OK && L->len > 0;
  if (quick) {
    known = newest_done(dev, L, L->len);
  } else {
    known = read_verdicts(dev, L, NULL);
  }
  if (known != NULL && (quick || !any_error_verdict(L, known))) {
    TF_Status* st = TF_NewStatus();
    dev->se->get_stream_status(dev->device, dev->stream, st);
    if (TF_GetCode(st) == TF_OK) {
      if (quick) {
        /* done, and good: their events go back unread */
        for (pg_opstate* s = L->head;; s = s->next) {
          if (s->event != NULL) close_event(dev, L, s, V_COMPLETE);
          if (s == known) break;
        }
      }
      settle_prefix(dev, L, known);
    }
    TF_DeleteStatus(st);
  }
  pthread_mutex_unlock(&L->mu);
  pthread_mutex_unlock(&L->sync_mu);
}

int64_t pg_device_unsettled_ops(pg_device* dev) {
  pg_oplog* L = dev->oplog;
  pthread_mutex_lock(&L->mu);
  int64_t n = L->len;
  pthread_mutex_unlock(&L->mu);
  return n;
}

/*** Synchronisation ***/

/* Whether `s` (NULL: no) is still in the log (under mu). */
static int in_log(pg_oplog* L, pg_opstate* s) {
  if (s == NULL) return 0;
  for (pg_opstate* t = L->head; t != NULL; t = t->next)
    if (t == s) return 1;
  return 0;
}

/* Records an event at the end of the device's default stream and waits for
 * it; the stream's error is neither read nor cleared. With `exclusive` the
 * event is recorded under the launch lock, so that no op launches in
 * between (the event would take the verdict of its work). Returns 0, with
 * `status` set, when no event could be had, recorded or waited for. */
static int wait_end_event(pg_device* dev, int exclusive, TF_Status* status) {
  if (exclusive) pg_op_launch_lock(dev);
  pg_event* ev = pg_event_acquire(dev, status);
  if (ev != NULL)
    dev->se->record_event(dev->device, dev->stream, ev->handle, status);
  if (exclusive) pg_op_launch_unlock(dev);
  if (ev == NULL) return 0;
  if (TF_GetCode(status) == TF_OK)
    dev->se->block_host_for_event(dev->device, ev->handle, status);
  pg_event_release(dev, ev);
  return TF_GetCode(status) == TF_OK;
}

/* Waits for the default stream and clears its error into `status`. */
static void wait_stream(pg_device* dev, TF_Status* status) {
  if (dev->se->block_host_until_done != NULL) {
    dev->se->block_host_until_done(dev->device, dev->stream, status);
    return;
  }
  /* Default: an event at the end of the stream, then the stream's error. */
  if (wait_end_event(dev, 1, status))
    dev->se->get_stream_status(dev->device, dev->stream, status);
}

/* Not under the launch lock: a buffer may be released while its holder
 * launches, and work launched meanwhile need not be waited for. */
void pg_device_drain_quietly(pg_device* dev) {
  TF_Status* st = TF_NewStatus();
  if (!wait_end_event(dev, 0, st)) {
    TF_SetStatus(st, TF_OK, "");
    dev->se->synchronize_all_activity(dev->device, st);
  }
  TF_DeleteStatus(st);
}

/* Waits until the events of every state in the log have completed. */
static void wait_logged(pg_device* dev, pg_oplog* L) {
  pg_event* last = NULL;
  pthread_mutex_lock(&L->mu);
  for (pg_opstate* s = L->head; s != NULL; s = s->next)
    if (s->event != NULL) last = s->event;
  if (last != NULL) {
    /* Events complete in stream order: the last one implies the others. */
    TF_Status* st = TF_NewStatus();
    dev->se->block_host_for_event(dev->device, last->handle, st);
    TF_DeleteStatus(st);
  }
  pthread_mutex_unlock(&L->mu);
}

/* Gives the error `code`/`msg` a synchronisation reported to the ops it
 * belongs to; `upto` is the last op launched before the synchronisation
 * began. Returns 0 if it belongs to no op. */
static int attribute(pg_device* dev, pg_oplog* L, pg_opstate* upto,
                     TF_Code code, const char* msg) {
  if (upto == NULL || !any_error_verdict(L, upto)) {
    /* An op launched while the stream drained (after `upto`, or any op if
     * the log was empty when the synchronisation began) may have failed
     * before the error was cleared: let launches in progress finish (an op
     * is logged before the launch lock is released), wait for the ops
     * logged now and look again. */
    pthread_mutex_unlock(&L->mu);
    pg_op_launch_lock(dev);
    pg_op_launch_unlock(dev);
    wait_logged(dev, L);
    pthread_mutex_lock(&L->mu);
    upto = read_verdicts(dev, L, NULL);
  }
  if (upto == NULL) return 0;
  int precise = any_error_verdict(L, upto);
  /* No pending op's event says ERROR, but the device's events do tell: the
   * error is that of an op a synchronisation before this one failed by its
   * verdict (launched while that one drained the stream, its error stayed
   * on the stream). It is taken; no other op fails for it. */
  if (!precise && L->verdicts_tell) return 1;
  for (pg_opstate* s = L->head; s != NULL; s = s->next) {
    if (!precise || s->verdict == V_ERROR) fail_own(L, dev, s, code, msg);
    if (s == upto) break;
  }
  /* Without verdicts, any op up to `upto` may be the one: all fail. */
  if (!precise) settle_prefix(dev, L, upto);
  return 1;
}

void pg_device_sync(pg_device* dev, TF_Status* status) {
  pg_oplog* L = dev->oplog;
  TF_SetStatus(status, TF_OK, "");
  pthread_mutex_lock(&L->sync_mu);
  pthread_mutex_lock(&L->mu);
  pg_opstate* upto = L->tail;
  pthread_mutex_unlock(&L->mu);

  TF_Status* st = TF_NewStatus();
  wait_stream(dev, st);

  pthread_mutex_lock(&L->mu);
  TF_Code code = TF_GetCode(st);
  int present = in_log(L, upto);
  if (code == TF_OK && L->last_code == TF_OK && L->orphan_code == TF_OK && present) {
    /* The stream drained without an error and the device never reported
     * one: every op up to `upto` is done and good (as in `reap`), and their
     * events go back unread (a read costs a call into the plugin each). */
    for (pg_opstate* s = L->head;; s = s->next) {
      if (s->event != NULL) close_event(dev, L, s, V_COMPLETE);
      if (s == upto) break;
    }
  } else {
    read_verdicts(dev, L, upto);
  }
  int taken = 0;
  if (code != TF_OK) {
    remember_error(L, code, TF_Message(st));
    taken = attribute(dev, L, upto, code, TF_Message(st));
    present = in_log(L, upto); /* attribute may have settled it */
  }
  /* A verdict that says ERROR fails its op even when the error message went
   * to an earlier synchronisation. */
  for (pg_opstate* s = L->head; s != NULL; s = s->next) {
    if (s->verdict == V_ERROR)
      fail_own(L, dev, s, L->last_code,
               L->last_msg != NULL ? L->last_msg
                                   : "the plugin marked the op's completion "
                                     "event as failed");
    if (s == upto) break;
  }
  /* Everything launched before the synchronisation is settled now. */
  if (present) settle_prefix(dev, L, upto);
  if (code != TF_OK && !taken) {
    TF_SetStatus(status, code, TF_Message(st));
  } else if (L->orphan_code != TF_OK) {
    TF_SetStatus(status, L->orphan_code, L->orphan_msg != NULL ? L->orphan_msg : "");
    L->orphan_code = TF_OK;
    free(L->orphan_msg);
    L->orphan_msg = NULL;
  }
  pthread_mutex_unlock(&L->mu);
  pthread_mutex_unlock(&L->sync_mu);
  TF_DeleteStatus(st);
}

/* Removes (and returns, if `out` is non-NULL and nothing is in it yet) the
 * notes of `thread` about failure `origin` (any failure if origin is 0). */
static void take_notes(pg_oplog* L, uint64_t thread, uint64_t origin,
                       TF_Status* out) {
  int kept = 0;
  for (int i = 0; i < L->num_notes; ++i) {
    pg_note* n = &L->notes[i];
    if (n->thread == thread && (origin == 0 || n->origin == origin)) {
      if (out != NULL && TF_GetCode(out) == TF_OK) TF_SetStatus(out, n->code, n->msg);
      free(n->msg);
      continue;
    }
    L->notes[kept++] = *n;
  }
  L->num_notes = kept;
}

void pg_device_synchronize(pg_device* dev, TF_Status* status) {
  pg_device_sync(dev, status);
  if (TF_GetCode(status) != TF_OK) return;
  pg_oplog* L = dev->oplog;
  pthread_mutex_lock(&L->mu);
  take_notes(L, pg_thread_key(), 0, status);
  pthread_mutex_unlock(&L->mu);
}

void pg_opstate_check(pg_device* dev, pg_opstate* s, TF_Status* status) {
  TF_SetStatus(status, TF_OK, "");
  if (s == NULL) return;
  if (atomic_load_explicit(&s->state, memory_order_acquire) == ST_PENDING) {
    TF_Status* st = TF_NewStatus();
    pg_device_sync(dev, st);
    TF_DeleteStatus(st); /* an error of no op does not concern this value */
  }
  if (atomic_load_explicit(&s->state, memory_order_acquire) != ST_FAILED) return;
  TF_SetStatus(status, s->code, s->msg != NULL ? s->msg : "asynchronous failure");
  pg_oplog* L = dev->oplog;
  pthread_mutex_lock(&L->mu);
  take_notes(L, pg_thread_key(), s->origin, NULL); /* reported to this thread */
  pthread_mutex_unlock(&L->mu);
}
