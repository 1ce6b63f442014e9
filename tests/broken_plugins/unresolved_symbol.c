/* Broken: needs a symbol neither the core nor the system provides.
 * Expected: quarantined, "dlopen failed: ... undefined symbol:
 * pg_test_symbol_nobody_defines". */
extern int pg_test_symbol_nobody_defines(void);
#define MINI_INIT_HOOK(params, status) \
  if (pg_test_symbol_nobody_defines() == 7) params->platform->name = "X";
#include "mini_device.h"
