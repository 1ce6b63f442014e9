// The checks of the stand-in runtime's test programs: each failed check
// prints "<program>: <what>" and is counted; main() ends with sim_result().
#pragma once
#include <cstdio>

namespace sim_check {

inline const char*& program() {
  static const char* name = "sim";
  return name;
}

inline int& failures() {
  static int count = 0;
  return count;
}

inline void check(bool ok, const char* what) {
  if (ok) return;
  ++failures();
  fprintf(stderr, "%s: %s\n", program(), what);
}

// Prints "<program>: OK" and returns 0, or returns 1 after failures.
inline int result() {
  if (failures() != 0) return 1;
  printf("%s: OK\n", program());
  return 0;
}

}  // namespace sim_check
