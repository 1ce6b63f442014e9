/* The ONNX Runtime tables the bridge negotiated and the statuses it makes
 * with them: what every other file of the bridge uses (ort_ep.c fills the
 * tables when ONNX Runtime creates the factories). */
#include <stdarg.h>
#include <stdio.h>

#include "ort_bridge.h"

const OrtApi* pg_ort;       /* the negotiated OrtApi */
const OrtEpApi* pg_ort_ep;  /* its OrtEpApi */
uint32_t pg_ort_version;    /* its version */

OrtStatus* pg_ort_vstatus(const OrtApi* api, int code, const char* fmt, va_list ap) {
  char msg[2048];
  vsnprintf(msg, sizeof msg, fmt, ap);
  return API_FN(api, PG_ORT_CreateStatus, OrtStatus* (*)(int, const char*))(code, msg);
}

OrtStatus* pg_ort_status(int code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  OrtStatus* s = pg_ort_vstatus(pg_ort, code, fmt, ap);
  va_end(ap);
  return s;
}

void pg_ort_drop(OrtStatus* s) {
  if (s != NULL) CALL(ReleaseStatus, void (*)(OrtStatus*))(s);
}
