/* Legal: null_handles.c with every stream NULL (the default stream too) and
 * stream capture. The capture callbacks record nothing (the MINI device runs
 * work at once) and answer a NULL graph and exec. Expected: captures work;
 * the core creates the device's capture stream once, however many captures
 * follow (it knows the stream exists by a flag of its own: the handle is
 * NULL), and destroys every graph end_capture gave, NULL included. */
#define NULL_DEFAULT_STREAM 1
#include "stream_capture.h"

static int graphs_destroyed = 0;
int null_graphs_destroyed(void) { return graphs_destroyed; }

static void cap_begin(const SP_Device* d, SP_Stream s, TF_Status* st) {
  (void)d, (void)s, (void)st;
}
static void cap_end(const SP_Device* d, SP_Stream s, SP_Graph* g, TF_Status* st) {
  (void)d, (void)s, (void)st;
  *g = NULL;
}
static void cap_instantiate(const SP_Device* d, SP_Graph g, SP_GraphExec* e,
                            TF_Status* st) {
  (void)d, (void)g, (void)st;
  *e = NULL;
}
static void cap_launch(const SP_Device* d, SP_Stream s, SP_GraphExec e, TF_Status* st) {
  (void)d, (void)s, (void)e, (void)st;
}
static void cap_destroy(const SP_Device* d, SP_Graph g) {
  (void)d, (void)g;
  graphs_destroyed++;
}
static void cap_destroy_exec(const SP_Device* d, SP_GraphExec e) { (void)d, (void)e; }

void SE_InitStreamCapture(SE_StreamCaptureRegistrationParams* params,
                          TF_Status* status) {
  (void)status;
  params->capture_fns->struct_size = SP_STREAM_CAPTURE_FNS_STRUCT_SIZE;
  params->capture_fns->begin_capture = cap_begin;
  params->capture_fns->end_capture = cap_end;
  params->capture_fns->instantiate = cap_instantiate;
  params->capture_fns->launch = cap_launch;
  params->capture_fns->destroy_graph = cap_destroy;
  params->capture_fns->destroy_graph_exec = cap_destroy_exec;
}

#include "null_handles.c"
