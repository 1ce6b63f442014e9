/* Host reference device: streams as task queues.
 *
 * Each SP_Stream owns a worker thread that runs a FIFO queue of tasks, one at
 * a time, in the order they were enqueued. Everything asynchronous the plugin
 * does (copies, fills, kernels, event records, timer marks, host callbacks)
 * is a task on some stream.
 *
 * A stream keeps the first error reported by its tasks (code + message).
 * block_host_until_done reports it and clears it. */
#ifndef MY_DEVICE_STREAM_H_
#define MY_DEVICE_STREAM_H_

#include <stdint.h>

#include "stream_executor.h"
#include "tf_status.h"

#pragma GCC visibility push(hidden)

/* What a task does. Used for the policy on failed streams: see
 * md_task_runs_after_error in stream.c. */
typedef enum md_task_kind {
  MD_TASK_KERNEL,  /* kernel work */
  MD_TASK_COPY,    /* memcpy / memset */
  MD_TASK_CONTROL, /* event records and waits, timer marks, host callbacks */
} md_task_kind;

/* A task body. `arg` is the pointer given to md_stream_enqueue; `stream` is
 * the stream running it (for md_stream_set_error). */
typedef void (*md_task_fn)(void* arg, SP_Stream stream);

/* Appends a task to `stream`. Takes ownership of `arg`, which must be NULL or
 * come from malloc: the queue frees it with free() after the task has run (or
 * was skipped). Returns 0 on success; on failure (out of memory or a stream
 * being destroyed) frees `arg` and returns -1. */
int md_stream_enqueue(SP_Stream stream, md_task_kind kind, md_task_fn fn,
                      void* arg);
/* md_stream_enqueue, recording the task in the running profile (if any) as
 * `name` (name_len bytes) moving or producing `bytes` bytes. */
int md_stream_enqueue_traced(SP_Stream stream, md_task_kind kind,
                             md_task_fn fn, void* arg, const char* name,
                             int name_len, int64_t bytes);

/* md_stream_enqueue_traced for a kernel task of `work` elements: one of at
 * most the device's inline_work elements runs at once on the calling
 * thread when the stream is idle and no profile records it (see
 * stream.c); it has run when this returns. */
int md_stream_enqueue_small(SP_Stream stream, md_task_fn fn, void* arg,
                            const char* name, int name_len, int64_t work);

/* The next stream of the same device (md_device.streams list; read it with
 * the device's streams_mu held), or NULL. */
SP_Stream md_stream_next(SP_Stream stream);

/* Records an error on `stream` unless it already has one (the first error
 * wins). Callable from tasks and from any thread. */
void md_stream_set_error(SP_Stream stream, TF_Code code, const char* message);
/* Nonzero while the stream holds an error (kernels skip composing a second
 * message; md_stream_set_error keeps only the first anyway). */
int md_stream_has_error(SP_Stream stream);

/*** Capture (capture.c builds SP_StreamCaptureFns on these) ***/

/* A recorded sequence of tasks, reference counted; it owns the tasks'
 * arguments and frees them with its last reference. */
typedef struct md_task_list md_task_list;

/* Puts `stream` in capture mode: md_stream_enqueue records kernel and copy
 * tasks instead of queueing them, and refuses control tasks (events, timer
 * marks, host callbacks, stream dependencies run once by nature). Returns -1
 * if the stream is already capturing or out of memory. */
int md_stream_begin_capture(SP_Stream stream);

/* Leaves capture mode and returns the recorded tasks (one reference), or
 * NULL with `status` set if a task was refused or memory ran out. */
md_task_list* md_stream_end_capture(SP_Stream stream, TF_Status* status);

void md_task_list_ref(md_task_list* list);
void md_task_list_unref(md_task_list* list);

/* Enqueues one task that runs every task of `list` in order (holding a
 * reference until it has run). Returns 0, or -1 as md_stream_enqueue. */
int md_stream_enqueue_replay(SP_Stream stream, md_task_list* list);

/*** Markers (events build on these) ***/

/* A marker: runs right after the work enqueued before it, with the stream's
 * mutex held (it must be quick and must not touch the stream). `failed` is
 * nonzero if a task of the stream failed since the previous marker, so an
 * event reports an error exactly when work between it and the previous event
 * on the same stream failed (the contract of record_event in
 * stream_executor.h). */
typedef void (*md_marker_fn)(void* arg, int failed);

/* The most bytes of argument a marker carries. */
#define MD_MARKER_ARG_SIZE 16

/* Adds a marker after the work enqueued so far (at once if the stream is
 * idle). The `size` bytes at `arg` (at most MD_MARKER_ARG_SIZE) are copied
 * into the marker, whose `fn` gets a pointer to the copy. Markers are
 * recorded after every op, so the common cases allocate nothing: on an idle
 * stream the marker runs at once, and the first marker after a task is kept
 * in the task. Returns 0, or -1 on
 * failure, also on a capturing stream (a capture refuses markers, as it
 * refuses control tasks) or when `size` is too big. */
int md_stream_add_marker(SP_Stream stream, md_marker_fn fn, const void* arg,
                         size_t size);

#pragma GCC visibility pop

#endif /* MY_DEVICE_STREAM_H_ */
