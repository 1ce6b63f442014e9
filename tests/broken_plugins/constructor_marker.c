/* A library whose constructor runs as soon as it is opened: it writes the
 * file named by PLUGGABLE_TEST_MARKER. The security tests use it to prove
 * that a refused file is never opened. */
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void write_marker(void) {
  const char* path = getenv("PLUGGABLE_TEST_MARKER");
  if (path == NULL) return;
  FILE* f = fopen(path, "w");
  if (f != NULL) {
    fputs("opened\n", f);
    fclose(f);
  }
}
#include "mini_device.h"
